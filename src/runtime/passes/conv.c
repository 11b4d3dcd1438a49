/* Fuses a float32 CONV with constant weights (or a CONV_TRANSPOSE whose kernel is its
 * stride, a GEMM and a pixel shuffle), and what follows it, into CONV_PACKED:
 *   y = CONV(x, W[, b]); per-channel ADD/SUB/MUL/DIV by constants (a BatchNormalization
 *   after the conv, lowered) folded into W and b; then the elementwise run (chain steps,
 *   a residual ADD) in the epilogue.
 * Weights are packed here, once, for tm_sgemm_apacked (depthwise kernels keep theirs:
 * they are computed directly). Folding rounds differently from the unfused graph (as ONNX
 * Runtime's conv + BN fusion does); the chain does not. Every swallowed value is read
 * once and is not a root. */
#include <stdlib.h>
#include <string.h>
#include "../passes.h"
#include "../../backends/cpu/gemm.h"

/* Argument layout of CONV_PACKED (linalg.def). */
enum { CP_WDIMS = 20, CP_KIND = 28, CP_PANEL = 29, CP_DEPTH = 30, CP_BIAS = 31,
       CP_RESIDUAL = 32, CP_CHAIN = 33 };
enum { CP_GEMM = 0, CP_DEPTHWISE = 1, CP_SHUFFLE = 2 };

/* A CONV_TRANSPOSE that is a GEMM and a scatter (CONV_PACKED's shuffle form): 2-D, one
 * group, kernel = stride, no pads, dilation or output padding. */
static int shuffle_ok(const tm_rnode *t, const tm_vinfo *w) {
    const tm_args *a = &t->args;
    if (a->i[0] != 2 || a->i[1] != 1 || w->rank != 4 || w->dims[0] > 1152) return 0;
    for (int d = 0; d < 2; d++)
        if (a->i[2 + d] != w->dims[2 + d] || a->i[4 + d] || a->i[6 + d] || a->i[8 + d] != 1 ||
            a->i[10 + d])
            return 0;
    return 1;
}

static int32_t only_reader(const tm_pass_scan *s, tm_val v, int32_t from) {
    if (v < 0 || v >= s->n_uses || s->uses[v] != 1 || tm__pass_is_root(s->roots, v)) return -1;
    for (int32_t i = from; i < s->c->n_nodes; i++)
        for (int j = 0; s->live[i] && j < s->c->nodes[i].nin; j++)
            if (s->c->nodes[i].in[j] == v) return i;
    return -1;
}

/* A known f32 tensor of m values, one per channel: dims (1, m, 1, ...) of rank `rank`. */
static const float *per_channel(tm_ctx *c, tm_val v, int rank, int64_t m) {
    const tm_vinfo *vi = &c->vals[v];
    if (!vi->data || vi->dtype != TM_FLOAT || vi->rank != rank || vi->dims[1] != m) return NULL;
    for (int d = 0; d < rank; d++)
        if (d != 1 && vi->dims[d] != 1) return NULL;
    const tm_tensor *t = tm__val_host(c, v);   /* read as floats: aligned */
    return t ? t->data : NULL;
}

static tm_val new_const(tm_ctx *c, int rank, const int64_t *dims, const float *from) {
    tm_tensor *t = tm_tensor_alloc(TM_FLOAT, rank, dims, c->allocator);
    if (!t) return TM_NONE;
    if (from) memcpy(t->data, from, (size_t)tm_numel(rank, dims) * sizeof(float));
    else memset(t->data, 0, (size_t)tm_numel(rank, dims) * sizeof(float));
    return tm_val_tensor(c, t, 0);
}

static tm_status fuse_at(tm_pass_scan *s, int32_t at) {
    tm_ctx *c = s->c;
    const tm_rnode *conv = &c->nodes[at];
    if (conv->nin < 2 || conv->nin > 3) return TM_OK;
    tm_val x = conv->in[0], w = conv->in[1], b = conv->nin > 2 ? conv->in[2] : TM_NONE;
    /* Copies, not pointers into c->vals: making constants below may move that table. */
    const tm_vinfo xv = c->vals[x], wv = c->vals[w], yv = c->vals[conv->out[0]];
    const tm_vinfo *xi = &xv, *wi = &wv, *yi = &yv;
    const tm_rnode conv_node = *conv;
    conv = &conv_node;
    if (xi->dtype != TM_FLOAT || xi->data || !wi->data || wi->dtype != TM_FLOAT) return TM_OK;
    if (b != TM_NONE && (!c->vals[b].data || c->vals[b].dtype != TM_FLOAT)) return TM_OK;
    int n = (int)conv->args.i[0];
    if (n < 1 || n > 6 || wi->rank != n + 2) return TM_OK;
    int transpose = conv->prim == TM_P_CONV_TRANSPOSE;
    if (transpose && !shuffle_ok(conv, wi)) return TM_OK;
    int64_t group = conv->args.i[1], m = transpose ? wi->dims[1] : wi->dims[0];
    int64_t ksize = 1;
    for (int d = 0; d < n; d++) ksize *= wi->dims[2 + d];
    int64_t c_g = transpose ? wi->dims[0] : wi->dims[1], m_g = group > 0 ? m / group : 0;
    int64_t k_g = c_g * ksize;
    if (group < 1 || m_g < 1 || m % group) return TM_OK;
    int kind = transpose ? CP_SHUFFLE
               : n <= 2 && group == xi->dims[1] && m == group && c_g == 1 ? CP_DEPTHWISE
                                                                          : CP_GEMM;
    /* Copies of W and b to fold per-channel affine steps into: as the GEMM's rows, `rows`
     * per output channel of `row_len` floats (a transpose's (m, kh, kw) rows over C). */
    int64_t rows = transpose ? ksize : 1, row_len = transpose ? c_g : k_g;
    tm_val w2 = new_const(c, wi->rank, wi->dims, transpose ? NULL : wi->data->data);
    if (transpose && w2 != TM_NONE) {
        /* memcpy reads the model's bytes at any alignment; the loop below reads floats:
         * misaligned ones through a copy of this weight, freed at once */
        float *bounce = NULL;
        if (wi->misaligned && (bounce = malloc(wi->data->nbytes ? wi->data->nbytes : 1)))
            memcpy(bounce, wi->data->data, wi->data->nbytes);
        if (wi->misaligned && !bounce) return tm_ctx_fail(c, TM_ERR_NO_MEMORY, "out of memory");
        const float *src = bounce ? bounce : wi->data->data;
        float *dst = c->vals[w2].data->data;
        for (int64_t ch = 0; ch < m; ch++)
            for (int64_t kk = 0; kk < ksize; kk++)
                for (int64_t ci = 0; ci < c_g; ci++)
                    dst[(ch * ksize + kk) * c_g + ci] = src[(ci * m + ch) * ksize + kk];
        free(bounce);
    }
    int64_t bdim = m;
    tm_val b2 = new_const(c, 1, &bdim, b != TM_NONE ? c->vals[b].data->data : NULL);
    if (w2 == TM_NONE || b2 == TM_NONE) return tm_ctx_ok(c) ? TM_ERR_NO_MEMORY : c->status;
    float *wf = c->vals[w2].data->data, *bf = c->vals[b2].data->data;
    int has_bias = b != TM_NONE;
    int32_t last = at;
    tm_val cur = conv->out[0];
    for (;;) {
        int32_t r = only_reader(s, cur, last + 1);
        if (r < 0) break;
        const tm_rnode *rn = &c->nodes[r];
        if (rn->nin != 2 || c->vals[rn->out[0]].rank != yi->rank ||
            memcmp(c->vals[rn->out[0]].dims, yi->dims, (size_t)yi->rank * sizeof yi->dims[0]))
            break;
        int side = rn->in[0] == cur ? 0 : 1;
        const float *k = per_channel(c, rn->in[1 - side], yi->rank, m);
        if (!k || rn->in[side] != cur) break;
        if (rn->prim == TM_P_ADD) {
            for (int64_t i = 0; i < m; i++) bf[i] += k[i];
        } else if (rn->prim == TM_P_SUB && side == 0) {
            for (int64_t i = 0; i < m; i++) bf[i] -= k[i];
        } else if (rn->prim == TM_P_MUL || (rn->prim == TM_P_DIV && side == 0)) {
            int div = rn->prim == TM_P_DIV;
            for (int64_t i = 0; i < m; i++) {
                float f = k[i];
                float *wr = wf + i * rows * row_len;
                for (int64_t j = 0; j < rows * row_len; j++) wr[j] = div ? wr[j] / f : wr[j] * f;
                bf[i] = div ? bf[i] / f : bf[i] * f;
            }
        } else {
            break;
        }
        has_bias = 1;
        last = r;
        cur = rn->out[0];
    }
    tm_pass_epilogue ep;
    tm__pass_match_epilogue(s, last, cur, 1, &ep);
    int panel = 1, depth = 1;
    tm_val packed = w2;
    if (kind == CP_SHUFFLE) {
        tm_sgemm_pack_a_layout(&panel, &depth);
        depth = (int)c_g;   /* one block: the kernel multiplies a row tile in one go */
        int64_t count = (int64_t)tm_sgemm_packed_floats(m * ksize, c_g, panel);
        tm_tensor *t = tm__pass_packed_tensor(c, count, 0);
        if (!t) return TM_ERR_NO_MEMORY;
        tm_sgemm_pack_a(0, m * ksize, c_g, wf, c_g, panel, depth, t->data);
        packed = tm_val_tensor(c, t, 0);
        if (packed == TM_NONE) return c->status;
    }
    if (kind == CP_GEMM) {
        tm_sgemm_pack_a_layout(&panel, &depth);
        /* One depth block up to this much: each packed image panel then meets the weights
         * once (blocks only split a deep kernel whose panel would not stay in L2). */
        if (k_g <= 288) depth = (int)k_g;
        size_t per_group = tm_sgemm_packed_floats(m_g, k_g, panel);
        int64_t count = (int64_t)(per_group * (size_t)group);
        tm_tensor *t = tm__pass_packed_tensor(c, count, 0);
        if (!t) return TM_ERR_NO_MEMORY;
        for (int64_t g = 0; g < group; g++)
            tm_sgemm_pack_a(0, m_g, k_g, wf + g * m_g * k_g, k_g, panel, depth,
                            (float *)t->data + (size_t)g * per_group);
        packed = tm_val_tensor(c, t, 0);
        if (packed == TM_NONE) return c->status;
    }
    tm_val in[4];
    int nin = 0;
    in[nin++] = x;
    in[nin++] = packed;
    if (has_bias) in[nin++] = b2;
    if (ep.residual != TM_NONE) in[nin++] = ep.residual;
    tm_args a = conv->args;
    for (int d = 0; d < n + 2; d++) a.i[CP_WDIMS + d] = wi->dims[d];
    a.i[CP_KIND] = kind;
    a.i[CP_PANEL] = panel;
    a.i[CP_DEPTH] = depth;
    a.i[CP_BIAS] = has_bias;
    a.i[CP_RESIDUAL] = ep.residual != TM_NONE;
    tm__chain_encode(&ep.chain, a.i + CP_CHAIN);
    tm_status st = tm__pass_rewrite_epilogue(s, &ep, TM_P_CONV_PACKED, in, nin, &a);
    return st == TM_ERR_SHAPE ? TM_OK : st;
}

static int is_conv(const tm_rnode *n) {
    return n->prim == TM_P_CONV || n->prim == TM_P_CONV_TRANSPOSE;
}

tm_status tm__pass_conv(tm_ctx *c, const tm_pass_roots *roots) {
    return tm__pass_each(c, roots, is_conv, fuse_at);
}
