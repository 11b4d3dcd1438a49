/* Helpers shared by the tokenizer components (components.h): required JSON fields, Rust's
 * str::replace, the WordPiece clean-up. Not the aligned transforms (each lives with the
 * component it belongs to) nor the character classes (chars_rust.c). */
#include <string.h>
#include "components.h"

static tm_status no_memory(tm_error *err) {
    return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
}

void *tm__comp_alloc(size_t size, tm_error *err) {
    void *p = calloc(1, size);
    if (!p) no_memory(err);
    return p;
}

tm_status tm__tj_req_bool(const tm_json *o, const char *key, int *out, const char *path,
                          tm_error *err) {
    const tm_json *v = tm_json_get(o, key);
    if (!v || v->type != TM_JSON_BOOL)
        return tm__tok_fail(err, path, key, v ? "expected true or false" : "missing field");
    *out = v->number != 0;
    return TM_OK;
}

tm_status tm__tj_req_string(const tm_json *o, const char *key, const char **out, size_t *len,
                            const char *path, tm_error *err) {
    const tm_json *v = tm_json_get(o, key);
    if (!v || v->type != TM_JSON_STRING)
        return tm__tok_fail(err, path, key, v ? "expected a string" : "missing field");
    size_t bad;
    if (!tm__utf8_valid(v->string, v->len, &bad))
        return tm__tok_fail(err, path, key, "not valid UTF-8 (byte %zu)", bad);
    *out = v->string;
    if (len) *len = v->len;
    return TM_OK;
}

tm_status tm__tj_char(const tm_json *o, const char *key, uint32_t *out, const char *path,
                      tm_error *err) {
    const char *s;
    size_t len;
    tm_status st = tm__tj_req_string(o, key, &s, &len, path, err);
    if (st) return st;
    if (!len || !tm__utf8_valid(s, len, NULL) || tm__utf8_decode(s, 0, out) != len)
        return tm__tok_fail(err, path, key, "expected a single character, got \"%s\"", s);
    return TM_OK;
}

/* ---- Strings ------------------------------------------------------------------------ */

typedef struct buf {
    char *p;
    size_t n, cap;
    int failed;
} buf;

static void put(buf *b, const char *s, size_t n) {
    if (b->failed || !n) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 32;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static tm_status finish(buf *b, char **out, size_t *out_len, tm_error *err) {
    if (!b->failed && !b->p) put(b, "", 0), b->p = malloc(1), b->failed = !b->p;
    if (b->failed) {
        free(b->p);
        return no_memory(err);
    }
    b->p[b->n] = '\0';
    *out = b->p;
    *out_len = b->n;
    return TM_OK;
}

tm_status tm__str_replace_all(const char *s, size_t len, const char *from, size_t from_len,
                              const char *to, size_t to_len, char **out, size_t *out_len,
                              tm_error *err) {
    buf b = {0};
    if (!from_len) {
        for (size_t i = 0; i < len;) {
            size_t n = tm__utf8_len((unsigned char)s[i]);
            put(&b, to, to_len);
            put(&b, s + i, n);
            i += n;
        }
        put(&b, to, to_len);
        return finish(&b, out, out_len, err);
    }
    size_t i = 0;
    while (i < len) {
        const char *hit = from_len <= len - i ? memmem(s + i, len - i, from, from_len) : NULL;
        if (!hit) break;
        size_t at = (size_t)(hit - s);
        put(&b, s + i, at - i);
        put(&b, to, to_len);
        i = at + from_len;
    }
    put(&b, s + i, len - i);
    return finish(&b, out, out_len, err);
}

void tm__strs_set(tm_strs *tokens, size_t i, char *s, size_t len) {
    free(tokens->s[i]);
    tokens->s[i] = s;
    tokens->len[i] = len;
}

tm_status tm__wordpiece_cleanup(const char *s, size_t len, char **out, size_t *out_len,
                                tm_error *err) {
    /* Applied one after the other over the whole string, in this order (Rust's cleanup). */
    static const char *const rules[][2] = {
        {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
        {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"},
    };
    char *cur = malloc(len + 1);
    if (!cur) return no_memory(err);
    memcpy(cur, s, len);
    cur[len] = '\0';
    size_t n = len;
    for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++) {
        if (!memmem(cur, n, rules[r][0], strlen(rules[r][0]))) continue;
        char *next;
        size_t next_n;
        tm_status st = tm__str_replace_all(cur, n, rules[r][0], strlen(rules[r][0]), rules[r][1],
                                           strlen(rules[r][1]), &next, &next_n, err);
        free(cur);
        if (st) return st;
        cur = next;
        n = next_n;
    }
    *out = cur;
    *out_len = n;
    return TM_OK;
}

/* ---- Splitting ---------------------------------------------------------------------- */

typedef struct chars_ctx {
    int (*pred)(uint32_t c, void *ctx);
    void *ctx;
    tm_split_behavior b;
} chars_ctx;

static tm_status split_chars(void *ctx, size_t i, tm_nstr *ns, tm_nstrs *out, tm_error *err) {
    const chars_ctx *c = ctx;
    tm_matches m = {0};
    tm_status s = tm__find_char_matches(ns->s, ns->len, c->pred, c->ctx, &m, err);
    if (!s) s = tm__nstr_split(ns, &m, c->b, out, err);
    tm__matches_free(&m);
    return s;
}

tm_status tm__pstr_split_chars(tm_pstr *ps, int (*pred)(uint32_t c, void *ctx), void *ctx,
                               tm_split_behavior b, tm_error *err) {
    chars_ctx c = {pred, ctx, b};
    return tm__pstr_split(ps, split_chars, &c, err);
}

typedef struct pattern_ctx {
    const tm_pattern *p;
    tm_split_behavior b;
    int invert;
} pattern_ctx;

static tm_status split_pattern(void *ctx, size_t i, tm_nstr *ns, tm_nstrs *out, tm_error *err) {
    const pattern_ctx *c = ctx;
    tm_matches m = {0};
    tm_status s = tm__pattern_find(c->p, ns->s, ns->len, &m, err);
    if (!s && c->invert)
        for (size_t k = 0; k < m.n; k++) m.v[k].is_match = !m.v[k].is_match;
    if (!s) s = tm__nstr_split(ns, &m, c->b, out, err);
    tm__matches_free(&m);
    return s;
}

tm_status tm__pstr_split_pattern_inv(tm_pstr *ps, const tm_pattern *p, tm_split_behavior b,
                                     int invert, tm_error *err) {
    pattern_ctx c = {p, b, invert};
    return tm__pstr_split(ps, split_pattern, &c, err);
}
