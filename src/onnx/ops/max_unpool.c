/* MaxUnpool (opsets 9-27): X's values scattered at their flat indices into zeros of the
 * shape the pooling window implies (SCATTER_ELEMENTS on the flattened tensor; later
 * duplicates win), then zero-padded at the end of each spatial axis up to output_shape,
 * as the ONNX reference does. Not MaxPool's indices (pool.c). */
#include "elementwise.h"
#include "window.h"

/* The unpooled spatial dims: (in - 1) * stride - pads + kernel. */
static int inferred_dims(tm_lower *L, tm_val x, int64_t *dims) {
    tm_ctx *c = tm_lctx(L);
    int r = tm_vrank(c, x), n = r - 2;
    const int64_t *kernel;
    if (tm_attr_ints(L, "kernel_shape", &kernel) != n) {
        tm_lfail(L, TM_ERR_SHAPE, "attribute 'kernel_shape' must list %d spatial dims", n);
        return -1;
    }
    int64_t stride[TM_WIN_MAX], pads[2 * TM_WIN_MAX];
    if (tm_win_ints(L, "strides", n, 1, stride) || tm_win_ints(L, "pads", 2 * n, 0, pads))
        return -1;
    dims[0] = tm_vdims(c, x)[0];
    dims[1] = tm_vdims(c, x)[1];
    for (int d = 0; d < n; d++) {
        dims[2 + d] = (tm_vdims(c, x)[2 + d] - 1) * stride[d] - pads[d] - pads[n + d] + kernel[d];
        if (kernel[d] < 1 || stride[d] < 1 || dims[2 + d] < 0) {
            tm_lfail(L, TM_ERR_SHAPE, "spatial axis %d: kernel %lld, stride %lld and pads "
                     "%lld/%lld give an output of %lld", d, (long long)kernel[d],
                     (long long)stride[d], (long long)pads[d], (long long)pads[n + d],
                     (long long)dims[2 + d]);
            return -1;
        }
    }
    return 0;
}

/* Zero padding at the end of each axis from `dims` up to input 2, output_shape. */
static tm_val pad_to_output_shape(tm_lower *L, tm_val y, int r, const int64_t *dims) {
    tm_ctx *c = tm_lctx(L);
    tm_val shape = tm_lin(L, 2);
    if (tm_ew_check(L, 2, shape, TM_DT(TM_INT64))) return TM_NONE;
    int64_t want[TM_MAX_RANK], begin[TM_MAX_RANK] = {0}, end[TM_MAX_RANK];
    if (tm_vnumel(c, shape) != r) {
        tm_lfail(L, TM_ERR_SHAPE, "input 'output_shape' has %lld entries for rank %d",
                 (long long)tm_vnumel(c, shape), r);
        return TM_NONE;
    }
    if (tm_host_i64(c, shape, want, r) < 0) return TM_NONE;
    int grows = 0;
    for (int d = 0; d < r; d++) {
        end[d] = want[d] - dims[d];
        if (end[d] < 0 || (d < 2 && end[d] != 0)) {
            tm_lfail(L, TM_ERR_SHAPE, "input 'output_shape' asks %lld for axis %d, which the "
                     "unpooled %lld does not fit", (long long)want[d], d, (long long)dims[d]);
            return TM_NONE;
        }
        grows |= end[d] != 0;
    }
    return grows ? tm_pad(c, y, 0, begin, end, 0.0) : y;
}

static tm_status lower_max_unpool(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0), idx = tm_ew_input(L, 1);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT) || tm_ew_check(L, 1, idx, TM_DT(TM_INT64)))
        return c->status;
    int r = tm_vrank(c, x);
    if (r < 3 || r - 2 > TM_WIN_MAX || tm_vrank(c, idx) != r ||
        memcmp(tm_vdims(c, x), tm_vdims(c, idx), (size_t)r * sizeof(int64_t)))
        return tm_lfail(L, TM_ERR_SHAPE, "inputs 'X' and 'I' must share one (N, C, spatial...) "
                        "shape");
    int64_t dims[TM_MAX_RANK];
    if (inferred_dims(L, x, dims)) return c->status;
    int64_t total = tm_numel(r, dims), count = tm_vnumel(c, x);
    tm_val zeros = tm_const_fill(c, tm_vdtype(c, x), 1, &total, 0.0);
    tm_args a;
    memset(&a, 0, sizeof a);
    tm_val in[3] = {zeros, tm_reshape(c, idx, 1, &count), tm_reshape(c, x, 1, &count)};
    tm_val y = tm_reshape(c, tm_prim(c, TM_P_SCATTER_ELEMENTS, in, 3, &a), r, dims);
    if (tm_lhas(L, 2)) y = pad_to_output_shape(L, y, r, dims);
    tm_lout(L, 0, y);
    return c->status;
}
TM_REGISTER_OP("", "MaxUnpool", 9, 27, lower_max_unpool);
