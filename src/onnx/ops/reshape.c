/* Reshape, Flatten, Squeeze and Unsqueeze: new dims over the same elements, all one
 * RESHAPE primitive (a view). Not Transpose or Expand, which move elements. */
#include <string.h>
#include "../lower.h"

/* Reads an int list input (int64, or int32 where older opsets allow it) on the host. */
static int read_ints(tm_lower *L, int i, const char *name, int64_t *out, int max) {
    tm_ctx *c = tm_lctx(L);
    tm_val v = tm_lin(L, i);
    tm_dtype dt = tm_vdtype(c, v);
    if (dt != TM_INT64 && dt != TM_INT32) {
        tm_lfail(L, TM_ERR_DTYPE, "input '%s' must be int64, got %s", name, tm_dtype_name(dt));
        return -1;
    }
    if (tm_vnumel(c, v) > max) {
        tm_lfail(L, TM_ERR_UNSUPPORTED, "input '%s' has %lld values; at most %d are supported",
                 name, (long long)tm_vnumel(c, v), max);
        return -1;
    }
    return (int)tm_host_i64(c, v, out, max);
}

/* ONNX reshape rules: 0 copies the input dim (unless allowzero), one -1 is inferred. */
static tm_status reshape_to(tm_lower *L, tm_val x, const int64_t *shape, int n, int allowzero) {
    tm_ctx *c = tm_lctx(L);
    int rank = tm_vrank(c, x);
    int64_t dims[TM_MAX_RANK], known = 1;
    int infer = -1, overflow = 0, has_zero = 0;
    for (int i = 0; i < n; i++) {
        dims[i] = shape[i];
        if (shape[i] == 0 && !allowzero) {
            if (i >= rank)
                return tm_lfail(L, TM_ERR_SHAPE, "input 'shape' has 0 at index %d, but the "
                                "data has rank %d", i, rank);
            dims[i] = tm_vdims(c, x)[i];
        } else if (shape[i] == -1) {
            if (infer >= 0)
                return tm_lfail(L, TM_ERR_SHAPE, "input 'shape' has -1 at indices %d and %d; "
                                "at most one dim may be inferred", infer, i);
            infer = i;
            continue;
        } else if (shape[i] < 0) {
            return tm_lfail(L, TM_ERR_SHAPE, "input 'shape' has an invalid dim %lld at %d",
                            (long long)shape[i], i);
        }
        /* A hostile shape may overflow the product; a 0 anywhere still makes it 0. */
        has_zero |= dims[i] == 0;
        overflow |= __builtin_mul_overflow(known, dims[i], &known);
    }
    if (has_zero) known = 0;
    else if (overflow)
        return tm_lfail(L, TM_ERR_SHAPE, "input 'shape' asks for more elements than 64 bits "
                        "can count");
    int64_t numel = tm_vnumel(c, x);
    if (infer >= 0 && known == 0 && numel == 0) {
        dims[infer] = 0; /* ambiguous, but empty either way: take the empty reading */
    } else if (infer >= 0) {
        if (known == 0 || numel % known)
            return tm_lfail(L, TM_ERR_SHAPE, "input 'shape' cannot infer its -1 dim: %lld "
                            "elements do not divide by %lld", (long long)numel, (long long)known);
        dims[infer] = numel / known;
    } else if (known != numel) {
        return tm_lfail(L, TM_ERR_SHAPE, "input 'shape' asks for %lld elements, the data "
                        "has %lld", (long long)known, (long long)numel);
    }
    tm_lout(L, 0, tm_reshape(c, x, n, dims));
    return c->status;
}

static tm_status lower_reshape(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    if (x == TM_NONE) return tm_lfail(L, TM_ERR_PARSE, "input 0 ('data') is missing");
    int64_t shape[TM_MAX_RANK];
    int n;
    if (tm_lopset(L) < 5) {
        const int64_t *attr;
        n = tm_attr_ints(L, "shape", &attr);
        if (n < 0) return tm_lfail(L, TM_ERR_PARSE, "attribute 'shape' is missing");
        if (n > TM_MAX_RANK)
            return tm_lfail(L, TM_ERR_UNSUPPORTED, "attribute 'shape' has rank %d; at most %d "
                            "is supported", n, TM_MAX_RANK);
        memcpy(shape, attr, (size_t)n * sizeof *attr);
    } else {
        if (!tm_lhas(L, 1)) return tm_lfail(L, TM_ERR_PARSE, "input 1 ('shape') is missing");
        n = read_ints(L, 1, "shape", shape, TM_MAX_RANK);
        if (n < 0) return c->status;
    }
    return reshape_to(L, x, shape, n, (int)tm_attr_i(L, "allowzero", 0));
}
TM_REGISTER_OP("", "Reshape", 1, 27, lower_reshape);

static tm_status lower_flatten(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    if (x == TM_NONE) return tm_lfail(L, TM_ERR_PARSE, "input 0 ('input') is missing");
    int rank = tm_vrank(c, x);
    int64_t axis = tm_attr_i(L, "axis", 1);
    if (axis < -rank || axis > rank)
        return tm_lfail(L, TM_ERR_SHAPE, "attribute 'axis' is %lld, outside [%d, %d]",
                        (long long)axis, -rank, rank);
    if (axis < 0) axis += rank;
    int64_t dims[2] = {1, 1};
    for (int d = 0; d < rank; d++) dims[d >= axis] *= tm_vdims(c, x)[d];
    tm_lout(L, 0, tm_reshape(c, x, 2, dims));
    return c->status;
}
TM_REGISTER_OP("", "Flatten", 1, 27, lower_flatten);

/* Axes from the attribute (opset < 13) or from input 1 (13 and later); -1 when absent. */
static int read_axes(tm_lower *L, int64_t *axes) {
    if (tm_lopset(L) >= 13) {
        if (!tm_lhas(L, 1)) return -1;
        int n = read_ints(L, 1, "axes", axes, TM_MAX_RANK);
        return n < 0 ? -2 : n;
    }
    const int64_t *attr;
    int n = tm_attr_ints(L, "axes", &attr);
    if (n > TM_MAX_RANK) {
        tm_lfail(L, TM_ERR_SHAPE, "attribute 'axes' has %d entries; at most %d are supported", n,
                 TM_MAX_RANK);
        return -2;
    }
    if (n > 0) memcpy(axes, attr, (size_t)n * sizeof *attr);
    return n;
}

static tm_status lower_squeeze(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    if (x == TM_NONE) return tm_lfail(L, TM_ERR_PARSE, "input 0 ('data') is missing");
    int64_t axes[TM_MAX_RANK];
    int n = read_axes(L, axes);
    if (n == -2) return c->status;
    int rank = tm_vrank(c, x);
    if (n <= 0) {
        /* No axes (or an empty list, as ONNX's reference and ONNX Runtime read it): every
         * dim of size 1 goes. */
        n = 0;
        for (int d = 0; d < rank; d++)
            if (tm_vdims(c, x)[d] == 1) axes[n++] = d;
    }
    for (int i = 0; i < n; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
        if (a < 0 || a >= rank)
            return tm_lfail(L, TM_ERR_SHAPE, "axes entry %lld is outside [%d, %d]",
                            (long long)axes[i], -rank, rank - 1);
        if (tm_vdims(c, x)[a] != 1)
            return tm_lfail(L, TM_ERR_SHAPE, "axes entry %lld names a dim of size %lld, not 1",
                            (long long)axes[i], (long long)tm_vdims(c, x)[a]);
    }
    tm_lout(L, 0, tm_squeeze(c, x, axes, n));
    return c->status;
}
TM_REGISTER_OP("", "Squeeze", 1, 27, lower_squeeze);

static tm_status lower_unsqueeze(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    if (x == TM_NONE) return tm_lfail(L, TM_ERR_PARSE, "input 0 ('data') is missing");
    int64_t axes[TM_MAX_RANK];
    int n = read_axes(L, axes);
    if (n == -2) return c->status;
    if (n < 0) return tm_lfail(L, TM_ERR_PARSE, "axes are missing (%s)",
                               tm_lopset(L) >= 13 ? "input 1" : "attribute 'axes'");
    int out_rank = tm_vrank(c, x) + n;
    if (out_rank > TM_MAX_RANK)
        return tm_lfail(L, TM_ERR_UNSUPPORTED, "the result would have rank %d; at most %d is "
                        "supported", out_rank, TM_MAX_RANK);
    int seen[TM_MAX_RANK] = {0};
    for (int i = 0; i < n; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + out_rank : axes[i];
        if (a < 0 || a >= out_rank || seen[a])
            return tm_lfail(L, TM_ERR_SHAPE, "axes entry %lld is %s for output rank %d",
                            (long long)axes[i], a >= 0 && a < out_rank ? "repeated" : "invalid",
                            out_rank);
        seen[a] = 1;
    }
    tm_lout(L, 0, tm_unsqueeze(c, x, axes, n));
    return c->status;
}
TM_REGISTER_OP("", "Unsqueeze", 1, 27, lower_unsqueeze);
