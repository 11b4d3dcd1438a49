/* Constant and ConstantOfShape: tensors whose contents come from attributes (and, for
 * ConstantOfShape, a shape known on the host). Not Identity, nor the *Like generators. */
#include <stdlib.h>
#include <string.h>
#include "../lower.h"

static tm_tensor *new_tensor(tm_lower *L, tm_dtype dt, int rank, const int64_t *dims) {
    tm_ctx *c = tm_lctx(L);
    tm_tensor *t = tm_tensor_alloc(dt, rank, dims, c->allocator);
    if (!t) tm_lfail(L, TM_ERR_NO_MEMORY, "cannot allocate a %s constant", tm_dtype_name(dt));
    return t;
}

/* A string element from attribute bytes, which are not NUL-terminated in the file. */
static int set_string(tm_tensor *t, int64_t i, const tm_bytes *b) {
    char *s = malloc(b->len + 1);
    if (!s) return -1;
    if (b->len) memcpy(s, b->data, b->len);
    s[b->len] = '\0';
    ((char **)t->data)[i] = s;
    return 0;
}

static tm_val strings_constant(tm_lower *L, const tm_bytes *v, int n, int rank) {
    int64_t dims[1] = {n};
    tm_tensor *t = new_tensor(L, TM_STRING, rank, dims);
    if (!t) return TM_NONE;
    for (int i = 0; i < n; i++) {
        if (set_string(t, i, &v[i])) {
            tm_tensor_free(t);
            tm_lfail(L, TM_ERR_NO_MEMORY, "cannot allocate attribute 'value_strings'");
            return TM_NONE;
        }
    }
    return tm_val_tensor(tm_lctx(L), t, 0);
}

static tm_val floats_constant(tm_lower *L, const float *v, int n, int rank) {
    int64_t dims[1] = {n};
    tm_tensor *t = new_tensor(L, TM_FLOAT, rank, dims);
    if (!t) return TM_NONE;
    if (n) memcpy(t->data, v, (size_t)n * sizeof *v);
    return tm_val_tensor(tm_lctx(L), t, 0);
}

static tm_val ints_constant(tm_lower *L, const int64_t *v, int n, int rank) {
    int64_t dims[1] = {n};
    tm_tensor *t = new_tensor(L, TM_INT64, rank, dims);
    if (!t) return TM_NONE;
    if (n) memcpy(t->data, v, (size_t)n * sizeof *v);
    return tm_val_tensor(tm_lctx(L), t, 0);
}

static const char *const value_attrs[] = {
    "value", "sparse_value", "value_float", "value_floats", "value_int", "value_ints",
    "value_string", "value_strings",
};

static tm_status lower_constant(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    const char *which = NULL;
    for (size_t i = 0; i < sizeof value_attrs / sizeof value_attrs[0]; i++) {
        if (!tm_attr_has(L, value_attrs[i])) continue;
        if (which)
            return tm_lfail(L, TM_ERR_PARSE, "attributes '%s' and '%s' are both set; exactly "
                            "one value attribute is allowed", which, value_attrs[i]);
        which = value_attrs[i];
    }
    if (!which)
        return tm_lfail(L, TM_ERR_PARSE, "no value attribute (value, sparse_value or "
                        "value_*) is set");
    tm_val y = TM_NONE;
    int list = which[strlen(which) - 1] == 's'; /* value_floats, value_ints, value_strings */
    if (!strcmp(which, "value") || !strcmp(which, "sparse_value")) {
        const tm_tensor *t = tm_attr_t(L, which);
        if (!t) return tm_lfail(L, TM_ERR_PARSE, "attribute '%s' holds no tensor", which);
        /* The model owns the tensor and outlives every context that runs it. */
        y = tm_val_tensor(c, (tm_tensor *)t, 1);
    } else if (!strcmp(which, "value_float") || !strcmp(which, "value_floats")) {
        const float *v;
        int n = tm_attr_floats(L, which, &v);
        y = floats_constant(L, v, n, list);
    } else if (!strcmp(which, "value_int") || !strcmp(which, "value_ints")) {
        const int64_t *v;
        int n = tm_attr_ints(L, which, &v);
        y = ints_constant(L, v, n, list);
    } else {
        const tm_bytes *v;
        int n = tm_attr_strings(L, which, &v);
        y = strings_constant(L, v, n, list);
    }
    tm_lout(L, 0, y);
    return c->status;
}
TM_REGISTER_OP("", "Constant", 1, 28, lower_constant);

/* Fills every element of t with the one element of `value` (same dtype). */
static int fill_from(tm_tensor *t, const tm_tensor *value) {
    int64_t n = tm_tensor_numel_(t);
    size_t es = tm_dtype_elem_size(t->dtype);
    if (t->dtype == TM_STRING) {
        const char *s = ((char *const *)value->data)[0];
        tm_bytes b = {s ? s : "", s ? strlen(s) : 0};
        for (int64_t i = 0; i < n; i++)
            if (set_string(t, i, &b)) return -1;
        return 0;
    }
    for (int64_t i = 0; i < n; i++) memcpy((char *)t->data + (size_t)i * es, value->data, es);
    return 0;
}

static tm_status lower_constant_of_shape(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val shape = tm_lin(L, 0);
    if (shape == TM_NONE) return tm_lfail(L, TM_ERR_PARSE, "input 0 ('input', the shape) is "
                                          "missing");
    if (tm_vdtype(c, shape) != TM_INT64)
        return tm_lfail(L, TM_ERR_DTYPE, "input 'input' (the shape) must be int64, got %s",
                        tm_dtype_name(tm_vdtype(c, shape)));
    if (tm_vnumel(c, shape) > TM_MAX_RANK)
        return tm_lfail(L, TM_ERR_UNSUPPORTED, "input 'input' asks for rank %lld; at most %d "
                        "is supported", (long long)tm_vnumel(c, shape), TM_MAX_RANK);
    int64_t dims[TM_MAX_RANK];
    int64_t rank = tm_host_i64(c, shape, dims, TM_MAX_RANK);
    if (rank < 0) return c->status;
    for (int i = 0; i < rank; i++)
        if (dims[i] < 0)
            return tm_lfail(L, TM_ERR_SHAPE, "input 'input' has a negative dim %lld at %d",
                            (long long)dims[i], i);
    const tm_tensor *value = tm_attr_t(L, "value");
    if (value && tm_tensor_numel_(value) != 1)
        return tm_lfail(L, TM_ERR_SHAPE, "attribute 'value' must hold one element, it holds "
                        "%lld", (long long)tm_tensor_numel_(value));
    tm_dtype dt = value ? value->dtype : TM_FLOAT;
    if (dt != TM_STRING && rank > 0) {
        /* The one element expanded by a primitive: a trace then knows how it was made
         * from the shape, and a plan serving several sizes makes it anew (generic.c). */
        int64_t ones[TM_MAX_RANK];
        for (int i = 0; i < rank; i++) ones[i] = 1;
        tm_tensor *one = new_tensor(L, dt, (int)rank, ones);
        if (!one) return c->status;
        if (value) memcpy(one->data, value->data, tm_dtype_elem_size(dt));
        tm_args a;
        memset(&a, 0, sizeof a);
        a.i[0] = rank;
        for (int i = 0; i < rank; i++) a.i[1 + i] = dims[i];
        tm_val src = tm_val_tensor(c, one, 0);
        tm_lout(L, 0, tm_prim(c, TM_P_EXPAND, &src, 1, &a));
        return c->status;
    }
    tm_tensor *t = new_tensor(L, dt, (int)rank, dims);
    if (!t) return c->status;
    /* Without a value the result is float zeros, which the allocation already holds. */
    if (value && fill_from(t, value)) {
        tm_tensor_free(t);
        return tm_lfail(L, TM_ERR_NO_MEMORY, "cannot fill a constant of %lld elements",
                        (long long)tm_numel((int)rank, dims));
    }
    tm_lout(L, 0, tm_val_tensor(c, t, 0));
    return c->status;
}
TM_REGISTER_OP("", "ConstantOfShape", 9, 27, lower_constant_of_shape);
