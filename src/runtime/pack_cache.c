/* The per-model cache of packed weights (pack_cache.h): a list under a mutex, scanned
 * linearly (a model has hundreds of weights, and a plan looks each up once). Not an
 * eviction policy: entries go with the model. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "chunks.h"
#include "pack_cache.h"

typedef struct entry {
    tm_pack_key key;
    tm_tensor *t;
} entry;

struct tm_pack_cache {
    pthread_mutex_t lock;
    entry *entries;
    size_t n, cap;
    tm_chunks chunks;   /* the larger entries' memory (tm__pack_cache_alloc) */
};

tm_pack_cache *tm__pack_cache_create(void) {
    tm_pack_cache *pc = calloc(1, sizeof *pc);
    if (pc) pthread_mutex_init(&pc->lock, NULL);
    return pc;
}

void tm__pack_cache_free(tm_pack_cache *pc) {
    if (!pc) return;
    for (size_t i = 0; i < pc->n; i++) tm_tensor_free(pc->entries[i].t);
    free(pc->entries);
    tm__chunks_free(&pc->chunks);
    pthread_mutex_destroy(&pc->lock);
    free(pc);
}

static int same_key(const tm_pack_key *a, const tm_pack_key *b) {
    return a->origin == b->origin && a->bytes == b->bytes && a->kind == b->kind &&
           !memcmp(a->dims, b->dims, sizeof a->dims);
}

static const tm_tensor *lookup(tm_pack_cache *pc, const tm_pack_key *key) {
    for (size_t i = 0; i < pc->n; i++)
        if (same_key(&pc->entries[i].key, key)) return pc->entries[i].t;
    return NULL;
}

const tm_tensor *tm__pack_cache_find(tm_pack_cache *pc, const tm_pack_key *key) {
    if (!pc || !key->origin) return NULL;
    pthread_mutex_lock(&pc->lock);
    const tm_tensor *t = lookup(pc, key);
    pthread_mutex_unlock(&pc->lock);
    return t;
}

const tm_tensor *tm__pack_cache_put(tm_pack_cache *pc, const tm_pack_key *key, tm_tensor *t) {
    if (!pc || !key->origin || !t) {
        tm_tensor_free(t);
        return NULL;
    }
    pthread_mutex_lock(&pc->lock);
    const tm_tensor *found = lookup(pc, key);
    if (found) {
        pthread_mutex_unlock(&pc->lock);
        tm_tensor_free(t);
        return found;
    }
    if (pc->n == pc->cap) {
        size_t cap = pc->cap ? pc->cap * 2 : 64;
        entry *grown = realloc(pc->entries, cap * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&pc->lock);
            tm_tensor_free(t);
            return NULL;
        }
        pc->entries = grown;
        pc->cap = cap;
    }
    pc->entries[pc->n++] = (entry){*key, t};
    pthread_mutex_unlock(&pc->lock);
    return t;
}

void *tm__pack_cache_alloc(tm_pack_cache *pc, size_t bytes) {
    if (!pc || bytes < TM_CHUNKED_MIN_BYTES) return NULL;
    pthread_mutex_lock(&pc->lock);
    void *p = tm__chunks_take(&pc->chunks, bytes);
    pthread_mutex_unlock(&pc->lock);
    return p;
}

size_t tm__pack_cache_count(tm_pack_cache *pc) {
    if (!pc) return 0;
    pthread_mutex_lock(&pc->lock);
    size_t n = pc->n;
    pthread_mutex_unlock(&pc->lock);
    return n;
}
