/* The Reduce* family (Sum, Mean, Max, Min, Prod, L1, L2, LogSum, LogSumExp, SumSquare)
 * and ArgMax/ArgMin, over the REDUCE_* and ARGMAX/ARGMIN primitives. Composite
 * reductions are spelled out here; the primitives know only sum, prod, max and min. */
#include "elementwise.h"

typedef enum {
    RED_SUM, RED_MEAN, RED_MAX, RED_MIN, RED_PROD, RED_L1, RED_L2, RED_LOG_SUM,
    RED_LOG_SUM_EXP, RED_SUM_SQUARE
} reduce_kind;

/* The axes of the node: from the `axes` attribute before `axes_input_since`, from the
 * optional second input after. Returns the count, or -1 on failure. */
static int read_axes(tm_lower *L, int axes_input_since, int64_t *axes) {
    tm_ctx *c = tm_lctx(L);
    if (tm_lopset(L) < axes_input_since) {
        const int64_t *a;
        int n = tm_attr_ints(L, "axes", &a);
        if (n < 0) return 0;
        if (n > TM_MAX_RANK) {
            tm_lfail(L, TM_ERR_SHAPE, "attribute axes has %d entries, more than rank", n);
            return -1;
        }
        memcpy(axes, a, (size_t)n * sizeof *a);
        return n;
    }
    if (!tm_lhas(L, 1)) return 0;
    int64_t n = tm_host_i64(c, tm_lin(L, 1), axes, TM_MAX_RANK);
    return n < 0 ? -1 : (int)n;
}

/* Checks axes for range and duplicates. */
static int check_axes(tm_lower *L, const int64_t *axes, int n, int rank) {
    int seen[TM_MAX_RANK] = {0};
    for (int i = 0; i < n; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
        if (a < 0 || a >= rank || seen[a]) {
            tm_lfail(L, TM_ERR_SHAPE, "axes entry %lld is out of range or repeated for an "
                     "input of rank %d", (long long)axes[i], rank);
            return -1;
        }
        seen[a] = 1;
    }
    return 0;
}

static int64_t reduced_count(tm_ctx *c, tm_val x, const int64_t *axes, int n) {
    int64_t count = 1;
    int r = tm_vrank(c, x);
    if (n == 0) return tm_vnumel(c, x);
    for (int i = 0; i < n; i++) count *= tm_vdims(c, x)[axes[i] < 0 ? axes[i] + r : axes[i]];
    return count;
}

/* Half-precision inputs of the reductions whose intermediates can overflow f16 (sums of
 * squares, exponentials, a sum before dividing or taking its log) compute in f32;
 * integer L2 goes through double. Sum, max, min, prod and L1 accumulate wide inside. */
static tm_dtype work_dtype(tm_dtype dt, reduce_kind kind) {
    int widen = kind == RED_MEAN || kind == RED_L2 || kind == RED_SUM_SQUARE ||
                kind == RED_LOG_SUM || kind == RED_LOG_SUM_EXP;
    if (widen && (dt == TM_FLOAT16 || dt == TM_BFLOAT16)) return TM_FLOAT;
    if (kind == RED_L2 && !tm_dtype_is_float(dt)) return TM_DOUBLE;
    return dt;
}

/* The elementwise step before the reduction. */
static tm_val pre_step(tm_ctx *c, reduce_kind kind, tm_val x) {
    switch (kind) {
    case RED_L1: return tm_unary(c, TM_P_ABS, x);
    case RED_L2:
    case RED_SUM_SQUARE: return tm_mul(c, x, x);
    default: return x;
    }
}

/* log(sum(exp(x - m))) + m with m the max, so large inputs do not overflow; an infinite
 * max (all -inf, or an empty reduction) shifts by 0 instead of producing NaN. */
static tm_val log_sum_exp(tm_ctx *c, tm_val x, const int64_t *axes, int n) {
    tm_val m = tm_reduce(c, TM_P_REDUCE_MAX, x, axes, n, 1);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 1;
    a.i[1] = 1;
    tm_val inf = tm_prim(c, TM_P_ISINF, &m, 1, &a);
    m = tm_where(c, inf, tm_scalar_like(c, m, 0.0), m);
    tm_val s = tm_reduce(c, TM_P_REDUCE_SUM, tm_unary(c, TM_P_EXP, tm_sub(c, x, m)), axes, n, 1);
    return tm_add(c, tm_unary(c, TM_P_LOG, s), m);
}

static tm_val reduce_keep(tm_ctx *c, reduce_kind kind, tm_val x, const int64_t *axes, int n) {
    switch (kind) {
    case RED_MAX: return tm_reduce(c, TM_P_REDUCE_MAX, x, axes, n, 1);
    case RED_MIN: return tm_reduce(c, TM_P_REDUCE_MIN, x, axes, n, 1);
    case RED_PROD: return tm_reduce(c, TM_P_REDUCE_PROD, x, axes, n, 1);
    case RED_LOG_SUM_EXP: return log_sum_exp(c, x, axes, n);
    default: break;
    }
    tm_val s = tm_reduce(c, TM_P_REDUCE_SUM, pre_step(c, kind, x), axes, n, 1);
    if (kind == RED_MEAN) {
        int64_t count = reduced_count(c, x, axes, n);
        /* An empty integer mean stays 0 rather than dividing by zero. */
        if (count == 0 && !tm_dtype_is_float(tm_vdtype(c, x))) count = 1;
        return tm_div(c, s, tm_scalar_like(c, s, (double)count));
    }
    if (kind == RED_L2) return tm_unary(c, TM_P_SQRT, s);
    if (kind == RED_LOG_SUM) return tm_unary(c, TM_P_LOG, s);
    return s;
}

/* noop_with_empty_axes with no axes: the elementwise steps only (log(exp(x)) is x). */
static tm_val reduce_noop(tm_ctx *c, reduce_kind kind, tm_val x) {
    switch (kind) {
    case RED_L1: return tm_unary(c, TM_P_ABS, x);
    case RED_L2: return tm_unary(c, TM_P_ABS, x);
    case RED_SUM_SQUARE: return tm_mul(c, x, x);
    case RED_LOG_SUM: return tm_unary(c, TM_P_LOG, x);
    default: return x;
    }
}

static uint32_t allowed_dtypes(reduce_kind kind, int64_t opset) {
    uint32_t dts = TM_DTS_FLOAT | TM_DT(TM_INT32) | TM_DT(TM_INT64) | TM_DT(TM_UINT32) |
                   TM_DT(TM_UINT64);
    if ((kind == RED_MAX || kind == RED_MIN) && opset >= 12)
        dts |= TM_DT(TM_INT8) | TM_DT(TM_UINT8);
    if ((kind == RED_MAX || kind == RED_MIN) && opset >= 20) dts |= TM_DTS_BOOL;
    return dts;
}

static tm_status lower_reduce(tm_lower *L, reduce_kind kind, int axes_input_since) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    if (tm_ew_check(L, 0, x, allowed_dtypes(kind, tm_lopset(L)))) return c->status;
    int64_t axes[TM_MAX_RANK];
    int n = read_axes(L, axes_input_since, axes);
    if (n < 0) return c->status;
    int rank = tm_vrank(c, x);
    if (check_axes(L, axes, n, rank)) return c->status;
    int keepdims = (int)tm_attr_i(L, "keepdims", 1);
    tm_dtype dt = tm_vdtype(c, x);
    tm_val w = tm_cast(c, x, work_dtype(dt, kind));
    if (n == 0 && tm_attr_i(L, "noop_with_empty_axes", 0)) {
        tm_lout(L, 0, tm_cast(c, reduce_noop(c, kind, w), dt));
        return c->status;
    }
    tm_val y = tm_cast(c, reduce_keep(c, kind, w, axes, n), dt);
    if (!keepdims && y != TM_NONE) {
        int64_t dims[TM_MAX_RANK];
        int k = 0;
        for (int d = 0; d < rank; d++) {
            int reduced = n == 0;
            for (int i = 0; i < n; i++)
                if ((axes[i] < 0 ? axes[i] + rank : axes[i]) == d) reduced = 1;
            if (!reduced) dims[k++] = tm_vdims(c, x)[d];
        }
        y = tm_reshape(c, y, k, dims);
    }
    tm_lout(L, 0, y);
    return c->status;
}

static tm_status lower_reduce_sum(tm_lower *L) { return lower_reduce(L, RED_SUM, 13); }
static tm_status lower_reduce_mean(tm_lower *L) { return lower_reduce(L, RED_MEAN, 18); }
static tm_status lower_reduce_max(tm_lower *L) { return lower_reduce(L, RED_MAX, 18); }
static tm_status lower_reduce_min(tm_lower *L) { return lower_reduce(L, RED_MIN, 18); }
static tm_status lower_reduce_prod(tm_lower *L) { return lower_reduce(L, RED_PROD, 18); }
static tm_status lower_reduce_l1(tm_lower *L) { return lower_reduce(L, RED_L1, 18); }
static tm_status lower_reduce_l2(tm_lower *L) { return lower_reduce(L, RED_L2, 18); }
static tm_status lower_reduce_log_sum(tm_lower *L) { return lower_reduce(L, RED_LOG_SUM, 18); }
static tm_status lower_reduce_log_sum_exp(tm_lower *L) {
    return lower_reduce(L, RED_LOG_SUM_EXP, 18);
}
static tm_status lower_reduce_sum_square(tm_lower *L) {
    return lower_reduce(L, RED_SUM_SQUARE, 18);
}

TM_REGISTER_OP("", "ReduceSum", 1, 27, lower_reduce_sum);
TM_REGISTER_OP("", "ReduceMean", 1, 27, lower_reduce_mean);
TM_REGISTER_OP("", "ReduceMax", 1, 27, lower_reduce_max);
TM_REGISTER_OP("", "ReduceMin", 1, 27, lower_reduce_min);
TM_REGISTER_OP("", "ReduceProd", 1, 27, lower_reduce_prod);
TM_REGISTER_OP("", "ReduceL1", 1, 27, lower_reduce_l1);
TM_REGISTER_OP("", "ReduceL2", 1, 27, lower_reduce_l2);
TM_REGISTER_OP("", "ReduceLogSum", 1, 27, lower_reduce_log_sum);
TM_REGISTER_OP("", "ReduceLogSumExp", 1, 27, lower_reduce_log_sum_exp);
TM_REGISTER_OP("", "ReduceSumSquare", 1, 27, lower_reduce_sum_square);

/* ArgMax/ArgMin: int64 indices along one axis; select_last_index from opset 12. */
static tm_status lower_arg(tm_lower *L, int prim) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    uint32_t dts = TM_DTS_FLOAT | TM_DTS_INT;
    if (tm_ew_check(L, 0, x, dts)) return c->status;
    int rank = tm_vrank(c, x);
    int64_t axis_attr = tm_attr_i(L, "axis", 0);
    if (axis_attr < -rank || axis_attr >= (rank ? rank : 1))
        return tm_lfail(L, TM_ERR_SHAPE, "attribute axis=%lld is out of range for rank %d",
                        (long long)axis_attr, rank);
    int axis = tm_norm_axis(c, axis_attr, rank);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = axis;
    a.i[1] = tm_attr_i(L, "select_last_index", 0);
    tm_val y = tm_prim(c, prim, &x, 1, &a);
    if (y == TM_NONE) return c->status;
    int keepdims = (int)tm_attr_i(L, "keepdims", 1);
    int64_t dims[TM_MAX_RANK];
    int k = 0;
    for (int d = 0; d < rank; d++)
        if (d != axis || keepdims) dims[k++] = d == axis ? 1 : tm_vdims(c, x)[d];
    tm_lout(L, 0, tm_reshape(c, y, k, dims));
    return c->status;
}

static tm_status lower_argmax(tm_lower *L) { return lower_arg(L, TM_P_ARGMAX); }
static tm_status lower_argmin(tm_lower *L) { return lower_arg(L, TM_P_ARGMIN); }

TM_REGISTER_OP("", "ArgMax", 1, 27, lower_argmax);
TM_REGISTER_OP("", "ArgMin", 1, 27, lower_argmin);
