/* The Metaspace pre-tokenizer (SentencePiece style): spaces become the replacement
 * character (U+2581), which is prepended per prepend_scheme, and the text is split before
 * each replacement character. Also the configuration the Metaspace decoder shares. Not the
 * decoder itself (decoder_metaspace.c). */
#include <string.h>
#include "components.h"

tm_status tm__metaspace_cfg_load(const tm_json *cfg, const char *path, tm_metaspace_cfg *out,
                                 tm_error *err) {
    memset(out, 0, sizeof *out);
    tm_status s = tm__tj_char(cfg, "replacement", &out->replacement, path, err);
    if (s) return s;
    out->rep_len = tm__utf8_encode(out->replacement, out->rep);
    const char *scheme;
    s = tm__tj_string(cfg, "prepend_scheme", "always", &scheme, NULL, path, err);
    if (s) return s;
    if (!strcmp(scheme, "always")) out->scheme = TM_PREPEND_ALWAYS;
    else if (!strcmp(scheme, "never")) out->scheme = TM_PREPEND_NEVER;
    else if (!strcmp(scheme, "first")) out->scheme = TM_PREPEND_FIRST;
    else
        return tm__tok_fail(err, path, "prepend_scheme",
                            "unknown \"%s\" (expected always, first or never)", scheme);
    int add_prefix_space;
    s = tm__tj_bool(cfg, "add_prefix_space", 1, &add_prefix_space, path, err);
    if (!s) s = tm__tj_bool(cfg, "split", 1, &out->split, path, err);
    if (s) return s;
    if (!add_prefix_space) {
        if (out->scheme != TM_PREPEND_NEVER)
            return tm__tok_fail(err, path, "add_prefix_space",
                                "false does not match prepend_scheme \"%s\"", scheme);
        out->scheme = TM_PREPEND_NEVER;
    }
    return TM_OK;
}

typedef struct metaspace {
    tm_pretokenizer base;
    tm_metaspace_cfg cfg;
} metaspace;

static int is_space(uint32_t c, void *ctx) {
    return c == ' ';
}

static int is_rep(uint32_t c, void *ctx) {
    return c == *(const uint32_t *)ctx;
}

static tm_status split_piece(void *ctx, size_t i, tm_nstr *ns, tm_nstrs *out, tm_error *err) {
    const tm_metaspace_cfg *c = ctx;
    tm_matches m = {0};
    tm_status s = TM_OK;
    if (memchr(ns->s, ' ', ns->len)) {
        s = tm__find_char_matches(ns->s, ns->len, is_space, NULL, &m, err);
        if (!s) s = tm__nstr_replace(ns, &m, c->rep, c->rep_len, err);
    }
    int starts = ns->len >= c->rep_len && !memcmp(ns->s, c->rep, c->rep_len);
    if (!s && !starts &&
        (c->scheme == TM_PREPEND_ALWAYS || (c->scheme == TM_PREPEND_FIRST && ns->base == 0)))
        s = tm__nstr_prepend(ns, c->rep, c->rep_len, err);
    if (!s && c->split) {
        s = tm__find_char_matches(ns->s, ns->len, is_rep, (void *)&c->replacement, &m, err);
        if (!s) s = tm__nstr_split(ns, &m, TM_SPLIT_MERGED_WITH_NEXT, out, err);
    } else if (!s) {
        s = tm__nstrs_move(out, ns, err);
    }
    tm__matches_free(&m);
    return s;
}

static tm_status pre_tokenize(const tm_pretokenizer *self, tm_pstr *ps, tm_error *err) {
    const metaspace *m = (const metaspace *)self;
    return tm__pstr_split(ps, split_piece, (void *)&m->cfg, err);
}

static void metaspace_free(tm_pretokenizer *self) {
    free(self);
}

static tm_status load_pre_metaspace(const tm_json *cfg, const char *path, tm_pretokenizer **out,
                                tm_error *err) {
    tm_metaspace_cfg mc;
    tm_status s = tm__metaspace_cfg_load(cfg, path, &mc, err);
    if (s) return s;
    metaspace *m = tm__comp_alloc(sizeof *m, err);
    if (!m) return TM_ERR_NO_MEMORY;
    m->base.pre_tokenize = pre_tokenize;
    m->base.free = metaspace_free;
    m->cfg = mc;
    *out = &m->base;
    return TM_OK;
}

TM_TOK_PRETOKENIZER("Metaspace", load_pre_metaspace);
