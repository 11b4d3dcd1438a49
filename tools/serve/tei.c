/* Text Embeddings Inference-compatible routes of transmuter serve: POST /embed (rows of
 * floats), /predict (labels and scores of a sequence classifier: texts or sentence pairs,
 * raw_scores) and /rerank (a cross-encoder, i.e. a classifier with one label, scores a
 * query against each text; sorted best first). TEI serves one model: here the first that
 * can, or the one a "model" key names (an extension). truncate false (TEI's default) refuses
 * an input over the model's length with 413; true cuts it (at the end only: a
 * truncation_direction of Left is refused). Errors as TEI's {"error", "error_type"}. Not
 * the pipelines: the scheduler batches the requests into text-classification calls. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "serve.h"

#define ERR(status, ...) tm__serve_error(rs, SURFACE_TEI, status, __VA_ARGS__)

static serve_model *pick(serve_server *s, const tm_json *body, int caps, const char *what, serve_response *rs) {
    const tm_json *name = tm_json_get(body, "model");
    if (name && name->type != TM_JSON_STRING) {
        ERR(422, "'model' must be a string");
        return NULL;
    }
    serve_model *m = tm__serve_find_model(s, name ? name->string : NULL, caps);
    if (!m) {
        if (name) ERR(404, "no model '%s' that serves %s", name->string, what);
        else ERR(404, "no model loaded serves %s", what);
    }
    return m;
}

static int truthy(const tm_json *body, const char *key, int dflt, int *out, serve_response *rs) {
    const tm_json *v = tm_json_get(body, key);
    *out = dflt;
    if (!v || v->type == TM_JSON_NULL) return 0;
    if (v->type != TM_JSON_BOOL) {
        ERR(422, "'%s' must be true or false", key);
        return -1;
    }
    *out = v->number != 0;
    return 0;
}

/* TEI's truncate (false: an input over the model's length is refused) and
 * truncation_direction (only Right, the pipelines' cut): 0, or -1 with the error made. */
static int truncation(const tm_json *body, int *truncate, serve_response *rs) {
    if (truthy(body, "truncate", 0, truncate, rs)) return -1;
    const tm_json *d = tm_json_get(body, "truncation_direction");
    if (!d || d->type == TM_JSON_NULL) return 0;
    if (d->type != TM_JSON_STRING || (strcmp(d->string, "Right") && strcmp(d->string, "Left") &&
                                      strcmp(d->string, "right") && strcmp(d->string, "left"))) {
        ERR(422, "'truncation_direction' must be \"Right\" or \"Left\"");
        return -1;
    }
    if (tolower((unsigned char)d->string[0]) == 'l') {
        ERR(422, "'truncation_direction' Left is not supported: inputs are cut at their end (Right)");
        return -1;
    }
    return 0;
}

/* With truncate false: each input (and its pair) must fit the model's length with its
 * special tokens, as TEI checks. 0, or -1 with a 413 made. Texts the tokenizer refuses
 * (bad UTF-8) pass here: the pipeline names them. */
static int check_lengths(const serve_model *m, const char *const *texts, const char *const *pairs, size_t n,
                         serve_response *rs) {
    if (!m->tok || m->max_context <= 0) return 0;
    for (size_t i = 0; i < n; i++) {
        const char *pair = pairs ? pairs[i] : NULL;
        tm_encoding *e = NULL;
        if (tm_tokenizer_encode(m->tok, texts[i], strlen(texts[i]), pair, pair ? strlen(pair) : 0, NULL, &e, NULL))
            continue;
        size_t got = tm_encoding_n(e);
        tm_encoding_free(e);
        if ((int64_t)got > m->max_context) {
            ERR(413, "input %zu has %zu tokens; the model takes at most %lld (send \"truncate\": true to cut it)",
                i, got, (long long)m->max_context);
            return -1;
        }
    }
    return 0;
}

static void embed(serve_server *s, const serve_request *rq, serve_response *rs) {
    tm_json *body = tm__serve_parse_body(rq, rs, SURFACE_TEI);
    if (!body) return;
    serve_batch_job job;
    memset(&job, 0, sizeof job);
    const char **texts = NULL;
    size_t n = 0;
    int normalize, truncate;
    serve_model *m = pick(s, body, SERVE_EMBED, "embeddings", rs);
    if (!m || truthy(body, "normalize", 1, &normalize, rs) || truncation(body, &truncate, rs)) goto done;
    if (tm__serve_texts(tm_json_get(body, "inputs"), "inputs", s, rs, SURFACE_TEI, &texts, &n)) goto done;
    if (!truncate && check_lengths(m, texts, NULL, n, rs)) goto done;
    job.m = m;
    job.options = normalize ? "{\"pooling\":\"auto\",\"normalize\":true}" : "{\"pooling\":\"auto\",\"normalize\":false}";
    job.texts = texts;
    job.n = n;
    int rc = tm__serve_batch_run(s, &job, rq);
    if (tm__serve_batch_status(rc, &job, rs, SURFACE_TEI)) goto done;
    tm__buf *b = &rs->body;
    tm__put(b, "[");
    for (size_t i = 0; i < n; i++) {
        tm__put(b, i ? ",[" : "[");
        for (int k = 0; k < job.dim; k++) {
            if (k) tm__put(b, ",");
            tm__put_number(b, job.vectors[i * (size_t)job.dim + k]);
        }
        tm__put(b, "]");
    }
    tm__put(b, "]");
    rs->status = 200;
    rs->content_type = "application/json";
done:
    free(job.vectors);
    free(job.json);
    free(texts);
    tm_json_free(body);
}

/* /predict's inputs as TEI takes them: "text" and ["text"] are one sequence, ["a", "b"] one
 * pair, [["a"], ["a", "b"], ...] a batch (*batch 1). texts and pairs point into v; 0, or -1
 * with the error made. */
static int predict_inputs(const tm_json *v, serve_server *s, serve_response *rs, const char ***texts,
                          const char ***pairs, size_t *n, int *batch) {
    if (!v) {
        ERR(400, "'inputs' is missing");
        return -1;
    }
    *batch = v->type == TM_JSON_ARRAY && v->n > 0 && v->items[0].type == TM_JSON_ARRAY;
    const tm_json *seqs = *batch ? v->items : v;
    size_t count = *batch ? (size_t)v->n : 1;
    if (v->type != TM_JSON_STRING && v->type != TM_JSON_ARRAY) {
        ERR(400, "'inputs' must be a string, a pair [string, string] or a batch [[string], [string, string], ...]");
        return -1;
    }
    if (*batch && v->n > s->opt.max_inputs) {
        ERR(413, "'inputs' has %d sequences; at most %d are taken", v->n, s->opt.max_inputs);
        return -1;
    }
    *texts = calloc(count, sizeof **texts);
    *pairs = calloc(count, sizeof **pairs);
    if (!*texts || !*pairs) {
        ERR(500, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < count; i++) {
        const tm_json *q = &seqs[i];
        if (q->type == TM_JSON_STRING && !*batch) {
            (*texts)[i] = q->string;
            continue;
        }
        int ok = q->type == TM_JSON_ARRAY && (q->n == 1 || q->n == 2);
        for (int k = 0; ok && k < q->n; k++) ok = q->items[k].type == TM_JSON_STRING;
        if (!ok) {
            if (*batch) ERR(400, "'inputs'[%zu] must be [string] or a pair [string, string]", i);
            else ERR(400, "'inputs' must be a string, a pair [string, string] or a batch [[string], ...]");
            return -1;
        }
        (*texts)[i] = q->items[0].string;
        if (q->n == 2) (*pairs)[i] = q->items[1].string;
    }
    *n = count;
    return 0;
}

static void predict(serve_server *s, const serve_request *rq, serve_response *rs) {
    tm_json *body = tm__serve_parse_body(rq, rs, SURFACE_TEI);
    if (!body) return;
    serve_batch_job job;
    memset(&job, 0, sizeof job);
    const char **texts = NULL, **pairs = NULL;
    size_t n = 0;
    int raw, truncate, batch = 0;
    tm_json *r = NULL;
    serve_model *m = pick(s, body, SERVE_CLASSIFY, "classification", rs);
    if (!m || truthy(body, "raw_scores", 0, &raw, rs) || truncation(body, &truncate, rs)) goto done;
    if (predict_inputs(tm_json_get(body, "inputs"), s, rs, &texts, &pairs, &n, &batch)) goto done;
    if (!truncate && check_lengths(m, texts, pairs, n, rs)) goto done;
    job.m = m;
    /* raw_scores: the logits; a cross-encoder's one label: its sigmoid (TEI's scores) */
    job.options = raw ? "{\"top_k\":null,\"function_to_apply\":\"none\"}" :
                  m->caps & SERVE_RERANK ? "{\"top_k\":null,\"function_to_apply\":\"sigmoid\"}" : "{\"top_k\":null}";
    job.texts = texts;
    job.pairs = pairs;
    job.n = n;
    int rc = tm__serve_batch_run(s, &job, rq);
    if (tm__serve_batch_status(rc, &job, rs, SURFACE_TEI)) goto done;
    /* One sequence: its list alone, as TEI answers; a batch: a list of lists. */
    r = tm_json_parse(job.json, strlen(job.json));
    if (!r || r->type != TM_JSON_ARRAY || (size_t)r->n != n) {
        ERR(500, "the pipeline gave an unexpected result");
        goto done;
    }
    tm__put_json(&rs->body, batch ? r : &r->items[0]);
    rs->status = 200;
    rs->content_type = "application/json";
done:
    tm_json_free(r);
    free(job.vectors);
    free(job.json);
    free(texts);
    free(pairs);
    tm_json_free(body);
}

typedef struct ranked_text {
    double score;
    size_t index;
} ranked_text;

static int by_score_desc(const void *a, const void *b) {
    const ranked_text *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? 1 : -1;
    return x->index < y->index ? -1 : x->index > y->index;
}

static void rerank(serve_server *s, const serve_request *rq, serve_response *rs) {
    tm_json *body = tm__serve_parse_body(rq, rs, SURFACE_TEI);
    if (!body) return;
    serve_batch_job job;
    memset(&job, 0, sizeof job);
    const char **texts = NULL, **queries = NULL;
    size_t n = 0;
    int raw, return_text, truncate;
    tm_json *r = NULL;
    ranked_text *order = NULL;
    const tm_json *name = tm_json_get(body, "model");
    serve_model *m = NULL;
    if (name && name->type != TM_JSON_STRING) {
        ERR(422, "'model' must be a string");
        goto done;
    }
    m = tm__serve_find_model(s, name ? name->string : NULL, SERVE_RERANK);
    if (!m) {
        if (name && tm__serve_find_model(s, name->string, ~0))
            ERR(400, "model '%s' is not a re-ranker (a sequence classifier with one label)", name->string);
        else if (name) ERR(404, "no model '%s'", name->string);
        else ERR(404, "no cross-encoder (reranker: a sequence classifier with one label) is loaded");
        goto done;
    }
    if (truthy(body, "raw_scores", 0, &raw, rs) || truthy(body, "return_text", 0, &return_text, rs) ||
        truncation(body, &truncate, rs))
        goto done;
    const tm_json *query = tm_json_get(body, "query"), *tv = tm_json_get(body, "texts");
    if (!query || query->type != TM_JSON_STRING) {
        ERR(400, "'query' must be a string");
        goto done;
    }
    if (tv && tv->type == TM_JSON_ARRAY && tv->n == 0) {
        ERR(400, "'texts' cannot be empty");
        goto done;
    }
    if (!tv || tv->type != TM_JSON_ARRAY) {
        ERR(400, "'texts' must be an array of strings");
        goto done;
    }
    if (tm__serve_texts(tv, "texts", s, rs, SURFACE_TEI, &texts, &n)) goto done;
    queries = malloc(n * sizeof *queries);
    order = malloc(n * sizeof *order);
    if (!queries || !order) {
        ERR(500, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n; i++) queries[i] = query->string;
    if (!truncate && check_lengths(m, queries, texts, n, rs)) goto done;
    job.m = m;
    job.options = raw ? "{\"top_k\":1,\"function_to_apply\":\"none\"}" : "{\"top_k\":1,\"function_to_apply\":\"sigmoid\"}";
    job.texts = queries;
    job.pairs = texts;
    job.n = n;
    int rc = tm__serve_batch_run(s, &job, rq);
    if (tm__serve_batch_status(rc, &job, rs, SURFACE_TEI)) goto done;
    r = tm_json_parse(job.json, strlen(job.json));
    for (size_t i = 0; r && r->type == TM_JSON_ARRAY && (size_t)r->n == n && i < n; i++) {
        const tm_json *sc = tm_json_get(&r->items[i], "score");
        if (!sc || sc->type != TM_JSON_NUMBER) break;
        order[i] = (ranked_text){sc->number, i};
        if (i + 1 == n) goto scored;
    }
    ERR(500, "the pipeline gave an unexpected result");
    goto done;
scored:
    qsort(order, n, sizeof *order, by_score_desc);
    tm__buf *b = &rs->body;
    tm__put(b, "[");
    for (size_t i = 0; i < n; i++) {
        tm__put(b, i ? ",{\"index\":" : "{\"index\":");
        tm__put_int(b, (int64_t)order[i].index);
        if (return_text) {
            tm__put(b, ",\"text\":");
            tm__put_string(b, texts[order[i].index]);
        }
        tm__put(b, ",\"score\":");
        tm__put_number(b, order[i].score);
        tm__put(b, "}");
    }
    tm__put(b, "]");
    rs->status = 200;
    rs->content_type = "application/json";
done:
    tm_json_free(r);
    free(job.vectors);
    free(job.json);
    free(texts);
    free(queries);
    free(order);
    tm_json_free(body);
}

void tm__serve_tei(serve_server *s, const serve_request *rq, serve_response *rs, const char *path) {
    if (!strcmp(path, "/embed")) {
        rs->route = "/embed";
        embed(s, rq, rs);
    } else if (!strcmp(path, "/predict")) {
        rs->route = "/predict";
        predict(s, rq, rs);
    } else {
        rs->route = "/rerank";
        rerank(s, rq, rs);
    }
}

#undef ERR
