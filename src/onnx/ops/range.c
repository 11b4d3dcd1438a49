/* Range: start, limit and delta read on the host, then the RANGE primitive (or, for
 * half-precision types with stash_type 0, the spec's accumulation in that type).
 * Not the random generators. */
#include <math.h>
#include "../lower.h"

static int range_dtype_ok(tm_lower *L, tm_dtype dt) {
    switch (dt) {
    case TM_FLOAT: case TM_DOUBLE: case TM_INT16: case TM_INT32: case TM_INT64:
        return 1;
    case TM_FLOAT16: case TM_BFLOAT16:
        return tm_lopset(L) >= 27;
    default:
        return 0;
    }
}

static int is_half(tm_dtype dt) { return dt == TM_FLOAT16 || dt == TM_BFLOAT16; }

static double round_to(tm_dtype dt, double v) {
    uint16_t h = 0;
    tm_store_f64(&h, dt, 0, v);
    return tm_load_f64(&h, dt, 0);
}

/* stash_type 0: each element is the previous one plus delta, rounded to the type. */
static tm_val half_accumulated(tm_lower *L, tm_dtype dt, double start, double delta,
                               int64_t count) {
    tm_ctx *c = tm_lctx(L);
    tm_tensor *t = tm_tensor_alloc(dt, 1, &count, c->allocator);
    if (!t) {
        tm_lfail(L, TM_ERR_NO_MEMORY, "cannot allocate a range of %lld elements",
                 (long long)count);
        return TM_NONE;
    }
    double v = start;
    for (int64_t i = 0; i < count; i++) {
        tm_store_f64(t->data, dt, (size_t)i, v);
        v = round_to(dt, v + delta);
    }
    return tm_val_tensor(c, t, 0);
}

static tm_status lower_range(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    static const char *const names[] = {"start", "limit", "delta"};
    tm_val v[3];
    for (int i = 0; i < 3; i++) {
        v[i] = tm_lin(L, i);
        if (v[i] == TM_NONE) return tm_lfail(L, TM_ERR_PARSE, "input '%s' is missing", names[i]);
        if (tm_vnumel(c, v[i]) != 1)
            return tm_lfail(L, TM_ERR_SHAPE, "input '%s' must be a scalar, it has %lld "
                            "elements", names[i], (long long)tm_vnumel(c, v[i]));
    }
    tm_dtype dt = tm_vdtype(c, v[0]);
    if (!range_dtype_ok(L, dt))
        return tm_lfail(L, TM_ERR_DTYPE, "input 'start' has type %s, which Range at opset %lld "
                        "does not take", tm_dtype_name(dt), (long long)tm_lopset(L));
    for (int i = 1; i < 3; i++)
        if (tm_vdtype(c, v[i]) != dt)
            return tm_lfail(L, TM_ERR_DTYPE, "input '%s' is %s, 'start' is %s", names[i],
                            tm_dtype_name(tm_vdtype(c, v[i])), tm_dtype_name(dt));
    tm_args a = {0};
    a.i[0] = dt;
    if (tm_dtype_is_float(dt)) {
        double start, limit, delta;
        if (tm_host_f64(c, v[0], &start) || tm_host_f64(c, v[1], &limit) ||
            tm_host_f64(c, v[2], &delta))
            return c->status;
        if (delta == 0 || isnan(delta))
            return tm_lfail(L, TM_ERR_SHAPE, "input 'delta' is %g", delta);
        double n = ceil((limit - start) / delta);
        if (!(n < 9.0e18))
            return tm_lfail(L, TM_ERR_SHAPE, "inputs 'start' %g, 'limit' %g, 'delta' %g give "
                            "too many elements", start, limit, delta);
        int64_t count = n > 0 ? (int64_t)n : 0;
        if (is_half(dt) && tm_attr_i(L, "stash_type", 1) == 0) {
            tm_lout(L, 0, half_accumulated(L, dt, start, delta, count));
            return c->status;
        }
        a.i[1] = count;
        a.f[0] = start;
        a.f[1] = delta;
    } else {
        int64_t start, limit, delta;
        if (tm_host_i64(c, v[0], &start, 1) < 0 || tm_host_i64(c, v[1], &limit, 1) < 0 ||
            tm_host_i64(c, v[2], &delta, 1) < 0)
            return c->status;
        if (delta == 0) return tm_lfail(L, TM_ERR_SHAPE, "input 'delta' is 0");
        int64_t count = 0;
        /* Unsigned spans: limit - start may not fit an int64. */
        if (delta > 0 && limit > start)
            count = (int64_t)(((uint64_t)limit - (uint64_t)start - 1) / (uint64_t)delta + 1);
        if (delta < 0 && limit < start)
            count = (int64_t)(((uint64_t)start - (uint64_t)limit - 1) /
                              ((uint64_t)0 - (uint64_t)delta) + 1);
        a.i[1] = count;
        a.i[2] = start;
        a.i[3] = delta;
    }
    tm_lout(L, 0, tm_prim(c, TM_P_RANGE, NULL, 0, &a));
    return c->status;
}
TM_REGISTER_OP("", "Range", 11, 27, lower_range);
