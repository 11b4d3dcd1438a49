/* Single-precision matrix multiply for the CPU kernels: our own packed GEMM (AVX-512 or
 * AVX2 micro-kernels picked at run time), or a plain C reference chosen with
 * TM_REFERENCE_KERNELS=1. Not a BLAS: row-major only, float only, no batching (callers loop). */
#ifndef TM_BACKENDS_CPU_GEMM_H
#define TM_BACKENDS_CPU_GEMM_H

#include <float.h>
#include <stddef.h>
#include <stdint.h>
#include "pool.h"

/* Bytes of scratch tm_sgemm needs for this problem (0 when it packs nothing). Bounded by
 * the blocking (a few MiB at most) however large m, n and k are; independent of the
 * thread count. Any smaller problem needs no more than a larger one. */
size_t tm_sgemm_scratch(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k);

/* C (m, n) = alpha * op(A) (m, k) * op(B) (k, n) + beta * C, all row-major; op(X) is X
 * or, when trans_x is non-zero, X transposed (then A is stored (k, m), B (n, k)).
 * As in BLAS, beta == 0 overwrites C without reading it (NaNs in C do not survive).
 * scratch: tm_sgemm_scratch(...) bytes, any alignment (NULL: the reference runs when
 * scratch was needed). pool: threads to split the work over (NULL: the calling thread).
 * The result does not depend on the number of threads. Allocates nothing. */
void tm_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
              float *c, int64_t ldc, void *scratch, tm_pool *pool);

/* tm_sgemm, then the epilogue (below; NULL: none) on C: in the packed path on each
 * tile after its last depth block, while it is in cache. The same results as tm_sgemm
 * followed by the epilogue over all of C. */
struct tm_sgemm_epilogue;
void tm_sgemm_ep(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                 float *c, int64_t ldc, const struct tm_sgemm_epilogue *ep, void *scratch,
                 tm_pool *pool);

/* tm_sgemm with C stored transposed: element (i, j) of the product goes to c[j * ldc + i]
 * (C is (n, m), row stride ldc). Each tile of the product is written as a run down C's
 * rows, so that a product computed as (B^T A^T)^T for its packing's sake needs no
 * transpose after it. The same scratch as tm_sgemm; the same results, bit for bit, as
 * tm_sgemm's followed by a transpose, except for products of at most 3 rows (where the
 * plain loops run, not tm_sgemm's small kernel: equal to rounding). No epilogue. */
void tm_sgemm_ct(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                 float *c, int64_t ldc, void *scratch, tm_pool *pool);

/* tm_sgemm_ct, then + r, laid out as C (element (i, j) at r[j * ldc + i]), added to each
 * tile as it is stored after its last depth block: the same sums in the same order as
 * tm_sgemm_ct followed by an Add (a backward's cotangent summed into another). */
void tm_sgemm_ct_add(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                     float *c, int64_t ldc, const float *r, void *scratch, tm_pool *pool);

/* tm_sgemm_ct, then times f, laid out as C, each tile multiplied as it is stored after
 * its last depth block, subnormals flushed as the epilogue's mul: the same products,
 * rounded the same way, as tm_sgemm_ct followed by a Mul, but for values below FLT_MIN
 * (a backward's cotangent through GELU, times the derivative its forward kept). */
void tm_sgemm_ct_mul(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                     float *c, int64_t ldc, const float *f, void *scratch, tm_pool *pool);

/* tm_sgemm with B as stored (alpha 1, beta 0) that also adds each column of B, over its
 * k rows in order, into colsum[0..n) (doubles the caller zeroes): a weight gradient x^T gy
 * and its bias's gradient, the column sums of gy, from one read of gy (each packed block
 * of B summed as it is packed). The same product as tm_sgemm; the same sums, bit for bit,
 * as adding B's rows in order in double. */
void tm_sgemm_colsum(int trans_a, int64_t m, int64_t n, int64_t k, const float *a,
                     int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc,
                     double *colsum, void *scratch, tm_pool *pool);

/* The plain C implementation, always; for tests that compare it with tm_sgemm. */
void tm_sgemm_reference(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                        float alpha, const float *a, int64_t lda, const float *b,
                        int64_t ldb, float beta, float *c, int64_t ldc);

/* Name of the micro-kernel tm_sgemm uses ("avx512", "avx2" or "reference"). */
const char *tm_sgemm_kernel_name(void);

/* Non-zero when the environment asked for reference kernels (TM_REFERENCE_KERNELS=1).
 * Other kernels may consult it to skip their own fast paths. */
int tm_use_reference_kernels(void);

/* ---- An operand packed once (sgemm_packed.c) ------------------------------------------
 * A plan packs its constant weights when it is made: B (MatMul weights) into the
 * micro-kernel's column panels, or A (convolution weights) into its row panels. Packed
 * layout of a (k, width) operand with panel width P and depth block D: depth block after
 * depth block, within each every panel of P columns, (block rows) x P floats, columns
 * past width zero; tm_sgemm_packed_floats(width, k, P) floats in all. */

/* The panel width and depth block the active micro-kernel reads, for B and for A. The
 * same for every call in a process; a layout that does not match the active kernel
 * (made under another TM_SGEMM_ARCH) is still computed right, by the plain loops. */
void tm_sgemm_pack_layout(int *panel, int *depth);
void tm_sgemm_pack_a_layout(int *panel, int *depth);
size_t tm_sgemm_packed_floats(int64_t width, int64_t k, int panel);
/* Before a large packed operand is written: asks the OS for huge pages under it (where it
 * has them, e.g. Linux THP in "madvise" mode). A decode step streams every weight once;
 * with 2 MiB pages the stream takes far fewer TLB misses and page faults at plan time.
 * Only advice: nothing changes where it is refused. */
void tm_sgemm_advise_packed(void *p, size_t bytes);
/* op(B) (k, n) into dst; op(A) (m, k) into dst (rows of A as the panels' columns). */
void tm_sgemm_pack_b(int trans_b, int64_t n, int64_t k, const float *b, int64_t ldb,
                     int panel, int depth, float *dst);
void tm_sgemm_pack_a(int trans_a, int64_t m, int64_t k, const float *a, int64_t lda,
                     int panel, int depth, float *dst);

/* What happens to each tile after its product: c += bias (per column, or per row when
 * bias_rows), then c *= mul (row stride ldm; subnormal factors and products flushed: a
 * value below FLT_MIN in magnitude becomes a zero of its sign, as GELU_GRAD's vector
 * kernel does under FTZ and DAZ, whose product by GELU's derivative this mostly is), then
 * c = activation(c), then c += residual (row stride ldr). Any part may be NULL.
 * activation(arg, x, y, n) writes y[0..n) from x[0..n), lane by lane (y may be x). With
 * act_out (and an activation), activation(c) + residual goes there instead (row stride
 * ld_act, the same rows and columns) and c keeps the product plus bias (times mul): a
 * gradient plan saves the activation's input for its backward, and writing both from the
 * tile in cache spares a pass over the whole product. activation_d (with act_out, in place of
 * activation; ignored without act_out) writes y = activation(x) to act_out and the
 * activation's derivative at x over x itself (dx = x): c keeps the derivative, all its
 * backward needs (GELU's). mul and activation_d are tm_sgemm's (tm_sgemm_ep and
 * tm_sgemm_bpacked); the quantized GEMMs do not read them. */
typedef struct tm_sgemm_epilogue {
    const float *bias;
    int bias_rows;
    void (*activation)(const void *arg, const float *x, float *y, int64_t n);
    const void *activation_arg;
    const float *residual;
    int64_t ldr;
    float *act_out;
    int64_t ld_act;
    void (*activation_d)(const float *x, float *y, float *dx, int64_t n);
    const float *mul;
    int64_t ldm;
} tm_sgemm_epilogue;

/* The epilogue on rows [i0, i1) and columns [j0, j1) of c (row stride ldc) that already
 * hold their products, as the packed GEMMs apply it to each tile (for kernels with their
 * own products, such as MATMUL_NBITS'). NULL or empty: nothing. */
void tm_sgemm_epilogue_apply(const tm_sgemm_epilogue *ep, float *c, int64_t ldc, int64_t i0,
                             int64_t i1, int64_t j0, int64_t j1);

/* C (m, n) = A (m, k, row stride lda) . B, B packed by tm_sgemm_pack_b; then the
 * epilogue (NULL: none). Overwrites C. Allocates nothing, needs no scratch; threads over
 * tasks of rows and columns, with results independent of the thread count. */
void tm_sgemm_bpacked(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                      const float *b_packed, int panel, int depth, float *c, int64_t ldc,
                      const tm_sgemm_epilogue *ep, tm_pool *pool);

/* C (m, n) = A . B (k, n, row stride ldb), A packed by tm_sgemm_pack_a; then the
 * epilogue. B is packed per call into scratch of tm_sgemm_apacked_scratch(m, n, k) bytes
 * (any alignment; bounded, whatever the sizes and threads). */
size_t tm_sgemm_apacked_scratch(int64_t m, int64_t n, int64_t k);
void tm_sgemm_apacked(int64_t m, int64_t n, int64_t k, const float *a_packed, int panel,
                      int depth, const float *b, int64_t ldb, float *c, int64_t ldc,
                      const tm_sgemm_epilogue *ep, void *scratch, size_t scratch_bytes,
                      tm_pool *pool);

/* The plain loops over the packed layouts, always (reference kernels, tests). */
void tm_sgemm_bpacked_reference(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                                const float *b_packed, int panel, int depth, float *c,
                                int64_t ldc, const tm_sgemm_epilogue *ep);
void tm_sgemm_apacked_reference(int64_t m, int64_t n, int64_t k, const float *a_packed,
                                int panel, int depth, const float *b, int64_t ldb, float *c,
                                int64_t ldc, const tm_sgemm_epilogue *ep);

/* ---- Between gemm.c and the micro-kernel files (sgemm_avx2.c, sgemm_avx512.c) ------- */

/* One register tile: c (mr, nr) = alpha * a (MR, k) . b_packed (k, NR) + beta * c, beta
 * == 0 not reading c. Element (i, p) of a is a[i * a_row + p * a_step], MR rows of it
 * readable (A is not packed: its rows stream from cache as they are); b_packed holds NR
 * floats per step of k. Rows and columns beyond mr and nr are not stored. */
typedef void (*tm__sgemm_tile_fn)(int64_t k, const float *a, int64_t a_row, int64_t a_step,
                                  const float *b_packed, float *c, int64_t ldc, int mr,
                                  int nr, float alpha, float beta);
/* Rows [0, m) of c (m, n) straight from unpacked A and B (m small: packing B would cost
 * more than the product); columns [n0, n1) only. */
typedef void (*tm__sgemm_small_fn)(int trans_a, int trans_b, int64_t m, int64_t n0,
                                   int64_t n1, int64_t k, float alpha, const float *a,
                                   int64_t lda, const float *b, int64_t ldb, float beta,
                                   float *c, int64_t ldc);

/* Rows [0, m) of c (m <= TM__SGEMM_ROWS_MAX, columns [0, nr)) = a (m, k, row stride lda)
 * . b_packed (k, NR), plus c when beta != 0 (beta is 0 or 1): few rows against a packed
 * panel, as a decode step has them, bound by reading the panel rather than by FMAs. */
#define TM__SGEMM_ROWS_MAX 4
typedef void (*tm__sgemm_rows_fn)(int64_t k, const float *a, int64_t lda, int m,
                                  const float *b_packed, float *c, int64_t ldc, int nr,
                                  float beta);

/* A register tile, c (mr, nr) = a_packed (k, MR) . B (+ c when beta != 0), with row p
 * of B at b + b_offset[p] (nr floats read there, masked: nothing past them): an implicit
 * GEMM over a convolution's input rows, with nothing packed. */
typedef void (*tm__sgemm_indirect_fn)(int64_t k, const float *a_packed, const float *b,
                                      const int64_t *b_offset, float *c, int64_t ldc, int mr,
                                      int nr, float beta);

/* The register tile with A packed (MR floats a step of k, tm_sgemm_pack_a's layout):
 * c (mr, nr) = a_packed . b_packed (+ c when beta != 0). */
typedef void (*tm__sgemm_packed_fn)(int64_t k, const float *a_packed, const float *b_packed,
                                    float *c, int64_t ldc, int mr, int nr, float beta);

/* A full register tile, c (MR, nr) = a (MR rows of stride lda) . b_packed + beta * c
 * (beta == 0: c not read), A read where it lies. Each step of k it may prefetch two
 * lines, at pf + step * pf_step floats and 16 floats on (pf NULL: b_packed's own stream,
 * some steps ahead; the AVX2 kernel prefetches nothing), so that a tile whose B is
 * already in cache can fetch the next B. */
typedef void (*tm__sgemm_rows_tile_fn)(int64_t k, const float *a, int64_t lda,
                                       const float *b_packed, float *c, int64_t ldc, int nr,
                                       float beta, const float *pf, int64_t pf_step);

/* A full register tile with A stored transposed (op(A) = A^T, the tile's MR rows side by
 * side at each k, `step` floats apart): c (MR, nr) = a . b_packed + beta * c. */
typedef void (*tm__sgemm_cols_tile_fn)(int64_t k, const float *a, int64_t step,
                                       const float *b_packed, float *c, int64_t ldc, int nr,
                                       float beta);

/* One panel of op(B) with B stored transposed ((n, k), row stride ldb): columns
 * [j0, j0 + cols) of op(B) (cols <= NR), steps [p0, p0 + kc), packed NR floats a step
 * with zeros past cols. */
typedef void (*tm__sgemm_pack_bt_fn)(const float *b, int64_t ldb, int64_t p0, int64_t kc,
                                     int64_t j0, int64_t cols, float *dst);

/* tile_rows_fn without its pf stream, fetching instead the next row tile's rows of A
 * (next: that tile's first row, lda apart) into L2 while it runs. */
typedef void (*tm__sgemm_rows_next_fn)(int64_t k, const float *a, int64_t lda,
                                       const float *b_packed, float *c, int64_t ldc, int nr,
                                       float beta, const float *next);

/* A register tile with B read where it lies, nothing packed: c (mr, nr) = alpha * a . b
 * + beta * c (beta == 0: c not read), row p of B at b + p * ldb (nr <= NR floats of it
 * read, through masks). A is a full tile of rows in place (a_step == 1, row stride a_row;
 * mr is then MR) or a packed short tile (a_row 1, a_step MR, zero rows past mr). It
 * fetches next_rows rows of next (ldb apart) into L2, spread over its steps of k (next
 * NULL: none). With bias (nr floats; beta then 0), c = alpha * a . b + bias. */
typedef void (*tm__sgemm_inplace_fn)(int64_t k, const float *a, int64_t a_row, int64_t a_step,
                                     const float *b, int64_t ldb, float *c, int64_t ldc, int mr,
                                     int nr, float alpha, float beta, const float *next,
                                     int64_t next_rows, const float *bias);

/* A tile (rows <= 16, cols <= NR) from t (NR floats a row; 16 rows readable) into C
 * stored transposed: t[r * NR + q] to c[q * ldc + r], or added to it (add); then times
 * mul and plus res at the same place (each laid out as C; NULL: none). */
typedef void (*tm__sgemm_store_t_fn)(const float *t, int rows, int cols, float *c,
                                     int64_t ldc, int add, const float *mul, const float *res);

/* tile_rows_fn over one depth block, C overwritten: c (MR, nr) = a . b_packed + bias
 * (nr floats). */
typedef void (*tm__sgemm_rows_bias_fn)(int64_t k, const float *a, int64_t lda,
                                       const float *b_packed, float *c, int64_t ldc, int nr,
                                       const float *bias, const float *pf, int64_t pf_step);

typedef struct tm__sgemm_arch {
    const char *name;
    int mr, nr;                 /* register tile */
    int64_t kc, mc, nc;         /* cache blocks: a (mc, kc) in L2, b_packed (kc, nc) */
    tm__sgemm_tile_fn tile;
    tm__sgemm_small_fn small;
    tm__sgemm_rows_fn rows;
    tm__sgemm_indirect_fn tile_indirect;
    tm__sgemm_packed_fn tile_packed;
    tm__sgemm_rows_tile_fn tile_rows;
    tm__sgemm_cols_tile_fn tile_cols;   /* NULL: tile */
    tm__sgemm_pack_bt_fn pack_bt;       /* NULL: plain loops */
    tm__sgemm_rows_next_fn tile_rows_next;   /* NULL: tile_rows */
    tm__sgemm_inplace_fn tile_inplace;       /* NULL: B always packed */
    tm__sgemm_store_t_fn store_t;            /* NULL: plain loops */
    tm__sgemm_rows_bias_fn tile_rows_bias;   /* NULL: the bias filled in first */
} tm__sgemm_arch;

/* The arch tm_sgemm uses (NULL: the reference, TM_REFERENCE_KERNELS=1). */
const tm__sgemm_arch *tm__sgemm_active_arch(void);

/* A short row tile of A (rows rows; element (r, p) at a[r * a_row + p * a_step], kc steps)
 * packed mr floats a step with zero rows below, for the tile kernels (tm_sgemm's and the
 * packed-B GEMM's). Row by row: for A in rows, the reads run along it. */
static inline void tm__sgemm_pack_a_tile(const float *a, int64_t a_row, int64_t a_step,
                                         int64_t kc, int rows, int mr, float *dst) {
    if (a_row == 1) {   /* A transposed: a step's rows lie side by side */
        for (int64_t p = 0; p < kc; p++)
            for (int r = 0; r < mr; r++) dst[p * mr + r] = r < rows ? a[r + p * a_step] : 0.0f;
        return;
    }
    for (int r = 0; r < mr; r++)
        for (int64_t p = 0; p < kc; p++) dst[p * mr + r] = r < rows ? a[r * a_row + p * a_step] : 0.0f;
}

/* A column bias over a product of one depth block (k <= depth) that overwrites C (beta
 * 0) goes into each tile before the product, which then adds to it: the same sums in the
 * same order as the epilogue's (the product, then + bias), without the epilogue's second
 * pass over the tile (1024 x 384 x 384 with the bias: 1.61-1.67 -> 1.50-1.56 ms, best of
 * 64 calls on one Zen 5 core, 1.43-1.48 without one). Returns that bias, or NULL (then
 * *rest = ep); *rest is the epilogue left after it (NULL: nothing), kept in *buf. */
static inline const float *tm__sgemm_bias_first(const tm_sgemm_epilogue *ep, float beta,
                                                int64_t k, int64_t depth,
                                                tm_sgemm_epilogue *buf,
                                                const tm_sgemm_epilogue **rest) {
    *rest = ep;
    if (!ep || !ep->bias || ep->bias_rows || beta != 0.0f || k > depth) return NULL;
    *buf = *ep;
    buf->bias = NULL;
    *rest = buf->activation || buf->activation_d || buf->residual || buf->mul ? buf : NULL;
    return ep->bias;
}

/* c (rows x nr, row stride ldc) = bias[0..nr) in every row: bias_first's tile. */
static inline void tm__sgemm_fill_bias(float *c, int64_t ldc, int rows, int nr,
                                       const float *bias) {
    for (int r = 0; r < rows; r++, c += ldc) {
        if (nr == 32) __builtin_memcpy(c, bias, 32 * sizeof *c);   /* inlined: whole panels */
        else if (nr == 16) __builtin_memcpy(c, bias, 16 * sizeof *c);
        else __builtin_memcpy(c, bias, (size_t)nr * sizeof *c);
    }
}

/* v, or a zero of its sign below FLT_MIN in magnitude (NaN kept). */
static inline float tm__flush_subnormal(float v) {
    return v > -FLT_MIN && v < FLT_MIN ? __builtin_copysignf(0.0f, v) : v;
}

/* a * b as under FTZ and DAZ: subnormal operands read as zeros of their sign, a subnormal
 * product flushed likewise (the epilogue's mul; GELU_GRAD's scalar path). */
static inline float tm__mul_flushed(float a, float b) {
    return tm__flush_subnormal(tm__flush_subnormal(a) * tm__flush_subnormal(b));
}

/* 1 where kernels streaming weights from memory should prefetch them into L2 rather
 * than L1: Intel cores, whose L1 prefetches hold their few line-fill buffers and stalled
 * the stream; 0 on AMD (Zen 4), where L1 was measured best. Decided once. */
int tm__stream_prefetch_l2(void);

/* NULL where the compiler or the CPU lacks the instructions. */
const tm__sgemm_arch *tm__sgemm_arch_avx2(void);
const tm__sgemm_arch *tm__sgemm_arch_avx512(void);

#endif
