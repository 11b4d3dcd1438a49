/* Tests of the movement primitives (src/core/prims/movement.c) through an eager context:
 * every output is checked element by element against an index mapping computed here
 * independently, on dtypes of every size, strings and sub-byte types included (INDEX_ADD,
 * which only adds floats, on the float dtypes and on threads).
 * Not a test of the ONNX lowerings that call these primitives. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../src/core/ctx.h"
#include "../src/backends/cpu/pool.h"

#include "check.h"

/* Every element size the kernels treat differently: 1, 2, 4, 8, 16 bytes, strings. */
static const tm_dtype all_dtypes[] = {TM_FLOAT, TM_UINT8, TM_INT16, TM_DOUBLE, TM_STRING,
                                      TM_INT4, TM_BOOL, TM_COMPLEX128, TM_FLOAT16, TM_INT64};
#define N_DTYPES ((int)(sizeof all_dtypes / sizeof all_dtypes[0]))

/* ---- Tensors and index arithmetic -------------------------------------------------------- */

static uint32_t mix(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    return x ^ (x >> 16);
}

/* A tensor whose elements are hard to mistake for one another: hashed bytes, or distinct
 * strings. `salt` tells tensors apart. */
static tm_tensor *patterned(tm_dtype dt, int rank, const int64_t *dims, uint32_t salt) {
    tm_tensor *t = tm_tensor_alloc(dt, rank, dims, NULL);
    if (!t) return NULL;
    int64_t n = tm_numel(rank, dims);
    if (dt == TM_STRING) {
        for (int64_t i = 0; i < n; i++) {
            char text[48];
            snprintf(text, sizeof text, "s%u-%lld", salt, (long long)i);
            if (i % 7 != 3) tm_tensor_set_string(t, i, text); /* some stay NULL (read "") */
        }
        return t;
    }
    unsigned char *b = t->data;
    for (size_t k = 0; k < t->nbytes; k++)
        b[k] = (unsigned char)mix((uint32_t)k * 2654435761U + salt);
    return t;
}

static tm_tensor *indices_of(tm_dtype dt, int rank, const int64_t *dims, const int64_t *v) {
    tm_tensor *t = tm_tensor_alloc(dt, rank, dims, NULL);
    int64_t n = tm_numel(rank, dims);
    for (int64_t i = 0; i < n; i++) {
        if (dt == TM_INT32) ((int32_t *)t->data)[i] = (int32_t)v[i];
        else ((int64_t *)t->data)[i] = v[i];
    }
    return t;
}

static void unravel(int64_t i, int rank, const int64_t *dims, int64_t *idx) {
    for (int d = rank - 1; d >= 0; d--) {
        idx[d] = dims[d] ? i % dims[d] : 0;
        i = dims[d] ? i / dims[d] : 0;
    }
}

static int64_t ravel(int rank, const int64_t *dims, const int64_t *idx) {
    int64_t i = 0;
    for (int d = 0; d < rank; d++) i = i * dims[d] + idx[d];
    return i;
}

static const char *string_at(const tm_tensor *t, int64_t i) {
    const char *s = ((char *const *)t->data)[i];
    return s ? s : "";
}

static int same_element(const tm_tensor *a, int64_t i, const tm_tensor *b, int64_t j) {
    if (a->dtype != b->dtype) return 0;
    if (a->dtype == TM_STRING) return !strcmp(string_at(a, i), string_at(b, j));
    size_t size = tm_dtype_elem_size(a->dtype);
    return !memcmp((const char *)a->data + (size_t)i * size,
                   (const char *)b->data + (size_t)j * size, size);
}

/* Output element o must equal input element source[o]; source[o] < 0 marks an element
 * that must equal `constant` (element 0 of that tensor). */
static void check_map(const char *what, const tm_tensor *in, const tm_tensor *out,
                      const int64_t *source, int64_t n, const tm_tensor *constant) {
    int64_t bad = 0;
    for (int64_t o = 0; o < n; o++) {
        int ok = source[o] >= 0 ? same_element(out, o, in, source[o])
                                : same_element(out, o, constant, 0);
        if (!ok && bad++ == 0)
            printf("  %s: first mismatch at output %lld (source %lld)\n", what, (long long)o,
                   (long long)source[o]);
    }
    CHECK(bad == 0, "%s: %lld of %lld elements wrong", what, (long long)bad, (long long)n);
}

static void check_dims(const char *what, const tm_tensor *t, int rank, const int64_t *dims) {
    int ok = t && t->rank == rank;
    for (int d = 0; ok && d < rank; d++) ok = t->dims[d] == dims[d];
    CHECK(ok, "%s: wrong output dims", what);
}

/* Runs one primitive in an eager context; NULL on failure. With borrow == 0 the context
 * takes the inputs and frees them. */
static const tm_tensor *run_with(tm_ctx *c, int prim, tm_tensor *const *ins, int nin,
                                 const tm_args *a, int borrow) {
    tm_val v[16];
    for (int i = 0; i < nin; i++) v[i] = tm_val_tensor(c, ins[i], borrow);
    tm_val out = tm_prim(c, prim, v, nin, a);
    return out == TM_NONE ? NULL : tm_vdata(c, out);
}

static const tm_tensor *run(tm_ctx *c, int prim, tm_tensor *const *ins, int nin,
                            const tm_args *a) {
    return run_with(c, prim, ins, nin, a, 0);
}

/* The call must fail with `code` and a message containing `needle`. The inputs stay the
 * caller's. */
static void expect_error(const char *what, int prim, tm_tensor *const *ins, int nin,
                         const tm_args *a, tm_status code, const char *needle) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    const tm_tensor *out = run_with(&c, prim, ins, nin, a, 1);
    CHECK(!out && c.status == code && strstr(c.err.message, needle),
          "%s: expected status %d with '%s', got %d: '%s'", what, code, needle, c.status,
          c.err.message);
    tm_ctx_destroy(&c);
}

static tm_args args_of(const int64_t *values, int n) {
    tm_args a;
    memset(&a, 0, sizeof a);
    for (int i = 0; i < n; i++) a.i[i] = values[i];
    return a;
}

/* ---- RESHAPE and COPY ------------------------------------------------------------------- */

static void test_reshape(void) {
    for (int t = 0; t < N_DTYPES; t++) {
        tm_dtype dt = all_dtypes[t];
        tm_ctx c;
        tm_ctx_init(&c, TM_MODE_EAGER, NULL);
        int64_t dims[3] = {2, 3, 4}, source[24];
        tm_tensor *x = patterned(dt, 3, dims, 1);
        tm_args a = args_of((int64_t[]){2, 4, 6}, 3);
        const tm_tensor *y = run(&c, TM_P_RESHAPE, &x, 1, &a);
        char what[64];
        snprintf(what, sizeof what, "reshape %s", tm_dtype_name(dt));
        check_dims(what, y, 2, (int64_t[]){4, 6});
        for (int i = 0; i < 24; i++) source[i] = i;
        if (y) check_map(what, x, y, source, 24, NULL);
        if (y && dt == TM_STRING)
            CHECK(((char **)y->data)[0] != ((char **)x->data)[0], "reshape: strings are copies");
        tm_ctx_destroy(&c);
    }
    /* rank 0 to (1, 1), and a view: the kernel leaves shared memory alone. */
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_tensor *x = tensor_of(TM_FLOAT, 0, NULL, (double[]){2.5});
    tm_args a = args_of((int64_t[]){2, 1, 1}, 3);
    const tm_tensor *y = run(&c, TM_P_RESHAPE, &x, 1, &a);
    CHECK(y && y->rank == 2 && ((float *)y->data)[0] == 2.5f, "reshape rank 0 to (1, 1)");
    tm_ctx_destroy(&c);

    int64_t dims[2] = {3, 4};
    tm_tensor *shared = patterned(TM_STRING, 2, dims, 2);
    tm_tensor *view = tm_tensor_borrow(TM_STRING, 1, (int64_t[]){12}, shared->data);
    char *first = ((char **)shared->data)[0];
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_args va = args_of((int64_t[]){1, 12}, 2);
    const tm_tensor *in[1] = {shared};
    tm_tensor *out[1] = {view};
    tm_kcall k = {TM_P_RESHAPE, &va, in, 1, out, 1, NULL, 0, &err, 1, NULL, 0};
    tm_status s = tm_prims[TM_P_RESHAPE].kernel(&k);
    CHECK(s == TM_OK && ((char **)shared->data)[0] == first, "reshape view is left alone");
    tm_tensor_free(view);
    tm_tensor_free(shared);

    x = patterned(TM_FLOAT, 2, dims, 3);
    a = args_of((int64_t[]){2, 5, 2}, 3);
    expect_error("reshape count", TM_P_RESHAPE, &x, 1, &a, TM_ERR_SHAPE, "(3, 4) into (5, 2)");
    tm_tensor_free(x);
}

static void test_copy(void) {
    for (int t = 0; t < N_DTYPES; t++) {
        tm_ctx c;
        tm_ctx_init(&c, TM_MODE_EAGER, NULL);
        int64_t dims[2] = {5, 3}, source[15];
        tm_tensor *x = patterned(all_dtypes[t], 2, dims, 4);
        const tm_tensor *y = run(&c, TM_P_COPY, &x, 1, NULL);
        for (int i = 0; i < 15; i++) source[i] = i;
        check_dims("copy", y, 2, dims);
        if (y) check_map("copy", x, y, source, 15, NULL);
        tm_ctx_destroy(&c);
    }
}

/* ---- TRANSPOSE -------------------------------------------------------------------------- */

typedef struct transpose_case {
    int rank;
    int64_t dims[6];
    int64_t perm[6];
} transpose_case;

static const transpose_case transpose_cases[] = {
    {2, {70, 45}, {1, 0}},                 /* tiles with ragged edges */
    {2, {136, 64}, {1, 0}},                /* only full 8 x 8 tiles (the vector path) */
    {3, {3, 33, 40}, {0, 2, 1}},           /* batched last-two swap */
    {4, {2, 3, 4, 5}, {0, 2, 1, 3}},       /* keeps the last axis: row copies */
    {4, {2, 3, 4, 5}, {3, 1, 0, 2}},       /* general */
    {5, {2, 1, 4, 1, 3}, {4, 3, 2, 1, 0}}, /* size-1 axes dropped */
    {5, {2, 3, 4, 5, 6}, {0, 3, 4, 1, 2}}, /* merges into a batched 2-D swap */
    {3, {4, 5, 6}, {1, 2, 0}},
    {3, {4, 5, 6}, {2, 0, 1}},
    {1, {7}, {0}},
    {0, {0}, {0}},
    {3, {2, 0, 3}, {2, 0, 1}},             /* empty */
    {3, {1, 6, 1}, {2, 1, 0}},
};

static void test_transpose(void) {
    int n_cases = (int)(sizeof transpose_cases / sizeof transpose_cases[0]);
    for (int t = 0; t < N_DTYPES; t++) {
        for (int ci = 0; ci < n_cases; ci++) {
            const transpose_case *tc = &transpose_cases[ci];
            tm_ctx c;
            tm_ctx_init(&c, TM_MODE_EAGER, NULL);
            tm_tensor *x = patterned(all_dtypes[t], tc->rank, tc->dims, (uint32_t)ci);
            tm_args a = args_of(tc->perm, tc->rank);
            const tm_tensor *y = run(&c, TM_P_TRANSPOSE, &x, 1, &a);
            int64_t out_dims[6], n = tm_numel(tc->rank, tc->dims);
            for (int d = 0; d < tc->rank; d++) out_dims[d] = tc->dims[tc->perm[d]];
            char what[96];
            snprintf(what, sizeof what, "transpose %s case %d", tm_dtype_name(all_dtypes[t]), ci);
            check_dims(what, y, tc->rank, out_dims);
            int64_t *source = malloc((size_t)(n ? n : 1) * sizeof *source);
            for (int64_t o = 0; o < n; o++) {
                int64_t oi[6], ii[6];
                unravel(o, tc->rank, out_dims, oi);
                for (int d = 0; d < tc->rank; d++) ii[tc->perm[d]] = oi[d];
                source[o] = ravel(tc->rank, tc->dims, ii);
            }
            if (y) check_map(what, x, y, source, n, NULL);
            free(source);
            tm_ctx_destroy(&c);
        }
    }
    int64_t dims[3] = {2, 3, 4};
    tm_tensor *x = patterned(TM_FLOAT, 3, dims, 0);
    tm_args a = args_of((int64_t[]){0, 2, 2}, 3);
    expect_error("transpose perm", TM_P_TRANSPOSE, &x, 1, &a, TM_ERR_SHAPE,
                 "not a permutation");
    tm_tensor_free(x);
}

/* ---- SLICE ------------------------------------------------------------------------------ */

typedef struct slice_case {
    int rank;
    int64_t dims[4];
    int64_t spec[12]; /* start, step, count per axis */
} slice_case;

static const slice_case slice_cases[] = {
    {3, {4, 5, 6}, {0, 1, 4, 1, 2, 2, 0, 1, 6}},
    {3, {4, 5, 6}, {3, -2, 2, 0, 1, 5, 5, -1, 6}},
    {3, {4, 5, 6}, {1, 1, 2, 0, 1, 5, 0, 1, 6}},   /* one contiguous run per row */
    {3, {4, 5, 6}, {0, 1, 4, 4, -1, 5, 1, 3, 2}},
    {3, {4, 5, 6}, {0, 1, 4, 0, 1, 0, 0, 1, 6}},   /* count 0 */
    {3, {4, 5, 6}, {2, -1, 3, 1, 3, 2, 0, 1, 6}},  /* strided blocks */
    {2, {9, 1}, {8, -3, 3, 0, 1, 1}},
    {1, {10}, {9, -1, 10}},
    {0, {0}, {0}},
};

static void test_slice(void) {
    int n_cases = (int)(sizeof slice_cases / sizeof slice_cases[0]);
    for (int t = 0; t < N_DTYPES; t++) {
        for (int ci = 0; ci < n_cases; ci++) {
            const slice_case *sc = &slice_cases[ci];
            tm_ctx c;
            tm_ctx_init(&c, TM_MODE_EAGER, NULL);
            tm_tensor *x = patterned(all_dtypes[t], sc->rank, sc->dims, (uint32_t)ci + 10);
            tm_args a = args_of(sc->spec, 3 * sc->rank);
            const tm_tensor *y = run(&c, TM_P_SLICE, &x, 1, &a);
            int64_t out_dims[4];
            for (int d = 0; d < sc->rank; d++) out_dims[d] = sc->spec[3 * d + 2];
            int64_t n = tm_numel(sc->rank, out_dims), source[128];
            char what[96];
            snprintf(what, sizeof what, "slice %s case %d", tm_dtype_name(all_dtypes[t]), ci);
            check_dims(what, y, sc->rank, out_dims);
            for (int64_t o = 0; o < n; o++) {
                int64_t oi[4], ii[4];
                unravel(o, sc->rank, out_dims, oi);
                for (int d = 0; d < sc->rank; d++)
                    ii[d] = sc->spec[3 * d] + oi[d] * sc->spec[3 * d + 1];
                source[o] = ravel(sc->rank, sc->dims, ii);
            }
            if (y) check_map(what, x, y, source, n, NULL);
            tm_ctx_destroy(&c);
        }
    }
    int64_t dims[2] = {4, 5};
    tm_tensor *x = patterned(TM_FLOAT, 2, dims, 0);
    tm_args a = args_of((int64_t[]){0, 1, 4, 3, 1, 3}, 6);
    expect_error("slice past the end", TM_P_SLICE, &x, 1, &a, TM_ERR_SHAPE,
                 "axis 1 of size 5 cannot take start 3, step 1, count 3");
    a = args_of((int64_t[]){0, 0, 1, 0, 1, 1}, 6);
    expect_error("slice step 0", TM_P_SLICE, &x, 1, &a, TM_ERR_SHAPE, "step 0");
    a = args_of((int64_t[]){1, -2, 2, 0, 1, 1}, 6);
    expect_error("slice before the start", TM_P_SLICE, &x, 1, &a, TM_ERR_SHAPE, "step -2");
    tm_tensor_free(x);
}

/* ---- PAD -------------------------------------------------------------------------------- */

/* numpy.pad semantics after cropping the negative pads, written as bouncing. */
static int64_t ref_pad_source(int mode, int64_t size, int64_t begin, int64_t end, int64_t o) {
    int64_t low = begin < 0 ? -begin : 0, high = end < 0 ? -end : 0;
    int64_t n = size - low - high, q = o - (begin > 0 ? begin : 0);
    if (q >= 0 && q < n) return low + q;
    if (mode == 0) return -1;
    if (mode == 2) return low + (q < 0 ? 0 : n - 1);
    if (mode == 3) return low + ((q % n) + n) % n;
    while (n > 1 && (q < 0 || q >= n)) q = q < 0 ? -q : 2 * (n - 1) - q;
    return low + (n == 1 ? 0 : q);
}

typedef struct pad_case {
    int rank;
    int64_t dims[3];
    int64_t begin[3], end[3];
} pad_case;

static const pad_case pad_cases[] = {
    {2, {3, 4}, {1, 2}, {2, 1}},
    {2, {3, 4}, {0, 2}, {0, 0}},
    {2, {3, 4}, {-1, 2}, {2, -2}},    /* crop, then pad what is left */
    {1, {3}, {5}, {7}},               /* pads wider than the axis */
    {3, {2, 3, 4}, {1, 0, 3}, {0, 2, 1}},
    {3, {2, 3, 4}, {0, 0, -4}, {0, 0, 0}}, /* crop an axis to nothing */
    {2, {1, 5}, {2, 1}, {1, 1}},
    {0, {0}, {0}, {0}},
};

static void check_pad(tm_dtype dt, int mode, int ci, const pad_case *pc) {
    if (mode != 0 && ci == 5) return; /* nothing left to reflect */
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_tensor *x = patterned(dt, pc->rank, pc->dims, (uint32_t)ci + 20);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = mode;
    a.f[0] = dt == TM_BOOL ? 1 : 3;
    for (int d = 0; d < pc->rank; d++) {
        a.i[1 + d] = pc->begin[d];
        a.i[1 + pc->rank + d] = pc->end[d];
    }
    const tm_tensor *y = run(&c, TM_P_PAD, &x, 1, &a);
    int64_t out_dims[3];
    for (int d = 0; d < pc->rank; d++) out_dims[d] = pc->dims[d] + pc->begin[d] + pc->end[d];
    int64_t n = tm_numel(pc->rank, out_dims);
    int64_t *source = malloc((size_t)(n ? n : 1) * sizeof *source);
    for (int64_t o = 0; o < n; o++) {
        int64_t oi[3], ii[3];
        unravel(o, pc->rank, out_dims, oi);
        source[o] = 0;
        for (int d = 0; d < pc->rank; d++) {
            ii[d] = ref_pad_source(mode, pc->dims[d], pc->begin[d], pc->end[d], oi[d]);
            if (ii[d] < 0) source[o] = -1;
        }
        if (source[o] == 0) source[o] = ravel(pc->rank, pc->dims, ii);
    }
    tm_tensor *constant = tm_tensor_alloc(dt, 0, NULL, NULL);
    if (dt == TM_COMPLEX128) ((double *)constant->data)[0] = 3;
    else if (dt == TM_INT4) ((int8_t *)constant->data)[0] = 3;
    else if (dt != TM_STRING) tm_store_f64(constant->data, dt, 0, a.f[0]);
    char what[96];
    snprintf(what, sizeof what, "pad %s mode %d case %d", tm_dtype_name(dt), mode, ci);
    check_dims(what, y, pc->rank, out_dims);
    if (y) check_map(what, x, y, source, n, constant);
    tm_tensor_free(constant);
    free(source);
    tm_ctx_destroy(&c);
}

static void test_pad(void) {
    int n_cases = (int)(sizeof pad_cases / sizeof pad_cases[0]);
    for (int t = 0; t < N_DTYPES; t++)
        for (int mode = 0; mode < 4; mode++)
            for (int ci = 0; ci < n_cases; ci++) check_pad(all_dtypes[t], mode, ci, &pad_cases[ci]);

    /* The spec's reflect example, in values. */
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_tensor *x = tensor_of(TM_FLOAT, 2, (int64_t[]){3, 2},
                               (double[]){1.0, 1.2, 2.3, 3.4, 4.5, 5.7});
    tm_args a = args_of((int64_t[]){1, 0, 2, 0, 0}, 5);
    const tm_tensor *y = run(&c, TM_P_PAD, &x, 1, &a);
    const float want[12] = {1.0f, 1.2f, 1.0f, 1.2f, 2.3f, 3.4f, 2.3f, 3.4f,
                            4.5f, 5.7f, 4.5f, 5.7f};
    CHECK(y && y->dims[1] == 4 && !memcmp(y->data, want, sizeof want), "pad: spec reflect");
    tm_ctx_destroy(&c);

    int64_t dims[2] = {3, 4};
    x = patterned(TM_FLOAT, 2, dims, 0);
    a = args_of((int64_t[]){0, 0, -3, 0, -2}, 5);
    expect_error("pad crop", TM_P_PAD, &x, 1, &a, TM_ERR_SHAPE, "crop more than axis 1");
    a = args_of((int64_t[]){1, 0, -4, 0, 1}, 5);
    expect_error("pad reflect empty", TM_P_PAD, &x, 1, &a, TM_ERR_SHAPE, "empty");
    a = args_of((int64_t[]){7, 0, 0, 0, 0}, 5);
    expect_error("pad mode", TM_P_PAD, &x, 1, &a, TM_ERR_UNSUPPORTED, "unknown mode 7");
    tm_tensor_free(x);
}

/* ---- CONCAT ----------------------------------------------------------------------------- */

static void check_concat(tm_dtype dt, int rank, const int64_t (*dims)[3], int n_inputs,
                         int64_t axis_arg) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_tensor *x[4];
    for (int i = 0; i < n_inputs; i++) x[i] = patterned(dt, rank, dims[i], (uint32_t)i + 30);
    tm_args a = args_of(&axis_arg, 1);
    const tm_tensor *y = run(&c, TM_P_CONCAT, x, n_inputs, &a);
    int axis = (int)(axis_arg < 0 ? axis_arg + rank : axis_arg);
    int64_t out_dims[3];
    memcpy(out_dims, dims[0], sizeof out_dims);
    out_dims[axis] = 0;
    for (int i = 0; i < n_inputs; i++) out_dims[axis] += dims[i][axis];
    char what[96];
    snprintf(what, sizeof what, "concat %s axis %lld", tm_dtype_name(dt), (long long)axis_arg);
    check_dims(what, y, rank, out_dims);
    int64_t n = tm_numel(rank, out_dims), bad = 0;
    for (int64_t o = 0; y && o < n; o++) {
        int64_t oi[3];
        unravel(o, rank, out_dims, oi);
        int i = 0;
        while (oi[axis] >= dims[i][axis]) oi[axis] -= dims[i++][axis];
        if (!same_element(y, o, x[i], ravel(rank, dims[i], oi))) bad++;
    }
    CHECK(bad == 0, "%s: %lld elements wrong", what, (long long)bad);
    tm_ctx_destroy(&c);
}

static void test_concat(void) {
    const int64_t three[3][3] = {{2, 3, 4}, {2, 1, 4}, {2, 5, 4}};
    const int64_t first[3][3] = {{1, 3, 4}, {0, 3, 4}, {3, 3, 4}};
    const int64_t last[3][3] = {{2, 3, 1}, {2, 3, 2}, {2, 3, 0}};
    const int64_t vectors[3][3] = {{0}, {5}, {2}};
    for (int t = 0; t < N_DTYPES; t++) {
        check_concat(all_dtypes[t], 3, three, 3, 1);
        check_concat(all_dtypes[t], 3, first, 3, 0);
        check_concat(all_dtypes[t], 3, last, 3, -1);
        check_concat(all_dtypes[t], 1, vectors, 3, 0);
        check_concat(all_dtypes[t], 3, three, 1, 1);
    }
    int64_t d1[2] = {2, 3}, d2[2] = {3, 3};
    tm_tensor *x[2] = {patterned(TM_FLOAT, 2, d1, 0), patterned(TM_FLOAT, 2, d2, 1)};
    tm_args a = args_of((int64_t[]){1}, 1);
    expect_error("concat dims", TM_P_CONCAT, x, 2, &a, TM_ERR_SHAPE,
                 "input 1 has dims (3, 3), input 0 has (2, 3)");
    tm_tensor_free(x[1]);
    x[1] = patterned(TM_INT32, 2, d1, 1);
    expect_error("concat dtype", TM_P_CONCAT, x, 2, &a, TM_ERR_DTYPE, "input 1 is int32");
    a = args_of((int64_t[]){2}, 1);
    expect_error("concat axis", TM_P_CONCAT, x, 2, &a, TM_ERR_SHAPE, "axis 2");
    tm_tensor_free(x[0]);
    tm_tensor_free(x[1]);

    /* Big enough to be split over threads (a decode step's KV-cache concat: past and one
     * new step along axis 2), with chunks not a multiple of a 64-byte line and an empty
     * input: the same bytes as on one thread. */
    tm_pool *pool = tm_pool_create(3);
    const int64_t kv[3][4] = {{3, 4, 701, 17}, {3, 4, 0, 17}, {3, 4, 2, 17}};
    const tm_dtype kinds[2] = {TM_FLOAT, TM_UINT16};
    for (int t = 0; t < 2; t++) {
        const tm_tensor *ys[2] = {NULL, NULL};
        tm_ctx cs[2];
        for (int p = 0; p < 2; p++) {
            tm_ctx_init(&cs[p], TM_MODE_EAGER, NULL);
            cs[p].pool = p ? pool : NULL;
            tm_tensor *in[3];
            for (int i = 0; i < 3; i++) in[i] = patterned(kinds[t], 4, kv[i], (uint32_t)i + 7);
            a = args_of((int64_t[]){2}, 1);
            ys[p] = run(&cs[p], TM_P_CONCAT, in, 3, &a);
        }
        check_dims("concat on 3 threads", ys[1], 4, (int64_t[]){3, 4, 703, 17});
        CHECK(ys[0] && ys[1] && ys[0]->nbytes == ys[1]->nbytes &&
              !memcmp(ys[0]->data, ys[1]->data, ys[0]->nbytes), "concat %s on 3 threads",
              tm_dtype_name(kinds[t]));
        for (int p = 0; p < 2; p++) tm_ctx_destroy(&cs[p]);
    }
    tm_pool_free(pool);
}

/* ---- EXPAND ----------------------------------------------------------------------------- */

typedef struct expand_case {
    int rank;
    int64_t from[4], to[4];
} expand_case;

static const expand_case expand_cases[] = {
    {2, {3, 1}, {3, 4}},
    {2, {1, 4}, {3, 4}},
    {4, {2, 1, 3, 1}, {2, 5, 3, 4}},
    {3, {1, 1, 1}, {2, 3, 2}},
    {3, {1, 6, 1}, {1, 6, 1}},
    {2, {1, 3}, {0, 3}},
    {0, {0}, {0}},
};

static void test_expand(void) {
    int n_cases = (int)(sizeof expand_cases / sizeof expand_cases[0]);
    for (int t = 0; t < N_DTYPES; t++) {
        for (int ci = 0; ci < n_cases; ci++) {
            const expand_case *ec = &expand_cases[ci];
            tm_ctx c;
            tm_ctx_init(&c, TM_MODE_EAGER, NULL);
            tm_tensor *x = patterned(all_dtypes[t], ec->rank, ec->from, (uint32_t)ci + 40);
            tm_args a;
            memset(&a, 0, sizeof a);
            a.i[0] = ec->rank;
            for (int d = 0; d < ec->rank; d++) a.i[1 + d] = ec->to[d];
            const tm_tensor *y = run(&c, TM_P_EXPAND, &x, 1, &a);
            int64_t n = tm_numel(ec->rank, ec->to), source[128];
            for (int64_t o = 0; o < n; o++) {
                int64_t oi[4];
                unravel(o, ec->rank, ec->to, oi);
                for (int d = 0; d < ec->rank; d++) if (ec->from[d] == 1) oi[d] = 0;
                source[o] = ravel(ec->rank, ec->from, oi);
            }
            char what[96];
            snprintf(what, sizeof what, "expand %s case %d", tm_dtype_name(all_dtypes[t]), ci);
            check_dims(what, y, ec->rank, ec->to);
            if (y) check_map(what, x, y, source, n, NULL);
            tm_ctx_destroy(&c);
        }
    }
    int64_t dims[2] = {2, 3};
    tm_tensor *x = patterned(TM_FLOAT, 2, dims, 0);
    tm_args a = args_of((int64_t[]){2, 4, 3}, 3);
    expect_error("expand dims", TM_P_EXPAND, &x, 1, &a, TM_ERR_SHAPE, "expand (2, 3) to (4, 3)");
    a = args_of((int64_t[]){3, 1, 2, 3}, 4);
    expect_error("expand rank", TM_P_EXPAND, &x, 1, &a, TM_ERR_SHAPE, "target rank 3");
    tm_tensor_free(x);
}

/* ---- GATHER ----------------------------------------------------------------------------- */

static void check_gather(tm_dtype dt, tm_dtype index_dt, int data_rank,
                         const int64_t *data_dims, int index_rank, const int64_t *index_dims,
                         const int64_t *index_values, int64_t axis_arg) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_tensor *in[2] = {patterned(dt, data_rank, data_dims, 50),
                        indices_of(index_dt, index_rank, index_dims, index_values)};
    tm_args a = args_of(&axis_arg, 1);
    const tm_tensor *y = run(&c, TM_P_GATHER, in, 2, &a);
    int axis = (int)(axis_arg < 0 ? axis_arg + data_rank : axis_arg);
    int rank = data_rank - 1 + index_rank;
    int64_t out_dims[8];
    int r = 0;
    for (int d = 0; d < axis; d++) out_dims[r++] = data_dims[d];
    for (int d = 0; d < index_rank; d++) out_dims[r++] = index_dims[d];
    for (int d = axis + 1; d < data_rank; d++) out_dims[r++] = data_dims[d];
    int64_t n = tm_numel(rank, out_dims);
    int64_t *source = malloc((size_t)(n ? n : 1) * sizeof *source);
    for (int64_t o = 0; o < n; o++) {
        int64_t oi[8], di[8], ii[8];
        unravel(o, rank, out_dims, oi);
        for (int d = 0; d < axis; d++) di[d] = oi[d];
        for (int d = 0; d < index_rank; d++) ii[d] = oi[axis + d];
        int64_t v = index_values[ravel(index_rank, index_dims, ii)];
        di[axis] = v < 0 ? v + data_dims[axis] : v;
        for (int d = axis + 1; d < data_rank; d++) di[d] = oi[d - 1 + index_rank];
        source[o] = ravel(data_rank, data_dims, di);
    }
    char what[96];
    snprintf(what, sizeof what, "gather %s/%s axis %lld", tm_dtype_name(dt),
             tm_dtype_name(index_dt), (long long)axis_arg);
    check_dims(what, y, rank, out_dims);
    if (y) check_map(what, in[0], y, source, n, NULL);
    free(source);
    tm_ctx_destroy(&c);
}

static void test_gather(void) {
    const int64_t data_dims[3] = {5, 4, 3};
    const int64_t rows[4] = {4, 0, -1, 2}, pairs[6] = {1, -4, 3, 3, 0, 2}, one[1] = {-2};
    for (int t = 0; t < N_DTYPES; t++) {
        tm_dtype dt = all_dtypes[t];
        check_gather(dt, TM_INT64, 2, (int64_t[]){6, 17}, 1, (int64_t[]){4}, rows, 0);
        check_gather(dt, TM_INT32, 3, data_dims, 2, (int64_t[]){2, 3}, pairs, 1);
        check_gather(dt, TM_INT64, 3, data_dims, 2, (int64_t[]){3, 2},
                     (int64_t[]){0, 2, 1, -1, -3, 2}, -1);
        check_gather(dt, TM_INT64, 3, data_dims, 0, NULL, one, 0);
        check_gather(dt, TM_INT32, 1, (int64_t[]){5}, 1, (int64_t[]){0}, NULL, 0);
    }
    int64_t dims[2] = {5, 3};
    tm_tensor *in[2] = {patterned(TM_FLOAT, 2, dims, 0),
                        indices_of(TM_INT64, 1, (int64_t[]){3}, (int64_t[]){1, 5, 0})};
    tm_args a = args_of((int64_t[]){0}, 1);
    expect_error("gather range", TM_P_GATHER, in, 2, &a, TM_ERR_RUNTIME,
                 "index 5 is out of range for axis 0 of size 5");
    ((int64_t *)in[1]->data)[1] = -6;
    expect_error("gather negative range", TM_P_GATHER, in, 2, &a, TM_ERR_RUNTIME, "index -6");
    tm_tensor_free(in[1]);
    in[1] = tensor_of(TM_FLOAT, 1, (int64_t[]){1}, (double[]){0});
    expect_error("gather index dtype", TM_P_GATHER, in, 2, &a, TM_ERR_DTYPE, "int32 or int64");
    tm_tensor_free(in[0]);
    tm_tensor_free(in[1]);
}

/* ---- GATHER_ELEMENTS -------------------------------------------------------------------- */

static void test_gather_elements(void) {
    const int64_t data_dims[3] = {3, 4, 5}, index_dims[3] = {2, 3, 4};
    int64_t values[24];
    for (int axis = -1; axis < 3; axis++) {
        int resolved = axis < 0 ? axis + 3 : axis;
        int64_t size = data_dims[resolved];
        for (int i = 0; i < 24; i++) /* every third one negative */
            values[i] = (int64_t)(mix((uint32_t)(i + axis * 100)) % (uint32_t)size) -
                        (i % 3 == 0 ? size : 0);
        for (int t = 0; t < N_DTYPES; t++) {
            tm_dtype dt = all_dtypes[t];
            tm_ctx c;
            tm_ctx_init(&c, TM_MODE_EAGER, NULL);
            tm_tensor *in[2] = {patterned(dt, 3, data_dims, 60),
                                indices_of(t % 2 ? TM_INT32 : TM_INT64, 3, index_dims, values)};
            tm_args a = args_of((int64_t[]){axis}, 1);
            const tm_tensor *y = run(&c, TM_P_GATHER_ELEMENTS, in, 2, &a);
            int64_t source[24];
            for (int64_t o = 0; o < 24; o++) {
                int64_t oi[3];
                unravel(o, 3, index_dims, oi);
                oi[resolved] = values[o] < 0 ? values[o] + data_dims[resolved] : values[o];
                source[o] = ravel(3, data_dims, oi);
            }
            char what[96];
            snprintf(what, sizeof what, "gather_elements %s axis %d", tm_dtype_name(dt), axis);
            check_dims(what, y, 3, index_dims);
            if (y) check_map(what, in[0], y, source, 24, NULL);
            tm_ctx_destroy(&c);
        }
    }
    tm_tensor *in[2] = {patterned(TM_FLOAT, 2, (int64_t[]){2, 3}, 0),
                        indices_of(TM_INT64, 2, (int64_t[]){2, 2}, (int64_t[]){0, 1, 2, 3})};
    tm_args a = args_of((int64_t[]){1}, 1);
    expect_error("gather_elements range", TM_P_GATHER_ELEMENTS, in, 2, &a, TM_ERR_RUNTIME,
                 "index 3 is out of range for axis 1 of size 3");
    tm_tensor_free(in[1]);
    in[1] = indices_of(TM_INT64, 2, (int64_t[]){3, 2}, (int64_t[]){0, 0, 0, 0, 0, 0});
    expect_error("gather_elements dims", TM_P_GATHER_ELEMENTS, in, 2, &a, TM_ERR_SHAPE,
                 "indices (3, 2) do not fit data (2, 3)");
    tm_tensor_free(in[0]);
    tm_tensor_free(in[1]);
}

/* ---- GATHER_ND -------------------------------------------------------------------------- */

static void check_gather_nd(tm_dtype dt, int data_rank, const int64_t *data_dims,
                            int index_rank, const int64_t *index_dims, const int64_t *values,
                            int batch_dims) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_tensor *in[2] = {patterned(dt, data_rank, data_dims, 70),
                        indices_of(TM_INT64, index_rank, index_dims, values)};
    tm_args a = args_of((int64_t[]){batch_dims}, 1);
    const tm_tensor *y = run(&c, TM_P_GATHER_ND, in, 2, &a);
    int64_t depth = index_dims[index_rank - 1], out_dims[8];
    int rank = 0;
    for (int d = 0; d < index_rank - 1; d++) out_dims[rank++] = index_dims[d];
    for (int d = batch_dims + (int)depth; d < data_rank; d++) out_dims[rank++] = data_dims[d];
    int64_t n = tm_numel(rank, out_dims), source[256];
    for (int64_t o = 0; o < n; o++) {
        int64_t oi[8], di[8], ii[8];
        unravel(o, rank, out_dims, oi);
        for (int d = 0; d < index_rank - 1; d++) ii[d] = oi[d];
        for (int d = 0; d < batch_dims; d++) di[d] = oi[d];
        for (int j = 0; j < depth; j++) {
            ii[index_rank - 1] = j;
            int64_t v = values[ravel(index_rank, index_dims, ii)];
            di[batch_dims + j] = v < 0 ? v + data_dims[batch_dims + j] : v;
        }
        for (int d = batch_dims + (int)depth; d < data_rank; d++)
            di[d] = oi[index_rank - 1 + d - batch_dims - (int)depth];
        source[o] = ravel(data_rank, data_dims, di);
    }
    char what[96];
    snprintf(what, sizeof what, "gather_nd %s batch %d depth %lld", tm_dtype_name(dt),
             batch_dims, (long long)depth);
    check_dims(what, y, rank, out_dims);
    if (y) check_map(what, in[0], y, source, n, NULL);
    tm_ctx_destroy(&c);
}

static void test_gather_nd(void) {
    const int64_t data_dims[3] = {3, 4, 5};
    for (int t = 0; t < N_DTYPES; t++) {
        tm_dtype dt = all_dtypes[t];
        /* Whole elements, slices, batched. */
        check_gather_nd(dt, 3, data_dims, 2, (int64_t[]){2, 3},
                        (int64_t[]){0, 1, 2, -1, -1, 4}, 0);
        check_gather_nd(dt, 3, data_dims, 3, (int64_t[]){2, 2, 1},
                        (int64_t[]){2, 0, -3, 1}, 0);
        check_gather_nd(dt, 3, data_dims, 2, (int64_t[]){3, 1}, (int64_t[]){3, 0, -1}, 1);
        check_gather_nd(dt, 3, data_dims, 3, (int64_t[]){3, 2, 2},
                        (int64_t[]){0, 1, 3, 4, 1, 1, 2, 2, 0, 0, -1, -1}, 1);
    }
    tm_tensor *in[2] = {patterned(TM_FLOAT, 3, data_dims, 0),
                        indices_of(TM_INT64, 2, (int64_t[]){1, 2}, (int64_t[]){1, 4})};
    tm_args a = args_of((int64_t[]){0}, 1);
    expect_error("gather_nd range", TM_P_GATHER_ND, in, 2, &a, TM_ERR_RUNTIME,
                 "index 4 is out of range for axis 1 of size 4");
    tm_tensor_free(in[1]);
    in[1] = indices_of(TM_INT64, 2, (int64_t[]){1, 4}, (int64_t[]){0, 0, 0, 0});
    expect_error("gather_nd depth", TM_P_GATHER_ND, in, 2, &a, TM_ERR_SHAPE,
                 "indices (1, 4) do not fit data (3, 4, 5)");
    tm_tensor_free(in[1]);
    in[1] = indices_of(TM_INT64, 2, (int64_t[]){2, 1}, (int64_t[]){0, 0});
    a = args_of((int64_t[]){1}, 1);
    expect_error("gather_nd batch", TM_P_GATHER_ND, in, 2, &a, TM_ERR_SHAPE, "batch_dims 1");
    tm_tensor_free(in[0]);
    tm_tensor_free(in[1]);
}

/* ---- SCATTER_ELEMENTS and SCATTER_ND ---------------------------------------------------- */

static double ref_reduce(int reduction, double old, double update) {
    switch (reduction) {
    case 1: return old + update;
    case 2: return old * update;
    case 3: return update > old ? update : old;
    case 4: return update < old ? update : old;
    default: return update;
    }
}

static void test_scatter_elements(void) {
    const int64_t data_dims[2] = {3, 4}, index_dims[2] = {2, 3};
    const int64_t rows[6] = {0, 2, -1, 2, 0, 2};  /* axis 0: duplicates in column 2 */
    const int64_t cols[6] = {1, 1, -4, 3, 3, 0};  /* axis 1: duplicates in each row */
    double data[12], updates[6];
    for (int i = 0; i < 12; i++) data[i] = i - 5;
    for (int i = 0; i < 6; i++) updates[i] = 2 * i - 3;
    const tm_dtype dtypes[] = {TM_FLOAT, TM_INT32, TM_FLOAT16, TM_INT64, TM_UINT8, TM_DOUBLE};
    for (int t = 0; t < 6; t++) {
        tm_dtype dt = dtypes[t];
        for (int axis = 0; axis < 2; axis++) {
            for (int reduction = 0; reduction < 5; reduction++) {
                tm_ctx c;
                tm_ctx_init(&c, TM_MODE_EAGER, NULL);
                const int64_t *values = axis ? cols : rows;
                tm_tensor *in[3] = {tensor_of(dt, 2, data_dims, data),
                                    indices_of(TM_INT64, 2, index_dims, values),
                                    tensor_of(dt, 2, index_dims, updates)};
                tm_args a = args_of((int64_t[]){axis, reduction}, 2);
                const tm_tensor *y = run(&c, TM_P_SCATTER_ELEMENTS, in, 3, &a);
                double want[12];
                for (int i = 0; i < 12; i++) want[i] = element(in[0], i);
                for (int64_t e = 0; e < 6; e++) {
                    int64_t ii[2];
                    unravel(e, 2, index_dims, ii);
                    int64_t v = values[e];
                    ii[axis] = v < 0 ? v + data_dims[axis] : v;
                    int64_t at = ravel(2, data_dims, ii);
                    double w = ref_reduce(reduction, want[at], element(in[2], e));
                    tm_tensor *cell = tensor_of(dt, 0, NULL, &w); /* round like the dtype */
                    want[at] = element(cell, 0);
                    tm_tensor_free(cell);
                }
                int bad = !y;
                for (int i = 0; y && i < 12; i++) bad += element(y, i) != want[i];
                CHECK(!bad, "scatter_elements %s axis %d reduction %d", tm_dtype_name(dt), axis,
                      reduction);
                tm_ctx_destroy(&c);
            }
        }
    }
    /* Strings, plain replacement; later duplicates win. */
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_tensor *in[3] = {patterned(TM_STRING, 2, data_dims, 80),
                        indices_of(TM_INT32, 2, index_dims, cols),
                        patterned(TM_STRING, 2, index_dims, 81)};
    tm_args a = args_of((int64_t[]){1, 0}, 2);
    const tm_tensor *y = run(&c, TM_P_SCATTER_ELEMENTS, in, 3, &a);
    int64_t source[12];
    for (int i = 0; i < 12; i++) source[i] = i;
    int ok = y != NULL;
    for (int64_t e = 0; ok && e < 6; e++) {
        int64_t at = (e / 3) * 4 + (cols[e] < 0 ? cols[e] + 4 : cols[e]);
        source[at] = -1 - e;
    }
    for (int64_t o = 0; ok && o < 12; o++)
        ok = source[o] >= 0 ? same_element(y, o, in[0], source[o])
                            : same_element(y, o, in[2], -1 - source[o]);
    CHECK(ok, "scatter_elements strings");
    tm_ctx_destroy(&c);

    tm_tensor *bad[3] = {patterned(TM_FLOAT, 2, data_dims, 0),
                         indices_of(TM_INT64, 2, index_dims, (int64_t[]){0, 1, 2, 3, 0, -5}),
                         patterned(TM_FLOAT, 2, index_dims, 1)};
    a = args_of((int64_t[]){1, 1}, 2);
    expect_error("scatter_elements range", TM_P_SCATTER_ELEMENTS, bad, 3, &a, TM_ERR_RUNTIME,
                 "index -5 is out of range for axis 1 of size 4");
    tm_tensor_free(bad[2]);
    bad[2] = patterned(TM_FLOAT, 2, (int64_t[]){2, 2}, 1);
    expect_error("scatter_elements updates", TM_P_SCATTER_ELEMENTS, bad, 3, &a, TM_ERR_SHAPE,
                 "updates have dims (2, 2), expected (2, 3)");
    tm_tensor_free(bad[0]);
    tm_tensor_free(bad[2]);
    bad[0] = patterned(TM_STRING, 2, data_dims, 0);
    bad[2] = patterned(TM_STRING, 2, index_dims, 1);
    expect_error("scatter_elements string add", TM_P_SCATTER_ELEMENTS, bad, 3, &a,
                 TM_ERR_UNSUPPORTED, "'add' is not defined on string");
    for (int i = 0; i < 3; i++) tm_tensor_free(bad[i]);
}

static void test_scatter_nd(void) {
    const int64_t data_dims[3] = {4, 2, 3};
    double data[24], updates[24];
    for (int i = 0; i < 24; i++) data[i] = (i % 7) - 2, updates[i] = (i % 5) + 1;
    /* Slices of (2, 3) at rows 1, -1 and 1 again (a duplicate). */
    const int64_t rows[3] = {1, -1, 1};
    const tm_dtype dtypes[] = {TM_FLOAT, TM_INT64, TM_BFLOAT16, TM_INT8};
    for (int t = 0; t < 4; t++) {
        for (int reduction = 0; reduction < 5; reduction++) {
            tm_dtype dt = dtypes[t];
            tm_ctx c;
            tm_ctx_init(&c, TM_MODE_EAGER, NULL);
            tm_tensor *in[3] = {tensor_of(dt, 3, data_dims, data),
                                indices_of(TM_INT64, 2, (int64_t[]){3, 1}, rows),
                                tensor_of(dt, 3, (int64_t[]){3, 2, 3}, updates)};
            tm_args a = args_of((int64_t[]){reduction}, 1);
            const tm_tensor *y = run(&c, TM_P_SCATTER_ND, in, 3, &a);
            double want[24];
            for (int i = 0; i < 24; i++) want[i] = element(in[0], i);
            for (int k = 0; k < 3; k++) {
                int64_t row = rows[k] < 0 ? rows[k] + 4 : rows[k];
                for (int j = 0; j < 6; j++) {
                    double w = ref_reduce(reduction, want[row * 6 + j], element(in[2], k * 6 + j));
                    tm_tensor *cell = tensor_of(dt, 0, NULL, &w);
                    want[row * 6 + j] = element(cell, 0);
                    tm_tensor_free(cell);
                }
            }
            int bad = !y;
            for (int i = 0; y && i < 24; i++) bad += element(y, i) != want[i];
            CHECK(!bad, "scatter_nd %s reduction %d", tm_dtype_name(dt), reduction);
            tm_ctx_destroy(&c);
        }
    }
    /* Element-wise depth on strings: indices (2, 3) name two single elements. */
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_tensor *in[3] = {patterned(TM_STRING, 3, data_dims, 90),
                        indices_of(TM_INT32, 2, (int64_t[]){2, 3}, (int64_t[]){3, 1, 2, 0, -1, 0}),
                        patterned(TM_STRING, 1, (int64_t[]){2}, 91)};
    const tm_tensor *y = run(&c, TM_P_SCATTER_ND, in, 3, NULL);
    int ok = y != NULL;
    for (int o = 0; ok && o < 24; o++) {
        if (o == 3 * 6 + 1 * 3 + 2) ok = same_element(y, o, in[2], 0);
        else if (o == 0 * 6 + 1 * 3 + 0) ok = same_element(y, o, in[2], 1);
        else ok = same_element(y, o, in[0], o);
    }
    CHECK(ok, "scatter_nd strings");
    tm_ctx_destroy(&c);

    tm_tensor *bad[3] = {patterned(TM_FLOAT, 3, data_dims, 0),
                         indices_of(TM_INT64, 2, (int64_t[]){2, 1}, (int64_t[]){0, 4}),
                         patterned(TM_FLOAT, 3, (int64_t[]){2, 2, 3}, 1)};
    expect_error("scatter_nd range", TM_P_SCATTER_ND, bad, 3, NULL, TM_ERR_RUNTIME,
                 "index 4 is out of range for axis 0 of size 4");
    tm_tensor_free(bad[2]);
    bad[2] = patterned(TM_FLOAT, 2, (int64_t[]){2, 3}, 1);
    expect_error("scatter_nd updates", TM_P_SCATTER_ND, bad, 3, NULL, TM_ERR_SHAPE,
                 "updates have dims (2, 3), expected (2, 2, 3)");
    for (int i = 0; i < 3; i++) tm_tensor_free(bad[i]);
}

/* ---- INDEX_ADD -------------------------------------------------------------------------- */

static void test_index_add(void) {
    /* 5 update rows of (2, 3) into 4 rows: row 1 twice, row -1 (3), row 0; row 2 none. */
    const int64_t rows[5] = {1, -1, 1, 0, 3}, udims[3] = {5, 2, 3};
    double updates[30];
    for (int i = 0; i < 30; i++) updates[i] = 0.37 * ((i * 7) % 11) - 1.6;
    const tm_dtype dtypes[] = {TM_FLOAT, TM_DOUBLE, TM_FLOAT16, TM_BFLOAT16};
    for (int t = 0; t < 4; t++) {
        tm_dtype dt = dtypes[t];
        tm_ctx c;
        tm_ctx_init(&c, TM_MODE_EAGER, NULL);
        tm_tensor *in[2] = {indices_of(t % 2 ? TM_INT32 : TM_INT64, 1, (int64_t[]){5}, rows),
                            tensor_of(dt, 3, udims, updates)};
        tm_args a = args_of((int64_t[]){4}, 1);
        const tm_tensor *y = run(&c, TM_P_INDEX_ADD, in, 2, &a);
        /* Added in order of the updates, each sum rounded to the dtype. */
        double want[24] = {0};
        for (int k = 0; k < 5; k++) {
            int64_t row = rows[k] < 0 ? rows[k] + 4 : rows[k];
            for (int j = 0; j < 6; j++) {
                double w = want[row * 6 + j] + element(in[1], k * 6 + j);
                tm_tensor *cell = tensor_of(dt, 0, NULL, &w);
                want[row * 6 + j] = element(cell, 0);
                tm_tensor_free(cell);
            }
        }
        int bad = !y || y->dtype != dt;
        check_dims("index_add", y, 3, (int64_t[]){4, 2, 3});
        for (int i = 0; y && i < 24; i++) bad += element(y, i) != want[i];
        CHECK(!bad, "index_add %s", tm_dtype_name(dt));
        tm_ctx_destroy(&c);
    }
    /* Big enough to be split over threads: the same bytes as on one thread. */
    tm_pool *pool = tm_pool_create(3);
    const int64_t n = 300, big[2] = {n, 256};
    int64_t *idx = malloc((size_t)n * sizeof *idx);
    for (int64_t i = 0; i < n; i++) idx[i] = (i * 37) % 1500 - (i % 3 ? 0 : 1500);
    const tm_tensor *ys[2] = {NULL, NULL};
    tm_ctx cs[2];
    for (int p = 0; p < 2; p++) {
        tm_ctx_init(&cs[p], TM_MODE_EAGER, NULL);
        cs[p].pool = p ? pool : NULL;
        tm_tensor *in[2] = {indices_of(TM_INT64, 1, &n, idx), patterned(TM_FLOAT, 2, big, 5)};
        float *u = in[1]->data;
        for (int64_t i = 0; i < n * 256; i++) u[i] = (float)((i % 13) - 6) * 0.25f;
        tm_args a = args_of((int64_t[]){1500}, 1);
        ys[p] = run(&cs[p], TM_P_INDEX_ADD, in, 2, &a);
    }
    CHECK(ys[0] && ys[1] && ys[0]->nbytes == ys[1]->nbytes &&
          !memcmp(ys[0]->data, ys[1]->data, ys[0]->nbytes), "index_add on 3 threads");
    for (int p = 0; p < 2; p++) tm_ctx_destroy(&cs[p]);
    tm_pool_free(pool);
    free(idx);

    tm_tensor *bad[2] = {indices_of(TM_INT64, 1, (int64_t[]){2}, (int64_t[]){0, -5}),
                         patterned(TM_FLOAT, 2, (int64_t[]){2, 3}, 1)};
    tm_args a = args_of((int64_t[]){4}, 1);
    expect_error("index_add range", TM_P_INDEX_ADD, bad, 2, &a, TM_ERR_RUNTIME,
                 "index -5 is out of range for axis 0 of size 4");
    tm_tensor_free(bad[1]);
    bad[1] = patterned(TM_FLOAT, 2, (int64_t[]){3, 3}, 1);
    expect_error("index_add updates", TM_P_INDEX_ADD, bad, 2, &a, TM_ERR_SHAPE,
                 "updates (3, 3) must hold one row per index");
    tm_tensor_free(bad[1]);
    bad[1] = patterned(TM_INT32, 2, (int64_t[]){2, 3}, 1);
    expect_error("index_add dtype", TM_P_INDEX_ADD, bad, 2, &a, TM_ERR_DTYPE,
                 "updates must be float32, float64, float16 or bfloat16, not int32");
    for (int i = 0; i < 2; i++) tm_tensor_free(bad[i]);
}

/* ---- Trace mode: shape rules must not read data ----------------------------------------- */

static void test_trace_shapes(void) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_TRACE, NULL);
    tm_val x = tm_val_symbolic(&c, TM_FLOAT, 3, (int64_t[]){2, 3, 4}, 0);
    tm_val idx = tm_val_symbolic(&c, TM_INT64, 2, (int64_t[]){5, 6}, 1);
    tm_args a = args_of((int64_t[]){2, 0, 1}, 3);
    tm_val t = tm_prim(&c, TM_P_TRANSPOSE, &x, 1, &a);
    a = args_of((int64_t[]){1}, 1);
    tm_val gin[2] = {x, idx};
    tm_val g = tm_prim(&c, TM_P_GATHER, gin, 2, &a);
    a = args_of((int64_t[]){0, 1, 0, 1, 0, 0, 1}, 7); /* begins (1, 0, 1), ends (0, 0, 1) */
    tm_val p = tm_prim(&c, TM_P_PAD, &x, 1, &a);
    CHECK(tm_ctx_ok(&c) && !tm_vdata(&c, t) && tm_vdims(&c, t)[0] == 4 &&
              tm_vdims(&c, t)[2] == 3 && tm_vrank(&c, g) == 4 && tm_vdims(&c, g)[1] == 5 &&
              tm_vdims(&c, g)[2] == 6 && tm_vdims(&c, p)[0] == 3 && tm_vdims(&c, p)[2] == 6 &&
              c.n_nodes == 3,
          "trace: shapes without data (%s)", c.err.message);
    tm_ctx_destroy(&c);
}

int main(void) {
    test_reshape();
    test_copy();
    test_transpose();
    test_slice();
    test_pad();
    test_concat();
    test_expand();
    test_gather();
    test_gather_elements();
    test_gather_nd();
    test_scatter_elements();
    test_scatter_nd();
    test_index_add();
    test_trace_shapes();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
