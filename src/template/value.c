/* value.c — the template engine's memory (an arena per parse and per render), its
 * failure path (longjmp to the entry point), and values: strings, lists, dicts, truth,
 * equality, ordering and printing. Not the JSON codec (json.c) nor filters (filters.c). */
#include "tpl.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

struct tpl_chunk { tpl_chunk *next; size_t size, used; _Alignas(16) char data[]; };

#define CHUNK_SIZE ((size_t)64 << 10)

void tpl_arena_init(tpl_arena *a, size_t limit) {
    a->head = NULL;
    a->used = 0;
    a->limit = limit;
}

void tpl_arena_free(tpl_arena *a) {
    tpl_chunk *c = a->head;
    while (c) {
        tpl_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->used = 0;
}

void tpl_raise(tpl_fail *f, tm_status code, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->message, sizeof f->message, fmt, ap);
    va_end(ap);
    f->code = code;
    f->line = line;
    longjmp(f->jump, 1);
}

void *tpl_alloc(tpl_arena *a, tpl_fail *f, size_t size) {
    size = (size + 15) & ~(size_t)15;
    if (size == 0)
        size = 16;
    tpl_chunk *c = a->head;
    if (!c || c->size - c->used < size) {
        /* Big requests get a chunk of their own, so a chunk never wastes more than 1/4. */
        size_t want = size > CHUNK_SIZE / 4 ? size : CHUNK_SIZE;
        if (size > a->limit || a->used + want + sizeof(tpl_chunk) > a->limit)
            tpl_raise(f, TM_ERR_NO_MEMORY, 0,
                      "template memory limit reached (%zu MiB)", a->limit >> 20);
        tpl_chunk *n = malloc(sizeof(tpl_chunk) + want);
        if (!n)
            tpl_raise(f, TM_ERR_NO_MEMORY, 0, "out of memory rendering a template");
        a->used += want + sizeof(tpl_chunk);
        n->size = want;
        n->used = 0;
        if (want > CHUNK_SIZE && c) {
            /* keep filling the current small chunk: put the big one behind it */
            n->next = c->next;
            c->next = n;
        } else {
            n->next = c;
            a->head = n;
        }
        c = n;
    }
    void *p = c->data + c->used;
    c->used += size;
    memset(p, 0, size);
    return p;
}

void tctx_raise(tctx *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->fail->message, sizeof c->fail->message, fmt, ap);
    va_end(ap);
    c->fail->code = TM_ERR_INVALID_ARGUMENT;
    c->fail->line = c->line;
    longjmp(c->fail->jump, 1);
}

/* ---- Buffers and strings ---------------------------------------------------------------- */

void tbuf_put(tctx *c, tbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t limit = b->limit ? b->limit : TPL_MAX_MEMORY;
        if (b->n + n > limit)
            tpl_raise(c->fail, TM_ERR_NO_MEMORY, c->line,
                      "template output passed its limit of %zu bytes", limit);
        size_t cap = b->cap ? b->cap * 2 : 64;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = tpl_alloc(c->arena, c->fail, cap);
        if (b->n)
            memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void tbuf_putc(tctx *c, tbuf *b, char ch) { tbuf_put(c, b, &ch, 1); }

void tbuf_printf(tctx *c, tbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        tbuf_put(c, b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

const tstr *tstr_new(tctx *c, const char *p, size_t n) {
    tstr *s = tpl_alloc(c->arena, c->fail, sizeof(tstr) + n + 1);
    s->n = n;
    if (n)
        memcpy(s->p, p, n);
    s->p[n] = 0;
    return s;
}

const tstr *tbuf_str(tctx *c, const tbuf *b) { return tstr_new(c, b->p ? b->p : "", b->n); }

tv tv_str(tctx *c, const char *p, size_t n) { return tv_strv(tstr_new(c, p, n)); }

tlist *tlist_new(tctx *c, size_t cap) {
    tlist *l = tpl_alloc(c->arena, c->fail, sizeof *l);
    if (cap) {
        l->v = tpl_alloc(c->arena, c->fail, cap * sizeof(tv));
        l->cap = cap;
    }
    return l;
}

void tlist_push(tctx *c, tlist *l, tv v) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        tv *nv = tpl_alloc(c->arena, c->fail, cap * sizeof(tv));
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof(tv));
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = v;
}

tdict *tdict_new(tctx *c, size_t cap) {
    tdict *d = tpl_alloc(c->arena, c->fail, sizeof *d);
    if (cap) {
        d->kv = tpl_alloc(c->arena, c->fail, cap * sizeof(tkv));
        d->cap = cap;
    }
    return d;
}

tv *tdict_get(const tdict *d, const char *k, size_t n) {
    for (size_t i = 0; i < d->n; i++)
        if (d->kv[i].k->n == n && memcmp(d->kv[i].k->p, k, n) == 0)
            return &d->kv[i].v;
    return NULL;
}

void tdict_set(tctx *c, tdict *d, const tstr *k, tv v) {
    tv *old = tdict_get(d, k->p, k->n);
    if (old) {
        *old = v;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        tkv *nkv = tpl_alloc(c->arena, c->fail, cap * sizeof(tkv));
        if (d->n)
            memcpy(nkv, d->kv, d->n * sizeof(tkv));
        d->kv = nkv;
        d->cap = cap;
    }
    d->kv[d->n].k = k;
    d->kv[d->n].v = v;
    d->n++;
}

/* ---- UTF-8 ------------------------------------------------------------------------------ */

uint32_t tpl_utf8_decode(const char *s, size_t n, size_t *len) {
    const unsigned char *u = (const unsigned char *)s;
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate(u, (utf8proc_ssize_t)n, &cp);
    if (k <= 0) {
        *len = 1;
        return 0xFFFD;
    }
    *len = (size_t)k;
    return (uint32_t)cp;
}

size_t tpl_utf8_step(const char *s, size_t n) {
    size_t len;
    tpl_utf8_decode(s, n, &len);
    return len;
}

size_t tpl_utf8_len(const char *s, size_t n) {
    size_t count = 0;
    for (size_t i = 0; i < n; i += tpl_utf8_step(s + i, n - i))
        count++;
    return count;
}

size_t tpl_utf8_encode(uint32_t cp, char *out) {
    utf8proc_ssize_t k = utf8proc_encode_char((utf8proc_int32_t)cp, (utf8proc_uint8_t *)out);
    if (k <= 0) {  /* a lone surrogate: WTF-8 style bytes, as JavaScript would keep it */
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    return (size_t)k;
}

static int is_js_space(uint32_t cp) {
    if (cp <= 32)
        return cp == 32 || (cp >= 9 && cp <= 13);
    return cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
}

size_t tpl_space_at(const char *s, size_t n) {
    if (n == 0)
        return 0;
    unsigned char ch = (unsigned char)s[0];
    if (ch < 0x80)
        return (ch == 32 || (ch >= 9 && ch <= 13)) ? 1 : 0;
    size_t len;
    uint32_t cp = tpl_utf8_decode(s, n, &len);
    return is_js_space(cp) && cp != 0xFFFD ? len : 0;
}

size_t tpl_space_before(const char *s, size_t n) {
    if (n == 0)
        return 0;
    size_t start = n - 1;
    while (start > 0 && n - start < 4 && ((unsigned char)s[start] & 0xC0) == 0x80)
        start--;
    size_t k = tpl_space_at(s + start, n - start);
    return k == n - start ? k : (tpl_space_at(s + n - 1, 1));
}

/* ---- Truth, equality, order -------------------------------------------------------------- */

const char *tv_type_name(const tv *v) {
    static const char *names[] = {"undefined", "none", "boolean", "integer", "float",
                                  "string", "list", "dict", "namespace", "function"};
    if (v->t == TV_LIST && v->u.l->tuple)
        return "tuple";
    return names[v->t];
}

int tv_truthy(const tv *v) {
    switch (v->t) {
    case TV_UNDEF: case TV_NONE: return 0;
    case TV_BOOL: case TV_INT: return v->u.i != 0;
    case TV_FLOAT: return v->u.f != 0 && !isnan(v->u.f);
    case TV_STR: return v->u.s->n > 0;
    case TV_LIST: return v->u.l->n > 0;
    case TV_DICT: return v->u.d->n > 0;
    default: return 1;
    }
}

static int is_num(const tv *v) { return v->t == TV_INT || v->t == TV_FLOAT || v->t == TV_BOOL; }
static double num(const tv *v) { return v->t == TV_FLOAT ? v->u.f : (double)v->u.i; }

int tv_equal(const tv *a, const tv *b) {
    if (is_num(a) && is_num(b)) {
        if (a->t != TV_FLOAT && b->t != TV_FLOAT)
            return a->u.i == b->u.i;
        return num(a) == num(b);
    }
    /* null == undefined, as @huggingface/jinja's loose equality has it */
    if ((a->t == TV_NONE || a->t == TV_UNDEF) && (b->t == TV_NONE || b->t == TV_UNDEF))
        return 1;
    if (a->t != b->t)
        return 0;
    switch (a->t) {
    case TV_STR:
        return a->u.s->n == b->u.s->n && memcmp(a->u.s->p, b->u.s->p, a->u.s->n) == 0;
    case TV_LIST:
        if (a->u.l->n != b->u.l->n)
            return 0;
        for (size_t i = 0; i < a->u.l->n; i++)
            if (!tv_equal(&a->u.l->v[i], &b->u.l->v[i]))
                return 0;
        return 1;
    case TV_DICT: case TV_NS:
        if (a->u.d->n != b->u.d->n)
            return 0;
        for (size_t i = 0; i < a->u.d->n; i++) {
            const tkv *kv = &a->u.d->kv[i];
            tv *o = tdict_get(b->u.d, kv->k->p, kv->k->n);
            if (!o || !tv_equal(&kv->v, o))
                return 0;
        }
        return 1;
    case TV_FUNC:
        return a->u.fn == b->u.fn;
    default:
        return 1;
    }
}

static int compare_strings(const tstr *a, const tstr *b, int case_sensitive) {
    size_t i = 0, j = 0;
    while (i < a->n && j < b->n) {
        size_t la, lb;
        uint32_t ca = tpl_utf8_decode(a->p + i, a->n - i, &la);
        uint32_t cb = tpl_utf8_decode(b->p + j, b->n - j, &lb);
        if (!case_sensitive) {
            ca = (uint32_t)utf8proc_tolower((utf8proc_int32_t)ca);
            cb = (uint32_t)utf8proc_tolower((utf8proc_int32_t)cb);
        }
        if (ca != cb)
            return ca < cb ? -1 : 1;
        i += la;
        j += lb;
    }
    return (i < a->n) - (j < b->n);
}

int tv_compare(tctx *c, const tv *a, const tv *b, int case_sensitive) {
    if (is_num(a) && is_num(b)) {
        if (a->t != TV_FLOAT && b->t != TV_FLOAT)
            return (a->u.i > b->u.i) - (a->u.i < b->u.i);
        double x = num(a), y = num(b);
        return (x > y) - (x < y);
    }
    if (a->t == b->t && (a->t == TV_NONE || a->t == TV_UNDEF))
        return 0;
    if (a->t == TV_STR && b->t == TV_STR)
        return compare_strings(a->u.s, b->u.s, case_sensitive);
    if (a->t == TV_LIST && b->t == TV_LIST) {
        size_t n = a->u.l->n < b->u.l->n ? a->u.l->n : b->u.l->n;
        for (size_t i = 0; i < n; i++) {
            int r = tv_compare(c, &a->u.l->v[i], &b->u.l->v[i], case_sensitive);
            if (r)
                return r;
        }
        return (a->u.l->n > n) - (b->u.l->n > n);
    }
    tctx_raise(c, "cannot compare %s with %s", tv_type_name(a), tv_type_name(b));
}

/* ---- Printing ---------------------------------------------------------------------------- */

void tpl_js_number(char *out, size_t cap, double f) {
    if (isnan(f)) { snprintf(out, cap, "NaN"); return; }
    if (isinf(f)) { snprintf(out, cap, f < 0 ? "-Infinity" : "Infinity"); return; }
    if (f == 0) { snprintf(out, cap, "0"); return; }
    char tmp[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f)
            break;
    }
    /* tmp is [-]d[.ddd]e[+-]xx: split into digits and the exponent */
    char digits[24];
    int k = 0, neg = tmp[0] == '-';
    const char *p = tmp + neg;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9')
            digits[k++] = *p;
    while (k > 1 && digits[k - 1] == '0')
        k--;
    digits[k] = 0;
    int n = atoi(p + 1) + 1;   /* value = 0.digits x 10^n */
    char *o = out;
    size_t left = cap;
#define EMIT(...) do { \
        int w = snprintf(o, left, __VA_ARGS__); \
        if (w < 0 || (size_t)w >= left) \
            return; \
        o += w; \
        left -= (size_t)w; \
    } while (0)
    if (neg)
        EMIT("-");
    if (k <= n && n <= 21) {
        EMIT("%s", digits);
        for (int i = 0; i < n - k; i++)
            EMIT("0");
    } else if (0 < n && n <= 21) {
        EMIT("%.*s.%s", n, digits, digits + n);
    } else if (-6 < n && n <= 0) {
        EMIT("0.");
        for (int i = 0; i < -n; i++)
            EMIT("0");
        EMIT("%s", digits);
    } else {
        if (k == 1)
            EMIT("%c", digits[0]);
        else
            EMIT("%c.%s", digits[0], digits + 1);
        EMIT("e%c%d", n - 1 >= 0 ? '+' : '-', abs(n - 1));
    }
#undef EMIT
}

static void print_float(tctx *c, tbuf *b, double f) {
    char tmp[64];
    if (f == 0 && signbit(f)) {
        tbuf_puts(c, b, "-0.0");
        return;
    }
    if (isfinite(f) && f == floor(f) && fabs(f) < 1e21)
        snprintf(tmp, sizeof tmp, "%.1f", f);
    else
        tpl_js_number(tmp, sizeof tmp, f);
    tbuf_puts(c, b, tmp);
}

void tv_print(tctx *c, tbuf *b, const tv *v) {
    switch (v->t) {
    case TV_UNDEF: case TV_NONE: return;
    case TV_BOOL: tbuf_puts(c, b, v->u.i ? "true" : "false"); return;
    case TV_INT: tbuf_printf(c, b, "%lld", (long long)v->u.i); return;
    case TV_FLOAT: print_float(c, b, v->u.f); return;
    case TV_STR: tbuf_put(c, b, v->u.s->p, v->u.s->n); return;
    case TV_FUNC: tbuf_printf(c, b, "<function %s>", v->u.fn->name ? v->u.fn->name : ""); return;
    default: {
        tpl_json_opts o = {0};
        tpl_json_write(c, b, v, &o, 0);
    }
    }
}

const tstr *tv_to_str(tctx *c, const tv *v) {
    if (v->t == TV_STR)
        return v->u.s;
    tbuf b = {0};
    tv_print(c, &b, v);
    return tbuf_str(c, &b);
}
