/* Tests of the ONNX writer (tm_model_save, src/onnx/write.c) on the tiny exports and the
 * models of tests/data/write: saving unchanged gives the loaded bytes back; replaced
 * initializers load back with their new values while every other initializer keeps its
 * bytes; a saved model runs exactly like the loaded one with the same weights substituted
 * in memory; external data in every mode (offsets aligned, nested tensors rewritten);
 * sub-byte packing; saving over the loaded file; every error, with no file left behind;
 * float32 parameters of a float16 model (compute_type f32) saved back as float16.
 * TM_WRITE_TEST_OUT=DIR keeps the saved models for tests/write_ort.sh (ONNX Runtime). */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/runtime/runtime.h"
#include "../src/io/npy.h"
#include "../src/onnx/pb.h"
#include "check.h"

#define TINY "tests/data/tiny"
#define WDATA "tests/data/write"

static char out_dir[512];

static int same_file(const char *a, const char *b) {
    uint8_t *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    int ok = read_all(a, &x, &nx) && read_all(b, &y, &ny) && nx == ny && !memcmp(x, y, nx);
    free(x);
    free(y);
    return ok;
}

static tm_model *load(const char *path) {
    tm_model *m = NULL;
    tm_error err;
    if (tm_model_load(path, NULL, &m, &err) != TM_OK) {
        check(0, "loading %s: %s", path, err.message);
        return NULL;
    }
    return m;
}

static const tm_initializer *init_of(const tm_model *m, const char *name) {
    const tm_graph *g = m->onnx->graph;
    for (int i = 0; i < g->n_inits; i++)
        if (!strcmp(g->inits[i].name, name)) return &g->inits[i];
    return NULL;
}

static int same_tensor(const tm_tensor *a, const tm_tensor *b) {
    return a && b && a->dtype == b->dtype && tm_same_shape(a, b) && a->nbytes == b->nbytes &&
           (a->nbytes == 0 || !memcmp(a->data, b->data, a->nbytes));
}

/* A new value for an initializer: each element moved by a different amount. */
static tm_tensor *perturbed(const tm_tensor *t, double by) {
    tm_tensor *c = tm_tensor_clone(t, NULL);
    int64_t n = tm_numel(c->rank, c->dims);
    for (int64_t k = 0; k < n; k++) {
        double v = tm_load_f64(c->data, c->dtype, (size_t)k);
        tm_store_f64(c->data, c->dtype, (size_t)k, v + by * (double)((k % 7) - 3));
    }
    return c;
}

static void out_path(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", out_dir, name);
}

/* Only the expected files in the output folder: no temporary left behind. */
static int no_temp_files(void) {
    DIR *d = opendir(out_dir);
    if (!d) return 0;
    struct dirent *e;
    int clean = 1;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) clean = 0;
    closedir(d);
    return clean;
}

/* ---- Inputs and runs ------------------------------------------------------------------ */

typedef struct inputs {
    int n;
    const char *names[8];
    tm_tensor *t[8];
} inputs;

static void load_inputs(const char *dir, inputs *in, const char *const *names, int n) {
    memset(in, 0, sizeof *in);
    for (int i = 0; i < n; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s.npy", dir, names[i]);
        tm_error err;
        if (tm_npy_read(path, &in->t[in->n], &err) != TM_OK) {
            check(0, "reading %s: %s", path, err.message);
            continue;
        }
        in->names[in->n++] = names[i];
    }
}

static void free_inputs(inputs *in) {
    for (int i = 0; i < in->n; i++) tm_tensor_free(in->t[i]);
}

/* Output 0 of an eager run, or NULL. */
static tm_tensor *run(tm_model *m, const inputs *in) {
    tm_tensor *outs[4] = {NULL};
    tm_error err;
    if (!m || tm_run_eager(m, in->n, in->names, (const tm_tensor *const *)in->t, outs, NULL, &err)) {
        check(0, "run: %s", m ? err.message : "no model");
        return NULL;
    }
    for (int i = 1; i < 4; i++) tm_tensor_free(outs[i]);
    return outs[0];
}

/* ---- Saving unchanged ------------------------------------------------------------------ */

static void test_identity(const char *src) {
    tm_model *m = load(src);
    if (!m) return;
    char dst[600];
    out_path(dst, sizeof dst, "identity.onnx");
    tm_error err;
    CHECK(tm_model_save(m, dst, 0, NULL, NULL, NULL, &err) == TM_OK, "%s: %s", src, err.message);
    CHECK(same_file(src, dst), "%s saved unchanged differs from the file", src);
    tm_model_free(m);
    unlink(dst);
}

static void test_identity_all_tiny(void) {
    const char *models[] = {"bert/model.onnx", "bert/model_fp16.onnx", "bert/model_q4.onnx",
                            "bert/model_quantized.onnx", "bert-seqcls/model.onnx",
                            "gpt2/decoder_model_merged.onnx", "llama/decoder_model_merged_q4.onnx",
                            "whisper/encoder_model.onnx", "vit/model_quantized.onnx",
                            "clip/model_fp16.onnx"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char p[256];
        snprintf(p, sizeof p, TINY "/%s", models[i]);
        test_identity(p);
    }
    test_identity(WDATA "/features.onnx");
    test_identity(WDATA "/int4.onnx");
}

/* An external-data model saved unchanged beside a data file of the same name gives both
 * files back (offsets were contiguous and 64-byte multiples there). */
static void test_identity_external(void) {
    tm_model *m = load(TINY "/bert-external-data/model.onnx");
    if (!m) return;
    char dst[600], data[600];
    out_path(dst, sizeof dst, "model.onnx");
    out_path(data, sizeof data, "model.onnx_data");
    tm_error err;
    CHECK(tm_model_save(m, dst, 0, NULL, NULL, NULL, &err) == TM_OK, "%s", err.message);
    CHECK(same_file(TINY "/bert-external-data/model.onnx", dst), "external model .onnx differs");
    CHECK(same_file(TINY "/bert-external-data/model.onnx_data", data), "external data differs");
    tm_model_free(m);
    unlink(dst);
    unlink(data);
}

/* ---- Replacing ------------------------------------------------------------------------- */

typedef struct change {
    int n;
    const char *names[16];
    tm_tensor *values[16];
} change;

static void make_change(const tm_model *m, change *c, const char *const *names, int n) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < n; i++) {
        const tm_initializer *in = init_of(m, names[i]);
        if (!in) {
            check(0, "no initializer %s", names[i]);
            continue;
        }
        c->names[c->n] = names[i];
        c->values[c->n++] = perturbed(in->tensor, 0.01 * (i + 1));
    }
}

static void free_change(change *c) {
    for (int i = 0; i < c->n; i++) tm_tensor_free(c->values[i]);
}

/* The saved model's initializers: the replaced ones hold the new values, all others the
 * bytes of the original. */
static void check_initializers(const tm_model *orig, const tm_model *saved, const change *c,
                               const char *what) {
    const tm_graph *g = orig->onnx->graph, *h = saved->onnx->graph;
    CHECK(g->n_inits == h->n_inits, "%s: %d initializers, saved %d", what, g->n_inits, h->n_inits);
    int same = 1;
    for (int i = 0; i < g->n_inits && i < h->n_inits; i++) {
        const tm_tensor *want = g->inits[i].tensor;
        for (int k = 0; k < c->n; k++)
            if (!strcmp(c->names[k], g->inits[i].name)) want = c->values[k];
        if (strcmp(g->inits[i].name, h->inits[i].name) || !same_tensor(want, h->inits[i].tensor)) {
            same = 0;
            printf("FAIL %s: initializer '%s' differs after saving\n", what, g->inits[i].name);
        }
    }
    CHECK(same, "%s: initializers", what);
    CHECK(g->n_nodes == h->n_nodes && orig->onnx->n_opsets == saved->onnx->n_opsets &&
          orig->onnx->n_functions == saved->onnx->n_functions &&
          orig->onnx->n_metadata == saved->onnx->n_metadata, "%s: structure", what);
}

/* Output of the loaded model with the change substituted in memory (the reference). */
static tm_tensor *run_substituted(const char *src, const change *c, const inputs *in) {
    tm_model *m = load(src);
    if (!m) return NULL;
    tm_tensor *saved[16];
    for (int k = 0; k < c->n; k++) {
        tm_initializer *init = (tm_initializer *)init_of(m, c->names[k]);
        saved[k] = init->tensor;
        init->tensor = c->values[k];
    }
    tm_tensor *y = run(m, in);
    for (int k = 0; k < c->n; k++) ((tm_initializer *)init_of(m, c->names[k]))->tensor = saved[k];
    tm_model_free(m);
    return y;
}

/* External-data offsets of the main graph's initializers in a saved .onnx, checked for
 * alignment; returns how many tensors are external. */
static int count_external(const char *path, uint64_t align, int *aligned) {
    uint8_t *data = NULL;
    size_t size = 0;
    *aligned = 1;
    if (!read_all(path, &data, &size)) return -1;
    int n = 0;
    tm_pb_reader r, g, t, e;
    tm_pb_field f, gf, tf, ef;
    tm_pb_init(&r, data, size);
    while (tm_pb_next(&r, &f) == 1) {
        if (f.number != 7) continue;
        tm_pb_sub(&r, &f, &g);
        while (tm_pb_next(&g, &gf) == 1) {
            if (gf.number != 5) continue;
            tm_pb_sub(&g, &gf, &t);
            while (tm_pb_next(&t, &tf) == 1) {
                if (tf.number != 13) continue;
                tm_pb_sub(&t, &tf, &e);
                int is_offset = 0;
                while (tm_pb_next(&e, &ef) == 1) {
                    if (ef.number == 1) is_offset = ef.len == 6 && !memcmp(ef.data, "offset", 6);
                    if (ef.number == 2 && is_offset) {
                        char num[32] = {0};
                        memcpy(num, ef.data, ef.len < 31 ? ef.len : 31);
                        if (strtoull(num, NULL, 10) % align) *aligned = 0;
                        n++;
                    }
                }
            }
        }
    }
    free(data);
    return n;
}

static void test_replace(const char *src, const char *const *names, int n_names,
                         const char *inputs_dir, const char *const *input_names, int n_inputs,
                         const tm_save_options *opts, const char *dst_name, int want_external,
                         int back_identical, const char *what) {
    tm_model *m = load(src);
    if (!m) return;
    change c;
    make_change(m, &c, names, n_names);
    char dst[600];
    out_path(dst, sizeof dst, dst_name);
    tm_error err;
    CHECK(tm_model_save(m, dst, c.n, c.names, (const tm_tensor *const *)c.values, opts, &err) == TM_OK,
          "%s: save: %s", what, err.message);
    CHECK(no_temp_files(), "%s: temporary files left", what);
    tm_model *saved = load(dst);
    if (saved) {
        check_initializers(m, saved, &c, what);
        inputs in;
        load_inputs(inputs_dir, &in, input_names, n_inputs);
        tm_tensor *want = run_substituted(src, &c, &in), *have = run(saved, &in);
        tm_tensor *before = run(m, &in);
        CHECK(want && same_tensor(want, have), "%s: the saved model's output differs from the "
              "substituted run", what);
        CHECK(before && want && !same_tensor(before, want), "%s: the change does not change the "
              "output (the test would prove nothing)", what);
        tm_tensor_free(want);
        tm_tensor_free(have);
        tm_tensor_free(before);
        free_inputs(&in);
        int aligned;
        uint64_t align = opts ? opts->external_alignment : 64;
        int n_ext = count_external(dst, align ? align : 64, &aligned);
        CHECK(want_external ? n_ext > 0 : n_ext == 0, "%s: %d external initializers", what, n_ext);
        CHECK(aligned, "%s: an external offset is not a multiple of %llu", what,
              (unsigned long long)align);
    }
    /* Substituting the original values back gives the original file again (when the
     * replaced initializers were raw_data, which is what a replacement writes). */
    if (saved && back_identical) {
        const tm_tensor *orig[16];
        for (int k = 0; k < c.n; k++) orig[k] = init_of(m, c.names[k])->tensor;
        char back[600];
        out_path(back, sizeof back, "back.onnx");
        CHECK(tm_model_save(saved, back, c.n, c.names, orig, opts, &err) == TM_OK, "%s", err.message);
        CHECK(same_file(src, back), "%s: saving the original values back does not give the "
              "original file", what);
        unlink(back);
    }
    tm_model_free(saved);
    tm_model_free(m);
    free_change(&c);
}

static const char *const BERT_INPUTS[] = {"input_ids", "attention_mask", "token_type_ids"};

static void test_replacements(void) {
    const char *seqcls[] = {"model.classifier.weight", "model.classifier.bias",
                            "model.bert.embeddings.word_embeddings.weight", "onnx::MatMul_336",
                            "model.bert.embeddings.LayerNorm.weight"};
    tm_save_options never, always, auto_small;
    tm_save_options_default(&never);
    never.external_data = TM_EXTERNAL_NEVER;
    tm_save_options_default(&always);
    always.external_data = TM_EXTERNAL_ALWAYS;
    always.external_alignment = 256;
    tm_save_options_default(&auto_small);
    auto_small.external_threshold = 100000; /* the model is 263 KB: over it */
    test_replace(TINY "/bert-seqcls/model.onnx", seqcls, 5, TINY "/bert-seqcls/model.cases/default/inputs",
                 BERT_INPUTS, 3, NULL, "seqcls.onnx", 0, 1, "bert-seqcls inline");
    test_replace(TINY "/bert-seqcls/model.onnx", seqcls, 5, TINY "/bert-seqcls/model.cases/default/inputs",
                 BERT_INPUTS, 3, &always, "seqcls_always.onnx", 1, 0, "bert-seqcls ALWAYS");
    test_replace(TINY "/bert-seqcls/model.onnx", seqcls, 5, TINY "/bert-seqcls/model.cases/default/inputs",
                 BERT_INPUTS, 3, &auto_small, "seqcls_auto.onnx", 1, 0, "bert-seqcls AUTO over threshold");
    const char *ext[] = {"model.embeddings.word_embeddings.weight", "onnx::MatMul_330",
                         "model.embeddings.LayerNorm.bias"};
    test_replace(TINY "/bert-external-data/model.onnx", ext, 3,
                 TINY "/bert-external-data/model.cases/default/inputs", BERT_INPUTS, 3, NULL,
                 "bert_ext.onnx", 1, 0, "bert-external-data AUTO (kept external)");
    test_replace(TINY "/bert-external-data/model.onnx", ext, 3,
                 TINY "/bert-external-data/model.cases/default/inputs", BERT_INPUTS, 3, &never,
                 "bert_ext_inline.onnx", 0, 0, "bert-external-data NEVER");
    const char *feat[] = {"W", "B"};
    const char *const X[] = {"x"};
    test_replace(WDATA "/features.onnx", feat, 2, WDATA "/inputs", X, 1, NULL, "features.onnx", 0,
                 0, "features inline (B was float_data)");
    test_replace(WDATA "/features.onnx", feat, 1, WDATA "/inputs", X, 1, NULL, "features_w.onnx", 0,
                 1, "features inline, W only");
    test_replace(WDATA "/features_ext.onnx", feat, 2, WDATA "/inputs", X, 1, NULL,
                 "features_ext.onnx", 1, 0, "features external (nested tensors rewritten)");
    test_replace(WDATA "/features_ext.onnx", feat, 2, WDATA "/inputs", X, 1, &never,
                 "features_inline.onnx", 0, 0, "features external saved inline");
    /* the inline copy has no external reference left: it loads from memory alone */
    char p[600];
    out_path(p, sizeof p, "features_inline.onnx");
    uint8_t *buf = NULL;
    size_t size = 0;
    tm_model *m = NULL;
    tm_error err;
    CHECK(read_all(p, &buf, &size) && tm_model_load_buffer(buf, size, NULL, NULL, &m, &err) == TM_OK,
          "features_inline.onnx needs its folder: %s", err.message);
    tm_model_free(m);
    free(buf);
}

/* int4 (packed two per byte, an odd count): the new values come back exactly. */
static void test_int4(void) {
    tm_model *m = load(WDATA "/int4.onnx");
    if (!m) return;
    const tm_tensor *q = init_of(m, "q")->tensor;
    tm_tensor *v = tm_tensor_clone(q, NULL);
    const int8_t want[7] = {7, -8, 3, -2, 0, 6, -7};
    memcpy(v->data, want, 7);
    char dst[600];
    out_path(dst, sizeof dst, "int4.onnx");
    const char *names[] = {"q"};
    const tm_tensor *vals[] = {v};
    tm_error err;
    CHECK(tm_model_save(m, dst, 1, names, vals, NULL, &err) == TM_OK, "int4: %s", err.message);
    tm_model *back = load(dst);
    CHECK(back && same_tensor(init_of(back, "q")->tensor, v), "int4 values after the round trip");
    inputs none = {0};
    tm_tensor *y = back ? run(back, &none) : NULL;
    int ok = y != NULL;
    for (int k = 0; y && k < 7; k++) ok &= ((const float *)y->data)[k] == (float)want[k];
    CHECK(ok, "int4 model output after the round trip");
    tm_tensor_free(y);
    tm_model_free(back);
    tm_model_free(m);
    tm_tensor_free(v);
}

/* Saving over the file the model was loaded from (and its data file). */
static void test_overwrite(void) {
    char src[600], data[600];
    out_path(src, sizeof src, "over.onnx");
    out_path(data, sizeof data, "over.onnx_data");
    tm_model *orig = load(TINY "/bert-seqcls/model.onnx");
    tm_error err;
    tm_save_options always;
    tm_save_options_default(&always);
    always.external_data = TM_EXTERNAL_ALWAYS;
    CHECK(orig && tm_model_save(orig, src, 0, NULL, NULL, &always, &err) == TM_OK, "%s", err.message);
    tm_model *m = load(src);
    if (!m || !orig) {
        tm_model_free(orig);
        tm_model_free(m);
        return;
    }
    const char *names[] = {"model.classifier.weight"};
    tm_tensor *v = perturbed(init_of(m, names[0])->tensor, 0.5);
    const tm_tensor *vals[] = {v};
    inputs in;
    load_inputs(TINY "/bert-seqcls/model.cases/default/inputs", &in, BERT_INPUTS, 3);
    tm_tensor *before = run(m, &in);
    CHECK(tm_model_save(m, src, 1, names, vals, NULL, &err) == TM_OK, "overwrite: %s", err.message);
    tm_tensor *still = run(m, &in); /* the loaded model keeps its old mappings */
    CHECK(same_tensor(before, still), "the loaded model changed when its file was replaced");
    tm_model *again = load(src);
    CHECK(again && same_tensor(init_of(again, names[0])->tensor, v), "overwritten file's value");
    CHECK(again && init_of(again, "model.bert.embeddings.word_embeddings.weight") &&
          same_tensor(init_of(again, "model.bert.embeddings.word_embeddings.weight")->tensor,
                      init_of(orig, "model.bert.embeddings.word_embeddings.weight")->tensor),
          "an external tensor of the overwritten model lost its bytes");
    tm_tensor_free(before);
    tm_tensor_free(still);
    tm_tensor_free(v);
    free_inputs(&in);
    tm_model_free(again);
    tm_model_free(m);
    tm_model_free(orig);
    unlink(src);
    unlink(data);
}

/* ---- Errors ---------------------------------------------------------------------------- */

static void expect_save_fails(tm_model *m, const char *dst, int n, const char *const *names,
                              const tm_tensor *const *vals, const tm_save_options *o,
                              tm_status want, const char *needle, const char *value,
                              const char *what) {
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status st = tm_model_save(m, dst, n, names, vals, o, &err);
    CHECK(st == want && strstr(err.message, needle) && (!value || !strcmp(err.value, value)),
          "%s: status %d '%s' value '%s' (expected %d with '%s')", what, st, err.message,
          err.value, want, needle);
    CHECK(access(dst, F_OK) != 0 && no_temp_files(), "%s: a file was left behind", what);
}

static void test_errors(void) {
    tm_model *m = load(TINY "/bert-seqcls/model.onnx");
    if (!m) return;
    char dst[600];
    out_path(dst, sizeof dst, "error.onnx");
    const tm_tensor *w = init_of(m, "model.classifier.weight")->tensor;
    const int64_t d[] = {32, 3};
    tm_tensor *wrong_shape = tm_tensor_alloc(TM_FLOAT, 2, d, NULL);
    tm_tensor *wrong_dtype = tm_tensor_alloc(TM_DOUBLE, w->rank, w->dims, NULL);
    tm_tensor *ok = tm_tensor_clone(w, NULL);
    const char *unknown[] = {"model.nope"}, *cls[] = {"model.classifier.weight"};
    const char *twice[] = {"model.classifier.weight", "model.classifier.weight"};
    const tm_tensor *v_ok[] = {ok, ok}, *v_shape[] = {wrong_shape}, *v_dtype[] = {wrong_dtype};
    expect_save_fails(m, dst, 1, unknown, v_ok, NULL, TM_ERR_NOT_FOUND, "'model.nope'",
                      "model.nope", "unknown name");
    expect_save_fails(m, dst, 1, cls, v_shape, NULL, TM_ERR_SHAPE, "float32 [3,32]; its new "
                      "value is float32 [32,3]", "model.classifier.weight", "shape");
    expect_save_fails(m, dst, 1, cls, v_dtype, NULL, TM_ERR_DTYPE, "float64",
                      "model.classifier.weight", "dtype");
    expect_save_fails(m, dst, 2, twice, v_ok, NULL, TM_ERR_INVALID_ARGUMENT, "twice", NULL, "twice");
    const char *null_name[] = {NULL};
    expect_save_fails(m, dst, 1, null_name, v_ok, NULL, TM_ERR_INVALID_ARGUMENT, "NULL", NULL,
                      "NULL name");
    tm_save_options o;
    tm_save_options_default(&o);
    o.external_alignment = 48;
    expect_save_fails(m, dst, 1, cls, v_ok, &o, TM_ERR_INVALID_ARGUMENT, "power of two", NULL,
                      "alignment");
    tm_save_options_default(&o);
    o.external_file = "sub/data.bin";
    expect_save_fails(m, dst, 1, cls, v_ok, &o, TM_ERR_INVALID_ARGUMENT, "file name", NULL,
                      "external_file with a folder");
    o.external_file = "error.onnx";
    expect_save_fails(m, dst, 1, cls, v_ok, &o, TM_ERR_INVALID_ARGUMENT, "file name", NULL,
                      "external_file named like the model");
    tm_save_options_default(&o);
    o.external_data = (tm_external_data)9;
    expect_save_fails(m, dst, 1, cls, v_ok, &o, TM_ERR_INVALID_ARGUMENT, "external_data", NULL,
                      "mode");
    tm_error err;
    CHECK(tm_model_save(m, "/nonexistent-dir/m.onnx", 1, cls, v_ok, NULL, &err) == TM_ERR_IO &&
          strstr(err.message, "nonexistent-dir"), "missing folder: %s", err.message);
    CHECK(tm_model_save(NULL, dst, 0, NULL, NULL, NULL, &err) == TM_ERR_INVALID_ARGUMENT, "NULL model");
    tm_model *f = load(WDATA "/features.onnx");
    if (f) {
        const char *sparse[] = {"S"};
        const tm_tensor *sv[] = {init_of(f, "S")->tensor};
        expect_save_fails(f, dst, 1, sparse, sv, NULL, TM_ERR_UNSUPPORTED, "sparse", "S", "sparse");
        const char *sub[] = {"T"}; /* a branch's initializer, not the main graph's */
        expect_save_fails(f, dst, 1, sub, sv, NULL, TM_ERR_NOT_FOUND, "main graph", "T", "subgraph");
    }
    tm_model_free(f);
    tm_tensor_free(wrong_shape);
    tm_tensor_free(wrong_dtype);
    tm_tensor_free(ok);
    tm_model_free(m);
}

/* ---- Half-precision parameters trained in float32 ---------------------------------------- */

/* float16 bits of x, computed here from the definition (round to nearest, ties to even;
 * normal range only), not by the converter under test. */
static uint16_t f16_reference(float x) {
    double a = fabs((double)x);
    int e = (int)floor(log2(a));
    double ulp = ldexp(1.0, e - 10), q = a / ulp, r = floor(q);
    if (q - r > 0.5 || (q - r == 0.5 && fmod(r, 2.0) != 0)) r += 1;
    if (r == 2048) r = 1024, e++;
    return (uint16_t)((x < 0 ? 0x8000 : 0) | ((e + 15) << 10) | ((int)r - 1024));
}

/* tm_load_options.compute_type f32 stores float16 parameters in float32; tm_model_save
 * takes them so and writes float16 again, rounded to nearest even, and the saved model
 * computes what the trained one does with those rounded weights. */
/* Element k of 16-bit data that may lie unaligned in the mapped file. */
static uint16_t u16_at(const void *data, int64_t k) {
    uint16_t v;
    memcpy(&v, (const char *)data + 2 * k, 2);
    return v;
}

static void test_half_params(void) {
    const char *src = TINY "/bert/model_fp16.onnx";
    tm_load_options lo;
    tm_load_options_default(&lo);
    lo.compute_type = TM_FLOAT;
    lo.trainable = 1;
    tm_model *m = NULL;
    tm_error err;
    if (tm_model_load(src, &lo, &m, &err) != TM_OK) {
        check(0, "loading %s: %s", src, err.message);
        return;
    }
    int n = tm_model_n_params(m), halves = 0;
    const char **names = calloc((size_t)n + 1, sizeof *names);
    const tm_tensor **values = calloc((size_t)n + 1, sizeof *values);
    for (int i = 0; i < n; i++) {
        tm_param_desc d;
        tm_model_param(m, i, &d);
        names[i] = d.name;
        values[i] = d.tensor;
        halves += init_of(m, d.name)->tensor->dtype == TM_FLOAT16;
        CHECK(d.dtype == TM_FLOAT, "parameter '%s' is stored as %s, not float32", d.name,
              tm_dtype_name(d.dtype));
        /* moves no float16 can hold: every element needs rounding */
        float *x = d.tensor->data;
        for (int64_t k = 0; k < tm_tensor_numel(d.tensor); k++)
            x[k] = x[k] * (1.0f + 1e-4f * (float)((k % 5) - 2)) + 3e-4f;
    }
    CHECK(n > 0 && halves == n, "%d of %d parameters are float16 initializers", halves, n);
    /* Ties go to even: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10, 1 + 3 * 2^-11
     * halfway between 1 + 2^-10 and 1 + 2^-9. */
    float *first = ((tm_tensor *)values[0])->data;
    first[0] = 1.0f + 0x1p-11f;
    first[1] = 1.0f + 3 * 0x1p-11f;
    char dst[600];
    out_path(dst, sizeof dst, "half_params.onnx");
    CHECK(tm_model_save(m, dst, n, names, values, NULL, &err) == TM_OK, "save: %s", err.message);
    tm_model *saved = load(dst);
    int wrong = 0;
    for (int i = 0; saved && i < n; i++) {
        const tm_initializer *in = init_of(saved, names[i]);
        if (!in || in->tensor->dtype != TM_FLOAT16) {
            check(0, "saved '%s' is not float16", names[i]);
            continue;
        }
        const void *h = in->tensor->data;
        const float *x = values[i]->data;
        for (int64_t k = 0; k < tm_tensor_numel(values[i]); k++)
            if (u16_at(h, k) != (x[k] == 0 || fabsf(x[k]) < 0x1p-14f ? tm_f32_to_f16(x[k]) : f16_reference(x[k])))
                wrong++;
    }
    CHECK(saved && wrong == 0, "%d saved float16 elements are not the float32 values rounded "
          "to nearest even", wrong);
    if (saved) {
        const void *h = init_of(saved, names[0])->tensor->data;
        CHECK(u16_at(h, 0) == 0x3C00 && u16_at(h, 1) == 0x3C02, "ties: 0x%04x 0x%04x, want "
              "0x3c00 0x3c02", u16_at(h, 0), u16_at(h, 1));
    }
    /* Run: the saved file (computed in f32) against the trained model with the rounded
     * weights put into its store. */
    tm_model *saved32 = NULL;
    tm_load_options lo32;
    tm_load_options_default(&lo32);
    lo32.compute_type = TM_FLOAT;
    CHECK(tm_model_load(dst, &lo32, &saved32, &err) == TM_OK, "loading %s: %s", dst, err.message);
    for (int i = 0; saved && i < n; i++) {
        const void *h = init_of(saved, names[i])->tensor->data;
        float *x = ((tm_tensor *)values[i])->data;
        for (int64_t k = 0; k < tm_tensor_numel(values[i]); k++) x[k] = tm_f16_to_f32(u16_at(h, k));
    }
    inputs in;
    load_inputs(TINY "/bert/model_fp16.cases/default/inputs", &in, BERT_INPUTS, 3);
    tm_tensor *want = run(m, &in), *have = saved32 ? run(saved32, &in) : NULL;
    double diff = 0;
    for (int64_t k = 0; want && have && k < tm_tensor_numel(want); k++)
        diff = fmax(diff, fabs(tm_load_f64(want->data, want->dtype, (size_t)k) -
                               tm_load_f64(have->data, have->dtype, (size_t)k)));
    CHECK(want && have && tm_same_shape(want, have) && diff == 0, "the saved half model "
          "differs from the trained one by %.3g", diff);
    tm_tensor_free(want);
    tm_tensor_free(have);
    free_inputs(&in);
    /* A float64 value for a float16 initializer is still refused. */
    tm_tensor *wide = tm_tensor_alloc(TM_DOUBLE, values[0]->rank, values[0]->dims, NULL);
    memset(wide->data, 0, wide->nbytes);
    const tm_tensor *w[1] = {wide};
    out_path(dst, sizeof dst, "half_refused.onnx");
    CHECK(tm_model_save(m, dst, 1, names, w, NULL, &err) == TM_ERR_DTYPE &&
          strstr(err.message, "float16"), "a float64 value for a float16 initializer: %s",
          err.message);
    tm_tensor_free(wide);
    tm_model_free(saved32);
    tm_model_free(saved);
    tm_model_free(m);
    free(names);
    free(values);
}

static void remove_outputs(void) {
    DIR *d = opendir(out_dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[800];
        snprintf(p, sizeof p, "%s/%s", out_dir, e->d_name);
        unlink(p);
    }
    closedir(d);
    rmdir(out_dir);
}

int main(void) {
    const char *keep = getenv("TM_WRITE_TEST_OUT");
    if (keep && *keep) {
        snprintf(out_dir, sizeof out_dir, "%s", keep);
        mkdir(out_dir, 0700);
    } else {
        snprintf(out_dir, sizeof out_dir, "%s/tm_write_%d",
                 getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
        if (mkdir(out_dir, 0700) != 0) {
            printf("cannot create %s\n", out_dir);
            return 1;
        }
    }
    test_identity_all_tiny();
    test_identity_external();
    test_replacements();
    test_int4();
    test_overwrite();
    test_errors();
    test_half_params();
    if (!(keep && *keep)) remove_outputs();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
