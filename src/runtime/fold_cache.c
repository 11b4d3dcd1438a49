/* The model's cache of shared folds (tm_fold_cache, core/ctx.h): the packed forms of its
 * weights (TM_PF_SHARED_FOLD primitives) are made once per model and read by every plan
 * and eager run, instead of once per plan (a decoder makes a plan per past length).
 * Entries are keyed by the primitive, its arguments and each input: one inside the
 * model's mapped files by its address (the mapping is read-only and lives as long as the
 * model), anything else by its dims and a hash of its bytes. Input 0, the weight, must be
 * mapped: values computed at run time never fill the cache. Not the plan cache. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "runtime.h"
#include "chunks.h"

/* Inputs not in a mapped file are hashed when no larger than this; bigger ones make the
 * fold uncacheable (hashing would cost as much as folding). */
#define HASHED_MAX_BYTES ((size_t)64 << 20)
/* After a fold, the pages of mapped inputs at least this large are given back: only the
 * packed copy is read from then on, and the file stays mapped should anything need them. */
#define RELEASE_MIN_BYTES ((size_t)64 << 10)

typedef struct entry {
    uint8_t *key;
    size_t key_len;
    tm_tensor *t;
} entry;

typedef struct aligned_copy {
    const void *from;
    size_t n;
    void *copy;
} aligned_copy;

typedef struct model_fold_cache {
    tm_fold_cache base;   /* first: the core sees only this */
    pthread_mutex_t lock;
    const tm_onnx_model *onnx;
    const tm_allocator *allocator;   /* the model's, for the folded tensors */
    entry *entries;
    int n, cap;
    tm_chunks chunks;     /* huge-page chunks holding the larger folds (chunks.h) */
    aligned_copy *copies; /* aligned copies of misaligned mapped bytes (the `aligned` hook) */
    int n_copies, cap_copies;
} model_fold_cache;

/* The mapped file holding [p, p + n), or NULL. */
static const tm_mapping *mapping_of(const model_fold_cache *fc, const void *p, size_t n) {
    const char *c = p;
    for (int i = 0; i < fc->onnx->n_maps; i++) {
        const char *base = fc->onnx->maps[i].base;
        if (base && c >= base && n <= fc->onnx->maps[i].size &&
            (size_t)(c - base) <= fc->onnx->maps[i].size - n)
            return &fc->onnx->maps[i];
    }
    return NULL;
}

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
    }
    for (; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

typedef struct key_buf {
    uint8_t *p;
    size_t len, cap;
    int failed;
} key_buf;

static void put(key_buf *k, const void *v, size_t n) {
    if (k->failed) return;
    if (k->len + n > k->cap) {
        size_t cap = k->cap ? k->cap * 2 : 1024;
        while (cap < k->len + n) cap *= 2;
        uint8_t *p = realloc(k->p, cap);
        if (!p) {
            k->failed = 1;
            return;
        }
        k->p = p;
        k->cap = cap;
    }
    memcpy(k->p + k->len, v, n);
    k->len += n;
}

/* 0 when input 0 is not in a mapped file, or another input is keyed neither way. */
static int make_key(const model_fold_cache *fc, int prim, const tm_args *a,
                    const tm_tensor *const *in, int nin, key_buf *k) {
    put(k, &prim, sizeof prim);
    put(k, a, sizeof *a);
    put(k, &nin, sizeof nin);
    for (int i = 0; i < nin; i++) {
        const tm_tensor *t = in[i];
        size_t bytes = (size_t)tm_numel(t->rank, t->dims) * tm_dtype_elem_size(t->dtype);
        int32_t head[2] = {(int32_t)t->dtype, t->rank};
        put(k, head, sizeof head);
        put(k, t->dims, (size_t)t->rank * sizeof t->dims[0]);
        put(k, &bytes, sizeof bytes);
        char how;
        int mapped = mapping_of(fc, t->data, bytes) != NULL;
        if (i == 0 && !mapped) return 0;
        if (mapped) {
            how = 'M';
            uintptr_t at = (uintptr_t)t->data;
            put(k, &how, 1);
            put(k, &at, sizeof at);
        } else if (bytes <= HASHED_MAX_BYTES && t->dtype != TM_STRING) {
            how = 'H';
            uint64_t h = hash_bytes(t->data, bytes);
            put(k, &how, 1);
            put(k, &h, sizeof h);
        } else {
            return 0;
        }
    }
    return !k->failed;
}

/* The whole pages inside [p, p + n) of a mapped file go back to the kernel: a later read
 * faults them in again from the file, unchanged (the mapping is private and read-only). */
static void release_pages(const void *p, size_t n) {
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) return;
    uintptr_t begin = ((uintptr_t)p + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
    uintptr_t end = ((uintptr_t)p + n) & ~((uintptr_t)page - 1);
    if (end > begin) madvise((void *)begin, end - begin, MADV_DONTNEED);
}

/* The output of a fold, zero-filled: the larger ones in the cache's huge-page chunks. */
static tm_tensor *folded_tensor(model_fold_cache *fc, const tm_vinfo *out) {
    size_t elem = tm_dtype_elem_size(out->dtype);
    size_t bytes = (size_t)tm_numel(out->rank, out->dims) * elem;
    if (fc->allocator || out->dtype == TM_STRING || elem == 0 || bytes < TM_CHUNKED_MIN_BYTES)
        return tm_tensor_alloc(out->dtype, out->rank, out->dims, fc->allocator);
    void *data = tm__chunks_take(&fc->chunks, bytes);
    if (!data) return NULL;
    memset(data, 0, bytes);
    return tm_tensor_borrow(out->dtype, out->rank, out->dims, data);   /* the chunk owns it */
}

static const tm_tensor *fold(tm_fold_cache *base, tm_ctx *c, int prim, const tm_args *a,
                             const tm_tensor *const *in, int nin, const tm_vinfo *out,
                             size_t scratch) {
    model_fold_cache *fc = (model_fold_cache *)base;
    key_buf k = {0};
    if (!make_key(fc, prim, a, in, nin, &k)) {
        free(k.p);
        return NULL;
    }
    pthread_mutex_lock(&fc->lock);
    for (int i = 0; i < fc->n; i++)
        if (fc->entries[i].key_len == k.len && !memcmp(fc->entries[i].key, k.p, k.len)) {
            tm_tensor *t = fc->entries[i].t;
            pthread_mutex_unlock(&fc->lock);
            free(k.p);
            return t;
        }
    /* A miss: fold under the lock, so that plans made at once wait for one copy. */
    tm_tensor *t = NULL;
    if (fc->n == fc->cap) {
        int cap = fc->cap ? fc->cap * 2 : 64;
        entry *e = realloc(fc->entries, (size_t)cap * sizeof *e);
        if (e) {
            fc->entries = e;
            fc->cap = cap;
        }
    }
    if (fc->n < fc->cap) t = folded_tensor(fc, out);
    if (!t) {
        pthread_mutex_unlock(&fc->lock);
        free(k.p);
        tm_ctx_fail(c, TM_ERR_NO_MEMORY, "%s: out of memory folding a weight",
                    tm_prims[prim].name);
        return NULL;
    }
    /* The kernel reads elements: misaligned inputs (bytes inside the protobuf) are read
     * through copies made for this fold only (the cache keeps the result, not them). */
    const tm_tensor **kin = calloc((size_t)nin + 1, sizeof *kin);
    tm_tensor **bounce = calloc((size_t)nin + 1, sizeof *bounce);
    tm_status ks = kin && bounce ? TM_OK : TM_ERR_NO_MEMORY;
    for (int i = 0; i < nin && ks == TM_OK; i++) {
        size_t es = tm_dtype_elem_size(in[i]->dtype);
        kin[i] = in[i];
        if (es > 1 && in[i]->data && (uintptr_t)in[i]->data % es) {
            if ((bounce[i] = tm_tensor_clone(in[i], NULL)) != NULL) kin[i] = bounce[i];
            else ks = TM_ERR_NO_MEMORY;
        }
    }
    tm_tensor *outs[1] = {t};
    if (ks != TM_OK)
        tm_ctx_fail(c, TM_ERR_NO_MEMORY, "%s: out of memory aligning a weight",
                    tm_prims[prim].name);
    else
        ks = tm_run_kernel(c, prim, a, kin, nin, outs, 1, scratch);
    for (int i = 0; bounce && i < nin; i++) tm_tensor_free(bounce[i]);
    free(bounce);
    free(kin);
    if (ks != TM_OK) {
        pthread_mutex_unlock(&fc->lock);
        tm_tensor_free(t);
        free(k.p);
        return NULL;
    }
    fc->entries[fc->n].key = k.p;
    fc->entries[fc->n].key_len = k.len;
    fc->entries[fc->n].t = t;
    fc->n++;
    for (int i = 0; i < nin; i++) {
        size_t bytes = (size_t)tm_numel(in[i]->rank, in[i]->dims) * tm_dtype_elem_size(in[i]->dtype);
        const tm_mapping *m = bytes >= RELEASE_MIN_BYTES ? mapping_of(fc, in[i]->data, bytes) : NULL;
        if (m && m->path) release_pages(in[i]->data, bytes);
    }
    pthread_mutex_unlock(&fc->lock);
    return t;
}

static void release(tm_fold_cache *base, const void *p, size_t n) {
    model_fold_cache *fc = (model_fold_cache *)base;
    const tm_mapping *m = n >= RELEASE_MIN_BYTES ? mapping_of(fc, p, n) : NULL;
    if (m && m->path) release_pages(p, n);
}

/* The `aligned` hook (core/ctx.h): one copy per misaligned range of a mapped file, made at
 * its first use and kept with the model; the file's pages of it go back at once. */
static const void *aligned(tm_fold_cache *base, const void *p, size_t n) {
    model_fold_cache *fc = (model_fold_cache *)base;
    const tm_mapping *m = mapping_of(fc, p, n);
    if (!m) return NULL;
    pthread_mutex_lock(&fc->lock);
    for (int i = 0; i < fc->n_copies; i++)
        if (fc->copies[i].from == p && fc->copies[i].n == n) {
            void *copy = fc->copies[i].copy;
            pthread_mutex_unlock(&fc->lock);
            return copy;
        }
    void *copy = NULL;
    if (fc->n_copies == fc->cap_copies) {
        int cap = fc->cap_copies ? fc->cap_copies * 2 : 32;
        aligned_copy *grown = realloc(fc->copies, (size_t)cap * sizeof *grown);
        if (grown) {
            fc->copies = grown;
            fc->cap_copies = cap;
        }
    }
    if (fc->n_copies < fc->cap_copies && (copy = tm__alloc(fc->allocator, n)) != NULL) {
        memcpy(copy, p, n);
        fc->copies[fc->n_copies++] = (aligned_copy){p, n, copy};
        if (n >= RELEASE_MIN_BYTES && m->path) release_pages(p, n);
    }
    pthread_mutex_unlock(&fc->lock);
    return copy;
}

tm_fold_cache *tm__fold_cache_create(const tm_onnx_model *onnx, const tm_allocator *allocator) {
    model_fold_cache *fc = calloc(1, sizeof *fc);
    if (!fc) return NULL;
    fc->base.fold = fold;
    fc->base.release = release;
    fc->base.aligned = aligned;
    fc->onnx = onnx;
    fc->allocator = allocator;
    pthread_mutex_init(&fc->lock, NULL);
    return &fc->base;
}

void tm__fold_cache_free(tm_fold_cache *base) {
    if (!base) return;
    model_fold_cache *fc = (model_fold_cache *)base;
    for (int i = 0; i < fc->n; i++) {
        free(fc->entries[i].key);
        tm_tensor_free(fc->entries[i].t);
    }
    free(fc->entries);
    for (int i = 0; i < fc->n_copies; i++) tm__free(fc->allocator, fc->copies[i].copy);
    free(fc->copies);
    tm__chunks_free(&fc->chunks);
    pthread_mutex_destroy(&fc->lock);
    free(fc);
}
