/* tm_nbits_matmul: the 4-bit MATMUL_NBITS fast path. Repacks the weights (once, at plan
 * time), re-orders the activations once per call, then either runs the GEMV kernel over
 * column groups (a few rows: the weights stream once from memory), or dequantizes a group
 * of columns a slice of K at a time into a small buffer and multiplies it with the f32
 * GEMM tile (gemm.h) against the activations packed as the tile's B panel (more rows: the
 * dequantization is shared by all of them). Portable C stands in for the AVX-512 kernels
 * (nbits_avx512.c) elsewhere; the reference lives in core/prims/quant.c. */
#include <stdlib.h>
#include <string.h>
#include "claim.h"
#include "gemm.h"
#include "nbits.h"

/* Up to this many rows the GEMV (4 rows per pass over the weights) beats the tile path. */
#define GEMV_MAX_ROWS 8
/* k values dequantized per tile call: the tile's B slice (this many rows of 32 floats)
 * and the weight rows stay in L1 together. */
#define SLICE_K 128
/* Row panels of the tile path kept at once (their accumulators are on the stack). */
#define ROW_PANELS 16
/* Below this many weights a call runs on the calling thread. */
#define PARALLEL_MIN_WEIGHTS (1 << 15)


static int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }
static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

#define PACK_MAGIC 0x344e4d54u   /* "TMN4" */
#define PACK_VERSION 1u

static int64_t blocks_of(int64_t k, int64_t block) { return (k + block - 1) / block; }

/* k padded to whole chunks of 32 (covering every stored block). */
static int64_t padded_k(int64_t k, int64_t block) {
    return round_up(round_up(k, block), TM_NBITS_CHUNK);
}

/* ---- Choosing kernels ----------------------------------------------------------------- */

typedef struct kernels {
    const tm__nbits_arch *arch;    /* NULL: portable C */
    const tm__sgemm_arch *tile;    /* f32 tile for many rows; NULL: GEMV for every row */
} kernels;

static int pick(kernels *kr) {
    if (tm_use_reference_kernels()) return 0;
    const char *isa = getenv("TM_KERNEL_ISA");
    if (isa && !strcmp(isa, "scalar")) return 0;
    int allow512 = !isa || !strcmp(isa, "avx512");
    kr->arch = allow512 ? tm__nbits_arch_avx512() : NULL;
    kr->tile = allow512 ? tm__sgemm_arch_avx512() : NULL;
    if (!kr->tile) kr->tile = tm__sgemm_arch_avx2();
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

/* From this many rows, the panel path (below): measured against the tile path on MiniLM's
 * products, slower at 128 rows, faster at 1024. */
#define PANEL_MIN_ROWS 512
/* Columns per panel of the panel path (a multiple of 32; the epilogue runs on row pieces
 * this long), and threads with a panel buffer each. */
#define PANEL_COLS 128
#define PANEL_SLOTS 4

/* Floats of one thread's panel: PANEL_COLS x k_pad in the packed-B layout. */
static int64_t panel_slot_floats(int64_t k_pad) { return round_up(PANEL_COLS * k_pad, 16); }

size_t tm_nbits_scratch(int64_t m, int64_t k, int64_t block) {
    /* The GEMV's rows, or the tile path's row panels (up to 32 rows each), or the panel
     * path's re-ordered rows and panel buffers. */
    int64_t k_pad = padded_k(k, block), floats = round_up(m, 32) * k_pad;
    if (m >= PANEL_MIN_ROWS) floats += PANEL_SLOTS * panel_slot_floats(k_pad);
    return (size_t)floats * sizeof(float) + 128;
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

void tm_nbits_pack(const tm_nbits_weights *w, void *dst) {
    tm__nbits_packed h;
    layout(w->n, w->k, w->block, w->zp_float != NULL, &h);
    uint8_t *out = dst;
    memset(out, 0, tm_nbits_packed_size(w->n, w->k, w->block, w->zp_float != NULL));
    memcpy(out, &h, sizeof h);
    int64_t half = w->block / 2;
    /* Columns past n (the last group's) stay zero: nibbles, scale and zero point. */
    for (int64_t n = 0; n < w->n; n++) {
        int64_t g = n / TM_NBITS_GROUP, c = n % TM_NBITS_GROUP;
        for (int64_t blk = 0; blk < h.blocks; blk++) {
            uint8_t *rec = out + h.data_offset + (g * h.blocks + blk) * h.record;
            memcpy(rec + c * half, w->b + (n * h.blocks + blk) * half, (size_t)half);
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

/* Chunk ch of column c of group g (32 weights in the re-ordered k) into w; zeros past the
 * blocks (a block of 16 leaves the last chunk half empty when their count is odd). */
static void dequant_chunk(const tm__nbits_packed *h, const uint8_t *data, int64_t g, int c,
                          int64_t ch, float *w) {
    int64_t half = h->block / 2;
    /* Bytes [8s, 8s + 8) of the chunk hold k in [32ch + 16s, 32ch + 16s + 16): one block. */
    for (int s = 0; s < 2; s++) {
        int64_t k0 = TM_NBITS_CHUNK * ch + 16 * s, blk = k0 / h->block;
        if (blk >= h->blocks) {
            for (int p = 8 * s; p < 8 * s + 8; p++) w[p] = w[16 + p] = 0.0f;
            continue;
        }
        const uint8_t *rec = data + (g * h->blocks + blk) * h->record;
        const uint8_t *bytes = rec + c * half + (k0 % h->block) / 2;
        float scale, zp;
        record_params(h, rec, c, &scale, &zp);
        for (int p = 0; p < 8; p++) {
            w[8 * s + p] = ((float)(bytes[p] & 15) - zp) * scale;
            w[16 + 8 * s + p] = ((float)(bytes[p] >> 4) - zp) * scale;
        }
    }
}

static void gemv_portable(const tm__nbits_packed *h, const uint8_t *data, const float *a,
                          int64_t lda, int rows, int64_t g0, int64_t g1, float *y, int64_t ldy) {
    int64_t chunks = padded_k(h->k, h->block) / TM_NBITS_CHUNK;
    for (int64_t g = g0; g < g1; g++)
        for (int c = 0; c < TM_NBITS_GROUP && g * TM_NBITS_GROUP + c < h->n; c++) {
            float acc[4][TM_NBITS_CHUNK];
            memset(acc, 0, sizeof acc);
            for (int64_t ch = 0; ch < chunks; ch++) {
                float w[TM_NBITS_CHUNK];
                dequant_chunk(h, data, g, c, ch, w);
                for (int r = 0; r < rows; r++)
                    for (int p = 0; p < TM_NBITS_CHUNK; p++)
                        acc[r][p] += w[p] * a[r * lda + ch * TM_NBITS_CHUNK + p];
            }
            for (int r = 0; r < rows; r++) {
                float sum = 0.0f;
                for (int p = 0; p < TM_NBITS_CHUNK; p++) sum += acc[r][p];
                y[r * ldy + g * TM_NBITS_GROUP + c] = sum;
            }
        }
}

static void dequant_portable(const tm__nbits_packed *h, const uint8_t *data, int64_t g0,
                             int groups, int64_t c0, int64_t chunks, float *w, int64_t ldw) {
    for (int gi = 0; gi < groups; gi++)
        for (int c = 0; c < TM_NBITS_GROUP; c++)
            for (int64_t ch = c0; ch < c0 + chunks; ch++)
                dequant_chunk(h, data, g0 + gi, c, ch,
                              w + (gi * TM_NBITS_GROUP + c) * ldw + (ch - c0) * TM_NBITS_CHUNK);
}

/* The AVX-512 kernels take blocks of 32 or more (a chunk inside one block). */
static tm__nbits_gemv_fn gemv_of(const kernels *kr, const tm__nbits_packed *h) {
    return kr->arch && h->block >= TM_NBITS_CHUNK ? kr->arch->gemv : gemv_portable;
}

static tm__nbits_dequant_fn dequant_of(const kernels *kr, const tm__nbits_packed *h) {
    return kr->arch && h->block >= TM_NBITS_CHUNK ? kr->arch->dequant : dequant_portable;
}

/* Row i of a in the kernels' order: within each 32, the even k then the odd k. */
static void reorder_row(const float *a, int64_t k, int64_t k_pad, float *dst, int64_t step) {
    for (int64_t c = 0; c < k_pad; c += TM_NBITS_CHUNK)
        for (int p = 0; p < TM_NBITS_CHUNK; p++) {
            int64_t src = c + (p < 16 ? 2 * p : 2 * (p - 16) + 1);
            dst[(c + p) * step] = src < k ? a[src] : 0.0f;
        }
}

/* ---- The GEMV path -------------------------------------------------------------------- */

typedef struct gemv_job {
    const tm__nbits_packed *h;
    const uint8_t *data;
    tm__nbits_gemv_fn gemv;
    int64_t m;
    const float *a;       /* re-ordered rows, k_pad apart */
    int64_t k_pad;
    float *y;
    const tm_sgemm_epilogue *ep;
    _Atomic int64_t next; /* first unclaimed column group (claim.h) */
} gemv_job;

static void gemv_slice(void *arg, int ith, int nth) {
    gemv_job *jb = arg;
    (void)ith;
    int64_t g0, g1;
    while ((g0 = tm__claim(&jb->next, jb->h->groups, nth, 4, &g1)) < jb->h->groups) {
        for (int64_t r = 0; r < jb->m; r += 4) {
            int rows = (int)min64(4, jb->m - r);
            jb->gemv(jb->h, jb->data, jb->a + r * jb->k_pad, jb->k_pad, rows, g0, g1,
                     jb->y + r * jb->h->n, jb->h->n);
        }
        tm_sgemm_epilogue_apply(jb->ep, jb->y, jb->h->n, 0, jb->m, g0 * TM_NBITS_GROUP,
                                min64(g1 * TM_NBITS_GROUP, jb->h->n));
    }
}

/* ---- The tile path -------------------------------------------------------------------- */

/* Column groups dequantized per step: 12 columns, whole tiles for mr 12 or 6. */
#define STEP_GROUPS 3
#define STEP_COLUMNS (STEP_GROUPS * TM_NBITS_GROUP)

typedef struct tile_job {
    const tm__nbits_packed *h;
    const uint8_t *data;
    const tm__sgemm_arch *ar;
    tm__nbits_dequant_fn dequant;
    tm__nbits_pack_fn pack;
    tm__nbits_store_fn store;
    int64_t m;
    const float *a;
    float *y;
    float *panels;        /* row panels: (k_pad, ar->nr) each, ar->nr rows of a */
    int64_t k_pad, row_panels;
    _Atomic int64_t next; /* first unclaimed column step (claim.h) */
} tile_job;

/* Portable tm__nbits_pack_fn: chunk by chunk, so that the 32 x nr floats being written stay
 * in L1 while each row's 32 values are read in order. */
static void pack_portable(const float *a, int64_t k, int64_t k_pad, int rows, int nr,
                          float *panel) {
    for (int64_t c = 0; c < k_pad; c += TM_NBITS_CHUNK) {
        float *dst = panel + c * nr;
        for (int lane = 0; lane < nr; lane++) {
            if (lane >= rows) {
                for (int p = 0; p < TM_NBITS_CHUNK; p++) dst[p * nr + lane] = 0.0f;
                continue;
            }
            const float *src = a + lane * k;
            for (int p = 0; p < 16; p++) {
                int64_t even = c + 2 * p, odd = even + 1;
                dst[p * nr + lane] = even < k ? src[even] : 0.0f;
                dst[(16 + p) * nr + lane] = odd < k ? src[odd] : 0.0f;
            }
        }
    }
}

static void store_portable(const float *acc, int nr, int rows, int cols, float *y, int64_t ldy) {
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++) y[r * ldy + j] = acc[j * nr + r];
}

static void pack_slice(void *arg, int ith, int nth) {
    const tile_job *jb = arg;
    int nr = jb->ar->nr;
    for (int64_t rp = jb->row_panels * ith / nth; rp < jb->row_panels * (ith + 1) / nth; rp++)
        jb->pack(jb->a + rp * nr * jb->h->k, jb->h->k, jb->k_pad, (int)min64(nr, jb->m - rp * nr),
                 nr, jb->panels + rp * jb->k_pad * nr);
}

/* The columns of groups [g0, g0 + groups) for every row. The weights are the tile's A
 * (one row per column, broadcast element by element), the row panels its packed B, so
 * each output tile is (columns, rows) and is stored transposed. */
static void column_step(const tile_job *jb, int64_t g0, int groups) {
    const tm__nbits_packed *h = jb->h;
    const tm__sgemm_arch *ar = jb->ar;
    int mr = ar->mr, nr = ar->nr;
    int64_t n0 = g0 * TM_NBITS_GROUP;
    int cols = (int)min64(groups * TM_NBITS_GROUP, h->n - n0);
    /* The tile reads mr rows of w from each call's first row: room for the last call. */
    _Alignas(64) float w[(STEP_COLUMNS + 16) * SLICE_K];
    _Alignas(64) float acc[ROW_PANELS][STEP_COLUMNS * 32];   /* (columns, nr <= 32) */
    if (mr > 16 || nr > 32) abort();   /* an arch table out of step with this file */
    /* Rows the last tile call reads past the dequantized ones: zeros (no garbage floats). */
    int dequantized = groups * TM_NBITS_GROUP, read = (cols + mr - 1) / mr * mr;
    if (read > dequantized)
        memset(w + dequantized * SLICE_K, 0, sizeof(float) * (size_t)((read - dequantized) * SLICE_K));
    for (int64_t rp0 = 0; rp0 < jb->row_panels; rp0 += ROW_PANELS) {
        int64_t rps = min64(ROW_PANELS, jb->row_panels - rp0);
        for (int64_t k0 = 0; k0 < jb->k_pad; k0 += SLICE_K) {
            int64_t kc = min64(SLICE_K, jb->k_pad - k0);
            jb->dequant(h, jb->data, g0, groups, k0 / TM_NBITS_CHUNK, kc / TM_NBITS_CHUNK, w, SLICE_K);
            for (int64_t rp = 0; rp < rps; rp++) {
                int rows = (int)min64(nr, jb->m - (rp0 + rp) * nr);
                const float *panel = jb->panels + ((rp0 + rp) * jb->k_pad + k0) * nr;
                for (int c0 = 0; c0 < cols; c0 += mr) {
                    /* A full tile of columns: the tile over A's rows in place (the dequantized
                     * columns are its rows, SLICE_K apart), with no strides to spill. */
                    if (cols - c0 >= mr && ar->tile_rows)
                        ar->tile_rows(kc, w + c0 * SLICE_K, SLICE_K, panel, acc[rp] + c0 * nr,
                                      nr, rows, k0 ? 1.0f : 0.0f);
                    else
                        ar->tile(kc, w + c0 * SLICE_K, SLICE_K, 1, panel, acc[rp] + c0 * nr, nr,
                                 (int)min64(mr, cols - c0), rows, 1.0f, k0 ? 1.0f : 0.0f);
                }
            }
        }
        for (int64_t rp = 0; rp < rps; rp++) {
            int64_t row0 = (rp0 + rp) * nr;
            jb->store(acc[rp], nr, (int)min64(nr, jb->m - row0), cols, jb->y + row0 * h->n + n0, h->n);
        }
    }
}

static void tile_slice(void *arg, int ith, int nth) {
    tile_job *jb = arg;
    (void)ith;
    int64_t steps = (jb->h->groups + STEP_GROUPS - 1) / STEP_GROUPS, t0, t1;
    while ((t0 = tm__claim(&jb->next, steps, nth, 1, &t1)) < steps)
        for (int64_t t = t0; t < t1; t++) {
            int64_t g0 = t * STEP_GROUPS;
            column_step(jb, g0, (int)min64(STEP_GROUPS, jb->h->groups - g0));
        }
}

typedef struct epilogue_job {
    const tm_sgemm_epilogue *ep;
    float *y;
    int64_t m, n;
} epilogue_job;

static void epilogue_slice(void *arg, int ith, int nth) {
    const epilogue_job *j = arg;
    tm_sgemm_epilogue_apply(j->ep, j->y, j->n, j->m * ith / nth, j->m * (ith + 1) / nth, 0, j->n);
}

static void run(tm_pool *pool, int nth, tm_pool_fn fn, void *arg) {
    if (nth <= 1) fn(arg, 0, 1);
    else tm_pool_run(pool, nth, fn, arg);
}

static int threads_for(int64_t units, int64_t n, int64_t k, tm_pool *pool) {
    int nth = (double)n * (double)k < PARALLEL_MIN_WEIGHTS ? 1 : tm_pool_threads(pool);
    return units < nth ? (int)units : nth;
}

/* ---- The panel path ------------------------------------------------------------------
 * Many rows: PANEL_COLS columns at a time dequantized over the whole of K (in the
 * kernels' k order) and laid out as the packed-B GEMM's panels, then multiplied by every
 * re-ordered row with tm_sgemm_bpacked, whose micro-kernel reads the rows where they lie
 * at the f32 GEMM's speed; the epilogue runs on each tile there. One panel's
 * dequantization serves all rows. */

typedef struct panel_job {
    const tm__nbits_packed *h;
    const uint8_t *data;
    tm__nbits_panel_fn to_panel;
    int64_t m, k_pad;
    const float *a;       /* re-ordered rows, k_pad apart */
    float *y;
    const tm_sgemm_epilogue *ep;
    float *slots;         /* PANEL_SLOTS buffers of panel_slot_floats(k_pad) */
    int64_t cols;         /* columns per claimed panel: 32, 64 or PANEL_COLS */
    int panel, depth;
    _Atomic int64_t next; /* first unclaimed panel (claim.h) */
} panel_job;

typedef struct reorder_job {
    const float *a;
    float *dst;
    int64_t m, k, k_pad;
} reorder_job;

static void reorder_slice(void *arg, int ith, int nth) {
    const reorder_job *j = arg;
    for (int64_t r = j->m * ith / nth; r < j->m * (ith + 1) / nth; r++)
        reorder_row(j->a + r * j->k, j->k, j->k_pad, j->dst + r * j->k_pad, 1);
}

static void panel_slice(void *arg, int ith, int nth) {
    panel_job *jb = arg;
    const tm__nbits_packed *h = jb->h;
    float *packed = jb->slots + ith * panel_slot_floats(jb->k_pad);
    int64_t cols = jb->cols, panels = (h->n + cols - 1) / cols, p0, p1;
    int groups_per = (int)(cols / TM_NBITS_GROUP);
    while ((p0 = tm__claim(&jb->next, panels, nth, 1, &p1)) < panels)
        for (int64_t p = p0; p < p1; p++) {
            int64_t n0 = p * cols, g0 = n0 / TM_NBITS_GROUP;
            int64_t width = min64(cols, h->n - n0);
            int groups = (int)min64(groups_per, h->groups - g0);
            /* gemm.h's layout: depth block after depth block, in each every 32-column
             * panel of the block's rows. */
            int64_t panels32 = (width + 31) / 32;
            for (int64_t d0 = 0; d0 < jb->k_pad; d0 += jb->depth) {
                int64_t rows = min64(jb->depth, jb->k_pad - d0);
                for (int64_t q = 0; q < panels32; q++)
                    jb->to_panel(h, jb->data, g0 + q * 8, (int)min64(8, groups - q * 8),
                                 d0 / TM_NBITS_CHUNK, rows / TM_NBITS_CHUNK,
                                 packed + d0 * panels32 * 32 + q * rows * 32);
            }
            tm_sgemm_epilogue ep, *use = NULL;
            if (jb->ep) {
                ep = *jb->ep;
                if (ep.bias) ep.bias += n0;
                if (ep.residual) ep.residual += n0;
                use = &ep;
            }
            tm_sgemm_bpacked(jb->m, width, jb->k_pad, jb->a, jb->k_pad, packed, jb->panel,
                             jb->depth, jb->y + n0, h->n, use, NULL);
        }
}

static void run(tm_pool *pool, int nth, tm_pool_fn fn, void *arg);
static int threads_for(int64_t units, int64_t n, int64_t k, tm_pool *pool);

static void panel_path(const tm__nbits_packed *h, const uint8_t *data, const kernels *kr,
                       int64_t m, const float *a, float *y, float *buf,
                       const tm_sgemm_epilogue *ep, tm_pool *pool) {
    int64_t k_pad = padded_k(h->k, h->block);
    float *rows = buf, *slots = buf + round_up(m, 32) * k_pad;
    reorder_job rj = {a, rows, m, h->k, k_pad};
    run(pool, threads_for(m, h->n, h->k, pool), reorder_slice, &rj);
    panel_job jb = {h, data, kr->arch->panel, m, k_pad, rows, y, ep, slots, PANEL_COLS, 0, 0, 0};
    tm_sgemm_pack_layout(&jb.panel, &jb.depth);
    int nth = threads_for((h->n + 31) / 32, h->n, h->k, pool);
    if (nth > PANEL_SLOTS) nth = PANEL_SLOTS;
    /* Narrower panels where wide ones would leave a thread idle (N = 384 on 2 threads:
     * three panels of 128). */
    while (jb.cols > 32 && (h->n + jb.cols - 1) / jb.cols < 3 * nth) jb.cols /= 2;
    if (nth <= 1) panel_slice(&jb, 0, 1);
    else tm_pool_run(pool, nth, panel_slice, &jb);
}

void tm_nbits_matmul(const void *packed, int64_t m, const float *a, float *y, void *scratch,
                     const tm_sgemm_epilogue *ep, tm_pool *pool) {
    kernels kr;
    if (m <= 0) return;
    if (!pick(&kr)) {
        /* The reference: portable C, one pass over the weights per 4 rows. */
        kr.arch = NULL;
        kr.tile = NULL;
    }
    tm__nbits_packed h;
    memcpy(&h, packed, sizeof h);
    const uint8_t *data = (const uint8_t *)packed + h.data_offset;
    int64_t k_pad = padded_k(h.k, h.block);
    float *buf = (float *)(((uintptr_t)scratch + 63) & ~(uintptr_t)63);
    if (m <= GEMV_MAX_ROWS || !kr.tile) {
        for (int64_t r = 0; r < m; r++) reorder_row(a + r * h.k, h.k, k_pad, buf + r * k_pad, 1);
        int nth = threads_for(h.groups, h.n, h.k, pool);
        gemv_job jb = {&h, data, gemv_of(&kr, &h), m, buf, k_pad, y, ep, 0};
        run(pool, nth, gemv_slice, &jb);
        return;
    }
    int panel_width, panel_depth;
    tm_sgemm_pack_layout(&panel_width, &panel_depth);
    if (m >= PANEL_MIN_ROWS && kr.arch && kr.arch->panel && panel_width == 32 &&
        panel_depth % TM_NBITS_CHUNK == 0 &&
        h.block >= TM_NBITS_CHUNK && !getenv("TM_NBITS_TILE")) {
        panel_path(&h, data, &kr, m, a, y, buf, ep, pool);
        return;
    }
    int simd = kr.arch && kr.tile->nr % 16 == 0;
    tile_job jb = {&h, data, kr.tile, dequant_of(&kr, &h), simd ? kr.arch->pack : pack_portable,
                   simd ? kr.arch->store : store_portable, m, a, y, buf, k_pad,
                   (m + kr.tile->nr - 1) / kr.tile->nr, 0};
    run(pool, threads_for(jb.row_panels, h.n, h.k, pool), pack_slice, &jb);
    int64_t steps = (h.groups + STEP_GROUPS - 1) / STEP_GROUPS;
    run(pool, threads_for(steps, h.n, h.k, pool), tile_slice, &jb);
    /* The tile path finishes 12 columns at a time: its epilogue runs afterwards over whole
     * rows (one pass over y, where the unfused graph made one per step), split by rows. */
    if (ep) {
        epilogue_job ej = {ep, y, m, h.n};
        run(pool, threads_for(m, h.n, h.k, pool), epilogue_slice, &ej);
    }
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
