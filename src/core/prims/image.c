/* Image and detection primitives (rows in image.def): shape rules and reference kernels
 * of RESIZE, GRID_SAMPLE, ROI_ALIGN, MAX_ROI_POOL, COL2IM and DEFORM_IM2COL. Values are
 * computed in double; float32 and float64 are read in place, other dtypes through the
 * dtype accessors. Not the ONNX lowerings (../../onnx/ops/resize.c, grid_sample.c, ...). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "../ctx.h"
#include "../../backends/cpu/pool.h"

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
        int64_t s;
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

/* Nearest: every output element copies one input element (or is extrapolated). Row by
 * row along the last axis: the leading axes pick a source row once per output row, an
 * output row whose source row is the previous one's (upsampling) is a copy of it, and
 * the last axis is a gather through its table. */
static void resize_gather(const resize_plan *p, const tm_args *a, const char *scratch,
                          const tm_tensor *x, tm_tensor *y, int64_t row0, int64_t row1) {
    int r = p->rank, last = r - 1;
    size_t es = tm_dtype_elem_size(x->dtype);
    int64_t stride[TM_MAX_RANK], j[TM_MAX_RANK] = {0};
    int64_t s = 1;
    for (int d = r - 1; d >= 0; d--) {
        stride[d] = s;
        s *= p->in[d];
    }
    int64_t width = p->out[last];
    /* The output row row0's position along the leading axes. */
    int64_t left = row0;
    for (int d = last - 1; d >= 0; d--) {
        j[d] = left % p->out[d];
        left /= p->out[d];
    }
    const int64_t *idx_last = p->active[last] ? (const int64_t *)(scratch + p->idx_at[last]) : NULL;
    const uint8_t *flag_last = p->active[last] ? (const uint8_t *)(scratch + p->flag_at[last]) : NULL;
    const char *src = x->data;
    char *dst = y->data;
    int64_t prev_from = -1;
    for (int64_t row = row0; row < row1; row++) {
        int64_t from = 0;
        int outside = 0;
        for (int d = 0; d < last; d++) {
            if (!p->active[d]) {
                from += j[d] * stride[d];
                continue;
            }
            const int64_t *idx = (const int64_t *)(scratch + p->idx_at[d]);
            const uint8_t *flag = (const uint8_t *)(scratch + p->flag_at[d]);
            outside |= flag[j[d]];
            from += idx[j[d]] * stride[d];
        }
        char *out = dst + (size_t)(row * width) * es;
        if (outside) {
            for (int64_t t = 0; t < width; t++) store(y, row * width + t, a->f[1]);
            prev_from = -1;
        } else if (from == prev_from) {
            memcpy(out, out - (size_t)width * es, (size_t)width * es);
        } else if (!idx_last) {
            memcpy(out, src + (size_t)from * es, (size_t)width * es);
            prev_from = from;
        } else {
            int any_flag = 0;
            if (es == 4) {
                const uint32_t *in4 = (const uint32_t *)src + from;
                uint32_t *out4 = (uint32_t *)out;
                for (int64_t t = 0; t < width; t++) out4[t] = in4[idx_last[t]];
            } else {
                for (int64_t t = 0; t < width; t++)
                    memcpy(out + (size_t)t * es, src + (size_t)(from + idx_last[t]) * es, es);
            }
            for (int64_t t = 0; t < width; t++)
                if (flag_last[t]) {
                    store(y, row * width + t, a->f[1]);
                    any_flag = 1;
                }
            prev_from = any_flag ? -1 : from;
        }
        for (int d = last - 1; d >= 0; d--) {
            if (++j[d] < p->out[d]) break;
            j[d] = 0;
        }
    }
}

/* Nearest over the pool: contiguous ranges of output rows, each slice starting its own
 * run of copies (its first row is gathered, not copied from a row another slice writes). */
typedef struct gather_job {
    const resize_plan *p;
    const tm_args *a;
    const char *scratch;
    const tm_tensor *x;
    tm_tensor *y;
    int64_t rows;
} gather_job;

static void gather_slice(void *arg, int ith, int nth) {
    const gather_job *g = arg;
    int64_t row0 = g->rows * ith / nth, row1 = g->rows * (ith + 1) / nth;
    if (row0 < row1) resize_gather(g->p, g->a, g->scratch, g->x, g->y, row0, row1);
}

/* Below this many output bytes nearest resampling stays on one thread. */
#define GATHER_PARALLEL_BYTES ((int64_t)1 << 18)

static void resize_gather_run(const resize_plan *p, const tm_args *a, const char *scratch,
                              const tm_tensor *x, tm_tensor *y, struct tm_pool *pool) {
    int64_t width = p->out[p->rank - 1], numel = tm_numel(p->rank, p->out);
    int64_t rows = width ? numel / width : 0;
    int64_t bytes = numel * (int64_t)tm_dtype_elem_size(x->dtype);
    int nth = tm_pool_threads(pool);
    if (nth < 2 || bytes < GATHER_PARALLEL_BYTES || rows < 2) {
        resize_gather(p, a, scratch, x, y, 0, rows);
        return;
    }
    gather_job g = {p, a, scratch, x, y, rows};
    tm_pool_run_n(pool, nth * 4 < rows ? nth * 4 : (int)rows, gather_slice, &g);
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
    if (a->i[0] == MODE_NEAREST) resize_gather_run(&p, a, scratch, x, y, k->pool);
    else resize_separable(&p, a, scratch, x, y);
    return TM_OK;
}

/* ---- GRID_SAMPLE ------------------------------------------------------------------------- */

enum { PAD_ZEROS = 0, PAD_BORDER = 1, PAD_REFLECTION = 2 };
#define GRID_MAX_AXES (TM_MAX_RANK - 2)

tm_status tm__shape_grid_sample(tm_ctx *c, int prim, const tm_args *a,
                                const tm_vinfo *const *in, int nin, tm_vinfo *out, int nout,
                                size_t *scratch) {
    (void)prim; (void)nin; (void)nout;
    const tm_vinfo *x = in[0], *g = in[1];
    char tx[160], tg[160];
    if (!is_sampled_dtype(x->dtype) || !tm_dtype_is_float(g->dtype))
        return tm_ctx_fail(c, TM_ERR_DTYPE, "grid_sample: x is %s and grid %s; x must be "
                           "numeric or bool and grid a float tensor", tm_dtype_name(x->dtype),
                           tm_dtype_name(g->dtype));
    int n = x->rank - 2;
    if (n < 1 || g->rank != x->rank || g->dims[0] != x->dims[0] || g->dims[g->rank - 1] != n)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "grid_sample: x %s and grid %s do not fit; x is "
                           "(N, C, D1..Dn) and grid (N, O1..On, n)",
                           dims_text(tx, sizeof tx, x->rank, x->dims),
                           dims_text(tg, sizeof tg, g->rank, g->dims));
    if (a->i[0] < 0 || a->i[0] > 2 || a->i[1] < 0 || a->i[1] > 2)
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "grid_sample: mode %lld or padding %lld is "
                           "unknown", (long long)a->i[0], (long long)a->i[1]);
    int64_t dims[TM_MAX_RANK];
    dims[0] = x->dims[0];
    dims[1] = x->dims[1];
    for (int d = 0; d < n; d++) dims[2 + d] = g->dims[1 + d];
    for (int d = 0; d < n; d++)
        if (x->dims[2 + d] == 0 && tm_numel(x->rank, dims) > 0)
            return tm_ctx_fail(c, TM_ERR_SHAPE, "grid_sample: x %s has an empty spatial axis "
                               "to sample from", dims_text(tx, sizeof tx, x->rank, x->dims));
    set_out(out, x->dtype, x->rank, dims);
    *scratch = 0;
    return TM_OK;
}

/* Reflects x by the nearer border until it lies in [lo, hi]. */
static double reflect(double x, double lo, double hi) {
    double range = hi - lo;
    if (range <= 0) return lo;
    if (x < lo) {
        double dx = lo - x;
        double n = floor(dx / range), r = dx - n * range;
        return fmod(n, 2) == 0 ? lo + r : hi - r;
    }
    if (x > hi) {
        double dx = x - hi;
        double n = floor(dx / range), r = dx - n * range;
        return fmod(n, 2) == 0 ? hi - r : lo + r;
    }
    return x;
}

/* The taps of one axis: up to four (index, weight) pairs; valid is 0 for a zero-padded
 * tap outside the axis. */
typedef struct grid_taps {
    int n;
    int64_t idx[4];
    double w[4];
    int valid[4];
} grid_taps;

/* Resolves tap index i of an axis of length len under the padding mode. */
static void grid_tap(grid_taps *t, int at, int64_t i, int64_t len, int64_t pad, double lo,
                     double hi) {
    t->valid[at] = 1;
    if (pad == PAD_ZEROS) t->valid[at] = i >= 0 && i < len;
    else if (pad == PAD_BORDER) i = clamp_index(i, len);
    else i = clamp_index((int64_t)reflect((double)i, lo, hi), len);
    t->idx[at] = i;
}

/* Taps of one axis for the normalised coordinate v, as the ONNX reference computes them
 * (in float32 coordinates, like PyTorch). */
static void grid_axis_taps(const tm_args *a, double v, int64_t len, grid_taps *t) {
    int64_t mode = a->i[0], pad = a->i[1];
    int align = a->i[2] != 0;
    double lo = align ? 0.0 : -0.5, hi = align ? (double)len - 1 : (double)len - 0.5;
    double x = align ? (float)((v + 1) / 2.0 * (double)(len - 1))
                     : (float)(((v + 1) * (double)len - 1) / 2.0);
    /* Halves round to even, as the backend tests expect in 2-D and 3-D alike. */
    if (mode == MODE_NEAREST) x = nearbyint(x);
    if (x < lo || x > hi) {
        if (pad == PAD_BORDER) x = x < 0 ? 0 : x > (double)(len - 1) ? (double)(len - 1) : x;
        else if (pad == PAD_REFLECTION) x = (float)reflect(x, lo, hi);
    }
    if (mode == MODE_NEAREST) {
        t->n = 1;
        t->w[0] = 1;
        double tx = trunc(x);
        grid_tap(t, 0, fabs(tx) < 4e18 ? (int64_t)tx : -1, len, pad, lo, hi);
        return;
    }
    double x0 = floor(x);
    int64_t i0 = fabs(x0) < 4e18 ? (int64_t)x0 : -((int64_t)1 << 40);
    if (mode == MODE_LINEAR) {
        t->n = 2;
        t->w[0] = 1 - (x - x0);
        t->w[1] = x - x0;
        for (int k = 0; k < 2; k++) grid_tap(t, k, i0 + k, len, pad, lo, hi);
        return;
    }
    t->n = 4;
    cubic_weights(x - x0, -0.75, t->w);
    for (int k = 0; k < 4; k++) grid_tap(t, k, i0 - 1 + k, len, pad, lo, hi);
}

tm_status tm__kernel_grid_sample(const tm_kcall *k) {
    const tm_tensor *x = k->in[0], *g = k->in[1];
    tm_tensor *y = k->out[0];
    int n = x->rank - 2;
    int64_t batch = x->dims[0], channels = x->dims[1];
    int64_t plane = product(x->dims, 2, x->rank), points = product(g->dims, 1, g->rank - 1);
    int64_t stride[GRID_MAX_AXES], s = 1;
    for (int d = n - 1; d >= 0; d--) {
        stride[d] = s;
        s *= x->dims[2 + d];
    }
    grid_taps taps[GRID_MAX_AXES];
    for (int64_t b = 0; b < batch; b++) {
        for (int64_t p = 0; p < points; p++) {
            int64_t combos = 1;
            for (int d = 0; d < n; d++) {
                /* The grid lists coordinates innermost axis first. */
                double v = load(g, (b * points + p) * n + (n - 1 - d));
                grid_axis_taps(k->a, v, x->dims[2 + d], &taps[d]);
                combos *= taps[d].n;
            }
            for (int64_t ch = 0; ch < channels; ch++) {
                int64_t base = (b * channels + ch) * plane;
                double sum = 0;
                for (int64_t m = 0; m < combos; m++) {
                    double w = 1;
                    int64_t at = base, rest = m, ok = 1;
                    for (int d = n - 1; d >= 0; d--) {
                        int t = (int)(rest % taps[d].n);
                        rest /= taps[d].n;
                        w *= taps[d].w[t];
                        ok &= taps[d].valid[t];
                        at += taps[d].idx[t] * stride[d];
                    }
                    if (ok) sum += w * load(x, at);
                }
                store(y, (b * channels + ch) * points + p, sum);
            }
        }
    }
    return TM_OK;
}

/* ---- ROI_ALIGN and MAX_ROI_POOL ---------------------------------------------------------- */

/* x (N, C, H, W) float and rois (R, cols) of its dtype; fills the (R, C, h, w) output. */
static tm_status roi_shape(tm_ctx *c, const char *name, const tm_vinfo *x, const tm_vinfo *rois,
                           int64_t cols, int64_t out_h, int64_t out_w, tm_vinfo *out) {
    char tx[160], tr[160];
    if (!tm_dtype_is_float(x->dtype) || rois->dtype != x->dtype)
        return tm_ctx_fail(c, TM_ERR_DTYPE, "%s: x is %s and rois %s; both must be one float "
                           "dtype", name, tm_dtype_name(x->dtype), tm_dtype_name(rois->dtype));
    if (x->rank != 4 || rois->rank != 2 || rois->dims[1] != cols)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "%s: x %s and rois %s do not fit; x is (N, C, H, W) "
                           "and rois (R, %lld)", name, dims_text(tx, sizeof tx, x->rank, x->dims),
                           dims_text(tr, sizeof tr, rois->rank, rois->dims), (long long)cols);
    if (out_h < 1 || out_w < 1)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "%s: the output bins %lld x %lld must be at least "
                           "1 x 1", name, (long long)out_h, (long long)out_w);
    if ((x->dims[2] < 1 || x->dims[3] < 1) && rois->dims[0] > 0 && x->dims[1] > 0)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "%s: x %s has no pixels to pool", name,
                           dims_text(tx, sizeof tx, x->rank, x->dims));
    int64_t dims[4] = {rois->dims[0], x->dims[1], out_h, out_w};
    set_out(out, x->dtype, 4, dims);
    return TM_OK;
}

tm_status tm__shape_roi_align(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                              int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)prim; (void)nin; (void)nout;
    const tm_vinfo *bi = in[2];
    if (bi->dtype != TM_INT64 && bi->dtype != TM_INT32)
        return tm_ctx_fail(c, TM_ERR_DTYPE, "roi_align: batch_indices must be int64 or int32, "
                           "got %s", tm_dtype_name(bi->dtype));
    if (bi->rank != 1 || in[1]->rank != 2 || bi->dims[0] != in[1]->dims[0])
        return tm_ctx_fail(c, TM_ERR_SHAPE, "roi_align: batch_indices must be (R) with R the "
                           "number of rois");
    if (a->i[0] < 0 || a->i[0] > 1 || a->i[3] < 0)
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "roi_align: mode %lld or sampling ratio %lld "
                           "is invalid", (long long)a->i[0], (long long)a->i[3]);
    tm_status s = roi_shape(c, "roi_align", in[0], in[1], 4, a->i[1], a->i[2], out);
    *scratch = (size_t)in[0]->dims[1] * sizeof(double);
    return s;
}

/* The four corners and weights of a bilinear sample at (y, x), as ROIAlign clamps them:
 * samples more than one pixel outside weigh nothing. */
typedef struct roi_sample {
    int64_t pos[4];
    double w[4];
} roi_sample;

static void roi_bilinear(int64_t height, int64_t width, double y, double x, roi_sample *s) {
    memset(s, 0, sizeof *s);
    if (y < -1.0 || y > (double)height || x < -1.0 || x > (double)width) return;
    if (y < 0) y = 0;
    if (x < 0) x = 0;
    int64_t y_low = (int64_t)y, x_low = (int64_t)x, y_high, x_high;
    if (y_low >= height - 1) {
        y_high = y_low = height - 1;
        y = (double)y_low;
    } else {
        y_high = y_low + 1;
    }
    if (x_low >= width - 1) {
        x_high = x_low = width - 1;
        x = (double)x_low;
    } else {
        x_high = x_low + 1;
    }
    double ly = y - (double)y_low, lx = x - (double)x_low, hy = 1 - ly, hx = 1 - lx;
    s->pos[0] = y_low * width + x_low;
    s->pos[1] = y_low * width + x_high;
    s->pos[2] = y_high * width + x_low;
    s->pos[3] = y_high * width + x_high;
    s->w[0] = hy * hx;
    s->w[1] = hy * lx;
    s->w[2] = ly * hx;
    s->w[3] = ly * lx;
}

static int64_t index_at(const tm_tensor *t, int64_t i) {
    return t->dtype == TM_INT32 ? ((const int32_t *)t->data)[i] : ((const int64_t *)t->data)[i];
}

/* Samples (times channels) one ROI may take: far above real models (a 7 x 7 output with a
 * 2 x 2 grid over 256 channels is 50,176), far below a hang. */
#define ROI_MAX_WORK 4294967296.0

tm_status tm__kernel_roi_align(const tm_kcall *k) {
    const tm_tensor *x = k->in[0], *rois = k->in[1], *bi = k->in[2];
    tm_tensor *y = k->out[0];
    const tm_args *a = k->a;
    int64_t batch = x->dims[0], channels = x->dims[1], height = x->dims[2], width = x->dims[3];
    int64_t out_h = a->i[1], out_w = a->i[2], ratio = a->i[3];
    int max_mode = a->i[0] == 1, half_pixel = a->i[4] != 0;
    double scale = a->f[0], offset = half_pixel ? 0.5 : 0.0;
    double *acc = k->scratch;
    for (int64_t r = 0; r < rois->dims[0]; r++) {
        int64_t b = index_at(bi, r);
        if (b < 0 || b >= batch)
            return tm__fail(k->err, TM_ERR_RUNTIME, "batch index %lld of roi %lld is out of "
                            "range for %lld images", (long long)b, (long long)r,
                            (long long)batch);
        double x0 = load(rois, r * 4) * scale - offset, y0 = load(rois, r * 4 + 1) * scale - offset;
        double x1 = load(rois, r * 4 + 2) * scale - offset;
        double y1 = load(rois, r * 4 + 3) * scale - offset;
        double roi_w = x1 - x0, roi_h = y1 - y0;
        if (!half_pixel) {
            roi_w = roi_w > 1.0 ? roi_w : 1.0;
            roi_h = roi_h > 1.0 ? roi_h : 1.0;
        }
        double bin_h = roi_h / (double)out_h, bin_w = roi_w / (double)out_w;
        /* The grid comes from an attribute or the ROI's own size: bound the samples of one
         * ROI before converting (a huge or NaN double to int64 is undefined, and a hostile
         * sampling_ratio or ROI would otherwise run for ages). */
        double grid_hd = ratio > 0 ? (double)ratio : ceil(roi_h / (double)out_h);
        double grid_wd = ratio > 0 ? (double)ratio : ceil(roi_w / (double)out_w);
        if (!(grid_hd > 0)) grid_hd = 0;
        if (!(grid_wd > 0)) grid_wd = 0;
        if (grid_hd * grid_wd * (double)out_h * (double)out_w * (double)channels > ROI_MAX_WORK)
            return tm__fail(k->err, TM_ERR_UNSUPPORTED, "roi %lld takes a %.0f x %.0f sampling "
                            "grid per bin: more than %.0f samples in all", (long long)r,
                            grid_hd, grid_wd, ROI_MAX_WORK);
        int64_t grid_h = (int64_t)grid_hd, grid_w = (int64_t)grid_wd;
        double count = grid_h * grid_w > 1 ? (double)(grid_h * grid_w) : 1.0;
        for (int64_t ph = 0; ph < out_h; ph++) {
            for (int64_t pw = 0; pw < out_w; pw++) {
                for (int64_t ch = 0; ch < channels; ch++) acc[ch] = 0;
                int first = 1;
                for (int64_t iy = 0; iy < grid_h; iy++) {
                    double yy = y0 + (double)ph * bin_h +
                                ((double)iy + 0.5) * bin_h / (double)grid_h;
                    for (int64_t ix = 0; ix < grid_w; ix++) {
                        double xx = x0 + (double)pw * bin_w +
                                    ((double)ix + 0.5) * bin_w / (double)grid_w;
                        roi_sample s;
                        roi_bilinear(height, width, yy, xx, &s);
                        for (int64_t ch = 0; ch < channels; ch++) {
                            int64_t base = (b * channels + ch) * height * width;
                            double v[4];
                            for (int q = 0; q < 4; q++) v[q] = s.w[q] * load(x, base + s.pos[q]);
                            if (!max_mode) {
                                acc[ch] += v[0] + v[1] + v[2] + v[3];
                                continue;
                            }
                            double m = fmax(fmax(v[0], v[1]), fmax(v[2], v[3]));
                            acc[ch] = first ? m : fmax(acc[ch], m);
                        }
                        first = 0;
                    }
                }
                for (int64_t ch = 0; ch < channels; ch++)
                    store(y, ((r * channels + ch) * out_h + ph) * out_w + pw,
                          max_mode ? acc[ch] : acc[ch] / count);
            }
        }
    }
    return TM_OK;
}

tm_status tm__shape_max_roi_pool(tm_ctx *c, int prim, const tm_args *a,
                                 const tm_vinfo *const *in, int nin, tm_vinfo *out, int nout,
                                 size_t *scratch) {
    (void)prim; (void)nin; (void)nout;
    *scratch = 0;
    return roi_shape(c, "max_roi_pool", in[0], in[1], 5, a->i[0], a->i[1], out);
}

tm_status tm__kernel_max_roi_pool(const tm_kcall *k) {
    const tm_tensor *x = k->in[0], *rois = k->in[1];
    tm_tensor *y = k->out[0];
    int64_t batch = x->dims[0], channels = x->dims[1], height = x->dims[2], width = x->dims[3];
    int64_t pooled_h = k->a->i[0], pooled_w = k->a->i[1];
    double scale = k->a->f[0];
    for (int64_t r = 0; r < rois->dims[0]; r++) {
        double bd = load(rois, r * 5);
        int64_t b = isfinite(bd) ? (int64_t)bd : -1;
        if (b < 0 || b >= batch)
            return tm__fail(k->err, TM_ERR_RUNTIME, "batch index %g of roi %lld is out of "
                            "range for %lld images", bd, (long long)r, (long long)batch);
        int64_t start_w = (int64_t)round(load(rois, r * 5 + 1) * scale);
        int64_t start_h = (int64_t)round(load(rois, r * 5 + 2) * scale);
        int64_t end_w = (int64_t)round(load(rois, r * 5 + 3) * scale);
        int64_t end_h = (int64_t)round(load(rois, r * 5 + 4) * scale);
        int64_t roi_h = end_h - start_h + 1 > 1 ? end_h - start_h + 1 : 1;
        int64_t roi_w = end_w - start_w + 1 > 1 ? end_w - start_w + 1 : 1;
        double bin_h = (double)roi_h / (double)pooled_h, bin_w = (double)roi_w / (double)pooled_w;
        for (int64_t ph = 0; ph < pooled_h; ph++) {
            int64_t h0 = clamp_index((int64_t)floor((double)ph * bin_h) + start_h, height + 1);
            int64_t h1 = clamp_index((int64_t)ceil((double)(ph + 1) * bin_h) + start_h, height + 1);
            for (int64_t pw = 0; pw < pooled_w; pw++) {
                int64_t w0 = clamp_index((int64_t)floor((double)pw * bin_w) + start_w, width + 1);
                int64_t w1 = clamp_index((int64_t)ceil((double)(pw + 1) * bin_w) + start_w,
                                         width + 1);
                for (int64_t ch = 0; ch < channels; ch++) {
                    int64_t base = (b * channels + ch) * height * width;
                    double best = 0;
                    int empty = 1;
                    for (int64_t h = h0; h < h1; h++)
                        for (int64_t w = w0; w < w1; w++) {
                            double v = load(x, base + h * width + w);
                            if (empty || v > best) best = v;
                            empty = 0;
                        }
                    store(y, ((r * channels + ch) * pooled_h + ph) * pooled_w + pw, best);
                }
            }
        }
    }
    return TM_OK;
}

/* ---- COL2IM ------------------------------------------------------------------------------ */

#define COL_MAX_AXES (TM_MAX_RANK - 2)

/* The sliding-window geometry shared by COL2IM's shape rule and kernel. */
typedef struct col_geometry {
    int n;
    int64_t image[COL_MAX_AXES], block[COL_MAX_AXES], stride[COL_MAX_AXES];
    int64_t pad[COL_MAX_AXES], dilation[COL_MAX_AXES], count[COL_MAX_AXES];
    int64_t block_size, block_count;
} col_geometry;

/* Returns -1 with a reason in why when the arguments make no window. */
static int col_geometry_of(const tm_args *a, col_geometry *g, char *why, size_t cap) {
    int n = (int)a->i[0];
    if (n < 1 || n > COL_MAX_AXES) {
        snprintf(why, cap, "%d spatial axes are not supported", n);
        return -1;
    }
    g->n = n;
    g->block_size = 1;
    g->block_count = 1;
    for (int d = 0; d < n; d++) {
        g->image[d] = a->i[1 + d];
        g->block[d] = a->i[1 + n + d];
        g->stride[d] = a->i[1 + 2 * n + d];
        g->pad[d] = a->i[1 + 3 * n + d];
        int64_t pad_end = a->i[1 + 4 * n + d];
        g->dilation[d] = a->i[1 + 5 * n + d];
        if (g->image[d] < 1 || g->block[d] < 1 || g->stride[d] < 1 || g->dilation[d] < 1 ||
            g->pad[d] < 0 || pad_end < 0) {
            snprintf(why, cap, "axis %d has image %lld, block %lld, stride %lld, dilation %lld, "
                     "pads %lld/%lld", d, (long long)g->image[d], (long long)g->block[d],
                     (long long)g->stride[d], (long long)g->dilation[d], (long long)g->pad[d],
                     (long long)pad_end);
            return -1;
        }
        int64_t span = g->dilation[d] * (g->block[d] - 1) + 1;
        int64_t room = g->image[d] + g->pad[d] + pad_end - span;
        if (room < 0) {
            snprintf(why, cap, "axis %d: the dilated block (%lld) is larger than the padded "
                     "image (%lld)", d, (long long)span,
                     (long long)(g->image[d] + g->pad[d] + pad_end));
            return -1;
        }
        g->count[d] = room / g->stride[d] + 1;
        g->block_size *= g->block[d];
        g->block_count *= g->count[d];
    }
    return 0;
}

tm_status tm__shape_col2im(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                           int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)prim; (void)nin; (void)nout;
    const tm_vinfo *x = in[0];
    char why[200], tx[160];
    col_geometry g;
    if (!is_sampled_dtype(x->dtype))
        return tm_ctx_fail(c, TM_ERR_DTYPE, "col2im: input has dtype %s, which is not numeric",
                           tm_dtype_name(x->dtype));
    if (col_geometry_of(a, &g, why, sizeof why))
        return tm_ctx_fail(c, TM_ERR_SHAPE, "col2im: %s", why);
    if (x->rank != 3 || x->dims[1] % g.block_size || x->dims[2] != g.block_count)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "col2im: input %s must be (N, C*%lld, %lld): %lld "
                           "elements per block and %lld blocks",
                           dims_text(tx, sizeof tx, x->rank, x->dims), (long long)g.block_size,
                           (long long)g.block_count, (long long)g.block_size,
                           (long long)g.block_count);
    int64_t dims[TM_MAX_RANK] = {x->dims[0], x->dims[1] / g.block_size};
    for (int d = 0; d < g.n; d++) dims[2 + d] = g.image[d];
    set_out(out, x->dtype, g.n + 2, dims);
    *scratch = (size_t)product(g.image, 0, g.n) * sizeof(double);
    return TM_OK;
}

/* Splits a row-major flat index into per-axis indices. */
static void unflatten(int64_t flat, int n, const int64_t *dims, int64_t *idx) {
    for (int d = n - 1; d >= 0; d--) {
        idx[d] = flat % dims[d];
        flat /= dims[d];
    }
}

/* Sums one (C*K, L) column block into one image plane; acc holds doubles for floats and
 * int64s for integers (wrapping as integer sums do). */
static void col2im_plane(const col_geometry *g, const tm_tensor *x, int64_t first_row,
                         void *acc, int64_t plane) {
    int is_float = tm_dtype_is_float(x->dtype);
    memset(acc, 0, (size_t)plane * 8);
    int64_t kidx[COL_MAX_AXES], lidx[COL_MAX_AXES];
    for (int64_t kk = 0; kk < g->block_size; kk++) {
        unflatten(kk, g->n, g->block, kidx);
        for (int64_t l = 0; l < g->block_count; l++) {
            unflatten(l, g->n, g->count, lidx);
            int64_t at = 0;
            int inside = 1;
            for (int d = 0; d < g->n && inside; d++) {
                int64_t i = lidx[d] * g->stride[d] - g->pad[d] + kidx[d] * g->dilation[d];
                inside = i >= 0 && i < g->image[d];
                at = at * g->image[d] + i;
            }
            if (!inside) continue;
            int64_t from = (first_row + kk) * g->block_count + l;
            if (is_float) ((double *)acc)[at] += load(x, from);
            else if (tm_dtype_is_signed_int(x->dtype))
                ((int64_t *)acc)[at] += tm_load_i64(x->data, x->dtype, (size_t)from);
            else
                ((uint64_t *)acc)[at] += tm_load_u64(x->data, x->dtype, (size_t)from);
        }
    }
}

tm_status tm__kernel_col2im(const tm_kcall *k) {
    const tm_tensor *x = k->in[0];
    tm_tensor *y = k->out[0];
    col_geometry g;
    char why[200];
    if (col_geometry_of(k->a, &g, why, sizeof why))
        return tm__fail(k->err, TM_ERR_SHAPE, "%s", why);
    int64_t images = y->dims[0] * y->dims[1], plane = product(g.image, 0, g.n);
    for (int64_t m = 0; m < images; m++) {
        col2im_plane(&g, x, m * g.block_size, k->scratch, plane);
        for (int64_t i = 0; i < plane; i++) {
            int64_t at = m * plane + i;
            if (tm_dtype_is_float(y->dtype)) store(y, at, ((double *)k->scratch)[i]);
            else if (y->dtype == TM_BOOL)
                tm_store_u64(y->data, y->dtype, (size_t)at, ((uint64_t *)k->scratch)[i] != 0);
            else if (tm_dtype_is_signed_int(y->dtype))
                tm_store_i64(y->data, y->dtype, (size_t)at, ((int64_t *)k->scratch)[i]);
            else
                tm_store_u64(y->data, y->dtype, (size_t)at, ((uint64_t *)k->scratch)[i]);
        }
    }
    return TM_OK;
}

/* ---- DEFORM_IM2COL ----------------------------------------------------------------------- */

tm_status tm__shape_deform_im2col(tm_ctx *c, int prim, const tm_args *a,
                                  const tm_vinfo *const *in, int nin, tm_vinfo *out, int nout,
                                  size_t *scratch) {
    (void)prim; (void)nout;
    const tm_vinfo *x = in[0], *off = nin > 1 ? in[1] : NULL, *mask = nin > 2 ? in[2] : NULL;
    char tx[160], to[160];
    int n = (int)a->i[0];
    int64_t groups = a->i[1];
    if (nin < 2 || nin > 3)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "deform_im2col: takes x, offset and an optional "
                           "mask, got %d inputs", nin);
    if (!tm_dtype_is_float(x->dtype) || off->dtype != x->dtype ||
        (mask && mask->dtype != x->dtype))
        return tm_ctx_fail(c, TM_ERR_DTYPE, "deform_im2col: x (%s), offset (%s) and mask must "
                           "share one float dtype", tm_dtype_name(x->dtype),
                           tm_dtype_name(off->dtype));
    if (n < 1 || n > COL_MAX_AXES || x->rank != n + 2 || off->rank != n + 2)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "deform_im2col: x %s and offset %s must both have "
                           "rank %d + 2", dims_text(tx, sizeof tx, x->rank, x->dims),
                           dims_text(to, sizeof to, off->rank, off->dims), n);
    int64_t kernel = 1;
    for (int d = 0; d < n; d++) {
        if (a->i[2 + d] < 1 || a->i[2 + n + d] < 1 || a->i[2 + 3 * n + d] < 1)
            return tm_ctx_fail(c, TM_ERR_SHAPE, "deform_im2col: axis %d has kernel %lld, "
                               "stride %lld, dilation %lld; all must be >= 1", d,
                               (long long)a->i[2 + d], (long long)a->i[2 + n + d],
                               (long long)a->i[2 + 3 * n + d]);
        kernel *= a->i[2 + d];
    }
    if (groups < 1 || x->dims[1] % groups || off->dims[0] != x->dims[0] ||
        off->dims[1] != groups * kernel * n)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "deform_im2col: offset %s must be (N, %lld, ...) "
                           "for %lld offset groups of a %lld-tap kernel over x %s",
                           dims_text(to, sizeof to, off->rank, off->dims),
                           (long long)(groups * kernel * n), (long long)groups,
                           (long long)kernel, dims_text(tx, sizeof tx, x->rank, x->dims));
    if (mask) {
        int ok = mask->rank == n + 2 && mask->dims[0] == x->dims[0] &&
                 mask->dims[1] == groups * kernel;
        for (int d = 0; ok && d < n; d++) ok = mask->dims[2 + d] == off->dims[2 + d];
        if (!ok)
            return tm_ctx_fail(c, TM_ERR_SHAPE, "deform_im2col: mask %s must be (N, %lld, "
                               "output dims of offset)",
                               dims_text(tx, sizeof tx, mask->rank, mask->dims),
                               (long long)(groups * kernel));
    }
    int64_t dims[3] = {x->dims[0], x->dims[1] * kernel, product(off->dims, 2, off->rank)};
    set_out(out, x->dtype, 3, dims);
    *scratch = 0;
    return TM_OK;
}

/* x's plane (spatial dims `dims`, n axes) sampled n-linearly at pos; corners outside the
 * plane count as zero. */
static double sample_nlinear(const tm_tensor *x, int64_t base, int n, const int64_t *dims,
                             const double *pos) {
    int64_t lo[COL_MAX_AXES];
    double frac[COL_MAX_AXES];
    for (int d = 0; d < n; d++) {
        double f = floor(pos[d]);
        if (!(f > -2.0) || f >= (double)dims[d]) return 0.0; /* also NaN */
        lo[d] = (int64_t)f;
        frac[d] = pos[d] - f;
    }
    double sum = 0;
    for (int corner = 0; corner < (1 << n); corner++) {
        double w = 1;
        int64_t at = 0;
        int inside = 1;
        for (int d = 0; d < n && inside; d++) {
            int up = (corner >> (n - 1 - d)) & 1;
            int64_t i = lo[d] + up;
            inside = i >= 0 && i < dims[d];
            w *= up ? frac[d] : 1 - frac[d];
            at = at * dims[d] + i;
        }
        if (inside && w != 0) sum += w * load(x, base + at);
    }
    return sum;
}

tm_status tm__kernel_deform_im2col(const tm_kcall *k) {
    const tm_tensor *x = k->in[0], *off = k->in[1], *mask = k->nin > 2 ? k->in[2] : NULL;
    tm_tensor *y = k->out[0];
    const tm_args *a = k->a;
    int n = (int)a->i[0];
    int64_t groups = a->i[1], batch = x->dims[0], channels = x->dims[1];
    const int64_t *kernel = &a->i[2], *stride = &a->i[2 + n], *pad = &a->i[2 + 2 * n];
    const int64_t *dilation = &a->i[2 + 3 * n], *in_dims = x->dims + 2, *out_dims = off->dims + 2;
    int64_t taps = product(kernel, 0, n), points = product(out_dims, 0, n);
    int64_t plane = product(in_dims, 0, n), per_group = channels / groups;
    int64_t kidx[COL_MAX_AXES], oidx[COL_MAX_AXES];
    double pos[COL_MAX_AXES];
    for (int64_t b = 0; b < batch; b++) {
        for (int64_t ch = 0; ch < channels; ch++) {
            int64_t og = ch / per_group, base = (b * channels + ch) * plane;
            for (int64_t kk = 0; kk < taps; kk++) {
                unflatten(kk, n, kernel, kidx);
                int64_t tap = (b * groups + og) * taps + kk;
                for (int64_t p = 0; p < points; p++) {
                    unflatten(p, n, out_dims, oidx);
                    for (int d = 0; d < n; d++)
                        pos[d] = (double)(oidx[d] * stride[d] - pad[d] + kidx[d] * dilation[d]) +
                                 load(off, (tap * n + d) * points + p);
                    double v = sample_nlinear(x, base, n, in_dims, pos);
                    if (mask) v *= load(mask, tap * points + p);
                    store(y, ((b * channels + ch) * taps + kk) * points + p, v);
                }
            }
        }
    }
    return TM_OK;
}
