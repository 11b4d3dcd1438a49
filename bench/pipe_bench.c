/* Our side of bench/run.py's `pipeline` cases, the mirror of bench/tjs_pipeline.mjs: one
 * tm_pipeline_create, then the calls, timed in one process.
 *
 *   pipe_bench feature-extraction REPO --texts FILE.json [--batch 32] [--threads T]
 *              [--dtype fp32] [--options JSON]
 *
 * FILE.json: an array of strings, called in batches of --batch (each call's inputs are
 * [[texts...]], as transformers.js's pipe(texts) takes them). Prints one JSON line:
 * load_ms (tm_pipeline_create), total_ms (the calls, the JSON results included: that is
 * what the API gives), calls, texts, checksum (the sum of every embedding value, from the
 * results' data). Text generation is timed by `transmuter generate --json`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "transmuter.h"
#include "hub/json.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    fclose(f);
    if (s) s[n] = '\0', *len = (size_t)n;
    return s;
}

/* Appends s as a JSON string. */
static void put_string(char **buf, size_t *n, size_t *cap, const char *s, size_t len) {
    size_t need = *n + 6 * len + 4;
    if (need > *cap) {
        *cap = need * 2;
        *buf = realloc(*buf, *cap);
        if (!*buf) exit(1);
    }
    char *o = *buf + *n;
    *o++ = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') *o++ = '\\', *o++ = (char)c;
        else if (c < 0x20) o += sprintf(o, "\\u%04x", c);
        else *o++ = (char)c;
    }
    *o++ = '"';
    *n = (size_t)(o - *buf);
}

static double sum_data(const char *json) {
    tm_json *v = tm_json_parse(json, strlen(json));
    if (!v) return 0.0 / 0.0;
    const tm_json *data = tm_json_get(v, "data");
    double s = 0;
    for (int i = 0; data && i < data->n; i++) s += data->items[i].number;
    tm_json_free(v);
    return s;
}

int main(int argc, char **argv) {
    if (argc < 3 || strcmp(argv[1], "feature-extraction")) {
        fprintf(stderr, "usage: pipe_bench feature-extraction REPO --texts FILE.json [--batch N] "
                        "[--threads T] [--dtype D] [--options JSON]\n");
        return 2;
    }
    const char *texts_path = NULL, *dtype = "fp32", *options = "{\"pooling\":\"mean\",\"normalize\":true}";
    int batch = 32, threads = 1;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--texts")) texts_path = argv[i + 1];
        else if (!strcmp(argv[i], "--batch")) batch = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--dtype")) dtype = argv[i + 1];
        else if (!strcmp(argv[i], "--options")) options = argv[i + 1];
    }
    size_t len = 0;
    char *text = texts_path ? read_file(texts_path, &len) : NULL;
    tm_json *texts = text ? tm_json_parse(text, len) : NULL;
    if (!texts || texts->type != TM_JSON_ARRAY) {
        fprintf(stderr, "pipe_bench: cannot read --texts %s\n", texts_path ? texts_path : "(none)");
        return 1;
    }
    char load[128];
    snprintf(load, sizeof load, "{\"dtype\":\"%s\",\"threads\":%d}", dtype, threads);
    tm_error err = {0};
    tm_pipeline *p = NULL;
    double t0 = now_ms();
    if (tm_pipeline_create(argv[1], argv[2], load, &p, &err) != TM_OK) {
        fprintf(stderr, "pipe_bench: %s\n", err.message);
        return 1;
    }
    double load_ms = now_ms() - t0, total = 0, checksum = 0;
    int calls = 0;
    size_t cap = 1 << 16;
    char *in = malloc(cap);
    for (int i = 0; i < texts->n; i += batch) {
        size_t n = 0;
        in[n++] = '[', in[n++] = '[';
        for (int j = i; j < texts->n && j < i + batch; j++) {
            if (j > i) in[n++] = ',';
            const tm_json *t = &texts->items[j];
            put_string(&in, &n, &cap, t->string, t->len);
        }
        if (n + 3 > cap) in = realloc(in, cap = n + 3);
        in[n++] = ']', in[n++] = ']', in[n] = '\0';
        char *result = NULL;
        double t1 = now_ms();
        if (tm_pipeline_call(p, in, options, &result, &err) != TM_OK) {
            fprintf(stderr, "pipe_bench: call %d: %s\n", calls, err.message);
            return 1;
        }
        total += now_ms() - t1;
        calls++;
        checksum += sum_data(result);
        free(result);
    }
    printf("{\"load_ms\": %.3f, \"total_ms\": %.3f, \"calls\": %d, \"texts\": %d, \"checksum\": %.9g}\n",
           load_ms, total, calls, texts->n, checksum);
    free(in);
    tm_json_free(texts);
    free(text);
    tm_pipeline_free(p);
    return 0;
}
