/* Plan-time passes over a finished trace (tm_ctx's recorded nodes), run before the plan
 * is built: pattern fusion and the like. A pass rewrites c->nodes in place; the usual
 * way to fuse is to overwrite the pattern's LAST node with the fused primitive (same
 * position, same output value), so every consumer still reads that value and the
 * pattern's other nodes fall away in the plan's dead-code step when nothing else reads
 * them. Passes must keep the node list in dependency order. Not the plan builder. */
#ifndef TM_RUNTIME_PASSES_H
#define TM_RUNTIME_PASSES_H

#include "../core/ctx.h"
#include "../core/prims/fused.h"

/* Values the plan must keep (graph outputs or the values alive at a graph break): a pass
 * must not remove their producers, nor rewrite them away. */
typedef struct tm_pass_roots {
    const tm_val *vals;
    int n;
} tm_pass_roots;

/* Runs every pass in order (src/runtime/passes/). TM_NO_PASSES=1 disables them all, for
 * comparisons. Returns a status; a failing pass leaves the trace valid. */
tm_status tm__run_passes(tm_ctx *c, const tm_pass_roots *roots);

/* Number of recorded nodes reading value v (a helper for pattern matching). */
int tm__pass_uses(const tm_ctx *c, tm_val v);

/* ---- Pattern-matching helpers (passes.c) -------------------------------------------- */

/* Readers of every value: a calloc'ed array of c->n_vals counts (NULL when out of memory). */
int *tm__pass_use_counts(const tm_ctx *c);
/* The same, counting only the nodes the roots still need: earlier passes leave the nodes
 * they swallowed in place (the plan drops them), and those must not count as readers.
 * With live_out, also a calloc'ed flag per node: 1 when the roots need it. */
int *tm__pass_live_use_counts(const tm_ctx *c, const tm_pass_roots *roots, uint8_t **live_out);
/* A 1-D float32 tensor of `floats` for packed weights, not zero-filled (the packing
 * writes every element); large ones on huge pages where the OS gives them. shared: it
 * will go to the model's pack cache (tm__pack_cache_put), whose huge-page chunks then
 * hold it when it is large enough (pack_cache.h). NULL when out of memory. */
tm_tensor *tm__pass_packed_tensor(tm_ctx *c, int64_t floats, int shared);
/* 1 when v is one of the roots. */
int tm__pass_is_root(const tm_pass_roots *roots, tm_val v);
/* The recorded node producing v when it is primitive prim, else NULL. */
const tm_rnode *tm__pass_producer(const tm_ctx *c, tm_val v, int prim);
/* 1 when v is a known float constant of one element (any rank); its value in *out. */
int tm__pass_scalar(const tm_ctx *c, tm_val v, double *out);
/* 1 when v is a known scalar constant within a relative 1e-6 of want. */
int tm__pass_scalar_is(const tm_ctx *c, tm_val v, double want);
/* Overwrites node `node` with primitive prim on inputs in[0..nin): runs its shape rule,
 * checks that output 0 keeps the node's dtype and dims (else leaves the node alone and
 * returns TM_ERR_SHAPE), makes fresh values for any further outputs. */
tm_status tm__pass_rewrite(tm_ctx *c, int32_t node, int prim, const tm_val *in, int nin,
                           const tm_args *a);

/* ---- Epilogues of fused primitives (epilogue.c) ----------------------------------- */

/* What a pass scans with: the trace, live readers per value, the live nodes. */
typedef struct tm_pass_scan {
    tm_ctx *c;
    int *uses;               /* live readers per value (tm__pass_live_use_counts) */
    tm_val n_uses;           /* values counted; later ones are never swallowed */
    const tm_pass_roots *roots;
    uint8_t *live;           /* per node */
} tm_pass_scan;

/* The elementwise run after a fused primitive's output: chain steps, then an optional
 * residual ADD; `last` is the node whose output (`out`) the primitive takes over. */
typedef struct tm_pass_epilogue {
    tm_chain chain;
    tm_val residual;         /* TM_NONE */
    int32_t last;
    tm_val out;
} tm_pass_epilogue;

/* 1 when v is a known f32 tensor of n values laid along the last of `rank` dims (the
 * others 1): a bias along the output's columns. */
int tm__pass_is_row_vector(const tm_ctx *c, tm_val v, int rank, int64_t n);
/* 1 for a MATMUL of two operands as they are stored: not one of the products a gradient
 * makes that read an operand transposed (args i[0], i[1]), which no fusion pattern means. */
int tm__pass_is_plain_matmul(const tm_rnode *n);
/* A row-vector bias of n values as a 1-D value: v itself when it is 1-D, a 1-D copy of a
 * known one, the 1-D f32 value an unknown one reshapes (a model parameter made to
 * broadcast); TM_NONE when out of memory or none of these. */
tm_val tm__pass_bias_vector(tm_ctx *c, tm_val b, int64_t n);
/* The live node (from `from` on) reading v when it is v's only live reader and v is not a
 * root, else -1. */
int32_t tm__pass_only_reader(const tm_pass_scan *s, tm_val v, int32_t from);

/* The bias after product y (made by node mm, N = n columns): an ADD of y and a row vector
 * that is y's only live reader; a known one, or with `unknown` also one that reshapes a
 * 1-D f32 value the plan does not know (tm__pass_bias_vector takes both). Returns the
 * bias value (TM_NONE: none, *at = mm and *cur = y) and sets *at / *cur to the ADD and
 * its output. */
tm_val tm__pass_match_bias(const tm_pass_scan *s, int32_t mm, tm_val y, int64_t n, int unknown,
                           int32_t *at, tm_val *cur);

/* Matches the run after value `from` made by node `at` (nothing matched: last == at,
 * out == from). Steps keep from's dtype (f32) and dims; swallowed values are read only
 * inside the run and are not roots. */
void tm__pass_match_epilogue(const tm_pass_scan *s, int32_t at, tm_val from,
                             int allow_residual, tm_pass_epilogue *ep);

/* Overwrites ep->last with prim on in[0..nin) (in[0]: the product's input) as
 * tm__pass_rewrite does, then moves the scan's reader counts: the swallowed nodes' inputs
 * lose one, in[0] and the residual gain one. TM_ERR_SHAPE: the node was left alone. */
tm_status tm__pass_rewrite_epilogue(tm_pass_scan *s, const tm_pass_epilogue *ep, int prim,
                                    const tm_val *in, int nin, const tm_args *a);

/* Runs fuse(scan, i) on every live node i that `wants` (in order, over the nodes there
 * are when it starts), with the scan's reader counts; stops at the first failure. */
tm_status tm__pass_each(tm_ctx *c, const tm_pass_roots *roots, int (*wants)(const tm_rnode *),
                        tm_status (*fuse)(tm_pass_scan *, int32_t));

/* The passes (one file each in passes/). */
tm_status tm__pass_layernorm(tm_ctx *c, const tm_pass_roots *roots);
tm_status tm__pass_gelu(tm_ctx *c, const tm_pass_roots *roots);
tm_status tm__pass_matmul_integer(tm_ctx *c, const tm_pass_roots *roots);
tm_status tm__pass_attention(tm_ctx *c, const tm_pass_roots *roots);
tm_status tm__pass_linear(tm_ctx *c, const tm_pass_roots *roots);
tm_status tm__pass_matmul_bias(tm_ctx *c, const tm_pass_roots *roots);
tm_status tm__pass_matmul_gelu(tm_ctx *c, const tm_pass_roots *roots);
tm_status tm__pass_matmul_add(tm_ctx *c, const tm_pass_roots *roots);
tm_status tm__pass_matmul_colsum(tm_ctx *c, const tm_pass_roots *roots);
tm_status tm__pass_conv(tm_ctx *c, const tm_pass_roots *roots);
tm_status tm__pass_nbits(tm_ctx *c, const tm_pass_roots *roots);
tm_status tm__pass_index_add(tm_ctx *c, const tm_pass_roots *roots);
tm_status tm__pass_kv_append(tm_ctx *c, const tm_pass_roots *roots);

#endif
