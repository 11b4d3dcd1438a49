/* The AVX-512 VNNI micro-kernel of tm_qgemm: up to 6 rows of uint8 A against one packed
 * panel of 64 int8 columns (vpdpbusd: 4 products summed into each int32 lane, wrapping,
 * never saturating), with the zero-point and scale epilogue applied in registers.
 * Compiled with -mavx512vnni (Makefile), used only when the CPU has it; packing and
 * threads: qgemm.c. */
#include <string.h>
#include "qgemm.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#include <immintrin.h>

#define MR 6
#define COLUMN_VECTORS (TM_QGEMM_NR / 16)

static inline __mmask16 lane_mask(int count) {
    return count >= 16 ? (__mmask16)0xffff : count <= 0 ? 0 : (__mmask16)((1u << count) - 1);
}

/* Four bytes of a row, as a broadcast 32-bit lane. */
static inline __m512i row_quad(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm512_set1_epi32(v);
}

static inline void epilogue(__m512i acc, int r, int t, int nr, const tm__qgemm_epilogue *e) {
    __mmask16 m = lane_mask(nr - 16 * t);
    if (e->rowsum) {
        __m512i zb = _mm512_loadu_si512(e->zb + 16 * t);
        acc = _mm512_sub_epi32(acc, _mm512_mullo_epi32(zb, _mm512_set1_epi32(e->rowsum[r])));
    }
    if (e->za[r]) {
        __m512i ct = _mm512_loadu_si512(e->colterm + 16 * t);
        acc = _mm512_sub_epi32(acc, _mm512_mullo_epi32(ct, _mm512_set1_epi32(e->za[r])));
    }
    if (e->c_int) {
        _mm512_mask_storeu_epi32(e->c_int + r * e->ldc + 16 * t, m, acc);
        return;
    }
    __m512 s = e->scale_per_col ? _mm512_maskz_loadu_ps(m, e->scale + 16 * t)
                                : _mm512_set1_ps(e->scale[0]);
    __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), s);
    if (e->bias)
        y = _mm512_add_ps(y, e->bias_per_col ? _mm512_maskz_loadu_ps(m, e->bias + 16 * t)
                                             : _mm512_set1_ps(e->bias[0]));
    _mm512_mask_storeu_ps(e->c_float + r * e->ldc + 16 * t, m, y);
}

/* rows: a compile-time constant in each caller, so acc lives in registers. */
static inline __attribute__((always_inline)) void tile_rows(int rows, int64_t k,
                                                            const uint8_t *a, int64_t lda,
                                                            const int8_t *panel, int nr,
                                                            const tm__qgemm_epilogue *e) {
    __m512i acc[MR][COLUMN_VECTORS];
#pragma GCC unroll 6
    for (int r = 0; r < rows; r++)
#pragma GCC unroll 4
        for (int t = 0; t < COLUMN_VECTORS; t++) acc[r][t] = _mm512_setzero_si512();
    int64_t quads = k / TM_QGEMM_KQ;
    const int8_t *b = panel;
    for (int64_t q = 0; q < quads; q++, b += TM_QGEMM_NR * TM_QGEMM_KQ) {
        __m512i bv[COLUMN_VECTORS];
#pragma GCC unroll 4
        for (int t = 0; t < COLUMN_VECTORS; t++) bv[t] = _mm512_loadu_si512(b + 64 * t);
#pragma GCC unroll 6
        for (int r = 0; r < rows; r++) {
            __m512i av = row_quad(a + r * lda + q * TM_QGEMM_KQ);
#pragma GCC unroll 4
            for (int t = 0; t < COLUMN_VECTORS; t++)
                acc[r][t] = _mm512_dpbusd_epi32(acc[r][t], av, bv[t]);
        }
    }
    if (k % TM_QGEMM_KQ) {
        /* The last group of 1-3 bytes: masked, so nothing past the row is read; the
         * packed panel holds zeros there. */
        __mmask16 m = (__mmask16)((1u << (k % TM_QGEMM_KQ)) - 1);
        __m512i bv[COLUMN_VECTORS];
#pragma GCC unroll 4
        for (int t = 0; t < COLUMN_VECTORS; t++) bv[t] = _mm512_loadu_si512(b + 64 * t);
#pragma GCC unroll 6
        for (int r = 0; r < rows; r++) {
            __m128i tail = _mm_maskz_loadu_epi8(m, a + r * lda + quads * TM_QGEMM_KQ);
            __m512i av = _mm512_broadcastd_epi32(tail);
#pragma GCC unroll 4
            for (int t = 0; t < COLUMN_VECTORS; t++)
                acc[r][t] = _mm512_dpbusd_epi32(acc[r][t], av, bv[t]);
        }
    }
#pragma GCC unroll 6
    for (int r = 0; r < rows; r++)
#pragma GCC unroll 4
        for (int t = 0; t < COLUMN_VECTORS; t++)
            if (16 * t < nr) epilogue(acc[r][t], r, t, nr, e);
}

static void tile(int64_t k, const uint8_t *a, int64_t lda, int mr, const int8_t *panel,
                 int nr, const tm__qgemm_epilogue *e) {
    switch (mr) {
    case 1: tile_rows(1, k, a, lda, panel, nr, e); break;
    case 2: tile_rows(2, k, a, lda, panel, nr, e); break;
    case 3: tile_rows(3, k, a, lda, panel, nr, e); break;
    case 4: tile_rows(4, k, a, lda, panel, nr, e); break;
    case 5: tile_rows(5, k, a, lda, panel, nr, e); break;
    default: tile_rows(6, k, a, lda, panel, nr, e); break;
    }
}

static const tm__qgemm_arch avx512 = {"avx512vnni", MR, tile};

const tm__qgemm_arch *tm__qgemm_arch_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vnni")
               ? &avx512
               : 0;
}

#else

const tm__qgemm_arch *tm__qgemm_arch_avx512(void) { return 0; }

#endif
