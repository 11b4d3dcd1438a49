/* Gives a 4-bit MatMulNBits product (MATMUL_NBITS on repacked weights, i[6] = 1) what
 * follows it elementwise, as LINEAR has it (passes/linear.c):
 *   y = MATMUL_NBITS(x, P); [y = ADD(y, bias)]; [elementwise steps: a chain]; [y = ADD(y, r)]
 * with bias a constant of N values along the last axis, each chain step a whitelisted
 * unary or a binary with a scalar, r a tensor of the output's shape. The weights stay
 * 4-bit; the kernel (backends/cpu/nbits.c) runs the epilogue on each block of output it
 * finishes, while the block is in cache, so a decoder's residual add or an encoder's
 * bias and GELU no longer read and write the whole output again. Every intermediate is
 * read once and is not a root. Not while taping: the gradient rule is the plain
 * product's. */
#include <stdlib.h>
#include <string.h>
#include "../passes.h"
#include "../../core/prims/fused.h"

static tm_status fuse_at(tm_pass_scan *s, int32_t mm) {
    tm_ctx *c = s->c;
    const tm_rnode *node = &c->nodes[mm];
    const tm_args *na = &node->args;
    if (!na->i[6] || na->i[7] || na->i[8] || na->i[TM_NBITS_ARG_CHAIN] || node->nin != 2)
        return TM_OK;
    tm_val x = node->in[0], y = node->out[0];
    const tm_vinfo *yi = &c->vals[y];
    if (yi->dtype != TM_FLOAT || yi->rank < 1) return TM_OK;
    if (c->tape && c->vals[x].tracked) return TM_OK;
    int64_t n = na->i[1];
    int32_t at;
    tm_val cur, bias = tm__pass_match_bias(s, mm, y, n, 0, &at, &cur);
    tm_pass_epilogue ep;
    tm__pass_match_epilogue(s, at, cur, 1, &ep);
    if (ep.residual != TM_NONE && c->tape && c->vals[ep.residual].tracked) return TM_OK;
    if (bias == TM_NONE && ep.residual == TM_NONE && ep.chain.n == 0) return TM_OK;
    tm_val in[4];
    int nin = 0;
    in[nin++] = x;
    in[nin++] = node->in[1];
    if (bias != TM_NONE) in[nin++] = tm__pass_bias_vector(c, bias, n);
    if (ep.residual != TM_NONE) in[nin++] = ep.residual;
    for (int i = 0; i < nin; i++)
        if (in[i] == TM_NONE) return tm_ctx_ok(c) ? TM_ERR_NO_MEMORY : c->status;
    tm_args a = *na;
    a.i[7] = bias != TM_NONE;
    a.i[8] = ep.residual != TM_NONE;
    tm__chain_encode(&ep.chain, a.i + TM_NBITS_ARG_CHAIN);
    tm_status st = tm__pass_rewrite_epilogue(s, &ep, TM_P_MATMUL_NBITS, in, nin, &a);
    return st == TM_ERR_SHAPE ? TM_OK : st;
}

static int is_nbits(const tm_rnode *n) { return n->prim == TM_P_MATMUL_NBITS; }

tm_status tm__pass_nbits(tm_ctx *c, const tm_pass_roots *roots) {
    return tm__pass_each(c, roots, is_nbits, fuse_at);
}
