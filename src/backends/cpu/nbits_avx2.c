/* The AVX2 kernel of MATMUL_NBITS' int8-activation path (tm_nbits_matmul_int8, nbits.h),
 * for CPUs without AVX-512 VNNI: a group's 16 columns as two 256-bit halves, vpmaddubsw
 * then vpmaddwd standing in for vpdpbusd (a nibble times an int8 is at most 15 * 127, so
 * the 16-bit pair sums cannot saturate). Not the exact f32-accuracy GEMV, which has only
 * its AVX-512 and portable forms. Compiled with -mavx2 -mfma (Makefile), used only when
 * the CPU has them. */
#include <string.h>
#include "nbits.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

static inline __m256i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

/* The zero points of half `half` (8 columns) of a record as f32. */
static inline __m256 zero_points(const tm__nbits_packed *h, const uint8_t *rec, int half) {
    const uint8_t *zps = rec + tm__nbits_zps_at(h->block);
    if (h->zp_float) return _mm256_loadu_ps((const float *)(const void *)(zps + 32 * half));
    __m128i z8 = _mm_loadl_epi64((const __m128i *)(const void *)(zps + 8 * half));
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(z8));
}

/* acc + the dot products of each lane's four unsigned bytes of u and signed bytes of s
 * for the low nibbles and the high ones (ulo.slo + uhi.shi). */
static inline __m256i dot(__m256i acc, __m256i ulo, __m256i slo, __m256i uhi, __m256i shi) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(ulo, slo), _mm256_maddubs_epi16(uhi, shi));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, ones));
}

static inline __attribute__((always_inline)) void gemv8_group(const tm__nbits_packed *h,
                                                              const uint8_t *rec,
                                                              const tm__nbits_q8 *q, int rows,
                                                              float *y, int64_t ldy, int cols) {
    const __m256i nib = _mm256_set1_epi8(0x0f);
    const int64_t octets = h->block / 8;
    __m256 out[4][2];
#pragma GCC unroll 4
    for (int r = 0; r < rows; r++) out[r][0] = out[r][1] = _mm256_setzero_ps();
    for (int64_t blk = 0; blk < h->blocks; blk++, rec += h->record) {
        __m256i acc[4][2];
#pragma GCC unroll 4
        for (int r = 0; r < rows; r++) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
        int64_t k0 = blk * h->block;
        for (int64_t o = 0; o < octets; o++) {
            __m256i v0 = _mm256_loadu_si256((const __m256i *)(const void *)(rec + 64 * o));
            __m256i v1 = _mm256_loadu_si256((const __m256i *)(const void *)(rec + 64 * o + 32));
            __m256i lo0 = _mm256_and_si256(v0, nib), hi0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), nib);
            __m256i lo1 = _mm256_and_si256(v1, nib), hi1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), nib);
#pragma GCC unroll 4
            for (int r = 0; r < rows; r++) {
                const int8_t *d = q[r].q + k0 + 8 * o;
                __m256i slo = bcast4(d), shi = bcast4(d + 4);
                acc[r][0] = dot(acc[r][0], lo0, slo, hi0, shi);
                acc[r][1] = dot(acc[r][1], lo1, slo, hi1, shi);
            }
        }
        const float *scales = (const float *)(const void *)(rec + tm__nbits_scales_at(h->block));
#pragma GCC unroll 2
        for (int half = 0; half < 2; half++) {
            __m256 z = zero_points(h, rec, half), s = _mm256_loadu_ps(scales + 8 * half);
#pragma GCC unroll 4
            for (int r = 0; r < rows; r++) {
                __m256 t = _mm256_cvtepi32_ps(acc[r][half]);
                t = _mm256_fnmadd_ps(z, _mm256_set1_ps(q[r].sum[blk]), t);
                out[r][half] = _mm256_fmadd_ps(t, _mm256_mul_ps(s, _mm256_set1_ps(q[r].sa[blk])),
                                               out[r][half]);
            }
        }
    }
    for (int r = 0; r < rows; r++) {
        float tmp[TM_NBITS_GROUP];
        _mm256_storeu_ps(tmp, out[r][0]);
        _mm256_storeu_ps(tmp + 8, out[r][1]);
        memcpy(y + r * ldy, tmp, sizeof(float) * (size_t)cols);
    }
}

static void gemv8(const tm__nbits_packed *h, const uint8_t *data, const tm__nbits_q8 *q, int rows,
                  int64_t g0, int64_t g1, float *y, int64_t ldy) {
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *rec = data + g * h->blocks * h->record;
        int64_t left = h->n - g * TM_NBITS_GROUP;
        int cols = (int)(left < TM_NBITS_GROUP ? left : TM_NBITS_GROUP);
        /* Four rows at a time: sixteen registers hold no more accumulators. */
        for (int r0 = 0; r0 < rows; r0 += 4) {
            float *yg = y + r0 * ldy + g * TM_NBITS_GROUP;
            switch (rows - r0) {
            case 1: gemv8_group(h, rec, q + r0, 1, yg, ldy, cols); break;
            case 2: gemv8_group(h, rec, q + r0, 2, yg, ldy, cols); break;
            case 3: gemv8_group(h, rec, q + r0, 3, yg, ldy, cols); break;
            default: gemv8_group(h, rec, q + r0, 4, yg, ldy, cols); break;
            }
        }
    }
}

tm__nbits_gemv8_fn tm__nbits_gemv8_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? gemv8 : 0;
}

#else

tm__nbits_gemv8_fn tm__nbits_gemv8_avx2(void) { return 0; }

#endif
