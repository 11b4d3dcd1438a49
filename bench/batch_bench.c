/* Several generation streams on one model, two ways side by side in one process:
 * "turns", each stream's generator stepped in turn (one model run per stream and token,
 * what `transmuter serve` did before tm_batch), and "batch", the streams in one tm_batch
 * (one model run per step for all of them). Alternating rounds; per way the median over
 * rounds of the aggregate new tokens a second (the prompts' steps included: each stream's
 * first token is its prompt's) and of the decode steps' time.
 *
 *   batch_bench MODEL.onnx [--streams 1,4,16] [--prompt 32] [--new 128] [--rounds 3]
 *               [--threads T]
 *
 * Stream i's prompt is --prompt token ids of its own (seeded), greedy, --new new tokens
 * (no EOS: max_new_tokens ends each). Checks that both ways give each stream the same
 * tokens, and says so. Prints a markdown row per stream count. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "transmuter.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int prompt_len = 32, new_tokens = 128;

static tm_generator *make(tm_model *m, int i) {
    tm_generation_config c;
    tm_generation_config_default(&c);
    c.max_new_tokens = new_tokens;
    tm_generator *g = NULL;
    tm_error err = {0};
    int32_t ids[4096];
    for (int k = 0; k < prompt_len; k++) ids[k] = (int32_t)((i * 7919 + k * 104729 + 17) % 30000 + 10);
    if (tm_generator_create(m, &c, NULL, &g, &err) != TM_OK ||
        tm_generator_append(g, ids, (size_t)prompt_len, &err) != TM_OK) {
        fprintf(stderr, "batch_bench: %s\n", err.message);
        exit(1);
    }
    return g;
}

/* Tokens of every stream into out (streams x new_tokens); returns ms; *step_ms the decode
 * steps' time (the prompts' excluded). */
static double run(tm_model *m, int streams, int batch, int32_t *out, double *step_ms) {
    tm_generator **g = calloc((size_t)streams, sizeof *g);
    int *n = calloc((size_t)streams, sizeof *n);
    tm_error err = {0};
    double t0 = now_ms(), steps = 0;
    for (int i = 0; i < streams; i++) g[i] = make(m, i);
    if (batch) {
        tm_batch *b = NULL;
        if (tm_batch_create(m, streams, &b, &err) != TM_OK) {
            fprintf(stderr, "batch_bench: %s\n", err.message);
            exit(1);
        }
        int *row_of = malloc((size_t)streams * sizeof *row_of);
        for (int i = 0; i < streams; i++) {
            int row, done;
            int32_t t;
            if (tm_batch_add(b, g[i], &row, &t, &done, &err) != TM_OK) {
                fprintf(stderr, "batch_bench: %s\n", err.message);
                exit(1);
            }
            out[i * new_tokens + n[i]++] = t;
            row_of[i] = row;
        }
        int32_t *tokens = malloc((size_t)streams * sizeof *tokens);
        int *done = malloc((size_t)streams * sizeof *done);
        while (tm_batch_count(b) > 0) {
            double s0 = now_ms();
            if (tm_batch_step(b, tokens, done, &err) != TM_OK) {
                fprintf(stderr, "batch_bench: %s\n", err.message);
                exit(1);
            }
            steps += now_ms() - s0;
            for (int i = 0; i < streams; i++)
                if (row_of[i] >= 0 && tokens[row_of[i]] >= 0) {
                    out[i * new_tokens + n[i]++] = tokens[row_of[i]];
                    if (done[row_of[i]]) row_of[i] = -1;
                }
        }
        free(tokens);
        free(done);
        free(row_of);
        tm_batch_free(b);
    } else {
        int left = streams;
        int *ended = calloc((size_t)streams, sizeof *ended);
        int first = 1;
        while (left > 0) {
            double s0 = now_ms();
            for (int i = 0; i < streams; i++) {
                if (ended[i]) continue;
                int32_t t;
                int done = 0;
                if (tm_generator_step(g[i], &t, &done, &err) != TM_OK) {
                    fprintf(stderr, "batch_bench: %s\n", err.message);
                    exit(1);
                }
                out[i * new_tokens + n[i]++] = t;
                if (done) {
                    ended[i] = 1;
                    left--;
                }
            }
            if (!first) steps += now_ms() - s0;
            first = 0;
        }
        free(ended);
    }
    double ms = now_ms() - t0;
    for (int i = 0; i < streams; i++) tm_generator_free(g[i]);
    free(g);
    free(n);
    *step_ms = steps;
    return ms;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: batch_bench MODEL.onnx [--streams 1,4,16] [--prompt 32] "
                        "[--new 128] [--rounds 3] [--threads T]\n");
        return 2;
    }
    const char *streams_arg = "1,4,16";
    int rounds = 3, threads = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--streams")) streams_arg = argv[i + 1];
        else if (!strcmp(argv[i], "--prompt")) prompt_len = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--new")) new_tokens = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--rounds")) rounds = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "batch_bench: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (prompt_len < 1 || prompt_len > 4096 || new_tokens < 1 || rounds < 1) {
        fprintf(stderr, "batch_bench: bad --prompt, --new or --rounds\n");
        return 2;
    }
    tm_load_options lo;
    tm_load_options_default(&lo);
    if (threads > 0) lo.threads = threads;
    tm_model *m = NULL;
    tm_error err = {0};
    if (tm_model_load(argv[1], &lo, &m, &err) != TM_OK) {
        fprintf(stderr, "batch_bench: %s\n", err.message);
        return 1;
    }
    printf("| streams | turns tok/s | batch tok/s | batch / turns | turns ms a step | batch ms a step | same tokens |\n");
    printf("|---|---|---|---|---|---|---|\n");
    char *list = strdup(streams_arg);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int s = atoi(tok);
        if (s < 1) continue;
        int32_t *a = calloc((size_t)s * (size_t)new_tokens, sizeof *a);
        int32_t *b = calloc((size_t)s * (size_t)new_tokens, sizeof *b);
        double *ta = calloc((size_t)rounds, sizeof *ta), *tb = calloc((size_t)rounds, sizeof *tb);
        double *sa = calloc((size_t)rounds, sizeof *sa), *sb = calloc((size_t)rounds, sizeof *sb);
        run(m, s, 0, a, &sa[0]);   /* warm: plans made */
        run(m, s, 1, b, &sb[0]);
        for (int r = 0; r < rounds; r++) {
            ta[r] = run(m, s, 0, a, &sa[r]);
            tb[r] = run(m, s, 1, b, &sb[r]);
        }
        int same = !memcmp(a, b, (size_t)s * (size_t)new_tokens * sizeof *a);
        double tok = (double)s * new_tokens;
        double ma = median(ta, rounds), mb = median(tb, rounds);
        double steps = new_tokens - 1;
        printf("| %d | %.1f | %.1f | %.2f | %.2f | %.2f | %s |\n", s, tok / ma * 1e3, tok / mb * 1e3,
               ma / mb, median(sa, rounds) / steps, median(sb, rounds) / steps, same ? "yes" : "NO");
        fflush(stdout);
        free(a);
        free(b);
        free(ta);
        free(tb);
        free(sa);
        free(sb);
    }
    free(list);
    tm_model_free(m);
    return 0;
}
