/* `transmuter stream`: an encoder fed a stream of requests of changing shapes through the
 * model's plan cache (tm_model_run), as a server sees them: the total time, plan
 * creation included, and how many plans were made. Requests are JSON lines
 * {"input_ids": [[...], ...]} (rows of one length); attention_mask is ones and
 * token_type_ids zeros where the model takes them. Not a server, not a benchmark harness
 * (bench/run.py runs it beside ONNX Runtime). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "transmuter.h"
#include "hub/json.h"

int tm__cmd_stream(int argc, char **argv);

double tm__peak_rss_mb(void);   /* tools/generate.c */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void usage(FILE *f) {
    fprintf(f, "usage: transmuter stream MODEL --requests FILE.jsonl [--threads N] [--json]\n"
               "Runs each request (a JSON line {\"input_ids\": [[...], ...]}) through the model's\n"
               "plan cache in order; prints the total time (plan creation included), the plans\n"
               "made, and per request the sum of the first output's elements (--json: one line\n"
               "with requests, load_ms, total_ms, plans_made, generic_plans, checksums).\n");
}

typedef struct request {
    int64_t rows, cols;
    int64_t *ids;
} request;

/* The requests of a JSON-lines file; -1 with a message naming the line on error. */
static int read_requests(const char *path, request **out) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "transmuter: stream: cannot open '%s'\n", path);
        return -1;
    }
    int n = 0, cap = 64, line_no = 0, bad = 0;
    request *r = malloc((size_t)cap * sizeof *r);
    char *line = NULL;
    size_t lcap = 0;
    ssize_t len;
    while (r && !bad && (len = getline(&line, &lcap, f)) >= 0) {
        line_no++;
        if (len <= 1) continue;
        tm_json *j = tm_json_parse(line, (size_t)len);
        const tm_json *ids = j ? tm_json_get(j, "input_ids") : NULL;
        if (!ids || ids->type != TM_JSON_ARRAY || ids->n < 1 || ids->items[0].type != TM_JSON_ARRAY ||
            ids->items[0].n < 1) {
            fprintf(stderr, "transmuter: stream: %s line %d: expected {\"input_ids\": [[ids...], ...]}\n",
                    path, line_no);
            bad = 1;
        }
        if (!bad && n == cap) {
            request *g = realloc(r, (size_t)(cap *= 2) * sizeof *g);
            if (!g) bad = 1;
            else r = g;
        }
        if (!bad) {
            request *q = &r[n];
            q->rows = ids->n;
            q->cols = ids->items[0].n;
            q->ids = malloc((size_t)(q->rows * q->cols) * sizeof *q->ids);
            for (int64_t a = 0; q->ids && a < q->rows && !bad; a++) {
                const tm_json *row = &ids->items[a];
                if (row->type != TM_JSON_ARRAY || row->n != q->cols) {
                    fprintf(stderr, "transmuter: stream: %s line %d: row %lld has another length\n",
                            path, line_no, (long long)a);
                    bad = 1;
                    break;
                }
                for (int64_t b = 0; b < q->cols; b++) {
                    if (row->items[b].type != TM_JSON_NUMBER) {
                        fprintf(stderr, "transmuter: stream: %s line %d: ids must be numbers\n",
                                path, line_no);
                        bad = 1;
                        break;
                    }
                    q->ids[a * q->cols + b] = (int64_t)row->items[b].number;
                }
            }
            if (!q->ids) bad = 1;
            if (!bad) n++;
            else free(q->ids);
        }
        tm_json_free(j);
    }
    free(line);
    fclose(f);
    if (!r || bad) {
        for (int i = 0; r && i < n; i++) free(r[i].ids);
        free(r);
        return -1;
    }
    *out = r;
    return n;
}

int tm__cmd_stream(int argc, char **argv) {
    const char *model_path = NULL, *req_path = NULL;
    int json = 0;
    tm_load_options lo;
    tm_load_options_default(&lo);
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--requests") && i + 1 < argc) req_path = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) lo.threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] != '-' && !model_path) model_path = argv[i];
        else {
            fprintf(stderr, "transmuter: stream: unknown argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!model_path || !req_path) {
        usage(stderr);
        return 2;
    }
    request *reqs = NULL;
    int n_req = read_requests(req_path, &reqs);
    if (n_req < 0) return 1;
    tm_model *m = NULL;
    tm_error err = {0};
    double t0 = now_ms();
    tm_status st = tm_model_load(model_path, &lo, &m, &err);
    double load_ms = now_ms() - t0;
    int rc = 1;
    double *sums = calloc((size_t)n_req + 1, sizeof *sums);
    int n_in = m ? tm_model_n_inputs(m) : 0, n_out = m ? tm_model_n_outputs(m) : 0;
    const char **names = calloc((size_t)n_in + 1, sizeof *names);
    const tm_tensor **in = calloc((size_t)n_in + 1, sizeof *in);
    tm_tensor **own = calloc((size_t)n_in + 1, sizeof *own);
    tm_tensor **out = calloc((size_t)n_out + 1, sizeof *out);
    if (st != TM_OK) {
        fprintf(stderr, "transmuter: %s\n", err.message);
        goto done;
    }
    if (!sums || !names || !in || !own || !out) goto done;
    for (int i = 0; i < n_in; i++) {
        tm_value_desc d;
        tm_model_input(m, i, &d);
        names[i] = d.name;
        if (strcmp(d.name, "input_ids") && strcmp(d.name, "attention_mask") &&
            strcmp(d.name, "token_type_ids")) {
            fprintf(stderr, "transmuter: stream: input '%s' is not one an encoder stream feeds "
                            "(input_ids, attention_mask, token_type_ids)\n", d.name);
            goto done;
        }
    }
    t0 = now_ms();
    for (int r = 0; r < n_req; r++) {
        int64_t dims[2] = {reqs[r].rows, reqs[r].cols};
        for (int i = 0; i < n_in; i++) {
            tm_value_desc d;
            tm_model_input(m, i, &d);
            own[i] = tm_tensor_new(d.dtype, 2, dims);
            if (!own[i]) goto done;
            int64_t cnt = dims[0] * dims[1];
            void *p = tm_tensor_data(own[i]);
            for (int64_t e = 0; e < cnt; e++) {
                int64_t v = !strcmp(d.name, "input_ids") ? reqs[r].ids[e]
                          : !strcmp(d.name, "attention_mask") ? 1 : 0;
                if (d.dtype == TM_INT32) ((int32_t *)p)[e] = (int32_t)v;
                else ((int64_t *)p)[e] = v;
            }
            in[i] = own[i];
        }
        st = tm_model_run(m, n_in, names, in, out, NULL, &err);
        for (int i = 0; i < n_in; i++) {
            tm_tensor_free(own[i]);
            own[i] = NULL;
        }
        if (st != TM_OK) {
            fprintf(stderr, "transmuter: stream: request %d: %s\n", r + 1, err.message);
            goto done;
        }
        const float *y = tm_tensor_data_const(out[0]);
        double s = 0;
        if (tm_tensor_dtype(out[0]) == TM_FLOAT)
            for (int64_t e = 0; e < tm_tensor_numel(out[0]); e++) s += y[e];
        sums[r] = s;
        for (int o = 0; o < n_out; o++) {
            tm_tensor_free(out[o]);
            out[o] = NULL;
        }
    }
    double total_ms = now_ms() - t0;
    tm_plan_stats ps = {.size = sizeof ps};
    tm_model_plan_stats(m, &ps);
    if (json) {
        printf("{\"requests\": %d, \"load_ms\": %.3f, \"total_ms\": %.3f, \"plans_made\": %zu, "
               "\"generic_plans\": %zu, \"generic_runs\": %zu, \"peak_rss_mb\": %.1f, "
               "\"checksums\": [", n_req, load_ms, total_ms, ps.plans, ps.generic_plans,
               ps.generic_runs, tm__peak_rss_mb());
        for (int r = 0; r < n_req; r++) printf("%s%.9g", r ? ", " : "", sums[r]);
        printf("]}\n");
    } else {
        printf("%d requests in %.1f ms (load %.1f ms); plans made: %zu for one shape, %zu serving "
               "many (%zu runs served by those)\n", n_req, total_ms, load_ms, ps.plans,
               ps.generic_plans, ps.generic_runs);
    }
    rc = 0;
done:
    for (int i = 0; own && i < n_in; i++) tm_tensor_free(own[i]);
    for (int o = 0; out && o < n_out; o++) tm_tensor_free(out[o]);
    free(own);
    free(out);
    free(in);
    free(names);
    free(sums);
    for (int r = 0; r < n_req; r++) free(reqs[r].ids);
    free(reqs);
    tm_model_free(m);
    return rc;
}
