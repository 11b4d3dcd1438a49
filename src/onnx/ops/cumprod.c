/* CumProd (opset 26): running products along an axis given as a (host-known) scalar
 * input, with the exclusive and reverse flags, as the CUMPROD primitive. */
#include "elementwise.h"

static tm_status lower_cumprod(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    uint32_t dts = TM_DTS_FLOAT | TM_DT(TM_INT32) | TM_DT(TM_INT64) | TM_DT(TM_UINT32) |
                   TM_DT(TM_UINT64);
    if (tm_ew_check(L, 0, x, dts)) return c->status;
    tm_val axis_v = tm_ew_input(L, 1);
    if (tm_ew_check(L, 1, axis_v, TM_DT(TM_INT32) | TM_DT(TM_INT64))) return c->status;
    int64_t axis;
    if (tm_vnumel(c, axis_v) != 1)
        return tm_lfail(L, TM_ERR_SHAPE, "input 1 (axis) must hold one value, got %lld",
                        (long long)tm_vnumel(c, axis_v));
    if (tm_host_i64(c, axis_v, &axis, 1) != 1) return c->status;
    int r = tm_vrank(c, x);
    if (axis < -r || axis >= r || r == 0)
        return tm_lfail(L, TM_ERR_SHAPE, "input 1 (axis) is %lld, out of range for rank %d",
                        (long long)axis, r);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = axis < 0 ? axis + r : axis;
    a.i[1] = tm_attr_i(L, "exclusive", 0) != 0;
    a.i[2] = tm_attr_i(L, "reverse", 0) != 0;
    tm_lout(L, 0, tm_prim(c, TM_P_CUMPROD, &x, 1, &a));
    return c->status;
}

TM_REGISTER_OP("", "CumProd", 26, 27, lower_cumprod);
