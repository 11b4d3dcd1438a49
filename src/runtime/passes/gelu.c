/* Fuses the erf form of GELU, x * 0.5 * (1 + erf(x / sqrt 2)), into the GELU primitive.
 * Any grouping of the three factors x, 0.5 and (1 + erf(.)) in two MULs, and x / sqrt 2
 * written as DIV(x, sqrt 2) or MUL(x, 1/sqrt 2), either operand order. Only f32 with
 * scalar constants, every intermediate read once and not a root. Not the tanh form. */
#include <stdlib.h>
#include <string.h>
#include "../passes.h"

#define SQRT2 1.41421356237309504880
#define SQRT_HALF 0.70710678118654752440

typedef struct matcher {
    tm_ctx *c;
    int *uses;
    tm_val n_uses;
    const tm_pass_roots *roots;
} matcher;

static int inner(const matcher *m, tm_val v) {
    return v >= 0 && v < m->n_uses && m->uses[v] == 1 && !tm__pass_is_root(m->roots, v);
}

static const tm_rnode *inner_node(const matcher *m, tm_val v, int prim) {
    return inner(m, v) ? tm__pass_producer(m->c, v, prim) : NULL;
}

/* h = 1 + erf(x / sqrt 2): returns x, or TM_NONE. */
static tm_val match_erf_term(const matcher *m, tm_val h) {
    const tm_rnode *add = inner_node(m, h, TM_P_ADD);
    if (!add) return TM_NONE;
    tm_val e = TM_NONE;
    for (int i = 0; i < 2; i++)
        if (tm__pass_scalar_is(m->c, add->in[i], 1.0)) e = add->in[1 - i];
    const tm_rnode *erf = e == TM_NONE ? NULL : inner_node(m, e, TM_P_ERF);
    if (!erf) return TM_NONE;
    tm_val u = erf->in[0];
    const tm_rnode *div = inner_node(m, u, TM_P_DIV);
    if (div) return tm__pass_scalar_is(m->c, div->in[1], SQRT2) ? div->in[0] : TM_NONE;
    const tm_rnode *mul = inner_node(m, u, TM_P_MUL);
    if (!mul) return TM_NONE;
    for (int i = 0; i < 2; i++)
        if (tm__pass_scalar_is(m->c, mul->in[i], SQRT_HALF)) return mul->in[1 - i];
    return TM_NONE;
}

/* The leaves {x, 0.5, h} of MUL(p, q) where one of p, q is itself an inner MUL. */
static tm_val match_product(const matcher *m, const tm_rnode *last) {
    for (int side = 0; side < 2; side++) {
        const tm_rnode *mul = inner_node(m, last->in[side], TM_P_MUL);
        if (!mul) continue;
        tm_val leaves[3] = {mul->in[0], mul->in[1], last->in[1 - side]};
        for (int half = 0; half < 3; half++) {
            if (!tm__pass_scalar_is(m->c, leaves[half], 0.5)) continue;
            for (int h = 0; h < 3; h++) {
                if (h == half) continue;
                tm_val x = leaves[3 - half - h];
                if (m->c->vals[x].data) continue;
                if (match_erf_term(m, leaves[h]) == x) return x;
            }
        }
    }
    return TM_NONE;
}

tm_status tm__pass_gelu(tm_ctx *c, const tm_pass_roots *roots) {
    int *uses = tm__pass_use_counts(c);
    if (!uses) return TM_ERR_NO_MEMORY;
    matcher m = {c, uses, c->n_vals, roots};
    tm_status st = TM_OK;
    for (int32_t i = c->n_nodes - 1; i >= 0 && st == TM_OK; i--) {
        const tm_rnode *last = &c->nodes[i];
        if (last->prim != TM_P_MUL || c->vals[last->out[0]].dtype != TM_FLOAT) continue;
        if (last->out[0] < m.n_uses && !uses[last->out[0]] && !tm__pass_is_root(roots, last->out[0]))
            continue;
        tm_val x = match_product(&m, last);
        if (x == TM_NONE || c->vals[x].dtype != TM_FLOAT) continue;
        tm_val old_in[2] = {last->in[0], last->in[1]};
        tm_args a;
        memset(&a, 0, sizeof a);
        st = tm__pass_rewrite(c, i, TM_P_GELU, &x, 1, &a);
        if (st == TM_OK)
            for (int k = 0; k < 2; k++)
                if (old_in[k] < m.n_uses) uses[old_in[k]]--;
        if (st == TM_ERR_SHAPE) st = TM_OK;
    }
    free(uses);
    return st;
}
