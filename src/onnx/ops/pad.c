/* Pad in every opset's form (attributes before 11, inputs after, axes from 18, wrap mode
 * from 19) as one PAD primitive, and CenterCropPad as slice + pad. Not the pooling or
 * convolution pads, which those primitives take themselves. */
#include <string.h>
#include "../lower.h"

static int mode_of(tm_lower *L) {
    static const char *const modes[] = {"constant", "reflect", "edge", "wrap"};
    const char *m = tm_attr_s(L, "mode", "constant");
    int n = tm_lopset(L) >= 19 ? 4 : 3;
    for (int i = 0; i < n; i++)
        if (!strcmp(m, modes[i])) return i;
    tm_lfail(L, TM_ERR_UNSUPPORTED, "attribute 'mode' is '%s', which opset %lld does not have",
             m, (long long)tm_lopset(L));
    return -1;
}

/* Checks the modes' limits: reflect mirrors without the edge, so it needs pads below the
 * dim; edge and reflect need a non-empty axis to copy from. */
static tm_status pad_apply(tm_lower *L, tm_val x, int mode, const int64_t *begin,
                           const int64_t *end, double value) {
    tm_ctx *c = tm_lctx(L);
    int rank = tm_vrank(c, x);
    for (int d = 0; d < rank && mode != 0; d++) {
        int64_t dim = tm_vdims(c, x)[d];
        int grows = begin[d] > 0 || end[d] > 0;
        if (grows && dim == 0)
            return tm_lfail(L, TM_ERR_SHAPE, "'pads' grows axis %d of size 0 in a mode that "
                            "copies from it", d);
        if (mode == 1 && (begin[d] >= dim || end[d] >= dim) && grows)
            return tm_lfail(L, TM_ERR_SHAPE, "'pads' of %lld/%lld on axis %d of size %lld are "
                            "too large for reflect mode", (long long)begin[d],
                            (long long)end[d], d, (long long)dim);
    }
    for (int d = 0; d < rank; d++)
        if (tm_vdims(c, x)[d] + begin[d] + end[d] < 0)
            return tm_lfail(L, TM_ERR_SHAPE, "'pads' of %lld/%lld crop axis %d of size %lld "
                            "below zero", (long long)begin[d], (long long)end[d], d,
                            (long long)tm_vdims(c, x)[d]);
    int identity = 1;
    for (int d = 0; d < rank; d++)
        if (begin[d] || end[d]) identity = 0;
    tm_lout(L, 0, identity ? x : tm_pad(c, x, mode, begin, end, value));
    return c->status;
}

/* Opsets 1-10: pads (or, in opset 1, paddings) and value as attributes. */
static tm_status lower_pad_v2(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    if (x == TM_NONE) return tm_lfail(L, TM_ERR_PARSE, "input 'data' is missing");
    int rank = tm_vrank(c, x);
    const char *name = tm_lopset(L) < 2 ? "paddings" : "pads";
    const int64_t *pads;
    int n = tm_attr_ints(L, name, &pads);
    if (n < 0) return tm_lfail(L, TM_ERR_PARSE, "attribute '%s' is missing", name);
    if (n != 2 * rank)
        return tm_lfail(L, TM_ERR_SHAPE, "attribute '%s' has %d entries; rank %d needs %d",
                        name, n, rank, 2 * rank);
    int mode = mode_of(L);
    if (mode < 0) return c->status;
    return pad_apply(L, x, mode, pads, pads + rank, tm_attr_f(L, "value", 0.0f));
}
TM_REGISTER_OP("", "Pad", 1, 10, lower_pad_v2);

static int64_t read_ints(tm_lower *L, int i, const char *name, int64_t *out, int64_t max) {
    tm_ctx *c = tm_lctx(L);
    tm_val v = tm_lin(L, i);
    tm_dtype dt = tm_vdtype(c, v);
    if (dt != TM_INT64 && dt != TM_INT32) {
        tm_lfail(L, TM_ERR_DTYPE, "input '%s' must be int64, got %s", name, tm_dtype_name(dt));
        return -1;
    }
    if (tm_vnumel(c, v) > max) {
        tm_lfail(L, TM_ERR_SHAPE, "input '%s' has %lld entries; at most %lld fit",
                 name, (long long)tm_vnumel(c, v), (long long)max);
        return -1;
    }
    return tm_host_i64(c, v, out, max);
}

/* The constant_value input: one element of data's dtype; 0 (or "" / false) when absent. */
static int pad_value(tm_lower *L, tm_val x, double *value) {
    tm_ctx *c = tm_lctx(L);
    *value = 0.0;
    if (!tm_lhas(L, 2)) return 0;
    tm_val v = tm_lin(L, 2);
    if (tm_vdtype(c, v) != tm_vdtype(c, x)) {
        tm_lfail(L, TM_ERR_DTYPE, "input 'constant_value' is %s, 'data' is %s",
                 tm_dtype_name(tm_vdtype(c, v)), tm_dtype_name(tm_vdtype(c, x)));
        return -1;
    }
    if (tm_vnumel(c, v) != 1) {
        tm_lfail(L, TM_ERR_SHAPE, "input 'constant_value' must hold one element, it holds %lld",
                 (long long)tm_vnumel(c, v));
        return -1;
    }
    if (tm_vdtype(c, v) == TM_STRING) {
        tm_lfail(L, TM_ERR_UNSUPPORTED, "input 'constant_value' of type string is not "
                 "supported");
        return -1;
    }
    return tm_host_f64(c, v, value);
}

/* Opsets 11+: pads, constant_value and (18+) axes as inputs. */
static tm_status lower_pad(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    if (x == TM_NONE) return tm_lfail(L, TM_ERR_PARSE, "input 'data' is missing");
    if (!tm_lhas(L, 1)) return tm_lfail(L, TM_ERR_PARSE, "input 'pads' is missing");
    int rank = tm_vrank(c, x);
    int64_t axes[TM_MAX_RANK], pads[2 * TM_MAX_RANK];
    int64_t n_axes = rank;
    for (int d = 0; d < rank; d++) axes[d] = d;
    if (tm_lopset(L) >= 18 && tm_lhas(L, 3)) {
        n_axes = read_ints(L, 3, "axes", axes, TM_MAX_RANK);
        if (n_axes < 0) return c->status;
    }
    int64_t n = read_ints(L, 1, "pads", pads, 2 * TM_MAX_RANK);
    if (n < 0) return c->status;
    if (n != 2 * n_axes)
        return tm_lfail(L, TM_ERR_SHAPE, "input 'pads' has %lld entries for %lld axes",
                        (long long)n, (long long)n_axes);
    int64_t begin[TM_MAX_RANK] = {0}, end[TM_MAX_RANK] = {0};
    int seen[TM_MAX_RANK] = {0};
    for (int64_t i = 0; i < n_axes; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
        if (a < 0 || a >= rank || seen[a])
            return tm_lfail(L, TM_ERR_SHAPE, "input 'axes' entry %lld is %s for rank %d",
                            (long long)axes[i], a >= 0 && a < rank ? "repeated" : "invalid",
                            rank);
        seen[a] = 1;
        begin[a] = pads[i];
        end[a] = pads[n_axes + i];
    }
    int mode = mode_of(L);
    double value;
    if (mode < 0 || pad_value(L, x, &value)) return c->status;
    return pad_apply(L, x, mode, begin, end, value);
}
TM_REGISTER_OP("", "Pad", 11, 27, lower_pad);

/* Each named axis is cropped (centered, the extra element on the end side) or padded with
 * zeros (the extra element on the end side) to the requested size. */
static tm_status lower_center_crop_pad(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    if (x == TM_NONE) return tm_lfail(L, TM_ERR_PARSE, "input 'input_data' is missing");
    if (!tm_lhas(L, 1)) return tm_lfail(L, TM_ERR_PARSE, "input 'shape' is missing");
    int rank = tm_vrank(c, x);
    int64_t shape[TM_MAX_RANK], axes[TM_MAX_RANK];
    int64_t n = read_ints(L, 1, "shape", shape, TM_MAX_RANK);
    if (n < 0) return c->status;
    const int64_t *attr;
    int na = tm_attr_ints(L, "axes", &attr);
    if (na < 0) {
        if (n != rank)
            return tm_lfail(L, TM_ERR_SHAPE, "input 'shape' has %lld entries for rank %d",
                            (long long)n, rank);
        for (int d = 0; d < rank; d++) axes[d] = d;
    } else {
        if (na != n)
            return tm_lfail(L, TM_ERR_SHAPE, "input 'shape' has %lld entries, attribute "
                            "'axes' has %d", (long long)n, na);
        memcpy(axes, attr, (size_t)na * sizeof *attr);
    }
    int64_t st[TM_MAX_RANK], sp[TM_MAX_RANK], cn[TM_MAX_RANK];
    int64_t begin[TM_MAX_RANK] = {0}, end[TM_MAX_RANK] = {0};
    for (int d = 0; d < rank; d++) {
        st[d] = 0;
        sp[d] = 1;
        cn[d] = tm_vdims(c, x)[d];
    }
    for (int64_t i = 0; i < n; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
        if (a < 0 || a >= rank)
            return tm_lfail(L, TM_ERR_SHAPE, "attribute 'axes' entry %lld is outside [%d, %d]",
                            (long long)axes[i], -rank, rank - 1);
        if (shape[i] < 0)
            return tm_lfail(L, TM_ERR_SHAPE, "input 'shape' has a negative size %lld",
                            (long long)shape[i]);
        int64_t dim = tm_vdims(c, x)[a];
        if (dim > shape[i]) {
            st[a] = (dim - shape[i]) / 2;
            cn[a] = shape[i];
        } else {
            begin[a] = (shape[i] - dim) / 2;
            end[a] = shape[i] - dim - begin[a];
        }
    }
    x = tm_slice(c, x, st, sp, cn);
    if (!tm_ctx_ok(c)) return c->status;
    return pad_apply(L, x, 0, begin, end, 0.0);
}
TM_REGISTER_OP("", "CenterCropPad", 18, 27, lower_center_crop_pad);
