/* com.microsoft GroupQueryAttention (seqlens_k-driven KV cache, rotary, local window,
 * softcap, head sinks, QK output) and com.microsoft RotaryEmbedding, over ms_attention.h.
 * Not ai.onnx RotaryEmbedding (rotary_embedding.c). */
#include "ms_attention.h"

/* (B, 1, 1, 1) int64 view of a (B) int32 tensor. */
static tm_val per_batch(tm_ctx *c, tm_val v) {
    int64_t dims[4] = {tm_vdims(c, v)[0], 1, 1, 1};
    return tm_reshape(c, tm_cast(c, v, TM_INT64), 4, dims);
}

/* The present cache (B, Nkv, T, H): rows [0, past_b) from past (zero-padded to T),
 * rows [past_b, past_b + S) from x (B, Nkv, S, H), zeros after. past_b (B, 1, 1, 1)
 * int64, or TM_NONE when it is 0 for every batch. */
static tm_val gqa_present(tm_ctx *c, tm_val past, tm_val x, tm_val past_b, int64_t total) {
    if (!tm_ctx_ok(c)) return TM_NONE;
    int64_t dx[4];
    memcpy(dx, tm_vdims(c, x), sizeof dx);
    int64_t s = dx[2];
    if (past_b == TM_NONE) {
        if (s == total) return x;
        int64_t begin[4] = {0}, end[4] = {0, 0, total - s, 0};
        return tm_pad(c, x, 0, begin, end, 0.0);
    }
    int64_t p = tm_vdims(c, past)[2];
    if (p < total) {
        int64_t begin[4] = {0}, end[4] = {0, 0, total - p, 0};
        past = tm_pad(c, past, 0, begin, end, 0.0);
    }
    tm_val t = ms_iota(c, total, 4, 2);
    tm_val rel = tm_sub(c, t, past_b);
    tm_val fresh;
    if (s == 1) {
        fresh = x;
    } else {
        tm_val idx = tm_binary(c, TM_P_MAX, rel, tm_const_scalar(c, TM_INT64, 0.0));
        idx = tm_binary(c, TM_P_MIN, idx, tm_const_scalar(c, TM_INT64, (double)(s - 1)));
        int64_t full[4] = {dx[0], dx[1], total, dx[3]};
        idx = tm_expand(c, idx, 4, full);
        tm_args a;
        memset(&a, 0, sizeof a);
        a.i[0] = 2;
        tm_val in[2] = {x, idx};
        fresh = tm_prim(c, TM_P_GATHER_ELEMENTS, in, 2, &a);
    }
    tm_val zero = tm_scalar_like(c, x, 0.0);
    tm_val in_new = tm_binary(c, TM_P_LT, rel, tm_const_scalar(c, TM_INT64, (double)s));
    tm_val in_past = tm_binary(c, TM_P_LT, t, past_b);
    return tm_where(c, in_past, past, tm_where(c, in_new, fresh, zero));
}

typedef struct gqa {
    int64_t batch, heads, kv_heads, q_len, head, past_buffer, total, present;
    int first_prompt;
} gqa;

static int gqa_read(tm_lower *L, gqa *g, tm_val *q, tm_val *k, tm_val *v) {
    tm_ctx *c = tm_lctx(L);
    g->heads = tm_attr_i(L, "num_heads", 0);
    g->kv_heads = tm_attr_i(L, "kv_num_heads", 0);
    if (g->heads <= 0 || g->kv_heads <= 0 || g->heads % g->kv_heads)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attributes num_heads=%lld and "
                        "kv_num_heads=%lld must be >= 1, num_heads a multiple of kv_num_heads",
                        (long long)g->heads, (long long)g->kv_heads);
    tm_val query = tm_ms_input(L, 0, MS_ATTN_DTS);
    tm_val key = tm_ms_optional(L, 1, MS_ATTN_DTS), value = tm_ms_optional(L, 2, MS_ATTN_DTS);
    if (!tm_ctx_ok(c) || tm_ms_check_shape(L, 0, query, 3, -1)) return -1;
    int64_t dq[3];
    memcpy(dq, tm_vdims(c, query), sizeof dq);
    g->batch = dq[0];
    g->q_len = dq[1];
    if (key == TM_NONE) {
        g->head = dq[2] / (g->heads + 2 * g->kv_heads);
        if (value != TM_NONE || g->head * (g->heads + 2 * g->kv_heads) != dq[2])
            return tm_lfail(L, TM_ERR_SHAPE, "packed input 0 has width %lld, not (num_heads + "
                            "2 * kv_num_heads) * head_size", (long long)dq[2]);
        int64_t dqh = g->heads * g->head, dkv = g->kv_heads * g->head;
        *q = ms_split_heads(c, tm_slice_axis(c, query, 2, 0, dqh), g->heads);
        *k = ms_split_heads(c, tm_slice_axis(c, query, 2, dqh, dkv), g->kv_heads);
        *v = ms_split_heads(c, tm_slice_axis(c, query, 2, dqh + dkv, dkv), g->kv_heads);
        return tm_ctx_ok(c) ? 0 : -1;
    }
    g->head = dq[2] / g->heads;
    if (value == TM_NONE || g->head * g->heads != dq[2] ||
        tm_ms_check_shape(L, 1, key, 3, g->kv_heads * g->head) ||
        tm_ms_check_shape(L, 2, value, 3, g->kv_heads * g->head))
        return tm_lfail(L, TM_ERR_SHAPE, "inputs 1 (key) and 2 (value) must be (B, S, %lld)",
                        (long long)(g->kv_heads * g->head));
    if (tm_vdims(c, key)[1] != g->q_len || tm_vdims(c, value)[1] != g->q_len)
        return tm_lfail(L, TM_ERR_SHAPE, "key and value must have the query's sequence length "
                        "%lld", (long long)g->q_len);
    *q = ms_split_heads(c, query, g->heads);
    *k = ms_split_heads(c, key, g->kv_heads);
    *v = ms_split_heads(c, value, g->kv_heads);
    return tm_ctx_ok(c) ? 0 : -1;
}

/* Rotary positions (B, S): position_ids, else the first prompt's 0..S-1, else each
 * batch's past length + s. In the first prompt only position_ids[0] counts (+ s). */
static tm_val gqa_positions(tm_lower *L, const gqa *g, tm_val past_b) {
    tm_ctx *c = tm_lctx(L);
    tm_val s = ms_iota(c, g->q_len, 2, 1);
    tm_val pos = tm_lin(L, 9);
    if (pos != TM_NONE) {
        if (tm_ew_check(L, 9, pos, TM_DT(TM_INT64))) return TM_NONE;
        if (!g->first_prompt) return pos;
        int64_t n = tm_vnumel(c, pos), one[2] = {1, 1};
        tm_val first = tm_slice_axis(c, tm_reshape(c, pos, 1, &n), 0, 0, 1);
        return tm_add(c, tm_reshape(c, first, 2, one), s);
    }
    if (past_b == TM_NONE) return s;
    int64_t dims[2] = {g->batch, 1};
    return tm_add(c, tm_reshape(c, past_b, 2, dims), s);
}

static tm_status lower_group_query_attention(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    gqa g;
    memset(&g, 0, sizeof g);
    tm_val q = TM_NONE, k = TM_NONE, v = TM_NONE;
    if (gqa_read(L, &g, &q, &k, &v)) return c->status;
    tm_dtype dt = tm_vdtype(c, tm_lin(L, 0));
    tm_val past_key = tm_ms_optional(L, 3, MS_ATTN_DTS);
    tm_val past_value = tm_ms_optional(L, 4, MS_ATTN_DTS);
    tm_val seqlens = tm_ms_input(L, 5, TM_DT(TM_INT32));
    int64_t total;
    if (!tm_ctx_ok(c) || tm_ms_host_int(L, 6, &total)) return c->status;
    if ((past_key == TM_NONE) != (past_value == TM_NONE))
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "past_key and past_value must be given "
                        "together");
    if (tm_vrank(c, seqlens) != 1 || tm_vdims(c, seqlens)[0] != g.batch)
        return tm_lfail(L, TM_ERR_SHAPE, "input 5 (seqlens_k) must be (%lld)", (long long)g.batch);
    if (past_key != TM_NONE) {
        const int64_t *dp = tm_vdims(c, past_key);
        if (tm_vrank(c, past_key) != 4 || dp[0] != g.batch || dp[1] != g.kv_heads ||
            dp[3] != g.head || tm_vrank(c, past_value) != 4 ||
            tm_vdims(c, past_value)[2] != dp[2])
            return tm_lfail(L, TM_ERR_SHAPE, "past_key and past_value must be (%lld, %lld, "
                            "past, %lld)", (long long)g.batch, (long long)g.kv_heads,
                            (long long)g.head);
        g.past_buffer = dp[2];
    }
    if (g.q_len > 1 && g.q_len != total && g.batch != 1)
        return tm_lfail(L, TM_ERR_SHAPE, "sequence length %lld with total_sequence_length %lld "
                        "needs batch size 1", (long long)g.q_len, (long long)total);
    g.first_prompt = g.q_len == total;
    g.total = total;
    g.present = total > g.past_buffer ? total : g.past_buffer;

    /* Each batch's total length and past length (data, not shapes). */
    tm_val total_b = tm_add(c, per_batch(c, seqlens), tm_const_scalar(c, TM_INT64, 1.0));
    tm_val past_b = TM_NONE;
    if (past_key != TM_NONE && !g.first_prompt)
        past_b = tm_sub(c, total_b, tm_const_scalar(c, TM_INT64, (double)g.q_len));

    if (tm_attr_i(L, "do_rotary", 0)) {
        tm_val cs = tm_ms_input(L, 7, MS_ATTN_DTS), sn = tm_ms_input(L, 8, MS_ATTN_DTS);
        if (!tm_ctx_ok(c) || tm_ms_check_shape(L, 7, cs, 2, -1) ||
            tm_ms_check_shape(L, 8, sn, 2, tm_vdims(c, cs)[1]))
            return c->status;
        int64_t rot = tm_vdims(c, cs)[1] * 2;
        if (rot > g.head)
            return tm_lfail(L, TM_ERR_SHAPE, "cos_cache gives a rotary dim %lld above the head "
                            "size %lld", (long long)rot, (long long)g.head);
        int interleaved = tm_attr_i(L, "rotary_interleaved", 0) != 0;
        tm_val pos = gqa_positions(L, &g, past_b);
        q = ms_rotary(c, q, 2, pos, cs, sn, rot, interleaved);
        k = ms_rotary(c, k, 2, pos, cs, sn, rot, interleaved);
    }
    tm_val pk = gqa_present(c, past_key, k, past_b, g.present);
    tm_val pv = gqa_present(c, past_value, v, past_b, g.present);
    if (!tm_ctx_ok(c)) return c->status;
    tm_lout(L, 1, tm_cast(c, pk, dt));
    tm_lout(L, 2, tm_cast(c, pv, dt));

    ms_attn a;
    ms_attn_init(&a);
    a.batch = g.batch;
    a.heads = g.heads;
    a.kv_heads = g.kv_heads;
    a.q_len = g.q_len;
    a.total = g.present;
    a.head = a.v_head = g.head;
    double scale = tm_attr_f(L, "scale", 0.0f);
    a.scale = scale == 0.0 ? 1.0 / sqrt((double)g.head) : scale;
    a.softcap = tm_attr_f(L, "softcap", 0.0f);
    a.smooth = tm_attr_i(L, "smooth_softmax", 0) != 0;
    a.sink = tm_ms_optional(L, 11, MS_ATTN_DTS);
    if (a.sink != TM_NONE && tm_ms_check_shape(L, 11, a.sink, 1, g.heads)) return c->status;

    /* Query s of batch b sees keys [start, end): end = min(past_b + s + 1, total_b), and
     * start = end - local_window_size when a window is set and shorter. */
    tm_val t = ms_iota(c, g.present, 4, 3), s = ms_iota(c, g.q_len, 4, 2);
    tm_val end = tm_add(c, s, tm_const_scalar(c, TM_INT64, 1.0));
    if (past_b != TM_NONE) end = tm_add(c, end, past_b);
    end = tm_binary(c, TM_P_MIN, end, total_b);
    a.allowed = tm_binary(c, TM_P_LT, t, end);
    int64_t window = tm_attr_i(L, "local_window_size", -1);
    if (window >= 0) {
        tm_val start = tm_sub(c, end, tm_const_scalar(c, TM_INT64, (double)window));
        a.allowed = ms_and(c, a.allowed, tm_binary(c, TM_P_GE, t, start));
    }
    tm_val bias = tm_ms_optional(L, 10, MS_ATTN_DTS);
    if (bias != TM_NONE) {
        const int64_t *db = tm_vdims(c, bias);
        if (tm_vrank(c, bias) != 4 || (db[0] != 1 && db[0] != g.batch) ||
            (db[1] != 1 && db[1] != g.heads) || db[2] != g.q_len || db[3] > g.present)
            return tm_lfail(L, TM_ERR_SHAPE, "input 10 (attention_bias) must be (%lld or 1, "
                            "%lld or 1, %lld, total)", (long long)g.batch, (long long)g.heads,
                            (long long)g.q_len);
        if (db[3] < g.present) {
            int64_t begin[4] = {0}, pad[4] = {0, 0, 0, g.present - db[3]};
            bias = tm_pad(c, bias, 0, begin, pad, 0.0);
        }
        a.additive = bias;
    }
    int64_t qk_mode = tm_attr_i(L, "qk_output", 0);
    if (qk_mode < 0 || qk_mode > 2)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute qk_output=%lld must be 0, 1 or "
                        "2", (long long)qk_mode);
    a.qk_mode = tm_lwants(L, 3) ? (int)qk_mode : 0;
    tm_lout(L, 0, ms_attend(c, &a, q, pk, pv, dt));
    if (a.qk_mode) {
        tm_val qk = a.qk;
        if (a.qk_mode == 1) qk = tm_where(c, a.allowed, qk, tm_const_scalar(c, TM_FLOAT, 0.0));
        tm_lout(L, 3, tm_cast(c, tm_slice_axis(c, qk, 3, 0, g.total), dt));
    }
    return c->status;
}

/* com.microsoft RotaryEmbedding: input (B, S, D) or (B, N, S, H); position_ids (1) as
 * an offset or (B, S); caches (max_position, rot/2). */
static tm_status lower_ms_rotary_embedding(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ms_input(L, 0, MS_ATTN_DTS), pos = tm_ms_input(L, 1, TM_DT(TM_INT64));
    tm_val cs = tm_ms_input(L, 2, MS_ATTN_DTS), sn = tm_ms_input(L, 3, MS_ATTN_DTS);
    if (!tm_ctx_ok(c) || tm_ms_check_shape(L, 2, cs, 2, -1) ||
        tm_ms_check_shape(L, 3, sn, 2, tm_vdims(c, cs)[1]))
        return c->status;
    if (tm_attr_i(L, "is_packed_batching", 0))
        return tm_lfail(L, TM_ERR_UNSUPPORTED, "attribute is_packed_batching=1 is not supported");
    int r = tm_vrank(c, x);
    if (r != 3 && r != 4)
        return tm_lfail(L, TM_ERR_SHAPE, "input 0 has rank %d, expected 3 or 4", r);
    int64_t dx[4];
    memcpy(dx, tm_vdims(c, x), (size_t)r * sizeof *dx);
    int64_t rot = tm_attr_i(L, "rotary_embedding_dim", 0), heads = tm_attr_i(L, "num_heads", 0);
    int64_t batch = dx[0], seq = r == 3 ? dx[1] : dx[2];
    int64_t hidden = r == 3 ? dx[2] : dx[1] * dx[3];
    if (rot > 0 && heads <= 0)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute rotary_embedding_dim=%lld needs "
                        "num_heads", (long long)rot);
    int64_t head = rot == 0 ? tm_vdims(c, cs)[1] * 2 : hidden / heads;
    if (r == 4) head = dx[3];
    if (rot == 0) rot = head;
    if (head <= 0 || hidden % head || rot > head || rot % 2 || tm_vdims(c, cs)[1] < rot / 2)
        return tm_lfail(L, TM_ERR_SHAPE, "rotary dim %lld, head size %lld and cos_cache width "
                        "%lld do not fit hidden size %lld", (long long)rot, (long long)head,
                        (long long)tm_vdims(c, cs)[1], (long long)hidden);
    if (tm_vnumel(c, pos) == 1) {
        int64_t one[2] = {1, 1};
        pos = tm_add(c, tm_reshape(c, pos, 2, one), ms_iota(c, seq, 2, 1));
    } else if (tm_vrank(c, pos) != 2 || tm_vdims(c, pos)[0] != batch ||
               tm_vdims(c, pos)[1] != seq) {
        return tm_lfail(L, TM_ERR_SHAPE, "input 1 (position_ids) must be (1) or (%lld, %lld)",
                        (long long)batch, (long long)seq);
    }
    tm_val y;
    if (r == 3) {
        int64_t dims[4] = {batch, seq, hidden / head, head};
        y = ms_rotary(c, tm_reshape(c, x, 4, dims), 1, pos, cs, sn, rot,
                      tm_attr_i(L, "interleaved", 0) != 0);
        y = tm_reshape(c, y, 3, dx);
    } else {
        y = ms_rotary(c, x, 2, pos, cs, sn, rot, tm_attr_i(L, "interleaved", 0) != 0);
    }
    tm_lout(L, 0, y);
    return c->status;
}

TM_REGISTER_OP("com.microsoft", "GroupQueryAttention", 1, 1, lower_group_query_attention);
TM_REGISTER_OP("com.microsoft", "RotaryEmbedding", 1, 1, lower_ms_rotary_embedding);
