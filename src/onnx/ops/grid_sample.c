/* GridSample (opsets 16-27) over the GRID_SAMPLE primitive, and AffineGrid (20-27) as a
 * constant base grid times the transposed theta (one batched matmul). Not the sampling
 * kernel (core/prims/image.c). */
#include "elementwise.h"

/* Opset 16 names the modes bilinear/bicubic, 20 on linear/cubic; both are taken. */
static int grid_mode(tm_lower *L) {
    static const char *const names[] = {"nearest", "linear", "cubic", "bilinear", "bicubic"};
    const char *m = tm_attr_s(L, "mode", tm_lopset(L) >= 20 ? "linear" : "bilinear");
    for (int i = 0; i < 5; i++)
        if (!strcmp(m, names[i])) return i < 3 ? i : i - 2;
    tm_lfail(L, TM_ERR_UNSUPPORTED, "attribute 'mode' is '%s'; expected nearest, linear "
             "(bilinear) or cubic (bicubic)", m);
    return -1;
}

static int grid_padding(tm_lower *L) {
    static const char *const names[] = {"zeros", "border", "reflection"};
    const char *m = tm_attr_s(L, "padding_mode", "zeros");
    for (int i = 0; i < 3; i++)
        if (!strcmp(m, names[i])) return i;
    tm_lfail(L, TM_ERR_UNSUPPORTED, "attribute 'padding_mode' is '%s'; expected zeros, border "
             "or reflection", m);
    return -1;
}

static tm_status lower_grid_sample(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0), grid = tm_ew_input(L, 1);
    if (tm_ew_check(L, 0, x, TM_DTS_NUMERIC | TM_DTS_BOOL) ||
        tm_ew_check(L, 1, grid, TM_DTS_FLOAT))
        return c->status;
    int rank = tm_vrank(c, x);
    if (rank < 3 || tm_vrank(c, grid) != rank || tm_vdims(c, grid)[rank - 1] != rank - 2 ||
        tm_vdims(c, grid)[0] != tm_vdims(c, x)[0])
        return tm_lfail(L, TM_ERR_SHAPE, "input 0 (rank %d) must be (N, C, D1..Dn) and input 1 "
                        "(rank %d) (N, O1..On, n) with n = %d", rank, tm_vrank(c, grid),
                        rank - 2);
    int mode = grid_mode(L), padding = grid_padding(L);
    if (mode < 0 || padding < 0) return c->status;
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = mode;
    a.i[1] = padding;
    a.i[2] = tm_attr_i(L, "align_corners", 0) != 0;
    tm_val in[2] = {x, grid};
    tm_lout(L, 0, tm_prim(c, TM_P_GRID_SAMPLE, in, 2, &a));
    return c->status;
}
TM_REGISTER_OP("", "GridSample", 16, 27, lower_grid_sample);

/* The (P, n + 1) homogeneous base grid, columns innermost axis first then 1, as
 * normalised pixel centres (or corners with align_corners) of the spatial dims. */
static tm_val base_grid(tm_ctx *c, tm_dtype dt, int n, const int64_t *spatial, int align) {
    int64_t points = 1;
    for (int d = 0; d < n; d++) points *= spatial[d];
    int64_t dims[2] = {points, n + 1};
    tm_tensor *t = tm_tensor_alloc(dt, 2, dims, c->allocator);
    if (!t) {
        tm_ctx_fail(c, TM_ERR_NO_MEMORY, "cannot allocate the base grid");
        return TM_NONE;
    }
    for (int64_t p = 0; p < points; p++) {
        int64_t rest = p;
        for (int d = n - 1; d >= 0; d--) {
            int64_t i = rest % spatial[d], len = spatial[d];
            rest /= len;
            double v = align ? (len > 1 ? -1.0 + 2.0 * (double)i / (double)(len - 1) : -1.0)
                             : -1.0 + (2.0 * (double)i + 1.0) / (double)len;
            tm_store_f64(t->data, dt, (size_t)(p * (n + 1) + (n - 1 - d)), v);
        }
        tm_store_f64(t->data, dt, (size_t)(p * (n + 1) + n), 1.0);
    }
    return tm_val_tensor(c, t, 0);
}

static tm_status lower_affine_grid(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val theta = tm_ew_input(L, 0), size = tm_ew_input(L, 1);
    if (tm_ew_check(L, 0, theta, TM_DTS_FLOAT) || tm_ew_check(L, 1, size, TM_DT(TM_INT64)))
        return c->status;
    int64_t shape[TM_MAX_RANK];
    if (tm_vnumel(c, size) != 4 && tm_vnumel(c, size) != 5)
        return tm_lfail(L, TM_ERR_SHAPE, "input 'size' has %lld entries; expected 4 (N, C, H, "
                        "W) or 5 (N, C, D, H, W)", (long long)tm_vnumel(c, size));
    int64_t k = tm_host_i64(c, size, shape, TM_MAX_RANK);
    if (k < 0) return c->status;
    int n = (int)k - 2;
    const int64_t *td = tm_vdims(c, theta);
    if (tm_vrank(c, theta) != 3 || td[0] != shape[0] || td[1] != n || td[2] != n + 1)
        return tm_lfail(L, TM_ERR_SHAPE, "input 'theta' must be (%lld, %d, %d) for size of %d "
                        "entries", (long long)shape[0], n, n + 1, (int)k);
    for (int d = 0; d < n; d++)
        if (shape[2 + d] < 0)
            return tm_lfail(L, TM_ERR_SHAPE, "input 'size' has a negative dim %lld",
                            (long long)shape[2 + d]);
    int align = tm_attr_i(L, "align_corners", 0) != 0;
    tm_val base = base_grid(c, tm_vdtype(c, theta), n, shape + 2, align);
    if (base == TM_NONE) return c->status;
    int64_t points = tm_vdims(c, base)[0];
    int64_t bdims[3] = {1, points, n + 1}, perm[3] = {0, 2, 1};
    tm_val grid = tm_matmul(c, tm_reshape(c, base, 3, bdims), tm_transpose(c, theta, perm));
    int64_t out[TM_MAX_RANK];
    out[0] = shape[0];
    for (int d = 0; d < n; d++) out[1 + d] = shape[2 + d];
    out[n + 1] = n;
    tm_lout(L, 0, tm_reshape(c, grid, n + 2, out));
    return c->status;
}
TM_REGISTER_OP("", "AffineGrid", 20, 27, lower_affine_grid);
