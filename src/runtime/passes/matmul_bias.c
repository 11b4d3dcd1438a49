/* Puts the bias of a float32 MatMul by a weight the plan does not know (a trainable
 * parameter, read where the optimizer keeps it; LINEAR takes the constant ones) into the
 * product: y = MATMUL(x, W); y = ADD(y, bias) becomes MATMUL(x, W, bias), which adds the
 * bias to each tile while it is in cache, and whose gradient rule sums the bias's
 * cotangent. W of any rank whose leading dims are 1, bias a vector of N values (a model
 * parameter reshaped to broadcast, or a constant), y read only by the ADD and not a root,
 * the ADD not broadcasting y. */
#include <string.h>
#include "../passes.h"

/* The (N) vector the ADD's other operand holds, or TM_NONE. */
static tm_val bias_vector(tm_ctx *c, tm_val other, int rank, int64_t n) {
    const tm_vinfo *oi = &c->vals[other];
    if (oi->dtype != TM_FLOAT) return TM_NONE;
    if (oi->rank == 1 && oi->dims[0] == n) return other;
    if (tm__pass_is_row_vector(c, other, rank, n)) return tm__pass_bias_vector(c, other, n);
    const tm_rnode *r = tm__pass_producer(c, other, TM_P_RESHAPE);
    if (!r || oi->rank != rank || oi->dims[rank - 1] != n) return TM_NONE;
    for (int d = 0; d < rank - 1; d++)
        if (oi->dims[d] != 1) return TM_NONE;
    const tm_vinfo *src = &c->vals[r->in[0]];
    return src->dtype == TM_FLOAT && src->rank == 1 && src->dims[0] == n ? r->in[0] : TM_NONE;
}

static tm_status fuse_at(tm_pass_scan *s, int32_t mm) {
    tm_ctx *c = s->c;
    const tm_rnode *node = &c->nodes[mm];
    tm_val x = node->in[0], w = node->in[1], y = node->out[0];
    const tm_vinfo *xi = &c->vals[x], *wi = &c->vals[w], *yi = &c->vals[y];
    if (xi->dtype != TM_FLOAT || wi->dtype != TM_FLOAT || wi->data || xi->rank < 2 ||
        wi->rank != xi->rank)
        return TM_OK;
    for (int d = 0; d < wi->rank - 2; d++)
        if (wi->dims[d] != 1) return TM_OK;
    int64_t n = wi->dims[wi->rank - 1];
    int32_t at = tm__pass_only_reader(s, y, mm + 1);
    if (at < 0 || c->nodes[at].prim != TM_P_ADD || c->nodes[at].nin != 2) return TM_OK;
    const tm_rnode *add = &c->nodes[at];
    tm_val other = add->in[0] == y ? add->in[1] : add->in[0];
    const tm_vinfo *ai = &c->vals[add->out[0]];
    if (other == y || ai->rank != yi->rank ||
        memcmp(ai->dims, yi->dims, (size_t)yi->rank * sizeof yi->dims[0]))
        return TM_OK;
    tm_val bias = bias_vector(c, other, yi->rank, n);
    if (bias == TM_NONE) return tm_ctx_ok(c) ? TM_OK : c->status;
    tm_val in[3] = {x, w, bias};
    tm_args a;
    memset(&a, 0, sizeof a);
    tm_status st = tm__pass_rewrite(c, at, TM_P_MATMUL, in, 3, &a);
    if (st == TM_ERR_SHAPE) return TM_OK;
    if (st != TM_OK) return st;
    /* The ADD's reads go (y's was its only one: the product is dead now); the fused
     * product's come. */
    if (y < s->n_uses) s->uses[y]--;
    if (other < s->n_uses) s->uses[other]--;
    for (int i = 0; i < 3; i++)
        if (in[i] < s->n_uses) s->uses[in[i]]++;
    return TM_OK;
}

static int wants(const tm_rnode *n) { return tm__pass_is_plain_matmul(n); }

tm_status tm__pass_matmul_bias(tm_ctx *c, const tm_pass_roots *roots) {
    return tm__pass_each(c, roots, wants, fuse_at);
}
