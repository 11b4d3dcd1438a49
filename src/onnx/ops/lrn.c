/* LRN: local response normalisation across channels, y = x / (bias + alpha/size *
 * sum of x^2 over a channel window)^beta. The window mean is an average POOL sliding
 * down the channel axis (zero padding counted), so alpha/size * sum = alpha * mean. */
#include "elementwise.h"

/* x^2 (N, C, D...) seen as (N, 1, C, D1*...*Dk): the mean of `size` channels around c. */
static tm_val channel_window_mean(tm_ctx *c, tm_val sq, int64_t size) {
    const int64_t *d = tm_vdims(c, sq);
    int64_t rest = 1;
    for (int i = 2; i < tm_vrank(c, sq); i++) rest *= d[i];
    int64_t dims[4] = {d[0], 1, d[1], rest};
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 2;                        /* spatial axes: channels, the rest */
    a.i[1] = 1;                        /* average */
    a.i[2] = 1;                        /* zero padding counts: divide by size */
    a.i[5] = size;
    a.i[6] = 1;
    a.i[7] = a.i[8] = 1;               /* strides */
    a.i[9] = (size - 1) / 2;           /* channels before c */
    a.i[11] = size / 2;                /* channels after c: ceil((size - 1) / 2) */
    a.i[13] = a.i[14] = 1;             /* dilations */
    tm_val v = tm_reshape(c, sq, 4, dims);
    return tm_prim(c, TM_P_POOL, &v, 1, &a);
}

static tm_status lower_lrn(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT)) return c->status;
    if (tm_vrank(c, x) < 2)
        return tm_lfail(L, TM_ERR_SHAPE, "input 0 (X) has rank %d, expected at least 2 "
                        "(N, C, ...)", tm_vrank(c, x));
    int64_t size = tm_attr_i(L, "size", 0);
    if (size < 1)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute size=%lld must be >= 1",
                        (long long)size);
    double alpha = tm_attr_f(L, "alpha", 0.0001f), beta = tm_attr_f(L, "beta", 0.75f);
    double bias = tm_attr_f(L, "bias", 1.0f);
    tm_val mean = channel_window_mean(c, tm_mul(c, x, x), size);
    mean = tm_reshape(c, mean, tm_vrank(c, x), tm_vdims(c, x));
    tm_val denom = tm_add(c, tm_mul(c, mean, tm_scalar_like(c, x, alpha)),
                          tm_scalar_like(c, x, bias));
    denom = tm_binary(c, TM_P_POW, denom, tm_scalar_like(c, x, beta));
    tm_lout(L, 0, tm_div(c, x, denom));
    return c->status;
}

TM_REGISTER_OP("", "LRN", 1, 27, lower_lrn);
