/* Gradient rules of the linalg family (rows in linalg.def). Matrix products: the
 * cotangent times the other operand transposed, summed over broadcast batch dims (a
 * weight shared by a batch folds the batch into one product). Convolutions: the input's
 * cotangent is the transposed convolution with the same weights (and the other way
 * round), the weights' is a convolution of the input by the output's cotangent with
 * stride and dilation swapped, bias sums. Pooling: max pools scatter-add into the argmax
 * of each window, average and Lp pools run their window sums backwards as a depthwise
 * transposed convolution of ones. Not the kernels (linalg.c). */
#include <string.h>
#include "../autodiff.h"

static tm_val bin(tm_ctx *c, int prim, tm_val a, tm_val b) { return tm_binary(c, prim, a, b); }

/* ---- MATMUL ---------------------------------------------------------------------- */

static int batch_is_one(const tm_ctx *c, tm_val x) {
    int r = tm_vrank(c, x);
    for (int d = 0; d < r - 2; d++)
        if (tm_vdims(c, x)[d] != 1) return 0;
    return 1;
}

static tm_val mm(tm_ctx *c, tm_val a, tm_val b, int ta, int tb) {
    return tm_grad_matmul(c, a, b, ta, tb);
}

/* Up to this many rows, a's cotangent by a weight is computed flipped (below). */
#define FLIP_MAX_ROWS 256

/* y = op(a) op(b) [+ bias], op transposing the operands the forward flagged. The
 * cotangents: op(a) gets gy op(b)^T and op(b) gets op(a)^T gy, each transposed back when
 * its operand was stored transposed, and summed over the batch dims that operand
 * broadcast; the bias gets gy summed over every row. */
tm_status tm__grad_matmul(tm_ctx *c, const tm_grad_call *g) {
    tm_val a = g->in[0], b = g->in[1], gy = g->gout[0];
    int ta = g->a->i[0] != 0, tb = g->a->i[1] != 0, r = tm_vrank(c, a);
    if (g->a->i[2]) {   /* the output stored transposed (two matrices): its cotangent too */
        static const int64_t swap[2] = {1, 0};
        gy = tm_transpose(c, gy, swap);
    }
    int64_t da[TM_MAX_RANK], db[TM_MAX_RANK];
    memcpy(da, tm_vdims(c, a), sizeof da);
    memcpy(db, tm_vdims(c, b), sizeof db);
    if (g->want[0]) {
        const int64_t *dy = tm_vdims(c, gy);
        int64_t rows = tm_numel(r - 1, dy), n = dy[r - 1], k = da[r - 1];
        if (!ta && !tb && batch_is_one(c, b) && rows < k && rows <= FLIP_MAX_ROWS &&
            tm_vdtype(c, a) == TM_FLOAT) {
            /* gy b^T computed as (b gy^T)^T: the GEMM packs its right operand, and gy^T
             * (rows x N) is then smaller than b^T (K x N), which a product of few rows
             * by a weight would otherwise repack transposed on every run; the product
             * writes its result transposed, rows x K (MATMUL's i[2]), each tile as runs
             * along the rows. With more rows the packing is paid for (measured: a quarter
             * faster at 128 rows, slower at 512, then with a TRANSPOSE after the product;
             * written transposed, MiniLM's gradient step at 1 x 128 takes 5% less time on
             * two threads, about the same on one, where the transposed stores add some
             * 5% to these products). */
            tm_val g2 = tm_reshape(c, gy, 2, (int64_t[2]){rows, n});
            tm_val b2 = tm_reshape(c, b, 2, (int64_t[2]){k, n});
            tm_args args;
            memset(&args, 0, sizeof args);
            args.i[1] = 1;
            args.i[2] = 1;
            tm_val ga = tm_prim(c, TM_P_MATMUL, (tm_val[2]){b2, g2}, 2, &args);
            g->gin[0] = tm_reshape(c, ga, r, da);
        } else {
            tm_val ga = ta ? mm(c, b, gy, tb, 1) : mm(c, gy, b, 0, !tb);
            g->gin[0] = tm_grad_sum_to(c, ga, r, da);
        }
    }
    if (g->nin == 3 && g->want[2]) {
        int64_t dn[1] = {tm_vdims(c, g->in[2])[0]};   /* a copy: new values move c->vals */
        g->gin[2] = tm_grad_sum_to(c, gy, 1, dn);
    }
    if (g->want[1]) {
        const int64_t *dy = tm_vdims(c, gy);
        int64_t m = dy[r - 2], n = dy[r - 1], k = da[r - 1 - ta], batch = tm_numel(r - 2, dy);
        if (!ta && batch > 1 && batch_is_one(c, b)) {
            /* A weight shared by the batch: one product whose inner dimension runs over
             * the batch too, (batch M, K)^T (batch M, N), not one per batch and a sum. */
            tm_val a2 = tm_reshape(c, a, 2, (int64_t[2]){batch * m, k});
            tm_val g2 = tm_reshape(c, gy, 2, (int64_t[2]){batch * m, n});
            tm_val gb = tb ? mm(c, g2, a2, 1, 0) : mm(c, a2, g2, 1, 0);
            g->gin[1] = tm_reshape(c, gb, r, db);
        } else {
            tm_val gb = tb ? mm(c, gy, a, 1, ta) : mm(c, a, gy, !ta, 0);
            g->gin[1] = tm_grad_sum_to(c, gb, r, db);
        }
    }
    return c->status;
}

/* ---- Convolutions ---------------------------------------------------------------- */

typedef struct conv_spec {
    int n;
    int64_t group;
    int64_t stride[TM_MAX_RANK], pad_begin[TM_MAX_RANK], pad_end[TM_MAX_RANK];
    int64_t dilation[TM_MAX_RANK], out_pad[TM_MAX_RANK];
} conv_spec;

static conv_spec conv_spec_of(const tm_args *a, int transpose) {
    conv_spec s;
    memset(&s, 0, sizeof s);
    s.n = (int)a->i[0];
    s.group = a->i[1];
    for (int d = 0; d < s.n; d++) {
        s.stride[d] = a->i[2 + d];
        s.pad_begin[d] = a->i[2 + s.n + d];
        s.pad_end[d] = a->i[2 + 2 * s.n + d];
        s.dilation[d] = a->i[2 + 3 * s.n + d];
        s.out_pad[d] = transpose ? a->i[2 + 4 * s.n + d] : 0;
    }
    return s;
}

static tm_val conv_call(tm_ctx *c, int transpose, tm_val x, tm_val w, const conv_spec *s) {
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = s->n;
    a.i[1] = s->group;
    for (int d = 0; d < s->n; d++) {
        a.i[2 + d] = s->stride[d];
        a.i[2 + s->n + d] = s->pad_begin[d];
        a.i[2 + 2 * s->n + d] = s->pad_end[d];
        a.i[2 + 3 * s->n + d] = s->dilation[d];
        if (transpose) a.i[2 + 4 * s->n + d] = s->out_pad[d];
    }
    return tm_prim(c, transpose ? TM_P_CONV_TRANSPOSE : TM_P_CONV, (tm_val[2]){x, w}, 2, &a);
}

/* The first `want` positions of every spatial axis of y (N, C, S...). */
static tm_val crop_spatial(tm_ctx *c, tm_val y, int n, const int64_t *want) {
    int64_t st[TM_MAX_RANK] = {0}, sp[TM_MAX_RANK], cn[TM_MAX_RANK];
    for (int d = 0; d < n + 2; d++) {
        sp[d] = 1;
        cn[d] = d < 2 ? tm_vdims(c, y)[d] : want[d - 2];
    }
    return tm_slice(c, y, st, sp, cn);
}

/* (N, G*P, S...) -> (P, G*N, S...): channel block p of group j becomes batch p, channel
 * j*N + n. This turns a weight gradient into a grouped convolution over the batch. */
static tm_val batch_to_channels(tm_ctx *c, tm_val x, int64_t group) {
    int r = tm_vrank(c, x), n = r - 2;
    const int64_t *dx = tm_vdims(c, x);
    int64_t batch = dx[0], per = dx[1] / group;
    if (group == 1) {
        int64_t perm[TM_MAX_RANK] = {1, 0};
        for (int d = 2; d < r; d++) perm[d] = d;
        return tm_transpose(c, x, perm);
    }
    if (r + 1 > TM_MAX_RANK) {
        tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "grouped convolution gradient of spatial rank %d "
                    "exceeds the rank limit", n);
        return TM_NONE;
    }
    int64_t d5[TM_MAX_RANK] = {batch, group, per}, perm[TM_MAX_RANK] = {2, 1, 0};
    for (int d = 0; d < n; d++) {
        d5[3 + d] = dx[2 + d];
        perm[3 + d] = 3 + d;
    }
    tm_val t = tm_transpose(c, tm_reshape(c, x, r + 1, d5), perm);
    int64_t out[TM_MAX_RANK] = {per, group * batch};
    for (int d = 0; d < n; d++) out[2 + d] = dx[2 + d];
    return tm_reshape(c, t, r, out);
}

/* (N, G*P, S...) -> (G*P, N, S...): the output's cotangent as the kernel of that
 * convolution. */
static tm_val swap_batch_channels(tm_ctx *c, tm_val x) {
    int r = tm_vrank(c, x);
    int64_t perm[TM_MAX_RANK] = {1, 0};
    for (int d = 2; d < r; d++) perm[d] = d;
    return tm_transpose(c, x, perm);
}

/* dL/dw of y = conv(x, w) (transpose 0) or conv_transpose(x, w) (transpose 1). */
static tm_val conv_weight_grad(tm_ctx *c, int transpose, tm_val x, tm_val w, tm_val gy,
                               const conv_spec *s) {
    conv_spec t = *s;
    for (int d = 0; d < s->n; d++) {
        t.stride[d] = s->dilation[d];
        t.dilation[d] = s->stride[d];
        t.out_pad[d] = 0;
    }
    /* conv: input x (arranged per group), kernel gy; transpose: the other way round. */
    tm_val input = transpose ? gy : x, kernel = transpose ? x : gy;
    tm_val r = conv_call(c, 0, batch_to_channels(c, input, s->group),
                         swap_batch_channels(c, kernel), &t);
    int64_t k[TM_MAX_RANK];
    for (int d = 0; d < s->n; d++) k[d] = tm_vdims(c, w)[2 + d];
    r = crop_spatial(c, r, s->n, k);  /* (P, Q, K...) */
    return swap_batch_channels(c, r);
}

static tm_val bias_grad(tm_ctx *c, tm_val gy, tm_val bias) {
    int r = tm_vrank(c, gy);
    int64_t mask = 1;
    for (int d = 2; d < r; d++) mask |= (int64_t)1 << d;
    int64_t dims[1] = {tm_vdims(c, bias)[0]};
    return tm_reshape(c, tm_grad_reduce_sum(c, gy, mask), 1, dims);
}

tm_status tm__grad_conv(tm_ctx *c, const tm_grad_call *g) {
    tm_val x = g->in[0], w = g->in[1], gy = g->gout[0];
    conv_spec s = conv_spec_of(g->a, 0);
    if (g->want[0]) {
        /* conv_transpose with the same geometry maps back onto x, up to the remainder the
         * forward's floor dropped, which output_padding restores. */
        conv_spec t = s;
        for (int d = 0; d < s.n; d++) {
            int64_t extent = (tm_vdims(c, w)[2 + d] - 1) * s.dilation[d] + 1;
            int64_t span = tm_vdims(c, x)[2 + d] + s.pad_begin[d] + s.pad_end[d] - extent;
            t.out_pad[d] = span % s.stride[d];
        }
        g->gin[0] = conv_call(c, 1, gy, w, &t);
    }
    if (g->want[1]) g->gin[1] = conv_weight_grad(c, 0, x, w, gy, &s);
    if (g->nin > 2 && g->want[2]) g->gin[2] = bias_grad(c, gy, g->in[2]);
    return c->status;
}

tm_status tm__grad_conv_transpose(tm_ctx *c, const tm_grad_call *g) {
    tm_val x = g->in[0], w = g->in[1], gy = g->gout[0];
    conv_spec s = conv_spec_of(g->a, 1);
    if (g->want[0]) {
        conv_spec t = s;
        for (int d = 0; d < s.n; d++) t.out_pad[d] = 0;
        tm_val gx = conv_call(c, 0, gy, w, &t);
        int64_t want[TM_MAX_RANK];
        for (int d = 0; d < s.n; d++) want[d] = tm_vdims(c, x)[2 + d];
        g->gin[0] = crop_spatial(c, gx, s.n, want);
    }
    if (g->want[1]) g->gin[1] = conv_weight_grad(c, 1, x, w, gy, &s);
    if (g->nin > 2 && g->want[2]) g->gin[2] = bias_grad(c, gy, g->in[2]);
    return c->status;
}

/* ---- Pooling --------------------------------------------------------------------- */

typedef struct pool_spec {
    int n, kind, count_include_pad;
    int64_t p;
    int64_t kernel[TM_MAX_RANK], stride[TM_MAX_RANK], pad_begin[TM_MAX_RANK];
    int64_t pad_end[TM_MAX_RANK], dilation[TM_MAX_RANK];
} pool_spec;

static pool_spec pool_spec_of(const tm_args *a) {
    pool_spec s;
    memset(&s, 0, sizeof s);
    s.n = (int)a->i[0];
    s.kind = (int)a->i[1];
    s.count_include_pad = a->i[2] != 0;
    s.p = a->i[4];
    for (int d = 0; d < s.n; d++) {
        s.kernel[d] = a->i[5 + d];
        s.stride[d] = a->i[5 + s.n + d];
        s.pad_begin[d] = a->i[5 + 2 * s.n + d];
        s.pad_end[d] = a->i[5 + 3 * s.n + d];
        s.dilation[d] = a->i[5 + 4 * s.n + d];
    }
    return s;
}

/* Max pools: every output's cotangent goes to the input element its window picked
 * (row-major flat indices from MAXPOOL_INDICES; -1, an empty window, gets nothing). */
static tm_val max_pool_grad(tm_ctx *c, const tm_args *args, tm_val x, tm_val indices,
                            tm_val gy) {
    if (indices == TM_NONE) {
        tm_args a = *args;
        a.i[1] = 0;
        a.i[5 + 5 * a.i[0]] = 0;  /* row-major */
        tm_val out[2];
        if (tm_prim_n(c, TM_P_MAXPOOL_INDICES, &x, 1, &a, out, 2) != TM_OK) return TM_NONE;
        indices = out[1];
    }
    int64_t n_out = tm_vnumel(c, gy), n_in = tm_vnumel(c, x);
    tm_val idx = tm_reshape(c, indices, 1, &n_out);
    tm_val upd = tm_reshape(c, gy, 1, &n_out);
    tm_val valid = bin(c, TM_P_GE, idx, tm_grad_scalar(c, idx, 0.0));
    idx = tm_where(c, valid, idx, tm_grad_scalar(c, idx, 0.0));
    upd = tm_where(c, valid, upd, tm_grad_scalar(c, upd, 0.0));
    tm_val zeros = tm_const_fill(c, tm_vdtype(c, gy), 1, &n_in, 0.0);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[1] = 1;  /* add: overlapping windows may pick one element twice */
    tm_val flat = tm_prim(c, TM_P_SCATTER_ELEMENTS, (tm_val[3]){zeros, idx, upd}, 3, &a);
    int64_t dims[TM_MAX_RANK];
    memcpy(dims, tm_vdims(c, x), sizeof dims);
    return tm_reshape(c, flat, tm_vrank(c, x), dims);
}

/* Average and Lp pools: the adjoint of the window sum, divided per window by `divisor`
 * (a value broadcasting over the output, or TM_NONE for 1). The sum is a depthwise
 * convolution with a kernel of ones, whose adjoint is the transposed convolution. A
 * ceil_mode window overhanging the end becomes extra end padding. */
static tm_val window_sum_adjoint(tm_ctx *c, const pool_spec *s, tm_val x, tm_val gy,
                                 int with_counts, int include_pad) {
    const int64_t *dx = tm_vdims(c, x), *dy = tm_vdims(c, gy);
    int r = tm_vrank(c, x);
    conv_spec t;
    memset(&t, 0, sizeof t);
    t.n = s->n;
    int64_t extra[TM_MAX_RANK];
    for (int d = 0; d < s->n; d++) {
        int64_t extent = (s->kernel[d] - 1) * s->dilation[d] + 1;
        int64_t reach = (dy[2 + d] - 1) * s->stride[d] + extent;
        int64_t padded = dx[2 + d] + s->pad_begin[d] + s->pad_end[d];
        extra[d] = reach > padded ? reach - padded : 0;
        t.stride[d] = s->stride[d];
        t.dilation[d] = s->dilation[d];
        t.pad_begin[d] = s->pad_begin[d];
        t.pad_end[d] = s->pad_end[d] + extra[d];
        t.out_pad[d] = dx[2 + d] + t.pad_begin[d] + t.pad_end[d] - reach;
    }
    tm_dtype dt = tm_vdtype(c, x);
    if (with_counts) {
        /* How many positions each window divides by: the ones it covers inside the input
         * (count_include_pad 0) or inside the padded input. Folded when the plan is made. */
        int64_t img[TM_MAX_RANK] = {1, 1}, ker[TM_MAX_RANK] = {1, 1};
        conv_spec cs = t;
        cs.group = 1;
        for (int d = 0; d < s->n; d++) {
            img[2 + d] = dx[2 + d] + (include_pad ? s->pad_begin[d] + s->pad_end[d] : 0);
            ker[2 + d] = s->kernel[d];
            if (include_pad) {
                cs.pad_begin[d] = 0;
                cs.pad_end[d] = extra[d];
            }
        }
        tm_val counts = conv_call(c, 0, tm_const_fill(c, dt, r, img, 1.0),
                                  tm_const_fill(c, dt, r, ker, 1.0), &cs);
        gy = bin(c, TM_P_DIV, gy, counts);
    }
    int64_t ones_dims[TM_MAX_RANK] = {dx[1], 1};
    for (int d = 0; d < s->n; d++) ones_dims[2 + d] = s->kernel[d];
    t.group = dx[1];
    return conv_call(c, 1, gy, tm_const_fill(c, dt, r, ones_dims, 1.0), &t);
}

tm_status tm__grad_pool(tm_ctx *c, const tm_grad_call *g) {
    tm_val x = g->in[0], y = g->out[0], gy = g->gout[0];
    if (g->nout > 1 && g->gout[1] != TM_NONE) return TM_GRAD_NO_RULE;
    if (gy == TM_NONE) return c->status;
    pool_spec s = pool_spec_of(g->a);
    if (g->prim == TM_P_MAXPOOL_INDICES) {
        int column_major = g->a->i[5 + 5 * s.n] == 1;
        g->gin[0] = max_pool_grad(c, g->a, x, column_major ? TM_NONE : g->out[1], gy);
        return c->status;
    }
    if (s.kind == 0) {
        g->gin[0] = max_pool_grad(c, g->a, x, TM_NONE, gy);
    } else if (s.kind == 1) {
        g->gin[0] = window_sum_adjoint(c, &s, x, gy, 1, s.count_include_pad);
    } else {
        /* y = (sum |x|^p)^(1/p): dy/dx = sign(x) |x|^(p-1) y^(1-p). */
        double p = (double)s.p;
        tm_val scaled = bin(c, TM_P_MUL, gy, bin(c, TM_P_POW, y, tm_grad_scalar(c, y, 1.0 - p)));
        tm_val back = window_sum_adjoint(c, &s, x, scaled, 0, 0);
        tm_val local = bin(c, TM_P_MUL, tm_unary(c, TM_P_SIGN, x),
                           bin(c, TM_P_POW, tm_unary(c, TM_P_ABS, x), tm_grad_scalar(c, x, p - 1.0)));
        g->gin[0] = bin(c, TM_P_MUL, back, local);
    }
    return c->status;
}
