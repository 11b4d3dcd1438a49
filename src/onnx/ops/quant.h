/* Helpers shared by the quantization lowerings (quantize.c, matmul.c, conv.c): quantized
 * dtype ranges, the round-half-to-even saturating store, and shaping a scale/zero point
 * for per-tensor, per-axis or blocked granularity. Not a lowering itself. */
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

#endif
