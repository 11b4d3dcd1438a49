/* Helpers shared by the ai.onnx.ml lowerings (ml_*.c): the numeric input read on the
 * host as an [N, F] matrix, the score post-transforms (LOGISTIC, SOFTMAX, SOFTMAX_ZERO,
 * PROBIT) with ONNX Runtime's float arithmetic and its binary-class expansion, and class
 * label outputs (int64 or string). Not a lowering itself. */
#ifndef TM_ONNX_OPS_ML_H
#define TM_ONNX_OPS_ML_H

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../lower.h"

enum { ML_NONE = 0, ML_LOGISTIC, ML_SOFTMAX, ML_SOFTMAX_ZERO, ML_PROBIT };

static inline int ml_transform_from_name(const char *s) {
    return !strcmp(s, "NONE") ? ML_NONE : !strcmp(s, "LOGISTIC") ? ML_LOGISTIC
         : !strcmp(s, "SOFTMAX") ? ML_SOFTMAX : !strcmp(s, "SOFTMAX_ZERO") ? ML_SOFTMAX_ZERO
         : !strcmp(s, "PROBIT") ? ML_PROBIT : -1;
}

/* The string attribute 'post_transform' (default NONE); -1 with the node failed. */
static inline int ml_post_transform(tm_lower *L) {
    const char *s = tm_attr_s(L, "post_transform", "NONE");
    int t = ml_transform_from_name(s);
    if (t < 0)
        tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute 'post_transform' is '%s', expected NONE, "
                 "LOGISTIC, SOFTMAX, SOFTMAX_ZERO or PROBIT", s);
    return t;
}

static inline float ml_logistic(float v) {
    float e = 1.0f / (1.0f + expf(-fabsf(v)));
    return v < 0 ? 1.0f - e : e;
}

/* Winitzki's approximation of erf^-1, as ONNX Runtime computes PROBIT. */
static inline float ml_probit(float v) {
    float x = 2.0f * v - 1.0f;
    float sgn = x < 0 ? -1.0f : 1.0f;
    float ln = logf((1.0f - x) * (1.0f + x));
    float a = 2.0f / ((float)M_PI * 0.147f) + 0.5f * ln;
    float b = 1.0f / 0.147f * ln;
    return (float)M_SQRT2 * sgn * sqrtf(-a + sqrtf(a * a - b));
}

static inline void ml_softmax(float *v, int64_t n, int skip_zeros) {
    float mx = -FLT_MAX, sum = 0.0f;
    for (int64_t i = 0; i < n; i++) mx = v[i] > mx ? v[i] : mx;
    float scale_zero = expf(-mx);
    for (int64_t i = 0; i < n; i++) {
        if (skip_zeros && v[i] <= 1e-7f && v[i] >= -1e-7f) {
            v[i] *= scale_zero;
            continue;
        }
        v[i] = expf(v[i] - mx);
        sum += v[i];
    }
    for (int64_t i = 0; i < n; i++) v[i] /= sum;
}

/* A row of n >= 2 scores, transformed in place. */
static inline void ml_transform_row(float *v, int64_t n, int post) {
    switch (post) {
    case ML_LOGISTIC:
        for (int64_t i = 0; i < n; i++) v[i] = ml_logistic(v[i]);
        break;
    case ML_PROBIT:
        for (int64_t i = 0; i < n; i++) v[i] = ml_probit(v[i]);
        break;
    case ML_SOFTMAX:
    case ML_SOFTMAX_ZERO:
        ml_softmax(v, n, post == ML_SOFTMAX_ZERO);
        break;
    default:
        break;
    }
}

/* One score s made into the two of a binary classifier, out[0] for the negative class:
 * [logistic(-s), logistic(s)] under LOGISTIC; otherwise mode 0/1 (weights all positive)
 * [1 - s, s] and mode 2/3 (mixed weights) [-s, s], other transforms not applied, as in
 * ONNX Runtime. PROBIT writes probit(s) to out[0] only; mode < 0 writes s only. */
static inline void ml_binary_scores(float s, int post, int mode, float *out) {
    if (post == ML_PROBIT) {
        out[0] = ml_probit(s);
    } else if (mode < 0) {
        out[0] = s;
    } else if (post == ML_LOGISTIC) {
        out[0] = ml_logistic(-s);
        out[1] = ml_logistic(s);
    } else {
        out[0] = mode <= 1 ? 1.0f - s : -s;
        out[1] = s;
    }
}

/* ---- Input ----------------------------------------------------------------------- */

/* Input i, numeric (float, double, int32, int64), of rank 1 ([F], one row) or 2
 * ([N, F]), read on the host as doubles. NULL with the node failed or a graph break. */
static inline double *ml_input_matrix(tm_lower *L, int i, int64_t *rows, int64_t *cols) {
    tm_ctx *c = tm_lctx(L);
    tm_val xv = tm_lin(L, i);
    if (xv == TM_NONE) {
        if (tm_ctx_ok(c)) tm_lfail(L, TM_ERR_PARSE, "input %d is missing", i);
        return NULL;
    }
    tm_dtype dt = tm_vdtype(c, xv);
    if (dt != TM_FLOAT && dt != TM_DOUBLE && dt != TM_INT32 && dt != TM_INT64) {
        tm_lfail(L, TM_ERR_DTYPE, "input X must be float, double, int32 or int64, got %s", tm_dtype_name(dt));
        return NULL;
    }
    int r = tm_vrank(c, xv);
    if (r != 1 && r != 2) {
        tm_lfail(L, TM_ERR_SHAPE, "input X must be [F] or [N, F], got rank %d", r);
        return NULL;
    }
    const tm_tensor *x = tm_host(c, xv);
    if (!x) return NULL;
    *rows = r == 2 ? x->dims[0] : 1;
    *cols = x->dims[r - 1];
    int64_t n = tm_tensor_numel_(x);
    double *m = malloc((size_t)(n ? n : 1) * sizeof *m);
    if (!m) {
        tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
        return NULL;
    }
    for (int64_t k = 0; k < n; k++) m[k] = tm_load_f64(x->data, x->dtype, (size_t)k);
    return m;
}

/* ---- Class labels ---------------------------------------------------------------- */

typedef struct ml_labels {
    const int64_t *ints;     /* one of the two is set */
    const tm_bytes *strs;
    int n;
} ml_labels;

/* classlabels_strings or the integer form named `ints_name`; -1 with the node failed
 * when neither (or both) is given. */
static inline int ml_read_labels(tm_lower *L, const char *ints_name, ml_labels *lb) {
    memset(lb, 0, sizeof *lb);
    int ns = tm_attr_strings(L, "classlabels_strings", &lb->strs);
    int ni = tm_attr_ints(L, ints_name, &lb->ints);
    if ((ns > 0) == (ni > 0)) {
        tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "exactly one of 'classlabels_strings' and '%s' must "
                 "be given and non-empty", ints_name);
        return -1;
    }
    if (ns > 0) lb->ints = NULL;
    else lb->strs = NULL;
    lb->n = ns > 0 ? ns : ni;
    return 0;
}

static inline tm_tensor *ml_label_tensor(const ml_labels *lb, int64_t rows) {
    return tm_tensor_alloc(lb->strs ? TM_STRING : TM_INT64, 1, &rows, NULL);
}

/* Label k of the list into element i; 0 on success. */
static inline int ml_set_label(tm_tensor *t, int64_t i, const ml_labels *lb, int64_t k) {
    if (!lb->strs) {
        ((int64_t *)t->data)[i] = lb->ints[k];
        return 0;
    }
    char *s = malloc(lb->strs[k].len + 1);
    if (!s) return -1;
    if (lb->strs[k].len) memcpy(s, lb->strs[k].data, lb->strs[k].len);
    s[lb->strs[k].len] = 0;
    ((char **)t->data)[i] = s;
    return 0;
}

/* The integer v (or its decimal text for string labels) into element i, for the
 * binary fallbacks that answer 1 or 0 rather than a listed label. */
static inline int ml_set_label_int(tm_tensor *t, int64_t i, int64_t v) {
    if (t->dtype == TM_INT64) {
        ((int64_t *)t->data)[i] = v;
        return 0;
    }
    char buf[24];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    return tm_tensor_set_string(t, i, buf) == TM_OK ? 0 : -1;
}

/* Publishes host tensors as outputs 0 and 1 (taking both; NULL: out of memory). */
static inline tm_status ml_out2(tm_lower *L, tm_tensor *y, tm_tensor *z) {
    tm_ctx *c = tm_lctx(L);
    if (!y || !z) {
        tm_tensor_free(y);
        tm_tensor_free(z);
        return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    }
    tm_lout(L, 0, tm_val_tensor(c, y, 0));
    tm_lout(L, 1, tm_val_tensor(c, z, 0));
    return c->status;
}

#endif
