/* The runtime objects behind the public handles: tm_model (a loaded ONNX model with
 * its input/output descriptions), eager runs, and plans (plan.c). Also the internal
 * entry points the CLI uses for sequence/optional values, which the public API does
 * not carry. Not the interpreter (../onnx/lower.c) nor the kernels. */
#ifndef TM_RUNTIME_H
#define TM_RUNTIME_H

#include <pthread.h>
#include "../onnx/lower.h"
#include "../backends/cpu/pool.h"

/* An ONNX value crossing the API: a tensor, a sequence of tensors, or none. */
typedef enum { TM_X_NONE = 0, TM_X_TENSOR = 1, TM_X_SEQUENCE = 2 } tm_xkind;
typedef struct tm_xval {
    tm_xkind kind;
    tm_tensor *t;
    tm_tensor **seq;
    int n;
    tm_dtype seq_dtype;
} tm_xval;
void tm_xval_clear(tm_xval *x);   /* frees what it owns */

typedef struct tm_plan_cache_entry tm_plan_cache_entry;

struct tm_model {
    tm_onnx_model *onnx;
    tm_load_options opts;
    tm_allocator allocator_copy;
    char *missing;                 /* missing ops, or NULL */
    int n_in;                      /* graph inputs that are not initializers */
    int *in_graph_index;
    tm_value_desc *in_desc;
    tm_value_desc *out_desc;
    int n_out;
    int n_types;
    char **type_domain, **type_op;
    int *type_count;
    pthread_mutex_t cache_lock;
    tm_pool *pool;                 /* opts.threads threads for kernels; NULL: one thread */
    tm_plan_cache_entry *cache;    /* most recently used first */
    size_t n_cache;
    struct tm_pack_cache *packed;  /* weights packed by plan-time passes (pack_cache.h) */
};

/* Matches named inputs to graph inputs: fills ovals (one per graph input) in ctx, after
 * checking dtypes and ranks against the model's declarations. */
tm_status tm__bind_inputs(tm_model *m, tm_ctx *c, int n, const char *const *names,
                          const tm_xval *inputs, tm_oval *ovals, tm_error *err);
/* compute_type f32: graph inputs enter as float32, and outputs declared float16/bfloat16
 * are cast back to their declared dtype. No-ops otherwise. */
void tm__inputs_to_compute_type(tm_ctx *c, tm_oval *ovals, int n);
void tm__restore_output_dtypes(const tm_model *m, tm_ctx *c, tm_oval *outs);

/* Copies an oval of ctx out as an xval the caller owns. */
tm_status tm__export_oval(tm_ctx *c, const tm_oval *ov, tm_xval *out, tm_error *err);

/* Eager run on xvals. outputs: tm_model_n_outputs entries, filled. */
tm_status tm__run_eager_x(tm_model *m, int n, const char *const *names, const tm_xval *inputs,
                          tm_xval *outputs, const tm_run_options *opts, tm_error *err);

/* Plan creation and run on xvals (sequence inputs make the plan break at node 0). */
tm_status tm__plan_create_x(tm_model *m, int n, const char *const *names,
                            const tm_xval *inputs, const tm_plan_options *opts, tm_plan **out,
                            tm_error *err);
tm_status tm__session_run_x(tm_session *s, int n, const char *const *names,
                            const tm_xval *inputs, tm_xval *outputs, tm_error *err);

/* Allocation through the model's allocator. */
void *tm__model_alloc(const tm_model *m, size_t size);
void tm__model_free_mem(const tm_model *m, void *p);

#endif
