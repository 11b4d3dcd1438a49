/* Helpers the normalizers, pre-tokenizers and decoders share beyond internal.h: the aligned
 * transforms several components reuse (Unicode normalization forms, lowercase, byte-level
 * mapping, replace), the Rust-exact character classes they need, and small loader helpers.
 * Not the framework (internal.h) nor any single component's logic. */
#ifndef TM_TOKENIZER_COMPONENTS_H
#define TM_TOKENIZER_COMPONENTS_H

#include <stdlib.h>
#include "internal.h"

/* ---- Aligned transforms (each Rust's NormalizedString method of the same meaning) ---- */

typedef enum tm_nf_form { TM_NF_NFD, TM_NF_NFKD, TM_NF_NFC, TM_NF_NFKC } tm_nf_form;

/* Unicode normalization with the (char, change) stream of Rust's
 * unicode-normalization-alignments (normalizer_unicode.c). */
tm_status tm__nstr_normalize_form(tm_nstr *ns, tm_nf_form form, tm_error *err);
/* Rust's char::to_lowercase of every character (U+0130 becomes two characters), as
 * NormalizedString::lowercase (normalizer_lowercase.c). */
tm_status tm__nstr_lowercase(tm_nstr *ns, tm_error *err);
/* Every byte of the text becomes its GPT-2 byte-level character (normalizer_byte_level.c). */
tm_status tm__nstr_byte_level(tm_nstr *ns, tm_error *err);
/* NormalizedString::replace: every match of m (found in ns->s) becomes content
 * (normalizer_replace.c). */
tm_status tm__nstr_replace(tm_nstr *ns, const tm_matches *m, const char *content,
                           size_t content_len, tm_error *err);

/* ---- Character classes (chars_rust.c) ------------------------------------------------ */

/* Rust's char::to_lowercase for characters that lower to ONE character (all but U+0130). */
uint32_t tm__rust_lower(uint32_t c);
/* unicode_categories' is_mark_nonspacing (Mn) / is_other (C*), BertNormalizer's tables. */
int tm__rust_is_mark_nonspacing(uint32_t c);
int tm__rust_is_other(uint32_t c);
/* unicode-normalization-alignments' is_combining_mark (M*), StripAccents. */
int tm__rust_is_combining_mark(uint32_t c);
/* ASCII punctuation or unicode_categories' is_punctuation (BertPreTokenizer, Punctuation). */
int tm__rust_is_punctuation(uint32_t c);
/* Rust's char::is_numeric (Digits). */
int tm__rust_is_numeric(uint32_t c);
/* Whether unicode-normalization-alignments (Unicode 12 data) does not know c: it then has
 * no decomposition, combining class 0 and is never a composite. */
int tm__rust_nf_unknown(uint32_t c);
/* The `regex` crate's Unicode \w (Whitespace pre-tokenizer). */
int tm__rust_regex_word(uint32_t c);

/* ---- Regexes (regex_onig.c) ---------------------------------------------------------- */

/* Rewrites an Oniguruma (Ruby syntax) regex for PCRE2 (compiled with UTF, UCP and
 * MULTILINE, as Ruby's ^ and $ are line anchors): \h/\H (hex digits), \w/\W (Oniguruma's
 * Unicode word), \uHHHH, and the m option (dot-all in Ruby). *out is malloc'd. */
tm_status tm__onig_translate(const char *re, size_t len, char **out, tm_error *err);

/* ---- Loading ------------------------------------------------------------------------- */

/* A required single-character string field (Rust `char`): *out its code point. */
tm_status tm__tj_char(const tm_json *o, const char *key, uint32_t *out, const char *path,
                      tm_error *err);
/* A required boolean / string field (absent or null is an error, as serde's derive); the
 * string must be valid UTF-8. */
tm_status tm__tj_req_bool(const tm_json *o, const char *key, int *out, const char *path,
                          tm_error *err);
tm_status tm__tj_req_string(const tm_json *o, const char *key, const char **out, size_t *len,
                            const char *path, tm_error *err);
/* calloc for a component struct, failing with TM_ERR_NO_MEMORY. */
void *tm__comp_alloc(size_t size, tm_error *err);

/* ---- Splitting ----------------------------------------------------------------------- */

/* Splits every untokenized split on the single characters for which pred(c) holds (Rust's
 * split with a Fn(char) pattern), with behavior b (components.c). */
tm_status tm__pstr_split_chars(tm_pstr *ps, int (*pred)(uint32_t c, void *ctx), void *ctx,
                               tm_split_behavior b, tm_error *err);
/* Splits every untokenized split on the matches of pattern p with behavior b, the match
 * flags inverted when invert (the Split pre-tokenizer; components.c). */
tm_status tm__pstr_split_pattern_inv(tm_pstr *ps, const tm_pattern *p, tm_split_behavior b,
                                     int invert, tm_error *err);

/* ---- Strings (decoders) -------------------------------------------------------------- */

/* Rust's str::replace: every non-overlapping occurrence of from (left to right) becomes to;
 * an empty `from` inserts `to` before every character and at the end. *out is malloc'd and
 * NUL-terminated. */
tm_status tm__str_replace_all(const char *s, size_t len, const char *from, size_t from_len,
                              const char *to, size_t to_len, char **out, size_t *out_len,
                              tm_error *err);
/* Replaces tokens->s[i] with the malloc'd s (the old string is freed). */
void tm__strs_set(tm_strs *tokens, size_t i, char *s, size_t len);
/* The WordPiece decoder's clean-up (" ." -> ".", " n't" -> "n't", ...), also CTC's. */
tm_status tm__wordpiece_cleanup(const char *s, size_t len, char **out, size_t *out_len,
                                tm_error *err);

/* ---- Metaspace (pre-tokenizer and decoder share the configuration) ----------------- */

typedef enum tm_prepend_scheme { TM_PREPEND_ALWAYS, TM_PREPEND_NEVER, TM_PREPEND_FIRST }
    tm_prepend_scheme;

typedef struct tm_metaspace_cfg {
    uint32_t replacement;
    char rep[4];
    size_t rep_len;
    tm_prepend_scheme scheme;
    int split;
} tm_metaspace_cfg;

/* Reads replacement, prepend_scheme (default always), split (default true) and the legacy
 * add_prefix_space (false means never; false with another scheme is an error, as Rust). */
tm_status tm__metaspace_cfg_load(const tm_json *cfg, const char *path, tm_metaspace_cfg *out,
                                 tm_error *err);

#endif
