/* Tests of tm_value (sequences and optionals on the public run API, src/runtime/values.c)
 * through include/transmuter.h alone: declared kinds, making and reading values and who
 * owns what, sequence and optional inputs and outputs in both modes on node cases of the
 * shipped ONNX backend data (values computed here, not read from the case), a tensor-only
 * call through the plan cache bit for bit against tm_model_run, and the error contract.
 * Not the ONNX backend suite (transmuter test-onnx) nor the Python binding. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "transmuter.h"

#include "check.h"

#define NODE "tests/data/onnx-backend/node/"

static tm_model *load(const char *path) {
    tm_model *m = NULL;
    tm_error err;
    if (tm_model_load(path, NULL, &m, &err) != TM_OK) {
        check(0, "loading %s: %s", path, err.message);
        return NULL;
    }
    return m;
}

static tm_tensor *tensor_i64(int64_t n, int64_t first) {
    int64_t dims[1] = {n};
    tm_tensor *t = tm_tensor_new(TM_INT64, 1, dims);
    for (int64_t i = 0; t && i < n; i++) ((int64_t *)tm_tensor_data(t))[i] = first + i;
    return t;
}

static tm_tensor *tensor_f32(int rank, const int64_t *dims, float first) {
    tm_tensor *t = tm_tensor_new(TM_FLOAT, rank, dims);
    for (int64_t i = 0; t && i < tm_tensor_numel(t); i++)
        ((float *)tm_tensor_data(t))[i] = first + (float)i;
    return t;
}

static tm_value *value_of(tm_tensor *t) {
    tm_value *v = NULL;
    tm_error err;
    CHECK(tm_value_from_tensor(t, &v, &err) == TM_OK, "tm_value_from_tensor: %s", err.message);
    return v;
}

/* Runs m on the values in one mode; 0 on error (err filled). */
static tm_status run(tm_model *m, int eager, int n, const char *const *names,
                     const tm_value *const *in, tm_value **out, tm_error *err) {
    return eager ? tm_run_eager_values(m, n, names, in, out, NULL, err)
                 : tm_model_run_values(m, n, names, in, out, NULL, err);
}

static void free_values(tm_value **v, int n) {
    for (int i = 0; i < n; i++) tm_value_free(v[i]);
}

/* ---- Kinds and the value object ------------------------------------------------------ */

static void test_kinds(void) {
    tm_model *m = load(NODE "test_identity_opt/model.onnx");
    tm_model *s = load(NODE "test_split_to_sequence_1/model.onnx");
    if (!m || !s) goto done;
    tm_kind k = TM_KIND_TENSOR;
    int opt = 0;
    CHECK(tm_model_input_kind(m, 0, &k, &opt) == TM_OK && k == TM_KIND_SEQUENCE && opt == 1,
          "optional(sequence) input: kind %d optional %d", k, opt);
    CHECK(tm_model_output_kind(m, 0, &k, &opt) == TM_OK && k == TM_KIND_SEQUENCE && opt == 1,
          "optional(sequence) output: kind %d optional %d", k, opt);
    CHECK(tm_model_input_kind(s, 0, &k, &opt) == TM_OK && k == TM_KIND_TENSOR && opt == 0,
          "tensor input: kind %d optional %d", k, opt);
    CHECK(tm_model_output_kind(s, 0, &k, NULL) == TM_OK && k == TM_KIND_SEQUENCE,
          "sequence output: kind %d", k);
    tm_value_desc d;
    CHECK(tm_model_output(s, 0, &d) == TM_OK && d.dtype == TM_FLOAT && d.rank == -1,
          "a sequence's desc: its element type, rank -1 (%d, %d)", d.dtype, d.rank);
    CHECK(tm_model_input_kind(s, 2, &k, NULL) == TM_ERR_INVALID_ARGUMENT, "input 2 of 2");
    CHECK(tm_model_output_kind(s, -1, NULL, NULL) == TM_ERR_INVALID_ARGUMENT, "output -1");
    CHECK(tm_model_input_kind(NULL, 0, NULL, NULL) == TM_ERR_INVALID_ARGUMENT, "NULL model");
done:
    tm_model_free(m);
    tm_model_free(s);
}

static void test_value_object(void) {
    tm_error err;
    tm_value *seq = NULL, *none = NULL;
    CHECK(tm_value_new_sequence(TM_UNDEFINED, &seq, &err) == TM_ERR_INVALID_ARGUMENT && !seq,
          "a sequence of undefined elements");
    CHECK(tm_value_new_sequence(TM_INT64, &seq, &err) == TM_OK, "%s", err.message);
    CHECK(tm_value_kind(seq) == TM_KIND_SEQUENCE && tm_value_length(seq) == 0 &&
          tm_value_dtype(seq) == TM_INT64, "an empty sequence keeps its element type");
    for (int i = 0; i < 9; i++)   /* past the first growth */
        CHECK(tm_value_append(seq, tensor_i64(2, 10 * i), &err) == TM_OK, "%s", err.message);
    CHECK(tm_value_length(seq) == 9, "9 appended, length %lld", (long long)tm_value_length(seq));
    CHECK(((int64_t *)tm_tensor_data(tm_value_tensor(seq, 8)))[1] == 81, "element 8 kept");
    /* A wrong element type is refused, and the tensor handed over is freed (ASan: no leak). */
    int64_t dims[1] = {2};
    CHECK(tm_value_append(seq, tm_tensor_new(TM_FLOAT, 1, dims), &err) == TM_ERR_DTYPE &&
          strstr(err.message, "float32") && strstr(err.message, "int64"),
          "float32 into int64s: %s", err.message);
    CHECK(tm_value_length(seq) == 9, "nothing appended on error");
    CHECK(tm_value_append(seq, NULL, &err) == TM_ERR_INVALID_ARGUMENT, "NULL tensor");
    tm_value *t = value_of(tensor_i64(3, 0));
    CHECK(tm_value_append(t, tensor_i64(3, 0), &err) == TM_ERR_INVALID_ARGUMENT &&
          strstr(err.message, "not a sequence"), "append to a tensor: %s", err.message);
    CHECK(tm_value_kind(t) == TM_KIND_TENSOR && tm_value_length(t) == 1 &&
          tm_value_dtype(t) == TM_INT64 && tm_value_tensor(t, 0) && !tm_value_tensor(t, 1),
          "a tensor value");
    CHECK(tm_value_from_tensor(NULL, &t, &err) == TM_ERR_INVALID_ARGUMENT, "from NULL");
    /* Taking: the caller owns the tensor, the place is empty. */
    tm_tensor *taken = tm_value_take(seq, 3);
    CHECK(taken && ((int64_t *)tm_tensor_data(taken))[0] == 30 && !tm_value_tensor(seq, 3) &&
          !tm_value_take(seq, 3) && !tm_value_take(seq, 9) && !tm_value_take(seq, -1),
          "take element 3 once");
    tm_value_free(seq);   /* element 3 is not freed here... */
    CHECK(((int64_t *)tm_tensor_data(taken))[1] == 31, "a taken tensor outlives its value");
    tm_tensor_free(taken);   /* ...but here (ASan: neither a leak nor a double free) */
    CHECK(tm_value_new_none(&none, &err) == TM_OK && tm_value_kind(none) == TM_KIND_NONE &&
          tm_value_length(none) == 0 && tm_value_dtype(none) == TM_UNDEFINED &&
          !tm_value_tensor(none, 0), "an empty optional");
    CHECK(tm_value_kind(NULL) == TM_KIND_NONE && tm_value_length(NULL) == 0, "NULL");
    tm_value_free(none);
    tm_value_free(t);
    tm_value_free(NULL);
}

/* ---- Runs ------------------------------------------------------------------------- */

static int same_i64(const tm_tensor *t, int64_t n, int64_t first) {
    if (!t || tm_tensor_dtype(t) != TM_INT64 || tm_tensor_numel(t) != n) return 0;
    for (int64_t i = 0; i < n; i++)
        if (((const int64_t *)tm_tensor_data_const(t))[i] != first + i) return 0;
    return 1;
}

/* SequenceInsert at the back: a sequence input, a sequence output. */
static void test_sequence_insert(int eager) {
    tm_model *m = load(NODE "test_sequence_insert_at_back/model.onnx");
    if (!m) return;
    tm_error err;
    tm_value *seq = NULL;
    tm_value_new_sequence(TM_INT64, &seq, &err);
    tm_value_append(seq, tensor_i64(3, 0), &err);
    tm_value_append(seq, tensor_i64(3, 100), &err);
    tm_value *x = value_of(tensor_i64(3, 200));
    const char *names[2] = {"sequence", "tensor"};
    const tm_value *in[2] = {seq, x};
    tm_value *out[1] = {NULL};
    tm_status st = run(m, eager, 2, names, in, out, &err);
    CHECK(st == TM_OK, "[%s] SequenceInsert: %s", eager ? "eager" : "plan", err.message);
    if (st == TM_OK) {
        CHECK(tm_value_kind(out[0]) == TM_KIND_SEQUENCE && tm_value_length(out[0]) == 3 &&
              tm_value_dtype(out[0]) == TM_INT64, "[%s] a sequence of 3 int64 tensors",
              eager ? "eager" : "plan");
        for (int i = 0; i < 3; i++)
            CHECK(same_i64(tm_value_tensor(out[0], i), 3, 100 * i), "[%s] element %d",
                  eager ? "eager" : "plan", i);
        CHECK(tm_value_tensor(out[0], 0) != tm_value_tensor(seq, 0), "outputs are new tensors");
    }
    CHECK(tm_value_length(seq) == 2 && same_i64(tm_value_tensor(seq, 1), 3, 100),
          "the input stays the caller's, unchanged");
    /* An empty sequence in: the output is the tensor alone. */
    tm_value *empty = NULL;
    tm_value_new_sequence(TM_INT64, &empty, &err);
    const tm_value *in2[2] = {empty, x};
    tm_value *out2[1] = {NULL};
    st = run(m, eager, 2, names, in2, out2, &err);
    CHECK(st == TM_OK && tm_value_length(out2[0]) == 1 && same_i64(tm_value_tensor(out2[0], 0), 3, 200),
          "[%s] insert into an empty sequence: %s", eager ? "eager" : "plan",
          st == TM_OK ? "" : err.message);
    free_values(out, 1);
    free_values(out2, 1);
    tm_value_free(empty);
    tm_value_free(seq);
    tm_value_free(x);
    tm_model_free(m);
}

/* SplitToSequence: tensors in, a sequence out (axis 1, chunks of 2 of a 3x6). */
static void test_split_to_sequence(int eager) {
    tm_model *m = load(NODE "test_split_to_sequence_1/model.onnx");
    if (!m) return;
    tm_error err;
    int64_t dims[2] = {3, 6};
    tm_value *data = value_of(tensor_f32(2, dims, 0.5f));
    tm_tensor *split = tm_tensor_new(TM_INT64, 0, NULL);
    *(int64_t *)tm_tensor_data(split) = 2;
    tm_value *sp = value_of(split);
    const char *names[2] = {"data", "split"};
    const tm_value *in[2] = {data, sp};
    tm_value *out[1] = {NULL};
    tm_status st = run(m, eager, 2, names, in, out, &err);
    CHECK(st == TM_OK && tm_value_length(out[0]) == 3, "[%s] SplitToSequence: %s",
          eager ? "eager" : "plan", st == TM_OK ? "length" : err.message);
    for (int c = 0; st == TM_OK && c < tm_value_length(out[0]); c++) {
        const tm_tensor *t = tm_value_tensor(out[0], c);
        int ok = t && tm_tensor_rank(t) == 2 && tm_tensor_dims(t)[0] == 3 && tm_tensor_dims(t)[1] == 2;
        for (int r = 0; ok && r < 3; r++)
            for (int k = 0; k < 2; k++)
                ok &= ((const float *)tm_tensor_data_const(t))[r * 2 + k] == 0.5f + (float)(r * 6 + c * 2 + k);
        CHECK(ok, "[%s] chunk %d is columns %d..%d", eager ? "eager" : "plan", c, 2 * c, 2 * c + 1);
    }
    /* A sequence where a tensor is declared. */
    tm_value *seq = NULL;
    tm_value_new_sequence(TM_FLOAT, &seq, &err);
    const tm_value *bad[2] = {seq, sp};
    tm_value *sentinel = (tm_value *)&err, *out2[1] = {sentinel};
    st = run(m, eager, 2, names, bad, out2, &err);
    CHECK(st == TM_ERR_DTYPE && !strcmp(err.value, "data") && strstr(err.message, "sequence") &&
          out2[0] == sentinel, "[%s] a sequence for a tensor input: %s", eager ? "eager" : "plan",
          err.message);
    free_values(out, 1);
    tm_value_free(seq);
    tm_value_free(data);
    tm_value_free(sp);
    tm_model_free(m);
}

/* OptionalHasElement: an optional(int32) input empty (a NULL entry, a none value, left
 * out) and present. */
static void test_optional_input(int eager) {
    tm_model *m = load(NODE "test_optional_has_element_empty_optional_input/model.onnx");
    if (!m) return;
    tm_error err;
    const char *names[1] = {"optional_input"};
    tm_value *none = NULL;
    tm_value_new_none(&none, &err);
    tm_tensor *i32 = tm_tensor_new(TM_INT32, 0, NULL);
    tm_value *present = value_of(i32);
    const tm_value *feeds[4] = {NULL, none, present, NULL};
    int n_in[4] = {1, 1, 1, 0};
    int want[4] = {0, 0, 1, 0};
    const char *what[4] = {"a NULL entry", "a none value", "a tensor", "left out"};
    for (int k = 0; k < 4; k++) {
        tm_value *out[1] = {NULL};
        tm_status st = run(m, eager, n_in[k], names, &feeds[k], out, &err);
        const tm_tensor *t = st == TM_OK ? tm_value_tensor(out[0], 0) : NULL;
        CHECK(t && tm_tensor_dtype(t) == TM_BOOL &&
              *(const uint8_t *)tm_tensor_data_const(t) == want[k],
              "[%s] OptionalHasElement of %s: %s", eager ? "eager" : "plan", what[k],
              st == TM_OK ? "wrong value" : err.message);
        free_values(out, 1);
    }
    tm_value_free(none);
    tm_value_free(present);
    tm_model_free(m);
}

/* If returning optional(sequence): empty on one branch, a sequence of one on the other. */
static void test_optional_output(int eager) {
    tm_model *m = load(NODE "test_if_opt/model.onnx");
    if (!m) return;
    tm_error err;
    const char *names[1] = {"cond"};
    for (int c = 0; c < 2; c++) {
        tm_tensor *cond = tm_tensor_new(TM_BOOL, 0, NULL);
        *(uint8_t *)tm_tensor_data(cond) = (uint8_t)c;
        tm_value *in = value_of(cond);
        tm_value *out[1] = {NULL};
        tm_status st = run(m, eager, 1, names, (const tm_value *const *)&in, out, &err);
        CHECK(st == TM_OK, "[%s] If: %s", eager ? "eager" : "plan", err.message);
        if (st == TM_OK && c) {
            CHECK(out[0] && tm_value_kind(out[0]) == TM_KIND_NONE && tm_value_length(out[0]) == 0,
                  "[%s] the then branch: an empty optional", eager ? "eager" : "plan");
        } else if (st == TM_OK) {
            const tm_tensor *t = tm_value_tensor(out[0], 0);
            CHECK(tm_value_kind(out[0]) == TM_KIND_SEQUENCE && tm_value_length(out[0]) == 1 && t &&
                  tm_tensor_dtype(t) == TM_FLOAT && tm_tensor_numel(t) == 5,
                  "[%s] the else branch: a sequence of one float32[5]", eager ? "eager" : "plan");
        }
        free_values(out, 1);
        tm_value_free(in);
    }
    tm_model_free(m);
}

/* Identity on optional(sequence(float[5])): a sequence through, an empty one through. */
static void test_optional_sequence_identity(int eager) {
    tm_model *m = load(NODE "test_identity_opt/model.onnx");
    if (!m) return;
    tm_error err;
    const char *names[1] = {"opt_in"};
    int64_t dims[1] = {5};
    tm_value *seq = NULL;
    tm_value_new_sequence(TM_FLOAT, &seq, &err);
    tm_value_append(seq, tensor_f32(1, dims, 1), &err);
    tm_value_append(seq, tensor_f32(1, dims, -7), &err);
    tm_value *out[1] = {NULL};
    tm_status st = run(m, eager, 1, names, (const tm_value *const *)&seq, out, &err);
    int ok = st == TM_OK && tm_value_kind(out[0]) == TM_KIND_SEQUENCE && tm_value_length(out[0]) == 2;
    for (int i = 0; ok && i < 2; i++)
        ok = !memcmp(tm_tensor_data(tm_value_tensor(out[0], i)),
                     tm_tensor_data(tm_value_tensor(seq, i)), 5 * sizeof(float));
    CHECK(ok, "[%s] Identity of a present optional sequence: %s", eager ? "eager" : "plan",
          st == TM_OK ? "different" : err.message);
    free_values(out, 1);
    const tm_value *empty[1] = {NULL};
    st = run(m, eager, 1, names, empty, out, &err);
    CHECK(st == TM_OK && tm_value_kind(out[0]) == TM_KIND_NONE,
          "[%s] Identity of an empty optional: %s", eager ? "eager" : "plan",
          st == TM_OK ? "not empty" : err.message);
    if (st == TM_OK) free_values(out, 1);
    /* A sequence of the wrong element type, and a tensor where a sequence is declared. */
    tm_value *ints = NULL;
    tm_value_new_sequence(TM_INT64, &ints, &err);
    st = run(m, eager, 1, names, (const tm_value *const *)&ints, out, &err);
    CHECK(st == TM_ERR_DTYPE && strstr(err.message, "int64") && strstr(err.message, "float32"),
          "[%s] a sequence of int64 for float32: %s", eager ? "eager" : "plan", err.message);
    tm_value *t = value_of(tensor_f32(1, dims, 0));
    st = run(m, eager, 1, names, (const tm_value *const *)&t, out, &err);
    CHECK(st == TM_ERR_DTYPE && strstr(err.message, "sequence"),
          "[%s] a tensor for a sequence: %s", eager ? "eager" : "plan", err.message);
    /* A sequence with a place taken out. */
    tm_tensor_free(tm_value_take(seq, 1));
    st = run(m, eager, 1, names, (const tm_value *const *)&seq, out, &err);
    CHECK(st == TM_ERR_INVALID_ARGUMENT && strstr(err.message, "taken"),
          "[%s] a taken element: %s", eager ? "eager" : "plan", err.message);
    tm_value_free(t);
    tm_value_free(ints);
    tm_value_free(seq);
    tm_model_free(m);
}

static void test_errors(void) {
    tm_model *m = load(NODE "test_sequence_insert_at_back/model.onnx");
    if (!m) return;
    tm_error err;
    tm_value *none = NULL, *x = value_of(tensor_i64(3, 0));
    tm_value_new_none(&none, &err);
    const char *names[2] = {"sequence", "tensor"};
    tm_value *out[1] = {NULL};
    for (int eager = 0; eager < 2; eager++) {
        const tm_value *in[2] = {none, x};
        CHECK(run(m, eager, 2, names, in, out, &err) == TM_ERR_INVALID_ARGUMENT &&
              !strcmp(err.value, "sequence") && strstr(err.message, "not optional") && !out[0],
              "an empty value for a required input: %s", err.message);
        const char *wrong[2] = {"sequence", "tensr"};
        tm_value *seq = NULL;
        tm_value_new_sequence(TM_INT64, &seq, &err);
        const tm_value *in2[2] = {seq, x};
        CHECK(run(m, eager, 2, wrong, in2, out, &err) == TM_ERR_NOT_FOUND && !out[0],
              "an unknown name: %s", err.message);
        const char *null_name[2] = {"sequence", NULL};
        CHECK(run(m, eager, 2, null_name, in2, out, &err) == TM_ERR_INVALID_ARGUMENT,
              "a NULL name: %s", err.message);
        CHECK(run(m, eager, 2, names, in2, NULL, &err) == TM_ERR_INVALID_ARGUMENT, "NULL outputs");
        CHECK(run(NULL, eager, 2, names, in2, out, &err) == TM_ERR_INVALID_ARGUMENT, "NULL model");
        CHECK(run(m, eager, 1, names, in2, out, &err) == TM_ERR_NOT_FOUND &&
              strstr(err.message, "tensor"), "a missing input: %s", err.message);
        tm_value_free(seq);
    }
    tm_value_free(none);
    tm_value_free(x);
    tm_model_free(m);
}

/* A tensor-only model: tm_model_run_values goes through tm_model_run's cache and gives its
 * bits. */
static void test_tensor_only(void) {
    tm_model *m = load("tests/data/tiny/bert/model.onnx");
    if (!m) return;
    tm_error err;
    const char *names[3] = {"input_ids", "attention_mask", "token_type_ids"};
    int64_t dims[2] = {2, 7};
    tm_tensor *t[3];
    for (int k = 0; k < 3; k++) {
        t[k] = tm_tensor_new(TM_INT64, 2, dims);
        for (int i = 0; i < 14; i++)
            ((int64_t *)tm_tensor_data(t[k]))[i] = k == 0 ? (i * 37) % 50 : k == 1 ? (i % 7 < 5) : 0;
    }
    tm_tensor *ref[1] = {NULL};
    CHECK(tm_model_run(m, 3, names, (const tm_tensor *const *)t, ref, NULL, &err) == TM_OK,
          "tm_model_run: %s", err.message);
    tm_value *v[3];
    for (int k = 0; k < 3; k++) v[k] = value_of(t[k]);
    tm_plan_stats before, after;
    memset(&before, 0, sizeof before);
    memset(&after, 0, sizeof after);
    before.size = after.size = sizeof before;
    tm_model_plan_stats(m, &before);
    for (int rep = 0; rep < 2; rep++) {
        tm_value *out[1] = {NULL};
        tm_status st = tm_model_run_values(m, 3, names, (const tm_value *const *)v, out, NULL, &err);
        const tm_tensor *o = st == TM_OK ? tm_value_tensor(out[0], 0) : NULL;
        CHECK(o && ref[0] && tm_tensor_nbytes(o) == tm_tensor_nbytes(ref[0]) &&
              !memcmp(tm_tensor_data_const(o), tm_tensor_data_const(ref[0]), tm_tensor_nbytes(o)),
              "run %d: the bits of tm_model_run: %s", rep, st == TM_OK ? "differ" : err.message);
        free_values(out, 1);
    }
    tm_model_plan_stats(m, &after);
    CHECK(after.runs == before.runs + 2 && after.plans == before.plans,
          "through the plan cache: runs %zu -> %zu, plans %zu -> %zu", before.runs, after.runs,
          before.plans, after.plans);
    tm_tensor_free(ref[0]);
    free_values(v, 3);
    tm_model_free(m);
}

int main(void) {
    test_kinds();
    test_value_object();
    for (int eager = 0; eager < 2; eager++) {
        test_sequence_insert(eager);
        test_split_to_sequence(eager);
        test_optional_input(eager);
        test_optional_output(eager);
        test_optional_sequence_identity(eager);
    }
    test_errors();
    test_tensor_only();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
