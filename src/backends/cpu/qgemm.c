/* tm_qgemm: the exact 8-bit GEMM behind MATMUL_INTEGER. Packs B (plan time, through a
 * constant-folded primitive), re-centres A when it is signed, computes the row sums the
 * zero points need, and runs a micro-kernel (qgemm_amx.c, qgemm_avx512.c, qgemm_avx2.c) over
 * column panels (or tiles of rows) split across the pool; or the plain C reference on the
 * same packed B. */
#include <stdlib.h>
#include <string.h>
#include "claim.h"
#include "gemm.h"   /* tm_use_reference_kernels */
#include "qgemm.h"

#define PACK_MAGIC 0x42514d54u   /* "TMQB" */
#define PACK_VERSION 1u
#define PANEL_BYTES(quads) ((quads) * TM_QGEMM_NR * TM_QGEMM_KQ)
/* Below this many multiply-adds a product runs on the calling thread. */
#define PARALLEL_MIN_MACS (1 << 16)
/* Rows of A per pass over a piece's panels: this many bytes of A (L2 holds them). */
#define ROW_BLOCK_BYTES (256 << 10)

static int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

static int64_t panels_of(int64_t n) { return (n + TM_QGEMM_NR - 1) / TM_QGEMM_NR; }

/* Offsets of the packed layout's parts, each on a 64-byte boundary. */
static void layout(int64_t k, int64_t n, tm__qgemm_packed *h) {
    memset(h, 0, sizeof *h);
    h->magic = PACK_MAGIC;
    h->version = PACK_VERSION;
    h->k = k;
    h->n = n;
    h->quads = (k + TM_QGEMM_KQ - 1) / TM_QGEMM_KQ;
    h->panels = panels_of(n);
    int64_t cols = h->panels * TM_QGEMM_NR;
    h->zb_offset = round_up((int64_t)sizeof *h, 64);
    h->colterm_offset = h->zb_offset + round_up(cols * 4, 64);
    h->panel_offset = h->colterm_offset + round_up(cols * 4, 64);
}

size_t tm_qgemm_packed_size(int64_t k, int64_t n) {
    tm__qgemm_packed h;
    layout(k, n, &h);
    return (size_t)(h.panel_offset + h.panels * PANEL_BYTES(h.quads));
}

int tm_qgemm_packed_check(const void *p, size_t bytes, int64_t k, int64_t n) {
    if (!p || k <= 0 || n <= 0 || bytes != tm_qgemm_packed_size(k, n)) return 0;
    tm__qgemm_packed h, want;
    memcpy(&h, p, sizeof h);
    layout(k, n, &want);
    want.zb_any = h.zb_any;
    return !memcmp(&h, &want, sizeof h);
}

/* Element i of an 8-bit tensor as an int. */
static int32_t load8(const void *p, int is_signed, int64_t i) {
    return is_signed ? ((const int8_t *)p)[i] : ((const uint8_t *)p)[i];
}

void tm_qgemm_pack_b(const void *b, int b_signed, int b_trans, int64_t ldb, int64_t k, int64_t n,
                     const void *zb, int64_t zb_count, void *dst) {
    tm__qgemm_packed h;
    layout(k, n, &h);
    uint8_t *base = dst;
    memset(base, 0, tm_qgemm_packed_size(k, n));
    int32_t *zbc = (int32_t *)(base + h.zb_offset);
    int32_t *colterm = (int32_t *)(base + h.colterm_offset);
    int8_t *panels = (int8_t *)(base + h.panel_offset);
    /* Unsigned B becomes signed by subtracting 128 from values and zero points alike, so
     * every difference B - zb is unchanged. */
    int32_t shift = b_signed ? 0 : 128;
    uint32_t *sums = (uint32_t *)colterm;   /* wrapping, like the kernels' int32 sums */
    for (int64_t j = 0; j < n; j++) {
        zbc[j] = load8(zb, b_signed, zb_count == 1 ? 0 : j) - shift;
        if (zbc[j]) h.zb_any = 1;
    }
    /* Re-centring uint8 is flipping the top bit: b - 128 as int8. */
    const uint8_t flip = b_signed ? 0 : 0x80;
    if (b_trans) {
        /* Column by column: each is a row of the given matrix, read in order. */
        for (int64_t j = 0; j < n; j++) {
            const uint8_t *src = (const uint8_t *)b + j * ldb;
            int8_t *col = panels + (j / TM_QGEMM_NR) * PANEL_BYTES(h.quads) +
                          (j % TM_QGEMM_NR) * TM_QGEMM_KQ;
            for (int64_t p = 0; p < k; p++) {
                int8_t v = (int8_t)(src[p] ^ flip);
                col[(p / TM_QGEMM_KQ) * TM_QGEMM_NR * TM_QGEMM_KQ + p % TM_QGEMM_KQ] = v;
                sums[j] += (uint32_t)(int32_t)v;
            }
        }
    }
    /* Four rows (one group of k) at a time, so that B is read in order however large it
     * is and each packed column's 4 bytes are written together. */
    for (int64_t p0 = 0; !b_trans && p0 < k; p0 += TM_QGEMM_KQ) {
        int rows = (int)(k - p0 < TM_QGEMM_KQ ? k - p0 : TM_QGEMM_KQ);
        const uint8_t *src[TM_QGEMM_KQ];
        for (int r = 0; r < TM_QGEMM_KQ; r++) src[r] = (const uint8_t *)b + (p0 + (r < rows ? r : 0)) * ldb;
        int8_t *quad = panels + (p0 / TM_QGEMM_KQ) * TM_QGEMM_NR * TM_QGEMM_KQ;
        for (int64_t j0 = 0; j0 < n; j0 += TM_QGEMM_NR) {
            int8_t *dst = quad + (j0 / TM_QGEMM_NR) * PANEL_BYTES(h.quads);
            int64_t cols = n - j0 < TM_QGEMM_NR ? n - j0 : TM_QGEMM_NR;
            if (rows == TM_QGEMM_KQ) {
                const uint8_t *restrict s0 = src[0] + j0, *restrict s1 = src[1] + j0;
                const uint8_t *restrict s2 = src[2] + j0, *restrict s3 = src[3] + j0;
                uint32_t *restrict sum = sums + j0;
                uint8_t *restrict d = (uint8_t *)dst;
                for (int64_t c = 0; c < cols; c++) {
                    d[4 * c] = s0[c] ^ flip;
                    d[4 * c + 1] = s1[c] ^ flip;
                    d[4 * c + 2] = s2[c] ^ flip;
                    d[4 * c + 3] = s3[c] ^ flip;
                }
                for (int64_t c = 0; c < cols; c++)
                    sum[c] += (uint32_t)((int32_t)(int8_t)(s0[c] ^ flip) + (int8_t)(s1[c] ^ flip) +
                                         (int8_t)(s2[c] ^ flip) + (int8_t)(s3[c] ^ flip));
                continue;
            }
            for (int64_t c = 0; c < cols; c++)   /* the last group: rows past k stay zero */
                for (int r = 0; r < rows; r++) {
                    int8_t v = (int8_t)(src[r][j0 + c] ^ flip);
                    dst[c * TM_QGEMM_KQ + r] = v;
                    sums[j0 + c] += (uint32_t)(int32_t)v;
                }
        }
    }
    for (int64_t j = 0; j < n; j++) sums[j] -= (uint32_t)k * (uint32_t)zbc[j];
    memcpy(base, &h, sizeof h);
}

/* ---- The reference ------------------------------------------------------------------ */

static void store(const tm_qgemm_args *g, int64_t i, int64_t j, uint32_t acc) {
    int32_t v;
    memcpy(&v, &acc, sizeof v);   /* two's complement, as the kernels' wrapping sums */
    if (g->c_int) {
        g->c_int[i * g->ldc + j] = v;
        return;
    }
    float y = (float)v * g->scale[g->scale_count == 1 ? 0 : j];
    if (g->bias) y = y + g->bias[g->bias_count == 1 ? 0 : j];
    g->c_float[i * g->ldc + j] = y;
}

void tm_qgemm_reference(const tm_qgemm_args *g) {
    tm__qgemm_packed h;
    memcpy(&h, g->b_packed, sizeof h);
    const uint8_t *base = g->b_packed;
    const int32_t *zbc = (const int32_t *)(base + h.zb_offset);
    const int8_t *panels = (const int8_t *)(base + h.panel_offset);
    for (int64_t i = 0; i < g->m; i++) {
        int32_t za = load8(g->za, g->a_signed, g->za_count == 1 ? 0 : i % g->za_count);
        for (int64_t j = 0; j < g->n; j++) {
            const int8_t *col = panels + (j / TM_QGEMM_NR) * PANEL_BYTES(h.quads) +
                                (j % TM_QGEMM_NR) * TM_QGEMM_KQ;
            uint32_t acc = 0;
            for (int64_t p = 0; p < g->k; p++) {
                int32_t a = load8(g->a, g->a_signed, i * g->lda + p) - za;
                int32_t b = col[(p / TM_QGEMM_KQ) * TM_QGEMM_NR * TM_QGEMM_KQ + p % TM_QGEMM_KQ] -
                            zbc[j];
                acc += (uint32_t)a * (uint32_t)b;
            }
            store(g, i, j, acc);
        }
        if (g->epilogue && g->c_float) tm_sgemm_epilogue_apply(g->epilogue, g->c_float, g->ldc, i, i + 1, 0, g->n);
    }
}

/* ---- Dispatch ------------------------------------------------------------------------ */

static const tm__qgemm_arch *pick_arch(void) {
    if (tm_use_reference_kernels()) return NULL;
    const char *isa = getenv("TM_KERNEL_ISA");
    int allow_amx = !isa || !strcmp(isa, "amx");
    int allow512 = allow_amx || !strcmp(isa, "avx512"), allow2 = allow512 || !strcmp(isa, "avx2");
    const tm__qgemm_arch *ar = allow_amx ? tm__qgemm_arch_amx() : NULL;
    if (!ar && allow512) ar = tm__qgemm_arch_avx512();
    if (!ar && allow2) ar = tm__qgemm_arch_avx2();
    return ar;
}

const char *tm_qgemm_kernel_name(void) {
    const tm__qgemm_arch *ar = pick_arch();
    return ar ? ar->name : "reference";
}

size_t tm_qgemm_scratch(int64_t m, int64_t k, int a_signed) {
    size_t bytes = (size_t)m * 2 * sizeof(int32_t) + 64;
    if (a_signed) bytes += (size_t)(m * k);
    return bytes;
}

typedef struct qgemm_job {
    const tm_qgemm_args *g;
    const tm__qgemm_arch *ar;
    const tm__qgemm_packed *h;
    const uint8_t *a;          /* uint8 form */
    int64_t lda;
    const int32_t *za, *rowsum;
    _Atomic int64_t next;      /* first unclaimed panel, or tile of rows (claim.h) */
    int by_rows;               /* threads claim tiles of rows (each over every panel) */
    int64_t per;               /* panels per run of the f32 epilogue (epilogue_panels) */
} qgemm_job;

/* Panels per run of an epilogue that has an activation: its maths want rows of 128
 * columns, not of one panel's 64 (GELU over 64 floats at a time took 0.83 ns a float,
 * over 128 0.53: too few independent vectors per call). */
#define ACTIVATION_PANELS 2

static int64_t epilogue_panels(const tm_qgemm_args *g) {
    return g->epilogue && g->c_float && g->epilogue->activation ? ACTIVATION_PANELS : 1;
}

/* Rows [r0, r1) of panels [p0, p1), in blocks of rows whose A stays in L2 while it meets
 * each of the panels (a panel alone stays in L1 for the tiles of one block). The f32
 * epilogue runs on each tile as it is stored; with an activation, on the block's rows
 * once every ACTIVATION_PANELS panels instead (in L2 still). */
static void panels(const qgemm_job *jb, int64_t r0, int64_t r1, int64_t p0, int64_t p1) {
    const tm_qgemm_args *g = jb->g;
    const tm__qgemm_packed *h = jb->h;
    const uint8_t *base = g->b_packed;
    int64_t step = jb->ar->mr, block = ROW_BLOCK_BYTES / (g->k > 0 ? g->k : 1) / step * step;
    if (block < step) block = step;
    int64_t per = jb->per;
    if (jb->ar->begin) jb->ar->begin();
    for (int64_t i0 = r0; i0 < r1; i0 += block) {
        int64_t i1 = r1 - i0 < block ? r1 : i0 + block;
        for (int64_t p = p0; p < p1; p++) {
            int64_t j = p * TM_QGEMM_NR;
            int nr = (int)(g->n - j < TM_QGEMM_NR ? g->n - j : TM_QGEMM_NR);
            const int8_t *panel = (const int8_t *)(base + h->panel_offset) + p * PANEL_BYTES(h->quads);
            for (int64_t i = i0; i < i1; i += step) {
                int mr = (int)(i1 - i < step ? i1 - i : step);
                tm__qgemm_epilogue e = {
                    jb->za + i,
                    jb->rowsum ? jb->rowsum + i : NULL,
                    (const int32_t *)(base + h->zb_offset) + j,
                    (const int32_t *)(base + h->colterm_offset) + j,
                    g->c_int ? g->c_int + i * g->ldc + j : NULL,
                    g->c_float ? g->c_float + i * g->ldc + j : NULL,
                    g->ldc,
                    g->scale ? g->scale + (g->scale_count == 1 ? 0 : j) : NULL,
                    g->bias ? g->bias + (g->bias_count == 1 ? 0 : j) : NULL,
                    g->scale_count != 1,
                    g->bias_count != 1,
                };
                jb->ar->tile(g->k, jb->a + i * jb->lda, jb->lda, mr, panel, nr, &e);
                if (per == 1 && g->epilogue && g->c_float)
                    tm_sgemm_epilogue_apply(g->epilogue, g->c_float, g->ldc, i, i + mr, j, j + nr);
            }
            if (per > 1 && ((p + 1 - p0) % per == 0 || p + 1 == p1))
                tm_sgemm_epilogue_apply(g->epilogue, g->c_float, g->ldc, i0, i1,
                                        (p - (p - p0) % per) * TM_QGEMM_NR, j + nr);
        }
    }
    if (jb->ar->end) jb->ar->end();
}

static void panel_slice(void *arg, int ith, int nth) {
    qgemm_job *jb = arg;
    (void)ith;
    int64_t p0, p1 = 0;
    if (jb->by_rows) {
        int64_t step = jb->ar->mr, tiles = (jb->g->m + step - 1) / step;
        while ((p0 = tm__claim(&jb->next, tiles, nth, 1, &p1)) < tiles)
            panels(jb, p0 * step, p1 * step < jb->g->m ? p1 * step : jb->g->m, 0, jb->h->panels);
        return;
    }
    /* Whole groups of the epilogue's panels. */
    int64_t per = jb->per, groups = (jb->h->panels + per - 1) / per;
    while ((p0 = tm__claim(&jb->next, groups, nth, 1, &p1)) < groups)
        panels(jb, 0, jb->g->m, p0 * per, p1 * per < jb->h->panels ? p1 * per : jb->h->panels);
}

void tm_qgemm(const tm_qgemm_args *g, void *scratch, tm_pool *pool) {
    if (g->m <= 0 || g->n <= 0) return;
    const tm__qgemm_arch *ar = pick_arch();
    if (!ar || !scratch) {
        tm_qgemm_reference(g);
        return;
    }
    tm__qgemm_packed h;
    memcpy(&h, g->b_packed, sizeof h);
    uintptr_t at = ((uintptr_t)scratch + 63) & ~(uintptr_t)63;
    int32_t *za = (int32_t *)at, *rowsum = za + g->m;
    const uint8_t *a = g->a;
    int64_t lda = g->lda;
    /* Signed A becomes unsigned by adding 128 to values and zero points alike. */
    int32_t shift = g->a_signed ? 128 : 0;
    if (g->a_signed) {
        uint8_t *au = (uint8_t *)(rowsum + g->m);
        for (int64_t i = 0; i < g->m; i++)
            for (int64_t p = 0; p < g->k; p++)
                au[i * g->k + p] = (uint8_t)(((const uint8_t *)g->a)[i * g->lda + p] ^ 0x80u);
        a = au;
        lda = g->k;
    }
    for (int64_t i = 0; i < g->m; i++)
        za[i] = load8(g->za, g->a_signed, g->za_count == 1 ? 0 : i % g->za_count) + shift;
    if (h.zb_any)
        for (int64_t i = 0; i < g->m; i++) {
            uint32_t s = 0;
            for (int64_t p = 0; p < g->k; p++) s += a[i * lda + p];
            rowsum[i] = (int32_t)s;
        }
    double macs = (double)g->m * (double)g->n * (double)g->k;
    int nth = macs < PARALLEL_MIN_MACS ? 1 : tm_pool_threads(pool);
    /* Threads take tiles of rows, each over every panel, where the arch asks for it and
     * each thread gets at least 4 (AMX: split by panels, each thread went through all of
     * A for a share of the columns, and two threads did the work of 1.1-1.5). */
    int by_rows = ar->split_rows && g->m >= 4 * (int64_t)ar->mr * nth;
    int64_t per = epilogue_panels(g), units = (h.panels + per - 1) / per;
    if (!by_rows && nth > units) nth = (int)units;
    qgemm_job jb = {g, ar, &h, a, lda, za, h.zb_any ? rowsum : NULL, 0, by_rows, per};
    if (nth <= 1) panels(&jb, 0, g->m, 0, h.panels);
    else tm_pool_run(pool, nth, panel_slice, &jb);
}
