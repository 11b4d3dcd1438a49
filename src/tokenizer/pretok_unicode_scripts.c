/* The UnicodeScripts pre-tokenizer: splits where the script changes (SentencePiece's rule:
 * spaces and unassigned characters, "Any", never split nor change the current script;
 * Hiragana and Katakana count as Han). Not Digits or Punctuation. */
#include "components.h"
#include "pretok_unicode_scripts_table.h"

/* The script number of c, 0 for Any. */
static unsigned script_of(uint32_t c) {
    size_t lo = 0, hi = sizeof script_ranges / sizeof script_ranges[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < script_ranges[mid].lo) hi = mid;
        else if (c > script_ranges[mid].hi) lo = mid + 1;
        else return script_ranges[mid].script;
    }
    return 0;
}

/* A piece starts at every non-Any character whose script differs from the last non-Any
 * one, the first included; as in Rust, whatever comes before the first non-Any character
 * (leading spaces) is dropped, and a text of Any characters gives no piece. */
static tm_status split_scripts(void *ctx, size_t i, tm_nstr *ns, tm_nstrs *out, tm_error *err) {
    unsigned last = 0;
    size_t start = 0;
    int started = 0;
    tm_status s = TM_OK;
    for (size_t k = 0; k <= ns->len && !s;) {
        uint32_t c = 0;
        size_t n = k < ns->len ? tm__utf8_decode(ns->s, k, &c) : 1;
        unsigned sc = k < ns->len ? script_of(c) : 0;
        int boundary = k == ns->len ? started : sc && sc != last;
        if (boundary && started) {
            tm_nstr piece;
            if (tm__nstr_slice(ns, start, k, &piece))
                return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
            s = tm__nstrs_move(out, &piece, err);
            tm__nstr_free(&piece);
        }
        if (boundary) start = k, started = 1;
        if (sc) last = sc;
        k += n;
    }
    return s;
}

static tm_status pre_tokenize(const tm_pretokenizer *self, tm_pstr *ps, tm_error *err) {
    return tm__pstr_split(ps, split_scripts, NULL, err);
}

static void scripts_free(tm_pretokenizer *self) {
    free(self);
}

static tm_status load_pre_scripts(const tm_json *cfg, const char *path, tm_pretokenizer **out,
                                  tm_error *err) {
    tm_pretokenizer *p = tm__comp_alloc(sizeof *p, err);
    if (!p) return TM_ERR_NO_MEMORY;
    p->pre_tokenize = pre_tokenize;
    p->free = scripts_free;
    *out = p;
    return TM_OK;
}

TM_TOK_PRETOKENIZER("UnicodeScripts", load_pre_scripts);
