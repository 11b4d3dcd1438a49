/* Tests of the misc primitives (src/core/prims/misc.c): top-k against a naive selection,
 * range against start + i * delta, and the random draws by shape, range, statistics and
 * reproducibility. Not a test of the ONNX lowerings that call them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../src/core/ctx.h"

#include "check.h"

static tm_args args_of(const int64_t *values, int n) {
    tm_args a;
    memset(&a, 0, sizeof a);
    for (int i = 0; i < n; i++) a.i[i] = values[i];
    return a;
}

/* The call must fail with `code` and a message containing `needle`; inputs stay ours. */
static void expect_error(const char *what, int prim, tm_tensor *const *ins, int nin,
                         const tm_args *a, tm_status code, const char *needle) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_val v[4], out[2];
    for (int i = 0; i < nin; i++) v[i] = tm_val_tensor(&c, ins[i], 1);
    tm_status s = tm_prim_n(&c, prim, v, nin, a, out, tm_prims[prim].nout);
    CHECK(s == code && strstr(c.err.message, needle),
          "%s: expected status %d with '%s', got %d: '%s'", what, code, needle, s,
          c.err.message);
    tm_ctx_destroy(&c);
}

/* ---- TOPK ------------------------------------------------------------------------------- */

/* Orders elements i and j of t: NaN above everything, integers compared exactly. */
static int compare(const tm_tensor *t, int64_t i, int64_t j) {
    tm_dtype dt = t->dtype;
    if (tm_dtype_is_float(dt)) {
        double a = tm_load_f64(t->data, dt, (size_t)i), b = tm_load_f64(t->data, dt, (size_t)j);
        if (isnan(a) || isnan(b)) return isnan(a) - isnan(b);
        return (a > b) - (a < b);
    }
    if (tm_dtype_is_signed_int(dt)) {
        int64_t a = tm_load_i64(t->data, dt, (size_t)i), b = tm_load_i64(t->data, dt, (size_t)j);
        return (a > b) - (a < b);
    }
    uint64_t a = tm_load_u64(t->data, dt, (size_t)i), b = tm_load_u64(t->data, dt, (size_t)j);
    return (a > b) - (a < b);
}

/* Runs topk and checks it against picking the best remaining element k times. */
static void check_topk(const char *what, tm_tensor *x, int64_t axis_arg, int64_t k,
                       int largest) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_val in = tm_val_tensor(&c, x, 0), out[2];
    tm_args a = args_of((int64_t[]){axis_arg, k, largest, 1}, 4);
    tm_status s = tm_prim_n(&c, TM_P_TOPK, &in, 1, &a, out, 2);
    int axis = (int)(axis_arg < 0 ? axis_arg + x->rank : axis_arg);
    const tm_tensor *values = s == TM_OK ? tm_vdata(&c, out[0]) : NULL;
    const tm_tensor *indices = s == TM_OK ? tm_vdata(&c, out[1]) : NULL;
    int ok = values && indices && indices->dtype == TM_INT64 && values->dtype == x->dtype &&
             values->rank == x->rank && values->dims[axis] == k;
    int64_t n = x->dims[axis], outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= x->dims[d];
    for (int d = axis + 1; d < x->rank; d++) inner *= x->dims[d];
    size_t size = tm_dtype_elem_size(x->dtype);
    char *taken = calloc((size_t)n + 1, 1);
    for (int64_t o = 0; ok && o < outer; o++) {
        for (int64_t i = 0; ok && i < inner; i++) {
            memset(taken, 0, (size_t)n + 1);
            for (int64_t j = 0; ok && j < k; j++) {
                int64_t best = -1;
                for (int64_t m = 0; m < n; m++) {
                    if (taken[m]) continue;
                    int64_t at = (o * n + m) * inner + i;
                    int order = best < 0 ? 1 : compare(x, at, (o * n + best) * inner + i);
                    if (!largest) order = -order;
                    if (best < 0 || order > 0) best = m;
                }
                taken[best] = 1;
                int64_t out_at = (o * k + j) * inner + i, from = (o * n + best) * inner + i;
                ok = ((const int64_t *)indices->data)[out_at] == best &&
                     !memcmp((const char *)values->data + (size_t)out_at * size,
                             (const char *)x->data + (size_t)from * size, size);
                if (!ok)
                    printf("  %s: line (%lld, %lld) rank %lld: got index %lld, want %lld\n",
                           what, (long long)o, (long long)i, (long long)j,
                           (long long)((const int64_t *)indices->data)[out_at], (long long)best);
            }
        }
    }
    CHECK(ok, "%s", what);
    free(taken);
    tm_ctx_destroy(&c);
}

static void test_topk(void) {
    const double nan = NAN;
    const double line[14] = {3, 1, 4, 1, 5, nan, 2, 6, 5, nan, 5, -0.0, 0.0, -7};
    tm_dtype float_types[] = {TM_FLOAT, TM_DOUBLE, TM_FLOAT16, TM_BFLOAT16};
    for (int t = 0; t < 4; t++) {
        for (int largest = 0; largest < 2; largest++) {
            for (int64_t k = 0; k <= 14; k += 3) {
                char what[96];
                snprintf(what, sizeof what, "topk %s largest %d k %lld",
                         tm_dtype_name(float_types[t]), largest, (long long)k);
                check_topk(what, tensor_of(float_types[t], 2, (int64_t[]){1, 14}, line), 1, k,
                           largest);
            }
        }
    }
    check_topk("topk k = dim", tensor_of(TM_FLOAT, 1, (int64_t[]){14}, line), 0, 14, 1);

    /* Every axis of a 3-D tensor with many ties (values 0..4). */
    double cube[120];
    for (int i = 0; i < 120; i++) cube[i] = (i * 37 + 11) % 5;
    for (int axis = -1; axis < 3; axis++) {
        char what[64];
        snprintf(what, sizeof what, "topk cube axis %d", axis);
        check_topk(what, tensor_of(TM_FLOAT, 3, (int64_t[]){4, 5, 6}, cube), axis, 3, 1);
        check_topk(what, tensor_of(TM_INT32, 3, (int64_t[]){4, 5, 6}, cube), axis, 2, 0);
    }

    /* Integers beyond double precision, unsigned, small signed. */
    tm_tensor *big = tm_tensor_alloc(TM_INT64, 1, (int64_t[]){6}, NULL);
    int64_t big_values[6] = {(INT64_C(1) << 62) + 1, (INT64_C(1) << 62) + 3, INT64_MIN,
                             (INT64_C(1) << 62) + 2, INT64_MAX, -(INT64_C(1) << 62)};
    memcpy(big->data, big_values, sizeof big_values);
    tm_tensor *big2 = tm_tensor_clone(big, NULL);
    check_topk("topk int64 largest", big, 0, 4, 1);
    check_topk("topk int64 smallest", big2, 0, 4, 0);
    double bytes[8] = {200, 3, 255, 0, 3, 128, 127, 1};
    check_topk("topk uint8", tensor_of(TM_UINT8, 1, (int64_t[]){8}, bytes), 0, 5, 1);
    double signed_bytes[8] = {-100, 3, 127, -128, 3, 0, -1, 1};
    check_topk("topk int8", tensor_of(TM_INT8, 1, (int64_t[]){8}, signed_bytes), 0, 5, 0);
    check_topk("topk bool", tensor_of(TM_BOOL, 1, (int64_t[]){8}, bytes), 0, 3, 1);

    /* A wide random tensor: the heap replaces its root many times. */
    double *wide = malloc(3 * 1000 * sizeof *wide);
    for (int i = 0; i < 3000; i++) wide[i] = (double)((i * 7919u) % 1009u) / 7.0;
    int64_t wide_dims[2] = {3, 1000};
    check_topk("topk wide largest", tensor_of(TM_FLOAT, 2, wide_dims, wide), 1, 25, 1);
    check_topk("topk wide smallest", tensor_of(TM_FLOAT, 2, wide_dims, wide), -1, 25, 0);
    check_topk("topk empty", tensor_of(TM_FLOAT, 2, (int64_t[]){0, 4}, wide), 1, 2, 1);
    free(wide);

    tm_tensor *x = tensor_of(TM_FLOAT, 2, (int64_t[]){2, 3}, cube);
    tm_args a = args_of((int64_t[]){1, 4, 1, 1}, 4);
    expect_error("topk k too big", TM_P_TOPK, &x, 1, &a, TM_ERR_SHAPE, "k = 4 is outside 0..3");
    a = args_of((int64_t[]){2, 1, 1, 1}, 4);
    expect_error("topk axis", TM_P_TOPK, &x, 1, &a, TM_ERR_SHAPE, "axis 2 is out of range");
    tm_tensor_free(x);
    x = tm_tensor_alloc(TM_STRING, 1, (int64_t[]){2}, NULL);
    a = args_of((int64_t[]){0, 1, 1, 1}, 4);
    expect_error("topk strings", TM_P_TOPK, &x, 1, &a, TM_ERR_UNSUPPORTED, "string values");
    tm_tensor_free(x);
}

/* ---- RANGE ------------------------------------------------------------------------------ */

static const tm_tensor *run_source(tm_ctx *c, int prim, const tm_args *a) {
    tm_val v = tm_prim(c, prim, NULL, 0, a);
    return v == TM_NONE ? NULL : tm_vdata(c, v);
}

static void check_range_float(tm_dtype dt, double start, double delta, int64_t count,
                              double tolerance) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_args a = args_of((int64_t[]){dt, count}, 2);
    a.f[0] = start;
    a.f[1] = delta;
    const tm_tensor *y = run_source(&c, TM_P_RANGE, &a);
    int ok = y && y->dtype == dt && y->rank == 1 && y->dims[0] == count;
    for (int64_t i = 0; ok && i < count; i++)
        ok = fabs(element(y, i) - (start + (double)i * delta)) <= tolerance;
    CHECK(ok, "range %s start %g delta %g count %lld", tm_dtype_name(dt), start, delta,
          (long long)count);
    tm_ctx_destroy(&c);
}

static void check_range_int(tm_dtype dt, int64_t start, int64_t delta, int64_t count,
                            const int64_t *want) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_args a = args_of((int64_t[]){dt, count, start, delta}, 4);
    const tm_tensor *y = run_source(&c, TM_P_RANGE, &a);
    int ok = y && y->dtype == dt && y->dims[0] == count;
    for (int64_t i = 0; ok && i < count; i++)
        ok = (tm_dtype_is_signed_int(dt) ? tm_load_i64(y->data, dt, (size_t)i)
                                         : (int64_t)tm_load_u64(y->data, dt, (size_t)i)) == want[i];
    CHECK(ok, "range %s start %lld delta %lld", tm_dtype_name(dt), (long long)start,
          (long long)delta);
    tm_ctx_destroy(&c);
}

static void test_range(void) {
    check_range_float(TM_FLOAT, 0.5, 0.1, 10, 1e-6);
    check_range_float(TM_FLOAT, 10, -2.5, 7, 0);
    check_range_float(TM_DOUBLE, -3, 0.25, 13, 0);
    check_range_float(TM_DOUBLE, 1, 1e-3, 1000, 1e-12);
    check_range_float(TM_FLOAT16, 1, 0.5, 9, 0);
    check_range_float(TM_BFLOAT16, -4, 1, 9, 0);
    check_range_float(TM_FLOAT, 0, 1, 0, 0);

    /* float32 arithmetic, as the output type: start + i * delta rounded in float. */
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_args a = args_of((int64_t[]){TM_FLOAT, 100}, 2);
    a.f[0] = 0.3;
    a.f[1] = 0.7;
    const tm_tensor *y = run_source(&c, TM_P_RANGE, &a);
    int exact = y != NULL;
    for (int i = 0; exact && i < 100; i++) {
        float want = 0.3f + (float)i * 0.7f;
        exact = ((const float *)y->data)[i] == want;
    }
    CHECK(exact, "range float32 computes in float32");
    tm_ctx_destroy(&c);

    check_range_int(TM_INT32, 10, -3, 5, (int64_t[]){10, 7, 4, 1, -2});
    check_range_int(TM_INT64, INT64_C(1) << 40, INT64_C(1) << 33, 3,
                    (int64_t[]){INT64_C(1) << 40, (INT64_C(1) << 40) + (INT64_C(1) << 33),
                                (INT64_C(1) << 40) + (INT64_C(1) << 34)});
    check_range_int(TM_INT16, -5, 2, 4, (int64_t[]){-5, -3, -1, 1});
    check_range_int(TM_UINT8, 250, 3, 4, (int64_t[]){250, 253, 0, 3}); /* wraps */
    check_range_int(TM_INT8, 0, 0, 3, (int64_t[]){0, 0, 0});

    a = args_of((int64_t[]){TM_STRING, 3}, 2);
    expect_error("range string", TM_P_RANGE, NULL, 0, &a, TM_ERR_UNSUPPORTED, "string");
    a = args_of((int64_t[]){TM_INT32, -1}, 2);
    expect_error("range count", TM_P_RANGE, NULL, 0, &a, TM_ERR_SHAPE, "negative count -1");
}

/* ---- RANDOM ----------------------------------------------------------------------------- */

static tm_args random_args(tm_dtype dt, int rank, const int64_t *dims, double a0, double a1,
                           double seed) {
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = dt;
    a.i[1] = rank;
    for (int d = 0; d < rank; d++) a.i[2 + d] = dims[d];
    a.f[0] = a0;
    a.f[1] = a1;
    a.f[2] = seed;
    return a;
}

typedef struct moments {
    double mean, std, low, high;
} moments;

static moments moments_of(const tm_tensor *t) {
    int64_t n = tm_tensor_numel_(t);
    double sum = 0, sum2 = 0;
    moments m = {0, 0, INFINITY, -INFINITY};
    for (int64_t i = 0; i < n; i++) {
        double v = element(t, i);
        sum += v;
        sum2 += v * v;
        if (v < m.low) m.low = v;
        if (v > m.high) m.high = v;
    }
    m.mean = sum / (double)n;
    m.std = sqrt(sum2 / (double)n - m.mean * m.mean);
    return m;
}

static void check_uniform(tm_dtype dt, double low, double high, double seed) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    int64_t dims[2] = {250, 400};
    tm_args a = random_args(dt, 2, dims, low, high, seed);
    const tm_tensor *y = run_source(&c, TM_P_RANDOM_UNIFORM, &a);
    int ok = y && y->dtype == dt && y->rank == 2 && y->dims[0] == 250 && y->dims[1] == 400;
    CHECK(ok, "random_uniform %s shape", tm_dtype_name(dt));
    if (!ok) {
        tm_ctx_destroy(&c);
        return;
    }
    moments m = moments_of(y);
    double width = high - low;
    /* 100k draws: the mean's standard error is width * 0.0009; allow 5 of them. */
    CHECK(fabs(m.mean - (low + high) / 2) < 0.005 * width &&
              fabs(m.std - width / sqrt(12.0)) < 0.005 * width,
          "random_uniform %s moments: mean %g std %g", tm_dtype_name(dt), m.mean, m.std);
    CHECK(m.low >= low && m.high < high && m.low < low + 0.01 * width &&
              m.high > high - 0.01 * width,
          "random_uniform %s range: [%g, %g]", tm_dtype_name(dt), m.low, m.high);
    tm_ctx_destroy(&c);
}

static void check_normal(tm_dtype dt, double mean, double scale, double tolerance) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    int64_t dims[1] = {100001}; /* odd: the last Box-Muller pair is cut */
    tm_args a = random_args(dt, 1, dims, mean, scale, 42);
    const tm_tensor *y = run_source(&c, TM_P_RANDOM_NORMAL, &a);
    CHECK(y && y->dtype == dt && y->dims[0] == 100001, "random_normal %s shape",
          tm_dtype_name(dt));
    if (!y) {
        tm_ctx_destroy(&c);
        return;
    }
    moments m = moments_of(y);
    int64_t within = 0;
    for (int64_t i = 0; i < 100001; i++) within += fabs(element(y, i) - mean) < scale;
    double share = (double)within / 100001.0;
    CHECK(fabs(m.mean - mean) < tolerance * scale && fabs(m.std - scale) < tolerance * scale &&
              fabs(share - 0.6827) < 0.01,
          "random_normal %s: mean %g std %g share within one sigma %g", tm_dtype_name(dt),
          m.mean, m.std, share);
    tm_ctx_destroy(&c);
}

/* Two draws with the same arguments: equal (or not) byte for byte. */
static int same_draws(int prim, double seed1, double seed2) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    int64_t dims[1] = {1000};
    tm_args a1 = random_args(TM_FLOAT, 1, dims, 0, 1, seed1);
    tm_args a2 = random_args(TM_FLOAT, 1, dims, 0, 1, seed2);
    const tm_tensor *y1 = run_source(&c, prim, &a1), *y2 = run_source(&c, prim, &a2);
    int same = y1 && y2 && !memcmp(y1->data, y2->data, y1->nbytes);
    tm_ctx_destroy(&c);
    return same;
}

static void test_random(void) {
    check_uniform(TM_FLOAT, -2, 3, 7);
    check_uniform(TM_DOUBLE, 10, 10.5, 1);
    check_uniform(TM_FLOAT16, 0, 1, 3);
    check_uniform(TM_BFLOAT16, -1, 1, NAN);
    check_normal(TM_FLOAT, 1.5, 2, 0.02);
    check_normal(TM_DOUBLE, -3, 0.1, 0.02);
    check_normal(TM_FLOAT16, 0, 1, 0.02);

    CHECK(same_draws(TM_P_RANDOM_UNIFORM, 5, 5), "random_uniform: a seed reproduces");
    CHECK(same_draws(TM_P_RANDOM_NORMAL, 5, 5), "random_normal: a seed reproduces");
    CHECK(!same_draws(TM_P_RANDOM_UNIFORM, 5, 6), "random_uniform: seeds differ");
    CHECK(same_draws(TM_P_RANDOM_NORMAL, NAN, NAN), "random_normal: no seed is a fixed seed");

    /* [1, next float after 1) holds only 1.0: rounding up to `high` must not leak out. */
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    int64_t dims[1] = {10000};
    tm_args a = random_args(TM_FLOAT, 1, dims, 1, nextafterf(1, 2), 9);
    const tm_tensor *y = run_source(&c, TM_P_RANDOM_UNIFORM, &a);
    int ok = y != NULL;
    for (int i = 0; ok && i < 10000; i++) ok = ((const float *)y->data)[i] == 1.0f;
    CHECK(ok, "random_uniform stays below high");
    a = random_args(TM_DOUBLE, 0, NULL, 0, 1, 3);
    y = run_source(&c, TM_P_RANDOM_NORMAL, &a);
    CHECK(y && y->rank == 0 && isfinite(((const double *)y->data)[0]), "random_normal rank 0");
    a = random_args(TM_FLOAT, 2, (int64_t[]){3, 0}, 0, 1, 3);
    y = run_source(&c, TM_P_RANDOM_UNIFORM, &a);
    CHECK(y && y->dims[1] == 0, "random_uniform empty");
    tm_ctx_destroy(&c);

    /* Under trace the draws are recorded, not folded into a constant. */
    tm_ctx_init(&c, TM_MODE_TRACE, NULL);
    a = random_args(TM_FLOAT, 1, (int64_t[]){4}, 0, 1, 3);
    tm_val v = tm_prim(&c, TM_P_RANDOM_UNIFORM, NULL, 0, &a);
    CHECK(v != TM_NONE && !tm_vdata(&c, v) && c.n_nodes == 1 && tm_vdims(&c, v)[0] == 4,
          "random under trace is recorded");
    tm_ctx_destroy(&c);

    a = random_args(TM_INT32, 1, (int64_t[]){4}, 0, 1, 3);
    expect_error("random int", TM_P_RANDOM_UNIFORM, NULL, 0, &a, TM_ERR_UNSUPPORTED,
                 "draws floats only, not int32");
    a = random_args(TM_FLOAT, 2, (int64_t[]){4, -1}, 0, 1, 3);
    expect_error("random dims", TM_P_RANDOM_NORMAL, NULL, 0, &a, TM_ERR_SHAPE,
                 "dim 1 is negative");
}

int main(void) {
    test_topk();
    test_range();
    test_random();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
