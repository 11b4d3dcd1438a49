/* text-classification: the logits of a sequence-classification model as labelled scores,
 * softmax over the labels, or a sigmoid each when config.json's problem_type is
 * multi_label_classification; the top_k best (null: all) as transformers.js returns them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pipelines.h"
#include "../core/status.h"

static tm_status check(tm_pipeline *p, tm_error *err) {
    if (tm_model_output_index(p->model, "logits") < 0)
        return tm__fail(err, TM_ERR_UNSUPPORTED, "%s: %s needs an output 'logits'", p->onnx_file, p->task->name);
    return TM_OK;
}

/* {"label":...,"score":...}: id2label's name, else LABEL_<id>. */
static void put_label_score(tm__buf *out, const tm_pipeline *p, size_t id, double score) {
    char fallback[32];
    const char *label = tm__repo_label(p->repo, (int64_t)id);
    if (!label) {
        snprintf(fallback, sizeof fallback, "LABEL_%zu", id);
        label = fallback;
    }
    tm__put(out, "{\"label\":");
    tm__put_string(out, label);
    tm__put(out, ",\"score\":");
    tm__put_number(out, score);
    tm__put(out, "}");
}

static tm_status call(tm_pipeline *p, const tm_json *inputs, const tm_json *options, tm__buf *out,
                      tm_error *err) {
    int64_t top_k;
    tm_status s = tm__opt_int(options, "top_k", 1, -1, &top_k, err);
    if (s) return s;
    if (top_k < -1 || (top_k < 0 && tm_json_get(options, "top_k")->type != TM_JSON_NULL))
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "option top_k must be a positive integer or null");
    int batched;
    tm__batch b = {0};
    s = tm__encode_texts(p, inputs, &b, &batched, err);
    tm_tensor *logits = NULL;
    const char *name = "logits";
    if (!s) s = tm__batch_run(p, &b, 1, &name, &logits, err);
    size_t n = (size_t)b.B;   /* the texts */
    tm__batch_free(&b);
    if (!s && (tm_tensor_rank(logits) != 2 || tm_tensor_dims(logits)[0] != (int64_t)n))
        s = tm__fail(err, TM_ERR_SHAPE, "%s: logits are not (batch, labels)", p->onnx_file);
    if (s) {
        tm_tensor_free(logits);
        return s;
    }
    size_t L = (size_t)tm_tensor_dims(logits)[1];
    const float *x = tm_tensor_data(logits);
    double *v = malloc((L ? L : 1) * sizeof *v), *sc = malloc((L ? L : 1) * sizeof *sc);
    size_t *idx = malloc((L ? L : 1) * sizeof *idx);
    if (!v || !sc || !idx) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    int sigmoid = !strcmp(p->repo->problem_type, "multi_label_classification");
    size_t k = top_k < 0 || (size_t)top_k > L ? L : (size_t)top_k;
    /* top_k 1 flattens a batch's lists; one text without a batch is unwrapped */
    int flat = top_k == 1, wrap = batched || flat;
    if (!s && wrap) tm__put(out, "[");
    for (size_t i = 0; !s && i < n; i++) {
        for (size_t j = 0; j < L; j++) v[j] = x[i * L + j];
        if (sigmoid)
            for (size_t j = 0; j < L; j++) sc[j] = 1 / (1 + exp(-v[j]));
        else
            tm__softmax(v, L, sc);
        for (size_t j = 0; j < L; j++) sc[j] = (float)sc[j]; /* a float32 tensor there */
        if ((s = tm__argsort_desc(sc, L, idx, err))) break;
        if (i) tm__put(out, ",");
        if (!flat) tm__put(out, "[");
        for (size_t j = 0; j < k; j++) {
            if (j) tm__put(out, ",");
            put_label_score(out, p, idx[j], sc[idx[j]]);
        }
        if (!flat) tm__put(out, "]");
    }
    if (!s && wrap) tm__put(out, "]");
    free(v);
    free(sc);
    free(idx);
    tm_tensor_free(logits);
    return s;
}

const tm__task tm__task_text_classification = {"text-classification", "sentiment-analysis", check, call, 0, 0, NULL};
