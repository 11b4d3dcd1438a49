/* Tests of the fused nn primitives (SOFTMAX, LAYERNORM and their gradients SOFTMAX_GRAD,
 * LAYERNORM_GRAD): against naive loops in double
 * written here, and against the ONNX backend test data when /work/shared/onnx-backend
 * is present. Not a test of the ONNX lowerings: attributes become args by hand. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../src/backends/cpu/gemm.h"
#include "../src/core/ctx.h"
#include "../src/onnx/model.h"

#define BACKEND_DIR "/work/shared/onnx-backend/node"

#define CHECK_RNG_SEED 0x2545f4914f6cdd1dULL
#include "check.h"

/* ---- Values -------------------------------------------------------------------------- */

/* A float value of dtype dt holding `values`, which are overwritten with what the dtype
 * actually holds. */
static tm_val make(tm_ctx *c, tm_dtype dt, int rank, const int64_t *dims, double *values) {
    tm_tensor *t = tm_tensor_alloc(dt, rank, dims, NULL);
    if (!t) return TM_NONE;
    int64_t n = numel(rank, dims);
    for (int64_t i = 0; i < n; i++) {
        if (tm_dtype_is_float(dt)) {
            tm_store_f64(t->data, dt, (size_t)i, values[i]);
            values[i] = tm_load_f64(t->data, dt, (size_t)i);
        } else {
            tm_store_i64(t->data, dt, (size_t)i, (int64_t)values[i]);
        }
    }
    return tm_val_tensor(c, t, 0);
}

static double *random_values(int64_t n, double scale) {
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = random_unit() * scale;
    return v;
}

static double tolerance(tm_dtype dt) {
    switch (dt) {
    case TM_DOUBLE: return 1e-12;
    case TM_FLOAT: return 2e-6;
    case TM_FLOAT16: return 1e-3;
    case TM_BFLOAT16: return 8e-3;
    default: return 0.13;
    }
}

/* |got - want| <= tol * (1 + |want|), NaN matching NaN and infinities matching. */
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
        double got = tm_load_f64(t->data, t->dtype, (size_t)i);
        int ok = (isnan(want[i]) && isnan(got)) || got == want[i]
                 || fabs(got - want[i]) <= tol * (1.0 + fabs(want[i]));
        if (!ok && bad++ == 0) first = i;
    }
    check(bad == 0, "%s: %lld of %lld values differ, first at %lld: got %.9g want %.9g", name,
          (long long)bad, (long long)n, (long long)first,
          first >= 0 ? tm_load_f64(t->data, t->dtype, (size_t)first) : 0.0,
          first >= 0 ? want[first] : 0.0);
}

static void expect_failure(tm_ctx *c, tm_status code, const char *needle, const char *name) {
    check(c->status == code, "%s: status %d, want %d (%s)", name, (int)c->status, (int)code,
          c->err.message);
    check(strstr(c->err.message, needle) != NULL, "%s: message '%s' lacks '%s'", name,
          c->err.message, needle);
}

/* ---- SOFTMAX -------------------------------------------------------------------------- */

static void naive_softmax(int rank, const int64_t *dims, int axis, int log_form,
                          const double *x, double *y) {
    int64_t outer = numel(axis, dims), length = dims[axis];
    int64_t inner = numel(rank - axis - 1, dims + axis + 1);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            const double *xs = x + o * length * inner + i;
            double *ys = y + o * length * inner + i;
            double top = -INFINITY, sum = 0.0;
            for (int64_t j = 0; j < length; j++) top = fmax(top, xs[j * inner]);
            for (int64_t j = 0; j < length; j++) sum += exp(xs[j * inner] - top);
            for (int64_t j = 0; j < length; j++)
                ys[j * inner] = log_form ? xs[j * inner] - top - log(sum)
                                         : exp(xs[j * inner] - top) / sum;
        }
}

static void run_softmax_values(tm_dtype dt, int rank, const int64_t *dims, int axis,
                               int log_form, double *x, const char *name) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_val in = make(&c, dt, rank, dims, x);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = axis;
    a.i[1] = log_form;
    tm_val out = tm_prim(&c, TM_P_SOFTMAX, &in, 1, &a);
    int64_t n = numel(rank, dims);
    double *want = malloc((size_t)(n + 1) * sizeof *want);
    naive_softmax(rank, dims, axis, log_form, x, want);
    char label[200];
    snprintf(label, sizeof label, "%s %s %s axis %d", log_form ? "log_softmax" : "softmax",
             tm_dtype_name(dt), name, axis);
    expect_values(&c, out, rank, dims, want, tolerance(dt), label);
    free(want);
    tm_ctx_destroy(&c);
}

static void run_softmax(tm_dtype dt, int rank, const int64_t *dims, int axis, int log_form,
                        double scale, const char *name) {
    double *x = random_values(numel(rank, dims), scale);
    run_softmax_values(dt, rank, dims, axis, log_form, x, name);
    free(x);
}

static void test_softmax(void) {
    const int64_t d3[] = {3, 5, 17}, d1[] = {40}, d_long[] = {2, 1000};
    tm_dtype dts[] = {TM_FLOAT, TM_DOUBLE, TM_FLOAT16, TM_BFLOAT16};
    for (size_t i = 0; i < sizeof dts / sizeof *dts; i++)
        for (int log_form = 0; log_form < 2; log_form++) {
            for (int axis = 0; axis < 3; axis++) run_softmax(dts[i], 3, d3, axis, log_form, 3.0, "3-D");
            run_softmax(dts[i], 1, d1, 0, log_form, 3.0, "1-D");
            run_softmax(dts[i], 2, d_long, 1, log_form, 10.0, "long rows");
        }
    /* Large values: stable only when the maximum is subtracted. */
    for (int log_form = 0; log_form < 2; log_form++) {
        const int64_t d[] = {2, 4};
        double x[] = {1000, 1001, 1002, 1003, -1000, -1001, 88, 89};
        run_softmax_values(TM_FLOAT, 2, d, 1, log_form, x, "large numbers");
        double y[] = {1000, 1001, 1002, 1003, -1000, -1001, 88, 89};
        run_softmax_values(TM_FLOAT, 2, d, 0, log_form, y, "large numbers");
        double z[] = {-INFINITY, 0, 1, 2, 3, -INFINITY, 5, 6};
        run_softmax_values(TM_FLOAT, 2, d, 1, log_form, z, "-inf entries");
    }
    /* Masked keys (an export's mask adds the float minimum) and scores far below the
     * row's maximum: exact zeros, where a vector exp once made subnormals (and an Intel
     * core a microcode assist on each); below exp's smallest normal result the vector
     * kernel gives 0, at most 1.2e-38 from the true value. Rows of 4 x 37: the 4-row
     * kernel, full vectors and a tail. */
    {
        enum { ROWS = 4, LEN = 37 };
        const int64_t d[] = {ROWS, LEN};
        double x[ROWS * LEN];
        for (int r = 0; r < ROWS; r++)
            for (int j = 0; j < LEN; j++) {
                double v = 0.25 * ((r * 7 + j * 3) % 11);
                if (j % 9 == 4) v += -3.4028234663852886e38;   /* masked */
                if (j == 20) v = -95.0;    /* e^-97.5 relative to the row: below FLT_MIN */
                if (j == 21) v = -80.0;    /* e^-82.5: a normal float, kept */
                x[r * LEN + j] = v;
            }
        tm_ctx c;
        tm_ctx_init(&c, TM_MODE_EAGER, NULL);
        tm_val in = make(&c, TM_FLOAT, 2, d, x);
        tm_args a;
        memset(&a, 0, sizeof a);
        a.i[0] = 1;
        tm_val out = tm_prim(&c, TM_P_SOFTMAX, &in, 1, &a);
        double want[ROWS * LEN];
        naive_softmax(2, d, 1, 0, x, want);
        int bad = 0;
        for (int i = 0; tm_ctx_ok(&c) && i < ROWS * LEN; i++) {
            double got = element(tm_vdata(&c, out), i);
            int j = i % LEN;
            if (j % 9 == 4 || j == 20) bad += got != 0.0 && fabs(got - want[i]) > 1.2e-38;
            else bad += fabs(got - want[i]) > 1e-6 * want[i] + 1e-45;
        }
        CHECK(tm_ctx_ok(&c) && bad == 0, "softmax with masked keys and far-below scores: %d wrong", bad);
        tm_ctx_destroy(&c);
    }
    const int64_t len1[] = {4, 1}, empty_outer[] = {0, 5}, empty_axis[] = {3, 0, 2};
    run_softmax(TM_FLOAT, 2, len1, 1, 0, 1.0, "length 1");
    run_softmax(TM_FLOAT, 2, empty_outer, 1, 0, 1.0, "empty outer");
    run_softmax(TM_FLOAT, 3, empty_axis, 1, 1, 1.0, "empty axis");
    run_softmax(TM_FLOAT, 3, empty_axis, 2, 0, 1.0, "empty outer of inner axis");
}

static void softmax_error(tm_dtype dt, int rank, const int64_t *dims, int64_t axis,
                          int64_t log_form, tm_status code, const char *needle) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_val in = tm_val_tensor(&c, tm_tensor_alloc(dt, rank, dims, NULL), 0);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = axis;
    a.i[1] = log_form;
    check(tm_prim(&c, TM_P_SOFTMAX, &in, 1, &a) == TM_NONE, "softmax error '%s' succeeded",
          needle);
    expect_failure(&c, code, needle, "softmax error");
    tm_ctx_destroy(&c);
}

static void test_softmax_errors(void) {
    const int64_t d[] = {2, 3};
    softmax_error(TM_INT32, 2, d, 1, 0, TM_ERR_DTYPE, "float tensor, got int32");
    softmax_error(TM_FLOAT, 2, d, 2, 0, TM_ERR_SHAPE, "axis 2 is out of range for x (2, 3)");
    softmax_error(TM_FLOAT, 2, d, -1, 0, TM_ERR_SHAPE, "axis -1 is out of range");
    softmax_error(TM_FLOAT, 0, d, 0, 0, TM_ERR_SHAPE, "out of range for x ()");
    softmax_error(TM_FLOAT, 2, d, 1, 2, TM_ERR_UNSUPPORTED, "got 2");
    softmax_error(TM_STRING, 2, d, 1, 0, TM_ERR_UNSUPPORTED, "string");
}

/* ---- LAYERNORM ------------------------------------------------------------------------ */

/* Element of p (rank pr, dims pd) broadcast against x's trailing dims at flat index j of
 * the normalised block. */
static double broadcast_at(const double *p, int pr, const int64_t *pd, int rank,
                           const int64_t *dims, int axis, int64_t j) {
    int64_t index[8];
    int n = rank - axis;
    for (int d = n - 1; d >= 0; d--) {
        index[d] = j % dims[axis + d];
        j /= dims[axis + d];
    }
    int64_t flat = 0;
    for (int d = 0; d < pr; d++) flat = flat * pd[d] + (pd[d] == 1 ? 0 : index[n - pr + d]);
    return p[flat];
}

typedef struct norm_param {
    tm_dtype dtype;
    int rank;
    int64_t dims[8];
} norm_param;

static void run_layernorm(tm_dtype dt, int rank, const int64_t *dims, int axis, int rms,
                          const norm_param *scale, const norm_param *bias, double epsilon,
                          const char *name) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    int64_t n = numel(rank, dims), count = numel(rank - axis, dims + axis), rows = n / (count ? count : 1);
    if (count == 0) rows = numel(axis, dims);
    double *x = random_values(n, 2.0);
    for (int64_t i = 0; i < n; i++) x[i] += 0.5;   /* a mean away from 0 */
    double *s = random_values(numel(scale->rank, scale->dims), 1.5);
    double *b = bias ? random_values(numel(bias->rank, bias->dims), 1.0) : NULL;
    tm_val in[3] = {make(&c, dt, rank, dims, x), make(&c, scale->dtype, scale->rank, scale->dims, s),
                    TM_NONE};
    if (bias) in[2] = make(&c, bias->dtype, bias->rank, bias->dims, b);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = axis;
    a.i[1] = rms;
    a.f[0] = epsilon;
    tm_val out[3];
    tm_prim_n(&c, TM_P_LAYERNORM, in, bias ? 3 : 2, &a, out, 3);
    double *want = malloc((size_t)(n + 1) * sizeof *want);
    double *want_mean = malloc((size_t)(rows + 1) * sizeof *want);
    double *want_inv = malloc((size_t)(rows + 1) * sizeof *want);
    for (int64_t r = 0; r < rows; r++) {
        const double *xs = x + r * count;
        double mean = 0.0, var = 0.0;
        for (int64_t j = 0; j < count && !rms; j++) mean += xs[j] / (double)count;
        for (int64_t j = 0; j < count; j++) var += (xs[j] - mean) * (xs[j] - mean) / (double)count;
        double inv = 1.0 / sqrt(var + epsilon);
        want_mean[r] = mean;
        want_inv[r] = inv;
        for (int64_t j = 0; j < count; j++) {
            double v = (xs[j] - mean) * inv * broadcast_at(s, scale->rank, scale->dims, rank, dims, axis, j);
            if (bias) v += broadcast_at(b, bias->rank, bias->dims, rank, dims, axis, j);
            want[r * count + j] = v;
        }
    }
    int64_t stat_dims[8];
    for (int d = 0; d < rank; d++) stat_dims[d] = d < axis ? dims[d] : 1;
    char label[200];
    snprintf(label, sizeof label, "%s %s %s axis %d", rms ? "rmsnorm" : "layernorm",
             tm_dtype_name(dt), name, axis);
    /* f32 statistics are rounded once to f32. */
    double tol = dt == TM_FLOAT ? 1e-5 : tolerance(dt);
    expect_values(&c, out[0], rank, dims, want, tol, label);
    strcat(label, " mean");
    expect_values(&c, out[1], rank, stat_dims, want_mean, dt == TM_DOUBLE ? 1e-7 : tol, label);
    strcat(label, " inv_std");
    expect_values(&c, out[2], rank, stat_dims, want_inv, dt == TM_DOUBLE ? 1e-7 : tol, label);
    if (tm_ctx_ok(&c))
        check(tm_vdtype(&c, out[1]) == TM_FLOAT && tm_vdtype(&c, out[2]) == TM_FLOAT,
              "%s: statistics must be float32", label);
    free(x);
    free(s);
    free(b);
    free(want);
    free(want_mean);
    free(want_inv);
    tm_ctx_destroy(&c);
}

static void test_layernorm(void) {
    const int64_t d3[] = {4, 6, 40};
    tm_dtype dts[] = {TM_FLOAT, TM_DOUBLE, TM_FLOAT16, TM_BFLOAT16};
    for (size_t i = 0; i < sizeof dts / sizeof *dts; i++) {
        tm_dtype dt = dts[i];
        norm_param full2 = {dt, 1, {40}}, full1 = {dt, 2, {6, 40}};
        for (int rms = 0; rms < 2; rms++) {
            run_layernorm(dt, 3, d3, 2, rms, &full2, &full2, 1e-5, "last axis with bias");
            run_layernorm(dt, 3, d3, 2, rms, &full2, NULL, 1e-3, "last axis no bias");
            run_layernorm(dt, 3, d3, 1, rms, &full1, &full1, 1e-5, "two axes");
            norm_param row = {dt, 1, {40}}, col = {dt, 2, {6, 1}};
            run_layernorm(dt, 3, d3, 1, rms, &row, &col, 1e-5, "broadcast scale and bias");
        }
    }
    norm_param half_scale = {TM_FLOAT16, 1, {40}}, f32_bias = {TM_FLOAT, 1, {40}};
    run_layernorm(TM_FLOAT, 3, d3, 2, 0, &half_scale, &f32_bias, 1e-5, "f16 scale with f32 x");
    norm_param scalar = {TM_FLOAT, 0, {0}};
    run_layernorm(TM_FLOAT, 3, d3, 0, 0, &scalar, &scalar, 1e-5, "rank-0 scale, axis 0");
    const int64_t d1[] = {33};
    norm_param p1 = {TM_FLOAT, 1, {33}};
    run_layernorm(TM_FLOAT, 1, d1, 0, 1, &p1, &p1, 1e-6, "1-D");
    const int64_t empty_rows[] = {0, 8};
    norm_param p8 = {TM_FLOAT, 1, {8}};
    run_layernorm(TM_FLOAT, 2, empty_rows, 1, 0, &p8, &p8, 1e-5, "no rows");
    const int64_t long_rows[] = {3, 4097};
    norm_param p4097 = {TM_FLOAT, 1, {4097}};
    run_layernorm(TM_FLOAT, 2, long_rows, 1, 0, &p4097, &p4097, 1e-5, "long rows");
}

/* The f32 rows of one LAYERNORM call (rows x count, scale and maybe bias over the row)
 * into y, mean and inv_std. */
static void layernorm_f32_bits(int64_t rows, int64_t count, int rms, int with_bias,
                               const double *x, const double *s, const double *b, float *y,
                               float *mean, float *inv_std) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    int64_t dims[2] = {rows, count}, pd[1] = {count};
    tm_val in[3] = {make(&c, TM_FLOAT, 2, dims, (double *)x), make(&c, TM_FLOAT, 1, pd, (double *)s),
                    with_bias ? make(&c, TM_FLOAT, 1, pd, (double *)b) : TM_NONE};
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 1;
    a.i[1] = rms;
    a.f[0] = 1e-5;
    tm_val out[3];
    tm_prim_n(&c, TM_P_LAYERNORM, in, with_bias ? 3 : 2, &a, out, 3);
    check(tm_ctx_ok(&c), "layernorm f32 bits: %s", c.err.message);
    if (tm_ctx_ok(&c)) {
        memcpy(y, tm_vdata(&c, out[0])->data, (size_t)(rows * count) * sizeof *y);
        memcpy(mean, tm_vdata(&c, out[1])->data, (size_t)rows * sizeof *mean);
        memcpy(inv_std, tm_vdata(&c, out[2])->data, (size_t)rows * sizeof *inv_std);
    }
    tm_ctx_destroy(&c);
}

/* The vector rows (AVX-512 where the CPU has it) give the plain loops' bits: lengths
 * around their 16 lanes, with and without bias, both norms, a NaN in one row. */
static void test_layernorm_vector_rows(void) {
    const int64_t counts[] = {1, 7, 15, 16, 17, 33, 384, 1001};
    for (size_t ci = 0; ci < sizeof counts / sizeof *counts; ci++) {
        int64_t count = counts[ci], rows = 3, n = rows * count;
        double *x = random_values(n, 3.0), *s = random_values(count, 1.5), *b = random_values(count, 1.0);
        for (int64_t i = 0; i < n; i++) x[i] += 7.0;
        if (count > 10) x[count + 5] = NAN;
        float *y[2], *mean[2], *inv[2];
        for (int form = 0; form < 4; form++) {
            for (int k = 0; k < 2; k++) {
                y[k] = malloc((size_t)n * sizeof(float));
                mean[k] = malloc((size_t)rows * sizeof(float));
                inv[k] = malloc((size_t)rows * sizeof(float));
                if (k) setenv("TM_KERNEL_ISA", "scalar", 1);
                layernorm_f32_bits(rows, count, form & 1, form >> 1, x, s, b, y[k], mean[k], inv[k]);
                unsetenv("TM_KERNEL_ISA");
            }
            check(!memcmp(y[0], y[1], (size_t)n * sizeof(float)) &&
                      !memcmp(mean[0], mean[1], (size_t)rows * sizeof(float)) &&
                      !memcmp(inv[0], inv[1], (size_t)rows * sizeof(float)),
                  "layernorm f32 rows of %lld (rms %d, bias %d): vector and plain rows differ",
                  (long long)count, form & 1, form >> 1);
            for (int k = 0; k < 2; k++) {
                free(y[k]);
                free(mean[k]);
                free(inv[k]);
            }
        }
        free(x);
        free(s);
        free(b);
    }
}

/* Rows whose mean is far larger than their spread (mean 36,000, sigma 1, as in ONNX
 * Runtime's transformer test graphs): the float32 kernel must stay within a few float
 * ulps of the double evaluation of its own (float) inputs; rounding the mean to float
 * before x - mean would be 2e-3 off. */
static void test_layernorm_ill_conditioned(void) {
    enum { ROWS = 4, H = 768 };
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    int64_t dims[2] = {ROWS, H}, pd[1] = {H};
    double *x = random_values(ROWS * H, 1.0), *s = random_values(H, 1.0), *b = random_values(H, 1.0);
    for (int i = 0; i < ROWS * H; i++) x[i] = (float)(36000.0 + x[i] * (1 + i / H));
    for (int i = 0; i < H; i++) {
        s[i] = (float)s[i];
        b[i] = (float)b[i];
    }
    tm_val in[3] = {make(&c, TM_FLOAT, 2, dims, x), make(&c, TM_FLOAT, 1, pd, s),
                    make(&c, TM_FLOAT, 1, pd, b)};
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 1;
    a.f[0] = 1e-12;
    tm_val out[3];
    tm_prim_n(&c, TM_P_LAYERNORM, in, 3, &a, out, 3);
    double *want = malloc(ROWS * H * sizeof *want);
    for (int r = 0; r < ROWS; r++) {
        double mean = 0.0, var = 0.0;
        for (int j = 0; j < H; j++) mean += x[r * H + j] / H;
        for (int j = 0; j < H; j++) var += (x[r * H + j] - mean) * (x[r * H + j] - mean) / H;
        for (int j = 0; j < H; j++)
            want[r * H + j] = (x[r * H + j] - mean) / sqrt(var + 1e-12) * s[j] + b[j];
    }
    expect_values(&c, out[0], 2, dims, want, 2e-6, "layernorm f32, mean 36000 and sigma 1..4");
    free(x);
    free(s);
    free(b);
    free(want);
    tm_ctx_destroy(&c);
}

static void layernorm_error(tm_dtype dt, int rank, const int64_t *dims, const norm_param *scale,
                            int64_t axis, int n_in, tm_status code, const char *needle) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_val in[3];
    in[0] = tm_val_tensor(&c, tm_tensor_alloc(dt, rank, dims, NULL), 0);
    in[1] = in[2] = tm_val_tensor(&c, tm_tensor_alloc(scale->dtype, scale->rank, scale->dims, NULL), 0);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = axis;
    tm_val out[3];
    check(tm_prim_n(&c, TM_P_LAYERNORM, in, n_in, &a, out, 3) != TM_OK,
          "layernorm error '%s' succeeded", needle);
    expect_failure(&c, code, needle, "layernorm error");
    tm_ctx_destroy(&c);
}

static void test_layernorm_errors(void) {
    const int64_t d[] = {2, 3, 4};
    norm_param good = {TM_FLOAT, 1, {4}}, wrong = {TM_FLOAT, 1, {3}}, deep = {TM_FLOAT, 2, {3, 4}};
    norm_param ints = {TM_INT32, 1, {4}};
    layernorm_error(TM_FLOAT, 3, d, &wrong, 2, 2, TM_ERR_SHAPE,
                    "scale (3) does not broadcast to the normalised dims of x (2, 3, 4) from axis 2");
    layernorm_error(TM_FLOAT, 3, d, &deep, 2, 3, TM_ERR_SHAPE, "scale (3, 4) does not broadcast");
    layernorm_error(TM_FLOAT, 3, d, &good, 3, 2, TM_ERR_SHAPE, "axis 3 is out of range");
    layernorm_error(TM_INT32, 3, d, &good, 2, 2, TM_ERR_DTYPE, "input 0 must be a float tensor");
    layernorm_error(TM_FLOAT, 3, d, &ints, 2, 2, TM_ERR_DTYPE, "input 1 must be a float tensor");
    layernorm_error(TM_FLOAT, 3, d, &good, 2, 1, TM_ERR_SHAPE, "expected 2 or 3 inputs");
    layernorm_error(TM_STRING, 3, d, &good, 2, 2, TM_ERR_UNSUPPORTED, "string");
}

/* ---- Trace mode: shape rules run without data ---------------------------------------- */

static void test_trace_shapes(void) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_TRACE, NULL);
    const int64_t dx[] = {2, 7, 16}, ds[] = {16}, dstat[] = {2, 7, 1};
    tm_val x = tm_val_symbolic(&c, TM_BFLOAT16, 3, dx, 0);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 1;
    tm_val y = tm_prim(&c, TM_P_SOFTMAX, &x, 1, &a);
    check(tm_ctx_ok(&c) && tm_vdata(&c, y) == NULL && tm_vdtype(&c, y) == TM_BFLOAT16
          && tm_vrank(&c, y) == 3 && tm_vdims(&c, y)[1] == 7, "trace softmax (%s)", c.err.message);
    a.i[0] = 2;
    tm_val in[2] = {x, tm_val_symbolic(&c, TM_BFLOAT16, 1, ds, 1)}, out[3];
    tm_prim_n(&c, TM_P_LAYERNORM, in, 2, &a, out, 3);
    int ok = tm_ctx_ok(&c) && tm_vdtype(&c, out[0]) == TM_BFLOAT16 && tm_vdtype(&c, out[1]) == TM_FLOAT
             && tm_vdtype(&c, out[2]) == TM_FLOAT && tm_vrank(&c, out[1]) == 3;
    for (int d = 0; ok && d < 3; d++) ok = tm_vdims(&c, out[2])[d] == dstat[d];
    check(ok, "trace layernorm (%s)", c.err.message);
    tm_ctx_destroy(&c);
}

/* ---- ONNX backend test data ---------------------------------------------------------- */

static tm_tensor *read_tensor_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc((size_t)size + 1);
    tm_tensor *t = NULL;
    if (fread(buf, 1, (size_t)size, f) == (size_t)size)
        if (tm_onnx_parse_tensor(buf, (size_t)size, &t, NULL) != 0) t = NULL;
    free(buf);
    fclose(f);
    return t;
}

static const tm_attr *find_attr(const tm_node *node, const char *name) {
    for (int i = 0; i < node->n_attrs; i++)
        if (strcmp(node->attrs[i].name, name) == 0) return &node->attrs[i];
    return NULL;
}

static int64_t opset_of(const tm_onnx_model *m) {
    for (int i = 0; i < m->n_opsets; i++)
        if (m->opsets[i].domain[0] == 0) return m->opsets[i].version;
    return 0;
}

/* Runs one node test; returns 0 when the case is absent or not applicable. */
static int run_backend_case(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s/model.onnx", BACKEND_DIR, dir);
    tm_onnx_model *model = NULL;
    if (tm_onnx_load_file(path, &model, NULL) != 0 || !model) return 0;
    const tm_node *node = &model->graph->nodes[0];
    const char *op = node->op_type;
    int softmax = strcmp(op, "Softmax") == 0 || strcmp(op, "LogSoftmax") == 0;
    if (softmax && opset_of(model) < 13) {
        /* Older opsets coerce to 2-D: the lowering's business. */
        tm_onnx_model_free(model);
        return 0;
    }
    tm_tensor *inputs[3] = {0}, *outputs[3] = {0};
    int n_in = 0, n_out = 0;
    for (; n_in < 3; n_in++) {
        snprintf(path, sizeof path, "%s/%s/test_data_set_0/input_%d.pb", BACKEND_DIR, dir, n_in);
        if (!(inputs[n_in] = read_tensor_file(path))) break;
    }
    for (; n_out < 3; n_out++) {
        snprintf(path, sizeof path, "%s/%s/test_data_set_0/output_%d.pb", BACKEND_DIR, dir, n_out);
        if (!(outputs[n_out] = read_tensor_file(path))) break;
    }
    int rank = inputs[0]->rank;
    const tm_attr *axis_attr = find_attr(node, "axis");
    const tm_attr *eps_attr = find_attr(node, "epsilon");
    int64_t axis = axis_attr ? axis_attr->i : -1;
    if (axis < 0) axis += rank;
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = axis;
    a.i[1] = softmax ? strcmp(op, "LogSoftmax") == 0 : strcmp(op, "RMSNormalization") == 0;
    a.f[0] = eps_attr ? eps_attr->f : 1e-5;
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_val in[3], out[3] = {TM_NONE, TM_NONE, TM_NONE};
    for (int i = 0; i < n_in; i++) in[i] = tm_val_tensor(&c, inputs[i], 0);
    tm_prim_n(&c, softmax ? TM_P_SOFTMAX : TM_P_LAYERNORM, in, n_in, &a, out, softmax ? 1 : 3);
    char label[300];
    for (int i = 0; i < n_out; i++) {
        int64_t n = numel(outputs[i]->rank, outputs[i]->dims);
        double *want = malloc((size_t)(n + 1) * sizeof *want);
        for (int64_t j = 0; j < n; j++) want[j] = tm_load_f64(outputs[i]->data, outputs[i]->dtype, (size_t)j);
        snprintf(label, sizeof label, "backend %s output %d", dir, i);
        expect_values(&c, out[i], outputs[i]->rank, outputs[i]->dims, want, 1e-4, label);
        free(want);
        tm_tensor_free(outputs[i]);
    }
    tm_ctx_destroy(&c);
    tm_onnx_model_free(model);
    return 1;
}

static void test_backend_data(void) {
    static const char *const prefixes[] = {"test_softmax_", "test_logsoftmax_",
                                           "test_layer_normalization_", "test_rms_normalization_"};
    static const char *const shapes[] = {
        "axis_0", "axis_1", "axis_2", "default_axis", "example", "example_1", "large_number",
        "negative_axis",
        "2d_axis0", "2d_axis1", "2d_axis_negative_1", "2d_axis_negative_2",
        "3d_axis0_epsilon", "3d_axis1_epsilon", "3d_axis2_epsilon",
        "3d_axis_negative_1_epsilon", "3d_axis_negative_2_epsilon", "3d_axis_negative_3_epsilon",
        "4d_axis0", "4d_axis1", "4d_axis2", "4d_axis3", "4d_axis_negative_1",
        "4d_axis_negative_2", "4d_axis_negative_3", "4d_axis_negative_4",
    };
    int ran = 0;
    char dir[200];
    for (size_t p = 0; p < sizeof prefixes / sizeof *prefixes; p++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            snprintf(dir, sizeof dir, "%s%s", prefixes[p], shapes[s]);
            ran += run_backend_case(dir);
        }
    printf("backend data: %d cases run\n", ran);
    check(ran > 50 || ran == 0, "backend data: only %d cases found", ran);
}

/* ---- SOFTMAX_GRAD and LAYERNORM_GRAD ------------------------------------------------------ */

/* The cotangent of softmax's input from its output y and cotangent g, in double:
 * sum_k d y_k / d x_j g_k = y_j (g_j - sum_k g_k y_k), log-softmax g_j - e^{y_j} sum_k g_k. */
static void naive_softmax_grad(int rank, const int64_t *dims, int axis, int log_form,
                               const double *y, const double *g, double *gx) {
    int64_t outer = numel(axis, dims), length = dims[axis];
    int64_t inner = numel(rank - axis - 1, dims + axis + 1);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t first = o * length * inner + i;
            double dot = 0.0;
            for (int64_t j = 0; j < length; j++) {
                int64_t at = first + j * inner;
                dot += log_form ? g[at] : g[at] * y[at];
            }
            for (int64_t j = 0; j < length; j++) {
                int64_t at = first + j * inner;
                gx[at] = log_form ? g[at] - exp(y[at]) * dot : y[at] * (g[at] - dot);
            }
        }
}

static void test_softmax_grad(void) {
    const tm_dtype dts[3] = {TM_FLOAT, TM_DOUBLE, TM_FLOAT16};
    const int64_t dims[3] = {3, 37, 5};
    int64_t n = numel(3, dims);
    for (int d = 0; d < 3; d++)
        for (int axis = 0; axis < 3; axis++)
            for (int log_form = 0; log_form < 2; log_form++) {
                /* y from a real softmax (what the primitive is fed), g anything */
                double *x = random_values(n, 3.0), *y = malloc((size_t)n * sizeof *y);
                double *g = random_values(n, 2.0), *want = malloc((size_t)n * sizeof *want);
                naive_softmax(3, dims, axis, log_form, x, y);
                tm_ctx c;
                tm_ctx_init(&c, TM_MODE_EAGER, NULL);
                tm_val in[2] = {make(&c, dts[d], 3, dims, y), make(&c, dts[d], 3, dims, g)};
                tm_args a;
                memset(&a, 0, sizeof a);
                a.i[0] = axis;
                a.i[1] = log_form;
                tm_val out = tm_prim(&c, TM_P_SOFTMAX_GRAD, in, 2, &a);
                naive_softmax_grad(3, dims, axis, log_form, y, g, want);
                char label[128];
                snprintf(label, sizeof label, "%s_grad %s axis %d", log_form ? "log_softmax" :
                         "softmax", tm_dtype_name(dts[d]), axis);
                expect_values(&c, out, 3, dims, want, tolerance(dts[d]) * (log_form ? 4 : 1), label);
                tm_ctx_destroy(&c);
                free(x);
                free(y);
                free(g);
                free(want);
            }
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    double v[6] = {0};
    tm_val y = make(&c, TM_FLOAT, 2, (int64_t[]){2, 3}, v), g = make(&c, TM_DOUBLE, 2, (int64_t[]){2, 3}, v);
    tm_prim(&c, TM_P_SOFTMAX_GRAD, (tm_val[2]){y, g}, 2, NULL);
    expect_failure(&c, TM_ERR_DTYPE, "one float dtype", "softmax_grad of mixed dtypes");
    tm_ctx_destroy(&c);
}

/* Layer norm's cotangents in double from the definitions, with the statistics as the
 * forward kernel saved them (float32). */
static void naive_layernorm_grad(int64_t rows, int64_t n, int rms, const double *x,
                                 const double *scale, const double *mean, const double *inv,
                                 const double *g, double *dx, double *dscale, double *dbias) {
    for (int64_t j = 0; j < n; j++) dscale[j] = dbias[j] = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        double m = rms ? 0.0 : mean[r], s = inv[r], sum_g = 0.0, sum_gx = 0.0;
        for (int64_t j = 0; j < n; j++) {
            double xhat = (x[r * n + j] - m) * s, gh = g[r * n + j] * scale[j];
            sum_g += gh;
            sum_gx += gh * xhat;
            dscale[j] += g[r * n + j] * xhat;
            dbias[j] += g[r * n + j];
        }
        for (int64_t j = 0; j < n; j++) {
            double xhat = (x[r * n + j] - m) * s, gh = g[r * n + j] * scale[j];
            dx[r * n + j] = s * (gh - (rms ? 0.0 : sum_g / (double)n) - xhat * sum_gx / (double)n);
        }
    }
}

static void test_layernorm_grad(void) {
    const int64_t dims[3] = {3, 7, 48};
    for (int axis = 1; axis < 3; axis++)
        for (int rms = 0; rms < 2; rms++) {
            int64_t rows = numel(axis, dims), n = numel(3 - axis, dims + axis), total = rows * n;
            double *x = random_values(total, 2.0), *scale = random_values(n, 1.5);
            double *g = random_values(total, 1.0), *mean = malloc((size_t)rows * sizeof *mean);
            double *inv = malloc((size_t)rows * sizeof *inv);
            double *dx = malloc((size_t)total * sizeof *dx), *ds = malloc((size_t)n * sizeof *ds);
            double *db = malloc((size_t)n * sizeof *db);
            for (int64_t i = 0; i < total; i++) x[i] += 0.5;  /* a mean to subtract */
            tm_ctx c;
            tm_ctx_init(&c, TM_MODE_EAGER, NULL);
            tm_val xv = make(&c, TM_FLOAT, 3, dims, x), sv = make(&c, TM_FLOAT, 3 - axis, dims + axis, scale);
            tm_args a;
            memset(&a, 0, sizeof a);
            a.i[0] = axis;
            a.i[1] = rms;
            a.f[0] = 1e-5;
            tm_val fwd[3];
            tm_prim_n(&c, TM_P_LAYERNORM, (tm_val[2]){xv, sv}, 2, &a, fwd, 3);
            const tm_tensor *mt = tm_vdata(&c, fwd[1]), *it = tm_vdata(&c, fwd[2]);
            for (int64_t r = 0; mt && it && r < rows; r++) {
                mean[r] = ((const float *)mt->data)[r];
                inv[r] = ((const float *)it->data)[r];
            }
            tm_val in[5] = {xv, sv, fwd[1], fwd[2], make(&c, TM_FLOAT, 3, dims, g)}, out[3];
            tm_prim_n(&c, TM_P_LAYERNORM_GRAD, in, 5, &a, out, 3);
            naive_layernorm_grad(rows, n, rms, x, scale, mean, inv, g, dx, ds, db);
            char label[128];
            snprintf(label, sizeof label, "%s_grad axis %d", rms ? "rms_norm" : "layernorm", axis);
            expect_values(&c, out[0], 3, dims, dx, 2e-6, label);
            expect_values(&c, out[1], 3 - axis, dims + axis, ds, 2e-6, label);
            expect_values(&c, out[2], 3 - axis, dims + axis, db, 2e-6, label);
            tm_ctx_destroy(&c);
            free(x);
            free(scale);
            free(g);
            free(mean);
            free(inv);
            free(dx);
            free(ds);
            free(db);
        }
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    double v[12] = {0};
    tm_val x = make(&c, TM_FLOAT, 2, (int64_t[]){3, 4}, v), s = make(&c, TM_FLOAT, 1, (int64_t[]){3}, v);
    tm_val st = make(&c, TM_FLOAT, 2, (int64_t[]){3, 1}, v), out[3];
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 1;
    tm_prim_n(&c, TM_P_LAYERNORM_GRAD, (tm_val[5]){x, s, st, st, x}, 5, &a, out, 3);
    expect_failure(&c, TM_ERR_SHAPE, "scale 4 elements", "layernorm_grad of a short scale");
    tm_ctx_destroy(&c);
}

int main(void) {
    test_softmax();
    test_softmax_errors();
    test_layernorm();
    test_layernorm_ill_conditioned();
    test_layernorm_vector_rows();
    test_layernorm_errors();
    test_softmax_grad();
    test_layernorm_grad();
    test_trace_shapes();
    test_backend_data();
    printf("reference kernels: %s\n", tm_use_reference_kernels() ? "on" : "off");
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
