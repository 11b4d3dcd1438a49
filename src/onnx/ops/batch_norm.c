/* BatchNormalization, inference and training forms, from elementwise and reduction
 * primitives. Training (training_mode=1 from opset 14; extra outputs requested before)
 * normalises with the batch statistics and outputs the updated running mean/var. */
#include "elementwise.h"

/* A parameter shaped to broadcast against x (N, C, D...): a 1-D (C) becomes
 * (C, 1, ..., 1); the per-activation (C, D...) form of spatial=0 keeps its dims. */
static tm_val channel_param(tm_ctx *c, tm_val v, int r, tm_dtype dt) {
    if (!tm_ctx_ok(c) || v == TM_NONE) return TM_NONE;
    if (tm_vrank(c, v) == 1 && r > 2) {
        int64_t dims[TM_MAX_RANK];
        dims[0] = tm_vdims(c, v)[0];
        for (int d = 1; d < r - 1; d++) dims[d] = 1;
        v = tm_reshape(c, v, r - 1, dims);
    }
    return tm_cast(c, v, dt);
}

static int training_requested(tm_lower *L) {
    int64_t opset = tm_lopset(L);
    if (opset >= 14) return tm_attr_i(L, "training_mode", 0) != 0;
    if (opset < 7 && tm_attr_i(L, "is_test", 0)) return 0;
    for (int i = 1; i < tm_lnout(L); i++)
        if (tm_lwants(L, i)) return 1;
    return 0;
}

static tm_status lower_batch_normalization(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    for (int i = 0; i < 5; i++)
        if (!tm_lhas(L, i))
            return tm_lfail(L, TM_ERR_SHAPE, "input %d is missing; BatchNormalization takes 5",
                            i);
    for (int i = 0; i < 5; i++)
        if (tm_ew_check(L, i, tm_lin(L, i), TM_DTS_FLOAT)) return c->status;
    int r = tm_vrank(c, x);
    if (r < 2) return tm_lfail(L, TM_ERR_SHAPE, "input 0 has rank %d, expected at least 2", r);
    tm_dtype dt = tm_vdtype(c, x);
    /* Half precision computes in f32 and rounds once at the end. */
    tm_dtype wt = dt == TM_DOUBLE ? TM_DOUBLE : TM_FLOAT;
    tm_val w = tm_cast(c, x, wt);
    tm_val scale = channel_param(c, tm_lin(L, 1), r, wt);
    tm_val bias = channel_param(c, tm_lin(L, 2), r, wt);
    tm_val mean = channel_param(c, tm_lin(L, 3), r, wt);
    tm_val var = channel_param(c, tm_lin(L, 4), r, wt);
    tm_val eps = tm_const_scalar(c, wt, tm_attr_f(L, "epsilon", 1e-5f));
    int training = training_requested(L);
    tm_val batch_mean = TM_NONE, batch_var = TM_NONE;
    if (training) {
        int64_t axes[TM_MAX_RANK];
        int n = 0;
        for (int d = 0; d < r; d++)
            if (d != 1) axes[n++] = d;
        int64_t count = tm_vnumel(c, x) / (tm_vdims(c, x)[1] ? tm_vdims(c, x)[1] : 1);
        tm_val inv_count = tm_const_scalar(c, wt, 1.0 / (double)(count ? count : 1));
        batch_mean = tm_mul(c, tm_reduce(c, TM_P_REDUCE_SUM, w, axes, n, 1), inv_count);
        tm_val d = tm_sub(c, w, batch_mean);
        batch_var = tm_mul(c, tm_reduce(c, TM_P_REDUCE_SUM, tm_mul(c, d, d), axes, n, 1),
                           inv_count);
    }
    tm_val m = training ? batch_mean : mean, v = training ? batch_var : var;
    tm_val inv_std = tm_div(c, scale, tm_unary(c, TM_P_SQRT, tm_add(c, v, eps)));
    tm_val y = tm_add(c, tm_mul(c, tm_sub(c, w, m), inv_std), bias);
    tm_lout(L, 0, tm_cast(c, y, dt));
    if (!training) return c->status;
    float momentum = tm_attr_f(L, "momentum", 0.9f);
    tm_val mom = tm_const_scalar(c, wt, momentum), rest = tm_const_scalar(c, wt, 1.0 - momentum);
    int64_t ch = tm_vdims(c, x)[1];
    tm_val flat_mean = tm_reshape(c, batch_mean, 1, &ch);
    tm_val flat_var = tm_reshape(c, batch_var, 1, &ch);
    tm_val in_mean = tm_cast(c, tm_lin(L, 3), wt), in_var = tm_cast(c, tm_lin(L, 4), wt);
    tm_val run_mean = tm_add(c, tm_mul(c, in_mean, mom), tm_mul(c, flat_mean, rest));
    tm_val run_var = tm_add(c, tm_mul(c, in_var, mom), tm_mul(c, flat_var, rest));
    tm_dtype st = tm_vdtype(c, tm_lin(L, 3));
    if (tm_lwants(L, 1)) tm_lout(L, 1, tm_cast(c, run_mean, st));
    if (tm_lwants(L, 2)) tm_lout(L, 2, tm_cast(c, run_var, st));
    /* Opsets before 14 also output the batch statistics themselves. */
    if (tm_lwants(L, 3)) tm_lout(L, 3, tm_cast(c, flat_mean, st));
    if (tm_lwants(L, 4)) tm_lout(L, 4, tm_cast(c, flat_var, st));
    return c->status;
}

TM_REGISTER_OP("", "BatchNormalization", 1, 27, lower_batch_normalization);
