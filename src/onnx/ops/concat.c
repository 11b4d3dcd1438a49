/* Concat (one CONCAT primitive) and Split (one SLICE per output), with every opset's way
 * of giving the axis and the split sizes. Not Slice itself (slice.c). */
#include <stdlib.h>
#include <string.h>
#include "../lower.h"

static tm_status lower_concat(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    int n = tm_lnin(L);
    if (n < 1) return tm_lfail(L, TM_ERR_PARSE, "Concat needs at least one input");
    tm_val *xs = malloc((size_t)n * sizeof *xs);
    if (!xs) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < n; i++) {
        xs[i] = tm_lin(L, i);
        if (xs[i] == TM_NONE && tm_ctx_ok(c))
            tm_lfail(L, TM_ERR_PARSE, "input %d ('%s') is missing", i, tm_lnode(L)->inputs[i]);
    }
    if (!tm_ctx_ok(c)) {
        free(xs);
        return c->status;
    }
    /* Opset 1 defaults to axis 1; later opsets require the attribute. */
    int has_axis = tm_attr_has(L, "axis");
    if (!has_axis && tm_lopset(L) >= 4) {
        free(xs);
        return tm_lfail(L, TM_ERR_PARSE, "attribute 'axis' is missing");
    }
    int rank = tm_vrank(c, xs[0]);
    int64_t axis = tm_attr_i(L, "axis", 1);
    if (axis < -rank || axis >= rank || rank == 0) {
        free(xs);
        return tm_lfail(L, TM_ERR_SHAPE, "attribute 'axis' is %lld, outside [%d, %d]",
                        (long long)axis, -rank, rank - 1);
    }
    if (axis < 0) axis += rank;
    tm_dtype dt = tm_vdtype(c, xs[0]);
    for (int i = 1; i < n && tm_ctx_ok(c); i++) {
        if (tm_vdtype(c, xs[i]) != dt)
            tm_lfail(L, TM_ERR_DTYPE, "input %d ('%s') is %s, input 0 is %s", i,
                     tm_lnode(L)->inputs[i], tm_dtype_name(tm_vdtype(c, xs[i])),
                     tm_dtype_name(dt));
        else if (tm_vrank(c, xs[i]) != rank)
            tm_lfail(L, TM_ERR_SHAPE, "input %d ('%s') has rank %d, input 0 has rank %d", i,
                     tm_lnode(L)->inputs[i], tm_vrank(c, xs[i]), rank);
        for (int d = 0; d < rank && tm_ctx_ok(c); d++)
            if (d != axis && tm_vdims(c, xs[i])[d] != tm_vdims(c, xs[0])[d])
                tm_lfail(L, TM_ERR_SHAPE, "input %d ('%s') has dim %d = %lld, input 0 has %lld",
                         i, tm_lnode(L)->inputs[i], d, (long long)tm_vdims(c, xs[i])[d],
                         (long long)tm_vdims(c, xs[0])[d]);
    }
    if (tm_ctx_ok(c)) tm_lout(L, 0, tm_concat(c, xs, n, (int)axis));
    free(xs);
    return c->status;
}
TM_REGISTER_OP("", "Concat", 1, 27, lower_concat);

/* The split sizes from input 1 (opset 1, 13+) or attribute 'split' (opsets 1-12);
 * returns the count, -1 when none is given, -2 on error. */
static int64_t given_split(tm_lower *L, int64_t *out, int64_t max) {
    tm_ctx *c = tm_lctx(L);
    int64_t opset = tm_lopset(L);
    if ((opset == 1 || opset >= 13) && tm_lhas(L, 1)) {
        tm_val s = tm_lin(L, 1);
        if (tm_vdtype(c, s) != TM_INT64) {
            tm_lfail(L, TM_ERR_DTYPE, "input 'split' must be int64, got %s",
                     tm_dtype_name(tm_vdtype(c, s)));
            return -2;
        }
        if (tm_vnumel(c, s) > max) {
            tm_lfail(L, TM_ERR_SHAPE, "input 'split' has %lld sizes for %lld outputs",
                     (long long)tm_vnumel(c, s), (long long)max);
            return -2;
        }
        int64_t n = tm_host_i64(c, s, out, max);
        return n < 0 ? -2 : n;
    }
    const int64_t *attr;
    int n = opset < 13 ? tm_attr_ints(L, "split", &attr) : -1;
    if (n < 0) return -1;
    if (n > max) {
        tm_lfail(L, TM_ERR_SHAPE, "attribute 'split' has %d sizes for %lld outputs", n,
                 (long long)max);
        return -2;
    }
    memcpy(out, attr, (size_t)n * sizeof *attr);
    return n;
}

/* Equal parts; from opset 18 with num_outputs the last part may be smaller. */
static tm_status equal_split(tm_lower *L, int64_t axis, int64_t dim, int64_t *sizes,
                             int64_t n) {
    int64_t opset = tm_lopset(L);
    if (opset >= 18 && tm_attr_has(L, "num_outputs")) {
        int64_t k = tm_attr_i(L, "num_outputs", 0);
        if (k != n)
            return tm_lfail(L, TM_ERR_SHAPE, "attribute 'num_outputs' is %lld but the node "
                            "has %lld outputs", (long long)k, (long long)n);
        int64_t chunk = (dim + n - 1) / n;
        for (int64_t i = 0; i < n; i++) {
            int64_t left = dim - i * chunk;
            sizes[i] = left <= 0 ? 0 : left < chunk ? left : chunk;
        }
        return TM_OK;
    }
    if (dim % n)
        return tm_lfail(L, TM_ERR_SHAPE, "input 'input' has %lld along axis %lld, which does "
                        "not split into %lld equal parts (give 'split' or, from opset 18, "
                        "'num_outputs')", (long long)dim, (long long)axis, (long long)n);
    for (int64_t i = 0; i < n; i++) sizes[i] = dim / n;
    return TM_OK;
}

static tm_status lower_split(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    if (x == TM_NONE) return tm_lfail(L, TM_ERR_PARSE, "input 0 ('input') is missing");
    int rank = tm_vrank(c, x);
    int64_t axis = tm_attr_i(L, "axis", 0);
    if (axis < -rank || axis >= rank)
        return tm_lfail(L, TM_ERR_SHAPE, "attribute 'axis' is %lld, outside [%d, %d]",
                        (long long)axis, -rank, rank - 1);
    if (axis < 0) axis += rank;
    int64_t n = tm_lnout(L), dim = tm_vdims(c, x)[axis];
    int64_t *sizes = malloc((size_t)(n ? n : 1) * sizeof *sizes);
    if (!sizes) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    int64_t given = given_split(L, sizes, n);
    if (given == -1) {
        equal_split(L, axis, dim, sizes, n);
    } else if (given >= 0) {
        int64_t total = 0;
        for (int64_t i = 0; i < given; i++) {
            if (sizes[i] < 0) {
                tm_lfail(L, TM_ERR_SHAPE, "'split' has a negative size %lld at %lld",
                         (long long)sizes[i], (long long)i);
                break;
            }
            total += sizes[i];
        }
        if (tm_ctx_ok(c) && (given != n || total != dim))
            tm_lfail(L, TM_ERR_SHAPE, "'split' gives %lld sizes summing to %lld; expected %lld "
                     "sizes summing to dim %lld", (long long)given, (long long)total,
                     (long long)n, (long long)dim);
    }
    int64_t start = 0;
    for (int64_t i = 0; i < n && tm_ctx_ok(c); i++) {
        if (tm_lwants(L, (int)i))
            tm_lout(L, (int)i, tm_slice_axis(c, x, (int)axis, start, sizes[i]));
        start += sizes[i];
    }
    free(sizes);
    return c->status;
}
TM_REGISTER_OP("", "Split", 1, 27, lower_split);
