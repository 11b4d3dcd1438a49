/* Trainable parameters: which float initializers of the main graph become parameters
 * (tm_load_options.trainable, by name or glob), their store (one owned copy each, which
 * plans read at run time and optimizers update in place), the public accessors, and the
 * selection of the parameters a gradient plan differentiates. Not autodiff (grad.c). */
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "chunks.h"
#include "runtime.h"

/* Operators whose float inputs are parts of a quantized weight (scales, zero points) or
 * whose integer arithmetic has no gradient. */
static int is_quantized_op(const tm_node *n) {
    static const char *const ops[] = {
        "DequantizeLinear", "QuantizeLinear", "DynamicQuantizeLinear", "MatMulInteger",
        "ConvInteger", "MatMulNBits", "GatherBlockQuantized", "MatMulIntegerToFloat",
        "DynamicQuantizeMatMul", "QAttention", "QGemm", "DynamicQuantizeLSTM", "MatMulBnb4",
        "MatMulFpQ4", "QOrderedMatMul", "QOrderedLayerNormalization", "QOrderedGelu",
        "QOrderedAttention", "QOrderedLongformerAttention",
    };
    if (!strncmp(n->op_type, "QLinear", 7)) return 1;
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++)
        if (!strcmp(n->op_type, ops[i])) return 1;
    return 0;
}

/* Why initializer i of g cannot be a parameter, or NULL when it can. */
static const char *not_trainable(const tm_graph *g, int i, char *buf, size_t cap) {
    const tm_tensor *t = g->inits[i].tensor;
    if (!tm_dtype_is_differentiable(t->dtype)) {
        snprintf(buf, cap, "it is a %s tensor, not a float one%s", tm_dtype_name(t->dtype),
                 tm_dtype_is_float(t->dtype) ? "" : " (quantized weights have no gradient)");
        return buf;
    }
    for (int k = 0; k < g->n_nodes; k++) {
        const tm_node *n = &g->nodes[k];
        if (!is_quantized_op(n)) continue;
        for (int j = 0; j < n->n_inputs; j++)
            if (!strcmp(n->inputs[j], g->inits[i].name)) {
                snprintf(buf, cap, "it is part of a quantized weight (input %d of %s node "
                         "'%s'), and quantized weights have no gradient", j, n->op_type,
                         n->name);
                return buf;
            }
    }
    return NULL;
}

static int is_pattern(const char *s) { return strpbrk(s, "*?[") != NULL; }

static int name_selected(const char *name, int n, const char *const *names) {
    if (n == 0) return 1;
    for (int i = 0; i < n; i++)
        if (names[i] && (is_pattern(names[i]) ? !fnmatch(names[i], name, 0) : !strcmp(names[i], name)))
            return 1;
    return 0;
}

static int initializer_of(const tm_graph *g, const char *name) {
    for (int i = 0; i < g->n_inits; i++)
        if (!strcmp(g->inits[i].name, name)) return i;
    return -1;
}

/* Every name the caller gave must mean something: an exact name a trainable float
 * initializer, a pattern at least one. */
static tm_status check_names(const tm_graph *g, int n, const char *const *names,
                             tm_error *err) {
    char why[400];
    for (int k = 0; k < n; k++) {
        const char *want = names[k];
        if (!want) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "trainable name %d is NULL", k);
        if (is_pattern(want)) {
            int any = 0;
            for (int i = 0; i < g->n_inits && !any; i++)
                any = !fnmatch(want, g->inits[i].name, 0) && !not_trainable(g, i, why, sizeof why);
            if (!any)
                return tm__fail_at(err, TM_ERR_NOT_FOUND, NULL, NULL, want, "the pattern '%s' "
                                   "selects no float initializer that can be trained", want);
            continue;
        }
        int i = initializer_of(g, want);
        if (i < 0)
            return tm__fail_at(err, TM_ERR_NOT_FOUND, NULL, NULL, want, "the model has no "
                               "initializer named '%s'", want);
        if (not_trainable(g, i, why, sizeof why))
            return tm__fail_at(err, TM_ERR_UNSUPPORTED, NULL, NULL, want, "initializer '%s' "
                               "cannot be trained: %s", want, why);
    }
    return TM_OK;
}

/* The dtype a parameter is stored in: the one the graph computes in. */
static tm_dtype store_dtype(const tm_model *m, const tm_tensor *t) {
    tm_dtype dt = t->dtype;
    if (m->opts.compute_type == TM_FLOAT && (dt == TM_FLOAT16 || dt == TM_BFLOAT16)) dt = TM_FLOAT;
    return dt;
}

/* Bytes of a parameter's place in the slab: its data rounded up to a cache line. */
static size_t slab_bytes(const tm_model *m, const tm_tensor *t) {
    return (tm_tensor_numel_(t) * tm_dtype_elem_size(store_dtype(m, t)) + 63) / 64 * 64;
}

/* The parameter's storage: a copy in the dtype the graph computes in, at *at in the slab
 * (advanced past it), or its own allocation without one. */
static tm_tensor *store_copy(const tm_model *m, const tm_tensor *t, char **at) {
    tm_dtype dt = store_dtype(m, t);
    tm_tensor *s;
    if (*at) {
        s = tm_tensor_borrow(dt, t->rank, t->dims, *at);
        if (s) *at += slab_bytes(m, t);
    } else {
        s = tm_tensor_alloc(dt, t->rank, t->dims, m->opts.allocator);
    }
    if (!s) return NULL;
    int64_t n = tm_tensor_numel_(t);
    if (dt == t->dtype) {
        if (t->nbytes) memcpy(s->data, t->data, t->nbytes);
    } else {
        for (int64_t i = 0; i < n; i++)
            tm_store_f64(s->data, dt, (size_t)i, tm_load_f64(t->data, t->dtype, (size_t)i));
    }
    return s;
}

/* The whole pages of a copied parameter's bytes in the mapped file leave the process's
 * resident set: nothing reads them again (the store is the parameter now), and the
 * mapping refaults them from the page cache if anything does. Memory that is not part of
 * a file mapping (a tensor the loader decoded) is left alone. */
static void drop_mapped_pages(const tm_model *m, const tm_tensor *t) {
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), lo = (uintptr_t)t->data;
    uintptr_t hi = lo + t->nbytes;
    for (int i = 0; i < m->onnx->n_maps; i++) {
        uintptr_t base = (uintptr_t)m->onnx->maps[i].base, end = base + m->onnx->maps[i].size;
        if (!base || lo < base || hi > end) continue;
        uintptr_t a = (lo + page - 1) & ~(page - 1), b = hi & ~(page - 1);
        if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
        return;
    }
}

tm_status tm__params_init(tm_model *m, tm_error *err) {
    if (!m->opts.trainable) return TM_OK;
    const tm_graph *g = m->onnx->graph;
    int n_names = m->opts.n_trainable_names;
    const char *const *names = n_names > 0 ? m->opts.trainable_names : NULL;
    if (n_names > 0 && !names)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "n_trainable_names is %d but "
                        "trainable_names is NULL", n_names);
    if (n_names < 0) n_names = 0;
    tm_status st = check_names(g, n_names, names, err);
    if (st != TM_OK) return st;
    m->init_param = malloc(((size_t)g->n_inits + 1) * sizeof *m->init_param);
    m->params = calloc((size_t)g->n_inits + 1, sizeof *m->params);
    m->param_values = calloc((size_t)g->n_inits + 1, sizeof *m->param_values);
    if (!m->init_param || !m->params || !m->param_values)
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory selecting parameters");
    char why[400];
    /* Without a custom allocator the parameters share one slab in huge pages: a training
     * step reads every weight twice, a weight panel's rows lie a few KB apart, and with
     * 4 KiB pages each row cost a page walk (MiniLM's step at 1 x 128, one thread: 1-1.7%
     * faster than with each parameter in its own malloc'd pages, two models alternating
     * in one process). Optimizers update them in place; the model frees the slab. */
    uint8_t *chosen = calloc((size_t)g->n_inits + 1, 1);
    if (!chosen) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory selecting parameters");
    size_t total = 0;
    for (int i = 0; i < g->n_inits; i++) {
        chosen[i] = name_selected(g->inits[i].name, n_names, names) &&
                    !not_trainable(g, i, why, sizeof why);
        if (chosen[i]) total += slab_bytes(m, g->inits[i].tensor);
    }
    char *at = NULL;
    if (!m->opts.allocator && total > 0) {
        m->param_slab = total >= ((size_t)1 << 20) ? tm__huge_alloc(total)
                                                   : aligned_alloc(64, total);
        at = m->param_slab;   /* NULL (out of memory): each its own allocation */
    }
    for (int i = 0; i < g->n_inits; i++) {
        m->init_param[i] = -1;
        if (!chosen[i]) continue;
        tm_tensor *v = store_copy(m, g->inits[i].tensor, &at);
        if (!v) {
            free(chosen);
            return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory copying parameter '%s'",
                            g->inits[i].name);
        }
        drop_mapped_pages(m, g->inits[i].tensor);
        tm_param *p = &m->params[m->n_params];
        p->name = g->inits[i].name;
        p->value = v;
        p->init = i;
        m->param_values[m->n_params] = v;
        m->init_param[i] = m->n_params++;
    }
    free(chosen);
    m->param_table.n = m->n_params;
    m->param_table.values = m->param_values;
    m->param_table.n_inits = g->n_inits;
    m->param_table.of_init = m->init_param;
    return TM_OK;
}

void tm__params_free(tm_model *m) {
    for (int i = 0; i < m->n_params; i++) tm_tensor_free(m->params[i].value);
    free(m->param_slab);
    m->param_slab = NULL;
    free(m->params);
    free(m->param_values);
    free(m->init_param);
    m->params = NULL;
    m->param_values = NULL;
    m->init_param = NULL;
    m->n_params = 0;
}

const tm_param_table *tm__params_table(const tm_model *m) {
    return m->n_params ? &m->param_table : NULL;
}

tm_status tm__params_select(const tm_model *m, int n, const char *const *names,
                            uint8_t *chosen, int *count, tm_error *err) {
    const tm_graph *g = m->onnx->graph;
    *count = 0;
    if (m->n_params == 0)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "the model has no parameters: load it "
                        "with tm_load_options.trainable set");
    char why[400];
    for (int k = 0; k < n; k++) {
        const char *want = names ? names[k] : NULL;
        if (!want) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "parameter name %d is NULL", k);
        int any = 0;
        for (int i = 0; i < m->n_params && !any; i++) any = name_selected(m->params[i].name, 1, &want);
        if (any) continue;
        int at = is_pattern(want) ? -1 : initializer_of(g, want);
        if (at >= 0 && not_trainable(g, at, why, sizeof why))
            return tm__fail_at(err, TM_ERR_UNSUPPORTED, NULL, NULL, want, "no gradient for "
                               "'%s': %s", want, why);
        if (at >= 0)
            return tm__fail_at(err, TM_ERR_INVALID_ARGUMENT, NULL, NULL, want, "'%s' is not a "
                               "parameter: the model was loaded with trainable names that "
                               "leave it out (it stays a constant)", want);
        return tm__fail_at(err, TM_ERR_NOT_FOUND, NULL, NULL, want, "%s '%s' names no "
                           "parameter", is_pattern(want) ? "the pattern" : "the name", want);
    }
    for (int i = 0; i < m->n_params; i++) {
        chosen[i] = (uint8_t)name_selected(m->params[i].name, n, names);
        *count += chosen[i];
    }
    return TM_OK;
}

int tm_model_n_params(const tm_model *m) { return m ? m->n_params : 0; }

tm_status tm_model_param(tm_model *m, int i, tm_param_desc *d) {
    if (!m || !d || i < 0 || i >= m->n_params) return TM_ERR_INVALID_ARGUMENT;
    memset(d, 0, sizeof *d);
    d->name = m->params[i].name;
    d->tensor = m->params[i].value;
    d->dtype = d->tensor->dtype;
    d->rank = d->tensor->rank;
    d->dims = d->tensor->dims;
    return TM_OK;
}

int tm_model_param_index(const tm_model *m, const char *name) {
    for (int i = 0; m && name && i < m->n_params; i++)
        if (!strcmp(m->params[i].name, name)) return i;
    return -1;
}
