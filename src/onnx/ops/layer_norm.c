/* LayerNormalization (opset 17) and RMSNormalization (opset 23) over the LAYERNORM
 * primitive, which normalises the trailing axes in f32 or wider whatever the dtype.
 * Scale/bias that vary along the leading (not normalised) axes are applied outside. */
#include "elementwise.h"

/* v reshaped/expanded to the normalised dims of x (x dims from `axis` on) when v
 * broadcasts that way (its dims before `axis`, aligned to x, are all 1); else TM_NONE
 * without error. */
static tm_val to_normalized_dims(tm_ctx *c, tm_val v, tm_val x, int axis) {
    int r = tm_vrank(c, x), rv = tm_vrank(c, v);
    if (rv > r) return TM_NONE;
    for (int d = 0; d < rv; d++) {
        int xd = r - rv + d;
        int64_t n = tm_vdims(c, v)[d];
        if (xd < axis && n != 1) return TM_NONE;
        if (xd >= axis && n != 1 && n != tm_vdims(c, x)[xd]) return TM_NONE;
    }
    int nr = r - axis;
    int64_t dims[TM_MAX_RANK], vd[TM_MAX_RANK];
    for (int d = 0; d < nr; d++) {
        int src = axis + d - (r - rv);
        vd[d] = src >= 0 ? tm_vdims(c, v)[src] : 1;
        dims[d] = tm_vdims(c, x)[axis + d];
    }
    v = tm_reshape(c, v, nr, vd);
    return tm_expand(c, v, nr, dims);
}

/* Runs LAYERNORM (rms: no mean) with scale and optional bias broadcast against x,
 * filling y, mean, inv_std_dev. */
static tm_status layer_norm(tm_lower *L, tm_val x, tm_val scale, tm_val bias, int axis,
                            int rms, float epsilon, tm_val out[3]) {
    tm_ctx *c = tm_lctx(L);
    int r = tm_vrank(c, x);
    tm_dtype dt = tm_vdtype(c, x);
    tm_val s = tm_vdtype(c, scale) == dt ? to_normalized_dims(c, scale, x, axis) : TM_NONE;
    tm_val b = TM_NONE;
    int bias_inside = bias == TM_NONE;
    if (bias != TM_NONE && s != TM_NONE && tm_vdtype(c, bias) == dt) {
        b = to_normalized_dims(c, bias, x, axis);
        bias_inside = b != TM_NONE;
    }
    int scale_inside = s != TM_NONE && bias_inside;
    if (!scale_inside) {
        s = tm_const_fill(c, dt, r - axis, tm_vdims(c, x) + axis, 1.0);
        b = TM_NONE;
    }
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = axis;
    a.i[1] = rms;
    a.f[0] = epsilon;
    tm_val in[3] = {x, s, b};
    if (tm_prim_n(c, TM_P_LAYERNORM, in, b == TM_NONE ? 2 : 3, &a, out, 3) != TM_OK)
        return c->status;
    if (!scale_inside) {
        tm_dtype sdt = tm_vdtype(c, scale);
        out[0] = tm_mul(c, tm_cast(c, out[0], sdt), scale);
        if (bias != TM_NONE) out[0] = tm_add(c, out[0], tm_cast(c, bias, sdt));
    }
    return c->status;
}

static int normalized_axis(tm_lower *L, int rank) {
    int64_t axis = tm_attr_i(L, "axis", -1);
    if (axis < -rank || axis >= rank) {
        tm_lfail(L, TM_ERR_SHAPE, "attribute axis=%lld is out of range for rank %d",
                 (long long)axis, rank);
        return -1;
    }
    return (int)(axis < 0 ? axis + rank : axis);
}

/* Mean and InvStdDev come out of the primitive as float32; stash_type names their type. */
static tm_val to_stash(tm_lower *L, tm_val v) {
    int64_t stash = tm_attr_i(L, "stash_type", TM_FLOAT);
    if (stash != TM_BFLOAT16 && stash != TM_FLOAT16 && stash != TM_DOUBLE) stash = TM_FLOAT;
    return tm_cast(tm_lctx(L), v, (tm_dtype)stash);
}

static tm_status lower_layer_normalization(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0), scale = tm_lin(L, 1), bias = tm_lin(L, 2);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT) || tm_ew_check(L, 1, scale, TM_DTS_FLOAT) ||
        (bias != TM_NONE && tm_ew_check(L, 2, bias, TM_DTS_FLOAT)))
        return c->status;
    int axis = normalized_axis(L, tm_vrank(c, x));
    if (axis < 0) return c->status;
    tm_val out[3];
    if (layer_norm(L, x, scale, bias, axis, 0, tm_attr_f(L, "epsilon", 1e-5f), out) != TM_OK)
        return c->status;
    tm_lout(L, 0, out[0]);
    if (tm_lwants(L, 1)) tm_lout(L, 1, to_stash(L, out[1]));
    if (tm_lwants(L, 2)) tm_lout(L, 2, to_stash(L, out[2]));
    return c->status;
}

static tm_status lower_rms_normalization(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0), scale = tm_lin(L, 1);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT) || tm_ew_check(L, 1, scale, TM_DTS_FLOAT))
        return c->status;
    int axis = normalized_axis(L, tm_vrank(c, x));
    if (axis < 0) return c->status;
    tm_val out[3];
    if (layer_norm(L, x, scale, TM_NONE, axis, 1, tm_attr_f(L, "epsilon", 1e-5f), out) != TM_OK)
        return c->status;
    tm_lout(L, 0, out[0]);
    return c->status;
}

TM_REGISTER_OP("", "LayerNormalization", 17, 27, lower_layer_normalization);
TM_REGISTER_OP("", "RMSNormalization", 23, 27, lower_rms_normalization);
