/* Resize (opsets 10-27) and the deprecated Upsample (7-10) as one RESIZE primitive: the
 * lowering turns scales or sizes (with axes and keep_aspect_ratio_policy), roi and the
 * attribute strings into output sizes and per-axis scales. Not the sampling itself
 * (core/prims/image.c). */
#include <math.h>
#include "elementwise.h"

#define RESIZE_DTS (TM_DTS_NUMERIC | TM_DTS_BOOL)

/* What the RESIZE primitive is asked for (see image.def). */
typedef struct resize_req {
    int rank;
    int64_t mode, transform, nearest, exclude_outside, antialias;
    double cubic_a, extrapolation;
    int64_t out[TM_MAX_RANK];
    double scale[TM_MAX_RANK], roi_start[TM_MAX_RANK], roi_end[TM_MAX_RANK];
} resize_req;

enum { TRANSFORM_ASYMMETRIC = 4, TRANSFORM_TF_CROP_AND_RESIZE = 5, NEAREST_LEGACY = 4 };

static void put_f64(tm_args *a, int at, double v) { memcpy(&a->i[at], &v, sizeof v); }

static tm_val resize_emit(tm_ctx *c, tm_val x, const resize_req *r) {
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = r->mode;
    a.i[1] = r->transform;
    a.i[2] = r->nearest;
    a.i[3] = r->exclude_outside;
    a.i[4] = r->antialias;
    a.f[0] = r->cubic_a;
    a.f[1] = r->extrapolation;
    for (int d = 0; d < r->rank; d++) {
        a.i[8 + d] = r->out[d];
        put_f64(&a, 16 + d, r->scale[d]);
        put_f64(&a, 24 + d, r->roi_start[d]);
        put_f64(&a, 32 + d, r->roi_end[d]);
    }
    return tm_prim(c, TM_P_RESIZE, &x, 1, &a);
}

/* The index of attribute `name`'s value among `names`, or -1 (node failed). */
static int attr_choice(tm_lower *L, const char *name, const char *def, const char *const *names,
                       int n) {
    const char *v = tm_attr_s(L, name, def);
    for (int i = 0; i < n; i++)
        if (names[i] && !strcmp(v, names[i])) return i;
    tm_lfail(L, TM_ERR_UNSUPPORTED, "attribute '%s' is '%s', which opset %lld does not have",
             name, v, (long long)tm_lopset(L));
    return -1;
}

/* Input i on the host as doubles (any float or integer dtype). Returns the count: 0 when
 * absent or empty (known without reading it), -1 on failure or a graph break. */
static int64_t host_values(tm_lower *L, int i, const char *name, double *out, int64_t max) {
    tm_ctx *c = tm_lctx(L);
    if (!tm_lhas(L, i)) return 0;
    tm_val v = tm_lin(L, i);
    int64_t n = tm_vnumel(c, v);
    if (n == 0) return 0;
    if (n > max) {
        tm_lfail(L, TM_ERR_SHAPE, "input '%s' has %lld entries; at most %lld fit", name,
                 (long long)n, (long long)max);
        return -1;
    }
    if (tm_vdtype(c, v) == TM_STRING || tm_vdtype(c, v) == TM_BOOL) {
        tm_lfail(L, TM_ERR_DTYPE, "input '%s' has dtype %s, expected numbers", name,
                 tm_dtype_name(tm_vdtype(c, v)));
        return -1;
    }
    const tm_tensor *t = tm_host(c, v);
    if (!t) return -1;
    for (int64_t k = 0; k < n; k++) out[k] = tm_load_f64(t->data, t->dtype, (size_t)k);
    return n;
}

static void resize_defaults(tm_ctx *c, tm_val x, resize_req *r) {
    memset(r, 0, sizeof *r);
    r->rank = tm_vrank(c, x);
    r->cubic_a = -0.75;
    for (int d = 0; d < r->rank; d++) {
        r->out[d] = tm_vdims(c, x)[d];
        r->scale[d] = 1.0;
        r->roi_end[d] = 1.0;
    }
}

/* Output sizes from per-axis scales: floor(in * scale), times the roi's extent for
 * tf_crop_and_resize (whose coordinates then use the integer output length). */
static int sizes_from_scales(tm_lower *L, tm_val x, resize_req *r) {
    tm_ctx *c = tm_lctx(L);
    for (int d = 0; d < r->rank; d++) {
        double s = r->scale[d], in = (double)tm_vdims(c, x)[d];
        if (!(s > 0) || !isfinite(s)) {
            tm_lfail(L, TM_ERR_SHAPE, "input 'scales' has %g for axis %d; scales must be "
                     "finite and > 0", s, d);
            return -1;
        }
        double extent = r->transform == TRANSFORM_TF_CROP_AND_RESIZE
                            ? r->roi_end[d] - r->roi_start[d] : 1.0;
        double out = floor(in * extent * s);
        if (!(out >= 0) || out > 9.0e15) {
            tm_lfail(L, TM_ERR_SHAPE, "input 'scales' makes axis %d %g long", d, out);
            return -1;
        }
        r->out[d] = (int64_t)out;
        if (r->transform == TRANSFORM_TF_CROP_AND_RESIZE && in > 0)
            r->scale[d] = (double)r->out[d] / in;
    }
    return 0;
}

/* Resize-10, Upsample: nearest or linear, asymmetric coordinates, legacy rounding. */
static tm_status lower_legacy(tm_lower *L, tm_val x, const double *scales, int64_t n) {
    tm_ctx *c = tm_lctx(L);
    static const char *const modes[] = {"nearest", "linear", "bilinear"};
    resize_req r;
    resize_defaults(c, x, &r);
    if (n != r.rank)
        return tm_lfail(L, TM_ERR_SHAPE, "'scales' has %lld entries; input 0 has rank %d",
                        (long long)n, r.rank);
    int mode = attr_choice(L, "mode", "nearest", modes, 3);
    if (mode < 0) return c->status;
    r.mode = mode ? 1 : 0;
    r.transform = TRANSFORM_ASYMMETRIC;
    r.nearest = NEAREST_LEGACY;
    for (int d = 0; d < r.rank; d++) r.scale[d] = scales[d];
    if (sizes_from_scales(L, x, &r)) return c->status;
    tm_lout(L, 0, resize_emit(c, x, &r));
    return c->status;
}

static tm_status lower_resize_v10(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    double scales[TM_MAX_RANK];
    if (tm_ew_check(L, 0, x, RESIZE_DTS)) return c->status;
    if (!tm_lhas(L, 1)) return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "input 1 'scales' is missing");
    int64_t n = host_values(L, 1, "scales", scales, TM_MAX_RANK);
    if (n < 0) return c->status;
    return lower_legacy(L, x, scales, n);
}

static tm_status lower_upsample_v7(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    if (tm_ew_check(L, 0, x, RESIZE_DTS)) return c->status;
    const float *f;
    int n = tm_attr_floats(L, "scales", &f);
    if (n < 0) return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute 'scales' is missing");
    if (n > TM_MAX_RANK)
        return tm_lfail(L, TM_ERR_SHAPE, "attribute 'scales' has %d entries", n);
    double scales[TM_MAX_RANK];
    for (int i = 0; i < n; i++) scales[i] = f[i];
    return lower_legacy(L, x, scales, n);
}

/* Reads attribute axes (opset 18 on) into normalised, distinct axes; all axes when
 * absent. */
static int read_axes(tm_lower *L, int rank, int64_t *axes) {
    const int64_t *v;
    int n = tm_lopset(L) >= 18 ? tm_attr_ints(L, "axes", &v) : -1;
    if (n < 0) {
        for (int d = 0; d < rank; d++) axes[d] = d;
        return rank;
    }
    int seen[TM_MAX_RANK] = {0};
    if (n > rank) {
        tm_lfail(L, TM_ERR_SHAPE, "attribute 'axes' has %d entries for rank %d", n, rank);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        int64_t a = v[i] < 0 ? v[i] + rank : v[i];
        if (a < 0 || a >= rank || seen[a]) {
            tm_lfail(L, TM_ERR_SHAPE, "attribute 'axes' has %lld, which is out of range for "
                     "rank %d or repeated", (long long)v[i], rank);
            return -1;
        }
        seen[a] = 1;
        axes[i] = a;
    }
    return n;
}

/* sizes for the listed axes; not_larger/not_smaller keep the aspect ratio with one scale
 * for all of them (rounded half up, as the spec says). */
static int sizes_given(tm_lower *L, tm_val x, resize_req *r, const int64_t *axes, int n_axes,
                       const double *sizes) {
    tm_ctx *c = tm_lctx(L);
    static const char *const policies[] = {"stretch", "not_larger", "not_smaller"};
    int policy = attr_choice(L, "keep_aspect_ratio_policy", "stretch", policies, 3);
    if (policy < 0) return -1;
    double pick = policy == 1 ? INFINITY : 0.0;
    for (int i = 0; i < n_axes; i++) {
        int d = (int)axes[i];
        double in = (double)tm_vdims(c, x)[d];
        if (sizes[i] < 0 || (in == 0 && sizes[i] > 0)) {
            tm_lfail(L, TM_ERR_SHAPE, "input 'sizes' asks %g for axis %d of size %g", sizes[i],
                     d, in);
            return -1;
        }
        r->out[d] = (int64_t)sizes[i];
        r->scale[d] = in > 0 ? sizes[i] / in : 1.0;
        if (policy == 1 && r->scale[d] < pick) pick = r->scale[d];
        if (policy == 2 && r->scale[d] > pick) pick = r->scale[d];
    }
    if (policy == 0) return 0;
    for (int i = 0; i < n_axes; i++) {
        int d = (int)axes[i];
        r->scale[d] = pick;
        r->out[d] = (int64_t)(pick * (double)tm_vdims(c, x)[d] + 0.5);
    }
    return 0;
}

/* The attributes of Resize 11 and later. */
static int read_modes(tm_lower *L, resize_req *r) {
    static const char *const modes[] = {"nearest", "linear", "cubic"};
    static const char *const transforms[] = {
        "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
        "asymmetric", "tf_crop_and_resize", "tf_half_pixel_for_nn"};
    static const char *const rounding[] = {"round_prefer_floor", "round_prefer_ceil", "floor",
                                           "ceil"};
    int64_t opset = tm_lopset(L);
    int mode = attr_choice(L, "mode", "nearest", modes, 3);
    /* half_pixel_symmetric came in 19; tf_half_pixel_for_nn left in 13. */
    int transform = attr_choice(L, "coordinate_transformation_mode", "half_pixel", transforms,
                                opset < 13 ? 7 : 6);
    int nearest = attr_choice(L, "nearest_mode", "round_prefer_floor", rounding, 4);
    if (mode < 0 || transform < 0 || nearest < 0) return -1;
    if (transform == 1 && opset < 19) {
        tm_lfail(L, TM_ERR_UNSUPPORTED, "attribute 'coordinate_transformation_mode' is "
                 "'half_pixel_symmetric', which opset %lld does not have", (long long)opset);
        return -1;
    }
    r->mode = mode;
    r->transform = transform;
    r->nearest = nearest;
    r->cubic_a = tm_attr_f(L, "cubic_coeff_a", -0.75f);
    r->exclude_outside = tm_attr_i(L, "exclude_outside", 0) != 0;
    r->extrapolation = tm_attr_f(L, "extrapolation_value", 0.0f);
    r->antialias = opset >= 18 && tm_attr_i(L, "antialias", 0) != 0;
    if (r->antialias && mode == 0) {
        tm_lfail(L, TM_ERR_UNSUPPORTED, "attribute 'antialias' is 1 but mode 'nearest' has no "
                 "antialiasing");
        return -1;
    }
    return 0;
}

/* roi (tf_crop_and_resize only): starts then ends of the listed axes. */
static int read_roi(tm_lower *L, resize_req *r, const int64_t *axes, int n_axes) {
    if (r->transform != TRANSFORM_TF_CROP_AND_RESIZE) return 0;
    double roi[2 * TM_MAX_RANK];
    int64_t n = host_values(L, 1, "roi", roi, 2 * TM_MAX_RANK);
    if (n < 0) return -1;
    if (n != 2 * n_axes) {
        tm_lfail(L, TM_ERR_SHAPE, "input 'roi' has %lld entries; tf_crop_and_resize over %d "
                 "axes needs %d", (long long)n, n_axes, 2 * n_axes);
        return -1;
    }
    for (int i = 0; i < n_axes; i++) {
        r->roi_start[axes[i]] = roi[i];
        r->roi_end[axes[i]] = roi[n_axes + i];
    }
    return 0;
}

static tm_status lower_resize(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    if (tm_ew_check(L, 0, x, RESIZE_DTS)) return c->status;
    resize_req r;
    resize_defaults(c, x, &r);
    int64_t axes[TM_MAX_RANK];
    int n_axes = read_axes(L, r.rank, axes);
    if (n_axes < 0 || read_modes(L, &r) || read_roi(L, &r, axes, n_axes)) return c->status;
    double scales[TM_MAX_RANK], sizes[TM_MAX_RANK];
    int64_t n_scales = host_values(L, 2, "scales", scales, TM_MAX_RANK);
    if (n_scales < 0) return c->status;
    int64_t n_sizes = host_values(L, 3, "sizes", sizes, TM_MAX_RANK);
    if (n_sizes < 0) return c->status;
    if ((n_scales > 0) == (n_sizes > 0))
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "exactly one of inputs 'scales' and "
                        "'sizes' must be given, got %lld scales and %lld sizes",
                        (long long)n_scales, (long long)n_sizes);
    int64_t given = n_scales ? n_scales : n_sizes;
    if (given != n_axes)
        return tm_lfail(L, TM_ERR_SHAPE, "input '%s' has %lld entries; it needs one per axis "
                        "(%d)", n_scales ? "scales" : "sizes", (long long)given, n_axes);
    if (n_scales) {
        for (int i = 0; i < n_axes; i++) r.scale[axes[i]] = scales[i];
        if (sizes_from_scales(L, x, &r)) return c->status;
    } else if (sizes_given(L, x, &r, axes, n_axes, sizes)) {
        return c->status;
    }
    tm_lout(L, 0, resize_emit(c, x, &r));
    return c->status;
}

static tm_status lower_upsample_v9(tm_lower *L) { return lower_resize_v10(L); }

TM_REGISTER_OP("", "Resize", 10, 10, lower_resize_v10);
TM_REGISTER_OP("", "Resize", 11, 27, lower_resize);
TM_REGISTER_OP("", "Upsample", 7, 8, lower_upsample_v7);
TM_REGISTER_OP("", "Upsample", 9, 10, lower_upsample_v9);
