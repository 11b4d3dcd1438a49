/* The NFD, NFKD, NFC and NFKC normalizers, and the aligned normalization BertNormalizer
 * also uses: utf8proc's decomposition and composition data driven by the algorithm of
 * Rust's unicode-normalization-alignments, so that the (char, change) stream, and with it
 * every alignment, is Rust's. Not case folding or other utf8proc transforms. */
#include <string.h>
#include <utf8proc.h>
#include "components.h"

typedef struct item {
    uint32_t c;
    int change;
    uint8_t ccc;
} item;

typedef struct items {
    item *v;
    size_t n, cap;
    int failed;
} items;

static void add(items *l, uint32_t c, int change, uint8_t ccc) {
    if (l->failed) return;
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        item *v = realloc(l->v, cap * sizeof *v);
        if (!v) {
            l->failed = 1;
            return;
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (item){c, change, ccc};
}

static uint8_t ccc_of(uint32_t c) {
    if (c < 0x300 || tm__rust_nf_unknown(c)) return 0;
    return (uint8_t)utf8proc_get_property((utf8proc_int32_t)c)->combining_class;
}

/* Composites Unicode excludes from composition because they were encoded after it
 * ("post composition version"); utf8proc 2.8 composes them, Rust does not. */
static int post_composition(uint32_t c) {
    return c == 0x2adc || (c >= 0x1d15e && c <= 0x1d164) || (c >= 0x1d1bb && c <= 0x1d1c0);
}

/* Whether c can be the second character of a primary composite (utf8proc's table marks
 * those with comb_index >= 0x8000; Hangul vowels and trailing consonants compose
 * algorithmically). */
static int maybe_second(uint32_t c) {
    if ((c >= 0x1161 && c <= 0x1175) || (c >= 0x11a8 && c <= 0x11c2)) return 1;
    uint16_t ci = utf8proc_get_property((utf8proc_int32_t)c)->comb_index;
    return ci != UINT16_MAX && ci >= 0x8000;
}

/* The primary composite of (a, b), or 0. */
static uint32_t compose(uint32_t a, uint32_t b) {
    if (!maybe_second(b)) return 0;
    utf8proc_int32_t buf[2] = {(utf8proc_int32_t)a, (utf8proc_int32_t)b};
    utf8proc_ssize_t n = utf8proc_normalize_utf32(buf, 2, UTF8PROC_COMPOSE);
    if (n != 1 || post_composition((uint32_t)buf[0]) || tm__rust_nf_unknown((uint32_t)buf[0]))
        return 0;
    return (uint32_t)buf[0];
}

/* Whether c comes out of every form unchanged and never composes with a neighbour. */
static int inert(uint32_t c) {
    if (c < 0x80) return 1;
    if (c >= 0xac00 && c <= 0xd7a3) return 0;
    const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)c);
    return p->decomp_seqindex == UINT16_MAX && p->combining_class == 0 && !maybe_second(c);
}

/* A long run of combining marks: a stable counting sort by class (a text of thousands of
 * marks in a row must not cost their square). Returns nonzero when out of memory. */
static int stable_sort_long(item *v, size_t n) {
    size_t count[257] = {0};
    item *tmp = malloc(n * sizeof *tmp);
    if (!tmp) return 1;
    for (size_t k = 0; k < n; k++) count[v[k].ccc + 1]++;
    for (int c = 1; c < 257; c++) count[c] += count[c - 1];
    for (size_t k = 0; k < n; k++) tmp[count[v[k].ccc]++] = v[k];
    memcpy(v, tmp, n * sizeof *v);
    free(tmp);
    return 0;
}

/* Full decomposition of every character (the first piece replaces it, the others are
 * insertions), then each run of non-starters stably sorted by combining class. */
static void decompose(const tm_nstr *ns, int compat, items *out) {
    utf8proc_option_t opt = UTF8PROC_DECOMPOSE | (compat ? UTF8PROC_COMPAT : 0);
    for (size_t i = 0; i < ns->len;) {
        uint32_t c;
        i += tm__utf8_decode(ns->s, i, &c);
        utf8proc_int32_t d[32];
        int bound = 0;
        utf8proc_ssize_t n = c < 0x80 || tm__rust_nf_unknown(c) ? 0 :
                             utf8proc_decompose_char((utf8proc_int32_t)c, d, 32, opt, &bound);
        if (n <= 0 || n > 32) {
            add(out, c, 0, ccc_of(c));
            continue;
        }
        for (utf8proc_ssize_t k = 0; k < n; k++) add(out, (uint32_t)d[k], k > 0, ccc_of((uint32_t)d[k]));
    }
    if (out->failed) return;
    for (size_t i = 0; i < out->n;) {
        if (!out->v[i].ccc) {
            i++;
            continue;
        }
        size_t j = i;
        while (j < out->n && out->v[j].ccc) j++;
        if (j - i > 32 && stable_sort_long(out->v + i, j - i)) {
            out->failed = 1;
            return;
        }
        for (size_t a = i + 1; a < j && j - i <= 32; a++) {   /* insertion sort: stable */
            item x = out->v[a];
            size_t b = a;
            while (b > i && out->v[b - 1].ccc > x.ccc) out->v[b] = out->v[b - 1], b--;
            out->v[b] = x;
        }
        i = j;
    }
}

/* The crate's recomposition state machine over the decomposed stream: a composed
 * character carries the sum of the changes of what it absorbed, minus one per absorbed
 * character. Blocked marks wait in a buffer and come out after their starter. */
static void recompose(const items *in, items *out) {
    item composee = {0};
    int have = 0, have_last = 0;
    uint8_t last_ccc = 0;
    items buf = {0};
    for (size_t i = 0; i < in->n && !out->failed; i++) {
        item ch = in->v[i];
        if (!have) {
            if (ch.ccc) {
                add(out, ch.c, ch.change, 0);
                continue;
            }
            composee = ch;
            have = 1;
            continue;
        }
        if (!have_last) {
            uint32_t r = compose(composee.c, ch.c);
            if (r) {
                composee.c = r;
                composee.change = composee.change + ch.change - 1;
                continue;
            }
            if (!ch.ccc) {
                add(out, composee.c, composee.change, 0);
                composee = ch;
                continue;
            }
            add(&buf, ch.c, ch.change, ch.ccc);
            last_ccc = ch.ccc;
            have_last = 1;
            continue;
        }
        if (last_ccc >= ch.ccc) {
            if (!ch.ccc) {          /* a new starter: flush the composee and the blocked */
                add(out, composee.c, composee.change, 0);
                for (size_t k = 0; k < buf.n; k++) add(out, buf.v[k].c, buf.v[k].change, 0);
                buf.n = 0;
                composee = ch;
                have_last = 0;
                continue;
            }
            add(&buf, ch.c, ch.change, ch.ccc);
            last_ccc = ch.ccc;
            continue;
        }
        uint32_t r = compose(composee.c, ch.c);
        if (r) {
            composee.c = r;
            composee.change = composee.change + ch.change - 1;
            continue;
        }
        add(&buf, ch.c, ch.change, ch.ccc);
        last_ccc = ch.ccc;
    }
    /* At the end: the composee, then the characters still blocked behind it. */
    if (have) add(out, composee.c, composee.change, 0);
    for (size_t k = 0; k < buf.n; k++) add(out, buf.v[k].c, buf.v[k].change, 0);
    if (buf.failed) out->failed = 1;
    free(buf.v);
}

tm_status tm__nstr_normalize_form(tm_nstr *ns, tm_nf_form form, tm_error *err) {
    size_t i = 0;
    while (i < ns->len) {
        uint32_t c;
        size_t n = tm__utf8_decode(ns->s, i, &c);
        if (!inert(c)) break;
        i += n;
    }
    if (i == ns->len) return TM_OK;
    items d = {0}, r = {0};
    decompose(ns, form == TM_NF_NFKD || form == TM_NF_NFKC, &d);
    const items *res = &d;
    if (!d.failed && (form == TM_NF_NFC || form == TM_NF_NFKC)) {
        recompose(&d, &r);
        res = &r;
    }
    if (d.failed || r.failed) {
        free(d.v);
        free(r.v);
        return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
    }
    tm_nbuild b;
    tm__nbuild_begin(&b, ns);
    for (size_t k = 0; k < res->n; k++) tm__nbuild_push(&b, res->v[k].c, res->v[k].change);
    free(d.v);
    free(r.v);
    return tm__nbuild_end(&b, err);
}

typedef struct unicode_norm {
    tm_normalizer base;
    tm_nf_form form;
} unicode_norm;

static tm_status normalize(const tm_normalizer *self, tm_nstr *ns, tm_error *err) {
    return tm__nstr_normalize_form(ns, ((const unicode_norm *)self)->form, err);
}

static void unicode_free(tm_normalizer *self) {
    free(self);
}

static tm_status load_norm_form(tm_nf_form form, tm_normalizer **out, tm_error *err) {
    unicode_norm *n = tm__comp_alloc(sizeof *n, err);
    if (!n) return TM_ERR_NO_MEMORY;
    n->base.normalize = normalize;
    n->base.free = unicode_free;
    n->form = form;
    *out = &n->base;
    return TM_OK;
}

static tm_status load_norm_nfd(const tm_json *cfg, const char *path, tm_normalizer **out,
                          tm_error *err) {
    return load_norm_form(TM_NF_NFD, out, err);
}

static tm_status load_norm_nfkd(const tm_json *cfg, const char *path, tm_normalizer **out,
                           tm_error *err) {
    return load_norm_form(TM_NF_NFKD, out, err);
}

static tm_status load_norm_nfc(const tm_json *cfg, const char *path, tm_normalizer **out,
                          tm_error *err) {
    return load_norm_form(TM_NF_NFC, out, err);
}

static tm_status load_norm_nfkc(const tm_json *cfg, const char *path, tm_normalizer **out,
                           tm_error *err) {
    return load_norm_form(TM_NF_NFKC, out, err);
}

TM_TOK_NORMALIZER("NFD", load_norm_nfd);
TM_TOK_NORMALIZER("NFKD", load_norm_nfkd);
TM_TOK_NORMALIZER("NFC", load_norm_nfc);
TM_TOK_NORMALIZER("NFKC", load_norm_nfkc);
