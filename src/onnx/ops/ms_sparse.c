/* com.microsoft SparseToDenseMatMul: alpha * A' B', A' and B' optionally transposed. A
 * arrives dense (Transmuter keeps no sparse tensors; sparse data is densified when read),
 * so this is a matmul: COO/CSR storage only mattered to ONNX Runtime's kernel. */
#include "contrib.h"

#define SPARSE_MM_DTS (TM_DT(TM_FLOAT) | TM_DT(TM_DOUBLE) | TM_DT(TM_INT32) | \
                       TM_DT(TM_INT64) | TM_DT(TM_UINT32) | TM_DT(TM_UINT64))

static tm_val last_two_swapped(tm_ctx *c, tm_val x) {
    int r = tm_vrank(c, x);
    int64_t perm[TM_MAX_RANK];
    for (int d = 0; d < r; d++) perm[d] = d;
    perm[r - 2] = r - 1;
    perm[r - 1] = r - 2;
    return tm_transpose(c, x, perm);
}

static tm_status lower_sparse_to_dense_matmul(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val a = tm_ms_input(L, 0, SPARSE_MM_DTS), b = tm_ms_input(L, 1, SPARSE_MM_DTS);
    if (!tm_ctx_ok(c) || tm_ew_same_dtype(L, 0, a, 1, b)) return c->status;
    if (tm_vrank(c, a) != 2 || tm_vrank(c, b) < 2)
        return tm_lfail(L, TM_ERR_SHAPE, "input 0 (A) must be 2-D and input 1 (B) at least 2-D, "
                        "got ranks %d and %d", tm_vrank(c, a), tm_vrank(c, b));
    if (tm_attr_i(L, "transA", 0)) a = last_two_swapped(c, a);
    if (tm_attr_i(L, "transB", 0)) b = last_two_swapped(c, b);
    tm_val y = tm_matmul(c, a, b);
    double alpha = tm_attr_f(L, "alpha", 1.0f);
    if (alpha != 1.0) y = tm_mul(c, y, tm_scalar_like(c, y, alpha));
    tm_lout(L, 0, y);
    return c->status;
}

TM_REGISTER_OP("com.microsoft", "SparseToDenseMatMul", 1, 1, lower_sparse_to_dense_matmul);
