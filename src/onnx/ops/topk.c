/* TopK: the k largest (or smallest) elements along an axis and their int64 indices, as
 * the TOPK primitive. k is an attribute before opset 10, a host-known input after. */
#include "elementwise.h"

static tm_status lower_topk(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT | TM_DTS_INT)) return c->status;
    int64_t k;
    if (tm_lopset(L) < 10) {
        if (!tm_attr_has(L, "k")) return tm_lfail(L, TM_ERR_SHAPE, "attribute k is missing");
        k = tm_attr_i(L, "k", 0);
    } else {
        if (!tm_lhas(L, 1)) return tm_lfail(L, TM_ERR_SHAPE, "input 1 (K) is missing");
        if (tm_host_i64(c, tm_lin(L, 1), &k, 1) != 1) {
            if (tm_ctx_ok(c))
                return tm_lfail(L, TM_ERR_SHAPE, "input 1 ('%s') must hold one value of k",
                                tm_lnode(L)->inputs[1]);
            return c->status;
        }
    }
    int r = tm_vrank(c, x);
    int64_t axis = tm_attr_i(L, "axis", -1);
    if (axis < -r || axis >= r)
        return tm_lfail(L, TM_ERR_SHAPE, "attribute axis=%lld is out of range for rank %d",
                        (long long)axis, r);
    if (axis < 0) axis += r;
    if (k < 0 || k > tm_vdims(c, x)[axis])
        return tm_lfail(L, TM_ERR_SHAPE, "k=%lld is out of range for axis %lld of size %lld",
                        (long long)k, (long long)axis, (long long)tm_vdims(c, x)[axis]);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = axis;
    a.i[1] = k;
    a.i[2] = tm_attr_i(L, "largest", 1) != 0;
    a.i[3] = tm_attr_i(L, "sorted", 1) != 0;
    tm_val out[2];
    if (tm_prim_n(c, TM_P_TOPK, &x, 1, &a, out, 2) != TM_OK) return c->status;
    tm_lout(L, 0, out[0]);
    tm_lout(L, 1, out[1]);
    return c->status;
}

TM_REGISTER_OP("", "TopK", 1, 27, lower_topk);
