/* 4-bit block-quantized matrix multiply for MATMUL_NBITS (f32 activations, f32
 * accumulation: MatMulNBits' accuracy_level 0). The weights are repacked once (plan
 * time, tm_nbits_pack) into one sequential stream, still 4-bit: per group of 4 columns and
 * per block, their nibbles, scales and zero points side by side. A few rows: a GEMV that
 * dequantizes through a 16-entry table per block (vpermps), columns split over the pool;
 * more rows: a group of columns dequantized a slice of K at a time and multiplied with the
 * f32 GEMM tile (gemm.h). Other bit widths, g_idx and half precision stay with the
 * reference kernel (core/prims/quant.c). */
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

/* Bytes of scratch tm_nbits_matmul needs (activations re-ordered); independent of the
 * thread count. */
size_t tm_nbits_scratch(int64_t m, int64_t k, int64_t block);

/* y (m, n) = a (m, k) . W^T with W the repacked weights, then the epilogue ep (bias per
 * column, an activation, a residual of row stride n; NULL: none) on each block of y as it
 * is finished. Allocates nothing; the result does not depend on the thread count. Under
 * TM_REFERENCE_KERNELS=1 (or TM_KERNEL_ISA=scalar) the portable C GEMV runs for every
 * row. */
void tm_nbits_matmul(const void *packed, int64_t m, const float *a, float *y, void *scratch,
                     const tm_sgemm_epilogue *ep, tm_pool *pool);

/* The weights dequantized from their stored layout, w (k, n) row-major = (q - zero point)
 * * scale, split over the pool by columns: the per-run way (DEQUANTIZE_NBITS). */
void tm_nbits_dequantize(const tm_nbits_weights *wt, float *w, tm_pool *pool);

/* Which kernels tm_nbits_matmul would use now: "avx512", "portable" or "reference". */
const char *tm_nbits_kernel_name(void);

/* ---- Between nbits.c and nbits_avx512.c ---------------------------------------------- */

/* Columns per group of the repacked layout, and values per chunk: 16 packed bytes hold 32
 * values, the low nibbles the even k and the high nibbles the odd k, so the kernels take
 * activations re-ordered to match: within each 32 values of k, the 16 even ones, then the
 * 16 odd ones (zero-padded to whole chunks). */
#define TM_NBITS_GROUP 4
#define TM_NBITS_CHUNK 32

typedef struct tm__nbits_packed {
    uint32_t magic, version;
    int64_t n, k, block, blocks, groups;
    int64_t record;       /* bytes per (group, block): nibbles, scales, zero points */
    int64_t data_offset;
    int32_t zp_float;     /* zero points are f32 (else one byte each) */
    int32_t pad;
} tm__nbits_packed;

/* Offsets inside a record: TM_NBITS_GROUP * block/2 bytes of nibbles (column by column),
 * then TM_NBITS_GROUP f32 scales, then TM_NBITS_GROUP zero points (bytes, or f32). */
static inline int64_t tm__nbits_scales_at(int64_t block) { return TM_NBITS_GROUP * block / 2; }
static inline int64_t tm__nbits_zps_at(int64_t block) {
    return tm__nbits_scales_at(block) + TM_NBITS_GROUP * 4;
}

/* rows (1..4) rows of re-ordered activations (row stride lda floats) times the columns of
 * groups [g0, g1): y[r * ldy + n] for the columns below n. */
typedef void (*tm__nbits_gemv_fn)(const tm__nbits_packed *h, const uint8_t *data,
                                  const float *a, int64_t lda, int rows, int64_t g0, int64_t g1,
                                  float *y, int64_t ldy);
/* The columns of groups [g0, g0 + groups) dequantized over chunks [c0, c0 + chunks), in
 * the re-ordered k, into w (row j: column 4 * g0 + j, row stride ldw). */
typedef void (*tm__nbits_dequant_fn)(const tm__nbits_packed *h, const uint8_t *data, int64_t g0,
                                     int groups, int64_t c0, int64_t chunks, float *w,
                                     int64_t ldw);

/* Rows [0, rows) (rows <= nr) of a (row stride k) into one row panel of the tile path:
 * (k_pad, nr) floats, lane r holding row r in the kernels' k order; zeros past k and in
 * lanes from rows on. */
typedef void (*tm__nbits_pack_fn)(const float *a, int64_t k, int64_t k_pad, int rows, int nr,
                                  float *panel);
/* The tile path's transposed store: y[r * ldy + j] = acc[j * nr + r] for r < rows, j < cols
 * (cols <= 16). */
typedef void (*tm__nbits_store_fn)(const float *acc, int nr, int rows, int cols, float *y,
                                   int64_t ldy);

/* Groups [g0, g0 + groups) (groups <= 8) dequantized over chunks [c0, c0 + chunks) of
 * the padded K (the kernels' k order) as one panel of 32 columns of gemm.h's packed-B
 * layout: dst[(p - 32 c0) * 32 + j], columns past the groups zero. */
typedef void (*tm__nbits_panel_fn)(const tm__nbits_packed *h, const uint8_t *data, int64_t g0,
                                   int groups, int64_t c0, int64_t chunks, float *dst);

typedef struct tm__nbits_arch {
    const char *name;
    tm__nbits_gemv_fn gemv;
    tm__nbits_dequant_fn dequant;
    tm__nbits_pack_fn pack;      /* for nr a multiple of 16 */
    tm__nbits_store_fn store;    /* likewise */
    tm__nbits_panel_fn panel;    /* NULL: no panel path */
} tm__nbits_arch;

/* NULL where the compiler or the CPU lacks AVX-512. Blocks of 32 or more. */
const tm__nbits_arch *tm__nbits_arch_avx512(void);

#endif
