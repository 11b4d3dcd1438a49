/* AVX-512 kernels of MATMUL_NBITS' 4-bit fast path on the repacked weights (nbits.h:
 * groups of 16 columns, a column per 32-bit lane). The GEMV works in integers: each row
 * of activations is split, per block, into a scale and three int8 digits (split), so
 * that a = scale * (d0 * 65536 + d1 * 256 + d2) to within 2^-24 of the block's largest
 * |a|; vpdpbusd multiplies a lane's four nibbles by four digits broadcast to every lane,
 * one accumulator per digit; per block the three sums combine in f32, the zero point
 * comes off as z * (the block's sum of digits-integers), and the scales multiply in.
 * Every product and sum inside a block is exact, so the result is as accurate as f32
 * sums of the dequantized weights. The panel dequantizer writes (q - z) * scale for 16
 * columns a vector at a time into the f32 GEMM's packed-B layout. Compiled with
 * -mavx512f -mavx512bw -mavx512vnni (Makefile), used only when the CPU has them. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "nbits.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && \
    defined(__AVX512VNNI__)
#include <immintrin.h>

/* The largest integer of a split value: its top digit then stays within [-127, 127]. */
#define FULL (127 * 65536)

static inline __mmask16 lanes(int64_t count) {
    return count >= 16 ? (__mmask16)0xffff : count <= 0 ? 0 : (__mmask16)((1u << count) - 1);
}

/* The low byte of each 32-bit lane, sign-centred: ((v + 128) & 255) - 128. */
static inline __m512i low_digit(__m512i v) {
    const __m512i c = _mm512_set1_epi32(128), m = _mm512_set1_epi32(255);
    return _mm512_sub_epi32(_mm512_and_si512(_mm512_add_epi32(v, c), m), c);
}

/* The 16 int32 lanes of v summed in 64 bits. */
static inline int64_t sum_lanes64(__m512i v) {
    return _mm512_reduce_add_epi64(_mm512_cvtepi32_epi64(_mm512_castsi512_si256(v))) +
           _mm512_reduce_add_epi64(_mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(v, 1)));
}

static void split(const float *a, int64_t k, int64_t block, int64_t blocks, void *p,
                  tm__nbits_qrow *q) {
    if (block <= 0) return;
    int64_t k_pad = blocks * block;
    int8_t *d = p;
    float *sa = (float *)(d + tm__nbits_qrow_floats_at(k_pad)), *sum = sa + blocks, *down = sum + blocks;
    for (int i = 0; i < 3; i++) q->d[i] = d + i * k_pad;
    q->sa = sa;
    q->sum = sum;
    q->down = down;
    const __m512 inf = _mm512_set1_ps(INFINITY);
    for (int64_t b = 0; b < blocks; b++) {
        int64_t k0 = b * block;
        /* One horizontal reduction a block: the largest |a| (vector maxima first), and a
         * mask of the lanes that held an infinity or a NaN (max_ps would drop a NaN). */
        __m512 mx = _mm512_setzero_ps();
        __mmask16 bad = 0;
        for (int64_t i = 0; i < block; i += 16) {
            __m512 x = _mm512_abs_ps(_mm512_maskz_loadu_ps(lanes(k - k0 - i), a + k0 + i));
            mx = _mm512_max_ps(mx, x);
            bad |= _mm512_cmp_ps_mask(x, inf, _CMP_NLT_UQ);
        }
        float top = _mm512_reduce_max_ps(mx);
        if (bad || top == 0.0f) {
            memset(d + k0, 0, (size_t)block);
            memset(d + k_pad + k0, 0, (size_t)block);
            memset(d + 2 * k_pad + k0, 0, (size_t)block);
            sa[b] = bad ? NAN : 0.0f;
            sum[b] = down[b] = 0.0f;
            continue;
        }
        /* A block of tiny values scaled up by 2^64 first, so that FULL / top stays finite
         * and sa a normal float; the GEMV scales its sums back down. */
        int tiny = top < 0x1p-60f;
        float top_up = tiny ? top * 0x1p64f : top;
        sa[b] = top_up / (float)FULL;
        down[b] = tiny ? -64.0f : 0.0f;
        __m512 up = _mm512_set1_ps(tiny ? 0x1p64f : 1.0f);
        __m512 inv = _mm512_set1_ps((float)FULL / top_up);
        const __m512i hi = _mm512_set1_epi32(FULL), lo = _mm512_set1_epi32(-FULL);
        /* Per-lane sums, into s every 64 vectors (64 * FULL < 2^31). */
        __m512i sv = _mm512_setzero_si512();
        int64_t s = 0;
        for (int64_t i = 0; i < block; i += 16) {
            __m512 x = _mm512_maskz_loadu_ps(lanes(k - k0 - i), a + k0 + i);
            __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_mul_ps(x, up), inv));   /* nearest */
            v = _mm512_max_epi32(_mm512_min_epi32(v, hi), lo);
            sv = _mm512_add_epi32(sv, v);
            if ((i / 16) % 64 == 63 || i + 16 >= block) {
                s += sum_lanes64(sv);
                sv = _mm512_setzero_si512();
            }
            __m512i d2 = low_digit(v), r = _mm512_srai_epi32(_mm512_sub_epi32(v, d2), 8);
            __m512i d1 = low_digit(r), d0 = _mm512_srai_epi32(_mm512_sub_epi32(r, d1), 8);
            _mm_storeu_si128((__m128i *)(d + k0 + i), _mm512_cvtepi32_epi8(d0));
            _mm_storeu_si128((__m128i *)(d + k_pad + k0 + i), _mm512_cvtepi32_epi8(d1));
            _mm_storeu_si128((__m128i *)(d + 2 * k_pad + k0 + i), _mm512_cvtepi32_epi8(d2));
        }
        sum[b] = (float)s;
    }
}

/* The weights stream from memory: each record is fetched this many records ahead, into
 * L2 (0.6B q4 decode step, one thread: on a Xeon with AMX, L2 against L1 at 16 records,
 * 37 -> 29 ms; on an AMD EPYC (Zen 4, 30 GB/s from one core), 16 records ahead into L1
 * streamed 12.9 GB/s, into L2 15.9, and 48 to 192 records ahead into L2 about 21, where
 * the kernel on weights already in L2 runs at 35). TM_PREFETCH=l1 and
 * TM_NBITS_PREFETCH_RECORDS=N override the two, for such comparisons (N is one thread's
 * distance: records_ahead shares it out when several threads stream). */
static pthread_once_t prefetch_once = PTHREAD_ONCE_INIT;
static int prefetch_l2;
static int64_t prefetch_records;   /* both written once, under prefetch_once */

static void pick_prefetch(void) {
    __builtin_cpu_init();   /* also for tm__nbits_arch_avx512's checks below */
    const char *level = getenv("TM_PREFETCH"), *records = getenv("TM_NBITS_PREFETCH_RECORDS");
    prefetch_l2 = level ? !strcmp(level, "l2") : 1;
    prefetch_records = records && atoi(records) > 0 ? atoi(records)
                       : __builtin_cpu_is("intel") ? 16 : 64;
}

/* always_inline: a function holding only a prefetch has no visible effect, and GCC
 * drops the calls of one it does not inline. */
static inline __attribute__((always_inline)) void prefetch_record(const uint8_t *p, int to_l2) {
    if (to_l2) _mm_prefetch((const char *)p, _MM_HINT_T2);
    else _mm_prefetch((const char *)p, _MM_HINT_T0);
}

/* acc + the VNNI dot products of u and s, in place. GCC 12 gives vpdpbusd's accumulator
 * an output register of its own, and in these loops copies every accumulator there and
 * back (two vector moves a product: the 0.6B q4 decode's GEMV ran at half its rate);
 * the asm ties it to its input. */
static inline __m512i dpbusd(__m512i acc, __m512i u, __m512i s) {
    __asm__("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(u), "v"(s));
    return acc;
}

/* The lines of the record at p: ceil(record / 64) of them from p. Where the record
 * straddles one line more, that line is its stream's next record's first, fetched with
 * it. `lines` is a compile-time constant in the kernels of the usual block sizes (32
 * and 64: record_lines of a constant) and the loop is unrolled (GCC at -O2 leaves even a
 * constant 6-trip loop rolled without the pragma): the loop cost the GEMV a tenth of its
 * speed from memory. The 0.6B q4 decode step, medians of 6 alternating processes: one
 * thread 15.8 -> 13.7 ms, two 9.0 -> 8.0; its layers' GEMVs alone, alternating in one
 * process, 0.89-0.91 of the time. Unrolled, 6 lines or 7 measured alike; one prefetch
 * per line exactly (a cursor over the stream, a loop of 5 or 6) lost to both. */
static inline __attribute__((always_inline)) void prefetch_lines(const uint8_t *p, int64_t lines,
                                                                 int to_l2) {
#pragma GCC unroll 16
    for (int64_t l = 0; l < lines; l++) prefetch_record(p + 64 * l, to_l2);
}

/* Lines a record of this block size spans: its nibbles (block / 8 lines), then its scales
 * and zero points (80 or 128 bytes: two). */
static inline int64_t record_lines(int64_t block) { return block / 8 + 2; }

/* The record `ahead` records on from rec in memory: the one a kernel reading one record
 * stream will read that many steps on. */
static inline __attribute__((always_inline)) void prefetch_ahead(const tm__nbits_packed *h,
                                                                 const uint8_t *rec, int64_t ahead,
                                                                 int64_t lines, int to_l2) {
    prefetch_lines(rec + ahead * h->record, lines, to_l2);
}

/* The pair kernel reads groups g and g + 1 block by block side by side, then g + 2 and
 * g + 3: at block blk of a pair it fetches the two records it will read ahead / 2 steps
 * on (as many bytes ahead as one stream's fetch). Memory order would send group g's
 * prefetches into g + 1, read already, and leave the next pair's second group unfetched
 * until its first reads: with 96 blocks a group (k = 3072: the 0.6B decoder's down
 * projection), 1024 x 3072 ran at 21 GB/s from memory where 3072 x 1024 ran at 36. The
 * cursor: the first group's record to fetch next (the second's is a group on), stepping
 * to the next pair after a group's last block. */
typedef struct pair_cursor {
    const uint8_t *at;
    int64_t blk;
} pair_cursor;

static inline pair_cursor pair_cursor_at(const tm__nbits_packed *h, const uint8_t *group_a,
                                         int64_t ahead) {
    int64_t t = ahead / 2, q = t / h->blocks, r = t - q * h->blocks;
    return (pair_cursor){group_a + (2 * q * h->blocks + r) * h->record, r};
}

static inline __attribute__((always_inline)) void prefetch_pair(const tm__nbits_packed *h,
                                                                pair_cursor *c, int64_t lines,
                                                                int to_l2) {
    int64_t stride = h->blocks * h->record;
    prefetch_lines(c->at, lines, to_l2);
    prefetch_lines(c->at + stride, lines, to_l2);
    c->at += h->record;
    if (++c->blk == h->blocks) c->blk = 0, c->at += stride;
}

static inline __m512i bcast4(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, sizeof v);
    return _mm512_set1_epi32(v);
}

/* The zero points of a record as f32, one per lane. */
static inline __m512 zero_points(const tm__nbits_packed *h, const uint8_t *rec) {
    const uint8_t *zps = rec + tm__nbits_zps_at(h->block);
    if (h->zp_float) return _mm512_loadu_ps(zps);
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)zps)));
}

/* A block's three digit sums (per lane, exact) into f32, less the zero point times the
 * block's sum of integers, scaled back where the row's block was tiny, times the scales,
 * added to out. */
static inline __m512 finish_block(__m512i s0, __m512i s1, __m512i s2, __m512 z, __m512 s,
                                  const tm__nbits_qrow *q, int64_t blk, __m512 out) {
    __m512 t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1), _mm512_set1_ps(256.0f), _mm512_cvtepi32_ps(s2));
    t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0), _mm512_set1_ps(65536.0f), t);
    t = _mm512_fnmadd_ps(z, _mm512_set1_ps(q->sum[blk]), t);
    if (q->down[blk] != 0.0f) t = _mm512_scalef_ps(t, _mm512_set1_ps(q->down[blk]));
    return _mm512_fmadd_ps(t, _mm512_mul_ps(s, _mm512_set1_ps(q->sa[blk])), out);
}

/* One group of 16 columns for 2 to 4 rows (a compile-time constant in each caller), one
 * accumulator per row and digit (one row: gemv_group1, or gemv_pair1 for two groups);
 * lines: record_lines of the block, a constant for the usual sizes (gemv_rows). */
static inline __attribute__((always_inline)) void gemv_group(const tm__nbits_packed *h,
                                                             const uint8_t *rec,
                                                             const tm__nbits_qrow *q, int rows,
                                                             float *y, int64_t ldy, int cols,
                                                             int64_t ahead, int to_l2,
                                                             int64_t lines) {
    const __m512i nib = _mm512_set1_epi8(0x0f);
    const int64_t octets = h->block / 8;
    __m512 out[4];
#pragma GCC unroll 4
    for (int r = 0; r < rows; r++) out[r] = _mm512_setzero_ps();
    for (int64_t blk = 0; blk < h->blocks; blk++, rec += h->record) {
        prefetch_ahead(h, rec, ahead, lines, to_l2);
        __m512i acc[4][3];
#pragma GCC unroll 4
        for (int r = 0; r < rows; r++)
#pragma GCC unroll 3
            for (int p = 0; p < 3; p++) acc[r][p] = _mm512_setzero_si512();
        int64_t k0 = blk * h->block;
        for (int64_t o = 0; o < octets; o++) {
            __m512i v = _mm512_loadu_si512(rec + 64 * o);
            __m512i lo = _mm512_and_si512(v, nib), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
#pragma GCC unroll 4
            for (int r = 0; r < rows; r++)
#pragma GCC unroll 3
                for (int p = 0; p < 3; p++) {
                    const int8_t *d = q[r].d[p] + k0 + 8 * o;
                    acc[r][p] = dpbusd(acc[r][p], lo, bcast4(d));
                    acc[r][p] = dpbusd(acc[r][p], hi, bcast4(d + 4));
                }
        }
        __m512 z = zero_points(h, rec);
        __m512 s = _mm512_loadu_ps(rec + tm__nbits_scales_at(h->block));
#pragma GCC unroll 4
        for (int r = 0; r < rows; r++)
            out[r] = finish_block(acc[r][0], acc[r][1], acc[r][2], z, s, &q[r], blk, out[r]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < rows; r++) _mm512_mask_storeu_ps(y + r * ldy, lanes(cols), out[r]);
}

/* Two octets of a record (two vectors from p): each lane's low and high nibbles. */
static inline __attribute__((always_inline)) void octet_pair(const uint8_t *p, __m512i *lo,
                                                             __m512i *hi, __m512i *lo2,
                                                             __m512i *hi2) {
    const __m512i nib = _mm512_set1_epi8(0x0f);
    __m512i v = _mm512_loadu_si512(p), w = _mm512_loadu_si512(p + 64);
    *lo = _mm512_and_si512(v, nib);
    *hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
    *lo2 = _mm512_and_si512(w, nib);
    *hi2 = _mm512_and_si512(_mm512_srli_epi16(w, 4), nib);
}

/* One row and one group, with its six chains of vpdpbusd (a digit each for the low and
 * the high nibbles) in named registers, two octets per step (every block has an even
 * number of them). */
static inline __attribute__((always_inline)) void gemv_group1(const tm__nbits_packed *h,
                                                              const uint8_t *rec,
                                                              const tm__nbits_qrow *q,
                                                              float *y, int cols, int64_t ahead,
                                                              int to_l2, int64_t block) {
    const int64_t octets = block / 8;
    const int8_t *d0 = q->d[0], *d1 = q->d[1], *d2 = q->d[2];
    __m512 out = _mm512_setzero_ps();
    for (int64_t blk = 0; blk < h->blocks; blk++, rec += h->record) {
        prefetch_ahead(h, rec, ahead, record_lines(block), to_l2);
        __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, b0 = a0, b1 = a0, b2 = a0;
        int64_t k = blk * h->block;
#pragma GCC unroll 8
        for (int64_t o = 0; o < octets; o += 2, k += 16) {
            __m512i lo, hi, lo2, hi2;
            octet_pair(rec + 64 * o, &lo, &hi, &lo2, &hi2);
            a0 = dpbusd(a0, lo, bcast4(d0 + k));
            b0 = dpbusd(b0, hi, bcast4(d0 + k + 4));
            a1 = dpbusd(a1, lo, bcast4(d1 + k));
            b1 = dpbusd(b1, hi, bcast4(d1 + k + 4));
            a2 = dpbusd(a2, lo, bcast4(d2 + k));
            b2 = dpbusd(b2, hi, bcast4(d2 + k + 4));
            a0 = dpbusd(a0, lo2, bcast4(d0 + k + 8));
            b0 = dpbusd(b0, hi2, bcast4(d0 + k + 12));
            a1 = dpbusd(a1, lo2, bcast4(d1 + k + 8));
            b1 = dpbusd(b1, hi2, bcast4(d1 + k + 12));
            a2 = dpbusd(a2, lo2, bcast4(d2 + k + 8));
            b2 = dpbusd(b2, hi2, bcast4(d2 + k + 12));
        }
        __m512 z = zero_points(h, rec), s = _mm512_loadu_ps(rec + tm__nbits_scales_at(h->block));
        __m512i s0 = _mm512_add_epi32(a0, b0), s1 = _mm512_add_epi32(a1, b1), s2 = _mm512_add_epi32(a2, b2);
        out = finish_block(s0, s1, s2, z, s, q, blk, out);
    }
    _mm512_mask_storeu_ps(y, lanes(cols), out);
}

/* Two neighbouring groups of one row side by side: every broadcast digit serves both, and
 * the two record streams (one group's records after the other's) keep more lines in
 * flight. Weights in L2, one thread: 24-25.7 -> 27.7 GB/s; streamed from memory it is
 * bound by the memory (about 90% of a plain read of the same buffer) either way. */
static inline __attribute__((always_inline)) void gemv_pair1(const tm__nbits_packed *h,
                                                             const uint8_t *ra,
                                                             const tm__nbits_qrow *q, float *y,
                                                             int cols_b, int64_t ahead,
                                                             int to_l2, int64_t block) {
    const int64_t octets = block / 8, stride = h->blocks * h->record;
    const int8_t *d0 = q->d[0], *d1 = q->d[1], *d2 = q->d[2];
    const uint8_t *rb = ra + stride;
    pair_cursor cur = pair_cursor_at(h, ra, ahead);
    /* One float chain per group, as gemv_group1 sums it: a group gives the same bits
     * whichever of the two kernels runs it (which one does depends on where a thread's
     * claimed groups end). */
    __m512 out_a = _mm512_setzero_ps(), out_b = out_a;
    for (int64_t blk = 0; blk < h->blocks; blk++, ra += h->record, rb += h->record) {
        prefetch_pair(h, &cur, record_lines(block), to_l2);
        __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, b0 = a0, b1 = a0, b2 = a0;
        __m512i e0 = a0, e1 = a0, e2 = a0, f0 = a0, f1 = a0, f2 = a0;
        int64_t k = blk * h->block;
#pragma GCC unroll 8
        for (int64_t o = 0; o < octets; o += 2, k += 16) {
            __m512i lo, hi, lo2, hi2, lob, hib, lo2b, hi2b, x;
            octet_pair(ra + 64 * o, &lo, &hi, &lo2, &hi2);
            octet_pair(rb + 64 * o, &lob, &hib, &lo2b, &hi2b);
            x = bcast4(d0 + k);      a0 = dpbusd(a0, lo, x);  e0 = dpbusd(e0, lob, x);
            x = bcast4(d0 + k + 4);  b0 = dpbusd(b0, hi, x);  f0 = dpbusd(f0, hib, x);
            x = bcast4(d1 + k);      a1 = dpbusd(a1, lo, x);  e1 = dpbusd(e1, lob, x);
            x = bcast4(d1 + k + 4);  b1 = dpbusd(b1, hi, x);  f1 = dpbusd(f1, hib, x);
            x = bcast4(d2 + k);      a2 = dpbusd(a2, lo, x);  e2 = dpbusd(e2, lob, x);
            x = bcast4(d2 + k + 4);  b2 = dpbusd(b2, hi, x);  f2 = dpbusd(f2, hib, x);
            x = bcast4(d0 + k + 8);  a0 = dpbusd(a0, lo2, x); e0 = dpbusd(e0, lo2b, x);
            x = bcast4(d0 + k + 12); b0 = dpbusd(b0, hi2, x); f0 = dpbusd(f0, hi2b, x);
            x = bcast4(d1 + k + 8);  a1 = dpbusd(a1, lo2, x); e1 = dpbusd(e1, lo2b, x);
            x = bcast4(d1 + k + 12); b1 = dpbusd(b1, hi2, x); f1 = dpbusd(f1, hi2b, x);
            x = bcast4(d2 + k + 8);  a2 = dpbusd(a2, lo2, x); e2 = dpbusd(e2, lo2b, x);
            x = bcast4(d2 + k + 12); b2 = dpbusd(b2, hi2, x); f2 = dpbusd(f2, hi2b, x);
        }
        __m512 za = zero_points(h, ra), sa = _mm512_loadu_ps(ra + tm__nbits_scales_at(h->block));
        __m512 zb = zero_points(h, rb), sb = _mm512_loadu_ps(rb + tm__nbits_scales_at(h->block));
        __m512i s0 = _mm512_add_epi32(a0, b0), s1 = _mm512_add_epi32(a1, b1), s2 = _mm512_add_epi32(a2, b2);
        __m512i t0 = _mm512_add_epi32(e0, f0), t1 = _mm512_add_epi32(e1, f1), t2 = _mm512_add_epi32(e2, f2);
        out_a = finish_block(s0, s1, s2, za, sa, q, blk, out_a);
        out_b = finish_block(t0, t1, t2, zb, sb, q, blk, out_b);
    }
    _mm512_storeu_ps(y, out_a);
    _mm512_mask_storeu_ps(y + TM_NBITS_GROUP, lanes(cols_b), out_b);
}

/* gemv_group with its prefetch unrolled for the usual block sizes. */
static inline __attribute__((always_inline)) void gemv_rows(const tm__nbits_packed *h,
                                                            const uint8_t *rec,
                                                            const tm__nbits_qrow *q, int rows,
                                                            float *y, int64_t ldy, int cols,
                                                            int64_t ahead, int to_l2) {
    if (h->block == 32) gemv_group(h, rec, q, rows, y, ldy, cols, ahead, to_l2, record_lines(32));
    else if (h->block == 64) gemv_group(h, rec, q, rows, y, ldy, cols, ahead, to_l2, record_lines(64));
    else gemv_group(h, rec, q, rows, y, ldy, cols, ahead, to_l2, record_lines(h->block));
}

/* Columns of group g: 16, fewer in the last. */
static inline int group_cols(const tm__nbits_packed *h, int64_t g) {
    int64_t left = h->n - g * TM_NBITS_GROUP;
    return (int)(left < TM_NBITS_GROUP ? left : TM_NBITS_GROUP);
}

/* to_l2: a constant in each of gemv's two calls, so that each has its one prefetch. */
static inline __attribute__((always_inline)) void gemv_groups(const tm__nbits_packed *h,
                                                              const uint8_t *data,
                                                              const tm__nbits_qrow *q, int rows,
                                                              int64_t g0, int64_t g1, float *y,
                                                              int64_t ldy, int64_t ahead,
                                                              int to_l2) {
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *rec = data + g * h->blocks * h->record;
        int64_t n = g * TM_NBITS_GROUP;
        int cols = group_cols(h, g);
        if (rows == 1 && g + 1 < g1 && (h->block == 32 || h->block == 64)) {
            int cols_b = group_cols(h, g + 1);
            if (h->block == 32) gemv_pair1(h, rec, q, y + n, cols_b, ahead, to_l2, 32);
            else gemv_pair1(h, rec, q, y + n, cols_b, ahead, to_l2, 64);
            g++;
            continue;
        }
        switch (rows) {
        case 1:   /* the usual block sizes with the octet loop unrolled */
            if (h->block == 32) gemv_group1(h, rec, q, y + n, cols, ahead, to_l2, 32);
            else if (h->block == 64) gemv_group1(h, rec, q, y + n, cols, ahead, to_l2, 64);
            else gemv_group1(h, rec, q, y + n, cols, ahead, to_l2, h->block);
            break;
        case 2: gemv_rows(h, rec, q, 2, y + n, ldy, cols, ahead, to_l2); break;
        case 3: gemv_rows(h, rec, q, 3, y + n, ldy, cols, ahead, to_l2); break;
        default: gemv_rows(h, rec, q, 4, y + n, ldy, cols, ahead, to_l2); break;
        }
    }
}

/* Threads streaming weights at once each fetch this share of prefetch_records ahead:
 * the memory's queue is shared, and on a Zen 5 EPYC two threads each 64 records ahead
 * kept too much in flight (0.6B q4 decode step on two threads, medians over alternating
 * runs: 64 records 10.6-13.4 ms, 32 10.3-12.3, 16 8.9-11.8, 8 10.0-11.0; on one thread
 * 16 to 64 measured alike). At least 8. */
static int64_t records_ahead(int threads) {
    int64_t r = prefetch_records / (threads > 1 ? 2 * threads : 1);
    return r < 8 ? 8 : r;
}

static void gemv(const tm__nbits_packed *h, const uint8_t *data, const tm__nbits_qrow *q,
                 int rows, int64_t g0, int64_t g1, float *y, int64_t ldy, int threads) {
    int64_t ahead = records_ahead(threads);
    if (prefetch_l2) gemv_groups(h, data, q, rows, g0, g1, y, ldy, ahead, 1);
    else gemv_groups(h, data, q, rows, g0, g1, y, ldy, ahead, 0);
}

/* Groups [g0, g0 + groups) over k in [k0, k0 + kc) into a packed-B panel of P columns:
 * per octet of k, the low and high nibbles of 16 columns, then each of the four bytes of
 * a lane shifted down in turn, converted, less the zero points, times the scales. */
static void panel(const tm__nbits_packed *h, const uint8_t *data, int64_t g0, int groups,
                  int64_t k0, int64_t kc, int P, float *dst) {
    const __m512i nib = _mm512_set1_epi8(0x0f), byte = _mm512_set1_epi32(0xff);
    for (int gi = groups; gi < P / TM_NBITS_GROUP; gi++)
        for (int64_t p = 0; p < kc; p++)
            _mm512_storeu_ps(dst + p * P + gi * TM_NBITS_GROUP, _mm512_setzero_ps());
    for (int gi = 0; gi < groups; gi++) {
        const uint8_t *group = data + (g0 + gi) * h->blocks * h->record;
        for (int64_t k = k0; k < k0 + kc; k += 8) {
            int64_t blk = k / h->block, o = (k % h->block) / 8;
            const uint8_t *rec = group + blk * h->record;
            __m512 z = zero_points(h, rec);
            __m512 s = _mm512_loadu_ps(rec + tm__nbits_scales_at(h->block));
            __m512i v = _mm512_loadu_si512(rec + 64 * o);
            __m512i lo = _mm512_and_si512(v, nib), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
            float *d = dst + (k - k0) * P + gi * TM_NBITS_GROUP;
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++) {
                __m512i ql = _mm512_and_si512(_mm512_srli_epi32(lo, 8 * j), byte);
                __m512i qh = _mm512_and_si512(_mm512_srli_epi32(hi, 8 * j), byte);
                __m512 wl = _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(ql), z), s);
                __m512 wh = _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(qh), z), s);
                _mm512_storeu_ps(d + j * P, wl);
                _mm512_storeu_ps(d + (4 + j) * P, wh);
            }
        }
    }
}

/* ---- Int8 activations (tm_nbits_matmul_int8) -----------------------------------------
 * One vpdpbusd per octet half and row: a lane's four nibbles times four of the row's
 * int8 values broadcast; up to 8 rows per pass, so that each octet's nibbles, split once,
 * serve 16 products, and one accumulator a row (8 chains overlap); per block exact, then
 * finished as gemv8_portable (nbits.c) does. */

static inline __attribute__((always_inline)) void gemv8_group(const tm__nbits_packed *h,
                                                              const uint8_t *rec,
                                                              const tm__nbits_q8 *q, int rows,
                                                              float *y, int64_t ldy, int cols) {
    const __m512i nib = _mm512_set1_epi8(0x0f);
    const int64_t octets = h->block / 8;
    __m512 out[8];
#pragma GCC unroll 8
    for (int r = 0; r < rows; r++) out[r] = _mm512_setzero_ps();
    for (int64_t blk = 0; blk < h->blocks; blk++, rec += h->record) {
        __m512i acc[8];
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++) acc[r] = _mm512_setzero_si512();
        int64_t k0 = blk * h->block;
        for (int64_t o = 0; o < octets; o++) {
            __m512i v = _mm512_loadu_si512(rec + 64 * o);
            __m512i lo = _mm512_and_si512(v, nib), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
#pragma GCC unroll 8
            for (int r = 0; r < rows; r++) {
                const int8_t *d = q[r].q + k0 + 8 * o;
                acc[r] = dpbusd(dpbusd(acc[r], lo, bcast4(d)), hi, bcast4(d + 4));
            }
        }
        __m512 z = zero_points(h, rec), s = _mm512_loadu_ps(rec + tm__nbits_scales_at(h->block));
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++) {
            __m512 t = _mm512_cvtepi32_ps(acc[r]);
            t = _mm512_fnmadd_ps(z, _mm512_set1_ps(q[r].sum[blk]), t);
            out[r] = _mm512_fmadd_ps(t, _mm512_mul_ps(s, _mm512_set1_ps(q[r].sa[blk])), out[r]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < rows; r++) _mm512_mask_storeu_ps(y + r * ldy, lanes(cols), out[r]);
}

/* Two neighbouring groups for 8 rows: each broadcast serves two products. The 16 running
 * sums live on the stack (32 registers hold the accumulators, not them too); each
 * (row, column) is summed in the same order as gemv8_group, so the bits are the same. */
static void gemv8_pair8(const tm__nbits_packed *h, const uint8_t *ra, const tm__nbits_q8 *q,
                        float *y, int64_t ldy, int cols_b) {
    const __m512i nib = _mm512_set1_epi8(0x0f);
    const int64_t octets = h->block / 8;
    const uint8_t *rb = ra + h->blocks * h->record;
    __m512 out[2][8];
    for (int r = 0; r < 8; r++) out[0][r] = out[1][r] = _mm512_setzero_ps();
    for (int64_t blk = 0; blk < h->blocks; blk++, ra += h->record, rb += h->record) {
        __m512i acc[8], bcc[8];
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) acc[r] = bcc[r] = _mm512_setzero_si512();
        int64_t k0 = blk * h->block;
        for (int64_t o = 0; o < octets; o++) {
            __m512i v = _mm512_loadu_si512(ra + 64 * o), w = _mm512_loadu_si512(rb + 64 * o);
            __m512i lo = _mm512_and_si512(v, nib), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
            __m512i lob = _mm512_and_si512(w, nib), hib = _mm512_and_si512(_mm512_srli_epi16(w, 4), nib);
#pragma GCC unroll 8
            for (int r = 0; r < 8; r++) {
                const int8_t *d = q[r].q + k0 + 8 * o;
                __m512i x = bcast4(d), x4 = bcast4(d + 4);
                acc[r] = dpbusd(dpbusd(acc[r], lo, x), hi, x4);
                bcc[r] = dpbusd(dpbusd(bcc[r], lob, x), hib, x4);
            }
        }
        __m512 za = zero_points(h, ra), sa = _mm512_loadu_ps(ra + tm__nbits_scales_at(h->block));
        __m512 zb = zero_points(h, rb), sb = _mm512_loadu_ps(rb + tm__nbits_scales_at(h->block));
#pragma GCC unroll 8
        for (int r = 0; r < 8; r++) {
            __m512 sum = _mm512_set1_ps(q[r].sum[blk]), rs = _mm512_set1_ps(q[r].sa[blk]);
            __m512 t = _mm512_fnmadd_ps(za, sum, _mm512_cvtepi32_ps(acc[r]));
            out[0][r] = _mm512_fmadd_ps(t, _mm512_mul_ps(sa, rs), out[0][r]);
            __m512 u = _mm512_fnmadd_ps(zb, sum, _mm512_cvtepi32_ps(bcc[r]));
            out[1][r] = _mm512_fmadd_ps(u, _mm512_mul_ps(sb, rs), out[1][r]);
        }
    }
    for (int r = 0; r < 8; r++) {
        _mm512_storeu_ps(y + r * ldy, out[0][r]);
        _mm512_mask_storeu_ps(y + r * ldy + TM_NBITS_GROUP, lanes(cols_b), out[1][r]);
    }
}

static void gemv8(const tm__nbits_packed *h, const uint8_t *data, const tm__nbits_q8 *q, int rows,
                  int64_t g0, int64_t g1, float *y, int64_t ldy) {
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *rec = data + g * h->blocks * h->record;
        float *yg = y + g * TM_NBITS_GROUP;
        int cols = group_cols(h, g);
        if (rows == 8 && g + 1 < g1) {
            gemv8_pair8(h, rec, q, yg, ldy, group_cols(h, g + 1));
            g++;
            continue;
        }
        switch (rows) {
        case 1: gemv8_group(h, rec, q, 1, yg, ldy, cols); break;
        case 2: gemv8_group(h, rec, q, 2, yg, ldy, cols); break;
        case 3: gemv8_group(h, rec, q, 3, yg, ldy, cols); break;
        case 4: gemv8_group(h, rec, q, 4, yg, ldy, cols); break;
        case 5: gemv8_group(h, rec, q, 5, yg, ldy, cols); break;
        case 6: gemv8_group(h, rec, q, 6, yg, ldy, cols); break;
        case 7: gemv8_group(h, rec, q, 7, yg, ldy, cols); break;
        default: gemv8_group(h, rec, q, 8, yg, ldy, cols); break;
        }
    }
}

static const tm__nbits_arch avx512 = {"avx512-vnni", split, gemv, panel};

/* Every call of tm_nbits_matmul comes here before its threads start, so the prefetch
 * choice is made once, off the GEMV's path. */
const tm__nbits_arch *tm__nbits_arch_avx512(void) {
    pthread_once(&prefetch_once, pick_prefetch);
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vnni")
               ? &avx512
               : 0;
}

tm__nbits_gemv8_fn tm__nbits_gemv8_avx512(void) { return tm__nbits_arch_avx512() ? gemv8 : 0; }

#else

const tm__nbits_arch *tm__nbits_arch_avx512(void) { return 0; }
tm__nbits_gemv8_fn tm__nbits_gemv8_avx512(void) { return 0; }

#endif
