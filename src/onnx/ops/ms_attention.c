/* com.microsoft Attention (packed QKV weights), MultiHeadAttention (separate or packed
 * Q/K/V, BNSH caches, shared KV buffers, beams) and DecoderMaskedMultiHeadAttention, over
 * ms_attention.h. Not ai.onnx Attention (attention.c) nor GroupQueryAttention (ms_gqa.c). */
#include "ms_attention.h"

/* A raw or index mask (input `index`) as an additive f32 term broadcasting to
 * (B, N, S, T): mask_filter_value where a key is masked, 0 elsewhere. Forms: (B) end
 * positions, (2B) end then start positions, (B, T) or (B, T - past) key padding,
 * (B, S, T) per query, (B, 1, M, M) with rows past..past+S-1. */
static tm_val padding_term(tm_lower *L, int index, const ms_attn *a, int64_t past,
                           double filter) {
    tm_ctx *c = tm_lctx(L);
    tm_val m = tm_lin(L, index);
    if (m == TM_NONE || tm_ew_check(L, index, m, TM_DT(TM_INT32) | TM_DT(TM_INT64) |
                                                     TM_DT(TM_BOOL)))
        return TM_NONE;
    int r = tm_vrank(c, m);
    int64_t d[TM_MAX_RANK];
    memcpy(d, tm_vdims(c, m), (size_t)r * sizeof *d);
    int64_t b = a->batch, t = a->total;
    tm_val keep = TM_NONE;
    if (r == 1 && (d[0] == b || d[0] == 2 * b)) {
        int64_t dims[4] = {b, 1, 1, 1};
        tm_val key = ms_iota(c, t, 4, 3);
        tm_val ends = tm_reshape(c, tm_cast(c, tm_slice_axis(c, m, 0, 0, b), TM_INT64), 4, dims);
        keep = tm_binary(c, TM_P_LT, key, ends);
        if (d[0] == 2 * b) {
            tm_val starts = tm_reshape(c, tm_cast(c, tm_slice_axis(c, m, 0, b, b), TM_INT64), 4,
                                       dims);
            keep = tm_binary(c, TM_P_AND, keep, tm_binary(c, TM_P_GE, key, starts));
        }
    } else if (r == 2 && d[0] == b && (d[1] >= t || (past > 0 && d[1] == t - past))) {
        if (d[1] > t) m = tm_slice_axis(c, m, 1, 0, t);
        if (d[1] < t) {
            int64_t begin[2] = {0, past}, end[2] = {0, 0};
            m = tm_pad(c, tm_cast(c, m, TM_INT32), 0, begin, end, 1.0);
        }
        int64_t dims[4] = {b, 1, 1, t};
        keep = tm_reshape(c, m, 4, dims);
    } else if (r == 3 && d[0] == b && d[1] == a->q_len && d[2] >= t) {
        int64_t dims[4] = {b, 1, a->q_len, t};
        keep = tm_reshape(c, tm_slice_axis(c, m, 2, 0, t), 4, dims);
    } else if (r == 4 && d[0] == b && d[1] == 1 && d[2] >= past + a->q_len && d[3] >= t) {
        keep = tm_slice_axis(c, tm_slice_axis(c, m, 2, past, a->q_len), 3, 0, t);
    } else {
        tm_lfail(L, TM_ERR_SHAPE, "input %d ('%s') has rank %d; the mask must be (%lld), "
                 "(%lld), (%lld, %lld), (%lld, %lld, %lld) or (%lld, 1, max, max)", index,
                 tm_lnode(L)->inputs[index], r, (long long)b, (long long)(2 * b), (long long)b,
                 (long long)t, (long long)b, (long long)a->q_len, (long long)t, (long long)b);
        return TM_NONE;
    }
    if (tm_vdtype(c, keep) != TM_BOOL)
        keep = tm_binary(c, TM_P_GT, keep, tm_scalar_like(c, keep, 0.0));
    return tm_where(c, keep, tm_const_scalar(c, TM_FLOAT, 0.0),
                    tm_const_scalar(c, TM_FLOAT, filter));
}

/* attention_bias (B or 1, N or 1, S, T), input `index`. */
static tm_val bias_term(tm_lower *L, int index, const ms_attn *a) {
    tm_ctx *c = tm_lctx(L);
    tm_val v = tm_lin(L, index);
    if (v == TM_NONE || tm_ew_check(L, index, v, MS_ATTN_DTS)) return TM_NONE;
    const int64_t *d = tm_vdims(c, v);
    if (tm_vrank(c, v) != 4 || (d[0] != 1 && d[0] != a->batch) ||
        (d[1] != 1 && d[1] != a->heads) || d[2] != a->q_len || d[3] != a->total) {
        tm_lfail(L, TM_ERR_SHAPE, "input %d ('%s') must be (%lld or 1, %lld or 1, %lld, %lld)",
                 index, tm_lnode(L)->inputs[index], (long long)a->batch, (long long)a->heads,
                 (long long)a->q_len, (long long)a->total);
        return TM_NONE;
    }
    return tm_cast(c, v, TM_FLOAT);
}

static int read_heads(tm_lower *L, int64_t *heads) {
    *heads = tm_attr_i(L, "num_heads", 0);
    if (*heads > 0) return 0;
    return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute num_heads=%lld must be >= 1",
                    (long long)*heads);
}

static double read_scale(tm_lower *L, int64_t head) {
    double s = tm_attr_f(L, "scale", 0.0f);
    return s == 0.0 ? 1.0 / sqrt((double)head) : s;
}

/* x + the slice [offset, offset + n) of a 1-D bias, or x when there is none. */
static tm_val add_bias_part(tm_ctx *c, tm_val x, tm_val bias, int64_t offset, int64_t n) {
    if (bias == TM_NONE || !tm_ctx_ok(c)) return x;
    return tm_add(c, x, tm_slice_axis(c, bias, 0, offset, n));
}

/* The past_sequence_length input `index` when given, else -1 (appending caches). */
static int read_shared_past(tm_lower *L, int index, int64_t *past) {
    *past = -1;
    if (!tm_lhas(L, index)) return 0;
    if (tm_ms_host_int(L, index, past)) return -1;
    if (*past >= 0) return 0;
    return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "input %d (past_sequence_length) is %lld",
                    index, (long long)*past);
}

/* (2, B, N, T, H): keys and values stacked on a new axis 0. */
static tm_val stack_kv(tm_ctx *c, tm_val k, tm_val v) {
    int64_t zero = 0;
    tm_val parts[2] = {tm_unsqueeze(c, k, &zero, 1), tm_unsqueeze(c, v, &zero, 1)};
    return tm_concat(c, parts, 2, 0);
}

/* Attention's past (2, B, N, P, H): keys and values prepended (or written at
 * past_sequence_length into a shared buffer); present is output 1. Returns the past
 * length, or -1 on failure. */
static int64_t attention_cache(tm_lower *L, int64_t shared, int64_t q_len, tm_val *k,
                               tm_val *v) {
    tm_ctx *c = tm_lctx(L);
    tm_val past = tm_lin(L, 4);
    int64_t past_len = 0;
    if (past != TM_NONE) {
        int64_t dp[5];
        if (tm_vrank(c, past) == 5) memcpy(dp, tm_vdims(c, past), sizeof dp);
        if (tm_vrank(c, past) != 5 || dp[0] != 2 || tm_vdims(c, *k)[3] != tm_vdims(c, *v)[3]) {
            tm_lfail(L, TM_ERR_SHAPE, "input 4 (past) must be (2, B, N, past, H) with equal "
                     "Q/K and V head sizes");
            return -1;
        }
        int64_t zero = 0;
        tm_val pk = tm_squeeze(c, tm_slice_axis(c, past, 0, 0, 1), &zero, 1);
        tm_val pv = tm_squeeze(c, tm_slice_axis(c, past, 0, 1, 1), &zero, 1);
        past_len = shared >= 0 ? shared : dp[3];
        *k = ms_cache_update(L, pk, *k, shared, "past");
        *v = ms_cache_update(L, pv, *v, shared, "past");
    }
    if (tm_lwants(L, 1)) tm_lout(L, 1, stack_kv(c, *k, *v));
    if (past != TM_NONE && shared >= 0) {
        *k = tm_slice_axis(c, *k, 2, 0, past_len + q_len);
        *v = tm_slice_axis(c, *v, 2, 0, past_len + q_len);
    }
    return tm_ctx_ok(c) ? past_len : -1;
}

/* Attention: input (B, S, Din) times weights (Din, D + D + Dv) plus bias gives Q, K, V;
 * past (2, B, N, P, H) prepends keys and values; present (2, B, N, T, H) is returned. */
static tm_status lower_attention(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ms_input(L, 0, MS_ATTN_DTS), w = tm_ms_input(L, 1, MS_ATTN_DTS);
    tm_val bias = tm_ms_optional(L, 2, MS_ATTN_DTS);
    int64_t heads;
    if (!tm_ctx_ok(c) || read_heads(L, &heads) || tm_ms_check_shape(L, 0, x, 3, -1) ||
        tm_ms_check_shape(L, 1, w, 2, -1))
        return c->status;
    if (tm_vdims(c, w)[0] != tm_vdims(c, x)[2])
        return tm_lfail(L, TM_ERR_SHAPE, "input 1 (weights) has %lld rows, input 0 has hidden "
                        "size %lld", (long long)tm_vdims(c, w)[0], (long long)tm_vdims(c, x)[2]);
    if (tm_attr_i(L, "do_rotary", 0))
        return tm_lfail(L, TM_ERR_UNSUPPORTED, "attribute do_rotary=1 is not supported (as in "
                        "ONNX Runtime's CPU kernel): use MultiHeadAttention with "
                        "RotaryEmbedding");
    int64_t width = tm_vdims(c, w)[1], dq = width / 3, dk = width / 3, dv = width / 3;
    const int64_t *sizes;
    if (tm_attr_ints(L, "qkv_hidden_sizes", &sizes) == 3) {
        dq = sizes[0];
        dk = sizes[1];
        dv = sizes[2];
    }
    if (dq + dk + dv != width || dq != dk || dq % heads || dv % heads || dq <= 0 || dv <= 0)
        return tm_lfail(L, TM_ERR_SHAPE, "hidden sizes Q %lld, K %lld, V %lld do not split the "
                        "%lld weight columns into num_heads=%lld heads", (long long)dq,
                        (long long)dk, (long long)dv, (long long)width, (long long)heads);
    if (bias != TM_NONE && tm_ms_check_shape(L, 2, bias, 1, width)) return c->status;
    int64_t shared;
    if (read_shared_past(L, 6, &shared)) return c->status;

    ms_attn a;
    ms_attn_init(&a);
    a.batch = tm_vdims(c, x)[0];
    a.q_len = tm_vdims(c, x)[1];
    a.heads = a.kv_heads = heads;
    a.head = dq / heads;
    a.v_head = dv / heads;
    a.scale = read_scale(L, a.head);
    tm_val qkv = tm_matmul(c, x, tm_cast(c, w, tm_vdtype(c, x)));
    if (bias != TM_NONE) qkv = tm_add(c, qkv, tm_cast(c, bias, tm_vdtype(c, x)));
    tm_val q = ms_split_heads(c, tm_slice_axis(c, qkv, 2, 0, dq), heads);
    tm_val k = ms_split_heads(c, tm_slice_axis(c, qkv, 2, dq, dk), heads);
    tm_val v = ms_split_heads(c, tm_slice_axis(c, qkv, 2, dq + dk, dv), heads);

    int64_t past_len = attention_cache(L, shared, a.q_len, &k, &v);
    if (past_len < 0) return c->status;
    a.total = tm_vdims(c, k)[2];
    double filter = tm_attr_f(L, "mask_filter_value", -10000.0f);
    a.additive = ms_plus(c, padding_term(L, 3, &a, past_len, filter), bias_term(L, 5, &a));
    if (tm_attr_i(L, "unidirectional", 0) && a.q_len > 1)
        a.allowed = ms_causal(c, a.q_len, a.total, past_len);
    tm_lout(L, 0, ms_attend(c, &a, q, k, v, tm_vdtype(c, x)));
    return c->status;
}

/* Q, K and V of MultiHeadAttention as (B, N, S|L, H): separate 3-D inputs, packed QKV
 * (B, S, N, 3, H) or (B, S, D + D + Dv), packed KV (B, L, N, 2, H), or K/V already
 * (B, N, L, H) (a cross-attention cache: *bnsh set, no K/V bias). bias (D + D + Dv). */
typedef struct mha_inputs {
    tm_val q, k, v;
    int bnsh_kv;
} mha_inputs;

static int mha_project(tm_lower *L, int64_t heads, tm_val bias, mha_inputs *in) {
    tm_ctx *c = tm_lctx(L);
    tm_val q = tm_ms_input(L, 0, MS_ATTN_DTS);
    tm_val k = tm_ms_optional(L, 1, MS_ATTN_DTS), v = tm_ms_optional(L, 2, MS_ATTN_DTS);
    if (!tm_ctx_ok(c)) return -1;
    int rq = tm_vrank(c, q);
    int64_t dq[TM_MAX_RANK];
    memcpy(dq, tm_vdims(c, q), (size_t)rq * sizeof *dq);
    memset(in, 0, sizeof *in);
    if (rq == 5 && k == TM_NONE) {
        if (dq[2] != heads || dq[3] != 3)
            return tm_lfail(L, TM_ERR_SHAPE, "packed input 0 must be (B, S, %lld, 3, H)",
                            (long long)heads);
        int64_t d4[4] = {dq[0], dq[1], heads, dq[4]}, hd = heads * dq[4];
        tm_val parts[3];
        for (int i = 0; i < 3; i++) {
            tm_val p = tm_reshape(c, tm_slice_axis(c, q, 3, i, 1), 4, d4);
            int64_t d3[3] = {dq[0], dq[1], hd};
            p = add_bias_part(c, tm_reshape(c, p, 3, d3), bias, i * hd, hd);
            parts[i] = ms_split_heads(c, p, heads);
        }
        in->q = parts[0];
        in->k = parts[1];
        in->v = parts[2];
        return tm_ctx_ok(c) ? 0 : -1;
    }
    if (rq != 3)
        return tm_lfail(L, TM_ERR_SHAPE, "input 0 (query) has rank %d, expected 3 (or 5 when "
                        "packed)", rq);
    int64_t d = dq[2];
    if (k == TM_NONE) {
        /* (B, S, D + D + Dv) with Q, K, V side by side; Dv taken equal to D. */
        if (d % 3) return tm_lfail(L, TM_ERR_SHAPE, "packed input 0 has width %lld, not 3 * D",
                                   (long long)d);
        d /= 3;
        in->q = ms_split_heads(c, add_bias_part(c, tm_slice_axis(c, q, 2, 0, d), bias, 0, d),
                               heads);
        in->k = ms_split_heads(c, add_bias_part(c, tm_slice_axis(c, q, 2, d, d), bias, d, d),
                               heads);
        in->v = ms_split_heads(c, add_bias_part(c, tm_slice_axis(c, q, 2, 2 * d, d), bias,
                                                2 * d, d), heads);
        return tm_ctx_ok(c) ? 0 : -1;
    }
    if (d % heads)
        return tm_lfail(L, TM_ERR_SHAPE, "hidden size %lld is not a multiple of num_heads=%lld",
                        (long long)d, (long long)heads);
    in->q = ms_split_heads(c, add_bias_part(c, q, bias, 0, d), heads);
    int rk = tm_vrank(c, k);
    int64_t dk[TM_MAX_RANK];
    memcpy(dk, tm_vdims(c, k), (size_t)rk * sizeof *dk);
    if (rk == 5) {
        if (dk[2] != heads || dk[3] != 2 || dk[4] != d / heads)
            return tm_lfail(L, TM_ERR_SHAPE, "packed input 1 must be (B, L, %lld, 2, %lld)",
                            (long long)heads, (long long)(d / heads));
        int64_t d3[3] = {dk[0], dk[1], d};
        in->k = tm_reshape(c, tm_slice_axis(c, k, 3, 0, 1), 3, d3);
        in->v = tm_reshape(c, tm_slice_axis(c, k, 3, 1, 1), 3, d3);
        in->k = ms_split_heads(c, add_bias_part(c, in->k, bias, d, d), heads);
        in->v = ms_split_heads(c, add_bias_part(c, in->v, bias, 2 * d, d), heads);
        return tm_ctx_ok(c) ? 0 : -1;
    }
    if (v == TM_NONE || tm_vrank(c, v) != rk)
        return tm_lfail(L, TM_ERR_SHAPE, "inputs 1 (key) and 2 (value) must both be given "
                        "with the same rank");
    if (rk == 4) {
        if (dk[1] != heads || dk[3] != d / heads)
            return tm_lfail(L, TM_ERR_SHAPE, "input 1 (key) must be (B, %lld, L, %lld)",
                            (long long)heads, (long long)(d / heads));
        in->k = k;
        in->v = v;
        in->bnsh_kv = 1;
        return 0;
    }
    if (rk != 3 || dk[2] != d || tm_vdims(c, v)[1] != dk[1] || tm_vdims(c, v)[2] % heads)
        return tm_lfail(L, TM_ERR_SHAPE, "inputs 1 (key) and 2 (value) must be (B, L, %lld) and "
                        "(B, L, Dv)", (long long)d);
    in->k = ms_split_heads(c, add_bias_part(c, k, bias, d, d), heads);
    in->v = ms_split_heads(c, add_bias_part(c, v, bias, 2 * d, tm_vdims(c, v)[2]), heads);
    return tm_ctx_ok(c) ? 0 : -1;
}

/* Shared by MultiHeadAttention and DecoderMaskedMultiHeadAttention: the input indices
 * of each operand, and the outputs. */
typedef struct mha_layout {
    int mask, attention_bias, past_key, past_value, past_length, beam_width, indirection, bias;
    int unidirectional;
    int qk_output;               /* MHA: qk when asked; DMMHA: attribute output_qk */
} mha_layout;

static tm_status lower_mha_like(tm_lower *L, const mha_layout *lay) {
    tm_ctx *c = tm_lctx(L);
    int64_t heads;
    if (read_heads(L, &heads)) return c->status;
    tm_val bias = lay->bias >= 0 ? tm_ms_optional(L, lay->bias, MS_ATTN_DTS) : TM_NONE;
    mha_inputs in;
    if (mha_project(L, heads, bias, &in)) return c->status;
    tm_val query = tm_lin(L, 0);
    tm_dtype dt = tm_vdtype(c, query);
    ms_attn a;
    ms_attn_init(&a);
    a.batch = tm_vdims(c, in.q)[0];
    a.heads = a.kv_heads = heads;
    a.q_len = tm_vdims(c, in.q)[2];
    a.head = tm_vdims(c, in.q)[3];
    a.v_head = tm_vdims(c, in.v)[3];
    a.scale = read_scale(L, a.head);
    tm_val k = in.k, v = in.v;
    int64_t past = 0, shared = -1;
    tm_val past_key = tm_ms_optional(L, lay->past_key, MS_ATTN_DTS);
    tm_val past_value = tm_ms_optional(L, lay->past_value, MS_ATTN_DTS);
    if ((past_key == TM_NONE) != (past_value == TM_NONE))
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "past_key and past_value must be given "
                        "together");
    if (!tm_ctx_ok(c)) return c->status;
    if (past_key != TM_NONE && !in.bnsh_kv) {
        if (read_shared_past(L, lay->past_length, &shared)) return c->status;
        past = shared >= 0 ? shared : tm_vdims(c, past_key)[2];
        k = ms_cache_update(L, past_key, k, shared, "past_key");
        v = ms_cache_update(L, past_value, v, shared, "past_value");
    }
    if (!tm_ctx_ok(c)) return c->status;
    if (tm_lwants(L, 1)) tm_lout(L, 1, tm_cast(c, k, dt));
    if (tm_lwants(L, 2)) tm_lout(L, 2, tm_cast(c, v, dt));
    a.total = shared >= 0 ? past + a.q_len : tm_vdims(c, k)[2];
    if (shared >= 0 && !in.bnsh_kv) {
        int64_t beams = 1;
        if (lay->beam_width >= 0 && tm_lhas(L, lay->beam_width) &&
            tm_ms_host_int(L, lay->beam_width, &beams))
            return c->status;
        tm_val indirection = tm_lin(L, lay->indirection);
        if (lay->beam_width < 0 && indirection != TM_NONE && tm_vrank(c, indirection) == 3)
            beams = tm_vdims(c, indirection)[1];
        if (beams > 1 && indirection == TM_NONE)
            return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "beam width %lld needs input %d "
                            "(cache_indirection)", (long long)beams, lay->indirection);
        if (beams > 1) {
            k = ms_beam_gather(L, k, indirection, beams, past, a.total);
            v = ms_beam_gather(L, v, indirection, beams, past, a.total);
        } else {
            k = tm_slice_axis(c, k, 2, 0, a.total);
            v = tm_slice_axis(c, v, 2, 0, a.total);
        }
    }
    double filter = tm_attr_f(L, "mask_filter_value", -10000.0f);
    a.additive = ms_plus(c, padding_term(L, lay->mask, &a, past, filter),
                         bias_term(L, lay->attention_bias, &a));
    if (lay->unidirectional && a.q_len > 1) a.allowed = ms_causal(c, a.q_len, a.total, past);
    a.qk_mode = lay->qk_output && tm_lwants(L, 3) ? 1 : 0;
    tm_lout(L, 0, ms_attend(c, &a, in.q, k, v, dt));
    if (a.qk_mode) tm_lout(L, 3, tm_cast(c, a.qk, dt));
    return c->status;
}

static tm_status lower_multi_head_attention(tm_lower *L) {
    mha_layout lay = {.mask = 4, .attention_bias = 5, .past_key = 6, .past_value = 7,
                      .past_length = 8, .beam_width = -1, .indirection = 9, .bias = 3,
                      .unidirectional = tm_attr_i(L, "unidirectional", 0) != 0, .qk_output = 1};
    return lower_mha_like(L, &lay);
}

/* One decoding step (sequence length 1): self-attention over a shared KV buffer written
 * at past_sequence_length, or cross-attention over (B, N, L, H) keys and values. */
static tm_status lower_decoder_masked_mha(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val q = tm_ms_input(L, 0, MS_ATTN_DTS);
    if (!tm_ctx_ok(c) || tm_ms_check_shape(L, 0, q, 3, -1)) return c->status;
    if (tm_vdims(c, q)[1] != 1)
        return tm_lfail(L, TM_ERR_SHAPE, "input 0 (query) has sequence length %lld; "
                        "DecoderMaskedMultiHeadAttention takes 1", (long long)tm_vdims(c, q)[1]);
    mha_layout lay = {.mask = 3, .attention_bias = 4, .past_key = 5, .past_value = 6,
                      .past_length = 7, .beam_width = 8, .indirection = 9, .bias = 10,
                      .unidirectional = 0, .qk_output = tm_attr_i(L, "output_qk", 0) != 0};
    if (tm_lhas(L, 5) && !tm_attr_i(L, "past_present_share_buffer", 0)) lay.past_length = -1;
    return lower_mha_like(L, &lay);
}

TM_REGISTER_OP("com.microsoft", "Attention", 1, 1, lower_attention);
TM_REGISTER_OP("com.microsoft", "MultiHeadAttention", 1, 1, lower_multi_head_attention);
TM_REGISTER_OP("com.microsoft", "DecoderMaskedMultiHeadAttention", 1, 1, lower_decoder_masked_mha);
