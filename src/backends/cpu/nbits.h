/* 4-bit block-quantized matrix multiply for MATMUL_NBITS (f32 activations, results as
 * accurate as f32 sums: MatMulNBits' accuracy_level 0; or, tm_nbits_matmul_int8, the
 * activations quantized to int8 per block: accuracy_level 4). The weights are repacked once
 * (plan time, tm_nbits_pack) into one sequential stream, still 4-bit: per group of 16
 * columns and per block, their nibbles interleaved column by column, then their scales
 * and zero points. A few rows: a GEMV in integers (AVX-512 VNNI) on each row split
 * exactly into three int8 digits per block, columns split over the pool; many rows:
 * panels of columns dequantized into the packed-B layout of the f32 GEMM (gemm.h).
 * Other bit widths, g_idx and half precision stay with the reference kernel
 * (core/prims/quant.c). */
#ifndef TM_BACKENDS_CPU_NBITS_H
#define TM_BACKENDS_CPU_NBITS_H

#include <stddef.h>
#include <stdint.h>
#include "gemm.h"
#include "pool.h"

/* The weights as MatMulNBits stores them. */
typedef struct tm_nbits_weights {
    int64_t n, k, block;        /* block: a power of two >= 16 */
    const uint8_t *b;           /* (n, ceil(k / block), block / 2) nibbles, low first */
    const float *scales;        /* (n, ceil(k / block)) */
    const uint8_t *zp_packed;   /* (n, ceil(blocks / 2)) nibbles, or NULL */
    const float *zp_float;      /* (n, blocks), or NULL; both NULL: 8 */
} tm_nbits_weights;

/* 1 when these weights have a fast path (4-bit, block a power of two >= 16) on this CPU
 * now (not when TM_REFERENCE_KERNELS=1 or TM_KERNEL_ISA=scalar asks for the reference). */
int tm_nbits_fast(int64_t block);

/* Bytes of the repacked weights, and the repacking (dst: that many bytes, any alignment). */
size_t tm_nbits_packed_size(int64_t n, int64_t k, int64_t block, int zp_float);
void tm_nbits_pack(const tm_nbits_weights *w, void *dst);
/* 1 when p (of `bytes` bytes) holds repacked weights of these dimensions. */
int tm_nbits_packed_check(const void *p, size_t bytes, int64_t n, int64_t k, int64_t block);

/* Bytes of scratch tm_nbits_matmul needs (rows split into digits, or panels); independent of the
 * thread count. */
size_t tm_nbits_scratch(int64_t m, int64_t k, int64_t block);

/* y (m, n) = a (m, k) . W^T with W the repacked weights, then the epilogue ep (bias per
 * column, an activation, a residual of row stride n; NULL: none) on each block of y as it
 * is finished. Allocates nothing; the result does not depend on the thread count. Under
 * TM_REFERENCE_KERNELS=1 (or TM_KERNEL_ISA=scalar) the portable C GEMV runs for every
 * row. */
void tm_nbits_matmul(const void *packed, int64_t m, const float *a, float *y, void *scratch,
                     const tm_sgemm_epilogue *ep, tm_pool *pool);

/* The same product with the activations quantized to int8 (MatMulNBits' accuracy_level
 * 4, as ONNX Runtime's CompInt8): each row, per block of k, gets a scale sa = max|a| / 127
 * and integers q = round-to-nearest-even(a * 127 / max|a|) in [-127, 127]; per block the
 * integer dot product of q and the weights' nibbles is exact, less the zero point times
 * the sum of q, times sa and the weights' scale, summed over blocks in f32. Every row
 * count takes this path (AVX-512 VNNI, AVX2, or portable C: all give the same sums up to
 * the order of f32 additions). Scratch: tm_nbits_scratch's. */
void tm_nbits_matmul_int8(const void *packed, int64_t m, const float *a, float *y, void *scratch,
                          const tm_sgemm_epilogue *ep, tm_pool *pool);

/* Which kernels tm_nbits_matmul_int8 would use now: "avx512-vnni", "avx2" or "portable". */
const char *tm_nbits_int8_kernel_name(void);

/* The weights dequantized from their stored layout, w (k, n) row-major = (q - zero point)
 * * scale, split over the pool by columns: the per-run way (DEQUANTIZE_NBITS). */
void tm_nbits_dequantize(const tm_nbits_weights *wt, float *w, tm_pool *pool);

/* Which kernels tm_nbits_matmul would use now: "avx512", "portable" or "reference". */
const char *tm_nbits_kernel_name(void);

/* ---- Between nbits.c and nbits_avx512.c ---------------------------------------------- */

/* Columns per group of the repacked layout: one 32-bit lane of a 512-bit vector each. */
#define TM_NBITS_GROUP 16

typedef struct tm__nbits_packed {
    uint32_t magic, version;
    int64_t n, k, block, blocks, groups;
    int64_t record;       /* bytes per (group, block): nibbles, scales, zero points */
    int64_t data_offset;
    int32_t zp_float;     /* zero points are f32 (else one byte each) */
    int32_t pad;
} tm__nbits_packed;

/* A record (group, block) holds block / 8 vectors of 64 bytes, one per octet of k: in
 * octet o, bytes 4c..4c+3 are column c's k = 8o + j (low nibble of byte 4c + j) and
 * k = 8o + 4 + j (its high nibble), j = 0..3, so that one vpdpbusd lane multiplies a
 * column's four weights by four activations broadcast to every lane. Then the 16 columns'
 * f32 scales, then their 16 zero points (bytes, or f32). */
static inline int64_t tm__nbits_scales_at(int64_t block) { return 8 * block; }
static inline int64_t tm__nbits_zps_at(int64_t block) {
    return tm__nbits_scales_at(block) + TM_NBITS_GROUP * 4;
}

/* One row of activations split for the integer GEMV: per block b, a scale sa[b] and
 * integers v = d0 * 65536 + d1 * 256 + d2 (three int8 digits, |v| <= 127 * 65536) with
 * a ~ sa[b] * v (an error below 2^-24 of the block's largest |a|), and sum[b], the sum of
 * the block's v. Digit arrays are k_pad bytes each (zeros past k). */
typedef struct tm__nbits_qrow {
    const int8_t *d[3];
    const float *sa, *sum;
    const float *down;   /* per block 0, or -64 where sa would be subnormal: then sa holds
                          * it times 2^64 and the block's sums are scaled back by 2^down */
} tm__nbits_qrow;

/* Bytes of one split row (any alignment of the buffer: the layout aligns to 64): the
 * three digit arrays, then from tm__nbits_qrow_floats_at the blocks' sa, sum and down
 * (blocks floats each). */
size_t tm__nbits_qrow_bytes(int64_t k_pad, int64_t blocks);
static inline int64_t tm__nbits_qrow_floats_at(int64_t k_pad) { return (3 * k_pad + 63) / 64 * 64; }
/* Row a (k floats) split into the buffer at p (tm__nbits_qrow_bytes of it, 64-aligned);
 * q points into it. A block with a value that is not finite gets sa NaN. */
typedef void (*tm__nbits_split_fn)(const float *a, int64_t k, int64_t block, int64_t blocks,
                                   void *p, tm__nbits_qrow *q);

/* rows (1..4) split rows times the columns of groups [g0, g1): y[r * ldy + n] for the
 * columns below n; threads: how many run such calls at once (it sets how far ahead each
 * prefetches). */
typedef void (*tm__nbits_gemv_fn)(const tm__nbits_packed *h, const uint8_t *data,
                                  const tm__nbits_qrow *rows, int nrows, int64_t g0, int64_t g1,
                                  float *y, int64_t ldy, int threads);

/* The columns of groups [g0, g0 + groups) (groups * 16 <= the panel width P) dequantized
 * over k in [k0, k0 + kc) (multiples of 8) as one panel of gemm.h's packed-B layout:
 * dst[(p - k0) * P + j], columns past the groups zero. */
typedef void (*tm__nbits_panel_fn)(const tm__nbits_packed *h, const uint8_t *data, int64_t g0,
                                   int groups, int64_t k0, int64_t kc, int P, float *dst);

typedef struct tm__nbits_arch {
    const char *name;
    tm__nbits_split_fn split;
    tm__nbits_gemv_fn gemv;
    tm__nbits_panel_fn panel;    /* for P a multiple of 16 */
} tm__nbits_arch;

/* One row quantized to int8 for tm_nbits_matmul_int8: per block b its scale sa[b]
 * (NaN where the block holds a value that is not finite, 0 for a block whose largest |a|
 * is below 2^-100, then q is 0 there) and sum[b], the sum of its q (exact in f32: at most
 * 127 * block). q is k_pad bytes, zeros past k. */
typedef struct tm__nbits_q8 {
    const int8_t *q;
    const float *sa, *sum;
} tm__nbits_q8;

/* Bytes of one quantized row (64-aligned buffer), and the quantization (portable C:
 * every ISA path multiplies the same integers). */
size_t tm__nbits_q8_bytes(int64_t k_pad, int64_t blocks);
void tm__nbits_quantize_row8(const float *a, int64_t k, int64_t block, int64_t blocks, void *p,
                             tm__nbits_q8 *q);

/* rows (1..TM_NBITS_PASS8) quantized rows times the columns of groups [g0, g1):
 * y[r * ldy + n]. */
#define TM_NBITS_PASS8 8
typedef void (*tm__nbits_gemv8_fn)(const tm__nbits_packed *h, const uint8_t *data,
                                   const tm__nbits_q8 *rows, int nrows, int64_t g0, int64_t g1,
                                   float *y, int64_t ldy);

/* NULL where the compiler or the CPU lacks the instructions (AVX-512 BW and VNNI; AVX2). */
tm__nbits_gemv8_fn tm__nbits_gemv8_avx512(void);
tm__nbits_gemv8_fn tm__nbits_gemv8_avx2(void);

/* NULL where the compiler or the CPU lacks AVX-512 with BW and VNNI. */
const tm__nbits_arch *tm__nbits_arch_avx512(void);

#endif
