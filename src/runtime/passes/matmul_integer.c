/* Fuses the rescaling that dynamically quantized exports put after an integer product,
 * MATMUL_INTEGER (int32) -> CAST to f32 -> MUL by a scale [-> ADD of a bias] [-> GELU], into
 * the MATMUL_INTEGER primitive's f32 epilogue (same roundings: the multiply, then the add;
 * the GELU as its primitive computes it, on each tile while it is in cache).
 * The scale and bias must hold one value or one per column (all other dims 1); every
 * intermediate read once and not a root. Not the quantization of A (DYNAMIC_QUANTIZE). */
#include <stdlib.h>
#include <string.h>
#include "../passes.h"

typedef struct matcher {
    tm_ctx *c;
    int *uses;
    const tm_pass_roots *roots;
    uint8_t *live;   /* per node: the roots need it (at the pass's start) */
} matcher;

/* v is read by exactly one node and is no root: it may disappear. */
static int inner(const matcher *m, tm_val v) {
    return v >= 0 && v < m->c->n_vals && m->uses[v] == 1 && !tm__pass_is_root(m->roots, v);
}

/* The single live reader of v, or -1. */
static int32_t reader(const matcher *m, tm_val v, int32_t after) {
    for (int32_t i = after + 1; i < m->c->n_nodes; i++)
        for (int j = 0; m->live[i] && j < m->c->nodes[i].nin; j++)
            if (m->c->nodes[i].in[j] == v) return i;
    return -1;
}

/* 1 when v is f32 with one value, or n values along its last dim, all other dims 1. */
static int column_vector(const tm_ctx *c, tm_val v, int64_t n) {
    const tm_vinfo *vi = &c->vals[v];
    if (vi->dtype != TM_FLOAT) return 0;
    int64_t count = tm_numel(vi->rank, vi->dims);
    if (count == 1) return 1;
    return vi->rank >= 1 && count == n && vi->dims[vi->rank - 1] == n;
}

/* For the binary node `node` reading v: its other operand when that is a column vector
 * and the output keeps v's shape, else TM_NONE. */
static tm_val other_operand(const matcher *m, int32_t node, tm_val v, int64_t n) {
    const tm_rnode *rn = &m->c->nodes[node];
    if (rn->nin != 2 || (rn->in[0] == v) == (rn->in[1] == v)) return TM_NONE;
    tm_val o = rn->in[0] == v ? rn->in[1] : rn->in[0];
    const tm_vinfo *x = &m->c->vals[v], *y = &m->c->vals[rn->out[0]];
    if (y->dtype != TM_FLOAT || y->rank != x->rank ||
        memcmp(y->dims, x->dims, (size_t)x->rank * sizeof x->dims[0]))
        return TM_NONE;
    return column_vector(m->c, o, n) ? o : TM_NONE;
}

/* Tries to fuse the chain after the MATMUL_INTEGER node mi; returns TM_ERR_SHAPE when it
 * does not apply. */
static tm_status fuse(matcher *m, int32_t mi) {
    tm_ctx *c = m->c;
    const tm_rnode *q = &c->nodes[mi];
    if (q->args.i[2] || q->nin != 3) return TM_ERR_SHAPE;
    int64_t n = q->args.i[1];
    tm_val acc = q->out[0];
    if (!inner(m, acc)) return TM_ERR_SHAPE;
    int32_t cast = reader(m, acc, mi);
    if (cast < 0 || c->nodes[cast].prim != TM_P_CAST || c->nodes[cast].args.i[0] != TM_FLOAT)
        return TM_ERR_SHAPE;
    tm_val f = c->nodes[cast].out[0];
    if (!inner(m, f)) return TM_ERR_SHAPE;
    int32_t mul = reader(m, f, cast);
    if (mul < 0 || c->nodes[mul].prim != TM_P_MUL) return TM_ERR_SHAPE;
    tm_val scale = other_operand(m, mul, f, n);
    if (scale == TM_NONE) return TM_ERR_SHAPE;
    int32_t last = mul;
    tm_val bias = TM_NONE, y = c->nodes[mul].out[0];
    if (inner(m, y)) {
        int32_t add = reader(m, y, mul);
        if (add >= 0 && c->nodes[add].prim == TM_P_ADD) {
            bias = other_operand(m, add, y, n);
            if (bias != TM_NONE) last = add;
        }
    }
    /* Then a GELU of the same shape (the FFN's first product). */
    tm_val rescaled = c->nodes[last].out[0];
    int gelu = 0;
    int64_t gelu_form = 0;
    if (inner(m, rescaled)) {
        int32_t g = reader(m, rescaled, last);
        const tm_vinfo *gy = g >= 0 ? &c->vals[c->nodes[g].out[0]] : NULL;
        const tm_vinfo *gx = &c->vals[rescaled];
        if (g >= 0 && c->nodes[g].prim == TM_P_GELU && c->nodes[g].nin == 1 &&
            (c->nodes[g].args.i[0] == 0 || c->nodes[g].args.i[0] == 1) &&
            gy->dtype == TM_FLOAT && gy->rank == gx->rank &&
            !memcmp(gy->dims, gx->dims, (size_t)gx->rank * sizeof gx->dims[0])) {
            gelu = 1;
            gelu_form = c->nodes[g].args.i[0];
            last = g;
        }
    }
    /* The fused node takes the last node's place: its inputs must exist by then, which
     * they do (they were read there), and A, B and the zero point come before. */
    tm_val in[5] = {q->in[0], q->in[1], q->in[2], scale, bias};
    tm_args a = q->args;
    a.i[2] = 1;
    a.i[3] = bias != TM_NONE;
    a.i[4] = gelu;
    a.i[5] = gelu_form;
    tm_status st = tm__pass_rewrite(c, last, TM_P_MATMUL_INTEGER, in, bias != TM_NONE ? 5 : 4, &a);
    if (st != TM_OK) return st;
    /* The old chain is dead now; the plan's dead-code step drops it. Keep the counts true
     * for later matches: the fused node reads A, B, the zero point, scale and bias. */
    for (int i = 0; i < 3; i++) m->uses[in[i]]++;
    m->uses[acc]--;
    m->uses[f]--;
    if (bias != TM_NONE) m->uses[y]--;
    if (gelu) m->uses[rescaled]--;
    return TM_OK;
}

tm_status tm__pass_matmul_integer(tm_ctx *c, const tm_pass_roots *roots) {
    /* Live readers only: the GELU pass leaves the erf chain it swallowed in place, and
     * that chain's reads of the bias output must not stop the GELU joining the product. */
    uint8_t *live = NULL;
    int *uses = tm__pass_live_use_counts(c, roots, &live);
    if (!uses) return TM_ERR_NO_MEMORY;
    matcher m = {c, uses, roots, live};
    tm_status st = TM_OK;
    for (int32_t i = 0; i < c->n_nodes && st == TM_OK; i++) {
        if (c->nodes[i].prim != TM_P_MATMUL_INTEGER || !live[i]) continue;
        st = fuse(&m, i);
        if (st == TM_ERR_SHAPE) st = TM_OK;
    }
    free(uses);
    free(live);
    return st;
}
