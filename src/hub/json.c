/* Recursive-descent JSON parser (RFC 8259) for the Hub's API answers. Strict: no comments,
 * no trailing commas; nesting is bounded so a hostile answer cannot exhaust the stack.
 * Not for documents larger than memory: the tree is built whole. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "json.h"

enum { MAX_DEPTH = 64 };

typedef struct parser {
    const char *p;
    const char *end;
    int flags;
} parser;

static int parse_value(parser *ps, tm_json *out, int depth);

static void skip_space(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int literal(parser *ps, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n)) return 0;
    ps->p += n;
    return 1;
}

static int hex4(const char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

static size_t put_utf8(char *dst, unsigned cp) {
    if (cp < 0x80) {
        dst[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        dst[0] = (char)(0xc0 | cp >> 6);
        dst[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        dst[0] = (char)(0xe0 | cp >> 12);
        dst[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        dst[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    dst[0] = (char)(0xf0 | cp >> 18);
    dst[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    dst[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    dst[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* One \u escape (a surrogate pair counts as one); p points after the 'u'. */
static int unicode_escape(parser *ps, unsigned *cp) {
    if (ps->end - ps->p < 4 || !hex4(ps->p, cp)) return 0;
    ps->p += 4;
    if (*cp >= 0xdc00 && *cp <= 0xdfff) return 0;
    if (*cp < 0xd800 || *cp > 0xdbff) return *cp != 0 || (ps->flags & TM_JSON_ALLOW_NUL);
    unsigned low;
    if (ps->end - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u' || !hex4(ps->p + 2, &low) ||
        low < 0xdc00 || low > 0xdfff)
        return 0;
    ps->p += 6;
    *cp = 0x10000 + ((*cp - 0xd800) << 10) + (low - 0xdc00);
    return 1;
}

static int escape(parser *ps, char *dst, size_t *len) {
    if (ps->p >= ps->end) return 0;
    char c = *ps->p++;
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    const char *at = strchr(from, c);
    if (c && at) {
        dst[(*len)++] = to[at - from];
        return 1;
    }
    unsigned cp;
    if (c != 'u' || !unicode_escape(ps, &cp)) return 0;
    *len += put_utf8(dst + *len, cp);
    return 1;
}

/* A string token into a new buffer (its length in *out_len when not NULL); the decoded
 * text is never longer than the source. */
static char *parse_string(parser *ps, size_t *out_len) {
    if (ps->p >= ps->end || *ps->p != '"') return NULL;
    ps->p++;
    const char *q = ps->p;
    int plain = 1;                    /* no escapes or control characters: one memcpy */
    while (q < ps->end && *q != '"') {
        if (*q == '\\' || (unsigned char)*q < 0x20) {
            plain = 0;
            q += *q == '\\' && q + 1 < ps->end ? 2 : 1;
        } else {
            q++;
        }
    }
    if (q >= ps->end) return NULL;
    char *s = malloc((size_t)(q - ps->p) + 1);
    if (s && plain) {
        size_t n = (size_t)(q - ps->p);
        memcpy(s, ps->p, n);
        s[n] = '\0';
        ps->p = q + 1;
        if (out_len) *out_len = n;
        return s;
    }
    size_t len = 0;
    int ok = s != NULL;
    while (ok && ps->p < ps->end && *ps->p != '"') {
        unsigned char c = (unsigned char)*ps->p;
        if (c == '\\') {
            ps->p++;
            ok = escape(ps, s, &len);
            continue;
        }
        ok = c >= 0x20;               /* control characters must be escaped */
        s[len++] = (char)c;
        ps->p++;
    }
    if (!ok || ps->p >= ps->end || *ps->p != '"') {
        free(s);
        return NULL;
    }
    ps->p++;
    s[len] = '\0';
    if (out_len) *out_len = len;
    return s;
}

static int parse_number(parser *ps, tm_json *out) {
    const char *start = ps->p;
    if (ps->p < ps->end && *ps->p == '-') ps->p++;
    while (ps->p < ps->end && strchr("0123456789+-.eE", *ps->p)) ps->p++;
    size_t n = (size_t)(ps->p - start);
    if (n == 0 || n > 63) return 0;
    char buf[64];
    memcpy(buf, start, n);
    buf[n] = '\0';
    char *stop;
    out->type = TM_JSON_NUMBER;
    out->number = strtod(buf, &stop);
    return *stop == '\0';
}

/* Room grows geometrically: a 150,000-entry vocabulary object is one of many. */
static int push_item(tm_json *v, char *key) {
    if (v->n == v->cap) {
        if (v->cap > (1 << 29)) return 0;
        int cap = v->cap ? v->cap * 2 : 4;
        tm_json *items = realloc(v->items, (size_t)cap * sizeof *items);
        if (!items) return 0;
        v->items = items;
        if (v->type == TM_JSON_OBJECT) {
            char **keys = realloc(v->keys, (size_t)cap * sizeof *keys);
            if (!keys) return 0;
            v->keys = keys;
        }
        v->cap = cap;
    }
    memset(&v->items[v->n], 0, sizeof v->items[v->n]);
    if (v->type == TM_JSON_OBJECT) v->keys[v->n] = key;
    v->n++;
    return 1;
}

static int parse_container(parser *ps, tm_json *out, int depth) {
    int object = *ps->p == '{';
    char close = object ? '}' : ']';
    out->type = object ? TM_JSON_OBJECT : TM_JSON_ARRAY;
    ps->p++;
    skip_space(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
        return 1;
    }
    for (;;) {
        char *key = NULL;
        skip_space(ps);
        if (object) {
            size_t klen;
            if (!(key = parse_string(ps, &klen))) return 0;
            if (strlen(key) != klen) {    /* keys stay NUL-free: lookups compare C strings */
                free(key);
                return 0;
            }
            skip_space(ps);
            if (ps->p >= ps->end || *ps->p++ != ':') {
                free(key);
                return 0;
            }
        }
        if (!push_item(out, key)) {
            free(key);
            return 0;
        }
        if (!parse_value(ps, &out->items[out->n - 1], depth + 1)) return 0;
        skip_space(ps);
        if (ps->p >= ps->end) return 0;
        char c = *ps->p++;
        if (c == close) return 1;
        if (c != ',') return 0;
    }
}

static int parse_value(parser *ps, tm_json *out, int depth) {
    if (depth > MAX_DEPTH) return 0;
    skip_space(ps);
    if (ps->p >= ps->end) return 0;
    char c = *ps->p;
    if (c == '{' || c == '[') return parse_container(ps, out, depth);
    if (c == '"') {
        out->type = TM_JSON_STRING;
        return (out->string = parse_string(ps, &out->len)) != NULL;
    }
    if (literal(ps, "true") || literal(ps, "false")) {
        out->type = TM_JSON_BOOL;
        out->number = c == 't';
        return 1;
    }
    if (literal(ps, "null")) {
        out->type = TM_JSON_NULL;
        return 1;
    }
    return parse_number(ps, out);
}

static void free_contents(tm_json *v) {
    for (int i = 0; i < v->n; i++) {
        free_contents(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
    free(v->string);
}

tm_json *tm_json_parse(const char *text, size_t len) {
    return tm_json_parse_ex(text, len, 0);
}

tm_json *tm_json_parse_ex(const char *text, size_t len, int flags) {
    tm_json *v = calloc(1, sizeof *v);
    if (!v || !text) {
        free(v);
        return NULL;
    }
    parser ps = {text, text + len, flags};
    int ok = parse_value(&ps, v, 0);
    skip_space(&ps);
    if (ok && ps.p == ps.end) return v;
    tm_json_free(v);
    return NULL;
}

void tm_json_free(tm_json *v) {
    if (!v) return;
    free_contents(v);
    free(v);
}

const tm_json *tm_json_get(const tm_json *v, const char *key) {
    if (!v || v->type != TM_JSON_OBJECT) return NULL;
    for (int i = 0; i < v->n; i++)
        if (!strcmp(v->keys[i], key)) return &v->items[i];
    return NULL;
}

const char *tm_json_get_string(const tm_json *v, const char *key) {
    const tm_json *s = tm_json_get(v, key);
    return s && s->type == TM_JSON_STRING ? s->string : NULL;
}

tm_json *tm_json_read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *text = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0)
        text = malloc((size_t)size + 1);
    size_t got = text ? fread(text, 1, (size_t)size, f) : 0;
    fclose(f);
    tm_json *doc = text && got == (size_t)size ? tm_json_parse(text, got) : NULL;
    free(text);
    return doc;
}
