/* LinearAttention (opset 27): the linear / gated / delta / gated_delta recurrences over
 * a (B, H_kv, d_k, d_v) state, unrolled token by token from matmuls and elementwise
 * primitives in f32. Not the chunk-parallel form: a long prefill records O(T) steps. */
#include <math.h>
#include <stdlib.h>
#include "elementwise.h"

typedef struct lin_attn {
    int64_t batch, len, q_heads, kv_heads, dk, dv;
    int gating, delta;
} lin_attn;

/* (B, T, H*D) -> (B, H, T, D) in f32. */
static tm_val heads_first(tm_ctx *c, tm_val x, int64_t heads) {
    const int64_t *d = tm_vdims(c, x);
    int64_t dims[4] = {d[0], d[1], heads, d[2] / heads};
    static const int64_t perm[4] = {0, 2, 1, 3};
    return tm_cast(c, tm_transpose(c, tm_reshape(c, x, 4, dims), perm), TM_FLOAT);
}

static int read_rule(tm_lower *L, lin_attn *a) {
    const char *rule = tm_attr_s(L, "update_rule", "gated_delta");
    if (!strcmp(rule, "linear")) return 0;
    if (!strcmp(rule, "gated")) a->gating = 1;
    else if (!strcmp(rule, "delta")) a->delta = 1;
    else if (!strcmp(rule, "gated_delta")) a->gating = a->delta = 1;
    else return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute update_rule='%s' is not linear, "
                         "gated, delta or gated_delta", rule);
    return 0;
}

static int check_inputs(tm_lower *L, lin_attn *a, tm_val q, tm_val k, tm_val v) {
    tm_ctx *c = tm_lctx(L);
    uint32_t dts = TM_DT(TM_FLOAT) | TM_DT(TM_FLOAT16) | TM_DT(TM_BFLOAT16);
    if (tm_ew_check(L, 0, q, dts) || tm_ew_same_dtype(L, 0, q, 1, k) ||
        tm_ew_same_dtype(L, 0, q, 2, v) || read_rule(L, a))
        return 1;
    a->q_heads = tm_attr_i(L, "q_num_heads", 0);
    a->kv_heads = tm_attr_i(L, "kv_num_heads", 0);
    if (a->q_heads <= 0 || a->kv_heads <= 0 || a->q_heads % a->kv_heads)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attributes q_num_heads=%lld and "
                        "kv_num_heads=%lld must be positive, the first a multiple of the second",
                        (long long)a->q_heads, (long long)a->kv_heads);
    const int64_t *dq = tm_vdims(c, q), *dk = tm_vdims(c, k), *dv = tm_vdims(c, v);
    if (tm_vrank(c, q) != 3 || tm_vrank(c, k) != 3 || tm_vrank(c, v) != 3 ||
        dq[2] % a->q_heads || dv[2] % a->kv_heads || dk[0] != dq[0] || dv[0] != dq[0] ||
        dk[1] != dq[1] || dv[1] != dq[1] || dk[2] != dq[2] / a->q_heads * a->kv_heads)
        return tm_lfail(L, TM_ERR_SHAPE, "query, key and value must be (B, T, H * d) with "
                        "q_num_heads=%lld query heads and kv_num_heads=%lld key/value heads",
                        (long long)a->q_heads, (long long)a->kv_heads);
    a->batch = dq[0];
    a->len = dq[1];
    a->dk = dq[2] / a->q_heads;
    a->dv = dv[2] / a->kv_heads;
    if (a->gating != tm_lhas(L, 4) || a->delta != tm_lhas(L, 5))
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "update_rule '%s' takes %s decay (input 4) "
                        "and %s beta (input 5)", tm_attr_s(L, "update_rule", "gated_delta"),
                        a->gating ? "a" : "no", a->delta ? "a" : "no");
    return 0;
}

/* decay (B, T, H_kv) or (B, T, H_kv * d_k) -> (B, H_kv, T, 1 or d_k);
 * beta (B, T, H_kv or 1) -> (B, H_kv or 1, T, 1). */
static tm_val per_head(tm_lower *L, int index, const lin_attn *a, int64_t wide) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, index);
    if (tm_ew_same_dtype(L, 0, tm_lin(L, 0), index, x)) return TM_NONE;
    const int64_t *d = tm_vdims(c, x);
    int64_t last = tm_vrank(c, x) == 3 ? d[2] : -1;
    int64_t heads = index == 5 && last == 1 ? 1 : a->kv_heads;
    if (tm_vrank(c, x) != 3 || d[0] != a->batch || d[1] != a->len ||
        (last != heads && last != wide)) {
        tm_lfail(L, TM_ERR_SHAPE, "input %d (%s) must be (%lld, %lld, %lld%s)", index,
                 index == 4 ? "decay" : "beta", (long long)a->batch, (long long)a->len,
                 (long long)heads, index == 4 ? " or kv_num_heads * d_k" : "");
        return TM_NONE;
    }
    int64_t dims[4] = {a->batch, a->len, heads, last / heads};
    static const int64_t perm[4] = {0, 2, 1, 3};
    return tm_cast(c, tm_transpose(c, tm_reshape(c, x, 4, dims), perm), TM_FLOAT);
}

/* Token t of a (B, H, T, D) tensor: (B, H, 1, D). */
static tm_val token(tm_ctx *c, tm_val x, int64_t t) { return tm_slice_axis(c, x, 2, t, 1); }

/* (B, H, 1, D) -> (B, H, D, 1): a column per head. */
static tm_val column(tm_ctx *c, tm_val x) {
    const int64_t *d = tm_vdims(c, x);
    int64_t dims[4] = {d[0], d[1], d[3], 1};
    return tm_reshape(c, x, 4, dims);
}

static tm_status lower_linear_attention(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val query = tm_ew_input(L, 0), key = tm_ew_input(L, 1), value = tm_ew_input(L, 2);
    lin_attn a;
    memset(&a, 0, sizeof a);
    if (check_inputs(L, &a, query, key, value)) return c->status;
    tm_val q = heads_first(c, query, a.q_heads), k = heads_first(c, key, a.kv_heads);
    tm_val v = heads_first(c, value, a.kv_heads);
    tm_val decay = a.gating ? per_head(L, 4, &a, a.kv_heads * a.dk) : TM_NONE;
    tm_val beta = a.delta ? per_head(L, 5, &a, -1) : TM_NONE;
    int64_t sdims[4] = {a.batch, a.kv_heads, a.dk, a.dv};
    tm_val past = tm_lin(L, 3), state;
    tm_dtype state_dt = tm_vdtype(c, query);
    if (past != TM_NONE) {
        if (tm_ew_check(L, 3, past, TM_DT(TM_FLOAT) | TM_DT(TM_FLOAT16) | TM_DT(TM_BFLOAT16)))
            return c->status;
        if (tm_vrank(c, past) != 4 || memcmp(tm_vdims(c, past), sdims, sizeof sdims))
            return tm_lfail(L, TM_ERR_SHAPE, "input 3 (past_state) must be (%lld, %lld, %lld, "
                            "%lld)", (long long)sdims[0], (long long)sdims[1],
                            (long long)sdims[2], (long long)sdims[3]);
        state_dt = tm_vdtype(c, past);
        state = tm_cast(c, past, TM_FLOAT);
    } else {
        state = tm_const_fill(c, TM_FLOAT, 4, sdims, 0.0);
    }
    double scale = tm_attr_f(L, "scale", 0.0f);
    if (scale == 0.0) scale = 1.0 / sqrt((double)a.dk);
    tm_val scale_v = tm_const_scalar(c, TM_FLOAT, scale);
    int64_t groups = a.q_heads / a.kv_heads;
    int64_t qg[4] = {a.batch, a.kv_heads, groups, a.dk}, og[4] = {a.batch, a.q_heads, 1, a.dv};
    tm_val *outs = calloc((size_t)(a.len > 0 ? a.len : 1), sizeof *outs);
    if (!outs) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    for (int64_t t = 0; t < a.len && tm_ctx_ok(c); t++) {
        tm_val k_t = token(c, k, t), v_t = token(c, v, t);
        if (a.gating) {
            tm_val g_t = tm_unary(c, TM_P_EXP, token(c, decay, t));  /* (B, H, 1, d_k or 1) */
            state = tm_mul(c, state, column(c, g_t));
        }
        if (a.delta) {
            tm_val retrieved = tm_matmul(c, k_t, state);                  /* (B, H, 1, d_v) */
            v_t = tm_mul(c, token(c, beta, t), tm_sub(c, v_t, retrieved));
        }
        state = tm_add(c, state, tm_mul(c, column(c, k_t), v_t));
        /* Each KV head's state serves its group of query heads. */
        tm_val o = tm_matmul(c, tm_reshape(c, token(c, q, t), 4, qg), state);
        outs[t] = tm_reshape(c, tm_mul(c, scale_v, o), 4, og);
    }
    int64_t empty[4] = {a.batch, a.q_heads, 0, a.dv};
    tm_val y = a.len == 0 ? tm_const_fill(c, TM_FLOAT, 4, empty, 0.0)
                          : tm_concat(c, outs, (int)a.len, 2);               /* (B, Hq, T, d_v) */
    free(outs);
    static const int64_t perm[4] = {0, 2, 1, 3};
    int64_t ydims[3] = {a.batch, a.len, a.q_heads * a.dv};
    y = tm_reshape(c, tm_transpose(c, y, perm), 3, ydims);
    tm_lout(L, 0, tm_cast(c, y, tm_vdtype(c, query)));
    tm_lout(L, 1, tm_cast(c, state, state_dt));
    return c->status;
}

TM_REGISTER_OP("", "LinearAttention", 27, 27, lower_linear_attention);
