/* depth-estimation: a depth model's predicted_depth (1, h, w) resized bilinearly to the
 * image as read (ONNX Resize, linear, half_pixel, in float32 as transformers.js's
 * interpolate_4d runs it through ONNX Runtime), and that map min-max scaled to a uint8
 * image, as DepthEstimationPipeline returns them. Output: {"predicted_depth": Tensor,
 * "depth": {"_type":"RawImage","width","height","channels":1,"data":[...]}} with the data
 * inline (transformers.js returns objects; the references store them as .npy). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pipelines.h"
#include "../core/status.h"

static tm_status check(tm_pipeline *p, tm_error *err) {
    if (tm_model_output_index(p->model, "predicted_depth") < 0)
        return tm__fail(err, TM_ERR_UNSUPPORTED, "%s: %s needs an output 'predicted_depth'", p->onnx_file,
                        p->task->name);
    return TM_OK;
}

/* One axis of ONNX Runtime's linear resize with half_pixel coordinates: source indices
 * and weights in float32, clamped to the input. */
static void axis_weights(int64_t in, int64_t out, int64_t *i1, int64_t *i2, float *w1, float *w2) {
    const float scale = (float)out / (float)in;
    for (int64_t o = 0; o < out; o++) {
        float x = ((float)o + 0.5f) / scale - 0.5f;
        if (x < 0) x = 0;
        if (x > (float)(in - 1)) x = (float)(in - 1);
        int64_t a = (int64_t)x < in - 1 ? (int64_t)x : in - 1, b = a + 1 < in - 1 ? a + 1 : in - 1;
        float d1 = fabsf(x - (float)a), d2 = fabsf(x - (float)b);
        if (a == b) d1 = d2 = 0.5f;
        i1[o] = a, i2[o] = b, w1[o] = d2, w2[o] = d1;   /* weight of a, weight of b */
    }
}

static tm_status put_image(tm_pipeline *p, const tm_tensor *depth, const int64_t size[2], tm__buf *out,
                           tm_error *err) {
    const int64_t *d = tm_tensor_dims(depth);
    int rank = tm_tensor_rank(depth);
    if ((rank != 3 || d[0] != 1) && rank != 2)
        return tm__fail(err, TM_ERR_SHAPE, "%s: predicted_depth is not (1, height, width)", p->onnx_file);
    const int64_t h = d[rank - 2], w = d[rank - 1], H = size[0], W = size[1];
    if (h < 1 || w < 1) return tm__fail(err, TM_ERR_SHAPE, "%s: predicted_depth is empty", p->onnx_file);
    const float *x = tm_tensor_data((tm_tensor *)depth);
    int64_t *ya = malloc((size_t)H * sizeof *ya), *yb = malloc((size_t)H * sizeof *yb);
    int64_t *xa = malloc((size_t)W * sizeof *xa), *xb = malloc((size_t)W * sizeof *xb);
    float *wya = malloc((size_t)H * sizeof *wya), *wyb = malloc((size_t)H * sizeof *wyb);
    float *wxa = malloc((size_t)W * sizeof *wxa), *wxb = malloc((size_t)W * sizeof *wxb);
    float *y = malloc((size_t)(H * W) * sizeof *y);
    tm_status s = ya && yb && xa && xb && wya && wyb && wxa && wxb && y ? TM_OK
                                                                       : tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    if (!s) {
        axis_weights(h, H, ya, yb, wya, wyb);
        axis_weights(w, W, xa, xb, wxa, wxb);
        float lo = INFINITY, hi = -INFINITY;
        for (int64_t i = 0; i < H; i++)
            for (int64_t j = 0; j < W; j++) {
                const float *r1 = x + ya[i] * w, *r2 = x + yb[i] * w;
                float v = wxa[j] * wya[i] * r1[xa[j]] + wxb[j] * wya[i] * r1[xb[j]] + wxa[j] * wyb[i] * r2[xa[j]] +
                          wxb[j] * wyb[i] * r2[xb[j]];
                y[i * W + j] = v;
                if (v < lo) lo = v;
                if (v > hi) hi = v;
            }
        int64_t dims[2] = {H, W};
        tm__put(out, "{\"predicted_depth\":");
        tm__put_tensor(out, y, 2, dims);
        char head[160];
        snprintf(head, sizeof head, ",\"depth\":{\"_type\":\"RawImage\",\"width\":%lld,\"height\":%lld,\"channels\":1,\"data\":[",
                 (long long)W, (long long)H);
        tm__put(out, head);
        /* Tensor.sub, div_, mul_(255) each stored in a Float32Array, then Uint8Array.from */
        const double range = (double)hi - (double)lo;
        for (int64_t i = 0; i < H * W; i++) {
            float v = (float)((double)y[i] - (double)lo);
            v = (float)((double)v / range);
            v = (float)((double)v * 255);
            double t = isnan(v) ? 0 : trunc(v);
            char num[8];
            snprintf(num, sizeof num, i ? ",%d" : "%d", (int)((int64_t)t & 255));
            tm__put(out, num);
        }
        tm__put(out, "]}}");
    }
    free(ya), free(yb), free(xa), free(xb), free(wya), free(wyb), free(wxa), free(wxb), free(y);
    return s;
}

static tm_status call(tm_pipeline *p, const tm_json *inputs, const tm_json *options, tm__buf *out,
                      tm_error *err) {
    (void)options;
    const char **paths = NULL;
    size_t n = 0;
    int batched = 0;
    tm_status s = tm__vision_inputs(inputs, &paths, &n, &batched, err);
    if (s) return s;
    if (batched) tm__put(out, "[");
    for (size_t i = 0; !s && i < n; i++) {
        tm_tensor *depth = NULL;
        const char *name = "predicted_depth";
        int64_t size[2];
        s = tm__vision_run(p, paths[i], 0, NULL, NULL, 1, &name, &depth, size, err);
        if (!s && i) tm__put(out, ",");
        if (!s) s = put_image(p, depth, size, out, err);
        tm_tensor_free(depth);
    }
    if (batched) tm__put(out, "]");
    free(paths);
    return s;
}

const tm__task tm__task_depth_estimation = {
    "depth-estimation", NULL, check, call, 0, TM__TAKES_IMAGE, tm__vision_prepare,
};
