/* Plan-time passes over a finished trace (tm_ctx's recorded nodes), run before the plan
 * is built: pattern fusion and the like. A pass rewrites c->nodes in place; the usual
 * way to fuse is to overwrite the pattern's LAST node with the fused primitive (same
 * position, same output value), so every consumer still reads that value and the
 * pattern's other nodes fall away in the plan's dead-code step when nothing else reads
 * them. Passes must keep the node list in dependency order. Not the plan builder. */
#ifndef TM_RUNTIME_PASSES_H
#define TM_RUNTIME_PASSES_H

#include "../core/ctx.h"

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

#endif
