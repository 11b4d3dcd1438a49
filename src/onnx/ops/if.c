/* If: runs one of two subgraphs. The condition is read on the host: under trace a known
 * condition (a constant or a static input) folds the branch away; an unknown one is a
 * graph break. Not Loop/Scan (loop.c, scan.c). */
#include <stdlib.h>
#include <string.h>
#include "../lower.h"

static tm_status lower_if(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    const tm_tensor *cond = tm_host(c, tm_lin(L, 0));
    if (!cond) return tm_ctx_ok(c) ? tm_lfail(L, TM_ERR_SHAPE, "input 0 (cond) is missing") : c->status;
    if (tm_tensor_numel_(cond) != 1 || cond->dtype == TM_STRING)
        return tm_lfail(L, TM_ERR_SHAPE, "cond must hold exactly one boolean, got %lld %s values",
                        (long long)tm_tensor_numel_(cond), tm_dtype_name(cond->dtype));
    int taken = tm_dtype_is_float(cond->dtype) ? tm_load_f64(cond->data, cond->dtype, 0) != 0
                                               : tm_load_u64(cond->data, cond->dtype, 0) != 0;
    const char *branch = taken ? "then_branch" : "else_branch";
    const tm_graph *g = tm_attr_g(L, branch);
    if (!g) return tm_lfail(L, TM_ERR_PARSE, "attribute %s is missing", branch);
    if (g->n_outputs != tm_lnout(L))
        return tm_lfail(L, TM_ERR_SHAPE, "%s has %d outputs, the node %d", branch, g->n_outputs,
                        tm_lnout(L));
    tm_oval outs_small[16];
    tm_oval *outs = g->n_outputs <= 16 ? outs_small : calloc((size_t)g->n_outputs, sizeof *outs);
    if (!outs) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    memset(outs, 0, (size_t)g->n_outputs * sizeof *outs);
    tm_status st = tm_lower_subgraph(L, g, 0, NULL, outs);
    for (int i = 0; i < g->n_outputs; i++) {
        if (st == TM_OK) tm_lout_oval(L, i, &outs[i]);
        if (outs[i].kind == TM_OV_SEQ) free(outs[i].seq);
    }
    if (outs != outs_small) free(outs);
    return st == TM_OK ? c->status : st;
}
TM_REGISTER_OP("", "If", 1, 27, lower_if);
