/* Mean cross-entropy with its gradient, and the fine-tuning run dump (finetune.h). Not the
 * training loop, which needs the graph's gradients. */
#include "finetune.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/dtype.h"
#include "../core/status.h"
#include "../io/names.h"
#include "../io/npy.h"

tm_status tm__cross_entropy(const tm_tensor *logits, const tm_tensor *labels, double *loss,
                            tm_tensor *dlogits, tm_error *err) {
    if (!logits || !labels || !loss)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "cross-entropy: logits, labels and loss "
                        "must be given");
    if ((logits->dtype != TM_FLOAT && logits->dtype != TM_DOUBLE) || logits->rank != 2 ||
        logits->dims[0] <= 0 || logits->dims[1] <= 0)
        return tm__fail(err, TM_ERR_SHAPE, "cross-entropy: logits must be float32 or float64 "
                        "(batch, classes) with both > 0; they are %s of rank %d",
                        tm_dtype_name(logits->dtype), logits->rank);
    int64_t b = logits->dims[0], c = logits->dims[1];
    if (labels->dtype != TM_INT64 || labels->rank != 1 || labels->dims[0] != b)
        return tm__fail(err, TM_ERR_SHAPE, "cross-entropy: labels must be int64 (%lld,)",
                        (long long)b);
    if (dlogits && (dlogits->dtype != logits->dtype || !tm_same_shape(dlogits, logits)))
        return tm__fail(err, TM_ERR_SHAPE, "cross-entropy: dlogits must have the logits' "
                        "dtype and shape");
    const int64_t *y = labels->data;
    for (int64_t i = 0; i < b; i++)
        if (y[i] < 0 || y[i] >= c)
            return tm__fail(err, TM_ERR_RUNTIME, "cross-entropy: label %lld of batch row %lld "
                            "is not a class of the %lld logits", (long long)y[i], (long long)i,
                            (long long)c);
    double total = 0.0;
    for (int64_t i = 0; i < b; i++) {
        double mx = -INFINITY;
        for (int64_t k = 0; k < c; k++) mx = fmax(mx, tm_load_f64(logits->data, logits->dtype, (size_t)(i * c + k)));
        double sum = 0.0;
        for (int64_t k = 0; k < c; k++)
            sum += exp(tm_load_f64(logits->data, logits->dtype, (size_t)(i * c + k)) - mx);
        double lse = mx + log(sum);
        total += lse - tm_load_f64(logits->data, logits->dtype, (size_t)(i * c + y[i]));
        if (!dlogits) continue;
        for (int64_t k = 0; k < c; k++) {
            double x = tm_load_f64(logits->data, logits->dtype, (size_t)(i * c + k));
            double g = (exp(x - lse) - (k == y[i] ? 1.0 : 0.0)) / (double)b;
            tm_store_f64(dlogits->data, dlogits->dtype, (size_t)(i * c + k), g);
        }
    }
    *loss = total / (double)b;
    return TM_OK;
}

static tm_status make_dir(const char *path, tm_error *err) {
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return tm__fail(err, TM_ERR_IO, "cannot create '%s': %s", path, strerror(errno));
    return TM_OK;
}

static tm_status save_named(const char *dir, const char *name, const tm_tensor *t, tm_error *err) {
    char *enc = tm_name_encode(name);
    size_t n = strlen(dir) + (enc ? strlen(enc) : 0) + 8;
    char *path = enc ? malloc(n) : NULL;
    tm_status st;
    if (!path) st = tm__fail(err, TM_ERR_NO_MEMORY, "dump: out of memory");
    else {
        snprintf(path, n, "%s/%s.npy", dir, enc);
        st = tm_npy_write(path, t, err);
    }
    free(path);
    free(enc);
    return st;
}

tm_status tm__dump_step(const char *dir, int64_t step, int n, const char *const *names,
                        const tm_tensor *const *grads, tm_error *err) {
    if (!dir || step < 0 || step > 9999 || n < 0 || (n && (!names || !grads)))
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "dump: a folder, a step in [0, 9999] "
                        "and the gradients must be given");
    char sub[4200];
    tm_status st = make_dir(dir, err);
    snprintf(sub, sizeof sub, "%s/grads", dir);
    if (!st) st = make_dir(sub, err);
    snprintf(sub, sizeof sub, "%s/grads/%04lld", dir, (long long)step);
    if (!st) st = make_dir(sub, err);
    for (int i = 0; i < n && !st; i++)
        if (grads[i]) st = save_named(sub, names[i], grads[i], err);
    return st;
}

tm_status tm__dump_finish(const char *dir, int64_t steps, const double *loss, const double *lr,
                          int n, const char *const *names, const tm_tensor *const *params,
                          tm_error *err) {
    if (!dir || steps < 0 || (steps && (!loss || !lr)) || n < 0 || (n && (!names || !params)))
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "dump: a folder, the losses and the "
                        "parameters must be given");
    char sub[4200];
    tm_status st = make_dir(dir, err);
    snprintf(sub, sizeof sub, "%s/params", dir);
    if (!st) st = make_dir(sub, err);
    for (int i = 0; i < n && !st; i++) st = save_named(sub, names[i], params[i], err);
    const int64_t dims[1] = {steps};
    const double *series[2] = {loss, lr};
    const char *file[2] = {"loss", "lr"};
    for (int k = 0; k < 2 && !st; k++) {
        tm_tensor *t = tm_tensor_borrow(TM_DOUBLE, 1, dims, (void *)series[k]);
        if (!t) return tm__fail(err, TM_ERR_NO_MEMORY, "dump: out of memory");
        st = save_named(dir, file[k], t, err);
        tm_tensor_free(t);
    }
    return st;
}
