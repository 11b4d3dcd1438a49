/* Text Embeddings Inference-compatible routes of transmuter serve: POST /embed (rows of
 * floats), /predict (labels and scores of a sequence classifier) and /rerank. TEI serves
 * one model: here the first that can, or the one a "model" key names (an extension).
 * Errors as TEI's {"error", "error_type"}. Not done yet: pairs for /predict, raw_scores,
 * and /rerank (a cross-encoder needs sentence pairs, which the text-classification
 * pipeline does not take yet): it answers 404 saying so. */
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

static void embed(serve_server *s, const serve_request *rq, serve_response *rs) {
    tm_json *body = tm__serve_parse_body(rq, rs, SURFACE_TEI);
    if (!body) return;
    serve_batch_job job;
    memset(&job, 0, sizeof job);
    const char **texts = NULL;
    size_t n = 0;
    int normalize;
    serve_model *m = pick(s, body, SERVE_EMBED, "embeddings", rs);
    if (!m || truthy(body, "normalize", 1, &normalize, rs)) goto done;
    if (tm__serve_texts(tm_json_get(body, "inputs"), "inputs", s, rs, SURFACE_TEI, &texts, &n)) goto done;
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

static void predict(serve_server *s, const serve_request *rq, serve_response *rs) {
    tm_json *body = tm__serve_parse_body(rq, rs, SURFACE_TEI);
    if (!body) return;
    serve_batch_job job;
    memset(&job, 0, sizeof job);
    const char **texts = NULL;
    size_t n = 0;
    int raw;
    tm_json *r = NULL;
    serve_model *m = pick(s, body, SERVE_CLASSIFY, "classification", rs);
    if (!m || truthy(body, "raw_scores", 0, &raw, rs)) goto done;
    if (raw) {
        ERR(422, "'raw_scores' is not supported yet");
        goto done;
    }
    const tm_json *inputs = tm_json_get(body, "inputs");
    if (tm__serve_texts(inputs, "inputs", s, rs, SURFACE_TEI, &texts, &n)) goto done;
    job.m = m;
    job.options = "{\"top_k\":null}";
    job.texts = texts;
    job.n = n;
    int rc = tm__serve_batch_run(s, &job, rq);
    if (tm__serve_batch_status(rc, &job, rs, SURFACE_TEI)) goto done;
    /* One input: its list alone, as TEI answers; several: a list of lists. */
    r = tm_json_parse(job.json, strlen(job.json));
    if (!r || r->type != TM_JSON_ARRAY || (size_t)r->n != n) {
        ERR(500, "the pipeline gave an unexpected result");
        goto done;
    }
    tm__put_json(&rs->body, inputs->type == TM_JSON_STRING ? &r->items[0] : r);
    rs->status = 200;
    rs->content_type = "application/json";
done:
    tm_json_free(r);
    free(job.vectors);
    free(job.json);
    free(texts);
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
        ERR(404, "no cross-encoder (reranker) is loaded: /rerank needs one, and this server does not "
                 "serve rerankers yet");
    }
}

#undef ERR
