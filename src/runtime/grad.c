/* Value and gradient: the losses (built from primitives on a graph output), the glue
 * that differentiates a traced or eager forward pass with respect to the model's
 * parameters (tm__grad_build), and the public calls tm_grad_plan_create and
 * tm_run_eager_grad. Not the engine or the rules (../core/autodiff.h), nor plans
 * themselves (plan.c), nor the parameter store (params.c). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "runtime.h"
#include "plan_internal.h"
#include "passes.h"
#include "../core/autodiff.h"

void tm_grad_options_default(tm_grad_options *o) {
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->loss = TM_LOSS_OUTPUT;
    o->ignore_index = -100;
}

static const char *loss_name(tm_loss l) {
    switch (l) {
    case TM_LOSS_OUTPUT: return "output";
    case TM_LOSS_MSE: return "mean squared error";
    case TM_LOSS_CROSS_ENTROPY: return "cross-entropy";
    case TM_LOSS_SOFT_CROSS_ENTROPY: return "soft cross-entropy";
    case TM_LOSS_BCE_WITH_LOGITS: return "binary cross-entropy with logits";
    }
    return "unknown";
}

tm_status tm__grad_spec_init(tm_model *m, const tm_grad_options *o, tm_grad_spec *spec,
                             tm_error *err) {
    memset(spec, 0, sizeof *spec);
    tm_grad_options_default(&spec->opts);
    if (o) memcpy(&spec->opts, o, o->size < sizeof spec->opts ? o->size : sizeof spec->opts);
    spec->opts.size = sizeof spec->opts;
    if (!spec->opts.target) spec->opts.target = "target";
    if ((unsigned)spec->opts.loss > TM_LOSS_BCE_WITH_LOGITS)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "unknown loss %d", (int)spec->opts.loss);
    if (m->n_out == 0) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "the model has no outputs");
    spec->out_index = spec->opts.output ? tm_model_output_index(m, spec->opts.output) : 0;
    if (spec->out_index < 0)
        return tm__fail_at(err, TM_ERR_NOT_FOUND, NULL, NULL, spec->opts.output, "the model has "
                           "no output '%s' to build the loss on", spec->opts.output);
    if (spec->opts.loss != TM_LOSS_OUTPUT && tm_model_input_index(m, spec->opts.target) >= 0)
        return tm__fail_at(err, TM_ERR_INVALID_ARGUMENT, NULL, NULL, spec->opts.target,
                           "the target's name '%s' is already a graph input: choose another "
                           "(tm_grad_options.target)", spec->opts.target);
    spec->chosen = calloc((size_t)m->n_params + 1, 1);
    spec->param_of_grad = calloc((size_t)m->n_params + 1, sizeof *spec->param_of_grad);
    if (!spec->chosen || !spec->param_of_grad) {
        tm__grad_spec_free(spec);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    }
    int n = 0;
    tm_status st = tm__params_select(m, spec->opts.n_params, spec->opts.params, spec->chosen,
                                     &n, err);
    if (st != TM_OK) {
        tm__grad_spec_free(spec);
        return st;
    }
    for (int i = 0; i < m->n_params; i++)
        if (spec->chosen[i]) spec->param_of_grad[spec->n_chosen++] = i;
    return TM_OK;
}

void tm__grad_spec_free(tm_grad_spec *spec) {
    free(spec->chosen);
    free(spec->param_of_grad);
    spec->chosen = NULL;
    spec->param_of_grad = NULL;
}

/* ---- Losses ------------------------------------------------------------------------- */

static tm_val sum_all(tm_ctx *c, tm_val x) { return tm_reduce(c, TM_P_REDUCE_SUM, x, NULL, 0, 0); }

static tm_val scalar(tm_ctx *c, tm_val like, double v) {
    return tm_const_scalar(c, tm_vdtype(c, like), v);
}

static int same_dims(const tm_ctx *c, tm_val a, tm_val b) {
    return tm_vrank(c, a) == tm_vrank(c, b) &&
           !memcmp(tm_vdims(c, a), tm_vdims(c, b), (size_t)tm_vrank(c, a) * sizeof(int64_t));
}

static void dims_text(char *buf, size_t cap, const tm_ctx *c, tm_val v) {
    size_t n = (size_t)snprintf(buf, cap, "(");
    for (int d = 0; d < tm_vrank(c, v) && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, d ? ", %lld" : "%lld", (long long)tm_vdims(c, v)[d]);
    if (n < cap) snprintf(buf + n, cap - n, ")");
}

/* The target must have y's dims and dtype. */
static int check_like(tm_ctx *c, const tm_grad_spec *s, tm_val y, tm_val t, const char *out) {
    char dy[160], dt[160];
    dims_text(dy, sizeof dy, c, y);
    dims_text(dt, sizeof dt, c, t);
    if (tm_vdtype(c, t) != tm_vdtype(c, y) || !same_dims(c, y, t)) {
        tm_ctx_fail(c, TM_ERR_SHAPE, "the %s loss needs a target '%s' like output '%s' "
                    "(%s %s), got %s %s", loss_name(s->opts.loss), s->opts.target, out,
                    tm_dtype_name(tm_vdtype(c, y)), dy, tm_dtype_name(tm_vdtype(c, t)), dt);
        return 0;
    }
    return 1;
}

/* Cross-entropy over class ids: -mean of log_softmax(y)[label] over the labels that are
 * not ignore_index (a mean over none is 0). */
static tm_val cross_entropy(tm_ctx *c, const tm_grad_spec *s, tm_val y, tm_val t,
                            const char *out) {
    int r = tm_vrank(c, y);
    tm_dtype tdt = tm_vdtype(c, t);
    char dy[160], dt[160];
    dims_text(dy, sizeof dy, c, y);
    dims_text(dt, sizeof dt, c, t);
    if (tdt != TM_INT64 && tdt != TM_INT32) {
        tm_ctx_fail(c, TM_ERR_DTYPE, "cross-entropy takes class ids: target '%s' must be int64 "
                    "or int32, got %s (for class probabilities use TM_LOSS_SOFT_CROSS_ENTROPY)",
                    s->opts.target, tm_dtype_name(tdt));
        return TM_NONE;
    }
    int fits = r >= 1 && tm_vrank(c, t) == r - 1 &&
               !memcmp(tm_vdims(c, y), tm_vdims(c, t), (size_t)(r - 1) * sizeof(int64_t));
    if (!fits) {
        tm_ctx_fail(c, TM_ERR_SHAPE, "cross-entropy: output '%s' %s holds classes on its last "
                    "axis, so target '%s' must have its other dims, got %s", out, dy,
                    s->opts.target, dt);
        return TM_NONE;
    }
    tm_val logp = tm_softmax(c, y, r - 1, 1);
    tm_val valid = tm_unary(c, TM_P_NOT, tm_binary(c, TM_P_EQ, t, tm_const_scalar(c, tdt, (double)s->opts.ignore_index)));
    tm_val safe = tm_where(c, valid, t, tm_const_scalar(c, tdt, 0.0));
    int64_t axis = r - 1;
    tm_val idx = tm_unsqueeze(c, safe, &axis, 1);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = axis;
    tm_val picked = tm_prim(c, TM_P_GATHER_ELEMENTS, (tm_val[2]){logp, idx}, 2, &a);
    picked = tm_squeeze(c, picked, &axis, 1);
    tm_val weight = tm_cast_exact(c, valid, tm_vdtype(c, y));
    tm_val total = sum_all(c, tm_mul(c, picked, weight));
    tm_val count = tm_binary(c, TM_P_MAX, sum_all(c, weight), scalar(c, y, 1.0));
    return tm_unary(c, TM_P_NEG, tm_div(c, total, count));
}

static tm_val build_loss(tm_ctx *c, const tm_model *m, const tm_grad_spec *s, tm_val y,
                         tm_val t) {
    const char *out = m->out_desc[s->out_index].name;
    tm_dtype dt = tm_vdtype(c, y);
    if (!tm_dtype_is_differentiable(dt)) {
        tm_ctx_fail(c, TM_ERR_DTYPE, "output '%s' is %s: a loss on it has no gradient", out,
                    tm_dtype_name(dt));
        return TM_NONE;
    }
    double n = (double)tm_vnumel(c, y);
    switch (s->opts.loss) {
    case TM_LOSS_OUTPUT:
        if (tm_vnumel(c, y) != 1) {
            char d[160];
            dims_text(d, sizeof d, c, y);
            tm_ctx_fail(c, TM_ERR_SHAPE, "output '%s' %s is not a scalar: choose a loss to "
                        "build on it (tm_grad_options.loss)", out, d);
            return TM_NONE;
        }
        return tm_reshape(c, y, 0, NULL);
    case TM_LOSS_MSE: {
        if (!check_like(c, s, y, t, out)) return TM_NONE;
        tm_val d = tm_sub(c, y, t);
        return tm_div(c, sum_all(c, tm_mul(c, d, d)), scalar(c, y, n));
    }
    case TM_LOSS_CROSS_ENTROPY:
        return cross_entropy(c, s, y, t, out);
    case TM_LOSS_SOFT_CROSS_ENTROPY: {
        if (!check_like(c, s, y, t, out)) return TM_NONE;
        int r = tm_vrank(c, y);
        double rows = r ? n / (double)tm_vdims(c, y)[r - 1] : 1.0;
        tm_val logp = tm_softmax(c, y, r ? r - 1 : 0, 1);
        if (r == 0) {
            tm_ctx_fail(c, TM_ERR_SHAPE, "soft cross-entropy needs classes on a last axis");
            return TM_NONE;
        }
        tm_val total = sum_all(c, tm_mul(c, t, logp));
        return tm_unary(c, TM_P_NEG, tm_div(c, total, scalar(c, y, rows > 0 ? rows : 1.0)));
    }
    case TM_LOSS_BCE_WITH_LOGITS: {
        if (!check_like(c, s, y, t, out)) return TM_NONE;
        /* relu(y) - y t + log(1 + exp(-|y|)), with -|y| written y - 2 relu(y) so that the
         * gradient is exactly sigmoid(y) - t at y = 0 too (abs's is 0 there). */
        tm_val relu = tm_unary(c, TM_P_RELU, y);
        tm_val neg_abs = tm_sub(c, y, tm_mul(c, scalar(c, y, 2.0), relu));
        tm_val soft = tm_unary(c, TM_P_LOG, tm_add(c, scalar(c, y, 1.0), tm_unary(c, TM_P_EXP, neg_abs)));
        tm_val l = tm_add(c, tm_sub(c, relu, tm_mul(c, y, t)), soft);
        return tm_div(c, sum_all(c, l), scalar(c, y, n > 0 ? n : 1.0));
    }
    }
    return TM_NONE;
}

/* ---- Differentiating ------------------------------------------------------------- */

tm_status tm__grad_build(tm_ctx *c, const tm_model *m, const tm_grad_spec *spec,
                         const tm_oval *outs, tm_val target, int passes, tm_val *results) {
    for (int i = 0; i <= spec->n_chosen; i++) results[i] = TM_NONE;
    const tm_oval *ov = &outs[spec->out_index];
    if (ov->kind != TM_OV_TENSOR)
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "output '%s' is not a tensor: no loss on it",
                           m->out_desc[spec->out_index].name);
    tm_ctx_set_where(c, "", "loss");
    tm_val loss = build_loss(c, m, spec, ov->v, target);
    tm_ctx_set_where(c, "", "");
    if (!tm_ctx_ok(c)) return c->status;
    /* TM_GRAD_PASSES=after leaves fusion to the plan's own run of the passes, on the
     * combined graph: the comparison behind running them first (docs/architecture.md). */
    const char *when = getenv("TM_GRAD_PASSES");
    if (passes && !(when && !strcmp(when, "after"))) {
        /* Fusion first, on the forward alone: the backward then follows the fused
         * primitives' own rules (fewer saved activations than a decomposition's). */
        int n_roots = 1 + (spec->opts.with_outputs ? m->n_out : 0);
        tm_val *roots = calloc((size_t)n_roots + 1, sizeof *roots);
        if (!roots) return tm_ctx_fail(c, TM_ERR_NO_MEMORY, "out of memory");
        int k = 0;
        roots[k++] = loss;
        for (int i = 0; spec->opts.with_outputs && i < m->n_out; i++)
            if (outs[i].kind == TM_OV_TENSOR) roots[k++] = outs[i].v;
        tm_pass_roots pr = {roots, k};
        tm_status st = tm__run_passes(c, &pr);
        free(roots);
        if (st != TM_OK) return tm_ctx_ok(c) ? tm_ctx_fail(c, st, "a plan-time pass failed") : c->status;
    }
    /* The values each chosen parameter was imported as (one, unless it was read in
     * several places that did not share the import). */
    int nx = 0, cap = spec->n_chosen + 8;
    tm_val *xs = malloc((size_t)cap * sizeof *xs);
    int *owner = malloc((size_t)cap * sizeof *owner);
    tm_val *gx = NULL;
    int *slot = calloc((size_t)m->n_params + 1, sizeof *slot);
    if (!xs || !owner || !slot) goto oom;
    for (int j = 0; j < spec->n_chosen; j++) slot[spec->param_of_grad[j]] = j + 1;
    for (tm_val v = 0; v < c->n_vals; v++) {
        int p = c->vals[v].param;
        if (p < 0 || p >= m->n_params || !slot[p]) continue;
        if (nx == cap) {
            cap *= 2;
            tm_val *x2 = realloc(xs, (size_t)cap * sizeof *xs);
            if (x2) xs = x2;
            int *o2 = realloc(owner, (size_t)cap * sizeof *owner);
            if (o2) owner = o2;
            if (!x2 || !o2) goto oom;
        }
        xs[nx] = v;
        owner[nx++] = slot[p] - 1;
    }
    gx = calloc((size_t)nx + 1, sizeof *gx);
    if (!gx) goto oom;
    tm_val seed = tm_const_scalar(c, tm_vdtype(c, loss), 1.0);
    tm_status st = tm_backward(c, loss, seed, 0, nx, xs, gx);
    c->tape = 0;
    results[0] = loss;
    for (int i = 0; st == TM_OK && i < nx; i++) {
        if (gx[i] == TM_NONE) continue;
        tm_val *r = &results[1 + owner[i]];
        *r = *r == TM_NONE ? gx[i] : tm_add(c, *r, gx[i]);
    }
    /* A parameter the loss does not depend on has a zero gradient. */
    for (int j = 0; st == TM_OK && j < spec->n_chosen; j++) {
        if (results[1 + j] != TM_NONE) continue;
        const tm_tensor *p = m->params[spec->param_of_grad[j]].value;
        results[1 + j] = tm_const_fill(c, p->dtype, p->rank, p->dims, 0.0);
    }
    if (st == TM_OK && !tm_ctx_ok(c)) st = c->status;
    free(xs);
    free(owner);
    free(gx);
    free(slot);
    return st;
oom:
    free(xs);
    free(owner);
    free(gx);
    free(slot);
    return tm_ctx_fail(c, TM_ERR_NO_MEMORY, "out of memory differentiating");
}

/* ---- The public calls ---------------------------------------------------------------- */

/* Splits the caller's inputs into the graph's and the target. */
static tm_status split_inputs(const tm_grad_spec *spec, int n, const char *const *names,
                              const tm_tensor *const *inputs, const char **gnames,
                              tm_xval *gin, int *n_g, const tm_tensor **target, tm_error *err) {
    *target = NULL;
    *n_g = 0;
    for (int k = 0; k < n; k++) {
        if (!names[k]) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "input name %d is NULL", k);
        if (spec->opts.loss != TM_LOSS_OUTPUT && !strcmp(names[k], spec->opts.target)) {
            if (!inputs[k])
                return tm__fail_at(err, TM_ERR_INVALID_ARGUMENT, NULL, NULL, names[k],
                                   "the target '%s' is NULL", names[k]);
            *target = inputs[k];
            continue;
        }
        gnames[*n_g] = names[k];
        gin[*n_g].kind = inputs[k] ? TM_X_TENSOR : TM_X_NONE;
        gin[*n_g].t = (tm_tensor *)inputs[k];
        (*n_g)++;
    }
    if (spec->opts.loss != TM_LOSS_OUTPUT && !*target)
        return tm__fail_at(err, TM_ERR_NOT_FOUND, NULL, NULL, spec->opts.target, "the %s loss "
                           "needs its target: give an input named '%s'",
                           loss_name(spec->opts.loss), spec->opts.target);
    return TM_OK;
}

tm_status tm_grad_plan_create(tm_model *m, int n, const char *const *names,
                              const tm_tensor *const *inputs, const tm_plan_options *opts,
                              const tm_grad_options *grad, tm_plan **out, tm_error *err) {
    if (!m || (n && (!names || !inputs)) || !out)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_grad_plan_create: NULL argument");
    tm_grad_spec spec;
    tm_status st = tm__grad_spec_init(m, grad, &spec, err);
    if (st != TM_OK) return st;
    const char **gnames = calloc((size_t)n + 1, sizeof *gnames);
    tm_xval *gin = calloc((size_t)n + 1, sizeof *gin);
    const tm_tensor *target = NULL;
    int n_g = 0;
    st = !gnames || !gin ? tm__fail(err, TM_ERR_NO_MEMORY, "out of memory")
                         : split_inputs(&spec, n, names, inputs, gnames, gin, &n_g, &target, err);
    int dynamic = opts && opts->size >= offsetof(tm_plan_options, dynamic) + sizeof(int) &&
                  opts->dynamic;
    int done = 0;
    if (st == TM_OK && dynamic) {
        /* A plan serving every length (or batch) of the line: else one for this shape. */
        tm_error e2;
        memset(&e2, 0, sizeof e2);
        tm_status ds = tm__create_dynamic(m, n, names, inputs, opts, &spec, out, &e2);
        if (ds == TM_OK) done = 1;
        else if (ds != TM_ERR_UNSUPPORTED) {
            tm__error_copy(err, &e2);
            st = ds;
        } else if (getenv("TM_GENERIC_DEBUG"))
            fprintf(stderr, "transmuter: tm_grad_plan_create: a plan for this shape alone: %s\n",
                    e2.message);
    }
    if (st == TM_OK && !done)
        st = tm__plan_create_grad(m, n_g, gnames, gin, target, opts, &spec, out, err);
    free(gnames);
    free(gin);
    tm__grad_spec_free(&spec);
    return st;
}

tm_status tm_run_eager_grad(tm_model *m, int n, const char *const *names,
                            const tm_tensor *const *inputs, const tm_grad_options *grad,
                            tm_tensor **outputs, tm_error *err) {
    if (!m || (n && (!names || !inputs)) || !outputs)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_run_eager_grad: NULL argument");
    if (m->missing)
        return tm__fail(err, TM_ERR_UNSUPPORTED, "the model uses operators Transmuter does not "
                        "support: %s", m->missing);
    tm_grad_spec spec;
    tm_status st = tm__grad_spec_init(m, grad, &spec, err);
    if (st != TM_OK) return st;
    const tm_graph *g = m->onnx->graph;
    int n_res = 1 + spec.n_chosen + (spec.opts.with_outputs ? g->n_outputs : 0);
    const char **gnames = calloc((size_t)n + 1, sizeof *gnames);
    tm_xval *gin = calloc((size_t)n + 1, sizeof *gin);
    tm_oval *ovals = calloc((size_t)g->n_inputs + 1, sizeof *ovals);
    tm_oval *outs = calloc((size_t)g->n_outputs + 1, sizeof *outs);
    tm_val *vals = calloc((size_t)spec.n_chosen + 2, sizeof *vals);
    tm_tensor **res = calloc((size_t)n_res + 1, sizeof *res);
    const tm_tensor *target_t = NULL;
    int n_g = 0;
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, m->opts.allocator);
    c.compute_type = m->opts.compute_type;
    c.pool = m->pool;
    c.params = tm__params_table(m);
    c.tape = 1;
    c.track_params = spec.chosen;
    st = !gnames || !gin || !ovals || !outs || !vals || !res
             ? tm__fail(err, TM_ERR_NO_MEMORY, "out of memory")
             : split_inputs(&spec, n, names, inputs, gnames, gin, &n_g, &target_t, err);
    if (st == TM_OK) st = tm__bind_inputs(m, &c, n_g, gnames, gin, ovals, err);
    if (st == TM_OK) {
        tm__inputs_to_compute_type(&c, ovals, g->n_inputs);
        tm_val target = target_t ? tm_val_tensor(&c, (tm_tensor *)target_t, 1) : TM_NONE;
        tm_interp ip;
        memset(&ip, 0, sizeof ip);
        ip.ctx = &c;
        ip.model = m->onnx;
        st = tm_interp_run(&ip, ovals, outs, NULL);
        if (st == TM_OK && !tm_ctx_ok(&c)) st = c.status;
        if (st == TM_OK) st = tm__grad_build(&c, m, &spec, outs, target, 0, vals);
        if (st == TM_OK) tm__restore_output_dtypes(m, &c, outs);
        if (st == TM_OK && !tm_ctx_ok(&c)) st = c.status;
        if (st != TM_OK) tm__error_copy(err, &c.err);
    }
    for (int i = 0; st == TM_OK && i < n_res; i++) {
        int fwd = i - 1 - spec.n_chosen;
        if (fwd >= 0 && outs[fwd].kind != TM_OV_TENSOR) continue;
        const tm_tensor *t = tm_vdata(&c, fwd >= 0 ? outs[fwd].v : vals[i]);
        res[i] = t ? tm_tensor_clone(t, NULL) : NULL;
        if (!res[i]) st = tm__fail(err, TM_ERR_NO_MEMORY, "cannot copy a result");
    }
    for (int i = 0; i < n_res && res; i++) {
        if (st == TM_OK) outputs[i] = res[i];
        else tm_tensor_free(res[i]);
    }
    for (int i = 0; ovals && i < g->n_inputs; i++) free(ovals[i].seq);
    for (int i = 0; outs && i < g->n_outputs; i++) free(outs[i].seq);
    free(gnames);
    free(gin);
    free(ovals);
    free(outs);
    free(vals);
    free(res);
    tm_ctx_destroy(&c);
    tm__grad_spec_free(&spec);
    return st;
}
