/* json.c — JSON text <-> template values: the reader for messages and variables (ints and
 * floats stay distinct, object key order kept) and the writer behind `tojson` and the
 * printing of lists and dicts, byte for byte as @huggingface/jinja writes them.
 * Not a general JSON library: the project's other JSON readers live in src/hub. */
#include "tpl.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct jreader {
    tctx *c;
    const char *s;
    size_t n, pos;
    const char *what;
    int depth;
} jreader;

_Noreturn static void jfail(jreader *r, const char *msg) {
    /* name the line and column as well as the byte: message files are edited by hand */
    int line = 1, col = 1;
    for (size_t i = 0; i < r->pos && i < r->n; i++) {
        if (r->s[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    tpl_raise(r->c->fail, TM_ERR_PARSE, 0, "%s: invalid JSON at line %d, column %d: %s",
              r->what, line, col, msg);
}

static void skip_ws(jreader *r) {
    while (r->pos < r->n) {
        char ch = r->s[r->pos];
        if (ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r')
            break;
        r->pos++;
    }
}

static int hex4(jreader *r, uint32_t *out) {
    if (r->n - r->pos < 4)
        return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char ch = r->s[r->pos + i];
        v <<= 4;
        if (ch >= '0' && ch <= '9') v |= (uint32_t)(ch - '0');
        else if (ch >= 'a' && ch <= 'f') v |= (uint32_t)(ch - 'a' + 10);
        else if (ch >= 'A' && ch <= 'F') v |= (uint32_t)(ch - 'A' + 10);
        else return 0;
    }
    r->pos += 4;
    *out = v;
    return 1;
}

static const tstr *parse_string(jreader *r) {
    tbuf b = {0};
    r->pos++;   /* opening quote */
    for (;;) {
        if (r->pos >= r->n)
            jfail(r, "unterminated string");
        unsigned char ch = (unsigned char)r->s[r->pos];
        if (ch == '"') {
            r->pos++;
            return tbuf_str(r->c, &b);
        }
        if (ch < 0x20)
            jfail(r, "control character in string");
        if (ch != '\\') {
            size_t len;
            uint32_t cp = tpl_utf8_decode(r->s + r->pos, r->n - r->pos, &len);
            if (cp == 0xFFFD && !(len == 3 && memcmp(r->s + r->pos, "\xEF\xBF\xBD", 3) == 0))
                jfail(r, "invalid UTF-8 in string");
            tbuf_put(r->c, &b, r->s + r->pos, len);
            r->pos += len;
            continue;
        }
        r->pos++;
        if (r->pos >= r->n)
            jfail(r, "unterminated string");
        char e = r->s[r->pos++];
        const char *rep = NULL;
        switch (e) {
        case '"': rep = "\""; break;
        case '\\': rep = "\\"; break;
        case '/': rep = "/"; break;
        case 'b': rep = "\b"; break;
        case 'f': rep = "\f"; break;
        case 'n': rep = "\n"; break;
        case 'r': rep = "\r"; break;
        case 't': rep = "\t"; break;
        case 'u': {
            uint32_t cp;
            if (!hex4(r, &cp))
                jfail(r, "bad \\u escape");
            if (cp >= 0xD800 && cp < 0xDC00 && r->n - r->pos >= 6 && r->s[r->pos] == '\\' &&
                r->s[r->pos + 1] == 'u') {
                size_t save = r->pos;
                uint32_t lo;
                r->pos += 2;
                if (hex4(r, &lo) && lo >= 0xDC00 && lo < 0xE000)
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                else
                    r->pos = save;
            }
            char enc[4];
            tbuf_put(r->c, &b, enc, tpl_utf8_encode(cp, enc));
            continue;
        }
        default:
            jfail(r, "bad escape in string");
        }
        tbuf_puts(r->c, &b, rep);
    }
}

static tv parse_number(jreader *r) {
    size_t start = r->pos;
    int is_float = 0;
    if (r->s[r->pos] == '-')
        r->pos++;
    if (r->pos >= r->n || r->s[r->pos] < '0' || r->s[r->pos] > '9')
        jfail(r, "bad number");
    if (r->s[r->pos] == '0')
        r->pos++;
    else
        while (r->pos < r->n && r->s[r->pos] >= '0' && r->s[r->pos] <= '9')
            r->pos++;
    if (r->pos < r->n && r->s[r->pos] == '.') {
        is_float = 1;
        r->pos++;
        if (r->pos >= r->n || r->s[r->pos] < '0' || r->s[r->pos] > '9')
            jfail(r, "bad number");
        while (r->pos < r->n && r->s[r->pos] >= '0' && r->s[r->pos] <= '9')
            r->pos++;
    }
    if (r->pos < r->n && (r->s[r->pos] == 'e' || r->s[r->pos] == 'E')) {
        is_float = 1;
        r->pos++;
        if (r->pos < r->n && (r->s[r->pos] == '+' || r->s[r->pos] == '-'))
            r->pos++;
        if (r->pos >= r->n || r->s[r->pos] < '0' || r->s[r->pos] > '9')
            jfail(r, "bad number");
        while (r->pos < r->n && r->s[r->pos] >= '0' && r->s[r->pos] <= '9')
            r->pos++;
    }
    char tmp[64];
    size_t len = r->pos - start;
    if (len >= sizeof tmp)
        is_float = 1;
    if (len >= sizeof tmp)
        len = sizeof tmp - 1;  /* a 60-digit literal only loses digits no double keeps */
    memcpy(tmp, r->s + start, len);
    tmp[len] = 0;
    if (!is_float) {
        errno = 0;
        long long v = strtoll(tmp, NULL, 10);
        if (errno == 0)
            return tv_int(v);
    }
    return tv_float(strtod(tmp, NULL));
}

static int match_word(jreader *r, const char *w) {
    size_t n = strlen(w);
    if (r->n - r->pos >= n && memcmp(r->s + r->pos, w, n) == 0) {
        r->pos += n;
        return 1;
    }
    return 0;
}

static tv parse_value(jreader *r) {
    skip_ws(r);
    if (r->pos >= r->n)
        jfail(r, "unexpected end of input");
    char ch = r->s[r->pos];
    if (ch == '"')
        return tv_strv(parse_string(r));
    if (ch == '-' || (ch >= '0' && ch <= '9'))
        return parse_number(r);
    if (match_word(r, "true"))
        return tv_bool(1);
    if (match_word(r, "false"))
        return tv_bool(0);
    if (match_word(r, "null"))
        return tv_none();
    if (ch != '[' && ch != '{')
        jfail(r, "unexpected character");
    if (++r->depth > TPL_MAX_DEPTH)
        jfail(r, "nested too deeply");
    r->pos++;
    if (ch == '[') {
        tlist *l = tlist_new(r->c, 0);
        skip_ws(r);
        if (r->pos < r->n && r->s[r->pos] == ']') {
            r->pos++;
        } else {
            for (;;) {
                tlist_push(r->c, l, parse_value(r));
                skip_ws(r);
                if (r->pos < r->n && r->s[r->pos] == ',') { r->pos++; continue; }
                if (r->pos < r->n && r->s[r->pos] == ']') { r->pos++; break; }
                jfail(r, "expected ',' or ']'");
            }
        }
        r->depth--;
        return tv_listv(l);
    }
    tdict *d = tdict_new(r->c, 0);
    skip_ws(r);
    if (r->pos < r->n && r->s[r->pos] == '}') {
        r->pos++;
    } else {
        for (;;) {
            skip_ws(r);
            if (r->pos >= r->n || r->s[r->pos] != '"')
                jfail(r, "expected a string key");
            const tstr *k = parse_string(r);
            skip_ws(r);
            if (r->pos >= r->n || r->s[r->pos] != ':')
                jfail(r, "expected ':'");
            r->pos++;
            tdict_set(r->c, d, k, parse_value(r));
            skip_ws(r);
            if (r->pos < r->n && r->s[r->pos] == ',') { r->pos++; continue; }
            if (r->pos < r->n && r->s[r->pos] == '}') { r->pos++; break; }
            jfail(r, "expected ',' or '}'");
        }
    }
    r->depth--;
    return tv_dictv(d);
}

tv tpl_json_parse(tctx *c, const char *s, size_t n, const char *what) {
    jreader r = {c, s, n, 0, what ? what : "JSON", 0};
    tv v = parse_value(&r);
    skip_ws(&r);
    if (r.pos != r.n)
        jfail(&r, "trailing characters after the value");
    return v;
}

/* ---- Writer ----------------------------------------------------------------------------- */

static void write_string(tctx *c, tbuf *b, const char *s, size_t n, int ascii) {
    static const char hex[] = "0123456789abcdef";
    tbuf_putc(c, b, '"');
    size_t run = 0;   /* start of the pending run of bytes copied as they are */
    for (size_t i = 0; i < n;) {
        unsigned char ch = (unsigned char)s[i];
        const char *esc = NULL;
        char u[16];
        size_t len = 1;
        if (ch == '"') esc = "\\\"";
        else if (ch == '\\') esc = "\\\\";
        else if (ch == '\n') esc = "\\n";
        else if (ch == '\r') esc = "\\r";
        else if (ch == '\t') esc = "\\t";
        else if (ch == '\b') esc = "\\b";
        else if (ch == '\f') esc = "\\f";
        else if (ch < 0x20 || (ascii && ch == 0x7F)) {
            snprintf(u, sizeof u, "\\u00%c%c", hex[ch >> 4], hex[ch & 15]);
            esc = u;
        } else if (ch >= 0x80) {
            /* a lone surrogate kept from JSON input: JSON.stringify escapes it */
            int lone = ch == 0xED && i + 2 < n && ((unsigned char)s[i + 1] & 0xE0) == 0xA0;
            uint32_t cp;
            if (lone) {
                cp = 0xD000 | (((uint32_t)s[i + 1] & 0x3F) << 6) | ((uint32_t)s[i + 2] & 0x3F);
                len = 3;
            } else {
                cp = tpl_utf8_decode(s + i, n - i, &len);
            }
            if (lone || ascii) {
                if (cp >= 0x10000) {
                    uint32_t v = cp - 0x10000;
                    snprintf(u, sizeof u, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
                } else {
                    snprintf(u, sizeof u, "\\u%04x", cp);
                }
                esc = u;
            }
        }
        if (esc) {
            tbuf_put(c, b, s + run, i - run);
            tbuf_puts(c, b, esc);
            run = i + len;
        }
        i += len;
    }
    tbuf_put(c, b, s + run, n - run);
    tbuf_putc(c, b, '"');
}

static void pad(tctx *c, tbuf *b, int indent, int depth) {
    tbuf_putc(c, b, '\n');
    for (int i = 0; i < indent * depth; i++)
        tbuf_putc(c, b, ' ');
}

static int key_order(const void *x, const void *y) {
    const tkv *a = x, *b = y;
    size_t n = a->k->n < b->k->n ? a->k->n : b->k->n;
    int r = memcmp(a->k->p, b->k->p, n);
    return r ? r : (a->k->n > b->k->n) - (a->k->n < b->k->n);
}

void tpl_json_write(tctx *c, tbuf *b, const tv *v, const tpl_json_opts *o, int depth) {
    const char *item_sep = o->item_sep ? o->item_sep : o->indent > 0 ? "," : ", ";
    const char *key_sep = o->key_sep ? o->key_sep : ": ";
    if (depth > TPL_MAX_DEPTH)
        tctx_raise(c, "tojson: value nested too deeply");
    switch (v->t) {
    case TV_UNDEF:
        /* as @huggingface/jinja: null in tojson (Python's json.dumps would refuse it), and
         * "undefined" when a list holding one is printed */
        tbuf_puts(c, b, o->for_tojson ? "null" : "undefined");
        return;
    case TV_NONE: tbuf_puts(c, b, "null"); return;
    case TV_BOOL: tbuf_puts(c, b, v->u.i ? "true" : "false"); return;
    case TV_INT: tbuf_printf(c, b, "%lld", (long long)v->u.i); return;
    case TV_FLOAT: {
        char tmp[64];
        if (!isfinite(v->u.f))
            snprintf(tmp, sizeof tmp, "null");
        else
            tpl_js_number(tmp, sizeof tmp, v->u.f);
        tbuf_puts(c, b, tmp);
        return;
    }
    case TV_STR: write_string(c, b, v->u.s->p, v->u.s->n, o->ensure_ascii); return;
    case TV_LIST: {
        const tlist *l = v->u.l;
        tbuf_putc(c, b, '[');
        for (size_t i = 0; i < l->n; i++) {
            if (i)
                tbuf_puts(c, b, item_sep);
            if (o->indent > 0)
                pad(c, b, o->indent, depth + 1);
            tpl_json_write(c, b, &l->v[i], o, depth + 1);
        }
        if (o->indent > 0 && l->n)
            pad(c, b, o->indent, depth);
        tbuf_putc(c, b, ']');
        return;
    }
    case TV_DICT: case TV_NS: {
        const tdict *d = v->u.d;
        const tkv *kv = d->kv;
        if (o->sort_keys && d->n > 1) {
            tkv *sorted = tpl_alloc(c->arena, c->fail, d->n * sizeof(tkv));
            memcpy(sorted, d->kv, d->n * sizeof(tkv));
            qsort(sorted, d->n, sizeof(tkv), key_order);
            kv = sorted;
        }
        tbuf_putc(c, b, '{');
        for (size_t i = 0; i < d->n; i++) {
            if (i)
                tbuf_puts(c, b, item_sep);
            if (o->indent > 0)
                pad(c, b, o->indent, depth + 1);
            write_string(c, b, kv[i].k->p, kv[i].k->n, o->ensure_ascii);
            tbuf_puts(c, b, key_sep);
            tpl_json_write(c, b, &kv[i].v, o, depth + 1);
        }
        if (o->indent > 0 && d->n)
            pad(c, b, o->indent, depth);
        tbuf_putc(c, b, '}');
        return;
    }
    default:
        tctx_raise(c, "cannot convert %s to JSON", tv_type_name(v));
    }
}

/* ---- Python repr ------------------------------------------------------------------------ */

static void py_float(tctx *c, tbuf *b, double f) {
    char tmp[40];
    if (isnan(f)) { tbuf_puts(c, b, "nan"); return; }
    if (isinf(f)) { tbuf_puts(c, b, f < 0 ? "-inf" : "inf"); return; }
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f)
            break;
    }
    int exp10 = atoi(strchr(tmp, 'e') + 1);
    if (exp10 < -4 || exp10 >= 16) {
        /* 1e-05, 1.5e+16: the mantissa without trailing zeros, two exponent digits */
        char mant[32];
        size_t k = (size_t)(strchr(tmp, 'e') - tmp);
        memcpy(mant, tmp, k);
        mant[k] = 0;
        if (strchr(mant, '.')) {
            while (k > 0 && mant[k - 1] == '0') mant[--k] = 0;
            if (k > 0 && mant[k - 1] == '.') mant[--k] = 0;
        }
        tbuf_printf(c, b, "%se%c%02d", mant, exp10 < 0 ? '-' : '+', abs(exp10));
        return;
    }
    int decimals = prec - 1 - exp10;
    snprintf(tmp, sizeof tmp, "%.*f", decimals > 0 ? decimals : 0, f);
    tbuf_puts(c, b, tmp);
    if (!strchr(tmp, '.'))
        tbuf_puts(c, b, ".0");
}

static void py_string(tctx *c, tbuf *b, const tstr *s) {
    int has_single = memchr(s->p, '\'', s->n) != NULL, has_double = memchr(s->p, '"', s->n) != NULL;
    char q = has_single && !has_double ? '"' : '\'';
    tbuf_putc(c, b, q);
    for (size_t i = 0; i < s->n;) {
        unsigned char ch = (unsigned char)s->p[i];
        size_t len = 1;
        if (ch == '\\' || ch == (unsigned char)q) { tbuf_putc(c, b, '\\'); tbuf_putc(c, b, (char)ch); }
        else if (ch == '\n') tbuf_puts(c, b, "\\n");
        else if (ch == '\r') tbuf_puts(c, b, "\\r");
        else if (ch == '\t') tbuf_puts(c, b, "\\t");
        else if (ch < 0x20 || ch == 0x7F) tbuf_printf(c, b, "\\x%02x", ch);
        else {
            tpl_utf8_decode(s->p + i, s->n - i, &len);
            tbuf_put(c, b, s->p + i, len);
        }
        i += len;
    }
    tbuf_putc(c, b, q);
}

void tpl_py_repr(tctx *c, tbuf *b, const tv *v, int depth) {
    if (depth > TPL_MAX_DEPTH)
        tctx_raise(c, "value nested too deeply");
    switch (v->t) {
    case TV_UNDEF: return;
    case TV_NONE: tbuf_puts(c, b, "None"); return;
    case TV_BOOL: tbuf_puts(c, b, v->u.i ? "True" : "False"); return;
    case TV_INT: tbuf_printf(c, b, "%lld", (long long)v->u.i); return;
    case TV_FLOAT: py_float(c, b, v->u.f); return;
    case TV_STR: py_string(c, b, v->u.s); return;
    case TV_LIST: {
        int tuple = v->u.l->tuple;
        tbuf_putc(c, b, tuple ? '(' : '[');
        for (size_t i = 0; i < v->u.l->n; i++) {
            if (i) tbuf_puts(c, b, ", ");
            tpl_py_repr(c, b, &v->u.l->v[i], depth + 1);
        }
        if (tuple && v->u.l->n == 1) tbuf_putc(c, b, ',');
        tbuf_putc(c, b, tuple ? ')' : ']');
        return;
    }
    case TV_DICT: case TV_NS: {
        tbuf_putc(c, b, '{');
        for (size_t i = 0; i < v->u.d->n; i++) {
            if (i) tbuf_puts(c, b, ", ");
            py_string(c, b, v->u.d->kv[i].k);
            tbuf_puts(c, b, ": ");
            tpl_py_repr(c, b, &v->u.d->kv[i].v, depth + 1);
        }
        tbuf_putc(c, b, '}');
        return;
    }
    default: tbuf_puts(c, b, "<function>"); return;
    }
}
