/* The Strip decoder: removes up to `start` leading and `stop` trailing `content`
 * characters from every token. Not the Strip normalizer (normalizer_strip.c). */
#include <string.h>
#include "components.h"

typedef struct strip_dec {
    tm_decoder base;
    uint32_t content;
    size_t start, stop;
} strip_dec;

static tm_status strip(const tm_decoder *self, tm_strs *tokens, tm_error *err) {
    const strip_dec *d = (const strip_dec *)self;
    for (size_t i = 0; i < tokens->n; i++) {
        const char *s = tokens->s[i];
        size_t len = tokens->len[i], from = 0, to = len;
        if (!tm__utf8_valid(s, len, NULL)) continue;    /* not text: left alone */
        for (size_t k = 0; k < d->start && from < len; k++) {
            uint32_t c;
            size_t n = tm__utf8_decode(s, from, &c);
            if (c != d->content) break;
            from += n;
        }
        /* Rust walks the stop side over the whole token, independently of the start side;
         * where the two overlap (its slice would panic) the token becomes empty. */
        for (size_t k = 0; k < d->stop && to > 0; k++) {
            size_t at = to - 1;
            while (at > 0 && ((unsigned char)s[at] & 0xc0) == 0x80) at--;
            uint32_t c;
            tm__utf8_decode(s, at, &c);
            if (c != d->content) break;
            to = at;
        }
        if (from == 0 && to == len) continue;
        if (to < from) to = from;
        char *t = malloc(to - from + 1);
        if (!t) return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
        memcpy(t, s + from, to - from);
        t[to - from] = '\0';
        tm__strs_set(tokens, i, t, to - from);
    }
    return TM_OK;
}

static void strip_free(tm_decoder *self) {
    free(self);
}

static tm_status load_dec_strip(const tm_json *cfg, const char *path, tm_decoder **out,
                            tm_error *err) {
    uint32_t content;
    int64_t start, stop;
    tm_status s = tm__tj_char(cfg, "content", &content, path, err);
    if (!s) s = tm__tj_int(cfg, "start", 0, &start, path, err);
    if (!s) s = tm__tj_int(cfg, "stop", 0, &stop, path, err);
    if (s) return s;
    if (start < 0 || stop < 0)
        return tm__tok_fail(err, path, start < 0 ? "start" : "stop", "expected a count >= 0");
    strip_dec *d = tm__comp_alloc(sizeof *d, err);
    if (!d) return TM_ERR_NO_MEMORY;
    d->base.decode_chain = strip;
    d->base.free = strip_free;
    d->content = content;
    d->start = (size_t)start;
    d->stop = (size_t)stop;
    *out = &d->base;
    return TM_OK;
}

TM_TOK_DECODER("Strip", load_dec_strip);
