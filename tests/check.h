/* The harness shared by tests/test_*.c (header-only, included once per test program): the
 * pass/fail counters with CHECK and check, read_all (a file's bytes), tensors made from
 * doubles and read back as doubles (when src/core/tensor.h is included first), and an
 * xorshift64 stream (when CHECK_RNG_SEED is). */
#ifndef TM_TESTS_CHECK_H
#define TM_TESTS_CHECK_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static int passed, failed;

/* A whole file into *data (malloc'd, one spare byte) and *size; 0 when it cannot be read. */
static inline int read_all(const char *path, uint8_t **data, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *data = malloc((size_t)n + 1);
    *size = fread(*data, 1, (size_t)n, f);
    fclose(f);
    return *size == (size_t)n;
}

/* Counts cond; on failure prints "FAIL file:line: " and the printf-style message. */
#define CHECK(cond, ...)                                       \
    do {                                                       \
        if (cond) {                                            \
            passed++;                                          \
        } else {                                               \
            failed++;                                          \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);        \
            printf(__VA_ARGS__);                               \
            printf("\n");                                      \
        }                                                      \
    } while (0)

/* Counts ok; on failure prints "FAIL: " and the printf-style message. */
static inline void check(int ok, const char *fmt, ...) {
    if (ok) {
        passed++;
        return;
    }
    failed++;
    va_list ap;
    va_start(ap, fmt);
    printf("FAIL: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

static inline int64_t numel(int rank, const int64_t *dims) {
    int64_t n = 1;
    for (int i = 0; i < rank; i++) n *= dims[i];
    return n;
}

#ifdef TM_CORE_TENSOR_H
/* A tensor of dtype dt holding v through the dtype's conversion (negatives wrap for unsigned). */
static inline tm_tensor *tensor_of(tm_dtype dt, int rank, const int64_t *dims, const double *v) {
    tm_tensor *t = tm_tensor_alloc(dt, rank, dims, NULL);
    int64_t n = tm_numel(rank, dims);
    for (int64_t i = 0; i < n; i++) {
        if (tm_dtype_is_float(dt)) tm_store_f64(t->data, dt, (size_t)i, v[i]);
        else if (tm_dtype_is_signed_int(dt)) tm_store_i64(t->data, dt, (size_t)i, (int64_t)v[i]);
        else tm_store_u64(t->data, dt, (size_t)i, (uint64_t)(int64_t)v[i]);
    }
    return t;
}

/* Element i of t as a double. */
static inline double element(const tm_tensor *t, int64_t i) {
    if (tm_dtype_is_float(t->dtype)) return tm_load_f64(t->data, t->dtype, (size_t)i);
    if (tm_dtype_is_signed_int(t->dtype)) return (double)tm_load_i64(t->data, t->dtype, (size_t)i);
    return (double)tm_load_u64(t->data, t->dtype, (size_t)i);
}
#endif

#ifdef CHECK_RNG_SEED
static uint64_t rng_state = CHECK_RNG_SEED;

/* The next state of the xorshift64 stream. */
static inline uint64_t rng_next(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Uniform in [lo, hi). */
static inline double uniform(double lo, double hi) {
    return lo + (hi - lo) * (double)(rng_next() >> 11) / 9007199254740992.0;
}

/* Uniform in [-1, 1). */
static inline double random_unit(void) {
    return (double)(rng_next() >> 11) / (double)(1ULL << 52) - 1.0;
}
#endif

#endif
