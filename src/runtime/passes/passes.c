/* The list of plan-time passes and their driver (see ../passes.h). Each pass lives in its
 * own file in this folder and is listed here once. */
#include <stdlib.h>
#include "../passes.h"

typedef tm_status (*tm_pass_fn)(tm_ctx *c, const tm_pass_roots *roots);

/* Passes, in the order they run. */
static const tm_pass_fn passes[] = {
    NULL
};

int tm__pass_uses(const tm_ctx *c, tm_val v) {
    int n = 0;
    for (int32_t i = 0; i < c->n_nodes; i++)
        for (int j = 0; j < c->nodes[i].nin; j++)
            if (c->nodes[i].in[j] == v) n++;
    return n;
}

tm_status tm__run_passes(tm_ctx *c, const tm_pass_roots *roots) {
    const char *off = getenv("TM_NO_PASSES");
    if (off && off[0] == '1') return TM_OK;
    for (size_t i = 0; i < sizeof passes / sizeof passes[0]; i++) {
        if (!passes[i]) continue;
        tm_status st = passes[i](c, roots);
        if (st != TM_OK) return st;
    }
    return TM_OK;
}
