/* Tests of the CPU kernels under the OCR models' hot paths, each against a straightforward
 * reference written here: the depthwise convolution of one plane (backends/cpu/dwconv.c)
 * on random geometries (sizes down to 1, strides, dilations, pads of both signs, planes
 * large enough for several row blocks) under every kernel this CPU runs (TM_KERNEL_ISA
 * avx512, avx2, scalar), which must also agree bit for bit; the epilogue chains run in
 * registers (core/prims/chain.c) against the steps' scalar expressions, bit for bit,
 * NaNs and signed zeros included; and the separable warp (a resize) against the
 * per-pixel warp it replaces, bit for bit. Conv graphs end to end: test_fusion.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../src/backends/cpu/dwconv.h"
#include "../src/core/prims/fused.h"
#include "../src/core/ops.h"
#include "../src/media/geometry.h"
#include "check.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_u64(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static int64_t pick(int64_t lo, int64_t hi) { return lo + (int64_t)(next_u64() % (uint64_t)(hi - lo + 1)); }
static float next_f(void) { return (float)((double)(next_u64() % 200001) / 100000.0 - 1.0); }

/* ---- Depthwise convolution ------------------------------------------------------------- */

typedef struct done_log {
    int64_t next, calls;
    int ok;
} done_log;

static void log_done(void *arg, int64_t row0, int64_t rows) {
    done_log *d = arg;
    if (row0 != d->next || rows < 1) d->ok = 0;
    d->next = row0 + rows;
    d->calls++;
}

/* The definition: sums in double over the taps inside the plane; also the sum of |terms|. */
static void reference(const tm_dwconv_geom *g, const float *x, const float *w, double *y, double *mag) {
    for (int64_t oy = 0; oy < g->oh; oy++)
        for (int64_t ox = 0; ox < g->ow; ox++) {
            double s = 0, m = 0;
            for (int64_t ky = 0; ky < g->kh; ky++)
                for (int64_t kx = 0; kx < g->kw; kx++) {
                    int64_t iy = oy * g->sy + ky * g->dy - g->py, ix = ox * g->sx + kx * g->dx - g->px;
                    if (iy < 0 || iy >= g->ih || ix < 0 || ix >= g->iw) continue;
                    double t = (double)w[ky * g->kw + kx] * x[iy * g->iw + ix];
                    s += t;
                    m += fabs(t);
                }
            y[oy * g->ow + ox] = s;
            mag[oy * g->ow + ox] = m;
        }
}

static int64_t out_len(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe) {
    int64_t span = in + pb + pe - d * (k - 1) - 1;
    return span < 0 ? 0 : span / s + 1;
}

static void dw_case(const tm_dwconv_geom *g, const char *what) {
    int64_t nx = g->ih * g->iw, ny = g->oh * g->ow, taps = g->kh * g->kw;
    float *x = malloc((size_t)nx * sizeof *x), *w = malloc((size_t)taps * sizeof *w);
    double *want = malloc((size_t)ny * sizeof *want), *mag = malloc((size_t)ny * sizeof *mag);
    for (int64_t i = 0; i < nx; i++) x[i] = next_f();
    for (int64_t i = 0; i < taps; i++) w[i] = next_f();
    reference(g, x, w, want, mag);
    static const char *isas[3] = {"avx512", "avx2", "scalar"};
    float *first = NULL;
    for (int k = 0; k < 3; k++) {
        setenv("TM_KERNEL_ISA", isas[k], 1);
        tm_dwconv_kernel kern = tm_dwconv_pick();
        size_t work_floats = tm_dwconv_work_floats(g);
        /* the work space at an odd address: any alignment must do */
        float *work_raw = malloc((work_floats + 1) * sizeof(float)), *work = work_raw + 1;
        float *y = malloc((size_t)(ny + 16) * sizeof *y);
        for (int64_t i = 0; i < ny + 16; i++) y[i] = 12345.0f;
        done_log log = {0, 0, 1};
        tm_dwconv_plane(kern, g, x, w, y, work, log_done, &log);
        double worst = 0;
        for (int64_t i = 0; i < ny; i++) {
            double err = fabs((double)y[i] - want[i]) / (mag[i] + 1e-30);
            if (!(err <= worst)) worst = err;   /* NaN counts as worst */
        }
        int tail_kept = 1;
        for (int64_t i = ny; i < ny + 16; i++) tail_kept &= y[i] == 12345.0f;
        CHECK(worst < 1e-5 && tail_kept && log.ok && log.next == g->oh,
              "dwconv %s (%s) %lldx%lld k %lldx%lld s %lld,%lld d %lld,%lld p %lld,%lld -> %lldx%lld: "
              "error %g of the terms' magnitude, tail kept %d, blocks %s", what, kern.name,
              (long long)g->ih, (long long)g->iw, (long long)g->kh, (long long)g->kw,
              (long long)g->sy, (long long)g->sx, (long long)g->dy, (long long)g->dx,
              (long long)g->py, (long long)g->px, (long long)g->oh, (long long)g->ow, worst,
              tail_kept, log.ok && log.next == g->oh ? "in order" : "wrong");
#ifdef __FMA__
        /* every kernel makes the same fused multiply-adds in the same order */
        if (!first) {
            first = y;
            y = NULL;
        } else {
            int same = 1;
            for (int64_t i = 0; i < ny; i++) same &= y[i] == first[i];
            CHECK(same, "dwconv %s: %s differs from %s", what, kern.name, isas[0]);
        }
#endif
        free(y);
        free(work_raw);
    }
    unsetenv("TM_KERNEL_ISA");
    free(first), free(x), free(w), free(want), free(mag);
}

static void test_dwconv(void) {
    setenv("TM_KERNEL_ISA", "avx512", 1);
    printf("dwconv kernels: %s", tm_dwconv_pick().name);
    setenv("TM_KERNEL_ISA", "avx2", 1);
    printf(", %s", tm_dwconv_pick().name);
    setenv("TM_KERNEL_ISA", "scalar", 1);
    printf(", %s\n", tm_dwconv_pick().name);
    unsetenv("TM_KERNEL_ISA");
    CHECK(!strcmp(tm_dwconv_pick().name, "c") ? 1 : tm_dwconv_pick().rows != NULL, "no kernel");
    /* the models' shapes: PP-OCRv4's recognizer and detector, Silero-like 1-D */
    struct { int64_t ih, iw, k, sy, sx; } fixed[] = {
        {12, 152, 5, 1, 1}, {12, 152, 5, 2, 1}, {24, 304, 3, 1, 1}, {24, 304, 3, 2, 1},
        {3, 152, 5, 1, 1}, {60, 80, 5, 1, 1}, {60, 80, 5, 2, 2}, {120, 160, 3, 2, 2},
        {240, 320, 3, 1, 1}, {1, 1, 3, 1, 1}, {1, 17, 1, 1, 1}, {5, 64, 3, 1, 1},
        {7, 65, 5, 1, 1}, {2, 63, 3, 1, 1}, {9, 200, 7, 1, 1},
    };
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++) {
        int64_t k = fixed[i].k, p = k / 2;
        tm_dwconv_geom g = {fixed[i].ih, fixed[i].iw, 0, 0, k, k, fixed[i].sy, fixed[i].sx, 1, 1, p, p};
        g.oh = out_len(g.ih, k, g.sy, 1, p, p);
        g.ow = out_len(g.iw, k, g.sx, 1, p, p);
        dw_case(&g, "model shape");
    }
    /* a plane of several row blocks (64 KiB of padded rows each) */
    tm_dwconv_geom big = {300, 400, 0, 0, 5, 5, 1, 1, 1, 1, 2, 2};
    big.oh = out_len(300, 5, 1, 1, 2, 2), big.ow = out_len(400, 5, 1, 1, 2, 2);
    dw_case(&big, "row blocks");
    tm_dwconv_geom big2 = {301, 257, 0, 0, 3, 3, 2, 2, 2, 1, 1, 0};
    big2.oh = out_len(301, 3, 2, 2, 1, 1), big2.ow = out_len(257, 3, 2, 1, 0, 2);
    dw_case(&big2, "row blocks, strides, dilation");
    /* random geometries: sizes from 1, strides and dilations 1-3, pads -1..3 each side */
    int cases = 0;
    while (cases < 300) {
        tm_dwconv_geom g;
        g.ih = pick(1, 20), g.iw = pick(1, 90), g.kh = pick(1, 6), g.kw = pick(1, 6);
        g.sy = pick(1, 3), g.sx = pick(1, 3), g.dy = pick(1, 3), g.dx = pick(1, 3);
        g.py = pick(-1, 3), g.px = pick(-1, 3);
        int64_t ey = pick(-1, 3), ex = pick(-1, 3);
        g.oh = out_len(g.ih, g.kh, g.sy, g.dy, g.py, ey);
        g.ow = out_len(g.iw, g.kw, g.sx, g.dx, g.px, ex);
        if (g.oh < 1 || g.ow < 1) continue;
        CHECK(tm_dwconv_ok(&g), "geometry refused");
        dw_case(&g, "random");
        cases++;
    }
    tm_dwconv_geom bad = {3, 3, 3, 3, 3, 3, 0, 1, 1, 1, 1, 1};
    CHECK(!tm_dwconv_ok(&bad), "stride 0 accepted");
}

/* ---- Chains in registers ------------------------------------------------------------- */

static float scalar_step(const tm_chain_step *st, float t, float u) {
    if (st->operand == TM_CHAIN_UNARY) return t < 0 ? 0.0f : t;   /* relu */
    float l = t, r = st->scalar;
    switch (st->operand) {
    case TM_CHAIN_SCALAR_LEFT: l = st->scalar, r = t; break;
    case TM_CHAIN_SAVED_RIGHT: l = t, r = u; break;
    case TM_CHAIN_SAVED_LEFT: l = u, r = t; break;
    default: break;
    }
    switch (st->prim) {
    case TM_P_ADD: return l + r;
    case TM_P_SUB: return l - r;
    case TM_P_MUL: return l * r;
    case TM_P_DIV: return l / r;
    case TM_P_MAX: return (l > r || l != l) ? l : r;
    case TM_P_MIN: return (l < r || l != l) ? l : r;
    default: return NAN;
    }
}

static float scalar_chain(const tm_chain *ch, float x) {
    float t = x, u = x;
    for (int s = 0; s < ch->n; s++) {
        if (ch->step[s].operand == TM_CHAIN_SAVE) u = t;
        else t = scalar_step(&ch->step[s], t, u);
    }
    return t;
}

static int same_bits(float a, float b) {
    if (a != a && b != b) return 1;   /* any NaN for a NaN */
    return !memcmp(&a, &b, sizeof a);
}

static float special(void) {
    static const float v[] = {0.0f, -0.0f, 1.0f, -1.0f, 3.0f, -3.0f, 6.0f, INFINITY, -INFINITY,
                              NAN, 1e-40f, -1e-40f, 3.4e38f};
    uint64_t r = next_u64();
    return r % 3 == 0 ? v[r / 3 % (sizeof v / sizeof *v)] : next_f() * 8.0f;
}

static void test_chains(void) {
    static const int prims[6] = {TM_P_ADD, TM_P_SUB, TM_P_MUL, TM_P_DIV, TM_P_MAX, TM_P_MIN};
    for (int c = 0; c < 200; c++) {
        tm_chain ch;
        memset(&ch, 0, sizeof ch);
        if (c == 0) {   /* PP-OCR's hardswish with its affine steps */
            float sc[10] = {0.94f, 0.504f, 0, 3, 0, 6, 0, 6, 0.476f, -0.0076f};
            int pr[10] = {TM_P_MUL, TM_P_ADD, 0, TM_P_ADD, TM_P_MAX, TM_P_MIN, TM_P_MUL, TM_P_DIV,
                          TM_P_MUL, TM_P_ADD};
            int op[10] = {TM_CHAIN_SCALAR_LEFT, 1, TM_CHAIN_SAVE, 1, 1, 1, TM_CHAIN_SAVED_LEFT, 1, 2, 1};
            ch.n = 10;
            for (int s = 0; s < 10; s++) ch.step[s] = (tm_chain_step){pr[s], op[s], 0, sc[s]};
        } else {
            ch.n = (int)pick(0, TM_CHAIN_MAX_STEPS);
            for (int s = 0; s < ch.n; s++) {
                int64_t kind = pick(0, 9);
                if (kind == 0) ch.step[s] = (tm_chain_step){0, TM_CHAIN_SAVE, 0, 0};
                else if (kind == 1) ch.step[s] = (tm_chain_step){TM_P_RELU, TM_CHAIN_UNARY, 0, 0};
                else
                    ch.step[s] = (tm_chain_step){prims[pick(0, 5)], (int)pick(1, 4), 0, special()};
            }
        }
        int64_t n = pick(1, 300);
        float *x = malloc((size_t)n * sizeof *x), *res = malloc((size_t)n * sizeof *res);
        float *y = malloc((size_t)(n + 16) * sizeof *y), *y2 = malloc((size_t)(n + 16) * sizeof *y);
        for (int64_t i = 0; i < n; i++) x[i] = special(), res[i] = special();
        float bias = c % 4 == 0 ? 0.0f : special();
        for (int64_t i = 0; i < n + 16; i++) y[i] = y2[i] = 777.0f;
        tm__chain_apply(&ch, x, y, n);
        int ran = tm__chain_apply_ends(&ch, bias, x, c % 2 ? res : NULL, y2, n);
        int ok = 1, ok2 = 1;
        for (int64_t i = 0; i < n; i++) {
            ok &= same_bits(y[i], scalar_chain(&ch, x[i]));
            float e = scalar_chain(&ch, x[i] + bias);
            if (c % 2) e = e + res[i];
            ok2 &= !ran || same_bits(y2[i], e);
        }
        for (int64_t i = n; i < n + 16; i++) ok &= y[i] == 777.0f, ok2 &= y2[i] == 777.0f;
        CHECK(ok, "chain %d (%d steps, n %lld): differs from the scalar steps", c, ch.n, (long long)n);
        CHECK(ok2, "chain %d (%d steps, n %lld) with bias%s: differs from the scalar steps", c,
              ch.n, (long long)n, c % 2 ? " and residual" : "");
        /* in place */
        memcpy(y, x, (size_t)n * sizeof *y);
        tm__chain_apply(&ch, y, y, n);
        ok = 1;
        for (int64_t i = 0; i < n; i++) ok &= same_bits(y[i], scalar_chain(&ch, x[i]));
        CHECK(ok, "chain %d in place differs", c);
        free(x), free(res), free(y), free(y2);
    }
}

/* ---- Separable warp ------------------------------------------------------------------- */

static void cubic(double t, double w[4]) {
    const double A = -0.75;
    w[0] = ((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A;
    w[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
    w[2] = ((A + 2) * (1 - t) - (A + 3)) * (1 - t) * (1 - t) + 1;
    w[3] = 1 - w[0] - w[1] - w[2];
}
static int64_t clampi(int64_t i, int64_t n) { return i < 0 ? 0 : i >= n ? n - 1 : i; }

/* The warp computed per pixel, as OpenCV's warpPerspective defines it. */
static void warp_reference(const tm__image *in, const double m[9], int64_t w, int64_t h, int bicubic,
                           uint8_t *px) {
    const int C = in->channels, taps = bicubic ? 4 : 2, before = taps / 2 - 1;
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < w; x++) {
            uint8_t *q = px + (y * w + x) * C;
            double d = m[6] * (double)x + m[7] * (double)y + m[8];
            double sx = (m[0] * (double)x + m[1] * (double)y + m[2]) / d;
            double sy = (m[3] * (double)x + m[4] * (double)y + m[5]) / d;
            if (!isfinite(sx) || !isfinite(sy)) {
                memset(q, 0, (size_t)C);
                continue;
            }
            sx = fmin(fmax(sx, -8.0), (double)in->w + 8), sy = fmin(fmax(sy, -8.0), (double)in->h + 8);
            double fx = floor(sx), fy = floor(sy), wx[4], wy[4];
            if (bicubic) {
                cubic(sx - fx, wx);
                cubic(sy - fy, wy);
            } else {
                wx[0] = 1 - (sx - fx), wx[1] = sx - fx;
                wy[0] = 1 - (sy - fy), wy[1] = sy - fy;
            }
            for (int c = 0; c < C; c++) {
                double sum = 0;
                for (int j = 0; j < taps; j++) {
                    const uint8_t *row = in->px + clampi((int64_t)fy - before + j, in->h) * in->w * C + c;
                    double r = 0;
                    for (int i = 0; i < taps; i++) r += wx[i] * row[clampi((int64_t)fx - before + i, in->w) * C];
                    sum += wy[j] * r;
                }
                q[c] = !(sum > 0) ? 0 : sum >= 255 ? 255 : (uint8_t)lrint(sum);
            }
        }
}

static void test_warp(void) {
    for (int c = 0; c < 40; c++) {
        tm__image in = {pick(1, 60), pick(1, 40), (int)pick(1, 3), NULL};
        in.px = malloc((size_t)(in.w * in.h * in.channels));
        for (int64_t i = 0; i < in.w * in.h * in.channels; i++) in.px[i] = (uint8_t)next_u64();
        int64_t w = pick(1, 90), h = pick(1, 50);
        int bicubic = c % 2;
        tm__image out = {0};
        tm_error err;
        tm_status s = tm__image_resize_centered(&in, w, h, bicubic ? TM__INTERPOLATE_BICUBIC : TM__INTERPOLATE_BILINEAR,
                                                &out, &err);
        uint8_t *want = malloc((size_t)(w * h * in.channels));
        const double sx = (double)in.w / (double)w, sy = (double)in.h / (double)h;
        const double m[9] = {sx, 0, 0.5 * sx - 0.5, 0, sy, 0.5 * sy - 0.5, 0, 0, 1};
        warp_reference(&in, m, w, h, bicubic, want);
        CHECK(s == TM_OK && out.w == w && out.h == h &&
                  !memcmp(out.px, want, (size_t)(w * h * in.channels)),
              "resize %lldx%lldx%d -> %lldx%lld (%s) differs from the per-pixel warp",
              (long long)in.w, (long long)in.h, in.channels, (long long)w, (long long)h,
              bicubic ? "bicubic" : "bilinear");
        /* a perspective map: the general path */
        double mp[9] = {0.9, 0.05, 1.5, -0.04, 1.1, 0.5, 0.001, -0.002, 1};
        tm__image out2 = {0};
        s = tm__image_warp(&in, mp, w, h, bicubic ? TM__INTERPOLATE_BICUBIC : TM__INTERPOLATE_BILINEAR, &out2, &err);
        warp_reference(&in, mp, w, h, bicubic, want);
        CHECK(s == TM_OK && !memcmp(out2.px, want, (size_t)(w * h * in.channels)),
              "perspective warp differs from the per-pixel warp");
        free(want);
        tm__image_clear(&out);
        tm__image_clear(&out2);
        free(in.px);
    }
}

int main(void) {
    test_dwconv();
    test_chains();
    test_warp();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
