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

const tm__task tm__task_feature_extraction = {"feature-extraction", "embeddings", check, call, 0};
