/* The Unigram model: the best segmentation by summed piece scores (Viterbi over bytes, as
 * SentencePiece's optimized encoder), unknown characters scored min - 10 and fused, byte
 * fallback to <0xNN> pieces. The prefix search uses a hash of every piece prefix, extended a
 * byte at a time, that also gives the piece's id. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tok.h"

typedef struct unigram {
    tm_tok_model base;
    tm_vocab vocab;             /* piece -> id (the last duplicate wins) */
    tm_vocab prefixes;          /* every prefix of a piece -> its id when it is a piece
                                   (as vocab), else -2; hashed bytewise */
    double *score;              /* by id */
    uint32_t n_pieces;
    int32_t unk_id;             /* -1: none */
    int byte_fallback;
    double min_score;
    uint64_t cache_id;          /* its entries in the per-thread word caches (wcache.c) */
} unigram;

static tm_status no_memory(tm_error *err) {
    return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
}

typedef struct node {
    double score;
    int32_t id;
    int32_t starts_at;          /* -1: not reached */
} node;

static tm_status push_piece(const unigram *m, const char *s, size_t start, size_t end,
                            tm_toklist *tl, tm_error *err) {
    size_t len = end - start;
    int32_t id = tm__vocab_find(&m->vocab, s + start, len);
    if (id >= 0) {
        /* a piece: its string is the text (no copy) */
        uint32_t vl;
        const char *vs = tm__vocab_str(&m->vocab, id, &vl);
        return tm__toklist_push(tl, id, start, end, vs ? vs : "", vl, 0, err);
    }
    if (m->byte_fallback) {
        int32_t ids[64];
        int all = len <= 64;
        for (size_t k = 0; k < len && all; k++) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", (unsigned char)s[start + k]);
            ids[k] = tm__vocab_find(&m->vocab, name, 6);
            all = ids[k] >= 0;
        }
        if (all) {
            for (size_t k = 0; k < len; k++) {
                uint32_t vl;
                const char *v = tm__vocab_str(&m->vocab, ids[k], &vl);
                tm_status st = tm__toklist_push(tl, ids[k], start, end, v, vl, 0, err);
                if (st) return st;
            }
            return TM_OK;
        }
    }
    if (m->unk_id < 0)
        return tm__fail(err, TM_ERR_RUNTIME, "tokenizer: the Unigram model has no unk_id for an "
                        "unknown piece");
    id = m->unk_id;
    /* the token keeps its own text, also when it is the unknown id */
    char *v = malloc(len + 1);
    if (!v) return no_memory(err);
    memcpy(v, s + start, len);
    v[len] = '\0';
    return tm__toklist_push(tl, id, start, end, v, len, 1, err);
}

/* The best segmentation of s, appended to tl. */
static tm_status ug_viterbi(const unigram *m, const char *s, size_t len, tm_toklist *tl,
                            tm_error *err) {
    node *best = malloc((len + 1) * sizeof *best);
    size_t *cuts = malloc((len + 1) * 2 * sizeof *cuts);
    if (!best || !cuts) {
        free(best);
        free(cuts);
        return no_memory(err);
    }
    for (size_t i = 0; i <= len; i++) best[i] = (node){0, 0, -1};
    double unk_score = m->min_score - 10.0;
    tm_status st = TM_OK;
    for (size_t start = 0; start < len && !st; ) {
        double here = best[start].score;
        size_t mblen = tm__utf8_len((unsigned char)s[start]);
        int single = 0;
        uint64_t h = TM_HASH_START;
        size_t hashed = start;
        for (size_t end = start + mblen; end <= len;) {
            while (hashed < end) h = tm__hash_step(h, (unsigned char)s[hashed++]);
            int32_t id = tm__vocab_find_hashed(&m->prefixes, s + start, end - start,
                                               tm__hash_finish(h));
            if (id == -1) break;                      /* no piece starts so */
            if (id >= 0) {
                double cand = m->score[id] + here;
                if (best[end].starts_at < 0 || cand > best[end].score)
                    best[end] = (node){cand, id, (int32_t)start};
                if (end - start == mblen) single = 1;
            }
            if (end == len) break;
            end += tm__utf8_len((unsigned char)s[end]);
        }
        if (!single) {
            if (m->unk_id < 0) {
                st = tm__fail(err, TM_ERR_RUNTIME, "tokenizer: the Unigram model has no unk_id "
                              "for an unknown character");
                break;
            }
            double cand = unk_score + here;
            if (best[start + mblen].starts_at < 0 || cand > best[start + mblen].score)
                best[start + mblen] = (node){cand, m->unk_id, (int32_t)start};
        }
        start += mblen;
    }
    /* Walk back; consecutive unknown pieces fuse into one. */
    size_t n = 0;
    size_t end = len, fused_end = 0;
    int fusing = 0;
    while (!st && end > 0) {
        size_t start = (size_t)best[end].starts_at;
        if (m->unk_id >= 0 && best[end].id == m->unk_id) {
            if (!fusing) fused_end = end, fusing = 1;
        } else {
            if (fusing) {
                cuts[2 * n] = end, cuts[2 * n + 1] = fused_end, n++;
                fusing = 0;
            }
            cuts[2 * n] = start, cuts[2 * n + 1] = end, n++;
        }
        end = start;
    }
    if (!st && fusing) cuts[2 * n] = 0, cuts[2 * n + 1] = fused_end, n++;
    for (size_t k = n; k-- > 0 && !st;) st = push_piece(m, s, cuts[2 * k], cuts[2 * k + 1], tl, err);
    free(best);
    free(cuts);
    return st;
}

static tm_status ug_tokenize(const tm_tok_model *base, const char *s, size_t len,
                             tm_tok_token **out, int *n_out, tm_error *err) {
    const unigram *m = (const unigram *)base;
    *out = NULL;
    *n_out = 0;
    if (!len) return TM_OK;
    tm_toklist tl = {0};
    tm_wcache *c = tm__wcache_get(m->cache_id);
    tm_status st;
    if (!tm__wcache_find(c, s, len, 0, &m->vocab, &tl, &st, err)) {
        st = ug_viterbi(m, s, len, &tl, err);
        if (!st) tm__wcache_put(c, s, len, 0, &tl, 0);
    }
    if (st) {
        for (int k = 0; k < tl.n; k++)
            if (tl.v[k].owned) free((char *)tl.v[k].value);
        free(tl.v);
        return st;
    }
    *out = tl.v;
    *n_out = tl.n;
    return TM_OK;
}

static int32_t ug_token_to_id(const tm_tok_model *base, const char *s, size_t len) {
    return tm__vocab_find(&((const unigram *)base)->vocab, s, len);
}

static const char *ug_id_to_token(const tm_tok_model *base, int32_t id, uint32_t *len) {
    return tm__vocab_str(&((const unigram *)base)->vocab, id, len);
}

static size_t ug_vocab_size(const tm_tok_model *base) {
    return ((const unigram *)base)->n_pieces;
}

static void ug_free(tm_tok_model *base) {
    unigram *m = (unigram *)base;
    tm__vocab_free(&m->vocab);
    tm__vocab_free(&m->prefixes);
    tm__wcache_release(m->cache_id);
    free(m->score);
    free(m);
}

tm_status tm__model_unigram_load(const tm_json *cfg, const char *path, tm_tok_model **out,
                                 tm_error *err) {
    unigram *m = calloc(1, sizeof *m);
    if (!m) return no_memory(err);
    m->base = (tm_tok_model){ug_tokenize, ug_token_to_id, ug_id_to_token, ug_vocab_size, ug_free};
    const tm_json *vocab;
    int64_t unk_id;
    tm_status st = tm__tj_array(cfg, "vocab", &vocab, path, err);
    if (!st) st = tm__tj_int(cfg, "unk_id", -1, &unk_id, path, err);
    if (!st) st = tm__tj_bool(cfg, "byte_fallback", 0, &m->byte_fallback, path, err);
    if (!st && !(m->score = malloc(((size_t)vocab->n + 1) * sizeof *m->score))) st = no_memory(err);
    m->min_score = 1e300;
    for (int i = 0; !st && i < vocab->n; i++) {
        const tm_json *e = &vocab->items[i];
        if (e->type != TM_JSON_ARRAY || e->n != 2 || e->items[0].type != TM_JSON_STRING ||
            e->items[1].type != TM_JSON_NUMBER) {
            char where[64];
            snprintf(where, sizeof where, "vocab[%d]", i);
            st = tm__tok_fail(err, path, where, "expected [\"piece\", score]");
            break;
        }
        const tm_json *p = &e->items[0];
        m->score[i] = e->items[1].number;
        if (m->score[i] < m->min_score) m->min_score = m->score[i];
        st = tm__vocab_add(&m->vocab, p->string, p->len, i, err);
        m->prefixes.bytewise = 1;
        for (size_t k = 1; !st && k < p->len; k++)
            if (((unsigned char)p->string[k] & 0xc0) != 0x80)
                st = tm__vocab_add(&m->prefixes, p->string, k, -2, err);
    }
    /* then every piece with its final id (a proper prefix of another may be a piece too) */
    for (uint32_t e = 0; !st && e < m->vocab.n; e++)
        st = tm__vocab_add(&m->prefixes, m->vocab.arena + m->vocab.off[e], m->vocab.len[e],
                           m->vocab.id[e], err);
    if (!st) st = tm__vocab_index(&m->vocab, err);
    if (!st && (unk_id < -1 || unk_id >= vocab->n))
        st = tm__tok_fail(err, path, "unk_id", "%lld is not an index of the vocabulary",
                          (long long)unk_id);
    if (st) {
        ug_free(&m->base);
        return st;
    }
    m->n_pieces = (uint32_t)vocab->n;
    m->cache_id = tm__wcache_owner();
    m->unk_id = (int32_t)unk_id;
    if (!vocab->n) m->min_score = 0;
    *out = &m->base;
    return TM_OK;
}
