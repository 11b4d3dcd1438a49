/* The Strip normalizer: removes leading and/or trailing whitespace. Not StripAccents
 * (normalizer_strip_accents.c) nor the Strip decoder. */
#include "components.h"

typedef struct strip {
    tm_normalizer base;
    int left, right;
} strip;

static tm_status normalize(const tm_normalizer *self, tm_nstr *ns, tm_error *err) {
    const strip *s = (const strip *)self;
    return tm__nstr_strip(ns, s->left, s->right, err);
}

static void strip_free(tm_normalizer *self) {
    free(self);
}

static tm_status load_norm_strip(const tm_json *cfg, const char *path, tm_normalizer **out,
                            tm_error *err) {
    int left, right;
    tm_status s = tm__tj_req_bool(cfg, "strip_left", &left, path, err);
    if (!s) s = tm__tj_req_bool(cfg, "strip_right", &right, path, err);
    if (s) return s;
    strip *n = tm__comp_alloc(sizeof *n, err);
    if (!n) return TM_ERR_NO_MEMORY;
    n->base.normalize = normalize;
    n->base.free = strip_free;
    n->left = left;
    n->right = right;
    *out = &n->base;
    return TM_OK;
}

TM_TOK_NORMALIZER("Strip", load_norm_strip);
