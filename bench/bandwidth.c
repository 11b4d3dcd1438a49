/* Memory read bandwidth of this machine, the yardstick of a decode step (which streams its
 * weights once per token): a STREAM-like sum over a 1 GiB buffer (far larger than any
 * cache), split over 1 and 2 threads, best of several passes, printed as one JSON line
 * per thread count. Not a test; `make bandwidth` builds and runs it. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BUFFER_BYTES ((size_t)1 << 30)
#define PASSES 5
#define MAX_THREADS 2

typedef struct slice {
    const uint64_t *p;
    size_t n;          /* words */
    uint64_t sum;
} slice;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Eight independent sums so that the loop is limited by loads, not by adds; the compiler
 * vectorizes it to full-width loads. */
static void *read_slice(void *arg) {
    slice *s = arg;
    uint64_t acc[8] = {0};
    for (size_t i = 0; i + 8 <= s->n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += s->p[i + j];
    s->sum = 0;
    for (int j = 0; j < 8; j++) s->sum += acc[j];
    return NULL;
}

int main(void) {
    uint64_t *buf = aligned_alloc(64, BUFFER_BYTES);
    if (!buf) {
        fprintf(stderr, "bandwidth: cannot allocate %zu bytes\n", BUFFER_BYTES);
        return 1;
    }
    memset(buf, 1, BUFFER_BYTES);   /* real pages, not the shared zero page */
    size_t words = BUFFER_BYTES / sizeof *buf;
    uint64_t check = 0;
    for (int threads = 1; threads <= MAX_THREADS; threads++) {
        double best = 1e30;
        for (int pass = 0; pass < PASSES; pass++) {
            slice s[MAX_THREADS];
            pthread_t th[MAX_THREADS];
            double t0 = now_s();
            for (int t = 0; t < threads; t++) {
                s[t].p = buf + words / (size_t)threads * (size_t)t;
                s[t].n = words / (size_t)threads;
                if (t > 0) pthread_create(&th[t], NULL, read_slice, &s[t]);
            }
            read_slice(&s[0]);
            for (int t = 1; t < threads; t++) pthread_join(th[t], NULL);
            double dt = now_s() - t0;
            if (dt < best) best = dt;
            for (int t = 0; t < threads; t++) check += s[t].sum;
        }
        printf("{\"threads\": %d, \"read_gb_per_s\": %.2f, \"bytes\": %zu}\n", threads,
               (double)BUFFER_BYTES / best * 1e-9, BUFFER_BYTES);
    }
    free(buf);
    return check == 0;   /* never: keeps the sums alive */
}
