/* The eager/trace context: a table of values, and tm_prim, which runs a primitive at
 * once when its inputs are known (eager mode, or constant folding under trace) and
 * records it otherwise. Not plan building (plan.c). */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "ctx.h"

uint64_t tm__run_seed(void) {
    static _Atomic uint64_t runs;
    uint64_t z = atomic_fetch_add(&runs, 1) + UINT64_C(0x9e3779b97f4a7c15) *
                 (((uint64_t)getpid() << 32) ^ (uint64_t)time(NULL));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

double tm_ctx_node_seed(tm_ctx *c) {
    uint64_t z = (c->rng_state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return (double)((z ^ (z >> 31)) >> 11);
}

void tm_ctx_init(tm_ctx *c, tm_mode mode, const tm_allocator *a) {
    memset(c, 0, sizeof *c);
    c->mode = mode;
    c->allocator = a;
    c->needs_host = TM_NONE;
    c->threads = 1;
    c->rng_state = 0x853c49e6748fea9bULL;
    c->run_seed = tm__run_seed();
}

void tm_ctx_destroy(tm_ctx *c) {
    for (int32_t i = 0; i < c->n_vals; i++)
        if (c->vals[i].owned) tm_tensor_free(c->vals[i].data);
    for (int32_t i = 0; i < c->n_nodes; i++) {
        free(c->nodes[i].in);
        free(c->nodes[i].where);
    }
    for (int32_t i = 0; i < c->n_folds; i++) {
        free(c->folds[i].in);
        free(c->folds[i].where);
    }
    free(c->folds);
    free(c->kv_bshd);
    free(c->vals);
    free(c->nodes);
    free(c->scratch);
    free(c->cut_where);
    memset(c, 0, sizeof *c);
}

void tm_ctx_set_where(tm_ctx *c, const char *node_name, const char *op_type) {
    snprintf(c->where_node, sizeof c->where_node, "%s", node_name ? node_name : "");
    snprintf(c->where_op, sizeof c->where_op, "%s", op_type ? op_type : "");
}

tm_status tm_ctx_fail(tm_ctx *c, tm_status code, const char *fmt, ...) {
    if (c->status != TM_OK) return c->status;
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->status = code;
    if (c->where_op[0])
        tm__fail_at(&c->err, code, c->where_node, c->where_op, NULL, "node '%s' (%s): %s",
                    c->where_node, c->where_op, msg);
    else
        tm__fail(&c->err, code, "%s", msg);
    return code;
}

static tm_val new_val(tm_ctx *c) {
    if (c->n_vals == c->cap_vals) {
        int32_t cap = c->cap_vals ? c->cap_vals * 2 : 256;
        tm_vinfo *v = realloc(c->vals, (size_t)cap * sizeof *v);
        if (!v) {
            tm_ctx_fail(c, TM_ERR_NO_MEMORY, "out of memory growing the value table");
            return TM_NONE;
        }
        c->vals = v;
        c->cap_vals = cap;
    }
    tm_vinfo *vi = &c->vals[c->n_vals];
    memset(vi, 0, sizeof *vi);
    vi->producer = -1;
    vi->input_index = -1;
    vi->param = -1;
    vi->folded_by = -1;
    return c->n_vals++;
}

/* A float32 copy of a half-precision tensor (compute_type f32). */
static tm_tensor *widen_half(const tm_tensor *t, const tm_allocator *a) {
    tm_tensor *w = tm_tensor_alloc(TM_FLOAT, t->rank, t->dims, a);
    if (!w) return NULL;
    int64_t n = tm_tensor_numel_(t);
    for (int64_t i = 0; i < n; i++)
        ((float *)w->data)[i] = (float)tm_load_f64(t->data, t->dtype, (size_t)i);
    return w;
}

static tm_val import_tensor(tm_ctx *c, tm_tensor *t, int borrow, int widen);

tm_val tm_val_tensor(tm_ctx *c, tm_tensor *t, int borrow) {
    return import_tensor(c, t, borrow, 1);
}

/* widen: apply compute_type f32 to half-precision data (not to primitive results, whose
 * dtype their shape rule decided). */
static tm_val import_tensor(tm_ctx *c, tm_tensor *t, int borrow, int widen) {
    if (!tm_ctx_ok(c) || !t) {
        if (!borrow) tm_tensor_free(t);
        return TM_NONE;
    }
    /* compute_type f32: every half-precision value enters as float32 (initializers,
     * Constant attributes, inputs: the runtime binds graph inputs with compute_type
     * cleared, so that a plan keeps their declared dtype, then widens them itself). */
    if (widen && c->compute_type == TM_FLOAT &&
        (t->dtype == TM_FLOAT16 || t->dtype == TM_BFLOAT16)) {
        tm_tensor *w = widen_half(t, c->allocator);
        if (!borrow) tm_tensor_free(t);
        borrow = 0;
        if (!w) {
            tm_ctx_fail(c, TM_ERR_NO_MEMORY, "out of memory widening a constant to float32");
            return TM_NONE;
        }
        t = w;
    }
    /* Kernels read elements through typed pointers: a borrowed buffer that is not aligned
     * to its element size (raw_data inside a protobuf) is copied first — lazily in a
     * model's context, where the copy is the model's own, made once, and only when
     * something reads the elements (tm__val_host): a weight that is only packed, or
     * found packed already, is never copied whole. (A copy per trace had cost a 400 MB
     * single-file decoder 400 MB of fresh pages at each of the traces of its plans.) */
    const void *origin = borrow ? t->data : NULL;
    size_t es = tm_dtype_elem_size(t->dtype);
    int misaligned = es > 1 && t->data && ((uintptr_t)t->data % es) != 0;
    if (misaligned && c->fold_cache && c->fold_cache->aligned) {
        /* kept as it is; vi->misaligned below */
    } else if (borrow && misaligned) {
        misaligned = 0;
        t = tm_tensor_clone(t, c->allocator);
        if (!t) {
            tm_ctx_fail(c, TM_ERR_NO_MEMORY, "out of memory copying a misaligned tensor");
            return TM_NONE;
        }
        borrow = 0;
    }
    tm_val v = new_val(c);
    if (v == TM_NONE) {
        if (!borrow) tm_tensor_free(t);
        return TM_NONE;
    }
    tm_vinfo *vi = &c->vals[v];
    vi->dtype = t->dtype;
    vi->rank = t->rank;
    memcpy(vi->dims, t->dims, sizeof vi->dims);
    vi->data = t;
    vi->owned = !borrow;
    vi->origin = origin;
    vi->misaligned = (uint8_t)misaligned;
    return v;
}

const tm_tensor *tm__val_host(tm_ctx *c, tm_val v) {
    if (v < 0 || v >= c->n_vals) return NULL;
    tm_vinfo *vi = &c->vals[v];
    if (!vi->misaligned || !vi->data) return vi->data;
    tm_tensor *t = vi->data, *fixed = NULL;
    const void *copy = c->fold_cache && c->fold_cache->aligned
                           ? c->fold_cache->aligned(c->fold_cache, t->data, t->nbytes)
                           : NULL;
    if (copy) fixed = tm_tensor_borrow(t->dtype, t->rank, t->dims, (void *)copy);
    else fixed = tm_tensor_clone(t, c->allocator);
    if (!fixed) {
        tm_ctx_fail(c, TM_ERR_NO_MEMORY, "out of memory copying a misaligned tensor");
        return NULL;
    }
    if (vi->owned) tm_tensor_free(t);   /* a shell over the bytes (a folded reshape) */
    vi->data = fixed;
    vi->owned = 1;                      /* the shell, or the copy */
    vi->misaligned = 0;
    return fixed;
}

tm_val tm_val_symbolic(tm_ctx *c, tm_dtype dt, int rank, const int64_t *dims, int input_index) {
    if (!tm_ctx_ok(c)) return TM_NONE;
    tm_val v = new_val(c);
    if (v == TM_NONE) return TM_NONE;
    tm_vinfo *vi = &c->vals[v];
    vi->dtype = dt;
    vi->rank = rank;
    for (int i = 0; i < rank; i++) vi->dims[i] = dims[i];
    vi->input_index = input_index;
    return v;
}

int tm_dtype_is_differentiable(tm_dtype dt) {
    return dt == TM_FLOAT || dt == TM_DOUBLE || dt == TM_FLOAT16 || dt == TM_BFLOAT16;
}

tm_val tm_val_param(tm_ctx *c, tm_tensor *t, int index) {
    if (!tm_ctx_ok(c) || !t) return TM_NONE;
    tm_val v = c->mode == TM_MODE_TRACE
                   ? tm_val_symbolic(c, t->dtype, t->rank, t->dims, -1)
                   : import_tensor(c, t, 1, 0);
    if (v == TM_NONE) return TM_NONE;
    c->vals[v].param = index;
    c->vals[v].tracked = c->track_params && c->params && index >= 0 && index < c->params->n &&
                         c->track_params[index] && tm_dtype_is_differentiable(t->dtype);
    return v;
}

tm_val tm_const_fill(tm_ctx *c, tm_dtype dt, int rank, const int64_t *dims, double v) {
    if (!tm_ctx_ok(c)) return TM_NONE;
    if (c->compute_type == TM_FLOAT && (dt == TM_FLOAT16 || dt == TM_BFLOAT16)) dt = TM_FLOAT;
    if (c->mode == TM_MODE_TRACE && c->fold_log && rank > 0 && rank <= TM_MAX_RANK) {
        /* Under the fold log, one element expanded: the log then knows the sizes made it
         * (a plan serving several sizes computes it anew, see plan_internal.h). */
        int64_t ones[TM_MAX_RANK];
        for (int i = 0; i < rank; i++) ones[i] = 1;
        c->fold_log = 0;
        tm_val one = tm_const_fill(c, dt, rank, ones, v);
        c->fold_log = 1;
        tm_args a;
        memset(&a, 0, sizeof a);
        a.i[0] = rank;
        for (int i = 0; i < rank; i++) a.i[1 + i] = dims[i];
        return tm_prim(c, TM_P_EXPAND, &one, 1, &a);
    }
    tm_tensor *t = tm_tensor_alloc(dt, rank, dims, c->allocator);
    if (!t) {
        tm_ctx_fail(c, TM_ERR_NO_MEMORY, "cannot allocate a constant");
        return TM_NONE;
    }
    int64_t n = tm_tensor_numel_(t);
    if (v != 0.0) {
        if (tm_dtype_is_float(dt))
            for (int64_t i = 0; i < n; i++) tm_store_f64(t->data, dt, (size_t)i, v);
        else if (tm_dtype_is_unsigned_int(dt))
            for (int64_t i = 0; i < n; i++) tm_store_u64(t->data, dt, (size_t)i, (uint64_t)v);
        else
            for (int64_t i = 0; i < n; i++) tm_store_i64(t->data, dt, (size_t)i, (int64_t)v);
    }
    return tm_val_tensor(c, t, 0);
}

tm_val tm_const_scalar(tm_ctx *c, tm_dtype dt, double v) {
    return tm_const_fill(c, dt, 0, NULL, v);
}

tm_val tm_const_i64s(tm_ctx *c, const int64_t *v, int64_t n) {
    if (!tm_ctx_ok(c)) return TM_NONE;
    int64_t dims[1] = {n};
    tm_tensor *t = tm_tensor_alloc(TM_INT64, 1, dims, c->allocator);
    if (!t) {
        tm_ctx_fail(c, TM_ERR_NO_MEMORY, "cannot allocate a constant");
        return TM_NONE;
    }
    if (n) memcpy(t->data, v, (size_t)n * sizeof *v);
    return tm_val_tensor(c, t, 0);
}

const tm_vinfo tm__none_vinfo = {.producer = -1, .input_index = -1};

int64_t tm_vnumel(const tm_ctx *c, tm_val v) {
    return tm_numel(tm_vi(c, v)->rank, tm_vi(c, v)->dims);
}

const tm_tensor *tm_vdata(const tm_ctx *c, tm_val v) {
    if (v < 0 || v >= c->n_vals) return NULL;
    /* Callers read the elements: a misaligned value is aligned first (a cache of the
     * context's, hence the cast; on no memory the context is failed and NULL returned). */
    if (c->vals[v].misaligned) return tm__val_host((tm_ctx *)c, v);
    return c->vals[v].data;
}

const tm_tensor *tm_host(tm_ctx *c, tm_val v) {
    /* An absent value (TM_NONE) has no data: callers treat NULL as "not given". */
    if (!tm_ctx_ok(c) || v < 0 || v >= c->n_vals) return NULL;
    if (c->vals[v].data) return tm__val_host(c, v);
    if (c->vals[v].released) {
        tm_ctx_fail(c, TM_ERR_RUNTIME, "internal: value %d used after release", (int)v);
        return NULL;
    }
    c->needs_host = v;
    tm_ctx_fail(c, TM_ERR_NEEDS_HOST, "this value is needed on the host but is not known "
                "while compiling (a graph break)");
    return NULL;
}

int64_t tm_host_i64(tm_ctx *c, tm_val v, int64_t *out, int64_t max) {
    const tm_tensor *t = tm_host(c, v);
    if (!t) return -1;
    int64_t n = tm_tensor_numel_(t);
    if (n > max) {
        tm_ctx_fail(c, TM_ERR_SHAPE, "expected at most %lld values, got %lld", (long long)max,
                    (long long)n);
        return -1;
    }
    if (tm_dtype_is_float(t->dtype) || t->dtype == TM_STRING) {
        tm_ctx_fail(c, TM_ERR_DTYPE, "expected an integer tensor, got %s",
                    tm_dtype_name(t->dtype));
        return -1;
    }
    for (int64_t i = 0; i < n; i++) {
        if (tm_dtype_is_unsigned_int(t->dtype))
            out[i] = (int64_t)tm_load_u64(t->data, t->dtype, (size_t)i);
        else
            out[i] = tm_load_i64(t->data, t->dtype, (size_t)i);
    }
    return n;
}

int tm_host_f64(tm_ctx *c, tm_val v, double *out) {
    const tm_tensor *t = tm_host(c, v);
    if (!t) return -1;
    if (tm_tensor_numel_(t) < 1 || t->dtype == TM_STRING) {
        tm_ctx_fail(c, TM_ERR_SHAPE, "expected a scalar");
        return -1;
    }
    if (tm_dtype_is_float(t->dtype)) *out = tm_load_f64(t->data, t->dtype, 0);
    else if (tm_dtype_is_unsigned_int(t->dtype)) *out = (double)tm_load_u64(t->data, t->dtype, 0);
    else *out = (double)tm_load_i64(t->data, t->dtype, 0);
    return 0;
}

void tm_val_release(tm_ctx *c, tm_val v) {
    if (v < 0 || v >= c->n_vals) return;
    tm_vinfo *vi = &c->vals[v];
    /* A trace releases only what it folded itself and no recorded node reads (a constant
     * computed on the way to another, such as a weight dequantized in the graph). */
    if (c->mode == TM_MODE_TRACE && (!vi->owned || vi->read)) return;
    if (vi->pinned || vi->kept || !vi->data) return;
    if (vi->owned) tm_tensor_free(vi->data);
    vi->data = NULL;
    vi->owned = 0;
    vi->released = 1;
}

static void *ctx_scratch(tm_ctx *c, size_t bytes) {
    if (bytes == 0) return NULL;
    if (bytes > c->scratch_cap) {
        free(c->scratch);
        c->scratch = NULL;
        c->scratch_cap = 0;
        void *p = NULL;
        if (posix_memalign(&p, 64, bytes) != 0) return NULL;
        c->scratch = p;
        c->scratch_cap = bytes;
    }
    return c->scratch;
}

tm_status tm_run_kernel(tm_ctx *c, int prim, const tm_args *a, const tm_tensor *const *in,
                        int nin, tm_tensor *const *out, int nout, size_t scratch) {
    tm_kcall k;
    tm_error err;
    memset(&err, 0, sizeof err);
    k.prim = prim;
    k.a = a;
    k.in = in;
    k.nin = nin;
    k.out = out;
    k.nout = nout;
    k.scratch = ctx_scratch(c, scratch);
    k.scratch_bytes = scratch;
    k.err = &err;
    k.threads = c->threads;
    k.pool = c->pool;
    k.run_seed = c->run_seed;
    if (scratch && !k.scratch)
        return tm_ctx_fail(c, TM_ERR_NO_MEMORY, "cannot allocate %zu bytes of scratch", scratch);
    tm_status s = tm_prims[prim].kernel(&k);
    if (s != TM_OK)
        return tm_ctx_fail(c, s, "%s: %s", tm_prims[prim].name,
                           err.message[0] ? err.message : tm_status_name(s));
    return TM_OK;
}

/* Appends a node for a primitive call to *arr (the trace's nodes or its fold log),
 * marking its inputs read (kept: a plan may run them) and returning its index, or -1 with
 * the context's error set. */
static int32_t append_node(tm_ctx *c, tm_rnode **arr, int32_t *n_arr, int32_t *cap_arr,
                           int prim, const tm_val *in, int nin, const tm_args *a,
                           const tm_val *out, int nout, size_t scratch) {
    if (*n_arr == *cap_arr) {
        int32_t cap = *cap_arr ? *cap_arr * 2 : 256;
        tm_rnode *grown = realloc(*arr, (size_t)cap * sizeof *grown);
        if (!grown) {
            tm_ctx_fail(c, TM_ERR_NO_MEMORY, "out of memory recording a trace");
            return -1;
        }
        *arr = grown;
        *cap_arr = cap;
    }
    tm_rnode *n = &(*arr)[*n_arr];
    memset(n, 0, sizeof *n);
    n->prim = prim;
    n->nin = nin;
    n->nout = nout;
    n->in = malloc((size_t)(nin ? nin : 1) * sizeof *n->in);
    char where[256];
    snprintf(where, sizeof where, "node '%s' (%s)", c->where_node, c->where_op);
    n->where = strdup(where);
    if (!n->in || !n->where) {
        free(n->in);
        free(n->where);
        tm_ctx_fail(c, TM_ERR_NO_MEMORY, "out of memory recording a trace");
        return -1;
    }
    if (nin) memcpy(n->in, in, (size_t)nin * sizeof *in);
    for (int i = 0; i < nin; i++)
        if (in[i] >= 0 && in[i] < c->n_vals) c->vals[in[i]].read = 1;
    for (int i = 0; i < nout; i++) n->out[i] = out[i];
    if (a) n->args = *a;
    n->scratch = scratch;
    return (*n_arr)++;
}

static tm_status record(tm_ctx *c, int prim, const tm_val *in, int nin, const tm_args *a,
                        tm_val *out, int nout, size_t scratch) {
    int32_t at = append_node(c, &c->nodes, &c->n_nodes, &c->cap_nodes, prim, in, nin, a, out,
                             nout, scratch);
    if (at < 0) return c->status;
    for (int i = 0; i < nout; i++) c->vals[out[i]].producer = at;
    return TM_OK;
}

/* The fold log (ctx.h): a fold whose outputs are at most FOLD_LOG_MAX bytes and whose
 * inputs are borrowed (initializers, which the model keeps) or as small is logged, and
 * its inputs are kept; larger folds (weights dequantized in the graph) are not, and a
 * plan whose such constants changed with the sizes cannot serve several. */
enum { FOLD_LOG_MAX = 1 << 20 };

static tm_status log_fold(tm_ctx *c, int prim, const tm_val *in, int nin, const tm_args *a,
                          const tm_val *out, int nout, size_t scratch) {
    for (int i = 0; i < nout; i++)
        if (c->vals[out[i]].data && c->vals[out[i]].data->nbytes > FOLD_LOG_MAX) return TM_OK;
    for (int i = 0; i < nin; i++) {
        const tm_vinfo *vi = &c->vals[in[i]];
        if (vi->owned && vi->data && vi->data->nbytes > FOLD_LOG_MAX) return TM_OK;
    }
    int32_t at = append_node(c, &c->folds, &c->n_folds, &c->cap_folds, prim, in, nin, a, out,
                             nout, scratch);
    if (at < 0) return c->status;
    for (int i = 0; i < nout; i++) c->vals[out[i]].folded_by = at;
    return TM_OK;
}

/* Flags the outputs of a taped call: differentiable outputs of a tracked call are
 * tracked; a cast of a tracked value to a type gradients do not flow through (a
 * quantization) cuts it, and what depends on a cut value stays cut, so that a gradient
 * asked through it fails instead of being silently zero. Eagerly, the tape keeps every
 * value the call read or wrote until the backward. */
static void mark_taped(tm_ctx *c, int prim, const tm_val *in, int nin, const tm_val *out,
                       int nout, int taped, int cut) {
    /* A cast to a non-float type, or a quantizing primitive (all of whose outputs, its
     * float scale too, describe the quantized value), cuts what it reads from the tape. */
    int quantizes = (tm_prims[prim].flags & TM_PF_QUANTIZE) != 0;
    for (int i = 0; i < nout; i++) {
        tm_vinfo *vi = &c->vals[out[i]];
        int diff = tm_dtype_is_differentiable(vi->dtype);
        int cuts = taped && (quantizes || (!diff && prim == TM_P_CAST));
        vi->tracked = taped && diff && !quantizes;
        vi->cut = cut || cuts;
        if (cuts && !c->cut_where) c->cut_where = strdup(c->nodes[c->n_nodes - 1].where);
        if (taped && c->mode == TM_MODE_EAGER) vi->kept = 1;
    }
    for (int i = 0; taped && c->mode == TM_MODE_EAGER && i < nin; i++) c->vals[in[i]].kept = 1;
}

tm_status tm_prim_n(tm_ctx *c, int prim, const tm_val *in, int nin, const tm_args *a,
                    tm_val *out, int nout) {
    static const tm_args zero_args;
    for (int i = 0; i < nout; i++) out[i] = TM_NONE;
    if (!tm_ctx_ok(c)) return c->status;
    if (!a) a = &zero_args;
    const tm_prim_info *p = &tm_prims[prim];
    if ((p->nin >= 0 && nin != p->nin) || nout != p->nout || nout > 4)
        return tm_ctx_fail(c, TM_ERR_RUNTIME, "internal: primitive %s called with %d inputs "
                           "and %d outputs", p->name, nin, nout);
    enum { MAX_IN = 64 };
    const tm_vinfo *vin_small[MAX_IN];
    const tm_vinfo **vin = vin_small;
    if (nin > MAX_IN) {
        vin = malloc((size_t)nin * sizeof *vin);
        if (!vin) return tm_ctx_fail(c, TM_ERR_NO_MEMORY, "out of memory");
    }
    int known = !(c->mode == TM_MODE_TRACE && (p->flags & (TM_PF_RANDOM | TM_PF_NO_FOLD)));
    int taped = 0, cut = 0;
    for (int i = 0; i < nin; i++) {
        if (in[i] == TM_NONE || in[i] < 0 || in[i] >= c->n_vals) {
            if (vin != vin_small) free(vin);
            return tm_ctx_fail(c, TM_ERR_RUNTIME, "internal: primitive %s got an invalid "
                               "input %d", p->name, i);
        }
        vin[i] = &c->vals[in[i]];
        if (vin[i]->released) {
            if (vin != vin_small) free(vin);
            return tm_ctx_fail(c, TM_ERR_RUNTIME, "internal: primitive %s input %d used "
                               "after release", p->name, i);
        }
        if (!vin[i]->data) known = 0;
        if (c->tape && vin[i]->tracked) taped = 1;
        if (c->tape && vin[i]->cut) cut = 1;
    }
    /* Under trace a taped call is recorded even on known inputs: the backward needs the
     * node, and folding would turn a differentiated value into a constant. */
    if (taped && c->mode == TM_MODE_TRACE) known = 0;
    tm_vinfo vout[4];
    memset(vout, 0, sizeof vout);
    size_t scratch = 0;
    tm_status s = p->shape(c, prim, a, vin, nin, vout, nout, &scratch);
    if (s == TM_OK && !tm_ctx_ok(c)) s = c->status;
    if (s != TM_OK) {
        if (vin != vin_small) free(vin);
        if (tm_ctx_ok(c)) tm_ctx_fail(c, s, "%s: invalid shapes", p->name);
        return c->status;
    }
    if (!known) {
        if (vin != vin_small) free(vin);
        for (int i = 0; i < nout; i++) {
            out[i] = tm_val_symbolic(c, vout[i].dtype, vout[i].rank, vout[i].dims, -1);
            if (out[i] == TM_NONE) return c->status;
        }
        s = record(c, prim, in, nin, a, out, nout, scratch);
        if (s == TM_OK && (taped || cut)) mark_taped(c, prim, in, nin, out, nout, taped, cut);
        return s;
    }
    /* Known inputs: run now. */
    tm_tensor *tout[4] = {0};
    const tm_tensor *tin_small[MAX_IN];
    const tm_tensor **tin = tin_small;
    if (nin > MAX_IN) {
        tin = malloc((size_t)nin * sizeof *tin);
        if (!tin) {
            free(vin);
            return tm_ctx_fail(c, TM_ERR_NO_MEMORY, "out of memory");
        }
    }
    for (int i = 0; i < nin; i++) tin[i] = vin[i]->data;
    if (vin != vin_small) free(vin);
    if ((p->flags & TM_PF_SHARED_FOLD) && c->fold_cache && nout == 1) {
        const tm_tensor *shared = c->fold_cache->fold(c->fold_cache, c, prim, a, tin, nin,
                                                      &vout[0], scratch);
        if (shared || !tm_ctx_ok(c)) {
            if (tin != tin_small) free(tin);
            if (!shared) return c->status;
            out[0] = import_tensor(c, (tm_tensor *)shared, 1, 0);
            return out[0] == TM_NONE ? c->status : TM_OK;
        }
    }
    /* A reshape of borrowed bytes (an initializer, which the model keeps for as long as
     * any context or plan made from it) is the same bytes under new dims: a shell over
     * them, not a copy. (Folding a weight's rank alignment once copied every weight of a
     * decoder at each trace: gigabytes of fresh pages per plan.) The context owns the
     * shell only; the bytes stay the model's. */
    if (prim == TM_P_RESHAPE && nin >= 1 && !c->vals[in[0]].owned && tin[0]->data &&
        tin[0]->dtype != TM_STRING && vout[0].dtype == tin[0]->dtype) {
        tm_tensor *shell = tm_tensor_borrow(vout[0].dtype, vout[0].rank, vout[0].dims,
                                            tin[0]->data);
        if (tin != tin_small) free(tin);
        if (!shell) return tm_ctx_fail(c, TM_ERR_NO_MEMORY, "reshape: out of memory");
        const void *origin = c->vals[in[0]].origin;
        out[0] = import_tensor(c, shell, 0, 0);
        if (out[0] == TM_NONE) return c->status;
        c->vals[out[0]].origin = origin;
        if (c->fold_log && c->mode == TM_MODE_TRACE && !taped &&
            (s = log_fold(c, prim, in, nin, a, out, nout, scratch)) != TM_OK)
            return s;
        if (taped && (s = record(c, prim, in, nin, a, out, nout, scratch)) != TM_OK) return s;
        if (taped || cut) mark_taped(c, prim, in, nin, out, nout, taped, cut);
        return TM_OK;
    }
    /* The kernel reads elements: misaligned bytes of the model are read aligned. */
    for (int i = 0; i < nin; i++)
        if (c->vals[in[i]].misaligned && !(tin[i] = tm__val_host(c, in[i]))) {
            s = c->status;
            goto fail;
        }
    for (int i = 0; i < nout; i++) {
        tout[i] = tm_tensor_alloc(vout[i].dtype, vout[i].rank, vout[i].dims, c->allocator);
        if (!tout[i]) {
            s = tm_ctx_fail(c, TM_ERR_NO_MEMORY, "%s: cannot allocate an output of %lld "
                            "elements", p->name, (long long)tm_numel(vout[i].rank, vout[i].dims));
            goto fail;
        }
    }
    s = tm_run_kernel(c, prim, a, tin, nin, tout, nout, scratch);
    if (s != TM_OK) goto fail;
    if (tin != tin_small) free(tin);
    for (int i = 0; i < nout; i++) {
        out[i] = import_tensor(c, tout[i], 0, 0);
        tout[i] = NULL;
        if (out[i] == TM_NONE) {
            for (int j = i + 1; j < nout; j++) tm_tensor_free(tout[j]);
            return c->status;
        }
    }
    if (c->fold_log && c->mode == TM_MODE_TRACE && !taped && (s = log_fold(c, prim, in, nin, a, out, nout, scratch)) != TM_OK)
        return s;
    /* The eager tape: the call ran, and is recorded for the backward too. (A folded call
     * under trace has no tracked input: only its cut flag carries on.) */
    if (taped && (s = record(c, prim, in, nin, a, out, nout, scratch)) != TM_OK) return s;
    if (taped || cut) mark_taped(c, prim, in, nin, out, nout, taped, cut);
    /* A view (reshape) of an initializer holds the initializer's bytes: it keeps their
     * origin, so that plan-time packing recognises the weight across plans. */
    if ((p->flags & TM_PF_VIEW) && nin >= 1) c->vals[out[0]].origin = c->vals[in[0]].origin;
    return TM_OK;
fail:
    if (tin != tin_small) free(tin);
    for (int i = 0; i < nout; i++) tm_tensor_free(tout[i]);
    return c->status;
}

tm_val tm_prim(tm_ctx *c, int prim, const tm_val *in, int nin, const tm_args *a) {
    tm_val out[4];
    if (tm_prims[prim].nout != 1) {
        tm_ctx_fail(c, TM_ERR_RUNTIME, "internal: %s has %d outputs", tm_prims[prim].name,
                    tm_prims[prim].nout);
        return TM_NONE;
    }
    if (tm_prim_n(c, prim, in, nin, a, out, 1) != TM_OK) return TM_NONE;
    return out[0];
}

tm_status tm_broadcast_dims(tm_ctx *c, int ra, const int64_t *da, int rb, const int64_t *db,
                            int *rout, int64_t *dout) {
    int r = ra > rb ? ra : rb;
    for (int i = 0; i < r; i++) {
        int64_t x = i - (r - ra) >= 0 ? da[i - (r - ra)] : 1;
        int64_t y = i - (r - rb) >= 0 ? db[i - (r - rb)] : 1;
        if (x == y || y == 1) dout[i] = x;
        else if (x == 1) dout[i] = y;
        else
            return tm_ctx_fail(c, TM_ERR_SHAPE, "shapes do not broadcast: dim %d is %lld "
                               "and %lld", i, (long long)x, (long long)y);
    }
    *rout = r;
    return TM_OK;
}
