/* The WordPiece model (greedy longest match with a continuing-subword prefix, the whole word
 * as the unknown token when a piece is missing or the word is too long) and the WordLevel
 * model (one word, one id). Not BERT's normalizer or pre-tokenizer. */
#include <stdlib.h>
#include <string.h>
#include "tok.h"

typedef struct wordpiece {
    tm_tok_model base;
    tm_vocab vocab;
    char *unk, *prefix;
    size_t unk_len, prefix_len;
    int64_t max_chars;
    uint64_t cache_id;          /* its entries in the per-thread word caches (wcache.c) */
} wordpiece;

static tm_status no_memory(tm_error *err) {
    return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
}

static tm_status unk_token(const tm_vocab *v, const char *unk, size_t unk_len, size_t len,
                           tm_toklist *tl, tm_error *err) {
    int32_t id = tm__vocab_find(v, unk, unk_len);
    if (id < 0)
        return tm__fail(err, TM_ERR_RUNTIME, "tokenizer: the unknown token \"%s\" is not in the "
                        "vocabulary", unk);
    uint32_t vl;
    const char *s = tm__vocab_str(v, id, &vl);
    return tm__toklist_push(tl, id, 0, len, s, vl, 0, err);
}

static tm_status wp_tokenize(const tm_tok_model *base, const char *s, size_t len,
                             tm_tok_token **out, int *n_out, tm_error *err) {
    const wordpiece *m = (const wordpiece *)base;
    tm_toklist tl = {0};
    tm_status st = TM_OK;
    *out = NULL;
    *n_out = 0;
    tm_wcache *c = tm__wcache_get(m->cache_id);
    if (tm__wcache_find(c, s, len, 0, &m->vocab, &tl, &st, err)) goto done;
    if ((int64_t)tm__utf8_count(s, len) > m->max_chars) {
        st = unk_token(&m->vocab, m->unk, m->unk_len, len, &tl, err);
        goto done;
    }
    char sbuf[256];
    char *buf = m->prefix_len + len <= sizeof sbuf ? sbuf : malloc(m->prefix_len + len);
    if (!buf) return no_memory(err);
    memcpy(buf, m->prefix, m->prefix_len);
    size_t start = 0;
    while (start < len && !st) {
        size_t end = len;
        int32_t id = -1;
        /* no candidate longer than the vocabulary's longest string can match */
        size_t room = m->vocab.max_len > (start ? m->prefix_len : 0)
                          ? m->vocab.max_len - (start ? m->prefix_len : 0) : 0;
        if (end - start > room) {
            end = start + room;
            while (end > start && ((unsigned char)s[end] & 0xc0) == 0x80) end--;
        }
        while (start < end) {
            const char *key = s + start;
            size_t klen = end - start;
            if (start > 0) {
                memcpy(buf + m->prefix_len, s + start, end - start);
                key = buf;
                klen += m->prefix_len;
            }
            id = tm__vocab_find(&m->vocab, key, klen);
            if (id >= 0) break;
            /* drop the last character of the candidate */
            size_t k = end - 1;
            while (k > start && ((unsigned char)s[k] & 0xc0) == 0x80) k--;
            end = k;
        }
        if (id < 0) {
            tl.n = 0;
            st = unk_token(&m->vocab, m->unk, m->unk_len, len, &tl, err);
            break;
        }
        uint32_t vl;
        const char *v = tm__vocab_str(&m->vocab, id, &vl);
        st = tm__toklist_push(&tl, id, start, end, v, vl, 0, err);
        start = end;
    }
    if (buf != sbuf) free(buf);
    if (!st) tm__wcache_put(c, s, len, 0, &tl, 0);
done:
    if (st) {
        free(tl.v);
        return st;
    }
    *out = tl.v;
    *n_out = tl.n;
    return TM_OK;
}

static int32_t wp_token_to_id(const tm_tok_model *base, const char *s, size_t len) {
    return tm__vocab_find(&((const wordpiece *)base)->vocab, s, len);
}

static const char *wp_id_to_token(const tm_tok_model *base, int32_t id, uint32_t *len) {
    return tm__vocab_str(&((const wordpiece *)base)->vocab, id, len);
}

static size_t wp_vocab_size(const tm_tok_model *base) {
    return ((const wordpiece *)base)->vocab.n;
}

static void wp_free(tm_tok_model *base) {
    wordpiece *m = (wordpiece *)base;
    tm__vocab_free(&m->vocab);
    tm__wcache_release(m->cache_id);
    free(m->unk);
    free(m->prefix);
    free(m);
}

static char *dup_len(const char *s, size_t len) {
    char *d = malloc(len + 1);
    if (d) memcpy(d, s, len), d[len] = '\0';
    return d;
}

tm_status tm__model_wordpiece_load(const tm_json *cfg, const char *path, tm_tok_model **out,
                                   tm_error *err) {
    wordpiece *m = calloc(1, sizeof *m);
    if (!m) return no_memory(err);
    m->base = (tm_tok_model){wp_tokenize, wp_token_to_id, wp_id_to_token, wp_vocab_size, wp_free};
    const char *unk, *prefix;
    tm_status st = tm__tj_string(cfg, "unk_token", "[UNK]", &unk, &m->unk_len, path, err);
    if (!st) st = tm__tj_string(cfg, "continuing_subword_prefix", "##", &prefix, &m->prefix_len, path, err);
    if (!st) st = tm__tj_int(cfg, "max_input_chars_per_word", 100, &m->max_chars, path, err);
    if (!st) st = tm__vocab_from_json(tm_json_get(cfg, "vocab"), path, &m->vocab, err);
    if (!st) {
        m->unk = dup_len(unk, m->unk_len);
        m->prefix = dup_len(prefix, m->prefix_len);
        if (!m->unk || !m->prefix) st = no_memory(err);
    }
    if (st) {
        wp_free(&m->base);
        return st;
    }
    m->cache_id = tm__wcache_owner();
    *out = &m->base;
    return TM_OK;
}

/* ---- WordLevel ------------------------------------------------------------------------ */

static tm_status wl_tokenize(const tm_tok_model *base, const char *s, size_t len,
                             tm_tok_token **out, int *n_out, tm_error *err) {
    const wordpiece *m = (const wordpiece *)base;
    tm_toklist tl = {0};
    tm_status st;
    int32_t id = tm__vocab_find(&m->vocab, s, len);
    if (id >= 0) {
        uint32_t vl;
        const char *v = tm__vocab_str(&m->vocab, id, &vl);
        st = tm__toklist_push(&tl, id, 0, len, v, vl, 0, err);
    } else {
        st = unk_token(&m->vocab, m->unk, m->unk_len, len, &tl, err);
    }
    if (st) {
        free(tl.v);
        return st;
    }
    *out = tl.v;
    *n_out = tl.n;
    return TM_OK;
}

tm_status tm__model_wordlevel_load(const tm_json *cfg, const char *path, tm_tok_model **out,
                                   tm_error *err) {
    wordpiece *m = calloc(1, sizeof *m);
    if (!m) return no_memory(err);
    m->base = (tm_tok_model){wl_tokenize, wp_token_to_id, wp_id_to_token, wp_vocab_size, wp_free};
    const char *unk;
    tm_status st = tm__tj_string(cfg, "unk_token", "<unk>", &unk, &m->unk_len, path, err);
    if (!st) st = tm__vocab_from_json(tm_json_get(cfg, "vocab"), path, &m->vocab, err);
    if (!st && !(m->unk = dup_len(unk, m->unk_len))) st = no_memory(err);
    if (st) {
        wp_free(&m->base);
        return st;
    }
    *out = &m->base;
    return TM_OK;
}
