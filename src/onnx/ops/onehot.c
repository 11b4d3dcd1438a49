/* OneHot: [off, on][indices == iota along the new axis]. Only depth is needed on the
 * host; the indices stay traced. Not EyeLike (trilu.c). */
#include "../lower.h"

static tm_status lower_onehot(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val indices = tm_lin(L, 0), depth_v = tm_lin(L, 1), values = tm_lin(L, 2);
    if (indices == TM_NONE || depth_v == TM_NONE || values == TM_NONE)
        return tm_lfail(L, TM_ERR_PARSE, "input '%s' is missing",
                        indices == TM_NONE ? "indices" : depth_v == TM_NONE ? "depth" : "values");
    tm_dtype it = tm_vdtype(c, indices);
    if (it == TM_STRING || it == TM_BOOL || it == TM_COMPLEX64 || it == TM_COMPLEX128)
        return tm_lfail(L, TM_ERR_DTYPE, "input 'indices' must be numeric, got %s",
                        tm_dtype_name(it));
    if (tm_vnumel(c, depth_v) != 1)
        return tm_lfail(L, TM_ERR_SHAPE, "input 'depth' must hold one element, it holds %lld",
                        (long long)tm_vnumel(c, depth_v));
    if (tm_vrank(c, values) != 1 || tm_vdims(c, values)[0] != 2)
        return tm_lfail(L, TM_ERR_SHAPE, "input 'values' must be [off_value, on_value]");
    double depth_f;
    if (tm_host_f64(c, depth_v, &depth_f)) return c->status;
    int64_t depth = (int64_t)depth_f;
    if (depth < 1)
        return tm_lfail(L, TM_ERR_SHAPE, "input 'depth' is %lld; it must be positive",
                        (long long)depth);
    int r = tm_vrank(c, indices);
    if (r + 1 > TM_MAX_RANK)
        return tm_lfail(L, TM_ERR_UNSUPPORTED, "the result would have rank %d; at most %d is "
                        "supported", r + 1, TM_MAX_RANK);
    int64_t axis = tm_attr_i(L, "axis", -1);
    if (axis < -r - 1 || axis > r)
        return tm_lfail(L, TM_ERR_SHAPE, "attribute 'axis' is %lld, outside [%d, %d]",
                        (long long)axis, -r - 1, r);
    if (axis < 0) axis += r + 1;

    /* Negative indices count from depth; anything still outside [0, depth) matches no
     * position of the iota and so stays off. */
    tm_val idx = tm_cast(c, indices, TM_INT64);
    tm_val neg = tm_binary(c, TM_P_LT, idx, tm_const_scalar(c, TM_INT64, 0));
    idx = tm_where(c, neg, tm_add(c, idx, tm_const_scalar(c, TM_INT64, (double)depth)), idx);
    idx = tm_unsqueeze(c, idx, &axis, 1);

    tm_args a = {0};
    a.i[0] = TM_INT64;
    a.i[1] = depth;
    a.i[2] = 0;
    a.i[3] = 1;
    int64_t iota_dims[TM_MAX_RANK];
    for (int d = 0; d <= r; d++) iota_dims[d] = d == axis ? depth : 1;
    tm_val iota = tm_reshape(c, tm_prim(c, TM_P_RANGE, NULL, 0, &a), r + 1, iota_dims);
    tm_val hot = tm_binary(c, TM_P_EQ, idx, iota);

    /* values is the table [off, on]: gathering it at hot (0 or 1) works for every dtype,
     * strings included. */
    tm_lout(L, 0, tm_gather(c, values, tm_cast(c, hot, TM_INT64), 0));
    return c->status;
}
TM_REGISTER_OP("", "OneHot", 9, 27, lower_onehot);
