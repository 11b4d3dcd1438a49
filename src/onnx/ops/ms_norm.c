/* Contrib normalisations over LAYERNORM: Skip(Simplified)LayerNormalization,
 * SimplifiedLayerNormalization, ai.onnx LayerNormalization before opset 17 and
 * EmbedLayerNormalization. Not LayerNormalization 17+ or RMSNormalization (layer_norm.c). */
#include "contrib.h"

#define NORM_DTS TM_DTS_FLOAT

static int normalized_axis(tm_lower *L, int rank) {
    int64_t axis = tm_attr_i(L, "axis", -1);
    if (axis < -rank || axis >= rank) {
        tm_lfail(L, TM_ERR_SHAPE, "attribute axis=%lld is out of range for rank %d",
                 (long long)axis, rank);
        return -1;
    }
    return (int)(axis < 0 ? axis + rank : axis);
}

/* Mean and inverse std come out of the primitive in float32; stash_type names theirs. */
static tm_val to_stash(tm_lower *L, tm_val v) {
    int64_t stash = tm_attr_i(L, "stash_type", TM_FLOAT);
    if (stash != TM_DOUBLE) stash = TM_FLOAT;
    return tm_cast(tm_lctx(L), v, (tm_dtype)stash);
}

/* LayerNormalization (ai.onnx before 17) and SimplifiedLayerNormalization: Y, then mean
 * and inv_std_dev (layer norm) or inv_std_var alone (simplified). */
static tm_status lower_norm(tm_lower *L, int rms) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ms_input(L, 0, NORM_DTS), scale = tm_ms_input(L, 1, NORM_DTS);
    tm_val bias = rms ? TM_NONE : tm_ms_optional(L, 2, NORM_DTS);
    if (!tm_ctx_ok(c)) return c->status;
    int axis = normalized_axis(L, tm_vrank(c, x));
    if (axis < 0) return c->status;
    tm_val out[3];
    if (tm_ms_layer_norm(L, x, scale, bias, axis, rms, tm_attr_f(L, "epsilon", 1e-5f), out))
        return c->status;
    tm_lout(L, 0, out[0]);
    if (rms) {
        if (tm_lwants(L, 1)) tm_lout(L, 1, to_stash(L, out[2]));
        return c->status;
    }
    if (tm_lwants(L, 1)) tm_lout(L, 1, to_stash(L, out[1]));
    if (tm_lwants(L, 2)) tm_lout(L, 2, to_stash(L, out[2]));
    return c->status;
}

static tm_status lower_layer_norm(tm_lower *L) { return lower_norm(L, 0); }
static tm_status lower_simplified_layer_norm(tm_lower *L) { return lower_norm(L, 1); }

/* skip may be (B, S, H), (1, S, H) or (S, H) against input (B, S, H); 2-D inputs take an
 * equal skip. */
static int check_skip(tm_lower *L, tm_val x, tm_val skip) {
    tm_ctx *c = tm_lctx(L);
    int r = tm_vrank(c, x), rs = tm_vrank(c, skip);
    const int64_t *xd = tm_vdims(c, x), *sd = tm_vdims(c, skip);
    int ok = (r == 2 || r == 3) && rs <= r && rs >= 2;
    for (int d = 0; ok && d < rs; d++) {
        int xa = r - rs + d;
        ok = sd[d] == xd[xa] || (xa == 0 && r == 3 && sd[d] == 1);
    }
    if (ok) return 0;
    return tm_lfail(L, TM_ERR_SHAPE, "input 1 (skip, rank %d) does not fit input 0 (rank %d): "
                    "expected (B, S, H), (1, S, H) or (S, H)", rs, r);
}

/* SkipLayerNormalization (beta at 3, bias at 4) and SkipSimplifiedLayerNormalization
 * (bias at 3): LN(input + skip + bias) * gamma + beta, with the sum as output 3. */
static tm_status lower_skip_norm(tm_lower *L, int rms) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ms_input(L, 0, NORM_DTS), skip = tm_ms_input(L, 1, NORM_DTS);
    tm_val gamma = tm_ms_input(L, 2, NORM_DTS);
    tm_val beta = rms ? TM_NONE : tm_ms_optional(L, 3, NORM_DTS);
    int bias_index = rms ? 3 : 4;
    tm_val bias = tm_ms_optional(L, bias_index, NORM_DTS);
    if (!tm_ctx_ok(c) || tm_ew_same_dtype(L, 0, x, 1, skip) || check_skip(L, x, skip))
        return c->status;
    int r = tm_vrank(c, x);
    int64_t hidden = tm_vdims(c, x)[r - 1];
    if (tm_ms_check_shape(L, 2, gamma, 1, hidden) ||
        (beta != TM_NONE && tm_ms_check_shape(L, 3, beta, 1, hidden)) ||
        (bias != TM_NONE && tm_ms_check_shape(L, bias_index, bias, 1, hidden)))
        return c->status;
    tm_val sum = tm_add(c, x, skip);
    if (bias != TM_NONE) sum = tm_add(c, sum, tm_cast(c, bias, tm_vdtype(c, x)));
    float eps = tm_attr_f(L, "epsilon", rms ? 1e-5f : 1e-12f);
    tm_val out[3];
    if (tm_ms_layer_norm(L, sum, gamma, beta, r - 1, rms, eps, out)) return c->status;
    tm_lout(L, 0, out[0]);
    if (tm_lwants(L, 1)) tm_lout(L, 1, out[1]);
    if (tm_lwants(L, 2)) tm_lout(L, 2, out[2]);
    if (tm_lwants(L, 3)) tm_lout(L, 3, sum);
    return c->status;
}

static tm_status lower_skip_layer_norm(tm_lower *L) { return lower_skip_norm(L, 0); }
static tm_status lower_skip_simplified_layer_norm(tm_lower *L) { return lower_skip_norm(L, 1); }

/* An int32 id tensor (input `index`) of shape (B, S), or (1, S) when may_broadcast. */
static int check_ids(tm_lower *L, int index, tm_val v, int64_t b, int64_t s, int may_broadcast) {
    tm_ctx *c = tm_lctx(L);
    if (v == TM_NONE) return 0;
    if (tm_ew_check(L, index, v, TM_DT(TM_INT32))) return 1;
    const int64_t *d = tm_vdims(c, v);
    if (tm_vrank(c, v) == 2 && d[1] == s && (d[0] == b || (may_broadcast && d[0] == 1))) return 0;
    return tm_lfail(L, TM_ERR_SHAPE, "input %d ('%s') must be (%lld, %lld)", index,
                    tm_lnode(L)->inputs[index], (long long)b, (long long)s);
}

/* One embedding table (input `index`, (rows, H)) gathered at ids. */
static tm_val embed(tm_lower *L, int index, tm_val ids, int64_t hidden) {
    tm_ctx *c = tm_lctx(L);
    tm_val table = tm_ms_input(L, index, TM_DT(TM_FLOAT) | TM_DT(TM_FLOAT16));
    if (table == TM_NONE || tm_ms_check_shape(L, index, table, 2, hidden)) return TM_NONE;
    return tm_gather(c, table, ids, 0);
}

/* EmbedLayerNormalization: LN(word[ids] + position[pos] + segment[seg]) * gamma + beta;
 * mask_index counts the 1s of each mask row (0 without a mask); embedding_sum is the sum
 * before normalisation. */
static tm_status lower_embed_layer_norm(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val ids = tm_ms_input(L, 0, TM_DT(TM_INT32));
    tm_val word_table = tm_ew_input(L, 2);
    if (ids == TM_NONE || word_table == TM_NONE || tm_ms_check_shape(L, 2, word_table, 2, -1))
        return c->status;
    if (tm_vrank(c, ids) != 2)
        return tm_lfail(L, TM_ERR_SHAPE, "input 0 (input_ids) has rank %d, expected 2",
                        tm_vrank(c, ids));
    int64_t b = tm_vdims(c, ids)[0], s = tm_vdims(c, ids)[1];
    int64_t hidden = tm_vdims(c, word_table)[1];
    tm_val seg = tm_lin(L, 1), mask = tm_lin(L, 7), pos = tm_lin(L, 8);
    if (check_ids(L, 1, seg, b, s, 0) || check_ids(L, 7, mask, b, s, 0) ||
        check_ids(L, 8, pos, b, s, 1))
        return c->status;
    tm_val sum = embed(L, 2, ids, hidden);
    if (pos == TM_NONE) {
        int64_t range[1] = {s};
        tm_args a;
        memset(&a, 0, sizeof a);
        a.i[0] = TM_INT64;
        a.i[1] = s;
        a.i[3] = 1;
        pos = tm_reshape(c, tm_prim(c, TM_P_RANGE, NULL, 0, &a), 1, range);
    }
    sum = tm_add(c, sum, embed(L, 3, pos, hidden));
    if (seg != TM_NONE && tm_lhas(L, 4)) sum = tm_add(c, sum, embed(L, 4, seg, hidden));
    tm_val gamma = tm_ms_input(L, 5, NORM_DTS), beta = tm_ms_input(L, 6, NORM_DTS);
    if (!tm_ctx_ok(c) || tm_ms_check_shape(L, 5, gamma, 1, hidden) ||
        tm_ms_check_shape(L, 6, beta, 1, hidden))
        return c->status;
    tm_val out[3];
    if (tm_ms_layer_norm(L, sum, gamma, beta, 2, 0, tm_attr_f(L, "epsilon", 1e-12f), out))
        return c->status;
    tm_lout(L, 0, out[0]);
    if (tm_lwants(L, 1)) {
        tm_val count;
        if (mask != TM_NONE) {
            int64_t axis = 1;
            tm_val ones = tm_binary(c, TM_P_EQ, mask, tm_const_scalar(c, TM_INT32, 1.0));
            count = tm_reduce(c, TM_P_REDUCE_SUM, tm_cast(c, ones, TM_INT32), &axis, 1, 0);
        } else {
            count = tm_const_fill(c, TM_INT32, 1, &b, 0.0);
        }
        tm_lout(L, 1, count);
    }
    if (tm_lwants(L, 2)) tm_lout(L, 2, sum);
    return c->status;
}

TM_REGISTER_OP("", "LayerNormalization", 1, 16, lower_layer_norm);
TM_REGISTER_OP("", "SimplifiedLayerNormalization", 1, 27, lower_simplified_layer_norm);
TM_REGISTER_OP("com.microsoft", "SimplifiedLayerNormalization", 1, 1, lower_simplified_layer_norm);
TM_REGISTER_OP("com.microsoft", "SkipLayerNormalization", 1, 1, lower_skip_layer_norm);
TM_REGISTER_OP("com.microsoft", "SkipSimplifiedLayerNormalization", 1, 1, lower_skip_simplified_layer_norm);
TM_REGISTER_OP("com.microsoft", "EmbedLayerNormalization", 1, 1, lower_embed_layer_norm);
