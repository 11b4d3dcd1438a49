/* QuantizeLinear, DequantizeLinear (per-tensor, per-axis, blocked; integer, float8, float4)
 * from elementwise primitives: divide in f32, round half to even, add the zero point,
 * saturate; DynamicQuantizeLinear as one DYNAMIC_QUANTIZE primitive. The QLinear/Integer
 * matmul and conv are elsewhere. */
#include "quant.h"

/* The quantized dtype: the zero point's, else output_dtype, else uint8. */
static int quantized_dtype(tm_lower *L, tm_val zp, tm_dtype *out) {
    tm_ctx *c = tm_lctx(L);
    int64_t attr = tm_attr_i(L, "output_dtype", 0);
    tm_dtype dt = zp != TM_NONE ? tm_vdtype(c, zp) : attr ? (tm_dtype)attr : TM_UINT8;
    if (zp != TM_NONE && attr && attr != dt) {
        tm_lfail(L, TM_ERR_DTYPE, "attribute output_dtype=%lld (%s) differs from the zero "
                 "point's dtype %s", (long long)attr, tm_dtype_name((tm_dtype)attr),
                 tm_dtype_name(dt));
        return -1;
    }
    if ((unsigned)dt >= 32 || !((TM_DTS_QINT | TM_DTS_QFLOAT) & TM_DT(dt))) {
        tm_lfail(L, TM_ERR_DTYPE, "quantized dtype %s is not one QuantizeLinear produces",
                 tm_dtype_name(dt));
        return -1;
    }
    *out = dt;
    return 0;
}

/* The dtype the division runs in: `precision` when given, f64 for f64 data, else f32
 * (half-precision scales divide in f32 and still round once). */
static tm_dtype division_dtype(tm_lower *L) {
    int64_t precision = tm_attr_i(L, "precision", 0);
    if (precision == TM_DOUBLE) return TM_DOUBLE;
    return TM_FLOAT;
}

static tm_status lower_quantize_linear(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0), scale = tm_lin(L, 1), zp = tm_lin(L, 2);
    uint32_t xdts = TM_DTS_FLOAT | TM_DT(TM_INT32);
    if (tm_ew_check(L, 0, x, xdts) ||
        tm_ew_check(L, 1, scale, xdts | TM_DT(TM_FLOAT8E8M0)))
        return c->status;
    tm_dtype to;
    if (quantized_dtype(L, zp, &to)) return c->status;
    int64_t axis = tm_attr_i(L, "axis", 1), block = tm_attr_i(L, "block_size", 0);
    tm_dtype wt = division_dtype(L);
    scale = tm_cast(c, tm_q_granular(L, 1, scale, x, axis, block), wt);
    zp = zp == TM_NONE ? TM_NONE : tm_q_granular(L, 2, zp, x, axis, block);
    tm_val q = tm_div(c, tm_cast(c, x, wt), scale);
    tm_lout(L, 0, tm_q_store(c, q, zp, to, tm_attr_i(L, "saturate", 1) != 0));
    return c->status;
}

static tm_status lower_dequantize_linear(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0), scale = tm_lin(L, 1), zp = tm_lin(L, 2);
    if (tm_ew_check(L, 0, x, TM_DTS_QINT | TM_DTS_QFLOAT | TM_DT(TM_INT32)) ||
        tm_ew_check(L, 1, scale, TM_DTS_FLOAT | TM_DT(TM_FLOAT8E8M0)))
        return c->status;
    if (zp != TM_NONE && tm_ew_same_dtype(L, 0, x, 2, zp)) return c->status;
    tm_dtype sdt = tm_vdtype(c, scale);
    int64_t out_attr = tm_attr_i(L, "output_dtype", 0);
    tm_dtype to = out_attr ? (tm_dtype)out_attr : sdt == TM_FLOAT8E8M0 ? TM_FLOAT : sdt;
    if ((unsigned)to >= 32 || !(TM_DTS_FLOAT & TM_DT(to)))
        return tm_lfail(L, TM_ERR_DTYPE, "attribute output_dtype=%lld is not a float type",
                        (long long)out_attr);
    int64_t axis = tm_attr_i(L, "axis", 1), block = tm_attr_i(L, "block_size", 0);
    /* int32 data would lose bits in f32. */
    tm_dtype wt = tm_vdtype(c, x) == TM_INT32 || to == TM_DOUBLE ? TM_DOUBLE : TM_FLOAT;
    tm_val v = tm_cast(c, x, wt);
    if (zp != TM_NONE) v = tm_sub(c, v, tm_cast(c, tm_q_granular(L, 2, zp, x, axis, block), wt));
    v = tm_mul(c, v, tm_cast(c, tm_q_granular(L, 1, scale, x, axis, block), wt));
    tm_lout(L, 0, tm_cast(c, v, to));
    return c->status;
}

/* DynamicQuantizeLinear: uint8 with scale and zero point chosen from the data's range
 * (widened to include 0), in one DYNAMIC_QUANTIZE call. An all-zero input gets scale 1,
 * as ONNX Runtime does, rather than the 0 that would quantize to NaN. */
static tm_status lower_dynamic_quantize_linear(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    if (tm_ew_check(L, 0, x, TM_DT(TM_FLOAT))) return c->status;
    tm_val out[3];
    if (tm_prim_n(c, TM_P_DYNAMIC_QUANTIZE, &x, 1, NULL, out, 3) != TM_OK) return c->status;
    for (int i = 0; i < 3; i++) tm_lout(L, i, out[i]);
    return c->status;
}

TM_REGISTER_OP("", "QuantizeLinear", 10, 27, lower_quantize_linear);
TM_REGISTER_OP("", "DequantizeLinear", 10, 27, lower_dequantize_linear);
TM_REGISTER_OP("", "DynamicQuantizeLinear", 11, 27, lower_dynamic_quantize_linear);
