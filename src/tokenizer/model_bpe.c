/* The BPE model: vocabulary, merges (as "a b" strings or ["a", "b"] pairs) ranked by
 * position, merging by lowest rank then leftmost position, byte fallback (<0xNN>),
 * continuing_subword_prefix, end_of_word_suffix, ignore_merges, unknown token fusing.
 * Dropout is read and ignored (off at inference, as in transformers). Not the pre-tokenizers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tok.h"

typedef struct merge_slot {
    uint64_t key;               /* (a << 32 | b) + 1; 0 marks an empty slot */
    uint32_t rank;
    int32_t new_id;
} merge_slot;

typedef struct bpe {
    tm_tok_model base;
    tm_vocab vocab;
    merge_slot *merges;
    uint64_t mask;
    char *unk, *prefix, *suffix;
    size_t unk_len, prefix_len, suffix_len;
    int32_t unk_id;             /* -1: no unk token in the vocabulary */
    int fuse_unk, byte_fallback, ignore_merges;
    int32_t byte_ids[256];      /* <0xNN> ids, -1 when absent */
    /* Where a word may be cut into parts merged on their own (see split_points): adjacent
     * character pairs found inside some vocabulary string, and the characters that are
     * tokens by themselves. Keys as pair_set_key; open addressing, 0 empty. NULL: never cut
     * (continuing_subword_prefix / end_of_word_suffix make the parts depend on the word). */
    uint64_t *pairs;
    uint64_t pairs_mask;
    uint64_t cache_id;          /* its entries in the per-thread word caches (wcache.c) */
} bpe;

static tm_status no_memory(tm_error *err) {
    return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
}

static uint64_t pair_key(int32_t a, int32_t b) {
    return ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
}

static uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
}

static const merge_slot *merge_find(const bpe *m, int32_t a, int32_t b) {
    if (!m->merges) return NULL;
    uint64_t key = pair_key(a, b);
    for (uint64_t i = mix(key) & m->mask;; i = (i + 1) & m->mask) {
        if (!m->merges[i].key) return NULL;
        if (m->merges[i].key == key) return &m->merges[i];
    }
}

static void merge_put(bpe *m, int32_t a, int32_t b, uint32_t rank, int32_t new_id) {
    uint64_t key = pair_key(a, b);
    uint64_t i = mix(key) & m->mask;
    while (m->merges[i].key && m->merges[i].key != key) i = (i + 1) & m->mask;
    m->merges[i] = (merge_slot){key, rank, new_id};
}

/* ---- Merging one word ------------------------------------------------------------- */

typedef struct symbol {
    int32_t id;
    int32_t prev, next;
    uint32_t start, len;        /* bytes of the word */
} symbol;

typedef struct qitem {
    uint32_t rank, pos;
    int32_t new_id;
} qitem;

static int q_less(const qitem *a, const qitem *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void q_push(qitem *q, size_t *n, qitem it) {
    size_t i = (*n)++;
    q[i] = it;
    while (i && q_less(&q[i], &q[(i - 1) / 2])) {
        qitem t = q[i];
        q[i] = q[(i - 1) / 2];
        q[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

static qitem q_pop(qitem *q, size_t *n) {
    qitem top = q[0];
    q[0] = q[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, s = i;
        if (l < *n && q_less(&q[l], &q[s])) s = l;
        if (r < *n && q_less(&q[r], &q[s])) s = r;
        if (s == i) break;
        qitem t = q[i];
        q[i] = q[s];
        q[s] = t;
        i = s;
    }
    return top;
}

typedef struct word {
    symbol *sym;
    size_t n, cap;
    symbol *stack;              /* the caller's buffer sym starts in (never freed) */
} word;

static int word_add(word *w, int32_t id, uint32_t byte_len) {
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 32;
        symbol *s = w->sym == w->stack ? malloc(cap * sizeof *s) : realloc(w->sym, cap * sizeof *s);
        if (!s) return 0;
        if (w->sym == w->stack && w->n) memcpy(s, w->stack, w->n * sizeof *s);
        w->sym = s;
        w->cap = cap;
    }
    uint32_t start = 0;
    if (w->n) start = w->sym[w->n - 1].start + w->sym[w->n - 1].len;
    w->sym[w->n] = (symbol){id, (int32_t)w->n - 1, -1, start, byte_len};
    if (w->n) w->sym[w->n - 1].next = (int32_t)w->n;
    w->n++;
    return 1;
}

static tm_status merge_all(const bpe *m, word *w, tm_error *err) {
    if (w->n < 2 || !m->merges) return TM_OK;
    qitem stack[96];
    size_t cap = w->n * 3 + 8;  /* n - 1 initial pairs, at most two pushes per merge */
    qitem *q = cap <= 96 ? stack : malloc(cap * sizeof *q);
    if (!q) return no_memory(err);
    size_t nq = 0;
    for (size_t i = 0; i + 1 < w->n; i++) {
        const merge_slot *ms = merge_find(m, w->sym[i].id, w->sym[i + 1].id);
        if (ms) q_push(q, &nq, (qitem){ms->rank, (uint32_t)i, ms->new_id});
    }
    while (nq) {
        qitem top = q_pop(q, &nq);
        symbol *cur = &w->sym[top.pos];
        if (!cur->len || cur->next < 0) continue;
        int32_t right_pos = cur->next;
        symbol right = w->sym[right_pos];
        const merge_slot *ms = merge_find(m, cur->id, right.id);
        if (!ms || ms->new_id != top.new_id) continue;     /* an outdated entry */
        cur->id = top.new_id;
        cur->len += right.len;
        cur->next = right.next;
        w->sym[right_pos].len = 0;
        if (right.next >= 0) w->sym[right.next].prev = (int32_t)top.pos;
        if (cur->prev >= 0) {
            const merge_slot *p = merge_find(m, w->sym[cur->prev].id, cur->id);
            if (p) q_push(q, &nq, (qitem){p->rank, (uint32_t)cur->prev, p->new_id});
        }
        if (cur->next >= 0) {
            const merge_slot *p = merge_find(m, cur->id, w->sym[cur->next].id);
            if (p) q_push(q, &nq, (qitem){p->rank, top.pos, p->new_id});
        }
    }
    if (q != stack) free(q);
    return TM_OK;
}

/* ---- Cutting words where no merge can cross ------------------------------------------
 * A merge's result is a vocabulary string, so a symbol can only ever span the boundary
 * between characters a and b when some vocabulary string holds "ab". Where none does (and
 * a and b are tokens by themselves, so no unknown-token fusing or byte fallback spans it
 * either) the two sides merge independently: BPE picks merges by rank then position, and
 * each side's sequence of merges is the one it would make alone. Cutting there gives the
 * same tokens, lets SentencePiece-style models (the whole text one word) merge short parts
 * instead of one long heap, and makes the parts cacheable. */

static uint64_t pair_set_key(uint32_t a, uint32_t b) { return ((uint64_t)a << 32 | b) + 1; }
static uint64_t char_set_key(uint32_t c) { return (1ull << 63) | c; }

static int set_has(const bpe *m, uint64_t key) {
    for (uint64_t i = mix(key) & m->pairs_mask;; i = (i + 1) & m->pairs_mask) {
        if (!m->pairs[i]) return 0;
        if (m->pairs[i] == key) return 1;
    }
}

static void set_put(uint64_t *t, uint64_t mask, uint64_t key) {
    uint64_t i = mix(key) & mask;
    while (t[i] && t[i] != key) i = (i + 1) & mask;
    t[i] = key;
}

static tm_status build_pairs(bpe *m, tm_error *err) {
    const tm_vocab *v = &m->vocab;
    size_t n = 0;
    for (uint32_t e = 0; e < v->n; e++) n += v->len[e];   /* at least the pairs + chars */
    uint64_t size = 1024;
    while (size < 2 * (uint64_t)n + 16) size *= 2;
    m->pairs = calloc(size, sizeof *m->pairs);
    if (!m->pairs) return no_memory(err);
    m->pairs_mask = size - 1;
    for (uint32_t e = 0; e < v->n; e++) {
        const char *str = v->arena + v->off[e];
        uint32_t prev = 0, c;
        size_t k = 0, chars = 0;
        while (k < v->len[e]) {
            k += tm__utf8_decode(str, k, &c);
            if (chars++) set_put(m->pairs, m->pairs_mask, pair_set_key(prev, c));
            prev = c;
        }
        if (chars == 1) set_put(m->pairs, m->pairs_mask, char_set_key(c));
    }
    return TM_OK;
}

/* Whether a word may be cut between characters a and b. */
static int may_cut(const bpe *m, uint32_t a, uint32_t b) {
    return !set_has(m, pair_set_key(a, b)) && set_has(m, char_set_key(a)) &&
           set_has(m, char_set_key(b));
}

/* Looks s (+ prefix when not first, + suffix when last) up; returns the id or -1. */
static int32_t lookup_piece(const bpe *m, const char *s, size_t n, int first, int last,
                            char *buf, size_t *blen) {
    const char *key = s;
    size_t klen = n;
    if ((!first && m->prefix) || (last && m->suffix)) {
        size_t k = 0;
        if (!first && m->prefix) memcpy(buf, m->prefix, m->prefix_len), k = m->prefix_len;
        memcpy(buf + k, s, n);
        k += n;
        if (last && m->suffix) memcpy(buf + k, m->suffix, m->suffix_len), k += m->suffix_len;
        key = buf;
        klen = k;
    }
    *blen = klen;
    if (key != buf) memcpy(buf, s, n);
    return tm__vocab_find(&m->vocab, key, klen);
}

/* Merges one word (or part of one), appending its tokens with offsets from `base`. */
static tm_status bpe_word(const bpe *m, const char *s, size_t len, size_t base, tm_toklist *tl,
                          tm_error *err) {
    symbol stack[64];
    word w = {stack, 0, 64, stack};
    tm_status st = TM_OK;
    char sbuf[128];
    size_t extra = m->prefix_len + m->suffix_len + 4;
    char *buf = extra <= sizeof sbuf ? sbuf : malloc(extra);
    if (!buf) return no_memory(err);
    int have_unk = 0;
    uint32_t unk_len = 0;
    for (size_t i = 0; i < len && !st;) {
        size_t cl = tm__utf8_len((unsigned char)s[i]);
        int first = i == 0, last = i + cl >= len;
        size_t klen;
        int32_t id = lookup_piece(m, s + i, cl, first, last, buf, &klen);
        if (id >= 0) {
            if (have_unk) {
                if (!word_add(&w, m->unk_id, unk_len)) st = no_memory(err);
                have_unk = 0;
            }
            if (!st && !word_add(&w, id, (uint32_t)cl)) st = no_memory(err);
            i += cl;
            continue;
        }
        if (m->byte_fallback) {
            int all = 1;
            for (size_t k = 0; k < klen; k++) all &= m->byte_ids[(unsigned char)buf[k]] >= 0;
            if (all) {
                for (size_t k = 0; k < klen && !st; k++)
                    if (!word_add(&w, m->byte_ids[(unsigned char)buf[k]], 1)) st = no_memory(err);
                i += cl;
                continue;
            }
        }
        if (m->unk) {
            if (m->unk_id < 0) {
                st = tm__fail(err, TM_ERR_RUNTIME, "tokenizer: the unknown token \"%s\" is not "
                              "in the BPE vocabulary", m->unk);
                break;
            }
            if (have_unk && m->fuse_unk) {
                unk_len += (uint32_t)cl;
            } else {
                if (have_unk && !word_add(&w, m->unk_id, unk_len)) st = no_memory(err);
                have_unk = 1;
                unk_len = (uint32_t)cl;
            }
        }
        i += cl;
    }
    if (!st && have_unk && !word_add(&w, m->unk_id, unk_len)) st = no_memory(err);
    if (buf != sbuf) free(buf);
    if (!st) st = merge_all(m, &w, err);
    uint32_t at = 0;
    for (size_t k = 0; k < w.n && !st; k++) {
        if (!w.sym[k].len) continue;      /* merged into its left neighbour */
        /* offsets follow the symbols' byte lengths, as Rust's Word */
        uint32_t vl = 0;
        const char *v = tm__vocab_str(&m->vocab, w.sym[k].id, &vl);
        st = tm__toklist_push(tl, w.sym[k].id, base + at, base + at + w.sym[k].len, v ? v : "", vl, 0,
                              err);
        at += w.sym[k].len;
    }
    if (w.sym != stack) free(w.sym);
    return st;
}

/* One part of a word: from this thread's cache, else merged (and cached when short). */
static tm_status bpe_part(const bpe *m, tm_wcache *c, const char *s, size_t from, size_t to,
                          tm_toklist *tl, tm_error *err) {
    size_t n = to - from;
    tm_status st;
    if (tm__wcache_find(c, s + from, n, from, &m->vocab, tl, &st, err)) return st;
    int before = tl->n;
    st = bpe_word(m, s + from, n, from, tl, err);
    if (!st) tm__wcache_put(c, s + from, n, from, tl, before);
    return st;
}

/* A short word whole (from the cache); a long one cut where may_cut allows, each part
 * merged on its own. */
static tm_status bpe_parts(const bpe *m, const char *s, size_t len, tm_toklist *tl, tm_error *err) {
    tm_wcache *c = tm__wcache_get(m->cache_id);
    if (len <= 46) return bpe_part(m, c, s, 0, len, tl, err);   /* short: whole, cached */
    uint32_t prev;
    size_t from = 0, i = tm__utf8_decode(s, 0, &prev);
    while (i < len) {
        uint32_t cur;
        size_t n = tm__utf8_decode(s, i, &cur);
        if (may_cut(m, prev, cur)) {
            tm_status st = bpe_part(m, c, s, from, i, tl, err);
            if (st) return st;
            from = i;
        }
        prev = cur;
        i += n;
    }
    return bpe_part(m, c, s, from, len, tl, err);
}

static tm_status bpe_tokenize(const tm_tok_model *base, const char *s, size_t len,
                              tm_tok_token **out, int *n_out, tm_error *err) {
    const bpe *m = (const bpe *)base;
    tm_toklist tl = {0};
    *out = NULL;
    *n_out = 0;
    if (!len) return TM_OK;
    if (m->ignore_merges) {
        int32_t id = tm__vocab_find(&m->vocab, s, len);
        if (id >= 0) {
            uint32_t vl;
            const char *v = tm__vocab_str(&m->vocab, id, &vl);
            tm_status st = tm__toklist_push(&tl, id, 0, len, v, vl, 0, err);
            if (st) return st;
            *out = tl.v;
            *n_out = tl.n;
            return TM_OK;
        }
    }
    tm_status st = m->pairs ? bpe_parts(m, s, len, &tl, err) : bpe_word(m, s, len, 0, &tl, err);
    if (st) {
        free(tl.v);
        return st;
    }
    *out = tl.v;
    *n_out = tl.n;
    return TM_OK;
}

static int32_t bpe_token_to_id(const tm_tok_model *base, const char *s, size_t len) {
    return tm__vocab_find(&((const bpe *)base)->vocab, s, len);
}

static const char *bpe_id_to_token(const tm_tok_model *base, int32_t id, uint32_t *len) {
    return tm__vocab_str(&((const bpe *)base)->vocab, id, len);
}

static size_t bpe_vocab_size(const tm_tok_model *base) {
    return ((const bpe *)base)->vocab.n;
}

static void bpe_free(tm_tok_model *base) {
    bpe *m = (bpe *)base;
    tm__vocab_free(&m->vocab);
    free(m->merges);
    free(m->pairs);
    tm__wcache_release(m->cache_id);
    free(m->unk);
    free(m->prefix);
    free(m->suffix);
    free(m);
}

static char *dup_or_null(const char *s, size_t len) {
    if (!s) return NULL;
    char *d = malloc(len + 1);
    if (d) memcpy(d, s, len), d[len] = '\0';
    return d;
}

/* One merge entry: "a b" (exactly one space) or ["a", "b"]. */
static tm_status merge_parts(const tm_json *x, const char *path, int i, const char **a,
                             size_t *alen, const char **b, size_t *blen, tm_error *err) {
    char where[64];
    snprintf(where, sizeof where, "merges[%d]", i);
    if (x->type == TM_JSON_STRING) {
        const char *sp = memchr(x->string, ' ', x->len);
        if (!sp || memchr(sp + 1, ' ', x->len - (size_t)(sp + 1 - x->string)))
            return tm__tok_fail(err, path, where, "a merge must be two tokens separated by one "
                                "space, got \"%s\"", x->string);
        *a = x->string;
        *alen = (size_t)(sp - x->string);
        *b = sp + 1;
        *blen = x->len - *alen - 1;
        return TM_OK;
    }
    if (x->type == TM_JSON_ARRAY && x->n == 2 && x->items[0].type == TM_JSON_STRING &&
        x->items[1].type == TM_JSON_STRING) {
        *a = x->items[0].string;
        *alen = x->items[0].len;
        *b = x->items[1].string;
        *blen = x->items[1].len;
        return TM_OK;
    }
    return tm__tok_fail(err, path, where, "expected \"a b\" or [\"a\", \"b\"]");
}

static tm_status load_merges(bpe *m, const tm_json *merges, const char *path, tm_error *err) {
    uint64_t size = 16;
    while (size < (uint64_t)merges->n * 2 + 16) size *= 2;
    m->merges = calloc(size, sizeof *m->merges);
    if (!m->merges) return no_memory(err);
    m->mask = size - 1;
    char sbuf[512];
    for (int i = 0; i < merges->n; i++) {
        const char *a = NULL, *b = NULL;
        size_t alen = 0, blen = 0;
        tm_status st = merge_parts(&merges->items[i], path, i, &a, &alen, &b, &blen, err);
        if (st) return st;
        int32_t ida = tm__vocab_find(&m->vocab, a, alen), idb = tm__vocab_find(&m->vocab, b, blen);
        size_t cut = m->prefix && blen >= m->prefix_len ? m->prefix_len : 0;
        if (m->prefix && blen < m->prefix_len) cut = blen;
        size_t nlen = alen + blen - cut;
        char *buf = nlen <= sizeof sbuf ? sbuf : malloc(nlen);
        if (!buf) return no_memory(err);
        memcpy(buf, a, alen);
        memcpy(buf + alen, b + cut, blen - cut);
        int32_t idn = tm__vocab_find(&m->vocab, buf, nlen);
        if (buf != sbuf) free(buf);
        if (ida < 0 || idb < 0 || idn < 0) {
            char where[64];
            snprintf(where, sizeof where, "merges[%d]", i);
            return tm__tok_fail(err, path, where, "a merge token is not in the vocabulary "
                                "(\"%.*s\" + \"%.*s\")", (int)alen, a, (int)blen, b);
        }
        merge_put(m, ida, idb, (uint32_t)i, idn);
    }
    return TM_OK;
}

tm_status tm__model_bpe_load(const tm_json *cfg, const char *path, tm_tok_model **out,
                             tm_error *err) {
    bpe *m = calloc(1, sizeof *m);
    if (!m) return no_memory(err);
    m->base = (tm_tok_model){bpe_tokenize, bpe_token_to_id, bpe_id_to_token, bpe_vocab_size, bpe_free};
    const char *unk, *prefix, *suffix;
    size_t unk_len, prefix_len, suffix_len;
    const tm_json *merges = tm_json_get(cfg, "merges");
    tm_status st = tm__tj_string(cfg, "unk_token", NULL, &unk, &unk_len, path, err);
    if (!st) st = tm__tj_string(cfg, "continuing_subword_prefix", NULL, &prefix, &prefix_len, path, err);
    if (!st) st = tm__tj_string(cfg, "end_of_word_suffix", NULL, &suffix, &suffix_len, path, err);
    if (!st) st = tm__tj_bool(cfg, "fuse_unk", 0, &m->fuse_unk, path, err);
    if (!st) st = tm__tj_bool(cfg, "byte_fallback", 0, &m->byte_fallback, path, err);
    if (!st) st = tm__tj_bool(cfg, "ignore_merges", 0, &m->ignore_merges, path, err);
    if (!st) st = tm__vocab_from_json(tm_json_get(cfg, "vocab"), path, &m->vocab, err);
    if (!st && merges && merges->type != TM_JSON_NULL && merges->type != TM_JSON_ARRAY)
        st = tm__tok_fail(err, path, "merges", "expected an array");
    if (!st) {
        m->unk = dup_or_null(unk, unk_len);
        m->prefix = dup_or_null(prefix, prefix_len);
        m->suffix = dup_or_null(suffix, suffix_len);
        m->unk_len = unk_len, m->prefix_len = prefix_len, m->suffix_len = suffix_len;
        if ((unk && !m->unk) || (prefix && !m->prefix) || (suffix && !m->suffix)) st = no_memory(err);
    }
    if (!st && merges && merges->type == TM_JSON_ARRAY) st = load_merges(m, merges, path, err);
    if (st) {
        bpe_free(&m->base);
        return st;
    }
    if (!m->prefix && !m->suffix && (st = build_pairs(m, err))) {
        bpe_free(&m->base);
        return st;
    }
    m->cache_id = tm__wcache_owner();
    m->unk_id = m->unk ? tm__vocab_find(&m->vocab, m->unk, m->unk_len) : -1;
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        m->byte_ids[b] = tm__vocab_find(&m->vocab, name, 6);
    }
    *out = &m->base;
    return TM_OK;
}
