/* Weights packed at plan time, kept per model and shared by all of its plans: a decoder
 * gets a new plan for every past length and prompt length, and each would otherwise pack
 * (and hold) every weight again. Keyed by the weight's source bytes (an initializer of
 * the model) and the layout; entries live until the model is freed. Not a general cache:
 * only packings that are a function of those bytes and the layout alone belong here. */
#ifndef TM_RUNTIME_PACK_CACHE_H
#define TM_RUNTIME_PACK_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include "../core/tensor.h"

typedef struct tm_pack_cache tm_pack_cache;

typedef struct tm_pack_key {
    const void *origin;      /* the source bytes (tm_vinfo.origin) */
    size_t bytes;            /* their size */
    int64_t dims[4];         /* the packing's own parameters (e.g. n, k, panel, depth) */
    int kind;                /* which packing */
} tm_pack_key;

tm_pack_cache *tm__pack_cache_create(void);
void tm__pack_cache_free(tm_pack_cache *pc);   /* frees every entry; NULL is a no-op */

/* The packed tensor for key, or NULL. Thread-safe. */
const tm_tensor *tm__pack_cache_find(tm_pack_cache *pc, const tm_pack_key *key);
/* Hands t to the cache under key and returns the cached tensor: t itself, or (when
 * another plan stored one first) that one, t then freed. NULL (t freed) when out of
 * memory. Thread-safe. */
const tm_tensor *tm__pack_cache_put(tm_pack_cache *pc, const tm_pack_key *key, tm_tensor *t);

/* bytes (64-aligned, not zeroed) for a tensor that will go to tm__pack_cache_put: large
 * ones from the cache's huge-page chunks (chunks.h), which hold them until the cache is
 * freed; NULL when smaller than TM_CHUNKED_MIN_BYTES (use an ordinary allocation) or out
 * of memory. Thread-safe. */
void *tm__pack_cache_alloc(tm_pack_cache *pc, size_t bytes);

/* Entries held (for tests). */
size_t tm__pack_cache_count(tm_pack_cache *pc);

#endif
