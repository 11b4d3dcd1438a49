/* Gradient rules of the movement family (rows in movement.def): each is the adjoint of
 * where elements went. Reshape, transpose and concat undo themselves; slice and pad put
 * the cotangent back (zero-padding, or a scatter-add where elements were read more than
 * once); expand sums over what it broadcast; gathers scatter-add into zeros; scatters
 * without a reduction, or adding, split the cotangent between data and updates. Indices
 * are integers and get none. Kept apart from movement.c, which holds kernels. */
#include <string.h>
#include "../autodiff.h"

static void dims_of(const tm_ctx *c, tm_val v, int *rank, int64_t *dims) {
    *rank = tm_vrank(c, v);
    memcpy(dims, tm_vdims(c, v), sizeof(int64_t) * TM_MAX_RANK);
}

tm_status tm__grad_reshape(tm_ctx *c, const tm_grad_call *g) {
    int r;
    int64_t d[TM_MAX_RANK];
    dims_of(c, g->in[0], &r, d);
    g->gin[0] = tm_reshape(c, g->gout[0], r, d);
    return c->status;
}

tm_status tm__grad_copy(tm_ctx *c, const tm_grad_call *g) {
    g->gin[0] = g->gout[0];
    return c->status;
}

tm_status tm__grad_transpose(tm_ctx *c, const tm_grad_call *g) {
    int64_t inverse[TM_MAX_RANK];
    int r = tm_vrank(c, g->in[0]);
    for (int d = 0; d < r; d++) inverse[g->a->i[d]] = d;
    g->gin[0] = tm_transpose(c, g->gout[0], inverse);
    return c->status;
}

/* 0, step, 2 step, ... (count of them) plus start: the positions a strided slice read. */
static tm_val positions(tm_ctx *c, int64_t start, int64_t step, int64_t count) {
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = TM_INT64;
    a.i[1] = count;
    a.i[2] = start;
    a.i[3] = step;
    return tm_prim(c, TM_P_RANGE, NULL, 0, &a);
}

tm_status tm__grad_slice(tm_ctx *c, const tm_grad_call *g) {
    int r;
    int64_t size[TM_MAX_RANK], start[TM_MAX_RANK], step[TM_MAX_RANK], count[TM_MAX_RANK];
    dims_of(c, g->in[0], &r, size);
    tm_val y = g->gout[0];
    int reversed = 0;
    for (int d = 0; d < r; d++) {
        start[d] = g->a->i[3 * d];
        step[d] = g->a->i[3 * d + 1];
        count[d] = g->a->i[3 * d + 2];
        if (step[d] < 0 && count[d] > 0) reversed = 1;
    }
    if (reversed) {
        /* Reverse the axes read backwards: they then start at their lowest position. */
        int64_t st[TM_MAX_RANK], sp[TM_MAX_RANK];
        for (int d = 0; d < r; d++) {
            int back = step[d] < 0 && count[d] > 0;
            st[d] = back ? count[d] - 1 : 0;
            sp[d] = back ? -1 : 1;
            if (back) {
                start[d] += (count[d] - 1) * step[d];
                step[d] = -step[d];
            }
        }
        y = tm_slice(c, y, st, sp, count);
    }
    /* Strided axes: a scatter-add one axis at a time; unit steps: one zero padding. */
    int64_t cur[TM_MAX_RANK];
    memcpy(cur, count, sizeof cur);
    for (int d = 0; d < r; d++) {
        if (step[d] == 1 || count[d] <= 1) continue;
        cur[d] = size[d];
        y = tm_grad_scatter_add(c, y, positions(c, start[d], step[d], count[d]), d, r, cur);
        start[d] = 0;
        count[d] = size[d];
    }
    int64_t begin[TM_MAX_RANK], end[TM_MAX_RANK];
    int padded = 0;
    for (int d = 0; d < r; d++) {
        begin[d] = count[d] ? start[d] : 0;
        end[d] = size[d] - begin[d] - count[d];
        padded |= begin[d] != 0 || end[d] != 0;
    }
    g->gin[0] = padded ? tm_pad(c, y, 0, begin, end, 0.0) : y;
    return c->status;
}

tm_status tm__grad_pad(tm_ctx *c, const tm_grad_call *g) {
    int r;
    int64_t size[TM_MAX_RANK];
    dims_of(c, g->in[0], &r, size);
    const tm_args *a = g->a;
    int64_t mode = a->i[0];
    tm_val y = g->gout[0];
    if (mode == 0) {
        /* Constant: the kept block is read back; cropped elements get zero. */
        int64_t st[TM_MAX_RANK], sp[TM_MAX_RANK], cn[TM_MAX_RANK];
        int64_t begin[TM_MAX_RANK], end[TM_MAX_RANK];
        for (int d = 0; d < r; d++) {
            int64_t b = a->i[1 + d], e = a->i[1 + r + d];
            int64_t crop_begin = b < 0 ? -b : 0, crop_end = e < 0 ? -e : 0;
            st[d] = b > 0 ? b : 0;
            sp[d] = 1;
            cn[d] = size[d] - crop_begin - crop_end;
            begin[d] = crop_begin;
            end[d] = crop_end;
            if (cn[d] == 0) st[d] = 0;
        }
        y = tm_slice(c, y, st, sp, cn);
        g->gin[0] = tm_pad(c, y, 0, begin, end, 0.0);
        return c->status;
    }
    /* Edge, reflect, wrap: each output position copies one input position. Padding the
     * positions 0..size-1 themselves with the same mode tells which (the kernel's own
     * rule, folded while the plan is made), and the cotangent is scatter-added there. */
    int64_t cur[TM_MAX_RANK];
    memcpy(cur, tm_vdims(c, y), sizeof cur);
    for (int d = r - 1; d >= 0; d--) {
        int64_t b = a->i[1 + d], e = a->i[1 + r + d];
        if (b == 0 && e == 0) continue;
        tm_val iota = positions(c, 0, 1, size[d]);
        int64_t pb[1] = {b}, pe[1] = {e};
        tm_val source = tm_pad(c, iota, (int)mode, pb, pe, -1.0);
        cur[d] = size[d];
        y = tm_grad_scatter_add(c, y, source, d, r, cur);
    }
    g->gin[0] = y;
    return c->status;
}

tm_status tm__grad_concat(tm_ctx *c, const tm_grad_call *g) {
    int axis = (int)g->a->i[0];
    int64_t offset = 0;
    for (int i = 0; i < g->nin; i++) {
        int64_t n = tm_vdims(c, g->in[i])[axis];
        if (g->want[i]) g->gin[i] = tm_slice_axis(c, g->gout[0], axis, offset, n);
        offset += n;
    }
    return c->status;
}

tm_status tm__grad_expand(tm_ctx *c, const tm_grad_call *g) {
    g->gin[0] = tm_grad_sum_like(c, g->gout[0], g->in[0]);
    return c->status;
}

tm_status tm__grad_gather(tm_ctx *c, const tm_grad_call *g) {
    int r;
    int64_t d[TM_MAX_RANK];
    dims_of(c, g->in[0], &r, d);
    int axis = (int)(g->a->i[0] < 0 ? g->a->i[0] + r : g->a->i[0]);
    g->gin[0] = tm_grad_scatter_add(c, g->gout[0], g->in[1], axis, r, d);
    return c->status;
}

static tm_val scatter_elements(tm_ctx *c, tm_val data, tm_val indices, tm_val updates,
                               int64_t axis, int64_t reduction) {
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = axis;
    a.i[1] = reduction;
    return tm_prim(c, TM_P_SCATTER_ELEMENTS, (tm_val[3]){data, indices, updates}, 3, &a);
}

static tm_val gather_elements(tm_ctx *c, tm_val data, tm_val indices, int64_t axis) {
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = axis;
    return tm_prim(c, TM_P_GATHER_ELEMENTS, (tm_val[2]){data, indices}, 2, &a);
}

tm_status tm__grad_gather_elements(tm_ctx *c, const tm_grad_call *g) {
    g->gin[0] = scatter_elements(c, tm_grad_zeros_like(c, g->in[0]), g->in[1], g->gout[0],
                                 g->a->i[0], 1);
    return c->status;
}

/* GATHER_ND with batch_dims b reads data[batch..., indices[batch..., j, :]]: prefixing
 * each index tuple with its batch coordinates makes it a plain (b = 0) index. */
static tm_val full_nd_indices(tm_ctx *c, tm_val indices, int b) {
    if (b == 0) return indices;
    int q = tm_vrank(c, indices);
    int64_t tuple_dims[TM_MAX_RANK];
    memcpy(tuple_dims, tm_vdims(c, indices), sizeof tuple_dims);
    tuple_dims[q - 1] = 1;
    tm_val parts[TM_MAX_RANK + 1];
    for (int j = 0; j < b; j++) {
        int64_t shape[TM_MAX_RANK];
        for (int d = 0; d < q; d++) shape[d] = d == j ? tuple_dims[j] : 1;
        tm_val coord = tm_reshape(c, positions(c, 0, 1, tuple_dims[j]), q, shape);
        parts[j] = tm_expand(c, coord, q, tuple_dims);
    }
    parts[b] = tm_cast_exact(c, indices, TM_INT64);
    return tm_concat(c, parts, b + 1, q - 1);
}

tm_status tm__grad_gather_nd(tm_ctx *c, const tm_grad_call *g) {
    tm_val idx = full_nd_indices(c, g->in[1], (int)g->a->i[0]);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 1;  /* add */
    g->gin[0] = tm_prim(c, TM_P_SCATTER_ND,
                        (tm_val[3]){tm_grad_zeros_like(c, g->in[0]), idx, g->gout[0]}, 3, &a);
    return c->status;
}

/* Scatters that overwrite (reduction none) or add: data keeps the cotangent where it was
 * not overwritten, each update receives the cotangent of where it went. Multiplying and
 * max/min reductions have no rule. */
tm_status tm__grad_scatter_elements(tm_ctx *c, const tm_grad_call *g) {
    int64_t axis = g->a->i[0], reduction = g->a->i[1];
    if (reduction != 0 && reduction != 1) return TM_GRAD_NO_RULE;
    tm_val gy = g->gout[0];
    if (g->want[0])
        g->gin[0] = reduction == 1 ? gy
                                   : scatter_elements(c, gy, g->in[1],
                                                      tm_grad_zeros_like(c, g->in[2]), axis, 0);
    if (g->want[2]) g->gin[2] = gather_elements(c, gy, g->in[1], axis);
    return c->status;
}

tm_status tm__grad_scatter_nd(tm_ctx *c, const tm_grad_call *g) {
    int64_t reduction = g->a->i[0];
    if (reduction != 0 && reduction != 1) return TM_GRAD_NO_RULE;
    tm_val gy = g->gout[0];
    if (g->want[0]) {
        if (reduction == 1) {
            g->gin[0] = gy;
        } else {
            tm_args a;
            memset(&a, 0, sizeof a);
            g->gin[0] = tm_prim(c, TM_P_SCATTER_ND,
                                (tm_val[3]){gy, g->in[1], tm_grad_zeros_like(c, g->in[2])}, 3, &a);
        }
    }
    if (g->want[2]) {
        tm_args a;
        memset(&a, 0, sizeof a);
        g->gin[2] = tm_prim(c, TM_P_GATHER_ND, (tm_val[2]){gy, g->in[1]}, 2, &a);
    }
    return c->status;
}

/* INDEX_ADD: each update row receives its output row's cotangent. */
tm_status tm__grad_index_add(tm_ctx *c, const tm_grad_call *g) {
    if (g->want[1]) {
        tm_args a;
        memset(&a, 0, sizeof a);
        g->gin[1] = tm_prim(c, TM_P_GATHER, (tm_val[2]){g->gout[0], g->in[0]}, 2, &a);
    }
    return c->status;
}
