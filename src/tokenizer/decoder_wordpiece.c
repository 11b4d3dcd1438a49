/* The WordPiece decoder: tokens after the first lose their continuation prefix ("##") or
 * get a leading space; optional clean-up of spaces before punctuation. Not the WordPiece
 * model. */
#include <string.h>
#include "components.h"

typedef struct wordpiece_dec {
    tm_decoder base;
    char *prefix;
    size_t prefix_len;
    int cleanup;
} wordpiece_dec;

static tm_status wordpiece(const tm_decoder *self, tm_strs *tokens, tm_error *err) {
    const wordpiece_dec *d = (const wordpiece_dec *)self;
    for (size_t i = 0; i < tokens->n; i++) {
        const char *s = tokens->s[i];
        size_t len = tokens->len[i];
        char *t = NULL;
        size_t tn = 0;
        if (i != 0) {
            if (len >= d->prefix_len && !memcmp(s, d->prefix, d->prefix_len)) {
                tn = len - d->prefix_len;
                t = malloc(tn + 1);
                if (t) memcpy(t, s + d->prefix_len, tn + 1);
            } else {
                tn = len + 1;
                t = malloc(tn + 1);
                if (t) t[0] = ' ', memcpy(t + 1, s, len + 1);
            }
            if (!t) return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
            tm__strs_set(tokens, i, t, tn);
        }
        if (d->cleanup) {
            tm_status st = tm__wordpiece_cleanup(tokens->s[i], tokens->len[i], &t, &tn, err);
            if (st) return st;
            tm__strs_set(tokens, i, t, tn);
        }
    }
    return TM_OK;
}

static void wordpiece_free(tm_decoder *self) {
    wordpiece_dec *d = (wordpiece_dec *)self;
    free(d->prefix);
    free(d);
}

static tm_status load_dec_wordpiece(const tm_json *cfg, const char *path, tm_decoder **out,
                                tm_error *err) {
    const char *prefix;
    size_t len;
    int cleanup;
    tm_status s = tm__tj_string(cfg, "prefix", "##", &prefix, &len, path, err);
    if (!s) s = tm__tj_bool(cfg, "cleanup", 1, &cleanup, path, err);
    if (s) return s;
    wordpiece_dec *d = tm__comp_alloc(sizeof *d, err);
    if (!d) return TM_ERR_NO_MEMORY;
    d->base.decode_chain = wordpiece;
    d->base.free = wordpiece_free;
    d->prefix = malloc(len + 1);
    if (!d->prefix) {
        free(d);
        return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
    }
    memcpy(d->prefix, prefix, len + 1);
    d->prefix_len = len;
    d->cleanup = cleanup;
    *out = &d->base;
    return TM_OK;
}

TM_TOK_DECODER("WordPiece", load_dec_wordpiece);
