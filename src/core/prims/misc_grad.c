/* Gradient rules of the misc family (rows in misc.def): top-k sends each value's
 * cotangent back to the element it was taken from; ranges and random draws have no
 * inputs to differentiate. Not the kernels (misc.c). */
#include <string.h>
#include "../autodiff.h"

tm_status tm__grad_topk(tm_ctx *c, const tm_grad_call *g) {
    if (g->gout[0] == TM_NONE) return c->status;
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = g->a->i[0];
    a.i[1] = 1;  /* add (the indices are distinct; adding is also right for ties) */
    tm_val in[3] = {tm_grad_zeros_like(c, g->in[0]), g->out[1], g->gout[0]};
    g->gin[0] = tm_prim(c, TM_P_SCATTER_ELEMENTS, in, 3, &a);
    return c->status;
}

/* No inputs: never reached, stated so that a missing rule is never assumed. */
tm_status tm__grad_range(tm_ctx *c, const tm_grad_call *g) {
    (void)g;
    return c->status;
}

tm_status tm__grad_random(tm_ctx *c, const tm_grad_call *g) {
    (void)g;
    return c->status;
}
