/* Col2Im (opset 18-27) over the COL2IM primitive, and DeformConv (19-27) as deformable
 * im2col (DEFORM_IM2COL) followed by one grouped matmul and the bias. Image and block
 * shapes are read on the host. Not the kernels (core/prims/image.c). */
#include "elementwise.h"
#include "window.h"

static tm_status lower_col2im(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0), image = tm_ew_input(L, 1), block = tm_ew_input(L, 2);
    if (tm_ew_check(L, 0, x, TM_DTS_NUMERIC | TM_DTS_BOOL) ||
        tm_ew_check(L, 1, image, TM_DT(TM_INT64)) || tm_ew_check(L, 2, block, TM_DT(TM_INT64)))
        return c->status;
    int64_t n = tm_vnumel(c, image);
    if (n < 1 || n > TM_WIN_MAX || tm_vnumel(c, block) != n)
        return tm_lfail(L, TM_ERR_SHAPE, "inputs 'image_shape' (%lld entries) and "
                        "'block_shape' (%lld) must list the same 1 to %d spatial dims",
                        (long long)n, (long long)tm_vnumel(c, block), TM_WIN_MAX);
    int64_t img[TM_WIN_MAX], blk[TM_WIN_MAX], stride[TM_WIN_MAX], dil[TM_WIN_MAX];
    int64_t pads[2 * TM_WIN_MAX];
    if (tm_host_i64(c, image, img, n) < 0 || tm_host_i64(c, block, blk, n) < 0)
        return c->status;
    if (tm_win_ints(L, "strides", (int)n, 1, stride) ||
        tm_win_ints(L, "dilations", (int)n, 1, dil) ||
        tm_win_ints(L, "pads", 2 * (int)n, 0, pads))
        return c->status;
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = n;
    for (int d = 0; d < n; d++) {
        a.i[1 + d] = img[d];
        a.i[1 + n + d] = blk[d];
        a.i[1 + 2 * n + d] = stride[d];
        a.i[1 + 3 * n + d] = pads[d];
        a.i[1 + 4 * n + d] = pads[n + d];
        a.i[1 + 5 * n + d] = dil[d];
    }
    tm_lout(L, 0, tm_prim(c, TM_P_COL2IM, &x, 1, &a));
    return c->status;
}
TM_REGISTER_OP("", "Col2Im", 18, 27, lower_col2im);

/* Checks DeformConv's shapes against the window; fills the output spatial dims. */
static int deform_shapes(tm_lower *L, tm_val x, tm_val w, tm_val offset, const tm_window *win,
                         int64_t group, int64_t offset_group, int64_t *out) {
    tm_ctx *c = tm_lctx(L);
    const int64_t *xd = tm_vdims(c, x), *wd = tm_vdims(c, w), *od = tm_vdims(c, offset);
    int n = win->n;
    if (group < 1 || offset_group < 1 || wd[0] < 1 || wd[1] < 1 || xd[1] % group || wd[0] % group ||
        wd[1] * group != xd[1] || xd[1] % offset_group) {
        tm_lfail(L, TM_ERR_SHAPE, "group=%lld and offset_group=%lld do not fit %lld input "
                 "channels and weights of (%lld, %lld, ...)", (long long)group,
                 (long long)offset_group, (long long)xd[1], (long long)wd[0], (long long)wd[1]);
        return -1;
    }
    if (tm_vrank(c, offset) != n + 2 || od[0] != xd[0]) {
        tm_lfail(L, TM_ERR_SHAPE, "input 'offset' must be (N, offset_group * kernel * %d, "
                 "output dims...)", n);
        return -1;
    }
    for (int d = 0; d < n; d++) {
        int64_t span = (win->kernel[d] - 1) * win->dilation[d] + 1;
        out[d] = (xd[2 + d] + win->pad_begin[d] + win->pad_end[d] - span) / win->stride[d] + 1;
        if (out[d] != od[2 + d]) {
            tm_lfail(L, TM_ERR_SHAPE, "input 'offset' has %lld positions on spatial axis %d; "
                     "the window gives %lld", (long long)od[2 + d], d, (long long)out[d]);
            return -1;
        }
    }
    return 0;
}

static tm_status lower_deform_conv(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0), w = tm_ew_input(L, 1), offset = tm_ew_input(L, 2);
    tm_val bias = tm_lin(L, 3), mask = tm_lin(L, 4);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT) || tm_ew_same_dtype(L, 0, x, 1, w) ||
        tm_ew_same_dtype(L, 0, x, 2, offset) || tm_ew_same_dtype(L, 0, x, 3, bias) ||
        tm_ew_same_dtype(L, 0, x, 4, mask))
        return c->status;
    int r = tm_vrank(c, x), n = r - 2;
    if (r < 3 || tm_vrank(c, w) != r)
        return tm_lfail(L, TM_ERR_SHAPE, "inputs 'X' (rank %d) and 'W' (rank %d) must be "
                        "(N, C, spatial...) and (oC, C/group, kernel...)", r, tm_vrank(c, w));
    tm_window win;
    if (tm_win_read(L, n, tm_vdims(c, x) + 2, tm_vdims(c, w) + 2, &win)) return c->status;
    int64_t group = tm_attr_i(L, "group", 1), offset_group = tm_attr_i(L, "offset_group", 1);
    int64_t out[TM_WIN_MAX];
    if (deform_shapes(L, x, w, offset, &win, group, offset_group, out)) return c->status;
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = n;
    a.i[1] = offset_group;
    for (int d = 0; d < n; d++) {
        a.i[2 + d] = win.kernel[d];
        a.i[2 + n + d] = win.stride[d];
        a.i[2 + 2 * n + d] = win.pad_begin[d];
        a.i[2 + 3 * n + d] = win.dilation[d];
    }
    tm_val in[3] = {x, offset, mask};
    tm_val cols = tm_prim(c, TM_P_DEFORM_IM2COL, in, mask == TM_NONE ? 2 : 3, &a); /* (N, C*K, P) */
    if (cols == TM_NONE) return c->status;
    const int64_t *xd = tm_vdims(c, x), *wd = tm_vdims(c, w);
    int64_t taps = tm_vnumel(c, w) / (wd[0] * wd[1]), points = tm_vdims(c, cols)[2];
    int64_t cdims[4] = {xd[0], group, wd[1] * taps, points};
    int64_t wdims[4] = {1, group, wd[0] / group, wd[1] * taps};
    tm_val y = tm_matmul(c, tm_reshape(c, w, 4, wdims), tm_reshape(c, cols, 4, cdims));
    int64_t ydims[TM_MAX_RANK] = {xd[0], wd[0]};
    for (int d = 0; d < n; d++) ydims[2 + d] = out[d];
    y = tm_reshape(c, y, r, ydims);
    if (bias != TM_NONE) {
        int64_t bdims[TM_MAX_RANK];
        for (int d = 0; d < r; d++) bdims[d] = d == 1 ? wd[0] : 1;
        if (tm_vnumel(c, bias) != wd[0])
            return tm_lfail(L, TM_ERR_SHAPE, "input 'B' has %lld entries for %lld output "
                            "channels", (long long)tm_vnumel(c, bias), (long long)wd[0]);
        y = tm_add(c, y, tm_reshape(c, bias, r, bdims));
    }
    tm_lout(L, 0, y);
    return c->status;
}
TM_REGISTER_OP("", "DeformConv", 19, 27, lower_deform_conv);
