/* SwiGLU (opset 28): Swish_alpha(A) * B = A * sigmoid(alpha * A) * B on two inputs of
 * one shape, as its function body composes it. Not a split of one packed input. */
#include "elementwise.h"

static tm_status lower_swiglu(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val a = tm_ew_input(L, 0), b = tm_ew_input(L, 1);
    if (tm_ew_check(L, 0, a, TM_DTS_FLOAT) || tm_ew_same_dtype(L, 0, a, 1, b)) return c->status;
    int r = tm_vrank(c, a);
    if (r != tm_vrank(c, b) || memcmp(tm_vdims(c, a), tm_vdims(c, b), (size_t)r * sizeof(int64_t)))
        return tm_lfail(L, TM_ERR_SHAPE, "inputs 0 (A) and 1 (B) must have one shape; SwiGLU "
                        "does not broadcast");
    tm_val scaled = tm_mul(c, tm_scalar_like(c, a, tm_attr_f(L, "alpha", 1.0f)), a);
    tm_val gate = tm_mul(c, a, tm_unary(c, TM_P_SIGMOID, scaled));
    tm_lout(L, 0, tm_mul(c, gate, b));
    return c->status;
}

TM_REGISTER_OP("", "SwiGLU", 28, 28, lower_swiglu);
