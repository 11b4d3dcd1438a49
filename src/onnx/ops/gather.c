/* Gather, GatherElements and GatherND: each one primitive of the same name, after the
 * attribute and index-type checks. Not the Scatter family (scatter.c). */
#include "../lower.h"

static int index_dtype_ok(tm_lower *L, tm_val idx, int allow_int32) {
    tm_dtype dt = tm_vdtype(tm_lctx(L), idx);
    if (dt == TM_INT64 || (allow_int32 && dt == TM_INT32)) return 1;
    tm_lfail(L, TM_ERR_DTYPE, "input 'indices' must be %s, got %s",
             allow_int32 ? "int32 or int64" : "int64", tm_dtype_name(dt));
    return 0;
}

/* data and indices present, data of rank >= 1; the normalised axis or -1. */
static int data_axis(tm_lower *L, tm_val data, tm_val idx, int64_t axis) {
    tm_ctx *c = tm_lctx(L);
    if (data == TM_NONE || idx == TM_NONE) {
        tm_lfail(L, TM_ERR_PARSE, "input '%s' is missing", data == TM_NONE ? "data" : "indices");
        return -1;
    }
    int rank = tm_vrank(c, data);
    if (axis < -rank || axis >= rank) {
        tm_lfail(L, TM_ERR_SHAPE, "attribute 'axis' is %lld, outside [%d, %d]", (long long)axis,
                 -rank, rank - 1);
        return -1;
    }
    return (int)(axis < 0 ? axis + rank : axis);
}

static tm_status lower_gather(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val data = tm_lin(L, 0), idx = tm_lin(L, 1);
    int axis = data_axis(L, data, idx, tm_attr_i(L, "axis", 0));
    if (axis < 0 || !index_dtype_ok(L, idx, 1)) return c->status;
    tm_lout(L, 0, tm_gather(c, data, idx, axis));
    return c->status;
}
TM_REGISTER_OP("", "Gather", 1, 27, lower_gather);

static tm_status lower_gather_elements(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val data = tm_lin(L, 0), idx = tm_lin(L, 1);
    int axis = data_axis(L, data, idx, tm_attr_i(L, "axis", 0));
    if (axis < 0 || !index_dtype_ok(L, idx, 1)) return c->status;
    if (tm_vrank(c, idx) != tm_vrank(c, data))
        return tm_lfail(L, TM_ERR_SHAPE, "input 'indices' has rank %d, 'data' has rank %d",
                        tm_vrank(c, idx), tm_vrank(c, data));
    tm_args a = {0};
    a.i[0] = axis;
    tm_val in[2] = {data, idx};
    tm_lout(L, 0, tm_prim(c, TM_P_GATHER_ELEMENTS, in, 2, &a));
    return c->status;
}
TM_REGISTER_OP("", "GatherElements", 11, 27, lower_gather_elements);

static tm_status lower_gather_nd(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val data = tm_lin(L, 0), idx = tm_lin(L, 1);
    if (data_axis(L, data, idx, 0) < 0 || !index_dtype_ok(L, idx, 0)) return c->status;
    int64_t batch = tm_attr_i(L, "batch_dims", 0);
    int rd = tm_vrank(c, data), ri = tm_vrank(c, idx);
    if (batch < 0 || batch >= rd || batch >= ri)
        return tm_lfail(L, TM_ERR_SHAPE, "attribute 'batch_dims' is %lld; it must be below "
                        "the ranks of data (%d) and indices (%d)", (long long)batch, rd, ri);
    int64_t last = tm_vdims(c, idx)[ri - 1];
    if (last < 1 || last > rd - batch)
        return tm_lfail(L, TM_ERR_SHAPE, "input 'indices' has last dim %lld; it must be in "
                        "[1, %lld]", (long long)last, (long long)(rd - batch));
    tm_args a = {0};
    a.i[0] = batch;
    tm_val in[2] = {data, idx};
    tm_lout(L, 0, tm_prim(c, TM_P_GATHER_ND, in, 2, &a));
    return c->status;
}
TM_REGISTER_OP("", "GatherND", 11, 27, lower_gather_nd);
