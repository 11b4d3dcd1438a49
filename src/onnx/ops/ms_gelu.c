/* com.microsoft GELU family and bias fusions: Gelu, FastGelu (tanh form), BiasGelu,
 * QuickGelu, GemmFastGelu, BiasAdd and BiasSplitGelu, over the GELU primitive and
 * elementwise ops. Not ai.onnx Gelu (activation.c). */
#include "contrib.h"

#define GELU_DTS TM_DTS_FLOAT

static tm_val gelu(tm_ctx *c, tm_val x, int tanh_form) {
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = tanh_form;
    return tm_prim(c, TM_P_GELU, &x, 1, &a);
}

/* x + bias, bias a vector along x's last axis. */
static tm_val add_bias(tm_lower *L, tm_val x, int index) {
    tm_ctx *c = tm_lctx(L);
    tm_val b = tm_ms_optional(L, index, GELU_DTS);
    if (b == TM_NONE || !tm_ctx_ok(c)) return x;
    if (tm_ew_same_dtype(L, 0, x, index, b) ||
        tm_ms_check_shape(L, index, b, 1, tm_vdims(c, x)[tm_vrank(c, x) - 1]))
        return TM_NONE;
    return tm_add(c, x, b);
}

static tm_status lower_gelu(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_lout(L, 0, gelu(c, tm_ms_input(L, 0, GELU_DTS), 0));
    return c->status;
}

static tm_status lower_fast_gelu(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ms_input(L, 0, GELU_DTS);
    if (x == TM_NONE) return c->status;
    tm_lout(L, 0, gelu(c, add_bias(L, x, 1), 1));
    return c->status;
}

static tm_status lower_bias_gelu(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ms_input(L, 0, GELU_DTS);
    if (x == TM_NONE || tm_ew_input(L, 1) == TM_NONE) return c->status;
    tm_lout(L, 0, gelu(c, add_bias(L, x, 1), 0));
    return c->status;
}

/* x * sigmoid(alpha * x); ONNX Runtime's alpha defaults to 1.702. */
static tm_status lower_quick_gelu(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ms_input(L, 0, GELU_DTS);
    if (x == TM_NONE) return c->status;
    double alpha = tm_attr_f(L, "alpha", 1.702f);
    tm_val s = tm_unary(c, TM_P_SIGMOID, tm_mul(c, x, tm_scalar_like(c, x, alpha)));
    tm_lout(L, 0, tm_mul(c, x, s));
    return c->status;
}

static tm_status lower_gemm_fast_gelu(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ms_input(L, 0, GELU_DTS), w = tm_ms_input(L, 1, GELU_DTS);
    if (x == TM_NONE || w == TM_NONE || tm_ew_same_dtype(L, 0, x, 1, w)) return c->status;
    tm_val y = tm_matmul(c, x, w);
    if (!tm_ctx_ok(c)) return c->status;
    tm_lout(L, 0, gelu(c, add_bias(L, y, 2), 1));
    return c->status;
}

/* X (N, S, C) + bias (C) + skip (N, S, C). */
static tm_status lower_bias_add(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    uint32_t dts = TM_DT(TM_FLOAT) | TM_DT(TM_FLOAT16);
    tm_val x = tm_ms_input(L, 0, dts), skip = tm_ms_input(L, 2, dts);
    if (x == TM_NONE || skip == TM_NONE || tm_ew_same_dtype(L, 0, x, 2, skip) ||
        tm_ew_input(L, 1) == TM_NONE)
        return c->status;
    if (tm_ms_check_shape(L, 0, x, 3, -1) || tm_ms_check_shape(L, 2, skip, 3, -1))
        return c->status;
    tm_lout(L, 0, tm_add(c, add_bias(L, x, 1), skip));
    return c->status;
}

/* (X + bias) split in halves along D: left * gelu(right), gelu in its erf form. */
static tm_status lower_bias_split_gelu(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    uint32_t dts = TM_DT(TM_FLOAT) | TM_DT(TM_FLOAT16);
    tm_val x = tm_ms_input(L, 0, dts);
    if (x == TM_NONE || tm_ew_input(L, 1) == TM_NONE || tm_ms_check_shape(L, 0, x, 3, -1))
        return c->status;
    int64_t d = tm_vdims(c, x)[2];
    if (d % 2)
        return tm_lfail(L, TM_ERR_SHAPE, "input 0 has an odd hidden size %lld", (long long)d);
    x = add_bias(L, x, 1);
    tm_val left = tm_slice_axis(c, x, 2, 0, d / 2), right = tm_slice_axis(c, x, 2, d / 2, d / 2);
    tm_lout(L, 0, tm_mul(c, left, gelu(c, right, 0)));
    return c->status;
}

TM_REGISTER_OP("com.microsoft", "Gelu", 1, 1, lower_gelu);
TM_REGISTER_OP("com.microsoft", "FastGelu", 1, 1, lower_fast_gelu);
TM_REGISTER_OP("com.microsoft", "BiasGelu", 1, 1, lower_bias_gelu);
TM_REGISTER_OP("com.microsoft", "QuickGelu", 1, 1, lower_quick_gelu);
TM_REGISTER_OP("com.microsoft", "GemmFastGelu", 1, 1, lower_gemm_fast_gelu);
TM_REGISTER_OP("com.microsoft", "BiasAdd", 1, 1, lower_bias_add);
TM_REGISTER_OP("com.microsoft", "BiasSplitGelu", 1, 1, lower_bias_split_gelu);
