/* ai.onnx.preview FlexAttention: softmax(score_mod(Q K^T * scale)) then prob_mod, times
 * V, on rank-4 inputs with grouped KV heads; the modifiers are subgraphs run on the
 * (B, Hq, L, S) tensors. Computed in softmax_precision (f32 for narrower floats). */
#include <math.h>
#include "elementwise.h"

/* Runs a one-in, one-out modifier subgraph on x; it must keep x's shape and dtype. */
static tm_val apply_mod(tm_lower *L, const char *name, tm_val x) {
    tm_ctx *c = tm_lctx(L);
    const tm_graph *g = tm_attr_g(L, name);
    if (!g || x == TM_NONE) return x;
    if (g->n_inputs != 1 || g->n_outputs != 1) {
        tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute %s must take and give one tensor, it "
                 "has %d inputs and %d outputs", name, g->n_inputs, g->n_outputs);
        return TM_NONE;
    }
    tm_oval in, out;
    memset(&in, 0, sizeof in);
    memset(&out, 0, sizeof out);
    in.kind = TM_OV_TENSOR;
    in.v = x;
    if (tm_lower_subgraph(L, g, 1, &in, &out) != TM_OK) return TM_NONE;
    tm_val y = out.kind == TM_OV_TENSOR ? out.v : TM_NONE;
    int r = tm_vrank(c, x);
    if (y == TM_NONE || tm_vrank(c, y) != r || tm_vdtype(c, y) != tm_vdtype(c, x) ||
        memcmp(tm_vdims(c, y), tm_vdims(c, x), (size_t)r * sizeof(int64_t))) {
        tm_lfail(L, TM_ERR_SHAPE, "attribute %s must return a tensor of its input's shape and "
                 "dtype", name);
        return TM_NONE;
    }
    return y;
}

static tm_dtype compute_dtype(tm_lower *L, tm_dtype dt) {
    if (tm_attr_has(L, "softmax_precision")) return (tm_dtype)tm_attr_i(L, "softmax_precision", 0);
    return dt == TM_DOUBLE ? TM_DOUBLE : TM_FLOAT;
}

static tm_status lower_flex_attention(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val q = tm_ew_input(L, 0), k = tm_ew_input(L, 1), v = tm_ew_input(L, 2);
    if (tm_ew_check(L, 0, q, TM_DTS_FLOAT) || tm_ew_same_dtype(L, 0, q, 1, k) ||
        tm_ew_same_dtype(L, 0, q, 2, v))
        return c->status;
    const int64_t *dq = tm_vdims(c, q), *dk = tm_vdims(c, k), *dv = tm_vdims(c, v);
    if (tm_vrank(c, q) != 4 || tm_vrank(c, k) != 4 || tm_vrank(c, v) != 4 || dk[0] != dq[0] ||
        dv[0] != dq[0] || dk[1] != dv[1] || dk[2] != dv[2] || dk[3] != dq[3] || dk[1] < 1 ||
        dq[1] % dk[1])
        return tm_lfail(L, TM_ERR_SHAPE, "Q (B, Hq, L, E), K (B, Hkv, S, E) and V (B, Hkv, S, "
                        "Ev) must be rank 4 with Hq a multiple of Hkv");
    tm_dtype cdt = compute_dtype(L, tm_vdtype(c, q));
    if (cdt != TM_FLOAT && cdt != TM_FLOAT16 && cdt != TM_DOUBLE && cdt != TM_BFLOAT16)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute softmax_precision=%d is not a "
                        "float dtype", (int)cdt);
    int64_t batch = dq[0], hq = dq[1], len = dq[2], hkv = dk[1], span = dk[2];
    double scale = 1.0 / sqrt((double)dq[3]);
    if (tm_attr_has(L, "scale")) scale = tm_attr_f(L, "scale", 0.0f);
    /* Query head h uses KV head h / (Hq / Hkv): view Q as (B, Hkv, group * L, E). */
    int64_t qg[4] = {batch, hkv, hq / hkv * len, dq[3]}, sd[4] = {batch, hq, len, span};
    static const int64_t perm[4] = {0, 1, 3, 2};
    tm_val s = tm_matmul(c, tm_reshape(c, tm_cast(c, q, cdt), 4, qg),
                         tm_transpose(c, tm_cast(c, k, cdt), perm));
    s = tm_mul(c, tm_reshape(c, s, 4, sd), tm_const_scalar(c, cdt, scale));
    s = apply_mod(L, "score_mod", s);
    tm_val p = apply_mod(L, "prob_mod", tm_softmax(c, s, 3, 0));
    int64_t pg[4] = {batch, hkv, hq / hkv * len, span}, yd[4] = {batch, hq, len, dv[3]};
    tm_val y = tm_matmul(c, tm_reshape(c, p, 4, pg), tm_cast(c, v, cdt));
    tm_lout(L, 0, tm_cast(c, tm_reshape(c, y, 4, yd), tm_vdtype(c, v)));
    return c->status;
}

TM_REGISTER_OP("ai.onnx.preview", "FlexAttention", 1, 1, lower_flex_attention);
