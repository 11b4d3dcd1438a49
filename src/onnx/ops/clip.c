/* Clip: min(max(x, lo), hi) with MAX/MIN primitives; the bounds are attributes before
 * opset 11 and optional scalar inputs from 11 on. An absent bound does not clip.
 * Not a fused clamp primitive. */
#include "elementwise.h"

/* A bound input must hold one element; it becomes a scalar so x's shape is kept. */
static tm_val bound_input(tm_lower *L, int index, tm_val x) {
    tm_ctx *c = tm_lctx(L);
    if (!tm_lhas(L, index)) return TM_NONE;
    tm_val b = tm_lin(L, index);
    if (tm_ew_same_dtype(L, 0, x, index, b)) return TM_NONE;
    if (tm_vnumel(c, b) != 1) {
        tm_lfail(L, TM_ERR_SHAPE, "input %d ('%s') must be a scalar, got %lld elements", index,
                 tm_lnode(L)->inputs[index], (long long)tm_vnumel(c, b));
        return TM_NONE;
    }
    return tm_reshape(c, b, 0, NULL);
}

static tm_val clip(tm_ctx *c, tm_val x, tm_val lo, tm_val hi) {
    if (lo != TM_NONE) x = tm_binary(c, TM_P_MAX, x, lo);
    if (hi != TM_NONE) x = tm_binary(c, TM_P_MIN, x, hi);
    return x;
}

static tm_status lower_clip_attrs(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT)) return c->status;
    tm_val lo = tm_attr_has(L, "min") ? tm_scalar_like(c, x, tm_attr_f(L, "min", 0)) : TM_NONE;
    tm_val hi = tm_attr_has(L, "max") ? tm_scalar_like(c, x, tm_attr_f(L, "max", 0)) : TM_NONE;
    tm_lout(L, 0, clip(c, x, lo, hi));
    return c->status;
}

static tm_status lower_clip_inputs(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    if (tm_ew_check(L, 0, x, TM_DTS_NUMERIC)) return c->status;
    tm_val lo = bound_input(L, 1, x), hi = bound_input(L, 2, x);
    if (!tm_ctx_ok(c)) return c->status;
    tm_lout(L, 0, clip(c, x, lo, hi));
    return c->status;
}

TM_REGISTER_OP("", "Clip", 1, 10, lower_clip_attrs);
TM_REGISTER_OP("", "Clip", 11, 27, lower_clip_inputs);
