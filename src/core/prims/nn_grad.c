/* Gradient rules of the fused nn primitives (rows in nn.def), as fused rules rather than
 * the gradient of a decomposition: softmax y (g - sum(g y)), log-softmax g - e^y sum(g)
 * (one SOFTMAX_GRAD), and layer/RMS norm from the normalised input and the saved
 * statistics (the f32 mean and inverse deviation outputs; recomputed in double for double
 * inputs): one LAYERNORM_GRAD in the float32 case, primitives otherwise. Not kernels. */
#include <string.h>
#include "../autodiff.h"

static tm_val bin(tm_ctx *c, int prim, tm_val a, tm_val b) { return tm_binary(c, prim, a, b); }

tm_status tm__grad_softmax(tm_ctx *c, const tm_grad_call *g) {
    /* SOFTMAX_GRAD: y (g - sum(g y)), or g - e^y sum(g) for log-softmax, in one pass. */
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = g->a->i[0];
    a.i[1] = g->a->i[1];
    g->gin[0] = tm_prim(c, TM_P_SOFTMAX_GRAD, (tm_val[2]){g->out[0], g->gout[0]}, 2, &a);
    return c->status;
}

/* The mean and inverse deviation over the normalised axes, in x's dtype. */
static void layernorm_stats(tm_ctx *c, const tm_grad_call *g, int64_t mask, double count,
                            tm_val *mean, tm_val *inv) {
    tm_val x = g->in[0];
    tm_dtype dt = tm_vdtype(c, x);
    int rms = g->a->i[1] == 1;
    if (dt != TM_DOUBLE) {
        /* The kernel's own statistics (f32, what it normalised with). */
        *mean = rms ? TM_NONE : tm_cast_exact(c, g->out[1], dt);
        *inv = tm_cast_exact(c, g->out[2], dt);
        return;
    }
    /* f32 statistics would cap a double computation at single precision. */
    tm_val n = tm_grad_scalar(c, x, count);
    *mean = rms ? TM_NONE : bin(c, TM_P_DIV, tm_grad_reduce_sum(c, x, mask), n);
    tm_val centred = rms ? x : bin(c, TM_P_SUB, x, *mean);
    tm_val var = bin(c, TM_P_DIV, tm_grad_reduce_sum(c, bin(c, TM_P_MUL, centred, centred), mask), n);
    *inv = tm_unary(c, TM_P_RECIPROCAL,
                    tm_unary(c, TM_P_SQRT, bin(c, TM_P_ADD, var, tm_grad_scalar(c, x, g->a->f[0]))));
}

/* The common case in one primitive (LAYERNORM_GRAD): float32 throughout, scale and bias
 * of the full normalised size, and nothing downstream reading the statistics. */
static int layernorm_grad_fused(tm_ctx *c, const tm_grad_call *g, tm_val x, tm_val scale,
                                tm_val bias, double count) {
    int full = tm_vdtype(c, x) == TM_FLOAT && tm_vdtype(c, scale) == TM_FLOAT &&
               (double)tm_vnumel(c, scale) == count &&
               (bias == TM_NONE || (tm_vdtype(c, bias) == TM_FLOAT && tm_vnumel(c, bias) == tm_vnumel(c, scale) &&
                                    tm_vrank(c, bias) == tm_vrank(c, scale)));
    if (!full || g->gout[0] == TM_NONE || g->gout[1] != TM_NONE || g->gout[2] != TM_NONE) return 0;
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = g->a->i[0];
    a.i[1] = g->a->i[1];
    tm_val in[5] = {x, scale, g->out[1], g->out[2], g->gout[0]}, out[3];
    if (tm_prim_n(c, TM_P_LAYERNORM_GRAD, in, 5, &a, out, 3) != TM_OK) return 1;
    if (g->want[0]) g->gin[0] = out[0];
    if (g->want[1]) g->gin[1] = out[1];
    if (bias != TM_NONE && g->want[2]) {
        int64_t dims[TM_MAX_RANK];
        memcpy(dims, tm_vdims(c, bias), sizeof dims);
        g->gin[2] = tm_reshape(c, out[2], tm_vrank(c, bias), dims);
    }
    return 1;
}

tm_status tm__grad_layernorm(tm_ctx *c, const tm_grad_call *g) {
    tm_val x = g->in[0], scale = g->in[1], bias = g->nin > 2 ? g->in[2] : TM_NONE;
    tm_dtype dt = tm_vdtype(c, x);
    int rank = tm_vrank(c, x), axis = (int)g->a->i[0], rms = g->a->i[1] == 1;
    int64_t mask = 0;
    for (int d = axis; d < rank; d++) mask |= (int64_t)1 << d;
    double count = (double)tm_numel(rank - axis, tm_vdims(c, x) + axis);
    if (layernorm_grad_fused(c, g, x, scale, bias, count)) return c->status;
    tm_val mean, inv;
    layernorm_stats(c, g, mask, count, &mean, &inv);
    tm_val centred = rms ? x : bin(c, TM_P_SUB, x, mean);
    tm_val xhat = bin(c, TM_P_MUL, centred, inv);
    tm_val n = tm_grad_scalar(c, x, count);
    tm_val gy = g->gout[0];
    tm_val gx = TM_NONE;
    if (gy != TM_NONE && g->want[0]) {
        /* dx = inv (gxhat - mean(gxhat) - xhat mean(gxhat xhat)), gxhat = gy scale. */
        tm_val gxhat = bin(c, TM_P_MUL, gy, tm_cast_exact(c, scale, dt));
        tm_val proj = bin(c, TM_P_DIV, tm_grad_reduce_sum(c, bin(c, TM_P_MUL, gxhat, xhat), mask), n);
        tm_val inner = bin(c, TM_P_SUB, gxhat, bin(c, TM_P_MUL, xhat, proj));
        if (!rms)
            inner = bin(c, TM_P_SUB, inner, bin(c, TM_P_DIV, tm_grad_reduce_sum(c, gxhat, mask), n));
        gx = bin(c, TM_P_MUL, inv, inner);
    }
    /* The statistics outputs, when something read them: d mean/dx = 1/N and
     * d inv/dx = -inv^3 (x - mean) / N. */
    if (g->want[0] && !rms && g->gout[1] != TM_NONE) {
        tm_val gm = bin(c, TM_P_DIV, tm_cast_exact(c, g->gout[1], dt), n);
        tm_val term = tm_grad_expand_like(c, gm, x);
        gx = gx == TM_NONE ? term : bin(c, TM_P_ADD, gx, term);
    }
    if (g->want[0] && g->gout[2] != TM_NONE) {
        tm_val inv3 = bin(c, TM_P_MUL, inv, bin(c, TM_P_MUL, inv, inv));
        tm_val term = bin(c, TM_P_MUL, bin(c, TM_P_MUL, tm_cast_exact(c, g->gout[2], dt), inv3),
                          bin(c, TM_P_DIV, centred, tm_grad_scalar(c, x, -count)));
        gx = gx == TM_NONE ? term : bin(c, TM_P_ADD, gx, term);
    }
    if (g->want[0] && gx != TM_NONE) g->gin[0] = gx;
    if (gy != TM_NONE && g->want[1])
        g->gin[1] = tm_cast_exact(c, tm_grad_sum_like(c, bin(c, TM_P_MUL, gy, xhat), scale),
                                  tm_vdtype(c, scale));
    if (gy != TM_NONE && bias != TM_NONE && g->want[2])
        g->gin[2] = tm_cast_exact(c, tm_grad_sum_like(c, gy, bias), tm_vdtype(c, bias));
    return c->status;
}

/* ---- ATTENTION_TRAIN ------------------------------------------------------------------
 * From the probabilities p its forward kept (B, H, Sq, Sk), with every operand in (B, H,
 * S, D): dv = p^T do, dp = do v^T, ds = softmax's backward of dp, then the scale's; dq =
 * ds k, dk = ds^T q; each brought back to its operand's layout; a tracked mask gets ds
 * summed to its dims. The products the unfused attention's rules make, without its
 * forward's score passes. */

/* x in layout 1 (B, S, H, D) as (B, H, S, D); and back (the swap is its own inverse). */
static tm_val swap_heads(tm_ctx *c, tm_val x, int layout) {
    static const int64_t perm[4] = {0, 2, 1, 3};
    return layout ? tm_transpose(c, x, perm) : x;
}

tm_status tm__grad_attention(tm_ctx *c, const tm_grad_call *g) {
    if (g->prim != TM_P_ATTENTION_TRAIN) return TM_GRAD_NO_RULE;
    const tm_args *a = g->a;
    tm_val p = g->out[1], go = g->gout[0], gp = g->gout[1];
    if (go == TM_NONE && gp == TM_NONE) return c->status;
    if (tm_vdims(c, g->in[0])[a->i[0] ? 2 : 1] != tm_vdims(c, g->in[1])[a->i[1] ? 2 : 1])
        return TM_GRAD_NO_RULE;   /* grouped heads: not made while taping */
    if (go != TM_NONE && gp == TM_NONE && !(a->i[4] && g->want[3])) {
        /* The common case in one primitive: heads read where they lie, no transposes. */
        tm_val in[5] = {g->in[0], g->in[1], g->in[2], p, go}, out[3];
        if (tm_prim_n(c, TM_P_ATTENTION_GRAD, in, 5, a, out, 3) != TM_OK) return c->status;
        for (int i = 0; i < 3; i++)
            if (g->want[i]) g->gin[i] = out[i];
        return c->status;
    }
    tm_val q = swap_heads(c, g->in[0], (int)a->i[0]), k = swap_heads(c, g->in[1], (int)a->i[1]);
    tm_val v = swap_heads(c, g->in[2], (int)a->i[2]);
    tm_val dp = TM_NONE;
    if (go != TM_NONE) {
        tm_val dout = swap_heads(c, go, (int)a->i[3]);
        if (g->want[2]) g->gin[2] = swap_heads(c, tm_grad_matmul(c, p, dout, 1, 0), (int)a->i[2]);
        dp = tm_grad_matmul(c, dout, v, 0, 1);
    }
    if (gp != TM_NONE) dp = dp == TM_NONE ? gp : tm_add(c, dp, gp);
    if (!g->want[0] && !g->want[1] && !(a->i[4] && g->want[3])) return c->status;
    tm_args sa;
    memset(&sa, 0, sizeof sa);
    sa.i[0] = 3;
    tm_val ds = tm_prim(c, TM_P_SOFTMAX_GRAD, (tm_val[2]){p, dp}, 2, &sa);
    if (a->i[4] && g->want[3]) g->gin[3] = tm_grad_sum_like(c, ds, g->in[3]);
    if (a->i[5] == 1) ds = tm_mul(c, ds, tm_scalar_like(c, ds, a->f[0]));
    else if (a->i[5] == 2) ds = tm_div(c, ds, tm_scalar_like(c, ds, a->f[0]));
    if (g->want[0]) g->gin[0] = swap_heads(c, tm_grad_matmul(c, ds, k, 0, 0), (int)a->i[0]);
    if (g->want[1]) g->gin[1] = swap_heads(c, tm_grad_matmul(c, ds, q, 1, 0), (int)a->i[1]);
    return c->status;
}
