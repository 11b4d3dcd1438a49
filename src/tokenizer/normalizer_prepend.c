/* The Prepend normalizer: puts a string in front of any non-empty text (SentencePiece's
 * "▁"). Not Metaspace's prepend scheme. */
#include <string.h>
#include "components.h"

typedef struct prepend {
    tm_normalizer base;
    char *s;
    size_t len;
} prepend;

static tm_status normalize(const tm_normalizer *self, tm_nstr *ns, tm_error *err) {
    const prepend *p = (const prepend *)self;
    return tm__nstr_prepend(ns, p->s, p->len, err);
}

static void prepend_free(tm_normalizer *self) {
    prepend *p = (prepend *)self;
    free(p->s);
    free(p);
}

static tm_status load_norm_prepend(const tm_json *cfg, const char *path, tm_normalizer **out,
                              tm_error *err) {
    const char *s;
    size_t len;
    tm_status st = tm__tj_req_string(cfg, "prepend", &s, &len, path, err);
    if (st) return st;
    prepend *p = tm__comp_alloc(sizeof *p, err);
    if (!p) return TM_ERR_NO_MEMORY;
    p->base.normalize = normalize;
    p->base.free = prepend_free;
    if (!(p->s = malloc(len + 1))) {
        free(p);
        return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
    }
    memcpy(p->s, s, len + 1);
    p->len = len;
    *out = &p->base;
    return TM_OK;
}

TM_TOK_NORMALIZER("Prepend", load_norm_prepend);
