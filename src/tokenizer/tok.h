/* The framework's own private interface: the vocabulary hash map, models, post-processors,
 * encodings as Rust's Encoding, and the loaded tokenizer. Components use internal.h only. */
#ifndef TM_TOKENIZER_TOK_H
#define TM_TOKENIZER_TOK_H

#include "internal.h"

/* ---- Vocabulary: string <-> id, one arena, open addressing ---------------------------- */

typedef struct tm_vocab {
    char *arena;
    size_t arena_len, arena_cap;
    uint32_t *off, *len;        /* per entry: its string in the arena */
    int32_t *id;                /* per entry */
    uint32_t n, cap;
    uint64_t *slots;            /* (hash >> 32) << 32 | (entry + 1); 0 = empty */
    uint32_t mask;
    uint32_t max_len;           /* the longest string: longer keys are not looked up */
    int bytewise;               /* hashed a byte at a time (tm__hash_step), so a caller can
                                   extend a key's hash byte by byte (a prefix search) */
    int32_t *by_id;             /* id -> entry (-1 none), built by tm__vocab_index */
    uint32_t n_by_id;
} tm_vocab;

/* Adds s -> id; an existing string takes the new id (as a map insert). */
tm_status tm__vocab_add(tm_vocab *v, const char *s, size_t len, int32_t id, tm_error *err);
/* The id of s or -1. */
int32_t tm__vocab_find(const tm_vocab *v, const char *s, size_t len);
/* Builds id -> string (the last entry holding an id wins). */
tm_status tm__vocab_index(tm_vocab *v, tm_error *err);
/* The string of id, or NULL. */
const char *tm__vocab_str(const tm_vocab *v, int32_t id, uint32_t *len);
void tm__vocab_free(tm_vocab *v);
uint64_t tm__hash_bytes(const char *s, size_t len);
/* The byte-at-a-time hash of tm_vocab.bytewise tables: start, one step per byte, finish. */
#define TM_HASH_START 0xcbf29ce484222325ull
static inline uint64_t tm__hash_step(uint64_t st, unsigned char b) {
    return (st ^ b) * 0x100000001b3ull;
}
static inline uint64_t tm__hash_finish(uint64_t st) {
    st ^= st >> 33;
    st *= 0xff51afd7ed558ccdull;
    return st ^ (st >> 33);
}
/* tm__vocab_find with the key's hash given (finished); for bytewise tables. */
int32_t tm__vocab_find_hashed(const tm_vocab *v, const char *s, size_t len, uint64_t h);

/* ---- Models ---------------------------------------------------------------------------- */

typedef struct tm_tok_model tm_tok_model;
struct tm_tok_model {
    /* Tokenizes one split's normalized text into tokens (offsets within s). The token
     * values point into the model (owned = 0) or are malloc'd (owned = 1). */
    tm_status (*tokenize)(const tm_tok_model *m, const char *s, size_t len, tm_tok_token **out,
                          int *n_out, tm_error *err);
    int32_t (*token_to_id)(const tm_tok_model *m, const char *s, size_t len);
    const char *(*id_to_token)(const tm_tok_model *m, int32_t id, uint32_t *len);
    size_t (*vocab_size)(const tm_tok_model *m);
    void (*free)(tm_tok_model *m);
};

tm_status tm__model_load(const tm_json *cfg, const char *path, tm_tok_model **out, tm_error *err);
tm_status tm__model_bpe_load(const tm_json *cfg, const char *path, tm_tok_model **out, tm_error *err);
tm_status tm__model_wordpiece_load(const tm_json *cfg, const char *path, tm_tok_model **out,
                                   tm_error *err);
tm_status tm__model_wordlevel_load(const tm_json *cfg, const char *path, tm_tok_model **out,
                                   tm_error *err);
tm_status tm__model_unigram_load(const tm_json *cfg, const char *path, tm_tok_model **out,
                                 tm_error *err);
/* Parses a vocab object {"token": id, ...} into v. */
tm_status tm__vocab_from_json(const tm_json *obj, const char *path, tm_vocab *v, tm_error *err);

/* Token lists grown by models. */
typedef struct tm_toklist {
    tm_tok_token *v;
    int n, cap;
} tm_toklist;
tm_status tm__toklist_push(tm_toklist *l, int32_t id, size_t start, size_t end, const char *value,
                           size_t value_len, int owned, tm_error *err);

/* ---- Per-thread word caches (wcache.c) ---------------------------------------------------
 * A model takes an owner number at load (tm__wcache_owner) and calls tm__wcache_release
 * when freed. Per word: tm__wcache_get once per call, tm__wcache_find (1: the cached tokens
 * were appended to tl, offsets from base; *st says whether that worked), else tokenize and
 * tm__wcache_put the tokens appended since `from` (kept only when short and none owns its
 * string: a cached token's string is the vocabulary's for its id). */
typedef struct tm_wcache tm_wcache;
uint64_t tm__wcache_owner(void);
tm_wcache *tm__wcache_get(uint64_t owner);
void tm__wcache_release(uint64_t owner);
int tm__wcache_find(tm_wcache *c, const char *s, size_t n, size_t base, const tm_vocab *v,
                    tm_toklist *tl, tm_status *st, tm_error *err);
void tm__wcache_put(tm_wcache *c, const char *s, size_t n, size_t base, const tm_toklist *tl,
                    int from);

/* ---- Encodings (Rust's Encoding) -------------------------------------------------------- */

typedef struct tm_etok {
    int32_t id;
    int32_t type_id;
    int32_t word;               /* -1: none */
    int32_t seq;                /* sequence index, -1: none (special or padding) */
    uint32_t start, end;        /* bytes of the original text of sequence `seq` */
    const char *str;            /* token string (tokenizer- or pool-owned) */
    uint32_t len;
    uint8_t special, attention;
} tm_etok;

typedef struct tm_ienc {
    tm_etok *t;
    size_t n, cap;
    struct tm_ienc *over;       /* overflowing parts */
    size_t n_over;
} tm_ienc;

void tm__ienc_free(tm_ienc *e);
tm_status tm__ienc_push(tm_ienc *e, const tm_etok *t, tm_error *err);
tm_status tm__ienc_clone(const tm_ienc *src, tm_ienc *dst, tm_error *err);
/* Rust's merge_with (offsets never grow here). Consumes pair. */
tm_status tm__ienc_merge_with(tm_ienc *e, tm_ienc *pair, tm_error *err);
/* Rust's Encoding::merge of a list (consumed) into out. */
tm_status tm__ienc_merge(tm_ienc *list, size_t n, tm_ienc *out, tm_error *err);
void tm__ienc_set_type_ids(tm_ienc *e, int32_t type_id);
void tm__ienc_set_seq(tm_ienc *e, int32_t seq);
tm_status tm__ienc_truncate(tm_ienc *e, size_t max_len, size_t stride, int left, tm_error *err);
tm_status tm__ienc_pad(tm_ienc *e, size_t target, int32_t pad_id, const char *pad_tok,
                       uint32_t pad_len, int left, tm_error *err);

/* ---- Post-processors ----------------------------------------------------------------- */

typedef struct tm_processor tm_processor;
struct tm_processor {
    /* Rust's process_encodings: *list (n_list 1 or 2) becomes a new list. */
    tm_status (*process)(const tm_processor *p, tm_ienc **list, size_t *n_list, int add_special,
                         tm_error *err);
    size_t (*added_tokens)(const tm_processor *p, int is_pair);
    void (*free)(tm_processor *p);
};
tm_status tm__processor_load(const tm_json *cfg, const char *path, tm_processor **out,
                             tm_error *err);

#endif
