/* The attention core shared by the contrib attention ops (ms_attention.c, ms_gqa.c, ...):
 * head layout, KV caches (appended, shared buffers, beam indirection), rotary embedding and
 * float32 scaled dot-product attention with grouped heads and masks. Not a lowering. */
#ifndef TM_ONNX_OPS_MS_ATTENTION_H
#define TM_ONNX_OPS_MS_ATTENTION_H

#include <float.h>
#include <math.h>
#include "contrib.h"

#define MS_ATTN_DTS (TM_DT(TM_FLOAT) | TM_DT(TM_FLOAT16) | TM_DT(TM_BFLOAT16))

/* ONNX Runtime masks with the lowest finite float rather than -inf, so that a row with
 * every key masked stays finite (uniform after softmax) instead of becoming NaN. */
#define MS_LOWEST (-(double)FLT_MAX)

typedef struct ms_attn {
    int64_t batch, heads, kv_heads, q_len, total, head, v_head;
    double scale;
    double softcap;          /* 0: none */
    int smooth;              /* smooth softmax: an extra exp(sink - max) in the denominator */
    tm_val sink;             /* (heads) per-head sink logits, or TM_NONE (0 when smooth) */
    tm_val additive;         /* f32, broadcasts to (B, N, S, T), or TM_NONE */
    tm_val allowed;          /* bool, broadcasts to (B, N, S, T), or TM_NONE: false excludes */
    int qk_mode;             /* 0: none, 1: scores before softmax, 2: probabilities */
    tm_val qk;               /* out: the QK output asked for by qk_mode (f32) */
} ms_attn;

static inline void ms_attn_init(ms_attn *a) {
    memset(a, 0, sizeof *a);
    a->sink = a->additive = a->allowed = a->qk = TM_NONE;
}

/* (B, S, N*H) -> (B, N, S, H). */
static inline tm_val ms_split_heads(tm_ctx *c, tm_val x, int64_t heads) {
    if (!tm_ctx_ok(c)) return TM_NONE;
    const int64_t *d = tm_vdims(c, x);
    int64_t dims[4] = {d[0], d[1], heads, d[2] / heads};
    static const int64_t perm[4] = {0, 2, 1, 3};
    return tm_transpose(c, tm_reshape(c, x, 4, dims), perm);
}

/* (B, N, S, H) -> (B, S, N*H). */
static inline tm_val ms_merge_heads(tm_ctx *c, tm_val x) {
    if (!tm_ctx_ok(c)) return TM_NONE;
    static const int64_t perm[4] = {0, 2, 1, 3};
    const int64_t *d = tm_vdims(c, x);
    int64_t dims[3] = {d[0], d[2], d[1] * d[3]};
    return tm_reshape(c, tm_transpose(c, x, perm), 3, dims);
}

/* An int64 iota of n entries on axis `axis` of a rank-`rank` shape (other dims 1). */
static inline tm_val ms_iota(tm_ctx *c, int64_t n, int rank, int axis) {
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = TM_INT64;
    a.i[1] = n;
    a.i[3] = 1;
    int64_t dims[TM_MAX_RANK];
    for (int d = 0; d < rank; d++) dims[d] = d == axis ? n : 1;
    return tm_reshape(c, tm_prim(c, TM_P_RANGE, NULL, 0, &a), rank, dims);
}

static inline tm_val ms_and(tm_ctx *c, tm_val a, tm_val b) {
    if (a == TM_NONE) return b;
    if (b == TM_NONE) return a;
    return tm_binary(c, TM_P_AND, a, b);
}

static inline tm_val ms_plus(tm_ctx *c, tm_val a, tm_val b) {
    if (a == TM_NONE) return b;
    if (b == TM_NONE) return a;
    return tm_add(c, a, b);
}

/* Causal visibility (1, 1, S, T): query i sees key j iff j <= offset + i. */
static inline tm_val ms_causal(tm_ctx *c, int64_t q_len, int64_t total, int64_t offset) {
    tm_val i = ms_iota(c, q_len, 4, 2), j = ms_iota(c, total, 4, 3);
    return tm_binary(c, TM_P_LE, j, tm_add(c, i, tm_const_scalar(c, TM_INT64, (double)offset)));
}

/* The KV cache after this step: past (B, N, M, H) with new (B, N, L, H) appended
 * (offset < 0) or written over rows [offset, offset + L) of a shared buffer. */
static inline tm_val ms_cache_update(tm_lower *L, tm_val past, tm_val x, int64_t offset,
                                     const char *name) {
    tm_ctx *c = tm_lctx(L);
    if (past == TM_NONE || !tm_ctx_ok(c)) return x;
    int64_t dp[4], dx[4];
    memcpy(dx, tm_vdims(c, x), sizeof dx);
    if (tm_vrank(c, past) == 4) memcpy(dp, tm_vdims(c, past), sizeof dp);
    if (tm_vrank(c, past) != 4 || dp[0] != dx[0] || dp[1] != dx[1] || dp[3] != dx[3]) {
        tm_lfail(L, TM_ERR_SHAPE, "%s must be (%lld, %lld, past, %lld)", name,
                 (long long)dx[0], (long long)dx[1], (long long)dx[3]);
        return TM_NONE;
    }
    x = tm_cast(c, x, tm_vdtype(c, past));
    if (offset < 0) {
        tm_val parts[2] = {past, x};
        return tm_concat(c, parts, 2, 2);
    }
    int64_t m = dp[2], n = dx[2];
    if (offset + n > m) {
        tm_lfail(L, TM_ERR_SHAPE, "past_sequence_length %lld plus %lld new positions exceed the "
                 "%lld rows of the shared %s buffer", (long long)offset, (long long)n,
                 (long long)m, name);
        return TM_NONE;
    }
    tm_val parts[3];
    int k = 0;
    if (offset > 0) parts[k++] = tm_slice_axis(c, past, 2, 0, offset);
    parts[k++] = x;
    if (offset + n < m) parts[k++] = tm_slice_axis(c, past, 2, offset + n, m - offset - n);
    return k == 1 ? x : tm_concat(c, parts, k, 2);
}

/* Beam search: rows [0, past) of each (batch, beam) come from the beam that
 * cache_indirection (batch, beams, M) names, rows [past, total) from its own cache.
 * cache is (batch*beams, N, M, H); the result is (batch*beams, N, total, H). */
static inline tm_val ms_beam_gather(tm_lower *L, tm_val cache, tm_val indirection,
                                    int64_t beams, int64_t past, int64_t total) {
    tm_ctx *c = tm_lctx(L);
    if (!tm_ctx_ok(c)) return TM_NONE;
    const int64_t *d = tm_vdims(c, cache);
    int64_t bb = d[0], heads = d[1], m = d[2], h = d[3];
    const int64_t *di = tm_vdims(c, indirection);
    if (tm_vrank(c, indirection) != 3 || di[0] * di[1] != bb || di[1] != beams || di[2] < total) {
        tm_lfail(L, TM_ERR_SHAPE, "cache_indirection must be (batch, %lld, >= %lld) with batch * "
                 "%lld = %lld", (long long)beams, (long long)total, (long long)beams,
                 (long long)bb);
        return TM_NONE;
    }
    int64_t flat[2] = {bb, di[2]};
    tm_val ind = tm_slice_axis(c, tm_reshape(c, tm_cast(c, indirection, TM_INT64), 2, flat), 1,
                               0, total);
    /* Own rows and each row's first beam of its batch, as constants. */
    tm_val row = ms_iota(c, bb, 2, 0);
    tm_val first = tm_mul(c, tm_div(c, row, tm_const_scalar(c, TM_INT64, (double)beams)),
                          tm_const_scalar(c, TM_INT64, (double)beams));
    tm_val t = ms_iota(c, total, 2, 1);
    tm_val from_past = tm_binary(c, TM_P_LT, t, tm_const_scalar(c, TM_INT64, (double)past));
    tm_val src = tm_where(c, from_past, tm_add(c, first, ind), row);
    tm_val index = tm_add(c, tm_mul(c, src, tm_const_scalar(c, TM_INT64, (double)m)), t);
    static const int64_t perm[4] = {0, 2, 1, 3};
    int64_t rows[3] = {bb * m, heads, h};
    tm_val table = tm_reshape(c, tm_transpose(c, cache, perm), 3, rows);
    return tm_transpose(c, tm_gather(c, table, index, 0), perm);
}

/* Rotary embedding of x (B, N, S, H) (seq_axis 2) or (B, S, N, H) (seq_axis 1) at
 * positions (B, S) int64 (or (1, S)), with cos/sin caches (max_position, rot/2): the
 * first `rot` features of each head turn, as halves or interleaved pairs. */
static inline tm_val ms_rotary(tm_ctx *c, tm_val x, int seq_axis, tm_val positions,
                               tm_val cos_cache, tm_val sin_cache, int64_t rot, int interleaved) {
    if (!tm_ctx_ok(c)) return TM_NONE;
    int64_t dx[4];
    memcpy(dx, tm_vdims(c, x), sizeof dx);
    int64_t head = dx[3], half = rot / 2;
    tm_val cs = tm_slice_axis(c, tm_gather(c, cos_cache, positions, 0), 2, 0, half);
    tm_val sn = tm_slice_axis(c, tm_gather(c, sin_cache, positions, 0), 2, 0, half);
    if (!tm_ctx_ok(c)) return TM_NONE;
    int64_t shape[4] = {tm_vdims(c, cs)[0], 1, tm_vdims(c, cs)[1], half};
    if (seq_axis == 1) {
        shape[1] = shape[2];
        shape[2] = 1;
    }
    cs = tm_cast(c, tm_reshape(c, cs, 4, shape), tm_vdtype(c, x));
    sn = tm_cast(c, tm_reshape(c, sn, 4, shape), tm_vdtype(c, x));
    tm_val xr = tm_slice_axis(c, x, 3, 0, rot), x1, x2;
    if (interleaved) {
        int64_t pairs[5] = {dx[0], dx[1], dx[2], half, 2};
        tm_val p = tm_reshape(c, xr, 5, pairs);
        int64_t four[4] = {dx[0], dx[1], dx[2], half};
        x1 = tm_reshape(c, tm_slice_axis(c, p, 4, 0, 1), 4, four);
        x2 = tm_reshape(c, tm_slice_axis(c, p, 4, 1, 1), 4, four);
    } else {
        x1 = tm_slice_axis(c, xr, 3, 0, half);
        x2 = tm_slice_axis(c, xr, 3, half, half);
    }
    tm_val real = tm_sub(c, tm_mul(c, x1, cs), tm_mul(c, x2, sn));
    tm_val imag = tm_add(c, tm_mul(c, x1, sn), tm_mul(c, x2, cs));
    tm_val rotated;
    if (interleaved) {
        int64_t five[5] = {dx[0], dx[1], dx[2], half, 1};
        tm_val parts[2] = {tm_reshape(c, real, 5, five), tm_reshape(c, imag, 5, five)};
        int64_t back[4] = {dx[0], dx[1], dx[2], rot};
        rotated = tm_reshape(c, tm_concat(c, parts, 2, 4), 4, back);
    } else {
        tm_val parts[2] = {real, imag};
        rotated = tm_concat(c, parts, 2, 3);
    }
    if (rot == head) return rotated;
    tm_val parts[2] = {rotated, tm_slice_axis(c, x, 3, rot, head - rot)};
    return tm_concat(c, parts, 2, 3);
}

/* softmax(s) along the last axis with an extra term exp(sink - max) in the denominator
 * (sink (1, N, 1, 1), or 0 when TM_NONE). */
static inline tm_val ms_smooth_softmax(tm_ctx *c, tm_val s, tm_val sink) {
    int64_t axis = 3;
    tm_val top = tm_reduce(c, TM_P_REDUCE_MAX, s, &axis, 1, 1);
    if (sink == TM_NONE) sink = tm_const_scalar(c, TM_FLOAT, 0.0);
    top = tm_binary(c, TM_P_MAX, top, sink);
    tm_val e = tm_unary(c, TM_P_EXP, tm_sub(c, s, top));
    tm_val sum = tm_reduce(c, TM_P_REDUCE_SUM, e, &axis, 1, 1);
    sum = tm_add(c, sum, tm_unary(c, TM_P_EXP, tm_sub(c, sink, top)));
    return tm_div(c, e, sum);
}

/* Scaled dot-product attention: q (B, N, S, H), k (B, Nkv, T, H), v (B, Nkv, T, Hv),
 * any float dtype (computed in f32). Each KV head serves N/Nkv query heads, so q is
 * viewed as (B, Nkv, N/Nkv * S, H) and no KV head is copied. Returns (B, S, N*Hv) in
 * dtype `out_dt`; a->qk receives the QK output asked for. */
static inline tm_val ms_attend(tm_ctx *c, ms_attn *a, tm_val q, tm_val k, tm_val v,
                               tm_dtype out_dt) {
    if (!tm_ctx_ok(c)) return TM_NONE;
    q = tm_cast(c, q, TM_FLOAT);
    k = tm_cast(c, k, TM_FLOAT);
    v = tm_cast(c, v, TM_FLOAT);
    int64_t groups = a->heads / a->kv_heads;
    int64_t qd[4] = {a->batch, a->kv_heads, groups * a->q_len, a->head};
    static const int64_t swap[4] = {0, 1, 3, 2};
    tm_val s = tm_matmul(c, tm_reshape(c, q, 4, qd), tm_transpose(c, k, swap));
    int64_t sd[4] = {a->batch, a->heads, a->q_len, a->total};
    s = tm_mul(c, tm_reshape(c, s, 4, sd), tm_const_scalar(c, TM_FLOAT, a->scale));
    if (a->softcap > 0.0) {
        tm_val cap = tm_const_scalar(c, TM_FLOAT, a->softcap);
        s = tm_mul(c, tm_unary(c, TM_P_TANH, tm_div(c, s, cap)), cap);
    }
    if (a->additive != TM_NONE) s = tm_add(c, s, tm_cast(c, a->additive, TM_FLOAT));
    if (a->allowed != TM_NONE)
        s = tm_where(c, a->allowed, s, tm_const_scalar(c, TM_FLOAT, MS_LOWEST));
    if (a->qk_mode == 1) a->qk = s;
    tm_val p;
    if (a->smooth || a->sink != TM_NONE) {
        tm_val sink = TM_NONE;
        if (a->sink != TM_NONE) {
            int64_t sdims[4] = {1, a->heads, 1, 1};
            sink = tm_reshape(c, tm_cast(c, a->sink, TM_FLOAT), 4, sdims);
        }
        p = ms_smooth_softmax(c, s, sink);
    } else {
        p = tm_softmax(c, s, 3, 0);
    }
    if (a->qk_mode == 2) a->qk = p;
    int64_t pd[4] = {a->batch, a->kv_heads, groups * a->q_len, a->total};
    tm_val y = tm_matmul(c, tm_reshape(c, p, 4, pd), v);
    int64_t yd[4] = {a->batch, a->heads, a->q_len, a->v_head};
    return tm_cast(c, ms_merge_heads(c, tm_reshape(c, y, 4, yd)), out_dt);
}

#endif
