/* com.microsoft DynamicQuantizeMatMul, MatMulIntegerToFloat, MatMulBnb4 (FP4/NF4) and
 * QuantizeLinear/DequantizeLinear; integer products are exact (MATMUL_INTEGER for a 2-D
 * B, else MATMUL on int32).
 * Not MatMulNBits (matmul_nbits.c) nor the QLinear elementwise ops (ms_qlinear.c). */
#include "quant.h"

#define Q8_DTS (TM_DT(TM_INT8) | TM_DT(TM_UINT8))

/* An 8-bit operand minus its zero point, as int32. zp is a scalar or broadcasts against
 * x's last axis (per column). */
static tm_val centered(tm_lower *L, int index, tm_val x, int zp_index) {
    tm_ctx *c = tm_lctx(L);
    tm_val v = tm_cast(c, x, TM_INT32), zp = tm_lin(L, zp_index);
    if (zp == TM_NONE || !tm_ctx_ok(c)) return v;
    if (tm_ew_same_dtype(L, index, x, zp_index, zp)) return TM_NONE;
    zp = tm_cast(c, zp, TM_INT32);
    if (tm_vnumel(c, zp) == 1) zp = tm_reshape(c, zp, 0, NULL);
    return tm_sub(c, v, zp);
}

/* A scale as a scalar or a per-column vector, in f32. */
static tm_val column_scale(tm_ctx *c, tm_val s) {
    if (s == TM_NONE || !tm_ctx_ok(c)) return TM_NONE;
    s = tm_cast(c, s, TM_FLOAT);
    return tm_vnumel(c, s) == 1 ? tm_reshape(c, s, 0, NULL) : s;
}

/* acc (int32) * a_scale * b_scale (+ bias), the multiplier formed first as ONNX
 * Runtime does, in dtype `to`. */
static tm_val rescale(tm_lower *L, tm_val acc, tm_val a_scale, tm_val b_scale, int bias_index,
                      tm_dtype to) {
    tm_ctx *c = tm_lctx(L);
    tm_val y = tm_mul(c, tm_cast(c, acc, TM_FLOAT), tm_mul(c, a_scale, b_scale));
    tm_val bias = tm_lin(L, bias_index);
    if (bias != TM_NONE) {
        if (tm_ew_check(L, bias_index, bias, TM_DTS_FLOAT)) return TM_NONE;
        y = tm_add(c, y, tm_cast(c, bias, TM_FLOAT));
    }
    return tm_cast(c, y, to);
}

/* DynamicQuantizeMatMul: A quantized to uint8 from its own range (as
 * DynamicQuantizeLinear), times the int8/uint8 B, rescaled to float. */
static tm_status lower_dynamic_quantize_matmul(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val a = tm_lin(L, 0), b = tm_lin(L, 1), b_scale = tm_lin(L, 2);
    if (tm_ew_check(L, 0, a, TM_DT(TM_FLOAT)) || tm_ew_check(L, 1, b, Q8_DTS) ||
        tm_ew_check(L, 2, b_scale, TM_DT(TM_FLOAT)))
        return c->status;
    if (b_scale == TM_NONE)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "inputs 0 (A), 1 (B) and 2 (b_scale) are "
                        "required");
    tm_val q[3];
    if (tm_prim_n(c, TM_P_DYNAMIC_QUANTIZE, &a, 1, NULL, q, 3) != TM_OK) return c->status;
    tm_val scale = q[1], zp = q[2], qa = q[0];
    tm_val mult = tm_mul(c, scale, column_scale(c, b_scale));
    tm_val bias = tm_lin(L, 4);
    if (bias != TM_NONE && tm_ew_check(L, 4, bias, TM_DT(TM_FLOAT))) return c->status;
    tm_val fast = tm_q_matmul_integer(c, qa, b, zp, tm_lin(L, 3), mult, bias);
    if (fast != TM_NONE || !tm_ctx_ok(c)) {
        tm_lout(L, 0, fast);
        return c->status;
    }
    tm_val ca = tm_sub(c, tm_cast(c, qa, TM_INT32), tm_cast(c, zp, TM_INT32));
    tm_val cb = centered(L, 1, b, 3);
    tm_val acc = tm_matmul(c, ca, cb);
    tm_lout(L, 0, rescale(L, acc, scale, column_scale(c, b_scale), 4, TM_FLOAT));
    return c->status;
}

/* MatMulIntegerToFloat: (A - a_zp)(B - b_zp) * a_scale * b_scale + bias. */
static tm_status lower_matmul_integer_to_float(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val a = tm_lin(L, 0), b = tm_lin(L, 1), as = tm_lin(L, 2), bs = tm_lin(L, 3);
    uint32_t fdts = TM_DT(TM_FLOAT) | TM_DT(TM_FLOAT16);
    if (tm_ew_check(L, 0, a, Q8_DTS) || tm_ew_check(L, 1, b, Q8_DTS) ||
        tm_ew_check(L, 2, as, fdts) || tm_ew_check(L, 3, bs, fdts))
        return c->status;
    if (as == TM_NONE || bs == TM_NONE)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "inputs 2 (a_scale) and 3 (b_scale) are "
                        "required");
    if (tm_vdtype(c, as) == TM_FLOAT && tm_vdtype(c, bs) == TM_FLOAT) {
        tm_val bias = tm_lin(L, 6);
        if (bias != TM_NONE && tm_ew_check(L, 6, bias, TM_DT(TM_FLOAT))) return c->status;
        tm_val mult = tm_mul(c, column_scale(c, as), column_scale(c, bs));
        tm_val fast = tm_q_matmul_integer(c, a, b, tm_lin(L, 4), tm_lin(L, 5), mult, bias);
        if (fast != TM_NONE || !tm_ctx_ok(c)) {
            tm_lout(L, 0, fast);
            return c->status;
        }
    }
    tm_val acc = tm_matmul(c, centered(L, 0, a, 4), centered(L, 1, b, 5));
    tm_lout(L, 0, rescale(L, acc, column_scale(c, as), column_scale(c, bs), 6, tm_vdtype(c, as)));
    return c->status;
}

static const float fp4_levels[16] = {
    0.0f, 5.208333333e-03f, 0.66666667f, 1.0f, 0.33333333f, 0.5f, 0.16666667f, 0.25f,
    -0.0f, -5.208333333e-03f, -0.66666667f, -1.0f, -0.33333333f, -0.5f, -0.16666667f, -0.25f};
static const float nf4_levels[16] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
    -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
    0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
    0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};

/* MatMulBnb4: B is N*K 4-bit codes (high nibble first, row-major (N, K)), each block of
 * block_size codes scaled by its absmax; A times B^T (transB, the default) or B. */
static tm_status lower_matmul_bnb4(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val a = tm_lin(L, 0), b = tm_lin(L, 1), absmax = tm_lin(L, 2);
    uint32_t fdts = TM_DT(TM_FLOAT) | TM_DT(TM_FLOAT16) | TM_DT(TM_BFLOAT16);
    if (tm_ew_check(L, 0, a, fdts) || tm_ew_check(L, 1, b, TM_DT(TM_UINT8)) ||
        tm_ew_check(L, 2, absmax, fdts))
        return c->status;
    int64_t k = tm_attr_i(L, "K", 0), n = tm_attr_i(L, "N", 0);
    int64_t block = tm_attr_i(L, "block_size", 0), type = tm_attr_i(L, "quant_type", -1);
    if (k <= 0 || n <= 0 || block <= 0 || (type != 0 && type != 1))
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attributes K=%lld, N=%lld, block_size=%lld "
                        "and quant_type=%lld (0 FP4, 1 NF4) are required", (long long)k,
                        (long long)n, (long long)block, (long long)type);
    int64_t count = n * k, blocks = (count + block - 1) / block;
    if (b == TM_NONE || absmax == TM_NONE || tm_vnumel(c, b) != (count + 1) / 2 ||
        tm_vnumel(c, absmax) != blocks)
        return tm_lfail(L, TM_ERR_SHAPE, "input 1 (B) must hold %lld bytes and input 2 (absmax) "
                        "%lld scales", (long long)((count + 1) / 2), (long long)blocks);
    int64_t bytes = (count + 1) / 2, pairs[2] = {bytes, 1}, flat = 2 * bytes;
    tm_val bv = tm_reshape(c, b, 2, pairs);
    tm_val parts[2] = {tm_binary(c, TM_P_SHR, bv, tm_const_scalar(c, TM_UINT8, 4.0)),
                       tm_binary(c, TM_P_BITAND, bv, tm_const_scalar(c, TM_UINT8, 15.0))};
    tm_val codes = tm_slice_axis(c, tm_reshape(c, tm_concat(c, parts, 2, 1), 1, &flat), 0, 0,
                                 count);
    int64_t levels = 16;
    tm_tensor *lut = tm_tensor_new(TM_FLOAT, 1, &levels);
    if (!lut) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    memcpy(tm_tensor_data(lut), type == 0 ? fp4_levels : nf4_levels, sizeof fp4_levels);
    tm_val w = tm_gather(c, tm_val_tensor(c, lut, 0), tm_cast(c, codes, TM_INT32), 0);
    /* Each block's absmax repeated over its block (the last block may be cut). */
    int64_t bd[2] = {blocks, 1}, wide[2] = {blocks, block}, all = blocks * block;
    tm_val scales = tm_reshape(c, tm_cast(c, absmax, TM_FLOAT), 2, bd);
    scales = tm_slice_axis(c, tm_reshape(c, tm_expand(c, scales, 2, wide), 1, &all), 0, 0, count);
    int64_t nk[2] = {n, k};
    w = tm_cast(c, tm_reshape(c, tm_mul(c, w, scales), 2, nk), tm_vdtype(c, a));
    static const int64_t swap[2] = {1, 0};
    if (tm_attr_i(L, "transB", 1)) w = tm_transpose(c, w, swap);
    tm_lout(L, 0, tm_matmul(c, a, w));
    return c->status;
}

/* com.microsoft QuantizeLinear: y = saturate(round(x / scale) + zero_point), per tensor
 * or per axis (default 1); uint8 when no zero point is given. */
static tm_status lower_ms_quantize_linear(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0), scale = tm_lin(L, 1), zp = tm_lin(L, 2);
    uint32_t fdts = TM_DT(TM_FLOAT) | TM_DT(TM_FLOAT16);
    if (tm_ew_check(L, 0, x, fdts) || tm_ew_check(L, 1, scale, fdts) ||
        (zp != TM_NONE && tm_ew_check(L, 2, zp, TM_DTS_QINT)))
        return c->status;
    tm_dtype to = zp != TM_NONE ? tm_vdtype(c, zp) : TM_UINT8;
    int64_t axis = tm_attr_i(L, "axis", 1);
    scale = tm_cast(c, tm_q_granular(L, 1, scale, x, axis, 0), TM_FLOAT);
    zp = zp == TM_NONE ? TM_NONE : tm_q_granular(L, 2, zp, x, axis, 0);
    tm_lout(L, 0, tm_q_store(c, tm_div(c, tm_cast(c, x, TM_FLOAT), scale), zp, to, 1));
    return c->status;
}

/* com.microsoft DequantizeLinear: y = (x - zero_point) * scale, in the scale's dtype. */
static tm_status lower_ms_dequantize_linear(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0), scale = tm_lin(L, 1), zp = tm_lin(L, 2);
    if (tm_ew_check(L, 0, x, TM_DTS_QINT | TM_DT(TM_INT32)) ||
        tm_ew_check(L, 1, scale, TM_DT(TM_FLOAT) | TM_DT(TM_FLOAT16)))
        return c->status;
    if (zp != TM_NONE && tm_ew_same_dtype(L, 0, x, 2, zp)) return c->status;
    int64_t axis = tm_attr_i(L, "axis", 1);
    tm_dtype wt = tm_vdtype(c, x) == TM_INT32 ? TM_DOUBLE : TM_FLOAT;
    tm_val v = tm_cast(c, x, wt);
    if (zp != TM_NONE) v = tm_sub(c, v, tm_cast(c, tm_q_granular(L, 2, zp, x, axis, 0), wt));
    v = tm_mul(c, v, tm_cast(c, tm_q_granular(L, 1, scale, x, axis, 0), wt));
    tm_lout(L, 0, tm_cast(c, v, tm_vdtype(c, scale)));
    return c->status;
}

TM_REGISTER_OP("com.microsoft", "DynamicQuantizeMatMul", 1, 1, lower_dynamic_quantize_matmul);
TM_REGISTER_OP("com.microsoft", "MatMulIntegerToFloat", 1, 1, lower_matmul_integer_to_float);
TM_REGISTER_OP("com.microsoft", "MatMulBnb4", 1, 1, lower_matmul_bnb4);
TM_REGISTER_OP("com.microsoft", "QuantizeLinear", 1, 1, lower_ms_quantize_linear);
TM_REGISTER_OP("com.microsoft", "DequantizeLinear", 1, 1, lower_ms_dequantize_linear);
