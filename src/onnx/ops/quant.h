/* Helpers shared by the quantization lowerings (quantize.c, matmul.c, conv.c, ms_quant.c):
 * quantized dtype ranges, the round-half-to-even saturating store, shaping a scale/zero
 * point for per-tensor, per-axis or blocked granularity, and the exact 8-bit product.
 * Not a lowering itself. */
#ifndef TM_ONNX_OPS_QUANT_H
#define TM_ONNX_OPS_QUANT_H

#include "elementwise.h"

#define TM_DTS_QINT (TM_DT(TM_INT8) | TM_DT(TM_UINT8) | TM_DT(TM_INT16) | TM_DT(TM_UINT16) | \
                     TM_DT(TM_INT4) | TM_DT(TM_UINT4) | TM_DT(TM_INT2) | TM_DT(TM_UINT2))
#define TM_DTS_QFLOAT (TM_DTS_FLOAT8 | TM_DT(TM_FLOAT4E2M1))

/* The integer range of a quantized dtype; 0 when dt is not a quantized integer. */
static inline int tm_q_int_range(tm_dtype dt, double *lo, double *hi) {
    switch (dt) {
    case TM_INT8: *lo = -128; *hi = 127; return 1;
    case TM_UINT8: *lo = 0; *hi = 255; return 1;
    case TM_INT16: *lo = -32768; *hi = 32767; return 1;
    case TM_UINT16: *lo = 0; *hi = 65535; return 1;
    case TM_INT32: *lo = -2147483648.0; *hi = 2147483647.0; return 1;
    case TM_INT4: *lo = -8; *hi = 7; return 1;
    case TM_UINT4: *lo = 0; *hi = 15; return 1;
    case TM_INT2: *lo = -2; *hi = 1; return 1;
    case TM_UINT2: *lo = 0; *hi = 3; return 1;
    default: return 0;
    }
}

/* The quantized value of v (a float tensor already divided by the scale): integer
 * targets round half to even, add the zero point and saturate to the type's range;
 * float8/float4 targets add the zero point and cast (saturate as asked). zp may be
 * TM_NONE (0); it has v's dtype or broadcasts against v. */
static inline tm_val tm_q_store(tm_ctx *c, tm_val v, tm_val zp, tm_dtype to, int saturate) {
    if (!tm_ctx_ok(c) || v == TM_NONE) return TM_NONE;
    double lo, hi;
    if (!tm_q_int_range(to, &lo, &hi)) {
        if (zp != TM_NONE) v = tm_add(c, v, tm_cast(c, zp, tm_vdtype(c, v)));
        return tm_cast_sat(c, v, to, saturate);
    }
    v = tm_unary(c, TM_P_ROUND, v);
    if (zp != TM_NONE) v = tm_add(c, v, tm_cast(c, zp, tm_vdtype(c, v)));
    v = tm_binary(c, TM_P_MAX, v, tm_scalar_like(c, v, lo));
    v = tm_binary(c, TM_P_MIN, v, tm_scalar_like(c, v, hi));
    return tm_cast(c, v, to);
}

/* Shapes a scale or zero point p to broadcast against x (rank r): a scalar or
 * one-element 1-D stays per-tensor; with block_size 0 a 1-D p is per-axis along `axis`;
 * with block_size > 0 p has x's rank and each entry along `axis` repeats block_size
 * times (the last block may be cut). Fails the node (naming input `index`) on a shape
 * that fits none of these. */
static inline tm_val tm_q_granular(tm_lower *L, int index, tm_val p, tm_val x, int64_t axis,
                                   int64_t block_size) {
    tm_ctx *c = tm_lctx(L);
    if (!tm_ctx_ok(c) || p == TM_NONE || x == TM_NONE) return TM_NONE;
    int r = tm_vrank(c, x), rp = tm_vrank(c, p);
    const int64_t *xd = tm_vdims(c, x);
    /* One value is per-tensor (per-axis over a size-1 axis is the same thing). */
    if (block_size <= 0 && rp <= 1 && tm_vnumel(c, p) == 1) return tm_reshape(c, p, 0, NULL);
    if (axis < -r || axis >= r) {
        tm_lfail(L, TM_ERR_SHAPE, "attribute axis=%lld is out of range for rank %d",
                 (long long)axis, r);
        return TM_NONE;
    }
    if (axis < 0) axis += r;
    if (block_size <= 0) {
        if (rp != 1 || tm_vdims(c, p)[0] != xd[axis]) {
            tm_lfail(L, TM_ERR_SHAPE, "input %d ('%s') must be a scalar or 1-D of length "
                     "%lld (axis %lld)", index, tm_lnode(L)->inputs[index],
                     (long long)xd[axis], (long long)axis);
            return TM_NONE;
        }
        int64_t dims[TM_MAX_RANK];
        for (int d = 0; d < r; d++) dims[d] = d == axis ? xd[axis] : 1;
        return tm_reshape(c, p, r, dims);
    }
    const int64_t *pd = tm_vdims(c, p);
    int ok = rp == r;
    for (int d = 0; ok && d < r; d++)
        ok = d == axis ? pd[d] * block_size >= xd[d] && (pd[d] - 1) * block_size < xd[d]
                       : pd[d] == xd[d];
    if (!ok) {
        tm_lfail(L, TM_ERR_SHAPE, "input %d ('%s') does not fit blocked quantization of "
                 "axis %lld with block_size=%lld", index, tm_lnode(L)->inputs[index],
                 (long long)axis, (long long)block_size);
        return TM_NONE;
    }
    /* (.., S, ..) -> (.., S, 1, ..) -> (.., S, B, ..) -> (.., S*B, ..) -> cut to D. */
    int64_t split[TM_MAX_RANK + 1], wide[TM_MAX_RANK + 1], merged[TM_MAX_RANK];
    if (r + 1 > TM_MAX_RANK) {
        tm_lfail(L, TM_ERR_UNSUPPORTED, "blocked quantization of rank %d is not supported", r);
        return TM_NONE;
    }
    for (int d = 0, k = 0; d < r; d++) {
        split[k] = wide[k] = pd[d];
        merged[d] = d == axis ? pd[d] * block_size : pd[d];
        k++;
        if (d == axis) {
            split[k] = 1;
            wide[k] = block_size;
            k++;
        }
    }
    tm_val v = tm_expand(c, tm_reshape(c, p, r + 1, split), r + 1, wide);
    v = tm_reshape(c, v, r, merged);
    return tm_slice_axis(c, v, (int)axis, 0, xd[axis]);
}

/* 1 when v holds one value, or n values along its last dim (every other dim 1). */
static inline int tm_q_is_vector(tm_ctx *c, tm_val v, int64_t n) {
    int r = tm_vrank(c, v);
    int64_t count = tm_vnumel(c, v);
    if (count == 1) return 1;
    if (r < 1 || count != n || tm_vdims(c, v)[r - 1] != n) return 0;
    return 1;
}

/* a (..., M, K) times b (K, N), both int8/uint8, minus their zero points (za: TM_NONE, one
 * value, or one per row of a as (M) or a's shape with last dim 1; zb: TM_NONE, one value or
 * one per column) through MATMUL_INTEGER, with B packed by QGEMM_PACK_B (folded at plan
 * time when b and zb are constants, so a weight is packed once). With scale (f32, one or N
 * values) the result is f32: (float)acc * scale (+ bias, f32, one or N values); else
 * int32. Returns TM_NONE, with the context still ok, for operands of other shapes (the
 * caller then takes the general path). */
static inline tm_val tm_q_matmul_integer(tm_ctx *c, tm_val a, tm_val b, tm_val za, tm_val zb,
                                         tm_val scale, tm_val bias) {
    if (!tm_ctx_ok(c) || a == TM_NONE || b == TM_NONE) return TM_NONE;
    tm_dtype adt = tm_vdtype(c, a), bdt = tm_vdtype(c, b);
    int ra = tm_vrank(c, a);
    if ((adt != TM_INT8 && adt != TM_UINT8) || (bdt != TM_INT8 && bdt != TM_UINT8) || ra < 1 ||
        tm_vrank(c, b) != 2)
        return TM_NONE;
    const int64_t *ad = tm_vdims(c, a), *bd = tm_vdims(c, b);
    int64_t K = bd[0], N = bd[1], M = ra >= 2 ? ad[ra - 2] : 1;
    if (ad[ra - 1] != K || K <= 0 || N <= 0) return TM_NONE;
    if (za != TM_NONE) {
        int64_t nz = tm_vnumel(c, za);
        int rz = tm_vrank(c, za);
        int per_row = rz == 1 && nz == M;
        if (rz == ra && ra >= 2 && tm_vdims(c, za)[ra - 1] == 1) {
            per_row = 1;
            for (int d = 0; d < ra - 1; d++) per_row &= tm_vdims(c, za)[d] == ad[d];
        }
        if (tm_vdtype(c, za) != adt || (nz != 1 && !per_row)) return TM_NONE;
    }
    if (zb != TM_NONE && (tm_vdtype(c, zb) != bdt || !tm_q_is_vector(c, zb, N) ||
                          tm_vrank(c, zb) > 2))
        return TM_NONE;
    if (scale != TM_NONE && (tm_vdtype(c, scale) != TM_FLOAT || !tm_q_is_vector(c, scale, N)))
        return TM_NONE;
    if (bias != TM_NONE && (tm_vdtype(c, bias) != TM_FLOAT || !tm_q_is_vector(c, bias, N)))
        return TM_NONE;
    tm_args args;
    memset(&args, 0, sizeof args);
    args.i[0] = K;
    args.i[1] = N;
    tm_val pack_in[2] = {b, zb != TM_NONE ? zb : tm_const_scalar(c, bdt, 0.0)};
    tm_val packed = tm_prim(c, TM_P_QGEMM_PACK_B, pack_in, 2, &args);
    tm_val in[5] = {a, packed, za != TM_NONE ? za : tm_const_scalar(c, adt, 0.0), scale, bias};
    int n = 3;
    if (scale != TM_NONE) {
        args.i[2] = 1;
        n++;
        if (bias != TM_NONE) {
            args.i[3] = 1;
            n++;
        }
    }
    return tm_prim(c, TM_P_MATMUL_INTEGER, in, n, &args);
}

#endif
