/* tm_sgemm: a BLIS-style blocked GEMM (blocks of B packed into caller scratch, A read in
 * place, a register-tiled micro-kernel from sgemm_avx512.c or sgemm_avx2.c, column panels
 * split over the pool), with the plain C reference selectable at run time
 * (TM_REFERENCE_KERNELS=1) so every caller can be checked against it. Not batched. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "gemm.h"
#include "vmath.h"

#define TINY_GEMM_FLOPS 512.0
/* Up to this many rows the small kernel reads B unpacked: each row streams B once, and
 * packing would read and write all of B for a handful of rows. */
#define SMALL_M 3
/* Below this many flops (about 20 microseconds of one core) a product runs on one
 * thread: waking a sleeping worker costs that much on a busy machine. */
#define PARALLEL_MIN_FLOPS (1 << 21)
#define SCRATCH_ALIGN 64
/* A short last row tile is copied to the stack: every arch has mr <= 16 and kc <= 384. */
#define EDGE_FLOATS (16 * 384)

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

const tm__sgemm_arch *tm__sgemm_active_arch(void) { return active_arch(); }

static pthread_once_t prefetch_once = PTHREAD_ONCE_INIT;
static int prefetch_l2;   /* written once, under prefetch_once */

static void pick_prefetch(void) {
    __builtin_cpu_init();
    const char *force = getenv("TM_PREFETCH");   /* "l1" or "l2": comparisons */
    prefetch_l2 = force ? !strcmp(force, "l2") : __builtin_cpu_is("intel");
}

int tm__stream_prefetch_l2(void) {
    pthread_once(&prefetch_once, pick_prefetch);
    return prefetch_l2;
}

/* The vector maths follow the GEMM's choice: none with TM_REFERENCE_KERNELS=1, and none
 * when TM_SGEMM_ARCH=avx2 asks for the AVX2 paths on an AVX-512 machine. */
static pthread_once_t vmath_once = PTHREAD_ONCE_INIT;
static const tm__vmath *vmath_table;

static void pick_vmath(void) {
    const tm__sgemm_arch *ar = active_arch();
    vmath_table = ar && !strcmp(ar->name, "avx512") ? tm__vmath_avx512() : NULL;
}

const tm__vmath *tm__vmath_active(void) {
    pthread_once(&vmath_once, pick_vmath);
    return vmath_table;
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

/* The plain loops with C's element (i, j) at c[i * c_row + j * c_col]: (ldc, 1) as stored,
 * (1, ldc) stored transposed; the same operations on each element either way. Inlined
 * with constant strides, so the row-major form's inner loop still vectorizes. */
static inline void reference_strided(int trans_a, int trans_b, int64_t m, int64_t n,
                                     int64_t k, float alpha, const float *a, int64_t lda,
                                     const float *b, int64_t ldb, float beta, float *c,
                                     int64_t c_row, int64_t c_col) {
    if (c_col == 1) scale_c(m, n, beta, c, c_row);
    else scale_c(n, m, beta, c, c_col);
    if (alpha == 0.0f || k == 0) return;
    for (int64_t i = 0; i < m; i++) {
        float *restrict ci = c + i * c_row;
        if (trans_b) {
            /* B is stored (n, k): each output is a dot product along a row of B. */
            for (int64_t j = 0; j < n; j++) {
                const float *b_row = b + j * ldb;
                float sum = 0.0f;
                for (int64_t p = 0; p < k; p++) sum += elem_a(trans_a, a, lda, i, p) * b_row[p];
                ci[j * c_col] += alpha * sum;
            }
            continue;
        }
        /* i-p-j order: the inner loop runs along rows of B (and of C as stored), which
         * vectorizes. */
        for (int64_t p = 0; p < k; p++) {
            float scaled = alpha * elem_a(trans_a, a, lda, i, p);
            const float *restrict b_row = b + p * ldb;
            for (int64_t j = 0; j < n; j++) ci[j * c_col] += scaled * b_row[j];
        }
    }
}

void tm_sgemm_reference(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                        float alpha, const float *a, int64_t lda, const float *b,
                        int64_t ldb, float beta, float *c, int64_t ldc) {
    reference_strided(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, 1);
}

/* ---- Choosing the path ------------------------------------------------------------- */

enum { PATH_REFERENCE, PATH_SMALL, PATH_PACKED };

static int choose_path(const tm__sgemm_arch *ar, int64_t m, int64_t n, int64_t k) {
    if (!ar || (double)m * (double)n * (double)k <= TINY_GEMM_FLOPS) return PATH_REFERENCE;
    return m <= SMALL_M ? PATH_SMALL : PATH_PACKED;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

/* Floats of the packed block of B: (kc, nc rounded to nr). A is not packed: the
 * micro-kernel broadcasts its elements from rows that stay in cache, which leaves each
 * thread with no data another must prepare (no barrier inside a product). */
static int64_t packed_b_floats(const tm__sgemm_arch *ar, int64_t n, int64_t k) {
    return min64(k, ar->kc) * round_up(min64(n, ar->nc), ar->nr);
}

/* Up to this many bytes of A's depth block (rows x kc floats), a product with B as
 * stored reads B where it lies instead of packing it: column panel by column panel, every
 * row tile against each, with A (a few hundred KB) staying in L2 and the panels of B
 * streaming in from memory once, each fetched into L2 while the panels before it compute.
 * Packing B first stalled on memory with no FMA running (B being a weight in training,
 * read from memory on each call); above this A no longer stays in L2 across the panels.
 * One Zen 5 core, B cold (a new one each call), packed -> in place: 120 x 384 x 384 184 ->
 * 201 GFLOP/s, 120 x 1536 x 384 181 -> 188, 120 x 384 x 1536 183 -> 196 (B packed once
 * beforehand, as a plan packs a constant: 209, 198, 203); at 384 rows the two were even.
 * MiniLM's gradient plan at 1 x 128 tokens, the forward's products by trained weights:
 * the whole step 3.5% faster on 1 and 2 threads (alternating in one process). */
#define INPLACE_A_BYTES (384 * 1024)

static int inplace_fits(const tm__sgemm_arch *ar, int trans_a, int trans_b, int64_t m,
                        int64_t k) {
    return ar->tile_inplace && !trans_a && !trans_b &&
           (double)m * (double)min64(k, ar->kc) * sizeof(float) <= INPLACE_A_BYTES;
}

size_t tm_sgemm_scratch(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k) {
    const tm__sgemm_arch *ar = active_arch();
    if (m <= 0 || n <= 0 || k <= 0 || choose_path(ar, m, n, k) != PATH_PACKED ||
        inplace_fits(ar, trans_a, trans_b, m, k))
        return 0;
    return (size_t)packed_b_floats(ar, n, k) * sizeof(float) + SCRATCH_ALIGN;
}

/* ---- Packing B --------------------------------------------------------------------- */

/* Rows [p0, p0 + kc) and columns [j0, j0 + cols) of B (not transposed) into panels of
 * nr floats per row, `stride` floats apart. A group of rows at a time, panel by panel
 * within it: the group's rows of B (a few KB) are read from L1 by every panel, and each
 * panel's part is one sequential run of stores. Row by row, every row wrote one piece
 * into each panel, and with panels a multiple of 4 KB apart those pieces fell into one
 * L1 set and waited on each other (the packing took 10-17% of a 128 x 1536 x 384
 * product). */
#define PACK_GROUP_ROWS 8

static inline void copy_panel_row(float *d, const float *src, int nr) {
    if (nr == 32) memcpy(d, src, 32 * sizeof(float));   /* constant sizes: inlined */
    else if (nr == 16) memcpy(d, src, 16 * sizeof(float));
    else memcpy(d, src, (size_t)nr * sizeof(float));
}

/* sums[0..cols) += rows [0, nrows) of b (row stride ldb), row by row, in double. */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("O3")))
#endif
static void add_rows_f64(double *restrict sums, const float *restrict b, int64_t ldb,
                         int64_t nrows, int64_t cols) {
    for (int64_t p = 0; p < nrows; p++)
        for (int64_t j = 0; j < cols; j++) sums[j] += (double)b[p * ldb + j];
}

/* With sums (not NULL), also sums[0..cols) += the group's rows, in order, while they are
 * in L1 (tm_sgemm_colsum). */
static void pack_b_rows(const float *b, int64_t ldb, int64_t p0, int64_t kc, int64_t j0,
                        int64_t cols, int nr, int64_t stride, float *dst, double *sums) {
    int64_t whole = cols / nr * nr;
    for (int64_t g = 0; g < kc; g += PACK_GROUP_ROWS) {
        int64_t ge = g + PACK_GROUP_ROWS < kc ? g + PACK_GROUP_ROWS : kc;
        const float *rows = b + (p0 + g) * ldb + j0;
        float *d = dst + g * nr;
        if (sums) add_rows_f64(sums, rows, ldb, ge - g, cols);
        for (int64_t j = 0; j < whole; j += nr, d += stride)
            for (int64_t p = 0; p < ge - g; p++) copy_panel_row(d + p * nr, rows + p * ldb + j, nr);
        if (whole == cols) continue;
        for (int64_t p = 0; p < ge - g; p++) {
            int64_t t = 0;
            for (; whole + t < cols; t++) d[p * nr + t] = rows[p * ldb + whole + t];
            for (; t < nr; t++) d[p * nr + t] = 0.0f;
        }
    }
}

/* One panel with B transposed (stored (n, k)): each column is a row of B, read in order. */
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
    float *b_packed;
    int64_t small_n_blocks;   /* PATH_SMALL: column blocks */
    const tm_sgemm_epilogue *ep;   /* on each tile after its last depth block; NULL: none */
    const float *bias_first;       /* tm__sgemm_bias_first's; NULL: none */
    int trans_c;   /* C stored transposed: (i, j) at c[j * ldc + i] (tm_sgemm_ct) */
    const float *res_t;   /* trans_c: added after the last depth block, laid out as C */
    const float *mul_t;   /* trans_c: multiplies it there (before res_t), laid out as C */
    double *colsum;       /* B's column sums, added while packing (tm_sgemm_colsum) */
} gemm_job;

/* ---- C stored transposed ------------------------------------------------------------- */

/* Floats of the buffer a tile goes through when C is stored transposed: 16 rows of NR
 * (the AVX-512 store transposes 16 x 16 blocks; rows past the tile's are never stored). */
#define TILE_T_FLOATS (16 * 32)

/* Where tile (i, j)'s kernel writes: C itself, or with trans_c the buffer (NR floats a
 * row). *beta is then the kernel's: with beta 1 (a later depth block) the buffer takes the
 * block's sum alone (0) and tile_finish adds it to C; any other beta but 0 (the caller's,
 * on the first block) has the buffer loaded from C first. *add: tile_finish's add. */
static float *tile_target(const gemm_job *g, int64_t i, int64_t j, int rows, int cols,
                          float *beta, float *buf, int64_t *ld, int *add) {
    *add = 0;
    if (!g->trans_c) {
        *ld = g->ldc;
        return g->c + i * g->ldc + j;
    }
    *ld = g->ar->nr;
    if (*beta == 1.0f) {
        *add = 1;
        *beta = 0.0f;
    } else if (*beta != 0.0f) {
        for (int r = 0; r < rows; r++)
            for (int t = 0; t < cols; t++) buf[r * g->ar->nr + t] = g->c[(j + t) * g->ldc + i + r];
    }
    return buf;
}

/* With trans_c, the buffer's tile into C transposed, or added to it, and after the last
 * depth block (last) times mul_t and plus res_t too (the arch's 16 x 16 register
 * transposes, or plain loops). */
static void tile_finish(const gemm_job *g, int64_t i, int64_t j, int rows, int cols,
                        const float *buf, int add, int last) {
    if (!g->trans_c) return;
    float *c = g->c + j * g->ldc + i;
    const float *res = last && g->res_t ? g->res_t + j * g->ldc + i : NULL;
    const float *mul = last && g->mul_t ? g->mul_t + j * g->ldc + i : NULL;
    if (g->ar->store_t) {
        g->ar->store_t(buf, rows, cols, c, g->ldc, add, mul, res);
        return;
    }
    for (int t = 0; t < cols; t++)
        for (int r = 0; r < rows; r++) {
            float v = add ? c[t * g->ldc + r] + buf[r * g->ar->nr + t] : buf[r * g->ar->nr + t];
            if (mul) v = tm__mul_flushed(v, mul[t * g->ldc + r]);
            c[t * g->ldc + r] = res ? v + res[t * g->ldc + r] : v;
        }
}

/* [begin, end) of `total` units for slice ith of nth. */
static void slice(int64_t total, int ith, int nth, int64_t *begin, int64_t *end) {
    *begin = total * ith / nth;
    *end = total * (ith + 1) / nth;
}

/* Row tiles [i0, i0 + mc) against the packed panels of columns [j0, j1) (panel t at
 * panels + t * stride). Row tile by row tile: its rows of A stay in L1 while the panels
 * (the packed block, sized for L2) stream past, and C is written along its rows, a run
 * of whole lines per row: a weight gradient's C is megabytes no cache holds, and
 * written panel by panel down the rows (a line in each of 96 rows, then the next
 * column) its stores waited on their lines (384 x 1536 x 128: 105 GFLOP/s against 142). */
static void compute_rows(const gemm_job *g, int64_t i0, int64_t mc, int64_t pc, int64_t kc,
                         const float *panels, int64_t stride, int64_t j0, int64_t j1,
                         float beta) {
    const tm__sgemm_arch *ar = g->ar;
    if (ar->mr * ar->kc > EDGE_FLOATS) abort();   /* an arch table out of step with this file */
    int64_t a_row = g->trans_a ? 1 : g->lda, a_step = g->trans_a ? g->lda : 1;
    const float *a = g->a + i0 * a_row + pc * a_step;
    float tile_a[EDGE_FLOATS];
    _Alignas(64) float buf[TILE_T_FLOATS];   /* trans_c's tiles (16 rows read) */
    if (ar->nr > 32) abort();
    if (g->trans_c) memset(buf, 0, sizeof buf);
    for (int64_t i = 0; i < mc; i += ar->mr) {
        int rows = (int)min64(ar->mr, mc - i);
        const float *panel = panels, *ai = a + i * a_row;
        /* A short tile is copied with zero rows, so the kernel reads only A's own memory. */
        int packed = rows < ar->mr;
        /* Whether a full row tile follows (in this block or the next): its rows of A are
         * fetched during this tile's first panel. */
        int next_full = i0 + i + 2 * ar->mr <= g->m;
        if (packed) tm__sgemm_pack_a_tile(ai, a_row, a_step, kc, rows, ar->mr, tile_a);
        for (int64_t j = j0; j < j1; j += ar->nr, panel += stride) {
            int nr = (int)min64(ar->nr, j1 - j);
            int64_t ldt;
            int add;
            float tb = g->bias_first ? 1.0f : beta;   /* the kernel's (bias_first: no trans_c) */
            float *c = tile_target(g, i0 + i, j, rows, nr, &tb, buf, &ldt, &add);
            /* C stored transposed: the tile is nr rows of C, a few floats of each, and the
             * next row tile writes the next floats of those rows. Each such row is its own
             * stream, too many for the hardware prefetchers, and C (a gradient's input
             * cotangent) is memory no cache holds: the line of each row that the next row
             * tile first reaches is fetched for writing now (a backward product 1536 x 128
             * x 384, C cold, one Xeon core: 134 -> 146 GFLOP/s; MiniLM's gradient step
             * about 1%, alternating in one process). */
            if (g->trans_c && i0 + i + 2 * ar->mr <= g->m) {
                int64_t ahead = j * g->ldc + i0 + i + 2 * ar->mr - 1;
                for (int t = 0; t < nr; t++) __builtin_prefetch(g->c + ahead + t * g->ldc, 1, 3);
                if (g->mul_t && pc + kc >= g->k)   /* the factor's line, read there too */
                    for (int t = 0; t < nr; t++)
                        __builtin_prefetch(g->mul_t + ahead + t * g->ldc, 0, 3);
            }
            if (g->bias_first) tm__sgemm_fill_bias(c, ldt, rows, nr, g->bias_first + j);
            if (packed && g->alpha == 1.0f && ar->tile_packed)   /* no FMAs on padding */
                ar->tile_packed(kc, tile_a, panel, c, ldt, rows, nr, tb);
            else if (packed)
                ar->tile(kc, tile_a, 1, ar->mr, panel, c, ldt, rows, nr, g->alpha, tb);
            else if (a_step == 1 && g->alpha == 1.0f && j == j0 && next_full &&
                     ar->tile_rows_next)   /* the row tile's first panel */
                ar->tile_rows_next(kc, ai, a_row, panel, c, ldt, nr, tb, ai + ar->mr * a_row);
            else if (a_step == 1 && g->alpha == 1.0f)   /* A's rows in place, alpha 1 */
                ar->tile_rows(kc, ai, a_row, panel, c, ldt, nr, tb, NULL, 0);
            else if (a_row == 1 && g->alpha == 1.0f && ar->tile_cols)   /* A transposed */
                ar->tile_cols(kc, ai, a_step, panel, c, ldt, nr, tb);
            else
                ar->tile(kc, ai, a_row, a_step, panel, c, ldt, ar->mr, nr, g->alpha, tb);
            tile_finish(g, i0 + i, j, rows, nr, buf, add, pc + kc >= g->k);
        }
        /* The epilogue on the row tile's finished columns at once, still in L1 (12 rows
         * of 512 columns: 24 KB): an activation then runs over whole rows of them, where
         * a tile's 32 columns gave its vector maths too few independent lanes. */
        if (g->ep && pc + kc >= g->k)
            tm_sgemm_epilogue_apply(g->ep, g->c, g->ldc, i0 + i, i0 + i + rows, j0, j1);
    }
}

/* Slice ith of nth owns a range of B's column panels and its own part of the packed
 * block: it packs its columns and computes their tiles for all rows, needing nothing from
 * the other slices. How the columns are chunked does not change any sum (the depth blocks
 * are the same), so results do not depend on the number of slices. */
static void packed_slice(void *arg, int ith, int nth) {
    const gemm_job *g = arg;
    const tm__sgemm_arch *ar = g->ar;
    int64_t kc_max = min64(g->k, ar->kc), stride = kc_max * ar->nr;
    int64_t r0, r1, g0, g1;
    slice((min64(g->n, ar->nc) + ar->nr - 1) / ar->nr, ith, nth, &r0, &r1);
    slice((g->n + ar->nr - 1) / ar->nr, ith, nth, &g0, &g1);
    float *region = g->b_packed + r0 * stride;
    int64_t chunk = r1 - r0;   /* panels that fit this slice's region */
    for (int64_t cp = g0; chunk > 0 && cp < g1; cp += chunk) {
        int64_t j0 = cp * ar->nr, j1 = min64(min64(g1, cp + chunk) * ar->nr, g->n);
        for (int64_t pc = 0; pc < g->k; pc += ar->kc) {
            int64_t kc = min64(ar->kc, g->k - pc);
            if (g->trans_b && ar->pack_bt)
                for (int64_t j = j0; j < j1; j += ar->nr)
                    ar->pack_bt(g->b, g->ldb, pc, kc, j, min64(ar->nr, j1 - j),
                                region + (j - j0) / ar->nr * stride);
            else if (g->trans_b)
                for (int64_t j = j0; j < j1; j += ar->nr)
                    pack_bt_panel(g->b, g->ldb, pc, kc, j, min64(ar->nr, j1 - j), ar->nr,
                                  region + (j - j0) / ar->nr * stride);
            else
                pack_b_rows(g->b, g->ldb, pc, kc, j0, j1 - j0, ar->nr, stride, region,
                            g->colsum ? g->colsum + j0 : NULL);
            float beta = pc == 0 ? g->beta : 1.0f;
            for (int64_t ic = 0; ic < g->m; ic += ar->mc)
                compute_rows(g, ic, min64(ar->mc, g->m - ic), pc, kc, region, stride, j0, j1,
                             beta);
        }
    }
}

/* ---- B read in place ---------------------------------------------------------------- */

/* Panels whose columns the epilogue runs over at once, all rows, after their last depth
 * block (in cache still: 128 rows of 128 columns are 64 KB): an activation over rows of
 * 128 columns, not of one panel's 32 (too few independent vectors for its maths).
 * An epilogue with act_out (a gradient plan's MATMUL_GELU) runs instead once, after the
 * slice's last panel, over all its columns (C's rows are still in L2: at most 256 rows of
 * 384 kept A there, 1.5 MB of C at 1536 columns). Its second output is memory no cache
 * holds (an activation kept for the backward), and written 128 columns at a time down all
 * the rows it was as many streams as rows, which no hardware prefetcher follows: each
 * store waited on its line. Row after row, it is one stream. 128 x 1536 x 384 + bias +
 * GELU to act_out, operands cold, one thread, paired with the grouped epilogue: 13%
 * faster (1.52 -> 1.32 ms median), the same with everything in cache; MiniLM's gradient
 * step at 1 x 128, one thread, about 1% (best of 30, alternating processes against the
 * binary before: 68.5 -> 67.8 ms; docs/architecture.md). */
#define INPLACE_EP_PANELS 4

/* Slice ith of nth owns a range of column panels, as packed_slice, and computes them
 * depth block by depth block, panel by panel, each against every row tile, the row
 * tiles also fetching the next panel (or the next depth block's first) into L2, each its
 * share of the rows. The first row tile fetching all of it asked more of memory than one
 * core gets while it ran (a panel of 384 rows is 48 KB; one tile computes in about 2
 * microseconds), and the panel arrived late: spread over the tiles, a product by a
 * weight read from memory (128 x 1536 x 384, one Xeon core) went from 140 to 159
 * GFLOP/s, and MiniLM's gradient step about 1.3% faster (alternating in one process).
 * Row tiles inside a group of panels were slower: 4 panels of B as it lies (strided rows,
 * 192 KB) no longer stayed in cache between the row tiles (120 x 1536 x 384: 183 -> 142
 * GFLOP/s). Sums as packed_slice's: the same depth blocks, in the same order, whatever
 * the slices. */
static void inplace_slice(void *arg, int ith, int nth) {
    const gemm_job *g = arg;
    const tm__sgemm_arch *ar = g->ar;
    const int64_t nr = ar->nr, mr = ar->mr;
    int64_t q_begin, q_end;
    slice((g->n + nr - 1) / nr, ith, nth, &q_begin, &q_end);
    if (mr * ar->kc > EDGE_FLOATS) abort();   /* an arch table out of step with this file */
    float tile_a[EDGE_FLOATS];
    _Alignas(64) float buf[TILE_T_FLOATS];   /* trans_c's tiles (16 rows read) */
    if (nr > 32) abort();
    if (g->trans_c) memset(buf, 0, sizeof buf);
    const int64_t tiles = (g->m + mr - 1) / mr;
    for (int64_t pc = 0; pc < g->k; pc += ar->kc) {
        int64_t kc = min64(ar->kc, g->k - pc);
        const float *b = g->b + pc * g->ldb;
        int last = pc + kc >= g->k;
        int64_t ep_from = q_begin * nr;   /* the first column the epilogue has not run on */
        int64_t edge = g->m / mr * mr;    /* a short last row tile: copied once a block */
        if (edge < g->m)
            tm__sgemm_pack_a_tile(g->a + edge * g->lda + pc, g->lda, 1, kc, (int)(g->m - edge),
                                  (int)mr, tile_a);
        for (int64_t q = q_begin; q < q_end; q++) {
            int64_t j = q * nr;
            int cols = (int)min64(nr, g->n - j);
            const float *next = q + 1 < q_end ? b + j + nr
                                : !last   ? b + kc * g->ldb + q_begin * nr
                                          : NULL;
            for (int64_t i = 0; i < g->m; i += mr) {
                int rows = (int)min64(mr, g->m - i);
                const float *ai = rows < mr ? tile_a : g->a + i * g->lda + pc;
                int64_t a_row = rows < mr ? 1 : g->lda, a_step = rows < mr ? mr : 1;
                float beta = pc == 0 ? g->beta : 1.0f;
                int64_t ldt;
                int add;
                float *c = tile_target(g, i, j, rows, cols, &beta, buf, &ldt, &add);
                /* Row tile t of `tiles` fetches its share of the next panel's rows. */
                int64_t t = i / mr, lo = t * kc / tiles, hi = (t + 1) * kc / tiles;
                ar->tile_inplace(kc, ai, a_row, a_step, b + j, g->ldb, c, ldt, rows, cols,
                                 g->alpha, beta, next ? next + lo * g->ldb : NULL, hi - lo,
                                 g->bias_first ? g->bias_first + j : NULL);
                tile_finish(g, i, j, rows, cols, buf, add, last);
            }
            if (g->ep && !g->ep->act_out && last &&
                ((q + 1 - q_begin) % INPLACE_EP_PANELS == 0 || q + 1 == q_end)) {
                tm_sgemm_epilogue_apply(g->ep, g->c, g->ldc, 0, g->m, ep_from, j + cols);
                ep_from = j + cols;
            }
        }
    }
    if (g->ep && g->ep->act_out && q_begin < q_end)
        tm_sgemm_epilogue_apply(g->ep, g->c, g->ldc, 0, g->m, q_begin * nr,
                                min64(q_end * nr, g->n));
}

static void run_parallel(tm_pool *pool, int nth, tm_pool_fn fn, gemm_job *g) {
    if (nth <= 1) fn(g, 0, 1);
    else tm_pool_run(pool, nth, fn, g);
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

/* The small path (m <= SMALL_M): B read unpacked, column blocks over the pool. */
static void small_product(const tm__sgemm_arch *ar, int trans_a, int trans_b, int64_t m,
                          int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                          const float *b, int64_t ldb, float beta, float *c, int64_t ldc,
                          tm_pool *pool) {
    gemm_job g = {ar, trans_a, trans_b, m, n, k, alpha, beta, a, b, lda, ldb, ldc, c, NULL, 0,
                  NULL, NULL, 0, NULL, NULL, NULL};
    double flops = 2.0 * (double)m * (double)n * (double)k;
    int nth = flops < PARALLEL_MIN_FLOPS ? 1 : tm_pool_threads(pool);
    g.small_n_blocks = (n + SMALL_COLUMNS - 1) / SMALL_COLUMNS;
    if (nth > g.small_n_blocks) nth = (int)g.small_n_blocks;
    run_parallel(pool, nth, small_slice, &g);
}

void tm_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
              float *c, int64_t ldc, void *scratch, tm_pool *pool) {
    tm_sgemm_ep(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, NULL, scratch,
                pool);
}

static void sgemm_any(int trans_a, int trans_b, int trans_c, int64_t m, int64_t n, int64_t k,
                      float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                      float beta, float *c, int64_t ldc, const tm_sgemm_epilogue *ep,
                      const float *res_t, const float *mul_t, double *colsum, void *scratch,
                      tm_pool *pool) {
    if (m <= 0 || n <= 0) return;
    const tm__sgemm_arch *ar = active_arch();
    int path = k <= 0 || alpha == 0.0f ? PATH_REFERENCE : choose_path(ar, m, n, k);
    int inplace = path == PATH_PACKED && inplace_fits(ar, trans_a, trans_b, m, k);
    if (path == PATH_PACKED && !scratch && !inplace) path = PATH_REFERENCE;
    /* B's column sums (tm_sgemm_colsum: B as stored, C not transposed) ride on its
     * packing; the other paths read B for them first. */
    if (colsum && (path != PATH_PACKED || inplace)) {
        if (k > 0) add_rows_f64(colsum, b, ldb, k, n);
        colsum = NULL;
    }
    if (trans_c && path != PATH_PACKED) {   /* few rows or few flops: the plain loops */
        reference_strided(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, 1, ldc);
        for (int64_t j = 0; mul_t && j < n; j++)
            for (int64_t i = 0; i < m; i++)
                c[j * ldc + i] = tm__mul_flushed(c[j * ldc + i], mul_t[j * ldc + i]);
        for (int64_t j = 0; res_t && j < n; j++)
            for (int64_t i = 0; i < m; i++) c[j * ldc + i] += res_t[j * ldc + i];
        return;
    }
    if (path != PATH_PACKED) {   /* the epilogue after the whole product */
        if (k <= 0 || alpha == 0.0f) scale_c(m, n, beta, c, ldc);
        else if (path == PATH_REFERENCE)
            tm_sgemm_reference(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        else
            small_product(ar, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc,
                          pool);
        tm_sgemm_epilogue_apply(ep, c, ldc, 0, m, 0, n);
        return;
    }
    gemm_job g = {ar, trans_a, trans_b, m, n, k, alpha, beta, a, b, lda, ldb, ldc, c, NULL, 0,
                  ep, NULL, trans_c, trans_c ? res_t : NULL, trans_c ? mul_t : NULL, colsum};
    tm_sgemm_epilogue rest;
    g.bias_first = tm__sgemm_bias_first(ep, beta, k, ar->kc, &rest, &g.ep);
    double flops = 2.0 * (double)m * (double)n * (double)k;
    int nth = flops < PARALLEL_MIN_FLOPS ? 1 : tm_pool_threads(pool);
    uintptr_t at = ((uintptr_t)scratch + SCRATCH_ALIGN - 1) & ~(uintptr_t)(SCRATCH_ALIGN - 1);
    g.b_packed = (float *)at;
    if (inplace) {
        int64_t panels = (n + ar->nr - 1) / ar->nr;
        if (nth > panels) nth = (int)panels;
        run_parallel(pool, nth, inplace_slice, &g);
        return;
    }
    int64_t panels = (min64(n, ar->nc) + ar->nr - 1) / ar->nr;
    if (nth > panels) nth = (int)panels;
    run_parallel(pool, nth, packed_slice, &g);
}

void tm_sgemm_ep(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                 float *c, int64_t ldc, const tm_sgemm_epilogue *ep, void *scratch,
                 tm_pool *pool) {
    sgemm_any(trans_a, trans_b, 0, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, ep, NULL, NULL,
              NULL, scratch, pool);
}

void tm_sgemm_ct(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                 float *c, int64_t ldc, void *scratch, tm_pool *pool) {
    sgemm_any(trans_a, trans_b, 1, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, NULL, NULL,
              NULL, NULL, scratch, pool);
}

void tm_sgemm_ct_add(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                     float *c, int64_t ldc, const float *r, void *scratch, tm_pool *pool) {
    sgemm_any(trans_a, trans_b, 1, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, NULL, r,
              NULL, NULL, scratch, pool);
}

void tm_sgemm_ct_mul(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                     float *c, int64_t ldc, const float *f, void *scratch, tm_pool *pool) {
    sgemm_any(trans_a, trans_b, 1, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, NULL, NULL, f,
              NULL, scratch, pool);
}

void tm_sgemm_colsum(int trans_a, int64_t m, int64_t n, int64_t k, const float *a,
                     int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc,
                     double *colsum, void *scratch, tm_pool *pool) {
    sgemm_any(trans_a, 0, 0, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc, NULL, NULL, NULL,
              colsum, scratch, pool);
}
