/* ai.onnx.ml feature preprocessing: ArrayFeatureExtractor, Binarizer, Scaler, Imputer,
 * Normalizer, FeatureVectorizer and OneHotEncoder composed from primitives; CategoryMapper
 * on the host (strings); ZipMap and DictVectorizer refused, as our values hold no maps.
 * Not LabelEncoder (label_encoder.c) nor the models (ml_linear.c, ml_svm.c, ml_tree.c). */
#include "ml.h"

#define DT_BIT(t) (1u << (t))
#define ML_NUMERIC (DT_BIT(TM_FLOAT) | DT_BIT(TM_DOUBLE) | DT_BIT(TM_INT32) | DT_BIT(TM_INT64))

/* Input i, present and of a dtype in `dts`, else TM_NONE with the node failed. */
static tm_val ml_in(tm_lower *L, int i, unsigned dts) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, i);
    if (x == TM_NONE) {
        if (tm_ctx_ok(c)) tm_lfail(L, TM_ERR_PARSE, "input %d is missing", i);
        return TM_NONE;
    }
    tm_dtype dt = tm_vdtype(c, x);
    if (!(dts & DT_BIT(dt))) {
        tm_lfail(L, TM_ERR_DTYPE, "input %d ('%s') has unsupported dtype %s", i, tm_lnode(L)->inputs[i],
                 tm_dtype_name(dt));
        return TM_NONE;
    }
    return x;
}

/* A 1-D constant of dtype dt from n doubles. */
static tm_val const_values(tm_ctx *c, tm_dtype dt, const double *v, int64_t n) {
    tm_tensor *t = tm_tensor_alloc(dt, 1, &n, NULL);
    if (!t) {
        tm_ctx_fail(c, TM_ERR_NO_MEMORY, "out of memory");
        return TM_NONE;
    }
    for (int64_t i = 0; i < n; i++) tm_store_f64(t->data, dt, (size_t)i, v[i]);
    return tm_val_tensor(c, t, 0);
}

static tm_val const_floats(tm_ctx *c, tm_dtype dt, const float *v, int64_t n) {
    double *d = malloc((size_t)(n > 0 ? n : 1) * sizeof *d);
    if (!d) {
        tm_ctx_fail(c, TM_ERR_NO_MEMORY, "out of memory");
        return TM_NONE;
    }
    for (int64_t i = 0; i < n; i++) d[i] = v[i];
    tm_val r = const_values(c, dt, d, n);
    free(d);
    return r;
}

/* Per-feature values (n of them) shaped to broadcast over x's last axis: a scalar when
 * n is 1, else [F] (n must equal F). */
static tm_val per_feature(tm_lower *L, tm_val x, tm_dtype dt, const float *v, int64_t n, const char *name) {
    tm_ctx *c = tm_lctx(L);
    int r = tm_vrank(c, x);
    int64_t f = r ? tm_vdims(c, x)[r - 1] : 1;
    if (n == 1) return tm_const_scalar(c, dt, v[0]);
    if (n != f) {
        tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute '%s' has %lld values for %lld features", name,
                 (long long)n, (long long)f);
        return TM_NONE;
    }
    return const_floats(c, dt, v, n);
}

/* ---- ArrayFeatureExtractor --------------------------------------------------------- */

/* Gathers Y's indices (flattened) along X's last axis; 1-D X gives [1, n]. */
static tm_status lower_array_feature_extractor(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = ml_in(L, 0, ML_NUMERIC | DT_BIT(TM_STRING));
    tm_val y = x == TM_NONE ? TM_NONE : ml_in(L, 1, DT_BIT(TM_INT64));
    if (y == TM_NONE) return c->status;
    int r = tm_vrank(c, x);
    if (r == 0) return tm_lfail(L, TM_ERR_SHAPE, "input X must have at least one dimension");
    int64_t n = tm_vnumel(c, y);
    tm_val z = tm_gather(c, x, tm_reshape(c, y, 1, &n), r - 1);
    if (r == 1) {
        int64_t dims[2] = {1, n};
        z = tm_reshape(c, z, 2, dims);
    }
    tm_lout(L, 0, z);
    return c->status;
}
TM_REGISTER_OP("ai.onnx.ml", "ArrayFeatureExtractor", 1, 5, lower_array_feature_extractor);

/* ---- Binarizer --------------------------------------------------------------------- */

static tm_status lower_binarizer(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = ml_in(L, 0, ML_NUMERIC);
    if (x == TM_NONE) return c->status;
    double t = tm_attr_f(L, "threshold", 0.0f);
    /* For integers x > t exactly when x > floor(t). */
    if (!tm_dtype_is_float(tm_vdtype(c, x))) t = floor(t);
    tm_val gt = tm_binary(c, TM_P_GT, x, tm_scalar_like(c, x, t));
    tm_lout(L, 0, tm_where(c, gt, tm_scalar_like(c, x, 1.0), tm_scalar_like(c, x, 0.0)));
    return c->status;
}
TM_REGISTER_OP("ai.onnx.ml", "Binarizer", 1, 5, lower_binarizer);

/* ---- Scaler ------------------------------------------------------------------------ */

/* (x - offset) * scale in float (double for double inputs), offset and scale per feature
 * or one for all. */
static tm_status lower_scaler(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = ml_in(L, 0, ML_NUMERIC);
    if (x == TM_NONE) return c->status;
    const float *off, *scale;
    int n_off = tm_attr_floats(L, "offset", &off), n_scale = tm_attr_floats(L, "scale", &scale);
    if (n_off < 1 && n_scale < 1)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attributes 'offset' and 'scale' are both missing");
    tm_dtype dt = tm_vdtype(c, x) == TM_DOUBLE ? TM_DOUBLE : TM_FLOAT;
    tm_val y = tm_vdtype(c, x) == dt ? x : tm_cast(c, x, dt);
    if (n_off > 0) y = tm_sub(c, y, per_feature(L, x, dt, off, n_off, "offset"));
    if (n_scale > 0) y = tm_mul(c, y, per_feature(L, x, dt, scale, n_scale, "scale"));
    tm_lout(L, 0, dt == TM_FLOAT ? y : tm_cast(c, y, TM_FLOAT));
    return c->status;
}
TM_REGISTER_OP("ai.onnx.ml", "Scaler", 1, 5, lower_scaler);

/* ---- Imputer ----------------------------------------------------------------------- */

/* Per-feature (or one) imputed values in x's dtype; integers stay exact. */
static tm_val imputed_values(tm_lower *L, tm_val x, const float *fv, int nf, const int64_t *iv, int ni) {
    tm_ctx *c = tm_lctx(L);
    int64_t n = nf > 0 ? nf : ni;
    int r = tm_vrank(c, x);
    int64_t f = r ? tm_vdims(c, x)[r - 1] : 1;
    if (n != 1 && n != f) {
        tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute '%s' has %lld values for %lld features",
                 nf > 0 ? "imputed_value_floats" : "imputed_value_int64s", (long long)n, (long long)f);
        return TM_NONE;
    }
    double *d = malloc((size_t)n * sizeof *d);
    if (!d) {
        tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
        return TM_NONE;
    }
    for (int64_t i = 0; i < n; i++) d[i] = nf > 0 ? fv[i] : (double)iv[i];
    tm_val v = n == 1 ? tm_const_scalar(c, tm_vdtype(c, x), d[0]) : const_values(c, tm_vdtype(c, x), d, n);
    free(d);
    return v;
}

/* Elements equal to the replaced value (NaN matches NaN) become the imputed ones. */
static tm_status lower_imputer(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = ml_in(L, 0, ML_NUMERIC);
    if (x == TM_NONE) return c->status;
    const float *fv;
    const int64_t *iv;
    int nf = tm_attr_floats(L, "imputed_value_floats", &fv), ni = tm_attr_ints(L, "imputed_value_int64s", &iv);
    if ((nf > 0) == (ni > 0))
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "exactly one of 'imputed_value_floats' and "
                        "'imputed_value_int64s' must be given and non-empty");
    double replaced = nf > 0 ? tm_attr_f(L, "replaced_value_float", 0.0f)
                             : (double)tm_attr_i(L, "replaced_value_int64", 0);
    tm_val imputed = imputed_values(L, x, fv, nf, iv, ni);
    tm_val hit = tm_dtype_is_float(tm_vdtype(c, x)) && isnan(replaced)
                     ? tm_unary(c, TM_P_ISNAN, x)
                     : tm_binary(c, TM_P_EQ, x, tm_scalar_like(c, x, replaced));
    tm_lout(L, 0, tm_where(c, hit, imputed, x));
    return c->status;
}
TM_REGISTER_OP("ai.onnx.ml", "Imputer", 1, 5, lower_imputer);

/* ---- Normalizer -------------------------------------------------------------------- */

/* Each row (axis 1; the whole of a 1-D input) divided by its max, L1 or L2 norm in
 * float; rows whose divisor is 0 stay as they are. */
static tm_status lower_normalizer(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = ml_in(L, 0, ML_NUMERIC);
    if (x == TM_NONE) return c->status;
    const char *norm = tm_attr_s(L, "norm", "MAX");
    int kind = !strcmp(norm, "MAX") ? 0 : !strcmp(norm, "L1") ? 1 : !strcmp(norm, "L2") ? 2 : -1;
    if (kind < 0) return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute 'norm' is '%s', expected MAX, L1 or L2", norm);
    int r = tm_vrank(c, x);
    if (r == 0) return tm_lfail(L, TM_ERR_SHAPE, "input X must have at least one dimension");
    tm_val xf = tm_vdtype(c, x) == TM_FLOAT ? x : tm_cast(c, x, TM_FLOAT);
    int64_t axis = r == 1 ? 0 : 1;
    tm_val d;
    if (kind == 0) d = tm_reduce(c, TM_P_REDUCE_MAX, xf, &axis, 1, 1);
    else if (kind == 1) d = tm_reduce(c, TM_P_REDUCE_SUM, tm_unary(c, TM_P_ABS, xf), &axis, 1, 1);
    else d = tm_unary(c, TM_P_SQRT, tm_reduce(c, TM_P_REDUCE_SUM, tm_mul(c, xf, xf), &axis, 1, 1));
    tm_val zero = tm_binary(c, TM_P_EQ, d, tm_scalar_like(c, d, 0.0));
    tm_val safe = tm_where(c, zero, tm_scalar_like(c, d, 1.0), d);
    tm_lout(L, 0, tm_div(c, xf, safe));
    return c->status;
}
TM_REGISTER_OP("ai.onnx.ml", "Normalizer", 1, 5, lower_normalizer);

/* ---- FeatureVectorizer ------------------------------------------------------------- */

/* Input i as [N, width] float: rows of its trailing values, cut or zero-padded. */
static tm_val vectorize(tm_lower *L, int i, int64_t rows, int64_t width) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = ml_in(L, i, ML_NUMERIC);
    if (x == TM_NONE) return TM_NONE;
    int r = tm_vrank(c, x);
    int64_t n = r <= 1 ? 1 : tm_vdims(c, x)[0], total = tm_vnumel(c, x);
    if (n != rows) {
        tm_lfail(L, TM_ERR_SHAPE, "input %d has %lld rows, input 0 has %lld", i, (long long)n, (long long)rows);
        return TM_NONE;
    }
    int64_t dims[2] = {n, n ? total / n : 0};
    tm_val y = tm_reshape(c, tm_vdtype(c, x) == TM_FLOAT ? x : tm_cast(c, x, TM_FLOAT), 2, dims);
    if (dims[1] > width) return tm_slice_axis(c, y, 1, 0, width);
    if (dims[1] == width) return y;
    int64_t begin[2] = {0, 0}, end[2] = {0, width - dims[1]};
    return tm_pad(c, y, 0, begin, end, 0.0);
}

static tm_status lower_feature_vectorizer(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    const int64_t *widths;
    int n = tm_lnin(L), nw = tm_attr_ints(L, "inputdimensions", &widths);
    if (n < 1 || nw != n)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute 'inputdimensions' has %d entries for %d inputs", nw, n);
    tm_val x0 = ml_in(L, 0, ML_NUMERIC);
    if (x0 == TM_NONE) return c->status;
    int64_t rows = tm_vrank(c, x0) <= 1 ? 1 : tm_vdims(c, x0)[0];
    tm_val *parts = malloc((size_t)n * sizeof *parts);
    if (!parts) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < n && tm_ctx_ok(c); i++) {
        if (widths[i] < 0) {
            tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute 'inputdimensions' entry %d is %lld", i,
                     (long long)widths[i]);
            break;
        }
        parts[i] = vectorize(L, i, rows, widths[i]);
    }
    tm_val y = tm_ctx_ok(c) ? tm_concat(c, parts, n, 1) : TM_NONE;
    free(parts);
    tm_lout(L, 0, y);
    return c->status;
}
TM_REGISTER_OP("ai.onnx.ml", "FeatureVectorizer", 1, 5, lower_feature_vectorizer);

/* ---- OneHotEncoder ----------------------------------------------------------------- */

/* The categories as a 1-D constant (int64 or string), and a float mask that keeps only
 * the last of duplicated categories (as ONNX Runtime's map does), or TM_NONE. */
static tm_val categories(tm_lower *L, const int64_t *ints, const tm_bytes *strs, int64_t n, tm_val *mask) {
    tm_ctx *c = tm_lctx(L);
    tm_tensor *t = tm_tensor_alloc(strs ? TM_STRING : TM_INT64, 1, &n, NULL);
    double *keep = malloc((size_t)n * sizeof *keep);
    int dup = 0, ok = t && keep;
    for (int64_t i = 0; ok && i < n; i++) {
        if (strs) {
            char *s = malloc(strs[i].len + 1);
            ok = s != NULL;
            if (s) {
                if (strs[i].len) memcpy(s, strs[i].data, strs[i].len);
                s[strs[i].len] = 0;
                ((char **)t->data)[i] = s;
            }
        } else {
            ((int64_t *)t->data)[i] = ints[i];
        }
        keep[i] = 1.0;
        for (int64_t j = i + 1; j < n; j++)
            if (strs ? strs[i].len == strs[j].len && !memcmp(strs[i].data, strs[j].data, strs[i].len)
                     : ints[i] == ints[j])
                keep[i] = 0.0, dup = 1;
    }
    *mask = ok && dup ? const_values(c, TM_FLOAT, keep, n) : TM_NONE;
    free(keep);
    if (!ok) {
        tm_tensor_free(t);
        tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
        return TM_NONE;
    }
    return tm_val_tensor(c, t, 0);
}

/* zeros = 0: every value must be a category, checked on the host. */
static tm_status check_all_found(tm_lower *L, tm_val hits) {
    tm_ctx *c = tm_lctx(L);
    int64_t axis = -1;
    tm_val any = tm_reduce(c, TM_P_REDUCE_MAX, tm_cast(c, hits, TM_FLOAT), &axis, 1, 0);
    const tm_tensor *t = any == TM_NONE ? NULL : tm_host(c, any);
    if (!t) return c->status;
    for (int64_t i = 0; i < tm_tensor_numel_(t); i++)
        if (((const float *)t->data)[i] == 0.0f)
            return tm_lfail(L, TM_ERR_RUNTIME, "input X element %lld is not a category and attribute "
                            "'zeros' is 0", (long long)i);
    return TM_OK;
}

static tm_status lower_one_hot_encoder(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = ml_in(L, 0, ML_NUMERIC | DT_BIT(TM_STRING));
    if (x == TM_NONE) return c->status;
    const int64_t *ints;
    const tm_bytes *strs;
    int ni = tm_attr_ints(L, "cats_int64s", &ints), ns = tm_attr_strings(L, "cats_strings", &strs);
    if ((ni > 0) == (ns > 0))
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "exactly one of 'cats_int64s' and 'cats_strings' "
                        "must be given and non-empty");
    int text = tm_vdtype(c, x) == TM_STRING;
    if (text != (ns > 0))
        return tm_lfail(L, TM_ERR_DTYPE, "input X is %s but the categories are %s",
                        tm_dtype_name(tm_vdtype(c, x)), ns > 0 ? "strings" : "integers");
    tm_val mask, cats = categories(L, ns > 0 ? NULL : ints, ns > 0 ? strs : NULL, ns > 0 ? ns : ni, &mask);
    /* Non-integer inputs are truncated to int64, as ONNX Runtime casts them. */
    tm_val xi = text || tm_vdtype(c, x) == TM_INT64 ? x : tm_cast(c, x, TM_INT64);
    int64_t last = -1;
    tm_val hits = tm_binary(c, TM_P_EQ, tm_unsqueeze(c, xi, &last, 1), cats);
    if (!tm_attr_i(L, "zeros", 1) && check_all_found(L, hits)) return c->status;
    tm_val y = tm_cast(c, hits, TM_FLOAT);
    tm_lout(L, 0, mask == TM_NONE ? y : tm_mul(c, y, mask));
    return c->status;
}
TM_REGISTER_OP("ai.onnx.ml", "OneHotEncoder", 1, 5, lower_one_hot_encoder);

/* ---- CategoryMapper ---------------------------------------------------------------- */

typedef struct cat_entry {
    const tm_bytes *s;
    int64_t v, order;
} cat_entry;

static int cmp_bytes_str(const tm_bytes *a, const char *b, size_t lb) {
    size_t m = a->len < lb ? a->len : lb;
    int r = m ? memcmp(a->data, b, m) : 0;
    return r ? r : (a->len > lb) - (a->len < lb);
}

static int cmp_by_string(const void *pa, const void *pb) {
    const cat_entry *a = pa, *b = pb;
    int r = cmp_bytes_str(a->s, b->s->data ? b->s->data : "", b->s->len);
    return r ? r : (a->order > b->order) - (a->order < b->order);
}

static int cmp_by_int(const void *pa, const void *pb) {
    const cat_entry *a = pa, *b = pb;
    if (a->v != b->v) return a->v < b->v ? -1 : 1;
    return (a->order > b->order) - (a->order < b->order);
}

/* The last entry (of equal keys, the last listed wins) matching string s or integer v. */
static const cat_entry *cat_find(const cat_entry *e, int64_t n, const char *s, int64_t v) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {  /* first entry with key > the probe */
        int64_t mid = lo + (hi - lo) / 2;
        int r = s ? cmp_bytes_str(e[mid].s, s, strlen(s)) : (e[mid].v > v) - (e[mid].v < v);
        if (r <= 0) lo = mid + 1;
        else hi = mid;
    }
    if (!lo) return NULL;
    const cat_entry *p = &e[lo - 1];
    int eq = s ? !cmp_bytes_str(p->s, s, strlen(s)) : p->v == v;
    return eq ? p : NULL;
}

static tm_tensor *map_categories(const tm_tensor *x, cat_entry *e, int64_t n, int64_t dflt_int,
                                 const char *dflt_str) {
    int text = x->dtype == TM_STRING;
    qsort(e, (size_t)n, sizeof *e, text ? cmp_by_string : cmp_by_int);
    tm_tensor *y = tm_tensor_alloc(text ? TM_INT64 : TM_STRING, x->rank, x->dims, NULL);
    for (int64_t i = 0; y && i < tm_tensor_numel_(x); i++) {
        if (text) {
            const char *s = ((char *const *)x->data)[i];
            const cat_entry *hit = cat_find(e, n, s ? s : "", 0);
            ((int64_t *)y->data)[i] = hit ? hit->v : dflt_int;
            continue;
        }
        const cat_entry *hit = cat_find(e, n, NULL, ((const int64_t *)x->data)[i]);
        char *s = hit ? malloc(hit->s->len + 1) : strdup(dflt_str);
        if (!s) {
            tm_tensor_free(y);
            return NULL;
        }
        if (hit) {
            if (hit->s->len) memcpy(s, hit->s->data, hit->s->len);
            s[hit->s->len] = 0;
        }
        ((char **)y->data)[i] = s;
    }
    return y;
}

static tm_status lower_category_mapper(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val xv = ml_in(L, 0, DT_BIT(TM_STRING) | DT_BIT(TM_INT64));
    if (xv == TM_NONE) return c->status;
    const int64_t *ints;
    const tm_bytes *strs;
    int ni = tm_attr_ints(L, "cats_int64s", &ints), ns = tm_attr_strings(L, "cats_strings", &strs);
    if (ni != ns || ni < 0)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attributes 'cats_int64s' (%d) and 'cats_strings' (%d) "
                        "must both be given, of one length", ni, ns);
    const tm_tensor *x = tm_host(c, xv);
    if (!x) return c->status;
    cat_entry *e = malloc((size_t)(ni ? ni : 1) * sizeof *e);
    if (!e) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < ni; i++) e[i] = (cat_entry){&strs[i], ints[i], i};
    tm_tensor *y = map_categories(x, e, ni, tm_attr_i(L, "default_int64", -1),
                                  tm_attr_s(L, "default_string", "_Unused"));
    free(e);
    if (!y) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    tm_lout(L, 0, tm_val_tensor(c, y, 0));
    return c->status;
}
TM_REGISTER_OP("ai.onnx.ml", "CategoryMapper", 1, 5, lower_category_mapper);

/* ---- Map-valued operators ---------------------------------------------------------- */

static tm_status lower_zip_map(tm_lower *L) {
    return tm_lfail(L, TM_ERR_UNSUPPORTED, "map outputs are not supported: ZipMap makes a sequence "
                    "of maps (use the classifier's score tensor instead)");
}
TM_REGISTER_OP("ai.onnx.ml", "ZipMap", 1, 5, lower_zip_map);

static tm_status lower_dict_vectorizer(tm_lower *L) {
    return tm_lfail(L, TM_ERR_UNSUPPORTED, "map inputs are not supported: DictVectorizer reads a map");
}
TM_REGISTER_OP("ai.onnx.ml", "DictVectorizer", 1, 5, lower_dict_vectorizer);
