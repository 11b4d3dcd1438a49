/* Turns INDEX_ADD (an embedding table's gradient: a few rows added into a table of
 * zeros) into INDEX_ADD_KEPT, whose table stays in the session from run to run, so that
 * a run zeroes only the rows the last one wrote instead of the whole table (47 MB for
 * MiniLM's 30522 x 384 words, every step). The result is the same dense gradient. Only
 * where the table has more rows than the updates, and not while the tape records: the
 * kept primitive has no gradient rule. */
#include <string.h>
#include "../passes.h"

static int wants(const tm_rnode *n) { return n->prim == TM_P_INDEX_ADD && n->nin == 2; }

static tm_status keep_at(tm_pass_scan *s, int32_t i) {
    tm_ctx *c = s->c;
    const tm_rnode *n = &c->nodes[i];
    const tm_vinfo *y = &c->vals[n->out[0]], *idx = &c->vals[n->in[0]];
    if (idx->rank != 1 || y->rank < 1 || idx->dims[0] >= y->dims[0]) return TM_OK;
    tm_val in[2] = {n->in[0], n->in[1]};
    tm_args a = n->args;
    tm_status st = tm__pass_rewrite(c, i, TM_P_INDEX_ADD_KEPT, in, 2, &a);
    return st == TM_ERR_SHAPE ? TM_OK : st;
}

tm_status tm__pass_index_add(tm_ctx *c, const tm_pass_roots *roots) {
    if (c->tape) return TM_OK;
    return tm__pass_each(c, roots, wants, keep_at);
}
