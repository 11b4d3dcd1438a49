/* AVX-512 forms of the maths that fused epilogues and the GELU kernels run over whole
 * tensors (GELU's erf form after the FFN's first product, and its derivative): the same construction as the scalar kernels in
 * core/prims/elementwise.c (erfc from Numerical Recipes' Chebyshev form, exp by range
 * reduction and a polynomial), sixteen lanes at a time. Compiled with -mavx512f and used
 * only when the CPU has it; not the elementwise primitives themselves. */
#include "vmath.h"

#if defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>

/* exp(w) for w <= 0 (the erfc argument): n = round(w / ln 2), r = w - n ln 2 in two
 * parts, a degree-6 polynomial, then 2^n by scalef (which underflows to 0 gracefully). */
static inline __m512 exp_nonpositive(__m512 w) {
    w = _mm512_max_ps(w, _mm512_set1_ps(-104.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(w, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), w);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}

/* 1 / d for d >= 1 (erfc's 1 / (1 + z / 2)): the 14-bit estimate and one Newton step,
 * within an ulp or two of the division, which the FMA pipes do not wait on. */
static inline __m512 recip(__m512 d) {
    __m512 r = _mm512_rcp14_ps(d);
    return _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f)));
}

/* 1 + erf(x / sqrt 2), with 1 + erf(-u) written erfc(u) so negative x keeps its relative
 * accuracy (erfc in Numerical Recipes' Chebyshev form, as the scalar kernels have it). */
static inline __m512 one_plus_erf16(__m512 x) {
    /* |x| / sqrt 2, capped where erfc is 0 anyway (so that 1 / (1 + z / 2) stays finite;
     * a NaN becomes the cap here: callers restore it). */
    __m512 z = _mm512_min_ps(_mm512_mul_ps(_mm512_abs_ps(x), _mm512_set1_ps(0.70710678118654752440f)),
                             _mm512_set1_ps(1e4f));
    __m512 t = recip(_mm512_fmadd_ps(_mm512_set1_ps(0.5f), z, _mm512_set1_ps(1.0f)));
    __m512 p = _mm512_set1_ps(0.17087277f);
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.82215223f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.48851587f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.13520398f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.27886807f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.18628806f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.09678418f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.37409196f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.00002368f));
    p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.26551223f));
    __m512 e = _mm512_mul_ps(t, exp_nonpositive(_mm512_fnmadd_ps(z, z, p)));
    __mmask16 neg = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ);
    return _mm512_mask_blend_ps(neg, _mm512_sub_ps(_mm512_set1_ps(2.0f), e), e);
}

/* 0.5 x (1 + erf(x / sqrt 2)), as gelu_erf_f32. */
static inline __m512 gelu16(__m512 x) {
    __m512 y = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), one_plus_erf16(x));
    /* NaN in, NaN out (the comparisons above treat it as positive). */
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    return _mm512_mask_mov_ps(y, nan, x);
}

/* gy times GELU's derivative, Phi(x) + x phi(x): the cdf as in gelu16, the density
 * exp(-x^2 / 2) / sqrt(2 pi) by exp_nonpositive, as gelu_erf_derivative_f32. */
static inline __m512 gelu_grad16(__m512 x, __m512 gy) {
    __m512 cdf = _mm512_mul_ps(_mm512_set1_ps(0.5f), one_plus_erf16(x));
    __m512 w = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(-0.5f), x), x);
    __m512 pdf = _mm512_mul_ps(_mm512_set1_ps(0.39894228040143267794f), exp_nonpositive(w));
    __m512 y = _mm512_mul_ps(gy, _mm512_fmadd_ps(x, pdf, cdf));
    /* NaN in x gives NaN (the comparisons above treat it as positive). */
    __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    return _mm512_mask_mov_ps(y, nan, x);
}

static void gelu_erf_grad(const float *x, const float *gy, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, gelu_grad16(_mm512_loadu_ps(x + i), _mm512_loadu_ps(gy + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, gelu_grad16(_mm512_maskz_loadu_ps(m, x + i),
                                                     _mm512_maskz_loadu_ps(m, gy + i)));
    }
}

static void gelu_erf(const float *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, gelu16(_mm512_loadu_ps(x + i)));
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, gelu16(_mm512_maskz_loadu_ps(m, x + i)));
    }
}

static const tm__vmath vmath512 = {"avx512", gelu_erf, gelu_erf_grad};

const tm__vmath *tm__vmath_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") ? &vmath512 : 0;
}

#else

const tm__vmath *tm__vmath_avx512(void) { return 0; }

#endif
