/* The Digits pre-tokenizer: separates numeric characters (Rust's char::is_numeric) from
 * the rest, each digit alone when individual_digits. Not UnicodeScripts. */
#include "components.h"

typedef struct digits {
    tm_pretokenizer base;
    int individual;
} digits;

static int is_num(uint32_t c, void *ctx) {
    return tm__rust_is_numeric(c);
}

static tm_status pre_tokenize(const tm_pretokenizer *self, tm_pstr *ps, tm_error *err) {
    const digits *d = (const digits *)self;
    return tm__pstr_split_chars(ps, is_num, NULL,
                                d->individual ? TM_SPLIT_ISOLATED : TM_SPLIT_CONTIGUOUS, err);
}

static void digits_free(tm_pretokenizer *self) {
    free(self);
}

static tm_status load_pre_digits(const tm_json *cfg, const char *path, tm_pretokenizer **out,
                             tm_error *err) {
    int individual;
    tm_status s = tm__tj_bool(cfg, "individual_digits", 0, &individual, path, err);
    if (s) return s;
    digits *d = tm__comp_alloc(sizeof *d, err);
    if (!d) return TM_ERR_NO_MEMORY;
    d->base.pre_tokenize = pre_tokenize;
    d->base.free = digits_free;
    d->individual = individual;
    *out = &d->base;
    return TM_OK;
}

TM_TOK_PRETOKENIZER("Digits", load_pre_digits);
