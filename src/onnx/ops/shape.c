/* Shape and Size: facts about a tensor's dims as int64 constants. Dims are always known
 * (under trace too), so these never record a primitive. Not Reshape (reshape.c). */
#include "../lower.h"

static int64_t clamp_axis(int64_t a, int rank) {
    if (a < 0) a += rank;
    return a < 0 ? 0 : a > rank ? rank : a;
}

static tm_status lower_shape(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    if (x == TM_NONE) return tm_lfail(L, TM_ERR_PARSE, "input 0 ('data') is missing");
    int rank = tm_vrank(c, x);
    int64_t start = clamp_axis(tm_attr_i(L, "start", 0), rank);
    int64_t end = clamp_axis(tm_attr_i(L, "end", rank), rank);
    int64_t n = end > start ? end - start : 0;
    tm_lout(L, 0, tm_const_i64s(c, tm_vdims(c, x) + start, n));
    return c->status;
}
TM_REGISTER_OP("", "Shape", 1, 27, lower_shape);

static tm_status lower_size(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    if (x == TM_NONE) return tm_lfail(L, TM_ERR_PARSE, "input 0 ('data') is missing");
    tm_tensor *t = tm_tensor_alloc(TM_INT64, 0, NULL, c->allocator);
    if (!t) return tm_lfail(L, TM_ERR_NO_MEMORY, "cannot allocate the size scalar");
    *(int64_t *)t->data = tm_vnumel(c, x);
    tm_lout(L, 0, tm_val_tensor(c, t, 0));
    return c->status;
}
TM_REGISTER_OP("", "Size", 1, 27, lower_size);
