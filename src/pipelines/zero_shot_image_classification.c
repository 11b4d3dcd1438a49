/* zero-shot-image-classification: CLIP-style models scoring an image against candidate
 * labels, each put into the hypothesis_template ("This is a photo of {}" by default) and
 * tokenized as one padded batch; softmax over logits_per_image, labels sorted by score as
 * transformers.js's ZeroShotImageClassificationPipeline returns them (SigLIP's sigmoid is
 * not done here). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pipelines.h"
#include "../core/status.h"

static tm_status check(tm_pipeline *p, tm_error *err) {
    if (!p->tok) return tm__fail(err, TM_ERR_NOT_FOUND, "%s: no tokenizer.json (%s needs one for the labels)",
                                 p->repo->source, p->task->name);
    if (!strcmp(p->repo->model_type, "siglip"))
        return tm__fail(err, TM_ERR_UNSUPPORTED, "%s: siglip models (sigmoid scores, max_length padding) are not supported yet",
                        p->repo->source);
    if (tm_model_input_index(p->model, "input_ids") < 0 || tm_model_input_index(p->model, "pixel_values") < 0)
        return tm__fail(err, TM_ERR_UNSUPPORTED, "%s: %s needs inputs input_ids and pixel_values", p->onnx_file,
                        p->task->name);
    if (tm_model_output_index(p->model, "logits_per_image") < 0)
        return tm__fail(err, TM_ERR_UNSUPPORTED, "%s: %s needs an output 'logits_per_image'", p->onnx_file,
                        p->task->name);
    return TM_OK;
}

/* template with its first "{}" replaced by label (JavaScript's String.replace). */
static char *fill(const char *template, const char *label) {
    const char *at = strstr(template, "{}");
    size_t n = strlen(template) + strlen(label) + 1;
    char *s = malloc(n);
    if (!s) return NULL;
    if (!at) snprintf(s, n, "%s", template);
    else snprintf(s, n, "%.*s%s%s", (int)(at - template), template, label, at + 2);
    return s;
}

typedef struct scored {
    double score;
    size_t i;
} scored;

/* Array.prototype.sort by descending score is stable: ties keep the labels' order. */
static int by_score(const void *a, const void *b) {
    const scored *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? 1 : -1;
    return x->i < y->i ? -1 : x->i > y->i;
}

static tm_status put_image(const tm_tensor *logits, const char *const *labels, size_t n, tm__buf *out,
                           tm_error *err) {
    const int64_t *dims = tm_tensor_dims(logits);
    if (tm_tensor_rank(logits) != 2 || dims[0] != 1 || dims[1] != (int64_t)n)
        return tm__fail(err, TM_ERR_SHAPE, "logits_per_image is not (1, %zu)", n);
    double *sc = malloc(n * sizeof *sc);
    scored *order = malloc(n * sizeof *order);
    if (!sc || !order) {
        free(sc);
        free(order);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    }
    tm__softmax_f32(tm_tensor_data((tm_tensor *)logits), n, sc);
    for (size_t j = 0; j < n; j++) order[j] = (scored){sc[j], j};
    qsort(order, n, sizeof *order, by_score);
    tm__put(out, "[");
    for (size_t j = 0; j < n; j++) {
        tm__put(out, j ? ",{\"score\":" : "{\"score\":");
        tm__put_number(out, order[j].score);
        tm__put(out, ",\"label\":");
        tm__put_string(out, labels[order[j].i]);
        tm__put(out, "}");
    }
    tm__put(out, "]");
    free(sc);
    free(order);
    return TM_OK;
}

static tm_status call(tm_pipeline *p, const tm_json *inputs, const tm_json *options, tm__buf *out,
                      tm_error *err) {
    const char *template = "This is a photo of {}";
    tm_status s = tm__opt_string(options, "hypothesis_template", template, &template, err);
    if (s) return s;
    if (inputs->n < 2)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT,
                        "zero-shot-image-classification takes [images, candidate_labels]");
    const char **labels = NULL, **paths = NULL;
    size_t n_labels = 0, n = 0;
    int batched = 0, labels_batched = 0;
    s = tm__strings(&inputs->items[1], "candidate_labels", &labels, &n_labels, &labels_batched, err);
    if (!s && n_labels == 0) s = tm__fail(err, TM_ERR_INVALID_ARGUMENT, "candidate_labels is empty");
    if (!s) s = tm__vision_inputs(inputs, &paths, &n, &batched, err);
    char **texts = s ? NULL : calloc(n_labels, sizeof *texts);
    if (!s && !texts) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (size_t j = 0; !s && j < n_labels; j++)
        if (!(texts[j] = fill(template, labels[j]))) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    tm__batch b = {0};
    if (!s) s = tm__batch_encode(p, n_labels, (const char *const *)texts, NULL, &b, err);
    tm_tensor *ids = NULL, *mask = NULL;
    if (!s) {
        int64_t dims[2] = {b.B, b.T};
        ids = tm_tensor_wrap(TM_INT64, 2, dims, b.ids);
        mask = tm_tensor_wrap(TM_INT64, 2, dims, b.mask);
        if (!ids || !mask) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    }
    const char *extra_names[2] = {"input_ids", "attention_mask"};
    const tm_tensor *extra[2] = {ids, mask};
    int n_extra = tm_model_input_index(p->model, "attention_mask") >= 0 ? 2 : 1;
    if (!s && batched) tm__put(out, "[");
    for (size_t i = 0; !s && i < n; i++) {
        tm_tensor *logits = NULL;
        const char *name = "logits_per_image";
        int64_t size[2];
        s = tm__vision_run(p, paths[i], n_extra, extra_names, extra, 1, &name, &logits, size, err);
        if (!s && i) tm__put(out, ",");
        if (!s) s = put_image(logits, labels, n_labels, out, err);
        tm_tensor_free(logits);
    }
    if (!s && batched) tm__put(out, "]");
    tm_tensor_free(ids);
    tm_tensor_free(mask);
    tm__batch_free(&b);
    for (size_t j = 0; texts && j < n_labels; j++) free(texts[j]);
    free(texts);
    free(labels);
    free(paths);
    return s;
}

const tm__task tm__task_zero_shot_image_classification = {
    "zero-shot-image-classification", NULL, check, call, 0, TM__TAKES_IMAGE, tm__vision_prepare,
};
