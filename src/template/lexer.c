/* lexer.c — template source to tokens. First the whitespace rules chat templates are
 * rendered with (@huggingface/jinja's preprocessing: one trailing newline dropped,
 * lstrip_blocks, trim_blocks, `generation` tags removed), keeping each byte's source line
 * for error messages; then text, tags, names, numbers, strings and operators.
 * Not the grammar: parser.c decides what the tokens mean. */
#include "tpl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The text after a pass, and each byte's offset in the original source (for the line and
 * column of errors). */
typedef struct src_map { char *p; int *line; size_t n; } src_map;

static src_map map_new(tpl_arena *a, tpl_fail *f, size_t n) {
    src_map m;
    m.p = tpl_alloc(a, f, n + 1);
    m.line = tpl_alloc(a, f, (n + 1) * sizeof(int));
    m.n = 0;
    return m;
}

static void map_put(src_map *m, const src_map *from, size_t i) {
    m->p[m->n] = from->p[i];
    m->line[m->n] = from->line[i];
    m->n++;
}

/* Copies from[i, j). The passes copy runs found with memchr: a byte-at-a-time loop is
 * what a fuzzer's comparison tracing makes slow. */
static void map_copy(src_map *m, const src_map *from, size_t i, size_t j) {
    if (j <= i)
        return;
    memcpy(m->p + m->n, from->p + i, j - i);
    memcpy(m->line + m->n, from->line + i, (j - i) * sizeof(int));
    m->n += j - i;
}

/* The first position after i that starts a line for JavaScript's multiline ^ (after \n,
 * \r, U+2028 or U+2029), or m->n. */
static size_t next_line_start(const src_map *m, size_t i) {
    size_t best = m->n;
    static const char marks[] = {'\n', '\r', (char)0xE2};
    for (int k = 0; k < 3; k++) {
        size_t from = i;
        while (from < best) {
            const char *q = memchr(m->p + from, marks[k], best - from);
            if (!q)
                break;
            size_t at = (size_t)(q - m->p);
            if (k < 2) {
                best = at + 1;
                break;
            }
            if (at + 2 < m->n && (unsigned char)m->p[at + 1] == 0x80 &&
                ((unsigned char)m->p[at + 2] == 0xA8 || (unsigned char)m->p[at + 2] == 0xA9)) {
                if (at + 3 < best)
                    best = at + 3;
                break;
            }
            from = at + 1;
        }
    }
    return best;
}

static int block_open(const src_map *m, size_t i) {
    return i + 1 < m->n && m->p[i] == '{' &&
           (m->p[i + 1] == '#' || m->p[i + 1] == '%' || m->p[i + 1] == '-');
}

/* lstrip_blocks: spaces and tabs that begin a line before a block or comment tag. */
static src_map lstrip_blocks(tpl_arena *a, tpl_fail *f, const src_map *in) {
    src_map out = map_new(a, f, in->n);
    size_t i = 0;   /* always a line start */
    while (i < in->n) {
        size_t j = i;
        while (j < in->n && (in->p[j] == ' ' || in->p[j] == '\t'))
            j++;
        size_t from = j > i && block_open(in, j) ? j : i;
        /* the spaces themselves may hold no line end: search from j */
        size_t next = j < in->n ? next_line_start(in, j) : in->n;
        map_copy(&out, in, from, next);
        i = next;
    }
    return out;
}

/* trim_blocks: the newline right after a block or comment tag. */
static src_map trim_blocks(tpl_arena *a, tpl_fail *f, const src_map *in) {
    src_map out = map_new(a, f, in->n);
    size_t i = 0;
    while (i < in->n) {
        const char *q = memchr(in->p + i, '}', in->n - i);
        if (!q) {
            map_copy(&out, in, i, in->n);
            break;
        }
        size_t at = (size_t)(q - in->p);
        map_copy(&out, in, i, at + 1);
        i = at + 1;
        if (at > 0 && (in->p[at - 1] == '#' || in->p[at - 1] == '%' || in->p[at - 1] == '-') &&
            i < in->n && in->p[i] == '\n')
            i++;
    }
    return out;
}

static size_t skip_spaces(const src_map *m, size_t i) {
    size_t k;
    while (i < m->n && (k = tpl_space_at(m->p + i, m->n - i)) > 0)
        i += k;
    return i;
}

/* {%-? generation -?%} and {% endgeneration %}: transformers' marker for assistant
 * masks, which renders as nothing. Returns the end of the tag or 0. */
static size_t generation_tag(const src_map *m, size_t i, int *lstrip, int *rstrip) {
    if (i + 1 >= m->n || m->p[i] != '{' || m->p[i + 1] != '%')
        return 0;
    i += 2;
    *lstrip = i < m->n && m->p[i] == '-';
    i = skip_spaces(m, i + *lstrip);
    if (m->n - i >= 3 && memcmp(m->p + i, "end", 3) == 0)
        i += 3;
    if (m->n - i < 10 || memcmp(m->p + i, "generation", 10) != 0)
        return 0;
    i = skip_spaces(m, i + 10);
    *rstrip = i < m->n && m->p[i] == '-';
    i += *rstrip;
    if (m->n - i < 2 || m->p[i] != '%' || m->p[i + 1] != '}')
        return 0;
    return i + 2;
}

static src_map drop_generation(tpl_arena *a, tpl_fail *f, const src_map *in) {
    src_map out = map_new(a, f, in->n);
    size_t last = 0;   /* output length after the previous tag: its spaces are kept */
    size_t i = 0;
    while (i < in->n) {
        const char *q = memchr(in->p + i, '{', in->n - i);
        size_t at = q ? (size_t)(q - in->p) : in->n;
        map_copy(&out, in, i, at);
        i = at;
        if (i >= in->n)
            break;
        int lstrip, rstrip;
        size_t end = generation_tag(in, i, &lstrip, &rstrip);
        if (!end) {
            map_put(&out, in, i++);
            continue;
        }
        if (lstrip)
            while (out.n > last && tpl_space_before(out.p + last, out.n - last))
                out.n -= tpl_space_before(out.p + last, out.n - last);
        size_t after = skip_spaces(in, end);
        if (!rstrip)
            map_copy(&out, in, end, after);
        i = after;
        last = out.n;
    }
    return out;
}

/* ---- Tokens ----------------------------------------------------------------------------- */

typedef struct lexer {
    tpl_arena *a;
    tpl_fail *f;
    src_map m;
    size_t pos;
    tpl_token *toks;
    size_t n, cap;
    int curly;
    const int *line_starts;        /* original offsets where lines start */
    size_t n_lines;
} lexer;

/* Line and column (1-based, in bytes) in the original source of text position pos. */
static int line_col(const lexer *L, size_t pos, int *col) {
    int off = L->m.n == 0 ? 0 : L->m.line[pos < L->m.n ? pos : L->m.n - 1];
    if (pos >= L->m.n && L->m.n > 0)
        off++;   /* the end: just after the last byte */
    size_t lo = 0, hi = L->n_lines;   /* the last line start <= off */
    while (hi - lo > 1) {
        size_t mid = (lo + hi) / 2;
        if (L->line_starts[mid] <= off) lo = mid;
        else hi = mid;
    }
    if (col)
        *col = off - L->line_starts[lo] + 1;
    return (int)lo + 1;
}


_Noreturn static void lex_fail(lexer *L, const char *msg) {
    int col, line = line_col(L, L->pos, &col);
    L->f->col = col;
    tpl_raise(L->f, TM_ERR_INVALID_ARGUMENT, line, "%s", msg);
}

static tpl_token *push(lexer *L, int type, size_t start, size_t n) {
    if (L->n == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        tpl_token *t = tpl_alloc(L->a, L->f, cap * sizeof *t);
        if (L->n)
            memcpy(t, L->toks, L->n * sizeof *t);
        L->toks = t;
        L->cap = cap;
    }
    tpl_token *t = &L->toks[L->n++];
    memset(t, 0, sizeof *t);
    t->type = type;
    t->line = line_col(L, start, &t->col);
    t->p = L->m.p + start;
    t->n = n;
    return t;
}

static int last_type(const lexer *L) { return L->n ? L->toks[L->n - 1].type : TK_EOF; }

/* {%- and {{-: the text before loses its trailing whitespace (and goes if empty). */
static void strip_trailing(lexer *L) {
    if (!L->n || L->toks[L->n - 1].type != TK_TEXT)
        return;
    tpl_token *t = &L->toks[L->n - 1];
    size_t k;
    while (t->n && (k = tpl_space_before(t->p, t->n)) > 0)
        t->n -= k;
    if (t->n == 0)
        L->n--;
}

static void skip_leading(lexer *L) { L->pos = skip_spaces(&L->m, L->pos); }

static int is_word(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_';
}
static int is_digit(char ch) { return ch >= '0' && ch <= '9'; }

static int hexval(char ch) {
    if (ch >= '0' && ch <= '9') return ch - '0';
    if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
    return -1;
}

static void lex_string(lexer *L) {
    char quote = L->m.p[L->pos];
    size_t start = ++L->pos;
    /* the decoded string is never longer than its source */
    char *out = NULL;
    size_t n = 0;
    for (;;) {
        if (L->pos >= L->m.n)
            lex_fail(L, "unexpected end of template in a string literal");
        char ch = L->m.p[L->pos];
        if (ch == quote)
            break;
        if (ch != '\\') {
            L->pos++;
            continue;
        }
        if (!out) {
            out = tpl_alloc(L->a, L->f, L->m.n - start + 8);
        }
        if (L->pos + 1 >= L->m.n)
            lex_fail(L, "unexpected end of template in a string literal");
        L->pos += 2;
        (void)n;
    }
    size_t end = L->pos++;
    tpl_token *t = push(L, TK_STRING, start, end - start);
    if (!out)
        return;
    /* second pass: decode escapes as Python does (unknown ones keep their backslash) */
    for (size_t i = start; i < end; i++) {
        char ch = L->m.p[i];
        if (ch != '\\') {
            out[n++] = ch;
            continue;
        }
        char e = L->m.p[++i];
        switch (e) {
        case 'n': out[n++] = '\n'; break;
        case 't': out[n++] = '\t'; break;
        case 'r': out[n++] = '\r'; break;
        case 'b': out[n++] = '\b'; break;
        case 'f': out[n++] = '\f'; break;
        case 'v': out[n++] = '\v'; break;
        case 'a': out[n++] = '\a'; break;
        case '0': out[n++] = '\0'; break;
        case '\\': case '\'': case '"': out[n++] = e; break;
        case '\n': break;
        case 'x': case 'u': case 'U': {
            int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t cp = 0;
            if (end - (i + 1) < (size_t)digits) {
                L->pos = i;
                lex_fail(L, "invalid hexadecimal escape in a string literal");
            }
            for (int k = 1; k <= digits; k++) {
                int h = hexval(L->m.p[i + k]);
                if (h < 0) {
                    L->pos = i;
                    lex_fail(L, "invalid hexadecimal escape in a string literal");
                }
                cp = cp * 16 + (uint32_t)h;
            }
            i += (size_t)digits;
            /* a \uD83D\uDE00 pair is one character */
            if (cp >= 0xD800 && cp < 0xDC00 && end - i >= 7 && L->m.p[i + 1] == '\\' &&
                L->m.p[i + 2] == 'u') {
                uint32_t lo = 0;
                int ok = 1;
                for (int k = 3; k <= 6; k++) {
                    int h = hexval(L->m.p[i + k]);
                    if (h < 0) ok = 0;
                    lo = lo * 16 + (uint32_t)(h < 0 ? 0 : h);
                }
                if (ok && lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    i += 6;
                }
            }
            if (cp > 0x10FFFF) {
                L->pos = i;
                lex_fail(L, "invalid character escape in a string literal");
            }
            n += tpl_utf8_encode(cp, out + n);
            break;
        }
        default:
            out[n++] = '\\';
            out[n++] = e;
        }
    }
    t->p = out;
    t->n = n;
}

static void lex_number(lexer *L) {
    size_t start = L->pos;
    while (L->pos < L->m.n && is_digit(L->m.p[L->pos]))
        L->pos++;
    int is_float = 0;
    /* `x.0.1` is two attribute accesses, not a float */
    if (last_type(L) != TK_OP || L->toks[L->n - 1].n != 1 || L->toks[L->n - 1].p[0] != '.') {
        if (L->pos + 1 < L->m.n && L->m.p[L->pos] == '.' && is_digit(L->m.p[L->pos + 1])) {
            is_float = 1;
            L->pos++;
            while (L->pos < L->m.n && is_digit(L->m.p[L->pos]))
                L->pos++;
        }
    }
    /* an exponent, as Jinja reads 1e3 and 2.5e-7 (floats) */
    if (last_type(L) != TK_OP || L->toks[L->n - 1].n != 1 || L->toks[L->n - 1].p[0] != '.') {
        size_t e = L->pos;
        if (e < L->m.n && (L->m.p[e] == 'e' || L->m.p[e] == 'E')) {
            e++;
            if (e < L->m.n && (L->m.p[e] == '+' || L->m.p[e] == '-'))
                e++;
            if (e < L->m.n && is_digit(L->m.p[e])) {
                while (e < L->m.n && is_digit(L->m.p[e]))
                    e++;
                L->pos = e;
                is_float = 1;
            }
        }
    }
    char tmp[64];
    size_t len = L->pos - start;
    if (len >= sizeof tmp)
        lex_fail(L, "number literal too long");
    memcpy(tmp, L->m.p + start, len);
    tmp[len] = 0;
    tpl_token *t = push(L, is_float ? TK_FLOAT : TK_INT, start, len);
    if (is_float) {
        t->f = strtod(tmp, NULL);
        return;
    }
    char *endp;
    unsigned long long v = strtoull(tmp, &endp, 10);
    if (v > INT64_MAX) {
        /* Python's ints are unbounded; ours are 64-bit: past that, a float */
        t->type = TK_FLOAT;
        t->f = strtod(tmp, NULL);
        return;
    }
    t->i = (int64_t)v;
}

static const char *const OPERATORS[] = {
    "**", "//", "<=", ">=", "==", "!=", "(", ")", "[", "]", ",", ".", ":", "|", "<", ">",
    "+", "-", "~", "*", "/", "%", "=", "{", "}", NULL
};

/* {% raw %}...{% endraw %}: the text between is output as it is. */
static int raw_block(lexer *L) {
    if (L->n < 3)
        return 0;
    tpl_token *t = &L->toks[L->n - 3];
    if (t[0].type != TK_OPEN_STMT || t[1].type != TK_NAME || t[1].n != 3 ||
        memcmp(t[1].p, "raw", 3) != 0 || t[2].type != TK_CLOSE_STMT)
        return 0;
    L->n -= 3;
    size_t start = L->pos;
    for (size_t i = L->pos; i + 1 < L->m.n; i++) {
        if (L->m.p[i] != '{' || L->m.p[i + 1] != '%')
            continue;
        size_t j = i + 2;
        int lstrip = j < L->m.n && L->m.p[j] == '-';
        j = skip_spaces(&L->m, j + lstrip);
        if (L->m.n - j < 6 || memcmp(L->m.p + j, "endraw", 6) != 0)
            continue;
        j = skip_spaces(&L->m, j + 6);
        int rstrip = j < L->m.n && L->m.p[j] == '-';
        j += rstrip;
        if (L->m.n - j < 2 || L->m.p[j] != '%' || L->m.p[j + 1] != '}')
            continue;
        if (i > start)
            push(L, TK_TEXT, start, i - start);
        if (lstrip)
            strip_trailing(L);
        push(L, TK_COMMENT, i, 0);   /* back to text mode */
        L->pos = j + 2;
        if (rstrip)
            skip_leading(L);
        return 1;
    }
    lex_fail(L, "missing {% endraw %}");
}

static void lex_all(lexer *L) {
    while (L->pos < L->m.n) {
        int lt = last_type(L);
        const char *p = L->m.p;
        size_t n = L->m.n;
        if (lt == TK_EOF || lt == TK_CLOSE_STMT || lt == TK_CLOSE_EXPR || lt == TK_COMMENT) {
            size_t end = L->pos;
            while (end < n) {
                const char *q = memchr(p + end, '{', n - end);
                if (!q) {
                    end = n;
                    break;
                }
                end = (size_t)(q - p);
                if (end + 1 < n && (p[end + 1] == '%' || p[end + 1] == '{' || p[end + 1] == '#'))
                    break;
                end++;
            }
            if (end > L->pos) {
                push(L, TK_TEXT, L->pos, end - L->pos);
                L->pos = end;
                continue;
            }
        }
        if (p[L->pos] == '{' && L->pos + 1 < n) {
            char next = p[L->pos + 1];
            if (next == '#') {
                size_t start = L->pos;
                L->pos += 2;
                int strip_before = L->pos < n && p[L->pos] == '-';
                L->pos += strip_before;
                const char *end = memmem(p + L->pos, n - L->pos, "#}", 2);
                if (!end) {
                    L->pos = start;
                    lex_fail(L, "missing end of comment tag #}");
                }
                size_t e = (size_t)(end - p);
                int strip_after = e > L->pos && p[e - 1] == '-';
                if (strip_before)
                    strip_trailing(L);
                push(L, TK_COMMENT, start, 0);
                L->pos = e + 2;
                if (strip_after)
                    skip_leading(L);
                continue;
            }
            if (L->pos + 2 < n && p[L->pos + 2] == '-' && (next == '%' || next == '{')) {
                strip_trailing(L);
                push(L, next == '%' ? TK_OPEN_STMT : TK_OPEN_EXPR, L->pos, 2);
                if (next == '{')
                    L->curly = 0;
                L->pos += 3;
                continue;
            }
        }
        skip_leading(L);
        if (L->pos >= n)
            lex_fail(L, "unexpected end of template inside a tag");
        char ch = p[L->pos];
        if (ch == '-' && L->pos + 2 < n && p[L->pos + 2] == '}' &&
            (p[L->pos + 1] == '%' || p[L->pos + 1] == '}')) {
            push(L, p[L->pos + 1] == '%' ? TK_CLOSE_STMT : TK_CLOSE_EXPR, L->pos, 2);
            L->pos += 3;
            skip_leading(L);
            continue;
        }
        if (n - L->pos >= 2) {
            int type = -1;
            if (ch == '{' && p[L->pos + 1] == '%') type = TK_OPEN_STMT;
            else if (ch == '%' && p[L->pos + 1] == '}') type = TK_CLOSE_STMT;
            else if (ch == '{' && p[L->pos + 1] == '{') type = TK_OPEN_EXPR;
            else if (ch == '}' && p[L->pos + 1] == '}' && L->curly <= 0) type = TK_CLOSE_EXPR;
            if (type >= 0) {
                push(L, type, L->pos, 2);
                L->pos += 2;
                if (type == TK_OPEN_EXPR)
                    L->curly = 0;
                if (type == TK_CLOSE_STMT)
                    raw_block(L);
                continue;
            }
        }
        if (ch == '\'' || ch == '"') {
            lex_string(L);
            continue;
        }
        if (is_digit(ch)) {
            lex_number(L);
            continue;
        }
        if (is_word(ch)) {
            size_t start = L->pos;
            while (L->pos < n && is_word(p[L->pos]))
                L->pos++;
            push(L, TK_NAME, start, L->pos - start);
            continue;
        }
        int matched = 0;
        for (int k = 0; OPERATORS[k]; k++) {
            size_t len = strlen(OPERATORS[k]);
            if (n - L->pos >= len && memcmp(p + L->pos, OPERATORS[k], len) == 0) {
                push(L, TK_OP, L->pos, len);
                if (ch == '{') L->curly++;
                if (ch == '}') L->curly--;
                L->pos += len;
                matched = 1;
                break;
            }
        }
        if (!matched) {
            char msg[64];
            size_t k = tpl_utf8_step(p + L->pos, n - L->pos);
            snprintf(msg, sizeof msg, "unexpected character '%.*s'", (int)k, p + L->pos);
            lex_fail(L, msg);
        }
    }
}

tpl_token *tpl_lex(tpl_arena *a, tpl_fail *f, const char *src, size_t n, size_t *count) {
    if (n > TPL_MAX_SOURCE)
        tpl_raise(f, TM_ERR_INVALID_ARGUMENT, 0, "template source larger than %zu bytes",
                  TPL_MAX_SOURCE);
    src_map m = map_new(a, f, n);
    memcpy(m.p, src, n);
    size_t n_lines = 1;
    for (const char *q = src; (q = memchr(q, '\n', (size_t)(src + n - q))) != NULL; q++)
        n_lines++;
    int *starts = tpl_alloc(a, f, n_lines * sizeof(int));
    size_t k = 1;
    for (size_t i = 0; i < n; i++) {
        m.line[i] = (int)i;
        if (src[i] == '\n')
            starts[k++] = (int)i + 1;
    }
    m.n = n;
    if (m.n && m.p[m.n - 1] == '\n')
        m.n--;
    m = lstrip_blocks(a, f, &m);
    m = trim_blocks(a, f, &m);
    m = drop_generation(a, f, &m);
    m.p[m.n] = 0;
    lexer L = {a, f, m, 0, NULL, 0, 0, 0, starts, n_lines};
    lex_all(&L);
    push(&L, TK_EOF, L.m.n, 0);
    *count = L.n;
    return L.toks;
}
