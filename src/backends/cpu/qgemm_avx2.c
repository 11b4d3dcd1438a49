/* The AVX2 micro-kernel of tm_qgemm, for CPUs without VNNI: one row of uint8 A against
 * half a packed panel (32 columns) at a time, both operands widened to int16 and
 * multiplied with vpmaddwd, which never saturates (vpmaddubsw would: 2 * 255 * 128 does
 * not fit int16). Compiled with -mavx2 (Makefile), used only when the CPU has it. */
#include <string.h>
#include "qgemm.h"

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>

#define HALF 32

/* Four bytes of A (zero past k) as four int16 lanes, repeated across the register. */
static inline __m256i row_quad(const uint8_t *p, int count) {
    uint64_t v = 0;
    for (int i = 0; i < count; i++) v |= (uint64_t)p[i] << (16 * i);
    return _mm256_set1_epi64x((long long)v);
}

static void finish(int32_t acc, int j, const tm__qgemm_epilogue *e) {
    uint32_t v = (uint32_t)acc;
    if (e->rowsum) v -= (uint32_t)e->zb[j] * (uint32_t)e->rowsum[0];
    v -= (uint32_t)e->colterm[j] * (uint32_t)e->za[0];
    int32_t s;
    memcpy(&s, &v, sizeof s);
    if (e->c_int) {
        e->c_int[j] = s;
        return;
    }
    float y = (float)s * e->scale[e->scale_per_col ? j : 0];
    if (e->bias) y = y + e->bias[e->bias_per_col ? j : 0];
    e->c_float[j] = y;
}

/* Columns [h, h + 32) of the panel for one row. */
static void half_row(int64_t k, const uint8_t *a, const int8_t *panel, int h, int nr,
                     const tm__qgemm_epilogue *e) {
    __m256i acc[8];
    for (int c = 0; c < 8; c++) acc[c] = _mm256_setzero_si256();
    int64_t quads = (k + TM_QGEMM_KQ - 1) / TM_QGEMM_KQ;
    for (int64_t q = 0; q < quads; q++) {
        int64_t left = k - q * TM_QGEMM_KQ;
        __m256i av = row_quad(a + q * TM_QGEMM_KQ, left < TM_QGEMM_KQ ? (int)left : TM_QGEMM_KQ);
        const int8_t *b = panel + (q * TM_QGEMM_NR + h) * TM_QGEMM_KQ;
        for (int c = 0; c < 8; c++) {
            __m256i bw = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(b + 16 * c)));
            acc[c] = _mm256_add_epi32(acc[c], _mm256_madd_epi16(bw, av));
        }
    }
    /* acc[c] holds two partial sums per column for columns 4c..4c+3. */
    int32_t out[HALF];
    for (int c = 0; c < 8; c += 2) {
        __m256i s = _mm256_permute4x64_epi64(_mm256_hadd_epi32(acc[c], acc[c + 1]), 0xD8);
        _mm256_storeu_si256((__m256i *)(out + 4 * c), s);
    }
    for (int j = 0; j < HALF && h + j < nr; j++) finish(out[j], h + j, e);
}

static void tile(int64_t k, const uint8_t *a, int64_t lda, int mr, const int8_t *panel,
                 int nr, const tm__qgemm_epilogue *e) {
    (void)mr;   /* the arch's mr is 1 */
    (void)lda;
    for (int h = 0; h < nr; h += HALF) half_row(k, a, panel, h, nr, e);
}

static const tm__qgemm_arch avx2 = {"avx2", 1, tile, NULL, NULL, 0};

const tm__qgemm_arch *tm__qgemm_arch_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") ? &avx2 : 0;
}

#else

const tm__qgemm_arch *tm__qgemm_arch_avx2(void) { return 0; }

#endif
