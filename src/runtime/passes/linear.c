/* Fuses a float32 MatMul by a constant weight, and what follows it elementwise, into one
 * LINEAR primitive whose weight is packed here, once, for the GEMM micro-kernel:
 *   y = MATMUL(x, W); [y = ADD(y, bias)]; [elementwise steps: a chain]; [y = ADD(y, r)]
 * with W a constant (..., K, N) whose leading dims are 1, bias a constant of N values
 * along the last axis, each chain step a whitelisted unary or a binary with a scalar
 * constant, r a tensor of the output's shape. Every intermediate is read once and is not
 * a root. Any number of rows: a decode step (one row) reads the packed panels as one
 * sequential stream, which row-major W read column block by column block is not. */
#include <stdlib.h>
#include <string.h>
#include "../passes.h"
#include "../pack_cache.h"
#include "../../core/prims/fused.h"
#include "../../backends/cpu/gemm.h"

#define MIN_ROWS 1
#define ARG_CHAIN 6

typedef struct packed_weight {
    tm_val source, packed;
} packed_weight;

typedef struct matcher {
    tm_pass_scan scan;
    packed_weight *packed;   /* weights packed so far: each once per plan */
    int n_packed;
} matcher;

/* The packed copy of weight w (K, N) as a constant, made once per weight: once per plan,
 * and once per model for an initializer (the model's cache, shared by its plans). */
static tm_val packed_weight_of(matcher *m, tm_val w, int64_t k, int64_t n, int panel,
                               int depth) {
    tm_ctx *c = m->scan.c;
    for (int i = 0; i < m->n_packed; i++)
        if (m->packed[i].source == w) return m->packed[i].packed;
    const tm_vinfo *wi = &c->vals[w];
    tm_pack_key key = {wi->origin, wi->data->nbytes, {n, k, panel, depth}, 1};
    const tm_tensor *shared = c->pack_cache ? tm__pack_cache_find(c->pack_cache, &key) : NULL;
    tm_val v;
    if (shared) {
        v = tm_val_tensor(c, (tm_tensor *)shared, 1);
    } else {
        int64_t count = (int64_t)tm_sgemm_packed_floats(n, k, panel);
        tm_tensor *t = tm__pass_packed_tensor(c, count, c->pack_cache && key.origin);
        if (!t) return TM_NONE;
        /* Misaligned bytes of the model (vinfo.misaligned) are packed through a copy of
         * this weight alone, freed at once: the model keeps no aligned copy of a weight
         * that only its packed form reads. */
        const float *src = wi->data->data;
        float *bounce = NULL;
        if (wi->misaligned) {
            bounce = malloc(wi->data->nbytes ? wi->data->nbytes : 1);
            if (!bounce) {
                tm_tensor_free(t);   /* its data too, unless the model's chunks own it */
                tm_ctx_fail(c, TM_ERR_NO_MEMORY, "out of memory packing a weight");
                return TM_NONE;
            }
            memcpy(bounce, wi->data->data, wi->data->nbytes);
            src = bounce;
        }
        tm_sgemm_pack_b(0, n, k, src, n, panel, depth, t->data);
        free(bounce);
        /* The packed copy is what plans read from now on: the file's pages of an
         * initializer go back (the model's weights are held once, not twice). */
        if (key.origin && key.origin == wi->data->data && c->fold_cache &&
            c->fold_cache->release)
            c->fold_cache->release(c->fold_cache, wi->data->data, wi->data->nbytes);
        if (c->pack_cache && key.origin) {
            shared = tm__pack_cache_put(c->pack_cache, &key, t);
            v = shared ? tm_val_tensor(c, (tm_tensor *)shared, 1) : TM_NONE;
        } else {
            v = tm_val_tensor(c, t, 0);
        }
    }
    if (v == TM_NONE) return TM_NONE;
    packed_weight *grown = realloc(m->packed, (size_t)(m->n_packed + 1) * sizeof *grown);
    if (!grown) return v;
    m->packed = grown;
    m->packed[m->n_packed++] = (packed_weight){w, v};
    return v;
}

static tm_status fuse_at(matcher *m, int32_t mm) {
    tm_ctx *c = m->scan.c;
    const tm_rnode *node = &c->nodes[mm];
    tm_val x = node->in[0], w = node->in[1], y = node->out[0];
    const tm_vinfo *xi = &c->vals[x], *wi = &c->vals[w];
    /* Plain x . w only: a frozen weight read transposed (x . w^T, an input's cotangent
     * in a gradient plan) is not this product. */
    if (!tm__pass_is_plain_matmul(node)) return TM_OK;
    if (xi->dtype != TM_FLOAT || wi->dtype != TM_FLOAT || !wi->data || xi->data) return TM_OK;
    if (xi->rank < 2 || wi->rank != xi->rank) return TM_OK;
    for (int d = 0; d < wi->rank - 2; d++)
        if (wi->dims[d] != 1) return TM_OK;
    int64_t k = wi->dims[wi->rank - 2], n = wi->dims[wi->rank - 1];
    if (k < 1 || n < 1 || tm_numel(xi->rank, xi->dims) / k < MIN_ROWS) return TM_OK;
    /* A bias first (ADD of a row vector), then whatever elementwise run follows. */
    int32_t at;
    tm_val cur, bias = tm__pass_match_bias(&m->scan, mm, y, n, 0, &at, &cur);
    tm_pass_epilogue ep;
    tm__pass_match_epilogue(&m->scan, at, cur, 1, &ep);
    int panel, depth;
    tm_sgemm_pack_layout(&panel, &depth);
    tm_val in[4];
    int nin = 0;
    in[nin++] = x;
    in[nin++] = packed_weight_of(m, w, k, n, panel, depth);
    if (bias != TM_NONE) in[nin++] = tm__pass_bias_vector(c, bias, n);
    if (ep.residual != TM_NONE) in[nin++] = ep.residual;
    for (int i = 0; i < nin; i++)
        if (in[i] == TM_NONE) return tm_ctx_ok(c) ? TM_ERR_NO_MEMORY : c->status;
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = n;
    a.i[1] = k;
    a.i[2] = panel;
    a.i[3] = depth;
    a.i[4] = bias != TM_NONE;
    a.i[5] = ep.residual != TM_NONE;
    tm__chain_encode(&ep.chain, a.i + ARG_CHAIN);
    tm_status st = tm__pass_rewrite_epilogue(&m->scan, &ep, TM_P_LINEAR, in, nin, &a);
    if (st == TM_ERR_SHAPE) return TM_OK;
    if (st != TM_OK) return st;
    /* A weight the context owns (a copy of misaligned file data, a folded constant) that
     * only this product read is dead now: free it at once, so that making a plan never
     * holds every weight twice over. (The dead product still names it; nothing reads a
     * dead node's inputs.) */
    /* The rewrite dropped the product's reads from the counts when it replaced the
     * product itself; when it replaced a later node, the dead product's read of w goes
     * here. Any reader left (a gradient's product by the same frozen weight) keeps it. */
    if (ep.last != mm && w < m->scan.n_uses) m->scan.uses[w]--;
    tm_vinfo *wv = &c->vals[w];
    if (wv->owned && w < m->scan.n_uses && m->scan.uses[w] == 0 && !tm__pass_is_root(m->scan.roots, w)) {
        tm_tensor_free(wv->data);
        wv->data = NULL;
        wv->owned = 0;
        m->scan.uses[w] = 0;
    }
    return TM_OK;
}

tm_status tm__pass_linear(tm_ctx *c, const tm_pass_roots *roots) {
    uint8_t *live = NULL;
    int *uses = tm__pass_live_use_counts(c, roots, &live);
    if (!uses) return TM_ERR_NO_MEMORY;
    matcher m = {{c, uses, c->n_vals, roots, live}, NULL, 0};
    tm_status st = TM_OK;
    int32_t n_nodes = c->n_nodes;
    for (int32_t i = 0; i < n_nodes && st == TM_OK; i++)
        if (live[i] && tm__pass_is_plain_matmul(&c->nodes[i])) st = fuse_at(&m, i);
    free(m.packed);
    free(uses);
    free(live);
    return st;
}
