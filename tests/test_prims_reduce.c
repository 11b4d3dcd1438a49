/* Tests of the reduce family (reduce_sum/prod/max/min over axis masks, argmax/argmin,
 * cumsum/cumprod) against naive loops in double and int64 written here.
 * Not a test of the ONNX lowerings (keepdims, axes inputs, noop_with_empty_axes). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "../src/core/ctx.h"

#define CHECK_RNG_SEED 0x2545F4914F6CDD1DULL
#include "check.h"

/* Reads back what dtype dt holds for v. */
static double as_dtype(double v, tm_dtype dt) {
    tm_tensor *t = tensor_of(dt, 0, NULL, &v);
    double r = element(t, 0);
    tm_tensor_free(t);
    return r;
}

static int same_value(double got, double want, double rel) {
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == want;
    return fabs(got - want) <= rel * fabs(want) + 1e-9;
}

static void expect_failure(tm_ctx *c, tm_status code, const char *needle, const char *what) {
    CHECK(!tm_ctx_ok(c) && c->status == code && strstr(c->err.message, needle),
          "%s: expected status %d with '%s', got %d '%s'", what, (int)code, needle,
          (int)c->status, c->err.message);
}

/* ---- Reduce ------------------------------------------------------------------------------ */

/* Coordinates of flat index i in dims. */
static void coords_of(int rank, const int64_t *dims, int64_t i, int64_t *coord) {
    for (int d = rank - 1; d >= 0; d--) {
        coord[d] = dims[d] ? i % dims[d] : 0;
        if (dims[d]) i /= dims[d];
    }
}

/* The naive reduction: every input element folded into its output element, in double
 * for floats (magnitude collects sum |x|, the scale of a sum's rounding error) and in
 * wrapping 64-bit arithmetic for integers (stored back through the dtype when compared). */
typedef struct reference {
    double *value;
    double *magnitude;
    uint64_t *bits;      /* integer dtypes */
    unsigned char *seen;
} reference;

static void reference_reduce(int prim, tm_dtype dt, int rank, const int64_t *dims,
                             int64_t mask, const double *x, const reference *r, int64_t out_n,
                             const int64_t *out_dims) {
    int is_float = tm_dtype_is_float(dt);
    for (int64_t o = 0; o < out_n; o++) {
        r->value[o] = prim == TM_P_REDUCE_PROD ? 1 : 0;
        r->bits[o] = prim == TM_P_REDUCE_PROD ? 1 : 0;
        r->magnitude[o] = 0;
        r->seen[o] = 0;
    }
    int64_t n = tm_numel(rank, dims);
    int64_t coord[TM_MAX_RANK];
    for (int64_t i = 0; i < n; i++) {
        coords_of(rank, dims, i, coord);
        int64_t o = 0;
        for (int d = 0; d < rank; d++) o = o * out_dims[d] + ((mask >> d) & 1 ? 0 : coord[d]);
        double v = x[i];
        uint64_t iv = (uint64_t)(int64_t)v;
        int64_t sv = (int64_t)v, sacc = (int64_t)r->bits[o];
        int first = !r->seen[o];
        r->seen[o] = 1;
        r->magnitude[o] += fabs(v);
        int is_unsigned = tm_dtype_is_unsigned_int(dt);
        switch (prim) {
        case TM_P_REDUCE_SUM: r->value[o] += v; r->bits[o] += iv; break;
        case TM_P_REDUCE_PROD: r->value[o] *= v; r->bits[o] *= iv; break;
        case TM_P_REDUCE_MAX:
            if (first || v > r->value[o]) r->value[o] = v;
            if (first || (is_unsigned ? iv > r->bits[o] : sv > sacc)) r->bits[o] = iv;
            break;
        default:
            if (first || v < r->value[o]) r->value[o] = v;
            if (first || (is_unsigned ? iv < r->bits[o] : sv < sacc)) r->bits[o] = iv;
            break;
        }
    }
    (void)is_float;
}

/* Whether output element o of t matches the reference. */
static int matches_reference(const tm_tensor *t, int64_t o, const reference *r, double rel) {
    tm_dtype dt = t->dtype;
    if (tm_dtype_is_float(dt)) {
        double want = as_dtype(r->value[o], dt), got = element(t, o);
        if (isinf(want)) return got == want;
        return fabs(got - want) <= rel * (fabs(want) + r->magnitude[o]) + 1e-12;
    }
    tm_tensor *cell = tm_tensor_alloc(dt, 0, NULL, NULL);
    tm_store_u64(cell->data, dt, 0, r->bits[o]);
    int same = tm_load_u64(cell->data, dt, 0) == tm_load_u64(t->data, dt, (size_t)o);
    tm_tensor_free(cell);
    return same;
}

typedef struct reduce_shape {
    int rank;
    int64_t dims[4];
} reduce_shape;

/* Runs every mask of every shape for one prim and dtype (NaN has its own test). */
static void test_reduce_masks(int prim, tm_dtype dt, double rel) {
    static const reduce_shape shapes[] = {
        {3, {2, 3, 4}}, {4, {2, 1, 5, 3}}, {2, {7, 64}}, {1, {100}}, {0, {0}}, {2, {1, 1}},
        {4, {3, 2, 2, 3}}, {2, {33, 1}}, {2, {3, 1500}},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const reduce_shape *sh = &shapes[s];
        int64_t n = tm_numel(sh->rank, sh->dims);
        double *x = malloc(sizeof(double) * (size_t)n);
        reference r = {malloc(sizeof(double) * (size_t)n), malloc(sizeof(double) * (size_t)n),
                       malloc(sizeof(uint64_t) * (size_t)n), malloc((size_t)n)};
        for (int64_t i = 0; i < n; i++) {
            double v = prim == TM_P_REDUCE_PROD ? uniform(0.5, 1.5) : uniform(-50, 50);
            if (!tm_dtype_is_float(dt)) v = floor(prim == TM_P_REDUCE_PROD ? uniform(-3, 4) : v);
            if (dt == TM_BOOL) v = uniform(0, 1) < 0.5;
            if (tm_dtype_is_unsigned_int(dt) && v < 0) v = -v;
            x[i] = as_dtype(v, dt);
        }
        for (int64_t mask = 0; mask < ((int64_t)1 << sh->rank); mask++) {
            int64_t out_dims[4];
            for (int d = 0; d < sh->rank; d++) out_dims[d] = (mask >> d) & 1 ? 1 : sh->dims[d];
            int64_t out_n = tm_numel(sh->rank, out_dims);
            reference_reduce(prim, dt, sh->rank, sh->dims, mask, x, &r, out_n, out_dims);
            tm_ctx c;
            tm_ctx_init(&c, TM_MODE_EAGER, NULL);
            tm_args a;
            memset(&a, 0, sizeof a);
            a.i[0] = mask;
            tm_val in = tm_val_tensor(&c, tensor_of(dt, sh->rank, sh->dims, x), 0);
            tm_val y = tm_prim(&c, prim, &in, 1, &a);
            CHECK(tm_ctx_ok(&c), "%s %s shape %zu mask %lld: %s", tm_prims[prim].name,
                  tm_dtype_name(dt), s, (long long)mask, c.err.message);
            if (!tm_ctx_ok(&c)) { tm_ctx_destroy(&c); continue; }
            const tm_tensor *t = tm_vdata(&c, y);
            int ok = t->dtype == dt && t->rank == sh->rank;
            for (int d = 0; ok && d < sh->rank; d++) ok = t->dims[d] == out_dims[d];
            int64_t bad = -1;
            for (int64_t o = 0; ok && o < out_n && bad < 0; o++)
                if (!matches_reference(t, o, &r, rel)) bad = o;
            CHECK(ok && bad < 0, "%s %s shape %zu mask %lld: output %lld is %.17g, want %.17g",
                  tm_prims[prim].name, tm_dtype_name(dt), s, (long long)mask, (long long)bad,
                  bad >= 0 ? element(t, bad) : 0.0, bad >= 0 ? r.value[bad] : 0.0);
            tm_ctx_destroy(&c);
        }
        free(x);
        free(r.value);
        free(r.magnitude);
        free(r.bits);
        free(r.seen);
    }
}

static void test_reduce_empty(void) {
    int64_t dims[3] = {2, 0, 3};
    struct { int prim; tm_dtype dt; double want; } cases[] = {
        {TM_P_REDUCE_SUM, TM_FLOAT, 0}, {TM_P_REDUCE_PROD, TM_FLOAT, 1},
        {TM_P_REDUCE_MAX, TM_FLOAT, -INFINITY}, {TM_P_REDUCE_MIN, TM_FLOAT, INFINITY},
        {TM_P_REDUCE_MAX, TM_DOUBLE, -INFINITY}, {TM_P_REDUCE_MIN, TM_FLOAT16, INFINITY},
        {TM_P_REDUCE_MAX, TM_INT32, -2147483648.0}, {TM_P_REDUCE_MIN, TM_INT32, 2147483647.0},
        {TM_P_REDUCE_MAX, TM_INT8, -128}, {TM_P_REDUCE_MIN, TM_INT64, 9223372036854775807.0},
        {TM_P_REDUCE_MAX, TM_INT64, -9223372036854775808.0},
        {TM_P_REDUCE_MAX, TM_UINT8, 0}, {TM_P_REDUCE_MIN, TM_UINT8, 255},
        {TM_P_REDUCE_MIN, TM_UINT64, 18446744073709551615.0}, {TM_P_REDUCE_MIN, TM_INT4, 7},
        {TM_P_REDUCE_SUM, TM_INT64, 0}, {TM_P_REDUCE_PROD, TM_UINT16, 1},
        {TM_P_REDUCE_MIN, TM_BOOL, 1}, {TM_P_REDUCE_MAX, TM_BOOL, 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        tm_ctx c;
        tm_ctx_init(&c, TM_MODE_EAGER, NULL);
        tm_args a;
        memset(&a, 0, sizeof a);
        a.i[0] = 2;  /* axis 1, the empty one */
        tm_val in = tm_val_tensor(&c, tm_tensor_alloc(cases[k].dt, 3, dims, NULL), 0);
        tm_val y = tm_prim(&c, cases[k].prim, &in, 1, &a);
        CHECK(tm_ctx_ok(&c), "empty %s: %s", tm_prims[cases[k].prim].name, c.err.message);
        if (!tm_ctx_ok(&c)) { tm_ctx_destroy(&c); continue; }
        const tm_tensor *t = tm_vdata(&c, y);
        int ok = t->dims[0] == 2 && t->dims[1] == 1 && t->dims[2] == 3;
        for (int i = 0; ok && i < 6; i++) ok = element(t, i) == cases[k].want;
        CHECK(ok, "empty %s %s: got %.17g want %.17g", tm_prims[cases[k].prim].name,
              tm_dtype_name(cases[k].dt), element(t, 0), cases[k].want);
        tm_ctx_destroy(&c);
    }
    /* Reducing a non-empty axis of a tensor that is empty elsewhere gives an empty result. */
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 4;
    tm_val in = tm_val_tensor(&c, tm_tensor_alloc(TM_FLOAT, 3, dims, NULL), 0);
    tm_val y = tm_prim(&c, TM_P_REDUCE_SUM, &in, 1, &a);
    CHECK(tm_ctx_ok(&c) && tm_vdims(&c, y)[1] == 0 && tm_vdims(&c, y)[2] == 1,
          "empty elsewhere: %s", c.err.message);
    tm_ctx_destroy(&c);
}

static void test_reduce_nan_and_wrap(void) {
    /* NaN propagates through max/min on every path (rows, columns, general). */
    int64_t dims[3] = {2, 3, 40};
    double x[240];
    for (int i = 0; i < 240; i++) x[i] = uniform(-1, 1);
    x[37] = NAN;   /* [0, 0, 37] */
    int64_t masks[] = {4, 2, 5, 7, 1};
    for (int p = 0; p < 2; p++) {
        int prim = p ? TM_P_REDUCE_MIN : TM_P_REDUCE_MAX;
        for (size_t m = 0; m < sizeof masks / sizeof masks[0]; m++) {
            for (int dtype_index = 0; dtype_index < 2; dtype_index++) {
                tm_dtype dt = dtype_index ? TM_DOUBLE : TM_FLOAT;
                tm_ctx c;
                tm_ctx_init(&c, TM_MODE_EAGER, NULL);
                tm_args a;
                memset(&a, 0, sizeof a);
                a.i[0] = masks[m];
                tm_val in = tm_val_tensor(&c, tensor_of(dt, 3, dims, x), 0);
                tm_val y = tm_prim(&c, prim, &in, 1, &a);
                const tm_tensor *t = tm_vdata(&c, y);
                /* the output element that input [0, 0, 37] folds into */
                int64_t at = (masks[m] & 4) ? 0 : 37;
                CHECK(tm_ctx_ok(&c) && isnan(element(t, at)), "%s %s mask %lld: NaN lost",
                      tm_prims[prim].name, tm_dtype_name(dt), (long long)masks[m]);
                tm_ctx_destroy(&c);
            }
        }
    }
    /* Integer sums and products wrap in the dtype. */
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    int64_t d1[1] = {3};
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 1;
    double big[3] = {2147483647.0, 1, 1};
    tm_val in = tm_val_tensor(&c, tensor_of(TM_INT32, 1, d1, big), 0);
    tm_val s = tm_prim(&c, TM_P_REDUCE_SUM, &in, 1, &a);
    double bytes[3] = {200, 100, 1};
    tm_val in8 = tm_val_tensor(&c, tensor_of(TM_UINT8, 1, d1, bytes), 0);
    tm_val s8 = tm_prim(&c, TM_P_REDUCE_SUM, &in8, 1, &a);
    tm_val p8 = tm_prim(&c, TM_P_REDUCE_PROD, &in8, 1, &a);
    CHECK(tm_ctx_ok(&c) && element(tm_vdata(&c, s), 0) == -2147483647.0 &&
          element(tm_vdata(&c, s8), 0) == 45 && element(tm_vdata(&c, p8), 0) == 32,
          "integer wrap: %g %g %g", element(tm_vdata(&c, s), 0), element(tm_vdata(&c, s8), 0),
          element(tm_vdata(&c, p8), 0));
    tm_ctx_destroy(&c);
}

/* The f32 sums of a million elements stay within 1e-6 relative of the double sum, on the
 * row path (last axis) and the column path (leading axis). */
static void test_reduce_accuracy(void) {
    enum { N = 1000000 };
    float *data = malloc(sizeof(float) * N);
    for (int kind = 0; kind < 3; kind++) {
        double exact = 0;
        for (int i = 0; i < N; i++) {
            double v = kind == 0 ? uniform(0, 1) : kind == 1 ? uniform(-1, 1.02)
                                                             : uniform(0, 1) * 1e4 + 1e-3;
            data[i] = (float)v;
            exact += data[i];
        }
        int64_t row_dims[2] = {1, N}, col_dims[2] = {N / 4, 4};
        for (int layout = 0; layout < 2; layout++) {
            tm_ctx c;
            tm_ctx_init(&c, TM_MODE_EAGER, NULL);
            const int64_t *dims = layout ? col_dims : row_dims;
            tm_tensor *t = tm_tensor_alloc(TM_FLOAT, 2, dims, NULL);
            memcpy(t->data, data, sizeof(float) * N);
            tm_val in = tm_val_tensor(&c, t, 0);
            tm_args a;
            memset(&a, 0, sizeof a);
            a.i[0] = layout ? 1 : 2;
            tm_val y = tm_prim(&c, TM_P_REDUCE_SUM, &in, 1, &a);
            if (layout) {  /* then the 4 column sums, added in double */
                a.i[0] = 2;
                y = tm_prim(&c, TM_P_REDUCE_SUM, &y, 1, &a);
            }
            double got = tm_ctx_ok(&c) ? element(tm_vdata(&c, y), 0) : NAN;
            CHECK(fabs(got - exact) <= 1e-6 * fabs(exact), "sum of 1e6 (kind %d, %s): %.10g vs "
                  "%.10g (rel %.2g)", kind, layout ? "columns" : "row", got, exact,
                  fabs(got - exact) / fabs(exact));
            tm_ctx_destroy(&c);
        }
    }
    free(data);
}

static void test_reduce_errors(void) {
    int64_t dims[2] = {2, 3};
    double v[6] = {0};
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 4;  /* axis 2 of a rank-2 tensor */
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_val in = tm_val_tensor(&c, tensor_of(TM_FLOAT, 2, dims, v), 0);
    tm_prim(&c, TM_P_REDUCE_SUM, &in, 1, &a);
    expect_failure(&c, TM_ERR_SHAPE, "axis mask 0x4 names axes beyond rank 2", "bad mask");
    tm_ctx_destroy(&c);
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_tensor *s = tm_tensor_alloc(TM_STRING, 2, dims, NULL);
    in = tm_val_tensor(&c, s, 0);
    a.i[0] = 1;
    tm_prim(&c, TM_P_REDUCE_MAX, &in, 1, &a);
    expect_failure(&c, TM_ERR_UNSUPPORTED, "string", "reduce strings");
    tm_ctx_destroy(&c);
    /* Under trace the shape rule alone runs. */
    tm_ctx_init(&c, TM_MODE_TRACE, NULL);
    int64_t d3[3] = {4, 5, 6};
    in = tm_val_symbolic(&c, TM_FLOAT, 3, d3, 0);
    a.i[0] = 5;
    tm_val y = tm_prim(&c, TM_P_REDUCE_SUM, &in, 1, &a);
    CHECK(tm_ctx_ok(&c) && tm_vdims(&c, y)[0] == 1 && tm_vdims(&c, y)[1] == 5 &&
          tm_vdims(&c, y)[2] == 1 && c.n_nodes == 1, "trace reduce: %s", c.err.message);
    tm_ctx_destroy(&c);
}

/* ---- Argmax / argmin --------------------------------------------------------------------- */

static int64_t reference_arg(const double *x, int64_t base, int64_t size, int64_t stride,
                             int is_max, int last) {
    int64_t at = 0;
    for (int64_t t = 0; t < size; t++) {
        double v = x[base + t * stride];
        if (isnan(v)) {  /* numpy: the first NaN (select_last: the last one) */
            at = t;
            if (!last) return t;
            continue;
        }
        double best = x[base + at * stride];
        if (t == 0 || isnan(best)) {
            if (t == 0) at = 0;
            continue;
        }
        if (is_max ? (last ? v >= best : v > best) : (last ? v <= best : v < best)) at = t;
    }
    /* with select_last, a NaN anywhere wins: find the last NaN */
    if (last)
        for (int64_t t = size - 1; t >= 0; t--)
            if (isnan(x[base + t * stride])) return t;
    return at;
}

static void test_argreduce(void) {
    static const tm_dtype dtypes[] = {TM_FLOAT, TM_DOUBLE, TM_INT8, TM_UINT16, TM_INT64,
                                      TM_FLOAT16};
    int64_t dims[3] = {3, 5, 4};
    double x[60];
    for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++) {
        tm_dtype dt = dtypes[k];
        for (int i = 0; i < 60; i++) {
            x[i] = floor(uniform(0, 6));  /* many ties */
            if (tm_dtype_is_float(dt) && i % 17 == 3) x[i] = NAN;
        }
        for (int prim_index = 0; prim_index < 2; prim_index++) {
            int prim = prim_index ? TM_P_ARGMIN : TM_P_ARGMAX;
            for (int axis = -3; axis < 3; axis++) {
                for (int last = 0; last < 2; last++) {
                    tm_ctx c;
                    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
                    tm_args a;
                    memset(&a, 0, sizeof a);
                    a.i[0] = axis;
                    a.i[1] = last;
                    tm_val in = tm_val_tensor(&c, tensor_of(dt, 3, dims, x), 0);
                    tm_val y = tm_prim(&c, prim, &in, 1, &a);
                    CHECK(tm_ctx_ok(&c), "%s: %s", tm_prims[prim].name, c.err.message);
                    if (!tm_ctx_ok(&c)) { tm_ctx_destroy(&c); continue; }
                    const tm_tensor *t = tm_vdata(&c, y);
                    int ax = axis < 0 ? axis + 3 : axis;
                    int64_t outer = 1, inner = 1;
                    for (int d = 0; d < ax; d++) outer *= dims[d];
                    for (int d = ax + 1; d < 3; d++) inner *= dims[d];
                    int ok = t->dtype == TM_INT64 && t->dims[ax] == 1;
                    int64_t bad = -1;
                    for (int64_t o = 0; ok && o < outer; o++)
                        for (int64_t j = 0; j < inner && bad < 0; j++) {
                            int64_t want = reference_arg(x, o * dims[ax] * inner + j, dims[ax],
                                                         inner, prim == TM_P_ARGMAX, last);
                            if (((const int64_t *)t->data)[o * inner + j] != want)
                                bad = o * inner + j;
                        }
                    CHECK(ok && bad < 0, "%s %s axis %d last %d: output %lld", tm_prims[prim].name,
                          tm_dtype_name(dt), axis, last, (long long)bad);
                    tm_ctx_destroy(&c);
                }
            }
        }
    }
    /* A long f32 row through the typed path. */
    {
        enum { N = 1000 };
        double v[N];
        for (int i = 0; i < N; i++) v[i] = uniform(-1, 1);
        v[617] = 5;
        v[618] = 5;
        v[3] = -5;
        int64_t d[2] = {1, N};
        tm_ctx c;
        tm_ctx_init(&c, TM_MODE_EAGER, NULL);
        tm_args a;
        memset(&a, 0, sizeof a);
        a.i[0] = 1;
        tm_val in = tm_val_tensor(&c, tensor_of(TM_FLOAT, 2, d, v), 0);
        tm_val first = tm_prim(&c, TM_P_ARGMAX, &in, 1, &a);
        a.i[1] = 1;
        tm_val lastv = tm_prim(&c, TM_P_ARGMAX, &in, 1, &a);
        tm_val mn = tm_prim(&c, TM_P_ARGMIN, &in, 1, &a);
        CHECK(tm_ctx_ok(&c) && element(tm_vdata(&c, first), 0) == 617 &&
              element(tm_vdata(&c, lastv), 0) == 618 && element(tm_vdata(&c, mn), 0) == 3,
              "long argmax row");
        tm_ctx_destroy(&c);
    }
    /* Errors: axis out of range, an empty axis, rank 0. */
    int64_t empty[2] = {2, 0};
    struct { int rank; const int64_t *dims; int64_t axis; const char *needle; } bad[] = {
        {3, dims, 3, "axis 3 is out of range for rank 3"},
        {3, dims, -4, "axis -4 is out of range"},
        {2, empty, 1, "axis 1 has size 0"},
        {0, dims, 0, "out of range for rank 0"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        tm_ctx c;
        tm_ctx_init(&c, TM_MODE_EAGER, NULL);
        tm_args a;
        memset(&a, 0, sizeof a);
        a.i[0] = bad[k].axis;
        tm_val in = tm_val_tensor(&c, tm_tensor_alloc(TM_FLOAT, bad[k].rank, bad[k].dims, NULL), 0);
        tm_prim(&c, TM_P_ARGMAX, &in, 1, &a);
        expect_failure(&c, TM_ERR_SHAPE, bad[k].needle, "argmax error");
        tm_ctx_destroy(&c);
    }
    /* Empty elsewhere is fine: argmax over axis 0 of (2, 0) is (1, 0). */
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_args a;
    memset(&a, 0, sizeof a);
    tm_val in = tm_val_tensor(&c, tm_tensor_alloc(TM_FLOAT, 2, empty, NULL), 0);
    tm_val y = tm_prim(&c, TM_P_ARGMIN, &in, 1, &a);
    CHECK(tm_ctx_ok(&c) && tm_vdims(&c, y)[0] == 1 && tm_vdims(&c, y)[1] == 0,
          "argmin of empty elsewhere: %s", c.err.message);
    tm_ctx_destroy(&c);
}

/* ---- Cumulative -------------------------------------------------------------------------- */

static void test_cumulative(void) {
    static const tm_dtype dtypes[] = {TM_FLOAT, TM_DOUBLE, TM_INT32, TM_INT64, TM_UINT8,
                                      TM_FLOAT16};
    int64_t dims[3] = {3, 4, 5};
    double x[60];
    for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++) {
        tm_dtype dt = dtypes[k];
        for (int prim_index = 0; prim_index < 2; prim_index++) {
            int prim = prim_index ? TM_P_CUMPROD : TM_P_CUMSUM;
            for (int i = 0; i < 60; i++) {
                x[i] = prim == TM_P_CUMPROD ? floor(uniform(1, 3)) : floor(uniform(-9, 10));
                if (dt == TM_UINT8 && x[i] < 0) x[i] = -x[i];
                if (tm_dtype_is_float(dt)) x[i] = as_dtype(x[i] + 0.25, dt);
            }
            for (int axis = -3; axis < 3; axis++) {
                for (int flags = 0; flags < 4; flags++) {
                    int exclusive = flags & 1, reverse = (flags >> 1) & 1;
                    tm_ctx c;
                    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
                    tm_args a;
                    memset(&a, 0, sizeof a);
                    a.i[0] = axis;
                    a.i[1] = exclusive;
                    a.i[2] = reverse;
                    tm_val in = tm_val_tensor(&c, tensor_of(dt, 3, dims, x), 0);
                    tm_val y = tm_prim(&c, prim, &in, 1, &a);
                    CHECK(tm_ctx_ok(&c), "%s: %s", tm_prims[prim].name, c.err.message);
                    if (!tm_ctx_ok(&c)) { tm_ctx_destroy(&c); continue; }
                    const tm_tensor *t = tm_vdata(&c, y);
                    int ax = axis < 0 ? axis + 3 : axis;
                    int64_t coord[3];
                    int64_t bad = -1;
                    for (int64_t i = 0; i < 60 && bad < 0; i++) {
                        coords_of(3, dims, i, coord);
                        double acc = prim == TM_P_CUMSUM ? 0 : 1;
                        for (int64_t s = 0; s < dims[ax]; s++) {
                            int include = reverse ? (exclusive ? s > coord[ax] : s >= coord[ax])
                                                  : (exclusive ? s < coord[ax] : s <= coord[ax]);
                            if (!include) continue;
                            int64_t src[3] = {coord[0], coord[1], coord[2]};
                            src[ax] = s;
                            double v = x[(src[0] * dims[1] + src[1]) * dims[2] + src[2]];
                            acc = prim == TM_P_CUMSUM ? acc + v : acc * v;
                        }
                        if (!same_value(element(t, i), as_dtype(acc, dt),
                                        dt == TM_FLOAT16 ? 1e-3 : 1e-6))
                            bad = i;
                    }
                    CHECK(bad < 0 && t->dtype == dt, "%s %s axis %d excl %d rev %d: element %lld "
                          "is %g", tm_prims[prim].name, tm_dtype_name(dt), axis, exclusive,
                          reverse, (long long)bad, bad >= 0 ? element(t, bad) : 0.0);
                    tm_ctx_destroy(&c);
                }
            }
        }
    }
    /* Errors. */
    int64_t d1[1] = {3};
    double v[3] = {1, 1, 1};
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 1;
    tm_val in = tm_val_tensor(&c, tensor_of(TM_FLOAT, 1, d1, v), 0);
    tm_prim(&c, TM_P_CUMSUM, &in, 1, &a);
    expect_failure(&c, TM_ERR_SHAPE, "cumsum: axis 1 is out of range for rank 1", "cumsum axis");
    tm_ctx_destroy(&c);
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    a.i[0] = 0;
    in = tm_val_tensor(&c, tensor_of(TM_BOOL, 1, d1, v), 0);
    tm_prim(&c, TM_P_CUMSUM, &in, 1, &a);
    expect_failure(&c, TM_ERR_DTYPE, "cumsum does not take bool", "cumsum bool");
    tm_ctx_destroy(&c);
    /* Empty input. */
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    int64_t empty[2] = {0, 4};
    in = tm_val_tensor(&c, tm_tensor_alloc(TM_INT32, 2, empty, NULL), 0);
    a.i[0] = 1;
    tm_val y = tm_prim(&c, TM_P_CUMPROD, &in, 1, &a);
    CHECK(tm_ctx_ok(&c) && tm_vdims(&c, y)[0] == 0, "empty cumprod: %s", c.err.message);
    tm_ctx_destroy(&c);
}

/* ---- Speed (reported, not asserted) ----------------------------------------------------- */

static double seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void report_speed(void) {
    int64_t dims[2] = {1024, 768};
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_tensor *t = tm_tensor_alloc(TM_FLOAT, 2, dims, NULL);
    float *p = t->data;
    for (int64_t i = 0; i < dims[0] * dims[1]; i++) p[i] = (float)uniform(-1, 1);
    tm_val in = tm_val_tensor(&c, t, 0);
    tm_args a;
    memset(&a, 0, sizeof a);
    double rates[2];
    for (int k = 0; k < 2; k++) {
        a.i[0] = k ? 1 : 2;
        double t0 = seconds();
        for (int r = 0; r < 20; r++) tm_val_release(&c, tm_prim(&c, TM_P_REDUCE_SUM, &in, 1, &a));
        rates[k] = (double)(dims[0] * dims[1]) * 20 / (seconds() - t0) * 1e-9;
    }
    printf("speed: f32 sum over rows %.2f Gelem/s, over columns %.2f Gelem/s\n", rates[0],
           rates[1]);
    tm_ctx_destroy(&c);
}

int main(void) {
    static const tm_dtype dtypes[] = {TM_FLOAT, TM_DOUBLE, TM_FLOAT16, TM_INT32, TM_INT64,
                                      TM_UINT8, TM_INT8, TM_BOOL};
    static const int prims[] = {TM_P_REDUCE_SUM, TM_P_REDUCE_PROD, TM_P_REDUCE_MAX,
                                TM_P_REDUCE_MIN};
    for (size_t d = 0; d < sizeof dtypes / sizeof dtypes[0]; d++)
        for (size_t p = 0; p < sizeof prims / sizeof prims[0]; p++)
            test_reduce_masks(prims[p], dtypes[d],
                              dtypes[d] == TM_FLOAT16 ? 2e-3 : dtypes[d] == TM_FLOAT ? 2e-6
                                                                                       : 1e-12);
    test_reduce_empty();
    test_reduce_nan_and_wrap();
    test_reduce_accuracy();
    test_reduce_errors();
    test_argreduce();
    test_cumulative();
    report_speed();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
