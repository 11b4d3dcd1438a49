/* NumPy .npy reader and writer: a strict parser for the header dict, conversion of numpy
 * dtypes, byte orders and Fortran order to our C-ordered tensors, and the inverse.
 * Not .npz (zip) archives, object arrays or structured dtypes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "npy.h"
#include "../core/status.h"
#include "../core/tensor.h"

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6

/* What the header dict says, resolved to our terms. */
typedef struct npy_header {
    char descr[64];
    tm_dtype dtype;
    size_t item_size;       /* bytes per element in the file */
    int swap;               /* file byte order differs from ours */
    char string_kind;       /* 'U' (UTF-32), 'S' (bytes) or 0 */
    int fortran_order;
    int rank;
    int64_t dims[TM_MAX_RANK];
    size_t data_offset;     /* where the array data starts in the file */
} npy_header;

static int host_is_little(void) {
    const uint16_t one = 1;
    uint8_t first;
    memcpy(&first, &one, 1);
    return first == 1;
}

static uint32_t read_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void swap_bytes(uint8_t *p, size_t n_items, size_t width) {
    for (size_t i = 0; i < n_items; i++, p += width)
        for (size_t a = 0, b = width - 1; a < b; a++, b--) {
            uint8_t t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
}

/* ---- Header dict ------------------------------------------------------------------------ */

/* The header is a Python dict literal; we accept exactly what numpy's writers produce,
 * give or take whitespace, quotes and a trailing comma, and nothing that needs eval. */
typedef struct cursor {
    const char *p;
    const char *end;
    const char *source;      /* "npy file 'x.npy'" for messages */
    tm_error *err;
} cursor;

static void skip_space(cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static tm_status header_fail(cursor *c, const char *what) {
    return tm__fail(c->err, TM_ERR_PARSE, "%s: malformed header: %s", c->source, what);
}

static int accept(cursor *c, char ch) {
    skip_space(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

static tm_status parse_string(cursor *c, char *buf, size_t cap, const char *what) {
    skip_space(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return tm__fail(c->err, TM_ERR_PARSE, "%s: malformed header: expected a quoted %s",
                        c->source, what);
    char quote = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != quote) {
        if (*c->p == '\\' || *c->p == '\n')
            return tm__fail(c->err, TM_ERR_PARSE, "%s: malformed header: unexpected character "
                            "in %s", c->source, what);
        if (n + 1 >= cap)
            return tm__fail(c->err, TM_ERR_PARSE, "%s: malformed header: %s is too long",
                            c->source, what);
        buf[n++] = *c->p++;
    }
    if (c->p >= c->end)
        return tm__fail(c->err, TM_ERR_PARSE, "%s: malformed header: unterminated %s",
                        c->source, what);
    c->p++;
    buf[n] = 0;
    return TM_OK;
}

static int match_word(cursor *c, const char *word) {
    size_t n = strlen(word);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0)
        return 0;
    const char *after = c->p + n;
    if (after < c->end && ((*after >= 'A' && *after <= 'Z') || (*after >= 'a' && *after <= 'z') ||
                           (*after >= '0' && *after <= '9') || *after == '_'))
        return 0;
    c->p = after;
    return 1;
}

static tm_status parse_bool(cursor *c, int *out) {
    skip_space(c);
    if (match_word(c, "True"))
        *out = 1;
    else if (match_word(c, "False"))
        *out = 0;
    else
        return header_fail(c, "'fortran_order' must be True or False");
    return TM_OK;
}

static tm_status parse_dim(cursor *c, int64_t *out) {
    skip_space(c);
    if (c->p >= c->end || *c->p < '0' || *c->p > '9')
        return header_fail(c, "'shape' must be a tuple of non-negative integers");
    int64_t v = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *c->p - '0', &v))
            return tm__fail(c->err, TM_ERR_PARSE, "%s: shape overflow: a dimension does not "
                            "fit in 64 bits", c->source);
        c->p++;
    }
    if (c->p < c->end && *c->p == 'L') /* Python 2 long literals, in old version 1.0 files */
        c->p++;
    *out = v;
    return TM_OK;
}

static tm_status parse_shape(cursor *c, npy_header *h) {
    if (!accept(c, '('))
        return header_fail(c, "'shape' must be a tuple");
    h->rank = 0;
    if (accept(c, ')'))
        return TM_OK;
    int trailing_comma = 0;
    for (;;) {
        int64_t d = 0;
        tm_status s = parse_dim(c, &d);
        if (s != TM_OK)
            return s;
        if (h->rank == TM_MAX_RANK)
            return tm__fail(c->err, TM_ERR_PARSE, "%s: shape has more than %d dimensions, "
                            "the most we support", c->source, TM_MAX_RANK);
        h->dims[h->rank++] = d;
        trailing_comma = accept(c, ',');
        if (accept(c, ')'))
            break;
        if (!trailing_comma)
            return header_fail(c, "expected ',' or ')' in 'shape'");
    }
    /* "(3)" is the integer 3 in Python, not a tuple. */
    if (h->rank == 1 && !trailing_comma)
        return header_fail(c, "'shape' (n) is not a tuple: a one-element shape needs a comma");
    return TM_OK;
}

/* Resolves descr ('<f4', '|b1', '>U7', ...) to dtype, item size and byte order. */
static tm_status resolve_descr(cursor *c, npy_header *h) {
    const char *d = h->descr;
    char order = d[0];
    if (order != '<' && order != '>' && order != '=' && order != '|')
        goto unknown;
    char kind = d[1];
    if (!kind || d[2] < '0' || d[2] > '9' || (d[2] == '0' && d[3]))
        goto unknown;
    size_t count = 0;
    for (const char *p = d + 2; *p; p++) {
        if (*p < '0' || *p > '9' || count > 100000000)
            goto unknown;
        count = count * 10 + (size_t)(*p - '0');
    }
    h->string_kind = 0;
    h->item_size = count;
    switch (kind) {
    case 'f':
        h->dtype = count == 2 ? TM_FLOAT16 : count == 4 ? TM_FLOAT : count == 8 ? TM_DOUBLE
                                                                                : TM_UNDEFINED;
        break;
    case 'i':
        h->dtype = count == 1 ? TM_INT8 : count == 2 ? TM_INT16 : count == 4 ? TM_INT32
                 : count == 8 ? TM_INT64 : TM_UNDEFINED;
        break;
    case 'u':
        h->dtype = count == 1 ? TM_UINT8 : count == 2 ? TM_UINT16 : count == 4 ? TM_UINT32
                 : count == 8 ? TM_UINT64 : TM_UNDEFINED;
        break;
    case 'b':
        h->dtype = count == 1 ? TM_BOOL : TM_UNDEFINED;
        break;
    case 'c':
        h->dtype = count == 8 ? TM_COMPLEX64 : count == 16 ? TM_COMPLEX128 : TM_UNDEFINED;
        break;
    case 'U':
        h->dtype = TM_STRING;
        h->string_kind = 'U';
        h->item_size = count * 4;
        break;
    case 'S':
        h->dtype = TM_STRING;
        h->string_kind = 'S';
        break;
    default:
        goto unknown;
    }
    /* A zero-width string type would let a tiny file claim any number of elements. */
    if (h->dtype == TM_UNDEFINED || h->item_size == 0)
        goto unknown;
    size_t unit = h->string_kind == 'U' ? 4 : h->string_kind == 'S' ? 1
                : kind == 'c' ? h->item_size / 2 : h->item_size;
    if (order == '|' && unit > 1)
        return tm__fail(c->err, TM_ERR_PARSE, "%s: descr '%s' has no byte order but its "
                        "items are %zu bytes wide", c->source, d, unit);
    int file_little = order == '<' || (order == '=' && host_is_little());
    h->swap = unit > 1 && order != '|' && file_little != host_is_little();
    return TM_OK;
unknown:
    return tm__fail(c->err, TM_ERR_PARSE, "%s: unknown or unsupported descr '%s'", c->source, d);
}

static tm_status parse_dict(cursor *c, npy_header *h) {
    int seen_descr = 0, seen_order = 0, seen_shape = 0;
    if (!accept(c, '{'))
        return header_fail(c, "it does not start with '{'");
    while (!accept(c, '}')) {
        char key[32];
        tm_status s = parse_string(c, key, sizeof key, "key");
        if (s != TM_OK)
            return s;
        if (!accept(c, ':'))
            return header_fail(c, "expected ':' after a key");
        int *seen;
        if (!strcmp(key, "descr")) {
            seen = &seen_descr;
            s = parse_string(c, h->descr, sizeof h->descr, "'descr'");
        } else if (!strcmp(key, "fortran_order")) {
            seen = &seen_order;
            s = parse_bool(c, &h->fortran_order);
        } else if (!strcmp(key, "shape")) {
            seen = &seen_shape;
            s = parse_shape(c, h);
        } else {
            return tm__fail(c->err, TM_ERR_PARSE, "%s: malformed header: unexpected key '%s'",
                            c->source, key);
        }
        if (s != TM_OK)
            return s;
        if (*seen)
            return tm__fail(c->err, TM_ERR_PARSE, "%s: malformed header: key '%s' appears "
                            "twice", c->source, key);
        *seen = 1;
        if (accept(c, ','))
            continue;
        if (!accept(c, '}'))
            return header_fail(c, "expected ',' or '}' after a value");
        break;
    }
    skip_space(c);
    if (c->p != c->end)
        return header_fail(c, "unexpected text after the closing '}'");
    if (!seen_descr || !seen_order || !seen_shape)
        return tm__fail(c->err, TM_ERR_PARSE, "%s: malformed header: missing key '%s'",
                        c->source, !seen_descr ? "descr" : !seen_order ? "fortran_order"
                                                                       : "shape");
    return resolve_descr(c, h);
}

/* Parses the preamble and header dict from the first `avail` bytes of a file of
 * `file_size` bytes. */
static tm_status parse_header(const char *source, const uint8_t *buf, size_t avail,
                              size_t file_size, npy_header *h, tm_error *err) {
    memset(h, 0, sizeof *h);
    if (avail < NPY_MAGIC_LEN + 2 || memcmp(buf, NPY_MAGIC, NPY_MAGIC_LEN) != 0)
        return tm__fail(err, TM_ERR_PARSE, "%s: bad magic: not a .npy file", source);
    int major = buf[6], minor = buf[7];
    if (major < 1 || major > 3 || minor != 0)
        return tm__fail(err, TM_ERR_PARSE, "%s: bad version %d.%d (we read 1.0, 2.0 and 3.0)",
                        source, major, minor);
    size_t len_bytes = major == 1 ? 2 : 4;
    size_t start = NPY_MAGIC_LEN + 2 + len_bytes;
    if (avail < start)
        return tm__fail(err, TM_ERR_PARSE, "%s: truncated before the header length", source);
    size_t header_len = major == 1 ? (size_t)buf[8] | (size_t)buf[9] << 8 : read_le32(buf + 8);
    if (header_len > file_size - start)
        return tm__fail(err, TM_ERR_PARSE, "%s: header length %zu goes beyond the end of the "
                        "file (%zu bytes)", source, header_len, file_size);
    if (avail < start + header_len)
        return tm__fail(err, TM_ERR_PARSE, "%s: truncated inside the header", source);
    cursor c = { (const char *)buf + start, (const char *)buf + start + header_len, source, err };
    tm_status s = parse_dict(&c, h);
    if (s != TM_OK)
        return s;
    h->data_offset = start + header_len;
    return TM_OK;
}

/* ---- Data ----------------------------------------------------------------------------- */

static void put_utf8(char **q, uint32_t cp) {
    char *p = *q;
    if (cp < 0x80) {
        *p++ = (char)cp;
    } else if (cp < 0x800) {
        *p++ = (char)(0xC0 | cp >> 6);
        *p++ = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        *p++ = (char)(0xE0 | cp >> 12);
        *p++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *p++ = (char)(0x80 | (cp & 0x3F));
    } else {
        *p++ = (char)(0xF0 | cp >> 18);
        *p++ = (char)(0x80 | ((cp >> 12) & 0x3F));
        *p++ = (char)(0x80 | ((cp >> 6) & 0x3F));
        *p++ = (char)(0x80 | (cp & 0x3F));
    }
    *q = p;
}

/* One fixed-width numpy string to a malloc'd UTF-8 C string. Trailing NULs are padding,
 * as numpy reads them; a NUL before other characters cannot live in a C string. */
static tm_status decode_string(const char *source, const npy_header *h, const uint8_t *item,
                               int64_t index, char **out, tm_error *err) {
    size_t unit = h->string_kind == 'U' ? 4 : 1;
    size_t len = h->item_size / unit;
    while (len > 0) {
        uint32_t last = 0;
        memcpy(&last, item + (len - 1) * unit, unit);
        if (last)
            break;
        len--;
    }
    char *s = malloc(len * unit + 1);
    if (!s)
        return tm__fail(err, TM_ERR_NO_MEMORY, "%s: out of memory", source);
    char *q = s;
    for (size_t i = 0; i < len; i++) {
        uint32_t cp = item[i];
        if (unit == 4) {
            memcpy(&cp, item + i * 4, 4);
            if (h->swap)
                cp = cp >> 24 | (cp >> 8 & 0xFF00) | (cp << 8 & 0xFF0000) | cp << 24;
        }
        if (cp == 0) {
            free(s);
            return tm__fail(err, TM_ERR_PARSE, "%s: string element %lld holds a NUL "
                            "character", source, (long long)index);
        }
        if (unit == 1) {
            *q++ = (char)cp; /* bytes ('S') are kept as they are */
            continue;
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
            free(s);
            return tm__fail(err, TM_ERR_PARSE, "%s: string element %lld holds an invalid "
                            "code point U+%X", source, (long long)index, (unsigned)cp);
        }
        put_utf8(&q, cp);
    }
    *q = 0;
    *out = s;
    return TM_OK;
}

/* Converts n file items at src (file order) into in-memory elements at dst. */
static tm_status convert_items(const char *source, const npy_header *h, const uint8_t *src,
                               uint8_t *dst, int64_t n, tm_error *err) {
    if (h->dtype == TM_STRING) {
        char **strings = (char **)dst;
        for (int64_t i = 0; i < n; i++) {
            tm_status s = decode_string(source, h, src + (size_t)i * h->item_size, i,
                                        &strings[i], err);
            if (s != TM_OK) {
                for (int64_t j = 0; j < i; j++) {
                    free(strings[j]);
                    strings[j] = NULL;
                }
                return s;
            }
        }
        return TM_OK;
    }
    size_t bytes = (size_t)n * h->item_size;
    memcpy(dst, src, bytes);
    if (h->swap)
        swap_bytes(dst, h->dtype == TM_COMPLEX64 || h->dtype == TM_COMPLEX128 ? (size_t)n * 2
                                                                                : (size_t)n,
                   h->dtype == TM_COMPLEX64 || h->dtype == TM_COMPLEX128 ? h->item_size / 2
                                                                          : h->item_size);
    if (h->dtype == TM_BOOL)
        for (size_t i = 0; i < bytes; i++)
            dst[i] = dst[i] != 0;
    return TM_OK;
}

/* Moves elements from Fortran (column-major) order in src to C order in dst. */
static void fortran_to_c(const uint8_t *src, uint8_t *dst, int rank, const int64_t *dims,
                         int64_t n, size_t width) {
    int64_t c_stride[TM_MAX_RANK];
    int64_t index[TM_MAX_RANK] = { 0 };
    int64_t stride = 1;
    for (int k = rank - 1; k >= 0; k--) {
        c_stride[k] = stride;
        stride *= dims[k];
    }
    int64_t offset = 0; /* C-order position of the element at `index` */
    for (int64_t i = 0; i < n; i++) {
        memcpy(dst + (size_t)offset * width, src + (size_t)i * width, width);
        for (int k = 0; k < rank; k++) { /* Fortran order: the first index runs fastest */
            index[k]++;
            offset += c_stride[k];
            if (index[k] < dims[k])
                break;
            offset -= index[k] * c_stride[k];
            index[k] = 0;
        }
    }
}

/* Builds the tensor from header and the data bytes that follow it. */
static tm_status make_tensor(const char *source, const npy_header *h, const uint8_t *data,
                             size_t data_size, tm_tensor **out, tm_error *err) {
    int64_t n = tm_numel(h->rank, h->dims);
    size_t need;
    if (n < 0 || (uint64_t)n > SIZE_MAX || !tm__mul_ok((size_t)n, h->item_size, &need))
        return tm__fail(err, TM_ERR_PARSE, "%s: shape overflow: the element count does not "
                        "fit in memory sizes", source);
    if (need != data_size)
        return tm__fail(err, TM_ERR_PARSE, "%s: shape/data size mismatch: shape and descr "
                        "'%s' need %zu data bytes but the file has %zu", source, h->descr,
                        need, data_size);
    tm_tensor *t = tm_tensor_alloc(h->dtype, h->rank, h->dims, NULL);
    if (!t)
        return tm__fail(err, TM_ERR_NO_MEMORY, "%s: out of memory for %lld elements", source,
                        (long long)n);
    tm_status s;
    if (!h->fortran_order || h->rank < 2) {
        s = convert_items(source, h, data, t->data, n, err);
    } else {
        uint8_t *tmp = calloc(t->nbytes ? t->nbytes : 1, 1);
        if (!tmp) {
            tm_tensor_free(t);
            return tm__fail(err, TM_ERR_NO_MEMORY, "%s: out of memory", source);
        }
        s = convert_items(source, h, data, tmp, n, err);
        if (s == TM_OK)
            fortran_to_c(tmp, t->data, h->rank, h->dims, n, tm_dtype_elem_size(h->dtype));
        free(tmp);
    }
    if (s != TM_OK) {
        tm_tensor_free(t);
        return s;
    }
    *out = t;
    return TM_OK;
}

static tm_status read_memory(const char *source, const uint8_t *buf, size_t size,
                             tm_tensor **out, tm_error *err) {
    npy_header h;
    tm_status s = parse_header(source, buf, size, size, &h, err);
    if (s != TM_OK)
        return s;
    return make_tensor(source, &h, buf + h.data_offset, size - h.data_offset, out, err);
}

tm_status tm_npy_read_buffer(const void *data, size_t size, tm_tensor **out, tm_error *err) {
    if (!out || (!data && size))
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_npy_read_buffer: NULL argument");
    return read_memory("npy buffer", data, size, out, err);
}

tm_status tm_npy_read(const char *path, tm_tensor **out, tm_error *err) {
    if (!path || !out)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_npy_read: NULL argument");
    char source[1200];
    snprintf(source, sizeof source, "npy file '%s'", path);
    FILE *f = fopen(path, "rb");
    if (!f)
        return tm__fail(err, errno == ENOENT ? TM_ERR_NOT_FOUND : TM_ERR_IO,
                        "%s: cannot open: %s", source, strerror(errno));
    /* Read the whole file: .npy files we meet are inputs and outputs, not weights. */
    size_t cap = 1 << 16, size = 0;
    uint8_t *buf = malloc(cap);
    tm_status s = TM_OK;
    while (buf) {
        size += fread(buf + size, 1, cap - size, f);
        if (size < cap)
            break;
        if (cap > SIZE_MAX / 2) {
            free(buf);
            buf = NULL;
            break;
        }
        uint8_t *bigger = realloc(buf, cap * 2);
        if (!bigger) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    if (!buf)
        s = tm__fail(err, TM_ERR_NO_MEMORY, "%s: out of memory reading the file", source);
    else if (ferror(f))
        s = tm__fail(err, TM_ERR_IO, "%s: read error: %s", source, strerror(errno));
    fclose(f);
    if (s == TM_OK)
        s = read_memory(source, buf, size, out, err);
    free(buf);
    return s;
}

/* ---- Writer ----------------------------------------------------------------------------- */

static const char *npy_descr(tm_dtype dt) {
    switch (dt) {
    case TM_FLOAT: return "<f4";
    case TM_DOUBLE: return "<f8";
    case TM_FLOAT16: return "<f2";
    case TM_INT8: case TM_INT4: case TM_INT2: return "|i1";
    case TM_INT16: return "<i2";
    case TM_INT32: return "<i4";
    case TM_INT64: return "<i8";
    case TM_UINT8: case TM_UINT4: case TM_UINT2: case TM_FLOAT4E2M1:
    case TM_FLOAT8E4M3FN: case TM_FLOAT8E4M3FNUZ: case TM_FLOAT8E5M2: case TM_FLOAT8E5M2FNUZ:
    case TM_FLOAT8E8M0:
        return "|u1";
    case TM_UINT16: case TM_BFLOAT16: return "<u2";
    case TM_UINT32: return "<u4";
    case TM_UINT64: return "<u8";
    case TM_BOOL: return "|b1";
    case TM_COMPLEX64: return "<c8";
    case TM_COMPLEX128: return "<c16";
    default: return NULL;
    }
}

/* Decodes one UTF-8 code point at *p; 0 when the bytes are not valid UTF-8. */
static int next_code_point(const unsigned char **p, uint32_t *cp) {
    const unsigned char *s = *p;
    uint32_t c = s[0];
    int n;
    uint32_t min;
    if (c < 0x80) { *cp = c; *p = s + 1; return 1; }
    else if ((c & 0xE0) == 0xC0) { n = 1; c &= 0x1F; min = 0x80; }
    else if ((c & 0xF0) == 0xE0) { n = 2; c &= 0x0F; min = 0x800; }
    else if ((c & 0xF8) == 0xF0) { n = 3; c &= 0x07; min = 0x10000; }
    else return 0;
    for (int i = 1; i <= n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        c = c << 6 | (s[i] & 0x3F);
    }
    if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF))
        return 0;
    *cp = c;
    *p = s + n + 1;
    return 1;
}

/* Counts the code points of s, or returns -1 when s is not valid UTF-8. */
static int64_t utf8_length(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    int64_t n = 0;
    uint32_t cp;
    while (*p) {
        if (!next_code_point(&p, &cp))
            return -1;
        n++;
    }
    return n;
}

static void put_le32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

/* The preamble and padded header dict; returns its length, 0 if it does not fit. */
static size_t build_header(char *out, size_t cap, const char *descr, const tm_tensor *t) {
    char dict[512];
    int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (",
                     descr);
    for (int i = 0; i < t->rank; i++)
        n += snprintf(dict + n, sizeof dict - (size_t)n, "%s%lld", i ? ", " : "",
                      (long long)t->dims[i]);
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%s), }", t->rank == 1 ? "," : "");
    /* numpy pads with spaces so that the data starts on a 64-byte boundary. */
    size_t total = 10 + (size_t)n + 1;
    size_t padded = (total + 63) / 64 * 64;
    if (padded > cap || padded - 10 > 65535)
        return 0;
    memcpy(out, NPY_MAGIC, NPY_MAGIC_LEN);
    out[6] = 1;
    out[7] = 0;
    out[8] = (char)((padded - 10) & 0xFF);
    out[9] = (char)((padded - 10) >> 8);
    memcpy(out + 10, dict, (size_t)n);
    memset(out + 10 + n, ' ', padded - total);
    out[padded - 1] = '\n';
    return padded;
}

/* Writes the data of t in its file form; 0 on a write error. */
static int write_data(FILE *f, const tm_tensor *t, size_t string_width) {
    int64_t n = tm_tensor_numel_(t);
    if (t->dtype == TM_STRING) {
        uint8_t *item = malloc(string_width * 4);
        if (!item)
            return 0;
        char *const *strings = t->data;
        int ok = 1;
        for (int64_t i = 0; i < n && ok; i++) {
            memset(item, 0, string_width * 4);
            const unsigned char *p = (const unsigned char *)(strings[i] ? strings[i] : "");
            uint32_t cp;
            for (size_t k = 0; *p && next_code_point(&p, &cp); k++)
                put_le32(item + k * 4, cp);
            ok = fwrite(item, 4, string_width, f) == string_width;
        }
        free(item);
        return ok;
    }
    size_t width = tm_dtype_elem_size(t->dtype);
    size_t unit = t->dtype == TM_COMPLEX64 || t->dtype == TM_COMPLEX128 ? width / 2 : width;
    int convert = t->dtype == TM_BOOL || (unit > 1 && !host_is_little());
    if (!convert)
        return t->nbytes == 0 || fwrite(t->data, 1, t->nbytes, f) == t->nbytes;
    uint8_t chunk[4096];
    const uint8_t *src = t->data;
    for (size_t done = 0; done < t->nbytes;) {
        size_t m = t->nbytes - done < sizeof chunk ? t->nbytes - done : sizeof chunk;
        memcpy(chunk, src + done, m);
        if (t->dtype == TM_BOOL)
            for (size_t i = 0; i < m; i++)
                chunk[i] = chunk[i] != 0;
        else
            swap_bytes(chunk, m / unit, unit);
        if (fwrite(chunk, 1, m, f) != m)
            return 0;
        done += m;
    }
    return 1;
}

tm_status tm_npy_write(const char *path, const tm_tensor *t, tm_error *err) {
    if (!path || !t)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_npy_write: NULL argument");
    char descr[32];
    size_t string_width = 0;
    if (t->dtype == TM_STRING) {
        char *const *strings = t->data;
        int64_t n = tm_tensor_numel_(t);
        string_width = 1; /* numpy itself writes '<U1' for an array of empty strings */
        for (int64_t i = 0; i < n; i++) {
            int64_t len = utf8_length(strings[i] ? strings[i] : "");
            if (len < 0)
                return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "npy file '%s': string element "
                                "%lld is not valid UTF-8", path, (long long)i);
            if ((size_t)len > string_width)
                string_width = (size_t)len;
        }
        snprintf(descr, sizeof descr, "<U%zu", string_width);
    } else {
        const char *d = npy_descr(t->dtype);
        if (!d)
            return tm__fail(err, TM_ERR_UNSUPPORTED, "npy file '%s': cannot write dtype %s",
                            path, tm_dtype_name(t->dtype));
        snprintf(descr, sizeof descr, "%s", d);
    }
    char header[640];
    size_t header_len = build_header(header, sizeof header, descr, t);
    if (!header_len)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "npy file '%s': header too long", path);
    FILE *f = fopen(path, "wb");
    if (!f)
        return tm__fail(err, TM_ERR_IO, "npy file '%s': cannot create: %s", path,
                        strerror(errno));
    int ok = fwrite(header, 1, header_len, f) == header_len && write_data(f, t, string_width);
    int saved_errno = errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        saved_errno = errno;
    }
    if (!ok) {
        remove(path);
        return tm__fail(err, TM_ERR_IO, "npy file '%s': write failed: %s", path,
                        strerror(saved_errno));
    }
    return TM_OK;
}
