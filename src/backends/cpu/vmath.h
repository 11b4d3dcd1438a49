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
} tm__vmath;

/* The table for this CPU, or NULL (reference kernels asked for, or no vector unit). */
const tm__vmath *tm__vmath_active(void);

const tm__vmath *tm__vmath_avx512(void);

#endif
