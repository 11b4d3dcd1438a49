/* Patterns of tokenizer.json ({"String": ...} or {"Regex": ...}) and their match lists, as
 * Rust's Pattern::find_matches; PCRE2 compilation. Not splitting (nstr.c). */
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "components.h"

static tm_status no_memory(tm_error *err) {
    return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
}

tm_status tm__regex_compile(const char *pattern, size_t len, const char *path, pcre2_code **out,
                            tm_error *err) {
    int code;
    PCRE2_SIZE at;
    /* Rust compiles with Oniguruma's Ruby syntax: rewrite what PCRE2 reads differently, and
     * ^ $ are line anchors there (MULTILINE). */
    char *pcre;
    tm_status st = tm__onig_translate(pattern, len, &pcre, err);
    if (st) return st;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pcre, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &code, &at, NULL);
    free(pcre);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return tm__tok_fail(err, path, NULL, "bad regex \"%.*s\" (PCRE2, near offset %zu): %s",
                            (int)len, pattern, (size_t)at, (const char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);   /* without JIT, the interpreter runs it */
    *out = re;
    return TM_OK;
}

tm_status tm__pattern_load(const tm_json *cfg, const char *path, tm_pattern *out, tm_error *err) {
    memset(out, 0, sizeof *out);
    const tm_json *v;
    if (cfg && cfg->type == TM_JSON_OBJECT && (v = tm_json_get(cfg, "String")) &&
        v->type == TM_JSON_STRING) {
        out->literal = malloc(v->len + 1);
        if (!out->literal) return no_memory(err);
        memcpy(out->literal, v->string, v->len + 1);
        out->literal_len = v->len;
        /* Rust escapes the string into an Oniguruma regex: an empty one matches everywhere */
        if (!v->len) {
            char sub[256];
            tm__tok_path(sub, sizeof sub, path, "String", -1);
            return tm__regex_compile("", 0, sub, &out->re, err);
        }
        return TM_OK;
    }
    if (cfg && cfg->type == TM_JSON_OBJECT && (v = tm_json_get(cfg, "Regex")) &&
        v->type == TM_JSON_STRING) {
        char sub[256];
        tm__tok_path(sub, sizeof sub, path, "Regex", -1);
        return tm__regex_compile(v->string, v->len, sub, &out->re, err);
    }
    return tm__tok_fail(err, path, NULL, "expected {\"String\": ...} or {\"Regex\": ...}");
}

void tm__pattern_free(tm_pattern *p) {
    if (!p) return;
    free(p->literal);
    if (p->re) pcre2_code_free(p->re);
    memset(p, 0, sizeof *p);
}

static tm_status literal_find(const tm_pattern *p, const char *s, size_t len, tm_matches *out,
                              tm_error *err) {
    size_t prev = 0, i = 0, n = p->literal_len;
    tm_status st = TM_OK;
    while (!st && n && i + n <= len) {
        const char *hit = memmem(s + i, len - i, p->literal, n);
        if (!hit) break;
        size_t at = (size_t)(hit - s);
        if (at != prev) st = tm__matches_push(out, prev, at, 0, err);
        if (!st) st = tm__matches_push(out, at, at + n, 1, err);
        prev = i = at + n;
    }
    if (!st && prev != len) st = tm__matches_push(out, prev, len, 0, err);
    return st;
}

/* Oniguruma's find_iter as the onig crate writes it: after an empty match the search
 * resumes one character further, and an empty match found after a non-empty one is
 * dropped (once). */
static tm_status regex_find(const pcre2_code *re, const char *s, size_t len, tm_matches *out,
                            tm_error *err) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!md) return no_memory(err);
    size_t prev = 0, from = 0;
    int skip_next_empty = 0;
    tm_status st = TM_OK;
    while (!st && from <= len) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, len, from, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc < 0) {
            if (rc != PCRE2_ERROR_NOMATCH)
                st = tm__fail(err, TM_ERR_RUNTIME, "tokenizer: regex match failed (PCRE2 %d)", rc);
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        from = me;
        if (ms == me) {
            from += me < len ? tm__utf8_len((unsigned char)s[me]) : 1;
            if (skip_next_empty) {
                skip_next_empty = 0;
                continue;
            }
        } else {
            skip_next_empty = 1;
        }
        if (ms != prev) st = tm__matches_push(out, prev, ms, 0, err);
        if (!st) st = tm__matches_push(out, ms, me, 1, err);
        prev = me;
    }
    if (!st && prev != len) st = tm__matches_push(out, prev, len, 0, err);
    pcre2_match_data_free(md);
    return st;
}

tm_status tm__pattern_find(const tm_pattern *p, const char *s, size_t len, tm_matches *out,
                           tm_error *err) {
    out->n = 0;
    if (p->re) {
        if (!len) return tm__matches_push(out, 0, 0, 0, err);
        return regex_find(p->re, s, len, out, err);
    }
    /* Rust counts characters here, not bytes (its quirk, kept). */
    if (!p->literal_len) return tm__matches_push(out, 0, tm__utf8_count(s, len), 0, err);
    /* Rust's &str pattern goes through a regex too: an empty text gives one non-match. */
    if (!len) return tm__matches_push(out, 0, 0, 0, err);
    return literal_find(p, s, len, out, err);
}

tm_status tm__find_char_matches(const char *s, size_t len, int (*is_match)(uint32_t c, void *ctx),
                                void *ctx, tm_matches *out, tm_error *err) {
    out->n = 0;
    if (!len) return tm__matches_push(out, 0, 0, 0, err);
    size_t prev = 0;
    tm_status st = TM_OK;
    for (size_t i = 0; i < len && !st;) {
        uint32_t c;
        size_t n = tm__utf8_decode(s, i, &c);
        if (is_match(c, ctx)) {
            if (prev != i) st = tm__matches_push(out, prev, i, 0, err);
            if (!st) st = tm__matches_push(out, i, i + n, 1, err);
            prev = i + n;
        }
        i += n;
    }
    if (!st && prev != len) st = tm__matches_push(out, prev, len, 0, err);
    return st;
}
