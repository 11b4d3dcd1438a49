/* image-classification: an image classifier's logits (ViT, ConvNeXT, ...) as labelled
 * scores, softmax over the labels, the top_k best (5 by default, null: all) as
 * transformers.js's ImageClassificationPipeline returns them: a list per image. */
#include <stdio.h>
#include <stdlib.h>
#include "pipelines.h"
#include "../core/status.h"

static tm_status check(tm_pipeline *p, tm_error *err) {
    if (tm_model_output_index(p->model, "logits") < 0)
        return tm__fail(err, TM_ERR_UNSUPPORTED, "%s: %s needs an output 'logits'", p->onnx_file, p->task->name);
    return TM_OK;
}

/* One image's list: [{"label":...,"score":...}, ...]. */
static tm_status put_image(tm_pipeline *p, const tm_tensor *logits, int64_t top_k, tm__buf *out, tm_error *err) {
    int rank = tm_tensor_rank(logits);
    const int64_t *dims = tm_tensor_dims(logits);
    if (rank != 2 || dims[0] != 1) return tm__fail(err, TM_ERR_SHAPE, "%s: logits are not (1, labels)", p->onnx_file);
    size_t L = (size_t)dims[1];
    double *sc = malloc((L ? L : 1) * sizeof *sc);
    if (!sc) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    tm__softmax_f32(tm_tensor_data((tm_tensor *)logits), L, sc);
    tm_status s = tm__put_top_labels(p, sc, L, top_k, out, err);
    free(sc);
    return s;
}

static tm_status call(tm_pipeline *p, const tm_json *inputs, const tm_json *options, tm__buf *out,
                      tm_error *err) {
    int64_t top_k;
    tm_status s = tm__opt_int(options, "top_k", 5, -1, &top_k, err);
    if (s) return s;
    if (top_k < -1 || (top_k < 0 && tm_json_get(options, "top_k")->type != TM_JSON_NULL))
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "option top_k must be a positive integer or null");
    const char **paths = NULL;
    size_t n = 0;
    int batched = 0;
    s = tm__vision_inputs(inputs, &paths, &n, &batched, err);
    if (s) return s;
    if (batched) tm__put(out, "[");
    for (size_t i = 0; !s && i < n; i++) {
        tm_tensor *logits = NULL;
        const char *name = "logits";
        int64_t size[2];
        s = tm__vision_run(p, paths[i], 0, NULL, NULL, 1, &name, &logits, size, err);
        if (!s && i) tm__put(out, ",");
        if (!s) s = put_image(p, logits, top_k, out, err);
        tm_tensor_free(logits);
    }
    if (batched) tm__put(out, "]");
    free(paths);
    return s;
}

const tm__task tm__task_image_classification = {
    "image-classification", NULL, check, call, 0, TM__TAKES_IMAGE, tm__vision_prepare,
};
