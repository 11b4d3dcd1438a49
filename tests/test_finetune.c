/* Tests of the fine-tuning pieces of src/train/finetune.c: the mean cross-entropy and its
 * gradient against torch.nn.functional.cross_entropy (tests/data/optim/xent, made by
 * tests/gen_optim_ref.py), its errors, and the run dump in the layout that
 * bench/finetune/compare.py reads. Not the training loop. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/core/tensor.h"
#include "../src/io/npy.h"
#include "../src/train/finetune.h"
#include "check.h"

#define XENT "tests/data/optim/xent"

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

int main(void) {
    test_against_torch("small");
    test_against_torch("wide_large");
    test_against_torch("f64");
    test_errors();
    test_dump();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
