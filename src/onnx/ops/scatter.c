/* Scatter (the deprecated name of ScatterElements), ScatterElements and ScatterND, each
 * one primitive with its reduction. Not the Gather family (gather.c). */
#include <string.h>
#include "../lower.h"

/* The 'reduction' attribute as the primitives number it (0 none, 1 add, 2 mul, 3 max,
 * 4 min), or -1 after failing. add/mul exist from opset 16, max/min from 18. */
static int reduction_of(tm_lower *L) {
    static const char *const names[] = {"none", "add", "mul", "max", "min"};
    const char *r = tm_attr_s(L, "reduction", "none");
    int64_t opset = tm_lopset(L);
    int allowed = opset >= 18 ? 5 : opset >= 16 ? 3 : 1;
    for (int i = 0; i < allowed; i++)
        if (!strcmp(r, names[i])) return i;
    tm_lfail(L, TM_ERR_UNSUPPORTED, "attribute 'reduction' is '%s', which opset %lld does not "
             "have", r, (long long)opset);
    return -1;
}

/* All three inputs, updates of data's dtype, indices of an allowed integer type. */
static int check_inputs(tm_lower *L, tm_val *in, int allow_int32) {
    tm_ctx *c = tm_lctx(L);
    static const char *const names[] = {"data", "indices", "updates"};
    for (int i = 0; i < 3; i++) {
        in[i] = tm_lin(L, i);
        if (in[i] == TM_NONE) {
            tm_lfail(L, TM_ERR_PARSE, "input '%s' is missing", names[i]);
            return 0;
        }
    }
    tm_dtype it = tm_vdtype(c, in[1]);
    if (it != TM_INT64 && !(allow_int32 && it == TM_INT32)) {
        tm_lfail(L, TM_ERR_DTYPE, "input 'indices' must be %s, got %s",
                 allow_int32 ? "int32 or int64" : "int64", tm_dtype_name(it));
        return 0;
    }
    if (tm_vdtype(c, in[2]) != tm_vdtype(c, in[0])) {
        tm_lfail(L, TM_ERR_DTYPE, "input 'updates' is %s, 'data' is %s",
                 tm_dtype_name(tm_vdtype(c, in[2])), tm_dtype_name(tm_vdtype(c, in[0])));
        return 0;
    }
    return 1;
}

static tm_status lower_scatter_elements(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val in[3];
    if (!check_inputs(L, in, 1)) return c->status;
    int rank = tm_vrank(c, in[0]);
    if (tm_vrank(c, in[1]) != rank || tm_vrank(c, in[2]) != rank)
        return tm_lfail(L, TM_ERR_SHAPE, "inputs 'indices' (rank %d) and 'updates' (rank %d) "
                        "must have the rank of 'data' (%d)", tm_vrank(c, in[1]),
                        tm_vrank(c, in[2]), rank);
    for (int d = 0; d < rank; d++)
        if (tm_vdims(c, in[1])[d] != tm_vdims(c, in[2])[d])
            return tm_lfail(L, TM_ERR_SHAPE, "inputs 'indices' and 'updates' differ at dim %d "
                            "(%lld vs %lld)", d, (long long)tm_vdims(c, in[1])[d],
                            (long long)tm_vdims(c, in[2])[d]);
    int64_t axis = tm_attr_i(L, "axis", 0);
    if (axis < -rank || axis >= rank)
        return tm_lfail(L, TM_ERR_SHAPE, "attribute 'axis' is %lld, outside [%d, %d]",
                        (long long)axis, -rank, rank - 1);
    int red = reduction_of(L);
    if (red < 0) return c->status;
    tm_args a = {0};
    a.i[0] = axis < 0 ? axis + rank : axis;
    a.i[1] = red;
    tm_lout(L, 0, tm_prim(c, TM_P_SCATTER_ELEMENTS, in, 3, &a));
    return c->status;
}
TM_REGISTER_OP("", "Scatter", 9, 10, lower_scatter_elements);
TM_REGISTER_OP("", "ScatterElements", 11, 27, lower_scatter_elements);

static tm_status lower_scatter_nd(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val in[3];
    if (!check_inputs(L, in, 0)) return c->status;
    int rd = tm_vrank(c, in[0]), ri = tm_vrank(c, in[1]), ru = tm_vrank(c, in[2]);
    int64_t k = ri ? tm_vdims(c, in[1])[ri - 1] : 0;
    if (ri < 1 || k < 1 || k > rd)
        return tm_lfail(L, TM_ERR_SHAPE, "input 'indices' must end in a dim within [1, %d] "
                        "(the rank of 'data'), got %lld", rd, (long long)k);
    /* updates = indices.shape[:-1] + data.shape[k:] */
    int ok = ru == ri - 1 + rd - (int)k;
    for (int d = 0; ok && d < ri - 1; d++) ok = tm_vdims(c, in[2])[d] == tm_vdims(c, in[1])[d];
    for (int d = (int)k; ok && d < rd; d++)
        ok = tm_vdims(c, in[2])[ri - 1 + d - k] == tm_vdims(c, in[0])[d];
    if (!ok)
        return tm_lfail(L, TM_ERR_SHAPE, "input 'updates' must have the shape "
                        "indices.shape[:-1] + data.shape[%lld:]", (long long)k);
    int red = reduction_of(L);
    if (red < 0) return c->status;
    tm_args a = {0};
    a.i[0] = red;
    tm_lout(L, 0, tm_prim(c, TM_P_SCATTER_ND, in, 3, &a));
    return c->status;
}
TM_REGISTER_OP("", "ScatterND", 11, 27, lower_scatter_nd);
