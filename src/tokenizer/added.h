/* The added vocabulary's private interface (added.c, used by tokenizer.c). */
#ifndef TM_TOKENIZER_ADDED_H
#define TM_TOKENIZER_ADDED_H

#include "tok.h"

typedef struct tm_added_token {
    char *content;
    size_t len;
    char *pattern;              /* the normalized content when it differs (else NULL) */
    size_t pattern_len;
    int32_t id;
    int special, single_word, lstrip, rstrip, normalized;
} tm_added_token;

/* One matching set: patterns -> token index, first bytes, distinct lengths (longest first). */
typedef struct tm_added_set {
    tm_vocab map;
    unsigned char first[256];
    size_t *lens, n_lens;
} tm_added_set;

typedef struct tm_added {
    tm_added_token *tok;
    size_t n, cap;
    tm_added_set set[2];        /* [0] normalized=false, [1] normalized=true */
    tm_vocab by_content;        /* content -> id */
    tm_vocab specials;          /* contents of special tokens */
    int32_t *by_id;             /* id -> token index */
    size_t n_by_id;
} tm_added;

typedef struct tm_added_match {
    size_t start, end;          /* bytes, lstrip/rstrip included */
    int32_t id, index;
} tm_added_match;

tm_status tm__added_add(tm_added *a, const tm_added_token *t, tm_error *err);   /* takes t's strings */
tm_status tm__added_finish(tm_added *a, tm_error *err);
void tm__added_free(tm_added *a);
const tm_added_token *tm__added_by_id(const tm_added *a, int32_t id);
int tm__added_is_special(const tm_added *a, const char *s, size_t len);
/* Rust's find_matches over s with the normalized or non-normalized set. */
tm_status tm__added_find(const tm_added *a, int normalized, const char *s, size_t len,
                         tm_added_match **out, size_t *n_out, tm_error *err);

#endif
