/* filters.c — the template builtins: global functions (range, namespace, raise_exception,
 * strftime_now, dict), methods of strings, lists and dicts, attribute lookup, filters and
 * tests. Semantics follow Jinja2 where @huggingface/jinja agrees and @huggingface/jinja
 * where it prints differently (true/false, floats, lists as JSON). Not the evaluator. */
#include "tpl.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

enum {
    /* globals */
    G_RANGE, G_NAMESPACE, G_RAISE, G_STRFTIME, G_DICT,
    /* string methods */
    M_UPPER, M_LOWER, M_STRIP, M_LSTRIP, M_RSTRIP, M_TITLE, M_CAPITALIZE, M_SPLIT, M_RSPLIT,
    M_STARTSWITH, M_ENDSWITH, M_REPLACE, M_FIND, M_RFIND, M_COUNT, M_JOIN, M_SPLITLINES,
    M_ISDIGIT, M_ISALPHA, M_ISSPACE, M_ISUPPER, M_ISLOWER, M_FORMAT,
    /* dict methods */
    M_ITEMS, M_KEYS, M_VALUES, M_GET, M_DICTSORT,
    /* list methods */
    M_APPEND, M_POP, M_EXTEND, M_INDEX, M_LCOUNT, M_INSERT
};

typedef struct named { const char *name; int id; } named;

static const named GLOBALS[] = {
    {"range", G_RANGE}, {"namespace", G_NAMESPACE}, {"raise_exception", G_RAISE},
    {"strftime_now", G_STRFTIME}, {"dict", G_DICT}, {NULL, 0}
};
static const named STR_METHODS[] = {
    {"upper", M_UPPER}, {"lower", M_LOWER}, {"strip", M_STRIP}, {"lstrip", M_LSTRIP},
    {"rstrip", M_RSTRIP}, {"title", M_TITLE}, {"capitalize", M_CAPITALIZE},
    {"split", M_SPLIT}, {"rsplit", M_RSPLIT}, {"startswith", M_STARTSWITH},
    {"endswith", M_ENDSWITH}, {"replace", M_REPLACE}, {"find", M_FIND}, {"rfind", M_RFIND},
    {"count", M_COUNT}, {"join", M_JOIN}, {"splitlines", M_SPLITLINES},
    {"isdigit", M_ISDIGIT}, {"isalpha", M_ISALPHA}, {"isspace", M_ISSPACE},
    {"isupper", M_ISUPPER}, {"islower", M_ISLOWER}, {"format", M_FORMAT}, {NULL, 0}
};
static const named DICT_METHODS[] = {
    {"items", M_ITEMS}, {"keys", M_KEYS}, {"values", M_VALUES}, {"get", M_GET},
    {"dictsort", M_DICTSORT}, {NULL, 0}
};
static const named LIST_METHODS[] = {
    {"append", M_APPEND}, {"pop", M_POP}, {"extend", M_EXTEND}, {"index", M_INDEX},
    {"count", M_LCOUNT}, {"insert", M_INSERT}, {NULL, 0}
};

static int find_id(const named *table, const char *name, size_t n) {
    for (int i = 0; table[i].name; i++)
        if (strlen(table[i].name) == n && memcmp(table[i].name, name, n) == 0)
            return table[i].id;
    return -1;
}

int tpl_global_id(const char *name) { return find_id(GLOBALS, name, strlen(name)); }

int tpl_method_id(int type, const char *name) {
    size_t n = strlen(name);
    switch (type) {
    case TV_STR: return find_id(STR_METHODS, name, n);
    case TV_DICT: return find_id(DICT_METHODS, name, n);
    case TV_LIST: return find_id(LIST_METHODS, name, n);
    default: return -1;
    }
}

static tv method(tpl_interp *I, tv self, int id, const char *name) {
    tfunc *fn = tpl_alloc(tpl_interp_ctx(I)->arena, tpl_interp_ctx(I)->fail, sizeof *fn);
    fn->kind = FN_BUILTIN;
    fn->id = id;
    fn->self = self;
    fn->name = name;
    tv r = {TV_FUNC, {.fn = fn}};
    return r;
}

tv tpl_getattr(tpl_interp *I, tv obj, const char *name, size_t n) {
    const named *table = NULL;
    switch (obj.t) {
    case TV_DICT: {
        tv *v = tdict_get(obj.u.d, name, n);
        if (v)
            return *v;
        table = DICT_METHODS;
        break;
    }
    case TV_NS: {
        tv *v = tdict_get(obj.u.d, name, n);
        return v ? *v : tv_undef();
    }
    case TV_STR:
        if (n == 6 && memcmp(name, "length", 6) == 0)
            return tv_int((int64_t)tpl_utf8_len(obj.u.s->p, obj.u.s->n));
        table = STR_METHODS;
        break;
    case TV_LIST:
        if (n == 6 && memcmp(name, "length", 6) == 0)
            return tv_int((int64_t)obj.u.l->n);
        table = LIST_METHODS;
        break;
    default:
        return tv_undef();
    }
    int id = find_id(table, name, n);
    return id < 0 ? tv_undef() : method(I, obj, id, table == STR_METHODS ? "str method"
                                                     : table == DICT_METHODS ? "dict method"
                                                                             : "list method");
}

/* ---- Argument helpers ------------------------------------------------------------------ */

typedef struct args { int argc; tv *argv; tdict *kw; } args;

/* Positional argument i, else keyword `name`, else NULL. */
static const tv *arg(const args *a, int i, const char *name) {
    if (i >= 0 && i < a->argc)
        return &a->argv[i];
    if (a->kw && name)
        return tdict_get(a->kw, name, strlen(name));
    return NULL;
}

static const tstr *arg_str(tpl_interp *I, const args *a, int i, const char *name,
                           const char *what) {
    const tv *v = arg(a, i, name);
    if (!v || v->t == TV_NONE || v->t == TV_UNDEF)
        return NULL;
    if (v->t != TV_STR)
        tctx_raise(tpl_interp_ctx(I), "%s: %s must be a string, not %s", what,
                   name ? name : "argument", tv_type_name(v));
    return v->u.s;
}

static int64_t arg_int(tpl_interp *I, const args *a, int i, const char *name, int64_t dflt,
                       const char *what) {
    const tv *v = arg(a, i, name);
    if (!v || v->t == TV_NONE || v->t == TV_UNDEF)
        return dflt;
    if (v->t != TV_INT && v->t != TV_BOOL)
        tctx_raise(tpl_interp_ctx(I), "%s: %s must be an integer, not %s", what,
                   name ? name : "argument", tv_type_name(v));
    return v->u.i;
}

static int arg_bool(const args *a, int i, const char *name, int dflt) {
    const tv *v = arg(a, i, name);
    return v ? tv_truthy(v) : dflt;
}

static tctx *C(tpl_interp *I) { return tpl_interp_ctx(I); }

/* ---- Strings -------------------------------------------------------------------------- */

typedef utf8proc_int32_t (*case_map)(utf8proc_int32_t);

static tv map_case(tpl_interp *I, const tstr *s, case_map f) {
    tbuf b = {0};
    for (size_t i = 0; i < s->n;) {
        size_t len;
        uint32_t cp = tpl_utf8_decode(s->p + i, s->n - i, &len);
        if (cp == 0xFFFD && len == 1) {
            tbuf_put(C(I), &b, s->p + i, 1);
        } else {
            char enc[4];
            tbuf_put(C(I), &b, enc, tpl_utf8_encode((uint32_t)f((utf8proc_int32_t)cp), enc));
        }
        i += len;
    }
    return tv_strv(tbuf_str(C(I), &b));
}

static int ascii_word(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_';
}

/* @huggingface/jinja's title(): an ASCII letter after a non-word character goes upper. */
static tv title_case(tpl_interp *I, const tstr *s) {
    tstr *r = (tstr *)tstr_new(C(I), s->p, s->n);
    for (size_t i = 0; i < r->n; i++)
        if (r->p[i] >= 'a' && r->p[i] <= 'z' && (i == 0 || !ascii_word(r->p[i - 1])))
            r->p[i] = (char)(r->p[i] - 32);
    return tv_strv(r);
}

static tv capitalize(tpl_interp *I, const tstr *s) {
    if (s->n == 0)
        return tv_strv(s);
    size_t len;
    uint32_t cp = tpl_utf8_decode(s->p, s->n, &len);
    tbuf b = {0};
    char enc[4];
    tbuf_put(C(I), &b, enc, tpl_utf8_encode((uint32_t)utf8proc_toupper((utf8proc_int32_t)cp), enc));
    tbuf_put(C(I), &b, s->p + len, s->n - len);
    return tv_strv(tbuf_str(C(I), &b));
}

static int in_set(const tstr *chars, const char *p, size_t len) {
    for (size_t i = 0; i < chars->n;) {
        size_t k = tpl_utf8_step(chars->p + i, chars->n - i);
        if (k == len && memcmp(chars->p + i, p, len) == 0)
            return 1;
        i += k;
    }
    return 0;
}

/* strip/lstrip/rstrip/trim: whitespace (JavaScript's set) or the given characters. */
static tv strip(tpl_interp *I, const tstr *s, const tstr *chars, int left, int right) {
    size_t a = 0, b = s->n;
    while (left && a < b) {
        size_t k = chars ? tpl_utf8_step(s->p + a, b - a) : tpl_space_at(s->p + a, b - a);
        if (!k || (chars && !in_set(chars, s->p + a, k)))
            break;
        a += k;
    }
    while (right && b > a) {
        size_t k;
        if (chars) {
            size_t st = b - 1;
            while (st > a && ((unsigned char)s->p[st] & 0xC0) == 0x80)
                st--;
            k = b - st;
            if (!in_set(chars, s->p + st, k))
                break;
        } else {
            k = tpl_space_before(s->p + a, b - a);
            if (!k)
                break;
        }
        b -= k;
    }
    return tv_str(C(I), s->p + a, b - a);
}

static const char *find_bytes(const tstr *s, size_t from, const tstr *sub) {
    if (from > s->n)
        return NULL;
    if (sub->n == 0)
        return s->p + from;
    return memmem(s->p + from, s->n - from, sub->p, sub->n);
}

static tv split(tpl_interp *I, const tstr *s, const tstr *sep, int64_t maxsplit) {
    tlist *l = tlist_new(C(I), 0);
    if (!sep) {
        size_t i = 0;
        for (;;) {
            size_t k;
            while (i < s->n && (k = tpl_space_at(s->p + i, s->n - i)) > 0)
                i += k;
            if (i >= s->n)
                break;
            if (maxsplit >= 0 && (int64_t)l->n >= maxsplit) {
                /* the rest, trailing whitespace included */
                tlist_push(C(I), l, tv_str(C(I), s->p + i, s->n - i));
                break;
            }
            size_t j = i;
            while (j < s->n && tpl_space_at(s->p + j, s->n - j) == 0)
                j += tpl_utf8_step(s->p + j, s->n - j);
            tlist_push(C(I), l, tv_str(C(I), s->p + i, j - i));
            i = j;
        }
        return tv_listv(l);
    }
    if (sep->n == 0)
        tctx_raise(C(I), "split: empty separator");
    size_t i = 0;
    for (;;) {
        const char *hit = (maxsplit < 0 || (int64_t)l->n < maxsplit) ? find_bytes(s, i, sep) : NULL;
        if (!hit) {
            tlist_push(C(I), l, tv_str(C(I), s->p + i, s->n - i));
            break;
        }
        size_t at = (size_t)(hit - s->p);
        tlist_push(C(I), l, tv_str(C(I), s->p + i, at - i));
        i = at + sep->n;
    }
    return tv_listv(l);
}

static tv rsplit(tpl_interp *I, const tstr *s, const tstr *sep, int64_t maxsplit) {
    if (!sep || maxsplit < 0)
        return split(I, s, sep, maxsplit);
    if (sep->n == 0)
        tctx_raise(C(I), "rsplit: empty separator");
    /* collect from the right, then reverse */
    tlist *rev = tlist_new(C(I), 0);
    size_t end = s->n;
    while ((int64_t)rev->n < maxsplit) {
        const char *hit = NULL;
        for (size_t j = end; j >= sep->n; j--)
            if (memcmp(s->p + j - sep->n, sep->p, sep->n) == 0) {
                hit = s->p + j - sep->n;
                break;
            }
        if (!hit)
            break;
        size_t at = (size_t)(hit - s->p);
        tlist_push(C(I), rev, tv_str(C(I), s->p + at + sep->n, end - at - sep->n));
        end = at;
    }
    tlist *l = tlist_new(C(I), rev->n + 1);
    tlist_push(C(I), l, tv_str(C(I), s->p, end));
    for (size_t k = rev->n; k-- > 0;)
        tlist_push(C(I), l, rev->v[k]);
    return tv_listv(l);
}

static tv replace(tpl_interp *I, const tstr *s, const tstr *old, const tstr *new_, int64_t count) {
    tbuf b = {0};
    size_t i = 0;
    int64_t done = 0;
    if (old->n == 0) {
        /* Python inserts the replacement between characters and at both ends */
        for (;;) {
            if (count >= 0 && done >= count)
                break;
            tbuf_put(C(I), &b, new_->p, new_->n);
            done++;
            if (i >= s->n)
                break;
            size_t k = tpl_utf8_step(s->p + i, s->n - i);
            tbuf_put(C(I), &b, s->p + i, k);
            i += k;
        }
        tbuf_put(C(I), &b, s->p + i, s->n - i);
        return tv_strv(tbuf_str(C(I), &b));
    }
    for (;;) {
        const char *hit = (count < 0 || done < count) ? find_bytes(s, i, old) : NULL;
        if (!hit)
            break;
        size_t at = (size_t)(hit - s->p);
        tbuf_put(C(I), &b, s->p + i, at - i);
        tbuf_put(C(I), &b, new_->p, new_->n);
        i = at + old->n;
        done++;
    }
    tbuf_put(C(I), &b, s->p + i, s->n - i);
    return tv_strv(tbuf_str(C(I), &b));
}

static int affix(tpl_interp *I, const tstr *s, const tv *pat, int end, const char *what) {
    if (pat->t == TV_LIST) {
        for (size_t i = 0; i < pat->u.l->n; i++)
            if (affix(I, s, &pat->u.l->v[i], end, what))
                return 1;
        return 0;
    }
    if (pat->t != TV_STR)
        tctx_raise(C(I), "%s: argument must be a string or a tuple of strings, not %s", what,
                   tv_type_name(pat));
    const tstr *p = pat->u.s;
    if (p->n > s->n)
        return 0;
    return memcmp(end ? s->p + s->n - p->n : s->p, p->p, p->n) == 0;
}

static size_t count_sub(const tstr *s, const tstr *sub) {
    if (sub->n == 0)
        return tpl_utf8_len(s->p, s->n) + 1;
    size_t count = 0;
    for (const char *h = find_bytes(s, 0, sub); h; h = find_bytes(s, (size_t)(h - s->p) + sub->n, sub))
        count++;
    return count;
}

static int64_t char_index(const tstr *s, size_t byte) { return (int64_t)tpl_utf8_len(s->p, byte); }

static tv join_items(tpl_interp *I, const tlist *l, const tstr *sep, const tstr *attr);

/* "{} {}".format(a, b), "{0}", "{name}": the plain substitutions, no format specs. */
static tv format(tpl_interp *I, const tstr *s, const args *a) {
    tbuf b = {0};
    int next = 0;
    for (size_t i = 0; i < s->n; i++) {
        char ch = s->p[i];
        if ((ch == '{' || ch == '}') && i + 1 < s->n && s->p[i + 1] == ch) {
            tbuf_putc(C(I), &b, ch);
            i++;
            continue;
        }
        if (ch != '{') {
            tbuf_putc(C(I), &b, ch);
            continue;
        }
        const char *close = memchr(s->p + i, '}', s->n - i);
        if (!close)
            tctx_raise(C(I), "format: single '{' in the format string");
        size_t fl = (size_t)(close - s->p) - i - 1;
        const char *field = s->p + i + 1;
        const tv *v;
        if (fl == 0) {
            v = arg(a, next++, NULL);
        } else if (field[0] >= '0' && field[0] <= '9') {
            v = arg(a, atoi(field), NULL);
        } else {
            v = a->kw ? tdict_get(a->kw, field, fl) : NULL;
        }
        if (!v)
            tctx_raise(C(I), "format: no value for the field {%.*s}", (int)fl, field);
        tv_print(C(I), &b, v);
        i += fl + 1;
    }
    return tv_strv(tbuf_str(C(I), &b));
}

static int all_chars(const tstr *s, int kind) {
    if (s->n == 0)
        return 0;
    int cased = 0;
    for (size_t i = 0; i < s->n;) {
        size_t len;
        uint32_t cp = tpl_utf8_decode(s->p + i, s->n - i, &len);
        utf8proc_category_t cat = utf8proc_category((utf8proc_int32_t)cp);
        switch (kind) {
        case 0: if (cat != UTF8PROC_CATEGORY_ND) return 0; break;
        case 1: if (cat < UTF8PROC_CATEGORY_LU || cat > UTF8PROC_CATEGORY_LO) return 0; break;
        case 2: if (!tpl_space_at(s->p + i, s->n - i)) return 0; break;
        case 3: if (cat == UTF8PROC_CATEGORY_LL) return 0; cased |= cat == UTF8PROC_CATEGORY_LU; break;
        case 4: if (cat == UTF8PROC_CATEGORY_LU) return 0; cased |= cat == UTF8PROC_CATEGORY_LL; break;
        }
        i += len;
    }
    return kind >= 3 ? cased : 1;
}

static tv string_method(tpl_interp *I, int id, const tstr *s, const args *a) {
    switch (id) {
    case M_UPPER: return map_case(I, s, utf8proc_toupper);
    case M_LOWER: return map_case(I, s, utf8proc_tolower);
    case M_STRIP: return strip(I, s, arg_str(I, a, 0, "chars", "strip"), 1, 1);
    case M_LSTRIP: return strip(I, s, arg_str(I, a, 0, "chars", "lstrip"), 1, 0);
    case M_RSTRIP: return strip(I, s, arg_str(I, a, 0, "chars", "rstrip"), 0, 1);
    case M_TITLE: return title_case(I, s);
    case M_CAPITALIZE: return capitalize(I, s);
    case M_SPLIT:
        return split(I, s, arg_str(I, a, 0, "sep", "split"), arg_int(I, a, 1, "maxsplit", -1, "split"));
    case M_RSPLIT:
        return rsplit(I, s, arg_str(I, a, 0, "sep", "rsplit"), arg_int(I, a, 1, "maxsplit", -1, "rsplit"));
    case M_STARTSWITH: case M_ENDSWITH: {
        const tv *p = arg(a, 0, "prefix");
        if (!p)
            tctx_raise(C(I), "%s() takes a string argument", id == M_STARTSWITH ? "startswith" : "endswith");
        return tv_bool(affix(I, s, p, id == M_ENDSWITH, id == M_STARTSWITH ? "startswith" : "endswith"));
    }
    case M_REPLACE: {
        const tstr *old = arg_str(I, a, 0, "old", "replace"), *new_ = arg_str(I, a, 1, "new", "replace");
        if (!old || !new_)
            tctx_raise(C(I), "replace() takes two string arguments");
        return replace(I, s, old, new_, arg_int(I, a, 2, "count", -1, "replace"));
    }
    case M_FIND: case M_RFIND: {
        const tstr *sub = arg_str(I, a, 0, "sub", "find");
        if (!sub)
            tctx_raise(C(I), "find() takes a string argument");
        const char *hit = NULL;
        if (id == M_FIND) {
            hit = find_bytes(s, 0, sub);
        } else {
            for (size_t j = s->n + 1; j-- > sub->n;)
                if (memcmp(s->p + j - sub->n, sub->p, sub->n) == 0) {
                    hit = s->p + j - sub->n;
                    break;
                }
        }
        return tv_int(hit ? char_index(s, (size_t)(hit - s->p)) : -1);
    }
    case M_COUNT: {
        const tstr *sub = arg_str(I, a, 0, "sub", "count");
        if (!sub)
            tctx_raise(C(I), "count() takes a string argument");
        return tv_int((int64_t)count_sub(s, sub));
    }
    case M_JOIN: {
        const tv *l = arg(a, 0, "iterable");
        if (!l || l->t != TV_LIST)
            tctx_raise(C(I), "join() takes a list");
        return join_items(I, l->u.l, s, NULL);
    }
    case M_SPLITLINES: {
        tlist *l = tlist_new(C(I), 0);
        size_t i = 0, start = 0;
        while (i < s->n) {
            if (s->p[i] == '\n' || s->p[i] == '\r') {
                tlist_push(C(I), l, tv_str(C(I), s->p + start, i - start));
                if (s->p[i] == '\r' && i + 1 < s->n && s->p[i + 1] == '\n')
                    i++;
                start = ++i;
            } else {
                i++;
            }
        }
        if (start < s->n)
            tlist_push(C(I), l, tv_str(C(I), s->p + start, s->n - start));
        return tv_listv(l);
    }
    case M_ISDIGIT: return tv_bool(all_chars(s, 0));
    case M_ISALPHA: return tv_bool(all_chars(s, 1));
    case M_ISSPACE: return tv_bool(all_chars(s, 2));
    case M_ISUPPER: return tv_bool(all_chars(s, 3));
    case M_ISLOWER: return tv_bool(all_chars(s, 4));
    case M_FORMAT: return format(I, s, a);
    }
    tctx_raise(C(I), "unknown string method");
}

/* ---- Lists and dicts ------------------------------------------------------------------- */

static tv pairs(tpl_interp *I, const tdict *d) {
    tlist *l = tlist_new(C(I), d->n);
    for (size_t i = 0; i < d->n; i++) {
        tlist *p = tlist_new(C(I), 2);
        p->tuple = 1;
        tlist_push(C(I), p, tv_strv(d->kv[i].k));
        tlist_push(C(I), p, d->kv[i].v);
        tlist_push(C(I), l, tv_listv(p));
    }
    return tv_listv(l);
}

static tv keys_of(tpl_interp *I, const tdict *d) {
    tlist *l = tlist_new(C(I), d->n);
    for (size_t i = 0; i < d->n; i++)
        tlist_push(C(I), l, tv_strv(d->kv[i].k));
    return tv_listv(l);
}

static tv values_of(tpl_interp *I, const tdict *d) {
    tlist *l = tlist_new(C(I), d->n);
    for (size_t i = 0; i < d->n; i++)
        tlist_push(C(I), l, d->kv[i].v);
    return tv_listv(l);
}

/* Stable merge sort (qsort cannot be left by the longjmp of a failed comparison). */
typedef struct sort_key { tv key; tv item; } sort_key;

static void merge_sort(tpl_interp *I, sort_key *v, sort_key *tmp, size_t n, int cs, int rev) {
    if (n < 2)
        return;
    size_t h = n / 2;
    merge_sort(I, v, tmp, h, cs, rev);
    merge_sort(I, v + h, tmp, n - h, cs, rev);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int r = tv_compare(C(I), &v[j].key, &v[i].key, cs);
        if (rev)
            r = -r;
        tmp[k++] = r < 0 ? v[j++] : v[i++];
    }
    while (i < h) tmp[k++] = v[i++];
    while (j < n) tmp[k++] = v[j++];
    memcpy(v, tmp, n * sizeof *v);
}

/* An attribute path "a.b.0" of an item, as Jinja's make_attrgetter reads it. */
static tv attr_path(tpl_interp *I, tv item, const tstr *path) {
    size_t i = 0;
    while (i <= path->n) {
        const char *dot = memchr(path->p + i, '.', path->n - i);
        size_t end = dot ? (size_t)(dot - path->p) : path->n;
        const char *part = path->p + i;
        size_t len = end - i;
        int numeric = len > 0;
        for (size_t k = 0; k < len; k++)
            numeric &= part[k] >= '0' && part[k] <= '9';
        if (numeric && item.t == TV_LIST) {
            long long idx = atoll(part);
            item = idx >= 0 && (size_t)idx < item.u.l->n ? item.u.l->v[idx] : tv_undef();
        } else {
            item = tpl_getattr(I, item, part, len);
        }
        if (!dot)
            break;
        i = end + 1;
    }
    return item;
}

static tv sorted(tpl_interp *I, const tlist *l, int rev, int cs, const tstr *attr) {
    sort_key *v = tpl_alloc(C(I)->arena, C(I)->fail, (l->n + 1) * sizeof *v);
    sort_key *tmp = tpl_alloc(C(I)->arena, C(I)->fail, (l->n + 1) * sizeof *tmp);
    for (size_t i = 0; i < l->n; i++) {
        v[i].item = l->v[i];
        v[i].key = attr ? attr_path(I, l->v[i], attr) : l->v[i];
    }
    merge_sort(I, v, tmp, l->n, cs, rev);
    tlist *r = tlist_new(C(I), l->n);
    for (size_t i = 0; i < l->n; i++)
        tlist_push(C(I), r, v[i].item);
    return tv_listv(r);
}

static tv dictsort(tpl_interp *I, const tdict *d, const args *a) {
    int cs = arg_bool(a, 0, "case_sensitive", 0);
    const tstr *by = arg_str(I, a, 1, "by", "dictsort");
    int rev = arg_bool(a, 2, "reverse", 0);
    int by_value = 0;
    if (by && strcmp(by->p, "value") == 0)
        by_value = 1;
    else if (by && strcmp(by->p, "key") != 0)
        tctx_raise(C(I), "dictsort: 'by' must be 'key' or 'value'");
    tv items = pairs(I, d);
    sort_key *v = tpl_alloc(C(I)->arena, C(I)->fail, (d->n + 1) * sizeof *v);
    sort_key *tmp = tpl_alloc(C(I)->arena, C(I)->fail, (d->n + 1) * sizeof *tmp);
    for (size_t i = 0; i < d->n; i++) {
        v[i].item = items.u.l->v[i];
        v[i].key = by_value ? d->kv[i].v : tv_strv(d->kv[i].k);
    }
    merge_sort(I, v, tmp, d->n, cs, rev);
    for (size_t i = 0; i < d->n; i++)
        items.u.l->v[i] = v[i].item;
    return items;
}

static tv dict_method(tpl_interp *I, int id, tdict *d, const args *a) {
    switch (id) {
    case M_ITEMS: return pairs(I, d);
    case M_KEYS: return keys_of(I, d);
    case M_VALUES: return values_of(I, d);
    case M_GET: {
        const tv *k = arg(a, 0, "key");
        if (!k || k->t != TV_STR)
            tctx_raise(C(I), "get() takes a string key");
        tv *v = tdict_get(d, k->u.s->p, k->u.s->n);
        if (v)
            return *v;
        const tv *dflt = arg(a, 1, "default");
        return dflt ? *dflt : tv_none();
    }
    case M_DICTSORT: return dictsort(I, d, a);
    }
    tctx_raise(C(I), "unknown dict method");
}

static tv list_method(tpl_interp *I, int id, tlist *l, const args *a) {
    switch (id) {
    case M_APPEND: {
        const tv *v = arg(a, 0, NULL);
        if (!v)
            tctx_raise(C(I), "append() takes one argument");
        tlist_push(C(I), l, *v);
        return tv_none();
    }
    case M_EXTEND: {
        const tv *v = arg(a, 0, NULL);
        if (!v || v->t != TV_LIST)
            tctx_raise(C(I), "extend() takes a list");
        tlist *src = v->u.l;
        size_t n = src->n;
        for (size_t i = 0; i < n; i++)
            tlist_push(C(I), l, src->v[i]);
        return tv_none();
    }
    case M_POP: {
        if (l->n == 0)
            tctx_raise(C(I), "pop from empty list");
        int64_t i = arg_int(I, a, 0, NULL, -1, "pop");
        if (i < 0)
            i += (int64_t)l->n;
        if (i < 0 || (size_t)i >= l->n)
            tctx_raise(C(I), "pop index out of range");
        tv v = l->v[i];
        memmove(l->v + i, l->v + i + 1, (l->n - (size_t)i - 1) * sizeof(tv));
        l->n--;
        return v;
    }
    case M_INSERT: {
        int64_t i = arg_int(I, a, 0, NULL, 0, "insert");
        const tv *v = arg(a, 1, NULL);
        if (!v)
            tctx_raise(C(I), "insert() takes an index and a value");
        if (i < 0)
            i += (int64_t)l->n;
        if (i < 0)
            i = 0;
        if ((size_t)i > l->n)
            i = (int64_t)l->n;
        tlist_push(C(I), l, *v);
        memmove(l->v + i + 1, l->v + i, (l->n - 1 - (size_t)i) * sizeof(tv));
        l->v[i] = *v;
        return tv_none();
    }
    case M_INDEX: case M_LCOUNT: {
        const tv *v = arg(a, 0, NULL);
        if (!v)
            tctx_raise(C(I), "%s() takes one argument", id == M_INDEX ? "index" : "count");
        int64_t count = 0;
        for (size_t i = 0; i < l->n; i++)
            if (tv_equal(&l->v[i], v)) {
                if (id == M_INDEX)
                    return tv_int((int64_t)i);
                count++;
            }
        if (id == M_INDEX)
            tctx_raise(C(I), "index(): value is not in the list");
        return tv_int(count);
    }
    }
    tctx_raise(C(I), "unknown list method");
}

/* ---- Globals -------------------------------------------------------------------------- */

static tv range_fn(tpl_interp *I, const args *a) {
    int64_t start = 0, stop, stepv = 1;
    if (a->argc == 1) {
        stop = arg_int(I, a, 0, NULL, 0, "range");
    } else if (a->argc == 2 || a->argc == 3) {
        start = arg_int(I, a, 0, NULL, 0, "range");
        stop = arg_int(I, a, 1, NULL, 0, "range");
        stepv = arg_int(I, a, 2, NULL, 1, "range");
    } else {
        tctx_raise(C(I), "range() takes 1 to 3 integer arguments");
    }
    if (stepv == 0)
        tctx_raise(C(I), "range() step must not be zero");
    double count = ceil(((double)stop - (double)start) / (double)stepv);
    if (count > 10000000)
        tctx_raise(C(I), "range() of more than 10000000 items");
    tlist *l = tlist_new(C(I), count > 0 ? (size_t)count : 0);
    for (int64_t i = start; stepv > 0 ? i < stop : i > stop; i += stepv) {
        tlist_push(C(I), l, tv_int(i));
        if ((stepv > 0 && i > INT64_MAX - stepv) || (stepv < 0 && i < INT64_MIN - stepv))
            break;
    }
    return tv_listv(l);
}

static tv namespace_fn(tpl_interp *I, const args *a) {
    tdict *d = tdict_new(C(I), 0);
    if (a->argc > 1)
        tctx_raise(C(I), "namespace() takes at most one positional argument");
    if (a->argc == 1) {
        const tv *src = &a->argv[0];
        if (src->t == TV_DICT || src->t == TV_NS) {
            for (size_t i = 0; i < src->u.d->n; i++)
                tdict_set(C(I), d, src->u.d->kv[i].k, src->u.d->kv[i].v);
        } else if (src->t == TV_LIST) {
            for (size_t i = 0; i < src->u.l->n; i++) {
                const tv *p = &src->u.l->v[i];
                if (p->t != TV_LIST || p->u.l->n != 2 || p->u.l->v[0].t != TV_STR)
                    tctx_raise(C(I), "namespace() expects a mapping or (key, value) pairs");
                tdict_set(C(I), d, p->u.l->v[0].u.s, p->u.l->v[1]);
            }
        } else {
            tctx_raise(C(I), "namespace() expects a mapping, not %s", tv_type_name(src));
        }
    }
    for (size_t i = 0; a->kw && i < a->kw->n; i++)
        tdict_set(C(I), d, a->kw->kv[i].k, a->kw->kv[i].v);
    tv r = {TV_NS, {.d = d}};
    return r;
}

static tv strftime_fn(tpl_interp *I, const args *a) {
    const tstr *fmt = arg_str(I, a, 0, "format", "strftime_now");
    if (!fmt)
        tctx_raise(C(I), "strftime_now() takes a format string");
    /* SOURCE_DATE_EPOCH (the reproducible-builds convention) fixes "now" in UTC, so
     * renders of date-stamped templates can be compared with references */
    const char *epoch = getenv("SOURCE_DATE_EPOCH");
    time_t now = epoch && *epoch ? (time_t)strtoll(epoch, NULL, 10) : time(NULL);
    struct tm tm;
    if (epoch && *epoch)
        gmtime_r(&now, &tm);
    else
        localtime_r(&now, &tm);
    char out[512];
    size_t n = fmt->n < 200 ? strftime(out, sizeof out, fmt->p, &tm) : 0;
    return tv_str(C(I), out, n);
}

tv tpl_builtin_call(tpl_interp *I, tfunc *fn, int argc, tv *argv, tdict *kw) {
    args a = {argc, argv, kw};
    switch (fn->id) {
    case G_RANGE: return range_fn(I, &a);
    case G_NAMESPACE: return namespace_fn(I, &a);
    case G_RAISE: {
        const tv *m = arg(&a, 0, NULL);
        tbuf b = {0};
        if (m)
            tv_print(C(I), &b, m);
        tctx *c = C(I);
        /* an error always says something, even for raise_exception("") or a message that
         * starts with a NUL character */
        if (!b.p || !b.p[0])
            snprintf(c->fail->message, sizeof c->fail->message,
                     "the chat template raised an exception without a message");
        else
            snprintf(c->fail->message, sizeof c->fail->message, "%s", b.p);
        c->fail->code = TM_ERR_INVALID_ARGUMENT;
        c->fail->line = -c->line;   /* negative: the template's own message, kept as is */
        longjmp(c->fail->jump, 1);
    }
    case G_STRFTIME: return strftime_fn(I, &a);
    case G_DICT: {
        tdict *d = tdict_new(C(I), 0);
        for (size_t i = 0; kw && i < kw->n; i++)
            tdict_set(C(I), d, kw->kv[i].k, kw->kv[i].v);
        return tv_dictv(d);
    }
    }
    if (fn->self.t == TV_STR)
        return string_method(I, fn->id, fn->self.u.s, &a);
    if (fn->self.t == TV_DICT)
        return dict_method(I, fn->id, fn->self.u.d, &a);
    if (fn->self.t == TV_LIST)
        return list_method(I, fn->id, fn->self.u.l, &a);
    tctx_raise(C(I), "unknown builtin");
}

/* ---- Tests ---------------------------------------------------------------------------- */

static int is_lower_or_upper(tpl_interp *I, const tv *v, case_map f) {
    if (v->t != TV_STR)
        return 0;
    tv m = map_case(I, v->u.s, f);
    return m.u.s->n == v->u.s->n && memcmp(m.u.s->p, v->u.s->p, m.u.s->n) == 0;
}

static int compare_test(tpl_interp *I, const tv *a, const tv *b, int op) {
    int ok = (a->t == TV_STR && b->t == TV_STR) ||
             ((a->t == TV_INT || a->t == TV_FLOAT || a->t == TV_BOOL) &&
              (b->t == TV_INT || b->t == TV_FLOAT || b->t == TV_BOOL));
    if (!ok)
        tctx_raise(C(I), "cannot compare %s with %s", tv_type_name(a), tv_type_name(b));
    int r = tv_compare(C(I), a, b, 1);
    return op == 0 ? r < 0 : op == 1 ? r <= 0 : op == 2 ? r > 0 : r >= 0;
}

int tpl_test(tpl_interp *I, const char *name, tv v, int argc, tv *argv) {
    const tv *x = argc > 0 ? &argv[0] : NULL;
#define IS(n) (strcmp(name, n) == 0)
    if (IS("defined")) return v.t != TV_UNDEF;
    if (IS("undefined")) return v.t == TV_UNDEF;
    if (IS("none")) return v.t == TV_NONE;
    if (IS("boolean")) return v.t == TV_BOOL;
    if (IS("true")) return v.t == TV_BOOL && v.u.i;
    if (IS("false")) return v.t == TV_BOOL && !v.u.i;
    if (IS("string")) return v.t == TV_STR;
    if (IS("number")) return v.t == TV_INT || v.t == TV_FLOAT;
    if (IS("integer")) return v.t == TV_INT;
    if (IS("float")) return v.t == TV_FLOAT;
    if (IS("mapping")) return v.t == TV_DICT;
    if (IS("iterable")) return v.t == TV_LIST || v.t == TV_STR || v.t == TV_DICT;
    if (IS("sequence")) return v.t == TV_LIST || v.t == TV_STR || v.t == TV_DICT;
    if (IS("callable")) return v.t == TV_FUNC;
    if (IS("lower")) return is_lower_or_upper(I, &v, utf8proc_tolower);
    if (IS("upper")) return is_lower_or_upper(I, &v, utf8proc_toupper);
    if (IS("escaped")) return 0;
    if (IS("odd") || IS("even")) {
        if (v.t != TV_INT && v.t != TV_BOOL)
            tctx_raise(C(I), "test '%s' needs an integer, not %s", name, tv_type_name(&v));
        return (v.u.i % 2 != 0) == IS("odd");
    }
    if (IS("divisibleby")) {
        if (!x || (x->t != TV_INT && x->t != TV_BOOL) || (v.t != TV_INT && v.t != TV_BOOL))
            tctx_raise(C(I), "test 'divisibleby' needs integers");
        if (x->u.i == 0)
            tctx_raise(C(I), "test 'divisibleby': division by zero");
        return x->u.i == -1 || v.u.i % x->u.i == 0;
    }
    if (IS("filter") || IS("test")) {
        static const char *const filters[] = {"abs", "attr", "batch", "bool", "capitalize",
            "center", "count", "d", "default", "dictsort", "e", "escape", "first", "float",
            "groupby", "indent", "int", "items", "join", "keys", "last", "length", "list",
            "lower", "map", "max", "min", "reject", "rejectattr", "replace", "reverse",
            "round", "safe", "select", "selectattr", "sort", "string", "sum", "title",
            "tojson", "trim", "unique", "upper", "values", "wordcount", NULL};
        static const char *const tests[] = {"defined", "undefined", "none", "boolean", "true",
            "false", "string", "number", "integer", "float", "mapping", "iterable",
            "sequence", "callable", "lower", "upper", "escaped", "odd", "even",
            "divisibleby", "filter", "test", "equalto", "eq", "==", "ne", "!=", "sameas",
            "lt", "<", "lessthan", "le", "<=", "gt", ">", "greaterthan", "ge", ">=", "in",
            NULL};
        if (v.t != TV_STR)
            return 0;
        const char *const *list = IS("filter") ? filters : tests;
        for (int i = 0; list[i]; i++)
            if (strcmp(list[i], v.u.s->p) == 0)
                return 1;
        return 0;
    }
    if (!x)
        tctx_raise(C(I), "unknown test '%s' or it needs an argument", name);
    if (IS("equalto") || IS("eq") || IS("==")) return tv_equal(&v, x);
    if (IS("ne") || IS("!=")) return !tv_equal(&v, x);
    if (IS("sameas")) {
        if (v.t != x->t) return 0;
        if (v.t == TV_LIST || v.t == TV_DICT || v.t == TV_NS || v.t == TV_FUNC)
            return v.u.l == x->u.l;
        return tv_equal(&v, x);
    }
    if (IS("lt") || IS("<") || IS("lessthan")) return compare_test(I, &v, x, 0);
    if (IS("le") || IS("<=")) return compare_test(I, &v, x, 1);
    if (IS("gt") || IS(">") || IS("greaterthan")) return compare_test(I, &v, x, 2);
    if (IS("ge") || IS(">=")) return compare_test(I, &v, x, 3);
    if (IS("in")) {
        if (x->t == TV_LIST) {
            for (size_t i = 0; i < x->u.l->n; i++)
                if (tv_equal(&v, &x->u.l->v[i]))
                    return 1;
            return 0;
        }
        if (x->t == TV_STR && v.t == TV_STR)
            return memmem(x->u.s->p, x->u.s->n, v.u.s->p, v.u.s->n) != NULL || v.u.s->n == 0;
        if (x->t == TV_DICT && v.t == TV_STR)
            return tdict_get(x->u.d, v.u.s->p, v.u.s->n) != NULL;
        return 0;
    }
#undef IS
    tctx_raise(C(I), "unknown test '%s'", name);
}

/* ---- Filters -------------------------------------------------------------------------- */

static tv join_items(tpl_interp *I, const tlist *l, const tstr *sep, const tstr *attr) {
    tbuf b = {0};
    for (size_t i = 0; i < l->n; i++) {
        if (i && sep)
            tbuf_put(C(I), &b, sep->p, sep->n);
        tv item = attr ? attr_path(I, l->v[i], attr) : l->v[i];
        tv_print(C(I), &b, &item);
    }
    return tv_strv(tbuf_str(C(I), &b));
}

static tlist *as_list(tpl_interp *I, const tv *v, const char *filter) {
    switch (v->t) {
    case TV_LIST: return v->u.l;
    case TV_DICT: case TV_NS: return keys_of(I, v->u.d).u.l;
    case TV_UNDEF: return tlist_new(C(I), 0);
    case TV_STR: {
        tlist *l = tlist_new(C(I), 0);
        for (size_t i = 0; i < v->u.s->n;) {
            size_t k = tpl_utf8_step(v->u.s->p + i, v->u.s->n - i);
            tlist_push(C(I), l, tv_str(C(I), v->u.s->p + i, k));
            i += k;
        }
        return l;
    }
    default:
        tctx_raise(C(I), "filter '%s' needs a list, not %s", filter, tv_type_name(v));
    }
}

static tv to_int(tpl_interp *I, const tv *v, tv dflt) {
    switch (v->t) {
    case TV_INT: return *v;
    case TV_BOOL: return tv_int(v->u.i);
    case TV_FLOAT:
        if (!isfinite(v->u.f) || fabs(v->u.f) >= 9.2e18)
            return dflt;
        return tv_int((int64_t)v->u.f);
    case TV_STR: {
        tv t = strip(I, v->u.s, NULL, 1, 1);
        const char *p = t.u.s->p;
        char *end;
        if (t.u.s->n == 0)
            return dflt;
        long long x = strtoll(p, &end, 10);
        if (*end == 0)
            return tv_int(x);
        double f = strtod(p, &end);
        if (*end == 0 && isfinite(f) && fabs(f) < 9.2e18)
            return tv_int((int64_t)f);
        return dflt;
    }
    default: return dflt;
    }
}

static tv to_float(tpl_interp *I, const tv *v, tv dflt) {
    switch (v->t) {
    case TV_INT: case TV_BOOL: return tv_float((double)v->u.i);
    case TV_FLOAT: return *v;
    case TV_STR: {
        tv t = strip(I, v->u.s, NULL, 1, 1);
        char *end;
        if (t.u.s->n == 0)
            return dflt;
        double f = strtod(t.u.s->p, &end);
        return *end == 0 ? tv_float(f) : dflt;
    }
    default: return dflt;
    }
}

static tv indent(tpl_interp *I, const tstr *s, const args *a) {
    const tv *w = arg(a, 0, "width");
    tbuf pad = {0};
    if (w && w->t == TV_STR) {
        tbuf_put(C(I), &pad, w->u.s->p, w->u.s->n);
    } else {
        int64_t width = arg_int(I, a, 0, "width", 4, "indent");
        for (int64_t i = 0; i < width && i < 1000; i++)
            tbuf_putc(C(I), &pad, ' ');
    }
    int first = arg_bool(a, 1, "first", 0), blank = arg_bool(a, 2, "blank", 0);
    tbuf b = {0};
    size_t start = 0;
    for (int line = 0;; line++) {
        const char *nl = memchr(s->p + start, '\n', s->n - start);
        size_t end = nl ? (size_t)(nl - s->p) : s->n;
        if ((line > 0 || first) && (end > start || blank))
            tbuf_put(C(I), &b, pad.p ? pad.p : "", pad.n);
        tbuf_put(C(I), &b, s->p + start, end - start);
        if (!nl)
            break;
        tbuf_putc(C(I), &b, '\n');
        start = end + 1;
    }
    return tv_strv(tbuf_str(C(I), &b));
}

static tv tojson(tpl_interp *I, const tv *v, const args *a) {
    tpl_json_opts o = {0};
    o.indent = (int)arg_int(I, a, 0, "indent", 0, "tojson");
    if (o.indent > 100)
        o.indent = 100;
    o.ensure_ascii = arg_bool(a, -1, "ensure_ascii", 0);
    o.sort_keys = arg_bool(a, -1, "sort_keys", 0);
    o.for_tojson = 1;
    const tv *sep = arg(a, -1, "separators");
    if (sep && sep->t == TV_LIST) {
        if (sep->u.l->n != 2 || sep->u.l->v[0].t != TV_STR || sep->u.l->v[1].t != TV_STR)
            tctx_raise(C(I), "tojson: separators must be two strings");
        o.item_sep = sep->u.l->v[0].u.s->p;
        o.key_sep = sep->u.l->v[1].u.s->p;
    }
    tbuf b = {0};
    tpl_json_write(C(I), &b, v, &o, 0);
    return tv_strv(tbuf_str(C(I), &b));
}

/* select/reject/selectattr/rejectattr: keep the items whose test (or truth) is `want`. */
static tv select_items(tpl_interp *I, const tv *v, const args *a, int by_attr, int want,
                       const char *filter) {
    tlist *l = as_list(I, v, filter);
    int first = 0;
    const tstr *attr = NULL;
    if (by_attr) {
        attr = arg_str(I, a, 0, NULL, filter);
        if (!attr)
            tctx_raise(C(I), "%s needs an attribute name", filter);
        first = 1;
    }
    const tstr *test = arg_str(I, a, first, NULL, filter);
    int targc = a->argc > first + 1 ? a->argc - first - 1 : 0;
    tv *targv = targc ? a->argv + first + 1 : NULL;   /* argv is NULL without arguments */
    tlist *r = tlist_new(C(I), 0);
    for (size_t i = 0; i < l->n; i++) {
        tv item = attr ? attr_path(I, l->v[i], attr) : l->v[i];
        int ok = test ? tpl_test(I, test->p, item, targc, targv) : tv_truthy(&item);
        if (ok == want)
            tlist_push(C(I), r, l->v[i]);
    }
    return tv_listv(r);
}

static tv map_items(tpl_interp *I, const tv *v, const args *a, tpl_scope *s) {
    tlist *l = as_list(I, v, "map");
    tlist *r = tlist_new(C(I), l->n);
    const tv *attr = a->kw ? tdict_get(a->kw, "attribute", 9) : NULL;
    if (attr) {
        if (attr->t != TV_STR)
            tctx_raise(C(I), "map: attribute must be a string");
        const tv *dflt = tdict_get(a->kw, "default", 7);
        for (size_t i = 0; i < l->n; i++) {
            tv x = attr_path(I, l->v[i], attr->u.s);
            tlist_push(C(I), r, x.t == TV_UNDEF && dflt ? *dflt : x);
        }
        return tv_listv(r);
    }
    const tstr *name = arg_str(I, a, 0, NULL, "map");
    if (!name)
        tctx_raise(C(I), "map needs a filter name or attribute=");
    for (size_t i = 0; i < l->n; i++)
        tlist_push(C(I), r, tpl_filter(I, name->p, l->v[i], a->argc - 1, a->argv + 1, NULL, s));
    return tv_listv(r);
}

static tv min_max(tpl_interp *I, const tv *v, const args *a, int want_max) {
    tlist *l = as_list(I, v, want_max ? "max" : "min");
    int cs = arg_bool(a, 0, "case_sensitive", 0);
    const tstr *attr = arg_str(I, a, 1, "attribute", "min/max");
    if (l->n == 0)
        return tv_undef();
    size_t best = 0;
    tv bk = attr ? attr_path(I, l->v[0], attr) : l->v[0];
    for (size_t i = 1; i < l->n; i++) {
        tv k = attr ? attr_path(I, l->v[i], attr) : l->v[i];
        int r = tv_compare(C(I), &k, &bk, cs);
        if (want_max ? r > 0 : r < 0) {
            best = i;
            bk = k;
        }
    }
    return l->v[best];
}

static tv sum_items(tpl_interp *I, const tv *v, const args *a) {
    tlist *l = as_list(I, v, "sum");
    const tstr *attr = arg_str(I, a, 0, "attribute", "sum");
    const tv *start = arg(a, 1, "start");
    tv acc = start ? *start : tv_int(0);
    for (size_t i = 0; i < l->n; i++) {
        tv x = attr ? attr_path(I, l->v[i], attr) : l->v[i];
        int ints = acc.t != TV_FLOAT && x.t != TV_FLOAT;
        if ((acc.t != TV_INT && acc.t != TV_FLOAT && acc.t != TV_BOOL) ||
            (x.t != TV_INT && x.t != TV_FLOAT && x.t != TV_BOOL))
            tctx_raise(C(I), "sum: cannot add %s", tv_type_name(&x));
        if (ints) {
            int64_t r;
            if (__builtin_add_overflow(acc.u.i, x.u.i, &r))
                tctx_raise(C(I), "sum: integer overflow");
            acc = tv_int(r);
        } else {
            acc = tv_float((acc.t == TV_FLOAT ? acc.u.f : (double)acc.u.i) +
                           (x.t == TV_FLOAT ? x.u.f : (double)x.u.i));
        }
    }
    return acc;
}

static tv round_value(tpl_interp *I, const tv *v, const args *a) {
    if (v->t != TV_INT && v->t != TV_FLOAT && v->t != TV_BOOL)
        tctx_raise(C(I), "round needs a number, not %s", tv_type_name(v));
    double x = v->t == TV_FLOAT ? v->u.f : (double)v->u.i;
    int64_t prec = arg_int(I, a, 0, "precision", 0, "round");
    const tstr *how = arg_str(I, a, 1, "method", "round");
    if (prec > 15) prec = 15;
    if (prec < -15) prec = -15;
    double scale = pow(10, (double)prec), y = x * scale;
    if (!how || strcmp(how->p, "common") == 0)
        y = round(y);
    else if (strcmp(how->p, "floor") == 0)
        y = floor(y);
    else if (strcmp(how->p, "ceil") == 0)
        y = ceil(y);
    else
        tctx_raise(C(I), "round: method must be common, floor or ceil");
    return tv_float(y / scale);
}

static tv unique(tpl_interp *I, const tv *v, const args *a) {
    tlist *l = as_list(I, v, "unique");
    const tstr *attr = arg_str(I, a, 1, "attribute", "unique");
    tlist *r = tlist_new(C(I), 0);
    tlist *seen = tlist_new(C(I), 0);
    for (size_t i = 0; i < l->n; i++) {
        tv k = attr ? attr_path(I, l->v[i], attr) : l->v[i];
        int dup = 0;
        for (size_t j = 0; j < seen->n && !dup; j++)
            dup = seen->v[j].t == k.t && tv_equal(&seen->v[j], &k);
        if (!dup) {
            tlist_push(C(I), seen, k);
            tlist_push(C(I), r, l->v[i]);
        }
    }
    return tv_listv(r);
}

static tv batch(tpl_interp *I, const tv *v, const args *a) {
    tlist *l = as_list(I, v, "batch");
    int64_t n = arg_int(I, a, 0, "linecount", 1, "batch");
    if (n <= 0)
        tctx_raise(C(I), "batch: linecount must be positive");
    const tv *fill = arg(a, 1, "fill_with");
    tlist *r = tlist_new(C(I), 0), *cur = NULL;
    for (size_t i = 0; i < l->n; i++) {
        if (!cur || (int64_t)cur->n == n) {
            cur = tlist_new(C(I), 0);
            tlist_push(C(I), r, tv_listv(cur));
        }
        tlist_push(C(I), cur, l->v[i]);
    }
    while (fill && cur && (int64_t)cur->n < n)
        tlist_push(C(I), cur, *fill);
    return tv_listv(r);
}

static tv groupby(tpl_interp *I, const tv *v, const args *a) {
    tlist *l = as_list(I, v, "groupby");
    const tstr *attr = arg_str(I, a, 0, "attribute", "groupby");
    if (!attr)
        tctx_raise(C(I), "groupby needs an attribute");
    tv s = sorted(I, l, 0, 0, attr);
    tlist *r = tlist_new(C(I), 0);
    tlist *group = NULL;
    tv key = tv_undef();
    for (size_t i = 0; i < s.u.l->n; i++) {
        tv k = attr_path(I, s.u.l->v[i], attr);
        if (!group || !tv_equal(&k, &key)) {
            group = tlist_new(C(I), 0);
            tlist *pair = tlist_new(C(I), 2);
            pair->tuple = 1;
            tlist_push(C(I), pair, k);
            tlist_push(C(I), pair, tv_listv(group));
            tlist_push(C(I), r, tv_listv(pair));
            key = k;
        }
        tlist_push(C(I), group, s.u.l->v[i]);
    }
    return tv_listv(r);
}

static tv escape_html(tpl_interp *I, const tv *v) {
    const tstr *s = tv_to_str(C(I), v);
    tbuf b = {0};
    for (size_t i = 0; i < s->n; i++) {
        switch (s->p[i]) {
        case '&': tbuf_puts(C(I), &b, "&amp;"); break;
        case '<': tbuf_puts(C(I), &b, "&lt;"); break;
        case '>': tbuf_puts(C(I), &b, "&gt;"); break;
        case '"': tbuf_puts(C(I), &b, "&#34;"); break;
        case '\'': tbuf_puts(C(I), &b, "&#39;"); break;
        default: tbuf_putc(C(I), &b, s->p[i]);
        }
    }
    return tv_strv(tbuf_str(C(I), &b));
}

static tv wordcount(const tv *v) {
    if (v->t != TV_STR)
        return tv_int(0);
    int64_t n = 0;
    int in_word = 0;
    for (size_t i = 0; i < v->u.s->n; i++) {
        unsigned char ch = (unsigned char)v->u.s->p[i];
        int w = ascii_word((char)ch) || ch >= 0x80;
        if (w && !in_word)
            n++;
        in_word = w;
    }
    return tv_int(n);
}

static tv center(tpl_interp *I, const tstr *s, const args *a) {
    int64_t width = arg_int(I, a, 0, "width", 80, "center");
    int64_t len = (int64_t)tpl_utf8_len(s->p, s->n);
    if (width <= len || width > 100000)
        return tv_strv(s);
    int64_t total = width - len, left = total / 2 + (total & width & 1);
    tbuf b = {0};
    for (int64_t i = 0; i < left; i++) tbuf_putc(C(I), &b, ' ');
    tbuf_put(C(I), &b, s->p, s->n);
    for (int64_t i = 0; i < total - left; i++) tbuf_putc(C(I), &b, ' ');
    return tv_strv(tbuf_str(C(I), &b));
}

static int require_str(tpl_interp *I, const tv *v, const char *name) {
    if (v->t == TV_STR)
        return 1;
    tctx_raise(C(I), "filter '%s' needs a string, not %s", name, tv_type_name(v));
}

tv tpl_filter(tpl_interp *I, const char *name, tv v, int argc, tv *argv, tdict *kw,
              tpl_scope *s) {
    args a = {argc, argv, kw};
#define IS(n) (strcmp(name, n) == 0)
    if (IS("safe")) return v;
    if (IS("tojson")) return tojson(I, &v, &a);
    if (IS("default") || IS("d")) {
        const tv *d = arg(&a, 0, "default_value");
        int boolean = arg_bool(&a, 1, "boolean", 0);
        if (v.t == TV_UNDEF || (boolean && !tv_truthy(&v)))
            return d ? *d : tv_str(C(I), "", 0);
        return v;
    }
    if (IS("length") || IS("count")) {
        switch (v.t) {
        case TV_STR: return tv_int((int64_t)tpl_utf8_len(v.u.s->p, v.u.s->n));
        case TV_LIST: return tv_int((int64_t)v.u.l->n);
        case TV_DICT: case TV_NS: return tv_int((int64_t)v.u.d->n);
        case TV_UNDEF: return tv_int(0);
        default: tctx_raise(C(I), "object of type %s has no length", tv_type_name(&v));
        }
    }
    if (IS("string")) {
        /* A dict has no string form in @huggingface/jinja: Python's str() of it, as
         * transformers gives (SmolLM3 prints its tools so) */
        if (v.t == TV_DICT || v.t == TV_NS) {
            tbuf b = {0};
            tpl_py_repr(C(I), &b, &v, 0);
            return tv_strv(tbuf_str(C(I), &b));
        }
        if (v.t == TV_NONE) return tv_str(C(I), "None", 4);
        return tv_strv(tv_to_str(C(I), &v));
    }
    if (IS("list")) {
        tlist *l = as_list(I, &v, name), *r = tlist_new(C(I), l->n);
        for (size_t i = 0; i < l->n; i++)
            tlist_push(C(I), r, l->v[i]);
        return tv_listv(r);
    }
    if (IS("first") || IS("last")) {
        if (v.t == TV_UNDEF)
            return v;
        tlist *l = as_list(I, &v, name);
        if (l->n == 0)
            return tv_undef();
        return IS("first") ? l->v[0] : l->v[l->n - 1];
    }
    if (IS("reverse")) {
        if (v.t == TV_STR) {
            tlist *l = as_list(I, &v, name);
            tbuf b = {0};
            for (size_t i = l->n; i-- > 0;)
                tbuf_put(C(I), &b, l->v[i].u.s->p, l->v[i].u.s->n);
            return tv_strv(tbuf_str(C(I), &b));
        }
        tlist *l = as_list(I, &v, name), *r = tlist_new(C(I), l->n);
        for (size_t i = l->n; i-- > 0;)
            tlist_push(C(I), r, l->v[i]);
        return tv_listv(r);
    }
    if (IS("join")) {
        if (v.t == TV_UNDEF)
            return tv_str(C(I), "", 0);
        if (v.t == TV_STR && !arg(&a, 0, "d"))
            return v;
        tlist *l = as_list(I, &v, name);
        return join_items(I, l, arg_str(I, &a, 0, "d", "join"), arg_str(I, &a, 1, "attribute", "join"));
    }
    if (IS("sort"))
        return sorted(I, as_list(I, &v, name), arg_bool(&a, 0, "reverse", 0),
                      arg_bool(&a, 1, "case_sensitive", 0), arg_str(I, &a, 2, "attribute", "sort"));
    if (IS("unique")) return unique(I, &v, &a);
    if (IS("select")) return select_items(I, &v, &a, 0, 1, name);
    if (IS("reject")) return select_items(I, &v, &a, 0, 0, name);
    if (IS("selectattr")) return select_items(I, &v, &a, 1, 1, name);
    if (IS("rejectattr")) return select_items(I, &v, &a, 1, 0, name);
    if (IS("map")) return map_items(I, &v, &a, s);
    if (IS("min")) return min_max(I, &v, &a, 0);
    if (IS("max")) return min_max(I, &v, &a, 1);
    if (IS("sum")) return sum_items(I, &v, &a);
    if (IS("batch")) return batch(I, &v, &a);
    if (IS("groupby")) return groupby(I, &v, &a);
    if (IS("items") || IS("keys") || IS("values") || IS("dictsort")) {
        if (v.t == TV_UNDEF)
            return tv_listv(tlist_new(C(I), 0));
        if (v.t != TV_DICT && v.t != TV_NS)
            tctx_raise(C(I), "filter '%s' needs a dict, not %s", name, tv_type_name(&v));
        if (IS("items")) return pairs(I, v.u.d);
        if (IS("keys")) return keys_of(I, v.u.d);
        if (IS("values")) return values_of(I, v.u.d);
        return dictsort(I, v.u.d, &a);
    }
    if (IS("attr")) {
        const tstr *n = arg_str(I, &a, 0, "name", "attr");
        return n ? tpl_getattr(I, v, n->p, n->n) : tv_undef();
    }
    if (IS("int")) {
        const tv *d = arg(&a, 0, "default");
        return to_int(I, &v, d ? *d : tv_int(0));
    }
    if (IS("float")) {
        const tv *d = arg(&a, 0, "default");
        return to_float(I, &v, d ? *d : tv_float(0.0));
    }
    if (IS("bool")) return tv_bool(tv_truthy(&v));
    if (IS("abs")) {
        if (v.t == TV_INT || v.t == TV_BOOL) {
            if (v.u.i == INT64_MIN)
                tctx_raise(C(I), "abs: integer overflow");
            return tv_int(v.u.i < 0 ? -v.u.i : v.u.i);
        }
        if (v.t == TV_FLOAT) return tv_float(fabs(v.u.f));
        tctx_raise(C(I), "filter 'abs' needs a number, not %s", tv_type_name(&v));
    }
    if (IS("round")) return round_value(I, &v, &a);
    if (IS("escape") || IS("e")) return escape_html(I, &v);
    if (IS("wordcount")) return wordcount(&v);
    /* string filters */
    if (IS("upper") && require_str(I, &v, name)) return map_case(I, v.u.s, utf8proc_toupper);
    if (IS("lower") && require_str(I, &v, name)) return map_case(I, v.u.s, utf8proc_tolower);
    if (IS("title") && require_str(I, &v, name)) return title_case(I, v.u.s);
    if (IS("capitalize") && require_str(I, &v, name)) return capitalize(I, v.u.s);
    if (IS("trim") && require_str(I, &v, name))
        return strip(I, v.u.s, arg_str(I, &a, 0, "chars", "trim"), 1, 1);
    if (IS("indent") && require_str(I, &v, name)) return indent(I, v.u.s, &a);
    if (IS("center") && require_str(I, &v, name)) return center(I, v.u.s, &a);
    if (IS("replace") && require_str(I, &v, name)) {
        const tstr *old = arg_str(I, &a, 0, "old", "replace"), *new_ = arg_str(I, &a, 1, "new", "replace");
        if (!old || !new_)
            tctx_raise(C(I), "filter 'replace' takes two strings");
        return replace(I, v.u.s, old, new_, arg_int(I, &a, 2, "count", -1, "replace"));
    }
#undef IS
    tctx_raise(C(I), "unknown filter '%s'", name);
}
