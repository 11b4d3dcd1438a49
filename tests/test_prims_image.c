/* Tests of the image primitives (src/core/prims/image.c): RESIZE against a direct
 * transcription of the ONNX reference (taps by sorting the padded axis by distance, one
 * output element at a time), GRID_SAMPLE, ROI_ALIGN and MAX_ROI_POOL on hand-computed
 * values, COL2IM and DEFORM_IM2COL against naive loops, plus shape errors and tracing.
 * Not a test of the ONNX lowerings: their arguments are packed by hand here. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../src/core/ctx.h"

#define CHECK_RNG_SEED 0x2545f4914f6cdd1dULL
#include "check.h"

static tm_val make(tm_ctx *c, tm_dtype dt, int rank, const int64_t *dims, const double *v) {
    tm_tensor *t = tm_tensor_alloc(dt, rank, dims, NULL);
    for (int64_t i = 0; i < numel(rank, dims); i++) {
        if (tm_dtype_is_float(dt)) tm_store_f64(t->data, dt, (size_t)i, v[i]);
        else tm_store_i64(t->data, dt, (size_t)i, (int64_t)v[i]);
    }
    return tm_val_tensor(c, t, 0);
}

static double value_at(const tm_tensor *t, int64_t i) {
    if (tm_dtype_is_float(t->dtype)) return tm_load_f64(t->data, t->dtype, (size_t)i);
    if (tm_dtype_is_unsigned_int(t->dtype)) return (double)tm_load_u64(t->data, t->dtype, (size_t)i);
    return (double)tm_load_i64(t->data, t->dtype, (size_t)i);
}

/* Compares v with want: |got - want| <= tol * (1 + |want|). */
static void expect_values(tm_ctx *c, tm_val v, int rank, const int64_t *dims,
                          const double *want, double tol, const char *name) {
    const tm_tensor *t = tm_ctx_ok(c) ? tm_vdata(c, v) : NULL;
    check(t != NULL, "%s: no result (%s)", name, c->err.message);
    if (!t) return;
    int same = t->rank == rank;
    for (int d = 0; same && d < rank; d++) same = t->dims[d] == dims[d];
    check(same, "%s: wrong output shape", name);
    if (!same) return;
    int64_t n = numel(rank, dims), bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        double got = value_at(t, i);
        int ok = (isnan(want[i]) && isnan(got)) || fabs(got - want[i]) <= tol * (1 + fabs(want[i]));
        if (!ok && bad++ == 0) first = i;
    }
    check(bad == 0, "%s: %lld of %lld values differ, first at %lld: got %.9g want %.9g", name,
          (long long)bad, (long long)n, (long long)first, first >= 0 ? value_at(t, first) : 0.0,
          first >= 0 ? want[first] : 0.0);
}

static void expect_failure(tm_ctx *c, tm_status code, const char *needle, const char *name) {
    check(c->status == code, "%s: status %d, want %d (%s)", name, (int)c->status, (int)code,
          c->err.message);
    check(strstr(c->err.message, needle) != NULL, "%s: message '%s' lacks '%s'", name,
          c->err.message, needle);
}

static void put_f64(tm_args *a, int at, double v) { memcpy(&a->i[at], &v, sizeof v); }

/* ---- RESIZE against the reference, element by element ------------------------------------- */

typedef struct resize_case {
    int mode, transform, nearest, exclude, antialias;
    double cubic_a, extrapolation;
    int rank;
    int64_t in[4], out[4];
    double scale[4], roi0[4], roi1[4];
} resize_case;

static tm_args resize_args(const resize_case *rc) {
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = rc->mode;
    a.i[1] = rc->transform;
    a.i[2] = rc->nearest;
    a.i[3] = rc->exclude;
    a.i[4] = rc->antialias;
    a.f[0] = rc->cubic_a;
    a.f[1] = rc->extrapolation;
    for (int d = 0; d < rc->rank; d++) {
        a.i[8 + d] = rc->out[d];
        put_f64(&a, 16 + d, rc->scale[d]);
        put_f64(&a, 24 + d, rc->roi0[d]);
        put_f64(&a, 32 + d, rc->roi1[d]);
    }
    return a;
}

/* The reference's 1-D coefficients for `ratio` (in (0, 1]); returns their count. */
static int reference_coeffs(const resize_case *rc, double ratio, double scale, double *c) {
    double A = rc->cubic_a;
    if (rc->mode == 0) {
        int up;
        if (ratio == 1.0) up = 1;
        else if (rc->nearest == 0) up = ratio > 0.5;
        else if (rc->nearest == 1) up = ratio >= 0.5;
        else up = rc->nearest == 3;
        c[0] = !up;
        c[1] = up;
        return 2;
    }
    if (!rc->antialias) {
        if (rc->mode == 1) {
            c[0] = 1 - ratio;
            c[1] = ratio;
            return 2;
        }
        c[0] = ((A * (ratio + 1) - 5 * A) * (ratio + 1) + 8 * A) * (ratio + 1) - 4 * A;
        c[1] = ((A + 2) * ratio - (A + 3)) * ratio * ratio + 1;
        c[2] = ((A + 2) * (1 - ratio) - (A + 3)) * (1 - ratio) * (1 - ratio) + 1;
        c[3] = ((A * ((1 - ratio) + 1) - 5 * A) * ((1 - ratio) + 1) + 8 * A) * ((1 - ratio) + 1) -
               4 * A;
        return 4;
    }
    double s = scale < 1 ? scale : 1, sum = 0;
    int start = (int)floor((rc->mode == 1 ? -1 : -2) / s) + 1, n = 2 - 2 * start;
    for (int i = 0; i < n; i++) {
        double x = fabs(s * (start + i - ratio));
        if (rc->mode == 1) c[i] = x < 1 ? 1 - x : 0;
        else if (x <= 1) c[i] = (A + 2) * x * x * x - (A + 3) * x * x + 1;
        else if (x < 2) c[i] = A * x * x * x - 5 * A * x * x + 8 * A * x - 4 * A;
        else c[i] = 0;
        sum += c[i];
    }
    for (int i = 0; i < n; i++) c[i] /= sum;
    return n;
}

/* The n nearest positions to x in [first, first + limit), ties to the smaller, in
 * ascending order. (The reference shifts x by the padding first, which can round x onto
 * an integer and pick a window that disagrees with its weights; distances are taken
 * unshifted here.) */
static void nearest_positions(double x, int n, int first, int limit, int *out) {
    char *taken = calloc((size_t)limit, 1);
    for (int k = 0; k < n; k++) {
        int best = -1;
        for (int i = 0; i < limit; i++)
            if (!taken[i] && (best < 0 || fabs(x - (first + i)) < fabs(x - (first + best))))
                best = i;
        taken[best] = 1;
    }
    for (int i = 0, k = 0; i < limit; i++)
        if (taken[i]) out[k++] = first + i;
    free(taken);
}

/* One axis of one output element as the reference does it: a list of (index, weight),
 * or 0 when tf_crop_and_resize extrapolates. */
static int reference_axis(const resize_case *rc, int d, int64_t j, int *idx, double *w,
                          int *count) {
    double in = (double)rc->in[d], s = rc->scale[d], out_w = s * in, x = (double)j, xo;
    switch (rc->transform) {
    case 0: xo = (x + 0.5) / s - 0.5; break;
    case 1: xo = in / 2 * (1 - (double)rc->out[d] / out_w) + (x + 0.5) / s - 0.5; break;
    case 2: xo = out_w == 1 ? -0.5 : (x + 0.5) / s - 0.5; break;
    case 3: xo = out_w == 1 ? 0 : x * (in - 1) / (out_w - 1); break;
    case 4: xo = x / s; break;
    default:
        xo = out_w == 1 ? (rc->roi1[d] - rc->roi0[d]) * (in - 1) / 2
                        : x * (rc->roi1[d] - rc->roi0[d]) * (in - 1) / (out_w - 1);
        xo += rc->roi0[d] * (in - 1);
        if (xo < 0 || xo > in - 1) return 0;
    }
    double ratio = xo == floor(xo) ? 1 : xo - floor(xo);
    double c[64];
    int n = reference_coeffs(rc, ratio, s, c), pad = (n + 1) / 2, pos[64];
    nearest_positions(xo, n, -pad, (int)rc->in[d] + 2 * pad, pos);
    double sum = 0;
    for (int t = 0; t < n; t++) {
        int raw = pos[t];
        if (rc->exclude && rc->mode != 0 && (raw < 0 || raw >= rc->in[d])) c[t] = 0;
        idx[t] = raw < 0 ? 0 : raw >= rc->in[d] ? (int)rc->in[d] - 1 : raw;
        w[t] = c[t];
        sum += c[t];
    }
    if (rc->exclude && rc->mode != 0)
        for (int t = 0; t < n; t++) w[t] /= sum;
    *count = n;
    return 1;
}

static double reference_resize(const resize_case *rc, const double *x, const int64_t *o) {
    int idx[4][64], count[4];
    double w[4][64];
    for (int d = 0; d < rc->rank; d++)
        if (!reference_axis(rc, d, o[d], idx[d], w[d], &count[d])) return rc->extrapolation;
    double sum = 0;
    int64_t combos = 1;
    for (int d = 0; d < rc->rank; d++) combos *= count[d];
    for (int64_t m = 0; m < combos; m++) {
        int64_t rest = m, at = 0;
        double weight = 1;
        for (int d = rc->rank - 1, stride = 1; d >= 0; d--) {
            int t = (int)(rest % count[d]);
            rest /= count[d];
            weight *= w[d][t];
            at += idx[d][t] * stride;
            stride *= (int)rc->in[d];
        }
        sum += weight * x[at];
    }
    return sum;
}

static void check_resize(const resize_case *rc, const char *name) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    int64_t n_in = numel(rc->rank, rc->in), n_out = numel(rc->rank, rc->out);
    double *x = malloc((size_t)n_in * sizeof *x), *want = malloc((size_t)n_out * sizeof *want);
    for (int64_t i = 0; i < n_in; i++) x[i] = random_unit() * 10;
    int64_t o[4] = {0};
    for (int64_t i = 0; i < n_out; i++) {
        want[i] = reference_resize(rc, x, o);
        for (int d = rc->rank - 1; d >= 0; d--) {
            if (++o[d] < rc->out[d]) break;
            o[d] = 0;
        }
    }
    tm_args a = resize_args(rc);
    tm_val in = make(&c, TM_DOUBLE, rc->rank, rc->in, x);
    tm_val y = tm_prim(&c, TM_P_RESIZE, &in, 1, &a);
    expect_values(&c, y, rc->rank, rc->out, want, 1e-9, name);
    /* float32 takes the typed path of the same passes. */
    tm_val in32 = make(&c, TM_FLOAT, rc->rank, rc->in, x);
    tm_val y32 = tm_prim(&c, TM_P_RESIZE, &in32, 1, &a);
    expect_values(&c, y32, rc->rank, rc->out, want, 2e-5, name);
    free(x);
    free(want);
    tm_ctx_destroy(&c);
}

/* A case of rank 2 or 3 whose axes grow or shrink by the given scales. */
static resize_case resize_case_of(int mode, int transform, int rank, const int64_t *in,
                                  const double *scale) {
    resize_case rc;
    memset(&rc, 0, sizeof rc);
    rc.mode = mode;
    rc.transform = transform;
    rc.cubic_a = -0.75;
    rc.rank = rank;
    for (int d = 0; d < rank; d++) {
        rc.in[d] = in[d];
        rc.scale[d] = scale[d];
        rc.out[d] = (int64_t)floor((double)in[d] * scale[d]);
        rc.roi0[d] = 0;
        rc.roi1[d] = 1;
    }
    return rc;
}

static void test_resize_reference(void) {
    const int64_t in[3] = {3, 5, 4};
    const double grow[3] = {1.0, 2.5, 1.75}, shrink[3] = {1.0, 0.6, 0.5}, mixed[3] = {2, 0.8, 3};
    const double *scales[3] = {grow, shrink, mixed};
    char name[128];
    for (int mode = 0; mode < 3; mode++)
        for (int transform = 0; transform < 6; transform++)
            for (int k = 0; k < 3; k++) {
                resize_case rc = resize_case_of(mode, transform, 3, in, scales[k]);
                if (transform == 5)
                    for (int d = 0; d < 3; d++) rc.roi0[d] = -0.2 + 0.1 * d, rc.roi1[d] = 1.1;
                snprintf(name, sizeof name, "resize mode %d transform %d scales %d", mode,
                         transform, k);
                check_resize(&rc, name);
                if (mode == 0) {
                    for (int r = 1; r < 4; r++) {
                        rc.nearest = r;
                        snprintf(name, sizeof name, "resize nearest rounding %d transform %d "
                                 "scales %d", r, transform, k);
                        check_resize(&rc, name);
                    }
                    continue;
                }
                rc.exclude = 1;
                rc.cubic_a = -0.5;
                snprintf(name, sizeof name, "resize mode %d transform %d scales %d exclude",
                         mode, transform, k);
                check_resize(&rc, name);
                rc.exclude = 0;
                rc.antialias = 1;
                snprintf(name, sizeof name, "resize mode %d transform %d scales %d antialias",
                         mode, transform, k);
                check_resize(&rc, name);
            }
    /* Sizes that are not scale * in: the fractional output length matters. */
    resize_case rc = resize_case_of(1, 3, 3, in, shrink);
    rc.out[1] = 4;
    check_resize(&rc, "resize align_corners with a fractional output length");
    rc.transform = 1;
    check_resize(&rc, "resize half_pixel_symmetric with a fractional output length");
    /* A strong shrink with antialiasing: many taps per output. */
    const int64_t wide[2] = {2, 40};
    const double tiny[2] = {1, 0.1};
    rc = resize_case_of(2, 0, 2, wide, tiny);
    rc.antialias = 1;
    check_resize(&rc, "resize cubic antialias at scale 0.1");
}

static void test_resize_values(void) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    /* [1, 2] doubled, half_pixel linear: edges clamp. */
    resize_case rc;
    memset(&rc, 0, sizeof rc);
    rc.mode = 1;
    rc.rank = 1;
    rc.out[0] = 4;
    rc.scale[0] = 2;
    tm_args a = resize_args(&rc);
    tm_val x = make(&c, TM_FLOAT, 1, (int64_t[]){2}, (double[]){1, 2});
    expect_values(&c, tm_prim(&c, TM_P_RESIZE, &x, 1, &a), 1, (int64_t[]){4},
                  (double[]){1, 1.25, 1.75, 2}, 1e-7, "resize linear [1, 2] x2");
    /* Cubic overshoot on uint8 saturates and rounds. */
    rc.mode = 2;
    rc.cubic_a = -0.75;
    rc.out[0] = 6;
    rc.scale[0] = 2;
    a = resize_args(&rc);
    tm_val u = make(&c, TM_UINT8, 1, (int64_t[]){3}, (double[]){0, 255, 0});
    tm_val d = make(&c, TM_DOUBLE, 1, (int64_t[]){3}, (double[]){0, 255, 0});
    const tm_tensor *yu = tm_vdata(&c, tm_prim(&c, TM_P_RESIZE, &u, 1, &a));
    const tm_tensor *yd = tm_vdata(&c, tm_prim(&c, TM_P_RESIZE, &d, 1, &a));
    int ok = yu && yd && yu->dtype == TM_UINT8;
    for (int i = 0; ok && i < 6; i++) {
        double v = nearbyint(value_at(yd, i));
        v = v < 0 ? 0 : v > 255 ? 255 : v;
        ok = value_at(yu, i) == v;
    }
    check(ok, "resize cubic uint8: rounded and saturated like the double result");
    /* Nearest copies int64 exactly, beyond double precision. */
    rc.mode = 0;
    rc.out[0] = 4;
    a = resize_args(&rc);
    tm_tensor *big = tm_tensor_alloc(TM_INT64, 1, (int64_t[]){2}, NULL);
    ((int64_t *)big->data)[0] = (1LL << 60) + 1;
    ((int64_t *)big->data)[1] = -((1LL << 60) + 3);
    tm_val b = tm_val_tensor(&c, big, 0);
    const tm_tensor *yb = tm_vdata(&c, tm_prim(&c, TM_P_RESIZE, &b, 1, &a));
    check(yb && ((int64_t *)yb->data)[0] == (1LL << 60) + 1 &&
              ((int64_t *)yb->data)[3] == -((1LL << 60) + 3),
          "resize nearest int64 copies exactly");
    /* tf_crop_and_resize: outside the roi is the extrapolation value, also for nearest. */
    rc.transform = 5;
    rc.extrapolation = -7;
    rc.roi0[0] = 0.5;
    rc.roi1[0] = 2.0;
    rc.out[0] = 3;
    rc.scale[0] = 1.5;
    a = resize_args(&rc);
    tm_val f = make(&c, TM_FLOAT, 1, (int64_t[]){2}, (double[]){10, 20});
    expect_values(&c, tm_prim(&c, TM_P_RESIZE, &f, 1, &a), 1, (int64_t[]){3},
                  (double[]){10, -7, -7}, 1e-7, "resize tf_crop_and_resize extrapolates");
    /* float16 goes through the double buffers. */
    rc.transform = 0;
    rc.mode = 1;
    rc.out[0] = 4;
    rc.scale[0] = 2;
    a = resize_args(&rc);
    tm_val h = make(&c, TM_FLOAT16, 1, (int64_t[]){2}, (double[]){1, 2});
    expect_values(&c, tm_prim(&c, TM_P_RESIZE, &h, 1, &a), 1, (int64_t[]){4},
                  (double[]){1, 1.25, 1.75, 2}, 1e-3, "resize linear float16");
    tm_ctx_destroy(&c);
}

/* ---- GRID_SAMPLE ------------------------------------------------------------------------- */

/* A 1-D sample of [1, 2, 3, 4] at normalised points g. */
static void check_grid_1d(int mode, int padding, int align, const double *g, int n,
                          const double *want, const char *name) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = mode;
    a.i[1] = padding;
    a.i[2] = align;
    tm_val in[2] = {make(&c, TM_FLOAT, 3, (int64_t[]){1, 1, 4}, (double[]){1, 2, 3, 4}),
                    make(&c, TM_FLOAT, 3, (int64_t[]){1, n, 1}, g)};
    expect_values(&c, tm_prim(&c, TM_P_GRID_SAMPLE, in, 2, &a), 3, (int64_t[]){1, 1, n}, want,
                  1e-6, name);
    tm_ctx_destroy(&c);
}

static void test_grid_sample(void) {
    /* align_corners=0: x = ((g + 1) * 4 - 1) / 2. */
    const double g[5] = {-1.5, -1, 0, 0.3, 1.2};
    check_grid_1d(1, 0, 0, g, 5, (double[]){0, 0.5, 2.5, 3.1, 0.4}, "grid linear zeros");
    check_grid_1d(1, 1, 0, g, 5, (double[]){1, 1, 2.5, 3.1, 4}, "grid linear border");
    check_grid_1d(1, 2, 0, g, 5, (double[]){1.5, 1, 2.5, 3.1, 4}, "grid linear reflection");
    /* nearest rounds halves to even: -0.5 -> 0, 1.5 -> 2. */
    check_grid_1d(0, 0, 0, (double[]){-1, 0, 1}, 3, (double[]){1, 3, 0}, "grid nearest zeros");
    check_grid_1d(0, 1, 0, (double[]){-1, 0, 1}, 3, (double[]){1, 3, 4}, "grid nearest border");
    /* align_corners=1 on the pixel centres reproduces the input in every mode. */
    const double centres[4] = {-1, -1.0 / 3, 1.0 / 3, 1};
    for (int mode = 0; mode < 3; mode++)
        for (int padding = 0; padding < 3; padding++)
            check_grid_1d(mode, padding, 1, centres, 4, (double[]){1, 2, 3, 4},
                          "grid identity with align_corners");
    /* 2-D: grid lists (x, y); a point between four pixels averages them. */
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 1;
    a.i[2] = 1;
    tm_val in[2] = {make(&c, TM_DOUBLE, 4, (int64_t[]){1, 2, 2, 3},
                         (double[]){0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15}),
                    make(&c, TM_DOUBLE, 4, (int64_t[]){1, 1, 2, 2}, (double[]){-0.5, 0, 1, -1})};
    expect_values(&c, tm_prim(&c, TM_P_GRID_SAMPLE, in, 2, &a), 4, (int64_t[]){1, 2, 1, 2},
                  (double[]){2, 2, 12, 12}, 1e-12, "grid 2-D bilinear");
    tm_ctx_destroy(&c);
}

/* ---- ROI_ALIGN and MAX_ROI_POOL ---------------------------------------------------------- */

static void test_roi(void) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    double img[2 * 16];
    for (int i = 0; i < 32; i++) img[i] = i < 16 ? 3.0 : (double)(i - 16);
    tm_val x = make(&c, TM_FLOAT, 4, (int64_t[]){2, 1, 4, 4}, img);
    tm_val rois = make(&c, TM_FLOAT, 2, (int64_t[]){2, 4}, (double[]){0.5, 0.5, 3, 2.5, 0, 0, 4, 4});
    tm_val batch = make(&c, TM_INT64, 1, (int64_t[]){2}, (double[]){0, 1});
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[1] = 2;
    a.i[2] = 2;
    a.i[3] = 2;
    a.i[4] = 1;
    a.f[0] = 1.0;
    tm_val in[3] = {x, rois, batch};
    tm_val y = tm_prim(&c, TM_P_ROI_ALIGN, in, 3, &a);
    /* A constant image averages to itself. The ramp (4 row + col) over the whole image,
     * shifted by half a pixel, samples rows and columns {0, 1} and {2, 3} per bin. */
    expect_values(&c, y, 4, (int64_t[]){2, 1, 2, 2}, (double[]){3, 3, 3, 3, 2.5, 4.5, 10.5, 12.5},
                  1e-6, "roi_align avg");
    a.i[0] = 1;
    y = tm_prim(&c, TM_P_ROI_ALIGN, in, 3, &a);
    const tm_tensor *t = tm_vdata(&c, y);
    check(t && value_at(t, 0) <= 3.0 + 1e-6 && value_at(t, 0) > 0, "roi_align max is a weighted "
          "corner");
    tm_val bad = make(&c, TM_INT64, 1, (int64_t[]){2}, (double[]){0, 2});
    tm_val in_bad[3] = {x, rois, bad};
    tm_prim(&c, TM_P_ROI_ALIGN, in_bad, 3, &a);
    expect_failure(&c, TM_ERR_RUNTIME, "out of range", "roi_align batch index");
    tm_ctx_destroy(&c);

    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    x = make(&c, TM_FLOAT, 4, (int64_t[]){2, 1, 4, 4}, img);
    tm_val boxes = make(&c, TM_FLOAT, 2, (int64_t[]){1, 5}, (double[]){1, 0, 0, 3, 3});
    memset(&a, 0, sizeof a);
    a.i[0] = 2;
    a.i[1] = 2;
    a.f[0] = 1.0;
    tm_val pin[2] = {x, boxes};
    expect_values(&c, tm_prim(&c, TM_P_MAX_ROI_POOL, pin, 2, &a), 4, (int64_t[]){1, 1, 2, 2},
                  (double[]){5, 7, 13, 15}, 0, "max_roi_pool quadrants");
    tm_ctx_destroy(&c);
}

/* ---- COL2IM ------------------------------------------------------------------------------ */

static void check_col2im(int n, const int64_t *image, const int64_t *block, const int64_t *stride,
                         const int64_t *pad_begin, const int64_t *pad_end, const int64_t *dil,
                         const char *name) {
    int64_t count[3], K = 1, L = 1, C = 2, N = 2, plane = 1;
    for (int d = 0; d < n; d++) {
        count[d] = (image[d] + pad_begin[d] + pad_end[d] - dil[d] * (block[d] - 1) - 1) / stride[d] + 1;
        K *= block[d];
        L *= count[d];
        plane *= image[d];
    }
    int64_t cols_dims[3] = {N, C * K, L};
    double *cols = calloc((size_t)(N * C * K * (L + 1)), sizeof *cols); /* room for L + 1 */
    double *want = calloc((size_t)(N * C * plane), sizeof *want);
    for (int64_t i = 0; i < N * C * K * L; i++) cols[i] = random_unit();
    for (int64_t m = 0; m < N * C; m++)
        for (int64_t k = 0; k < K; k++)
            for (int64_t l = 0; l < L; l++) {
                int64_t kr = k, lr = l, at = 0, in = 1, ki[3], li[3];
                for (int d = n - 1; d >= 0; d--) {
                    ki[d] = kr % block[d];
                    kr /= block[d];
                    li[d] = lr % count[d];
                    lr /= count[d];
                }
                for (int d = 0; d < n; d++) {
                    int64_t i = li[d] * stride[d] - pad_begin[d] + ki[d] * dil[d];
                    in &= i >= 0 && i < image[d];
                    at = at * image[d] + i;
                }
                if (in) want[m * plane + at] += cols[(m * K + k) * L + l];
            }
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = n;
    for (int d = 0; d < n; d++) {
        a.i[1 + d] = image[d];
        a.i[1 + n + d] = block[d];
        a.i[1 + 2 * n + d] = stride[d];
        a.i[1 + 3 * n + d] = pad_begin[d];
        a.i[1 + 4 * n + d] = pad_end[d];
        a.i[1 + 5 * n + d] = dil[d];
    }
    tm_val x = make(&c, TM_DOUBLE, 3, cols_dims, cols);
    int64_t out[5] = {N, C, image[0], n > 1 ? image[1] : 0, n > 2 ? image[2] : 0};
    expect_values(&c, tm_prim(&c, TM_P_COL2IM, &x, 1, &a), n + 2, out, want, 1e-12, name);
    /* One block too many is a shape error. */
    cols_dims[2] = L + 1;
    x = make(&c, TM_DOUBLE, 3, cols_dims, cols);
    tm_prim(&c, TM_P_COL2IM, &x, 1, &a);
    expect_failure(&c, TM_ERR_SHAPE, "blocks", name);
    free(cols);
    free(want);
    tm_ctx_destroy(&c);
}

static void test_col2im(void) {
    check_col2im(2, (int64_t[]){5, 5}, (int64_t[]){2, 2}, (int64_t[]){1, 1}, (int64_t[]){0, 0},
                 (int64_t[]){0, 0}, (int64_t[]){1, 1}, "col2im 2-D");
    check_col2im(2, (int64_t[]){6, 7}, (int64_t[]){3, 2}, (int64_t[]){2, 3}, (int64_t[]){1, 0},
                 (int64_t[]){2, 1}, (int64_t[]){1, 2}, "col2im 2-D strided padded dilated");
    check_col2im(3, (int64_t[]){3, 4, 5}, (int64_t[]){2, 2, 3}, (int64_t[]){1, 2, 1},
                 (int64_t[]){0, 1, 1}, (int64_t[]){1, 0, 1}, (int64_t[]){1, 1, 2}, "col2im 3-D");
}

/* ---- DEFORM_IM2COL ----------------------------------------------------------------------- */

static void test_deform_im2col(void) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    /* 2-D, 2 channels of 3x4, kernel 2x2, stride 1, pad 1: zero offsets are im2col. */
    const int64_t H = 3, W = 4, OH = 4, OW = 5, K = 4;
    double x[24], off[2 * 2 * K * OH * OW], want[2 * K * OH * OW];
    for (int i = 0; i < 24; i++) x[i] = random_unit();
    memset(off, 0, sizeof off);
    for (int ch = 0; ch < 2; ch++)
        for (int k = 0; k < K; k++)
            for (int p = 0; p < OH * OW; p++) {
                int64_t r = p / OW - 1 + k / 2, col = p % OW - 1 + k % 2;
                int in = r >= 0 && r < H && col >= 0 && col < W;
                want[(ch * K + k) * OH * OW + p] = in ? x[ch * 12 + r * W + col] : 0;
            }
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 2;
    a.i[1] = 2; /* two offset groups, one channel each */
    a.i[2] = a.i[3] = 2;
    a.i[4] = a.i[5] = 1;
    a.i[6] = a.i[7] = 1;
    a.i[8] = a.i[9] = 1;
    tm_val in[3] = {make(&c, TM_DOUBLE, 4, (int64_t[]){1, 2, H, W}, x),
                    make(&c, TM_DOUBLE, 4, (int64_t[]){1, 2 * K * 2, OH, OW}, off)};
    expect_values(&c, tm_prim(&c, TM_P_DEFORM_IM2COL, in, 2, &a), 3,
                  (int64_t[]){1, 2 * K, OH * OW}, want, 1e-12, "deform_im2col zero offsets");
    /* Half a pixel down in group 1 averages two rows; a mask of 2 doubles group 0. */
    for (int k = 0; k < K; k++)
        for (int p = 0; p < OH * OW; p++) off[((1 * K + k) * 2 + 0) * OH * OW + p] = 0.5;
    double mask[2 * K * OH * OW];
    for (int i = 0; i < 2 * K * OH * OW; i++) mask[i] = i < K * OH * OW ? 2 : 1;
    for (int k = 0; k < K; k++)
        for (int p = 0; p < OH * OW; p++) {
            want[k * OH * OW + p] *= 2;
            int64_t r = p / OW - 1 + k / 2, col = p % OW - 1 + k % 2;
            double v0 = r >= 0 && r < H && col >= 0 && col < W ? x[12 + r * W + col] : 0;
            double v1 = r + 1 >= 0 && r + 1 < H && col >= 0 && col < W ? x[12 + (r + 1) * W + col] : 0;
            want[(K + k) * OH * OW + p] = 0.5 * v0 + 0.5 * v1;
        }
    tm_val in2[3] = {in[0], make(&c, TM_DOUBLE, 4, (int64_t[]){1, 2 * K * 2, OH, OW}, off),
                     make(&c, TM_DOUBLE, 4, (int64_t[]){1, 2 * K, OH, OW}, mask)};
    expect_values(&c, tm_prim(&c, TM_P_DEFORM_IM2COL, in2, 3, &a), 3,
                  (int64_t[]){1, 2 * K, OH * OW}, want, 1e-12, "deform_im2col offsets and mask");
    tm_val in3[2] = {in[0], make(&c, TM_DOUBLE, 4, (int64_t[]){1, 3, OH, OW}, off)};
    tm_prim(&c, TM_P_DEFORM_IM2COL, in3, 2, &a);
    expect_failure(&c, TM_ERR_SHAPE, "offset groups", "deform_im2col offset channels");
    tm_ctx_destroy(&c);
}

/* ---- Errors and tracing ------------------------------------------------------------------ */

static void test_errors_and_trace(void) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    resize_case rc;
    memset(&rc, 0, sizeof rc);
    rc.rank = 1;
    rc.out[0] = 2;
    rc.scale[0] = 1;
    rc.mode = 7;
    tm_args a = resize_args(&rc);
    tm_val x = make(&c, TM_FLOAT, 1, (int64_t[]){2}, (double[]){1, 2});
    tm_prim(&c, TM_P_RESIZE, &x, 1, &a);
    expect_failure(&c, TM_ERR_UNSUPPORTED, "mode 7", "resize unknown mode");
    tm_ctx_destroy(&c);

    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    memset(&a, 0, sizeof a);
    tm_val gin[2] = {make(&c, TM_FLOAT, 4, (int64_t[]){1, 1, 2, 2}, (double[]){1, 2, 3, 4}),
                     make(&c, TM_FLOAT, 4, (int64_t[]){1, 1, 1, 3}, (double[]){0, 0, 0})};
    tm_prim(&c, TM_P_GRID_SAMPLE, gin, 2, &a);
    expect_failure(&c, TM_ERR_SHAPE, "grid", "grid_sample grid of the wrong width");
    tm_ctx_destroy(&c);

    /* Under trace an unknown input is recorded with the shape rule's dims. */
    tm_ctx_init(&c, TM_MODE_TRACE, NULL);
    int64_t dims[4] = {1, 3, 8, 8};
    tm_val s = tm_val_symbolic(&c, TM_FLOAT, 4, dims, 0);
    memset(&rc, 0, sizeof rc);
    rc.mode = 2;
    rc.rank = 4;
    for (int d = 0; d < 4; d++) {
        rc.out[d] = d < 2 ? dims[d] : 2 * dims[d];
        rc.scale[d] = d < 2 ? 1 : 2;
    }
    a = resize_args(&rc);
    tm_val y = tm_prim(&c, TM_P_RESIZE, &s, 1, &a);
    check(y != TM_NONE && c.n_nodes == 1 && tm_vdims(&c, y)[2] == 16 && tm_vdims(&c, y)[3] == 16 &&
              c.nodes[0].scratch > 0,
          "resize traced: one node, dims (1, 3, 16, 16), scratch sized");
    tm_ctx_destroy(&c);
}

int main(void) {
    test_resize_reference();
    test_resize_values();
    test_grid_sample();
    test_roi();
    test_col2im();
    test_deform_im2col();
    test_errors_and_trace();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
