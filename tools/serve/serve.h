/* transmuter serve's internals: the models served, requests and responses that do not
 * depend on the HTTP library (the fuzzer drives the handlers without sockets), the
 * scheduler of encoder batches and generation steps, and the metrics. Not public API, and
 * not part of the library: only the CLI links it. */
#ifndef TM_SERVE_H
#define TM_SERVE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "transmuter.h"
#include "hub/json.h"
#include "pipelines/pipelines.h"

/* ---- Models ----------------------------------------------------------------------------- */

/* What a model can serve (a repository's config.json decides; a bare .onnx file is OIP). */
enum {
    SERVE_EMBED = 1,        /* feature-extraction: /v1/embeddings, /embed */
    SERVE_CLASSIFY = 2,     /* text-classification: /predict */
    SERVE_COMPLETE = 4,     /* a decoder: /v1/completions */
    SERVE_CHAT = 8,         /* a decoder with a chat template: /v1/chat/completions */
    SERVE_TENSORS = 16,     /* a raw ONNX model: /v2/models/{name}/infer */
    SERVE_RERANK = 32       /* a sequence classifier with one label (a cross-encoder): /rerank */
};

typedef struct serve_model {
    char name[128];
    char *path;
    int caps;
    tm_pipeline *pipe;          /* SERVE_EMBED / SERVE_CLASSIFY: only the batch worker calls it */
    tm_tokenizer *tok;          /* usage counts, prompts, decoding */
    tm_model *model;            /* the decoder, or the raw model (tm_model_run is thread-safe) */
    tm_chat_template *tpl;
    char *chat_vars;            /* the special tokens as template variables (JSON object) */
    tm_generation_config gen;   /* config.json + generation_config.json */
    int add_special;            /* plain prompts get the tokenizer's special tokens */
    int64_t max_context;        /* max_position_embeddings (or model_max_length); -1: none */
} serve_model;

/* NAME=PATH or PATH: a repository folder or an .onnx file. threads: intra-op threads. */
tm_status tm__serve_model_load(const char *arg, int threads, serve_model *m, tm_error *err);
void tm__serve_model_free(serve_model *m);

/* ---- Requests and responses --------------------------------------------------------------- */

typedef struct serve_request {
    const char *method;
    const char *path;           /* without the query string */
    const char *body;           /* NUL-terminated copy of the body */
    size_t body_len;
    const char *authorization;  /* the header, or NULL */
    const char *inference_header_length;   /* Inference-Header-Content-Length (OIP binary
                                              data: the body's JSON part), or NULL */
    int body_too_large;         /* over max_body: answered 413, body not kept */
    /* Non-zero when the client has gone away (NULL: it never does). */
    int (*gone)(void *ctx);
    void *gone_ctx;
} serve_request;

typedef struct serve_stream serve_stream;
typedef struct serve_batch_job serve_batch_job;

typedef struct serve_response {
    int status;
    tm__buf body;
    const char *content_type;   /* static */
    const char *route;          /* static: the metrics' route label */
    int retry_after;            /* seconds (0: no header) */
    serve_stream *stream;       /* non-NULL: the body is this stream of server-sent events */
    size_t json_length;         /* > 0: the body is this much JSON, then binary tensor data
                                   (sent as Inference-Header-Content-Length) */
} serve_response;

void tm__serve_response_clear(serve_response *rs);

/* Reads up to max bytes of the stream, waiting for them: the count, or -1 at its end. */
ssize_t tm__serve_stream_read(serve_stream *st, char *buf, size_t max);
/* Cancels what is still running and frees the stream. NULL is a no-op. */
void tm__serve_stream_free(serve_stream *st);

/* ---- The server ---------------------------------------------------------------------------- */

typedef struct serve_options {
    const char *host;
    int port;
    const char *api_key;        /* NULL: none asked */
    int max_batch;              /* inputs per encoder batch */
    int max_wait_ms;            /* how long the first queued input waits for more */
    int gen_batch;              /* sequences per model stepped together (tm_batch rows) */
    int queue;                  /* inputs and sequences queued or running, at most */
    size_t max_body;            /* bytes */
    int timeout_ms;             /* per request, queueing included */
    int max_tokens;             /* new tokens per sequence, at most */
    int max_inputs;             /* inputs per request, at most */
    int max_n;                  /* choices per generation request, at most */
    int grace_s;                /* SIGTERM: how long in-flight work may take to finish */
    int threads;                /* the models' intra-op threads (0: all cores) */
    int synchronous;            /* no worker threads: waiting runs the work (the fuzzer) */
} serve_options;

void tm__serve_options_default(serve_options *o);

typedef struct serve_sched serve_sched;
typedef struct serve_metrics serve_metrics;

typedef struct serve_server {
    serve_options opt;
    serve_model *models;
    int n_models;
    serve_sched *sched;
    serve_metrics *metrics;
    atomic_int draining;        /* SIGTERM seen: new requests get 503 */
    atomic_long next_id;
    long started;               /* time(NULL) at start, for "created" */
} serve_server;

/* Starts the scheduler (and its threads unless opt.synchronous); models already loaded. */
tm_status tm__serve_start(serve_server *s, tm_error *err);
/* Stops the scheduler: what is queued is refused (503), running sequences end; joins the
 * threads. Then the HTTP layer may stop; then tm__serve_stop frees the rest. */
void tm__serve_halt(serve_server *s);
/* Halts if not yet done, frees the scheduler, the metrics and the models. */
void tm__serve_stop(serve_server *s);

/* Answers one request (router.c). Never fails: errors are JSON responses. */
void tm__serve_handle(serve_server *s, const serve_request *rq, serve_response *rs);

serve_model *tm__serve_find_model(serve_server *s, const char *name, int caps);
double tm__serve_now(void);       /* seconds, monotonic */

/* Error bodies in each API surface's shape. */
enum { SURFACE_OPENAI, SURFACE_TEI, SURFACE_OIP };
void tm__serve_error(serve_response *rs, int surface, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The body as a JSON object, or NULL with the error response made (405 when not a POST). */
tm_json *tm__serve_parse_body(const serve_request *rq, serve_response *rs, int surface);
/* A string or an array of strings (at most max_inputs) as pointers into v: 0, or -1 with
 * the error response made. *texts is malloc'ed. */
int tm__serve_texts(const tm_json *v, const char *what, serve_server *s, serve_response *rs, int surface,
                    const char ***texts, size_t *n);
/* n bytes of UTF-8 as a JSON string (NUL as \u0000). */
void tm__serve_put_text(tm__buf *b, const char *s, size_t n);
/* tm__serve_batch_run's answer as an error response (-1), or 0 when the job succeeded. */
int tm__serve_batch_status(int rc, const serve_batch_job *job, serve_response *rs, int surface);

/* The API surfaces (one file each). */
void tm__serve_openai(serve_server *s, const serve_request *rq, serve_response *rs, const char *path);
void tm__serve_tei(serve_server *s, const serve_request *rq, serve_response *rs, const char *path);
void tm__serve_oip(serve_server *s, const serve_request *rq, serve_response *rs, const char *path);

/* ---- The scheduler (scheduler.c) ------------------------------------------------------------ */

/* Encoder inputs of one request, run in a batch with other requests' inputs of the same
 * model and options. */
struct serve_batch_job {
    serve_model *m;
    const char *options;        /* the pipeline's options (static text: batches share it) */
    const char *const *texts;
    const char *const *pairs;   /* NULL, or n second texts (NULL entries: none) */
    size_t n;
    /* results: embeddings (n rows of dim floats) or classification (JSON array of n) */
    float *vectors;
    int dim;
    char *json;
    tm_status status;
    char message[1024];
    /* private */
    double queued_at;
    int state;                  /* 0 queued, 1 running, 2 done */
    struct serve_batch_job *next;
};

/* Queues the job and waits for it (cancelled when the client goes or the request times
 * out). Returns 0 when done (job->status says how), 429 when the queue is full, 504 on
 * timeout, 499 when the client went away, 503 when the server is stopping. */
int tm__serve_batch_run(serve_server *s, serve_batch_job *job, const serve_request *rq);

/* One generation request: n sequences stepped by the generation worker in turn with every
 * other request's. The worker hands text out through emit (under the scheduler's lock):
 * index i's new text, and finish ("stop", "length") when sequence i ends; index -1 once
 * when all have ended. */
typedef struct serve_gen_job serve_gen_job;
typedef void (*serve_emit_fn)(serve_gen_job *job, int index, const char *text, size_t len,
                              const char *finish);

struct serve_gen_job {
    serve_model *m;
    int n;
    tm_generator **gens;        /* n generators, prompts appended; the job owns them */
    size_t prompt_tokens;
    int64_t max_new;
    char **stops;               /* stop strings (owned) */
    int n_stops;
    serve_emit_fn emit;
    /* NULL, or called after each step of sequence i (outside the lock, on the worker) with
     * the token chosen and whether it ended the sequence: the surface's logprobs. */
    void (*after_step)(serve_gen_job *job, int index, int32_t token, int done);
    void *user;
    tm__buf out;                /* what emit wrote, read by the stream or the waiter */
    size_t out_read;
    size_t completion_tokens;
    int timed_out, failed;
    char message[1024];
    /* private */
    double deadline;
    int *seq_done;
    size_t *seq_sent;
    int *seq_started;           /* its first step (the prompt) has run */
    int *seq_row;               /* its row in the model's tm_batch, or -1 */
    int n_done, done, cancelled, queued_n;
    struct serve_gen_job *next;
};

/* Queues the job: 0, or 429 / 503 as tm__serve_batch_run (the job is then not taken). */
int tm__serve_gen_submit(serve_server *s, serve_gen_job *job);
/* Waits until the job has ended (cancelled when the client goes or it times out). */
int tm__serve_gen_wait(serve_server *s, serve_gen_job *job, const serve_request *rq);
/* A stream of the job's output; the stream owns the job from then on (free_job frees it). */
serve_stream *tm__serve_gen_stream(serve_server *s, serve_gen_job *job, const serve_request *rq,
                                   void (*free_job)(serve_gen_job *));
/* Cancels a job still running and waits for the worker to let it go. */
void tm__serve_gen_cancel(serve_server *s, serve_gen_job *job);
size_t tm__serve_queue_depth(serve_server *s);
/* Runs queued work in the caller (synchronous mode). */
void tm__serve_pump(serve_server *s);

/* ---- The HTTP layer (http.c, on libmicrohttpd) ----------------------------------------------- */

typedef struct serve_http serve_http;
/* Listens on opt.host:opt.port (0: any free port): a thread per connection, keep-alive,
 * chunked server-sent events. NULL with err set when it cannot. */
serve_http *tm__serve_http_start(serve_server *s, tm_error *err);
int tm__serve_http_port(const serve_http *h);
/* Stops accepting connections (those open are served on). */
void tm__serve_http_quiesce(serve_http *h);
/* Requests being answered now. */
long tm__serve_http_in_flight(const serve_http *h);
/* Closes every connection and frees h. */
void tm__serve_http_stop(serve_http *h);

/* ---- Metrics (metrics.c) -------------------------------------------------------------------- */

serve_metrics *tm__serve_metrics_new(void);
void tm__serve_metrics_free(serve_metrics *m);
void tm__serve_metrics_request(serve_metrics *m, const char *route, int status, double seconds);
void tm__serve_metrics_batch(serve_metrics *m, size_t inputs);
/* A decode step of a model's batch that stepped `rows` sequences. */
void tm__serve_metrics_gen_step(serve_metrics *m, size_t rows);
void tm__serve_metrics_tokens(serve_metrics *m, size_t prompt, size_t generated);
void tm__serve_metrics_render(serve_server *s, tm__buf *out);

#endif
