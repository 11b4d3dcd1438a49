/* feature-extraction: the encoder's hidden states, pooled (mean over the attention mask,
 * the first or last token, or the maximum) and L2-normalized on request, as transformers.js
 * does; "auto" pooling follows the repo's sentence-transformers modules. Not a similarity
 * search: embeddings only. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "pipelines.h"
#include "../core/status.h"

/* transformers.js reads the first of these the model has. */
static const char *const hidden_names[] = {"last_hidden_state", "logits", "token_embeddings"};

static const char *hidden_output(const tm_pipeline *p) {
    for (int i = 0; i < 3; i++)
        if (tm_model_output_index(p->model, hidden_names[i]) >= 0) return hidden_names[i];
    return NULL;
}

static tm_status check(tm_pipeline *p, tm_error *err) {
    if (!hidden_output(p))
        return tm__fail(err, TM_ERR_UNSUPPORTED,
                        "%s: feature-extraction needs an output last_hidden_state, logits or token_embeddings",
                        p->onnx_file);
    return TM_OK;
}

/* h (B, T, H) pooled into out (B, H). */
static void pool(const char *how, const float *h, const int64_t *mask, int64_t B, int64_t T, int64_t H,
                 float *out) {
    for (int64_t b = 0; b < B; b++) {
        const float *hb = h + b * T * H;
        const int64_t *mb = mask + b * T;
        for (int64_t k = 0; k < H; k++) {
            double v = 0;
            if (!strcmp(how, "cls")) {
                v = hb[k];
            } else if (!strcmp(how, "last_token")) {
                v = hb[(T - 1) * H + k]; /* the last position, padded or not, as transformers.js */
            } else if (!strcmp(how, "max")) {
                /* sentence-transformers: padding counts as -1e9 */
                v = -1e9;
                for (int64_t t = 0; t < T; t++)
                    if (mb[t] && hb[t * H + k] > v) v = hb[t * H + k];
            } else {
                double sum = 0, count = 0;
                for (int64_t t = 0; t < T; t++) {
                    count += (double)mb[t];
                    sum += hb[t * H + k] * (double)mb[t];
                }
                v = !strcmp(how, "mean_sqrt_len") ? sum / sqrt(count) : sum / count;
            }
            out[b * H + k] = (float)v;
        }
    }
}

static void normalize(float *x, int64_t rows, int64_t n) {
    for (int64_t r = 0; r < rows; r++) {
        float *v = x + r * n;
        double sum = 0;
        for (int64_t i = 0; i < n; i++) sum += (double)v[i] * v[i];
        double norm = sqrt(sum);
        for (int64_t i = 0; i < n; i++) v[i] = (float)(v[i] / norm);
    }
}

static tm_status options_of(const tm_pipeline *p, const tm_json *options, const char **how,
                            int *norm, tm_error *err) {
    const char *pooling;
    tm_status s = tm__opt_string(options, "pooling", "none", &pooling, err);
    if (s) return s;
    int norm_default = 0;
    if (!strcmp(pooling, "auto")) {
        pooling = p->repo->st_pooling[0] ? p->repo->st_pooling : "mean";
        norm_default = p->repo->st_pooling[0] ? p->repo->st_normalize : 1;
    }
    static const char *const known[][2] = {
        {"none", "none"}, {"mean", "mean"}, {"cls", "cls"}, {"first_token", "cls"}, {"max", "max"},
        {"last_token", "last_token"}, {"eos", "last_token"}, {"mean_sqrt_len", "mean_sqrt_len"}};
    *how = NULL;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(pooling, known[i][0])) *how = known[i][1];
    if (!*how) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "Pooling method '%s' not supported.", pooling);
    if ((s = tm__opt_bool(options, "normalize", norm_default, norm, err))) return s;
    int quantize;
    if ((s = tm__opt_bool(options, "quantize", 0, &quantize, err))) return s;
    if (quantize)
        return tm__fail(err, TM_ERR_UNSUPPORTED, "feature-extraction: option quantize is not supported");
    return TM_OK;
}

/* Rows per group when a batch runs as groups of similar lengths (run_grouped). On the
 * bench (1,000 sentences of 5-60 words, calls of 32, MiniLM fp32, 1 thread) groups of 1, 2
 * and 4 took 10-10.7 s, 8 12 s, 16 14 s, and the whole padded batch 18.8 s; with 2 threads
 * 4 is as fast as 2, and 8 slower. */
enum { GROUP_ROWS = 4, MAX_WORKERS = 64 };

static int by_length(const void *a, const void *b) {
    const int64_t *x = a, *y = b;   /* (length, row) pairs */
    return x[0] != y[0] ? (x[0] < y[0] ? -1 : 1) : (x[1] < y[1] ? -1 : x[1] > y[1]);
}

/* The groups of run_grouped, shared by its workers: each takes the next group not taken,
 * runs it and writes its pooled rows into `all` (rows of different groups never meet). */
typedef struct group_job {
    tm_pipeline *p;
    const tm__batch *b;
    const char *name, *how;
    const int64_t *order;        /* (length, row) pairs, shortest first */
    int64_t n_groups;
    int one_thread;              /* the workers' runs keep to their own thread */
    atomic_llong next;           /* the next group to take */
    atomic_int failed;
    pthread_mutex_t lock;        /* guards all, H and the first error */
    float *all;                  /* (B, H), made by the first group that finishes */
    int64_t H;
    tm_status s;
    tm_error err;
} group_job;

/* Runs group gi in g (GROUP_ROWS x T buffers) and pools it into rows, then into j->all. */
static tm_status run_group(group_job *j, int64_t gi, tm__batch *g, float **rows, tm_error *err) {
    const tm__batch *b = j->b;
    int64_t B = b->B, T = b->T, at = gi * GROUP_ROWS;
    int64_t n = B - at < GROUP_ROWS ? B - at : GROUP_ROWS;
    int64_t t_g = j->order[2 * (at + n - 1)] > 0 ? j->order[2 * (at + n - 1)] : 1;
    g->B = n;
    g->T = t_g;
    for (int64_t i = 0; i < n; i++) {
        int64_t r = j->order[2 * (at + i) + 1];
        memcpy(g->ids + i * t_g, b->ids + r * T, (size_t)t_g * sizeof *g->ids);
        memcpy(g->mask + i * t_g, b->mask + r * T, (size_t)t_g * sizeof *g->mask);
        memcpy(g->types + i * t_g, b->types + r * T, (size_t)t_g * sizeof *g->types);
    }
    tm_tensor *h = NULL;
    tm_status s = tm__batch_run_on(j->p, g, j->one_thread, 1, &j->name, &h, err);
    if (!s && tm_tensor_rank(h) != 3)
        s = tm__fail(err, TM_ERR_SHAPE, "%s: output '%s' has rank %d, not 3 (batch, tokens, hidden)",
                     j->p->onnx_file, j->name, tm_tensor_rank(h));
    const int64_t *d = s ? NULL : tm_tensor_dims(h);
    if (!s && (d[0] != n || d[1] != t_g))
        s = tm__fail(err, TM_ERR_SHAPE, "%s: output '%s' has an unexpected shape", j->p->onnx_file, j->name);
    if (!s) {
        pthread_mutex_lock(&j->lock);
        if (!j->all) {
            j->H = d[2];
            j->all = malloc((size_t)(B * j->H > 0 ? B * j->H : 1) * sizeof *j->all);
            if (!j->all) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        } else if (d[2] != j->H) {
            s = tm__fail(err, TM_ERR_SHAPE, "%s: output '%s' has an unexpected shape", j->p->onnx_file, j->name);
        }
        pthread_mutex_unlock(&j->lock);
    }
    int64_t H = s ? 0 : d[2];
    if (!s && !*rows) {
        *rows = malloc((size_t)(GROUP_ROWS * H > 0 ? GROUP_ROWS * H : 1) * sizeof **rows);
        if (!*rows) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    }
    if (!s) {
        pool(j->how, tm_tensor_data(h), g->mask, n, t_g, H, *rows);
        for (int64_t i = 0; i < n; i++)
            memcpy(j->all + j->order[2 * (at + i) + 1] * H, *rows + i * H, (size_t)H * sizeof *j->all);
    }
    tm_tensor_free(h);
    return s;
}

/* A worker: groups in turn until none is left or one failed; the first error is kept. */
static void *group_worker(void *arg) {
    group_job *j = arg;
    int64_t T = j->b->T;
    size_t cap = (size_t)(GROUP_ROWS * T > 0 ? GROUP_ROWS * T : 1);
    tm__batch g = {0};
    g.ids = malloc(cap * sizeof *g.ids);
    g.mask = malloc(cap * sizeof *g.mask);
    g.types = malloc(cap * sizeof *g.types);
    float *rows = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status s = g.ids && g.mask && g.types ? TM_OK : tm__fail(&err, TM_ERR_NO_MEMORY, "out of memory");
    for (int64_t gi; !s && !atomic_load(&j->failed) && (gi = atomic_fetch_add(&j->next, 1)) < j->n_groups;)
        s = run_group(j, gi, &g, &rows, &err);
    if (s) {
        pthread_mutex_lock(&j->lock);
        if (!j->s) {
            j->s = s;
            j->err = err;
        }
        pthread_mutex_unlock(&j->lock);
        atomic_store(&j->failed, 1);
    }
    free(rows);
    tm__batch_free(&g);
    return NULL;
}

/* Pooled embeddings of a right-padded batch, run as groups of GROUP_ROWS texts of similar
 * lengths, each padded only to its own longest (sentence-transformers sorts by length the
 * same way): a batch of texts of mixed lengths pads to its longest, so most of the work
 * of one run over it is padding. The attention mask keeps a text's tokens from seeing
 * padding, and its positions start at 0 either way, so each row's result is the one the
 * whole padded batch gives it. With the model on several threads the groups run side by
 * side, one per thread, each run's kernels on its own thread (a group of 4 short texts is
 * too little work to split across threads well); a row's result does not depend on which
 * thread ran it. Fills pooled (B, H) and *hidden. */
static tm_status run_grouped(tm_pipeline *p, const tm__batch *b, const char *name, const char *how,
                             float **pooled, int64_t *hidden, tm_error *err) {
    int64_t B = b->B, T = b->T;
    group_job j = {.p = p, .b = b, .name = name, .how = how, .n_groups = (B + GROUP_ROWS - 1) / GROUP_ROWS};
    int64_t *order = malloc((size_t)(B > 0 ? B : 1) * 2 * sizeof *order);
    if (!order) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (int64_t r = 0; r < B; r++) {
        int64_t len = 0;   /* up to its last unmasked position */
        for (int64_t t = 0; t < T; t++)
            if (b->mask[r * T + t]) len = t + 1;
        order[2 * r] = len;
        order[2 * r + 1] = r;
    }
    qsort(order, (size_t)B, 2 * sizeof *order, by_length);
    j.order = order;
    atomic_init(&j.next, 0);
    atomic_init(&j.failed, 0);
    pthread_mutex_init(&j.lock, NULL);
    int workers = p->threads < j.n_groups ? p->threads : (int)j.n_groups;
    if (workers > MAX_WORKERS) workers = MAX_WORKERS;
    j.one_thread = workers > 1;
    pthread_t tid[MAX_WORKERS];
    int started = 0;
    for (int w = 1; w < workers; w++)
        if (pthread_create(&tid[started], NULL, group_worker, &j) == 0) started++;
    group_worker(&j);   /* this thread is a worker too (alone if none could start) */
    for (int w = 0; w < started; w++) pthread_join(tid[w], NULL);
    pthread_mutex_destroy(&j.lock);
    free(order);
    if (j.s) {
        free(j.all);
        tm__error_copy(err, &j.err);
        return j.s;
    }
    *pooled = j.all;
    *hidden = j.H;
    return TM_OK;
}

static tm_status call(tm_pipeline *p, const tm_json *inputs, const tm_json *options, tm__buf *out,
                      tm_error *err) {
    const char *how;
    int norm;
    tm_status s = options_of(p, options, &how, &norm, err);
    if (s) return s;
    int batched;
    tm__batch b = {0};
    s = tm__encode_texts(p, inputs, &b, &batched, err);
    tm_tensor *h = NULL;
    const char *name = hidden_output(p);
    /* Pooled rows of several texts, right-padded, masked: by groups of similar lengths.
     * Not "none" (the padded tensor is the result) nor "last_token" (transformers.js
     * reads the last position, padding or not). */
    if (!s && b.B > GROUP_ROWS && !p->pad_left && strcmp(how, "none") && strcmp(how, "last_token") &&
        tm_model_input_index(p->model, "attention_mask") >= 0) {
        float *pooled = NULL;
        int64_t H = 0;
        s = run_grouped(p, &b, name, how, &pooled, &H, err);
        if (!s) {
            if (norm) normalize(pooled, b.B, H);
            int64_t dims[2] = {b.B, H};
            tm__put_tensor(out, pooled, 2, dims);
        }
        free(pooled);
        tm__batch_free(&b);
        return s;
    }
    if (!s) s = tm__batch_run(p, &b, 1, &name, &h, err);
    if (!s && tm_tensor_rank(h) != 3)
        s = tm__fail(err, TM_ERR_SHAPE, "%s: output '%s' has rank %d, not 3 (batch, tokens, hidden)",
                     p->onnx_file, name, tm_tensor_rank(h));
    if (!s) {
        const int64_t *d = tm_tensor_dims(h);
        float *data = tm_tensor_data(h);
        if (!strcmp(how, "none")) {
            if (norm) normalize(data, d[0] * d[1], d[2]);
            tm__put_tensor(out, data, 3, d);
        } else {
            float *pooled = malloc((size_t)(d[0] * d[2] > 0 ? d[0] * d[2] : 1) * sizeof *pooled);
            if (!pooled) {
                s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
            } else {
                pool(how, data, b.mask, d[0], d[1], d[2], pooled);
                if (norm) normalize(pooled, d[0], d[2]);
                int64_t dims[2] = {d[0], d[2]};
                tm__put_tensor(out, pooled, 2, dims);
                free(pooled);
            }
        }
    }
    tm_tensor_free(h);
    tm__batch_free(&b);
    return s;
}

const tm__task tm__task_feature_extraction = {"feature-extraction", "embeddings", check, call, 0, 0, NULL};
