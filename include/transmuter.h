/* transmuter.h — the one public header of Transmuter, a runtime for ONNX models.
 *
 * A model is loaded once (tm_model_load), then run either eagerly, node by node
 * (tm_run_eager), or through a plan compiled for fixed input shapes (tm_plan_create,
 * tm_session_run), or through tm_model_run, which keeps plans cached by input shapes.
 *
 * Conventions: every fallible call returns a tm_status; details go to an optional
 * caller-owned tm_error. On error, out-parameters are left untouched and nothing leaks.
 * Every *_free accepts NULL. There is no global state: models and plans are immutable
 * and may be shared by threads; a session (per-run state) belongs to one thread at a time.
 */
#ifndef TRANSMUTER_H
#define TRANSMUTER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TM_VERSION_MAJOR 0
#define TM_VERSION_MINOR 1
#define TM_VERSION_PATCH 0
#define TM_VERSION_STRING "0.1.0"

/* The version of the library linked at run time, e.g. "0.1.0". */
const char *tm_version(void);

/* ---- Status and errors ------------------------------------------------------------ */

typedef enum tm_status {
    TM_OK = 0,
    TM_ERR_INVALID_ARGUMENT = 1, /* a bad argument to an API call */
    TM_ERR_IO = 2,               /* a file could not be opened, read or written */
    TM_ERR_PARSE = 3,            /* malformed protobuf, .npy or model structure */
    TM_ERR_UNSUPPORTED = 4,      /* an operator, attribute or dtype we do not run */
    TM_ERR_SHAPE = 5,            /* shapes that do not fit an operator */
    TM_ERR_DTYPE = 6,            /* a wrong element type */
    TM_ERR_NO_MEMORY = 7,        /* an allocation failed or a size overflowed */
    TM_ERR_RUNTIME = 8,          /* a value went wrong while running (an index out of range) */
    TM_ERR_NOT_FOUND = 9,        /* no such input, output or file */
    TM_ERR_NETWORK = 10          /* fetching a remote model failed */
} tm_status;

/* Filled on error when the caller passes one. `node`, `op` and `value` name where the
 * error happened when that is known, and are "" otherwise. */
typedef struct tm_error {
    tm_status code;
    char node[128];
    char op[64];
    char value[128];
    char message[1024];          /* a full sentence that already includes node/op/value */
} tm_error;

/* A short name for a status, e.g. "unsupported". */
const char *tm_status_name(tm_status s);

/* ---- Element types (ONNX TensorProto numbering) ----------------------------------- */

typedef enum tm_dtype {
    TM_UNDEFINED = 0, TM_FLOAT = 1, TM_UINT8 = 2, TM_INT8 = 3, TM_UINT16 = 4, TM_INT16 = 5,
    TM_INT32 = 6, TM_INT64 = 7, TM_STRING = 8, TM_BOOL = 9, TM_FLOAT16 = 10, TM_DOUBLE = 11,
    TM_UINT32 = 12, TM_UINT64 = 13, TM_COMPLEX64 = 14, TM_COMPLEX128 = 15, TM_BFLOAT16 = 16,
    TM_FLOAT8E4M3FN = 17, TM_FLOAT8E4M3FNUZ = 18, TM_FLOAT8E5M2 = 19, TM_FLOAT8E5M2FNUZ = 20,
    TM_UINT4 = 21, TM_INT4 = 22, TM_FLOAT4E2M1 = 23, TM_FLOAT8E8M0 = 24, TM_UINT2 = 25,
    TM_INT2 = 26
} tm_dtype;

/* "float32", "int64", ... ; "undefined" for unknown values. */
const char *tm_dtype_name(tm_dtype dt);

/* ---- Memory ------------------------------------------------------------------------ */

/* An injectable allocator for tensors, plans, arenas and sessions. alloc returns memory
 * aligned to at least 64 bytes or NULL. */
typedef struct tm_allocator {
    void *(*alloc)(void *user, size_t size);
    void (*free)(void *user, void *ptr);
    void *user;
} tm_allocator;

/* ---- Tensors ----------------------------------------------------------------------- */

/* A dense row-major tensor. Sub-byte types (int4, uint4, int2, uint2, float4e2m1) hold
 * one element per byte (the low bits). Strings hold an array of NUL-terminated char *. */
typedef struct tm_tensor tm_tensor;

/* A new tensor owning zero-filled data. NULL if the size overflows or memory runs out. */
tm_tensor *tm_tensor_new(tm_dtype dtype, int rank, const int64_t *dims);
/* A tensor over caller-owned memory (at least numel * element size bytes), which must
 * outlive the tensor. Not for strings. */
tm_tensor *tm_tensor_wrap(tm_dtype dtype, int rank, const int64_t *dims, void *data);
void tm_tensor_free(tm_tensor *t);
tm_dtype tm_tensor_dtype(const tm_tensor *t);
int tm_tensor_rank(const tm_tensor *t);
const int64_t *tm_tensor_dims(const tm_tensor *t);
int64_t tm_tensor_numel(const tm_tensor *t);
void *tm_tensor_data(tm_tensor *t);
const void *tm_tensor_data_const(const tm_tensor *t);
size_t tm_tensor_nbytes(const tm_tensor *t);
/* Sets element i of a string tensor (copied). */
tm_status tm_tensor_set_string(tm_tensor *t, int64_t i, const char *s);

/* ---- Models ------------------------------------------------------------------------ */

typedef struct tm_model tm_model;

typedef struct tm_load_options {
    size_t size;                 /* sizeof(tm_load_options): fields are only appended */
    tm_dtype compute_type;       /* TM_UNDEFINED: as exported; TM_FLOAT: f16/bf16 run in f32 */
    int threads;                 /* intra-op threads; 0 = all cores */
    const tm_allocator *allocator; /* NULL: malloc; must outlive the model */
    size_t plan_cache_limit;     /* plans kept per model by tm_model_run; 0 = 16 */
} tm_load_options;

void tm_load_options_default(tm_load_options *opts);

/* Loads a model from a file path. Weights are memory-mapped, never copied at load;
 * external data files are resolved inside the model's folder only. A model using
 * operators we do not have still loads: tm_model_missing_ops lists them, and running
 * fails with that list. */
tm_status tm_model_load(const char *source, const tm_load_options *opts, tm_model **out,
                        tm_error *err);
/* Loads from memory; `data` must outlive the model. External data, if any, is looked up
 * in `base_dir` (NULL: not allowed). */
tm_status tm_model_load_buffer(const void *data, size_t size, const char *base_dir,
                               const tm_load_options *opts, tm_model **out, tm_error *err);
void tm_model_free(tm_model *model);

/* A graph input or output as the model declares it. Symbolic dims have dims[i] == -1 and
 * dim_params[i] set (or NULL when the dim is simply unknown). rank is -1 when unknown. */
typedef struct tm_value_desc {
    const char *name;
    tm_dtype dtype;
    int rank;
    const int64_t *dims;
    const char *const *dim_params;
} tm_value_desc;

int tm_model_n_inputs(const tm_model *model);
int tm_model_n_outputs(const tm_model *model);
/* Fills *desc; the strings and arrays belong to the model. */
tm_status tm_model_input(const tm_model *model, int i, tm_value_desc *desc);
tm_status tm_model_output(const tm_model *model, int i, tm_value_desc *desc);
/* Index of the input/output called name, or -1. */
int tm_model_input_index(const tm_model *model, const char *name);
int tm_model_output_index(const tm_model *model, const char *name);

/* Operators of the model (subgraphs included) that Transmuter cannot run, as
 * "domain:op@opset" separated by ", ", or NULL when there are none. Owned by the model. */
const char *tm_model_missing_ops(const tm_model *model);

/* Imported opsets: domain ("" for ai.onnx) and version of entry i. */
int tm_model_n_opsets(const tm_model *model);
tm_status tm_model_opset(const tm_model *model, int i, const char **domain, int64_t *version);

/* Op census: distinct (domain, op_type) pairs of the graph and its subgraphs, with counts. */
int tm_model_n_op_types(const tm_model *model);
tm_status tm_model_op_type(const tm_model *model, int i, const char **domain,
                           const char **op_type, int *count);

/* ---- Eager execution --------------------------------------------------------------- */

/* Called after each node has run, with its outputs (tensors, or NULL for outputs that are
 * omitted or not tensors). The tensors are valid only during the call. Return non-zero
 * to stop the run (tm_run_eager then returns TM_ERR_RUNTIME with "stopped by callback"). */
typedef int (*tm_node_callback)(void *user, const char *node_name, const char *op_type,
                                int n_outputs, const char *const *output_names,
                                const tm_tensor *const *outputs);

typedef struct tm_run_options {
    size_t size;                 /* sizeof(tm_run_options) */
    tm_node_callback on_node;    /* eager runs only; NULL for none */
    void *user;
} tm_run_options;

void tm_run_options_default(tm_run_options *opts);

/* Runs the model node by node. inputs are matched to graph inputs by name; every graph
 * input without an initializer must be given. outputs must have room for
 * tm_model_n_outputs entries: each receives a new tensor owned by the caller (NULL for an
 * output that is an empty optional or a sequence). */
tm_status tm_run_eager(tm_model *model, int n_inputs, const char *const *names,
                       const tm_tensor *const *inputs, tm_tensor **outputs,
                       const tm_run_options *opts, tm_error *err);

/* ---- Compiled execution ------------------------------------------------------------ */

typedef struct tm_plan tm_plan;
typedef struct tm_session tm_session;

typedef struct tm_plan_options {
    size_t size;                 /* sizeof(tm_plan_options) */
    int n_static;                /* inputs whose values are fixed by this plan */
    const char *const *static_names;
    const tm_tensor *const *static_values;
} tm_plan_options;

void tm_plan_options_default(tm_plan_options *opts);

/* Compiles a plan for the shapes and dtypes of `inputs` (their data is not read, except
 * for static inputs). Shape arithmetic is folded, `If` with a known condition is folded,
 * memory is planned into one arena. Where a value is needed on the host that the plan
 * cannot know, the plan runs its prefix compiled and the rest node by node ("graph
 * break"); tm_plan_n_breaks tells how many. */
tm_status tm_plan_create(tm_model *model, int n_inputs, const char *const *names,
                         const tm_tensor *const *inputs, const tm_plan_options *opts,
                         tm_plan **out, tm_error *err);
void tm_plan_free(tm_plan *plan);
int tm_plan_n_kernels(const tm_plan *plan);
int tm_plan_n_breaks(const tm_plan *plan);
size_t tm_plan_arena_bytes(const tm_plan *plan);
/* Bytes of constants (weights) the plan's kernels read in one run, counting each constant
 * once; a gather's table counts only for the rows one run reads (a guess from the index
 * count). What a memory-bound run (one decode step) must stream; 0 for NULL. */
size_t tm_plan_weight_bytes(const tm_plan *plan);
/* The shape of output i as planned (rank -1 when it is only known after a graph break). */
tm_status tm_plan_output(const tm_plan *plan, int i, tm_value_desc *desc);

/* Per-run state of a plan: its arena. Create one per thread. */
tm_status tm_session_create(tm_plan *plan, tm_session **out, tm_error *err);
void tm_session_free(tm_session *session);

/* Runs the plan. inputs must have the shapes the plan was made for (static inputs may be
 * omitted). For each output, a non-NULL outputs[i] is a caller tensor of the planned
 * shape and dtype that receives the value (then the run allocates nothing); a NULL entry
 * receives a new tensor owned by the caller. */
tm_status tm_session_run(tm_session *session, int n_inputs, const char *const *names,
                         const tm_tensor *const *inputs, tm_tensor **outputs, tm_error *err);

/* Runs through a plan cached per input-shape signature (and static values), creating it
 * the first time. Thread-safe; outputs as in tm_session_run. */
tm_status tm_model_run(tm_model *model, int n_inputs, const char *const *names,
                       const tm_tensor *const *inputs, tm_tensor **outputs,
                       const tm_plan_options *opts, tm_error *err);

#ifdef __cplusplus
}
#endif
#endif
