/* fill-mask: the top_k tokens for the first mask token of each text, with their softmax
 * scores, the token's text and the whole text decoded with it in place, as transformers.js
 * returns them. Only the first mask of a text is filled, as there. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pipelines.h"
#include "../core/status.h"

static tm_status check(tm_pipeline *p, tm_error *err) {
    if (tm_model_output_index(p->model, "logits") < 0)
        return tm__fail(err, TM_ERR_UNSUPPORTED, "%s: fill-mask needs an output 'logits'", p->onnx_file);
    if (!tm_tokenizer_special_token(p->tok, TM_SPECIAL_MASK, NULL))
        return tm__fail(err, TM_ERR_UNSUPPORTED, "%s: the tokenizer has no mask token (fill-mask needs one)",
                        p->repo->source);
    return TM_OK;
}

static tm_status one_row(tm_pipeline *p, const float *x, size_t V, int64_t *ids, int64_t T, int64_t at,
                         size_t k, double *v, double *sc, size_t *idx, tm__buf *out, tm_error *err) {
    for (size_t c = 0; c < V; c++) v[c] = x[(size_t)at * V + c];
    tm__softmax(v, V, sc);
    for (size_t c = 0; c < V; c++) sc[c] = (float)sc[c]; /* a float32 tensor there */
    tm_status s = tm__argsort_desc(sc, V, idx, err);
    tm__put(out, "[");
    int64_t mask_id = ids[at];
    for (size_t j = 0; !s && j < k; j++) {
        int64_t id = (int64_t)idx[j];
        char *token = NULL, *sequence = NULL;
        s = tm__decode(p, &id, 1, 0, &token, err);
        ids[at] = id;
        if (!s) s = tm__decode(p, ids, (size_t)T, 1, &sequence, err);
        ids[at] = mask_id;
        if (!s) {
            if (j) tm__put(out, ",");
            tm__put(out, "{\"score\":");
            tm__put_number(out, sc[idx[j]]);
            tm__put(out, ",\"token\":");
            tm__put_int(out, id);
            tm__put(out, ",\"token_str\":");
            tm__put_string(out, token);
            tm__put(out, ",\"sequence\":");
            tm__put_string(out, sequence);
            tm__put(out, "}");
        }
        free(token);
        free(sequence);
    }
    tm__put(out, "]");
    return s;
}

static tm_status call(tm_pipeline *p, const tm_json *inputs, const tm_json *options, tm__buf *out,
                      tm_error *err) {
    int64_t top_k;
    tm_status s = tm__opt_int(options, "top_k", 5, -1, &top_k, err);
    if (s) return s;
    if (top_k < -1) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "option top_k must be a positive integer or null");
    int32_t mask_id = -1;
    const char *mask = tm_tokenizer_special_token(p->tok, TM_SPECIAL_MASK, &mask_id);
    int batched;
    tm__batch b = {0};
    s = tm__encode_texts(p, inputs, &b, &batched, err);
    /* every text must hold the mask before anything runs */
    int64_t *at = s ? NULL : malloc((size_t)b.B * sizeof *at);
    if (!s && !at) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (int64_t i = 0; !s && i < b.B; i++) {
        at[i] = -1;
        for (int64_t t = 0; t < b.T && at[i] < 0; t++)
            if (b.ids[i * b.T + t] == mask_id) at[i] = t;
        if (at[i] < 0) s = tm__fail(err, TM_ERR_INVALID_ARGUMENT, "Mask token (%s) not found in text.", mask);
    }
    tm_tensor *logits = NULL;
    const char *name = "logits";
    if (!s) s = tm__batch_run(p, &b, 1, &name, &logits, err);
    if (!s && (tm_tensor_rank(logits) != 3 || tm_tensor_dims(logits)[0] != b.B || tm_tensor_dims(logits)[1] != b.T))
        s = tm__fail(err, TM_ERR_SHAPE, "%s: logits are not (batch, tokens, vocabulary)", p->onnx_file);
    size_t V = s ? 1 : (size_t)tm_tensor_dims(logits)[2];
    size_t k = top_k < 0 || (size_t)top_k > V ? V : (size_t)top_k;
    double *v = malloc(V * sizeof *v), *sc = malloc(V * sizeof *sc);
    size_t *idx = malloc(V * sizeof *idx);
    if (!s && (!v || !sc || !idx)) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    if (!s && batched) tm__put(out, "[");
    for (int64_t i = 0; !s && i < b.B; i++) {
        if (i) tm__put(out, ",");
        const float *x = (const float *)tm_tensor_data(logits) + (size_t)i * (size_t)b.T * V;
        s = one_row(p, x, V, b.ids + i * b.T, b.T, at[i], k, v, sc, idx, out, err);
    }
    if (!s && batched) tm__put(out, "]");
    free(v);
    free(sc);
    free(idx);
    free(at);
    tm_tensor_free(logits);
    tm__batch_free(&b);
    return s;
}

const tm__task tm__task_fill_mask = {"fill-mask", NULL, check, call, 0, 0, NULL};
