/* The Whitespace pre-tokenizer (runs of word characters, runs of other non-space
 * characters: Rust's regex \w+|[^\w\s]+, whitespace removed) and WhitespaceSplit (splits
 * on whitespace). Not BertPreTokenizer. */
#include "components.h"

/* The match list of \w+|[^\w\s]+ over s, inverted (the gaps are the matches), as Rust's
 * Invert(regex) pattern. */
static tm_status find_words(const char *s, size_t len, tm_matches *m, tm_error *err) {
    m->n = 0;
    if (!len) return tm__matches_push(m, 0, 0, 0, err);
    size_t prev = 0, i = 0;
    tm_status st = TM_OK;
    while (i < len && !st) {
        uint32_t c;
        size_t n = tm__utf8_decode(s, i, &c);
        int word = tm__rust_regex_word(c);
        if (!word && tm__is_whitespace(c)) {
            i += n;
            continue;
        }
        size_t start = i;
        i += n;
        while (i < len) {
            n = tm__utf8_decode(s, i, &c);
            int w = tm__rust_regex_word(c);
            if (word ? !w : (w || tm__is_whitespace(c))) break;
            i += n;
        }
        if (prev != start) st = tm__matches_push(m, prev, start, 1, err);
        if (!st) st = tm__matches_push(m, start, i, 0, err);
        prev = i;
    }
    if (!st && prev != len) st = tm__matches_push(m, prev, len, 1, err);
    return st;
}

static tm_status split_words(void *ctx, size_t i, tm_nstr *ns, tm_nstrs *out, tm_error *err) {
    tm_matches m = {0};
    tm_status s = find_words(ns->s, ns->len, &m, err);
    if (!s) s = tm__nstr_split(ns, &m, TM_SPLIT_REMOVED, out, err);
    tm__matches_free(&m);
    return s;
}

static tm_status whitespace(const tm_pretokenizer *self, tm_pstr *ps, tm_error *err) {
    return tm__pstr_split(ps, split_words, NULL, err);
}

static int is_ws(uint32_t c, void *ctx) {
    return tm__is_whitespace(c);
}

static tm_status whitespace_split(const tm_pretokenizer *self, tm_pstr *ps, tm_error *err) {
    return tm__pstr_split_chars(ps, is_ws, NULL, TM_SPLIT_REMOVED, err);
}

static void ws_free(tm_pretokenizer *self) {
    free(self);
}

static tm_status load_pre_whitespace(const tm_json *cfg, const char *path, tm_pretokenizer **out,
                                 tm_error *err) {
    tm_pretokenizer *p = tm__comp_alloc(sizeof *p, err);
    if (!p) return TM_ERR_NO_MEMORY;
    p->pre_tokenize = whitespace;
    p->free = ws_free;
    *out = p;
    return TM_OK;
}

static tm_status load_pre_whitespace_split(const tm_json *cfg, const char *path,
                                       tm_pretokenizer **out, tm_error *err) {
    tm_pretokenizer *p = tm__comp_alloc(sizeof *p, err);
    if (!p) return TM_ERR_NO_MEMORY;
    p->pre_tokenize = whitespace_split;
    p->free = ws_free;
    *out = p;
    return TM_OK;
}

TM_TOK_PRETOKENIZER("Whitespace", load_pre_whitespace);
TM_TOK_PRETOKENIZER("WhitespaceSplit", load_pre_whitespace_split);
