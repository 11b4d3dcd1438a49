/* tm_sgemm: a BLIS-style packed GEMM (blocks of A and B packed into caller scratch, a
 * register-tiled micro-kernel from sgemm_avx512.c or sgemm_avx2.c, work split over the
 * pool by output tiles), with the plain C reference selectable at run time
 * (TM_REFERENCE_KERNELS=1) so every caller can be checked against it. Not batched. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "gemm.h"

#define TINY_GEMM_FLOPS 512.0
/* Up to this many rows the small kernel reads B unpacked: each row streams B once, and
 * packing would read and write all of B for a handful of rows. */
#define SMALL_M 3
/* Below this many flops a product runs on one thread: waking workers costs more. */
#define PARALLEL_MIN_FLOPS (1 << 17)
#define SCRATCH_ALIGN 64
#define B_ROWS 16     /* rows of B packed per task */

static pthread_once_t reference_once = PTHREAD_ONCE_INIT;
static int reference_flag;   /* written once, under reference_once */
static const tm__sgemm_arch *arch;   /* likewise: NULL means the reference */

static void read_reference_flag(void) {
    const char *v = getenv("TM_REFERENCE_KERNELS");
    reference_flag = v && v[0] && strcmp(v, "0") != 0;
    if (reference_flag) return;
    const char *force = getenv("TM_SGEMM_ARCH");   /* "avx2": test the fallback on AVX-512 */
    int want_avx2 = force && !strcmp(force, "avx2");
    arch = want_avx2 ? NULL : tm__sgemm_arch_avx512();
    if (!arch) arch = tm__sgemm_arch_avx2();
}

int tm_use_reference_kernels(void) {
    pthread_once(&reference_once, read_reference_flag);
    return reference_flag;
}

static const tm__sgemm_arch *active_arch(void) {
    pthread_once(&reference_once, read_reference_flag);
    return arch;
}

const char *tm_sgemm_kernel_name(void) {
    const tm__sgemm_arch *ar = active_arch();
    return ar ? ar->name : "reference";
}

/* C = beta * C, where beta == 0 clears C without reading it (BLAS semantics). */
static void scale_c(int64_t m, int64_t n, float beta, float *c, int64_t ldc) {
    if (beta == 1.0f) return;
    for (int64_t i = 0; i < m; i++) {
        float *row = c + i * ldc;
        if (beta == 0.0f) {
            memset(row, 0, (size_t)n * sizeof *row);
            continue;
        }
        for (int64_t j = 0; j < n; j++) row[j] *= beta;
    }
}

static inline float elem_a(int trans_a, const float *a, int64_t lda, int64_t i, int64_t p) {
    return trans_a ? a[p * lda + i] : a[i * lda + p];
}

void tm_sgemm_reference(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                        float alpha, const float *a, int64_t lda, const float *b,
                        int64_t ldb, float beta, float *c, int64_t ldc) {
    scale_c(m, n, beta, c, ldc);
    if (alpha == 0.0f || k == 0) return;
    for (int64_t i = 0; i < m; i++) {
        float *restrict c_row = c + i * ldc;
        if (trans_b) {
            /* B is stored (n, k): each output is a dot product along a row of B. */
            for (int64_t j = 0; j < n; j++) {
                const float *b_row = b + j * ldb;
                float sum = 0.0f;
                for (int64_t p = 0; p < k; p++) sum += elem_a(trans_a, a, lda, i, p) * b_row[p];
                c_row[j] += alpha * sum;
            }
            continue;
        }
        /* i-p-j order: the inner loop runs along rows of B and C, which vectorizes. */
        for (int64_t p = 0; p < k; p++) {
            float scaled = alpha * elem_a(trans_a, a, lda, i, p);
            const float *restrict b_row = b + p * ldb;
            for (int64_t j = 0; j < n; j++) c_row[j] += scaled * b_row[j];
        }
    }
}

/* ---- Choosing the path ------------------------------------------------------------- */

enum { PATH_REFERENCE, PATH_SMALL, PATH_PACKED };

static int choose_path(const tm__sgemm_arch *ar, int64_t m, int64_t n, int64_t k) {
    if (!ar || (double)m * (double)n * (double)k <= TINY_GEMM_FLOPS) return PATH_REFERENCE;
    return m <= SMALL_M ? PATH_SMALL : PATH_PACKED;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

/* Floats of the packed blocks: a (mc rounded to mr, kc) then b (kc, nc rounded to nr). */
static void packed_sizes(const tm__sgemm_arch *ar, int64_t m, int64_t n, int64_t k,
                         int64_t *a_floats, int64_t *b_floats) {
    int64_t kc = min64(k, ar->kc);
    /* Rounded to 64 bytes: B's panels (kc * nr floats each) then stay aligned too. */
    *a_floats = round_up(round_up(min64(m, ar->mc), ar->mr) * kc, SCRATCH_ALIGN / 4);
    *b_floats = kc * round_up(min64(n, ar->nc), ar->nr);
}

size_t tm_sgemm_scratch(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k) {
    (void)trans_a; (void)trans_b;
    const tm__sgemm_arch *ar = active_arch();
    if (m <= 0 || n <= 0 || k <= 0 || choose_path(ar, m, n, k) != PATH_PACKED) return 0;
    int64_t a_floats, b_floats;
    packed_sizes(ar, m, n, k, &a_floats, &b_floats);
    return (size_t)(a_floats + b_floats) * sizeof(float) + SCRATCH_ALIGN;
}

/* ---- Packing ----------------------------------------------------------------------- */

/* Rows [i0, i0 + rows) and columns [p0, p0 + kc) of op(A) as one panel: mr floats per
 * column, zero rows past `rows`. */
static void pack_a_panel(int trans_a, const float *a, int64_t lda, int64_t i0, int64_t rows,
                         int64_t p0, int64_t kc, int mr, float *dst) {
    if (trans_a) {
        for (int64_t p = 0; p < kc; p++) {
            const float *src = a + (p0 + p) * lda + i0;
            float *d = dst + p * mr;
            int64_t i = 0;
            for (; i < rows; i++) d[i] = src[i];
            for (; i < mr; i++) d[i] = 0.0f;
        }
        return;
    }
    for (int64_t i = 0; i < mr; i++) {
        if (i >= rows) {
            for (int64_t p = 0; p < kc; p++) dst[p * mr + i] = 0.0f;
            continue;
        }
        const float *src = a + (i0 + i) * lda + p0;
        for (int64_t p = 0; p < kc; p++) dst[p * mr + i] = src[p];
    }
}

/* Rows [p, p_end) of the block of B (not transposed) at depth p0 and columns
 * [j0, j0 + cols), into every panel. Along rows of B, so reads are sequential: walking
 * one panel down the rows instead touches a cache line and often a page per row. */
static void pack_b_rows(const float *b, int64_t ldb, int64_t p0, int64_t p, int64_t p_end,
                        int64_t kc, int64_t j0, int64_t cols, int nr, float *dst) {
    for (; p < p_end; p++) {
        const float *src = b + (p0 + p) * ldb + j0;
        int64_t j = 0;
        for (; j + nr <= cols; j += nr) memcpy(dst + j * kc + p * nr, src + j, (size_t)nr * 4);
        if (j == cols) continue;
        float *d = dst + j * kc + p * nr;
        int64_t t = 0;
        for (; j + t < cols; t++) d[t] = src[j + t];
        for (; t < nr; t++) d[t] = 0.0f;
    }
}

/* Columns [j0, j0 + cols) and rows [p0, p0 + kc) of op(B) with B transposed (stored
 * (n, k)) as one panel of nr floats per row: each column is a row of B, read in order. */
static void pack_bt_panel(const float *b, int64_t ldb, int64_t p0, int64_t kc,
                          int64_t j0, int64_t cols, int nr, float *dst) {
    for (int64_t j = 0; j < nr; j++) {
        if (j >= cols) {
            for (int64_t p = 0; p < kc; p++) dst[p * nr + j] = 0.0f;
            continue;
        }
        const float *src = b + (j0 + j) * ldb + p0;
        for (int64_t p = 0; p < kc; p++) dst[p * nr + j] = src[p];
    }
}

/* ---- The blocked product ----------------------------------------------------------- */

typedef struct gemm_job {
    const tm__sgemm_arch *ar;
    int trans_a, trans_b;
    int64_t m, n, k;
    float alpha, beta;
    const float *a, *b;
    int64_t lda, ldb, ldc;
    float *c;
    float *a_packed, *b_packed;
    /* The current block: rows [ic, ic + mc), columns [jc, jc + nc), depth [pc, pc + kc). */
    int64_t ic, mc, jc, nc, pc, kc;
    float beta_block;       /* beta for the first depth block, then 1 */
    int pack_b;             /* this block also packs B (its first row block) */
    int small_n_blocks;     /* PATH_SMALL: column blocks */
} gemm_job;

/* [begin, end) of `total` units for slice ith of nth. */
static void slice(int64_t total, int ith, int nth, int64_t *begin, int64_t *end) {
    *begin = total * ith / nth;
    *end = total * (ith + 1) / nth;
}

static void pack_block(void *arg, int ith, int nth) {
    gemm_job *g = arg;
    const tm__sgemm_arch *ar = g->ar;
    int64_t a_panels = (g->mc + ar->mr - 1) / ar->mr;
    /* B's tasks: panels when transposed, else groups of B_ROWS rows. */
    int64_t b_tasks = !g->pack_b ? 0 : g->trans_b ? (g->nc + ar->nr - 1) / ar->nr
                                                  : (g->kc + B_ROWS - 1) / B_ROWS;
    int64_t begin, end;
    slice(a_panels + b_tasks, ith, nth, &begin, &end);
    for (int64_t t = begin; t < end; t++) {
        if (t < b_tasks && g->trans_b) {
            int64_t j = t * ar->nr;
            pack_bt_panel(g->b, g->ldb, g->pc, g->kc, g->jc + j, min64(ar->nr, g->nc - j),
                          ar->nr, g->b_packed + j * g->kc);
        } else if (t < b_tasks) {
            pack_b_rows(g->b, g->ldb, g->pc, t * B_ROWS, min64(g->kc, (t + 1) * B_ROWS), g->kc,
                        g->jc, g->nc, ar->nr, g->b_packed);
        } else {
            int64_t i = (t - b_tasks) * ar->mr;
            pack_a_panel(g->trans_a, g->a, g->lda, g->ic + i, min64(ar->mr, g->mc - i), g->pc,
                         g->kc, ar->mr, g->a_packed + i * g->kc);
        }
    }
}

/* Tiles in column-panel-major order, so one thread's consecutive tiles share a B panel
 * (kept in L1) while A's block comes from L2. */
static void compute_block(void *arg, int ith, int nth) {
    gemm_job *g = arg;
    const tm__sgemm_arch *ar = g->ar;
    int64_t a_panels = (g->mc + ar->mr - 1) / ar->mr;
    int64_t b_panels = (g->nc + ar->nr - 1) / ar->nr;
    int64_t begin, end;
    slice(a_panels * b_panels, ith, nth, &begin, &end);
    for (int64_t t = begin; t < end; t++) {
        int64_t jp = t / a_panels, ip = t % a_panels;
        int64_t i = ip * ar->mr, j = jp * ar->nr;
        ar->tile(g->kc, g->a_packed + i * g->kc, g->b_packed + j * g->kc,
                 g->c + (g->ic + i) * g->ldc + g->jc + j, g->ldc, (int)min64(ar->mr, g->mc - i),
                 (int)min64(ar->nr, g->nc - j), g->alpha, g->beta_block);
    }
}

static void run_parallel(tm_pool *pool, int nth, tm_pool_fn fn, gemm_job *g) {
    if (nth <= 1) fn(g, 0, 1);
    else tm_pool_run(pool, nth, fn, g);
}

static void gemm_packed(gemm_job *g, tm_pool *pool, int nth) {
    const tm__sgemm_arch *ar = g->ar;
    for (g->jc = 0; g->jc < g->n; g->jc += ar->nc) {
        g->nc = min64(ar->nc, g->n - g->jc);
        for (g->pc = 0; g->pc < g->k; g->pc += ar->kc) {
            g->kc = min64(ar->kc, g->k - g->pc);
            g->beta_block = g->pc == 0 ? g->beta : 1.0f;
            for (g->ic = 0; g->ic < g->m; g->ic += ar->mc) {
                g->mc = min64(ar->mc, g->m - g->ic);
                g->pack_b = g->ic == 0;
                run_parallel(pool, nth, pack_block, g);
                run_parallel(pool, nth, compute_block, g);
            }
        }
    }
}

/* Columns in blocks of this many per slice of the small path. */
#define SMALL_COLUMNS 64

static void small_slice(void *arg, int ith, int nth) {
    gemm_job *g = arg;
    int64_t begin, end;
    slice(g->small_n_blocks, ith, nth, &begin, &end);
    if (begin == end) return;
    g->ar->small(g->trans_a, g->trans_b, g->m, begin * SMALL_COLUMNS,
                 min64(end * SMALL_COLUMNS, g->n), g->k, g->alpha, g->a, g->lda, g->b, g->ldb,
                 g->beta, g->c, g->ldc);
}

void tm_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
              float *c, int64_t ldc, void *scratch, tm_pool *pool) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0 || alpha == 0.0f) {
        scale_c(m, n, beta, c, ldc);
        return;
    }
    const tm__sgemm_arch *ar = active_arch();
    int path = choose_path(ar, m, n, k);
    if (path == PATH_PACKED && !scratch) path = PATH_REFERENCE;
    if (path == PATH_REFERENCE) {
        tm_sgemm_reference(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    gemm_job g = {ar, trans_a, trans_b, m, n, k, alpha, beta, a, b, lda, ldb, ldc, c,
                  NULL, NULL, 0, 0, 0, 0, 0, 0, beta, 0, 0};
    double flops = 2.0 * (double)m * (double)n * (double)k;
    int nth = flops < PARALLEL_MIN_FLOPS ? 1 : tm_pool_threads(pool);
    if (path == PATH_SMALL) {
        g.small_n_blocks = (int)((n + SMALL_COLUMNS - 1) / SMALL_COLUMNS);
        if (nth > g.small_n_blocks) nth = g.small_n_blocks;
        run_parallel(pool, nth, small_slice, &g);
        return;
    }
    int64_t a_floats, b_floats;
    packed_sizes(ar, m, n, k, &a_floats, &b_floats);
    uintptr_t at = ((uintptr_t)scratch + SCRATCH_ALIGN - 1) & ~(uintptr_t)(SCRATCH_ALIGN - 1);
    g.a_packed = (float *)at;
    g.b_packed = g.a_packed + a_floats;
    gemm_packed(&g, pool, nth);
}
