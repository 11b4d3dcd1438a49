/* Helpers shared by Loop and Scan (loop.c, scan.c): keeping per-iteration values alive,
 * freeing the previous iteration's state in eager mode, and stacking per-iteration
 * values along a new axis. Not the subgraph runner itself (../lower.c). */
#ifndef TM_ONNX_OPS_CONTROL_FLOW_H
#define TM_ONNX_OPS_CONTROL_FLOW_H

#include <stdlib.h>
#include <string.h>
#include "../lower.h"

/* Adds delta to the pin count of ov's values, so tm_val_release leaves them alone while
 * the previous state is dropped. */
static inline void tm_cf_hold(tm_ctx *c, const tm_oval *ov, int delta) {
    if (ov->kind == TM_OV_TENSOR && ov->v >= 0) c->vals[ov->v].pinned += delta;
    if (ov->kind == TM_OV_SEQ)
        for (int i = 0; i < ov->n; i++) c->vals[ov->seq[i]].pinned += delta;
}

/* Values of this node that must outlive the iteration that made them (scan outputs):
 * a mark per value made at or after `first`. */
typedef struct tm_cf_keep {
    tm_val first;
    uint8_t *mark;
    size_t cap;
} tm_cf_keep;

static inline int tm_cf_keep_mark(tm_cf_keep *k, tm_val v) {
    if (v < k->first) return 0;
    size_t i = (size_t)(v - k->first);
    if (i >= k->cap) {
        size_t cap = k->cap ? k->cap : 256;
        while (cap <= i) cap *= 2;
        uint8_t *m = realloc(k->mark, cap);
        if (!m) return -1;
        memset(m + k->cap, 0, cap - k->cap);
        k->mark = m;
        k->cap = cap;
    }
    k->mark[i] = 1;
    return 0;
}

static inline int tm_cf_kept(const tm_cf_keep *k, tm_val v) {
    size_t i = (size_t)(v - k->first);
    return v < k->first || (i < k->cap && k->mark[i]);
}

/* Frees (eager mode) the values of ov made by this node that are neither kept nor
 * pinned: the previous iteration's state once the next one exists. Values from before
 * the node (its inputs, outer-scope names) are never touched. */
static inline void tm_cf_drop(tm_ctx *c, const tm_oval *ov, const tm_cf_keep *k) {
    if (ov->kind == TM_OV_TENSOR && !tm_cf_kept(k, ov->v)) tm_val_release(c, ov->v);
    if (ov->kind == TM_OV_SEQ)
        for (int i = 0; i < ov->n; i++)
            if (!tm_cf_kept(k, ov->seq[i])) tm_val_release(c, ov->seq[i]);
}

/* A copy of ov whose sequence array is the caller's (free with tm_cf_free). */
static inline int tm_cf_copy(tm_oval *dst, const tm_oval *src) {
    *dst = *src;
    if (src->kind != TM_OV_SEQ) return 0;
    dst->seq = malloc((size_t)(src->n ? src->n : 1) * sizeof *dst->seq);
    if (!dst->seq) return -1;
    if (src->n) memcpy(dst->seq, src->seq, (size_t)src->n * sizeof *src->seq);
    return 0;
}

static inline void tm_cf_free(tm_oval *ov) {
    if (ov->kind == TM_OV_SEQ) free(ov->seq);
    memset(ov, 0, sizeof *ov);
}

/* Stacks n >= 1 values of one shape along a new axis `axis` of the result (0..rank).
 * Concatenating along an existing axis lays the elements out as stacking does, so the
 * new axis costs only a reshape. */
static inline tm_val tm_cf_stack(tm_ctx *c, const tm_val *xs, int64_t n, int axis) {
    if (!tm_ctx_ok(c) || n < 1 || n > INT32_MAX) return TM_NONE;
    int rank = tm_vrank(c, xs[0]);
    int64_t dims[TM_MAX_RANK];
    if (rank + 1 > TM_MAX_RANK) {
        tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "stacking rank %d values exceeds rank %d", rank,
                    TM_MAX_RANK);
        return TM_NONE;
    }
    for (int d = 0, k = 0; d <= rank; d++) dims[d] = d == axis ? n : tm_vdims(c, xs[0])[k++];
    if (axis < rank) {
        tm_val cat = n == 1 ? xs[0] : tm_concat(c, xs, (int)n, axis);
        return tm_reshape(c, cat, rank + 1, dims);
    }
    tm_val *ys = malloc((size_t)n * sizeof *ys);
    if (!ys) {
        tm_ctx_fail(c, TM_ERR_NO_MEMORY, "out of memory");
        return TM_NONE;
    }
    int64_t ax = axis;
    for (int64_t i = 0; i < n; i++) ys[i] = tm_unsqueeze(c, xs[i], &ax, 1);
    tm_val y = tm_ctx_ok(c) ? (n == 1 ? ys[0] : tm_concat(c, ys, (int)n, axis)) : TM_NONE;
    free(ys);
    return y;
}

/* Reads a one-element condition on the host: 1 true, 0 false, -1 failed (status set). */
static inline int tm_cf_flag(tm_ctx *c, tm_val v, const char *what) {
    const tm_tensor *t = tm_host(c, v);
    if (!t) return -1;
    if (tm_tensor_numel_(t) != 1 || t->dtype == TM_STRING) {
        tm_ctx_fail(c, TM_ERR_SHAPE, "%s must hold exactly one boolean, got %lld %s values",
                    what, (long long)tm_tensor_numel_(t), tm_dtype_name(t->dtype));
        return -1;
    }
    return tm_dtype_is_float(t->dtype) ? tm_load_f64(t->data, t->dtype, 0) != 0
                                       : tm_load_u64(t->data, t->dtype, 0) != 0;
}

/* Checks that every value of a scan output has the shape and dtype of the first. */
static inline int tm_cf_same_shapes(tm_ctx *c, const tm_val *xs, int64_t n, const char *what) {
    for (int64_t i = 1; i < n; i++) {
        int same = tm_vrank(c, xs[i]) == tm_vrank(c, xs[0]) &&
                   tm_vdtype(c, xs[i]) == tm_vdtype(c, xs[0]) &&
                   !memcmp(tm_vdims(c, xs[i]), tm_vdims(c, xs[0]),
                           (size_t)tm_vrank(c, xs[0]) * sizeof(int64_t));
        if (!same) {
            tm_ctx_fail(c, TM_ERR_SHAPE, "%s changes shape or dtype at iteration %lld", what,
                        (long long)i);
            return 0;
        }
    }
    return 1;
}

/* A scan output of a loop that never ran: the body's declared per-iteration dims (when
 * all are known) with a 0 inserted at `axis`, else shape (0). */
static inline tm_val tm_cf_empty_scan(tm_ctx *c, const tm_type *t, int axis) {
    int64_t dims[TM_MAX_RANK] = {0};
    int rank = 1, known = t->rank >= 0 && t->rank < TM_MAX_RANK && axis <= t->rank;
    for (int d = 0; known && d < t->rank; d++) known = t->dims[d].value >= 0 && !t->dims[d].param;
    if (known) {
        rank = t->rank + 1;
        for (int d = 0, k = 0; d < rank; d++) dims[d] = d == axis ? 0 : t->dims[k++].value;
    }
    tm_dtype dt = t->elem_dtype ? (tm_dtype)t->elem_dtype : TM_FLOAT;
    return tm_const_fill(c, dt, rank, dims, 0.0);
}

#endif
