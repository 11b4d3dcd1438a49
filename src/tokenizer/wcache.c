/* Per-thread caches of tokenized words for the models (BPE, Unigram, WordPiece): a word's
 * bytes -> its tokens (ids and offsets), as Rust's BPE cache, but one direct-mapped table
 * per thread tagged with the owning model, so the shared tokenizer stays read-only and no
 * lock is taken. A thread's table goes with the thread (a pthread key's destructor), or
 * with its model when the model is freed on that thread. Not the models themselves. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "tok.h"

/* 4,096 entries of words up to 46 bytes and 16 tokens: about 750 KB per thread that
 * tokenizes (30-byte keys and 10 tokens measured slower on the bench corpus). */
enum { SLOTS = 4096, KEY = 46, TOKS = 16 };

typedef struct entry {
    uint64_t hash;              /* 0: empty */
    uint8_t key_len, n;
    char key[KEY];
    int32_t id[TOKS];
    uint16_t start[TOKS], end[TOKS];   /* offsets in the word */
} entry;

struct tm_wcache {
    uint64_t owner;             /* whose entries these are (tm__wcache_owner) */
    entry *pending;             /* the slot of the last miss, for tm__wcache_put */
    uint64_t pending_hash;
    entry e[SLOTS];
};

static pthread_key_t key;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int key_ok;
static atomic_uint_fast64_t owners = 1;

static void key_init(void) { key_ok = pthread_key_create(&key, free) == 0; }

uint64_t tm__wcache_owner(void) { return atomic_fetch_add(&owners, 1); }

tm_wcache *tm__wcache_get(uint64_t owner) {
    pthread_once(&once, key_init);
    if (!key_ok) return NULL;
    tm_wcache *c = pthread_getspecific(key);
    if (!c) {
        c = malloc(sizeof *c);
        if (!c) return NULL;
        c->owner = 0;
        if (pthread_setspecific(key, c)) {
            free(c);
            return NULL;
        }
    }
    if (c->owner != owner) {
        memset(c->e, 0, sizeof c->e);
        c->owner = owner;
    }
    c->pending = NULL;
    return c;
}

void tm__wcache_release(uint64_t owner) {
    pthread_once(&once, key_init);
    if (!key_ok) return;
    tm_wcache *c = pthread_getspecific(key);
    if (c && c->owner == owner) {
        free(c);
        pthread_setspecific(key, NULL);
    }
}

int tm__wcache_find(tm_wcache *c, const char *s, size_t n, size_t base, const tm_vocab *v,
                    tm_toklist *tl, tm_status *st, tm_error *err) {
    *st = TM_OK;
    if (!c) return 0;
    c->pending = NULL;
    if (n > KEY) return 0;
    uint64_t h = tm__hash_bytes(s, n) | 1;
    entry *e = &c->e[h & (SLOTS - 1)];
    if (e->hash != h || e->key_len != n || memcmp(e->key, s, n)) {
        c->pending = e;
        c->pending_hash = h;
        return 0;
    }
    for (int k = 0; k < e->n && !*st; k++) {
        uint32_t vl = 0;
        const char *str = tm__vocab_str(v, e->id[k], &vl);
        *st = tm__toklist_push(tl, e->id[k], base + e->start[k], base + e->end[k], str ? str : "",
                               vl, 0, err);
    }
    return 1;
}

void tm__wcache_put(tm_wcache *c, const char *s, size_t n, size_t base, const tm_toklist *tl,
                    int from) {
    if (!c || !c->pending || n > KEY || tl->n - from > TOKS) return;
    for (int k = from; k < tl->n; k++)
        if (tl->v[k].owned || tl->v[k].start < base || tl->v[k].end - base > 0xffff) return;
    entry *e = c->pending;
    c->pending = NULL;
    e->hash = c->pending_hash;
    e->key_len = (uint8_t)n;
    e->n = (uint8_t)(tl->n - from);
    memcpy(e->key, s, n);
    for (int k = 0; k < e->n; k++) {
        e->id[k] = tl->v[from + k].id;
        e->start[k] = (uint16_t)(tl->v[from + k].start - base);
        e->end[k] = (uint16_t)(tl->v[from + k].end - base);
    }
}
