/* The BertNormalizer: clean_text (drops NUL, U+FFFD and control/format/unassigned
 * characters, maps whitespace to ' '), spaces around CJK ideographs, strip_accents (NFD
 * then drop Mn; null follows lowercase) and lowercase, in Rust's order. Not the
 * BertPreTokenizer. */
#include "components.h"

typedef struct bert {
    tm_normalizer base;
    int clean_text, chinese, strip_accents, lowercase;
} bert;

/* Rust's is_chinese_char: the CJK ideograph blocks, astral extensions included. */
static int is_chinese(uint32_t c) {
    return (c >= 0x4e00 && c <= 0x9fff) || (c >= 0x3400 && c <= 0x4dbf) ||
           (c >= 0x20000 && c <= 0x2a6df) || (c >= 0x2a700 && c <= 0x2b73f) ||
           (c >= 0x2b740 && c <= 0x2b81f) || (c >= 0x2b920 && c <= 0x2ceaf) ||
           (c >= 0xf900 && c <= 0xfaff) || (c >= 0x2f800 && c <= 0x2fa1f);
}

static int clean_keep(uint32_t c, void *ctx) {
    if (c == 0 || c == 0xfffd) return 0;
    if (c == '\t' || c == '\n' || c == '\r') return 1;
    return !tm__rust_is_other(c);
}

static uint32_t clean_map(uint32_t c, void *ctx) {
    return c == '\t' || c == '\n' || c == '\r' || tm__is_whitespace(c) ? ' ' : c;
}

static int not_mn(uint32_t c, void *ctx) {
    return !tm__rust_is_mark_nonspacing(c);
}

static tm_status chinese(tm_nstr *ns, tm_error *err) {
    size_t i = 0;
    for (; i < ns->len;) {
        uint32_t c;
        size_t n = tm__utf8_decode(ns->s, i, &c);
        if (is_chinese(c)) break;
        i += n;
    }
    if (i == ns->len) return TM_OK;
    tm_nbuild b;
    tm__nbuild_begin(&b, ns);
    tm__nbuild_copy_to(&b, i);
    while (i < ns->len) {
        uint32_t c;
        i += tm__utf8_decode(ns->s, i, &c);
        if (is_chinese(c)) {
            /* Rust: (' ', 0), (c, 1), (' ', 1): the first space takes c's place. */
            tm__nbuild_push(&b, ' ', 0);
            tm__nbuild_push(&b, c, 1);
            tm__nbuild_push(&b, ' ', 1);
        } else {
            tm__nbuild_push(&b, c, 0);
        }
    }
    return tm__nbuild_end(&b, err);
}

/* Whether every character passes keep (then Rust's filter changes nothing). */
static int all_kept(const tm_nstr *ns, int (*keep)(uint32_t c, void *ctx)) {
    for (size_t i = 0; i < ns->len;) {
        uint32_t c;
        i += tm__utf8_decode(ns->s, i, &c);
        if (!keep(c, NULL)) return 0;
    }
    return 1;
}

static int maps_to_self(uint32_t c, void *ctx) {
    return clean_map(c, ctx) == c;
}

static tm_status normalize(const tm_normalizer *self, tm_nstr *ns, tm_error *err) {
    const bert *bn = (const bert *)self;
    tm_status s = TM_OK;
    /* Each step is skipped when it would leave the text as it is (same result, no copy). */
    if (bn->clean_text) {
        if (!all_kept(ns, clean_keep)) s = tm__nstr_filter(ns, clean_keep, NULL, err);
        if (!s && !all_kept(ns, maps_to_self)) s = tm__nstr_map(ns, clean_map, NULL, err);
    }
    if (!s && bn->chinese) s = chinese(ns, err);
    if (!s && bn->strip_accents) {
        s = tm__nstr_normalize_form(ns, TM_NF_NFD, err);
        if (!s && !all_kept(ns, not_mn)) s = tm__nstr_filter(ns, not_mn, NULL, err);
    }
    if (!s && bn->lowercase) s = tm__nstr_lowercase(ns, err);
    return s;
}

static void bert_free(tm_normalizer *self) {
    free(self);
}

static tm_status load_norm_bert(const tm_json *cfg, const char *path, tm_normalizer **out,
                           tm_error *err) {
    int clean_text, chinese_chars, lowercase, strip_accents;
    tm_status s = tm__tj_bool(cfg, "clean_text", 1, &clean_text, path, err);
    if (!s) s = tm__tj_bool(cfg, "handle_chinese_chars", 1, &chinese_chars, path, err);
    if (!s) s = tm__tj_bool(cfg, "lowercase", 1, &lowercase, path, err);
    /* strip_accents: null or absent follows lowercase. */
    if (!s) s = tm__tj_bool(cfg, "strip_accents", lowercase, &strip_accents, path, err);
    if (s) return s;
    bert *n = tm__comp_alloc(sizeof *n, err);
    if (!n) return TM_ERR_NO_MEMORY;
    n->base.normalize = normalize;
    n->base.free = bert_free;
    n->clean_text = clean_text;
    n->chinese = chinese_chars;
    n->strip_accents = strip_accents;
    n->lowercase = lowercase;
    *out = &n->base;
    return TM_OK;
}

TM_TOK_NORMALIZER("BertNormalizer", load_norm_bert);
