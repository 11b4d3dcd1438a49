/* The BPEDecoder: the end-of-word suffix ("</w>") becomes a space, or nothing in the last
 * token. Not the BPE model. */
#include <string.h>
#include "components.h"

typedef struct bpe_dec {
    tm_decoder base;
    char *suffix;
    size_t suffix_len;
} bpe_dec;

static tm_status bpe(const tm_decoder *self, tm_strs *tokens, tm_error *err) {
    const bpe_dec *d = (const bpe_dec *)self;
    for (size_t i = 0; i < tokens->n; i++) {
        const char *to = i + 1 == tokens->n ? "" : " ";
        char *t;
        size_t tn;
        tm_status s = tm__str_replace_all(tokens->s[i], tokens->len[i], d->suffix, d->suffix_len,
                                          to, strlen(to), &t, &tn, err);
        if (s) return s;
        tm__strs_set(tokens, i, t, tn);
    }
    return TM_OK;
}

static void bpe_free(tm_decoder *self) {
    bpe_dec *d = (bpe_dec *)self;
    free(d->suffix);
    free(d);
}

static tm_status load_dec_bpe(const tm_json *cfg, const char *path, tm_decoder **out, tm_error *err) {
    const char *suffix;
    size_t len;
    tm_status s = tm__tj_string(cfg, "suffix", "</w>", &suffix, &len, path, err);
    if (s) return s;
    bpe_dec *d = tm__comp_alloc(sizeof *d, err);
    if (!d) return TM_ERR_NO_MEMORY;
    d->base.decode_chain = bpe;
    d->base.free = bpe_free;
    if (!(d->suffix = malloc(len + 1))) {
        free(d);
        return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
    }
    memcpy(d->suffix, suffix, len + 1);
    d->suffix_len = len;
    *out = &d->base;
    return TM_OK;
}

TM_TOK_DECODER("BPEDecoder", load_dec_bpe);
