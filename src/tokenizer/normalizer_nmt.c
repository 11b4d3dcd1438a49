/* The Nmt normalizer (SentencePiece's nmt_nfkc clean-up without NFKC): drops some ASCII
 * control characters and maps other spaces and separators to ' '. Not Precompiled. */
#include "components.h"

static int keep(uint32_t c, void *ctx) {
    return !((c >= 1 && c <= 8) || c == 0xb || (c >= 0xe && c <= 0x1f) || c == 0x7f ||
             c == 0x8f || c == 0x9f);
}

static uint32_t map(uint32_t c, void *ctx) {
    switch (c) {
    case 0x9: case 0xa: case 0xc: case 0xd: case 0x1680: case 0x2028: case 0x2029:
    case 0x2581: case 0xfeff: case 0xfffd:
        return ' ';
    }
    return c >= 0x200b && c <= 0x200f ? ' ' : c;
}

static tm_status normalize(const tm_normalizer *self, tm_nstr *ns, tm_error *err) {
    tm_status s = tm__nstr_filter(ns, keep, NULL, err);
    return s ? s : tm__nstr_map(ns, map, NULL, err);
}

static void nmt_free(tm_normalizer *self) {
    free(self);
}

static tm_status load_norm_nmt(const tm_json *cfg, const char *path, tm_normalizer **out,
                          tm_error *err) {
    tm_normalizer *n = tm__comp_alloc(sizeof *n, err);
    if (!n) return TM_ERR_NO_MEMORY;
    n->normalize = normalize;
    n->free = nmt_free;
    *out = n;
    return TM_OK;
}

TM_TOK_NORMALIZER("Nmt", load_norm_nmt);
