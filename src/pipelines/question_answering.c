/* question-answering: the best answer spans in the context, scored as transformers.js does
 * (softmax of the start and end logits over the context's tokens, a span's score the
 * product, spans with start <= end, best first) and decoded from their tokens. A context
 * longer than the model is cut with the rest of the pair (no striding over windows, as
 * there); answers carry no character offsets, as there. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pipelines.h"
#include "../core/status.h"

static tm_status check(tm_pipeline *p, tm_error *err) {
    if (tm_model_output_index(p->model, "start_logits") < 0 || tm_model_output_index(p->model, "end_logits") < 0)
        return tm__fail(err, TM_ERR_UNSUPPORTED, "%s: question-answering needs outputs 'start_logits' and 'end_logits'",
                        p->onnx_file);
    return TM_OK;
}

typedef struct span {
    double score;
    int64_t start, end;           /* order within equal scores: start, then end */
} span;

static int best_first(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? 1 : -1;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* One row's answers: a list of up to k {"answer","score"}, or the one object when flat. */
static tm_status one_row(tm_pipeline *p, const int64_t *ids, int64_t T, const float *start_logits,
                         const float *end_logits, size_t k, int flat, int32_t sep_id, tm__buf *out,
                         tm_error *err) {
    double *st = malloc((size_t)T * sizeof *st), *en = malloc((size_t)T * sizeof *en);
    double *ps = malloc((size_t)T * sizeof *ps), *pe = malloc((size_t)T * sizeof *pe);
    size_t n_spans = (size_t)T * (size_t)(T + 1) / 2;
    span *spans = malloc((n_spans ? n_spans : 1) * sizeof *spans);
    tm_status s = st && en && ps && pe && spans ? TM_OK : tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    if (!s) {
        int64_t sep = -1;
        for (int64_t i = 0; i < T && sep < 0; i++)
            if (ids[i] == sep_id) sep = i;
        for (int64_t i = 0; i < T; i++) {
            st[i] = start_logits[i];
            en[i] = end_logits[i];
            /* the question, special tokens and padding cannot be in the answer; [CLS] stays
             * in the softmax (some models mark "no answer" with it) */
            if (i >= 1 && (i <= sep || tm__is_special_id(p, ids[i]))) st[i] = en[i] = -INFINITY;
        }
        tm__softmax(st, (size_t)T, ps);
        tm__softmax(en, (size_t)T, pe);
        ps[0] = pe[0] = 0;
        size_t m = 0;
        for (int64_t a = 0; a < T; a++)
            for (int64_t e = a; e < T; e++) spans[m++] = (span){ps[a] * pe[e], a, e};
        qsort(spans, m, sizeof *spans, best_first);
        if (k > m) k = m;
        if (!flat) tm__put(out, "[");
        for (size_t j = 0; !s && j < k; j++) {
            char *answer = NULL;
            s = tm__decode(p, ids + spans[j].start, (size_t)(spans[j].end - spans[j].start + 1), 1, &answer, err);
            if (s) break;
            if (j) tm__put(out, ",");
            tm__put(out, "{\"answer\":");
            tm__put_string(out, answer);
            tm__put(out, ",\"score\":");
            tm__put_number(out, spans[j].score);
            tm__put(out, "}");
            free(answer);
        }
        if (!flat) tm__put(out, "]");
    }
    free(st);
    free(en);
    free(ps);
    free(pe);
    free(spans);
    return s;
}

static tm_status call(tm_pipeline *p, const tm_json *inputs, const tm_json *options, tm__buf *out,
                      tm_error *err) {
    int64_t top_k;
    /* top_k null: Math.min(spans, null) is 0 there, so no answers */
    tm_status s = tm__opt_int(options, "top_k", 1, 0, &top_k, err);
    if (s) return s;
    if (top_k < 0) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "option top_k must be a positive integer");
    if (inputs->n < 2) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "question-answering takes [question, context]");
    const char **questions = NULL, **contexts = NULL;
    size_t n, n_ctx = 0;
    int batched, ctx_batched = 0;
    s = tm__strings(&inputs->items[0], "question", &questions, &n, &batched, err);
    if (!s) s = tm__strings(&inputs->items[1], "context", &contexts, &n_ctx, &ctx_batched, err);
    if (!s && batched != ctx_batched)
        s = tm__fail(err, TM_ERR_INVALID_ARGUMENT, batched ? "text_pair must also be an array"
                     : "When specifying `text_pair`, since `text` is a string, `text_pair` must also be a string (i.e., not an array).");
    if (!s && n != n_ctx) s = tm__fail(err, TM_ERR_INVALID_ARGUMENT, "text and text_pair must have the same length");
    tm__batch b = {0};
    if (!s) s = tm__batch_encode(p, n, questions, contexts, &b, err);
    free(questions);
    free(contexts);
    tm_tensor *logits[2] = {NULL, NULL};
    const char *names[2] = {"start_logits", "end_logits"};
    if (!s) s = tm__batch_run(p, &b, 2, names, logits, err);
    for (int i = 0; !s && i < 2; i++)
        if (tm_tensor_rank(logits[i]) != 2 || tm_tensor_dims(logits[i])[0] != b.B || tm_tensor_dims(logits[i])[1] != b.T)
            s = tm__fail(err, TM_ERR_SHAPE, "%s: %s is not (batch, tokens)", p->onnx_file, names[i]);
    int32_t sep_id = -1;
    tm_tokenizer_special_token(p->tok, TM_SPECIAL_SEP, &sep_id);
    int flat = top_k == 1;
    if (!s && batched) tm__put(out, "[");
    for (int64_t i = 0; !s && i < b.B; i++) {
        if (i) tm__put(out, ",");
        const float *sl = (const float *)tm_tensor_data(logits[0]) + i * b.T;
        const float *el = (const float *)tm_tensor_data(logits[1]) + i * b.T;
        s = one_row(p, b.ids + i * b.T, b.T, sl, el, (size_t)top_k, flat, sep_id, out, err);
    }
    if (!s && batched) tm__put(out, "]");
    tm_tensor_free(logits[0]);
    tm_tensor_free(logits[1]);
    tm__batch_free(&b);
    return s;
}

const tm__task tm__task_question_answering = {"question-answering", NULL, check, call, 0, 0, NULL};
