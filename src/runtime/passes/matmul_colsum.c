/* Reads a gradient once for a weight's and its bias's gradients, after a gradient plan's
 * backward is built:
 *   db = REDUCE_SUM(g over every axis but the last); ... dW = MATMUL(x, g', i[0]=1)
 * (g' g itself or g reshaped to rows of the same N) becomes (db, dW) = MATMUL_COLSUM(x,
 * g), the sums taken while the product packs g's blocks, where REDUCE_SUM read all of g
 * again. The fused node takes the REDUCE_SUM's place (its output keeps its value and
 * position) and the product's readers read its second output; x and g must be made
 * before it (x through a reshape of rows as stored, when that reshape comes later). The
 * product reads x and g as stored, as one matrix each (no batch), and is not a root. */
#include <string.h>
#include "../passes.h"

/* v, or what it reshapes while that keeps rows of `last` floats (the same floats in the
 * same order), when v is made at or after node `before`. TM_NONE: neither is early enough. */
static tm_val early_rows(const tm_ctx *c, tm_val v, int64_t last, int32_t before) {
    for (int hops = 0; hops < 4 && v >= 0; hops++) {
        const tm_vinfo *vi = &c->vals[v];
        if (vi->rank < 2 || vi->dims[vi->rank - 1] != last) return TM_NONE;
        if (vi->producer < before) return v;
        const tm_rnode *r = tm__pass_producer(c, v, TM_P_RESHAPE);
        if (!r) return TM_NONE;
        v = r->in[0];
    }
    return TM_NONE;
}

/* 1 when w is g, or a reshape of g to rows of g's last dim. */
static int rows_of(const tm_ctx *c, tm_val w, tm_val g) {
    if (w == g) return 1;
    const tm_rnode *r = tm__pass_producer(c, w, TM_P_RESHAPE);
    const tm_vinfo *wi = &c->vals[w], *gi = &c->vals[g];
    return r && r->in[0] == g && wi->rank >= 2 &&
           wi->dims[wi->rank - 1] == gi->dims[gi->rank - 1];
}

static tm_status fuse_at(tm_pass_scan *s, int32_t si) {
    tm_ctx *c = s->c;
    const tm_rnode *sum = &c->nodes[si];
    tm_val g = sum->in[0];
    const tm_vinfo *gi = &c->vals[g];
    if (gi->dtype != TM_FLOAT || gi->rank < 2 || sum->args.i[0] != (1 << (gi->rank - 1)) - 1)
        return TM_OK;
    int64_t n = gi->dims[gi->rank - 1];
    /* The weight's gradient: a live x^T g after the sum. */
    int32_t mi = -1;
    for (int32_t i = si + 1; i < c->n_nodes && mi < 0; i++) {
        const tm_rnode *m = &c->nodes[i];
        if (s->live[i] && m->prim == TM_P_MATMUL && m->nin == 2 && m->args.i[0] == 1 &&
            !m->args.i[1] && !m->args.i[2] && rows_of(c, m->in[1], g))
            mi = i;
    }
    if (mi < 0) return TM_OK;
    const tm_rnode *m = &c->nodes[mi];
    tm_val dw = m->out[0];
    const tm_vinfo *wi = &c->vals[dw];
    if (tm__pass_is_root(s->roots, dw) || wi->dims[wi->rank - 1] != n) return TM_OK;
    for (int d = 0; d < wi->rank - 2; d++)
        if (wi->dims[d] != 1) return TM_OK;   /* a batch of products */
    int64_t k = wi->dims[wi->rank - 2];
    tm_val x = early_rows(c, m->in[0], k, si);
    if (x == TM_NONE) return TM_OK;
    tm_val in[2] = {x, g};
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = c->vals[sum->out[0]].rank;
    a.i[1] = wi->rank;
    tm_status st = tm__pass_rewrite(c, si, TM_P_MATMUL_COLSUM, in, 2, &a);
    if (st == TM_ERR_SHAPE) return TM_OK;
    if (st != TM_OK) return st;
    /* The product's readers read the fused node's second output; the product is dead. */
    tm_val fused = c->nodes[si].out[1];
    for (int32_t i = mi + 1; i < c->n_nodes; i++)
        for (int j = 0; j < c->nodes[i].nin; j++)
            if (c->nodes[i].in[j] == dw) c->nodes[i].in[j] = fused;
    if (dw < s->n_uses) s->uses[dw] = 0;   /* fused is a new value, past the counts */
    for (int j = 0; j < m->nin; j++)
        if (m->in[j] < s->n_uses) s->uses[m->in[j]]--;
    if (x < s->n_uses) s->uses[x]++;
    return TM_OK;
}

static int wants(const tm_rnode *n) { return n->prim == TM_P_REDUCE_SUM && n->nin == 1; }

tm_status tm__pass_matmul_colsum(tm_ctx *c, const tm_pass_roots *roots) {
    return tm__pass_each(c, roots, wants, fuse_at);
}
