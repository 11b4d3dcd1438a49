/* MaxPool (with its optional Indices output), AveragePool, LpPool over the POOL and
 * MAXPOOL_INDICES primitives, and the Global* pools as reductions over the spatial
 * axes. auto_pad and the attribute defaults of each opset are resolved here. */
#include "elementwise.h"
#include "window.h"

enum { POOL_MAX = 0, POOL_AVERAGE = 1, POOL_LP = 2 };

static int pool_input(tm_lower *L, tm_val x, uint32_t dts) {
    tm_ctx *c = tm_lctx(L);
    if (tm_ew_check(L, 0, x, dts)) return -1;
    if (tm_vrank(c, x) < 3) {
        tm_lfail(L, TM_ERR_SHAPE, "input 0 has rank %d; pools take (N, C, spatial...)",
                 tm_vrank(c, x));
        return -1;
    }
    return 0;
}

/* The Lp pools' p: an int attribute from opset 2, a float in opset 1. Default 2. */
static int64_t lp_norm_order(tm_lower *L) {
    const tm_attr *a = tm_attr_get(L, "p");
    if (!a) return 2;
    return a->type == TM_ATTR_FLOAT ? (int64_t)a->f : a->i;
}

static tm_status lower_pool(tm_lower *L, int kind) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    uint32_t dts = TM_DTS_FLOAT;
    if (kind == POOL_MAX) dts |= TM_DT(TM_INT8) | TM_DT(TM_UINT8);
    if (pool_input(L, x, dts)) return c->status;
    int n = tm_vrank(c, x) - 2;
    tm_window win;
    if (tm_win_read(L, n, tm_vdims(c, x) + 2, NULL, &win)) return c->status;
    int64_t p = kind == POOL_LP ? lp_norm_order(L) : 0;
    if (kind == POOL_LP && p < 1)
        return tm_lfail(L, TM_ERR_SHAPE, "attribute p=%lld must be >= 1", (long long)p);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = n;
    a.i[1] = kind;
    a.i[2] = tm_attr_i(L, "count_include_pad", 0) != 0;
    a.i[3] = tm_attr_i(L, "ceil_mode", 0) != 0;
    a.i[4] = p;
    for (int d = 0; d < n; d++) {
        a.i[5 + d] = win.kernel[d];
        a.i[5 + n + d] = win.stride[d];
        a.i[5 + 2 * n + d] = win.pad_begin[d];
        a.i[5 + 3 * n + d] = win.pad_end[d];
        a.i[5 + 4 * n + d] = win.dilation[d];
    }
    if (kind == POOL_MAX && tm_lwants(L, 1)) {
        int64_t order = tm_attr_i(L, "storage_order", 0);
        if (order != 0 && order != 1)
            return tm_lfail(L, TM_ERR_SHAPE, "attribute storage_order=%lld must be 0 or 1",
                            (long long)order);
        a.i[5 + 5 * n] = order;
        tm_val out[2];
        if (tm_prim_n(c, TM_P_MAXPOOL_INDICES, &x, 1, &a, out, 2) != TM_OK) return c->status;
        tm_lout(L, 0, out[0]);
        tm_lout(L, 1, out[1]);
        return c->status;
    }
    tm_lout(L, 0, tm_prim(c, TM_P_POOL, &x, 1, &a));
    return c->status;
}

static tm_status lower_max_pool(tm_lower *L) { return lower_pool(L, POOL_MAX); }
static tm_status lower_average_pool(tm_lower *L) { return lower_pool(L, POOL_AVERAGE); }
static tm_status lower_lp_pool(tm_lower *L) { return lower_pool(L, POOL_LP); }

/* Global pools: one window over all spatial axes, as reductions (keepdims). */
static tm_status lower_global_pool(tm_lower *L, int kind) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    if (pool_input(L, x, TM_DTS_FLOAT)) return c->status;
    int r = tm_vrank(c, x);
    int64_t axes[TM_MAX_RANK];
    int64_t count = 1;
    for (int d = 2; d < r; d++) {
        axes[d - 2] = d;
        count *= tm_vdims(c, x)[d];
    }
    if (kind == POOL_MAX) {
        tm_lout(L, 0, tm_reduce(c, TM_P_REDUCE_MAX, x, axes, r - 2, 1));
        return c->status;
    }
    tm_dtype dt = tm_vdtype(c, x);
    tm_val w = tm_cast(c, x, dt == TM_DOUBLE ? TM_DOUBLE : TM_FLOAT);
    tm_val y;
    if (kind == POOL_AVERAGE) {
        y = tm_reduce(c, TM_P_REDUCE_SUM, w, axes, r - 2, 1);
        y = tm_div(c, y, tm_scalar_like(c, y, (double)count));
    } else {
        int64_t p = lp_norm_order(L);
        if (p < 1) return tm_lfail(L, TM_ERR_SHAPE, "attribute p=%lld must be >= 1", (long long)p);
        tm_val mag = tm_unary(c, TM_P_ABS, w);
        if (p == 2) {
            y = tm_unary(c, TM_P_SQRT, tm_reduce(c, TM_P_REDUCE_SUM, tm_mul(c, w, w), axes,
                                                 r - 2, 1));
        } else if (p == 1) {
            y = tm_reduce(c, TM_P_REDUCE_SUM, mag, axes, r - 2, 1);
        } else {
            tm_val powed = tm_binary(c, TM_P_POW, mag, tm_scalar_like(c, mag, (double)p));
            y = tm_reduce(c, TM_P_REDUCE_SUM, powed, axes, r - 2, 1);
            y = tm_binary(c, TM_P_POW, y, tm_scalar_like(c, y, 1.0 / (double)p));
        }
    }
    tm_lout(L, 0, tm_cast(c, y, dt));
    return c->status;
}

static tm_status lower_global_average_pool(tm_lower *L) {
    return lower_global_pool(L, POOL_AVERAGE);
}
static tm_status lower_global_max_pool(tm_lower *L) { return lower_global_pool(L, POOL_MAX); }
static tm_status lower_global_lp_pool(tm_lower *L) { return lower_global_pool(L, POOL_LP); }

TM_REGISTER_OP("", "MaxPool", 1, 27, lower_max_pool);
TM_REGISTER_OP("", "AveragePool", 1, 27, lower_average_pool);
TM_REGISTER_OP("", "LpPool", 1, 27, lower_lp_pool);
TM_REGISTER_OP("", "GlobalAveragePool", 1, 27, lower_global_average_pool);
TM_REGISTER_OP("", "GlobalMaxPool", 1, 27, lower_global_max_pool);
TM_REGISTER_OP("", "GlobalLpPool", 1, 27, lower_global_lp_pool);
