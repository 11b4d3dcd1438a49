/* Decode-loop lab: a greedy generation through tm_decoder (as `transmuter generate` runs
 * it), each step timed by the wall clock and by the thread's CPU clock (on a shared host
 * the CPU clock leaves out the time other processes took the core), then medians over
 * windows of steps: the first and last 64, and 32 steps from past 32, 496 and 1984.
 * Peak RSS (VmHWM) at the end. Not a test, not built by make; it links any build of the
 * library (KV_DTYPE=1 for one with tm_decoder_options.kv_dtype):
 *   gcc -O2 -std=c11 -D_GNU_SOURCE -DKV_DTYPE=1 -Iinclude bench/decode_lab.c \
 *       build/libtransmuter.a -o /tmp/decode_lab $(LDLIBS of the Makefile)
 *   /tmp/decode_lab MODEL.onnx NEW [f16] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "transmuter.h"

static double clock_ms(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec * 1e3 + 1e-6 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[from, from + n) (clipped to [0, len)). */
static double median(const double *v, int len, int from, int n) {
    if (from < 0) from = 0;
    if (from + n > len) n = len - from;
    if (n < 1) return 0;
    double *c = malloc((size_t)n * sizeof *c);
    memcpy(c, v + from, (size_t)n * sizeof *c);
    qsort(c, (size_t)n, sizeof *c, cmp);
    double m = n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
    free(c);
    return m;
}

static double peak_rss_mb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kb = strtol(line + 6, NULL, 10);
    if (f) fclose(f);
    return kb / 1024.0;
}

static int64_t argmax_last(const tm_tensor *t) {
    const int64_t *dims = tm_tensor_dims(t);
    int rank = tm_tensor_rank(t);
    int64_t vocab = dims[rank - 1], n = 1;
    for (int k = 0; k < rank; k++) n *= dims[k];
    const float *x = (const float *)tm_tensor_data_const(t) + (n - vocab);
    int64_t best = 0;
    for (int64_t k = 1; k < vocab; k++)
        if (x[k] > x[best]) best = k;
    return best;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: decode_lab MODEL.onnx NEW [f16]\n");
        return 2;
    }
    int n_new = atoi(argv[2]), half = argc > 3 && !strcmp(argv[3], "f16");
    enum { PROMPT = 32 };
    int64_t prompt[PROMPT];
    for (int i = 0; i < PROMPT; i++) prompt[i] = 1000 + (int64_t)i * 911 % 29000;
    tm_load_options lo;
    tm_load_options_default(&lo);
    lo.threads = 1;
    tm_model *m = NULL;
    tm_error err = {0};
    if (tm_model_load(argv[1], &lo, &m, &err) != TM_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    tm_decoder_options o;
    tm_decoder_options_default(&o);
    o.last_logits_only = 1;
    o.capacity = PROMPT + n_new;
#if KV_DTYPE
    if (half) o.kv_dtype = TM_FLOAT16;
#else
    if (half) {
        fprintf(stderr, "this build has no kv_dtype\n");
        return 2;
    }
#endif
    tm_decoder *d = NULL;
    double *wall = calloc((size_t)n_new, sizeof *wall), *cpu = calloc((size_t)n_new, sizeof *cpu);
    int64_t token = 0, sum = 0;
    if (tm_decoder_create(m, &o, &d, &err) != TM_OK || tm_decoder_append(d, prompt, PROMPT, &err) != TM_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    int steps = 0;
    for (int k = 0; k + 1 < n_new; k++) {
        token = argmax_last(tm_decoder_logits(d));
        sum = sum * 31 + token;
        double w0 = clock_ms(CLOCK_MONOTONIC), c0 = clock_ms(CLOCK_THREAD_CPUTIME_ID);
        if (tm_decoder_append(d, &token, 1, &err) != TM_OK) {
            fprintf(stderr, "%s\n", err.message);
            return 1;
        }
        cpu[k] = clock_ms(CLOCK_THREAD_CPUTIME_ID) - c0;
        wall[k] = clock_ms(CLOCK_MONOTONIC) - w0;
        steps++;
    }
    /* step k runs at past PROMPT + k */
    printf("{\"kv\": \"%s\", \"steps\": %d, \"peak_rss_mb\": %.1f, \"tokens_hash\": %lld", half ? "f16" : "f32",
           steps, peak_rss_mb(), (long long)sum);
    printf(", \"first64\": [%.4f, %.4f], \"last64\": [%.4f, %.4f]", median(wall, steps, 0, 64),
           median(cpu, steps, 0, 64), median(wall, steps, steps - 64, 64), median(cpu, steps, steps - 64, 64));
    int at[3] = {32, 496, 1984};
    for (int i = 0; i < 3; i++)
        printf(", \"past%d\": [%.4f, %.4f]", at[i], median(wall, steps, at[i] - PROMPT, 32),
               median(cpu, steps, at[i] - PROMPT, 32));
    printf("}\n");
    tm_decoder_free(d);
    tm_model_free(m);
    free(wall);
    free(cpu);
    return 0;
}
