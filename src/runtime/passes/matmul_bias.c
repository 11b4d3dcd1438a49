/* Puts the bias of a float32 MatMul by a weight the plan does not know (a trainable
 * parameter, read where the optimizer keeps it; LINEAR takes the constant ones) into the
 * product: y = MATMUL(x, W); y = ADD(y, bias) becomes MATMUL(x, W, bias), which adds the
 * bias to each tile while it is in cache, and whose gradient rule sums the bias's
 * cotangent. W of any rank whose leading dims are 1, the bias as tm__pass_match_bias
 * finds it (a constant, or a model parameter reshaped to broadcast). */
#include <string.h>
#include "../passes.h"

static tm_status fuse_at(tm_pass_scan *s, int32_t mm) {
    tm_ctx *c = s->c;
    const tm_rnode *node = &c->nodes[mm];
    tm_val x = node->in[0], w = node->in[1], y = node->out[0];
    const tm_vinfo *xi = &c->vals[x], *wi = &c->vals[w];
    if (xi->dtype != TM_FLOAT || wi->dtype != TM_FLOAT || wi->data || xi->rank < 2 ||
        wi->rank != xi->rank)
        return TM_OK;
    for (int d = 0; d < wi->rank - 2; d++)
        if (wi->dims[d] != 1) return TM_OK;
    int64_t n = wi->dims[wi->rank - 1];
    int32_t at;
    tm_val cur, other = tm__pass_match_bias(s, mm, y, n, 1, &at, &cur);
    if (other == TM_NONE) return TM_OK;
    tm_val bias = tm__pass_bias_vector(c, other, n);
    if (bias == TM_NONE) return tm_ctx_ok(c) ? TM_ERR_NO_MEMORY : c->status;
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
