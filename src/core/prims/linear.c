/* LINEAR (linalg.def): x . W with W packed once at plan time, then a bias, an elementwise
 * chain and a residual in the GEMM's epilogue, so a MatMul -> Add -> GELU -> Add run
 * reads and writes its output once. The plan-time pass that makes it is
 * runtime/passes/linear.c; not a general MatMul (no batch dims on W, f32 only). */
#include <string.h>
#include "../ctx.h"
#include "fused.h"
#include "../../backends/cpu/gemm.h"

#define ARG_CHAIN 6

tm_status tm__shape_linear(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                           int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)prim; (void)nout;
    int64_t n = a->i[0], k = a->i[1], panel = a->i[2], depth = a->i[3];
    int with_bias = a->i[4] != 0, with_residual = a->i[5] != 0;
    tm_chain ch;
    if (n < 1 || k < 1 || panel < 1 || panel > 64 || depth < 1 ||
        !tm__chain_decode(a->i + ARG_CHAIN, TM_ARGS_MAX_I - ARG_CHAIN, &ch))
        return tm_ctx_fail(c, TM_ERR_INVALID_ARGUMENT, "linear: bad arguments");
    if (nin != 2 + with_bias + with_residual)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "linear: expected %d inputs, got %d",
                           2 + with_bias + with_residual, nin);
    for (int i = 0; i < nin; i++)
        if (in[i]->dtype != TM_FLOAT)
            return tm_ctx_fail(c, TM_ERR_DTYPE, "linear: input %d is %s, not float32", i,
                               tm_dtype_name(in[i]->dtype));
    const tm_vinfo *x = in[0], *w = in[1];
    if (x->rank < 1 || x->dims[x->rank - 1] != k)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "linear: x must end in K = %lld", (long long)k);
    if (w->rank != 1 || (size_t)w->dims[0] != tm_sgemm_packed_floats(n, k, (int)panel))
        return tm_ctx_fail(c, TM_ERR_SHAPE, "linear: the packed weight has the wrong size");
    if (with_bias && (in[2]->rank != 1 || in[2]->dims[0] != n))
        return tm_ctx_fail(c, TM_ERR_SHAPE, "linear: bias must be (%lld)", (long long)n);
    out->dtype = TM_FLOAT;
    out->rank = x->rank;
    memcpy(out->dims, x->dims, sizeof out->dims);
    out->dims[x->rank - 1] = n;
    if (with_residual) {
        const tm_vinfo *r = in[nin - 1];
        if (r->rank != out->rank || memcmp(r->dims, out->dims, (size_t)r->rank * sizeof r->dims[0]))
            return tm_ctx_fail(c, TM_ERR_SHAPE, "linear: the residual must have the output's dims");
    }
    *scratch = 0;
    return TM_OK;
}

tm_status tm__kernel_linear(const tm_kcall *kc) {
    const tm_args *a = kc->a;
    int64_t n = a->i[0], k = a->i[1];
    int with_bias = a->i[4] != 0, with_residual = a->i[5] != 0;
    tm_chain ch;
    if (!tm__chain_decode(a->i + ARG_CHAIN, TM_ARGS_MAX_I - ARG_CHAIN, &ch))
        return tm__fail(kc->err, TM_ERR_INVALID_ARGUMENT, "linear: bad chain");
    const tm_tensor *x = kc->in[0];
    int64_t m = k ? (int64_t)tm_tensor_numel_(x) / k : 0;
    tm_sgemm_epilogue ep = {.bias = with_bias ? kc->in[2]->data : NULL,
                            .activation = ch.n ? tm__chain_apply : NULL,
                            .activation_arg = &ch,
                            .residual = with_residual ? kc->in[kc->nin - 1]->data : NULL,
                            .ldr = n};
    /* With TM_REFERENCE_KERNELS=1 there is no micro-kernel, and tm_sgemm_bpacked runs the
     * plain loops (tm_sgemm_bpacked_reference) itself. */
    tm_sgemm_bpacked(m, n, k, x->data, k, kc->in[1]->data, (int)a->i[2], (int)a->i[3],
                     kc->out[0]->data, n, &ep, kc->pool);
    return TM_OK;
}
