/* The Replace decoder: in every token, each match of a pattern (String or Regex) becomes
 * `content`. Not the Replace normalizer (normalizer_replace.c), which keeps alignments. */
#include <string.h>
#include "components.h"

typedef struct replace_dec {
    tm_decoder base;
    tm_pattern pattern;
    char *content;
    size_t content_len;
} replace_dec;

static tm_status replace(const tm_decoder *self, tm_strs *tokens, tm_error *err) {
    const replace_dec *d = (const replace_dec *)self;
    tm_matches m = {0};
    tm_status s = TM_OK;
    for (size_t i = 0; i < tokens->n && !s; i++) {
        /* the regex runs without PCRE2's UTF check: a token that is not UTF-8 (a malformed
         * vocabulary) is left as it is */
        if (!tm__utf8_valid(tokens->s[i], tokens->len[i], NULL)) continue;
        s = tm__pattern_find(&d->pattern, tokens->s[i], tokens->len[i], &m, err);
        if (s) break;
        size_t cap = 1, o = 0;
        for (size_t k = 0; k < m.n; k++)
            cap += m.v[k].is_match ? d->content_len : m.v[k].end - m.v[k].start;
        char *t = malloc(cap);
        if (!t) {
            s = tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
            break;
        }
        for (size_t k = 0; k < m.n; k++) {
            if (m.v[k].is_match) {
                memcpy(t + o, d->content, d->content_len);
                o += d->content_len;
            } else {
                memcpy(t + o, tokens->s[i] + m.v[k].start, m.v[k].end - m.v[k].start);
                o += m.v[k].end - m.v[k].start;
            }
        }
        t[o] = '\0';
        tm__strs_set(tokens, i, t, o);
    }
    tm__matches_free(&m);
    return s;
}

static void replace_free(tm_decoder *self) {
    replace_dec *d = (replace_dec *)self;
    tm__pattern_free(&d->pattern);
    free(d->content);
    free(d);
}

static tm_status load_dec_replace(const tm_json *cfg, const char *path, tm_decoder **out,
                              tm_error *err) {
    const char *content;
    size_t len;
    char sub[256];
    tm_status s = tm__tj_req_string(cfg, "content", &content, &len, path, err);
    if (s) return s;
    replace_dec *d = tm__comp_alloc(sizeof *d, err);
    if (!d) return TM_ERR_NO_MEMORY;
    d->base.decode_chain = replace;
    d->base.free = replace_free;
    tm__tok_path(sub, sizeof sub, path, "pattern", -1);
    s = tm__pattern_load(tm_json_get(cfg, "pattern"), sub, &d->pattern, err);
    if (!s && !(d->content = malloc(len + 1)))
        s = tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
    if (s) {
        replace_free(&d->base);
        return s;
    }
    memcpy(d->content, content, len + 1);
    d->content_len = len;
    *out = &d->base;
    return TM_OK;
}

TM_TOK_DECODER("Replace", load_dec_replace);
