/* The Lowercase normalizer and the aligned lowercase BertNormalizer also uses: Rust's
 * char::to_lowercase of every character (U+0130 becomes "i" + U+0307, the added character
 * aligned to it). Not case folding. */
#include "components.h"

tm_status tm__nstr_lowercase(tm_nstr *ns, tm_error *err) {
    /* Nothing to do for text whose characters all lower to themselves: skip the rebuild. */
    size_t i = 0;
    for (; i < ns->len;) {
        uint32_t c;
        size_t n = tm__utf8_decode(ns->s, i, &c);
        if (c == 0x130 || tm__rust_lower(c) != c) break;
        i += n;
    }
    if (i == ns->len) return TM_OK;
    tm_nbuild b;
    tm__nbuild_begin(&b, ns);
    tm__nbuild_copy_to(&b, i);
    while (i < ns->len) {
        uint32_t c;
        i += tm__utf8_decode(ns->s, i, &c);
        if (c == 0x130) {
            tm__nbuild_push(&b, 'i', 0);
            tm__nbuild_push(&b, 0x307, 1);
        } else {
            tm__nbuild_push(&b, tm__rust_lower(c), 0);
        }
    }
    return tm__nbuild_end(&b, err);
}

static tm_status normalize(const tm_normalizer *self, tm_nstr *ns, tm_error *err) {
    return tm__nstr_lowercase(ns, err);
}

static void lowercase_free(tm_normalizer *self) {
    free(self);
}

static tm_status load_norm_lowercase(const tm_json *cfg, const char *path, tm_normalizer **out,
                                tm_error *err) {
    tm_normalizer *n = tm__comp_alloc(sizeof *n, err);
    if (!n) return TM_ERR_NO_MEMORY;
    n->normalize = normalize;
    n->free = lowercase_free;
    *out = n;
    return TM_OK;
}

TM_TOK_NORMALIZER("Lowercase", load_norm_lowercase);
