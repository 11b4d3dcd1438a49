/* Helpers shared by the com.microsoft (ONNX Runtime contrib) lowerings: required inputs,
 * 1-D bias checks, layer/RMS normalisation over the trailing axes and an int32 scalar
 * read on the host. Not a lowering itself. */
#ifndef TM_ONNX_OPS_CONTRIB_H
#define TM_ONNX_OPS_CONTRIB_H

#include "elementwise.h"

/* The required input `index` with a dtype in `dts`, else TM_NONE with the node failed. */
static inline tm_val tm_ms_input(tm_lower *L, int index, uint32_t dts) {
    tm_val v = tm_ew_input(L, index);
    if (v == TM_NONE || tm_ew_check(L, index, v, dts)) return TM_NONE;
    return v;
}

/* An optional input `index`: TM_NONE when absent; fails the node on a wrong dtype. */
static inline tm_val tm_ms_optional(tm_lower *L, int index, uint32_t dts) {
    tm_val v = tm_lin(L, index);
    if (v == TM_NONE || tm_ew_check(L, index, v, dts)) return TM_NONE;
    return v;
}

/* Fails the node unless v (input `index`) has rank `rank` (-1: any) and its last dim is
 * `last` (-1: any). Returns 0 when it fits. */
static inline int tm_ms_check_shape(tm_lower *L, int index, tm_val v, int rank, int64_t last) {
    tm_ctx *c = tm_lctx(L);
    if (v == TM_NONE || !tm_ctx_ok(c)) return !tm_ctx_ok(c);
    int r = tm_vrank(c, v);
    if ((rank < 0 || r == rank) && (last < 0 || (r > 0 && tm_vdims(c, v)[r - 1] == last)))
        return 0;
    tm_lfail(L, TM_ERR_SHAPE, "input %d ('%s') has rank %d and last dim %lld; expected rank "
             "%d with last dim %lld", index, tm_lnode(L)->inputs[index], r,
             (long long)(r > 0 ? tm_vdims(c, v)[r - 1] : 0), rank, (long long)last);
    return 1;
}

/* Layer (or RMS, rms=1) normalisation of x over its axes from `axis` on, in f32 or wider
 * inside the primitive, then times scale and plus bias (bias may be TM_NONE). scale and
 * bias broadcast against the normalised dims; when their dtype differs from x's (the
 * mixed precision ONNX Runtime allows) they are applied outside in their dtype. out[0]
 * is y; out[1], out[2] are mean and inv_std_dev in float32 (x's dims, normalised axes 1). */
static inline tm_status tm_ms_layer_norm(tm_lower *L, tm_val x, tm_val scale, tm_val bias,
                                         int axis, int rms, float epsilon, tm_val out[3]) {
    tm_ctx *c = tm_lctx(L);
    if (!tm_ctx_ok(c)) return c->status;
    int r = tm_vrank(c, x), nr = r - axis;
    tm_dtype dt = tm_vdtype(c, x);
    int64_t xd[TM_MAX_RANK];
    memcpy(xd, tm_vdims(c, x), (size_t)r * sizeof *xd);
    /* scale/bias must broadcast to the normalised dims (their leading dims all 1). */
    tm_val params[2] = {scale, bias};
    for (int k = 0; k < 2; k++) {
        tm_val p = params[k];
        if (p == TM_NONE) continue;
        int rp = tm_vrank(c, p);
        int ok = 1;
        for (int d = 0; d < rp && ok; d++) {
            int xa = r - rp + d;
            int64_t n = tm_vdims(c, p)[d];
            ok = xa >= 0 && (n == 1 || (xa >= axis && n == xd[xa]));
        }
        if (!ok)
            return tm_lfail(L, TM_ERR_SHAPE, "input '%s' does not broadcast to the normalised "
                            "dims of input 0", tm_lnode(L)->inputs[k == 0 ? 1 : 2]);
        int64_t pd[TM_MAX_RANK];
        for (int d = 0; d < nr; d++) {
            int src = axis + d - (r - rp);
            pd[d] = src >= 0 ? tm_vdims(c, p)[src] : 1;
        }
        params[k] = tm_expand(c, tm_reshape(c, p, nr, pd), nr, xd + axis);
    }
    int inside = tm_vdtype(c, params[0]) == dt &&
                 (params[1] == TM_NONE || tm_vdtype(c, params[1]) == dt);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = axis;
    a.i[1] = rms;
    a.f[0] = epsilon;
    tm_val in[3] = {x, inside ? params[0] : tm_const_fill(c, dt, nr, xd + axis, 1.0),
                    inside ? params[1] : TM_NONE};
    if (tm_prim_n(c, TM_P_LAYERNORM, in, in[2] == TM_NONE ? 2 : 3, &a, out, 3) != TM_OK)
        return c->status;
    if (!inside) {
        tm_dtype sdt = tm_vdtype(c, params[0]);
        out[0] = tm_mul(c, tm_cast(c, out[0], sdt), params[0]);
        if (params[1] != TM_NONE) out[0] = tm_add(c, out[0], tm_cast(c, params[1], sdt));
    }
    return c->status;
}

/* A scalar (or one-element) integer input read on the host; -1 with the context failed
 * (or a graph break pending) when it cannot be read. */
static inline int tm_ms_host_int(tm_lower *L, int index, int64_t *out) {
    tm_ctx *c = tm_lctx(L);
    tm_val v = tm_lin(L, index);
    if (v == TM_NONE) return -1;
    if (tm_vnumel(c, v) != 1) {
        tm_lfail(L, TM_ERR_SHAPE, "input %d ('%s') must hold one value, it has %lld", index,
                 tm_lnode(L)->inputs[index], (long long)tm_vnumel(c, v));
        return -1;
    }
    return tm_host_i64(c, v, out, 1) == 1 ? 0 : -1;
}

#endif
