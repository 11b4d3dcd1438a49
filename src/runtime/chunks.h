/* Big chunks of memory on huge pages, handed out in pieces that live as long as the
 * chunks (the model's caches of packed and folded weights). A decode step streams every
 * packed weight once: with 2 MiB pages it takes a TLB miss per 2 MiB instead of per
 * 4 KiB, and the hardware prefetchers, which stop at page boundaries, run on. Not
 * thread-safe: callers hold their own lock. */
#ifndef TM_RUNTIME_CHUNKS_H
#define TM_RUNTIME_CHUNKS_H

#include <stddef.h>
#include <stdint.h>

/* Pieces at least this large belong in chunks; smaller ones are not worth it. */
#define TM_CHUNKED_MIN_BYTES ((size_t)64 << 10)

typedef struct tm_chunks {
    void **chunks;
    int n, cap;
    uint8_t *next;
    size_t left;
} tm_chunks;

/* bytes (rounded up to 2 MiB) of new memory, 2 MiB-aligned and advised for huge pages
 * before anything touches it, not zeroed; free() frees it. NULL when out of memory. */
void *tm__huge_alloc(size_t bytes);
/* bytes (rounded up to 64) from the current chunk or a new one, not zeroed; NULL when
 * out of memory. */
void *tm__chunks_take(tm_chunks *ch, size_t bytes);
/* Frees every chunk (and so every piece); the struct may be reused. */
void tm__chunks_free(tm_chunks *ch);

#endif
