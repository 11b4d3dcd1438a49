/* ai.onnx.ml tree ensembles: TreeEnsemble (opset 5), TreeEnsembleRegressor and
 * TreeEnsembleClassifier (opsets 1-4, with the *_as_tensor attributes from 3), computed
 * on the host. All three are read into one forest (branch nodes, leaves holding target
 * weights) and scored alike; aggregation, base values, post-transforms and the binary
 * classifier's conventions follow ONNX Runtime. Not linear models or SVMs. */
#include "ml.h"

enum { BRANCH_LEQ, BRANCH_LT, BRANCH_GTE, BRANCH_GT, BRANCH_EQ, BRANCH_NEQ, BRANCH_MEMBER, LEAF };
enum { AGG_AVERAGE, AGG_SUM, AGG_MIN, AGG_MAX };

typedef struct tnode {
    uint8_t mode;
    uint8_t missing_true;    /* NaN features take the true branch */
    int64_t feature;
    double threshold;
    int64_t child[2];        /* true, false: node indices */
    int64_t first, count;    /* leaf: its weights; BRANCH_MEMBER: its members */
} tnode;

typedef struct tweight {
    int64_t target;
    double value;
} tweight;

typedef struct forest {
    tnode *nodes;
    int64_t n_nodes;
    int64_t *roots;
    int64_t n_roots;
    tweight *weights;
    int64_t n_weights;
    double *members;
    int64_t n_members;
    int64_t n_targets;       /* targets, or classes */
    int aggregate, post;
    double *base;
    int64_t n_base;
    int single;              /* thresholds and features compared in float */
} forest;

static void forest_free(forest *f) {
    free(f->nodes);
    free(f->roots);
    free(f->weights);
    free(f->members);
    free(f->base);
}

/* malloc of n items, never of 0 bytes. */
static void *alloc_n(int64_t n, size_t size) { return malloc((size_t)(n > 0 ? n : 1) * size); }

static double round_to(const forest *f, double v) { return f->single ? (double)(float)v : v; }

/* ---- Scoring ----------------------------------------------------------------------- */

static int takes_true(const forest *f, const tnode *n, double v) {
    if (n->missing_true && isnan(v)) return 1;
    switch (n->mode) {
    case BRANCH_LEQ: return v <= n->threshold;
    case BRANCH_LT: return v < n->threshold;
    case BRANCH_GTE: return v >= n->threshold;
    case BRANCH_GT: return v > n->threshold;
    case BRANCH_EQ: return v == n->threshold;
    case BRANCH_NEQ: return v != n->threshold;
    default:
        for (int64_t i = 0; i < n->count; i++)
            if (f->members[n->first + i] == v) return 1;
        return 0;
    }
}

/* The leaf a row reaches from root, or NULL when the walk loops. */
static const tnode *find_leaf(const forest *f, int64_t root, const double *x) {
    const tnode *n = &f->nodes[root];
    for (int64_t steps = 0; n->mode != LEAF; steps++) {
        if (steps > f->n_nodes) return NULL;
        n = &f->nodes[n->child[takes_true(f, n, x[n->feature]) ? 0 : 1]];
    }
    return n;
}

/* Aggregates every tree's leaf weights for one row into s/has (n_targets each). */
static int score_row(const forest *f, const double *x, double *s, uint8_t *has) {
    memset(s, 0, (size_t)f->n_targets * sizeof *s);
    memset(has, 0, (size_t)f->n_targets);
    for (int64_t t = 0; t < f->n_roots; t++) {
        const tnode *leaf = find_leaf(f, f->roots[t], x);
        if (!leaf) return -1;
        for (int64_t k = 0; k < leaf->count; k++) {
            const tweight *w = &f->weights[leaf->first + k];
            double *d = &s[w->target];
            if (f->aggregate == AGG_MIN) *d = !has[w->target] || w->value < *d ? w->value : *d;
            else if (f->aggregate == AGG_MAX) *d = !has[w->target] || w->value > *d ? w->value : *d;
            else *d += w->value;
            has[w->target] = 1;
        }
    }
    return 0;
}

/* Regression: averaging, base values and the post-transform of one row into z (tmp:
 * n_targets floats, as transforms run in float). As in ONNX Runtime, with one target the
 * base value always applies and only PROBIT does; with several, a target no leaf
 * touched is 0 whatever its base value. */
static void finish_regression(const forest *f, const double *s, const uint8_t *has, double *z,
                              float *tmp) {
    int64_t n = f->n_targets;
    int use_base = f->n_base == n;
    for (int64_t t = 0; t < n; t++) {
        double v = has[t] ? s[t] : 0.0;
        if (f->aggregate == AGG_AVERAGE) v /= (double)f->n_roots;
        z[t] = use_base && (has[t] || n == 1) ? v + f->base[t] : v;
    }
    if ((n == 1 && f->post != ML_PROBIT) || (n > 1 && f->post == ML_NONE)) return;
    for (int64_t t = 0; t < n; t++) tmp[t] = (float)z[t];
    if (n == 1) tmp[0] = ml_probit(tmp[0]);
    else ml_transform_row(tmp, n, f->post);
    for (int64_t t = 0; t < n; t++) z[t] = tmp[t];
}

/* ---- Reading the v1/v3 attributes -------------------------------------------------- */

/* A float list attribute, or its *_as_tensor form (opset 3+), as doubles. Returns the
 * count, -1 when absent; *out is malloc'd (NULL when absent). */
static int64_t read_values(tm_lower *L, const char *name, double **out) {
    char tname[64];
    snprintf(tname, sizeof tname, "%s_as_tensor", name);
    const tm_tensor *t = tm_lopset(L) >= 3 ? tm_attr_t(L, tname) : NULL;
    const float *fl = NULL;
    int64_t n = t ? tm_tensor_numel_(t) : tm_attr_floats(L, name, &fl);
    *out = NULL;
    if (n < 0) return -1;
    *out = malloc((size_t)(n ? n : 1) * sizeof **out);
    if (!*out) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory"), -2;
    for (int64_t i = 0; i < n; i++) (*out)[i] = t ? tm_load_f64(t->data, t->dtype, (size_t)i) : fl[i];
    return n;
}

typedef struct node_key {
    int64_t tree, node, index;
} node_key;

static int cmp_key(const void *a, const void *b) {
    const node_key *x = a, *y = b;
    if (x->tree != y->tree) return x->tree < y->tree ? -1 : 1;
    if (x->node != y->node) return x->node < y->node ? -1 : 1;
    return (x->index > y->index) - (x->index < y->index);
}

static int64_t find_node(const node_key *keys, int64_t n, int64_t tree, int64_t node) {
    node_key k = {tree, node, 0};
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int r = cmp_key(&keys[mid], &k);
        if (r < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && keys[lo].tree == tree && keys[lo].node == node ? keys[lo].index : -1;
}

static int mode_from_name(const tm_bytes *b) {
    static const char *names[] = {"BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT",
                                  "BRANCH_EQ", "BRANCH_NEQ", NULL, "LEAF"};
    for (int m = 0; m < 8; m++)
        if (names[m] && strlen(names[m]) == b->len && !memcmp(names[m], b->data, b->len)) return m;
    return -1;
}

typedef struct v3_lists {
    const int64_t *tree, *node, *feature, *yes, *no, *missing;
    const tm_bytes *modes;
    int64_t n, n_missing;
} v3_lists;

static tm_status v3_nodes(tm_lower *L, forest *f, const v3_lists *a, const double *values,
                          node_key *keys) {
    for (int64_t i = 0; i < a->n; i++) keys[i] = (node_key){a->tree[i], a->node[i], i};
    qsort(keys, (size_t)a->n, sizeof *keys, cmp_key);
    for (int64_t i = 1; i < a->n; i++)
        if (keys[i].tree == keys[i - 1].tree && keys[i].node == keys[i - 1].node)
            return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "node %lld of tree %lld is listed twice",
                            (long long)keys[i].node, (long long)keys[i].tree);
    for (int64_t i = 0; i < a->n; i++) {
        tnode *n = &f->nodes[i];
        int m = mode_from_name(&a->modes[i]);
        if (m < 0)
            return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute 'nodes_modes' entry %lld is '%.*s'",
                            (long long)i, (int)a->modes[i].len, a->modes[i].data);
        n->mode = (uint8_t)m;
        n->feature = a->feature[i];
        n->threshold = round_to(f, values[i]);
        n->missing_true = i < a->n_missing && a->missing[i] == 1;
        if (m == LEAF) continue;
        if (n->feature < 0)
            return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "node %lld has feature %lld", (long long)i,
                            (long long)n->feature);
        n->child[0] = find_node(keys, a->n, a->tree[i], a->yes[i]);
        n->child[1] = find_node(keys, a->n, a->tree[i], a->no[i]);
        if (n->child[0] < 0 || n->child[1] < 0)
            return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "node %lld of tree %lld points to missing node %lld",
                            (long long)a->node[i], (long long)a->tree[i],
                            (long long)(n->child[0] < 0 ? a->yes[i] : a->no[i]));
    }
    /* Each run of one tree id starts a tree, at its first listed node (as ONNX Runtime). */
    for (int64_t i = 0; i < a->n; i++)
        if (!i || a->tree[i] != a->tree[i - 1]) f->roots[f->n_roots++] = i;
    return TM_OK;
}

/* Leaf weights from the target_* (class_*) lists, grouped per leaf in (tree, node) order.
 * Weights on branch nodes are ignored, as ONNX Runtime does. */
static tm_status v3_weights(tm_lower *L, forest *f, const char *prefix, const node_key *nodes,
                            int64_t n_nodes) {
    char name[64];
    const int64_t *ids, *wn, *wt;
    double *wv = NULL;
    snprintf(name, sizeof name, "%s_ids", prefix);
    int64_t n = tm_attr_ints(L, name, &ids);
    snprintf(name, sizeof name, "%s_nodeids", prefix);
    int64_t nn = tm_attr_ints(L, name, &wn);
    snprintf(name, sizeof name, "%s_treeids", prefix);
    int64_t nt = tm_attr_ints(L, name, &wt);
    snprintf(name, sizeof name, "%s_weights", prefix);
    int64_t nw = read_values(L, name, &wv);
    if (nw == -2) return tm_lctx(L)->status;
    n = n < 0 ? 0 : n;
    if ((nn < 0 ? 0 : nn) != n || (nt < 0 ? 0 : nt) != n || (nw < 0 ? 0 : nw) != n) {
        free(wv);
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attributes '%s_ids', '%s_nodeids', '%s_treeids' "
                        "and '%s_weights' differ in length", prefix, prefix, prefix, prefix);
    }
    node_key *order = malloc((size_t)(n ? n : 1) * sizeof *order);
    f->weights = malloc((size_t)(n ? n : 1) * sizeof *f->weights);
    tm_status st = order && f->weights ? TM_OK : tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    for (int64_t i = 0; !st && i < n; i++) order[i] = (node_key){wt[i], wn[i], i};
    if (!st) qsort(order, (size_t)n, sizeof *order, cmp_key);
    for (int64_t k = 0; !st && k < n; k++) {
        int64_t i = order[k].index, at = find_node(nodes, n_nodes, wt[i], wn[i]);
        if (at < 0)
            st = tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "%s weight %lld names missing node %lld of tree %lld",
                          prefix, (long long)i, (long long)wn[i], (long long)wt[i]);
        else if (ids[i] < 0 || ids[i] >= f->n_targets)
            st = tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "%s_ids entry %lld is %lld, outside [0, %lld)",
                          prefix, (long long)i, (long long)ids[i], (long long)f->n_targets);
        if (st || f->nodes[at].mode != LEAF) continue;
        tnode *leaf = &f->nodes[at];
        if (!leaf->count) leaf->first = f->n_weights;
        leaf->count++;
        f->weights[f->n_weights++] = (tweight){ids[i], wv[i]};
    }
    free(order);
    free(wv);
    return st;
}

/* TreeEnsembleRegressor / TreeEnsembleClassifier attributes into f (n_targets set). */
static tm_status read_v3(tm_lower *L, forest *f, const char *prefix) {
    v3_lists a = {0};
    a.n = tm_attr_ints(L, "nodes_treeids", &a.tree);
    int64_t n_node = tm_attr_ints(L, "nodes_nodeids", &a.node);
    int64_t n_feat = tm_attr_ints(L, "nodes_featureids", &a.feature);
    int64_t n_yes = tm_attr_ints(L, "nodes_truenodeids", &a.yes);
    int64_t n_no = tm_attr_ints(L, "nodes_falsenodeids", &a.no);
    int64_t n_modes = tm_attr_strings(L, "nodes_modes", &a.modes);
    a.n_missing = tm_attr_ints(L, "nodes_missing_value_tracks_true", &a.missing);
    double *values = NULL;
    int64_t n_values = read_values(L, "nodes_values", &values);
    if (n_values == -2) return tm_lctx(L)->status;
    if (a.n < 1 || n_node != a.n || n_feat != a.n || n_yes != a.n || n_no != a.n ||
        n_modes != a.n || n_values != a.n) {
        free(values);
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "the nodes_* attributes must be non-empty and of one "
                        "length (treeids %lld, nodeids %lld, featureids %lld, modes %lld, values %lld)",
                        (long long)a.n, (long long)n_node, (long long)n_feat, (long long)n_modes,
                        (long long)n_values);
    }
    f->n_nodes = a.n;
    f->nodes = calloc((size_t)a.n, sizeof *f->nodes);
    f->roots = malloc((size_t)a.n * sizeof *f->roots);
    node_key *keys = malloc((size_t)a.n * sizeof *keys);
    tm_status st = f->nodes && f->roots && keys ? TM_OK : tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    if (!st) st = v3_nodes(L, f, &a, values, keys);
    if (!st) st = v3_weights(L, f, prefix, keys, a.n);
    free(keys);
    free(values);
    if (st) return st;
    f->n_base = read_values(L, "base_values", &f->base);
    if (f->n_base == -2) return tm_lctx(L)->status;
    if (f->n_base < 0) f->n_base = 0;
    return TM_OK;
}

/* The input matrix for a forest: features must cover every feature a node reads. */
static double *forest_input(tm_lower *L, forest *f, int64_t *rows, int64_t *cols) {
    tm_ctx *c = tm_lctx(L);
    tm_val xv = tm_lin(L, 0);
    f->single = xv != TM_NONE && tm_vdtype(c, xv) != TM_DOUBLE;
    double *x = ml_input_matrix(L, 0, rows, cols);
    if (!x) return NULL;
    int64_t max_feature = -1;
    for (int64_t i = 0; i < f->n_nodes; i++)
        if (f->nodes[i].mode != LEAF && f->nodes[i].feature > max_feature) max_feature = f->nodes[i].feature;
    if (max_feature >= *cols) {
        free(x);
        tm_lfail(L, TM_ERR_SHAPE, "a node reads feature %lld but input X has %lld features",
                 (long long)max_feature, (long long)*cols);
        return NULL;
    }
    for (int64_t i = 0; f->single && i < *rows * *cols; i++) x[i] = (float)x[i];
    return x;
}

/* Rounds the thresholds and weights once the input's precision is known. */
static void forest_round(forest *f) {
    for (int64_t i = 0; i < f->n_nodes; i++) f->nodes[i].threshold = round_to(f, f->nodes[i].threshold);
    for (int64_t i = 0; i < f->n_weights; i++) f->weights[i].value = round_to(f, f->weights[i].value);
    for (int64_t i = 0; i < f->n_base; i++) f->base[i] = round_to(f, f->base[i]);
    for (int64_t i = 0; i < f->n_members; i++) f->members[i] = round_to(f, f->members[i]);
}

/* Scores all rows; regression results into out (rows x n_targets). */
static tm_status run_regression(tm_lower *L, const forest *f, const double *x, int64_t rows,
                                int64_t cols, double *out) {
    double *s = malloc((size_t)f->n_targets * sizeof *s);
    float *tmp = malloc((size_t)f->n_targets * sizeof *tmp);
    uint8_t *has = malloc((size_t)f->n_targets);
    tm_status st = s && tmp && has ? TM_OK : tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    for (int64_t i = 0; !st && i < rows; i++) {
        if (score_row(f, x + i * cols, s, has))
            st = tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "a tree's nodes form a cycle");
        else
            finish_regression(f, s, has, out + i * f->n_targets, tmp);
    }
    free(s);
    free(tmp);
    free(has);
    return st;
}

/* The (rows, n_targets) output of dtype dt from doubles. */
static tm_tensor *regression_tensor(const double *v, int64_t rows, int64_t targets, tm_dtype dt) {
    int64_t dims[2] = {rows, targets};
    tm_tensor *y = tm_tensor_alloc(dt, 2, dims, NULL);
    for (int64_t i = 0; y && i < rows * targets; i++) tm_store_f64(y->data, dt, (size_t)i, v[i]);
    return y;
}

static tm_status lower_tree_regressor(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    forest f = {0};
    const char *agg = tm_attr_s(L, "aggregate_function", "SUM");
    f.aggregate = !strcmp(agg, "AVERAGE") ? AGG_AVERAGE : !strcmp(agg, "SUM") ? AGG_SUM
                : !strcmp(agg, "MIN") ? AGG_MIN : !strcmp(agg, "MAX") ? AGG_MAX : -1;
    f.n_targets = tm_attr_i(L, "n_targets", 1);
    f.post = ml_post_transform(L);
    if (f.post < 0) return c->status;
    if (f.aggregate < 0)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute 'aggregate_function' is '%s', expected "
                        "AVERAGE, SUM, MIN or MAX", agg);
    if (f.n_targets < 1)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute 'n_targets' must be >= 1, got %lld",
                        (long long)f.n_targets);
    int64_t rows, cols;
    double *x = NULL, *out = NULL;
    if (read_v3(L, &f, "target") || !(x = forest_input(L, &f, &rows, &cols))) goto done;
    forest_round(&f);
    if (!(out = alloc_n(rows * f.n_targets, sizeof *out))) {
        tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    if (!run_regression(L, &f, x, rows, cols, out)) {
        tm_tensor *y = regression_tensor(out, rows, f.n_targets, TM_FLOAT);
        if (!y) tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
        else tm_lout(L, 0, tm_val_tensor(c, y, 0));
    }
done:
    free(out);
    free(x);
    forest_free(&f);
    return c->status;
}
TM_REGISTER_OP("ai.onnx.ml", "TreeEnsembleRegressor", 1, 4, lower_tree_regressor);

/* ---- TreeEnsembleClassifier -------------------------------------------------------- */

typedef struct classifier {
    forest f;
    ml_labels labels;
    int binary;              /* two classes, weights on one class id only */
    int all_positive;        /* every class weight >= 0 */
} classifier;

/* Two classes: ONNX Runtime's base-value handling, label choice and score layout. The
 * has flags matter: scores that no leaf touched are written as 0. */
static int finish_binary(const classifier *m, double *s, uint8_t *has, float *z, tm_tensor *y, int64_t i) {
    const forest *f = &m->f;
    int mode = -1, n = 2;
    if (f->n_base == 2) {
        if (has[1]) {
            s[1] = f->base[1] + s[0];
            s[0] = -s[1];
        } else {
            s[1] += f->base[1];
            s[0] += f->base[0];
        }
    } else if (f->n_base == 1) {
        s[0] += f->base[0];
        n = has[1] ? 2 : 1;
    } else if (f->n_base == 0) {
        mode = 3;
        n = has[1] ? 2 : 1;
    }
    double pos = n == 2 && has[1] ? s[1] : has[0] ? s[0] : 0.0;
    int rc, positive;
    if (m->binary) {
        positive = m->all_positive ? pos > 0.5 : pos > 0;
        mode = m->all_positive ? (positive ? 0 : 1) : (positive ? 2 : 3);
        rc = ml_set_label(y, i, &m->labels, positive);
    } else {
        positive = pos > 0;
        rc = m->labels.strs ? ml_set_label(y, i, &m->labels, positive) : ml_set_label_int(y, i, positive);
    }
    float v0 = has[0] ? (float)s[0] : 0.0f;
    if (n == 2) {
        z[0] = v0;
        z[1] = has[1] ? (float)s[1] : 0.0f;
        ml_transform_row(z, 2, f->post);
    } else {
        ml_binary_scores(v0, f->post, mode, z);
    }
    return rc;
}

static int finish_classes(const classifier *m, double *s, uint8_t *has, float *z, tm_tensor *y, int64_t i) {
    const forest *f = &m->f;
    int64_t n = f->n_targets, best = -1;
    for (int64_t k = 0; k < f->n_base && k < n; k++) {
        s[k] = has[k] ? s[k] + f->base[k] : f->base[k];
        has[k] = 1;
    }
    for (int64_t k = 0; k < n; k++) {
        if (has[k] && (best < 0 || s[k] > s[best])) best = k;
        z[k] = has[k] ? (float)s[k] : 0.0f;
    }
    if (n > 1) ml_transform_row(z, n, f->post);
    else if (f->post == ML_PROBIT) z[0] = ml_probit(z[0]);
    return ml_set_label(y, i, &m->labels, best < 0 ? 0 : best);
}

static tm_status run_classifier(tm_lower *L, classifier *m, const double *x, int64_t rows,
                                int64_t cols, tm_tensor *y, tm_tensor *z) {
    int64_t n = m->f.n_targets;
    double *s = malloc((size_t)n * sizeof *s);
    uint8_t *has = malloc((size_t)n);
    tm_status st = s && has ? TM_OK : tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    for (int64_t i = 0; !st && i < rows; i++) {
        float *zi = (float *)z->data + i * n;
        if (score_row(&m->f, x + i * cols, s, has)) {
            st = tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "a tree's nodes form a cycle");
            break;
        }
        int rc = n == 2 ? finish_binary(m, s, has, zi, y, i) : finish_classes(m, s, has, zi, y, i);
        if (rc) st = tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    }
    free(s);
    free(has);
    return st;
}

/* Binary case and sign of the weights, from the class_* lists. */
static void classify_weights(tm_lower *L, classifier *m) {
    const int64_t *ids;
    int64_t n = tm_attr_ints(L, "class_ids", &ids);
    int one_id = 1;
    for (int64_t i = 1; i < n; i++) one_id &= ids[i] == ids[0];
    m->binary = m->f.n_targets == 2 && n > 0 && one_id;
    double *w = NULL;
    int64_t nw = read_values(L, "class_weights", &w);
    m->all_positive = 1;
    for (int64_t i = 0; i < nw; i++) m->all_positive &= w[i] >= 0;
    free(w);
}

static tm_status lower_tree_classifier(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    classifier m = {0};
    m.f.aggregate = AGG_SUM;
    m.f.post = ml_post_transform(L);
    if (m.f.post < 0 || ml_read_labels(L, "classlabels_int64s", &m.labels)) return c->status;
    m.f.n_targets = m.labels.n;
    int64_t rows, cols;
    double *x = NULL;
    tm_tensor *y = NULL, *z = NULL;
    if (read_v3(L, &m.f, "class") || !(x = forest_input(L, &m.f, &rows, &cols))) goto done;
    forest_round(&m.f);
    classify_weights(L, &m);
    int64_t dims[2] = {rows, m.f.n_targets};
    y = ml_label_tensor(&m.labels, rows);
    z = tm_tensor_alloc(TM_FLOAT, 2, dims, NULL);
    if (!y || !z) tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    else if (!run_classifier(L, &m, x, rows, cols, y, z)) {
        ml_out2(L, y, z);
        y = z = NULL;
    }
done:
    tm_tensor_free(y);
    tm_tensor_free(z);
    free(x);
    forest_free(&m.f);
    return c->status;
}
TM_REGISTER_OP("ai.onnx.ml", "TreeEnsembleClassifier", 1, 4, lower_tree_classifier);

/* ---- TreeEnsemble (opset 5) -------------------------------------------------------- */

/* A tensor attribute as doubles (malloc'd); the count, -1 absent, -2 failed. */
static int64_t tensor_values(tm_lower *L, const char *name, double **out) {
    const tm_tensor *t = tm_attr_t(L, name);
    *out = NULL;
    if (!t) return -1;
    int64_t n = tm_tensor_numel_(t);
    if (t->dtype == TM_STRING) return tm_lfail(L, TM_ERR_DTYPE, "attribute '%s' must be numeric", name), -2;
    *out = malloc((size_t)(n ? n : 1) * sizeof **out);
    if (!*out) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory"), -2;
    for (int64_t i = 0; i < n; i++) (*out)[i] = tm_load_f64(t->data, t->dtype, (size_t)i);
    return n;
}

typedef struct v5_lists {
    const int64_t *feature, *yes, *no, *yes_leaf, *no_leaf, *missing, *targets, *roots;
    int64_t n, n_missing, n_leaves, n_roots;
    double *modes, *splits, *weights, *members;
    int64_t n_members;
} v5_lists;

static void v5_free(v5_lists *a) {
    free(a->modes);
    free(a->splits);
    free(a->weights);
    free(a->members);
}

static tm_status v5_read(tm_lower *L, v5_lists *a) {
    a->n = tm_attr_ints(L, "nodes_featureids", &a->feature);
    int64_t ny = tm_attr_ints(L, "nodes_truenodeids", &a->yes);
    int64_t nn = tm_attr_ints(L, "nodes_falsenodeids", &a->no);
    int64_t nyl = tm_attr_ints(L, "nodes_trueleafs", &a->yes_leaf);
    int64_t nnl = tm_attr_ints(L, "nodes_falseleafs", &a->no_leaf);
    a->n_missing = tm_attr_ints(L, "nodes_missing_value_tracks_true", &a->missing);
    a->n_leaves = tm_attr_ints(L, "leaf_targetids", &a->targets);
    a->n_roots = tm_attr_ints(L, "tree_roots", &a->roots);
    int64_t nm = tensor_values(L, "nodes_modes", &a->modes);
    int64_t ns = nm >= -1 ? tensor_values(L, "nodes_splits", &a->splits) : -2;
    int64_t nw = ns >= -1 ? tensor_values(L, "leaf_weights", &a->weights) : -2;
    a->n_members = nw >= -1 ? tensor_values(L, "membership_values", &a->members) : -2;
    if (a->n_members == -2) return tm_lctx(L)->status;
    if (a->n < 1 || ny != a->n || nn != a->n || nyl != a->n || nnl != a->n || nm != a->n || ns != a->n)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "the nodes_* attributes must be non-empty and of one "
                        "length (featureids %lld, modes %lld, splits %lld, truenodeids %lld)",
                        (long long)a->n, (long long)nm, (long long)ns, (long long)ny);
    if (a->n_leaves < 1 || nw != a->n_leaves)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attributes 'leaf_targetids' (%lld) and 'leaf_weights' "
                        "(%lld) must be non-empty and of one length", (long long)a->n_leaves, (long long)nw);
    if (a->n_roots < 1) return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute 'tree_roots' is required");
    return TM_OK;
}

/* Child k (0 true, 1 false) of node i as a forest index: leaves follow the branches. */
static int64_t v5_child(const v5_lists *a, int64_t i, int k) {
    int64_t id = k ? a->no[i] : a->yes[i];
    int leaf = (k ? a->no_leaf[i] : a->yes_leaf[i]) != 0;
    if (id < 0 || id >= (leaf ? a->n_leaves : a->n)) return -1;
    return leaf ? a->n + id : id;
}

static tm_status v5_build(tm_lower *L, forest *f, const v5_lists *a) {
    f->n_nodes = a->n + a->n_leaves;
    f->nodes = calloc((size_t)f->n_nodes, sizeof *f->nodes);
    f->weights = malloc((size_t)a->n_leaves * sizeof *f->weights);
    f->roots = malloc((size_t)a->n_roots * sizeof *f->roots);
    f->members = malloc((size_t)(a->n_members > 0 ? a->n_members : 1) * sizeof *f->members);
    if (!f->nodes || !f->weights || !f->roots || !f->members) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    int64_t next_member = 0;
    for (int64_t i = 0; i < a->n; i++) {
        tnode *n = &f->nodes[i];
        int64_t m = (int64_t)a->modes[i];
        if (m < BRANCH_LEQ || m > BRANCH_MEMBER)
            return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute 'nodes_modes' entry %lld is %lld, "
                            "expected 0 to 6", (long long)i, (long long)m);
        n->mode = (uint8_t)m;
        n->feature = a->feature[i];
        n->threshold = a->splits[i];
        n->missing_true = i < a->n_missing && a->missing[i] == 1;
        n->child[0] = v5_child(a, i, 0);
        n->child[1] = v5_child(a, i, 1);
        if (n->child[0] < 0 || n->child[1] < 0 || n->feature < 0)
            return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "node %lld has an out-of-range child or feature",
                            (long long)i);
        if (m != BRANCH_MEMBER) continue;
        /* Each member node's set is the next run of membership_values up to a NaN. */
        n->first = next_member;
        while (next_member < a->n_members && !isnan(a->members[next_member]))
            f->members[next_member] = a->members[next_member], next_member++;
        n->count = next_member - n->first;
        next_member++;
    }
    f->n_members = next_member < a->n_members ? next_member : a->n_members;
    for (int64_t l = 0; l < a->n_leaves; l++) {
        if (a->targets[l] < 0 || a->targets[l] >= f->n_targets)
            return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute 'leaf_targetids' entry %lld is %lld, "
                            "outside [0, %lld)", (long long)l, (long long)a->targets[l], (long long)f->n_targets);
        tnode *leaf = &f->nodes[a->n + l];
        leaf->mode = LEAF;
        leaf->first = l;
        leaf->count = 1;
        f->weights[l] = (tweight){a->targets[l], a->weights[l]};
    }
    f->n_weights = a->n_leaves;
    for (int64_t r = 0; r < a->n_roots; r++) {
        if (a->roots[r] < 0 || a->roots[r] >= a->n)
            return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute 'tree_roots' entry %lld is %lld, outside "
                            "the %lld nodes", (long long)r, (long long)a->roots[r], (long long)a->n);
        f->roots[f->n_roots++] = a->roots[r];
    }
    return TM_OK;
}

static tm_status lower_tree_ensemble(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    /* The spec's numbering. ONNX Runtime 1.30 reads 1 as LOGISTIC and 2 as SOFTMAX (its
     * own enum order); the ONNX reference applies no post-transform at all. */
    static const int posts[] = {ML_NONE, ML_SOFTMAX, ML_LOGISTIC, ML_SOFTMAX_ZERO, ML_PROBIT};
    forest f = {0};
    int64_t agg = tm_attr_i(L, "aggregate_function", 1), post = tm_attr_i(L, "post_transform", 0);
    f.n_targets = tm_attr_i(L, "n_targets", 0);
    if (agg < 0 || agg > 3 || post < 0 || post > 4 || f.n_targets < 1)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attributes 'aggregate_function' (%lld), "
                        "'post_transform' (%lld) or 'n_targets' (%lld) out of range", (long long)agg,
                        (long long)post, (long long)f.n_targets);
    f.aggregate = (int)agg;
    f.post = posts[post];
    tm_val xv = tm_lin(L, 0);
    if (xv == TM_NONE) return tm_ctx_ok(c) ? tm_lfail(L, TM_ERR_PARSE, "input X is missing") : c->status;
    tm_dtype dt = tm_vdtype(c, xv);
    if (dt != TM_FLOAT && dt != TM_DOUBLE && dt != TM_FLOAT16)
        return tm_lfail(L, TM_ERR_DTYPE, "input X must be float, double or float16, got %s", tm_dtype_name(dt));
    v5_lists a = {0};
    double *x = NULL, *out = NULL;
    int64_t rows, cols;
    if (v5_read(L, &a) || v5_build(L, &f, &a)) goto done;
    /* float16 goes through ml_input_matrix as float: the features are exact there. */
    tm_val x32 = dt == TM_FLOAT16 ? tm_cast(c, xv, TM_FLOAT) : xv;
    if (x32 == TM_NONE) goto done;
    f.single = dt != TM_DOUBLE;
    forest_round(&f);
    const tm_tensor *xt = tm_host(c, x32);
    if (!xt) goto done;
    if (xt->rank != 1 && xt->rank != 2) {
        tm_lfail(L, TM_ERR_SHAPE, "input X must be [F] or [N, F], got rank %d", xt->rank);
        goto done;
    }
    rows = xt->rank == 2 ? xt->dims[0] : 1;
    cols = xt->dims[xt->rank - 1];
    x = alloc_n(rows * cols, sizeof *x);
    out = alloc_n(rows * f.n_targets, sizeof *out);
    if (!x || !out) {
        tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < rows * cols; i++) x[i] = tm_load_f64(xt->data, xt->dtype, (size_t)i);
    for (int64_t i = 0; i < a.n; i++)
        if (a.feature[i] >= cols) {
            tm_lfail(L, TM_ERR_SHAPE, "node %lld reads feature %lld but input X has %lld features",
                     (long long)i, (long long)a.feature[i], (long long)cols);
            goto done;
        }
    if (!run_regression(L, &f, x, rows, cols, out)) {
        tm_tensor *y = regression_tensor(out, rows, f.n_targets, dt);
        if (!y) tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
        else tm_lout(L, 0, tm_val_tensor(c, y, 0));
    }
done:
    free(out);
    free(x);
    v5_free(&a);
    forest_free(&f);
    return c->status;
}
TM_REGISTER_OP("ai.onnx.ml", "TreeEnsemble", 5, 5, lower_tree_ensemble);
