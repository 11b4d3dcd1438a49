/* The ONNX loader: ModelProto, GraphProto, NodeProto, AttributeProto, TensorProto (raw,
 * typed, external, sparse) and TypeProto, read with pb.c into the IR of model.h.
 * Weights stay in the mapped files. Not lowering, checking or execution (see lower.h). */
#define _XOPEN_SOURCE 700 /* realpath, O_CLOEXEC, O_NOFOLLOW */

#include "model.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/dtype.h"
#include "../core/status.h"
#include "../core/tensor.h"
#include "pb.h"
#include "../hub/hub.h"

/* raw_data and external data are little-endian and referenced in place. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "big-endian hosts would need a byte-swapping copy of raw_data"
#endif

/* Subgraphs (If/Loop/Scan bodies) and nested types: deeper than this is hostile. */
#define MAX_NESTING 64
/* A sparse tensor is densified at load; its dims come from the file with nothing to
 * bound them, so cap what a few bytes can make us allocate. */
#define MAX_DENSIFIED_BYTES ((uint64_t)1 << 32)
#define MAX_DENSIFIED_STRINGS ((uint64_t)1 << 24)

typedef struct loader {
    tm_error *err;
    const char *src;          /* file path or "<buffer>": the prefix of parse errors */
    tm_onnx_model *model;     /* NULL for standalone protos (no external data) */
    const char *dir;          /* folder external data is confined to, or NULL */
    char *real_dir;           /* realpath(dir), resolved on first use */
    int copy_data;            /* standalone protos own their data: their buffer goes away */
    int graph_depth;          /* subgraphs currently open */
    int type_depth;           /* nested TypeProtos currently open */
} loader;

/* ---- Errors ------------------------------------------------------------------------ */

static const struct {
    const char *msg;
    uint32_t number;
    const char *name;
} FIELD_NAMES[] = {
    {"ModelProto", 1, "ir_version"}, {"ModelProto", 2, "producer_name"},
    {"ModelProto", 3, "producer_version"}, {"ModelProto", 4, "domain"},
    {"ModelProto", 5, "model_version"}, {"ModelProto", 6, "doc_string"},
    {"ModelProto", 7, "graph"}, {"ModelProto", 8, "opset_import"},
    {"ModelProto", 14, "metadata_props"}, {"ModelProto", 20, "training_info"},
    {"ModelProto", 25, "functions"},
    {"GraphProto", 1, "node"}, {"GraphProto", 2, "name"}, {"GraphProto", 5, "initializer"},
    {"GraphProto", 10, "doc_string"}, {"GraphProto", 11, "input"},
    {"GraphProto", 12, "output"}, {"GraphProto", 13, "value_info"},
    {"GraphProto", 14, "quantization_annotation"}, {"GraphProto", 15, "sparse_initializer"},
    {"NodeProto", 1, "input"}, {"NodeProto", 2, "output"}, {"NodeProto", 3, "name"},
    {"NodeProto", 4, "op_type"}, {"NodeProto", 5, "attribute"},
    {"NodeProto", 6, "doc_string"}, {"NodeProto", 7, "domain"},
    {"AttributeProto", 1, "name"}, {"AttributeProto", 2, "f"}, {"AttributeProto", 3, "i"},
    {"AttributeProto", 4, "s"}, {"AttributeProto", 5, "t"}, {"AttributeProto", 6, "g"},
    {"AttributeProto", 7, "floats"}, {"AttributeProto", 8, "ints"},
    {"AttributeProto", 9, "strings"}, {"AttributeProto", 10, "tensors"},
    {"AttributeProto", 11, "graphs"}, {"AttributeProto", 13, "doc_string"},
    {"AttributeProto", 14, "tp"}, {"AttributeProto", 15, "type_protos"},
    {"AttributeProto", 20, "type"}, {"AttributeProto", 21, "ref_attr_name"},
    {"AttributeProto", 22, "sparse_tensor"}, {"AttributeProto", 23, "sparse_tensors"},
    {"TensorProto", 1, "dims"}, {"TensorProto", 2, "data_type"},
    {"TensorProto", 3, "segment"}, {"TensorProto", 4, "float_data"},
    {"TensorProto", 5, "int32_data"}, {"TensorProto", 6, "string_data"},
    {"TensorProto", 7, "int64_data"}, {"TensorProto", 8, "name"},
    {"TensorProto", 9, "raw_data"}, {"TensorProto", 10, "double_data"},
    {"TensorProto", 11, "uint64_data"}, {"TensorProto", 12, "doc_string"},
    {"TensorProto", 13, "external_data"}, {"TensorProto", 14, "data_location"},
    {"SparseTensorProto", 1, "values"}, {"SparseTensorProto", 2, "indices"},
    {"SparseTensorProto", 3, "dims"},
    {"ValueInfoProto", 1, "name"}, {"ValueInfoProto", 2, "type"},
    {"TypeProto", 1, "tensor_type"}, {"TypeProto", 4, "sequence_type"},
    {"TypeProto", 5, "map_type"}, {"TypeProto", 7, "opaque_type"},
    {"TypeProto", 8, "sparse_tensor_type"}, {"TypeProto", 9, "optional_type"},
    {"TypeProto.Tensor", 1, "elem_type"}, {"TypeProto.Tensor", 2, "shape"},
    {"TypeProto.Sequence", 1, "elem_type"}, {"TypeProto.Optional", 1, "elem_type"},
    {"TypeProto.Map", 1, "key_type"}, {"TypeProto.Map", 2, "value_type"},
    {"TensorShapeProto", 1, "dim"},
    {"TensorShapeProto.Dimension", 1, "dim_value"},
    {"TensorShapeProto.Dimension", 2, "dim_param"},
    {"OperatorSetIdProto", 1, "domain"}, {"OperatorSetIdProto", 2, "version"},
    {"StringStringEntryProto", 1, "key"}, {"StringStringEntryProto", 2, "value"},
    {"FunctionProto", 1, "name"}, {"FunctionProto", 4, "input"},
    {"FunctionProto", 5, "output"}, {"FunctionProto", 6, "attribute"},
    {"FunctionProto", 7, "node"}, {"FunctionProto", 8, "doc_string"},
    {"FunctionProto", 9, "opset_import"}, {"FunctionProto", 10, "domain"},
    {"FunctionProto", 11, "attribute_proto"},
    {"SequenceProto", 1, "name"}, {"SequenceProto", 2, "elem_type"},
    {"SequenceProto", 3, "tensor_values"}, {"SequenceProto", 4, "sparse_tensor_values"},
    {"SequenceProto", 5, "sequence_values"}, {"SequenceProto", 6, "map_values"},
    {"SequenceProto", 7, "optional_values"},
    {"OptionalProto", 1, "name"}, {"OptionalProto", 2, "elem_type"},
    {"OptionalProto", 3, "tensor_value"}, {"OptionalProto", 4, "sparse_tensor_value"},
    {"OptionalProto", 5, "sequence_value"}, {"OptionalProto", 6, "map_value"},
    {"OptionalProto", 7, "optional_value"},
};

/* "GraphProto.node", "GraphProto (field 99)" or "GraphProto". */
static void field_label(char *buf, size_t size, const char *msg, uint32_t number) {
    if (number == 0) {
        snprintf(buf, size, "%s", msg);
        return;
    }
    for (size_t i = 0; i < sizeof FIELD_NAMES / sizeof FIELD_NAMES[0]; i++) {
        if (FIELD_NAMES[i].number == number && strcmp(FIELD_NAMES[i].msg, msg) == 0) {
            snprintf(buf, size, "%s.%s", msg, FIELD_NAMES[i].name);
            return;
        }
    }
    snprintf(buf, size, "%s (field %u)", msg, (unsigned)number);
}

static tm_status pb_error(loader *L, const tm_pb_reader *r, const char *msg) {
    char where[96];
    field_label(where, sizeof where, msg, r->error_field);
    return tm__fail(L->err, TM_ERR_PARSE, "%s: %s at byte %zu in %s", L->src, r->error,
                    r->error_at, where);
}

static tm_status iter_error(loader *L, const char *error, size_t at, const char *msg,
                            uint32_t number) {
    char where[96];
    field_label(where, sizeof where, msg, number);
    return tm__fail(L->err, TM_ERR_PARSE, "%s: %s at byte %zu in %s", L->src, error, at, where);
}

static tm_status wrong_wire(loader *L, const char *msg, const tm_pb_field *f,
                            tm_pb_wire want) {
    char where[96];
    field_label(where, sizeof where, msg, f->number);
    return tm__fail(L->err, TM_ERR_PARSE, "%s: %s has wire type %s, expected %s, at byte %zu",
                    L->src, where, tm_pb_wire_name(f->wire), tm_pb_wire_name(want), f->offset);
}

static tm_status no_memory(loader *L, const char *what) {
    return tm__fail(L->err, TM_ERR_NO_MEMORY, "%s: out of memory reading %s", L->src, what);
}

/* "initializer 'w'", or just "initializer" when it has no name. A role that already
 * names its owner ("tensor of attribute 'value' of node 'n'") is left alone: the name
 * of an attribute's tensor tells nothing more. */
static void describe(char *buf, size_t size, const char *what, const char *name) {
    if (name && name[0] && !strchr(what, '\''))
        snprintf(buf, size, "%s '%s'", what, name);
    else
        snprintf(buf, size, "%s", what);
}

/* ---- Small helpers --------------------------------------------------------------------- */

/* Appends a zeroed element to an array that grows by doubling; the capacity is implied
 * by the count (4, 8, 16, ...), so the IR needs no capacity fields. NULL when out of
 * memory or past INT_MAX elements. */
static void *push_impl(void *arrp, int *n, size_t elem) {
    void *arr;
    memcpy(&arr, arrp, sizeof arr);
    int count = *n;
    if (count == INT_MAX)
        return NULL;
    if (count == 0 || (count >= 4 && (count & (count - 1)) == 0)) {
        size_t cap = count == 0 ? 4 : (size_t)count * 2, bytes;
        if (!tm__mul_ok(cap, elem, &bytes))
            return NULL;
        void *grown = realloc(arr, bytes);
        if (!grown)
            return NULL;
        arr = grown;
        memcpy(arrp, &arr, sizeof arr);
    }
    void *slot = (char *)arr + (size_t)count * elem;
    memset(slot, 0, elem);
    *n = count + 1;
    return slot;
}
#define PUSH(arr, n) push_impl((void *)&(arr), &(n), sizeof *(arr))

static char *dup_bytes(const void *p, size_t n) {
    if (n == SIZE_MAX)
        return NULL;
    char *s = malloc(n + 1);
    if (!s)
        return NULL;
    if (n)
        memcpy(s, p, n);
    s[n] = '\0';
    return s;
}

static char *dup_str(const char *s) { return dup_bytes(s, strlen(s)); }

/* Replaces *dst by a NUL-terminated copy of LEN field f. Names may not hold NUL bytes:
 * "a\0b" and "a" would otherwise name the same value. */
static tm_status take_string(loader *L, const char *msg, const tm_pb_field *f, char **dst,
                             int is_name) {
    if (f->wire != TM_PB_LEN)
        return wrong_wire(L, msg, f, TM_PB_LEN);
    if (is_name && f->len && memchr(f->data, 0, f->len)) {
        char where[96];
        field_label(where, sizeof where, msg, f->number);
        return tm__fail(L->err, TM_ERR_PARSE, "%s: %s at byte %zu contains a NUL byte",
                        L->src, where, f->offset);
    }
    char *s = dup_bytes(f->data, f->len);
    if (!s)
        return no_memory(L, msg);
    free(*dst);
    *dst = s;
    return TM_OK;
}

static tm_status push_string(loader *L, const char *msg, const tm_pb_field *f, char ***arr,
                             int *n) {
    if (f->wire != TM_PB_LEN)
        return wrong_wire(L, msg, f, TM_PB_LEN);
    char **slot = PUSH(*arr, *n);
    if (!slot)
        return no_memory(L, msg);
    return take_string(L, msg, f, slot, 1);
}

/* A string field that must be present in the IR: "" when the file leaves it out. */
static tm_status ensure_string(loader *L, char **s, const char *what) {
    if (*s)
        return TM_OK;
    *s = dup_str("");
    return *s ? TM_OK : no_memory(L, what);
}

static void normalise_domain(char *domain) {
    if (domain && strcmp(domain, "ai.onnx") == 0)
        domain[0] = '\0';
}

static tm_status get_varint(loader *L, const char *msg, const tm_pb_field *f, uint64_t *v) {
    *v = 0;
    if (f->wire != TM_PB_VARINT)
        return wrong_wire(L, msg, f, TM_PB_VARINT);
    *v = f->value;
    return TM_OK;
}

static tm_status want_len(loader *L, const char *msg, const tm_pb_field *f) {
    return f->wire == TM_PB_LEN ? TM_OK : wrong_wire(L, msg, f, TM_PB_LEN);
}

/* int32 fields are varints sign-extended to 64 bits; keep the low 32 bits. */
static int32_t as_int32(uint64_t v) { return (int32_t)(uint32_t)v; }

static float as_float(uint64_t bits) {
    uint32_t u = (uint32_t)bits;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* Number of sub-byte elements per file byte: 2 for 4-bit types, 4 for 2-bit, else 0. */
static int per_byte(tm_dtype dt) {
    switch (dt) {
    case TM_INT4: case TM_UINT4: case TM_FLOAT4E2M1: return 2;
    case TM_INT2: case TM_UINT2: return 4;
    default: return 0;
    }
}

/* ---- Freeing (works on partly built structures) ------------------------------------- */

static void free_graph(tm_graph *g);

static void free_strv(char **v, int n) {
    for (int i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

static void free_tensors(tm_tensor **v, int n) {
    for (int i = 0; i < n; i++)
        tm_tensor_free(v[i]);
    free(v);
}

static void free_bytes_list(tm_bytes *v, int n) {
    for (int i = 0; i < n; i++)
        free((char *)v[i].data);
    free(v);
}

static void free_attr(tm_attr *a) {
    free(a->name);
    free(a->ref_attr_name);
    free((char *)a->s.data);
    tm_tensor_free(a->t);
    free_graph(a->g);
    free(a->floats);
    free(a->ints);
    free_bytes_list(a->strings, a->strings ? (int)a->n : 0);
    free_tensors(a->tensors, a->tensors ? (int)a->n : 0);
    if (a->graphs) {
        for (size_t i = 0; i < a->n; i++)
            free_graph(a->graphs[i]);
        free(a->graphs);
    }
}

static void free_attrs(tm_attr *v, int n) {
    for (int i = 0; i < n; i++)
        free_attr(&v[i]);
    free(v);
}

static void free_node(tm_node *n) {
    free(n->name);
    free(n->op_type);
    free(n->domain);
    free_strv(n->inputs, n->n_inputs);
    free_strv(n->outputs, n->n_outputs);
    free_attrs(n->attrs, n->n_attrs);
}

static void free_nodes(tm_node *v, int n) {
    for (int i = 0; i < n; i++)
        free_node(&v[i]);
    free(v);
}

static void free_type(tm_type *t) {
    for (int i = 0; i < t->rank && t->dims; i++)
        free(t->dims[i].param);
    free(t->dims);
    if (t->elem) {
        free_type(t->elem);
        free(t->elem);
    }
    memset(t, 0, sizeof *t);
    t->rank = -1;
}

static void free_value_infos(tm_value_info *v, int n) {
    for (int i = 0; i < n; i++) {
        free(v[i].name);
        free_type(&v[i].type);
    }
    free(v);
}

static void free_graph(tm_graph *g) {
    if (!g)
        return;
    free(g->name);
    free_nodes(g->nodes, g->n_nodes);
    for (int i = 0; i < g->n_inits; i++) {
        free(g->inits[i].name);
        tm_tensor_free(g->inits[i].tensor);
    }
    free(g->inits);
    free_value_infos(g->inputs, g->n_inputs);
    free_value_infos(g->outputs, g->n_outputs);
    free_value_infos(g->value_info, g->n_value_info);
    free(g);
}

static void free_opsets(tm_opset_import *v, int n) {
    for (int i = 0; i < n; i++)
        free(v[i].domain);
    free(v);
}

static void free_function(tm_function *f) {
    free(f->name);
    free(f->domain);
    free_strv(f->inputs, f->n_inputs);
    free_strv(f->outputs, f->n_outputs);
    free_strv(f->attr_names, f->n_attr_names);
    free_attrs(f->attr_defaults, f->n_attr_defaults);
    free_nodes(f->nodes, f->n_nodes);
    free_opsets(f->opsets, f->n_opsets);
}

void tm_onnx_model_free(tm_onnx_model *m) {
    if (!m)
        return;
    free(m->producer_name);
    free(m->producer_version);
    free(m->doc_string);
    free_opsets(m->opsets, m->n_opsets);
    for (int i = 0; i < m->n_metadata; i++) {
        free(m->metadata[i].key);
        free(m->metadata[i].value);
    }
    free(m->metadata);
    for (int i = 0; i < m->n_functions; i++)
        free_function(&m->functions[i]);
    free(m->functions);
    /* Tensors borrow from the mappings: free them before unmapping. */
    free_graph(m->graph);
    for (int i = 0; i < m->n_maps; i++) {
        if (m->maps[i].base)
            munmap(m->maps[i].base, m->maps[i].size);
        free(m->maps[i].path);
    }
    free(m->maps);
    free(m->dir);
    free(m);
}

/* ---- External data ------------------------------------------------------------------ */

/* "offset" and "length" are decimal strings. */
static int parse_decimal(tm_bytes s, uint64_t *out) {
    if (s.len == 0 || s.len > 20)
        return 0;
    uint64_t v = 0;
    for (size_t i = 0; i < s.len; i++) {
        char ch = s.data[i];
        if (ch < '0' || ch > '9')
            return 0;
        unsigned d = (unsigned)(ch - '0');
        if (v > (UINT64_MAX - d) / 10)
            return 0;
        v = v * 10 + d;
    }
    *out = v;
    return 1;
}

/* Lexical checks before touching the file system: relative, no "..", no NUL. Backslashes
 * count as separators too, since files written on Windows may use them. */
static const char *location_problem(tm_bytes loc) {
    if (loc.len == 0)
        return "is empty";
    if (memchr(loc.data, 0, loc.len))
        return "contains a NUL byte";
    if (loc.data[0] == '/' || loc.data[0] == '\\')
        return "is absolute";
    /* ONNX Runtime's marker for weights at a process address: in a file, a pointer forgery. */
    static const char ORT_MEM[] = "*/_ORT_MEM_ADDR_/*";
    if (loc.len == sizeof ORT_MEM - 1 && memcmp(loc.data, ORT_MEM, loc.len) == 0)
        return "is ONNX Runtime's in-memory address marker, which a model file may not use";
    size_t start = 0;
    for (size_t i = 0; i <= loc.len; i++) {
        if (i == loc.len || loc.data[i] == '/' || loc.data[i] == '\\') {
            if (i - start == 2 && loc.data[start] == '.' && loc.data[start + 1] == '.')
                return "escapes the model folder";
            start = i + 1;
        }
    }
    return NULL;
}

/* Maps the file at real path rp once per model; returns its index in model->maps. */
static tm_status map_external(loader *L, const char *desc, const char *rp, int *index) {
    tm_onnx_model *m = L->model;
    for (int i = 0; i < m->n_maps; i++) {
        if (strcmp(m->maps[i].path, rp) == 0) {
            *index = i;
            return TM_OK;
        }
    }
    /* O_NOFOLLOW: rp has no links left, so one appearing now is a race to refuse.
     * O_NONBLOCK: a FIFO planted in the folder must not hang the load. */
    int fd = open(rp, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return tm__fail(L->err, TM_ERR_IO, "%s: %s: cannot open external data file '%s': %s",
                        L->src, desc, rp, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return tm__fail(L->err, TM_ERR_IO, "%s: %s: external data '%s' is not a regular file",
                        L->src, desc, rp);
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return tm__fail(L->err, TM_ERR_IO, "%s: %s: external data file '%s' is too large",
                        L->src, desc, rp);
    }
    size_t size = (size_t)st.st_size;
    void *base = NULL;
    if (size > 0) {
        base = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (base != MAP_FAILED) madvise(base, size, MADV_RANDOM);
        if (base == MAP_FAILED) {
            int e = errno;
            close(fd);
            return tm__fail(L->err, TM_ERR_IO, "%s: %s: cannot map external data file '%s': %s",
                            L->src, desc, rp, strerror(e));
        }
    }
    close(fd);
    char *path = dup_str(rp);
    tm_mapping *slot = path ? PUSH(m->maps, m->n_maps) : NULL;
    if (!slot) {
        free(path);
        if (base)
            munmap(base, size);
        return no_memory(L, "external data");
    }
    slot->path = path;
    slot->base = base;
    slot->size = size;
    *index = m->n_maps - 1;
    return TM_OK;
}

/* The `need` bytes of a tensor's external data, inside a mapping of the model. */
static tm_status external_span(loader *L, const char *desc, tm_bytes location, int has_offset,
                               tm_bytes offset_s, int has_length, tm_bytes length_s,
                               size_t need, const uint8_t **out) {
    if (!L->model || !L->dir)
        return tm__fail(L->err, TM_ERR_INVALID_ARGUMENT,
                        "%s: %s uses external data, which needs the model's folder "
                        "(load from a path, or pass base_dir)", L->src, desc);
    if (!location.data)
        return tm__fail(L->err, TM_ERR_PARSE, "%s: %s: external data without a location",
                        L->src, desc);
    const char *problem = location_problem(location);
    if (problem)
        return tm__fail(L->err, TM_ERR_PARSE, "%s: %s: external data path '%.*s' %s", L->src,
                        desc, (int)(location.len > 256 ? 256 : location.len), location.data,
                        problem);
    uint64_t offset = 0, length = need;
    if (has_offset && !parse_decimal(offset_s, &offset))
        return tm__fail(L->err, TM_ERR_PARSE, "%s: %s: external data offset '%.*s' is not a number",
                        L->src, desc, (int)(offset_s.len > 64 ? 64 : offset_s.len), offset_s.data);
    if (has_length && !parse_decimal(length_s, &length))
        return tm__fail(L->err, TM_ERR_PARSE, "%s: %s: external data length '%.*s' is not a number",
                        L->src, desc, (int)(length_s.len > 64 ? 64 : length_s.len), length_s.data);
    if (length != need)
        return tm__fail(L->err, TM_ERR_PARSE,
                        "%s: %s: external data length %llu does not match the %zu bytes its "
                        "shape and type need", L->src, desc, (unsigned long long)length, need);

    if (!L->real_dir) {
        L->real_dir = realpath(L->dir, NULL);
        if (!L->real_dir)
            return tm__fail(L->err, TM_ERR_IO, "%s: cannot resolve the model folder '%s': %s",
                            L->src, L->dir, strerror(errno));
    }
    size_t dir_len = strlen(L->dir);
    char *joined = malloc(dir_len + 1 + location.len + 1);
    if (!joined)
        return no_memory(L, "external data");
    memcpy(joined, L->dir, dir_len);
    joined[dir_len] = '/';
    memcpy(joined + dir_len + 1, location.data, location.len);
    joined[dir_len + 1 + location.len] = '\0';
    char *rp = realpath(joined, NULL);
    if (!rp) {
        int e = errno;
        tm_status st = tm__fail(L->err, TM_ERR_IO, "%s: %s: external data file '%s': %s",
                                L->src, desc, joined, strerror(e));
        free(joined);
        return st;
    }
    free(joined);
    /* A symlink inside the folder may still point outside it: compare real paths. */
    size_t rd_len = strlen(L->real_dir);
    int inside = strncmp(rp, L->real_dir, rd_len) == 0 &&
                 (rd_len == 1 ? rp[1] != '\0' : rp[rd_len] == '/');
    /* hf:// hook: a Hugging Face cache snapshot links its files to ../../blobs/<etag>;
     * those blobs (of the same cached repo only) count as inside (src/hub/cache.c). */
    if (!inside)
        inside = tm_hub_is_cache_blob_of(L->real_dir, rp);
    if (!inside) {
        tm_status st = tm__fail(L->err, TM_ERR_PARSE,
                                "%s: %s: external data path '%.*s' escapes the model folder "
                                "(it resolves to '%s')", L->src, desc,
                                (int)(location.len > 256 ? 256 : location.len), location.data, rp);
        free(rp);
        return st;
    }
    int index = 0;
    tm_status st = map_external(L, desc, rp, &index);
    free(rp);
    if (st)
        return st;
    const tm_mapping *mp = &L->model->maps[index];
    if (offset > mp->size || need > mp->size - offset)
        return tm__fail(L->err, TM_ERR_PARSE,
                        "%s: %s: external data at offset %llu, %zu bytes long, lies outside "
                        "'%s' (%zu bytes)", L->src, desc, (unsigned long long)offset, need,
                        mp->path, mp->size);
    *out = mp->base ? (const uint8_t *)mp->base + offset : NULL;
    return TM_OK;
}

/* ---- TensorProto ----------------------------------------------------------------------- */

/* What the first pass over a TensorProto finds; the data is decoded in a second pass,
 * once its type and count are known and checked. */
typedef struct tensor_info {
    int64_t dims[TM_MAX_RANK];
    size_t n_dims;                /* may exceed TM_MAX_RANK: reported once the name is known */
    int64_t data_type;
    int has_segment;
    char *name;
    const uint8_t *raw;
    size_t raw_len;
    int has_raw;
    size_t counts[12];            /* elements per typed field, by field number (4..11) */
    int64_t data_location;
    tm_bytes location, offset, length;
    int has_location, has_offset, has_length;
} tensor_info;

static const char *typed_field_name(int number) {
    switch (number) {
    case 4: return "float_data";
    case 5: return "int32_data";
    case 6: return "string_data";
    case 7: return "int64_data";
    case 10: return "double_data";
    case 11: return "uint64_data";
    default: return "?";
    }
}

static tm_pb_wire typed_field_wire(int number) {
    switch (number) {
    case 4: return TM_PB_I32;
    case 10: return TM_PB_I64;
    default: return TM_PB_VARINT;
    }
}

/* The typed field that holds dt and how many entries numel elements take there. */
static int typed_field_for(tm_dtype dt, size_t numel, size_t *count) {
    int pb = per_byte(dt);
    *count = numel;
    switch (dt) {
    case TM_FLOAT: return 4;
    case TM_COMPLEX64: *count = numel * 2; return 4;
    case TM_DOUBLE: return 10;
    case TM_COMPLEX128: *count = numel * 2; return 10;
    case TM_INT64: return 7;
    case TM_UINT32: case TM_UINT64: return 11;
    case TM_STRING: return 6;
    default:
        /* int32 and narrower, bool, 16-bit floats, float8s, and packed sub-byte types */
        if (pb)
            *count = numel / (size_t)pb + (numel % (size_t)pb != 0);
        return 5;
    }
}

static void store_typed(tm_dtype dt, void *dst, size_t k, uint64_t v) {
    switch (dt) {
    case TM_FLOAT: case TM_COMPLEX64: ((float *)dst)[k] = as_float(v); break;
    case TM_DOUBLE: case TM_COMPLEX128: {
        double x;
        memcpy(&x, &v, sizeof x);
        ((double *)dst)[k] = x;
        break;
    }
    case TM_INT64: ((int64_t *)dst)[k] = (int64_t)v; break;
    case TM_UINT64: ((uint64_t *)dst)[k] = v; break;
    case TM_UINT32: ((uint32_t *)dst)[k] = (uint32_t)v; break;
    case TM_INT32: ((int32_t *)dst)[k] = as_int32(v); break;
    case TM_INT16: ((int16_t *)dst)[k] = (int16_t)as_int32(v); break;
    case TM_UINT16: case TM_FLOAT16: case TM_BFLOAT16: ((uint16_t *)dst)[k] = (uint16_t)v; break;
    case TM_INT8: ((int8_t *)dst)[k] = (int8_t)as_int32(v); break;
    case TM_BOOL: ((uint8_t *)dst)[k] = v != 0; break;
    default: ((uint8_t *)dst)[k] = (uint8_t)v; break; /* uint8, float8s, packed sub-byte */
    }
}

static tm_status parse_string_entry_span(loader *L, const tm_pb_reader *parent,
                                         const tm_pb_field *pf, tm_bytes *key, tm_bytes *value) {
    tm_pb_reader r;
    tm_pb_sub(parent, pf, &r);
    tm_pb_field f;
    int rc;
    key->data = value->data = NULL;
    key->len = value->len = 0;
    while ((rc = tm_pb_next(&r, &f)) == 1) {
        if (f.number != 1 && f.number != 2)
            continue;
        if (f.wire != TM_PB_LEN)
            return wrong_wire(L, "StringStringEntryProto", &f, TM_PB_LEN);
        tm_bytes *dst = f.number == 1 ? key : value;
        dst->data = (const char *)f.data;
        dst->len = f.len;
    }
    return rc < 0 ? pb_error(L, &r, "StringStringEntryProto") : TM_OK;
}

static int bytes_eq(tm_bytes b, const char *s) {
    size_t n = strlen(s);
    return b.data && b.len == n && memcmp(b.data, s, n) == 0;
}

static tm_status tensor_first_pass(loader *L, const tm_pb_reader *r0, tensor_info *ti) {
    static const char *const MSG = "TensorProto";
    tm_pb_reader r = *r0;
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == 1) {
        tm_status st = TM_OK;
        uint64_t v;
        switch (f.number) {
        case 1: {
            tm_pb_iter it;
            if (tm_pb_iter_init(&it, &r, &f, TM_PB_VARINT) < 0)
                return wrong_wire(L, MSG, &f, TM_PB_VARINT);
            while ((rc = tm_pb_iter_next(&it, &v)) == 1) {
                if (ti->n_dims < TM_MAX_RANK)
                    ti->dims[ti->n_dims] = (int64_t)v;
                ti->n_dims++;
            }
            if (rc < 0)
                return iter_error(L, it.error, it.error_at, MSG, f.number);
            break;
        }
        case 2:
            st = get_varint(L, MSG, &f, &v);
            ti->data_type = as_int32(v);
            break;
        case 3:
            ti->has_segment = 1;
            break;
        case 4: case 5: case 7: case 10: case 11: {
            tm_pb_iter it;
            size_t n;
            const char *e = NULL;
            size_t at = 0;
            tm_pb_wire w = typed_field_wire((int)f.number);
            if (tm_pb_iter_init(&it, &r, &f, w) < 0)
                return it.error_at == f.offset ? wrong_wire(L, MSG, &f, w)
                                                : iter_error(L, it.error, it.error_at, MSG, f.number);
            if (tm_pb_iter_count(&it, &n, &e, &at) < 0)
                return iter_error(L, e, at, MSG, f.number);
            ti->counts[f.number] += n;
            break;
        }
        case 6:
            st = want_len(L, MSG, &f);
            ti->counts[6]++;
            break;
        case 8:
            st = take_string(L, MSG, &f, &ti->name, 1);
            break;
        case 9:
            st = want_len(L, MSG, &f);
            ti->raw = f.data;
            ti->raw_len = f.len;
            ti->has_raw = 1;
            break;
        case 13: {
            tm_bytes key, value;
            if (!(st = want_len(L, MSG, &f)))
                st = parse_string_entry_span(L, &r, &f, &key, &value);
            if (st)
                break;
            if (bytes_eq(key, "location")) {
                ti->location = value;
                ti->has_location = 1;
            } else if (bytes_eq(key, "offset")) {
                ti->offset = value;
                ti->has_offset = 1;
            } else if (bytes_eq(key, "length")) {
                ti->length = value;
                ti->has_length = 1;
            }
            break;
        }
        case 14:
            st = get_varint(L, MSG, &f, &v);
            ti->data_location = (int64_t)v;
            break;
        default:
            break;
        }
        if (st)
            return st;
    }
    if (rc < 0)
        return pb_error(L, &r, MSG);
    return TM_OK;
}

/* Decodes the entries of typed field `number` into dst (tensor data, or packed bytes for
 * sub-byte types). The first pass validated every run and the total count. */
static tm_status tensor_second_pass(loader *L, const tm_pb_reader *r0, int number,
                                    tm_dtype dt, size_t count, void *dst) {
    tm_pb_reader r = *r0;
    tm_pb_field f;
    size_t k = 0;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == 1) {
        if (f.number != (uint32_t)number)
            continue;
        if (number == 6) {
            if (k >= count)
                break;
            char *s = dup_bytes(f.data, f.len);
            if (!s)
                return no_memory(L, "string_data");
            ((char **)dst)[k++] = s;
            continue;
        }
        tm_pb_iter it;
        uint64_t v;
        if (tm_pb_iter_init(&it, &r, &f, typed_field_wire(number)) < 0)
            return iter_error(L, it.error, it.error_at, "TensorProto", f.number);
        while (k < count && (rc = tm_pb_iter_next(&it, &v)) == 1)
            store_typed(dt, dst, k++, v);
        if (rc < 0)
            return iter_error(L, it.error, it.error_at, "TensorProto", f.number);
    }
    if (rc < 0)
        return pb_error(L, &r, "TensorProto");
    return TM_OK;
}

/* Builds the tensor from bytes in file layout: sub-byte types are unpacked, other
 * types are referenced in place unless the result must own its data. */
static tm_status tensor_from_bytes(loader *L, const char *desc, tm_dtype dt, int rank,
                                   const int64_t *dims, size_t numel, const uint8_t *bytes,
                                   size_t nbytes, tm_tensor **out) {
    tm_tensor *t;
    if (per_byte(dt) || L->copy_data) {
        t = tm_tensor_alloc(dt, rank, dims, NULL);
        if (!t)
            return no_memory(L, desc);
        if (per_byte(dt)) {
            if (numel)
                tm_unpack_subbyte(bytes, t->data, numel, dt);
        } else if (nbytes) {
            memcpy(t->data, bytes, nbytes);
        }
    } else {
        /* Misaligned data is referenced in place too; the runtime copies it if it must. */
        t = tm_tensor_borrow(dt, rank, dims, (void *)bytes);
        if (!t)
            return no_memory(L, desc);
    }
    *out = t;
    return TM_OK;
}

/* Parses the TensorProto in LEN field pf of parent. `what` names its role in messages
 * ("initializer", "attribute 'value' of node 'n'"). On success *out is the tensor and,
 * when name_out is non-NULL, *name_out its name (never NULL). */
static tm_status parse_tensor(loader *L, const tm_pb_reader *parent, const tm_pb_field *pf,
                              const char *what, tm_tensor **out, char **name_out) {
    tm_pb_reader r;
    tm_pb_sub(parent, pf, &r);
    tensor_info ti;
    memset(&ti, 0, sizeof ti);
    tm_status st = tensor_first_pass(L, &r, &ti);
    char desc[320];
    describe(desc, sizeof desc, what, ti.name);
    tm_tensor *t = NULL;
    uint8_t *packed = NULL;
    if (st)
        goto done;

    if (ti.has_segment) {
        st = tm__fail(L->err, TM_ERR_UNSUPPORTED, "%s: %s: segmented tensors are not supported",
                      L->src, desc);
        goto done;
    }
    if (!tm_dtype_is_valid((int)ti.data_type)) {
        st = tm__fail(L->err, TM_ERR_PARSE, "%s: %s has unknown data_type %lld", L->src, desc,
                      (long long)ti.data_type);
        goto done;
    }
    tm_dtype dt = (tm_dtype)ti.data_type;
    if (ti.n_dims > TM_MAX_RANK) {
        st = tm__fail(L->err, TM_ERR_UNSUPPORTED, "%s: %s has rank %zu; at most %d is supported",
                      L->src, desc, ti.n_dims, TM_MAX_RANK);
        goto done;
    }
    int rank = (int)ti.n_dims;
    size_t elem = tm_dtype_elem_size(dt), numel = 1, nbytes;
    for (int i = 0; i < rank; i++) {
        if (ti.dims[i] < 0) {
            st = tm__fail(L->err, TM_ERR_PARSE, "%s: %s has negative dimension %lld", L->src,
                          desc, (long long)ti.dims[i]);
            goto done;
        }
        if (!tm__mul_ok(numel, (size_t)ti.dims[i], &numel) || numel > (size_t)INT64_MAX) {
            st = tm__fail(L->err, TM_ERR_PARSE, "%s: %s: element count overflows", L->src, desc);
            goto done;
        }
    }
    if (!tm__mul_ok(numel, elem ? elem : 1, &nbytes) || nbytes > (size_t)INT64_MAX) {
        st = tm__fail(L->err, TM_ERR_PARSE, "%s: %s: byte size overflows", L->src, desc);
        goto done;
    }
    int pb = per_byte(dt);
    /* bytes in the file: sub-byte types are packed there */
    size_t file_bytes = pb ? numel / (size_t)pb + (numel % (size_t)pb != 0) : nbytes;

    if (ti.data_location != 0 && ti.data_location != 1) {
        st = tm__fail(L->err, TM_ERR_PARSE, "%s: %s has unknown data_location %lld", L->src,
                      desc, (long long)ti.data_location);
        goto done;
    }
    if (ti.data_location == 1 || ti.has_raw) {
        if (dt == TM_STRING) {
            st = tm__fail(L->err, TM_ERR_PARSE, "%s: %s: string tensors cannot use %s", L->src,
                          desc, ti.data_location == 1 ? "external data" : "raw_data");
            goto done;
        }
        const uint8_t *bytes = ti.raw;
        if (ti.data_location == 1) {
            st = external_span(L, desc, ti.location, ti.has_offset, ti.offset, ti.has_length,
                               ti.length, file_bytes, &bytes);
            if (st)
                goto done;
        } else if (ti.raw_len != file_bytes) {
            st = tm__fail(L->err, TM_ERR_PARSE,
                          "%s: %s: raw_data has %zu bytes, but %zu elements of %s need %zu",
                          L->src, desc, ti.raw_len, numel, tm_dtype_name(dt), file_bytes);
            goto done;
        }
        st = tensor_from_bytes(L, desc, dt, rank, ti.dims, numel, bytes, nbytes, &t);
        goto done;
    }

    size_t want;
    int field = typed_field_for(dt, numel, &want);
    for (int i = 4; i < 12; i++) {
        if (i != field && ti.counts[i]) {
            st = tm__fail(L->err, TM_ERR_PARSE, "%s: %s of type %s holds %s, expected %s",
                          L->src, desc, tm_dtype_name(dt), typed_field_name(i),
                          typed_field_name(field));
            goto done;
        }
    }
    if (ti.counts[field] != want) {
        if (ti.counts[field] == 0)
            st = tm__fail(L->err, TM_ERR_PARSE, "%s: %s has no data (%zu elements expected)",
                          L->src, desc, numel);
        else
            st = tm__fail(L->err, TM_ERR_PARSE,
                          "%s: %s has %zu values in %s, but %zu elements of %s need %zu",
                          L->src, desc, ti.counts[field], typed_field_name(field), numel,
                          tm_dtype_name(dt), want);
        goto done;
    }
    t = tm_tensor_alloc(dt, rank, ti.dims, NULL);
    if (!t) {
        st = no_memory(L, desc);
        goto done;
    }
    if (want) {
        void *dst = t->data;
        if (pb) {
            packed = malloc(want);
            if (!packed) {
                st = no_memory(L, desc);
                goto done;
            }
            dst = packed;
        }
        st = tensor_second_pass(L, &r, field, pb ? TM_UINT8 : dt, want, dst);
        if (!st && pb)
            tm_unpack_subbyte(packed, t->data, numel, dt);
    }

done:
    free(packed);
    if (st) {
        tm_tensor_free(t);
        free(ti.name);
        return st;
    }
    if (name_out) {
        if (!ti.name && !(ti.name = dup_str(""))) {
            tm_tensor_free(t);
            return no_memory(L, desc);
        }
        *name_out = ti.name;
    } else {
        free(ti.name);
    }
    *out = t;
    return TM_OK;
}

/* ---- SparseTensorProto (densified) ------------------------------------------------------- */

/* Indices may be referenced in place at any alignment: read them bytewise. */
static int64_t index_at(const tm_tensor *t, size_t i) {
    if (t->dtype == TM_INT64) {
        int64_t v;
        memcpy(&v, (const char *)t->data + i * sizeof v, sizeof v);
        return v;
    }
    int32_t v;
    memcpy(&v, (const char *)t->data + i * sizeof v, sizeof v);
    return v;
}

static tm_status densify(loader *L, const char *desc, tm_tensor *values, tm_tensor *indices,
                         int rank, const int64_t *dims, tm_tensor **out) {
    tm_dtype dt = values->dtype;
    uint64_t numel = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0)
            return tm__fail(L->err, TM_ERR_PARSE, "%s: %s has negative dimension %lld", L->src,
                            desc, (long long)dims[i]);
        if (__builtin_mul_overflow(numel, (uint64_t)dims[i], &numel) || numel > (uint64_t)INT64_MAX)
            return tm__fail(L->err, TM_ERR_PARSE, "%s: %s: element count overflows", L->src, desc);
    }
    uint64_t bytes;
    if (__builtin_mul_overflow(numel, (uint64_t)tm_dtype_elem_size(dt), &bytes) ||
        bytes > MAX_DENSIFIED_BYTES || (dt == TM_STRING && numel > MAX_DENSIFIED_STRINGS))
        return tm__fail(L->err, TM_ERR_UNSUPPORTED, "%s: %s is too large to densify (%llu elements)",
                        L->src, desc, (unsigned long long)numel);
    if (values->rank != 1)
        return tm__fail(L->err, TM_ERR_PARSE, "%s: %s: values must have rank 1, not %d", L->src,
                        desc, values->rank);
    size_t nnz = (size_t)values->dims[0];
    if (indices->dtype != TM_INT64 && indices->dtype != TM_INT32)
        return tm__fail(L->err, TM_ERR_PARSE, "%s: %s: indices must be int64, not %s", L->src,
                        desc, tm_dtype_name(indices->dtype));
    int linear = indices->rank == 1 && (size_t)indices->dims[0] == nnz;
    int coords = indices->rank == 2 && (size_t)indices->dims[0] == nnz &&
                 indices->dims[1] == rank;
    if (!linear && !coords)
        return tm__fail(L->err, TM_ERR_PARSE,
                        "%s: %s: indices must have shape [%zu] or [%zu, %d]", L->src, desc, nnz,
                        nnz, rank);
    tm_tensor *t = tm_tensor_alloc(dt, rank, dims, NULL);
    if (!t)
        return no_memory(L, desc);
    size_t es = tm_dtype_elem_size(dt);
    if (dt == TM_STRING) {
        /* the default value of a sparse string tensor is "" */
        for (uint64_t i = 0; i < numel; i++) {
            if (!(((char **)t->data)[i] = dup_str(""))) {
                tm_tensor_free(t);
                return no_memory(L, desc);
            }
        }
    }
    for (size_t k = 0; k < nnz; k++) {
        uint64_t at = 0;
        int64_t v = 0;
        int ok = 1;
        if (linear) {
            v = index_at(indices, k);
            ok = v >= 0 && (uint64_t)v < numel;
            at = (uint64_t)v;
        } else {
            for (int j = 0; j < rank && ok; j++) {
                v = index_at(indices, k * (size_t)rank + (size_t)j);
                ok = v >= 0 && v < dims[j];
                at = at * (uint64_t)dims[j] + (uint64_t)v;
            }
        }
        if (!ok) {
            tm_tensor_free(t);
            return tm__fail(L->err, TM_ERR_PARSE, "%s: %s: index %lld of value %zu is out of range",
                            L->src, desc, (long long)v, k);
        }
        if (dt == TM_STRING) {
            const char *s = ((char **)values->data)[k];
            char *copy = dup_str(s ? s : "");
            if (!copy) {
                tm_tensor_free(t);
                return no_memory(L, desc);
            }
            free(((char **)t->data)[at]);
            ((char **)t->data)[at] = copy;
        } else {
            memcpy((char *)t->data + at * es, (const char *)values->data + k * es, es);
        }
    }
    *out = t;
    return TM_OK;
}

static tm_status parse_sparse(loader *L, const tm_pb_reader *parent, const tm_pb_field *pf,
                              const char *what, tm_tensor **out, char **name_out) {
    static const char *const MSG = "SparseTensorProto";
    tm_pb_reader r;
    tm_pb_sub(parent, pf, &r);
    tm_tensor *values = NULL, *indices = NULL;
    char *name = NULL;
    int64_t dims[TM_MAX_RANK];
    size_t rank = 0;
    tm_pb_field f;
    tm_status st = TM_OK;
    int rc;
    char role[352];
    while (!st && (rc = tm_pb_next(&r, &f)) == 1) {
        switch (f.number) {
        case 1:
            if ((st = want_len(L, MSG, &f)))
                break;
            tm_tensor_free(values);
            values = NULL;
            free(name);
            name = NULL;
            snprintf(role, sizeof role, "values of %s", what);
            st = parse_tensor(L, &r, &f, role, &values, &name);
            break;
        case 2:
            if ((st = want_len(L, MSG, &f)))
                break;
            tm_tensor_free(indices);
            indices = NULL;
            snprintf(role, sizeof role, "indices of %s", what);
            st = parse_tensor(L, &r, &f, role, &indices, NULL);
            break;
        case 3: {
            tm_pb_iter it;
            uint64_t v;
            if (tm_pb_iter_init(&it, &r, &f, TM_PB_VARINT) < 0) {
                st = wrong_wire(L, MSG, &f, TM_PB_VARINT);
                break;
            }
            while ((rc = tm_pb_iter_next(&it, &v)) == 1) {
                if (rank < TM_MAX_RANK)
                    dims[rank] = (int64_t)v;
                rank++;
            }
            if (rc < 0)
                st = iter_error(L, it.error, it.error_at, MSG, f.number);
            break;
        }
        default:
            break;
        }
    }
    if (!st && rc < 0)
        st = pb_error(L, &r, MSG);
    char desc[352];
    describe(desc, sizeof desc, what, name);
    if (!st && (!values || !indices))
        st = tm__fail(L->err, TM_ERR_PARSE, "%s: sparse %s has no %s", L->src, desc,
                      values ? "indices" : "values");
    if (!st && rank > TM_MAX_RANK)
        st = tm__fail(L->err, TM_ERR_UNSUPPORTED, "%s: sparse %s has rank %zu; at most %d is "
                      "supported", L->src, desc, rank, TM_MAX_RANK);
    tm_tensor *dense = NULL;
    if (!st)
        st = densify(L, desc, values, indices, (int)rank, dims, &dense);
    tm_tensor_free(values);
    tm_tensor_free(indices);
    if (st) {
        free(name);
        return st;
    }
    if (name_out)
        *name_out = name;
    else
        free(name);
    *out = dense;
    return TM_OK;
}

/* ---- TypeProto ---------------------------------------------------------------------------- */

static tm_status parse_type(loader *L, const tm_pb_reader *parent, const tm_pb_field *pf,
                            tm_type *t);

static tm_status parse_dim(loader *L, const tm_pb_reader *parent, const tm_pb_field *pf,
                           tm_dim *d) {
    static const char *const MSG = "TensorShapeProto.Dimension";
    tm_pb_reader r;
    tm_pb_sub(parent, pf, &r);
    tm_pb_field f;
    int rc;
    d->value = -1;
    while ((rc = tm_pb_next(&r, &f)) == 1) {
        tm_status st = TM_OK;
        uint64_t v;
        if (f.number == 1) {
            st = get_varint(L, MSG, &f, &v);
            /* dim_value and dim_param are a oneof: the last one set wins */
            d->value = (int64_t)v < 0 ? -1 : (int64_t)v;
            free(d->param);
            d->param = NULL;
        } else if (f.number == 2) {
            st = take_string(L, MSG, &f, &d->param, 1);
            d->value = -1;
        }
        if (st)
            return st;
    }
    return rc < 0 ? pb_error(L, &r, MSG) : TM_OK;
}

static tm_status parse_shape(loader *L, const tm_pb_reader *parent, const tm_pb_field *pf,
                             tm_type *t) {
    static const char *const MSG = "TensorShapeProto";
    tm_pb_reader r;
    tm_pb_sub(parent, pf, &r);
    tm_pb_field f;
    int rc;
    for (int i = 0; i < t->rank && t->dims; i++)
        free(t->dims[i].param);
    free(t->dims);
    t->dims = NULL;
    t->rank = 0;
    while ((rc = tm_pb_next(&r, &f)) == 1) {
        if (f.number != 1)
            continue;
        tm_status st = want_len(L, MSG, &f);
        if (st)
            return st;
        tm_dim *d = PUSH(t->dims, t->rank);
        if (!d)
            return no_memory(L, MSG);
        if ((st = parse_dim(L, &r, &f, d)))
            return st;
    }
    return rc < 0 ? pb_error(L, &r, MSG) : TM_OK;
}

/* TypeProto.Tensor and TypeProto.SparseTensor: elem_type and shape. */
static tm_status parse_tensor_type(loader *L, const tm_pb_reader *parent,
                                   const tm_pb_field *pf, tm_type *t) {
    static const char *const MSG = "TypeProto.Tensor";
    tm_pb_reader r;
    tm_pb_sub(parent, pf, &r);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == 1) {
        tm_status st = TM_OK;
        uint64_t v;
        if (f.number == 1) {
            st = get_varint(L, MSG, &f, &v);
            /* an element type from a newer ONNX is "unknown" here, not an error */
            t->elem_dtype = tm_dtype_is_valid(as_int32(v)) ? as_int32(v) : 0;
        } else if (f.number == 2) {
            if (!(st = want_len(L, MSG, &f)))
                st = parse_shape(L, &r, &f, t);
        }
        if (st)
            return st;
    }
    return rc < 0 ? pb_error(L, &r, MSG) : TM_OK;
}

/* Sequence, Optional (elem_type = 1) and Map (value_type = 2): a nested TypeProto. */
static tm_status parse_wrapped_type(loader *L, const tm_pb_reader *parent,
                                    const tm_pb_field *pf, const char *msg,
                                    uint32_t elem_field, tm_type *t) {
    tm_pb_reader r;
    tm_pb_sub(parent, pf, &r);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == 1) {
        if (f.number != elem_field)
            continue;
        tm_status st = want_len(L, msg, &f);
        if (st)
            return st;
        if (t->elem) {
            free_type(t->elem);
        } else if (!(t->elem = calloc(1, sizeof *t->elem))) {
            return no_memory(L, msg);
        }
        t->elem->rank = -1;
        if ((st = parse_type(L, &r, &f, t->elem)))
            return st;
        t->elem_dtype = t->elem->elem_dtype;
    }
    return rc < 0 ? pb_error(L, &r, msg) : TM_OK;
}

static tm_status parse_type(loader *L, const tm_pb_reader *parent, const tm_pb_field *pf,
                            tm_type *t) {
    static const char *const MSG = "TypeProto";
    if (L->type_depth >= MAX_NESTING)
        return tm__fail(L->err, TM_ERR_PARSE, "%s: types nested deeper than %d levels at byte %zu",
                        L->src, MAX_NESTING, pf->offset);
    L->type_depth++;
    tm_pb_reader r;
    tm_pb_sub(parent, pf, &r);
    tm_pb_field f;
    tm_status st = TM_OK;
    int rc;
    t->rank = -1;
    while (!st && (rc = tm_pb_next(&r, &f)) == 1) {
        tm_type_kind kind;
        switch (f.number) {
        case 1: kind = TM_TYPE_TENSOR; break;
        case 4: kind = TM_TYPE_SEQUENCE; break;
        case 5: kind = TM_TYPE_MAP; break;
        case 7: kind = TM_TYPE_UNKNOWN; break; /* opaque */
        case 8: kind = TM_TYPE_SPARSE; break;
        case 9: kind = TM_TYPE_OPTIONAL; break;
        default: continue;
        }
        if ((st = want_len(L, MSG, &f)))
            break;
        free_type(t); /* a oneof: the last value wins */
        t->kind = kind;
        if (kind == TM_TYPE_TENSOR || kind == TM_TYPE_SPARSE)
            st = parse_tensor_type(L, &r, &f, t);
        else if (kind == TM_TYPE_SEQUENCE)
            st = parse_wrapped_type(L, &r, &f, "TypeProto.Sequence", 1, t);
        else if (kind == TM_TYPE_OPTIONAL)
            st = parse_wrapped_type(L, &r, &f, "TypeProto.Optional", 1, t);
        else if (kind == TM_TYPE_MAP)
            st = parse_wrapped_type(L, &r, &f, "TypeProto.Map", 2, t);
    }
    if (!st && rc < 0)
        st = pb_error(L, &r, MSG);
    L->type_depth--;
    return st;
}

static tm_status parse_value_info(loader *L, const tm_pb_reader *parent, const tm_pb_field *pf,
                                  tm_value_info *vi) {
    static const char *const MSG = "ValueInfoProto";
    tm_pb_reader r;
    tm_pb_sub(parent, pf, &r);
    tm_pb_field f;
    int rc;
    vi->type.rank = -1;
    while ((rc = tm_pb_next(&r, &f)) == 1) {
        tm_status st = TM_OK;
        if (f.number == 1) {
            st = take_string(L, MSG, &f, &vi->name, 1);
        } else if (f.number == 2) {
            if (!(st = want_len(L, MSG, &f))) {
                free_type(&vi->type);
                st = parse_type(L, &r, &f, &vi->type);
            }
        }
        if (st)
            return st;
    }
    if (rc < 0)
        return pb_error(L, &r, MSG);
    return ensure_string(L, &vi->name, MSG);
}

/* ---- AttributeProto, NodeProto, GraphProto ------------------------------------------------- */

static tm_status parse_graph(loader *L, const tm_pb_reader *parent, const tm_pb_field *pf,
                             tm_graph **out);

/* The list forms while parsing: the IR keeps one count, so only the list that matches
 * the attribute's type is kept. */
typedef struct attr_lists {
    float *floats;
    int n_floats;
    int64_t *ints;
    int n_ints;
    tm_bytes *strings;
    int n_strings;
    tm_tensor **tensors;
    int n_tensors;
    tm_graph **graphs;
    int n_graphs;
    tm_tensor **sparse;
    int n_sparse;
    tm_tensor *sparse_one;
} attr_lists;

static void free_attr_lists(attr_lists *l) {
    free(l->floats);
    free(l->ints);
    free_bytes_list(l->strings, l->n_strings);
    free_tensors(l->tensors, l->n_tensors);
    for (int i = 0; i < l->n_graphs; i++)
        free_graph(l->graphs[i]);
    free(l->graphs);
    free_tensors(l->sparse, l->n_sparse);
    tm_tensor_free(l->sparse_one);
    memset(l, 0, sizeof *l);
}

static tm_status attr_fields(loader *L, tm_pb_reader *r, const char *owner, tm_attr *a,
                             attr_lists *l, int64_t *type, int *inferred) {
    static const char *const MSG = "AttributeProto";
    tm_pb_field f;
    int rc;
    char desc[320], role[400];
    while ((rc = tm_pb_next(r, &f)) == 1) {
        tm_status st = TM_OK;
        uint64_t v;
        /* the name usually comes first, so nested errors can name the attribute */
        if (a->name)
            snprintf(desc, sizeof desc, "attribute '%s' of %s", a->name, owner);
        else
            snprintf(desc, sizeof desc, "an attribute of %s", owner);
        switch (f.number) {
        case 1: st = take_string(L, MSG, &f, &a->name, 1); break;
        case 21: st = take_string(L, MSG, &f, &a->ref_attr_name, 1); break;
        case 20:
            st = get_varint(L, MSG, &f, &v);
            *type = (int64_t)v;
            break;
        case 2:
            if (f.wire != TM_PB_I32)
                return wrong_wire(L, MSG, &f, TM_PB_I32);
            a->f = as_float(f.value);
            *inferred = TM_ATTR_FLOAT;
            break;
        case 3:
            st = get_varint(L, MSG, &f, &v);
            a->i = (int64_t)v;
            *inferred = TM_ATTR_INT;
            break;
        case 4: {
            /* attribute strings keep their bytes and are NUL-terminated as well */
            char *s = NULL;
            if ((st = take_string(L, MSG, &f, &s, 0)))
                break;
            free((char *)a->s.data);
            a->s.data = s;
            a->s.len = f.len;
            *inferred = TM_ATTR_STRING;
            break;
        }
        case 5: {
            if ((st = want_len(L, MSG, &f)))
                break;
            tm_tensor_free(a->t);
            a->t = NULL;
            snprintf(role, sizeof role, "tensor of %s", desc);
            st = parse_tensor(L, r, &f, role, &a->t, NULL);
            *inferred = TM_ATTR_TENSOR;
            break;
        }
        case 6:
            if ((st = want_len(L, MSG, &f)))
                break;
            free_graph(a->g);
            a->g = NULL;
            st = parse_graph(L, r, &f, &a->g);
            *inferred = TM_ATTR_GRAPH;
            break;
        case 22:
            if ((st = want_len(L, MSG, &f)))
                break;
            tm_tensor_free(l->sparse_one);
            l->sparse_one = NULL;
            snprintf(role, sizeof role, "sparse tensor of %s", desc);
            st = parse_sparse(L, r, &f, role, &l->sparse_one, NULL);
            *inferred = TM_ATTR_SPARSE_TENSOR;
            break;
        case 14:
            *inferred = TM_ATTR_TYPE_PROTO;
            break;
        case 7: case 8: {
            tm_pb_wire w = f.number == 7 ? TM_PB_I32 : TM_PB_VARINT;
            tm_pb_iter it;
            if (tm_pb_iter_init(&it, r, &f, w) < 0)
                return it.error_at == f.offset ? wrong_wire(L, MSG, &f, w)
                                                : iter_error(L, it.error, it.error_at, MSG, f.number);
            while ((rc = tm_pb_iter_next(&it, &v)) == 1) {
                void *slot = f.number == 7 ? PUSH(l->floats, l->n_floats)
                                           : PUSH(l->ints, l->n_ints);
                if (!slot)
                    return no_memory(L, desc);
                if (f.number == 7)
                    *(float *)slot = as_float(v);
                else
                    *(int64_t *)slot = (int64_t)v;
            }
            if (rc < 0)
                return iter_error(L, it.error, it.error_at, MSG, f.number);
            *inferred = f.number == 7 ? TM_ATTR_FLOATS : TM_ATTR_INTS;
            break;
        }
        case 9: {
            char *s = NULL;
            if ((st = take_string(L, MSG, &f, &s, 0)))
                break;
            tm_bytes *b = PUSH(l->strings, l->n_strings);
            if (!b) {
                free(s);
                return no_memory(L, desc);
            }
            b->data = s;
            b->len = f.len;
            *inferred = TM_ATTR_STRINGS;
            break;
        }
        case 10: case 23: {
            if ((st = want_len(L, MSG, &f)))
                break;
            tm_tensor **slot = f.number == 10 ? PUSH(l->tensors, l->n_tensors)
                                              : PUSH(l->sparse, l->n_sparse);
            if (!slot)
                return no_memory(L, desc);
            snprintf(role, sizeof role, "%stensor of %s", f.number == 10 ? "" : "sparse ", desc);
            st = f.number == 10 ? parse_tensor(L, r, &f, role, slot, NULL)
                                : parse_sparse(L, r, &f, role, slot, NULL);
            *inferred = f.number == 10 ? TM_ATTR_TENSORS : TM_ATTR_SPARSE_TENSORS;
            break;
        }
        case 11: {
            if ((st = want_len(L, MSG, &f)))
                break;
            tm_graph **slot = PUSH(l->graphs, l->n_graphs);
            if (!slot)
                return no_memory(L, desc);
            st = parse_graph(L, r, &f, slot);
            *inferred = TM_ATTR_GRAPHS;
            break;
        }
        case 15:
            *inferred = TM_ATTR_TYPE_PROTOS;
            break;
        default:
            break;
        }
        if (st)
            return st;
    }
    return rc < 0 ? pb_error(L, r, MSG) : TM_OK;
}

/* owner: "node 'n' (Op)" or "function 'f'", for messages. */
static tm_status parse_attr(loader *L, const tm_pb_reader *parent, const tm_pb_field *pf,
                            const char *owner, tm_attr *a) {
    tm_pb_reader r;
    tm_pb_sub(parent, pf, &r);
    attr_lists l;
    memset(&l, 0, sizeof l);
    int64_t type = 0;
    int inferred = TM_ATTR_UNDEFINED;
    char desc[320];
    tm_status st = attr_fields(L, &r, owner, a, &l, &type, &inferred);
    if (!st && (!a->name || !a->name[0]))
        st = tm__fail(L->err, TM_ERR_PARSE, "%s: %s has an attribute without a name", L->src,
                      owner);
    if (!st) {
        snprintf(desc, sizeof desc, "attribute '%s' of %s", a->name, owner);
        if (type < TM_ATTR_UNDEFINED || type > TM_ATTR_TYPE_PROTOS)
            st = tm__fail(L->err, TM_ERR_PARSE, "%s: %s has unknown type %lld", L->src, desc,
                          (long long)type);
    }
    if (st) {
        free_attr_lists(&l);
        return st;
    }
    /* IR version 1 had no type field: the field in use tells. */
    a->type = type ? (tm_attr_type)type : (tm_attr_type)inferred;
    switch (a->type) {
    case TM_ATTR_FLOATS: a->floats = l.floats; a->n = (size_t)l.n_floats; l.floats = NULL; break;
    case TM_ATTR_INTS: a->ints = l.ints; a->n = (size_t)l.n_ints; l.ints = NULL; break;
    case TM_ATTR_STRINGS:
        a->strings = l.strings;
        a->n = (size_t)l.n_strings;
        l.strings = NULL;
        l.n_strings = 0;
        break;
    case TM_ATTR_TENSORS:
        a->tensors = l.tensors;
        a->n = (size_t)l.n_tensors;
        l.tensors = NULL;
        l.n_tensors = 0;
        break;
    case TM_ATTR_SPARSE_TENSORS:
        a->tensors = l.sparse;
        a->n = (size_t)l.n_sparse;
        l.sparse = NULL;
        l.n_sparse = 0;
        break;
    case TM_ATTR_GRAPHS:
        a->graphs = l.graphs;
        a->n = (size_t)l.n_graphs;
        l.graphs = NULL;
        l.n_graphs = 0;
        break;
    case TM_ATTR_SPARSE_TENSOR:
        tm_tensor_free(a->t);
        a->t = l.sparse_one;
        l.sparse_one = NULL;
        break;
    case TM_ATTR_STRING:
        if (!a->s.data && !(a->s.data = dup_str(""))) {
            free_attr_lists(&l);
            return no_memory(L, desc);
        }
        break;
    default:
        break;
    }
    free_attr_lists(&l);
    return TM_OK;
}

static tm_status parse_node(loader *L, const tm_pb_reader *parent, const tm_pb_field *pf,
                            tm_node *n) {
    static const char *const MSG = "NodeProto";
    tm_pb_reader r;
    tm_pb_sub(parent, pf, &r);
    tm_pb_field f;
    int rc;
    /* Attributes may come before the name and op_type: read those first, so that every
     * attribute error can say which node it is about. */
    while ((rc = tm_pb_next(&r, &f)) == 1) {
        tm_status st = TM_OK;
        switch (f.number) {
        case 1: st = push_string(L, MSG, &f, &n->inputs, &n->n_inputs); break;
        case 2: st = push_string(L, MSG, &f, &n->outputs, &n->n_outputs); break;
        case 3: st = take_string(L, MSG, &f, &n->name, 1); break;
        case 4: st = take_string(L, MSG, &f, &n->op_type, 1); break;
        case 7: st = take_string(L, MSG, &f, &n->domain, 1); break;
        case 5: st = want_len(L, MSG, &f); break;
        default: break;
        }
        if (st)
            return st;
    }
    if (rc < 0)
        return pb_error(L, &r, MSG);
    tm_status st;
    if ((st = ensure_string(L, &n->name, MSG)) || (st = ensure_string(L, &n->domain, MSG)))
        return st;
    normalise_domain(n->domain);
    if (!n->op_type || !n->op_type[0])
        return tm__fail(L->err, TM_ERR_PARSE, "%s: node '%s' at byte %zu has no op_type",
                        L->src, n->name, pf->offset);
    char owner[256];
    snprintf(owner, sizeof owner, "node '%s' (%s)", n->name, n->op_type);
    tm_pb_sub(parent, pf, &r);
    while ((rc = tm_pb_next(&r, &f)) == 1) {
        if (f.number != 5)
            continue;
        tm_attr *a = PUSH(n->attrs, n->n_attrs);
        if (!a)
            return no_memory(L, owner);
        if ((st = parse_attr(L, &r, &f, owner, a)))
            return st;
    }
    return rc < 0 ? pb_error(L, &r, MSG) : TM_OK;
}

static tm_status graph_fields(loader *L, tm_pb_reader *r, tm_graph *g) {
    static const char *const MSG = "GraphProto";
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(r, &f)) == 1) {
        tm_status st = TM_OK;
        switch (f.number) {
        case 1: {
            if ((st = want_len(L, MSG, &f)))
                break;
            tm_node *n = PUSH(g->nodes, g->n_nodes);
            st = n ? parse_node(L, r, &f, n) : no_memory(L, MSG);
            break;
        }
        case 2: st = take_string(L, MSG, &f, &g->name, 1); break;
        case 5: case 15: {
            if ((st = want_len(L, MSG, &f)))
                break;
            tm_initializer *in = PUSH(g->inits, g->n_inits);
            if (!in) {
                st = no_memory(L, MSG);
                break;
            }
            st = f.number == 5 ? parse_tensor(L, r, &f, "initializer", &in->tensor, &in->name)
                               : parse_sparse(L, r, &f, "sparse initializer", &in->tensor,
                                              &in->name);
            if (!st && (!in->name || !in->name[0]))
                st = tm__fail(L->err, TM_ERR_PARSE, "%s: an initializer at byte %zu has no name",
                              L->src, f.offset);
            break;
        }
        case 11: case 12: case 13: {
            if ((st = want_len(L, MSG, &f)))
                break;
            tm_value_info *vi = f.number == 11 ? PUSH(g->inputs, g->n_inputs)
                              : f.number == 12 ? PUSH(g->outputs, g->n_outputs)
                                               : PUSH(g->value_info, g->n_value_info);
            st = vi ? parse_value_info(L, r, &f, vi) : no_memory(L, MSG);
            break;
        }
        default:
            break;
        }
        if (st)
            return st;
    }
    if (rc < 0)
        return pb_error(L, r, MSG);
    return ensure_string(L, &g->name, MSG);
}

static int is_plain_constant(const tm_node *n) {
    return strcmp(n->op_type, "Constant") == 0 && !n->domain[0] && n->n_inputs == 0 &&
           n->n_outputs == 1 && n->outputs[0][0];
}

typedef struct named_index {
    const char *name;
    int index;
} named_index;

static int by_name_then_index(const void *a, const void *b) {
    const named_index *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->index > y->index) - (x->index < y->index);
}

/* Graphs shrunk by hand sometimes define one name by two Constant nodes (ONNX Runtime's
 * transformers test model gpt2_past.onnx redefines a head count after the original). ONNX
 * Runtime turns every Constant into an initializer before it runs anything, and of equal
 * names the last one wins; so here the last definition takes the place of the first and
 * the others go. Other duplicate definitions are left to the interpreter. */
static tm_status merge_duplicate_constants(loader *L, tm_graph *g) {
    int n = 0;
    for (int i = 0; i < g->n_nodes; i++) n += is_plain_constant(&g->nodes[i]);
    if (n < 2) return TM_OK;
    named_index *idx = malloc((size_t)n * sizeof *idx);
    uint8_t *drop = calloc((size_t)g->n_nodes, 1);
    if (!idx || !drop) {
        free(idx);
        free(drop);
        return no_memory(L, "GraphProto");
    }
    n = 0;
    for (int i = 0; i < g->n_nodes; i++)
        if (is_plain_constant(&g->nodes[i]))
            idx[n++] = (named_index){g->nodes[i].outputs[0], i};
    qsort(idx, (size_t)n, sizeof *idx, by_name_then_index);
    int dropped = 0;
    for (int a = 0; a < n;) {
        int b = a + 1;
        while (b < n && !strcmp(idx[a].name, idx[b].name)) b++;
        if (b - a > 1) {
            tm_node last = g->nodes[idx[b - 1].index];
            g->nodes[idx[b - 1].index] = g->nodes[idx[a].index];
            g->nodes[idx[a].index] = last;
            for (int k = a + 1; k < b; k++) drop[idx[k].index] = 1;
            dropped += b - a - 1;
        }
        a = b;
    }
    int w = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        if (drop[i]) free_node(&g->nodes[i]);
        else g->nodes[w++] = g->nodes[i];
    }
    g->n_nodes -= dropped;
    free(idx);
    free(drop);
    return TM_OK;
}

static tm_status parse_graph(loader *L, const tm_pb_reader *parent, const tm_pb_field *pf,
                             tm_graph **out) {
    if (L->graph_depth >= MAX_NESTING)
        return tm__fail(L->err, TM_ERR_PARSE,
                        "%s: subgraphs nested deeper than %d levels at byte %zu", L->src,
                        MAX_NESTING, pf->offset);
    tm_graph *g = calloc(1, sizeof *g);
    if (!g)
        return no_memory(L, "GraphProto");
    tm_pb_reader r;
    tm_pb_sub(parent, pf, &r);
    L->graph_depth++;
    tm_status st = graph_fields(L, &r, g);
    L->graph_depth--;
    if (!st) st = merge_duplicate_constants(L, g);
    if (st) {
        free_graph(g);
        return st;
    }
    *out = g;
    return TM_OK;
}

/* ---- ModelProto, FunctionProto ---------------------------------------------------------- */

static tm_status parse_opset(loader *L, const tm_pb_reader *parent, const tm_pb_field *pf,
                             tm_opset_import *o) {
    static const char *const MSG = "OperatorSetIdProto";
    tm_pb_reader r;
    tm_pb_sub(parent, pf, &r);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == 1) {
        tm_status st = TM_OK;
        uint64_t v;
        if (f.number == 1) {
            st = take_string(L, MSG, &f, &o->domain, 1);
        } else if (f.number == 2) {
            st = get_varint(L, MSG, &f, &v);
            o->version = (int64_t)v;
        }
        if (st)
            return st;
    }
    if (rc < 0)
        return pb_error(L, &r, MSG);
    tm_status st = ensure_string(L, &o->domain, MSG);
    normalise_domain(o->domain);
    return st;
}

static tm_status parse_metadata(loader *L, const tm_pb_reader *parent, const tm_pb_field *pf,
                                tm_metadata *kv) {
    static const char *const MSG = "StringStringEntryProto";
    tm_pb_reader r;
    tm_pb_sub(parent, pf, &r);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == 1) {
        tm_status st = TM_OK;
        if (f.number == 1)
            st = take_string(L, MSG, &f, &kv->key, 0);
        else if (f.number == 2)
            st = take_string(L, MSG, &f, &kv->value, 0);
        if (st)
            return st;
    }
    if (rc < 0)
        return pb_error(L, &r, MSG);
    tm_status st = ensure_string(L, &kv->key, MSG);
    return st ? st : ensure_string(L, &kv->value, MSG);
}

static tm_status parse_function(loader *L, const tm_pb_reader *parent, const tm_pb_field *pf,
                                tm_function *fn) {
    static const char *const MSG = "FunctionProto";
    tm_pb_reader r;
    tm_pb_sub(parent, pf, &r);
    tm_pb_field f;
    int rc;
    /* name and domain first, for messages about the body */
    while ((rc = tm_pb_next(&r, &f)) == 1) {
        tm_status st = TM_OK;
        switch (f.number) {
        case 1: st = take_string(L, MSG, &f, &fn->name, 1); break;
        case 10: st = take_string(L, MSG, &f, &fn->domain, 1); break;
        case 4: st = push_string(L, MSG, &f, &fn->inputs, &fn->n_inputs); break;
        case 5: st = push_string(L, MSG, &f, &fn->outputs, &fn->n_outputs); break;
        case 6: st = push_string(L, MSG, &f, &fn->attr_names, &fn->n_attr_names); break;
        default: break;
        }
        if (st)
            return st;
    }
    if (rc < 0)
        return pb_error(L, &r, MSG);
    tm_status st;
    if ((st = ensure_string(L, &fn->name, MSG)) || (st = ensure_string(L, &fn->domain, MSG)))
        return st;
    normalise_domain(fn->domain);
    char owner[256];
    snprintf(owner, sizeof owner, "function '%s'", fn->name);
    tm_pb_sub(parent, pf, &r);
    while ((rc = tm_pb_next(&r, &f)) == 1) {
        st = TM_OK;
        switch (f.number) {
        case 7: {
            if ((st = want_len(L, MSG, &f)))
                break;
            tm_node *n = PUSH(fn->nodes, fn->n_nodes);
            st = n ? parse_node(L, &r, &f, n) : no_memory(L, owner);
            break;
        }
        case 9: {
            if ((st = want_len(L, MSG, &f)))
                break;
            tm_opset_import *o = PUSH(fn->opsets, fn->n_opsets);
            st = o ? parse_opset(L, &r, &f, o) : no_memory(L, owner);
            break;
        }
        case 11: {
            if ((st = want_len(L, MSG, &f)))
                break;
            tm_attr *a = PUSH(fn->attr_defaults, fn->n_attr_defaults);
            st = a ? parse_attr(L, &r, &f, owner, a) : no_memory(L, owner);
            break;
        }
        default:
            break;
        }
        if (st)
            return st;
    }
    return rc < 0 ? pb_error(L, &r, MSG) : TM_OK;
}

static tm_status parse_model(loader *L, const void *data, size_t size, tm_onnx_model *m) {
    static const char *const MSG = "ModelProto";
    m->bytes = data;
    m->n_bytes = size;
    tm_pb_reader r;
    tm_pb_init(&r, data, size);
    tm_pb_field f;
    int rc;
    while ((rc = tm_pb_next(&r, &f)) == 1) {
        tm_status st = TM_OK;
        uint64_t v;
        switch (f.number) {
        case 1:
            st = get_varint(L, MSG, &f, &v);
            m->ir_version = (int64_t)v;
            break;
        case 2: st = take_string(L, MSG, &f, &m->producer_name, 0); break;
        case 3: st = take_string(L, MSG, &f, &m->producer_version, 0); break;
        case 5:
            st = get_varint(L, MSG, &f, &v);
            m->model_version = (int64_t)v;
            break;
        case 6: st = take_string(L, MSG, &f, &m->doc_string, 0); break;
        case 7:
            if ((st = want_len(L, MSG, &f)))
                break;
            if (m->graph) {
                /* protobuf would merge the two; no exporter writes that */
                st = tm__fail(L->err, TM_ERR_PARSE, "%s: ModelProto.graph appears twice (byte %zu)",
                              L->src, f.offset);
                break;
            }
            st = parse_graph(L, &r, &f, &m->graph);
            break;
        case 8: {
            if ((st = want_len(L, MSG, &f)))
                break;
            tm_opset_import *o = PUSH(m->opsets, m->n_opsets);
            st = o ? parse_opset(L, &r, &f, o) : no_memory(L, MSG);
            break;
        }
        case 14: {
            if ((st = want_len(L, MSG, &f)))
                break;
            tm_metadata *kv = PUSH(m->metadata, m->n_metadata);
            st = kv ? parse_metadata(L, &r, &f, kv) : no_memory(L, MSG);
            break;
        }
        case 25: {
            if ((st = want_len(L, MSG, &f)))
                break;
            tm_function *fn = PUSH(m->functions, m->n_functions);
            st = fn ? parse_function(L, &r, &f, fn) : no_memory(L, MSG);
            break;
        }
        default:
            break;
        }
        if (st)
            return st;
    }
    if (rc < 0)
        return pb_error(L, &r, MSG);
    if (!m->graph)
        return tm__fail(L->err, TM_ERR_PARSE, "%s: the model has no graph", L->src);
    tm_status st;
    if ((st = ensure_string(L, &m->producer_name, MSG)) ||
        (st = ensure_string(L, &m->producer_version, MSG)) ||
        (st = ensure_string(L, &m->doc_string, MSG)))
        return st;
    return TM_OK;
}

/* ---- Entry points ----------------------------------------------------------------------- */

/* The folder part of path: "a/b" for "a/b/m.onnx", "." for "m.onnx", "/" for "/m.onnx". */
static char *folder_of(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash)
        return dup_str(".");
    size_t n = (size_t)(slash - path);
    while (n > 0 && path[n - 1] == '/')
        n--;
    return n == 0 ? dup_str("/") : dup_bytes(path, n);
}

int tm_onnx_load_file(const char *path, tm_onnx_model **out, tm_error *err) {
    if (!path || !out)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT,
                        "tm_onnx_load_file: path and out must not be NULL");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tm__fail(err, TM_ERR_IO, "cannot open model '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return tm__fail(err, TM_ERR_IO, "model '%s' is not a regular file", path);
    }
    if (sb.st_size == 0) {
        close(fd);
        return tm__fail(err, TM_ERR_PARSE, "model '%s' is an empty file", path);
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        close(fd);
        return tm__fail(err, TM_ERR_IO, "model '%s' is too large to map", path);
    }
    size_t size = (size_t)sb.st_size;
    void *base = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    /* Parsing touches only the small headers between weights: without readahead and
     * fault-around, the weights' pages stay unmapped until a run reads them. */
    if (base != MAP_FAILED) madvise(base, size, MADV_RANDOM);
    close(fd);
    if (base == MAP_FAILED)
        return tm__fail(err, TM_ERR_IO, "cannot map model '%s': %s", path, strerror(map_errno));

    tm_onnx_model *m = calloc(1, sizeof *m);
    char *path_copy = dup_str(path);
    tm_mapping *mp = m && path_copy ? PUSH(m->maps, m->n_maps) : NULL;
    if (!mp) {
        munmap(base, size);
        free(path_copy);
        tm_onnx_model_free(m);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory loading '%s'", path);
    }
    mp->path = path_copy;
    mp->base = base;
    mp->size = size;
    if (!(m->dir = folder_of(path))) {
        tm_onnx_model_free(m);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory loading '%s'", path);
    }
    loader L = {.err = err, .src = path, .model = m, .dir = m->dir};
    tm_status st = parse_model(&L, base, size, m);
    free(L.real_dir);
    if (st) {
        tm_onnx_model_free(m);
        return st;
    }
    /* Runs read weights sequentially: readahead is welcome again. */
    for (int i = 0; i < m->n_maps; i++) madvise(m->maps[i].base, m->maps[i].size, MADV_NORMAL);
    *out = m;
    return TM_OK;
}

int tm_onnx_load_buffer(const void *data, size_t size, const char *base_dir,
                        tm_onnx_model **out, tm_error *err) {
    if (!out || (!data && size))
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT,
                        "tm_onnx_load_buffer: data and out must not be NULL");
    static const uint8_t empty[1];
    tm_onnx_model *m = calloc(1, sizeof *m);
    if (!m || (base_dir && !(m->dir = dup_str(base_dir)))) {
        tm_onnx_model_free(m);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory loading a model buffer");
    }
    loader L = {.err = err, .src = "<buffer>", .model = m, .dir = m->dir};
    tm_status st = parse_model(&L, data ? data : empty, size, m);
    free(L.real_dir);
    if (st) {
        tm_onnx_model_free(m);
        return st;
    }
    *out = m;
    return TM_OK;
}

int tm_onnx_parse_tensor(const void *data, size_t size, tm_tensor **out, tm_error *err) {
    if (!out || (!data && size))
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT,
                        "tm_onnx_parse_tensor: data and out must not be NULL");
    static const uint8_t empty[1];
    loader L = {.err = err, .src = "<TensorProto>", .copy_data = 1};
    tm_pb_reader root;
    tm_pb_init(&root, data ? data : empty, size);
    tm_pb_field whole = {.wire = TM_PB_LEN, .data = root.p, .len = size};
    return parse_tensor(&L, &root, &whole, "tensor", out, NULL);
}

/* SequenceProto of tensors (sparse ones densified). The array is never NULL. */
static tm_status parse_sequence_msg(loader *L, const tm_pb_reader *parent,
                                    const tm_pb_field *pf, tm_tensor ***out, int *n) {
    static const char *const MSG = "SequenceProto";
    tm_pb_reader r;
    tm_pb_sub(parent, pf, &r);
    tm_pb_field f;
    tm_tensor **v = NULL;
    int count = 0, rc;
    tm_status st = TM_OK;
    uint64_t elem_type = 0;
    while (!st && (rc = tm_pb_next(&r, &f)) == 1) {
        switch (f.number) {
        case 2:
            st = get_varint(L, MSG, &f, &elem_type);
            break;
        case 3: case 4: {
            if ((st = want_len(L, MSG, &f)))
                break;
            tm_tensor **slot = PUSH(v, count);
            if (!slot) {
                st = no_memory(L, MSG);
                break;
            }
            st = f.number == 3 ? parse_tensor(L, &r, &f, "sequence element", slot, NULL)
                               : parse_sparse(L, &r, &f, "sequence element", slot, NULL);
            break;
        }
        case 5: case 6: case 7:
            st = tm__fail(L->err, TM_ERR_UNSUPPORTED,
                          "%s: sequences of sequences, maps or optionals are not supported",
                          L->src);
            break;
        default:
            break;
        }
    }
    if (!st && rc < 0)
        st = pb_error(L, &r, MSG);
    if (!st && elem_type != 0 && elem_type != 1 && elem_type != 2)
        st = tm__fail(L->err, TM_ERR_UNSUPPORTED,
                      "%s: sequences of element type %llu are not supported (tensors only)",
                      L->src, (unsigned long long)elem_type);
    if (!st && !v && !(v = calloc(1, sizeof *v)))
        st = no_memory(L, MSG);
    if (st) {
        free_tensors(v, count);
        return st;
    }
    *out = v;
    *n = count;
    return TM_OK;
}

int tm_onnx_parse_sequence(const void *data, size_t size, tm_tensor ***out, int *n,
                           tm_error *err) {
    if (!out || !n || (!data && size))
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT,
                        "tm_onnx_parse_sequence: data, out and n must not be NULL");
    static const uint8_t empty[1];
    loader L = {.err = err, .src = "<SequenceProto>", .copy_data = 1};
    tm_pb_reader root;
    tm_pb_init(&root, data ? data : empty, size);
    tm_pb_field whole = {.wire = TM_PB_LEN, .data = root.p, .len = size};
    return parse_sequence_msg(&L, &root, &whole, out, n);
}

/* An empty optional gives *out = NULL and *n = 0; a present one a non-NULL array (a
 * present, empty sequence has n = 0). */
int tm_onnx_parse_optional(const void *data, size_t size, tm_tensor ***out, int *n,
                           int *is_sequence, tm_error *err) {
    static const char *const MSG = "OptionalProto";
    if (!out || !n || (!data && size))
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT,
                        "tm_onnx_parse_optional: data, out and n must not be NULL");
    static const uint8_t empty[1];
    loader L = {.err = err, .src = "<OptionalProto>", .copy_data = 1};
    tm_pb_reader r;
    tm_pb_init(&r, data ? data : empty, size);
    tm_pb_field f;
    tm_tensor **v = NULL;
    int count = 0, seq = 0, rc;
    uint64_t elem_type = 0;
    tm_status st = TM_OK;
    while (!st && (rc = tm_pb_next(&r, &f)) == 1) {
        switch (f.number) {
        case 2:
            st = get_varint(&L, MSG, &f, &elem_type);
            break;
        case 3: case 4: {
            if ((st = want_len(&L, MSG, &f)))
                break;
            free_tensors(v, count);
            v = calloc(1, sizeof *v);
            count = 0;
            seq = 0;
            if (!v) {
                st = no_memory(&L, MSG);
                break;
            }
            count = 1;
            st = f.number == 3 ? parse_tensor(&L, &r, &f, "optional value", &v[0], NULL)
                               : parse_sparse(&L, &r, &f, "optional value", &v[0], NULL);
            break;
        }
        case 5:
            if ((st = want_len(&L, MSG, &f)))
                break;
            free_tensors(v, count);
            v = NULL;
            count = 0;
            seq = 1;
            st = parse_sequence_msg(&L, &r, &f, &v, &count);
            break;
        case 6: case 7:
            st = tm__fail(L.err, TM_ERR_UNSUPPORTED,
                          "%s: optionals of maps or optionals are not supported", L.src);
            break;
        default:
            break;
        }
    }
    if (!st && rc < 0)
        st = pb_error(&L, &r, MSG);
    if (!st && elem_type > 5)
        st = tm__fail(L.err, TM_ERR_PARSE, "%s: unknown optional element type %llu", L.src,
                      (unsigned long long)elem_type);
    if (!st && (elem_type == 4 || elem_type == 5))
        st = tm__fail(L.err, TM_ERR_UNSUPPORTED,
                      "%s: optionals of maps or optionals are not supported", L.src);
    if (st) {
        free_tensors(v, count);
        return st;
    }
    *out = v;
    *n = count;
    if (is_sequence)
        *is_sequence = seq || elem_type == 3;
    return TM_OK;
}
