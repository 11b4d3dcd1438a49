/* A minimal, bounds-checked reader of the protobuf wire format: tags, varints, fixed
 * 32/64-bit values, length-delimited fields, packed repeated scalars, skipped groups.
 * Not a schema-aware decoder: model.c knows what the field numbers mean. */
#ifndef TM_ONNX_PB_H
#define TM_ONNX_PB_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    TM_PB_VARINT = 0,
    TM_PB_I64 = 1,
    TM_PB_LEN = 2,
    TM_PB_SGROUP = 3,      /* a whole group, skipped: data/len span its body */
    TM_PB_EGROUP = 4,      /* never returned by tm_pb_next */
    TM_PB_I32 = 5
} tm_pb_wire;

/* Groups may nest at most this deep inside one skipped field. */
#define TM_PB_MAX_GROUP_DEPTH 64

/* A cursor over one message. `start` is the beginning of the whole buffer, shared with
 * sub-readers, so that error offsets are file offsets. After an error, `error` holds a
 * static description, `error_at` the byte offset and `error_field` the field number whose
 * tag or content was bad (0 when the tag itself could not be read). */
typedef struct tm_pb_reader {
    const uint8_t *start;
    const uint8_t *p;
    const uint8_t *end;
    const char *error;
    size_t error_at;
    uint32_t error_field;
} tm_pb_reader;

typedef struct tm_pb_field {
    uint32_t number;
    tm_pb_wire wire;
    uint64_t value;        /* VARINT: the value; I64/I32: the raw little-endian bits */
    const uint8_t *data;   /* LEN and SGROUP: the payload, inside the buffer */
    size_t len;
    size_t offset;         /* offset of the tag from `start` */
} tm_pb_field;

void tm_pb_init(tm_pb_reader *r, const void *data, size_t size);
/* A reader over the payload of LEN field f of r (same `start`). */
void tm_pb_sub(const tm_pb_reader *r, const tm_pb_field *f, tm_pb_reader *sub);
/* Reads the next field: 1 when one was read, 0 at the end of the message, -1 on a
 * malformed message (r->error says why; the reader then stays at the end). */
int tm_pb_next(tm_pb_reader *r, tm_pb_field *f);

/* Elements of a repeated scalar field, packed (one LEN field) or not (one element per
 * field): `elem` is the wire type of one element (VARINT, I32 or I64). Values come back
 * widened to 64 bits: varints as read, fixed32 zero-extended, fixed64 as bits. */
typedef struct tm_pb_iter {
    const uint8_t *start;
    const uint8_t *p;
    const uint8_t *end;
    tm_pb_wire elem;
    int single;            /* an unpacked element still to return */
    uint64_t value;
    const char *error;
    size_t error_at;
} tm_pb_iter;

/* 0, or -1 when f's wire type is neither elem nor LEN (it->error set). */
int tm_pb_iter_init(tm_pb_iter *it, const tm_pb_reader *r, const tm_pb_field *f,
                    tm_pb_wire elem);
/* 1 with *v set, 0 at the end, -1 on a malformed packed run (it->error set). */
int tm_pb_iter_next(tm_pb_iter *it, uint64_t *v);
/* Number of elements left, validating them all without consuming; -1 when malformed. */
int tm_pb_iter_count(const tm_pb_iter *it, size_t *count, const char **error,
                     size_t *error_at);

static inline const char *tm_pb_wire_name(int wire) {
    switch (wire) {
    case TM_PB_VARINT: return "varint";
    case TM_PB_I64: return "fixed64";
    case TM_PB_LEN: return "length-delimited";
    case TM_PB_SGROUP: return "group";
    case TM_PB_EGROUP: return "end-group";
    case TM_PB_I32: return "fixed32";
    default: return "invalid";
    }
}

#endif
