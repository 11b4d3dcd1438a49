/* The Fuse decoder: joins every token into one string. Not ByteFallback's byte joining
 * (decoder_byte_fallback.c). */
#include <string.h>
#include "components.h"

static tm_status fuse(const tm_decoder *self, tm_strs *tokens, tm_error *err) {
    size_t total = 0;
    for (size_t i = 0; i < tokens->n; i++) total += tokens->len[i];
    char *s = malloc(total + 1);
    if (!s) return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
    size_t at = 0;
    for (size_t i = 0; i < tokens->n; i++) {
        memcpy(s + at, tokens->s[i], tokens->len[i]);
        at += tokens->len[i];
    }
    s[at] = '\0';
    tm__strs_free(tokens);
    return tm__strs_push_owned(tokens, s, at, err);
}

static void fuse_free(tm_decoder *self) {
    free(self);
}

static tm_status load_dec_fuse(const tm_json *cfg, const char *path, tm_decoder **out, tm_error *err) {
    tm_decoder *d = tm__comp_alloc(sizeof *d, err);
    if (!d) return TM_ERR_NO_MEMORY;
    d->decode_chain = fuse;
    d->free = fuse_free;
    *out = d;
    return TM_OK;
}

TM_TOK_DECODER("Fuse", load_dec_fuse);
