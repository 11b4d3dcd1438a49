/* Trilu (keep one triangle: a host-built mask and a WHERE) and EyeLike (a constant
 * diagonal). Both depend only on shapes and k, never on the data. Not OneHot. */
#include "../lower.h"

static tm_status lower_trilu(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    if (x == TM_NONE) return tm_lfail(L, TM_ERR_PARSE, "input 'input' is missing");
    int rank = tm_vrank(c, x);
    if (rank < 2)
        return tm_lfail(L, TM_ERR_SHAPE, "input 'input' must have rank 2 or more, got %d", rank);
    int64_t k = 0;
    if (tm_lhas(L, 1)) {
        tm_val kv = tm_lin(L, 1);
        if (tm_vdtype(c, kv) != TM_INT64 || tm_vnumel(c, kv) != 1)
            return tm_lfail(L, TM_ERR_SHAPE, "input 'k' must be one int64, got %s with %lld "
                            "elements", tm_dtype_name(tm_vdtype(c, kv)),
                            (long long)tm_vnumel(c, kv));
        if (tm_host_i64(c, kv, &k, 1) < 0) return c->status;
    }
    int upper = tm_attr_i(L, "upper", 1) != 0;
    int64_t dims[2] = {tm_vdims(c, x)[rank - 2], tm_vdims(c, x)[rank - 1]};
    tm_tensor *mask = tm_tensor_alloc(TM_BOOL, 2, dims, c->allocator);
    if (!mask) return tm_lfail(L, TM_ERR_NO_MEMORY, "cannot allocate a %lldx%lld mask",
                               (long long)dims[0], (long long)dims[1]);
    uint8_t *m = mask->data;
    for (int64_t i = 0; i < dims[0]; i++)
        for (int64_t j = 0; j < dims[1]; j++)
            m[i * dims[1] + j] = upper ? j - i >= k : j - i <= k;
    tm_val keep = tm_val_tensor(c, mask, 0);
    tm_lout(L, 0, tm_where(c, keep, x, tm_scalar_like(c, x, 0.0)));
    return c->status;
}
TM_REGISTER_OP("", "Trilu", 14, 27, lower_trilu);

static int eye_dtype_ok(tm_dtype dt) {
    return dt != TM_STRING && dt != TM_COMPLEX64 && dt != TM_COMPLEX128 && tm_dtype_is_valid(dt);
}

static tm_status lower_eye_like(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    if (x == TM_NONE) return tm_lfail(L, TM_ERR_PARSE, "input 'input' is missing");
    if (tm_vrank(c, x) != 2)
        return tm_lfail(L, TM_ERR_SHAPE, "input 'input' must have rank 2, got %d",
                        tm_vrank(c, x));
    int64_t dt = tm_attr_i(L, "dtype", tm_vdtype(c, x));
    if (!tm_dtype_is_valid((int)dt) || !eye_dtype_ok((tm_dtype)dt))
        return tm_lfail(L, TM_ERR_DTYPE, "attribute 'dtype' (%lld, %s) is not a type EyeLike "
                        "makes", (long long)dt, tm_dtype_name((tm_dtype)dt));
    int64_t k = tm_attr_i(L, "k", 0);
    const int64_t *dims = tm_vdims(c, x);
    tm_tensor *t = tm_tensor_alloc((tm_dtype)dt, 2, dims, c->allocator);
    if (!t) return tm_lfail(L, TM_ERR_NO_MEMORY, "cannot allocate a %lldx%lld identity",
                            (long long)dims[0], (long long)dims[1]);
    for (int64_t i = 0; i < dims[0]; i++) {
        int64_t j = i + k;
        if (j < 0 || j >= dims[1]) continue;
        size_t at = (size_t)(i * dims[1] + j);
        if (tm_dtype_is_float(t->dtype)) tm_store_f64(t->data, t->dtype, at, 1.0);
        else tm_store_u64(t->data, t->dtype, at, 1);
    }
    tm_lout(L, 0, tm_val_tensor(c, t, 0));
    return c->status;
}
TM_REGISTER_OP("", "EyeLike", 9, 27, lower_eye_like);
