/* Gradient rules of the elementwise family (rows in elementwise.def), written in other
 * primitives: unary maths, binary arithmetic with size-1 broadcasting (cotangents are
 * summed back over the broadcast dims), WHERE and CAST. Rounding and sign pass a zero
 * gradient; comparisons and logic have bool outputs, which are never differentiated.
 * Kept apart from elementwise.c (shape rules and kernels) so the two can change alone. */
#include <math.h>
#include <string.h>
#include "../autodiff.h"

#define TWO_OVER_SQRT_PI 1.12837916709551257390

/* Binary primitives with rank alignment (constants are rank 0). */
static tm_val bin(tm_ctx *c, int prim, tm_val a, tm_val b) { return tm_binary(c, prim, a, b); }
static tm_val un(tm_ctx *c, int prim, tm_val x) { return tm_prim(c, prim, &x, 1, NULL); }
static tm_val k(tm_ctx *c, tm_val like, double v) { return tm_grad_scalar(c, like, v); }

/* 1 / sqrt(s): the derivatives of the inverse trigonometric family. */
static tm_val rsqrt(tm_ctx *c, tm_val s) { return un(c, TM_P_RECIPROCAL, un(c, TM_P_SQRT, s)); }

/* The derivative dy/dx of unary prim at x (y its output), or TM_NONE for none. */
static tm_val unary_derivative(tm_ctx *c, int prim, const tm_args *a, tm_val x, tm_val y,
                               int *zero) {
    *zero = 0;
    tm_val one = k(c, x, 1.0);
    switch (prim) {
    case TM_P_ABS: return un(c, TM_P_SIGN, x);
    case TM_P_EXP: return y;
    case TM_P_LOG: return un(c, TM_P_RECIPROCAL, x);
    case TM_P_SQRT: return bin(c, TM_P_DIV, k(c, x, 0.5), y);
    case TM_P_RECIPROCAL: return un(c, TM_P_NEG, bin(c, TM_P_MUL, y, y));
    case TM_P_SIN: return un(c, TM_P_COS, x);
    case TM_P_COS: return un(c, TM_P_NEG, un(c, TM_P_SIN, x));
    case TM_P_TAN: return bin(c, TM_P_ADD, one, bin(c, TM_P_MUL, y, y));
    case TM_P_ASIN: return rsqrt(c, bin(c, TM_P_SUB, one, bin(c, TM_P_MUL, x, x)));
    case TM_P_ACOS: return un(c, TM_P_NEG, rsqrt(c, bin(c, TM_P_SUB, one, bin(c, TM_P_MUL, x, x))));
    case TM_P_ATAN:
        return un(c, TM_P_RECIPROCAL, bin(c, TM_P_ADD, one, bin(c, TM_P_MUL, x, x)));
    case TM_P_SINH: return un(c, TM_P_COSH, x);
    case TM_P_COSH: return un(c, TM_P_SINH, x);
    case TM_P_TANH: return bin(c, TM_P_SUB, one, bin(c, TM_P_MUL, y, y));
    case TM_P_ASINH: return rsqrt(c, bin(c, TM_P_ADD, bin(c, TM_P_MUL, x, x), one));
    case TM_P_ACOSH: return rsqrt(c, bin(c, TM_P_SUB, bin(c, TM_P_MUL, x, x), one));
    case TM_P_ATANH:
        return un(c, TM_P_RECIPROCAL, bin(c, TM_P_SUB, one, bin(c, TM_P_MUL, x, x)));
    case TM_P_ERF:
        return bin(c, TM_P_MUL, k(c, x, TWO_OVER_SQRT_PI),
                   un(c, TM_P_EXP, un(c, TM_P_NEG, bin(c, TM_P_MUL, x, x))));
    case TM_P_SIGMOID: return bin(c, TM_P_MUL, y, bin(c, TM_P_SUB, one, y));
    case TM_P_RELU: return tm_grad_mask(c, bin(c, TM_P_GT, x, k(c, x, 0.0)), x);
    case TM_P_SIGN: case TM_P_FLOOR: case TM_P_CEIL: case TM_P_ROUND:
        *zero = 1;  /* piecewise constant */
        return TM_NONE;
    default:
        return TM_NONE;
    }
}

tm_status tm__grad_unary(tm_ctx *c, const tm_grad_call *g) {
    tm_val x = g->in[0], y = g->out[0], gy = g->gout[0];
    if (g->prim == TM_P_NEG) {
        g->gin[0] = un(c, TM_P_NEG, gy);
        return c->status;
    }
    if (g->prim == TM_P_GELU) {
        /* One pass (GELU_GRAD) rather than the derivative's ten primitives below. */
        tm_args a;
        memset(&a, 0, sizeof a);
        a.i[0] = g->a->i[0];
        g->gin[0] = tm_prim(c, TM_P_GELU_GRAD, (tm_val[2]){x, gy}, 2, &a);
        return c->status;
    }
    int zero = 0;
    tm_val d = unary_derivative(c, g->prim, g->a, x, y, &zero);
    if (zero) return c->status;
    if (d == TM_NONE) return tm_ctx_ok(c) ? TM_GRAD_NO_RULE : c->status;
    g->gin[0] = bin(c, TM_P_MUL, gy, d);
    return c->status;
}

/* Where a == b the gradient of max/min is split evenly between them (PyTorch's rule). */
static tm_val select_share(tm_ctx *c, tm_val gy, tm_val wins, tm_val ties) {
    tm_val share = bin(c, TM_P_ADD, tm_grad_mask(c, wins, gy),
                       bin(c, TM_P_MUL, tm_grad_mask(c, ties, gy), k(c, gy, 0.5)));
    return bin(c, TM_P_MUL, gy, share);
}

/* 1 when v is a known tensor whose elements all equal one number (*out). */
static int constant_scalar(const tm_ctx *c, tm_val v, double *out) {
    const tm_tensor *t = tm_vdata(c, v);
    if (!t || tm_tensor_numel_(t) < 1 || t->dtype == TM_STRING) return 0;
    int f = tm_dtype_is_float(t->dtype);
    double first = f ? tm_load_f64(t->data, t->dtype, 0) : (double)tm_load_i64(t->data, t->dtype, 0);
    for (int64_t i = 1; i < tm_tensor_numel_(t); i++) {
        double x = f ? tm_load_f64(t->data, t->dtype, (size_t)i)
                     : (double)tm_load_i64(t->data, t->dtype, (size_t)i);
        if (x != first) return 0;
    }
    *out = first;
    return 1;
}

/* trunc(q) = sign(q) floor(|q|). */
static tm_val trunc_of(tm_ctx *c, tm_val q) {
    return bin(c, TM_P_MUL, un(c, TM_P_SIGN, q), un(c, TM_P_FLOOR, un(c, TM_P_ABS, q)));
}

tm_status tm__grad_binary(tm_ctx *c, const tm_grad_call *g) {
    tm_val a = g->in[0], b = g->in[1], y = g->out[0], gy = g->gout[0];
    tm_val ga = TM_NONE, gb = TM_NONE;
    switch (g->prim) {
    case TM_P_ADD:
        ga = gy;
        gb = gy;
        break;
    case TM_P_SUB:
        ga = gy;
        if (g->want[1]) gb = un(c, TM_P_NEG, gy);
        break;
    case TM_P_MUL:
        if (g->want[0]) ga = bin(c, TM_P_MUL, gy, b);
        if (g->want[1]) gb = bin(c, TM_P_MUL, gy, a);
        break;
    case TM_P_DIV:
        if (g->want[0]) ga = bin(c, TM_P_DIV, gy, b);
        if (g->want[1]) gb = un(c, TM_P_NEG, bin(c, TM_P_DIV, bin(c, TM_P_MUL, gy, y), b));
        break;
    case TM_P_POW: {
        /* The exponent may have another dtype (an integer power): it enters the base's
         * derivative cast to the base's dtype, and has a gradient only when float. */
        tm_val bf = tm_cast_exact(c, b, tm_vdtype(c, a));
        tm_val zero = k(c, a, 0.0);
        double e;
        if (g->want[0] && !g->want[1] && constant_scalar(c, b, &e)) {
            /* A constant exponent (the x^2 of a variance): no power where a product does. */
            ga = e == 0 ? TM_NONE
               : e == 1 ? gy
               : e == 2 ? bin(c, TM_P_MUL, gy, bin(c, TM_P_MUL, a, k(c, a, 2.0)))
                        : bin(c, TM_P_MUL, gy, bin(c, TM_P_MUL, k(c, a, e),
                                                   bin(c, TM_P_POW, a, k(c, a, e - 1))));
            if (ga == TM_NONE) return c->status;
            break;
        }
        if (g->want[0]) {
            /* b a^(b-1), taken as 0 where b == 0 (0^-1 would make it NaN at a == 0). */
            tm_val d = bin(c, TM_P_MUL, bf, bin(c, TM_P_POW, a, bin(c, TM_P_SUB, bf, k(c, a, 1.0))));
            d = tm_where(c, bin(c, TM_P_EQ, bf, zero), zero, d);
            ga = bin(c, TM_P_MUL, gy, d);
        }
        if (g->want[1]) {
            /* y log a, taken as 0 where a == 0 and b >= 0 (the limit). */
            tm_val d = bin(c, TM_P_MUL, y, un(c, TM_P_LOG, a));
            tm_val at_zero = bin(c, TM_P_AND, bin(c, TM_P_EQ, a, zero), bin(c, TM_P_GE, bf, zero));
            gb = bin(c, TM_P_MUL, gy, tm_where(c, at_zero, zero, d));
        }
        break;
    }
    case TM_P_MAX: case TM_P_MIN: {
        int cmp = g->prim == TM_P_MAX ? TM_P_GT : TM_P_LT;
        tm_val ties = bin(c, TM_P_EQ, a, b);
        if (g->want[0]) ga = select_share(c, gy, bin(c, cmp, a, b), ties);
        if (g->want[1]) gb = select_share(c, gy, bin(c, cmp, b, a), ties);
        break;
    }
    case TM_P_MOD:
        /* a - b q with q = trunc(a / b) (fmod) or floor(a / b): dq is 0 almost everywhere. */
        ga = gy;
        if (g->want[1]) {
            tm_val q = bin(c, TM_P_DIV, a, b);
            q = g->a->i[0] ? trunc_of(c, q) : un(c, TM_P_FLOOR, q);
            gb = un(c, TM_P_NEG, bin(c, TM_P_MUL, gy, q));
        }
        break;
    default:
        return TM_GRAD_NO_RULE;
    }
    if (g->want[0]) g->gin[0] = tm_grad_sum_like(c, ga, a);
    if (g->want[1]) g->gin[1] = tm_grad_sum_like(c, gb, b);
    return c->status;
}

tm_status tm__grad_where(tm_ctx *c, const tm_grad_call *g) {
    tm_val cond = g->in[0], gy = g->gout[0];
    tm_val zero = tm_grad_scalar(c, gy, 0.0);
    if (g->want[1]) g->gin[1] = tm_grad_sum_like(c, tm_where(c, cond, gy, zero), g->in[1]);
    if (g->want[2]) g->gin[2] = tm_grad_sum_like(c, tm_where(c, cond, zero, gy), g->in[2]);
    return c->status;
}

tm_status tm__grad_cast(tm_ctx *c, const tm_grad_call *g) {
    /* Between differentiable dtypes the gradient is cast back; casts to other dtypes have
     * no differentiable output and never reach here (ctx.c marks them as cuts). */
    g->gin[0] = tm_cast_exact(c, g->gout[0], tm_vdtype(c, g->in[0]));
    return c->status;
}
