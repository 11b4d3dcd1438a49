/* Outputs of which the caller reads the last row only (tm_plan_options.last_row_names):
 * a generation step reads the logits of the prompt's last position, and computing the
 * final norm and the LM head for every position is wasted work (on a 150k-word
 * vocabulary, a third of a short prompt's time). After the trace, each such output is
 * computed anew on its last row along its next-to-last axis: walking back from the
 * output through nodes that work row by row (elementwise steps, products whose left
 * operand holds the rows, normalisations and softmaxes over the last axis, reductions
 * that keep the rows), the walk emits the same primitives on one row, and cuts with a
 * SLICE where a value has other readers (it is computed whole anyway) or comes from a
 * node that mixes rows (attention, a gather, a reshape). The full-row nodes it replaced
 * then have no reader left and the plan drops them. Nothing here names an architecture:
 * the rows are wherever the output's next-to-last axis leads. Not a fusion pass
 * (passes/): it changes what an output holds, which only the caller may ask for. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime.h"
#include "plan_internal.h"
#include "passes.h"
#include "../core/ops.h"

/* Steps back from an output before the walk cuts regardless (a residual stream reaches
 * far back; its values are read twice and cut long before this). */
#define MAX_DEPTH 256

typedef struct walk {
    tm_ctx *c;
    int *uses;          /* readers per value when the walk started */
    tm_val n_uses;
    const tm_oval *outs;
    int n_outs;
} walk;

static int is_output(const walk *w, tm_val v) {
    for (int i = 0; i < w->n_outs; i++)
        if (w->outs[i].kind == TM_OV_TENSOR && w->outs[i].v == v) return 1;
    return 0;
}

/* v's last row along axis rank - 2 as a slice. */
static tm_val cut(tm_ctx *c, tm_val v) {
    int r = tm_vrank(c, v);
    return tm_slice_axis(c, v, r - 2, tm_vdims(c, v)[r - 2] - 1, 1);
}

/* Whether node n computes output 0 row by row along axis `ax` of that output (rank r),
 * reading the rows of its inputs flagged in rows[] at the same axis (the others whole). */
static int row_local(const tm_ctx *c, const tm_rnode *n, int r, int ax, int *rows) {
    const tm_prim_info *p = &tm_prims[n->prim];
    for (int i = 0; i < n->nin; i++) rows[i] = 0;
    if (p->flags & TM_PF_ELEMWISE) {
        /* Strict primitives: every operand has the output's rank; a size-1 row axis
         * broadcasts, so that operand is the same for every row. */
        for (int i = 0; i < n->nin; i++) {
            const tm_vinfo *vi = &c->vals[n->in[i]];
            if (vi->rank != r) return 0;
            rows[i] = vi->dims[ax] != 1;
        }
        return 1;
    }
    switch (n->prim) {
    case TM_P_MATMUL:
        /* Row i of a . b is row i of a times b (plain products only: a transposed
         * operand would hold the rows elsewhere). */
        if (!tm__pass_is_plain_matmul(n) || c->vals[n->in[0]].rank != r) return 0;
        rows[0] = 1;
        return 1;
    case TM_P_MATMUL_NBITS:
        if (c->vals[n->in[0]].rank != r) return 0;
        rows[0] = 1;
        /* A fused residual (i[8]) has the output's rows too: only the plain product. */
        return !n->args.i[8];
    case TM_P_SOFTMAX:
        if (c->vals[n->in[0]].rank != r || (n->args.i[0] + r) % r != r - 1) return 0;
        rows[0] = 1;
        return 1;
    case TM_P_LAYERNORM:
        /* Normalised over the last axis only; scale and bias are per column. */
        if (c->vals[n->in[0]].rank != r || n->args.i[0] != r - 1) return 0;
        rows[0] = 1;
        return 1;
    case TM_P_REDUCE_SUM: case TM_P_REDUCE_PROD: case TM_P_REDUCE_MAX: case TM_P_REDUCE_MIN:
        if (c->vals[n->in[0]].rank != r || (n->args.i[0] >> ax) & 1) return 0;
        rows[0] = 1;
        return 1;
    default:
        return 0;
    }
}

/* The last row of v (rank r >= 2, rows on axis r - 2), emitting what it takes. */
static tm_val last_row(walk *w, tm_val v, int top, int depth) {
    tm_ctx *c = w->c;
    if (!tm_ctx_ok(c)) return TM_NONE;
    const tm_vinfo *vi = &c->vals[v];
    int r = vi->rank, ax = r - 2;
    if (vi->dims[ax] == 1) return v;   /* one row already (or broadcast along the rows) */
    int reused = !top && (v >= w->n_uses || w->uses[v] != 1 || is_output(w, v));
    if (reused || vi->data || vi->producer < 0 || depth >= MAX_DEPTH) return cut(c, v);
    const tm_rnode *n = &c->nodes[vi->producer];
    int rows[64];
    if (n->nin > 64 || n->out[0] != v || !row_local(c, n, r, ax, rows)) return cut(c, v);
    /* The node's fields are copied out first: emitting appends nodes (a realloc). */
    int prim = n->prim, nin = n->nin, nout = n->nout;
    tm_args a = n->args;
    tm_val in[64];
    memcpy(in, n->in, (size_t)nin * sizeof *in);
    for (int i = 0; i < nin; i++)
        if (rows[i] && (in[i] = last_row(w, in[i], 0, depth + 1)) == TM_NONE) return TM_NONE;
    tm_val out[4];
    snprintf(c->where_node, sizeof c->where_node, "last row of %s", c->nodes[vi->producer].where);
    if (tm_prim_n(c, prim, in, nin, &a, out, nout) != TM_OK) return TM_NONE;
    return out[0];
}

tm_status tm__last_rows(tm_ctx *c, const tm_plan *p, const tm_plan_options *opts,
                        tm_oval *outs, tm_error *err) {
    int n_names = opts && opts->size >= offsetof(tm_plan_options, last_row_names) +
                                            sizeof(opts->last_row_names)
                      ? opts->n_last_row : 0;
    if (n_names <= 0) return TM_OK;
    walk w = {c, tm__pass_use_counts(c), c->n_vals, outs, p->n_outputs};
    if (!w.uses) return tm_ctx_fail(c, TM_ERR_NO_MEMORY, "out of memory");
    tm_status st = TM_OK;
    for (int k = 0; st == TM_OK && k < n_names; k++) {
        const char *name = opts->last_row_names[k];
        int i = -1;
        for (int j = 0; name && j < p->n_outputs; j++)
            if (!strcmp(tm__plan_output_name(p, j), name)) i = j;
        if (i < 0) {
            st = tm_ctx_fail(c, TM_ERR_INVALID_ARGUMENT, "tm_plan_options.last_row_names[%d]: "
                          "the model has no output '%s'", k, name ? name : "(null)");
            break;
        }
        if (outs[i].kind != TM_OV_TENSOR || tm_vrank(c, outs[i].v) < 2) {
            st = tm_ctx_fail(c, TM_ERR_INVALID_ARGUMENT, "output '%s' has no rows to keep the "
                          "last of (last_row_names needs a tensor of rank 2 or more)", name);
            break;
        }
        snprintf(c->where_op, sizeof c->where_op, "last_row_names");
        tm_val v = last_row(&w, outs[i].v, 1, 0);
        if (v == TM_NONE) {
            st = tm_ctx_ok(c) ? tm_ctx_fail(c, TM_ERR_RUNTIME, "last_row_names: output '%s' "
                                             "could not be cut", name) : c->status;
            break;
        }
        outs[i].v = v;
    }
    free(w.uses);
    if (st != TM_OK) tm__error_copy(err, &c->err);
    return st;
}
