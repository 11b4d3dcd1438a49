/* The AVX-512 micro-kernels of tm_sgemm: a 12x32 register tile (24 zmm accumulators, A
 * broadcast from A's rows as they are), a small-m kernel over unpacked operands and the
 * packing of a transposed B (16 x 16 register transposes). Compiled
 * with -mavx512f (Makefile), used only when the CPU has it; blocking and packing: gemm.c. */
#include <float.h>
#include "gemm.h"

#if defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>
#include "transpose_avx512.h"

#define MR 12
#define NR 32

static inline __mmask16 lane_mask(int count) {
    return count >= 16 ? (__mmask16)0xffff : count <= 0 ? 0 : (__mmask16)((1u << count) - 1);
}

/* c = alpha * acc + beta * c on the first nr columns (beta == 0: c not read). */
static inline void store_row(float *c, __m512 lo, __m512 hi, int nr, __m512 alpha,
                             float beta) {
    lo = _mm512_mul_ps(lo, alpha);
    hi = _mm512_mul_ps(hi, alpha);
    if (nr == NR) {
        if (beta != 0.0f) {
            __m512 vb = _mm512_set1_ps(beta);
            lo = _mm512_fmadd_ps(vb, _mm512_loadu_ps(c), lo);
            hi = _mm512_fmadd_ps(vb, _mm512_loadu_ps(c + 16), hi);
        }
        _mm512_storeu_ps(c, lo);
        _mm512_storeu_ps(c + 16, hi);
        return;
    }
    __mmask16 m0 = lane_mask(nr), m1 = lane_mask(nr - 16);
    if (beta != 0.0f) {
        __m512 vb = _mm512_set1_ps(beta);
        lo = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, c), lo);
        hi = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, c + 16), hi);
    }
    _mm512_mask_storeu_ps(c, m0, lo);
    _mm512_mask_storeu_ps(c + 16, m1, hi);
}

/* The first mr of R rows of a register tile's sums into c: alpha * acc + beta * c (R a
 * constant in each caller). */
static inline __attribute__((always_inline)) void store_tile(const int R, __m512 acc[][2],
                                                             float *c, int64_t ldc, int mr,
                                                             int nr, float alpha, float beta) {
    __m512 va = _mm512_set1_ps(alpha);
#pragma GCC unroll 12
    for (int i = 0; i < R; i++)
        if (i < mr) store_row(c + i * ldc, acc[i][0], acc[i][1], nr, va, beta);
}

/* The first mr rows of a 12-row tile's sums into c as alpha * acc + bias (bias: nr
 * floats, one per column): the roundings of a tile stored with alpha and then added to a
 * C filled with the bias (store_row with beta 1), without writing C twice. */
static inline __attribute__((always_inline)) void store_tile_bias(__m512 acc[][2], float *c,
                                                                  int64_t ldc, int mr, int nr,
                                                                  float alpha,
                                                                  const float *bias) {
    __m512 va = _mm512_set1_ps(alpha);
    __m512 b0 = _mm512_maskz_loadu_ps(lane_mask(nr), bias);
    __m512 b1 = _mm512_maskz_loadu_ps(lane_mask(nr - 16), bias + 16);
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) {
        acc[i][0] = _mm512_add_ps(b0, _mm512_mul_ps(acc[i][0], va));
        acc[i][1] = _mm512_add_ps(b1, _mm512_mul_ps(acc[i][1], va));
    }
    store_tile(MR, acc, c, ldc, mr, nr, 1.0f, 0.0f);
}

/* One step of k of an R-row tile whose A elements at this step lie `stride` apart (a
 * packed tile: 1). */
static inline __attribute__((always_inline)) void fma_strided(const int R, __m512 acc[][2],
                                                              const float *a, int64_t stride,
                                                              __m512 b0, __m512 b1) {
#pragma GCC unroll 12
    for (int i = 0; i < R; i++) {
        __m512 x = _mm512_set1_ps(a[i * stride]);
        acc[i][0] = _mm512_fmadd_ps(x, b0, acc[i][0]);
        acc[i][1] = _mm512_fmadd_ps(x, b1, acc[i][1]);
    }
}

/* A packed as tm_sgemm_pack_a lays it out (MR floats a step of k), or stored transposed
 * (the tile's rows side by side, `step` floats from one k to the next): its offsets are
 * constants, so the loop needs two pointers where the strided form needs twelve. A
 * short tile runs the 8- or 4-row form, computing only rows that exist (m = 32: tiles of
 * 12, 12 and 8 rows, no FMA wasted on padding). R rows are read at every k. */
#define TILE_PACKED(R)                                                                     \
    static void tile_step_##R(int64_t k, const float *a, int64_t step, const float *b,      \
                              float *c, int64_t ldc, int mr, int nr, float beta) {          \
        __m512 acc[R][2];                                                                   \
        _Pragma("GCC unroll 12") for (int i = 0; i < R; i++)                                \
            acc[i][0] = acc[i][1] = _mm512_setzero_ps();                                    \
        _Pragma("GCC unroll 2") for (int64_t p = 0; p < k; p++) {                           \
            fma_strided(R, acc, a, 1, _mm512_loadu_ps(b), _mm512_loadu_ps(b + 16));         \
            a += step;                                                                      \
            b += NR;                                                                        \
        }                                                                                   \
        store_tile(R, acc, c, ldc, mr, nr, 1.0f, beta);                                     \
    }
TILE_PACKED(12)
TILE_PACKED(8)
TILE_PACKED(4)

/* One step of k of a 12x32 tile whose A rows lie in place: rows 3q, 3q + 1 and 3q + 2
 * at rq, rq + l1 and rq + l2 (four base pointers and two strides keep the loop in the
 * general registers; twelve row pointers would spill). */
static inline __attribute__((always_inline)) void fma_rows12(__m512 acc[MR][2], const float *r0,
                                                             const float *r1, const float *r2,
                                                             const float *r3, int64_t l1,
                                                             int64_t l2, __m512 b0, __m512 b1) {
    const float *row[4] = {r0, r1, r2, r3};
#pragma GCC unroll 4
    for (int q = 0; q < 4; q++) {
        __m512 x0 = _mm512_set1_ps(row[q][0]), x1 = _mm512_set1_ps(row[q][l1]);
        __m512 x2 = _mm512_set1_ps(row[q][l2]);
        acc[3 * q][0] = _mm512_fmadd_ps(x0, b0, acc[3 * q][0]);
        acc[3 * q][1] = _mm512_fmadd_ps(x0, b1, acc[3 * q][1]);
        acc[3 * q + 1][0] = _mm512_fmadd_ps(x1, b0, acc[3 * q + 1][0]);
        acc[3 * q + 1][1] = _mm512_fmadd_ps(x1, b1, acc[3 * q + 1][1]);
        acc[3 * q + 2][0] = _mm512_fmadd_ps(x2, b0, acc[3 * q + 2][0]);
        acc[3 * q + 2][1] = _mm512_fmadd_ps(x2, b1, acc[3 * q + 2][1]);
    }
}

/* Floats of packed B the row tile prefetches ahead of its reads (32 steps of k). */
#define B_AHEAD (32 * NR)

/* The 12-row tile and the decode rows kernel prefetch their stream of B into L1 or L2 as
 * tm__stream_prefetch_l2 says (a Xeon with AMX, one thread, L2 against L1: the 0.6B f32
 * decode step 155 -> 145 ms, a small LLaMA's 32-token prefill 49 -> 47 ms). */

/* The 12x32 tile over A's rows where they lie (row stride lda, k contiguous), with the
 * rows reached from four base pointers and two strides, so that the loop fits the
 * general registers (twelve row pointers would spill). Full tiles only. HINT: the
 * prefetch's, a constant in each of tile_rows12's two calls. */
static inline __attribute__((always_inline)) void tile_rows12_hint(int64_t k, const float *a,
                                                                    int64_t lda, const float *b,
                                                                    float *c, int64_t ldc,
                                                                    int nr, float beta,
                                                                    const float *pf,
                                                                    int64_t pf_step,
                                                                    const int hint,
                                                                    const float *na,
                                                                    const float *bias) {
    __m512 acc[MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    const float *a0 = a, *a1 = a + 3 * lda, *a2 = a + 6 * lda, *a3 = a + 9 * lda;
    int64_t l1 = lda, l2 = 2 * lda;
#pragma GCC unroll 2
    for (int64_t p = 0; p < k; p++) {
        /* pf's stream: this panel a few KB ahead (a tile whose panel comes from memory),
         * or the next panel or block (a tile whose panel is in cache). */
        if (hint == 2) {
            _mm_prefetch((const char *)pf, _MM_HINT_T2);
            _mm_prefetch((const char *)(pf + 16), _MM_HINT_T2);
        } else if (hint == 1) {
            _mm_prefetch((const char *)pf, _MM_HINT_T1);
            _mm_prefetch((const char *)(pf + 16), _MM_HINT_T1);
        } else {
            _mm_prefetch((const char *)pf, _MM_HINT_T0);
            _mm_prefetch((const char *)(pf + 16), _MM_HINT_T0);
        }
        pf += pf_step;
        /* The next row tile's rows (na: its first, lda apart), a line of each every 16
         * steps, into L2: a weight read in place as A comes from memory, and its first
         * panel waited on twelve rows at once. */
        if (na && (p & 15) == 0) {
#pragma GCC unroll 12
            for (int i = 0; i < MR; i++) _mm_prefetch((const char *)(na + i * lda + p), _MM_HINT_T1);
        }
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
        fma_rows12(acc, a0 + p, a1 + p, a2 + p, a3 + p, l1, l2, b0, b1);
        b += NR;
    }
    if (bias) {   /* c = a . b + bias, C written once (not filled with the bias first) */
        store_tile_bias(acc, c, ldc, MR, nr, 1.0f, bias);
        return;
    }
    store_tile(MR, acc, c, ldc, MR, nr, 1.0f, beta);
}

/* Its own stream into L1 or L2 as tm__stream_prefetch_l2 says; another panel, fetched a
 * panel or more ahead, always into L2 (into L1 it would push out A's tile and the panel
 * being read). With bias, c = a . b + bias (beta unused). */
static inline __attribute__((always_inline)) void tile_rows12_fetching(
    int64_t k, const float *a, int64_t lda, const float *b, float *c, int64_t ldc, int nr,
    float beta, const float *pf, int64_t pf_step, const float *bias) {
    if (pf) tile_rows12_hint(k, a, lda, b, c, ldc, nr, beta, pf, pf_step, 1, NULL, bias);
    else if (tm__stream_prefetch_l2())
        tile_rows12_hint(k, a, lda, b, c, ldc, nr, beta, b + B_AHEAD, NR, 2, NULL, bias);
    else tile_rows12_hint(k, a, lda, b, c, ldc, nr, beta, b + B_AHEAD, NR, 0, NULL, bias);
}

static void tile_rows12(int64_t k, const float *a, int64_t lda, const float *b, float *c,
                        int64_t ldc, int nr, float beta, const float *pf, int64_t pf_step) {
    tile_rows12_fetching(k, a, lda, b, c, ldc, nr, beta, pf, pf_step, NULL);
}

/* tile_rows12 over one depth block with c = a . b + bias (bias: nr floats): a product
 * that overwrites C writes it once, where filling the tile with the bias first waited on
 * C's lines twice over when C is not in cache (1024 x 1536 x 384 from packed B, C cold:
 * the bias cost 1.5-2% of the product that way). */
static void tile_rows12_bias(int64_t k, const float *a, int64_t lda, const float *b, float *c,
                             int64_t ldc, int nr, const float *bias, const float *pf,
                             int64_t pf_step) {
    tile_rows12_fetching(k, a, lda, b, c, ldc, nr, 0.0f, pf, pf_step, bias);
}

/* tile_rows12, its own stream as there, also fetching the next row tile's rows of A
 * (next: its first row, lda apart as this tile's) into L2. */
static void tile_rows12_next(int64_t k, const float *a, int64_t lda, const float *b, float *c,
                             int64_t ldc, int nr, float beta, const float *next) {
    if (tm__stream_prefetch_l2()) tile_rows12_hint(k, a, lda, b, c, ldc, nr, beta, b + B_AHEAD, NR, 2, next, NULL);
    else tile_rows12_hint(k, a, lda, b, c, ldc, nr, beta, b + B_AHEAD, NR, 0, next, NULL);
}

/* The 12x32 tile with B read where it lies (row p at b + p * ldb, nr columns through
 * masks: nothing past them is read), nothing packed: tm_sgemm's path for a few rows of A
 * by a B it would otherwise pack on every call (a weight being trained). A's rows in
 * place (ROWS: row stride a_row, k contiguous, four base pointers as tile_rows12) or a
 * packed short tile (a_step floats a step of k, zero rows below). It fetches NEXT_ROWS
 * rows of NEXT (ldb apart; two lines each) into L2, spread evenly over its steps of k:
 * its share of the panel a later tile reads, so that B, read from memory once, streams
 * in while this one computes. It also fetches for writing the lines of C it will store,
 * one every few steps of the first half of k: the row tiles go down all of C's rows
 * before the next panel, so each row is its own stream, too many for the hardware
 * prefetchers, and C (an activation a training step keeps) is memory no cache holds
 * (128 x 1536 x 384 + bias, C cold: 1.15 -> 1.09 ms, with the bias in the store below;
 * MiniLM's gradient step 0.7%, alternating in one process). */
static inline __attribute__((always_inline)) void inplace_body(
    int64_t k, const float *a, int64_t a_row, int64_t a_step, const float *b, int64_t ldb,
    float *c, int64_t ldc, int mr, int nr, float alpha, float beta, const float *next,
    int64_t next_rows, const float *bias, const int in_rows) {
    __m512 acc[MR][2];
    __mmask16 m0 = lane_mask(nr), m1 = lane_mask(nr - 16);
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    const float *a0 = a, *a1 = a + 3 * a_row, *a2 = a + 6 * a_row, *a3 = a + 9 * a_row;
    int64_t l1 = a_row, l2 = 2 * a_row;
    int64_t n_every = next_rows > 0 && k / next_rows > 1 ? k / next_rows : 1;
    int64_t n_at = next && next_rows > 0 ? 0 : -1;
    int64_t c_every = k / (4 * mr) > 1 ? k / (4 * mr) : 1;
    int64_t c_at = 0;
    int c_line = 0;
    const float *c_row = c;
#pragma GCC unroll 2
    for (int64_t p = 0; p < k; p++) {
        if (p == c_at) {
            _mm_prefetch((const char *)(c_row + (c_line & 1) * 16), _MM_HINT_ET0);
            if (c_line & 1) c_row += ldc;
            c_at = ++c_line < 2 * mr ? c_at + c_every : -1;
        }
        if (p == n_at) {
            _mm_prefetch((const char *)next, _MM_HINT_T1);
            _mm_prefetch((const char *)(next + 16), _MM_HINT_T1);
            next += ldb;
            n_at = --next_rows > 0 ? n_at + n_every : -1;
        }
        __m512 b0, b1;
        if (nr == NR) {
            b0 = _mm512_loadu_ps(b);
            b1 = _mm512_loadu_ps(b + 16);
        } else {
            b0 = _mm512_maskz_loadu_ps(m0, b);
            b1 = _mm512_maskz_loadu_ps(m1, b + 16);
        }
        if (in_rows) {
            fma_rows12(acc, a0 + p, a1 + p, a2 + p, a3 + p, l1, l2, b0, b1);
        } else {
            fma_strided(MR, acc, a, 1, b0, b1);
            a += a_step;
        }
        b += ldb;
    }
    if (bias) {   /* c = alpha * acc + bias: C is written once, not filled first */
        store_tile_bias(acc, c, ldc, mr, nr, alpha, bias);
        return;
    }
    store_tile(MR, acc, c, ldc, mr, nr, alpha, beta);
}

static void tile_inplace(int64_t k, const float *a, int64_t a_row, int64_t a_step,
                         const float *b, int64_t ldb, float *c, int64_t ldc, int mr, int nr,
                         float alpha, float beta, const float *next, int64_t next_rows,
                         const float *bias) {
    if (a_step == 1 && nr == NR)
        inplace_body(k, a, a_row, 1, b, ldb, c, ldc, MR, NR, alpha, beta, next, next_rows, bias,
                     1);
    else if (a_step == 1)
        inplace_body(k, a, a_row, 1, b, ldb, c, ldc, MR, nr, alpha, beta, next, next_rows, bias,
                     1);
    else inplace_body(k, a, 1, a_step, b, ldb, c, ldc, mr, nr, alpha, beta, next, next_rows,
                      bias, 0);
}

static void tile_packed(int64_t k, const float *a, const float *b, float *c, int64_t ldc,
                        int mr, int nr, float beta) {
    if (mr > 8) tile_step_12(k, a, MR, b, c, ldc, mr, nr, beta);
    else if (mr > 4) tile_step_8(k, a, MR, b, c, ldc, mr, nr, beta);
    else tile_step_4(k, a, MR, b, c, ldc, mr, nr, beta);
}

/* A full tile of A stored transposed: row i at depth p is a[p * step + i]. A is then an
 * activation kept from the forward (a weight gradient's X^T), rows `step` floats apart
 * that no hardware prefetcher follows, and C a weight's gradient, megabytes no cache
 * holds: each step fetches into L2 the next line of A's run (a + 16, which the row tiles
 * after this one read), and every fourth step, while they last, one of the lines of C
 * the tile of the next panel will store (c + NR), for writing. MiniLM's gradient step,
 * one Xeon core, alternating in one process: about 1% for A's, 0.5-0.7% more for C's (a
 * product 384 x 384 x 128 with A and C cold 146 -> 153 GFLOP/s for A's). */
static void tile_cols(int64_t k, const float *a, int64_t step, const float *b, float *c,
                      int64_t ldc, int nr, float beta) {
    __m512 acc[MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    const float *next_c = c + NR;
    int line = 0;
#pragma GCC unroll 2
    for (int64_t p = 0; p < k; p++) {
        if ((p & 3) == 0 && line < 2 * MR) {
            _mm_prefetch((const char *)(next_c + (line >> 1) * ldc + (line & 1) * 16),
                         _MM_HINT_ET0);
            line++;
        }
        _mm_prefetch((const char *)(a + 16), _MM_HINT_T1);
        fma_strided(MR, acc, a, 1, _mm512_loadu_ps(b), _mm512_loadu_ps(b + 16));
        a += step;
        b += NR;
    }
    store_tile(MR, acc, c, ldc, MR, nr, 1.0f, beta);
}

static void tile_12x32(int64_t k, const float *a, int64_t a_row, int64_t a_step,
                       const float *b, float *c, int64_t ldc, int mr, int nr, float alpha,
                       float beta) {
    __m512 acc[MR][2];
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int64_t p = 0; p < k; p++) {
        __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
        fma_strided(MR, acc, a, a_row, b0, b1);
        a += a_step;
        b += NR;
    }
    store_tile(MR, acc, c, ldc, mr, nr, alpha, beta);
}

/* The 12x32 tile with B's rows found through a table, not packed: row p of B is
 * b + b_offset[p] (a convolution's input rows, read where they lie), nr columns of it
 * read with masks, so nothing past them is touched. */
static void tile_indirect(int64_t k, const float *a, const float *b, const int64_t *b_offset,
                          float *c, int64_t ldc, int mr, int nr, float beta) {
    __m512 acc[MR][2];
    __mmask16 m0 = lane_mask(nr), m1 = lane_mask(nr - 16);
#pragma GCC unroll 12
    for (int i = 0; i < MR; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
#pragma GCC unroll 2
    for (int64_t p = 0; p < k; p++) {
        const float *row = b + b_offset[p];
        __m512 b0 = _mm512_maskz_loadu_ps(m0, row), b1 = _mm512_maskz_loadu_ps(m1, row + 16);
        /* The rows lie far apart (a plane each): no hardware prefetcher follows them, so
         * fetch what the panel after next (2 NR columns on) will read: the next panel's
         * lines, fetched one panel ahead, still arrived late on a Zen 5 core (PP-OCR's
         * two 96 -> 24 3x3 convolutions at 160 x 160, one thread: 7.8 and 7.1 -> 6.9 and
         * 6.0 ms). Prefetches never fault, past the end of a buffer included. */
        _mm_prefetch((const char *)(row + 2 * NR), _MM_HINT_T0);
        _mm_prefetch((const char *)(row + 2 * NR + 16), _MM_HINT_T0);
        fma_strided(MR, acc, a, 1, b0, b1);
        a += MR;
    }
    store_tile(MR, acc, c, ldc, mr, nr, 1.0f, beta);
}

/* Few rows (m <= 4, a decode step) against one packed panel: each row keeps two pairs of
 * accumulators (even and odd steps of k), so even one row has four FMA chains in flight
 * and the loop is bound by reading the panel. c = a . b_packed (+ c when beta != 0). */
#define ROWS_KERNEL(M, HINT, NAME)                                                          \
    static void NAME(int64_t k, const float *a, int64_t lda, const float *b, float *c,       \
                     int64_t ldc, int nr, float beta) {                                       \
        __m512 even[M][2], odd[M][2];                                                        \
        for (int i = 0; i < M; i++)                                                          \
            even[i][0] = even[i][1] = odd[i][0] = odd[i][1] = _mm512_setzero_ps();           \
        int64_t p = 0;                                                                       \
        for (; p + 2 <= k; p += 2, b += 2 * NR) {                                            \
            for (int l = 0; l < 2 * NR; l += 16)                                             \
                _mm_prefetch((const char *)(b + B_AHEAD + l), HINT);                         \
            __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);                   \
            __m512 b2 = _mm512_loadu_ps(b + NR), b3 = _mm512_loadu_ps(b + NR + 16);         \
            for (int i = 0; i < M; i++) {                                                    \
                __m512 x = _mm512_set1_ps(a[i * lda + p]), y = _mm512_set1_ps(a[i * lda + p + 1]); \
                even[i][0] = _mm512_fmadd_ps(x, b0, even[i][0]);                             \
                even[i][1] = _mm512_fmadd_ps(x, b1, even[i][1]);                             \
                odd[i][0] = _mm512_fmadd_ps(y, b2, odd[i][0]);                               \
                odd[i][1] = _mm512_fmadd_ps(y, b3, odd[i][1]);                               \
            }                                                                                \
        }                                                                                    \
        if (p < k) {                                                                         \
            __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);                   \
            for (int i = 0; i < M; i++) {                                                    \
                __m512 x = _mm512_set1_ps(a[i * lda + p]);                                   \
                even[i][0] = _mm512_fmadd_ps(x, b0, even[i][0]);                             \
                even[i][1] = _mm512_fmadd_ps(x, b1, even[i][1]);                             \
            }                                                                                \
        }                                                                                    \
        __m512 one = _mm512_set1_ps(1.0f);                                                   \
        for (int i = 0; i < M; i++)                                                          \
            store_row(c + i * ldc, _mm512_add_ps(even[i][0], odd[i][0]),                     \
                      _mm512_add_ps(even[i][1], odd[i][1]), nr, one, beta);                  \
    }
ROWS_KERNEL(1, _MM_HINT_T0, rows_1)
ROWS_KERNEL(2, _MM_HINT_T0, rows_2)
ROWS_KERNEL(3, _MM_HINT_T0, rows_3)
ROWS_KERNEL(4, _MM_HINT_T0, rows_4)
ROWS_KERNEL(1, _MM_HINT_T2, rows_1_l2)
ROWS_KERNEL(2, _MM_HINT_T2, rows_2_l2)
ROWS_KERNEL(3, _MM_HINT_T2, rows_3_l2)
ROWS_KERNEL(4, _MM_HINT_T2, rows_4_l2)

typedef void (*rows_fn)(int64_t k, const float *a, int64_t lda, const float *b, float *c,
                        int64_t ldc, int nr, float beta);

static void rows(int64_t k, const float *a, int64_t lda, int m, const float *b, float *c,
                 int64_t ldc, int nr, float beta) {
    static const rows_fn to_l1[4] = {rows_1, rows_2, rows_3, rows_4},
                         to_l2[4] = {rows_1_l2, rows_2_l2, rows_3_l2, rows_4_l2};
    int i = m < 1 ? 0 : m > 4 ? 3 : m - 1;
    (tm__stream_prefetch_l2() ? to_l2 : to_l1)[i](k, a, lda, b, c, ldc, nr, beta);
}

static inline float finish(float sum, float alpha, float beta, const float *c) {
    return beta != 0.0f ? alpha * sum + beta * *c : alpha * sum;
}

/* One row of C, B not transposed: 64 columns at a time in registers, along rows of B;
 * the last partial block with masks. */
static void small_row_nn(const float *a, int64_t a_step, int64_t n0, int64_t n1, int64_t k,
                         float alpha, const float *b, int64_t ldb, float beta, float *c) {
    for (int64_t j = n0; j < n1; j += 64) {
        int left = (int)(n1 - j < 64 ? n1 - j : 64);
        __mmask16 m[4] = {lane_mask(left), lane_mask(left - 16), lane_mask(left - 32),
                          lane_mask(left - 48)};
        __m512 s[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                       _mm512_setzero_ps()};
        const float *bp = b + j;
        for (int64_t p = 0; p < k; p++, bp += ldb) {
            __m512 x = _mm512_set1_ps(a[p * a_step]);
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++)
                s[q] = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(m[q], bp + 16 * q), s[q]);
        }
        float out[64];
#pragma GCC unroll 4
        for (int q = 0; q < 4; q++) _mm512_storeu_ps(out + 16 * q, s[q]);
        for (int t = 0; t < left; t++) c[j + t] = finish(out[t], alpha, beta, c + j + t);
    }
}

/* One row of C, B transposed (stored (n, k)): a dot product along k per column. */
static void small_row_nt(const float *a, int64_t a_step, int64_t n0, int64_t n1, int64_t k,
                         float alpha, const float *b, int64_t ldb, float beta, float *c) {
    for (int64_t j = n0; j < n1; j++) {
        const float *bj = b + j * ldb;
        float s;
        if (a_step == 1) {
            __m512 s0 = _mm512_setzero_ps(), s1 = s0;
            int64_t p = 0;
            for (; p + 32 <= k; p += 32) {
                s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + p), _mm512_loadu_ps(bj + p), s0);
                s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + p + 16), _mm512_loadu_ps(bj + p + 16),
                                     s1);
            }
            for (; p < k; p += 16) {
                __mmask16 mk = lane_mask((int)(k - p < 16 ? k - p : 16));
                s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mk, a + p),
                                     _mm512_maskz_loadu_ps(mk, bj + p), s0);
            }
            s = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
        } else {
            s = 0.0f;
            for (int64_t p = 0; p < k; p++) s = __builtin_fmaf(a[p * a_step], bj[p], s);
        }
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

/* One panel of op(B) = B^T (B stored (n, k)): columns [j0, j0 + cols) of op(B) are rows
 * of B, steps [p0, p0 + kc) of each; NR floats a step, zero past cols. Blocks of 16 rows
 * by 16 steps are read along the rows and transposed in registers (a scalar loop writes
 * one float per store, strided). */
static void pack_bt(const float *b, int64_t ldb, int64_t p0, int64_t kc, int64_t j0,
                    int64_t cols, float *dst) {
    for (int64_t p = 0; p < kc; p += 16) {
        int steps = (int)(kc - p < 16 ? kc - p : 16);
        __mmask16 mk = lane_mask(steps);
        for (int jb = 0; jb < NR; jb += 16) {
            __m512 r[16];
#pragma GCC unroll 16
            for (int i = 0; i < 16; i++)
                r[i] = jb + i < cols ? _mm512_maskz_loadu_ps(mk, b + (j0 + jb + i) * ldb + p0 + p)
                                     : _mm512_setzero_ps();
            tm__transpose16(r);
            for (int q = 0; q < steps; q++) _mm512_storeu_ps(dst + (p + q) * NR + jb, r[q]);
        }
    }
}

/* v with each lane below FLT_MIN in magnitude (subnormal, or zero) a zero of its sign,
 * NaN kept: flush to zero and denormals as zero, lane by lane (gemm.h's mul). */
static inline __m512 flush_subnormal(__m512 v) {
    __mmask16 tiny = _mm512_cmp_ps_mask(_mm512_abs_ps(v), _mm512_set1_ps(FLT_MIN), _CMP_LT_OQ);
    __m512i bits = _mm512_castps_si512(v);   /* (AVX-512 F alone: no DQ float and) */
    return _mm512_castsi512_ps(
        _mm512_mask_and_epi32(bits, tiny, bits, _mm512_set1_epi32((int)0x80000000u)));
}

/* A tile into C stored transposed (or added to it, then times mul, subnormals flushed as
 * gemm.h's mul says, and plus res): 16 x 16 blocks transposed in registers, each column
 * of the tile one masked store of its rows along a row of C. */
static void store_t(const float *t, int rows, int cols, float *c, int64_t ldc, int add,
                    const float *mul, const float *res) {
    __mmask16 keep = lane_mask(rows);
    for (int jb = 0; jb < cols; jb += 16) {
        __m512 r[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) r[i] = _mm512_load_ps(t + i * NR + jb);
        tm__transpose16(r);
        int n = cols - jb < 16 ? cols - jb : 16;
        for (int q = 0; q < n; q++) {
            float *row = c + (jb + q) * ldc;
            __m512 v = add ? _mm512_add_ps(_mm512_maskz_loadu_ps(keep, row), r[q]) : r[q];
            if (mul)
                v = flush_subnormal(_mm512_mul_ps(
                    flush_subnormal(v),
                    flush_subnormal(_mm512_maskz_loadu_ps(keep, mul + (jb + q) * ldc))));
            if (res) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(keep, res + (jb + q) * ldc));
            _mm512_mask_storeu_ps(row, keep, v);
        }
    }
}

static const tm__sgemm_arch avx512 = {"avx512", MR, NR, 384, 96, 512, tile_12x32, small, rows,
                                     tile_indirect, tile_packed, tile_rows12, tile_cols, pack_bt,
                                     tile_rows12_next, tile_inplace, store_t, tile_rows12_bias};

const tm__sgemm_arch *tm__sgemm_arch_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") ? &avx512 : 0;
}

#else

const tm__sgemm_arch *tm__sgemm_arch_avx512(void) { return 0; }

#endif
