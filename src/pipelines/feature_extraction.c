/* feature-extraction: the encoder's hidden states, pooled (mean over the attention mask,
 * the first or last token, or the maximum) and L2-normalized on request, as transformers.js
 * does; "auto" pooling follows the repo's sentence-transformers modules. Not a similarity
 * search: embeddings only. */
#include <math.h>
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
enum { GROUP_ROWS = 4 };

static int by_length(const void *a, const void *b) {
    const int64_t *x = a, *y = b;   /* (length, row) pairs */
    return x[0] != y[0] ? (x[0] < y[0] ? -1 : 1) : (x[1] < y[1] ? -1 : x[1] > y[1]);
}

/* Pooled embeddings of a right-padded batch, run as groups of GROUP_ROWS texts of similar
 * lengths, each padded only to its own longest (sentence-transformers sorts by length the
 * same way): a batch of texts of mixed lengths pads to its longest, so most of the work
 * of one run over it is padding. The attention mask keeps a text's tokens from seeing
 * padding, and its positions start at 0 either way, so each row's result is the one the
 * whole padded batch gives it. Fills pooled (B, H) and *hidden. */
static tm_status run_grouped(tm_pipeline *p, const tm__batch *b, const char *name, const char *how,
                             float **pooled, int64_t *hidden, tm_error *err) {
    int64_t B = b->B, T = b->T, H = 0;
    int64_t *order = malloc((size_t)B * 2 * sizeof *order);
    tm__batch g = {0};
    g.ids = malloc((size_t)(GROUP_ROWS * T > 0 ? GROUP_ROWS * T : 1) * sizeof *g.ids);
    g.mask = malloc((size_t)(GROUP_ROWS * T > 0 ? GROUP_ROWS * T : 1) * sizeof *g.mask);
    g.types = malloc((size_t)(GROUP_ROWS * T > 0 ? GROUP_ROWS * T : 1) * sizeof *g.types);
    float *rows = NULL, *all = NULL;
    tm_status s = TM_OK;
    if (!order || !g.ids || !g.mask || !g.types) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (int64_t r = 0; !s && r < B; r++) {
        int64_t len = 0;   /* up to its last unmasked position */
        for (int64_t t = 0; t < T; t++)
            if (b->mask[r * T + t]) len = t + 1;
        order[2 * r] = len;
        order[2 * r + 1] = r;
    }
    if (!s) qsort(order, (size_t)B, 2 * sizeof *order, by_length);
    for (int64_t at = 0; !s && at < B; at += GROUP_ROWS) {
        int64_t n = B - at < GROUP_ROWS ? B - at : GROUP_ROWS;
        int64_t t_g = order[2 * (at + n - 1)] > 0 ? order[2 * (at + n - 1)] : 1;
        g.B = n;
        g.T = t_g;
        for (int64_t i = 0; i < n; i++) {
            int64_t r = order[2 * (at + i) + 1];
            memcpy(g.ids + i * t_g, b->ids + r * T, (size_t)t_g * sizeof *g.ids);
            memcpy(g.mask + i * t_g, b->mask + r * T, (size_t)t_g * sizeof *g.mask);
            memcpy(g.types + i * t_g, b->types + r * T, (size_t)t_g * sizeof *g.types);
        }
        tm_tensor *h = NULL;
        s = tm__batch_run(p, &g, 1, &name, &h, err);
        if (!s && tm_tensor_rank(h) != 3)
            s = tm__fail(err, TM_ERR_SHAPE, "%s: output '%s' has rank %d, not 3 (batch, tokens, hidden)",
                         p->onnx_file, name, tm_tensor_rank(h));
        const int64_t *d = s ? NULL : tm_tensor_dims(h);
        if (!s && (d[0] != n || d[1] != t_g || (H && d[2] != H)))
            s = tm__fail(err, TM_ERR_SHAPE, "%s: output '%s' has an unexpected shape",
                         p->onnx_file, name);
        if (!s && !all) {
            H = d[2];
            all = malloc((size_t)(B * H > 0 ? B * H : 1) * sizeof *all);
            rows = malloc((size_t)(GROUP_ROWS * H > 0 ? GROUP_ROWS * H : 1) * sizeof *rows);
            if (!all || !rows) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        }
        if (!s) {
            pool(how, tm_tensor_data(h), g.mask, n, t_g, H, rows);
            for (int64_t i = 0; i < n; i++)
                memcpy(all + order[2 * (at + i) + 1] * H, rows + i * H, (size_t)H * sizeof *all);
        }
        tm_tensor_free(h);
    }
    free(order);
    free(rows);
    tm__batch_free(&g);
    if (s) {
        free(all);
        return s;
    }
    *pooled = all;
    *hidden = H;
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
