/* zero-shot-classification: each candidate label put into the hypothesis template and
 * scored by an NLI model against the text (the entailment and contradiction ids from
 * config.json's label2id), softmax over the labels' entailment logits, or entailment
 * against contradiction per label with multi_label (or a single label). The hypotheses of
 * one text run as one padded batch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pipelines.h"
#include "../core/status.h"

static tm_status check(tm_pipeline *p, tm_error *err) {
    if (tm_model_output_index(p->model, "logits") < 0)
        return tm__fail(err, TM_ERR_UNSUPPORTED, "%s: zero-shot-classification needs an output 'logits'",
                        p->onnx_file);
    if (!tm_json_get(p->repo->config, "label2id"))
        return tm__fail(err, TM_ERR_UNSUPPORTED,
                        "%s: config.json has no label2id (zero-shot-classification needs an NLI model)",
                        p->repo->source);
    return TM_OK;
}

/* template with its first "{}" replaced by label (String.replace); malloc'ed. */
static char *fill_template(const char *template, const char *label) {
    const char *at = strstr(template, "{}");
    size_t n = strlen(template) + strlen(label) + 1;
    char *s = malloc(n);
    if (!s) return NULL;
    if (!at) snprintf(s, n, "%s", template);
    else snprintf(s, n, "%.*s%s%s", (int)(at - template), template, label, at + 2);
    return s;
}

static tm_status one_text(tm_pipeline *p, const char *text, const char *const *labels,
                          const char *const *hypotheses, size_t n_labels, int each, int64_t entail,
                          int64_t contra, tm__buf *out, tm_error *err) {
    const char **premises = malloc(n_labels * sizeof *premises);
    if (!premises) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < n_labels; i++) premises[i] = text;
    tm__batch b = {0};
    tm_status s = tm__batch_encode(p, n_labels, premises, hypotheses, &b, err);
    free(premises);
    tm_tensor *logits = NULL;
    const char *name = "logits";
    if (!s) s = tm__batch_run(p, &b, 1, &name, &logits, err);
    tm__batch_free(&b);
    if (!s && (tm_tensor_rank(logits) != 2 || tm_tensor_dims(logits)[0] != (int64_t)n_labels ||
               tm_tensor_dims(logits)[1] <= (entail > contra ? entail : contra)))
        s = tm__fail(err, TM_ERR_SHAPE, "%s: logits are not (batch, labels) with the entailment label",
                     p->onnx_file);
    double *scores = malloc(n_labels * sizeof *scores), *ent = malloc(n_labels * sizeof *ent);
    size_t *idx = malloc(n_labels * sizeof *idx);
    if (!s && (!scores || !ent || !idx)) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    if (!s) {
        const float *x = tm_tensor_data(logits);
        int64_t L = tm_tensor_dims(logits)[1];
        for (size_t i = 0; i < n_labels; i++) {
            if (each) {
                double pair[2] = {x[i * L + contra], x[i * L + entail]}, sm[2];
                tm__softmax(pair, 2, sm);
                scores[i] = sm[1];
            } else {
                ent[i] = x[i * L + entail];
            }
        }
        if (!each) tm__softmax(ent, n_labels, scores);
        s = tm__argsort_desc(scores, n_labels, idx, err);
    }
    if (!s) {
        tm__put(out, "{\"sequence\":");
        tm__put_string(out, text);
        tm__put(out, ",\"labels\":[");
        for (size_t i = 0; i < n_labels; i++) {
            if (i) tm__put(out, ",");
            tm__put_string(out, labels[idx[i]]);
        }
        tm__put(out, "],\"scores\":[");
        for (size_t i = 0; i < n_labels; i++) {
            if (i) tm__put(out, ",");
            tm__put_number(out, scores[idx[i]]);
        }
        tm__put(out, "]}");
    }
    free(scores);
    free(ent);
    free(idx);
    tm_tensor_free(logits);
    return s;
}

static tm_status call(tm_pipeline *p, const tm_json *inputs, const tm_json *options, tm__buf *out,
                      tm_error *err) {
    const char *template;
    int multi;
    tm_status s = tm__opt_string(options, "hypothesis_template", "This example is {}.", &template, err);
    if (!s) s = tm__opt_bool(options, "multi_label", 0, &multi, err);
    if (s) return s;
    if (inputs->n < 2)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "zero-shot-classification takes [texts, candidate_labels]");
    int64_t entail = tm__repo_label_id(p->repo, "entailment");
    if (entail < 0) entail = 2; /* transformers.js's fallback, with a warning there */
    int64_t contra = tm__repo_label_id(p->repo, "contradiction");
    if (contra < 0) contra = tm__repo_label_id(p->repo, "not_entailment");
    if (contra < 0) contra = 0;
    const char **texts = NULL, **labels = NULL;
    char **hyp = NULL;
    size_t n, n_labels = 0;
    int batched, labels_batched;
    s = tm__strings(&inputs->items[0], "texts", &texts, &n, &batched, err);
    if (!s) s = tm__strings(&inputs->items[1], "candidate_labels", &labels, &n_labels, &labels_batched, err);
    if (!s && !(hyp = calloc(n_labels, sizeof *hyp))) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; !s && i < n_labels; i++)
        if (!(hyp[i] = fill_template(template, labels[i]))) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    int each = multi || n_labels == 1;
    if (!s && batched) tm__put(out, "[");
    for (size_t t = 0; !s && t < n; t++) {
        if (t) tm__put(out, ",");
        s = one_text(p, texts[t], labels, (const char *const *)hyp, n_labels, each, entail, contra, out, err);
    }
    if (!s && batched) tm__put(out, "]");
    for (size_t i = 0; hyp && i < n_labels; i++) free(hyp[i]);
    free(hyp);
    free(texts);
    free(labels);
    return s;
}

const tm__task tm__task_zero_shot_classification = {"zero-shot-classification", NULL, check, call, 0, 0, NULL};
