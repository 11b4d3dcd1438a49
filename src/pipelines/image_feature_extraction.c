/* image-feature-extraction: the model's raw output for each image as transformers.js's
 * ImageFeatureExtractionPipeline returns it: last_hidden_state, else logits, else
 * image_embeds, or pooler_output with the `pool` option; one tensor with the images along its
 * first dimension (here run one image at a time and stacked). No normalisation. */
#include <stdlib.h>
#include <string.h>
#include "pipelines.h"
#include "../core/status.h"

static const char *const outputs[] = {"last_hidden_state", "logits", "image_embeds"};

static tm_status check(tm_pipeline *p, tm_error *err) {
    for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++)
        if (tm_model_output_index(p->model, outputs[i]) >= 0) return TM_OK;
    if (tm_model_output_index(p->model, "pooler_output") >= 0) return TM_OK;
    return tm__fail(err, TM_ERR_UNSUPPORTED, "%s: %s needs an output last_hidden_state, logits, image_embeds or pooler_output",
                    p->onnx_file, p->task->name);
}

static tm_status call(tm_pipeline *p, const tm_json *inputs, const tm_json *options, tm__buf *out,
                      tm_error *err) {
    int pool = 0;
    tm_status s = tm__opt_bool(options, "pool", 0, &pool, err);
    if (s) return s;
    const char *name = NULL;
    if (pool) {
        if (tm_model_output_index(p->model, "pooler_output") < 0)
            return tm__fail(err, TM_ERR_UNSUPPORTED, "%s: no pooled output: the model has no 'pooler_output' for the pool option",
                            p->onnx_file);
        name = "pooler_output";
    }
    for (size_t i = 0; !name && i < sizeof outputs / sizeof outputs[0]; i++)
        if (tm_model_output_index(p->model, outputs[i]) >= 0) name = outputs[i];
    if (!name) return tm__fail(err, TM_ERR_UNSUPPORTED, "%s: the model has no last_hidden_state, logits or image_embeds (try pool)",
                               p->onnx_file);
    const char **paths = NULL;
    size_t n = 0;
    int batched = 0;
    s = tm__vision_inputs(inputs, &paths, &n, &batched, err);
    if (s) return s;
    float *all = NULL;
    int64_t dims[8] = {0}, per = 0;
    int rank = 0;
    for (size_t i = 0; !s && i < n; i++) {
        tm_tensor *t = NULL;
        int64_t size[2];
        s = tm__vision_run(p, paths[i], 0, NULL, NULL, 1, &name, &t, size, err);
        if (s) break;
        const int64_t *d = tm_tensor_dims(t);
        int r = tm_tensor_rank(t);
        if (r < 1 || r > 8 || d[0] != 1) s = tm__fail(err, TM_ERR_SHAPE, "%s: output '%s' has no batch dimension of 1", p->onnx_file, name);
        int64_t count = 1;
        for (int j = 1; !s && j < r; j++) count *= d[j];
        if (!s && i == 0) {
            rank = r, per = count;
            memcpy(dims, d, (size_t)r * sizeof *d);
            all = malloc((size_t)(per * (int64_t)n) * sizeof *all + 1);
            if (!all) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        } else if (!s && (r != rank || memcmp(d + 1, dims + 1, (size_t)(r - 1) * sizeof *d)))
            s = tm__fail(err, TM_ERR_SHAPE, "%s: the images give outputs of different shapes (resize them alike)", p->onnx_file);
        if (!s) memcpy(all + (int64_t)i * per, tm_tensor_data(t), (size_t)per * sizeof *all);
        tm_tensor_free(t);
    }
    if (!s) {
        dims[0] = (int64_t)n;
        tm__put_tensor(out, all, rank, dims);
    }
    free(all);
    free(paths);
    return s;
}

const tm__task tm__task_image_feature_extraction = {
    "image-feature-extraction", NULL, check, call, 0, TM__TAKES_IMAGE, tm__vision_prepare,
};
