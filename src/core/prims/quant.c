/* The quantization primitives (quant.def): MatMulNBits and GatherBlockQuantized, reading
 * packed weights as they sit in the file and dequantizing inside the kernel (4-bit fast
 * paths in backends/cpu/nbits.c), DEQUANTIZE_NBITS, DYNAMIC_QUANTIZE, and the exact 8-bit
 * product (packing and kernels in backends/cpu/qgemm.c). Shape rules, reference kernels
 * and dispatch; not the lowerings (onnx/ops). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "../ctx.h"
#include "fused.h"
#include "../../backends/cpu/gemm.h" /* tm_use_reference_kernels */
#include "../../backends/cpu/nbits.h"
#include "../../backends/cpu/qgemm.h"

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define QUANT_X86 1
#include <immintrin.h>
#endif

static int is_half_or_float(tm_dtype dt) {
    return dt == TM_FLOAT || dt == TM_FLOAT16 || dt == TM_BFLOAT16;
}

static float load_f(const void *base, tm_dtype dt, size_t i) {
    if (dt == TM_FLOAT) return ((const float *)base)[i];
    if (dt == TM_FLOAT16) return tm_f16_to_f32(((const uint16_t *)base)[i]);
    if (dt == TM_BFLOAT16) return tm_bf16_to_f32(((const uint16_t *)base)[i]);
    return (float)tm_load_f64(base, dt, i);
}

/* Value j of a little-endian bit stream of `bits`-bit values. */
static unsigned get_bits(const uint8_t *stream, size_t j, int bits) {
    size_t off = j * (size_t)bits;
    size_t byte = off >> 3;
    unsigned shift = (unsigned)(off & 7);
    unsigned v = stream[byte];
    if (shift + (unsigned)bits > 8) v |= (unsigned)stream[byte + 1] << 8;
    return (v >> shift) & ((1u << bits) - 1u);
}

/* ---- MATMUL_NBITS, DEQUANTIZE_NBITS ----------------------------------------------------- */

/* Checks the weight inputs w[0..] = b, scales, [zero points], [g_idx] against i[] and
 * returns the dtype of the scales (TM_UNDEFINED after a failure). */
static tm_dtype check_nbits_weights(tm_ctx *c, const char *name, const tm_args *a,
                                    const tm_vinfo *const *w, int nw) {
    int64_t K = a->i[0], N = a->i[1], bits = a->i[2], bs = a->i[3], zp_kind = a->i[4];
    int has_g = (int)a->i[5];
    int want = 2 + (zp_kind != 0) + has_g;
    if (nw != want) {
        tm_ctx_fail(c, TM_ERR_SHAPE, "%s: expected %d weight inputs, got %d", name, want, nw);
        return TM_UNDEFINED;
    }
    if (K <= 0 || N <= 0 || bits < 2 || bits > 8 || bs < 2 || (bs & (bs - 1))) {
        tm_ctx_fail(c, TM_ERR_SHAPE, "%s: invalid K=%lld N=%lld bits=%lld block_size=%lld",
                    name, (long long)K, (long long)N, (long long)bits, (long long)bs);
        return TM_UNDEFINED;
    }
    const tm_vinfo *B = w[0], *S = w[1];
    int64_t kb = (K + bs - 1) / bs, blob = bs * bits / 8;
    if (B->dtype != TM_UINT8 || tm_numel(B->rank, B->dims) != N * kb * blob) {
        tm_ctx_fail(c, TM_ERR_SHAPE, "%s: B must be uint8 (N=%lld, %lld blocks, %lld bytes)",
                    name, (long long)N, (long long)kb, (long long)blob);
        return TM_UNDEFINED;
    }
    if (!is_half_or_float(S->dtype) || tm_numel(S->rank, S->dims) != N * kb) {
        tm_ctx_fail(c, TM_ERR_SHAPE, "%s: scales must be float, float16 or bfloat16 with %lld "
                    "values", name, (long long)(N * kb));
        return TM_UNDEFINED;
    }
    int next = 2;
    if (zp_kind == 1) {
        const tm_vinfo *Z = w[next++];
        if (Z->dtype != TM_UINT8 || tm_numel(Z->rank, Z->dims) != N * ((kb * bits + 7) / 8)) {
            tm_ctx_fail(c, TM_ERR_SHAPE, "%s: packed zero_points must be uint8 (N, %lld)", name,
                        (long long)((kb * bits + 7) / 8));
            return TM_UNDEFINED;
        }
    } else if (zp_kind == 2) {
        const tm_vinfo *Z = w[next++];
        if (!is_half_or_float(Z->dtype) || tm_numel(Z->rank, Z->dims) != N * kb) {
            tm_ctx_fail(c, TM_ERR_SHAPE, "%s: zero_points must be uint8 or float with %lld "
                        "values", name, (long long)(N * kb));
            return TM_UNDEFINED;
        }
    }
    if (has_g) {
        const tm_vinfo *G = w[next];
        if (G->dtype != TM_INT32 || tm_numel(G->rank, G->dims) != K) {
            tm_ctx_fail(c, TM_ERR_SHAPE, "%s: g_idx must be int32 with K values", name);
            return TM_UNDEFINED;
        }
    }
    return S->dtype;
}

/* 1 when the 4-bit fast kernels (backends/cpu/nbits.h) take these weights: f32 scales
 * (and zero points), no g_idx. */
static int nbits_fast_weights(const tm_args *a, const tm_dtype *w_dtypes) {
    return a->i[2] == 4 && !a->i[5] && w_dtypes[1] == TM_FLOAT &&
           (a->i[4] != 2 || w_dtypes[2] == TM_FLOAT);
}

tm_status tm__shape_matmul_nbits(tm_ctx *c, int prim, const tm_args *a,
                                 const tm_vinfo *const *in, int nin, tm_vinfo *out, int nout,
                                 size_t *scratch) {
    (void)prim;
    (void)nout;
    int64_t K = a->i[0], N = a->i[1];
    if (nin < (a->i[6] ? 2 : 3))
        return tm_ctx_fail(c, TM_ERR_SHAPE, "matmul_nbits: expected at least %d inputs, got %d",
                           a->i[6] ? 2 : 3, nin);
    const tm_vinfo *A = in[0];
    int packed = a->i[6] != 0;
    if (packed) {
        /* Only the repacked weights: 4-bit, f32, no g_idx (nbits_pack checked the rest);
         * then the epilogue's bias and residual. */
        int with_bias = a->i[7] != 0, with_residual = a->i[8] != 0;
        tm_chain ch;
        if (!tm__chain_decode(a->i + TM_NBITS_ARG_CHAIN, TM_ARGS_MAX_I - TM_NBITS_ARG_CHAIN, &ch))
            return tm_ctx_fail(c, TM_ERR_INVALID_ARGUMENT, "matmul_nbits: bad epilogue chain");
        if (nin != 2 + with_bias + with_residual)
            return tm_ctx_fail(c, TM_ERR_SHAPE, "matmul_nbits: expected %d inputs, got %d",
                               2 + with_bias + with_residual, nin);
        if (with_bias && (in[2]->dtype != TM_FLOAT || in[2]->rank != 1 || in[2]->dims[0] != N))
            return tm_ctx_fail(c, TM_ERR_SHAPE, "matmul_nbits: the bias must be float32 (%lld)",
                               (long long)N);
        if (with_residual) {
            const tm_vinfo *r = in[nin - 1];
            int ok = r->dtype == TM_FLOAT && r->rank == A->rank;
            for (int d = 0; ok && d < A->rank; d++)
                ok = r->dims[d] == (d == A->rank - 1 ? N : A->dims[d]);
            if (!ok)
                return tm_ctx_fail(c, TM_ERR_SHAPE, "matmul_nbits: the residual must be float32 "
                                   "of the output's dims");
        }
        const tm_vinfo *P = nin >= 2 ? in[1] : NULL;
        if (!P || P->dtype != TM_UINT8 || P->rank != 1 || a->i[2] != 4 || a->i[5] ||
            A->dtype != TM_FLOAT || a->i[3] < 16 || (a->i[3] & (a->i[3] - 1)) ||
            (P->dims[0] != (int64_t)tm_nbits_packed_size(N, K, a->i[3], 0) &&
             P->dims[0] != (int64_t)tm_nbits_packed_size(N, K, a->i[3], 1)))
            return tm_ctx_fail(c, TM_ERR_SHAPE, "matmul_nbits: expected f32 A and the weights "
                               "repacked by nbits_pack");
    } else if (check_nbits_weights(c, "matmul_nbits", a, in + 1, nin - 1) == TM_UNDEFINED) {
        return c->status;
    }
    if (!is_half_or_float(A->dtype))
        return tm_ctx_fail(c, TM_ERR_DTYPE, "matmul_nbits: A must be float, float16 or "
                           "bfloat16, got %s", tm_dtype_name(A->dtype));
    if (A->rank < 1 || A->dims[A->rank - 1] != K)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "matmul_nbits: A's last dim must be K=%lld",
                           (long long)K);
    if (!packed && in[2]->dtype != A->dtype)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "matmul_nbits: scales must be %s like A",
                           tm_dtype_name(A->dtype));
    out[0].dtype = A->dtype;
    out[0].rank = A->rank;
    memcpy(out[0].dims, A->dims, sizeof out[0].dims);
    out[0].dims[A->rank - 1] = N;
    int64_t M = tm_numel(A->rank, A->dims) / K;
    if (packed) {
        *scratch = tm_nbits_scratch(M, K, a->i[3]);
        return TM_OK;
    }
    *scratch = (size_t)K * sizeof(float);
    if (A->dtype != TM_FLOAT) *scratch += (size_t)(M * K) * sizeof(float);
    return TM_OK;
}

/* The weight inputs of a MATMUL_NBITS or DEQUANTIZE_NBITS call, from index `first`. */
typedef struct nbits_weights {
    const tm_tensor *b, *scales, *zp, *g;
} nbits_weights;

static nbits_weights weights_of(const tm_kcall *k, int first) {
    nbits_weights w = {k->in[first], k->in[first + 1], NULL, NULL};
    int next = first + 2;
    if (k->a->i[4]) w.zp = k->in[next++];
    if (k->a->i[5]) w.g = k->in[next];
    return w;
}

/* Column n of the dequantized weight matrix, w[K] (the reference, every bit width). */
static tm_status dequant_column(const tm_kcall *k, const nbits_weights *wt, int64_t n, float *w) {
    const tm_args *a = k->a;
    int64_t K = a->i[0], bits = a->i[2], bs = a->i[3], zp_kind = a->i[4];
    int64_t kb = (K + bs - 1) / bs, blob = bs * bits / 8;
    const uint8_t *b = (const uint8_t *)wt->b->data + n * kb * blob;
    const tm_tensor *S = wt->scales, *Z = wt->zp;
    const int32_t *g = wt->g ? (const int32_t *)wt->g->data : NULL;
    int64_t zp_row = (kb * bits + 7) / 8;
    float default_zp = (float)(1 << (bits - 1));
    for (int64_t i = 0; i < K; i++) {
        int64_t blk = i / bs, group = blk;
        if (g) {
            group = g[i];
            if (group < 0 || group >= kb)
                return tm__fail(k->err, TM_ERR_RUNTIME, "g_idx[%lld] = %lld is outside [0, %lld)",
                                (long long)i, (long long)group, (long long)kb);
        }
        float scale = load_f(S->data, S->dtype, (size_t)(n * kb + group));
        float zp = default_zp;
        if (zp_kind == 1) zp = (float)get_bits((const uint8_t *)Z->data + n * zp_row, (size_t)group, (int)bits);
        if (zp_kind == 2) zp = load_f(Z->data, Z->dtype, (size_t)(n * kb + group));
        unsigned q = get_bits(b + blk * blob, (size_t)(i - blk * bs), (int)bits);
        w[i] = ((float)q - zp) * scale;
    }
    return TM_OK;
}

static tm_nbits_weights nbits_weights_of(const tm_kcall *k, const nbits_weights *wt) {
    tm_nbits_weights g;
    memset(&g, 0, sizeof g);
    g.n = k->a->i[1];
    g.k = k->a->i[0];
    g.block = k->a->i[3];
    g.b = wt->b->data;
    g.scales = wt->scales->data;
    if (k->a->i[4] == 1) g.zp_packed = wt->zp->data;
    if (k->a->i[4] == 2) g.zp_float = wt->zp->data;
    return g;
}

tm_status tm__kernel_matmul_nbits(const tm_kcall *k) {
    const tm_tensor *A = k->in[0];
    tm_tensor *Y = k->out[0];
    int64_t K = k->a->i[0], N = k->a->i[1];
    int64_t M = tm_numel(A->rank, A->dims) / K;
    if (k->a->i[6]) {
        /* Repacked weights: the fast kernels, or their portable C under TM_REFERENCE_KERNELS. */
        const tm_tensor *P = k->in[1];
        if (!tm_nbits_packed_check(P->data, (size_t)P->dims[0], N, K, k->a->i[3]))
            return tm__fail(k->err, TM_ERR_RUNTIME, "matmul_nbits: the repacked weights do not "
                            "match (%lld, %lld)", (long long)N, (long long)K);
        int with_bias = k->a->i[7] != 0, with_residual = k->a->i[8] != 0;
        tm_chain ch;
        if (!tm__chain_decode(k->a->i + TM_NBITS_ARG_CHAIN, TM_ARGS_MAX_I - TM_NBITS_ARG_CHAIN, &ch))
            return tm__fail(k->err, TM_ERR_INVALID_ARGUMENT, "matmul_nbits: bad epilogue chain");
        tm_sgemm_epilogue ep = {.bias = with_bias ? k->in[2]->data : NULL,
                                .activation = ch.n ? tm__chain_apply : NULL,
                                .activation_arg = &ch,
                                .residual = with_residual ? k->in[k->nin - 1]->data : NULL,
                                .ldr = N};
        (k->a->i[6] == 2 ? tm_nbits_matmul_int8 : tm_nbits_matmul)(
            P->data, M, A->data, Y->data, k->scratch, with_bias || with_residual || ch.n ? &ep : NULL,
            k->pool);
        return TM_OK;
    }
    nbits_weights wt = weights_of(k, 1);
    float *w = k->scratch;
    const float *af = A->data;
    if (A->dtype != TM_FLOAT) {
        float *conv = w + K;
        for (int64_t i = 0; i < M * K; i++) conv[i] = load_f(A->data, A->dtype, (size_t)i);
        af = conv;
    }
    for (int64_t n = 0; n < N; n++) {
        tm_status st = dequant_column(k, &wt, n, w);
        if (st != TM_OK) return st;
        for (int64_t m = 0; m < M; m++) {
            const float *row = af + m * K;
            float acc = 0.0f;
            for (int64_t i = 0; i < K; i++) acc += row[i] * w[i];
            if (Y->dtype == TM_FLOAT) ((float *)Y->data)[m * N + n] = acc;
            else tm_store_f64(Y->data, Y->dtype, (size_t)(m * N + n), acc);
        }
    }
    return TM_OK;
}

tm_status tm__shape_dequantize_nbits(tm_ctx *c, int prim, const tm_args *a,
                                     const tm_vinfo *const *in, int nin, tm_vinfo *out,
                                     int nout, size_t *scratch) {
    (void)prim;
    (void)nout;
    tm_dtype dt = check_nbits_weights(c, "dequantize_nbits", a, in, nin);
    if (dt == TM_UNDEFINED) return c->status;
    out[0].dtype = dt;
    out[0].rank = 2;
    out[0].dims[0] = a->i[0];
    out[0].dims[1] = a->i[1];
    *scratch = (size_t)a->i[0] * sizeof(float);
    return TM_OK;
}

tm_status tm__kernel_dequantize_nbits(const tm_kcall *k) {
    int64_t K = k->a->i[0], N = k->a->i[1];
    nbits_weights wt = weights_of(k, 0);
    tm_tensor *W = k->out[0];
    tm_dtype wdt[3] = {wt.b->dtype, wt.scales->dtype, wt.zp ? wt.zp->dtype : TM_UNDEFINED};
    if (W->dtype == TM_FLOAT && nbits_fast_weights(k->a, wdt) && tm_nbits_fast(k->a->i[3])) {
        tm_nbits_weights g = nbits_weights_of(k, &wt);
        tm_nbits_dequantize(&g, W->data, k->pool);
        return TM_OK;
    }
    float *col = k->scratch;
    for (int64_t n = 0; n < N; n++) {
        tm_status st = dequant_column(k, &wt, n, col);
        if (st != TM_OK) return st;
        for (int64_t i = 0; i < K; i++) {
            if (W->dtype == TM_FLOAT) ((float *)W->data)[i * N + n] = col[i];
            else tm_store_f64(W->data, W->dtype, (size_t)(i * N + n), col[i]);
        }
    }
    return TM_OK;
}

/* ---- GATHER_BLOCK_QUANTIZED -------------------------------------------------------- */

/* Values per stored element along the last axis: 8/bits for uint8, else 1. */
static int components(tm_dtype dt, int64_t bits) {
    return dt == TM_UINT8 ? (int)(8 / bits) : 1;
}

tm_status tm__shape_gather_block_quantized(tm_ctx *c, int prim, const tm_args *a,
                                           const tm_vinfo *const *in, int nin, tm_vinfo *out,
                                           int nout, size_t *scratch) {
    (void)prim;
    (void)nout;
    (void)scratch;
    const tm_vinfo *D = in[0], *I = in[1], *S = in[2];
    int64_t bits = a->i[3], bs = a->i[2];
    if (nin != 3 + (int)a->i[4])
        return tm_ctx_fail(c, TM_ERR_SHAPE, "gather_block_quantized: wrong input count %d", nin);
    if (D->dtype != TM_INT4 && D->dtype != TM_UINT4 && D->dtype != TM_UINT8)
        return tm_ctx_fail(c, TM_ERR_DTYPE, "gather_block_quantized: data must be int4, uint4 "
                           "or uint8, got %s", tm_dtype_name(D->dtype));
    if ((D->dtype == TM_UINT8 && bits != 4 && bits != 8) || (D->dtype != TM_UINT8 && bits != 4))
        return tm_ctx_fail(c, TM_ERR_SHAPE, "gather_block_quantized: bits=%lld does not fit %s",
                           (long long)bits, tm_dtype_name(D->dtype));
    if (bs < 2 || (bs & (bs - 1)))
        return tm_ctx_fail(c, TM_ERR_SHAPE, "gather_block_quantized: block_size %lld is not a "
                           "power of two", (long long)bs);
    if (I->dtype != TM_INT32 && I->dtype != TM_INT64)
        return tm_ctx_fail(c, TM_ERR_DTYPE, "gather_block_quantized: indices must be int32 or int64");
    if (!is_half_or_float(S->dtype))
        return tm_ctx_fail(c, TM_ERR_DTYPE, "gather_block_quantized: scales must be float");
    int r = D->rank, ga = (int)a->i[0], qa = (int)a->i[1];
    if (r < 1 || ga < 0 || ga >= r || qa < 0 || qa >= r)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "gather_block_quantized: axes out of range");
    int comp = components(D->dtype, bits);
    if (comp > 1 && qa != r - 1)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "gather_block_quantized: packed uint8 data must be "
                           "quantized along its last axis");
    int64_t logical[TM_MAX_RANK];
    memcpy(logical, D->dims, sizeof logical);
    logical[r - 1] *= comp;
    int64_t sd[TM_MAX_RANK];
    memcpy(sd, logical, sizeof sd);
    sd[qa] = (logical[qa] + bs - 1) / bs;
    if (S->rank != r || memcmp(S->dims, sd, (size_t)r * sizeof sd[0]))
        return tm_ctx_fail(c, TM_ERR_SHAPE, "gather_block_quantized: scales must have data's "
                           "dims with axis %d reduced to %lld blocks", qa, (long long)sd[qa]);
    if (a->i[4]) {
        const tm_vinfo *Z = in[3];
        int64_t zd[TM_MAX_RANK];
        memcpy(zd, sd, sizeof zd);
        zd[r - 1] = (sd[r - 1] + comp - 1) / comp;
        if (Z->dtype != D->dtype || Z->rank != r || memcmp(Z->dims, zd, (size_t)r * sizeof zd[0]))
            return tm_ctx_fail(c, TM_ERR_SHAPE, "gather_block_quantized: zero_points must be %s "
                               "shaped like scales (packed alike)", tm_dtype_name(D->dtype));
    }
    int orank = r - 1 + I->rank;
    if (orank > TM_MAX_RANK)
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "gather_block_quantized: output rank %d", orank);
    int k = 0;
    for (int d = 0; d < ga; d++) out[0].dims[k++] = logical[d];
    for (int d = 0; d < I->rank; d++) out[0].dims[k++] = I->dims[d];
    for (int d = ga + 1; d < r; d++) out[0].dims[k++] = logical[d];
    out[0].rank = orank;
    out[0].dtype = S->dtype;
    return TM_OK;
}

/* Element (row, col) of a tensor packed `comp` values per byte along its last axis
 * (rows of `cols` logical values, ceil(cols/comp) bytes each). */
static int64_t packed_at(const tm_tensor *t, int64_t flat, int64_t cols, int comp, int64_t bits) {
    if (t->dtype == TM_INT4) return ((const int8_t *)t->data)[flat];
    if (comp == 1) return ((const uint8_t *)t->data)[flat];
    int64_t row = flat / cols, col = flat % cols, row_bytes = (cols + comp - 1) / comp;
    uint8_t byte = ((const uint8_t *)t->data)[row * row_bytes + col / comp];
    return (byte >> ((col % comp) * bits)) & ((1 << bits) - 1);
}

/* 1 when the reference kernels were asked for (TM_REFERENCE_KERNELS=1, or
 * TM_KERNEL_ISA=scalar as the tests set it). */
static int reference_only(void) {
    const char *isa = getenv("TM_KERNEL_ISA");
    return tm_use_reference_kernels() || (isa && !strcmp(isa, "scalar"));
}

/* The embedding case: rows of 4-bit values two per byte, blocks along the row, f32 scales
 * and output. Each value is (q - zp) * scale rounded once, as the reference's double
 * product rounded to float is (the exact product fits a double). */
static tm_status gather_rows_4bit(const tm_kcall *k, int64_t rows, int64_t cols) {
    const tm_tensor *D = k->in[0], *I = k->in[1], *S = k->in[2];
    const tm_tensor *Z = k->a->i[4] ? k->in[3] : NULL;
    int64_t bs = k->a->i[2], nblk = (cols + bs - 1) / bs, zrow = (nblk + 1) / 2;
    int64_t n_idx = tm_numel(I->rank, I->dims);
    const uint8_t *data = D->data, *zps = Z ? Z->data : NULL;
    const float *scales = S->data;
    float *y = k->out[0]->data;
    for (int64_t i = 0; i < n_idx; i++) {
        int64_t idx = I->dtype == TM_INT64 ? ((const int64_t *)I->data)[i]
                                           : ((const int32_t *)I->data)[i];
        if (idx < 0) idx += rows;
        if (idx < 0 || idx >= rows)
            return tm__fail(k->err, TM_ERR_RUNTIME, "index %lld is out of range for axis 0 of "
                            "size %lld", (long long)(idx < 0 ? idx - rows : idx), (long long)rows);
        const uint8_t *row = data + idx * ((cols + 1) / 2);
        float *out = y + i * cols;
        for (int64_t b = 0; b < nblk; b++) {
            float scale = scales[idx * nblk + b], zp = 8.0f;
            if (zps) zp = (float)((zps[idx * zrow + b / 2] >> ((b & 1) * 4)) & 15);
            int64_t end = (b + 1) * bs < cols ? (b + 1) * bs : cols;
            for (int64_t c = b * bs; c < end; c++)
                out[c] = ((float)((row[c / 2] >> ((c & 1) * 4)) & 15) - zp) * scale;
        }
    }
    return TM_OK;
}

tm_status tm__kernel_gather_block_quantized(const tm_kcall *k) {
    const tm_tensor *D = k->in[0], *I = k->in[1], *S = k->in[2];
    const tm_tensor *Z = k->a->i[4] ? k->in[3] : NULL;
    tm_tensor *Y = k->out[0];
    int64_t bits = k->a->i[3], bs = k->a->i[2];
    int r = D->rank, ga = (int)k->a->i[0], qa = (int)k->a->i[1];
    int comp = components(D->dtype, bits);
    int64_t logical[TM_MAX_RANK];
    memcpy(logical, D->dims, sizeof logical);
    logical[r - 1] *= comp;
    if (r == 2 && ga == 0 && qa == 1 && comp == 2 && S->dtype == TM_FLOAT &&
        Y->dtype == TM_FLOAT && !reference_only())
        return gather_rows_4bit(k, logical[0], logical[1]);
    int64_t outer = 1, inner = 1, g = logical[ga];
    for (int d = 0; d < ga; d++) outer *= logical[d];
    for (int d = ga + 1; d < r; d++) inner *= logical[d];
    int64_t stride_q = 1;
    for (int d = qa + 1; d < r; d++) stride_q *= logical[d];
    int64_t dim_q = logical[qa], nblk = (dim_q + bs - 1) / bs;
    int64_t scale_last = qa == r - 1 ? nblk : logical[r - 1];
    int64_t n_idx = tm_numel(I->rank, I->dims);
    double default_zp = D->dtype == TM_UINT8 ? (double)(1 << (bits - 1)) : 0.0;
    for (int64_t i = 0; i < n_idx; i++) {
        int64_t idx = I->dtype == TM_INT64 ? ((const int64_t *)I->data)[i]
                                           : ((const int32_t *)I->data)[i];
        if (idx < 0) idx += g;
        if (idx < 0 || idx >= g)
            return tm__fail(k->err, TM_ERR_RUNTIME, "index %lld is out of range for axis %d of "
                            "size %lld", (long long)(idx < 0 ? idx - g : idx), ga, (long long)g);
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < n_idx; i++) {
            int64_t idx = I->dtype == TM_INT64 ? ((const int64_t *)I->data)[i]
                                               : ((const int32_t *)I->data)[i];
            if (idx < 0) idx += g;
            for (int64_t p = 0; p < inner; p++) {
                int64_t flat = (o * g + idx) * inner + p;
                int64_t q_coord = (flat / stride_q) % dim_q;
                int64_t sflat = (flat / (stride_q * dim_q)) * (nblk * stride_q) +
                                (q_coord / bs) * stride_q + flat % stride_q;
                double q = (double)packed_at(D, flat, logical[r - 1], comp, bits);
                double zp = Z ? (double)packed_at(Z, sflat, scale_last, comp, bits) : default_zp;
                double v = (q - zp) * load_f(S->data, S->dtype, (size_t)sflat);
                size_t at = (size_t)((o * n_idx + i) * inner + p);
                if (Y->dtype == TM_FLOAT) ((float *)Y->data)[at] = (float)v;
                else tm_store_f64(Y->data, Y->dtype, at, v);
            }
        }
    return TM_OK;
}

/* ---- DYNAMIC_QUANTIZE -------------------------------------------------------------- */

tm_status tm__shape_dynamic_quantize(tm_ctx *c, int prim, const tm_args *a,
                                     const tm_vinfo *const *in, int nin, tm_vinfo *out,
                                     int nout, size_t *scratch) {
    (void)prim;
    (void)a;
    (void)nin;
    (void)nout;
    (void)scratch;
    if (in[0]->dtype != TM_FLOAT)
        return tm_ctx_fail(c, TM_ERR_DTYPE, "dynamic_quantize: x must be float, got %s",
                           tm_dtype_name(in[0]->dtype));
    out[0] = *in[0];
    out[0].dtype = TM_UINT8;
    out[1].dtype = TM_FLOAT;
    out[1].rank = 0;
    out[2].dtype = TM_UINT8;
    out[2].rank = 0;
    return TM_OK;
}

/* Scale and zero point from the range [lo, hi] (lo <= 0 <= hi). */
static void dynamic_params(float lo, float hi, float *scale, float *zp) {
    float range = hi - lo;
    *scale = range == 0.0f ? 1.0f : range / 255.0f;
    float z = nearbyintf(0.0f - lo / *scale);
    *zp = fminf(fmaxf(z, 0.0f), 255.0f);
}

static void dynamic_range_ref(const float *x, size_t n, float *lo, float *hi) {
    float l = 0.0f, h = 0.0f;
    for (size_t i = 0; i < n; i++) {
        if (x[i] < l) l = x[i];   /* NaN compares false: skipped */
        if (x[i] > h) h = x[i];
    }
    *lo = l;
    *hi = h;
}

static void dynamic_store_ref(const float *x, size_t n, float scale, float zp, uint8_t *y) {
    for (size_t i = 0; i < n; i++) {
        float v = nearbyintf(x[i] / scale) + zp;
        v = fminf(fmaxf(v, 0.0f), 255.0f);   /* fmaxf turns NaN into 0 */
        y[i] = (uint8_t)v;
    }
}

#ifdef QUANT_X86
/* Same results as the reference: max/min take the accumulator when x is NaN, the
 * division is IEEE's, roundscale rounds half to even, and max(v, 0) turns NaN into 0. */
__attribute__((target("avx512f")))
static void dynamic_range_avx512(const float *x, size_t n, float *lo, float *hi) {
    __m512 l = _mm512_setzero_ps(), h = l;
    size_t i = 0;
    /* Four chains of each (a minimum is exact in any order), then one. */
    __m512 l1 = l, l2 = l, l3 = l, h1 = l, h2 = l, h3 = l;
    for (; i + 64 <= n; i += 64) {
        __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
        __m512 v2 = _mm512_loadu_ps(x + i + 32), v3 = _mm512_loadu_ps(x + i + 48);
        l = _mm512_min_ps(v0, l), h = _mm512_max_ps(v0, h);
        l1 = _mm512_min_ps(v1, l1), h1 = _mm512_max_ps(v1, h1);
        l2 = _mm512_min_ps(v2, l2), h2 = _mm512_max_ps(v2, h2);
        l3 = _mm512_min_ps(v3, l3), h3 = _mm512_max_ps(v3, h3);
    }
    l = _mm512_min_ps(_mm512_min_ps(l, l1), _mm512_min_ps(l2, l3));
    h = _mm512_max_ps(_mm512_max_ps(h, h1), _mm512_max_ps(h2, h3));
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        l = _mm512_min_ps(v, l);
        h = _mm512_max_ps(v, h);
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_maskz_loadu_ps(m, x + i);   /* zeros outside: within [lo, hi] */
        l = _mm512_min_ps(v, l);
        h = _mm512_max_ps(v, h);
    }
    *lo = _mm512_reduce_min_ps(l);
    *hi = _mm512_reduce_max_ps(h);
}

/* x / s rounded as IEEE division rounds it, without dividing (a vector division takes
 * several times the FMAs below, and bounded this kernel): r = RN(1 / s), q = RN(x r)
 * within two ulps of x / s, then two steps q += (x - q s) r with the remainder exact by
 * FMA. After the first q is within one ulp, and Markstein's theorem (r the correctly
 * rounded reciprocal, q within an ulp, the remainder exact) makes the second the
 * correctly rounded quotient. Callers keep the quotient normal or zero and finite (|x / s|
 * <= 255 here, s normal with a normal reciprocal), where the theorem holds. */
__attribute__((target("avx512f"))) static inline __m512 divide_rn(__m512 x, __m512 s, __m512 r) {
    __m512 q = _mm512_mul_ps(x, r);
    q = _mm512_fmadd_ps(_mm512_fnmadd_ps(q, s, x), r, q);
    return _mm512_fmadd_ps(_mm512_fnmadd_ps(q, s, x), r, q);
}

__attribute__((target("avx512f,avx512bw,avx512vl")))
static void dynamic_store_avx512(const float *x, size_t n, float scale, float zp, uint8_t *y) {
    __m512 vs = _mm512_set1_ps(scale), vz = _mm512_set1_ps(zp);
    __m512 zero = _mm512_setzero_ps(), top = _mm512_set1_ps(255.0f);
    float recip = 1.0f / scale;
    /* Quotients of values within the range are at most 255 in size; the reciprocal's
     * steps hold where scale and 1 / scale are normal numbers. */
    int by_recip = isnormal(scale) && isnormal(recip);
    __m512 vr = _mm512_set1_ps(recip);
    for (size_t i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
        __m512 v = by_recip ? divide_rn(xv, vs, vr) : _mm512_div_ps(xv, vs);
        v = _mm512_add_ps(_mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), vz);
        v = _mm512_min_ps(_mm512_max_ps(v, zero), top);
        _mm_mask_storeu_epi8(y + i, m, _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v)));
    }
}
#endif

/* From this many elements the two passes are split over the pool: slices of whole
 * 64-element pieces, each slice's range, then the stores (the same bytes for any
 * thread count: a minimum and a maximum are exact). */
#define DYNAMIC_PARALLEL_MIN ((size_t)1 << 16)
#define DYNAMIC_SLICES 16

typedef struct dynamic_job {
    const float *x;
    size_t n;
    int fast;
    float lo[DYNAMIC_SLICES], hi[DYNAMIC_SLICES];
    float scale, zp;
    uint8_t *y;
    int store;   /* 0: the ranges, 1: the stores */
} dynamic_job;

static void dynamic_slice(void *arg, int ith, int nth) {
    dynamic_job *j = arg;
    size_t pieces = (j->n + 63) / 64;
    size_t i0 = pieces * (size_t)ith / (size_t)nth * 64, i1 = pieces * (size_t)(ith + 1) / (size_t)nth * 64;
    if (i1 > j->n) i1 = j->n;
    if (i0 >= i1) {
        j->lo[ith] = j->hi[ith] = 0.0f;
        return;
    }
    if (!j->store) {
#ifdef QUANT_X86
        if (j->fast) {
            dynamic_range_avx512(j->x + i0, i1 - i0, &j->lo[ith], &j->hi[ith]);
            return;
        }
#endif
        dynamic_range_ref(j->x + i0, i1 - i0, &j->lo[ith], &j->hi[ith]);
        return;
    }
#ifdef QUANT_X86
    if (j->fast) {
        dynamic_store_avx512(j->x + i0, i1 - i0, j->scale, j->zp, j->y + i0);
        return;
    }
#endif
    dynamic_store_ref(j->x + i0, i1 - i0, j->scale, j->zp, j->y + i0);
}

tm_status tm__kernel_dynamic_quantize(const tm_kcall *k) {
    const tm_tensor *X = k->in[0];
    dynamic_job j;
    memset(&j, 0, sizeof j);
    j.x = X->data;
    j.n = (size_t)tm_numel(X->rank, X->dims);
    j.y = k->out[0]->data;
#ifdef QUANT_X86
    const char *isa = getenv("TM_KERNEL_ISA");
    __builtin_cpu_init();
    j.fast = !tm_use_reference_kernels() && (!isa || !strcmp(isa, "avx512")) &&
             __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
#endif
    int nth = j.n < DYNAMIC_PARALLEL_MIN ? 1 : tm_pool_threads(k->pool);
    if (nth > DYNAMIC_SLICES) nth = DYNAMIC_SLICES;
    if (nth <= 1) dynamic_slice(&j, 0, 1);
    else tm_pool_run(k->pool, nth, dynamic_slice, &j);
    /* Each slice's range includes 0, as the whole one does. */
    float lo = 0.0f, hi = 0.0f;
    for (int i = 0; i < nth; i++) {
        lo = j.lo[i] < lo ? j.lo[i] : lo;
        hi = j.hi[i] > hi ? j.hi[i] : hi;
    }
    dynamic_params(lo, hi, &j.scale, &j.zp);
    j.store = 1;
    if (nth <= 1) dynamic_slice(&j, 0, 1);
    else tm_pool_run(k->pool, nth, dynamic_slice, &j);
    *(float *)k->out[1]->data = j.scale;
    *(uint8_t *)k->out[2]->data = (uint8_t)j.zp;
    return TM_OK;
}

/* ---- QGEMM_PACK_B, MATMUL_INTEGER ------------------------------------------------- */

static int is_q8(tm_dtype dt) { return dt == TM_INT8 || dt == TM_UINT8; }

tm_status tm__shape_qgemm_pack_b(tm_ctx *c, int prim, const tm_args *a,
                                 const tm_vinfo *const *in, int nin, tm_vinfo *out, int nout,
                                 size_t *scratch) {
    (void)prim;
    (void)nin;
    (void)nout;
    (void)scratch;
    const tm_vinfo *B = in[0], *Z = in[1];
    int64_t K = a->i[0], N = a->i[1];
    int shape_ok = a->i[2] ? B->rank >= 2 && B->dims[0] == N && tm_numel(B->rank, B->dims) == N * K
                           : B->rank == 2 && B->dims[0] == K && B->dims[1] == N;
    if (!is_q8(B->dtype) || !shape_ok || K <= 0 || N <= 0)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "qgemm_pack_b: b must be int8 or uint8 (%lld, %lld)%s",
                           (long long)K, (long long)N, a->i[2] ? " transposed" : "");
    int64_t nz = tm_numel(Z->rank, Z->dims);
    if (Z->dtype != B->dtype || (nz != 1 && nz != N))
        return tm_ctx_fail(c, TM_ERR_SHAPE, "qgemm_pack_b: the zero point must be %s with 1 or "
                           "%lld values", tm_dtype_name(B->dtype), (long long)N);
    out[0].dtype = TM_UINT8;
    out[0].rank = 1;
    out[0].dims[0] = (int64_t)tm_qgemm_packed_size(K, N);
    return TM_OK;
}

tm_status tm__kernel_qgemm_pack_b(const tm_kcall *k) {
    const tm_tensor *B = k->in[0], *Z = k->in[1];
    int64_t K = k->a->i[0], N = k->a->i[1];
    tm_qgemm_pack_b(B->data, B->dtype == TM_INT8, (int)k->a->i[2], k->a->i[2] ? K : N, K, N,
                    Z->data, tm_numel(Z->rank, Z->dims), k->out[0]->data);
    return TM_OK;
}

tm_status tm__shape_matmul_integer(tm_ctx *c, int prim, const tm_args *a,
                                   const tm_vinfo *const *in, int nin, tm_vinfo *out, int nout,
                                   size_t *scratch) {
    (void)prim;
    (void)nout;
    int64_t K = a->i[0], N = a->i[1];
    int has_scale = a->i[2] != 0, has_bias = a->i[3] != 0, has_residual = a->i[4] != 0;
    if (nin != 3 + has_scale + has_bias + has_residual || ((has_bias || has_residual) && !has_scale))
        return tm_ctx_fail(c, TM_ERR_SHAPE, "matmul_integer: wrong input count %d", nin);
    tm_chain ch;
    if (!tm__chain_decode(a->i + TM_QGEMM_ARG_CHAIN, TM_ARGS_MAX_I - TM_QGEMM_ARG_CHAIN, &ch) ||
        (ch.n && !has_scale))
        return tm_ctx_fail(c, TM_ERR_INVALID_ARGUMENT, "matmul_integer: bad epilogue chain "
                           "(one needs the f32 output)");
    const tm_vinfo *A = in[0], *B = in[1], *Z = in[2];
    if (!is_q8(A->dtype) || A->rank < 1 || A->dims[A->rank - 1] != K)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "matmul_integer: a must be int8 or uint8 with last "
                           "dim K=%lld", (long long)K);
    if (B->dtype != TM_UINT8 || B->rank != 1 ||
        B->dims[0] != (int64_t)tm_qgemm_packed_size(K, N))
        return tm_ctx_fail(c, TM_ERR_SHAPE, "matmul_integer: b must be packed by qgemm_pack_b "
                           "for (%lld, %lld)", (long long)K, (long long)N);
    /* One zero point, one per row of a's matrices (repeated over its batch), or one per
     * row of all of them. */
    int64_t rows = A->rank >= 2 ? A->dims[A->rank - 2] : 1, nz = tm_numel(Z->rank, Z->dims);
    int64_t all_rows = tm_numel(A->rank, A->dims) / K;
    if (Z->dtype != A->dtype || (nz != 1 && nz != rows && nz != all_rows))
        return tm_ctx_fail(c, TM_ERR_SHAPE, "matmul_integer: a's zero point must be %s with 1, "
                           "%lld or %lld values", tm_dtype_name(A->dtype), (long long)rows,
                           (long long)all_rows);
    for (int i = 3; i < 3 + has_scale + has_bias; i++) {
        int64_t ns = tm_numel(in[i]->rank, in[i]->dims);
        if (in[i]->dtype != TM_FLOAT || (ns != 1 && ns != N))
            return tm_ctx_fail(c, TM_ERR_SHAPE, "matmul_integer: %s must be float with 1 or "
                               "%lld values", i == 3 ? "scale" : "bias", (long long)N);
    }
    out[0] = *A;
    out[0].dims[A->rank - 1] = N;
    out[0].dtype = has_scale ? TM_FLOAT : TM_INT32;
    const tm_vinfo *r = in[nin - 1];
    if (has_residual && (r->dtype != TM_FLOAT || r->rank != out[0].rank ||
                         memcmp(r->dims, out[0].dims, (size_t)r->rank * sizeof r->dims[0])))
        return tm_ctx_fail(c, TM_ERR_SHAPE, "matmul_integer: the residual must be f32 with the "
                           "output's dims");
    *scratch = tm_qgemm_scratch(tm_numel(A->rank, A->dims) / K, K, A->dtype == TM_INT8);
    return TM_OK;
}

tm_status tm__kernel_matmul_integer(const tm_kcall *k) {
    const tm_tensor *A = k->in[0], *B = k->in[1], *Z = k->in[2];
    int64_t K = k->a->i[0], N = k->a->i[1];
    if (!tm_qgemm_packed_check(B->data, (size_t)B->dims[0], K, N))
        return tm__fail(k->err, TM_ERR_RUNTIME, "matmul_integer: b is not a packed (%lld, %lld) "
                        "matrix", (long long)K, (long long)N);
    tm_qgemm_args g;
    memset(&g, 0, sizeof g);
    g.m = tm_numel(A->rank, A->dims) / K;
    g.n = N;
    g.k = K;
    g.a = A->data;
    g.a_signed = A->dtype == TM_INT8;
    g.lda = K;
    g.za = Z->data;
    g.za_count = tm_numel(Z->rank, Z->dims);
    g.b_packed = B->data;
    g.ldc = N;
    if (k->a->i[2]) {
        g.c_float = k->out[0]->data;
        g.scale = k->in[3]->data;
        g.scale_count = tm_numel(k->in[3]->rank, k->in[3]->dims);
        if (k->a->i[3]) {
            g.bias = k->in[4]->data;
            g.bias_count = tm_numel(k->in[4]->rank, k->in[4]->dims);
        }
    } else {
        g.c_int = k->out[0]->data;
    }
    tm_chain ch;
    if (!tm__chain_decode(k->a->i + TM_QGEMM_ARG_CHAIN, TM_ARGS_MAX_I - TM_QGEMM_ARG_CHAIN, &ch))
        return tm__fail(k->err, TM_ERR_INVALID_ARGUMENT, "matmul_integer: bad epilogue chain");
    tm_sgemm_epilogue ep = {.activation = ch.n ? tm__chain_apply : NULL,
                            .activation_arg = &ch,
                            .residual = k->a->i[4] ? k->in[k->nin - 1]->data : NULL,
                            .ldr = N};
    if (ch.n || ep.residual) g.epilogue = &ep;
    tm_qgemm(&g, k->scratch, k->pool);
    return TM_OK;
}

/* ---- NBITS_PACK ------------------------------------------------------------------------ */

tm_status tm__shape_nbits_pack(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                               int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)prim;
    (void)nout;
    (void)scratch;
    if (check_nbits_weights(c, "nbits_pack", a, in, nin) == TM_UNDEFINED) return c->status;
    tm_dtype wdt[3] = {in[0]->dtype, in[1]->dtype, nin > 2 ? in[2]->dtype : TM_UNDEFINED};
    if (!nbits_fast_weights(a, wdt) || a->i[3] < 16)
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "nbits_pack: only 4-bit weights in blocks of "
                           "16 or more with f32 scales and no g_idx are repacked");
    out[0].dtype = TM_UINT8;
    out[0].rank = 1;
    out[0].dims[0] = (int64_t)tm_nbits_packed_size(a->i[1], a->i[0], a->i[3], a->i[4] == 2);
    return TM_OK;
}

tm_status tm__kernel_nbits_pack(const tm_kcall *k) {
    nbits_weights wt = weights_of(k, 0);
    tm_nbits_weights g = nbits_weights_of(k, &wt);
    tm_nbits_pack(&g, k->out[0]->data);
    return TM_OK;
}

/* ---- CONV_INTEGER ------------------------------------------------------------------------ */

/* The convolution's geometry from i[] (see quant.def). */
typedef struct conv_geom {
    int n;
    int64_t batch, channels, m, kdim, positions;
    int64_t in[3], out[3], kernel[3], stride[3], pad[3], dilation[3];
} conv_geom;

static int conv_geom_of(const tm_args *a, const int64_t *x_dims, conv_geom *g) {
    int n = (int)a->i[0];
    if (n < 1 || n > 3 || a->i[1] != 1) return 0;
    g->n = n;
    g->batch = x_dims[0];
    g->channels = x_dims[1];
    g->m = a->i[2 + 5 * n];
    g->kdim = g->channels;
    g->positions = 1;
    for (int d = 0; d < n; d++) {
        g->in[d] = x_dims[2 + d];
        g->stride[d] = a->i[2 + d];
        g->pad[d] = a->i[2 + n + d];
        g->dilation[d] = a->i[2 + 3 * n + d];
        g->kernel[d] = a->i[2 + 4 * n + d];
        int64_t span = (g->kernel[d] - 1) * g->dilation[d] + 1;
        int64_t padded = g->in[d] + g->pad[d] + a->i[2 + 2 * n + d];
        if (g->stride[d] < 1 || g->dilation[d] < 1 || g->kernel[d] < 1 || g->pad[d] < 0 ||
            padded < span)
            return 0;
        g->out[d] = (padded - span) / g->stride[d] + 1;
        g->kdim *= g->kernel[d];
        g->positions *= g->out[d];
    }
    return g->m > 0;
}

tm_status tm__shape_conv_integer(tm_ctx *c, int prim, const tm_args *a,
                                 const tm_vinfo *const *in, int nin, tm_vinfo *out, int nout,
                                 size_t *scratch) {
    (void)prim;
    (void)nin;
    (void)nout;
    const tm_vinfo *X = in[0], *P = in[1], *Z = in[2];
    conv_geom g;
    if (!is_q8(X->dtype) || X->rank != 2 + (int)a->i[0] || !conv_geom_of(a, X->dims, &g))
        return tm_ctx_fail(c, TM_ERR_SHAPE, "conv_integer: x must be int8 or uint8 (N, C, "
                           "spatial...) with a group-1 window of 1 to 3 dims");
    if (P->dtype != TM_UINT8 || P->rank != 1 ||
        P->dims[0] != (int64_t)tm_qgemm_packed_size(g.kdim, g.m))
        return tm_ctx_fail(c, TM_ERR_SHAPE, "conv_integer: the weights must be packed for "
                           "(%lld, %lld)", (long long)g.kdim, (long long)g.m);
    if (Z->dtype != X->dtype || tm_numel(Z->rank, Z->dims) != 1)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "conv_integer: x's zero point must be one %s",
                           tm_dtype_name(X->dtype));
    out[0].dtype = TM_INT32;
    out[0].rank = X->rank;
    out[0].dims[0] = g.batch;
    out[0].dims[1] = g.m;
    for (int d = 0; d < g.n; d++) out[0].dims[2 + d] = g.out[d];
    /* Patches (positions, kdim) as bytes, their product (positions, m) as int32, and the
     * product's own scratch, for one image at a time. */
    *scratch = (size_t)(g.positions * g.kdim) + 64 + (size_t)(g.positions * g.m) * 4 + 64 +
               tm_qgemm_scratch(g.positions, g.kdim, X->dtype == TM_INT8);
    return TM_OK;
}

/* Row p of the patch matrix for output position p: every (channel, kernel offset), x's
 * value there or its zero point in the padding. */
static void im2col(const conv_geom *g, const uint8_t *x, uint8_t zp, uint8_t *cols) {
    int64_t in_h = g->n >= 2 ? g->in[1] : 1, in_d = g->n >= 3 ? g->in[2] : 1;
    int64_t plane = 1;
    for (int d = 0; d < g->n; d++) plane *= g->in[d];
    int64_t o[3] = {0, 0, 0};
    for (int64_t p = 0; p < g->positions; p++) {
        uint8_t *row = cols + p * g->kdim;
        int64_t at = 0;
        for (int64_t ch = 0; ch < g->channels; ch++) {
            const uint8_t *src = x + ch * plane;
            int64_t k[3] = {0, 0, 0};
            for (;;) {
                int inside = 1;
                int64_t idx = 0;
                for (int d = 0; d < g->n; d++) {
                    int64_t pos = o[d] * g->stride[d] - g->pad[d] + k[d] * g->dilation[d];
                    inside &= pos >= 0 && pos < g->in[d];
                    idx = d == 0 ? pos : idx * (d == 1 ? in_h : in_d) + pos;
                }
                row[at++] = inside ? src[idx] : zp;
                int d = g->n - 1;   /* next kernel offset, last dim fastest */
                while (d >= 0 && ++k[d] == g->kernel[d]) k[d--] = 0;
                if (d < 0) break;
            }
        }
        int d = g->n - 1;   /* next output position */
        while (d >= 0 && ++o[d] == g->out[d]) o[d--] = 0;
    }
}

tm_status tm__kernel_conv_integer(const tm_kcall *k) {
    const tm_tensor *X = k->in[0], *P = k->in[1], *Z = k->in[2];
    conv_geom g;
    if (!conv_geom_of(k->a, X->dims, &g) ||
        !tm_qgemm_packed_check(P->data, (size_t)P->dims[0], g.kdim, g.m))
        return tm__fail(k->err, TM_ERR_RUNTIME, "conv_integer: the packed weights do not match");
    uintptr_t at = ((uintptr_t)k->scratch + 63) & ~(uintptr_t)63;
    uint8_t *cols = (uint8_t *)at;
    at = ((uintptr_t)(cols + g.positions * g.kdim) + 63) & ~(uintptr_t)63;
    int32_t *prod = (int32_t *)at;
    void *inner = prod + g.positions * g.m;
    int64_t plane_in = X->dims[1];
    for (int d = 0; d < g.n; d++) plane_in *= g.in[d];
    for (int64_t b = 0; b < g.batch; b++) {
        im2col(&g, (const uint8_t *)X->data + b * plane_in, *(const uint8_t *)Z->data, cols);
        tm_qgemm_args q;
        memset(&q, 0, sizeof q);
        q.m = g.positions;
        q.n = g.m;
        q.k = g.kdim;
        q.a = cols;
        q.a_signed = X->dtype == TM_INT8;
        q.lda = g.kdim;
        q.za = Z->data;
        q.za_count = 1;
        q.b_packed = P->data;
        q.c_int = prod;
        q.ldc = g.m;
        tm_qgemm(&q, inner, k->pool);
        int32_t *y = (int32_t *)k->out[0]->data + b * g.m * g.positions;
        for (int64_t p = 0; p < g.positions; p++)
            for (int64_t m = 0; m < g.m; m++) y[m * g.positions + p] = prod[p * g.m + m];
    }
    return TM_OK;
}
