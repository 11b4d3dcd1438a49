/* The AVX2 row kernel of the depthwise convolution (dwconv.h): 8 output columns a
 * register, four registers a pass (or the last columns of two rows), each tap one fused
 * multiply-add per register from an unaligned load (a 3x3 kernel's taps held in
 * registers, larger ones broadcast per tap).
 * Compiled with -mavx2 -mfma (Makefile), used only when the CPU has both; buffers and
 * dispatch: dwconv.c. */
#include "dwconv.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

/* Lanes [0, count) on: the sign bits of a window into -1, ..., -1, 0, ..., 0. */
static inline __m256i tail_mask(int64_t count) {   /* 0 < count <= 8 */
    static const int32_t ones[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
    return _mm256_loadu_si256((const __m256i *)(ones + 8 - count));
}

/* R rows (at p0 and p0 + rstride) by U registers of columns from ox, the last register's
 * lanes under mask m; taps from WEIGHT (an expression of t). */
#define DW_PASS(R, U, WEIGHT)                                                                \
    do {                                                                                     \
        __m256 acc[R][U];                                                                    \
        for (int r = 0; r < R; r++)                                                          \
            for (int u = 0; u < U; u++) acc[r][u] = _mm256_setzero_ps();                     \
        _Pragma("GCC unroll 32") for (int64_t t = 0; t < taps; t++) {                         \
            __m256 wt = WEIGHT;                                                              \
            _Pragma("GCC unroll 2") for (int r = 0; r < R; r++) {                             \
                const float *p = p0 + r * rstride + off[t] + ox;                             \
                _Pragma("GCC unroll 4") for (int u = 0; u < U; u++) {                         \
                    __m256 v = u == U - 1 ? _mm256_maskload_ps(p + 8 * u, m)                 \
                                          : _mm256_loadu_ps(p + 8 * u);                      \
                    acc[r][u] = _mm256_fmadd_ps(wt, v, acc[r][u]);                           \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
        for (int r = 0; r < R; r++)                                                          \
            for (int u = 0; u < U; u++) {                                                    \
                if (u == U - 1) _mm256_maskstore_ps(o0 + r * n + ox + 8 * u, m, acc[r][u]); \
                else _mm256_storeu_ps(o0 + r * n + ox + 8 * u, acc[r][u]);                   \
            }                                                                                \
    } while (0)

/* Every row: 32 columns a pass; then the last n % 32 columns two rows a pass. */
#define DW_BODY(WEIGHT)                                                                      \
    do {                                                                                     \
        int64_t main = n / 32 * 32, rest = n - main;                                         \
        for (int64_t row = 0; row < rows; row++) {                                           \
            const float *p0 = base + row * rstride;                                          \
            float *o0 = out + row * n;                                                       \
            __m256i m = tail_mask(8);                                                        \
            for (int64_t ox = 0; ox < main; ox += 32) DW_PASS(1, 4, WEIGHT);                 \
        }                                                                                    \
        if (!rest) break;                                                                    \
        int units = (int)((rest + 7) / 8);                                                   \
        __m256i m = tail_mask(rest - 8 * (units - 1));                                       \
        int64_t ox = main;                                                                   \
        for (int64_t row = 0; row < rows; row += 2) {                                        \
            const float *p0 = base + row * rstride;                                          \
            float *o0 = out + row * n;                                                       \
            int two = row + 1 < rows;                                                        \
            switch (units * 2 + two) {                                                       \
            case 2: DW_PASS(1, 1, WEIGHT); break;                                            \
            case 3: DW_PASS(2, 1, WEIGHT); break;                                            \
            case 4: DW_PASS(1, 2, WEIGHT); break;                                            \
            case 5: DW_PASS(2, 2, WEIGHT); break;                                            \
            case 6: DW_PASS(1, 3, WEIGHT); break;                                            \
            case 7: DW_PASS(2, 3, WEIGHT); break;                                            \
            case 8: DW_PASS(1, 4, WEIGHT); break;                                            \
            default: DW_PASS(2, 4, WEIGHT); break;                                           \
            }                                                                                \
        }                                                                                    \
    } while (0)

static void rows_9(const float *base, int64_t rstride, int64_t rows, const int64_t *off,
                   const float *w, float *out, int64_t n) {
    const int64_t taps = 9;
    __m256 wv[9];
    for (int t = 0; t < 9; t++) wv[t] = _mm256_set1_ps(w[t]);
    DW_BODY(wv[t]);
}

static void rows_any(const float *base, int64_t rstride, int64_t rows, const int64_t *off,
                     const float *w, int64_t taps, float *out, int64_t n) {
    if (taps == 9) {
        rows_9(base, rstride, rows, off, w, out, n);
        return;
    }
    DW_BODY(_mm256_broadcast_ss(w + t));
}

tm_dwconv_rows_fn tm__dwconv_rows_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? rows_any : 0;
}

#else

tm_dwconv_rows_fn tm__dwconv_rows_avx2(void) { return 0; }

#endif
