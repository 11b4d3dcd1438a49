/* Tests of fine-tuning: the pieces of src/train/finetune.c (the mean cross-entropy and its
 * gradient against torch.nn.functional.cross_entropy, tests/data/optim/xent made by
 * tests/gen_optim_ref.py; its errors; the run dump in the layout bench/finetune/compare.py
 * reads), and `transmuter finetune` itself (tools/finetune.c, included) on the tiny BERT
 * classifier against PyTorch's numbers in tests/data/finetune (tests/gen_finetune_ref.py):
 * the loss curve, the step-0 gradients, the saved model's logits; resuming; the plan cache
 * evicting; a float16 export trained in float32 and saved as float16. Its command-line
 * errors are in tests/errors.sh. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <dirent.h>
#include <unistd.h>

#include "../src/core/tensor.h"
#include "../src/io/names.h"
#include "../src/io/npy.h"
#include "../src/train/finetune.h"
#include "check.h"
#include "../tools/finetune.c"

#define XENT "tests/data/optim/xent"
#define FT "tests/data/finetune"
#define SEQCLS "tests/data/tiny/bert-seqcls/model.onnx"

static tm_tensor *load(const char *dir, const char *file) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    tm_tensor *t = NULL;
    tm_error err;
    if (tm_npy_read(path, &t, &err) != TM_OK) check(0, "reading %s: %s", path, err.message);
    return t;
}

static void test_against_torch(const char *name) {
    char dir[256];
    snprintf(dir, sizeof dir, XENT "/%s", name);
    tm_tensor *x = load(dir, "logits.npy"), *y = load(dir, "labels.npy");
    tm_tensor *want_loss = load(dir, "loss.npy"), *want_grad = load(dir, "dlogits.npy");
    if (!x || !y || !want_loss || !want_grad) goto done;
    tm_tensor *g = tm_tensor_alloc(x->dtype, x->rank, x->dims, NULL);
    double loss = 0.0;
    tm_error err;
    CHECK(tm__cross_entropy(x, y, &loss, g, &err) == TM_OK, "%s: %s", name, err.message);
    double ref = *(const double *)want_loss->data;
    CHECK(fabs(loss - ref) <= 1e-12 * fabs(ref) + 1e-14, "%s: loss %.17g, PyTorch %.17g", name,
          loss, ref);
    /* the gradient is rounded to the logits' dtype */
    double tol = x->dtype == TM_FLOAT ? 1e-7 : 1e-14, worst = 0.0;
    for (int64_t k = 0; k < tm_numel(x->rank, x->dims); k++) {
        double a = tm_load_f64(g->data, g->dtype, (size_t)k), b = ((const double *)want_grad->data)[k];
        double e = fabs(a - b) / (fabs(b) + 1e-30);
        if (fabs(b) > 1e-30 && e > worst) worst = e;
        if (fabs(b) <= 1e-30 && fabs(a) > 1e-30) worst = INFINITY;
    }
    CHECK(worst <= tol, "%s: dlogits rel. error %.3g > %.1g", name, worst, tol);
    double loss_only = 0.0;
    CHECK(tm__cross_entropy(x, y, &loss_only, NULL, &err) == TM_OK && loss_only == loss,
          "%s: the loss without the gradient", name);
    tm_tensor_free(g);
done:
    tm_tensor_free(x);
    tm_tensor_free(y);
    tm_tensor_free(want_loss);
    tm_tensor_free(want_grad);
}

static void test_errors(void) {
    const int64_t d23[] = {2, 3}, d2[] = {2}, d3[] = {3};
    const double xv[6] = {0, 1, 2, 3, 4, 5}, good[2] = {0, 2}, bad[2] = {0, 3};
    tm_tensor *x = tensor_of(TM_FLOAT, 2, d23, xv), *y = tensor_of(TM_INT64, 1, d2, good);
    tm_tensor *ybad = tensor_of(TM_INT64, 1, d2, bad), *y3 = tensor_of(TM_INT64, 1, d3, xv);
    tm_tensor *y32 = tensor_of(TM_INT32, 1, d2, good), *xi = tensor_of(TM_INT32, 2, d23, xv);
    tm_tensor *g64 = tm_tensor_alloc(TM_DOUBLE, 2, d23, NULL);
    double loss = 0.0;
    tm_error err;
    CHECK(tm__cross_entropy(x, ybad, &loss, NULL, &err) == TM_ERR_RUNTIME &&
          strstr(err.message, "label 3 of batch row 1"), "label out of range: %s", err.message);
    CHECK(tm__cross_entropy(x, y3, &loss, NULL, &err) == TM_ERR_SHAPE, "labels of another length");
    CHECK(tm__cross_entropy(x, y32, &loss, NULL, &err) == TM_ERR_SHAPE, "int32 labels");
    CHECK(tm__cross_entropy(xi, y, &loss, NULL, &err) == TM_ERR_SHAPE, "int32 logits");
    CHECK(tm__cross_entropy(x, y, &loss, g64, &err) == TM_ERR_SHAPE, "dlogits of another dtype");
    CHECK(tm__cross_entropy(x, y, NULL, NULL, &err) == TM_ERR_INVALID_ARGUMENT, "no loss");
    tm_tensor *all[] = {x, y, ybad, y3, y32, xi, g64};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tm_tensor_free(all[i]);
}

static void test_dump(void) {
    char dir[256];
    snprintf(dir, sizeof dir, "%s/tm_dump_%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    const int64_t d2[] = {2};
    const double a[2] = {1.5, -2}, b[2] = {0.25, 4};
    tm_tensor *ga = tensor_of(TM_FLOAT, 1, d2, a), *gb = tensor_of(TM_FLOAT, 1, d2, b);
    const char *names[] = {"model.w", "onnx::MatMul_7"};
    const tm_tensor *grads[] = {ga, gb};
    tm_error err;
    CHECK(tm__dump_step(dir, 0, 2, names, grads, &err) == TM_OK &&
          tm__dump_step(dir, 1, 2, names, grads, &err) == TM_OK, "dump step: %s", err.message);
    const double loss[2] = {1.0, 0.5}, lr[2] = {1e-3, 1e-3};
    CHECK(tm__dump_finish(dir, 2, loss, lr, 2, names, grads, &err) == TM_OK, "finish: %s", err.message);
    char sub[512];
    snprintf(sub, sizeof sub, "%s/grads/0001", dir);
    tm_tensor *back = load(sub, "onnx%3A%3AMatMul_7.npy");
    CHECK(back && back->dtype == TM_FLOAT && !memcmp(back->data, gb->data, gb->nbytes),
          "a dumped gradient reads back, its name encoded");
    tm_tensor_free(back);
    back = load(dir, "loss.npy");
    CHECK(back && back->dtype == TM_DOUBLE && back->dims[0] == 2 &&
          ((const double *)back->data)[1] == 0.5, "loss.npy");
    tm_tensor_free(back);
    snprintf(sub, sizeof sub, "%s/params", dir);
    back = load(sub, "model.w.npy");
    CHECK(back && !memcmp(back->data, ga->data, ga->nbytes), "params/");
    tm_tensor_free(back);
    CHECK(tm__dump_step(dir, 10000, 2, names, grads, &err) == TM_ERR_INVALID_ARGUMENT, "step 10000");
    CHECK(tm__dump_step("/nonexistent-dir/x", 0, 2, names, grads, &err) == TM_ERR_IO, "missing parent");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("could not remove %s\n", dir);
    tm_tensor_free(ga);
    tm_tensor_free(gb);
}

/* ---- transmuter finetune ---------------------------------------------------------------- */

static char tmp[256];

/* Runs the command with the arguments (NULL-terminated) after the hyperparameters of
 * tests/gen_finetune_ref.py; returns its exit status. */
static int finetune(const char *model, const char *out, ...) {
    const char *argv[64] = {model, "--data", FT "/train.jsonl", "--out", out, "--steps", "6",
                            "--batch-size", "4", "--shuffle", "--seed", "3", "--lr", "1e-3",
                            "--eps", "1e-6", "--weight-decay", "0.01", "--schedule", "constant",
                            "--max-grad-norm", "0", "--threads", "1", "--quiet"};
    int argc = 25;
    va_list ap;
    va_start(ap, out);
    for (const char *a; argc < 63 && (a = va_arg(ap, const char *));) argv[argc++] = a;
    va_end(ap);
    fflush(stdout);
    return tm__cmd_finetune(argc, (char **)argv);
}

static double normwise_error(const tm_tensor *a, const tm_tensor *b) {
    if (!a || !b || !tm_same_shape(a, b)) return INFINITY;
    double diff = 0, scale = 0;
    for (int64_t k = 0; k < tm_numel(a->rank, a->dims); k++) {
        double x = tm_load_f64(a->data, a->dtype, (size_t)k), y = tm_load_f64(b->data, b->dtype, (size_t)k);
        diff = fmax(diff, fabs(x - y));
        scale = fmax(scale, fabs(y));
    }
    return scale > 0 ? diff / scale : diff;
}

/* The first batch of the run (shuffled with seed 3), as torch_ref.py's final logits saw it. */
static tm_tensor *logits_on_first_batch(const char *model_path, const tm_load_options *lo) {
    tm__dataset *ds = NULL;
    tm__batcher *bt = NULL;
    tm__batch b = {0};
    tm__batch_options bo;
    tm__batch_options_default(&bo);
    bo.batch_size = 4;
    bo.shuffle = 1;
    bo.seed = 3;
    tm_model *m = NULL;
    tm_tensor *out[1] = {NULL};
    tm_error err;
    const char *names[3] = {"input_ids", "attention_mask", "token_type_ids"};
    if (tm__dataset_load(FT "/train.jsonl", &ds, &err) || tm__batcher_create(ds, &bo, &bt, &err) ||
        tm__batcher_next(bt, &b, &err) || tm_model_load(model_path, lo, &m, &err) ||
        tm_model_run(m, 3, names, (const tm_tensor *[3]){b.input_ids, b.attention_mask, b.token_type_ids},
                     out, NULL, &err))
        check(0, "logits of %s: %s", model_path, err.message);
    tm_model_free(m);
    tm__batch_clear(&b);
    tm__batcher_free(bt);
    tm__dataset_free(ds);
    return out[0];
}

static void test_cli_against_torch(void) {
    char out[512], dump[512];
    snprintf(out, sizeof out, "%s/trained.onnx", tmp);
    snprintf(dump, sizeof dump, "%s/dump", tmp);
    CHECK(finetune(SEQCLS, out, "--dump", dump, NULL) == 0, "finetune the tiny classifier");
    tm_tensor *loss = load(dump, "loss.npy"), *want = load(FT "/torch", "loss.npy");
    tm_tensor *lr = load(dump, "lr.npy");
    double worst = INFINITY;
    if (loss && want && loss->dims[0] == 6 && want->dims[0] == 6) {
        worst = 0;
        for (int k = 0; k < 6; k++)
            worst = fmax(worst, fabs(((double *)loss->data)[k] - ((double *)want->data)[k]));
    }
    /* compare.py's criteria: losses within 1e-5, gradients within 1e-4 normwise */
    CHECK(worst <= 1e-5, "loss curve: max |ours - PyTorch| %.3g over 6 steps", worst);
    CHECK(lr && lr->dims[0] == 6 && ((double *)lr->data)[5] == 1e-3, "lr.npy");
    DIR *d = opendir(FT "/torch/grads/0000");
    int n = 0, bad = 0;
    char ours[600];
    snprintf(ours, sizeof ours, "%s/grads/0000", dump);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strstr(e->d_name, ".npy")) continue;
        tm_tensor *a = load(ours, e->d_name), *b = load(FT "/torch/grads/0000", e->d_name);
        double err = normwise_error(a, b);
        n++;
        if (!(err <= 1e-4)) bad++, printf("FAIL gradient %s at step 0: normwise error %.3g\n", e->d_name, err);
        tm_tensor_free(a);
        tm_tensor_free(b);
    }
    if (d) closedir(d);
    CHECK(n == 21 && bad == 0, "step-0 gradients: %d of %d off PyTorch's by more than 1e-4", bad, n);
    /* The saved model, reloaded and run, gives PyTorch's trained logits. */
    tm_tensor *have = logits_on_first_batch(out, NULL), *final = load(FT "/torch", "final_logits.npy");
    tm_tensor *before = logits_on_first_batch(SEQCLS, NULL);
    double diff = have && final ? normwise_error(have, final) : INFINITY;
    double moved = before && final ? normwise_error(before, final) : 0;
    CHECK(diff <= 1e-5 && moved > 1e-2, "the saved model's logits: %.3g from PyTorch's (training "
          "moved them by %.3g)", diff, moved);
    tm_tensor_free(have);
    tm_tensor_free(before);
    tm_tensor_free(final);
    tm_tensor_free(loss);
    tm_tensor_free(want);
    tm_tensor_free(lr);
}

static int same_bytes(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb;
    for (int x = 0, y = 0; same && (x != EOF || y != EOF);) {
        x = fgetc(fa);
        y = fgetc(fb);
        same = x == y;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* Stopping after step 3 and resuming from the saved model and optimizer state gives the
 * uninterrupted run's file bit for bit (the data continues where it stopped); a plan
 * cache of one (every new shape evicts the last plan) changes nothing either. */
static void test_resume_and_cache(void) {
    char full[512], half[512], rest[512], state[512];
    snprintf(full, sizeof full, "%s/full.onnx", tmp);
    snprintf(half, sizeof half, "%s/half.onnx", tmp);
    snprintf(rest, sizeof rest, "%s/rest.onnx", tmp);
    snprintf(state, sizeof state, "%s/adamw.state", tmp);
    CHECK(finetune(SEQCLS, full, "--plan-cache", "1", NULL) == 0, "full run, plan cache 1");
    CHECK(finetune(SEQCLS, half, "--stop-after", "3", "--save-state", state, NULL) == 0,
          "first half");
    CHECK(finetune(half, rest, "--resume", state, NULL) == 0, "resumed");
    CHECK(same_bytes(full, rest), "resumed run differs from the uninterrupted one");
    CHECK(!same_bytes(full, half), "the half run is already the full one (the test would prove "
          "nothing)");
    CHECK(finetune(rest, half, "--resume", state, "--stop-after", "3", NULL) == 1,
          "resuming a state that is past --stop-after is refused");
}

/* A float16 export: trained in float32 (its parameters stored so), saved as float16, the
 * saved initializers being the final float32 parameters rounded to nearest even. */
static void test_half_precision(void) {
    char out[512], dump[512];
    snprintf(out, sizeof out, "%s/trained_fp16.onnx", tmp);
    snprintf(dump, sizeof dump, "%s/dump_fp16", tmp);
    CHECK(finetune(FT "/model_fp16.onnx", out, "--dump", dump, NULL) == 0, "finetune fp16");
    tm_tensor *loss = load(dump, "loss.npy"), *want = load(FT "/torch", "loss.npy");
    /* The same network with its weights rounded to half: PyTorch's float32 curve to within
     * what that rounding moves the loss. */
    double worst = INFINITY;
    if (loss && want && loss->dims[0] == 6) {
        worst = 0;
        for (int k = 0; k < 6; k++)
            worst = fmax(worst, fabs(((double *)loss->data)[k] - ((double *)want->data)[k]));
    }
    CHECK(worst <= 1e-3, "fp16 loss curve: %.3g from PyTorch's float32 one", worst);
    tm_model *saved = NULL, *orig = NULL;
    tm_error err;
    CHECK(tm_model_load(out, NULL, &saved, &err) == TM_OK &&
          tm_model_load(FT "/model_fp16.onnx", NULL, &orig, &err) == TM_OK, "%s", err.message);
    const tm_graph *g = saved ? saved->onnx->graph : NULL;
    int halves = 0, rounded = 0, changed = 0;
    char params[600];
    snprintf(params, sizeof params, "%s/params", dump);
    for (int i = 0; g && orig && i < g->n_inits; i++) {
        const tm_tensor *t = g->inits[i].tensor;
        if (t->dtype != TM_FLOAT16) continue;
        halves++;
        char *enc = tm_name_encode(g->inits[i].name), file[512];
        snprintf(file, sizeof file, "%s.npy", enc);
        free(enc);
        tm_tensor *p = load(params, file);
        int ok = p && p->dtype == TM_FLOAT && tm_same_shape(p, t);
        for (int64_t k = 0; ok && k < tm_numel(t->rank, t->dims); k++) {
            uint16_t h;  /* initializers may lie unaligned in the mapped file */
            memcpy(&h, (const char *)t->data + 2 * k, 2);
            ok = h == tm_f32_to_f16(((const float *)p->data)[k]);
        }
        rounded += ok;
        changed += memcmp(t->data, orig->onnx->graph->inits[i].tensor->data, t->nbytes) != 0;
        tm_tensor_free(p);
    }
    CHECK(halves == 21 && rounded == 21 && changed == 21, "saved fp16 model: %d float16 "
          "initializers, %d the trained float32 parameters rounded, %d changed", halves, rounded,
          changed);
    tm_load_options lo;
    tm_load_options_default(&lo);
    lo.compute_type = TM_FLOAT;
    tm_tensor *have = logits_on_first_batch(out, &lo), *final = load(FT "/torch", "final_logits.npy");
    double diff = have && final ? normwise_error(have, final) : INFINITY;
    CHECK(have && have->dtype == TM_FLOAT16 && diff <= 1e-2, "the saved fp16 model's logits: "
          "%.3g from PyTorch's float32 training", diff);
    tm_tensor_free(have);
    tm_tensor_free(final);
    tm_tensor_free(loss);
    tm_tensor_free(want);
    tm_model_free(saved);
    tm_model_free(orig);
}

int main(void) {
    test_against_torch("small");
    test_against_torch("wide_large");
    test_against_torch("f64");
    test_errors();
    test_dump();
    const char *tmpdir = getenv("TMPDIR");
    snprintf(tmp, sizeof tmp, "%s/tm_finetune_XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    if (!mkdtemp(tmp)) {
        printf("FAIL: cannot create %s\n", tmp);
        return 1;
    }
    test_cli_against_torch();
    test_resume_and_cache();
    test_half_precision();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) printf("could not remove %s\n", tmp);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
