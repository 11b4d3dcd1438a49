/* object-detection: DETR-style set prediction (logits over labels plus a "no object" class,
 * boxes as normalised centre/size) post-processed as transformers.js's
 * post_process_object_detection: per query the argmax class, dropped when it is "no object"
 * or its softmax score is under `threshold` (0.9 by default); boxes to corners, in pixels
 * of the image as read (truncated to integers) or, with `percentage`, as fractions. Boxes are
 * not clipped. One image per call, as transformers.js allows. Not zero-shot (OWL-ViT). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "pipelines.h"
#include "../core/status.h"

static tm_status check(tm_pipeline *p, tm_error *err) {
    if (tm_model_output_index(p->model, "logits") < 0 || tm_model_output_index(p->model, "pred_boxes") < 0)
        return tm__fail(err, TM_ERR_UNSUPPORTED, "%s: %s needs outputs 'logits' and 'pred_boxes'", p->onnx_file,
                        p->task->name);
    return TM_OK;
}

/* JavaScript's x | 0: truncation toward zero, modulo 2^32 into int32, NaN as 0 (and no -0). */
static double to_int32(double v) {
    if (isnan(v) || isinf(v)) return 0;
    double t = fmod(trunc(v), 4294967296.0);
    if (t >= 2147483648.0) t -= 4294967296.0;
    else if (t < -2147483648.0) t += 4294967296.0;
    return t + 0.0;
}

static tm_status put_image(tm_pipeline *p, const tm_tensor *logits, const tm_tensor *boxes, double threshold,
                           int percentage, const int64_t size[2], tm__buf *out, tm_error *err) {
    const int64_t *ld = tm_tensor_dims(logits), *bd = tm_tensor_dims(boxes);
    if (tm_tensor_rank(logits) != 3 || tm_tensor_rank(boxes) != 3 || ld[0] != 1 || bd[0] != 1 || ld[1] != bd[1] ||
        bd[2] != 4 || ld[2] < 1)
        return tm__fail(err, TM_ERR_SHAPE, "%s: logits and pred_boxes are not (1, queries, classes) and (1, queries, 4)",
                        p->onnx_file);
    const int64_t Q = ld[1], K = ld[2];
    const float *lg = tm_tensor_data((tm_tensor *)logits), *bx = tm_tensor_data((tm_tensor *)boxes);
    double *probs = malloc((size_t)K * sizeof *probs);
    if (!probs) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    int first = 1;
    tm__put(out, "[");
    for (int64_t q = 0; q < Q; q++) {
        const float *row = lg + q * K;
        int64_t best = 0;
        for (int64_t k = 1; k < K; k++)
            if (row[k] > row[best]) best = k;
        if (best == K - 1) continue;
        tm__softmax_f32(row, (size_t)K, probs);
        if (probs[best] < threshold) continue;
        const float *b = bx + q * 4;
        double cx = b[0], cy = b[1], w = b[2], h = b[3];
        double corner[4] = {cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2};
        for (int i = 0; !percentage && i < 4; i++) corner[i] = to_int32(corner[i] * (double)size[(i + 1) % 2]);
        char fallback[32];
        const char *label = tm__repo_label(p->repo, best);
        if (!label) {
            snprintf(fallback, sizeof fallback, "LABEL_%lld", (long long)best);
            label = fallback;
        }
        tm__put(out, first ? "{\"score\":" : ",{\"score\":");
        first = 0;
        tm__put_number(out, probs[best]);
        tm__put(out, ",\"label\":");
        tm__put_string(out, label);
        static const char *const keys[4] = {"{\"xmin\":", ",\"ymin\":", ",\"xmax\":", ",\"ymax\":"};
        tm__put(out, ",\"box\":");
        for (int i = 0; i < 4; i++) {
            tm__put(out, keys[i]);
            tm__put_number(out, corner[i]);
        }
        tm__put(out, "}}");
    }
    tm__put(out, "]");
    free(probs);
    return TM_OK;
}

static tm_status call(tm_pipeline *p, const tm_json *inputs, const tm_json *options, tm__buf *out,
                      tm_error *err) {
    int percentage = 0;
    double threshold = 0.9;
    const tm_json *t = options ? tm_json_get(options, "threshold") : NULL;
    if (t && t->type != TM_JSON_NULL) {
        if (t->type != TM_JSON_NUMBER) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "option threshold must be a number");
        threshold = t->number;
    }
    tm_status s = tm__opt_bool(options, "percentage", 0, &percentage, err);
    if (s) return s;
    const char **paths = NULL;
    size_t n = 0;
    int batched = 0;
    s = tm__vision_inputs(inputs, &paths, &n, &batched, err);
    if (s) return s;
    if (batched && n != 1) {
        free(paths);
        return tm__fail(err, TM_ERR_UNSUPPORTED, "object-detection takes one image per call (as transformers.js), not %zu", n);
    }
    tm_tensor *got[2] = {NULL, NULL};
    const char *names[2] = {"logits", "pred_boxes"};
    int64_t size[2];
    s = tm__vision_run(p, paths[0], 0, NULL, NULL, 2, names, got, size, err);
    if (!s && batched) tm__put(out, "[");
    if (!s) s = put_image(p, got[0], got[1], threshold, percentage, size, out, err);
    if (!s && batched) tm__put(out, "]");
    tm_tensor_free(got[0]);
    tm_tensor_free(got[1]);
    free(paths);
    return s;
}

const tm__task tm__task_object_detection = {
    "object-detection", NULL, check, call, 0, TM__TAKES_IMAGE, tm__vision_prepare,
};
