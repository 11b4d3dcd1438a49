/* The reverse-mode engine: the table of gradient rules generated from prims.def, the
 * backward walk over a context's recorded nodes, and the helpers the rules share
 * (broadcast reduction, zeros, scatter-add). Not the rules themselves (prims/<family>_grad.c)
 * nor losses and plans (../runtime/grad.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "autodiff.h"

#define TM_PRIM(ID, NAME, NIN, NOUT, IMPL, FLAGS) \
    tm_status tm__grad_##IMPL(tm_ctx *c, const tm_grad_call *g);
#include "prims.def"
#undef TM_PRIM

const tm_grad_fn tm__grad_rules[TM_P__COUNT] = {
#define TM_PRIM(ID, NAME, NIN, NOUT, IMPL, FLAGS) [TM_P_##ID] = tm__grad_##IMPL,
#include "prims.def"
#undef TM_PRIM
};

/* ---- Helpers ----------------------------------------------------------------------- */

tm_val tm_grad_scalar(tm_ctx *c, tm_val x, double v) {
    if (!tm_ctx_ok(c) || x == TM_NONE) return TM_NONE;
    return tm_const_scalar(c, tm_vdtype(c, x), v);
}

tm_val tm_grad_zeros_like(tm_ctx *c, tm_val like) {
    if (!tm_ctx_ok(c) || like == TM_NONE) return TM_NONE;
    const tm_vinfo *vi = tm_vi(c, like);
    int64_t dims[TM_MAX_RANK];
    memcpy(dims, vi->dims, sizeof dims);
    return tm_const_fill(c, vi->dtype, vi->rank, dims, 0.0);
}

tm_val tm_grad_reduce_sum(tm_ctx *c, tm_val x, int64_t mask) {
    if (!tm_ctx_ok(c) || x == TM_NONE || mask == 0) return x;
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = mask;
    return tm_prim(c, TM_P_REDUCE_SUM, &x, 1, &a);
}

tm_val tm_grad_sum_to(tm_ctx *c, tm_val g, int rank, const int64_t *dims) {
    if (!tm_ctx_ok(c) || g == TM_NONE) return TM_NONE;
    int r = tm_vrank(c, g), lead = r - rank;
    if (lead < 0) {
        tm_ctx_fail(c, TM_ERR_RUNTIME, "internal: a cotangent of rank %d for a value of "
                    "rank %d", r, rank);
        return TM_NONE;
    }
    int64_t mask = 0;
    const int64_t *gd = tm_vdims(c, g);
    for (int d = 0; d < r; d++)
        if (d < lead || (dims[d - lead] == 1 && gd[d] != 1)) mask |= (int64_t)1 << d;
    g = tm_grad_reduce_sum(c, g, mask);
    return tm_reshape(c, g, rank, dims);
}

tm_val tm_grad_sum_like(tm_ctx *c, tm_val g, tm_val like) {
    int64_t dims[TM_MAX_RANK];
    memcpy(dims, tm_vdims(c, like), sizeof dims);
    return tm_grad_sum_to(c, g, tm_vrank(c, like), dims);
}

tm_val tm_grad_expand_like(tm_ctx *c, tm_val x, tm_val like) {
    if (!tm_ctx_ok(c) || x == TM_NONE) return TM_NONE;
    int r = tm_vrank(c, like);
    if (tm_vrank(c, x) == r && !memcmp(tm_vdims(c, x), tm_vdims(c, like), (size_t)r * sizeof(int64_t)))
        return x;
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = r;
    for (int d = 0; d < r; d++) a.i[1 + d] = tm_vdims(c, like)[d];
    return tm_prim(c, TM_P_EXPAND, &x, 1, &a);
}

tm_val tm_grad_matmul(tm_ctx *c, tm_val a, tm_val b, int ta, int tb) {
    tm_args args;
    memset(&args, 0, sizeof args);
    args.i[0] = ta;
    args.i[1] = tb;
    return tm_prim(c, TM_P_MATMUL, (tm_val[2]){a, b}, 2, &args);
}

tm_val tm_grad_mask(tm_ctx *c, tm_val cond, tm_val like) {
    return tm_cast_exact(c, cond, tm_vdtype(c, like));
}

tm_val tm_grad_scatter_add(tm_ctx *c, tm_val g, tm_val indices, int axis, int rank,
                           const int64_t *dims) {
    if (!tm_ctx_ok(c) || g == TM_NONE) return TM_NONE;
    int64_t dd[TM_MAX_RANK];
    memcpy(dd, dims, (size_t)rank * sizeof *dd);
    int64_t pre = tm_numel(axis, dd), size = dd[axis];
    int64_t post = tm_numel(rank - axis - 1, dd + axis + 1);
    int64_t count = tm_vnumel(c, indices);
    /* (pre, count, post) -> (count, pre, post): INDEX_ADD adds whole rows along the
     * leading axis, one per index, into zeros it makes itself (an embedding table's
     * gradient is otherwise a copy of a table-sized zero constant every run). */
    int64_t g3[3] = {pre, count, post};
    tm_val x = tm_reshape(c, g, 3, g3);
    if (pre > 1) {
        static const int64_t swap[3] = {1, 0, 2};
        x = tm_transpose(c, x, swap);
    }
    int64_t x3[3] = {count, pre, post}, i1[1] = {count};
    x = tm_reshape(c, x, 3, x3);
    tm_val idx = tm_reshape(c, indices, 1, i1);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = size;
    tm_val in[2] = {idx, x};
    tm_val y = tm_ctx_ok(c) ? tm_prim(c, TM_P_INDEX_ADD, in, 2, &a) : TM_NONE;
    if (pre > 1) {
        static const int64_t swap[3] = {1, 0, 2};
        y = tm_transpose(c, y, swap);
    }
    return tm_reshape(c, y, rank, dd);
}

/* ---- The backward walk ------------------------------------------------------------- */

/* "node 'X' (Op)" of a recorded node back into name and op, so that what the backward
 * records and reports names the forward node it differentiates. */
static void set_where_from(tm_ctx *c, const char *where) {
    const char *a = where ? strchr(where, '\'') : NULL;
    const char *b = where ? strrchr(where, '\'') : NULL;
    const char *p = where ? strrchr(where, '(') : NULL;
    if (!a || !b || b <= a || !p || p < b) {
        tm_ctx_set_where(c, "", "gradient");
        return;
    }
    char name[128], op[64];
    snprintf(name, sizeof name, "%.*s", (int)(b - a - 1), a + 1);
    const char *q = strrchr(p, ')');
    int op_len = q && q > p ? (int)(q - p - 1) : 0;
    if (op_len) snprintf(op, sizeof op, "%.*s gradient", op_len, p + 1);
    else op[0] = 0;  /* not from an ONNX node: the message stands alone */
    tm_ctx_set_where(c, name, op);
}

typedef struct backward {
    tm_ctx *c;
    tm_val *cot;          /* per forward value: its cotangent so far, or TM_NONE */
    int32_t n_fwd;        /* values that existed when the walk began */
} backward;

/* Eagerly, the cotangents held are pinned and everything else a rule made is released
 * once its node is done, so the backward keeps no more than it must. */
static void hold(backward *w, tm_val v, int delta) {
    if (v == TM_NONE || w->c->mode != TM_MODE_EAGER) return;
    w->c->vals[v].pinned = (uint16_t)(w->c->vals[v].pinned + delta);
}

static void add_cotangent(backward *w, tm_val x, tm_val g) {
    tm_ctx *c = w->c;
    tm_val old = w->cot[x];
    tm_val sum = old == TM_NONE ? g : tm_prim(c, TM_P_ADD, (tm_val[2]){old, g}, 2, NULL);
    if (sum == TM_NONE) return;
    hold(w, sum, +1);
    hold(w, old, -1);
    w->cot[x] = sum;
}

static int same_dims(const tm_ctx *c, tm_val a, tm_val b) {
    const tm_vinfo *x = tm_vi(c, a), *y = tm_vi(c, b);
    return x->dtype == y->dtype && x->rank == y->rank &&
           !memcmp(x->dims, y->dims, (size_t)x->rank * sizeof x->dims[0]);
}

static tm_status step(backward *w, int32_t k) {
    tm_ctx *c = w->c;
    const tm_rnode node = c->nodes[k];  /* a copy: rules append to c->nodes */
    tm_val gout[4] = {TM_NONE, TM_NONE, TM_NONE, TM_NONE};
    int any = 0;
    for (int o = 0; o < node.nout; o++) {
        if (node.out[o] >= 0 && node.out[o] < w->n_fwd) gout[o] = w->cot[node.out[o]];
        any |= gout[o] != TM_NONE;
    }
    if (!any) return TM_OK;
    enum { SMALL = 16 };
    uint8_t want_small[SMALL];
    tm_val gin_small[SMALL];
    uint8_t *want = node.nin <= SMALL ? want_small : calloc((size_t)node.nin, 1);
    tm_val *gin = node.nin <= SMALL ? gin_small : calloc((size_t)node.nin, sizeof *gin);
    if (!want || !gin) {
        if (want != want_small) free(want);
        if (gin != gin_small) free(gin);
        return tm_ctx_fail(c, TM_ERR_NO_MEMORY, "out of memory in the backward pass");
    }
    int wanted = 0;
    for (int i = 0; i < node.nin; i++) {
        const tm_vinfo *vi = tm_vi(c, node.in[i]);
        want[i] = vi->tracked && tm_dtype_is_differentiable(vi->dtype);
        gin[i] = TM_NONE;
        wanted += want[i];
    }
    tm_status st = TM_OK;
    if (wanted) {
        set_where_from(c, node.where);
        tm_val first_new = c->n_vals;
        tm_grad_call call = {node.prim, &node.args, node.in, node.nin, node.out, node.nout,
                             gout, want, gin};
        st = tm__grad_rules[node.prim](c, &call);
        if (st == TM_GRAD_NO_RULE && tm_ctx_ok(c))
            st = tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "no gradient rule for primitive %s: "
                             "gradients cannot pass through this node",
                             tm_prims[node.prim].name);
        if (st == TM_OK && !tm_ctx_ok(c)) st = c->status;
        for (int i = 0; st == TM_OK && i < node.nin; i++) {
            if (!want[i] || gin[i] == TM_NONE) continue;
            if (!same_dims(c, gin[i], node.in[i]))
                st = tm_ctx_fail(c, TM_ERR_RUNTIME, "internal: the gradient rule of %s gave "
                                 "input %d a cotangent of another dtype or shape",
                                 tm_prims[node.prim].name, i);
            else if (node.in[i] < w->n_fwd)
                add_cotangent(w, node.in[i], gin[i]);
            if (st == TM_OK && !tm_ctx_ok(c)) st = c->status;
        }
        /* The outputs' cotangents are spent: each value has one producer. */
        for (int o = 0; st == TM_OK && o < node.nout; o++) {
            if (gout[o] == TM_NONE) continue;
            hold(w, gout[o], -1);
            w->cot[node.out[o]] = TM_NONE;
        }
        if (c->mode == TM_MODE_EAGER)
            for (tm_val v = first_new; v < c->n_vals; v++)
                if (!c->vals[v].pinned) tm_val_release(c, v);
    }
    if (want != want_small) free(want);
    if (gin != gin_small) free(gin);
    return st;
}

tm_status tm_backward(tm_ctx *c, tm_val y, tm_val seed, int32_t first_node, int n,
                      const tm_val *xs, tm_val *gx) {
    for (int i = 0; i < n; i++) gx[i] = TM_NONE;
    if (!tm_ctx_ok(c)) return c->status;
    if (y < 0 || y >= c->n_vals || seed == TM_NONE || !same_dims(c, y, seed))
        return tm_ctx_fail(c, TM_ERR_RUNTIME, "internal: the backward needs a value and a "
                           "seed of its dtype and shape");
    if (c->vals[y].cut)
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "the value differentiated depends on the "
                           "parameters through a quantizing cast (%s): quantized paths have "
                           "no gradient", c->cut_where ? c->cut_where : "a cast");
    backward w = {c, NULL, c->n_vals};
    w.cot = malloc((size_t)(w.n_fwd + 1) * sizeof *w.cot);
    if (!w.cot) return tm_ctx_fail(c, TM_ERR_NO_MEMORY, "out of memory in the backward pass");
    for (int32_t i = 0; i < w.n_fwd; i++) w.cot[i] = TM_NONE;
    /* No higher order: what the backward records is not itself taped. Rules compute in
     * the dtypes they are given, whatever compute_type says about new constants. */
    int tape = c->tape;
    tm_dtype compute_type = c->compute_type;
    c->tape = 0;
    c->compute_type = TM_UNDEFINED;
    char saved_node[128], saved_op[64];
    memcpy(saved_node, c->where_node, sizeof saved_node);
    memcpy(saved_op, c->where_op, sizeof saved_op);
    w.cot[y] = seed;
    hold(&w, seed, +1);
    tm_status st = TM_OK;
    for (int32_t k = c->n_nodes - 1; k >= first_node && st == TM_OK; k--) st = step(&w, k);
    for (int i = 0; st == TM_OK && i < n; i++)
        if (xs[i] >= 0 && xs[i] < w.n_fwd) gx[i] = w.cot[xs[i]];
    for (int32_t i = 0; i < w.n_fwd; i++) hold(&w, w.cot[i], -1);
    free(w.cot);
    c->tape = tape;
    c->compute_type = compute_type;
    tm_ctx_set_where(c, saved_node, saved_op);
    if (st != TM_OK)
        for (int i = 0; i < n; i++) gx[i] = TM_NONE;
    return st;
}
