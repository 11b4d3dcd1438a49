/* Graph checks run once at load, after parsing (model.c) and before anything runs: node
 * order (a graph written out of order is sorted, a cycle is an error) and model-local
 * functions that call themselves or expand beyond a bound. Not type or shape inference, and not undefined names (the interpreter
 * reports those where it meets them, since subgraphs may read outer-scope values). */
#ifndef TM_ONNX_CHECK_H
#define TM_ONNX_CHECK_H

#include "model.h"

/* Nodes all model-local functions may expand to, counted with every call inlined. */
#define TM_CHECK_MAX_EXPANDED_NODES ((uint64_t)1 << 24)

/* Checks m and reorders the nodes of graphs (and function bodies) that are acyclic but
 * not in topological order; stable, so a graph already in order is left as it is.
 * `src` prefixes messages (the model path or "<buffer>"). TM_ERR_PARSE on a violation. */
struct tm_error;
int tm_onnx_check(tm_onnx_model *m, const char *src, struct tm_error *err);

#endif
