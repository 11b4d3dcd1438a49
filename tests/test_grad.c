/* Gradients of whole models through the public API: trainable loading and the parameter
 * list, value-and-gradient plans against central finite differences in double precision
 * (the tiny BERT sequence classifier rewritten to float64 by tools/onnx_to_f64.py, and a
 * small convolutional net of tests/data/grad), plans against eager runs, float32 against
 * float64, every loss, updates in place between runs, no allocation while a gradient plan
 * runs, and the errors (quantized weights, graph breaks, targets, names).
 * The primitives' own rules are tests/test_grad_prims.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "transmuter.h"
#include "../src/core/tensor.h"
#include "../src/io/npy.h"

#define CHECK_RNG_SEED 0x51ed270b27a4c3d1ULL
#include "check.h"

#define SEQCLS "tests/data/tiny/bert-seqcls"
#define SEQCLS_F64 "tests/data/grad/bert-seqcls-f64.onnx"
#define CONVNET "tests/data/grad/convnet.onnx"
#define NONZERO "tests/data/grad/nonzero.onnx"

/* ---- Counting allocations (not under sanitizers) ------------------------------------ */
#include "count_allocs.h"

static long injected_allocs, injected_frees;
static void *count_alloc(void *user, size_t size) {
    (void)user;
    injected_allocs++;
    void *p = NULL;
    return posix_memalign(&p, 64, size ? size : 1) == 0 ? p : NULL;
}
static void count_free(void *user, void *p) {
    (void)user;
    if (p) injected_frees++;
    free(p);
}

/* ---- Helpers ------------------------------------------------------------------------ */

static tm_tensor *load_npy(const char *dir, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.npy", dir, name);
    tm_tensor *t = NULL;
    tm_error err;
    if (tm_npy_read(path, &t, &err) != TM_OK) printf("cannot read %s: %s\n", path, err.message);
    return t;
}

static tm_model *load(const char *path, int trainable, int n_names, const char *const *names,
                      const tm_allocator *alloc) {
    tm_load_options lo;
    tm_load_options_default(&lo);
    lo.trainable = trainable;
    lo.n_trainable_names = n_names;
    lo.trainable_names = names;
    lo.allocator = alloc;
    lo.threads = 1;
    tm_model *m = NULL;
    tm_error err;
    if (tm_model_load(path, &lo, &m, &err) != TM_OK) printf("FAIL load %s: %s\n", path, err.message);
    return m;
}

static double at(const tm_tensor *t, int64_t i) { return tm_load_f64(t->data, t->dtype, (size_t)i); }

/* The BERT inputs plus labels (2 sequences, 3 classes). */
typedef struct batch {
    const char *names[16];
    const tm_tensor *in[16];
    int n;
} batch;

static batch bert_batch(tm_tensor **own) {
    batch b = {{"input_ids", "attention_mask", "token_type_ids", "target"}, {0}, 4};
    for (int i = 0; i < 3; i++) own[i] = load_npy(SEQCLS "/model.cases/default/inputs", b.names[i]);
    int64_t dims[1] = {2};
    own[3] = tm_tensor_new(TM_INT64, 1, dims);
    ((int64_t *)own[3]->data)[0] = 2;
    ((int64_t *)own[3]->data)[1] = 0;
    for (int i = 0; i < 4; i++) b.in[i] = own[i];
    return b;
}

static tm_grad_options ce_options(void) {
    tm_grad_options go;
    tm_grad_options_default(&go);
    go.loss = TM_LOSS_CROSS_ENTROPY;
    return go;
}

/* Runs a gradient plan once: outputs[] get new tensors (the caller frees them). */
static tm_status plan_grads(tm_model *m, const batch *b, const tm_grad_options *go,
                            tm_tensor **outs, int *n_out, tm_error *err) {
    tm_plan *p = NULL;
    tm_session *s = NULL;
    tm_status st = tm_grad_plan_create(m, b->n, b->names, b->in, NULL, go, &p, err);
    if (st == TM_OK) st = tm_session_create(p, &s, err);
    if (st == TM_OK) {
        *n_out = tm_plan_n_outputs(p);
        for (int i = 0; i < *n_out; i++) outs[i] = NULL;
        st = tm_session_run(s, b->n, b->names, b->in, outs, err);
    }
    tm_session_free(s);
    tm_plan_free(p);
    return st;
}

/* The loss of a forward pass at the current parameters (a plan: parameters are read
 * from the store at run time, so no new plan is needed after a change). */
static double loss_now(tm_session *s, const batch *b) {
    tm_tensor *out[64] = {0};
    tm_error err;
    tm_status st = tm_session_run(s, b->n, b->names, b->in, out, &err);
    double v = st == TM_OK ? at(out[0], 0) : NAN;
    if (st != TM_OK) printf("FAIL forward: %s\n", err.message);
    for (int i = 0; i < 64 && out[i]; i++) tm_tensor_free(out[i]);
    return v;
}

/* ---- Finite differences through a whole model ------------------------------------- */

/* For every parameter: `per_param` elements (all of small ones) perturbed by +-h in the
 * store, the loss re-run through a plan that computes only the loss (a gradient plan of
 * one parameter, its loss output read), against the gradient plan's value. */
static void check_fd(tm_model *m, const batch *b, const tm_grad_options *go, double h,
                     double tol, int per_param, const char *label) {
    tm_tensor *g[64] = {0};
    int n_out = 0;
    tm_error err;
    tm_status st = plan_grads(m, b, go, g, &n_out, &err);
    check(st == TM_OK, "%s: gradient plan: %s", label, err.message);
    if (st != TM_OK) return;
    tm_plan *lp = NULL;
    tm_session *ls = NULL;
    st = tm_grad_plan_create(m, b->n, b->names, b->in, NULL, go, &lp, &err);
    if (st == TM_OK) st = tm_session_create(lp, &ls, &err);
    check(st == TM_OK, "%s: loss plan: %s", label, err.message);
    int n_params = tm_plan_n_grads(lp), bad = 0, checked = 0;
    double worst = 0;
    for (int j = 0; st == TM_OK && j < tm_plan_n_grads(lp); j++) {
        tm_param_desc d;
        tm_model_param(m, tm_plan_grad_param(lp, j), &d);
        const tm_tensor *gj = g[1 + j];
        int64_t n = tm_tensor_numel(d.tensor);
        double scale = 1e-3;
        for (int64_t e = 0; e < n; e++) scale = fmax(scale, fabs(at(gj, e)));
        int64_t count = n <= per_param ? n : per_param;
        for (int64_t q = 0; q < count; q++) {
            int64_t e = n <= per_param ? q : (int64_t)(rng_next() % (uint64_t)n);
            double keep = at(d.tensor, e);
            tm_store_f64(d.tensor->data, d.dtype, (size_t)e, keep + h);
            double up = loss_now(ls, b);
            tm_store_f64(d.tensor->data, d.dtype, (size_t)e, keep - h);
            double down = loss_now(ls, b);
            tm_store_f64(d.tensor->data, d.dtype, (size_t)e, keep);
            double fd = (up - down) / (2 * h), an = at(gj, e);
            double rel = fabs(fd - an) / scale;
            checked++;
            if (rel > worst) worst = rel;
            if (rel > tol && bad++ < 5)
                printf("FAIL %s: d loss / d %s[%lld] = %.10g, finite differences %.10g (scale %.3g)\n",
                       label, d.name, (long long)e, an, fd, scale);
        }
    }
    check(bad == 0 && checked > 0, "%s: %d of %d gradient elements off finite differences "
          "(%d parameters)", label, bad, checked, n_params);
    printf("%s: %d elements of %d parameters, worst relative error %.2e\n", label, checked,
           n_params, worst);
    tm_session_free(ls);
    tm_plan_free(lp);
    for (int i = 0; i < n_out; i++) tm_tensor_free(g[i]);
}

/* Plan against eager, output by output. */
static void check_eager_vs_plan(tm_model *m, const batch *b, const tm_grad_options *go,
                                double tol, const char *label) {
    tm_tensor *pg[80] = {0}, *eg[80] = {0};
    int n_out = 0;
    tm_error err;
    tm_status st = plan_grads(m, b, go, pg, &n_out, &err);
    check(st == TM_OK, "%s: plan: %s", label, err.message);
    tm_status se = tm_run_eager_grad(m, b->n, b->names, b->in, go, eg, &err);
    check(se == TM_OK, "%s: eager: %s", label, err.message);
    int bad = 0;
    double worst = 0;
    for (int i = 0; st == TM_OK && se == TM_OK && i < n_out; i++) {
        if (!pg[i] || !eg[i] || tm_tensor_numel(pg[i]) != tm_tensor_numel(eg[i]) ||
            pg[i]->dtype != eg[i]->dtype) {
            bad++;
            continue;
        }
        double scale = 1e-6;
        for (int64_t e = 0; e < tm_tensor_numel(pg[i]); e++) scale = fmax(scale, fabs(at(eg[i], e)));
        for (int64_t e = 0; e < tm_tensor_numel(pg[i]); e++) {
            double rel = fabs(at(pg[i], e) - at(eg[i], e)) / scale;
            if (rel > worst) worst = rel;
            if (rel > tol) {
                bad++;
                break;
            }
        }
    }
    check(bad == 0, "%s: %d of %d outputs differ between plan and eager (worst %.3g)", label,
          bad, n_out, worst);
    for (int i = 0; i < 80; i++) {
        tm_tensor_free(pg[i]);
        tm_tensor_free(eg[i]);
    }
}

/* ---- Tests ---------------------------------------------------------------------------- */

static void test_params(void) {
    tm_model *m = load(SEQCLS "/model.onnx", 1, 0, NULL, NULL);
    if (!m) return;
    check(tm_model_n_params(m) == 21, "tiny BERT has 21 float initializers, %d parameters",
          tm_model_n_params(m));
    tm_param_desc d;
    int ok = tm_model_param(m, tm_model_param_index(m, "model.classifier.weight"), &d) == TM_OK;
    check(ok && d.rank == 2 && d.dims[0] == 3 && d.dims[1] == 32 && d.dtype == TM_FLOAT &&
              tm_tensor_numel(d.tensor) == 96,
          "the classifier weight is a (3, 32) float parameter");
    check(tm_model_param(m, 99, &d) == TM_ERR_INVALID_ARGUMENT, "parameter 99 does not exist");
    /* Without a custom allocator the parameters lie in one slab, in load order, each at a
     * cache line, none overlapping (and optimizers write them in place). */
    uintptr_t end = 0, first = 0;
    size_t rounded = 0;
    int in_order = 1;
    for (int i = 0; i < tm_model_n_params(m); i++) {
        if (tm_model_param(m, i, &d) != TM_OK) break;
        uintptr_t at = (uintptr_t)tm_tensor_data(d.tensor);
        size_t bytes = tm_tensor_nbytes(d.tensor);
        if (i == 0) first = at;
        in_order &= at % 64 == 0 && at >= end;
        end = at + bytes;
        rounded += (bytes + 63) / 64 * 64;
    }
    check(in_order && end - first <= rounded && end - first + 64 > rounded,
          "parameters in one slab: aligned, in order, %zu bytes over %zu rounded",
          (size_t)(end - first), rounded);
    tm_model_free(m);

    const char *some[] = {"model.classifier.*", "model.bert.pooler.dense.weight"};
    m = load(SEQCLS "/model.onnx", 1, 2, some, NULL);
    check(m && tm_model_n_params(m) == 3, "a glob and a name select 3 parameters (%d)",
          m ? tm_model_n_params(m) : -1);
    tm_model_free(m);
    m = load(SEQCLS "/model.onnx", 0, 0, NULL, NULL);
    check(m && tm_model_n_params(m) == 0, "without trainable there are no parameters");
    tm_grad_options go = ce_options();
    tm_plan *p = NULL;
    tm_error err;
    tm_tensor *own[4];
    batch b = bert_batch(own);
    check(tm_grad_plan_create(m, b.n, b.names, b.in, NULL, &go, &p, &err) == TM_ERR_INVALID_ARGUMENT &&
              strstr(err.message, "trainable"),
          "a gradient plan of a model without parameters says how to get some: %s", err.message);
    tm_model_free(m);

    struct { const char *model, *name, *needle; tm_status code; } bad[] = {
        {SEQCLS "/model.onnx", "no.such.weight", "no initializer named", TM_ERR_NOT_FOUND},
        {SEQCLS "/model.onnx", "*.nothing.*", "selects no float initializer", TM_ERR_NOT_FOUND},
        /* A MatMulNBits weight of the q4 export, its packed bits and its scales. */
        {"tests/data/tiny/bert/model_q4.onnx", "onnx_MatMul_330_Q4_1",
         "quantized weights have no gradient", TM_ERR_UNSUPPORTED},
        {"tests/data/tiny/bert/model_q4.onnx", "onnx_MatMul_330_scales_2",
         "input 2 of MatMulNBits", TM_ERR_UNSUPPORTED},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        tm_load_options lo;
        tm_load_options_default(&lo);
        lo.trainable = 1;
        lo.n_trainable_names = 1;
        lo.trainable_names = &bad[i].name;
        tm_model *x = NULL;
        tm_status st = tm_model_load(bad[i].model, &lo, &x, &err);
        check(st == bad[i].code && strstr(err.message, bad[i].needle) && !x,
              "trainable '%s': status %d, message '%s'", bad[i].name, (int)st, err.message);
        tm_model_free(x);
    }
    /* Loaded with every float initializer trainable, the q4 export leaves its quantized
     * weights out, and asking a gradient for one names why. */
    tm_model *q = load("tests/data/tiny/bert/model_q4.onnx", 1, 0, NULL, NULL);
    check(q && tm_model_param_index(q, "onnx_MatMul_330_scales_2") < 0 &&
              tm_model_param_index(q, "model.embeddings.LayerNorm.weight") >= 0,
          "quantized scales are not parameters, the layer norm weights are");
    const char *ask[] = {"onnx_MatMul_330_scales_2"};
    go.n_params = 1;
    go.params = ask;
    check(q && tm_grad_plan_create(q, b.n, b.names, b.in, NULL, &go, &p, &err) == TM_ERR_UNSUPPORTED &&
              strstr(err.message, "quantized weights have no gradient"),
          "a gradient for a quantized weight is refused: %s", err.message);
    tm_model_free(q);
    for (int i = 0; i < 4; i++) tm_tensor_free(own[i]);
}

/* The tiny BERT classifier with a cross-entropy loss: every parameter's gradient against
 * finite differences in float64, plans against eager runs, float32 against float64. */
static void test_bert(void) {
    tm_tensor *own[4];
    batch b = bert_batch(own);
    tm_grad_options go = ce_options();
    tm_model *m64 = load(SEQCLS_F64, 1, 0, NULL, NULL);
    tm_model *m32 = load(SEQCLS "/model.onnx", 1, 0, NULL, NULL);
    if (m64) {
        /* h = 1e-5: truncation (h^2) and rounding (1e-16 / h) both below 1e-9. */
        check_fd(m64, &b, &go, 1e-5, 1e-6, 6, "bert float64 cross-entropy");
        check_eager_vs_plan(m64, &b, &go, 1e-9, "bert float64 cross-entropy");
    }
    if (m32) check_eager_vs_plan(m32, &b, &go, 1e-4, "bert float32 cross-entropy");
    if (m64 && m32) {
        /* Same weights (float32 values held exactly in float64): float32 gradients within
         * float32 accumulation error of the float64 ones. */
        tm_tensor *g64[64] = {0}, *g32[64] = {0};
        int n64 = 0, n32 = 0, bad = 0;
        tm_error err;
        tm_status s1 = plan_grads(m64, &b, &go, g64, &n64, &err);
        tm_status s2 = plan_grads(m32, &b, &go, g32, &n32, &err);
        check(s1 == TM_OK && s2 == TM_OK && n64 == n32 && n64 == 22, "both plans: %s", err.message);
        double worst = 0;
        for (int i = 0; s1 == TM_OK && s2 == TM_OK && i < n64; i++) {
            double scale = 1e-6;
            for (int64_t e = 0; e < tm_tensor_numel(g64[i]); e++) scale = fmax(scale, fabs(at(g64[i], e)));
            for (int64_t e = 0; e < tm_tensor_numel(g64[i]); e++)
                worst = fmax(worst, fabs(at(g64[i], e) - at(g32[i], e)) / scale);
            bad += worst > 1e-3;
        }
        check(bad == 0, "float32 gradients within 1e-3 of float64 ones (worst %.2e)", worst);
        for (int i = 0; i < 64; i++) {
            tm_tensor_free(g64[i]);
            tm_tensor_free(g32[i]);
        }
    }
    tm_model_free(m64);
    tm_model_free(m32);
    for (int i = 0; i < 4; i++) tm_tensor_free(own[i]);
}

/* Frozen weights, trainable layer norms, more token rows (2 x 20) than the hidden size
 * (32): an input's cotangent by a frozen weight is then the product gy . w^T read in
 * place. The LINEAR fusion of the forward's x . w must leave that product alone (it once
 * took it for gy . w: gradients 1% off), and must not free the weight it packed while
 * the backward still reads it (it once did, for a product without a bias whose weight
 * the model owns, as small inline initializers are: gradients all wrong). Plan against
 * eager. */
static void test_frozen_weights_many_rows(void) {
    const char *pattern[1] = {"*LayerNorm*"};
    tm_model *m = load(SEQCLS "/model.onnx", 1, 1, pattern, NULL);
    if (!m) return;
    int64_t dims[2] = {2, 20}, ldims[1] = {2};
    tm_tensor *own[4] = {tm_tensor_new(TM_INT64, 2, dims), tm_tensor_new(TM_INT64, 2, dims),
                         tm_tensor_new(TM_INT64, 2, dims), tm_tensor_new(TM_INT64, 1, ldims)};
    for (int64_t i = 0; i < 40; i++) {
        ((int64_t *)own[0]->data)[i] = (int64_t)(rng_next() % 1000);
        ((int64_t *)own[1]->data)[i] = i % 20 < 17 || i < 20;   /* the second one padded */
        ((int64_t *)own[2]->data)[i] = i % 20 >= 10;
    }
    ((int64_t *)own[3]->data)[0] = 1;
    ((int64_t *)own[3]->data)[1] = 2;
    batch b = {{"input_ids", "attention_mask", "token_type_ids", "target"}, {0}, 4};
    for (int i = 0; i < 4; i++) b.in[i] = own[i];
    tm_grad_options go = ce_options();
    check_eager_vs_plan(m, &b, &go, 1e-4, "frozen weights, 40 token rows by hidden 32");
    tm_model_free(m);
    for (int i = 0; i < 4; i++) tm_tensor_free(own[i]);
}

/* A batch for the convolutional net: x (2, 3, 10, 10) and a target for "features". */
static batch conv_batch(tm_tensor **own) {
    batch b = {{"x", "target"}, {0}, 2};
    int64_t dx[4] = {2, 3, 10, 10}, dt[2] = {2, 5};
    own[0] = tm_tensor_new(TM_DOUBLE, 4, dx);
    own[1] = tm_tensor_new(TM_DOUBLE, 2, dt);
    for (int64_t i = 0; i < 600; i++) ((double *)own[0]->data)[i] = uniform(-1, 1);
    for (int64_t i = 0; i < 10; i++) ((double *)own[1]->data)[i] = uniform(-0.5, 0.5);
    b.in[0] = own[0];
    b.in[1] = own[1];
    return b;
}

/* Convolutions, pools, pads, strided and reversed slices through a plan, in float64. */
static void test_convnet(void) {
    tm_model *m = load(CONVNET, 1, 0, NULL, NULL);
    if (!m) return;
    tm_tensor *own[2];
    batch b = conv_batch(own);
    tm_grad_options go;
    tm_grad_options_default(&go);
    go.loss = TM_LOSS_OUTPUT;
    go.output = "score";
    batch only_x = b;
    only_x.n = 1;
    check_fd(m, &only_x, &go, 1e-5, 1e-6, 8, "convnet score");
    check_eager_vs_plan(m, &only_x, &go, 1e-9, "convnet score");
    go.loss = TM_LOSS_MSE;
    go.output = "features";
    go.with_outputs = 1;
    check_fd(m, &b, &go, 1e-5, 1e-6, 8, "convnet features mse");
    check_eager_vs_plan(m, &b, &go, 1e-9, "convnet features mse");
    tm_model_free(m);
    for (int i = 0; i < 2; i++) tm_tensor_free(own[i]);
}

/* log_softmax of row r of logits (2, 3) at class k, in double. */
static double log_softmax_at(const tm_tensor *logits, int r, int k) {
    double top = -INFINITY, sum = 0;
    for (int j = 0; j < 3; j++) top = fmax(top, at(logits, r * 3 + j));
    for (int j = 0; j < 3; j++) sum += exp(at(logits, r * 3 + j) - top);
    return at(logits, r * 3 + k) - top - log(sum);
}

/* Every loss on the float64 classifier: its value against the same formula applied to
 * the logits the plan delivers (with_outputs), and its gradients against finite
 * differences for the classifier's parameters. */
static void test_losses(void) {
    tm_model *m = load(SEQCLS_F64, 1, 0, NULL, NULL);
    if (!m) return;
    tm_tensor *own[4];
    batch b = bert_batch(own);
    int64_t d2[2] = {2, 3};
    tm_tensor *soft = tm_tensor_new(TM_DOUBLE, 2, d2);
    double *sv = soft->data;
    for (int i = 0; i < 6; i++) sv[i] = uniform(0, 1);
    const char *head[] = {"model.classifier.*", "model.bert.pooler.dense.weight"};
    struct { tm_loss loss; const char *name; int ignore_second; } cases[] = {
        {TM_LOSS_CROSS_ENTROPY, "cross-entropy", 0},
        {TM_LOSS_CROSS_ENTROPY, "cross-entropy with an ignored label", 1},
        {TM_LOSS_MSE, "mean squared error", 0},
        {TM_LOSS_SOFT_CROSS_ENTROPY, "soft cross-entropy", 0},
        {TM_LOSS_BCE_WITH_LOGITS, "binary cross-entropy with logits", 0},
    };
    for (size_t t = 0; t < sizeof cases / sizeof *cases; t++) {
        tm_grad_options go;
        tm_grad_options_default(&go);
        go.loss = cases[t].loss;
        go.with_outputs = 1;
        go.n_params = 2;
        go.params = head;
        batch bb = b;
        int64_t labels[2] = {2, cases[t].ignore_second ? -100 : 0};
        memcpy(own[3]->data, labels, sizeof labels);
        if (go.loss != TM_LOSS_CROSS_ENTROPY) {
            /* Probabilities for the soft losses: each row sums to 1 for soft CE. */
            for (int r = 0; r < 2; r++) {
                double z = sv[r * 3] + sv[r * 3 + 1] + sv[r * 3 + 2];
                for (int j = 0; j < 3; j++) sv[r * 3 + j] /= go.loss == TM_LOSS_SOFT_CROSS_ENTROPY ? z : 1;
            }
            bb.in[3] = soft;
        }
        tm_tensor *out[8] = {0};
        int n_out = 0;
        tm_error err;
        tm_status st = plan_grads(m, &bb, &go, out, &n_out, &err);
        check(st == TM_OK && n_out == 5, "%s: %s", cases[t].name, err.message);
        if (st != TM_OK) continue;
        const tm_tensor *y = out[4];
        double want = 0;
        for (int r = 0; r < 2; r++) {
            for (int j = 0; j < 3; j++) {
                double x = at(y, r * 3 + j), tg = sv[r * 3 + j];
                if (go.loss == TM_LOSS_MSE) want += (x - tg) * (x - tg) / 6;
                if (go.loss == TM_LOSS_SOFT_CROSS_ENTROPY) want -= tg * log_softmax_at(y, r, j) / 2;
                if (go.loss == TM_LOSS_BCE_WITH_LOGITS)
                    want += (fmax(x, 0) - x * tg + log1p(exp(-fabs(x)))) / 6;
            }
            if (go.loss == TM_LOSS_CROSS_ENTROPY && labels[r] != -100)
                want -= log_softmax_at(y, r, (int)labels[r]) / (cases[t].ignore_second ? 1 : 2);
        }
        check(out[0]->rank == 0 && fabs(at(out[0], 0) - want) <= 1e-12 * (1 + fabs(want)),
              "%s: loss %.15g, from the logits %.15g", cases[t].name, at(out[0], 0), want);
        for (int i = 0; i < 8; i++) tm_tensor_free(out[i]);
        check_fd(m, &bb, &go, 1e-5, 1e-6, 40, cases[t].name);
    }
    tm_tensor_free(soft);
    tm_model_free(m);
    for (int i = 0; i < 4; i++) tm_tensor_free(own[i]);
}

/* What a gradient plan leaves alone and what it reads anew: the parameters are read from
 * the store at run time (an SGD step in place lowers the loss, with no new plan); forward
 * plans of a trainable model see the new values too, as eager runs do. */
static void test_updates_in_place(void) {
    tm_model *m = load(SEQCLS "/model.onnx", 1, 0, NULL, NULL);
    if (!m) return;
    tm_tensor *own[4];
    batch b = bert_batch(own);
    tm_grad_options go = ce_options();
    tm_plan *p = NULL, *fwd = NULL;
    tm_session *s = NULL, *fs = NULL;
    tm_error err;
    tm_status st = tm_grad_plan_create(m, b.n, b.names, b.in, NULL, &go, &p, &err);
    if (st == TM_OK) st = tm_session_create(p, &s, &err);
    if (st == TM_OK) st = tm_plan_create(m, 3, b.names, b.in, NULL, &fwd, &err);
    if (st == TM_OK) st = tm_session_create(fwd, &fs, &err);
    check(st == TM_OK, "plans of a trainable model: %s", err.message);
    if (st != TM_OK) goto done;
    double losses[4];
    for (int step = 0; step < 4; step++) {
        st = tm_session_run(s, b.n, b.names, b.in, NULL, &err);
        if (st != TM_OK) break;
        losses[step] = at(tm_session_result(s, 0), 0);
        for (int j = 0; j < tm_plan_n_grads(p); j++) {
            tm_param_desc d;
            tm_model_param(m, tm_plan_grad_param(p, j), &d);
            const tm_tensor *g = tm_session_result(s, 1 + j);
            float *w = d.tensor->data;
            const float *gv = tm_tensor_data_const(g);
            for (int64_t e = 0; e < tm_tensor_numel(d.tensor); e++) w[e] -= 0.5f * gv[e];
        }
    }
    check(st == TM_OK && losses[1] < losses[0] && losses[2] < losses[1] && losses[3] < losses[2],
          "SGD steps in place lower the loss: %.6f %.6f %.6f %.6f", losses[0], losses[1],
          losses[2], losses[3]);
    /* The forward plan made before the steps sees the new parameters, as eager runs do. */
    tm_tensor *planned[1] = {NULL}, *eager[1] = {NULL};
    st = tm_session_run(fs, 3, b.names, b.in, planned, &err);
    if (st == TM_OK) st = tm_run_eager(m, 3, b.names, b.in, eager, NULL, &err);
    check(st == TM_OK, "forward after the updates: %s", err.message);
    if (st == TM_OK) {
        double diff = 0;
        for (int i = 0; i < 6; i++) diff = fmax(diff, fabs(at(planned[0], i) - at(eager[0], i)));
        tm_tensor *ref = load_npy(SEQCLS "/model.cases/default/ort", "logits");
        double moved = 0;
        for (int i = 0; ref && i < 6; i++) moved = fmax(moved, fabs(at(planned[0], i) - at(ref, i)));
        check(diff < 1e-5 && moved > 1e-3, "plan and eager agree after the updates (%.2g) and "
              "both moved away from the exported model's logits (%.2g)", diff, moved);
        tm_tensor_free(ref);
    }
    tm_tensor_free(planned[0]);
    tm_tensor_free(eager[0]);
done:
    tm_session_free(s);
    tm_session_free(fs);
    tm_plan_free(p);
    tm_plan_free(fwd);
    tm_model_free(m);
    for (int i = 0; i < 4; i++) tm_tensor_free(own[i]);
}

/* The word-embedding gradient of a plan is kept in its session between runs, zeroed
 * only where the last run wrote (INDEX_ADD_KEPT): runs with other token ids, then the
 * first ids again, must each give the eager gradients, no row left over from before. */
static void test_embedding_rows_between_runs(void) {
    tm_model *m = load(SEQCLS "/model.onnx", 1, 0, NULL, NULL);
    if (!m) return;
    tm_tensor *own[4];
    batch b = bert_batch(own);
    tm_grad_options go = ce_options();
    int word = tm_model_param_index(m, "model.bert.embeddings.word_embeddings.weight");
    tm_param_desc d;
    check(word >= 0 && tm_model_param(m, word, &d) == TM_OK, "the word embeddings are a parameter");
    if (word < 0) goto done;
    tm_tensor *ids[2] = {own[0], tm_tensor_clone(own[0], NULL)};
    int64_t vocab = d.tensor->dims[0], n_ids = tm_tensor_numel(own[0]);
    int64_t *second = ids[1]->data;
    for (int64_t i = 0; i < n_ids; i++) second[i] = (second[i] + vocab / 2) % vocab;
    tm_plan *p = NULL;
    tm_session *s = NULL;
    tm_error err;
    tm_status st = tm_grad_plan_create(m, b.n, b.names, b.in, NULL, &go, &p, &err);
    if (st == TM_OK) st = tm_session_create(p, &s, &err);
    check(st == TM_OK, "gradient plan: %s", err.message);
    int g = -1;
    for (int j = 0; st == TM_OK && j < tm_plan_n_grads(p); j++)
        if (tm_plan_grad_param(p, j) == word) g = 1 + j;
    static const int order[4] = {0, 1, 1, 0};
    for (int r = 0; st == TM_OK && g > 0 && r < 4; r++) {
        b.in[0] = ids[order[r]];
        st = tm_session_run(s, b.n, b.names, b.in, NULL, &err);
        tm_tensor *eager[64] = {0};
        if (st == TM_OK) st = tm_run_eager_grad(m, b.n, b.names, b.in, &go, eager, &err);
        check(st == TM_OK, "run %d: %s", r, err.message);
        if (st != TM_OK) break;
        const tm_tensor *planned = tm_session_result(s, g);
        double worst = 0;
        int64_t nonzero_rows = 0, row = d.tensor->dims[1];
        for (int64_t i = 0; i < vocab; i++) {
            int any = 0;
            for (int64_t e = i * row; e < (i + 1) * row; e++) {
                worst = fmax(worst, fabs(at(planned, e) - at(eager[g], e)));
                any |= at(planned, e) != 0;
            }
            nonzero_rows += any;
        }
        check(worst < 1e-6 && nonzero_rows > 0 && nonzero_rows <= n_ids,
              "run %d (ids %d): word-embedding gradient as eager (worst %.2g), %lld rows "
              "written of %lld ids", r, order[r], worst, (long long)nonzero_rows,
              (long long)n_ids);
        for (int i = 0; i < 64; i++) tm_tensor_free(eager[i]);
    }
    check(g > 0, "the plan has the word embeddings' gradient");
    tm_session_free(s);
    tm_plan_free(p);
    tm_tensor_free(ids[1]);
done:
    tm_model_free(m);
    for (int i = 0; i < 4; i++) tm_tensor_free(own[i]);
}

/* A gradient plan's run allocates nothing: through the model's allocator, and (outside
 * sanitizer builds) in the whole process, with caller outputs or results read in place.
 * Its arena is planned by lifetimes: smaller than every value it holds added up. */
static void test_no_allocation(void) {
    tm_allocator alloc = {count_alloc, count_free, NULL};
    tm_model *m = load(SEQCLS "/model.onnx", 1, 0, NULL, &alloc);
    if (!m) return;
    tm_tensor *own[4];
    batch b = bert_batch(own);
    tm_grad_options go = ce_options();
    go.with_outputs = 1;
    tm_plan *p = NULL;
    tm_session *s = NULL;
    tm_error err;
    tm_status st = tm_grad_plan_create(m, b.n, b.names, b.in, NULL, &go, &p, &err);
    if (st == TM_OK) st = tm_session_create(p, &s, &err);
    check(st == TM_OK, "gradient plan: %s", err.message);
    if (st != TM_OK) goto done;
    int n = tm_plan_n_outputs(p);
    tm_tensor *outs[64] = {0};
    for (int i = 0; i < n; i++) {
        tm_value_desc d;
        tm_plan_output(p, i, &d);
        outs[i] = tm_tensor_new(d.dtype, d.rank, d.dims);
    }
    st = tm_session_run(s, b.n, b.names, b.in, outs, &err);  /* warm */
    long a0 = injected_allocs, p0 = process_allocs;
    for (int r = 0; r < 3 && st == TM_OK; r++)
        st = tm_session_run(s, b.n, b.names, b.in, r == 1 ? NULL : outs, &err);
    long a1 = injected_allocs, p1 = process_allocs;
    check(st == TM_OK && a1 == a0, "injected allocations while a gradient plan ran: %ld (%s)",
          a1 - a0, err.message);
    if (COUNTING_ALLOCS) check(p1 == p0, "process allocations while a gradient plan ran: %ld", p1 - p0);
    tm_value_desc d;
    tm_plan_output(p, 0, &d);
    check(!strcmp(d.name, "loss") && d.rank == 0, "output 0 is the loss, a scalar");
    tm_plan_output(p, 1, &d);
    tm_param_desc pd;
    check(tm_model_param(m, tm_plan_grad_param(p, 0), &pd) == TM_OK && !strcmp(d.name, pd.name) &&
              d.rank == pd.rank && !memcmp(d.dims, pd.dims, (size_t)d.rank * sizeof *d.dims),
          "gradient outputs are named and shaped after their parameters");
    for (int i = 0; i < n; i++) tm_tensor_free(outs[i]);
done:
    tm_session_free(s);
    tm_plan_free(p);
    tm_model_free(m);
    check(injected_allocs == injected_frees, "every injected allocation freed (%ld of %ld)",
          injected_frees, injected_allocs);
    for (int i = 0; i < 4; i++) tm_tensor_free(own[i]);
}

static void expect_plan_error(tm_model *m, const batch *b, const tm_grad_options *go,
                              tm_status code, const char *needle, const char *label) {
    tm_plan *p = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status st = m ? tm_grad_plan_create(m, b->n, b->names, b->in, NULL, go, &p, &err) : TM_OK;
    check(st == code && strstr(err.message, needle) && !p, "%s: status %d, message '%s' "
          "(wanted '%s')", label, (int)st, err.message, needle);
    tm_plan_free(p);
}

static void test_errors(void) {
    tm_model *m = load(SEQCLS "/model.onnx", 1, 0, NULL, NULL);
    tm_tensor *own[4];
    batch b = bert_batch(own);
    tm_grad_options go = ce_options();
    batch no_target = b;
    no_target.n = 3;
    expect_plan_error(m, &no_target, &go, TM_ERR_NOT_FOUND, "needs its target", "no target");
    int64_t d3[1] = {3};
    tm_tensor *wrong = tm_tensor_new(TM_INT64, 1, d3);
    batch bad = b;
    bad.in[3] = wrong;
    expect_plan_error(m, &bad, &go, TM_ERR_SHAPE, "must have its other dims", "labels of 3");
    go.loss = TM_LOSS_MSE;
    expect_plan_error(m, &b, &go, TM_ERR_SHAPE, "needs a target 'target' like output 'logits'",
                      "an int64 target for mean squared error");
    go.loss = TM_LOSS_OUTPUT;
    expect_plan_error(m, &no_target, &go, TM_ERR_SHAPE, "is not a scalar", "logits as the loss");
    go = ce_options();
    go.output = "nothing";
    expect_plan_error(m, &b, &go, TM_ERR_NOT_FOUND, "no output 'nothing'", "an unknown output");
    go = ce_options();
    go.target = "input_ids";
    expect_plan_error(m, &b, &go, TM_ERR_INVALID_ARGUMENT, "already a graph input", "a clash");
    go = ce_options();
    const char *unknown[] = {"model.nothing"};
    go.n_params = 1;
    go.params = unknown;
    expect_plan_error(m, &b, &go, TM_ERR_NOT_FOUND, "names no parameter", "an unknown parameter");
    tm_tensor_free(wrong);
    tm_model_free(m);

    /* Loaded with some trainable weights, the others are constants with no gradient. */
    const char *head[] = {"model.classifier.weight"};
    m = load(SEQCLS "/model.onnx", 1, 1, head, NULL);
    go = ce_options();
    const char *frozen[] = {"model.classifier.bias"};
    go.n_params = 1;
    go.params = frozen;
    expect_plan_error(m, &b, &go, TM_ERR_INVALID_ARGUMENT, "is not a parameter", "a frozen weight");
    tm_model_free(m);

    /* Dynamically quantized int8 matmuls: their activations go through a quantizing cast. */
    const char *ln[] = {"*LayerNorm*"};
    m = load("tests/data/tiny/bert/model_quantized.onnx", 1, 1, ln, NULL);
    tm_tensor *qin[3];
    const char *qnames[4] = {"input_ids", "attention_mask", "token_type_ids", "target"};
    for (int i = 0; i < 3; i++) qin[i] = load_npy("tests/data/tiny/bert/model.cases/default/inputs", qnames[i]);
    tm_value_desc od;
    if (m) tm_model_output(m, 0, &od);
    int64_t hd[3] = {qin[0] ? qin[0]->dims[0] : 1, qin[0] ? qin[0]->dims[1] : 1, 32};
    /* A random target: against zeros, the mean square of a layer norm's output hardly
     * depends on what comes before it. */
    tm_tensor *zeros = tm_tensor_new(TM_FLOAT, 3, hd);
    for (int64_t i = 0; i < tm_tensor_numel(zeros); i++) ((float *)zeros->data)[i] = (float)uniform(-2, 2);
    batch qb = {{qnames[0], qnames[1], qnames[2], qnames[3]}, {qin[0], qin[1], qin[2], zeros}, 4};
    go = ce_options();
    go.loss = TM_LOSS_MSE;
    go.output = "last_hidden_state";
    expect_plan_error(m, &qb, &go, TM_ERR_UNSUPPORTED, "quantizing cast", "int8 dynamic quantization");
    tm_tensor *eo[64] = {0};
    tm_error err;
    tm_status st = m ? tm_run_eager_grad(m, qb.n, qb.names, qb.in, &go, eo, &err) : TM_OK;
    check(st == TM_ERR_UNSUPPORTED && strstr(err.message, "quantizing cast") &&
              strstr(err.message, "DynamicQuantizeLinear"),
          "eagerly too, naming the node: %s", err.message);
    tm_model_free(m);

    /* 4-bit MatMulNBits: the layer norms and embeddings get gradients through the quantized
     * matmuls' activations (float32, against finite differences with a float32 step). */
    const char *fl[] = {"*LayerNorm*", "model.embeddings.position_embeddings.weight"};
    m = load("tests/data/tiny/bert/model_q4.onnx", 1, 2, fl, NULL);
    if (m) {
        check(tm_model_n_params(m) > 2, "q4 export: %d float parameters", tm_model_n_params(m));
        check_fd(m, &qb, &go, 1e-2, 3e-2, 6, "q4 bert layer norms, mean squared error");
        check_eager_vs_plan(m, &qb, &go, 1e-4, "q4 bert layer norms");
    }
    tm_model_free(m);
    tm_tensor_free(zeros);
    for (int i = 0; i < 3; i++) tm_tensor_free(qin[i]);

    /* A shape that depends on data: no plan (the error names the node), eagerly fine. */
    m = load(NONZERO, 1, 0, NULL, NULL);
    int64_t d4[1] = {4};
    tm_tensor *x = tm_tensor_new(TM_DOUBLE, 1, d4);
    double xv[4] = {0.5, 0, -1.5, 2.0};
    memcpy(x->data, xv, sizeof xv);
    batch nb = {{"x"}, {x}, 1};
    go = ce_options();
    go.loss = TM_LOSS_OUTPUT;
    expect_plan_error(m, &nb, &go, TM_ERR_UNSUPPORTED, "needs a value on the host", "NonZero");
    st = m ? tm_run_eager_grad(m, 1, nb.names, nb.in, &go, eo, &err) : TM_ERR_IO;
    check(st == TM_OK, "eager gradient through NonZero: %s", err.message);
    if (st == TM_OK) {
        /* total = sum over x != 0 of x w: d/dw = x where x != 0. */
        int ok = eo[1] && tm_tensor_numel(eo[1]) == 4;
        for (int i = 0; ok && i < 4; i++) ok = fabs(at(eo[1], i) - xv[i]) < 1e-15;
        check(ok, "d total / d w = x");
        tm_tensor_free(eo[0]);
        tm_tensor_free(eo[1]);
    }
    tm_tensor_free(x);
    tm_model_free(m);
    for (int i = 0; i < 4; i++) tm_tensor_free(own[i]);
}

/* Merged decoders (GPT-2, LLaMA) fine-tuned as language models: cross-entropy of the
 * logits against the input ids, the If of use_cache_branch folded by a static input (a
 * gradient plan holds no graph break, and says so without it); plans against eager. */
static void test_decoders(void) {
    static const char *const dirs[] = {"tests/data/tiny/gpt2", "tests/data/tiny/llama"};
    for (int d = 0; d < 2; d++) {
        char model_path[256], in_dir[256];
        snprintf(model_path, sizeof model_path, "%s/decoder_model_merged.onnx", dirs[d]);
        snprintf(in_dir, sizeof in_dir, "%s/decoder_model_merged.cases/default/inputs", dirs[d]);
        tm_model *m = load(model_path, 1, 0, NULL, NULL);
        if (!m) continue;
        batch b = {{0}, {0}, 0};
        tm_tensor *own[16] = {0};
        const tm_tensor *use_cache = NULL;
        for (int i = 0; i < tm_model_n_inputs(m) && i < 15; i++) {
            tm_value_desc desc;
            tm_model_input(m, i, &desc);
            own[i] = load_npy(in_dir, desc.name);
            b.names[b.n] = desc.name;
            b.in[b.n++] = own[i];
            if (!strcmp(desc.name, "use_cache_branch")) use_cache = own[i];
        }
        const tm_tensor *ids = b.in[0];
        b.names[b.n] = "target";
        b.in[b.n++] = ids;  /* int64 (batch, sequence): the logits' dims but the last */
        tm_grad_options go = ce_options();
        go.output = "logits";
        tm_plan_options po;
        tm_plan_options_default(&po);
        const char *static_name = "use_cache_branch";
        po.n_static = 1;
        po.static_names = &static_name;
        po.static_values = &use_cache;
        tm_plan *p = NULL;
        tm_session *s = NULL;
        tm_error err;
        char label[300];
        snprintf(label, sizeof label, "%s with a static use_cache_branch", model_path);
        tm_status st = tm_grad_plan_create(m, b.n, b.names, b.in, &po, &go, &p, &err);
        if (st == TM_OK) st = tm_session_create(p, &s, &err);
        tm_tensor *pg[512] = {0}, *eg[512] = {0};
        if (st == TM_OK) st = tm_session_run(s, b.n, b.names, b.in, pg, &err);
        check(st == TM_OK, "%s: %s", label, err.message);
        tm_status se = tm_run_eager_grad(m, b.n, b.names, b.in, &go, eg, &err);
        check(se == TM_OK, "%s eagerly: %s", label, err.message);
        int bad = 0, n_out = p ? tm_plan_n_outputs(p) : 0;
        double worst = 0;
        for (int i = 0; st == TM_OK && se == TM_OK && i < n_out && i < 512; i++) {
            double scale = 1e-6;
            for (int64_t e = 0; e < tm_tensor_numel(eg[i]); e++) scale = fmax(scale, fabs(at(eg[i], e)));
            double w = 0;
            for (int64_t e = 0; e < tm_tensor_numel(eg[i]); e++)
                w = fmax(w, fabs(at(pg[i], e) - at(eg[i], e)) / scale);
            worst = fmax(worst, w);
            bad += w > 1e-4;
        }
        check(bad == 0 && n_out == 1 + tm_model_n_params(m), "%s: plan against eager, %d of "
              "%d outputs differ (worst %.2e)", label, bad, n_out, worst);
        printf("%s: %d gradients, plan against eager within %.2e\n", label, n_out - 1, worst);
        for (int i = 0; i < 512; i++) {
            tm_tensor_free(pg[i]);
            tm_tensor_free(eg[i]);
        }
        tm_session_free(s);
        tm_plan_free(p);
        expect_plan_error(m, &b, &go, TM_ERR_UNSUPPORTED, "give the input it depends on as a "
                          "static input", "a merged decoder without its static input");
        tm_model_free(m);
        for (int i = 0; i < 16; i++) tm_tensor_free(own[i]);
    }
}

int main(void) {
    test_params();
    test_decoders();
    test_errors();
    test_bert();
    test_frozen_weights_many_rows();
    test_convnet();
    test_losses();
    test_updates_in_place();
    test_embedding_rows_between_runs();
    test_no_allocation();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
