/* Shared by the fused primitives (LINEAR, CONV_PACKED, ELEMENTWISE_CHAIN, ...) and the
 * plan-time passes that make them: elementwise programs ("chains") that an epilogue or a
 * fused elementwise kernel runs over rows of floats. Not a primitive family of its own:
 * the rows live in linalg.def and nn.def, the kernels in linear.c, chain.c, ... */
#ifndef TM_CORE_PRIMS_FUSED_H
#define TM_CORE_PRIMS_FUSED_H

#include <stdint.h>
#include "../ctx.h"

/* y[0..n) = prim(x[0..n)) for a float unary primitive (elementwise.c), exactly as its
 * kernel computes it; y must not alias x. */
void tm__unary_f32_rows(int prim, const tm_args *a, const float *x, float *y, int64_t n);

/* y[0..n) = GELU (erf form) of x[0..n) as the GELU kernel computes it, and dx[0..n) =
 * GELU'(x), the factor GELU_GRAD's f32 kernel multiplies the cotangent by, subnormals
 * flushed after (elementwise.c; a gradient plan's MATMUL_GELU keeps it for the backward,
 * and MATMUL_MUL multiplies by it as GELU_GRAD would). dx may equal x; y may not. */
void tm__gelu_erf_d_f32(const float *x, float *y, float *dx, int64_t n);

/* y[0..n) = softmax(x[0..n)) as the SOFTMAX kernel computes a contiguous row (nn.c);
 * y may equal x. */
void tm__softmax_rows_f32(const float *x, float *y, int64_t n);
/* The same for `rows` rows of n in place (row stride lds), several at once where the
 * vector kernel runs, each row first scaled and masked as pre says: scale_kind 1
 * multiplies by scale, 2 divides by it (0: neither), then masks[r] (one value a column,
 * or mask_scalar: its first for all; NULL: none) is added, each step rounded as plain
 * code rounds it. Each row's result is the same as those steps then
 * tm__softmax_rows_f32 give, whichever kernel runs (attention's scores, its reference
 * path included). */
typedef struct tm_softmax_pre {
    int scale_kind;
    float scale;
    int mask_scalar;
} tm_softmax_pre;
void tm__softmax_block_f32(float *s, int64_t rows, int64_t n, int64_t lds,
                           const tm_softmax_pre *pre, const float *const *masks);

/* A chain: t = x and u = x, then each step t = op(t), f32 throughout. A step is a unary
 * primitive (with its i[0]), or a binary one (ADD SUB MUL DIV MAX MIN) with a scalar or
 * with the saved value u, on either side; SAVE sets u = t (x * clip(x + 3, 0, 6) after
 * an affine step saves, then multiplies by u). Each step rounds as the unfused primitive
 * would, so a chain gives the unfused graph's values. */
#define TM_CHAIN_MAX_STEPS 10
enum {
    TM_CHAIN_UNARY = 0,        /* t = prim(t); value: the primitive's i[0] */
    TM_CHAIN_SCALAR_RIGHT = 1, /* t = prim(t, s) */
    TM_CHAIN_SCALAR_LEFT = 2,  /* t = prim(s, t) */
    TM_CHAIN_SAVED_RIGHT = 3,  /* t = prim(t, u) */
    TM_CHAIN_SAVED_LEFT = 4,   /* t = prim(u, t) */
    TM_CHAIN_SAVE = 5          /* u = t (prim unused) */
};

typedef struct tm_chain_step {
    int prim, operand;
    int64_t value;     /* TM_CHAIN_UNARY: the primitive's i[0] */
    float scalar;      /* TM_CHAIN_SCALAR_*: s */
} tm_chain_step;

typedef struct tm_chain {
    int n;
    tm_chain_step step[TM_CHAIN_MAX_STEPS];
} tm_chain;

/* A chain in args: i[at] = steps, then three per step (prim, operand, value; a scalar's
 * value is its float's bits). Room needed: 1 + 3 * steps. */
#define TM_CHAIN_ARGS(steps) (1 + 3 * (steps))
void tm__chain_encode(const tm_chain *ch, int64_t *args);
/* Fills *ch from args; 0 (and *ch empty) when the encoding is not a valid chain. */
int tm__chain_decode(const int64_t *args, int room, tm_chain *ch);
/* 1 when prim may be a chain step with that operand kind. */
int tm__chain_step_ok(int prim, int operand);

/* Where MATMUL_NBITS's packed form keeps its epilogue chain in args (quant.def). */
#define TM_NBITS_ARG_CHAIN 9
/* Where MATMUL_INTEGER's f32 form keeps its epilogue chain in args (quant.def). */
#define TM_QGEMM_ARG_CHAIN 5

/* y[0..n) = chain(x[0..n)); y may equal x. Fits tm_sgemm_epilogue's activation (arg: the
 * chain). */
void tm__chain_apply(const void *chain, const float *x, float *y, int64_t n);
/* y[0..n) = chain(x + bias) + res (res NULL: none), each add rounded as its own loop would
 * round it, in one pass in registers; returns 0, having done nothing, where that form
 * does not run (no AVX-512, reference kernels, a step it lacks, n < 16). y may equal x
 * or res. */
int tm__chain_apply_ends(const void *chain, float bias, const float *x, const float *res,
                         float *y, int64_t n);

#endif
