/* AVX-512 kernels of MATMUL_NBITS' 4-bit fast path on the repacked weights (blocks of 32
 * or more): per block and column a 16-entry table (q - zero point) * scale, then each 16
 * packed bytes give 32 dequantized weights with one vpmovzxbd, a shift and two vpermps
 * (low nibbles: the even k of 32, high nibbles: the odd k; the activations come
 * re-ordered to match, see nbits.h). The GEMV multiplies them in; the dequantizer stores
 * them for the f32 GEMM tile. Compiled with -mavx512f (Makefile), used only when the CPU
 * has it. */
#include <string.h>
#include "nbits.h"

#if defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>

/* q - z for q = 0..15, one row per integer zero point z: the table's only rounding is
 * then the multiply by the scale, as in the reference's (q - z) * scale. */
#define ROW(z) {0 - (z), 1 - (z), 2 - (z), 3 - (z), 4 - (z), 5 - (z), 6 - (z), 7 - (z), \
                8 - (z), 9 - (z), 10 - (z), 11 - (z), 12 - (z), 13 - (z), 14 - (z), 15 - (z)}
static const float q_minus_z[16][16] __attribute__((aligned(64))) = {
    ROW(0), ROW(1), ROW(2), ROW(3), ROW(4), ROW(5), ROW(6), ROW(7),
    ROW(8), ROW(9), ROW(10), ROW(11), ROW(12), ROW(13), ROW(14), ROW(15)};
#undef ROW

/* Column c's table for the record at rec. */
static inline __m512 table(const tm__nbits_packed *h, const uint8_t *rec, int c) {
    float scale;
    memcpy(&scale, rec + tm__nbits_scales_at(h->block) + 4 * c, sizeof scale);
    __m512 s = _mm512_set1_ps(scale);
    const uint8_t *zps = rec + tm__nbits_zps_at(h->block);
    if (!h->zp_float) return _mm512_mul_ps(_mm512_load_ps(q_minus_z[zps[c] & 15]), s);
    float z;
    memcpy(&z, zps + 4 * c, sizeof z);
    __m512 q = _mm512_sub_ps(_mm512_load_ps(q_minus_z[0]), _mm512_set1_ps(z));
    return _mm512_mul_ps(q, s);
}

/* One group of 4 columns; rows a compile-time constant in each caller. Two accumulators
 * per column for a single row (two chains of FMAs), one per row otherwise. */
static inline __attribute__((always_inline)) void gemv_group(const tm__nbits_packed *h,
                                                             const uint8_t *rec,
                                                             const float *a, int64_t lda,
                                                             int rows, float *y, int64_t ldy,
                                                             int cols) {
    enum { C = TM_NBITS_GROUP };
    const int split = rows == 1;
    int64_t half = h->block / 2;
    __m512 acc[C][4][2];
#pragma GCC unroll 4
    for (int c = 0; c < C; c++)
#pragma GCC unroll 4
        for (int r = 0; r < rows; r++) acc[c][r][0] = acc[c][r][1] = _mm512_setzero_ps();
    for (int64_t blk = 0; blk < h->blocks; blk++, rec += h->record) {
        _mm_prefetch((const char *)rec + 8 * h->record, _MM_HINT_T0);
        __m512 tab[C];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) tab[c] = table(h, rec, c);
        for (int64_t j = 0; j < half; j += 16) {
            const float *ak = a + blk * h->block + 2 * j;
            __m512 even[4], odd[4];
#pragma GCC unroll 4
            for (int r = 0; r < rows; r++) {
                even[r] = _mm512_loadu_ps(ak + r * lda);
                odd[r] = _mm512_loadu_ps(ak + r * lda + 16);
            }
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) {
                __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(rec + c * half + j)));
                __m512 lo = _mm512_permutexvar_ps(x, tab[c]);
                __m512 hi = _mm512_permutexvar_ps(_mm512_srli_epi32(x, 4), tab[c]);
#pragma GCC unroll 4
                for (int r = 0; r < rows; r++) {
                    acc[c][r][0] = _mm512_fmadd_ps(lo, even[r], acc[c][r][0]);
                    acc[c][r][split] = _mm512_fmadd_ps(hi, odd[r], acc[c][r][split]);
                }
            }
        }
    }
#pragma GCC unroll 4
    for (int c = 0; c < C; c++)
#pragma GCC unroll 4
        for (int r = 0; r < rows; r++) {
            __m512 s = split ? _mm512_add_ps(acc[c][r][0], acc[c][r][1]) : acc[c][r][0];
            if (c < cols) y[r * ldy + c] = _mm512_reduce_add_ps(s);
        }
}

static void gemv(const tm__nbits_packed *h, const uint8_t *data, const float *a, int64_t lda,
                 int rows, int64_t g0, int64_t g1, float *y, int64_t ldy) {
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *rec = data + g * h->blocks * h->record;
        int64_t n = g * TM_NBITS_GROUP;
        int cols = (int)(h->n - n < TM_NBITS_GROUP ? h->n - n : TM_NBITS_GROUP);
        switch (rows) {
        case 1: gemv_group(h, rec, a, lda, 1, y + n, ldy, cols); break;
        case 2: gemv_group(h, rec, a, lda, 2, y + n, ldy, cols); break;
        case 3: gemv_group(h, rec, a, lda, 3, y + n, ldy, cols); break;
        default: gemv_group(h, rec, a, lda, 4, y + n, ldy, cols); break;
        }
    }
}

static void dequant(const tm__nbits_packed *h, const uint8_t *data, int64_t g0, int groups,
                    int64_t c0, int64_t chunks, float *w, int64_t ldw) {
    int64_t half = h->block / 2, per_block = h->block / TM_NBITS_CHUNK;
    for (int gi = 0; gi < groups; gi++) {
        const uint8_t *group = data + (g0 + gi) * h->blocks * h->record;
        for (int64_t c = c0; c < c0 + chunks; c++) {
            int64_t blk = c / per_block, j = (c % per_block) * 16;
            const uint8_t *rec = group + blk * h->record;
            /* The next call's records (the next slice of K), while the tile computes. */
            if (j == 0) {
                const char *ahead = (const char *)rec + chunks / per_block * h->record;
                _mm_prefetch(ahead, _MM_HINT_T0);
                _mm_prefetch(ahead + 64, _MM_HINT_T0);
            }
            for (int col = 0; col < TM_NBITS_GROUP; col++) {
                __m512 tab = table(h, rec, col);
                __m512i x = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(rec + col * half + j)));
                float *dst = w + (gi * TM_NBITS_GROUP + col) * ldw + (c - c0) * TM_NBITS_CHUNK;
                _mm512_storeu_ps(dst, _mm512_permutexvar_ps(x, tab));
                _mm512_storeu_ps(dst + 16, _mm512_permutexvar_ps(_mm512_srli_epi32(x, 4), tab));
            }
        }
    }
}

/* out[j] lane i = in[i] lane j: unpack within 128-bit lanes, then 4 x 4 blocks of them. */
static inline __attribute__((always_inline)) void transpose16(const __m512 in[16],
                                                              __m512 out[16]) {
    __m512 t[16], u[16];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(in[2 * i], in[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(in[2 * i], in[2 * i + 1]);
    }
    /* u[4G + q], 128-bit lane L: column 4L + q of rows 4G..4G+3. */
#pragma GCC unroll 4
    for (int g = 0; g < 4; g++) {
        u[4 * g] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0x44);
        u[4 * g + 1] = _mm512_shuffle_ps(t[4 * g], t[4 * g + 2], 0xEE);
        u[4 * g + 2] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0x44);
        u[4 * g + 3] = _mm512_shuffle_ps(t[4 * g + 1], t[4 * g + 3], 0xEE);
    }
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
        __m512 v0 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0x44);
        __m512 v1 = _mm512_shuffle_f32x4(u[q], u[4 + q], 0xEE);
        __m512 v2 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0x44);
        __m512 v3 = _mm512_shuffle_f32x4(u[8 + q], u[12 + q], 0xEE);
        out[q] = _mm512_shuffle_f32x4(v0, v2, 0x88);
        out[4 + q] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
        out[8 + q] = _mm512_shuffle_f32x4(v1, v3, 0x88);
        out[12 + q] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
    }
}

static inline __mmask16 lanes(int64_t count) {
    return count >= 16 ? (__mmask16)0xffff : count <= 0 ? 0 : (__mmask16)((1u << count) - 1);
}

/* 16 rows at a time: each row's chunk of 32 split into its even and odd k (two vpermt2ps),
 * then each 16 x 16 block transposed, so the panel is written a full vector at a time. The
 * loops are unrolled so that the blocks stay in registers. */
static void pack(const float *a, int64_t k, int64_t k_pad, int rows, int nr, float *panel) {
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
    for (int h = 0; h < nr; h += 16)
        for (int64_t c = 0; c < k_pad; c += TM_NBITS_CHUNK) {
            __mmask16 m0 = lanes(k - c), m1 = lanes(k - c - 16);
            for (int half = 0; half < 2; half++) {
                __m512i idx = half ? odd : even;
                __m512 in[16], out[16];
#pragma GCC unroll 16
                for (int r = 0; r < 16; r++) {
                    const float *src = a + (int64_t)(h + r) * k + c;
                    __mmask16 live = h + r < rows ? 0xffff : 0;
                    __m512 lo = _mm512_maskz_loadu_ps(m0 & live, src);
                    __m512 hi = _mm512_maskz_loadu_ps(m1 & live, src + 16);
                    in[r] = _mm512_permutex2var_ps(lo, idx, hi);
                }
                transpose16(in, out);
                float *dst = panel + (c + 16 * half) * nr + h;
#pragma GCC unroll 16
                for (int p = 0; p < 16; p++) _mm512_storeu_ps(dst + p * nr, out[p]);
            }
        }
}

static void store(const float *acc, int nr, int rows, int cols, float *y, int64_t ldy) {
    __mmask16 m = lanes(cols);
    for (int h = 0; h < rows; h += 16) {
        __m512 in[16], out[16];
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++)
            in[j] = _mm512_maskz_loadu_ps(j < cols ? 0xffff : 0, acc + j * nr + h);
        transpose16(in, out);
        int n = rows - h < 16 ? rows - h : 16;
#pragma GCC unroll 16
        for (int r = 0; r < 16; r++)
            if (r < n) _mm512_mask_storeu_ps(y + (h + r) * ldy, m, out[r]);
    }
}

/* Groups [g0, g0 + groups) (up to 8: 32 columns, missing ones zero) dequantized over
 * chunks [c0, c0 + chunks) of the padded K, in the kernels' k order, as one packed-B
 * panel of 32 columns: dst[(p - 32 c0) * 32 + j]. Sixteen columns' 16 values of k at a
 * time (the even k of a chunk, then its odd k), transposed so that each k's columns are
 * stored as one vector. */
static void dequant_panel(const tm__nbits_packed *h, const uint8_t *data, int64_t g0,
                          int groups, int64_t c0, int64_t chunks, float *dst) {
    int64_t half = h->block / 2, per_block = h->block / TM_NBITS_CHUNK;
    for (int64_t c = c0; c < c0 + chunks; c++) {
        int64_t blk = c / per_block, j = (c % per_block) * 16;
        for (int side = 0; side < 2; side++)        /* columns 0-15, then 16-31 */
            for (int odd = 0; odd < 2; odd++) {     /* even k, then odd k */
                __m512 in[16], out[16];
#pragma GCC unroll 16
                for (int q = 0; q < 16; q++) {
                    int gi = side * 4 + q / 4, col = q % 4;
                    if (gi >= groups) {
                        in[q] = _mm512_setzero_ps();
                        continue;
                    }
                    const uint8_t *rec = data + ((g0 + gi) * h->blocks + blk) * h->record;
                    __m512i x = _mm512_cvtepu8_epi32(
                        _mm_loadu_si128((const __m128i *)(rec + col * half + j)));
                    if (odd) x = _mm512_srli_epi32(x, 4);
                    in[q] = _mm512_permutexvar_ps(x, table(h, rec, col));
                }
                transpose16(in, out);
                float *d = dst + ((c - c0) * TM_NBITS_CHUNK + 16 * odd) * 32 + 16 * side;
#pragma GCC unroll 16
                for (int p = 0; p < 16; p++) _mm512_storeu_ps(d + p * 32, out[p]);
            }
    }
}

static const tm__nbits_arch avx512 = {"avx512", gemv, dequant, pack, store, dequant_panel};

const tm__nbits_arch *tm__nbits_arch_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") ? &avx512 : 0;
}

#else

const tm__nbits_arch *tm__nbits_arch_avx512(void) { return 0; }

#endif
