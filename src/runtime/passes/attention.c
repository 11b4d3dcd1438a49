/* Fuses scaled, masked softmax attention into one ATTENTION primitive:
 *   s = MATMUL(q, kT); [s = DIV(s, c) or MUL(s, c)]; [s = WHERE(causal, s, fill)];
 *   [s = ADD(s, mask)]; p = SOFTMAX(s);
 *   o = MATMUL(p, v); [o = TRANSPOSE(o, 0 2 1 3)]
 * over the last axis, float32, rank 4. q may come out of a TRANSPOSE (0 2 1 3) and is
 * then read before it; kT must be a TRANSPOSE of k, (0 2 3 1) from (B, S, H, D) or
 * (0 1 3 2) from (B, H, S, D); k and v may be grouped heads repeated by the
 * RESHAPE-EXPAND-RESHAPE of repeat_kv, read without the copy. The scores, their scaled
 * and masked forms, the probabilities and the output are read once and are not roots;
 * nothing else changes (the transposes and expands fall away when nothing else reads
 * them). */
#include <stdlib.h>
#include <string.h>
#include "../passes.h"

typedef struct matcher {
    tm_pass_scan scan;
} matcher;

static int inner(const tm_pass_scan *s, tm_val v) {
    return v >= 0 && v < s->n_uses && s->uses[v] == 1 && !tm__pass_is_root(s->roots, v);
}

/* The live producer of v when it is prim, else NULL. */
static const tm_rnode *producer(const tm_pass_scan *s, tm_val v, int prim) {
    const tm_rnode *rn = tm__pass_producer(s->c, v, prim);
    if (!rn) return NULL;
    int32_t at = (int32_t)(rn - s->c->nodes);
    return s->live[at] ? rn : NULL;
}

static int32_t only_reader(const tm_pass_scan *s, tm_val v, int32_t from) {
    if (!inner(s, v)) return -1;
    for (int32_t i = from; i < s->c->n_nodes; i++)
        for (int j = 0; s->live[i] && j < s->c->nodes[i].nin; j++)
            if (s->c->nodes[i].in[j] == v) return i;
    return -1;
}

static int is_perm(const tm_rnode *t, int a, int b, int c, int d) {
    return t->args.i[0] == a && t->args.i[1] == b && t->args.i[2] == c && t->args.i[3] == d;
}

/* (B, Hk * g, S, D) built from x (B, Hk, S, D) by repeat_kv: RESHAPE to (B, Hk, 1, S, D),
 * EXPAND to (B, Hk, g, S, D), RESHAPE to (B, Hk * g, S, D). Returns x, else v itself. */
static tm_val unrepeat(const tm_pass_scan *s, tm_val v) {
    const tm_ctx *c = s->c;
    const tm_rnode *r2 = producer(s, v, TM_P_RESHAPE);
    const tm_rnode *e = r2 ? producer(s, r2->in[0], TM_P_EXPAND) : NULL;
    const tm_rnode *r1 = e ? producer(s, e->in[0], TM_P_RESHAPE) : NULL;
    if (!r1) return v;
    const tm_vinfo *x = &c->vals[r1->in[0]], *u = &c->vals[r1->out[0]], *ex = &c->vals[e->out[0]];
    const tm_vinfo *out = &c->vals[v];
    if (x->rank != 4 || u->rank != 5 || ex->rank != 5 || out->rank != 4) return v;
    if (u->dims[0] != x->dims[0] || u->dims[1] != x->dims[1] || u->dims[2] != 1 ||
        u->dims[3] != x->dims[2] || u->dims[4] != x->dims[3])
        return v;
    if (ex->dims[0] != u->dims[0] || ex->dims[1] != u->dims[1] || ex->dims[3] != u->dims[3] ||
        ex->dims[4] != u->dims[4])
        return v;
    if (out->dims[0] != x->dims[0] || out->dims[1] != x->dims[1] * ex->dims[2] ||
        out->dims[2] != x->dims[2] || out->dims[3] != x->dims[3])
        return v;
    return r1->in[0];
}

/* Whether WHERE node w is GPT-2's causal fill: where(cond, scores, fill) with cond a
 * constant (1, 1, Sq, Sk) that keeps key j for query i exactly when j <= Sk - Sq + i, and
 * fill a constant scalar of -1e4 or less (finfo.min, -inf), which ATTENTION writes as the
 * graph does. */
static int causal_where(const tm_ctx *c, const tm_rnode *w, double *fill) {
    if (w->nin != 3) return 0;
    const tm_vinfo *cond = &c->vals[w->in[0]], *x = &c->vals[w->in[1]];
    if (!cond->data || !tm__pass_scalar(c, w->in[2], fill) || !(*fill <= -1e4)) return 0;
    if (cond->dtype != TM_BOOL || cond->rank != 4 || x->rank != 4 || cond->dims[0] != 1 ||
        cond->dims[1] != 1)
        return 0;
    int64_t sq = x->dims[2], sk = x->dims[3];
    if (cond->dims[2] != sq || cond->dims[3] != sk || sq > sk) return 0;
    const uint8_t *b = cond->data->data;
    for (int64_t i = 0; i < sq; i++)
        for (int64_t j = 0; j < sk; j++)
            if ((b[i * sk + j] != 0) != (j <= sk - sq + i)) return 0;
    return 1;
}

static tm_status fuse_at(matcher *m, int32_t at) {
    tm_pass_scan *s = &m->scan;
    tm_ctx *c = s->c;
    const tm_rnode *sm = &c->nodes[at];
    tm_val x = sm->in[0], p = sm->out[0];
    const tm_vinfo *xi = &c->vals[x];
    if (xi->dtype != TM_FLOAT || xi->rank != 4 || sm->args.i[1] != 0) return TM_OK;
    if (sm->args.i[0] != 3 && sm->args.i[0] != -1) return TM_OK;
    /* Back from the softmax: mask, scale, product. */
    tm_val scores = x, mask = TM_NONE;
    int scale_kind = 0;
    double scale = 1.0;
    const tm_rnode *add = inner(s, scores) ? producer(s, scores, TM_P_ADD) : NULL;
    if (add) {
        for (int side = 0; side < 2 && mask == TM_NONE; side++) {
            tm_val a = add->in[side], b = add->in[1 - side];
            const tm_vinfo *bi = &c->vals[b];
            if (!inner(s, a) || bi->rank != 4 || bi->dtype != TM_FLOAT || b == a) continue;
            if (!producer(s, a, TM_P_MATMUL) && !producer(s, a, TM_P_DIV) &&
                !producer(s, a, TM_P_MUL) && !producer(s, a, TM_P_WHERE))
                continue;
            mask = b;
            scores = a;
        }
        if (mask == TM_NONE) return TM_OK;
    }
    int causal = 0;
    double fill = 0;
    const tm_rnode *wh = inner(s, scores) ? producer(s, scores, TM_P_WHERE) : NULL;
    if (wh) {
        if (!causal_where(c, wh, &fill)) return TM_OK;
        causal = 1;
        scores = wh->in[1];
    }
    const tm_rnode *sc = NULL;
    if (inner(s, scores) && (sc = producer(s, scores, TM_P_DIV)) != NULL &&
        tm__pass_scalar(c, sc->in[1], &scale)) {
        scale_kind = 2;
        scores = sc->in[0];
    } else if (inner(s, scores) && (sc = producer(s, scores, TM_P_MUL)) != NULL) {
        for (int side = 0; side < 2 && !scale_kind; side++)
            if (tm__pass_scalar(c, sc->in[1 - side], &scale)) {
                scale_kind = 1;
                scores = sc->in[side];
            }
    }
    const tm_rnode *qk = inner(s, scores) ? producer(s, scores, TM_P_MATMUL) : NULL;
    if (!qk || !tm__pass_is_plain_matmul(qk)) return TM_OK;
    /* q, and k from kT. */
    tm_val q = qk->in[0];
    int lq = 0, lk;
    const tm_rnode *tq = producer(s, q, TM_P_TRANSPOSE);
    if (tq && c->vals[q].rank == 4 && is_perm(tq, 0, 2, 1, 3)) {
        q = tq->in[0];
        lq = 1;
    }
    const tm_rnode *tk = producer(s, qk->in[1], TM_P_TRANSPOSE);
    if (!tk || c->vals[qk->in[1]].rank != 4) return TM_OK;
    tm_val k;
    if (is_perm(tk, 0, 2, 3, 1)) {
        k = tk->in[0];
        lk = 1;
    } else if (is_perm(tk, 0, 1, 3, 2)) {
        k = unrepeat(s, tk->in[0]);
        lk = 0;
    } else {
        return TM_OK;
    }
    /* Forward from the softmax: p . v, and the output's transpose. */
    int32_t pv_at = only_reader(s, p, at + 1);
    if (pv_at < 0) return TM_OK;
    const tm_rnode *pv = &c->nodes[pv_at];
    if (!tm__pass_is_plain_matmul(pv) || pv->in[0] != p || pv->in[1] == p) return TM_OK;
    tm_val v = pv->in[1];
    int lv = 0;
    const tm_rnode *tv = producer(s, v, TM_P_TRANSPOSE);
    if (tv && c->vals[v].rank == 4 && is_perm(tv, 0, 2, 1, 3)) {
        v = tv->in[0];
        lv = 1;
    } else {
        v = unrepeat(s, v);
    }
    int32_t target = pv_at;
    int lo = 0;
    int32_t t_at = only_reader(s, pv->out[0], pv_at + 1);
    if (t_at >= 0 && c->nodes[t_at].prim == TM_P_TRANSPOSE && is_perm(&c->nodes[t_at], 0, 2, 1, 3)) {
        target = t_at;
        lo = 1;
    }
    for (int i = 0; i < 3; i++) {
        tm_val t = i == 0 ? q : i == 1 ? k : v;
        if (c->vals[t].dtype != TM_FLOAT || c->vals[t].rank != 4) return TM_OK;
    }
    tm_val in[4] = {q, k, v, mask};
    /* While a gradient plan's forward is taped: the variant that keeps the probabilities
     * for its gradient rule, which takes q, k and v with as many heads (grouped kv heads
     * keep the pattern, whose rules handle them). */
    int prim = TM_P_ATTENTION;
    int tracked = 0;
    for (int i = 0; i < 4; i++) tracked |= in[i] != TM_NONE && c->vals[in[i]].tracked;
    if (c->tape && tracked) {
        int64_t hq = c->vals[q].dims[lq ? 2 : 1], hk = c->vals[k].dims[lk ? 2 : 1];
        if (hq != hk) return TM_OK;
        prim = TM_P_ATTENTION_TRAIN;
    }
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = lq;
    a.i[1] = lk;
    a.i[2] = lv;
    a.i[3] = lo;
    a.i[4] = mask != TM_NONE;
    a.i[5] = scale_kind;
    a.i[6] = causal;
    a.f[0] = scale;
    a.f[1] = fill;
    tm_status st = tm__pass_rewrite(c, target, prim, in, mask != TM_NONE ? 4 : 3, &a);
    if (st == TM_ERR_SHAPE) return TM_OK;
    if (st != TM_OK) return st;
    for (int i = 0; i < 4; i++)
        if (in[i] >= 0 && in[i] < s->n_uses) s->uses[in[i]]++;
    return TM_OK;
}

tm_status tm__pass_attention(tm_ctx *c, const tm_pass_roots *roots) {
    uint8_t *live = NULL;
    int *uses = tm__pass_live_use_counts(c, roots, &live);
    if (!uses) return TM_ERR_NO_MEMORY;
    matcher m = {{c, uses, c->n_vals, roots, live}};
    tm_status st = TM_OK;
    int32_t n_nodes = c->n_nodes;
    for (int32_t i = 0; i < n_nodes && st == TM_OK; i++)
        if (live[i] && c->nodes[i].prim == TM_P_SOFTMAX && c->nodes[i].nin == 1) st = fuse_at(&m, i);
    free(uses);
    free(live);
    return st;
}
