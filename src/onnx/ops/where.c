/* Where: cond ? x : y with numpy broadcasting of all three, as the WHERE primitive;
 * string tensors (which no arithmetic primitive takes) are selected on the host.
 * Not masked scatter. */
#include "elementwise.h"

/* The output dims of a numpy broadcast and, per input, the element stride of each output
 * axis (0 where the input's dim is 1 or absent). */
typedef struct bcast {
    int rank;
    int64_t dims[TM_MAX_RANK];
    int64_t strides[3][TM_MAX_RANK];
} bcast;

static tm_status bcast_init(tm_ctx *c, bcast *b, int n, const tm_tensor *const *t) {
    b->rank = 0;
    for (int k = 0; k < n; k++) {
        int64_t so_far[TM_MAX_RANK];
        memcpy(so_far, b->dims, sizeof so_far);
        if (tm_broadcast_dims(c, b->rank, so_far, t[k]->rank, t[k]->dims, &b->rank, b->dims))
            return c->status;
    }
    for (int k = 0; k < n; k++) {
        int shift = b->rank - t[k]->rank;
        int64_t stride = 1;
        for (int d = b->rank - 1; d >= 0; d--) {
            int64_t dim = d >= shift ? t[k]->dims[d - shift] : 1;
            b->strides[k][d] = dim == 1 ? 0 : stride;
            stride *= dim;
        }
    }
    return TM_OK;
}

/* The element of input k that output element i reads. */
static int64_t bcast_at(const bcast *b, int k, int64_t i) {
    int64_t off = 0;
    for (int d = b->rank - 1; d >= 0; d--) {
        off += (i % b->dims[d]) * b->strides[k][d];
        i /= b->dims[d];
    }
    return off;
}

static tm_status where_strings(tm_lower *L, tm_val cond, tm_val x, tm_val y) {
    tm_ctx *c = tm_lctx(L);
    const tm_tensor *t[3] = {tm_host(c, cond), tm_host(c, x), tm_host(c, y)};
    if (!t[0] || !t[1] || !t[2]) return c->status;
    bcast bc;
    if (bcast_init(c, &bc, 3, t) != TM_OK) return c->status;
    tm_tensor *out = tm_tensor_alloc(TM_STRING, bc.rank, bc.dims, c->allocator);
    if (!out) return tm_lfail(L, TM_ERR_NO_MEMORY, "cannot allocate the output");
    const uint8_t *pick = t[0]->data;
    const char *const *sx = t[1]->data, *const *sy = t[2]->data;
    int64_t n = tm_numel(bc.rank, bc.dims);
    for (int64_t i = 0; i < n; i++) {
        const char *s = pick[bcast_at(&bc, 0, i)] ? sx[bcast_at(&bc, 1, i)]
                                                  : sy[bcast_at(&bc, 2, i)];
        if (tm_tensor_set_string(out, i, s ? s : "") != TM_OK) {
            tm_tensor_free(out);
            return tm_lfail(L, TM_ERR_NO_MEMORY, "cannot copy a string of the output");
        }
    }
    tm_lout(L, 0, tm_val_tensor(c, out, 0));
    return c->status;
}

static tm_status lower_where(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val cond = tm_ew_input(L, 0), x = tm_ew_input(L, 1), y = tm_ew_input(L, 2);
    if (tm_ew_check(L, 0, cond, TM_DTS_BOOL) || tm_ew_same_dtype(L, 1, x, 2, y))
        return c->status;
    if (tm_vdtype(c, x) == TM_STRING) return where_strings(L, cond, x, y);
    tm_lout(L, 0, tm_where(c, cond, x, y));
    return c->status;
}
TM_REGISTER_OP("", "Where", 9, 27, lower_where);
