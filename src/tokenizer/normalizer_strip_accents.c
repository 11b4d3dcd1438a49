/* The StripAccents normalizer: removes combining marks (it does not decompose first; use
 * NFD before it). Not BertNormalizer's strip_accents (which decomposes itself). */
#include "components.h"

static int keep(uint32_t c, void *ctx) {
    return !tm__rust_is_combining_mark(c);
}

static tm_status normalize(const tm_normalizer *self, tm_nstr *ns, tm_error *err) {
    return tm__nstr_filter(ns, keep, NULL, err);
}

static void strip_accents_free(tm_normalizer *self) {
    free(self);
}

static tm_status load_norm_strip_accents(const tm_json *cfg, const char *path, tm_normalizer **out,
                                    tm_error *err) {
    tm_normalizer *n = tm__comp_alloc(sizeof *n, err);
    if (!n) return TM_ERR_NO_MEMORY;
    n->normalize = normalize;
    n->free = strip_accents_free;
    *out = n;
    return TM_OK;
}

TM_TOK_NORMALIZER("StripAccents", load_norm_strip_accents);
