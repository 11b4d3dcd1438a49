/* The models transmuter serve loads: a repository folder (its config.json's architecture
 * decides the task: a causal LM generates, a sequence classifier classifies, anything else
 * embeds) or a bare .onnx file (tensors in, tensors out). Not the requests' handling. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "serve.h"
#include "core/status.h"

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int ends_with(const char *s, const char *tail) {
    size_t n = strlen(s), m = strlen(tail);
    return n >= m && !strcmp(s + n - m, tail);
}

static char *read_all(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    tm__buf b = {0};
    char chunk[4096];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) tm__put_len(&b, chunk, got);
    fclose(f);
    if (b.oom || !b.s) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

/* The base name of a path without its .onnx and trailing slashes. */
static void base_name(const char *path, char *out, size_t cap) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t start = n;
    while (start > 0 && path[start - 1] != '/') start--;
    size_t len = n - start;
    if (len > 5 && !strncmp(path + n - 5, ".onnx", 5)) len -= 5;
    if (len >= cap) len = cap - 1;
    memcpy(out, path + start, len);
    out[len] = 0;
}

/* What config.json's architectures say the repository is for. */
/* config.json's labels: id2label's entries, else num_labels, else transformers' 2. */
static int n_labels(const tm_json *config) {
    const tm_json *l = tm_json_get(config, "id2label"), *n = tm_json_get(config, "num_labels");
    if (l && l->type == TM_JSON_OBJECT) return l->n;
    if (n && n->type == TM_JSON_NUMBER) return (int)n->number;
    return 2;
}

/* What config.json's architectures say the repository is for. A sequence classifier with
 * one label is a cross-encoder (TEI's rule): it reranks, and classifies too. */
static int repo_caps(const tm_json *config) {
    const tm_json *arch = tm_json_get(config, "architectures");
    for (int i = 0; arch && arch->type == TM_JSON_ARRAY && i < arch->n; i++) {
        const char *a = arch->items[i].type == TM_JSON_STRING ? arch->items[i].string : "";
        if (ends_with(a, "ForCausalLM") || ends_with(a, "LMHeadModel")) return SERVE_COMPLETE;
        if (ends_with(a, "ForSequenceClassification"))
            return n_labels(config) == 1 ? SERVE_CLASSIFY | SERVE_RERANK : SERVE_CLASSIFY;
    }
    return SERVE_EMBED;
}

/* The special tokens as the chat template's variables, as transformers passes them. */
static char *special_vars(const tm_tokenizer *tok) {
    static const struct { const char *name; tm_special_role role; } v[] = {
        {"bos_token", TM_SPECIAL_BOS}, {"eos_token", TM_SPECIAL_EOS},
        {"unk_token", TM_SPECIAL_UNK}, {"pad_token", TM_SPECIAL_PAD}};
    tm__buf b = {0};
    tm__put(&b, "{");
    int any = 0;
    for (size_t k = 0; k < sizeof v / sizeof *v; k++) {
        const char *t = tm_tokenizer_special_token(tok, v[k].role, NULL);
        if (!t) continue;
        if (any++) tm__put(&b, ",");
        tm__put_string(&b, v[k].name);
        tm__put(&b, ":");
        tm__put_string(&b, t);
    }
    tm__put(&b, "}");
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}

/* tokenizer_config.json's add_bos_token or add_eos_token: the text-generation pipeline
 * adds special tokens to a plain prompt only then (as tools/generate.c). */
static int adds_special_tokens(const tm_tokenizer *tok) {
    const char *cfg = tm_tokenizer_config_json(tok);
    tm_json *j = cfg ? tm_json_parse(cfg, strlen(cfg)) : NULL;
    const tm_json *b = tm_json_get(j, "add_bos_token"), *e = tm_json_get(j, "add_eos_token");
    int yes = (b && b->type == TM_JSON_BOOL && b->number) || (e && e->type == TM_JSON_BOOL && e->number);
    tm_json_free(j);
    return yes;
}

static tm_status load_decoder(serve_model *m, const tm_json *config, int threads, tm_error *err) {
    char path[4096];
    tm_status st = tm_tokenizer_load(m->path, NULL, &m->tok, err);
    if (st != TM_OK) return st;
    snprintf(path, sizeof path, "%s/config.json", m->path);
    char *cfg_text = read_all(path);
    snprintf(path, sizeof path, "%s/generation_config.json", m->path);
    char *gen_text = read_all(path);
    st = tm_generation_config_from_json(&m->gen, cfg_text, gen_text, err);
    free(cfg_text);
    free(gen_text);
    if (st != TM_OK) return st;
    if (m->gen.max_new_tokens < 0) m->gen.max_new_tokens = 256;
    tm_load_options lo;
    tm_load_options_default(&lo);
    lo.threads = threads;
    const char *names[] = {"decoder_model_merged", "model"};
    for (int k = 0; k < 2 && !m->model; k++) {
        snprintf(path, sizeof path, "%s/onnx/%s.onnx", m->path, names[k]);
        if (is_file(path) && (st = tm_model_load(path, &lo, &m->model, err)) != TM_OK) return st;
    }
    if (!m->model)
        return tm__fail(err, TM_ERR_NOT_FOUND, "%s: no onnx/decoder_model_merged.onnx nor onnx/model.onnx",
                        m->path);
    m->add_special = adds_special_tokens(m->tok);
    const tm_json *mpe = tm_json_get(config, "max_position_embeddings");
    m->max_context = mpe && mpe->type == TM_JSON_NUMBER ? (int64_t)mpe->number : tm_tokenizer_model_max_length(m->tok);
    const char *src = tm_tokenizer_chat_template(m->tok, NULL);
    if (src) {
        st = tm_chat_template_create(src, strlen(src), &m->tpl, err);
        if (st != TM_OK) return st;
        m->chat_vars = special_vars(m->tok);
        if (!m->chat_vars) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        m->caps |= SERVE_CHAT;
    }
    return TM_OK;
}

static tm_status load_repo(serve_model *m, int threads, tm_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", m->path);
    tm_json *config = tm_json_read_file(path);
    if (!config) return tm__fail(err, TM_ERR_PARSE, "%s: missing or malformed", path);
    m->caps = repo_caps(config);
    tm_status st;
    if (m->caps & SERVE_COMPLETE) {
        st = load_decoder(m, config, threads, err);
    } else {
        char load[64];
        snprintf(load, sizeof load, "{\"threads\": %d}", threads);
        const char *task = m->caps & SERVE_CLASSIFY ? "text-classification" : "feature-extraction";
        st = tm_pipeline_create(task, m->path, load, &m->pipe, err);
        if (st == TM_OK) st = tm_tokenizer_load(m->path, NULL, &m->tok, err);
        if (st == TM_OK) m->max_context = tm_tokenizer_model_max_length(m->tok);
    }
    tm_json_free(config);
    return st;
}

tm_status tm__serve_model_load(const char *arg, int threads, serve_model *m, tm_error *err) {
    memset(m, 0, sizeof *m);
    tm_generation_config_default(&m->gen);
    m->max_context = -1;
    const char *eq = strchr(arg, '=');
    const char *path = arg;
    if (eq && eq != arg && !memchr(arg, '/', (size_t)(eq - arg))) {
        size_t n = (size_t)(eq - arg);
        if (n >= sizeof m->name) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "model name too long: %s", arg);
        memcpy(m->name, arg, n);
        m->name[n] = 0;
        path = eq + 1;
    } else {
        base_name(arg, m->name, sizeof m->name);
    }
    if (!m->name[0]) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "no model name in '%s'", arg);
    m->path = strdup(path);
    if (!m->path) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    tm_status st;
    if (is_dir(path)) {
        st = load_repo(m, threads, err);
    } else if (is_file(path)) {
        tm_load_options lo;
        tm_load_options_default(&lo);
        lo.threads = threads;
        m->caps = SERVE_TENSORS;
        st = tm_model_load(path, &lo, &m->model, err);
    } else {
        st = tm__fail(err, TM_ERR_NOT_FOUND, "%s: no such folder or file", path);
    }
    if (st != TM_OK) tm__serve_model_free(m);
    return st;
}

void tm__serve_model_free(serve_model *m) {
    if (!m) return;
    tm_pipeline_free(m->pipe);
    tm_tokenizer_free(m->tok);
    tm_model_free(m->model);
    tm_chat_template_free(m->tpl);
    free(m->chat_vars);
    free(m->path);
    tm_generation_config_clear(&m->gen);
    char name[sizeof m->name];
    memcpy(name, m->name, sizeof name);
    memset(m, 0, sizeof *m);
    memcpy(m->name, name, sizeof name);
}
