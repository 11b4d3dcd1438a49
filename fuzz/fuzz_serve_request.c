/* libFuzzer target: transmuter serve's request handling without sockets, from the router
 * through every API surface's JSON reading to the scheduler and back (run from the
 * repository's root, as fuzz/run.sh does). The server holds the tiny repositories of
 * tests/data/pipelines (embeddings, chat, classification) and a tiny raw ONNX model, and
 * runs synchronously: waiting for a batch or a generation step does the work in this
 * thread. The first byte picks the route (255: the first line is the path); the rest is
 * the body. The binary-data routes (OIP infer with Inference-Header-Content-Length) take
 * the header's value from the next two bytes (big-endian; the top bit set: a malformed
 * value). Asserts: every answer is a status from 200 to 599; an error's body is JSON
 * with "error"; a JSON answer parses; a binary answer's JSON part parses and its length
 * is within the body; a stream ends. Generation is capped at 4 new tokens
 * and 2 choices (slow by request is not a finding). Not the HTTP layer (libmicrohttpd's). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../tools/serve/router.c"
#include "../tools/serve/openai.c"
#include "../tools/serve/tei.c"
#include "../tools/serve/oip.c"
#include "../tools/serve/scheduler.c"
#include "../tools/serve/metrics.c"
#include "../tools/serve/models.c"

static const struct {
    const char *method, *path;
    int binary;
} routes[] = {
    {"POST", "/v1/embeddings", 0}, {"POST", "/v1/chat/completions", 0}, {"POST", "/v1/completions", 0},
    {"GET", "/v1/models", 0},      {"POST", "/embed", 0},               {"POST", "/predict", 0},
    {"POST", "/rerank", 0},        {"POST", "/v2/models/model/infer", 0}, {"GET", "/v2/models/model", 0},
    {"GET", "/metrics", 0},        {"GET", "/health", 0},               {"GET", "/v2/health/ready", 0},
    {"POST", "/v2/models/model/infer", 1},
};
enum { N_ROUTES = sizeof routes / sizeof routes[0] };
static serve_server server;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    static const char *models[] = {"tests/data/pipelines/minilm-embed", "tests/data/pipelines/llama-chat",
                                   "tests/data/pipelines/bert-sentiment", "tests/data/tiny/bert/model.onnx"};
    tm__serve_options_default(&server.opt);
    server.opt.synchronous = 1;
    server.opt.threads = 1;
    server.opt.max_tokens = 4;
    server.opt.max_n = 2;
    server.opt.max_inputs = 64;
    server.opt.max_body = 1 << 16;
    server.models = calloc(4, sizeof *server.models);
    tm_error err;
    memset(&err, 0, sizeof err);
    for (int i = 0; i < 4; i++) {
        if (tm__serve_model_load(models[i], 1, &server.models[i], &err) != TM_OK) {
            fprintf(stderr, "fuzz_serve_request: %s: %s (run from the repository's root)\n", models[i], err.message);
            abort();
        }
        server.n_models++;
    }
    if (tm__serve_start(&server, &err) != TM_OK) abort();
    return 0;
}

static void check_json_error(const serve_response *rs) {
    tm_json *j = rs->body.s ? tm_json_parse(rs->body.s, rs->body.n) : NULL;
    if (!j || !tm_json_get(j, "error")) {
        fprintf(stderr, "status %d without a JSON error: %.200s\n", rs->status, rs->body.s ? rs->body.s : "(none)");
        abort();
    }
    tm_json_free(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    char path[256] = "/";
    const char *method = "POST";
    size_t at = 1;
    int binary = 0;
    char header[24];
    if (data[0] == 255) {
        const uint8_t *nl = memchr(data + 1, '\n', size - 1);
        size_t n = nl ? (size_t)(nl - data - 1) : size - 1;
        if (n >= sizeof path) n = sizeof path - 1;
        memcpy(path, data + 1, n);
        path[n] = 0;
        at = nl ? (size_t)(nl - data) + 1 : size;
    } else {
        snprintf(path, sizeof path, "%s", routes[data[0] % N_ROUTES].path);
        method = routes[data[0] % N_ROUTES].method;
        binary = routes[data[0] % N_ROUTES].binary;
        if (binary && size >= 3) {
            unsigned v = (unsigned)data[1] << 8 | data[2];
            if (v & 0x8000) snprintf(header, sizeof header, "%ux", v & 0x7fff);
            else snprintf(header, sizeof header, "%u", v);
            at = 3;
        } else if (binary) {
            return 0;
        }
    }
    size_t body_len = size - at;
    char *body = malloc(body_len + 1);
    if (!body) return 0;
    memcpy(body, data + at, body_len);
    body[body_len] = 0;
    serve_request rq = {.method = method, .path = path, .body = body, .body_len = body_len,
                        .body_too_large = body_len > server.opt.max_body,
                        .inference_header_length = binary ? header : NULL};
    serve_response rs;
    tm__serve_handle(&server, &rq, &rs);
    if (rs.status < 200 || rs.status > 599) {
        fprintf(stderr, "status %d\n", rs.status);
        abort();
    }
    if (rs.stream) {
        char buf[4096];
        while (tm__serve_stream_read(rs.stream, buf, sizeof buf) >= 0) {
        }
    } else if (rs.status != 200) {
        check_json_error(&rs);
    } else if (rs.json_length) {
        tm_json *j = rs.json_length <= rs.body.n ? tm_json_parse(rs.body.s, rs.json_length) : NULL;
        if (!j || !rs.content_type || strcmp(rs.content_type, "application/octet-stream")) {
            fprintf(stderr, "a binary answer whose JSON part (%zu of %zu bytes) does not parse\n", rs.json_length,
                    rs.body.n);
            abort();
        }
        tm_json_free(j);
    } else if (rs.content_type && !strcmp(rs.content_type, "application/json")) {
        tm_json *j = tm_json_parse(rs.body.s, rs.body.n);
        if (!j) {
            fprintf(stderr, "a 200 answer that is not JSON: %.200s\n", rs.body.s);
            abort();
        }
        tm_json_free(j);
    }
    tm__serve_response_clear(&rs);
    free(body);
    return 0;
}
