/* The ByteFallback decoder: runs of "<0xHH>" tokens become the text their bytes spell, or
 * one U+FFFD per byte when the run is not valid UTF-8. Not Fuse (decoder_fuse.c). */
#include <string.h>
#include "components.h"

/* The byte a "<0xHH>" token stands for, or -1. Rust parses the two characters with
 * u8::from_str_radix(.., 16), which also takes a leading '+'. */
static int byte_token(const char *s, size_t len) {
    if (len != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    int v = 0, digits = 0;
    for (int k = 3; k < 5; k++) {
        char c = s[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 :
                c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) {
            if (k == 3 && c == '+') continue;
            return -1;
        }
        v = v * 16 + d;
        digits++;
    }
    return digits ? v : -1;
}

/* Appends the pending bytes to out as one string, or U+FFFD per byte. */
static tm_status flush(tm_strs *out, char *bytes, size_t *n, tm_error *err) {
    if (!*n) return TM_OK;
    tm_status s = TM_OK;
    if (tm__utf8_valid(bytes, *n, NULL)) s = tm__strs_push(out, bytes, *n, err);
    else
        for (size_t k = 0; k < *n && !s; k++) s = tm__strs_push(out, "\xEF\xBF\xBD", 3, err);
    *n = 0;
    return s;
}

static tm_status byte_fallback(const tm_decoder *self, tm_strs *tokens, tm_error *err) {
    tm_strs out = {0};
    char *bytes = malloc(tokens->n + 1);
    if (!bytes) return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
    size_t nb = 0;
    tm_status s = TM_OK;
    for (size_t i = 0; i < tokens->n && !s; i++) {
        int b = byte_token(tokens->s[i], tokens->len[i]);
        if (b >= 0) {
            bytes[nb++] = (char)b;
            continue;
        }
        s = flush(&out, bytes, &nb, err);
        if (s) break;
        char *t = tokens->s[i];
        tokens->s[i] = NULL;                /* moved (push_owned frees it on failure) */
        s = tm__strs_push_owned(&out, t, tokens->len[i], err);
    }
    if (!s) s = flush(&out, bytes, &nb, err);
    free(bytes);
    if (s) {
        tm__strs_free(&out);
        return s;
    }
    tm__strs_free(tokens);
    *tokens = out;
    return TM_OK;
}

static void byte_fallback_free(tm_decoder *self) {
    free(self);
}

static tm_status load_dec_byte_fallback(const tm_json *cfg, const char *path, tm_decoder **out,
                                    tm_error *err) {
    tm_decoder *d = tm__comp_alloc(sizeof *d, err);
    if (!d) return TM_ERR_NO_MEMORY;
    d->decode_chain = byte_fallback;
    d->free = byte_fallback_free;
    *out = d;
    return TM_OK;
}

TM_TOK_DECODER("ByteFallback", load_dec_byte_fallback);
