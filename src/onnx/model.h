/* The in-memory form of an ONNX ModelProto: graphs, nodes, attributes, initializers.
 * Built by model.c from the protobuf reader (pb.c); weights point into the mapped file.
 * Not the lowering or execution: see lower.h and ../core/ctx.h. */
#ifndef TM_ONNX_MODEL_H
#define TM_ONNX_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "../core/tensor.h"

typedef struct tm_graph tm_graph;

/* AttributeProto.AttributeType values. */
typedef enum {
    TM_ATTR_UNDEFINED = 0, TM_ATTR_FLOAT = 1, TM_ATTR_INT = 2, TM_ATTR_STRING = 3,
    TM_ATTR_TENSOR = 4, TM_ATTR_GRAPH = 5, TM_ATTR_FLOATS = 6, TM_ATTR_INTS = 7,
    TM_ATTR_STRINGS = 8, TM_ATTR_TENSORS = 9, TM_ATTR_GRAPHS = 10,
    TM_ATTR_SPARSE_TENSOR = 11, TM_ATTR_SPARSE_TENSORS = 12, TM_ATTR_TYPE_PROTO = 13,
    TM_ATTR_TYPE_PROTOS = 14
} tm_attr_type;

typedef struct {
    const char *data;             /* not NUL-terminated when it points into the file */
    size_t len;
} tm_bytes;

typedef struct tm_attr {
    char *name;
    char *ref_attr_name;          /* non-NULL inside function bodies: value comes from the caller */
    tm_attr_type type;
    float f;
    int64_t i;
    tm_bytes s;
    tm_tensor *t;                 /* TENSOR, SPARSE_TENSOR (densified) */
    tm_graph *g;
    size_t n;                     /* element count of the list forms */
    float *floats;
    int64_t *ints;
    tm_bytes *strings;
    tm_tensor **tensors;
    tm_graph **graphs;
} tm_attr;

typedef struct tm_node {
    char *name;                   /* may be "" */
    char *op_type;
    char *domain;                 /* "" for ai.onnx ("ai.onnx" is normalised to "") */
    char **inputs;                /* "" marks an omitted optional input */
    int n_inputs;
    char **outputs;               /* "" marks an omitted optional output */
    int n_outputs;
    tm_attr *attrs;
    int n_attrs;
} tm_node;

/* TypeProto, flattened: tensors, sequences and optionals of tensors. */
typedef enum { TM_TYPE_UNKNOWN = 0, TM_TYPE_TENSOR, TM_TYPE_SEQUENCE, TM_TYPE_OPTIONAL,
               TM_TYPE_MAP, TM_TYPE_SPARSE } tm_type_kind;

typedef struct tm_dim {
    int64_t value;                /* -1 when symbolic or unknown */
    char *param;                  /* dim_param, or NULL */
} tm_dim;

typedef struct tm_type {
    tm_type_kind kind;
    int elem_dtype;               /* tm_dtype of the tensor (innermost for sequence/optional), 0 if unknown */
    int rank;                     /* -1 when the shape is unknown */
    tm_dim *dims;
    struct tm_type *elem;         /* element type of sequence/optional, else NULL */
} tm_type;

typedef struct tm_value_info {
    char *name;
    tm_type type;
} tm_value_info;

typedef struct tm_initializer {
    char *name;
    tm_tensor *tensor;            /* data points into the mapped file when possible */
} tm_initializer;

struct tm_graph {
    char *name;
    tm_node *nodes;
    int n_nodes;
    tm_initializer *inits;
    int n_inits;
    tm_value_info *inputs;        /* graph inputs (may include initializer names in old IR) */
    int n_inputs;
    tm_value_info *outputs;
    int n_outputs;
    tm_value_info *value_info;
    int n_value_info;
};

typedef struct tm_opset_import {
    char *domain;                 /* "" for ai.onnx */
    int64_t version;
} tm_opset_import;

typedef struct tm_function {
    char *name;
    char *domain;
    char **inputs;
    int n_inputs;
    char **outputs;
    int n_outputs;
    char **attr_names;            /* declared attribute names (no default) */
    int n_attr_names;
    tm_attr *attr_defaults;       /* attribute_proto: attributes with defaults */
    int n_attr_defaults;
    tm_node *nodes;
    int n_nodes;
    tm_opset_import *opsets;
    int n_opsets;
} tm_function;

typedef struct tm_metadata {
    char *key;
    char *value;
} tm_metadata;

/* A mapped file (the model or one external-data file). */
typedef struct tm_mapping {
    char *path;
    void *base;
    size_t size;
} tm_mapping;

typedef struct tm_onnx_model {
    int64_t ir_version;
    char *producer_name;
    char *producer_version;
    char *doc_string;
    int64_t model_version;
    tm_opset_import *opsets;
    int n_opsets;
    tm_metadata *metadata;
    int n_metadata;
    tm_function *functions;
    int n_functions;
    tm_graph *graph;
    char *dir;                    /* folder of the model file: external data is confined to it */
    tm_mapping *maps;             /* [0] is the model file itself when loaded from a path */
    int n_maps;
    const uint8_t *bytes;         /* the serialized ModelProto (maps[0] or the caller's buffer), */
    size_t n_bytes;               /* which the writer (write.c) copies unchanged fields from */
} tm_onnx_model;

/* Parse a model from a file path (mmap) or from a caller buffer (which must outlive the model).
 * On failure returns NULL-model with a message in err (see ../core/status.h). */
struct tm_error;
int tm_onnx_load_file(const char *path, tm_onnx_model **out, struct tm_error *err);
int tm_onnx_load_buffer(const void *data, size_t size, const char *base_dir,
                        tm_onnx_model **out, struct tm_error *err);
void tm_onnx_model_free(tm_onnx_model *m);

/* Parse one serialized TensorProto (as in the backend tests' .pb files); the result owns
 * its data (copied). */
int tm_onnx_parse_tensor(const void *data, size_t size, tm_tensor **out, struct tm_error *err);

/* SequenceProto / OptionalProto files of the backend tests: a list of tensors (elem_type
 * tensor only). For an optional, n is 0 (no value) or 1; *is_none reports an empty optional. */
int tm_onnx_parse_sequence(const void *data, size_t size, tm_tensor ***out, int *n,
                           struct tm_error *err);
int tm_onnx_parse_optional(const void *data, size_t size, tm_tensor ***out, int *n,
                           int *is_sequence, struct tm_error *err);

#endif
