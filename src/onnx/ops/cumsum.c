/* CumSum: running sums along an axis given as a (host-known) scalar input, with the
 * exclusive and reverse flags, as the CUMSUM primitive. */
#include "elementwise.h"

static tm_status lower_cumsum(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    uint32_t dts = TM_DTS_FLOAT | TM_DT(TM_INT32) | TM_DT(TM_INT64) | TM_DT(TM_UINT32) |
                   TM_DT(TM_UINT64);
    if (tm_ew_check(L, 0, x, dts)) return c->status;
    if (!tm_lhas(L, 1)) return tm_lfail(L, TM_ERR_SHAPE, "input 1 (axis) is missing");
    int64_t axis;
    if (tm_host_i64(c, tm_lin(L, 1), &axis, 1) != 1) {
        if (tm_ctx_ok(c))
            return tm_lfail(L, TM_ERR_SHAPE, "input 1 ('%s') must hold one axis",
                            tm_lnode(L)->inputs[1]);
        return c->status;
    }
    int r = tm_vrank(c, x);
    if (axis < -r || axis >= r)
        return tm_lfail(L, TM_ERR_SHAPE, "input 1 (axis) is %lld, out of range for rank %d",
                        (long long)axis, r);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = axis < 0 ? axis + r : axis;
    a.i[1] = tm_attr_i(L, "exclusive", 0) != 0;
    a.i[2] = tm_attr_i(L, "reverse", 0) != 0;
    tm_lout(L, 0, tm_prim(c, TM_P_CUMSUM, &x, 1, &a));
    return c->status;
}

TM_REGISTER_OP("", "CumSum", 11, 27, lower_cumsum);
