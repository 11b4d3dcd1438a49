/* Plans that serve changing input sizes: one plan for every past length of a decoder's
 * step, or every length of an encoder's input, instead of one per shape. Not symbolic
 * shape inference: the graph is traced at three sizes on a line (the first two observed,
 * the third the next one along), the three plans must be the same kernels on the same
 * values, and what differs between them is fitted to the size:
 *   - kernel arguments (a reshape's target, a slice's end) as c0 + c1 * p, exactly;
 *   - small integer constants the lowerings made from the sizes (PV_FIT) element by
 *     element the same way;
 *   - constants folded from those (a rotary table's slice, a causal mask) become kernels
 *     run with the plan (the trace's fold log, ctx.h), on the constants they read;
 *   - every value's dims and every kernel's scratch come from the primitives' own shape
 *     rules, run again for the new size, and the arena is placed anew (growing by half).
 * The fit is checked at the third size against its own trace, and a binding whose size
 * is below the sampled class (0 or 1, where broadcasting and lowerings change) is
 * refused: the plan cache then makes a plan for that shape, as before. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "plan_internal.h"
#include "chunks.h"
#include "../core/dtype.h"

typedef struct gen_arg {
    int kernel, idx;
    double c0, c1;        /* i[idx] = c0 + c1 * p */
} gen_arg;

typedef struct gen_fit {
    int pv;
    int64_t n;
    int64_t *base;        /* elements at the plan's own size, where c1 is 0 */
    double *c0, *c1;
} gen_fit;

struct tm_generic {
    int pin, pax;         /* the size p: dims[pax] of graph input pin */
    int n_in;
    uint8_t (*varies)[TM_MAX_RANK];   /* per graph input and axis: the dim follows p */
    double (*c0)[TM_MAX_RANK], (*c1)[TM_MAX_RANK];
    int n_args;
    gen_arg *args;
    int n_fits;
    gen_fit *fits;
    int64_t samples[3];
    int64_t max;          /* largest p served; 0: no bound */
};

void tm__gen_set_max(tm_plan *p, int64_t max) {
    if (p && p->gen) p->gen->max = max > 0 ? max : 0;
}

int tm_plan_serves_sizes(const tm_plan *p, int64_t *min_size, int64_t *max_size) {
    if (!p || !p->gen) return 0;
    if (min_size) *min_size = 2;
    if (max_size) *max_size = p->gen->max ? p->gen->max : -1;
    return 1;
}

void tm__gen_free(struct tm_generic *g) {
    if (!g) return;
    for (int i = 0; i < g->n_fits; i++) {
        free(g->fits[i].base);
        free(g->fits[i].c0);
        free(g->fits[i].c1);
    }
    free(g->fits);
    free(g->args);
    free(g->varies);
    free(g->c0);
    free(g->c1);
    free(g);
}

/* c0 + c1 p when it is an integer (a size or an index), else 0. */
static int eval(double c0, double c1, int64_t p, int64_t *out) {
    double x = c0 + c1 * (double)p;
    if (!(fabs(x) < 9e15)) return 0;
    double r = nearbyint(x);
    if (fabs(x - r) > 1e-6) return 0;
    *out = (int64_t)r;
    return 1;
}

static void fit2(int64_t pa, int64_t va, int64_t pb, int64_t vb, double *c0, double *c1) {
    *c1 = (double)(vb - va) / (double)(pb - pa);
    *c0 = (double)va - *c1 * (double)pa;
}

static const char *graph_input_name(const tm_plan *p, int i) {
    return tm__plan_input_name(p, i);
}

/* ---- The sizes of a binding -------------------------------------------------------- */

/* Dims, nbytes, arguments and fitted constants of every value of p at size param, into
 * t[] (one tensor per plan value; PV_FIT data buffers given), args[] (one per kernel) and
 * *scratch, by the fits and the primitives' shape rules. */
static tm_status gen_shapes(const tm_plan *p, int64_t param, tm_tensor *t, tm_args *args,
                            size_t *scratch, tm_error *err) {
    const struct tm_generic *g = p->gen;
    for (int k = 0; k < p->n_kernels; k++) args[k] = p->kernels[k].args;
    for (int i = 0; i < g->n_args; i++) {
        const gen_arg *a = &g->args[i];
        if (!eval(a->c0, a->c1, param, &args[a->kernel].i[a->idx]))
            return tm__fail(err, TM_ERR_SHAPE, "%s: an argument is not whole at size %lld",
                            p->kernels[a->kernel].where, (long long)param);
    }
    for (int i = 0; i < p->n_values; i++) {
        const plan_value *v = &p->values[i];
        if (v->kind != PV_INPUT) continue;
        t[i].rank = v->rank;
        for (int d = 0; d < v->rank; d++) {
            int64_t x = v->dims[d];
            if (g->varies[v->input][d] && !eval(g->c0[v->input][d], g->c1[v->input][d], param, &x))
                return tm__fail(err, TM_ERR_SHAPE, "input '%s' has no size on this line",
                                graph_input_name(p, v->input));
            t[i].dims[d] = x;
        }
        t[i].nbytes = (size_t)tm_numel(v->rank, t[i].dims) * tm_dtype_elem_size(v->dtype);
    }
    for (int i = 0; i < g->n_fits; i++) {
        const gen_fit *f = &g->fits[i];
        tm_tensor *ft = &t[f->pv];
        for (int64_t e = 0; e < f->n; e++) {
            int64_t x = f->base[e];
            if (f->c1[e] != 0 && !eval(f->c0[e], f->c1[e], param, &x))
                return tm__fail(err, TM_ERR_SHAPE, "a constant of the plan is not whole at "
                                "size %lld", (long long)param);
            tm_store_i64(ft->data, ft->dtype, (size_t)e, x);
        }
    }
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_TRACE, NULL);
    c.compute_type = p->model->opts.compute_type;
    *scratch = 0;
    tm_status st = TM_OK;
    enum { MAX_IN = 64 };
    tm_vinfo vin_store[MAX_IN];
    const tm_vinfo *vin[MAX_IN];
    for (int k = 0; k < p->n_kernels && st == TM_OK; k++) {
        const plan_kernel *pk = &p->kernels[k];
        if (pk->nin > MAX_IN) {
            st = tm__fail(err, TM_ERR_UNSUPPORTED, "%s: too many inputs for a generic plan",
                          pk->where);
            break;
        }
        for (int j = 0; j < pk->nin; j++) {
            const plan_value *v = &p->values[pk->in[j]];
            tm_vinfo *vi = &vin_store[j];
            memset(vi, 0, sizeof *vi);
            vi->dtype = v->dtype;
            vi->rank = t[pk->in[j]].rank;
            memcpy(vi->dims, t[pk->in[j]].dims, sizeof vi->dims);
            vi->producer = -1;
            vi->input_index = -1;
            vi->param = -1;
            vi->folded_by = -1;
            if (v->kind == PV_CONST) vi->data = v->constant;
            if (v->kind == PV_FIT) vi->data = &t[pk->in[j]];
            vin[j] = vi;
        }
        tm_vinfo vout[4];
        memset(vout, 0, sizeof vout);
        size_t sc = 0;
        st = tm_prims[pk->prim].shape(&c, pk->prim, &args[k], vin, pk->nin, vout, pk->nout, &sc);
        if (st == TM_OK && !tm_ctx_ok(&c)) st = c.status;
        if (st != TM_OK) {
            tm__fail(err, st, "%s: %s at size %lld: %s", pk->where, tm_prims[pk->prim].name,
                     (long long)param, c.err.message[0] ? c.err.message : "invalid shapes");
            break;
        }
        if (sc > *scratch) *scratch = sc;
        for (int o = 0; o < pk->nout; o++) {
            tm_tensor *ot = &t[pk->out[o]];
            const plan_value *v = &p->values[pk->out[o]];
            if (vout[o].dtype != v->dtype || vout[o].rank != v->rank) {
                st = tm__fail(err, TM_ERR_SHAPE, "%s: %s gives another dtype or rank at size "
                              "%lld", pk->where, tm_prims[pk->prim].name, (long long)param);
                break;
            }
            ot->rank = v->rank;
            memcpy(ot->dims, vout[o].dims, sizeof ot->dims);
            int64_t n = tm_numel(v->rank, ot->dims);
            if (n < 0) {
                st = tm__fail(err, TM_ERR_SHAPE, "%s: a size overflows", pk->where);
                break;
            }
            ot->nbytes = (size_t)n * tm_dtype_elem_size(v->dtype);
        }
    }
    tm_ctx_destroy(&c);
    return st;
}

/* ---- Sessions ---------------------------------------------------------------------- */

tm_status tm__gen_session_init(tm_session *s, tm_error *err) {
    const tm_plan *p = s->plan;
    const struct tm_generic *g = p->gen;
    s->args = malloc(((size_t)p->n_kernels + 1) * sizeof *s->args);
    s->fit_bufs = calloc((size_t)g->n_fits + 1, sizeof *s->fit_bufs);
    if (!s->args || !s->fit_bufs) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    s->gen_nbytes = malloc(((size_t)p->n_values + 1) * sizeof *s->gen_nbytes);
    s->gen_work = malloc(tm__plan_place_work_bytes(p));
    if (!s->gen_nbytes || !s->gen_work) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (int k = 0; k < p->n_kernels; k++) s->args[k] = p->kernels[k].args;
    for (int i = 0; i < g->n_fits; i++) {
        const plan_value *v = &p->values[g->fits[i].pv];
        s->fit_bufs[i] = calloc(1, v->nbytes ? v->nbytes : 1);
        if (!s->fit_bufs[i]) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        s->tensors[g->fits[i].pv].data = s->fit_bufs[i];
    }
    s->param = -1;
    return TM_OK;
}

void tm__gen_session_free(tm_session *s) {
    if (!s->plan->gen) return;
    for (int i = 0; s->fit_bufs && i < s->plan->gen->n_fits; i++) free(s->fit_bufs[i]);
    free(s->fit_bufs);
    free(s->args);
    free(s->gen_nbytes);
    free(s->gen_work);
}

/* The size p of these inputs when the plan serves them, else -1 (with why in err when
 * given). */
static int64_t gen_param_of(const tm_plan *p, int n, const char *const *names,
                            const tm_xval *inputs, tm_error *err) {
    const struct tm_generic *g = p->gen;
    const tm_graph *gr = p->model->onnx->graph;
    int64_t param = -1;
    for (int k = 0; k < n; k++)
        if (names[k] && !strcmp(names[k], tm__plan_input_name(p, g->pin)) &&
            inputs[k].kind == TM_X_TENSOR && inputs[k].t && inputs[k].t->rank > g->pax)
            param = inputs[k].t->dims[g->pax];
    if (param < 2 || (g->max && param > g->max)) {
        if (err && param < 2)
            tm__fail(err, TM_ERR_SHAPE, "input '%s' dim %d is %lld: this plan serves sizes of 2 "
                     "or more", gr->inputs[g->pin].name, g->pax, (long long)param);
        else if (err)
            tm__fail(err, TM_ERR_SHAPE, "input '%s' dim %d is %lld: this plan serves sizes up "
                     "to %lld", gr->inputs[g->pin].name, g->pax, (long long)param, (long long)g->max);
        return -1;
    }
    for (int k = 0; k < n; k++) {
        int gi = -1;
        for (int i = 0; i < g->n_in; i++)
            if (names[k] && !strcmp(names[k], tm__plan_input_name(p, i))) gi = i;
        if (gi < 0 || p->input_static[gi] || inputs[k].kind != TM_X_TENSOR || !inputs[k].t) continue;
        const tm_tensor *t = inputs[k].t;
        if (t->rank != p->input_rank[gi] || t->dtype != p->input_dtype[gi]) {
            if (err) tm__fail(err, TM_ERR_SHAPE, "input '%s' does not have the dtype and rank "
                              "the plan was made for", names[k]);
            return -1;
        }
        for (int d = 0; d < t->rank; d++) {
            int64_t want = p->input_dims[gi][d];
            if (g->varies[gi][d] && !eval(g->c0[gi][d], g->c1[gi][d], param, &want)) want = -1;
            if (t->dims[d] != want || (g->varies[gi][d] && want < 2)) {
                if (err) tm__fail(err, TM_ERR_SHAPE, "input '%s' dim %d is %lld where this "
                                  "plan wants %lld at size %lld", names[k], d,
                                  (long long)t->dims[d], (long long)want, (long long)param);
                return -1;
            }
        }
    }
    return param;
}

int tm__gen_accepts(const tm_plan *p, int n, const char *const *names,
                    const tm_tensor *const *inputs) {
    if (!p || !p->gen) return 0;
    enum { SMALL = 64 };
    tm_xval x[SMALL];
    if (n > SMALL) return 0;
    for (int i = 0; i < n; i++) {
        memset(&x[i], 0, sizeof x[i]);
        x[i].kind = inputs[i] ? TM_X_TENSOR : TM_X_NONE;
        x[i].t = (tm_tensor *)inputs[i];
    }
    return gen_param_of(p, n, names, x, NULL) >= 0;
}

static tm_status bind_param(tm_session *s, int64_t param, tm_error *err);

tm_status tm__gen_bind(tm_session *s, int n, const char *const *names, const tm_xval *inputs,
                       tm_error *err) {
    const tm_plan *p = s->plan;
    int64_t param = gen_param_of(p, n, names, inputs, err);
    if (param < 0) return TM_ERR_SHAPE;
    if (param == s->param) return TM_OK;
    return bind_param(s, param, err);
}

tm_status tm__gen_reserve(tm_session *s, int64_t param, tm_error *err) {
    if (!s->plan->gen || param < 2) return TM_OK;
    tm_status st = bind_param(s, param, err);
    s->param = -1;   /* the next run binds its own sizes, in the memory reserved here */
    return st;
}

static tm_status bind_param(tm_session *s, int64_t param, tm_error *err) {
    const tm_plan *p = s->plan;
    size_t scratch = 0;
    s->param = -1;   /* half-bound until the end */
    tm_status st = gen_shapes(p, param, s->tensors, s->args, &scratch, err);
    if (st != TM_OK) return st;
    size_t *nbytes = s->gen_nbytes;
    for (int i = 0; i < p->n_values; i++) nbytes[i] = s->tensors[i].nbytes;
    size_t kept = 0;
    int ok = 1;
    size_t arena = tm__plan_place(p, nbytes, p->last_use, s->off, &kept, s->gen_work, &ok);
    if (!ok) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    if (arena > s->arena_cap) {
        size_t cap = arena + arena / 2;
        void *a = tm__session_arena_alloc(p->model, cap);
        if (!a) return tm__fail(err, TM_ERR_NO_MEMORY, "cannot grow a session's arena to %zu "
                                "bytes", cap);
        tm__model_free_mem(p->model, s->arena);
        s->arena = a;
        s->arena_cap = cap;
    }
    if (scratch > s->scratch_cap) {
        size_t cap = scratch + scratch / 2;
        void *sc = tm__model_alloc(p->model, cap);
        if (!sc) return tm__fail(err, TM_ERR_NO_MEMORY, "cannot grow a session's scratch");
        tm__model_free_mem(p->model, s->scratch);
        s->scratch = sc;
        s->scratch_cap = cap;
    }
    for (int i = 0; i < p->n_values; i++)
        if (p->values[i].kind == PV_ARENA || p->values[i].kind == PV_KEPT)
            s->tensors[i].data = (char *)s->arena + s->off[i];
    /* Kept values (an embedding gradient's rows written last run) hold what the last run
     * left only at the sizes it ran at: new sizes start them from zero, as a new session. */
    if (kept) memset(s->arena, 0, kept);
    for (int i = 0; i < p->n_values; i++)
        if (p->values[i].kind == PV_ALIAS) s->tensors[i].data = s->tensors[tm__plan_root_of(p, i)].data;
    s->param = param;
    return TM_OK;
}

/* ---- Making one -------------------------------------------------------------------- */

static int same_structure(const tm_plan *a, const tm_plan *b, char *why, size_t why_len) {
    if (a->n_values != b->n_values || a->n_kernels != b->n_kernels) {
        snprintf(why, why_len, "the plans have %d and %d kernels", a->n_kernels, b->n_kernels);
        return 0;
    }
    for (int k = 0; k < a->n_kernels; k++) {
        const plan_kernel *x = &a->kernels[k], *y = &b->kernels[k];
        int same = x->prim == y->prim && x->nin == y->nin && x->nout == y->nout &&
                   !memcmp(x->out, y->out, sizeof x->out) &&
                   !memcmp(x->args.f, y->args.f, sizeof x->args.f);
        for (int j = 0; same && j < x->nin; j++) same = x->in[j] == y->in[j];
        if (!same) {
            snprintf(why, why_len, "%s differs between sizes", x->where);
            return 0;
        }
    }
    for (int i = 0; i < a->n_values; i++) {
        const plan_value *x = &a->values[i], *y = &b->values[i];
        int same = x->kind == y->kind && x->dtype == y->dtype && x->rank == y->rank &&
                   x->alias_of == y->alias_of && x->input == y->input;
        if (same && x->kind == PV_CONST)
            same = x->nbytes == y->nbytes && x->constant && y->constant &&
                   (x->constant->dtype == TM_STRING ||
                    x->constant->data == y->constant->data ||
                    !memcmp(x->constant->data, y->constant->data, x->nbytes));
        if (same && x->kind == PV_FIT)
            same = x->nbytes == y->nbytes && !memcmp(x->dims, y->dims, sizeof x->dims) &&
                   (tm_dtype_is_signed_int(x->dtype) || tm_dtype_is_unsigned_int(x->dtype));

        if (!same) {
            snprintf(why, why_len, "value %d (%s) differs between sizes", i,
                     x->kind == PV_CONST ? "a constant" : x->kind == PV_FIT ? "a constant made from the sizes" :
                     x->kind == PV_KEPT ? "a kept value" : "a value");
            return 0;
        }
    }
    return 1;
}

/* Per context value: its data differs between the traces (a constant that depends on the
 * sizes). */
static uint8_t *find_dyn(const tm_gen_trace *gt, int n) {
    int32_t nv = gt[0].c.n_vals;
    for (int j = 1; j < n; j++)
        if (gt[j].c.n_vals != nv) return NULL;
    uint8_t *dyn = calloc((size_t)nv + 1, 1);
    if (!dyn) return NULL;
    for (int32_t v = 0; v < nv; v++) {
        const tm_vinfo *a = &gt[0].c.vals[v];
        for (int j = 1; j < n && !dyn[v]; j++) {
            const tm_vinfo *b = &gt[j].c.vals[v];
            if (!a->data != !b->data) dyn[v] = 1;
            else if (a->data && (a->rank != b->rank || memcmp(a->dims, b->dims, sizeof a->dims) ||
                                 a->data->nbytes != b->data->nbytes ||
                                 (a->data->dtype != TM_STRING &&
                                  a->data->data != b->data->data &&
                                  memcmp(a->data->data, b->data->data, a->data->nbytes))))
                dyn[v] = 1;
        }
    }
    return dyn;
}

static tm_status make_fits(tm_plan *pl[3], const int64_t ps[3], struct tm_generic *g,
                           tm_error *err) {
    const tm_plan *a = pl[0], *b = pl[1];
    int cap = 16;
    g->args = malloc((size_t)cap * sizeof *g->args);
    if (!g->args) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (int k = 0; k < b->n_kernels; k++)
        for (int i = 0; i < TM_ARGS_MAX_I; i++) {
            int64_t va = a->kernels[k].args.i[i], vb = b->kernels[k].args.i[i];
            if (va == vb) continue;
            if (g->n_args == cap) {
                gen_arg *r = realloc(g->args, (size_t)(cap *= 2) * sizeof *r);
                if (!r) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
                g->args = r;
            }
            gen_arg *ga = &g->args[g->n_args++];
            ga->kernel = k;
            ga->idx = i;
            fit2(ps[0], va, ps[1], vb, &ga->c0, &ga->c1);
        }
    int n_fit = 0;
    for (int i = 0; i < b->n_values; i++) n_fit += b->values[i].kind == PV_FIT;
    g->fits = calloc((size_t)n_fit + 1, sizeof *g->fits);
    if (!g->fits) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < b->n_values; i++) {
        if (b->values[i].kind != PV_FIT) continue;
        const tm_tensor *ta = a->values[i].constant, *tb = b->values[i].constant;
        gen_fit *f = &g->fits[g->n_fits++];
        f->pv = i;
        f->n = tm_numel(tb->rank, tb->dims);
        f->base = malloc(((size_t)f->n + 1) * sizeof *f->base);
        f->c0 = calloc((size_t)f->n + 1, sizeof *f->c0);
        f->c1 = calloc((size_t)f->n + 1, sizeof *f->c1);
        if (!f->base || !f->c0 || !f->c1) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        for (int64_t e = 0; e < f->n; e++) {
            int64_t va = tm_load_i64(ta->data, ta->dtype, (size_t)e);
            int64_t vb = tm_load_i64(tb->data, tb->dtype, (size_t)e);
            f->base[e] = vb;
            if (va != vb) fit2(ps[0], va, ps[1], vb, &f->c0[e], &f->c1[e]);
        }
    }
    return TM_OK;
}

/* The fit at the third size against that size's own plan: every value's dims, every
 * argument and every fitted constant. */
static tm_status check_fit(const tm_plan *gp, const tm_plan *c, int64_t pc, char *why,
                           size_t why_len, tm_error *err) {
    tm_tensor *t = calloc((size_t)gp->n_values + 1, sizeof *t);
    tm_args *args = malloc(((size_t)gp->n_kernels + 1) * sizeof *args);
    void **bufs = calloc((size_t)gp->gen->n_fits + 1, sizeof *bufs);
    tm_status st = t && args && bufs ? TM_OK : tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < gp->n_values && st == TM_OK; i++) {
        t[i].dtype = gp->values[i].dtype;
        t[i].rank = gp->values[i].rank;
        memcpy(t[i].dims, gp->values[i].dims, sizeof t[i].dims);
    }
    for (int i = 0; i < gp->gen->n_fits && st == TM_OK; i++) {
        bufs[i] = calloc(1, gp->values[gp->gen->fits[i].pv].nbytes + 1);
        if (!bufs[i]) st = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        else t[gp->gen->fits[i].pv].data = bufs[i];
    }
    size_t scratch = 0;
    tm_error e2;
    memset(&e2, 0, sizeof e2);
    if (st == TM_OK && gen_shapes(gp, pc, t, args, &scratch, &e2) != TM_OK) {
        snprintf(why, why_len, "%.380s", e2.message);
        st = TM_ERR_UNSUPPORTED;
    }
    for (int i = 0; i < gp->n_values && st == TM_OK; i++) {
        if (memcmp(t[i].dims, c->values[i].dims, (size_t)t[i].rank * sizeof t[i].dims[0])) {
            snprintf(why, why_len, "value %d: its dims do not follow the size", i);
            st = TM_ERR_UNSUPPORTED;
        }
        if (st == TM_OK && gp->values[i].kind == PV_FIT &&
            memcmp(t[i].data, c->values[i].constant->data, c->values[i].nbytes)) {
            snprintf(why, why_len, "value %d: a constant made from the sizes does not follow "
                     "them", i);
            st = TM_ERR_UNSUPPORTED;
        }
    }
    for (int k = 0; k < gp->n_kernels && st == TM_OK; k++)
        if (memcmp(args[k].i, c->kernels[k].args.i, sizeof args[k].i)) {
            snprintf(why, why_len, "%s: its arguments do not follow the size", gp->kernels[k].where);
            st = TM_ERR_UNSUPPORTED;
        }
    for (int i = 0; bufs && i < gp->gen->n_fits; i++) free(bufs[i]);
    free(bufs);
    free(t);
    free(args);
    return st;
}

/* samples[j]: the inputs at size j (three points on one line: sizes ps[j], the parameter
 * being dims[pax] of graph input pin); returns the plan of sample 1, serving every size
 * of 2 or more on that line. TM_ERR_UNSUPPORTED (with why) when the graph does not follow
 * the sizes as a line (then plans per shape stay the way). */
/* Computed constants that are a leading part of a constant (a rotary table's rows up to
 * the length: SLICE starting at 0 with step 1 on every axis, whole on all but the first,
 * at every size the fit gives) become views of it: the kernel is not run and its output
 * is the constant's own memory, where it copied the rows each run. */
static void prefix_views(tm_plan *p) {
    const struct tm_generic *g = p->gen;
    for (int k = 0; k < p->n_kernels; k++) {
        plan_kernel *pk = &p->kernels[k];
        if (pk->prim != TM_P_SLICE || pk->nin != 1) continue;
        const plan_value *x = &p->values[pk->in[0]];
        plan_value *y = &p->values[pk->out[0]];
        if (x->kind != PV_CONST || y->kind != PV_ARENA || x->rank < 1 || x->rank != y->rank) continue;
        /* The cut axis: the one whose rows are taken in part (after axes of size 1). */
        int cut = 0;
        while (cut < x->rank - 1 && x->dims[cut] == 1) cut++;
        int ok = 1;
        for (int d = 0; d < x->rank && ok; d++) {
            const int64_t *a = &pk->args.i[3 * d];
            ok = a[0] == 0 && a[1] == 1 && (d == cut || a[2] == x->dims[d]);
        }
        for (int i = 0; i < g->n_args && ok; i++)
            ok = g->args[i].kernel != k || g->args[i].idx == 3 * cut + 2;
        if (!ok) continue;
        pk->skip = 1;
        y->kind = PV_ALIAS;
        y->alias_of = pk->in[0];
    }
}

/* A plan's values that point into its trace (fitted and computed constants) forget it:
 * the trace goes before the plan. */
static void forget_trace(tm_plan *p) {
    for (int i = 0; p && i < p->n_values; i++)
        if (p->values[i].kind != PV_CONST) p->values[i].constant = NULL;
}

/* The traces are taken two at a time (A and B, then B and C), not three: a float model
 * whose weights fold into copies (a transposed weight) holds one copy per live trace. */
tm_status tm__plan_generalize(tm_model *m, int n, const char *const *names,
                              tm_xval *const samples[3], const tm_plan_options *opts,
                              const tm_grad_spec *grad, int pin, int pax, tm_plan **out,
                              tm_error *err) {
    tm_plan *pl[3] = {0};
    tm_gen_trace gt[3];
    memset(gt, 0, sizeof gt);
    int64_t ps[3];
    uint8_t *dyn = NULL;
    char why[400] = "";
    tm_status st = TM_OK;
    const tm_graph *g = m->onnx->graph;
    for (int j = 0; j < 3; j++) {
        ps[j] = -1;
        for (int k = 0; k < n; k++)
            if (!strcmp(names[k], g->inputs[pin].name) && samples[j][k].t)
                ps[j] = samples[j][k].t->dims[pax];
    }
    if (ps[0] == ps[1] || ps[1] == ps[2] || ps[0] == ps[2] || ps[0] < 2 || ps[1] < 2 || ps[2] < 2)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "generalize: three distinct sizes of 2 or "
                        "more needed");
    for (int j = 0; j < 2 && st == TM_OK; j++)
        st = tm__plan_trace(m, n, names, samples[j], opts, grad, &pl[j], &gt[j], err);
    /* A KV cache the plan keeps in place is taken (P, B, H, D): axis 0 goes to 1, 1 to 2
     * and 2 to 0. */
    if (st == TM_OK && tm_plan_kv_input(pl[0], pin) && pax >= 0 && pax <= 2) pax = (pax + 1) % 3;
    if (st == TM_OK && !(dyn = find_dyn(gt, 2))) {
        snprintf(why, sizeof why, "the traces differ in their values");
        st = TM_ERR_UNSUPPORTED;
    }
    for (int j = 0; j < 2 && st == TM_OK; j++) st = tm__plan_build(pl[j], &gt[j], dyn, err);
    if (st == TM_OK && !same_structure(pl[0], pl[1], why, sizeof why)) st = TM_ERR_UNSUPPORTED;
    struct tm_generic *gen = NULL;
    if (st == TM_OK) {
        gen = calloc(1, sizeof *gen);
        int n_pin = pl[1]->n_graph_inputs;   /* with a gradient plan's target */
        if (gen) {
            gen->n_in = n_pin;
            gen->varies = calloc((size_t)n_pin + 1, sizeof *gen->varies);
            gen->c0 = calloc((size_t)n_pin + 1, sizeof *gen->c0);
            gen->c1 = calloc((size_t)n_pin + 1, sizeof *gen->c1);
        }
        if (!gen || !gen->varies || !gen->c0 || !gen->c1)
            st = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    }
    if (st == TM_OK) {
        gen->pin = pin;
        gen->pax = pax;
        memcpy(gen->samples, ps, sizeof ps);
        for (int i = 0; i < gen->n_in; i++)
            for (int d = 0; d < pl[1]->input_rank[i]; d++) {
                int64_t va = pl[0]->input_dims[i][d], vb = pl[1]->input_dims[i][d];
                if (va == vb) continue;
                gen->varies[i][d] = 1;
                fit2(ps[0], va, ps[1], vb, &gen->c0[i][d], &gen->c1[i][d]);
            }
        st = make_fits(pl, ps, gen, err);
        pl[1]->gen = gen;
        gen = NULL;
    }
    forget_trace(pl[0]);
    tm_plan_free(pl[0]);
    pl[0] = NULL;
    tm__gen_trace_free(&gt[0]);
    /* C: the check. */
    if (st == TM_OK) st = tm__plan_trace(m, n, names, samples[2], opts, grad, &pl[2], &gt[2], err);
    if (st == TM_OK && gt[2].c.n_vals != gt[1].c.n_vals) {
        snprintf(why, sizeof why, "the traces differ in their values");
        st = TM_ERR_UNSUPPORTED;
    }
    if (st == TM_OK) st = tm__plan_build(pl[2], &gt[2], dyn, err);
    if (st == TM_OK && !same_structure(pl[1], pl[2], why, sizeof why)) st = TM_ERR_UNSUPPORTED;
    if (st == TM_OK) st = check_fit(pl[1], pl[2], ps[2], why, sizeof why, err);
    if (st == TM_OK && !getenv("TM_GENERIC_NO_VIEWS")) prefix_views(pl[1]);
    if (st == TM_ERR_UNSUPPORTED && why[0])
        tm__fail(err, st, "the plans at sizes %lld, %lld and %lld cannot be one: %s",
                 (long long)ps[0], (long long)ps[1], (long long)ps[2], why);
    tm__gen_free(gen);
    for (int j = 1; j < 3; j++) {
        forget_trace(pl[j]);
        if (st == TM_OK && j == 1) continue;
        tm_plan_free(pl[j]);
    }
    for (int j = 1; j < 3; j++) tm__gen_trace_free(&gt[j]);
    free(dyn);
    if (st == TM_OK) *out = pl[1];
    return st;
}
