/* Kernels that split their work over the thread pool give the one-thread result bit for
 * bit: elementwise unary and broadcast binary kernels on large tensors, batched MATMUL
 * (whole products per thread), and the fused
 * LINEAR, CONV_PACKED and ATTENTION kernels, each run through its primitive's kernel
 * with a pool of 3 threads and without one. The fused primitives come from the passes,
 * traced as in tests/test_fusion.c. Not a test of the values themselves (the primitive
 * and fusion tests check those). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../src/runtime/passes.h"
#include "../src/backends/cpu/pool.h"

#define CHECK_RNG_SEED 0x853c49e6748fea9bULL
#include "check.h"

static float next_f(void) { return (float)(rng_next() % 20001) / 10000.0f - 1.0f; }

static tm_tensor *random_tensor(int rank, const int64_t *dims) {
    tm_tensor *t = tm_tensor_alloc(TM_FLOAT, rank, dims, NULL);
    for (int64_t i = 0; i < tm_numel(rank, dims); i++) ((float *)t->data)[i] = next_f();
    return t;
}

/* Runs primitive prim's kernel on inputs in, with and without pool; 1 when every output
 * is the same bytes. */
static int same_with_pool(int prim, const tm_args *a, const tm_tensor *const *in, int nin,
                          tm_pool *pool) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    const tm_vinfo *vin[8];
    tm_vinfo vi[8];
    for (int i = 0; i < nin; i++) {
        memset(&vi[i], 0, sizeof vi[i]);
        vi[i].dtype = in[i]->dtype;
        vi[i].rank = in[i]->rank;
        memcpy(vi[i].dims, in[i]->dims, sizeof vi[i].dims);
        vi[i].data = (tm_tensor *)in[i];
        vin[i] = &vi[i];
    }
    int nout = tm_prims[prim].nout;
    tm_vinfo out[4];
    memset(out, 0, sizeof out);
    size_t scratch = 0;
    if (tm_prims[prim].shape(&c, prim, a, vin, nin, out, nout, &scratch) != TM_OK) {
        printf("FAIL: %s: shape: %s\n", tm_prims[prim].name, c.err.message);
        tm_ctx_destroy(&c);
        return 0;
    }
    tm_tensor *y[2][4];
    void *work = malloc(scratch + 64);
    tm_error err;
    tm_status st = TM_OK;
    for (int r = 0; r < 2; r++) {
        for (int o = 0; o < nout; o++)
            y[r][o] = tm_tensor_alloc(out[o].dtype, out[o].rank, out[o].dims, NULL);
        tm_kcall k = {prim, a, in, nin, y[r], nout, work, scratch, &err, r ? 3 : 1,
                      r ? pool : NULL, 0};
        if (st == TM_OK) st = tm_prims[prim].kernel(&k);
    }
    int same = st == TM_OK;
    for (int o = 0; o < nout; o++) {
        same &= !memcmp(y[0][o]->data, y[1][o]->data, y[0][o]->nbytes);
        tm_tensor_free(y[0][o]);
        tm_tensor_free(y[1][o]);
    }
    free(work);
    tm_ctx_destroy(&c);
    return same;
}

/* Row-wise kernels: softmax, layer norm and their backwards, GELU's backward. */
static void test_rows(tm_pool *pool) {
    const int64_t d[3] = {8, 96, 130}, sd[1] = {130}, st[3] = {8, 96, 1};
    tm_tensor *x = random_tensor(3, d), *g = random_tensor(3, d), *sc = random_tensor(1, sd);
    tm_tensor *mean = random_tensor(3, st), *inv = random_tensor(3, st);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 2;
    const tm_tensor *one[1] = {x}, *two[2] = {x, g};
    CHECK(same_with_pool(TM_P_SOFTMAX, &a, one, 1, pool), "softmax rows");
    CHECK(same_with_pool(TM_P_SOFTMAX_GRAD, &a, two, 2, pool), "softmax_grad rows");
    const tm_tensor *ln[2] = {x, sc};
    a.f[0] = 1e-5;
    CHECK(same_with_pool(TM_P_LAYERNORM, &a, ln, 2, pool), "layernorm rows");
    const tm_tensor *lng[5] = {x, sc, mean, inv, g};
    CHECK(same_with_pool(TM_P_LAYERNORM_GRAD, &a, lng, 5, pool), "layernorm_grad rows");
    a.i[1] = 1;
    CHECK(same_with_pool(TM_P_LAYERNORM_GRAD, &a, lng, 5, pool), "rms norm grad rows");
    memset(&a, 0, sizeof a);
    CHECK(same_with_pool(TM_P_GELU_GRAD, &a, two, 2, pool), "gelu_grad");
    /* Attention's training forward (probabilities kept) and its backward, heads over the
     * pool: q in (B, S, H, D), the rest (B, H, S, D), scores divided. */
    const int64_t qd[4] = {1, 96, 4, 32}, hd[4] = {1, 4, 96, 32}, pd[4] = {1, 4, 96, 96};
    tm_tensor *q = random_tensor(4, qd), *kv = random_tensor(4, hd), *pr = random_tensor(4, pd);
    tm_tensor *go = random_tensor(4, hd);
    memset(&a, 0, sizeof a);
    a.i[0] = 1;
    a.i[5] = 2;
    a.f[0] = 5.6;
    const tm_tensor *att[3] = {q, kv, kv}, *attg[5] = {q, kv, kv, pr, go};
    CHECK(same_with_pool(TM_P_ATTENTION_TRAIN, &a, att, 3, pool), "attention_train");
    CHECK(same_with_pool(TM_P_ATTENTION_GRAD, &a, attg, 5, pool), "attention_grad");
    tm_tensor_free(q), tm_tensor_free(kv), tm_tensor_free(pr), tm_tensor_free(go);
    tm_tensor_free(x), tm_tensor_free(g), tm_tensor_free(sc), tm_tensor_free(mean),
        tm_tensor_free(inv);
}

static void test_elementwise(tm_pool *pool) {
    const int64_t big[4] = {2, 96, 31, 37}, channel[4] = {1, 96, 1, 1};
    tm_tensor *x = random_tensor(4, big), *y = random_tensor(4, big), *s = random_tensor(4, channel);
    tm_args a;
    memset(&a, 0, sizeof a);
    const tm_tensor *same_shape[2] = {x, y}, *broadcast[2] = {x, s}, *flipped[2] = {s, x};
    CHECK(same_with_pool(TM_P_ADD, &a, same_shape, 2, pool), "add of equal shapes");
    CHECK(same_with_pool(TM_P_MUL, &a, broadcast, 2, pool), "mul by a per-channel vector");
    CHECK(same_with_pool(TM_P_SUB, &a, flipped, 2, pool), "sub from a per-channel vector");
    CHECK(same_with_pool(TM_P_GELU, &a, same_shape, 1, pool), "gelu");
    CHECK(same_with_pool(TM_P_SIGMOID, &a, same_shape, 1, pool), "sigmoid");
    /* Transposes that keep the last axis copy rows split over the pool. */
    const int64_t heads[4] = {4, 130, 12, 32};
    tm_tensor *h = random_tensor(4, heads);
    const tm_tensor *split[1] = {h};
    const int64_t perms[3][4] = {{0, 2, 1, 3}, {2, 0, 1, 3}, {1, 2, 0, 3}};
    for (int p = 0; p < 3; p++) {
        memcpy(a.i, perms[p], sizeof perms[p]);
        CHECK(same_with_pool(TM_P_TRANSPOSE, &a, split, 1, pool), "transpose %lld %lld %lld %lld",
              (long long)perms[p][0], (long long)perms[p][1], (long long)perms[p][2],
              (long long)perms[p][3]);
    }
    /* ... and those that move it, in blocks of planes. */
    const int64_t perms2[2][4] = {{0, 2, 3, 1}, {3, 1, 0, 2}};
    for (int p = 0; p < 2; p++) {
        memcpy(a.i, perms2[p], sizeof perms2[p]);
        CHECK(same_with_pool(TM_P_TRANSPOSE, &a, split, 1, pool), "transpose %lld %lld %lld %lld",
              (long long)perms2[p][0], (long long)perms2[p][1], (long long)perms2[p][2],
              (long long)perms2[p][3]);
    }
    const int64_t plane[2] = {700, 301};
    tm_tensor *pl = random_tensor(2, plane);
    const tm_tensor *one_plane[1] = {pl};
    memset(&a, 0, sizeof a);
    a.i[0] = 1;
    CHECK(same_with_pool(TM_P_TRANSPOSE, &a, one_plane, 1, pool), "transpose of one plane");
    tm_tensor_free(pl);
    memset(&a, 0, sizeof a);
    tm_tensor_free(h);
    tm_tensor_free(x), tm_tensor_free(y), tm_tensor_free(s);
}

/* Nearest resampling splits its output rows over the pool: an upsampling by 4 (rows
 * copied from the row above, across slice boundaries too) and an odd resampling of both
 * spatial axes, rounding half pixels. */
static void put_f64(tm_args *a, int at, double v) { memcpy(&a->i[at], &v, sizeof v); }

static void test_resize_nearest(tm_pool *pool) {
    const int64_t in_d[2][4] = {{1, 24, 40, 40}, {2, 8, 37, 41}};
    const int64_t out_d[2][4] = {{1, 24, 160, 160}, {2, 8, 91, 67}};
    const int transform[2] = {4, 0}, rounding[2] = {2, 0};   /* asymmetric floor; half pixel */
    for (int c = 0; c < 2; c++) {
        tm_tensor *x = random_tensor(4, in_d[c]);
        tm_args a;
        memset(&a, 0, sizeof a);
        a.i[1] = transform[c];
        a.i[2] = rounding[c];
        for (int d = 0; d < 4; d++) {
            a.i[8 + d] = out_d[c][d];
            put_f64(&a, 16 + d, (double)out_d[c][d] / (double)in_d[c][d]);
            put_f64(&a, 24 + d, 0.0);
            put_f64(&a, 32 + d, 1.0);
        }
        const tm_tensor *in[1] = {x};
        CHECK(same_with_pool(TM_P_RESIZE, &a, in, 1, pool), "nearest resize %lldx%lld -> %lldx%lld",
              (long long)in_d[c][2], (long long)in_d[c][3], (long long)out_d[c][2],
              (long long)out_d[c][3]);
        tm_tensor_free(x);
    }
}

/* Batches of products each too small to thread (attention heads and their gradients)
 * split whole products over the pool: plain, with either operand transposed, and with
 * a broadcast batch dim. */
static void test_batched_matmul(tm_pool *pool) {
    static const struct { int ta, tb; int64_t x[4], y[4]; } cases[] = {
        {0, 0, {2, 6, 70, 32}, {2, 6, 32, 90}},
        {1, 0, {2, 6, 32, 70}, {2, 6, 32, 90}},
        {0, 1, {2, 6, 70, 32}, {2, 6, 90, 32}},
        {0, 0, {2, 6, 70, 32}, {1, 6, 32, 90}},
        {0, 0, {1, 3, 5, 7}, {1, 3, 7, 2}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        tm_tensor *x = random_tensor(4, cases[i].x), *y = random_tensor(4, cases[i].y);
        tm_args a;
        memset(&a, 0, sizeof a);
        a.i[0] = cases[i].ta;
        a.i[1] = cases[i].tb;
        const tm_tensor *in[2] = {x, y};
        CHECK(same_with_pool(TM_P_MATMUL, &a, in, 2, pool), "batched matmul %zu (ta %d, tb %d)",
              i, cases[i].ta, cases[i].tb);
        tm_tensor_free(x), tm_tensor_free(y);
    }
}

/* The fused primitive a pattern becomes (the root's producer after the passes), then its
 * kernel with and without the pool on random inputs. */
static void test_fused(tm_pool *pool, const char *name, int n_inputs, const int *ranks,
                       const int64_t (*dims)[4],
                       tm_val (*build)(tm_ctx *, const tm_val *), int want) {
    tm_ctx t;
    tm_ctx_init(&t, TM_MODE_TRACE, NULL);
    tm_val in[4];
    for (int i = 0; i < n_inputs; i++) in[i] = tm_val_symbolic(&t, TM_FLOAT, ranks[i], dims[i], i);
    tm_val y = build(&t, in);
    tm_pass_roots roots = {&y, 1};
    tm__run_passes(&t, &roots);
    const tm_rnode *rn = &t.nodes[t.vals[y].producer];
    CHECK(rn->prim == want, "%s: fused into %s", name, tm_prims[rn->prim].name);
    if (rn->prim == want) {
        const tm_tensor *kin[8];
        tm_tensor *made[8] = {0};
        for (int j = 0; j < rn->nin; j++) {
            const tm_vinfo *vi = &t.vals[rn->in[j]];
            if (vi->data) {
                kin[j] = vi->data;
            } else {
                made[j] = random_tensor(vi->rank, vi->dims);
                kin[j] = made[j];
            }
        }
        CHECK(same_with_pool(rn->prim, &rn->args, kin, rn->nin, pool),
              "%s: 3 threads give 1 thread's result", name);
        for (int j = 0; j < rn->nin; j++) tm_tensor_free(made[j]);
    }
    tm_ctx_destroy(&t);
}

static tm_val weights(tm_ctx *c, int rank, const int64_t *dims) {
    return tm_val_tensor(c, random_tensor(rank, dims), 0);
}
static tm_val bin(tm_ctx *c, int prim, tm_val a, tm_val b) {
    tm_val in[2] = {a, b};
    return tm_prim(c, prim, in, 2, NULL);
}

static tm_val linear_relu(tm_ctx *c, const tm_val *in) {
    const int64_t w[2] = {200, 300};
    tm_val y = bin(c, TM_P_MATMUL, in[0], weights(c, 2, w));
    return tm_prim(c, TM_P_RELU, &y, 1, NULL);
}
static tm_val conv_3x3(tm_ctx *c, const tm_val *in) {
    const int64_t w[4] = {30, 16, 3, 3};
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 2, a.i[1] = 1, a.i[2] = a.i[3] = 1, a.i[4] = a.i[5] = a.i[6] = a.i[7] = 1;
    a.i[8] = a.i[9] = 1;
    tm_val x[2] = {in[0], weights(c, 4, w)};
    return tm_prim(c, TM_P_CONV, x, 2, &a);
}
static tm_val conv_depthwise(tm_ctx *c, const tm_val *in) {
    const int64_t w[4] = {16, 1, 5, 5};
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 2, a.i[1] = 16, a.i[2] = a.i[3] = 2, a.i[4] = a.i[5] = a.i[6] = a.i[7] = 2;
    a.i[8] = a.i[9] = 1;
    tm_val x[2] = {in[0], weights(c, 4, w)};
    return tm_prim(c, TM_P_CONV, x, 2, &a);
}
static tm_val attention(tm_ctx *c, const tm_val *in) {
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 0, a.i[1] = 1, a.i[2] = 3, a.i[3] = 2;
    tm_val kt = tm_prim(c, TM_P_TRANSPOSE, &in[1], 1, &a);
    tm_val s = bin(c, TM_P_MATMUL, in[0], kt);
    memset(&a, 0, sizeof a);
    a.i[0] = 3;
    tm_val p = tm_prim(c, TM_P_SOFTMAX, &s, 1, &a);
    return bin(c, TM_P_MATMUL, p, in[2]);
}

int main(void) {
    tm_pool *pool = tm_pool_create(3);
    CHECK(pool != NULL, "a pool of 3 threads");
    test_elementwise(pool);
    test_batched_matmul(pool);
    test_rows(pool);
    test_resize_nearest(pool);
    const int lin_r[1] = {2}, conv_r[1] = {4}, att_r[3] = {4, 4, 4};
    const int64_t lin_d[1][4] = {{130, 200}}, conv_d[1][4] = {{2, 16, 90, 82}};
    const int64_t att_d[3][4] = {{2, 6, 70, 32}, {2, 6, 90, 32}, {2, 6, 90, 32}};
    test_fused(pool, "linear + relu", 1, lin_r, lin_d, linear_relu, TM_P_LINEAR);
    test_fused(pool, "3x3 conv", 1, conv_r, conv_d, conv_3x3, TM_P_CONV_PACKED);
    test_fused(pool, "depthwise 5x5 stride 2", 1, conv_r, conv_d, conv_depthwise, TM_P_CONV_PACKED);
    test_fused(pool, "attention", 3, att_r, att_d, attention, TM_P_ATTENTION);
    /* A decode step: one query a head over a long past, threaded for its bytes (2.9 MB of
     * k and v) though its arithmetic alone (1.4 MFLOP) would stay on one thread. */
    const int64_t step_d[3][4] = {{2, 4, 1, 64}, {2, 4, 700, 64}, {2, 4, 700, 64}};
    test_fused(pool, "attention decode step", 3, att_r, step_d, attention, TM_P_ATTENTION);
    tm_pool_free(pool);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
