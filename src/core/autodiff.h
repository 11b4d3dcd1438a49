/* Reverse-mode gradients over the recorded primitive graph of a context: the engine
 * (autodiff.c) walks the tape backwards and calls each primitive's gradient rule, which
 * builds the input cotangents from other primitives through the same context (so the
 * backward is itself recorded under trace, or runs at once eagerly). The rules live
 * beside their families (prims/<family>_grad.c). Not the losses or the plan API
 * (../runtime/grad.c). */
#ifndef TM_CORE_AUTODIFF_H
#define TM_CORE_AUTODIFF_H

#include "ctx.h"
#include "ops.h"

/* What a gradient rule sees of one recorded call. */
typedef struct tm_grad_call {
    int prim;
    const tm_args *a;
    const tm_val *in;         /* the call's inputs and outputs (forward values) */
    int nin;
    const tm_val *out;
    int nout;
    const tm_val *gout;       /* cotangent of each output; TM_NONE: none reached it */
    const uint8_t *want;      /* want[i]: input i is tracked and needs a cotangent */
    tm_val *gin;              /* the rule sets gin[i] for wanted inputs; TM_NONE: zero */
} tm_grad_call;

/* A gradient rule. It builds gin[] from primitives (tm_prim and the ops.h helpers) on c
 * and returns TM_OK or c's status; a cotangent has exactly its input's dtype and dims.
 * A primitive of the family the rule does not differentiate returns TM_GRAD_NO_RULE
 * without failing the context: the engine then names the primitive and the ONNX node. */
typedef tm_status (*tm_grad_fn)(tm_ctx *c, const tm_grad_call *g);
#define TM_GRAD_NO_RULE ((tm_status)101)

/* One entry per primitive, generated from prims.def: tm__grad_<impl> of the row's family
 * (tools/gen_prim_stubs.sh supplies a "no rule" stub for a family that has none). */
extern const tm_grad_fn tm__grad_rules[TM_P__COUNT];

/* Cotangents of xs[0..n) for the scalar-or-not value y with incoming cotangent seed (of
 * y's dtype and dims), over the nodes recorded from first_node on. gx[i] is TM_NONE when
 * y does not depend on xs[i]. Taping is switched off meanwhile (no higher order). Fails,
 * naming the primitive and the ONNX node, when the path from a tracked value to y crosses
 * a primitive without a gradient rule or a quantizing cast (see ctx.c, mark_taped). */
tm_status tm_backward(tm_ctx *c, tm_val y, tm_val seed, int32_t first_node, int n,
                      const tm_val *xs, tm_val *gx);

/* ---- Helpers shared by the rules --------------------------------------------------- */

/* g (rank >= the target's) summed down to the numpy-broadcast shape (rank, dims): the
 * leading extra axes and the axes where dims has 1 are reduced, then reshaped. */
tm_val tm_grad_sum_to(tm_ctx *c, tm_val g, int rank, const int64_t *dims);
/* tm_grad_sum_to onto the dims of value like. */
tm_val tm_grad_sum_like(tm_ctx *c, tm_val g, tm_val like);
/* Zeros of the dtype and dims of `like` (a constant). */
tm_val tm_grad_zeros_like(tm_ctx *c, tm_val like);
/* A constant of x's dtype, rank 0. */
tm_val tm_grad_scalar(tm_ctx *c, tm_val x, double v);
/* REDUCE_SUM over the axes in mask, keeping rank. */
tm_val tm_grad_reduce_sum(tm_ctx *c, tm_val x, int64_t mask);
/* EXPAND x (same rank, dims equal or 1) to dims of like. */
tm_val tm_grad_expand_like(tm_ctx *c, tm_val x, tm_val like);
/* op(a) op(b), op transposing the operands flagged (ta, tb): MATMUL reads them in place. */
tm_val tm_grad_matmul(tm_ctx *c, tm_val a, tm_val b, int ta, int tb);
/* cast of a bool mask to the dtype of like. */
tm_val tm_grad_mask(tm_ctx *c, tm_val cond, tm_val like);
/* The adjoint of gathering along `axis` with `indices` (any shape, int32/int64, negatives
 * wrap) from data of dims (rank, dims): g has those dims with the axis replaced by the
 * indices' dims; the result has (rank, dims), each slice of g added where its index
 * points (duplicates sum). */
tm_val tm_grad_scatter_add(tm_ctx *c, tm_val g, tm_val indices, int axis, int rank,
                           const int64_t *dims);

#endif
