/* tm_nbits_matmul: the 4-bit MATMUL_NBITS fast path. Repacks the weights (once, at plan
 * time) into groups of 16 columns, one 32-bit lane each. Fewer rows than PANEL_MIN_ROWS:
 * each row is split exactly into three int8 digits per block (nbits.h) and the integer
 * GEMV (AVX-512 VNNI, nbits_avx512.c) multiplies the nibbles by them, 4 rows per pass
 * over a group's weights, which then stay in cache for the next 4; the f32 result per
 * block is as accurate as f32 sums. More rows: panels of columns dequantized straight
 * into the packed-B layout of the f32 GEMM (gemm.h), which multiplies every row by them,
 * so each weight is dequantized once per call. Portable C stands in for the AVX-512
 * kernels elsewhere (a float GEMV); the reference lives in core/prims/quant.c. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "claim.h"
#include "gemm.h"
#include "nbits.h"

/* From this many rows the panel path (dequantized panels and the f32 GEMM) beats the
 * integer GEMV; the portable float GEMV gives way to it sooner. */
#define PANEL_MIN_ROWS 96
#define PORTABLE_PANEL_MIN_ROWS 9
/* Columns per panel of the panel path (a multiple of every GEMM panel width; the
 * epilogue runs on row pieces this long), and threads with a panel buffer each. */
#define PANEL_COLS 128
#define PANEL_SLOTS 4
/* Below this many weights a call runs on the calling thread. */
#define PARALLEL_MIN_WEIGHTS (1 << 15)
/* Rows per pass of the GEMVs over a group's weights. */
#define PASS_ROWS 4

static int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

#define PACK_MAGIC 0x344e4d54u   /* "TMN4" */
#define PACK_VERSION 2u

static int64_t blocks_of(int64_t k, int64_t block) { return (k + block - 1) / block; }

/* ---- Choosing kernels ----------------------------------------------------------------- */

typedef struct kernels {
    const tm__nbits_arch *arch;    /* NULL: portable C */
} kernels;

static int pick(kernels *kr) {
    if (tm_use_reference_kernels()) return 0;
    const char *isa = getenv("TM_KERNEL_ISA");
    if (isa && !strcmp(isa, "scalar")) return 0;
    kr->arch = !isa || !strcmp(isa, "avx512") ? tm__nbits_arch_avx512() : NULL;
    return 1;
}

int tm_nbits_fast(int64_t block) {
    kernels kr;
    return block >= 16 && !(block & (block - 1)) && pick(&kr);
}

const char *tm_nbits_kernel_name(void) {
    kernels kr;
    if (!pick(&kr)) return "reference";
    return kr.arch ? kr.arch->name : "portable";
}

/* Floats of one thread's panel: PANEL_COLS x k_pad in the packed-B layout. */
static int64_t panel_slot_floats(int64_t k_pad) { return round_up(PANEL_COLS * k_pad, 16); }

size_t tm__nbits_qrow_bytes(int64_t k_pad, int64_t blocks) {
    return (size_t)(tm__nbits_qrow_floats_at(k_pad) + round_up(3 * (int64_t)sizeof(float) * blocks, 64));
}

size_t tm_nbits_scratch(int64_t m, int64_t k, int64_t block) {
    /* The integer path's split rows and their descriptors, or the panel path's padded
     * rows (when K is not a whole number of blocks) and panel buffers. */
    int64_t blocks = blocks_of(k, block), k_pad = blocks * block;
    size_t split = (size_t)m * (tm__nbits_qrow_bytes(k_pad, blocks) + sizeof(tm__nbits_qrow));
    size_t panel = sizeof(float) * (size_t)((k_pad != k ? round_up(m * k_pad, 16) : 0) +
                                            PANEL_SLOTS * panel_slot_floats(k_pad));
    return (split > panel ? split : panel) + 128;
}

/* ---- The repacked layout -------------------------------------------------------------- */

static void layout(int64_t n, int64_t k, int64_t block, int zp_float, tm__nbits_packed *h) {
    memset(h, 0, sizeof *h);
    h->magic = PACK_MAGIC;
    h->version = PACK_VERSION;
    h->n = n;
    h->k = k;
    h->block = block;
    h->blocks = blocks_of(k, block);
    h->groups = (n + TM_NBITS_GROUP - 1) / TM_NBITS_GROUP;
    h->record = tm__nbits_zps_at(block) + TM_NBITS_GROUP * (zp_float ? 4 : 1);
    h->data_offset = round_up((int64_t)sizeof *h, 64);
    h->zp_float = zp_float;
}

size_t tm_nbits_packed_size(int64_t n, int64_t k, int64_t block, int zp_float) {
    tm__nbits_packed h;
    layout(n, k, block, zp_float, &h);
    return (size_t)(h.data_offset + h.groups * h.blocks * h.record);
}

int tm_nbits_packed_check(const void *p, size_t bytes, int64_t n, int64_t k, int64_t block) {
    if (!p || n <= 0 || k <= 0 || block < 16) return 0;
    tm__nbits_packed h, want;
    memcpy(&h, p, sizeof h);
    if (h.zp_float != 0 && h.zp_float != 1) return 0;
    layout(n, k, block, h.zp_float, &want);
    return bytes == tm_nbits_packed_size(n, k, block, h.zp_float) && !memcmp(&h, &want, sizeof h);
}

/* Where weight (column c of its group, k = i within the block) lies in a record: its
 * byte, and its shift there (0: the low nibble, 4: the high one). */
static int64_t nibble_byte(int c, int64_t i) { return (i / 8) * 64 + c * 4 + i % 4; }
static int nibble_shift(int64_t i) { return i % 8 < 4 ? 0 : 4; }

/* The weight's 4-bit value. */
static unsigned nibble(const uint8_t *rec, int c, int64_t i) {
    return (rec[nibble_byte(c, i)] >> nibble_shift(i)) & 15;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define LITTLE_ENDIAN_HOST 0
#else
#define LITTLE_ENDIAN_HOST 1
#endif

/* The four nibbles of x (bits 0-15) as the low nibbles of four bytes. */
static uint32_t spread_nibbles(uint32_t x) {
    return (x & 0xf) | (x & 0xf0) << 4 | (x & 0xf00) << 8 | (x & 0xf000) << 12;
}

void tm_nbits_pack(const tm_nbits_weights *w, void *dst) {
    tm__nbits_packed h;
    layout(w->n, w->k, w->block, w->zp_float != NULL, &h);
    uint8_t *out = dst;
    memset(out, 0, tm_nbits_packed_size(w->n, w->k, w->block, w->zp_float != NULL));
    memcpy(out, &h, sizeof h);
    int64_t half = w->block / 2;
    /* Columns past n (the last group's) stay zero: nibbles, scale and zero point. */
    for (int64_t n = 0; n < w->n; n++) {
        int64_t g = n / TM_NBITS_GROUP;
        int c = (int)(n % TM_NBITS_GROUP);
        for (int64_t blk = 0; blk < h.blocks; blk++) {
            uint8_t *rec = out + h.data_offset + (g * h.blocks + blk) * h.record;
            const uint8_t *src = w->b + (n * h.blocks + blk) * half;
            if (w->block % 8 == 0 && LITTLE_ENDIAN_HOST) {
                /* Eight values at a time: four source bytes hold v0..v7 two by two; the
                 * record's four bytes for them hold (v0, v4), (v1, v5), (v2, v6), (v3, v7)
                 * as (low, high) nibbles (nibble_byte, nibble_shift). */
                for (int64_t i = 0; i < w->block; i += 8) {
                    uint32_t word;
                    memcpy(&word, src + i / 2, 4);
                    uint32_t out = spread_nibbles(word & 0xffff) | spread_nibbles(word >> 16) << 4;
                    memcpy(rec + nibble_byte(c, i), &out, 4);   /* a little-endian word */
                }
            } else {
                for (int64_t i = 0; i < w->block; i++) {
                    unsigned q = (src[i / 2] >> (i & 1 ? 4 : 0)) & 15;
                    rec[nibble_byte(c, i)] |= (uint8_t)(q << nibble_shift(i));
                }
            }
            memcpy(rec + tm__nbits_scales_at(w->block) + 4 * c, w->scales + n * h.blocks + blk, 4);
            uint8_t *zps = rec + tm__nbits_zps_at(w->block);
            if (w->zp_float) {
                memcpy(zps + 4 * c, w->zp_float + n * h.blocks + blk, 4);
            } else {
                uint8_t z = 8;
                if (w->zp_packed)
                    z = (w->zp_packed[n * ((h.blocks + 1) / 2) + blk / 2] >> ((blk & 1) * 4)) & 15;
                zps[c] = z;
            }
        }
    }
}

/* ---- Portable kernels ----------------------------------------------------------------- */

/* Scale and zero point of column c in a record. */
static void record_params(const tm__nbits_packed *h, const uint8_t *rec, int c, float *scale,
                          float *zp) {
    memcpy(scale, rec + tm__nbits_scales_at(h->block) + 4 * c, sizeof *scale);
    const uint8_t *zps = rec + tm__nbits_zps_at(h->block);
    if (h->zp_float) memcpy(zp, zps + 4 * c, sizeof *zp);
    else *zp = (float)zps[c];
}

/* The float GEMV: rows (up to PASS_ROWS) of a (row stride lda, k values) times the
 * columns of groups [g0, g1), a sum per block added to each column's total. */
static void gemv_portable(const tm__nbits_packed *h, const uint8_t *data, const float *a,
                          int64_t lda, int rows, int64_t g0, int64_t g1, float *y, int64_t ldy) {
    for (int64_t g = g0; g < g1; g++)
        for (int c = 0; c < TM_NBITS_GROUP && g * TM_NBITS_GROUP + c < h->n; c++) {
            float acc[PASS_ROWS] = {0};
            for (int64_t blk = 0; blk < h->blocks; blk++) {
                const uint8_t *rec = data + (g * h->blocks + blk) * h->record;
                int64_t k0 = blk * h->block, kc = min64(h->block, h->k - k0);
                float scale, zp, part[PASS_ROWS] = {0};
                record_params(h, rec, c, &scale, &zp);
                for (int64_t i = 0; i < kc; i++) {
                    float w = ((float)nibble(rec, c, i) - zp) * scale;
                    for (int r = 0; r < rows; r++) part[r] += a[r * lda + k0 + i] * w;
                }
                for (int r = 0; r < rows; r++) acc[r] += part[r];
            }
            for (int r = 0; r < rows; r++) y[r * ldy + g * TM_NBITS_GROUP + c] = acc[r];
        }
}

/* Portable tm__nbits_panel_fn. */
static void panel_portable(const tm__nbits_packed *h, const uint8_t *data, int64_t g0, int groups,
                           int64_t k0, int64_t kc, int P, float *dst) {
    for (int64_t p = 0; p < kc; p++) memset(dst + p * P, 0, sizeof(float) * (size_t)P);
    for (int gi = 0; gi < groups; gi++)
        for (int64_t p = 0; p < kc; p++) {
            int64_t k = k0 + p, blk = k / h->block, i = k % h->block;
            const uint8_t *rec = data + ((g0 + gi) * h->blocks + blk) * h->record;
            for (int c = 0; c < TM_NBITS_GROUP; c++) {
                float scale, zp;
                record_params(h, rec, c, &scale, &zp);
                dst[p * P + gi * TM_NBITS_GROUP + c] = ((float)nibble(rec, c, i) - zp) * scale;
            }
        }
}

/* ---- Splitting work ------------------------------------------------------------------- */

static void run(tm_pool *pool, int nth, tm_pool_fn fn, void *arg) {
    if (nth <= 1) fn(arg, 0, 1);
    else tm_pool_run(pool, nth, fn, arg);
}

static int threads_for(int64_t units, int64_t n, int64_t k, tm_pool *pool) {
    int nth = (double)n * (double)k < PARALLEL_MIN_WEIGHTS ? 1 : tm_pool_threads(pool);
    return units < nth ? (int)units : nth;
}

/* ---- The GEMV paths ------------------------------------------------------------------- */

typedef struct gemv_job {
    const tm__nbits_packed *h;
    const uint8_t *data;
    const tm__nbits_arch *arch;   /* NULL: the portable float GEMV on a */
    int64_t m;
    const float *a;
    const tm__nbits_qrow *q;      /* the split rows (arch) */
    float *y;
    const tm_sgemm_epilogue *ep;
    tm__share share[TM__SHARES_MAX];   /* one per slice: the column groups (claim.h) */
} gemv_job;

/* Slice ith works through share ith of the column groups, then helps with the others'
 * (claim.h); a few groups at a time for many rows, so that their weights stay in L1 from
 * one pass of PASS_ROWS rows to the next. */
static void gemv_slice(void *arg, int ith, int nth) {
    gemv_job *jb = arg;
    int64_t g0, g1 = 0, most = jb->m > PASS_ROWS ? 2 : jb->h->groups;
    while ((g0 = tm__claim_share(jb->share, nth, ith, 2, 2, &g1)) >= 0)
        for (int64_t s0 = g0; s0 < g1; s0 += most) {
            int64_t s1 = min64(g1, s0 + most);
            for (int64_t r = 0; r < jb->m; r += PASS_ROWS) {
                int rows = (int)min64(PASS_ROWS, jb->m - r);
                float *y = jb->y + r * jb->h->n;
                if (jb->arch) jb->arch->gemv(jb->h, jb->data, jb->q + r, rows, s0, s1, y, jb->h->n, nth);
                else gemv_portable(jb->h, jb->data, jb->a + r * jb->h->k, jb->h->k, rows, s0, s1, y, jb->h->n);
            }
            tm_sgemm_epilogue_apply(jb->ep, jb->y, jb->h->n, 0, jb->m, s0 * TM_NBITS_GROUP,
                                    min64(s1 * TM_NBITS_GROUP, jb->h->n));
        }
}

typedef struct split_job {
    const tm__nbits_packed *h;
    tm__nbits_split_fn split;
    const float *a;
    uint8_t *rows;           /* m buffers of tm__nbits_qrow_bytes, 64-aligned */
    tm__nbits_qrow *q;
    int64_t m;
} split_job;

static void split_slice(void *arg, int ith, int nth) {
    const split_job *j = arg;
    const tm__nbits_packed *h = j->h;
    size_t bytes = tm__nbits_qrow_bytes(h->blocks * h->block, h->blocks);
    for (int64_t r = j->m * ith / nth; r < j->m * (ith + 1) / nth; r++)
        j->split(j->a + r * h->k, h->k, h->block, h->blocks, j->rows + (size_t)r * bytes, j->q + r);
}

/* ---- The panel path ------------------------------------------------------------------
 * PANEL_COLS columns at a time dequantized over the whole of K into the packed-B GEMM's
 * panels, then multiplied by every row with tm_sgemm_bpacked, whose micro-kernel reads
 * the rows where they lie at the f32 GEMM's speed; the epilogue runs on each tile there.
 * One panel's dequantization serves all rows. */

typedef struct panel_job {
    const tm__nbits_packed *h;
    const uint8_t *data;
    tm__nbits_panel_fn to_panel;
    int64_t m, k_pad;
    const float *a;       /* rows k_pad apart */
    float *y;
    const tm_sgemm_epilogue *ep;
    float *slots;         /* PANEL_SLOTS buffers of panel_slot_floats(k_pad) */
    int64_t cols;         /* columns per claimed panel: PANEL_COLS or a narrower multiple of P */
    int panel, depth;
    _Atomic int64_t next; /* first unclaimed panel (claim.h) */
} panel_job;

typedef struct pad_job {
    const float *a;
    float *dst;
    int64_t m, k, k_pad;
} pad_job;

static void pad_slice(void *arg, int ith, int nth) {
    const pad_job *j = arg;
    for (int64_t r = j->m * ith / nth; r < j->m * (ith + 1) / nth; r++) {
        memcpy(j->dst + r * j->k_pad, j->a + r * j->k, sizeof(float) * (size_t)j->k);
        memset(j->dst + r * j->k_pad + j->k, 0, sizeof(float) * (size_t)(j->k_pad - j->k));
    }
}

static void panel_slice(void *arg, int ith, int nth) {
    panel_job *jb = arg;
    const tm__nbits_packed *h = jb->h;
    float *packed = jb->slots + ith * panel_slot_floats(jb->k_pad);
    int64_t cols = jb->cols, panels = (h->n + cols - 1) / cols, p0, p1;
    int P = jb->panel, per = P / TM_NBITS_GROUP;
    while ((p0 = tm__claim(&jb->next, panels, nth, 1, &p1)) < panels)
        for (int64_t p = p0; p < p1; p++) {
            int64_t n0 = p * cols, g0 = n0 / TM_NBITS_GROUP;
            int64_t width = min64(cols, h->n - n0), panelsP = (width + P - 1) / P;
            /* gemm.h's layout: depth block after depth block, in each every P-column panel
             * of the block's rows. */
            for (int64_t d0 = 0; d0 < jb->k_pad; d0 += jb->depth) {
                int64_t rows = min64(jb->depth, jb->k_pad - d0);
                for (int64_t q = 0; q < panelsP; q++)
                    jb->to_panel(h, jb->data, g0 + q * per, (int)min64(per, h->groups - g0 - q * per),
                                 d0, rows, P, packed + d0 * panelsP * P + q * rows * P);
            }
            tm_sgemm_epilogue ep, *use = NULL;
            if (jb->ep) {
                ep = *jb->ep;
                if (ep.bias) ep.bias += n0;
                if (ep.residual) ep.residual += n0;
                if (ep.act_out) ep.act_out += n0;
                if (ep.mul) ep.mul += n0;
                use = &ep;
            }
            tm_sgemm_bpacked(jb->m, width, jb->k_pad, jb->a, jb->k_pad, packed, jb->panel,
                             jb->depth, jb->y + n0, h->n, use, NULL);
        }
}

static void panel_path(const tm__nbits_packed *h, const uint8_t *data, tm__nbits_panel_fn to_panel,
                       int P, int depth, int64_t m, const float *a, float *y, float *buf,
                       const tm_sgemm_epilogue *ep, tm_pool *pool) {
    int64_t k_pad = h->blocks * h->block;
    const float *rows = a;
    float *slots = buf;
    if (k_pad != h->k) {
        pad_job pj = {a, buf, m, h->k, k_pad};
        run(pool, threads_for(m, h->n, h->k, pool), pad_slice, &pj);
        rows = buf;
        slots = buf + round_up(m * k_pad, 16);
    }
    panel_job jb = {h, data, to_panel, m, k_pad, rows, y, ep, slots, PANEL_COLS, P, depth, 0};
    int nth = threads_for((h->n + P - 1) / P, h->n, h->k, pool);
    if (nth > PANEL_SLOTS) nth = PANEL_SLOTS;
    /* Narrower panels where wide ones would leave a thread idle (N = 384 on 2 threads:
     * three panels of 128). */
    while (jb.cols > P && (jb.cols / 2) % P == 0 && (h->n + jb.cols - 1) / jb.cols < 3 * nth)
        jb.cols /= 2;
    run(pool, nth, panel_slice, &jb);
}

void tm_nbits_matmul(const void *packed, int64_t m, const float *a, float *y, void *scratch,
                     const tm_sgemm_epilogue *ep, tm_pool *pool) {
    kernels kr;
    if (m <= 0) return;
    int fast = pick(&kr);
    if (!fast) kr.arch = NULL;   /* the reference: the portable float GEMV for every row */
    tm__nbits_packed h;
    memcpy(&h, packed, sizeof h);
    const uint8_t *data = (const uint8_t *)packed + h.data_offset;
    uint8_t *buf = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    int P, depth;
    tm_sgemm_pack_layout(&P, &depth);
    if (fast && m >= (kr.arch ? PANEL_MIN_ROWS : PORTABLE_PANEL_MIN_ROWS) && P % TM_NBITS_GROUP == 0 &&
        PANEL_COLS % P == 0 && depth % 8 == 0) {
        panel_path(&h, data, kr.arch ? kr.arch->panel : panel_portable, P, depth, m, a, y,
                   (float *)buf, ep, pool);
        return;
    }
    gemv_job jb = {&h, data, kr.arch, m, a, NULL, y, ep, {{0}}};
    if (kr.arch) {
        size_t bytes = tm__nbits_qrow_bytes(h.blocks * h.block, h.blocks);
        tm__nbits_qrow *q = (tm__nbits_qrow *)(buf + (size_t)m * bytes);
        split_job sj = {&h, kr.arch->split, a, buf, q, m};
        run(pool, threads_for(m, h.n, h.k, pool), split_slice, &sj);
        jb.q = q;
    }
    /* run gives gemv_slice exactly nth slices (pool.h), one per share. */
    int nth = threads_for(h.groups, h.n, h.k, pool);
    if (nth > TM__SHARES_MAX) nth = TM__SHARES_MAX;
    tm__shares_init(jb.share, nth, h.groups, 2);
    run(pool, nth, gemv_slice, &jb);
}

/* ---- The per-run dequantization ------------------------------------------------------- */

typedef struct dequant_job {
    const tm_nbits_weights *wt;
    float *w;
} dequant_job;

/* Columns in groups of 16, k in the stored order, so that each row of w gets 16
 * neighbouring floats at a time. */
static void dequant_slice(void *arg, int ith, int nth) {
    const dequant_job *jb = arg;
    const tm_nbits_weights *wt = jb->wt;
    int64_t groups = (wt->n + 15) / 16, blocks = blocks_of(wt->k, wt->block), half = wt->block / 2;
    for (int64_t t = groups * ith / nth; t < groups * (ith + 1) / nth; t++) {
        int64_t n0 = t * 16, n1 = min64(n0 + 16, wt->n);
        for (int64_t blk = 0; blk < blocks; blk++) {
            float scale[16], zp[16];
            for (int64_t n = n0; n < n1; n++) {
                scale[n - n0] = wt->scales[n * blocks + blk];
                zp[n - n0] = 8.0f;
                if (wt->zp_packed)
                    zp[n - n0] = (float)((wt->zp_packed[n * ((blocks + 1) / 2) + blk / 2] >>
                                          ((blk & 1) * 4)) & 15);
                else if (wt->zp_float)
                    zp[n - n0] = wt->zp_float[n * blocks + blk];
            }
            int64_t k1 = min64(wt->block, wt->k - blk * wt->block);
            for (int64_t i = 0; i < k1; i++) {
                float *dst = jb->w + (blk * wt->block + i) * wt->n;
                for (int64_t n = n0; n < n1; n++) {
                    uint8_t byte = wt->b[(n * blocks + blk) * half + i / 2];
                    unsigned q = i & 1 ? byte >> 4 : byte & 15;
                    dst[n] = ((float)q - zp[n - n0]) * scale[n - n0];
                }
            }
        }
    }
}

void tm_nbits_dequantize(const tm_nbits_weights *wt, float *w, tm_pool *pool) {
    dequant_job jb = {wt, w};
    run(pool, threads_for((wt->n + 15) / 16, wt->n, wt->k, pool), dequant_slice, &jb);
}

/* ---- Int8 activations (accuracy_level 4) ---------------------------------------------
 * Each row quantized once per call to int8 per block (tm__nbits_quantize_row8), then
 * the integer GEMV of the ISA (nbits_avx512.c, nbits_avx2.c, or the C below) over every
 * row, TM_NBITS_PASS8 rows per pass over a few groups, whose weights stay in L1 from one pass
 * to the next. One int8 product per weight and row where the exact path takes three. */

/* Below this largest |a| a block quantizes to zeros: 127 / max|a| would overflow. */
#define Q8_TINY 0x1p-100f

size_t tm__nbits_q8_bytes(int64_t k_pad, int64_t blocks) {
    return (size_t)(round_up(k_pad, 64) + round_up(2 * (int64_t)sizeof(float) * blocks, 64));
}

void tm__nbits_quantize_row8(const float *a, int64_t k, int64_t block, int64_t blocks, void *p,
                             tm__nbits_q8 *q) {
    int64_t k_pad = blocks * block;
    int8_t *d = p;
    float *sa = (float *)(d + round_up(k_pad, 64)), *sum = sa + blocks;
    q->q = d;
    q->sa = sa;
    q->sum = sum;
    for (int64_t b = 0; b < blocks; b++) {
        int64_t k0 = b * block, kc = min64(block, k - k0);
        float top = 0.0f;
        int bad = 0;
        for (int64_t i = 0; i < kc; i++) {
            float x = fabsf(a[k0 + i]);
            bad |= !(x <= FLT_MAX);
            top = x > top ? x : top;
        }
        memset(d + k0, 0, (size_t)block);
        sum[b] = 0.0f;
        if (bad || top < Q8_TINY) {
            sa[b] = bad ? NAN : 0.0f;
            continue;
        }
        sa[b] = top / 127.0f;
        float inv = 127.0f / top;
        int32_t s = 0;
        for (int64_t i = 0; i < kc; i++) {
            float v = nearbyintf(a[k0 + i] * inv);   /* to nearest even, as cvtps2dq */
            v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v;
            d[k0 + i] = (int8_t)v;
            s += (int32_t)v;
        }
        sum[b] = (float)s;
    }
}

/* Portable tm__nbits_gemv8_fn: per block the exact integer sum, then as the vector kernels
 * finish it (fused multiply-adds), so that every path gives the same bits. A record's
 * nibbles are unpacked once for all rows, 64 values of a column at a time. */
static void gemv8_portable(const tm__nbits_packed *h, const uint8_t *data, const tm__nbits_q8 *q,
                           int rows, int64_t g0, int64_t g1, float *y, int64_t ldy) {
    uint8_t wq[TM_NBITS_GROUP][64];   /* each column's next (up to) 64 values */
    for (int64_t g = g0; g < g1; g++) {
        int cols = (int)min64(TM_NBITS_GROUP, h->n - g * TM_NBITS_GROUP);
        float out[TM_NBITS_PASS8][TM_NBITS_GROUP] = {{0}};
        for (int64_t blk = 0; blk < h->blocks; blk++) {
            const uint8_t *rec = data + (g * h->blocks + blk) * h->record;
            int32_t acc[TM_NBITS_PASS8][TM_NBITS_GROUP] = {{0}};
            int64_t chunk = min64(h->block, 64);   /* blocks are powers of two */
            for (int64_t i0 = 0; i0 < h->block; i0 += chunk) {
                for (int c = 0; c < cols; c++)
                    for (int64_t i = 0; i < chunk; i++) wq[c][i] = (uint8_t)nibble(rec, c, i0 + i);
                for (int r = 0; r < rows; r++) {
                    const int8_t *qa = q[r].q + blk * h->block + i0;
                    for (int c = 0; c < cols; c++) {
                        int32_t s = 0;
                        for (int64_t i = 0; i < chunk; i++) s += wq[c][i] * qa[i];
                        acc[r][c] += s;
                    }
                }
            }
            for (int c = 0; c < cols; c++) {
                float scale, zp;
                record_params(h, rec, c, &scale, &zp);
                for (int r = 0; r < rows; r++) {
                    float t = fmaf(-zp, q[r].sum[blk], (float)acc[r][c]);
                    out[r][c] = fmaf(t, scale * q[r].sa[blk], out[r][c]);
                }
            }
        }
        for (int r = 0; r < rows; r++)
            memcpy(y + r * ldy + g * TM_NBITS_GROUP, out[r], sizeof(float) * (size_t)cols);
    }
}

static tm__nbits_gemv8_fn pick8(const char **name) {
    const char *isa = getenv("TM_KERNEL_ISA");
    tm__nbits_gemv8_fn fn = NULL;
    if (!tm_use_reference_kernels() && !(isa && !strcmp(isa, "scalar"))) {
        if (!isa || !strcmp(isa, "avx512")) fn = tm__nbits_gemv8_avx512(), *name = "avx512-vnni";
        if (!fn && (!isa || !strcmp(isa, "avx512") || !strcmp(isa, "avx2")))
            fn = tm__nbits_gemv8_avx2(), *name = "avx2";
    }
    if (!fn) fn = gemv8_portable, *name = "portable";
    return fn;
}

const char *tm_nbits_int8_kernel_name(void) {
    const char *name;
    pick8(&name);
    return name;
}

typedef struct gemv8_job {
    const tm__nbits_packed *h;
    const uint8_t *data;
    tm__nbits_gemv8_fn gemv;
    int64_t m;
    const float *a;
    uint8_t *rows;           /* m buffers of tm__nbits_q8_bytes, 64-aligned */
    tm__nbits_q8 *q;
    float *y;
    const tm_sgemm_epilogue *ep;
    tm__share share[TM__SHARES_MAX];
} gemv8_job;

static void quantize_slice(void *arg, int ith, int nth) {
    const gemv8_job *j = arg;
    const tm__nbits_packed *h = j->h;
    size_t bytes = tm__nbits_q8_bytes(h->blocks * h->block, h->blocks);
    for (int64_t r = j->m * ith / nth; r < j->m * (ith + 1) / nth; r++)
        tm__nbits_quantize_row8(j->a + r * h->k, h->k, h->block, h->blocks,
                                j->rows + (size_t)r * bytes, j->q + r);
}

static void gemv8_slice(void *arg, int ith, int nth) {
    gemv8_job *jb = arg;
    int64_t g0, g1 = 0, most = jb->m > TM_NBITS_PASS8 ? 2 : jb->h->groups;
    while ((g0 = tm__claim_share(jb->share, nth, ith, 2, 2, &g1)) >= 0)
        for (int64_t s0 = g0; s0 < g1; s0 += most) {
            int64_t s1 = min64(g1, s0 + most);
            for (int64_t r = 0; r < jb->m; r += TM_NBITS_PASS8)
                jb->gemv(jb->h, jb->data, jb->q + r, (int)min64(TM_NBITS_PASS8, jb->m - r), s0, s1,
                         jb->y + r * jb->h->n, jb->h->n);
            tm_sgemm_epilogue_apply(jb->ep, jb->y, jb->h->n, 0, jb->m, s0 * TM_NBITS_GROUP,
                                    min64(s1 * TM_NBITS_GROUP, jb->h->n));
        }
}

void tm_nbits_matmul_int8(const void *packed, int64_t m, const float *a, float *y, void *scratch,
                          const tm_sgemm_epilogue *ep, tm_pool *pool) {
    if (m <= 0) return;
    const char *name;
    tm__nbits_packed h;
    memcpy(&h, packed, sizeof h);
    uint8_t *buf = (uint8_t *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    size_t bytes = tm__nbits_q8_bytes(h.blocks * h.block, h.blocks);
    gemv8_job jb = {&h, (const uint8_t *)packed + h.data_offset, pick8(&name), m, a, buf,
                    (tm__nbits_q8 *)(buf + (size_t)m * bytes), y, ep, {{0}}};
    run(pool, threads_for(m, h.n, h.k, pool), quantize_slice, &jb);
    int nth = threads_for(h.groups, h.n, h.k, pool);
    if (nth > TM__SHARES_MAX) nth = TM__SHARES_MAX;
    tm__shares_init(jb.share, nth, h.groups, 2);
    run(pool, nth, gemv8_slice, &jb);
}
