/* The ByteLevel normalizer, and the byte-level transform the ByteLevel pre-tokenizer also
 * uses: every byte of the text becomes GPT-2's printable character for it, the first byte
 * of a character replacing it and the others inserted after. Not the decoder. */
#include <string.h>
#include "components.h"

/* Every byte becomes one character aligned to the character it belongs to (Rust: the first
 * byte replaces the character, the others are insertions, which take the alignment of the
 * last byte consumed: the same character's). Built directly, without tm__nbuild. */
tm_status tm__nstr_byte_level(tm_nstr *ns, tm_error *err) {
    size_t i = 0;
    while (i < ns->len && (unsigned char)ns->s[i] < 0x80 &&
           tm__bytelevel_char[(unsigned char)ns->s[i]] == (unsigned char)ns->s[i])
        i++;
    if (i == ns->len) return TM_OK;             /* printable ASCII only: unchanged */
    size_t cap = 2 * ns->len + 1;               /* mapped characters are at most 2 bytes */
    char *s = malloc(cap);
    tm_span *align = malloc(cap * sizeof *align);
    if (!s || !align) {
        free(s);
        free(align);
        return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
    }
    memcpy(s, ns->s, i);
    memcpy(align, ns->align, i * sizeof *align);
    size_t o = i;
    for (; i < ns->len; i++) {
        uint16_t c = tm__bytelevel_char[(unsigned char)ns->s[i]];
        /* the alignment of the character this byte belongs to (all its bytes share it) */
        tm_span a = ns->align[i];
        if (c < 0x80) {
            s[o] = (char)c;
            align[o++] = a;
        } else {
            s[o] = (char)(0xc0 | c >> 6);
            s[o + 1] = (char)(0x80 | (c & 0x3f));
            align[o] = align[o + 1] = a;
            o += 2;
        }
    }
    s[o] = '\0';
    free(ns->s);
    free(ns->align);
    ns->s = s;
    ns->align = align;
    ns->len = o;
    ns->cap = cap;
    return TM_OK;
}

static tm_status normalize(const tm_normalizer *self, tm_nstr *ns, tm_error *err) {
    return tm__nstr_byte_level(ns, err);
}

static void byte_level_free(tm_normalizer *self) {
    free(self);
}

static tm_status load_norm_byte_level(const tm_json *cfg, const char *path, tm_normalizer **out,
                                 tm_error *err) {
    tm_normalizer *n = tm__comp_alloc(sizeof *n, err);
    if (!n) return TM_ERR_NO_MEMORY;
    n->normalize = normalize;
    n->free = byte_level_free;
    *out = n;
    return TM_OK;
}

TM_TOK_NORMALIZER("ByteLevel", load_norm_byte_level);
