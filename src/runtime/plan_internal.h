/* The insides of plans and sessions, shared by plan.c (building, running, the plan cache)
 * and generic.c (plans that serve changing input sizes). Not API: runtime.h and
 * transmuter.h are. */
#ifndef TM_RUNTIME_PLAN_INTERNAL_H
#define TM_RUNTIME_PLAN_INTERNAL_H

#include <pthread.h>
#include "runtime.h"

/* PV_FIT (plans serving several sizes, generic.c): a small integer constant the
 * lowerings made from the sizes (a shape, a slice's end), whose elements are fitted to the
 * sizes; each session holds its own copy, written when its sizes change. */
enum { PV_INPUT, PV_CONST, PV_ARENA, PV_ALIAS, PV_PARAM, PV_KEPT, PV_FIT };

typedef struct plan_value {
    int kind;
    tm_dtype dtype;
    int rank;
    int64_t dims[TM_MAX_RANK];
    size_t nbytes;
    int input;            /* PV_INPUT: plan input index; PV_PARAM: model parameter */
    tm_tensor *constant;  /* PV_CONST */
    int const_owned;
    size_t offset;        /* PV_ARENA, PV_KEPT (an arena value placed by place_arena) */
    int alias_of;         /* PV_ALIAS: plan value whose buffer it shares */
} plan_value;

typedef struct plan_kernel {
    int prim;
    int skip;             /* its output is a view of its input (generic.c): not run */
    tm_args args;
    int nin, nout;
    int *in;              /* plan value indices */
    int out[4];
    size_t scratch;
    char *where;
} plan_kernel;

typedef struct plan_live {
    char *name;
    tm_ovkind kind;
    int pv;               /* tensor */
    int *seq;             /* sequence */
    int n;
    tm_dtype seq_dtype;
    int optional;         /* an empty optional (kind TM_OV_NONE) */
} plan_live;

struct tm_plan {
    tm_model *model;
    int n_values;
    plan_value *values;
    int n_kernels;
    plan_kernel *kernels;
    size_t arena_bytes, scratch_bytes;
    size_t kept_bytes;    /* the arena's start: outputs of TM_PF_KEPT kernels */
    int n_graph_inputs;
    int *input_pv;        /* per graph input: plan value, or -1 (static / unused) */
    tm_dtype *input_dtype;
    int *input_rank;
    int64_t (*input_dims)[TM_MAX_RANK];
    uint8_t *input_static;
    int n_outputs;
    int *output_pv;       /* per graph output: plan value (no break) */
    int break_at;         /* -1: no graph break */
    int n_live;
    plan_live *live;
    int break_key;        /* live index of the value the break needs, or -1 (eager tail) */
    int is_tail;          /* entries are the parent's live values, not graph inputs */
    pthread_mutex_t tails_lock;
    struct tail_plan *tails;  /* tail plans by the break value's bytes */
    int n_tails;
    /* Gradient plans (grad.c): inputs after the graph's (the loss's target), named
     * outputs (loss, gradients, graph outputs), and the parameter of each gradient. */
    int n_extra_inputs;
    char **extra_names;
    char **output_names;
    int n_grads;
    int *grad_param;
    /* A plan that serves several input sizes (generic.c), or NULL; last_use: per plan
     * value, the last kernel reading it (kept for placing the arena anew). */
    struct tm_generic *gen;
    int *last_use;
    uint8_t *kv_input;    /* per graph input: a KV cache kept in place (kv_in_place) */
};

/* After a graph break, the rest of the graph traced again with the host value known. */
typedef struct tail_plan {
    char *key;
    size_t key_len;
    tm_plan *plan;        /* NULL: that value leads to an eager tail */
} tail_plan;

typedef struct tail_session {
    tm_plan *plan;
    tm_session *session;
} tail_session;

struct tm_session {
    tm_plan *plan;
    int one_thread;       /* this run's kernels on the calling thread (tm_plan_options) */
    void *arena;
    void *scratch;
    tm_tensor *tensors;   /* one per plan value */
    const tm_tensor ***kin;
    tm_tensor ***kout;
    tail_session *tails;  /* sessions of the tail plans met so far */
    int n_tails;
    tm_session *last_tail;/* the tail that produced the last run's outputs */
    double *profile;      /* TM_PROFILE: seconds per kernel, summed over runs (the
                           * first left out once a second starts) */
    long profile_runs;
    int profile_dropped;  /* the first run's times are gone */
    int profile_detail;   /* TM_PROFILE=2: also every kernel */
    tm_xval *eager_out;   /* outputs of an eager tail (per graph output) */
    /* Graph outputs that a run writes straight into the caller's tensor (bind_outputs):
     * per output, the plan values sharing its buffer (its arena root and the root's
     * views), or none where it cannot be (no plan of its own, not an arena value, a
     * buffer shared with another output); and the caller tensor the last run wrote. */
    int **out_group;
    int *out_group_n;
    const tm_tensor **written;
    /* Where each plan value sits in this session's arena (the plan's placement, or the
     * one its current sizes were given by generic.c), and for a generic plan: its own
     * kernel arguments, the capacities of its arena and scratch, the size it is bound to
     * (-1: none yet), and its copies of the fitted constants. */
    size_t *off;
    size_t arena_cap, scratch_cap;
    tm_args *args;
    int64_t param;
    void **fit_bufs;
    size_t *gen_nbytes;   /* generic.c's work areas, so that binding allocates nothing */
    void *gen_work;       /* unless the arena or scratch must grow */
};

/* The trace of a plan kept for generic.c: the context after the passes, and the graph
 * outputs' values. */
typedef struct tm_gen_trace {
    tm_ctx c;
    tm_oval *outs;
} tm_gen_trace;

int tm__plan_root_of(const tm_plan *p, int pv);
void tm__gen_trace_free(tm_gen_trace *gt);
/* A plan traced for the given inputs with the fold log on, not built: p has its inputs
 * described, gt holds the trace. Fails (TM_ERR_UNSUPPORTED) on graph breaks. */
tm_status tm__plan_trace(tm_model *m, int n, const char *const *names, const tm_xval *inputs,
                         const tm_plan_options *opts, const tm_grad_spec *grad, tm_plan **p,
                         tm_gen_trace *gt, tm_error *err);
/* The name of plan input i (a graph input, or a gradient plan's target). */
const char *tm__plan_input_name(const tm_plan *p, int i);
const char *tm__plan_output_name(const tm_plan *p, int i);
/* tm_plan_options.last_row_names (last_rows.c): after the trace, each named output is
 * made anew on its last row (outs[i].v replaced); the nodes of the full rows fall away. */
tm_status tm__last_rows(tm_ctx *c, const tm_plan *p, const tm_plan_options *opts,
                        tm_oval *outs, tm_error *err);
/* tm_plan_options.dynamic for tm_plan_create and tm_grad_plan_create (grad non-NULL:
 * names and inputs include the loss's target). */
tm_status tm__create_dynamic(tm_model *m, int n, const char *const *names,
                             const tm_tensor *const *inputs, const tm_plan_options *opts,
                             const tm_grad_spec *grad, tm_plan **out, tm_error *err);
/* Builds p from gt, computing at run time the constants dyn[v] marks (per context value:
 * logged folds become kernels, other constants PV_FIT). */
tm_status tm__plan_build(tm_plan *p, tm_gen_trace *gt, const uint8_t *dyn, tm_error *err);
/* Places the arena: per plan value its bytes (nbytes) and kind; writes off[] and returns
 * the arena's bytes (kept_bytes too). */
size_t tm__plan_place(const tm_plan *p, const size_t *nbytes, const int *last_use, size_t *off,
                      size_t *kept_bytes, void *work, int *ok);
/* The bytes of the work area tm__plan_place takes (NULL work: it allocates its own). */
size_t tm__plan_place_work_bytes(const tm_plan *p);
/* generic.c: binds a session of a generic plan to the sizes of these inputs (a no-op when
 * they are the bound ones); frees its parts. */
tm_status tm__gen_bind(tm_session *s, int n, const char *const *names, const tm_xval *inputs,
                       tm_error *err);
void tm__gen_free(struct tm_generic *g);
void tm__gen_set_max(tm_plan *p, int64_t max);
/* Grows a generic plan's session to hold size param (so that smaller ones bind without
 * allocating); the session is left unbound. */
tm_status tm__gen_reserve(tm_session *s, int64_t param, tm_error *err);
void *tm__session_arena_alloc(const tm_model *m, size_t bytes);
/* Whether generic plan p serves inputs of these sizes. */
int tm__gen_accepts(const tm_plan *p, int n, const char *const *names,
                    const tm_tensor *const *inputs);
/* A plan serving every size on the line through three samples (generic.c). */
tm_status tm__plan_generalize(tm_model *m, int n, const char *const *names,
                              tm_xval *const samples[3], const tm_plan_options *opts,
                              const tm_grad_spec *grad, int pin, int pax, tm_plan **out,
                              tm_error *err);
void tm__gen_session_free(tm_session *s);
tm_status tm__gen_session_init(tm_session *s, tm_error *err);

#endif
