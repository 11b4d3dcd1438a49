/* transmuter serve's scheduler: one worker runs encoder requests in dynamic batches (the
 * first queued input waits up to max_wait_ms for others of the same model and options, up
 * to max_batch inputs, then one tm_pipeline_call runs them all); another runs generation
 * by continuous batching: each model's sequences are rows of one tm_batch (up to
 * gen_batch of them), stepped together by one run of the model per token; a new sequence
 * joins between steps once its prompt has run (its first token), and leaves the batch
 * when it ends, is cancelled or times out. Sequences beyond the rows wait for one to free
 * up; a model whose export takes no position_ids (a batch would need equal lengths) steps
 * each sequence alone, in turn. A bounded count of queued inputs and sequences gives
 * back-pressure. Not the HTTP layer, not the JSON of the APIs. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "serve.h"

/* A model's generation batch: its rows' sequences (job, index). Only the gen worker (or the
 * synchronous pump) touches it. */
typedef struct gen_batch {
    tm_batch *b;                /* NULL until the first sequence; also NULL when alone */
    int rows, alone, tried;     /* alone: the export steps sequences one by one */
    serve_gen_job **job;
    int *seq;
} gen_batch;

struct serve_sched {
    gen_batch *gen;             /* per model */
    pthread_mutex_t lock;
    pthread_cond_t work;        /* the workers wait here for something to do */
    pthread_cond_t changed;     /* waiters wait here for their job to move */
    serve_batch_job *batch_head, *batch_tail;
    serve_gen_job *gen_new;     /* submitted, not yet stepped (first in, first out) */
    serve_gen_job *gen_active;
    size_t queued;              /* inputs and sequences queued or running */
    int stop;
    pthread_t batch_thread, gen_thread;
    int threads;
};

double tm__serve_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void cond_wait_until(pthread_cond_t *c, pthread_mutex_t *m, double until) {
    struct timespec ts;
    ts.tv_sec = (time_t)until;
    ts.tv_nsec = (long)((until - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) ts.tv_nsec = 999999999L;
    pthread_cond_timedwait(c, m, &ts);
}

static void pump_locked(serve_server *s);

/* Waits a little for a job to move (lock held); synchronous mode does the work instead. */
static void wait_changed(serve_server *s) {
    serve_sched *q = s->sched;
    if (s->opt.synchronous) {
        pump_locked(s);
        return;
    }
    cond_wait_until(&q->changed, &q->lock, tm__serve_now() + 0.05);
}

/* ---- Encoder batches ----------------------------------------------------------------------- */

static int same_batch(const serve_batch_job *a, const serve_batch_job *b) {
    return a->m == b->m && !strcmp(a->options, b->options);
}

static size_t ready_inputs(const serve_sched *q) {
    size_t n = 0;
    for (const serve_batch_job *j = q->batch_head; j; j = j->next)
        if (same_batch(j, q->batch_head) && j->state == 0) n += j->n;
    return n;
}

static void unlink_batch_job(serve_sched *q, serve_batch_job *job) {
    serve_batch_job **pp = &q->batch_head, *prev = NULL;
    while (*pp && *pp != job) {
        prev = *pp;
        pp = &(*pp)->next;
    }
    if (!*pp) return;
    *pp = job->next;
    if (q->batch_tail == job) q->batch_tail = prev;
    job->next = NULL;
}

static void fail_jobs(serve_batch_job **jobs, int n, tm_status st, const char *msg) {
    for (int i = 0; i < n; i++) {
        jobs[i]->status = st;
        snprintf(jobs[i]->message, sizeof jobs[i]->message, "%s", msg);
    }
}

/* Splits a batch's result among its jobs. */
static void split_result(serve_batch_job **jobs, int n_jobs, size_t total, const char *result) {
    tm_json *r = tm_json_parse(result, strlen(result));
    const tm_json *dims = tm_json_get(r, "dims"), *data = tm_json_get(r, "data");
    if (dims && data) {
        /* embeddings: a (total, D) tensor */
        if (dims->type != TM_JSON_ARRAY || dims->n != 2 || data->type != TM_JSON_ARRAY ||
            dims->items[0].number != (double)total || dims->items[1].number < 1 ||
            (double)data->n != dims->items[0].number * dims->items[1].number) {
            fail_jobs(jobs, n_jobs, TM_ERR_RUNTIME, "the pipeline gave an unexpected result shape");
        } else {
            int dim = (int)dims->items[1].number;
            size_t row = 0;
            for (int j = 0; j < n_jobs; j++) {
                jobs[j]->dim = dim;
                jobs[j]->vectors = malloc(jobs[j]->n * (size_t)dim * sizeof(float));
                if (!jobs[j]->vectors) {
                    fail_jobs(jobs + j, 1, TM_ERR_NO_MEMORY, "out of memory");
                    row += jobs[j]->n;
                    continue;
                }
                for (size_t k = 0; k < jobs[j]->n * (size_t)dim; k++)
                    jobs[j]->vectors[k] = (float)data->items[row * (size_t)dim + k].number;
                row += jobs[j]->n;
            }
        }
    } else if (r && r->type == TM_JSON_ARRAY && (size_t)r->n == total) {
        /* classification: one list of labels per input */
        size_t at = 0;
        for (int j = 0; j < n_jobs; j++) {
            tm__buf b = {0};
            tm__put(&b, "[");
            for (size_t k = 0; k < jobs[j]->n; k++) {
                if (k) tm__put(&b, ",");
                tm__put_json(&b, &r->items[at + k]);
            }
            tm__put(&b, "]");
            at += jobs[j]->n;
            if (b.oom) {
                free(b.s);
                fail_jobs(jobs + j, 1, TM_ERR_NO_MEMORY, "out of memory");
            } else {
                jobs[j]->json = b.s;
            }
        }
    } else {
        fail_jobs(jobs, n_jobs, TM_ERR_RUNTIME, "the pipeline gave an unexpected result");
    }
    tm_json_free(r);
}

/* Runs jobs as one pipeline call. When it fails and several requests share it, each runs
 * alone: one request's bad text must not fail the others'. */
static void run_batch(serve_batch_job **jobs, int n_jobs, size_t total) {
    tm__buf in = {0};
    tm__put(&in, "[[");
    size_t k = 0;
    for (int j = 0; j < n_jobs; j++)
        for (size_t t = 0; t < jobs[j]->n; t++, k++) {
            if (k) tm__put(&in, ",");
            const char *pair = jobs[j]->pairs ? jobs[j]->pairs[t] : NULL;
            if (pair) tm__put(&in, "{\"text\":");
            tm__put_string(&in, jobs[j]->texts[t]);
            if (pair) {
                tm__put(&in, ",\"text_pair\":");
                tm__put_string(&in, pair);
                tm__put(&in, "}");
            }
        }
    tm__put(&in, "]]");
    tm_error err;
    memset(&err, 0, sizeof err);
    char *result = NULL;
    tm_status st = in.oom ? TM_ERR_NO_MEMORY : tm_pipeline_call(jobs[0]->m->pipe, in.s, jobs[0]->options, &result, &err);
    free(in.s);
    if (st != TM_OK && n_jobs > 1) {
        for (int j = 0; j < n_jobs; j++) run_batch(jobs + j, 1, jobs[j]->n);
        return;
    }
    for (int j = 0; j < n_jobs; j++) jobs[j]->status = TM_OK;
    if (st != TM_OK) fail_jobs(jobs, n_jobs, st, err.message[0] ? err.message : tm_status_name(st));
    else split_result(jobs, n_jobs, total, result);
    free(result);
}

/* Takes the first queued job and those of the same model and options after it (up to
 * max_batch inputs), runs them as one call and hands each its rows. Lock held on entry and
 * on return; released while the model runs. */
static void batch_round(serve_server *s) {
    serve_sched *q = s->sched;
    serve_batch_job *first = q->batch_head;
    if (!first) return;
    size_t total = 0;
    int n_jobs = 0, cap = 16;
    serve_batch_job **jobs = malloc((size_t)cap * sizeof *jobs);
    for (serve_batch_job *j = q->batch_head, *next; j && jobs; j = next) {
        next = j->next;
        if (!same_batch(j, first)) continue;
        if (n_jobs && total + j->n > (size_t)s->opt.max_batch) break;
        if (n_jobs == cap) {
            serve_batch_job **g = realloc(jobs, (size_t)(cap *= 2) * sizeof *jobs);
            if (!g) break;
            jobs = g;
        }
        unlink_batch_job(q, j);
        j->state = 1;
        jobs[n_jobs++] = j;
        total += j->n;
    }
    if (!jobs) {   /* out of memory: fail the first alone */
        unlink_batch_job(q, first);
        first->status = TM_ERR_NO_MEMORY;
        snprintf(first->message, sizeof first->message, "out of memory");
        first->state = 2;
        q->queued -= first->n;
        pthread_cond_broadcast(&q->changed);
        return;
    }
    pthread_mutex_unlock(&q->lock);
    run_batch(jobs, n_jobs, total);
    tm__serve_metrics_batch(s->metrics, total);

    pthread_mutex_lock(&q->lock);
    for (int j = 0; j < n_jobs; j++) {
        jobs[j]->state = 2;
        q->queued -= jobs[j]->n;
    }
    free(jobs);
    pthread_cond_broadcast(&q->changed);
}

int tm__serve_batch_run(serve_server *s, serve_batch_job *job, const serve_request *rq) {
    serve_sched *q = s->sched;
    pthread_mutex_lock(&q->lock);
    if (q->stop) {
        pthread_mutex_unlock(&q->lock);
        return 503;
    }
    if (q->queued + job->n > (size_t)s->opt.queue) {
        pthread_mutex_unlock(&q->lock);
        return 429;
    }
    job->state = 0;
    job->next = NULL;
    job->queued_at = tm__serve_now();
    if (q->batch_tail) q->batch_tail->next = job;
    else q->batch_head = job;
    q->batch_tail = job;
    q->queued += job->n;
    pthread_cond_broadcast(&q->work);
    double deadline = job->queued_at + s->opt.timeout_ms / 1e3;
    int rc = 0;
    while (job->state != 2) {
        /* A batch that runs is let finish; one still queued leaves the queue. */
        if (job->state == 0) {
            int gone = rq->gone && rq->gone(rq->gone_ctx);
            if (gone || tm__serve_now() > deadline || q->stop) {
                unlink_batch_job(q, job);
                q->queued -= job->n;
                rc = gone ? 499 : q->stop ? 503 : 504;
                break;
            }
        }
        wait_changed(s);
    }
    pthread_mutex_unlock(&q->lock);
    return rc;
}

/* ---- Generation ---------------------------------------------------------------------------- */

/* How much of the decoded new text will not change with more tokens: the library's
 * streaming rule (whole up to a newline or CJK character, else up to the last space), less
 * what could still be the start of a stop string. */
static size_t settled(const serve_gen_job *job, const char *text, size_t n) {
    size_t end = tm_generator_stable_length(text, n);
    size_t hold = 0;
    for (int k = 0; k < job->n_stops; k++) {
        size_t l = strlen(job->stops[k]);
        if (l > hold) hold = l;
    }
    if (hold > 1 && end > n - (hold - 1 < n ? hold - 1 : n)) {
        end = n - (hold - 1 < n ? hold - 1 : n);
        while (end > 0 && ((unsigned char)text[end] & 0xC0) == 0x80) end--;
    }
    return end;
}

static int is_eos(const serve_model *m, int32_t t) {
    for (int i = 0; i < m->gen.n_eos_token_ids; i++)
        if (m->gen.eos_token_ids[i] == t) return 1;
    return 0;
}

/* One step of sequence i, without the lock; the text to hand out and whether it ended. */
typedef struct step_result {
    char *text;                 /* the whole new text so far (or up to a stop string) */
    size_t len, end;            /* its length; how much of it is final */
    const char *finish;         /* NULL: goes on */
    size_t n_new;
    char message[1024];
} step_result;

/* What sequence i's step gave (st, token, done, err): its text so far, and whether and why
 * it ended. Without the lock. */
static void step_outcome(serve_gen_job *job, int i, tm_status st, int32_t token, int done,
                         tm_error *err, step_result *r) {
    memset(r, 0, sizeof *r);
    tm_generator *g = job->gens[i];
    if (st == TM_OK && job->after_step) job->after_step(job, i, token, done);
    const int32_t *ids = NULL;
    size_t n = 0;
    if (st == TM_OK) st = tm_generator_sequence(g, 0, &ids, &n, err);
    size_t plen = tm_generator_prompt_length(g);
    if (st == TM_OK) {
        r->n_new = n - plen;
        st = tm_tokenizer_decode(job->m->tok, ids + plen, n - plen, 1, -1, &r->text, &r->len, err);
    }
    if (st != TM_OK) {
        snprintf(r->message, sizeof r->message, "%s", err->message[0] ? err->message : tm_status_name(st));
        r->finish = "error";
        return;
    }
    /* The earliest stop string ends the text where it starts. */
    size_t cut = r->len;
    for (int k = 0; k < job->n_stops; k++) {
        const char *hit = memmem(r->text, r->len, job->stops[k], strlen(job->stops[k]));
        if (hit && (size_t)(hit - r->text) < cut) cut = (size_t)(hit - r->text);
    }
    if (cut < r->len) {
        r->len = cut;
        r->text[cut] = 0;
        r->finish = "stop";
    } else if (done) {
        r->finish = is_eos(job->m, token) || (int64_t)r->n_new < job->max_new ? "stop" : "length";
    }
    r->end = r->finish ? r->len : settled(job, r->text, r->len);
}

/* The model's batch, made at its first sequence (NULL: its sequences step alone). */
static gen_batch *batch_of(serve_server *s, serve_gen_job *job) {
    gen_batch *gb = &s->sched->gen[job->m - s->models];
    if (gb->tried) return gb->alone ? NULL : gb;
    gb->tried = 1;
    gb->rows = s->opt.gen_batch;
    tm_error err;
    memset(&err, 0, sizeof err);
    gb->job = calloc((size_t)gb->rows, sizeof *gb->job);
    gb->seq = calloc((size_t)gb->rows, sizeof *gb->seq);
    if (tm_model_input_index(job->m->model, "position_ids") < 0 || job->m->gen.num_beams > 1 ||
        !gb->job || !gb->seq ||
        tm_batch_create(job->m->model, gb->rows, &gb->b, &err) != TM_OK) {
        free(gb->job);
        free(gb->seq);
        gb->job = NULL;
        gb->seq = NULL;
        gb->alone = 1;
        return NULL;
    }
    return gb;
}

static void finish_sequence(serve_server *s, serve_gen_job *job, int i, const char *finish) {
    if (job->seq_row[i] >= 0) {   /* it leaves its batch (a step may have freed it already) */
        gen_batch *gb = &s->sched->gen[job->m - s->models];
        int row = job->seq_row[i];
        if (gb->job[row] == job && gb->seq[row] == i) {
            tm_batch_remove(gb->b, row);
            gb->job[row] = NULL;
        }
        job->seq_row[i] = -1;
    }
    job->emit(job, i, NULL, 0, finish);
    job->seq_done[i] = 1;
    job->n_done++;
}

/* Hands out what sequence i's step gave. Lock held. */
static void deliver(serve_server *s, serve_gen_job *job, int i, step_result *r) {
    if (r->end > job->seq_sent[i]) {
        job->emit(job, i, r->text + job->seq_sent[i], r->end - job->seq_sent[i], NULL);
        job->seq_sent[i] = r->end;
    }
    if (r->finish) {
        if (!strcmp(r->finish, "error")) {
            job->failed = 1;
            snprintf(job->message, sizeof job->message, "%s", r->message);
        }
        job->completion_tokens += r->n_new;
        finish_sequence(s, job, i, r->finish);
    }
    free(r->text);
    r->text = NULL;
    pthread_cond_broadcast(&s->sched->changed);
}

/* Sequence i's first step (its prompt), or a step alone; it joins its model's batch when
 * there is one with a free row. Lock held on entry and return (released meanwhile). */
static void start_or_step(serve_server *s, serve_gen_job *job, int i) {
    serve_sched *q = s->sched;
    gen_batch *gb = batch_of(s, job);
    int started = job->seq_started[i];
    if (gb && !started && tm_batch_count(gb->b) >= gb->rows) return;   /* waits for a row */
    tm_generator *g = job->gens[i];
    tm_error err;
    memset(&err, 0, sizeof err);
    int32_t token = -1;
    int done = 0, row = -1;
    step_result r;
    pthread_mutex_unlock(&q->lock);
    tm_status st = gb ? tm_batch_add(gb->b, g, &row, &token, &done, &err)
                      : tm_generator_step(g, &token, &done, &err);
    step_outcome(job, i, st, token, done, &err, &r);
    tm__serve_metrics_tokens(s->metrics, 0, 1);
    pthread_mutex_lock(&q->lock);
    job->seq_started[i] = 1;
    if (row >= 0) {
        gb->job[row] = job;
        gb->seq[row] = i;
        job->seq_row[i] = row;
    }
    deliver(s, job, i, &r);
}

/* One step of a model's batch, and each row's outcome. Lock held on entry and return. */
static void step_batch(serve_server *s, gen_batch *gb) {
    serve_sched *q = s->sched;
    int32_t tokens[4096];
    int done[4096];
    tm_error err;
    memset(&err, 0, sizeof err);
    tm__serve_metrics_gen_step(s->metrics, (size_t)tm_batch_count(gb->b));
    pthread_mutex_unlock(&q->lock);
    tm_status st = tm_batch_step(gb->b, tokens, done, &err);
    pthread_mutex_lock(&q->lock);
    for (int row = 0; row < gb->rows; row++) {
        serve_gen_job *job = gb->job[row];
        if (!job) continue;
        int i = gb->seq[row];
        step_result r;
        if (tokens[row] < 0 && st != TM_OK) {   /* the model's run failed: every row ends */
            memset(&r, 0, sizeof r);
            snprintf(r.message, sizeof r.message, "%s", err.message[0] ? err.message : tm_status_name(st));
            r.finish = "error";
        } else {
            pthread_mutex_unlock(&q->lock);
            step_outcome(job, i, TM_OK, tokens[row], done[row] == 1, &err, &r);
            pthread_mutex_lock(&q->lock);
            tm__serve_metrics_tokens(s->metrics, 0, 1);
        }
        if (done[row] == 1) {   /* it has left the batch */
            gb->job[row] = NULL;
            job->seq_row[i] = -1;
            if (!r.finish) r.finish = "stop";
        }
        deliver(s, job, i, &r);
    }
}

/* One round: sequences cancelled or timed out end; new ones run their prompts and join
 * their model's batch while it has rows; each batch steps once; sequences of a model
 * without one step alone. Lock held on entry and return. */
/* Sequences cancelled (a client gone), timed out or stopped end, and jobs whose sequences
 * have all ended leave (their requests answered). Lock held. */
static void end_jobs(serve_server *s) {
    serve_sched *q = s->sched;
    for (serve_gen_job *job = q->gen_active; job; job = job->next)
        for (int i = 0; i < job->n; i++) {
            if (job->seq_done[i]) continue;
            if (job->cancelled || q->stop || tm__serve_now() > job->deadline) {
                if (!job->cancelled && !q->stop) job->timed_out = 1;
                finish_sequence(s, job, i, "cancelled");
            }
        }
    for (serve_gen_job **pp = &q->gen_active; *pp;) {
        serve_gen_job *job = *pp;
        if (job->n_done == job->n) {
            job->emit(job, -1, NULL, 0, NULL);
            *pp = job->next;
            job->next = NULL;
            q->queued -= (size_t)job->queued_n;
            job->done = 1;
            pthread_cond_broadcast(&q->changed);
        } else {
            pp = &job->next;
        }
    }
}

/* New sequences' prompts run in one round at most (the streams in the batch wait for
 * them: their next token comes after). */
enum { PROMPTS_PER_ROUND = 4 };

/* One round: what has ended leaves; up to PROMPTS_PER_ROUND new sequences run their
 * prompts and join their model's batch while it has rows; each batch steps once;
 * sequences of a model without one step alone. Ended work is let go again after the
 * prompts and after the steps, so that a cancelled request does not wait a whole round.
 * Lock held on entry and return (released around every model run). */
static void gen_round(serve_server *s) {
    serve_sched *q = s->sched;
    /* the new requests join */
    serve_gen_job **tail = &q->gen_active;
    while (*tail) tail = &(*tail)->next;
    *tail = q->gen_new;
    q->gen_new = NULL;
    end_jobs(s);
    int prompts = 0;
    for (serve_gen_job *job = q->gen_active; job; job = job->next)
        for (int i = 0; i < job->n; i++) {
            if (job->seq_done[i] || job->cancelled) continue;
            if (!job->seq_started[i] && prompts >= PROMPTS_PER_ROUND) continue;
            /* not started, or stepping alone (a model without a batch) */
            if (!job->seq_started[i] || (job->seq_row[i] < 0 && !batch_of(s, job))) {
                prompts += !job->seq_started[i];
                start_or_step(s, job, i);
            }
        }
    end_jobs(s);
    for (int m = 0; m < s->n_models; m++) {
        gen_batch *gb = &q->gen[m];
        if (gb->b && tm_batch_count(gb->b) > 0) step_batch(s, gb);
    }
    end_jobs(s);
}

int tm__serve_gen_submit(serve_server *s, serve_gen_job *job) {
    serve_sched *q = s->sched;
    job->seq_done = calloc((size_t)job->n, sizeof *job->seq_done);
    job->seq_sent = calloc((size_t)job->n, sizeof *job->seq_sent);
    job->seq_started = calloc((size_t)job->n, sizeof *job->seq_started);
    job->seq_row = malloc((size_t)job->n * sizeof *job->seq_row);
    if (!job->seq_done || !job->seq_sent || !job->seq_started || !job->seq_row) return 503;
    for (int i = 0; i < job->n; i++) job->seq_row[i] = -1;
    pthread_mutex_lock(&q->lock);
    if (q->stop) {
        pthread_mutex_unlock(&q->lock);
        return 503;
    }
    if (q->queued + (size_t)job->n > (size_t)s->opt.queue) {
        pthread_mutex_unlock(&q->lock);
        return 429;
    }
    job->deadline = tm__serve_now() + s->opt.timeout_ms / 1e3;
    job->queued_n = job->n;
    job->next = NULL;
    serve_gen_job **tail = &q->gen_new;
    while (*tail) tail = &(*tail)->next;
    *tail = job;
    q->queued += (size_t)job->n;
    pthread_cond_broadcast(&q->work);
    pthread_mutex_unlock(&q->lock);
    return 0;
}

int tm__serve_gen_wait(serve_server *s, serve_gen_job *job, const serve_request *rq) {
    serve_sched *q = s->sched;
    pthread_mutex_lock(&q->lock);
    while (!job->done) {
        if (!job->cancelled && rq->gone && rq->gone(rq->gone_ctx)) job->cancelled = 1;
        wait_changed(s);
    }
    pthread_mutex_unlock(&q->lock);
    return job->cancelled ? 499 : job->timed_out ? 504 : 0;
}

void tm__serve_gen_cancel(serve_server *s, serve_gen_job *job) {
    serve_sched *q = s->sched;
    pthread_mutex_lock(&q->lock);
    job->cancelled = 1;
    while (!job->done) wait_changed(s);
    pthread_mutex_unlock(&q->lock);
}

struct serve_stream {
    serve_server *s;
    serve_gen_job *job;
    void (*free_job)(serve_gen_job *);
    int (*gone)(void *);
    void *gone_ctx;
};

serve_stream *tm__serve_gen_stream(serve_server *s, serve_gen_job *job, const serve_request *rq,
                                   void (*free_job)(serve_gen_job *)) {
    serve_stream *st = calloc(1, sizeof *st);
    if (!st) return NULL;
    st->s = s;
    st->job = job;
    st->free_job = free_job;
    st->gone = rq->gone;
    st->gone_ctx = rq->gone_ctx;
    return st;
}

ssize_t tm__serve_stream_read(serve_stream *st, char *buf, size_t max) {
    serve_sched *q = st->s->sched;
    serve_gen_job *job = st->job;
    pthread_mutex_lock(&q->lock);
    while (job->out.n == job->out_read && !job->done) {
        if (!job->cancelled && st->gone && st->gone(st->gone_ctx)) job->cancelled = 1;
        wait_changed(st->s);
    }
    size_t k = job->out.n - job->out_read;
    if (k > max) k = max;
    if (k) memcpy(buf, job->out.s + job->out_read, k);
    job->out_read += k;
    pthread_mutex_unlock(&q->lock);
    return k ? (ssize_t)k : -1;
}

void tm__serve_stream_free(serve_stream *st) {
    if (!st) return;
    tm__serve_gen_cancel(st->s, st->job);
    st->free_job(st->job);
    free(st);
}

/* ---- Workers ------------------------------------------------------------------------------- */

static void *batch_worker(void *arg) {
    serve_server *s = arg;
    serve_sched *q = s->sched;
    pthread_mutex_lock(&q->lock);
    while (!q->stop) {
        if (!q->batch_head) {
            pthread_cond_wait(&q->work, &q->lock);
            continue;
        }
        double until = q->batch_head->queued_at + s->opt.max_wait_ms / 1e3;
        if (ready_inputs(q) < (size_t)s->opt.max_batch && tm__serve_now() < until) {
            cond_wait_until(&q->work, &q->lock, until);
            continue;
        }
        batch_round(s);
    }
    pthread_mutex_unlock(&q->lock);
    return NULL;
}

static void *gen_worker(void *arg) {
    serve_server *s = arg;
    serve_sched *q = s->sched;
    pthread_mutex_lock(&q->lock);
    for (;;) {
        if (!q->gen_new && !q->gen_active) {
            if (q->stop) break;
            pthread_cond_wait(&q->work, &q->lock);
            continue;
        }
        gen_round(s);   /* after stop: one last round that ends every job */
    }
    pthread_mutex_unlock(&q->lock);
    return NULL;
}

static void pump_locked(serve_server *s) {
    serve_sched *q = s->sched;
    while (q->batch_head) batch_round(s);
    if (q->gen_new || q->gen_active) gen_round(s);
}

void tm__serve_pump(serve_server *s) {
    pthread_mutex_lock(&s->sched->lock);
    pump_locked(s);
    pthread_mutex_unlock(&s->sched->lock);
}

size_t tm__serve_queue_depth(serve_server *s) {
    pthread_mutex_lock(&s->sched->lock);
    size_t n = s->sched->queued;
    pthread_mutex_unlock(&s->sched->lock);
    return n;
}

tm_status tm__serve_start(serve_server *s, tm_error *err) {
    serve_sched *q = calloc(1, sizeof *q);
    s->metrics = tm__serve_metrics_new();
    if (q) q->gen = calloc((size_t)(s->n_models > 0 ? s->n_models : 1), sizeof *q->gen);
    if (!q || !q->gen || !s->metrics) {
        if (q) free(q->gen);
        free(q);
        tm__serve_metrics_free(s->metrics);
        s->metrics = NULL;
        snprintf(err->message, sizeof err->message, "out of memory");
        return TM_ERR_NO_MEMORY;
    }
    pthread_mutex_init(&q->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&q->work, &ca);
    pthread_cond_init(&q->changed, &ca);
    pthread_condattr_destroy(&ca);
    s->sched = q;
    s->started = (long)time(NULL);
    if (s->opt.synchronous) return TM_OK;
    if (pthread_create(&q->batch_thread, NULL, batch_worker, s) != 0) {
        snprintf(err->message, sizeof err->message, "cannot start a thread");
        return TM_ERR_RUNTIME;
    }
    if (pthread_create(&q->gen_thread, NULL, gen_worker, s) != 0) {
        pthread_mutex_lock(&q->lock);
        q->stop = 1;
        pthread_cond_broadcast(&q->work);
        pthread_mutex_unlock(&q->lock);
        pthread_join(q->batch_thread, NULL);
        snprintf(err->message, sizeof err->message, "cannot start a thread");
        return TM_ERR_RUNTIME;
    }
    q->threads = 2;
    return TM_OK;
}

void tm__serve_halt(serve_server *s) {
    serve_sched *q = s->sched;
    if (!q) return;
    pthread_mutex_lock(&q->lock);
    q->stop = 1;
    pthread_cond_broadcast(&q->work);
    pthread_cond_broadcast(&q->changed);
    pthread_mutex_unlock(&q->lock);
    if (q->threads) {
        pthread_join(q->batch_thread, NULL);
        pthread_join(q->gen_thread, NULL);
        q->threads = 0;
    } else if (s->opt.synchronous) {
        tm__serve_pump(s);
    }
}

void tm__serve_stop(serve_server *s) {
    serve_sched *q = s->sched;
    if (q) {
        tm__serve_halt(s);
        pthread_mutex_destroy(&q->lock);
        pthread_cond_destroy(&q->work);
        pthread_cond_destroy(&q->changed);
        for (int m = 0; q->gen && m < s->n_models; m++) {
            tm_batch_free(q->gen[m].b);
            free(q->gen[m].job);
            free(q->gen[m].seq);
        }
        free(q->gen);
        free(q);
        s->sched = NULL;
    }
    for (int i = 0; i < s->n_models; i++) tm__serve_model_free(&s->models[i]);
    tm__serve_metrics_free(s->metrics);
    s->metrics = NULL;
}
