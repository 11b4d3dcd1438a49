/* The AVX-512 VNNI micro-kernel of tm_qgemm: up to 6 rows of uint8 A against one packed
 * panel of 64 int8 columns (vpdpbusd: 4 products summed into each int32 lane, wrapping,
 * never saturating), with the zero-point and scale epilogue applied in registers.
 * Compiled with -mavx512vnni (Makefile), used only when the CPU has it; packing and
 * threads: qgemm.c. */
#include <string.h>
#include "qgemm.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VNNI__)
#include <immintrin.h>
#include "qgemm_epilogue_avx512.h"

#define MR 6
#define COLUMN_VECTORS (TM_QGEMM_NR / 16)

/* Four bytes of a row, as a broadcast 32-bit lane. */
static inline __m512i row_quad(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm512_set1_epi32(v);
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
            if (16 * t < nr) tm__qgemm_epilogue16(acc[r][t], r, t, nr, e);
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

static const tm__qgemm_arch avx512 = {"avx512vnni", MR, tile, NULL, NULL, 0};

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
