/* Activation functions: Relu, Sigmoid and Gelu as primitives; LeakyRelu, PRelu, Elu,
 * Selu, Celu, ThresholdedRelu, HardSigmoid, HardSwish, Softplus, Softsign, Mish, Shrink
 * and Swish composed of elementwise primitives (where-based, so gradients follow).
 * Not Softmax and friends (a fused primitive of their own). */
#include "elementwise.h"

/* Composites of several steps run in f32 for f16/bf16 inputs: one rounding at the end
 * rather than one per step. */
static tm_val widen(tm_ctx *c, tm_val x) {
    if (x == TM_NONE) return TM_NONE;
    tm_dtype dt = tm_vdtype(c, x);
    return dt == TM_FLOAT16 || dt == TM_BFLOAT16 ? tm_cast(c, x, TM_FLOAT) : x;
}

static tm_val scalar(tm_ctx *c, tm_val like, double v) { return tm_scalar_like(c, like, v); }

/* Reads input 0 (checked against `allowed`) widened for computing; *dt gets its dtype. */
static tm_val float_input(tm_lower *L, uint32_t allowed, tm_dtype *dt) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    if (tm_ew_check(L, 0, x, allowed)) return TM_NONE;
    *dt = tm_vdtype(c, x);
    return widen(c, x);
}

static tm_status lower_relu(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT | TM_DTS_SINT)) return c->status;
    tm_lout(L, 0, tm_unary(c, TM_P_RELU, x));
    return c->status;
}
TM_REGISTER_OP("", "Relu", 1, 27, lower_relu);

static tm_status lower_sigmoid(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT)) return c->status;
    tm_lout(L, 0, tm_unary(c, TM_P_SIGMOID, x));
    return c->status;
}
TM_REGISTER_OP("", "Sigmoid", 1, 27, lower_sigmoid);

static tm_status lower_gelu(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT)) return c->status;
    const char *approximate = tm_attr_s(L, "approximate", "none");
    if (strcmp(approximate, "none") && strcmp(approximate, "tanh"))
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute approximate='%s' must be "
                        "\"none\" or \"tanh\"", approximate);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = !strcmp(approximate, "tanh");
    tm_lout(L, 0, tm_prim(c, TM_P_GELU, &x, 1, &a));
    return c->status;
}
TM_REGISTER_OP("", "Gelu", 20, 27, lower_gelu);

/* x < 0 ? x * slope : x, slope broadcasting to x. */
static tm_val leaky(tm_ctx *c, tm_val x, tm_val slope) {
    tm_val negative = tm_binary(c, TM_P_LT, x, scalar(c, x, 0));
    return tm_where(c, negative, tm_mul(c, x, slope), x);
}

static tm_status lower_leaky_relu(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT)) return c->status;
    tm_lout(L, 0, leaky(c, x, scalar(c, x, tm_attr_f(L, "alpha", 0.01f))));
    return c->status;
}
TM_REGISTER_OP("", "LeakyRelu", 1, 27, lower_leaky_relu);

/* Before opset 7 a 1-D slope of x's channel count applies per channel (axis 1); from 7
 * on the slope broadcasts numpy-style, one way: towards x's shape. */
static tm_status lower_prelu(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0), slope = tm_ew_input(L, 1);
    if (tm_ew_check(L, 0, x, TM_DTS_NUMERIC) || tm_ew_same_dtype(L, 0, x, 1, slope))
        return c->status;
    int rx = tm_vrank(c, x), rs = tm_vrank(c, slope);
    const int64_t *dx = tm_vdims(c, x), *ds = tm_vdims(c, slope);
    if (tm_lopset(L) < 7 && rs == 1 && rx >= 2 && ds[0] == dx[1] && ds[0] != 1) {
        int64_t dims[TM_MAX_RANK];
        for (int d = 0; d < rx; d++) dims[d] = d == 1 ? ds[0] : 1;
        slope = tm_reshape(c, slope, rx, dims);
        rs = rx;
        ds = tm_vdims(c, slope);
    }
    for (int d = 0; d < rs; d++) {
        int64_t target = rs <= rx ? dx[rx - rs + d] : -1;
        if (ds[d] != 1 && ds[d] != target)
            return tm_lfail(L, TM_ERR_SHAPE, "input 1 (slope) dim %d is %lld, which does not "
                            "broadcast to input 0's shape", d, (long long)ds[d]);
    }
    if (rs > rx && tm_vnumel(c, slope) == 1) slope = tm_reshape(c, slope, 0, NULL);
    tm_lout(L, 0, leaky(c, x, slope));
    return c->status;
}
TM_REGISTER_OP("", "PRelu", 1, 27, lower_prelu);

/* alpha * (exp(x) - 1) for x < 0, else x. */
static tm_val elu(tm_ctx *c, tm_val x, double alpha) {
    tm_val expm1 = tm_sub(c, tm_unary(c, TM_P_EXP, x), scalar(c, x, 1));
    tm_val negative = tm_binary(c, TM_P_LT, x, scalar(c, x, 0));
    return tm_where(c, negative, tm_mul(c, expm1, scalar(c, x, alpha)), x);
}

static tm_status lower_elu(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_dtype dt = TM_FLOAT;
    tm_val x = float_input(L, TM_DTS_FLOAT, &dt);
    tm_lout(L, 0, tm_cast(c, elu(c, x, tm_attr_f(L, "alpha", 1.0f)), dt));
    return c->status;
}
/* Opset 28 (ONNX main) adds no new version of Elu, Mul, Div, CastLike, Constant or Swish;
 * Celu-28 only widens its types to float16/bfloat16, which this lowering already takes. */
TM_REGISTER_OP("", "Elu", 1, 28, lower_elu);

/* gamma * (alpha * exp(x) - alpha) for x <= 0, gamma * x otherwise. */
static tm_status lower_selu(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_dtype dt = TM_FLOAT;
    tm_val x = float_input(L, TM_DTS_FLOAT, &dt);
    double alpha = tm_attr_f(L, "alpha", 1.67326319217681884765625f);
    double gamma = tm_attr_f(L, "gamma", 1.05070102214813232421875f);
    tm_val expm1 = tm_sub(c, tm_unary(c, TM_P_EXP, x), scalar(c, x, 1));
    tm_val nonpositive = tm_binary(c, TM_P_LE, x, scalar(c, x, 0));
    tm_val y = tm_where(c, nonpositive, tm_mul(c, expm1, scalar(c, x, alpha)), x);
    tm_lout(L, 0, tm_cast(c, tm_mul(c, y, scalar(c, x, gamma)), dt));
    return c->status;
}
TM_REGISTER_OP("", "Selu", 1, 27, lower_selu);

/* max(0, x) + min(0, alpha * (exp(x / alpha) - 1)). */
static tm_status lower_celu(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_dtype dt = TM_FLOAT;
    tm_val x = float_input(L, TM_DTS_FLOAT, &dt);
    double alpha = tm_attr_f(L, "alpha", 1.0f);
    if (alpha == 0.0) return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute alpha must not be 0");
    tm_val scaled = tm_div(c, x, scalar(c, x, alpha));
    tm_val expm1 = tm_sub(c, tm_unary(c, TM_P_EXP, scaled), scalar(c, x, 1));
    tm_val negative = tm_binary(c, TM_P_MIN, tm_mul(c, expm1, scalar(c, x, alpha)),
                                scalar(c, x, 0));
    tm_val y = tm_add(c, tm_unary(c, TM_P_RELU, x), negative);
    tm_lout(L, 0, tm_cast(c, y, dt));
    return c->status;
}
TM_REGISTER_OP("", "Celu", 12, 28, lower_celu);

static tm_status lower_thresholded_relu(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT)) return c->status;
    tm_val above = tm_binary(c, TM_P_GT, x, scalar(c, x, tm_attr_f(L, "alpha", 1.0f)));
    tm_lout(L, 0, tm_where(c, above, x, scalar(c, x, 0)));
    return c->status;
}
TM_REGISTER_OP("", "ThresholdedRelu", 10, 27, lower_thresholded_relu);

/* max(0, min(1, alpha * x + beta)). */
static tm_val hard_sigmoid(tm_ctx *c, tm_val x, double alpha, double beta) {
    tm_val lin = tm_add(c, tm_mul(c, x, scalar(c, x, alpha)), scalar(c, x, beta));
    tm_val upper = tm_binary(c, TM_P_MIN, lin, scalar(c, x, 1));
    return tm_binary(c, TM_P_MAX, upper, scalar(c, x, 0));
}

static tm_status lower_hard_sigmoid(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_dtype dt = TM_FLOAT;
    tm_val x = float_input(L, TM_DTS_FLOAT, &dt);
    double alpha = tm_attr_f(L, "alpha", 0.2f), beta = tm_attr_f(L, "beta", 0.5f);
    tm_lout(L, 0, tm_cast(c, hard_sigmoid(c, x, alpha, beta), dt));
    return c->status;
}
TM_REGISTER_OP("", "HardSigmoid", 1, 27, lower_hard_sigmoid);

static tm_status lower_hard_swish(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_dtype dt = TM_FLOAT;
    tm_val x = float_input(L, TM_DTS_FLOAT, &dt);
    tm_val y = tm_mul(c, x, hard_sigmoid(c, x, 1.0 / 6.0, 0.5));
    tm_lout(L, 0, tm_cast(c, y, dt));
    return c->status;
}
TM_REGISTER_OP("", "HardSwish", 14, 27, lower_hard_swish);

/* log(1 + exp(x)) as max(x, 0) + log(1 + exp(-|x|)): exp never overflows. */
static tm_val softplus(tm_ctx *c, tm_val x) {
    tm_val e = tm_unary(c, TM_P_EXP, tm_unary(c, TM_P_NEG, tm_unary(c, TM_P_ABS, x)));
    tm_val tail = tm_unary(c, TM_P_LOG, tm_add(c, e, scalar(c, x, 1)));
    return tm_add(c, tm_unary(c, TM_P_RELU, x), tail);
}

static tm_status lower_softplus(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_dtype dt = TM_FLOAT;
    tm_val x = float_input(L, TM_DTS_FLOAT, &dt);
    tm_lout(L, 0, tm_cast(c, softplus(c, x), dt));
    return c->status;
}
TM_REGISTER_OP("", "Softplus", 1, 27, lower_softplus);

static tm_status lower_softsign(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_dtype dt = TM_FLOAT;
    tm_val x = float_input(L, TM_DTS_FLOAT, &dt);
    tm_val y = tm_div(c, x, tm_add(c, tm_unary(c, TM_P_ABS, x), scalar(c, x, 1)));
    tm_lout(L, 0, tm_cast(c, y, dt));
    return c->status;
}
TM_REGISTER_OP("", "Softsign", 1, 27, lower_softsign);

static tm_status lower_mish(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_dtype dt = TM_FLOAT;
    tm_val x = float_input(L, TM_DTS_FLOAT, &dt);
    tm_val y = tm_mul(c, x, tm_unary(c, TM_P_TANH, softplus(c, x)));
    tm_lout(L, 0, tm_cast(c, y, dt));
    return c->status;
}
TM_REGISTER_OP("", "Mish", 18, 27, lower_mish);

/* x * sigmoid(alpha * x). */
static tm_status lower_swish(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_dtype dt = TM_FLOAT;
    tm_val x = float_input(L, TM_DTS_FLOAT, &dt);
    double alpha = tm_attr_f(L, "alpha", 1.0f);
    tm_val scaled = alpha == 1.0 ? x : tm_mul(c, x, scalar(c, x, alpha));
    tm_lout(L, 0, tm_cast(c, tm_mul(c, x, tm_unary(c, TM_P_SIGMOID, scaled)), dt));
    return c->status;
}
TM_REGISTER_OP("", "Swish", 24, 28, lower_swish);

/* x < -lambd ? x + bias : x > lambd ? x - bias : 0. Integers compare and shift in double
 * and truncate back, as the float attributes promote them. */
static tm_status lower_shrink(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    if (tm_ew_check(L, 0, x, TM_DTS_NUMERIC)) return c->status;
    tm_dtype dt = tm_vdtype(c, x);
    if (!tm_dtype_is_float(dt)) x = tm_cast(c, x, TM_DOUBLE);
    double lambd = tm_attr_f(L, "lambd", 0.5f), bias = tm_attr_f(L, "bias", 0.0f);
    tm_val below = tm_binary(c, TM_P_LT, x, scalar(c, x, -lambd));
    tm_val above = tm_binary(c, TM_P_GT, x, scalar(c, x, lambd));
    tm_val y = tm_where(c, above, tm_sub(c, x, scalar(c, x, bias)), scalar(c, x, 0));
    y = tm_where(c, below, tm_add(c, x, scalar(c, x, bias)), y);
    tm_lout(L, 0, tm_cast(c, y, dt));
    return c->status;
}
TM_REGISTER_OP("", "Shrink", 9, 27, lower_shrink);
