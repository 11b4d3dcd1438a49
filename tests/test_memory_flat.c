/* Memory stays flat over many runs: a tiny LLaMA decoder run through tm_model_run with
 * sequence lengths that keep changing, under a plan cache of 3, so that plans are made,
 * reused and evicted all along. The process RSS after the first runs (which already visit
 * every length, the largest first) and after all of them must agree within 2 MB, and a
 * length run again must give the same logits as its first run (an evicted plan made
 * again computes the same thing). Not a leak checker (valgrind.sh is) nor a speed test.
 * Prints "N passed, N failed". TM_MEMORY_FLAT_RUNS overrides the number of runs. Under
 * AddressSanitizer (make check-asan) freed memory sits in its quarantine, so RSS says
 * nothing: there the RSS check is skipped and fewer runs are made. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "transmuter.h"

#define MODEL "tests/data/tiny/llama/decoder_model.onnx"
#define MAX_LEN 32            /* the export has 64 positions */
#define WARMUP 100
#define BLOCK 8               /* runs in a row with one length: a cache hit rate of ~7/8 */
#define MARGIN_KIB 2048

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SANITIZED 1
#endif
#endif
#ifndef SANITIZED
#define SANITIZED 0
#endif

#include "check.h"

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) kib = atol(line + 6);
    if (f) fclose(f);
    return kib;
}

static uint32_t next_random(uint32_t *state) {
    *state = *state * 1664525u + 1013904223u;
    return *state >> 8;
}

/* The warm-up sweeps every length from the largest down (the largest arenas first), then
 * lengths come in blocks drawn at random. */
static int length_of(int run) {
    if (run < WARMUP) return MAX_LEN - (run * MAX_LEN / WARMUP);
    uint32_t s = (uint32_t)(run / BLOCK) * 2654435761u;
    return 1 + (int)(next_random(&s) % MAX_LEN);
}

/* FNV-1a of the logits: one number per length to compare later runs against. */
static uint64_t digest(const tm_tensor *t) {
    const unsigned char *p = tm_tensor_data_const(t);
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < tm_tensor_nbytes(t); i++) h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

int main(void) {
    const char *env = getenv("TM_MEMORY_FLAT_RUNS");
    int runs = env ? atoi(env) : SANITIZED ? 1000 : 10000;
    if (runs < WARMUP) runs = WARMUP;
    tm_load_options o;
    tm_load_options_default(&o);
    o.threads = 1;
    o.plan_cache_limit = 3;
    tm_model *m = NULL;
    tm_error err;
    if (tm_model_load(MODEL, &o, &m, &err) != TM_OK) {
        printf("FAIL load: %s\n0 passed, 1 failed\n", err.message);
        return 1;
    }
    const char *names[3] = {"input_ids", "attention_mask", "position_ids"};
    int n_out = tm_model_n_outputs(m);
    tm_tensor **out = calloc((size_t)n_out, sizeof *out);
    uint64_t first_digest[MAX_LEN + 1] = {0};
    int64_t ids[MAX_LEN], mask[MAX_LEN], pos[MAX_LEN];   /* (1, T) each */
    int errors = 0, mismatches = 0, made_plans = 0;
    long rss_warm = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int r = 0; r < runs && out; r++) {
        int len = length_of(r);
        if (r == 0 || len != length_of(r - 1)) made_plans++;   /* at most: hits are not counted */
        /* Random token ids, the same ones for a given length, so that results compare. */
        uint32_t seed = (uint32_t)len * 7919u;
        for (int i = 0; i < len; i++) {
            ids[i] = next_random(&seed) % 1000;
            mask[i] = 1;
            pos[i] = i;
        }
        int64_t dims[2] = {1, len};
        tm_tensor *in[3] = {tm_tensor_wrap(TM_INT64, 2, dims, ids),
                            tm_tensor_wrap(TM_INT64, 2, dims, mask),
                            tm_tensor_wrap(TM_INT64, 2, dims, pos)};
        tm_status st = tm_model_run(m, 3, names, (const tm_tensor *const *)in, out, NULL, &err);
        for (int i = 0; i < 3; i++) tm_tensor_free(in[i]);
        if (st != TM_OK) {
            if (!errors++) printf("FAIL run %d (length %d): %s\n", r, len, err.message);
        } else {
            uint64_t d = digest(out[0]);
            if (!first_digest[len]) first_digest[len] = d;
            else if (d != first_digest[len]) mismatches++;
        }
        for (int i = 0; i < n_out; i++) {
            tm_tensor_free(out[i]);
            out[i] = NULL;
        }
        if (r + 1 == WARMUP) rss_warm = rss_kib();
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    long rss_end = rss_kib();
    double seconds = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    printf("%d runs in %.1f s (length changed %d times, plan cache of 3): RSS %ld KiB after "
           "%d runs, %ld KiB after all (%+ld KiB)\n", runs, seconds, made_plans, rss_warm, WARMUP,
           rss_end, rss_end - rss_warm);
    CHECK(out != NULL, "out of memory");
    CHECK(errors == 0, "%d of %d runs failed", errors, runs);
    CHECK(mismatches == 0, "%d runs gave other logits than the first run of their length",
          mismatches);
    int skipped = 0;
    if (SANITIZED) {
        printf("RSS check skipped: a sanitizer's quarantine holds freed memory\n");
        skipped = 1;
    } else {
        CHECK(rss_warm > 0 && rss_end > 0, "cannot read VmRSS from /proc/self/status");
        CHECK(labs(rss_end - rss_warm) <= MARGIN_KIB, "RSS moved by %ld KiB (more than %d KiB)",
              rss_end - rss_warm, MARGIN_KIB);
    }
    free(out);
    tm_model_free(m);
    printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
    return failed != 0;
}
