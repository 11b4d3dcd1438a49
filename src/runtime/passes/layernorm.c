/* Fuses decomposed layer and RMS norms over the last axis into one LAYERNORM primitive.
 * Layer norm as TorchScript exports it, after lowering (ReduceMean is sum then divide):
 *   m = sum(x)/C; d = x - m; v = sum(d^2)/C; y = d / sqrt(v + eps) * gamma [+ beta]
 * RMS norm as LLaMA exports it:
 *   v = sum(x^2)/C; y = weight * (x * 1/sqrt(v + eps))   (or x / sqrt(v + eps)), the
 *   reciprocal a RECIPROCAL or a division of 1
 * Only f32, gamma/beta/weight over the last axis that are constants or model parameters
 * (trainable weights, read from the parameter store: 1-D only, taken as they are), every
 * intermediate read once and not a root. Not the kernel (core/prims/nn.c). */
#include <stdlib.h>
#include <string.h>
#include "../passes.h"

typedef struct matcher {
    tm_ctx *c;
    int *uses;
    tm_val n_uses;  /* values made by the pass itself are never inner */
    const tm_pass_roots *roots;
} matcher;

/* v is an intermediate the pattern may swallow: read once, not a root. */
static int inner(const matcher *m, tm_val v) {
    return v >= 0 && v < m->n_uses && m->uses[v] == 1 && !tm__pass_is_root(m->roots, v);
}

/* The producer of v when it is prim and v is swallowable. */
static const tm_rnode *inner_node(const matcher *m, tm_val v, int prim) {
    if (!inner(m, v)) return NULL;
    return tm__pass_producer(m->c, v, prim);
}

/* The model parameter v reads, through the reshapes that align ranks for broadcasting,
 * or TM_NONE. */
static tm_val param_root(const matcher *m, tm_val v) {
    for (int hops = 0; hops < 8 && v >= 0; hops++) {
        if (m->c->vals[v].param >= 0) return v;
        const tm_rnode *r = tm__pass_producer(m->c, v, TM_P_RESHAPE);
        if (!r) return TM_NONE;
        v = r->in[0];
    }
    return TM_NONE;
}

/* A weight: a known tensor, or a model parameter (known only when a plan runs). */
static int is_weight(const matcher *m, tm_val v) {
    return m->c->vals[v].data || param_root(m, v) != TM_NONE;
}

/* Of a binary node's inputs, the one that is a weight (*k) and the other (*o). */
static int split_const(const matcher *m, const tm_rnode *n, tm_val *k, tm_val *o) {
    for (int i = 0; i < 2; i++)
        if (is_weight(m, n->in[i]) && !is_weight(m, n->in[1 - i])) {
            *k = n->in[i];
            *o = n->in[1 - i];
            return 1;
        }
    return 0;
}

/* mean over the last axis of x: DIV(REDUCE_SUM(x), C). Returns x or TM_NONE. */
static tm_val match_mean(const matcher *m, tm_val v) {
    const tm_rnode *div = inner_node(m, v, TM_P_DIV);
    if (!div) return TM_NONE;
    const tm_rnode *sum = inner_node(m, div->in[0], TM_P_REDUCE_SUM);
    if (!sum) return TM_NONE;
    tm_val x = sum->in[0];
    const tm_vinfo *xi = &m->c->vals[x];
    if (xi->dtype != TM_FLOAT || xi->rank < 1) return TM_NONE;
    if (sum->args.i[0] != (int64_t)1 << (xi->rank - 1)) return TM_NONE;
    if (!tm__pass_scalar_is(m->c, div->in[1], (double)xi->dims[xi->rank - 1])) return TM_NONE;
    return x;
}

/* 1/sqrt(mean(d^2) + eps) applied to d: y = DIV(d, SQRT(ADD(mean(POW(d, 2)), eps))) or
 * MUL(d, RECIPROCAL(SQRT(...))). Returns d or TM_NONE; eps in *eps. */
static tm_val match_normalise(const matcher *m, const tm_rnode *n, double *eps, int *reads) {
    tm_val d = TM_NONE, s = TM_NONE;
    if (n->prim == TM_P_DIV) {
        d = n->in[0];
        s = n->in[1];
    } else if (n->prim == TM_P_MUL) {
        for (int i = 0; i < 2 && s == TM_NONE; i++) {
            const tm_rnode *div;
            if (inner_node(m, n->in[i], TM_P_RECIPROCAL)) {
                d = n->in[1 - i];
                s = tm__pass_producer(m->c, n->in[i], TM_P_RECIPROCAL)->in[0];
                if (!inner(m, s)) return TM_NONE;
            } else if ((div = inner_node(m, n->in[i], TM_P_DIV)) != NULL &&
                       tm__pass_scalar_is(m->c, div->in[0], 1.0)) {
                /* 1 / sqrt(...) as a division (LLaMA's exports) */
                d = n->in[1 - i];
                s = div->in[1];
                if (!inner(m, s)) return TM_NONE;
            }
        }
    }
    if (s == TM_NONE) return TM_NONE;
    const tm_rnode *root = inner_node(m, s, TM_P_SQRT);
    if (!root) return TM_NONE;
    const tm_rnode *add = inner_node(m, root->in[0], TM_P_ADD);
    tm_val eps_v, var;
    if (!add || !split_const(m, add, &eps_v, &var) || !tm__pass_scalar(m->c, eps_v, eps))
        return TM_NONE;
    if (*eps < 0) return TM_NONE;
    tm_val sq = match_mean(m, var);
    if (sq == TM_NONE) return TM_NONE;
    const tm_rnode *pow = inner_node(m, sq, TM_P_POW);
    if (pow) {
        if (!tm__pass_scalar_is(m->c, pow->in[1], 2.0)) return TM_NONE;
        if (pow->in[0] != d) return TM_NONE;
    } else {
        const tm_rnode *mul = inner_node(m, sq, TM_P_MUL);
        if (!mul || mul->in[0] != d || mul->in[1] != d) return TM_NONE;
    }
    *reads = pow ? 2 : 3;  /* how often the pattern reads d */
    const tm_vinfo *di = &m->c->vals[d], *vi = &m->c->vals[var];
    if (di->dtype != TM_FLOAT || vi->dtype != TM_FLOAT) return TM_NONE;
    return d;
}

/* A constant f32 parameter spread over the last axis of x (dims 1 except the last, equal
 * to x's): copied into a fresh 1-D constant, which LAYERNORM takes. */
static tm_val last_axis_param(matcher *m, tm_val p, const tm_vinfo *x) {
    const tm_vinfo *pi = &m->c->vals[p];
    int64_t count = x->dims[x->rank - 1];
    if (!pi->data) {  /* a parameter: it must already be the 1-D vector LAYERNORM reads */
        tm_val root = param_root(m, p);
        const tm_vinfo *ri = root == TM_NONE ? NULL : &m->c->vals[root];
        return ri && ri->dtype == TM_FLOAT && ri->rank == 1 && ri->dims[0] == count ? root : TM_NONE;
    }
    if (pi->dtype != TM_FLOAT || pi->rank > x->rank) return TM_NONE;
    for (int d = 0; d < pi->rank; d++)
        if (pi->dims[d] != (d == pi->rank - 1 ? count : 1)) return TM_NONE;
    if (pi->rank == 0 && count != 1) return TM_NONE;
    tm_tensor *t = tm_tensor_alloc(TM_FLOAT, 1, &count, m->c->allocator);
    if (!t) return TM_NONE;
    memcpy(t->data, pi->data->data, (size_t)count * sizeof(float));
    return tm_val_tensor(m->c, t, 0);
}

/* Tries the pattern ending at node i. */
static tm_status try_node(matcher *m, int32_t i) {
    tm_ctx *c = m->c;
    const tm_rnode *last = &c->nodes[i];
    if (last->prim != TM_P_ADD && last->prim != TM_P_MUL) return TM_OK;
    if (c->vals[last->out[0]].dtype != TM_FLOAT) return TM_OK;
    tm_val beta = TM_NONE, gamma, scaled = last->out[0], normed;
    /* A node the pass already cut off (nothing reads it) is left to the dead-code step. */
    if (last->out[0] < m->n_uses && !m->uses[last->out[0]] &&
        !tm__pass_is_root(m->roots, last->out[0]))
        return TM_OK;
    if (last->prim == TM_P_ADD) {
        if (!split_const(m, last, &beta, &scaled)) return TM_OK;
        if (!inner(m, scaled)) return TM_OK;
    }
    const tm_rnode *mul = tm__pass_producer(c, scaled, TM_P_MUL);
    if (!mul || !split_const(m, mul, &gamma, &normed)) return TM_OK;
    const tm_rnode *norm = inner_node(m, normed, TM_P_DIV);
    if (!norm) norm = inner_node(m, normed, TM_P_MUL);
    if (!norm) return TM_OK;
    double eps;
    int reads;
    tm_val d = match_normalise(m, norm, &eps, &reads);
    if (d == TM_NONE) return TM_OK;
    /* Layer norm when d = x - mean(x) and is read only by the pattern (the square and the
     * division); else RMS norm of d itself. */
    tm_val x = d;
    int rms = 1;
    const tm_rnode *sub = tm__pass_producer(c, d, TM_P_SUB);
    if (sub && d < m->n_uses && m->uses[d] == reads && !tm__pass_is_root(m->roots, d) &&
        match_mean(m, sub->in[1]) == sub->in[0]) {
        x = sub->in[0];
        rms = 0;
    }
    const tm_vinfo xi = c->vals[x];
    if (xi.rank < 1 || xi.dtype != TM_FLOAT) return TM_OK;
    tm_val in[3];
    in[0] = x;
    in[1] = last_axis_param(m, gamma, &xi);
    if (in[1] == TM_NONE) return tm_ctx_ok(c) ? TM_OK : c->status;
    int nin = 2;
    if (beta != TM_NONE) {
        in[2] = last_axis_param(m, beta, &xi);
        if (in[2] == TM_NONE) return tm_ctx_ok(c) ? TM_OK : c->status;
        nin = 3;
    }
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = xi.rank - 1;
    a.i[1] = rms;
    a.f[0] = eps;
    tm_val old_in[2] = {c->nodes[i].in[0], c->nodes[i].in[1]};
    tm_status st = tm__pass_rewrite(c, i, TM_P_LAYERNORM, in, nin, &a);
    if (st == TM_OK)
        for (int k = 0; k < 2; k++)
            if (old_in[k] < m->n_uses) m->uses[old_in[k]]--;
    return st == TM_ERR_SHAPE ? TM_OK : st;
}

tm_status tm__pass_layernorm(tm_ctx *c, const tm_pass_roots *roots) {
    int *uses = tm__pass_use_counts(c);
    if (!uses) return TM_ERR_NO_MEMORY;
    matcher m = {c, uses, c->n_vals, roots};
    tm_status st = TM_OK;
    /* Last nodes first, so that a pattern ending in "+ beta" wins over its "* gamma". */
    int32_t n = c->n_nodes;
    for (int32_t i = n - 1; i >= 0 && st == TM_OK; i--) st = try_node(&m, i);
    free(uses);
    return st;
}
