/* The protobuf wire-format reader declared in pb.h. Every read is checked against the
 * end of the current message, so arbitrary bytes can only produce an error.
 * Not a decoder of ONNX messages: see model.c. */
#include "pb.h"

#include <string.h>

/* Field numbers are 29 bits (1 .. 2^29 - 1). */
#define PB_MAX_FIELD ((1u << 29) - 1)

static const char *const ERR_TRUNCATED = "truncated protobuf";
static const char *const ERR_OVERLONG = "overlong varint";
static const char *const ERR_LENGTH = "length exceeds the buffer";
static const char *const ERR_WIRE = "invalid wire type";
static const char *const ERR_FIELD = "invalid field number";
static const char *const ERR_GROUP = "unbalanced group";
static const char *const ERR_GROUP_DEPTH = "groups nested too deeply";
static const char *const ERR_PACKED = "packed field length is not a multiple of the element size";

/* A varint is at most 10 bytes, and its 10th byte may only carry bit 63. Returns NULL
 * on success, else the error. */
static const char *read_varint(const uint8_t **pp, const uint8_t *end, uint64_t *out) {
    const uint8_t *p = *pp;
    uint64_t v = 0;
    for (int i = 0; i < 10; i++) {
        if (p >= end)
            return ERR_TRUNCATED;
        uint8_t b = *p++;
        if (i == 9 && b > 1)
            return ERR_OVERLONG;
        v |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            *pp = p;
            *out = v;
            return NULL;
        }
    }
    return ERR_OVERLONG; /* not reached: the 10th byte either ends or fails above */
}

static uint64_t load_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

void tm_pb_init(tm_pb_reader *r, const void *data, size_t size) {
    memset(r, 0, sizeof *r);
    r->start = data;
    r->p = data;
    r->end = r->p ? r->p + size : NULL;
}

void tm_pb_sub(const tm_pb_reader *r, const tm_pb_field *f, tm_pb_reader *sub) {
    memset(sub, 0, sizeof *sub);
    sub->start = r->start;
    sub->p = f->data;
    sub->end = f->data + f->len;
}

static int fail(tm_pb_reader *r, const char *why, const uint8_t *at, uint32_t field) {
    r->error = why;
    r->error_at = (size_t)(at - r->start);
    r->error_field = field;
    r->p = r->end; /* further calls see the end, never garbage */
    return -1;
}

/* Reads a tag: the field number and wire type. */
static const char *read_tag(const uint8_t **pp, const uint8_t *end, uint32_t *number,
                            int *wire) {
    uint64_t tag;
    const char *e = read_varint(pp, end, &tag);
    if (e)
        return e;
    if (tag > 0xffffffffu)
        return ERR_FIELD;
    *wire = (int)(tag & 7);
    *number = (uint32_t)(tag >> 3);
    if (*number == 0 || *number > PB_MAX_FIELD)
        return ERR_FIELD;
    return NULL;
}

/* Skips the payload of a non-group field of wire type `wire` at *pp. */
static const char *skip_payload(const uint8_t **pp, const uint8_t *end, int wire) {
    uint64_t v;
    switch (wire) {
    case TM_PB_VARINT:
        return read_varint(pp, end, &v);
    case TM_PB_I64:
        if ((size_t)(end - *pp) < 8)
            return ERR_TRUNCATED;
        *pp += 8;
        return NULL;
    case TM_PB_I32:
        if ((size_t)(end - *pp) < 4)
            return ERR_TRUNCATED;
        *pp += 4;
        return NULL;
    case TM_PB_LEN: {
        const char *e = read_varint(pp, end, &v);
        if (e)
            return e;
        if (v > (uint64_t)(end - *pp))
            return ERR_LENGTH;
        *pp += v;
        return NULL;
    }
    default:
        return ERR_WIRE;
    }
}

/* Skips a group body, iteratively: a stack of open field numbers replaces recursion.
 * On success *pp is after the matching end-group tag and *body_end at its start. */
static const char *skip_group(const uint8_t **pp, const uint8_t *end, uint32_t number,
                              const uint8_t **body_end) {
    uint32_t open[TM_PB_MAX_GROUP_DEPTH];
    int depth = 0;
    open[depth++] = number;
    while (depth > 0) {
        const uint8_t *tag_at = *pp;
        uint32_t n;
        int wire;
        const char *e = read_tag(pp, end, &n, &wire);
        if (e)
            return e;
        if (wire == TM_PB_SGROUP) {
            if (depth == TM_PB_MAX_GROUP_DEPTH)
                return ERR_GROUP_DEPTH;
            open[depth++] = n;
        } else if (wire == TM_PB_EGROUP) {
            if (open[depth - 1] != n)
                return ERR_GROUP;
            depth--;
            if (depth == 0)
                *body_end = tag_at;
        } else if ((e = skip_payload(pp, end, wire)) != NULL) {
            return e;
        }
    }
    return NULL;
}

int tm_pb_next(tm_pb_reader *r, tm_pb_field *f) {
    if (r->p == NULL || r->p >= r->end)
        return 0;
    memset(f, 0, sizeof *f);
    const uint8_t *tag_at = r->p;
    const uint8_t *p = r->p;
    uint32_t number;
    int wire;
    const char *e = read_tag(&p, r->end, &number, &wire);
    if (e)
        return fail(r, e, tag_at, 0);
    f->number = number;
    f->wire = (tm_pb_wire)wire;
    f->offset = (size_t)(tag_at - r->start);
    const uint8_t *payload = p;
    switch (wire) {
    case TM_PB_VARINT:
        if ((e = read_varint(&p, r->end, &f->value)) != NULL)
            return fail(r, e, payload, number);
        break;
    case TM_PB_I64:
        if ((size_t)(r->end - p) < 8)
            return fail(r, ERR_TRUNCATED, payload, number);
        f->value = load_le(p, 8);
        p += 8;
        break;
    case TM_PB_I32:
        if ((size_t)(r->end - p) < 4)
            return fail(r, ERR_TRUNCATED, payload, number);
        f->value = load_le(p, 4);
        p += 4;
        break;
    case TM_PB_LEN: {
        uint64_t len;
        if ((e = read_varint(&p, r->end, &len)) != NULL)
            return fail(r, e, payload, number);
        if (len > (uint64_t)(r->end - p))
            return fail(r, ERR_LENGTH, payload, number);
        f->data = p;
        f->len = (size_t)len;
        p += len;
        break;
    }
    case TM_PB_SGROUP: {
        const uint8_t *body_end = NULL;
        f->data = p;
        if ((e = skip_group(&p, r->end, number, &body_end)) != NULL)
            return fail(r, e, p, number);
        f->len = (size_t)(body_end - f->data);
        break;
    }
    case TM_PB_EGROUP:
        return fail(r, ERR_GROUP, tag_at, number);
    default:
        return fail(r, ERR_WIRE, tag_at, number);
    }
    r->p = p;
    return 1;
}

/* ---- Repeated scalars ----------------------------------------------------------------- */

static size_t elem_width(tm_pb_wire elem) {
    return elem == TM_PB_I32 ? 4 : elem == TM_PB_I64 ? 8 : 0;
}

int tm_pb_iter_init(tm_pb_iter *it, const tm_pb_reader *r, const tm_pb_field *f,
                    tm_pb_wire elem) {
    memset(it, 0, sizeof *it);
    it->start = r->start;
    it->elem = elem;
    if (f->wire == elem) {
        it->single = 1;
        it->value = f->value;
        return 0;
    }
    if (f->wire != TM_PB_LEN) {
        it->error = ERR_WIRE;
        it->error_at = f->offset;
        return -1;
    }
    it->p = f->data;
    it->end = f->data + f->len;
    size_t w = elem_width(elem);
    if (w && f->len % w) {
        it->error = ERR_PACKED;
        it->error_at = (size_t)(f->data - r->start);
        it->p = it->end;
        return -1;
    }
    return 0;
}

int tm_pb_iter_next(tm_pb_iter *it, uint64_t *v) {
    if (it->single) {
        it->single = 0;
        *v = it->value;
        return 1;
    }
    if (it->p == NULL || it->p >= it->end)
        return 0;
    size_t w = elem_width(it->elem);
    if (w) {
        /* init checked that the run is a whole number of elements */
        *v = load_le(it->p, (int)w);
        it->p += w;
        return 1;
    }
    const uint8_t *at = it->p;
    const char *e = read_varint(&it->p, it->end, v);
    if (e) {
        it->error = e;
        it->error_at = (size_t)(at - it->start);
        it->p = it->end;
        return -1;
    }
    return 1;
}

int tm_pb_iter_count(const tm_pb_iter *it, size_t *count, const char **error,
                     size_t *error_at) {
    if (it->single) {
        *count = 1;
        return 0;
    }
    if (it->p == NULL || it->p >= it->end) {
        *count = 0;
        return 0;
    }
    size_t w = elem_width(it->elem);
    if (w) {
        *count = (size_t)(it->end - it->p) / w;
        return 0;
    }
    /* Varints: one element per byte without the continuation bit, once the run is
     * known to be well formed. */
    tm_pb_iter copy = *it;
    size_t n = 0;
    uint64_t v;
    int rc;
    while ((rc = tm_pb_iter_next(&copy, &v)) == 1)
        n++;
    if (rc < 0) {
        *error = copy.error;
        *error_at = copy.error_at;
        return -1;
    }
    *count = n;
    return 0;
}
