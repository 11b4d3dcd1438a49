/* The Metaspace decoder: the replacement character (U+2581) becomes a space, except at the
 * start of the first token when a prefix was prepended (prepend_scheme other than never).
 * Not the Metaspace pre-tokenizer (pretok_metaspace.c), whose configuration it shares. */
#include <string.h>
#include "components.h"

typedef struct metaspace_dec {
    tm_decoder base;
    tm_metaspace_cfg cfg;
} metaspace_dec;

static tm_status metaspace(const tm_decoder *self, tm_strs *tokens, tm_error *err) {
    const metaspace_dec *d = (const metaspace_dec *)self;
    for (size_t i = 0; i < tokens->n; i++) {
        const char *s = tokens->s[i];
        size_t len = tokens->len[i];
        if (!memmem(s, len, d->cfg.rep, d->cfg.rep_len) || !tm__utf8_valid(s, len, NULL)) continue;
        char *t = malloc(len + 1);
        if (!t) return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
        size_t o = 0;
        /* Rust drops EVERY replacement character of the first token (not only a leading
         * one) when the scheme prepends. */
        int drop = i == 0 && d->cfg.scheme != TM_PREPEND_NEVER;
        for (size_t k = 0; k < len;) {
            uint32_t c;
            size_t n = tm__utf8_decode(s, k, &c);
            if (c == d->cfg.replacement) {
                if (!drop) t[o++] = ' ';
            } else {
                memcpy(t + o, s + k, n);
                o += n;
            }
            k += n;
        }
        t[o] = '\0';
        tm__strs_set(tokens, i, t, o);
    }
    return TM_OK;
}

static void metaspace_free(tm_decoder *self) {
    free(self);
}

static tm_status load_dec_metaspace(const tm_json *cfg, const char *path, tm_decoder **out,
                                tm_error *err) {
    tm_metaspace_cfg mc;
    tm_status s = tm__metaspace_cfg_load(cfg, path, &mc, err);
    if (s) return s;
    metaspace_dec *d = tm__comp_alloc(sizeof *d, err);
    if (!d) return TM_ERR_NO_MEMORY;
    d->base.decode_chain = metaspace;
    d->base.free = metaspace_free;
    d->cfg = mc;
    *out = &d->base;
    return TM_OK;
}

TM_TOK_DECODER("Metaspace", load_dec_metaspace);
