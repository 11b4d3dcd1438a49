/* Error reporting into a caller-owned tm_error; no global state. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "status.h"

static void copy_field(char *dst, size_t cap, const char *src) {
    if (!src) src = "";
    snprintf(dst, cap, "%s", src);
}

static tm_status vfail(tm_error *err, tm_status code, const char *node, const char *op,
                       const char *value, const char *fmt, va_list ap) {
    if (!err) return code;
    err->code = code;
    copy_field(err->node, sizeof err->node, node);
    copy_field(err->op, sizeof err->op, op);
    copy_field(err->value, sizeof err->value, value);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    return code;
}

tm_status tm__fail(tm_error *err, tm_status code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tm_status s = vfail(err, code, NULL, NULL, NULL, fmt, ap);
    va_end(ap);
    return s;
}

tm_status tm__fail_at(tm_error *err, tm_status code, const char *node, const char *op,
                      const char *value, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    tm_status s = vfail(err, code, node, op, value, fmt, ap);
    va_end(ap);
    return s;
}

void tm__error_clear(tm_error *err) {
    if (err) memset(err, 0, sizeof *err);
}

void tm__error_copy(tm_error *dst, const tm_error *src) {
    if (dst && src && dst != src) *dst = *src;
}

const char *tm_status_name(tm_status s) {
    switch (s) {
    case TM_OK: return "ok";
    case TM_ERR_INVALID_ARGUMENT: return "invalid argument";
    case TM_ERR_IO: return "i/o error";
    case TM_ERR_PARSE: return "parse error";
    case TM_ERR_UNSUPPORTED: return "unsupported";
    case TM_ERR_SHAPE: return "shape error";
    case TM_ERR_DTYPE: return "dtype error";
    case TM_ERR_NO_MEMORY: return "out of memory";
    case TM_ERR_RUNTIME: return "runtime error";
    case TM_ERR_NOT_FOUND: return "not found";
    case TM_ERR_NETWORK: return "network error";
    }
    return "unknown error";
}
