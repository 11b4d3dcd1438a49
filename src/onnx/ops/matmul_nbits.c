/* com.microsoft MatMulNBits: A times block-quantized weights that stay packed (2 to 8
 * bits, any power-of-two block size, optional zero points packed or not, optional g_idx,
 * optional bias). The MATMUL_NBITS primitive dequantizes inside its kernel, from the
 * weights repacked by NBITS_PACK where its fast kernels apply; with the load option
 * dequantize_nbits, DEQUANTIZE_NBITS makes f32 weights in every run for MATMUL instead.
 * accuracy_level 4 (or the load option nbits_int8) picks the int8-activation kernels. */
#include <string.h>
#include "../lower.h"

static tm_status lower_matmul_nbits(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_args a;
    memset(&a, 0, sizeof a);
    if (!tm_attr_has(L, "K") || !tm_attr_has(L, "N") || !tm_attr_has(L, "block_size"))
        return tm_lfail(L, TM_ERR_PARSE, "attributes K, N and block_size are required");
    a.i[0] = tm_attr_i(L, "K", 0);
    a.i[1] = tm_attr_i(L, "N", 0);
    a.i[2] = tm_attr_i(L, "bits", 4);
    a.i[3] = tm_attr_i(L, "block_size", 0);
    tm_val in[6];
    int n = 0;
    in[n++] = tm_lin(L, 0);
    in[n++] = tm_lin(L, 1);
    in[n++] = tm_lin(L, 2);
    if (tm_lhas(L, 3)) {
        in[n] = tm_lin(L, 3);
        a.i[4] = tm_vdtype(c, in[n]) == TM_UINT8 ? 1 : 2;
        n++;
    }
    if (tm_lhas(L, 4)) {
        in[n++] = tm_lin(L, 4);
        a.i[5] = 1;
    }
    for (int i = 0; i < 3; i++)
        if (in[i] == TM_NONE) return tm_lfail(L, TM_ERR_NOT_FOUND, "input %d is required", i);
    if (c->dequantize_nbits) {
        /* Load option dequantize_nbits: W (K, N) in f32, then MatMul; in every run (1), or
         * once, folded at plan time, the product then packed like any float weight (2). */
        tm_val w = tm_prim(c, c->dequantize_nbits == 2 ? TM_P_DEQUANTIZE_NBITS_ONCE
                                                       : TM_P_DEQUANTIZE_NBITS,
                           in + 1, n - 1, &a);
        if (w != TM_NONE && tm_vdtype(c, w) != tm_vdtype(c, in[0]))
            return tm_lfail(L, TM_ERR_DTYPE, "input 2 (scales) must have A's dtype %s",
                            tm_dtype_name(tm_vdtype(c, in[0])));
        tm_val y = tm_matmul(c, in[0], w);
        if (tm_lhas(L, 5)) y = tm_add(c, y, tm_lin(L, 5));
        tm_lout(L, 0, y);
        return c->status;
    }
    /* The fast kernels read the weights repacked once (folded at plan time when they are
     * constants): 4-bit, f32 scales and zero points, blocks of 16 or more, no g_idx. */
    int zp_ok = a.i[4] != 2 || tm_vdtype(c, in[3]) == TM_FLOAT;
    if (a.i[2] == 4 && !a.i[5] && a.i[3] >= 16 && tm_vdtype(c, in[0]) == TM_FLOAT &&
        tm_vdtype(c, in[2]) == TM_FLOAT && zp_ok) {
        in[1] = tm_prim(c, TM_P_NBITS_PACK, in + 1, n - 1, &a);
        n = 2;
        /* Int8 activations where the node asks for them (accuracy_level 4) or the load
         * option nbits_int8 says so for every node. */
        int64_t level = tm_attr_i(L, "accuracy_level", 0);
        a.i[6] = c->nbits_int8 > 0 || (c->nbits_int8 == 0 && level == 4) ? 2 : 1;
    }
    tm_val y = tm_prim(c, TM_P_MATMUL_NBITS, in, n, &a);
    if (tm_lhas(L, 5)) y = tm_add(c, y, tm_lin(L, 5));
    tm_lout(L, 0, y);
    return c->status;
}
TM_REGISTER_OP("com.microsoft", "MatMulNBits", 1, 1, lower_matmul_nbits);
