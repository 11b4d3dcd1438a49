/* The FixedLength pre-tokenizer: cuts the text into pieces of `length` characters (the
 * last one shorter). Not Split. */
#include "components.h"

typedef struct fixed {
    tm_pretokenizer base;
    size_t length;
} fixed;

static tm_status split_fixed(void *ctx, size_t i, tm_nstr *ns, tm_nstrs *out, tm_error *err) {
    size_t length = *(const size_t *)ctx;
    tm_status s = TM_OK;
    for (size_t at = 0; at < ns->len && !s;) {
        size_t end = at;
        for (size_t k = 0; k < length && end < ns->len; k++)
            end += tm__utf8_len((unsigned char)ns->s[end]);
        tm_nstr piece;
        if (tm__nstr_slice(ns, at, end, &piece))
            return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
        s = tm__nstrs_move(out, &piece, err);
        tm__nstr_free(&piece);
        at = end;
    }
    return s;
}

static tm_status pre_tokenize(const tm_pretokenizer *self, tm_pstr *ps, tm_error *err) {
    const fixed *f = (const fixed *)self;
    return tm__pstr_split(ps, split_fixed, (void *)&f->length, err);
}

static void fixed_free(tm_pretokenizer *self) {
    free(self);
}

static tm_status load_pre_fixed(const tm_json *cfg, const char *path, tm_pretokenizer **out,
                            tm_error *err) {
    int64_t length;
    tm_status s = tm__tj_int(cfg, "length", 5, &length, path, err);
    if (s) return s;
    /* Rust's chunks(0) panics; refuse it at load. */
    if (length < 1) return tm__tok_fail(err, path, "length", "expected a length >= 1");
    fixed *f = tm__comp_alloc(sizeof *f, err);
    if (!f) return TM_ERR_NO_MEMORY;
    f->base.pre_tokenize = pre_tokenize;
    f->base.free = fixed_free;
    f->length = (size_t)length;
    *out = &f->base;
    return TM_OK;
}

TM_TOK_PRETOKENIZER("FixedLength", load_pre_fixed);
