/* The vocabulary map (token string <-> id): strings in one arena, an open-addressing table
 * of entry indices, and an id-indexed array back. Built once at load, read-only after. */
#include <stdlib.h>
#include <string.h>
#include "tok.h"

static tm_status no_memory(tm_error *err) {
    return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
}

uint64_t tm__hash_bytes(const char *s, size_t len) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ (len * 0xff51afd7ed558ccdull);
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
        h ^= h >> 29;
    }
    uint64_t w = 0;
    memcpy(&w, s + i, len - i);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 32;
    h *= 0xff51afd7ed558ccdull;
    return h ^ (h >> 29);
}

static uint64_t hash_of(const tm_vocab *v, const char *s, size_t len) {
    if (!v->bytewise) return tm__hash_bytes(s, len);
    uint64_t st = TM_HASH_START;
    for (size_t i = 0; i < len; i++) st = tm__hash_step(st, (unsigned char)s[i]);
    return tm__hash_finish(st);
}

/* A slot holds the entry and the hash's high half, so a probe compares strings only when
 * 32 more bits of the hash agree (one cache line per probe, almost never a memcmp miss). */
static uint64_t slot_of(uint64_t h, uint32_t e) { return (h >> 32) << 32 | (uint64_t)(e + 1); }

static int32_t find_entry(const tm_vocab *v, const char *s, size_t len, uint64_t h) {
    if (!v->slots) return -1;
    uint64_t tag = (h >> 32) << 32;
    for (uint32_t i = (uint32_t)h & v->mask;; i = (i + 1) & v->mask) {
        uint64_t x = v->slots[i];
        if (!x) return -1;
        if ((x & 0xffffffff00000000ull) != tag) continue;
        uint32_t e = (uint32_t)x - 1;
        if (v->len[e] == len && !memcmp(v->arena + v->off[e], s, len)) return (int32_t)e;
    }
}

static int grow_table(tm_vocab *v) {
    uint32_t size = v->slots ? (v->mask + 1) * 2 : 1024;
    uint64_t *slots = calloc(size, sizeof *slots);
    if (!slots) return 0;
    uint32_t mask = size - 1;
    for (uint32_t e = 0; e < v->n; e++) {
        uint64_t h = hash_of(v, v->arena + v->off[e], v->len[e]);
        uint32_t i = (uint32_t)h & mask;
        while (slots[i]) i = (i + 1) & mask;
        slots[i] = slot_of(h, e);
    }
    free(v->slots);
    v->slots = slots;
    v->mask = mask;
    return 1;
}

tm_status tm__vocab_add(tm_vocab *v, const char *s, size_t len, int32_t id, tm_error *err) {
    uint64_t h = hash_of(v, s, len);
    int32_t e = find_entry(v, s, len, h);
    if (e >= 0) {
        v->id[e] = id;
        return TM_OK;
    }
    if (v->n == v->cap) {
        uint32_t cap = v->cap ? v->cap * 2 : 256;
        uint32_t *off = realloc(v->off, cap * sizeof *off);
        if (!off) return no_memory(err);
        v->off = off;
        uint32_t *ln = realloc(v->len, cap * sizeof *ln);
        if (!ln) return no_memory(err);
        v->len = ln;
        int32_t *ids = realloc(v->id, cap * sizeof *ids);
        if (!ids) return no_memory(err);
        v->id = ids;
        v->cap = cap;
    }
    if (v->arena_len + len + 1 > v->arena_cap) {
        size_t cap = v->arena_cap ? v->arena_cap * 2 : 4096;
        while (cap < v->arena_len + len + 1) cap *= 2;
        char *a = realloc(v->arena, cap);
        if (!a) return no_memory(err);
        v->arena = a;
        v->arena_cap = cap;
    }
    if (!v->slots || (v->n + 1) * 2 > v->mask + 1) {
        if (!grow_table(v)) return no_memory(err);
    }
    memcpy(v->arena + v->arena_len, s, len);
    v->arena[v->arena_len + len] = '\0';
    v->off[v->n] = (uint32_t)v->arena_len;
    v->len[v->n] = (uint32_t)len;
    v->id[v->n] = id;
    v->arena_len += len + 1;
    uint32_t i = (uint32_t)h & v->mask;
    while (v->slots[i]) i = (i + 1) & v->mask;
    v->slots[i] = slot_of(h, v->n);
    if (len > v->max_len) v->max_len = (uint32_t)len;
    v->n++;
    return TM_OK;
}

int32_t tm__vocab_find(const tm_vocab *v, const char *s, size_t len) {
    if (len > v->max_len) return -1;
    int32_t e = find_entry(v, s, len, hash_of(v, s, len));
    return e < 0 ? -1 : v->id[e];
}

int32_t tm__vocab_find_hashed(const tm_vocab *v, const char *s, size_t len, uint64_t h) {
    if (len > v->max_len) return -1;
    int32_t e = find_entry(v, s, len, h);
    return e < 0 ? -1 : v->id[e];
}

tm_status tm__vocab_index(tm_vocab *v, tm_error *err) {
    uint32_t max = 0;
    for (uint32_t e = 0; e < v->n; e++)
        if (v->id[e] >= 0 && (uint32_t)v->id[e] + 1 > max) max = (uint32_t)v->id[e] + 1;
    free(v->by_id);
    v->by_id = malloc((max ? max : 1) * sizeof *v->by_id);
    if (!v->by_id) return no_memory(err);
    for (uint32_t i = 0; i < max; i++) v->by_id[i] = -1;
    for (uint32_t e = 0; e < v->n; e++)
        if (v->id[e] >= 0) v->by_id[v->id[e]] = (int32_t)e;
    v->n_by_id = max;
    return TM_OK;
}

const char *tm__vocab_str(const tm_vocab *v, int32_t id, uint32_t *len) {
    if (id < 0 || (uint32_t)id >= v->n_by_id || v->by_id[id] < 0) return NULL;
    uint32_t e = (uint32_t)v->by_id[id];
    if (len) *len = v->len[e];
    return v->arena + v->off[e];
}

void tm__vocab_free(tm_vocab *v) {
    free(v->arena);
    free(v->off);
    free(v->len);
    free(v->id);
    free(v->slots);
    free(v->by_id);
    memset(v, 0, sizeof *v);
}

tm_status tm__vocab_from_json(const tm_json *obj, const char *path, tm_vocab *v, tm_error *err) {
    if (!obj || obj->type != TM_JSON_OBJECT)
        return tm__tok_fail(err, path, "vocab", "expected an object {\"token\": id, ...}");
    for (int i = 0; i < obj->n; i++) {
        const tm_json *x = &obj->items[i];
        if (x->type != TM_JSON_NUMBER || x->number < 0 || x->number > 2147483647.0 ||
            x->number != (double)(int32_t)x->number)
            return tm__tok_fail(err, path, "vocab", "the id of \"%s\" is not a valid id",
                                obj->keys[i]);
        tm_status s = tm__vocab_add(v, obj->keys[i], strlen(obj->keys[i]), (int32_t)x->number, err);
        if (s) return s;
    }
    return tm__vocab_index(v, err);
}

tm_status tm__toklist_push(tm_toklist *l, int32_t id, size_t start, size_t end, const char *value,
                           size_t value_len, int owned, tm_error *err) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 16;
        tm_tok_token *v = realloc(l->v, (size_t)cap * sizeof *v);
        if (!v) {
            if (owned) free((char *)value);
            return no_memory(err);
        }
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = (tm_tok_token){id, (uint32_t)start, (uint32_t)end, (uint32_t)value_len, value, owned};
    return TM_OK;
}
