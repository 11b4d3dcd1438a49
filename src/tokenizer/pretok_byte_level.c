/* The ByteLevel pre-tokenizer (GPT-2): optional leading space, the GPT-2 regex split, then
 * every byte of each piece mapped to its printable byte-level character. Not the
 * ByteLevel decoder, normalizer or post-processor. */
#include <string.h>
#include "components.h"

/* GPT-2's pre-tokenization regex, as Rust's ByteLevel compiles it. */
static const char gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

typedef struct byte_level {
    tm_pretokenizer base;
    int add_prefix_space, use_regex;
    tm_pattern re;
} byte_level;

static tm_status split_piece(void *ctx, size_t i, tm_nstr *ns, tm_nstrs *out, tm_error *err) {
    const byte_level *b = ctx;
    tm_status s = TM_OK;
    if (b->add_prefix_space && !(ns->len && ns->s[0] == ' '))
        s = tm__nstr_prepend(ns, " ", 1, err);
    if (s) return s;
    if (!b->use_regex) return tm__nstrs_move(out, ns, err);
    tm_matches m = {0};
    s = tm__pattern_find(&b->re, ns->s, ns->len, &m, err);
    if (!s) s = tm__nstr_split(ns, &m, TM_SPLIT_ISOLATED, out, err);
    tm__matches_free(&m);
    return s;
}

static tm_status to_bytes(void *ctx, tm_nstr *ns, tm_error *err) {
    return tm__nstr_byte_level(ns, err);
}

static tm_status pre_tokenize(const tm_pretokenizer *self, tm_pstr *ps, tm_error *err) {
    tm_status s = tm__pstr_split(ps, split_piece, (void *)self, err);
    return s ? s : tm__pstr_normalize(ps, to_bytes, NULL, err);
}

static void byte_level_free(tm_pretokenizer *self) {
    byte_level *b = (byte_level *)self;
    tm__pattern_free(&b->re);
    free(b);
}

static tm_status load_pre_byte_level(const tm_json *cfg, const char *path, tm_pretokenizer **out,
                                 tm_error *err) {
    int add_prefix_space, trim_offsets, use_regex;
    tm_status s = tm__tj_bool(cfg, "add_prefix_space", 1, &add_prefix_space, path, err);
    if (!s) s = tm__tj_bool(cfg, "trim_offsets", 1, &trim_offsets, path, err);
    if (!s) s = tm__tj_bool(cfg, "use_regex", 1, &use_regex, path, err);
    if (s) return s;
    byte_level *b = tm__comp_alloc(sizeof *b, err);
    if (!b) return TM_ERR_NO_MEMORY;
    b->base.pre_tokenize = pre_tokenize;
    b->base.free = byte_level_free;
    b->add_prefix_space = add_prefix_space;
    b->use_regex = use_regex;
    if (use_regex) {
        s = tm__regex_compile(gpt2_regex, sizeof gpt2_regex - 1, path, &b->re.re, err);
        if (s) {
            free(b);
            return s;
        }
    }
    *out = &b->base;
    return TM_OK;
}

TM_TOK_PRETOKENIZER("ByteLevel", load_pre_byte_level);
