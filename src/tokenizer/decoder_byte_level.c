/* The ByteLevel decoder: maps every token's GPT-2 byte-level characters back to bytes (a
 * token with any other character keeps its own UTF-8 bytes) and joins everything into one
 * string, invalid UTF-8 replaced by U+FFFD as Rust's from_utf8_lossy. Not the byte-level
 * pre-tokenizer (pretok_byte_level.c). */
#include <string.h>
#include "components.h"

/* Appends bytes[0, n) to out with every maximal invalid sequence replaced by U+FFFD, as
 * String::from_utf8_lossy (WHATWG "maximal subpart" replacement). */
static size_t lossy(const unsigned char *b, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = b[i];
        size_t need = 0;
        unsigned char lo = 0x80, hi = 0xbf;
        if (c < 0x80) {
            out[o++] = (char)c;
            i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf) need = 1;
        else if (c >= 0xe0 && c <= 0xef) {
            need = 2;
            if (c == 0xe0) lo = 0xa0;
            if (c == 0xed) hi = 0x9f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            need = 3;
            if (c == 0xf0) lo = 0x90;
            if (c == 0xf4) hi = 0x8f;
        }
        size_t k = 1;
        if (need) {
            for (; k <= need && i + k < n; k++) {
                unsigned char x = b[i + k];
                if (k == 1 ? (x < lo || x > hi) : (x & 0xc0) != 0x80) break;
            }
        }
        if (need && k == need + 1) {
            memcpy(out + o, b + i, need + 1);
            o += need + 1;
            i += need + 1;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i += need ? k : 1;
        }
    }
    return o;
}

static tm_status byte_level_decode(const tm_decoder *self, tm_strs *tokens, tm_error *err) {
    size_t total = 0;
    for (size_t i = 0; i < tokens->n; i++) total += tokens->len[i];
    unsigned char *bytes = malloc(total + 1);
    char *out = malloc(total * 3 + 1);
    if (!bytes || !out) {
        free(bytes);
        free(out);
        return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
    }
    size_t nb = 0;
    for (size_t i = 0; i < tokens->n; i++) {
        const char *s = tokens->s[i];
        size_t len = tokens->len[i], start = nb;
        /* (tokens are UTF-8 in Rust; bytes that are not stay as they are) */
        int all = tm__utf8_valid(s, len, NULL);
        for (size_t k = 0; all && k < len;) {
            uint32_t c;
            k += tm__utf8_decode(s, k, &c);
            int b = tm__bytelevel_byte(c);
            if (b < 0) {
                all = 0;
                break;
            }
            bytes[nb++] = (unsigned char)b;
        }
        if (!all) {
            nb = start;
            memcpy(bytes + nb, s, len);
            nb += len;
        }
    }
    size_t n = lossy(bytes, nb, out);
    out[n] = '\0';
    free(bytes);
    tm__strs_free(tokens);
    return tm__strs_push_owned(tokens, out, n, err);
}

static void byte_level_free(tm_decoder *self) {
    free(self);
}

static tm_status load_dec_byte_level(const tm_json *cfg, const char *path, tm_decoder **out,
                                 tm_error *err) {
    int v;
    tm_status s = tm__tj_bool(cfg, "add_prefix_space", 1, &v, path, err);
    if (!s) s = tm__tj_bool(cfg, "trim_offsets", 1, &v, path, err);
    if (!s) s = tm__tj_bool(cfg, "use_regex", 1, &v, path, err);
    if (s) return s;
    tm_decoder *d = tm__comp_alloc(sizeof *d, err);
    if (!d) return TM_ERR_NO_MEMORY;
    d->decode_chain = byte_level_decode;
    d->free = byte_level_free;
    *out = d;
    return TM_OK;
}

TM_TOK_DECODER("ByteLevel", load_dec_byte_level);
