/* Machine probes for bench/run.py: the single-core f32 FMA peak (independent chains of
 * vector FMAs written in assembly, so no compiler can merge or shorten them) and the
 * memory read bandwidth (sequential sums over a buffer far larger than the caches, on
 * huge pages, one stream or several side by side) on 1 and 2 threads. Prints one JSON
 * line. Not a test; numbers from a shared machine are the best of several tries. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include "peak.h"

#include <unistd.h>

#define TRIES 8

/* The read buffer: four times the last-level cache the OS reports (hosts here have had
 * 32 MiB and 480 MiB of L3), at least 512 MiB, at most 4 GiB or a quarter of the memory,
 * so that the sums read memory and not the cache. */
static size_t buffer_bytes(size_t l3) {
    size_t bytes = (size_t)512 << 20;
    if (l3 * 4 > bytes) bytes = l3 * 4;
    if (bytes > (size_t)4 << 30) bytes = (size_t)4 << 30;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0 && bytes > (size_t)pages * (size_t)page / 4)
        bytes = (size_t)pages * (size_t)page / 4;
    return bytes / ((size_t)2 << 20) * ((size_t)2 << 20);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct reader {
    const float *data;
    size_t n;
    int streams;
    float sum;
    pthread_barrier_t *start;
    double seconds;
} reader;

/* Vector sums over `streams` sequential streams read side by side (one stream, or
 * several as a GEMV over many weight panels reads them): eight independent sums, so the
 * loop is bound by loads, not by add latency. */
typedef float vec16 __attribute__((vector_size(64)));
static float sum_floats(const float *p, size_t n, int streams) {
    vec16 s[8] = {{0}};
    size_t per = n / 16 / (size_t)streams / 8 * 8;   /* vectors per stream, a multiple of 8 */
    const vec16 *v = (const vec16 *)p;               /* the buffer is 64-byte aligned */
    for (size_t i = 0; i < per; i += 8)
        for (int st = 0; st < streams; st++)
            for (int a = 0; a < 8; a++) s[a] += v[(size_t)st * per + i + a];
    float total = 0.0f;
    for (int a = 0; a < 8; a++)
        for (int l = 0; l < 16; l++) total += s[a][l];
    return total;
}

static void *read_part(void *arg) {
    reader *r = arg;
    pthread_barrier_wait(r->start);
    double t0 = now_s();
    r->sum = sum_floats(r->data, r->n, r->streams);
    r->seconds = now_s() - t0;
    return NULL;
}

/* GB/s of `threads` threads each reading its share of the buffer once; the slowest
 * thread's time counts. */
static double bandwidth(const float *buf, size_t n, int threads, int streams) {
    pthread_t tid[2];
    reader r[2];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    for (int t = 0; t < threads; t++) {
        r[t] = (reader){buf + n / threads * t, n / threads, streams, 0.0f, &start, 0.0};
        if (t) pthread_create(&tid[t], NULL, read_part, &r[t]);
    }
    read_part(&r[0]);
    double worst = r[0].seconds;
    for (int t = 1; t < threads; t++) {
        pthread_join(tid[t], NULL);
        if (r[t].seconds > worst) worst = r[t].seconds;
    }
    pthread_barrier_destroy(&start);
    volatile float sink = r[0].sum;
    (void)sink;
    size_t per = n / (size_t)threads / 16 / (size_t)streams / 8 * 8;
    return (double)(per * 16 * (size_t)streams * (size_t)threads) * sizeof(float) / worst * 1e-9;
}

int main(void) {
    long l3_reported = sysconf(_SC_LEVEL3_CACHE_SIZE);
    size_t l3 = l3_reported > 0 ? (size_t)l3_reported : 0;
    size_t bytes = buffer_bytes(l3), n = bytes / sizeof(float);
    /* On huge pages where the OS gives them (THP "madvise"), as our packed weights are:
     * the read then is not slowed by TLB misses, and measures the memory. */
    float *buf = aligned_alloc((size_t)2 << 20, bytes);
    if (!buf) {
        fprintf(stderr, "probe: cannot allocate %zu MiB\n", bytes >> 20);
        return 1;
    }
#ifdef MADV_HUGEPAGE
    madvise(buf, bytes, MADV_HUGEPAGE);
#endif
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 7);   /* touches every page */
    double peak = 0.0, bw[3] = {0};
    for (int t = 0; t < TRIES; t++) {
        double p = tm_bench_fma_peak();
        if (p > peak) peak = p;
        for (int threads = 1; threads <= 2; threads++)
            for (int streams = 1; streams <= 8; streams *= 2) {
                double b = bandwidth(buf, n, threads, streams);
                if (b > bw[threads]) bw[threads] = b;
            }
    }
    printf("{\"fma_peak_gflops\": %.1f, \"read_gbs_1t\": %.2f, \"read_gbs_2t\": %.2f, "
           "\"vector\": \"%s\", \"l3_mib\": %zu, \"buffer_mib\": %zu}\n", peak, bw[1], bw[2],
           tm_bench_fma_vector(), l3 >> 20, bytes >> 20);
    free(buf);
    return 0;
}
