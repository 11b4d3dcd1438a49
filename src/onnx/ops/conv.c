/* Conv, ConvTranspose, ConvInteger and QLinearConv over CONV/CONV_TRANSPOSE: auto_pad,
 * kernel_shape from the weights, output_shape/output_padding become explicit pads; the
 * integer forms convolve centred int32 operands exactly and requantize. Not pools. */
#include "quant.h"
#include "window.h"

static int check_conv_shapes(tm_lower *L, tm_val x, tm_val w, int transpose, int64_t group) {
    tm_ctx *c = tm_lctx(L);
    int r = tm_vrank(c, x);
    if (r < 3 || tm_vrank(c, w) != r) {
        tm_lfail(L, TM_ERR_SHAPE, "input 0 has rank %d and input 1 rank %d; both must be "
                 "(N, C, spatial...) of one rank >= 3", r, tm_vrank(c, w));
        return -1;
    }
    int64_t ch = tm_vdims(c, x)[1];
    if (group < 1 || ch % group) {
        tm_lfail(L, TM_ERR_SHAPE, "attribute group=%lld does not divide the %lld input "
                 "channels", (long long)group, (long long)ch);
        return -1;
    }
    int64_t want = transpose ? ch : ch / group;
    int64_t have = tm_vdims(c, w)[transpose ? 0 : 1];
    if (have != want) {
        tm_lfail(L, TM_ERR_SHAPE, "input 1 ('%s') has %lld channels along axis %d, expected "
                 "%lld", tm_lnode(L)->inputs[1], (long long)have, transpose ? 0 : 1,
                 (long long)want);
        return -1;
    }
    if (!transpose && tm_vdims(c, w)[0] % group) {
        tm_lfail(L, TM_ERR_SHAPE, "attribute group=%lld does not divide the %lld output "
                 "channels", (long long)group, (long long)tm_vdims(c, w)[0]);
        return -1;
    }
    return 0;
}

static void conv_args(const tm_window *w, int64_t group, tm_args *a) {
    int n = w->n;
    memset(a, 0, sizeof *a);
    a->i[0] = n;
    a->i[1] = group;
    for (int d = 0; d < n; d++) {
        a->i[2 + d] = w->stride[d];
        a->i[2 + n + d] = w->pad_begin[d];
        a->i[2 + 2 * n + d] = w->pad_end[d];
        a->i[2 + 3 * n + d] = w->dilation[d];
    }
}

/* A forward convolution of x by w (+ bias), attributes read from the node. */
static tm_val conv_forward(tm_lower *L, tm_val x, tm_val w, tm_val bias) {
    tm_ctx *c = tm_lctx(L);
    if (!tm_ctx_ok(c) || x == TM_NONE || w == TM_NONE) return TM_NONE;
    int64_t group = tm_attr_i(L, "group", 1);
    if (check_conv_shapes(L, x, w, 0, group)) return TM_NONE;
    int n = tm_vrank(c, x) - 2;
    tm_window win;
    if (tm_win_read(L, n, tm_vdims(c, x) + 2, tm_vdims(c, w) + 2, &win)) return TM_NONE;
    tm_args a;
    conv_args(&win, group, &a);
    tm_val in[3] = {x, w, bias};
    return tm_prim(c, TM_P_CONV, in, bias == TM_NONE ? 2 : 3, &a);
}

static tm_status lower_conv(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0), w = tm_lin(L, 1), b = tm_lin(L, 2);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT) || tm_ew_same_dtype(L, 0, x, 1, w) ||
        (b != TM_NONE && tm_ew_same_dtype(L, 0, x, 2, b)))
        return c->status;
    tm_lout(L, 0, conv_forward(L, x, w, b));
    return c->status;
}

/* ConvTranspose pads: explicit, or from output_shape / SAME (output = input * stride).
 * A requested output larger than the full result grows output_padding instead, so the
 * extra elements land at the end (as ONNX Runtime and the reference place them). */
static int transpose_pads(tm_lower *L, tm_val x, tm_window *win, int64_t *out_pad) {
    tm_ctx *c = tm_lctx(L);
    int n = win->n;
    const int64_t *in = tm_vdims(c, x) + 2;
    if (tm_win_ints(L, "output_padding", n, 0, out_pad)) return -1;
    int64_t shape[TM_MAX_RANK];
    const int64_t *given;
    int k = tm_attr_ints(L, "output_shape", &given);
    if (k >= 0 && k != n && k != n + 2) {
        tm_lfail(L, TM_ERR_SHAPE, "attribute output_shape has %d entries, expected %d", k, n);
        return -1;
    }
    if (k < 0 && !win->same) return 0;
    for (int d = 0; d < n; d++)
        shape[d] = k >= 0 ? given[k - n + d] : in[d] * win->stride[d];
    for (int d = 0; d < n; d++) {
        int64_t span = (win->kernel[d] - 1) * win->dilation[d] + 1;
        int64_t total = win->stride[d] * (in[d] - 1) + out_pad[d] + span - shape[d];
        if (total < 0) {
            win->pad_begin[d] = win->pad_end[d] = 0;
            out_pad[d] -= total;
            continue;
        }
        win->pad_begin[d] = win->same == 1 ? total / 2 : total - total / 2;
        win->pad_end[d] = total - win->pad_begin[d];
    }
    return 0;
}

static tm_status lower_conv_transpose(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0), w = tm_lin(L, 1), b = tm_lin(L, 2);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT) || tm_ew_same_dtype(L, 0, x, 1, w) ||
        (b != TM_NONE && tm_ew_same_dtype(L, 0, x, 2, b)))
        return c->status;
    int64_t group = tm_attr_i(L, "group", 1);
    if (check_conv_shapes(L, x, w, 1, group)) return c->status;
    int n = tm_vrank(c, x) - 2;
    tm_window win;
    int64_t out_pad[TM_WIN_MAX];
    if (tm_win_read(L, n, tm_vdims(c, x) + 2, tm_vdims(c, w) + 2, &win)) return c->status;
    /* tm_win_read resolved SAME for a forward window; redo it for the transpose. */
    if (transpose_pads(L, x, &win, out_pad)) return c->status;
    tm_args a;
    conv_args(&win, group, &a);
    for (int d = 0; d < n; d++) a.i[2 + 4 * n + d] = out_pad[d];
    tm_val in[3] = {x, w, b};
    tm_lout(L, 0, tm_prim(c, TM_P_CONV_TRANSPOSE, in, b == TM_NONE ? 2 : 3, &a));
    return c->status;
}

#define QUANT8_DTS (TM_DT(TM_INT8) | TM_DT(TM_UINT8))

/* p (a scalar, or per output channel (M)) shaped to broadcast against a rank-r tensor
 * whose axis `axis` holds the M channels. */
static tm_val per_channel(tm_ctx *c, tm_val p, int r, int axis) {
    if (!tm_ctx_ok(c) || p == TM_NONE) return TM_NONE;
    if (tm_vnumel(c, p) == 1) return tm_reshape(c, p, 0, NULL);
    int64_t dims[TM_MAX_RANK];
    for (int d = 0; d < r; d++) dims[d] = d == axis ? tm_vnumel(c, p) : 1;
    return tm_reshape(c, p, r, dims);
}

/* x (or w) minus its zero point, as int32. */
static tm_val centered(tm_lower *L, int index, tm_val v, int zp_index, int channel_axis) {
    tm_ctx *c = tm_lctx(L);
    tm_val zp = tm_lin(L, zp_index);
    tm_val out = tm_cast(c, v, TM_INT32);
    if (zp == TM_NONE || !tm_ctx_ok(c)) return out;
    if (tm_ew_same_dtype(L, index, v, zp_index, zp)) return TM_NONE;
    zp = per_channel(c, tm_cast(c, zp, TM_INT32), tm_vrank(c, v), channel_axis);
    return tm_sub(c, out, zp);
}

/* The exact int32 convolution of x - xzp and w - wzp through CONV_INTEGER (im2col and the
 * 8-bit GEMM, the weights packed once): group 1, 1 to 3 spatial dims, x's zero point one
 * value and w's one or one per output channel, both of their operand's dtype. TM_NONE with
 * the context still ok when the node is outside that (the caller takes the general path). */
static tm_val conv_integer_fast(tm_lower *L, tm_val x, tm_val w, tm_val xzp, tm_val wzp) {
    tm_ctx *c = tm_lctx(L);
    if (!tm_ctx_ok(c) || x == TM_NONE || w == TM_NONE || tm_attr_i(L, "group", 1) != 1)
        return TM_NONE;
    int r = tm_vrank(c, x), n = r - 2;
    if (n < 1 || n > 3 || tm_vrank(c, w) != r || tm_vdims(c, w)[1] != tm_vdims(c, x)[1])
        return TM_NONE;
    int64_t m = tm_vdims(c, w)[0];
    if ((xzp != TM_NONE && (tm_vdtype(c, xzp) != tm_vdtype(c, x) || tm_vnumel(c, xzp) != 1)) ||
        (wzp != TM_NONE && (tm_vdtype(c, wzp) != tm_vdtype(c, w) || tm_vrank(c, wzp) > 1 ||
                            (tm_vnumel(c, wzp) != 1 && tm_vnumel(c, wzp) != m))))
        return TM_NONE;
    tm_window win;
    if (tm_win_read(L, n, tm_vdims(c, x) + 2, tm_vdims(c, w) + 2, &win)) return TM_NONE;
    tm_args a;
    conv_args(&win, 1, &a);
    int64_t kdim = tm_vdims(c, x)[1];
    for (int d = 0; d < n; d++) {
        a.i[2 + 4 * n + d] = win.kernel[d];
        kdim *= win.kernel[d];
    }
    a.i[2 + 5 * n] = m;
    tm_args pack;
    memset(&pack, 0, sizeof pack);
    pack.i[0] = kdim;
    pack.i[1] = m;
    pack.i[2] = 1;   /* w is (M, C, k...): B transposed */
    tm_val pin[2] = {w, wzp != TM_NONE ? wzp : tm_const_scalar(c, tm_vdtype(c, w), 0.0)};
    tm_val in[3] = {x, tm_prim(c, TM_P_QGEMM_PACK_B, pin, 2, &pack),
                    xzp != TM_NONE ? tm_reshape(c, xzp, 0, NULL)
                                   : tm_const_scalar(c, tm_vdtype(c, x), 0.0)};
    return tm_prim(c, TM_P_CONV_INTEGER, in, 3, &a);
}

static tm_status lower_conv_integer(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0), w = tm_lin(L, 1);
    if (tm_ew_check(L, 0, x, QUANT8_DTS) || tm_ew_check(L, 1, w, QUANT8_DTS)) return c->status;
    if (tm_lhas(L, 2) && tm_vnumel(c, tm_lin(L, 2)) != 1)
        return tm_lfail(L, TM_ERR_SHAPE, "input 2 ('%s') must hold one zero point",
                        tm_lnode(L)->inputs[2]);
    tm_val fast = conv_integer_fast(L, x, w, tm_lin(L, 2), tm_lin(L, 3));
    if (fast != TM_NONE || !tm_ctx_ok(c)) {
        tm_lout(L, 0, fast);
        return c->status;
    }
    tm_val cx = centered(L, 0, x, 2, 1), cw = centered(L, 1, w, 3, 0);
    tm_lout(L, 0, conv_forward(L, cx, cw, TM_NONE));
    return c->status;
}

/* QLinearConv: exact int32 convolution of the centred operands plus the int32 bias,
 * times x_scale * w_scale / y_scale (per output channel when w_scale is), requantized
 * with y_zero_point. */
static tm_status lower_qlinear_conv(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    for (int i = 0; i < 8; i++)
        if (!tm_lhas(L, i))
            return tm_lfail(L, TM_ERR_SHAPE, "input %d is missing; QLinearConv takes 8 or 9", i);
    tm_val x = tm_lin(L, 0), w = tm_lin(L, 3), yzp = tm_lin(L, 7), b = tm_lin(L, 8);
    if (tm_ew_check(L, 0, x, QUANT8_DTS) || tm_ew_check(L, 3, w, QUANT8_DTS) ||
        tm_ew_check(L, 7, yzp, QUANT8_DTS) || tm_ew_check(L, 1, tm_lin(L, 1), TM_DTS_FLOAT) ||
        tm_ew_check(L, 4, tm_lin(L, 4), TM_DTS_FLOAT) ||
        tm_ew_check(L, 6, tm_lin(L, 6), TM_DTS_FLOAT) ||
        (b != TM_NONE && tm_ew_check(L, 8, b, TM_DT(TM_INT32))))
        return c->status;
    int r = tm_vrank(c, x);
    tm_val acc = conv_integer_fast(L, x, w, tm_lin(L, 2), tm_lin(L, 5));
    if (acc != TM_NONE && b != TM_NONE) acc = tm_add(c, acc, per_channel(c, b, r, 1));
    if (acc == TM_NONE && tm_ctx_ok(c)) {
        tm_val cx = centered(L, 0, x, 2, 1), cw = centered(L, 3, w, 5, 0);
        acc = conv_forward(L, cx, cw, b);
    }
    acc = tm_cast(c, acc, TM_DOUBLE);
    tm_dtype sdt = tm_vdtype(c, tm_lin(L, 1));
    tm_val xs = tm_reshape(c, tm_lin(L, 1), 0, NULL);
    tm_val ws = per_channel(c, tm_cast(c, tm_lin(L, 4), sdt), r, 1);
    tm_val ys = tm_reshape(c, tm_cast(c, tm_lin(L, 6), sdt), 0, NULL);
    tm_val mult = tm_cast(c, tm_div(c, tm_mul(c, xs, ws), ys), TM_DOUBLE);
    tm_val zp = tm_reshape(c, yzp, 0, NULL);
    tm_lout(L, 0, tm_q_store(c, tm_mul(c, acc, mult), zp, tm_vdtype(c, yzp), 1));
    return c->status;
}

TM_REGISTER_OP("", "Conv", 1, 27, lower_conv);
TM_REGISTER_OP("", "ConvTranspose", 1, 27, lower_conv_transpose);
TM_REGISTER_OP("", "ConvInteger", 10, 27, lower_conv_integer);
TM_REGISTER_OP("", "QLinearConv", 10, 27, lower_qlinear_conv);
