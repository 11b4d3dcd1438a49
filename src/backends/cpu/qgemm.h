/* Exact 8-bit integer matrix multiply for the CPU kernels: A (m, k) uint8/int8 times B
 * (k, n) uint8/int8 into int32, or rescaled into f32 (acc * scale + bias), with zero
 * points folded in by row and column sums. B is packed once (tm_qgemm_pack_b) into the
 * layout of the micro-kernels (AMX tiles, AVX-512 VNNI, or AVX2 widening to int16), picked at run
 * time; a plain C reference reads the same packed B. Not a float GEMM (gemm.h). */
#ifndef TM_BACKENDS_CPU_QGEMM_H
#define TM_BACKENDS_CPU_QGEMM_H

#include <stddef.h>
#include <stdint.h>
#include "gemm.h"   /* tm_sgemm_epilogue */
#include "pool.h"

/* Columns per packed panel, and the depth step (k in groups of 4). */
#define TM_QGEMM_NR 64
#define TM_QGEMM_KQ 4

/* Bytes of a packed B of k rows and n columns (header, per-column terms, panels). */
size_t tm_qgemm_packed_size(int64_t k, int64_t n);

/* Packs B (k, n), row-major with row stride ldb, signed (int8) or not (uint8), and its
 * zero point (zb_count 1: one for all columns, else n values, each of B's dtype) into
 * dst (tm_qgemm_packed_size bytes, any alignment). Stored: B re-centred to int8
 * (uint8 minus 128), in panels of TM_QGEMM_NR columns by groups of 4 rows (zero-padded),
 * each column's zero point in that form, and sum_k B - k * zero point per column.
 * b_trans: b holds B transposed, (n, k) with row stride ldb (a convolution's weights). */
void tm_qgemm_pack_b(const void *b, int b_signed, int b_trans, int64_t ldb, int64_t k, int64_t n,
                     const void *zb, int64_t zb_count, void *dst);

/* 1 when p (of `bytes` bytes) is a packed B of k rows and n columns. */
int tm_qgemm_packed_check(const void *p, size_t bytes, int64_t k, int64_t n);

/* One product. A's zero point za is za_count values of A's dtype (1: all rows; else row
 * i uses za[i % za_count]). Output: int32 c_int, or f32 c_float = (float)acc * scale
 * (scale_count 1 or n values, per column) + bias (NULL, or bias_count 1 or n values),
 * rounded after the multiply and after the add as two separate float operations are. */
typedef struct tm_qgemm_args {
    int64_t m, n, k;
    const void *a;
    int a_signed;
    int64_t lda;
    const void *za;
    int64_t za_count;
    const void *b_packed;
    int32_t *c_int;
    float *c_float;
    int64_t ldc;
    const float *scale;
    int64_t scale_count;
    const float *bias;
    int64_t bias_count;
    /* NULL, or the packed GEMMs' epilogue (its activation and residual; the bias is
     * the one above) on each tile of f32 output right after the tile, while it is in
     * cache. */
    const tm_sgemm_epilogue *epilogue;
} tm_qgemm_args;

/* Bytes of scratch tm_qgemm needs: A re-centred to uint8 (signed A) and row sums. */
size_t tm_qgemm_scratch(int64_t m, int64_t k, int a_signed);

/* The product, split over the pool's threads by column panels (or tiles of rows, for
 * the AMX kernel with enough rows); results do not depend on
 * the thread count (integer sums are exact). scratch: tm_qgemm_scratch bytes, any
 * alignment. Allocates nothing. TM_REFERENCE_KERNELS=1 runs the reference. */
void tm_qgemm(const tm_qgemm_args *g, void *scratch, tm_pool *pool);

/* The plain C implementation, always (same result bit for bit). */
void tm_qgemm_reference(const tm_qgemm_args *g);

/* The micro-kernel tm_qgemm would use now ("amx", "avx512vnni", "avx2" or "reference");
 * TM_KERNEL_ISA=avx512|avx2|scalar forces a lesser one (avx512: VNNI without AMX), and
 * TM_KERNEL_ISA=amx is the default's choice. */
const char *tm_qgemm_kernel_name(void);

/* ---- Between qgemm.c and the micro-kernel files ---------------------------------------- */

/* The packed layout, at the start of a packed B (all offsets from its start). */
typedef struct tm__qgemm_packed {
    uint32_t magic, version;
    int64_t k, n, quads, panels;
    int64_t zb_offset;     /* int32 per column (padded to whole panels): zero point, centred */
    int64_t colterm_offset;/* int32 per column: sum_k B[k][n] - k * zb[n], wrapping */
    int64_t panel_offset;  /* int8 panels: quads * TM_QGEMM_NR * 4 bytes each */
    int32_t zb_any;        /* 1 when some column's centred zero point is not 0 */
    int32_t pad;
} tm__qgemm_packed;

/* What a tile does with its dot products d[i][j] = sum_k A[i][k] * Bc[k][j] (A as
 * uint8, Bc the centred int8 B): acc = d - zb[j] * rowsum[i] - za[i] * colterm[j]
 * (int32, wrapping), then stored as int32, or as f32 acc * scale (+ bias). Pointers
 * are already at the tile's first row and column. */
typedef struct tm__qgemm_epilogue {
    const int32_t *za;        /* per row: A's zero point, centred (uint8 form) */
    const int32_t *rowsum;    /* per row: sum of A's row (uint8 form); NULL: B has none */
    const int32_t *zb;        /* per column: B's zero point, centred */
    const int32_t *colterm;   /* per column */
    int32_t *c_int;           /* one of c_int, c_float */
    float *c_float;
    int64_t ldc;
    const float *scale;       /* f32 output: per column, or one value (scale_per_col 0) */
    const float *bias;        /* NULL, per column, or one value */
    int scale_per_col, bias_per_col;
} tm__qgemm_epilogue;

/* Rows [0, mr) (1 <= mr <= the arch's mr) and columns [0, nr) (nr <= TM_QGEMM_NR) of one
 * panel. a: mr rows of uint8, row stride lda, k bytes each, read only inside them (the
 * last group of 4 with a mask). */
typedef void (*tm__qgemm_tile_fn)(int64_t k, const uint8_t *a, int64_t lda, int mr,
                                  const int8_t *panel, int nr, const tm__qgemm_epilogue *e);

/* begin/end (NULL for none): around each thread's run of tiles (AMX: the tile
 * configuration, loaded per thread, and released after). split_rows: threads share a
 * product by tiles of rows, each over every panel, when there are enough rows (else by
 * panels). */
typedef struct tm__qgemm_arch {
    const char *name;
    int mr;
    tm__qgemm_tile_fn tile;
    void (*begin)(void);
    void (*end)(void);
    int split_rows;
} tm__qgemm_arch;

/* NULL where the compiler, the CPU or the OS (AMX's tile state) lacks the instructions. */
const tm__qgemm_arch *tm__qgemm_arch_amx(void);
const tm__qgemm_arch *tm__qgemm_arch_avx512(void);
const tm__qgemm_arch *tm__qgemm_arch_avx2(void);

#endif
