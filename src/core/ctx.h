/* The execution context through which lowerings call primitives. In eager mode a call
 * runs its kernel at once; in trace mode it is recorded for a plan, unless all its inputs
 * are known constants, in which case it is evaluated on the spot (constant folding).
 * Not the plan itself (plan.c) nor the ONNX side (../onnx/lower.h). */
#ifndef TM_CORE_CTX_H
#define TM_CORE_CTX_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include "tensor.h"
#include "status.h"

/* Internal status: a traced value was needed on the host (graph break). */
#define TM_ERR_NEEDS_HOST ((tm_status)100)

typedef int32_t tm_val;          /* index of a value in its context */
#define TM_NONE ((tm_val)-1)

typedef enum { TM_MODE_EAGER = 0, TM_MODE_TRACE = 1 } tm_mode;

/* ---- The primitive table ----------------------------------------------------------- */

enum {
#define TM_PRIM(ID, NAME, NIN, NOUT, IMPL, FLAGS) TM_P_##ID,
#include "prims.def"
#undef TM_PRIM
    TM_P__COUNT
};

/* Flags of a primitive. */
#define TM_PF_VIEW 1u        /* output 0 may share input 0's buffer (reshape); kernel copies otherwise */
#define TM_PF_ELEMWISE 2u    /* same-shape elementwise (fusion candidate) */
#define TM_PF_RANDOM 4u      /* not folded as a constant (random draws) */
#define TM_PF_NO_FOLD 8u     /* not folded as a constant: it must run every time (per-run work) */
#define TM_PF_SHARED_FOLD 16u /* folded once per model through tm_fold_cache (weight packing) */
#define TM_PF_QUANTIZE 32u   /* quantizes its float input: every output is cut from the gradient */
#define TM_PF_NO_GRAD 64u    /* a fused primitive without a gradient rule: passes do not make it
                              * over a value the tape tracks (passes.c) */
#define TM_PF_KEPT 128u      /* its outputs keep their contents between runs of a session: a
                              * plan gives them arena space of their own, zeroed when the
                              * session is made (plan.c) */

#define TM_ARGS_MAX_I 64
/* Non-tensor parameters of a primitive call (axes, perms, pads, dtypes, scalars).
 * Each primitive documents its layout in its family file. */
typedef struct tm_args {
    int64_t i[TM_ARGS_MAX_I];
    double f[4];
} tm_args;

/* What is known of a value: dtype and dims always (after its producer's shape rule),
 * data when it is known (eager: always; trace: constants). */
typedef struct tm_vinfo {
    tm_dtype dtype;
    int rank;
    int64_t dims[TM_MAX_RANK];
    tm_tensor *data;
    int32_t producer;     /* recorded node index, or -1 */
    int32_t input_index;  /* >= 0: input of the plan being traced */
    uint8_t owned;        /* the context frees data */
    uint8_t released;
    uint16_t pinned;      /* count of graph names bound to it: not freed while > 0 */
    uint8_t tracked;      /* depends on a differentiated value (taping, see autodiff.h) */
    uint8_t cut;          /* depends on one only through a quantizing cast: no gradient */
    uint8_t kept;         /* read by the eager tape: not released before the backward */
    uint8_t read;         /* trace: an input of a recorded node, which the plan keeps */
    int32_t param;        /* >= 0: the model parameter it reads (trace: a plan entry) */
    const void *origin;   /* borrowed data (an initializer), or what a copy was made of */
    uint8_t misaligned;   /* data is the model's bytes, not aligned to the element size:
                           * read it through tm__val_host (an aligned copy, made once) */
    int32_t folded_by;    /* trace with fold_log: the logged fold that computed it, or -1 */
} tm_vinfo;

/* One kernel call. Kernels allocate nothing: temporary memory is `scratch`, sized by the
 * shape rule. On failure they return a status and fill err. */
typedef struct tm_kcall {
    int prim;
    const tm_args *a;
    const tm_tensor *const *in;
    int nin;
    tm_tensor *const *out;
    int nout;
    void *scratch;
    size_t scratch_bytes;
    tm_error *err;
    int threads;
    struct tm_pool *pool;  /* intra-op threads (backends/cpu/pool.h); NULL: this thread only */
    uint64_t run_seed;     /* fresh for every run (tm__run_seed): unseeded random draws mix it in */
} tm_kcall;

typedef struct tm_ctx tm_ctx;

/* Folds that outlive one trace: a TM_PF_SHARED_FOLD primitive whose inputs are all known
 * asks the context's cache (the model's, runtime/fold_cache.c) for its result, so that
 * every plan and eager run of a model shares one packed copy of each weight. */
typedef struct tm_fold_cache tm_fold_cache;
struct tm_fold_cache {
    /* The result of prim on these inputs (output info out), made with tm_run_kernel on c
     * when absent; it belongs to the cache. NULL without an error when the inputs cannot
     * be keyed (the caller folds as usual); NULL with c's error set on failure. */
    const tm_tensor *(*fold)(tm_fold_cache *fc, tm_ctx *c, int prim, const struct tm_args *a,
                             const tm_tensor *const *in, int nin, const struct tm_vinfo *out,
                             size_t scratch);
    /* Says that [p, p + n) of a model's weight is read no more through this address (a
     * plan-time pass packed its own copy): the cache gives the whole pages of a mapped
     * file back (they fault in again, unchanged, should anything read them). NULL: no-op. */
    void (*release)(tm_fold_cache *fc, const void *p, size_t n);
    /* An aligned copy of [p, p + n) when it lies in one of the model's mapped files (the
     * raw data of an initializer inside the protobuf, at any byte offset), made once and
     * kept as long as the model: every trace and plan reads the same copy. NULL when the
     * bytes are not the model's, or on no memory (the caller copies them itself). */
    const void *(*aligned)(tm_fold_cache *fc, const void *p, size_t n);
};

/* Shape rule: fill out[0..nout) dtype/rank/dims from the inputs and args; set *scratch to
 * the bytes of temporary memory the kernel needs. Report errors with tm_ctx_fail. */
typedef tm_status (*tm_shape_fn)(tm_ctx *c, int prim, const tm_args *a,
                                 const tm_vinfo *const *in, int nin, tm_vinfo *out, int nout,
                                 size_t *scratch);
typedef tm_status (*tm_kernel_fn)(const tm_kcall *k);

typedef struct tm_prim_info {
    const char *name;
    int nin;              /* -1: variadic */
    int nout;
    tm_shape_fn shape;
    tm_kernel_fn kernel;
    unsigned flags;
} tm_prim_info;

extern const tm_prim_info tm_prims[TM_P__COUNT];

/* A recorded primitive call (trace mode). */
typedef struct tm_rnode {
    int prim;
    int nin, nout;
    tm_val *in;
    tm_val out[4];
    tm_args args;
    size_t scratch;
    char *where;          /* "node 'X' (Op)" of the ONNX node that made it, for errors */
} tm_rnode;

struct tm_ctx {
    tm_mode mode;
    const tm_allocator *allocator;
    tm_vinfo *vals;
    int32_t n_vals, cap_vals;
    tm_rnode *nodes;
    int32_t n_nodes, cap_nodes;
    tm_error err;
    tm_status status;     /* sticky: once set, every call returns TM_NONE */
    tm_val needs_host;    /* the value whose data a graph break needs */
    const char *where;    /* current ONNX node, for errors and recorded nodes */
    char where_node[128], where_op[64];
    int threads;
    struct tm_pool *pool; /* eager kernels' thread pool (the model's), or NULL */
    tm_dtype compute_type;/* TM_UNDEFINED or TM_FLOAT (see tm_load_options) */
    void *scratch;        /* eager kernels' scratch, grown as needed */
    size_t scratch_cap;
    uint64_t rng_state;   /* seeded random primitives */
    uint64_t run_seed;    /* this context's run (tm__run_seed), for kernels' tm_kcall.run_seed */
    /* Taping (autodiff.h): while `tape` is set, a call with a tracked input is recorded
     * even when its inputs are known (and, eagerly, also run), and its differentiable
     * outputs are tracked. */
    int tape;
    char *cut_where;      /* the first quantizing cast of a tracked value (malloc'd) */
    /* The model's trainable parameters (NULL: none), which the interpreter imports with
     * tm_val_param instead of as constants; track_params[i] set: parameter i is tracked. */
    const struct tm_param_table *params;
    const uint8_t *track_params;
    tm_fold_cache *fold_cache; /* the model's shared folds, or NULL (fold per trace) */
    int dequantize_nbits; /* tm_load_options.dequantize_nbits */
    int nbits_int8;       /* tm_load_options.nbits_int8, TM_NBITS_INT8 resolved */
    struct tm_pack_cache *pack_cache; /* trace: the model's packed weights, shared by its plans */
    /* Trace with fold_log set: every small fold (constant inputs, run at once) is also
     * logged in folds[], apart from the recorded nodes (passes never see it), so that a
     * plan serving several shapes can compute at run time the constants that turn out to
     * depend on the input sizes (a slice of a rotary table, a causal mask: plan.c's
     * generalization). Its inputs are kept until the context goes. */
    int fold_log;
    /* Plans with tm_plan_options.kv_in_place: passes/kv_append.c keeps KV caches in place
     * and marks here the graph inputs it took in the (B, S, H, D) layout (1), and in
     * float16 (2: kv_dtype TM_FLOAT16 over a float32 cache). */
    int kv_in_place;
    tm_dtype kv_dtype;
    uint8_t *kv_bshd;
    int n_kv_bshd;
    tm_rnode *folds;
    int32_t n_folds, cap_folds;
};

/* Where a model's parameters live: one tensor per parameter (the store an optimizer
 * updates in place), and which initializer of the main graph each one replaces. */
typedef struct tm_param_table {
    int n;
    tm_tensor *const *values;
    int n_inits;
    const int *of_init;   /* per main-graph initializer: its parameter, or -1 */
} tm_param_table;

void tm_ctx_init(tm_ctx *c, tm_mode mode, const tm_allocator *a);
/* A new value on every call, in every thread and process (an atomic counter mixed with the
 * process id and the time): the per-run seed of random draws that no seed fixes. */
uint64_t tm__run_seed(void);
/* The next node seed of the context's generator (53 bits, as a double for RANDOM's f[2]):
 * distinct per random node lowered, so that unseeded nodes draw distinct streams. */
double tm_ctx_node_seed(tm_ctx *c);
void tm_ctx_destroy(tm_ctx *c);
/* Sets the sticky error (first one wins); returns code. Names the current ONNX node. */
tm_status tm_ctx_fail(tm_ctx *c, tm_status code, const char *fmt, ...) TM_PRINTF(3, 4);
static inline int tm_ctx_ok(const tm_ctx *c) { return c->status == TM_OK; }
/* Sets which ONNX node the following calls belong to. */
void tm_ctx_set_where(tm_ctx *c, const char *node_name, const char *op_type);

/* ---- Making values ----------------------------------------------------------------- */

/* A known value. borrow: the tensor stays the caller's (initializers, inputs); else the
 * context takes ownership. */
tm_val tm_val_tensor(tm_ctx *c, tm_tensor *t, int borrow);
/* An unknown value of given dtype and dims (a plan input under trace). */
tm_val tm_val_symbolic(tm_ctx *c, tm_dtype dt, int rank, const int64_t *dims, int input_index);
/* Model parameter `index` whose storage is t: under trace an unknown value that plans
 * read from the parameter store at run time (never folded), eagerly t itself (borrowed).
 * Tracked when c->track_params asks for it. */
tm_val tm_val_param(tm_ctx *c, tm_tensor *t, int index);
/* The dtypes gradients flow through (f32, f64, f16, bf16). */
int tm_dtype_is_differentiable(tm_dtype dt);
/* Scalars and small constants. */
tm_val tm_const_scalar(tm_ctx *c, tm_dtype dt, double v);
tm_val tm_const_i64s(tm_ctx *c, const int64_t *v, int64_t n);  /* 1-D int64 */
tm_val tm_const_fill(tm_ctx *c, tm_dtype dt, int rank, const int64_t *dims, double v);

/* ---- Calling primitives ------------------------------------------------------------ */

/* Runs or records a primitive with one output. Returns TM_NONE on error (the context's
 * error is then set) or when an input is TM_NONE. */
tm_val tm_prim(tm_ctx *c, int prim, const tm_val *in, int nin, const tm_args *a);
/* Same with several outputs; returns the status. */
tm_status tm_prim_n(tm_ctx *c, int prim, const tm_val *in, int nin, const tm_args *a,
                    tm_val *out, int nout);

/* ---- Reading values ---------------------------------------------------------------- */

/* TM_NONE (an absent input, or the result of a failed call) reads as an empty value of
 * rank 0 and undefined dtype, so that lowerings may chain calls and check once without
 * reading outside the table (a hostile model can leave any input out). */
extern const tm_vinfo tm__none_vinfo;
static inline const tm_vinfo *tm_vi(const tm_ctx *c, tm_val v) {
    return v >= 0 && v < c->n_vals ? &c->vals[v] : &tm__none_vinfo;
}
static inline tm_dtype tm_vdtype(const tm_ctx *c, tm_val v) { return tm_vi(c, v)->dtype; }
static inline int tm_vrank(const tm_ctx *c, tm_val v) { return tm_vi(c, v)->rank; }
static inline const int64_t *tm_vdims(const tm_ctx *c, tm_val v) { return tm_vi(c, v)->dims; }
int64_t tm_vnumel(const tm_ctx *c, tm_val v);
/* The data of v if it is known now, else NULL (no error). */
const tm_tensor *tm_vdata(const tm_ctx *c, tm_val v);
/* The data of v (known), aligned for typed reads: a value holding misaligned bytes of the
 * model (vinfo.misaligned) is switched to the model's aligned copy of them, or to a copy
 * of its own. NULL with c failed on no memory. Checks and pointer comparisons may use
 * vals[v].data as it is; whatever reads its elements goes through this. */
const tm_tensor *tm__val_host(tm_ctx *c, tm_val v);
/* The data of v, needed on the host. Under trace with v unknown: sets TM_ERR_NEEDS_HOST
 * (a graph break) and returns NULL. */
const tm_tensor *tm_host(tm_ctx *c, tm_val v);
/* Host value as int64s (any integer dtype); returns count or -1 (error set). */
int64_t tm_host_i64(tm_ctx *c, tm_val v, int64_t *out, int64_t max);
/* Host scalar as double; returns 0 on success. */
int tm_host_f64(tm_ctx *c, tm_val v, double *out);

/* Frees v's data in eager mode if nothing pins it (used at the end of a node). */
void tm_val_release(tm_ctx *c, tm_val v);

/* Runs one primitive directly on tensors (constant folding, eager mode, tests). */
tm_status tm_run_kernel(tm_ctx *c, int prim, const tm_args *a, const tm_tensor *const *in,
                        int nin, tm_tensor *const *out, int nout, size_t scratch);

/* Shape helpers shared by shape rules. */
tm_status tm_broadcast_dims(tm_ctx *c, int ra, const int64_t *da, int rb, const int64_t *db,
                            int *rout, int64_t *dout);

#endif
