/* Vector maths for fused epilogues and the GELU kernels, picked at run time like the GEMM micro-kernels
 * (vmath_avx512.c; NULL entries or no table where the CPU lacks the instructions, and
 * with TM_REFERENCE_KERNELS=1, when callers use their scalar forms). Each function
 * matches its scalar counterpart in core/prims/elementwise.c to a few ulp, not bit for
 * bit. Not a general maths library. */
#ifndef TM_BACKENDS_CPU_VMATH_H
#define TM_BACKENDS_CPU_VMATH_H

#include <stdint.h>

typedef struct tm__vmath {
    const char *name;
    /* y[0..n) = GELU (erf form) of x[0..n); y may equal x. */
    void (*gelu_erf)(const float *x, float *y, int64_t n);
    /* y[0..n) = gy * GELU'(x) (erf form); y may equal gy. */
    void (*gelu_erf_grad)(const float *x, const float *gy, float *y, int64_t n);
    /* y[0..n) = GELU (erf form) of x[0..n) and dx[0..n) = GELU'(x), the same bits as
     * gelu_erf's and as the factor gelu_erf_grad multiplies gy by; dx may equal x, y may
     * not. */
    void (*gelu_erf_d)(const float *x, float *y, float *dx, int64_t n);
    /* Attention's two products for one block of query rows, for head sizes d a multiple
     * of 16 up to TM_ATTN_MAX_D. scores: s (rows, sk; row stride lds) = q (rows, d; row
     * stride ldq) . k^T with k (sk, d; row stride ldk), through kt, scratch of
     * d * round_up(sk, 16) floats that gets k transposed (when pack; else it holds the
     * same k from the call before) where rows > TM_ATTN_DIRECT_ROWS; up to that many rows
     * read k in place and leave kt alone. values: o (rows, d; row stride
     * ldo) = p (rows, sk; row stride lds) . v (sk, d; row stride ldv). The order of each
     * element's sum depends only on the block's row count (callers make it a function
     * of the shapes, so results do not depend on the thread count). */
    void (*attn_scores)(int64_t rows, int64_t sk, int64_t d, const float *q, int64_t ldq,
                        const float *k, int64_t ldk, float *s, int64_t lds, float *kt,
                        int pack);
    void (*attn_values)(int64_t rows, int64_t sk, int64_t d, const float *p, int64_t lds,
                        const float *v, int64_t ldv, float *o, int64_t ldo);
} tm__vmath;

#define TM_ATTN_MAX_D 256
/* Score blocks of at most this many rows go without k's transposed copy. */
#define TM_ATTN_DIRECT_ROWS 8

/* The table for this CPU, or NULL (reference kernels asked for, or no vector unit). */
const tm__vmath *tm__vmath_active(void);

const tm__vmath *tm__vmath_avx512(void);

#endif
