/* Aligned strings (Rust's NormalizedString), the character-by-character rebuild that keeps
 * alignments, splitting by match lists, and the pre-tokenized string's split lists. Not
 * the pattern search (pattern.c) nor any component. */
#include <stdlib.h>
#include <string.h>
#include "internal.h"

static tm_status no_memory(tm_error *err) {
    return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
}

static int reserve(tm_nstr *ns, size_t need) {
    if (need + 1 <= ns->cap) return 1;
    size_t cap = ns->cap ? ns->cap * 2 : 16;
    while (cap < need + 1) cap *= 2;
    char *s = realloc(ns->s, cap);
    if (!s) return 0;
    ns->s = s;
    tm_span *a = realloc(ns->align, cap * sizeof *a);
    if (!a) return 0;
    ns->align = a;
    ns->cap = cap;
    return 1;
}

tm_status tm__nstr_init(tm_nstr *ns, const char *text, size_t len, uint32_t base) {
    memset(ns, 0, sizeof *ns);
    if (!reserve(ns, len)) {
        tm__nstr_free(ns);
        return TM_ERR_NO_MEMORY;
    }
    memcpy(ns->s, text, len);
    ns->s[len] = '\0';
    ns->len = len;
    ns->base = base;
    for (size_t i = 0; i < len;) {
        size_t n = tm__utf8_len((unsigned char)text[i]);
        if (i + n > len) n = len - i;
        tm_span sp = {base + (uint32_t)i, base + (uint32_t)(i + n)};
        for (size_t k = 0; k < n; k++) ns->align[i + k] = sp;
        i += n;
    }
    return TM_OK;
}

void tm__nstr_free(tm_nstr *ns) {
    if (!ns) return;
    free(ns->s);
    free(ns->align);
    memset(ns, 0, sizeof *ns);
}

void tm__nstr_move(tm_nstr *dst, tm_nstr *src) {
    if (dst == src) return;
    tm__nstr_free(dst);
    *dst = *src;
    memset(src, 0, sizeof *src);
}

tm_span tm__nstr_original_range(const tm_nstr *ns, size_t start, size_t end) {
    if (start >= end || end > ns->len) {
        tm_span e = {ns->base + (uint32_t)start, ns->base + (uint32_t)start};
        return e;
    }
    tm_span r = {ns->align[start].start, ns->align[end - 1].end};
    return r;
}

tm_status tm__nstr_slice(const tm_nstr *ns, size_t start, size_t end, tm_nstr *out) {
    memset(out, 0, sizeof *out);
    if (end < start) end = start;
    size_t n = end - start;
    if (!reserve(out, n)) {
        tm__nstr_free(out);
        return TM_ERR_NO_MEMORY;
    }
    if (n) {
        memcpy(out->s, ns->s + start, n);
        memcpy(out->align, ns->align + start, n * sizeof *out->align);
    }
    out->s[n] = '\0';
    out->len = n;
    out->base = tm__nstr_original_range(ns, start, end).start;
    return TM_OK;
}

/* ---- Rebuilding ------------------------------------------------------------------- */

void tm__nbuild_begin(tm_nbuild *b, tm_nstr *src) {
    memset(b, 0, sizeof *b);
    b->src = src;
    b->out.base = src->base;
    if (!reserve(&b->out, src->len + 8)) b->failed = 1;
}

static void emit(tm_nbuild *b, const char *bytes, size_t n, tm_span align) {
    if (b->failed) return;
    if (!reserve(&b->out, b->out.len + n)) {
        b->failed = 1;
        return;
    }
    memcpy(b->out.s + b->out.len, bytes, n);
    for (size_t k = 0; k < n; k++) b->out.align[b->out.len + k] = align;
    b->out.len += n;
}

/* Skips one source character; returns 0 at the end. */
static int consume(tm_nbuild *b) {
    if (b->pos >= b->src->len) return 0;
    b->pos += tm__utf8_len((unsigned char)b->src->s[b->pos]);
    if (b->pos > b->src->len) b->pos = b->src->len;
    return 1;
}

void tm__nbuild_push(tm_nbuild *b, uint32_t c, int change) {
    char buf[4];
    size_t n = tm__utf8_encode(c, buf);
    tm_span align;
    const tm_nstr *src = b->src;
    if (change > 0) {
        if (b->pos < 1) align = (tm_span){src->base, src->base};
        else align = src->align[b->pos - 1];
    } else {
        if (b->pos < src->len) align = src->align[b->pos];
        else if (src->len) align = src->align[src->len - 1];
        else align = (tm_span){src->base, src->base};
        consume(b);
        for (int k = 0; k < -change; k++) consume(b);
    }
    emit(b, buf, n, align);
}

void tm__nbuild_skip(tm_nbuild *b, size_t n_chars) {
    for (size_t k = 0; k < n_chars && consume(b); k++) {}
}

void tm__nbuild_copy_to(tm_nbuild *b, size_t to) {
    const tm_nstr *src = b->src;
    if (to > src->len) to = src->len;
    if (to <= b->pos) return;
    size_t n = to - b->pos;
    if (!b->failed && !reserve(&b->out, b->out.len + n)) b->failed = 1;
    if (!b->failed) {
        memcpy(b->out.s + b->out.len, src->s + b->pos, n);
        /* Each copied character aligns to its first byte's range, as a change-0 push. */
        size_t i = b->pos;
        while (i < to) {
            size_t cl = tm__utf8_len((unsigned char)src->s[i]);
            if (i + cl > to) cl = to - i;
            for (size_t k = 0; k < cl; k++) b->out.align[b->out.len + (i - b->pos) + k] = src->align[i];
            i += cl;
        }
        b->out.len += n;
    }
    b->pos = to;
}

void tm__nbuild_copy(tm_nbuild *b, size_t n_chars) {
    size_t to = b->pos;
    for (size_t k = 0; k < n_chars && to < b->src->len; k++)
        to += tm__utf8_len((unsigned char)b->src->s[to]);
    tm__nbuild_copy_to(b, to);
}

tm_status tm__nbuild_end(tm_nbuild *b, tm_error *err) {
    if (b->failed) {
        tm__nstr_free(&b->out);
        return no_memory(err);
    }
    b->out.s[b->out.len] = '\0';
    b->out.base = b->src->base;
    tm__nstr_move(b->src, &b->out);
    return TM_OK;
}

void tm__nbuild_abort(tm_nbuild *b) {
    tm__nstr_free(&b->out);
}

/* ---- Common transforms ------------------------------------------------------------ */

tm_status tm__nstr_map(tm_nstr *ns, uint32_t (*map)(uint32_t c, void *ctx), void *ctx,
                       tm_error *err) {
    tm_nbuild b;
    tm__nbuild_begin(&b, ns);
    for (size_t i = 0; i < ns->len;) {
        uint32_t c;
        i += tm__utf8_decode(ns->s, i, &c);
        tm__nbuild_push(&b, map(c, ctx), 0);
    }
    return tm__nbuild_end(&b, err);
}

tm_status tm__nstr_filter(tm_nstr *ns, int (*keep)(uint32_t c, void *ctx), void *ctx,
                          tm_error *err) {
    tm_nbuild b;
    tm__nbuild_begin(&b, ns);
    int removed = 0, have_last = 0;
    uint32_t last = 0;
    for (size_t i = 0; i < ns->len;) {
        uint32_t c;
        i += tm__utf8_decode(ns->s, i, &c);
        if (!keep(c, ctx)) {
            removed++;
            continue;
        }
        if (have_last) tm__nbuild_push(&b, last, -removed);
        else tm__nbuild_skip(&b, (size_t)removed);
        last = c;
        have_last = 1;
        removed = 0;
    }
    if (have_last) tm__nbuild_push(&b, last, -removed);
    return tm__nbuild_end(&b, err);
}

tm_status tm__nstr_prepend(tm_nstr *ns, const char *s, size_t len, tm_error *err) {
    if (!ns->len) return TM_OK;
    tm_nbuild b;
    tm__nbuild_begin(&b, ns);
    /* Rust: the first new character replaces the old first one, the rest (and the old
     * first character) are insertions, so all align to the old first character. */
    int first = 1;
    for (size_t i = 0; i < len;) {
        uint32_t c;
        i += tm__utf8_decode(s, i, &c);
        tm__nbuild_push(&b, c, first ? 0 : 1);
        first = 0;
    }
    uint32_t next;
    tm__utf8_decode(ns->s, 0, &next);
    if (first) tm__nbuild_push(&b, next, 0);
    else tm__nbuild_push(&b, next, 1);
    tm__nbuild_copy_to(&b, ns->len);
    return tm__nbuild_end(&b, err);
}

tm_status tm__nstr_append(tm_nstr *ns, const char *s, size_t len, tm_error *err) {
    if (!ns->len) return TM_OK;
    tm_nbuild b;
    tm__nbuild_begin(&b, ns);
    tm__nbuild_copy_to(&b, ns->len);
    for (size_t i = 0; i < len;) {
        uint32_t c;
        i += tm__utf8_decode(s, i, &c);
        tm__nbuild_push(&b, c, 1);
    }
    return tm__nbuild_end(&b, err);
}

tm_status tm__nstr_strip(tm_nstr *ns, int left, int right, tm_error *err) {
    size_t start = 0, end = ns->len;
    while (left && start < end) {
        uint32_t c;
        size_t n = tm__utf8_decode(ns->s, start, &c);
        if (!tm__is_whitespace(c)) break;
        start += n;
    }
    while (right && end > start) {
        size_t k = end - 1;
        while (k > start && ((unsigned char)ns->s[k] & 0xc0) == 0x80) k--;
        uint32_t c;
        tm__utf8_decode(ns->s, k, &c);
        if (!tm__is_whitespace(c)) break;
        end = k;
    }
    if (start == 0 && end == ns->len) return TM_OK;
    tm_nbuild b;
    tm__nbuild_begin(&b, ns);
    b.pos = start;
    tm__nbuild_copy_to(&b, end);
    return tm__nbuild_end(&b, err);
}

/* ---- Match lists and splitting ---------------------------------------------------- */

void tm__matches_free(tm_matches *m) {
    free(m->v);
    memset(m, 0, sizeof *m);
}

tm_status tm__matches_push(tm_matches *m, size_t start, size_t end, int is_match, tm_error *err) {
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 16;
        tm_match *v = realloc(m->v, cap * sizeof *v);
        if (!v) return no_memory(err);
        m->v = v;
        m->cap = cap;
    }
    m->v[m->n++] = (tm_match){start, end, is_match};
    return TM_OK;
}

void tm__nstrs_free(tm_nstrs *l) {
    for (size_t i = 0; i < l->n; i++) tm__nstr_free(&l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

tm_status tm__nstrs_move(tm_nstrs *l, tm_nstr *ns, tm_error *err) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        tm_nstr *v = realloc(l->v, cap * sizeof *v);
        if (!v) return no_memory(err);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = *ns;
    memset(ns, 0, sizeof *ns);
    return TM_OK;
}

tm_status tm__split_behavior_parse(const tm_json *v, const char *path, tm_split_behavior *out,
                                   tm_error *err) {
    static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious",
                                        "MergedWithNext", "Contiguous"};
    if (v && v->type == TM_JSON_STRING)
        for (int i = 0; i < 5; i++)
            if (!strcmp(v->string, names[i])) {
                *out = (tm_split_behavior)i;
                return TM_OK;
            }
    return tm__tok_fail(err, path, NULL, "expected a split behavior (Removed, Isolated, "
                        "MergedWithPrevious, MergedWithNext or Contiguous)");
}

/* One kept range of a split in progress. */
typedef struct piece {
    size_t start, end;
    int remove;
} piece;

static size_t behave(const tm_matches *m, tm_split_behavior behavior, piece *p) {
    size_t n = 0;
    int prev = 0;
    switch (behavior) {
    case TM_SPLIT_ISOLATED:
        for (size_t i = 0; i < m->n; i++) p[n++] = (piece){m->v[i].start, m->v[i].end, 0};
        return n;
    case TM_SPLIT_REMOVED:
        for (size_t i = 0; i < m->n; i++) p[n++] = (piece){m->v[i].start, m->v[i].end, m->v[i].is_match};
        return n;
    case TM_SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < m->n; i++) {
            if (m->v[i].is_match == prev && n) p[n - 1].end = m->v[i].end;
            else p[n++] = (piece){m->v[i].start, m->v[i].end, 0};
            prev = m->v[i].is_match;
        }
        return n;
    case TM_SPLIT_MERGED_WITH_PREVIOUS:
        for (size_t i = 0; i < m->n; i++) {
            if (m->v[i].is_match && !prev && n) p[n - 1].end = m->v[i].end;
            else p[n++] = (piece){m->v[i].start, m->v[i].end, 0};
            prev = m->v[i].is_match;
        }
        return n;
    case TM_SPLIT_MERGED_WITH_NEXT:
        /* Built from the end, then reversed. */
        for (size_t k = m->n; k-- > 0;) {
            if (m->v[k].is_match && !prev && n) p[n - 1].start = m->v[k].start;
            else p[n++] = (piece){m->v[k].start, m->v[k].end, 0};
            prev = m->v[k].is_match;
        }
        for (size_t i = 0; i < n / 2; i++) {
            piece t = p[i];
            p[i] = p[n - 1 - i];
            p[n - 1 - i] = t;
        }
        return n;
    }
    return 0;
}

tm_status tm__nstr_split(const tm_nstr *ns, const tm_matches *m, tm_split_behavior behavior,
                         tm_nstrs *out, tm_error *err) {
    piece stack[32];
    piece *p = m->n <= 32 ? stack : malloc(m->n * sizeof *p);
    if (!p) return no_memory(err);
    size_t n = behave(m, behavior, p);
    tm_status s = TM_OK;
    for (size_t i = 0; i < n && !s; i++) {
        if (p[i].remove) continue;
        tm_nstr piece_ns;
        if (tm__nstr_slice(ns, p[i].start, p[i].end, &piece_ns)) {
            s = no_memory(err);
            break;
        }
        s = tm__nstrs_move(out, &piece_ns, err);
        tm__nstr_free(&piece_ns);
    }
    if (p != stack) free(p);
    return s;
}

/* ---- Pre-tokenized strings -------------------------------------------------------- */

static void split_free(tm_split *sp) {
    tm__nstr_free(&sp->ns);
    for (int k = 0; k < sp->n_tokens; k++)
        if (sp->tokens[k].owned) free((char *)sp->tokens[k].value);
    free(sp->tokens);
    sp->tokens = NULL;
    sp->n_tokens = -1;
}

void tm__pstr_free(tm_pstr *ps) {
    for (size_t i = 0; i < ps->n; i++) split_free(&ps->v[i]);
    free(ps->v);
    memset(ps, 0, sizeof *ps);
}

static tm_status pstr_push(tm_pstr *ps, tm_split *sp, tm_error *err) {
    if (ps->n == ps->cap) {
        size_t cap = ps->cap ? ps->cap * 2 : 8;
        tm_split *v = realloc(ps->v, cap * sizeof *v);
        if (!v) return no_memory(err);
        ps->v = v;
        ps->cap = cap;
    }
    ps->v[ps->n++] = *sp;
    return TM_OK;
}

tm_status tm__pstr_split(tm_pstr *ps, tm_split_fn fn, void *ctx, tm_error *err) {
    tm_pstr out = {0};
    tm_status s = TM_OK;
    size_t i = 0;
    for (; i < ps->n && !s; i++) {
        tm_split *sp = &ps->v[i];
        if (sp->n_tokens >= 0) {
            s = pstr_push(&out, sp, err);
            if (!s) memset(sp, 0, sizeof *sp), sp->n_tokens = -1;
            continue;
        }
        tm_nstrs pieces = {0};
        s = fn(ctx, i, &sp->ns, &pieces, err);
        tm__nstr_free(&sp->ns);
        for (size_t k = 0; k < pieces.n && !s; k++) {
            if (!pieces.v[k].len) continue;
            tm_split nsp = {.ns = pieces.v[k], .tokens = NULL, .n_tokens = -1};
            s = pstr_push(&out, &nsp, err);
            if (!s) memset(&pieces.v[k], 0, sizeof pieces.v[k]);
        }
        tm__nstrs_free(&pieces);
    }
    if (s) {
        tm__pstr_free(&out);
        return s;           /* ps keeps what is left; tm__pstr_free still frees it all */
    }
    tm__pstr_free(ps);
    *ps = out;
    return TM_OK;
}

typedef struct pattern_ctx {
    const tm_pattern *p;
    tm_split_behavior b;
} pattern_ctx;

static tm_status split_on_pattern(void *ctx, size_t i, tm_nstr *piece, tm_nstrs *out,
                                  tm_error *err) {
    pattern_ctx *pc = ctx;
    tm_matches m = {0};
    tm_status s = tm__pattern_find(pc->p, piece->s, piece->len, &m, err);
    if (!s) s = tm__nstr_split(piece, &m, pc->b, out, err);
    tm__matches_free(&m);
    return s;
}

tm_status tm__pstr_split_pattern(tm_pstr *ps, const tm_pattern *p, tm_split_behavior b,
                                 tm_error *err) {
    pattern_ctx pc = {p, b};
    return tm__pstr_split(ps, split_on_pattern, &pc, err);
}

tm_status tm__pstr_normalize(tm_pstr *ps, tm_normalize_fn fn, void *ctx, tm_error *err) {
    for (size_t i = 0; i < ps->n; i++) {
        if (ps->v[i].n_tokens >= 0) continue;
        tm_status s = fn(ctx, &ps->v[i].ns, err);
        if (s) return s;
    }
    return TM_OK;
}

/* ---- String lists ----------------------------------------------------------------- */

void tm__strs_free(tm_strs *l) {
    for (size_t i = 0; i < l->n; i++) free(l->s[i]);
    free(l->s);
    free(l->len);
    memset(l, 0, sizeof *l);
}

tm_status tm__strs_push_owned(tm_strs *l, char *s, size_t len, tm_error *err) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        char **v = realloc(l->s, cap * sizeof *v);
        if (!v) {
            free(s);
            return no_memory(err);
        }
        l->s = v;
        size_t *lv = realloc(l->len, cap * sizeof *lv);
        if (!lv) {
            free(s);
            return no_memory(err);
        }
        l->len = lv;
        l->cap = cap;
    }
    l->s[l->n] = s;
    l->len[l->n] = len;
    l->n++;
    return TM_OK;
}

tm_status tm__strs_push(tm_strs *l, const char *s, size_t len, tm_error *err) {
    char *c = malloc(len + 1);
    if (!c) return no_memory(err);
    if (len) memcpy(c, s, len);
    c[len] = '\0';
    return tm__strs_push_owned(l, c, len, err);
}
