/* The lowering API: what an ONNX operator's file uses to read its node (inputs,
 * attributes with spec defaults) and build its outputs from primitives (../core/ctx.h,
 * ../core/ops.h). Also the graph interpreter that walks nodes and scopes.
 * Not the primitives themselves. */
#ifndef TM_ONNX_LOWER_H
#define TM_ONNX_LOWER_H

#include "../core/ctx.h"
#include "../core/ops.h"
#include "model.h"

/* An ONNX-level value: a tensor, a sequence of tensors, or nothing (an omitted input or
 * an empty optional). */
typedef enum { TM_OV_NONE = 0, TM_OV_TENSOR = 1, TM_OV_SEQ = 2 } tm_ovkind;

typedef struct tm_oval {
    tm_ovkind kind;
    tm_val v;             /* TM_OV_TENSOR */
    tm_val *seq;          /* TM_OV_SEQ: n values (array owned by the scope) */
    int n;
    tm_dtype seq_dtype;   /* element dtype of a sequence (also when empty) */
    uint8_t optional;     /* came from / goes to an optional type */
} tm_oval;

typedef struct tm_lower tm_lower;
typedef tm_status (*tm_lower_fn)(tm_lower *L);

/* Registration: one line in the op's own file, collected at build time into the
 * registry (see Makefile, build/ops_registry.inc). The range of opsets is inclusive.
 *   TM_REGISTER_OP("", "Add", 7, 13, lower_add)   (the function may be static) */
#define TM_REGISTER_OP(DOMAIN, NAME, SINCE, UNTIL, FN) \
    const struct tm_op_reg TM__REG_CAT(tm__reg_, __LINE__, FN) = {DOMAIN, NAME, SINCE, UNTIL, FN}
#define TM__REG_CAT(a, l, f) TM__REG_CAT2(a, l, f)
#define TM__REG_CAT2(a, l, f) a##f##_##l

struct tm_op_reg {
    const char *domain;
    const char *op_type;
    int since, until;
    tm_lower_fn fn;
};

/* The registered lowering for domain:op at opset, or NULL. */
const struct tm_op_reg *tm_op_lookup(const char *domain, const char *op_type, int64_t opset);

/* ---- Reading the node -------------------------------------------------------------- */

tm_ctx *tm_lctx(tm_lower *L);
const tm_node *tm_lnode(tm_lower *L);
/* The graph the node is one of (its siblings, for operators that read the graph itself
 * such as Gradient); NULL inside a model-local function's body. */
const tm_graph *tm_lgraph(tm_lower *L);
int64_t tm_lopset(tm_lower *L);             /* the imported opset of the node's domain */
int tm_lnin(tm_lower *L);                   /* number of inputs listed (omitted ones too) */
int tm_lnout(tm_lower *L);
int tm_lhas(tm_lower *L, int i);            /* input i given and not an empty optional */
int tm_lwants(tm_lower *L, int i);          /* output i is listed and not "" */
tm_val tm_lin(tm_lower *L, int i);          /* tensor input i, or TM_NONE (absent: not an error) */
const tm_oval *tm_lin_oval(tm_lower *L, int i); /* any input; NULL when absent */
void tm_lout(tm_lower *L, int i, tm_val v);
void tm_lout_oval(tm_lower *L, int i, const tm_oval *ov);

/* Attributes with their spec defaults inline. tm_attr_s returns a NUL-terminated string
 * owned by the model. The list forms return the count, or -1 when absent. */
int tm_attr_has(tm_lower *L, const char *name);
int64_t tm_attr_i(tm_lower *L, const char *name, int64_t def);
float tm_attr_f(tm_lower *L, const char *name, float def);
const char *tm_attr_s(tm_lower *L, const char *name, const char *def);
int tm_attr_ints(tm_lower *L, const char *name, const int64_t **out);
int tm_attr_floats(tm_lower *L, const char *name, const float **out);
int tm_attr_strings(tm_lower *L, const char *name, const tm_bytes **out);
const tm_tensor *tm_attr_t(tm_lower *L, const char *name);
const tm_graph *tm_attr_g(tm_lower *L, const char *name);
const tm_attr *tm_attr_get(tm_lower *L, const char *name);

/* Fails the node: the message is prefixed with the node's name and op. Returns code. */
tm_status tm_lfail(tm_lower *L, tm_status code, const char *fmt, ...) TM_PRINTF(3, 4);

/* ---- Subgraphs --------------------------------------------------------------------- */

/* Runs graph g (an attribute of this node) in a new scope whose parent is the node's
 * scope (outer-scope names resolve), binding g's inputs to `in` in order. Fills
 * out[0..g->n_outputs). Values in `out` stay valid after the call. */
tm_status tm_lower_subgraph(tm_lower *L, const tm_graph *g, int n_in, const tm_oval *in,
                            tm_oval *out);

/* ---- The interpreter (used by the runtime) ----------------------------------------- */

typedef struct tm_scope tm_scope;
struct tm_model;

/* Called after each node of the top-level graph (eager runs). */
typedef int (*tm_interp_cb)(void *user, const tm_node *n, const tm_oval *outs, tm_ctx *c);

typedef struct tm_interp {
    tm_ctx *ctx;
    const tm_onnx_model *model;
    tm_interp_cb on_node;
    void *user;
    /* Graph break bookkeeping (trace mode): the top-level node index at which tracing
     * stopped because a value was needed on the host, or -1. */
    int break_at;
    int start_at;         /* first top-level node to run (resuming after a break) */
} tm_interp;

/* Runs the top-level graph. inputs: one oval per graph input (in graph-input order;
 * kind NONE for inputs left to their initializer). Outputs filled per graph output.
 * In trace mode, on a graph break, returns TM_ERR_NEEDS_HOST with interp->break_at set,
 * the context rolled back to the start of that node, and *live holding the values
 * (by name) alive at that point. */
typedef struct tm_live {
    int n;
    char **names;
    tm_oval *vals;
} tm_live;

tm_status tm_interp_run(tm_interp *ip, const tm_oval *inputs, tm_oval *outputs, tm_live *live);
/* Resumes the top-level graph at node ip->start_at with the given live values. Under
 * trace, a further graph break is reported as by tm_interp_run when live_out is given. */
tm_status tm_interp_resume(tm_interp *ip, const tm_live *live, tm_oval *outputs,
                           tm_live *live_out);
void tm_live_free(tm_live *live);

/* Collects the missing domain:op@opset of a model (subgraphs and functions included) into
 * a malloc'd ", "-separated string, or NULL when nothing is missing. */
char *tm_missing_ops(const tm_onnx_model *m);

#endif
