/* Det: determinants of the trailing (M, M) matrices by Gaussian elimination with
 * partial pivoting, unrolled over the M columns and batched over the leading dims,
 * in double. Not a LAPACK call: O(M) primitive steps, meant for small matrices. */
#include "elementwise.h"

typedef struct elim {
    tm_val a;       /* (batch, M, M) f64, eliminated up to the current column */
    tm_val det;     /* (batch, 1, 1): sign of the row swaps times the pivots so far */
    tm_val rows;    /* (1, M, 1) int64 row numbers */
    int64_t m;
} elim;

/* Swaps row k with the row at or below it of largest magnitude in column k. */
static void pivot_rows(tm_ctx *c, elim *e, int64_t k) {
    tm_val col = tm_unary(c, TM_P_ABS, tm_slice_axis(c, e->a, 2, k, 1));
    tm_val below = tm_binary(c, TM_P_GE, e->rows, tm_const_scalar(c, TM_INT64, (double)k));
    col = tm_where(c, below, col, tm_const_scalar(c, TM_DOUBLE, -1.0));
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 1;
    tm_val p = tm_prim(c, TM_P_ARGMAX, &col, 1, &a);                       /* (batch, 1, 1) */
    tm_val kv = tm_const_scalar(c, TM_INT64, (double)k);
    tm_val idx = tm_where(c, tm_binary(c, TM_P_EQ, e->rows, kv), p,
                          tm_where(c, tm_binary(c, TM_P_EQ, e->rows, p), kv, e->rows));
    const int64_t *da = tm_vdims(c, e->a);
    tm_val in[2] = {e->a, tm_expand(c, idx, 3, da)};
    e->a = tm_prim(c, TM_P_GATHER_ELEMENTS, in, 2, &a);
    tm_val flip = tm_where(c, tm_binary(c, TM_P_EQ, p, kv), tm_const_scalar(c, TM_DOUBLE, 1.0),
                           tm_const_scalar(c, TM_DOUBLE, -1.0));
    e->det = tm_mul(c, e->det, flip);
}

/* Clears column k below the pivot; a zero pivot (a singular matrix) clears nothing. */
static void eliminate(tm_ctx *c, elim *e, int64_t k) {
    tm_val pivot_row = tm_slice_axis(c, e->a, 1, k, 1);                   /* (batch, 1, M) */
    tm_val pivot = tm_slice_axis(c, pivot_row, 2, k, 1);                  /* (batch, 1, 1) */
    e->det = tm_mul(c, e->det, pivot);
    if (k + 1 == e->m) return;
    tm_val zero = tm_const_scalar(c, TM_DOUBLE, 0.0);
    tm_val factor = tm_div(c, tm_slice_axis(c, e->a, 2, k, 1), pivot);    /* (batch, M, 1) */
    tm_val under = tm_binary(c, TM_P_GT, e->rows, tm_const_scalar(c, TM_INT64, (double)k));
    factor = tm_where(c, under, factor, zero);
    factor = tm_where(c, tm_binary(c, TM_P_EQ, pivot, zero), zero, factor);
    e->a = tm_sub(c, e->a, tm_mul(c, factor, pivot_row));
}

static tm_status lower_det(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT)) return c->status;
    int r = tm_vrank(c, x);
    const int64_t *dx = tm_vdims(c, x);
    if (r < 2 || dx[r - 1] != dx[r - 2])
        return tm_lfail(L, TM_ERR_SHAPE, "input 0 (X) must end in a square (M, M), got rank %d",
                        r);
    elim e;
    e.m = dx[r - 1];
    int64_t batch = tm_numel(r - 2, dx), flat[3] = {batch, e.m, e.m};
    e.a = tm_cast(c, tm_reshape(c, x, 3, flat), TM_DOUBLE);
    int64_t one[3] = {batch, 1, 1};
    e.det = tm_const_fill(c, TM_DOUBLE, 3, one, 1.0);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = TM_INT64;
    a.i[1] = e.m;
    a.i[3] = 1;
    int64_t rows_dims[3] = {1, e.m, 1};
    e.rows = tm_reshape(c, tm_prim(c, TM_P_RANGE, NULL, 0, &a), 3, rows_dims);
    for (int64_t k = 0; k < e.m && tm_ctx_ok(c); k++) {
        pivot_rows(c, &e, k);
        eliminate(c, &e, k);
    }
    tm_val y = tm_reshape(c, tm_cast(c, e.det, tm_vdtype(c, x)), r - 2, dx);
    tm_lout(L, 0, y);
    return c->status;
}

TM_REGISTER_OP("", "Det", 11, 27, lower_det);
