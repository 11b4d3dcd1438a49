/* transmuter serve's router: the API key, the routes of each API surface, /health and
 * /metrics, and error bodies in each surface's shape. Knows nothing of sockets: a request
 * in, a response out (tools/serve/http.c carries them; fuzz/fuzz_serve_request.c calls
 * this directly). No route reaches the file system. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "serve.h"

void tm__serve_options_default(serve_options *o) {
    memset(o, 0, sizeof *o);
    o->host = "127.0.0.1";
    o->port = 8080;
    o->max_batch = 32;
    o->max_wait_ms = 5;
    o->gen_batch = 16;
    o->queue = 256;
    o->max_body = 4 << 20;
    o->timeout_ms = 120000;
    o->max_tokens = 4096;
    o->max_inputs = 2048;
    o->max_n = 8;
    o->grace_s = 10;
}

void tm__serve_response_clear(serve_response *rs) {
    free(rs->body.s);
    tm__serve_stream_free(rs->stream);
    memset(rs, 0, sizeof *rs);
}

serve_model *tm__serve_find_model(serve_server *s, const char *name, int caps) {
    for (int i = 0; i < s->n_models; i++)
        if ((!name || !strcmp(s->models[i].name, name)) && (s->models[i].caps & caps)) return &s->models[i];
    return NULL;
}

void tm__serve_error(serve_response *rs, int surface, int status, const char *fmt, ...) {
    char msg[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    free(rs->body.s);
    memset(&rs->body, 0, sizeof rs->body);
    rs->status = status;
    rs->content_type = "application/json";
    rs->json_length = 0;
    if (status == 429 || status == 503) rs->retry_after = 1;
    tm__buf *b = &rs->body;
    if (surface == SURFACE_OPENAI) {
        const char *type = status == 401 ? "authentication_error" : status == 404 ? "not_found_error" :
                           status == 429 ? "rate_limit_error" : status >= 500 ? "server_error" :
                           "invalid_request_error";
        tm__put(b, "{\"error\":{\"message\":");
        tm__put_string(b, msg);
        tm__put(b, ",\"type\":");
        tm__put_string(b, type);
        tm__put(b, ",\"param\":null,\"code\":");
        if (status == 401) tm__put(b, "\"invalid_api_key\"");
        else if (status == 404) tm__put(b, "\"model_not_found\"");
        else tm__put(b, "null");
        tm__put(b, "}}");
    } else if (surface == SURFACE_TEI) {
        const char *type = status == 413 || status == 422 || status == 400 ? "Validation" :
                           status == 429 ? "Overloaded" : status == 401 ? "Unauthorized" :
                           status == 404 ? "NotFound" : "Backend";
        tm__put(b, "{\"error\":");
        tm__put_string(b, msg);
        tm__put(b, ",\"error_type\":");
        tm__put_string(b, type);
        tm__put(b, "}");
    } else {
        tm__put(b, "{\"error\":");
        tm__put_string(b, msg);
        tm__put(b, "}");
    }
}

/* The key compared in time that does not depend on where they differ. */
static int key_matches(const char *given, const char *key) {
    size_t n = strlen(key), m = strlen(given);
    unsigned diff = (unsigned)(n ^ m);
    for (size_t i = 0; i < n; i++) diff |= (unsigned char)key[i] ^ (unsigned char)(i < m ? given[i] : 0);
    return diff == 0;
}

static int authorized(const serve_server *s, const serve_request *rq) {
    if (!s->opt.api_key) return 1;
    const char *h = rq->authorization;
    if (!h || strncasecmp(h, "Bearer ", 7)) return 0;
    h += 7;
    while (*h == ' ') h++;
    return key_matches(h, s->opt.api_key);
}

static int surface_of(const char *path) {
    if (!strncmp(path, "/v1/", 4)) return SURFACE_OPENAI;
    if (!strncmp(path, "/v2", 3)) return SURFACE_OIP;
    if (!strcmp(path, "/embed") || !strcmp(path, "/predict") || !strcmp(path, "/rerank")) return SURFACE_TEI;
    return SURFACE_OPENAI;
}

static void plain(serve_response *rs, int status, const char *type, const char *body) {
    rs->status = status;
    rs->content_type = type;
    tm__put(&rs->body, body);
}

void tm__serve_handle(serve_server *s, const serve_request *rq, serve_response *rs) {
    memset(rs, 0, sizeof *rs);
    const char *path = rq->path ? rq->path : "/";
    int surface = surface_of(path);
    rs->route = "other";
    /* Probes answer without the key, and say when the server is stopping. */
    if (!strcmp(path, "/health") || !strcmp(path, "/v2/health/live") || !strcmp(path, "/v2/health/ready")) {
        rs->route = !strcmp(path, "/health") ? "/health" : !strcmp(path, "/v2/health/live") ? "/v2/health/live" :
                    "/v2/health/ready";
        if (strcmp(rq->method, "GET") && strcmp(rq->method, "HEAD")) {
            tm__serve_error(rs, surface, 405, "%s takes GET", path);
            return;
        }
        int live = !strcmp(path, "/v2/health/live");
        if (!live && atomic_load(&s->draining)) {
            tm__serve_error(rs, surface, 503, "the server is shutting down");
            return;
        }
        if (!strcmp(path, "/health")) plain(rs, 200, "application/json", "{\"status\":\"ok\"}");
        else plain(rs, 200, "application/json", live ? "{\"live\":true}" : "{\"ready\":true}");
        return;
    }
    if (!authorized(s, rq)) {
        tm__serve_error(rs, surface, 401, "a valid API key is needed (Authorization: Bearer KEY)");
        return;
    }
    if (rq->body_too_large) {
        tm__serve_error(rs, surface, 413, "the request body is over %zu bytes", s->opt.max_body);
        return;
    }
    if (!strcmp(path, "/metrics")) {
        rs->route = "/metrics";
        if (strcmp(rq->method, "GET")) {
            tm__serve_error(rs, surface, 405, "/metrics takes GET");
            return;
        }
        rs->status = 200;
        rs->content_type = "text/plain; version=0.0.4";
        tm__serve_metrics_render(s, &rs->body);
        return;
    }
    if (atomic_load(&s->draining)) {
        tm__serve_error(rs, surface, 503, "the server is shutting down");
        return;
    }
    if (!strncmp(path, "/v1/", 4)) tm__serve_openai(s, rq, rs, path);
    else if (surface == SURFACE_TEI) tm__serve_tei(s, rq, rs, path);
    else if (!strcmp(path, "/v2") || !strncmp(path, "/v2/", 4)) tm__serve_oip(s, rq, rs, path);
    else tm__serve_error(rs, surface, 404, "no route %s %s", rq->method, path);
    if (rs->body.oom) tm__serve_error(rs, surface, 500, "out of memory");
}

/* ---- Helpers the surfaces share ------------------------------------------------------------ */

tm_json *tm__serve_parse_body(const serve_request *rq, serve_response *rs, int surface) {
    if (strcmp(rq->method, "POST")) {
        tm__serve_error(rs, surface, 405, "%s takes POST", rq->path);
        return NULL;
    }
    tm_json *j = rq->body ? tm_json_parse(rq->body, rq->body_len) : NULL;
    if (!j) {
        tm__serve_error(rs, surface, 400, "the request body is not valid JSON");
        return NULL;
    }
    if (j->type != TM_JSON_OBJECT) {
        tm_json_free(j);
        tm__serve_error(rs, surface, 400, "the request body must be a JSON object");
        return NULL;
    }
    return j;
}

int tm__serve_texts(const tm_json *v, const char *what, serve_server *s, serve_response *rs, int surface,
                    const char ***texts, size_t *n) {
    if (!v) {
        tm__serve_error(rs, surface, 400, "'%s' is missing", what);
        return -1;
    }
    if (v->type == TM_JSON_STRING) {
        *texts = malloc(sizeof **texts);
        if (!*texts) goto oom;
        (*texts)[0] = v->string;
        *n = 1;
        return 0;
    }
    if (v->type != TM_JSON_ARRAY || v->n == 0) {
        tm__serve_error(rs, surface, 400, "'%s' must be a string or a non-empty array of strings", what);
        return -1;
    }
    if (v->n > s->opt.max_inputs) {
        tm__serve_error(rs, surface, 413, "'%s' has %d inputs; at most %d are taken", what, v->n, s->opt.max_inputs);
        return -1;
    }
    for (int i = 0; i < v->n; i++)
        if (v->items[i].type != TM_JSON_STRING) {
            tm__serve_error(rs, surface, 400, "'%s'[%d] must be a string (token arrays are not taken)", what, i);
            return -1;
        }
    *texts = malloc((size_t)(unsigned)v->n * sizeof **texts);
    if (!*texts) goto oom;
    for (int i = 0; i < v->n; i++) (*texts)[i] = v->items[i].string;
    *n = (size_t)v->n;
    return 0;
oom:
    tm__serve_error(rs, surface, 500, "out of memory");
    return -1;
}

void tm__serve_put_text(tm__buf *b, const char *s, size_t n) {
    tm__put(b, "\"");
    size_t from = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c == '"' || c == '\\') snprintf(esc, sizeof esc, "\\%c", c);
        else if (c == '\n') snprintf(esc, sizeof esc, "\\n");
        else if (c < 0x20) snprintf(esc, sizeof esc, "\\u%04x", c);
        else continue;
        tm__put_len(b, s + from, i - from);
        tm__put(b, esc);
        from = i + 1;
    }
    tm__put_len(b, s + from, n - from);
    tm__put(b, "\"");
}

int tm__serve_batch_status(int rc, const serve_batch_job *job, serve_response *rs, int surface) {
    if (rc == 429) tm__serve_error(rs, surface, 429, "the queue is full: retry later");
    else if (rc == 503) tm__serve_error(rs, surface, 503, "the server is shutting down");
    else if (rc == 504) tm__serve_error(rs, surface, 504, "the request timed out in the queue");
    else if (rc == 499) tm__serve_error(rs, surface, 499, "the client closed the request");
    else if (job->status != TM_OK) {
        int st = job->status == TM_ERR_INVALID_ARGUMENT || job->status == TM_ERR_PARSE ? 400 : 500;
        tm__serve_error(rs, surface, st, "%s", job->message);
    } else {
        return 0;
    }
    return -1;
}
