/* Convenience constructors over tm_prim (see ops.h): argument packing, numpy-style rank
 * alignment for broadcasting, axis normalisation. No kernels here. */
#include <string.h>
#include "ops.h"

int tm_norm_axis(tm_ctx *c, int64_t axis, int rank) {
    int64_t a = axis < 0 ? axis + rank : axis;
    if (a < 0 || a >= (rank > 0 ? rank : 1)) {
        tm_ctx_fail(c, TM_ERR_SHAPE, "axis %lld is out of range for rank %d", (long long)axis,
                    rank);
        return 0;
    }
    return (int)a;
}

tm_val tm_reshape(tm_ctx *c, tm_val x, int rank, const int64_t *dims) {
    if (!tm_ctx_ok(c) || x == TM_NONE) return TM_NONE;
    if (rank > TM_MAX_RANK) {
        tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "rank %d exceeds the limit of %d", rank, TM_MAX_RANK);
        return TM_NONE;
    }
    const tm_vinfo *vi = tm_vi(c, x);
    if (vi->rank == rank && (rank == 0 || !memcmp(vi->dims, dims, (size_t)rank * sizeof *dims)))
        return x;
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = rank;
    for (int i = 0; i < rank; i++) a.i[1 + i] = dims[i];
    return tm_prim(c, TM_P_RESHAPE, &x, 1, &a);
}

tm_val tm_align_rank(tm_ctx *c, tm_val x, int rank) {
    if (!tm_ctx_ok(c) || x == TM_NONE) return TM_NONE;
    int r = tm_vrank(c, x);
    if (r >= rank) return x;
    int64_t dims[TM_MAX_RANK];
    for (int i = 0; i < rank - r; i++) dims[i] = 1;
    for (int i = 0; i < r; i++) dims[rank - r + i] = tm_vdims(c, x)[i];
    return tm_reshape(c, x, rank, dims);
}

tm_val tm_unary(tm_ctx *c, int prim, tm_val x) {
    return tm_prim(c, prim, &x, 1, NULL);
}

tm_val tm_binary(tm_ctx *c, int prim, tm_val a, tm_val b) {
    if (!tm_ctx_ok(c) || a == TM_NONE || b == TM_NONE) return TM_NONE;
    int r = tm_vrank(c, a) > tm_vrank(c, b) ? tm_vrank(c, a) : tm_vrank(c, b);
    tm_val in[2] = {tm_align_rank(c, a, r), tm_align_rank(c, b, r)};
    return tm_prim(c, prim, in, 2, NULL);
}

tm_val tm_add(tm_ctx *c, tm_val a, tm_val b) { return tm_binary(c, TM_P_ADD, a, b); }
tm_val tm_sub(tm_ctx *c, tm_val a, tm_val b) { return tm_binary(c, TM_P_SUB, a, b); }
tm_val tm_mul(tm_ctx *c, tm_val a, tm_val b) { return tm_binary(c, TM_P_MUL, a, b); }
tm_val tm_div(tm_ctx *c, tm_val a, tm_val b) { return tm_binary(c, TM_P_DIV, a, b); }

tm_val tm_where(tm_ctx *c, tm_val cond, tm_val a, tm_val b) {
    if (!tm_ctx_ok(c) || cond == TM_NONE || a == TM_NONE || b == TM_NONE) return TM_NONE;
    int r = tm_vrank(c, cond);
    if (tm_vrank(c, a) > r) r = tm_vrank(c, a);
    if (tm_vrank(c, b) > r) r = tm_vrank(c, b);
    tm_val in[3] = {tm_align_rank(c, cond, r), tm_align_rank(c, a, r), tm_align_rank(c, b, r)};
    return tm_prim(c, TM_P_WHERE, in, 3, NULL);
}

tm_val tm_cast_exact(tm_ctx *c, tm_val x, tm_dtype to) {
    if (!tm_ctx_ok(c) || x == TM_NONE) return TM_NONE;
    if (tm_vdtype(c, x) == to) return x;
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = to;
    a.i[1] = 1;
    return tm_prim(c, TM_P_CAST, &x, 1, &a);
}

tm_val tm_to_compute_type(tm_ctx *c, tm_val x) {
    if (!tm_ctx_ok(c) || x == TM_NONE || c->compute_type != TM_FLOAT) return x;
    return tm_is_half(tm_vdtype(c, x)) ? tm_cast_exact(c, x, TM_FLOAT) : x;
}

tm_val tm_cast_sat(tm_ctx *c, tm_val x, tm_dtype to, int saturate) {
    if (!tm_ctx_ok(c) || x == TM_NONE) return TM_NONE;
    /* Half precision runs in f32 when asked (compute_type): casts to it stay f32. */
    if (c->compute_type == TM_FLOAT && tm_is_half(to)) to = TM_FLOAT;
    if (tm_vdtype(c, x) == to) return x;
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = to;
    a.i[1] = saturate;
    return tm_prim(c, TM_P_CAST, &x, 1, &a);
}

tm_val tm_cast(tm_ctx *c, tm_val x, tm_dtype to) { return tm_cast_sat(c, x, to, 1); }

tm_val tm_scalar_like(tm_ctx *c, tm_val x, double v) {
    if (!tm_ctx_ok(c) || x == TM_NONE) return TM_NONE;
    return tm_const_scalar(c, tm_vdtype(c, x), v);
}

tm_val tm_transpose(tm_ctx *c, tm_val x, const int64_t *perm) {
    if (!tm_ctx_ok(c) || x == TM_NONE) return TM_NONE;
    int r = tm_vrank(c, x), identity = 1;
    tm_args a;
    memset(&a, 0, sizeof a);
    for (int i = 0; i < r; i++) {
        a.i[i] = perm[i];
        if (perm[i] != i) identity = 0;
    }
    if (identity) return x;
    return tm_prim(c, TM_P_TRANSPOSE, &x, 1, &a);
}

tm_val tm_slice(tm_ctx *c, tm_val x, const int64_t *starts, const int64_t *steps,
                const int64_t *counts) {
    if (!tm_ctx_ok(c) || x == TM_NONE) return TM_NONE;
    int r = tm_vrank(c, x), identity = 1;
    tm_args a;
    memset(&a, 0, sizeof a);
    for (int d = 0; d < r; d++) {
        a.i[3 * d] = starts[d];
        a.i[3 * d + 1] = steps[d];
        a.i[3 * d + 2] = counts[d];
        if (starts[d] != 0 || steps[d] != 1 || counts[d] != tm_vdims(c, x)[d]) identity = 0;
    }
    if (identity) return x;
    return tm_prim(c, TM_P_SLICE, &x, 1, &a);
}

tm_val tm_slice_axis(tm_ctx *c, tm_val x, int axis, int64_t start, int64_t count) {
    if (!tm_ctx_ok(c) || x == TM_NONE) return TM_NONE;
    int64_t st[TM_MAX_RANK], sp[TM_MAX_RANK], cn[TM_MAX_RANK];
    for (int d = 0; d < tm_vrank(c, x); d++) {
        st[d] = 0;
        sp[d] = 1;
        cn[d] = tm_vdims(c, x)[d];
    }
    st[axis] = start;
    cn[axis] = count;
    return tm_slice(c, x, st, sp, cn);
}

tm_val tm_concat(tm_ctx *c, const tm_val *xs, int n, int axis) {
    if (!tm_ctx_ok(c)) return TM_NONE;
    if (n == 1) return xs[0];
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = axis;
    return tm_prim(c, TM_P_CONCAT, xs, n, &a);
}

tm_val tm_expand(tm_ctx *c, tm_val x, int rank, const int64_t *dims) {
    if (!tm_ctx_ok(c) || x == TM_NONE) return TM_NONE;
    int r = 0;
    int64_t out[TM_MAX_RANK];
    if (rank > TM_MAX_RANK) {
        tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "rank %d exceeds the limit of %d", rank, TM_MAX_RANK);
        return TM_NONE;
    }
    if (tm_broadcast_dims(c, tm_vrank(c, x), tm_vdims(c, x), rank, dims, &r, out) != TM_OK)
        return TM_NONE;
    x = tm_align_rank(c, x, r);
    if (!memcmp(tm_vdims(c, x), out, (size_t)r * sizeof *out)) return x;
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = r;
    for (int i = 0; i < r; i++) a.i[1 + i] = out[i];
    return tm_prim(c, TM_P_EXPAND, &x, 1, &a);
}

tm_val tm_gather(tm_ctx *c, tm_val data, tm_val indices, int axis) {
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = axis;
    tm_val in[2] = {data, indices};
    return tm_prim(c, TM_P_GATHER, in, 2, &a);
}

tm_val tm_pad(tm_ctx *c, tm_val x, int mode, const int64_t *begin, const int64_t *end,
              double value) {
    if (!tm_ctx_ok(c) || x == TM_NONE) return TM_NONE;
    int r = tm_vrank(c, x);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = mode;
    a.f[0] = value;
    for (int d = 0; d < r; d++) {
        a.i[1 + d] = begin[d];
        a.i[1 + r + d] = end[d];
    }
    return tm_prim(c, TM_P_PAD, &x, 1, &a);
}

tm_val tm_copy(tm_ctx *c, tm_val x) { return tm_prim(c, TM_P_COPY, &x, 1, NULL); }

tm_val tm_unsqueeze(tm_ctx *c, tm_val x, const int64_t *axes, int n) {
    if (!tm_ctx_ok(c) || x == TM_NONE) return TM_NONE;
    int r = tm_vrank(c, x) + n;
    if (r > TM_MAX_RANK) {
        tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "rank %d exceeds the limit of %d", r, TM_MAX_RANK);
        return TM_NONE;
    }
    int is_new[TM_MAX_RANK] = {0};
    for (int i = 0; i < n; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + r : axes[i];
        if (a < 0 || a >= r || is_new[a]) {
            tm_ctx_fail(c, TM_ERR_SHAPE, "unsqueeze axis %lld is invalid for output rank %d",
                        (long long)axes[i], r);
            return TM_NONE;
        }
        is_new[a] = 1;
    }
    int64_t dims[TM_MAX_RANK];
    for (int d = 0, j = 0; d < r; d++) dims[d] = is_new[d] ? 1 : tm_vdims(c, x)[j++];
    return tm_reshape(c, x, r, dims);
}

tm_val tm_squeeze(tm_ctx *c, tm_val x, const int64_t *axes, int n) {
    if (!tm_ctx_ok(c) || x == TM_NONE) return TM_NONE;
    int r = tm_vrank(c, x);
    int drop[TM_MAX_RANK] = {0};
    for (int i = 0; i < n; i++) {
        int a = tm_norm_axis(c, axes[i], r);
        if (!tm_ctx_ok(c)) return TM_NONE;
        if (tm_vdims(c, x)[a] != 1) {
            tm_ctx_fail(c, TM_ERR_SHAPE, "cannot squeeze axis %d of size %lld", a,
                        (long long)tm_vdims(c, x)[a]);
            return TM_NONE;
        }
        drop[a] = 1;
    }
    int64_t dims[TM_MAX_RANK];
    int k = 0;
    for (int d = 0; d < r; d++)
        if (!drop[d]) dims[k++] = tm_vdims(c, x)[d];
    return tm_reshape(c, x, k, dims);
}

tm_val tm_reduce(tm_ctx *c, int prim, tm_val x, const int64_t *axes, int n, int keepdims) {
    if (!tm_ctx_ok(c) || x == TM_NONE) return TM_NONE;
    int r = tm_vrank(c, x);
    int64_t mask = 0;
    if (n == 0) mask = r ? ((int64_t)1 << r) - 1 : 0;
    for (int i = 0; i < n; i++) {
        int a = tm_norm_axis(c, axes[i], r);
        if (!tm_ctx_ok(c)) return TM_NONE;
        mask |= (int64_t)1 << a;
    }
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = mask;
    tm_val y = tm_prim(c, prim, &x, 1, &a);
    if (keepdims || y == TM_NONE) return y;
    int64_t dims[TM_MAX_RANK];
    int k = 0;
    for (int d = 0; d < r; d++)
        if (!(mask & ((int64_t)1 << d))) dims[k++] = tm_vdims(c, x)[d];
    return tm_reshape(c, y, k, dims);
}

tm_val tm_matmul(tm_ctx *c, tm_val a, tm_val b) {
    if (!tm_ctx_ok(c) || a == TM_NONE || b == TM_NONE) return TM_NONE;
    int ra = tm_vrank(c, a), rb = tm_vrank(c, b);
    if (ra == 0 || rb == 0) {
        tm_ctx_fail(c, TM_ERR_SHAPE, "matmul of a scalar");
        return TM_NONE;
    }
    int squeeze_a = 0, squeeze_b = 0;
    if (ra == 1) {
        int64_t d[2] = {1, tm_vdims(c, a)[0]};
        a = tm_reshape(c, a, 2, d);
        ra = 2;
        squeeze_a = 1;
    }
    if (rb == 1) {
        int64_t d[2] = {tm_vdims(c, b)[0], 1};
        b = tm_reshape(c, b, 2, d);
        rb = 2;
        squeeze_b = 1;
    }
    /* Align batch dims: pad the shorter operand with leading 1s. */
    int r = ra > rb ? ra : rb;
    a = tm_align_rank(c, a, r);
    b = tm_align_rank(c, b, r);
    tm_val in[2] = {a, b};
    tm_val y = tm_prim(c, TM_P_MATMUL, in, 2, NULL);
    if (y == TM_NONE || (!squeeze_a && !squeeze_b)) return y;
    int64_t dims[TM_MAX_RANK];
    int k = 0;
    for (int d = 0; d < r - 2; d++) dims[k++] = tm_vdims(c, y)[d];
    if (!squeeze_a) dims[k++] = tm_vdims(c, y)[r - 2];
    if (!squeeze_b) dims[k++] = tm_vdims(c, y)[r - 1];
    return tm_reshape(c, y, k, dims);
}

tm_val tm_softmax(tm_ctx *c, tm_val x, int axis, int log) {
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = axis;
    a.i[1] = log;
    return tm_prim(c, TM_P_SOFTMAX, &x, 1, &a);
}
