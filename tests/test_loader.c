/* Tests of the protobuf reader and the ONNX loader (src/onnx/pb.c, src/onnx/model.c):
 * hand-built models for every field we read, hostile bytes (prefixes, corruption,
 * escaping external paths), and the real models and backend cases under ../shared.
 * Not a test of lowering or execution. Prints "N passed, N failed"; exits non-zero on failure. */
#define _XOPEN_SOURCE 700

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/core/status.h"
#include "../src/core/tensor.h"
#include "../src/onnx/model.h"
#include "../src/onnx/pb.h"

#include "check.h"

static int verbose; /* TM_TEST_VERBOSE=1 prints the error messages of the expected failures */

/* ---- A protobuf writer for hand-built messages ------------------------------------- */

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

static void put_bytes(buf *b, const void *data, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            fprintf(stderr, "out of memory\n");
            exit(2);
        }
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void put_varint(buf *b, uint64_t v) {
    uint8_t tmp[10];
    int n = 0;
    do {
        tmp[n] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v)
            tmp[n] |= 0x80;
        n++;
    } while (v);
    put_bytes(b, tmp, (size_t)n);
}

static void put_tag(buf *b, uint32_t field, int wire) { put_varint(b, ((uint64_t)field << 3) | (uint64_t)wire); }
static void put_vint(buf *b, uint32_t field, uint64_t v) { put_tag(b, field, 0); put_varint(b, v); }
static void put_len(buf *b, uint32_t field, const void *data, size_t n) {
    put_tag(b, field, 2);
    put_varint(b, n);
    put_bytes(b, data, n);
}
static void put_str(buf *b, uint32_t field, const char *s) { put_len(b, field, s, strlen(s)); }
static void put_f32(buf *b, uint32_t field, float f) {
    uint8_t tmp[4];
    memcpy(tmp, &f, 4);
    put_tag(b, field, 5);
    put_bytes(b, tmp, 4);
}
static void put_f64(buf *b, uint32_t field, double d) {
    uint8_t tmp[8];
    memcpy(tmp, &d, 8);
    put_tag(b, field, 1);
    put_bytes(b, tmp, 8);
}
/* Appends child as a length-delimited field and frees it. */
static void put_sub(buf *b, uint32_t field, buf child) {
    put_len(b, field, child.p, child.n);
    free(child.p);
}
static void put_packed_varints(buf *b, uint32_t field, const int64_t *v, int n) {
    buf run = {0};
    for (int i = 0; i < n; i++)
        put_varint(&run, (uint64_t)v[i]);
    put_sub(b, field, run);
}

static buf tensor_raw(const char *name, int dt, int rank, const int64_t *dims, const void *data,
                      size_t n) {
    buf t = {0};
    for (int i = 0; i < rank; i++)
        put_vint(&t, 1, (uint64_t)dims[i]);
    put_vint(&t, 2, (uint64_t)dt);
    if (name)
        put_str(&t, 8, name);
    put_len(&t, 9, data, n);
    return t;
}

static buf entry(const char *key, const char *value) {
    buf e = {0};
    put_str(&e, 1, key);
    put_str(&e, 2, value);
    return e;
}

static buf tensor_external(const char *name, int dt, int rank, const int64_t *dims,
                           const char *location, const char *offset, const char *length) {
    buf t = {0};
    for (int i = 0; i < rank; i++)
        put_vint(&t, 1, (uint64_t)dims[i]);
    put_vint(&t, 2, (uint64_t)dt);
    put_str(&t, 8, name);
    put_sub(&t, 13, entry("location", location));
    if (offset)
        put_sub(&t, 13, entry("offset", offset));
    if (length)
        put_sub(&t, 13, entry("length", length));
    put_vint(&t, 14, 1);
    return t;
}

/* TypeProto of a tensor; params[i] non-NULL makes dim i symbolic. rank < 0: no shape. */
static buf type_tensor(int elem, int rank, const int64_t *dims, const char *const *params) {
    buf tt = {0};
    put_vint(&tt, 1, (uint64_t)elem);
    if (rank >= 0) {
        buf shape = {0};
        for (int i = 0; i < rank; i++) {
            buf d = {0};
            if (params && params[i])
                put_str(&d, 2, params[i]);
            else
                put_vint(&d, 1, (uint64_t)dims[i]);
            put_sub(&shape, 1, d);
        }
        put_sub(&tt, 2, shape);
    }
    buf t = {0};
    put_sub(&t, 1, tt);
    return t;
}

static buf type_wrap(uint32_t field, buf inner) {
    buf w = {0};
    put_sub(&w, 1, inner);
    buf t = {0};
    put_sub(&t, field, w);
    return t;
}

static buf value_info(const char *name, buf type) {
    buf v = {0};
    put_str(&v, 1, name);
    put_sub(&v, 2, type);
    return v;
}

static buf node(const char *op, const char *name, const char *domain, int nin,
                const char *const *ins, int nout, const char *const *outs) {
    buf n = {0};
    for (int i = 0; i < nin; i++)
        put_str(&n, 1, ins[i]);
    for (int i = 0; i < nout; i++)
        put_str(&n, 2, outs[i]);
    if (name)
        put_str(&n, 3, name);
    if (op)
        put_str(&n, 4, op);
    if (domain)
        put_str(&n, 7, domain);
    return n;
}

static buf attr_int(const char *name, int64_t v) {
    buf a = {0};
    put_str(&a, 1, name);
    put_vint(&a, 20, 2);
    put_vint(&a, 3, (uint64_t)v);
    return a;
}

/* A graph with one Identity node x -> y. */
static buf tiny_graph(const char *name) {
    buf g = {0};
    const char *in[] = {"x"}, *out[] = {"y"};
    put_sub(&g, 1, node("Identity", "id", NULL, 1, in, 1, out));
    put_str(&g, 2, name);
    int64_t d[] = {2};
    put_sub(&g, 11, value_info("x", type_tensor(1, 1, d, NULL)));
    put_sub(&g, 12, value_info("y", type_tensor(1, 1, d, NULL)));
    return g;
}

static buf model_of(buf graph) {
    buf m = {0};
    put_vint(&m, 1, 9);
    buf op = {0};
    put_str(&op, 1, "");
    put_vint(&op, 2, 17);
    put_sub(&m, 8, op);
    put_sub(&m, 7, graph);
    return m;
}

/* A model whose graph has the given initializer (and an Identity node). */
static buf model_with_init(buf tensor) {
    buf g = tiny_graph("g");
    put_sub(&g, 5, tensor);
    return model_of(g);
}

/* ---- Helpers -------------------------------------------------------------------------- */

/* Loads from an exact-size copy, so that ASan sees any read past the end. */
static int load_copy(const uint8_t *data, size_t n, const char *base_dir, tm_onnx_model **m,
                     tm_error *err) {
    uint8_t *copy = malloc(n ? n : 1);
    if (n)
        memcpy(copy, data, n);
    int rc = tm_onnx_load_buffer(copy, n, base_dir, m, err);
    /* the model references the buffer in place: keep it alive with the model */
    if (rc == TM_OK) {
        tm_onnx_model_free(*m);
        *m = NULL;
    }
    free(copy);
    return rc;
}

/* Expects loading b to fail with code and a message containing needle. */
static void expect_fail(const char *label, const buf *b, const char *base_dir, tm_status code,
                        const char *needle) {
    tm_onnx_model *sentinel = (tm_onnx_model *)(uintptr_t)0x1, *m = sentinel;
    tm_error err;
    memset(&err, 0, sizeof err);
    uint8_t *copy = malloc(b->n ? b->n : 1);
    memcpy(copy, b->p, b->n);
    int rc = tm_onnx_load_buffer(copy, b->n, base_dir, &m, &err);
    if (verbose)
        printf("  [%s] %s\n", label, err.message);
    CHECK(rc == (int)code, "%s: expected status %d, got %d (%s)", label, (int)code, rc,
          err.message);
    CHECK(!needle || strstr(err.message, needle), "%s: message '%s' lacks '%s'", label,
          err.message, needle ? needle : "");
    CHECK(rc == TM_OK || m == sentinel, "%s: out changed on error", label);
    if (rc == TM_OK && m != sentinel)
        tm_onnx_model_free(m);
    free(copy);
}

static void expect_file_fail(const char *label, const char *path, tm_status code,
                             const char *needle) {
    tm_onnx_model *m = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    int rc = tm_onnx_load_file(path, &m, &err);
    if (verbose)
        printf("  [%s] %s\n", label, err.message);
    CHECK(rc == (int)code, "%s: expected status %d, got %d (%s)", label, (int)code, rc,
          err.message);
    CHECK(!needle || strstr(err.message, needle), "%s: message '%s' lacks '%s'", label,
          err.message, needle ? needle : "");
    if (rc == TM_OK)
        tm_onnx_model_free(m);
}

static uint8_t *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(len > 0 ? (size_t)len : 1);
    if (p && len > 0 && fread(p, 1, (size_t)len, f) != (size_t)len) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *n = len > 0 ? (size_t)len : 0;
    return p;
}

static int write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static int file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static const tm_initializer *find_init(const tm_graph *g, const char *name) {
    for (int i = 0; i < g->n_inits; i++)
        if (strcmp(g->inits[i].name, name) == 0)
            return &g->inits[i];
    return NULL;
}

static const tm_attr *find_attr(const tm_node *n, const char *name) {
    for (int i = 0; i < n->n_attrs; i++)
        if (strcmp(n->attrs[i].name, name) == 0)
            return &n->attrs[i];
    return NULL;
}

static int inside_mapping(const tm_onnx_model *m, const void *p, int first) {
    for (int i = first; i < m->n_maps; i++) {
        const char *base = m->maps[i].base;
        if (base && (const char *)p >= base && (const char *)p < base + m->maps[i].size)
            return 1;
    }
    return 0;
}

/* Element i of a float tensor; in-place data may be misaligned, so read it bytewise. */
static float f32_at(const tm_tensor *t, size_t i) {
    float v;
    memcpy(&v, (const char *)t->data + i * sizeof v, sizeof v);
    return v;
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t rng(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* ---- The pb reader on its own ----------------------------------------------------------- */

static void test_pb_reader(void) {
    tm_pb_reader r;
    tm_pb_field f;
    /* field 1 varint 150, field 2 "hi", field 3 fixed32, field 4 fixed64 */
    const uint8_t ok[] = {0x08, 0x96, 0x01, 0x12, 0x02, 'h', 'i', 0x1d, 1, 0, 0, 0,
                          0x21, 2, 0, 0, 0, 0, 0, 0, 0};
    tm_pb_init(&r, ok, sizeof ok);
    CHECK(tm_pb_next(&r, &f) == 1 && f.number == 1 && f.wire == TM_PB_VARINT && f.value == 150,
          "varint field");
    CHECK(tm_pb_next(&r, &f) == 1 && f.number == 2 && f.len == 2 && f.data[0] == 'h',
          "len field");
    CHECK(tm_pb_next(&r, &f) == 1 && f.number == 3 && f.value == 1, "fixed32 field");
    CHECK(tm_pb_next(&r, &f) == 1 && f.number == 4 && f.value == 2, "fixed64 field");
    CHECK(tm_pb_next(&r, &f) == 0, "end of message");

    /* a 10-byte varint of -1 is valid; 11 bytes is overlong; a 10th byte > 1 overflows */
    const uint8_t neg[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    tm_pb_init(&r, neg, sizeof neg);
    CHECK(tm_pb_next(&r, &f) == 1 && f.value == UINT64_MAX, "10-byte varint");
    const uint8_t over[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x81, 0x00};
    tm_pb_init(&r, over, sizeof over);
    CHECK(tm_pb_next(&r, &f) == -1 && r.error && strstr(r.error, "overlong"), "11-byte varint");
    const uint8_t over2[] = {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
    tm_pb_init(&r, over2, sizeof over2);
    CHECK(tm_pb_next(&r, &f) == -1, "varint overflowing 64 bits");
    CHECK(tm_pb_next(&r, &f) == 0, "reader stays at the end after an error");

    const uint8_t trunc[] = {0x12, 0x05, 'a', 'b'};
    tm_pb_init(&r, trunc, sizeof trunc);
    CHECK(tm_pb_next(&r, &f) == -1 && r.error_at == 1 && r.error_field == 2,
          "length past the end (at %zu)", r.error_at);
    const uint8_t wire6[] = {0x0e, 0x00};
    tm_pb_init(&r, wire6, sizeof wire6);
    CHECK(tm_pb_next(&r, &f) == -1, "wire type 6");
    const uint8_t wire7[] = {0x0f};
    tm_pb_init(&r, wire7, sizeof wire7);
    CHECK(tm_pb_next(&r, &f) == -1, "wire type 7");
    const uint8_t field0[] = {0x00, 0x01};
    tm_pb_init(&r, field0, sizeof field0);
    CHECK(tm_pb_next(&r, &f) == -1, "field number 0");
    const uint8_t egroup[] = {0x0c};
    tm_pb_init(&r, egroup, sizeof egroup);
    CHECK(tm_pb_next(&r, &f) == -1, "end-group at top level");
    const uint8_t fixed_trunc[] = {0x1d, 1, 0};
    tm_pb_init(&r, fixed_trunc, sizeof fixed_trunc);
    CHECK(tm_pb_next(&r, &f) == -1, "truncated fixed32");

    /* groups: field 5 group { field 1 varint, field 6 group { } } then field 2 varint */
    const uint8_t grp[] = {0x2b, 0x08, 0x01, 0x33, 0x34, 0x2c, 0x10, 0x07};
    tm_pb_init(&r, grp, sizeof grp);
    CHECK(tm_pb_next(&r, &f) == 1 && f.wire == TM_PB_SGROUP && f.len == 4, "nested groups skipped");
    CHECK(tm_pb_next(&r, &f) == 1 && f.number == 2 && f.value == 7, "field after group");
    const uint8_t bad_grp[] = {0x2b, 0x08, 0x01, 0x34};
    tm_pb_init(&r, bad_grp, sizeof bad_grp);
    CHECK(tm_pb_next(&r, &f) == -1, "mismatched end-group");
    const uint8_t open_grp[] = {0x2b, 0x08, 0x01};
    tm_pb_init(&r, open_grp, sizeof open_grp);
    CHECK(tm_pb_next(&r, &f) == -1, "unterminated group");
    buf deep = {0};
    for (int i = 0; i < 200; i++)
        put_tag(&deep, 5, 3);
    for (int i = 0; i < 200; i++)
        put_tag(&deep, 5, 4);
    tm_pb_init(&r, deep.p, deep.n);
    CHECK(tm_pb_next(&r, &f) == -1 && strstr(r.error, "deep"), "groups nested 200 deep");
    free(deep.p);

    /* packed and unpacked repeated */
    buf rep = {0};
    int64_t vals[] = {1, -2, 300};
    put_packed_varints(&rep, 1, vals, 3);
    put_vint(&rep, 1, 5);
    tm_pb_init(&r, rep.p, rep.n);
    uint64_t got[8];
    int n = 0;
    while (tm_pb_next(&r, &f) == 1) {
        tm_pb_iter it;
        uint64_t v;
        size_t count = 0;
        const char *e;
        size_t at;
        CHECK(tm_pb_iter_init(&it, &r, &f, TM_PB_VARINT) == 0, "iter init");
        CHECK(tm_pb_iter_count(&it, &count, &e, &at) == 0 && count == (n == 0 ? 3u : 1u),
              "iter count %zu", count);
        while (n < 8 && tm_pb_iter_next(&it, &v) == 1)
            got[n++] = v;
    }
    CHECK(n == 4 && got[0] == 1 && (int64_t)got[1] == -2 && got[2] == 300 && got[3] == 5,
          "packed + unpacked varints");
    free(rep.p);
    const uint8_t bad_packed[] = {0x0a, 0x02, 0x80, 0x80};
    tm_pb_init(&r, bad_packed, sizeof bad_packed);
    CHECK(tm_pb_next(&r, &f) == 1, "packed run read");
    {
        tm_pb_iter it;
        uint64_t v;
        tm_pb_iter_init(&it, &r, &f, TM_PB_VARINT);
        CHECK(tm_pb_iter_next(&it, &v) == -1, "truncated varint in a packed run");
    }
    const uint8_t bad_fixed[] = {0x0a, 0x03, 0, 0, 0};
    tm_pb_init(&r, bad_fixed, sizeof bad_fixed);
    tm_pb_next(&r, &f);
    {
        tm_pb_iter it;
        CHECK(tm_pb_iter_init(&it, &r, &f, TM_PB_I32) == -1, "packed fixed32 of 3 bytes");
    }
    tm_pb_init(&r, NULL, 0);
    CHECK(tm_pb_next(&r, &f) == 0, "empty buffer");
}

/* ---- A hand-built model with every feature ------------------------------------------------ */

static buf feature_model(void) {
    buf g = {0};
    const char *add_in[] = {"x", "w"}, *add_out[] = {"y"};
    buf add = node("Add", "add0", "ai.onnx", 2, add_in, 1, add_out);
    {
        buf a = {0}; /* float, type given */
        put_str(&a, 1, "alpha");
        put_vint(&a, 20, 1);
        put_f32(&a, 2, 0.5f);
        put_sub(&add, 5, a);
    }
    put_sub(&add, 5, attr_int("axis", -3));
    {
        buf a = {0}; /* string, no type field: IR v1 inference */
        put_str(&a, 1, "mode");
        put_str(&a, 4, "hello");
        put_sub(&add, 5, a);
    }
    {
        buf a = {0}; /* ints, packed */
        put_str(&a, 1, "pads");
        put_vint(&a, 20, 7);
        int64_t v[] = {1, -2, 3};
        put_packed_varints(&a, 8, v, 3);
        put_sub(&add, 5, a);
    }
    {
        buf a = {0}; /* floats, unpacked */
        put_str(&a, 1, "scales");
        put_vint(&a, 20, 6);
        put_f32(&a, 7, 1.5f);
        put_f32(&a, 7, -2.0f);
        put_sub(&add, 5, a);
    }
    {
        buf a = {0};
        put_str(&a, 1, "names");
        put_vint(&a, 20, 8);
        put_str(&a, 9, "a");
        put_len(&a, 9, "b\0c", 3);
        put_sub(&add, 5, a);
    }
    {
        buf a = {0}; /* tensor, typed int64_data */
        put_str(&a, 1, "value");
        put_vint(&a, 20, 4);
        buf t = {0};
        put_vint(&t, 1, 2);
        put_vint(&t, 2, 7);
        int64_t v[] = {-5, 1LL << 40};
        put_packed_varints(&t, 7, v, 2);
        put_sub(&a, 5, t);
        put_sub(&add, 5, a);
    }
    {
        buf a = {0}; /* graph */
        put_str(&a, 1, "body");
        put_vint(&a, 20, 5);
        put_sub(&a, 6, tiny_graph("inner"));
        put_sub(&add, 5, a);
    }
    {
        buf a = {0}; /* graphs */
        put_str(&a, 1, "bodies");
        put_vint(&a, 20, 10);
        put_sub(&a, 11, tiny_graph("b0"));
        put_sub(&a, 11, tiny_graph("b1"));
        put_sub(&add, 5, a);
    }
    {
        buf a = {0}; /* tensors */
        put_str(&a, 1, "tlist");
        put_vint(&a, 20, 9);
        float one = 1.0f;
        int64_t d1[] = {1};
        put_sub(&a, 10, tensor_raw(NULL, 1, 1, d1, &one, 4));
        put_sub(&a, 10, tensor_raw(NULL, 1, 0, NULL, &one, 4));
        put_sub(&add, 5, a);
    }
    {
        buf a = {0}; /* sparse tensor: [3] with value 7 at index 2 */
        put_str(&a, 1, "sp");
        put_vint(&a, 20, 11);
        buf sp = {0};
        int32_t seven = 7;
        int64_t nnz[] = {1}, idx = 2;
        put_sub(&sp, 1, tensor_raw(NULL, 6, 1, nnz, &seven, 4));
        put_sub(&sp, 2, tensor_raw(NULL, 7, 1, nnz, &idx, 8));
        put_vint(&sp, 3, 3);
        put_sub(&a, 22, sp);
        put_sub(&add, 5, a);
    }
    {
        buf a = {0}; /* type proto: skipped */
        put_str(&a, 1, "tp");
        put_vint(&a, 20, 13);
        int64_t d[] = {1};
        put_sub(&a, 14, type_tensor(1, 1, d, NULL));
        put_sub(&add, 5, a);
    }
    put_sub(&g, 1, add);
    put_str(&g, 2, "main");
    put_str(&g, 10, "graph doc");

    /* initializers of every storage form */
    float w[3] = {1, 2, 3};
    int64_t d3[] = {3};
    put_sub(&g, 5, tensor_raw("w", 1, 1, d3, w, sizeof w));
    {
        buf t = {0}; /* float16 in int32_data */
        put_vint(&t, 1, 2);
        put_vint(&t, 2, 10);
        put_str(&t, 8, "h");
        int64_t v[] = {0x3c00, 0xc000};
        put_packed_varints(&t, 5, v, 2);
        put_sub(&g, 5, t);
    }
    {
        buf t = {0}; /* int4 [5] in int32_data: two per entry, low nibble first */
        put_vint(&t, 1, 5);
        put_vint(&t, 2, 22);
        put_str(&t, 8, "i4");
        put_vint(&t, 5, 0x8F); /* -1, -8 */
        put_vint(&t, 5, 0x71); /* 1, 7 */
        put_vint(&t, 5, 0x03); /* 3 */
        put_sub(&g, 5, t);
    }
    {
        uint8_t packed[] = {0xE4}; /* uint2 [4] raw: 0,1,2,3 */
        int64_t d[] = {4};
        put_sub(&g, 5, tensor_raw("u2", 25, 1, d, packed, 1));
    }
    {
        uint8_t packed[] = {0x21, 0x03}; /* uint4 [3] raw: 1,2,3 */
        put_sub(&g, 5, tensor_raw("u4", 21, 1, d3, packed, 2));
    }
    {
        buf t = {0}; /* bool in int32_data, unpacked */
        put_vint(&t, 1, 3);
        put_vint(&t, 2, 9);
        put_str(&t, 8, "b");
        put_vint(&t, 5, 1);
        put_vint(&t, 5, 0);
        put_vint(&t, 5, 5);
        put_sub(&g, 5, t);
    }
    {
        buf t = {0}; /* uint32 in uint64_data */
        put_vint(&t, 1, 1);
        put_vint(&t, 2, 12);
        put_str(&t, 8, "u32");
        put_vint(&t, 11, 4000000000u);
        put_sub(&g, 5, t);
    }
    {
        buf t = {0}; /* double, unpacked fixed64 */
        put_vint(&t, 1, 2);
        put_vint(&t, 2, 11);
        put_str(&t, 8, "d");
        put_f64(&t, 10, 0.25);
        put_f64(&t, 10, -8.5);
        put_sub(&g, 5, t);
    }
    {
        buf t = {0}; /* strings */
        put_vint(&t, 1, 2);
        put_vint(&t, 2, 8);
        put_str(&t, 8, "s");
        put_str(&t, 6, "ab");
        put_str(&t, 6, "");
        put_sub(&g, 5, t);
    }
    {
        buf t = {0}; /* complex64 [1]: two floats */
        put_vint(&t, 1, 1);
        put_vint(&t, 2, 14);
        put_str(&t, 8, "c64");
        put_f32(&t, 4, 1.0f);
        put_f32(&t, 4, -1.0f);
        put_sub(&g, 5, t);
    }
    {
        buf t = {0}; /* int8 in int32_data, negative */
        put_vint(&t, 1, 2);
        put_vint(&t, 2, 3);
        put_str(&t, 8, "i8");
        put_vint(&t, 5, (uint64_t)(int64_t)-100);
        put_vint(&t, 5, 100);
        put_sub(&g, 5, t);
    }
    {
        buf t = {0}; /* empty float [0, 4]: no data needed */
        put_vint(&t, 1, 0);
        put_vint(&t, 1, 4);
        put_vint(&t, 2, 1);
        put_str(&t, 8, "empty");
        put_sub(&g, 5, t);
    }
    {
        buf sp = {0}; /* sparse initializer [2, 3], linear indices */
        float v[] = {1.5f, 2.5f};
        int64_t nnz[] = {2}, idx[] = {1, 4};
        put_sub(&sp, 1, tensor_raw("spl", 1, 1, nnz, v, sizeof v));
        put_sub(&sp, 2, tensor_raw(NULL, 7, 1, nnz, idx, sizeof idx));
        put_vint(&sp, 3, 2);
        put_vint(&sp, 3, 3);
        put_sub(&g, 15, sp);
    }
    {
        buf sp = {0}; /* sparse initializer [2, 3], coordinate indices */
        float v[] = {4.0f, 5.0f};
        int64_t nnz[] = {2}, idx[] = {0, 2, 1, 0}, d[] = {2, 2};
        put_sub(&sp, 1, tensor_raw("spc", 1, 1, nnz, v, sizeof v));
        put_sub(&sp, 2, tensor_raw(NULL, 7, 2, d, idx, sizeof idx));
        int64_t dd[] = {2, 3};
        put_packed_varints(&sp, 3, dd, 2);
        put_sub(&g, 15, sp);
    }
    {
        buf sp = {0}; /* sparse string [3]: "" by default */
        buf vals = {0};
        put_vint(&vals, 1, 1);
        put_vint(&vals, 2, 8);
        put_str(&vals, 8, "sps");
        put_str(&vals, 6, "z");
        put_sub(&sp, 1, vals);
        int64_t nnz[] = {1}, idx = 1;
        put_sub(&sp, 2, tensor_raw(NULL, 7, 1, nnz, &idx, 8));
        put_vint(&sp, 3, 3);
        put_sub(&g, 15, sp);
    }

    const char *params[] = {"N", NULL};
    int64_t dims[] = {0, 3};
    put_sub(&g, 11, value_info("x", type_tensor(1, 2, dims, params)));
    put_sub(&g, 11, value_info("w", type_tensor(1, 1, d3, NULL)));
    put_sub(&g, 12, value_info("y", type_tensor(1, 2, dims, params)));
    put_sub(&g, 13, value_info("seq", type_wrap(4, type_tensor(7, -1, NULL, NULL))));
    put_sub(&g, 13, value_info("opt", type_wrap(9, type_wrap(4, type_tensor(10, 0, NULL, NULL)))));
    {
        buf map = {0};
        put_vint(&map, 1, 7);
        put_sub(&map, 2, type_tensor(1, -1, NULL, NULL));
        buf t = {0};
        put_sub(&t, 5, map);
        put_sub(&g, 13, value_info("map", t));
    }

    buf m = {0};
    put_vint(&m, 1, 9);
    put_str(&m, 2, "tmtest");
    put_str(&m, 3, "1.0");
    put_vint(&m, 5, 42);
    put_str(&m, 6, "doc");
    {
        buf op = {0};
        put_str(&op, 1, "ai.onnx");
        put_vint(&op, 2, 17);
        put_sub(&m, 8, op);
        buf op2 = {0};
        put_str(&op2, 1, "com.microsoft");
        put_vint(&op2, 2, 1);
        put_sub(&m, 8, op2);
    }
    put_sub(&m, 14, entry("author", "me"));
    {
        /* an unknown field holding nested groups must be skipped */
        put_tag(&m, 100, 3);
        put_vint(&m, 1, 5);
        put_tag(&m, 2, 3);
        put_str(&m, 3, "x");
        put_tag(&m, 2, 4);
        put_tag(&m, 100, 4);
        put_f64(&m, 101, 1.0);
        put_f32(&m, 102, 1.0f);
    }
    put_sub(&m, 7, g);
    {
        buf fn = {0};
        put_str(&fn, 1, "myfn");
        put_str(&fn, 10, "custom");
        put_str(&fn, 4, "a");
        put_str(&fn, 5, "b");
        put_str(&fn, 6, "alpha");
        put_sub(&fn, 11, attr_int("beta", 3));
        const char *in[] = {"a"}, *out[] = {"b"};
        buf n = node("Relu", "r", NULL, 1, in, 1, out);
        buf ref = {0};
        put_str(&ref, 1, "alpha");
        put_str(&ref, 21, "alpha");
        put_vint(&ref, 20, 1);
        put_sub(&n, 5, ref);
        put_sub(&fn, 7, n);
        buf op = {0};
        put_str(&op, 1, "");
        put_vint(&op, 2, 18);
        put_sub(&fn, 9, op);
        put_sub(&m, 25, fn);
    }
    return m;
}

static void check_feature_model(const tm_onnx_model *m, const uint8_t *buffer, size_t size) {
    CHECK(m->ir_version == 9 && m->model_version == 42, "ir/model version");
    CHECK(strcmp(m->producer_name, "tmtest") == 0 && strcmp(m->producer_version, "1.0") == 0 &&
              strcmp(m->doc_string, "doc") == 0, "producer");
    CHECK(m->n_opsets == 2 && strcmp(m->opsets[0].domain, "") == 0 && m->opsets[0].version == 17 &&
              strcmp(m->opsets[1].domain, "com.microsoft") == 0, "opsets (ai.onnx normalised)");
    CHECK(m->n_metadata == 1 && strcmp(m->metadata[0].key, "author") == 0 &&
              strcmp(m->metadata[0].value, "me") == 0, "metadata");
    CHECK(m->n_functions == 1, "one function");
    if (m->n_functions == 1) {
        const tm_function *fn = &m->functions[0];
        CHECK(strcmp(fn->name, "myfn") == 0 && strcmp(fn->domain, "custom") == 0, "function name");
        CHECK(fn->n_inputs == 1 && fn->n_outputs == 1 && fn->n_attr_names == 1 &&
                  strcmp(fn->attr_names[0], "alpha") == 0, "function signature");
        CHECK(fn->n_attr_defaults == 1 && fn->attr_defaults[0].type == TM_ATTR_INT &&
                  fn->attr_defaults[0].i == 3, "function attribute default");
        CHECK(fn->n_nodes == 1 && fn->nodes[0].n_attrs == 1 && fn->nodes[0].attrs[0].ref_attr_name &&
                  strcmp(fn->nodes[0].attrs[0].ref_attr_name, "alpha") == 0, "ref_attr_name");
        CHECK(fn->n_opsets == 1 && fn->opsets[0].version == 18, "function opsets");
    }
    const tm_graph *g = m->graph;
    CHECK(g && strcmp(g->name, "main") == 0 && g->n_nodes == 1, "graph");
    if (!g || g->n_nodes != 1)
        return;
    const tm_node *n = &g->nodes[0];
    CHECK(strcmp(n->op_type, "Add") == 0 && strcmp(n->domain, "") == 0 &&
              strcmp(n->name, "add0") == 0, "node");
    CHECK(n->n_inputs == 2 && strcmp(n->inputs[1], "w") == 0 && n->n_outputs == 1, "node io");
    const tm_attr *a;
    a = find_attr(n, "alpha");
    CHECK(a && a->type == TM_ATTR_FLOAT && a->f == 0.5f, "float attribute");
    a = find_attr(n, "axis");
    CHECK(a && a->type == TM_ATTR_INT && a->i == -3, "int attribute");
    a = find_attr(n, "mode");
    CHECK(a && a->type == TM_ATTR_STRING && a->s.len == 5 && strcmp(a->s.data, "hello") == 0,
          "string attribute, type inferred");
    a = find_attr(n, "pads");
    CHECK(a && a->type == TM_ATTR_INTS && a->n == 3 && a->ints[1] == -2, "ints attribute");
    a = find_attr(n, "scales");
    CHECK(a && a->type == TM_ATTR_FLOATS && a->n == 2 && a->floats[1] == -2.0f, "floats attribute");
    a = find_attr(n, "names");
    CHECK(a && a->type == TM_ATTR_STRINGS && a->n == 2 && a->strings[1].len == 3 &&
              a->strings[1].data[3] == '\0' && a->strings[1].data[2] == 'c', "strings attribute");
    a = find_attr(n, "value");
    CHECK(a && a->type == TM_ATTR_TENSOR && a->t && a->t->dtype == TM_INT64 &&
              ((int64_t *)a->t->data)[0] == -5 && ((int64_t *)a->t->data)[1] == 1LL << 40,
          "tensor attribute");
    a = find_attr(n, "body");
    CHECK(a && a->type == TM_ATTR_GRAPH && a->g && strcmp(a->g->name, "inner") == 0 &&
              a->g->n_nodes == 1, "graph attribute");
    a = find_attr(n, "bodies");
    CHECK(a && a->type == TM_ATTR_GRAPHS && a->n == 2 && strcmp(a->graphs[1]->name, "b1") == 0,
          "graphs attribute");
    a = find_attr(n, "tlist");
    CHECK(a && a->type == TM_ATTR_TENSORS && a->n == 2 && a->tensors[1]->rank == 0,
          "tensors attribute");
    a = find_attr(n, "sp");
    CHECK(a && a->type == TM_ATTR_SPARSE_TENSOR && a->t && a->t->dims[0] == 3 &&
              ((int32_t *)a->t->data)[2] == 7 && ((int32_t *)a->t->data)[0] == 0,
          "sparse tensor attribute densified");
    a = find_attr(n, "tp");
    CHECK(a && a->type == TM_ATTR_TYPE_PROTO, "type proto attribute kept as a type");

    const tm_initializer *in;
    in = find_init(g, "w");
    CHECK(in && in->tensor->dtype == TM_FLOAT && in->tensor->owns_data == 0 &&
              (const uint8_t *)in->tensor->data >= buffer &&
              (const uint8_t *)in->tensor->data < buffer + size &&
              f32_at(in->tensor, 2) == 3.0f, "raw initializer referenced in place");
    in = find_init(g, "h");
    CHECK(in && in->tensor->dtype == TM_FLOAT16 && in->tensor->owns_data &&
              ((uint16_t *)in->tensor->data)[1] == 0xc000, "float16 from int32_data");
    in = find_init(g, "i4");
    {
        static const int8_t want[] = {-1, -8, 1, 7, 3};
        CHECK(in && in->tensor->dtype == TM_INT4 && in->tensor->nbytes == 5 &&
                  memcmp(in->tensor->data, want, 5) == 0, "int4 from int32_data, sign-extended");
    }
    in = find_init(g, "u2");
    {
        static const uint8_t want[] = {0, 1, 2, 3};
        CHECK(in && in->tensor->owns_data && memcmp(in->tensor->data, want, 4) == 0,
              "uint2 raw unpacked");
    }
    in = find_init(g, "u4");
    {
        static const uint8_t want[] = {1, 2, 3};
        CHECK(in && memcmp(in->tensor->data, want, 3) == 0, "uint4 raw unpacked");
    }
    in = find_init(g, "b");
    CHECK(in && in->tensor->dtype == TM_BOOL && ((uint8_t *)in->tensor->data)[2] == 1 &&
              ((uint8_t *)in->tensor->data)[1] == 0, "bool from int32_data");
    in = find_init(g, "u32");
    CHECK(in && ((uint32_t *)in->tensor->data)[0] == 4000000000u, "uint32 from uint64_data");
    in = find_init(g, "d");
    CHECK(in && ((double *)in->tensor->data)[1] == -8.5, "double from double_data");
    in = find_init(g, "s");
    CHECK(in && in->tensor->dtype == TM_STRING && strcmp(((char **)in->tensor->data)[0], "ab") == 0 &&
              strcmp(((char **)in->tensor->data)[1], "") == 0, "strings");
    in = find_init(g, "c64");
    CHECK(in && in->tensor->nbytes == 8 && f32_at(in->tensor, 1) == -1.0f, "complex64");
    in = find_init(g, "i8");
    CHECK(in && ((int8_t *)in->tensor->data)[0] == -100, "int8 from int32_data");
    in = find_init(g, "empty");
    CHECK(in && in->tensor->rank == 2 && in->tensor->dims[0] == 0 && in->tensor->nbytes == 0,
          "empty tensor without data");
    in = find_init(g, "spl");
    {
        static const float want[] = {0, 1.5f, 0, 0, 2.5f, 0};
        CHECK(in && in->tensor->rank == 2 && memcmp(in->tensor->data, want, sizeof want) == 0,
              "sparse initializer, linear indices");
    }
    in = find_init(g, "spc");
    {
        static const float want[] = {0, 0, 4.0f, 5.0f, 0, 0};
        CHECK(in && memcmp(in->tensor->data, want, sizeof want) == 0,
              "sparse initializer, coordinate indices");
    }
    in = find_init(g, "sps");
    CHECK(in && strcmp(((char **)in->tensor->data)[0], "") == 0 &&
              strcmp(((char **)in->tensor->data)[1], "z") == 0, "sparse strings");

    CHECK(g->n_inputs == 2 && g->inputs[0].type.kind == TM_TYPE_TENSOR &&
              g->inputs[0].type.rank == 2 && g->inputs[0].type.dims[0].value == -1 &&
              strcmp(g->inputs[0].type.dims[0].param, "N") == 0 &&
              g->inputs[0].type.dims[1].value == 3 && !g->inputs[0].type.dims[1].param,
          "input type with a symbolic dim");
    CHECK(g->n_value_info == 3, "value_info count");
    if (g->n_value_info == 3) {
        const tm_type *t = &g->value_info[0].type;
        CHECK(t->kind == TM_TYPE_SEQUENCE && t->elem_dtype == TM_INT64 && t->elem &&
                  t->elem->rank == -1, "sequence type");
        t = &g->value_info[1].type;
        CHECK(t->kind == TM_TYPE_OPTIONAL && t->elem && t->elem->kind == TM_TYPE_SEQUENCE &&
                  t->elem_dtype == TM_FLOAT16 && t->elem->elem->rank == 0, "optional(sequence) type");
        t = &g->value_info[2].type;
        CHECK(t->kind == TM_TYPE_MAP && t->elem && t->elem_dtype == TM_FLOAT, "map type");
    }
}

static void test_feature_model(void) {
    buf b = feature_model();
    uint8_t *copy = malloc(b.n);
    memcpy(copy, b.p, b.n);
    tm_onnx_model *m = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    int rc = tm_onnx_load_buffer(copy, b.n, NULL, &m, &err);
    CHECK(rc == TM_OK, "feature model loads: %s", err.message);
    if (rc == TM_OK) {
        check_feature_model(m, copy, b.n);
        tm_onnx_model_free(m);
    }
    free(copy);

    /* every prefix must fail cleanly (or succeed), never crash */
    int ok = 0;
    for (size_t n = 0; n < b.n; n++) {
        tm_error e;
        memset(&e, 0, sizeof e);
        if (load_copy(b.p, n, NULL, &m, &e) == TM_OK)
            ok++;
        else if (!e.message[0])
            CHECK(0, "prefix %zu failed without a message", n);
    }
    CHECK(1, "prefixes");
    printf("  feature model: %zu bytes, %zu prefixes, %d of them load\n", b.n, b.n, ok);

    /* random corruption */
    uint8_t *mut = malloc(b.n);
    int loaded = 0;
    for (int it = 0; it < 20000; it++) {
        memcpy(mut, b.p, b.n);
        int flips = 1 + (int)(rng() % 4);
        for (int k = 0; k < flips; k++) {
            size_t at = rng() % b.n;
            switch (rng() % 3) {
            case 0: mut[at] ^= (uint8_t)(1u << (rng() % 8)); break;
            case 1: mut[at] = (uint8_t)rng(); break;
            default: mut[at] = (uint8_t)(rng() % 2 ? 0xff : 0x80); break;
            }
        }
        tm_error e;
        if (load_copy(mut, b.n, NULL, &m, &e) == TM_OK)
            loaded++;
    }
    free(mut);
    CHECK(1, "corruption");
    printf("  20000 corrupted copies: %d still load\n", loaded);

    /* random garbage */
    uint8_t garbage[512];
    for (int it = 0; it < 5000; it++) {
        size_t n = 1 + rng() % sizeof garbage;
        for (size_t k = 0; k < n; k++)
            garbage[k] = (uint8_t)rng();
        tm_error e;
        load_copy(garbage, n, NULL, &m, &e);
    }
    CHECK(1, "garbage");
    free(b.p);
}

/* ---- Malformed models ----------------------------------------------------------------------- */

static void test_malformed(void) {
    buf b;
    int64_t d3[] = {3}, d2[] = {2};
    float w[3] = {1, 2, 3};

    b = (buf){0};
    put_bytes(&b, "\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01", 12);
    expect_fail("overlong varint", &b, NULL, TM_ERR_PARSE, "overlong varint at byte 1 in ModelProto.ir_version");
    free(b.p);

    b = model_of(tiny_graph("g"));
    b.n -= 3;
    expect_fail("truncated model", &b, NULL, TM_ERR_PARSE, "ModelProto.graph");
    free(b.p);

    b = (buf){0};
    put_vint(&b, 1, 8);
    expect_fail("no graph", &b, NULL, TM_ERR_PARSE, "no graph");
    free(b.p);

    b = model_of(tiny_graph("g"));
    put_sub(&b, 7, tiny_graph("g2"));
    expect_fail("two graphs", &b, NULL, TM_ERR_PARSE, "twice");
    free(b.p);

    b = (buf){0};
    put_vint(&b, 7, 1);
    expect_fail("graph as varint", &b, NULL, TM_ERR_PARSE, "ModelProto.graph has wire type varint");
    free(b.p);

    b = model_with_init(tensor_raw("w", 1, 1, d2, w, sizeof w));
    expect_fail("raw size mismatch", &b, NULL, TM_ERR_PARSE, "initializer 'w': raw_data has 12 bytes");
    free(b.p);

    int64_t neg[] = {-1};
    b = model_with_init(tensor_raw("w", 1, 1, neg, w, 0));
    expect_fail("negative dim", &b, NULL, TM_ERR_PARSE, "negative dimension");
    free(b.p);

    b = model_with_init(tensor_raw("w", 99, 1, d3, w, sizeof w));
    expect_fail("unknown dtype", &b, NULL, TM_ERR_PARSE, "unknown data_type 99");
    free(b.p);
    b = model_with_init(tensor_raw("w", 0, 1, d3, w, sizeof w));
    expect_fail("undefined dtype", &b, NULL, TM_ERR_PARSE, "unknown data_type 0");
    free(b.p);

    int64_t huge[] = {1LL << 40, 1LL << 40};
    b = model_with_init(tensor_raw("w", 1, 2, huge, w, sizeof w));
    expect_fail("numel overflow", &b, NULL, TM_ERR_PARSE, "overflows");
    free(b.p);

    int64_t r9[9] = {1, 1, 1, 1, 1, 1, 1, 1, 3};
    b = model_with_init(tensor_raw("w", 1, 9, r9, w, sizeof w));
    expect_fail("rank 9", &b, NULL, TM_ERR_UNSUPPORTED, "rank 9");
    free(b.p);

    {
        buf t = {0};
        put_vint(&t, 1, 3);
        put_vint(&t, 2, 1);
        put_str(&t, 8, "w");
        b = model_with_init(t);
        expect_fail("no data", &b, NULL, TM_ERR_PARSE, "initializer 'w' has no data");
        free(b.p);
    }
    {
        buf t = {0};
        put_vint(&t, 1, 3);
        put_vint(&t, 2, 1);
        put_str(&t, 8, "w");
        put_f32(&t, 4, 1.0f);
        b = model_with_init(t);
        expect_fail("count mismatch", &b, NULL, TM_ERR_PARSE, "has 1 values in float_data");
        free(b.p);
    }
    {
        buf t = {0};
        put_vint(&t, 1, 1);
        put_vint(&t, 2, 7);
        put_str(&t, 8, "w");
        put_f32(&t, 4, 1.0f);
        b = model_with_init(t);
        expect_fail("wrong typed field", &b, NULL, TM_ERR_PARSE, "holds float_data");
        free(b.p);
    }
    {
        buf t = {0};
        put_vint(&t, 1, 1);
        put_vint(&t, 2, 1);
        put_str(&t, 8, "w");
        put_len(&t, 4, "\0\0\0", 3);
        b = model_with_init(t);
        expect_fail("packed fixed32 of 3 bytes", &b, NULL, TM_ERR_PARSE, "TensorProto.float_data");
        free(b.p);
    }
    {
        buf t = {0};
        put_vint(&t, 1, 1);
        put_vint(&t, 2, 8);
        put_str(&t, 8, "w");
        put_len(&t, 9, "abcdefgh", 8);
        b = model_with_init(t);
        expect_fail("string raw_data", &b, NULL, TM_ERR_PARSE, "string tensors cannot use raw_data");
        free(b.p);
    }
    {
        buf t = tensor_raw("w", 1, 1, d3, w, sizeof w);
        buf seg = {0};
        put_vint(&seg, 1, 0);
        put_sub(&t, 3, seg);
        b = model_with_init(t);
        expect_fail("segment", &b, NULL, TM_ERR_UNSUPPORTED, "segmented");
        free(b.p);
    }
    b = model_with_init(tensor_raw("", 1, 1, d3, w, sizeof w));
    expect_fail("unnamed initializer", &b, NULL, TM_ERR_PARSE, "no name");
    free(b.p);
    {
        buf t = tensor_raw(NULL, 1, 1, d3, w, sizeof w);
        put_len(&t, 8, "a\0b", 3);
        b = model_with_init(t);
        expect_fail("NUL in a name", &b, NULL, TM_ERR_PARSE, "NUL byte");
        free(b.p);
    }
    {
        buf g = tiny_graph("g");
        const char *in[] = {"x"};
        put_sub(&g, 1, node(NULL, "nop", NULL, 1, in, 0, NULL));
        b = model_of(g);
        expect_fail("node without op_type", &b, NULL, TM_ERR_PARSE, "node 'nop'");
        free(b.p);
    }
    {
        buf g = tiny_graph("g");
        buf n = node("Foo", "n1", NULL, 0, NULL, 0, NULL);
        buf a = {0};
        put_vint(&a, 3, 1);
        put_sub(&n, 5, a);
        put_sub(&g, 1, n);
        b = model_of(g);
        expect_fail("attribute without a name", &b, NULL, TM_ERR_PARSE,
                    "node 'n1' (Foo) has an attribute without a name");
        free(b.p);
    }
    {
        buf g = tiny_graph("g");
        buf n = node("Foo", "n1", NULL, 0, NULL, 0, NULL);
        buf a = {0};
        put_str(&a, 1, "k");
        put_vint(&a, 20, 77);
        put_sub(&n, 5, a);
        put_sub(&g, 1, n);
        b = model_of(g);
        expect_fail("unknown attribute type", &b, NULL, TM_ERR_PARSE, "attribute 'k' of node 'n1'");
        free(b.p);
    }
    {
        buf g = tiny_graph("g");
        buf n = node("Foo", "n1", NULL, 0, NULL, 0, NULL);
        buf a = {0};
        put_str(&a, 1, "k");
        put_vint(&a, 20, 4);
        put_sub(&a, 5, tensor_raw("c", 1, 1, d2, w, sizeof w));
        put_sub(&n, 5, a);
        put_sub(&g, 1, n);
        b = model_of(g);
        expect_fail("bad tensor in an attribute", &b, NULL, TM_ERR_PARSE,
                    "tensor of attribute 'k' of node 'n1' (Foo): raw_data");
        free(b.p);
    }
    {
        /* sparse index out of range */
        buf sp = {0};
        float v = 1;
        int64_t nnz[] = {1}, idx = 9;
        put_sub(&sp, 1, tensor_raw("sp", 1, 1, nnz, &v, 4));
        put_sub(&sp, 2, tensor_raw(NULL, 7, 1, nnz, &idx, 8));
        put_vint(&sp, 3, 3);
        buf g = tiny_graph("g");
        put_sub(&g, 15, sp);
        b = model_of(g);
        expect_fail("sparse index out of range", &b, NULL, TM_ERR_PARSE, "index 9 of value 0 is out of range");
        free(b.p);
    }
    {
        /* sparse tensor too large to densify */
        buf sp = {0};
        float v = 1;
        int64_t nnz[] = {1}, idx = 0;
        put_sub(&sp, 1, tensor_raw("sp", 1, 1, nnz, &v, 4));
        put_sub(&sp, 2, tensor_raw(NULL, 7, 1, nnz, &idx, 8));
        put_vint(&sp, 3, 1u << 20);
        put_vint(&sp, 3, 1u << 20);
        buf g = tiny_graph("g");
        put_sub(&g, 15, sp);
        b = model_of(g);
        expect_fail("huge sparse", &b, NULL, TM_ERR_UNSUPPORTED, "too large");
        free(b.p);
    }
    {
        /* subgraphs nested 100 deep */
        buf g = tiny_graph("leaf");
        for (int i = 0; i < 100; i++) {
            buf n = node("If", "if", NULL, 0, NULL, 0, NULL);
            buf a = {0};
            put_str(&a, 1, "then_branch");
            put_vint(&a, 20, 5);
            put_sub(&a, 6, g);
            put_sub(&n, 5, a);
            g = (buf){0};
            put_sub(&g, 1, n);
        }
        b = model_of(g);
        expect_fail("deep subgraphs", &b, NULL, TM_ERR_PARSE, "nested deeper than 64");
        free(b.p);
    }
    {
        /* 60 levels load fine */
        buf g = tiny_graph("leaf");
        for (int i = 0; i < 60; i++) {
            buf n = node("If", "if", NULL, 0, NULL, 0, NULL);
            buf a = {0};
            put_str(&a, 1, "then_branch");
            put_vint(&a, 20, 5);
            put_sub(&a, 6, g);
            put_sub(&n, 5, a);
            g = (buf){0};
            put_sub(&g, 1, n);
        }
        b = model_of(g);
        expect_fail("60 nested subgraphs", &b, NULL, TM_OK, NULL);
        free(b.p);
    }
    {
        /* types nested 100 deep */
        buf t = type_tensor(1, -1, NULL, NULL);
        for (int i = 0; i < 100; i++)
            t = type_wrap(4, t);
        buf g = tiny_graph("g");
        put_sub(&g, 13, value_info("v", t));
        b = model_of(g);
        expect_fail("deep types", &b, NULL, TM_ERR_PARSE, "nested deeper than 64");
        free(b.p);
    }
    {
        /* a node with an unknown group field and unknown fields of every wire type */
        buf g = tiny_graph("g");
        buf n = node("Foo", "n1", NULL, 0, NULL, 0, NULL);
        put_tag(&n, 50, 3);
        put_vint(&n, 1, 1);
        put_tag(&n, 50, 4);
        put_f32(&n, 51, 1);
        put_f64(&n, 52, 1);
        put_str(&n, 53, "zz");
        put_vint(&n, 54, 1);
        put_sub(&g, 1, n);
        b = model_of(g);
        expect_fail("unknown fields are skipped", &b, NULL, TM_OK, NULL);
        free(b.p);
    }
    {
        buf g = tiny_graph("g");
        buf n = node("Foo", "n1", NULL, 0, NULL, 0, NULL);
        put_tag(&n, 50, 3);
        put_vint(&n, 1, 1);
        put_tag(&n, 51, 4);
        put_sub(&g, 1, n);
        b = model_of(g);
        expect_fail("unbalanced group", &b, NULL, TM_ERR_PARSE, "unbalanced group");
        free(b.p);
    }
    {
        /* external data with no base folder */
        b = model_with_init(tensor_external("w", 1, 1, d3, "w.bin", NULL, NULL));
        expect_fail("external without base_dir", &b, NULL, TM_ERR_INVALID_ARGUMENT, "base_dir");
        free(b.p);
    }

    /* NULL arguments */
    tm_onnx_model *m = NULL;
    tm_error err;
    CHECK(tm_onnx_load_buffer(NULL, 10, NULL, &m, &err) == TM_ERR_INVALID_ARGUMENT, "NULL data");
    CHECK(tm_onnx_load_buffer("x", 1, NULL, NULL, &err) == TM_ERR_INVALID_ARGUMENT, "NULL out");
    CHECK(tm_onnx_load_file(NULL, &m, &err) == TM_ERR_INVALID_ARGUMENT, "NULL path");
    CHECK(tm_onnx_load_buffer(NULL, 0, NULL, &m, NULL) == TM_ERR_PARSE, "empty buffer, NULL err");
    tm_onnx_model_free(NULL);
    expect_file_fail("missing file", "/nonexistent/dir/model.onnx", TM_ERR_IO,
                     "/nonexistent/dir/model.onnx");
    expect_file_fail("a folder", "/tmp", TM_ERR_IO, "not a regular file");
}

/* ---- Standalone TensorProto / SequenceProto / OptionalProto -------------------------------------- */

static void test_standalone(void) {
    float w[3] = {1, 2, 3};
    int64_t d3[] = {3};
    buf t = tensor_raw("t", 1, 1, d3, w, sizeof w);
    tm_tensor *out = NULL;
    tm_error err;
    uint8_t *copy = malloc(t.n);
    memcpy(copy, t.p, t.n);
    int rc = tm_onnx_parse_tensor(copy, t.n, &out, &err);
    CHECK(rc == TM_OK && out && out->owns_data && (uint8_t *)out->data != copy + (t.n - 12),
          "standalone tensor owns a copy");
    free(copy);
    CHECK(out && f32_at(out, 2) == 3.0f, "standalone tensor value after the buffer is gone");
    tm_tensor_free(out);
    for (size_t n = 0; n < t.n; n++) {
        copy = malloc(n ? n : 1);
        memcpy(copy, t.p, n);
        out = NULL;
        if (tm_onnx_parse_tensor(copy, n, &out, &err) == TM_OK)
            tm_tensor_free(out);
        free(copy);
    }
    CHECK(1, "tensor prefixes");

    buf ext = tensor_external("w", 1, 1, d3, "w.bin", NULL, NULL);
    out = NULL;
    rc = tm_onnx_parse_tensor(ext.p, ext.n, &out, &err);
    CHECK(rc == TM_ERR_INVALID_ARGUMENT && !out, "standalone external tensor refused");
    free(ext.p);

    buf seq = {0};
    put_str(&seq, 1, "s");
    put_vint(&seq, 2, 1);
    put_sub(&seq, 3, tensor_raw(NULL, 1, 1, d3, w, sizeof w));
    put_sub(&seq, 3, tensor_raw(NULL, 1, 0, NULL, w, 4));
    tm_tensor **v = NULL;
    int n = -1;
    rc = tm_onnx_parse_sequence(seq.p, seq.n, &v, &n, &err);
    CHECK(rc == TM_OK && n == 2 && v && v[1]->rank == 0, "sequence of two tensors");
    for (int i = 0; rc == TM_OK && i < n; i++)
        tm_tensor_free(v[i]);
    free(v);

    buf empty_seq = {0};
    put_vint(&empty_seq, 2, 1);
    v = NULL;
    rc = tm_onnx_parse_sequence(empty_seq.p, empty_seq.n, &v, &n, &err);
    CHECK(rc == TM_OK && n == 0 && v, "empty sequence");
    free(v);
    free(empty_seq.p);

    buf opt = {0};
    put_vint(&opt, 2, 1);
    put_sub(&opt, 3, tensor_raw(NULL, 1, 1, d3, w, sizeof w));
    int is_seq = -1;
    v = NULL;
    rc = tm_onnx_parse_optional(opt.p, opt.n, &v, &n, &is_seq, &err);
    CHECK(rc == TM_OK && n == 1 && v && !is_seq, "optional tensor");
    if (rc == TM_OK) {
        tm_tensor_free(v[0]);
        free(v);
    }
    free(opt.p);

    opt = (buf){0};
    put_vint(&opt, 2, 3);
    put_sub(&opt, 5, seq);
    v = NULL;
    rc = tm_onnx_parse_optional(opt.p, opt.n, &v, &n, &is_seq, &err);
    CHECK(rc == TM_OK && n == 2 && v && is_seq == 1, "optional sequence");
    for (int i = 0; rc == TM_OK && i < n; i++)
        tm_tensor_free(v[i]);
    free(v);
    free(opt.p);

    opt = (buf){0};
    put_vint(&opt, 2, 1);
    v = (tm_tensor **)&err;
    rc = tm_onnx_parse_optional(opt.p, opt.n, &v, &n, &is_seq, &err);
    CHECK(rc == TM_OK && n == 0 && !v && !is_seq, "empty optional");
    free(opt.p);
    free(t.p);
}

/* ---- External data ------------------------------------------------------------------------ */

static char tmp_root[256];

static void path_in(char *out, size_t n, const char *rel) { snprintf(out, n, "%s/%s", tmp_root, rel); }

static int write_model_file(const char *rel, buf b) {
    char p[512];
    path_in(p, sizeof p, rel);
    int rc = write_file(p, b.p, b.n);
    free(b.p);
    return rc;
}

static void expect_external_fail(const char *label, const char *location, const char *offset,
                                 const char *length, tm_status code, const char *needle) {
    int64_t d3[] = {3};
    char p[512];
    if (write_model_file("model/bad.onnx",
                         model_with_init(tensor_external("w", 1, 1, d3, location, offset, length))) != 0) {
        CHECK(0, "%s: cannot write the model", label);
        return;
    }
    path_in(p, sizeof p, "model/bad.onnx");
    expect_file_fail(label, p, code, needle);
}

static void test_external(void) {
    snprintf(tmp_root, sizeof tmp_root, "/tmp/tm_loader_XXXXXX");
    if (!mkdtemp(tmp_root)) {
        CHECK(0, "mkdtemp: %s", strerror(errno));
        return;
    }
    char p[512], q[512];
    path_in(p, sizeof p, "model");
    mkdir(p, 0755);
    path_in(p, sizeof p, "model/sub");
    mkdir(p, 0755);

    float data[1024 + 8];
    for (int i = 0; i < 1032; i++)
        data[i] = (float)i;
    path_in(p, sizeof p, "model/weights.bin");
    write_file(p, data, sizeof data);
    path_in(p, sizeof p, "model/sub/w2.bin");
    write_file(p, data, 64);
    path_in(p, sizeof p, "outside.bin");
    write_file(p, data, sizeof data);
    path_in(p, sizeof p, "outside.bin");
    path_in(q, sizeof q, "model/link.bin");
    int have_symlink = symlink(p, q) == 0;
    path_in(q, sizeof q, "model/inlink.bin");
    symlink("weights.bin", q);

    int64_t d3[] = {3}, d4[] = {4}, d5[] = {5};
    buf g = tiny_graph("g");
    put_sub(&g, 5, tensor_external("a", 1, 1, d3, "weights.bin", "4096", "12"));
    put_sub(&g, 5, tensor_external("b", 1, 1, d4, "weights.bin", NULL, NULL));
    put_sub(&g, 5, tensor_external("mis", 1, 1, d3, "weights.bin", "2", NULL));
    put_sub(&g, 5, tensor_external("c", 1, 1, d3, "sub/w2.bin", "8", "12"));
    put_sub(&g, 5, tensor_external("d", 1, 1, d3, "./inlink.bin", NULL, NULL));
    put_sub(&g, 5, tensor_external("i4", 22, 1, d5, "weights.bin", "0", "3"));
    buf model = model_of(g);
    buf model_copy = {0};
    put_bytes(&model_copy, model.p, model.n);
    write_model_file("model/ok.onnx", model);
    path_in(p, sizeof p, "model/ok.onnx");
    tm_onnx_model *m = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    int rc = tm_onnx_load_file(p, &m, &err);
    CHECK(rc == TM_OK, "external data model loads: %s", err.message);
    if (rc == TM_OK) {
        const tm_initializer *a = find_init(m->graph, "a"), *b = find_init(m->graph, "b"),
                             *mis = find_init(m->graph, "mis"), *c = find_init(m->graph, "c"),
                             *d = find_init(m->graph, "d"), *i4 = find_init(m->graph, "i4");
        CHECK(a && !a->tensor->owns_data && inside_mapping(m, a->tensor->data, 1) &&
                  f32_at(a->tensor, 0) == 1024.0f, "external tensor in place at offset 4096");
        CHECK(b && !b->tensor->owns_data && f32_at(b->tensor, 3) == 3.0f, "no offset");
        CHECK(mis && !mis->tensor->owns_data && inside_mapping(m, mis->tensor->data, 1) &&
                  (uintptr_t)mis->tensor->data % 4 == 2, "misaligned data referenced in place");
        CHECK(c && f32_at(c->tensor, 0) == 2.0f, "file in a subfolder");
        CHECK(d && f32_at(d->tensor, 1) == 1.0f, "symlink that stays inside");
        CHECK(i4 && i4->tensor->owns_data && i4->tensor->nbytes == 5, "external int4 unpacked");
        CHECK(m->n_maps == 3, "each external file mapped once (%d maps)", m->n_maps);
        CHECK(strcmp(m->maps[0].path, p) == 0, "maps[0] is the model file");
        path_in(q, sizeof q, "model");
        CHECK(strcmp(m->dir, q) == 0, "dir is the model's folder (%s)", m->dir);
        tm_onnx_model_free(m);
    }
    /* the same bytes from a buffer with base_dir */
    path_in(q, sizeof q, "model");
    m = NULL;
    rc = tm_onnx_load_buffer(model_copy.p, model_copy.n, q, &m, &err);
    CHECK(rc == TM_OK && m->n_maps == 2, "buffer with base_dir: %s", err.message);
    if (rc == TM_OK)
        tm_onnx_model_free(m);
    rc = tm_onnx_load_buffer(model_copy.p, model_copy.n, NULL, &m, &err);
    CHECK(rc == TM_ERR_INVALID_ARGUMENT, "buffer without base_dir refuses external data");
    /* prefixes of a model with external data */
    for (size_t n = 0; n < model_copy.n; n++)
        load_copy(model_copy.p, n, q, &m, &err);
    free(model_copy.p);

    expect_external_fail("dotdot", "../outside.bin", NULL, NULL, TM_ERR_PARSE,
                         "initializer 'w': external data path '../outside.bin' escapes the model folder");
    expect_external_fail("inner dotdot", "sub/../../outside.bin", NULL, NULL, TM_ERR_PARSE, "escapes");
    expect_external_fail("dotdot even when inside", "sub/../weights.bin", NULL, NULL, TM_ERR_PARSE,
                         "escapes");
    expect_external_fail("backslash dotdot", "..\\outside.bin", NULL, NULL, TM_ERR_PARSE, "escapes");
    expect_external_fail("absolute", "/etc/passwd", NULL, NULL, TM_ERR_PARSE, "is absolute");
    expect_external_fail("empty", "", NULL, NULL, TM_ERR_PARSE, "is empty");
    expect_external_fail("ORT memory address trick", "*/_ORT_MEM_ADDR_/*", NULL, NULL, TM_ERR_PARSE,
                         "_ORT_MEM_ADDR_");
    expect_external_fail("missing file", "nope.bin", NULL, NULL, TM_ERR_IO, "nope.bin");
    expect_external_fail("folder", "sub", NULL, NULL, TM_ERR_IO, "not a regular file");
    if (have_symlink)
        expect_external_fail("symlink escaping", "link.bin", NULL, NULL, TM_ERR_PARSE, "escapes");
    expect_external_fail("past the end", "weights.bin", "4120", NULL, TM_ERR_PARSE, "outside");
    expect_external_fail("offset overflow", "weights.bin", "18446744073709551615", NULL,
                         TM_ERR_PARSE, "outside");
    expect_external_fail("bad offset", "weights.bin", "12abc", NULL, TM_ERR_PARSE, "not a number");
    expect_external_fail("negative offset", "weights.bin", "-4", NULL, TM_ERR_PARSE, "not a number");
    expect_external_fail("length mismatch", "weights.bin", "0", "16", TM_ERR_PARSE, "does not match");
    {
        int64_t d[] = {1};
        buf t = tensor_external("w", 1, 1, d, "weights.bin", NULL, NULL);
        /* drop the location entry: rebuild without it */
        free(t.p);
        t = (buf){0};
        put_vint(&t, 1, 1);
        put_vint(&t, 2, 1);
        put_str(&t, 8, "w");
        put_vint(&t, 14, 1);
        write_model_file("model/bad.onnx", model_with_init(t));
        path_in(p, sizeof p, "model/bad.onnx");
        expect_file_fail("no location", p, TM_ERR_PARSE, "without a location");
    }

    /* model in the filesystem root of tmp: relative path with no folder part */
    char cwd[512];
    if (getcwd(cwd, sizeof cwd)) {
        path_in(p, sizeof p, "model");
        if (chdir(p) == 0) {
            m = NULL;
            rc = tm_onnx_load_file("ok.onnx", &m, &err);
            CHECK(rc == TM_OK && strcmp(m->dir, ".") == 0, "relative path: %s", err.message);
            if (rc == TM_OK)
                tm_onnx_model_free(m);
            if (chdir(cwd) != 0)
                CHECK(0, "chdir back");
        }
    }

    const char *files[] = {"model/ok.onnx", "model/bad.onnx", "model/weights.bin",
                           "model/sub/w2.bin", "model/link.bin", "model/inlink.bin",
                           "outside.bin"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        path_in(p, sizeof p, files[i]);
        unlink(p);
    }
    path_in(p, sizeof p, "model/sub");
    rmdir(p);
    path_in(p, sizeof p, "model");
    rmdir(p);
    rmdir(tmp_root);
}

/* ---- Real models -------------------------------------------------------------------------- */

static const char *shared_root(void) {
    static const char *const candidates[] = {"../shared", "/work/shared", "../../shared"};
    const char *env = getenv("TM_SHARED");
    if (env && file_exists(env))
        return env;
    for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/models", candidates[i]);
        if (file_exists(p))
            return candidates[i];
    }
    return NULL;
}

static const tm_node *find_op(const tm_graph *g, const char *op) {
    for (int i = 0; i < g->n_nodes; i++)
        if (strcmp(g->nodes[i].op_type, op) == 0)
            return &g->nodes[i];
    return NULL;
}

static void test_real_models(const char *root) {
    char p[512];
    tm_onnx_model *m = NULL;
    tm_error err;
    int rc;

    snprintf(p, sizeof p, "%s/models/tiny/bert/model.onnx", root);
    if (!file_exists(p)) {
        printf("  skip: %s not found\n", p);
    } else {
        rc = tm_onnx_load_file(p, &m, &err);
        CHECK(rc == TM_OK, "bert loads: %s", err.message);
        if (rc == TM_OK) {
            const tm_graph *g = m->graph;
            int in_place = 0, owned = 0;
            for (int i = 0; i < g->n_inits; i++) {
                const tm_tensor *t = g->inits[i].tensor;
                if (!t->owns_data && t->nbytes && inside_mapping(m, t->data, 0))
                    in_place++;
                else if (t->owns_data)
                    owned++;
            }
            printf("  bert: ir %lld, opset %lld, %d nodes, %d initializers (%d in place, %d owned), "
                   "%d inputs\n", (long long)m->ir_version,
                   (long long)(m->n_opsets ? m->opsets[0].version : -1), g->n_nodes, g->n_inits,
                   in_place, owned, g->n_inputs);
            CHECK(g->n_nodes > 10 && g->n_inits > 5 && in_place > 0, "bert structure");
            CHECK(g->n_inputs >= 1 && g->inputs[0].type.kind == TM_TYPE_TENSOR &&
                      g->inputs[0].type.elem_dtype == TM_INT64 && g->inputs[0].type.rank == 2 &&
                      g->inputs[0].type.dims[0].param, "bert input_ids: int64 [batch, seq]");
            tm_onnx_model_free(m);
        }
    }

    snprintf(p, sizeof p, "%s/models/tiny/bert-external-data/model.onnx", root);
    if (!file_exists(p)) {
        printf("  skip: %s not found\n", p);
    } else {
        rc = tm_onnx_load_file(p, &m, &err);
        CHECK(rc == TM_OK, "bert-external-data loads: %s", err.message);
        if (rc == TM_OK) {
            int external = 0, copied = 0;
            for (int i = 0; i < m->graph->n_inits; i++) {
                const tm_tensor *t = m->graph->inits[i].tensor;
                if (t->nbytes && inside_mapping(m, t->data, 1)) {
                    external++;
                    if (t->owns_data)
                        copied++;
                }
            }
            printf("  bert-external-data: %d maps, %d initializers in the external file\n",
                   m->n_maps, external);
            CHECK(m->n_maps == 2 && external > 0 && copied == 0,
                  "external initializers referenced in place");
            tm_onnx_model_free(m);
        }
        /* every corrupted copy of it fails cleanly or loads */
        size_t n;
        uint8_t *bytes = read_file(p, &n);
        char dir[512];
        snprintf(dir, sizeof dir, "%s/models/tiny/bert-external-data", root);
        if (bytes && n) {
            uint8_t *mut = malloc(n);
            for (int it = 0; it < 300; it++) {
                memcpy(mut, bytes, n);
                for (int k = 0; k < 3; k++)
                    mut[rng() % n] = (uint8_t)rng();
                load_copy(mut, n, dir, &m, &err);
            }
            for (size_t len = 0; len < n; len += 1 + rng() % 257)
                load_copy(bytes, len, dir, &m, &err);
            free(mut);
            CHECK(1, "bert-external-data corruption");
        }
        free(bytes);
    }

    snprintf(p, sizeof p, "%s/models/tiny/llama/decoder_model_merged.onnx", root);
    if (!file_exists(p)) {
        printf("  skip: %s not found\n", p);
    } else {
        rc = tm_onnx_load_file(p, &m, &err);
        CHECK(rc == TM_OK, "llama merged loads: %s", err.message);
        if (rc == TM_OK) {
            const tm_node *iff = find_op(m->graph, "If");
            const tm_attr *then_b = iff ? find_attr(iff, "then_branch") : NULL;
            const tm_attr *else_b = iff ? find_attr(iff, "else_branch") : NULL;
            CHECK(then_b && then_b->type == TM_ATTR_GRAPH && then_b->g && then_b->g->n_nodes > 0 &&
                      else_b && else_b->g && else_b->g->n_nodes > 0, "llama If subgraphs");
            if (then_b && else_b && then_b->g && else_b->g)
                printf("  llama merged: %d nodes, If branches of %d and %d nodes\n",
                       m->graph->n_nodes, then_b->g->n_nodes, else_b->g->n_nodes);
            tm_onnx_model_free(m);
        }
    }

    /* every tiny model loads */
    snprintf(p, sizeof p, "%s/models/tiny", root);
    DIR *dir = opendir(p);
    int total = 0, ok = 0;
    struct dirent *de;
    while (dir && (de = readdir(dir)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char sub[768];
        snprintf(sub, sizeof sub, "%s/%s", p, de->d_name);
        DIR *d2 = opendir(sub);
        struct dirent *e2;
        while (d2 && (e2 = readdir(d2)) != NULL) {
            size_t len = strlen(e2->d_name);
            if (len < 5 || strcmp(e2->d_name + len - 5, ".onnx") != 0)
                continue;
            char mp[1100];
            snprintf(mp, sizeof mp, "%s/%s", sub, e2->d_name);
            total++;
            rc = tm_onnx_load_file(mp, &m, &err);
            if (rc == TM_OK) {
                ok++;
                tm_onnx_model_free(m);
            } else {
                printf("  %s: %s\n", mp, err.message);
            }
        }
        if (d2)
            closedir(d2);
    }
    if (dir)
        closedir(dir);
    CHECK(ok == total, "tiny models: %d of %d load", ok, total);
    printf("  tiny models: %d of %d load\n", ok, total);
}

/* ---- Backend cases ---------------------------------------------------------------------------- */

static int is_initializer(const tm_graph *g, const char *name) {
    return find_init(g, name) != NULL;
}

static int check_value_file(const char *path, const tm_type *type, char *why, size_t why_n) {
    size_t n;
    uint8_t *bytes = read_file(path, &n);
    if (!bytes) {
        snprintf(why, why_n, "cannot read");
        return 0;
    }
    tm_error err;
    memset(&err, 0, sizeof err);
    int rc = TM_OK, ok = 1;
    if (type->kind == TM_TYPE_TENSOR) {
        tm_tensor *t = NULL;
        rc = tm_onnx_parse_tensor(bytes, n, &t, &err);
        if (rc == TM_OK) {
            if (type->elem_dtype && (int)t->dtype != type->elem_dtype) {
                snprintf(why, why_n, "dtype %d, type says %d", (int)t->dtype, type->elem_dtype);
                ok = 0;
            } else if (type->rank >= 0 && t->rank != type->rank) {
                snprintf(why, why_n, "rank %d, type says %d", t->rank, type->rank);
                ok = 0;
            }
            tm_tensor_free(t);
        }
    } else if (type->kind == TM_TYPE_SEQUENCE || type->kind == TM_TYPE_OPTIONAL) {
        tm_tensor **v = NULL;
        int count = 0, is_seq = 0;
        rc = type->kind == TM_TYPE_SEQUENCE ? tm_onnx_parse_sequence(bytes, n, &v, &count, &err)
                                            : tm_onnx_parse_optional(bytes, n, &v, &count, &is_seq, &err);
        if (rc == TM_OK) {
            for (int i = 0; i < count; i++) {
                if (type->elem_dtype && (int)v[i]->dtype != type->elem_dtype)
                    ok = 0;
                tm_tensor_free(v[i]);
            }
            free(v);
            if (!ok)
                snprintf(why, why_n, "element dtype differs from the type");
        }
    }
    if (rc != TM_OK) {
        snprintf(why, why_n, "%s", err.message);
        ok = 0;
    }
    /* prefixes of small value files */
    if (n < 256) {
        for (size_t len = 0; len < n; len++) {
            uint8_t *c = malloc(len ? len : 1);
            memcpy(c, bytes, len);
            tm_tensor *t = NULL;
            if (tm_onnx_parse_tensor(c, len, &t, &err) == TM_OK)
                tm_tensor_free(t);
            free(c);
        }
    }
    free(bytes);
    return ok;
}

static void test_backend(const char *root) {
    static const char *const suites[] = {"node", "node-post-1.22", "simple", "pytorch-converted",
                                         "pytorch-operator", "light"};
    char p[512];
    snprintf(p, sizeof p, "%s/onnx-backend/node/test_add/model.onnx", root);
    if (!file_exists(p)) {
        printf("  skip: %s not found\n", p);
        return;
    }
    tm_onnx_model *m = NULL;
    tm_error err;
    int rc = tm_onnx_load_file(p, &m, &err);
    CHECK(rc == TM_OK && m->graph->n_nodes == 1 && strcmp(m->graph->nodes[0].op_type, "Add") == 0,
          "test_add loads: %s", err.message);
    if (rc == TM_OK) {
        snprintf(p, sizeof p, "%s/onnx-backend/node/test_add/test_data_set_0/input_0.pb", root);
        size_t n;
        uint8_t *bytes = read_file(p, &n);
        tm_tensor *t = NULL;
        rc = bytes ? tm_onnx_parse_tensor(bytes, n, &t, &err) : TM_ERR_IO;
        const tm_type *ty = &m->graph->inputs[0].type;
        CHECK(rc == TM_OK && t->dtype == TM_FLOAT && t->rank == ty->rank && t->rank == 3 &&
                  t->dims[0] == ty->dims[0].value && t->dims[2] == ty->dims[2].value &&
                  t->owns_data, "test_add input_0.pb");
        tm_tensor_free(t);
        free(bytes);
        tm_onnx_model_free(m);
    }

    /* every model and value file of the suite */
    int models = 0, models_ok = 0, values = 0, values_ok = 0, shown = 0;
    for (size_t s = 0; s < sizeof suites / sizeof suites[0]; s++) {
        char sd[512];
        snprintf(sd, sizeof sd, "%s/onnx-backend/%s", root, suites[s]);
        DIR *d = opendir(sd);
        struct dirent *de;
        while (d && (de = readdir(d)) != NULL) {
            if (de->d_name[0] == '.')
                continue;
            char mp[1024];
            snprintf(mp, sizeof mp, "%s/%s/model.onnx", sd, de->d_name);
            if (!file_exists(mp))
                continue;
            models++;
            rc = tm_onnx_load_file(mp, &m, &err);
            if (rc != TM_OK) {
                if (shown++ < 20)
                    printf("  %s: %s\n", mp, err.message);
                continue;
            }
            models_ok++;
            const tm_graph *g = m->graph;
            int k = 0;
            for (int i = 0; i < g->n_inputs; i++) {
                if (is_initializer(g, g->inputs[i].name))
                    continue;
                char vp[1100], why[1100];
                snprintf(vp, sizeof vp, "%s/%s/test_data_set_0/input_%d.pb", sd, de->d_name, k++);
                if (!file_exists(vp))
                    continue;
                values++;
                if (check_value_file(vp, &g->inputs[i].type, why, sizeof why))
                    values_ok++;
                else if (shown++ < 20)
                    printf("  %s: %s\n", vp, why);
            }
            for (int i = 0; i < g->n_outputs; i++) {
                char vp[1100], why[1100];
                snprintf(vp, sizeof vp, "%s/%s/test_data_set_0/output_%d.pb", sd, de->d_name, i);
                if (!file_exists(vp))
                    continue;
                values++;
                if (check_value_file(vp, &g->outputs[i].type, why, sizeof why))
                    values_ok++;
                else if (shown++ < 20)
                    printf("  %s: %s\n", vp, why);
            }
            tm_onnx_model_free(m);
        }
        if (d)
            closedir(d);
    }
    printf("  backend: %d of %d models load, %d of %d value files parse\n", models_ok, models,
           values_ok, values);
    CHECK(models > 0 && models_ok == models, "backend models: %d of %d", models_ok, models);
    CHECK(values_ok == values, "backend value files: %d of %d", values_ok, values);

    /* every prefix of a few small models with subgraphs, constants and sequences */
    static const char *const small[] = {"node/test_if", "node/test_loop11", "node/test_constant",
                                        "node/test_sequence_map_add_2_sequences",
                                        "node/test_scan9_sum", "node/test_cast_FLOAT_to_INT4"};
    for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) {
        snprintf(p, sizeof p, "%s/onnx-backend/%s/model.onnx", root, small[i]);
        size_t n;
        uint8_t *bytes = read_file(p, &n);
        if (!bytes)
            continue;
        int loads = 0;
        for (size_t len = 0; len <= n; len++) {
            if (load_copy(bytes, len, NULL, &m, &err) == TM_OK)
                loads++;
        }
        CHECK(loads >= 1, "%s: the whole file loads", small[i]);
        free(bytes);
    }
}

int main(void) {
    verbose = getenv("TM_TEST_VERBOSE") != NULL;
    printf("pb reader\n");
    test_pb_reader();
    printf("feature model\n");
    test_feature_model();
    printf("malformed models\n");
    test_malformed();
    printf("standalone protos\n");
    test_standalone();
    printf("external data\n");
    test_external();
    const char *root = shared_root();
    if (!root) {
        printf("skip: ../shared not found (set TM_SHARED), real models not tested\n");
    } else {
        printf("real models (%s)\n", root);
        test_real_models(root);
        printf("backend cases\n");
        test_backend(root);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
