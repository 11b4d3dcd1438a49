/* MatMul, Gemm, MatMulInteger and QLinearMatMul over the MATMUL primitive (numpy
 * matmul semantics; integer products accumulate exactly and are requantized here).
 * Not Einsum (einsum.c) nor the convolutions (conv.c). */
#include "quant.h"

#define MATMUL_DTS (TM_DTS_FLOAT | TM_DT(TM_INT32) | TM_DT(TM_INT64) | TM_DT(TM_UINT32) | \
                    TM_DT(TM_UINT64))

static tm_status lower_matmul(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val a = tm_lin(L, 0), b = tm_lin(L, 1);
    if (tm_ew_check(L, 0, a, MATMUL_DTS) || tm_ew_check(L, 1, b, MATMUL_DTS) ||
        tm_ew_same_dtype(L, 0, a, 1, b))
        return c->status;
    tm_lout(L, 0, tm_matmul(c, a, b));
    return c->status;
}

/* Gemm: alpha * A' B' + beta * C with A', B' optionally transposed 2-D matrices and C
 * broadcast to (M, N) (optional from opset 11; the `broadcast` attribute of opsets
 * before 7 only allowed what numpy broadcasting allows). */
static tm_status lower_gemm(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val a = tm_lin(L, 0), b = tm_lin(L, 1), bias = tm_lin(L, 2);
    if (tm_ew_check(L, 0, a, MATMUL_DTS) || tm_ew_check(L, 1, b, MATMUL_DTS) ||
        tm_ew_same_dtype(L, 0, a, 1, b))
        return c->status;
    if (bias != TM_NONE && tm_ew_same_dtype(L, 0, a, 2, bias)) return c->status;
    for (int i = 0; i < 2; i++)
        if (tm_vrank(c, tm_lin(L, i)) != 2)
            return tm_lfail(L, TM_ERR_SHAPE, "input %d ('%s') has rank %d; Gemm takes 2-D "
                            "matrices", i, tm_lnode(L)->inputs[i], tm_vrank(c, tm_lin(L, i)));
    static const int64_t swap[2] = {1, 0};
    if (tm_attr_i(L, "transA", 0)) a = tm_transpose(c, a, swap);
    if (tm_attr_i(L, "transB", 0)) b = tm_transpose(c, b, swap);
    if (tm_vdims(c, a)[1] != tm_vdims(c, b)[0])
        return tm_lfail(L, TM_ERR_SHAPE, "inner dimensions differ: A' is (%lld, %lld), B' is "
                        "(%lld, %lld)", (long long)tm_vdims(c, a)[0], (long long)tm_vdims(c, a)[1],
                        (long long)tm_vdims(c, b)[0], (long long)tm_vdims(c, b)[1]);
    tm_val y = tm_matmul(c, a, b);
    double alpha = tm_attr_f(L, "alpha", 1.0f), beta = tm_attr_f(L, "beta", 1.0f);
    if (alpha != 1.0) y = tm_mul(c, y, tm_scalar_like(c, y, alpha));
    if (bias != TM_NONE && beta != 0.0) {
        if (tm_vrank(c, bias) > 2)
            return tm_lfail(L, TM_ERR_SHAPE, "input 2 ('%s') has rank %d; it must broadcast "
                            "to (M, N)", tm_lnode(L)->inputs[2], tm_vrank(c, bias));
        if (beta != 1.0) bias = tm_mul(c, bias, tm_scalar_like(c, bias, beta));
        y = tm_add(c, y, bias);
        if (y != TM_NONE && tm_vrank(c, y) == 2 &&
            (tm_vdims(c, y)[0] != tm_vdims(c, a)[0] || tm_vdims(c, y)[1] != tm_vdims(c, b)[1]))
            return tm_lfail(L, TM_ERR_SHAPE, "input 2 ('%s') does not broadcast to (M, N)",
                            tm_lnode(L)->inputs[2]);
    }
    tm_lout(L, 0, y);
    return c->status;
}

/* An int8/uint8 operand minus its zero point, as int32. A 1-D zero point of `rows` rows
 * (a) applies per row, of the last dim (b) per column. */
static tm_val centered(tm_lower *L, int index, tm_val x, tm_val zp, int per_row) {
    tm_ctx *c = tm_lctx(L);
    tm_val v = tm_cast(c, x, TM_INT32);
    if (zp == TM_NONE || !tm_ctx_ok(c)) return v;
    if (tm_ew_same_dtype(L, index, x, index == 0 ? 2 : 3, zp)) return TM_NONE;
    zp = tm_cast(c, zp, TM_INT32);
    if (tm_vnumel(c, zp) == 1) {
        zp = tm_reshape(c, zp, 0, NULL);
    } else if (per_row && tm_vrank(c, zp) == 1 && tm_vrank(c, x) >= 2) {
        int64_t dims[2] = {tm_vdims(c, zp)[0], 1};
        zp = tm_reshape(c, zp, 2, dims);
    }
    return tm_sub(c, v, zp);
}

#define QUANT8_DTS (TM_DT(TM_INT8) | TM_DT(TM_UINT8))

static tm_status lower_matmul_integer(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val a = tm_lin(L, 0), b = tm_lin(L, 1);
    if (tm_ew_check(L, 0, a, QUANT8_DTS) || tm_ew_check(L, 1, b, QUANT8_DTS)) return c->status;
    tm_val fast = tm_q_matmul_integer(c, a, b, tm_lin(L, 2), tm_lin(L, 3), TM_NONE, TM_NONE);
    if (fast != TM_NONE || !tm_ctx_ok(c)) {
        tm_lout(L, 0, fast);
        return c->status;
    }
    /* Batched B, or zero points of other shapes: the general int32 MATMUL. */
    tm_val ca = centered(L, 0, a, tm_lin(L, 2), 1);
    tm_val cb = centered(L, 1, b, tm_lin(L, 3), 0);
    tm_lout(L, 0, tm_matmul(c, ca, cb));
    return c->status;
}

/* A scale as a per-row (a: rows) column or per-column (b) row vector, in f32. */
static tm_val shaped_scale(tm_ctx *c, tm_val s, int per_row) {
    if (!tm_ctx_ok(c) || s == TM_NONE) return TM_NONE;
    if (tm_vnumel(c, s) == 1) return tm_reshape(c, s, 0, NULL);
    if (per_row && tm_vrank(c, s) == 1) {
        int64_t dims[2] = {tm_vdims(c, s)[0], 1};
        return tm_reshape(c, s, 2, dims);
    }
    return s;
}

/* QLinearMatMul: the exact integer product of the centred operands, times
 * a_scale * b_scale / y_scale (formed in the scales' dtype, as the reference does),
 * requantized with y_zero_point. */
static tm_status lower_qlinear_matmul(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val a = tm_lin(L, 0), b = tm_lin(L, 3), yzp = tm_lin(L, 7);
    for (int i = 0; i < 8; i++)
        if (!tm_lhas(L, i))
            return tm_lfail(L, TM_ERR_SHAPE, "input %d is missing; QLinearMatMul takes 8", i);
    if (tm_ew_check(L, 0, a, QUANT8_DTS) || tm_ew_check(L, 3, b, QUANT8_DTS) ||
        tm_ew_check(L, 7, yzp, QUANT8_DTS))
        return c->status;
    static const int scales[3] = {1, 4, 6};
    for (int i = 0; i < 3; i++)
        if (tm_ew_check(L, scales[i], tm_lin(L, scales[i]), TM_DTS_FLOAT)) return c->status;
    tm_val acc = tm_q_matmul_integer(c, a, b, tm_lin(L, 2), tm_lin(L, 5), TM_NONE, TM_NONE);
    if (acc == TM_NONE && tm_ctx_ok(c)) {
        tm_val ca = tm_sub(c, tm_cast(c, a, TM_INT32),
                           shaped_scale(c, tm_cast(c, tm_lin(L, 2), TM_INT32), 1));
        tm_val cb = tm_sub(c, tm_cast(c, b, TM_INT32),
                           shaped_scale(c, tm_cast(c, tm_lin(L, 5), TM_INT32), 0));
        acc = tm_matmul(c, ca, cb);
    }
    acc = tm_cast(c, acc, TM_DOUBLE);
    tm_dtype sdt = tm_vdtype(c, tm_lin(L, 1));
    tm_val as = shaped_scale(c, tm_cast(c, tm_lin(L, 1), sdt), 1);
    tm_val bs = shaped_scale(c, tm_cast(c, tm_lin(L, 4), sdt), 0);
    tm_val ys = shaped_scale(c, tm_cast(c, tm_lin(L, 6), sdt), 0);
    tm_val mult = tm_cast(c, tm_div(c, tm_mul(c, as, bs), ys), TM_DOUBLE);
    tm_val zp = shaped_scale(c, yzp, 0);
    tm_lout(L, 0, tm_q_store(c, tm_mul(c, acc, mult), zp, tm_vdtype(c, yzp), 1));
    return c->status;
}

TM_REGISTER_OP("", "MatMul", 1, 27, lower_matmul);
TM_REGISTER_OP("", "Gemm", 1, 27, lower_gemm);
TM_REGISTER_OP("", "MatMulInteger", 10, 27, lower_matmul_integer);
TM_REGISTER_OP("", "QLinearMatMul", 10, 27, lower_qlinear_matmul);
