/* Scan: runs the body once per slice of the scan inputs along their scan axes, carrying
 * N state tensors and stacking K scan outputs. Opset 8 adds a batch axis 0 to every input
 * and output (each batch entry scanned on its own, up to its sequence_lens entry, scan
 * outputs zero-padded); opset 9+ has per-input/output axes and directions. The trip
 * count comes from static shapes, so a traced Scan unrolls. Not Loop (loop.c). */
#include <stdint.h>
#include "control_flow.h"

/* One scan over already-batch-free inputs. */
typedef struct scan_run {
    tm_lower *L;
    const tm_graph *body;
    int n_state, n_in, n_out;     /* N, M, K */
    tm_oval *state;               /* N, owned */
    const tm_val *xs;             /* M scan inputs */
    const int64_t *in_axes, *in_dirs;
    int64_t len;
    tm_val **scans;               /* K lists of len values */
    tm_cf_keep *keep;
} scan_run;

/* Slice t (or len-1-t when reversed) of scan input j, without the scan axis. */
static tm_val scan_element(scan_run *r, int j, int64_t t) {
    tm_ctx *c = tm_lctx(r->L);
    int64_t idx = r->in_dirs[j] ? r->len - 1 - t : t, axis = r->in_axes[j];
    tm_val s = tm_slice_axis(c, r->xs[j], (int)axis, idx, 1);
    return tm_squeeze(c, s, &axis, 1);
}

/* Makes outputs 0..N of the body the next state; frees what only the old state and
 * this iteration's input slices used. */
static void scan_advance(scan_run *r, tm_oval *res, const tm_oval *in) {
    tm_ctx *c = tm_lctx(r->L);
    for (int i = 0; i < r->n_state; i++) tm_cf_hold(c, &res[i], +1);
    for (int i = 0; i < r->n_state; i++) {
        tm_cf_drop(c, &r->state[i], r->keep);
        tm_cf_free(&r->state[i]);
        r->state[i] = res[i];
        memset(&res[i], 0, sizeof res[i]);
    }
    for (int j = 0; j < r->n_in; j++) tm_cf_drop(c, &in[r->n_state + j], r->keep);
    for (int i = 0; i < r->n_state; i++) tm_cf_hold(c, &r->state[i], -1);
}

static tm_status scan_iterate(scan_run *r) {
    tm_lower *L = r->L;
    tm_ctx *c = tm_lctx(L);
    int nin = r->n_state + r->n_in, nout = r->n_state + r->n_out;
    tm_oval *in = calloc((size_t)nin + 1, sizeof *in);
    tm_oval *res = calloc((size_t)nout + 1, sizeof *res);
    tm_status st = in && res ? TM_OK : tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    for (int64_t t = 0; t < r->len && st == TM_OK; t++) {
        memcpy(in, r->state, (size_t)r->n_state * sizeof *in);
        for (int j = 0; j < r->n_in; j++)
            in[r->n_state + j] = (tm_oval){.kind = TM_OV_TENSOR, .v = scan_element(r, j, t)};
        memset(res, 0, (size_t)nout * sizeof *res);
        st = tm_ctx_ok(c) ? tm_lower_subgraph(L, r->body, nin, in, res) : c->status;
        for (int k = 0; k < r->n_out && st == TM_OK; k++) {
            const tm_oval *o = &res[r->n_state + k];
            if (o->kind != TM_OV_TENSOR)
                st = tm_lfail(L, TM_ERR_DTYPE, "body output %d ('%s') must be a tensor",
                              r->n_state + k, r->body->outputs[r->n_state + k].name);
            else if (tm_cf_keep_mark(r->keep, o->v))
                st = tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
            else
                r->scans[k][t] = o->v;
        }
        if (st == TM_OK) scan_advance(r, res, in);
        for (int k = 0; k < nout; k++) tm_cf_free(&res[k]);
    }
    free(in);
    free(res);
    return st;
}

/* Runs one scan; on success r->state holds the final states and r->scans the
 * per-iteration outputs (both the caller's to free with scan_free). */
static tm_status scan_run_all(scan_run *r, const tm_val *init) {
    tm_lower *L = r->L;
    r->state = calloc((size_t)r->n_state + 1, sizeof *r->state);
    r->scans = calloc((size_t)r->n_out + 1, sizeof *r->scans);
    if (!r->state || !r->scans) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < r->n_state; i++) r->state[i] = (tm_oval){.kind = TM_OV_TENSOR, .v = init[i]};
    for (int k = 0; k < r->n_out; k++) {
        r->scans[k] = malloc((size_t)(r->len ? r->len : 1) * sizeof **r->scans);
        if (!r->scans[k]) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    }
    return scan_iterate(r);
}

static void scan_free(scan_run *r) {
    for (int i = 0; r->state && i < r->n_state; i++) tm_cf_free(&r->state[i]);
    for (int k = 0; r->scans && k < r->n_out; k++) free(r->scans[k]);
    free(r->state);
    free(r->scans);
    r->state = NULL;
    r->scans = NULL;
}

/* Scan output k of a finished run, stacked along `axis`, reversed when prepending. */
static tm_val scan_stack(scan_run *r, int k, int axis, int prepend) {
    tm_ctx *c = tm_lctx(r->L);
    const tm_value_info *vi = &r->body->outputs[r->n_state + k];
    if (r->len == 0) return tm_cf_empty_scan(c, &vi->type, axis);
    tm_val *xs = r->scans[k];
    if (!tm_cf_same_shapes(c, xs, r->len, vi->name)) return TM_NONE;
    int rank = tm_vrank(c, xs[0]);
    if (axis < 0) axis += rank + 1;
    if (axis < 0 || axis > rank) {
        tm_lfail(r->L, TM_ERR_SHAPE, "scan output axis for '%s' is outside [%d, %d]", vi->name,
                 -rank - 1, rank);
        return TM_NONE;
    }
    for (int64_t i = 0; prepend && i < r->len / 2; i++) {
        tm_val t = xs[i];
        xs[i] = xs[r->len - 1 - i];
        xs[r->len - 1 - i] = t;
    }
    return tm_cf_stack(c, xs, r->len, axis);
}

/* A list attribute of n entries (default 0), validated. Returns 0 or -1 (node failed). */
static int list_attr(tm_lower *L, const char *name, int n, int64_t *out) {
    const int64_t *v;
    int k = tm_attr_ints(L, name, &v);
    for (int i = 0; i < n; i++) out[i] = 0;
    if (k < 0) return 0;
    if (k != n) {
        tm_lfail(L, TM_ERR_SHAPE, "attribute '%s' has %d entries, expected %d", name, k, n);
        return -1;
    }
    for (int i = 0; i < n; i++) out[i] = v[i];
    return 0;
}

/* The body and the counts N, M, K, checked against the node (first_state: input index
 * of the first state). */
static const tm_graph *scan_shape(tm_lower *L, int first_state, int *n, int *m, int *k) {
    const tm_graph *g = tm_attr_g(L, "body");
    if (!g) {
        tm_lfail(L, TM_ERR_PARSE, "attribute 'body' is missing");
        return NULL;
    }
    if (!tm_attr_has(L, "num_scan_inputs")) {
        tm_lfail(L, TM_ERR_PARSE, "attribute 'num_scan_inputs' is missing");
        return NULL;
    }
    int64_t nm = tm_attr_i(L, "num_scan_inputs", 0);
    int total = tm_lnin(L) - first_state;
    if (nm < 1 || nm > total) {
        tm_lfail(L, TM_ERR_SHAPE, "attribute 'num_scan_inputs' is %lld for %d inputs",
                 (long long)nm, total);
        return NULL;
    }
    *m = (int)nm;
    *n = total - *m;
    *k = g->n_outputs - *n;
    if (g->n_inputs != total || *k < 0 || tm_lnout(L) > g->n_outputs) {
        tm_lfail(L, TM_ERR_SHAPE, "body has %d inputs and %d outputs for %d states, %d scan "
                 "inputs and %d node outputs", g->n_inputs, g->n_outputs, *n, *m, tm_lnout(L));
        return NULL;
    }
    for (int i = first_state; i < tm_lnin(L); i++)
        if (!tm_lhas(L, i)) {
            tm_lfail(L, TM_ERR_PARSE, "input %d is missing", i);
            return NULL;
        }
    return g;
}

/* ---- Opset 9+ ---------------------------------------------------------------------- */

/* Normalises the scan input axes and finds the common sequence length. */
static int scan9_inputs(tm_lower *L, int n, int m, int64_t *axes, int64_t *len) {
    tm_ctx *c = tm_lctx(L);
    for (int j = 0; j < m; j++) {
        tm_val x = tm_lin(L, n + j);
        int rank = tm_vrank(c, x);
        if (axes[j] < -rank || axes[j] >= rank)
            return tm_lfail(L, TM_ERR_SHAPE, "scan_input_axes[%d] is %lld, outside [%d, %d]",
                            j, (long long)axes[j], -rank, rank - 1);
        if (axes[j] < 0) axes[j] += rank;
        int64_t l = tm_vdims(c, x)[axes[j]];
        if (j == 0) *len = l;
        else if (l != *len)
            return tm_lfail(L, TM_ERR_SHAPE, "scan input %d has %lld steps, scan input 0 has "
                            "%lld", j, (long long)l, (long long)*len);
    }
    return 0;
}

static tm_status lower_scan9(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    int n, m, k;
    const tm_graph *g = scan_shape(L, 0, &n, &m, &k);
    if (!g) return c->status;
    int64_t *attrs = calloc((size_t)(2 * m + 2 * k + 1), sizeof *attrs);
    tm_val *init = calloc((size_t)(n + m + 1), sizeof *init);
    if (!attrs || !init) {
        free(attrs);
        free(init);
        return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    }
    int64_t *in_axes = attrs, *in_dirs = attrs + m, *out_axes = attrs + 2 * m,
            *out_dirs = attrs + 2 * m + k;
    tm_cf_keep keep = {c->n_vals, NULL, 0};
    scan_run r = {L, g, n, m, k, NULL, init + n, in_axes, in_dirs, 0, NULL, &keep};
    for (int i = 0; i < n + m; i++) init[i] = tm_lin(L, i);
    int bad = list_attr(L, "scan_input_axes", m, in_axes) ||
              list_attr(L, "scan_input_directions", m, in_dirs) ||
              list_attr(L, "scan_output_axes", k, out_axes) ||
              list_attr(L, "scan_output_directions", k, out_dirs) ||
              scan9_inputs(L, n, m, in_axes, &r.len);
    tm_status st = bad ? c->status : scan_run_all(&r, init);
    for (int i = 0; i < n && st == TM_OK; i++) tm_lout_oval(L, i, &r.state[i]);
    for (int j = 0; j < k && st == TM_OK && tm_ctx_ok(c); j++)
        if (tm_lwants(L, n + j)) tm_lout(L, n + j, scan_stack(&r, j, (int)out_axes[j], out_dirs[j] != 0));
    scan_free(&r);
    free(keep.mark);
    free(attrs);
    free(init);
    return st == TM_OK ? c->status : st;
}
TM_REGISTER_OP("", "Scan", 9, 27, lower_scan9);

/* ---- Opset 8: batch axis 0, sequence axis 1 ---------------------------------------- */

/* Entry b of x along axis 0, without that axis. */
static tm_val batch_entry(tm_ctx *c, tm_val x, int64_t b) {
    int64_t axis = 0;
    return tm_squeeze(c, tm_slice_axis(c, x, 0, b, 1), &axis, 1);
}

/* Pads a (len, ...) scan output with zeros to (max_len, ...). */
static tm_val pad_steps(tm_ctx *c, tm_val y, int64_t max_len) {
    int64_t begin[TM_MAX_RANK] = {0}, end[TM_MAX_RANK] = {0};
    end[0] = max_len - tm_vdims(c, y)[0];
    return end[0] ? tm_pad(c, y, 0, begin, end, 0.0) : y;
}

typedef struct scan8 {
    tm_lower *L;
    const tm_graph *g;
    int n, m, k;
    int64_t batch, max_len;
    const int64_t *lens, *dirs;
    tm_val *finals;       /* n x batch */
    tm_val *outs;         /* k x batch, each (max_len, ...) */
} scan8;

static tm_status scan8_batch(scan8 *s, int64_t b, tm_cf_keep *keep) {
    tm_ctx *c = tm_lctx(s->L);
    int n = s->n, m = s->m;
    tm_val *vals = calloc((size_t)(n + m + 1), sizeof *vals);
    int64_t *axes = calloc((size_t)m + 1, sizeof *axes);
    if (!vals || !axes) {
        free(vals);
        free(axes);
        return tm_lfail(s->L, TM_ERR_NO_MEMORY, "out of memory");
    }
    for (int i = 0; i < n + m; i++) vals[i] = batch_entry(c, tm_lin(s->L, 1 + i), b);
    scan_run r = {s->L, s->g, n, m, s->k, NULL, vals + n, axes, s->dirs, s->lens[b], NULL, keep};
    tm_status st = tm_ctx_ok(c) ? scan_run_all(&r, vals) : c->status;
    for (int i = 0; i < n && st == TM_OK; i++) s->finals[(int64_t)i * s->batch + b] = r.state[i].v;
    for (int j = 0; j < s->k && st == TM_OK; j++) {
        tm_val y = r.len ? scan_stack(&r, j, 0, 0) : TM_NONE;
        s->outs[(int64_t)j * s->batch + b] = y == TM_NONE ? TM_NONE : pad_steps(c, y, s->max_len);
        st = c->status;
    }
    scan_free(&r);
    free(vals);
    free(axes);
    return st == TM_OK ? c->status : st;
}

/* Batch entries that ran no step get zeros shaped like the others (or like the body's
 * declared output). */
static tm_val scan8_output(scan8 *s, int j) {
    tm_ctx *c = tm_lctx(s->L);
    tm_val *ys = &s->outs[(int64_t)j * s->batch];
    tm_val like = TM_NONE;
    for (int64_t b = 0; b < s->batch && like == TM_NONE; b++) like = ys[b];
    if (like == TM_NONE) {
        like = tm_cf_empty_scan(c, &s->g->outputs[s->n + j].type, 0);
        if (like == TM_NONE) return TM_NONE;
        int64_t dims[TM_MAX_RANK];
        memcpy(dims, tm_vdims(c, like), sizeof dims);
        dims[0] = s->max_len;
        like = tm_const_fill(c, tm_vdtype(c, like), tm_vrank(c, like), dims, 0.0);
    }
    for (int64_t b = 0; b < s->batch && tm_ctx_ok(c); b++)
        if (ys[b] == TM_NONE)
            ys[b] = tm_const_fill(c, tm_vdtype(c, like), tm_vrank(c, like), tm_vdims(c, like), 0.0);
    if (!tm_cf_same_shapes(c, ys, s->batch, s->g->outputs[s->n + j].name)) return TM_NONE;
    return tm_cf_stack(c, ys, s->batch, 0);
}

/* Batch size, sequence length and per-entry lengths (malloc'd) of an opset-8 Scan. */
static int scan8_lengths(tm_lower *L, scan8 *s, int64_t **lens) {
    tm_ctx *c = tm_lctx(L);
    tm_val x0 = tm_lin(L, 1 + s->n);
    for (int i = 0; i < s->n + s->m; i++) {
        tm_val x = tm_lin(L, 1 + i);
        int need = i < s->n ? 1 : 2;
        if (tm_vrank(c, x) < need || tm_vdims(c, x)[0] != tm_vdims(c, x0)[0] ||
            (i >= s->n && tm_vdims(c, x)[1] != tm_vdims(c, x0)[1]))
            return tm_lfail(L, TM_ERR_SHAPE, "input %d ('%s') does not have the batch (and "
                            "sequence) dims of scan input 0", 1 + i, tm_lnode(L)->inputs[1 + i]);
    }
    s->batch = tm_vdims(c, x0)[0];
    s->max_len = tm_vdims(c, x0)[1];
    *lens = malloc((size_t)(s->batch ? s->batch : 1) * sizeof **lens);
    if (!*lens) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    for (int64_t b = 0; b < s->batch; b++) (*lens)[b] = s->max_len;
    if (!tm_lhas(L, 0)) return 0;
    tm_val sl = tm_lin(L, 0);
    if (tm_vnumel(c, sl) != s->batch)
        return tm_lfail(L, TM_ERR_SHAPE, "input 'sequence_lens' has %lld entries for a batch "
                        "of %lld", (long long)tm_vnumel(c, sl), (long long)s->batch);
    if (tm_host_i64(c, sl, *lens, s->batch) != s->batch) return -1;
    for (int64_t b = 0; b < s->batch; b++)
        if ((*lens)[b] < 0 || (*lens)[b] > s->max_len)
            return tm_lfail(L, TM_ERR_SHAPE, "sequence_lens[%lld] is %lld, outside [0, %lld]",
                            (long long)b, (long long)(*lens)[b], (long long)s->max_len);
    return 0;
}

static tm_status lower_scan8(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    scan8 s;
    memset(&s, 0, sizeof s);
    s.L = L;
    s.g = scan_shape(L, 1, &s.n, &s.m, &s.k);
    if (!s.g) return c->status;
    int64_t *lens = NULL, *dirs = calloc((size_t)s.m + 1, sizeof *dirs);
    tm_cf_keep keep = {c->n_vals, NULL, 0};
    tm_status st = dirs ? TM_OK : tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    if (st == TM_OK && (list_attr(L, "directions", s.m, dirs) || scan8_lengths(L, &s, &lens)))
        st = c->status;
    s.lens = lens;
    s.dirs = dirs;
    if (st == TM_OK) {
        s.finals = calloc((size_t)((s.n + 1) * (s.batch + 1)), sizeof *s.finals);
        s.outs = calloc((size_t)((s.k + 1) * (s.batch + 1)), sizeof *s.outs);
        if (!s.finals || !s.outs) st = tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    }
    for (int64_t b = 0; b < s.batch && st == TM_OK; b++) st = scan8_batch(&s, b, &keep);
    for (int i = 0; i < s.n && st == TM_OK; i++)
        tm_lout(L, i, tm_cf_stack(c, &s.finals[(int64_t)i * s.batch], s.batch, 0));
    for (int j = 0; j < s.k && st == TM_OK && tm_ctx_ok(c); j++)
        if (tm_lwants(L, s.n + j)) tm_lout(L, s.n + j, scan8_output(&s, j));
    free(s.finals);
    free(s.outs);
    free(lens);
    free(dirs);
    free(keep.mark);
    return st == TM_OK ? c->status : st;
}
TM_REGISTER_OP("", "Scan", 8, 8, lower_scan8);
