/* transmuter serve: models behind HTTP routes (OpenAI, Text Embeddings Inference and Open
 * Inference Protocol v2 compatible; see tools/serve/). This file reads the arguments,
 * loads the models, starts the server and stops it on SIGTERM or SIGINT: no new
 * connections, in-flight work finishes within the grace period, exit 0. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "serve/serve.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: transmuter serve MODEL... [--host 127.0.0.1] [--port 8080] [--api-key KEY]\n"
            "         [--max-batch 32] [--max-wait-ms 5] [--gen-batch 16] [--queue 256]\n"
            "         [--max-body-mb 4] [--timeout-s 120] [--max-tokens 4096] [--grace-s 10]\n"
            "         [--threads N]\n"
            "MODEL: a repository folder or an .onnx file, named by its base name, or NAME=PATH.\n"
            "A repository's config.json decides what it serves: a causal LM /v1/completions\n"
            "(and /v1/chat/completions with a chat template), a sequence classifier /predict\n"
            "(and /rerank when it has one label: a cross-encoder),\n"
            "anything else embeddings (/v1/embeddings, /embed); an .onnx file takes tensors\n"
            "(/v2/models/NAME/infer). Also GET /v1/models, /health, /metrics, /v2/health/live,\n"
            "/v2/health/ready. --api-key (or TRANSMUTER_API_KEY): every route but the health\n"
            "probes needs 'Authorization: Bearer KEY'. --port 0 takes a free port; the line\n"
            "'listening on http://HOST:PORT' on stderr says which. --max-batch / --max-wait-ms:\n"
            "the dynamic batches of encoder requests; --gen-batch: how many sequences of a\n"
            "decoder are stepped together (continuous batching: one run of the model a token\n"
            "for all of them; more wait for a row).\n");
}

static int parse_int(const char *v, int lo, int hi, int *out) {
    char *end = NULL;
    errno = 0;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || errno || end == v || *end || x < lo || x > hi) return -1;
    *out = (int)x;
    return 0;
}

int tm__cmd_serve(int argc, char **argv) {
    serve_server s;
    memset(&s, 0, sizeof s);
    tm__serve_options_default(&s.opt);
    s.opt.api_key = getenv("TRANSMUTER_API_KEY");
    if (s.opt.api_key && !*s.opt.api_key) s.opt.api_key = NULL;
    const char **paths = calloc((size_t)argc + 1, sizeof *paths);
    int n_paths = 0, body_mb = 4, timeout_s = 120;
    if (!paths) return 1;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            free(paths);
            return 0;
        } else if (!strcmp(a, "--host") && v) s.opt.host = argv[++i];
        else if (!strcmp(a, "--api-key") && v) s.opt.api_key = argv[++i];
        else if (!strcmp(a, "--port")) bad = parse_int(v, 0, 65535, &s.opt.port), i++;
        else if (!strcmp(a, "--max-batch")) bad = parse_int(v, 1, 4096, &s.opt.max_batch), i++;
        else if (!strcmp(a, "--max-wait-ms")) bad = parse_int(v, 0, 60000, &s.opt.max_wait_ms), i++;
        else if (!strcmp(a, "--gen-batch")) bad = parse_int(v, 1, 256, &s.opt.gen_batch), i++;
        else if (!strcmp(a, "--queue")) bad = parse_int(v, 1, 1 << 20, &s.opt.queue), i++;
        else if (!strcmp(a, "--max-body-mb")) bad = parse_int(v, 1, 1024, &body_mb), i++;
        else if (!strcmp(a, "--timeout-s")) bad = parse_int(v, 1, 86400, &timeout_s), i++;
        else if (!strcmp(a, "--max-tokens")) bad = parse_int(v, 1, 1 << 20, &s.opt.max_tokens), i++;
        else if (!strcmp(a, "--grace-s")) bad = parse_int(v, 0, 3600, &s.opt.grace_s), i++;
        else if (!strcmp(a, "--threads")) bad = parse_int(v, 0, 1024, &s.opt.threads), i++;
        else if (a[0] != '-') paths[n_paths++] = a;
        else bad = 1;
        if (bad) {
            fprintf(stderr, "transmuter: serve: bad or unknown argument '%s'%s\n", a, v ? "" : " (a value missing?)");
            usage(stderr);
            free(paths);
            return 2;
        }
    }
    s.opt.max_body = (size_t)body_mb << 20;
    s.opt.timeout_ms = timeout_s * 1000;
    if (!n_paths) {
        fprintf(stderr, "transmuter: serve: no model given\n");
        usage(stderr);
        free(paths);
        return 2;
    }
    /* SIGTERM and SIGINT are taken by sigwait below: blocked before any thread starts so
     * that every thread inherits the mask. */
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    int rc = 1;
    tm_error err;
    memset(&err, 0, sizeof err);
    serve_http *http = NULL;
    s.models = calloc((size_t)n_paths, sizeof *s.models);
    if (!s.models) goto out;
    for (int i = 0; i < n_paths; i++) {
        if (tm__serve_model_load(paths[i], s.opt.threads, &s.models[i], &err) != TM_OK) {
            fprintf(stderr, "transmuter: serve: %s: %s\n", paths[i], err.message);
            goto out;
        }
        s.n_models++;
        for (int k = 0; k < i; k++)
            if (!strcmp(s.models[k].name, s.models[i].name)) {
                fprintf(stderr, "transmuter: serve: two models are called '%s' (name them: NAME=PATH)\n",
                        s.models[i].name);
                goto out;
            }
        const serve_model *m = &s.models[i];
        fprintf(stderr, "transmuter: serve: %s (%s):%s%s%s%s%s%s\n", m->name, m->path,
                m->caps & SERVE_EMBED ? " embeddings" : "", m->caps & SERVE_CLASSIFY ? " classification" : "",
                m->caps & SERVE_RERANK ? " reranking" : "",
                m->caps & SERVE_COMPLETE ? " completions" : "", m->caps & SERVE_CHAT ? " chat" : "",
                m->caps & SERVE_TENSORS ? " tensors" : "");
    }
    if (tm__serve_start(&s, &err) != TM_OK) {
        fprintf(stderr, "transmuter: serve: %s\n", err.message);
        goto out;
    }
    if (!(http = tm__serve_http_start(&s, &err))) {
        fprintf(stderr, "transmuter: serve: %s\n", err.message);
        goto out;
    }
    fprintf(stderr, "transmuter: serve: listening on http://%s:%d%s\n", s.opt.host, tm__serve_http_port(http),
            s.opt.api_key ? " (API key required)" : "");
    fflush(stderr);
    int sig = 0;
    sigwait(&stop_signals, &sig);
    fprintf(stderr, "transmuter: serve: %s: no new connections; finishing what runs (at most %d s)\n",
            sig == SIGTERM ? "SIGTERM" : "SIGINT", s.opt.grace_s);
    atomic_store(&s.draining, 1);
    tm__serve_http_quiesce(http);
    double until = tm__serve_now() + s.opt.grace_s;
    while (tm__serve_http_in_flight(http) > 0 && tm__serve_now() < until) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    long left = tm__serve_http_in_flight(http);
    if (left > 0) fprintf(stderr, "transmuter: serve: %ld requests cut short\n", left);
    rc = 0;
out:
    tm__serve_halt(&s);         /* what still runs ends, so that connections can close */
    /* Streams cut short have their last events written: a moment to send them. */
    for (double t = tm__serve_now() + 2; http && tm__serve_http_in_flight(http) > 0 && tm__serve_now() < t;) {
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    tm__serve_http_stop(http);
    tm__serve_stop(&s);
    free(s.models);
    free(paths);
    if (rc == 0) fprintf(stderr, "transmuter: serve: stopped\n");
    return rc;
}
