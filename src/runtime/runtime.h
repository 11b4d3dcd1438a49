/* The runtime objects behind the public handles: tm_model (a loaded ONNX model with
 * its input/output descriptions), eager runs, and plans (plan.c). Also the internal
 * entry points for sequence/optional values, which the CLI's test-onnx and the public
 * tm_value calls (values.c) go through. Not the interpreter (../onnx/lower.c) nor the
 * kernels. */
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

/* A trainable parameter: a copy of a float initializer that optimizers update in place. */
typedef struct tm_param {
    char *name;                    /* the initializer's (owned by the IR) */
    tm_tensor *value;              /* owned, through the model's allocator */
    int init;                      /* its index among the main graph's initializers */
} tm_param;

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
    struct tm_gen_family *families;/* tm_model_run's tries at plans serving many sizes */
    size_t n_runs, n_plans, n_generic, n_generic_failed, n_generic_runs;  /* tm_plan_stats */
    int n_params;                  /* trainable parameters (params.c) */
    tm_param *params;
    void *param_slab;              /* their data, huge pages (no custom allocator); or NULL */
    tm_tensor **param_values;      /* param_table's arrays */
    int *init_param;
    tm_param_table param_table;
    tm_fold_cache *fold_cache;     /* packed weights shared by plans and runs; NULL: none */
    struct tm_pack_cache *packed;  /* weights packed by plan-time passes (pack_cache.h) */
    struct dec_shared *dec_plans;  /* plans shared by the model's decoders (decoder.c) */
    size_t n_dec_plans;
};

/* Frees the plans the model's decoders shared (decoder.c); at the model's end. */
void tm__decoder_plans_free(tm_model *m);
/* Row `row` of a decoder of B sequences takes row src_row of src (another decoder of the
 * same model, caches kept in place, in the same precision), from its first attended
 * position: its cache is copied in, ending at the batch's last position (the batch grows,
 * its rows moving up, when that is longer), the positions before it masked. src is
 * unchanged. */
tm_status tm__decoder_put_row(tm_decoder *d, int64_t row, tm_decoder *src, int64_t src_row,
                              tm_error *err);
/* Row `row` holds no sequence any more: from the next step it attends to its newest
 * position alone (a one-token sequence at position 0, whatever its token), until
 * tm__decoder_put_row fills it. */
void tm__decoder_free_row(tm_decoder *d, int64_t row);

/* ---- Parameters (params.c) ---------------------------------------------------------- */

/* Selects and copies the parameters at load (opts.trainable); fails on a name that
 * cannot be a parameter. */
tm_status tm__params_init(tm_model *m, tm_error *err);
void tm__params_free(tm_model *m);
/* The table a context imports parameters through (NULL when there are none). */
const tm_param_table *tm__params_table(const tm_model *m);
/* Marks in chosen[0..n_params) the parameters that names (exact or glob) select (n == 0:
 * all) and counts them; fails naming what cannot be differentiated and why. */
tm_status tm__params_select(const tm_model *m, int n, const char *const *names,
                            uint8_t *chosen, int *count, tm_error *err);

/* ---- Gradients (grad.c) ------------------------------------------------------------- */

/* What a gradient plan adds to a trace: resolved options and parameters. */
typedef struct tm_grad_spec {
    tm_grad_options opts;
    uint8_t *chosen;               /* per model parameter */
    int n_chosen;
    int *param_of_grad;            /* per gradient: model parameter */
    int out_index;                 /* the graph output the loss reads */
} tm_grad_spec;

/* Resolves options against the model (the loss's output, the parameters). */
tm_status tm__grad_spec_init(tm_model *m, const tm_grad_options *o, tm_grad_spec *spec,
                             tm_error *err);
void tm__grad_spec_free(tm_grad_spec *spec);
/* Plan creation with a gradient spec (plan.c): inputs are the graph's, target the loss's
 * target tensor (NULL for TM_LOSS_OUTPUT), named spec->opts.target in the plan. */
tm_status tm__plan_create_grad(tm_model *m, int n, const char *const *names,
                               const tm_xval *inputs, const tm_tensor *target,
                               const tm_plan_options *opts, const tm_grad_spec *spec,
                               tm_plan **out, tm_error *err);
/* Builds the loss on outs[spec->out_index] with the target value, then differentiates:
 * fills results[0] = loss, results[1..1+n_chosen) = gradients. Runs the plan-time passes
 * first when passes is set (a trace). Errors go to c. */
tm_status tm__grad_build(tm_ctx *c, const tm_model *m, const tm_grad_spec *spec,
                         const tm_oval *outs, tm_val target, int passes, tm_val *results);

/* The model's shared folds (fold_cache.c): create (NULL when out of memory: each trace
 * then folds for itself; the folded tensors come from `allocator`, the model's) and free
 * (before the model's mappings go). */
tm_fold_cache *tm__fold_cache_create(const tm_onnx_model *onnx, const tm_allocator *allocator);
void tm__fold_cache_free(tm_fold_cache *fc);

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
