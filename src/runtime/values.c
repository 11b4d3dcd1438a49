/* tm_value: sequences and optionals on the public run API (tm_model_run_values,
 * tm_run_eager_values), over the runtime's own tm_xval entry points (model.c, plan.c).
 * Not a new execution path: tensor-only calls go through tm_model_run's plan cache. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "runtime.h"

struct tm_value {
    tm_xval x;                     /* owns its tensors; taken places are NULL */
    int cap;                       /* room in x.seq */
};

static tm_status out_of_memory(tm_error *err) {
    return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
}

static tm_value *value_alloc(tm_xkind kind) {
    tm_value *v = calloc(1, sizeof *v);
    if (v) v->x.kind = kind;
    return v;
}

/* ---- Making and reading values --------------------------------------------------------- */

tm_status tm_value_from_tensor(tm_tensor *t, tm_value **out, tm_error *err) {
    if (!t || !out) {
        tm_tensor_free(t);
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_value_from_tensor: NULL argument");
    }
    tm_value *v = value_alloc(TM_X_TENSOR);
    if (!v) {
        tm_tensor_free(t);
        return out_of_memory(err);
    }
    v->x.t = t;
    *out = v;
    return TM_OK;
}

tm_status tm_value_new_sequence(tm_dtype elem_dtype, tm_value **out, tm_error *err) {
    if (!out) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_value_new_sequence: NULL argument");
    if (elem_dtype <= TM_UNDEFINED || elem_dtype > TM_INT2)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "a sequence's element type %d is not a "
                        "tensor element type", (int)elem_dtype);
    tm_value *v = value_alloc(TM_X_SEQUENCE);
    if (!v) return out_of_memory(err);
    v->x.seq_dtype = elem_dtype;
    *out = v;
    return TM_OK;
}

tm_status tm_value_new_none(tm_value **out, tm_error *err) {
    if (!out) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_value_new_none: NULL argument");
    tm_value *v = value_alloc(TM_X_NONE);
    if (!v) return out_of_memory(err);
    *out = v;
    return TM_OK;
}

tm_status tm_value_append(tm_value *seq, tm_tensor *t, tm_error *err) {
    tm_status st = TM_OK;
    if (!seq || !t)
        st = tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_value_append: NULL argument");
    else if (seq->x.kind != TM_X_SEQUENCE)
        st = tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_value_append: the value is not a sequence");
    else if (t->dtype != seq->x.seq_dtype)
        st = tm__fail(err, TM_ERR_DTYPE, "a %s tensor cannot join a sequence of %s",
                      tm_dtype_name(t->dtype), tm_dtype_name(seq->x.seq_dtype));
    else if (seq->x.n == seq->cap) {
        int cap = seq->cap < 4 ? 4 : seq->cap <= INT_MAX / 2 ? seq->cap * 2 : 0;
        tm_tensor **grown = cap ? realloc(seq->x.seq, (size_t)cap * sizeof *grown) : NULL;
        if (grown) {
            seq->x.seq = grown;
            seq->cap = cap;
        } else {
            st = out_of_memory(err);
        }
    }
    if (st != TM_OK) {
        tm_tensor_free(t);
        return st;
    }
    seq->x.seq[seq->x.n++] = t;
    return TM_OK;
}

void tm_value_free(tm_value *v) {
    if (!v) return;
    tm_xval_clear(&v->x);
    free(v);
}

tm_kind tm_value_kind(const tm_value *v) {
    if (!v) return TM_KIND_NONE;
    return v->x.kind == TM_X_TENSOR ? TM_KIND_TENSOR
         : v->x.kind == TM_X_SEQUENCE ? TM_KIND_SEQUENCE : TM_KIND_NONE;
}

int64_t tm_value_length(const tm_value *v) {
    if (!v) return 0;
    return v->x.kind == TM_X_SEQUENCE ? v->x.n : v->x.kind == TM_X_TENSOR ? 1 : 0;
}

tm_dtype tm_value_dtype(const tm_value *v) {
    if (!v) return TM_UNDEFINED;
    if (v->x.kind == TM_X_SEQUENCE) return v->x.seq_dtype;
    return v->x.kind == TM_X_TENSOR && v->x.t ? v->x.t->dtype : TM_UNDEFINED;
}

/* The place of element i, or NULL. */
static tm_tensor **place(tm_value *v, int64_t i) {
    if (!v || i < 0 || i >= tm_value_length(v)) return NULL;
    return v->x.kind == TM_X_SEQUENCE ? &v->x.seq[i] : &v->x.t;
}

tm_tensor *tm_value_tensor(tm_value *v, int64_t i) {
    tm_tensor **p = place(v, i);
    return p ? *p : NULL;
}

tm_tensor *tm_value_take(tm_value *v, int64_t i) {
    tm_tensor **p = place(v, i);
    if (!p) return NULL;
    tm_tensor *t = *p;
    *p = NULL;
    return t;
}

/* ---- Declared kinds ------------------------------------------------------------------ */

/* The graph's value_info for model input i (inputs that are not initializers) or output i. */
static const tm_value_info *declared(const tm_model *m, int output, int i) {
    if (!m || i < 0) return NULL;
    const tm_graph *g = m->onnx->graph;
    if (output) return i < g->n_outputs ? &g->outputs[i] : NULL;
    return i < m->n_in ? &g->inputs[m->in_graph_index[i]] : NULL;
}

/* What a declared type holds: the optional unwrapped; *optional set for one. */
static const tm_type *held_type(const tm_type *t, int *optional) {
    *optional = t->kind == TM_TYPE_OPTIONAL;
    return *optional && t->elem ? t->elem : t;
}

static tm_status kind_of(const tm_model *m, int output, int i, tm_kind *kind, int *optional) {
    const tm_value_info *vi = declared(m, output, i);
    if (!vi) return TM_ERR_INVALID_ARGUMENT;
    int opt;
    const tm_type *t = held_type(&vi->type, &opt);
    if (kind)
        *kind = t->kind == TM_TYPE_TENSOR ? TM_KIND_TENSOR
              : t->kind == TM_TYPE_SEQUENCE ? TM_KIND_SEQUENCE : TM_KIND_NONE;
    if (optional) *optional = opt;
    return TM_OK;
}

tm_status tm_model_input_kind(const tm_model *m, int i, tm_kind *kind, int *optional) {
    return kind_of(m, 0, i, kind, optional);
}

tm_status tm_model_output_kind(const tm_model *m, int i, tm_kind *kind, int *optional) {
    return kind_of(m, 1, i, kind, optional);
}

/* ---- Runs -------------------------------------------------------------------------- */

static const tm_value_info *graph_input(const tm_model *m, const char *name) {
    const tm_graph *g = m->onnx->graph;
    for (int i = 0; i < g->n_inputs; i++)
        if (!strcmp(g->inputs[i].name, name)) return &g->inputs[i];
    return NULL;
}

/* What the runtime's binding does not check: a sequence where a tensor is declared, a
 * sequence's element type, places taken out, an empty value for an input that is not
 * optional. Tensors' dtypes and shapes are checked when they are bound. */
static tm_status check_input(const tm_model *m, const char *name, const tm_value *v,
                             tm_error *err) {
    const tm_value_info *vi = graph_input(m, name);
    if (!vi) return TM_OK;   /* the binding says which name is unknown */
    int opt;
    const tm_type *t = held_type(&vi->type, &opt);
    tm_kind k = tm_value_kind(v);
    if (k == TM_KIND_NONE) {
        if (opt) return TM_OK;
        return tm__fail_at(err, TM_ERR_INVALID_ARGUMENT, NULL, NULL, name,
                           "input '%s' is empty, but it is not optional", name);
    }
    for (int64_t i = 0; i < tm_value_length(v); i++)
        if (!tm_value_tensor((tm_value *)v, i))
            return tm__fail_at(err, TM_ERR_INVALID_ARGUMENT, NULL, NULL, name,
                               "input '%s': element %lld was taken out of the value", name,
                               (long long)i);
    if (k != TM_KIND_SEQUENCE) return TM_OK;
    if (t->kind == TM_TYPE_TENSOR)
        return tm__fail_at(err, TM_ERR_DTYPE, NULL, NULL, name,
                           "input '%s' must be a tensor, got a sequence", name);
    int want = t->kind == TM_TYPE_SEQUENCE ? t->elem_dtype : 0;
    if (want && want != (int)v->x.seq_dtype)
        return tm__fail_at(err, TM_ERR_DTYPE, NULL, NULL, name,
                           "input '%s' is a sequence of %s, the model expects %s", name,
                           tm_dtype_name(v->x.seq_dtype), tm_dtype_name((tm_dtype)want));
    return TM_OK;
}

/* The runtime's view of the inputs (shallow: the values keep their tensors). */
static tm_status inputs_x(const tm_model *m, int n, const char *const *names,
                          const tm_value *const *inputs, tm_xval *x, tm_error *err) {
    for (int k = 0; k < n; k++) {
        if (!names[k])
            return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "input name %d is NULL", k);
        tm_status st = check_input(m, names[k], inputs[k], err);
        if (st != TM_OK) return st;
        if (inputs[k]) x[k] = inputs[k]->x;
    }
    return TM_OK;
}

/* Values made from the runtime's outputs, whose tensors they take. On failure the outputs
 * are cleared and nothing is stored. */
static tm_status outputs_to_values(tm_xval *x, int n, tm_value **outputs, tm_error *err) {
    tm_value **made = calloc((size_t)n + 1, sizeof *made);
    int ok = made != NULL;
    for (int i = 0; ok && i < n; i++) {
        made[i] = value_alloc(x[i].kind);
        ok = made[i] != NULL;
        if (ok) {
            made[i]->x = x[i];
            made[i]->cap = x[i].n;
            memset(&x[i], 0, sizeof x[i]);
        }
    }
    if (!ok) {
        for (int i = 0; made && i < n; i++) tm_value_free(made[i]);
        for (int i = 0; i < n; i++) tm_xval_clear(&x[i]);
        free(made);
        return out_of_memory(err);
    }
    memcpy(outputs, made, (size_t)n * sizeof *outputs);
    free(made);
    return TM_OK;
}

/* Whether a call can go through tm_model_run: no sequence among the inputs given or the
 * outputs declared (an output of no known type may be one). */
static int tensors_only(const tm_model *m, int n, const tm_value *const *inputs) {
    for (int k = 0; k < n; k++)
        if (tm_value_kind(inputs[k]) == TM_KIND_SEQUENCE) return 0;
    for (int i = 0; i < m->n_out; i++) {
        tm_kind kind;
        if (kind_of(m, 1, i, &kind, NULL) != TM_OK || kind != TM_KIND_TENSOR) return 0;
    }
    return 1;
}

/* Through the plan cache: tensors in, tensors (NULL: an empty optional) out. */
static tm_status run_cached(tm_model *m, int n, const char *const *names, const tm_xval *x,
                            tm_xval *res, const tm_plan_options *opts, tm_error *err) {
    const tm_tensor **tin = calloc((size_t)n + 1, sizeof *tin);
    tm_tensor **tout = calloc((size_t)m->n_out + 1, sizeof *tout);
    tm_status st = tin && tout ? TM_OK : out_of_memory(err);
    for (int k = 0; st == TM_OK && k < n; k++) tin[k] = x[k].t;
    if (st == TM_OK) st = tm_model_run(m, n, names, tin, tout, opts, err);
    for (int i = 0; st == TM_OK && i < m->n_out; i++) {
        res[i].kind = tout[i] ? TM_X_TENSOR : TM_X_NONE;
        res[i].t = tout[i];
    }
    free(tin);
    free(tout);
    return st;
}

/* Through a plan made for this call. */
static tm_status run_planned(tm_model *m, int n, const char *const *names, const tm_xval *x,
                             tm_xval *res, const tm_plan_options *opts, tm_error *err) {
    tm_plan *plan = NULL;
    tm_session *s = NULL;
    tm_status st = tm__plan_create_x(m, n, names, x, opts, &plan, err);
    if (st == TM_OK) st = tm_session_create(plan, &s, err);
    if (st == TM_OK) st = tm__session_run_x(s, n, names, x, res, err);
    tm_session_free(s);
    tm_plan_free(plan);
    return st;
}

static tm_status run_values(tm_model *m, int n, const char *const *names,
                            const tm_value *const *inputs, tm_value **outputs, int eager,
                            const tm_plan_options *plan_opts, const tm_run_options *run_opts,
                            tm_error *err) {
    if (!m || n < 0 || (n && (!names || !inputs)) || !outputs)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s: NULL argument",
                        eager ? "tm_run_eager_values" : "tm_model_run_values");
    tm_xval *x = calloc((size_t)n + 1, sizeof *x);
    tm_xval *res = calloc((size_t)m->n_out + 1, sizeof *res);
    tm_status st = x && res ? TM_OK : out_of_memory(err);
    if (st == TM_OK) st = inputs_x(m, n, names, inputs, x, err);
    if (st == TM_OK) {
        if (eager) st = tm__run_eager_x(m, n, names, x, res, run_opts, err);
        else if (tensors_only(m, n, inputs)) st = run_cached(m, n, names, x, res, plan_opts, err);
        else st = run_planned(m, n, names, x, res, plan_opts, err);
    }
    if (st == TM_OK) st = outputs_to_values(res, m->n_out, outputs, err);
    else
        for (int i = 0; res && i < m->n_out; i++) tm_xval_clear(&res[i]);
    free(x);
    free(res);
    return st;
}

tm_status tm_model_run_values(tm_model *m, int n, const char *const *names,
                              const tm_value *const *inputs, tm_value **outputs,
                              const tm_plan_options *opts, tm_error *err) {
    return run_values(m, n, names, inputs, outputs, 0, opts, NULL, err);
}

tm_status tm_run_eager_values(tm_model *m, int n, const char *const *names,
                              const tm_value *const *inputs, tm_value **outputs,
                              const tm_run_options *opts, tm_error *err) {
    return run_values(m, n, names, inputs, outputs, 1, NULL, opts, err);
}
