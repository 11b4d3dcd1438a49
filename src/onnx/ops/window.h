/* Window geometry shared by the convolution (conv.c) and pooling (pool.c) lowerings:
 * reading kernel_shape, strides, dilations, pads and auto_pad into explicit per-axis
 * numbers, with SAME_UPPER/SAME_LOWER/VALID resolved to pads. Not a lowering itself. */
#ifndef TM_ONNX_OPS_WINDOW_H
#define TM_ONNX_OPS_WINDOW_H

#include <string.h>
#include "../lower.h"

#define TM_WIN_MAX (TM_MAX_RANK - 2)

typedef struct tm_window {
    int n;                              /* spatial rank */
    int64_t kernel[TM_WIN_MAX], stride[TM_WIN_MAX], dilation[TM_WIN_MAX];
    int64_t pad_begin[TM_WIN_MAX], pad_end[TM_WIN_MAX];
    int same;                           /* 0 none, 1 SAME_UPPER, 2 SAME_LOWER */
} tm_window;

/* Reads an ints attribute of exactly n entries into out, or fills `def`. */
static inline int tm_win_ints(tm_lower *L, const char *name, int n, int64_t def, int64_t *out) {
    const int64_t *v;
    int k = tm_attr_ints(L, name, &v);
    if (k < 0) {
        for (int i = 0; i < n; i++) out[i] = def;
        return 0;
    }
    if (k != n) {
        tm_lfail(L, TM_ERR_SHAPE, "attribute %s has %d entries, expected %d", name, k, n);
        return -1;
    }
    memcpy(out, v, (size_t)n * sizeof *v);
    return 0;
}

/* Fills w for an input of dims `in` (spatial dims only, n of them). kernel comes from
 * the kernel_shape attribute, else from `kernel_from` (the weights' spatial dims; NULL
 * for pools, where kernel_shape is required). Pads are resolved for auto_pad as a
 * forward window (conv, pools); ConvTranspose resolves SAME itself and reads w->same. */
static inline int tm_win_read(tm_lower *L, int n, const int64_t *in, const int64_t *kernel_from,
                              tm_window *w) {
    memset(w, 0, sizeof *w);
    if (n < 1 || n > TM_WIN_MAX) {
        tm_lfail(L, TM_ERR_UNSUPPORTED, "%d spatial dimensions are not supported", n);
        return -1;
    }
    w->n = n;
    if (tm_attr_has(L, "kernel_shape")) {
        if (tm_win_ints(L, "kernel_shape", n, 1, w->kernel)) return -1;
        for (int d = 0; kernel_from && d < n; d++)
            if (w->kernel[d] != kernel_from[d]) {
                tm_lfail(L, TM_ERR_SHAPE, "attribute kernel_shape[%d]=%lld differs from the "
                         "weights' %lld", d, (long long)w->kernel[d], (long long)kernel_from[d]);
                return -1;
            }
    } else if (kernel_from) {
        memcpy(w->kernel, kernel_from, (size_t)n * sizeof *kernel_from);
    } else {
        tm_lfail(L, TM_ERR_SHAPE, "attribute kernel_shape is missing");
        return -1;
    }
    if (tm_win_ints(L, "strides", n, 1, w->stride)) return -1;
    if (tm_win_ints(L, "dilations", n, 1, w->dilation)) return -1;
    int64_t pads[2 * TM_WIN_MAX];
    if (tm_win_ints(L, "pads", 2 * n, 0, pads)) return -1;
    for (int d = 0; d < n; d++) {
        if (w->kernel[d] < 1 || w->stride[d] < 1 || w->dilation[d] < 1 || pads[d] < 0 ||
            pads[n + d] < 0) {
            tm_lfail(L, TM_ERR_SHAPE, "axis %d has kernel %lld, stride %lld, dilation %lld, "
                     "pads %lld/%lld; kernel, stride and dilation must be >= 1 and pads >= 0",
                     d, (long long)w->kernel[d], (long long)w->stride[d],
                     (long long)w->dilation[d], (long long)pads[d], (long long)pads[n + d]);
            return -1;
        }
        w->pad_begin[d] = pads[d];
        w->pad_end[d] = pads[n + d];
    }
    const char *auto_pad = tm_attr_s(L, "auto_pad", "NOTSET");
    if (!strcmp(auto_pad, "NOTSET") || !auto_pad[0]) return 0;
    for (int d = 0; d < n; d++) w->pad_begin[d] = w->pad_end[d] = 0;
    if (!strcmp(auto_pad, "VALID")) return 0;
    if (!strcmp(auto_pad, "SAME_UPPER")) w->same = 1;
    else if (!strcmp(auto_pad, "SAME_LOWER")) w->same = 2;
    else {
        tm_lfail(L, TM_ERR_UNSUPPORTED, "attribute auto_pad='%s' is not NOTSET, VALID, "
                 "SAME_UPPER or SAME_LOWER", auto_pad);
        return -1;
    }
    /* SAME: output = ceil(in / stride); the odd pad goes to the end (UPPER) or the
     * beginning (LOWER). */
    for (int d = 0; d < n; d++) {
        int64_t out = (in[d] + w->stride[d] - 1) / w->stride[d];
        int64_t span = (w->kernel[d] - 1) * w->dilation[d] + 1;
        int64_t total = (out - 1) * w->stride[d] + span - in[d];
        if (total < 0) total = 0;
        w->pad_begin[d] = w->same == 1 ? total / 2 : total - total / 2;
        w->pad_end[d] = total - w->pad_begin[d];
    }
    return 0;
}

#endif
