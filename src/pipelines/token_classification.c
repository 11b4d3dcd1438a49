/* token-classification: a label per token (the logits' argmax, its softmax score), special
 * tokens and ignore_labels left out; aggregation_strategy "simple" groups neighbouring
 * tokens by their B-/I-/E-/S- tags as transformers.js does. transformers.js has no
 * first/average/max strategies (nor start/end offsets), so neither do we. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pipelines.h"
#include "../core/status.h"

static tm_status check(tm_pipeline *p, tm_error *err) {
    if (tm_model_output_index(p->model, "logits") < 0)
        return tm__fail(err, TM_ERR_UNSUPPORTED, "%s: token-classification needs an output 'logits'", p->onnx_file);
    return TM_OK;
}

typedef struct token {
    const char *entity;
    double score;
    int64_t index;
    char *word;
} token;

/* getTag: "B-PER" -> ('B', "PER"); anything else -> ('I', entity). */
static char tag_of(const char *entity, const char **tag) {
    char c = entity[0];
    if (c && entity[1] == '-' && (c == 'B' || c == 'I' || c == 'E' || c == 'S')) {
        *tag = entity + 2;
        return c;
    }
    *tag = entity;
    return 'I';
}

/* transformers.js's groupEntities over one text's kept tokens. */
static tm_status put_groups(tm_pipeline *p, const token *tk, size_t n, const int64_t *ids, tm__buf *out,
                            tm_error *err) {
    tm__put(out, "[");
    const char *open = NULL;
    size_t start = 0, groups = 0;
    int64_t *gid = malloc((n ? n : 1) * sizeof *gid);
    if (!gid) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    tm_status s = TM_OK;
    for (size_t i = 0; i <= n && !s; i++) {
        const char *tag = NULL;
        char prefix = i < n ? tag_of(tk[i].entity, &tag) : 0;
        int extend = i < n && open && !strcmp(open, tag) && prefix != 'B' && prefix != 'S';
        if (extend) {
            if (prefix == 'E') open = NULL;
            continue;
        }
        if (i > start) {
            /* the group [start, i) ends here */
            double sum = 0;
            for (size_t j = start; j < i; j++) {
                sum += tk[j].score;
                gid[j - start] = ids[tk[j].index];
            }
            char *word = NULL;
            s = tm__decode(p, gid, i - start, 1, &word, err);
            if (s) break;
            const char *gtag;
            tag_of(tk[start].entity, &gtag);
            if (groups++) tm__put(out, ",");
            tm__put(out, "{\"entity_group\":");
            tm__put_string(out, gtag);
            tm__put(out, ",\"score\":");
            tm__put_number(out, sum / (double)(i - start));
            tm__put(out, ",\"word\":");
            tm__put_string(out, word);
            tm__put(out, "}");
            free(word);
        }
        start = i;
        open = prefix == 'S' ? NULL : tag;
    }
    free(gid);
    tm__put(out, "]");
    return s;
}

static tm_status call(tm_pipeline *p, const tm_json *inputs, const tm_json *options, tm__buf *out,
                      tm_error *err) {
    const char *strategy;
    tm_status s = tm__opt_string(options, "aggregation_strategy", "none", &strategy, err);
    if (s) return s;
    if (strcmp(strategy, "none") && strcmp(strategy, "simple"))
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT,
                        "Invalid aggregation_strategy: \"%s\". Must be one of \"none\" or \"simple\".", strategy);
    const tm_json *ignore = tm_json_get(options, "ignore_labels");
    if (ignore && ignore->type == TM_JSON_NULL) ignore = NULL;
    if (ignore && ignore->type != TM_JSON_ARRAY)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "option ignore_labels must be an array of labels");
    int batched;
    tm__batch b = {0};
    s = tm__encode_texts(p, inputs, &b, &batched, err);
    tm_tensor *logits = NULL;
    const char *name = "logits";
    if (!s) s = tm__batch_run(p, &b, 1, &name, &logits, err);
    if (!s && (tm_tensor_rank(logits) != 3 || tm_tensor_dims(logits)[0] != b.B || tm_tensor_dims(logits)[1] != b.T))
        s = tm__fail(err, TM_ERR_SHAPE, "%s: logits are not (batch, tokens, labels)", p->onnx_file);
    size_t L = s ? 0 : (size_t)tm_tensor_dims(logits)[2];
    double *v = malloc((L ? L : 1) * sizeof *v), *sc = malloc((L ? L : 1) * sizeof *sc);
    token *tk = malloc((size_t)(b.T > 0 ? b.T : 1) * sizeof *tk);
    if (!s && (!v || !sc || !tk)) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    char (*fallbacks)[24] = s ? NULL : malloc((size_t)(b.T > 0 ? b.T : 1) * sizeof *fallbacks);
    if (!s && !fallbacks) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    if (!s && batched) tm__put(out, "[");
    for (int64_t i = 0; !s && i < b.B; i++) {
        const float *x = (const float *)tm_tensor_data(logits) + (size_t)i * b.T * L;
        const int64_t *ids = b.ids + i * b.T;
        size_t nt = 0;
        for (int64_t j = 0; !s && j < b.T; j++) {
            size_t best = 0;
            for (size_t c = 0; c < L; c++) {
                v[c] = x[j * L + c];
                if (v[c] > v[best]) best = c;
            }
            const char *entity = tm__repo_label(p->repo, (int64_t)best);
            if (!entity) {
                snprintf(fallbacks[j], sizeof fallbacks[j], "LABEL_%zu", best);
                entity = fallbacks[j];
            }
            int ignored = !ignore && !strcmp(entity, "O"); /* the default: ["O"] */
            for (int k = 0; ignore && k < ignore->n; k++)
                if (ignore->items[k].type == TM_JSON_STRING && !strcmp(ignore->items[k].string, entity)) ignored = 1;
            if (ignored) continue;
            char *word = NULL;
            s = tm__decode(p, &ids[j], 1, 1, &word, err);
            if (s) break;
            if (!*word) { /* a special token */
                free(word);
                continue;
            }
            tm__softmax(v, L, sc);
            tk[nt++] = (token){entity, (float)sc[best], j, word};
        }
        if (i) tm__put(out, ",");
        if (!s && !strcmp(strategy, "simple")) {
            s = put_groups(p, tk, nt, ids, out, err);
        } else if (!s) {
            tm__put(out, "[");
            for (size_t t = 0; t < nt; t++) {
                if (t) tm__put(out, ",");
                tm__put(out, "{\"entity\":");
                tm__put_string(out, tk[t].entity);
                tm__put(out, ",\"score\":");
                tm__put_number(out, tk[t].score);
                tm__put(out, ",\"index\":");
                tm__put_int(out, tk[t].index);
                tm__put(out, ",\"word\":");
                tm__put_string(out, tk[t].word);
                tm__put(out, "}");
            }
            tm__put(out, "]");
        }
        for (size_t t = 0; t < nt; t++) free(tk[t].word);
    }
    if (!s && batched) tm__put(out, "]");
    free(fallbacks);
    free(v);
    free(sc);
    free(tk);
    tm_tensor_free(logits);
    tm__batch_free(&b);
    return s;
}

const tm__task tm__task_token_classification = {"token-classification", "ner", check, call, 0, 0, NULL};
