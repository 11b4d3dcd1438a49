/* Tests of the plan-time fusion passes (src/runtime/passes/): decomposed layer norm, RMS
 * norm and GELU are built as traces, the passes run, the fused node is checked, and its
 * primitive (evaluated eagerly in float32) is compared with the decomposition evaluated
 * eagerly in float64: the fused kernel must be as exact as the pattern it replaces.
 * Near misses (a wrong constant, an intermediate read twice or kept as a root) stay
 * unfused. Not a test of the kernels themselves (test_prims_*.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../src/runtime/passes.h"

#define CHECK_RNG_SEED 88172645463325252ULL
#include "check.h"

enum { RANK = 3, C = 24 };
static const int64_t X_DIMS[RANK] = {2, 5, C};    /* (B, T, C) */
static const int64_t ONES[RANK] = {1, 1, 1};

static float next_f(void) { return (float)(rng_next() % 20001) / 5000.0f - 2.0f; }

/* The dtype the patterns are built in: float32, float64 for the reference. */
static tm_dtype DT = TM_FLOAT;

static tm_val k(tm_ctx *c, double v) { return tm_const_fill(c, DT, RANK, ONES, v); }
static tm_val bin(tm_ctx *c, int prim, tm_val a, tm_val b) {
    tm_val in[2] = {a, b};
    return tm_prim(c, prim, in, 2, NULL);
}
static tm_val un(tm_ctx *c, int prim, tm_val a) { return tm_prim(c, prim, &a, 1, NULL); }
static tm_val mean_last(tm_ctx *c, tm_val x) {
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 1 << (RANK - 1);
    return bin(c, TM_P_DIV, tm_prim(c, TM_P_REDUCE_SUM, &x, 1, &a), k(c, C));
}
/* A (1, 1, C) constant with values seeded by `seed`. */
static tm_val param(tm_ctx *c, int seed) {
    int64_t d[RANK] = {1, 1, C};
    tm_tensor *t = tm_tensor_alloc(DT, RANK, d, NULL);
    for (int i = 0; i < C; i++) {
        float v = 0.5f + 0.01f * (float)(i * seed % 37);
        if (DT == TM_DOUBLE) ((double *)t->data)[i] = v;
        else ((float *)t->data)[i] = v;
    }
    return tm_val_tensor(c, t, 0);
}

/* Variants of the patterns; the last ones must not fuse. */
enum {
    LN, LN_NO_BETA, LN_MUL_SQUARE, RMS_RECIPROCAL, RMS_DIV, RMS_ONE_OVER,
    GELU_A, GELU_B, GELU_C, GELU_MUL_HALF_SQRT,
    BAD_LN_POW3, BAD_LN_SHARED, BAD_GELU_HALF, BAD_GELU_ROOT, BAD_RMS_TWO_OVER, N_VARIANTS
};
static const char *names[N_VARIANTS] = {
    "layer norm", "layer norm without beta", "layer norm with d*d", "RMS norm (reciprocal)",
    "RMS norm (div)", "RMS norm (x * (1 / s), LLaMA's export)", "gelu (x*h)*0.5", "gelu (x*0.5)*h", "gelu x*(h*0.5)", "gelu x*(1/sqrt 2)",
    "pow 3", "d read outside (RMS norm of d)", "0.49 for 0.5", "intermediate is a root",
    "x * (2 / s)"};
static const int want_prim[N_VARIANTS] = {
    TM_P_LAYERNORM, TM_P_LAYERNORM, TM_P_LAYERNORM, TM_P_LAYERNORM, TM_P_LAYERNORM,
    TM_P_LAYERNORM, TM_P_GELU, TM_P_GELU, TM_P_GELU, TM_P_GELU, -1, -1, -1, -1, -1};

/* Builds the variant on x; *extra gets a value that must stay alive (or TM_NONE). */
static tm_val build(tm_ctx *c, int v, tm_val x, tm_val *extra) {
    *extra = TM_NONE;
    if (v <= LN_MUL_SQUARE || v == BAD_LN_POW3 || v == BAD_LN_SHARED) {
        tm_val d = bin(c, TM_P_SUB, x, mean_last(c, x));
        tm_val sq = v == LN_MUL_SQUARE ? bin(c, TM_P_MUL, d, d)
                                       : bin(c, TM_P_POW, d, k(c, v == BAD_LN_POW3 ? 3.0 : 2.0));
        tm_val s = un(c, TM_P_SQRT, bin(c, TM_P_ADD, mean_last(c, sq), k(c, 1e-5)));
        tm_val y = bin(c, TM_P_MUL, bin(c, TM_P_DIV, d, s), param(c, 3));
        if (v == BAD_LN_SHARED) *extra = un(c, TM_P_NEG, d);
        return v == LN_NO_BETA ? y : bin(c, TM_P_ADD, param(c, 7), y);
    }
    if (v == RMS_RECIPROCAL || v == RMS_DIV || v == RMS_ONE_OVER || v == BAD_RMS_TWO_OVER) {
        tm_val var = mean_last(c, bin(c, TM_P_POW, x, k(c, 2.0)));
        tm_val s = un(c, TM_P_SQRT, bin(c, TM_P_ADD, k(c, 1e-6), var));
        tm_val n = v == RMS_DIV ? bin(c, TM_P_DIV, x, s)
                   : v == RMS_RECIPROCAL ? bin(c, TM_P_MUL, x, un(c, TM_P_RECIPROCAL, s))
                   : bin(c, TM_P_MUL, x, bin(c, TM_P_DIV, k(c, v == RMS_ONE_OVER ? 1.0 : 2.0), s));
        return bin(c, TM_P_MUL, param(c, 5), n);
    }
    tm_val u = v == GELU_MUL_HALF_SQRT ? bin(c, TM_P_MUL, k(c, 0.70710678), x)
                                       : bin(c, TM_P_DIV, x, k(c, 1.4142135));
    tm_val h = bin(c, TM_P_ADD, un(c, TM_P_ERF, u), k(c, 1.0));
    if (v == BAD_GELU_ROOT) *extra = h;
    tm_val half = k(c, v == BAD_GELU_HALF ? 0.49 : 0.5);
    if (v == GELU_B) return bin(c, TM_P_MUL, bin(c, TM_P_MUL, x, half), h);
    if (v == GELU_C) return bin(c, TM_P_MUL, x, bin(c, TM_P_MUL, h, half));
    return bin(c, TM_P_MUL, bin(c, TM_P_MUL, x, h), half);
}

static void test_variant(int v, const float *xs) {
    tm_ctx t;
    tm_ctx_init(&t, TM_MODE_TRACE, NULL);
    tm_val x = tm_val_symbolic(&t, TM_FLOAT, RANK, X_DIMS, 0), extra;
    tm_val y = build(&t, v, x, &extra);
    CHECK(tm_ctx_ok(&t), "%s: trace: %s", names[v], t.err.message);
    tm_val roots_v[2] = {y, extra};
    tm_pass_roots roots = {roots_v, extra == TM_NONE ? 1 : 2};
    CHECK(tm__run_passes(&t, &roots) == TM_OK && tm_ctx_ok(&t), "%s: passes failed", names[v]);
    const tm_rnode *last = &t.nodes[t.vals[y].producer];
    int fused = last->prim == TM_P_LAYERNORM || last->prim == TM_P_GELU;
    if (v == BAD_LN_SHARED)  /* x - mean is needed anyway: only its RMS norm fuses */
        CHECK(last->prim == TM_P_LAYERNORM && last->args.i[1] == 1 && last->in[0] != x,
              "%s: the last node is %s", names[v], tm_prims[last->prim].name);
    else
        CHECK(want_prim[v] < 0 ? !fused : last->prim == want_prim[v] && last->in[0] == x,
              "%s: the last node is %s", names[v], tm_prims[last->prim].name);
    if (want_prim[v] >= 0 && last->prim == want_prim[v] && last->in[0] == x) {
        /* The fused primitive, eagerly, against the decomposition in float64, eagerly. */
        tm_ctx e;
        tm_ctx_init(&e, TM_MODE_EAGER, NULL);
        tm_tensor *tx = tm_tensor_alloc(TM_FLOAT, RANK, X_DIMS, NULL);
        tm_tensor *tx64 = tm_tensor_alloc(TM_DOUBLE, RANK, X_DIMS, NULL);
        memcpy(tx->data, xs, sizeof(float) * 2 * 5 * C);
        for (int i = 0; i < 2 * 5 * C; i++) ((double *)tx64->data)[i] = xs[i];
        tm_val ex = tm_val_tensor(&e, tx, 0), unused;
        DT = TM_DOUBLE;
        tm_val want = build(&e, v, tm_val_tensor(&e, tx64, 0), &unused);
        DT = TM_FLOAT;
        tm_val in[3] = {ex, TM_NONE, TM_NONE};
        for (int i = 1; i < last->nin; i++)
            in[i] = tm_val_tensor(&e, tm_tensor_clone(t.vals[last->in[i]].data, NULL), 0);
        tm_val got;
        tm_val outs[4];
        tm_prim_n(&e, last->prim, in, last->nin, &last->args, outs, tm_prims[last->prim].nout);
        got = outs[0];
        CHECK(tm_ctx_ok(&e), "%s: eager: %s", names[v], e.err.message);
        if (tm_ctx_ok(&e)) {
            const double *a = tm_vdata(&e, want)->data;
            const float *b = tm_vdata(&e, got)->data;
            double worst = 0;
            for (int i = 0; i < 2 * 5 * C; i++) {
                double err = fabs(a[i] - b[i]) / (1e-3 + fabs(a[i]));
                worst = err > worst ? err : worst;
            }
            CHECK(worst < 2e-5, "%s: fused differs by %g", names[v], worst);
        }
        tm_ctx_destroy(&e);
    }
    tm_ctx_destroy(&t);
}

int main(void) {
    float xs[2 * 5 * C];
    for (int i = 0; i < 2 * 5 * C; i++) xs[i] = next_f() + (i % C == 0 ? 3.0f : 0.0f);
    for (int v = 0; v < N_VARIANTS; v++) test_variant(v, xs);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
