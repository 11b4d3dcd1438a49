/* Softmax, LogSoftmax and Hardmax. From opset 13 they act on one axis (default -1);
 * before, the input is seen as 2-D (dims before `axis` flattened against the rest,
 * default axis 1) and the op runs over the whole second dimension. */
#include "elementwise.h"

/* The view the op runs on: opset 13+ the input itself with its axis; before, the 2-D
 * coercion of the input with axis 1. */
static tm_val coerced_view(tm_lower *L, tm_val x, int *axis) {
    tm_ctx *c = tm_lctx(L);
    int rank = tm_vrank(c, x);
    int legacy = tm_lopset(L) < 13;
    int64_t a = tm_attr_i(L, "axis", legacy ? 1 : -1);
    if (a < -rank || a > rank || (!legacy && a == rank) || (rank == 0 && a != 0 && a != -1)) {
        tm_lfail(L, TM_ERR_SHAPE, "attribute axis=%lld is out of range for rank %d",
                 (long long)a, rank);
        return TM_NONE;
    }
    if (a < 0) a += rank;
    if (!legacy) {
        *axis = (int)a;
        if (rank == 0) {
            *axis = 0;
            int64_t one = 1;
            return tm_reshape(c, x, 1, &one);
        }
        return x;
    }
    int64_t dims[2] = {1, 1};
    for (int d = 0; d < rank; d++) dims[d < a ? 0 : 1] *= tm_vdims(c, x)[d];
    *axis = 1;
    return tm_reshape(c, x, 2, dims);
}

static tm_status lower_softmax_common(tm_lower *L, int log) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT)) return c->status;
    int axis = 0;
    tm_val v = coerced_view(L, x, &axis);
    tm_val y = tm_softmax(c, v, axis, log);
    tm_lout(L, 0, tm_reshape(c, y, tm_vrank(c, x), tm_vdims(c, x)));
    return c->status;
}

static tm_status lower_softmax(tm_lower *L) { return lower_softmax_common(L, 0); }
static tm_status lower_log_softmax(tm_lower *L) { return lower_softmax_common(L, 1); }

/* Hardmax: 1 at the first maximum along the axis, 0 elsewhere: an argmax compared with
 * an iota along that axis. */
static tm_status lower_hardmax(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT)) return c->status;
    int axis = 0;
    tm_val v = coerced_view(L, x, &axis);
    if (v == TM_NONE) return c->status;
    int rank = tm_vrank(c, v);
    int64_t n = tm_vdims(c, v)[axis];
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = axis;
    tm_val arg = tm_prim(c, TM_P_ARGMAX, &v, 1, &a);
    int64_t kept[TM_MAX_RANK], iota_dims[TM_MAX_RANK];
    for (int d = 0; d < rank; d++) {
        kept[d] = d == axis ? 1 : tm_vdims(c, v)[d];
        iota_dims[d] = d == axis ? n : 1;
    }
    arg = tm_reshape(c, arg, rank, kept);
    memset(&a, 0, sizeof a);
    a.i[0] = TM_INT64;
    a.i[1] = n;
    a.i[2] = 0;
    a.i[3] = 1;
    tm_val iota = tm_reshape(c, tm_prim(c, TM_P_RANGE, NULL, 0, &a), rank, iota_dims);
    tm_val hot = tm_cast(c, tm_binary(c, TM_P_EQ, iota, arg), tm_vdtype(c, x));
    tm_lout(L, 0, tm_reshape(c, hot, tm_vrank(c, x), tm_vdims(c, x)));
    return c->status;
}

TM_REGISTER_OP("", "Softmax", 1, 27, lower_softmax);
TM_REGISTER_OP("", "LogSoftmax", 1, 27, lower_log_softmax);
TM_REGISTER_OP("", "Hardmax", 1, 27, lower_hardmax);
