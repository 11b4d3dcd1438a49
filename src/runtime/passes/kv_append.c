/* The KV cache kept in place (plans made with tm_plan_options.kv_in_place): a decoder's
 * Concat(past, new) on the length axis of (B, H, P, D), where past is a graph input and
 * the result is read only by fused ATTENTION kernels (as k or v) and as a graph output
 * (present), becomes KV_APPEND on a cache laid out (P, B, H, D), position-major: the past
 * input is then taken in that layout from a buffer with room to grow, and present is that
 * same buffer one step longer, so that a decode step writes its new rows after the rest
 * and copies nothing, for a batch of sequences as for one (with batch 1 the layout is
 * (B, P, H, D) too). With kv_dtype float16 a float32 cache is kept in half precision:
 * past and present become float16, the append converts the new rows, and ATTENTION reads
 * them so. Not the attention fusion (attention.c), which must run first: ATTENTION reads
 * k and v in any of these layouts (2: (S, B, H, D)). */
#include <stdlib.h>
#include <string.h>
#include "../passes.h"

static int attention_reads_only(const tm_ctx *c, const uint8_t *live, tm_val v, int *n_readers) {
    *n_readers = 0;
    for (int32_t i = 0; i < c->n_nodes; i++) {
        if (!live[i]) continue;
        const tm_rnode *n = &c->nodes[i];
        for (int j = 0; j < n->nin; j++) {
            if (n->in[j] != v) continue;
            /* k (input 1) or v (input 2) of an ATTENTION in the (B, H, S, D) layout. */
            if (n->prim != TM_P_ATTENTION || (j != 1 && j != 2) || n->args.i[j] != 0) return 0;
            (*n_readers)++;
        }
    }
    return 1;
}

static tm_status mark_input(tm_ctx *c, int input, int half) {
    if (input >= c->n_kv_bshd) {
        int n = input + 16;
        uint8_t *k = realloc(c->kv_bshd, (size_t)n);
        if (!k) return tm_ctx_fail(c, TM_ERR_NO_MEMORY, "out of memory");
        memset(k + c->n_kv_bshd, 0, (size_t)(n - c->n_kv_bshd));
        c->kv_bshd = k;
        c->n_kv_bshd = n;
    }
    c->kv_bshd[input] = half ? 2 : 1;
    return TM_OK;
}

/* Whether value v is a float32 cache that KV_APPEND keeps, or (mark) marks it so. */
static int kept_f32(const tm_ctx *c, tm_val v, const uint8_t *half_ok) {
    int32_t p = c->vals[v].producer;
    return p >= 0 && c->nodes[p].prim == TM_P_KV_APPEND && half_ok[p];
}

/* kv_dtype float16: the kept float32 caches go to half precision, in the pairs ATTENTION
 * reads them in (it takes k and v both float16 or both float32): a cache whose reader's
 * other operand stays float32 stays so too. */
static tm_status to_half(tm_ctx *c, const uint8_t *live) {
    uint8_t *ok = calloc((size_t)c->n_nodes + 1, 1);
    if (!ok) return tm_ctx_fail(c, TM_ERR_NO_MEMORY, "out of memory");
    for (int32_t i = 0; i < c->n_nodes; i++) {
        const tm_rnode *n = &c->nodes[i];
        ok[i] = live[i] && n->prim == TM_P_KV_APPEND && c->vals[n->in[0]].dtype == TM_FLOAT &&
                c->vals[n->in[1]].dtype == TM_FLOAT;
    }
    for (int changed = 1; changed;) {
        changed = 0;
        for (int32_t r = 0; r < c->n_nodes; r++) {
            const tm_rnode *a = &c->nodes[r];
            if (!live[r] || a->prim != TM_P_ATTENTION) continue;
            int k = kept_f32(c, a->in[1], ok), v = kept_f32(c, a->in[2], ok);
            if (k == v) continue;
            ok[c->vals[k ? a->in[1] : a->in[2]].producer] = 0;
            changed = 1;
        }
    }
    tm_status st = TM_OK;
    for (int32_t i = 0; i < c->n_nodes && st == TM_OK; i++) {
        if (!ok[i]) continue;
        tm_rnode *n = &c->nodes[i];
        c->vals[n->in[0]].dtype = TM_FLOAT16;
        c->vals[n->out[0]].dtype = TM_FLOAT16;
        st = mark_input(c, c->vals[n->in[0]].input_index, 1);
    }
    /* The readers' scratch grows by a head's rows widened (prompts read them so). */
    for (int32_t r = 0; r < c->n_nodes && st == TM_OK; r++) {
        tm_rnode *a = &c->nodes[r];
        if (!live[r] || a->prim != TM_P_ATTENTION || c->vals[a->in[1]].dtype != TM_FLOAT16) continue;
        const tm_vinfo *vin[4];
        for (int j = 0; j < a->nin && j < 4; j++) vin[j] = &c->vals[a->in[j]];
        tm_vinfo out;
        size_t scratch = 0;
        st = tm_prims[TM_P_ATTENTION].shape(c, TM_P_ATTENTION, &a->args, vin, a->nin, &out, 1, &scratch);
        if (st == TM_OK) a->scratch = scratch;
    }
    free(ok);
    return st;
}

tm_status tm__pass_kv_append(tm_ctx *c, const tm_pass_roots *roots) {
    if (!c->kv_in_place) return TM_OK;
    uint8_t *live = NULL;
    int *uses = tm__pass_live_use_counts(c, roots, &live);
    if (!uses) return tm_ctx_fail(c, TM_ERR_NO_MEMORY, "out of memory");
    tm_status st = TM_OK;
    for (int32_t i = 0; i < c->n_nodes && st == TM_OK; i++) {
        tm_rnode *n = &c->nodes[i];
        if (!live[i] || n->prim != TM_P_CONCAT || n->nin != 2) continue;
        tm_vinfo *past = &c->vals[n->in[0]];
        const tm_vinfo *x = &c->vals[n->in[1]];
        tm_vinfo *y = &c->vals[n->out[0]];
        int64_t axis = n->args.i[0] < 0 ? n->args.i[0] + 4 : n->args.i[0];
        if (past->rank != 4 || x->rank != 4 || axis != 2 || past->data || past->producer >= 0 ||
            past->input_index < 0 || uses[n->in[0]] != 1 || tm__pass_is_root(roots, n->in[0]))
            continue;
        int readers = 0;
        if (!attention_reads_only(c, live, n->out[0], &readers) || readers == 0) continue;
        /* The input and the result take the (S, B, H, D) layout. */
        int64_t pb = past->dims[0], ph = past->dims[1];
        past->dims[0] = past->dims[2];
        past->dims[1] = pb;
        past->dims[2] = ph;
        int64_t yb = y->dims[0], yh = y->dims[1];
        y->dims[0] = y->dims[2];
        y->dims[1] = yb;
        y->dims[2] = yh;
        n->prim = TM_P_KV_APPEND;
        memset(&n->args, 0, sizeof n->args);
        for (int32_t r = 0; r < c->n_nodes; r++) {
            if (!live[r] || c->nodes[r].prim != TM_P_ATTENTION) continue;
            for (int j = 1; j <= 2; j++)
                if (c->nodes[r].in[j] == n->out[0]) c->nodes[r].args.i[j] = 2;
        }
        st = mark_input(c, past->input_index, 0);
    }
    if (st == TM_OK && c->kv_dtype == TM_FLOAT16) st = to_half(c, live);
    free(uses);
    free(live);
    return st;
}
