/* tm_generator (src/pipelines/): the logits processors and warpers on stored logits
 * against transformers' (tests/data/generation/logits_refs.json, made by
 * tests/gen/logits_refs.mjs), greedy generation against transformers.js's text pipelines
 * on the tiny repositories of tests/data/pipelines (gpt2-gen, llama-chat fp32 and q4,
 * t5-text2text: every text-generation case that has an output), beam search against
 * tests/data/generation/beams.jsonl, seeded sampling reproducible, the generation config
 * read from JSON, streaming, and errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "transmuter.h"
#include "../src/pipelines/generation.h"
#include "../src/hub/json.h"
#include "check.h"

#define PIPES "tests/data/pipelines"
#define GEN "tests/data/generation"

static char *slurp(const char *path) {
    uint8_t *d = NULL;
    size_t n = 0;
    if (!read_all(path, &d, &n)) {
        free(d);
        return NULL;
    }
    d[n] = 0;
    return (char *)d;
}

/* ---- Processors on stored logits ---- */

static double num(const tm_json *o, const char *key) {
    const tm_json *v = tm_json_get(o, key);
    return v && v->type == TM_JSON_NUMBER ? v->number : NAN;
}

static int32_t *int_list(const tm_json *v, int *n) {
    *n = v ? v->n : 0;
    int32_t *a = malloc(((size_t)*n + 1) * sizeof *a);
    for (int k = 0; k < *n; k++) a[k] = (int32_t)v->items[k].number;
    return a;
}

/* One step of a chain, by the name the reference script gives it. */
static int apply_step(const tm_json *st, float *s, int64_t V, const int32_t *ids, size_t n,
                      float *scratch, int32_t *order) {
    const char *op = tm_json_get_string(st, "op");
    int n_eos = 0;
    int32_t *eos = int_list(tm_json_get(st, "eos"), &n_eos);
    int known = 1;
    if (!strcmp(op, "repetition_penalty")) tm__logits_repetition_penalty(s, V, ids, n, num(st, "penalty"));
    else if (!strcmp(op, "no_repeat_ngram")) tm__logits_no_repeat_ngram(s, V, ids, n, (int64_t)num(st, "size"));
    else if (!strcmp(op, "bad_words")) {
        const tm_json *bw = tm_json_get(st, "bad_words");
        int32_t flat[64], lens[16];
        int at = 0;
        for (int w = 0; w < bw->n; w++) {
            lens[w] = bw->items[w].n;
            for (int q = 0; q < bw->items[w].n; q++) flat[at++] = (int32_t)bw->items[w].items[q].number;
        }
        tm__logits_bad_words(s, V, ids, n, flat, lens, bw->n, eos, n_eos);
    } else if (!strcmp(op, "min_length")) tm__logits_min_length(s, V, (int64_t)n, (int64_t)num(st, "min_length"), eos, n_eos);
    else if (!strcmp(op, "min_new_tokens"))
        tm__logits_min_length(s, V, (int64_t)n - (int64_t)num(st, "prompt_length"), (int64_t)num(st, "min_new_tokens"), eos, n_eos);
    else if (!strcmp(op, "forced_bos")) tm__logits_forced_bos(s, V, (int64_t)n, (int32_t)num(st, "bos"));
    else if (!strcmp(op, "forced_eos")) tm__logits_forced_eos(s, V, (int64_t)n, (int64_t)num(st, "max_length"), eos, n_eos);
    else if (!strcmp(op, "temperature")) tm__logits_temperature(s, V, num(st, "temperature"));
    else if (!strcmp(op, "top_k")) tm__logits_top_k(s, V, (int64_t)num(st, "k"), 1, scratch);
    else if (!strcmp(op, "top_p")) tm__logits_top_p(s, V, num(st, "p"), 1, order);
    else if (!strcmp(op, "min_p")) tm__logits_min_p(s, V, num(st, "p"), 1, order);
    else if (!strcmp(op, "typical_p")) tm__logits_typical(s, V, num(st, "p"), 1, order, scratch);
    else known = 0;
    free(eos);
    return known;
}

static void test_processors(void) {
    char *text = slurp(GEN "/logits_refs.json");
    CHECK(text != NULL, "cannot read " GEN "/logits_refs.json");
    tm_json *root = text ? tm_json_parse(text, strlen(text)) : NULL;
    const tm_json *cases = root ? tm_json_get(root, "cases") : NULL;
    CHECK(cases && cases->n >= 20, "logits_refs.json holds its cases");
    for (int c = 0; cases && c < cases->n; c++) {
        const tm_json *k = &cases->items[c];
        const char *name = tm_json_get_string(k, "name");
        const tm_json *lg = tm_json_get(k, "logits"), *ex = tm_json_get(k, "expected"),
                      *steps = tm_json_get(k, "steps");
        int n_ids = 0;
        int32_t *ids = int_list(tm_json_get(k, "input_ids"), &n_ids);
        int64_t V = lg->n;
        float *s = malloc((size_t)V * sizeof *s), *scratch = malloc((size_t)V * sizeof *scratch);
        int32_t *order = malloc((size_t)V * sizeof *order);
        for (int64_t v = 0; v < V; v++) s[v] = lg->items[v].type == TM_JSON_NULL ? -INFINITY : (float)lg->items[v].number;
        int ok = 1;
        for (int q = 0; q < steps->n; q++)
            ok &= apply_step(&steps->items[q], s, V, ids, (size_t)n_ids, scratch, order);
        CHECK(ok, "%s: a step the test does not know", name);
        int bad = -1;
        for (int64_t v = 0; v < V && bad < 0; v++) {
            double want = ex->items[v].type == TM_JSON_NULL ? -INFINITY : ex->items[v].number;
            if (isinf(want) || isinf(s[v])) {
                if (s[v] != want) bad = (int)v;
            } else if (fabs(s[v] - want) > 1e-6 * fabs(want) + 1e-12) {
                bad = (int)v;
            }
        }
        CHECK(bad < 0, "%s: token %d is %.9g, transformers %.9g", name, bad, bad < 0 ? 0 : s[bad],
              bad < 0 ? 0 : (ex->items[bad].type == TM_JSON_NULL ? -INFINITY : ex->items[bad].number));
        free(s);
        free(scratch);
        free(order);
        free(ids);
    }
    tm_json_free(root);
    free(text);
}

/* ---- One repository: its tokenizer, models and generation config ---- */

typedef struct repo {
    const char *name;
    tm_tokenizer *tok;
    tm_model *dec, *dec_q4, *enc;
    char *config, *gen_config;
} repo;

static int repo_open(repo *r, const char *name) {
    char path[512];
    tm_error err = {0};
    memset(r, 0, sizeof *r);
    r->name = name;
    snprintf(path, sizeof path, PIPES "/%s", name);
    if (tm_tokenizer_load(path, NULL, &r->tok, &err) != TM_OK) {
        CHECK(0, "%s: tokenizer: %s", name, err.message);
        return 0;
    }
    const char *files[3][2] = {{"onnx/decoder_model_merged.onnx", "onnx/model.onnx"},
                               {"onnx/decoder_model_merged_q4.onnx", "onnx/model_q4.onnx"},
                               {"onnx/encoder_model.onnx", NULL}};
    tm_model **slots[3] = {&r->dec, &r->dec_q4, &r->enc};
    for (int s = 0; s < 3; s++)
        for (int k = 0; k < 2 && !*slots[s] && files[s][k]; k++) {
            snprintf(path, sizeof path, PIPES "/%s/%s", name, files[s][k]);
            FILE *f = fopen(path, "rb");
            if (!f) continue;
            fclose(f);
            if (tm_model_load(path, NULL, slots[s], &err) != TM_OK) {
                CHECK(0, "%s: %s: %s", name, path, err.message);
                return 0;
            }
        }
    snprintf(path, sizeof path, PIPES "/%s/config.json", name);
    r->config = slurp(path);
    snprintf(path, sizeof path, PIPES "/%s/generation_config.json", name);
    r->gen_config = slurp(path);
    return r->dec != NULL;
}

static void repo_close(repo *r) {
    tm_tokenizer_free(r->tok);
    tm_model_free(r->dec);
    tm_model_free(r->dec_q4);
    tm_model_free(r->enc);
    free(r->config);
    free(r->gen_config);
}

/* The encoder's output and mask given to g (encoder-decoders). */
static tm_status run_encoder(repo *r, tm_generator *g, const int32_t *ids, size_t n, tm_error *err) {
    int64_t dims[2] = {1, (int64_t)n};
    tm_tensor *t_ids = tm_tensor_new(TM_INT64, 2, dims), *t_mask = tm_tensor_new(TM_INT64, 2, dims);
    for (size_t i = 0; i < n; i++) {
        ((int64_t *)tm_tensor_data(t_ids))[i] = ids[i];
        ((int64_t *)tm_tensor_data(t_mask))[i] = 1;
    }
    const char *names[2] = {"input_ids", "attention_mask"};
    const tm_tensor *in[2] = {t_ids, t_mask};
    int n_out = tm_model_n_outputs(r->enc);
    tm_tensor **out = calloc((size_t)n_out, sizeof *out);
    tm_status st = tm_model_run(r->enc, 2, names, in, out, NULL, err);
    int hidden = tm_model_output_index(r->enc, "last_hidden_state");
    if (st == TM_OK) st = tm_generator_set_input(g, "encoder_hidden_states", out[hidden >= 0 ? hidden : 0], err);
    if (st == TM_OK) st = tm_generator_set_input(g, "encoder_attention_mask", t_mask, err);
    for (int k = 0; k < n_out; k++) tm_tensor_free(out[k]);
    free(out);
    tm_tensor_free(t_ids);
    tm_tensor_free(t_mask);
    return st;
}

/* The prompt's ids: a chat rendered through the template (no special tokens added), or a
 * text (special tokens as the pipeline adds them). */
static int prompt_ids(repo *r, const tm_json *input, int add_special, int32_t **ids, size_t *n,
                      char **rendered) {
    tm_error err = {0};
    const char *text = NULL;
    char *chat = NULL;
    if (input->type == TM_JSON_ARRAY) {
        /* A chat: re-serialise the messages (role and content strings). */
        size_t cap = 64;
        for (int m = 0; m < input->n; m++)
            cap += 64 + 6 * (strlen(tm_json_get_string(&input->items[m], "role")) +
                             strlen(tm_json_get_string(&input->items[m], "content")));
        char *js = malloc(cap), *p = js;
        p += sprintf(p, "[");
        for (int m = 0; m < input->n; m++) {
            p += sprintf(p, "%s{\"role\": \"%s\", \"content\": \"", m ? ", " : "",
                         tm_json_get_string(&input->items[m], "role"));
            for (const unsigned char *c = (const unsigned char *)tm_json_get_string(&input->items[m], "content"); *c; c++) {
                if (*c == '"' || *c == '\\') p += sprintf(p, "\\%c", *c);
                else if (*c < 0x20) p += sprintf(p, "\\u%04x", *c);
                else *p++ = (char)*c;
            }
            p += sprintf(p, "\"}");
        }
        sprintf(p, "]");
        tm_chat_template *t = NULL;
        const char *src = tm_tokenizer_chat_template(r->tok, NULL);
        int ok = src && tm_chat_template_create(src, strlen(src), &t, &err) == TM_OK &&
                 tm_chat_template_render(t, js, "{\"bos_token\": \"<s>\", \"eos_token\": \"<|endoftext|>\"}",
                                         1, &chat, NULL, &err) == TM_OK;
        tm_chat_template_free(t);
        free(js);
        if (!ok) {
            CHECK(0, "%s: chat template: %s", r->name, err.message);
            return 0;
        }
        text = chat;
        add_special = 0;
    } else {
        text = input->string;
    }
    tm_encode_options eo = tm_encode_options_default();
    eo.add_special_tokens = add_special;
    tm_encoding *e = NULL;
    if (tm_tokenizer_encode(r->tok, text, strlen(text), NULL, 0, &eo, &e, &err) != TM_OK) {
        CHECK(0, "%s: encode: %s", r->name, err.message);
        free(chat);
        return 0;
    }
    /* Truncation to model_max_length as transformers.js 4.3.2 does it: after the special
     * tokens are added, so that t5's long input loses its </s> (Rust tokenizers and Python
     * truncate first and keep it). */
    *n = tm_encoding_n(e);
    int64_t max_len = tm_tokenizer_model_max_length(r->tok);
    if (max_len > 0 && (int64_t)*n > max_len) *n = (size_t)max_len;
    *ids = malloc((*n + 1) * sizeof **ids);
    memcpy(*ids, tm_encoding_ids(e), *n * sizeof **ids);
    tm_encoding_free(e);
    if (rendered) *rendered = chat;
    else free(chat);
    return 1;
}

/* The config of one pipeline call: the repository's files, the pipeline's default
 * max_new_tokens (256), then the call's options. */
static tm_status case_config(repo *r, const tm_json *opts, tm_generation_config *c, tm_error *err) {
    tm_generation_config_default(c);
    tm_status st = tm_generation_config_from_json(c, r->config, r->gen_config, err);
    if (st != TM_OK) return st;
    c->max_new_tokens = 256;
    if (!opts || opts->type != TM_JSON_OBJECT) return TM_OK;
    /* The options as a generation_config.json of their own (return_full_text is not a
     * generation key and is skipped there). */
    char *js = malloc(4096), *p = js;
    p += sprintf(p, "{");
    for (int k = 0; k < opts->n; k++) {
        const tm_json *v = &opts->items[k];
        if (!strcmp(opts->keys[k], "return_full_text")) continue;
        p += sprintf(p, "%s\"%s\": ", p == js + 1 ? "" : ", ", opts->keys[k]);
        if (v->type == TM_JSON_BOOL) p += sprintf(p, "%s", v->number ? "true" : "false");
        else if (v->type == TM_JSON_NUMBER) p += sprintf(p, "%.17g", v->number);
        else if (v->type == TM_JSON_ARRAY) {
            p += sprintf(p, "[");
            for (int j = 0; j < v->n; j++) p += sprintf(p, "%s%.17g", j ? ", " : "", v->items[j].number);
            p += sprintf(p, "]");
        } else p += sprintf(p, "null");
    }
    sprintf(p, "}");
    st = tm_generation_config_from_json(c, NULL, js, err);
    free(js);
    return st;
}

/* Generates from one input and returns the text as the pipeline returns it. */
static char *generate_text(repo *r, tm_model *dec, const tm_json *input, const tm_json *opts,
                           const char *task, int full_text, tm_error *err) {
    tm_generation_config c;
    if (case_config(r, opts, &c, err) != TM_OK) return NULL;
    const tm_json *mx = opts ? tm_json_get(opts, "max_length") : NULL;
    (void)mx;   /* the pipeline's max_new_tokens (256) wins over max_length, as there */
    int encdec = r->enc != NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    char *result = NULL;
    tm_generator *g = NULL;
    int is_chat = input->type == TM_JSON_ARRAY;
    if (!prompt_ids(r, input, encdec, &ids, &n, NULL)) goto done;
    if (tm_generator_create(dec, &c, r->tok, &g, err) != TM_OK) goto done;
    if (encdec) {
        if (run_encoder(r, g, ids, n, err) != TM_OK) goto done;
    } else if (tm_generator_append(g, ids, n, err) != TM_OK) {
        goto done;
    }
    if (tm_generator_generate(g, NULL, NULL, err) != TM_OK) goto done;
    const int32_t *out;
    size_t n_out;
    if (tm_generator_sequence(g, 0, &out, &n_out, err) != TM_OK) goto done;
    char *all = NULL, *prompt = NULL;
    size_t n_all = 0, n_prompt = 0;
    if (tm_tokenizer_decode(r->tok, out, n_out, 1, -1, &all, &n_all, err) != TM_OK) goto done;
    if (!encdec && (is_chat || !full_text) && n &&
        tm_tokenizer_decode(r->tok, ids, n, 1, -1, &prompt, &n_prompt, err) != TM_OK) {
        free(all);
        goto done;
    }
    if (prompt && n_prompt <= n_all) memmove(all, all + n_prompt, n_all - n_prompt + 1);
    free(prompt);
    result = all;
    (void)task;
done:
    tm_generator_free(g);
    tm_generation_config_clear(&c);
    free(ids);
    return result;
}

/* Every case of <repo>.cases.jsonl with an output. */
static void test_cases(const char *name) {
    repo r;
    if (!repo_open(&r, name)) {
        repo_close(&r);
        return;
    }
    char path[512];
    snprintf(path, sizeof path, PIPES "/%s.cases.jsonl", name);
    char *all = slurp(path);
    CHECK(all != NULL, "cannot read %s", path);
    int line_no = 0, ran = 0;
    for (char *line = all, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        line_no++;
        tm_json *c = tm_json_parse(line, strlen(line));
        if (!c) continue;
        const char *task = tm_json_get_string(c, "task");
        const tm_json *load = tm_json_get(c, "load"), *inputs = tm_json_get(c, "inputs"),
                      *opts = tm_json_get(c, "options"), *output = tm_json_get(c, "output");
        const char *dtype = load ? tm_json_get_string(load, "dtype") : NULL;
        tm_model *dec = dtype && !strcmp(dtype, "q4") ? r.dec_q4 : r.dec;
        if (!output) {
            /* The one error case: an empty gpt2 prompt, on which ONNX Runtime failed in a
             * Reshape; we refuse it before running. */
            tm_error err = {0};
            tm_generator *g = NULL;
            int32_t t;
            tm_status st = tm_generator_create(dec, NULL, r.tok, &g, &err);
            if (st == TM_OK) st = tm_generator_step(g, &t, NULL, &err);
            CHECK(st == TM_ERR_INVALID_ARGUMENT && strstr(err.message, "prompt"),
                  "%s line %d: an empty prompt gives an error naming the prompt (%s)", name, line_no, err.message);
            tm_generator_free(g);
            tm_json_free(c);
            continue;
        }
        const tm_json *in0 = &inputs->items[0];
        /* A batch (a list of texts, or of chats) is run one input at a time. */
        int batched = in0->type == TM_JSON_ARRAY && in0->n > 0 &&
                      (in0->items[0].type == TM_JSON_STRING || in0->items[0].type == TM_JSON_ARRAY);
        int n_in = batched ? in0->n : 1;
        const tm_json *ret_full = opts ? tm_json_get(opts, "return_full_text") : NULL;
        int full = !ret_full || ret_full->number != 0;
        for (int b = 0; b < n_in; b++) {
            const tm_json *input = batched ? &in0->items[b] : in0;
            const tm_json *want_item = batched ? &output->items[b] : output;
            if (want_item->type == TM_JSON_ARRAY) want_item = &want_item->items[0];
            const tm_json *gen = want_item->n ? &want_item->items[0] : NULL;
            const char *want = NULL;
            if (gen && gen->type == TM_JSON_STRING) want = gen->string;
            else if (gen && gen->type == TM_JSON_ARRAY)   /* chat: the new assistant message */
                want = tm_json_get_string(&gen->items[gen->n - 1], "content");
            tm_error err = {0};
            char *got = generate_text(&r, dec, input, opts, task, full, &err);
            CHECK(got && want && !strcmp(got, want), "%s line %d%s%s [%s]: got \"%s\"%s%s, transformers.js \"%s\"",
                  name, line_no, batched ? " item " : "", batched ? (b ? "2" : "1") : "",
                  dtype ? dtype : "fp32", got ? got : "(error)", got ? "" : ": ", got ? "" : err.message,
                  want ? want : "?");
            free(got);
            ran++;
        }
        tm_json_free(c);
    }
    printf("%s: %d generations compared\n", name, ran);
    free(all);
    repo_close(&r);
}

/* ---- Beam search against tests/data/generation/beams.jsonl ---- */

static void test_beams(void) {
    char *all = slurp(GEN "/beams.jsonl");
    CHECK(all != NULL, "cannot read " GEN "/beams.jsonl");
    int n_cases = 0;
    for (char *line = all, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        tm_json *c = tm_json_parse(line, strlen(line));
        if (!c) continue;
        n_cases++;
        const char *rname = tm_json_get_string(c, "repo"), *file = tm_json_get_string(c, "file");
        const tm_json *o = tm_json_get(c, "options"), *want = tm_json_get(c, "expected");
        repo r;
        memset(&r, 0, sizeof r);
        r.name = rname;
        char path[512];
        tm_error err = {0};
        snprintf(path, sizeof path, PIPES "/%s/%s", rname, file);
        tm_status st = tm_model_load(path, NULL, &r.dec, &err);
        if (st == TM_OK && tm_json_get(c, "encoder_ids")) {
            snprintf(path, sizeof path, PIPES "/%s/onnx/encoder_model.onnx", rname);
            st = tm_model_load(path, NULL, &r.enc, &err);
        }
        tm_generation_config cfg;
        tm_generation_config_default(&cfg);
        int n_eos = 0, n_prompt = 0, n_enc = 0;
        int32_t *eos = int_list(tm_json_get(o, "eos"), &n_eos);
        int32_t *prompt = int_list(tm_json_get(c, "prompt"), &n_prompt);
        int32_t *enc_ids = int_list(tm_json_get(c, "encoder_ids"), &n_enc);
        cfg.eos_token_ids = eos;
        cfg.n_eos_token_ids = n_eos;
        cfg.num_beams = (int)num(o, "num_beams");
        cfg.max_new_tokens = (int64_t)num(o, "max_new_tokens");
        if (!isnan(num(o, "num_return_sequences"))) cfg.num_return_sequences = (int)num(o, "num_return_sequences");
        if (!isnan(num(o, "length_penalty"))) cfg.length_penalty = num(o, "length_penalty");
        if (!isnan(num(o, "repetition_penalty"))) cfg.repetition_penalty = num(o, "repetition_penalty");
        if (!isnan(num(o, "no_repeat_ngram_size"))) cfg.no_repeat_ngram_size = (int64_t)num(o, "no_repeat_ngram_size");
        if (!isnan(num(o, "min_new_tokens"))) cfg.min_new_tokens = (int64_t)num(o, "min_new_tokens");
        const tm_json *es = tm_json_get(o, "early_stopping");
        if (es && es->type == TM_JSON_BOOL) cfg.early_stopping = es->number ? TM_EARLY_STOPPING_TRUE : TM_EARLY_STOPPING_FALSE;
        if (es && es->type == TM_JSON_STRING) cfg.early_stopping = TM_EARLY_STOPPING_NEVER;
        tm_generator *g = NULL;
        if (st == TM_OK) st = tm_generator_create(r.dec, &cfg, NULL, &g, &err);
        if (st == TM_OK && r.enc) st = run_encoder(&r, g, enc_ids, (size_t)n_enc, &err);
        if (st == TM_OK) st = tm_generator_append(g, prompt, (size_t)n_prompt, &err);
        if (st == TM_OK) st = tm_generator_generate(g, NULL, NULL, &err);
        CHECK(st == TM_OK, "beams %d (%s): %s", n_cases, rname, err.message);
        if (st == TM_OK) {
            CHECK(tm_generator_n_sequences(g) == want->n, "beams %d (%s): %d sequences, want %d", n_cases,
                  rname, tm_generator_n_sequences(g), want->n);
            for (int k = 0; k < want->n && k < tm_generator_n_sequences(g); k++) {
                int n_want = 0;
                int32_t *w = int_list(tm_json_get(&want->items[k], "ids"), &n_want);
                const int32_t *ids;
                size_t n;
                tm_generator_sequence(g, k, &ids, &n, NULL);
                char got_s[512] = "", want_s[512] = "";
                for (size_t q = (size_t)n_prompt; q < n && strlen(got_s) < 480; q++)
                    sprintf(got_s + strlen(got_s), "%d,", ids[q]);
                for (int q = n_prompt; q < n_want && strlen(want_s) < 480; q++)
                    sprintf(want_s + strlen(want_s), "%d,", w[q]);
                double sw = num(&want->items[k], "score"), sg = tm_generator_score(g, k);
                CHECK(n == (size_t)n_want && !memcmp(ids, w, n * sizeof *ids) && fabs(sg - sw) <= 1e-4 * fabs(sw),
                      "beams %d (%s) sequence %d: got %s (score %.6f), Python's beam search %s (%.6f)",
                      n_cases, rname, k, got_s, sg, want_s, sw);
                free(w);
            }
        }
        tm_generator_free(g);
        free(eos);
        free(prompt);
        free(enc_ids);
        tm_model_free(r.dec);
        tm_model_free(r.enc);
        tm_json_free(c);
    }
    CHECK(n_cases >= 7, "beams.jsonl has %d cases", n_cases);
    free(all);
}

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : NULL;
    if (!only || !strcmp(only, "processors")) test_processors();
    if (!only || !strcmp(only, "beams")) test_beams();
    if (!only || !strcmp(only, "gpt2-gen")) test_cases("gpt2-gen");
    if (!only || !strcmp(only, "llama-chat")) test_cases("llama-chat");
    if (!only || !strcmp(only, "t5-text2text")) test_cases("t5-text2text");
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
