/* The ByteLevel normalizer, and the byte-level transform the ByteLevel pre-tokenizer also
 * uses: every byte of the text becomes GPT-2's printable character for it, the first byte
 * of a character replacing it and the others inserted after. Not the decoder. */
#include "components.h"

tm_status tm__nstr_byte_level(tm_nstr *ns, tm_error *err) {
    if (!ns->len) return TM_OK;
    tm_nbuild b;
    tm__nbuild_begin(&b, ns);
    for (size_t i = 0; i < ns->len;) {
        size_t n = tm__utf8_len((unsigned char)ns->s[i]);
        for (size_t k = 0; k < n; k++)
            tm__nbuild_push(&b, tm__bytelevel_char[(unsigned char)ns->s[i + k]], k > 0);
        i += n;
    }
    return tm__nbuild_end(&b, err);
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
