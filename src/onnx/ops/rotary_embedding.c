/* RotaryEmbedding (opset 23): rotates pairs of each head's leading rotary_embedding_dim
 * features by per-position angles given as cos/sin caches, halves or interleaved pairs,
 * from slices, multiplies and concats. Not com.microsoft's RotaryEmbedding. */
#include "elementwise.h"

/* [start, start + count) of x's last axis. */
static tm_val last_axis(tm_ctx *c, tm_val x, int64_t start, int64_t count) {
    return tm_slice_axis(c, x, tm_vrank(c, x) - 1, start, count);
}

/* The rotated x1/x2 pair: (cos x1 - sin x2, sin x1 + cos x2) joined on the last axis. */
static tm_val rotate(tm_ctx *c, tm_val x1, tm_val x2, tm_val cosv, tm_val sinv) {
    tm_val real = tm_sub(c, tm_mul(c, cosv, x1), tm_mul(c, sinv, x2));
    tm_val imag = tm_add(c, tm_mul(c, sinv, x1), tm_mul(c, cosv, x2));
    tm_val parts[2] = {real, imag};
    return tm_concat(c, parts, 2, tm_vrank(c, real) - 1);
}

/* The cache rows for each (batch, position), shaped (B, S, half) -> to broadcast against
 * the head layout: (B, 1, S, half) for 4-D input, (B, S, 1, half) for 3-D. */
static tm_val cache_rows(tm_lower *L, int index, tm_val pos, int three_d, int64_t batch,
                         int64_t seq, int64_t half) {
    tm_ctx *c = tm_lctx(L);
    tm_val cache = tm_lin(L, index);
    if (pos != TM_NONE) cache = tm_gather(c, cache, pos, 0);
    if (!tm_ctx_ok(c)) return TM_NONE;
    if (tm_vrank(c, cache) != 3 || tm_vdims(c, cache)[0] != batch ||
        tm_vdims(c, cache)[1] != seq || tm_vdims(c, cache)[2] != half) {
        tm_lfail(L, TM_ERR_SHAPE, "input %d ('%s') does not give (%lld, %lld, %lld) rows of "
                 "batch, position and rotary_embedding_dim/2", index, tm_lnode(L)->inputs[index],
                 (long long)batch, (long long)seq, (long long)half);
        return TM_NONE;
    }
    int64_t d4[4] = {batch, 1, seq, half}, d3[4] = {batch, seq, 1, half};
    return tm_reshape(c, cache, 4, three_d ? d3 : d4);
}

static tm_status lower_rotary_embedding(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    uint32_t dts = TM_DT(TM_FLOAT) | TM_DT(TM_FLOAT16) | TM_DT(TM_BFLOAT16);
    if (tm_ew_check(L, 0, x, dts) || tm_ew_check(L, 1, tm_ew_input(L, 1), dts) ||
        tm_ew_check(L, 2, tm_ew_input(L, 2), dts))
        return c->status;
    int r = tm_vrank(c, x);
    if (r != 3 && r != 4)
        return tm_lfail(L, TM_ERR_SHAPE, "input 0 (X) has rank %d, expected 3 or 4", r);
    const int64_t *dx = tm_vdims(c, x);
    int three_d = r == 3;
    int64_t batch = dx[0], seq = three_d ? dx[1] : dx[2], head = dx[r - 1];
    tm_val h = x;
    if (three_d) {
        int64_t heads = tm_attr_i(L, "num_heads", 0);
        if (heads <= 0 || dx[2] % heads)
            return tm_lfail(L, TM_ERR_SHAPE, "3-D input needs attribute num_heads dividing "
                            "the hidden size %lld, got %lld", (long long)dx[2], (long long)heads);
        head = dx[2] / heads;
        int64_t dims[4] = {batch, seq, heads, head};
        h = tm_reshape(c, x, 4, dims);
    }
    int64_t rd = tm_attr_i(L, "rotary_embedding_dim", 0);
    if (rd == 0) rd = head;
    if (rd < 0 || rd > head || rd % 2)
        return tm_lfail(L, TM_ERR_SHAPE, "attribute rotary_embedding_dim=%lld must be even and "
                        "at most the head size %lld", (long long)rd, (long long)head);
    tm_val pos = tm_lin(L, 3);
    if (pos != TM_NONE && tm_vdtype(c, pos) != TM_INT64)
        return tm_lfail(L, TM_ERR_DTYPE, "input 3 (position_ids) is %s, expected int64",
                        tm_dtype_name(tm_vdtype(c, pos)));
    int64_t half = rd / 2;
    tm_val cosv = cache_rows(L, 1, pos, three_d, batch, seq, half);
    tm_val sinv = cache_rows(L, 2, pos, three_d, batch, seq, half);
    tm_val xr = last_axis(c, h, 0, rd), rot;
    if (tm_attr_i(L, "interleaved", 0)) {
        /* Pairs (2i, 2i+1): view the rotated part as (..., half, 2). */
        int64_t dims[5];
        memcpy(dims, tm_vdims(c, xr), 3 * sizeof *dims);
        dims[3] = half;
        dims[4] = 2;
        tm_val pairs = tm_reshape(c, xr, 5, dims);
        int64_t one = 4;
        rot = rotate(c, last_axis(c, pairs, 0, 1), last_axis(c, pairs, 1, 1),
                     tm_unsqueeze(c, cosv, &one, 1), tm_unsqueeze(c, sinv, &one, 1));
        rot = tm_reshape(c, rot, 4, tm_vdims(c, xr));
    } else {
        rot = rotate(c, last_axis(c, xr, 0, half), last_axis(c, xr, half, half), cosv, sinv);
    }
    if (rd < head) {
        tm_val parts[2] = {rot, last_axis(c, h, rd, head - rd)};
        rot = tm_concat(c, parts, 2, 3);
    }
    tm_lout(L, 0, tm_reshape(c, rot, r, dx));
    return c->status;
}

TM_REGISTER_OP("", "RotaryEmbedding", 23, 27, lower_rotary_embedding);
