/* Data-dependent selections: NonZero and Unique (results built on the host from the
 * input's values) and Compress (host condition, then a GATHER). Their output shapes
 * depend on values, so under trace they need those values (a graph break otherwise).
 * Not Gather/Where themselves. */
#include <stdlib.h>
#include <string.h>
#include "../lower.h"

static int elem_nonzero(const tm_tensor *t, int64_t i) {
    if (t->dtype == TM_STRING) {
        const char *s = ((char *const *)t->data)[i];
        return s && s[0];
    }
    if (tm_dtype_is_float(t->dtype)) return tm_load_f64(t->data, t->dtype, (size_t)i) != 0.0;
    size_t es = tm_dtype_elem_size(t->dtype);
    const unsigned char *p = (const unsigned char *)t->data + (size_t)i * es;
    if (t->dtype == TM_COMPLEX64 || t->dtype == TM_COMPLEX128) {
        double re = es == 8 ? ((const float *)p)[0] : ((const double *)p)[0];
        double im = es == 8 ? ((const float *)p)[1] : ((const double *)p)[1];
        return re != 0.0 || im != 0.0;
    }
    for (size_t b = 0; b < es; b++)
        if (p[b]) return 1;
    return 0;
}

static tm_status lower_nonzero(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val xv = tm_lin(L, 0);
    if (xv == TM_NONE) return tm_lfail(L, TM_ERR_PARSE, "input 'X' is missing");
    const tm_tensor *x = tm_host(c, xv);
    if (!x) return c->status;
    int64_t n = tm_tensor_numel_(x), nnz = 0;
    for (int64_t i = 0; i < n; i++) nnz += elem_nonzero(x, i);
    /* A scalar reads as a 1-D tensor of one element, as numpy does. */
    int rank = x->rank ? x->rank : 1;
    int64_t one = 1;
    const int64_t *xdims = x->rank ? x->dims : &one;
    int64_t dims[2] = {rank, nnz};
    tm_tensor *y = tm_tensor_alloc(TM_INT64, 2, dims, c->allocator);
    if (!y) return tm_lfail(L, TM_ERR_NO_MEMORY, "cannot allocate %lld indices", (long long)nnz);
    int64_t *out = y->data, k = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!elem_nonzero(x, i)) continue;
        int64_t rest = i;
        for (int d = rank - 1; d >= 0; d--) {
            out[d * nnz + k] = rest % xdims[d];
            rest /= xdims[d];
        }
        k++;
    }
    tm_lout(L, 0, tm_val_tensor(c, y, 0));
    return c->status;
}
TM_REGISTER_OP("", "NonZero", 9, 27, lower_nonzero);

static tm_status lower_compress(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0), cond_v = tm_lin(L, 1);
    if (x == TM_NONE || cond_v == TM_NONE)
        return tm_lfail(L, TM_ERR_PARSE, "input '%s' is missing",
                        x == TM_NONE ? "input" : "condition");
    if (tm_vdtype(c, cond_v) != TM_BOOL || tm_vrank(c, cond_v) != 1)
        return tm_lfail(L, TM_ERR_DTYPE, "input 'condition' must be a 1-D bool tensor, got "
                        "%s of rank %d", tm_dtype_name(tm_vdtype(c, cond_v)),
                        tm_vrank(c, cond_v));
    int rank = tm_vrank(c, x), axis = 0;
    if (tm_attr_has(L, "axis")) {
        int64_t a = tm_attr_i(L, "axis", 0);
        if (a < -rank || a >= rank)
            return tm_lfail(L, TM_ERR_SHAPE, "attribute 'axis' is %lld, outside [%d, %d]",
                            (long long)a, -rank, rank - 1);
        axis = (int)(a < 0 ? a + rank : a);
    } else {
        int64_t n = tm_vnumel(c, x);
        x = tm_reshape(c, x, 1, &n);
    }
    const tm_tensor *cond = tm_host(c, cond_v);
    if (!cond) return c->status;
    int64_t len = tm_vdims(c, x)[axis], nc = tm_tensor_numel_(cond);
    if (nc > len)
        return tm_lfail(L, TM_ERR_SHAPE, "input 'condition' has %lld entries, more than the "
                        "%lld along the axis", (long long)nc, (long long)len);
    const uint8_t *cv = cond->data;
    int64_t count = 0;
    for (int64_t i = 0; i < nc; i++) count += cv[i] != 0;
    tm_tensor *idx = tm_tensor_alloc(TM_INT64, 1, &count, c->allocator);
    if (!idx) return tm_lfail(L, TM_ERR_NO_MEMORY, "cannot allocate %lld indices",
                              (long long)count);
    int64_t *iv = idx->data, k = 0;
    for (int64_t i = 0; i < nc; i++)
        if (cv[i]) iv[k++] = i;
    tm_lout(L, 0, tm_gather(c, x, tm_val_tensor(c, idx, 0), axis));
    return c->status;
}
TM_REGISTER_OP("", "Compress", 9, 27, lower_compress);

/* ---- Unique ------------------------------------------------------------------------ */

/* The input viewed as `len` slices along the unique axis, each `outer` x `inner`. */
typedef struct slices {
    const tm_tensor *t;
    int64_t outer, len, inner;
} slices;

static int cmp_double(double a, double b) {
    /* NaNs are equal to each other and sort last, as numpy's unique does. */
    int na = a != a, nb = b != b;
    if (na || nb) return na - nb;
    return (a > b) - (a < b);
}

static int cmp_elem(const tm_tensor *t, int64_t i, int64_t j) {
    tm_dtype dt = t->dtype;
    if (dt == TM_STRING) {
        const char *a = ((char *const *)t->data)[i], *b = ((char *const *)t->data)[j];
        int r = strcmp(a ? a : "", b ? b : "");
        return (r > 0) - (r < 0);
    }
    if (dt == TM_COMPLEX64 || dt == TM_COMPLEX128) {
        for (int part = 0; part < 2; part++) {
            double a = dt == TM_COMPLEX64 ? ((const float *)t->data)[2 * i + part]
                                          : ((const double *)t->data)[2 * i + part];
            double b = dt == TM_COMPLEX64 ? ((const float *)t->data)[2 * j + part]
                                          : ((const double *)t->data)[2 * j + part];
            int r = cmp_double(a, b);
            if (r) return r;
        }
        return 0;
    }
    if (tm_dtype_is_float(dt))
        return cmp_double(tm_load_f64(t->data, dt, (size_t)i), tm_load_f64(t->data, dt, (size_t)j));
    if (tm_dtype_is_unsigned_int(dt)) {
        uint64_t a = tm_load_u64(t->data, dt, (size_t)i), b = tm_load_u64(t->data, dt, (size_t)j);
        return (a > b) - (a < b);
    }
    int64_t a = tm_load_i64(t->data, dt, (size_t)i), b = tm_load_i64(t->data, dt, (size_t)j);
    return (a > b) - (a < b);
}

/* Lexicographic order of two slices, element by element in row-major order. */
static int cmp_slices(const slices *s, int64_t a, int64_t b) {
    for (int64_t o = 0; o < s->outer; o++) {
        int64_t base = o * s->len * s->inner;
        for (int64_t i = 0; i < s->inner; i++) {
            int r = cmp_elem(s->t, base + a * s->inner + i, base + b * s->inner + i);
            if (r) return r;
        }
    }
    return 0;
}

/* Stable merge sort of slice numbers (equal slices keep their input order). */
static void sort_slices(const slices *s, int64_t *v, int64_t *tmp, int64_t n) {
    if (n < 2) return;
    int64_t h = n / 2;
    sort_slices(s, v, tmp, h);
    sort_slices(s, v + h, tmp, n - h);
    int64_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = cmp_slices(s, v[j], v[i]) < 0 ? v[j++] : v[i++];
    while (i < h) tmp[k++] = v[i++];
    while (j < n) tmp[k++] = v[j++];
    memcpy(v, tmp, (size_t)n * sizeof *v);
}

/* Groups of equal slices: first[g] (first occurrence), count[g], group[slice]; groups
 * numbered in sorted order or in order of first occurrence. Returns the group count. */
static int64_t group_slices(const slices *s, int sorted, int64_t *order, int64_t *tmp,
                            int64_t *first, int64_t *count, int64_t *group) {
    int64_t n = s->len, g = -1;
    for (int64_t i = 0; i < n; i++) order[i] = i;
    sort_slices(s, order, tmp, n);
    for (int64_t i = 0; i < n; i++) {
        if (i == 0 || cmp_slices(s, order[i - 1], order[i])) {
            g++;
            first[g] = order[i];
            count[g] = 0;
        }
        count[g]++;
        group[order[i]] = g;
    }
    int64_t ng = g + 1;
    if (sorted) return ng;
    /* Renumber the groups by first occurrence: tmp maps sorted number -> new number. */
    int64_t next = 0;
    for (int64_t i = 0; i < ng; i++) tmp[i] = -1;
    for (int64_t i = 0; i < n; i++)
        if (tmp[group[i]] < 0) tmp[group[i]] = next++;
    for (int64_t i = 0; i < ng; i++) order[tmp[i]] = first[i];
    for (int64_t i = 0; i < ng; i++) first[i] = order[i];
    for (int64_t i = 0; i < ng; i++) order[tmp[i]] = count[i];
    for (int64_t i = 0; i < ng; i++) count[i] = order[i];
    for (int64_t i = 0; i < n; i++) group[i] = tmp[group[i]];
    return ng;
}

static tm_val i64_vector(tm_ctx *c, const int64_t *v, int64_t n) {
    return tm_const_i64s(c, v, n);
}

static tm_status lower_unique(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val xv = tm_lin(L, 0);
    if (xv == TM_NONE) return tm_lfail(L, TM_ERR_PARSE, "input 'X' is missing");
    int rank = tm_vrank(c, xv), axis = 0;
    int has_axis = tm_attr_has(L, "axis");
    if (has_axis) {
        int64_t a = tm_attr_i(L, "axis", 0);
        if (a < -rank || a >= rank)
            return tm_lfail(L, TM_ERR_SHAPE, "attribute 'axis' is %lld, outside [%d, %d]",
                            (long long)a, -rank, rank - 1);
        axis = (int)(a < 0 ? a + rank : a);
    } else {
        int64_t n = tm_vnumel(c, xv);
        xv = tm_reshape(c, xv, 1, &n);
    }
    const tm_tensor *x = tm_host(c, xv);
    if (!x) return c->status;
    slices s = {x, 1, x->dims[axis], 1};
    for (int d = 0; d < x->rank; d++) {
        if (d < axis) s.outer *= x->dims[d];
        if (d > axis) s.inner *= x->dims[d];
    }
    int64_t n = s.len ? s.len : 1;
    int64_t *buf = malloc((size_t)n * 5 * sizeof *buf);
    if (!buf) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory for %lld slices",
                              (long long)s.len);
    int64_t *order = buf, *tmp = buf + n, *first = buf + 2 * n, *count = buf + 3 * n,
            *group = buf + 4 * n;
    int64_t ng = group_slices(&s, tm_attr_i(L, "sorted", 1) != 0, order, tmp, first, count,
                              group);
    tm_val firsts = i64_vector(c, first, ng);
    tm_lout(L, 0, tm_gather(c, xv, firsts, axis));
    if (tm_lwants(L, 1)) tm_lout(L, 1, firsts);
    if (tm_lwants(L, 2)) tm_lout(L, 2, i64_vector(c, group, s.len));
    if (tm_lwants(L, 3)) tm_lout(L, 3, i64_vector(c, count, ng));
    free(buf);
    return c->status;
}
TM_REGISTER_OP("", "Unique", 11, 27, lower_unique);
