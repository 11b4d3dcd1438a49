/* Oniguruma (Ruby syntax, as Rust's onig crate compiles tokenizer.json regexes) to PCRE2:
 * rewrites the few constructs whose meaning differs, so PCRE2 matches what Oniguruma
 * matches. Not a full regex parser: everything else is passed through. */
#include <stdio.h>
#include <string.h>
#include "components.h"
#include "regex_onig_tables.h"

/* Oniguruma's Unicode \w: Alphabetic, marks, decimal digits, connector punctuation and the
 * Latin-1 superscripts and fractions (PCRE2 10.42's \w with UCP is only letters, numbers
 * and underscore); plus the newer letters, marks and digits (extras_of below). */
#define ONIG_WORD "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{b2}\\x{b3}\\x{b9}\\x{bc}-\\x{be}"
#define ONIG_HEX "0-9A-Fa-f"
/* Oniguruma's \s: White_Space without U+180E (which PCRE2 10.42 still counts). */
#define ONIG_SPACE "\\t\\n\\x{0b}\\f\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"

typedef struct out {
    char *p;
    size_t n, cap;
    int failed;
} out;

static void put(out *o, const char *s, size_t n) {
    if (o->failed) return;
    if (o->n + n + 1 > o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 64;
        while (cap < o->n + n + 1) cap *= 2;
        char *p = realloc(o->p, cap);
        if (!p) {
            o->failed = 1;
            return;
        }
        o->p = p;
        o->cap = cap;
    }
    memcpy(o->p + o->n, s, n);
    o->n += n;
    o->p[o->n] = '\0';
}

static void puts_(out *o, const char *s) {
    put(o, s, strlen(s));
}

/* The extra class items of property name, or "". */
static const char *extras_of(const char *name) {
    for (size_t k = 0; k < sizeof onig_extras / sizeof onig_extras[0]; k++)
        if (!strcmp(onig_extras[k].name, name)) return onig_extras[k].items;
    return "";
}

/* Whether name is a script for PCRE2 (then \p{name} there means its script extensions,
 * while Oniguruma means the script itself: PCRE2's \p{sc=name}). */
static int is_script(const char *name, size_t n) {
    char pat[80];
    if (n > 60) return 0;
    snprintf(pat, sizeof pat, "\\p{sc=%.*s}", (int)n, name);
    int code;
    PCRE2_SIZE at;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                   &code, &at, NULL);
    if (!re) return 0;
    pcre2_code_free(re);
    return 1;
}

static int is_hex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

tm_status tm__onig_translate(const char *re, size_t len, char **res, tm_error *err) {
    out o = {0};
    int depth = 0;                  /* inside a character class (Oniguruma nests them) */
    char emitted[32] = {0};         /* per nesting level: whether its brackets were written */
    put(&o, "", 0);
    for (size_t i = 0; i < len;) {
        char c = re[i];
        if (c == '\\' && i + 1 < len) {
            char e = re[i + 1];
            if (e == 'p' || e == 'P') {
                /* \p{X}: the code points Oniguruma's newer Unicode adds to X */
                const char *close = memchr(re + i, '}', len - i);
                size_t at = i + 2;
                int neg = e == 'P';
                if (close && at < len && re[at] == '{') {
                    at++;
                    if (at < len && re[at] == '^') neg = !neg, at++;
                    size_t nlen = (size_t)(close - (re + at));
                    const char *items = NULL;
                    for (size_t k = 0; k < sizeof onig_extras / sizeof onig_extras[0]; k++)
                        if (strlen(onig_extras[k].name) == nlen &&
                            !memcmp(onig_extras[k].name, re + at, nlen))
                            items = onig_extras[k].items;
                    size_t end = (size_t)(close - re) + 1;
                    int script = is_script(re + at, nlen);
                    if ((items || script) && !(depth && neg)) {
                        if (!depth) puts_(&o, neg ? "[^" : "[");
                        puts_(&o, script ? "\\p{sc=" : "\\p{");
                        put(&o, re + at, nlen);
                        puts_(&o, "}");
                        if (items) puts_(&o, items);
                        if (!depth) puts_(&o, "]");
                        i = end;
                        continue;
                    }
                }
            }
            if (e == 'd' || e == 'D') {
                /* \d is Nd in both; Oniguruma knows newer digits */
                if (depth && e == 'D') {
                    put(&o, re + i, 2);
                } else {
                    if (!depth) puts_(&o, e == 'D' ? "[^" : "[");
                    puts_(&o, "\\p{Nd}");
                    puts_(&o, extras_of("Nd"));
                    if (!depth) puts_(&o, "]");
                }
                i += 2;
                continue;
            }
            if (e == 'h' || e == 'H' || e == 'w' || e == 'W' || e == 's' || e == 'S') {
                /* Ruby's \h is a hex digit (PCRE2's is horizontal space) */
                const char *set = e == 'h' || e == 'H' ? ONIG_HEX :
                                  e == 'w' || e == 'W' ? ONIG_WORD : ONIG_SPACE;
                int neg = e == 'H' || e == 'W' || e == 'S';
                if (depth && neg) {
                    put(&o, re + i, 2);                 /* negated inside a class: left */
                } else {
                    if (!depth) puts_(&o, neg ? "[^" : "[");
                    puts_(&o, set);
                    if (e == 'w' || e == 'W') {
                        puts_(&o, extras_of("L"));
                        puts_(&o, extras_of("M"));
                        puts_(&o, extras_of("Nd"));
                    }
                    if (!depth) puts_(&o, "]");
                }
                i += 2;
                continue;
            }
            if (e == 'u' && i + 5 < len + 0 && is_hex(re[i + 2]) && is_hex(re[i + 3]) &&
                is_hex(re[i + 4]) && is_hex(re[i + 5])) {
                puts_(&o, "\\x{");       /* Ruby's \uHHHH */
                put(&o, re + i + 2, 4);
                puts_(&o, "}");
                i += 6;
                continue;
            }
            put(&o, re + i, 2);
            i += 2;
            continue;
        }
        if (c == '[' && depth && i + 1 < len && re[i + 1] == ':') {
            /* a POSIX bracket [:name:] inside a class: as is */
            const char *end = strstr(re + i, ":]");
            size_t n = end && (size_t)(end - re) < len ? (size_t)(end - (re + i)) + 2 : 1;
            /* Oniguruma's Unicode [:alpha:] / [:alnum:] are the Alphabetic property (PCRE2:
             * letters only) */
            if (n == 9 && !memcmp(re + i, "[:alpha:]", 9)) puts_(&o, "\\p{Alphabetic}");
            else if (n == 9 && !memcmp(re + i, "[:alnum:]", 9)) puts_(&o, "\\p{Alphabetic}\\p{Nd}");
            else put(&o, re + i, n);
            if (n == 9 && (!memcmp(re + i, "[:alpha:]", 9) || !memcmp(re + i, "[:alnum:]", 9)))
                puts_(&o, extras_of("L"));
            i += n;
            continue;
        }
        if (c == '[') {
            /* Oniguruma nests classes ([a[bc]] is their union; BLOOM's regex has one): a
             * nested class that is not negated is flattened into the outer one. */
            int flat = depth > 0 && !(i + 1 < len && re[i + 1] == '^');
            if (depth < (int)sizeof emitted) emitted[depth] = !flat;
            depth++;
            if (!flat) put(&o, re + i, 1);
            i++;
            /* a ']' right after '[' or '[^' is a literal */
            if (i < len && re[i] == '^') put(&o, re + i, 1), i++;
            if (i < len && re[i] == ']') puts_(&o, "\\]"), i++;
            continue;
        }
        if (c == ']' && depth) {
            depth--;
            if (depth >= (int)sizeof emitted || emitted[depth]) put(&o, re + i, 1);
            i++;
            continue;
        }
        if (c == '(' && !depth && i + 2 < len && re[i + 1] == '?') {
            /* option groups: Ruby's (?m) is PCRE2's (?s) (dot matches newline) */
            size_t k = i + 2;
            while (k < len && (re[k] == 'i' || re[k] == 'm' || re[k] == 'x' || re[k] == '-')) k++;
            if (k > i + 2 && k < len && (re[k] == ')' || re[k] == ':')) {
                puts_(&o, "(?");
                for (size_t j = i + 2; j < k; j++) put(&o, re[j] == 'm' ? "s" : re + j, 1);
                i = k;
                continue;
            }
        }
        put(&o, re + i, 1);
        i++;
    }
    if (o.failed) {
        free(o.p);
        return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
    }
    *res = o.p;
    return TM_OK;
}
