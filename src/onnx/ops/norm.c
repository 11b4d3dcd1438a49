/* InstanceNormalization, GroupNormalization, MeanVarianceNormalization, LpNormalization.
 * Instance and group norms standardise through LAYERNORM (f32 inside) on a reshaped view,
 * then apply per-channel scale and bias. Not BatchNormalization or LayerNormalization. */
#include "elementwise.h"

/* Standardises x over its axes from `axis` on (unit scale, no bias). */
static tm_val standardize(tm_ctx *c, tm_val x, int axis, float epsilon) {
    if (!tm_ctx_ok(c) || x == TM_NONE) return TM_NONE;
    int r = tm_vrank(c, x);
    tm_val one = tm_const_fill(c, tm_vdtype(c, x), r - axis, tm_vdims(c, x) + axis, 1.0);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = axis;
    a.f[0] = epsilon;
    tm_val in[2] = {x, one}, out[3];
    if (tm_prim_n(c, TM_P_LAYERNORM, in, 2, &a, out, 3) != TM_OK) return TM_NONE;
    return out[0];
}

/* A per-channel vector (C) shaped (C, 1, ..., 1) to broadcast against a rank-r
 * (N, C, ...) tensor, cast to dt. */
static tm_val per_channel(tm_ctx *c, tm_val v, int r, tm_dtype dt) {
    if (!tm_ctx_ok(c) || v == TM_NONE) return TM_NONE;
    int64_t dims[TM_MAX_RANK];
    dims[0] = tm_vnumel(c, v);
    for (int d = 1; d < r - 1; d++) dims[d] = 1;
    return tm_cast(c, tm_reshape(c, v, r > 1 ? r - 1 : 1, dims), dt);
}

static int check_channels(tm_lower *L, int index, tm_val v, int64_t want) {
    tm_ctx *c = tm_lctx(L);
    if (v == TM_NONE || !tm_ctx_ok(c)) return !tm_ctx_ok(c);
    if (tm_vnumel(c, v) == want) return 0;
    tm_lfail(L, TM_ERR_SHAPE, "input %d ('%s') has %lld elements, expected %lld", index,
             tm_lnode(L)->inputs[index], (long long)tm_vnumel(c, v), (long long)want);
    return 1;
}

static tm_status lower_instance_normalization(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0), scale = tm_lin(L, 1), bias = tm_lin(L, 2);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT)) return c->status;
    int r = tm_vrank(c, x);
    if (r < 2) return tm_lfail(L, TM_ERR_SHAPE, "input 0 has rank %d, expected at least 2", r);
    int64_t ch = tm_vdims(c, x)[1];
    if (check_channels(L, 1, scale, ch) || check_channels(L, 2, bias, ch)) return c->status;
    tm_dtype dt = tm_vdtype(c, x);
    tm_val y = standardize(c, x, 2, tm_attr_f(L, "epsilon", 1e-5f));
    y = tm_mul(c, y, per_channel(c, scale, r, dt));
    tm_lout(L, 0, tm_add(c, y, per_channel(c, bias, r, dt)));
    return c->status;
}

/* GroupNormalization: statistics per (instance, group); opset 18 scales per group,
 * opset 21 per channel. */
static tm_status lower_group_normalization(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0), scale = tm_lin(L, 1), bias = tm_lin(L, 2);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT)) return c->status;
    int r = tm_vrank(c, x);
    if (r < 2) return tm_lfail(L, TM_ERR_SHAPE, "input 0 has rank %d, expected at least 2", r);
    int64_t groups = tm_attr_i(L, "num_groups", 0);
    int64_t n = tm_vdims(c, x)[0], ch = tm_vdims(c, x)[1];
    if (groups <= 0 || ch % groups)
        return tm_lfail(L, TM_ERR_SHAPE, "attribute num_groups=%lld does not divide the %lld "
                        "channels", (long long)groups, (long long)ch);
    int per_group_params = tm_lopset(L) < 21;
    int64_t want = per_group_params ? groups : ch;
    if (check_channels(L, 1, scale, want) || check_channels(L, 2, bias, want)) return c->status;
    tm_dtype dt = tm_vdtype(c, x);
    int64_t rows = n * groups;
    int64_t grouped[3] = {n, groups, rows ? tm_vnumel(c, x) / rows : 0};
    tm_val y = standardize(c, tm_reshape(c, x, 3, grouped), 2, tm_attr_f(L, "epsilon", 1e-5f));
    if (per_group_params) {
        y = tm_mul(c, y, per_channel(c, scale, 3, dt));
        y = tm_add(c, y, per_channel(c, bias, 3, dt));
        tm_lout(L, 0, tm_reshape(c, y, r, tm_vdims(c, x)));
        return c->status;
    }
    y = tm_reshape(c, y, r, tm_vdims(c, x));
    y = tm_mul(c, y, per_channel(c, scale, r, dt));
    tm_lout(L, 0, tm_add(c, y, per_channel(c, bias, r, dt)));
    return c->status;
}

/* MeanVarianceNormalization: (x - mean) / (std + 1e-9) over `axes` (default 0, 2, 3),
 * as the ONNX function body defines it. */
static tm_status lower_mvn(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT)) return c->status;
    static const int64_t default_axes[3] = {0, 2, 3};
    const int64_t *axes = default_axes;
    int n = tm_attr_ints(L, "axes", &axes);
    if (n < 0) {
        axes = default_axes;
        n = 3;
    }
    int r = tm_vrank(c, x);
    for (int i = 0; i < n; i++)
        if (axes[i] < -r || axes[i] >= r)
            return tm_lfail(L, TM_ERR_SHAPE, "attribute axes has %lld, out of range for rank "
                            "%d", (long long)axes[i], r);
    tm_dtype dt = tm_vdtype(c, x);
    tm_val w = tm_cast(c, x, dt == TM_DOUBLE ? TM_DOUBLE : TM_FLOAT);
    int64_t count = 1;
    for (int i = 0; i < n; i++) count *= tm_vdims(c, x)[axes[i] < 0 ? axes[i] + r : axes[i]];
    tm_val inv_count = tm_scalar_like(c, w, 1.0 / (double)(count ? count : 1));
    tm_val mean = tm_mul(c, tm_reduce(c, TM_P_REDUCE_SUM, w, axes, n, 1), inv_count);
    tm_val d = tm_sub(c, w, mean);
    tm_val var = tm_mul(c, tm_reduce(c, TM_P_REDUCE_SUM, tm_mul(c, d, d), axes, n, 1),
                        inv_count);
    tm_val std = tm_add(c, tm_unary(c, TM_P_SQRT, var), tm_scalar_like(c, w, 1e-9));
    tm_lout(L, 0, tm_cast(c, tm_div(c, d, std), dt));
    return c->status;
}

/* LpNormalization: x / ||x||_p along one axis, p 1 or 2. A zero norm gives 0, not NaN. */
static tm_status lower_lp_normalization(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT)) return c->status;
    int64_t p = tm_attr_i(L, "p", 2);
    if (p != 1 && p != 2)
        return tm_lfail(L, TM_ERR_UNSUPPORTED, "attribute p=%lld; only 1 and 2 are defined",
                        (long long)p);
    int r = tm_vrank(c, x);
    int64_t axis = tm_attr_i(L, "axis", -1);
    if (axis < -r || axis >= r)
        return tm_lfail(L, TM_ERR_SHAPE, "attribute axis=%lld is out of range for rank %d",
                        (long long)axis, r);
    tm_dtype dt = tm_vdtype(c, x);
    tm_val w = tm_cast(c, x, dt == TM_DOUBLE ? TM_DOUBLE : TM_FLOAT);
    tm_val norm;
    if (p == 1) {
        norm = tm_reduce(c, TM_P_REDUCE_SUM, tm_unary(c, TM_P_ABS, w), &axis, 1, 1);
    } else {
        norm = tm_reduce(c, TM_P_REDUCE_SUM, tm_mul(c, w, w), &axis, 1, 1);
        norm = tm_unary(c, TM_P_SQRT, norm);
    }
    tm_val zero = tm_binary(c, TM_P_EQ, norm, tm_scalar_like(c, norm, 0.0));
    norm = tm_where(c, zero, tm_scalar_like(c, norm, 1.0), norm);
    tm_lout(L, 0, tm_cast(c, tm_div(c, w, norm), dt));
    return c->status;
}

TM_REGISTER_OP("", "InstanceNormalization", 1, 27, lower_instance_normalization);
TM_REGISTER_OP("", "GroupNormalization", 18, 27, lower_group_normalization);
TM_REGISTER_OP("", "MeanVarianceNormalization", 9, 27, lower_mvn);
TM_REGISTER_OP("", "LpNormalization", 1, 27, lower_lp_normalization);
