/* NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: the (weighted) negated input
 * at each target class, ignore_index zeroed, reduced by none/sum/mean, from gathers and
 * reductions (SoftmaxCrossEntropyLoss is log-softmax over axis 1 first). Not the
 * training-mode gradients (they follow from the primitives). */
#include <string.h>
#include "elementwise.h"

typedef enum { REDUCE_NONE, REDUCE_SUM, REDUCE_MEAN } reduction;

static int read_reduction(tm_lower *L, reduction *out) {
    const char *r = tm_attr_s(L, "reduction", "mean");
    if (!strcmp(r, "none")) *out = REDUCE_NONE;
    else if (!strcmp(r, "sum")) *out = REDUCE_SUM;
    else if (!strcmp(r, "mean")) *out = REDUCE_MEAN;
    else return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute reduction='%s' is not none, "
                         "sum or mean", r);
    return 0;
}

static int check_inputs(tm_lower *L, tm_val x, tm_val t, tm_val w) {
    tm_ctx *c = tm_lctx(L);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT) ||
        tm_ew_check(L, 1, t, TM_DT(TM_INT32) | TM_DT(TM_INT64)))
        return 1;
    int r = tm_vrank(c, x);
    const int64_t *dx = tm_vdims(c, x), *dt = tm_vdims(c, t);
    int fits = r >= 2 && tm_vrank(c, t) == r - 1 && dt[0] == dx[0];
    for (int d = 2; fits && d < r; d++) fits = dt[d - 1] == dx[d];
    if (!fits)
        return tm_lfail(L, TM_ERR_SHAPE, "input 1 (target) must have input 0's shape (N, C, "
                        "d1, ...) without C; ranks are %d and %d", tm_vrank(c, t), r);
    if (w == TM_NONE) return 0;
    if (tm_ew_same_dtype(L, 0, x, 2, w)) return 1;
    if (tm_vrank(c, w) != 1 || tm_vdims(c, w)[0] != dx[1])
        return tm_lfail(L, TM_ERR_SHAPE, "input 2 (weight) must have shape (%lld)",
                        (long long)dx[1]);
    return 0;
}

/* loss[n, d...] = -x[n, t[n, d...], d...] * weight[t] (0 where t == ignore_index). */
static tm_val nll(tm_lower *L, tm_val x, tm_val t, tm_val w, reduction red) {
    tm_ctx *c = tm_lctx(L);
    tm_dtype dt = tm_vdtype(c, x);
    int has_ignore = tm_attr_has(L, "ignore_index");
    tm_val ignored = TM_NONE, safe = t;
    if (has_ignore) {
        /* Ignored targets may lie outside [0, C): gather class 0 there, then zero it. */
        double ii = (double)tm_attr_i(L, "ignore_index", 0);
        ignored = tm_binary(c, TM_P_EQ, t, tm_const_scalar(c, tm_vdtype(c, t), ii));
        safe = tm_where(c, ignored, tm_scalar_like(c, t, 0.0), t);
    }
    int64_t axis1 = 1;
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 1;
    tm_val in[2] = {x, tm_unsqueeze(c, safe, &axis1, 1)};
    tm_val picked = tm_squeeze(c, tm_prim(c, TM_P_GATHER_ELEMENTS, in, 2, &a), &axis1, 1);
    tm_val loss = tm_unary(c, TM_P_NEG, picked);
    tm_val weight = TM_NONE;
    if (w != TM_NONE) weight = tm_gather(c, w, safe, 0);
    if (has_ignore) {
        tm_val kept = weight != TM_NONE ? weight : tm_const_scalar(c, dt, 1.0);
        weight = tm_where(c, ignored, tm_const_scalar(c, dt, 0.0), kept);
    }
    if (weight != TM_NONE) loss = tm_mul(c, loss, weight);
    if (red == REDUCE_NONE) return loss;
    tm_val total = tm_reduce(c, TM_P_REDUCE_SUM, loss, NULL, 0, 0);
    if (red == REDUCE_SUM) return total;
    if (weight == TM_NONE)
        return tm_div(c, total, tm_const_scalar(c, dt, (double)tm_vnumel(c, loss)));
    return tm_div(c, total, tm_reduce(c, TM_P_REDUCE_SUM, weight, NULL, 0, 0));
}

static tm_status lower_nll_loss(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0), t = tm_ew_input(L, 1), w = tm_lin(L, 2);
    reduction red;
    if (check_inputs(L, x, t, w) || read_reduction(L, &red)) return c->status;
    tm_lout(L, 0, nll(L, x, t, w, red));
    return c->status;
}

static tm_status lower_softmax_cross_entropy(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0), t = tm_ew_input(L, 1), w = tm_lin(L, 2);
    reduction red;
    if (check_inputs(L, x, t, w) || read_reduction(L, &red)) return c->status;
    tm_val log_prob = tm_softmax(c, x, 1, 1);
    tm_lout(L, 0, nll(L, log_prob, t, w, red));
    tm_lout(L, 1, log_prob);
    return c->status;
}

TM_REGISTER_OP("", "NegativeLogLikelihoodLoss", 12, 27, lower_nll_loss);
TM_REGISTER_OP("", "SoftmaxCrossEntropyLoss", 12, 27, lower_softmax_cross_entropy);
