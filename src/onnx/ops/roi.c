/* RoiAlign (opsets 10-27) and MaxRoiPool (1-27) over the ROI_ALIGN and MAX_ROI_POOL
 * primitives: attribute defaults per opset and input checks. Not the pooling kernels
 * (core/prims/image.c). */
#include "elementwise.h"

static tm_status lower_roi_align(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0), rois = tm_ew_input(L, 1), batch = tm_ew_input(L, 2);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT) || tm_ew_same_dtype(L, 0, x, 1, rois) ||
        tm_ew_check(L, 2, batch, TM_DT(TM_INT64) | TM_DT(TM_INT32)))
        return c->status;
    const char *mode = tm_attr_s(L, "mode", "avg");
    if (strcmp(mode, "avg") && strcmp(mode, "max"))
        return tm_lfail(L, TM_ERR_UNSUPPORTED, "attribute 'mode' is '%s'; expected avg or max",
                        mode);
    /* Opset 10 had no choice: its coordinates were those of output_half_pixel. */
    const char *ct = tm_lopset(L) >= 16
                         ? tm_attr_s(L, "coordinate_transformation_mode", "half_pixel")
                         : "output_half_pixel";
    if (strcmp(ct, "half_pixel") && strcmp(ct, "output_half_pixel"))
        return tm_lfail(L, TM_ERR_UNSUPPORTED, "attribute 'coordinate_transformation_mode' is "
                        "'%s'; expected half_pixel or output_half_pixel", ct);
    int64_t out_h = tm_attr_i(L, "output_height", 1), out_w = tm_attr_i(L, "output_width", 1);
    int64_t ratio = tm_attr_i(L, "sampling_ratio", 0);
    if (out_h < 1 || out_w < 1 || ratio < 0)
        return tm_lfail(L, TM_ERR_SHAPE, "attributes output_height=%lld, output_width=%lld, "
                        "sampling_ratio=%lld: sizes must be >= 1 and the ratio >= 0",
                        (long long)out_h, (long long)out_w, (long long)ratio);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = !strcmp(mode, "max");
    a.i[1] = out_h;
    a.i[2] = out_w;
    a.i[3] = ratio;
    a.i[4] = !strcmp(ct, "half_pixel");
    a.f[0] = tm_attr_f(L, "spatial_scale", 1.0f);
    tm_val in[3] = {x, rois, batch};
    tm_lout(L, 0, tm_prim(c, TM_P_ROI_ALIGN, in, 3, &a));
    return c->status;
}
TM_REGISTER_OP("", "RoiAlign", 10, 27, lower_roi_align);

static tm_status lower_max_roi_pool(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0), rois = tm_ew_input(L, 1);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT) || tm_ew_same_dtype(L, 0, x, 1, rois))
        return c->status;
    const int64_t *shape;
    if (tm_attr_ints(L, "pooled_shape", &shape) != 2)
        return tm_lfail(L, TM_ERR_SHAPE, "attribute 'pooled_shape' must hold 2 ints (height, "
                        "width)");
    if (shape[0] < 1 || shape[1] < 1)
        return tm_lfail(L, TM_ERR_SHAPE, "attribute 'pooled_shape' is (%lld, %lld); both must "
                        "be >= 1", (long long)shape[0], (long long)shape[1]);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = shape[0];
    a.i[1] = shape[1];
    a.f[0] = tm_attr_f(L, "spatial_scale", 1.0f);
    tm_val in[2] = {x, rois};
    tm_lout(L, 0, tm_prim(c, TM_P_MAX_ROI_POOL, in, 2, &a));
    return c->status;
}
TM_REGISTER_OP("", "MaxRoiPool", 1, 27, lower_max_roi_pool);
