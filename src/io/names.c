/* Percent-encoding of value names into file names and back (see names.h).
 * Not a general URL codec: the set of bytes kept is fixed and '+' means '+'. */
#include <stdlib.h>
#include <string.h>
#include "names.h"

static int is_kept(unsigned char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '_' || c == '-';
}

static int hex_value(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

char *tm_name_encode(const char *name) {
    static const char digits[] = "0123456789ABCDEF";
    if (!name)
        return NULL;
    size_t len = strlen(name);
    if (len > (((size_t)-1) - 1) / 3)
        return NULL;
    char *out = malloc(len * 3 + 1);
    if (!out)
        return NULL;
    char *q = out;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        if (is_kept(*p)) {
            *q++ = (char)*p;
        } else {
            *q++ = '%';
            *q++ = digits[*p >> 4];
            *q++ = digits[*p & 0xF];
        }
    }
    *q = 0;
    return out;
}

char *tm_name_decode(const char *s) {
    if (!s)
        return NULL;
    char *out = malloc(strlen(s) + 1);
    if (!out)
        return NULL;
    char *q = out;
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        if (*p == '%') {
            int hi = hex_value(p[1]);
            int lo = hi < 0 ? -1 : hex_value(p[2]);
            if (hi >= 0 && lo >= 0 && (hi | lo) != 0) {
                *q++ = (char)(hi << 4 | lo);
                p += 3;
                continue;
            }
        }
        *q++ = (char)*p++;
    }
    *q = 0;
    return out;
}
