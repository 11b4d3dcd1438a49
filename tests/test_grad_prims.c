/* Gradient rules of every differentiable primitive against central finite differences
 * in double precision (eager tape, tm_backward), on random values and shapes with size-1
 * broadcasting, several reduced axes, strided and reversed slices, every pad mode,
 * batch-broadcast products, grouped/strided/dilated convolutions, each pool kind, the
 * fused nn primitives. The float32 gradient of each case is checked against the double
 * one (the f32 paths of the rules, e.g. layernorm's saved statistics). Also the errors:
 * a primitive without a rule, a quantizing cast, an unsupported scatter reduction.
 * Whole graphs and plans are tests/test_grad.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../src/core/autodiff.h"

#define CHECK_RNG_SEED 0x9e3779b97f4a7c15ULL
#include "check.h"

#define MAX_IN 4

typedef struct gcase gcase;
typedef tm_val (*build_fn)(tm_ctx *c, const gcase *k, const tm_val *x, tm_dtype dt);

struct gcase {
    const char *name;
    build_fn build;
    int n;                            /* float inputs, all differentiated */
    int rank[MAX_IN];
    int64_t dims[MAX_IN][TM_MAX_RANK];
    double lo, hi;                    /* uniform range of the values */
    double away;                      /* keep |x| >= away (kinks at 0) */
    int prim;                         /* for builders shared by several primitives */
    int64_t i[16];                    /* builder parameters */
    int zero_at;                      /* > 0: element zero_at - 1 of input 0 is exactly 0 */
    double h, tol;                    /* finite-difference step and tolerance (0: defaults) */
};

/* ---- Building ------------------------------------------------------------------------ */

static tm_val P(tm_ctx *c, int prim, const tm_val *in, int n, const tm_args *a) {
    return tm_prim(c, prim, in, n, a);
}

static tm_args args0(void) {
    tm_args a;
    memset(&a, 0, sizeof a);
    return a;
}

static tm_val i64s(tm_ctx *c, int rank, const int64_t *dims, const int64_t *v) {
    tm_val t = tm_const_i64s(c, v, tm_numel(rank, dims));
    return tm_reshape(c, t, rank, dims);
}

static tm_val b_unary(tm_ctx *c, const gcase *k, const tm_val *x, tm_dtype dt) {
    tm_args a = args0();
    a.i[0] = k->i[0];
    return P(c, k->prim, x, 1, &a);
}

static tm_val b_binary(tm_ctx *c, const gcase *k, const tm_val *x, tm_dtype dt) {
    tm_args a = args0();
    a.i[0] = k->i[0];
    return P(c, k->prim, x, 2, &a);
}

static tm_val b_pow_int(tm_ctx *c, const gcase *k, const tm_val *x, tm_dtype dt) {
    int64_t e[6] = {2, 3, 0, 1, -1, 4}, dims[2] = {1, 6};
    tm_val in[2] = {x[0], i64s(c, 2, dims, e)};
    return P(c, TM_P_POW, in, 2, NULL);
}

/* x ^ a constant: the exponents 0, 1, 2 and 2.5. */
static tm_val b_pow_const(tm_ctx *c, const gcase *k, const tm_val *x, tm_dtype dt) {
    static const double e[4] = {0, 1, 2, 2.5};
    return tm_binary(c, TM_P_POW, x[0], tm_const_scalar(c, dt, e[k->i[0]]));
}

static tm_val b_where(tm_ctx *c, const gcase *k, const tm_val *x, tm_dtype dt) {
    int64_t v[8] = {1, 0, 0, 1, 1, 1, 0, 0}, dims[3] = {2, 1, 4};
    tm_val cond = tm_cast_exact(c, i64s(c, 3, dims, v), TM_BOOL);
    tm_val in[3] = {cond, x[0], x[1]};
    return P(c, TM_P_WHERE, in, 3, NULL);
}

static tm_val b_cast(tm_ctx *c, const gcase *k, const tm_val *x, tm_dtype dt) {
    tm_dtype other = dt == TM_DOUBLE ? TM_FLOAT : TM_DOUBLE;
    tm_val y = tm_cast_exact(c, x[0], other);
    return tm_cast_exact(c, tm_mul(c, y, y), dt);
}

static tm_val b_args(tm_ctx *c, const gcase *k, const tm_val *x, tm_dtype dt) {
    tm_args a = args0();
    for (int j = 0; j < 16; j++) a.i[j] = k->i[j];
    return P(c, k->prim, x, k->n, &a);
}

static tm_val b_reshape(tm_ctx *c, const gcase *k, const tm_val *x, tm_dtype dt) {
    int64_t d[2] = {4, 6};
    tm_val y = tm_reshape(c, x[0], 2, d);
    return tm_mul(c, y, y);
}

static tm_val b_pad(tm_ctx *c, const gcase *k, const tm_val *x, tm_dtype dt) {
    tm_args a = args0();
    a.i[0] = k->i[0];
    for (int j = 0; j < 4; j++) a.i[1 + j] = k->i[1 + j];
    a.f[0] = 0.5;
    return P(c, TM_P_PAD, x, 1, &a);
}

static tm_val b_gather(tm_ctx *c, const gcase *k, const tm_val *x, tm_dtype dt) {
    int64_t v[6] = {0, 4, -1, 2, 2, 0}, dims[2] = {2, 3};
    tm_args a = args0();
    a.i[0] = 1;
    tm_val in[2] = {x[0], i64s(c, 2, dims, v)};
    return P(c, TM_P_GATHER, in, 2, &a);
}

static tm_val b_gather_elements(tm_ctx *c, const gcase *k, const tm_val *x, tm_dtype dt) {
    int64_t v[6] = {0, 3, 1, 1, 2, 0}, dims[2] = {3, 2};
    tm_args a = args0();
    a.i[0] = 1;
    tm_val in[2] = {x[0], i64s(c, 2, dims, v)};
    return P(c, TM_P_GATHER_ELEMENTS, in, 2, &a);
}

static tm_val b_gather_nd(tm_ctx *c, const gcase *k, const tm_val *x, tm_dtype dt) {
    tm_args a = args0();
    a.i[0] = k->i[0];
    tm_val idx;
    if (k->i[0] == 0) {
        int64_t v[4] = {0, 1, 2, 3}, dims[2] = {2, 2};
        idx = i64s(c, 2, dims, v);
    } else {
        int64_t v[4] = {2, 0, 1, 1}, dims[3] = {2, 2, 1};
        idx = i64s(c, 3, dims, v);
    }
    tm_val in[2] = {x[0], idx};
    return P(c, TM_P_GATHER_ND, in, 2, &a);
}

static tm_val b_scatter_elements(tm_ctx *c, const gcase *k, const tm_val *x, tm_dtype dt) {
    int64_t distinct[6] = {0, 3, 1, 2, 3, 0}, repeated[6] = {1, 1, 2, 0, 3, 3}, dims[2] = {3, 2};
    tm_args a = args0();
    a.i[0] = 1;
    a.i[1] = k->i[0];
    tm_val in[3] = {x[0], i64s(c, 2, dims, k->i[0] ? repeated : distinct), x[1]};
    tm_val y = P(c, TM_P_SCATTER_ELEMENTS, in, 3, &a);
    return tm_mul(c, y, y);
}

static tm_val b_scatter_nd(tm_ctx *c, const gcase *k, const tm_val *x, tm_dtype dt) {
    int64_t distinct[2] = {1, 3}, repeated[2] = {2, 2}, dims[2] = {2, 1};
    tm_args a = args0();
    a.i[0] = k->i[0];
    tm_val in[3] = {x[0], i64s(c, 2, dims, k->i[0] ? repeated : distinct), x[1]};
    tm_val y = P(c, TM_P_SCATTER_ND, in, 3, &a);
    return tm_mul(c, y, y);
}

static tm_val b_reduce(tm_ctx *c, const gcase *k, const tm_val *x, tm_dtype dt) {
    tm_args a = args0();
    a.i[0] = k->i[0];
    tm_val y = P(c, k->prim, x, 1, &a);
    return tm_mul(c, y, y);
}

static tm_val b_conv(tm_ctx *c, const gcase *k, const tm_val *x, tm_dtype dt) {
    tm_args a = args0();
    for (int j = 0; j < 16; j++) a.i[j] = k->i[j];
    tm_val y = P(c, k->prim, x, k->n, &a);
    return tm_mul(c, y, y);
}

static tm_val b_pool(tm_ctx *c, const gcase *k, const tm_val *x, tm_dtype dt) {
    tm_args a = args0();
    for (int j = 0; j < 16; j++) a.i[j] = k->i[j];
    if (k->prim == TM_P_MAXPOOL_INDICES) {
        tm_val out[2];
        tm_prim_n(c, TM_P_MAXPOOL_INDICES, x, 1, &a, out, 2);
        return out[0];
    }
    return P(c, TM_P_POOL, x, 1, &a);
}

static tm_val b_layernorm(tm_ctx *c, const gcase *k, const tm_val *x, tm_dtype dt) {
    tm_args a = args0();
    a.i[0] = k->i[0];
    a.i[1] = k->i[1];
    a.f[0] = 1e-5;
    tm_val out[3];
    if (tm_prim_n(c, TM_P_LAYERNORM, x, k->n, &a, out, 3) != TM_OK) return TM_NONE;
    if (!k->i[2]) return out[0];
    /* The statistics outputs read too (ONNX LayerNormalization's Mean and InvStdDev). */
    tm_val s = tm_add(c, tm_cast_exact(c, out[2], dt), k->i[1] ? tm_scalar_like(c, out[0], 0.0)
                                                           : tm_cast_exact(c, out[1], dt));
    return tm_add(c, out[0], tm_mul(c, s, tm_scalar_like(c, out[0], 0.3)));
}

static tm_val b_topk(tm_ctx *c, const gcase *k, const tm_val *x, tm_dtype dt) {
    tm_args a = args0();
    a.i[0] = 1;
    a.i[1] = 2;
    a.i[2] = k->i[0];
    a.i[3] = 1;
    tm_val out[2];
    if (tm_prim_n(c, TM_P_TOPK, x, 1, &a, out, 2) != TM_OK) return TM_NONE;
    return tm_mul(c, out[0], out[0]);
}

/* A little of everything: a gated residual block as exports lower it. */
static tm_val b_block(tm_ctx *c, const gcase *k, const tm_val *x, tm_dtype dt) {
    tm_val h = tm_matmul(c, x[0], x[1]);                         /* (2, 3, 5) */
    tm_args sm = args0();
    sm.i[0] = 2;
    tm_val p = P(c, TM_P_SOFTMAX, &h, 1, &sm);
    tm_val gate = tm_unary(c, TM_P_SIGMOID, tm_add(c, h, x[2])); /* x[2]: (1, 1, 5) */
    tm_val y = tm_mul(c, p, gate);
    tm_args ln = args0();
    ln.i[0] = 2;
    ln.f[0] = 1e-5;
    tm_val in[3] = {tm_add(c, y, h), x[3], x[3]}, out[3];
    if (tm_prim_n(c, TM_P_LAYERNORM, in, 3, &ln, out, 3) != TM_OK) return TM_NONE;
    return tm_unary(c, TM_P_TANH, out[0]);
}

/* Attention over q, k, v (rank 4, layouts i[0..2], output layout i[3]), scaled (i[5]: 1
 * multiply, 2 divide, by i[6] / 1000) and masked (i[4] = 1: a constant mask (B, 1, 1, Sk)
 * built here; i[4] = 2: input 3, differentiated). In float32 (unless i[7]) as one
 * ATTENTION_TRAIN, whose rule is under test; in double, or float32 with i[7], as the
 * primitives an export has. */
static tm_val swap12(tm_ctx *c, tm_val x, int layout) {
    static const int64_t perm[4] = {0, 2, 1, 3};
    return layout ? tm_transpose(c, x, perm) : x;
}

static tm_val b_attention(tm_ctx *c, const gcase *k, const tm_val *x, tm_dtype dt) {
    tm_val mask = TM_NONE;
    const int64_t *dk = tm_vdims(c, x[1]);
    int64_t sk = dk[k->i[1] ? 1 : 2];
    if (k->i[4] == 1) {
        int64_t b = dk[0], dims[4] = {b, 1, 1, sk};
        double *mv = malloc((size_t)(b * sk) * sizeof *mv);
        for (int64_t j = 0; j < b * sk; j++) mv[j] = j % 3 == 2 ? -1e4 : 0.25 * (double)(j % 5);
        mask = tm_val_tensor(c, tensor_of(dt, 4, dims, mv), 0);
        free(mv);
    } else if (k->i[4] == 2) {
        mask = x[3];
    }
    double scale = (double)k->i[6] / 1000.0;
    if (dt == TM_FLOAT && !k->i[7]) {
        tm_args a = args0();
        for (int i = 0; i < 4; i++) a.i[i] = k->i[i];
        a.i[4] = mask != TM_NONE;
        a.i[5] = k->i[5];
        a.f[0] = scale;
        tm_val in[4] = {x[0], x[1], x[2], mask}, out[2];
        if (tm_prim_n(c, TM_P_ATTENTION_TRAIN, in, mask != TM_NONE ? 4 : 3, &a, out, 2) != TM_OK)
            return TM_NONE;
        return out[0];
    }
    tm_val q = swap12(c, x[0], (int)k->i[0]), kk = swap12(c, x[1], (int)k->i[1]);
    tm_val v = swap12(c, x[2], (int)k->i[2]);
    tm_args tb = args0();
    tb.i[1] = 1;
    tm_val s = tm_prim(c, TM_P_MATMUL, (tm_val[2]){q, kk}, 2, &tb);
    if (k->i[5] == 1) s = tm_mul(c, s, tm_scalar_like(c, s, scale));
    else if (k->i[5] == 2) s = tm_div(c, s, tm_scalar_like(c, s, scale));
    if (mask != TM_NONE) s = tm_add(c, s, mask);
    tm_args sm = args0();
    sm.i[0] = 3;
    tm_val pr = P(c, TM_P_SOFTMAX, &s, 1, &sm);
    return swap12(c, tm_matmul(c, pr, v), (int)k->i[3]);
}

static int gradient(const gcase *k, tm_dtype dt, double *const *v, double **r, int64_t *ny,
                    double **g);

/* The fused rule against the primitives' rules, both in float32: the same products, so
 * much closer than float32 against double. */
static void attention_fused_vs_composed(gcase k) {
    double *v[MAX_IN], *gf[MAX_IN], *gc[MAX_IN], *r = NULL;
    int64_t ny = 0;
    for (int i = 0; i < k.n; i++) {
        int64_t n = tm_numel(k.rank[i], k.dims[i]);
        v[i] = malloc((size_t)(n + 1) * sizeof(double));
        gf[i] = calloc((size_t)n + 1, sizeof(double));
        gc[i] = calloc((size_t)n + 1, sizeof(double));
        for (int64_t j = 0; j < n; j++) v[i][j] = (double)(float)uniform(-1, 1);
    }
    k.i[7] = 0;
    int ok = gradient(&k, TM_FLOAT, v, &r, &ny, gf);
    k.i[7] = 1;
    ok = ok && gradient(&k, TM_FLOAT, v, &r, &ny, gc);
    check(ok, "%s: fused and composed gradients", k.name);
    for (int i = 0; ok && i < k.n; i++) {
        int64_t n = tm_numel(k.rank[i], k.dims[i]);
        double scale = 1e-3, err = 0.0;
        for (int64_t j = 0; j < n; j++) scale = fmax(scale, fabs(gc[i][j]));
        for (int64_t j = 0; j < n; j++) err = fmax(err, fabs(gf[i][j] - gc[i][j]));
        check(err <= 2e-5 * scale, "%s: input %d: fused rule differs from the primitives' by "
              "%.3g (scale %.3g)", k.name, i, err, scale);
    }
    for (int i = 0; i < k.n; i++) free(v[i]), free(gf[i]), free(gc[i]);
    free(r);
}

/* ---- The check ----------------------------------------------------------------------- */

static tm_val forward(tm_ctx *c, const gcase *k, tm_dtype dt, double *const *v, tm_val *xs,
                      int tape) {
    for (int i = 0; i < k->n; i++) {
        xs[i] = tm_val_tensor(c, tensor_of(dt, k->rank[i], k->dims[i], v[i]), 0);
        if (tape && xs[i] != TM_NONE) c->vals[xs[i]].tracked = 1;
    }
    c->tape = tape;
    tm_val y = k->build(c, k, xs, dt);
    c->tape = 0;
    return y;
}

/* sum(y * r) in double: the scalar the finite differences see. */
static double loss_at(const gcase *k, double *const *v, const double *r, int *ok) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_val xs[MAX_IN];
    tm_val y = forward(&c, k, TM_DOUBLE, v, xs, 0);
    const tm_tensor *t = tm_ctx_ok(&c) ? tm_vdata(&c, y) : NULL;
    double s = 0;
    *ok = t != NULL;
    for (int64_t i = 0; t && i < tm_tensor_numel_(t); i++) s += element(t, i) * r[i];
    tm_ctx_destroy(&c);
    return s;
}

/* The gradient of sum(y * r) at v, computed in dtype dt, into g (per input). Returns 0
 * on failure (message printed). */
static int gradient(const gcase *k, tm_dtype dt, double *const *v, double **r, int64_t *ny,
                    double **g) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_val xs[MAX_IN], gx[MAX_IN];
    tm_val y = forward(&c, k, dt, v, xs, 1);
    int ok = tm_ctx_ok(&c) && y != TM_NONE;
    if (ok && !*r) {
        *ny = tm_vnumel(&c, y);
        *r = malloc((size_t)(*ny + 1) * sizeof **r);
        for (int64_t i = 0; i < *ny; i++) (*r)[i] = uniform(-1, 1);
    }
    if (ok) {
        tm_val seed = tm_val_tensor(&c, tensor_of(dt, tm_vrank(&c, y), tm_vdims(&c, y), *r), 0);
        ok = tm_backward(&c, y, seed, 0, k->n, xs, gx) == TM_OK;
    }
    for (int i = 0; ok && i < k->n; i++) {
        int64_t n = tm_numel(k->rank[i], k->dims[i]);
        const tm_tensor *t = gx[i] == TM_NONE ? NULL : tm_vdata(&c, gx[i]);
        for (int64_t j = 0; j < n; j++) g[i][j] = t ? element(t, j) : 0.0;
    }
    if (!ok) printf("FAIL %s (%s): %s\n", k->name, tm_dtype_name(dt), c.err.message);
    tm_ctx_destroy(&c);
    return ok;
}

static void run_case(const gcase *k) {
    double *v[MAX_IN], *g64[MAX_IN], *g32[MAX_IN], *v32[MAX_IN];
    double lo = k->lo, hi = k->hi;
    if (lo == 0 && hi == 0) lo = -1, hi = 1;
    for (int i = 0; i < k->n; i++) {
        int64_t n = tm_numel(k->rank[i], k->dims[i]);
        v[i] = malloc((size_t)(n + 1) * sizeof(double));
        v32[i] = malloc((size_t)(n + 1) * sizeof(double));
        g64[i] = calloc((size_t)n + 1, sizeof(double));
        g32[i] = calloc((size_t)n + 1, sizeof(double));
        for (int64_t j = 0; j < n; j++) {
            double x;
            do x = uniform(lo, hi); while (fabs(x) < k->away);
            v[i][j] = x;
        }
        if (i == 0 && k->zero_at > 0) v[0][k->zero_at - 1] = 0.0;
        /* The f32 check runs on values f32 holds exactly, and so does its reference. */
        for (int64_t j = 0; j < n; j++) v32[i][j] = (double)(float)v[i][j];
    }
    double *r = NULL;
    int64_t ny = 0;
    int ok = gradient(k, TM_DOUBLE, v, &r, &ny, g64);
    failed += !ok;
    double h = k->h ? k->h : 1e-5, tol = k->tol ? k->tol : 1e-6;
    for (int i = 0; ok && i < k->n; i++) {
        int64_t n = tm_numel(k->rank[i], k->dims[i]), worst = -1;
        double scale = 1.0, err = 0.0, fd_worst = 0.0;
        double *fd = malloc((size_t)(n + 1) * sizeof *fd);
        for (int64_t j = 0; j < n; j++) {
            double keep = v[i][j];
            int ok1, ok2;
            v[i][j] = keep + h;
            double up = loss_at(k, v, r, &ok1);
            v[i][j] = keep - h;
            double down = loss_at(k, v, r, &ok2);
            v[i][j] = keep;
            fd[j] = (up - down) / (2 * h);
            if (fabs(fd[j]) > scale) scale = fabs(fd[j]);
        }
        for (int64_t j = 0; j < n; j++)
            if (fabs(g64[i][j] - fd[j]) > err) err = fabs(g64[i][j] - fd[j]), worst = j, fd_worst = fd[j];
        check(err <= tol * scale, "%s: input %d: d/dx[%lld] = %.12g, finite differences %.12g "
              "(error %.3g, scale %.3g)", k->name, i, (long long)worst,
              worst >= 0 ? g64[i][worst] : 0.0, fd_worst, err, scale);
        free(fd);
    }
    /* float32 against double, at the same (f32-exact) values. */
    if (ok) {
        double *g64b[MAX_IN];
        for (int i = 0; i < k->n; i++)
            g64b[i] = calloc((size_t)tm_numel(k->rank[i], k->dims[i]) + 1, sizeof(double));
        int ok32 = gradient(k, TM_FLOAT, v32, &r, &ny, g32) && gradient(k, TM_DOUBLE, v32, &r, &ny, g64b);
        failed += !ok32;
        for (int i = 0; ok32 && i < k->n; i++) {
            int64_t n = tm_numel(k->rank[i], k->dims[i]), worst = -1;
            double scale = 1.0, err = 0.0;
            for (int64_t j = 0; j < n; j++) if (fabs(g64b[i][j]) > scale) scale = fabs(g64b[i][j]);
            for (int64_t j = 0; j < n; j++)
                if (fabs(g32[i][j] - g64b[i][j]) > err) err = fabs(g32[i][j] - g64b[i][j]), worst = j;
            check(err <= 2e-3 * scale, "%s: input %d in float32: d/dx[%lld] = %.9g, double gives "
                  "%.9g", k->name, i, (long long)worst, worst >= 0 ? g32[i][worst] : 0.0,
                  worst >= 0 ? g64b[i][worst] : 0.0);
        }
        for (int i = 0; i < k->n; i++) free(g64b[i]);
    }
    for (int i = 0; i < k->n; i++) {
        free(v[i]);
        free(v32[i]);
        free(g64[i]);
        free(g32[i]);
    }
    free(r);
}

/* ---- Cases --------------------------------------------------------------------------- */

#define R3(a, b, c) 3, {a, b, c}
static gcase unary_case(const char *name, int prim, double lo, double hi, double away,
                        int64_t arg) {
    gcase k = {name, b_unary, 1, {3}, {{2, 3, 4}}, lo, hi, away, prim, {arg}, 0, 0, 0};
    return k;
}

static void test_elementwise(void) {
    struct { const char *name; int prim; double lo, hi, away; int64_t arg; } u[] = {
        {"neg", TM_P_NEG, -2, 2, 0, 0},        {"abs", TM_P_ABS, -2, 2, 0.05, 0},
        {"exp", TM_P_EXP, -2, 2, 0, 0},        {"log", TM_P_LOG, 0.2, 3, 0, 0},
        {"sqrt", TM_P_SQRT, 0.2, 3, 0, 0},     {"reciprocal", TM_P_RECIPROCAL, -2, 2, 0.3, 0},
        {"sin", TM_P_SIN, -3, 3, 0, 0},        {"cos", TM_P_COS, -3, 3, 0, 0},
        {"tan", TM_P_TAN, -1.2, 1.2, 0, 0},    {"asin", TM_P_ASIN, -0.9, 0.9, 0, 0},
        {"acos", TM_P_ACOS, -0.9, 0.9, 0, 0},  {"atan", TM_P_ATAN, -3, 3, 0, 0},
        {"sinh", TM_P_SINH, -2, 2, 0, 0},      {"cosh", TM_P_COSH, -2, 2, 0, 0},
        {"tanh", TM_P_TANH, -2, 2, 0, 0},      {"asinh", TM_P_ASINH, -3, 3, 0, 0},
        {"acosh", TM_P_ACOSH, 1.2, 4, 0, 0},   {"atanh", TM_P_ATANH, -0.9, 0.9, 0, 0},
        {"erf", TM_P_ERF, -2, 2, 0, 0},        {"sigmoid", TM_P_SIGMOID, -4, 4, 0, 0},
        {"relu", TM_P_RELU, -2, 2, 0.05, 0},   {"gelu", TM_P_GELU, -3, 3, 0, 0},
        {"gelu tanh", TM_P_GELU, -3, 3, 0, 1}, {"sign", TM_P_SIGN, -2, 2, 0.05, 0},
        {"floor", TM_P_FLOOR, 0.1, 0.9, 0, 0}, {"ceil", TM_P_CEIL, 1.1, 1.9, 0, 0},
        {"round", TM_P_ROUND, 0.6, 1.4, 0, 0},
    };
    for (size_t i = 0; i < sizeof u / sizeof *u; i++) {
        gcase k = unary_case(u[i].name, u[i].prim, u[i].lo, u[i].hi, u[i].away, u[i].arg);
        run_case(&k);
    }
    struct { const char *name; int prim; double lo, hi, away; int64_t arg; } b[] = {
        {"add", TM_P_ADD, -2, 2, 0, 0}, {"sub", TM_P_SUB, -2, 2, 0, 0},
        {"mul", TM_P_MUL, -2, 2, 0, 0}, {"div", TM_P_DIV, 0.5, 2, 0, 0},
        {"pow", TM_P_POW, 0.5, 2, 0, 0}, {"max", TM_P_MAX, -2, 2, 0, 0},
        {"min", TM_P_MIN, -2, 2, 0, 0}, {"fmod", TM_P_MOD, 0.7, 3, 0, 1},
        {"mod", TM_P_MOD, 0.7, 3, 0, 0},
    };
    for (size_t i = 0; i < sizeof b / sizeof *b; i++) {
        /* (2, 1, 3) with (1, 4, 3): both inputs broadcast. */
        gcase k = {b[i].name, b_binary, 2, {3, 3}, {{2, 1, 3}, {1, 4, 3}}, b[i].lo, b[i].hi,
                   b[i].away, b[i].prim, {b[i].arg}, 0, 0, 0};
        run_case(&k);
        gcase s = {b[i].name, b_binary, 2, {3, 3}, {{2, 3, 2}, {1, 1, 1}}, b[i].lo, b[i].hi,
                   b[i].away, b[i].prim, {b[i].arg}, 0, 0, 0};
        run_case(&s);
    }
    gcase pi = {"pow integer exponent", b_pow_int, 1, {2}, {{3, 6}}, -2, 2, 0.1, 0, {0}, 0, 0, 0};
    run_case(&pi);
    for (int e = 0; e < 4; e++) {
        static const char *const names[] = {"pow ^0", "pow ^1", "pow ^2", "pow ^2.5"};
        gcase pc = {names[e], b_pow_const, 1, {2}, {{3, 4}}, 0.3, 2, 0, 0, {e}, 0, 0, 0};
        run_case(&pc);
    }
    gcase w = {"where", b_where, 2, {3, 3}, {{2, 3, 1}, {1, 3, 4}}, -2, 2, 0, 0, {0}, 0, 0, 0};
    run_case(&w);
    /* Through float32 and back: f32's rounding needs a wide step. */
    gcase ca = {"cast", b_cast, 1, {2}, {{3, 4}}, -2, 2, 0, 0, {0}, 0, 1e-2, 1e-5};
    run_case(&ca);
}

static tm_val b_index_add(tm_ctx *c, const gcase *k, const tm_val *x, tm_dtype dt) {
    int64_t v[4] = {2, -1, 2, 0}, dims[1] = {4};
    tm_args a = args0();
    a.i[0] = 5;
    tm_val in[2] = {i64s(c, 1, dims, v), x[0]};
    tm_val y = P(c, TM_P_INDEX_ADD, in, 2, &a);
    return tm_mul(c, y, y);
}

static void test_movement(void) {
    gcase k1 = {"reshape", b_reshape, 1, {3}, {{2, 3, 4}}, -1, 1, 0, 0, {0}, 0, 0, 0};
    run_case(&k1);
    gcase k2 = {"transpose", b_args, 1, {4}, {{2, 3, 4, 5}}, -1, 1, 0, TM_P_TRANSPOSE,
                {2, 0, 3, 1}, 0, 0, 0};
    run_case(&k2);
    gcase k3 = {"copy", b_args, 1, {2}, {{3, 4}}, -1, 1, 0, TM_P_COPY, {0}, 0, 0, 0};
    run_case(&k3);
    /* start/step/count per axis: strided, reversed by 2, unit. */
    gcase k4 = {"slice strided", b_args, 1, {3}, {{5, 7, 6}}, -1, 1, 0, TM_P_SLICE,
                {1, 2, 2, 5, -2, 3, 1, 1, 4}, 0, 0, 0};
    run_case(&k4);
    gcase k5 = {"slice reversed", b_args, 1, {2}, {{4, 5}}, -1, 1, 0, TM_P_SLICE,
                {3, -1, 4, 1, 1, 3}, 0, 0, 0};
    run_case(&k5);
    gcase k6 = {"slice empty axis", b_args, 1, {2}, {{3, 4}}, -1, 1, 0, TM_P_SLICE,
                {0, 1, 3, 2, 1, 0}, 0, 0, 0};
    run_case(&k6);
    /* i[0] mode, then begin, begin, end, end (negative crops). */
    gcase p0 = {"pad constant with crops", b_pad, 1, {2}, {{4, 5}}, -1, 1, 0, 0,
                {0, 1, -1, -2, 2}, 0, 0, 0};
    run_case(&p0);
    gcase p1 = {"pad reflect", b_pad, 1, {2}, {{3, 4}}, -1, 1, 0, 0, {1, 4, 1, 2, 3}, 0, 0, 0};
    run_case(&p1);
    gcase p2 = {"pad edge", b_pad, 1, {2}, {{3, 4}}, -1, 1, 0, 0, {2, 2, 0, 1, 3}, 0, 0, 0};
    run_case(&p2);
    gcase p3 = {"pad wrap with a crop", b_pad, 1, {2}, {{3, 4}}, -1, 1, 0, 0, {3, 5, -1, 1, 2},
                0, 0, 0};
    run_case(&p3);
    gcase k7 = {"concat", b_args, 3, {3, 3, 3}, {{2, 1, 3}, {2, 3, 3}, {2, 2, 3}}, -1, 1, 0,
                TM_P_CONCAT, {1}, 0, 0, 0};
    run_case(&k7);
    gcase k8 = {"expand", b_args, 1, {4}, {{1, 3, 1, 4}}, -1, 1, 0, TM_P_EXPAND,
                {4, 2, 3, 5, 4}, 0, 0, 0};
    run_case(&k8);
    gcase k9 = {"gather repeated and negative indices", b_gather, 1, {3}, {{3, 5, 2}}, -1, 1,
                0, 0, {0}, 0, 0, 0};
    run_case(&k9);
    gcase k10 = {"gather_elements", b_gather_elements, 1, {2}, {{3, 4}}, -1, 1, 0, 0, {0}, 0,
                 0, 0};
    run_case(&k10);
    gcase k11 = {"gather_nd", b_gather_nd, 1, {3}, {{3, 4, 2}}, -1, 1, 0, 0, {0}, 0, 0, 0};
    run_case(&k11);
    gcase k12 = {"gather_nd batch_dims 1", b_gather_nd, 1, {3}, {{2, 3, 4}}, -1, 1, 0, 0, {1},
                 0, 0, 0};
    run_case(&k12);
    gcase k13 = {"scatter_elements", b_scatter_elements, 2, {2, 2}, {{3, 4}, {3, 2}}, -1, 1,
                 0, 0, {0}, 0, 0, 0};
    run_case(&k13);
    gcase k14 = {"scatter_elements add", b_scatter_elements, 2, {2, 2}, {{3, 4}, {3, 2}}, -1,
                 1, 0, 0, {1}, 0, 0, 0};
    run_case(&k14);
    gcase k15 = {"scatter_nd", b_scatter_nd, 2, {2, 2}, {{4, 3}, {2, 3}}, -1, 1, 0, 0, {0}, 0,
                 0, 0};
    run_case(&k15);
    gcase k16 = {"scatter_nd add", b_scatter_nd, 2, {2, 2}, {{4, 3}, {2, 3}}, -1, 1, 0, 0,
                 {1}, 0, 0, 0};
    run_case(&k16);
    gcase k17 = {"index_add repeated and negative indices", b_index_add, 1, {3}, {{4, 2, 3}},
                 -1, 1, 0, 0, {0}, 0, 0, 0};
    run_case(&k17);
}

static void test_reduce(void) {
    gcase s = {"reduce_sum axes 0 and 2", b_reduce, 1, {3}, {{2, 3, 4}}, -1, 1, 0,
               TM_P_REDUCE_SUM, {5}, 0, 0, 0};
    run_case(&s);
    gcase p = {"reduce_prod", b_reduce, 1, {3}, {{2, 3, 4}}, 0.5, 1.5, 0, TM_P_REDUCE_PROD,
               {2}, 0, 0, 0};
    run_case(&p);
    gcase pz = {"reduce_prod with a zero", b_reduce, 1, {3}, {{2, 3, 4}}, 0.5, 1.5, 0,
                TM_P_REDUCE_PROD, {2}, 6, 0, 0};
    run_case(&pz);
    gcase mx = {"reduce_max axes 1 and 2", b_reduce, 1, {3}, {{2, 3, 4}}, -1, 1, 0,
                TM_P_REDUCE_MAX, {6}, 0, 0, 0};
    run_case(&mx);
    gcase mn = {"reduce_min all axes", b_reduce, 1, {3}, {{2, 3, 4}}, -1, 1, 0,
                TM_P_REDUCE_MIN, {7}, 0, 0, 0};
    run_case(&mn);
    for (int e = 0; e < 2; e++)
        for (int r = 0; r < 2; r++) {
            char name[64];
            snprintf(name, sizeof name, "cumsum exclusive %d reverse %d", e, r);
            gcase cs = {"", b_args, 1, {2}, {{3, 4}}, -1, 1, 0, TM_P_CUMSUM, {1, e, r}, 0, 0, 0};
            cs.name = name;
            run_case(&cs);
            snprintf(name, sizeof name, "cumprod exclusive %d reverse %d", e, r);
            gcase cp = {"", b_args, 1, {2}, {{3, 4}}, 0.5, 1.5, 0, TM_P_CUMPROD, {1, e, r}, 0, 0, 0};
            cp.name = name;
            run_case(&cp);
        }
}

static void test_linalg(void) {
    gcase m1 = {"matmul batch broadcast", b_args, 2, {4, 4}, {{2, 1, 3, 4}, {1, 3, 4, 5}}, -1,
                1, 0, TM_P_MATMUL, {0}, 0, 0, 0};
    run_case(&m1);
    gcase m2 = {"matmul shared weight", b_args, 2, {3, 3}, {{2, 3, 4}, {1, 4, 5}}, -1, 1, 0,
                TM_P_MATMUL, {0}, 0, 0, 0};
    run_case(&m2);
    gcase m3 = {"matmul shared left operand", b_args, 2, {3, 3}, {{1, 3, 4}, {2, 4, 5}}, -1, 1,
                0, TM_P_MATMUL, {0}, 0, 0, 0};
    run_case(&m3);
    gcase m4 = {"matmul 2-D", b_args, 2, {2, 2}, {{3, 4}, {4, 2}}, -1, 1, 0, TM_P_MATMUL, {0},
                0, 0, 0};
    run_case(&m4);
    /* Transposed operands (i[0], i[1]): a stored (K, M), b stored (N, K). */
    gcase m5 = {"matmul a transposed", b_args, 2, {3, 3}, {{2, 4, 3}, {2, 4, 5}}, -1, 1, 0,
                TM_P_MATMUL, {1, 0}, 0, 0, 0};
    run_case(&m5);
    gcase m6 = {"matmul b transposed, shared", b_args, 2, {3, 3}, {{2, 3, 4}, {1, 5, 4}}, -1, 1,
                0, TM_P_MATMUL, {0, 1}, 0, 0, 0};
    run_case(&m6);
    gcase m7 = {"matmul both transposed", b_args, 2, {4, 4}, {{2, 1, 4, 3}, {1, 3, 5, 4}}, -1, 1,
                0, TM_P_MATMUL, {1, 1}, 0, 0, 0};
    run_case(&m7);
    /* The output stored transposed (i[2]): two matrices, each operand either way. */
    for (int t = 0; t < 4; t++) {
        char name[64];
        snprintf(name, sizeof name, "matmul output transposed, operands %d/%d", t & 1, t >> 1);
        gcase mt = {"", b_args, 2, {2, 2}, {{t & 1 ? 4 : 3, t & 1 ? 3 : 4}, {t >> 1 ? 5 : 4, t >> 1 ? 4 : 5}},
                    -1, 1, 0, TM_P_MATMUL, {t & 1, t >> 1, 1}, 0, 0, 0};
        mt.name = name;
        run_case(&mt);
    }
    /* A bias (third input, passes/matmul_bias.c): one product with the bias in its
     * epilogue (a weight shared by the batch), or products then the bias. */
    gcase m8 = {"matmul shared weight + bias", b_args, 3, {3, 3, 1}, {{2, 3, 4}, {1, 4, 5}, {5}},
                -1, 1, 0, TM_P_MATMUL, {0}, 0, 0, 0};
    run_case(&m8);
    gcase m9 = {"matmul batch broadcast + bias", b_args, 3, {4, 4, 1},
                {{2, 1, 3, 4}, {1, 3, 4, 5}, {5}}, -1, 1, 0, TM_P_MATMUL, {0}, 0, 0, 0};
    run_case(&m9);
    gcase m10 = {"matmul b transposed + bias", b_args, 3, {3, 3, 1}, {{2, 3, 4}, {1, 5, 4}, {5}},
                 -1, 1, 0, TM_P_MATMUL, {0, 1}, 0, 0, 0};
    run_case(&m10);
    /* CONV args: n, group, stride[n], pad_begin[n], pad_end[n], dilation[n]. */
    gcase c1 = {"conv 2-D grouped, strided, dilated, bias", b_conv, 3, {4, 4, 1},
                {{2, 4, 6, 5}, {6, 2, 3, 2}, {6}}, -1, 1, 0, TM_P_CONV,
                {2, 2, 2, 1, 1, 0, 1, 1, 1, 2}, 0, 0, 0};
    run_case(&c1);
    gcase c2 = {"conv 1-D", b_conv, 2, {3, 3}, {{1, 3, 9}, {2, 3, 3}}, -1, 1, 0, TM_P_CONV,
                {1, 1, 3, 2, 1, 2}, 0, 0, 0};
    run_case(&c2);
    gcase c3 = {"conv depthwise", b_conv, 2, {4, 4}, {{1, 3, 5, 5}, {3, 1, 3, 3}}, -1, 1, 0,
                TM_P_CONV, {2, 3, 1, 1, 1, 1, 1, 1, 1, 1}, 0, 0, 0};
    run_case(&c3);
    /* CONV_TRANSPOSE: as CONV plus output_padding[n]. */
    gcase t1 = {"conv_transpose 2-D grouped, output padding, bias", b_conv, 3, {4, 4, 1},
                {{1, 4, 3, 4}, {4, 3, 3, 2}, {6}}, -1, 1, 0, TM_P_CONV_TRANSPOSE,
                {2, 2, 2, 2, 1, 0, 0, 1, 1, 1, 1, 0}, 0, 0, 0};
    run_case(&t1);
    gcase t2 = {"conv_transpose 1-D dilated", b_conv, 2, {3, 3}, {{2, 2, 5}, {2, 3, 3}}, -1, 1,
                0, TM_P_CONV_TRANSPOSE, {1, 1, 2, 1, 1, 2, 1}, 0, 0, 0};
    run_case(&t2);
    /* POOL args: n, kind, count_include_pad, ceil_mode, p, kernel[n], stride[n],
     * pad_begin[n], pad_end[n], dilation[n]. */
    gcase p1 = {"max pool", b_pool, 1, {4}, {{1, 2, 6, 7}}, -1, 1, 0, TM_P_POOL,
                {2, 0, 0, 0, 0, 3, 2, 2, 2, 1, 0, 1, 1, 1, 2}, 0, 0, 0};
    run_case(&p1);
    gcase p2 = {"max pool ceil mode, overlapping", b_pool, 1, {4}, {{2, 1, 6, 6}}, -1, 1, 0,
                TM_P_POOL, {2, 0, 0, 1, 0, 3, 3, 2, 2, 0, 0, 0, 0, 1, 1}, 0, 0, 0};
    run_case(&p2);
    gcase p3 = {"average pool counting pads", b_pool, 1, {4}, {{1, 2, 5, 6}}, -1, 1, 0,
                TM_P_POOL, {2, 1, 1, 0, 0, 3, 3, 2, 2, 1, 1, 1, 0, 1, 1}, 0, 0, 0};
    run_case(&p3);
    gcase p4 = {"average pool excluding pads, ceil mode", b_pool, 1, {4}, {{1, 2, 5, 6}}, -1,
                1, 0, TM_P_POOL, {2, 1, 0, 1, 0, 2, 3, 2, 2, 1, 1, 0, 1, 1, 1}, 0, 0, 0};
    run_case(&p4);
    gcase p5 = {"average pool 1-D counting pads, ceil mode", b_pool, 1, {3}, {{2, 3, 7}}, -1, 1,
                0, TM_P_POOL, {1, 1, 1, 1, 0, 3, 2, 1, 1, 1}, 0, 0, 0};
    run_case(&p5);
    gcase p6 = {"lp pool p=2", b_pool, 1, {4}, {{1, 2, 5, 5}}, -1, 1, 0.05, TM_P_POOL,
                {2, 2, 0, 0, 2, 2, 2, 2, 1, 0, 0, 1, 0, 1, 1}, 0, 0, 0};
    run_case(&p6);
    gcase p7 = {"lp pool p=3", b_pool, 1, {3}, {{1, 2, 7}}, -1, 1, 0.05, TM_P_POOL,
                {1, 2, 0, 0, 3, 3, 2, 1, 1, 1}, 0, 0, 0};
    run_case(&p7);
    int64_t idx_args[16] = {2, 0, 0, 0, 0, 2, 2, 1, 2, 0, 0, 1, 1, 1, 1, 0};
    gcase p8 = {"maxpool_indices", b_pool, 1, {4}, {{1, 2, 4, 5}}, -1, 1, 0,
                TM_P_MAXPOOL_INDICES, {0}, 0, 0, 0};
    memcpy(p8.i, idx_args, sizeof idx_args);
    run_case(&p8);
    idx_args[15] = 1;  /* column-major indices */
    memcpy(p8.i, idx_args, sizeof idx_args);
    p8.name = "maxpool_indices column-major";
    run_case(&p8);
}

static void test_nn(void) {
    for (int axis = 0; axis < 3; axis++)
        for (int log_form = 0; log_form < 2; log_form++) {
            char name[64];
            snprintf(name, sizeof name, "%s axis %d", log_form ? "log_softmax" : "softmax", axis);
            gcase s = {"", b_args, 1, {3}, {{2, 5, 3}}, -2, 2, 0, TM_P_SOFTMAX, {axis, log_form},
                       0, 0, 0};
            s.name = name;
            run_case(&s);
        }
    gcase l1 = {"layernorm scale (3, 4), bias (4)", b_layernorm, 3, {3, 2, 1},
                {{2, 3, 4}, {3, 4}, {4}}, -2, 2, 0, 0, {1, 0, 0}, 0, 0, 0};
    run_case(&l1);
    gcase l2 = {"rms norm scale (1, 4)", b_layernorm, 2, {3, 2}, {{2, 3, 4}, {1, 4}}, -2, 2, 0,
                0, {1, 1, 0}, 0, 0, 0};
    run_case(&l2);
    /* The statistics outputs are float32: a wide step and a loose bound for them. */
    gcase l3 = {"layernorm with its mean and inv_std read", b_layernorm, 3, {2, 1, 1},
                {{3, 5}, {5}, {5}}, -2, 2, 0, 0, {1, 0, 1}, 0, 3e-3, 5e-4};
    run_case(&l3);
    gcase l4 = {"rms norm with inv_std read", b_layernorm, 2, {2, 1}, {{3, 5}, {5}}, -2, 2, 0,
                0, {1, 1, 1}, 0, 3e-3, 5e-4};
    run_case(&l4);
    /* Full-size float32 scale and bias: the float32 gradient comes from LAYERNORM_GRAD,
     * checked against the double one (the rule in primitives). */
    gcase l5 = {"layernorm scale and bias (4)", b_layernorm, 3, {3, 1, 1},
                {{2, 3, 4}, {4}, {4}}, -2, 2, 0, 0, {2, 0, 0}, 0, 0, 0};
    run_case(&l5);
    gcase l6 = {"layernorm scale (3, 4), no bias", b_layernorm, 2, {3, 2},
                {{2, 3, 4}, {3, 4}}, -2, 2, 0, 0, {1, 0, 0}, 0, 0, 0};
    run_case(&l6);
    gcase l7 = {"rms norm scale (3, 4)", b_layernorm, 2, {3, 2}, {{2, 3, 4}, {3, 4}}, -2, 2, 0,
                0, {1, 1, 0}, 0, 0, 0};
    run_case(&l7);
    gcase t1 = {"topk largest", b_topk, 1, {2}, {{3, 5}}, -2, 2, 0, 0, {1}, 0, 0, 0};
    run_case(&t1);
    gcase t2 = {"topk smallest", b_topk, 1, {2}, {{3, 5}}, -2, 2, 0, 0, {0}, 0, 0, 0};
    run_case(&t2);
    /* Attention (ATTENTION_TRAIN's rule, through ATTENTION_GRAD when the mask is not
     * differentiated): every layout, each scale step, masks constant, broadcast and
     * differentiated, a value head size other than the keys'. */
    static const struct { const char *name; int64_t l[4], mask, kind, milli; } att[] = {
        {"attention (B, H, S, D) all, divided, constant mask", {0, 0, 0, 0}, 1, 2, 2000},
        {"attention (B, S, H, D) all, multiplied", {1, 1, 1, 1}, 0, 1, 354},
        {"attention mixed layouts, no scale, constant mask", {1, 0, 1, 0}, 1, 0, 0},
        {"attention mixed layouts, differentiated mask", {0, 1, 0, 1}, 2, 2, 1500}};
    for (size_t i = 0; i < sizeof att / sizeof *att; i++) {
        gcase at = {att[i].name, b_attention, att[i].mask == 2 ? 4 : 3, {4, 4, 4, 4}, {{0}},
                    -1, 1, 0, 0, {0}, 0, 0, 0};
        int64_t b = 2, h = 2, sq = 3, sk = 5, d = 4, dv = 3;
        int64_t in_dims[3][2] = {{sq, d}, {sk, d}, {sk, dv}};
        for (int t = 0; t < 3; t++) {
            int64_t *dd = at.dims[t];
            dd[0] = b;
            dd[1] = att[i].l[t] ? in_dims[t][0] : h;
            dd[2] = att[i].l[t] ? h : in_dims[t][0];
            dd[3] = in_dims[t][1];
        }
        int64_t mask_dims[4] = {b, 1, sq, sk};
        memcpy(at.dims[3], mask_dims, sizeof mask_dims);
        for (int j = 0; j < 4; j++) at.i[j] = att[i].l[j];
        at.i[4] = att[i].mask;
        at.i[5] = att[i].kind;
        at.i[6] = att[i].milli;
        run_case(&at);
        attention_fused_vs_composed(at);
    }
    /* Long keys: the backward takes the queries in several blocks (dk and dv summed over
     * them); a head size the vector kernels take. */
    gcase longk = {"attention, 4096 keys, head size 16", b_attention, 3, {4, 4, 4},
                   {{1, 2, 40, 16}, {1, 2, 4096, 16}, {1, 2, 4096, 16}}, -1, 1, 0, 0,
                   {0, 0, 0, 0, 1, 2, 4000}, 0, 0, 0};
    attention_fused_vs_composed(longk);
    gcase bl = {"gated residual block", b_block, 4, {3, 3, 3, 1},
                {{2, 3, 4}, {1, 4, 5}, {1, 1, 5}, {5}}, -1, 1, 0, 0, {0}, 0, 0, 0};
    run_case(&bl);
}

/* ---- Errors -------------------------------------------------------------------------- */

static void expect_backward_error(tm_val (*build)(tm_ctx *, tm_val), const char *needle,
                                  const char *name) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    int64_t dims[4] = {1, 1, 2, 3};
    tm_val x = tm_const_fill(&c, TM_FLOAT, 4, dims, 0.5);
    c.vals[x].tracked = 1;
    c.tape = 1;
    tm_ctx_set_where(&c, "my_node", "MyOp");
    tm_val y = build(&c, x);
    c.tape = 0;
    tm_val gx = TM_NONE;
    tm_status st = tm_ctx_ok(&c) ? tm_backward(&c, y, tm_grad_zeros_like(&c, y), 0, 1, &x, &gx)
                                 : c.status;
    check(st == TM_ERR_UNSUPPORTED && strstr(c.err.message, needle) &&
              strstr(c.err.message, "my_node"),
          "%s: status %d, message '%s' (wanted '%s' naming the node)", name, (int)st,
          c.err.message, needle);
    check(gx == TM_NONE, "%s: no gradient on failure", name);
    tm_ctx_destroy(&c);
}

static tm_val e_resize(tm_ctx *c, tm_val x) {
    tm_args a = args0();
    a.i[0] = 0;                       /* nearest, half_pixel */
    for (int d = 0; d < 4; d++) {
        a.i[8 + d] = d < 2 ? 1 : 2 * tm_vdims(c, x)[d];
        double scale = d < 2 ? 1.0 : 2.0;
        memcpy(&a.i[16 + d], &scale, sizeof scale);
    }
    return tm_prim(c, TM_P_RESIZE, &x, 1, &a);
}

static tm_val e_quantize(tm_ctx *c, tm_val x) {
    tm_val q = tm_cast_exact(c, tm_mul(c, x, tm_scalar_like(c, x, 100.0)), TM_INT8);
    return tm_add(c, x, tm_cast_exact(c, q, TM_FLOAT));
}

static tm_val e_scatter_mul(tm_ctx *c, tm_val x) {
    int64_t v[2] = {0, 1}, dims[4] = {1, 1, 1, 2};
    tm_args a = args0();
    a.i[0] = 3;
    a.i[1] = 2;  /* mul */
    tm_val u = tm_slice_axis(c, x, 2, 0, 1);
    u = tm_slice_axis(c, u, 3, 0, 2);
    tm_val in[3] = {x, i64s(c, 4, dims, v), u};
    return tm_prim(c, TM_P_SCATTER_ELEMENTS, in, 3, &a);
}

static void test_errors(void) {
    expect_backward_error(e_resize, "no gradient rule for primitive resize", "resize");
    expect_backward_error(e_quantize, "quantizing cast", "int8 cast");
    expect_backward_error(e_scatter_mul, "no gradient rule for primitive scatter_elements",
                          "scatter with reduction mul");
    /* Every primitive maps to a rule entry (a stub at least). */
    int missing = 0;
    for (int p = 0; p < TM_P__COUNT; p++) missing += tm__grad_rules[p] == NULL;
    check(missing == 0, "%d primitives without a gradient table entry", missing);
}

/* Values that do not depend on a tracked input get no cotangent, and a loss independent
 * of an input gives it none (TM_NONE), eagerly releasing what the backward made. */
static void test_structure(void) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    int64_t dims[2] = {2, 3};
    tm_val x = tm_const_fill(&c, TM_DOUBLE, 2, dims, 0.5);
    tm_val z = tm_const_fill(&c, TM_DOUBLE, 2, dims, 2.0);
    c.vals[x].tracked = 1;
    c.vals[z].tracked = 1;
    c.tape = 1;
    tm_val u = tm_const_fill(&c, TM_DOUBLE, 2, dims, 3.0);  /* untracked */
    tm_val y = tm_mul(&c, tm_mul(&c, x, x), u);
    c.tape = 0;
    check(c.vals[y].tracked && !c.vals[u].tracked, "taping tracks what depends on x only");
    check(c.n_nodes == 2, "the tape holds the 2 tracked calls (%d)", (int)c.n_nodes);
    tm_val xs[2] = {x, z}, g[2];
    tm_status st = tm_backward(&c, y, tm_grad_zeros_like(&c, y), 0, 2, xs, g);
    check(st == TM_OK && g[0] != TM_NONE && g[1] == TM_NONE,
          "z has no gradient, x has one (%s)", c.err.message);
    tm_ctx_destroy(&c);
}

int main(void) {
    test_elementwise();
    test_movement();
    test_reduce();
    test_linalg();
    test_nn();
    test_errors();
    test_structure();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
