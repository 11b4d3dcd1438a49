/* Convenience constructors over tm_prim for lowerings: one call per primitive with its
 * arguments spelled out, plus the ONNX-style helpers (numpy broadcasting, axis
 * normalisation) that lowerings share. Everything returns TM_NONE once the context has
 * failed, so a lowering can chain calls and check tm_ctx_ok() once at the end.
 * Not kernels (prims/) and not ONNX attribute reading (../onnx/lower.h). */
#ifndef TM_CORE_OPS_H
#define TM_CORE_OPS_H

#include "ctx.h"

/* Elementwise. Binary ops broadcast numpy-style: ranks are aligned by reshaping the
 * lower-rank input, sizes of 1 broadcast inside the primitive. */
tm_val tm_unary(tm_ctx *c, int prim, tm_val x);
tm_val tm_binary(tm_ctx *c, int prim, tm_val a, tm_val b);
tm_val tm_add(tm_ctx *c, tm_val a, tm_val b);
tm_val tm_sub(tm_ctx *c, tm_val a, tm_val b);
tm_val tm_mul(tm_ctx *c, tm_val a, tm_val b);
tm_val tm_div(tm_ctx *c, tm_val a, tm_val b);
tm_val tm_where(tm_ctx *c, tm_val cond, tm_val a, tm_val b);
tm_val tm_cast(tm_ctx *c, tm_val x, tm_dtype to);
tm_val tm_cast_sat(tm_ctx *c, tm_val x, tm_dtype to, int saturate);
/* Casts exactly to `to`, even when the context computes half precision in f32. */
tm_val tm_cast_exact(tm_ctx *c, tm_val x, tm_dtype to);
/* With compute_type f32 (tm_load_options), float16/bfloat16 values become float32:
 * graph inputs and initializers pass through this on entry. Otherwise returns x. */
tm_val tm_to_compute_type(tm_ctx *c, tm_val x);
static inline int tm_is_half(tm_dtype dt) { return dt == TM_FLOAT16 || dt == TM_BFLOAT16; }
/* A scalar of x's dtype, shaped to broadcast against x (rank 0). */
tm_val tm_scalar_like(tm_ctx *c, tm_val x, double v);

/* Movement. */
tm_val tm_reshape(tm_ctx *c, tm_val x, int rank, const int64_t *dims);
tm_val tm_transpose(tm_ctx *c, tm_val x, const int64_t *perm);
/* starts/steps/counts per axis, already normalised. */
tm_val tm_slice(tm_ctx *c, tm_val x, const int64_t *starts, const int64_t *steps,
                const int64_t *counts);
/* Slice one axis [start, start+count) with step 1. */
tm_val tm_slice_axis(tm_ctx *c, tm_val x, int axis, int64_t start, int64_t count);
tm_val tm_concat(tm_ctx *c, const tm_val *xs, int n, int axis);
tm_val tm_expand(tm_ctx *c, tm_val x, int rank, const int64_t *dims); /* numpy rules */
tm_val tm_gather(tm_ctx *c, tm_val data, tm_val indices, int axis);
tm_val tm_pad(tm_ctx *c, tm_val x, int mode, const int64_t *begin, const int64_t *end,
              double value);
tm_val tm_copy(tm_ctx *c, tm_val x);
/* Insert/remove size-1 axes (axes normalised, sorted by the callee). */
tm_val tm_unsqueeze(tm_ctx *c, tm_val x, const int64_t *axes, int n);
tm_val tm_squeeze(tm_ctx *c, tm_val x, const int64_t *axes, int n);
/* Reshape to the same rank with leading 1s so x broadcasts against `rank` dims. */
tm_val tm_align_rank(tm_ctx *c, tm_val x, int rank);

/* Reductions: axes (negative allowed) with ONNX keepdims. n == 0 reduces all axes. */
tm_val tm_reduce(tm_ctx *c, int prim, tm_val x, const int64_t *axes, int n, int keepdims);

/* Linear algebra: numpy matmul semantics (1-D operands promoted and squeezed back). */
tm_val tm_matmul(tm_ctx *c, tm_val a, tm_val b);

/* Fused. */
tm_val tm_softmax(tm_ctx *c, tm_val x, int axis, int log);

/* Normalise an axis for a given rank; fails the context when out of range. */
int tm_norm_axis(tm_ctx *c, int64_t axis, int rank);

#endif
