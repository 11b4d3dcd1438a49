/* What the text tasks share: a batch tokenized, truncated and padded as transformers.js's
 * tokenizer call does, the model run on it, decoding, softmax and sorting, option reading,
 * and the JSON writer of results. Not a tokenizer: tm_tokenizer_* does the encoding. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pipelines.h"
#include "../core/dtype.h"
#include "../core/status.h"

/* ---- Batches ---------------------------------------------------------------------------- */

void tm__batch_free(tm__batch *b) {
    if (!b) return;
    free(b->ids);
    free(b->mask);
    free(b->types);
    memset(b, 0, sizeof *b);
}

tm_status tm__batch_encode(const tm_pipeline *p, size_t n, const char *const *texts,
                           const char *const *pairs, tm__batch *out, tm_error *err) {
    if (n == 0) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "text array must be non-empty");
    tm_encoding **enc = calloc(n, sizeof *enc);
    size_t *lens = malloc(n * sizeof *lens), *pair_lens = malloc(n * sizeof *pair_lens);
    tm_status s = TM_OK;
    if (!enc || !lens || !pair_lens) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; !s && i < n; i++) {
        lens[i] = strlen(texts[i]);
        pair_lens[i] = pairs && pairs[i] ? strlen(pairs[i]) : 0;
    }
    if (!s) {
        tm_encode_options o = tm_encode_options_default();
        o.threads = 1;
        s = tm_tokenizer_encode_batch(p->tok, n, texts, lens, pairs, pairs ? pair_lens : NULL, &o, enc, err);
        if (s) memset(enc, 0, n * sizeof *enc);
    }
    tm__batch b = {0};
    if (!s) {
        /* padding: true takes the longest; then model_max_length cuts it */
        int64_t T = 0;
        for (size_t i = 0; i < n; i++)
            if ((int64_t)tm_encoding_n(enc[i]) > T) T = (int64_t)tm_encoding_n(enc[i]);
        if (p->model_max_length > 0 && T > p->model_max_length) T = p->model_max_length;
        b.B = (int64_t)n;
        b.T = T;
        size_t cells = n * (size_t)(T > 0 ? T : 1);
        b.ids = malloc(cells * sizeof *b.ids);
        b.mask = malloc(cells * sizeof *b.mask);
        b.types = malloc(cells * sizeof *b.types);
        if (!b.ids || !b.mask || !b.types) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    }
    if (!s && b.T > 0 && p->pad_id < 0) {
        for (size_t i = 0; i < n; i++)
            if ((int64_t)tm_encoding_n(enc[i]) < b.T) {
                s = tm__fail(err, TM_ERR_INVALID_ARGUMENT,
                             "texts of different lengths need padding, and the tokenizer has no pad token");
                break;
            }
    }
    for (size_t i = 0; !s && i < n; i++) {
        int64_t len = (int64_t)tm_encoding_n(enc[i]);
        if (len > b.T) len = b.T;
        int64_t pad = b.T - len, at = p->pad_left ? pad : 0;
        int64_t *ids = b.ids + i * b.T, *mask = b.mask + i * b.T, *types = b.types + i * b.T;
        for (int64_t t = 0; t < b.T; t++) ids[t] = p->pad_id, mask[t] = 0, types[t] = 0;
        const int32_t *ei = tm_encoding_ids(enc[i]), *em = tm_encoding_attention_mask(enc[i]);
        const int32_t *et = tm_encoding_type_ids(enc[i]);
        for (int64_t t = 0; t < len; t++) {
            ids[at + t] = ei[t];
            mask[at + t] = em[t];
            types[at + t] = et[t];
        }
    }
    for (size_t i = 0; i < n && enc; i++) tm_encoding_free(enc[i]);
    free(enc);
    free(lens);
    free(pair_lens);
    if (s) {
        tm__batch_free(&b);
        return s;
    }
    *out = b;
    return TM_OK;
}

tm_status tm__to_f32(const tm_tensor *t, const char *name, tm_tensor **out, tm_error *err) {
    tm_dtype dt = tm_tensor_dtype(t);
    if (dt != TM_FLOAT && dt != TM_FLOAT16 && dt != TM_BFLOAT16 && dt != TM_DOUBLE)
        return tm__fail(err, TM_ERR_DTYPE, "model output '%s' is %s, not a float tensor", name,
                        tm_dtype_name(dt));
    tm_tensor *f = tm_tensor_new(TM_FLOAT, tm_tensor_rank(t), tm_tensor_dims(t));
    if (!f) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    int64_t n = tm_tensor_numel(t);
    float *d = tm_tensor_data(f);
    const void *src = tm_tensor_data_const(t);
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case TM_FLOAT: d[i] = ((const float *)src)[i]; break;
        case TM_FLOAT16: d[i] = tm_f16_to_f32(((const uint16_t *)src)[i]); break;
        case TM_BFLOAT16: d[i] = tm_bf16_to_f32(((const uint16_t *)src)[i]); break;
        default: d[i] = (float)((const double *)src)[i]; break;
        }
    }
    *out = f;
    return TM_OK;
}

tm_status tm__put_top_labels(const tm_pipeline *p, const double *scores, size_t L, int64_t top_k, tm__buf *out,
                             tm_error *err) {
    size_t *idx = malloc((L ? L : 1) * sizeof *idx);
    if (!idx) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    tm_status s = tm__argsort_desc(scores, L, idx, err);
    size_t k = top_k < 0 || (size_t)top_k > L ? L : (size_t)top_k;
    if (!s) {
        tm__put(out, "[");
        for (size_t j = 0; j < k; j++) {
            char fallback[32];
            const char *label = tm__repo_label(p->repo, (int64_t)idx[j]);
            if (!label) {
                snprintf(fallback, sizeof fallback, "LABEL_%zu", idx[j]);
                label = fallback;
            }
            tm__put(out, j ? ",{\"label\":" : "{\"label\":");
            tm__put_string(out, label);
            tm__put(out, ",\"score\":");
            tm__put_number(out, scores[idx[j]]);
            tm__put(out, "}");
        }
        tm__put(out, "]");
    }
    free(idx);
    return s;
}

tm_status tm__repo_json(tm_pipeline *p, const char *rel, const char *why, tm_json **out, tm_error *err) {
    char *path = NULL;
    tm_status s = tm__repo_file(p->repo, rel, &path, err);
    if (s == TM_ERR_NOT_FOUND) return tm__fail(err, s, "%s: no %s (%s)", p->repo->source, rel, why);
    if (s) return s;
    tm_json *doc = tm_json_read_file(path);
    free(path);
    if (!doc || doc->type != TM_JSON_OBJECT) {
        tm_json_free(doc);
        return tm__fail(err, TM_ERR_PARSE, "%s: cannot read %s (not a JSON object)", p->repo->source, rel);
    }
    *out = doc;
    return TM_OK;
}

tm_status tm__run_model(tm_pipeline *p, int n_in, const char *const *in_names,
                        const tm_tensor *const *in, int n_out, const char *const *names, tm_tensor **out,
                        tm_error *err) {
    return tm__run_model_on(p, 0, n_in, in_names, in, n_out, names, out, err);
}

tm_status tm__run_model_on(tm_pipeline *p, int one_thread, int n_in, const char *const *in_names,
                           const tm_tensor *const *in, int n_out, const char *const *names,
                           tm_tensor **out, tm_error *err) {
    int idx[8];
    if (n_out > 8) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "too many outputs");
    for (int i = 0; i < n_out; i++) {
        idx[i] = tm_model_output_index(p->model, names[i]);
        if (idx[i] < 0)
            return tm__fail(err, TM_ERR_NOT_FOUND, "%s: the model has no output '%s'", p->onnx_file, names[i]);
    }
    int n_all = tm_model_n_outputs(p->model);
    tm_tensor **all = calloc((size_t)(n_all > 0 ? n_all : 1), sizeof *all);
    if (!all) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    tm_plan_options po;
    tm_plan_options_default(&po);
    po.one_thread = one_thread;
    tm_status s = tm_model_run(p->model, n_in, in_names, in, all, &po, err);
    tm_tensor *got[8] = {0};
    for (int i = 0; !s && i < n_out; i++) {
        if (!all[idx[i]]) s = tm__fail(err, TM_ERR_NOT_FOUND, "model output '%s' is not a tensor", names[i]);
        else s = tm__to_f32(all[idx[i]], names[i], &got[i], err);
    }
    for (int i = 0; i < n_all; i++) tm_tensor_free(all[i]);
    free(all);
    if (s) {
        for (int i = 0; i < n_out; i++) tm_tensor_free(got[i]);
        return s;
    }
    for (int i = 0; i < n_out; i++) out[i] = got[i];
    return TM_OK;
}

tm_status tm__batch_run(tm_pipeline *p, const tm__batch *b, int n_out, const char *const *names,
                        tm_tensor **out, tm_error *err) {
    return tm__batch_run_on(p, b, 0, n_out, names, out, err);
}

tm_status tm__batch_run_on(tm_pipeline *p, const tm__batch *b, int one_thread, int n_out,
                           const char *const *names, tm_tensor **out, tm_error *err) {
    int64_t dims[2] = {b->B, b->T};
    const char *in_names[3] = {"input_ids", "attention_mask", "token_type_ids"};
    int64_t *bufs[3] = {b->ids, b->mask, b->types};
    tm_tensor *in[3] = {NULL, NULL, NULL};
    const char *use_names[3];
    const tm_tensor *use[3];
    int n_in = 0;
    tm_status s = TM_OK;
    for (int i = 0; i < 3; i++) {
        int k = tm_model_input_index(p->model, in_names[i]);
        if (k < 0) continue;
        tm_value_desc d;
        tm_model_input(p->model, k, &d);
        if (d.dtype == TM_INT32) {
            /* int32 inputs: converted in place of a copy each (rare in exports) */
            in[i] = tm_tensor_new(TM_INT32, 2, dims);
            if (in[i]) {
                int32_t *x = tm_tensor_data(in[i]);
                for (int64_t j = 0; j < b->B * b->T; j++) x[j] = (int32_t)bufs[i][j];
            }
        } else {
            in[i] = tm_tensor_wrap(TM_INT64, 2, dims, bufs[i]);
        }
        if (!in[i]) {
            s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
            break;
        }
        use_names[n_in] = in_names[i];
        use[n_in++] = in[i];
    }
    if (!s) s = tm__run_model_on(p, one_thread, n_in, use_names, use, n_out, names, out, err);
    for (int i = 0; i < 3; i++) tm_tensor_free(in[i]);
    return s;
}

int tm__is_special_id(const tm_pipeline *p, int64_t id) {
    for (int i = 0; i < p->n_special; i++)
        if (p->special_ids[i] == id) return 1;
    return 0;
}

tm_status tm__decode(const tm_pipeline *p, const int64_t *ids, size_t n, int skip_special,
                     char **text, tm_error *err) {
    int32_t small[64] = {0}, *x = n <= 64 ? small : malloc(n * sizeof *x);
    if (!x) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < n; i++) x[i] = (int32_t)ids[i];
    tm_status s = tm_tokenizer_decode(p->tok, x, n, skip_special, -1, text, NULL, err);
    if (x != small) free(x);
    return s;
}

/* ---- Numbers ---------------------------------------------------------------------------- */

void tm__softmax(const double *x, size_t n, double *out) {
    if (n == 0) return;
    double max = x[0];
    for (size_t i = 1; i < n; i++)
        if (x[i] > max) max = x[i];
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += out[i] = exp(x[i] - max);
    for (size_t i = 0; i < n; i++) out[i] /= sum;
}

typedef struct ranked {
    double v;
    size_t i;
} ranked;

static int by_value_desc(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->v != y->v) return x->v < y->v ? 1 : -1;
    return x->i < y->i ? -1 : x->i > y->i;
}

tm_status tm__argsort_desc(const double *v, size_t n, size_t *idx, tm_error *err) {
    ranked *r = malloc((n ? n : 1) * sizeof *r);
    if (!r) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < n; i++) r[i] = (ranked){v[i], i};
    qsort(r, n, sizeof *r, by_value_desc);
    for (size_t i = 0; i < n; i++) idx[i] = r[i].i;
    free(r);
    return TM_OK;
}

/* ---- Inputs and options ------------------------------------------------------------------ */

tm_status tm__encode_texts(const tm_pipeline *p, const tm_json *inputs, tm__batch *out,
                           int *batched, tm_error *err) {
    const char **texts = NULL;
    size_t n;
    tm_status s = tm__strings(&inputs->items[0], "texts", &texts, &n, batched, err);
    if (s) return s;
    s = tm__batch_encode(p, n, texts, NULL, out, err);
    free(texts);
    return s;
}

tm_status tm__strings(const tm_json *v, const char *what, const char ***texts, size_t *n,
                      int *batched, tm_error *err) {
    if (!v) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "missing input: %s", what);
    if (v->type == TM_JSON_STRING) {
        const char **t = malloc(sizeof *t);
        if (!t) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        t[0] = v->string;
        *texts = t, *n = 1, *batched = 0;
        return TM_OK;
    }
    if (v->type != TM_JSON_ARRAY)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s must be a string or an array of strings", what);
    if (v->n == 0) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s: text array must be non-empty", what);
    const char **t = malloc((size_t)v->n * sizeof *t);
    if (!t) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < v->n; i++) {
        if (v->items[i].type != TM_JSON_STRING) {
            free(t);
            return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s[%d] is not a string", what, i);
        }
        t[i] = v->items[i].string;
    }
    *texts = t, *n = (size_t)v->n, *batched = 1;
    return TM_OK;
}

tm_status tm__opt_int(const tm_json *options, const char *key, int64_t dflt, int null_value,
                      int64_t *out, tm_error *err) {
    const tm_json *v = tm_json_get(options, key);
    if (!v) *out = dflt;
    else if (v->type == TM_JSON_NULL) *out = null_value;
    else if (v->type == TM_JSON_NUMBER && v->number == floor(v->number) && fabs(v->number) < 1e15)
        *out = (int64_t)v->number;
    else return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "option %s must be an integer or null", key);
    return TM_OK;
}

tm_status tm__opt_bool(const tm_json *options, const char *key, int dflt, int *out, tm_error *err) {
    const tm_json *v = tm_json_get(options, key);
    if (!v || v->type == TM_JSON_NULL) *out = dflt;
    else if (v->type == TM_JSON_BOOL) *out = v->number != 0;
    else return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "option %s must be true or false", key);
    return TM_OK;
}

tm_status tm__opt_string(const tm_json *options, const char *key, const char *dflt,
                         const char **out, tm_error *err) {
    const tm_json *v = tm_json_get(options, key);
    if (!v || v->type == TM_JSON_NULL) *out = dflt;
    else if (v->type == TM_JSON_STRING) *out = v->string;
    else return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "option %s must be a string", key);
    return TM_OK;
}

/* ---- JSON output -------------------------------------------------------------------------- */

void tm__put_len(tm__buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 1024;
        while (cap < b->n + n + 1) cap *= 2;
        char *x = realloc(b->s, cap);
        if (!x) {
            b->oom = 1;
            return;
        }
        b->s = x;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

void tm__put(tm__buf *b, const char *s) { tm__put_len(b, s, strlen(s)); }

void tm__put_string(tm__buf *b, const char *s) {
    tm__put_len(b, "\"", 1);
    const char *from = s;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        const char *esc = NULL;
        char u[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        default:
            if (c < 0x20) {
                snprintf(u, sizeof u, "\\u%04x", c);
                esc = u;
            }
        }
        if (!esc) continue;
        tm__put_len(b, from, (size_t)(s - from));
        tm__put(b, esc);
        from = s + 1;
    }
    tm__put_len(b, from, (size_t)(s - from));
    tm__put_len(b, "\"", 1);
}

void tm__put_number(tm__buf *b, double v) {
    char t[40];
    if (!isfinite(v)) {
        tm__put(b, "null"); /* as JSON.stringify */
        return;
    }
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(t, sizeof t, "%.*g", prec, v);
        if (strtod(t, NULL) == v) break;
    }
    tm__put(b, t);
}

void tm__put_int(tm__buf *b, int64_t v) {
    char t[32];
    snprintf(t, sizeof t, "%lld", (long long)v);
    tm__put(b, t);
}

void tm__put_tensor(tm__buf *b, const float *data, int rank, const int64_t *dims) {
    tm__put(b, "{\"_type\":\"Tensor\",\"type\":\"float32\",\"dims\":[");
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (i) tm__put(b, ",");
        tm__put_int(b, dims[i]);
        n *= dims[i];
    }
    tm__put(b, "],\"data\":[");
    for (int64_t i = 0; i < n; i++) {
        if (i) tm__put(b, ",");
        tm__put_number(b, data[i]);
    }
    tm__put(b, "]}");
}

void tm__put_json(tm__buf *b, const tm_json *v) {
    switch (v->type) {
    case TM_JSON_NULL: tm__put(b, "null"); return;
    case TM_JSON_BOOL: tm__put(b, v->number ? "true" : "false"); return;
    case TM_JSON_NUMBER: tm__put_number(b, v->number); return;
    case TM_JSON_STRING: tm__put_string(b, v->string); return;
    case TM_JSON_ARRAY:
    case TM_JSON_OBJECT:
        tm__put(b, v->type == TM_JSON_ARRAY ? "[" : "{");
        for (int i = 0; i < v->n; i++) {
            if (i) tm__put(b, ",");
            if (v->type == TM_JSON_OBJECT) {
                tm__put_string(b, v->keys[i]);
                tm__put(b, ":");
            }
            tm__put_json(b, &v->items[i]);
        }
        tm__put(b, v->type == TM_JSON_ARRAY ? "]" : "}");
        return;
    }
}
