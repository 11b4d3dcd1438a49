/* AVX2 forms of kvmath.h's kernels (with FMA, and F16C for the float16 cache), eight
 * lanes at a time, for CPUs without AVX-512 (or TM_KERNEL_ISA=avx2): the decode step's
 * sweep over a cache's rows for all kv heads, as vmath_avx512.c's, and the conversions.
 * Compiled with -mavx2 -mfma -mf16c and used only when the CPU has all three. Not the
 * C forms (kvmath.c). */
#include "kvmath.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <cpuid.h>
#include <immintrin.h>

/* Rows fetched ahead of their use (strided rows of an interleaved cache). */
#define PREFETCH_ROWS 16
/* Keys a values block takes for every head before the next block. */
#define SWEEP_KEYS 16

static inline __attribute__((always_inline)) __m256 load8(const void *x, int64_t i, int half) {
    return half ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)x + i)))
                : _mm256_loadu_ps((const float *)x + i);
}

static inline const char *elem_at(const void *x, int64_t i, int half) {
    return (const char *)x + i * (half ? 2 : 4);
}

/* The whole rows of keys j0 + FAR_ROWS .. + n fetched into L2 (vmath_avx512.c's
 * fetch_rows_far: a long cache comes from memory each step). */
#define FAR_ROWS 64
static inline void fetch_rows_far(const void *x, int64_t j0, int64_t n, int64_t row_elems,
                                  int64_t ld, int half) {
    int64_t bytes = row_elems * (half ? 2 : 4);
    for (int64_t i = 0; i < n; i++) {
        const char *r = elem_at(x, (j0 + FAR_ROWS + i) * ld, half);
        for (int64_t b = 0; b < bytes; b += 64) __asm__ volatile("prefetcht1 %0" : : "m"(*(r + b)));
    }
}

/* Eight vectors summed across their lanes: lane i = the sum of a[i]'s lanes. */
static inline __m256 sum_lanes8(const __m256 a[8]) {
    __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
    __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
    __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* One query row against a block of up to 8 keys (key i's row at element at + i * ldk),
 * in 8-lane partial sums, then across lanes: s[0..keys). */
static inline __attribute__((always_inline)) void scores_block8(int keys, int64_t d, const float *qr,
                                                                const void *k, int64_t at,
                                                                int64_t ldk, int half, float *s) {
    __m256 acc[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_ps();
    if (keys == 8) {
        for (int64_t c = 0; c < d; c += 8) {
            __m256 qv = _mm256_loadu_ps(qr + c);
#pragma GCC unroll 8
            for (int i = 0; i < 8; i++)
                acc[i] = _mm256_fmadd_ps(load8(k, at + i * ldk + c, half), qv, acc[i]);
        }
        _mm256_storeu_ps(s, sum_lanes8(acc));
        return;
    }
    for (int64_t c = 0; c < d; c += 8) {
        __m256 qv = _mm256_loadu_ps(qr + c);
        for (int i = 0; i < keys; i++)
            acc[i] = _mm256_fmadd_ps(load8(k, at + i * ldk + c, half), qv, acc[i]);
    }
    float tmp[8];
    _mm256_storeu_ps(tmp, sum_lanes8(acc));
    for (int i = 0; i < keys; i++) s[i] = tmp[i];
}

/* Up to 3 query rows against a block of up to 4 keys, each key's row loaded (and
 * widened) once for all the rows: float16 keys, whose widening is an instruction per
 * vector (vmath_avx512.c's keys8_shared, in 16 registers): the small LLaMA's 8 layers
 * scores at past 512 0.110 -> 0.094 ms, at 2000 0.42 -> 0.36 (one thread, CPU time). */
static inline __attribute__((always_inline)) void keys4_shared(int R, int keys, int64_t d,
                                                               const float *q, int64_t ldq,
                                                               const void *k, int64_t at,
                                                               int64_t ldk, float *s, int64_t lds) {
    __m256 acc[3][4];
#pragma GCC unroll 3
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) acc[r][i] = _mm256_setzero_ps();
    for (int64_t c = 0; c < d; c += 8) {
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            if (i >= keys) break;
            __m256 kv = load8(k, at + i * ldk + c, 1);
#pragma GCC unroll 3
            for (int r = 0; r < R; r++)
                acc[r][i] = _mm256_fmadd_ps(kv, _mm256_loadu_ps(q + r * ldq + c), acc[r][i]);
        }
    }
#pragma GCC unroll 3
    for (int r = 0; r < R; r++) {
        __m256 u = _mm256_hadd_ps(_mm256_hadd_ps(acc[r][0], acc[r][1]), _mm256_hadd_ps(acc[r][2], acc[r][3]));
        __m128 sum = _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1));
        if (keys == 4) {
            _mm_storeu_ps(s + r * lds, sum);
        } else {
            float tail[4];
            _mm_storeu_ps(tail, sum);
            for (int i = 0; i < keys; i++) s[r * lds + i] = tail[i];
        }
    }
}

static void sweep_scores_half(int64_t heads, int64_t group, int64_t sk, int64_t d, const float *q,
                              int64_t ldq, const void *k, int64_t ldk, float *s, int64_t lds) {
    for (int64_t j0 = 0; j0 < sk; j0 += 4) {
        int keys = (int)(sk - j0 < 4 ? sk - j0 : 4);
        fetch_rows_far(k, j0, 4, heads * d, ldk, 1);
        for (int64_t h = 0; h < heads; h++) {
            int64_t at = j0 * ldk + h * d;
            for (int i = 0; i < 4; i++)
                for (int64_t c = 0; c < d; c += 32)
                    _mm_prefetch(elem_at(k, at + (PREFETCH_ROWS + i) * ldk + c, 1), _MM_HINT_T0);
            for (int64_t r0 = 0; r0 < group; r0 += 3) {
                const float *qr = q + (h * group + r0) * ldq;
                float *sr = s + (h * group + r0) * lds + j0;
                switch (group - r0 < 3 ? group - r0 : 3) {
                case 1: keys4_shared(1, keys, d, qr, ldq, k, at, ldk, sr, lds); break;
                case 2: keys4_shared(2, keys, d, qr, ldq, k, at, ldk, sr, lds); break;
                default: keys4_shared(3, keys, d, qr, ldq, k, at, ldk, sr, lds); break;
                }
            }
        }
    }
}

static inline __attribute__((always_inline)) void sweep_scores_t(int64_t heads, int64_t group,
                                                                 int64_t sk, int64_t d,
                                                                 const float *q, int64_t ldq,
                                                                 const void *k, int64_t ldk,
                                                                 int half, float *s, int64_t lds) {
    for (int64_t j0 = 0; j0 < sk; j0 += 8) {
        int keys = (int)(sk - j0 < 8 ? sk - j0 : 8);
        fetch_rows_far(k, j0, 8, heads * d, ldk, half);
        for (int64_t h = 0; h < heads; h++) {
            int64_t at = j0 * ldk + h * d;
            for (int i = 0; i < 8; i++)
                for (int64_t c = 0; c < d; c += half ? 32 : 16)
                    _mm_prefetch(elem_at(k, at + (PREFETCH_ROWS + i) * ldk + c, half), _MM_HINT_T0);
            for (int64_t r = 0; r < group; r++)
                scores_block8(keys, d, q + (h * group + r) * ldq, k, at, ldk, half,
                              s + (h * group + r) * lds + j0);
        }
    }
}

static void sweep_scores(int64_t heads, int64_t group, int64_t sk, int64_t d, const float *q,
                         int64_t ldq, const void *k, int64_t ldk, int half, float *s, int64_t lds) {
    if (half) sweep_scores_half(heads, group, sk, d, q, ldq, k, ldk, s, lds);
    else sweep_scores_t(heads, group, sk, d, q, ldq, k, ldk, 0, s, lds);
}

/* c (R, 8 NV) += a (R, kb) . b (kb rows at element at, row stride ldb; 8 NV columns),
 * from zero when first: one chain of FMAs per element over the keys, paused in c
 * between blocks. */
static inline __attribute__((always_inline)) void tile_acc(int R, int NV, int64_t kb,
                                                           const float *a, int64_t lda,
                                                           const void *b, int64_t at, int64_t ldb,
                                                           int half, float *c, int64_t ldc,
                                                           int first) {
    __m256 acc[3][4];
#pragma GCC unroll 3
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++)
            acc[r][v] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(c + r * ldc + 8 * v);
    for (int64_t p = 0; p < kb; p++) {
        __m256 bv[4];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v += half ? 4 : 2)
            _mm_prefetch(elem_at(b, at + (p + PREFETCH_ROWS) * ldb + 8 * v, half), _MM_HINT_T0);
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) bv[v] = load8(b, at + p * ldb + 8 * v, half);
#pragma GCC unroll 3
        for (int r = 0; r < R; r++) {
            __m256 x = _mm256_broadcast_ss(a + r * lda + p);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[r][v] = _mm256_fmadd_ps(x, bv[v], acc[r][v]);
        }
    }
#pragma GCC unroll 3
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) _mm256_storeu_ps(c + r * ldc + 8 * v, acc[r][v]);
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
            for (int64_t c0 = 0; c0 < d; c0 += 32) {
                int nv = (int)((d - c0) / 8 < 4 ? (d - c0) / 8 : 4);
                for (int64_t i0 = 0; i0 < group; i0 += 3) {
                    int r = (int)(group - i0 < 3 ? group - i0 : 3);
                    const float *pi = p + (h * group + i0) * lds + j0;
                    int64_t at = j0 * ldv + h * d + c0;
                    float *oi = o + (h * group + i0) * ldo + c0;
#define VA(R, NV) case (R) * 8 + (NV): tile_acc(R, NV, kb, pi, lds, v, at, ldv, half, oi, ldo, first); break
                    switch (r * 8 + nv) {
                        VA(1, 1); VA(1, 2); VA(1, 3); VA(1, 4);
                        VA(2, 1); VA(2, 2); VA(2, 3); VA(2, 4);
                        VA(3, 1); VA(3, 2); VA(3, 3);
                        default: VA(3, 4);
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

static void to_f16_avx2(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if (i < n) {
        float tmp[8] = {0};
        uint16_t out[8];
        for (int64_t t = 0; t < n - i; t++) tmp[t] = x[i + t];
        _mm_storeu_si128((__m128i *)out,
                         _mm256_cvtps_ph(_mm256_loadu_ps(tmp), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        for (int64_t t = 0; t < n - i; t++) y[i + t] = out[t];
    }
}

static void to_f32_avx2(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    if (i < n) {
        uint16_t tmp[8] = {0};
        float out[8];
        for (int64_t t = 0; t < n - i; t++) tmp[t] = x[i + t];
        _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)tmp)));
        for (int64_t t = 0; t < n - i; t++) y[i + t] = out[t];
    }
}

static const tm__kvmath kvmath_avx2 = {"avx2", 8, sweep_scores, sweep_values, to_f16_avx2,
                                       to_f32_avx2};

/* F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports has no "f16c". */
static int has_f16c(void) {
    unsigned eax, ebx, ecx, edx;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx >> 29 & 1);
}

const tm__kvmath *tm__kvmath_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c()
               ? &kvmath_avx2 : 0;
}

#else

const tm__kvmath *tm__kvmath_avx2(void) { return 0; }

#endif
