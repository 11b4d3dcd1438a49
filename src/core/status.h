/* Internal error helpers: fill a caller's tm_error (which may be NULL) and return the code. */
#ifndef TM_CORE_STATUS_H
#define TM_CORE_STATUS_H

#include "../../include/transmuter.h"

#if defined(__GNUC__)
#define TM_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define TM_PRINTF(a, b)
#endif

/* Sets err (if non-NULL) and returns code. node/op/value may be NULL. */
tm_status tm__fail(tm_error *err, tm_status code, const char *fmt, ...) TM_PRINTF(3, 4);
tm_status tm__fail_at(tm_error *err, tm_status code, const char *node, const char *op,
                      const char *value, const char *fmt, ...) TM_PRINTF(6, 7);
void tm__error_clear(tm_error *err);
/* Copies src into dst (both may be NULL). */
void tm__error_copy(tm_error *dst, const tm_error *src);

/* Size arithmetic that reports overflow: returns 0 on overflow. */
static inline int tm__mul_ok(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}

#endif
