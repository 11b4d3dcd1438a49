/* Dropout. Inference (every opset, and opset 12 on without a true training_mode): the
 * output is the input and the mask all true (all ones of the input's dtype before opset
 * 10). Training with ratio > 0: a RANDOM_UNIFORM draw (seeded by the seed attribute)
 * keeps each element with probability 1 - ratio, scaled by 1 / (1 - ratio).
 * Not a gradient of its own: the mask is a where. */
#include "elementwise.h"

static tm_val all_true_mask(tm_lower *L, tm_val x) {
    tm_ctx *c = tm_lctx(L);
    tm_dtype dt = tm_lopset(L) < 10 ? tm_vdtype(c, x) : TM_BOOL;
    return tm_const_fill(c, dt, tm_vrank(c, x), tm_vdims(c, x), 1);
}

static tm_status inference(tm_lower *L, tm_val x) {
    tm_lout(L, 0, x);
    if (tm_lwants(L, 1)) tm_lout(L, 1, all_true_mask(L, x));
    return tm_lctx(L)->status;
}

/* The draw is in double and compared with the ratio as given, as the reference does
 * (numpy: uniform(0, 1, shape) >= ratio). */
static tm_status training(tm_lower *L, tm_val x, double ratio) {
    tm_ctx *c = tm_lctx(L);
    int rank = tm_vrank(c, x);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = TM_DOUBLE;
    a.i[1] = rank;
    for (int d = 0; d < rank; d++) a.i[2 + d] = tm_vdims(c, x)[d];
    a.f[0] = 0.0;
    a.f[1] = 1.0;
    /* Without a seed attribute every run draws a new mask (RANDOM i[10]). */
    a.f[2] = tm_attr_has(L, "seed") ? (double)tm_attr_i(L, "seed", 0) : tm_ctx_node_seed(c);
    a.i[10] = !tm_attr_has(L, "seed");
    tm_val draw = tm_prim(c, TM_P_RANDOM_UNIFORM, NULL, 0, &a);
    tm_val keep = tm_binary(c, TM_P_GE, draw, tm_const_scalar(c, TM_DOUBLE, ratio));
    tm_val scaled = tm_mul(c, x, tm_scalar_like(c, x, 1.0 / (1.0 - ratio)));
    tm_lout(L, 0, tm_where(c, keep, scaled, tm_scalar_like(c, x, 0)));
    if (tm_lwants(L, 1)) tm_lout(L, 1, keep);
    return c->status;
}

static tm_status lower_dropout_attrs(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT)) return c->status;
    return inference(L, x);
}

/* Opset 12 on: ratio (default 0.5) and training_mode (default false) are inputs, read on
 * the host when training is asked for. */
static tm_status lower_dropout_inputs(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT | TM_DTS_FLOAT8)) return c->status;
    double train = 0, ratio = 0.5;
    if (tm_lhas(L, 2) && tm_host_f64(c, tm_lin(L, 2), &train)) return c->status;
    if (!train) return inference(L, x);
    if (tm_lhas(L, 1) && tm_host_f64(c, tm_lin(L, 1), &ratio)) return c->status;
    if (!(ratio >= 0 && ratio < 1))
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "input 1 (ratio) is %g; it must be in "
                        "[0, 1)", ratio);
    if (ratio == 0) return inference(L, x);
    return training(L, x, ratio);
}

TM_REGISTER_OP("", "Dropout", 1, 11, lower_dropout_attrs);
TM_REGISTER_OP("", "Dropout", 12, 27, lower_dropout_inputs);
