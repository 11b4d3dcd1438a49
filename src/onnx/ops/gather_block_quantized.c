/* com.microsoft GatherBlockQuantized: Gather over block-quantized data (int4, uint4, or
 * uint8 holding two 4-bit values per byte), dequantized with per-block scales and zero
 * points by the GATHER_BLOCK_QUANTIZED primitive; the table stays packed. */
#include <string.h>
#include "../lower.h"

static tm_status lower_gather_block_quantized(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val data = tm_lin(L, 0), idx = tm_lin(L, 1), scales = tm_lin(L, 2);
    if (data == TM_NONE || idx == TM_NONE || scales == TM_NONE)
        return tm_ctx_ok(c) ? tm_lfail(L, TM_ERR_NOT_FOUND, "data, indices and scales are required")
                            : c->status;
    int r = tm_vrank(c, data);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = tm_norm_axis(c, tm_attr_i(L, "gather_axis", 0), r);
    a.i[1] = tm_norm_axis(c, tm_attr_i(L, "quantize_axis", 1), r);
    a.i[2] = tm_attr_i(L, "block_size", 128);
    a.i[3] = tm_attr_i(L, "bits", 4);
    tm_val in[4] = {data, idx, scales, TM_NONE};
    int n = 3;
    if (tm_lhas(L, 3)) {
        in[n++] = tm_lin(L, 3);
        a.i[4] = 1;
    }
    tm_lout(L, 0, tm_prim(c, TM_P_GATHER_BLOCK_QUANTIZED, in, n, &a));
    return c->status;
}
TM_REGISTER_OP("com.microsoft", "GatherBlockQuantized", 1, 1, lower_gather_block_quantized);
