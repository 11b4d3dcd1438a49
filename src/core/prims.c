/* The primitive table, generated from prims.def: each row's name, arity, flags and the
 * shape rule and kernel of its family (prims/<family>.c). */
#include "ctx.h"

#define TM_PRIM(ID, NAME, NIN, NOUT, IMPL, FLAGS)                                         \
    tm_status tm__shape_##IMPL(tm_ctx *c, int prim, const tm_args *a,                      \
                               const tm_vinfo *const *in, int nin, tm_vinfo *out, int nout, \
                               size_t *scratch);                                           \
    tm_status tm__kernel_##IMPL(const tm_kcall *k);
#include "prims.def"
#undef TM_PRIM

const tm_prim_info tm_prims[TM_P__COUNT] = {
#define TM_PRIM(ID, NAME, NIN, NOUT, IMPL, FLAGS) \
    [TM_P_##ID] = {NAME, NIN, NOUT, tm__shape_##IMPL, tm__kernel_##IMPL, FLAGS},
#include "prims.def"
#undef TM_PRIM
};
