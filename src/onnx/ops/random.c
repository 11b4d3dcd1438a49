/* Random operators: RandomUniform, RandomNormal and their *Like forms, Bernoulli and
 * Multinomial, on the seeded RANDOM_UNIFORM / RANDOM_NORMAL primitives. Draws follow
 * our own generator (xoshiro256**): a seed reproduces our stream, not numpy's. */
#include "elementwise.h"

/* Without a seed attribute every run draws anew: the node's seed comes from the context's
 * generator (distinct per node) and the kernel mixes in the run's seed (i[10] = 1). With
 * one, the op is a pure function: the same values on every run, eager or compiled. */
static double draw_seed(tm_lower *L) {
    if (tm_attr_has(L, "seed")) return tm_attr_f(L, "seed", 0.0f);
    return tm_ctx_node_seed(tm_lctx(L));
}

static tm_val draw(tm_lower *L, int prim, tm_dtype dt, int rank, const int64_t *dims,
                   double p0, double p1) {
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = dt;
    a.i[1] = rank;
    for (int d = 0; d < rank; d++) a.i[2 + d] = dims[d];
    a.f[0] = p0;
    a.f[1] = p1;
    a.f[2] = draw_seed(L);
    a.i[10] = !tm_attr_has(L, "seed");
    return tm_prim(tm_lctx(L), prim, NULL, 0, &a);
}

static int check_float_dtype(tm_lower *L, int64_t dt) {
    if (tm_dtype_is_valid((int)dt) && ((TM_DTS_FLOAT >> dt) & 1)) return 0;
    return tm_lfail(L, TM_ERR_DTYPE, "dtype %lld is not a float dtype (1, 10, 11 or 16)",
                    (long long)dt);
}

/* RandomUniform / RandomNormal: shape and dtype from attributes. */
static tm_status lower_random(tm_lower *L, int prim, double p0, double p1) {
    tm_ctx *c = tm_lctx(L);
    int64_t dt = tm_attr_i(L, "dtype", TM_FLOAT);
    const int64_t *shape;
    int rank = tm_attr_ints(L, "shape", &shape);
    if (rank < 0) return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute shape is missing");
    if (rank > TM_MAX_RANK)
        return tm_lfail(L, TM_ERR_UNSUPPORTED, "attribute shape has %d dims, more than %d",
                        rank, TM_MAX_RANK);
    if (check_float_dtype(L, dt)) return c->status;
    tm_lout(L, 0, draw(L, prim, (tm_dtype)dt, rank, shape, p0, p1));
    return c->status;
}

/* The *Like forms: shape from the input, dtype from the attribute or the input. */
static tm_status lower_random_like(tm_lower *L, int prim, double p0, double p1) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    if (x == TM_NONE) return c->status;
    int64_t dt = tm_attr_i(L, "dtype", tm_vdtype(c, x));
    if (check_float_dtype(L, dt)) return c->status;
    tm_lout(L, 0, draw(L, prim, (tm_dtype)dt, tm_vrank(c, x), tm_vdims(c, x), p0, p1));
    return c->status;
}

static tm_status lower_random_uniform(tm_lower *L) {
    return lower_random(L, TM_P_RANDOM_UNIFORM, tm_attr_f(L, "low", 0.0f),
                        tm_attr_f(L, "high", 1.0f));
}

static tm_status lower_random_normal(tm_lower *L) {
    return lower_random(L, TM_P_RANDOM_NORMAL, tm_attr_f(L, "mean", 0.0f),
                        tm_attr_f(L, "scale", 1.0f));
}

static tm_status lower_random_uniform_like(tm_lower *L) {
    return lower_random_like(L, TM_P_RANDOM_UNIFORM, tm_attr_f(L, "low", 0.0f),
                             tm_attr_f(L, "high", 1.0f));
}

static tm_status lower_random_normal_like(tm_lower *L) {
    return lower_random_like(L, TM_P_RANDOM_NORMAL, tm_attr_f(L, "mean", 0.0f),
                             tm_attr_f(L, "scale", 1.0f));
}

/* Bernoulli: 1 where a uniform draw in [0, 1) falls below p, so with probability p. */
static tm_status lower_bernoulli(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val p = tm_ew_input(L, 0);
    if (tm_ew_check(L, 0, p, TM_DTS_FLOAT)) return c->status;
    int64_t dt = tm_attr_i(L, "dtype", tm_vdtype(c, p));
    if (!tm_dtype_is_valid((int)dt) || !(((TM_DTS_NUMERIC | TM_DTS_BOOL) >> dt) & 1))
        return tm_lfail(L, TM_ERR_DTYPE, "attribute dtype=%lld is not a numeric or bool dtype",
                        (long long)dt);
    tm_val u = draw(L, TM_P_RANDOM_UNIFORM, TM_DOUBLE, tm_vrank(c, p), tm_vdims(c, p), 0.0, 1.0);
    tm_val hit = tm_binary(c, TM_P_LT, u, tm_cast(c, p, TM_DOUBLE));
    tm_lout(L, 0, tm_cast(c, hit, (tm_dtype)dt));
    return c->status;
}

/* Multinomial: per batch row, sample_size class indices drawn from softmax(x) by
 * inverting its running sum: the class is the count of cumulative masses <= u. */
static tm_status lower_multinomial(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT)) return c->status;
    if (tm_vrank(c, x) != 2)
        return tm_lfail(L, TM_ERR_SHAPE, "input 0 must be (batch, classes), got rank %d",
                        tm_vrank(c, x));
    int64_t dt = tm_attr_i(L, "dtype", TM_INT32), samples = tm_attr_i(L, "sample_size", 1);
    if (dt != TM_INT32 && dt != TM_INT64)
        return tm_lfail(L, TM_ERR_DTYPE, "attribute dtype=%lld is not int32 (6) or int64 (7)",
                        (long long)dt);
    int64_t batch = tm_vdims(c, x)[0], classes = tm_vdims(c, x)[1];
    if (samples < 1 || classes < 1)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute sample_size=%lld and the class "
                        "count %lld must be >= 1", (long long)samples, (long long)classes);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 1;
    tm_val prob = tm_softmax(c, tm_cast(c, x, TM_DOUBLE), 1, 0);
    tm_val mass = tm_prim(c, TM_P_CUMSUM, &prob, 1, &a);
    int64_t mass_dims[3] = {batch, 1, classes}, u_dims[3] = {batch, samples, 1};
    mass = tm_reshape(c, mass, 3, mass_dims);
    tm_val u = draw(L, TM_P_RANDOM_UNIFORM, TM_DOUBLE, 3, u_dims, 0.0, 1.0);
    int64_t axis = 2;
    tm_val below = tm_cast(c, tm_binary(c, TM_P_LE, mass, u), TM_INT64);
    tm_val k = tm_reduce(c, TM_P_REDUCE_SUM, below, &axis, 1, 0);          /* (batch, samples) */
    /* Rounding may leave the last running sum just under u: stay inside the classes. */
    k = tm_binary(c, TM_P_MIN, k, tm_const_scalar(c, TM_INT64, (double)(classes - 1)));
    tm_lout(L, 0, tm_cast(c, k, (tm_dtype)dt));
    return c->status;
}

TM_REGISTER_OP("", "RandomUniform", 1, 27, lower_random_uniform);
TM_REGISTER_OP("", "RandomNormal", 1, 27, lower_random_normal);
TM_REGISTER_OP("", "RandomUniformLike", 1, 27, lower_random_uniform_like);
TM_REGISTER_OP("", "RandomNormalLike", 1, 27, lower_random_normal_like);
TM_REGISTER_OP("", "Bernoulli", 15, 27, lower_bernoulli);
TM_REGISTER_OP("", "Multinomial", 7, 27, lower_multinomial);
