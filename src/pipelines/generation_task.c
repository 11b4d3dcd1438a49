/* What the generation tasks (text-generation, text2text-generation, summarization,
 * translation) share: the repository's generation config with a call's options on top,
 * the prompt's ids as transformers.js 4.3 tokenizes them, and one prompt run through a
 * tm_generator (an encoder-decoder's encoder first). Not the generator itself
 * (generator.c) nor the tasks' inputs and outputs (text_generation.c, text2text.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pipelines.h"
#include "../core/status.h"

/* The repo file rel as a NUL-terminated text; optional files may be absent (*out NULL). */
static tm_status read_text(const tm_pipeline *p, const char *rel, int optional, char **out,
                           tm_error *err) {
    char *path = NULL;
    tm_error e;
    tm__error_clear(&e);
    *out = NULL;
    tm_status s = tm__repo_file(p->repo, rel, &path, &e);
    if (optional && (s == TM_ERR_NOT_FOUND || s == TM_ERR_NETWORK)) return TM_OK;
    if (s) {
        tm__error_copy(err, &e);
        return s;
    }
    FILE *f = fopen(path, "rb");
    free(path);
    if (!f) return tm__fail(err, TM_ERR_IO, "%s: cannot open %s", p->repo->source, rel);
    char *text = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0)
        text = malloc((size_t)size + 1);
    size_t got = text ? fread(text, 1, (size_t)size, f) : 0;
    fclose(f);
    if (!text || got != (size_t)size) {
        free(text);
        return tm__fail(err, size < 0 ? TM_ERR_IO : TM_ERR_NO_MEMORY, "%s: cannot read %s", p->repo->source, rel);
    }
    text[size] = '\0';
    *out = text;
    return TM_OK;
}

tm_status tm__gen_check(tm_pipeline *p, tm_error *err) {
    tm_status s = read_text(p, "config.json", 0, &p->config_text, err);
    if (!s) s = read_text(p, "generation_config.json", 1, &p->generation_text, err);
    if (s) return s;
    tm_generation_config c;
    s = tm__gen_config(p, NULL, 256, &c, err);
    if (s) return s;
    tm_generation_config_clear(&c);
    tm_decoder *d = NULL;
    tm_error e;
    tm__error_clear(&e);
    if (tm_decoder_create(p->model, NULL, &d, &e) != TM_OK)
        return tm__fail(err, TM_ERR_UNSUPPORTED, "%s: %s needs a decoder with a KV cache (%s)", p->onnx_file,
                        p->task->name, e.message);
    tm_decoder_free(d);
    if (p->encoder && tm_model_output_index(p->encoder, "last_hidden_state") < 0)
        return tm__fail(err, TM_ERR_UNSUPPORTED, "%s: the encoder has no output 'last_hidden_state'",
                        p->repo->source);
    return TM_OK;
}

tm_status tm__gen_config(const tm_pipeline *p, const tm_json *options, int64_t max_new_tokens,
                         tm_generation_config *cfg, tm_error *err) {
    tm_generation_config_default(cfg);
    tm_status s = tm_generation_config_from_json(cfg, p->config_text, p->generation_text, err);
    if (s) return s;
    if (max_new_tokens > 0) cfg->max_new_tokens = max_new_tokens;
    if (!options || options->type != TM_JSON_OBJECT) return TM_OK;
    tm__buf b = {0};
    tm__put_json(&b, options);
    if (b.oom) {
        free(b.s);
        tm_generation_config_clear(cfg);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    }
    tm_error e;
    tm__error_clear(&e);
    s = tm_generation_config_from_json(cfg, NULL, b.s, &e);
    free(b.s);
    if (s) {
        /* the message names generation_config.json: these are the call's options */
        const char *why = strncmp(e.message, "generation_config.json: ", 24) ? e.message : e.message + 24;
        tm_generation_config_clear(cfg);
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s options: %s", p->task->name, why);
    }
    return TM_OK;
}

tm_status tm__gen_encode(const tm_pipeline *p, const char *text, int add_special, int32_t **ids,
                         size_t *n, tm_error *err) {
    tm_encode_options eo = tm_encode_options_default();
    eo.add_special_tokens = add_special;
    tm_encoding *e = NULL;
    tm_status s = tm_tokenizer_encode(p->tok, text, strlen(text), NULL, 0, &eo, &e, err);
    if (s) return s;
    size_t len = tm_encoding_n(e);
    if (p->model_max_length > 0 && (int64_t)len > p->model_max_length) len = (size_t)p->model_max_length;
    int32_t *x = malloc((len + 1) * sizeof *x);
    if (!x) {
        tm_encoding_free(e);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    }
    if (len) memcpy(x, tm_encoding_ids(e), len * sizeof *x);
    tm_encoding_free(e);
    *ids = x;
    *n = len;
    return TM_OK;
}

/* The encoder on ids; its last_hidden_state and the mask become the generator's inputs. */
static tm_status run_encoder(tm_pipeline *p, tm_generator *g, const int32_t *ids, size_t n,
                             tm_error *err) {
    int64_t dims[2] = {1, (int64_t)n};
    tm_tensor *t_ids = tm_tensor_new(TM_INT64, 2, dims), *t_mask = tm_tensor_new(TM_INT64, 2, dims);
    int n_out = tm_model_n_outputs(p->encoder);
    tm_tensor **out = calloc((size_t)(n_out > 0 ? n_out : 1), sizeof *out);
    tm_status s = t_ids && t_mask && out ? TM_OK : tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    if (!s) {
        for (size_t i = 0; i < n; i++) {
            ((int64_t *)tm_tensor_data(t_ids))[i] = ids[i];
            ((int64_t *)tm_tensor_data(t_mask))[i] = 1;
        }
        const char *names[2] = {"input_ids", "attention_mask"};
        const tm_tensor *in[2] = {t_ids, t_mask};
        int n_in = tm_model_input_index(p->encoder, "attention_mask") >= 0 ? 2 : 1;
        s = tm_model_run(p->encoder, n_in, names, in, out, NULL, err);
    }
    int hidden = tm_model_output_index(p->encoder, "last_hidden_state");
    if (!s) s = tm_generator_set_input(g, "encoder_hidden_states", out[hidden], err);
    if (!s) s = tm_generator_set_input(g, "encoder_attention_mask", t_mask, err);
    for (int k = 0; out && k < n_out; k++) tm_tensor_free(out[k]);
    free(out);
    tm_tensor_free(t_ids);
    tm_tensor_free(t_mask);
    return s;
}

void tm__gen_texts_free(char **texts, int n) {
    for (int i = 0; texts && i < n; i++) free(texts[i]);
    free(texts);
}

tm_status tm__gen_run(tm_pipeline *p, const tm_generation_config *cfg, const int32_t *ids,
                      size_t n, char ***texts, int *n_texts, tm_error *err) {
    if (n == 0)
        /* transformers.js gets there to ONNX Runtime, which fails reshaping the empty input */
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT,
                        "%s: the prompt is empty (no tokens): the model needs at least one", p->task->name);
    tm_generator *g = NULL;
    tm_status s = tm_generator_create(p->model, cfg, p->tok, &g, err);
    if (!s) s = p->encoder ? run_encoder(p, g, ids, n, err) : tm_generator_append(g, ids, n, err);
    if (!s) s = tm_generator_generate(g, NULL, NULL, err);
    int k = s ? 0 : tm_generator_n_sequences(g);
    char **t = s ? NULL : calloc((size_t)(k > 0 ? k : 1), sizeof *t);
    if (!s && !t) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; !s && i < k; i++) {
        const int32_t *seq;
        size_t len;
        s = tm_generator_sequence(g, i, &seq, &len, err);
        if (!s) s = tm_tokenizer_decode(p->tok, seq, len, 1, -1, &t[i], NULL, err);
    }
    tm_generator_free(g);
    if (s) {
        tm__gen_texts_free(t, k);
        return s;
    }
    *texts = t;
    *n_texts = k;
    return TM_OK;
}

/* The generators' sequences decoded, into texts (one per generator). */
static tm_status decode_all(tm_pipeline *p, tm_generator **g, int count, char ***texts,
                            int *n_texts, tm_error *err) {
    tm_status s = TM_OK;
    for (int i = 0; !s && i < count; i++) {
        const int32_t *seq;
        size_t len;
        texts[i] = calloc(1, sizeof *texts[i]);
        if (!texts[i]) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        if (!s) s = tm_generator_sequence(g[i], 0, &seq, &len, err);
        if (!s) s = tm_tokenizer_decode(p->tok, seq, len, 1, -1, &texts[i][0], NULL, err);
        if (!s) n_texts[i] = 1;
    }
    return s;
}

tm_status tm__gen_run_many(tm_pipeline *p, const tm_generation_config *cfg,
                           int32_t *const *ids, const size_t *n, int count, char ***texts,
                           int *n_texts, tm_error *err) {
    memset(texts, 0, (size_t)count * sizeof *texts);
    memset(n_texts, 0, (size_t)count * sizeof *n_texts);
    int together = count > 1 && !p->encoder && cfg->num_beams <= 1;
    /* positions numbered by the cache's length: only prompts of one length share a batch */
    for (int i = 1; together && i < count; i++)
        together = n[i] == n[0] || tm_model_input_index(p->model, "position_ids") >= 0;
    for (int i = 0; together && i < count; i++)
        if (n[i] == 0) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s: the prompt is empty "
                                       "(no tokens): the model needs at least one", p->task->name);
    tm_status s = TM_OK;
    if (!together) {
        for (int i = 0; !s && i < count; i++) s = tm__gen_run(p, cfg, ids[i], n[i], &texts[i], &n_texts[i], err);
    } else {
        int rows = count < TM__GEN_ROWS ? count : TM__GEN_ROWS;
        tm_generator **g = calloc((size_t)count, sizeof *g);
        tm_batch *b = NULL;
        s = g ? tm_batch_create(p->model, rows, &b, err) : tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        int next = 0, left = count;
        while (!s && left > 0) {
            while (!s && next < count && tm_batch_count(b) < rows) {
                int row, done;
                s = tm_generator_create(p->model, cfg, p->tok, &g[next], err);
                if (!s) s = tm_generator_append(g[next], ids[next], n[next], err);
                if (!s) s = tm_batch_add(b, g[next], &row, NULL, &done, err);
                if (!s && done) left--;
                next++;
            }
            int done[TM__GEN_ROWS];
            for (int r = 0; r < rows; r++) done[r] = -1;
            if (!s && tm_batch_count(b)) s = tm_batch_step(b, NULL, done, err);
            for (int r = 0; !s && r < rows; r++) left -= done[r] == 1;
        }
        if (!s) s = decode_all(p, g, count, texts, n_texts, err);
        tm_batch_free(b);
        for (int i = 0; g && i < count; i++) tm_generator_free(g[i]);
        free(g);
    }
    if (s) {
        for (int i = 0; i < count; i++) tm__gen_texts_free(texts[i], n_texts[i] ? n_texts[i] : 1);
        memset(texts, 0, (size_t)count * sizeof *texts);
    }
    return s;
}
