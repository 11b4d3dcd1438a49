/* TensorScatter (opset 24): writes each batch's update into the cache at its own
 * position along the sequence axis (linear, or wrapping for circular), as a
 * SCATTER_ELEMENTS with indices write_indices[b] + s. Not ScatterND/ScatterElements. */
#include "elementwise.h"

/* Indices shaped like the update: write_indices[b] + s along `axis`. */
static tm_val write_positions(tm_lower *L, tm_val update, int axis, int64_t max_len,
                              int circular) {
    tm_ctx *c = tm_lctx(L);
    int r = tm_vrank(c, update);
    const int64_t *du = tm_vdims(c, update);
    int64_t dims[TM_MAX_RANK];
    for (int d = 0; d < r; d++) dims[d] = d == axis ? du[d] : 1;
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = TM_INT64;
    a.i[1] = du[axis];
    a.i[3] = 1;
    tm_val pos = tm_reshape(c, tm_prim(c, TM_P_RANGE, NULL, 0, &a), r, dims);
    tm_val w = tm_lin(L, 2);
    if (w != TM_NONE) {
        if (tm_vdtype(c, w) != TM_INT64 || tm_vnumel(c, w) != du[0]) {
            tm_lfail(L, TM_ERR_SHAPE, "input 2 (write_indices) must be int64 of shape (%lld)",
                     (long long)du[0]);
            return TM_NONE;
        }
        for (int d = 0; d < r; d++) dims[d] = d == 0 ? du[0] : 1;
        pos = tm_add(c, pos, tm_reshape(c, w, r, dims));
    }
    if (circular) pos = tm_binary(c, TM_P_MOD, pos, tm_const_scalar(c, TM_INT64, (double)max_len));
    return tm_expand(c, pos, r, du);
}

static tm_status lower_tensor_scatter(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val past = tm_ew_input(L, 0), update = tm_ew_input(L, 1);
    if (past == TM_NONE || update == TM_NONE || tm_ew_same_dtype(L, 0, past, 1, update))
        return c->status;
    int r = tm_vrank(c, past);
    int64_t axis_attr = tm_attr_i(L, "axis", -2), axis = axis_attr < 0 ? axis_attr + r : axis_attr;
    if (axis <= 0 || axis >= r)
        return tm_lfail(L, TM_ERR_SHAPE, "attribute axis=%lld is out of range for rank %d (and "
                        "cannot be the batch axis)", (long long)axis_attr, r);
    const int64_t *dp = tm_vdims(c, past), *du = tm_vdims(c, update);
    int fits = tm_vrank(c, update) == r;
    for (int d = 0; fits && d < r; d++) fits = d == axis ? du[d] <= dp[d] : du[d] == dp[d];
    if (!fits)
        return tm_lfail(L, TM_ERR_SHAPE, "input 1 (update) must match input 0 (past_cache) "
                        "except along axis %lld, where it may be shorter", (long long)axis);
    const char *mode = tm_attr_s(L, "mode", "linear");
    int circular = !strcmp(mode, "circular");
    if (!circular && strcmp(mode, "linear"))
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute mode='%s' is not linear or "
                        "circular", mode);
    tm_val pos = write_positions(L, update, (int)axis, dp[axis], circular);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = axis;
    tm_val in[3] = {past, pos, update};
    tm_lout(L, 0, tm_prim(c, TM_P_SCATTER_ELEMENTS, in, 3, &a));
    return c->status;
}

TM_REGISTER_OP("", "TensorScatter", 24, 27, lower_tensor_scatter);
