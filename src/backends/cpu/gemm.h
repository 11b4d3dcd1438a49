/* Single-precision matrix multiply for the CPU kernels: oneDNN's sgemm, or a plain C
 * reference chosen at run time with TM_REFERENCE_KERNELS=1 (read once per process).
 * Not a BLAS: row-major only, float only, no batching (callers loop). */
#ifndef TM_BACKENDS_CPU_GEMM_H
#define TM_BACKENDS_CPU_GEMM_H

#include <stdint.h>

/* C (m, n) = alpha * op(A) (m, k) * op(B) (k, n) + beta * C, all row-major; op(X) is X
 * or, when trans_x is non-zero, X transposed (then A is stored (k, m), B (n, k)).
 * As in BLAS, beta == 0 overwrites C without reading it (NaNs in C do not survive). */
void tm_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
              const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
              float *c, int64_t ldc);

/* The plain C implementation, always; for tests that compare it with tm_sgemm. */
void tm_sgemm_reference(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                        float alpha, const float *a, int64_t lda, const float *b,
                        int64_t ldb, float beta, float *c, int64_t ldc);

/* Non-zero when the environment asked for reference kernels (TM_REFERENCE_KERNELS=1).
 * Other kernels may consult it to skip their own fast paths. */
int tm_use_reference_kernels(void);

#endif
