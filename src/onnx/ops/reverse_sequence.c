/* ReverseSequence: per batch entry b, the first lens[b] time steps reversed, as a
 * GATHER_ELEMENTS along the time axis with indices computed from the (traced) lengths.
 * Not a flip of the whole axis. */
#include "../lower.h"

static tm_status lower_reverse_sequence(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0), lens = tm_lin(L, 1);
    if (x == TM_NONE || lens == TM_NONE)
        return tm_lfail(L, TM_ERR_PARSE, "input '%s' is missing",
                        x == TM_NONE ? "input" : "sequence_lens");
    int rank = tm_vrank(c, x);
    int64_t time_axis = tm_attr_i(L, "time_axis", 0), batch_axis = tm_attr_i(L, "batch_axis", 1);
    if (rank < 2)
        return tm_lfail(L, TM_ERR_SHAPE, "input 'input' must have rank 2 or more, got %d", rank);
    if ((time_axis != 0 && time_axis != 1) || batch_axis != 1 - time_axis)
        return tm_lfail(L, TM_ERR_SHAPE, "attributes 'time_axis' (%lld) and 'batch_axis' "
                        "(%lld) must be 0 and 1 in some order", (long long)time_axis,
                        (long long)batch_axis);
    int64_t steps = tm_vdims(c, x)[time_axis], batch = tm_vdims(c, x)[batch_axis];
    if (tm_vdtype(c, lens) != TM_INT64 || tm_vrank(c, lens) != 1 ||
        tm_vdims(c, lens)[0] != batch)
        return tm_lfail(L, TM_ERR_SHAPE, "input 'sequence_lens' must be int64 of shape (%lld), "
                        "got %s of rank %d", (long long)batch,
                        tm_dtype_name(tm_vdtype(c, lens)), tm_vrank(c, lens));

    /* t along the time axis, lens along the batch axis, 1 elsewhere: they broadcast to
     * the index of each (time, batch) pair. */
    int64_t tdims[TM_MAX_RANK], bdims[TM_MAX_RANK], xdims[TM_MAX_RANK];
    for (int d = 0; d < rank; d++) {
        xdims[d] = tm_vdims(c, x)[d];
        tdims[d] = d == time_axis ? steps : 1;
        bdims[d] = d == batch_axis ? batch : 1;
    }
    tm_args a = {0};
    a.i[0] = TM_INT64;
    a.i[1] = steps;
    a.i[3] = 1;
    tm_val t = tm_reshape(c, tm_prim(c, TM_P_RANGE, NULL, 0, &a), rank, tdims);
    tm_val n = tm_reshape(c, lens, rank, bdims);
    tm_val last = tm_sub(c, n, tm_const_scalar(c, TM_INT64, 1));
    tm_val idx = tm_where(c, tm_binary(c, TM_P_LT, t, n), tm_sub(c, last, t), t);
    idx = tm_expand(c, idx, rank, xdims);
    a.i[0] = time_axis;
    a.i[1] = a.i[3] = 0;
    tm_val in[2] = {x, idx};
    tm_lout(L, 0, tm_prim(c, TM_P_GATHER_ELEMENTS, in, 2, &a));
    return c->status;
}
TM_REGISTER_OP("", "ReverseSequence", 10, 27, lower_reverse_sequence);
