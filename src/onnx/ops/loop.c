/* Loop: runs the body while the trip count and the condition allow, carrying N values
 * (tensors, sequences, optionals) and stacking K scan outputs along a new axis 0. The
 * trip count and each condition are read on the host: under trace a known loop unrolls,
 * an unknown count or condition is a graph break. Not Scan (scan.c) nor If (if.c). */
#include <stdint.h>
#include "control_flow.h"

typedef struct loop_run {
    tm_lower *L;
    const tm_graph *body;
    int n_carried, n_scan;
    tm_oval cond;          /* condition fed to the next iteration */
    tm_oval *state;        /* n_carried, sequence arrays owned here */
    tm_val **scans;        /* n_scan lists of per-iteration values */
    int64_t n_iter, cap_iter;
    tm_cf_keep keep;
} loop_run;

static void loop_free(loop_run *r) {
    for (int i = 0; r->state && i < r->n_carried; i++) tm_cf_free(&r->state[i]);
    for (int k = 0; r->scans && k < r->n_scan; k++) free(r->scans[k]);
    free(r->state);
    free(r->scans);
    free(r->keep.mark);
}

/* A one-element value as body input `i` expects it: ONNX says the iteration number and
 * the condition are scalars, but exporters (tf2onnx) declare them (1) and ONNX Runtime
 * feeds them with the rank the body declares, so bodies Slice with the iteration number
 * as `starts`. Only rank 1 is honoured; anything else stays as it is. */
static tm_val loop_as_declared(loop_run *r, int i, tm_val v) {
    tm_ctx *c = tm_lctx(r->L);
    const tm_type *t = &r->body->inputs[i].type;
    if (!tm_ctx_ok(c) || t->kind != TM_TYPE_TENSOR || t->rank != 1 || tm_vrank(c, v) != 0)
        return v;
    int64_t one = 1;
    return tm_reshape(c, v, 1, &one);
}

static tm_status loop_init(loop_run *r) {
    tm_lower *L = r->L;
    tm_ctx *c = tm_lctx(L);
    r->state = calloc((size_t)r->n_carried + 1, sizeof *r->state);
    r->scans = calloc((size_t)r->n_scan + 1, sizeof *r->scans);
    if (!r->state || !r->scans) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < r->n_carried; i++) {
        const tm_oval *x = tm_lin_oval(L, 2 + i);
        if (x && tm_cf_copy(&r->state[i], x)) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    }
    r->cond.kind = TM_OV_TENSOR;
    r->cond.v = tm_lhas(L, 1) ? tm_lin(L, 1) : tm_const_scalar(c, TM_BOOL, 1);
    r->cond.v = loop_as_declared(r, 1, r->cond.v);
    return c->status;
}

/* Appends this iteration's scan values (outputs 1+N..) and keeps them alive. */
static tm_status loop_collect(loop_run *r, const tm_oval *res) {
    tm_lower *L = r->L;
    if (r->n_iter == r->cap_iter) {
        int64_t cap = r->cap_iter ? r->cap_iter * 2 : 16;
        for (int k = 0; k < r->n_scan; k++) {
            tm_val *p = realloc(r->scans[k], (size_t)cap * sizeof *p);
            if (!p) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
            r->scans[k] = p;
        }
        r->cap_iter = cap;
    }
    for (int k = 0; k < r->n_scan; k++) {
        const tm_oval *o = &res[1 + r->n_carried + k];
        if (o->kind != TM_OV_TENSOR)
            return tm_lfail(L, TM_ERR_DTYPE, "body output %d ('%s') is a scan output and must "
                            "be a tensor", 1 + r->n_carried + k,
                            r->body->outputs[1 + r->n_carried + k].name);
        r->scans[k][r->n_iter] = o->v;
        if (tm_cf_keep_mark(&r->keep, o->v)) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    }
    r->n_iter++;
    return TM_OK;
}

/* Makes the body's outputs the next state; frees what only the old state used. */
static void loop_advance(loop_run *r, tm_oval *res, tm_val iter) {
    tm_ctx *c = tm_lctx(r->L);
    for (int i = 0; i <= r->n_carried; i++) tm_cf_hold(c, &res[i], +1);
    for (int i = 0; i < r->n_carried; i++) {
        tm_cf_drop(c, &r->state[i], &r->keep);
        tm_cf_free(&r->state[i]);
        r->state[i] = res[1 + i];
        memset(&res[1 + i], 0, sizeof res[1 + i]);
    }
    tm_cf_drop(c, &r->cond, &r->keep);
    tm_oval it = {.kind = TM_OV_TENSOR, .v = iter};
    tm_cf_drop(c, &it, &r->keep);
    r->cond = res[0];
    memset(&res[0], 0, sizeof res[0]);
    tm_cf_hold(c, &r->cond, -1);
    for (int i = 0; i < r->n_carried; i++) tm_cf_hold(c, &r->state[i], -1);
}

static tm_status loop_iterate(loop_run *r, int64_t max_trip) {
    tm_lower *L = r->L;
    tm_ctx *c = tm_lctx(L);
    int nin = 2 + r->n_carried, nout = r->body->n_outputs;
    tm_oval *in = calloc((size_t)nin, sizeof *in);
    tm_oval *res = calloc((size_t)nout, sizeof *res);
    if (!in || !res) {
        free(in);
        free(res);
        return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    }
    tm_status st = TM_OK;
    int go = tm_cf_flag(c, r->cond.v, "input 'cond'");
    if (go < 0) st = c->status;
    for (int64_t it = 0; st == TM_OK && go && it < max_trip; it++) {
        tm_val iter = loop_as_declared(r, 0, tm_const_scalar(c, TM_INT64, (double)it));
        in[0] = (tm_oval){.kind = TM_OV_TENSOR, .v = iter};
        in[1] = r->cond;
        memcpy(in + 2, r->state, (size_t)r->n_carried * sizeof *in);
        memset(res, 0, (size_t)nout * sizeof *res);
        st = tm_lower_subgraph(L, r->body, nin, in, res);
        if (st == TM_OK && res[0].kind != TM_OV_TENSOR)
            st = tm_lfail(L, TM_ERR_DTYPE, "body output 0 (the condition) must be a tensor");
        if (st == TM_OK) st = loop_collect(r, res);
        if (st == TM_OK) {
            loop_advance(r, res, iter);
            go = tm_cf_flag(c, r->cond.v, "body output 0 (the condition)");
            if (go < 0) st = c->status;
        }
        for (int k = 0; k < nout; k++) tm_cf_free(&res[k]);
    }
    free(in);
    free(res);
    return st;
}

static tm_status loop_outputs(loop_run *r) {
    tm_lower *L = r->L;
    tm_ctx *c = tm_lctx(L);
    for (int i = 0; i < r->n_carried; i++) tm_lout_oval(L, i, &r->state[i]);
    for (int k = 0; k < r->n_scan && tm_ctx_ok(c); k++) {
        int o = r->n_carried + k;
        if (!tm_lwants(L, o)) continue;
        const tm_value_info *vi = &r->body->outputs[1 + o];
        if (r->n_iter == 0) {
            tm_lout(L, o, tm_cf_empty_scan(c, &vi->type, 0));
            continue;
        }
        if (!tm_cf_same_shapes(c, r->scans[k], r->n_iter, vi->name)) break;
        tm_lout(L, o, tm_cf_stack(c, r->scans[k], r->n_iter, 0));
    }
    return c->status;
}

static tm_status lower_loop(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    const tm_graph *g = tm_attr_g(L, "body");
    if (!g) return tm_lfail(L, TM_ERR_PARSE, "attribute 'body' is missing");
    int n_carried = tm_lnin(L) > 2 ? tm_lnin(L) - 2 : 0;
    if (g->n_inputs != 2 + n_carried)
        return tm_lfail(L, TM_ERR_SHAPE, "body takes %d inputs, expected 2 + %d loop-carried",
                        g->n_inputs, n_carried);
    int n_scan = g->n_outputs - 1 - n_carried;
    if (n_scan < 0 || tm_lnout(L) > n_carried + n_scan)
        return tm_lfail(L, TM_ERR_SHAPE, "body has %d outputs for %d loop-carried values and "
                        "%d node outputs", g->n_outputs, n_carried, tm_lnout(L));
    int64_t max_trip = INT64_MAX;
    if (tm_lhas(L, 0)) {
        tm_val m = tm_lin(L, 0);
        if (tm_vnumel(c, m) != 1)
            return tm_lfail(L, TM_ERR_SHAPE, "input 'M' must hold one value, it has %lld",
                            (long long)tm_vnumel(c, m));
        if (tm_host_i64(c, m, &max_trip, 1) != 1) return c->status;
    }
    loop_run r;
    memset(&r, 0, sizeof r);
    r.L = L;
    r.body = g;
    r.n_carried = n_carried;
    r.n_scan = n_scan;
    r.keep.first = c->n_vals;
    tm_status st = loop_init(&r);
    if (st == TM_OK) st = loop_iterate(&r, max_trip);
    if (st == TM_OK) st = loop_outputs(&r);
    loop_free(&r);
    return st == TM_OK ? c->status : st;
}
TM_REGISTER_OP("", "Loop", 1, 27, lower_loop);
