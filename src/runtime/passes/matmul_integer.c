/* Fuses the rescaling that dynamically quantized exports put after an integer product,
 * and what follows it elementwise, into MATMUL_INTEGER's f32 epilogue:
 *   MATMUL_INTEGER (int32) -> CAST to f32 -> MUL by a scale [-> ADD of a bias]
 *   [-> elementwise steps: a chain, such as the FFN's GELU] [-> ADD of a residual]
 * with the same roundings (the multiply, then the add, then each step as its primitive
 * computes it), run on each tile while it is in cache. The scale and bias must hold one
 * value or one per column (all other dims 1); the chain and residual are the shared
 * epilogue's (passes/epilogue.c), as LINEAR and MATMUL_NBITS take them. Every
 * intermediate read once (by live nodes) and not a root. Not the quantization of A
 * (DYNAMIC_QUANTIZE). */
#include <stdlib.h>
#include <string.h>
#include "../passes.h"
#include "../../core/prims/fused.h"

/* 1 when v is f32 with one value, or n values along its last dim, all other dims 1. */
static int column_vector(const tm_ctx *c, tm_val v, int64_t n) {
    const tm_vinfo *vi = &c->vals[v];
    if (vi->dtype != TM_FLOAT) return 0;
    int64_t count = tm_numel(vi->rank, vi->dims);
    if (count == 1) return 1;
    return vi->rank >= 1 && count == n && vi->dims[vi->rank - 1] == n;
}

/* For the binary node `node` reading v: its other operand when that is a column vector
 * and the output keeps v's shape, else TM_NONE. */
static tm_val other_operand(const tm_ctx *c, int32_t node, tm_val v, int64_t n) {
    const tm_rnode *rn = &c->nodes[node];
    if (rn->nin != 2 || (rn->in[0] == v) == (rn->in[1] == v)) return TM_NONE;
    tm_val o = rn->in[0] == v ? rn->in[1] : rn->in[0];
    const tm_vinfo *x = &c->vals[v], *y = &c->vals[rn->out[0]];
    if (y->dtype != TM_FLOAT || y->rank != x->rank ||
        memcmp(y->dims, x->dims, (size_t)x->rank * sizeof x->dims[0]))
        return TM_NONE;
    return column_vector(c, o, n) ? o : TM_NONE;
}

/* The chain after the MATMUL_INTEGER node mi, when it applies (else TM_OK, untouched). */
static tm_status fuse(tm_pass_scan *s, int32_t mi) {
    tm_ctx *c = s->c;
    const tm_rnode *q = &c->nodes[mi];
    if (q->args.i[2] || q->nin != 3) return TM_OK;
    int64_t n = q->args.i[1];
    int32_t cast = tm__pass_only_reader(s, q->out[0], mi + 1);
    if (cast < 0 || c->nodes[cast].prim != TM_P_CAST || c->nodes[cast].args.i[0] != TM_FLOAT)
        return TM_OK;
    tm_val f = c->nodes[cast].out[0];
    int32_t mul = tm__pass_only_reader(s, f, cast + 1);
    if (mul < 0 || c->nodes[mul].prim != TM_P_MUL) return TM_OK;
    tm_val scale = other_operand(c, mul, f, n);
    if (scale == TM_NONE) return TM_OK;
    int32_t at = mul;
    tm_val bias = TM_NONE, cur = c->nodes[mul].out[0];
    int32_t add = tm__pass_only_reader(s, cur, mul + 1);
    if (add >= 0 && c->nodes[add].prim == TM_P_ADD) {
        bias = other_operand(c, add, cur, n);
        if (bias != TM_NONE) {
            at = add;
            cur = c->nodes[add].out[0];
        }
    }
    tm_pass_epilogue ep;
    tm__pass_match_epilogue(s, at, cur, 1, &ep);
    /* The fused node takes the last node's place: its inputs exist by then (they were read
     * there), and A, B and the zero point come before. */
    tm_val in[6] = {q->in[0], q->in[1], q->in[2], scale};
    int nin = 4;
    if (bias != TM_NONE) in[nin++] = bias;
    if (ep.residual != TM_NONE) in[nin++] = ep.residual;
    tm_args a = q->args;
    a.i[2] = 1;
    a.i[3] = bias != TM_NONE;
    a.i[4] = ep.residual != TM_NONE;
    tm__chain_encode(&ep.chain, a.i + TM_QGEMM_ARG_CHAIN);
    tm_status st = tm__pass_rewrite_epilogue(s, &ep, TM_P_MATMUL_INTEGER, in, nin, &a);
    return st == TM_ERR_SHAPE ? TM_OK : st;
}

static int is_matmul_integer(const tm_rnode *n) { return n->prim == TM_P_MATMUL_INTEGER; }

tm_status tm__pass_matmul_integer(tm_ctx *c, const tm_pass_roots *roots) {
    return tm__pass_each(c, roots, is_matmul_integer, fuse);
}
