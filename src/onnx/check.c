/* The load-time graph checks of check.h: topological order (a stable sort when needed,
 * cycles named in the error) and model-local function calls (no recursion, bounded
 * inlined size). Not inference, and not the interpreter (lower.c),
 * which runs nodes in the order left here. */
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../core/status.h"
#include "lower.h"

/* Subgraph nesting is bounded by the parser (MAX_NESTING in model.c); this guards the
 * recursion here should that change. */
#define MAX_DEPTH 64

typedef struct name_map name_map;

typedef struct checker {
    tm_error *err;
    const char *src;
    const tm_onnx_model *model;
    name_map *functions;  /* function name -> index of the first one of that name */
} checker;

/* ---- A string set / map (open addressing; keys are borrowed from the IR) ---------- */

struct name_map {
    const char **keys;
    int *vals;
    size_t cap, count;
};

static uint64_t hash_name(const char *s) {
    uint64_t h = 1469598103934665603ULL;
    while (*s) h = (h ^ (unsigned char)*s++) * 1099511628211ULL;
    return h;
}

static void map_free(name_map *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

static size_t map_slot(const name_map *m, const char *key) {
    size_t i = hash_name(key) & (m->cap - 1);
    while (m->keys[i] && strcmp(m->keys[i], key)) i = (i + 1) & (m->cap - 1);
    return i;
}

/* The value of key, or `missing`. */
static int map_get(const name_map *m, const char *key, int missing) {
    if (!m->cap) return missing;
    size_t i = map_slot(m, key);
    return m->keys[i] ? m->vals[i] : missing;
}

/* Inserts key (when absent) with val; *old receives the existing value, or -2 when the
 * key was new. -1 when out of memory. */
static int map_put(name_map *m, const char *key, int val, int *old) {
    if ((m->count + 1) * 2 > m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        name_map grown = {calloc(cap, sizeof *grown.keys), calloc(cap, sizeof *grown.vals), cap, 0};
        if (!grown.keys || !grown.vals) {
            map_free(&grown);
            return -1;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (!m->keys[i]) continue;
            size_t j = map_slot(&grown, m->keys[i]);
            grown.keys[j] = m->keys[i];
            grown.vals[j] = m->vals[i];
            grown.count++;
        }
        map_free(m);
        *m = grown;
    }
    size_t i = map_slot(m, key);
    if (m->keys[i]) {
        *old = m->vals[i];
        return 0;
    }
    m->keys[i] = key;
    m->vals[i] = val;
    m->count++;
    *old = -2;
    return 0;
}

static tm_status no_memory(checker *k) {
    return tm__fail(k->err, TM_ERR_NO_MEMORY, "%s: out of memory checking the graph", k->src);
}

/* "node 'n' (Op)", or "the Op node writing 'y'" for unnamed nodes. */
static void node_label(char *buf, size_t cap, const tm_node *n) {
    if (n->name[0])
        snprintf(buf, cap, "node '%.100s' (%.60s)", n->name, n->op_type);
    else if (n->n_outputs && n->outputs[0][0])
        snprintf(buf, cap, "the %.60s node writing '%.100s'", n->op_type, n->outputs[0]);
    else
        snprintf(buf, cap, "an unnamed %.60s node", n->op_type);
}

/* ---- One scope: a graph or a function body ---------------------------------------- */

/* What defines a scope's name other than its nodes (node indices are >= 0, and -2
 * means "not defined here"). */
enum { DEF_INPUT = -1, DEF_INITIALIZER = -3 };

typedef struct scope {
    const char *what;     /* "graph 'g'" or "function 'f'" */
    tm_node *nodes;
    int n_nodes;
    name_map defs;        /* name -> producing node, DEF_INPUT or DEF_INITIALIZER */
    name_map *free_names; /* names read here but defined in no scope up to this one */
} scope;

static tm_status check_graph(checker *k, tm_graph *g, int depth, name_map *free_out);

/* Registers the scope's node outputs. A name written twice keeps its first writer:
 * ONNX wants single assignment, but published exports (ONNX Runtime's gpt2_past.onnx)
 * repeat a dead Constant, and ONNX Runtime accepts them, so a repeat is not an error;
 * the interpreter reads whichever value is bound when the reader runs. */
static tm_status define_outputs(checker *k, scope *s) {
    for (int i = 0; i < s->n_nodes; i++) {
        const tm_node *n = &s->nodes[i];
        for (int j = 0; j < n->n_outputs; j++) {
            int old;
            if (n->outputs[j][0] && map_put(&s->defs, n->outputs[j], i, &old) < 0)
                return no_memory(k);
        }
    }
    return TM_OK;
}

/* The names node i reads: its inputs and what its subgraphs read from outside. */
typedef struct node_reads {
    const char **names;
    int n, cap;
} node_reads;

static tm_status add_read(checker *k, node_reads *r, const char *name) {
    if (r->n == r->cap) {
        int cap = r->cap ? r->cap * 2 : 16;
        const char **grown = realloc(r->names, (size_t)cap * sizeof *grown);
        if (!grown) return no_memory(k);
        r->names = grown;
        r->cap = cap;
    }
    r->names[r->n++] = name;
    return TM_OK;
}

/* Reads of every node: reads[start[i] .. start[i + 1]). Checks the subgraphs on the
 * way (each once), collecting what they read from this scope or above. */
static tm_status collect_reads(checker *k, scope *s, int depth, node_reads *r, int *start) {
    for (int i = 0; i < s->n_nodes; i++) {
        tm_node *n = &s->nodes[i];
        start[i] = r->n;
        for (int j = 0; j < n->n_inputs; j++) {
            if (!n->inputs[j][0]) continue;
            tm_status st = add_read(k, r, n->inputs[j]);
            if (st) return st;
        }
        for (int a = 0; a < n->n_attrs; a++) {
            tm_attr *at = &n->attrs[a];
            size_t count = at->type == TM_ATTR_GRAPH ? (at->g != NULL)
                         : at->type == TM_ATTR_GRAPHS ? at->n : 0;
            for (size_t q = 0; q < count; q++) {
                tm_graph *sub = at->type == TM_ATTR_GRAPH ? at->g : at->graphs[q];
                name_map sub_free = {0};
                tm_status st = check_graph(k, sub, depth + 1, &sub_free);
                for (size_t e = 0; st == TM_OK && e < sub_free.cap; e++) {
                    if (!sub_free.keys[e]) continue;
                    st = add_read(k, r, sub_free.keys[e]);
                }
                map_free(&sub_free);
                if (st) return st;
            }
        }
    }
    start[s->n_nodes] = r->n;
    for (int i = 0; i < r->n; i++) {
        if (map_get(&s->defs, r->names[i], -2) != -2) continue;
        int old;
        if (map_put(s->free_names, r->names[i], 0, &old) < 0) return no_memory(k);
    }
    return TM_OK;
}

/* A cycle among the nodes not yet placed: walk back through producers until a node
 * repeats, then name the loop in data-flow order. */
static tm_status report_cycle(checker *k, scope *s, const node_reads *r, const int *start,
                              const char *placed) {
    int n = s->n_nodes;
    int *seen_at = malloc((size_t)n * sizeof *seen_at);
    int *path = malloc((size_t)(n + 1) * sizeof *path);
    if (!seen_at || !path) {
        free(seen_at);
        free(path);
        return no_memory(k);
    }
    for (int i = 0; i < n; i++) seen_at[i] = -1;
    int v = 0;
    while (placed[v]) v++;
    int len = 0;
    while (seen_at[v] < 0) {
        seen_at[v] = len;
        path[len++] = v;
        int next = -1;
        for (int q = start[v]; q < start[v + 1] && next < 0; q++) {
            int p = map_get(&s->defs, r->names[q], -2);
            if (p >= 0 && !placed[p]) next = p;
        }
        v = next;   /* every unplaced node has an unplaced producer: never -1 */
    }
    /* path[seen_at[v] .. len) is the loop, each node read by the one before it. */
    char msg[700];
    size_t used = 0;
    int first = seen_at[v], shown = 0;
    for (int i = len - 1; i >= first && used < sizeof msg; i--) {
        char label[256];
        node_label(label, sizeof label, &s->nodes[path[i]]);
        if (shown == 6 && i > first) {
            used += (size_t)snprintf(msg + used, sizeof msg - used, " -> ...");
            i = first;
            node_label(label, sizeof label, &s->nodes[path[i]]);
        }
        used += (size_t)snprintf(msg + used, sizeof msg - used, "%s%s", shown ? " -> " : "", label);
        shown++;
    }
    char head[256];
    node_label(head, sizeof head, &s->nodes[path[len - 1]]);
    const tm_node *culprit = &s->nodes[path[len - 1]];
    tm_status st;
    if (len - first == 1)
        st = tm__fail_at(k->err, TM_ERR_PARSE, culprit->name, culprit->op_type, "",
                         "%s: %s of %s reads its own output: a graph may not have cycles",
                         k->src, head, s->what);
    else
        st = tm__fail_at(k->err, TM_ERR_PARSE, culprit->name, culprit->op_type, "",
                         "%s: %s has a cycle: %s -> back to the first (each node reads an "
                         "output of the one before it)", k->src, s->what, msg);
    free(seen_at);
    free(path);
    return st;
}

/* Kahn's algorithm, always taking the earliest ready node in file order, so that the
 * result differs from the file only where it must. */
static tm_status sort_nodes(checker *k, scope *s, const node_reads *r, const int *start) {
    int n = s->n_nodes;
    int *indegree = calloc((size_t)n + 1, sizeof *indegree);
    int *order = malloc(((size_t)n + 1) * sizeof *order);
    int *heap = malloc(((size_t)n + 1) * sizeof *heap);
    int *succ_start = calloc((size_t)n + 2, sizeof *succ_start);
    int *succ = malloc(((size_t)r->n + 1) * sizeof *succ);
    char *placed = calloc((size_t)n + 1, 1);
    tm_node *sorted = NULL;
    tm_status st = TM_OK;
    if (!indegree || !order || !heap || !succ_start || !succ || !placed) {
        st = no_memory(k);
        goto done;
    }
    /* Edges producer -> reader, once per read (duplicates only repeat a count). */
    for (int i = 0; i < n; i++)
        for (int q = start[i]; q < start[i + 1]; q++) {
            int p = map_get(&s->defs, r->names[q], -2);
            if (p >= 0) {
                succ_start[p + 1]++;
                indegree[i]++;
            }
        }
    for (int i = 0; i < n; i++) succ_start[i + 1] += succ_start[i];
    int *fill = calloc((size_t)n + 1, sizeof *fill);
    if (!fill) {
        st = no_memory(k);
        goto done;
    }
    for (int i = 0; i < n; i++)
        for (int q = start[i]; q < start[i + 1]; q++) {
            int p = map_get(&s->defs, r->names[q], -2);
            if (p >= 0) succ[succ_start[p] + fill[p]++] = i;
        }
    free(fill);
    int heap_n = 0, n_out = 0;
    for (int i = 0; i < n; i++) {
        if (indegree[i]) continue;
        heap[heap_n++] = i;   /* increasing: already a valid min-heap */
    }
    while (heap_n) {
        int v = heap[0];
        heap[0] = heap[--heap_n];
        for (int i = 0;;) {   /* sift down */
            int l = 2 * i + 1, m = i;
            if (l < heap_n && heap[l] < heap[m]) m = l;
            if (l + 1 < heap_n && heap[l + 1] < heap[m]) m = l + 1;
            if (m == i) break;
            int t = heap[i]; heap[i] = heap[m]; heap[m] = t;
            i = m;
        }
        order[n_out++] = v;
        placed[v] = 1;
        for (int e = succ_start[v]; e < succ_start[v + 1]; e++) {
            int w = succ[e];
            if (--indegree[w]) continue;
            int i = heap_n++;   /* sift up */
            heap[i] = w;
            while (i > 0 && heap[(i - 1) / 2] > heap[i]) {
                int t = heap[i]; heap[i] = heap[(i - 1) / 2]; heap[(i - 1) / 2] = t;
                i = (i - 1) / 2;
            }
        }
    }
    if (n_out < n) {
        st = report_cycle(k, s, r, start, placed);
        goto done;
    }
    sorted = malloc((size_t)n * sizeof *sorted);
    if (!sorted) {
        st = no_memory(k);
        goto done;
    }
    for (int i = 0; i < n; i++) sorted[i] = s->nodes[order[i]];
    memcpy(s->nodes, sorted, (size_t)n * sizeof *sorted);
done:
    free(indegree);
    free(order);
    free(heap);
    free(succ_start);
    free(succ);
    free(placed);
    free(sorted);
    return st;
}

/* Checks one scope whose inputs and initializers are already in s->defs. */
static tm_status check_scope(checker *k, scope *s, int depth) {
    tm_status st = define_outputs(k, s);
    if (st) return st;
    node_reads r = {0};
    int *start = malloc(((size_t)s->n_nodes + 1) * sizeof *start);
    if (!start) return no_memory(k);
    st = collect_reads(k, s, depth, &r, start);
    /* In order when every read name comes from an earlier node (or from outside). */
    int in_order = 1;
    for (int i = 0; st == TM_OK && i < s->n_nodes && in_order; i++)
        for (int q = start[i]; q < start[i + 1]; q++)
            if (map_get(&s->defs, r.names[q], -2) >= i) in_order = 0;
    if (st == TM_OK && !in_order) st = sort_nodes(k, s, &r, start);
    free(r.names);
    free(start);
    return st;
}

static tm_status define_input(checker *k, scope *s, const char *name, int how) {
    if (!name[0]) return TM_OK;
    int old;
    if (map_put(&s->defs, name, how, &old) < 0) return no_memory(k);
    return TM_OK;  /* an input that is also an initializer (IR < 4) is fine */
}

static tm_status check_graph(checker *k, tm_graph *g, int depth, name_map *free_out) {
    if (depth > MAX_DEPTH)
        return tm__fail(k->err, TM_ERR_PARSE, "%s: subgraphs nested deeper than %d levels",
                        k->src, MAX_DEPTH);
    char what[160];
    snprintf(what, sizeof what, "%s '%.120s'", depth ? "subgraph" : "graph", g->name);
    scope s = {what, g->nodes, g->n_nodes, {0}, free_out};
    tm_status st = TM_OK;
    for (int i = 0; st == TM_OK && i < g->n_inputs; i++)
        st = define_input(k, &s, g->inputs[i].name, DEF_INPUT);
    for (int i = 0; st == TM_OK && i < g->n_inits; i++)
        st = define_input(k, &s, g->inits[i].name, DEF_INITIALIZER);
    if (st == TM_OK) st = check_scope(k, &s, depth);
    map_free(&s.defs);
    return st;
}

static tm_status check_function_body(checker *k, tm_function *f) {
    char what[160];
    snprintf(what, sizeof what, "function '%.120s'", f->name);
    name_map free_names = {0};
    scope s = {what, f->nodes, f->n_nodes, {0}, &free_names};
    tm_status st = TM_OK;
    for (int i = 0; st == TM_OK && i < f->n_inputs; i++)
        st = define_input(k, &s, f->inputs[i], DEF_INPUT);
    if (st == TM_OK) st = check_scope(k, &s, 1);
    map_free(&s.defs);
    map_free(&free_names);
    return st;
}

/* ---- Model-local functions: recursion and inlined size ----------------------------- */

/* As the interpreter resolves it (lower.c, run_node): a registered operator wins over
 * a model-local function of the same domain and name. */
static int64_t opset_for(const tm_opset_import *ops, int n, const char *domain) {
    for (int i = 0; i < n; i++)
        if (!strcmp(ops[i].domain, domain)) return ops[i].version;
    return domain[0] ? 1 : -1;
}

static int callee_of(const checker *k, const tm_node *n, const tm_opset_import *ops, int n_ops) {
    const tm_onnx_model *m = k->model;
    int first = map_get(k->functions, n->op_type, -1);
    if (first < 0) return -1;
    int64_t v = opset_for(ops, n_ops, n->domain);
    if (v >= 0 && tm_op_lookup(n->domain, n->op_type, v)) return -1;
    for (int i = first; i < m->n_functions; i++)
        if (!strcmp(m->functions[i].name, n->op_type) && !strcmp(m->functions[i].domain, n->domain))
            return i;
    return -1;
}

typedef struct fn_state {
    int color;            /* 0 unvisited, 1 on the call stack, 2 done */
    uint64_t size;        /* nodes with every call inlined, saturating */
} fn_state;

static uint64_t sat_add(uint64_t a, uint64_t b) {
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static tm_status function_size(checker *k, int f, fn_state *fs, int *stack, int depth);

/* Inlined size of nodes (and their subgraphs), calling into functions as needed. */
static tm_status nodes_size(checker *k, const tm_node *nodes, int n, const tm_opset_import *ops,
                            int n_ops, fn_state *fs, int *stack, int depth, int graph_depth,
                            uint64_t *out) {
    if (graph_depth > MAX_DEPTH)
        return tm__fail(k->err, TM_ERR_PARSE, "%s: subgraphs nested deeper than %d levels",
                        k->src, MAX_DEPTH);
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        const tm_node *node = &nodes[i];
        total = sat_add(total, 1);
        int callee = callee_of(k, node, ops, n_ops);
        if (callee >= 0) {
            tm_status st = function_size(k, callee, fs, stack, depth);
            if (st) return st;
            total = sat_add(total, fs[callee].size);
        }
        for (int a = 0; a < node->n_attrs; a++) {
            const tm_attr *at = &node->attrs[a];
            size_t count = at->type == TM_ATTR_GRAPH ? (at->g != NULL)
                         : at->type == TM_ATTR_GRAPHS ? at->n : 0;
            for (size_t q = 0; q < count; q++) {
                const tm_graph *g = at->type == TM_ATTR_GRAPH ? at->g : at->graphs[q];
                uint64_t sub = 0;
                tm_status st = nodes_size(k, g->nodes, g->n_nodes, ops, n_ops, fs, stack, depth,
                                          graph_depth + 1, &sub);
                if (st) return st;
                total = sat_add(total, sub);
            }
        }
    }
    *out = total;
    return TM_OK;
}

static tm_status function_size(checker *k, int f, fn_state *fs, int *stack, int depth) {
    const tm_onnx_model *m = k->model;
    const tm_function *fn = &m->functions[f];
    if (fs[f].color == 2) return TM_OK;
    if (fs[f].color == 1) {
        /* stack[0 .. depth) holds the open calls; the loop starts where f is. */
        char chain[600];
        size_t used = 0;
        int from = depth - 1;
        while (from > 0 && stack[from] != f) from--;
        for (int i = from; i < depth && used < sizeof chain; i++)
            used += (size_t)snprintf(chain + used, sizeof chain - used, "'%.80s' -> ",
                                     m->functions[stack[i]].name);
        if (used < sizeof chain)
            snprintf(chain + used, sizeof chain - used, "'%.80s'", fn->name);
        return tm__fail(k->err, TM_ERR_PARSE, "%s: function '%s' calls itself (%s): "
                        "model-local functions may not be recursive", k->src, fn->name, chain);
    }
    /* The interpreter inlines calls no deeper than this either (MAX_DEPTH in lower.c). */
    if (depth >= MAX_DEPTH)
        return tm__fail(k->err, TM_ERR_UNSUPPORTED, "%s: function '%s' is reached through "
                        "more than %d nested function calls", k->src, fn->name, MAX_DEPTH);
    fs[f].color = 1;
    stack[depth] = f;
    uint64_t size = 0;
    tm_status st = nodes_size(k, fn->nodes, fn->n_nodes, fn->n_opsets ? fn->opsets : m->opsets,
                              fn->n_opsets ? fn->n_opsets : m->n_opsets, fs, stack, depth + 1, 0,
                              &size);
    if (st) return st;
    fs[f].size = size;
    fs[f].color = 2;
    return TM_OK;
}

static tm_status check_functions(checker *k) {
    const tm_onnx_model *m = k->model;
    fn_state *fs = calloc((size_t)m->n_functions + 1, sizeof *fs);
    int *stack = calloc((size_t)m->n_functions + 1, sizeof *stack);
    name_map by_name = {0};
    k->functions = &by_name;
    tm_status st = fs && stack ? TM_OK : no_memory(k);
    for (int f = 0; st == TM_OK && f < m->n_functions; f++) {
        int old;
        if (map_put(&by_name, m->functions[f].name, f, &old) < 0) st = no_memory(k);
    }
    for (int f = 0; st == TM_OK && f < m->n_functions; f++) {
        st = function_size(k, f, fs, stack, 0);
        if (st == TM_OK && fs[f].size > TM_CHECK_MAX_EXPANDED_NODES)
            st = tm__fail(k->err, TM_ERR_UNSUPPORTED, "%s: function '%s' expands to more than "
                          "%llu nodes once its calls are inlined", k->src, m->functions[f].name,
                          (unsigned long long)TM_CHECK_MAX_EXPANDED_NODES);
    }
    uint64_t total = 0;
    if (st == TM_OK)
        st = nodes_size(k, m->graph->nodes, m->graph->n_nodes, m->opsets, m->n_opsets, fs, stack,
                        0, 0, &total);
    if (st == TM_OK && total > TM_CHECK_MAX_EXPANDED_NODES)
        st = tm__fail(k->err, TM_ERR_UNSUPPORTED, "%s: the graph expands to more than %llu nodes "
                      "once its function calls are inlined", k->src,
                      (unsigned long long)TM_CHECK_MAX_EXPANDED_NODES);
    free(fs);
    free(stack);
    map_free(&by_name);
    k->functions = NULL;
    return st;
}

int tm_onnx_check(tm_onnx_model *m, const char *src, tm_error *err) {
    checker k = {err, src ? src : "<buffer>", m, NULL};
    if (!m || !m->graph) return tm__fail(err, TM_ERR_PARSE, "%s: the model has no graph", k.src);
    /* Without an imported opset no node has a meaning (ONNX Runtime refuses these too). */
    if (m->n_opsets == 0)
        return tm__fail(err, TM_ERR_PARSE, "%s: the model imports no operator set "
                        "(ModelProto.opset_import is empty)", k.src);
    name_map free_names = {0};
    tm_status st = check_graph(&k, m->graph, 0, &free_names);
    map_free(&free_names);
    for (int i = 0; st == TM_OK && i < m->n_functions; i++)
        st = check_function_body(&k, &m->functions[i]);
    if (st == TM_OK && m->n_functions) st = check_functions(&k);
    return st;
}
