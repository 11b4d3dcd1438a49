/* Expand (numpy broadcast to a host-known shape) and Tile (repeats as reshape + expand
 * per tiled axis). Not Pad, nor the elementwise ops' own broadcasting. */
#include "../lower.h"

/* Input i as at most max int64s on the host; -1 on error. */
static int64_t read_ints(tm_lower *L, int i, const char *name, int64_t *out, int64_t max) {
    tm_ctx *c = tm_lctx(L);
    tm_val v = tm_lin(L, i);
    if (v == TM_NONE) {
        tm_lfail(L, TM_ERR_PARSE, "input '%s' is missing", name);
        return -1;
    }
    tm_dtype dt = tm_vdtype(c, v);
    if (dt != TM_INT64 && dt != TM_INT32) {
        tm_lfail(L, TM_ERR_DTYPE, "input '%s' must be int64, got %s", name, tm_dtype_name(dt));
        return -1;
    }
    if (tm_vnumel(c, v) > max) {
        tm_lfail(L, TM_ERR_UNSUPPORTED, "input '%s' has %lld entries; at most %lld are "
                 "supported", name, (long long)tm_vnumel(c, v), (long long)max);
        return -1;
    }
    return tm_host_i64(c, v, out, max);
}

static tm_status lower_expand(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    if (x == TM_NONE) return tm_lfail(L, TM_ERR_PARSE, "input 'input' is missing");
    int64_t shape[TM_MAX_RANK];
    int64_t n = read_ints(L, 1, "shape", shape, TM_MAX_RANK);
    if (n < 0) return c->status;
    for (int64_t i = 0; i < n; i++)
        if (shape[i] < 0)
            return tm_lfail(L, TM_ERR_SHAPE, "input 'shape' has a negative dim %lld at %lld",
                            (long long)shape[i], (long long)i);
    tm_lout(L, 0, tm_expand(c, x, (int)n, shape));
    return c->status;
}
TM_REGISTER_OP("", "Expand", 8, 27, lower_expand);

/* Repeats axis `axis` r times: (P, 1, Q) broadcast to (P, r, Q), with P the dims
 * before the axis and Q the axis and the dims after it. */
static tm_val tile_axis(tm_ctx *c, tm_val x, int axis, int64_t r) {
    int rank = tm_vrank(c, x);
    int64_t p = 1, q = 1, dims[TM_MAX_RANK];
    for (int d = 0; d < rank; d++) {
        dims[d] = tm_vdims(c, x)[d];
        if (d < axis) p *= dims[d];
        else q *= dims[d];
    }
    int64_t view[3] = {p, 1, q}, wide[3] = {p, r, q};
    tm_val y = tm_expand(c, tm_reshape(c, x, 3, view), 3, wide);
    dims[axis] *= r;
    return tm_reshape(c, y, rank, dims);
}

static tm_status tile_with(tm_lower *L, tm_val x, const int64_t *repeats) {
    tm_ctx *c = tm_lctx(L);
    for (int d = 0; d < tm_vrank(c, x); d++) {
        if (repeats[d] < 0)
            return tm_lfail(L, TM_ERR_SHAPE, "input 'repeats' has a negative entry %lld at %d",
                            (long long)repeats[d], d);
        if (repeats[d] != 1) x = tile_axis(c, x, d, repeats[d]);
    }
    tm_lout(L, 0, x);
    return c->status;
}

static tm_status lower_tile(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    if (x == TM_NONE) return tm_lfail(L, TM_ERR_PARSE, "input 'input' is missing");
    int rank = tm_vrank(c, x);
    int64_t repeats[TM_MAX_RANK];
    int64_t n = read_ints(L, 1, "repeats", repeats, TM_MAX_RANK);
    if (n < 0) return c->status;
    if (n != rank)
        return tm_lfail(L, TM_ERR_SHAPE, "input 'repeats' has %lld entries for rank %d",
                        (long long)n, rank);
    return tile_with(L, x, repeats);
}
TM_REGISTER_OP("", "Tile", 6, 27, lower_tile);

/* Opset 1: scalar inputs 'tiles' and 'axis' repeat one axis. */
static tm_status lower_tile_v1(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    if (x == TM_NONE) return tm_lfail(L, TM_ERR_PARSE, "input 'input' is missing");
    int rank = tm_vrank(c, x);
    int64_t tiles, axis, repeats[TM_MAX_RANK];
    if (read_ints(L, 1, "tiles", &tiles, 1) != 1 || read_ints(L, 2, "axis", &axis, 1) != 1)
        return tm_ctx_ok(c) ? tm_lfail(L, TM_ERR_SHAPE, "inputs 'tiles' and 'axis' must be "
                                       "scalars") : c->status;
    if (axis < -rank || axis >= rank)
        return tm_lfail(L, TM_ERR_SHAPE, "input 'axis' is %lld, outside [%d, %d]",
                        (long long)axis, -rank, rank - 1);
    if (axis < 0) axis += rank;
    for (int d = 0; d < rank; d++) repeats[d] = d == axis ? tiles : 1;
    return tile_with(L, x, repeats);
}
TM_REGISTER_OP("", "Tile", 1, 5, lower_tile_v1);
