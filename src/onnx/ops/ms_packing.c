/* com.microsoft RemovePadding/RestorePadding (padded batch <-> packed tokens) and
 * PackedAttention/PackedMultiHeadAttention (unpack, attend without padding keys, repack).
 * RemovePadding's output size is read on the host; the rest only scatters and gathers. */
#include <stdlib.h>
#include "ms_attention.h"

/* RemovePadding: input (B, S, H), sequence_token_count (B) -> output (tokens, H),
 * token_offset (B, S) (real tokens' flat offsets first, then the padding's),
 * cumulated_seq_len (B + 1), max_seq_len (1). */
static tm_status lower_remove_padding(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ms_input(L, 0, TM_DT(TM_FLOAT) | TM_DT(TM_FLOAT16));
    tm_val counts = tm_ms_input(L, 1, TM_DT(TM_INT32));
    if (!tm_ctx_ok(c) || tm_ms_check_shape(L, 0, x, 3, -1)) return c->status;
    const int64_t *dx = tm_vdims(c, x);
    int64_t b = dx[0], s = dx[1], h = dx[2];
    if (tm_vnumel(c, counts) != b)
        return tm_lfail(L, TM_ERR_SHAPE, "input 1 (sequence_token_count) must hold %lld counts",
                        (long long)b);
    int64_t *n = malloc((size_t)(b > 0 ? b : 1) * sizeof *n);
    tm_tensor *offset = tm_tensor_new(TM_INT32, 2, dx), *cum = NULL, *max = NULL;
    int64_t cum_dims = b + 1, one = 1;
    cum = tm_tensor_new(TM_INT32, 1, &cum_dims);
    max = tm_tensor_new(TM_INT32, 1, &one);
    if (!n || !offset || !cum || !max) {
        free(n);
        tm_tensor_free(offset);
        tm_tensor_free(cum);
        tm_tensor_free(max);
        return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    }
    if (tm_host_i64(c, counts, n, b) != b) {
        free(n);
        tm_tensor_free(offset);
        tm_tensor_free(cum);
        tm_tensor_free(max);
        return c->status;
    }
    int32_t *po = tm_tensor_data(offset), *pc = tm_tensor_data(cum), *pm = tm_tensor_data(max);
    int64_t tokens = 0, k = 0;
    pc[0] = 0;
    pm[0] = 0;
    for (int64_t i = 0; i < b; i++) {
        int64_t len = n[i] < 0 ? 0 : n[i] > s ? s : n[i];
        for (int64_t j = 0; j < len; j++) po[k++] = (int32_t)(i * s + j);
        tokens += len;
        pc[i + 1] = (int32_t)tokens;
        if (len > pm[0]) pm[0] = (int32_t)len;
    }
    for (int64_t i = 0; i < b; i++) {
        int64_t len = n[i] < 0 ? 0 : n[i] > s ? s : n[i];
        for (int64_t j = len; j < s; j++) po[k++] = (int32_t)(i * s + j);
    }
    free(n);
    tm_val off = tm_val_tensor(c, offset, 0);
    int64_t rows[2] = {b * s, h}, flat = b * s;
    tm_val idx = tm_slice_axis(c, tm_reshape(c, off, 1, &flat), 0, 0, tokens);
    tm_lout(L, 0, tm_gather(c, tm_reshape(c, x, 2, rows), idx, 0));
    tm_lout(L, 1, off);
    tm_lout(L, 2, tm_val_tensor(c, cum, 0));
    tm_lout(L, 3, tm_val_tensor(c, max, 0));
    return c->status;
}

/* x (tokens, H) scattered into zeros (B*S, H) at token_offset[:tokens] -> (B, S, H). */
static tm_val restore(tm_lower *L, tm_val x, tm_val offset) {
    tm_ctx *c = tm_lctx(L);
    if (!tm_ctx_ok(c)) return TM_NONE;
    int64_t dx[2], doff[2];
    memcpy(dx, tm_vdims(c, x), sizeof dx);
    if (tm_vrank(c, offset) == 2) memcpy(doff, tm_vdims(c, offset), sizeof doff);
    if (tm_vrank(c, offset) != 2 || dx[0] > doff[0] * doff[1]) {
        tm_lfail(L, TM_ERR_SHAPE, "token_offset must be (B, S) with B*S >= %lld tokens",
                 (long long)dx[0]);
        return TM_NONE;
    }
    int64_t b = doff[0], s = doff[1], h = dx[1], flat = b * s, idx_dims[2] = {dx[0], 1};
    tm_val idx = tm_slice_axis(c, tm_reshape(c, tm_cast(c, offset, TM_INT64), 1, &flat), 0, 0,
                               dx[0]);
    idx = tm_reshape(c, idx, 2, idx_dims);
    int64_t zero_dims[2] = {flat, h}, out[3] = {b, s, h};
    tm_args a;
    memset(&a, 0, sizeof a);
    tm_val in[3] = {tm_const_fill(c, tm_vdtype(c, x), 2, zero_dims, 0.0), idx, x};
    return tm_reshape(c, tm_prim(c, TM_P_SCATTER_ND, in, 3, &a), 3, out);
}

/* y (B, S, H) back to the tokens at token_offset[:tokens]. */
static tm_val repack(tm_ctx *c, tm_val y, tm_val offset, int64_t tokens) {
    if (!tm_ctx_ok(c)) return TM_NONE;
    const int64_t *d = tm_vdims(c, y);
    int64_t flat = d[0] * d[1], rows[2] = {flat, d[2]};
    tm_val idx = tm_slice_axis(c, tm_reshape(c, tm_cast(c, offset, TM_INT64), 1, &flat), 0, 0,
                               tokens);
    return tm_gather(c, tm_reshape(c, y, 2, rows), idx, 0);
}

static tm_status lower_restore_padding(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ms_input(L, 0, TM_DT(TM_FLOAT) | TM_DT(TM_FLOAT16));
    tm_val offset = tm_ms_input(L, 1, TM_DT(TM_INT32));
    if (!tm_ctx_ok(c) || tm_ms_check_shape(L, 0, x, 2, -1)) return c->status;
    tm_lout(L, 0, restore(L, x, offset));
    return c->status;
}

/* Keys at or beyond each sequence's length (cumulative_sequence_length differences)
 * are excluded: (B, 1, 1, S) bool. */
static tm_val packed_keep(tm_lower *L, int index, int64_t b, int64_t s) {
    tm_ctx *c = tm_lctx(L);
    tm_val cum = tm_ms_input(L, index, TM_DT(TM_INT32));
    if (cum == TM_NONE) return TM_NONE;
    if (tm_vnumel(c, cum) != b + 1) {
        tm_lfail(L, TM_ERR_SHAPE, "input %d (cumulative_sequence_length) must hold %lld values",
                 index, (long long)(b + 1));
        return TM_NONE;
    }
    int64_t n = b + 1, dims[4] = {b, 1, 1, 1};
    cum = tm_cast(c, tm_reshape(c, cum, 1, &n), TM_INT64);
    tm_val len = tm_sub(c, tm_slice_axis(c, cum, 0, 1, b), tm_slice_axis(c, cum, 0, 0, b));
    return tm_binary(c, TM_P_LT, ms_iota(c, s, 4, 3), tm_reshape(c, len, 4, dims));
}

static int packed_attend(tm_lower *L, tm_val q, tm_val k, tm_val v, tm_val offset,
                         int64_t heads, int cum_index, int bias_index, tm_dtype dt) {
    tm_ctx *c = tm_lctx(L);
    if (!tm_ctx_ok(c)) return -1;
    int64_t tokens = tm_vdims(c, q)[0];
    tm_val qp = ms_split_heads(c, restore(L, q, offset), heads);
    tm_val kp = ms_split_heads(c, restore(L, k, offset), heads);
    tm_val vp = ms_split_heads(c, restore(L, v, offset), heads);
    if (!tm_ctx_ok(c)) return -1;
    ms_attn a;
    ms_attn_init(&a);
    a.batch = tm_vdims(c, qp)[0];
    a.heads = a.kv_heads = heads;
    a.q_len = a.total = tm_vdims(c, qp)[2];
    a.head = tm_vdims(c, qp)[3];
    a.v_head = tm_vdims(c, vp)[3];
    double scale = tm_attr_f(L, "scale", 0.0f);
    a.scale = scale == 0.0 ? 1.0 / sqrt((double)a.head) : scale;
    a.allowed = packed_keep(L, cum_index, a.batch, a.total);
    tm_val bias = tm_ms_optional(L, bias_index, MS_ATTN_DTS);
    if (bias != TM_NONE) {
        const int64_t *db = tm_vdims(c, bias);
        if (tm_vrank(c, bias) != 4 || (db[0] != 1 && db[0] != a.batch) ||
            (db[1] != 1 && db[1] != heads) || db[2] != a.q_len || db[3] != a.total)
            return tm_lfail(L, TM_ERR_SHAPE, "input %d (attention_bias) must be (B or 1, N or "
                            "1, S, S)", bias_index);
        a.additive = bias;
    }
    tm_lout(L, 0, repack(c, ms_attend(c, &a, qp, kp, vp, dt), offset, tokens));
    return tm_ctx_ok(c) ? 0 : -1;
}

/* PackedAttention: input (tokens, Din) times weights (Din, D + D + Dv) plus bias. */
static tm_status lower_packed_attention(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    uint32_t dts = TM_DT(TM_FLOAT) | TM_DT(TM_FLOAT16);
    tm_val x = tm_ms_input(L, 0, dts), w = tm_ms_input(L, 1, dts), bias = tm_ms_input(L, 2, dts);
    tm_val offset = tm_ms_input(L, 3, TM_DT(TM_INT32));
    int64_t heads = tm_attr_i(L, "num_heads", 0);
    if (!tm_ctx_ok(c) || tm_ms_check_shape(L, 0, x, 2, -1) || tm_ms_check_shape(L, 1, w, 2, -1))
        return c->status;
    int64_t width = tm_vdims(c, w)[1], dq = width / 3, dv = width / 3;
    const int64_t *sizes;
    if (tm_attr_ints(L, "qkv_hidden_sizes", &sizes) == 3) {
        dq = sizes[0];
        dv = sizes[2];
        if (sizes[1] != dq) dq = -1;
    }
    if (heads <= 0 || dq <= 0 || dv <= 0 || 2 * dq + dv != width || dq % heads || dv % heads)
        return tm_lfail(L, TM_ERR_SHAPE, "weights width %lld does not split into Q, K, V for "
                        "num_heads=%lld", (long long)width, (long long)heads);
    tm_val qkv = tm_add(c, tm_matmul(c, x, w), bias);
    tm_val q = tm_slice_axis(c, qkv, 1, 0, dq), k = tm_slice_axis(c, qkv, 1, dq, dq);
    tm_val v = tm_slice_axis(c, qkv, 1, 2 * dq, dv);
    packed_attend(L, q, k, v, offset, heads, 4, 5, tm_vdtype(c, x));
    return c->status;
}

/* PackedMultiHeadAttention: query/key/value (tokens, D) (+ bias (D + D + Dv)), or packed
 * QKV (tokens, N, 3, H) with key and value absent. */
static tm_status lower_packed_multi_head_attention(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    uint32_t dts = TM_DT(TM_FLOAT) | TM_DT(TM_FLOAT16);
    tm_val query = tm_ms_input(L, 0, dts);
    tm_val key = tm_ms_optional(L, 1, dts), value = tm_ms_optional(L, 2, dts);
    tm_val bias = tm_ms_optional(L, 3, dts), offset = tm_ms_input(L, 4, TM_DT(TM_INT32));
    int64_t heads = tm_attr_i(L, "num_heads", 0);
    if (!tm_ctx_ok(c)) return c->status;
    if (heads <= 0)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute num_heads=%lld must be >= 1",
                        (long long)heads);
    const int64_t *dq = tm_vdims(c, query);
    tm_val q, k, v;
    if (key == TM_NONE) {
        if (tm_vrank(c, query) != 4 || dq[1] != heads || dq[2] != 3)
            return tm_lfail(L, TM_ERR_SHAPE, "packed input 0 must be (tokens, %lld, 3, H)",
                            (long long)heads);
        int64_t d2[2] = {dq[0], heads * dq[3]};
        q = tm_reshape(c, tm_slice_axis(c, query, 2, 0, 1), 2, d2);
        k = tm_reshape(c, tm_slice_axis(c, query, 2, 1, 1), 2, d2);
        v = tm_reshape(c, tm_slice_axis(c, query, 2, 2, 1), 2, d2);
    } else {
        if (tm_ms_check_shape(L, 0, query, 2, -1) || tm_ms_check_shape(L, 1, key, 2, dq[1]) ||
            value == TM_NONE || tm_ms_check_shape(L, 2, value, 2, -1))
            return c->status;
        q = query;
        k = key;
        v = value;
    }
    int64_t d = tm_vdims(c, q)[1], dvh = tm_vdims(c, v)[1];
    if (bias != TM_NONE) {
        if (tm_ms_check_shape(L, 3, bias, 1, 2 * d + dvh)) return c->status;
        q = tm_add(c, q, tm_slice_axis(c, bias, 0, 0, d));
        k = tm_add(c, k, tm_slice_axis(c, bias, 0, d, d));
        v = tm_add(c, v, tm_slice_axis(c, bias, 0, 2 * d, dvh));
    }
    if (d % heads || dvh % heads)
        return tm_lfail(L, TM_ERR_SHAPE, "hidden sizes %lld and %lld are not multiples of "
                        "num_heads=%lld", (long long)d, (long long)dvh, (long long)heads);
    packed_attend(L, q, k, v, offset, heads, 5, 6, tm_vdtype(c, query));
    return c->status;
}

TM_REGISTER_OP("com.microsoft", "RemovePadding", 1, 1, lower_remove_padding);
TM_REGISTER_OP("com.microsoft", "RestorePadding", 1, 1, lower_restore_padding);
TM_REGISTER_OP("com.microsoft", "PackedAttention", 1, 1, lower_packed_attention);
TM_REGISTER_OP("com.microsoft", "PackedMultiHeadAttention", 1, 1, lower_packed_multi_head_attention);
