/* tm_generator (src/pipelines/): the logits processors and warpers on stored logits
 * against transformers' (tests/data/generation/logits_refs.json, made by
 * tests/gen/logits_refs.mjs; Whisper's suppressions and timestamp rules among them),
 * greedy generation against transformers.js's text pipelines on the tiny repositories of tests/data/pipelines (gpt2-gen, llama-chat fp32 and q4,
 * t5-text2text: every text-generation case that has an output), beam search against
 * tests/data/generation/beams.jsonl (whisper-asr's among them, with its suppressions), seeded sampling reproducible, the generation config
 * read from JSON, streaming, and errors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "transmuter.h"
#include "../src/pipelines/generation.h"
#include "../src/train/dataset.h"
#include "../src/hub/json.h"
#include "../src/io/npy.h"
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
    uint8_t mark[256] = {0};
    if (!strcmp(op, "repetition_penalty")) tm__logits_repetition_penalty(s, V, ids, n, num(st, "penalty"), mark);
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
    else if (!strcmp(op, "suppress") || !strcmp(op, "begin_suppress")) {
        int n_list = 0;
        int32_t *list = int_list(tm_json_get(st, "ids"), &n_list);
        if (op[0] == 's') tm__logits_suppress(s, V, list, n_list);
        else tm__logits_begin_suppress(s, V, (int64_t)n, (int64_t)num(st, "begin"), list, n_list);
        free(list);
    } else if (!strcmp(op, "whisper_timestamps"))
        tm__logits_whisper_timestamps(s, V, ids, n, (size_t)num(st, "begin"), (int32_t)num(st, "no_timestamps"),
                                      (int32_t)num(st, "eos"));
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
        /* The special tokens as variables, as transformers.js passes them. */
        const char *bos = tm_tokenizer_special_token(r->tok, TM_SPECIAL_BOS, NULL),
                   *eos = tm_tokenizer_special_token(r->tok, TM_SPECIAL_EOS, NULL);
        char vars[256];
        snprintf(vars, sizeof vars, "{\"bos_token\": \"%s\", \"eos_token\": \"%s\"}", bos ? bos : "",
                 eos ? eos : "");
        int ok = src && tm_chat_template_create(src, strlen(src), &t, &err) == TM_OK &&
                 tm_chat_template_render(t, js, vars, 1, &chat, NULL, &err) == TM_OK;
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
                           int full_text, tm_error *err) {
    tm_generation_config c;
    if (case_config(r, opts, &c, err) != TM_OK) return NULL;
    /* A max_length option changes nothing: the pipeline's max_new_tokens (256) wins. */
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
            char *got = generate_text(&r, dec, input, opts, full, &err);
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

/* Whisper's encoder on stored input_features (PIPES/rel, a .npy); its output given to g. */
static tm_status run_audio_encoder(repo *r, tm_generator *g, const char *rel, tm_error *err) {
    char path[512];
    snprintf(path, sizeof path, PIPES "/%s", rel);
    tm_tensor *features = NULL;
    tm_status st = tm_npy_read(path, &features, err);
    int n_out = tm_model_n_outputs(r->enc);
    tm_tensor **out = calloc((size_t)n_out, sizeof *out);
    const char *name = "input_features";
    const tm_tensor *in = features;
    if (st == TM_OK) st = tm_model_run(r->enc, 1, &name, &in, out, NULL, err);
    if (st == TM_OK) st = tm_generator_set_input(g, "encoder_hidden_states", out[0], err);
    for (int k = 0; k < n_out; k++) tm_tensor_free(out[k]);
    free(out);
    tm_tensor_free(features);
    return st;
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
        const char *features = tm_json_get_string(c, "encoder_features");
        if (st == TM_OK && (tm_json_get(c, "encoder_ids") || features)) {
            snprintf(path, sizeof path, PIPES "/%s/onnx/encoder_model.onnx", rname);
            st = tm_model_load(path, NULL, &r.enc, &err);
        }
        tm_generation_config cfg;
        tm_generation_config_default(&cfg);
        int n_eos = 0, n_prompt = 0, n_enc = 0;
        int32_t *eos = int_list(tm_json_get(o, "eos"), &n_eos);
        int32_t *prompt = int_list(tm_json_get(c, "prompt"), &n_prompt);
        int32_t *enc_ids = int_list(tm_json_get(c, "encoder_ids"), &n_enc);
        int n_suppress = 0, n_begin = 0;
        int32_t *suppress = int_list(tm_json_get(o, "suppress_tokens"), &n_suppress);
        int32_t *begin = int_list(tm_json_get(o, "begin_suppress_tokens"), &n_begin);
        cfg.suppress_tokens = suppress, cfg.n_suppress_tokens = n_suppress;
        cfg.begin_suppress_tokens = begin, cfg.n_begin_suppress_tokens = n_begin;
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
        if (st == TM_OK && features) st = run_audio_encoder(&r, g, features, &err);
        else if (st == TM_OK && r.enc) st = run_encoder(&r, g, enc_ids, (size_t)n_enc, &err);
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
        free(suppress);
        free(begin);
        tm_model_free(r.dec);
        tm_model_free(r.enc);
        tm_json_free(c);
    }
    CHECK(n_cases >= 9, "beams.jsonl has %d cases", n_cases);
    free(all);
}

/* ---- The generation config from JSON ---- */

static void test_config(void) {
    tm_generation_config c;
    tm_error err = {0};
    tm_generation_config_default(&c);
    CHECK(c.max_length == 20 && c.max_new_tokens == -1 && c.top_k == 50 && c.top_p == 1.0 &&
          c.num_beams == 1 && c.length_penalty == 1.0 && c.eos_token_ids == NULL,
          "defaults are transformers' GenerationConfig's");
    char *config = slurp(PIPES "/llama-chat/config.json"), *gen = slurp(PIPES "/llama-chat/generation_config.json");
    tm_status st = tm_generation_config_from_json(&c, config, gen, &err);
    CHECK(st == TM_OK && c.n_eos_token_ids == 3 && c.eos_token_ids[0] == 32000 && c.eos_token_ids[2] == 32007 &&
          c.pad_token_id == 32000 && c.bos_token_id == 1,
          "llama-chat: generation_config.json's eos list wins over config.json's one id (%s)", err.message);
    free(config);
    free(gen);
    config = slurp(PIPES "/t5-text2text/config.json");
    gen = slurp(PIPES "/t5-text2text/generation_config.json");
    tm_generation_config_clear(&c);
    tm_generation_config_default(&c);
    st = tm_generation_config_from_json(&c, config, gen, &err);
    CHECK(st == TM_OK && c.decoder_start_token_id == 0 && c.n_eos_token_ids == 1 && c.eos_token_ids[0] == 1 &&
          c.num_beams == 1, "t5: decoder_start_token_id 0, eos 1; task_specific_params not read (%s)", err.message);
    free(config);
    free(gen);
    config = slurp(PIPES "/whisper-asr/config.json");
    gen = slurp(PIPES "/whisper-asr/generation_config.json");
    tm_generation_config_clear(&c);
    tm_generation_config_default(&c);
    st = tm_generation_config_from_json(&c, config, gen, &err);
    CHECK(st == TM_OK && c.n_suppress_tokens == 88 && c.suppress_tokens[0] == 1 && c.suppress_tokens[87] == 50362 &&
          c.n_begin_suppress_tokens == 2 && c.begin_suppress_tokens[0] == 220 &&
          c.begin_suppress_tokens[1] == 50257 && c.max_length == 448 && c.decoder_start_token_id == 50258,
          "whisper: suppress_tokens and begin_suppress_tokens read (%s)", err.message);
    free(config);
    free(gen);
    const char *js = "{\"do_sample\": true, \"temperature\": 0.7, \"top_k\": 0, \"top_p\": 0.9, \"min_p\": 0.05,"
                     " \"typical_p\": 0.8, \"seed\": 42, \"num_beams\": 4, \"num_return_sequences\": 2,"
                     " \"early_stopping\": \"never\", \"length_penalty\": 0.5, \"bad_words_ids\": [[1, 2], [7]],"
                     " \"stop_strings\": [\"\\n\\n\", \"END\"], \"forced_eos_token_id\": [5, 6],"
                     " \"max_new_tokens\": null, \"no_repeat_ngram_size\": 3, \"min_new_tokens\": 4,"
                     " \"unknown_key\": {\"x\": 1}}";
    st = tm_generation_config_from_json(&c, NULL, js, &err);
    CHECK(st == TM_OK && c.do_sample && c.temperature == 0.7 && c.top_k == 0 && c.top_p == 0.9 &&
          c.min_p == 0.05 && c.typical_p == 0.8 && c.seed == 42 && c.num_beams == 4 &&
          c.num_return_sequences == 2 && c.early_stopping == TM_EARLY_STOPPING_NEVER &&
          c.length_penalty == 0.5 && c.n_bad_words == 2 && c.bad_words_lengths[0] == 2 &&
          c.bad_words_ids[2] == 7 && c.n_stop_strings == 2 && !strcmp(c.stop_strings[1], "END") &&
          c.forced_eos_token_id == 5 && c.max_new_tokens == -1 && c.no_repeat_ngram_size == 3 &&
          c.min_new_tokens == 4 && c.n_eos_token_ids == 1, "every key read; eos kept from before (%s)", err.message);
    tm_generation_config before = c;
    const char *bad[] = {"{\"max_new_tokens\": \"ten\"}", "{\"eos_token_id\": [1, -3]}", "{\"do_sample\": 1}",
                         "{\"bad_words_ids\": [1, 2]}", "{\"early_stopping\": \"sometimes\"}", "[1, 2]",
                         "{\"top_k\": 1.5}", "{\"num_beams\": 0}", "{not json", "{\"suppress_tokens\": [1, -1]}",
                         "{\"begin_suppress_tokens\": 220}"};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        memset(&err, 0, sizeof err);
        st = tm_generation_config_from_json(&c, NULL, bad[k], &err);
        CHECK(st == TM_ERR_PARSE && strstr(err.message, "generation_config.json") &&
              !memcmp(&c, &before, sizeof c), "%s: TM_ERR_PARSE naming the file, config unchanged (%s)",
              bad[k], err.message);
    }
    memset(&err, 0, sizeof err);
    st = tm_generation_config_from_json(&c, "{\"eos_token_id\": \"x\"}", NULL, &err);
    CHECK(st == TM_ERR_PARSE && strstr(err.message, "config.json") && strstr(err.message, "eos_token_id"),
          "a bad config.json names it and the key (%s)", err.message);
    tm_generation_config_clear(&c);
    CHECK(c.eos_token_ids == NULL && c.n_stop_strings == 0 && c.owned_ == NULL, "clear empties the lists");
    tm_generation_config_clear(&c);
    tm_generation_config_clear(NULL);
}

/* ---- Sampling, streaming, stop strings and errors on gpt2-gen ---- */

static int gen_ids(tm_model *m, const tm_tokenizer *tok, const tm_generation_config *c, const int32_t *prompt,
                   size_t n_prompt, int32_t *out, size_t cap, size_t *n_out) {
    tm_generator *g = NULL;
    tm_error err = {0};
    tm_status st = tm_generator_create(m, c, tok, &g, &err);
    if (st == TM_OK) st = tm_generator_append(g, prompt, n_prompt, &err);
    if (st == TM_OK) st = tm_generator_generate(g, NULL, NULL, &err);
    const int32_t *ids;
    size_t n = 0;
    if (st == TM_OK) st = tm_generator_sequence(g, 0, &ids, &n, &err);
    if (st == TM_OK) {
        *n_out = n < cap ? n : cap;
        memcpy(out, ids, *n_out * sizeof *out);
    } else {
        printf("generation failed: %s\n", err.message);
    }
    tm_generator_free(g);
    return st == TM_OK;
}

static void test_sampling(repo *r) {
    const int32_t prompt[] = {15496, 11, 616, 1438, 318};   /* "Hello, my name is" */
    tm_generation_config c;
    tm_generation_config_default(&c);
    c.max_new_tokens = 24;
    c.do_sample = 1;
    c.seed = 7;
    c.temperature = 1.5;
    c.top_k = 0;
    int32_t a[64], b[64], d[64], greedy[64];
    size_t na = 0, nb = 0, nd = 0, ng = 0;
    int ok = gen_ids(r->dec, r->tok, &c, prompt, 5, a, 64, &na) && gen_ids(r->dec, r->tok, &c, prompt, 5, b, 64, &nb);
    CHECK(ok && na == 29 && na == nb && !memcmp(a, b, na * sizeof *a), "one seed, one sequence");
    c.seed = 8;
    ok = gen_ids(r->dec, r->tok, &c, prompt, 5, d, 64, &nd);
    CHECK(ok && (nd != na || memcmp(a, d, na * sizeof *a)), "another seed, another sequence");
    c.top_k = 1;   /* sampling from one token is greedy */
    ok = gen_ids(r->dec, r->tok, &c, prompt, 5, d, 64, &nd);
    tm_generation_config gc;
    tm_generation_config_default(&gc);
    gc.max_new_tokens = 24;
    ok = ok && gen_ids(r->dec, r->tok, &gc, prompt, 5, greedy, 64, &ng);
    CHECK(ok && nd == ng && !memcmp(d, greedy, nd * sizeof *d), "top_k 1 sampling is the greedy sequence");
    /* The draw: the inverse of the cumulative distribution, -inf never. */
    float s[5] = {0, -INFINITY, 0, 0, -INFINITY};
    CHECK(tm__sample(s, 5, 0.0) == 0 && tm__sample(s, 5, 0.34) == 2 && tm__sample(s, 5, 0.9999) == 3,
          "draws follow the cumulative probabilities and skip -inf");
    tm__rng rng;
    tm__rng_seed(&rng, 1);
    double lo = 1, hi = 0;
    for (int k = 0; k < 10000; k++) {
        double u = tm__rng_uniform(&rng);
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
    }
    CHECK(lo >= 0 && lo < 0.001 && hi < 1 && hi > 0.999, "uniform draws in [0, 1)");
}

typedef struct stream_acc {
    char text[8192];
    size_t n;
    int calls, bad_utf8, stop_after;
} stream_acc;

static int valid_utf8(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        int len = s[i] < 0x80 ? 1 : (s[i] & 0xE0) == 0xC0 ? 2 : (s[i] & 0xF0) == 0xE0 ? 3 : (s[i] & 0xF8) == 0xF0 ? 4 : 0;
        if (!len || i + (size_t)len > n) return 0;
        for (int k = 1; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80) return 0;
        i += (size_t)len;
    }
    return 1;
}

static int on_text(void *user, const char *text, size_t len, int32_t token) {
    stream_acc *a = user;
    if (!valid_utf8((const unsigned char *)text, len)) a->bad_utf8++;
    if (a->n + len < sizeof a->text) {
        memcpy(a->text + a->n, text, len);
        a->n += len;
        a->text[a->n] = 0;
    }
    a->calls++;
    (void)token;
    return a->stop_after && a->calls >= a->stop_after;
}

/* Streams a generation and checks the chunks: valid UTF-8 each, together the decoded new
 * text. Returns that text (malloc'd). */
static char *stream_check(repo *r, tm_model *m, const int32_t *prompt, size_t n_prompt,
                          const tm_generation_config *c, const char *what, int min_chunks) {
    tm_generator *g = NULL;
    tm_error err = {0};
    stream_acc acc = {0};
    tm_status st = tm_generator_create(m, c, r->tok, &g, &err);
    if (st == TM_OK) st = tm_generator_append(g, prompt, n_prompt, &err);
    if (st == TM_OK) st = tm_generator_generate(g, on_text, &acc, &err);
    const int32_t *ids;
    size_t n = 0;
    char *text = NULL;
    if (st == TM_OK) st = tm_generator_sequence(g, 0, &ids, &n, &err);
    if (st == TM_OK) st = tm_tokenizer_decode(r->tok, ids + n_prompt, n - n_prompt, 1, -1, &text, NULL, &err);
    CHECK(st == TM_OK && text && !strcmp(text, acc.text) && !acc.bad_utf8 && acc.calls >= min_chunks,
          "%s: streamed \"%s\" in %d chunks (%d not UTF-8), decoded \"%s\" (%s)", what, acc.text,
          acc.calls, acc.bad_utf8, text ? text : "", err.message);
    tm_generator_free(g);
    return text;
}

static void test_streaming(repo *gpt2, repo *llama) {
    tm_generation_config c;
    tm_generation_config_default(&c);
    c.max_new_tokens = 20;
    const int32_t hello[] = {15496, 11, 616, 1438, 318};
    free(stream_check(gpt2, gpt2->dec, hello, 5, &c, "gpt2", 3));
    /* "東京は": the new text holds multi-byte characters. */
    int32_t *ids = NULL;
    size_t n = 0;
    tm_json s = {.type = TM_JSON_STRING, .string = "\xe6\x9d\xb1\xe4\xba\xac\xe3\x81\xaf"};
    if (prompt_ids(gpt2, &s, 0, &ids, &n, NULL)) free(stream_check(gpt2, gpt2->dec, ids, n, &c, "gpt2 CJK", 3));
    free(ids);
    /* llama's tokenizer has byte-fallback tokens (<0xE3> ...): Cyrillic and CJK out. */
    s.string = "<|user|>\nHello<|end|>\n<|assistant|>\n";
    tm_generation_config lc;
    tm_generation_config_default(&lc);
    tm_generation_config_from_json(&lc, NULL, llama->gen_config, NULL);
    lc.max_new_tokens = 40;
    if (prompt_ids(llama, &s, 0, &ids, &n, NULL)) free(stream_check(llama, llama->dec, ids, n, &lc, "llama", 3));
    free(ids);
    tm_generation_config_clear(&lc);

    /* A callback that returns non-zero stops the generation. */
    tm_generator *g = NULL;
    stream_acc acc = {.stop_after = 1};
    tm_error err = {0};
    tm_status st = tm_generator_create(gpt2->dec, &c, gpt2->tok, &g, &err);
    if (st == TM_OK) st = tm_generator_append(g, hello, 5, &err);
    if (st == TM_OK) st = tm_generator_generate(g, on_text, &acc, &err);
    const int32_t *out;
    size_t n_out = 0;
    if (st == TM_OK) st = tm_generator_sequence(g, 0, &out, &n_out, &err);
    int32_t t;
    CHECK(st == TM_OK && acc.calls == 1 && n_out < 25 && tm_generator_step(g, &t, NULL, &err) == TM_ERR_INVALID_ARGUMENT,
          "the stream's callback stops generation (%zu ids)", n_out);
    tm_generator_free(g);

    /* Stop strings: "speakWorld cyanHolyWorld..." ends at the token that makes "cyan". */
    const char *stops[] = {"cyan"};
    c.stop_strings = stops;
    c.n_stop_strings = 1;
    char *text = stream_check(gpt2, gpt2->dec, hello, 5, &c, "gpt2 stop string", 1);
    CHECK(text && !strcmp(text, "speakWorld cyan"), "the stop string ends generation: \"%s\"", text ? text : "");
    free(text);
}

static void test_errors(repo *gpt2) {
    tm_error err = {0};
    tm_generator *g = NULL;
    tm_generation_config c;
    int32_t t;
    tm_generator_free(NULL);
    CHECK(tm_generator_create(NULL, NULL, NULL, &g, &err) == TM_ERR_INVALID_ARGUMENT && !g, "NULL model");
    struct { const char *what; void (*set)(tm_generation_config *); } bad[] = {
        {"temperature", NULL}, {"num_return_sequences", NULL}, {"do_sample", NULL}, {"top_p", NULL},
        {"stop strings", NULL}, {"repetition_penalty", NULL}, {"num_beams", NULL}, {"begin_suppress_tokens", NULL}};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        tm_generation_config_default(&c);
        const char *stops[] = {"x"};
        const int32_t negative[] = {-2};
        switch (k) {
        case 0: c.do_sample = 1; c.temperature = 0; break;
        case 1: c.num_beams = 2; c.num_return_sequences = 3; break;
        case 2: c.num_beams = 2; c.do_sample = 1; break;
        case 3: c.do_sample = 1; c.top_p = 1.5; break;
        case 4: c.stop_strings = stops; c.n_stop_strings = 1; break;
        case 5: c.repetition_penalty = 0; break;
        case 6: c.num_beams = 0; break;
        case 7: c.begin_suppress_tokens = negative; c.n_begin_suppress_tokens = 1; break;
        }
        memset(&err, 0, sizeof err);
        g = NULL;
        tm_status st = tm_generator_create(gpt2->dec, &c, NULL, &g, &err);
        CHECK(st == TM_ERR_INVALID_ARGUMENT && !g && strstr(err.message, bad[k].what),
              "a bad %s is refused naming it (%s)", bad[k].what, err.message);
        tm_generator_free(g);
    }
    tm_generation_config_default(&c);
    c.max_new_tokens = 2;
    CHECK(tm_generator_create(gpt2->dec, &c, NULL, &g, &err) == TM_OK, "create");
    const int32_t neg = -4, hello[] = {15496, 11};
    CHECK(tm_generator_append(g, &neg, 1, &err) == TM_ERR_INVALID_ARGUMENT, "a negative id is refused");
    CHECK(tm_generator_append(g, hello, 2, &err) == TM_OK, "append");
    int done = 0;
    CHECK(tm_generator_step(g, &t, &done, &err) == TM_OK && !done, "step 1");
    CHECK(tm_generator_append(g, hello, 1, &err) == TM_ERR_INVALID_ARGUMENT, "append after the start is refused");
    int64_t dims[3] = {1, 2, 32};
    tm_tensor *h = tm_tensor_new(TM_FLOAT, 3, dims);
    CHECK(tm_generator_set_input(g, "encoder_hidden_states", h, &err) == TM_ERR_INVALID_ARGUMENT,
          "an input after the start is refused");
    tm_tensor_free(h);
    CHECK(tm_generator_step(g, &t, &done, &err) == TM_OK && done, "step 2 ends at max_new_tokens");
    CHECK(tm_generator_step(g, &t, &done, &err) == TM_ERR_INVALID_ARGUMENT, "a step after the end is refused");
    const int32_t *ids;
    size_t n;
    CHECK(tm_generator_sequence(g, 0, &ids, &n, &err) == TM_OK && n == 4 && tm_generator_prompt_length(g) == 2,
          "the sequence holds the prompt and 2 new tokens");
    CHECK(tm_generator_sequence(g, 1, &ids, &n, &err) == TM_ERR_INVALID_ARGUMENT, "sequence 1 of 1 is refused");
    tm_generator_free(g);
    /* An encoder-decoder input the model does not take. */
    CHECK(tm_generator_create(gpt2->dec, NULL, NULL, &g, &err) == TM_OK, "create");
    h = tm_tensor_new(TM_FLOAT, 3, dims);
    CHECK(tm_generator_set_input(g, "encoder_hidden_states", h, &err) == TM_ERR_INVALID_ARGUMENT,
          "gpt2 takes no encoder_hidden_states (%s)", err.message);
    tm_tensor_free(h);
    tm_generator_free(g);
}

/* ---- tm_decoder_copy_state: a fork continues as the original ---- */

static void test_copy_state(repo *gpt2, repo *llama) {
    tm_error err = {0};
    tm_decoder *a = NULL, *b = NULL, *c = NULL, *other = NULL;
    const int64_t prompt[] = {15496, 11, 616, 1438, 318}, next[] = {4871}, more[] = {12, 99};
    tm_status st = tm_decoder_create(gpt2->dec, NULL, &a, &err);
    if (st == TM_OK) st = tm_decoder_create(gpt2->dec, NULL, &b, &err);
    if (st == TM_OK) st = tm_decoder_create(gpt2->dec, NULL, &c, &err);
    if (st == TM_OK) st = tm_decoder_create(llama->dec, NULL, &other, &err);
    if (st == TM_OK) st = tm_decoder_append(a, prompt, 5, &err);
    /* Copied straight after a first prompt (its presents still waiting in its plan). */
    if (st == TM_OK) st = tm_decoder_copy_state(b, a, &err);
    CHECK(st == TM_OK && tm_decoder_length(b) == 5 && !tm_decoder_logits(b), "copy after the prompt (%s)", err.message);
    int same = st == TM_OK;
    for (int k = 0; k < 2 && same; k++) {
        const int64_t *tok = k ? more : next;
        int64_t n = k ? 2 : 1;
        same = tm_decoder_append(a, tok, n, &err) == TM_OK && tm_decoder_append(b, tok, n, &err) == TM_OK;
        const tm_tensor *la = tm_decoder_logits(a), *lb = tm_decoder_logits(b);
        same = same && la && lb && tm_tensor_numel(la) == tm_tensor_numel(lb) &&
               !memcmp(tm_tensor_data_const(la), tm_tensor_data_const(lb), (size_t)tm_tensor_numel(la) * sizeof(float));
    }
    CHECK(same, "the copy's next steps give the original's logits, bit for bit (%s)", err.message);
    /* A copy of a longer cache into a decoder that ran something else. */
    st = tm_decoder_append(c, more, 2, &err);
    if (st == TM_OK) st = tm_decoder_copy_state(c, a, &err);
    same = st == TM_OK && tm_decoder_length(c) == 8 && tm_decoder_append(a, next, 1, &err) == TM_OK &&
           tm_decoder_append(c, next, 1, &err) == TM_OK &&
           !memcmp(tm_tensor_data_const(tm_decoder_logits(a)), tm_tensor_data_const(tm_decoder_logits(c)),
                   (size_t)tm_tensor_numel(tm_decoder_logits(a)) * sizeof(float));
    CHECK(same, "a copy over another sequence (%s)", err.message);
    memset(&err, 0, sizeof err);
    CHECK(tm_decoder_copy_state(other, a, &err) == TM_ERR_INVALID_ARGUMENT && strstr(err.message, "different models"),
          "decoders of two models are refused (%s)", err.message);
    CHECK(tm_decoder_copy_state(NULL, a, &err) == TM_ERR_INVALID_ARGUMENT, "NULL is refused");
    tm_decoder_free(a);
    tm_decoder_free(b);
    tm_decoder_free(c);
    tm_decoder_free(other);
}

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : NULL;
    if (!only || !strcmp(only, "processors")) test_processors();
    if (!only || !strcmp(only, "beams")) test_beams();
    if (!only || !strcmp(only, "config")) test_config();
    if (!only || !strcmp(only, "sampling")) {
        repo gpt2, llama;
        if (repo_open(&gpt2, "gpt2-gen") && repo_open(&llama, "llama-chat")) {
            test_sampling(&gpt2);
            test_streaming(&gpt2, &llama);
            test_errors(&gpt2);
            test_copy_state(&gpt2, &llama);
        }
        repo_close(&gpt2);
        repo_close(&llama);
    }
    if (!only || !strcmp(only, "gpt2-gen")) test_cases("gpt2-gen");
    if (!only || !strcmp(only, "llama-chat")) test_cases("llama-chat");
    if (!only || !strcmp(only, "t5-text2text")) test_cases("t5-text2text");
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
