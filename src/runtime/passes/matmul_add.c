/* Puts a residual ADD into the product before it: y = MATMUL(x, W[, bias]); z = ADD(y, r)
 * (either order), r of y's dims, becomes z = MATMUL_ADD(x, W[, bias], r), which adds r to
 * each tile while it is in cache; and z = MUL(y, f) after a product without a bias
 * becomes z = MATMUL_MUL(x, W, f), each tile multiplied in its epilogue, or as it is
 * stored when written transposed (a gradient plan's cotangent through GELU, f the
 * derivative that MATMUL_GELU kept: passes/matmul_gelu.c; subnormals flushed, gemm.h's
 * mul). What it finds is in a gradient plan, once the backward is built (in an inference
 * plan LINEAR has taken the products whose weights it knows; any other it fuses the same
 * way, to the same bits). In a training step's forward the weights are parameters, so
 * LINEAR (which takes a residual too) does not apply, and the ADD read both of its
 * operands back from memory and wrote a new one. The backward's sums of cotangents (x's
 * from q, k and v and the residual path) are such ADDs after products written transposed:
 * those take r as each tile is stored. y's only live reader must be the ADD or MUL, and
 * not a root: then nothing else needs y (a forward MUL's gradient, which reads y, would
 * be another reader). MATMUL_ADD and MATMUL_MUL have no gradient rule: passes.c keeps
 * them off tracked values while the tape runs. */
#include <string.h>
#include "../passes.h"

static tm_status fuse_at(tm_pass_scan *s, int32_t mm) {
    tm_ctx *c = s->c;
    const tm_rnode *node = &c->nodes[mm];
    tm_val y = node->out[0], seen = y;   /* seen: what the ADD reads */
    if (c->vals[y].dtype != TM_FLOAT) return TM_OK;
    int32_t at = tm__pass_only_reader(s, y, mm + 1);
    /* A product written transposed is (n, m); the backward reshapes it to x's dims. */
    if (at >= 0 && node->args.i[2] && c->nodes[at].prim == TM_P_RESHAPE) {
        seen = c->nodes[at].out[0];
        at = tm__pass_only_reader(s, seen, at + 1);
    }
    if (at < 0 || c->nodes[at].nin != 2) return TM_OK;
    /* A MUL only after a product without a bias (GELU's backward: MATMUL_MUL). */
    int prim = c->nodes[at].prim == TM_P_ADD                     ? TM_P_MATMUL_ADD
               : c->nodes[at].prim == TM_P_MUL && node->nin == 2 ? TM_P_MATMUL_MUL
                                                                 : -1;
    if (prim < 0) return TM_OK;
    const tm_rnode *add = &c->nodes[at];
    tm_val r = add->in[0] == seen ? add->in[1] : add->in[0];
    const tm_vinfo *si = &c->vals[seen], *ri = &c->vals[r];
    if (r == seen || ri->dtype != TM_FLOAT || ri->rank != si->rank ||
        memcmp(ri->dims, si->dims, (size_t)si->rank * sizeof si->dims[0]))
        return TM_OK;
    tm_val in[4];
    int nin = node->nin;
    memcpy(in, node->in, (size_t)nin * sizeof in[0]);
    in[nin++] = r;
    tm_args a = node->args;   /* a product written transposed keeps its flags */
    tm_status st = tm__pass_rewrite(c, at, prim, in, nin, &a);
    if (st == TM_ERR_SHAPE) return TM_OK;
    if (st != TM_OK) return st;
    /* The ADD's reads go (y's was its only one: the product is dead now, and the plan
     * drops it); the fused node reads what the product read, and r. */
    if (y < s->n_uses) s->uses[y]--;
    if (seen != y && seen < s->n_uses) s->uses[seen]--;
    if (r < s->n_uses) s->uses[r]--;
    for (int i = 0; i < nin; i++)
        if (in[i] < s->n_uses) s->uses[in[i]]++;
    return TM_OK;
}

/* A product with x as stored, with or without its bias (MATMUL's third input), W as
 * stored or transposed (a backward's cotangent by a weight, gy W^T, over a batch of
 * rows), or one written transposed (gy W^T as (W gy^T)^T, a single matrix's): the ADD
 * after the last two sums x's cotangents, the MUL (no bias) takes GELU's derivative. */
static int wants(const tm_rnode *n) {
    if (n->prim != TM_P_MATMUL) return 0;
    if (n->args.i[2]) return n->nin == 2;
    return (n->nin == 2 || n->nin == 3) && !n->args.i[0];
}

tm_status tm__pass_matmul_add(tm_ctx *c, const tm_pass_roots *roots) {
    return tm__pass_each(c, roots, wants, fuse_at);
}
