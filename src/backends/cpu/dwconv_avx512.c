/* The AVX-512 row kernel of the depthwise convolution (dwconv.h): 16 output columns a
 * register, each tap one fused multiply-add per register from an unaligned load; 3x3 and
 * 5x5 kernels keep their taps broadcast in registers. A pass keeps at least four sums in
 * flight (a multiply-add waits four cycles for the previous one on the same register):
 * 64 columns of a row, or the last columns of two rows at once. Compiled with -mavx512f
 * (Makefile), used only when the CPU has it; buffers and dispatch: dwconv.c. */
#include "dwconv.h"

#if defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>

static inline __mmask16 tail_mask(int64_t count) {
    return count >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << count) - 1);
}

/* R rows (at p0 and p0 + rstride) by U registers of columns from ox, the last register's
 * lanes under mask m; taps from WEIGHT (an expression of t). */
#define DW_PASS(R, U, WEIGHT)                                                                \
    do {                                                                                     \
        __m512 acc[R][U];                                                                    \
        for (int r = 0; r < R; r++)                                                          \
            for (int u = 0; u < U; u++) acc[r][u] = _mm512_setzero_ps();                     \
        _Pragma("GCC unroll 32") for (int64_t t = 0; t < taps; t++) {                         \
            __m512 wt = WEIGHT;                                                              \
            _Pragma("GCC unroll 2") for (int r = 0; r < R; r++) {                             \
                const float *p = p0 + r * rstride + off[t] + ox;                             \
                _Pragma("GCC unroll 4") for (int u = 0; u < U; u++) {                         \
                    __m512 v = u == U - 1 ? _mm512_maskz_loadu_ps(m, p + 16 * u)             \
                                          : _mm512_loadu_ps(p + 16 * u);                     \
                    acc[r][u] = _mm512_fmadd_ps(wt, v, acc[r][u]);                           \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
        for (int r = 0; r < R; r++)                                                          \
            for (int u = 0; u < U; u++) {                                                    \
                if (u == U - 1) _mm512_mask_storeu_ps(o0 + r * n + ox + 16 * u, m, acc[r][u]); \
                else _mm512_storeu_ps(o0 + r * n + ox + 16 * u, acc[r][u]);                  \
            }                                                                                \
    } while (0)

/* Rows [r0, r1), columns [c0, n): 64 columns a pass; then the last columns two rows a
 * pass. */
#define DW_BODY(WEIGHT, r0, r1, c0)                                                          \
    do {                                                                                     \
        int64_t main = (c0) + (n - (c0)) / 64 * 64, rest = n - main;                         \
        for (int64_t row = (r0); row < (r1); row++) {                                        \
            const float *p0 = base + row * rstride;                                          \
            float *o0 = out + row * n;                                                       \
            __mmask16 m = 0xffff;                                                            \
            for (int64_t ox = (c0); ox < main; ox += 64) DW_PASS(1, 4, WEIGHT);              \
        }                                                                                    \
        if (!rest) break;                                                                    \
        int units = (int)((rest + 15) / 16);                                                 \
        __mmask16 m = tail_mask(rest - 16 * (units - 1));                                    \
        int64_t ox = main;                                                                   \
        for (int64_t row = (r0); row < (r1); row += 2) {                                     \
            const float *p0 = base + row * rstride;                                          \
            float *o0 = out + row * n;                                                       \
            int two = row + 1 < (r1);                                                        \
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

/* A KH x KW kernel whose tap rows lie rstride apart (stride and dilation 1 down the
 * plane): output rows r and r + 1 read KH + 1 input rows between them, so each of those
 * loads feeds both rows' sums (halving the loads, which bound this kernel), U registers of
 * columns a pass. Each sum still takes its taps in order. */
#define DW_SHARED_PASS(KH, KW, U)                                                            \
    do {                                                                                     \
        __m512 a[U], b[U];                                                                   \
        for (int u = 0; u < U; u++) a[u] = b[u] = _mm512_setzero_ps();                       \
        _Pragma("GCC unroll 8") for (int j = 0; j <= KH; j++) {                               \
            _Pragma("GCC unroll 8") for (int kx = 0; kx < KW; kx++) {                         \
                const float *p = p0 + j * rstride + off[kx] + ox;                            \
                _Pragma("GCC unroll 4") for (int u = 0; u < U; u++) {                         \
                    __m512 v = _mm512_loadu_ps(p + 16 * u);                                  \
                    if (j < KH) a[u] = _mm512_fmadd_ps(wv[j * KW + kx], v, a[u]);            \
                    if (j > 0) b[u] = _mm512_fmadd_ps(wv[(j - 1) * KW + kx], v, b[u]);       \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
        for (int u = 0; u < U; u++) {                                                        \
            _mm512_storeu_ps(o0 + ox + 16 * u, a[u]);                                        \
            _mm512_storeu_ps(o0 + n + ox + 16 * u, b[u]);                                    \
        }                                                                                    \
    } while (0)

/* KH x KW taps known at compile time: broadcast once, held in registers. */
#define DW_FIXED(KH, KW, U)                                                                  \
    static void rows_##KH##x##KW(const float *base, int64_t rstride, int64_t rows,           \
                                 const int64_t *off, const float *w, float *out, int64_t n) {\
        const int64_t taps = KH * KW;                                                        \
        __m512 wv[KH * KW];                                                                  \
        for (int t = 0; t < KH * KW; t++) wv[t] = _mm512_set1_ps(w[t]);                      \
        int shared = rows > 1;                                                               \
        for (int t = 0; shared && t < (KH - 1) * KW; t++) shared = off[t + KW] - off[t] == rstride; \
        int64_t pairs = shared ? rows / 2 * 2 : 0, cols = shared ? n / (16 * U) * (16 * U) : 0; \
        for (int64_t row = 0; row < pairs; row += 2) {                                       \
            const float *p0 = base + row * rstride;                                          \
            float *o0 = out + row * n;                                                       \
            for (int64_t ox = 0; ox < cols; ox += 16 * U) DW_SHARED_PASS(KH, KW, U);         \
        }                                                                                    \
        if (cols < n) DW_BODY(wv[t], 0, pairs, cols);                                        \
        DW_BODY(wv[t], pairs, rows, 0);                                                      \
    }
DW_FIXED(3, 3, 4)
DW_FIXED(5, 5, 2)

static void rows_any(const float *base, int64_t rstride, int64_t rows, const int64_t *off,
                     const float *w, int64_t taps, float *out, int64_t n) {
    if (taps == 9) {   /* 3 x 3 (another shape of 9 taps is never "shared": off tells) */
        rows_3x3(base, rstride, rows, off, w, out, n);
        return;
    }
    if (taps == 25) {
        rows_5x5(base, rstride, rows, off, w, out, n);
        return;
    }
    DW_BODY(_mm512_set1_ps(w[t]), 0, rows, 0);
}

tm_dwconv_rows_fn tm__dwconv_rows_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") ? rows_any : 0;
}

#else

tm_dwconv_rows_fn tm__dwconv_rows_avx512(void) { return 0; }

#endif
