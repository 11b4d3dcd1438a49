/* Encode throughput of our tokenizers, for bench/tok/bench.mjs (`make bench-tokenizers`):
 * reads a corpus (records of a 4-byte little-endian length and UTF-8 bytes, written by
 * bench/tok/corpus.mjs) and encodes every text once (add_special_tokens on, no padding nor
 * truncation), one text per call on each of --threads threads (--mode single) or in
 * batches of --batch texts through tm_tokenizer_encode_batch on --threads threads (--mode
 * batch); or times loading the tokenizer (--mode load, --repeat times). Prints one JSON
 * line (seconds, MB/s, tokens). Not a test: nothing here asserts a timing.
 * Usage: tok_bench TOKENIZER CORPUS [--mode single|batch|load] [--threads N] [--batch N]
 *        [--repeat N] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "transmuter.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* CPU time of the process (all threads): on a machine shared with other work, one-thread
 * runs compare more steadily in CPU time than in wall time. */
static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

typedef struct corpus {
    char *buf;
    size_t n, bytes;
    const char **texts;
    size_t *lens;
} corpus;

static int read_corpus(const char *path, corpus *c) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    rewind(f);
    c->buf = malloc((size_t)size + 1);
    if (!c->buf || fread(c->buf, 1, (size_t)size, f) != (size_t)size) {
        fclose(f);
        return -1;
    }
    fclose(f);
    size_t cap = 1024;
    c->texts = malloc(cap * sizeof *c->texts);
    c->lens = malloc(cap * sizeof *c->lens);
    for (size_t o = 0; o + 4 <= (size_t)size;) {
        const unsigned char *p = (const unsigned char *)c->buf + o;
        size_t len = (size_t)p[0] | (size_t)p[1] << 8 | (size_t)p[2] << 16 | (size_t)p[3] << 24;
        if (o + 4 + len > (size_t)size) return -1;
        if (c->n == cap) {
            cap *= 2;
            c->texts = realloc(c->texts, cap * sizeof *c->texts);
            c->lens = realloc(c->lens, cap * sizeof *c->lens);
        }
        c->texts[c->n] = c->buf + o + 4;
        c->lens[c->n++] = len;
        c->bytes += len;
        o += 4 + len;
    }
    return 0;
}

typedef struct job {
    const tm_tokenizer *tok;
    const corpus *c;
    int ith, nth;
    size_t tokens;
    int failed;
} job;

/* Texts i with i % nth == ith, one encode call each. */
static void *single_worker(void *arg) {
    job *j = arg;
    tm_encode_options o = tm_encode_options_default();
    for (size_t i = (size_t)j->ith; i < j->c->n; i += (size_t)j->nth) {
        tm_encoding *e = NULL;
        tm_error err;
        if (tm_tokenizer_encode(j->tok, j->c->texts[i], j->c->lens[i], NULL, 0, &o, &e, &err)) {
            fprintf(stderr, "tok_bench: text %zu: %s\n", i, err.message);
            j->failed = 1;
            return NULL;
        }
        j->tokens += tm_encoding_n(e);
        tm_encoding_free(e);
    }
    return NULL;
}

static int run_single(const tm_tokenizer *tok, const corpus *c, int threads, size_t *tokens) {
    job jobs[64];
    pthread_t th[64];
    if (threads > 64) threads = 64;
    for (int t = 0; t < threads; t++) jobs[t] = (job){tok, c, t, threads, 0, 0};
    for (int t = 1; t < threads; t++) pthread_create(&th[t], NULL, single_worker, &jobs[t]);
    single_worker(&jobs[0]);
    int failed = jobs[0].failed;
    *tokens = jobs[0].tokens;
    for (int t = 1; t < threads; t++) {
        pthread_join(th[t], NULL);
        failed |= jobs[t].failed;
        *tokens += jobs[t].tokens;
    }
    return failed ? -1 : 0;
}

static int run_batch(const tm_tokenizer *tok, const corpus *c, int threads, size_t batch,
                     size_t *tokens) {
    tm_encode_options o = tm_encode_options_default();
    o.threads = threads;
    tm_encoding **out = malloc(batch * sizeof *out);
    *tokens = 0;
    for (size_t i = 0; i < c->n; i += batch) {
        size_t n = c->n - i < batch ? c->n - i : batch;
        tm_error err;
        if (tm_tokenizer_encode_batch(tok, n, c->texts + i, c->lens + i, NULL, NULL, &o, out, &err)) {
            fprintf(stderr, "tok_bench: batch at %zu: %s\n", i, err.message);
            free(out);
            return -1;
        }
        for (size_t k = 0; k < n; k++) {
            *tokens += tm_encoding_n(out[k]);
            tm_encoding_free(out[k]);
        }
    }
    free(out);
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: tok_bench TOKENIZER CORPUS [--mode single|batch|load] [--threads N] "
                        "[--batch N] [--repeat N]\n");
        return 2;
    }
    const char *mode = "single";
    int threads = 1, repeat = 1;
    size_t batch = 32;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--mode")) mode = argv[i + 1];
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--batch")) batch = (size_t)atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--repeat")) repeat = atoi(argv[i + 1]);
    }
    if (threads < 1) threads = 1;
    if (repeat < 1 || repeat > 100) repeat = 1;
    double t[100];
    tm_tokenizer *tok = NULL;
    tm_error err;
    for (int r = 0; r < (strcmp(mode, "load") ? 1 : repeat); r++) {
        tm_tokenizer_free(tok);
        double t0 = now_s();
        if (tm_tokenizer_load(argv[1], NULL, &tok, &err)) {
            fprintf(stderr, "tok_bench: %s\n", err.message);
            return 1;
        }
        t[r] = now_s() - t0;
    }
    if (!strcmp(mode, "load")) {
        qsort(t, (size_t)repeat, sizeof *t, cmp_double);
        printf("{\"mode\":\"load\",\"ms\":%.3f,\"repeat\":%d}\n", 1e3 * t[repeat / 2], repeat);
        tm_tokenizer_free(tok);
        return 0;
    }
    corpus c = {0};
    if (read_corpus(argv[2], &c)) {
        fprintf(stderr, "tok_bench: cannot read corpus %s\n", argv[2]);
        return 1;
    }
    for (int r = 0; r < repeat; r++) {
        size_t tokens = 0;
        double t0 = now_s(), c0 = cpu_s();
        int rc = !strcmp(mode, "batch") ? run_batch(tok, &c, threads, batch, &tokens)
                                        : run_single(tok, &c, threads, &tokens);
        double s = now_s() - t0, cs = cpu_s() - c0;
        if (rc) return 1;
        printf("{\"mode\":\"%s\",\"threads\":%d,\"texts\":%zu,\"bytes\":%zu,\"tokens\":%zu,"
               "\"seconds\":%.4f,\"mbps\":%.3f,\"cpu_seconds\":%.4f,\"cpu_mbps\":%.3f}\n",
               mode, threads, c.n, c.bytes, tokens, s, c.bytes / 1e6 / s, cs, c.bytes / 1e6 / cs);
        fflush(stdout);
    }
    tm_tokenizer_free(tok);
    free(c.texts);
    free(c.lens);
    free(c.buf);
    return 0;
}
