/* Kernels over a decoder's KV cache as passes/kv_append.c keeps it, rows of every kv head
 * side by side ((P, B, H, D) or (B, P, H, D)), in float32 or float16: a decode step's attention products
 * in one sweep over the rows for all kv heads, and the conversions of rows to and from
 * half precision. AVX-512 (vmath_avx512.c), AVX2 with F16C (kvmath_avx2.c) and plain C
 * (kvmath.c), picked at run time. Not the softmax, not prompts' products (attention.c). */
#ifndef TM_BACKENDS_CPU_KVMATH_H
#define TM_BACKENDS_CPU_KVMATH_H

#include <stdint.h>

typedef struct tm__kvmath {
    const char *name;
    /* Head sizes d this table takes: a multiple of this (the C table: any). */
    int d_multiple;
    /* Scores of one decode step for `heads` kv heads: for kv head h and query row r of
     * its group, s[(h * group + r) * lds + j] = q[(h * group + r) * ldq ..] . k[j * ldk +
     * h * d ..] over the sk keys, k float32 or (half) float16 with its row stride ldk in
     * elements. Each score is a fixed chain of operations over d: it does not depend on
     * the number of heads or rows given. */
    void (*scores)(int64_t heads, int64_t group, int64_t sk, int64_t d, const float *q,
                   int64_t ldq, const void *k, int64_t ldk, int half, float *s, int64_t lds);
    /* Values of one decode step: o[(h * group + r) * ldo + c] = sum over j, in order, of
     * p[(h * group + r) * lds + j] * v[j * ldv + h * d + c]. */
    void (*values)(int64_t heads, int64_t group, int64_t sk, int64_t d, const float *p,
                   int64_t lds, const void *v, int64_t ldv, int half, float *o, int64_t ldo);
    /* y[0..n) = x[0..n) converted, rounding to nearest even (as tm_f32_to_f16). */
    void (*to_f16)(const float *x, uint16_t *y, int64_t n);
    void (*to_f32)(const uint16_t *x, float *y, int64_t n);
} tm__kvmath;

/* The table for this CPU: AVX-512, else AVX2 with FMA and F16C, else C; TM_KERNEL_ISA=avx2
 * or scalar asks for a lesser one (tests compare them). Never NULL. */
const tm__kvmath *tm__kvmath_active(void);

const tm__kvmath *tm__kvmath_c(void);
const tm__kvmath *tm__kvmath_avx2(void);     /* NULL where the CPU lacks it */
const tm__kvmath *tm__kvmath_avx512(void);   /* NULL where the CPU lacks it */

#endif
