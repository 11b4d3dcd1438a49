/* ai.onnx.preview.training Gradient: the derivatives of the graph value named y with
 * respect to the values named xs, at the values this node is given (xs, then zs). The
 * part of the graph between them is run again on those values with taping on, then
 * differentiated by the autodiff engine (../../core/autodiff.h): no per-operator gradient
 * code here. Eager and traced alike. Not higher order: a Gradient inside the region, or
 * inside a differentiated run, is an error. */
#include <stdlib.h>
#include <string.h>
#include "../lower.h"
#include "../../core/autodiff.h"

typedef struct name_set {
    const char **names;
    int n, cap;
} name_set;

static int set_has(const name_set *s, const char *name) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], name)) return 1;
    return 0;
}

static int set_add(name_set *s, const char *name) {
    if (!name[0] || set_has(s, name)) return 0;
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 32;
        const char **n = realloc(s->names, (size_t)cap * sizeof *n);
        if (!n) return -1;
        s->names = n;
        s->cap = cap;
    }
    s->names[s->n++] = name;
    return 0;
}

static int has_subgraph(const tm_node *n) {
    for (int a = 0; a < n->n_attrs; a++)
        if (n->attrs[a].type == TM_ATTR_GRAPH || n->attrs[a].type == TM_ATTR_GRAPHS) return 1;
    return 0;
}

/* The nodes of g that compute y from the given values: ancestors of y that depend on one
 * of them (a node holding a subgraph counts as dependent: its body may read them). Marks
 * them in `take`, in graph order. */
static tm_status select_region(tm_lower *L, const tm_graph *g, const tm_node *self,
                               char *const *given, int n_given, const char *y, uint8_t *take) {
    name_set down = {0}, need = {0};
    tm_status st = TM_OK;
    for (int i = 0; i < n_given && st == TM_OK; i++)
        if (set_add(&down, given[i])) st = TM_ERR_NO_MEMORY;
    uint8_t *depends = calloc((size_t)g->n_nodes + 1, 1);
    if (!depends) st = TM_ERR_NO_MEMORY;
    for (int k = 0; st == TM_OK && k < g->n_nodes; k++) {
        const tm_node *n = &g->nodes[k];
        if (n == self) continue;
        int dep = has_subgraph(n);
        for (int i = 0; i < n->n_inputs && !dep; i++) dep = set_has(&down, n->inputs[i]);
        depends[k] = (uint8_t)dep;
        for (int o = 0; dep && o < n->n_outputs && st == TM_OK; o++)
            if (set_add(&down, n->outputs[o])) st = TM_ERR_NO_MEMORY;
    }
    if (st == TM_OK && set_add(&need, y)) st = TM_ERR_NO_MEMORY;
    for (int k = g->n_nodes - 1; st == TM_OK && k >= 0; k--) {
        const tm_node *n = &g->nodes[k];
        if (n == self) continue;
        int needed = 0;
        for (int o = 0; o < n->n_outputs && !needed; o++) needed = set_has(&need, n->outputs[o]);
        /* A value given to this node is not computed again: it is an input of the region. */
        int given_here = 0;
        for (int o = 0; o < n->n_outputs && needed; o++)
            for (int i = 0; i < n_given; i++)
                if (!strcmp(n->outputs[o], given[i])) given_here = 1;
        if (!needed || given_here) continue;
        take[k] = depends[k];
        for (int i = 0; i < n->n_inputs && st == TM_OK; i++)
            if (set_add(&need, n->inputs[i])) st = TM_ERR_NO_MEMORY;
    }
    free(down.names);
    free(need.names);
    free(depends);
    if (st != TM_OK) return tm_lfail(L, st, "out of memory selecting the differentiated nodes");
    return TM_OK;
}

/* A fresh value standing for the given one inside the region, so that taping tracks what
 * depends on it there and nowhere else: a known tensor itself (borrowed when the model
 * owns it; a copy when the context does, since a plan may outlive the context's own
 * values), a view of an unknown one. */
static tm_val fresh_alias(tm_ctx *c, tm_val v) {
    const tm_tensor *t = tm_vdata(c, v);
    if (t && c->vals[v].owned) return tm_val_tensor(c, tm_tensor_clone(t, c->allocator), 0);
    if (t) return tm_val_tensor(c, (tm_tensor *)t, 1);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = tm_vrank(c, v);
    for (int d = 0; d < tm_vrank(c, v); d++) a.i[1 + d] = tm_vdims(c, v)[d];
    return tm_prim(c, TM_P_RESHAPE, &v, 1, &a);
}

static tm_status lower_gradient(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    const tm_bytes *xs = NULL, *zs = NULL;
    int nx = tm_attr_strings(L, "xs", &xs), nz = tm_attr_strings(L, "zs", &zs);
    const char *y = tm_attr_s(L, "y", NULL);
    if (nz < 0) nz = 0;
    if (nx < 1 || !y || !y[0])
        return tm_lfail(L, TM_ERR_PARSE, "Gradient needs the attributes xs (names) and y");
    if (tm_lnin(L) != nx + nz)
        return tm_lfail(L, TM_ERR_SHAPE, "Gradient takes one input per name of xs and zs (%d), "
                        "got %d", nx + nz, tm_lnin(L));
    if (c->tape)
        return tm_lfail(L, TM_ERR_UNSUPPORTED, "a Gradient inside a differentiated run "
                        "(higher-order gradients) is not supported");
    const tm_graph *g = tm_lgraph(L);
    if (!g) return tm_lfail(L, TM_ERR_UNSUPPORTED, "Gradient inside a function body");
    int n_given = nx + nz;
    tm_bytes *given = calloc((size_t)n_given + 1, sizeof *given);
    uint8_t *take = calloc((size_t)g->n_nodes + 1, 1);
    tm_oval *in = calloc((size_t)n_given + 1, sizeof *in);
    tm_value_info *inputs = calloc((size_t)n_given + 1, sizeof *inputs);
    char **in_names = calloc((size_t)n_given + 1, sizeof *in_names);
    tm_val *alias = calloc((size_t)nx + 1, sizeof *alias), *grads = calloc((size_t)nx + 1, sizeof *grads);
    tm_node *nodes = NULL;
    tm_status st = given && take && in && inputs && in_names && alias && grads ? TM_OK
                 : tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; st == TM_OK && i < n_given; i++) {
        given[i] = i < nx ? xs[i] : zs[i - nx];
        in_names[i] = strndup(given[i].data, given[i].len);
        if (!in_names[i]) st = tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
        inputs[i].name = in_names[i];
    }
    if (st == TM_OK) st = select_region(L, g, tm_lnode(L), in_names, n_given, y, take);
    int n_take = 0;
    for (int k = 0; st == TM_OK && k < g->n_nodes; k++) n_take += take[k];
    nodes = calloc((size_t)n_take + 1, sizeof *nodes);
    if (st == TM_OK && !nodes) st = tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    for (int k = 0, j = 0; st == TM_OK && k < g->n_nodes; k++) {
        if (!take[k]) continue;
        if (!strcmp(g->nodes[k].op_type, "Gradient"))
            st = tm_lfail(L, TM_ERR_UNSUPPORTED, "the gradient of y passes through Gradient "
                          "node '%s' (higher-order gradients are not supported)",
                          g->nodes[k].name);
        nodes[j++] = g->nodes[k];
    }
    /* Run the region again on this node's inputs, xs tracked, then differentiate it. */
    int32_t first_node = c->n_nodes;
    for (int i = 0; st == TM_OK && i < n_given; i++) {
        const tm_oval *ov = tm_lin_oval(L, i);
        if (!ov || ov->kind != TM_OV_TENSOR) {
            st = tm_lfail(L, TM_ERR_DTYPE, "input %d ('%s') must be a tensor", i, in_names[i]);
            break;
        }
        in[i] = *ov;
        if (i < nx) {
            alias[i] = fresh_alias(c, ov->v);
            if (alias[i] == TM_NONE) {
                st = tm_ctx_ok(c) ? tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory") : c->status;
                break;
            }
            in[i].v = alias[i];
            if (alias[i] != TM_NONE && tm_dtype_is_differentiable(tm_vdtype(c, alias[i])))
                c->vals[alias[i]].tracked = 1;
        }
    }
    first_node = c->n_nodes;
    tm_value_info out_info = {(char *)y, {0}};
    tm_graph region = {(char *)"gradient region", nodes, n_take, NULL, 0, inputs, n_given,
                       &out_info, 1, NULL, 0};
    tm_oval out = {0};
    if (st == TM_OK && tm_ctx_ok(c)) {
        c->tape = 1;
        st = tm_lower_subgraph(L, &region, n_given, in, &out);
        c->tape = 0;
    }
    if (st == TM_OK && !tm_ctx_ok(c)) st = c->status;
    if (st == TM_OK && (out.kind != TM_OV_TENSOR || !tm_dtype_is_differentiable(tm_vdtype(c, out.v))))
        st = tm_lfail(L, TM_ERR_DTYPE, "y ('%s') must be a float tensor", y);
    if (st == TM_OK) {
        tm_val seed = tm_grad_zeros_like(c, out.v);
        seed = tm_add(c, seed, tm_grad_scalar(c, out.v, 1.0));  /* ones: d sum(y) */
        st = tm_backward(c, out.v, seed, first_node, nx, alias, grads);
    }
    for (int i = 0; st == TM_OK && i < nx; i++) {
        tm_val gi = grads[i] != TM_NONE ? grads[i] : tm_grad_zeros_like(c, in[i].v);
        if (tm_lwants(L, i)) tm_lout(L, i, gi);
    }
    if (st == TM_OK && !tm_ctx_ok(c)) st = c->status;
    /* Nothing stays tracked for the rest of the graph; an eager tape is spent. */
    for (tm_val v = 0; v < c->n_vals; v++) {
        c->vals[v].tracked = 0;
        c->vals[v].cut = 0;
        c->vals[v].kept = 0;
    }
    if (c->mode == TM_MODE_EAGER) {
        for (int32_t k = first_node; k < c->n_nodes; k++) {
            free(c->nodes[k].in);
            free(c->nodes[k].where);
        }
        if (c->n_nodes > first_node) c->n_nodes = first_node;
    }
    if (out.kind == TM_OV_SEQ) free(out.seq);
    for (int i = 0; in_names && i < n_given; i++) free(in_names[i]);
    free(in_names);
    free(inputs);
    free(given);
    free(take);
    free(in);
    free(alias);
    free(grads);
    free(nodes);
    return st == TM_OK ? c->status : st;
}

TM_REGISTER_OP("ai.onnx.preview.training", "Gradient", 1, 1, lower_gradient);
