/* The elementwise tail that a fused primitive (LINEAR, CONV_PACKED) can take into its
 * epilogue: from the value it produces, a run of chain steps (fused.h) and an optional
 * residual ADD, each swallowed value read only inside the run and not a root. A value
 * read twice joins when its second reader combines it with the end of a path that
 * starts at its first (x * clip(x + 3, 0, 6), x * sigmoid(x)): the chain saves it. Not a
 * pass itself: linear.c and conv.c call it. */
#include <string.h>
#include "../passes.h"

static int inner(const tm_pass_scan *s, tm_val v, int readers) {
    return v >= 0 && v < s->n_uses && s->uses[v] == readers && !tm__pass_is_root(s->roots, v);
}

/* The live nodes after `from` reading v: up to two, in order; returns how many. */
static int readers_of(const tm_pass_scan *s, tm_val v, int32_t from, int32_t out[2]) {
    int n = 0;
    for (int32_t i = from; i < s->c->n_nodes && n < 2; i++) {
        if (!s->live[i]) continue;
        for (int j = 0; j < s->c->nodes[i].nin; j++)
            if (s->c->nodes[i].in[j] == v) {
                out[n++] = i;
                break;
            }
    }
    return n;
}

static int same_dims(const tm_vinfo *a, const tm_vinfo *b) {
    return a->rank == b->rank && !memcmp(a->dims, b->dims, (size_t)a->rank * sizeof a->dims[0]);
}

/* Node rn as a step on t (its other operand a float scalar constant). */
static int step_of(const tm_ctx *c, const tm_rnode *rn, tm_val t, tm_chain_step *st) {
    if (rn->nin == 1 && rn->in[0] == t && tm__chain_step_ok(rn->prim, TM_CHAIN_UNARY)) {
        *st = (tm_chain_step){rn->prim, TM_CHAIN_UNARY, rn->args.i[0], 0.0f};
        return 1;
    }
    if (rn->nin != 2 || rn->in[0] == rn->in[1]) return 0;
    int side = rn->in[0] == t ? 0 : rn->in[1] == t ? 1 : -1;
    double v;
    if (side < 0 || c->vals[rn->in[1 - side]].dtype != TM_FLOAT ||
        !tm__pass_scalar(c, rn->in[1 - side], &v))
        return 0;
    int operand = side == 0 ? TM_CHAIN_SCALAR_RIGHT : TM_CHAIN_SCALAR_LEFT;
    if (!tm__chain_step_ok(rn->prim, operand)) return 0;
    *st = (tm_chain_step){rn->prim, operand, 0, (float)v};
    return 1;
}

/* The output of node i keeps the shape of the fused primitive's output. */
static int keeps_shape(const tm_pass_scan *s, int32_t i, const tm_vinfo *shape) {
    const tm_vinfo *o = &s->c->vals[s->c->nodes[i].out[0]];
    return s->c->nodes[i].nout == 1 && o->dtype == TM_FLOAT && same_dims(o, shape);
}

/* cur read by exactly two nodes: the first starts a single-reader path of steps whose
 * end the second combines with cur. On success appends SAVE, the path and the combining
 * step, and returns the combining node; else -1 (the chain unchanged). */
static int32_t match_saved(const tm_pass_scan *s, tm_val cur, int32_t after,
                           const tm_vinfo *shape, tm_chain *ch) {
    int32_t r[2];
    if (!inner(s, cur, 2) || readers_of(s, cur, after, r) != 2) return -1;
    tm_chain trial = *ch;
    if (trial.n + 3 > TM_CHAIN_MAX_STEPS) return -1;
    trial.step[trial.n++] = (tm_chain_step){0, TM_CHAIN_SAVE, 0, 0.0f};
    int32_t at = r[0];
    tm_val t = cur;
    for (;;) {
        const tm_rnode *rn = &s->c->nodes[at];
        if (!keeps_shape(s, at, shape)) return -1;
        if (at == r[1]) {
            /* The combining node: prim(t, cur) or prim(cur, t). */
            if (rn->nin != 2 || t == cur) return -1;
            int operand = rn->in[0] == t && rn->in[1] == cur   ? TM_CHAIN_SAVED_RIGHT
                          : rn->in[1] == t && rn->in[0] == cur ? TM_CHAIN_SAVED_LEFT
                                                               : -1;
            if (operand < 0 || !tm__chain_step_ok(rn->prim, operand)) return -1;
            trial.step[trial.n++] = (tm_chain_step){rn->prim, operand, 0, 0.0f};
            *ch = trial;
            return at;
        }
        tm_chain_step st;
        if (trial.n + 1 >= TM_CHAIN_MAX_STEPS || !step_of(s->c, rn, t, &st)) return -1;
        trial.step[trial.n++] = st;
        t = rn->out[0];
        int32_t next[2];
        if (!inner(s, t, 1) || readers_of(s, t, at + 1, next) != 1) return -1;
        at = next[0];
    }
}

void tm__pass_match_epilogue(const tm_pass_scan *s, int32_t at, tm_val from,
                             int allow_residual, tm_pass_epilogue *ep) {
    memset(ep, 0, sizeof *ep);
    ep->residual = TM_NONE;
    ep->last = at;
    ep->out = from;
    const tm_vinfo *shape = &s->c->vals[from];
    tm_val cur = from;
    for (;;) {
        int32_t r[2];
        int32_t saved = match_saved(s, cur, ep->last + 1, shape, &ep->chain);
        if (saved >= 0) {
            ep->last = saved;
            cur = ep->out = s->c->nodes[saved].out[0];
            continue;
        }
        if (!inner(s, cur, 1) || readers_of(s, cur, ep->last + 1, r) != 1) return;
        const tm_rnode *rn = &s->c->nodes[r[0]];
        if (!keeps_shape(s, r[0], shape)) return;
        tm_chain_step st;
        if (ep->chain.n < TM_CHAIN_MAX_STEPS && step_of(s->c, rn, cur, &st)) {
            ep->chain.step[ep->chain.n++] = st;
        } else if (allow_residual && rn->prim == TM_P_ADD && rn->nin == 2) {
            tm_val other = rn->in[0] == cur ? rn->in[1] : rn->in[0];
            const tm_vinfo *o = &s->c->vals[other];
            if (other == cur || o->data || o->dtype != TM_FLOAT || !same_dims(o, shape)) return;
            ep->residual = other;
            ep->last = r[0];
            ep->out = rn->out[0];
            return;   /* nothing follows the residual inside the primitive */
        } else {
            return;
        }
        ep->last = r[0];
        cur = ep->out = rn->out[0];
    }
}
