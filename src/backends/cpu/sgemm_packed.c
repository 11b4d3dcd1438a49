/* f32 GEMM with one operand packed once, ahead of the runs (a plan's constant weights):
 * B in the micro-kernel's column panels (MatMul weights: C = A B), or A in its row panels
 * (convolution weights: C = W X, X packed per call), each with an epilogue (bias,
 * activation, residual) applied to a tile while it is still in cache. Also the packing
 * and plain reference loops over the packed layouts. Not the per-call GEMM (gemm.c). */
#if defined(__GNUC__) && !defined(__clang__)
/* -O2 leaves plain loops scalar (GCC's very-cheap vector cost model); these loops run
 * over every element they touch: the full vectorizer. No floating-point contraction:
 * each step rounds as the unfused primitive does. */
#pragma GCC optimize("O3", "no-trapping-math")
#endif
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "gemm.h"

/* Layouts for the reference (no micro-kernel): any panel works for plain loops. */
#define REFERENCE_PANEL 16
#define REFERENCE_DEPTH 256
/* Depth blocks of packed B: a whole K of up to this many in one block, so that each C
 * tile is written once (its panels stream from L2 either way). */
#define B_DEPTH 512
/* Columns of a task: B's block (depth x this, 512 KB at most) stays in L2 while row tiles
 * sweep it; a wider one would be read again from memory by every row tile. */
#define TASK_COLUMNS 256
/* Rows of a task at most, in register tiles (22 x 12 = 264 rows): A's block (rows x
 * depth, about 270 KB) stays in L2 while B's block streams once from memory for all of
 * them; fewer rows per task only when the threads need more tasks. */
#define TASK_TILES 22
/* Tasks of at most this many rows take the panels one by one, every row tile on each,
 * the first tiles fetching the next panel meanwhile (a task of 11 row tiles, 128 x 384 x
 * 384 with B cold: 133 -> 142 GFLOP/s; no better from 22). */
#define PANEL_MAJOR_ROWS 132
/* Products of at most this many rows (a short prefill) split their columns over threads
 * down to two panels: each row group would stream B again. */
#define FEW_ROWS 48
/* Slices per thread: a descheduled thread (a shared machine) then holds little work.
 * The per-call packing path gives each slice its own region of scratch, so it also caps
 * the slices (scratch must not depend on the thread count). */
#define SLICES_PER_THREAD 4
#define MAX_PACKING_SLICES 16
/* Below about 20 microseconds of one core's work a product runs on one thread: waking a
 * sleeping worker costs that much on a busy machine. A decode step's few rows are bound
 * by reading B: their bar is B's size. */
#define PARALLEL_MIN_FLOPS (1 << 21)
#define PARALLEL_MIN_STREAM_BYTES (512 << 10)
#define EDGE_FLOATS (16 * 512)

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t round_up(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

void tm_sgemm_pack_layout(int *panel, int *depth) {
    const tm__sgemm_arch *ar = tm__sgemm_active_arch();
    *panel = ar ? ar->nr : REFERENCE_PANEL;
    *depth = ar ? B_DEPTH : REFERENCE_DEPTH;
}

void tm_sgemm_pack_a_layout(int *panel, int *depth) {
    const tm__sgemm_arch *ar = tm__sgemm_active_arch();
    *panel = ar ? ar->mr : REFERENCE_PANEL;
    *depth = ar ? (int)ar->kc : REFERENCE_DEPTH;
}

void tm_sgemm_advise_packed(void *p, size_t bytes) {
#if defined(MADV_HUGEPAGE)
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t begin = ((uintptr_t)p + huge - 1) & ~(huge - 1), end = ((uintptr_t)p + bytes) & ~(huge - 1);
    if (end > begin) madvise((void *)begin, end - begin, MADV_HUGEPAGE);
#else
    (void)p, (void)bytes;
#endif
}

size_t tm_sgemm_packed_floats(int64_t width, int64_t k, int panel) {
    return (size_t)k * (size_t)round_up(width, panel);
}

/* Element (p, j): depth block p / depth holds every panel of that block, panel after
 * panel, each (rows of the block) x panel floats. */
static inline size_t packed_index(int64_t p, int64_t j, int64_t width, int64_t k, int panel,
                                  int depth) {
    int64_t pc = p / depth * depth, kcb = min64(depth, k - pc);
    return (size_t)(pc * round_up(width, panel) + j / panel * kcb * panel + (p - pc) * panel
                    + j % panel);
}

void tm_sgemm_pack_b(int trans_b, int64_t n, int64_t k, const float *b, int64_t ldb,
                     int panel, int depth, float *dst) {
    int64_t width = round_up(n, panel), full = n / panel * panel;
    for (int64_t pc = 0; pc < k; pc += depth) {
        int64_t kcb = min64(depth, k - pc);
        float *block = dst + pc * width;
        if (trans_b) {
            /* Column j of op(B) is row j of B: read along it. */
            for (int64_t j = 0; j < width; j++) {
                float *d = block + j / panel * kcb * panel + j % panel;
                const float *src = b + j * ldb + pc;
                for (int64_t p = 0; p < kcb; p++) d[p * panel] = j < n ? src[p] : 0.0f;
            }
            continue;
        }
        /* Row by row of B, so that reads are sequential; a row's panels are kcb * panel
         * floats apart. */
        for (int64_t p = 0; p < kcb; p++) {
            const float *src = b + (pc + p) * ldb;
            float *d = block + p * panel;
            int64_t j = 0;
            for (; j < full; j += panel, d += kcb * panel)
                memcpy(d, src + j, (size_t)panel * sizeof *d);
            if (j == width) continue;
            int64_t t = 0;
            for (; j + t < n; t++) d[t] = src[j + t];
            for (; t < panel; t++) d[t] = 0.0f;
        }
    }
}

void tm_sgemm_pack_a(int trans_a, int64_t m, int64_t k, const float *a, int64_t lda,
                     int panel, int depth, float *dst) {
    /* Rows of A are B's columns transposed: the same layout. */
    tm_sgemm_pack_b(!trans_a, m, k, a, lda, panel, depth, dst);
}

/* ---- The epilogue ---------------------------------------------------------------------- */

static void epilogue(const tm_sgemm_epilogue *ep, float *c, int64_t ldc, int64_t i0,
                     int64_t i1, int64_t j0, int64_t j1);

void tm_sgemm_epilogue_apply(const tm_sgemm_epilogue *ep, float *c, int64_t ldc, int64_t i0,
                             int64_t i1, int64_t j0, int64_t j1) {
    epilogue(ep, c, ldc, i0, i1, j0, j1);
}

/* Rows [i0, i1), columns [j0, j1) of c, holding the products: bias, factor, activation,
 * residual. Its loops vectorized (GCC's -O2 leaves loops that need a check for aliasing scalar). */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("O3", "no-trapping-math")))
#endif
static void epilogue(const tm_sgemm_epilogue *ep, float *c, int64_t ldc, int64_t i0,
                     int64_t i1, int64_t j0, int64_t j1) {
    if (!ep || (!ep->bias && !ep->activation && !ep->activation_d && !ep->residual && !ep->mul))
        return;
    for (int64_t i = i0; i < i1; i++) {
        float *row = c + i * ldc;
        const float *res = ep->residual ? ep->residual + i * ep->ldr : NULL;
        if (ep->bias && ep->bias_rows) {
            float b = ep->bias[i];
            for (int64_t j = j0; j < j1; j++) row[j] += b;
        } else if (ep->bias) {
            for (int64_t j = j0; j < j1; j++) row[j] += ep->bias[j];
        }
        if (ep->mul)
            for (int64_t j = j0; j < j1; j++)
                row[j] = tm__mul_flushed(row[j], ep->mul[i * ep->ldm + j]);
        if (ep->activation_d && ep->act_out) {   /* the activation out, its derivative kept */
            float *dst = ep->act_out + i * ep->ld_act;
            ep->activation_d(row + j0, dst + j0, row + j0, j1 - j0);
            if (res)
                for (int64_t j = j0; j < j1; j++) dst[j] += res[j];
            continue;
        }
        if (!ep->activation) {
            if (res)
                for (int64_t j = j0; j < j1; j++) row[j] += res[j];
            continue;
        }
        /* The activation over the whole run at once (lane by lane, so in place too), then
         * the residual where it went. */
        float *dst = ep->act_out ? ep->act_out + i * ep->ld_act : row;
        ep->activation(ep->activation_arg, row + j0, dst + j0, j1 - j0);
        if (res)
            for (int64_t j = j0; j < j1; j++) dst[j] += res[j];
    }
}

/* ---- Plain references ------------------------------------------------------------------ */

void tm_sgemm_bpacked_reference(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                                const float *bp, int panel, int depth, float *c, int64_t ldc,
                                const tm_sgemm_epilogue *ep) {
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            float sum = 0.0f;
            for (int64_t p = 0; p < k; p++)
                sum += a[i * lda + p] * bp[packed_index(p, j, n, k, panel, depth)];
            c[i * ldc + j] = sum;
        }
    epilogue(ep, c, ldc, 0, m, 0, n);
}

void tm_sgemm_apacked_reference(int64_t m, int64_t n, int64_t k, const float *ap, int panel,
                                int depth, const float *b, int64_t ldb, float *c, int64_t ldc,
                                const tm_sgemm_epilogue *ep) {
    for (int64_t i = 0; i < m; i++) {
        float *row = c + i * ldc;
        for (int64_t j = 0; j < n; j++) row[j] = 0.0f;
        for (int64_t p = 0; p < k; p++) {
            float w = ap[packed_index(p, i, m, k, panel, depth)];
            const float *b_row = b + p * ldb;
            for (int64_t j = 0; j < n; j++) row[j] += w * b_row[j];
        }
    }
    epilogue(ep, c, ldc, 0, m, 0, n);
}

/* ---- C = A . B_packed ------------------------------------------------------------------ */

typedef struct bpacked_job {
    const tm__sgemm_arch *ar;
    int64_t m, n, k;
    const float *a;
    int64_t lda;
    const float *bp;
    float *c;
    int64_t ldc;
    const tm_sgemm_epilogue *ep;      /* what is left of it after bias_first */
    const float *bias_first;          /* tm__sgemm_bias_first's; NULL: none */
    int64_t group_tiles, col_block;   /* a task: rows of group_tiles tiles, col_block columns */
    int64_t n_groups, n_col_blocks;
    int64_t depth;                    /* of B's layout */
} bpacked_job;

/* Panel j (a multiple of the panel width) of depth block pc of packed B. */
static const float *panel_at(const bpacked_job *g, int64_t pc, int64_t j) {
    return g->bp + pc * round_up(g->n, g->ar->nr) + j * min64(g->depth, g->k - pc);
}

/* Row tile i (rows [i, i + rows); a short one packed in a_tile) against panel j of depth
 * block pc (kcb deep); a full tile prefetches pf (NULL: its own panel ahead). */
static inline void bpacked_tile(const bpacked_job *g, int64_t i, int rows, const float *a_tile,
                                int64_t pc, int64_t kcb, int64_t j, int64_t j1, float beta,
                                const float *pf, int64_t pf_step) {
    const tm__sgemm_arch *ar = g->ar;
    const float *panel = panel_at(g, pc, j);
    int nr = (int)min64(ar->nr, j1 - j);
    if (g->bias_first && rows == ar->mr && ar->tile_rows_bias) {   /* one depth block */
        ar->tile_rows_bias(kcb, g->a + i * g->lda + pc, g->lda, panel, g->c + i * g->ldc + j,
                           g->ldc, nr, g->bias_first + j, pf, pf_step);
        return;
    }
    if (g->bias_first) {   /* one depth block: pc == 0 */
        tm__sgemm_fill_bias(g->c + i * g->ldc + j, g->ldc, rows, nr, g->bias_first + j);
        beta = 1.0f;
    }
    if (rows == ar->mr)   /* a full tile reads A where it lies */
        ar->tile_rows(kcb, g->a + i * g->lda + pc, g->lda, panel, g->c + i * g->ldc + j, g->ldc,
                      nr, beta, pf, pf_step);
    else
        ar->tile_packed(kcb, a_tile, panel, g->c + i * g->ldc + j, g->ldc, rows, nr, beta);
}

/* B's next panel fetched while tiles compute on one already in cache: full tile r (of
 * `full` on that panel) takes its share of `next` (kn steps deep), one line a step of k
 * for half of it, or both lines for all of it when it is the only full tile; the others
 * stream their own panel (pf NULL). Memory and FMAs then overlap, where a product of few
 * rows per weight otherwise waits on the memory at each panel's first tile (a 32-token
 * prefill, 32 x 3072 x 1024 with B cold: 93 -> 105 GFLOP/s; small LLaMA fp32 prefill32
 * 52 -> 47 ms on one thread). */
static const float *next_share(const tm__sgemm_arch *ar, const float *next, int64_t kn, int r,
                               int64_t full, int64_t *pf_step) {
    if (!next || r < 0 || r >= 2 || r >= full) return NULL;
    if (full == 1) {
        *pf_step = ar->nr;
        return next;
    }
    *pf_step = 16;
    return next + r * kn * 16;
}

/* One task: rows [i0, i1) by columns [j0, j1), every depth block. Within a block the row
 * tiles sweep the task's panels, so A's tile stays in L1 and B's block in L2; the
 * epilogue follows each row tile's last block, and the last two full row tiles fetch
 * the next block. A task of few rows (a short prefill, a 128-token encoder) goes panel by
 * panel instead, every row tile on each while it is fresh, the first two fetching the
 * next panel (next_share), so that B's stream from memory overlaps the FMAs. The short
 * tile at the end (if any) is packed once for all the panels. The depth blocks are the
 * same for any split, so results do not depend on the number of threads. */
static void bpacked_task(const bpacked_job *g, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                         int64_t next_j0, int64_t next_j1) {
    const tm__sgemm_arch *ar = g->ar;
    int64_t full = i0 + (i1 - i0) / ar->mr * ar->mr;   /* rows in whole tiles */
    int tail = (int)(i1 - full);
    float a_tile[EDGE_FLOATS] __attribute__((aligned(64)));
    for (int64_t pc = 0; pc < g->k; pc += g->depth) {
        int64_t kcb = min64(g->depth, g->k - pc);
        int last = pc + kcb == g->k;
        float beta = pc == 0 ? 0.0f : 1.0f;
        if (g->m <= TM__SGEMM_ROWS_MAX) {   /* by m, not the task: the same kernel for any split */
            /* A decode step: its rows against each panel, straight from A. */
            for (int64_t j = j0; j < j1; j += ar->nr) {
                int nr = (int)min64(ar->nr, j1 - j);
                if (g->bias_first)
                    tm__sgemm_fill_bias(g->c + i0 * g->ldc + j, g->ldc, (int)(i1 - i0), nr,
                                        g->bias_first + j);
                ar->rows(kcb, g->a + i0 * g->lda + pc, g->lda, (int)(i1 - i0),
                         panel_at(g, pc, j), g->c + i0 * g->ldc + j, g->ldc, nr,
                         g->bias_first ? 1.0f : beta);
            }
            if (last) epilogue(g->ep, g->c, g->ldc, i0, i1, j0, j1);
            continue;
        }
        if (tail) tm__sgemm_pack_a_tile(g->a + full * g->lda + pc, g->lda, 1, kcb, tail, ar->mr, a_tile);
        int64_t full_tiles = (full - i0) / ar->mr, pf_step = 0;
        /* The block after this one: this task's next depth block, or the next task's
         * first (next_j0 < 0: none, or another thread's). */
        int64_t npc = last ? 0 : pc + kcb, nj0 = last ? next_j0 : j0, nj1 = last ? next_j1 : j1;
        int64_t kn = min64(g->depth, g->k - npc);
        if (i1 - i0 <= PANEL_MAJOR_ROWS) {
            for (int64_t j = j0; j < j1; j += ar->nr) {
                /* The next panel: of this block, else the next block's first. */
                const float *next = j + ar->nr < j1 ? panel_at(g, pc, j + ar->nr)
                                    : nj0 >= 0      ? panel_at(g, npc, nj0)
                                                    : NULL;
                int64_t depth_next = j + ar->nr < j1 ? kcb : kn;
                for (int64_t i = i0, r = 0; i < i1; i += ar->mr, r++) {
                    const float *pf = next_share(ar, next, depth_next, (int)r, full_tiles, &pf_step);
                    bpacked_tile(g, i, (int)min64(ar->mr, i1 - i), a_tile, pc, kcb, j, j1,
                                 beta, pf, pf_step);
                }
            }
            if (last) epilogue(g->ep, g->c, g->ldc, i0, i1, j0, j1);
            continue;
        }
        /* The last two full row tiles (the second, when there are only two), which read
         * this block from L2, fetch the next block panel for panel, late enough that it
         * does not crowd this one out of L2 while the tiles before them read it; the
         * first tile streams its own. */
        int64_t fetchers = full_tiles >= 3 ? 2 : full_tiles - 1, first = full_tiles - fetchers;
        for (int64_t i = i0, r = 0; i < i1; i += ar->mr, r++) {
            int rows = (int)min64(ar->mr, i1 - i);
            for (int64_t j = j0; j < j1; j += ar->nr) {
                int64_t nj = nj0 + (j - j0);
                const float *next = r >= first && nj0 >= 0 && nj < nj1 ? panel_at(g, npc, nj) : NULL;
                const float *pf = next_share(ar, next, kn, (int)(r - first), fetchers, &pf_step);
                bpacked_tile(g, i, rows, a_tile, pc, kcb, j, j1, beta, pf, pf_step);
            }
            if (last) epilogue(g->ep, g->c, g->ldc, i, i + rows, j0, j1);
        }
    }
}

static void bpacked_slice(void *arg, int ith, int nth) {
    const bpacked_job *g = arg;
    int64_t tasks = g->n_groups * g->n_col_blocks;
    int64_t t0 = tasks * ith / nth, t1 = tasks * (ith + 1) / nth;
    for (int64_t t = t0; t < t1; t++) {
        int64_t grp = t / g->n_col_blocks, cb = t % g->n_col_blocks;
        int64_t i0 = grp * g->group_tiles * g->ar->mr;
        int64_t j0 = cb * g->col_block;
        /* The next task's columns, when this thread takes it next and it is the same
         * row group's next column block (a new row group starts over at column 0). */
        int64_t nj0 = t + 1 < t1 && cb + 1 < g->n_col_blocks ? j0 + g->col_block : -1;
        bpacked_task(g, i0, min64(i0 + g->group_tiles * g->ar->mr, g->m), j0,
                     min64(j0 + g->col_block, g->n), nj0, min64(nj0 + g->col_block, g->n));
    }
}

void tm_sgemm_bpacked(int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                      const float *bp, int panel, int depth, float *c, int64_t ldc,
                      const tm_sgemm_epilogue *ep, tm_pool *pool) {
    if (m <= 0 || n <= 0) return;
    const tm__sgemm_arch *ar = tm__sgemm_active_arch();
    if (!ar || ar->nr != panel || depth < 1 || (int64_t)ar->mr * depth > EDGE_FLOATS || k <= 0) {
        tm_sgemm_bpacked_reference(m, n, k, a, lda, bp, panel, depth, c, ldc, ep);
        return;
    }
    bpacked_job g = {ar, m, n, k, a, lda, bp, c, ldc, ep, NULL, TASK_TILES,
                     min64(round_up(n, ar->nr), TASK_COLUMNS), 0, 0, depth};
    tm_sgemm_epilogue rest;
    g.bias_first = tm__sgemm_bias_first(ep, 0.0f, k, depth, &rest, &g.ep);
    int small = m <= TM__SGEMM_ROWS_MAX
                    ? (double)n * (double)k * sizeof(float) < PARALLEL_MIN_STREAM_BYTES
                    : 2.0 * (double)m * (double)n * (double)k < PARALLEL_MIN_FLOPS;
    int threads = small ? 1 : tm_pool_threads(pool);
    int64_t tiles = (m + ar->mr - 1) / ar->mr;
    /* Enough tasks for every slice: narrower column blocks first (B's block stays in L2
     * either way), then fewer row tiles per task. A product of few rows (a short
     * prefill) streams B from memory once for all its rows: split into row groups, each
     * group would stream it again, so its column blocks go down to two panels first (the
     * small LLaMA's 32-token prefill, down projection 32 x 768 x 2048 on two threads:
     * 1.1x faster than on one with row groups, 1.5x without). Decode steps' rows
     * kernel keeps the wider blocks (measured no better). */
    int64_t want = threads > 1 ? (int64_t)threads * SLICES_PER_THREAD : 1;
    int64_t narrowest = m <= FEW_ROWS && m > TM__SGEMM_ROWS_MAX ? 2 * ar->nr : 4 * ar->nr;
    for (;;) {
        g.n_groups = (tiles + g.group_tiles - 1) / g.group_tiles;
        g.n_col_blocks = (n + g.col_block - 1) / g.col_block;
        if (g.n_groups * g.n_col_blocks >= want) break;
        if (g.col_block > narrowest) g.col_block = round_up(g.col_block / 2, ar->nr);
        else if (g.group_tiles > 1) g.group_tiles = (g.group_tiles + 1) / 2;
        else break;
    }
    int64_t tasks = g.n_groups * g.n_col_blocks;
    int slices = (int)min64(tasks, want);
    if (slices <= 1) bpacked_slice(&g, 0, 1);
    else tm_pool_run_n(pool, slices, bpacked_slice, &g);
}

/* ---- C = A_packed . B, B packed per call --------------------------------------------- */

typedef struct apacked_job {
    const tm__sgemm_arch *ar;
    int64_t m, n, k;
    const float *ap;
    const float *b;
    int64_t ldb;
    float *c;
    int64_t ldc;
    const tm_sgemm_epilogue *ep;
    float *b_packed;
    int64_t region_panels;   /* panels of B each slice packs at a time */
} apacked_job;

/* Columns [j0, j1) of B, rows [pc, pc + kcb), into panels of nr floats a row. */
static void pack_b_block(const float *b, int64_t ldb, int64_t pc, int64_t kcb, int64_t j0,
                         int64_t j1, int nr, float *dst) {
    for (int64_t p = 0; p < kcb; p++) {
        const float *src = b + (pc + p) * ldb;
        float *d = dst + p * nr;
        int64_t j = j0;
        for (; j + nr <= j1; j += nr, d += kcb * nr) memcpy(d, src + j, (size_t)nr * sizeof *d);
        if (j == j1) continue;
        int64_t t = 0;
        for (; j + t < j1; t++) d[t] = src[j + t];
        for (; t < nr; t++) d[t] = 0.0f;
    }
}

/* Slice ith of nth owns a range of column panels and packs them in its own region of
 * scratch, a chunk at a time; every row tile of packed A meets every packed panel. */
static void apacked_slice(void *arg, int ith, int nth) {
    const apacked_job *g = arg;
    const tm__sgemm_arch *ar = g->ar;
    int64_t panels = (g->n + ar->nr - 1) / ar->nr;
    int64_t p0 = panels * ith / nth, p1 = panels * (ith + 1) / nth;
    int64_t depth = min64(ar->kc, g->k);
    float *region = g->b_packed + (size_t)ith * (size_t)(g->region_panels * depth * ar->nr);
    int64_t height = round_up(g->m, ar->mr);
    for (int64_t cp = p0; cp < p1; cp += g->region_panels) {
        int64_t j0 = cp * ar->nr, j1 = min64(min64(p1, cp + g->region_panels) * ar->nr, g->n);
        for (int64_t pc = 0; pc < g->k; pc += ar->kc) {
            int64_t kcb = min64(ar->kc, g->k - pc);
            pack_b_block(g->b, g->ldb, pc, kcb, j0, j1, ar->nr, region);
            const float *block = g->ap + pc * height;
            int last = pc + kcb == g->k;
            float beta = pc == 0 ? 0.0f : 1.0f;
            for (int64_t i = 0; i < g->m; i += ar->mr) {
                int mr = (int)min64(ar->mr, g->m - i);
                const float *a = block + i / ar->mr * kcb * ar->mr;
                for (int64_t j = j0; j < j1; j += ar->nr)
                    ar->tile(kcb, a, 1, ar->mr, region + (j - j0) / ar->nr * kcb * ar->nr,
                             g->c + i * g->ldc + j, g->ldc, mr, (int)min64(ar->nr, j1 - j),
                             1.0f, beta);
                if (last) epilogue(g->ep, g->c, g->ldc, i, i + mr, j0, j1);
            }
        }
    }
}

/* Panels a slice packs at once: B's chunk (depth x panels x nr) about L2-sized. */
static int64_t apacked_region_panels(const tm__sgemm_arch *ar, int64_t k) {
    int64_t depth = min64(ar->kc, k);
    int64_t panels = (256 * 1024 / (int64_t)sizeof(float)) / (depth * ar->nr);
    return panels < 1 ? 1 : panels;
}

static int64_t apacked_slices(const tm__sgemm_arch *ar, int64_t m, int64_t n, int64_t k,
                              int threads) {
    if (threads <= 1 || 2.0 * (double)m * (double)n * (double)k < PARALLEL_MIN_FLOPS) return 1;
    int64_t panels = (n + ar->nr - 1) / ar->nr;
    return min64(min64((int64_t)threads * SLICES_PER_THREAD, MAX_PACKING_SLICES), panels);
}

size_t tm_sgemm_apacked_scratch(int64_t m, int64_t n, int64_t k) {
    const tm__sgemm_arch *ar = tm__sgemm_active_arch();
    if (!ar || m <= 0 || n <= 0 || k <= 0) return 0;
    int64_t slices = min64(MAX_PACKING_SLICES, (n + ar->nr - 1) / ar->nr);
    return (size_t)slices * (size_t)(apacked_region_panels(ar, k) * min64(ar->kc, k) * ar->nr)
           * sizeof(float) + 64;
}

void tm_sgemm_apacked(int64_t m, int64_t n, int64_t k, const float *ap, int panel, int depth,
                      const float *b, int64_t ldb, float *c, int64_t ldc,
                      const tm_sgemm_epilogue *ep, void *scratch, size_t scratch_bytes,
                      tm_pool *pool) {
    if (m <= 0 || n <= 0) return;
    const tm__sgemm_arch *ar = tm__sgemm_active_arch();
    if (!ar || ar->mr != panel || ar->kc != depth || k <= 0 || !scratch ||
        scratch_bytes < tm_sgemm_apacked_scratch(m, n, k)) {
        tm_sgemm_apacked_reference(m, n, k, ap, panel, depth, b, ldb, c, ldc, ep);
        return;
    }
    uintptr_t at = ((uintptr_t)scratch + 63) & ~(uintptr_t)63;
    apacked_job g = {ar, m, n, k, ap, b, ldb, c, ldc, ep, (float *)at,
                     apacked_region_panels(ar, k)};
    int64_t slices = apacked_slices(ar, m, n, k, tm_pool_threads(pool));
    if (slices <= 1) apacked_slice(&g, 0, 1);
    else tm_pool_run_n(pool, (int)slices, apacked_slice, &g);
}
