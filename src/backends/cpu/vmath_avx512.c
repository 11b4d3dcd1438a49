/* AVX-512 forms of the maths that fused epilogues and the GELU kernels run over whole
 * tensors (GELU's erf form after the FFN's first product, the GELU primitive's f32
 * kernel, and its derivative): the construction of the scalar kernels in
 * core/prims/elementwise.c (erfc in Numerical Recipes' form, an exponential by range
 * reduction and a polynomial), in base 2 and with polynomials fitted for float
 * coefficients (tools/fit_gelu.py), sixteen lanes at a time. Compiled with -mavx512f
 * -mavx512dq (exp2_'s reduce) and used only when the CPU has both; the attention
 * products below too. */
#include "vmath.h"
#include "kvmath.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512DQ__)
#include <immintrin.h>
#include "transpose_avx512.h"

/* The maths below run on U vectors side by side, each step over all U before the next:
 * one vector's GELU is a chain of some 29 dependent instructions, and a core's scheduler
 * holds only two or three such chains in flight when they come one after another (256
 * floats in L1: 1.5 ns a float, latency-bound); interleaved, the independent steps of U
 * vectors fill the vector pipes. Four were still bound by the chains' latency on a Zen 5
 * core (0.44 ns a float over 512 in L1); GELU_U = 8 keeps its four FP pipes fuller
 * (0.34 ns), its registers still within the 32. U = 1 serves the tails. */
#define GELU_U 8
#define EACH(u) _Pragma("GCC unroll 8") for (int u = 0; u < U; u++)

/* 2^w, any w the callers make (NaN included): 2^f for f = w - floor(w) in [0, 1) (one
 * reduce) by a degree-6 polynomial (minimax in the relative error with float
 * coefficients, 1.4e-8, and exactly 1 at f = 0: tools/fit_gelu.py), times 2^floor(w) by
 * scalef, which takes the floor itself and underflows to 0 gracefully, so no clamp. In
 * base 2 the range reduction is exact, where exp's needs ln 2 in two parts, an integer
 * rounding and a clamp: 8 operations against 13 (Cephes' degree 7 there). */
static inline __attribute__((always_inline)) void exp2_(int U, __m512 *w) {
    __m512 f[GELU_U], p[GELU_U];
    EACH(u) f[u] = _mm512_reduce_ps(w[u], _MM_FROUND_TO_NEG_INF);
    static const float c[6] = {1.243968843e-03f, 9.678840637e-03f, 5.548334122e-02f,
                               2.402298450e-01f, 6.931470037e-01f, 1.0f};
    EACH(u) p[u] = _mm512_set1_ps(2.170225489e-04f);
#pragma GCC unroll 6
    for (int i = 0; i < 6; i++) EACH(u) p[u] = _mm512_fmadd_ps(p[u], f[u], _mm512_set1_ps(c[i]));
    EACH(u) w[u] = _mm512_scalef_ps(p[u], w[u]);
}

/* 1 / d for d >= 1 (erfc's 1 / (1 + a' s)): the 14-bit estimate and one Newton step,
 * within an ulp or two of the division, which the FMA pipes do not wait on. */
static inline __m512 recip(__m512 d) {
    __m512 r = _mm512_rcp14_ps(d);
    return _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f)));
}

/* The normal cdf Phi(x) = 1 - erfc(x / sqrt 2) / 2 into y, written erfc(u) / 2 for
 * negative x so that it keeps its relative accuracy there; s = |x| sqrt(log2 e / 2) into
 * s. erfc(z) = t exp(P(t) - z^2) (Numerical Recipes' form) computed in base 2:
 * erfc(z) / 2 = t 2^(Q(t) - s^2) with t = 1 / (1 + a' s), Q = P log2 e - 1, refitted by
 * tools/fit_gelu.py for float coefficients: degree 9, a relative error of 4.5e-8 where
 * erfc(z) / 2 is a normal float (NR's degree 9 has 1.2e-7). NaN in, NaN out, through the
 * arithmetic alone (the kernels have no fix-up step: at some 29 vector operations a
 * vector, on two FMA pipes, each one counts). */
static inline __attribute__((always_inline)) void normal_cdf(int U, const __m512 *x,
                                                             __m512 *s, __m512 *y) {
    __m512 t[GELU_U], p[GELU_U];
    /* capped where erfc is 0 anyway (so that 1 / (1 + a' s) stays finite; a NaN passes
     * the cap). */
    EACH(u) s[u] = _mm512_min_ps(_mm512_set1_ps(1e4f),
                                 _mm512_mul_ps(_mm512_abs_ps(x[u]),
                                               _mm512_set1_ps(8.493217826e-01f)));
    EACH(u) t[u] = recip(_mm512_fmadd_ps(_mm512_set1_ps(2.913941145e-01f), s[u],
                                         _mm512_set1_ps(1.0f)));
    static const float c[9] = {1.277101755e+00f, -1.976192236e+00f, 1.215488791e+00f,
                               -3.648065329e-01f, 3.667308390e-02f, 3.929315507e-01f,
                               6.037030220e-01f, 1.447284341e+00f, -3.340618372e+00f};
    EACH(u) p[u] = _mm512_set1_ps(-2.915654182e-01f);
#pragma GCC unroll 9
    for (int i = 0; i < 9; i++) EACH(u) p[u] = _mm512_fmadd_ps(p[u], t[u], _mm512_set1_ps(c[i]));
    EACH(u) p[u] = _mm512_fnmadd_ps(s[u], s[u], p[u]);
    exp2_(U, p);
    EACH(u) {
        /* erfc(z) / 2 for x < 0; 1 - erfc(z) / 2 for the rest (NaN included: NaN either
         * way). */
        __m512 h = _mm512_mul_ps(t[u], p[u]);
        __mmask16 rest = _mm512_cmp_ps_mask(x[u], _mm512_setzero_ps(), _CMP_NLT_UQ);
        y[u] = _mm512_mask_sub_ps(h, rest, _mm512_set1_ps(1.0f), h);
    }
}

/* x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), as gelu_erf_f32, in place. */
static inline __attribute__((always_inline)) void gelu(int U, __m512 *x) {
    __m512 cdf[GELU_U], s[GELU_U];
    normal_cdf(U, x, s, cdf);
    EACH(u) x[u] = _mm512_mul_ps(x[u], cdf[u]);
}

/* GELU's derivative, Phi(x) + x phi(x), into d, and the cdf into cdf (as gelu's): the
 * density exp(-x^2 / 2) / sqrt(2 pi) = 2^(-s^2 - log2 sqrt(2 pi)), as
 * gelu_erf_derivative_f32. */
static inline __attribute__((always_inline)) void derivative(int U, const __m512 *x,
                                                             __m512 *d, __m512 *cdf) {
    normal_cdf(U, x, d, cdf);
    EACH(u) d[u] = _mm512_fnmadd_ps(d[u], d[u], _mm512_set1_ps(-1.325748065e+00f));
    exp2_(U, d);
    EACH(u) d[u] = _mm512_fmadd_ps(x[u], d[u], cdf[u]);
}

/* gy times GELU's derivative: gy in, the gradient out. */
static inline __attribute__((always_inline)) void gelu_grad(int U, const __m512 *x, __m512 *gy) {
    __m512 cdf[GELU_U], d[GELU_U];
    derivative(U, x, d, cdf);
    EACH(u) gy[u] = _mm512_mul_ps(gy[u], d[u]);
}

/* GELU and its derivative from one normal cdf: x into GELU (x), d into GELU'(x), the
 * same bits as gelu's and gelu_grad's factor. */
static inline __attribute__((always_inline)) void gelu_d(int U, __m512 *x, __m512 *d) {
    __m512 cdf[GELU_U];
    derivative(U, x, d, cdf);
    EACH(u) x[u] = _mm512_mul_ps(x[u], cdf[u]);
}

/* Subnormal results flushed to zero (and subnormal inputs read as zero) while a GELU
 * kernel runs: past |x| ~ 13 its exponentials are subnormal, and an Intel core takes a
 * microcode assist on each instruction that makes or reads one: an FFN's activations with
 * a few such values ran GELU's backward 3-10x slower (0.56 ms against 0.17 for 128 x
 * 1536). What changes is below 1.2e-38, in absolute terms. */
static inline unsigned flush_subnormals(void) {
    unsigned csr = _mm_getcsr();
    _mm_setcsr(csr | _MM_FLUSH_ZERO_ON | 0x0040u);   /* FTZ, DAZ */
    return csr;
}

/* Four vectors a step, then single ones, then a masked last one (both kernels). */
static void gelu_erf_grad(const float *x, const float *gy, float *y, int64_t n) {
    unsigned csr = flush_subnormals();
    int64_t i = 0;
    for (; i + 16 * GELU_U <= n; i += 16 * GELU_U) {
        __m512 xv[GELU_U], g[GELU_U];
#pragma GCC unroll 8
        for (int u = 0; u < GELU_U; u++) {
            xv[u] = _mm512_loadu_ps(x + i + 16 * u);
            g[u] = _mm512_loadu_ps(gy + i + 16 * u);
        }
        gelu_grad(GELU_U, xv, g);
#pragma GCC unroll 8
        for (int u = 0; u < GELU_U; u++) _mm512_storeu_ps(y + i + 16 * u, g[u]);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 xv = _mm512_maskz_loadu_ps(m, x + i), g = _mm512_maskz_loadu_ps(m, gy + i);
        gelu_grad(1, &xv, &g);
        _mm512_mask_storeu_ps(y + i, m, g);
    }
    _mm_setcsr(csr);
}

static void gelu_erf_d(const float *x, float *y, float *dx, int64_t n) {
    unsigned csr = flush_subnormals();
    int64_t i = 0;
    for (; i + 16 * GELU_U <= n; i += 16 * GELU_U) {
        __m512 v[GELU_U], d[GELU_U];
#pragma GCC unroll 8
        for (int u = 0; u < GELU_U; u++) v[u] = _mm512_loadu_ps(x + i + 16 * u);
        gelu_d(GELU_U, v, d);
#pragma GCC unroll 8
        for (int u = 0; u < GELU_U; u++) {
            _mm512_storeu_ps(y + i + 16 * u, v[u]);
            _mm512_storeu_ps(dx + i + 16 * u, d[u]);
        }
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i), d;
        gelu_d(1, &v, &d);
        _mm512_mask_storeu_ps(y + i, m, v);
        _mm512_mask_storeu_ps(dx + i, m, d);
    }
    _mm_setcsr(csr);
}

static void gelu_erf(const float *x, float *y, int64_t n) {
    unsigned csr = flush_subnormals();
    int64_t i = 0;
    for (; i + 16 * GELU_U <= n; i += 16 * GELU_U) {
        __m512 v[GELU_U];
#pragma GCC unroll 8
        for (int u = 0; u < GELU_U; u++) v[u] = _mm512_loadu_ps(x + i + 16 * u);
        gelu(GELU_U, v);
#pragma GCC unroll 8
        for (int u = 0; u < GELU_U; u++) _mm512_storeu_ps(y + i + 16 * u, v[u]);
    }
    for (; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        gelu(1, &v);
        _mm512_mask_storeu_ps(y + i, m, v);
    }
    _mm_setcsr(csr);
}

/* ---- Attention's products ------------------------------------------------------------
 * Register tiles of R rows by NV vectors of 16: scores broadcast a query element and
 * multiply a row of k transposed (the keys along the vector), values broadcast a
 * probability and multiply a row of v. */

/* Rows of a strided operand fetched ahead of their use (tile_ab, scores_direct). */
#define PREFETCH_ROWS 16

static inline __mmask16 mask_upto(int64_t n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

/* c (R, 16 NV; row stride ldc) = a (R, k; row stride lda) . b (k, 16 NV; row stride ldb),
 * the last vector of each row stored only up to `live` columns: both products' tile. */
static inline __attribute__((always_inline)) void tile_ab(int R, int NV, int64_t k,
                                                          const float *a, int64_t lda,
                                                          const float *b, int64_t ldb,
                                                          float *c, int64_t ldc, int64_t live) {
    __m512 acc[6][4];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
    for (int64_t p = 0; p < k; p++) {
        __m512 bv[4];
        /* b's rows a little ahead: attention's values are rows of a KV cache whose heads
         * are interleaved (strided, so the hardware prefetchers lag); a prefetch past the
         * end is harmless. */
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            _mm_prefetch((const char *)(b + (p + PREFETCH_ROWS) * ldb + 16 * v), _MM_HINT_T0);
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) bv[v] = _mm512_loadu_ps(b + p * ldb + 16 * v);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            __m512 x = _mm512_set1_ps(a[r * lda + p]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(x, bv[v], acc[r][v]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            _mm512_mask_storeu_ps(c + r * ldc + 16 * v, mask_upto(live - 16 * v), acc[r][v]);
}

/* k (sk, d; row stride ldk) transposed: kt[p * ldt + j] = k[j * ldk + p], zeros from sk
 * to ldt (a multiple of 16), d a multiple of 16. Blocks of 16 keys by 16 elements are
 * read along the keys' rows and transposed in registers (gathers, one element of 16 keys
 * each, took several times as long). */
static void transpose_keys(int64_t sk, int64_t d, const float *k, int64_t ldk, float *kt,
                           int64_t ldt) {
    for (int64_t j0 = 0; j0 < ldt; j0 += 16) {
        int keys = (int)(sk - j0 < 16 ? sk - j0 : 16);
        for (int64_t p0 = 0; p0 < d; p0 += 16) {
            __m512 r[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++)
                r[i] = i < keys ? _mm512_loadu_ps(k + (j0 + i) * ldk + p0) : _mm512_setzero_ps();
            tm__transpose16(r);
#pragma GCC unroll 16
            for (int q = 0; q < 16; q++) _mm512_storeu_ps(kt + (p0 + q) * ldt + j0, r[q]);
        }
    }
}

/* Sixteen vectors summed across their lanes, into one vector: lane i = the sum of a[i]'s
 * lanes. A tree of pairwise adds (within 128-bit lanes, then across them), 30 shuffles
 * and 15 adds where sixteen separate reductions would take 64 and 64. */
static inline __m512 sum_lanes16(__m512 a[16]) {
    __m512 u[8], w[4], x[2];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++)   /* per 128-bit block: a2i(0+2), a2i+1(0+2), a2i(1+3), a2i+1(1+3) */
        u[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                             _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)   /* per block: the block sums of a4i .. a4i+3 */
        w[i] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * i], u[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(u[2 * i], u[2 * i + 1], 0xee));
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++)   /* blocks: a8i..+3 (01), (23), a8i+4..+7 (01), (23) */
        x[i] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0xdd));
    return _mm512_add_ps(_mm512_shuffle_f32x4(x[0], x[1], 0x88),
                         _mm512_shuffle_f32x4(x[0], x[1], 0xdd));
}

/* 16 floats of a k or v row at element i: float32, or float16 widened (exactly). */
static inline __attribute__((always_inline)) __m512 load16(const void *x, int64_t i, int half) {
    return half ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)x + i)))
                : _mm512_loadu_ps((const float *)x + i);
}

static inline const char *elem_at(const void *x, int64_t i, int half) {
    return (const char *)x + i * (half ? 2 : 4);
}

/* Sixteen keys' 16-lane partial dot products with one query row of NQ vectors (4 or 8:
 * head size 64 or 128; held in registers), key by key along k's rows (key i's row at
 * element at + i * ldk): the block is read in address order, which the hardware
 * prefetchers follow (column by column, 16 rows at a time, ran about 15% slower from
 * memory at the small LLaMA's past 2000). */
static inline __attribute__((always_inline)) void keys16_along_rows(int NQ, const float *qr,
                                                                    const void *k, int64_t at,
                                                                    int64_t ldk, int half,
                                                                    __m512 acc[16]) {
    __m512 q0 = _mm512_loadu_ps(qr), q1 = _mm512_loadu_ps(qr + 16), q2 = _mm512_loadu_ps(qr + 32),
           q3 = _mm512_loadu_ps(qr + 48), q4 = q0, q5 = q0, q6 = q0, q7 = q0;
    if (NQ == 8) {
        q4 = _mm512_loadu_ps(qr + 64); q5 = _mm512_loadu_ps(qr + 80);
        q6 = _mm512_loadu_ps(qr + 96); q7 = _mm512_loadu_ps(qr + 112);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) {
        int64_t ki = at + i * ldk;
        __m512 a = _mm512_mul_ps(load16(k, ki, half), q0);
        __m512 b = _mm512_mul_ps(load16(k, ki + 16, half), q1);
        a = _mm512_fmadd_ps(load16(k, ki + 32, half), q2, a);
        b = _mm512_fmadd_ps(load16(k, ki + 48, half), q3, b);
        if (NQ == 8) {
            a = _mm512_fmadd_ps(load16(k, ki + 64, half), q4, a);
            b = _mm512_fmadd_ps(load16(k, ki + 80, half), q5, b);
            a = _mm512_fmadd_ps(load16(k, ki + 96, half), q6, a);
            b = _mm512_fmadd_ps(load16(k, ki + 112, half), q7, b);
        }
        acc[i] = _mm512_add_ps(a, b);
    }
}

/* The scores of a few query rows against one block of up to 16 keys (key i's row at
 * element at + i * ldk of k), into s[r * lds + i]; the next block of this head's rows
 * fetched ahead (rows of an interleaved cache: strided). */
static inline __attribute__((always_inline)) void scores_block(int64_t rows, int keys, int64_t d,
                                                               const float *q, int64_t ldq,
                                                               const void *k, int64_t at,
                                                               int64_t ldk, int half, float *s,
                                                               int64_t lds) {
    for (int i = 0; i < 16; i++)
        for (int64_t c = 0; c < d; c += half ? 32 : 16)
            _mm_prefetch(elem_at(k, at + (PREFETCH_ROWS + i) * ldk + c, half), _MM_HINT_T0);
    for (int64_t r = 0; r < rows; r++) {
        const float *qr = q + r * ldq;
        __m512 acc[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) acc[i] = _mm512_setzero_ps();
        if (keys == 16 && (d == 64 || d == 128)) {
            if (d == 64) keys16_along_rows(4, qr, k, at, ldk, half, acc);
            else keys16_along_rows(8, qr, k, at, ldk, half, acc);
        } else if (keys == 16) {
            for (int64_t c = 0; c < d; c += 16) {
                __m512 qv = _mm512_loadu_ps(qr + c);
#pragma GCC unroll 16
                for (int i = 0; i < 16; i++)
                    acc[i] = _mm512_fmadd_ps(load16(k, at + i * ldk + c, half), qv, acc[i]);
            }
        } else {
            for (int64_t c = 0; c < d; c += 16) {
                __m512 qv = _mm512_loadu_ps(qr + c);
                for (int i = 0; i < keys; i++)
                    acc[i] = _mm512_fmadd_ps(load16(k, at + i * ldk + c, half), qv, acc[i]);
            }
        }
        _mm512_mask_storeu_ps(s + r * lds, mask_upto(keys), sum_lanes16(acc));
    }
}

/* Scores of a few query rows (a decode step's heads that share a kv head) straight from
 * k's rows: for each 16 keys, sixteen dot products of one query row in 16-lane partial
 * sums (q read in d / 16 vectors), then summed across lanes together. No transposed copy
 * of k: for a few rows, writing it took longer than the products (the small LLaMA's
 * decode step at past 512, 3 rows, 513 keys). Rows after the first read k from L1. */
static void scores_direct(int64_t rows, int64_t sk, int64_t d, const float *q, int64_t ldq,
                          const float *k, int64_t ldk, float *s, int64_t lds) {
    for (int64_t j0 = 0; j0 < sk; j0 += 16)
        scores_block(rows, (int)(sk - j0 < 16 ? sk - j0 : 16), d, q, ldq, k, j0 * ldk, ldk, 0,
                     s + j0, lds);
}

static void attn_scores(int64_t rows, int64_t sk, int64_t d, const float *q, int64_t ldq,
                        const float *k, int64_t ldk, float *s, int64_t lds, float *kt, int pack) {
    if (rows <= TM_ATTN_DIRECT_ROWS) {
        scores_direct(rows, sk, d, q, ldq, k, ldk, s, lds);
        return;
    }
    int64_t ldt = (sk + 15) / 16 * 16;
    if (pack) transpose_keys(sk, d, k, ldk, kt, ldt);   /* else kt holds it from the call before */
    for (int64_t j0 = 0; j0 < sk; j0 += 64) {
        int nv = (int)((sk - j0 + 15) / 16 < 4 ? (sk - j0 + 15) / 16 : 4);
        for (int64_t i0 = 0; i0 < rows; i0 += 4) {
            int r = (int)(rows - i0 < 4 ? rows - i0 : 4);
            const float *qi = q + i0 * ldq;
            const float *kj = kt + j0;
            float *si = s + i0 * lds + j0;
            int64_t live = sk - j0;
#define SC(R, NV) case (R) * 8 + (NV): tile_ab(R, NV, d, qi, ldq, kj, ldt, si, lds, live); break
            switch (r * 8 + nv) {
                SC(1, 1); SC(1, 2); SC(1, 3); SC(1, 4);
                SC(2, 1); SC(2, 2); SC(2, 3); SC(2, 4);
                SC(3, 1); SC(3, 2); SC(3, 3); SC(3, 4);
                default: SC(4, 1); SC(4, 2); SC(4, 3); SC(4, 4);
            }
#undef SC
        }
    }
}

static void attn_values(int64_t rows, int64_t sk, int64_t d, const float *p, int64_t lds,
                        const float *v, int64_t ldv, float *o, int64_t ldo) {
    for (int64_t c0 = 0; c0 < d; c0 += 64) {
        int nv = (int)((d - c0) / 16 < 4 ? (d - c0) / 16 : 4);
        /* Six rows where the tile is two vectors wide or less, four otherwise. */
        int64_t most = nv <= 2 ? 6 : 4;
        for (int64_t i0 = 0; i0 < rows; i0 += most) {
            int r = (int)(rows - i0 < most ? rows - i0 : most);
            const float *pi = p + i0 * lds;
            const float *vc = v + c0;
            float *oi = o + i0 * ldo + c0;
#define VA(R, NV) case (R) * 8 + (NV): tile_ab(R, NV, sk, pi, lds, vc, ldv, oi, ldo, 16 * (NV)); break
            switch (r * 8 + nv) {
                VA(1, 1); VA(1, 2); VA(1, 3); VA(1, 4);
                VA(2, 1); VA(2, 2); VA(2, 3); VA(2, 4);
                VA(3, 1); VA(3, 2); VA(3, 3); VA(3, 4);
                VA(4, 1); VA(4, 2); VA(4, 3); VA(4, 4);
                VA(5, 1); VA(5, 2);
                default: VA(6, 1); VA(6, 2);
            }
#undef VA
        }
    }
}

/* ---- A decode step over a whole cache (kvmath.h) --------------------------------------
 * The rows of a (B, P, H, D) cache hold every kv head side by side: one sweep over them,
 * block by block of keys with every head's products on a block before the next, reads
 * the cache in address order once, where a sweep per head strides through it H times
 * (bench/attn_lab.c). Each product's chain of operations is the per-head kernels' own
 * (scores_block's, tile_ab's), so the results are theirs bit for bit. */

/* Keys a values block takes for every head before the next block: their rows (16 KB of a
 * float cache of 4 heads of 64) stay in L1 while the heads take their columns. */
#ifndef SWEEP_KEYS   /* bench/attn_lab.c sets others */
#define SWEEP_KEYS 16
#endif

/* The whole rows (every head) of keys j0 + FAR_ROWS .. + n fetched into L2, ahead of the
 * near prefetches into L1: a long cache comes from memory each step (the weights' stream
 * evicts it), and the near ones alone kept too few lines in flight. The small LLaMA's 8
 * layers at past 1,930 (a generation, one thread, CPU time, a loaded host): float16
 * 1.9-2.3 -> 1.1-1.6 ms a step, float32 3.3-3.7 -> 2.8 (32, 64, 128 and 256 rows ahead
 * within the noise of one another, 256 a little behind). An instruction of its own:
 * GCC dropped _mm_prefetch's T1 hint in these loops. */
#define FAR_ROWS 64
static inline void fetch_rows_far(const void *x, int64_t j0, int64_t n, int64_t row_elems,
                                  int64_t ld, int half) {
    int64_t bytes = row_elems * (half ? 2 : 4);
    for (int64_t i = 0; i < n; i++) {
        const char *r = elem_at(x, (j0 + FAR_ROWS + i) * ld, half);
        for (int64_t b = 0; b < bytes; b += 64) __asm__ volatile("prefetcht1 %0" : : "m"(*(r + b)));
    }
}

/* Eight vectors summed across their lanes: lanes i of the result = the sum of a[i]'s. */
static inline __m256 sum_lanes8(const __m512 a[8]) {
    __m512 u[4], w[2];
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++)
        u[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]),
                             _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++)
        w[i] = _mm512_add_ps(_mm512_shuffle_ps(u[2 * i], u[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(u[2 * i], u[2 * i + 1], 0xee));
    /* per 128-bit block b: keys 0..3 (w0) and 4..7 (w1), partial over that block */
    __m512 x = _mm512_add_ps(_mm512_shuffle_f32x4(w[0], w[1], 0x88),
                             _mm512_shuffle_f32x4(w[0], w[1], 0xdd));
    /* blocks: keys 0..3 (lanes 0-3, 8-11 halves), 4..7 */
    __m512 y = _mm512_add_ps(x, _mm512_shuffle_f32x4(x, x, 0xb1));
    return _mm512_castps512_ps256(_mm512_shuffle_f32x4(y, y, 0x08));
}

/* Up to 3 query rows against a block of up to 8 keys (key i's row at element at + i *
 * ldk): each key's row loaded (and widened) once for all the rows, where scores_block
 * loads it once a row. For float16 keys, whose widening is an instruction per vector:
 * the small LLaMA's 8 layers at past 512 (in cache) 0.245 -> 0.176 ms a step, at 2000
 * 1.3-1.5 -> 0.7-1.2 (bench/attn_lab.c, mode 5, a loaded host); float32 keys gained 5%
 * and keep the per-head kernels' bits instead. */
static inline __attribute__((always_inline)) void keys8_shared(int R, int keys, int64_t d,
                                                               const float *q, int64_t ldq,
                                                               const void *k, int64_t at,
                                                               int64_t ldk, int half, float *s,
                                                               int64_t lds) {
    __m512 acc[3][8];
#pragma GCC unroll 3
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) acc[r][i] = _mm512_setzero_ps();
    for (int64_t c = 0; c < d; c += 16) {
        __m512 qv[3];
#pragma GCC unroll 3
        for (int r = 0; r < R; r++) qv[r] = _mm512_loadu_ps(q + r * ldq + c);
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) {
            if (i >= keys) break;
            __m512 kv = load16(k, at + i * ldk + c, half);
#pragma GCC unroll 3
            for (int r = 0; r < R; r++) acc[r][i] = _mm512_fmadd_ps(kv, qv[r], acc[r][i]);
        }
    }
#pragma GCC unroll 3
    for (int r = 0; r < R; r++) {
        __m256 sum = sum_lanes8(acc[r]);
        if (keys == 8) {
            _mm256_storeu_ps(s + r * lds, sum);
        } else {
            float tail[8];
            _mm256_storeu_ps(tail, sum);
            for (int i = 0; i < keys; i++) s[r * lds + i] = tail[i];
        }
    }
}

static inline __attribute__((always_inline)) void sweep_scores_t(int64_t heads, int64_t group,
                                                                 int64_t sk, int64_t d,
                                                                 const float *q, int64_t ldq,
                                                                 const void *k, int64_t ldk,
                                                                 int half, float *s, int64_t lds) {
    /* float32 keys: scores_block's chains, the per-head kernels' bits (scores_direct) */
    if (!half) {
        for (int64_t j0 = 0; j0 < sk; j0 += 16) {
            int keys = (int)(sk - j0 < 16 ? sk - j0 : 16);
            fetch_rows_far(k, j0, 16, heads * d, ldk, 0);
            for (int64_t h = 0; h < heads; h++)
                scores_block(group, keys, d, q + h * group * ldq, ldq, k, j0 * ldk + h * d, ldk, half,
                             s + h * group * lds + j0, lds);
        }
        return;
    }
    for (int64_t j0 = 0; j0 < sk; j0 += 8) {
        int keys = (int)(sk - j0 < 8 ? sk - j0 : 8);
        fetch_rows_far(k, j0, 8, heads * d, ldk, 1);
        for (int64_t h = 0; h < heads; h++) {
            int64_t at = j0 * ldk + h * d;
            for (int i = 0; i < 8; i++)
                for (int64_t c = 0; c < d; c += half ? 32 : 16)
                    _mm_prefetch(elem_at(k, at + (PREFETCH_ROWS + i) * ldk + c, half), _MM_HINT_T0);
            for (int64_t r0 = 0; r0 < group; r0 += 3) {
                const float *qr = q + (h * group + r0) * ldq;
                float *sr = s + (h * group + r0) * lds + j0;
                switch (group - r0 < 3 ? group - r0 : 3) {
                case 1: keys8_shared(1, keys, d, qr, ldq, k, at, ldk, half, sr, lds); break;
                case 2: keys8_shared(2, keys, d, qr, ldq, k, at, ldk, half, sr, lds); break;
                default: keys8_shared(3, keys, d, qr, ldq, k, at, ldk, half, sr, lds); break;
                }
            }
        }
    }
}

static void sweep_scores(int64_t heads, int64_t group, int64_t sk, int64_t d, const float *q,
                         int64_t ldq, const void *k, int64_t ldk, int half, float *s, int64_t lds) {
    if (half) sweep_scores_t(heads, group, sk, d, q, ldq, k, ldk, 1, s, lds);
    else sweep_scores_t(heads, group, sk, d, q, ldq, k, ldk, 0, s, lds);
}

/* tile_ab's product over kb rows of b (row p at element at + p * ldb), added to c's
 * (first: from zero): the same chain of FMAs as one tile_ab over all the rows, paused
 * in c between blocks. */
static inline __attribute__((always_inline)) void tile_acc(int R, int NV, int64_t kb,
                                                           const float *a, int64_t lda,
                                                           const void *b, int64_t at, int64_t ldb,
                                                           int half, float *c, int64_t ldc,
                                                           int first) {
    __m512 acc[6][4];
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            acc[r][v] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + r * ldc + 16 * v);
    for (int64_t p = 0; p < kb; p++) {
        __m512 bv[4];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v += half ? 2 : 1)
            _mm_prefetch(elem_at(b, at + (p + PREFETCH_ROWS) * ldb + 16 * v, half), _MM_HINT_T0);
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) bv[v] = load16(b, at + p * ldb + 16 * v, half);
#pragma GCC unroll 6
        for (int r = 0; r < R; r++) {
            __m512 x = _mm512_set1_ps(a[r * lda + p]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(x, bv[v], acc[r][v]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) _mm512_storeu_ps(c + r * ldc + 16 * v, acc[r][v]);
}

static inline __attribute__((always_inline)) void sweep_values_t(int64_t heads, int64_t group,
                                                                 int64_t sk, int64_t d,
                                                                 const float *p, int64_t lds,
                                                                 const void *v, int64_t ldv,
                                                                 int half, float *o, int64_t ldo) {
    for (int64_t j0 = 0; j0 < sk; j0 += SWEEP_KEYS) {
        int64_t kb = sk - j0 < SWEEP_KEYS ? sk - j0 : SWEEP_KEYS;
        fetch_rows_far(v, j0, SWEEP_KEYS, heads * d, ldv, half);
        int first = j0 == 0;
        for (int64_t h = 0; h < heads; h++)
            /* attn_values' tiles over the group's rows */
            for (int64_t c0 = 0; c0 < d; c0 += 64) {
                int nv = (int)((d - c0) / 16 < 4 ? (d - c0) / 16 : 4);
                int64_t most = nv <= 2 ? 6 : 4;
                for (int64_t i0 = 0; i0 < group; i0 += most) {
                    int r = (int)(group - i0 < most ? group - i0 : most);
                    const float *pi = p + (h * group + i0) * lds + j0;
                    int64_t at = j0 * ldv + h * d + c0;
                    float *oi = o + (h * group + i0) * ldo + c0;
#define VA(R, NV) case (R) * 8 + (NV): tile_acc(R, NV, kb, pi, lds, v, at, ldv, half, oi, ldo, first); break
                    switch (r * 8 + nv) {
                        VA(1, 1); VA(1, 2); VA(1, 3); VA(1, 4);
                        VA(2, 1); VA(2, 2); VA(2, 3); VA(2, 4);
                        VA(3, 1); VA(3, 2); VA(3, 3); VA(3, 4);
                        VA(4, 1); VA(4, 2); VA(4, 3); VA(4, 4);
                        VA(5, 1); VA(5, 2);
                        default: VA(6, 1); VA(6, 2);
                    }
#undef VA
                }
            }
    }
}

static void sweep_values(int64_t heads, int64_t group, int64_t sk, int64_t d, const float *p,
                         int64_t lds, const void *v, int64_t ldv, int half, float *o, int64_t ldo) {
    if (half) sweep_values_t(heads, group, sk, d, p, lds, v, ldv, 1, o, ldo);
    else sweep_values_t(heads, group, sk, d, p, lds, v, ldv, 0, o, ldo);
}

static void to_f16_512(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(y + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if (i < n) {
        __mmask16 m = mask_upto(n - i);
        __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        uint16_t tmp[16];
        _mm256_storeu_si256((__m256i *)tmp, h);
        for (int64_t t = 0; t < n - i; t++) y[i + t] = tmp[t];
    }
}

static void to_f32_512(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i))));
    if (i < n) {
        uint16_t tmp[16] = {0};
        for (int64_t t = 0; t < n - i; t++) tmp[t] = x[i + t];
        _mm512_mask_storeu_ps(y + i, mask_upto(n - i),
                              _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)tmp)));
    }
}

static const tm__kvmath kvmath512 = {"avx512", 16, sweep_scores, sweep_values, to_f16_512,
                                     to_f32_512};

const tm__kvmath *tm__kvmath_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") ? &kvmath512 : 0;
}

static const tm__vmath vmath512 = {"avx512",    gelu_erf,    gelu_erf_grad, gelu_erf_d,
                                   attn_scores, attn_values};

const tm__vmath *tm__vmath_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") ? &vmath512 : 0;
}

#else

const tm__vmath *tm__vmath_avx512(void) { return 0; }
const tm__kvmath *tm__kvmath_avx512(void) { return 0; }

#endif
