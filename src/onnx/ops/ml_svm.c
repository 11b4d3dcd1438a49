/* ai.onnx.ml support vector machines: SVMRegressor and SVMClassifier, computed on the
 * host in float as ONNX Runtime does (its one-vs-one votes, Platt probabilities and
 * binary-score conventions included). Not the linear models (ml_linear.c). */
#include "ml.h"

enum { KERNEL_LINEAR, KERNEL_POLY, KERNEL_RBF, KERNEL_SIGMOID };

typedef struct svm_kernel {
    int type;
    float gamma, coef0, degree;
} svm_kernel;

static int read_kernel(tm_lower *L, svm_kernel *k) {
    const char *s = tm_attr_s(L, "kernel_type", "LINEAR");
    k->type = !strcmp(s, "LINEAR") ? KERNEL_LINEAR : !strcmp(s, "POLY") ? KERNEL_POLY
            : !strcmp(s, "RBF") ? KERNEL_RBF : !strcmp(s, "SIGMOID") ? KERNEL_SIGMOID : -1;
    if (k->type < 0) {
        tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute 'kernel_type' is '%s', expected LINEAR, POLY, "
                 "RBF or SIGMOID", s);
        return -1;
    }
    const float *p;
    int n = tm_attr_floats(L, "kernel_params", &p);
    k->gamma = n > 0 ? p[0] : 0.0f;
    k->coef0 = n > 1 ? p[1] : 0.0f;
    k->degree = n > 2 ? p[2] : 0.0f;
    return 0;
}

/* K(x, v) over f features; `bias` is added to the plain dot product (LINEAR). */
static float kernel_dot(const svm_kernel *k, const float *x, const float *v, int64_t f, float bias) {
    float sum = 0.0f;
    if (k->type == KERNEL_RBF) {
        for (int64_t i = 0; i < f; i++) sum += (x[i] - v[i]) * (x[i] - v[i]);
        return expf(-k->gamma * sum);
    }
    for (int64_t i = 0; i < f; i++) sum += x[i] * v[i];
    if (k->type == KERNEL_LINEAR) return sum + bias;
    float t = k->gamma * sum + k->coef0;
    return k->type == KERNEL_POLY ? powf(t, k->degree) : tanhf(t);
}

/* The input as floats (N, F), as ONNX Runtime casts it. */
static float *input_floats(tm_lower *L, int64_t *rows, int64_t *cols) {
    double *m = ml_input_matrix(L, 0, rows, cols);
    if (!m) return NULL;
    int64_t n = *rows * *cols;
    float *f = malloc((size_t)(n ? n : 1) * sizeof *f);
    for (int64_t i = 0; f && i < n; i++) f[i] = (float)m[i];
    free(m);
    if (!f) tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    return f;
}

/* ---- SVMRegressor ------------------------------------------------------------------ */

/* post_transform is not applied: ONNX Runtime ignores it for regression. */
static tm_status lower_svm_regressor(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    svm_kernel k;
    const float *coef, *rho, *sv;
    int n_coef = tm_attr_floats(L, "coefficients", &coef);
    int n_rho = tm_attr_floats(L, "rho", &rho);
    int n_sv = tm_attr_floats(L, "support_vectors", &sv);
    int64_t n_supports = tm_attr_i(L, "n_supports", 0);
    int one_class = tm_attr_i(L, "one_class", 0) != 0;
    if (read_kernel(L, &k)) return c->status;
    int64_t rows, feats;
    float *x = input_floats(L, &rows, &feats);
    if (!x) return c->status;
    int svc = n_supports > 0;
    if (!svc) k.type = KERNEL_LINEAR;
    if (n_rho < 1 || n_coef != (svc ? n_supports : feats) || (svc && n_sv != n_supports * feats)) {
        free(x);
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attributes 'coefficients' (%d), 'rho' (%d) and "
                        "'support_vectors' (%d) do not fit %lld supports of %lld features", n_coef,
                        n_rho, n_sv, (long long)n_supports, (long long)feats);
    }
    int64_t dims[2] = {rows, 1};
    tm_tensor *y = tm_tensor_alloc(TM_FLOAT, 2, dims, NULL);
    for (int64_t i = 0; y && i < rows; i++) {
        const float *xi = x + i * feats;
        float s;
        if (svc) {
            s = 0.0f;
            for (int64_t v = 0; v < n_supports; v++) s += kernel_dot(&k, xi, sv + v * feats, feats, 0.0f) * coef[v];
            s += rho[0];
        } else {
            s = kernel_dot(&k, xi, coef, feats, rho[0]);
        }
        ((float *)y->data)[i] = one_class ? (s > 0 ? 1.0f : -1.0f) : s;
    }
    free(x);
    if (!y) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    tm_lout(L, 0, tm_val_tensor(c, y, 0));
    return c->status;
}
TM_REGISTER_OP("ai.onnx.ml", "SVMRegressor", 1, 5, lower_svm_regressor);

/* ---- SVMClassifier ----------------------------------------------------------------- */

typedef struct svm_model {
    svm_kernel k;
    ml_labels labels;
    const float *coef, *rho, *sv, *prob_a, *prob_b;
    const int64_t *per_class;   /* support vectors per class (SVC) */
    int64_t *first;             /* index of each class's first support vector */
    int64_t classes, vectors, features, pairs;
    int n_rho, have_proba, all_positive, post;
} svm_model;

/* Platt's pairwise coupling (libsvm's multiclass_probability), in float. */
static void multiclass_probability(int64_t k, const float *r, float *p, float *q, float *qp) {
    for (int64_t i = 0; i < k; i++) {
        p[i] = 1.0f / (float)k;
        q[i * k + i] = 0.0f;
        for (int64_t j = 0; j < i; j++) {
            q[i * k + i] += r[j * k + i] * r[j * k + i];
            q[i * k + j] = q[j * k + i];
        }
        for (int64_t j = i + 1; j < k; j++) {
            q[i * k + i] += r[j * k + i] * r[j * k + i];
            q[i * k + j] = -r[j * k + i] * r[i * k + j];
        }
    }
    float eps = 0.005f / (float)k;
    for (int loop = 0; loop < 100; loop++) {
        float pqp = 0.0f, max_error = 0.0f;
        for (int64_t i = 0; i < k; i++) {
            qp[i] = 0.0f;
            for (int64_t j = 0; j < k; j++) qp[i] += q[i * k + j] * p[j];
            pqp += p[i] * qp[i];
        }
        for (int64_t i = 0; i < k; i++)
            if (fabsf(qp[i] - pqp) > max_error) max_error = fabsf(qp[i] - pqp);
        if (max_error < eps) break;
        for (int64_t i = 0; i < k; i++) {
            float diff = (-qp[i] + pqp) / q[i * k + i];
            p[i] += diff;
            pqp = (pqp + diff * (diff * q[i * k + i] + 2 * qp[i])) / (1 + diff) / (1 + diff);
            for (int64_t j = 0; j < k; j++) {
                qp[j] = (qp[j] + diff * q[i * k + j]) / (1 + diff);
                p[j] /= (1 + diff);
            }
        }
    }
}

/* One-vs-one decision values of a row (pairs of them) and the votes per class. */
static void svc_decisions(const svm_model *m, const float *kern, float *dec, int64_t *votes) {
    int64_t idx = 0;
    for (int64_t i = 0; i < m->classes; i++) votes[i] = 0;
    for (int64_t i = 0; i + 1 < m->classes; i++)
        for (int64_t j = i + 1; j < m->classes; j++, idx++) {
            double sum = 0;
            const float *ci = m->coef + (j - 1) * m->vectors, *cj = m->coef + i * m->vectors;
            for (int64_t v = 0; v < m->per_class[i]; v++) sum += ci[m->first[i] + v] * kern[m->first[i] + v];
            for (int64_t v = 0; v < m->per_class[j]; v++) sum += cj[m->first[j] + v] * kern[m->first[j] + v];
            sum += m->rho[idx < m->n_rho ? idx : 0];
            dec[idx] = (float)sum;
            votes[sum > 0 ? i : j]++;
        }
}

/* Probabilities per class from the pairwise decisions (prob_a, prob_b given). */
static void svc_probabilities(const svm_model *m, const float *dec, float *out, float *work) {
    int64_t k = m->classes;
    float *r = work, *q = r + k * k, *qp = q + k * k;
    memset(r, 0, (size_t)(k * k) * sizeof *r);
    int64_t idx = 0;
    for (int64_t i = 0; i + 1 < k; i++)
        for (int64_t j = i + 1; j < k; j++, idx++) {
            float v = 1.0f - ml_logistic(dec[idx] * m->prob_a[idx] + m->prob_b[idx]);
            v = fminf(fmaxf(v, 1.0e-7f), 1.0f - 1.0e-7f);
            r[i * k + j] = v;
            r[j * k + i] = 1.0f - v;
        }
    multiclass_probability(k, r, out, q, qp);
}

/* The label of a row: votes decide under SVC; scores (max_weight) otherwise. */
static int svm_label(const svm_model *m, tm_tensor *y, int64_t i, const float *scores,
                     int64_t n_scores, const int64_t *votes) {
    int64_t best = 0;
    float max_weight = 0.0f;
    if (votes) {
        for (int64_t c = 1; c < m->classes; c++)
            if (votes[c] > votes[best]) best = c;
    } else {
        for (int64_t c = 1; c < n_scores; c++)
            if (scores[c] > scores[best]) best = c;
        max_weight = scores[best];
    }
    if (m->pairs != 1 || m->have_proba) return ml_set_label(y, i, &m->labels, best);
    /* Binary without probabilities: ONNX Runtime's thresholds on the top score. */
    if ((m->all_positive && max_weight >= 0.5f) || (!m->all_positive && max_weight > 0))
        return ml_set_label(y, i, &m->labels, 1);
    return ml_set_label(y, i, &m->labels, best);
}

/* Scores and label of one row into z (width columns) and y[i]. work: scratch. */
static int svm_row(const svm_model *m, const float *x, float *z, int64_t width, tm_tensor *y,
                   int64_t i, float *work, int64_t *votes) {
    if (!m->vectors) {  /* linear (liblinear) mode: one score per class */
        for (int64_t c = 0; c < m->classes; c++)
            z[c] = kernel_dot(&m->k, x, m->coef + c * m->features, m->features, m->rho[0]);
        if (svm_label(m, y, i, z, m->classes, NULL)) return -1;
        if (m->classes > 1) ml_transform_row(z, m->classes, m->post);
        else if (m->post == ML_PROBIT) z[0] = ml_probit(z[0]);
        return 0;
    }
    float *kern = work, *dec = kern + m->vectors, *rest = dec + m->pairs;
    for (int64_t v = 0; v < m->vectors; v++) kern[v] = kernel_dot(&m->k, x, m->sv + v * m->features, m->features, 0.0f);
    svc_decisions(m, kern, dec, votes);
    if (m->have_proba) {
        svc_probabilities(m, dec, z, rest);
        if (svm_label(m, y, i, z, m->classes, votes)) return -1;
        if (m->classes > 1) ml_transform_row(z, m->classes, m->post);
        else if (m->post == ML_PROBIT) z[0] = ml_probit(z[0]);
        return 0;
    }
    if (svm_label(m, y, i, dec, m->pairs, votes)) return -1;
    if (m->classes > 2) {
        memcpy(z, dec, (size_t)m->pairs * sizeof *z);
        ml_transform_row(z, m->pairs, m->post);
    } else {
        z[0] = dec[0];
        if (width > 1) z[1] = 0.0f;
        ml_binary_scores(dec[0], m->post, m->post == ML_NONE ? 2 : 0, z);
    }
    return 0;
}

static int read_svm(tm_lower *L, svm_model *m) {
    int n_coef = tm_attr_floats(L, "coefficients", &m->coef);
    int n_sv = tm_attr_floats(L, "support_vectors", &m->sv);
    int n_pa = tm_attr_floats(L, "prob_a", &m->prob_a);
    int n_pb = tm_attr_floats(L, "prob_b", &m->prob_b);
    int n_per = tm_attr_ints(L, "vectors_per_class", &m->per_class);
    m->n_rho = tm_attr_floats(L, "rho", &m->rho);
    m->post = ml_post_transform(L);
    if (m->post < 0 || read_kernel(L, &m->k) || ml_read_labels(L, "classlabels_ints", &m->labels)) return -1;
    m->classes = m->labels.n;
    m->pairs = m->classes * (m->classes - 1) / 2;
    m->have_proba = n_pa > 0;
    for (int i = 0; i < n_per; i++) m->vectors += m->per_class[i];
    if (!m->vectors) m->k.type = KERNEL_LINEAR;
    m->all_positive = 1;
    for (int i = 0; i < n_coef; i++) m->all_positive &= m->coef[i] >= 0;
    int bad = n_coef < 1 || m->n_rho < 1 || n_pa != n_pb || (m->have_proba && n_pa < m->pairs);
    if (m->vectors)
        bad |= n_per != m->classes || n_sv != m->vectors * m->features ||
               n_coef < (m->classes - 1) * m->vectors;
    else
        bad |= n_coef != m->classes * m->features;
    if (bad) {
        tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attributes 'coefficients' (%d), 'support_vectors' (%d), "
                 "'vectors_per_class' (%d), 'rho' (%d), 'prob_a'/'prob_b' (%d/%d) do not fit %lld "
                 "classes of %lld features", n_coef, n_sv, n_per, m->n_rho, n_pa, n_pb,
                 (long long)m->classes, (long long)m->features);
        return -1;
    }
    m->first = malloc((size_t)(m->classes + 1) * sizeof *m->first);
    if (!m->first) {
        tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
        return -1;
    }
    for (int64_t c = 0, acc = 0; c < m->classes; acc += m->vectors ? m->per_class[c] : 0, c++) m->first[c] = acc;
    return 0;
}

static tm_status lower_svm_classifier(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    svm_model m = {0};
    int64_t rows;
    float *x = input_floats(L, &rows, &m.features);
    if (!x) return c->status;
    if (read_svm(L, &m)) {
        free(x);
        free(m.first);
        return c->status;
    }
    int64_t width = m.vectors && !m.have_proba ? (m.classes > 2 ? m.pairs : 2) : m.classes;
    int64_t zdims[2] = {rows, width};
    tm_tensor *y = ml_label_tensor(&m.labels, rows);
    tm_tensor *z = tm_tensor_alloc(TM_FLOAT, 2, zdims, NULL);
    /* kernels, decisions, then the coupling's r, q (k x k each) and qp (k) */
    float *work = malloc((size_t)(m.vectors + m.pairs + 3 * m.classes * m.classes + 1) * sizeof *work);
    int64_t *votes = malloc((size_t)(m.classes + 1) * sizeof *votes);
    int ok = y && z && work && votes;
    for (int64_t i = 0; ok && i < rows; i++)
        ok = !svm_row(&m, x + i * m.features, (float *)z->data + i * width, width, y, i, work, votes);
    free(work);
    free(votes);
    free(x);
    free(m.first);
    if (!ok) {
        tm_tensor_free(y);
        tm_tensor_free(z);
        y = z = NULL;
    }
    return ml_out2(L, y, z);
}
TM_REGISTER_OP("ai.onnx.ml", "SVMClassifier", 1, 5, lower_svm_classifier);
