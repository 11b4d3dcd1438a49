/* Attention (opset 23, 24): scaled dot-product attention lowered onto matmul, softmax
 * and elementwise primitives, with 3-D/4-D inputs, grouped KV heads, masks, KV cache,
 * softcap and the qk_matmul_output modes. Not a fused kernel (a plan pass may fuse it). */
#include <math.h>
#include "elementwise.h"

typedef struct attn {
    tm_dtype dt;                 /* T1: Q's dtype, the dtype of Y */
    int three_d;
    int64_t batch, q_heads, kv_heads, q_len, total, past;  /* total = past + new keys */
    int64_t head, v_head;
} attn;

/* (B, S, H*D) -> (B, H, S, D). */
static tm_val split_heads(tm_ctx *c, tm_val x, int64_t heads) {
    const int64_t *d = tm_vdims(c, x);
    int64_t dims[4] = {d[0], d[1], heads, d[2] / heads};
    static const int64_t perm[4] = {0, 2, 1, 3};
    return tm_transpose(c, tm_reshape(c, x, 4, dims), perm);
}

static int read_heads(tm_lower *L, attn *a, tm_val q, tm_val k, tm_val v) {
    tm_ctx *c = tm_lctx(L);
    int rq = tm_vrank(c, q);
    if (rq != 3 && rq != 4)
        return tm_lfail(L, TM_ERR_SHAPE, "input 0 (Q) has rank %d, expected 3 or 4", rq);
    if (tm_vrank(c, k) != rq || tm_vrank(c, v) != rq)
        return tm_lfail(L, TM_ERR_SHAPE, "inputs Q, K and V have ranks %d, %d and %d; they "
                        "must be equal", rq, tm_vrank(c, k), tm_vrank(c, v));
    a->three_d = rq == 3;
    a->batch = tm_vdims(c, q)[0];
    if (!a->three_d) {
        a->q_heads = tm_vdims(c, q)[1];
        a->kv_heads = tm_vdims(c, k)[1];
        return 0;
    }
    a->q_heads = tm_attr_i(L, "q_num_heads", 0);
    a->kv_heads = tm_attr_i(L, "kv_num_heads", 0);
    if (a->q_heads <= 0 || a->kv_heads <= 0)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "3-D inputs need attributes q_num_heads "
                        "and kv_num_heads >= 1, got %lld and %lld", (long long)a->q_heads,
                        (long long)a->kv_heads);
    const int64_t hq = tm_vdims(c, q)[2], hk = tm_vdims(c, k)[2], hv = tm_vdims(c, v)[2];
    if (hq % a->q_heads || hk % a->kv_heads || hv % a->kv_heads)
        return tm_lfail(L, TM_ERR_SHAPE, "hidden sizes Q %lld, K %lld, V %lld are not "
                        "multiples of q_num_heads=%lld / kv_num_heads=%lld", (long long)hq,
                        (long long)hk, (long long)hv, (long long)a->q_heads,
                        (long long)a->kv_heads);
    return 0;
}

/* Checks the 4-D Q (B, Hq, Sq, D), K (B, Hkv, S, D), V (B, Hkv, S, Dv). */
static int check_shapes(tm_lower *L, attn *a, tm_val q, tm_val k, tm_val v) {
    tm_ctx *c = tm_lctx(L);
    const int64_t *dq = tm_vdims(c, q), *dk = tm_vdims(c, k), *dv = tm_vdims(c, v);
    a->q_len = dq[2];
    a->head = dq[3];
    a->v_head = dv[3];
    if (dk[0] != a->batch || dv[0] != a->batch || dk[1] != a->kv_heads ||
        dv[1] != a->kv_heads || dk[2] != dv[2] || dk[3] != a->head)
        return tm_lfail(L, TM_ERR_SHAPE, "K (%lld, %lld, %lld, %lld) and V (%lld, %lld, %lld, "
                        "%lld) do not fit Q (%lld, %lld, %lld, %lld) as (batch, heads, "
                        "sequence, head size)", (long long)dk[0], (long long)dk[1],
                        (long long)dk[2], (long long)dk[3], (long long)dv[0], (long long)dv[1],
                        (long long)dv[2], (long long)dv[3], (long long)dq[0], (long long)dq[1],
                        (long long)dq[2], (long long)dq[3]);
    if (a->q_heads % a->kv_heads)
        return tm_lfail(L, TM_ERR_SHAPE, "q_num_heads=%lld is not a multiple of "
                        "kv_num_heads=%lld", (long long)a->q_heads, (long long)a->kv_heads);
    return 0;
}

/* past (B, Hkv, P, D) ++ x along the sequence axis: the present cache. */
static tm_val append_cache(tm_lower *L, int index, tm_val x, const char *name) {
    tm_ctx *c = tm_lctx(L);
    tm_val past = tm_lin(L, index);
    if (past == TM_NONE || !tm_ctx_ok(c)) return x;
    const int64_t *dp = tm_vdims(c, past), *dx = tm_vdims(c, x);
    if (tm_vrank(c, past) != 4 || dp[0] != dx[0] || dp[1] != dx[1] || dp[3] != dx[3]) {
        tm_lfail(L, TM_ERR_SHAPE, "input %d (%s) must be (%lld, %lld, past, %lld)", index,
                 name, (long long)dx[0], (long long)dx[1], (long long)dx[3]);
        return TM_NONE;
    }
    if (tm_vdtype(c, past) != tm_vdtype(c, x)) {
        tm_lfail(L, TM_ERR_DTYPE, "input %d (%s) is %s, expected %s", index, name,
                 tm_dtype_name(tm_vdtype(c, past)), tm_dtype_name(tm_vdtype(c, x)));
        return TM_NONE;
    }
    tm_val parts[2] = {past, x};
    return tm_concat(c, parts, 2, 2);
}

/* 0 where allowed, -inf where not, in dtype dt. */
static tm_val allowed_to_bias(tm_ctx *c, tm_val allowed, tm_dtype dt) {
    return tm_where(c, allowed, tm_const_scalar(c, dt, 0.0), tm_const_scalar(c, dt, -INFINITY));
}

/* An int64 iota reshaped to `rank` dims with its n entries on axis `axis`. */
static tm_val iota_on_axis(tm_ctx *c, int64_t n, int rank, int axis) {
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = TM_INT64;
    a.i[1] = n;
    a.i[3] = 1;
    int64_t dims[TM_MAX_RANK];
    for (int d = 0; d < rank; d++) dims[d] = d == axis ? n : 1;
    return tm_reshape(c, tm_prim(c, TM_P_RANGE, NULL, 0, &a), rank, dims);
}

/* attn_mask as an additive bias of dtype dt, its last axis padded to `total` (with
 * -inf, or False for a boolean mask). */
static tm_val mask_bias(tm_lower *L, const attn *a, tm_val m) {
    tm_ctx *c = tm_lctx(L);
    int r = tm_vrank(c, m);
    if (r < 1 || r > 4) {
        tm_lfail(L, TM_ERR_SHAPE, "input 3 (attn_mask) has rank %d, expected 1 to 4", r);
        return TM_NONE;
    }
    int64_t last = tm_vdims(c, m)[r - 1];
    if (last > a->total) {
        tm_lfail(L, TM_ERR_SHAPE, "input 3 (attn_mask) has %lld keys, more than the total "
                 "sequence length %lld", (long long)last, (long long)a->total);
        return TM_NONE;
    }
    int is_bool = tm_vdtype(c, m) == TM_BOOL;
    if (!is_bool) m = tm_cast(c, m, a->dt);          /* before padding: -inf fits no int */
    if (last < a->total) {
        int64_t begin[4] = {0}, end[4] = {0};
        end[r - 1] = a->total - last;
        m = tm_pad(c, m, 0, begin, end, is_bool ? 0.0 : -INFINITY);
    }
    return is_bool ? allowed_to_bias(c, m, a->dt) : m;
}

/* The causal frontier as a bias: query i (of q_len) sees key j iff j <= i + offset, with
 * offset the past length, or nonpad_kv_seqlen[b] - q_len for an external cache. */
static tm_val causal_bias(tm_ctx *c, const attn *a, tm_val nonpad) {
    tm_val i = iota_on_axis(c, a->q_len, 4, 2), j = iota_on_axis(c, a->total, 4, 3);
    tm_val offset;
    if (nonpad != TM_NONE && a->past == 0) {
        int64_t dims[4] = {a->batch, 1, 1, 1};
        offset = tm_sub(c, tm_reshape(c, nonpad, 4, dims),
                        tm_const_scalar(c, TM_INT64, (double)a->q_len));
    } else {
        offset = tm_const_scalar(c, TM_INT64, (double)a->past);
    }
    tm_val allowed = tm_binary(c, TM_P_LE, j, tm_add(c, i, offset));
    return allowed_to_bias(c, allowed, a->dt);
}

/* Keys at or past nonpad_kv_seqlen[b] are padding. */
static tm_val padding_bias(tm_ctx *c, const attn *a, tm_val nonpad) {
    int64_t dims[4] = {a->batch, 1, 1, 1};
    tm_val j = iota_on_axis(c, a->total, 4, 3);
    tm_val allowed = tm_binary(c, TM_P_LT, j, tm_reshape(c, nonpad, 4, dims));
    return allowed_to_bias(c, allowed, a->dt);
}

static tm_val add_bias(tm_ctx *c, tm_val bias, tm_val part) {
    return bias == TM_NONE ? part : tm_add(c, bias, part);
}

/* Q (B, Hq, Sq, D) against K (B, Hkv, T, D): each KV head serves Hq/Hkv query heads,
 * so Q is viewed as (B, Hkv, Hq/Hkv * Sq, D) and no KV head is copied. */
static tm_val grouped_scores(tm_ctx *c, const attn *a, tm_val q, tm_val k) {
    int64_t groups = a->q_heads / a->kv_heads;
    int64_t qd[4] = {a->batch, a->kv_heads, groups * a->q_len, a->head};
    static const int64_t perm[4] = {0, 1, 3, 2};
    tm_val s = tm_matmul(c, tm_reshape(c, q, 4, qd), tm_transpose(c, k, perm));
    int64_t sd[4] = {a->batch, a->q_heads, a->q_len, a->total};
    return tm_reshape(c, s, 4, sd);
}

static tm_val grouped_values(tm_ctx *c, const attn *a, tm_val p, tm_val v) {
    int64_t groups = a->q_heads / a->kv_heads;
    int64_t pd[4] = {a->batch, a->kv_heads, groups * a->q_len, a->total};
    tm_val y = tm_matmul(c, tm_reshape(c, p, 4, pd), v);
    int64_t yd[4] = {a->batch, a->q_heads, a->q_len, a->v_head};
    return tm_reshape(c, y, 4, yd);
}

/* Softmax over keys; a row with every key masked gives zeros instead of NaN. */
static tm_val guarded_softmax(tm_ctx *c, tm_val s, int guard) {
    tm_val p = tm_softmax(c, s, 3, 0);
    if (!guard) return p;
    int64_t axis = 3;
    tm_val top = tm_reduce(c, TM_P_REDUCE_MAX, s, &axis, 1, 1);
    tm_val empty = tm_binary(c, TM_P_EQ, top, tm_scalar_like(c, s, -INFINITY));
    return tm_where(c, empty, tm_scalar_like(c, s, 0.0), p);
}

static int read_softmax_dtype(tm_lower *L, tm_dtype dt, tm_dtype *out) {
    *out = dt;
    if (!tm_attr_has(L, "softmax_precision")) return 0;
    int64_t sp = tm_attr_i(L, "softmax_precision", 0);
    if (sp != TM_FLOAT && sp != TM_FLOAT16 && sp != TM_DOUBLE && sp != TM_BFLOAT16)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute softmax_precision=%lld is not "
                        "a float dtype (1, 10, 11 or 16)", (long long)sp);
    *out = (tm_dtype)sp;
    return 0;
}

/* The additive bias of the mask, the causal frontier and the padding lengths, or TM_NONE
 * when none applies. */
static tm_val attention_bias(tm_lower *L, const attn *a, tm_val nonpad) {
    tm_ctx *c = tm_lctx(L);
    tm_val bias = TM_NONE;
    if (tm_lhas(L, 3)) bias = mask_bias(L, a, tm_lin(L, 3));
    if (tm_attr_i(L, "is_causal", 0)) bias = add_bias(c, bias, causal_bias(c, a, nonpad));
    if (nonpad != TM_NONE) bias = add_bias(c, bias, padding_bias(c, a, nonpad));
    return bias;
}

/* Q, K, V to (B, H, S, D), the caches appended; fills a. Returns 0 when all fit. */
static int prepare_inputs(tm_lower *L, attn *a, tm_val *q, tm_val *k, tm_val *v) {
    tm_ctx *c = tm_lctx(L);
    if (tm_ew_check(L, 0, *q, TM_DTS_FLOAT) || tm_ew_check(L, 1, *k, TM_DTS_FLOAT) ||
        tm_ew_check(L, 2, *v, TM_DTS_FLOAT) || tm_ew_same_dtype(L, 0, *q, 1, *k))
        return 1;
    a->dt = tm_vdtype(c, *q);
    if (read_heads(L, a, *q, *k, *v)) return 1;
    if (a->three_d) {
        *q = split_heads(c, *q, a->q_heads);
        *k = split_heads(c, *k, a->kv_heads);
        *v = split_heads(c, *v, a->kv_heads);
    }
    if (!tm_ctx_ok(c) || check_shapes(L, a, *q, *k, *v)) return 1;
    if (tm_lhas(L, 4) != tm_lhas(L, 5))
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "inputs 4 (past_key) and 5 (past_value) "
                        "must be given together");
    if (tm_lhas(L, 4) && tm_vrank(c, tm_lin(L, 4)) == 4) a->past = tm_vdims(c, tm_lin(L, 4))[2];
    *k = append_cache(L, 4, *k, "past_key");
    *v = append_cache(L, 5, *v, "past_value");
    if (!tm_ctx_ok(c)) return 1;
    a->total = tm_vdims(c, *k)[2];
    tm_val nonpad = tm_lin(L, 6);
    if (nonpad != TM_NONE && (tm_vdtype(c, nonpad) != TM_INT64 || tm_vnumel(c, nonpad) != a->batch))
        return tm_lfail(L, TM_ERR_SHAPE, "input 6 (nonpad_kv_seqlen) must be int64 of shape "
                        "(%lld)", (long long)a->batch);
    return 0;
}

static tm_status lower_attention(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val q = tm_ew_input(L, 0), k = tm_ew_input(L, 1), v = tm_ew_input(L, 2);
    attn a;
    memset(&a, 0, sizeof a);
    tm_dtype sdt;
    if (prepare_inputs(L, &a, &q, &k, &v) || read_softmax_dtype(L, a.dt, &sdt)) return c->status;
    int64_t mode = tm_attr_i(L, "qk_matmul_output_mode", 0);
    if (mode < 0 || mode > 3)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute qk_matmul_output_mode=%lld is "
                        "not 0, 1, 2 or 3", (long long)mode);
    tm_lout(L, 1, k);
    tm_lout(L, 2, v);

    /* Q and K are each scaled by sqrt(scale) so that Q K^T does not overflow. */
    double scale = 1.0 / sqrt((double)a.head);
    if (tm_attr_has(L, "scale")) scale = tm_attr_f(L, "scale", 0.0f);
    tm_val root = tm_const_scalar(c, a.dt, sqrt(scale));
    tm_val s = grouped_scores(c, &a, tm_mul(c, q, root), tm_mul(c, k, root));
    tm_val qk = s;
    double softcap = tm_attr_f(L, "softcap", 0.0f);
    if (softcap > 0.0) {
        /* Before the mask, so that masked scores stay -inf. */
        tm_val cap = tm_const_scalar(c, a.dt, softcap);
        s = tm_mul(c, tm_unary(c, TM_P_TANH, tm_div(c, s, cap)), cap);
    }
    if (mode == 1) qk = s;
    tm_val nonpad = tm_lin(L, 6), bias = attention_bias(L, &a, nonpad);
    if (bias != TM_NONE) s = tm_add(c, s, bias);
    if (mode == 2) qk = s;

    /* Only a mask or a padding length can leave a query with no key at all. */
    int guard = tm_lhas(L, 3) || nonpad != TM_NONE;
    tm_val p = guarded_softmax(c, tm_cast(c, s, sdt), guard);
    if (mode == 3) qk = p;
    if (tm_lwants(L, 3)) tm_lout(L, 3, tm_cast(c, qk, a.dt));

    tm_val y = tm_cast(c, grouped_values(c, &a, p, tm_cast(c, v, sdt)), a.dt);
    if (a.three_d) {
        static const int64_t perm[4] = {0, 2, 1, 3};
        int64_t dims[3] = {a.batch, a.q_len, a.q_heads * a.v_head};
        y = tm_reshape(c, tm_transpose(c, y, perm), 3, dims);
    }
    tm_lout(L, 0, y);
    return c->status;
}

TM_REGISTER_OP("", "Attention", 23, 27, lower_attention);
