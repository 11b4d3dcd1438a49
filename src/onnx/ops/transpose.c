/* Transpose, and DepthToSpace / SpaceToDepth, which are a reshape-transpose-reshape.
 * Not Reshape (reshape.c), which keeps element order. */
#include <string.h>
#include "../lower.h"

static tm_status lower_transpose(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    if (x == TM_NONE) return tm_lfail(L, TM_ERR_PARSE, "input 0 ('data') is missing");
    int rank = tm_vrank(c, x);
    int64_t perm[TM_MAX_RANK];
    const int64_t *attr;
    int n = tm_attr_ints(L, "perm", &attr);
    if (n < 0) {
        for (int d = 0; d < rank; d++) perm[d] = rank - 1 - d;
    } else {
        if (n != rank)
            return tm_lfail(L, TM_ERR_SHAPE, "attribute 'perm' has %d entries for rank %d", n,
                            rank);
        int seen[TM_MAX_RANK] = {0};
        for (int d = 0; d < rank; d++) {
            int64_t p = attr[d] < 0 ? attr[d] + rank : attr[d];
            if (p < 0 || p >= rank || seen[p])
                return tm_lfail(L, TM_ERR_SHAPE, "attribute 'perm' is not a permutation: "
                                "entry %d is %lld", d, (long long)attr[d]);
            seen[p] = 1;
            perm[d] = p;
        }
    }
    tm_lout(L, 0, tm_transpose(c, x, perm));
    return c->status;
}
TM_REGISTER_OP("", "Transpose", 1, 27, lower_transpose);

/* Checks a rank-4 input and a positive blocksize; returns the blocksize or 0. */
static int64_t block_of(tm_lower *L, tm_val x) {
    tm_ctx *c = tm_lctx(L);
    if (x == TM_NONE) {
        tm_lfail(L, TM_ERR_PARSE, "input 0 ('input') is missing");
        return 0;
    }
    if (tm_vrank(c, x) != 4) {
        tm_lfail(L, TM_ERR_SHAPE, "input 'input' must have rank 4 (N, C, H, W), got %d",
                 tm_vrank(c, x));
        return 0;
    }
    int64_t b = tm_attr_i(L, "blocksize", 0);
    if (b <= 0) tm_lfail(L, TM_ERR_PARSE, "attribute 'blocksize' must be positive, got %lld",
                         (long long)b);
    return b > 0 ? b : 0;
}

static tm_status lower_depth_to_space(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    int64_t b = block_of(L, x);
    if (!b) return c->status;
    const int64_t *d = tm_vdims(c, x);
    int64_t n = d[0], ch = d[1], h = d[2], w = d[3];
    if (ch % (b * b))
        return tm_lfail(L, TM_ERR_SHAPE, "input 'input' has %lld channels, not a multiple of "
                        "blocksize^2 = %lld", (long long)ch, (long long)(b * b));
    const char *mode = tm_attr_s(L, "mode", "DCR");
    int64_t cb = ch / (b * b);
    int64_t out[4] = {n, cb, h * b, w * b};
    if (!strcmp(mode, "DCR")) {
        int64_t split[6] = {n, b, b, cb, h, w}, perm[6] = {0, 3, 4, 1, 5, 2};
        x = tm_transpose(c, tm_reshape(c, x, 6, split), perm);
    } else if (!strcmp(mode, "CRD")) {
        int64_t split[6] = {n, cb, b, b, h, w}, perm[6] = {0, 1, 4, 2, 5, 3};
        x = tm_transpose(c, tm_reshape(c, x, 6, split), perm);
    } else {
        return tm_lfail(L, TM_ERR_UNSUPPORTED, "attribute 'mode' is '%s'; expected DCR or CRD",
                        mode);
    }
    tm_lout(L, 0, tm_reshape(c, x, 4, out));
    return c->status;
}
TM_REGISTER_OP("", "DepthToSpace", 1, 27, lower_depth_to_space);

static tm_status lower_space_to_depth(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    int64_t b = block_of(L, x);
    if (!b) return c->status;
    const int64_t *d = tm_vdims(c, x);
    int64_t n = d[0], ch = d[1], h = d[2], w = d[3];
    if (h % b || w % b)
        return tm_lfail(L, TM_ERR_SHAPE, "input 'input' has spatial dims %lldx%lld, not "
                        "multiples of blocksize %lld", (long long)h, (long long)w, (long long)b);
    int64_t split[6] = {n, ch, h / b, b, w / b, b}, perm[6] = {0, 3, 5, 1, 2, 4};
    int64_t out[4] = {n, ch * b * b, h / b, w / b};
    x = tm_transpose(c, tm_reshape(c, x, 6, split), perm);
    tm_lout(L, 0, tm_reshape(c, x, 4, out));
    return c->status;
}
TM_REGISTER_OP("", "SpaceToDepth", 1, 27, lower_space_to_depth);
