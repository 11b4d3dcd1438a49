/* Puts a GELU into the product before it when a gradient also reads the product:
 *   y = MATMUL(x, W[, bias]); g = GELU(y); ... GELU_GRAD(y, gy)
 * becomes (g, d) = MATMUL_GELU(x, W[, bias]) with d = GELU'(y) (its i[3]), and the
 * GELU_GRAD becomes MUL(gy, d): GELU_GRAD's factor computed in the forward from the
 * normal cdf that GELU computes anyway (one exponential more there), the backward a
 * multiply, which passes/matmul_add.c then puts into the product before it (MATMUL_MUL,
 * subnormals flushed as GELU_GRAD's vector kernel does): the same bits as GELU_GRAD's f32
 * vector kernel. With TM_REFERENCE_KERNELS=1, whose GELU_GRAD computes in double, the
 * GELU_GRAD stays and output 1 keeps y. A gradient plan's forward keeps what GELU's
 * backward reads, so LINEAR's epilogue (which leaves only g) cannot take the GELU, and a
 * GELU of its own reads all of y back from memory; the fused kernel writes both from each
 * tile while it is in cache. Only after differentiation (MATMUL_GELU has no gradient rule:
 * passes.c keeps it off tracked values while the tape runs); float32, erf form, W's
 * leading dims 1, y read by exactly the GELU and that GELU_GRAD and not a root. */
#include <string.h>
#include "../passes.h"
#include "../../backends/cpu/gemm.h"

static tm_status fuse_at(tm_pass_scan *s, int32_t gi) {
    tm_ctx *c = s->c;
    const tm_rnode *gelu = &c->nodes[gi];
    tm_val y = gelu->in[0];
    if (gelu->args.i[0] != 0 || c->vals[y].dtype != TM_FLOAT || y >= s->n_uses ||
        s->uses[y] != 2 || tm__pass_is_root(s->roots, y))
        return TM_OK;
    const tm_rnode *mm = tm__pass_producer(c, y, TM_P_MATMUL);
    /* Operands as stored; their dtype, ranks and W's leading dims are MATMUL_GELU's shape
     * rule's to check (tm__pass_rewrite leaves the node alone when it refuses). */
    if (!mm || (mm->nin != 2 && mm->nin != 3) || mm->args.i[0] || mm->args.i[1] ||
        mm->args.i[2])
        return TM_OK;
    /* y's other live reader: a GELU_GRAD (erf form) of y, after the GELU. */
    int32_t grad = -1;
    for (int32_t i = gi + 1; i < c->n_nodes && grad < 0; i++) {
        if (!s->live[i]) continue;
        for (int j = 0; j < c->nodes[i].nin; j++)
            if (c->nodes[i].in[j] == y) {
                grad = i;
                break;
            }
    }
    if (grad < 0) return TM_OK;
    const tm_rnode *gg = &c->nodes[grad];
    if (gg->prim != TM_P_GELU_GRAD || gg->args.i[0] != 0 || gg->in[0] != y || gg->in[1] == y)
        return TM_OK;
    tm_val gy = gg->in[1];
    int derivative = c->vals[gy].dtype == TM_FLOAT && !tm_use_reference_kernels();
    tm_val in[3];
    int nin = mm->nin;
    memcpy(in, mm->in, (size_t)nin * sizeof in[0]);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[3] = derivative;   /* output 1: GELU'(y), or y */
    tm_status st = tm__pass_rewrite(c, gi, TM_P_MATMUL_GELU, in, nin, &a);
    if (st == TM_ERR_SHAPE) return TM_OK;
    if (st != TM_OK) return st;
    /* The gradient multiplies by the fused node's derivative (or reads its product); the
     * old product has no reader left (the plan drops it), and the fused node reads what
     * it read. */
    tm_val saved = c->nodes[gi].out[1];
    tm_args none;
    memset(&none, 0, sizeof none);
    st = derivative ? tm__pass_rewrite(c, grad, TM_P_MUL, (tm_val[2]){gy, saved}, 2, &none)
                    : TM_ERR_SHAPE;
    if (st != TM_OK && st != TM_ERR_SHAPE) return st;
    if (st == TM_ERR_SHAPE) {   /* GELU_GRAD reads the kept product (reference kernels; or
                                 * a refused MUL, not met: gy has y's dims) */
        c->nodes[gi].args.i[3] = 0;
        c->nodes[grad].in[0] = saved;
    }
    s->uses[y] = 0;
    for (int i = 0; i < nin; i++)
        if (in[i] < s->n_uses) s->uses[in[i]]++;
    return TM_OK;
}

static int wants(const tm_rnode *n) { return n->prim == TM_P_GELU && n->nin == 1; }

tm_status tm__pass_matmul_gelu(tm_ctx *c, const tm_pass_roots *roots) {
    return tm__pass_each(c, roots, wants, fuse_at);
}
