/* f32 GEMM lab: GFLOP/s of tm_sgemm on one thread (or --threads N) for the shapes that
 * matter to transformer encoders, next to oneDNN and OpenBLAS when their libraries can be
 * loaded (dlopen: neither is a build dependency), and the core's measured FMA peak.
 * Not a test: correctness is tests/test_prims_linalg.c's job (checked loosely here). */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "backends/cpu/gemm.h"
#include "peak.h"

typedef int (*dnnl_sgemm_fn)(char, char, int64_t, int64_t, int64_t, float, const float *,
                             int64_t, const float *, int64_t, float, float *, int64_t);
typedef void (*cblas_sgemm_fn)(int, int, int, int, int, int, float, const float *, int,
                               const float *, int, float, float *, int);
typedef void (*set_threads_fn)(int);

/* --cpu: the thread's CPU time (one thread only), so that other processes' time on a
 * shared machine is left out. */
static int use_cpu_clock;

static double now_s(void) {
    struct timespec t;
    clock_gettime(use_cpu_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct shape { int64_t m, n, k; } shape;

static float *random_floats(int64_t n) {
    float *p = malloc((size_t)n * sizeof *p);
    for (int64_t i = 0; i < n; i++) p[i] = (float)((i * 2654435761u) % 1000) / 500.0f - 1.0f;
    return p;
}

enum { OURS, PACKED, DNNL, OPENBLAS, N_WAYS };

/* B packed once (as a plan packs a constant weight) for tm_sgemm_bpacked. */
static const float *packed_b;
static int packed_panel, packed_depth;

static void call(int which, void *fn, const shape *s, const float *a, const float *b, float *c,
                 void *scratch, tm_pool *pool) {
    if (which == OURS)
        tm_sgemm(0, 0, s->m, s->n, s->k, 1.0f, a, s->k, b, s->n, 0.0f, c, s->n, scratch, pool);
    else if (which == PACKED)
        tm_sgemm_bpacked(s->m, s->n, s->k, a, s->k, packed_b, packed_panel, packed_depth, c,
                         s->n, NULL, pool);
    else if (which == DNNL)
        ((dnnl_sgemm_fn)fn)('N', 'N', s->m, s->n, s->k, 1.0f, a, s->k, b, s->n, 0.0f, c, s->n);
    else  /* CblasRowMajor 101, CblasNoTrans 111 */
        ((cblas_sgemm_fn)fn)(101, 111, 111, (int)s->m, (int)s->n, (int)s->k, 1.0f, a,
                             (int)s->k, b, (int)s->n, 0.0f, c, (int)s->n);
}

/* Best GFLOP/s over several timed batches of calls of about 0.1 s each. */
static double time_gemm(int which, void *fn, const shape *s, const float *a, const float *b,
                        float *c, void *scratch, tm_pool *pool) {
    double flops = 2.0 * (double)s->m * (double)s->n * (double)s->k;
    int reps = (int)(1e8 / flops) + 1;
    call(which, fn, s, a, b, c, scratch, pool);
    double best = 0.0;
    for (int batch = 0; batch < 5; batch++) {
        double t0 = now_s();
        for (int r = 0; r < reps; r++) call(which, fn, s, a, b, c, scratch, pool);
        double g = flops * reps / (now_s() - t0) * 1e-9;
        if (g > best) best = g;
    }
    return best;
}

#define N_SHAPES 8
static const shape shapes[N_SHAPES] = {{512, 512, 512}, {128, 384, 1536}, {128, 1536, 384},
                                       {128, 384, 384}, {32, 768, 2048}, {1024, 384, 1536},
                                       {1024, 1536, 384}, {1024, 384, 384}};

int main(int argc, char **argv) {
    int threads = 1, rounds = 3;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--cpu")) use_cpu_clock = 1;
    }
    char nthreads[16];
    snprintf(nthreads, sizeof nthreads, "%d", threads);
    setenv("OMP_NUM_THREADS", nthreads, 1);        /* oneDNN's OpenMP, before loading it */
    setenv("OPENBLAS_NUM_THREADS", nthreads, 1);
    void *dnnl = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!dnnl) dnnl = dlopen("libdnnl.so", RTLD_NOW | RTLD_LOCAL);
    void *openblas = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    if (!openblas) openblas = dlopen("libopenblas.so", RTLD_NOW | RTLD_LOCAL);
    void *fns[N_WAYS] = {NULL, NULL, dnnl ? dlsym(dnnl, "dnnl_sgemm") : NULL,
                         openblas ? dlsym(openblas, "cblas_sgemm") : NULL};
    if (openblas) {
        set_threads_fn set = (set_threads_fn)dlsym(openblas, "openblas_set_num_threads");
        if (set) set(threads);
    }
    tm_pool *pool = tm_pool_create(threads);
    /* On a shared machine every number is the best of `rounds` passes over the table,
     * the peak included (measured once per pass), so each sees its quietest moment. */
    double peak = 0.0, best[N_SHAPES][N_WAYS] = {{0}};
    int wrong[N_SHAPES] = {0};
    for (int round = 0; round < rounds; round++) {
        double p = tm_bench_fma_peak();
        if (p > peak) peak = p;
        for (int i = 0; i < N_SHAPES; i++) {
            const shape *s = &shapes[i];
            float *a = random_floats(s->m * s->k), *b = random_floats(s->k * s->n);
            float *c = random_floats(s->m * s->n), *want = random_floats(s->m * s->n);
            void *scratch = malloc(tm_sgemm_scratch(0, 0, s->m, s->n, s->k) + 1);
            tm_sgemm_pack_layout(&packed_panel, &packed_depth);
            float *bp = malloc(tm_sgemm_packed_floats(s->n, s->k, packed_panel) * sizeof *bp);
            tm_sgemm_pack_b(0, s->n, s->k, b, s->n, packed_panel, packed_depth, bp);
            packed_b = bp;
            for (int w = 0; w < N_WAYS; w++) {
                if (w > PACKED && !fns[w]) continue;
                double g = time_gemm(w, fns[w], s, a, b, c, scratch, pool);
                if (g > best[i][w]) best[i][w] = g;
            }
            tm_sgemm_reference(0, 0, s->m, s->n, s->k, 1.0f, a, s->k, b, s->n, 0.0f, want,
                               s->n);
            for (int w = OURS; w <= PACKED; w++) {
                call(w, NULL, s, a, b, c, scratch, pool);
                for (int64_t j = 0; j < s->m * s->n; j++) wrong[i] |= fabs(c[j] - want[j]) > 1e-3;
            }
            free(a), free(b), free(c), free(want), free(scratch), free(bp);
        }
    }
    printf("tm_sgemm kernel: %s, threads: %d, best of %d rounds\n", tm_sgemm_kernel_name(),
           threads, rounds);
    printf("measured single-core FMA peak: %.1f GFLOP/s (%s vectors)\n", peak,
           tm_bench_fma_vector());
    printf("%-16s %10s %7s %10s %7s %10s %10s\n", "m x n x k", "ours", "%peak", "packed B",
           "%peak", "oneDNN", "OpenBLAS");
    for (int i = 0; i < N_SHAPES; i++) {
        const shape *s = &shapes[i];
        char name[48], col[2][16];
        snprintf(name, sizeof name, "%lldx%lldx%lld", (long long)s->m, (long long)s->n,
                 (long long)s->k);
        for (int w = DNNL; w < N_WAYS; w++) {
            if (fns[w]) snprintf(col[w - DNNL], sizeof col[0], "%.1f", best[i][w]);
            else snprintf(col[w - DNNL], sizeof col[0], "n/a");
        }
        printf("%-16s %10.1f %6.0f%% %10.1f %6.0f%% %10s %10s%s\n", name, best[i][OURS],
               100.0 * best[i][OURS] / (peak * threads), best[i][PACKED],
               100.0 * best[i][PACKED] / (peak * threads), col[0], col[1],
               wrong[i] ? "  (WRONG RESULT)" : "");
    }
    tm_pool_free(pool);
    return 0;
}
