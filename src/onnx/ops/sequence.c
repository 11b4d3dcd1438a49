/* The tensor-sequence operators: SequenceEmpty, SequenceConstruct, SequenceInsert,
 * SequenceAt, SequenceErase, SequenceLength, SplitToSequence, ConcatFromSequence and
 * SequenceMap. A sequence is an array of values (tm_oval kind TM_OV_SEQ); positions and
 * split sizes are read on the host. Not Optional (optional.c) nor ReverseSequence. */
#include <stdlib.h>
#include <string.h>
#include "../lower.h"

/* Publishes a sequence as output i (tm_lout_oval copies the array). */
static void out_seq(tm_lower *L, int i, const tm_val *vals, int n, tm_dtype dt) {
    tm_oval ov;
    memset(&ov, 0, sizeof ov);
    ov.kind = TM_OV_SEQ;
    ov.seq = (tm_val *)vals;
    ov.n = n;
    ov.seq_dtype = dt;
    tm_lout_oval(L, i, &ov);
}

/* Input i as a sequence, or NULL with the node failed. */
static const tm_oval *in_seq(tm_lower *L, int i) {
    const tm_oval *s = tm_lin_oval(L, i);
    if (s && s->kind == TM_OV_SEQ) return s;
    tm_lfail(L, TM_ERR_DTYPE, "input %d ('%s') must be a sequence, got %s", i,
             i < tm_lnin(L) ? tm_lnode(L)->inputs[i] : "",
             !s || s->kind == TM_OV_NONE ? "nothing" : "a tensor");
    return NULL;
}

/* The element dtype of a sequence: declared, else that of its first element. */
static tm_dtype seq_dtype(tm_ctx *c, const tm_oval *s) {
    if (s->seq_dtype != TM_UNDEFINED) return s->seq_dtype;
    return s->n ? tm_vdtype(c, s->seq[0]) : TM_UNDEFINED;
}

/* Reads the scalar position of input i into *pos, checked against [lo, hi] after
 * wrapping negatives by n. Returns 0 on success (the node failed otherwise). */
static int read_position(tm_lower *L, int i, int64_t n, int64_t hi, int64_t *pos) {
    tm_ctx *c = tm_lctx(L);
    tm_val p = tm_lin(L, i);
    tm_dtype dt = tm_vdtype(c, p);
    if (dt != TM_INT32 && dt != TM_INT64) {
        tm_lfail(L, TM_ERR_DTYPE, "input 'position' must be int32 or int64, got %s",
                 tm_dtype_name(dt));
        return -1;
    }
    if (tm_vnumel(c, p) != 1) {
        tm_lfail(L, TM_ERR_SHAPE, "input 'position' must be a scalar, it has %lld values",
                 (long long)tm_vnumel(c, p));
        return -1;
    }
    if (tm_host_i64(c, p, pos, 1) != 1) return -1;
    int64_t at = *pos < 0 ? *pos + n : *pos;
    if (at < 0 || at > hi) {
        tm_lfail(L, TM_ERR_SHAPE, "input 'position' is %lld, outside [%lld, %lld] for a "
                 "sequence of %lld", (long long)*pos, (long long)-n, (long long)hi,
                 (long long)n);
        return -1;
    }
    *pos = at;
    return 0;
}

static tm_status lower_sequence_empty(tm_lower *L) {
    tm_dtype dt = (tm_dtype)tm_attr_i(L, "dtype", TM_FLOAT);
    if (!tm_dtype_is_valid((int)dt))
        return tm_lfail(L, TM_ERR_DTYPE, "attribute 'dtype' is %d, not a tensor type", (int)dt);
    out_seq(L, 0, NULL, 0, dt);
    return tm_lctx(L)->status;
}
TM_REGISTER_OP("", "SequenceEmpty", 11, 27, lower_sequence_empty);

static tm_status lower_sequence_construct(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    int n = tm_lnin(L);
    if (n < 1) return tm_lfail(L, TM_ERR_PARSE, "SequenceConstruct needs at least one input");
    tm_val *xs = malloc((size_t)n * sizeof *xs);
    if (!xs) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < n && tm_ctx_ok(c); i++) {
        xs[i] = tm_lin(L, i);
        if (xs[i] == TM_NONE && tm_ctx_ok(c))
            tm_lfail(L, TM_ERR_PARSE, "input %d ('%s') is missing", i, tm_lnode(L)->inputs[i]);
        else if (tm_ctx_ok(c) && tm_vdtype(c, xs[i]) != tm_vdtype(c, xs[0]))
            tm_lfail(L, TM_ERR_DTYPE, "input %d ('%s') is %s, input 0 is %s", i,
                     tm_lnode(L)->inputs[i], tm_dtype_name(tm_vdtype(c, xs[i])),
                     tm_dtype_name(tm_vdtype(c, xs[0])));
    }
    if (tm_ctx_ok(c)) out_seq(L, 0, xs, n, tm_vdtype(c, xs[0]));
    free(xs);
    return c->status;
}
TM_REGISTER_OP("", "SequenceConstruct", 11, 27, lower_sequence_construct);

static tm_status lower_sequence_insert(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    const tm_oval *s = in_seq(L, 0);
    tm_val x = tm_lin(L, 1);
    if (!s || !tm_ctx_ok(c)) return c->status;
    if (x == TM_NONE) return tm_lfail(L, TM_ERR_PARSE, "input 1 ('tensor') is missing");
    tm_dtype dt = seq_dtype(c, s);
    if (dt != TM_UNDEFINED && tm_vdtype(c, x) != dt)
        return tm_lfail(L, TM_ERR_DTYPE, "input 'tensor' is %s, the sequence holds %s",
                        tm_dtype_name(tm_vdtype(c, x)), tm_dtype_name(dt));
    int64_t pos = s->n;
    if (tm_lhas(L, 2) && read_position(L, 2, s->n, s->n, &pos)) return c->status;
    tm_val *xs = malloc(((size_t)s->n + 1) * sizeof *xs);
    if (!xs) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    for (int64_t i = 0, k = 0; i <= s->n; i++)
        xs[i] = i == pos ? x : s->seq[k++];
    out_seq(L, 0, xs, s->n + 1, tm_vdtype(c, x));
    free(xs);
    return c->status;
}
TM_REGISTER_OP("", "SequenceInsert", 11, 27, lower_sequence_insert);

static tm_status lower_sequence_at(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    const tm_oval *s = in_seq(L, 0);
    if (!s) return c->status;
    if (!tm_lhas(L, 1)) return tm_lfail(L, TM_ERR_PARSE, "input 1 ('position') is missing");
    int64_t pos;
    if (read_position(L, 1, s->n, (int64_t)s->n - 1, &pos)) return c->status;
    tm_lout(L, 0, s->seq[pos]);
    return c->status;
}
TM_REGISTER_OP("", "SequenceAt", 11, 27, lower_sequence_at);

static tm_status lower_sequence_erase(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    const tm_oval *s = in_seq(L, 0);
    if (!s) return c->status;
    if (s->n == 0) return tm_lfail(L, TM_ERR_SHAPE, "cannot erase from an empty sequence");
    int64_t pos = s->n - 1;
    if (tm_lhas(L, 1) && read_position(L, 1, s->n, (int64_t)s->n - 1, &pos)) return c->status;
    tm_val *xs = malloc((size_t)s->n * sizeof *xs);
    if (!xs) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    int k = 0;
    for (int i = 0; i < s->n; i++)
        if (i != pos) xs[k++] = s->seq[i];
    out_seq(L, 0, xs, k, seq_dtype(c, s));
    free(xs);
    return c->status;
}
TM_REGISTER_OP("", "SequenceErase", 11, 27, lower_sequence_erase);

static tm_status lower_sequence_length(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    const tm_oval *s = in_seq(L, 0);
    if (!s) return c->status;
    tm_lout(L, 0, tm_const_scalar(c, TM_INT64, (double)s->n));
    return c->status;
}
TM_REGISTER_OP("", "SequenceLength", 11, 27, lower_sequence_length);

/* ---- SplitToSequence --------------------------------------------------------------- */

/* Fills sizes (malloc'd, *n of them) from the 'split' input, or with 1s when absent. */
static int split_sizes(tm_lower *L, int64_t dim, int64_t **sizes, int64_t *n) {
    tm_ctx *c = tm_lctx(L);
    if (!tm_lhas(L, 1)) {
        *n = dim;
        *sizes = malloc((size_t)(dim ? dim : 1) * sizeof **sizes);
        if (!*sizes) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
        for (int64_t i = 0; i < dim; i++) (*sizes)[i] = 1;
        return 0;
    }
    tm_val sv = tm_lin(L, 1);
    int rank = tm_vrank(c, sv);
    int64_t count = tm_vnumel(c, sv);
    if (rank > 1 || (tm_vdtype(c, sv) != TM_INT32 && tm_vdtype(c, sv) != TM_INT64))
        return tm_lfail(L, TM_ERR_SHAPE, "input 'split' must be an int32/int64 scalar or 1-D "
                        "tensor, got rank %d %s", rank, tm_dtype_name(tm_vdtype(c, sv)));
    int64_t *vals = malloc((size_t)(count ? count : 1) * sizeof *vals);
    if (!vals) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    if (tm_host_i64(c, sv, vals, count) != count) {
        free(vals);
        return -1;
    }
    if (rank == 0) {
        int64_t chunk = vals[0];
        free(vals);
        if (chunk <= 0)
            return tm_lfail(L, TM_ERR_SHAPE, "input 'split' is %lld, it must be positive",
                            (long long)chunk);
        *n = (dim + chunk - 1) / chunk;
        *sizes = malloc((size_t)(*n ? *n : 1) * sizeof **sizes);
        if (!*sizes) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
        for (int64_t i = 0; i < *n; i++)
            (*sizes)[i] = dim - i * chunk < chunk ? dim - i * chunk : chunk;
        return 0;
    }
    int64_t sum = 0;
    for (int64_t i = 0; i < count; i++) {
        if (vals[i] < 0) {
            long long bad = (long long)vals[i];
            free(vals);
            return tm_lfail(L, TM_ERR_SHAPE, "input 'split' has a negative size %lld", bad);
        }
        sum += vals[i];
    }
    if (sum != dim) {
        free(vals);
        return tm_lfail(L, TM_ERR_SHAPE, "input 'split' sums to %lld, the axis has %lld",
                        (long long)sum, (long long)dim);
    }
    *sizes = vals;
    *n = count;
    return 0;
}

static tm_status lower_split_to_sequence(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    if (x == TM_NONE) return tm_ctx_ok(c) ? tm_lfail(L, TM_ERR_PARSE, "input 0 is missing")
                                          : c->status;
    int rank = tm_vrank(c, x);
    int64_t axis_attr = tm_attr_i(L, "axis", 0);
    if (rank == 0 || axis_attr < -rank || axis_attr >= rank)
        return tm_lfail(L, TM_ERR_SHAPE, "attribute 'axis' is %lld, outside [%d, %d]",
                        (long long)axis_attr, -rank, rank - 1);
    int axis = (int)(axis_attr < 0 ? axis_attr + rank : axis_attr);
    int64_t dim = tm_vdims(c, x)[axis];
    int squeeze = !tm_lhas(L, 1) && !tm_attr_i(L, "keepdims", 1);
    int64_t *sizes = NULL, n = 0;
    if (split_sizes(L, dim, &sizes, &n)) return c->status;
    tm_val *parts = malloc((size_t)(n ? n : 1) * sizeof *parts);
    if (!parts) {
        free(sizes);
        return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    }
    int64_t start = 0;
    for (int64_t i = 0; i < n; i++) {
        parts[i] = tm_slice_axis(c, x, axis, start, sizes[i]);
        if (squeeze) {
            int64_t ax = axis;
            parts[i] = tm_squeeze(c, parts[i], &ax, 1);
        }
        start += sizes[i];
    }
    if (tm_ctx_ok(c)) out_seq(L, 0, parts, (int)n, tm_vdtype(c, x));
    free(parts);
    free(sizes);
    return c->status;
}
TM_REGISTER_OP("", "SplitToSequence", 11, 27, lower_split_to_sequence);

static tm_status lower_concat_from_sequence(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    const tm_oval *s = in_seq(L, 0);
    if (!s) return c->status;
    if (!tm_attr_has(L, "axis")) return tm_lfail(L, TM_ERR_PARSE, "attribute 'axis' is missing");
    if (s->n == 0) return tm_lfail(L, TM_ERR_SHAPE, "cannot concatenate an empty sequence");
    int new_axis = tm_attr_i(L, "new_axis", 0) != 0;
    int rank = tm_vrank(c, s->seq[0]);
    int out_rank = rank + new_axis;
    int64_t axis = tm_attr_i(L, "axis", 0);
    if (axis < -out_rank || axis >= out_rank || out_rank == 0)
        return tm_lfail(L, TM_ERR_SHAPE, "attribute 'axis' is %lld, outside [%d, %d]",
                        (long long)axis, -out_rank, out_rank - 1);
    if (axis < 0) axis += out_rank;
    tm_val *xs = malloc((size_t)s->n * sizeof *xs);
    if (!xs) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < s->n && tm_ctx_ok(c); i++) {
        tm_val e = s->seq[i];
        if (tm_vrank(c, e) != rank || tm_vdtype(c, e) != tm_vdtype(c, s->seq[0])) {
            tm_lfail(L, TM_ERR_SHAPE, "sequence element %d is rank %d %s, element 0 is rank "
                     "%d %s", i, tm_vrank(c, e), tm_dtype_name(tm_vdtype(c, e)), rank,
                     tm_dtype_name(tm_vdtype(c, s->seq[0])));
            break;
        }
        for (int d = 0; d < rank && tm_ctx_ok(c); d++)
            if ((new_axis || d != axis) && tm_vdims(c, e)[d] != tm_vdims(c, s->seq[0])[d])
                tm_lfail(L, TM_ERR_SHAPE, "sequence element %d has dim %d = %lld, element 0 "
                         "has %lld", i, d, (long long)tm_vdims(c, e)[d],
                         (long long)tm_vdims(c, s->seq[0])[d]);
        xs[i] = new_axis ? tm_unsqueeze(c, e, &axis, 1) : e;
    }
    if (tm_ctx_ok(c)) tm_lout(L, 0, tm_concat(c, xs, s->n, (int)axis));
    free(xs);
    return c->status;
}
TM_REGISTER_OP("", "ConcatFromSequence", 11, 27, lower_concat_from_sequence);

/* ---- SequenceMap ------------------------------------------------------------------- */

/* Runs the body once per element of the first input; sequence inputs contribute their
 * i-th element, tensor inputs themselves. Each body output becomes a sequence. */
static tm_status map_run(tm_lower *L, const tm_graph *g, int64_t len, tm_val **outs) {
    int nin = tm_lnin(L), nout = g->n_outputs;
    tm_oval *in = calloc((size_t)nin + 1, sizeof *in);
    tm_oval *res = calloc((size_t)nout + 1, sizeof *res);
    tm_status st = in && res ? TM_OK : tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    for (int64_t it = 0; it < len && st == TM_OK; it++) {
        for (int j = 0; j < nin; j++) {
            const tm_oval *x = tm_lin_oval(L, j);
            memset(&in[j], 0, sizeof in[j]);
            if (!x || x->kind == TM_OV_NONE) continue;
            in[j].kind = TM_OV_TENSOR;
            in[j].v = x->kind == TM_OV_SEQ ? x->seq[it] : x->v;
        }
        memset(res, 0, (size_t)nout * sizeof *res);
        st = tm_lower_subgraph(L, g, nin, in, res);
        for (int k = 0; k < nout && st == TM_OK; k++) {
            if (res[k].kind != TM_OV_TENSOR)
                st = tm_lfail(L, TM_ERR_DTYPE, "body output %d ('%s') must be a tensor", k,
                              g->outputs[k].name);
            else
                outs[k][it] = res[k].v;
        }
        for (int k = 0; k < nout; k++)
            if (res[k].kind == TM_OV_SEQ) free(res[k].seq);
    }
    free(in);
    free(res);
    return st;
}

static tm_status lower_sequence_map(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    const tm_graph *g = tm_attr_g(L, "body");
    if (!g) return tm_lfail(L, TM_ERR_PARSE, "attribute 'body' is missing");
    const tm_oval *s = in_seq(L, 0);
    if (!s) return c->status;
    int nin = tm_lnin(L), nout = g->n_outputs;
    if (g->n_inputs != nin)
        return tm_lfail(L, TM_ERR_SHAPE, "body takes %d inputs, the node has %d", g->n_inputs,
                        nin);
    int64_t len = s->n;
    for (int j = 1; j < nin; j++) {
        const tm_oval *x = tm_lin_oval(L, j);
        if (x && x->kind == TM_OV_SEQ && x->n != len)
            return tm_lfail(L, TM_ERR_SHAPE, "input %d ('%s') has %d elements, input 0 has "
                            "%lld", j, tm_lnode(L)->inputs[j], x->n, (long long)len);
    }
    tm_val **outs = calloc((size_t)(nout ? nout : 1), sizeof *outs);
    if (!outs) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    tm_status st = TM_OK;
    for (int k = 0; k < nout && st == TM_OK; k++) {
        outs[k] = malloc((size_t)(len ? len : 1) * sizeof **outs);
        if (!outs[k]) st = tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    }
    if (st == TM_OK) st = map_run(L, g, len, outs);
    for (int k = 0; k < nout && k < tm_lnout(L) && st == TM_OK; k++) {
        tm_dtype dt = len ? tm_vdtype(c, outs[k][0]) : (tm_dtype)g->outputs[k].type.elem_dtype;
        out_seq(L, k, outs[k], (int)len, dt);
    }
    for (int k = 0; k < nout; k++) free(outs[k]);
    free(outs);
    return st == TM_OK ? c->status : st;
}
TM_REGISTER_OP("", "SequenceMap", 17, 27, lower_sequence_map);
