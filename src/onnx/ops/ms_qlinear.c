/* com.microsoft 8-bit QLinearAdd/Mul/Concat/Sigmoid/LeakyRelu/GlobalAveragePool/
 * AveragePool/Softmax, with ONNX Runtime's CPU arithmetic (so results match to the step).
 * Not QLinearMatMul/QLinearConv (ai.onnx, matmul.c/conv.c). */
#include <float.h>
#include <math.h>
#include "quant.h"
#include "window.h"

#define Q8_DTS (TM_DT(TM_INT8) | TM_DT(TM_UINT8))

/* Per-tensor scale (input `index`) as an f32 scalar. */
static tm_val q_scale(tm_lower *L, int index) {
    tm_ctx *c = tm_lctx(L);
    tm_val s = tm_ew_input(L, index);
    if (s == TM_NONE || tm_ew_check(L, index, s, TM_DTS_FLOAT)) return TM_NONE;
    if (tm_vnumel(c, s) != 1) {
        tm_lfail(L, TM_ERR_SHAPE, "input %d ('%s') must be a per-tensor scalar scale", index,
                 tm_lnode(L)->inputs[index]);
        return TM_NONE;
    }
    return tm_cast(c, tm_reshape(c, s, 0, NULL), TM_FLOAT);
}

/* Per-tensor zero point (input `index`, optional: 0) as an f32 scalar; it must share
 * x's dtype. */
static tm_val q_zero(tm_lower *L, int index, tm_val x, int x_index) {
    tm_ctx *c = tm_lctx(L);
    tm_val z = tm_lin(L, index);
    if (z == TM_NONE) return tm_ctx_ok(c) ? tm_const_scalar(c, TM_FLOAT, 0.0) : TM_NONE;
    if (tm_ew_same_dtype(L, x_index, x, index, z)) return TM_NONE;
    if (tm_vnumel(c, z) != 1) {
        tm_lfail(L, TM_ERR_SHAPE, "input %d ('%s') must be a per-tensor scalar zero point",
                 index, tm_lnode(L)->inputs[index]);
        return TM_NONE;
    }
    return tm_cast(c, tm_reshape(c, z, 0, NULL), TM_FLOAT);
}

/* x - zero point, exactly, as f32. */
static tm_val q_centered(tm_ctx *c, tm_val x, tm_val zp) {
    return tm_sub(c, tm_cast(c, x, TM_FLOAT), zp);
}

/* round-half-even(v) + zp, saturated to dt. */
static tm_val q_out(tm_ctx *c, tm_val v, tm_val zp, tm_dtype dt) {
    return tm_q_store(c, v, zp, dt, 1);
}

/* value / y_scale quantized with y_zero_point: ONNX Runtime's MlasQuantizeLinear. */
static tm_val q_quantize(tm_ctx *c, tm_val v, tm_val y_scale, tm_val y_zp, tm_dtype dt) {
    return q_out(c, tm_div(c, v, y_scale), y_zp, dt);
}

/* QLinearAdd: (a - za) * (sa / sc) + (b - zb) * (sb / sc), rounded, + zc.
 * QLinearMul: (a - za)(b - zb) * (sa * sb / sc), rounded, + zc. */
static tm_status lower_qlinear_binary(tm_lower *L, int mul) {
    tm_ctx *c = tm_lctx(L);
    tm_val a = tm_ew_input(L, 0), b = tm_ew_input(L, 3);
    if (tm_ew_check(L, 0, a, Q8_DTS) || tm_ew_check(L, 3, b, Q8_DTS) ||
        tm_ew_same_dtype(L, 0, a, 3, b))
        return c->status;
    tm_val sa = q_scale(L, 1), sb = q_scale(L, 4), sc = q_scale(L, 6);
    tm_val za = q_zero(L, 2, a, 0), zb = q_zero(L, 5, b, 3), zc = q_zero(L, 7, a, 0);
    if (!tm_ctx_ok(c)) return c->status;
    tm_val va = q_centered(c, a, za), vb = q_centered(c, b, zb), v;
    if (mul) {
        v = tm_mul(c, tm_mul(c, va, vb), tm_div(c, tm_mul(c, sa, sb), sc));
    } else {
        v = tm_add(c, tm_mul(c, va, tm_div(c, sa, sc)), tm_mul(c, vb, tm_div(c, sb, sc)));
    }
    tm_lout(L, 0, q_out(c, v, zc, tm_vdtype(c, a)));
    return c->status;
}

static tm_status lower_qlinear_add(tm_lower *L) { return lower_qlinear_binary(L, 0); }
static tm_status lower_qlinear_mul(tm_lower *L) { return lower_qlinear_binary(L, 1); }

/* QLinearConcat: inputs Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) triples;
 * each X is requantized into Y's parameters, then all are joined along `axis`. */
static tm_status lower_qlinear_concat(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    int n = tm_lnin(L);
    if (n < 5 || (n - 2) % 3)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "%d inputs: QLinearConcat takes Y_scale, "
                        "Y_zero_point and (tensor, scale, zero point) triples", n);
    if (!tm_attr_has(L, "axis"))
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute axis is required");
    tm_val yzp_raw = tm_ew_input(L, 1);
    if (tm_ew_check(L, 1, yzp_raw, Q8_DTS)) return c->status;
    tm_dtype dt = tm_vdtype(c, yzp_raw);
    tm_val ys = q_scale(L, 0), yzp = q_zero(L, 1, yzp_raw, 1);
    int count = (n - 2) / 3;
    tm_val parts[64];
    if (count > 64) return tm_lfail(L, TM_ERR_UNSUPPORTED, "%d inputs to concatenate", count);
    for (int i = 0; i < count; i++) {
        int xi = 2 + 3 * i;
        tm_val x = tm_ew_input(L, xi);
        if (tm_ew_check(L, xi, x, TM_DT(dt))) return c->status;
        tm_val xs = q_scale(L, xi + 1), xz = q_zero(L, xi + 2, x, xi);
        parts[i] = q_quantize(c, tm_mul(c, q_centered(c, x, xz), xs), ys, yzp, dt);
    }
    if (!tm_ctx_ok(c)) return c->status;
    int rank = tm_vrank(c, parts[0]);
    int axis = tm_norm_axis(c, tm_attr_i(L, "axis", 0), rank);
    tm_lout(L, 0, tm_concat(c, parts, count, axis));
    return c->status;
}

/* f applied on dequantized values, then quantized into Y: the table ONNX Runtime
 * builds for QLinearSigmoid / QLinearLeakyRelu, computed per element. */
static tm_status lower_qlinear_unary(tm_lower *L, int leaky) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    if (tm_ew_check(L, 0, x, Q8_DTS)) return c->status;
    tm_val xs = q_scale(L, 1), xz = q_zero(L, 2, x, 0);
    tm_val ys = q_scale(L, 3), yz = q_zero(L, 4, x, 0);
    if (!tm_ctx_ok(c)) return c->status;
    tm_val v = tm_mul(c, q_centered(c, x, xz), xs);
    if (leaky) {
        double alpha = tm_attr_f(L, "alpha", 0.01f);
        tm_val neg = tm_binary(c, TM_P_LT, v, tm_const_scalar(c, TM_FLOAT, 0.0));
        v = tm_where(c, neg, tm_mul(c, v, tm_const_scalar(c, TM_FLOAT, alpha)), v);
    } else {
        v = tm_unary(c, TM_P_SIGMOID, v);
    }
    tm_lout(L, 0, q_quantize(c, v, ys, yz, tm_vdtype(c, x)));
    return c->status;
}

static tm_status lower_qlinear_sigmoid(tm_lower *L) { return lower_qlinear_unary(L, 0); }
static tm_status lower_qlinear_leaky_relu(tm_lower *L) { return lower_qlinear_unary(L, 1); }

/* x (N, C, spatial...) or, with channels_last, (N, spatial..., C) -> channels first. */
static tm_val to_channels_first(tm_ctx *c, tm_val x, int r) {
    int64_t perm[TM_MAX_RANK];
    perm[0] = 0;
    perm[1] = r - 1;
    for (int d = 2; d < r; d++) perm[d] = d - 1;
    return tm_transpose(c, x, perm);
}

static tm_val to_channels_last(tm_ctx *c, tm_val x, int r) {
    int64_t perm[TM_MAX_RANK];
    perm[0] = 0;
    for (int d = 1; d < r - 1; d++) perm[d] = d + 1;
    perm[r - 1] = 1;
    return tm_transpose(c, x, perm);
}

/* QLinearGlobalAveragePool: (sum(x) - zx * count) * (sx / (sy * count)), rounded, + zy,
 * as MlasQLinearGlobalAveragePool. */
static tm_status lower_qlinear_global_average_pool(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    if (tm_ew_check(L, 0, x, Q8_DTS)) return c->status;
    int r = tm_vrank(c, x);
    if (r < 3) return tm_lfail(L, TM_ERR_SHAPE, "input 0 has rank %d, expected >= 3", r);
    tm_val xs = q_scale(L, 1), xz = q_zero(L, 2, x, 0), ys = q_scale(L, 3), yz = q_zero(L, 4, x, 0);
    if (!tm_ctx_ok(c)) return c->status;
    int last = tm_attr_i(L, "channels_last", 0) != 0;
    if (last) x = to_channels_first(c, x, r);
    int64_t axes[TM_MAX_RANK], count = 1;
    for (int d = 2; d < r; d++) {
        axes[d - 2] = d;
        count *= tm_vdims(c, x)[d];
    }
    tm_val sum = tm_reduce(c, TM_P_REDUCE_SUM, tm_cast(c, x, TM_INT32), axes, r - 2, 1);
    tm_val cnt = tm_const_scalar(c, TM_FLOAT, (double)count);
    tm_val acc = tm_sub(c, tm_cast(c, sum, TM_FLOAT), tm_mul(c, xz, cnt));
    tm_val y = q_out(c, tm_mul(c, acc, tm_div(c, xs, tm_mul(c, ys, cnt))), yz, tm_vdtype(c, x));
    tm_lout(L, 0, last ? to_channels_last(c, y, r) : y);
    return c->status;
}

/* QLinearAveragePool: dequantize, average in float32, quantize. */
static tm_status lower_qlinear_average_pool(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    if (tm_ew_check(L, 0, x, Q8_DTS)) return c->status;
    int r = tm_vrank(c, x);
    if (r < 3) return tm_lfail(L, TM_ERR_SHAPE, "input 0 has rank %d, expected >= 3", r);
    tm_val xs = q_scale(L, 1), xz = q_zero(L, 2, x, 0), ys = q_scale(L, 3), yz = q_zero(L, 4, x, 0);
    if (!tm_ctx_ok(c)) return c->status;
    tm_dtype dt = tm_vdtype(c, x);
    int last = tm_attr_i(L, "channels_last", 0) != 0;
    tm_val v = tm_mul(c, q_centered(c, x, xz), xs);
    if (last) v = to_channels_first(c, v, r);
    int n = r - 2;
    tm_window win;
    if (!tm_ctx_ok(c) || tm_win_read(L, n, tm_vdims(c, v) + 2, NULL, &win)) return c->status;
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = n;
    a.i[1] = 1;
    a.i[2] = tm_attr_i(L, "count_include_pad", 0) != 0;
    a.i[3] = tm_attr_i(L, "ceil_mode", 0) != 0;
    for (int d = 0; d < n; d++) {
        a.i[5 + d] = win.kernel[d];
        a.i[5 + n + d] = win.stride[d];
        a.i[5 + 2 * n + d] = win.pad_begin[d];
        a.i[5 + 3 * n + d] = win.pad_end[d];
        a.i[5 + 4 * n + d] = 1;
    }
    /* This kernel adds the zero point before rounding (ties fall differently). */
    tm_val avg = tm_prim(c, TM_P_POOL, &v, 1, &a);
    tm_val y = q_out(c, tm_add(c, tm_div(c, avg, ys), yz), TM_NONE, dt);
    tm_lout(L, 0, last ? to_channels_last(c, y, r) : y);
    return c->status;
}

/* QLinearSoftmax as ONNX Runtime computes it: e = exp((x - max + shift) * x_scale) with
 * shift = max(0, log(FLT_MAX / D) - 5) / x_scale (so that sums stay finite), then
 * round(e * floor(1 / y_scale) / sum(e)) + y_zero_point. The input zero point cancels.
 * Opsets before 13 normalise over all axes from `axis` on. */
static tm_status lower_qlinear_softmax(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    if (tm_ew_check(L, 0, x, Q8_DTS)) return c->status;
    if (!tm_attr_has(L, "opset"))
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute opset is required");
    int64_t opset = tm_attr_i(L, "opset", 13);
    int r = tm_vrank(c, x);
    int axis = tm_norm_axis(c, tm_attr_i(L, "axis", opset < 13 ? 1 : -1), r);
    tm_val xs = q_scale(L, 1), ys = q_scale(L, 3);
    tm_val yz_raw = tm_ew_input(L, 4);
    if (!tm_ctx_ok(c) || tm_ew_same_dtype(L, 0, x, 4, yz_raw)) return c->status;
    tm_val yz = q_zero(L, 4, x, 0);
    tm_dtype dt = tm_vdtype(c, x);
    int64_t xd[TM_MAX_RANK];
    memcpy(xd, tm_vdims(c, x), (size_t)r * sizeof *xd);
    tm_val v = tm_cast(c, x, TM_INT32);
    int64_t reduce = 1, dims[2] = {1, 1};
    if (opset < 13) {
        for (int d = 0; d < r; d++) dims[d >= axis] *= xd[d];
        reduce = dims[1];
        v = tm_reshape(c, v, 2, dims);
    } else {
        reduce = xd[axis];
    }
    int ax = opset < 13 ? 1 : axis;
    int64_t ax64 = ax;
    double shift = log(FLT_MAX / (double)reduce) - 5.0;
    if (shift < 0) shift = 0;
    tm_val d = tm_cast(c, tm_sub(c, v, tm_reduce(c, TM_P_REDUCE_MAX, v, &ax64, 1, 1)), TM_DOUBLE);
    tm_val xs64 = tm_cast(c, xs, TM_DOUBLE);
    tm_val e = tm_add(c, d, tm_div(c, tm_const_scalar(c, TM_DOUBLE, shift), xs64));
    e = tm_cast(c, tm_unary(c, TM_P_EXP, tm_mul(c, e, xs64)), TM_FLOAT);
    tm_val sum = tm_reduce(c, TM_P_REDUCE_SUM, e, &ax64, 1, 1);
    tm_val yscale = tm_unary(c, TM_P_FLOOR, tm_div(c, tm_const_scalar(c, TM_FLOAT, 1.0), ys));
    tm_val q = tm_unary(c, TM_P_ROUND, tm_div(c, tm_mul(c, e, yscale), sum));
    q = tm_add(c, tm_cast(c, q, TM_INT32), tm_cast(c, yz, TM_INT32));
    /* The kernel only caps at 255 and then narrows (int8 wraps), as reproduced here. */
    q = tm_binary(c, TM_P_MIN, q, tm_const_scalar(c, TM_INT32, 255.0));
    if (dt == TM_INT8) {
        tm_val low = tm_binary(c, TM_P_BITAND, q, tm_const_scalar(c, TM_INT32, 255.0));
        tm_val high = tm_binary(c, TM_P_GE, low, tm_const_scalar(c, TM_INT32, 128.0));
        q = tm_where(c, high, tm_sub(c, low, tm_const_scalar(c, TM_INT32, 256.0)), low);
    }
    q = tm_cast(c, q, dt);
    tm_lout(L, 0, opset < 13 ? tm_reshape(c, q, r, xd) : q);
    return c->status;
}

TM_REGISTER_OP("com.microsoft", "QLinearAdd", 1, 1, lower_qlinear_add);
TM_REGISTER_OP("com.microsoft", "QLinearMul", 1, 1, lower_qlinear_mul);
TM_REGISTER_OP("com.microsoft", "QLinearConcat", 1, 1, lower_qlinear_concat);
TM_REGISTER_OP("com.microsoft", "QLinearSigmoid", 1, 1, lower_qlinear_sigmoid);
TM_REGISTER_OP("com.microsoft", "QLinearLeakyRelu", 1, 1, lower_qlinear_leaky_relu);
TM_REGISTER_OP("com.microsoft", "QLinearGlobalAveragePool", 1, 1, lower_qlinear_global_average_pool);
TM_REGISTER_OP("com.microsoft", "QLinearAveragePool", 1, 1, lower_qlinear_average_pool);
TM_REGISTER_OP("com.microsoft", "QLinearSoftmax", 1, 1, lower_qlinear_softmax);
