/* tm_model: loading (through ../onnx/model.c), descriptions of inputs and outputs, the
 * op census and missing ops, input binding with dtype/rank checks, and eager runs.
 * Plans live in plan.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime.h"
#include "pack_cache.h"
#include "../onnx/check.h"
#include "../hub/hub.h"

const char *tm_version(void) { return TM_VERSION_STRING; }

void tm_load_options_default(tm_load_options *o) {
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->compute_type = TM_UNDEFINED;
}

void tm_run_options_default(tm_run_options *o) {
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
}

void *tm__model_alloc(const tm_model *m, size_t size) {
    return tm__alloc(m->opts.allocator, size);
}

void tm__model_free_mem(const tm_model *m, void *p) { tm__free(m->opts.allocator, p); }

void tm_xval_clear(tm_xval *x) {
    if (!x) return;
    tm_tensor_free(x->t);
    for (int i = 0; i < x->n; i++) tm_tensor_free(x->seq[i]);
    free(x->seq);
    memset(x, 0, sizeof *x);
}

static int is_initializer(const tm_graph *g, const char *name) {
    for (int i = 0; i < g->n_inits; i++)
        if (!strcmp(g->inits[i].name, name)) return 1;
    return 0;
}

static tm_status fill_desc(const tm_value_info *vi, tm_value_desc *d) {
    d->name = vi->name;
    d->dtype = (tm_dtype)vi->type.elem_dtype;
    d->rank = vi->type.kind == TM_TYPE_TENSOR ? vi->type.rank : -1;
    if (d->rank > 0) {
        int64_t *dims = calloc((size_t)d->rank, sizeof *dims);
        const char **params = calloc((size_t)d->rank, sizeof *params);
        if (!dims || !params) {
            free(dims);
            free(params);
            return TM_ERR_NO_MEMORY;
        }
        for (int i = 0; i < d->rank; i++) {
            dims[i] = vi->type.dims[i].value;
            params[i] = vi->type.dims[i].param;
        }
        d->dims = dims;
        d->dim_params = params;
    }
    return TM_OK;
}

static void free_descs(tm_value_desc *d, int n) {
    for (int i = 0; d && i < n; i++) {
        free((void *)d[i].dims);
        free((void *)d[i].dim_params);
    }
    free(d);
}

static void census_add(tm_model *m, const tm_node *n) {
    for (int i = 0; i < m->n_types; i++)
        if (!strcmp(m->type_op[i], n->op_type) && !strcmp(m->type_domain[i], n->domain)) {
            m->type_count[i]++;
            return;
        }
    int k = m->n_types;
    char **d = realloc(m->type_domain, (size_t)(k + 1) * sizeof *d);
    if (d) m->type_domain = d;
    char **o = realloc(m->type_op, (size_t)(k + 1) * sizeof *o);
    if (o) m->type_op = o;
    int *c = realloc(m->type_count, (size_t)(k + 1) * sizeof *c);
    if (c) m->type_count = c;
    if (!d || !o || !c) return;
    m->type_domain[k] = n->domain;
    m->type_op[k] = n->op_type;
    m->type_count[k] = 1;
    m->n_types++;
}

static void census_graph(tm_model *m, const tm_graph *g, int depth) {
    if (!g || depth > 64) return;
    for (int i = 0; i < g->n_nodes; i++) {
        census_add(m, &g->nodes[i]);
        for (int a = 0; a < g->nodes[i].n_attrs; a++) {
            const tm_attr *at = &g->nodes[i].attrs[a];
            if (at->type == TM_ATTR_GRAPH) census_graph(m, at->g, depth + 1);
            if (at->type == TM_ATTR_GRAPHS)
                for (size_t k = 0; k < at->n; k++) census_graph(m, at->graphs[k], depth + 1);
        }
    }
}

static tm_status finish_load(tm_onnx_model *om, const char *src, const tm_load_options *opts,
                             tm_model **out, tm_error *err) {
    if (!om->graph) {
        tm_onnx_model_free(om);
        return tm__fail(err, TM_ERR_PARSE, "the model has no graph");
    }
    /* Single assignment, node order and function calls, before anything walks the graph. */
    tm_status cst = (tm_status)tm_onnx_check(om, src, err);
    if (cst != TM_OK) {
        tm_onnx_model_free(om);
        return cst;
    }
    tm_model *m = calloc(1, sizeof *m);
    if (!m) {
        tm_onnx_model_free(om);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory loading the model");
    }
    m->onnx = om;
    tm_load_options_default(&m->opts);
    if (opts) memcpy(&m->opts, opts, opts->size < sizeof m->opts ? opts->size : sizeof m->opts);
    m->opts.size = sizeof m->opts;
    if (m->opts.allocator) {
        m->allocator_copy = *m->opts.allocator;
        m->opts.allocator = &m->allocator_copy;
    }
    if (!m->opts.plan_cache_limit) m->opts.plan_cache_limit = 16;
    const char *int8 = getenv("TM_NBITS_INT8");
    if (!m->opts.nbits_int8 && int8 && *int8) m->opts.nbits_int8 = atoi(int8) ? 1 : -1;
    pthread_mutex_init(&m->cache_lock, NULL);
    /* Started once per model, shared by its sessions; without it kernels run on the
     * caller's thread, so a failure here only costs speed. */
    m->pool = tm_pool_create(m->opts.threads);
    m->fold_cache = tm__fold_cache_create(om, m->opts.allocator);
    /* Without it every plan packs its own weights: slower and bigger, not wrong. */
    m->packed = tm__pack_cache_create();
    const tm_graph *g = om->graph;
    m->in_graph_index = calloc((size_t)g->n_inputs + 1, sizeof *m->in_graph_index);
    m->in_desc = calloc((size_t)g->n_inputs + 1, sizeof *m->in_desc);
    m->out_desc = calloc((size_t)g->n_outputs + 1, sizeof *m->out_desc);
    tm_status st = (!m->in_graph_index || !m->in_desc || !m->out_desc) ? TM_ERR_NO_MEMORY : TM_OK;
    for (int i = 0; i < g->n_inputs && st == TM_OK; i++) {
        if (is_initializer(g, g->inputs[i].name)) continue;
        m->in_graph_index[m->n_in] = i;
        st = fill_desc(&g->inputs[i], &m->in_desc[m->n_in]);
        m->n_in++;
    }
    for (int i = 0; i < g->n_outputs && st == TM_OK; i++) {
        st = fill_desc(&g->outputs[i], &m->out_desc[i]);
        m->n_out++;
    }
    if (st != TM_OK) {
        tm_model_free(m);
        return tm__fail(err, st, "out of memory loading the model");
    }
    census_graph(m, g, 0);
    m->missing = tm_missing_ops(om);
    st = tm__params_init(m, err);
    if (st != TM_OK) {
        tm_model_free(m);
        return st;
    }
    *out = m;
    return TM_OK;
}

tm_status tm_model_load(const char *source, const tm_load_options *opts, tm_model **out,
                        tm_error *err) {
    if (!source || !out) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_model_load: NULL argument");
    /* hf:// hook: the hub resolves the source to a file in the Hugging Face cache
     * (downloading it and its external data when needed); it then loads as any path. */
    char *hub_path = NULL;
    if (tm_hub_is_source(source)) {
        tm_status hs = tm_hub_resolve(source, &hub_path, err);
        if (hs != TM_OK) return hs;
    }
    tm_onnx_model *om = NULL;
    tm_status st = (tm_status)tm_onnx_load_file(hub_path ? hub_path : source, &om, err);
    free(hub_path);
    if (st != TM_OK) return st;
    return finish_load(om, source, opts, out, err);
}

tm_status tm_model_load_buffer(const void *data, size_t size, const char *base_dir,
                               const tm_load_options *opts, tm_model **out, tm_error *err) {
    if (!data || !out) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_model_load_buffer: NULL argument");
    tm_onnx_model *om = NULL;
    tm_status st = (tm_status)tm_onnx_load_buffer(data, size, base_dir, &om, err);
    if (st != TM_OK) return st;
    return finish_load(om, "<buffer>", opts, out, err);
}

void tm__plan_cache_clear(tm_model *m);

void tm_model_free(tm_model *m) {
    if (!m) return;
    tm__plan_cache_clear(m);
    tm__decoder_plans_free(m);
    tm__params_free(m);
    tm__pack_cache_free(m->packed);   /* after the plans, which borrow its tensors */
    pthread_mutex_destroy(&m->cache_lock);
    tm_pool_free(m->pool);
    tm__fold_cache_free(m->fold_cache);
    free_descs(m->in_desc, m->n_in);
    free_descs(m->out_desc, m->n_out);
    free(m->in_graph_index);
    free(m->type_domain);
    free(m->type_op);
    free(m->type_count);
    free(m->missing);
    tm_onnx_model_free(m->onnx);
    free(m);
}

int tm_model_n_inputs(const tm_model *m) { return m ? m->n_in : 0; }
int tm_model_n_outputs(const tm_model *m) { return m ? m->n_out : 0; }

tm_status tm_model_input(const tm_model *m, int i, tm_value_desc *d) {
    if (!m || !d || i < 0 || i >= m->n_in)
        return TM_ERR_INVALID_ARGUMENT;
    *d = m->in_desc[i];
    return TM_OK;
}

tm_status tm_model_output(const tm_model *m, int i, tm_value_desc *d) {
    if (!m || !d || i < 0 || i >= m->n_out)
        return TM_ERR_INVALID_ARGUMENT;
    *d = m->out_desc[i];
    return TM_OK;
}

int tm_model_input_index(const tm_model *m, const char *name) {
    for (int i = 0; m && name && i < m->n_in; i++)
        if (!strcmp(m->in_desc[i].name, name)) return i;
    return -1;
}

int tm_model_output_index(const tm_model *m, const char *name) {
    for (int i = 0; m && name && i < m->n_out; i++)
        if (!strcmp(m->out_desc[i].name, name)) return i;
    return -1;
}

const char *tm_model_missing_ops(const tm_model *m) { return m ? m->missing : NULL; }

int tm_model_n_opsets(const tm_model *m) { return m ? m->onnx->n_opsets : 0; }

tm_status tm_model_opset(const tm_model *m, int i, const char **domain, int64_t *version) {
    if (!m || i < 0 || i >= m->onnx->n_opsets) return TM_ERR_INVALID_ARGUMENT;
    if (domain) *domain = m->onnx->opsets[i].domain;
    if (version) *version = m->onnx->opsets[i].version;
    return TM_OK;
}

int tm_model_n_op_types(const tm_model *m) { return m ? m->n_types : 0; }

tm_status tm_model_op_type(const tm_model *m, int i, const char **domain, const char **op,
                           int *count) {
    if (!m || i < 0 || i >= m->n_types) return TM_ERR_INVALID_ARGUMENT;
    if (domain) *domain = m->type_domain[i];
    if (op) *op = m->type_op[i];
    if (count) *count = m->type_count[i];
    return TM_OK;
}

/* ---- Binding inputs ---------------------------------------------------------------- */

static void dims_str(char *buf, size_t cap, int rank, const int64_t *dims) {
    size_t len = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < rank && len < cap; i++)
        len += (size_t)snprintf(buf + len, cap - len, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (len < cap) snprintf(buf + len, cap - len, ")");
}

static tm_status check_tensor(const tm_value_info *vi, const tm_tensor *t, tm_error *err) {
    if (!t) return tm__fail_at(err, TM_ERR_INVALID_ARGUMENT, NULL, NULL, vi->name,
                               "input '%s' is NULL", vi->name);
    const tm_type *ty = &vi->type;
    if (ty->kind == TM_TYPE_SEQUENCE)
        return tm__fail_at(err, TM_ERR_DTYPE, NULL, NULL, vi->name,
                           "input '%s' must be a sequence, got a tensor", vi->name);
    const tm_type *tt = ty->kind == TM_TYPE_OPTIONAL && ty->elem ? ty->elem : ty;
    if (tt->kind == TM_TYPE_SEQUENCE)
        return tm__fail_at(err, TM_ERR_DTYPE, NULL, NULL, vi->name,
                           "input '%s' must be a sequence, got a tensor", vi->name);
    if (tt->elem_dtype && tt->elem_dtype != (int)t->dtype)
        return tm__fail_at(err, TM_ERR_DTYPE, NULL, NULL, vi->name,
                           "input '%s' has dtype %s, the model expects %s", vi->name,
                           tm_dtype_name(t->dtype), tm_dtype_name((tm_dtype)tt->elem_dtype));
    if (tt->rank >= 0 && tt->rank != t->rank)
        return tm__fail_at(err, TM_ERR_SHAPE, NULL, NULL, vi->name,
                           "input '%s' has rank %d, the model expects rank %d", vi->name,
                           t->rank, tt->rank);
    for (int d = 0; tt->rank >= 0 && d < tt->rank; d++)
        if (tt->dims[d].value >= 0 && !tt->dims[d].param && tt->dims[d].value != t->dims[d]) {
            char got[160];
            dims_str(got, sizeof got, t->rank, t->dims);
            return tm__fail_at(err, TM_ERR_SHAPE, NULL, NULL, vi->name,
                               "input '%s' has shape %s, the model expects dim %d to be %lld",
                               vi->name, got, d, (long long)tt->dims[d].value);
        }
    return TM_OK;
}

static tm_status bind_inputs(tm_model *m, tm_ctx *c, int n, const char *const *names,
                             const tm_xval *inputs, tm_oval *ovals, tm_error *err);

tm_status tm__bind_inputs(tm_model *m, tm_ctx *c, int n, const char *const *names,
                          const tm_xval *inputs, tm_oval *ovals, tm_error *err) {
    /* Inputs keep their declared dtype here; callers widen them (compute_type). */
    tm_dtype saved = c->compute_type;
    c->compute_type = TM_UNDEFINED;
    tm_status st = bind_inputs(m, c, n, names, inputs, ovals, err);
    c->compute_type = saved;
    return st;
}

static tm_status bind_inputs(tm_model *m, tm_ctx *c, int n, const char *const *names,
                             const tm_xval *inputs, tm_oval *ovals, tm_error *err) {
    const tm_graph *g = m->onnx->graph;
    for (int k = 0; k < n; k++) {
        int gi = -1;
        for (int i = 0; i < g->n_inputs; i++)
            if (names[k] && !strcmp(g->inputs[i].name, names[k])) gi = i;
        if (gi < 0)
            return tm__fail_at(err, TM_ERR_NOT_FOUND, NULL, NULL, names[k] ? names[k] : "",
                               "the model has no input '%s'", names[k] ? names[k] : "(null)");
        const tm_xval *x = &inputs[k];
        tm_oval *ov = &ovals[gi];
        ov->optional = g->inputs[gi].type.kind == TM_TYPE_OPTIONAL;
        if (x->kind == TM_X_NONE) continue;
        if (x->kind == TM_X_TENSOR) {
            tm_status st = check_tensor(&g->inputs[gi], x->t, err);
            if (st != TM_OK) return st;
            ov->kind = TM_OV_TENSOR;
            ov->v = tm_val_tensor(c, x->t, 1);
            ov->optional = g->inputs[gi].type.kind == TM_TYPE_OPTIONAL;
        } else {
            ov->kind = TM_OV_SEQ;
            ov->n = x->n;
            ov->seq_dtype = x->seq_dtype;
            ov->seq = calloc((size_t)(x->n ? x->n : 1), sizeof *ov->seq);
            if (!ov->seq) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
            for (int i = 0; i < x->n; i++) ov->seq[i] = tm_val_tensor(c, x->seq[i], 1);
        }
        if (!tm_ctx_ok(c)) {
            tm__error_copy(err, &c->err);
            return c->status;
        }
    }
    for (int i = 0; i < g->n_inputs; i++) {
        if (ovals[i].kind != TM_OV_NONE || is_initializer(g, g->inputs[i].name)) continue;
        if (g->inputs[i].type.kind == TM_TYPE_OPTIONAL) {
            ovals[i].optional = 1;   /* left out: an empty optional */
            continue;
        }
        return tm__fail_at(err, TM_ERR_NOT_FOUND, NULL, NULL, g->inputs[i].name,
                           "missing input '%s'", g->inputs[i].name);
    }
    return TM_OK;
}

static tm_tensor *export_tensor(tm_ctx *c, tm_val v) {
    const tm_tensor *t = tm_vdata(c, v);
    return t ? tm_tensor_clone(t, NULL) : NULL;
}

tm_status tm__export_oval(tm_ctx *c, const tm_oval *ov, tm_xval *out, tm_error *err) {
    memset(out, 0, sizeof *out);
    if (ov->kind == TM_OV_TENSOR) {
        out->kind = TM_X_TENSOR;
        out->t = export_tensor(c, ov->v);
        if (!out->t) return tm__fail(err, TM_ERR_NO_MEMORY, "cannot copy an output");
    } else if (ov->kind == TM_OV_SEQ) {
        out->kind = TM_X_SEQUENCE;
        out->seq_dtype = ov->seq_dtype;
        out->seq = calloc((size_t)(ov->n ? ov->n : 1), sizeof *out->seq);
        if (!out->seq) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        for (int i = 0; i < ov->n; i++) {
            out->seq[i] = export_tensor(c, ov->seq[i]);
            out->n = i + 1;
            if (!out->seq[i]) {
                tm_xval_clear(out);
                return tm__fail(err, TM_ERR_NO_MEMORY, "cannot copy an output");
            }
        }
    }
    return TM_OK;
}

void tm__inputs_to_compute_type(tm_ctx *c, tm_oval *ovals, int n) {
    if (c->compute_type != TM_FLOAT) return;
    for (int i = 0; i < n; i++) {
        if (ovals[i].kind == TM_OV_TENSOR) ovals[i].v = tm_to_compute_type(c, ovals[i].v);
        for (int k = 0; ovals[i].kind == TM_OV_SEQ && k < ovals[i].n; k++)
            ovals[i].seq[k] = tm_to_compute_type(c, ovals[i].seq[k]);
    }
}

void tm__restore_output_dtypes(const tm_model *m, tm_ctx *c, tm_oval *outs) {
    if (c->compute_type != TM_FLOAT) return;
    const tm_graph *g = m->onnx->graph;
    for (int i = 0; i < g->n_outputs; i++) {
        tm_dtype want = (tm_dtype)g->outputs[i].type.elem_dtype;
        if (outs[i].kind != TM_OV_TENSOR || !tm_is_half(want)) continue;
        outs[i].v = tm_cast_exact(c, outs[i].v, want);
    }
}

/* ---- Eager runs -------------------------------------------------------------------- */

typedef struct eager_cb {
    const tm_run_options *opts;
} eager_cb;

static int on_node(void *user, const tm_node *n, const tm_oval *outs, tm_ctx *c) {
    eager_cb *cb = user;
    const tm_tensor *small_t[16] = {0};
    const tm_tensor **ts = small_t;
    if (n->n_outputs > 16) ts = calloc((size_t)n->n_outputs, sizeof *ts);
    if (!ts) return 1;
    for (int i = 0; i < n->n_outputs; i++)
        ts[i] = outs[i].kind == TM_OV_TENSOR ? tm_vdata(c, outs[i].v) : NULL;
    int r = cb->opts->on_node(cb->opts->user, n->name, n->op_type, n->n_outputs,
                              (const char *const *)n->outputs, ts);
    if (ts != small_t) free(ts);
    return r;
}

tm_status tm__run_eager_x(tm_model *m, int n, const char *const *names, const tm_xval *inputs,
                          tm_xval *outputs, const tm_run_options *opts, tm_error *err) {
    if (m->missing)
        return tm__fail(err, TM_ERR_UNSUPPORTED, "the model uses operators Transmuter does not "
                        "support: %s", m->missing);
    const tm_graph *g = m->onnx->graph;
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, m->opts.allocator);
    c.compute_type = m->opts.compute_type;
    c.fold_cache = m->fold_cache;
    c.dequantize_nbits = m->opts.dequantize_nbits;
    c.nbits_int8 = m->opts.nbits_int8;
    c.pool = m->pool;
    c.params = tm__params_table(m);
    tm_oval *ovals = calloc((size_t)g->n_inputs + 1, sizeof *ovals);
    tm_oval *outs = calloc((size_t)g->n_outputs + 1, sizeof *outs);
    tm_xval *res = calloc((size_t)g->n_outputs + 1, sizeof *res);
    tm_status st = (!ovals || !outs || !res) ? tm__fail(err, TM_ERR_NO_MEMORY, "out of memory")
                                             : TM_OK;
    if (st == TM_OK) st = tm__bind_inputs(m, &c, n, names, inputs, ovals, err);
    if (st == TM_OK) {
        eager_cb cb = {opts};
        tm_interp ip;
        memset(&ip, 0, sizeof ip);
        ip.ctx = &c;
        ip.model = m->onnx;
        if (opts && opts->on_node) {
            ip.on_node = on_node;
            ip.user = &cb;
        }
        tm__inputs_to_compute_type(&c, ovals, g->n_inputs);
        st = tm_interp_run(&ip, ovals, outs, NULL);
        if (st == TM_OK) tm__restore_output_dtypes(m, &c, outs);
        if (st == TM_OK && !tm_ctx_ok(&c)) st = c.status;
        if (st != TM_OK) tm__error_copy(err, &c.err);
    }
    for (int i = 0; st == TM_OK && i < g->n_outputs; i++)
        st = tm__export_oval(&c, &outs[i], &res[i], err);
    if (st == TM_OK)
        for (int i = 0; i < g->n_outputs; i++) outputs[i] = res[i];
    else
        for (int i = 0; res && i < g->n_outputs; i++) tm_xval_clear(&res[i]);
    for (int i = 0; ovals && i < g->n_inputs; i++) free(ovals[i].seq);
    for (int i = 0; outs && i < g->n_outputs; i++) free(outs[i].seq);
    free(ovals);
    free(outs);
    free(res);
    tm_ctx_destroy(&c);
    return st;
}

static tm_status wrap_inputs(int n, const tm_tensor *const *inputs, tm_xval **out,
                             tm_error *err) {
    *out = calloc((size_t)n + 1, sizeof **out);
    if (!*out) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < n; i++) {
        (*out)[i].kind = inputs[i] ? TM_X_TENSOR : TM_X_NONE;
        (*out)[i].t = (tm_tensor *)inputs[i];
    }
    return TM_OK;
}

tm_status tm_run_eager(tm_model *m, int n, const char *const *names,
                       const tm_tensor *const *inputs, tm_tensor **outputs,
                       const tm_run_options *opts, tm_error *err) {
    if (!m || (n && (!names || !inputs)) || !outputs)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_run_eager: NULL argument");
    tm_xval *xin = NULL;
    tm_status st = wrap_inputs(n, inputs, &xin, err);
    if (st != TM_OK) return st;
    tm_xval *xout = calloc((size_t)m->n_out + 1, sizeof *xout);
    if (!xout) {
        free(xin);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    }
    st = tm__run_eager_x(m, n, names, xin, xout, opts, err);
    if (st == TM_OK)
        for (int i = 0; i < m->n_out; i++) {
            outputs[i] = xout[i].kind == TM_X_TENSOR ? xout[i].t : NULL;
            if (xout[i].kind == TM_X_TENSOR) xout[i].t = NULL;
            tm_xval_clear(&xout[i]);
        }
    free(xin);
    free(xout);
    return st;
}
