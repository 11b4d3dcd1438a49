/* The AVX2 + FMA micro-kernels of tm_sgemm: a 6x16 register tile over packed B panels, and
 * a small-m kernel over unpacked operands. Compiled with -mavx2 -mfma (Makefile) and used
 * only when the CPU has both; not the blocking or packing (gemm.c). */
#include "gemm.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

#define MR 6
#define NR 16

/* Stores one row of the tile: c = alpha * acc + beta * c (beta == 0: c not read). */
static inline void store_row(float *c, __m256 lo, __m256 hi, int nr, __m256 alpha,
                             float beta) {
    lo = _mm256_mul_ps(lo, alpha);
    hi = _mm256_mul_ps(hi, alpha);
    if (nr == NR) {
        if (beta != 0.0f) {
            __m256 vb = _mm256_set1_ps(beta);
            lo = _mm256_fmadd_ps(vb, _mm256_loadu_ps(c), lo);
            hi = _mm256_fmadd_ps(vb, _mm256_loadu_ps(c + 8), hi);
        }
        _mm256_storeu_ps(c, lo);
        _mm256_storeu_ps(c + 8, hi);
        return;
    }
    float row[NR];
    _mm256_storeu_ps(row, lo);
    _mm256_storeu_ps(row + 8, hi);
    for (int j = 0; j < nr; j++) c[j] = beta != 0.0f ? row[j] + beta * c[j] : row[j];
}

static void tile_6x16(int64_t k, const float *a, int64_t a_row, int64_t a_step,
                      const float *b, float *c, int64_t ldc, int mr, int nr, float alpha,
                      float beta) {
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
#pragma GCC unroll 4
    for (int64_t p = 0; p < k; p++) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        __m256 x = _mm256_broadcast_ss(a);
        c00 = _mm256_fmadd_ps(x, b0, c00);
        c01 = _mm256_fmadd_ps(x, b1, c01);
        x = _mm256_broadcast_ss(a + a_row);
        c10 = _mm256_fmadd_ps(x, b0, c10);
        c11 = _mm256_fmadd_ps(x, b1, c11);
        x = _mm256_broadcast_ss(a + 2 * a_row);
        c20 = _mm256_fmadd_ps(x, b0, c20);
        c21 = _mm256_fmadd_ps(x, b1, c21);
        x = _mm256_broadcast_ss(a + 3 * a_row);
        c30 = _mm256_fmadd_ps(x, b0, c30);
        c31 = _mm256_fmadd_ps(x, b1, c31);
        x = _mm256_broadcast_ss(a + 4 * a_row);
        c40 = _mm256_fmadd_ps(x, b0, c40);
        c41 = _mm256_fmadd_ps(x, b1, c41);
        x = _mm256_broadcast_ss(a + 5 * a_row);
        c50 = _mm256_fmadd_ps(x, b0, c50);
        c51 = _mm256_fmadd_ps(x, b1, c51);
        a += a_step;
        b += NR;
    }
    __m256 va = _mm256_set1_ps(alpha);
    store_row(c, c00, c01, nr, va, beta);
    if (mr > 1) store_row(c + ldc, c10, c11, nr, va, beta);
    if (mr > 2) store_row(c + 2 * ldc, c20, c21, nr, va, beta);
    if (mr > 3) store_row(c + 3 * ldc, c30, c31, nr, va, beta);
    if (mr > 4) store_row(c + 4 * ldc, c40, c41, nr, va, beta);
    if (mr > 5) store_row(c + 5 * ldc, c50, c51, nr, va, beta);
}

/* The 6x16 tile with B's rows through a table (see sgemm_avx512.c), masked to nr. */
static void tile_indirect(int64_t k, const float *a, const float *b, const int64_t *b_offset,
                          float *c, int64_t ldc, int mr, int nr, float beta) {
    __m256 acc[MR][2];
    int32_t lanes[16];
    for (int j = 0; j < 16; j++) lanes[j] = j < nr ? -1 : 0;
    __m256i m0 = _mm256_loadu_si256((const __m256i *)lanes);
    __m256i m1 = _mm256_loadu_si256((const __m256i *)(lanes + 8));
    for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    for (int64_t p = 0; p < k; p++) {
        const float *row = b + b_offset[p];
        __m256 b0 = _mm256_maskload_ps(row, m0), b1 = _mm256_maskload_ps(row + 8, m1);
        for (int i = 0; i < MR; i++) {
            __m256 x = _mm256_broadcast_ss(a + i);
            acc[i][0] = _mm256_fmadd_ps(x, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(x, b1, acc[i][1]);
        }
        a += MR;
    }
    for (int i = 0; i < mr; i++)
        store_row(c + i * ldc, acc[i][0], acc[i][1], nr, _mm256_set1_ps(1.0f), beta);
}

/* Few rows (m <= 4) against one packed panel, bound by reading the panel: as in
 * sgemm_avx512.c, even and odd steps of k in separate accumulators. */
static void rows(int64_t k, const float *a, int64_t lda, int m, const float *b, float *c,
                 int64_t ldc, int nr, float beta) {
    for (int i = 0; i < m; i++) {
        const float *row = a + i * lda;
        const float *bp = b;
        __m256 e0 = _mm256_setzero_ps(), e1 = e0, o0 = e0, o1 = e0;
        int64_t p = 0;
        for (; p + 2 <= k; p += 2, bp += 2 * NR) {
            __m256 x = _mm256_broadcast_ss(row + p), y = _mm256_broadcast_ss(row + p + 1);
            e0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(bp), e0);
            e1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(bp + 8), e1);
            o0 = _mm256_fmadd_ps(y, _mm256_loadu_ps(bp + NR), o0);
            o1 = _mm256_fmadd_ps(y, _mm256_loadu_ps(bp + NR + 8), o1);
        }
        if (p < k) {
            __m256 x = _mm256_broadcast_ss(row + p);
            e0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(bp), e0);
            e1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(bp + 8), e1);
        }
        store_row(c + i * ldc, _mm256_add_ps(e0, o0), _mm256_add_ps(e1, o1), nr,
                  _mm256_set1_ps(1.0f), beta);
    }
}

/* A packed (MR floats a step): the strided tile with its constant strides. */
static void tile_packed(int64_t k, const float *a, const float *b, float *c, int64_t ldc,
                        int mr, int nr, float beta) {
    tile_6x16(k, a, 1, MR, b, c, ldc, mr, nr, 1.0f, beta);
}

/* A's rows where they lie: the strided tile, full tiles. No prefetch (pf unused). */
static void tile_rows(int64_t k, const float *a, int64_t lda, const float *b, float *c,
                      int64_t ldc, int nr, float beta, const float *pf, int64_t pf_step) {
    (void)pf, (void)pf_step;
    tile_6x16(k, a, lda, 1, b, c, ldc, MR, nr, 1.0f, beta);
}

static float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float finish(float sum, float alpha, float beta, const float *c) {
    return beta != 0.0f ? alpha * sum + beta * *c : alpha * sum;
}

/* One row of C, B not transposed: 32 columns at a time in registers, along rows of B. */
static void small_row_nn(const float *a, int64_t a_step, int64_t n0, int64_t n1, int64_t k,
                         float alpha, const float *b, int64_t ldb, float beta, float *c) {
    int64_t j = n0;
    for (; j + 32 <= n1; j += 32) {
        __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
        const float *bp = b + j;
        for (int64_t p = 0; p < k; p++, bp += ldb) {
            __m256 x = _mm256_broadcast_ss(a + p * a_step);
            s0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(bp), s0);
            s1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(bp + 8), s1);
            s2 = _mm256_fmadd_ps(x, _mm256_loadu_ps(bp + 16), s2);
            s3 = _mm256_fmadd_ps(x, _mm256_loadu_ps(bp + 24), s3);
        }
        float out[32];
        _mm256_storeu_ps(out, s0);
        _mm256_storeu_ps(out + 8, s1);
        _mm256_storeu_ps(out + 16, s2);
        _mm256_storeu_ps(out + 24, s3);
        for (int t = 0; t < 32; t++) c[j + t] = finish(out[t], alpha, beta, c + j + t);
    }
    for (; j + 8 <= n1; j += 8) {
        __m256 s = _mm256_setzero_ps();
        for (int64_t p = 0; p < k; p++)
            s = _mm256_fmadd_ps(_mm256_broadcast_ss(a + p * a_step),
                                _mm256_loadu_ps(b + p * ldb + j), s);
        float out[8];
        _mm256_storeu_ps(out, s);
        for (int t = 0; t < 8; t++) c[j + t] = finish(out[t], alpha, beta, c + j + t);
    }
    for (; j < n1; j++) {
        float s = 0.0f;
        for (int64_t p = 0; p < k; p++) s = __builtin_fmaf(a[p * a_step], b[p * ldb + j], s);
        c[j] = finish(s, alpha, beta, c + j);
    }
}

/* One row of C, B transposed (stored (n, k)): dot products along k, four columns at once.
 * a is contiguous along k here (the caller copies nothing: trans_a rows are strided). */
static float dot_tail(const float *a, int64_t a_step, const float *b, int64_t from, int64_t k,
                      float s) {
    for (int64_t p = from; p < k; p++) s = __builtin_fmaf(a[p * a_step], b[p], s);
    return s;
}

static void small_row_nt(const float *a, int64_t a_step, int64_t n0, int64_t n1, int64_t k,
                         float alpha, const float *b, int64_t ldb, float beta, float *c) {
    int64_t k8 = a_step == 1 ? k / 8 * 8 : 0;
    for (int64_t j = n0; j < n1; j++) {
        const float *bj = b + j * ldb;
        __m256 s0 = _mm256_setzero_ps(), s1 = s0;
        int64_t p = 0;
        for (; p + 16 <= k8; p += 16) {
            s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + p), _mm256_loadu_ps(bj + p), s0);
            s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + p + 8), _mm256_loadu_ps(bj + p + 8), s1);
        }
        for (; p < k8; p += 8)
            s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + p), _mm256_loadu_ps(bj + p), s0);
        float s = dot_tail(a, a_step, bj, k8, k, hsum(_mm256_add_ps(s0, s1)));
        c[j] = finish(s, alpha, beta, c + j);
    }
}

static void small(int trans_a, int trans_b, int64_t m, int64_t n0, int64_t n1, int64_t k,
                  float alpha, const float *a, int64_t lda, const float *b, int64_t ldb,
                  float beta, float *c, int64_t ldc) {
    for (int64_t i = 0; i < m; i++) {
        /* Row i of op(A): along a row of A, or down a column when A is transposed. */
        const float *row = trans_a ? a + i : a + i * lda;
        int64_t step = trans_a ? lda : 1;
        if (trans_b) small_row_nt(row, step, n0, n1, k, alpha, b, ldb, beta, c + i * ldc);
        else small_row_nn(row, step, n0, n1, k, alpha, b, ldb, beta, c + i * ldc);
    }
}

static const tm__sgemm_arch avx2 = {"avx2", MR, NR, 256, 96, 512, tile_6x16, small, rows,
                                   tile_indirect, tile_packed, tile_rows, NULL, NULL, NULL, NULL, NULL,
                                   NULL};

const tm__sgemm_arch *tm__sgemm_arch_avx2(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return &avx2;
    return 0;
}

#else

const tm__sgemm_arch *tm__sgemm_arch_avx2(void) { return 0; }

#endif
