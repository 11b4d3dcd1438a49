/* The Precompiled normalizer: SentencePiece's precompiled_charsmap (base64 of a
 * little-endian u32 trie size, a Darts double-array trie over UTF-8 bytes, then the blob
 * of NUL-terminated replacement strings), applied as Rust's spm_precompiled and
 * tokenizers do: per extended grapheme (shorter than 6 bytes) the first trie hit of its
 * prefixes replaces the whole grapheme, otherwise per character. Not NFKC. */
#include <string.h>
#include <utf8proc.h>
#include "components.h"

typedef struct precompiled {
    tm_normalizer base;
    uint32_t *trie;
    size_t trie_n;
    char *blob;             /* the replacement strings */
    size_t blob_len;
} precompiled;

static int b64_value(unsigned char c) {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
}

/* Standard base64 with padding; returns the decoded length or -1 (with *bad_at). */
static long b64_decode(const char *s, size_t len, unsigned char *out, size_t *bad_at) {
    if (len % 4) {
        *bad_at = len;
        return -1;
    }
    size_t o = 0;
    for (size_t i = 0; i < len; i += 4) {
        int v[4], pad = 0;
        for (int k = 0; k < 4; k++) {
            unsigned char c = (unsigned char)s[i + k];
            if (c == '=' && i + 4 == len && k >= 2 && (k == 3 || s[i + 3] == '=')) {
                v[k] = 0;
                pad++;
                continue;
            }
            if ((v[k] = b64_value(c)) < 0) {
                *bad_at = i + k;
                return -1;
            }
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        out[o++] = (unsigned char)(w >> 16);
        if (pad < 2) out[o++] = (unsigned char)(w >> 8);
        if (pad < 1) out[o++] = (unsigned char)w;
    }
    return (long)o;
}

/* Darts unit fields, as spm_precompiled reads them. */
static int has_leaf(uint32_t u) { return (u >> 8) & 1; }
static uint32_t value_of(uint32_t u) { return u & 0x7fffffffu; }
static uint32_t label_of(uint32_t u) { return u & (0x80000000u | 0xffu); }
static size_t offset_of(uint32_t u) { return (size_t)(u >> 10) << ((u & (1u << 9)) >> 6); }

/* The replacement for the SHORTEST prefix of key[0, len) found in the trie (Rust takes the
 * first result of common_prefix_search), or NULL. */
static const char *lookup(const precompiled *p, const char *key, size_t len, size_t *out_len) {
    if (!p->trie_n) return NULL;
    size_t pos = offset_of(p->trie[0]);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)key[i];
        if (!c) break;
        pos ^= c;
        if (pos >= p->trie_n) return NULL;
        uint32_t u = p->trie[pos];
        if (label_of(u) != c) return NULL;
        pos ^= offset_of(u);
        if (!has_leaf(u)) continue;
        if (pos >= p->trie_n) return NULL;
        size_t at = value_of(p->trie[pos]);
        if (at > p->blob_len) return NULL;          /* Rust would panic here */
        const char *end = memchr(p->blob + at, 0, p->blob_len - at);
        *out_len = end ? (size_t)(end - (p->blob + at)) : p->blob_len - at;
        /* an offset inside a character (Rust panics): no replacement */
        if (!tm__utf8_valid(p->blob + at, *out_len, NULL)) return NULL;
        return p->blob + at;
    }
    return NULL;
}

typedef struct tlist {
    uint32_t *c;
    int *change;
    size_t n, cap;
    int failed;
} tlist;

static void tpush(tlist *t, uint32_t c, int change) {
    if (t->failed) return;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        uint32_t *nc = realloc(t->c, cap * sizeof *nc);
        if (nc) t->c = nc;
        int *ch = nc ? realloc(t->change, cap * sizeof *ch) : NULL;
        if (!nc || !ch) {
            t->failed = 1;
            return;
        }
        t->change = ch;
        t->cap = cap;
    }
    t->c[t->n] = c;
    t->change[t->n] = change;
    t->n++;
}

/* tokenizers' replace(): the new characters replace the old ones one for one; extra new
 * ones are insertions (the last ones), missing ones are removals charged to the last
 * character pushed so far. */
static void replace_part(tlist *t, size_t old_chars, const char *s, size_t len) {
    size_t new_chars = 0;
    for (size_t i = 0; i < len;) {
        uint32_t c;
        i += tm__utf8_decode(s, i, &c);
        tpush(t, c, 0);
        new_chars++;
    }
    if (t->failed) return;
    if (new_chars > old_chars)
        for (size_t k = 0; k < new_chars - old_chars; k++) t->change[t->n - 1 - k] = 1;
    else if (new_chars < old_chars && t->n)
        t->change[t->n - 1] -= (int)(old_chars - new_chars);
}

static tm_status normalize(const tm_normalizer *self, tm_nstr *ns, tm_error *err) {
    const precompiled *p = (const precompiled *)self;
    tlist t = {0};
    int modified = 0;
    utf8proc_int32_t state = 0;
    for (size_t g = 0; g < ns->len;) {
        /* the extended grapheme cluster starting at g */
        uint32_t prev;
        size_t e = g + tm__utf8_decode(ns->s, g, &prev);
        while (e < ns->len) {
            uint32_t c;
            size_t n = tm__utf8_decode(ns->s, e, &c);
            if (utf8proc_grapheme_break_stateful((utf8proc_int32_t)prev, (utf8proc_int32_t)c, &state))
                break;
            prev = c;
            e += n;
        }
        size_t rlen;
        const char *r = e - g < 6 ? lookup(p, ns->s + g, e - g, &rlen) : NULL;
        if (r) {
            modified = 1;
            replace_part(&t, tm__utf8_count(ns->s + g, e - g), r, rlen);
        } else {
            for (size_t i = g; i < e;) {
                uint32_t c;
                size_t n = tm__utf8_decode(ns->s, i, &c);
                if ((r = lookup(p, ns->s + i, n, &rlen))) {
                    modified = 1;
                    replace_part(&t, 1, r, rlen);
                } else {
                    tpush(&t, c, 0);
                }
                i += n;
            }
        }
        g = e;
    }
    tm_status s = TM_OK;
    if (t.failed) s = tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
    else if (modified) {
        tm_nbuild b;
        tm__nbuild_begin(&b, ns);
        for (size_t k = 0; k < t.n; k++) tm__nbuild_push(&b, t.c[k], t.change[k]);
        s = tm__nbuild_end(&b, err);
    }
    free(t.c);
    free(t.change);
    return s;
}

static void precompiled_free(tm_normalizer *self) {
    precompiled *p = (precompiled *)self;
    free(p->trie);
    free(p->blob);
    free(p);
}

static tm_status load_norm_precompiled(const tm_json *cfg, const char *path, tm_normalizer **out,
                                  tm_error *err) {
    const char *s;
    size_t len, bad;
    tm_status st = tm__tj_req_string(cfg, "precompiled_charsmap", &s, &len, path, err);
    if (st) return st;
    unsigned char *raw = malloc(len / 4 * 3 + 4);
    if (!raw) return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
    long n = b64_decode(s, len, raw, &bad);
    if (n < 0) {
        free(raw);
        return tm__tok_fail(err, path, "precompiled_charsmap", "invalid base64 at offset %zu", bad);
    }
    uint32_t trie_size = n >= 4 ? (uint32_t)raw[0] | (uint32_t)raw[1] << 8 |
                                      (uint32_t)raw[2] << 16 | (uint32_t)raw[3] << 24 : 0;
    size_t trie_n = trie_size / 4;
    if (n < 4 || trie_n > ((size_t)n - 4) / 4) {
        free(raw);
        return tm__tok_fail(err, path, "precompiled_charsmap",
                            "truncated charsmap (%ld bytes, trie of %u bytes)", n, trie_size);
    }
    size_t blob_at = 4 + trie_n * 4, blob_len = (size_t)n - blob_at;
    if (!tm__utf8_valid((const char *)raw + blob_at, blob_len, &bad)) {
        free(raw);
        return tm__tok_fail(err, path, "precompiled_charsmap",
                            "normalized strings are not valid UTF-8 (byte %zu)", bad);
    }
    precompiled *p = tm__comp_alloc(sizeof *p, err);
    if (!p) {
        free(raw);
        return TM_ERR_NO_MEMORY;
    }
    p->base.normalize = normalize;
    p->base.free = precompiled_free;
    p->trie = malloc((trie_n ? trie_n : 1) * sizeof *p->trie);
    p->blob = malloc(blob_len + 1);
    if (!p->trie || !p->blob) {
        free(raw);
        precompiled_free(&p->base);
        return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
    }
    for (size_t i = 0; i < trie_n; i++) {
        const unsigned char *q = raw + 4 + i * 4;
        p->trie[i] = (uint32_t)q[0] | (uint32_t)q[1] << 8 | (uint32_t)q[2] << 16 | (uint32_t)q[3] << 24;
    }
    p->trie_n = trie_n;
    memcpy(p->blob, raw + blob_at, blob_len);
    p->blob[blob_len] = '\0';
    p->blob_len = blob_len;
    free(raw);
    *out = &p->base;
    return TM_OK;
}

TM_TOK_NORMALIZER("Precompiled", load_norm_precompiled);
