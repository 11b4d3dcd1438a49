/* Single-precision matrix multiply for the CPU kernels: our own packed GEMM (AVX-512 or
 * AVX2 micro-kernels picked at run time), or a plain C reference chosen with
 * TM_REFERENCE_KERNELS=1. Not a BLAS: row-major only, float only, no batching (callers loop). */
#ifndef TM_BACKENDS_CPU_GEMM_H
#define TM_BACKENDS_CPU_GEMM_H

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

/* The plain C implementation, always; for tests that compare it with tm_sgemm. */
void tm_sgemm_reference(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                        float alpha, const float *a, int64_t lda, const float *b,
                        int64_t ldb, float beta, float *c, int64_t ldc);

/* Name of the micro-kernel tm_sgemm uses ("avx512", "avx2" or "reference"). */
const char *tm_sgemm_kernel_name(void);

/* Non-zero when the environment asked for reference kernels (TM_REFERENCE_KERNELS=1).
 * Other kernels may consult it to skip their own fast paths. */
int tm_use_reference_kernels(void);

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

typedef struct tm__sgemm_arch {
    const char *name;
    int mr, nr;                 /* register tile */
    int64_t kc, mc, nc;         /* cache blocks: a (mc, kc) in L2, b_packed (kc, nc) */
    tm__sgemm_tile_fn tile;
    tm__sgemm_small_fn small;
} tm__sgemm_arch;

/* NULL where the compiler or the CPU lacks the instructions. */
const tm__sgemm_arch *tm__sgemm_arch_avx2(void);
const tm__sgemm_arch *tm__sgemm_arch_avx512(void);

#endif
