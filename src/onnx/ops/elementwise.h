/* Helpers shared by the elementwise operator files (arith.c, compare.c, unary.c,
 * activation.c, clip.c, where.c, cast.c, dropout.c): dtype sets as bit masks, the
 * dtype check that names the offending input, and the broadcast of opsets before 7.
 * Not a lowering itself. */
#ifndef TM_ONNX_OPS_ELEMENTWISE_H
#define TM_ONNX_OPS_ELEMENTWISE_H

#include <string.h>
#include "../lower.h"

#define TM_DT(t) (1u << (t))
#define TM_DTS_FLOAT (TM_DT(TM_FLOAT) | TM_DT(TM_FLOAT16) | TM_DT(TM_DOUBLE) | TM_DT(TM_BFLOAT16))
#define TM_DTS_FLOAT8 (TM_DT(TM_FLOAT8E4M3FN) | TM_DT(TM_FLOAT8E4M3FNUZ) | \
                       TM_DT(TM_FLOAT8E5M2) | TM_DT(TM_FLOAT8E5M2FNUZ))
#define TM_DTS_SINT (TM_DT(TM_INT8) | TM_DT(TM_INT16) | TM_DT(TM_INT32) | TM_DT(TM_INT64))
#define TM_DTS_UINT (TM_DT(TM_UINT8) | TM_DT(TM_UINT16) | TM_DT(TM_UINT32) | TM_DT(TM_UINT64))
#define TM_DTS_INT (TM_DTS_SINT | TM_DTS_UINT)
#define TM_DTS_NUMERIC (TM_DTS_FLOAT | TM_DTS_INT)
#define TM_DTS_BOOL TM_DT(TM_BOOL)

/* Fails the node unless input `index` (value v) has a dtype in `allowed`. Returns 0 when
 * the dtype fits; an absent v (an earlier failure) passes, the context already says why. */
static inline int tm_ew_check(tm_lower *L, int index, tm_val v, uint32_t allowed) {
    tm_ctx *c = tm_lctx(L);
    if (v == TM_NONE || !tm_ctx_ok(c)) return !tm_ctx_ok(c);
    tm_dtype dt = tm_vdtype(c, v);
    if ((unsigned)dt < 32 && (allowed & TM_DT(dt))) return 0;
    tm_lfail(L, TM_ERR_DTYPE, "input %d ('%s') has dtype %s, which this operator does not take",
             index, tm_lnode(L)->inputs[index], tm_dtype_name(dt));
    return 1;
}

/* Fails the node unless inputs i and j (values a, b) share one dtype. */
static inline int tm_ew_same_dtype(tm_lower *L, int i, tm_val a, int j, tm_val b) {
    tm_ctx *c = tm_lctx(L);
    if (a == TM_NONE || b == TM_NONE || !tm_ctx_ok(c)) return !tm_ctx_ok(c);
    if (tm_vdtype(c, a) == tm_vdtype(c, b)) return 0;
    tm_lfail(L, TM_ERR_DTYPE, "input %d ('%s') is %s but input %d ('%s') is %s; they must match",
             i, tm_lnode(L)->inputs[i], tm_dtype_name(tm_vdtype(c, a)), j,
             tm_lnode(L)->inputs[j], tm_dtype_name(tm_vdtype(c, b)));
    return 1;
}

/* Opsets before 7 broadcast only the right operand, and only with broadcast=1: b's dims
 * sit in a's dims from `axis` on (suffix matching when axis is absent), or b holds one
 * element. Returns b reshaped so that numpy broadcasting does the same. */
static inline tm_val tm_ew_legacy_rhs(tm_lower *L, tm_val a, tm_val b) {
    tm_ctx *c = tm_lctx(L);
    if (a == TM_NONE || b == TM_NONE || !tm_ctx_ok(c)) return TM_NONE;
    if (!tm_attr_i(L, "broadcast", 0)) return b;
    int ra = tm_vrank(c, a), rb = tm_vrank(c, b);
    if (tm_vnumel(c, b) == 1) return tm_reshape(c, b, 0, NULL);
    if (rb >= ra) return b;
    int64_t axis = tm_attr_i(L, "axis", ra - rb);
    if (axis < 0) axis += ra;
    if (axis < 0 || axis + rb > ra) {
        tm_lfail(L, TM_ERR_SHAPE, "attribute axis=%lld does not place input 1 (rank %d) inside "
                 "input 0 (rank %d)", (long long)tm_attr_i(L, "axis", 0), rb, ra);
        return TM_NONE;
    }
    int64_t dims[TM_MAX_RANK];
    for (int d = 0; d < ra; d++) dims[d] = 1;
    for (int d = 0; d < rb; d++) dims[axis + d] = tm_vdims(c, b)[d];
    return tm_reshape(c, b, ra, dims);
}

/* Fails the node when the required input `index` is absent; returns its value. */
static inline tm_val tm_ew_input(tm_lower *L, int index) {
    if (!tm_ctx_ok(tm_lctx(L))) return TM_NONE;
    if (!tm_lhas(L, index)) {
        tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "input %d is required but missing", index);
        return TM_NONE;
    }
    return tm_lin(L, index);
}

#endif
