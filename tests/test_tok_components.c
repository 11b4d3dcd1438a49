/* Tests of the tokenizer components one at a time (src/tokenizer/normalizer_*.c, pretok_*.c,
 * decoder_*.c) against references from Hugging Face's Rust `tokenizers` 0.23.2
 * (tests/data/tokenizers/components/gen.mjs): normalized strings with every character's
 * original offsets, pre-tokenized pieces with offsets, decoded strings, load errors, and
 * whole-Unicode sweeps (per-block hashes of every code point through a component). Not the
 * whole tokenizer (the conformance suite does that).
 *   test_tok_components                      run everything
 *   test_tok_components --dump SLOT NAME TPL every code point's output (as gen.mjs --dump)
 *   test_tok_components --dir DIR            the case files of DIR (gen.mjs --random), no sweeps */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../src/tokenizer/components.h"

static const char *dir = "tests/data/tokenizers/components/";
static char path_buf[1024];

/* dir + name */
static const char *in_dir(const char *name) {
    snprintf(path_buf, sizeof path_buf, "%s%s", dir, name);
    return path_buf;
}

static int n_passed, n_failed;

static void check(int ok, const char *fmt, const char *a, const char *b) {
    if (ok) {
        n_passed++;
        return;
    }
    n_failed++;
    if (n_failed <= 60) {
        printf("FAIL ");
        printf(fmt, a, b);
        printf("\n");
    }
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    fclose(f);
    if (s) s[n] = '\0', *len = (size_t)n;
    return s;
}

/* Reads a case file, with "@charsmap.b64" replaced by the stored charsmap. */
static tm_json *load_cases(const char *file) {
    size_t len, cm_len = 0;
    char name[1024];
    snprintf(name, sizeof name, "%s", in_dir(file));
    char *text = read_file(name, &len);
    char *cm = read_file("tests/data/tokenizers/components/charsmap.b64", &cm_len);
    if (!text || !cm) {
        printf("FAIL cannot read %s or the charsmap\n", name);
        n_failed++;
        free(text);
        free(cm);
        return NULL;
    }
    while (cm_len && (cm[cm_len - 1] == '\n' || cm[cm_len - 1] == '\r')) cm[--cm_len] = '\0';
    const char *key = "@charsmap.b64";
    size_t klen = strlen(key), count = 0;
    for (const char *p = text; (p = strstr(p, key)); p += klen) count++;
    char *full = malloc(len + count * cm_len + 1), *o = full;
    const char *p = text, *q;
    while ((q = strstr(p, key))) {
        memcpy(o, p, (size_t)(q - p));
        o += q - p;
        memcpy(o, cm, cm_len);
        o += cm_len;
        p = q + klen;
    }
    strcpy(o, p);
    tm_json *j = tm_json_parse_ex(full, strlen(full), TM_JSON_ALLOW_NUL);
    if (!j) printf("FAIL %s: not JSON\n", name), n_failed++;
    free(text);
    free(cm);
    free(full);
    return j;
}

/* ---- Offsets as the Rust binding reports them: characters of the input ---------------- */

/* Rust's BytesToCharOffsetConverter over the input text. */
static void to_chars(const char *s, size_t len, uint32_t start, uint32_t end, long *cs, long *ce) {
    long ci = 0, si = -1, ei = -1, last = -1;
    for (size_t i = 0; i < len;) {
        size_t n = tm__utf8_len((unsigned char)s[i]);
        if (start >= i && start < i + n) si = ci;
        if (end >= i && end < i + n) ei = ci;
        if (end - 1 >= i && end - 1 < i + n) last = ci;
        i += n;
        ci++;
    }
    if (si < 0) {
        *cs = start, *ce = end;             /* not convertible: bytes stay */
        return;
    }
    *cs = si;
    *ce = ei >= 0 ? ei : (last >= 0 ? last : si) + 1;
}

/* ---- Running components ------------------------------------------------------------- */

static int run_normalizer(const tm_normalizer *n, const char *s, size_t len, tm_nstr *ns) {
    tm_error err = {0};
    if (tm__nstr_init(ns, s, len, 0)) return 0;
    if (n->normalize(n, ns, &err)) {
        printf("  normalize error: %s\n", err.message);
        return 0;
    }
    return 1;
}

static int run_pretok(const tm_pretokenizer *p, const char *s, size_t len, tm_pstr *ps) {
    tm_error err = {0};
    memset(ps, 0, sizeof *ps);
    ps->v = calloc(1, sizeof *ps->v);
    ps->n = ps->cap = 1;
    ps->v[0].n_tokens = -1;
    if (tm__nstr_init(&ps->v[0].ns, s, len, 0)) return 0;
    if (p->pre_tokenize(p, ps, &err)) {
        printf("  pre_tokenize error: %s\n", err.message);
        return 0;
    }
    return 1;
}

/* Decodes tokens; returns the joined result (malloc'd) or NULL. */
static char *run_decoder(const tm_decoder *d, tm_strs *tokens, size_t *len) {
    tm_error err = {0};
    if (d->decode_chain(d, tokens, &err)) {
        printf("  decode error: %s\n", err.message);
        return NULL;
    }
    size_t total = 0;
    for (size_t i = 0; i < tokens->n; i++) total += tokens->len[i];
    char *s = malloc(total + 1);
    size_t o = 0;
    for (size_t i = 0; i < tokens->n; i++) memcpy(s + o, tokens->s[i], tokens->len[i]), o += tokens->len[i];
    s[o] = '\0';
    *len = o;
    return s;
}

/* ---- Case files ----------------------------------------------------------------------- */

static const tm_json *get(const tm_json *o, const char *k) {
    return tm_json_get(o, k);
}

static void normalizer_cases(void) {
    tm_json *all = load_cases("normalizers.json");
    if (!all) return;
    for (int e = 0; e < all->n; e++) {
        const tm_json *ent = &all->items[e];
        const char *name = tm_json_get_string(ent, "name");
        tm_normalizer *n = NULL;
        tm_error err = {0};
        if (tm__normalizer_load(get(ent, "config"), "normalizer", &n, &err)) {
            check(0, "normalizer %s: load: %s", name, err.message);
            continue;
        }
        const tm_json *cases = get(ent, "cases");
        for (int c = 0; c < cases->n; c++) {
            const tm_json *cs = &cases->items[c];
            const tm_json *in = get(cs, "input"), *want = get(cs, "normalized");
            const tm_json *offs = get(cs, "offsets");
            tm_nstr ns;
            if (!run_normalizer(n, in->string, in->len, &ns)) {
                check(0, "normalizer %s: failed on \"%s\"", name, in->string);
                tm__nstr_free(&ns);
                continue;
            }
            int ok = ns.len == want->len && !memcmp(ns.s, want->string, ns.len);
            char label[512];
            snprintf(label, sizeof label, "%s on \"%.60s\"", name, in->string);
            check(ok, "normalizer %s: got \"%s\"", label, ns.s);
            if (ok) {
                int k = 0, off_ok = 1;
                for (size_t i = 0; i < ns.len; k++) {
                    size_t m = tm__utf8_len((unsigned char)ns.s[i]);
                    tm_span sp = tm__nstr_original_range(&ns, i, i + m);
                    long a, b;
                    to_chars(in->string, in->len, sp.start, sp.end, &a, &b);
                    if (k >= offs->n || offs->items[k].items[0].number != a ||
                        offs->items[k].items[1].number != b) {
                        off_ok = 0;
                        printf("  %s: char %d at [%ld,%ld), want [%g,%g)\n", label, k, a, b,
                               k < offs->n ? offs->items[k].items[0].number : -1,
                               k < offs->n ? offs->items[k].items[1].number : -1);
                        break;
                    }
                    i += m;
                }
                check(off_ok && k == offs->n, "normalizer offsets %s%s", label, "");
            }
            tm__nstr_free(&ns);
        }
        tm__normalizer_free(n);
    }
    tm_json_free(all);
}

static void pretok_cases(void) {
    tm_json *all = load_cases("pretokenizers.json");
    if (!all) return;
    for (int e = 0; e < all->n; e++) {
        const tm_json *ent = &all->items[e];
        const char *name = tm_json_get_string(ent, "name");
        tm_pretokenizer *p = NULL;
        tm_error err = {0};
        if (tm__pretokenizer_load(get(ent, "config"), "pre_tokenizer", &p, &err)) {
            check(0, "pre-tokenizer %s: load: %s", name, err.message);
            continue;
        }
        const tm_json *cases = get(ent, "cases");
        for (int c = 0; c < cases->n; c++) {
            const tm_json *cs = &cases->items[c];
            const tm_json *in = get(cs, "input"), *want = get(cs, "pieces");
            tm_pstr ps;
            char label[512];
            snprintf(label, sizeof label, "%s on \"%.60s\"", name, in->string);
            if (!run_pretok(p, in->string, in->len, &ps)) {
                check(0, "pre-tokenizer %s%s: failed", label, "");
                tm__pstr_free(&ps);
                continue;
            }
            int ok = (int)ps.n == want->n;
            for (size_t k = 0; ok && k < ps.n; k++) {
                const tm_json *w = &want->items[k];
                const tm_nstr *ns = &ps.v[k].ns;
                tm_span sp = tm__nstr_original_range(ns, 0, ns->len);
                long a, b;
                to_chars(in->string, in->len, sp.start, sp.end, &a, &b);
                if (w->items[0].len != ns->len || memcmp(w->items[0].string, ns->s, ns->len) ||
                    w->items[1].items[0].number != a || w->items[1].items[1].number != b) {
                    printf("  %s: piece %zu \"%s\" [%ld,%ld), want \"%s\" [%g,%g)\n", label, k,
                           ns->s, a, b, w->items[0].string, w->items[1].items[0].number,
                           w->items[1].items[1].number);
                    ok = 0;
                }
            }
            if ((int)ps.n != want->n) printf("  %s: %zu pieces, want %d\n", label, ps.n, want->n);
            check(ok, "pre-tokenizer %s%s", label, "");
            tm__pstr_free(&ps);
        }
        tm__pretokenizer_free(p);
    }
    tm_json_free(all);
}

static void decoder_cases(void) {
    tm_json *all = load_cases("decoders.json");
    if (!all) return;
    for (int e = 0; e < all->n; e++) {
        const tm_json *ent = &all->items[e];
        const char *name = tm_json_get_string(ent, "name");
        tm_decoder *d = NULL;
        tm_error err = {0};
        if (tm__decoder_load(get(ent, "config"), "decoder", &d, &err)) {
            check(0, "decoder %s: load: %s", name, err.message);
            continue;
        }
        const tm_json *cases = get(ent, "cases");
        for (int c = 0; c < cases->n; c++) {
            const tm_json *cs = &cases->items[c];
            const tm_json *toks = get(cs, "tokens"), *want = get(cs, "output");
            tm_strs l = {0};
            for (int k = 0; k < toks->n; k++) tm__strs_push(&l, toks->items[k].string, toks->items[k].len, NULL);
            size_t len;
            char *got = run_decoder(d, &l, &len);
            char label[256];
            snprintf(label, sizeof label, "%s case %d", name, c);
            if (!want) {
                /* Rust panics on this input; ours must just not crash. */
                check(got != NULL, "decoder %s (a Rust panic) failed%s", label, "");
            } else {
                check(got && len == want->len && !memcmp(got, want->string, len),
                      "decoder %s: got \"%s\"", label, got ? got : "(error)");
            }
            free(got);
            tm__strs_free(&l);
        }
        tm__decoder_free(d);
    }
    tm_json_free(all);
}

static void error_cases(void) {
    tm_json *all = load_cases("errors.json");
    if (!all) return;
    for (int e = 0; e < all->n; e++) {
        const tm_json *ent = &all->items[e];
        const char *slot = tm_json_get_string(ent, "slot");
        const tm_json *cfg = get(ent, "config");
        tm_error err = {0};
        tm_status s;
        if (!strcmp(slot, "normalizer")) {
            tm_normalizer *n = NULL;
            s = tm__normalizer_load(cfg, "normalizer", &n, &err);
            tm__normalizer_free(n);
        } else if (!strcmp(slot, "pre_tokenizer")) {
            tm_pretokenizer *p = NULL;
            s = tm__pretokenizer_load(cfg, "pre_tokenizer", &p, &err);
            tm__pretokenizer_free(p);
        } else {
            tm_decoder *d = NULL;
            s = tm__decoder_load(cfg, "decoder", &d, &err);
            tm__decoder_free(d);
        }
        /* Every case is an error for us (Rust accepts the variable-length lookbehind, which
         * PCRE2 refuses: the documented difference). The message names the slot. */
        char label[64];
        snprintf(label, sizeof label, "%s #%d", slot, e);
        check(s != TM_OK && strstr(err.message, slot), "error case %s: %s", label,
              s ? err.message : "loaded");
    }
    tm_json_free(all);
}

/* ---- Hand-made inputs the Rust binding cannot express ----------------------------------- */

static void b64(const unsigned char *in, size_t n, char *out) {
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t w = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0) |
                     (i + 2 < n ? in[i + 2] : 0);
        out[o++] = al[w >> 18 & 63];
        out[o++] = al[w >> 12 & 63];
        out[o++] = i + 1 < n ? al[w >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? al[w & 63] : '=';
    }
    out[o] = '\0';
}

/* A charsmap whose trie maps "a" to offset `value` of the strings "\xC3\xA9\0" (é). */
static void precompiled_with(uint32_t value, const char *in, const char *want) {
    unsigned char raw[4 + 0x62 * 4 + 3];
    uint32_t arr[0x62] = {0};
    arr[0] = 1u << 10;                          /* root: offset 1 */
    arr[0x60] = 0x61 | 1u << 8 | 1u << 10;      /* 'a', has a leaf, offset 1 */
    arr[0x61] = value;                          /* the leaf: the string's offset */
    uint32_t size = sizeof arr;
    memcpy(raw, &size, 4);                      /* little-endian hosts */
    memcpy(raw + 4, arr, sizeof arr);
    memcpy(raw + 4 + sizeof arr, "\xC3\xA9", 3);
    char enc[sizeof raw * 2], json[sizeof raw * 2 + 128];
    b64(raw, sizeof raw, enc);
    snprintf(json, sizeof json, "{\"type\":\"Precompiled\",\"precompiled_charsmap\":\"%s\"}", enc);
    tm_json *cfg = tm_json_parse(json, strlen(json));
    tm_normalizer *n = NULL;
    tm_error err = {0};
    char label[64];
    snprintf(label, sizeof label, "offset %u", value);
    if (tm__normalizer_load(cfg, "normalizer", &n, &err)) {
        check(0, "hand-made charsmap %s: %s", label, err.message);
    } else {
        tm_nstr ns;
        int ok = run_normalizer(n, in, strlen(in), &ns) && !strcmp(ns.s, want) &&
                 tm__utf8_valid(ns.s, ns.len, NULL);
        check(ok, "hand-made charsmap %s: got \"%s\"", label, ns.s ? ns.s : "");
        tm__nstr_free(&ns);
    }
    tm__normalizer_free(n);
    tm_json_free(cfg);
}

static void handmade_cases(void) {
    precompiled_with(0, "xay", "x\xC3\xA9y");
    precompiled_with(1, "xay", "xay");          /* inside a character: Rust panics */
    precompiled_with(1000, "xay", "xay");       /* past the strings */
    /* text fields must be UTF-8 (the JSON reader passes raw bytes through) */
    const char *bad[] = {
        "{\"type\":\"Replace\",\"pattern\":{\"String\":\"a\"},\"content\":\"\xF0\"}",
        "{\"type\":\"Prepend\",\"prepend\":\"\xC3\"}",
    };
    for (size_t i = 0; i < 2; i++) {
        tm_json *cfg = tm_json_parse(bad[i], strlen(bad[i]));
        tm_normalizer *n = NULL;
        tm_error err = {0};
        tm_status s = cfg ? tm__normalizer_load(cfg, "normalizer", &n, &err) : TM_ERR_PARSE;
        check(s != TM_OK && (!cfg || strstr(err.message, "UTF-8")), "invalid UTF-8 field %s: %s",
              bad[i], s ? err.message : "loaded");
        tm__normalizer_free(n);
        tm_json_free(cfg);
    }
}

/* ---- Sweeps --------------------------------------------------------------------------- */

#define BLOCK 4096

typedef struct sweep_run {
    const char *slot;
    tm_normalizer *n;
    tm_pretokenizer *p;
    tm_decoder *d;
} sweep_run;

static uint32_t fnv(uint32_t h, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static void sput(sbuf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        b->cap = (b->n + n + 1) * 2;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

/* The serialized output of one input, as gen.mjs builds it. */
static void sweep_one(const sweep_run *r, const char *in, size_t len, sbuf *out) {
    out->n = 0;
    sput(out, "", 0);
    if (r->n) {
        tm_nstr ns;
        if (run_normalizer(r->n, in, len, &ns)) sput(out, ns.s, ns.len);
        else sput(out, "<error>", 7);
        tm__nstr_free(&ns);
    } else if (r->p) {
        tm_pstr ps;
        if (run_pretok(r->p, in, len, &ps)) {
            for (size_t k = 0; k < ps.n; k++) {
                const tm_nstr *ns = &ps.v[k].ns;
                tm_span sp = tm__nstr_original_range(ns, 0, ns->len);
                long a, b;
                char num[64];
                to_chars(in, len, sp.start, sp.end, &a, &b);
                if (k) sput(out, "\x02", 1);
                sput(out, ns->s, ns->len);
                int m = snprintf(num, sizeof num, "\x01%ld,%ld", a, b);
                sput(out, num, (size_t)m);
            }
        } else {
            sput(out, "<error>", 7);
        }
        tm__pstr_free(&ps);
    } else {
        tm_strs l = {0};
        tm__strs_push(&l, in, len, NULL);
        size_t n;
        char *s = run_decoder(r->d, &l, &n);
        if (s) sput(out, s, n);
        free(s);
        tm__strs_free(&l);
    }
}

static size_t expand(const char *tpl, uint32_t cp, char *out) {
    uint32_t d = cp + 1 == 0xd800 ? 0xe000 : cp + 1 > 0x10ffff ? 0x20 : cp + 1;
    size_t o = 0;
    for (const char *t = tpl; *t;) {
        if (!strncmp(t, "{c}", 3)) o += tm__utf8_encode(cp, out + o), t += 3;
        else if (!strncmp(t, "{d}", 3)) o += tm__utf8_encode(d, out + o), t += 3;
        else out[o++] = *t++;
    }
    out[o] = '\0';
    return o;
}

static int sweep_setup(const char *slot, const char *name, sweep_run *r) {
    const char *file = !strcmp(slot, "normalizer") ? "normalizers.json" :
                       !strcmp(slot, "pre_tokenizer") ? "pretokenizers.json" : "decoders.json";
    memset(r, 0, sizeof *r);
    r->slot = slot;
    tm_json *all = load_cases(file);
    if (!all) return 0;
    tm_error err = {0};
    tm_status s = TM_ERR_PARSE;
    for (int e = 0; e < all->n; e++) {
        if (strcmp(tm_json_get_string(&all->items[e], "name"), name)) continue;
        const tm_json *cfg = get(&all->items[e], "config");
        if (file[0] == 'n') s = tm__normalizer_load(cfg, slot, &r->n, &err);
        else if (file[0] == 'p') s = tm__pretokenizer_load(cfg, slot, &r->p, &err);
        else s = tm__decoder_load(cfg, slot, &r->d, &err);
        break;
    }
    tm_json_free(all);
    if (s) printf("FAIL sweep %s %s: cannot load: %s\n", slot, name, err.message), n_failed++;
    return s == TM_OK;
}

static void sweep_free(sweep_run *r) {
    tm__normalizer_free(r->n);
    tm__pretokenizer_free(r->p);
    tm__decoder_free(r->d);
}

static void sweeps(void) {
    size_t len;
    char *text = read_file(in_dir("sweeps.txt"), &len);
    if (!text) {
        printf("FAIL cannot read sweeps.txt\n");
        n_failed++;
        return;
    }
    sbuf out = {0};
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#') continue;
        char slot[32], name[64], tpl_json[64];
        int at;
        if (sscanf(line, "%31s %63s %63s %n", slot, name, tpl_json, &at) != 3) continue;
        tm_json *tj = tm_json_parse(tpl_json, strlen(tpl_json));
        if (!tj) continue;
        sweep_run r;
        if (!sweep_setup(slot, name, &r)) {
            tm_json_free(tj);
            continue;
        }
        const char *h = line + at;
        int bad = 0;
        char in[64];
        for (uint32_t block = 0; block < 0x110000 / BLOCK; block++) {
            uint32_t hash = 2166136261u;
            for (uint32_t cp = block * BLOCK; cp < (block + 1) * BLOCK; cp++) {
                if (cp >= 0xd800 && cp <= 0xdfff) continue;
                size_t n = expand(tj->string, cp, in);
                sweep_one(&r, in, n, &out);
                hash = fnv(hash, out.p, out.n + 1);
            }
            char hex[9];
            snprintf(hex, sizeof hex, "%08x", hash);
            if (strncmp(h + block * 9, hex, 8)) {
                if (bad < 6) printf("  sweep %s %s %s: block U+%04X differs\n", slot, name, tpl_json, block * BLOCK);
                bad++;
            }
        }
        char label[160];
        snprintf(label, sizeof label, "%s %s %s", slot, name, tpl_json);
        char nb[32];
        snprintf(nb, sizeof nb, "%d", bad);
        check(!bad, "sweep %s: %s blocks differ", label, nb);
        sweep_free(&r);
        tm_json_free(tj);
    }
    free(out.p);
    free(text);
}

static void dump(const char *slot, const char *name, const char *tpl) {
    sweep_run r;
    if (!sweep_setup(slot, name, &r)) return;
    sbuf out = {0};
    char in[64];
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
        if (cp >= 0xd800 && cp <= 0xdfff) continue;
        size_t n = expand(tpl, cp, in);
        sweep_one(&r, in, n, &out);
        printf("%x\t", cp);
        /* JSON string as JS's JSON.stringify writes it */
        putchar('"');
        for (size_t i = 0; i < out.n; i++) {
            unsigned char c = (unsigned char)out.p[i];
            if (c == '"' || c == '\\') printf("\\%c", c);
            else if (c == '\b') printf("\\b");
            else if (c == '\f') printf("\\f");
            else if (c == '\n') printf("\\n");
            else if (c == '\r') printf("\\r");
            else if (c == '\t') printf("\\t");
            else if (c < 0x20) printf("\\u%04x", c);
            else putchar(c);
        }
        printf("\"\n");
    }
    free(out.p);
    sweep_free(&r);
}

int main(int argc, char **argv) {
    if (argc == 5 && !strcmp(argv[1], "--dump")) {
        dump(argv[2], argv[3], argv[4]);
        return 0;
    }
    int fixed = 1;
    if (argc == 3 && !strcmp(argv[1], "--dir")) {
        static char d[1024];
        snprintf(d, sizeof d, "%s/", argv[2]);
        dir = d;
        fixed = 0;
    }
    normalizer_cases();
    pretok_cases();
    decoder_cases();
    if (fixed) error_cases(), handmade_cases();
    if (fixed && !getenv("TM_TOK_NO_SWEEPS")) sweeps();
    printf("%d passed, %d failed\n", n_passed, n_failed);
    return n_failed != 0;
}
