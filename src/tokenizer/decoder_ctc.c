/* The CTC decoder (wav2vec2-style): consecutive duplicate tokens collapse, the pad token
 * disappears, and with cleanup the WordPiece clean-up runs and the word delimiter becomes
 * a space; tokens left empty are dropped. Not a CTC beam search. */
#include <string.h>
#include "components.h"

typedef struct ctc_dec {
    tm_decoder base;
    char *pad, *delim;
    size_t pad_len, delim_len;
    int cleanup;
} ctc_dec;

static tm_status ctc(const tm_decoder *self, tm_strs *tokens, tm_error *err) {
    const ctc_dec *d = (const ctc_dec *)self;
    tm_strs out = {0};
    tm_status s = TM_OK;
    for (size_t i = 0; i < tokens->n && !s; i++) {
        if (i > 0 && tokens->len[i] == tokens->len[i - 1] &&
            !memcmp(tokens->s[i], tokens->s[i - 1], tokens->len[i]))
            continue;       /* dedup: equal to the previous token */
        char *t, *u;
        size_t tn, un;
        s = tm__str_replace_all(tokens->s[i], tokens->len[i], d->pad, d->pad_len, "", 0, &t, &tn,
                                err);
        if (s) break;
        if (d->cleanup) {
            s = tm__wordpiece_cleanup(t, tn, &u, &un, err);
            free(t);
            if (s) break;
            s = tm__str_replace_all(u, un, d->delim, d->delim_len, " ", 1, &t, &tn, err);
            free(u);
            if (s) break;
        }
        if (!tn) {
            free(t);
            continue;
        }
        s = tm__strs_push_owned(&out, t, tn, err);
    }
    if (s) {
        tm__strs_free(&out);
        return s;
    }
    tm__strs_free(tokens);
    *tokens = out;
    return TM_OK;
}

static void ctc_free(tm_decoder *self) {
    ctc_dec *d = (ctc_dec *)self;
    free(d->pad);
    free(d->delim);
    free(d);
}

static char *dup_n(const char *s, size_t n) {
    char *t = malloc(n + 1);
    if (t) memcpy(t, s, n), t[n] = '\0';
    return t;
}

static tm_status load_dec_ctc(const tm_json *cfg, const char *path, tm_decoder **out, tm_error *err) {
    const char *pad, *delim;
    size_t pad_len, delim_len;
    int cleanup;
    tm_status s = tm__tj_string(cfg, "pad_token", "<pad>", &pad, &pad_len, path, err);
    if (!s) s = tm__tj_string(cfg, "word_delimiter_token", "|", &delim, &delim_len, path, err);
    if (!s) s = tm__tj_bool(cfg, "cleanup", 1, &cleanup, path, err);
    if (s) return s;
    ctc_dec *d = tm__comp_alloc(sizeof *d, err);
    if (!d) return TM_ERR_NO_MEMORY;
    d->base.decode_chain = ctc;
    d->base.free = ctc_free;
    d->pad = dup_n(pad, pad_len);
    d->delim = dup_n(delim, delim_len);
    d->pad_len = pad_len;
    d->delim_len = delim_len;
    d->cleanup = cleanup;
    if (!d->pad || !d->delim) {
        ctc_free(&d->base);
        return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
    }
    *out = &d->base;
    return TM_OK;
}

TM_TOK_DECODER("CTC", load_dec_ctc);
