/* ai.onnx.preview.training optimizers: one Adagrad, Adam or Momentum step for each of
 * the tensors listed, from elementwise primitives. Not Gradient (gradient.c). */
#include <string.h>
#include "elementwise.h"

/* The inputs R, T, then groups of `per` tensor lists (X..., G..., ...): n tensors each. */
static int count_tensors(tm_lower *L, int per, int *n) {
    tm_ctx *c = tm_lctx(L);
    int rest = tm_lnin(L) - 2;
    if (rest < per || rest % per)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "expected R, T and %d lists of equal "
                        "length, got %d inputs", per, tm_lnin(L));
    *n = rest / per;
    if (tm_lnout(L) > (per == 4 ? 3 : 2) * *n)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "%d outputs for %d optimized tensors",
                        tm_lnout(L), *n);
    tm_val r = tm_ew_input(L, 0), t = tm_ew_input(L, 1);
    if (tm_ew_check(L, 0, r, TM_DT(TM_FLOAT) | TM_DT(TM_DOUBLE)) ||
        tm_ew_check(L, 1, t, TM_DT(TM_INT64)))
        return 1;
    /* Tensor j's value, gradient and states share its dtype; tensors may differ. */
    for (int i = 0; i < rest; i++) {
        tm_val v = tm_ew_input(L, 2 + i);
        if (tm_ew_check(L, 2 + i, v, TM_DT(TM_FLOAT) | TM_DT(TM_DOUBLE))) return 1;
        int first = 2 + i % *n;
        if (i >= *n && tm_ew_same_dtype(L, first, tm_lin(L, first), 2 + i, v)) return 1;
    }
    return !tm_ctx_ok(c);
}

/* G + norm_coefficient * X. */
static tm_val regularized(tm_ctx *c, tm_val x, tm_val g, double norm) {
    if (norm == 0.0) return g;
    return tm_add(c, tm_mul(c, tm_scalar_like(c, x, norm), x), g);
}

static tm_status lower_adagrad(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    int n;
    if (count_tensors(L, 3, &n)) return c->status;
    double decay = tm_attr_f(L, "decay_factor", 0.0f), eps = tm_attr_f(L, "epsilon", 0.0f);
    double norm = tm_attr_f(L, "norm_coefficient", 0.0f);
    tm_val r = tm_lin(L, 0), t = tm_lin(L, 1);
    for (int i = 0; i < n; i++) {
        tm_val x = tm_lin(L, 2 + i), g = tm_lin(L, 2 + n + i), h = tm_lin(L, 2 + 2 * n + i);
        tm_dtype dt = tm_vdtype(c, x);
        /* r = R / (1 + T * decay_factor) */
        tm_val rate = tm_div(c, tm_cast(c, r, dt),
                             tm_add(c, tm_scalar_like(c, x, 1.0),
                                    tm_mul(c, tm_cast(c, t, dt), tm_scalar_like(c, x, decay))));
        tm_val gr = regularized(c, x, g, norm);
        tm_val h_new = tm_add(c, h, tm_mul(c, gr, gr));
        tm_val adaptive = tm_add(c, tm_unary(c, TM_P_SQRT, h_new), tm_scalar_like(c, x, eps));
        tm_lout(L, i, tm_sub(c, x, tm_div(c, tm_mul(c, rate, gr), adaptive)));
        tm_lout(L, n + i, h_new);
    }
    return c->status;
}

static tm_status lower_adam(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    int n;
    if (count_tensors(L, 4, &n)) return c->status;
    double alpha = tm_attr_f(L, "alpha", 0.9f), beta = tm_attr_f(L, "beta", 0.999f);
    double eps = tm_attr_f(L, "epsilon", 0.0f), norm = tm_attr_f(L, "norm_coefficient", 0.0f);
    double post = tm_attr_f(L, "norm_coefficient_post", 0.0f);
    tm_val r = tm_lin(L, 0), t = tm_lin(L, 1);
    tm_val started = tm_binary(c, TM_P_GT, t, tm_const_scalar(c, TM_INT64, 0.0));
    for (int i = 0; i < n; i++) {
        tm_val x = tm_lin(L, 2 + i), g = tm_lin(L, 2 + n + i);
        tm_val v = tm_lin(L, 2 + 2 * n + i), h = tm_lin(L, 2 + 3 * n + i);
        tm_dtype dt = tm_vdtype(c, x);
        tm_val gr = regularized(c, x, g, norm);
        tm_val v_new = tm_add(c, tm_mul(c, tm_scalar_like(c, x, alpha), v),
                              tm_mul(c, tm_scalar_like(c, x, 1.0 - alpha), gr));
        tm_val h_new = tm_add(c, tm_mul(c, tm_scalar_like(c, x, beta), h),
                              tm_mul(c, tm_scalar_like(c, x, 1.0 - beta), tm_mul(c, gr, gr)));
        tm_val h_sqrt = tm_add(c, tm_unary(c, TM_P_SQRT, h_new), tm_scalar_like(c, x, eps));
        /* Bias correction from the second step on: R * sqrt(1 - beta^T) / (1 - alpha^T). */
        tm_val rate = tm_cast(c, r, dt), tf = tm_cast(c, t, dt), one = tm_scalar_like(c, x, 1.0);
        tm_val alpha_t = tm_binary(c, TM_P_POW, tm_scalar_like(c, x, alpha), tf);
        tm_val beta_t = tm_binary(c, TM_P_POW, tm_scalar_like(c, x, beta), tf);
        tm_val root = tm_unary(c, TM_P_SQRT, tm_sub(c, one, beta_t));
        tm_val corrected = tm_div(c, tm_mul(c, rate, root), tm_sub(c, one, alpha_t));
        rate = tm_where(c, started, corrected, rate);
        tm_val x_new = tm_sub(c, x, tm_mul(c, rate, tm_div(c, v_new, h_sqrt)));
        if (post != 0.0) x_new = tm_mul(c, tm_scalar_like(c, x, 1.0 - post), x_new);
        tm_lout(L, i, x_new);
        tm_lout(L, n + i, v_new);
        tm_lout(L, 2 * n + i, h_new);
    }
    return c->status;
}

static tm_status lower_momentum(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    int n;
    if (count_tensors(L, 3, &n)) return c->status;
    static const char *const required[4] = {"alpha", "beta", "mode", "norm_coefficient"};
    for (int i = 0; i < 4; i++)
        if (!tm_attr_has(L, required[i]))
            return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute %s is required", required[i]);
    double alpha = tm_attr_f(L, "alpha", 0.0f), beta = tm_attr_f(L, "beta", 0.0f);
    double norm = tm_attr_f(L, "norm_coefficient", 0.0f);
    const char *mode = tm_attr_s(L, "mode", "");
    int nesterov = !strcmp(mode, "nesterov");
    if (!nesterov && strcmp(mode, "standard"))
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute mode='%s' is not standard or "
                        "nesterov", mode);
    tm_val r = tm_lin(L, 0), t = tm_lin(L, 1);
    tm_val started = tm_binary(c, TM_P_GT, t, tm_const_scalar(c, TM_INT64, 0.0));
    for (int i = 0; i < n; i++) {
        tm_val x = tm_lin(L, 2 + i), g = tm_lin(L, 2 + n + i), v = tm_lin(L, 2 + 2 * n + i);
        tm_val gr = regularized(c, x, g, norm);
        /* The first step takes the whole gradient: beta applies from T > 0. */
        tm_val b = tm_where(c, started, tm_scalar_like(c, x, beta), tm_scalar_like(c, x, 1.0));
        tm_val v_new = tm_add(c, tm_mul(c, tm_scalar_like(c, x, alpha), v), tm_mul(c, b, gr));
        tm_val step = v_new;
        if (nesterov) step = tm_add(c, gr, tm_mul(c, tm_scalar_like(c, x, alpha), v_new));
        tm_val rate = tm_cast(c, r, tm_vdtype(c, x));
        tm_lout(L, i, tm_sub(c, x, tm_mul(c, rate, step)));
        tm_lout(L, n + i, v_new);
    }
    return c->status;
}

TM_REGISTER_OP("ai.onnx.preview.training", "Adagrad", 1, 1, lower_adagrad);
TM_REGISTER_OP("ai.onnx.preview.training", "Adam", 1, 1, lower_adam);
TM_REGISTER_OP("ai.onnx.preview.training", "Momentum", 1, 1, lower_momentum);
