/* ai.onnx.ml linear models: LinearRegressor composed from primitives (matmul, bias and
 * the post-transform), LinearClassifier computed on the host (its labels and binary
 * expansion follow ONNX Runtime). Not the SVMs (ml_svm.c) nor the trees (ml_tree.c). */
#include "ml.h"

/* ---- Post-transforms from primitives (LinearRegressor) ----------------------------- */

static tm_val scalar_f(tm_ctx *c, double v) { return tm_const_scalar(c, TM_FLOAT, v); }

/* Softmax over axis 1 that leaves (near) zero scores at x * exp(-max), as ONNX Runtime's
 * SOFTMAX_ZERO. y: (N, T) float. */
static tm_val softmax_zero(tm_ctx *c, tm_val y) {
    int64_t axis = 1;
    tm_val mx = tm_reduce(c, TM_P_REDUCE_MAX, y, &axis, 1, 1);
    tm_val e = tm_unary(c, TM_P_EXP, tm_sub(c, y, mx));
    tm_val tiny = scalar_f(c, 1e-7);
    tm_val nz = tm_binary(c, TM_P_GT, tm_unary(c, TM_P_ABS, y), tiny);
    tm_val zero = scalar_f(c, 0.0);
    tm_val sum = tm_reduce(c, TM_P_REDUCE_SUM, tm_where(c, nz, e, zero), &axis, 1, 1);
    tm_val kept = tm_mul(c, y, tm_unary(c, TM_P_EXP, tm_unary(c, TM_P_NEG, mx)));
    return tm_div(c, tm_where(c, nz, e, kept), sum);
}

/* sqrt(2) * erfinv(2y - 1) by Winitzki's approximation (see ml_probit). */
static tm_val probit(tm_ctx *c, tm_val y) {
    tm_val x = tm_sub(c, tm_mul(c, y, scalar_f(c, 2.0)), scalar_f(c, 1.0));
    tm_val one = scalar_f(c, 1.0);
    tm_val ln = tm_unary(c, TM_P_LOG, tm_mul(c, tm_sub(c, one, x), tm_add(c, one, x)));
    tm_val a = tm_add(c, scalar_f(c, 2.0 / (M_PI * 0.147)), tm_mul(c, ln, scalar_f(c, 0.5)));
    tm_val b = tm_div(c, ln, scalar_f(c, 0.147));
    tm_val root = tm_unary(c, TM_P_SQRT, tm_sub(c, tm_mul(c, a, a), b));
    tm_val r = tm_unary(c, TM_P_SQRT, tm_sub(c, root, a));
    return tm_mul(c, tm_mul(c, tm_unary(c, TM_P_SIGN, x), r), scalar_f(c, M_SQRT2));
}

/* y (N, T) float. With one target only PROBIT applies, as in ONNX Runtime. */
static tm_val post_transform(tm_ctx *c, tm_val y, int post, int64_t targets) {
    if (post == ML_PROBIT) return probit(c, y);
    if (targets < 2) return y;
    switch (post) {
    case ML_LOGISTIC: return tm_unary(c, TM_P_SIGMOID, y);
    case ML_SOFTMAX: return tm_softmax(c, y, 1, 0);
    case ML_SOFTMAX_ZERO: return softmax_zero(c, y);
    default: return y;
    }
}

/* Input X as (N, F) float, or TM_NONE with the node failed. */
static tm_val features(tm_lower *L, int64_t *n_features) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    if (x == TM_NONE) {
        if (tm_ctx_ok(c)) tm_lfail(L, TM_ERR_PARSE, "input X is missing");
        return TM_NONE;
    }
    tm_dtype dt = tm_vdtype(c, x);
    if (dt != TM_FLOAT && dt != TM_DOUBLE && dt != TM_INT32 && dt != TM_INT64) {
        tm_lfail(L, TM_ERR_DTYPE, "input X must be float, double, int32 or int64, got %s", tm_dtype_name(dt));
        return TM_NONE;
    }
    int r = tm_vrank(c, x);
    if (r != 1 && r != 2) {
        tm_lfail(L, TM_ERR_SHAPE, "input X must be [F] or [N, F], got rank %d", r);
        return TM_NONE;
    }
    int64_t dims[2] = {r == 2 ? tm_vdims(c, x)[0] : 1, tm_vdims(c, x)[r - 1]};
    *n_features = dims[1];
    return tm_reshape(c, dt == TM_FLOAT ? x : tm_cast(c, x, TM_FLOAT), 2, dims);
}

static tm_status lower_linear_regressor(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    int post = ml_post_transform(L);
    int64_t targets = tm_attr_i(L, "targets", 1), n_features;
    const float *coef, *bias;
    int n_coef = tm_attr_floats(L, "coefficients", &coef);
    int n_bias = tm_attr_floats(L, "intercepts", &bias);
    if (post < 0) return c->status;
    tm_val x = features(L, &n_features);
    if (x == TM_NONE) return c->status;
    if (targets < 1 || n_coef != targets * n_features)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute 'coefficients' has %d values, expected "
                        "targets (%lld) x features (%lld)", n_coef, (long long)targets, (long long)n_features);
    int64_t wdims[2] = {targets, n_features};
    tm_tensor *w = tm_tensor_alloc(TM_FLOAT, 2, wdims, NULL);
    if (!w) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    memcpy(w->data, coef, (size_t)n_coef * sizeof *coef);
    int64_t perm[2] = {1, 0};
    tm_val y = tm_matmul(c, x, tm_transpose(c, tm_val_tensor(c, w, 0), perm));
    /* Intercepts of another length are ignored, as ONNX Runtime does. */
    if (n_bias == targets) {
        tm_tensor *b = tm_tensor_alloc(TM_FLOAT, 1, &targets, NULL);
        if (!b) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
        memcpy(b->data, bias, (size_t)n_bias * sizeof *bias);
        y = tm_add(c, y, tm_val_tensor(c, b, 0));
    }
    tm_lout(L, 0, post_transform(c, y, post, targets));
    return c->status;
}
TM_REGISTER_OP("ai.onnx.ml", "LinearRegressor", 1, 5, lower_linear_regressor);

/* ---- LinearClassifier -------------------------------------------------------------- */

typedef struct linear_model {
    const float *coef, *bias;   /* (E, F), (E) or NULL */
    int64_t classes, features;
    int post;
    ml_labels labels;
} linear_model;

/* Scores of one row (E of them), then its label into y[i]. */
static int classify_row(const linear_model *m, const double *x, float *scores, tm_tensor *y, int64_t i) {
    for (int64_t e = 0; e < m->classes; e++) {
        double s = m->bias ? m->bias[e] : 0.0;
        for (int64_t f = 0; f < m->features; f++) s += (double)(float)x[f] * m->coef[e * m->features + f];
        scores[e] = (float)s;
    }
    if (m->classes == 1) {
        int pos = scores[0] > 0;
        if (m->labels.n == 2) return ml_set_label(y, i, &m->labels, pos);
        return ml_set_label_int(y, i, pos);
    }
    int64_t best = 0;
    for (int64_t e = 1; e < m->classes; e++)
        if (scores[e] > scores[best]) best = e;
    return ml_set_label(y, i, &m->labels, best);
}

static tm_status lower_linear_classifier(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    linear_model m = {0};
    m.post = ml_post_transform(L);
    int n_coef = tm_attr_floats(L, "coefficients", &m.coef);
    int n_bias = tm_attr_floats(L, "intercepts", &m.bias);
    if (m.post < 0 || ml_read_labels(L, "classlabels_ints", &m.labels)) return c->status;
    int64_t rows;
    double *x = ml_input_matrix(L, 0, &rows, &m.features);
    if (!x) return c->status;
    m.classes = m.features ? n_coef / m.features : 0;
    if (n_coef < 1 || m.classes * m.features != n_coef || (n_bias >= 0 && n_bias != m.classes) ||
        (m.classes > 1 && m.labels.n < m.classes)) {
        free(x);
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attributes 'coefficients' (%d values), "
                        "'intercepts' (%d) and the %d class labels do not fit %lld features", n_coef,
                        n_bias < 0 ? 0 : n_bias, m.labels.n, (long long)m.features);
    }
    if (n_bias < 0) m.bias = NULL;
    int second = m.classes == 1 && m.labels.n == 2;  /* one score becomes two columns */
    int64_t zdims[2] = {rows, second ? 2 : m.classes};
    tm_tensor *y = ml_label_tensor(&m.labels, rows);
    tm_tensor *z = tm_tensor_alloc(TM_FLOAT, 2, zdims, NULL);
    int ok = y && z;
    for (int64_t i = 0; ok && i < rows; i++) {
        float *row = (float *)z->data + i * zdims[1];
        ok = !classify_row(&m, x + i * m.features, row, y, i);
        if (m.classes > 1) ml_transform_row(row, m.classes, m.post);
        else if (second || m.post == ML_PROBIT) ml_binary_scores(row[0], m.post, second ? 1 : -1, row);
    }
    free(x);
    if (!ok) {
        tm_tensor_free(y);
        tm_tensor_free(z);
        y = z = NULL;
    }
    return ml_out2(L, y, z);
}
TM_REGISTER_OP("ai.onnx.ml", "LinearClassifier", 1, 5, lower_linear_classifier);
