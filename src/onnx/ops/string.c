/* The string operators: StringNormalizer, StringSplit, StringConcat, RegexFullMatch.
 * String tensors are always known on the host (plans keep them as constants), so each
 * builds its result there as a constant. Not string comparison (Equal) nor LabelEncoder.
 * RegexFullMatch translates RE2 syntax to POSIX extended regexps (see re2_to_posix). */
#include <locale.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wctype.h>
#include "../lower.h"

static const char *str_at(const tm_tensor *t, int64_t i) {
    const char *s = ((char *const *)t->data)[i];
    return s ? s : "";
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}

/* Input i as a host string tensor, or NULL (node failed, or a graph break). */
static const tm_tensor *string_input(tm_lower *L, int i) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, i);
    if (x == TM_NONE) {
        if (tm_ctx_ok(c)) tm_lfail(L, TM_ERR_PARSE, "input %d is missing", i);
        return NULL;
    }
    if (tm_vdtype(c, x) != TM_STRING) {
        tm_lfail(L, TM_ERR_DTYPE, "input %d ('%s') must be string, got %s", i,
                 tm_lnode(L)->inputs[i], tm_dtype_name(tm_vdtype(c, x)));
        return NULL;
    }
    return tm_host(c, x);
}

/* Publishes a host-built tensor as output i (taking it). */
static tm_status out_tensor(tm_lower *L, int i, tm_tensor *t) {
    tm_ctx *c = tm_lctx(L);
    if (!t) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    tm_lout(L, i, tm_val_tensor(c, t, 0));
    return c->status;
}

/* ---- StringNormalizer -------------------------------------------------------------- */

/* Decodes one UTF-8 code point at s (advancing *len bytes); invalid bytes decode as
 * themselves with *len 1 and are copied through unchanged. */
static uint32_t utf8_decode(const unsigned char *s, int *len) {
    int n = s[0] < 0x80 ? 1 : (s[0] >> 5) == 6 ? 2 : (s[0] >> 4) == 14 ? 3 : (s[0] >> 3) == 30 ? 4 : 0;
    if (n == 0) {
        *len = 1;
        return 0xFFFFFFFFu;
    }
    uint32_t cp = n == 1 ? s[0] : s[0] & (0x7F >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) {
            *len = 1;
            return 0xFFFFFFFFu;
        }
        cp = cp << 6 | (s[i] & 0x3F);
    }
    *len = n;
    return cp;
}

static int utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Case mapping of UTF-8 text through a UTF-8 locale object (never the process locale);
 * ASCII only when no such locale exists. dir: -1 lower, +1 upper. */
static char *change_case(const char *s, int dir, locale_t loc) {
    size_t n = strlen(s);
    char *out = malloc(n * 2 + 4 + 1);  /* a case pair may differ in encoded length */
    if (!out) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        int len;
        uint32_t cp = utf8_decode((const unsigned char *)s + i, &len);
        if (cp == 0xFFFFFFFFu) {
            out[k++] = s[i++];
            continue;
        }
        uint32_t m = cp;
        if (loc) m = (uint32_t)(dir < 0 ? towlower_l((wint_t)cp, loc) : towupper_l((wint_t)cp, loc));
        else if (cp < 0x80) m = (uint32_t)(dir < 0 ? (cp >= 'A' && cp <= 'Z' ? cp + 32 : cp)
                                                  : (cp >= 'a' && cp <= 'z' ? cp - 32 : cp));
        if (k + 4 > n * 2 + 4) break;
        k += (size_t)utf8_encode(m, out + k);
        i += (size_t)len;
    }
    out[k] = 0;
    return out;
}

static locale_t utf8_locale(const char *name) {
    char buf[128];
    locale_t loc = (locale_t)0;
    if (name && name[0]) {
        snprintf(buf, sizeof buf, "%s.UTF-8", name);
        loc = newlocale(LC_CTYPE_MASK, buf, (locale_t)0);
        if (!loc && strstr(name, "UTF-8")) loc = newlocale(LC_CTYPE_MASK, name, (locale_t)0);
    }
    if (!loc) loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
    return loc;
}

/* Whether x is one of the stopwords (compared after lowercasing when insensitive). */
static int is_stopword(const char *x, char **stops, int n_stops, int sensitive, locale_t loc) {
    char *low = sensitive ? NULL : change_case(x, -1, loc);
    const char *key = sensitive ? x : low;
    int hit = 0;
    for (int i = 0; key && i < n_stops && !hit; i++) hit = !strcmp(key, stops[i]);
    free(low);
    return hit;
}

static tm_tensor *normalize(const tm_tensor *x, char **stops, int n_stops, int sensitive,
                            int dir, locale_t loc) {
    int64_t n = tm_tensor_numel_(x), kept = 0;
    char **tmp = calloc((size_t)(n ? n : 1), sizeof *tmp);
    if (!tmp) return NULL;
    int ok = 1;
    for (int64_t i = 0; i < n && ok; i++) {
        const char *s = str_at(x, i);
        if (n_stops && is_stopword(s, stops, n_stops, sensitive, loc)) continue;
        tmp[kept] = dir ? change_case(s, dir, loc) : dup_n(s, strlen(s));
        ok = tmp[kept++] != NULL;
    }
    int64_t dims[2] = {1, kept ? kept : 1};
    tm_tensor *y = ok ? tm_tensor_alloc(TM_STRING, x->rank, x->rank == 1 ? dims + 1 : dims, NULL)
                      : NULL;
    if (y) memcpy(y->data, tmp, (size_t)kept * sizeof *tmp);
    else
        for (int64_t i = 0; i < kept; i++) free(tmp[i]);
    free(tmp);
    return y;
}

static tm_status lower_string_normalizer(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    const tm_tensor *x = string_input(L, 0);
    if (!x) return c->status;
    if (x->rank != 1 && !(x->rank == 2 && x->dims[0] == 1))
        return tm_lfail(L, TM_ERR_SHAPE, "input X must be [C] or [1, C], got rank %d", x->rank);
    const char *action = tm_attr_s(L, "case_change_action", "NONE");
    int dir = !strcmp(action, "LOWER") ? -1 : !strcmp(action, "UPPER") ? 1 : 0;
    if (!dir && strcmp(action, "NONE"))
        return tm_lfail(L, TM_ERR_UNSUPPORTED, "attribute 'case_change_action' is '%s', "
                        "expected LOWER, UPPER or NONE", action);
    int sensitive = tm_attr_i(L, "is_case_sensitive", 0) != 0;
    locale_t loc = utf8_locale(tm_attr_s(L, "locale", ""));
    const tm_bytes *sw;
    int n_stops = tm_attr_strings(L, "stopwords", &sw);
    if (n_stops < 0) n_stops = 0;
    char **stops = calloc((size_t)n_stops + 1, sizeof *stops);
    int ok = stops != NULL;
    for (int i = 0; ok && i < n_stops; i++) {
        char *raw = dup_n(sw[i].data ? sw[i].data : "", sw[i].len);
        stops[i] = raw && !sensitive ? change_case(raw, -1, loc) : raw;
        if (!sensitive) free(raw);
        ok = stops[i] != NULL;
    }
    tm_tensor *y = ok ? normalize(x, stops, n_stops, sensitive, dir, loc) : NULL;
    for (int i = 0; stops && i < n_stops; i++) free(stops[i]);
    free(stops);
    if (loc) freelocale(loc);
    return out_tensor(L, 0, y);
}
TM_REGISTER_OP("", "StringNormalizer", 10, 27, lower_string_normalizer);

/* ---- StringSplit ------------------------------------------------------------------- */

static int is_space(char ch) {
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\v' || ch == '\f' || ch == '\r';
}

/* Splits s as Python's str.split(delim or None, maxsplit) does; fills parts (start,
 * length pairs) when non-NULL. Returns the number of parts. */
static int64_t split_one(const char *s, const char *delim, int64_t maxsplit, int64_t *parts) {
    int64_t n = 0;
    size_t len = strlen(s), i = 0;
    if (delim && delim[0]) {
        size_t dl = strlen(delim), start = 0;
        for (i = 0; i + dl <= len && (maxsplit < 0 || n < maxsplit);) {
            if (memcmp(s + i, delim, dl)) {
                i++;
                continue;
            }
            if (parts) parts[2 * n] = (int64_t)start, parts[2 * n + 1] = (int64_t)(i - start);
            n++;
            i += dl;
            start = i;
        }
        if (parts) parts[2 * n] = (int64_t)start, parts[2 * n + 1] = (int64_t)(len - start);
        return n + 1;
    }
    while (i < len) {
        while (i < len && is_space(s[i])) i++;
        if (i == len) break;
        size_t start = i;
        if (maxsplit >= 0 && n == maxsplit) {
            /* The rest, trailing whitespace included (as Python's str.split). */
            if (parts) parts[2 * n] = (int64_t)start, parts[2 * n + 1] = (int64_t)(len - start);
            return n + 1;
        }
        while (i < len && !is_space(s[i])) i++;
        if (parts) parts[2 * n] = (int64_t)start, parts[2 * n + 1] = (int64_t)(i - start);
        n++;
    }
    return n;
}

static tm_status lower_string_split(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    const tm_tensor *x = string_input(L, 0);
    if (!x) return c->status;
    if (x->rank + 1 > TM_MAX_RANK)
        return tm_lfail(L, TM_ERR_UNSUPPORTED, "input rank %d is too large", x->rank);
    const char *delim = tm_attr_s(L, "delimiter", "");
    int64_t maxsplit = tm_attr_has(L, "maxsplit") ? tm_attr_i(L, "maxsplit", -1) : -1;
    int64_t n = tm_tensor_numel_(x), widest = 0;
    tm_tensor *count = tm_tensor_alloc(TM_INT64, x->rank, x->dims, c->allocator);
    if (!count) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    for (int64_t i = 0; i < n; i++) {
        int64_t k = split_one(str_at(x, i), delim, maxsplit, NULL);
        ((int64_t *)count->data)[i] = k;
        if (k > widest) widest = k;
    }
    int64_t dims[TM_MAX_RANK];
    memcpy(dims, x->dims, sizeof x->dims);
    dims[x->rank] = widest;
    tm_tensor *y = tm_tensor_alloc(TM_STRING, x->rank + 1, dims, c->allocator);
    int64_t *parts = malloc((size_t)(2 * widest + 2) * sizeof *parts);
    int ok = y && parts;
    for (int64_t i = 0; ok && i < n; i++) {
        const char *s = str_at(x, i);
        int64_t k = split_one(s, delim, maxsplit, parts);
        for (int64_t j = 0; ok && j < k; j++) {
            char *p = dup_n(s + parts[2 * j], (size_t)parts[2 * j + 1]);
            ((char **)y->data)[i * widest + j] = p;
            ok = p != NULL;
        }
    }
    free(parts);
    if (!ok) {
        tm_tensor_free(y);
        tm_tensor_free(count);
        return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    }
    out_tensor(L, 0, y);
    return out_tensor(L, 1, count);
}
TM_REGISTER_OP("", "StringSplit", 20, 27, lower_string_split);

/* ---- StringConcat ------------------------------------------------------------------ */

/* Offset into a tensor of rank r (aligned right against out_rank) for output index i. */
static int64_t bcast_offset(const tm_tensor *t, int out_rank, const int64_t *out_dims, int64_t i) {
    int64_t off = 0, stride = 1;
    for (int d = out_rank - 1; d >= 0; d--) {
        int64_t idx = i % out_dims[d];
        i /= out_dims[d];
        int td = d - (out_rank - t->rank);
        if (td < 0) continue;
        if (t->dims[td] != 1) off += idx * stride;
        stride *= t->dims[td];
    }
    return off;
}

static tm_status lower_string_concat(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    const tm_tensor *x = string_input(L, 0);
    const tm_tensor *y = x ? string_input(L, 1) : NULL;
    if (!x || !y) return c->status;
    int rank;
    int64_t dims[TM_MAX_RANK];
    if (tm_broadcast_dims(c, x->rank, x->dims, y->rank, y->dims, &rank, dims) != TM_OK)
        return c->status;
    tm_tensor *z = tm_tensor_alloc(TM_STRING, rank, dims, c->allocator);
    int64_t n = tm_numel(rank, dims);
    int ok = z != NULL;
    for (int64_t i = 0; ok && i < n; i++) {
        const char *a = str_at(x, bcast_offset(x, rank, dims, i));
        const char *b = str_at(y, bcast_offset(y, rank, dims, i));
        size_t la = strlen(a), lb = strlen(b);
        char *s = malloc(la + lb + 1);
        if (s) {
            memcpy(s, a, la);
            memcpy(s + la, b, lb + 1);
        }
        ((char **)z->data)[i] = s;
        ok = s != NULL;
    }
    if (!ok) {
        tm_tensor_free(z);
        return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    }
    return out_tensor(L, 0, z);
}
TM_REGISTER_OP("", "StringConcat", 20, 27, lower_string_concat);

/* ---- RegexFullMatch ---------------------------------------------------------------- */

/* RE2 to POSIX ERE (glibc regcomp with REG_EXTENDED). Translated: the Perl classes
 * \d \w \s and their negations (ASCII, as in RE2), \A \z, \t \n \r \f \v \a, \xHH and
 * \x{...}, \Q...\E, escaped punctuation, non-capturing and named groups, lazy
 * quantifiers (a full match does not depend on laziness), '.' not matching a newline
 * unless (?s), and the flags (?i) and (?s) at the very start. \b and \B are passed to
 * glibc, which knows them. Rejected, with an error naming the construct: Unicode
 * classes (\p, \P), \C, \Z, back-references, flag groups elsewhere, and negated Perl
 * classes inside brackets ([\W], [\D], [\S]). '.' and bracket expressions work on bytes,
 * not code points, so a multi-byte UTF-8 character counts as several. */
typedef struct rebuf {
    char *s;
    size_t len, cap;
    int failed;
} rebuf;

static void put(rebuf *b, const char *s, size_t n) {
    if (b->failed) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->failed = 1;
            return;
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static void puts_(rebuf *b, const char *s) { put(b, s, strlen(s)); }

/* A literal byte outside brackets, escaped when ERE gives it a meaning. */
static void put_literal(rebuf *b, char ch) {
    if (strchr(".[]()*+?{}|^$\\", ch) && ch) put(b, "\\", 1);
    put(b, &ch, 1);
}

/* Parses \xHH or \x{H...} at p (after the 'x'); writes UTF-8 to out, returns bytes
 * consumed or -1. */
static int hex_escape(const char *p, char *out, int *out_len) {
    uint32_t cp = 0;
    int used = 0, digits = 0;
    int braced = p[0] == '{';
    if (braced) used = 1;
    for (; p[used] && (braced ? p[used] != '}' : digits < 2); used++, digits++) {
        char ch = p[used];
        int v = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
              : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10 : -1;
        if (v < 0 || cp > 0x10FFFF) return -1;
        cp = cp << 4 | (uint32_t)v;
    }
    if (!digits || (braced && p[used] != '}') || (!braced && digits != 2) || cp > 0x10FFFF)
        return -1;
    *out_len = utf8_encode(cp, out);
    return used + braced;
}

static const char *simple_escape(char e) {
    switch (e) {
    case 't': return "\t";
    case 'n': return "\n";
    case 'r': return "\r";
    case 'f': return "\f";
    case 'v': return "\v";
    case 'a': return "\a";
    default: return NULL;
    }
}

/* Translates a bracket expression starting at p ('['); returns its length in the RE2
 * pattern, or -1 with *why set. */
static int translate_bracket(const char *p, rebuf *b, const char **why) {
    int i = 1, close_first = 0, dash = 0, caret = 0, open = 0;
    rebuf body = {0};
    int neg = p[i] == '^';
    if (neg) i++;
    if (p[i] == ']') {
        close_first = 1;
        i++;
    }
    for (; p[i] && p[i] != ']'; i++) {
        if (p[i] == '[' && p[i + 1] == ':') {
            const char *end = strstr(p + i + 2, ":]");
            if (!end) break;
            put(&body, p + i, (size_t)(end + 2 - (p + i)));
            i = (int)(end + 1 - p);
            continue;
        }
        if (p[i] != '\\') {
            if (p[i] == '[') open = 1;
            else if (p[i] == '^') caret = 1;
            else if (p[i] == '-' && (p[i + 1] == ']' || body.len == 0)) dash = 1;
            else put(&body, p + i, 1);
            continue;
        }
        char e = p[++i], lit[8];
        int n = 0, len = 0;
        if (!e) break;
        if (e == 'x') n = hex_escape(p + i + 1, lit, &len);
        if (e == 'd') puts_(&body, "0-9");
        else if (e == 'w') puts_(&body, "[:alnum:]_");
        else if (e == 's') puts_(&body, " \t\n\f\r");
        else if (e == 'D' || e == 'W' || e == 'S' || e == 'p' || e == 'P') {
            *why = "a negated or Unicode class inside brackets";
            free(body.s);
            return -1;
        } else if (simple_escape(e)) puts_(&body, simple_escape(e));
        else if (e == 'x' && n > 0) {
            put(&body, lit, (size_t)len);
            i += n;
        } else if (e == ']') close_first = 1;
        else if (e == '-') dash = 1;
        else if (e == '^') caret = 1;
        else if (e == '[') open = 1;
        else put(&body, &e, 1);
    }
    if (p[i] != ']') {
        free(body.s);
        *why = "an unterminated bracket expression";
        return -1;
    }
    put(b, neg ? "[^" : "[", neg ? 2 : 1);
    if (close_first) put(b, "]", 1);
    if (body.s) put(b, body.s, body.len);
    if (open) put(b, "[", 1);
    if (caret) put(b, "^", 1);
    if (dash) put(b, "-", 1);
    put(b, "]", 1);
    b->failed |= body.failed;
    free(body.s);
    return i + 1;
}

/* Translates one backslash escape outside brackets at p ('\\'); returns its length or
 * -1 with *why set. */
static int translate_escape(const char *p, rebuf *b, const char **why) {
    char e = p[1], lit[8];
    int len = 0, n;
    switch (e) {
    case 'd': puts_(b, "[0-9]"); return 2;
    case 'D': puts_(b, "[^0-9]"); return 2;
    case 'w': puts_(b, "[[:alnum:]_]"); return 2;
    case 'W': puts_(b, "[^[:alnum:]_]"); return 2;
    case 's': puts_(b, "[ \t\n\f\r]"); return 2;
    case 'S': puts_(b, "[^ \t\n\f\r]"); return 2;
    case 'b': puts_(b, "\\b"); return 2;
    case 'B': puts_(b, "\\B"); return 2;
    case 'A': puts_(b, "^"); return 2;
    case 'z': puts_(b, "$"); return 2;
    case 'x':
        n = hex_escape(p + 2, lit, &len);
        if (n < 0) break;
        for (int i = 0; i < len; i++) put_literal(b, lit[i]);
        return 2 + n;
    case 'Q': {
        const char *end = strstr(p + 2, "\\E");
        size_t stop = end ? (size_t)(end - p) : strlen(p);
        for (size_t i = 2; i < stop; i++) put_literal(b, p[i]);
        return (int)(end ? stop + 2 : stop);
    }
    case 'p': case 'P': *why = "Unicode classes (\\p, \\P)"; return -1;
    case 'C': *why = "\\C"; return -1;
    case 'Z': *why = "\\Z"; return -1;
    case 0: *why = "a trailing backslash"; return -1;
    default:
        if (simple_escape(e)) {
            puts_(b, simple_escape(e));
            return 2;
        }
        if (e >= '0' && e <= '9') {
            *why = "back-references";
            return -1;
        }
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) break;
        put_literal(b, e);
        return 2;
    }
    *why = "an unknown escape";
    return -1;
}

/* Translates a '(' construct; returns its length (of the opening only) or -1. */
static int translate_group(const char *p, rebuf *b, const char **why) {
    if (p[1] != '?') {
        put(b, "(", 1);
        return 1;
    }
    if (p[2] == ':') {
        put(b, "(", 1);
        return 3;
    }
    if (p[2] == 'P' && p[3] == '<') {
        const char *end = strchr(p + 4, '>');
        if (!end) {
            *why = "an unterminated group name";
            return -1;
        }
        put(b, "(", 1);
        return (int)(end + 1 - p);
    }
    *why = "flag groups other than a leading (?i) or (?s)";
    return -1;
}

/* The POSIX form of an RE2 pattern, anchored for a full match; NULL with *why set. */
static char *re2_to_posix(const char *p, int *icase, const char **why) {
    rebuf b = {0};
    int dot_all = 0;
    *icase = 0;
    while (p[0] == '(' && p[1] == '?' && (p[2] == 'i' || p[2] == 's') &&
           (p[3] == ')' || ((p[3] == 'i' || p[3] == 's') && p[4] == ')'))) {
        for (int i = 2; p[i] != ')'; i++) {
            if (p[i] == 'i') *icase = 1;
            if (p[i] == 's') dot_all = 1;
        }
        p = strchr(p, ')') + 1;
    }
    puts_(&b, "^(");
    for (size_t i = 0; p[i];) {
        int n = 1;
        char ch = p[i];
        if (ch == '\\') n = translate_escape(p + i, &b, why);
        else if (ch == '[') n = translate_bracket(p + i, &b, why);
        else if (ch == '(') n = translate_group(p + i, &b, why);
        else if (ch == '.' && !dot_all) puts_(&b, "[^\n]");
        else if (ch == '?' && i > 0 && strchr("*+?}", p[i - 1]) &&
                 !(i > 1 && p[i - 2] == '\\'))
            ;  /* lazy quantifier: same full matches */
        else put(&b, &ch, 1);
        if (n < 0) {
            free(b.s);
            return NULL;
        }
        i += (size_t)n;
    }
    puts_(&b, ")$");
    if (b.failed) {
        free(b.s);
        *why = "out of memory";
        return NULL;
    }
    return b.s;
}

static tm_status lower_regex_full_match(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    const tm_tensor *x = string_input(L, 0);
    if (!x) return c->status;
    if (!tm_attr_has(L, "pattern")) return tm_lfail(L, TM_ERR_PARSE, "attribute 'pattern' is missing");
    const char *pattern = tm_attr_s(L, "pattern", ""), *why = NULL;
    int icase;
    char *posix = re2_to_posix(pattern, &icase, &why);
    if (!posix)
        return tm_lfail(L, TM_ERR_UNSUPPORTED, "attribute 'pattern' (\"%s\") uses %s, which "
                        "POSIX regular expressions cannot express", pattern, why);
    regex_t re;
    int rc = regcomp(&re, posix, REG_EXTENDED | REG_NOSUB | (icase ? REG_ICASE : 0));
    free(posix);
    if (rc) {
        char msg[200];
        regerror(rc, &re, msg, sizeof msg);
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute 'pattern' (\"%s\") does not "
                        "compile: %s", pattern, msg);
    }
    tm_tensor *y = tm_tensor_alloc(TM_BOOL, x->rank, x->dims, c->allocator);
    int64_t n = tm_tensor_numel_(x);
    for (int64_t i = 0; y && i < n; i++)
        ((uint8_t *)y->data)[i] = regexec(&re, str_at(x, i), 0, NULL, 0) == 0;
    regfree(&re);
    return out_tensor(L, 0, y);
}
TM_REGISTER_OP("", "RegexFullMatch", 20, 27, lower_regex_full_match);
