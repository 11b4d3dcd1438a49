/* The list of plan-time passes and their driver (see ../passes.h). Each pass lives in its
 * own file in this folder and is listed here once. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../passes.h"
#include "../pack_cache.h"
#include "../../backends/cpu/gemm.h"

typedef tm_status (*tm_pass_fn)(tm_ctx *c, const tm_pass_roots *roots);

/* Passes, in the order they run. */
static const tm_pass_fn passes[] = {
    tm__pass_layernorm,
    tm__pass_gelu,
    tm__pass_matmul_integer,
    tm__pass_attention,
    tm__pass_linear,   /* after gelu: a fused GELU becomes a step of its chain */
    tm__pass_matmul_bias,   /* after linear: the products it left */
    tm__pass_matmul_gelu,   /* after matmul_bias; only once a gradient reads the product */
    tm__pass_matmul_add,    /* after matmul_bias; only once the backward is built */
    tm__pass_matmul_colsum, /* likewise */
    tm__pass_conv,
    tm__pass_nbits,    /* after gelu too */
    tm__pass_index_add,
    tm__pass_kv_append,   /* after attention: ATTENTION reads the cache it keeps */
};

int tm__pass_uses(const tm_ctx *c, tm_val v) {
    int n = 0;
    for (int32_t i = 0; i < c->n_nodes; i++)
        for (int j = 0; j < c->nodes[i].nin; j++)
            if (c->nodes[i].in[j] == v) n++;
    return n;
}

int *tm__pass_use_counts(const tm_ctx *c) {
    int *uses = calloc((size_t)c->n_vals + 1, sizeof *uses);
    if (!uses) return NULL;
    for (int32_t i = 0; i < c->n_nodes; i++)
        for (int j = 0; j < c->nodes[i].nin; j++)
            if (c->nodes[i].in[j] >= 0 && c->nodes[i].in[j] < c->n_vals) uses[c->nodes[i].in[j]]++;
    return uses;
}

int *tm__pass_live_use_counts(const tm_ctx *c, const tm_pass_roots *roots, uint8_t **live_out) {
    int *uses = calloc((size_t)c->n_vals + 1, sizeof *uses);
    uint8_t *live = calloc((size_t)c->n_nodes + 1, 1);
    tm_val *stack = malloc(((size_t)c->n_vals + 1) * sizeof *stack);
    uint8_t *pushed = calloc((size_t)c->n_vals + 1, 1);
    if (!uses || !live || !stack || !pushed) {
        free(uses), free(live), free(stack), free(pushed);
        return NULL;
    }
    int32_t n = 0;
    for (int i = 0; roots && i < roots->n; i++)
        if (roots->vals[i] >= 0 && roots->vals[i] < c->n_vals && !pushed[roots->vals[i]]) {
            pushed[roots->vals[i]] = 1;
            stack[n++] = roots->vals[i];
        }
    /* Each value is pushed once, so the stack never holds more than n_vals. */
    while (n) {
        tm_val v = stack[--n];
        int32_t p = c->vals[v].producer;
        if (c->vals[v].data || p < 0 || p >= c->n_nodes || live[p]) continue;
        live[p] = 1;
        for (int j = 0; j < c->nodes[p].nin; j++) {
            tm_val u = c->nodes[p].in[j];
            if (u >= 0 && u < c->n_vals && !pushed[u]) {
                pushed[u] = 1;
                stack[n++] = u;
            }
        }
    }
    for (int32_t i = 0; i < c->n_nodes; i++)
        for (int j = 0; live[i] && j < c->nodes[i].nin; j++)
            if (c->nodes[i].in[j] >= 0 && c->nodes[i].in[j] < c->n_vals) uses[c->nodes[i].in[j]]++;
    free(stack), free(pushed);
    if (live_out) *live_out = live;
    else free(live);
    return uses;
}

tm_tensor *tm__pass_packed_tensor(tm_ctx *c, int64_t floats, int shared) {
    const size_t huge = (size_t)2 << 20;
    size_t bytes = (size_t)(floats > 0 ? floats : 1) * sizeof(float);
    void *data;
    if (shared && !c->allocator && c->pack_cache &&
        (data = tm__pack_cache_alloc(c->pack_cache, bytes)) != NULL) {
        /* In the model's chunks on huge pages, which own it. */
        return tm_tensor_borrow(TM_FLOAT, 1, &floats, data);
    }
    if (!c->allocator && bytes >= 2 * huge) {
        /* Whole huge pages: aligned to 2 MiB, advised before anything touches them (a
         * zero fill would fault them in as small pages first). */
        data = aligned_alloc(huge, (bytes + huge - 1) / huge * huge);
        if (data) tm_sgemm_advise_packed(data, (bytes + huge - 1) / huge * huge);
    } else {
        data = tm__alloc(c->allocator, bytes);
    }
    if (!data) return NULL;
    tm_tensor *t = tm_tensor_borrow(TM_FLOAT, 1, &floats, data);
    if (!t) {
        tm__free(c->allocator, data);
        return NULL;
    }
    t->owns_data = 1;
    t->allocator = c->allocator;
    return t;
}

int tm__pass_is_root(const tm_pass_roots *roots, tm_val v) {
    for (int i = 0; roots && i < roots->n; i++)
        if (roots->vals[i] == v) return 1;
    return 0;
}

const tm_rnode *tm__pass_producer(const tm_ctx *c, tm_val v, int prim) {
    if (v < 0 || v >= c->n_vals || c->vals[v].data) return NULL;
    int32_t p = c->vals[v].producer;
    if (p < 0 || p >= c->n_nodes || c->nodes[p].prim != prim) return NULL;
    return &c->nodes[p];
}

int tm__pass_scalar(const tm_ctx *c, tm_val v, double *out) {
    if (v < 0 || v >= c->n_vals) return 0;
    const tm_tensor *t = c->vals[v].data;
    if (!t || !tm_dtype_is_float(t->dtype) || tm_tensor_numel_(t) != 1) return 0;
    *out = tm_load_f64(t->data, t->dtype, 0);
    return 1;
}

int tm__pass_scalar_is(const tm_ctx *c, tm_val v, double want) {
    double got;
    return tm__pass_scalar(c, v, &got) && fabs(got - want) <= 1e-6 * fabs(want);
}

tm_status tm__pass_rewrite(tm_ctx *c, int32_t node, int prim, const tm_val *in, int nin,
                           const tm_args *a) {
    const tm_prim_info *p = &tm_prims[prim];
    if (nin > 8 || p->nout > 4 || (p->nin >= 0 && p->nin != nin)) return TM_ERR_SHAPE;
    const tm_vinfo *vin[8];
    for (int i = 0; i < nin; i++) vin[i] = &c->vals[in[i]];
    /* While taping (a gradient plan fuses its forward before differentiating), a fused
     * primitive without a gradient rule would stop the backward: keep the pattern. */
    if (c->tape && (p->flags & TM_PF_NO_GRAD))
        for (int i = 0; i < nin; i++)
            if (vin[i]->tracked) return TM_ERR_SHAPE;
    tm_vinfo vout[4];
    memset(vout, 0, sizeof vout);
    size_t scratch = 0;
    /* A rejected candidate is no error: the context's sticky error is put back. */
    tm_status saved_status = c->status;
    tm_error saved_err = c->err;
    tm_status st = p->shape(c, prim, a, vin, nin, vout, p->nout, &scratch);
    if (st != TM_OK || !tm_ctx_ok(c)) {
        c->status = saved_status;
        c->err = saved_err;
        return TM_ERR_SHAPE;
    }
    const tm_vinfo *old = &c->vals[c->nodes[node].out[0]];
    if (vout[0].dtype != old->dtype || vout[0].rank != old->rank ||
        memcmp(vout[0].dims, old->dims, (size_t)old->rank * sizeof old->dims[0]))
        return TM_ERR_SHAPE;
    tm_val extra[4] = {TM_NONE, TM_NONE, TM_NONE, TM_NONE};
    for (int i = 1; i < p->nout; i++) {
        extra[i] = tm_val_symbolic(c, vout[i].dtype, vout[i].rank, vout[i].dims, -1);
        if (extra[i] == TM_NONE) return c->status;
    }
    tm_val *ins = malloc((size_t)(nin ? nin : 1) * sizeof *ins);
    if (!ins) return TM_ERR_NO_MEMORY;
    memcpy(ins, in, (size_t)nin * sizeof *ins);
    tm_rnode *n = &c->nodes[node];
    free(n->in);
    n->in = ins;
    n->nin = nin;
    n->prim = prim;
    n->nout = p->nout;
    n->args = *a;
    n->scratch = scratch;
    for (int i = 1; i < p->nout; i++) {
        n->out[i] = extra[i];
        c->vals[extra[i]].producer = node;
    }
    return TM_OK;
}

tm_status tm__run_passes(tm_ctx *c, const tm_pass_roots *roots) {
    const char *off = getenv("TM_NO_PASSES");
    if (off && off[0] == '1') return TM_OK;
    for (size_t i = 0; i < sizeof passes / sizeof passes[0]; i++) {
        if (!passes[i]) continue;
        tm_status st = passes[i](c, roots);
        if (st != TM_OK) return st;
    }
    return TM_OK;
}

int tm__pass_is_row_vector(const tm_ctx *c, tm_val v, int rank, int64_t n) {
    const tm_vinfo *vi = &c->vals[v];
    if (!vi->data || vi->dtype != TM_FLOAT || vi->rank != rank) return 0;
    for (int d = 0; d < rank - 1; d++)
        if (vi->dims[d] != 1) return 0;
    return vi->dims[rank - 1] == n;
}

int tm__pass_is_plain_matmul(const tm_rnode *n) {
    return n->prim == TM_P_MATMUL && n->nin == 2 && !n->args.i[0] && !n->args.i[1] &&
           !n->args.i[2];
}

int32_t tm__pass_only_reader(const tm_pass_scan *s, tm_val v, int32_t from) {
    if (v < 0 || v >= s->n_uses || s->uses[v] != 1 || tm__pass_is_root(s->roots, v)) return -1;
    for (int32_t i = from; i < s->c->n_nodes; i++)
        for (int j = 0; s->live[i] && j < s->c->nodes[i].nin; j++)
            if (s->c->nodes[i].in[j] == v) return i;
    return -1;
}

/* The 1-D f32 (n) value that v, of `rank` dims all 1 but the last n, reshapes; or TM_NONE. */
static tm_val reshaped_vector(const tm_ctx *c, tm_val v, int rank, int64_t n) {
    const tm_vinfo *vi = &c->vals[v];
    if (vi->dtype != TM_FLOAT || vi->rank != rank || vi->dims[rank - 1] != n) return TM_NONE;
    for (int d = 0; d < rank - 1; d++)
        if (vi->dims[d] != 1) return TM_NONE;
    const tm_rnode *r = tm__pass_producer(c, v, TM_P_RESHAPE);
    if (!r) return TM_NONE;
    const tm_vinfo *src = &c->vals[r->in[0]];
    return src->dtype == TM_FLOAT && src->rank == 1 && src->dims[0] == n ? r->in[0] : TM_NONE;
}

tm_val tm__pass_bias_vector(tm_ctx *c, tm_val b, int64_t n) {
    const tm_vinfo *bi = &c->vals[b];
    if (bi->rank == 1) return b;
    if (!bi->data) return reshaped_vector(c, b, bi->rank, n);
    tm_tensor *t = tm_tensor_alloc(TM_FLOAT, 1, &n, c->allocator);
    if (!t) return TM_NONE;
    memcpy(t->data, c->vals[b].data->data, (size_t)n * sizeof(float));
    return tm_val_tensor(c, t, 0);
}

tm_val tm__pass_match_bias(const tm_pass_scan *s, int32_t mm, tm_val y, int64_t n, int unknown,
                           int32_t *at, tm_val *cur) {
    tm_ctx *c = s->c;
    const tm_vinfo *yi = &c->vals[y];
    *at = mm;
    *cur = y;
    int32_t r = tm__pass_only_reader(s, y, mm + 1);
    if (r < 0 || c->nodes[r].prim != TM_P_ADD || c->nodes[r].nin != 2) return TM_NONE;
    const tm_rnode *add = &c->nodes[r];
    tm_val other = add->in[0] == y ? add->in[1] : add->in[0];
    const tm_vinfo *oi = &c->vals[add->out[0]];
    int vector = tm__pass_is_row_vector(c, other, yi->rank, n) ||
                 (unknown && other != y && reshaped_vector(c, other, yi->rank, n) != TM_NONE);
    if (!vector || oi->rank != yi->rank ||
        memcmp(oi->dims, yi->dims, (size_t)yi->rank * sizeof yi->dims[0]))
        return TM_NONE;
    *at = r;
    *cur = add->out[0];
    return other;
}

tm_status tm__pass_rewrite_epilogue(tm_pass_scan *s, const tm_pass_epilogue *ep, int prim,
                                    const tm_val *in, int nin, const tm_args *a) {
    tm_ctx *c = s->c;
    const tm_rnode *last = &c->nodes[ep->last];
    tm_val old_in[2] = {last->in[0], last->nin > 1 ? last->in[1] : TM_NONE};
    tm_status st = tm__pass_rewrite(c, ep->last, prim, in, nin, a);
    if (st != TM_OK) return st;
    /* The swallowed nodes lose their reader; the product's input and the residual gain one. */
    for (int i = 0; i < 2; i++)
        if (old_in[i] >= 0 && old_in[i] < s->n_uses) s->uses[old_in[i]]--;
    if (in[0] < s->n_uses) s->uses[in[0]]++;
    if (ep->residual != TM_NONE && ep->residual < s->n_uses) s->uses[ep->residual]++;
    return TM_OK;
}

tm_status tm__pass_each(tm_ctx *c, const tm_pass_roots *roots, int (*wants)(const tm_rnode *),
                        tm_status (*fuse)(tm_pass_scan *, int32_t)) {
    uint8_t *live = NULL;
    int *uses = tm__pass_live_use_counts(c, roots, &live);
    if (!uses) return TM_ERR_NO_MEMORY;
    tm_pass_scan s = {c, uses, c->n_vals, roots, live};
    tm_status st = TM_OK;
    int32_t n_nodes = c->n_nodes;
    for (int32_t i = 0; i < n_nodes && st == TM_OK; i++)
        if (live[i] && wants(&c->nodes[i])) st = fuse(&s, i);
    free(uses);
    free(live);
    return st;
}
