/* Depthwise 2-D convolution of one plane (dwconv.h): the padded, phase-split row buffer,
 * the portable C row kernel and the run-time choice among it, AVX2 and AVX-512
 * (dwconv_avx2.c, dwconv_avx512.c). Not the threading over channels nor the epilogue:
 * core/prims/linalg.c does both. */
#if defined(__GNUC__) && !defined(__clang__)
/* The row copies below stay loops: GCC would make them memcpy and memset calls, whose
 * start-up costs more than a 150-float row. */
#pragma GCC optimize("no-tree-loop-distribute-patterns")
#endif
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "dwconv.h"

/* Floats of padded rows a block copies at most (a block takes at least one output row):
 * 64 KiB, so that a block's rows stay in L2 while its taps read them. */
#define DW_BLOCK_FLOATS 16384

#ifdef __FMA__
#define DW_FMA(a, b, c) fmaf(a, b, c)
#else
#define DW_FMA(a, b, c) ((a) * (b) + (c))
#endif

/* The portable row kernel: the vector kernels' operations in the same order, one lane at
 * a time (with FMA hardware the same bits). */
static void rows_c(const float *base, int64_t rstride, int64_t rows, const int64_t *off,
                   const float *w, int64_t taps, float *out, int64_t n) {
    for (int64_t r = 0; r < rows; r++, base += rstride, out += n) {
        for (int64_t i = 0; i < n; i++) out[i] = 0.0f;
        for (int64_t t = 0; t < taps; t++) {
            const float *p = base + off[t];
            float wv = w[t];
            for (int64_t i = 0; i < n; i++) out[i] = DW_FMA(wv, p[i], out[i]);
        }
    }
}

tm_dwconv_kernel tm_dwconv_pick(void) {
    const char *isa = getenv("TM_KERNEL_ISA");
    int allow512 = !isa || !strcmp(isa, "avx512"), allow2 = allow512 || !strcmp(isa, "avx2");
    tm_dwconv_rows_fn f;
    if (allow512 && (f = tm__dwconv_rows_avx512())) return (tm_dwconv_kernel){"avx512", f};
    if (allow2 && (f = tm__dwconv_rows_avx2())) return (tm_dwconv_kernel){"avx2", f};
    return (tm_dwconv_kernel){"c", rows_c};
}

int tm_dwconv_ok(const tm_dwconv_geom *g) {
    return g->ih > 0 && g->iw > 0 && g->oh > 0 && g->ow > 0 && g->kh > 0 && g->kw > 0 &&
           g->sy > 0 && g->sx > 0 && g->dy > 0 && g->dx > 0;
}

/* A padded row: sx phases of len floats; phase p, index i holds input column i sx + p - px.
 * Output column ox at tap column kx reads phase (kx dx) % sx, index ox + (kx dx) / sx. */
static int64_t phase_len(const tm_dwconv_geom *g) { return g->ow + (g->kw - 1) * g->dx / g->sx; }
static int64_t row_len(const tm_dwconv_geom *g) { return g->sx * phase_len(g); }

/* Padded rows that `rows` output rows read. */
static int64_t rows_in(const tm_dwconv_geom *g, int64_t rows) {
    return (rows - 1) * g->sy + (g->kh - 1) * g->dy + 1;
}

/* Output rows per block: as many as fit DW_BLOCK_FLOATS, at least one. */
static int64_t block_rows(const tm_dwconv_geom *g) {
    int64_t len = row_len(g), blk = 1;
    while (blk < g->oh && rows_in(g, blk + 1) * len <= DW_BLOCK_FLOATS) blk++;
    return blk;
}

size_t tm_dwconv_work_floats(const tm_dwconv_geom *g) {
    int64_t taps = g->kh * g->kw;
    /* the tap offsets (int64, aligned up), then the rows with a little slack */
    return (size_t)(2 * taps + 4 + rows_in(g, block_rows(g)) * row_len(g) + 16);
}

/* The least i >= 0 with i * s + c >= 0 (s > 0). */
static int64_t first_at_least_zero(int64_t c, int64_t s) { return c >= 0 ? 0 : (-c + s - 1) / s; }

/* Rows are short (a recognizer's are 150 floats): plain loops, 16 floats a step, beat
 * memcpy's and memset's start-up. */
typedef float dw_vec __attribute__((vector_size(64), aligned(4), may_alias));
static inline void copy_floats(float *restrict d, const float *restrict s, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) *(dw_vec *)(d + i) = *(const dw_vec *)(s + i);
    for (; i < n; i++) d[i] = s[i];
}
static inline void zero_floats(float *d, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) *(dw_vec *)(d + i) = (dw_vec){0};
    for (; i < n; i++) d[i] = 0.0f;
}

/* Padded row for input row iy (zero outside the plane). */
static void fill_row(const tm_dwconv_geom *g, const float *x, int64_t iy, float *dst) {
    int64_t len = phase_len(g), sx = g->sx;
    if (iy < 0 || iy >= g->ih) {
        zero_floats(dst, sx * len);
        return;
    }
    const float *src = x + iy * g->iw;
    for (int64_t ph = 0; ph < sx; ph++) {
        float *d = dst + ph * len;
        int64_t c0 = ph - g->px;   /* input column of index 0 */
        int64_t lo = sx == 1 ? (c0 < 0 ? -c0 : 0) : first_at_least_zero(c0, sx);
        int64_t hi = sx == 1 ? (g->iw - c0 > 0 ? g->iw - c0 : 0) : first_at_least_zero(c0 - g->iw, sx);
        if (lo > len) lo = len;
        if (hi > len) hi = len;
        if (hi < lo) hi = lo;
        zero_floats(d, lo);
        if (sx == 1) copy_floats(d + lo, src + lo + c0, hi - lo);
        else
            for (int64_t i = lo; i < hi; i++) d[i] = src[i * sx + c0];
        zero_floats(d + hi, len - hi);
    }
}

void tm_dwconv_plane(tm_dwconv_kernel k, const tm_dwconv_geom *g, const float *x,
                     const float *w, float *y, float *work, tm_dwconv_done_fn done, void *arg) {
    int64_t taps = g->kh * g->kw, len = phase_len(g), rl = row_len(g), blk = block_rows(g);
    int64_t *off = (int64_t *)(((uintptr_t)work + 7) & ~(uintptr_t)7);
    float *buf = (float *)(off + taps);
    for (int64_t ky = 0; ky < g->kh; ky++)
        for (int64_t kx = 0; kx < g->kw; kx++) {
            int64_t c = kx * g->dx;
            off[ky * g->kw + kx] = ky * g->dy * rl + c % g->sx * len + c / g->sx;
        }
    for (int64_t r0 = 0; r0 < g->oh; r0 += blk) {
        int64_t rows = g->oh - r0 < blk ? g->oh - r0 : blk, first = r0 * g->sy - g->py;
        for (int64_t j = 0; j < rows_in(g, rows); j++) fill_row(g, x, first + j, buf + j * rl);
        k.rows(buf, g->sy * rl, rows, off, w, taps, y + r0 * g->ow, g->ow);
        if (done) done(arg, r0, rows);
    }
}
