/* Tests of the passes that make fused primitives with their own kernels (LINEAR,
 * MATMUL_NBITS with an epilogue, ...):
 * each pattern is traced on symbolic inputs, the passes run, the fused node is checked,
 * then the rewritten trace is replayed eagerly, kernel by kernel, and compared with the
 * unfused pattern evaluated eagerly on the same inputs. Near misses must stay unfused.
 * Run again under TM_REFERENCE_KERNELS=1 (tests/run.sh) for the reference kernels. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../src/runtime/passes.h"
#include "../src/backends/cpu/gemm.h"
#include "../src/backends/cpu/vmath.h"
#include "../src/core/prims/fused.h"
#include "../src/core/ops.h"

#define CHECK_RNG_SEED 0x2545f4914f6cdd1dULL
#include "check.h"

#define MAX_INPUTS 4

static float next_f(void) { return (float)(rng_next() % 20001) / 10000.0f - 1.0f; }

static tm_val bin(tm_ctx *c, int prim, tm_val a, tm_val b) {
    tm_val in[2] = {a, b};
    return tm_prim(c, prim, in, 2, NULL);
}
static tm_val un(tm_ctx *c, int prim, tm_val a) { return tm_prim(c, prim, &a, 1, NULL); }

/* A constant of the given dims, filled from a seeded stream (the same values every call
 * with the same seed, so the traced and the eager graphs share their weights). */
static tm_val weights(tm_ctx *c, int rank, const int64_t *dims, uint64_t seed) {
    tm_tensor *t = tm_tensor_alloc(TM_FLOAT, rank, dims, NULL);
    uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 1;
    for (int64_t i = 0; i < tm_numel(rank, dims); i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        ((float *)t->data)[i] = (float)(s % 20001) / 20000.0f - 0.5f;
    }
    return tm_val_tensor(c, t, 0);
}

static tm_val scalar(tm_ctx *c, int rank, double v) {
    int64_t ones[TM_MAX_RANK] = {1, 1, 1, 1, 1, 1, 1, 1};
    return tm_const_fill(c, TM_FLOAT, rank, ones, v);
}

/* x * 0.5 * (1 + erf(x / sqrt 2)), decomposed as a TorchScript export has it. */
static tm_val gelu_erf(tm_ctx *c, int rank, tm_val x) {
    tm_val h = bin(c, TM_P_ADD, un(c, TM_P_ERF, bin(c, TM_P_DIV, x, scalar(c, rank, 1.4142135))),
                   scalar(c, rank, 1.0));
    return bin(c, TM_P_MUL, bin(c, TM_P_MUL, x, h), scalar(c, rank, 0.5));
}

typedef struct pattern {
    const char *name;
    int n_inputs;
    int rank[MAX_INPUTS];
    int64_t dims[MAX_INPUTS][TM_MAX_RANK];
    tm_val (*build)(tm_ctx *c, const tm_val *in, tm_val *extra);
    int want_prim;          /* the root's producer after the passes (-1: unchanged) */
    int want_fused;         /* how many nodes of that primitive */
} pattern;

/* ---- LINEAR patterns ------------------------------------------------------------------ */

static const int64_t W1[3] = {1, 40, 70}, B1[3] = {1, 1, 70};
static tm_val lin_full(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    tm_val y = bin(c, TM_P_ADD, bin(c, TM_P_MATMUL, in[0], weights(c, 3, W1, 1)), weights(c, 3, B1, 2));
    return bin(c, TM_P_ADD, in[1], gelu_erf(c, 3, y));
}
static const int64_t W2[2] = {33, 65};
static tm_val lin_chain(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    tm_val y = un(c, TM_P_RELU, bin(c, TM_P_MATMUL, in[0], weights(c, 2, W2, 3)));
    y = bin(c, TM_P_SUB, scalar(c, 2, 2.0), bin(c, TM_P_MUL, y, scalar(c, 2, 0.5)));
    return bin(c, TM_P_MAX, y, scalar(c, 2, 1.75));
}
/* The bias sum is read twice: only the product fuses. */
static tm_val lin_shared(tm_ctx *c, const tm_val *in, tm_val *extra) {
    const int64_t row[2] = {1, W2[1]};
    tm_val y = bin(c, TM_P_ADD, bin(c, TM_P_MATMUL, in[0], weights(c, 2, W2, 3)),
                   weights(c, 2, row, 4));
    *extra = un(c, TM_P_NEG, y);
    return un(c, TM_P_TANH, y);
}
static const int64_t W3[3] = {1, 16, 24}, W4[3] = {2, 16, 24};
static tm_val lin_few_rows(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    return bin(c, TM_P_MATMUL, in[0], weights(c, 3, W3, 5));
}
static tm_val lin_batched_w(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    return bin(c, TM_P_MATMUL, in[0], weights(c, 3, W4, 6));
}
static tm_val lin_variable_w(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    return bin(c, TM_P_MATMUL, in[0], in[1]);
}

/* A weight and a bias the plan does not know (trainable parameters): the bias joins the
 * product (passes/matmul_bias.c), a vector reshaped to broadcast, or a constant; not a
 * sum that broadcasts the product. */
static tm_val bias_vector(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    const int64_t row[2] = {1, 8};
    return bin(c, TM_P_ADD, bin(c, TM_P_MATMUL, in[0], in[1]), tm_reshape(c, in[2], 2, row));
}
static tm_val bias_reshaped(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    const int64_t row[3] = {1, 1, 8};
    return bin(c, TM_P_ADD, tm_reshape(c, in[2], 3, row), bin(c, TM_P_MATMUL, in[0], in[1]));
}
static tm_val bias_constant(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    const int64_t row[2] = {1, 8};
    return bin(c, TM_P_ADD, bin(c, TM_P_MATMUL, in[0], in[1]), weights(c, 2, row, 9));
}
static tm_val bias_broadcasting(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    return bin(c, TM_P_ADD, bin(c, TM_P_MATMUL, in[0], in[1]), in[2]);
}

/* x * sigmoid(x): SiLU, the saved form of a chain. */
static tm_val lin_silu(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    tm_val g = bin(c, TM_P_MATMUL, in[0], weights(c, 2, W2, 7));
    return bin(c, TM_P_MUL, g, un(c, TM_P_SIGMOID, g));
}

/* ---- MATMUL_GELU (a gradient plan's GELU) ------------------------------------------- */

/* x . W + bias (W, bias unknown: parameters) through GELU, the sum also read by GELU's
 * gradient (a backward's GELU_GRAD on cotangent gy): both outputs of the fused product
 * reach the result. */
static tm_val gelu_grad_of(tm_ctx *c, tm_val x, tm_val gy) {
    tm_args a;
    memset(&a, 0, sizeof a);
    tm_val in[2] = {x, gy};
    return tm_prim(c, TM_P_GELU_GRAD, in, 2, &a);
}
static tm_val mm_bias(tm_ctx *c, const tm_val *in) {
    const int64_t row[3] = {1, 1, 70};
    return bin(c, TM_P_ADD, bin(c, TM_P_MATMUL, in[0], in[1]), tm_reshape(c, in[2], 3, row));
}
static tm_val mm_gelu_saved(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    tm_val h = mm_bias(c, in), g = gelu_erf(c, 3, h);   /* the forward, then the backward */
    return bin(c, TM_P_ADD, g, gelu_grad_of(c, h, in[3]));
}
/* No bias, a weight with a batch dim: not one product over all rows, left alone (the
 * fused primitive's shape rule refuses it). */
static tm_val mm_gelu_batched_w(tm_ctx *c, const tm_val *in, tm_val *extra) {
    tm_val h = bin(c, TM_P_MATMUL, in[0], in[1]), g = gelu_erf(c, 3, h);
    *extra = gelu_grad_of(c, h, in[2]);
    return g;
}
/* The sum read by the GELU and by something else than its gradient: left alone. */
static tm_val mm_gelu_other(tm_ctx *c, const tm_val *in, tm_val *extra) {
    tm_val h = mm_bias(c, in), g = gelu_erf(c, 3, h);
    *extra = bin(c, TM_P_MUL, un(c, TM_P_NEG, h), in[3]);
    return g;
}

/* ---- MATMUL_ADD (a gradient plan's residual) ------------------------------------------ */

/* r + (x . W + bias), W and bias unknown (parameters), r of the product's dims. */
static tm_val mm_residual(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    return bin(c, TM_P_ADD, in[3], mm_bias(c, in));
}
/* (x . W) + r, no bias. */
static tm_val mm_residual_plain(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    return bin(c, TM_P_ADD, bin(c, TM_P_MATMUL, in[0], in[1]), in[2]);
}
/* The product also read by something else: left alone. */
static tm_val mm_residual_shared(tm_ctx *c, const tm_val *in, tm_val *extra) {
    tm_val y = bin(c, TM_P_MATMUL, in[0], in[1]);
    *extra = un(c, TM_P_NEG, y);
    return bin(c, TM_P_ADD, y, in[2]);
}

/* x . W^T (MATMUL's i[1]) + r: a backward's cotangent of x over a batch of rows, W
 * (1, N, K) broadcast, summed with another. */
static tm_val mm_tb_residual(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[1] = 1;
    tm_val xw[2] = {in[0], in[1]};
    return bin(c, TM_P_ADD, in[2], tm_prim(c, TM_P_MATMUL, xw, 2, &a));
}

/* ---- MATMUL_COLSUM (a weight's and its bias's gradients) ------------------------------ */

/* REDUCE_SUM of g over the axes in mask. */
static tm_val sum_axes(tm_ctx *c, tm_val g, int64_t mask) {
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = mask;
    return tm_prim(c, TM_P_REDUCE_SUM, &g, 1, &a);
}
static tm_val sum_rows(tm_ctx *c, tm_val g) { return sum_axes(c, g, (1 << (c->vals[g].rank - 1)) - 1); }
/* x^T g (MATMUL's i[0]). */
static tm_val mm_ta(tm_ctx *c, tm_val x, tm_val g) {
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 1;
    tm_val in[2] = {x, g};
    return tm_prim(c, TM_P_MATMUL, in, 2, &a);
}
/* v as a matrix of rows of its last dim, or flat. */
static tm_val as_rows(tm_ctx *c, tm_val v) {
    const tm_vinfo *vi = &c->vals[v];
    int64_t d[2] = {tm_numel(vi->rank, vi->dims) / vi->dims[vi->rank - 1], vi->dims[vi->rank - 1]};
    return tm_reshape(c, v, 2, d);
}
static tm_val as_flat(tm_ctx *c, tm_val v) {
    int64_t d[1] = {tm_numel(c->vals[v].rank, c->vals[v].dims)};
    return tm_reshape(c, v, 1, d);
}
/* The bias gradient (y) first, then the weight's (extra), each reshaped as a gradient
 * output is; and with the roots the other way round, so both outputs are compared. */
static tm_val db_dw(tm_ctx *c, const tm_val *in, tm_val *extra) {
    tm_val db = sum_rows(c, in[1]);
    *extra = as_flat(c, mm_ta(c, in[0], in[1]));
    return as_flat(c, db);
}
static tm_val dw_db(tm_ctx *c, const tm_val *in, tm_val *extra) {
    tm_val db = sum_rows(c, in[1]);
    *extra = as_flat(c, db);
    return as_flat(c, mm_ta(c, in[0], in[1]));
}
/* Rows of a batch: the product reads x and g reshaped to rows, x's reshape made after
 * the sum. */
static tm_val dw_db_rows(tm_ctx *c, const tm_val *in, tm_val *extra) {
    tm_val db = sum_rows(c, in[1]);
    *extra = as_flat(c, db);
    return as_flat(c, mm_ta(c, as_rows(c, in[0]), as_rows(c, in[1])));
}
/* The sum itself a root (the fused node keeps its output): fused or left alone shows. */
static tm_val db_root(tm_ctx *c, const tm_val *in, tm_val *extra) {
    tm_val db = sum_rows(c, in[1]);
    *extra = as_flat(c, mm_ta(c, in[0], in[1]));
    return db;
}
/* Near misses: a sum over the first axis only; the product a root (y's reshape gone). */
static tm_val db_one_axis(tm_ctx *c, const tm_val *in, tm_val *extra) {
    tm_val db = sum_axes(c, in[1], 1);
    *extra = as_flat(c, mm_ta(c, in[0], in[1]));
    return db;
}
static tm_val db_dw_root(tm_ctx *c, const tm_val *in, tm_val *extra) {
    tm_val db = sum_rows(c, in[1]);
    *extra = mm_ta(c, in[0], in[1]);
    return db;
}

/* A backward's product written transposed: (x . y^T)^T, MATMUL's i[1] and i[2]. */
static tm_val mm_ct(tm_ctx *c, tm_val x, tm_val y) {
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[1] = 1;
    a.i[2] = 1;
    tm_val in[2] = {x, y};
    return tm_prim(c, TM_P_MATMUL, in, 2, &a);
}
/* (W gy^T)^T reshaped to f's dims, times f: a cotangent through GELU (f, the derivative
 * the forward kept), as a backward has it; the factor on either side. */
static tm_val ct_times(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    const tm_vinfo *f = &c->vals[in[2]];
    return bin(c, TM_P_MUL, tm_reshape(c, mm_ct(c, in[0], in[1]), f->rank, f->dims), in[2]);
}
static tm_val ct_times_left(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    return bin(c, TM_P_MUL, in[2], mm_ct(c, in[0], in[1]));
}
/* x . W (or x . W^T, MATMUL's i[1]: a backward's cotangent over a batch of rows) times
 * f; with a bias first (near miss: MATMUL_MUL takes none). */
static tm_val plain_times(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    return bin(c, TM_P_MUL, bin(c, TM_P_MATMUL, in[0], in[1]), in[2]);
}
static tm_val tb_times(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[1] = 1;
    tm_val xw[2] = {in[0], in[1]};
    return bin(c, TM_P_MUL, in[2], tm_prim(c, TM_P_MATMUL, xw, 2, &a));
}
static tm_val bias_times(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    const int64_t row[2] = {1, 70};
    tm_val y = bin(c, TM_P_ADD, bin(c, TM_P_MATMUL, in[0], in[1]), tm_reshape(c, in[3], 2, row));
    return bin(c, TM_P_MUL, y, in[2]);
}
/* Near misses: f broadcast along the rows; the product also read elsewhere. */
static tm_val ct_times_shared(tm_ctx *c, const tm_val *in, tm_val *extra) {
    tm_val y = mm_ct(c, in[0], in[1]);
    *extra = un(c, TM_P_NEG, y);
    return bin(c, TM_P_MUL, y, in[2]);
}

/* r + (W gy^T)^T reshaped to r's dims, as a backward sums x's cotangents. */
static tm_val ct_residual(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    const tm_vinfo *r = &c->vals[in[2]];
    return bin(c, TM_P_ADD, in[2], tm_reshape(c, mm_ct(c, in[0], in[1]), r->rank, r->dims));
}
/* (W gy^T)^T + r, no reshape. */
static tm_val ct_residual_flat(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    return bin(c, TM_P_ADD, mm_ct(c, in[0], in[1]), in[2]);
}

/* ---- MATMUL_NBITS epilogues ------------------------------------------------------------ */

/* x (..., K) times N columns of seeded 4-bit weights (blocks of 32, default zero point)
 * repacked by NBITS_PACK, as the MatMulNBits lowering makes it. */
static tm_val nbits(tm_ctx *c, tm_val x, int64_t n, int64_t k, uint64_t seed) {
    int64_t bd[3] = {n, k / 32, 16}, sd[1] = {n * (k / 32)};
    tm_tensor *b = tm_tensor_alloc(TM_UINT8, 3, bd, NULL), *sc = tm_tensor_alloc(TM_FLOAT, 1, sd, NULL);
    uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 1;
    for (int64_t i = 0; i < tm_numel(3, bd); i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        ((uint8_t *)b->data)[i] = (uint8_t)s;
    }
    for (int64_t i = 0; i < sd[0]; i++) ((float *)sc->data)[i] = 0.01f + 0.001f * (float)(i % 7);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = k;
    a.i[1] = n;
    a.i[2] = 4;
    a.i[3] = 32;
    tm_val w[2] = {tm_val_tensor(c, b, 0), tm_val_tensor(c, sc, 0)};
    tm_val packed = tm_prim(c, TM_P_NBITS_PACK, w, 2, &a);
    a.i[6] = 1;
    tm_val in[2] = {x, packed};
    return tm_prim(c, TM_P_MATMUL_NBITS, in, 2, &a);
}
static const int64_t NB_BIAS[3] = {1, 1, 40};
static tm_val nbits_full(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    tm_val y = bin(c, TM_P_ADD, nbits(c, in[0], 40, 64, 11), weights(c, 3, NB_BIAS, 12));
    return bin(c, TM_P_ADD, gelu_erf(c, 3, y), in[1]);
}
static tm_val nbits_residual(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    return bin(c, TM_P_ADD, in[1], nbits(c, in[0], 40, 64, 13));
}
static const int64_t NB_ROW[2] = {1, 96};
static tm_val nbits_many_rows(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    tm_val y = bin(c, TM_P_ADD, nbits(c, in[0], 96, 128, 14), weights(c, 2, NB_ROW, 15));
    return un(c, TM_P_RELU, y);
}
static tm_val nbits_shared(tm_ctx *c, const tm_val *in, tm_val *extra) {
    tm_val y = nbits(c, in[0], 40, 64, 16);
    *extra = un(c, TM_P_NEG, y);
    return bin(c, TM_P_ADD, y, in[1]);
}

/* ---- CONV_PACKED patterns -------------------------------------------------------------- */

static tm_val conv(tm_ctx *c, tm_val x, tm_val w, tm_val b, int group, int stride, int pad) {
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 2;
    a.i[1] = group;
    for (int d = 0; d < 2; d++) {
        a.i[2 + d] = stride;
        a.i[4 + d] = pad;
        a.i[6 + d] = pad;
        a.i[8 + d] = 1;
    }
    tm_val in[3] = {x, w, b};
    return tm_prim(c, TM_P_CONV, in, b == TM_NONE ? 2 : 3, &a);
}
static tm_val hardswish(tm_ctx *c, tm_val x) {
    tm_val t = bin(c, TM_P_MIN, bin(c, TM_P_MAX, bin(c, TM_P_ADD, x, scalar(c, 4, 3.0)),
                                     scalar(c, 4, 0.0)), scalar(c, 4, 6.0));
    return bin(c, TM_P_DIV, bin(c, TM_P_MUL, x, t), scalar(c, 4, 6.0));
}
static const int64_t PW[4] = {20, 8, 1, 1}, CH20[4] = {1, 20, 1, 1};
/* Pointwise, a lowered BatchNormalization, the affine scalars and hardswish, a residual. */
static tm_val conv_pointwise_bn(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    tm_val y = conv(c, in[0], weights(c, 4, PW, 11), TM_NONE, 1, 1, 0);
    y = bin(c, TM_P_SUB, y, weights(c, 4, CH20, 12));
    y = bin(c, TM_P_MUL, y, weights(c, 4, CH20, 13));
    y = bin(c, TM_P_ADD, y, weights(c, 4, CH20, 14));
    y = bin(c, TM_P_ADD, bin(c, TM_P_MUL, scalar(c, 4, 1.25), y), scalar(c, 4, -0.5));
    return bin(c, TM_P_ADD, hardswish(c, y), in[1]);
}
static const int64_t K3[4] = {24, 12, 3, 3}, B24[1] = {24};
static tm_val conv_3x3_relu(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    return un(c, TM_P_RELU, conv(c, in[0], weights(c, 4, K3, 15), weights(c, 1, B24, 16), 1, 1, 1));
}
static tm_val conv_3x3_stride2(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    return conv(c, in[0], weights(c, 4, K3, 17), weights(c, 1, B24, 18), 1, 2, 1);
}
static const int64_t DW3[4] = {12, 1, 3, 3}, DW5[4] = {12, 1, 5, 5}, B12[1] = {12};
static tm_val conv_depthwise(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    return hardswish(c, conv(c, in[0], weights(c, 4, DW3, 19), weights(c, 1, B12, 20), 12, 1, 1));
}
static tm_val conv_depthwise_stride2(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    return conv(c, in[0], weights(c, 4, DW5, 21), weights(c, 1, B12, 22), 12, 2, 2);
}
/* Depthwise with strides that differ by axis (PP-OCR's recognizer halves only the height)
 * and a residual; a 1-D depthwise conv, dilated (one row of the 2-D kernel). */
static tm_val conv_depthwise_rows(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 2, a.i[1] = 12, a.i[2] = 2, a.i[3] = 1;
    for (int d = 0; d < 2; d++) a.i[4 + d] = a.i[6 + d] = 2, a.i[8 + d] = 1;
    tm_val ins[3] = {in[0], weights(c, 4, DW5, 48), weights(c, 1, B12, 49)};
    return bin(c, TM_P_ADD, un(c, TM_P_RELU, tm_prim(c, TM_P_CONV, ins, 3, &a)), in[1]);
}
static tm_val conv_depthwise_1d(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 1, a.i[1] = 12, a.i[2] = 1, a.i[3] = 3, a.i[4] = 2, a.i[5] = 2;
    tm_val ins[2] = {in[0], weights(c, 3, (const int64_t[3]){12, 1, 7}, 50)};
    return tm_prim(c, TM_P_CONV, ins, 2, &a);
}
/* Convolutions with few output positions (conv_packed_small): Silero VAD's 1-D STFT and
 * encoder layers, 2-D ones with 4 and 1 positions, a grouped one, two depth blocks. */
static tm_val conv1d(tm_ctx *c, tm_val x, tm_val w, tm_val b, int stride, int pad, int dilation) {
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 1;
    a.i[1] = 1;
    a.i[2] = stride;
    a.i[3] = a.i[4] = pad;
    a.i[5] = dilation;
    tm_val in[3] = {x, w, b};
    return tm_prim(c, TM_P_CONV, in, b == TM_NONE ? 2 : 3, &a);
}
static const int64_t STFT[3] = {258, 1, 256}, ENC[3] = {128, 129, 3}, B128[1] = {128}, DEEP[3] = {16, 200, 3};
static tm_val conv_stft(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    return conv1d(c, in[0], weights(c, 3, STFT, 41), TM_NONE, 128, 0, 1);
}
static tm_val conv_encoder(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    return un(c, TM_P_RELU, conv1d(c, in[0], weights(c, 3, ENC, 42), weights(c, 1, B128, 43), 1, 1, 1));
}
static tm_val conv_deep(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    return conv1d(c, in[0], weights(c, 3, DEEP, 44), TM_NONE, 2, 1, 2);
}
static tm_val conv_2x2_out(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    return conv(c, in[0], weights(c, 4, K3, 45), weights(c, 1, B24, 46), 1, 2, 1);
}
static tm_val conv_grouped_1x1_out(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    return un(c, TM_P_SIGMOID, conv(c, in[0], weights(c, 4, (const int64_t[4]){24, 6, 3, 3}, 47), TM_NONE, 2, 1, 0));
}
static const int64_t G2[4] = {24, 6, 3, 3};
static tm_val conv_grouped(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    return un(c, TM_P_SIGMOID, conv(c, in[0], weights(c, 4, G2, 23), TM_NONE, 2, 1, 1));
}
/* The conv's output is read twice, not by a saved step: only the conv fuses. */
static tm_val conv_shared(tm_ctx *c, const tm_val *in, tm_val *extra) {
    tm_val y = conv(c, in[0], weights(c, 4, K3, 24), TM_NONE, 1, 1, 1);
    *extra = un(c, TM_P_NEG, y);
    return un(c, TM_P_TANH, y);
}
static tm_val conv_variable_w(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    return conv(c, in[0], in[1], TM_NONE, 1, 1, 1);
}

static tm_val conv_t(tm_ctx *c, tm_val x, tm_val w, tm_val b, int stride) {
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 2;
    a.i[1] = 1;
    for (int d = 0; d < 2; d++) {
        a.i[2 + d] = stride;
        a.i[8 + d] = 1;
    }
    tm_val in[3] = {x, w, b};
    return tm_prim(c, TM_P_CONV_TRANSPOSE, in, b == TM_NONE ? 2 : 3, &a);
}
static const int64_t T2[4] = {12, 10, 2, 2}, T3[4] = {12, 3, 3, 3}, B10[1] = {10};
static const int64_t CH10[4] = {1, 10, 1, 1};
/* The FPN head's upsampling: a 2x2 stride-2 transpose, its bias, a lowered BatchNorm,
 * ReLU; and a 3x3 stride-3 one into a sigmoid with a residual. */
static tm_val convt_bn_relu(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    tm_val y = conv_t(c, in[0], weights(c, 4, T2, 31), weights(c, 1, B10, 32), 2);
    y = bin(c, TM_P_MUL, bin(c, TM_P_SUB, y, weights(c, 4, CH10, 33)), weights(c, 4, CH10, 34));
    return un(c, TM_P_RELU, bin(c, TM_P_ADD, y, weights(c, 4, CH10, 35)));
}
static tm_val convt3_sigmoid(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    return bin(c, TM_P_ADD, in[1], un(c, TM_P_SIGMOID, conv_t(c, in[0], weights(c, 4, T3, 36), TM_NONE, 3)));
}
/* Stride 1 with a 2x2 kernel: blocks overlap, no shuffle. */
static tm_val convt_overlap(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    return conv_t(c, in[0], weights(c, 4, T2, 37), TM_NONE, 1);
}

/* ---- ATTENTION patterns -------------------------------------------------------------- */

static tm_val reshape(tm_ctx *c, tm_val x, int rank, const int64_t *dims) {
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = rank;
    for (int d = 0; d < rank; d++) a.i[1 + d] = dims[d];
    return tm_prim(c, TM_P_RESHAPE, &x, 1, &a);
}
static tm_val transpose(tm_ctx *c, tm_val x, int p0, int p1, int p2, int p3) {
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = p0, a.i[1] = p1, a.i[2] = p2, a.i[3] = p3;
    return tm_prim(c, TM_P_TRANSPOSE, &x, 1, &a);
}
static tm_val softmax_last(tm_ctx *c, tm_val x) {
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 3;
    return tm_prim(c, TM_P_SOFTMAX, &x, 1, &a);
}
/* BERT: q, k, v (B, S, H * D) split into heads, k transposed (0 2 3 1), scores / sqrt D,
 * plus a (B, 1, 1, S) mask, the output transposed back: every layout flag set. */
enum { AB = 2, AS = 7, AH = 3, AD = 8 };
static tm_val attn_bert(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    const int64_t heads[4] = {AB, AS, AH, AD};
    tm_val q = transpose(c, reshape(c, in[0], 4, heads), 0, 2, 1, 3);
    tm_val kt = transpose(c, reshape(c, in[1], 4, heads), 0, 2, 3, 1);
    tm_val v = transpose(c, reshape(c, in[2], 4, heads), 0, 2, 1, 3);
    tm_val s = bin(c, TM_P_ADD, bin(c, TM_P_DIV, bin(c, TM_P_MATMUL, q, kt), scalar(c, 4, 2.828427)),
                   in[3]);
    tm_val o = transpose(c, bin(c, TM_P_MATMUL, softmax_last(c, s), v), 0, 2, 1, 3);
    const int64_t flat[3] = {AB, AS, AH * AD};
    return reshape(c, o, 3, flat);
}
/* LLaMA decode: q (B, Hq, 1, D), grouped k/v (B, Hk, S, D) repeated by repeat_kv, k
 * transposed (0 1 3 2), scores * scale, a causal mask; the output left in (B, H, S, D). */
static tm_val repeat_kv(tm_ctx *c, tm_val x, int64_t hk, int64_t g, int64_t s, int64_t d) {
    const int64_t u[5] = {1, hk, 1, s, d}, e[5] = {1, hk, g, s, d}, r[4] = {1, hk * g, s, d};
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 5;
    for (int i = 0; i < 5; i++) a.i[1 + i] = e[i];
    tm_val ux = reshape(c, x, 5, u);
    tm_val ex = tm_prim(c, TM_P_EXPAND, &ux, 1, &a);
    return reshape(c, ex, 4, r);
}
static tm_val attn_llama(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    tm_val kt = transpose(c, repeat_kv(c, in[1], 2, 3, 9, 16), 0, 1, 3, 2);
    tm_val s = bin(c, TM_P_ADD, bin(c, TM_P_MUL, scalar(c, 4, 0.25), bin(c, TM_P_MATMUL, in[0], kt)),
                   in[3]);
    return bin(c, TM_P_MATMUL, softmax_last(c, s), repeat_kv(c, in[2], 2, 3, 9, 16));
}
/* Decode steps whose query heads go to the kernel as the rows of one task per kv head:
 * 4 heads a kv head over 70 keys with a mask per head, and 66 heads on one kv head (more
 * than a task's 64 rows). */
static tm_val attn_gqa4(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    tm_val kt = transpose(c, repeat_kv(c, in[1], 2, 4, 70, 64), 0, 1, 3, 2);
    tm_val s = bin(c, TM_P_ADD, bin(c, TM_P_MUL, scalar(c, 4, 0.125), bin(c, TM_P_MATMUL, in[0], kt)),
                   in[3]);
    return bin(c, TM_P_MATMUL, softmax_last(c, s), repeat_kv(c, in[2], 2, 4, 70, 64));
}
static tm_val attn_mqa66(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    tm_val kt = transpose(c, repeat_kv(c, in[1], 1, 66, 5, 16), 0, 1, 3, 2);
    tm_val s = bin(c, TM_P_ADD, bin(c, TM_P_MUL, scalar(c, 4, 0.25), bin(c, TM_P_MATMUL, in[0], kt)),
                   in[3]);
    return bin(c, TM_P_MATMUL, softmax_last(c, s), repeat_kv(c, in[2], 1, 66, 5, 16));
}
/* softmax(q k^T * 0.125 + mask) v on (B, H, S, D) operands as given: head sizes and
 * lengths around the vector kernels' tiles (16-float vectors, 4-row and 6-row tiles,
 * query blocks of 64). */
static tm_val attn_plain(tm_ctx *c, const tm_val *in, tm_val *extra) {
    (void)extra;
    tm_val kt = transpose(c, in[1], 0, 1, 3, 2);
    tm_val s = bin(c, TM_P_ADD, bin(c, TM_P_MUL, scalar(c, 4, 0.125), bin(c, TM_P_MATMUL, in[0], kt)),
                   in[3]);
    return bin(c, TM_P_MATMUL, softmax_last(c, s), in[2]);
}
/* GPT-2: softmax(where(causal, q k^T / 8, finfo.min) + mask) v, 5 queries after a past
 * of 4 (the causal condition a constant (1, 1, 5, 9), as the export slices its bias);
 * broken: one element of the condition off the causal pattern, which must not fuse. */
static tm_val causal_cond(tm_ctx *c, int64_t sq, int64_t sk, int broken) {
    int64_t dims[4] = {1, 1, sq, sk};
    tm_tensor *t = tm_tensor_alloc(TM_BOOL, 4, dims, NULL);
    uint8_t *b = t->data;
    for (int64_t i = 0; i < sq; i++)
        for (int64_t j = 0; j < sk; j++) b[i * sk + j] = j <= sk - sq + i;
    if (broken) b[sk] = !b[sk];
    return tm_val_tensor(c, t, 0);
}
static tm_val attn_gpt2_causal(tm_ctx *c, const tm_val *in, tm_val *extra, int broken) {
    (void)extra;
    tm_val kt = transpose(c, in[1], 0, 1, 3, 2);
    tm_val sc = bin(c, TM_P_DIV, bin(c, TM_P_MATMUL, in[0], kt), scalar(c, 4, 8.0));
    tm_val w[3] = {causal_cond(c, 5, 9, broken), sc, scalar(c, 4, -3.4028234663852886e38)};
    tm_val s = bin(c, TM_P_ADD, tm_prim(c, TM_P_WHERE, w, 3, NULL), in[3]);
    return bin(c, TM_P_MATMUL, softmax_last(c, s), in[2]);
}
static tm_val attn_causal(tm_ctx *c, const tm_val *in, tm_val *extra) {
    return attn_gpt2_causal(c, in, extra, 0);
}
static tm_val attn_causal_broken(tm_ctx *c, const tm_val *in, tm_val *extra) {
    return attn_gpt2_causal(c, in, extra, 1);
}

/* The scores are read twice: nothing fuses. */
static tm_val attn_shared(tm_ctx *c, const tm_val *in, tm_val *extra) {
    tm_val kt = transpose(c, in[1], 0, 1, 3, 2);
    tm_val scores = bin(c, TM_P_MATMUL, in[0], kt);
    *extra = un(c, TM_P_NEG, scores);
    return bin(c, TM_P_MATMUL, softmax_last(c, scores), in[2]);
}

static const pattern patterns[] = {
    {"matmul + bias + gelu + residual", 2, {3, 3}, {{2, 6, 40}, {2, 6, 70}}, lin_full,
     TM_P_LINEAR, 1},
    {"matmul + relu, mul, rsub, max", 1, {2}, {{9, 33}}, lin_chain, TM_P_LINEAR, 1},
    {"bias sum read twice", 1, {2}, {{12, 33}}, lin_shared, TM_P_TANH, 1},
    {"one row (a decode step)", 1, {3}, {{1, 1, 16}}, lin_few_rows, TM_P_LINEAR, 1},
    {"three rows", 1, {3}, {{1, 3, 16}}, lin_few_rows, TM_P_LINEAR, 1},
    {"weight with a batch dim", 1, {3}, {{2, 3, 16}}, lin_batched_w, TM_P_MATMUL, 0},
    {"weight not constant", 2, {2, 2}, {{8, 16}, {16, 8}}, lin_variable_w, TM_P_MATMUL, 0},
    {"unknown weight + bias vector", 3, {2, 2, 1}, {{5, 16}, {16, 8}, {8}}, bias_vector,
     TM_P_MATMUL, 0},
    {"unknown weight (1, K, N) + bias reshaped", 3, {3, 3, 1}, {{2, 5, 16}, {1, 16, 8}, {8}},
     bias_reshaped, TM_P_MATMUL, 0},
    {"unknown weight + constant bias", 2, {2, 2}, {{5, 16}, {16, 8}}, bias_constant,
     TM_P_MATMUL, 0},
    {"unknown weight + a sum that broadcasts", 3, {2, 2, 2}, {{1, 16}, {16, 8}, {4, 8}},
     bias_broadcasting, TM_P_ADD, 0},
    {"matmul + silu (saved chain)", 1, {2}, {{7, 33}}, lin_silu, TM_P_LINEAR, 1},
    {"matmul + bias + gelu, the sum read by its gradient (small path)", 4, {3, 3, 1, 3},
     {{2, 7, 40}, {1, 40, 70}, {70}, {2, 7, 70}}, mm_gelu_saved, TM_P_ADD, 1},
    {"matmul + bias + gelu, the sum read by its gradient (packed path)", 4, {3, 3, 1, 3},
     {{2, 60, 40}, {1, 40, 70}, {70}, {2, 60, 70}}, mm_gelu_saved, TM_P_ADD, 1},
    {"matmul + gelu read by its gradient, weight with a batch dim", 3, {3, 3, 3},
     {{2, 60, 40}, {2, 40, 70}, {2, 60, 70}}, mm_gelu_batched_w, TM_P_GELU, 0},
    {"matmul + bias + gelu, the sum read elsewhere", 4, {3, 3, 1, 3},
     {{2, 60, 40}, {1, 40, 70}, {70}, {2, 60, 70}}, mm_gelu_other, TM_P_GELU, 0},
    {"matmul + bias + residual, unknown weight (in place path)", 4, {3, 3, 1, 3},
     {{2, 60, 40}, {1, 40, 70}, {70}, {2, 60, 70}}, mm_residual, TM_P_MATMUL_ADD, 1},
    {"matmul + bias + residual, unknown weight (small path)", 4, {3, 3, 1, 3},
     {{1, 2, 40}, {1, 40, 70}, {70}, {1, 2, 70}}, mm_residual, TM_P_MATMUL_ADD, 1},
    {"matmul + residual, no bias", 3, {2, 2, 2}, {{300, 40}, {40, 70}, {300, 70}},
     mm_residual_plain, TM_P_MATMUL_ADD, 1},
    {"matmul + residual, the product read elsewhere", 3, {2, 2, 2},
     {{30, 40}, {40, 70}, {30, 70}}, mm_residual_shared, TM_P_ADD, 0},
    {"x . W^T + residual, W broadcast over a batch (packed path)", 3, {3, 3, 3},
     {{3, 60, 40}, {1, 70, 40}, {3, 60, 70}}, mm_tb_residual, TM_P_MATMUL_ADD, 1},
    {"x . W^T + residual, two depth blocks", 3, {3, 3, 3},
     {{2, 50, 500}, {1, 24, 500}, {2, 50, 24}}, mm_tb_residual, TM_P_MATMUL_ADD, 1},
    {"x . W^T + residual, a few rows (small path)", 3, {2, 2, 2},
     {{3, 40}, {70, 40}, {3, 70}}, mm_tb_residual, TM_P_MATMUL_ADD, 1},
    {"x . W^T + residual, W batched: left alone", 3, {3, 3, 3},
     {{2, 30, 40}, {2, 70, 40}, {2, 30, 70}}, mm_tb_residual, TM_P_ADD, 0},
    {"(W gy^T)^T times the GELU derivative, reshaped", 3, {2, 2, 3},
     {{70, 40}, {60, 40}, {1, 60, 70}}, ct_times, TM_P_MATMUL_MUL, 1},
    {"f times (W gy^T)^T, two depth blocks", 3, {2, 2, 2}, {{24, 500}, {50, 500}, {50, 24}},
     ct_times_left, TM_P_MATMUL_MUL, 1},
    {"(W gy^T)^T times f, a few rows (plain loops)", 3, {2, 2, 2}, {{9, 7}, {2, 7}, {2, 9}},
     ct_times_left, TM_P_MATMUL_MUL, 1},
    {"x . W times f (in place path)", 3, {2, 2, 2}, {{60, 40}, {40, 70}, {60, 70}},
     plain_times, TM_P_MATMUL_MUL, 1},
    {"x . W times f, a few rows (small path)", 3, {2, 2, 2}, {{2, 40}, {40, 70}, {2, 70}},
     plain_times, TM_P_MATMUL_MUL, 1},
    {"f times x . W^T, W broadcast over a batch (packed path)", 3, {3, 3, 3},
     {{3, 60, 40}, {1, 70, 40}, {3, 60, 70}}, tb_times, TM_P_MATMUL_MUL, 1},
    {"f times x . W^T, W batched: left alone", 3, {3, 3, 3},
     {{2, 30, 40}, {2, 70, 40}, {2, 30, 70}}, tb_times, TM_P_MUL, 0},
    {"(x . W + bias) times f: left alone", 4, {2, 2, 2, 1},
     {{60, 40}, {40, 70}, {60, 70}, {70}}, bias_times, TM_P_MUL, 0},
    {"(W gy^T)^T times a broadcast row: left alone", 3, {2, 2, 2},
     {{70, 40}, {60, 40}, {1, 70}}, ct_times_left, TM_P_MUL, 0},
    {"(W gy^T)^T times f, the product read elsewhere", 3, {2, 2, 2},
     {{70, 40}, {60, 40}, {60, 70}}, ct_times_shared, TM_P_MUL, 0},
    {"weight and bias gradients, bias compared", 2, {3, 3}, {{1, 60, 40}, {1, 60, 70}},
     db_dw, TM_P_RESHAPE, 1},
    {"weight and bias gradients, weight compared", 2, {3, 3}, {{1, 60, 40}, {1, 60, 70}},
     dw_db, TM_P_RESHAPE, 1},
    {"weight and bias gradients, two depth blocks", 2, {3, 3}, {{1, 500, 24}, {1, 500, 50}},
     dw_db, TM_P_RESHAPE, 1},
    {"weight and bias gradients, few columns (small path)", 2, {2, 2}, {{7, 2}, {7, 9}},
     dw_db, TM_P_RESHAPE, 1},
    {"weight and bias gradients over a batch's rows", 2, {3, 3}, {{3, 20, 40}, {3, 20, 70}},
     dw_db_rows, TM_P_RESHAPE, 1},
    {"weight and bias gradients, the sum a root", 2, {3, 3}, {{1, 60, 40}, {1, 60, 70}},
     db_root, TM_P_MATMUL_COLSUM, 1},
    {"bias gradient over one axis: left alone", 2, {3, 3}, {{1, 30, 40}, {1, 30, 70}},
     db_one_axis, TM_P_REDUCE_SUM, 0},
    {"a batch of weight gradients: left alone", 2, {3, 3}, {{2, 30, 40}, {2, 30, 70}},
     db_root, TM_P_REDUCE_SUM, 0},
    {"the weight gradient a root: left alone", 2, {3, 3}, {{1, 60, 40}, {1, 60, 70}},
     db_dw_root, TM_P_REDUCE_SUM, 0},
    {"transposed product + reshape + residual (packed path)", 3, {2, 2, 3},
     {{40, 70}, {300, 70}, {1, 300, 40}}, ct_residual, TM_P_MATMUL_ADD, 1},
    {"transposed product + reshape + residual (two depth blocks)", 3, {2, 2, 3},
     {{24, 500}, {50, 500}, {2, 25, 24}}, ct_residual, TM_P_MATMUL_ADD, 1},
    {"transposed product + residual (plain loops)", 3, {2, 2, 2},
     {{2, 30}, {9, 30}, {9, 2}}, ct_residual_flat, TM_P_MATMUL_ADD, 1},
    {"nbits + bias + gelu + residual", 2, {3, 3}, {{2, 6, 64}, {2, 6, 40}}, nbits_full,
     TM_P_MATMUL_NBITS, 1},
    {"nbits one row + residual (a decode step)", 2, {3, 3}, {{1, 1, 64}, {1, 1, 40}},
     nbits_residual, TM_P_MATMUL_NBITS, 1},
    {"nbits 600 rows + bias + relu (panel path)", 1, {2}, {{600, 128}}, nbits_many_rows,
     TM_P_MATMUL_NBITS, 1},
    {"nbits output read twice", 2, {2, 2}, {{5, 64}, {5, 40}}, nbits_shared, TM_P_ADD, 0},
    {"pointwise conv + batch norm + affine + hardswish + residual", 2, {4, 4},
     {{2, 8, 9, 35}, {2, 20, 9, 35}}, conv_pointwise_bn, TM_P_CONV_PACKED, 1},
    {"3x3 conv + bias + relu", 1, {4}, {{1, 12, 13, 37}}, conv_3x3_relu, TM_P_CONV_PACKED, 1},
    {"3x3 conv, stride 2", 1, {4}, {{2, 12, 15, 18}}, conv_3x3_stride2, TM_P_CONV_PACKED, 1},
    {"depthwise 3x3 + hardswish", 1, {4}, {{1, 12, 17, 40}}, conv_depthwise, TM_P_CONV_PACKED, 1},
    {"depthwise 5x5, stride 2", 1, {4}, {{2, 12, 21, 23}}, conv_depthwise_stride2,
     TM_P_CONV_PACKED, 1},
    {"depthwise 5x5, stride (2, 1) + relu + residual", 2, {4, 4},
     {{1, 12, 13, 150}, {1, 12, 7, 150}}, conv_depthwise_rows, TM_P_CONV_PACKED, 1},
    {"depthwise 1-D, dilation 2", 1, {3}, {{2, 12, 50}}, conv_depthwise_1d, TM_P_CONV_PACKED, 1},
    {"grouped 3x3 conv + sigmoid", 1, {4}, {{1, 12, 11, 30}}, conv_grouped, TM_P_CONV_PACKED, 1},
    {"1-D conv, 4 outputs of stride 128 (few positions)", 1, {3}, {{1, 1, 640}}, conv_stft,
     TM_P_CONV_PACKED, 1},
    {"1-D conv + bias + relu, 4 outputs", 1, {3}, {{1, 129, 4}}, conv_encoder, TM_P_CONV_PACKED, 1},
    {"1-D conv, dilated, two depth blocks, 3 outputs, batch 2", 1, {3}, {{2, 200, 6}}, conv_deep,
     TM_P_CONV_PACKED, 1},
    {"3x3 conv stride 2 + bias, 2 x 2 outputs, batch 2", 1, {4}, {{2, 12, 4, 4}}, conv_2x2_out,
     TM_P_CONV_PACKED, 1},
    {"grouped 3x3 conv + sigmoid, one output", 1, {4}, {{1, 12, 3, 3}}, conv_grouped_1x1_out,
     TM_P_CONV_PACKED, 1},
    {"pointwise conv + batch norm + hardswish + residual, one position", 2, {4, 4},
     {{2, 8, 1, 1}, {2, 20, 1, 1}}, conv_pointwise_bn, TM_P_CONV_PACKED, 1},
    {"conv output read twice", 1, {4}, {{1, 12, 9, 9}}, conv_shared, TM_P_TANH, 1},
    {"conv weight not constant", 2, {4, 4}, {{1, 12, 9, 9}, {24, 12, 3, 3}}, conv_variable_w,
     TM_P_CONV, 0},
    {"conv transpose 2x2 stride 2 + bias + batch norm + relu", 1, {4}, {{2, 12, 9, 35}},
     convt_bn_relu, TM_P_CONV_PACKED, 1},
    {"conv transpose 3x3 stride 3 + sigmoid + residual", 2, {4, 4}, {{1, 12, 5, 7}, {1, 3, 15, 21}},
     convt3_sigmoid, TM_P_CONV_PACKED, 1},
    {"conv transpose with overlapping blocks", 1, {4}, {{1, 12, 6, 6}}, convt_overlap,
     TM_P_CONV_TRANSPOSE, 0},
    {"BERT attention (heads split, mask, output transposed)", 4, {3, 3, 3, 4},
     {{AB, AS, AH * AD}, {AB, AS, AH * AD}, {AB, AS, AH * AD}, {AB, 1, 1, AS}}, attn_bert,
     TM_P_RESHAPE, 1},
    {"LLaMA decode attention (grouped kv, scale, mask)", 4, {4, 4, 4, 4},
     {{1, 6, 1, 16}, {1, 2, 9, 16}, {1, 2, 9, 16}, {1, 1, 1, 9}}, attn_llama, TM_P_ATTENTION, 1},
    {"decode attention, 4 heads a kv head, 70 keys, a mask per head", 4, {4, 4, 4, 4},
     {{1, 8, 1, 64}, {1, 2, 70, 64}, {1, 2, 70, 64}, {1, 8, 1, 70}}, attn_gqa4, TM_P_ATTENTION, 1},
    {"decode attention, 66 heads on one kv head", 4, {4, 4, 4, 4},
     {{1, 66, 1, 16}, {1, 1, 5, 16}, {1, 1, 5, 16}, {1, 1, 1, 5}}, attn_mqa66, TM_P_ATTENTION, 1},
    {"attention D 32, 70 queries and keys (two query blocks)", 4, {4, 4, 4, 4},
     {{2, 3, 70, 32}, {2, 3, 70, 32}, {2, 3, 70, 32}, {2, 1, 70, 70}}, attn_plain, TM_P_ATTENTION, 1},
    {"attention D 48, 37 keys", 4, {4, 4, 4, 4},
     {{1, 2, 5, 48}, {1, 2, 37, 48}, {1, 2, 37, 48}, {1, 1, 5, 37}}, attn_plain, TM_P_ATTENTION, 1},
    {"attention D 80, 20 keys, one mask row", 4, {4, 4, 4, 4},
     {{1, 1, 9, 80}, {1, 1, 20, 80}, {1, 1, 20, 80}, {1, 1, 1, 20}}, attn_plain, TM_P_ATTENTION, 1},
    {"attention D 64, one query (a decode step)", 4, {4, 4, 4, 4},
     {{1, 4, 1, 64}, {1, 4, 33, 64}, {1, 4, 33, 64}, {1, 1, 1, 33}}, attn_plain, TM_P_ATTENTION, 1},
    {"attention scores read twice", 3, {4, 4, 4}, {{1, 2, 5, 8}, {1, 2, 6, 8}, {1, 2, 6, 8}},
     attn_shared, TM_P_MATMUL, 0},
    {"GPT-2 causal attention (where fill, mask), 5 queries after 4", 4, {4, 4, 4, 4},
     {{1, 2, 5, 8}, {1, 2, 9, 8}, {1, 2, 9, 8}, {1, 1, 1, 9}}, attn_causal, TM_P_ATTENTION, 1},
    {"where whose condition is not causal: left alone", 4, {4, 4, 4, 4},
     {{1, 2, 5, 8}, {1, 2, 9, 8}, {1, 2, 9, 8}, {1, 1, 1, 9}}, attn_causal_broken, TM_P_MATMUL, 0},
};

/* ---- The harness ---------------------------------------------------------------------- */

/* The live nodes of trace t, run eagerly in e; returns e's value for trace value want. */
static tm_val replay(tm_ctx *t, const tm_pass_roots *roots, tm_ctx *e, const tm_val *inputs,
                     const tm_val *eager_inputs, int n_inputs, tm_val want) {
    uint8_t *live = NULL;
    int *uses = tm__pass_live_use_counts(t, roots, &live);
    tm_val *map = malloc(((size_t)t->n_vals + 1) * sizeof *map);
    for (int32_t v = 0; v < t->n_vals; v++) map[v] = TM_NONE;
    for (int i = 0; i < n_inputs; i++) map[inputs[i]] = eager_inputs[i];
    for (int32_t i = 0; i < t->n_nodes; i++) {
        if (!live[i]) continue;
        const tm_rnode *rn = &t->nodes[i];
        tm_val in[16];
        for (int j = 0; j < rn->nin && j < 16; j++) {
            tm_val v = rn->in[j];
            if (map[v] == TM_NONE && t->vals[v].data)
                map[v] = tm_val_tensor(e, tm_tensor_clone(t->vals[v].data, NULL), 0);
            in[j] = map[v];
        }
        tm_val out[4];
        tm_prim_n(e, rn->prim, in, rn->nin, &rn->args, out, rn->nout);
        for (int j = 0; j < rn->nout; j++) map[rn->out[j]] = out[j];
    }
    tm_val got = map[want];
    free(map);
    free(uses);
    free(live);
    return got;
}

/* Live nodes of prim (MATMUL_NBITS: only those given an epilogue). */
static int count_prim(const tm_ctx *t, const tm_pass_roots *roots, int prim) {
    uint8_t *live = NULL;
    int *uses = tm__pass_live_use_counts(t, roots, &live);
    int n = 0;
    for (int32_t i = 0; i < t->n_nodes; i++) {
        const tm_args *a = &t->nodes[i].args;
        int epilogue = a->i[7] || a->i[8] || a->i[TM_NBITS_ARG_CHAIN];
        n += live[i] && t->nodes[i].prim == prim && (prim != TM_P_MATMUL_NBITS || epilogue);
    }
    free(uses);
    free(live);
    return n;
}

static void run_pattern(const pattern *p) {
    tm_ctx t;
    tm_ctx_init(&t, TM_MODE_TRACE, NULL);
    tm_val in[MAX_INPUTS], extra = TM_NONE;
    for (int i = 0; i < p->n_inputs; i++) in[i] = tm_val_symbolic(&t, TM_FLOAT, p->rank[i], p->dims[i], i);
    tm_val y = p->build(&t, in, &extra);
    CHECK(tm_ctx_ok(&t), "%s: trace: %s", p->name, t.err.message);
    tm_val root_vals[2] = {y, extra};
    tm_pass_roots roots = {root_vals, extra == TM_NONE ? 1 : 2};
    CHECK(tm__run_passes(&t, &roots) == TM_OK && tm_ctx_ok(&t), "%s: passes failed", p->name);
    int got_prim = t.nodes[t.vals[y].producer].prim;
    int fused = p->want_fused ? count_prim(&t, &roots, TM_P_LINEAR) +
                                    count_prim(&t, &roots, TM_P_CONV_PACKED) +
                                    count_prim(&t, &roots, TM_P_ATTENTION) +
                                    count_prim(&t, &roots, TM_P_MATMUL_NBITS) +
                                    count_prim(&t, &roots, TM_P_MATMUL_GELU) +
                                    count_prim(&t, &roots, TM_P_MATMUL_ADD) +
                                    count_prim(&t, &roots, TM_P_MATMUL_MUL) +
                                    count_prim(&t, &roots, TM_P_MATMUL_COLSUM) : 0;
    CHECK(got_prim == p->want_prim && fused == p->want_fused,
          "%s: the result comes from %s (%d fused nodes), expected %s (%d)", p->name,
          tm_prims[got_prim].name, fused, tm_prims[p->want_prim].name, p->want_fused);
    /* The rewritten trace and the pattern itself, eagerly, on the same inputs. */
    tm_ctx e;
    tm_ctx_init(&e, TM_MODE_EAGER, NULL);
    tm_val ein[MAX_INPUTS];
    for (int i = 0; i < p->n_inputs; i++) {
        tm_tensor *x = tm_tensor_alloc(TM_FLOAT, p->rank[i], p->dims[i], NULL);
        for (int64_t j = 0; j < tm_numel(p->rank[i], p->dims[i]); j++) ((float *)x->data)[j] = next_f();
        ein[i] = tm_val_tensor(&e, x, 0);
    }
    tm_val unused = TM_NONE;
    tm_val want = p->build(&e, ein, &unused);
    tm_val got = replay(&t, &roots, &e, in, ein, p->n_inputs, y);
    CHECK(tm_ctx_ok(&e) && got != TM_NONE, "%s: eager: %s", p->name, e.err.message);
    if (tm_ctx_ok(&e) && got != TM_NONE) {
        const tm_tensor *a = tm_vdata(&e, want), *b = tm_vdata(&e, got);
        double worst = 0.0;
        int64_t n = tm_tensor_numel_(a);
        CHECK(tm_tensor_numel_(b) == n, "%s: sizes differ", p->name);
        for (int64_t i = 0; i < n && tm_tensor_numel_(b) == n; i++) {
            double fa = ((const float *)a->data)[i], fb = ((const float *)b->data)[i];
            /* Relative, but near zero absolute: GELU's fused form (erfc) and the erf
             * decomposition differ by about 1e-7 there. */
            double err = fabs(fa - fb) / (0.1 + fabs(fa));
            worst = isnan(err) ? INFINITY : fmax(worst, err);
        }
        CHECK(worst < 1e-5, "%s: fused differs by %g", p->name, worst);
        /* A product's residual or factor in its epilogue: the same bits as the unfused. */
        if (p->want_fused && (p->want_prim == TM_P_MATMUL_ADD || p->want_prim == TM_P_MATMUL_MUL))
            CHECK(tm_tensor_numel_(b) == n && !memcmp(a->data, b->data, (size_t)n * sizeof(float)),
                  "%s: fused differs from the unfused bits", p->name);
    }
    tm_ctx_destroy(&e);
    tm_ctx_destroy(&t);
}

/* The chain's GELU (a vector form where the CPU has one) against the GELU primitive's
 * own scalar form, over the range that matters and its extremes. */
static void test_chain_gelu(void) {
    enum { N = 20011 };
    float *x = malloc(N * sizeof *x), *want = malloc(N * sizeof *want), *got = malloc(N * sizeof *got);
    for (int i = 0; i < N; i++) x[i] = -12.0f + 24.0f * (float)i / (N - 1);
    x[0] = -INFINITY, x[1] = INFINITY, x[2] = NAN, x[3] = 0.0f, x[4] = -0.0f, x[5] = 1e-30f;
    x[6] = -1e-30f, x[7] = 30.0f, x[8] = -30.0f, x[9] = 1e-6f;
    tm_args a;
    memset(&a, 0, sizeof a);
    tm__unary_f32_rows(TM_P_GELU, &a, x, want, N);
    tm_chain ch = {1, {{TM_P_GELU, TM_CHAIN_UNARY, 0, 0.0f}}};
    tm__chain_apply(&ch, x, got, N);
    double worst = 0.0;
    int specials = 1;
    for (int i = 0; i < N; i++) {
        if (isnan(want[i]) || isinf(want[i])) {
            specials &= isnan(want[i]) ? isnan(got[i]) != 0 : got[i] == want[i];
            continue;
        }
        double e = fabs((double)got[i] - want[i]) / (1e-30 + fabs(want[i]));
        if (fabs(want[i]) < 1e-6) e = fabs((double)got[i] - want[i]) / 1e-6;
        worst = fmax(worst, e);
    }
    printf("chain gelu worst relative error %g\n", worst);
    /* The vector form (where the CPU has one) against double GELU: its relative error
     * where |GELU| >= 1e-6, and its mean error in ulps on each side of 0, which a
     * quantized export notices: a bias of a few ulps put the tiny Whisper int8
     * encoder's activations on the other side of a rounding tie from ONNX Runtime's. */
    const tm__vmath *vm = tm__vmath_active();
    if (vm && vm->gelu_erf) {
        enum { M = 1 << 18 };
        float *u = malloc(M * sizeof *u), *v = malloc(M * sizeof *v);
        for (int side = 0; side < 2; side++) {
            for (int i = 0; i < M; i++) u[i] = (side ? -4.0f : 0.0f) + 4.0f * (float)i / M;
            vm->gelu_erf(u, v, M);
            double bias = 0.0, rel = 0.0;
            for (int i = 0; i < M; i++) {
                double r = 0.5 * (double)u[i] * erfc(-(double)u[i] / sqrt(2.0));
                float rf = (float)r;
                if (rf == 0.0f) continue;
                bias += ((double)v[i] - r) / fabs((double)nextafterf(rf, INFINITY) - rf);
                if (fabs(r) >= 1e-6) rel = fmax(rel, fabs((double)v[i] - r) / fabs(r));
            }
            bias /= M;
            printf("vector gelu %s x: mean error %.3f ulp, worst relative %.3g\n",
                   side ? "negative" : "positive", bias, rel);
            CHECK(fabs(bias) < 0.5 && rel < 4e-6, "vector gelu, %s x: mean error %.3f ulp, "
                  "worst relative error %.3g", side ? "negative" : "positive", bias, rel);
        }
        free(u), free(v);
    }
    CHECK(worst < 2e-6 && specials, "chain gelu: relative error %g against the primitive, "
          "infinities/NaN %s", worst, specials ? "kept" : "WRONG");
    free(x), free(want), free(got);
}

/* GELU and its derivative from one call (MATMUL_GELU's epilogue in a gradient plan):
 * GELU's bits as the GELU kernel's, and the derivative's as the factor GELU_GRAD
 * multiplies by (its f32 kernel with a cotangent of ones; where that kernel is the f64
 * reference, within a few ulp), in place too. */
static void test_gelu_with_derivative(void) {
    enum { N = 4099 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y), *d = malloc(N * sizeof *d);
    float *want = malloc(N * sizeof *want), *ones = malloc(N * sizeof *ones);
    for (int i = 0; i < N; i++) x[i] = -9.0f + 18.0f * (float)i / (N - 1), ones[i] = 1.0f;
    x[0] = 0.0f, x[1] = -0.0f, x[2] = 1e-20f, x[3] = 30.0f, x[4] = -30.0f;
    tm_args a;
    memset(&a, 0, sizeof a);
    tm__unary_f32_rows(TM_P_GELU, &a, x, want, N);
    tm__gelu_erf_d_f32(x, y, d, N);
    CHECK(!memcmp(y, want, N * sizeof *y), "gelu with derivative: GELU's bits differ");
    tm_ctx e;
    tm_ctx_init(&e, TM_MODE_EAGER, NULL);
    int64_t dims[1] = {N};
    tm_tensor *tx = tm_tensor_alloc(TM_FLOAT, 1, dims, NULL);
    tm_tensor *tg = tm_tensor_alloc(TM_FLOAT, 1, dims, NULL);
    memcpy(tx->data, x, N * sizeof *x);
    memcpy(tg->data, ones, N * sizeof *x);
    tm_val in[2] = {tm_val_tensor(&e, tx, 0), tm_val_tensor(&e, tg, 0)};
    tm_val g = tm_prim(&e, TM_P_GELU_GRAD, in, 2, &a);
    CHECK(tm_ctx_ok(&e), "gelu_grad: %s", e.err.message);
    const float *gd = tm_ctx_ok(&e) ? tm_vdata(&e, g)->data : d;
    /* (Absolute: the derivative crosses 0 near x = -0.75, and is about 1e-17 at x = -9.) */
    double worst = 0.0;
    for (int i = 0; i < N; i++) worst = fmax(worst, fabs((double)gd[i] - d[i]));
    if (tm_use_reference_kernels())
        CHECK(worst < 1e-6, "gelu with derivative: the derivative %g from GELU_GRAD's", worst);
    else
        CHECK(worst == 0.0, "gelu with derivative: the derivative differs from GELU_GRAD's "
              "factor (%g)", worst);
    memcpy(d, x, N * sizeof *x);   /* the derivative over x itself */
    tm__gelu_erf_d_f32(d, y, d, N);
    CHECK(!memcmp(y, want, N * sizeof *y), "gelu with derivative in place: GELU's bits differ");
    double again = 0.0;
    for (int i = 0; i < N; i++) again = fmax(again, fabs((double)gd[i] - d[i]));
    CHECK(again == worst, "gelu with derivative in place: %g against %g", again, worst);
    tm_ctx_destroy(&e);
    free(x), free(y), free(d), free(want), free(ones);
}

/* A gradient plan's GELU, forward and backward: h = x W + b, g = GELU(h); the backward's
 * cotangent of h, GELU_GRAD(h, gy), gy a product written transposed ((W2 go^T)^T, as x's
 * cotangent through the next product is made). The fused product keeps GELU's derivative
 * (MATMUL_GELU's i[3]) and the gradient becomes MATMUL_MUL of that product by it, no
 * GELU_GRAD left; with the reference kernels MATMUL_GELU keeps h and GELU_GRAD reads it.
 * Both results to the bit as the unfused primitives give them. */
static tm_val gelu_step(tm_ctx *c, const tm_val *in, tm_val *extra) {
    const int64_t row[3] = {1, 1, 70};
    tm_val h = bin(c, TM_P_ADD, bin(c, TM_P_MATMUL, in[0], in[1]), tm_reshape(c, in[2], 3, row));
    *extra = un(c, TM_P_GELU, h);
    const tm_vinfo *hi = &c->vals[h];
    tm_val gy = tm_reshape(c, mm_ct(c, in[3], in[4]), hi->rank, hi->dims);
    return gelu_grad_of(c, h, gy);
}

static void test_gelu_step(void) {
    static const int64_t d[5][3] = {{2, 60, 40}, {1, 40, 70}, {70}, {70, 50}, {120, 50}};
    static const int rank[5] = {3, 3, 1, 2, 2};
    tm_ctx t;
    tm_ctx_init(&t, TM_MODE_TRACE, NULL);
    tm_val in[5], extra = TM_NONE;
    for (int i = 0; i < 5; i++) in[i] = tm_val_symbolic(&t, TM_FLOAT, rank[i], d[i], i);
    tm_val y = gelu_step(&t, in, &extra);
    tm_val root_vals[2] = {y, extra};
    tm_pass_roots roots = {root_vals, 2};
    CHECK(tm_ctx_ok(&t) && tm__run_passes(&t, &roots) == TM_OK, "gelu step: passes");
    uint8_t *live = NULL;
    int *uses = tm__pass_live_use_counts(&t, &roots, &live);
    int keeps_d = 0, keeps_h = 0, grads = 0, muls = 0;
    for (int32_t i = 0; i < t.n_nodes; i++) {
        const tm_rnode *n = &t.nodes[i];
        if (!live[i]) continue;
        grads += n->prim == TM_P_GELU_GRAD;
        muls += n->prim == TM_P_MUL;
        keeps_d += n->prim == TM_P_MATMUL_GELU && n->args.i[3] == 1;
        keeps_h += n->prim == TM_P_MATMUL_GELU && n->args.i[3] == 0;
    }
    int fused_grad = t.nodes[t.vals[y].producer].prim;
    if (tm_use_reference_kernels())
        CHECK(keeps_h == 1 && keeps_d == 0 && grads == 1 && fused_grad == TM_P_GELU_GRAD,
              "gelu step (reference kernels): %d products keeping h, %d keeping GELU', %d "
              "GELU_GRADs, the gradient from %s", keeps_h, keeps_d, grads,
              tm_prims[fused_grad].name);
    else
        CHECK(keeps_d == 1 && keeps_h == 0 && grads == 0 && muls == 0 &&
                  fused_grad == TM_P_MATMUL_MUL,
              "gelu step: %d products keeping GELU', %d keeping h, %d GELU_GRADs, %d MULs, the "
              "gradient from %s", keeps_d, keeps_h, grads, muls, tm_prims[fused_grad].name);
    free(uses);
    free(live);
    tm_ctx e;
    tm_ctx_init(&e, TM_MODE_EAGER, NULL);
    tm_val ein[5];
    for (int i = 0; i < 5; i++) {
        tm_tensor *x = tm_tensor_alloc(TM_FLOAT, rank[i], d[i], NULL);
        for (int64_t j = 0; j < tm_numel(rank[i], d[i]); j++)
            ((float *)x->data)[j] = 2.0f * next_f();
        ein[i] = tm_val_tensor(&e, x, 0);
    }
    tm_val want_g = TM_NONE;
    tm_val want = gelu_step(&e, ein, &want_g);
    tm_val got = replay(&t, &roots, &e, in, ein, 5, y);
    tm_val got_g = replay(&t, &roots, &e, in, ein, 5, extra);
    CHECK(tm_ctx_ok(&e) && got != TM_NONE && got_g != TM_NONE, "gelu step: eager: %s",
          e.err.message);
    if (tm_ctx_ok(&e) && got != TM_NONE && got_g != TM_NONE) {
        const tm_tensor *a = tm_vdata(&e, want), *b = tm_vdata(&e, got);
        const tm_tensor *ga = tm_vdata(&e, want_g), *gb = tm_vdata(&e, got_g);
        CHECK(a->nbytes == b->nbytes && !memcmp(a->data, b->data, a->nbytes),
              "gelu step: the cotangent of h differs from GELU_GRAD's");
        /* (The reference GELU computes in double; the fused one in float.) */
        double worst = 0.0;
        for (size_t q = 0; q < ga->nbytes / sizeof(float); q++) {
            double u = ((const float *)ga->data)[q], v = ((const float *)gb->data)[q];
            worst = fmax(worst, fabs(u - v) / (1e-6 + fabs(u)));
        }
        if (tm_use_reference_kernels())
            CHECK(worst < 1e-5, "gelu step: GELU %g from the GELU primitive's", worst);
        else
            CHECK(ga->nbytes == gb->nbytes && !memcmp(ga->data, gb->data, ga->nbytes),
                  "gelu step: GELU differs from the GELU primitive's");
    }
    tm_ctx_destroy(&e);
    tm_ctx_destroy(&t);
}

int main(void) {
    test_chain_gelu();
    test_gelu_with_derivative();
    test_gelu_step();
    for (size_t i = 0; i < sizeof patterns / sizeof patterns[0]; i++) run_pattern(&patterns[i]);
    printf("reference kernels: %s\n", tm_use_reference_kernels() ? "on" : "off");
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
