/* The tokenizer's internal interface: aligned strings, pre-tokenized strings, the component
 * interfaces (normalizer, pre-tokenizer, decoder, model, post-processor) and their
 * registration, and helpers shared by components. Not public API (include/transmuter.h).
 *
 * ---- Note for whoever writes a component (normalizer_*.c, pretok_*.c, decoder_*.c) ----
 * One file per component (or tight family), registration inside, e.g.
 *
 *     static tm_status load_lowercase(const tm_json *cfg, const char *path,
 *                                     tm_normalizer **out, tm_error *err) { ... }
 *     TM_TOK_NORMALIZER("Lowercase", load_lowercase);
 *
 * The line must start at column 0 (tools/gen_tok_registry.sh greps for it). `cfg` is the
 * component's JSON object (its "type" already checked), `path` where it is in
 * tokenizer.json ("normalizer.normalizers[2]"): errors name it, e.g.
 *     tm__tok_fail(err, path, "pattern", "expected an object {\"Regex\": ...}")
 * A component is a struct whose FIRST member is the interface struct (tm_normalizer, ...),
 * allocated by the loader; `free` releases everything. Loaded components are immutable and
 * are used from several threads at once (batch encode): apply functions must not write to
 * the component (allocate per call what a call needs, e.g. PCRE2 match data).
 * Semantics follow Hugging Face's Rust `tokenizers` 0.23.2, including the alignment of
 * every normalized byte to the original text (tm_nstr below: build new strings with
 * tm__nbuild_*, which is Rust's NormalizedString::transform, so offsets come out equal).
 * Texts reaching components are valid UTF-8 (the API checks input first).
 */
#ifndef TM_TOKENIZER_INTERNAL_H
#define TM_TOKENIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "../../include/transmuter.h"
#include "../core/status.h"
#include "../hub/json.h"

/* ==== Aligned (normalized) strings ===================================================== */

/* A [start, end) byte range of the ORIGINAL input text (absolute: from the start of the
 * text given to encode, whatever piece this is). */
typedef struct tm_span {
    uint32_t start, end;
} tm_span;

/* Rust's NormalizedString. `s` holds the normalized UTF-8 text (len bytes, always
 * NUL-terminated at s[len]); align[i] is the original range byte s[i] came from (every byte
 * of one character carries the same range). `base` is where this piece starts in the
 * original text (Rust's original_shift): characters inserted at the very front of the
 * string align to the empty range [base, base). A tm_nstr owns s and align; a zeroed
 * tm_nstr is a valid empty string. */
typedef struct tm_nstr {
    char *s;
    tm_span *align;
    size_t len, cap;
    uint32_t base;
} tm_nstr;

/* A new string holding text[0, len) unchanged, which starts at byte `base` of the original
 * text: each byte aligns to its whole character, shifted by base. */
tm_status tm__nstr_init(tm_nstr *ns, const char *text, size_t len, uint32_t base);
void tm__nstr_free(tm_nstr *ns);                 /* frees contents, leaves a zeroed string */
/* Moves src into dst (dst's old contents are freed) and zeroes src. */
void tm__nstr_move(tm_nstr *dst, tm_nstr *src);
/* The original range that normalized bytes [start, end) come from, as Rust's
 * convert_offsets(Range::Normalized): an empty range gives [base+start, base+start);
 * otherwise from the first byte's start to the last byte's end. */
tm_span tm__nstr_original_range(const tm_nstr *ns, size_t start, size_t end);
/* A new string that is bytes [start, end) of ns (character boundaries), with its own base
 * (Rust's slice(Range::Normalized)). */
tm_status tm__nstr_slice(const tm_nstr *ns, size_t start, size_t end, tm_nstr *out);

/* Rebuilding a string character by character, with Rust's transform semantics. Start with
 * tm__nbuild_begin on the source; then, walking the source from its start:
 *   tm__nbuild_push(b, c, 0)    emits c in place of the next source character;
 *   tm__nbuild_push(b, c, -n)   the same, and also drops the n source characters after it;
 *   tm__nbuild_push(b, c, +1)   inserts c (consumes nothing): c takes the alignment of the
 *                               last source byte consumed so far ([base,base) if none);
 *   tm__nbuild_skip(b, n)       drops the next n source characters (Rust's initial_offset
 *                               when done first; allowed anywhere).
 * Source characters never consumed are dropped. tm__nbuild_end replaces the source's
 * contents with the result (or, on error, frees the partial result and leaves the source
 * as it was). Every byte of an emitted character aligns to the range of the first byte of
 * the source character it replaces. The source must not be modified in between. */
typedef struct tm_nbuild {
    tm_nstr *src;
    size_t pos;                 /* source bytes consumed */
    tm_nstr out;
    int failed;                 /* an allocation failed: end reports it */
} tm_nbuild;

void tm__nbuild_begin(tm_nbuild *b, tm_nstr *src);
void tm__nbuild_push(tm_nbuild *b, uint32_t c, int change);
void tm__nbuild_skip(tm_nbuild *b, size_t n_chars);
/* Emits the source's next n characters unchanged (change 0 each); bytes-fast. */
void tm__nbuild_copy(tm_nbuild *b, size_t n_chars);
/* Emits the source's bytes up to byte offset `to` unchanged (a character boundary). */
void tm__nbuild_copy_to(tm_nbuild *b, size_t to);
tm_status tm__nbuild_end(tm_nbuild *b, tm_error *err);
/* Abandons a build (frees its result; the source is untouched). */
void tm__nbuild_abort(tm_nbuild *b);

/* Common transforms, each exactly the Rust method of the same name. */
/* Every character c becomes map(c) (one character for one). */
tm_status tm__nstr_map(tm_nstr *ns, uint32_t (*map)(uint32_t c, void *ctx), void *ctx,
                       tm_error *err);
/* Keeps the characters for which keep(c) is true; removed characters go with the previous
 * kept one (Rust's filter). */
tm_status tm__nstr_filter(tm_nstr *ns, int (*keep)(uint32_t c, void *ctx), void *ctx,
                          tm_error *err);
/* Inserts the UTF-8 text s at the front / end (no-op on an empty string, as in Rust). */
tm_status tm__nstr_prepend(tm_nstr *ns, const char *s, size_t len, tm_error *err);
tm_status tm__nstr_append(tm_nstr *ns, const char *s, size_t len, tm_error *err);
/* Removes leading and/or trailing White_Space characters (Rust's lstrip/rstrip). */
tm_status tm__nstr_strip(tm_nstr *ns, int left, int right, tm_error *err);

/* ==== Matches and patterns ============================================================= */

/* Rust's Pattern::find_matches result: consecutive ranges of the searched text covering
 * all of it, each a match or not. (An empty text gives one non-match [0, 0).) */
typedef struct tm_match {
    size_t start, end;
    int is_match;
} tm_match;

typedef struct tm_matches {
    tm_match *v;
    size_t n, cap;
} tm_matches;

void tm__matches_free(tm_matches *m);
tm_status tm__matches_push(tm_matches *m, size_t start, size_t end, int is_match, tm_error *err);

/* A pattern as tokenizer.json writes it: {"String": "..."} (literal, may be empty) or
 * {"Regex": "..."} (compiled with PCRE2, see tm__regex_compile). Immutable once loaded. */
typedef struct tm_pattern {
    char *literal;              /* String pattern, or NULL for a regex */
    size_t literal_len;
    pcre2_code *re;             /* Regex pattern */
} tm_pattern;

/* Loads cfg ({"String": s} or {"Regex": r}); path names cfg in errors. */
tm_status tm__pattern_load(const tm_json *cfg, const char *path, tm_pattern *out, tm_error *err);
void tm__pattern_free(tm_pattern *p);
/* Appends the find_matches list of s[0, len) to out (out is cleared first). Literal:
 * non-overlapping occurrences left to right (empty literal: the whole text as one
 * non-match). Regex: successive leftmost matches; after an empty match the search resumes
 * one character further, as the Oniguruma iterator Rust uses. */
tm_status tm__pattern_find(const tm_pattern *p, const char *s, size_t len, tm_matches *out,
                           tm_error *err);
/* Matches made of single characters for which is_match(c) holds (Rust's Fn(char) pattern):
 * each such character is its own match. */
tm_status tm__find_char_matches(const char *s, size_t len, int (*is_match)(uint32_t c, void *ctx),
                                void *ctx, tm_matches *out, tm_error *err);

/* Compiles a regex with PCRE2 (UTF, UCP, then JIT when available). On failure the error
 * names path, the PCRE2 message and the pattern offset. The code is shared read-only
 * between threads; each match call needs its own pcre2_match_data. */
tm_status tm__regex_compile(const char *pattern, size_t len, const char *path, pcre2_code **out,
                            tm_error *err);

/* ==== Lists of aligned strings and splitting =========================================== */

typedef struct tm_nstrs {
    tm_nstr *v;
    size_t n, cap;
} tm_nstrs;

void tm__nstrs_free(tm_nstrs *l);                /* frees every string and the list */
/* Appends ns to the list, moving it (ns is left zeroed). */
tm_status tm__nstrs_move(tm_nstrs *l, tm_nstr *ns, tm_error *err);

/* Rust's SplitDelimiterBehavior; the values are the JSON names' order. */
typedef enum tm_split_behavior {
    TM_SPLIT_REMOVED, TM_SPLIT_ISOLATED, TM_SPLIT_MERGED_WITH_PREVIOUS,
    TM_SPLIT_MERGED_WITH_NEXT, TM_SPLIT_CONTIGUOUS
} tm_split_behavior;

/* Parses "Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous". */
tm_status tm__split_behavior_parse(const tm_json *v, const char *path, tm_split_behavior *out,
                                   tm_error *err);
/* Rust's NormalizedString::split with a match list already found in ns->s: applies the
 * behavior and appends the resulting slices to out (empty slices included; the
 * pre-tokenized split drops them). ns is not modified. */
tm_status tm__nstr_split(const tm_nstr *ns, const tm_matches *m, tm_split_behavior behavior,
                         tm_nstrs *out, tm_error *err);

/* ==== Pre-tokenized strings ============================================================ */

/* One token as a model (or the added vocabulary) produced it. `start`/`end` are byte
 * offsets in the normalized text of its split. `value` points into the vocabulary (owned =
 * 0) or is a malloc'd copy (owned = 1). */
typedef struct tm_tok_token {
    int32_t id;
    uint32_t start, end;
    uint32_t value_len;
    const char *value;
    int owned;
} tm_tok_token;

/* A split: its text (aligned to the original) and, once known, its tokens (n_tokens >= 0;
 * -1 while not tokenized). Splits that already have tokens (added tokens) are never
 * split or normalized again. */
typedef struct tm_split {
    tm_nstr ns;
    tm_tok_token *tokens;
    int n_tokens;
} tm_split;

/* Rust's PreTokenizedString: an ordered list of splits. */
typedef struct tm_pstr {
    tm_split *v;
    size_t n, cap;
} tm_pstr;

void tm__pstr_free(tm_pstr *ps);

/* Rust's PreTokenizedString::split: for every split without tokens, fn(ctx, i, piece, out,
 * err) appends the pieces piece becomes to out (i: the split's index in the list before
 * this call). `piece` stays the framework's: fn may modify it or move it into out
 * (tm__nstrs_move), and it is freed after fn returns. Empty pieces are dropped. */
typedef tm_status (*tm_split_fn)(void *ctx, size_t i, tm_nstr *piece, tm_nstrs *out,
                                 tm_error *err);
tm_status tm__pstr_split(tm_pstr *ps, tm_split_fn fn, void *ctx, tm_error *err);
/* Convenience: splits every untokenized split on the matches of p with behavior b (the
 * Split pre-tokenizer without invert). */
tm_status tm__pstr_split_pattern(tm_pstr *ps, const tm_pattern *p, tm_split_behavior b,
                                 tm_error *err);
/* Rust's PreTokenizedString::normalize: fn(ctx, ns, err) transforms every untokenized
 * split in place. */
typedef tm_status (*tm_normalize_fn)(void *ctx, tm_nstr *ns, tm_error *err);
tm_status tm__pstr_normalize(tm_pstr *ps, tm_normalize_fn fn, void *ctx, tm_error *err);

/* ==== Lists of strings (decoders) ====================================================== */

/* Owned UTF-8 strings with lengths (tokens being decoded may hold any bytes while a
 * ByteFallback/ByteLevel step works; each s[i] is NUL-terminated). */
typedef struct tm_strs {
    char **s;
    size_t *len;
    size_t n, cap;
} tm_strs;

void tm__strs_free(tm_strs *l);
tm_status tm__strs_push(tm_strs *l, const char *s, size_t len, tm_error *err);   /* copies */
/* Appends s, taking ownership of the malloc'd s (NUL-terminated, len bytes). On failure s
 * is freed. */
tm_status tm__strs_push_owned(tm_strs *l, char *s, size_t len, tm_error *err);

/* ==== Component interfaces ============================================================= */

typedef struct tm_normalizer tm_normalizer;
typedef struct tm_pretokenizer tm_pretokenizer;
typedef struct tm_decoder tm_decoder;

struct tm_normalizer {
    /* Rust's Normalizer::normalize: transforms ns in place. */
    tm_status (*normalize)(const tm_normalizer *self, tm_nstr *ns, tm_error *err);
    void (*free)(tm_normalizer *self);
};

struct tm_pretokenizer {
    /* Rust's PreTokenizer::pre_tokenize, typically through tm__pstr_split /
     * tm__pstr_normalize (which leave splits with tokens alone). */
    tm_status (*pre_tokenize)(const tm_pretokenizer *self, tm_pstr *ps, tm_error *err);
    void (*free)(tm_pretokenizer *self);
};

struct tm_decoder {
    /* Rust's Decoder::decode_chain: replaces the list `tokens` with its decoded pieces
     * (free the old strings you drop; on error the list must still be valid to free). */
    tm_status (*decode_chain)(const tm_decoder *self, tm_strs *tokens, tm_error *err);
    void (*free)(tm_decoder *self);
};

/* Loader signatures (see the note at the top). */
typedef tm_status (*tm_normalizer_load_fn)(const tm_json *cfg, const char *path,
                                           tm_normalizer **out, tm_error *err);
typedef tm_status (*tm_pretokenizer_load_fn)(const tm_json *cfg, const char *path,
                                             tm_pretokenizer **out, tm_error *err);
typedef tm_status (*tm_decoder_load_fn)(const tm_json *cfg, const char *path,
                                        tm_decoder **out, tm_error *err);

/* Load any component from its JSON object (dispatch on "type" through the registry);
 * Sequence loaders call these for their children with paths like "normalizer.normalizers[2]".
 * An unknown or missing type is TM_ERR_UNSUPPORTED / TM_ERR_PARSE naming it and the path. */
tm_status tm__normalizer_load(const tm_json *cfg, const char *path, tm_normalizer **out,
                              tm_error *err);
tm_status tm__pretokenizer_load(const tm_json *cfg, const char *path, tm_pretokenizer **out,
                                tm_error *err);
tm_status tm__decoder_load(const tm_json *cfg, const char *path, tm_decoder **out,
                           tm_error *err);
/* free(NULL) no-ops for the three. */
void tm__normalizer_free(tm_normalizer *n);
void tm__pretokenizer_free(tm_pretokenizer *p);
void tm__decoder_free(tm_decoder *d);

/* ==== Registration ===================================================================== */

typedef enum tm_tok_kind {
    TM_TOK_KIND_NORMALIZER, TM_TOK_KIND_PRETOKENIZER, TM_TOK_KIND_DECODER
} tm_tok_kind;

struct tm_tok_reg {
    tm_tok_kind kind;
    const char *type;           /* the JSON "type" value */
    tm_normalizer_load_fn normalizer;
    tm_pretokenizer_load_fn pretokenizer;
    tm_decoder_load_fn decoder;
};

/* One line per component type, at column 0 of its file, collected at build time into
 * build/tok_registry.inc (tools/gen_tok_registry.sh). FN may be static; the symbol is
 * tm__tokreg_<kind>_<FN>_<line>, so two kinds may reuse a loader name at the same line. */
#define TM_TOK_NORMALIZER(TYPE, FN) \
    const struct tm_tok_reg TM__TOKREG_CAT(tm__tokreg_normalizer_, __LINE__, FN) = \
        {.kind = TM_TOK_KIND_NORMALIZER, .type = TYPE, .normalizer = FN}
#define TM_TOK_PRETOKENIZER(TYPE, FN) \
    const struct tm_tok_reg TM__TOKREG_CAT(tm__tokreg_pretokenizer_, __LINE__, FN) = \
        {.kind = TM_TOK_KIND_PRETOKENIZER, .type = TYPE, .pretokenizer = FN}
#define TM_TOK_DECODER(TYPE, FN) \
    const struct tm_tok_reg TM__TOKREG_CAT(tm__tokreg_decoder_, __LINE__, FN) = \
        {.kind = TM_TOK_KIND_DECODER, .type = TYPE, .decoder = FN}
#define TM__TOKREG_CAT(a, l, f) TM__TOKREG_CAT2(a, l, f)
#define TM__TOKREG_CAT2(a, l, f) a##f##_##l

/* The registration of (kind, type), or NULL. */
const struct tm_tok_reg *tm__tok_lookup(tm_tok_kind kind, const char *type);

/* ==== JSON helpers (consistent errors naming the path) ================================= */

/* Fails with TM_ERR_PARSE: "tokenizer.json: <path>.<key>: <message>" (key may be NULL). */
tm_status tm__tok_fail(tm_error *err, const char *path, const char *key, const char *fmt, ...)
    TM_PRINTF(4, 5);
/* Writes "<path>.<key>" or "<path>[<index>]" (index >= 0, key NULL) into buf. */
void tm__tok_path(char *buf, size_t cap, const char *path, const char *key, int index);
/* Optional fields: absent or null gives def; a value of another type is an error. */
tm_status tm__tj_bool(const tm_json *o, const char *key, int def, int *out, const char *path,
                      tm_error *err);
tm_status tm__tj_int(const tm_json *o, const char *key, int64_t def, int64_t *out,
                     const char *path, tm_error *err);
tm_status tm__tj_number(const tm_json *o, const char *key, double def, double *out,
                        const char *path, tm_error *err);
/* A string field: *out points into the JSON (valid while cfg lives), *len its byte length
 * (len may be NULL). def may be NULL. */
tm_status tm__tj_string(const tm_json *o, const char *key, const char *def, const char **out,
                        size_t *len, const char *path, tm_error *err);
/* A required array / object field (TM_ERR_PARSE when absent or of another type). */
tm_status tm__tj_array(const tm_json *o, const char *key, const tm_json **out, const char *path,
                       tm_error *err);

/* ==== UTF-8 and characters ============================================================= */

/* Decodes the character at s[i] (valid UTF-8 assumed) into *c; returns its length. */
static inline size_t tm__utf8_decode(const char *s, size_t i, uint32_t *c) {
    const unsigned char *p = (const unsigned char *)s + i;
    if (p[0] < 0x80) { *c = p[0]; return 1; }
    if (p[0] < 0xe0) { *c = (uint32_t)(p[0] & 0x1f) << 6 | (p[1] & 0x3f); return 2; }
    if (p[0] < 0xf0) {
        *c = (uint32_t)(p[0] & 0x0f) << 12 | (uint32_t)(p[1] & 0x3f) << 6 | (p[2] & 0x3f);
        return 3;
    }
    *c = (uint32_t)(p[0] & 0x07) << 18 | (uint32_t)(p[1] & 0x3f) << 12 |
         (uint32_t)(p[2] & 0x3f) << 6 | (p[3] & 0x3f);
    return 4;
}
/* The byte length of the character starting with byte b (1 for continuation bytes). */
static inline size_t tm__utf8_len(unsigned char b) {
    return b < 0xc0 ? 1 : b < 0xe0 ? 2 : b < 0xf0 ? 3 : 4;
}
/* Writes c as UTF-8 into out (4 bytes room); returns its length. */
size_t tm__utf8_encode(uint32_t c, char *out);
/* Whether s[0, len) is valid UTF-8 (no surrogates, no overlongs, <= U+10FFFF); when not,
 * *bad is the offset of the first bad byte. */
int tm__utf8_valid(const char *s, size_t len, size_t *bad);
/* The number of characters in s[0, len). */
size_t tm__utf8_count(const char *s, size_t len);

/* Character classes as Rust's char methods (Unicode, via utf8proc). */
int tm__is_whitespace(uint32_t c);      /* char::is_whitespace (White_Space) */
int tm__is_numeric(uint32_t c);         /* char::is_numeric (Nd, Nl, No) */
int tm__is_control(uint32_t c);         /* char::is_control (Cc) */
/* Unicode punctuation (general category P*). */
int tm__is_punctuation(uint32_t c);
/* ASCII punctuation or P*: the BertPreTokenizer's and Punctuation's is_punc. */
int tm__is_bert_punctuation(uint32_t c);

/* GPT-2's byte <-> character table (ByteLevel): every byte has a printable character. */
extern const uint16_t tm__bytelevel_char[256];
/* The byte for character c, or -1 when c is not in the table. */
int tm__bytelevel_byte(uint32_t c);

#endif
