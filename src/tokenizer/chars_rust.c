/* Character classes as the Rust crates behind tokenizers 0.23.2 answer them (std's
 * to_lowercase, unicode_categories, unicode-normalization-alignments, the regex crate's
 * \w), from utf8proc's tables plus the differences found by sweeping every code point
 * against the Rust binding (tests/data/tokenizers/components/sweeps.txt). Not the classes
 * internal.h already has (chars.c). */
#include <utf8proc.h>
#include "components.h"
#include "chars_rust_tables.h"

static utf8proc_category_t cat(uint32_t c) {
    return utf8proc_category((utf8proc_int32_t)c);
}

/* Whether c is in one of the sorted [lo, hi] ranges: where Rust's answer is the opposite
 * of what utf8proc's categories give. */
static int in_ranges(const uint32_t (*r)[2], size_t n, uint32_t c) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < r[mid][0]) hi = mid;
        else if (c > r[mid][1]) lo = mid + 1;
        else return 1;
    }
    return 0;
}

#define FLIP(table, c) in_ranges(table, sizeof table / sizeof table[0], c)

uint32_t tm__rust_lower(uint32_t c) {
    if (c < 0x80) return c >= 'A' && c <= 'Z' ? c + 32 : c;
    size_t lo = 0, hi = sizeof lower_exc / sizeof lower_exc[0];
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c == lower_exc[mid][0]) return lower_exc[mid][1];
        if (c < lower_exc[mid][0]) hi = mid;
        else lo = mid + 1;
    }
    return (uint32_t)utf8proc_tolower((utf8proc_int32_t)c);
}

int tm__rust_is_mark_nonspacing(uint32_t c) {
    if (c < 0x300) return 0;
    return (cat(c) == UTF8PROC_CATEGORY_MN) != FLIP(mn_flip, c);
}

int tm__rust_is_other(uint32_t c) {
    utf8proc_category_t k = cat(c);
    /* unicode_categories' is_other leaves unassigned code points (Cn) out */
    int other = k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF ||
                k == UTF8PROC_CATEGORY_CO || k == UTF8PROC_CATEGORY_CS;
    return other != FLIP(other_flip, c);
}

int tm__rust_is_combining_mark(uint32_t c) {
    if (c < 0x300) return 0;
    utf8proc_category_t k = cat(c);
    int mark = k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME;
    return mark != FLIP(cm_flip, c);
}

int tm__rust_is_punctuation(uint32_t c) {
    if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) ||
        (c >= 123 && c <= 126))
        return 1;
    if (c < 0x80) return 0;
    utf8proc_category_t k = cat(c);
    return (k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO) != FLIP(punct_flip, c);
}

int tm__rust_is_numeric(uint32_t c) {
    if (c < 0x80) return c >= '0' && c <= '9';
    utf8proc_category_t k = cat(c);
    int num = k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
    return num != FLIP(numeric_flip, c);
}

int tm__rust_regex_word(uint32_t c) {
    if (c < 0x80)
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (c == 0x200c || c == 0x200d) return 1;           /* Join_Control */
    /* Other_Alphabetic symbols: the circled and squared Latin letters */
    if ((c >= 0x24b6 && c <= 0x24e9) || (c >= 0x1f130 && c <= 0x1f149) ||
        (c >= 0x1f150 && c <= 0x1f169) || (c >= 0x1f170 && c <= 0x1f189))
        return 1;
    int word;
    switch (cat(c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
        word = 1;
        break;
    default:
        word = 0;
    }
    return word != FLIP(word_flip, c);
}

int tm__rust_nf_unknown(uint32_t c) {
    return c >= 0x7fd && FLIP(nf_unknown, c);
}
