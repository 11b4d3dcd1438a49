/* CausalConvWithState (opset 27): a depthwise 1-D convolution over the past state (or
 * zeros) followed by the input, with an optional bias and fused SiLU; the last k - 1
 * positions of that sequence are the present state. CONV with group = channels. */
#include "elementwise.h"

static tm_status lower_causal_conv(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0), w = tm_ew_input(L, 1), bias = tm_lin(L, 2);
    tm_val past = tm_lin(L, 3);
    uint32_t dts = TM_DT(TM_FLOAT) | TM_DT(TM_FLOAT16) | TM_DT(TM_BFLOAT16);
    if (tm_ew_check(L, 0, x, dts) || tm_ew_same_dtype(L, 0, x, 1, w) ||
        (bias != TM_NONE && tm_ew_same_dtype(L, 0, x, 2, bias)) ||
        (past != TM_NONE && tm_ew_same_dtype(L, 0, x, 3, past)))
        return c->status;
    const int64_t *dx = tm_vdims(c, x), *dw = tm_vdims(c, w);
    if (tm_vrank(c, x) != 3 || tm_vrank(c, w) != 3 || dw[0] != dx[1] || dw[1] != 1 || dw[2] < 1)
        return tm_lfail(L, TM_ERR_SHAPE, "input 0 must be (batch, channels, length) and input 1 "
                        "(weight) (channels, 1, k)");
    int64_t k = dw[2], carry[3] = {dx[0], dx[1], dw[2] - 1};
    if (bias != TM_NONE && (tm_vrank(c, bias) != 1 || tm_vdims(c, bias)[0] != dx[1]))
        return tm_lfail(L, TM_ERR_SHAPE, "input 2 (bias) must have shape (%lld)",
                        (long long)dx[1]);
    if (past != TM_NONE && (tm_vrank(c, past) != 3 || memcmp(tm_vdims(c, past), carry,
                                                             sizeof carry)))
        return tm_lfail(L, TM_ERR_SHAPE, "input 3 (past_state) must have shape (%lld, %lld, "
                        "%lld)", (long long)carry[0], (long long)carry[1], (long long)carry[2]);
    const char *act = tm_attr_s(L, "activation", "none");
    int silu = !strcmp(act, "silu") || !strcmp(act, "swish");
    if (!silu && strcmp(act, "none"))
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute activation='%s' is not silu, "
                        "swish or none", act);
    if (past == TM_NONE) past = tm_const_fill(c, tm_vdtype(c, x), 3, carry, 0.0);
    tm_val parts[2] = {past, x};
    tm_val padded = tm_concat(c, parts, 2, 2);                     /* (B, C, k - 1 + L) */
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 1;
    a.i[1] = dx[1];
    a.i[2] = 1;
    a.i[5] = 1;
    tm_val in[3] = {padded, w, bias};
    tm_val y = tm_prim(c, TM_P_CONV, in, bias != TM_NONE ? 3 : 2, &a);
    if (silu) {
        /* SiLU in f32, as the function body computes it for narrow floats. */
        tm_val yf = tm_cast(c, y, TM_FLOAT);
        y = tm_cast(c, tm_mul(c, yf, tm_unary(c, TM_P_SIGMOID, yf)), tm_vdtype(c, x));
    }
    tm_lout(L, 0, y);
    tm_lout(L, 1, tm_slice_axis(c, padded, 2, dx[2], k - 1));
    return c->status;
}

TM_REGISTER_OP("", "CausalConvWithState", 27, 27, lower_causal_conv);
