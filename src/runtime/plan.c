/* Plans: a trace of the graph for fixed input shapes (and static input values), reduced
 * to the kernels the outputs need, with every intermediate placed in one arena by value
 * lifetimes. Running a plan allocates nothing. Where the trace needed a value on the
 * host, the plan runs its prefix compiled and the rest of the graph eagerly (a graph
 * break). Also the per-model plan cache behind tm_model_run. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "runtime.h"
#include "passes.h"
#include "chunks.h"

#include "plan_internal.h"

void tm_plan_options_default(tm_plan_options *o) {
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
}

static size_t align64(size_t n) { return (n + 63) & ~(size_t)63; }

/* ---- Building ---------------------------------------------------------------------- */

typedef struct builder {
    tm_ctx *c;
    tm_plan *p;
    int *pv_of;           /* ctx value -> plan value, -1 */
    uint8_t *needed_node;
    int *last_use;        /* per plan value: last kernel index reading it (or n_kernels) */
    int *first_def;
    const uint8_t *dyn;   /* per ctx value: a constant computed at run time (generic.c) */
    uint8_t *needed_fold; /* per logged fold: a kernel of the plan */
    int no_memory;        /* aligning a misaligned constant failed */
} builder;

static int is_dyn(const builder *b, tm_val v) { return b->dyn && b->dyn[v]; }

static int add_value(builder *b, tm_val v) {
    if (b->pv_of[v] >= 0) return b->pv_of[v];
    tm_plan *p = b->p;
    /* Kernels read a constant's elements: misaligned bytes of the model become the
     * model's aligned copy (vinfo.misaligned) now that the plan keeps them. */
    if (v >= 0 && v < b->c->n_vals && b->c->vals[v].misaligned && !tm__val_host(b->c, v))
        b->no_memory = 1;
    const tm_vinfo *vi = tm_vi(b->c, v);
    plan_value *pv = &p->values[p->n_values];
    memset(pv, 0, sizeof *pv);
    pv->dtype = vi->dtype;
    pv->rank = vi->rank;
    memcpy(pv->dims, vi->dims, sizeof pv->dims);
    pv->nbytes = (size_t)tm_numel(vi->rank, vi->dims) * tm_dtype_elem_size(vi->dtype);
    pv->alias_of = -1;
    if (vi->data && is_dyn(b, v)) {
        /* A constant that depends on the sizes: computed by its logged fold, or fitted. */
        pv->kind = vi->folded_by >= 0 ? PV_ARENA : PV_FIT;
        pv->constant = vi->data;
    } else if (vi->data) {
        pv->kind = PV_CONST;
        if (b->c->vals[v].owned) {
            pv->constant = vi->data;
            pv->const_owned = 1;
            b->c->vals[v].owned = 0;   /* the plan owns it now */
        } else {
            pv->constant = vi->data;   /* an initializer of the model: lives as long */
        }
    } else if (vi->input_index >= 0) {
        pv->kind = PV_INPUT;
        pv->input = vi->input_index;
    } else if (vi->param >= 0) {
        pv->kind = PV_PARAM;   /* read from the model's parameter store at run time */
        pv->input = vi->param;
    } else {
        pv->kind = PV_ARENA;
    }
    b->pv_of[v] = p->n_values;
    return p->n_values++;
}

static void mark_needed(builder *b, tm_val v) {
    /* Iterative: walk producers backwards via an explicit stack. */
    tm_ctx *c = b->c;
    int32_t cap = 64, n = 0;
    tm_val *stack = malloc((size_t)cap * sizeof *stack);
    if (!stack) return;
    stack[n++] = v;
    while (n) {
        tm_val x = stack[--n];
        int32_t pnode = c->vals[x].producer;
        const tm_rnode *rn;
        if (c->vals[x].data && is_dyn(b, x)) {
            int32_t f = c->vals[x].folded_by;
            if (f < 0 || b->needed_fold[f]) continue;
            b->needed_fold[f] = 1;
            rn = &c->folds[f];
        } else {
            if (c->vals[x].data || pnode < 0 || b->needed_node[pnode]) continue;
            b->needed_node[pnode] = 1;
            rn = &c->nodes[pnode];
        }
        for (int i = 0; i < rn->nin; i++) {
            if (n == cap) {
                cap *= 2;
                tm_val *s = realloc(stack, (size_t)cap * sizeof *s);
                if (!s) break;
                stack = s;
            }
            stack[n++] = rn->in[i];
        }
    }
    free(stack);
}

typedef struct block {
    size_t off, size;
    int end;              /* last kernel using it */
} block;

/* Places arena values by lifetime: a value is live from its producing kernel to its
 * last reader; first fit among the gaps of the blocks live at that point. The outputs of
 * TM_PF_KEPT kernels come first, at the arena's start, live for the whole run: nothing
 * else ever writes there, so they hold what the last run left (kept_bytes, zeroed when a
 * session is made). Sizes come from nbytes[] (the plan's, or a generic plan's current
 * ones); *ok is cleared when memory runs out. */
size_t tm__plan_place_work_bytes(const tm_plan *p) {
    return ((size_t)p->n_values + 1) * sizeof(block);
}

size_t tm__plan_place(const tm_plan *p, const size_t *nbytes, const int *last_use, size_t *off,
                      size_t *kept_bytes, void *work, int *ok) {
    block *live = work ? work : calloc((size_t)p->n_values + 1, sizeof *live);
    *ok = live != NULL;
    if (!live) return 0;
    int n_live = 0;
    size_t top = 0;
    for (int k = 0; k < p->n_kernels; k++) {
        if (!(tm_prims[p->kernels[k].prim].flags & TM_PF_KEPT)) continue;
        for (int o = 0; o < p->kernels[k].nout; o++) {
            int pv = p->kernels[k].out[o];
            if (p->values[pv].kind != PV_KEPT) continue;
            off[pv] = top;
            live[n_live++] = (block){top, align64(nbytes[pv] ? nbytes[pv] : 1), p->n_kernels};
            top += live[n_live - 1].size;
        }
    }
    *kept_bytes = top;
    for (int k = 0; k < p->n_kernels; k++) {
        /* Retire blocks whose last use is before k. */
        int w = 0;
        for (int i = 0; i < n_live; i++)
            if (live[i].end >= k) live[w++] = live[i];
        n_live = w;
        for (int o = 0; o < p->kernels[k].nout; o++) {
            int pv = p->kernels[k].out[o];
            if (p->values[pv].kind != PV_ARENA) continue;
            size_t size = align64(nbytes[pv] ? nbytes[pv] : 1);
            /* Sort live blocks by offset (small n: insertion sort). */
            for (int i = 1; i < n_live; i++)
                for (int j = i; j > 0 && live[j - 1].off > live[j].off; j--) {
                    block t = live[j];
                    live[j] = live[j - 1];
                    live[j - 1] = t;
                }
            size_t at = 0;
            for (int i = 0; i < n_live; i++) {
                if (live[i].off >= at + size) break;
                if (live[i].off + live[i].size > at) at = live[i].off + live[i].size;
            }
            off[pv] = at;
            live[n_live].off = at;
            live[n_live].size = size;
            live[n_live].end = last_use[pv];
            n_live++;
            if (at + size > top) top = at + size;
        }
    }
    if (!work) free(live);
    return top;
}

static tm_status place_arena(builder *b) {
    tm_plan *p = b->p;
    for (int k = 0; k < p->n_kernels; k++) {
        if (!(tm_prims[p->kernels[k].prim].flags & TM_PF_KEPT)) continue;
        for (int o = 0; o < p->kernels[k].nout; o++)
            if (p->values[p->kernels[k].out[o]].kind == PV_ARENA)
                p->values[p->kernels[k].out[o]].kind = PV_KEPT;
    }
    size_t *nbytes = malloc(((size_t)p->n_values + 1) * sizeof *nbytes);
    size_t *off = calloc((size_t)p->n_values + 1, sizeof *off);
    int ok = nbytes && off;
    for (int i = 0; ok && i < p->n_values; i++) nbytes[i] = p->values[i].nbytes;
    if (ok) p->arena_bytes = tm__plan_place(p, nbytes, b->last_use, off, &p->kept_bytes, NULL, &ok);
    for (int i = 0; ok && i < p->n_values; i++)
        if (p->values[i].kind == PV_ARENA || p->values[i].kind == PV_KEPT) p->values[i].offset = off[i];
    free(nbytes);
    free(off);
    return ok ? TM_OK : TM_ERR_NO_MEMORY;
}

static int root_of(const tm_plan *p, int pv) {
    while (p->values[pv].kind == PV_ALIAS) pv = p->values[pv].alias_of;
    return pv;
}

int tm__plan_root_of(const tm_plan *p, int pv) { return root_of(p, pv); }

static const char *output_name(const tm_plan *p, int i) {
    return p->output_names ? p->output_names[i] : p->model->onnx->graph->outputs[i].name;
}

/* Name of plan input i: a graph input, or one a gradient plan adds. */
static const char *input_name(const tm_plan *p, int i) {
    const tm_graph *g = p->model->onnx->graph;
    return i < g->n_inputs ? g->inputs[i].name : p->extra_names[i - g->n_inputs];
}

static tm_status build_plan_dyn(tm_plan *p, tm_ctx *c, const tm_oval *outs,
                                const tm_live *live, const uint8_t *dyn, tm_error *err);

static tm_status build_plan(tm_plan *p, tm_ctx *c, const tm_oval *outs, const tm_live *live,
                            tm_error *err) {
    return build_plan_dyn(p, c, outs, live, NULL, err);
}

/* Appends recorded node (or logged fold) rn to p's kernels. */
static tm_status add_kernel(builder *b, const tm_rnode *rn, tm_error *err) {
    tm_plan *p = b->p;
    tm_ctx *c = b->c;
    plan_kernel *k = &p->kernels[p->n_kernels];
    k->prim = rn->prim;
    k->args = rn->args;
    k->nin = rn->nin;
    k->nout = rn->nout;
    k->scratch = rn->scratch;
    k->where = strdup(rn->where ? rn->where : "");
    k->in = malloc((size_t)(rn->nin ? rn->nin : 1) * sizeof *k->in);
    if (!k->in || !k->where) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory building a plan");
    p->n_kernels++;
    for (int j = 0; j < rn->nin; j++) k->in[j] = add_value(b, rn->in[j]);
    for (int j = 0; j < rn->nout; j++) k->out[j] = add_value(b, rn->out[j]);
    if (rn->scratch > p->scratch_bytes) p->scratch_bytes = rn->scratch;
    if (tm_vdtype(c, rn->out[0]) == TM_STRING)
        return tm__fail(err, TM_ERR_UNSUPPORTED, "string values are computed eagerly");
    return TM_OK;
}

static tm_status build_plan_dyn(tm_plan *p, tm_ctx *c, const tm_oval *outs,
                                const tm_live *live, const uint8_t *dyn, tm_error *err) {
    builder b = {c, p, NULL, NULL, NULL, NULL, dyn, NULL, 0};
    b.pv_of = malloc(((size_t)c->n_vals + 1) * sizeof *b.pv_of);
    b.needed_node = calloc((size_t)c->n_nodes + 1, 1);
    b.needed_fold = calloc((size_t)c->n_folds + 1, 1);
    p->values = calloc((size_t)c->n_vals + 1, sizeof *p->values);
    tm_status st = TM_OK;
    if (!b.pv_of || !b.needed_node || !b.needed_fold || !p->values) {
        st = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory building a plan");
        goto done;
    }
    for (int32_t i = 0; i < c->n_vals; i++) b.pv_of[i] = -1;
    /* Roots: graph outputs, or the values alive at the graph break. */
    if (outs) {
        for (int i = 0; i < p->n_outputs; i++) {
            if (outs[i].kind != TM_OV_TENSOR) {
                /* Sequences and empty optionals cross the API only eagerly. */
                st = tm__fail(err, TM_ERR_UNSUPPORTED, "graph output '%s' is not a tensor: "
                              "computed eagerly", output_name(p, i));
                goto done;
            }
            mark_needed(&b, outs[i].v);
        }
    } else {
        for (int i = 0; i < live->n; i++) {
            if (live->vals[i].kind == TM_OV_TENSOR) mark_needed(&b, live->vals[i].v);
            for (int k = 0; live->vals[i].kind == TM_OV_SEQ && k < live->vals[i].n; k++)
                mark_needed(&b, live->vals[i].seq[k]);
        }
    }
    int n_needed = 0;
    for (int32_t i = 0; i < c->n_nodes; i++) n_needed += b.needed_node[i];
    for (int32_t i = 0; i < c->n_folds; i++) n_needed += b.needed_fold[i];
    p->kernels = calloc((size_t)n_needed + 1, sizeof *p->kernels);
    if (!p->kernels) {
        st = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory building a plan");
        goto done;
    }
    /* Logged folds first: they read constants and each other only. */
    for (int32_t i = 0; i < c->n_folds && st == TM_OK; i++)
        if (b.needed_fold[i]) st = add_kernel(&b, &c->folds[i], err);
    for (int32_t i = 0; i < c->n_nodes && st == TM_OK; i++)
        if (b.needed_node[i]) st = add_kernel(&b, &c->nodes[i], err);
    if (st != TM_OK) goto done;
    if (outs)
        for (int i = 0; i < p->n_outputs; i++) p->output_pv[i] = add_value(&b, outs[i].v);
    else {
        p->live = calloc((size_t)live->n + 1, sizeof *p->live);
        if (!p->live) {
            st = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory building a plan");
            goto done;
        }
        for (int i = 0; i < live->n; i++) {
            plan_live *pl = &p->live[i];
            pl->name = strdup(live->names[i]);
            pl->kind = live->vals[i].kind;
            pl->seq_dtype = live->vals[i].seq_dtype;
            pl->optional = live->vals[i].optional;
            p->n_live++;
            if (!pl->name) {
                st = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
                goto done;
            }
            if (pl->kind == TM_OV_TENSOR) pl->pv = add_value(&b, live->vals[i].v);
            if (pl->kind == TM_OV_SEQ) {
                pl->seq = calloc((size_t)live->vals[i].n + 1, sizeof *pl->seq);
                if (!pl->seq) {
                    st = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
                    goto done;
                }
                pl->n = live->vals[i].n;
                for (int k = 0; k < pl->n; k++) pl->seq[k] = add_value(&b, live->vals[i].seq[k]);
            }
        }
    }
    if (b.no_memory) {
        st = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory copying a misaligned constant");
        goto done;
    }
    /* Views: a reshape of an arena value shares its buffer. */
    for (int k = 0; k < p->n_kernels; k++) {
        plan_kernel *pk = &p->kernels[k];
        if (!(tm_prims[pk->prim].flags & TM_PF_VIEW)) continue;
        plan_value *out = &p->values[pk->out[0]];
        if (out->kind != PV_ARENA) continue;
        out->kind = PV_ALIAS;
        out->alias_of = pk->in[0];
    }
    /* Lifetimes (of alias roots). */
    b.last_use = malloc(((size_t)p->n_values + 1) * sizeof *b.last_use);
    if (!b.last_use) {
        st = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory building a plan");
        goto done;
    }
    for (int i = 0; i < p->n_values; i++) b.last_use[i] = -1;
    for (int k = 0; k < p->n_kernels; k++) {
        for (int j = 0; j < p->kernels[k].nin; j++) {
            int r = root_of(p, p->kernels[k].in[j]);
            if (b.last_use[r] < k) b.last_use[r] = k;
        }
        for (int j = 0; j < p->kernels[k].nout; j++) {
            int r = root_of(p, p->kernels[k].out[j]);
            if (b.last_use[r] < k) b.last_use[r] = k;
        }
    }
    for (int i = 0; outs && i < p->n_outputs; i++) b.last_use[root_of(p, p->output_pv[i])] = p->n_kernels;
    for (int i = 0; i < p->n_live; i++) {
        if (p->live[i].kind == TM_OV_TENSOR) b.last_use[root_of(p, p->live[i].pv)] = p->n_kernels;
        for (int k = 0; p->live[i].kind == TM_OV_SEQ && k < p->live[i].n; k++)
            b.last_use[root_of(p, p->live[i].seq[k])] = p->n_kernels;
    }
    if (place_arena(&b) != TM_OK) st = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
done:
    free(b.pv_of);
    free(b.needed_node);
    free(b.needed_fold);
    if (st == TM_OK && dyn) p->last_use = b.last_use;   /* placed anew for each size */
    else free(b.last_use);
    return st;
}

void tm_plan_free(tm_plan *p) {
    if (!p) return;
    for (int i = 0; i < p->n_tails; i++) {
        tm_plan_free(p->tails[i].plan);
        free(p->tails[i].key);
    }
    free(p->tails);
    pthread_mutex_destroy(&p->tails_lock);
    for (int i = 0; i < p->n_values; i++)
        if (p->values[i].const_owned) tm_tensor_free(p->values[i].constant);
    for (int k = 0; k < p->n_kernels; k++) {
        free(p->kernels[k].in);
        free(p->kernels[k].where);
    }
    for (int i = 0; i < p->n_live; i++) {
        free(p->live[i].name);
        free(p->live[i].seq);
    }
    free(p->live);
    free(p->values);
    free(p->kernels);
    free(p->input_pv);
    free(p->input_dtype);
    free(p->input_rank);
    free(p->input_dims);
    free(p->input_static);
    free(p->output_pv);
    for (int i = 0; i < p->n_extra_inputs; i++) free(p->extra_names[i]);
    free(p->extra_names);
    for (int i = 0; p->output_names && i < p->n_outputs; i++) free(p->output_names[i]);
    free(p->output_names);
    free(p->grad_param);
    free(p->last_use);
    free(p->kv_input);
    tm__gen_free(p->gen);
    free(p);
}

static const tm_tensor *find_static(const tm_plan_options *o, const char *name) {
    for (int i = 0; o && i < o->n_static; i++)
        if (o->static_names[i] && !strcmp(o->static_names[i], name)) return o->static_values[i];
    return NULL;
}

/* Turns a finished trace into the plan: all of it, or its prefix up to a graph break
 * (remembering which live value the break needs, so that a run can trace the rest again
 * with that value known). */
/* Runs the plan-time passes with the plan's roots: graph outputs, or live values. */
static tm_status optimize(tm_ctx *c, int n_outputs, const tm_oval *outs, const tm_live *live,
                          tm_error *err) {
    int n = 0, cap = 16;
    tm_val *roots = malloc((size_t)cap * sizeof *roots);
    if (!roots) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    const tm_oval *ovs = outs ? outs : live->vals;
    int n_ovs = outs ? n_outputs : live->n;
    for (int i = 0; i < n_ovs; i++) {
        int k = ovs[i].kind == TM_OV_TENSOR ? 1 : ovs[i].kind == TM_OV_SEQ ? ovs[i].n : 0;
        for (int j = 0; j < k; j++) {
            if (n == cap) {
                cap *= 2;
                tm_val *r = realloc(roots, (size_t)cap * sizeof *r);
                if (!r) {
                    free(roots);
                    return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
                }
                roots = r;
            }
            roots[n++] = ovs[i].kind == TM_OV_TENSOR ? ovs[i].v : ovs[i].seq[j];
        }
    }
    tm_pass_roots pr = {roots, n};
    tm_status st = tm__run_passes(c, &pr);
    free(roots);
    if (st != TM_OK && !c->err.message[0]) return tm__fail(err, st, "a plan-time pass failed");
    if (st != TM_OK) tm__error_copy(err, &c->err);
    return st;
}

/* The inputs passes/kv_append.c took in the (P, B, H, D) layout (and in float16): the
 * plan checks and describes them so. */
static tm_status apply_kv_layout(tm_plan *p, const tm_ctx *c, tm_error *err) {
    for (int i = 0; i < c->n_kv_bshd && i < p->n_graph_inputs; i++) {
        if (!c->kv_bshd[i]) continue;
        if (!p->kv_input && !(p->kv_input = calloc((size_t)p->n_graph_inputs + 1, 1)))
            return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        p->kv_input[i] = 1;
        if (c->kv_bshd[i] == 2) p->input_dtype[i] = TM_FLOAT16;
        int64_t b = p->input_dims[i][0], h = p->input_dims[i][1];
        p->input_dims[i][0] = p->input_dims[i][2];
        p->input_dims[i][1] = b;
        p->input_dims[i][2] = h;
    }
    return TM_OK;
}

int tm_plan_kv_input(const tm_plan *p, int i) {
    return p && p->kv_input && i >= 0 && i < p->n_graph_inputs && p->kv_input[i];
}

static tm_status finish_trace(tm_plan *p, tm_ctx *c, const tm_interp *ip, tm_status st,
                              const tm_oval *outs, const tm_live *live, int eager_tail,
                              tm_error *err) {
    if (st == TM_OK || st == TM_ERR_NEEDS_HOST) {
        tm_status ps = optimize(c, p->n_outputs, st == TM_OK ? outs : NULL, live, err);
        if (ps == TM_OK) ps = apply_kv_layout(p, c, err);
        if (ps != TM_OK) return ps;
    }
    if (st == TM_ERR_NEEDS_HOST) {
        p->break_at = ip->break_at;
        st = build_plan(p, c, NULL, live, err);
        for (int i = 0; st == TM_OK && !eager_tail && i < p->n_live; i++)
            if (live->vals[i].kind == TM_OV_TENSOR && live->vals[i].v == c->needs_host)
                p->break_key = i;
        for (int i = 0; i < p->n_live; i++)
            if (p->live[i].kind != TM_OV_TENSOR) p->break_key = -1;
        return st;
    }
    if (st == TM_OK) return build_plan(p, c, outs, NULL, err);
    tm__error_copy(err, &c->err);
    return st;
}

/* A gradient plan: the loss and the backward on top of the traced forward (see
 * tm__grad_build); its outputs replace the graph's. The target is plan input n_inputs. */
static tm_status finish_grad(tm_plan *p, tm_ctx *c, const tm_interp *ip, tm_status st,
                             tm_oval *outs, const tm_grad_spec *grad, tm_val target,
                             tm_gen_trace *gt, tm_error *err) {
    tm_model *m = p->model;
    const tm_graph *g = m->onnx->graph;
    if (st == TM_ERR_NEEDS_HOST) {
        const tm_node *n = &g->nodes[ip->break_at];
        return tm__fail_at(err, TM_ERR_UNSUPPORTED, n->name, n->op_type, NULL, "node '%s' "
                           "(%s) needs a value on the host that the plan cannot know: a "
                           "gradient plan holds the whole graph (give the input it depends "
                           "on as a static input)", n->name, n->op_type);
    }
    if (st != TM_OK) {
        tm__error_copy(err, &c->err);
        return st;
    }
    int n_fwd = grad->opts.with_outputs ? g->n_outputs : 0;
    int n_out = 1 + grad->n_chosen + n_fwd;
    tm_oval *res = calloc((size_t)n_out + 1, sizeof *res);
    tm_val *vals = calloc((size_t)n_out + 1, sizeof *vals);
    p->output_names = calloc((size_t)n_out + 1, sizeof *p->output_names);
    p->grad_param = calloc((size_t)grad->n_chosen + 1, sizeof *p->grad_param);
    int *pv = realloc(p->output_pv, ((size_t)n_out + 1) * sizeof *pv);
    if (pv) p->output_pv = pv;
    if (!res || !vals || !p->output_names || !p->grad_param || !pv) {
        free(res);
        free(vals);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    }
    p->n_outputs = n_out;
    st = tm__grad_build(c, m, grad, outs, target, 1, vals);
    if (st == TM_OK) tm__restore_output_dtypes(m, c, outs);
    if (st == TM_OK && !tm_ctx_ok(c)) st = c->status;
    for (int i = 0; st == TM_OK && i < n_out; i++) {
        res[i].kind = TM_OV_TENSOR;
        res[i].v = i < 1 + grad->n_chosen ? vals[i] : outs[i - 1 - grad->n_chosen].v;
        if (i >= 1 + grad->n_chosen && outs[i - 1 - grad->n_chosen].kind != TM_OV_TENSOR)
            res[i].kind = TM_OV_NONE;
        const char *name = i == 0 ? "loss"
                         : i <= grad->n_chosen ? m->params[grad->param_of_grad[i - 1]].name
                                               : g->outputs[i - 1 - grad->n_chosen].name;
        p->output_names[i] = strdup(name);
        if (!p->output_names[i]) st = tm_ctx_fail(c, TM_ERR_NO_MEMORY, "out of memory");
    }
    p->n_grads = grad->n_chosen;
    if (grad->n_chosen) memcpy(p->grad_param, grad->param_of_grad, (size_t)grad->n_chosen * sizeof(int));
    if (st != TM_OK) tm__error_copy(err, &c->err);
    else if (gt) {
        /* Kept for generic.c, which builds it. */
        for (int i = 0; st == TM_OK && i < n_out; i++)
            if (res[i].kind != TM_OV_TENSOR)
                st = tm__fail(err, TM_ERR_UNSUPPORTED, "output '%s' is not a tensor",
                              p->output_names[i]);
        if (st == TM_OK) st = optimize(c, n_out, res, NULL, err);
        if (st == TM_OK) {
            gt->c = *c;
            memset(c, 0, sizeof *c);
            gt->outs = res;
            res = NULL;
        }
    } else st = finish_trace(p, c, ip, TM_OK, res, NULL, 0, err);
    free(res);
    free(vals);
    return st;
}

static tm_status create(tm_model *m, int n, const char *const *names, const tm_xval *inputs,
                        const tm_plan_options *opts, const tm_grad_spec *grad,
                        const tm_tensor *target_t, tm_plan **out, tm_error *err,
                        int force_break0, tm_gen_trace *gt) {
    if (m->missing)
        return tm__fail(err, TM_ERR_UNSUPPORTED, "the model uses operators Transmuter does not "
                        "support: %s", m->missing);
    const tm_graph *g = m->onnx->graph;
    tm_plan *p = calloc(1, sizeof *p);
    if (!p) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    p->model = m;
    p->break_at = -1;
    p->break_key = -1;
    pthread_mutex_init(&p->tails_lock, NULL);
    /* A gradient plan's target is one more input, after the graph's. */
    int n_in = g->n_inputs + (target_t != NULL);
    p->n_graph_inputs = n_in;
    p->n_outputs = g->n_outputs;
    p->input_pv = calloc((size_t)n_in + 1, sizeof *p->input_pv);
    p->input_dtype = calloc((size_t)n_in + 1, sizeof *p->input_dtype);
    p->input_rank = calloc((size_t)n_in + 1, sizeof *p->input_rank);
    p->input_dims = calloc((size_t)n_in + 1, sizeof *p->input_dims);
    p->input_static = calloc((size_t)n_in + 1, 1);
    p->output_pv = calloc((size_t)g->n_outputs + 1, sizeof *p->output_pv);
    tm_oval *ovals = calloc((size_t)g->n_inputs + 1, sizeof *ovals);
    tm_oval *outs = calloc((size_t)g->n_outputs + 1, sizeof *outs);
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_TRACE, m->opts.allocator);
    c.compute_type = m->opts.compute_type;
    c.params = tm__params_table(m);
    c.fold_cache = m->fold_cache;
    c.dequantize_nbits = m->opts.dequantize_nbits;
    c.nbits_int8 = m->opts.nbits_int8;
    c.pack_cache = m->packed;   /* weights packed by the passes, shared by the model's plans */
    c.fold_log = gt != NULL;
    c.kv_in_place = opts && opts->size >= offsetof(tm_plan_options, kv_in_place) + sizeof(int) &&
                    opts->kv_in_place && !grad;
    c.kv_dtype = opts && opts->size >= offsetof(tm_plan_options, kv_dtype) + sizeof(tm_dtype)
                     ? opts->kv_dtype : TM_UNDEFINED;
    tm_live live = {0};
    tm_val target = TM_NONE;
    tm_status st = TM_OK;
    if (!p->input_pv || !p->input_dtype || !p->input_rank || !p->input_dims ||
        !p->input_static || !p->output_pv || !ovals || !outs) {
        st = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    if (target_t) {
        const tm_tensor *t = target_t;
        p->extra_names = calloc(2, sizeof *p->extra_names);
        if (!p->extra_names || !(p->extra_names[0] = strdup(grad->opts.target))) {
            st = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
            goto done;
        }
        p->n_extra_inputs = 1;
        p->input_pv[g->n_inputs] = -1;
        p->input_dtype[g->n_inputs] = t->dtype;
        p->input_rank[g->n_inputs] = t->rank;
        memcpy(p->input_dims[g->n_inputs], t->dims, sizeof p->input_dims[0]);
        target = tm_to_compute_type(&c, tm_val_symbolic(&c, t->dtype, t->rank, t->dims,
                                                        g->n_inputs));
    }
    if (grad) {
        c.tape = 1;
        c.track_params = grad->chosen;
    }
    /* Bind through the eager checks, then turn non-static inputs into symbols. */
    st = tm__bind_inputs(m, &c, n, names, inputs, ovals, err);
    if (st != TM_OK) goto done;
    int has_seq = 0;
    for (int i = 0; i < g->n_inputs; i++) {
        p->input_pv[i] = -1;
        if (ovals[i].kind == TM_OV_SEQ) has_seq = 1;
        if (ovals[i].kind != TM_OV_TENSOR) continue;
        const tm_tensor *t = tm_vdata(&c, ovals[i].v);
        p->input_dtype[i] = t->dtype;
        p->input_rank[i] = t->rank;
        memcpy(p->input_dims[i], t->dims, sizeof p->input_dims[i]);
        const tm_tensor *sv = find_static(opts, g->inputs[i].name);
        if (sv || t->dtype == TM_STRING) {
            /* A static input (or a string, which plans keep as a constant): the plan
             * keeps its own copy of the value. */
            tm_tensor *copy = tm_tensor_clone(sv ? sv : t, NULL);
            ovals[i].v = tm_val_tensor(&c, copy, 0);
            p->input_static[i] = 1;
        } else {
            ovals[i].v = tm_to_compute_type(&c, tm_val_symbolic(&c, t->dtype, t->rank, t->dims, i));
        }
    }
    if (!tm_ctx_ok(&c)) {
        st = c.status;
        tm__error_copy(err, &c.err);
        goto done;
    }
    tm_interp ip;
    memset(&ip, 0, sizeof ip);
    ip.ctx = &c;
    ip.model = m->onnx;
    if (grad && (has_seq || force_break0)) {
        st = tm__fail(err, TM_ERR_UNSUPPORTED, "a gradient plan cannot take sequence or "
                      "string values");
        goto done;
    }
    if (grad) {
        st = tm_interp_run(&ip, ovals, outs, &live);
        if (st == TM_OK && !tm_ctx_ok(&c)) st = c.status;
        st = finish_grad(p, &c, &ip, st, outs, grad, target, gt, err);
    } else if (has_seq || force_break0) {
        /* Sequences cross the API only eagerly: break at the first node. */
        ip.break_at = 0;
        st = TM_ERR_NEEDS_HOST;
        live.names = calloc((size_t)g->n_inputs + 1, sizeof *live.names);
        live.vals = calloc((size_t)g->n_inputs + 1, sizeof *live.vals);
        for (int i = 0; live.names && live.vals && i < g->n_inputs; i++) {
            if (ovals[i].kind == TM_OV_NONE && !ovals[i].optional) continue;
            live.names[live.n] = strdup(g->inputs[i].name);
            live.vals[live.n] = ovals[i];
            if (ovals[i].kind == TM_OV_SEQ) {
                live.vals[live.n].seq = malloc(sizeof(tm_val) * (size_t)(ovals[i].n + 1));
                if (live.vals[live.n].seq)
                    memcpy(live.vals[live.n].seq, ovals[i].seq, sizeof(tm_val) * (size_t)ovals[i].n);
            }
            live.n++;
        }
    } else {
        st = tm_interp_run(&ip, ovals, outs, &live);
        if (st == TM_OK) tm__restore_output_dtypes(m, &c, outs);
        if (st == TM_OK && !tm_ctx_ok(&c)) st = c.status;
        if (st == TM_OK && (st = tm__last_rows(&c, p, opts, outs, err)) == TM_OK && !tm_ctx_ok(&c))
            st = c.status;
    }
    if (gt && !grad) {
        /* Kept for generic.c, which builds it. */
        if (st == TM_ERR_NEEDS_HOST || has_seq || force_break0)
            st = tm__fail(err, TM_ERR_UNSUPPORTED, "the graph breaks (a value it needs on the "
                          "host is not known while compiling)");
        else if (st != TM_OK) tm__error_copy(err, &c.err);
        if (st == TM_OK) st = optimize(&c, p->n_outputs, outs, NULL, err);
        if (st == TM_OK) st = apply_kv_layout(p, &c, err);
        for (int i = 0; st == TM_OK && i < p->n_outputs; i++)
            if (outs[i].kind != TM_OV_TENSOR)
                st = tm__fail(err, TM_ERR_UNSUPPORTED, "graph output '%s' is not a tensor",
                              output_name(p, i));
        if (st == TM_OK) {
            gt->c = c;
            gt->outs = outs;
            memset(&c, 0, sizeof c);
            outs = NULL;
        }
    } else if (!grad) st = finish_trace(p, &c, &ip, st, outs, &live, has_seq || force_break0, err);
    if (st == TM_OK) {
        *out = p;
        p = NULL;
    }
done:
    tm_plan_free(p);
    for (int i = 0; ovals && i < g->n_inputs; i++) free(ovals[i].seq);
    for (int i = 0; outs && i < g->n_outputs; i++) free(outs[i].seq);
    free(ovals);
    free(outs);
    tm_live_free(&live);
    tm_ctx_destroy(&c);
    return st;
}

tm_status tm__plan_create_x(tm_model *m, int n, const char *const *names,
                            const tm_xval *inputs, const tm_plan_options *opts, tm_plan **out,
                            tm_error *err) {
    tm_error e;
    memset(&e, 0, sizeof e);
    tm_status st = create(m, n, names, inputs, opts, NULL, NULL, out, &e, 0, NULL);
    /* Values a plan cannot hold (strings) make the whole graph run eagerly. */
    if (st == TM_ERR_UNSUPPORTED && strstr(e.message, "computed eagerly")) {
        memset(&e, 0, sizeof e);
        st = create(m, n, names, inputs, opts, NULL, NULL, out, &e, 1, NULL);
    }
    if (st != TM_OK) tm__error_copy(err, &e);
    return st;
}

tm_status tm__plan_create_grad(tm_model *m, int n, const char *const *names,
                               const tm_xval *inputs, const tm_tensor *target,
                               const tm_plan_options *opts, const tm_grad_spec *grad,
                               tm_plan **out, tm_error *err) {
    return create(m, n, names, inputs, opts, grad, target, out, err, 0, NULL);
}

tm_status tm__plan_trace(tm_model *m, int n, const char *const *names, const tm_xval *inputs,
                         const tm_plan_options *opts, const tm_grad_spec *grad, tm_plan **p,
                         tm_gen_trace *gt, tm_error *err) {
    memset(gt, 0, sizeof *gt);
    if (!grad) return create(m, n, names, inputs, opts, NULL, NULL, p, err, 0, gt);
    /* A gradient plan: the loss's target is the input of that name, after the graph's. */
    const char **gnames = calloc((size_t)n + 1, sizeof *gnames);
    tm_xval *gin = calloc((size_t)n + 1, sizeof *gin);
    const tm_tensor *target = NULL;
    int n_g = 0;
    tm_status st = gnames && gin ? TM_OK : tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (int k = 0; st == TM_OK && k < n; k++) {
        if (grad->opts.loss != TM_LOSS_OUTPUT && grad->opts.target &&
            !strcmp(names[k], grad->opts.target)) {
            target = inputs[k].t;
            continue;
        }
        gnames[n_g] = names[k];
        gin[n_g++] = inputs[k];
    }
    if (st == TM_OK) st = create(m, n_g, gnames, gin, opts, grad, target, p, err, 0, gt);
    free(gnames);
    free(gin);
    return st;
}

const char *tm__plan_input_name(const tm_plan *p, int i) { return input_name(p, i); }
const char *tm__plan_output_name(const tm_plan *p, int i) { return output_name(p, i); }

void tm__gen_trace_free(tm_gen_trace *gt) {
    if (!gt) return;
    free(gt->outs);
    tm_ctx_destroy(&gt->c);
    memset(gt, 0, sizeof *gt);
}

tm_status tm__plan_build(tm_plan *p, tm_gen_trace *gt, const uint8_t *dyn, tm_error *err) {
    return build_plan_dyn(p, &gt->c, gt->outs, NULL, dyn, err);
}

int tm_plan_n_outputs(const tm_plan *p) { return p ? p->n_outputs : 0; }
int tm_plan_n_grads(const tm_plan *p) { return p ? p->n_grads : 0; }
int tm_plan_grad_param(const tm_plan *p, int j) {
    return p && j >= 0 && j < p->n_grads ? p->grad_param[j] : -1;
}

static int opt_has(const tm_plan_options *o, size_t end) { return o && o->size >= end; }
#define OPT(o, field) (opt_has((o), offsetof(tm_plan_options, field) + sizeof((o)->field)) ? (o)->field : 0)

/* tm_plan_options.dynamic: the line of sizes through the given inputs (which dims grow),
 * then three traces along it. Returns TM_ERR_UNSUPPORTED (why in err) when the graph does
 * not follow; the caller then makes a plan for the shape. */
tm_status tm__create_dynamic(tm_model *m, int n, const char *const *names,
                             const tm_tensor *const *inputs, const tm_plan_options *opts,
                             const tm_grad_spec *grad, tm_plan **out, tm_error *err) {
    const tm_graph *g = m->onnx->graph;
    int64_t (*step)[TM_MAX_RANK] = calloc((size_t)n + 1, sizeof *step);
    if (!step) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    int any = 0;
    for (int pass = 0; pass < 2 && !any; pass++)
        for (int k = 0; k < n; k++) {
            if (!inputs[k] || find_static(opts, names[k])) continue;
            int gi = -1;
            for (int i = 0; i < g->n_inputs; i++)
                if (!strcmp(g->inputs[i].name, names[k])) gi = i;
            if (gi < 0) continue;   /* a loss's target: below */
            for (int d = 0; d < inputs[k]->rank; d++) {
                int grow;
                tm_value_desc vi;
                tm_model_input(m, gi, &vi);
                const char *dp = d < vi.rank && vi.dim_params ? vi.dim_params[d] : NULL;
                if (OPT(opts, n_vary) > 0) {
                    /* A dim given, or one the model names as it names a dim given. */
                    grow = 0;
                    for (int v = 0; v < opts->n_vary && !grow; v++) {
                        int gv = opts->vary_names[v] ? tm_model_input_index(m, opts->vary_names[v]) : -1;
                        if (gv < 0) continue;
                        if (!strcmp(opts->vary_names[v], names[k]) && opts->vary_axes[v] == d) grow = 1;
                        tm_value_desc vv;
                        tm_model_input(m, gv, &vv);
                        int ax = opts->vary_axes[v];
                        const char *named = ax >= 0 && ax < vv.rank && vv.dim_params ? vv.dim_params[ax] : NULL;
                        if (named && named[0] && dp && !strcmp(named, dp)) grow = 1;
                    }
                } else {
                    int batch = dp && strstr(dp, "batch");
                    grow = dp && dp[0] && inputs[k]->dims[d] >= 2 && (pass == 1 || !batch);
                }
                if (grow) {
                    step[k][d] = 1;
                    any = 1;
                }
            }
        }
    /* A loss's target (labels (B) or (B, ...)) follows the batch: its axis 0 grows when the
     * graph inputs' batch dims (axis 0 of the first that has one) do. */
    for (int k = 0; grad && k < n; k++) {
        if (!inputs[k] || !grad->opts.target || strcmp(names[k], grad->opts.target)) continue;
        for (int j = 0; j < n; j++)
            if (j != k && inputs[j] && inputs[j]->rank > 0 && step[j][0] && inputs[k]->rank > 0 &&
                inputs[k]->dims[0] == inputs[j]->dims[0])
                step[k][0] = 1;
    }
    tm_status st = TM_OK;
    int pk = -1, pax = -1;
    for (int k = 0; k < n && pk < 0; k++)
        for (int d = 0; inputs[k] && d < inputs[k]->rank && pk < 0; d++)
            if (step[k][d]) {
                pk = k;
                pax = d;
            }
    if (pk < 0) st = tm__fail(err, TM_ERR_UNSUPPORTED, "no dim of the inputs varies (the "
                              "model names none of 2 or more, and none was given)");
    int pin = -1;
    for (int i = 0; pk >= 0 && i < g->n_inputs; i++)
        if (!strcmp(g->inputs[i].name, names[pk])) pin = i;
    tm_xval *x[3] = {0};
    tm_tensor **own = calloc((size_t)3 * n + 1, sizeof *own);
    if (st == TM_OK && !own) st = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (int j = 0; st == TM_OK && j < 3; j++) {
        x[j] = calloc((size_t)n + 1, sizeof *x[j]);
        if (!x[j]) st = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        for (int k = 0; st == TM_OK && k < n; k++) {
            x[j][k].kind = inputs[k] ? TM_X_TENSOR : TM_X_NONE;
            x[j][k].t = (tm_tensor *)inputs[k];
            if (!inputs[k] || j == 0) continue;
            int grows = 0;
            int64_t dims[TM_MAX_RANK];
            for (int d = 0; d < inputs[k]->rank; d++) {
                dims[d] = inputs[k]->dims[d] + j * step[k][d];
                grows |= step[k][d] != 0;
            }
            if (!grows) continue;
            own[j * n + k] = tm_tensor_alloc(inputs[k]->dtype, inputs[k]->rank, dims, NULL);
            if (!own[j * n + k]) st = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
            x[j][k].t = own[j * n + k];
        }
    }
    if (st == TM_OK) st = tm__plan_generalize(m, n, names, x, opts, grad, pin, pax, out, err);
    if (st == TM_OK) tm__gen_set_max(*out, OPT(opts, max_size));
    for (int i = 0; own && i < 3 * n; i++) tm_tensor_free(own[i]);
    free(own);
    for (int j = 0; j < 3; j++) free(x[j]);
    free(step);
    return st;
}

tm_status tm_plan_create(tm_model *m, int n, const char *const *names,
                         const tm_tensor *const *inputs, const tm_plan_options *opts,
                         tm_plan **out, tm_error *err) {
    if (!m || (n && (!names || !inputs)) || !out)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_plan_create: NULL argument");
    if (OPT(opts, dynamic)) {
        tm_error e2;
        memset(&e2, 0, sizeof e2);
        tm_status st = tm__create_dynamic(m, n, names, inputs, opts, NULL, out, &e2);
        if (st == TM_OK) return TM_OK;
        if (st != TM_ERR_UNSUPPORTED) {
            tm__error_copy(err, &e2);
            return st;
        }
        if (getenv("TM_GENERIC_DEBUG"))
            fprintf(stderr, "transmuter: tm_plan_create: a plan for this shape alone: %s\n", e2.message);
    }
    tm_xval *x = calloc((size_t)n + 1, sizeof *x);
    if (!x) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < n; i++) {
        x[i].kind = inputs[i] ? TM_X_TENSOR : TM_X_NONE;
        x[i].t = (tm_tensor *)inputs[i];
    }
    tm_status st = tm__plan_create_x(m, n, names, x, opts, out, err);
    free(x);
    return st;
}

int tm_plan_n_kernels(const tm_plan *p) { return p ? p->n_kernels : 0; }
int tm_plan_n_breaks(const tm_plan *p) { return p && p->break_at >= 0 ? 1 : 0; }
size_t tm_plan_arena_bytes(const tm_plan *p) { return p ? p->arena_bytes : 0; }

size_t tm_plan_weight_bytes(const tm_plan *p) {
    if (!p) return 0;
    uint8_t *seen = calloc((size_t)p->n_values + 1, 1);
    if (!seen) return 0;
    size_t total = 0;
    for (int k = 0; k < p->n_kernels; k++) {
        const plan_kernel *pk = &p->kernels[k];
        int gather = pk->prim == TM_P_GATHER || pk->prim == TM_P_GATHER_BLOCK_QUANTIZED;
        for (int j = 0; j < pk->nin; j++) {
            const plan_value *v = &p->values[pk->in[j]];
            if (v->kind != PV_CONST || seen[pk->in[j]]) continue;
            seen[pk->in[j]] = 1;
            size_t bytes = v->nbytes;
            /* A table is read a row per index: its share is indices / rows along the axis. */
            if (gather && j != 1 && pk->nin > 1 && v->rank > 0) {
                int axis = (int)pk->args.i[0];
                if (axis < 0) axis += v->rank;
                const plan_value *idx = &p->values[pk->in[1]];
                int64_t rows = axis >= 0 && axis < v->rank ? v->dims[axis] : 1;
                int64_t used = tm_numel(idx->rank, idx->dims);
                if (rows > 0 && used < rows) bytes = bytes / (size_t)rows * (size_t)used;
            }
            total += bytes;
        }
    }
    free(seen);
    return total;
}

tm_status tm_plan_output(const tm_plan *p, int i, tm_value_desc *d) {
    if (!p || !d || i < 0 || i >= p->n_outputs) return TM_ERR_INVALID_ARGUMENT;
    memset(d, 0, sizeof *d);
    d->name = output_name(p, i);
    if (p->break_at >= 0) {
        d->rank = -1;
        return TM_OK;
    }
    const plan_value *v = &p->values[p->output_pv[i]];
    d->dtype = v->dtype;
    d->rank = v->rank;
    d->dims = v->dims;
    return TM_OK;
}

/* ---- Sessions ---------------------------------------------------------------------- */

static void print_profile(const tm_session *s);

void tm_session_free(tm_session *s) {
    if (!s) return;
    if (s->profile) print_profile(s);
    free(s->profile);
    const tm_model *m = s->plan->model;
    tm__model_free_mem(m, s->arena);
    tm__model_free_mem(m, s->scratch);
    if (s->kin)
        for (int k = 0; k < s->plan->n_kernels; k++) {
            free(s->kin[k]);
            free(s->kout[k]);
        }
    free(s->kin);
    free(s->kout);
    free(s->tensors);
    for (int i = 0; i < s->n_tails; i++) tm_session_free(s->tails[i].session);
    free(s->tails);
    for (int i = 0; s->eager_out && i < s->plan->n_outputs; i++) tm_xval_clear(&s->eager_out[i]);
    free(s->eager_out);
    for (int i = 0; s->out_group && i < s->plan->n_outputs; i++) free(s->out_group[i]);
    free(s->out_group);
    free(s->out_group_n);
    free(s->written);
    free(s->off);
    tm__gen_session_free(s);
    free(s);
}

static tm_status output_groups(tm_session *s);

/* An arena of this many bytes or more (a gradient plan's activations and gradients, a
 * long sequence's activations) is taken on huge pages (tm__huge_alloc, freed by free(),
 * which is what tm__model_free_mem does without a caller's allocator): a run writes
 * megabytes of it that no cache holds (the activations a backward reads later), and
 * with 4 KiB pages every few lines of those writes walk the page tables.
 * TM_ARENA_HUGE=0 leaves it to small pages, for comparisons. A caller's allocator is
 * always used as it is. */
#define HUGE_ARENA_BYTES ((size_t)16 << 20)

static int huge_arena(const tm_model *m, size_t bytes) {
    if (bytes < HUGE_ARENA_BYTES || (m->opts.allocator && m->opts.allocator->alloc)) return 0;
    const char *v = getenv("TM_ARENA_HUGE");
    return !v || strcmp(v, "0") != 0;
}

void *tm__session_arena_alloc(const tm_model *m, size_t bytes) {
    return huge_arena(m, bytes) ? tm__huge_alloc(bytes) : tm__model_alloc(m, bytes);
}

tm_status tm_session_create(tm_plan *p, tm_session **out, tm_error *err) {
    if (!p || !out) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_session_create: NULL argument");
    tm_session *s = calloc(1, sizeof *s);
    if (!s) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    s->plan = p;
    const tm_model *m = p->model;
    s->tensors = calloc((size_t)p->n_values + 1, sizeof *s->tensors);
    s->kin = calloc((size_t)p->n_kernels + 1, sizeof *s->kin);
    s->kout = calloc((size_t)p->n_kernels + 1, sizeof *s->kout);
    s->off = calloc((size_t)p->n_values + 1, sizeof *s->off);
    s->param = -1;
    s->arena_cap = p->arena_bytes;
    s->scratch_cap = p->scratch_bytes;
    if (p->arena_bytes)
        s->arena = huge_arena(m, p->arena_bytes) ? tm__huge_alloc(p->arena_bytes)
                                                 : tm__model_alloc(m, p->arena_bytes);
    if (p->scratch_bytes) s->scratch = tm__model_alloc(m, p->scratch_bytes);
    if (!s->tensors || !s->kin || !s->kout || !s->off || (p->arena_bytes && !s->arena) ||
        (p->scratch_bytes && !s->scratch)) {
        tm_session_free(s);
        return tm__fail(err, TM_ERR_NO_MEMORY, "cannot allocate a session (arena of %zu bytes)",
                        p->arena_bytes);
    }
    for (int i = 0; i < p->n_values; i++) {
        const plan_value *v = &p->values[i];
        tm_tensor *t = &s->tensors[i];
        t->dtype = v->dtype;
        t->rank = v->rank;
        memcpy(t->dims, v->dims, sizeof t->dims);
        t->nbytes = v->nbytes;
        s->off[i] = v->offset;
        if (v->kind == PV_CONST) t->data = v->constant->data;
        if (v->kind == PV_ARENA || v->kind == PV_KEPT) t->data = (char *)s->arena + v->offset;
        if (v->kind == PV_PARAM) t->data = m->params[v->input].value->data;
    }
    for (int i = 0; i < p->n_values; i++)
        if (p->values[i].kind == PV_ALIAS) s->tensors[i].data = s->tensors[root_of(p, i)].data;
    if (p->kept_bytes) memset(s->arena, 0, p->kept_bytes);
    const char *prof = getenv("TM_PROFILE");
    if (prof && (prof[0] == '1' || prof[0] == '2'))
        s->profile = calloc((size_t)p->n_kernels + 1, sizeof *s->profile);
    s->profile_detail = prof && prof[0] == '2';
    for (int k = 0; k < p->n_kernels; k++) {
        const plan_kernel *pk = &p->kernels[k];
        s->kin[k] = calloc((size_t)pk->nin + 1, sizeof **s->kin);
        s->kout[k] = calloc((size_t)pk->nout + 1, sizeof **s->kout);
        if (!s->kin[k] || !s->kout[k]) {
            tm_session_free(s);
            return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        }
        for (int j = 0; j < pk->nin; j++) s->kin[k][j] = &s->tensors[pk->in[j]];
        for (int j = 0; j < pk->nout; j++) s->kout[k][j] = &s->tensors[pk->out[j]];
    }
    if (output_groups(s) != TM_OK) {
        tm_session_free(s);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    }
    if (p->gen) {
        tm_status st = tm__gen_session_init(s, err);
        if (st != TM_OK) {
            tm_session_free(s);
            return st;
        }
    }
    *out = s;
    return TM_OK;
}

/* Which graph outputs a run may compute in the caller's tensor instead of its arena
 * (saving the copy out: a decode step's KV cache is most of its output): those whose
 * buffer is an arena value of this plan (not an input, constant or kept value, nothing
 * after a graph break) that no other output shares, with all the plan values that are
 * views of it. */
static tm_status output_groups(tm_session *s) {
    const tm_plan *p = s->plan;
    if (!p->n_outputs || p->break_at >= 0 || !p->output_pv) return TM_OK;
    s->out_group = calloc((size_t)p->n_outputs, sizeof *s->out_group);
    s->out_group_n = calloc((size_t)p->n_outputs, sizeof *s->out_group_n);
    s->written = calloc((size_t)p->n_outputs, sizeof *s->written);
    if (!s->out_group || !s->out_group_n || !s->written) return TM_ERR_NO_MEMORY;
    for (int i = 0; i < p->n_outputs; i++) {
        int pv = p->output_pv[i], r = root_of(p, pv), shared = 0;
        for (int j = 0; j < p->n_outputs; j++)
            shared |= j != i && root_of(p, p->output_pv[j]) == r;
        if (shared || p->values[r].kind != PV_ARENA || p->values[r].nbytes != p->values[pv].nbytes ||
            !p->values[pv].nbytes)
            continue;
        int n = 0;
        for (int w = 0; w < p->n_values; w++) n += root_of(p, w) == r;
        s->out_group[i] = malloc((size_t)n * sizeof **s->out_group);
        if (!s->out_group[i]) return TM_ERR_NO_MEMORY;
        for (int w = 0; w < p->n_values; w++)
            if (root_of(p, w) == r) s->out_group[i][s->out_group_n[i]++] = w;
    }
    return TM_OK;
}

static int ranges_overlap(const void *a, size_t na, const void *b, size_t nb) {
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return na && nb && x < y + nb && y < x + na;
}

/* Points the buffers of the outputs the caller gave a tensor for (of the output's dtype
 * and shape, overlapping no input and no other output) at that tensor, and those given
 * NULL at a tensor allocated here, for exec to write in place; bound[i] says which
 * (2: allocated here). Others are copied out after the run, as before. */
static tm_status bind_outputs(tm_session *s, tm_tensor **outputs, int n_in, const tm_xval *in,
                              uint8_t *bound, tm_error *err) {
    const tm_plan *p = s->plan;
    for (int i = 0; i < p->n_outputs; i++) {
        bound[i] = 0;
        s->written[i] = NULL;
        if (!s->out_group[i]) continue;
        const tm_tensor *v = &s->tensors[p->output_pv[i]];   /* the session's sizes */
        tm_tensor *d = outputs[i];
        if (d) {
            if (d->dtype != v->dtype || d->rank != v->rank || d->nbytes != v->nbytes ||
                memcmp(d->dims, v->dims, (size_t)v->rank * sizeof v->dims[0]))
                continue;   /* deliver names the mismatch */
            int clash = 0;
            for (int k = 0; k < n_in && !clash; k++)
                clash = in[k].kind == TM_X_TENSOR && in[k].t &&
                        ranges_overlap(d->data, d->nbytes, in[k].t->data, in[k].t->nbytes);
            for (int j = 0; j < p->n_outputs && !clash; j++)
                clash = j != i && outputs[j] &&
                        ranges_overlap(d->data, d->nbytes, outputs[j]->data, outputs[j]->nbytes);
            if (clash) continue;
        } else {
            if (v->dtype == TM_STRING) continue;
            d = tm_tensor_alloc(v->dtype, v->rank, v->dims, NULL);
            if (!d) return tm__fail(err, TM_ERR_NO_MEMORY, "cannot allocate output '%s'",
                                    output_name(p, i));
            outputs[i] = d;
            bound[i] = 2;
        }
        if (!bound[i]) bound[i] = 1;
        for (int w = 0; w < s->out_group_n[i]; w++) s->tensors[s->out_group[i][w]].data = d->data;
    }
    return TM_OK;
}

/* The arena buffers back after a run that wrote outputs in place; a failed run frees
 * the tensors it allocated (the caller's entries stay NULL). */
static void unbind_outputs(tm_session *s, tm_tensor **outputs, const uint8_t *bound, int ok) {
    const tm_plan *p = s->plan;
    for (int i = 0; i < p->n_outputs; i++) {
        if (!bound[i]) continue;
        void *home = (char *)s->arena + s->off[root_of(p, p->output_pv[i])];
        for (int w = 0; w < s->out_group_n[i]; w++) s->tensors[s->out_group[i][w]].data = home;
        if (ok) s->written[i] = outputs[i];
        else if (bound[i] == 2) {
            tm_tensor_free(outputs[i]);
            outputs[i] = NULL;
        }
    }
}

static tm_status bind_run_inputs(tm_session *s, int n, const char *const *names,
                                 const tm_xval *inputs, tm_error *err) {
    tm_plan *p = s->plan;
    const tm_graph *g = p->model->onnx->graph;
    for (int k = 0; k < n; k++) {
        int gi = -1;
        for (int i = 0; i < g->n_inputs + p->n_extra_inputs; i++)
            if (names[k] && !strcmp(input_name(p, i), names[k])) gi = i;
        if (gi < 0)
            return tm__fail_at(err, TM_ERR_NOT_FOUND, NULL, NULL, names[k] ? names[k] : "",
                               "the model has no input '%s'", names[k] ? names[k] : "(null)");
        if (p->input_static[gi] || inputs[k].kind != TM_X_TENSOR) continue;
        const tm_tensor *t = inputs[k].t;
        if (!t) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "input '%s' is NULL", names[k]);
        if (t->dtype != p->input_dtype[gi] || t->rank != p->input_rank[gi] ||
            (!p->gen && memcmp(t->dims, p->input_dims[gi], (size_t)t->rank * sizeof t->dims[0])))
            return tm__fail_at(err, TM_ERR_SHAPE, NULL, NULL, names[k],
                               "input '%s' does not have the dtype and shape the plan was made "
                               "for (%s, rank %d)", names[k], tm_dtype_name(p->input_dtype[gi]),
                               p->input_rank[gi]);
    }
    if (p->gen) {
        tm_status st = tm__gen_bind(s, n, names, inputs, err);
        if (st != TM_OK) return st;
    }
    for (int i = 0; i < p->n_values; i++) {
        plan_value *v = &p->values[i];
        if (v->kind != PV_INPUT) continue;
        const tm_tensor *t = NULL;
        const char *name = input_name(p, v->input);
        for (int k = 0; k < n && !t; k++)
            if (names[k] && !strcmp(names[k], name) && inputs[k].kind == TM_X_TENSOR)
                t = inputs[k].t;
        if (!t)
            return tm__fail_at(err, TM_ERR_NOT_FOUND, NULL, NULL, name, "missing input '%s'", name);
        s->tensors[i].data = t->data;
    }
    for (int i = 0; i < p->n_values; i++)
        if (p->values[i].kind == PV_ALIAS && p->values[root_of(p, i)].kind == PV_INPUT)
            s->tensors[i].data = s->tensors[root_of(p, i)].data;
    return TM_OK;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* TM_PROFILE_CLOCK=cpu: the calling thread's CPU time instead of wall time, so that a
 * profile on a busy machine leaves out the time other processes took (workers' time is
 * then not counted: use it with one thread). */
static double profile_now_s(void) {
    static int cpu = -1;
    if (cpu < 0) {
        const char *v = getenv("TM_PROFILE_CLOCK");
        cpu = v && !strcmp(v, "cpu");
    }
    if (!cpu) return now_s();
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* (batch, M, N, K) of a kernel that is a matrix product, else 0. */
static int gemm_dims(const tm_plan *p, const plan_kernel *pk, int64_t d[4]) {
    if (pk->prim == TM_P_LINEAR) {
        const plan_value *y = &p->values[pk->out[0]];
        d[0] = 1;
        d[2] = pk->args.i[0];
        d[3] = pk->args.i[1];
        d[1] = d[2] > 0 ? tm_numel(y->rank, y->dims) / d[2] : 0;
        return 1;
    }
    if (pk->prim != TM_P_MATMUL || pk->nin < 2) return 0;
    const plan_value *a = &p->values[pk->in[0]], *b = &p->values[pk->in[1]];
    const plan_value *y = &p->values[pk->out[0]];
    if (a->rank < 2 || b->rank < 2 || y->rank < 2) return 0;
    int ta = pk->args.i[0] != 0;   /* a stored transposed: its rows are the depth */
    int tc = pk->args.i[2] != 0;   /* the output stored transposed: (n, m) */
    (void)b;
    d[1] = y->dims[y->rank - 2 + tc];
    d[2] = y->dims[y->rank - 1 - tc];
    d[3] = a->dims[a->rank - 1 - ta];
    int64_t mn = d[1] * d[2];
    d[0] = mn > 0 ? tm_numel(y->rank, y->dims) / mn : 0;
    return 1;
}

/* Matrix products by shape, with their GFLOP/s: what the bench compares with the
 * machine's FMA peak. */
static void print_gemm_profile(const tm_session *s) {
    const tm_plan *p = s->plan;
    int n = 0;
    struct { int64_t d[4]; int count; double seconds; } *shapes = calloc((size_t)p->n_kernels + 1,
                                                                         sizeof *shapes);
    if (!shapes) return;
    for (int k = 0; k < p->n_kernels; k++) {
        int64_t d[4];
        if (!gemm_dims(p, &p->kernels[k], d)) continue;
        int i = 0;
        while (i < n && memcmp(shapes[i].d, d, sizeof d)) i++;
        if (i == n) memcpy(shapes[n++].d, d, sizeof d);
        shapes[i].count++;
        shapes[i].seconds += s->profile[k];
    }
    if (n) fprintf(stderr, "matrix products by shape (M x N x K, batch):\n");
    for (;;) {
        int best = -1;
        for (int i = 0; i < n; i++)
            if (shapes[i].count && (best < 0 || shapes[i].seconds > shapes[best].seconds)) best = i;
        if (best < 0) break;
        const int64_t *d = shapes[best].d;
        double runs = (double)s->profile_runs, sec = shapes[best].seconds / runs;
        double flops = 2.0 * (double)d[0] * (double)d[1] * (double)d[2] * (double)d[3];
        fprintf(stderr, "  gemm %lldx%lldx%lld x%lld %4d kernels %9.3f ms %7.1f GFLOP/s\n",
                (long long)d[1], (long long)d[2], (long long)d[3], (long long)d[0],
                shapes[best].count, sec * 1e3,
                sec > 0 ? flops * shapes[best].count / sec * 1e-9 : 0.0);
        shapes[best].count = 0;
    }
    free(shapes);
}

/* TM_PROFILE=2: every kernel in plan order, with the node it came from and its shapes. */
static void print_kernel_profile(const tm_session *s) {
    const tm_plan *p = s->plan;
    fprintf(stderr, "kernels in plan order (ms per run):\n");
    for (int k = 0; k < p->n_kernels; k++) {
        const plan_kernel *pk = &p->kernels[k];
        char shapes[256];
        size_t used = 0;
        shapes[0] = 0;
        for (int j = 0; j < pk->nin + 1 && used < sizeof shapes - 32; j++) {
            const plan_value *v = &p->values[j < pk->nin ? pk->in[j] : pk->out[0]];
            used += (size_t)snprintf(shapes + used, sizeof shapes - used, "%s%s(", j == pk->nin ? " -> " : j ? " " : "",
                                     v->kind == PV_CONST ? "c" : "");
            for (int d = 0; d < v->rank && used < sizeof shapes - 24; d++)
                used += (size_t)snprintf(shapes + used, sizeof shapes - used, "%s%lld", d ? "," : "",
                                         (long long)v->dims[d]);
            used += (size_t)snprintf(shapes + used, sizeof shapes - used, ")");
        }
        fprintf(stderr, "  %4d %-18s %8.3f  %s  %s\n", k, tm_prims[pk->prim].name,
                s->profile[k] * 1e3 / (double)s->profile_runs, shapes, pk->where);
    }
}

/* TM_PROFILE=1: time per primitive, summed over a session's runs and printed to stderr
 * when the session is freed (a diagnostic; it costs two clock reads per kernel). The
 * first run is left out when there are more: it faults in the arena's pages (a gradient
 * plan's 100 MB of them zeroed, charged to whichever kernels touch them first). */
static void print_profile(const tm_session *s) {
    double total = 0, per_prim[TM_P__COUNT] = {0};
    int count[TM_P__COUNT] = {0};
    for (int k = 0; k < s->plan->n_kernels; k++) {
        per_prim[s->plan->kernels[k].prim] += s->profile[k];
        count[s->plan->kernels[k].prim]++;
        total += s->profile[k];
    }
    if (total <= 0) return;
    fprintf(stderr, "profile of %d kernels over %ld runs (ms per run):\n", s->plan->n_kernels,
            s->profile_runs);
    for (;;) {
        int best = -1;
        for (int i = 0; i < TM_P__COUNT; i++)
            if (per_prim[i] > 0 && (best < 0 || per_prim[i] > per_prim[best])) best = i;
        if (best < 0) break;
        fprintf(stderr, "  %-24s %4d kernels %9.3f ms %5.1f%%\n", tm_prims[best].name, count[best],
                per_prim[best] * 1e3 / (double)s->profile_runs, 100.0 * per_prim[best] / total);
        per_prim[best] = 0;
    }
    print_gemm_profile(s);
    if (s->profile_detail) print_kernel_profile(s);
}

static tm_status run_kernels(tm_session *s, tm_error *err) {
    tm_plan *p = s->plan;
    if (s->profile && s->profile_runs == 1 && !s->profile_dropped) {   /* drop the first */
        memset(s->profile, 0, (size_t)p->n_kernels * sizeof *s->profile);
        s->profile_runs = 0;
        s->profile_dropped = 1;
    }
    if (s->profile) s->profile_runs++;
    uint64_t run_seed = tm__run_seed();   /* unseeded random draws differ from run to run */
    for (int k = 0; k < p->n_kernels; k++) {
        const plan_kernel *pk = &p->kernels[k];
        if (pk->skip) continue;
        tm_error kerr;
        kerr.message[0] = 0;
        tm_kcall call = {pk->prim, s->args ? &s->args[k] : &pk->args, s->kin[k], pk->nin,
                         s->kout[k], pk->nout, s->scratch, s->scratch_cap, &kerr,
                         s->one_thread ? 1 : p->model->opts.threads,
                         s->one_thread ? NULL : p->model->pool, run_seed};
        double t0 = s->profile ? profile_now_s() : 0;
        tm_status st = tm_prims[pk->prim].kernel(&call);
        if (s->profile) s->profile[k] += profile_now_s() - t0;
        if (st != TM_OK)
            return tm__fail(err, st, "%s: %s: %s", pk->where, tm_prims[pk->prim].name,
                            kerr.message[0] ? kerr.message : tm_status_name(st));
    }
    return TM_OK;
}

static tm_status deliver(const tm_tensor *src, tm_tensor **dst, const char *name, tm_error *err) {
    if (*dst) {
        tm_tensor *d = *dst;
        if (d->dtype != src->dtype || d->rank != src->rank ||
            memcmp(d->dims, src->dims, (size_t)src->rank * sizeof src->dims[0]))
            return tm__fail_at(err, TM_ERR_SHAPE, NULL, NULL, name, "the buffer given for output "
                               "'%s' does not have its dtype and shape", name);
        if (src->dtype == TM_STRING)
            return tm__fail(err, TM_ERR_UNSUPPORTED, "string outputs need a NULL entry");
        if (src->nbytes) memcpy(d->data, src->data, src->nbytes);
        return TM_OK;
    }
    *dst = tm_tensor_clone(src, NULL);
    return *dst ? TM_OK : tm__fail(err, TM_ERR_NO_MEMORY, "cannot allocate output '%s'", name);
}

/* After a graph break: the values alive at the break go into an eager context, and the
 * rest of the graph runs node by node. */
/* The eager tail: the values alive at the break go into an eager context and the rest
 * of the graph runs node by node; its outputs stay in s->eager_out until the next run. */
static tm_status run_eager_tail(tm_session *s, tm_error *err) {
    tm_plan *p = s->plan;
    tm_model *m = p->model;
    const tm_graph *g = m->onnx->graph;
    for (int i = 0; s->eager_out && i < g->n_outputs; i++) tm_xval_clear(&s->eager_out[i]);
    if (!s->eager_out) s->eager_out = calloc((size_t)g->n_outputs + 1, sizeof *s->eager_out);
    if (!s->eager_out) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, m->opts.allocator);
    c.compute_type = m->opts.compute_type;
    c.params = tm__params_table(m);
    c.fold_cache = m->fold_cache;
    c.dequantize_nbits = m->opts.dequantize_nbits;
    c.nbits_int8 = m->opts.nbits_int8;
    tm_live live = {0};
    tm_oval *outs = calloc((size_t)g->n_outputs + 1, sizeof *outs);
    live.names = calloc((size_t)p->n_live + 1, sizeof *live.names);
    live.vals = calloc((size_t)p->n_live + 1, sizeof *live.vals);
    tm_status st = (!outs || !live.names || !live.vals) ? TM_ERR_NO_MEMORY : TM_OK;
    for (int i = 0; i < p->n_live && st == TM_OK; i++) {
        const plan_live *pl = &p->live[i];
        tm_oval *ov = &live.vals[i];
        live.names[i] = strdup(pl->name);
        live.n = i + 1;
        ov->kind = pl->kind;
        ov->seq_dtype = pl->seq_dtype;
        ov->optional = pl->optional;
        if (pl->kind == TM_OV_TENSOR)
            ov->v = tm_val_tensor(&c, tm_tensor_clone(&s->tensors[pl->pv], NULL), 0);
        if (pl->kind == TM_OV_SEQ) {
            ov->seq = calloc((size_t)pl->n + 1, sizeof *ov->seq);
            ov->n = pl->n;
            for (int k = 0; ov->seq && k < pl->n; k++)
                ov->seq[k] = tm_val_tensor(&c, tm_tensor_clone(&s->tensors[pl->seq[k]], NULL), 0);
        }
        if (!live.names[i] || !tm_ctx_ok(&c)) st = TM_ERR_NO_MEMORY;
    }
    if (st != TM_OK) {
        tm__fail(err, st, "out of memory resuming after a graph break");
    } else {
        tm_interp ip;
        memset(&ip, 0, sizeof ip);
        ip.ctx = &c;
        ip.model = m->onnx;
        ip.start_at = p->break_at;
        st = tm_interp_resume(&ip, &live, outs, NULL);
        if (st == TM_OK) tm__restore_output_dtypes(m, &c, outs);
        if (st == TM_OK && !tm_ctx_ok(&c)) st = c.status;
        if (st != TM_OK) tm__error_copy(err, &c.err);
    }
    for (int i = 0; st == TM_OK && i < g->n_outputs; i++)
        st = tm__export_oval(&c, &outs[i], &s->eager_out[i], err);
    for (int i = 0; outs && i < g->n_outputs; i++) free(outs[i].seq);
    free(outs);
    tm_live_free(&live);
    tm_ctx_destroy(&c);
    return st;
}

/* Traces the rest of the graph after parent's break, with the break's value known. */
static tm_status create_tail(tm_plan *parent, const tm_session *ps, tm_plan **out,
                             tm_error *err) {
    tm_model *m = parent->model;
    const tm_graph *g = m->onnx->graph;
    int n = parent->n_live;
    tm_plan *p = calloc(1, sizeof *p);
    if (!p) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    p->model = m;
    p->break_at = -1;
    p->break_key = -1;
    p->is_tail = 1;
    pthread_mutex_init(&p->tails_lock, NULL);
    p->n_graph_inputs = n;
    p->n_outputs = g->n_outputs;
    p->input_pv = calloc((size_t)n + 1, sizeof *p->input_pv);
    p->input_dtype = calloc((size_t)n + 1, sizeof *p->input_dtype);
    p->input_rank = calloc((size_t)n + 1, sizeof *p->input_rank);
    p->input_dims = calloc((size_t)n + 1, sizeof *p->input_dims);
    p->input_static = calloc((size_t)n + 1, 1);
    p->output_pv = calloc((size_t)g->n_outputs + 1, sizeof *p->output_pv);
    tm_oval *outs = calloc((size_t)g->n_outputs + 1, sizeof *outs);
    tm_live in = {0}, live = {0};
    in.names = calloc((size_t)n + 1, sizeof *in.names);
    in.vals = calloc((size_t)n + 1, sizeof *in.vals);
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_TRACE, m->opts.allocator);
    c.compute_type = m->opts.compute_type;
    c.params = tm__params_table(m);
    c.fold_cache = m->fold_cache;
    c.dequantize_nbits = m->opts.dequantize_nbits;
    c.nbits_int8 = m->opts.nbits_int8;
    c.pack_cache = m->packed;   /* weights packed by the passes, shared by the model's plans */
    tm_status st = TM_OK;
    if (!p->input_pv || !p->input_dtype || !p->input_rank || !p->input_dims ||
        !p->input_static || !p->output_pv || !outs || !in.names || !in.vals) {
        st = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        const tm_tensor *t = &ps->tensors[parent->live[i].pv];
        in.names[i] = strdup(parent->live[i].name);
        in.n = i + 1;
        in.vals[i].kind = TM_OV_TENSOR;
        p->input_pv[i] = -1;
        p->input_dtype[i] = t->dtype;
        p->input_rank[i] = t->rank;
        memcpy(p->input_dims[i], t->dims, sizeof p->input_dims[i]);
        if (i == parent->break_key) {
            in.vals[i].v = tm_val_tensor(&c, tm_tensor_clone(t, NULL), 0);
            p->input_static[i] = 1;
        } else {
            in.vals[i].v = tm_val_symbolic(&c, t->dtype, t->rank, t->dims, i);
        }
        if (!in.names[i]) tm_ctx_fail(&c, TM_ERR_NO_MEMORY, "out of memory");
    }
    if (!tm_ctx_ok(&c)) {
        st = c.status;
        tm__error_copy(err, &c.err);
        goto done;
    }
    tm_interp ip;
    memset(&ip, 0, sizeof ip);
    ip.ctx = &c;
    ip.model = m->onnx;
    ip.start_at = parent->break_at;
    st = tm_interp_resume(&ip, &in, outs, &live);
    if (st == TM_OK) tm__restore_output_dtypes(m, &c, outs);
    if (st == TM_OK && !tm_ctx_ok(&c)) st = c.status;
    if (st == TM_ERR_NEEDS_HOST && ip.break_at == parent->break_at) {
        /* The same node still needs a host value it computes itself (inside a
         * subgraph): no progress by tracing, run the rest eagerly. */
        st = tm__fail(err, TM_ERR_UNSUPPORTED, "computed eagerly");
        goto done;
    }
    st = finish_trace(p, &c, &ip, st, outs, &live, 0, err);
    if (st == TM_OK) {
        *out = p;
        p = NULL;
    }
done:
    tm_plan_free(p);
    for (int i = 0; outs && i < g->n_outputs; i++) free(outs[i].seq);
    free(outs);
    tm_live_free(&in);
    tm_live_free(&live);
    tm_ctx_destroy(&c);
    return st;
}

/* The key of a break value: dtype, dims and bytes. */
static char *value_key(const tm_tensor *t, size_t *len) {
    size_t n = sizeof t->dtype + sizeof t->rank + (size_t)t->rank * sizeof t->dims[0] + t->nbytes;
    char *k = malloc(n + 1);
    if (!k) return NULL;
    char *w = k;
    memcpy(w, &t->dtype, sizeof t->dtype);
    w += sizeof t->dtype;
    memcpy(w, &t->rank, sizeof t->rank);
    w += sizeof t->rank;
    memcpy(w, t->dims, (size_t)t->rank * sizeof t->dims[0]);
    w += (size_t)t->rank * sizeof t->dims[0];
    if (t->nbytes) memcpy(w, t->data, t->nbytes);
    *len = n;
    return k;
}

/* The tail plan for the value s's break needs (made on first sight, then cached in
 * the parent plan); *plan is NULL when that value leads to an eager tail. */
static tm_status find_tail(tm_session *s, tm_plan **plan, tm_error *err) {
    tm_plan *p = s->plan;
    const tm_tensor *key_t = &s->tensors[p->live[p->break_key].pv];
    if (key_t->dtype == TM_STRING) {
        *plan = NULL;
        return TM_OK;
    }
    /* Small keys (a flag, a count) are compared in place: no allocation on a hit. */
    pthread_mutex_lock(&p->tails_lock);
    for (int i = 0; i < p->n_tails; i++) {
        const char *k = p->tails[i].key;
        size_t off = sizeof key_t->dtype + sizeof key_t->rank;
        if (p->tails[i].key_len != off + (size_t)key_t->rank * sizeof key_t->dims[0] + key_t->nbytes)
            continue;
        if (memcmp(k, &key_t->dtype, sizeof key_t->dtype) ||
            memcmp(k + sizeof key_t->dtype, &key_t->rank, sizeof key_t->rank) ||
            memcmp(k + off, key_t->dims, (size_t)key_t->rank * sizeof key_t->dims[0]) ||
            (key_t->nbytes && memcmp(k + off + (size_t)key_t->rank * sizeof key_t->dims[0],
                                     key_t->data, key_t->nbytes)))
            continue;
        *plan = p->tails[i].plan;
        pthread_mutex_unlock(&p->tails_lock);
        return TM_OK;
    }
    size_t len = 0;
    char *key = value_key(key_t, &len);
    tm_plan *tail = NULL;
    tm_error e;
    memset(&e, 0, sizeof e);
    tm_status st = key ? create_tail(p, s, &tail, &e) : TM_ERR_NO_MEMORY;
    if (st == TM_ERR_UNSUPPORTED && strstr(e.message, "computed eagerly")) st = TM_OK;
    tail_plan *grown = st == TM_OK ? realloc(p->tails, (size_t)(p->n_tails + 1) * sizeof *grown)
                                   : NULL;
    if (st == TM_OK && !grown) st = TM_ERR_NO_MEMORY;
    if (st != TM_OK) {
        pthread_mutex_unlock(&p->tails_lock);
        free(key);
        tm_plan_free(tail);
        if (e.message[0]) tm__error_copy(err, &e);
        else tm__fail(err, st, "out of memory");
        return st;
    }
    p->tails = grown;
    p->tails[p->n_tails].key = key;
    p->tails[p->n_tails].key_len = len;
    p->tails[p->n_tails].plan = tail;
    p->n_tails++;
    pthread_mutex_unlock(&p->tails_lock);
    *plan = tail;
    return TM_OK;
}

static tm_status exec(tm_session *s, tm_error *err);

static tm_status exec_tail(tm_session *s, tm_plan *tail, tm_error *err) {
    tm_session *ts = NULL;
    for (int i = 0; i < s->n_tails && !ts; i++)
        if (s->tails[i].plan == tail) ts = s->tails[i].session;
    if (!ts) {
        tail_session *grown = realloc(s->tails, (size_t)(s->n_tails + 1) * sizeof *grown);
        if (!grown) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        s->tails = grown;
        tm_status st = tm_session_create(tail, &ts, err);
        if (st != TM_OK) return st;
        s->tails[s->n_tails].plan = tail;
        s->tails[s->n_tails].session = ts;
        s->n_tails++;
    }
    /* The tail's entries are this plan's live values, read in place. */
    for (int i = 0; i < tail->n_values; i++)
        if (tail->values[i].kind == PV_INPUT)
            ts->tensors[i].data = s->tensors[s->plan->live[tail->values[i].input].pv].data;
    for (int i = 0; i < tail->n_values; i++)
        if (tail->values[i].kind == PV_ALIAS && tail->values[root_of(tail, i)].kind == PV_INPUT)
            ts->tensors[i].data = ts->tensors[root_of(tail, i)].data;
    s->last_tail = ts;
    ts->one_thread = s->one_thread;
    return exec(ts, err);
}

/* Runs a session whose entries are bound: its kernels, then what follows a break. */
static tm_status exec(tm_session *s, tm_error *err) {
    tm_plan *p = s->plan;
    s->last_tail = NULL;
    if (s->written) memset(s->written, 0, (size_t)p->n_outputs * sizeof *s->written);
    tm_status st = run_kernels(s, err);
    if (st != TM_OK || p->break_at < 0) return st;
    tm_plan *tail = NULL;
    if (p->break_key >= 0) {
        st = find_tail(s, &tail, err);
        if (st != TM_OK) return st;
    }
    return tail ? exec_tail(s, tail, err) : run_eager_tail(s, err);
}

/* Where output i of the last run is: a tensor of the last plan in the chain, or an
 * eager tail's value. */
static const tm_xval *result(const tm_session *s, int i, tm_xval *scratch) {
    while (s->last_tail) s = s->last_tail;
    if (s->plan->break_at >= 0) return &s->eager_out[i];
    memset(scratch, 0, sizeof *scratch);
    scratch->kind = TM_X_TENSOR;
    scratch->t = &s->tensors[s->plan->output_pv[i]];
    return scratch;
}

tm_status tm__session_run_x(tm_session *s, int n, const char *const *names,
                            const tm_xval *inputs, tm_xval *outputs, tm_error *err) {
    tm_plan *p = s->plan;
    tm_status st = bind_run_inputs(s, n, names, inputs, err);
    if (st == TM_OK) st = exec(s, err);
    for (int i = 0; i < p->n_outputs && st == TM_OK; i++) {
        tm_xval tmp;
        const tm_xval *r = result(s, i, &tmp);
        memset(&outputs[i], 0, sizeof outputs[i]);
        if (r->kind == TM_X_TENSOR) {
            outputs[i].kind = TM_X_TENSOR;
            st = deliver(r->t, &outputs[i].t, output_name(p, i), err);
        } else if (r->kind == TM_X_SEQUENCE) {
            outputs[i].kind = TM_X_SEQUENCE;
            outputs[i].seq_dtype = r->seq_dtype;
            outputs[i].seq = calloc((size_t)r->n + 1, sizeof *outputs[i].seq);
            if (!outputs[i].seq) st = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
            for (int k = 0; st == TM_OK && k < r->n; k++) {
                st = deliver(r->seq[k], &outputs[i].seq[k], "sequence", err);
                outputs[i].n = k + 1;
            }
        }
    }
    return st;
}

tm_status tm_session_run(tm_session *s, int n, const char *const *names,
                         const tm_tensor *const *inputs, tm_tensor **outputs, tm_error *err) {
    if (!s || (n && (!names || !inputs)))
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_session_run: NULL argument");
    tm_plan *p = s->plan;
    enum { SMALL = 32 };
    tm_xval xin_small[SMALL] = {0};
    tm_xval *xin = n <= SMALL ? xin_small : calloc((size_t)n, sizeof *xin);
    if (!xin) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < n; i++) {
        memset(&xin[i], 0, sizeof xin[i]);
        xin[i].kind = inputs[i] ? TM_X_TENSOR : TM_X_NONE;
        xin[i].t = (tm_tensor *)inputs[i];
    }
    enum { FEW = 64 };
    uint8_t bound_few[FEW] = {0};
    uint8_t *bound = p->n_outputs <= FEW ? bound_few : calloc((size_t)p->n_outputs, 1);
    tm_status st = bound ? TM_OK : tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    if (st == TM_OK) st = bind_run_inputs(s, n, names, xin, err);
    int binding = st == TM_OK && outputs && s->out_group;
    if (binding) st = bind_outputs(s, outputs, n, xin, bound, err);
    if (st == TM_OK) st = exec(s, err);
    if (binding) unbind_outputs(s, outputs, bound, st == TM_OK);
    for (int i = 0; outputs && i < p->n_outputs && st == TM_OK; i++) {
        if (binding && bound[i]) continue;   /* computed in place */
        tm_xval tmp;
        const tm_xval *r = result(s, i, &tmp);
        if (r->kind == TM_X_TENSOR)
            st = deliver(r->t, &outputs[i], output_name(p, i), err);
        else if (r->kind == TM_X_SEQUENCE)
            st = tm__fail(err, TM_ERR_UNSUPPORTED, "output '%s' is a sequence: use the CLI or "
                          "an eager run", output_name(p, i));
        else
            outputs[i] = NULL;
    }
    if (xin != xin_small) free(xin);
    if (bound != bound_few) free(bound);
    return st;
}

const tm_tensor *tm_session_result(const tm_session *s, int i) {
    if (!s || i < 0 || i >= s->plan->n_outputs) return NULL;
    while (s->last_tail) s = s->last_tail;
    if (s->plan->break_at >= 0)
        return s->eager_out && s->eager_out[i].kind == TM_X_TENSOR ? s->eager_out[i].t : NULL;
    if (s->written && s->written[i]) return s->written[i];
    return &s->tensors[s->plan->output_pv[i]];
}

/* ---- The plan cache ---------------------------------------------------------------- */

/* An entry is a plan for one signature (key: names, dtypes, dims, static values), or a
 * generic plan (generic.c: no key) serving many sizes of one family (fkey: the same
 * without the dims). Entries with a plan per shape keep their inputs' dims, so that two
 * of one family can start a generic plan. */
struct tm_plan_cache_entry {
    tm_plan_cache_entry *next;
    char *key;
    size_t key_len;
    char *fkey;
    size_t fkey_len;
    int n_in;
    int *rank;                    /* per given input; -1: none given */
    int64_t (*dims)[TM_MAX_RANK];
    tm_plan *plan;
    tm_session **free_sessions;
    int n_free, cap_free;
    int in_use;
};

/* A family that tm_model_run tried to serve with a generic plan, and how often that
 * failed (it stops trying after MAX_GEN_FAILS, and makes at most MAX_GEN_PLANS). */
typedef struct tm_gen_family {
    struct tm_gen_family *next;
    char *fkey;
    size_t fkey_len;
    int fails, made;
} tm_gen_family;
enum { MAX_GEN_FAILS = 2, MAX_GEN_PLANS = 16 };

static void entry_free(tm_plan_cache_entry *e) {
    for (int i = 0; i < e->n_free; i++) tm_session_free(e->free_sessions[i]);
    free(e->free_sessions);
    tm_plan_free(e->plan);
    free(e->key);
    free(e->fkey);
    free(e->rank);
    free(e->dims);
    free(e);
}

void tm__plan_cache_clear(tm_model *m) {
    tm_plan_cache_entry *e = m->cache;
    while (e) {
        tm_plan_cache_entry *next = e->next;
        entry_free(e);
        e = next;
    }
    m->cache = NULL;
    m->n_cache = 0;
    while (m->families) {
        tm_gen_family *f = m->families->next;
        free(m->families->fkey);
        free(m->families);
        m->families = f;
    }
}

/* The signature: each given input's name, dtype and dims, plus static values' bytes. */
/* In buf (cap bytes) when it fits, so that a run through a cached plan allocates
 * nothing; else malloc'ed (the caller frees a result that is not buf). */
static char *make_key(int n, const char *const *names, const tm_tensor *const *inputs,
                      const tm_plan_options *o, int with_dims, char *buf, size_t cap,
                      size_t *len) {
    size_t used = 0;
    char *k = buf;
#define PUT(ptr, sz)                                          \
    do {                                                      \
        size_t s_ = (sz);                                     \
        if (used + s_ > cap) {                                \
            size_t nc = cap;                                  \
            while (used + s_ > nc) nc *= 2;                   \
            char *nk = k == buf ? malloc(nc) : realloc(k, nc);\
            if (!nk) { if (k != buf) free(k); return NULL; }  \
            if (k == buf) memcpy(nk, buf, used);              \
            k = nk;                                           \
            cap = nc;                                         \
        }                                                     \
        memcpy(k + used, (ptr), s_);                          \
        used += s_;                                           \
    } while (0)
    for (int i = 0; i < n; i++) {
        PUT(names[i], strlen(names[i]) + 1);
        if (!inputs[i]) continue;
        PUT(&inputs[i]->dtype, sizeof inputs[i]->dtype);
        PUT(&inputs[i]->rank, sizeof inputs[i]->rank);
        if (with_dims) PUT(inputs[i]->dims, (size_t)inputs[i]->rank * sizeof(int64_t));
    }
    int kv = o && o->size >= offsetof(tm_plan_options, kv_in_place) + sizeof(int) && o->kv_in_place;
    PUT(&kv, sizeof kv);
    tm_dtype kv_dtype = o && o->size >= offsetof(tm_plan_options, kv_dtype) + sizeof(tm_dtype)
                            ? o->kv_dtype : TM_UNDEFINED;
    PUT(&kv_dtype, sizeof kv_dtype);
    int n_last = o && o->size >= offsetof(tm_plan_options, last_row_names) +
                                     sizeof(o->last_row_names) ? o->n_last_row : 0;
    PUT(&n_last, sizeof n_last);
    for (int i = 0; i < n_last; i++)
        if (o->last_row_names[i]) PUT(o->last_row_names[i], strlen(o->last_row_names[i]) + 1);
    for (int i = 0; o && i < o->n_static; i++) {
        const tm_tensor *t = o->static_values[i];
        PUT(o->static_names[i], strlen(o->static_names[i]) + 1);
        if (t && t->dtype != TM_STRING) PUT(t->data, t->nbytes);
    }
#undef PUT
    *len = used;
    return k;
}

static int is_static_name(const tm_plan_options *o, const char *name) {
    return find_static(o, name) != NULL;
}

/* Whether TM_GENERIC (default on) lets tm_model_run make plans that serve many sizes. */
static int generic_on(void) {
    const char *v = getenv("TM_GENERIC");
    return !v || strcmp(v, "0") != 0;
}

/* After a plan for a new shape: if another plan of the same family differs from it in
 * sizes only along a line (every dim that differs is the same affine function of the
 * first that does, all of them 2 or more), trace the family at the next size along the
 * line as well and try a generic plan through the three (generic.c). Called with the
 * cache locked; a failure only counts against the family. */
static void try_generic(tm_model *m, tm_plan_cache_entry *e, int n, const char *const *names,
                        const tm_tensor *const *inputs, const tm_plan_options *opts) {
    if (!generic_on() || e->plan->break_at >= 0 || e->plan->n_extra_inputs) return;
    tm_gen_family *f = m->families;
    while (f && !(f->fkey_len == e->fkey_len && !memcmp(f->fkey, e->fkey, e->fkey_len))) f = f->next;
    if (f && (f->fails >= MAX_GEN_FAILS || f->made >= MAX_GEN_PLANS)) return;
    /* The other plan: one of the family whose sizes differ from this one's along a line
     * (the first differing dim is the size; every other one that differs moves by the
     * same step, all of them 2 or more): a batch size's other lengths, say. */
    tm_plan_cache_entry *o = m->cache;
    int pk = -1, pax = -1;
    int64_t pa = 0, pb = 0;
    for (; o; o = o->next) {
        if (o == e || !o->key || o->plan->gen || o->fkey_len != e->fkey_len ||
            memcmp(o->fkey, e->fkey, e->fkey_len) || o->n_in != n)
            continue;
        pk = -1;
        for (int k = 0; k < n && pk < 0; k++)
            for (int d = 0; d < e->rank[k] && pk < 0; d++)
                if (e->dims[k][d] != o->dims[k][d] && !is_static_name(opts, names[k])) {
                    pk = k;
                    pax = d;
                }
        if (pk < 0) continue;
        pa = o->dims[pk][pax];
        pb = e->dims[pk][pax];
        int64_t step = pb - pa;
        int line = 1;
        for (int k = 0; k < n && line; k++)
            for (int d = 0; d < e->rank[k] && line; d++) {
                int64_t da = o->dims[k][d], db = e->dims[k][d];
                if (da != db && (da < 2 || db < 2 || db - da != step)) line = 0;
            }
        if (line) break;
    }
    if (!o) return;
    int64_t step = pb - pa;
    const tm_graph *g = m->onnx->graph;
    int pin = -1;
    for (int i = 0; i < g->n_inputs; i++)
        if (!strcmp(g->inputs[i].name, names[pk])) pin = i;
    if (pin < 0) return;
    if (!f) {
        f = calloc(1, sizeof *f);
        if (!f) return;
        f->fkey = malloc(e->fkey_len ? e->fkey_len : 1);
        if (!f->fkey) {
            free(f);
            return;
        }
        memcpy(f->fkey, e->fkey, e->fkey_len);
        f->fkey_len = e->fkey_len;
        f->next = m->families;
        m->families = f;
    }
    /* Inputs at the three sizes: A (the other plan's), B (this one's), C (one more step). */
    tm_xval *x[3];
    tm_tensor **own = calloc((size_t)3 * n + 1, sizeof *own);
    int ok = own != NULL;
    for (int j = 0; j < 3; j++) {
        x[j] = calloc((size_t)n + 1, sizeof *x[j]);
        ok &= x[j] != NULL;
    }
    for (int j = 0; ok && j < 3; j++)
        for (int k = 0; ok && k < n; k++) {
            x[j][k].kind = inputs[k] ? TM_X_TENSOR : TM_X_NONE;
            if (!inputs[k]) continue;
            if (is_static_name(opts, names[k]) || inputs[k]->dtype == TM_STRING) {
                x[j][k].t = (tm_tensor *)inputs[k];
                continue;
            }
            /* In increasing order: lo, hi, and one more step beyond hi. */
            int64_t dims[TM_MAX_RANK];
            for (int d = 0; d < e->rank[k]; d++) {
                int64_t da = o->dims[k][d], db = e->dims[k][d];
                int64_t lo = step > 0 ? da : db, hi = step > 0 ? db : da;
                dims[d] = j == 0 ? lo : j == 1 ? hi : hi + (hi - lo);
            }
            own[j * n + k] = tm_tensor_alloc(inputs[k]->dtype, e->rank[k], dims, NULL);
            ok = own[j * n + k] != NULL;
            x[j][k].t = own[j * n + k];
        }
    tm_plan *gp = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status st = ok ? tm__plan_generalize(m, n, names, x, opts, NULL, pin, pax, &gp, &err)
                      : TM_ERR_NO_MEMORY;
    if (getenv("TM_GENERIC_DEBUG"))
        fprintf(stderr, "transmuter: generic plan for sizes %lld, %lld, %lld of '%s' dim %d: %s\n",
                (long long)(pa < pb ? pa : pb), (long long)(pa < pb ? pb : pa),
                (long long)(2 * (pa < pb ? pb : pa) - (pa < pb ? pa : pb)), names[pk], pax,
                st == TM_OK ? "made" : err.message);
    tm_plan_cache_entry *ge = st == TM_OK ? calloc(1, sizeof *ge) : NULL;
    if (ge) ge->fkey = malloc(e->fkey_len ? e->fkey_len : 1);
    if (ge && ge->fkey) {
        memcpy(ge->fkey, e->fkey, e->fkey_len);
        ge->fkey_len = e->fkey_len;
        ge->plan = gp;
        ge->next = m->cache;
        m->cache = ge;
        m->n_cache++;
        f->made++;
        m->n_generic++;
    } else {
        if (ge) free(ge);
        tm_plan_free(gp);
        f->fails++;
        m->n_generic_failed++;
    }
    for (int i = 0; own && i < 3 * n; i++) tm_tensor_free(own[i]);
    free(own);
    for (int j = 0; j < 3; j++) free(x[j]);
}

/* Records the dims of the given inputs in e (for try_generic). */
static int entry_shapes(tm_plan_cache_entry *e, int n, const tm_tensor *const *inputs) {
    e->n_in = n;
    e->rank = calloc((size_t)n + 1, sizeof *e->rank);
    e->dims = calloc((size_t)n + 1, sizeof *e->dims);
    if (!e->rank || !e->dims) return 0;
    for (int k = 0; k < n; k++) {
        e->rank[k] = inputs[k] ? inputs[k]->rank : -1;
        if (inputs[k]) memcpy(e->dims[k], inputs[k]->dims, sizeof e->dims[k]);
    }
    return 1;
}

tm_status tm_model_run(tm_model *m, int n, const char *const *names,
                       const tm_tensor *const *inputs, tm_tensor **outputs,
                       const tm_plan_options *opts, tm_error *err) {
    if (!m || (n && (!names || !inputs)) || !outputs)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_model_run: NULL argument");
    for (int i = 0; i < n; i++)
        if (!names[i]) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "input name %d is NULL", i);
    size_t len = 0, flen = 0;
    char kbuf[2048], fbuf[2048];
    char *key = make_key(n, names, inputs, opts, 1, kbuf, sizeof kbuf, &len);
    char *fkey = key ? make_key(n, names, inputs, opts, 0, fbuf, sizeof fbuf, &flen) : NULL;
    if (!key || !fkey) {
        if (key != kbuf) free(key);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    }
#define FREE_KEYS()                        \
    do {                                   \
        if (key != kbuf) free(key);        \
        if (fkey != fbuf) free(fkey);      \
    } while (0)
    pthread_mutex_lock(&m->cache_lock);
    tm_plan_cache_entry *e = m->cache, *prev = NULL;
    while (e && !(e->key && e->key_len == len && !memcmp(e->key, key, len))) {
        prev = e;
        e = e->next;
    }
    if (!e) {   /* a generic plan of the family that serves these sizes */
        prev = NULL;
        for (e = m->cache; e; prev = e, e = e->next)
            if (e->plan->gen && e->fkey_len == flen && !memcmp(e->fkey, fkey, flen) &&
                tm__gen_accepts(e->plan, n, names, inputs))
                break;
    }
    tm_status st = TM_OK;
    if (e) {
        if (prev) { /* move to front */
            prev->next = e->next;
            e->next = m->cache;
            m->cache = e;
        }
        FREE_KEYS();
        if (e->plan->gen) m->n_generic_runs++;
    } else {
        tm_plan *plan = NULL;
        st = tm_plan_create(m, n, names, inputs, opts, &plan, err);
        if (st == TM_OK) m->n_plans++;
        if (st != TM_OK) {
            pthread_mutex_unlock(&m->cache_lock);
            FREE_KEYS();
            return st;
        }
        /* The entry keeps copies of the keys. */
        char *k2 = malloc(len ? len : 1), *f2 = malloc(flen ? flen : 1);
        if (k2) memcpy(k2, key, len);
        if (f2) memcpy(f2, fkey, flen);
        FREE_KEYS();
        key = k2;
        fkey = f2;
        if (!key || !fkey) {
            free(key);
            free(fkey);
            tm_plan_free(plan);
            pthread_mutex_unlock(&m->cache_lock);
            return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        }
        e = calloc(1, sizeof *e);
        if (!e || !entry_shapes(e, n, inputs)) {
            if (e) {
                e->plan = plan;
                e->key = key;
                e->fkey = fkey;
                entry_free(e);
            } else {
                tm_plan_free(plan);
                free(key);
                free(fkey);
            }
            pthread_mutex_unlock(&m->cache_lock);
            return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        }
        e->key = key;
        e->key_len = len;
        e->fkey = fkey;
        e->fkey_len = flen;
        e->plan = plan;
        e->next = m->cache;
        m->cache = e;
        m->n_cache++;
        try_generic(m, e, n, names, inputs, opts);
        if (m->cache != e) {   /* keep this run's entry first */
            tm_plan_cache_entry **pp = &m->cache;
            while (*pp != e) pp = &(*pp)->next;
            *pp = e->next;
            e->next = m->cache;
            m->cache = e;
        }
        /* Evict the least recently used entries that no run is using: plans for one shape
         * first, generic plans (which serve many) only when nothing else is left. */
        while (m->n_cache > m->opts.plan_cache_limit) {
            tm_plan_cache_entry **pp = &m->cache, **victim = NULL, **generic = NULL;
            for (; *pp; pp = &(*pp)->next)
                if ((*pp)->in_use == 0 && *pp != e) {
                    if ((*pp)->plan->gen) generic = pp;
                    else victim = pp;
                }
            if (!victim) victim = generic;
            if (!victim) break;
            tm_plan_cache_entry *v = *victim;
            *victim = v->next;
            entry_free(v);
            m->n_cache--;
        }
    }
    tm_session *s = e->n_free ? e->free_sessions[--e->n_free] : NULL;
    e->in_use++;
    m->n_runs++;
    pthread_mutex_unlock(&m->cache_lock);
    if (!s) st = tm_session_create(e->plan, &s, err);
    if (st == TM_OK) {
        s->one_thread = opts && opts->size >= offsetof(tm_plan_options, one_thread) + sizeof(int) &&
                        opts->one_thread;
        st = tm_session_run(s, n, names, inputs, outputs, err);
    }
    pthread_mutex_lock(&m->cache_lock);
    e->in_use--;
    if (s) {
        if (e->n_free == e->cap_free) {
            int cap = e->cap_free ? e->cap_free * 2 : 4;
            tm_session **fs = realloc(e->free_sessions, (size_t)cap * sizeof *fs);
            if (fs) {
                e->free_sessions = fs;
                e->cap_free = cap;
            }
        }
        if (e->n_free < e->cap_free) e->free_sessions[e->n_free++] = s;
        else tm_session_free(s);
    }
    pthread_mutex_unlock(&m->cache_lock);
    return st;
}

void tm_model_plan_stats(tm_model *m, tm_plan_stats *out) {
    if (!out) return;
    size_t size = out->size && out->size < sizeof *out ? out->size : sizeof *out;
    tm_plan_stats st;
    memset(&st, 0, sizeof st);
    st.size = size;
    if (m) {
        pthread_mutex_lock(&m->cache_lock);
        st.runs = m->n_runs;
        st.plans = m->n_plans;
        st.generic_plans = m->n_generic;
        st.generic_failed = m->n_generic_failed;
        st.generic_runs = m->n_generic_runs;
        pthread_mutex_unlock(&m->cache_lock);
    }
    memcpy(out, &st, size);
}
