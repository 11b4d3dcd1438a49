/* Gradient rules of the block-quantized primitives (rows in quant.def). Quantized
 * weights have no gradient: their packed integers are not differentiable and asking
 * through their scales or zero points is an error. MATMUL_NBITS passes a gradient to its
 * float activation a: da = gy W with W the dequantized (N, K) weight, obtained by running
 * the primitive itself on an identity matrix (folded once when a plan is made: a dense
 * f32 copy of the weight for the backward). Not the kernels (quant.c). */
#include <string.h>
#include "../autodiff.h"

static tm_status quantized_weight(tm_ctx *c, const tm_grad_call *g) {
    for (int i = 1; i < g->nin; i++)
        if (g->want[i])
            return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "%s: input %d is part of a quantized "
                               "weight, and quantized weights have no gradient",
                               tm_prims[g->prim].name, i);
    return TM_OK;
}

tm_status tm__grad_matmul_nbits(tm_ctx *c, const tm_grad_call *g) {
    if (quantized_weight(c, g) != TM_OK) return c->status;
    if (!g->want[0]) return c->status;
    tm_val a = g->in[0], gy = g->gout[0];
    int64_t K = g->a->i[0], N = g->a->i[1];
    int64_t eye_dims[2] = {K, K};
    tm_val eye = tm_const_fill(c, tm_vdtype(c, a), 2, eye_dims, 0.0);
    tm_tensor *t = tm_ctx_ok(c) ? (tm_tensor *)tm_vdata(c, eye) : NULL;
    for (int64_t i = 0; t && i < K; i++) tm_store_f64(t->data, t->dtype, (size_t)(i * K + i), 1.0);
    tm_val in[5];
    in[0] = eye;
    for (int i = 1; i < g->nin; i++) in[i] = g->in[i];
    /* W^T exactly: the identity through the f32-accuracy kernel, also where the forward
     * product quantizes its activations to int8 (i[6] = 2). */
    tm_args exact = *g->a;
    if (exact.i[6] == 2) exact.i[6] = 1;
    tm_val wt = tm_prim(c, TM_P_MATMUL_NBITS, in, g->nin, &exact);   /* (K, N) = W^T */
    static const int64_t swap[2] = {1, 0};
    tm_val w = tm_transpose(c, wt, swap);                            /* (N, K) */
    int r = tm_vrank(c, a);
    int64_t rows = tm_vnumel(c, a) / (K ? K : 1), dims[TM_MAX_RANK];
    memcpy(dims, tm_vdims(c, a), sizeof dims);
    tm_val g2 = tm_reshape(c, gy, 2, (int64_t[2]){rows, N});
    tm_val da = tm_prim(c, TM_P_MATMUL, (tm_val[2]){g2, w}, 2, NULL);
    g->gin[0] = tm_reshape(c, da, r, dims);
    return c->status;
}

tm_status tm__grad_gather_block_quantized(tm_ctx *c, const tm_grad_call *g) {
    quantized_weight(c, g);
    return tm_ctx_ok(c) ? TM_GRAD_NO_RULE : c->status;
}
