/* Reductions: sum/product/max/min over a set of axes (reduced dims kept as 1), argmax/argmin
 * along one axis, and cumulative sums/products. Not keepdims=0 or axis lists (lowerings
 * reshape and build the mask), nor softmax or norms (the nn family). */
#if defined(__GNUC__) && !defined(__clang__)
/* The build's -O2 leaves plain loops scalar (GCC's very-cheap vector cost model); the f32
 * paths here run inside every model, so this file asks for the full vectorizer. */
#pragma GCC optimize("O3")
#endif
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "../ctx.h"
#include "../../backends/cpu/gemm.h" /* tm_use_reference_kernels */

/* ---- Shared helpers ------------------------------------------------------------------- */

typedef enum { DOMAIN_NONE, DOMAIN_FLOAT, DOMAIN_SIGNED, DOMAIN_UNSIGNED } value_domain;

/* Floats accumulate in double, signed ints in int64, unsigned ints and bool in uint64. */
static value_domain domain_of(tm_dtype dt) {
    if (tm_dtype_is_float(dt)) return DOMAIN_FLOAT;
    if (tm_dtype_is_signed_int(dt)) return DOMAIN_SIGNED;
    if (tm_dtype_is_unsigned_int(dt)) return DOMAIN_UNSIGNED;
    return DOMAIN_NONE;  /* string, complex, undefined */
}

/* One accumulator; which member is live follows the dtype's domain. */
typedef union accumulator {
    double f;
    int64_t i;
    uint64_t u;
} accumulator;

static const char *prim_name(int prim) { return tm_prims[prim].name; }

static tm_status check_dtype(tm_ctx *c, int prim, tm_dtype dt, int allow_bool) {
    if (domain_of(dt) == DOMAIN_NONE)
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "%s: %s tensors are not supported",
                           prim_name(prim), tm_dtype_name(dt));
    if (dt == TM_BOOL && !allow_bool)
        return tm_ctx_fail(c, TM_ERR_DTYPE, "%s does not take bool input", prim_name(prim));
    return TM_OK;
}

static tm_status normalize_axis(tm_ctx *c, int prim, int64_t axis, int rank, int *out) {
    if (rank == 0 || axis < -rank || axis >= rank)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "%s: axis %lld is out of range for rank %d",
                           prim_name(prim), (long long)axis, rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return TM_OK;
}

/* Splits dims around `axis` into (outer, axis size, inner) element counts. */
static void split_at_axis(const tm_tensor *t, int axis, int64_t *outer, int64_t *size,
                          int64_t *inner) {
    *outer = 1;
    *inner = 1;
    for (int d = 0; d < axis; d++) *outer *= t->dims[d];
    for (int d = axis + 1; d < t->rank; d++) *inner *= t->dims[d];
    *size = t->dims[axis];
}

/* ---- Reduce: layout --------------------------------------------------------------------- */

/* The input's dims as runs of adjacent kept or reduced axes, size-1 axes dropped (they
 * change nothing), so [B, T, C] reduced over T is (kept B, reduced T, kept C). */
typedef struct reduce_layout {
    int nruns;
    int64_t size[TM_MAX_RANK];
    int reduced[TM_MAX_RANK];
} reduce_layout;

static void reduce_layout_init(reduce_layout *l, int rank, const int64_t *dims, int64_t mask) {
    l->nruns = 0;
    for (int d = 0; d < rank; d++) {
        if (dims[d] == 1) continue;
        int flag = (int)((mask >> d) & 1);
        if (l->nruns > 0 && l->reduced[l->nruns - 1] == flag) {
            l->size[l->nruns - 1] *= dims[d];
            continue;
        }
        l->size[l->nruns] = dims[d];
        l->reduced[l->nruns] = flag;
        l->nruns++;
    }
}

static int layout_reduces(const reduce_layout *l) {
    for (int r = 0; r < l->nruns; r++)
        if (l->reduced[r]) return 1;
    return 0;
}

/* The f32 fast paths: ROWS is (kept outer, reduced contiguous row), COLUMNS is
 * (kept outer, reduced R, kept inner K); anything else goes the general way. */
typedef enum { SHAPE_COPY, SHAPE_ROWS, SHAPE_COLUMNS, SHAPE_GENERAL } reduce_shape;

static reduce_shape classify(const reduce_layout *l, int64_t *outer, int64_t *length,
                             int64_t *inner) {
    int n = l->nruns;
    *outer = 1;
    *inner = 1;
    if (!layout_reduces(l)) return SHAPE_COPY;
    if (l->reduced[n - 1] && n <= 2) {
        if (n == 2) *outer = l->size[0];
        *length = l->size[n - 1];
        return SHAPE_ROWS;
    }
    if (!l->reduced[n - 1] && n <= 3 && l->reduced[n - 2]) {
        if (n == 3) *outer = l->size[0];
        *length = l->size[n - 2];
        *inner = l->size[n - 1];
        return SHAPE_COLUMNS;
    }
    return SHAPE_GENERAL;
}

/* Whether the f32 fast paths run (TM_REFERENCE_KERNELS=1 turns them off). */
static int fast_f32(tm_dtype dt) { return dt == TM_FLOAT && !tm_use_reference_kernels(); }

/* Scratch the kernel will use: accumulators per output element in the general path, per
 * column in the f32 column path. Shape rule and kernel both call this. */
static size_t reduce_scratch(tm_dtype dt, int rank, const int64_t *dims, int64_t mask,
                             int64_t out_numel) {
    reduce_layout l;
    int64_t outer, length = 0, inner;
    reduce_layout_init(&l, rank, dims, mask);
    reduce_shape s = classify(&l, &outer, &length, &inner);
    if (s == SHAPE_COPY) return 0;
    if (fast_f32(dt) && s == SHAPE_ROWS) return 0;
    if (fast_f32(dt) && s == SHAPE_COLUMNS) return (size_t)inner * sizeof(double);
    return (size_t)(out_numel > 0 ? out_numel : 1) * sizeof(accumulator);
}

/* ---- Reduce: shape rule ------------------------------------------------------------------ */

tm_status tm__shape_reduce(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                           int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)nin; (void)nout;
    const tm_vinfo *x = in[0];
    int64_t mask = a->i[0];
    tm_status s = check_dtype(c, prim, x->dtype, 1);
    if (s != TM_OK) return s;
    int64_t valid = x->rank ? (int64_t)((UINT64_C(1) << x->rank) - 1) : 0;
    if (mask < 0 || (mask & ~valid))
        return tm_ctx_fail(c, TM_ERR_SHAPE, "%s: axis mask 0x%llx names axes beyond rank %d",
                           prim_name(prim), (unsigned long long)mask, x->rank);
    out->dtype = x->dtype;
    out->rank = x->rank;
    for (int d = 0; d < x->rank; d++) out->dims[d] = (mask >> d) & 1 ? 1 : x->dims[d];
    int64_t out_numel = tm_numel(out->rank, out->dims);
    *scratch = reduce_scratch(x->dtype, x->rank, x->dims, mask, out_numel);
    return TM_OK;
}

/* ---- Reduce: general path --------------------------------------------------------------- */

static accumulator identity(int prim, tm_dtype dt) {
    accumulator a;
    int bits = tm_dtype_bits(dt);
    switch (domain_of(dt)) {
    case DOMAIN_FLOAT:
        a.f = prim == TM_P_REDUCE_SUM ? 0.0 : prim == TM_P_REDUCE_PROD ? 1.0
            : prim == TM_P_REDUCE_MAX ? -INFINITY : INFINITY;
        return a;
    case DOMAIN_SIGNED: {  /* the dtype's own extremes, so an empty max stores as lowest */
        int64_t highest = (int64_t)((UINT64_C(1) << (bits - 1)) - 1);
        a.i = prim == TM_P_REDUCE_SUM ? 0 : prim == TM_P_REDUCE_PROD ? 1
            : prim == TM_P_REDUCE_MAX ? -highest - 1 : highest;
        return a;
    }
    default:
        if (dt == TM_BOOL) bits = 1;
        a.u = prim == TM_P_REDUCE_SUM ? 0 : prim == TM_P_REDUCE_PROD ? 1
            : prim == TM_P_REDUCE_MAX ? 0
            : bits == 64 ? UINT64_MAX : (UINT64_C(1) << bits) - 1;
        return a;
    }
}

static double combine_f64(int prim, double acc, double v) {
    switch (prim) {
    case TM_P_REDUCE_SUM: return acc + v;
    case TM_P_REDUCE_PROD: return acc * v;
    case TM_P_REDUCE_MAX: return (v > acc || v != v) ? v : acc;  /* NaN propagates */
    default: return (v < acc || v != v) ? v : acc;
    }
}

static int64_t combine_i64(int prim, int64_t acc, int64_t v) {
    switch (prim) {
    case TM_P_REDUCE_SUM: return (int64_t)((uint64_t)acc + (uint64_t)v);  /* wraps */
    case TM_P_REDUCE_PROD: return (int64_t)((uint64_t)acc * (uint64_t)v);
    case TM_P_REDUCE_MAX: return v > acc ? v : acc;
    default: return v < acc ? v : acc;
    }
}

static uint64_t combine_u64(int prim, uint64_t acc, uint64_t v) {
    switch (prim) {
    case TM_P_REDUCE_SUM: return acc + v;
    case TM_P_REDUCE_PROD: return acc * v;
    case TM_P_REDUCE_MAX: return v > acc ? v : acc;
    default: return v < acc ? v : acc;
    }
}

/* Folds element i of x into acc. */
static void fold_element(int prim, const tm_tensor *x, size_t i, accumulator *acc) {
    switch (domain_of(x->dtype)) {
    case DOMAIN_FLOAT:
        acc->f = combine_f64(prim, acc->f, tm_load_f64(x->data, x->dtype, i));
        return;
    case DOMAIN_SIGNED:
        acc->i = combine_i64(prim, acc->i, tm_load_i64(x->data, x->dtype, i));
        return;
    default:
        acc->u = combine_u64(prim, acc->u, tm_load_u64(x->data, x->dtype, i));
        return;
    }
}

static void merge_accumulator(int prim, tm_dtype dt, accumulator *into, accumulator v) {
    switch (domain_of(dt)) {
    case DOMAIN_FLOAT: into->f = combine_f64(prim, into->f, v.f); return;
    case DOMAIN_SIGNED: into->i = combine_i64(prim, into->i, v.i); return;
    default: into->u = combine_u64(prim, into->u, v.u); return;
    }
}

static void store_accumulators(tm_tensor *y, const accumulator *acc, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        switch (domain_of(y->dtype)) {
        case DOMAIN_FLOAT: tm_store_f64(y->data, y->dtype, (size_t)i, acc[i].f); break;
        case DOMAIN_SIGNED: tm_store_i64(y->data, y->dtype, (size_t)i, acc[i].i); break;
        default: tm_store_u64(y->data, y->dtype, (size_t)i, acc[i].u); break;
        }
    }
}

/* Reads the input once in order, one innermost run at a time, folding each run into the
 * accumulators of the output elements it belongs to. */
static void reduce_general(int prim, const reduce_layout *l, const tm_tensor *x,
                           accumulator *acc) {
    int outer_runs = l->nruns - 1;
    int64_t inner = l->size[outer_runs];
    int inner_reduced = l->reduced[outer_runs];
    int64_t out_step[TM_MAX_RANK];  /* output elements per step of each outer run */
    int64_t kept = inner_reduced ? 1 : inner;
    for (int r = outer_runs - 1; r >= 0; r--) {
        out_step[r] = l->reduced[r] ? 0 : kept;
        if (!l->reduced[r]) kept *= l->size[r];
    }
    int64_t chunks = 1;
    for (int r = 0; r < outer_runs; r++) chunks *= l->size[r];
    int64_t index[TM_MAX_RANK] = {0};
    int64_t out_offset = 0;
    for (int64_t chunk = 0; chunk < chunks; chunk++) {
        size_t in_offset = (size_t)(chunk * inner);
        if (inner_reduced) {
            accumulator v = identity(prim, x->dtype);
            for (int64_t j = 0; j < inner; j++) fold_element(prim, x, in_offset + (size_t)j, &v);
            merge_accumulator(prim, x->dtype, &acc[out_offset], v);
        } else {
            for (int64_t j = 0; j < inner; j++)
                fold_element(prim, x, in_offset + (size_t)j, &acc[out_offset + j]);
        }
        for (int r = outer_runs - 1; r >= 0; r--) {
            out_offset += out_step[r];
            if (++index[r] < l->size[r]) break;
            out_offset -= out_step[r] * l->size[r];
            index[r] = 0;
        }
    }
}

/* ---- Reduce: f32 fast paths --------------------------------------------------------------- */

enum { LANES = 32, BLOCK = 1024 };

static double fold_lanes(const float *lane) {
    double s = 0;
    for (int l = 0; l < LANES; l++) s += lane[l];
    return s;
}

/* Float lanes over blocks of BLOCK elements (32 additions per lane), blocks added in
 * double: vector speed, and error far below 1e-6 relative even over millions of terms. */
static double sum_row_f32(const float *x, int64_t n) {
    double total = 0;
    int64_t i = 0;
    for (; i + BLOCK <= n; i += BLOCK) {
        float lane[LANES] = {0};
        for (int64_t j = 0; j < BLOCK; j += LANES)
            for (int l = 0; l < LANES; l++) lane[l] += x[i + j + l];
        total += fold_lanes(lane);
    }
    float lane[LANES] = {0};
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) lane[l] += x[i + l];
    total += fold_lanes(lane);
    for (; i < n; i++) total += x[i];
    return total;
}

static double prod_row_f32(const float *x, int64_t n) {
    double p = 1.0;
    for (int64_t i = 0; i < n; i++) p *= x[i];
    return p;
}

#define EXTREME_ROW(NAME, BETTER)                                               \
    static float NAME(const float *x, int64_t n) {                              \
        float lane[LANES];                                                      \
        for (int l = 0; l < LANES; l++) lane[l] = x[0];                         \
        int64_t i = 0;                                                          \
        for (; i + LANES <= n; i += LANES)                                      \
            for (int l = 0; l < LANES; l++) {                                   \
                float v = x[i + l];                                             \
                lane[l] = (v BETTER lane[l] || v != v) ? v : lane[l];           \
            }                                                                   \
        float m = lane[0];                                                      \
        for (int l = 1; l < LANES; l++)                                         \
            m = (lane[l] BETTER m || lane[l] != lane[l]) ? lane[l] : m;         \
        for (; i < n; i++) m = (x[i] BETTER m || x[i] != x[i]) ? x[i] : m;      \
        return m;                                                               \
    }

EXTREME_ROW(max_row_f32, >)
EXTREME_ROW(min_row_f32, <)

static void reduce_rows_f32(int prim, const float *x, float *y, int64_t rows, int64_t len) {
    for (int64_t r = 0; r < rows; r++) {
        const float *row = x + r * len;
        switch (prim) {
        case TM_P_REDUCE_SUM: y[r] = (float)sum_row_f32(row, len); break;
        case TM_P_REDUCE_PROD: y[r] = (float)prod_row_f32(row, len); break;
        case TM_P_REDUCE_MAX: y[r] = max_row_f32(row, len); break;
        default: y[r] = min_row_f32(row, len); break;
        }
    }
}

/* (outer, R, K) -> (outer, K): rows of K added into double accumulators (sum, product)
 * or compared in place in the output (max, min, which are exact in f32). */
static void reduce_columns_f32(int prim, const float *x, float *y, int64_t outer,
                               int64_t len, int64_t inner, double *acc) {
    for (int64_t o = 0; o < outer; o++) {
        const float *block = x + o * len * inner;
        float *out = y + o * inner;
        if (prim == TM_P_REDUCE_MAX || prim == TM_P_REDUCE_MIN) {
            memcpy(out, block, (size_t)inner * sizeof *out);
            for (int64_t r = 1; r < len; r++) {
                const float *row = block + r * inner;
                if (prim == TM_P_REDUCE_MAX)
                    for (int64_t j = 0; j < inner; j++)
                        out[j] = (row[j] > out[j] || row[j] != row[j]) ? row[j] : out[j];
                else
                    for (int64_t j = 0; j < inner; j++)
                        out[j] = (row[j] < out[j] || row[j] != row[j]) ? row[j] : out[j];
            }
            continue;
        }
        double start = prim == TM_P_REDUCE_SUM ? 0.0 : 1.0;
        for (int64_t j = 0; j < inner; j++) acc[j] = start;
        for (int64_t r = 0; r < len; r++) {
            const float *row = block + r * inner;
            if (prim == TM_P_REDUCE_SUM)
                for (int64_t j = 0; j < inner; j++) acc[j] += row[j];
            else
                for (int64_t j = 0; j < inner; j++) acc[j] *= row[j];
        }
        for (int64_t j = 0; j < inner; j++) out[j] = (float)acc[j];
    }
}

/* ---- Reduce: kernel ------------------------------------------------------------------------ */

static void fill_identity(int prim, tm_tensor *y, int64_t n) {
    accumulator a = identity(prim, y->dtype);
    for (int64_t i = 0; i < n; i++) {
        switch (domain_of(y->dtype)) {
        case DOMAIN_FLOAT: tm_store_f64(y->data, y->dtype, (size_t)i, a.f); break;
        case DOMAIN_SIGNED: tm_store_i64(y->data, y->dtype, (size_t)i, a.i); break;
        default: tm_store_u64(y->data, y->dtype, (size_t)i, a.u); break;
        }
    }
}

tm_status tm__kernel_reduce(const tm_kcall *k) {
    const tm_tensor *x = k->in[0];
    tm_tensor *y = k->out[0];
    int64_t out_n = tm_tensor_numel_(y);
    if (out_n <= 0) return TM_OK;
    if (tm_tensor_numel_(x) == 0) {  /* an empty reduced axis gives the identity */
        fill_identity(k->prim, y, out_n);
        return TM_OK;
    }
    reduce_layout l;
    int64_t outer, length = 0, inner;
    reduce_layout_init(&l, x->rank, x->dims, k->a->i[0]);
    reduce_shape shape = classify(&l, &outer, &length, &inner);
    if (shape == SHAPE_COPY) {
        memcpy(y->data, x->data, (size_t)out_n * tm_dtype_elem_size(x->dtype));
        return TM_OK;
    }
    size_t need = reduce_scratch(x->dtype, x->rank, x->dims, k->a->i[0], out_n);
    if (k->scratch_bytes < need)
        return tm__fail(k->err, TM_ERR_RUNTIME, "%s: %zu bytes of scratch given, %zu needed",
                        prim_name(k->prim), k->scratch_bytes, need);
    if (fast_f32(x->dtype) && shape == SHAPE_ROWS) {
        reduce_rows_f32(k->prim, x->data, y->data, outer, length);
        return TM_OK;
    }
    if (fast_f32(x->dtype) && shape == SHAPE_COLUMNS) {
        reduce_columns_f32(k->prim, x->data, y->data, outer, length, inner, k->scratch);
        return TM_OK;
    }
    accumulator *acc = k->scratch;
    accumulator start = identity(k->prim, x->dtype);
    for (int64_t i = 0; i < out_n; i++) acc[i] = start;
    reduce_general(k->prim, &l, x, acc);
    store_accumulators(y, acc, out_n);
    return TM_OK;
}

/* ---- Argmax / argmin ------------------------------------------------------------------------ */

tm_status tm__shape_argreduce(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                              int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)nin; (void)nout;
    const tm_vinfo *x = in[0];
    int axis = 0;
    tm_status s = check_dtype(c, prim, x->dtype, 1);
    if (s == TM_OK) s = normalize_axis(c, prim, a->i[0], x->rank, &axis);
    if (s != TM_OK) return s;
    out->dtype = TM_INT64;
    out->rank = x->rank;
    memcpy(out->dims, x->dims, sizeof out->dims);
    out->dims[axis] = 1;
    if (x->dims[axis] == 0 && tm_numel(out->rank, out->dims) > 0)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "%s: axis %d has size 0, so there is no index "
                           "to return", prim_name(prim), axis);
    *scratch = 0;
    return TM_OK;
}

/* Whether v replaces best. As numpy: the first NaN wins (the last one when select_last),
 * ties keep the first index unless select_last. */
static int float_better(int is_max, int select_last, double v, double best) {
    if (best != best) return select_last && v != v;
    if (v != v) return 1;
    if (select_last) return is_max ? v >= best : v <= best;
    return is_max ? v > best : v < best;
}

#define INT_BETTER(is_max, select_last, v, best)                                  \
    ((select_last) ? ((is_max) ? (v) >= (best) : (v) <= (best))                  \
                   : ((is_max) ? (v) > (best) : (v) < (best)))

static int64_t argreduce_f32(const float *x, int64_t size, int64_t stride, int is_max,
                             int select_last) {
    float best = x[0];
    int64_t at = 0;
    for (int64_t t = 1; t < size; t++) {
        float v = x[t * stride];
        if (float_better(is_max, select_last, v, best)) {
            best = v;
            at = t;
        }
    }
    return at;
}

static int64_t argreduce_any(const tm_tensor *x, size_t base, int64_t size, int64_t stride,
                             int is_max, int select_last) {
    int64_t at = 0;
    switch (domain_of(x->dtype)) {
    case DOMAIN_FLOAT: {
        double best = tm_load_f64(x->data, x->dtype, base);
        for (int64_t t = 1; t < size; t++) {
            double v = tm_load_f64(x->data, x->dtype, base + (size_t)(t * stride));
            if (float_better(is_max, select_last, v, best)) { best = v; at = t; }
        }
        return at;
    }
    case DOMAIN_SIGNED: {
        int64_t best = tm_load_i64(x->data, x->dtype, base);
        for (int64_t t = 1; t < size; t++) {
            int64_t v = tm_load_i64(x->data, x->dtype, base + (size_t)(t * stride));
            if (INT_BETTER(is_max, select_last, v, best)) { best = v; at = t; }
        }
        return at;
    }
    default: {
        uint64_t best = tm_load_u64(x->data, x->dtype, base);
        for (int64_t t = 1; t < size; t++) {
            uint64_t v = tm_load_u64(x->data, x->dtype, base + (size_t)(t * stride));
            if (INT_BETTER(is_max, select_last, v, best)) { best = v; at = t; }
        }
        return at;
    }
    }
}

tm_status tm__kernel_argreduce(const tm_kcall *k) {
    const tm_tensor *x = k->in[0];
    int64_t *y = k->out[0]->data;
    int axis = (int)(k->a->i[0] < 0 ? k->a->i[0] + x->rank : k->a->i[0]);
    int is_max = k->prim == TM_P_ARGMAX, select_last = k->a->i[1] != 0;
    int64_t outer, size, inner;
    split_at_axis(x, axis, &outer, &size, &inner);
    if (size == 0 || tm_tensor_numel_(k->out[0]) == 0) return TM_OK;
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t j = 0; j < inner; j++) {
            size_t base = (size_t)(o * size * inner + j);
            y[o * inner + j] = fast_f32(x->dtype)
                ? argreduce_f32((const float *)x->data + base, size, inner, is_max, select_last)
                : argreduce_any(x, base, size, inner, is_max, select_last);
        }
    }
    return TM_OK;
}

/* ---- Cumulative sum / product ---------------------------------------------------------------- */

tm_status tm__shape_cumulative(tm_ctx *c, int prim, const tm_args *a,
                               const tm_vinfo *const *in, int nin, tm_vinfo *out, int nout,
                               size_t *scratch) {
    (void)nin; (void)nout;
    const tm_vinfo *x = in[0];
    int axis = 0;
    tm_status s = check_dtype(c, prim, x->dtype, 0);
    if (s == TM_OK) s = normalize_axis(c, prim, a->i[0], x->rank, &axis);
    if (s != TM_OK) return s;
    out->dtype = x->dtype;
    out->rank = x->rank;
    memcpy(out->dims, x->dims, sizeof out->dims);
    int64_t inner = 1;
    for (int d = axis + 1; d < x->rank; d++) inner *= x->dims[d];
    *scratch = (size_t)(inner > 0 ? inner : 1) * sizeof(accumulator);
    return TM_OK;
}

/* Running value of each of the `inner` columns; exclusive stores before adding. */
static void cumulate_f32(int is_sum, int exclusive, const float *x, float *y, int64_t size,
                         int64_t inner, int64_t first, int64_t dir, double *acc) {
    double start = is_sum ? 0.0 : 1.0;
    for (int64_t j = 0; j < inner; j++) acc[j] = start;
    for (int64_t s = 0, t = first; s < size; s++, t += dir) {
        const float *row = x + t * inner;
        float *out = y + t * inner;
        for (int64_t j = 0; j < inner; j++) {
            double before = acc[j];
            acc[j] = is_sum ? before + row[j] : before * row[j];
            out[j] = (float)(exclusive ? before : acc[j]);
        }
    }
}

static void cumulate_any(int is_sum, int exclusive, const tm_tensor *x, tm_tensor *y,
                         size_t base, int64_t size, int64_t inner, int64_t first, int64_t dir,
                         accumulator *acc) {
    int prim = is_sum ? TM_P_REDUCE_SUM : TM_P_REDUCE_PROD;
    accumulator start = identity(prim, x->dtype);
    for (int64_t j = 0; j < inner; j++) acc[j] = start;
    for (int64_t s = 0, t = first; s < size; s++, t += dir) {
        for (int64_t j = 0; j < inner; j++) {
            size_t e = base + (size_t)(t * inner + j);
            accumulator before = acc[j];
            fold_element(prim, x, e, &acc[j]);
            accumulator v = exclusive ? before : acc[j];
            switch (domain_of(y->dtype)) {
            case DOMAIN_FLOAT: tm_store_f64(y->data, y->dtype, e, v.f); break;
            case DOMAIN_SIGNED: tm_store_i64(y->data, y->dtype, e, v.i); break;
            default: tm_store_u64(y->data, y->dtype, e, v.u); break;
            }
        }
    }
}

tm_status tm__kernel_cumulative(const tm_kcall *k) {
    const tm_tensor *x = k->in[0];
    tm_tensor *y = k->out[0];
    int axis = (int)(k->a->i[0] < 0 ? k->a->i[0] + x->rank : k->a->i[0]);
    int is_sum = k->prim == TM_P_CUMSUM;
    int exclusive = k->a->i[1] != 0, reverse = k->a->i[2] != 0;
    int64_t outer, size, inner;
    split_at_axis(x, axis, &outer, &size, &inner);
    if (tm_tensor_numel_(x) == 0) return TM_OK;
    if (k->scratch_bytes < (size_t)inner * sizeof(accumulator))
        return tm__fail(k->err, TM_ERR_RUNTIME, "%s: scratch too small",
                        prim_name(k->prim));
    int64_t first = reverse ? size - 1 : 0, dir = reverse ? -1 : 1;
    for (int64_t o = 0; o < outer; o++) {
        size_t base = (size_t)(o * size * inner);
        if (fast_f32(x->dtype))
            cumulate_f32(is_sum, exclusive, (const float *)x->data + base,
                         (float *)y->data + base, size, inner, first, dir, k->scratch);
        else
            cumulate_any(is_sum, exclusive, x, y, base, size, inner, first, dir, k->scratch);
    }
    return TM_OK;
}
