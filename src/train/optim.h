/* The optimizer object behind tm_optimizer (optim.c: creation and the update rules;
 * optim_state.c: the state file). Private to src/train. Not the gradients themselves:
 * those come from the caller (the autodiff plan, or a test). */
#ifndef TM_TRAIN_OPTIM_H
#define TM_TRAIN_OPTIM_H

#include "../core/tensor.h"

/* Roles of state buffers; the numbers are those of the state file (see transmuter.h). */
enum {
    TM__BUF_MASTER = 1,          /* float32 copy of a half-precision parameter */
    TM__BUF_MOMENTUM = 2,        /* SGD momentum_buffer */
    TM__BUF_EXP_AVG = 3,         /* AdamW first moment */
    TM__BUF_EXP_AVG_SQ = 4,      /* AdamW second moment */
    TM__BUF_MAX_EXP_AVG_SQ = 5   /* AdamW amsgrad running maximum */
};

typedef struct tm__opt_param {
    char *name;
    tm_tensor *tensor;           /* the caller's parameter, updated in place */
    size_t numel;
    tm_dtype state_dtype;        /* float64 for float64 parameters, else float32 */
    double weight_decay;
    int64_t step;                /* this parameter's own step count (PyTorch's state['step']) */
    int has_momentum;            /* SGD: the buffer exists once a step has run (None before) */
    void *master;                /* float32 numel, half-precision parameters only */
    void *momentum;              /* SGD with momentum != 0 */
    void *exp_avg, *exp_avg_sq, *max_exp_avg_sq; /* AdamW; the last with amsgrad only */
} tm__opt_param;

struct step_consts;

struct tm_optimizer {
    tm_optimizer_params params;
    int64_t steps;               /* tm_optimizer_step calls that succeeded */
    double last_grad_norm;
    int n;
    tm__opt_param *p;
    struct step_consts *consts;  /* per parameter, for the step running (n of them) */
    double *sumsq;               /* per parameter, its gradient's sum of squares (n) */
    struct tm_pool *pool;        /* params.threads > 1; NULL: the calling thread */
};

/* Buffer of role `role` of parameter p, or NULL when it does not have one. */
void *tm__opt_buffer(const tm_optimizer *opt, const tm__opt_param *p, int role);
/* Roles parameter p carries in a state file, in file order; returns how many (<= 4). */
int tm__opt_roles(const tm_optimizer *opt, const tm__opt_param *p, int roles[4]);

#endif
