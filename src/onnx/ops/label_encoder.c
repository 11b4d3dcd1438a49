/* ai.onnx.ml LabelEncoder: maps each input element through a key -> value table given
 * as attributes (v1: classes_strings by index; v2: the keys_ and values_ lists; v4: also
 * keys_tensor, values_tensor, default_tensor). Computed on the host; keys are sorted
 * once per call and searched. Not the other ai.onnx.ml operators. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../lower.h"

/* Keys or values, held as a 1-D host tensor (owned when built from a list attribute). */
typedef struct table {
    tm_tensor *t;
    int owned;
} table;

static void table_free(table *tb) {
    if (tb->owned) tm_tensor_free(tb->t);
    memset(tb, 0, sizeof *tb);
}

static int is_text(tm_dtype dt) { return dt == TM_STRING; }

/* From attribute <base>_strings, _int64s, _floats or _tensor (when allowed).
 * Returns 1 found, 0 absent, -1 failed. */
static int table_from_attrs(tm_lower *L, const char *base, int allow_tensor, table *tb) {
    char name[64];
    const tm_bytes *ss;
    const int64_t *is;
    const float *fs;
    int64_t n;
    memset(tb, 0, sizeof *tb);
    snprintf(name, sizeof name, "%s_tensor", base);
    if (allow_tensor && tm_attr_t(L, name)) {
        tb->t = (tm_tensor *)tm_attr_t(L, name);
        return 1;
    }
    snprintf(name, sizeof name, "%s_strings", base);
    if ((n = tm_attr_strings(L, name, &ss)) >= 0) {
        tb->t = tm_tensor_alloc(TM_STRING, 1, &n, NULL);
        for (int64_t i = 0; tb->t && i < n; i++) {
            char *s = malloc(ss[i].len + 1);
            if (!s) {
                tm_tensor_free(tb->t);
                tb->t = NULL;
                break;
            }
            if (ss[i].len) memcpy(s, ss[i].data, ss[i].len);
            s[ss[i].len] = 0;
            ((char **)tb->t->data)[i] = s;
        }
    } else if (snprintf(name, sizeof name, "%s_int64s", base), (n = tm_attr_ints(L, name, &is)) >= 0) {
        tb->t = tm_tensor_alloc(TM_INT64, 1, &n, NULL);
        if (tb->t && n) memcpy(tb->t->data, is, (size_t)n * sizeof *is);
    } else if (snprintf(name, sizeof name, "%s_floats", base), (n = tm_attr_floats(L, name, &fs)) >= 0) {
        tb->t = tm_tensor_alloc(TM_FLOAT, 1, &n, NULL);
        if (tb->t && n) memcpy(tb->t->data, fs, (size_t)n * sizeof *fs);
    } else {
        return 0;
    }
    tb->owned = 1;
    if (!tb->t) {
        tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
        return -1;
    }
    return 1;
}

/* Three-way comparison of element i of a and element j of b (same kind of dtype);
 * NaN equals NaN and sorts last. */
static int cmp_elem(const tm_tensor *a, int64_t i, const tm_tensor *b, int64_t j) {
    if (is_text(a->dtype)) {
        const char *x = ((char **)a->data)[i], *y = ((char **)b->data)[j];
        return strcmp(x ? x : "", y ? y : "");
    }
    if (tm_dtype_is_float(a->dtype) || tm_dtype_is_float(b->dtype)) {
        double x = tm_load_f64(a->data, a->dtype, (size_t)i);
        double y = tm_load_f64(b->data, b->dtype, (size_t)j);
        if (isnan(x) || isnan(y)) return isnan(x) - isnan(y);
        return (x > y) - (x < y);
    }
    int64_t x = tm_load_i64(a->data, a->dtype, (size_t)i);
    int64_t y = tm_load_i64(b->data, b->dtype, (size_t)j);
    return (x > y) - (x < y);
}

static int cmp_index(const void *pa, const void *pb, void *keys) {
    int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;
    int r = cmp_elem(keys, a, keys, b);
    return r ? r : (a > b) - (a < b);  /* stable: the last duplicate ends up last */
}

/* The position in `order` of the last key equal to element i of x, or -1. */
static int64_t find_key(const tm_tensor *keys, const int64_t *order, int64_t n,
                        const tm_tensor *x, int64_t i) {
    int64_t lo = 0, hi = n;  /* first key > x */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (cmp_elem(keys, order[mid], x, i) <= 0) lo = mid + 1;
        else hi = mid;
    }
    return lo > 0 && cmp_elem(keys, order[lo - 1], x, i) == 0 ? order[lo - 1] : -1;
}

/* Copies element j of src into element i of dst (same dtype). */
static int copy_elem(tm_tensor *dst, int64_t i, const tm_tensor *src, int64_t j) {
    size_t es = tm_dtype_elem_size(dst->dtype);
    if (!is_text(dst->dtype)) {
        memcpy((char *)dst->data + (size_t)i * es, (const char *)src->data + (size_t)j * es, es);
        return 0;
    }
    const char *s = ((char **)src->data)[j];
    char *d = strdup(s ? s : "");
    ((char **)dst->data)[i] = d;
    return d ? 0 : -1;
}

/* The default for a value dtype: default_tensor (v4), else default_string/int64/float. */
static tm_tensor *make_default(tm_lower *L, tm_dtype dt) {
    const tm_tensor *dflt = tm_lopset(L) >= 4 ? tm_attr_t(L, "default_tensor") : NULL;
    if (dflt) {
        if (dflt->dtype != dt || tm_tensor_numel_(dflt) != 1) {
            tm_lfail(L, TM_ERR_DTYPE, "attribute 'default_tensor' must be one %s, got %lld %s",
                     tm_dtype_name(dt), (long long)tm_tensor_numel_(dflt),
                     tm_dtype_name(dflt->dtype));
            return NULL;
        }
        return tm_tensor_clone(dflt, NULL);
    }
    int64_t one = 1;
    tm_tensor *t = tm_tensor_alloc(dt, 1, &one, NULL);
    if (!t) return NULL;
    if (is_text(dt)) {
        ((char **)t->data)[0] = strdup(tm_attr_s(L, "default_string", "_Unused"));
    } else if (tm_dtype_is_float(dt)) {
        tm_store_f64(t->data, dt, 0, tm_attr_f(L, "default_float", -0.0f));
    } else {
        tm_store_i64(t->data, dt, 0, tm_attr_i(L, "default_int64", -1));
    }
    return t;
}

static tm_tensor *encode(tm_lower *L, const tm_tensor *x, const table *keys, const table *vals) {
    int64_t n = tm_tensor_numel_(keys->t), nx = tm_tensor_numel_(x);
    tm_tensor *dflt = make_default(L, vals->t->dtype);
    tm_tensor *y = dflt ? tm_tensor_alloc(vals->t->dtype, x->rank, x->dims, NULL) : NULL;
    int64_t *order = malloc((size_t)(n ? n : 1) * sizeof *order);
    int ok = y && order;
    for (int64_t i = 0; ok && i < n; i++) order[i] = i;
    if (ok) qsort_r(order, (size_t)n, sizeof *order, cmp_index, keys->t);
    for (int64_t i = 0; ok && i < nx; i++) {
        int64_t k = find_key(keys->t, order, n, x, i);
        ok = !(k >= 0 ? copy_elem(y, i, vals->t, k) : copy_elem(y, i, dflt, 0));
    }
    free(order);
    tm_tensor_free(dflt);
    if (!ok) {
        tm_tensor_free(y);
        if (tm_ctx_ok(tm_lctx(L))) tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
        return NULL;
    }
    return y;
}

static int dtype_kind_matches(tm_dtype a, tm_dtype b) {
    if (is_text(a) || is_text(b)) return a == b;
    return tm_dtype_is_float(a) == tm_dtype_is_float(b);
}

/* Opsets 2 and 4: explicit keys and values. */
static tm_status lower_label_encoder(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val xv = tm_lin(L, 0);
    if (xv == TM_NONE) return tm_ctx_ok(c) ? tm_lfail(L, TM_ERR_PARSE, "input X is missing") : c->status;
    const tm_tensor *x = tm_host(c, xv);
    if (!x) return c->status;
    int v4 = tm_lopset(L) >= 4;
    table keys, vals;
    int hk = table_from_attrs(L, "keys", v4, &keys);
    int hv = hk > 0 ? table_from_attrs(L, "values", v4, &vals) : 0;
    tm_tensor *y = NULL;
    if (hk == 0 || (hk > 0 && hv == 0))
        tm_lfail(L, TM_ERR_PARSE, "a keys_ and a values_ attribute must both be given");
    else if (hk > 0 && hv > 0 && tm_tensor_numel_(keys.t) != tm_tensor_numel_(vals.t))
        tm_lfail(L, TM_ERR_SHAPE, "%lld keys for %lld values", (long long)tm_tensor_numel_(keys.t),
                 (long long)tm_tensor_numel_(vals.t));
    else if (hk > 0 && hv > 0 && !dtype_kind_matches(x->dtype, keys.t->dtype))
        tm_lfail(L, TM_ERR_DTYPE, "input X is %s, the keys are %s", tm_dtype_name(x->dtype),
                 tm_dtype_name(keys.t->dtype));
    else if (hk > 0 && hv > 0)
        y = encode(L, x, &keys, &vals);
    if (hk > 0) table_free(&keys);
    if (hv > 0) table_free(&vals);
    if (y) tm_lout(L, 0, tm_val_tensor(c, y, 0));
    return c->status;
}
TM_REGISTER_OP("ai.onnx.ml", "LabelEncoder", 2, 5, lower_label_encoder);

/* Opset 1: classes_strings; strings map to their index, integers to the string at
 * that index. */
static tm_status lower_label_encoder1(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val xv = tm_lin(L, 0);
    if (xv == TM_NONE) return tm_ctx_ok(c) ? tm_lfail(L, TM_ERR_PARSE, "input X is missing") : c->status;
    const tm_tensor *x = tm_host(c, xv);
    if (!x) return c->status;
    table classes, index;
    if (table_from_attrs(L, "classes", 0, &classes) <= 0 || classes.t->dtype != TM_STRING)
        return tm_ctx_ok(c) ? tm_lfail(L, TM_ERR_PARSE, "attribute 'classes_strings' is missing")
                            : c->status;
    int64_t n = tm_tensor_numel_(classes.t);
    index.t = tm_tensor_alloc(TM_INT64, 1, &n, NULL);
    index.owned = 1;
    for (int64_t i = 0; index.t && i < n; i++) ((int64_t *)index.t->data)[i] = i;
    tm_tensor *y = NULL;
    if (!index.t) tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    else if (x->dtype == TM_STRING) y = encode(L, x, &classes, &index);
    else if (x->dtype == TM_INT64) y = encode(L, x, &index, &classes);
    else tm_lfail(L, TM_ERR_DTYPE, "input X must be string or int64, got %s", tm_dtype_name(x->dtype));
    table_free(&classes);
    table_free(&index);
    if (y) tm_lout(L, 0, tm_val_tensor(c, y, 0));
    return c->status;
}
TM_REGISTER_OP("ai.onnx.ml", "LabelEncoder", 1, 1, lower_label_encoder1);
