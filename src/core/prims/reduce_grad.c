/* Gradient rules of the reduce family (rows in reduce.def). Reductions keep their rank
 * (reduced dims are 1), so a cotangent broadcasts straight back over the input: sums
 * expand it, products divide by the factor (zeros handled exactly), max and min share it
 * evenly among the elements that reached the extreme (as PyTorch's amax does). Cumulative
 * sums run backwards; argmax/argmin give integers and pass nothing. Not the kernels. */
#include <string.h>
#include "../autodiff.h"

static tm_val bin(tm_ctx *c, int prim, tm_val a, tm_val b) { return tm_binary(c, prim, a, b); }

tm_status tm__grad_reduce(tm_ctx *c, const tm_grad_call *g) {
    tm_val x = g->in[0], y = g->out[0], gy = g->gout[0];
    int64_t mask = g->a->i[0];
    tm_val d;  /* dy/dx, broadcast against x */
    switch (g->prim) {
    case TM_P_REDUCE_SUM:
        g->gin[0] = tm_grad_expand_like(c, gy, x);
        return c->status;
    case TM_P_REDUCE_PROD: {
        /* dy/dx_i = prod of the others: y / x_i where x_i != 0; where x_i is the only
         * zero of its group, the product of the rest; with two zeros, 0. */
        tm_val zero = tm_grad_scalar(c, x, 0.0), one = tm_grad_scalar(c, x, 1.0);
        tm_val is_zero = bin(c, TM_P_EQ, x, zero);
        tm_val x_nonzero = tm_where(c, is_zero, one, x);
        tm_val zeros = tm_grad_reduce_sum(c, tm_grad_mask(c, is_zero, x), mask);
        tm_args a;
        memset(&a, 0, sizeof a);
        a.i[0] = mask;
        tm_val rest = tm_prim(c, TM_P_REDUCE_PROD, &x_nonzero, 1, &a);
        tm_val at_zero = tm_where(c, bin(c, TM_P_EQ, zeros, one), rest, zero);
        d = tm_where(c, is_zero, at_zero, bin(c, TM_P_DIV, y, x_nonzero));
        break;
    }
    case TM_P_REDUCE_MAX: case TM_P_REDUCE_MIN: {
        tm_val hit = tm_grad_mask(c, bin(c, TM_P_EQ, x, y), x);
        d = bin(c, TM_P_DIV, hit, tm_grad_reduce_sum(c, hit, mask));
        break;
    }
    default:
        return TM_GRAD_NO_RULE;
    }
    g->gin[0] = tm_grad_expand_like(c, bin(c, TM_P_MUL, gy, d), x);
    return c->status;
}

/* Integer outputs: never reached (nothing differentiable comes out). */
tm_status tm__grad_argreduce(tm_ctx *c, const tm_grad_call *g) {
    (void)g;
    return c->status;
}

static tm_val cumulative(tm_ctx *c, int prim, tm_val x, int64_t axis, int exclusive,
                         int reverse) {
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = axis;
    a.i[1] = exclusive;
    a.i[2] = reverse;
    return tm_prim(c, prim, &x, 1, &a);
}

tm_status tm__grad_cumulative(tm_ctx *c, const tm_grad_call *g) {
    int64_t axis = g->a->i[0];
    int exclusive = g->a->i[1] != 0, reverse = g->a->i[2] != 0;
    tm_val gy = g->gout[0];
    if (g->prim == TM_P_CUMSUM) {
        /* Each output sums the inputs before (or after) it: the cotangent of x_k sums the
         * outputs' cotangents that include it, a cumulative sum the other way. */
        g->gin[0] = cumulative(c, TM_P_CUMSUM, gy, axis, exclusive, !reverse);
        return c->status;
    }
    /* CUMPROD: dL/dx_k = sum over outputs y_i containing x_k of g_i y_i / x_k. Exact for
     * nonzero inputs; a zero input makes the quotient undefined, as in its forward. */
    tm_val x = g->in[0];
    tm_val s = cumulative(c, TM_P_CUMSUM, bin(c, TM_P_MUL, gy, g->out[0]), axis, exclusive,
                          !reverse);
    g->gin[0] = bin(c, TM_P_DIV, s, x);
    return c->status;
}
