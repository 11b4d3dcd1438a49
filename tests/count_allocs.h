/* Counting every allocation of the process (malloc and friends interposed over glibc's),
 * for the tests that a plan's run allocates nothing: process_allocs goes up by one per
 * call. COUNTING_ALLOCS is 0 under sanitizers, which interpose those functions
 * themselves; process_allocs then stays 0. Include once, in one test program. */
#ifndef TM_TESTS_COUNT_ALLOCS_H
#define TM_TESTS_COUNT_ALLOCS_H

#include <stddef.h>

#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define COUNTING_ALLOCS 1
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
static volatile long process_allocs;
void *malloc(size_t n) { process_allocs++; return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { process_allocs++; return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { process_allocs++; return __libc_realloc(p, n); }
int posix_memalign(void **p, size_t align, size_t n) {
    process_allocs++;
    *p = __libc_memalign(align, n);
    return *p ? 0 : 12;
}
void *aligned_alloc(size_t align, size_t n) { process_allocs++; return __libc_memalign(align, n); }
#else
#define COUNTING_ALLOCS 0
static long process_allocs;
#endif

#endif
