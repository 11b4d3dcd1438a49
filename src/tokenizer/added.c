/* The added vocabulary (tokenizer.json's added_tokens): ids as Rust's add_tokens assigns
 * them, and the leftmost-longest matching of added tokens in a text (before normalization
 * for normalized=false tokens, after it for normalized=true ones) with single_word, lstrip
 * and rstrip. Not the model's vocabulary. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>
#include "added.h"

static tm_status no_memory(tm_error *err) {
    return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
}

void tm__added_free(tm_added *a) {
    for (size_t i = 0; i < a->n; i++) {
        free(a->tok[i].content);
        free(a->tok[i].pattern);
    }
    free(a->tok);
    for (int k = 0; k < 2; k++) {
        tm__vocab_free(&a->set[k].map);
        free(a->set[k].lens);
    }
    tm__vocab_free(&a->by_content);
    tm__vocab_free(&a->specials);
    free(a->by_id);
    memset(a, 0, sizeof *a);
}

static int cmp_desc(const void *x, const void *y) {
    size_t a = *(const size_t *)x, b = *(const size_t *)y;
    return a < b ? 1 : a > b ? -1 : 0;
}

static tm_status build_set(tm_added_set *s, tm_error *err) {
    if (s->map.n == 0) return TM_OK;
    s->lens = malloc(s->map.n * sizeof *s->lens);
    if (!s->lens) return no_memory(err);
    s->n_lens = 0;
    for (uint32_t e = 0; e < s->map.n; e++) {
        size_t len = s->map.len[e];
        s->first[(unsigned char)s->map.arena[s->map.off[e]]] = 1;
        int seen = 0;
        for (size_t k = 0; k < s->n_lens; k++) seen |= s->lens[k] == len;
        if (!seen) s->lens[s->n_lens++] = len;
    }
    qsort(s->lens, s->n_lens, sizeof *s->lens, cmp_desc);
    return TM_OK;
}

tm_status tm__added_add(tm_added *a, const tm_added_token *t, tm_error *err) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        tm_added_token *v = realloc(a->tok, cap * sizeof *v);
        if (!v) return no_memory(err);
        a->tok = v;
        a->cap = cap;
    }
    a->tok[a->n++] = *t;
    return TM_OK;
}

tm_status tm__added_finish(tm_added *a, tm_error *err) {
    int32_t max = -1;
    for (size_t i = 0; i < a->n; i++) {
        tm_added_token *t = &a->tok[i];
        if (t->id > max) max = t->id;
        const char *pat = t->pattern ? t->pattern : t->content;
        size_t plen = t->pattern ? t->pattern_len : t->len;
        tm_status s = tm__vocab_add(&a->set[t->normalized ? 1 : 0].map, pat, plen, (int32_t)i, err);
        if (!s) s = tm__vocab_add(&a->by_content, t->content, t->len, t->id, err);
        if (!s && t->special) s = tm__vocab_add(&a->specials, t->content, t->len, 1, err);
        if (s) return s;
    }
    /* A content given twice lives once in each map (the later entry wins, as a map insert);
     * the same pattern in both tries stays in both. */
    for (int k = 0; k < 2; k++) {
        tm_status s = build_set(&a->set[k], err);
        if (s) return s;
    }
    a->n_by_id = (size_t)(max + 1);
    a->by_id = malloc((a->n_by_id ? a->n_by_id : 1) * sizeof *a->by_id);
    if (!a->by_id) return no_memory(err);
    for (size_t i = 0; i < a->n_by_id; i++) a->by_id[i] = -1;
    for (size_t i = 0; i < a->n; i++) a->by_id[a->tok[i].id] = (int32_t)i;
    return TM_OK;
}

const tm_added_token *tm__added_by_id(const tm_added *a, int32_t id) {
    if (id < 0 || (size_t)id >= a->n_by_id || a->by_id[id] < 0) return NULL;
    return &a->tok[a->by_id[id]];
}

int tm__added_is_special(const tm_added *a, const char *s, size_t len) {
    return tm__vocab_find(&a->specials, s, len) >= 0;
}

/* The `regex` crate's Unicode \w: alphabetic, marks, decimal digits, connector
 * punctuation, join controls. */
static int is_word_char(uint32_t c) {
    if (c == 0x200c || c == 0x200d) return 1;
    switch (utf8proc_category((utf8proc_int32_t)c)) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC:
        return 1;
    default:
        return 0;
    }
}

static uint32_t char_before(const char *s, size_t at) {
    size_t k = at - 1;
    while (k > 0 && ((unsigned char)s[k] & 0xc0) == 0x80) k--;
    uint32_t c;
    tm__utf8_decode(s, k, &c);
    return c;
}

/* The longest added token of set s starting at s[i], as an index into a->tok, or -1. */
static int32_t longest_at(const tm_added_set *set, const char *s, size_t len, size_t i,
                          size_t *mlen) {
    if (!set->first[(unsigned char)s[i]]) return -1;
    for (size_t k = 0; k < set->n_lens; k++) {
        size_t l = set->lens[k];
        if (l > len - i) continue;
        int32_t idx = tm__vocab_find(&set->map, s + i, l);
        if (idx >= 0) {
            *mlen = l;
            return idx;
        }
    }
    return -1;
}

tm_status tm__added_find(const tm_added *a, int normalized, const char *s, size_t len,
                         tm_added_match **out, size_t *n_out, tm_error *err) {
    const tm_added_set *set = &a->set[normalized ? 1 : 0];
    tm_added_match *m = NULL;
    size_t n = 0, cap = 0, start_offset = 0;
    *out = NULL;
    *n_out = 0;
    if (!set->map.n) return TM_OK;
    for (size_t i = 0; i < len;) {
        size_t mlen;
        int32_t idx = longest_at(set, s, len, i, &mlen);
        if (idx < 0) {
            i++;
            continue;
        }
        const tm_added_token *t = &a->tok[idx];
        size_t start = i, stop = i + mlen;
        /* leftmost-longest: the next search starts after this match, taken or not */
        i = stop;
        if (t->single_word) {
            int start_space = start == 0 || !is_word_char(char_before(s, start));
            uint32_t c = 0;
            if (stop < len) tm__utf8_decode(s, stop, &c);
            int stop_space = stop == len || !is_word_char(c);
            if (!start_space || !stop_space) continue;
        }
        if (t->lstrip) {
            size_t ns = start;
            while (ns > 0 && tm__is_whitespace(char_before(s, ns))) {
                size_t k = ns - 1;
                while (k > 0 && ((unsigned char)s[k] & 0xc0) == 0x80) k--;
                ns = k;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (t->rstrip) {
            while (stop < len) {
                uint32_t c;
                size_t cl = tm__utf8_decode(s, stop, &c);
                if (!tm__is_whitespace(c)) break;
                stop += cl;
            }
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            tm_added_match *v = realloc(m, cap * sizeof *v);
            if (!v) {
                free(m);
                return no_memory(err);
            }
            m = v;
        }
        m[n++] = (tm_added_match){start, stop, t->id, (int32_t)idx};
        start_offset = stop;
        i = stop;
    }
    *out = m;
    *n_out = n;
    return TM_OK;
}
