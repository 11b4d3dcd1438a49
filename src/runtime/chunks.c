/* tm_chunks (chunks.h): 32 MiB chunks, 2 MiB-aligned and advised for huge pages before
 * anything touches them (a first touch would fault small pages in). */
#include <stdint.h>
#include <stdlib.h>
#include "chunks.h"
#include "../backends/cpu/gemm.h"

#define CHUNK_BYTES ((size_t)32 << 20)
#define HUGE_PAGE ((size_t)2 << 20)

void *tm__huge_alloc(size_t bytes) {
    if (bytes > SIZE_MAX - HUGE_PAGE) return NULL;
    size_t size = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    void *p = aligned_alloc(HUGE_PAGE, size ? size : HUGE_PAGE);
    if (p) tm_sgemm_advise_packed(p, size ? size : HUGE_PAGE);
    return p;
}

void *tm__chunks_take(tm_chunks *ch, size_t bytes) {
    bytes = (bytes + 63) / 64 * 64;
    if (ch->n == 0 || ch->left < bytes) {
        size_t size = bytes > CHUNK_BYTES ? (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE
                                          : CHUNK_BYTES;
        if (ch->n == ch->cap) {
            int cap = ch->cap ? 2 * ch->cap : 8;
            void **grown = realloc(ch->chunks, (size_t)cap * sizeof *grown);
            if (!grown) return NULL;
            ch->chunks = grown;
            ch->cap = cap;
        }
        void *p = tm__huge_alloc(size);
        if (!p) return NULL;
        ch->chunks[ch->n++] = p;
        ch->next = p;
        ch->left = size;
    }
    void *p = ch->next;
    ch->next += bytes;
    ch->left -= bytes;
    return p;
}

void tm__chunks_free(tm_chunks *ch) {
    for (int i = 0; i < ch->n; i++) free(ch->chunks[i]);
    free(ch->chunks);
    ch->chunks = NULL;
    ch->n = ch->cap = 0;
    ch->next = NULL;
    ch->left = 0;
}
