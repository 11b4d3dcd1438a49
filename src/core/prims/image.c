/* Image and detection primitives (rows in image.def): shape rules and reference kernels
 * of RESIZE, GRID_SAMPLE, ROI_ALIGN, MAX_ROI_POOL, COL2IM and DEFORM_IM2COL. Values are
 * computed in double; float32 and float64 are read in place, other dtypes through the
 * dtype accessors. Not the ONNX lowerings (../../onnx/ops/resize.c, grid_sample.c, ...). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "../ctx.h"

/* ---- Shared helpers ---------------------------------------------------------------------- */

static const char *dims_text(char *buf, size_t cap, int rank, const int64_t *dims) {
    size_t n = (size_t)snprintf(buf, cap, "(");
    for (int d = 0; d < rank && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, d ? ", %lld" : "%lld", (long long)dims[d]);
    if (n < cap) snprintf(buf + n, cap - n, ")");
    return buf;
}

static void set_out(tm_vinfo *out, tm_dtype dt, int rank, const int64_t *dims) {
    out->dtype = dt;
    out->rank = rank;
    for (int d = 0; d < rank; d++) out->dims[d] = dims[d];
}

static int64_t product(const int64_t *dims, int from, int to) {
    int64_t p = 1;
    for (int d = from; d < to; d++) p *= dims[d];
    return p;
}

static double arg_f64(const tm_args *a, int at) {
    double v;
    memcpy(&v, &a->i[at], sizeof v);
    return v;
}

static size_t round8(size_t n) { return (n + 7) & ~(size_t)7; }

/* Element types a resampler can carry: every number and bool, not strings or complex. */
static int is_sampled_dtype(tm_dtype dt) {
    return tm_dtype_is_valid((int)dt) && dt != TM_STRING && dt != TM_COMPLEX64 &&
           dt != TM_COMPLEX128;
}

static inline double load(const tm_tensor *t, int64_t i) {
    if (t->dtype == TM_FLOAT) return ((const float *)t->data)[i];
    if (t->dtype == TM_DOUBLE) return ((const double *)t->data)[i];
    return tm_load_f64(t->data, t->dtype, (size_t)i);
}

/* Stores v into element i: floats as they are, integers rounded to nearest and
 * saturated to the type, bool as v != 0. */
static void store(tm_tensor *t, int64_t i, double v) {
    tm_dtype dt = t->dtype;
    if (dt == TM_FLOAT) {
        ((float *)t->data)[i] = (float)v;
        return;
    }
    if (tm_dtype_is_float(dt) || dt == TM_BOOL) {
        tm_store_f64(t->data, dt, (size_t)i, v);
        return;
    }
    if (isnan(v)) v = 0.0;
    v = nearbyint(v);
    int bits = tm_dtype_bits(dt);
    if (tm_dtype_is_signed_int(dt)) {
        double top = ldexp(1.0, bits - 1);
        int64_t s = v >= top ? (int64_t)(top - 1.0 < 9.2e18 ? top - 1.0 : 0) : 0;
        if (v >= top) s = bits == 64 ? INT64_MAX : (int64_t)top - 1;
        else if (v < -top) s = bits == 64 ? INT64_MIN : -(int64_t)top;
        else s = (int64_t)v;
        tm_store_i64(t->data, dt, (size_t)i, s);
        return;
    }
    double top = ldexp(1.0, bits);
    uint64_t u;
    if (v <= 0.0) u = 0;
    else if (v >= top) u = bits == 64 ? UINT64_MAX : (uint64_t)top - 1;
    else u = (uint64_t)v;
    tm_store_u64(t->data, dt, (size_t)i, u);
}

/* Keys' cubic convolution weights of the four taps around a point at distance r in
 * [0, 1] past the second tap. */
static void cubic_weights(double r, double A, double *c) {
    double s = 1.0 - r;
    c[0] = ((A * (r + 1) - 5 * A) * (r + 1) + 8 * A) * (r + 1) - 4 * A;
    c[1] = ((A + 2) * r - (A + 3)) * r * r + 1;
    c[2] = ((A + 2) * s - (A + 3)) * s * s + 1;
    c[3] = ((A * (s + 1) - 5 * A) * (s + 1) + 8 * A) * (s + 1) - 4 * A;
}

/* The cubic kernel itself, for the stretched (antialiased) filter. */
static double cubic_kernel(double x, double A) {
    x = fabs(x);
    double x2 = x * x, x3 = x2 * x;
    if (x <= 1) return (A + 2) * x3 - (A + 3) * x2 + 1;
    if (x < 2) return A * x3 - 5 * A * x2 + 8 * A * x - 4 * A;
    return 0.0;
}

/* ---- RESIZE ------------------------------------------------------------------------------ */

enum { MODE_NEAREST = 0, MODE_LINEAR = 1, MODE_CUBIC = 2 };
enum { CT_HALF_PIXEL = 0, CT_HALF_PIXEL_SYMMETRIC = 1, CT_PYTORCH_HALF_PIXEL = 2,
       CT_ALIGN_CORNERS = 3, CT_ASYMMETRIC = 4, CT_TF_CROP_AND_RESIZE = 5,
       CT_TF_HALF_PIXEL_FOR_NN = 6 };
enum { NEAREST_PREFER_FLOOR = 0, NEAREST_PREFER_CEIL = 1, NEAREST_FLOOR = 2, NEAREST_CEIL = 3,
       NEAREST_LEGACY = 4 };
enum { RESIZE_OUT = 8, RESIZE_SCALE = 16, RESIZE_ROI_START = 24, RESIZE_ROI_END = 32 };
/* More taps than this per output element means a scale too small to be meant. */
#define RESIZE_MAX_TAPS ((int64_t)1 << 24)

/* Where the kernel's tables and buffers sit in its scratch. */
typedef struct resize_plan {
    int rank, n_active, n_buffers;
    int64_t in[TM_MAX_RANK], out[TM_MAX_RANK], taps[TM_MAX_RANK];
    int active[TM_MAX_RANK];
    size_t idx_at[TM_MAX_RANK], weight_at[TM_MAX_RANK], flag_at[TM_MAX_RANK];
    size_t acc_at, buf_at[2];
    int64_t acc_len, buf_len;
    size_t bytes;
} resize_plan;

/* Taps per output element: the filter's support, stretched by 1/scale when antialiasing
 * a shrinking axis (as the reference's footprint = 2 - 2 * (floor(-support/scale) + 1)). */
static int64_t resize_taps(const tm_args *a, double scale) {
    if (a->i[0] == MODE_NEAREST) return 1;
    double support = a->i[0] == MODE_LINEAR ? 1.0 : 2.0;
    if (!a->i[4] || scale >= 1.0) return (int64_t)(2 * support);
    double start = floor(-support / scale) + 1;
    if (2 - 2 * start > (double)RESIZE_MAX_TAPS) return -1;
    return 2 - 2 * (int64_t)start;
}

/* An axis is the identity when it keeps its length at scale 1 in a mode that maps
 * x to x (every mode but the two tf_ ones; see the taps below). */
static int resize_axis_active(const tm_args *a, int d, int64_t in) {
    int64_t ct = a->i[1];
    return !(a->i[RESIZE_OUT + d] == in && arg_f64(a, RESIZE_SCALE + d) == 1.0 &&
             ct != CT_TF_CROP_AND_RESIZE && ct != CT_TF_HALF_PIXEL_FOR_NN);
}

static int direct_float(tm_dtype dt) { return dt == TM_FLOAT || dt == TM_DOUBLE; }

/* Fills p for x of given dims; returns 0, or -1 when sizes overflow (or taps explode). */
static int resize_make_plan(const tm_args *a, tm_dtype dt, int rank, const int64_t *in_dims,
                            resize_plan *p) {
    memset(p, 0, sizeof *p);
    p->rank = rank;
    size_t bytes = 0;
    for (int d = 0; d < rank; d++) {
        p->in[d] = in_dims[d];
        p->out[d] = a->i[RESIZE_OUT + d];
        p->active[d] = resize_axis_active(a, d, in_dims[d]);
        if (!p->active[d]) continue;
        p->n_active++;
        p->taps[d] = resize_taps(a, arg_f64(a, RESIZE_SCALE + d));
        size_t cells;
        if (p->taps[d] < 1 || !tm__mul_ok((size_t)p->taps[d], (size_t)p->out[d], &cells) ||
            cells > ((size_t)1 << 40))
            return -1;
        p->idx_at[d] = bytes;
        bytes += cells * sizeof(int64_t);
        p->weight_at[d] = bytes;
        bytes += cells * sizeof(double);
        p->flag_at[d] = bytes;
        bytes += round8((size_t)p->out[d]);
    }
    if (a->i[0] == MODE_NEAREST || p->n_active == 0) {
        p->bytes = bytes;
        return 0;
    }
    /* Axes go last to first: before axis d is done, axes after it have their new
     * length and axes before it their old one. */
    int64_t cur[TM_MAX_RANK];
    memcpy(cur, in_dims, (size_t)rank * sizeof *cur);
    int64_t biggest = direct_float(dt) ? 0 : tm_numel(rank, cur);
    for (int d = rank - 1; d >= 0; d--) {
        if (!p->active[d]) continue;
        int64_t inner = product(p->out, d + 1, rank);
        if (inner > p->acc_len) p->acc_len = inner;
        cur[d] = p->out[d];
        int64_t n = tm_numel(rank, cur);
        if (n < 0 || inner < 0) return -1;
        if (n > biggest) biggest = n;
    }
    int stages = p->n_active - 1 + 2 * !direct_float(dt);
    p->n_buffers = stages >= 2 ? 2 : stages;
    p->buf_len = p->n_buffers ? biggest : 0;
    p->acc_at = bytes;
    bytes += (size_t)p->acc_len * sizeof(double);
    for (int b = 0; b < p->n_buffers; b++) {
        p->buf_at[b] = bytes;
        if ((uint64_t)p->buf_len > ((uint64_t)1 << 40)) return -1;
        bytes += (size_t)p->buf_len * sizeof(double);
    }
    p->bytes = bytes;
    return 0;
}

tm_status tm__shape_resize(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                           int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)prim; (void)nin; (void)nout;
    const tm_vinfo *x = in[0];
    char tx[160];
    if (!is_sampled_dtype(x->dtype))
        return tm_ctx_fail(c, TM_ERR_DTYPE, "resize: x has dtype %s, which cannot be resampled",
                           tm_dtype_name(x->dtype));
    if (a->i[0] < 0 || a->i[0] > 2 || a->i[1] < 0 || a->i[1] > 6 || a->i[2] < 0 ||
        a->i[2] > 4)
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "resize: mode %lld, coordinate "
                           "transformation %lld or nearest rounding %lld is unknown",
                           (long long)a->i[0], (long long)a->i[1], (long long)a->i[2]);
    int64_t dims[TM_MAX_RANK];
    for (int d = 0; d < x->rank; d++) {
        dims[d] = a->i[RESIZE_OUT + d];
        double s = arg_f64(a, RESIZE_SCALE + d);
        if (dims[d] < 0 || !(s > 0) || !isfinite(s))
            return tm_ctx_fail(c, TM_ERR_SHAPE, "resize: axis %d has output size %lld and "
                               "scale %g; sizes must be >= 0 and scales finite and > 0", d,
                               (long long)dims[d], s);
        if (x->dims[d] == 0 && dims[d] > 0)
            return tm_ctx_fail(c, TM_ERR_SHAPE, "resize: axis %d of x %s is empty and cannot "
                               "grow to %lld", d, dims_text(tx, sizeof tx, x->rank, x->dims),
                               (long long)dims[d]);
    }
    if (tm_numel(x->rank, dims) < 0)
        return tm_ctx_fail(c, TM_ERR_NO_MEMORY, "resize: the output size overflows");
    resize_plan p;
    if (resize_make_plan(a, x->dtype, x->rank, x->dims, &p))
        return tm_ctx_fail(c, TM_ERR_NO_MEMORY, "resize: resampling x %s to %s needs too "
                           "many filter taps", dims_text(tx, sizeof tx, x->rank, x->dims),
                           dims_text(tx + 80, 80, x->rank, dims));
    set_out(out, x->dtype, x->rank, dims);
    *scratch = p.bytes;
    return TM_OK;
}

/* The input coordinate that output position j of an axis maps to. out_w is the
 * fractional output length scale * in, which the reference uses where it differs from
 * the integer one. */
static double resize_source(int64_t ct, int64_t j, int64_t in, int64_t out, double scale,
                            double roi0, double roi1) {
    double x = (double)j, out_w = scale * (double)in;
    switch (ct) {
    case CT_HALF_PIXEL: return (x + 0.5) / scale - 0.5;
    case CT_HALF_PIXEL_SYMMETRIC: {
        double adjustment = (double)out / out_w, center = (double)in / 2;
        return center * (1 - adjustment) + (x + 0.5) / scale - 0.5;
    }
    case CT_PYTORCH_HALF_PIXEL: return out_w == 1.0 ? -0.5 : (x + 0.5) / scale - 0.5;
    case CT_ALIGN_CORNERS: return out_w == 1.0 ? 0.0 : x * (double)(in - 1) / (out_w - 1);
    case CT_ASYMMETRIC: return x / scale;
    case CT_TF_CROP_AND_RESIZE: {
        double span = (roi1 - roi0) * (double)(in - 1);
        double v = out_w == 1.0 ? span / 2 : x * span / (out_w - 1);
        return v + roi0 * (double)(in - 1);
    }
    default: return (x + 0.5) / scale; /* tf_half_pixel_for_nn */
    }
}

static int64_t clamp_index(int64_t i, int64_t n) { return i < 0 ? 0 : i >= n ? n - 1 : i; }

/* The nearest input index to x. The reference picks between the two taps around x
 * (the lower one at ceil(x) - 1, so an integer x is the upper tap), with its rounding
 * rule; legacy opsets floor when growing and ceil when shrinking. */
static int64_t resize_nearest(double x, int64_t in, double scale, int64_t rule) {
    if (rule == NEAREST_LEGACY) return clamp_index((int64_t)(scale < 1 ? ceil(x) : floor(x)), in);
    double base = ceil(x) - 1, ratio = x - base;
    int64_t first = (int64_t)base;
    if (first < -1) first = -1;
    if (first + 2 > in + 1) first = in - 1;
    int up;
    if (ratio >= 1.0) up = 1;
    else if (rule == NEAREST_PREFER_FLOOR) up = ratio > 0.5;
    else if (rule == NEAREST_PREFER_CEIL) up = ratio >= 0.5;
    else up = rule == NEAREST_CEIL;
    return clamp_index(first + up, in);
}

/* Filter weights of the n taps starting at base - (n/2 - 1), for a point `ratio` in
 * (0, 1] past base. */
static void resize_weights(const tm_args *a, double scale, double ratio, int64_t n, double *w) {
    double A = a->f[0];
    if (n == 2 && a->i[0] == MODE_LINEAR) {
        w[0] = 1 - ratio;
        w[1] = ratio;
        return;
    }
    if (n == 4 && a->i[0] == MODE_CUBIC && (!a->i[4] || scale >= 1.0)) {
        cubic_weights(ratio, A, w);
        return;
    }
    /* Antialiased: the filter stretched by 1/scale, normalised to sum 1. */
    int64_t start = 1 - n / 2;
    double sum = 0;
    for (int64_t t = 0; t < n; t++) {
        double arg = ((double)(start + t) - ratio) * scale;
        if (a->i[0] == MODE_LINEAR) {
            double v = 1 - fabs(arg);
            w[t] = v < 0 ? 0 : v > 1 ? 1 : v;
        } else {
            w[t] = cubic_kernel(arg, A);
        }
        sum += w[t];
    }
    for (int64_t t = 0; t < n; t++) w[t] /= sum;
}

/* Fills the taps (clamped input indices and weights) of every output position of axis d,
 * and flags positions that tf_crop_and_resize extrapolates. */
static void resize_axis_table(const tm_args *a, int d, int64_t in, int64_t out, int64_t n,
                              int64_t *idx, double *w, uint8_t *flag) {
    int64_t ct = a->i[1];
    double scale = arg_f64(a, RESIZE_SCALE + d);
    double roi0 = arg_f64(a, RESIZE_ROI_START + d), roi1 = arg_f64(a, RESIZE_ROI_END + d);
    for (int64_t j = 0; j < out; j++) {
        int64_t *ti = idx + j * n;
        double *tw = w + j * n;
        double x = resize_source(ct, j, in, out, scale, roi0, roi1);
        flag[j] = ct == CT_TF_CROP_AND_RESIZE && (x < 0 || x > (double)(in - 1));
        if (flag[j] || !isfinite(x)) {
            for (int64_t t = 0; t < n; t++) {
                ti[t] = 0;
                tw[t] = 0;
            }
            flag[j] = 1;
            continue;
        }
        if (a->i[0] == MODE_NEAREST) {
            ti[0] = resize_nearest(x, in, scale, a->i[2]);
            tw[0] = 1;
            continue;
        }
        double base = ceil(x) - 1;
        resize_weights(a, scale, x - base, n, tw);
        /* The n nearest positions of the edge-padded axis: slide the window inside it. */
        int64_t pad = n / 2, first = (int64_t)base - (n / 2 - 1);
        if (first < -pad) first = -pad;
        if (first + n > in + pad) first = in + pad - n;
        double sum = 0;
        for (int64_t t = 0; t < n; t++) {
            int64_t raw = first + t;
            if (a->i[3] && (raw < 0 || raw >= in)) tw[t] = 0;
            ti[t] = clamp_index(raw, in);
            sum += tw[t];
        }
        if (a->i[3] && sum != 0)
            for (int64_t t = 0; t < n; t++) tw[t] /= sum;
    }
}

/* Nearest: every output element copies one input element (or is extrapolated). */
static void resize_gather(const resize_plan *p, const tm_args *a, char *scratch,
                          const tm_tensor *x, tm_tensor *y) {
    int r = p->rank;
    size_t es = tm_dtype_elem_size(x->dtype);
    int64_t stride[TM_MAX_RANK], j[TM_MAX_RANK] = {0};
    for (int d = r - 1, s = 1; d >= 0; d--) {
        stride[d] = s;
        s *= (int)0 + 1, stride[d] = stride[d];
    }
    int64_t s = 1;
    for (int d = r - 1; d >= 0; d--) {
        stride[d] = s;
        s *= p->in[d];
    }
    int64_t total = tm_numel(r, p->out);
    for (int64_t o = 0; o < total; o++) {
        int64_t from = 0;
        int outside = 0;
        for (int d = 0; d < r; d++) {
            if (!p->active[d]) {
                from += j[d] * stride[d];
                continue;
            }
            const int64_t *idx = (const int64_t *)(scratch + p->idx_at[d]);
            const uint8_t *flag = (const uint8_t *)(scratch + p->flag_at[d]);
            outside |= flag[j[d]];
            from += idx[j[d]] * stride[d];
        }
        if (outside) store(y, o, a->f[1]);
        else memcpy((char *)y->data + (size_t)o * es, (const char *)x->data + (size_t)from * es, es);
        for (int d = r - 1; d >= 0; d--) {
            if (++j[d] < p->out[d]) break;
            j[d] = 0;
        }
    }
}

/* One axis of the separable resampling: src (outer, in_d, inner) to dst (outer, out_d,
 * inner), src/dst float32 when their flag says so, else double. */
typedef struct resize_pass {
    const void *src;
    int src_f32;
    void *dst;
    int dst_f32;
    int64_t outer, in_d, out_d, inner, n;
    const int64_t *idx;
    const double *weight;
    const uint8_t *flag;
    double extrapolation;
    double *acc;
} resize_pass;

static void resize_run_pass(const resize_pass *ps) {
    int64_t inner = ps->inner, n = ps->n;
    double *acc = ps->acc;
    for (int64_t o = 0; o < ps->outer; o++) {
        for (int64_t j = 0; j < ps->out_d; j++) {
            if (ps->flag[j]) {
                for (int64_t i = 0; i < inner; i++) acc[i] = ps->extrapolation;
            } else {
                memset(acc, 0, (size_t)inner * sizeof *acc);
                for (int64_t t = 0; t < n; t++) {
                    double w = ps->weight[j * n + t];
                    int64_t at = (o * ps->in_d + ps->idx[j * n + t]) * inner;
                    if (ps->src_f32) {
                        const float *s = (const float *)ps->src + at;
                        for (int64_t i = 0; i < inner; i++) acc[i] += w * s[i];
                    } else {
                        const double *s = (const double *)ps->src + at;
                        for (int64_t i = 0; i < inner; i++) acc[i] += w * s[i];
                    }
                }
            }
            int64_t at = (o * ps->out_d + j) * inner;
            if (ps->dst_f32) {
                float *dd = (float *)ps->dst + at;
                for (int64_t i = 0; i < inner; i++) dd[i] = (float)acc[i];
            } else {
                memcpy((double *)ps->dst + at, acc, (size_t)inner * sizeof *acc);
            }
        }
    }
}

/* Linear and cubic: one pass per changed axis, last axis first as the reference nests. */
static void resize_separable(const resize_plan *p, const tm_args *a, char *scratch,
                             const tm_tensor *x, tm_tensor *y) {
    int r = p->rank, direct = direct_float(x->dtype);
    double *buf[2] = {(double *)(scratch + p->buf_at[0]), (double *)(scratch + p->buf_at[1])};
    const void *src = x->data;
    int src_f32 = x->dtype == TM_FLOAT, src_buf = -1;
    if (!direct) {
        int64_t n = tm_numel(r, p->in);
        for (int64_t i = 0; i < n; i++) buf[0][i] = load(x, i);
        src = buf[0];
        src_f32 = 0;
        src_buf = 0;
    }
    int64_t cur[TM_MAX_RANK];
    memcpy(cur, p->in, sizeof cur);
    int remaining = p->n_active;
    for (int d = r - 1; d >= 0; d--) {
        if (!p->active[d]) continue;
        resize_pass ps;
        ps.src = src;
        ps.src_f32 = src_f32;
        int last = --remaining == 0;
        int dst_buf = src_buf == 0 ? 1 : 0;
        if (last && direct) {
            ps.dst = y->data;
            ps.dst_f32 = y->dtype == TM_FLOAT;
            dst_buf = -1;
        } else {
            ps.dst = buf[dst_buf];
            ps.dst_f32 = 0;
        }
        ps.outer = product(cur, 0, d);
        ps.in_d = cur[d];
        ps.out_d = p->out[d];
        ps.inner = product(cur, d + 1, r);
        ps.n = p->taps[d];
        ps.idx = (const int64_t *)(scratch + p->idx_at[d]);
        ps.weight = (const double *)(scratch + p->weight_at[d]);
        ps.flag = (const uint8_t *)(scratch + p->flag_at[d]);
        ps.extrapolation = a->f[1];
        ps.acc = (double *)(scratch + p->acc_at);
        resize_run_pass(&ps);
        cur[d] = p->out[d];
        src = ps.dst;
        src_f32 = ps.dst_f32;
        src_buf = dst_buf;
    }
    if (!direct) {
        int64_t n = tm_numel(r, p->out);
        for (int64_t i = 0; i < n; i++) store(y, i, ((const double *)src)[i]);
    }
}

tm_status tm__kernel_resize(const tm_kcall *k) {
    const tm_tensor *x = k->in[0];
    tm_tensor *y = k->out[0];
    const tm_args *a = k->a;
    resize_plan p;
    if (resize_make_plan(a, x->dtype, x->rank, x->dims, &p) || p.bytes > k->scratch_bytes)
        return tm__fail(k->err, TM_ERR_RUNTIME, "internal: resize scratch is too small");
    char *scratch = k->scratch;
    if (tm_numel(y->rank, y->dims) == 0) return TM_OK;
    if (p.n_active == 0) {
        memcpy(y->data, x->data, (size_t)tm_numel(x->rank, x->dims) *
               tm_dtype_elem_size(x->dtype));
        return TM_OK;
    }
    for (int d = 0; d < p.rank; d++)
        if (p.active[d])
            resize_axis_table(a, d, p.in[d], p.out[d], p.taps[d],
                              (int64_t *)(scratch + p.idx_at[d]),
                              (double *)(scratch + p.weight_at[d]),
                              (uint8_t *)(scratch + p.flag_at[d]));
    if (a->i[0] == MODE_NEAREST) resize_gather(&p, a, scratch, x, y);
    else resize_separable(&p, a, scratch, x, y);
    return TM_OK;
}
