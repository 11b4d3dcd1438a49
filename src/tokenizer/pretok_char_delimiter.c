/* The CharDelimiterSplit pre-tokenizer: splits on one delimiter character, removing it.
 * Not Split (pretok_split.c). */
#include "components.h"

typedef struct delim {
    tm_pretokenizer base;
    uint32_t c;
} delim;

static int is_delim(uint32_t c, void *ctx) {
    return c == *(const uint32_t *)ctx;
}

static tm_status pre_tokenize(const tm_pretokenizer *self, tm_pstr *ps, tm_error *err) {
    const delim *d = (const delim *)self;
    return tm__pstr_split_chars(ps, is_delim, (void *)&d->c, TM_SPLIT_REMOVED, err);
}

static void delim_free(tm_pretokenizer *self) {
    free(self);
}

static tm_status load_pre_delim(const tm_json *cfg, const char *path, tm_pretokenizer **out,
                            tm_error *err) {
    uint32_t c;
    tm_status s = tm__tj_char(cfg, "delimiter", &c, path, err);
    if (s) return s;
    delim *d = tm__comp_alloc(sizeof *d, err);
    if (!d) return TM_ERR_NO_MEMORY;
    d->base.pre_tokenize = pre_tokenize;
    d->base.free = delim_free;
    d->c = c;
    *out = &d->base;
    return TM_OK;
}

TM_TOK_PRETOKENIZER("CharDelimiterSplit", load_pre_delim);
