/* The ONNX writer: a loaded model saved back with some main-graph initializers replaced.
 * Fields that do not change are copied byte for byte from the loaded file; only tensors
 * whose data changes or moves are re-encoded, and the messages around them get new
 * lengths. Not a general protobuf encoder or model builder, and not the loader (model.c). */
#define _XOPEN_SOURCE 700 /* realpath */

#include "write.h"

#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../core/dtype.h"
#include "../core/status.h"
#include "pb.h"

/* Tensors at least this large start on a page in the data file. */
#define PAGE_ALIGN_MIN_BYTES ((uint64_t)1 << 20)
#define PAGE_SIZE_ALIGN 4096u
/* A protobuf message cannot be read past 2 GiB - 1 bytes. */
#define PROTOBUF_LIMIT ((uint64_t)INT32_MAX)

void tm_save_options_default(tm_save_options *o) {
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->external_data = TM_EXTERNAL_AUTO;
    o->external_threshold = (uint64_t)1 << 30;
    o->external_min_bytes = 1024;
    o->external_alignment = 64;
}

/* Which tensors go to the data file in this pass. */
typedef enum { PLACE_INLINE, PLACE_KEEP, PLACE_MOVE } placement;
/* SIZE counts bytes; PLAN counts and lays out the data file; WRITE writes the .onnx. */
typedef enum { MODE_SIZE, MODE_PLAN, MODE_WRITE } out_mode;
/* A TensorProto's role: only main-graph initializers are replaced or moved out. */
enum { T_MAIN_INIT, T_OTHER };

typedef struct replacement {
    const char *name;
    size_t name_len;
    const tm_tensor *tensor;
    int found;
} replacement;

typedef struct ext_entry {
    const uint8_t *key;          /* the TensorProto's payload in the loaded file: unique */
    const uint8_t *src;          /* its bytes, or NULL: packed from `tensor` */
    const tm_tensor *tensor;     /* the replacing value, or NULL */
    uint64_t nbytes, offset;
} ext_entry;

typedef struct saver {
    const tm_onnx_model *m;
    tm_save_options o;
    tm_error *err;
    tm_status status;            /* the first failure; every emitter stops once it is set */
    placement place;
    replacement *repl;           /* sorted by name */
    int n_repl;
    tm_tensor **rounded;         /* per replacement: its value rounded to a half type, or NULL */
    ext_entry *ext;              /* in file order */
    size_t n_ext, cap_ext;
    uint64_t data_size;
    int saw_external;            /* the loaded model has external tensors */
    const char *location;        /* the data file's name */
    FILE *f;
    const char *cached_loc;      /* the last external file resolved */
    size_t cached_len;
    const tm_mapping *cached_map;
} saver;

typedef struct out {
    saver *s;
    out_mode mode;
    uint64_t n;
} out;

static tm_status fail(saver *s, tm_status code, const char *fmt, ...) TM_PRINTF(3, 4);
static tm_status fail_at(saver *s, tm_status code, const char *name, const char *fmt, ...)
    TM_PRINTF(4, 5);

/* A failure about one initializer: err->value names it. */
static tm_status fail_at(saver *s, tm_status code, const char *name, const char *fmt, ...) {
    if (s->status) return s->status;
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    s->status = tm__fail_at(s->err, code, NULL, NULL, name, "saving the model: %s", msg);
    return s->status;
}

static tm_status fail(saver *s, tm_status code, const char *fmt, ...) {
    if (s->status) return s->status;
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    s->status = tm__fail(s->err, code, "saving the model: %s", msg);
    return s->status;
}

/* ---- Output primitives ---------------------------------------------------------------- */

static void put(out *o, const void *p, size_t n) {
    if (o->s->status || n == 0) return;
    o->n += n;
    if (o->mode == MODE_WRITE && fwrite(p, 1, n, o->s->f) != n)
        fail(o->s, TM_ERR_IO, "write failed: %s", strerror(errno));
}

static size_t varint_len(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static void put_varint(out *o, uint64_t v) {
    uint8_t b[10];
    size_t n = 0;
    while (v >= 0x80) {
        b[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    b[n++] = (uint8_t)v;
    put(o, b, n);
}

static void put_tag(out *o, uint32_t field, tm_pb_wire wire) {
    put_varint(o, ((uint64_t)field << 3) | (uint64_t)wire);
}

static void put_bytes_field(out *o, uint32_t field, const void *p, uint64_t n) {
    put_tag(o, field, TM_PB_LEN);
    put_varint(o, n);
    put(o, p, (size_t)n);
}

/* The field just read from r (tag to end), as it is in the file. */
static void put_verbatim(out *o, const tm_pb_reader *r, const tm_pb_field *f) {
    put(o, r->start + f->offset, (size_t)(r->p - (r->start + f->offset)));
}

/* A reader over bytes of the loaded file (offsets stay file offsets). */
static tm_pb_reader reader_at(const saver *s, const uint8_t *p, size_t len) {
    tm_pb_reader r;
    tm_pb_init(&r, s->m->bytes, s->m->n_bytes);
    r.p = p;
    r.end = p + len;
    return r;
}

typedef void (*emit_fn)(out *o, const uint8_t *p, size_t len, int arg);

/* A length-delimited sub-message: its size is counted first when writing. */
static void put_message(out *o, uint32_t field, emit_fn fn, const uint8_t *p, size_t len,
                        int arg) {
    saver *s = o->s;
    out inner = {s, o->mode == MODE_WRITE ? MODE_SIZE : o->mode, 0};
    fn(&inner, p, len, arg);
    if (s->status) return;
    put_tag(o, field, TM_PB_LEN);
    put_varint(o, inner.n);
    if (o->mode != MODE_WRITE) {
        o->n += inner.n;
        return;
    }
    uint64_t before = o->n;
    fn(o, p, len, arg);
    if (!s->status && o->n - before != inner.n)
        fail(s, TM_ERR_RUNTIME, "internal error: a message of %llu bytes was written as %llu",
             (unsigned long long)inner.n, (unsigned long long)(o->n - before));
}

static int read_field(saver *s, tm_pb_reader *r, tm_pb_field *f, int *rc) {
    *rc = tm_pb_next(r, f);
    if (*rc < 0)
        fail(s, TM_ERR_PARSE, "malformed protobuf at byte %zu: %s", r->error_at, r->error);
    return *rc == 1 && !s->status;
}

/* ---- Tensors ------------------------------------------------------------------------- */

typedef struct tensor_fields {
    const uint8_t *name;
    size_t name_len;
    int64_t data_type;
    int64_t dims[TM_MAX_RANK];
    int n_dims;
    int has_raw, external;
    const uint8_t *raw;
    size_t raw_len;
    tm_bytes location, offset;
} tensor_fields;

static int is_data_field(uint32_t number) {
    return (number >= 4 && number <= 7) || (number >= 9 && number <= 11) || number == 13 ||
           number == 14;
}

static int entry_key(const tm_pb_reader *parent, const tm_pb_field *f, tm_bytes *key,
                     tm_bytes *value) {
    tm_pb_reader r;
    tm_pb_sub(parent, f, &r);
    tm_pb_field e;
    int rc;
    key->data = value->data = NULL;
    key->len = value->len = 0;
    while ((rc = tm_pb_next(&r, &e)) == 1) {
        if (e.wire != TM_PB_LEN) continue;
        if (e.number == 1) { key->data = (const char *)e.data; key->len = e.len; }
        if (e.number == 2) { value->data = (const char *)e.data; value->len = e.len; }
    }
    return rc == 0;
}

static int bytes_is(tm_bytes b, const char *s) {
    return b.data && b.len == strlen(s) && memcmp(b.data, s, b.len) == 0;
}

static void scan_tensor(saver *s, const uint8_t *p, size_t len, tensor_fields *t) {
    memset(t, 0, sizeof *t);
    tm_pb_reader r = reader_at(s, p, len);
    tm_pb_field f;
    int rc;
    while (read_field(s, &r, &f, &rc)) {
        if (f.number == 1) {
            tm_pb_iter it;
            uint64_t v;
            if (tm_pb_iter_init(&it, &r, &f, TM_PB_VARINT) < 0) break;
            while (tm_pb_iter_next(&it, &v) == 1)
                if (t->n_dims < TM_MAX_RANK) t->dims[t->n_dims++] = (int64_t)v;
        } else if (f.number == 2 && f.wire == TM_PB_VARINT) {
            t->data_type = (int64_t)(int32_t)(uint32_t)f.value;
        } else if (f.number == 8 && f.wire == TM_PB_LEN) {
            t->name = f.data;
            t->name_len = f.len;
        } else if (f.number == 9 && f.wire == TM_PB_LEN) {
            t->has_raw = 1;
            t->raw = f.data;
            t->raw_len = f.len;
        } else if (f.number == 14 && f.wire == TM_PB_VARINT) {
            t->external = f.value == 1;
        } else if (f.number == 13 && f.wire == TM_PB_LEN) {
            tm_bytes k, v;
            if (!entry_key(&r, &f, &k, &v)) continue;
            if (bytes_is(k, "location")) t->location = v;
            else if (bytes_is(k, "offset")) t->offset = v;
        }
    }
}

/* Bytes a tensor of this dtype and shape takes in a file (sub-byte types packed). */
static uint64_t file_bytes(tm_dtype dt, int rank, const int64_t *dims) {
    int64_t numel = tm_numel(rank, dims);
    if (numel < 0) return 0;
    return ((uint64_t)numel * (uint64_t)tm_dtype_bits(dt) + 7) / 8;
}

static int cmp_name(const char *a, size_t alen, const char *b, size_t blen) {
    int c = memcmp(a, b, alen < blen ? alen : blen);
    return c ? c : (alen > blen) - (alen < blen);
}

static replacement *find_replacement(saver *s, const uint8_t *name, size_t len) {
    int lo = 0, hi = s->n_repl - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        int c = cmp_name((const char *)name, len, s->repl[mid].name, s->repl[mid].name_len);
        if (c == 0) return &s->repl[mid];
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

/* The bytes of an external tensor, in the mapping the loader made of its file. */
static const uint8_t *external_source(saver *s, const tensor_fields *t, uint64_t nbytes) {
    const tm_onnx_model *m = s->m;
    const tm_mapping *map = NULL;
    if (s->cached_loc && s->cached_len == t->location.len &&
        memcmp(s->cached_loc, t->location.data, t->location.len) == 0) {
        map = s->cached_map;
    } else if (m->dir && t->location.data) {
        size_t dl = strlen(m->dir);
        char *joined = malloc(dl + t->location.len + 2);
        if (!joined) {
            fail(s, TM_ERR_NO_MEMORY, "out of memory");
            return NULL;
        }
        memcpy(joined, m->dir, dl);
        joined[dl] = '/';
        memcpy(joined + dl + 1, t->location.data, t->location.len);
        joined[dl + 1 + t->location.len] = '\0';
        char *rp = realpath(joined, NULL);
        free(joined);
        for (int i = 0; rp && i < m->n_maps; i++)
            if (!strcmp(m->maps[i].path, rp)) map = &m->maps[i];
        free(rp);
        s->cached_loc = t->location.data;
        s->cached_len = t->location.len;
        s->cached_map = map;
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < t->offset.len; i++) offset = offset * 10 + (uint64_t)(t->offset.data[i] - '0');
    if (!map || offset > map->size || nbytes > map->size - offset) {
        fail(s, TM_ERR_IO, "the external data of initializer '%.*s' ('%.*s') is no longer "
             "where the model was loaded from", (int)(t->name_len > 200 ? 200 : t->name_len),
             (const char *)t->name, (int)(t->location.len > 200 ? 200 : t->location.len),
             t->location.data);
        return NULL;
    }
    return map->base ? (const uint8_t *)map->base + offset : (const uint8_t *)"";
}

static ext_entry *lookup_entry(saver *s, const uint8_t *key) {
    size_t lo = 0, hi = s->n_ext;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->ext[mid].key < key) lo = mid + 1;
        else hi = mid;
    }
    if (lo < s->n_ext && s->ext[lo].key == key) return &s->ext[lo];
    fail(s, TM_ERR_RUNTIME, "internal error: a tensor missing from the data file's layout");
    return NULL;
}

static ext_entry *add_entry(saver *s, const uint8_t *key, const uint8_t *src,
                            const tm_tensor *tensor, uint64_t nbytes) {
    if (s->n_ext == s->cap_ext) {
        size_t cap = s->cap_ext ? s->cap_ext * 2 : 64;
        ext_entry *grown = realloc(s->ext, cap * sizeof *grown);
        if (!grown) {
            fail(s, TM_ERR_NO_MEMORY, "out of memory");
            return NULL;
        }
        s->ext = grown;
        s->cap_ext = cap;
    }
    if (s->n_ext && s->ext[s->n_ext - 1].key >= key) {
        fail(s, TM_ERR_RUNTIME, "internal error: tensors visited out of file order");
        return NULL;
    }
    uint64_t align = s->o.external_alignment;
    if (nbytes >= PAGE_ALIGN_MIN_BYTES && align < PAGE_SIZE_ALIGN) align = PAGE_SIZE_ALIGN;
    uint64_t offset = (s->data_size + align - 1) / align * align;
    ext_entry *e = &s->ext[s->n_ext++];
    e->key = key;
    e->src = src;
    e->tensor = tensor;
    e->nbytes = nbytes;
    e->offset = offset;
    s->data_size = offset + nbytes;
    return e;
}

static void put_entry(out *o, const char *key, const char *value, size_t value_len) {
    size_t kl = strlen(key);
    uint64_t len = 1 + varint_len(kl) + kl + 1 + varint_len(value_len) + value_len;
    put_tag(o, 13, TM_PB_LEN);
    put_varint(o, len);
    put_bytes_field(o, 1, key, kl);
    put_bytes_field(o, 2, value, value_len);
}

/* Packed file bytes of a replacing tensor (sub-byte types), or its data as it is.
 * *owned is set when the caller must free the result. */
static const uint8_t *tensor_bytes(saver *s, const tm_tensor *t, uint64_t nbytes, void **owned) {
    *owned = NULL;
    if (tm_dtype_bits(t->dtype) >= 8) return t->data;
    uint8_t *packed = malloc(nbytes ? (size_t)nbytes : 1);
    if (!packed) {
        fail(s, TM_ERR_NO_MEMORY, "out of memory packing a %s tensor", tm_dtype_name(t->dtype));
        return NULL;
    }
    tm_pack_subbyte(t->data, packed, (size_t)tm_numel(t->rank, t->dims), t->dtype);
    *owned = packed;
    return packed;
}

static void emit_tensor(out *o, const uint8_t *p, size_t len, int role) {
    saver *s = o->s;
    tensor_fields t;
    scan_tensor(s, p, len, &t);
    if (s->status) return;
    replacement *rp = role == T_MAIN_INIT && t.name ? find_replacement(s, t.name, t.name_len) : NULL;
    if (rp) rp->found = 1;
    if (t.external) s->saw_external = 1;
    uint64_t nbytes = rp ? file_bytes(rp->tensor->dtype, rp->tensor->rank, rp->tensor->dims)
                    : t.external ? file_bytes((tm_dtype)t.data_type, t.n_dims, t.dims)
                                 : t.raw_len;
    int external = 0;
    if (s->place == PLACE_KEEP) external = t.external;
    else if (s->place == PLACE_MOVE)
        external = t.external || (role == T_MAIN_INIT && (rp || t.has_raw) &&
                                  nbytes >= s->o.external_min_bytes);
    if (!rp && !t.external && !external) {
        put(o, p, len);
        return;
    }
    /* Re-encoded: every field but the data ones as it was, then the data. */
    tm_pb_reader r = reader_at(s, p, len);
    tm_pb_field f;
    int rc;
    while (read_field(s, &r, &f, &rc)) {
        if (!is_data_field(f.number)) {
            put_verbatim(o, &r, &f);
        } else if (f.number == 13 && external && t.external && !rp) {
            /* keys other than the three we rewrite (a checksum) still hold */
            tm_bytes k, v;
            if (entry_key(&r, &f, &k, &v) && !bytes_is(k, "location") &&
                !bytes_is(k, "offset") && !bytes_is(k, "length"))
                put_verbatim(o, &r, &f);
        }
    }
    if (s->status) return;
    if (external) {
        ext_entry *e;
        if (o->mode == MODE_PLAN) {
            const uint8_t *src = rp ? NULL : t.external ? external_source(s, &t, nbytes) : t.raw;
            if (s->status) return;
            e = add_entry(s, p, src, rp ? rp->tensor : NULL, nbytes);
        } else {
            e = lookup_entry(s, p);
        }
        if (!e) return;
        char num[32];
        put_entry(o, "location", s->location, strlen(s->location));
        int nl = snprintf(num, sizeof num, "%llu", (unsigned long long)e->offset);
        put_entry(o, "offset", num, (size_t)nl);
        nl = snprintf(num, sizeof num, "%llu", (unsigned long long)e->nbytes);
        put_entry(o, "length", num, (size_t)nl);
        put_tag(o, 14, TM_PB_VARINT);
        put_varint(o, 1);
        return;
    }
    if (o->mode != MODE_WRITE) {
        put_tag(o, 9, TM_PB_LEN);
        put_varint(o, nbytes);
        o->n += nbytes;
        return;
    }
    void *owned = NULL;
    const uint8_t *bytes = rp ? tensor_bytes(s, rp->tensor, nbytes, &owned)
                              : external_source(s, &t, nbytes);
    if (bytes) put_bytes_field(o, 9, bytes, nbytes);
    free(owned);
}

/* ---- Messages that contain tensors --------------------------------------------------- */

static void emit_graph(out *o, const uint8_t *p, size_t len, int main_graph);

static void emit_sparse(out *o, const uint8_t *p, size_t len, int main_graph) {
    saver *s = o->s;
    tm_pb_reader r = reader_at(s, p, len);
    tm_pb_field f;
    int rc;
    while (read_field(s, &r, &f, &rc)) {
        if ((f.number == 1 || f.number == 2) && f.wire == TM_PB_LEN) {
            if (main_graph && f.number == 1) {
                tensor_fields t;
                scan_tensor(s, f.data, f.len, &t);
                replacement *rp = t.name ? find_replacement(s, t.name, t.name_len) : NULL;
                if (rp) {
                    fail_at(s, TM_ERR_UNSUPPORTED, rp->name, "initializer '%s' is a sparse "
                            "initializer; replacing one is not supported", rp->name);
                    return;
                }
            }
            put_message(o, f.number, emit_tensor, f.data, f.len, T_OTHER);
        } else {
            put_verbatim(o, &r, &f);
        }
    }
}

static void emit_attribute(out *o, const uint8_t *p, size_t len, int unused) {
    saver *s = o->s;
    tm_pb_reader r = reader_at(s, p, len);
    tm_pb_field f;
    int rc;
    while (read_field(s, &r, &f, &rc)) {
        if (f.wire != TM_PB_LEN) {
            put_verbatim(o, &r, &f);
            continue;
        }
        switch (f.number) {
        case 5: case 10: put_message(o, f.number, emit_tensor, f.data, f.len, T_OTHER); break;
        case 6: case 11: put_message(o, f.number, emit_graph, f.data, f.len, 0); break;
        case 22: case 23: put_message(o, f.number, emit_sparse, f.data, f.len, 0); break;
        default: put_verbatim(o, &r, &f); break;
        }
    }
}

/* A message copied field by field, its LEN field `number` written by `sub`. */
static void emit_rewriting(out *o, const uint8_t *p, size_t len, uint32_t number, emit_fn sub) {
    saver *s = o->s;
    tm_pb_reader r = reader_at(s, p, len);
    tm_pb_field f;
    int rc;
    while (read_field(s, &r, &f, &rc)) {
        if (f.number == number && f.wire == TM_PB_LEN)
            put_message(o, number, sub, f.data, f.len, 0);
        else
            put_verbatim(o, &r, &f);
    }
}

/* NodeProto (field 5: attributes) and FunctionProto (field 7: nodes) */
static void emit_node(out *o, const uint8_t *p, size_t len, int unused) {
    emit_rewriting(o, p, len, 5, emit_attribute);
}

static void emit_function(out *o, const uint8_t *p, size_t len, int unused) {
    emit_rewriting(o, p, len, 7, emit_node);
}

static void emit_graph(out *o, const uint8_t *p, size_t len, int main_graph) {
    saver *s = o->s;
    tm_pb_reader r = reader_at(s, p, len);
    tm_pb_field f;
    int rc;
    while (read_field(s, &r, &f, &rc)) {
        if (f.wire != TM_PB_LEN) {
            put_verbatim(o, &r, &f);
            continue;
        }
        switch (f.number) {
        case 1: put_message(o, 1, emit_node, f.data, f.len, 0); break;
        case 5: put_message(o, 5, emit_tensor, f.data, f.len, main_graph ? T_MAIN_INIT : T_OTHER); break;
        case 15: put_message(o, 15, emit_sparse, f.data, f.len, main_graph); break;
        default: put_verbatim(o, &r, &f); break;
        }
    }
}

/* ModelProto. training_info (20) is copied as it is: its graphs are not run here. */
static void emit_model(out *o) {
    saver *s = o->s;
    tm_pb_reader r = reader_at(s, s->m->bytes, s->m->n_bytes);
    tm_pb_field f;
    int rc;
    while (read_field(s, &r, &f, &rc)) {
        if (f.number == 7 && f.wire == TM_PB_LEN)
            put_message(o, 7, emit_graph, f.data, f.len, 1);
        else if (f.number == 25 && f.wire == TM_PB_LEN)
            put_message(o, 25, emit_function, f.data, f.len, 0);
        else
            put_verbatim(o, &r, &f);
    }
}

/* ---- Files --------------------------------------------------------------------------- */

/* Unique per process and call: two threads may save at once. */
static char *temp_name(const char *path) {
    static _Atomic unsigned long counter;
    size_t n = strlen(path) + 64;
    char *t = malloc(n);
    if (t) snprintf(t, n, "%s.tmp.%ld.%lu", path, (long)getpid(), counter++);
    return t;
}

static int close_file(FILE *f) {
    int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
    return fclose(f) != 0 || bad;
}

static void write_data_file(saver *s, const char *tmp) {
    s->f = fopen(tmp, "wb");
    if (!s->f) {
        fail(s, TM_ERR_IO, "cannot create '%s': %s", tmp, strerror(errno));
        return;
    }
    setvbuf(s->f, NULL, _IOFBF, 1 << 20);
    out o = {s, MODE_WRITE, 0};
    static const uint8_t zeros[PAGE_SIZE_ALIGN];
    for (size_t i = 0; i < s->n_ext && !s->status; i++) {
        const ext_entry *e = &s->ext[i];
        while (o.n < e->offset) {
            uint64_t gap = e->offset - o.n;
            put(&o, zeros, gap < sizeof zeros ? (size_t)gap : sizeof zeros);
        }
        void *owned = NULL;
        const uint8_t *bytes = e->tensor ? tensor_bytes(s, e->tensor, e->nbytes, &owned) : e->src;
        if (bytes) put(&o, bytes, (size_t)e->nbytes);
        free(owned);
    }
    if (close_file(s->f) && !s->status) fail(s, TM_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
    s->f = NULL;
}

static void write_model_file(saver *s, const char *tmp, uint64_t expect) {
    s->f = fopen(tmp, "wb");
    if (!s->f) {
        fail(s, TM_ERR_IO, "cannot create '%s': %s", tmp, strerror(errno));
        return;
    }
    setvbuf(s->f, NULL, _IOFBF, 1 << 20);
    out o = {s, MODE_WRITE, 0};
    emit_model(&o);
    if (!s->status && o.n != expect)
        fail(s, TM_ERR_RUNTIME, "internal error: the model was planned as %llu bytes and "
             "written as %llu", (unsigned long long)expect, (unsigned long long)o.n);
    if (close_file(s->f) && !s->status) fail(s, TM_ERR_IO, "cannot write '%s': %s", tmp, strerror(errno));
    s->f = NULL;
}

/* ---- Checks and the entry point ------------------------------------------------------ */

static const tm_initializer *main_initializer(const tm_onnx_model *m, const char *name) {
    for (int i = 0; i < m->graph->n_inits; i++)
        if (!strcmp(m->graph->inits[i].name, name)) return &m->graph->inits[i];
    return NULL;
}

static void shape_text(char *buf, size_t cap, tm_dtype dt, int rank, const int64_t *dims) {
    size_t n = (size_t)snprintf(buf, cap, "%s [", tm_dtype_name(dt));
    for (int i = 0; i < rank && n < cap - 24; i++)
        n += (size_t)snprintf(buf + n, cap - n, "%s%lld", i ? "," : "", (long long)dims[i]);
    snprintf(buf + n, cap - n, "]");
}

static int cmp_replacement(const void *a, const void *b) {
    const replacement *x = a, *y = b;
    return cmp_name(x->name, x->name_len, y->name, y->name_len);
}

/* A half-precision initializer may be given a float32 value: a parameter trained under
 * compute_type f32 is stored in float32, and the file keeps the initializer's own dtype.
 * Rounded to nearest even, as the optimizer rounds its master copies. */
static const tm_tensor *rounded_to(saver *s, int i, const tm_tensor *t, tm_dtype dt) {
    tm_tensor *h = tm_tensor_alloc(dt, t->rank, t->dims, NULL);
    if (!h) {
        fail(s, TM_ERR_NO_MEMORY, "out of memory rounding '%s' to %s", s->repl[i].name,
             tm_dtype_name(dt));
        return NULL;
    }
    const float *x = t->data;
    uint16_t *y = h->data;
    int64_t n = tm_numel(t->rank, t->dims);
    for (int64_t k = 0; k < n; k++) y[k] = dt == TM_FLOAT16 ? tm_f32_to_f16(x[k]) : tm_f32_to_bf16(x[k]);
    s->rounded[i] = h;
    return h;
}

static tm_status check_replacements(saver *s, int n, const char *const *names,
                                    const tm_tensor *const *tensors) {
    for (int i = 0; i < n; i++) {
        const char *name = names[i];
        const tm_tensor *t = tensors[i];
        if (!name || !t)
            return fail(s, TM_ERR_INVALID_ARGUMENT, "name and tensor #%d must not be NULL", i);
        const tm_initializer *in = main_initializer(s->m, name);
        if (!in)
            return fail_at(s, TM_ERR_NOT_FOUND, name,
                           "there is no initializer '%s' in the main graph", name);
        const tm_tensor *old = in->tensor;
        char want[200], have[200];
        shape_text(want, sizeof want, old->dtype, old->rank, old->dims);
        shape_text(have, sizeof have, t->dtype, t->rank, t->dims);
        if (old->dtype == TM_STRING)
            return fail_at(s, TM_ERR_UNSUPPORTED, name, "initializer '%s' holds strings; "
                           "replacing string initializers is not supported", name);
        int to_half = t->dtype == TM_FLOAT && (old->dtype == TM_FLOAT16 || old->dtype == TM_BFLOAT16);
        if ((t->dtype != old->dtype && !to_half) || !tm_same_shape(t, old))
            return fail_at(s, t->dtype != old->dtype && !to_half ? TM_ERR_DTYPE : TM_ERR_SHAPE,
                           name, "initializer '%s' is %s; its new value is %s", name, want, have);
        if (t->nbytes && !t->data)
            return fail(s, TM_ERR_INVALID_ARGUMENT, "the new value of '%s' has no data", name);
        s->repl[i].name = name;
        s->repl[i].name_len = strlen(name);
        s->repl[i].tensor = to_half ? rounded_to(s, i, t, old->dtype) : t;
        if (!s->repl[i].tensor) return s->status;
    }
    qsort(s->repl, (size_t)n, sizeof *s->repl, cmp_replacement);
    for (int i = 1; i < n; i++)
        if (!cmp_replacement(&s->repl[i - 1], &s->repl[i]))
            return fail_at(s, TM_ERR_INVALID_ARGUMENT, s->repl[i].name,
                           "initializer '%s' is given twice", s->repl[i].name);
    return TM_OK;
}

static tm_status check_options(saver *s, const char *path, char **data_name) {
    const tm_save_options *o = &s->o;
    if (o->external_data != TM_EXTERNAL_AUTO && o->external_data != TM_EXTERNAL_NEVER &&
        o->external_data != TM_EXTERNAL_ALWAYS)
        return fail(s, TM_ERR_INVALID_ARGUMENT, "unknown external_data mode %d", (int)o->external_data);
    uint64_t a = o->external_alignment;
    if (a == 0 || (a & (a - 1)) || a > ((uint64_t)1 << 30))
        return fail(s, TM_ERR_INVALID_ARGUMENT, "external_alignment %llu is not a power of two "
                    "up to 2^30", (unsigned long long)a);
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    if (!*base) return fail(s, TM_ERR_INVALID_ARGUMENT, "'%s' names a folder, not a file", path);
    const char *name = o->external_file;
    char *made = NULL;
    if (!name) {
        size_t n = strlen(base) + 6;
        if (!(made = malloc(n))) return fail(s, TM_ERR_NO_MEMORY, "out of memory");
        snprintf(made, n, "%s_data", base);
        name = made;
    }
    if (!*name || strchr(name, '/') || strchr(name, '\\') || !strcmp(name, ".") ||
        !strcmp(name, "..") || !strcmp(name, base)) {
        free(made);
        return fail(s, TM_ERR_INVALID_ARGUMENT, "external_file '%s' must be a file name in the "
                    "model's folder, other than the model's own", o->external_file);
    }
    if (!made && !(made = strdup(name))) return fail(s, TM_ERR_NO_MEMORY, "out of memory");
    *data_name = made;
    return TM_OK;
}

tm_status tm__onnx_save(const tm_onnx_model *m, const char *path, int n,
                        const char *const *names, const tm_tensor *const *tensors,
                        const tm_save_options *opts, tm_error *err) {
    if (!m || !path || n < 0 || (n > 0 && (!names || !tensors)))
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT,
                        "tm_model_save: model, path and the n names and tensors must be given");
    if (!m->bytes || !m->graph)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_model_save: the model has no source bytes");
    saver s;
    memset(&s, 0, sizeof s);
    s.m = m;
    s.err = err;
    tm_save_options_default(&s.o);
    if (opts) memcpy(&s.o, opts, opts->size < sizeof s.o ? opts->size : sizeof s.o);
    s.o.size = sizeof s.o;
    char *data_name = NULL, *data_path = NULL, *tmp_model = NULL, *tmp_data = NULL;
    s.repl = calloc((size_t)n + 1, sizeof *s.repl);
    s.rounded = calloc((size_t)n + 1, sizeof *s.rounded);
    if (!s.repl || !s.rounded) {
        free(s.repl);
        free(s.rounded);
        return tm__fail(err, TM_ERR_NO_MEMORY, "saving the model: out of memory");
    }
    s.n_repl = n;
    if (check_options(&s, path, &data_name) || check_replacements(&s, n, names, tensors))
        goto done;
    s.location = data_name;

    /* Pass 1: the size with every tensor inline, and whether the source had external data. */
    s.place = PLACE_INLINE;
    out o = {&s, MODE_SIZE, 0};
    emit_model(&o);
    if (s.status) goto done;
    uint64_t inline_size = o.n;
    for (int i = 0; i < n; i++)
        if (!s.repl[i].found) {
            fail_at(&s, TM_ERR_NOT_FOUND, s.repl[i].name, "initializer '%s' is not in the "
                    "main graph's initializer list", s.repl[i].name);
            goto done;
        }
    if (s.o.external_data == TM_EXTERNAL_ALWAYS) s.place = PLACE_MOVE;
    else if (s.o.external_data == TM_EXTERNAL_AUTO)
        s.place = inline_size > s.o.external_threshold ? PLACE_MOVE : s.saw_external ? PLACE_KEEP
                                                                                       : PLACE_INLINE;
    uint64_t size = inline_size;
    if (s.place != PLACE_INLINE) {
        out plan = {&s, MODE_PLAN, 0};
        emit_model(&plan);
        if (s.status) goto done;
        size = plan.n;
    }
    if (size > PROTOBUF_LIMIT) {
        fail(&s, TM_ERR_INVALID_ARGUMENT, "the .onnx would be %llu bytes, more than protobuf "
             "reads (2 GiB)%s", (unsigned long long)size,
             s.o.external_data == TM_EXTERNAL_NEVER ? ": save with external data" : "");
        goto done;
    }
    tmp_model = temp_name(path);
    const char *slash = strrchr(path, '/');
    size_t dir_len = slash ? (size_t)(slash - path) + 1 : 0;
    data_path = malloc(dir_len + strlen(data_name) + 1);
    if (!tmp_model || !data_path) {
        fail(&s, TM_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    memcpy(data_path, path, dir_len);
    strcpy(data_path + dir_len, data_name);
    if (s.n_ext) {
        if (!(tmp_data = temp_name(data_path))) {
            fail(&s, TM_ERR_NO_MEMORY, "out of memory");
            goto done;
        }
        write_data_file(&s, tmp_data);
    }
    if (!s.status) write_model_file(&s, tmp_model, size);
    /* The data first: a model file never names data that is not there yet. */
    if (!s.status && tmp_data && rename(tmp_data, data_path) != 0)
        fail(&s, TM_ERR_IO, "cannot rename '%s' to '%s': %s", tmp_data, data_path, strerror(errno));
    if (!s.status && rename(tmp_model, path) != 0)
        fail(&s, TM_ERR_IO, "cannot rename '%s' to '%s': %s", tmp_model, path, strerror(errno));
    if (s.status) {
        if (tmp_data) unlink(tmp_data);
        unlink(tmp_model);
    }
done:
    free(tmp_model);
    free(tmp_data);
    free(data_path);
    free(data_name);
    for (int i = 0; i < n; i++) tm_tensor_free(s.rounded[i]);
    free(s.rounded);
    free(s.repl);
    free(s.ext);
    return s.status;
}
