/* Signal operators: DFT (17, 20) and STFT as one matmul against a host-built table of
 * cosines and sines (computed in double, as numpy's FFT does), the Hann, Hamming and
 * Blackman windows and MelWeightMatrix as host-computed constants. Not an FFT: the
 * table is O(n^2), which suits the short frames these operators see. */
#include <math.h>
#include <stdlib.h>
#include "elementwise.h"

/* A required or optional integer scalar input read on the host. Returns 1 when absent,
 * 0 when read, -1 on failure (the context says why, or a graph break is pending). */
static int host_scalar_i64(tm_lower *L, int index, const char *name, int64_t *out) {
    tm_ctx *c = tm_lctx(L);
    if (!tm_lhas(L, index)) return 1;
    tm_val v = tm_lin(L, index);
    if (tm_ew_check(L, index, v, TM_DT(TM_INT32) | TM_DT(TM_INT64))) return -1;
    if (tm_vnumel(c, v) != 1) {
        tm_lfail(L, TM_ERR_SHAPE, "input %d (%s) must hold one value, got %lld", index, name,
                 (long long)tm_vnumel(c, v));
        return -1;
    }
    return tm_host_i64(c, v, out, 1) == 1 ? 0 : -1;
}

static int host_scalar_f64(tm_lower *L, int index, const char *name, double *out) {
    tm_ctx *c = tm_lctx(L);
    tm_val v = tm_ew_input(L, index);
    if (v == TM_NONE) return -1;
    if (tm_vnumel(c, v) != 1) {
        tm_lfail(L, TM_ERR_SHAPE, "input %d (%s) must hold one value, got %lld", index, name,
                 (long long)tm_vnumel(c, v));
        return -1;
    }
    return tm_host_f64(c, v, out);
}

/* A new constant tensor of dtype dt; the caller fills it and hands it to the context. */
static tm_tensor *host_tensor(tm_ctx *c, tm_dtype dt, int rank, const int64_t *dims) {
    tm_tensor *t = tm_tensor_alloc(dt, rank, dims, c->allocator);
    if (!t) tm_ctx_fail(c, TM_ERR_NO_MEMORY, "out of memory for a %s constant",
                        tm_dtype_name(dt));
    return t;
}

/* ---- DFT --------------------------------------------------------------------------- */

typedef struct dft_plan {
    int64_t n;            /* DFT length */
    int64_t used;         /* input entries along the axis that take part */
    int64_t bins;         /* output entries along the axis */
    int in_parts, out_parts; /* 1 real, 2 complex */
    int inverse, real_inverse;
} dft_plan;

/* cos and sin of 2 pi k t / n, the product reduced mod n so large k t keep precision. */
static void twiddle(int64_t k, int64_t t, int64_t n, double *cs, double *sn) {
    double angle = 2.0 * M_PI * (double)((k * t) % n) / (double)n;
    *cs = cos(angle);
    *sn = sin(angle);
}

/* The (used * in_parts, bins * out_parts) f64 table with y = x W, entries interleaved as
 * (real, imaginary) per position. */
static tm_val dft_table(tm_ctx *c, const dft_plan *p) {
    int64_t dims[2] = {p->used * p->in_parts, p->bins * p->out_parts};
    tm_tensor *t = host_tensor(c, TM_DOUBLE, 2, dims);
    if (!t) return TM_NONE;
    double *w = t->data, cs, sn;
    int64_t cols = dims[1];
    if (p->real_inverse) {
        /* Bin k > 0 stands for itself and its conjugate mirror n - k, except Nyquist. */
        for (int64_t k = 0; k < p->used; k++)
            for (int64_t j = 0; j < p->n; j++) {
                double weight = (k == 0 || 2 * k == p->n ? 1.0 : 2.0) / (double)p->n;
                twiddle(k, j, p->n, &cs, &sn);
                w[(2 * k) * cols + j] = weight * cs;
                w[(2 * k + 1) * cols + j] = -weight * sn;
            }
        return tm_val_tensor(c, t, 0);
    }
    double sign = p->inverse ? 1.0 : -1.0, scale = p->inverse ? 1.0 / (double)p->n : 1.0;
    for (int64_t s = 0; s < p->used; s++)
        for (int64_t k = 0; k < p->bins; k++) {
            twiddle(k, s, p->n, &cs, &sn);
            cs *= scale;
            sn *= scale * sign;
            w[(p->in_parts * s) * cols + 2 * k] = cs;
            w[(p->in_parts * s) * cols + 2 * k + 1] = sn;
            if (p->in_parts == 2) {
                w[(2 * s + 1) * cols + 2 * k] = -sn;
                w[(2 * s + 1) * cols + 2 * k + 1] = cs;
            }
        }
    return tm_val_tensor(c, t, 0);
}

/* The DFT of x (..., [1|2]) along `axis` (not the last). */
static tm_val dft_along(tm_ctx *c, tm_val x, int axis, const dft_plan *p) {
    int r = tm_vrank(c, x);
    tm_dtype dt = tm_vdtype(c, x);
    int64_t perm[TM_MAX_RANK], back[TM_MAX_RANK], dims[TM_MAX_RANK];
    int k = 0;
    for (int d = 0; d < r - 1; d++)
        if (d != axis) perm[k++] = d;
    perm[k++] = axis;
    perm[k++] = r - 1;
    for (int d = 0; d < r; d++) back[perm[d]] = d;
    tm_val xt = tm_transpose(c, x, perm);
    xt = tm_slice_axis(c, xt, r - 2, 0, p->used);
    int64_t rows = 1;
    for (int d = 0; d < r - 2; d++) rows *= tm_vdims(c, x)[perm[d]];
    int64_t flat[2] = {rows, p->used * p->in_parts};
    tm_val y = tm_matmul(c, tm_cast(c, tm_reshape(c, xt, 2, flat), TM_DOUBLE), dft_table(c, p));
    for (int d = 0; d < r - 2; d++) dims[d] = tm_vdims(c, x)[perm[d]];
    dims[r - 2] = p->bins;
    dims[r - 1] = p->out_parts;
    y = tm_cast(c, tm_reshape(c, y, r, dims), dt);
    return tm_transpose(c, y, back);
}

/* Fills the plan from the input's length along the axis, dft_length (or -1), flags. */
static int dft_plan_make(tm_lower *L, int64_t len, int parts, int64_t n, int inverse,
                         int onesided, dft_plan *p) {
    memset(p, 0, sizeof *p);
    p->inverse = inverse;
    p->in_parts = parts;
    p->real_inverse = onesided && inverse;
    if (p->real_inverse && parts != 2)
        return tm_lfail(L, TM_ERR_SHAPE, "onesided inverse DFT needs complex input (last "
                        "dim 2), got a last dim of %d", parts);
    if (n < 0) n = p->real_inverse ? 2 * (len - 1) : len;
    if (n < 1)
        return tm_lfail(L, TM_ERR_SHAPE, "dft_length %lld must be >= 1", (long long)n);
    p->n = n;
    if (p->real_inverse) {
        p->used = len < n / 2 + 1 ? len : n / 2 + 1;
        p->bins = n;
        p->out_parts = 1;
        return 0;
    }
    p->used = len < n ? len : n;
    p->bins = onesided ? n / 2 + 1 : n;
    p->out_parts = 2;
    return 0;
}

static tm_status lower_dft_common(tm_lower *L, int64_t axis_in) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT)) return c->status;
    int r = tm_vrank(c, x);
    int parts = r >= 2 ? (int)tm_vdims(c, x)[r - 1] : 0;
    if (r < 2 || (parts != 1 && parts != 2))
        return tm_lfail(L, TM_ERR_SHAPE, "input 0 must end in a dim of 1 (real) or 2 "
                        "(complex), got rank %d", r);
    int64_t axis = axis_in < 0 ? axis_in + r : axis_in;
    if (axis < 0 || axis > r - 2)
        return tm_lfail(L, TM_ERR_SHAPE, "axis %lld is out of range for rank %d: the last dim "
                        "holds the complex parts", (long long)axis_in, r);
    int64_t n = -1;
    if (host_scalar_i64(L, 1, "dft_length", &n) < 0) return c->status;
    dft_plan p;
    if (dft_plan_make(L, tm_vdims(c, x)[axis], parts, n, tm_attr_i(L, "inverse", 0) != 0,
                      tm_attr_i(L, "onesided", 0) != 0, &p))
        return c->status;
    tm_lout(L, 0, dft_along(c, x, (int)axis, &p));
    return c->status;
}

static tm_status lower_dft17(tm_lower *L) {
    return lower_dft_common(L, tm_attr_i(L, "axis", 1));
}

static tm_status lower_dft20(tm_lower *L) {
    int64_t axis = -2;
    if (host_scalar_i64(L, 2, "axis", &axis) < 0) return tm_lctx(L)->status;
    return lower_dft_common(L, axis);
}

/* ---- STFT -------------------------------------------------------------------------- */

/* Frame f of the signal is samples [f * step, f * step + n): an index table (F, n). */
static tm_val frame_indices(tm_ctx *c, int64_t frames, int64_t n, int64_t step) {
    int64_t dims[2] = {frames, n};
    tm_tensor *t = host_tensor(c, TM_INT64, 2, dims);
    if (!t) return TM_NONE;
    int64_t *idx = t->data;
    for (int64_t f = 0; f < frames; f++)
        for (int64_t j = 0; j < n; j++) idx[f * n + j] = f * step + j;
    return tm_val_tensor(c, t, 0);
}

static tm_status lower_stft(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0), window = tm_lin(L, 2);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT)) return c->status;
    int parts = tm_vrank(c, x) == 3 ? (int)tm_vdims(c, x)[2] : 0;
    if (parts != 1 && parts != 2)
        return tm_lfail(L, TM_ERR_SHAPE, "input 0 (signal) must be (batch, length, 1 or 2), "
                        "got rank %d", tm_vrank(c, x));
    int64_t step = 0, n = -1;
    int st = host_scalar_i64(L, 1, "frame_step", &step);
    if (st < 0 || host_scalar_i64(L, 3, "frame_length", &n) < 0) return c->status;
    if (st == 1) return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "input 1 (frame_step) is missing");
    if (window != TM_NONE) {
        if (tm_ew_same_dtype(L, 0, x, 2, window)) return c->status;
        if (tm_vrank(c, window) != 1 || (n >= 0 && tm_vdims(c, window)[0] != n))
            return tm_lfail(L, TM_ERR_SHAPE, "input 2 (window) must be 1-D of frame_length "
                            "entries");
        n = tm_vdims(c, window)[0];
    }
    int64_t len = tm_vdims(c, x)[1];
    if (n < 1 || n > len || step < 1)
        return tm_lfail(L, TM_ERR_SHAPE, "frame length %lld and step %lld do not fit a signal "
                        "of %lld samples", (long long)n, (long long)step, (long long)len);
    int64_t frames = (len - n) / step + 1;
    tm_val framed = tm_gather(c, x, frame_indices(c, frames, n, step), 1); /* (B, F, n, parts) */
    if (window != TM_NONE) {
        int64_t dims[4] = {1, 1, n, 1};
        framed = tm_mul(c, framed, tm_reshape(c, window, 4, dims));
    }
    int onesided = tm_attr_i(L, "onesided", 1) != 0;
    if (onesided && parts == 2)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute onesided=1 needs a real signal");
    dft_plan p;
    if (dft_plan_make(L, n, parts, n, 0, onesided, &p)) return c->status;
    tm_lout(L, 0, dft_along(c, framed, 2, &p));
    return c->status;
}

/* ---- Windows ----------------------------------------------------------------------- */

/* Generalised cosine window sum_k a[k] cos(2 pi k i / N), N = size (periodic) or
 * size - 1 (symmetric), as a constant of output_datatype. */
static tm_status lower_cosine_window(tm_lower *L, const double *a, int terms) {
    tm_ctx *c = tm_lctx(L);
    int64_t size = 0;
    int st = host_scalar_i64(L, 0, "size", &size);
    if (st < 0) return c->status;
    if (st == 1 || size < 0)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "input 0 (size) must be a count >= 0");
    int64_t dt = tm_attr_i(L, "output_datatype", TM_FLOAT);
    if (!tm_dtype_is_valid((int)dt) || !((TM_DTS_NUMERIC >> dt) & 1))
        return tm_lfail(L, TM_ERR_DTYPE, "attribute output_datatype=%lld is not a numeric "
                        "dtype", (long long)dt);
    double period = (double)(tm_attr_i(L, "periodic", 1) ? size : size - 1);
    tm_tensor *t = host_tensor(c, (tm_dtype)dt, 1, &size);
    if (!t) return c->status;
    for (int64_t i = 0; i < size; i++) {
        double v = 0.0;
        for (int k = 0; k < terms; k++) v += a[k] * cos(2.0 * M_PI * k * (double)i / period);
        tm_store_f64(t->data, (tm_dtype)dt, (size_t)i, v);
    }
    tm_lout(L, 0, tm_val_tensor(c, t, 0));
    return c->status;
}

static tm_status lower_hann_window(tm_lower *L) {
    static const double a[2] = {0.5, -0.5};
    return lower_cosine_window(L, a, 2);
}

static tm_status lower_hamming_window(tm_lower *L) {
    static const double a[2] = {25.0 / 46.0, -21.0 / 46.0};
    return lower_cosine_window(L, a, 2);
}

static tm_status lower_blackman_window(tm_lower *L) {
    static const double a[3] = {0.42, -0.5, 0.08};
    return lower_cosine_window(L, a, 3);
}

/* ---- MelWeightMatrix --------------------------------------------------------------- */

static double hz_to_mel(double hz) { return 2595.0 * log10(1.0 + hz / 700.0); }
static double mel_to_hz(double mel) { return 700.0 * (pow(10.0, mel / 2595.0) - 1.0); }

/* Triangles over spectrogram bins, each peaking at 1, as the spec's algorithm places
 * them (band edges spaced by (high - low) / (bins + 2) mels). */
static void mel_fill(double *w, int64_t spec_bins, int64_t mel_bins, const int64_t *edge) {
    for (int64_t i = 0; i < mel_bins; i++) {
        int64_t lo = edge[i], mid = edge[i + 1], hi = edge[i + 2];
        if (mid == lo) {
            if (mid >= 0 && mid < spec_bins) w[mid * mel_bins + i] = 1.0;
        } else {
            for (int64_t j = lo; j <= mid; j++)
                if (j >= 0 && j < spec_bins)
                    w[j * mel_bins + i] = (double)(j - lo) / (double)(mid - lo);
        }
        for (int64_t j = mid; hi > mid && j < hi; j++)
            if (j >= 0 && j < spec_bins)
                w[j * mel_bins + i] = (double)(hi - j) / (double)(hi - mid);
    }
}

static tm_status lower_mel_weight_matrix(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    int64_t mel_bins = 0, dft_length = 0, rate = 0;
    double low = 0.0, high = 0.0;
    if (host_scalar_i64(L, 0, "num_mel_bins", &mel_bins) ||
        host_scalar_i64(L, 1, "dft_length", &dft_length) ||
        host_scalar_i64(L, 2, "sample_rate", &rate) ||
        host_scalar_f64(L, 3, "lower_edge_hertz", &low) ||
        host_scalar_f64(L, 4, "upper_edge_hertz", &high)) {
        if (tm_ctx_ok(c))
            return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "inputs 0 to 4 are all required");
        return c->status;
    }
    if (mel_bins < 1 || dft_length < 1 || rate < 1)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "num_mel_bins %lld, dft_length %lld and "
                        "sample_rate %lld must be >= 1", (long long)mel_bins,
                        (long long)dft_length, (long long)rate);
    int64_t dt = tm_attr_i(L, "output_datatype", TM_FLOAT);
    if (!tm_dtype_is_valid((int)dt) || !((TM_DTS_NUMERIC >> dt) & 1))
        return tm_lfail(L, TM_ERR_DTYPE, "attribute output_datatype=%lld is not a numeric "
                        "dtype", (long long)dt);
    int64_t spec_bins = dft_length / 2 + 1, dims[2] = {spec_bins, mel_bins};
    int64_t *edge = malloc((size_t)(mel_bins + 2) * sizeof *edge);
    double *w = calloc((size_t)(spec_bins * mel_bins), sizeof *w);
    tm_tensor *t = edge && w ? host_tensor(c, (tm_dtype)dt, 2, dims) : NULL;
    if (t) {
        double low_mel = hz_to_mel(low);
        double step = (hz_to_mel(high) - low_mel) / (double)(mel_bins + 2);
        for (int64_t i = 0; i < mel_bins + 2; i++)
            edge[i] = (int64_t)floor((double)(dft_length + 1) *
                                     mel_to_hz((double)i * step + low_mel) / (double)rate);
        mel_fill(w, spec_bins, mel_bins, edge);
        for (int64_t i = 0; i < spec_bins * mel_bins; i++)
            tm_store_f64(t->data, (tm_dtype)dt, (size_t)i, w[i]);
        tm_lout(L, 0, tm_val_tensor(c, t, 0));
    } else if (tm_ctx_ok(c)) {
        tm_ctx_fail(c, TM_ERR_NO_MEMORY, "out of memory");
    }
    free(edge);
    free(w);
    return c->status;
}

TM_REGISTER_OP("", "DFT", 17, 19, lower_dft17);
TM_REGISTER_OP("", "DFT", 20, 27, lower_dft20);
TM_REGISTER_OP("", "STFT", 17, 27, lower_stft);
TM_REGISTER_OP("", "HannWindow", 17, 27, lower_hann_window);
TM_REGISTER_OP("", "HammingWindow", 17, 27, lower_hamming_window);
TM_REGISTER_OP("", "BlackmanWindow", 17, 27, lower_blackman_window);
TM_REGISTER_OP("", "MelWeightMatrix", 17, 27, lower_mel_weight_matrix);
