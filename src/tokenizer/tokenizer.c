/* The tokenizer: loading tokenizer.json (+ tokenizer_config.json, special_tokens_map.json)
 * from a folder, a file or hf://, the encode pipeline (added tokens, normalize,
 * pre-tokenize, model, truncation, post-process, padding), batches on a thread pool,
 * decoding, and the public tm_tokenizer / tm_encoding API. Components live in their own
 * files (normalizer_*.c, pretok_*.c, decoder_*.c, model_*.c, processor.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "added.h"
#include "../backends/cpu/pool.h"
#include "../hub/hub.h"

static const char *const role_keys[7] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                         "pad_token", "cls_token", "mask_token"};

struct tm_tokenizer {
    tm_normalizer *normalizer;
    tm_pretokenizer *pretok;
    tm_tok_model *model;
    tm_processor *processor;
    tm_decoder *decoder;
    tm_added added;
    char *config_text;          /* tokenizer_config.json, NUL-terminated */
    tm_json *config;
    char *chat_template;        /* the string form, when a string */
    char *roles[7];
    int32_t role_ids[7];
    int64_t model_max_length;
    tm_side padding_side, truncation_side;
    int cleanup;                /* clean_up_tokenization_spaces */
    size_t vocab_size;
    char **id_strings;          /* id -> NUL-terminated string cache for id_to_token */
    size_t n_id_strings;
};

struct tm_encoding {
    size_t n;
    int32_t *ids, *attention, *type_ids, *special, *words, *seqs, *offsets, *char_offsets, *lens;
    const char **tokens;
    char *strings;
    struct tm_encoding **over;
    size_t n_over;
};

static tm_status no_memory(tm_error *err) {
    return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
}

static char *dup_len(const char *s, size_t len) {
    char *d = malloc(len + 1);
    if (d) memcpy(d, s, len), d[len] = '\0';
    return d;
}

/* ---- Files ----------------------------------------------------------------------------- */

static tm_status read_file(const char *path, char **out, size_t *len, tm_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return tm__fail(err, TM_ERR_IO, "cannot open '%s'", path);
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 65536 + 1 > cap) {
            cap = cap ? cap * 2 : 1 << 20;
            char *b = realloc(buf, cap);
            if (!b) {
                free(buf);
                fclose(f);
                return no_memory(err);
            }
            buf = b;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return tm__fail(err, TM_ERR_IO, "cannot read '%s'", path);
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return TM_OK;
}

static int is_dir(const char *p) {
    struct stat st;
    return !stat(p, &st) && S_ISDIR(st.st_mode);
}

static int exists(const char *p) {
    struct stat st;
    return !stat(p, &st);
}

/* ---- Loading ---------------------------------------------------------------------------- */

static tm_status load_added(tm_tokenizer *t, const tm_json *arr, tm_error *err) {
    if (!arr || arr->type == TM_JSON_NULL) return tm__added_finish(&t->added, err);
    if (arr->type != TM_JSON_ARRAY) return tm__tok_fail(err, "added_tokens", NULL, "expected an array");
    /* Rust's add_tokens: the id is the model's id of the content when it has one, else the
     * next id after the model's vocabulary; a repeated content keeps its first id. */
    int32_t next = (int32_t)t->model->vocab_size(t->model);
    tm_vocab seen = {0};
    tm_status s = TM_OK;
    for (int i = 0; i < arr->n && !s; i++) {
        const tm_json *o = &arr->items[i];
        char path[64];
        snprintf(path, sizeof path, "added_tokens[%d]", i);
        const char *content;
        size_t len;
        tm_added_token a = {0};
        if (o->type != TM_JSON_OBJECT) {
            s = tm__tok_fail(err, path, NULL, "expected an object");
            break;
        }
        s = tm__tj_string(o, "content", NULL, &content, &len, path, err);
        if (!s && !content) s = tm__tok_fail(err, path, "content", "missing");
        if (!s) s = tm__tj_bool(o, "special", 0, &a.special, path, err);
        if (!s) s = tm__tj_bool(o, "single_word", 0, &a.single_word, path, err);
        if (!s) s = tm__tj_bool(o, "lstrip", 0, &a.lstrip, path, err);
        if (!s) s = tm__tj_bool(o, "rstrip", 0, &a.rstrip, path, err);
        if (!s) s = tm__tj_bool(o, "normalized", !a.special, &a.normalized, path, err);
        if (s || !len) continue;
        int32_t id = tm__vocab_find(&seen, content, len);
        if (id < 0) id = t->model->token_to_id(t->model, content, len);
        if (id < 0) id = next++;
        s = tm__vocab_add(&seen, content, len, id, err);
        if (s) break;
        a.id = id;
        a.len = len;
        if (!(a.content = dup_len(content, len))) {
            s = no_memory(err);
            break;
        }
        if (a.normalized && t->normalizer) {
            tm_nstr ns;
            s = tm__nstr_init(&ns, content, len, 0) ? no_memory(err) : TM_OK;
            if (!s) s = t->normalizer->normalize(t->normalizer, &ns, err);
            if (!s && (ns.len != len || memcmp(ns.s, content, len))) {
                a.pattern = dup_len(ns.s, ns.len);
                a.pattern_len = ns.len;
                if (!a.pattern) s = no_memory(err);
            }
            tm__nstr_free(&ns);
        }
        if (!s) s = tm__added_add(&t->added, &a, err);
        if (s) {
            free(a.content);
            free(a.pattern);
        }
    }
    tm__vocab_free(&seen);
    if (!s) s = tm__added_finish(&t->added, err);
    return s;
}

/* A role's token in a config: "x" or {"content": "x", ...}. */
static const char *role_value(const tm_json *cfg, const char *key) {
    const tm_json *v = tm_json_get(cfg, key);
    if (!v) return NULL;
    if (v->type == TM_JSON_STRING) return v->string;
    if (v->type == TM_JSON_OBJECT) return tm_json_get_string(v, "content");
    return NULL;
}

static tm_status load_config(tm_tokenizer *t, const char *dir, tm_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    t->cleanup = 1;
    t->model_max_length = -1;
    if (exists(path)) {
        size_t len;
        tm_status s = read_file(path, &t->config_text, &len, err);
        if (s) return s;
        t->config = tm_json_parse(t->config_text, len);
        if (!t->config || t->config->type != TM_JSON_OBJECT)
            return tm__fail(err, TM_ERR_PARSE, "%s: not a JSON object", path);
    }
    tm_json *map = NULL;
    snprintf(path, sizeof path, "%s/special_tokens_map.json", dir);
    if (exists(path)) {
        char *text;
        size_t len;
        tm_status s = read_file(path, &text, &len, err);
        if (s) return s;
        map = tm_json_parse(text, len);
        free(text);
        if (!map || map->type != TM_JSON_OBJECT) {
            tm_json_free(map);
            return tm__fail(err, TM_ERR_PARSE, "%s: not a JSON object", path);
        }
    }
    for (int r = 0; r < 7; r++) {
        const char *v = t->config ? role_value(t->config, role_keys[r]) : NULL;
        if (!v && map) v = role_value(map, role_keys[r]);
        if (v && !(t->roles[r] = dup_len(v, strlen(v)))) {
            tm_json_free(map);
            return no_memory(err);
        }
    }
    tm_json_free(map);
    if (!t->config) return TM_OK;
    const tm_json *v = tm_json_get(t->config, "clean_up_tokenization_spaces");
    if (v && v->type == TM_JSON_BOOL) t->cleanup = v->number != 0;
    v = tm_json_get(t->config, "model_max_length");
    if (v && v->type == TM_JSON_NUMBER && v->number > 0 && v->number < 1e15)
        t->model_max_length = (int64_t)v->number;
    const char *side = tm_json_get_string(t->config, "padding_side");
    if (side) t->padding_side = !strcmp(side, "left") ? TM_SIDE_LEFT : TM_SIDE_RIGHT;
    side = tm_json_get_string(t->config, "truncation_side");
    if (side) t->truncation_side = !strcmp(side, "left") ? TM_SIDE_LEFT : TM_SIDE_RIGHT;
    return TM_OK;
}

static tm_status load_components(tm_tokenizer *t, const tm_json *doc, tm_error *err) {
    if (!doc || doc->type != TM_JSON_OBJECT)
        return tm__fail(err, TM_ERR_PARSE, "tokenizer.json: not a JSON object");
    const tm_json *v;
    tm_status s = TM_OK;
    if ((v = tm_json_get(doc, "normalizer")) && v->type != TM_JSON_NULL)
        s = tm__normalizer_load(v, "normalizer", &t->normalizer, err);
    if (!s && (v = tm_json_get(doc, "pre_tokenizer")) && v->type != TM_JSON_NULL)
        s = tm__pretokenizer_load(v, "pre_tokenizer", &t->pretok, err);
    if (!s) {
        v = tm_json_get(doc, "model");
        s = v ? tm__model_load(v, "model", &t->model, err)
              : tm__fail(err, TM_ERR_PARSE, "tokenizer.json: no \"model\"");
    }
    if (!s && (v = tm_json_get(doc, "post_processor")) && v->type != TM_JSON_NULL)
        s = tm__processor_load(v, "post_processor", &t->processor, err);
    if (!s && (v = tm_json_get(doc, "decoder")) && v->type != TM_JSON_NULL)
        s = tm__decoder_load(v, "decoder", &t->decoder, err);
    if (!s) s = load_added(t, tm_json_get(doc, "added_tokens"), err);
    return s;
}

/* Distinct strings of the model and the added tokens. */
static void count_vocab(tm_tokenizer *t) {
    size_t n = t->model->vocab_size(t->model);
    for (size_t i = 0; i < t->added.n; i++) {
        const tm_added_token *a = &t->added.tok[i];
        if (t->model->token_to_id(t->model, a->content, a->len) < 0 &&
            tm__vocab_find(&t->added.by_content, a->content, a->len) == a->id)
            n++;
    }
    /* a content repeated in added_tokens counts once */
    size_t dup = t->added.n - t->added.by_content.n;
    t->vocab_size = n > dup ? n - dup : n;
    size_t model_only = t->model->vocab_size(t->model);
    if (t->vocab_size < model_only) t->vocab_size = model_only;
}

static tm_status load_from(const char *json_path, const char *dir, const tm_tokenizer_options *o,
                           tm_tokenizer **out, tm_error *err) {
    tm_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return no_memory(err);
    char *text = NULL;
    size_t len = 0;
    tm_status s = read_file(json_path, &text, &len, err);
    tm_json *doc = NULL;
    if (!s) {
        doc = tm_json_parse_ex(text, len, TM_JSON_ALLOW_NUL);
        free(text);
        if (!doc) s = tm__fail(err, TM_ERR_PARSE, "%s: not valid JSON", json_path);
    }
    if (!s) s = load_components(t, doc, err);
    tm_json_free(doc);
    if (!s && !(o && o->ignore_config) && dir) s = load_config(t, dir, err);
    else if (!s) t->cleanup = 1, t->model_max_length = -1;
    if (s) {
        tm_tokenizer_free(t);
        return s;
    }
    for (int r = 0; r < 7; r++)
        t->role_ids[r] = t->roles[r] ? tm_tokenizer_token_to_id(t, t->roles[r], strlen(t->roles[r])) : -1;
    count_vocab(t);
    *out = t;
    return TM_OK;
}

static tm_status load_hub(const char *source, const tm_tokenizer_options *o, tm_tokenizer **out,
                          tm_error *err) {
    char *json = NULL;
    tm_status s = tm_hub_resolve_file(source, "tokenizer.json", &json, err);
    if (s) return s;
    if (!(o && o->ignore_config)) {
        /* optional companions: a missing one is no error */
        static const char *const extra[] = {"tokenizer_config.json", "special_tokens_map.json"};
        for (int i = 0; i < 2; i++) {
            char *p = NULL;
            tm_error e2;
            if (tm_hub_resolve_file(source, extra[i], &p, &e2) == TM_OK) free(p);
            else if (e2.code != TM_ERR_NOT_FOUND) {
                tm__error_copy(err, &e2);
                free(json);
                return e2.code;
            }
        }
    }
    char *dir = dup_len(json, strlen(json));
    if (!dir) {
        free(json);
        return no_memory(err);
    }
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    s = load_from(json, dir, o, out, err);
    free(dir);
    free(json);
    return s;
}

tm_tokenizer_options tm_tokenizer_options_default(void) {
    tm_tokenizer_options o = {sizeof o, 0};
    return o;
}

tm_status tm_tokenizer_load(const char *source, const tm_tokenizer_options *opts,
                            tm_tokenizer **out, tm_error *err) {
    if (!source || !out) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_tokenizer_load: NULL argument");
    if (tm_hub_is_source(source)) return load_hub(source, opts, out, err);
    char path[4096];
    if (is_dir(source)) {
        snprintf(path, sizeof path, "%s/tokenizer.json", source);
        if (!exists(path))
            return tm__fail(err, TM_ERR_NOT_FOUND, "no tokenizer.json in '%s'", source);
        return load_from(path, source, opts, out, err);
    }
    if (!exists(source)) return tm__fail(err, TM_ERR_NOT_FOUND, "no such file: '%s'", source);
    snprintf(path, sizeof path, "%s", source);
    char *slash = strrchr(path, '/');
    if (slash) *slash = '\0';
    else snprintf(path, sizeof path, ".");
    return load_from(source, path, opts, out, err);
}

void tm_tokenizer_free(tm_tokenizer *t) {
    if (!t) return;
    tm__normalizer_free(t->normalizer);
    tm__pretokenizer_free(t->pretok);
    if (t->model) t->model->free(t->model);
    if (t->processor) t->processor->free(t->processor);
    tm__decoder_free(t->decoder);
    tm__added_free(&t->added);
    free(t->config_text);
    tm_json_free(t->config);
    free(t->chat_template);
    for (int r = 0; r < 7; r++) free(t->roles[r]);
    free(t);
}

/* ---- Encoding one sequence ------------------------------------------------------------- */

/* Splits every untokenized split on the added tokens of one set (Rust's
 * split_with_indices); when normalize is set, the split is normalized first. */
typedef struct added_ctx {
    const tm_tokenizer *t;
    int normalized;
    tm_pstr *out_tokens;        /* unused */
} added_ctx;

static tm_status extract_added(const tm_tokenizer *t, tm_pstr *ps, int normalized, tm_error *err) {
    tm_pstr out = {0};
    tm_status s = TM_OK;
    for (size_t i = 0; i < ps->n && !s; i++) {
        tm_split *sp = &ps->v[i];
        if (sp->n_tokens >= 0) {
            /* move it as is */
            if (out.n == out.cap) {
                size_t cap = out.cap ? out.cap * 2 : 8;
                tm_split *v = realloc(out.v, cap * sizeof *v);
                if (!v) { s = no_memory(err); break; }
                out.v = v, out.cap = cap;
            }
            out.v[out.n++] = *sp;
            memset(sp, 0, sizeof *sp);
            sp->n_tokens = -1;
            continue;
        }
        if (normalized && t->normalizer) {
            s = t->normalizer->normalize(t->normalizer, &sp->ns, err);
            if (s) break;
        }
        tm_added_match *m;
        size_t nm;
        s = tm__added_find(&t->added, normalized, sp->ns.s, sp->ns.len, &m, &nm, err);
        if (s) break;
        size_t prev = 0;
        for (size_t k = 0; k <= nm && !s; k++) {
            size_t ms = k < nm ? m[k].start : sp->ns.len;
            /* the text before the match, then the match */
            for (int part = 0; part < 2 && !s; part++) {
                size_t a = part ? ms : prev, b = part ? (k < nm ? m[k].end : ms) : ms;
                if (part && k == nm) break;
                if (b <= a && !(part == 0 && k == 0 && nm == 0 && sp->ns.len == 0)) continue;
                if (b <= a) continue;
                tm_split nsp = {.tokens = NULL, .n_tokens = -1};
                if (tm__nstr_slice(&sp->ns, a, b, &nsp.ns)) { s = no_memory(err); break; }
                if (part) {
                    const tm_added_token *at = &t->added.tok[m[k].index];
                    nsp.tokens = malloc(sizeof *nsp.tokens);
                    if (!nsp.tokens) { tm__nstr_free(&nsp.ns); s = no_memory(err); break; }
                    /* the token's string is the text it matched, as Rust's: with the
                     * whitespace lstrip/rstrip took ("<|user|>\n"), normalized for
                     * normalized=true tokens (RobertaProcessing trims offsets by it) */
                    const char *val = at->content;
                    int owned = 0;
                    if (nsp.ns.len != at->len || memcmp(nsp.ns.s, at->content, at->len)) {
                        val = dup_len(nsp.ns.s, nsp.ns.len);
                        owned = 1;
                    }
                    if (!val) { free(nsp.tokens); tm__nstr_free(&nsp.ns); s = no_memory(err); break; }
                    nsp.tokens[0] = (tm_tok_token){at->id, 0, (uint32_t)(b - a), (uint32_t)nsp.ns.len,
                                                   val, owned};
                    nsp.n_tokens = 1;
                }
                if (out.n == out.cap) {
                    size_t cap = out.cap ? out.cap * 2 : 8;
                    tm_split *v = realloc(out.v, cap * sizeof *v);
                    if (!v) { tm__nstr_free(&nsp.ns); free(nsp.tokens); s = no_memory(err); break; }
                    out.v = v, out.cap = cap;
                }
                out.v[out.n++] = nsp;
            }
            if (k < nm) prev = m[k].end;
        }
        free(m);
    }
    if (s) {
        tm__pstr_free(&out);
        return s;
    }
    tm__pstr_free(ps);
    *ps = out;
    return TM_OK;
}

/* Token strings that must outlive the splits (Unigram pieces) go to a pool. */
typedef struct pool_str {
    char **v;
    size_t n, cap;
} pool_str;

static void pool_free(pool_str *p) {
    for (size_t i = 0; i < p->n; i++) free(p->v[i]);
    free(p->v);
    memset(p, 0, sizeof *p);
}

static int pool_keep(pool_str *p, char *s) {
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 16;
        char **v = realloc(p->v, cap * sizeof *v);
        if (!v) return 0;
        p->v = v, p->cap = cap;
    }
    p->v[p->n++] = s;
    return 1;
}

/* Tokenizes the splits with the model. With a limit (Rust 0.23's early exit when
 * truncating), splits are tokenized from the kept side only until `limit` tokens are
 * reached, and the splits beyond are dropped (so they never reach overflowing parts). */
static tm_status tokenize_splits(const tm_tokenizer *t, tm_pstr *ps, size_t limit, int left,
                                 tm_error *err) {
    size_t total = 0, keep_from = 0, keep_to = ps->n;
    for (size_t k = 0; k < ps->n; k++) {
        size_t i = left ? ps->n - 1 - k : k;
        tm_split *sp = &ps->v[i];
        if (sp->n_tokens < 0) {
            tm_status s = t->model->tokenize(t->model, sp->ns.s, sp->ns.len, &sp->tokens,
                                             &sp->n_tokens, err);
            if (s) {
                sp->n_tokens = -1;
                return s;
            }
            total += (size_t)sp->n_tokens;
            if (limit && total >= limit) {
                if (left) keep_from = i;
                else keep_to = i + 1;
                break;
            }
        } else {
            total += (size_t)sp->n_tokens;
        }
    }
    /* drop the splits never tokenized (they hold no tokens) */
    for (size_t i = 0; i < ps->n; i++) {
        if (i >= keep_from && i < keep_to) continue;
        tm__nstr_free(&ps->v[i].ns);
        for (int k = 0; k < ps->v[i].n_tokens; k++)
            if (ps->v[i].tokens[k].owned) free((char *)ps->v[i].tokens[k].value);
        free(ps->v[i].tokens);
    }
    if (keep_from) memmove(ps->v, ps->v + keep_from, (keep_to - keep_from) * sizeof *ps->v);
    ps->n = keep_to - keep_from;
    return TM_OK;
}

static tm_status encode_one(const tm_tokenizer *t, const char *text, size_t len, int32_t type_id,
                            int32_t seq, size_t limit, int left, pool_str *pool, tm_ienc *out,
                            tm_error *err) {
    tm_pstr ps = {0};
    tm_split first = {.tokens = NULL, .n_tokens = -1};
    memset(out, 0, sizeof *out);
    if (tm__nstr_init(&first.ns, text, len, 0)) return no_memory(err);
    ps.v = malloc(sizeof *ps.v);
    if (!ps.v) {
        tm__nstr_free(&first.ns);
        return no_memory(err);
    }
    ps.v[0] = first;
    ps.n = ps.cap = 1;
    tm_status s = extract_added(t, &ps, 0, err);
    if (!s) s = extract_added(t, &ps, 1, err);
    if (!s && t->pretok) s = t->pretok->pre_tokenize(t->pretok, &ps, err);
    if (!s) s = tokenize_splits(t, &ps, limit, left, err);
    for (size_t i = 0; i < ps.n && !s; i++) {
        tm_split *sp = &ps.v[i];
        for (int k = 0; k < sp->n_tokens && !s; k++) {
            tm_tok_token *tk = &sp->tokens[k];
            const char *str = tk->value;
            if (tk->owned) {
                if (!pool_keep(pool, (char *)tk->value)) { s = no_memory(err); break; }
                tk->owned = 0;
            }
            tm_span r;
            if (tk->end <= sp->ns.len) r = tm__nstr_original_range(&sp->ns, tk->start, tk->end);
            else r = (tm_span){tk->start, tk->end};
            tm_etok e = {.id = tk->id, .type_id = type_id, .word = (int32_t)i, .seq = seq,
                         .start = r.start, .end = r.end, .str = str, .len = tk->value_len,
                         .special = 0, .attention = 1};
            s = tm__ienc_push(out, &e, err);
        }
    }
    tm__pstr_free(&ps);
    if (s) tm__ienc_free(out);
    return s;
}

/* ---- The whole encode -------------------------------------------------------------------- */

static tm_status check_utf8(const char *s, size_t len, const char *what, tm_error *err) {
    size_t bad;
    if (tm__utf8_valid(s, len, &bad)) return TM_OK;
    return tm__fail_at(err, TM_ERR_INVALID_ARGUMENT, NULL, NULL, what,
                       "tokenizer: the %s is not valid UTF-8 (byte %zu)", what, bad);
}

static tm_status truncate_encodings(tm_ienc *a, tm_ienc *b, size_t max_len, size_t stride,
                                    tm_truncation strategy, int left, tm_error *err) {
    if (max_len == 0) {
        tm_status s = tm__ienc_truncate(a, 0, stride, left, err);
        if (!s && b) s = tm__ienc_truncate(b, 0, stride, left, err);
        return s;
    }
    size_t total = a->n + (b ? b->n : 0);
    if (total <= max_len) return TM_OK;
    size_t to_remove = total - max_len;
    if (strategy == TM_TRUNCATE_LONGEST_FIRST) {
        if (!b) return tm__ienc_truncate(a, total - to_remove, stride, left, err);
        size_t n1 = a->n, n2 = b->n;
        int swap = n1 > n2;
        if (swap) { size_t x = n1; n1 = n2; n2 = x; }
        if (n1 > max_len) n2 = n1;
        else n2 = n1 > max_len - n1 ? n1 : max_len - n1;
        if (n1 + n2 > max_len) {
            n1 = max_len / 2;
            n2 = n1 + max_len % 2;
        }
        if (swap) { size_t x = n1; n1 = n2; n2 = x; }
        tm_status s = tm__ienc_truncate(a, n1, stride, left, err);
        if (!s) s = tm__ienc_truncate(b, n2, stride, left, err);
        return s;
    }
    tm_ienc *target = strategy == TM_TRUNCATE_ONLY_FIRST ? a : b;
    if (!target)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tokenizer: only_second truncation needs a "
                        "second sequence");
    if (target->n <= to_remove)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tokenizer: the sequence to truncate is too "
                        "short (%zu tokens) to remove %zu", target->n, to_remove);
    return tm__ienc_truncate(target, target->n - to_remove, stride, left, err);
}

static void set_seq_all(tm_ienc *e, int32_t seq) {
    tm__ienc_set_seq(e, seq);
    for (size_t i = 0; i < e->n_over; i++) tm__ienc_set_seq(&e->over[i], seq);
}

static tm_status post_process(const tm_tokenizer *t, tm_ienc *a, tm_ienc *b, int add_special,
                              tm_ienc *out, tm_error *err) {
    size_t n = b ? 2 : 1;
    tm_ienc *list = calloc(2, sizeof *list);
    if (!list) {
        tm__ienc_free(a);
        if (b) tm__ienc_free(b);
        return no_memory(err);
    }
    list[0] = *a;
    if (b) list[1] = *b;
    memset(a, 0, sizeof *a);
    if (b) memset(b, 0, sizeof *b);
    tm_status s = TM_OK;
    if (t->processor) {
        for (size_t i = 0; i < n; i++) {
            set_seq_all(&list[i], (int32_t)i);
            tm__ienc_set_type_ids(&list[i], (int32_t)i);
        }
        s = t->processor->process(t->processor, &list, &n, add_special, err);
    }
    if (!s) s = tm__ienc_merge(list, n, out, err);
    else for (size_t i = 0; i < n; i++) tm__ienc_free(&list[i]);
    free(list);
    return s;
}

typedef struct resolved {
    tm_encode_options o;
    size_t max_len;
    int trunc_left, pad_left;
    int32_t pad_id;
    const char *pad_tok;
} resolved;

static tm_status resolve_options(const tm_tokenizer *t, const tm_encode_options *opts,
                                 resolved *r, tm_error *err) {
    memset(r, 0, sizeof *r);
    r->o = tm_encode_options_default();
    if (opts) memcpy(&r->o, opts, opts->size < sizeof r->o ? opts->size : sizeof r->o);
    r->o.size = sizeof r->o;
    int need_len = r->o.truncation != TM_TRUNCATE_NONE || r->o.padding == TM_PAD_MAX_LENGTH;
    if (need_len) {
        if (r->o.max_length > 0) r->max_len = (size_t)r->o.max_length;
        else if (t->model_max_length > 0) r->max_len = (size_t)t->model_max_length;
        else return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tokenizer: max_length is needed "
                             "(tokenizer_config.json has no model_max_length)");
    }
    if (r->o.stride < 0) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tokenizer: negative stride");
    tm_side ts = r->o.truncation_side ? r->o.truncation_side : t->truncation_side;
    tm_side pside = r->o.padding_side ? r->o.padding_side : t->padding_side;
    r->trunc_left = ts == TM_SIDE_LEFT;
    r->pad_left = pside == TM_SIDE_LEFT;
    if (r->o.padding != TM_PAD_NONE) {
        r->pad_tok = t->roles[TM_SPECIAL_PAD];
        r->pad_id = t->role_ids[TM_SPECIAL_PAD];
        if (!r->pad_tok || r->pad_id < 0)
            return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tokenizer: padding needs a pad token "
                            "(tokenizer_config.json has no pad_token in the vocabulary)");
    }
    return TM_OK;
}

/* Encodes one input up to (not including) padding. */
static tm_status encode_unpadded(const tm_tokenizer *t, const char *text, size_t len,
                                 const char *pair, size_t pair_len, const resolved *r,
                                 pool_str *pool, tm_ienc *out, tm_error *err) {
    tm_status s = check_utf8(text, len, "text", err);
    if (!s && pair) s = check_utf8(pair, pair_len, "pair", err);
    if (s) return s;
    tm_ienc a, b;
    /* Rust 0.23 stops tokenizing a sequence at max_length tokens when truncating (the
     * first sequence too unless only the second is truncated). */
    size_t limit = r->o.truncation != TM_TRUNCATE_NONE ? r->max_len : 0;
    int first_limited = r->o.truncation != TM_TRUNCATE_ONLY_SECOND;
    s = encode_one(t, text, len, 0, 0, first_limited ? limit : 0, r->trunc_left, pool, &a, err);
    if (s) return s;
    if (pair) {
        s = encode_one(t, pair, pair_len, 1, 1, limit, r->trunc_left, pool, &b, err);
        if (s) {
            tm__ienc_free(&a);
            return s;
        }
    }
    if (r->o.truncation != TM_TRUNCATE_NONE) {
        size_t added = t->processor && r->o.add_special_tokens
                     ? t->processor->added_tokens(t->processor, pair != NULL) : 0;
        size_t max_len = r->max_len > added ? r->max_len - added : 0;
        if (added && r->max_len < added) max_len = 0;
        s = truncate_encodings(&a, pair ? &b : NULL, max_len, (size_t)r->o.stride,
                               r->o.truncation, r->trunc_left, err);
        if (s) {
            tm__ienc_free(&a);
            if (pair) tm__ienc_free(&b);
            return s;
        }
    }
    return post_process(t, &a, pair ? &b : NULL, r->o.add_special_tokens, out, err);
}

static tm_status pad_to(const resolved *r, tm_ienc *e, size_t target, tm_error *err) {
    if (r->o.pad_to_multiple_of > 0 && target % (size_t)r->o.pad_to_multiple_of)
        target += (size_t)r->o.pad_to_multiple_of - target % (size_t)r->o.pad_to_multiple_of;
    return tm__ienc_pad(e, target, r->pad_id, r->pad_tok, (uint32_t)strlen(r->pad_tok),
                        r->pad_left, err);
}

/* ---- Flattening into the public encoding ---------------------------------------------------- */

static tm_status flatten(const tm_ienc *e, const char *const texts[2], const size_t lens[2],
                         tm_encoding **out, tm_error *err);

void tm_encoding_free(tm_encoding *e) {
    if (!e) return;
    for (size_t i = 0; i < e->n_over; i++) tm_encoding_free(e->over[i]);
    free(e->over);
    free(e->ids);
    free(e->tokens);
    free(e->strings);
    free(e);
}

/* Byte offset -> character offset, through a prefix count over the text. */
static int32_t char_at(const char *s, size_t len, const uint32_t *cum, size_t byte) {
    if (byte > len) byte = len;
    return (int32_t)cum[byte];
}

static tm_status flatten(const tm_ienc *e, const char *const texts[2], const size_t lens[2],
                         tm_encoding **out, tm_error *err) {
    tm_encoding *r = calloc(1, sizeof *r);
    if (!r) return no_memory(err);
    size_t n = e->n, str_bytes = 0;
    for (size_t i = 0; i < n; i++) str_bytes += e->t[i].len + 1;
    r->n = n;
    r->ids = malloc((n ? n : 1) * 11 * sizeof(int32_t));
    r->tokens = malloc((n ? n : 1) * sizeof *r->tokens);
    r->strings = malloc(str_bytes + 1);
    if (!r->ids || !r->tokens || !r->strings) {
        tm_encoding_free(r);
        return no_memory(err);
    }
    r->attention = r->ids + n;
    r->type_ids = r->ids + 2 * n;
    r->special = r->ids + 3 * n;
    r->words = r->ids + 4 * n;
    r->seqs = r->ids + 5 * n;
    r->offsets = r->ids + 6 * n;
    r->char_offsets = r->ids + 8 * n;
    r->lens = r->ids + 10 * n;
    uint32_t *cum[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        if (!texts[k]) continue;
        cum[k] = malloc((lens[k] + 1) * sizeof *cum[k]);
        if (!cum[k]) {
            free(cum[0]);
            tm_encoding_free(r);
            return no_memory(err);
        }
        uint32_t c = 0;
        for (size_t b = 0; b < lens[k]; b++) {
            cum[k][b] = c;
            c += ((unsigned char)texts[k][b] & 0xc0) != 0x80;
        }
        cum[k][lens[k]] = c;
    }
    char *sp = r->strings;
    for (size_t i = 0; i < n; i++) {
        const tm_etok *t = &e->t[i];
        r->ids[i] = t->id;
        r->attention[i] = t->attention;
        r->type_ids[i] = t->type_id;
        r->special[i] = t->special;
        r->words[i] = t->word;
        r->seqs[i] = t->seq;
        r->offsets[2 * i] = (int32_t)t->start;
        r->offsets[2 * i + 1] = (int32_t)t->end;
        int k = t->seq;
        if (k == 0 || k == 1) {
            if (!texts[k]) k = 0;
            r->char_offsets[2 * i] = char_at(texts[k], lens[k], cum[k], t->start);
            r->char_offsets[2 * i + 1] = char_at(texts[k], lens[k], cum[k], t->end);
        } else {
            r->char_offsets[2 * i] = (int32_t)t->start;
            r->char_offsets[2 * i + 1] = (int32_t)t->end;
        }
        memcpy(sp, t->str, t->len);
        r->lens[i] = (int32_t)t->len;
        sp[t->len] = '\0';
        r->tokens[i] = sp;
        sp += t->len + 1;
    }
    free(cum[0]);
    free(cum[1]);
    if (e->n_over) {
        r->over = calloc(e->n_over, sizeof *r->over);
        if (!r->over) {
            tm_encoding_free(r);
            return no_memory(err);
        }
        for (size_t i = 0; i < e->n_over; i++, r->n_over++) {
            tm_status s = flatten(&e->over[i], texts, lens, &r->over[i], err);
            if (s) {
                tm_encoding_free(r);
                return s;
            }
        }
    }
    *out = r;
    return TM_OK;
}

tm_encode_options tm_encode_options_default(void) {
    tm_encode_options o;
    memset(&o, 0, sizeof o);
    o.size = sizeof o;
    o.add_special_tokens = 1;
    o.threads = 1;
    return o;
}

tm_status tm_tokenizer_encode(const tm_tokenizer *t, const char *text, size_t len,
                              const char *pair, size_t pair_len, const tm_encode_options *opts,
                              tm_encoding **out, tm_error *err) {
    if (!t || (!text && len) || !out)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_tokenizer_encode: NULL argument");
    if (!text) text = "";
    resolved r;
    tm_status s = resolve_options(t, opts, &r, err);
    if (s) return s;
    pool_str pool = {0};
    tm_ienc e;
    s = encode_unpadded(t, text, len, pair, pair_len, &r, &pool, &e, err);
    if (!s && r.o.padding != TM_PAD_NONE) {
        size_t target = r.o.padding == TM_PAD_MAX_LENGTH ? r.max_len : e.n;
        s = pad_to(&r, &e, target, err);
        if (s) tm__ienc_free(&e);
    }
    if (!s) {
        const char *texts[2] = {text, pair};
        size_t lens[2] = {len, pair_len};
        s = flatten(&e, texts, lens, out, err);
        tm__ienc_free(&e);
    }
    pool_free(&pool);
    return s;
}

/* ---- Batches ------------------------------------------------------------------------------ */

typedef struct batch {
    const tm_tokenizer *t;
    const resolved *r;
    size_t n;
    const char *const *texts;
    const size_t *lens;
    const char *const *pairs;
    const size_t *pair_lens;
    tm_ienc *encs;
    pool_str *pools;
    tm_status *status;
    tm_error *errs;
} batch;

static void batch_slice(void *arg, int ith, int nth) {
    batch *b = arg;
    size_t from = b->n * (size_t)ith / (size_t)nth, to = b->n * (size_t)(ith + 1) / (size_t)nth;
    for (size_t i = from; i < to; i++) {
        const char *pair = b->pairs ? b->pairs[i] : NULL;
        size_t plen = pair && b->pair_lens ? b->pair_lens[i] : 0;
        const char *text = b->texts[i] ? b->texts[i] : "";
        b->status[i] = encode_unpadded(b->t, text, b->lens[i], pair, plen, b->r, &b->pools[i],
                                       &b->encs[i], &b->errs[i]);
    }
}

tm_status tm_tokenizer_encode_batch(const tm_tokenizer *t, size_t n, const char *const *texts,
                                    const size_t *lens, const char *const *pairs,
                                    const size_t *pair_lens, const tm_encode_options *opts,
                                    tm_encoding **out, tm_error *err) {
    if (!t || (n && (!texts || !lens || !out)))
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_tokenizer_encode_batch: NULL argument");
    if (!n) return TM_OK;
    resolved r;
    tm_status s = resolve_options(t, opts, &r, err);
    if (s) return s;
    batch b = {t, &r, n, texts, lens, pairs, pair_lens, calloc(n, sizeof(tm_ienc)),
               calloc(n, sizeof(pool_str)), calloc(n, sizeof(tm_status)), calloc(n, sizeof(tm_error))};
    if (!b.encs || !b.pools || !b.status || !b.errs) {
        s = no_memory(err);
        goto done;
    }
    int threads = r.o.threads;
    if (threads <= 0) threads = tm_pool_online_cpus();
    if ((size_t)threads > n) threads = (int)n;
    tm_pool *pool = threads > 1 ? tm_pool_create(threads) : NULL;
    tm_pool_run_n(pool, threads > 1 ? threads * 4 : 1, batch_slice, &b);
    tm_pool_free(pool);
    for (size_t i = 0; i < n && !s; i++)
        if (b.status[i]) {
            s = b.status[i];
            if (err) {
                *err = b.errs[i];
                char head[32];
                int k = snprintf(head, sizeof head, "text %zu: ", i);
                size_t room = sizeof err->message - (size_t)k - 1;
                memcpy(err->message, head, (size_t)k);
                memcpy(err->message + k, b.errs[i].message, room);
                err->message[sizeof err->message - 1] = '\0';
            }
        }
    if (!s && r.o.padding != TM_PAD_NONE) {
        size_t target = r.max_len;
        if (r.o.padding == TM_PAD_LONGEST) {
            target = 0;
            for (size_t i = 0; i < n; i++) if (b.encs[i].n > target) target = b.encs[i].n;
        }
        for (size_t i = 0; i < n && !s; i++) s = pad_to(&r, &b.encs[i], target, err);
    }
    for (size_t i = 0; i < n && !s; i++) {
        const char *tx[2] = {texts[i] ? texts[i] : "", pairs ? pairs[i] : NULL};
        size_t ln[2] = {lens[i], pairs && pair_lens ? pair_lens[i] : 0};
        s = flatten(&b.encs[i], tx, ln, &out[i], err);
        if (s) {
            for (size_t k = 0; k < i; k++) {
                tm_encoding_free(out[k]);
                out[k] = NULL;
            }
        }
    }
done:
    for (size_t i = 0; b.encs && i < n; i++) tm__ienc_free(&b.encs[i]);
    for (size_t i = 0; b.pools && i < n; i++) pool_free(&b.pools[i]);
    free(b.encs);
    free(b.pools);
    free(b.status);
    free(b.errs);
    return s;
}

/* ---- Accessors ----------------------------------------------------------------------------- */

size_t tm_encoding_n(const tm_encoding *e) { return e ? e->n : 0; }
const int32_t *tm_encoding_ids(const tm_encoding *e) { return e->ids; }
const char *const *tm_encoding_tokens(const tm_encoding *e) { return e->tokens; }
const int32_t *tm_encoding_token_lengths(const tm_encoding *e) { return e->lens; }
const int32_t *tm_encoding_attention_mask(const tm_encoding *e) { return e->attention; }
const int32_t *tm_encoding_type_ids(const tm_encoding *e) { return e->type_ids; }
const int32_t *tm_encoding_special_tokens_mask(const tm_encoding *e) { return e->special; }
const int32_t *tm_encoding_word_ids(const tm_encoding *e) { return e->words; }
const int32_t *tm_encoding_sequence_ids(const tm_encoding *e) { return e->seqs; }
const int32_t *tm_encoding_offsets(const tm_encoding *e) { return e->offsets; }
const int32_t *tm_encoding_char_offsets(const tm_encoding *e) { return e->char_offsets; }
size_t tm_encoding_n_overflowing(const tm_encoding *e) { return e ? e->n_over : 0; }
const tm_encoding *tm_encoding_overflowing(const tm_encoding *e, size_t i) {
    return e && i < e->n_over ? e->over[i] : NULL;
}

/* ---- Vocabulary ------------------------------------------------------------------------------ */

int32_t tm_tokenizer_token_to_id(const tm_tokenizer *t, const char *token, size_t len) {
    if (!t || !token) return -1;
    int32_t id = tm__vocab_find(&t->added.by_content, token, len);
    return id >= 0 ? id : t->model->token_to_id(t->model, token, len);
}

/* The token string of id for decoding (the normalized form of a normalized added token). */
static const char *decode_string(const tm_tokenizer *t, int32_t id, uint32_t *len, int *special) {
    const tm_added_token *a = tm__added_by_id(&t->added, id);
    if (a) {
        const char *s = a->pattern ? a->pattern : a->content;
        *len = (uint32_t)(a->pattern ? a->pattern_len : a->len);
        *special = tm__added_is_special(&t->added, s, *len);
        return s;
    }
    *special = 0;
    return t->model->id_to_token(t->model, id, len);
}

const char *tm_tokenizer_id_to_token(const tm_tokenizer *t, int32_t id) {
    if (!t) return NULL;
    const tm_added_token *a = tm__added_by_id(&t->added, id);
    if (a) return a->content;
    uint32_t len;
    return t->model->id_to_token(t->model, id, &len);
}

size_t tm_tokenizer_vocab_size(const tm_tokenizer *t) { return t ? t->vocab_size : 0; }

const char *tm_tokenizer_special_token(const tm_tokenizer *t, tm_special_role role, int32_t *id) {
    if (id) *id = -1;
    if (!t || (int)role < 0 || role > TM_SPECIAL_MASK) return NULL;
    if (id) *id = t->role_ids[role];
    return t->roles[role];
}

const char *tm_tokenizer_config_json(const tm_tokenizer *t) { return t ? t->config_text : NULL; }

int64_t tm_tokenizer_model_max_length(const tm_tokenizer *t) { return t ? t->model_max_length : -1; }

const char *tm_tokenizer_chat_template(const tm_tokenizer *t, const char *name) {
    if (!t || !t->config) return NULL;
    const tm_json *v = tm_json_get(t->config, "chat_template");
    if (!v) return NULL;
    if (v->type == TM_JSON_STRING) return v->string;
    if (v->type != TM_JSON_ARRAY) return NULL;
    const char *want = name ? name : "default";
    for (int i = 0; i < v->n; i++) {
        const char *n = tm_json_get_string(&v->items[i], "name");
        if (n && !strcmp(n, want)) return tm_json_get_string(&v->items[i], "template");
    }
    if (!name && v->n) return tm_json_get_string(&v->items[0], "template");
    return NULL;
}

/* ---- Decoding ---------------------------------------------------------------------------------- */

/* transformers' clean_up_tokenization, in place. */
static size_t cleanup_spaces(char *s, size_t len) {
    static const char *const from[] = {" .", " ?", " !", " ,", " ' ", " n't", " 'm", " 's", " 've", " 're"};
    static const char *const to[] = {".", "?", "!", ",", "'", "n't", "'m", "'s", "'ve", "'re"};
    for (int k = 0; k < 10; k++) {
        size_t fl = strlen(from[k]), tl = strlen(to[k]), o = 0;
        for (size_t i = 0; i < len;) {
            if (i + fl <= len && !memcmp(s + i, from[k], fl)) {
                memcpy(s + o, to[k], tl);
                o += tl;
                i += fl;
            } else {
                s[o++] = s[i++];
            }
        }
        len = o;
    }
    s[len] = '\0';
    return len;
}

tm_status tm_tokenizer_decode(const tm_tokenizer *t, const int32_t *ids, size_t n,
                              int skip_special, int cleanup, char **out, size_t *out_len,
                              tm_error *err) {
    if (!t || (n && !ids) || !out)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_tokenizer_decode: NULL argument");
    tm_strs toks = {0};
    tm_status s = TM_OK;
    for (size_t i = 0; i < n && !s; i++) {
        uint32_t len;
        int special;
        const char *str = decode_string(t, ids[i], &len, &special);
        if (!str || (skip_special && special)) continue;
        s = tm__strs_push(&toks, str, len, err);
    }
    if (!s && t->decoder) s = t->decoder->decode_chain(t->decoder, &toks, err);
    size_t total = 0;
    for (size_t i = 0; !s && i < toks.n; i++) total += toks.len[i] + (t->decoder ? 0 : 1);
    char *res = s ? NULL : malloc(total + 1);
    if (!s && !res) s = no_memory(err);
    if (!s) {
        size_t o = 0;
        for (size_t i = 0; i < toks.n; i++) {
            if (!t->decoder && i) res[o++] = ' ';
            memcpy(res + o, toks.s[i], toks.len[i]);
            o += toks.len[i];
        }
        res[o] = '\0';
        if (cleanup < 0 ? t->cleanup : cleanup) o = cleanup_spaces(res, o);
        *out = res;
        if (out_len) *out_len = o;
    }
    tm__strs_free(&toks);
    return s;
}
