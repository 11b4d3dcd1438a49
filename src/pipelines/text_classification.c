/* text-classification: the logits of a sequence-classification model as labelled scores,
 * softmax over the labels, or a sigmoid each when config.json's problem_type is
 * multi_label_classification; the top_k best (null: all) as transformers.js returns them.
 * A text may be a sentence pair, {"text": A, "text_pair": B} (as Python transformers takes
 * it; transformers.js 4.3 has no pairs here), encoded as its tokenizer encodes pairs;
 * function_to_apply ("softmax", "sigmoid", "none": the raw logits) overrides the default as
 * in Python transformers. Not zero-shot classification (its own file). */
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

/* One input: a string (pair NULL) or {"text": A, "text_pair": B} (text_pair optional). */
static tm_status one_input(const tm_json *v, const char *what, int i, const char **text, const char **pair,
                           int *any_pair, tm_error *err) {
    char where[48];
    if (i < 0) snprintf(where, sizeof where, "%s", what);
    else snprintf(where, sizeof where, "%s[%d]", what, i);
    if (v->type == TM_JSON_STRING) {
        *text = v->string, *pair = NULL;
        return TM_OK;
    }
    if (v->type != TM_JSON_OBJECT && i < 0)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT,
                        "%s must be a string or an array of strings (or of {\"text\", \"text_pair\"})", where);
    if (v->type != TM_JSON_OBJECT)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s is not a string (nor {\"text\", \"text_pair\"})", where);
    const tm_json *t = tm_json_get(v, "text"), *tp = tm_json_get(v, "text_pair");
    if (!t || t->type != TM_JSON_STRING)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s.text must be a string", where);
    if (tp && tp->type != TM_JSON_STRING && tp->type != TM_JSON_NULL)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s.text_pair must be a string", where);
    for (int k = 0; k < v->n; k++)
        if (strcmp(v->keys[k], "text") && strcmp(v->keys[k], "text_pair"))
            return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s: unknown key '%s' (text, text_pair)", where, v->keys[k]);
    *text = t->string;
    *pair = tp && tp->type == TM_JSON_STRING ? tp->string : NULL;
    if (*pair) *any_pair = 1;
    return TM_OK;
}

/* The call's first argument: one input, or an array of them (*batched 1), encoded as one
 * batch with the pairs where there are some. */
static tm_status encode_inputs(const tm_pipeline *p, const tm_json *inputs, tm__batch *b, int *batched,
                               tm_error *err) {
    const tm_json *v = inputs && inputs->n > 0 ? &inputs->items[0] : NULL;
    if (!v) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "missing input: texts");
    *batched = v->type == TM_JSON_ARRAY;
    if (*batched && v->n == 0) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "texts: text array must be non-empty");
    size_t n = *batched ? (size_t)v->n : 1;
    const char **texts = malloc(n * sizeof *texts), **pairs = malloc(n * sizeof *pairs);
    tm_status s = texts && pairs ? TM_OK : tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    int any_pair = 0;
    for (size_t i = 0; !s && i < n; i++)
        s = one_input(*batched ? &v->items[i] : v, "texts", *batched ? (int)i : -1, &texts[i], &pairs[i],
                      &any_pair, err);
    if (!s) s = tm__batch_encode(p, n, texts, any_pair ? pairs : NULL, b, err);
    free(texts);
    free(pairs);
    return s;
}

enum { APPLY_DEFAULT, APPLY_SOFTMAX, APPLY_SIGMOID, APPLY_NONE };

static tm_status read_apply(const tm_json *options, int *apply, tm_error *err) {
    const char *f;
    tm_status s = tm__opt_string(options, "function_to_apply", "", &f, err);
    if (s) return s;
    *apply = !*f ? APPLY_DEFAULT : !strcmp(f, "softmax") ? APPLY_SOFTMAX : !strcmp(f, "sigmoid") ? APPLY_SIGMOID :
             !strcmp(f, "none") ? APPLY_NONE : -1;
    if (*apply < 0)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT,
                        "option function_to_apply must be \"softmax\", \"sigmoid\" or \"none\" (not \"%s\")", f);
    return TM_OK;
}

static tm_status call(tm_pipeline *p, const tm_json *inputs, const tm_json *options, tm__buf *out,
                      tm_error *err) {
    int64_t top_k;
    tm_status s = tm__opt_int(options, "top_k", 1, -1, &top_k, err);
    if (s) return s;
    if (top_k < -1 || (top_k < 0 && tm_json_get(options, "top_k")->type != TM_JSON_NULL))
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "option top_k must be a positive integer or null");
    int apply;
    if ((s = read_apply(options, &apply, err))) return s;
    int batched = 0;
    tm__batch b = {0};
    s = encode_inputs(p, inputs, &b, &batched, err);
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
    if (apply == APPLY_DEFAULT)
        apply = !strcmp(p->repo->problem_type, "multi_label_classification") ? APPLY_SIGMOID : APPLY_SOFTMAX;
    size_t k = top_k < 0 || (size_t)top_k > L ? L : (size_t)top_k;
    /* top_k 1 flattens a batch's lists; one text without a batch is unwrapped */
    int flat = top_k == 1, wrap = batched || flat;
    if (!s && wrap) tm__put(out, "[");
    for (size_t i = 0; !s && i < n; i++) {
        for (size_t j = 0; j < L; j++) v[j] = x[i * L + j];
        if (apply == APPLY_SIGMOID)
            for (size_t j = 0; j < L; j++) sc[j] = 1 / (1 + exp(-v[j]));
        else if (apply == APPLY_SOFTMAX)
            tm__softmax(v, L, sc);
        else
            memcpy(sc, v, L * sizeof *sc);
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
