/* Matrix products, convolutions and pooling (rows in linalg.def): their shape rules and
 * CPU kernels. Float32 runs through tm_sgemm (packed, threaded over kc->pool); every other
 * dtype through plain loops that accumulate in double or in 64-bit integers.
 * Not the ONNX side: auto_pad, output_shape, MatMulInteger and 1-D matmul operands are
 * turned into these primitives' explicit arguments by the lowerings. */
#if defined(__GNUC__) && !defined(__clang__)
/* -O2 leaves plain loops scalar (GCC's very-cheap vector cost model); these loops run
 * over every element they touch: the full vectorizer. No floating-point contraction:
 * each step rounds as the unfused primitive does. Short copy loops stay loops (a memcpy
 * call per 128-byte run of an image panel cost more than the copy). */
#pragma GCC optimize("O3", "no-trapping-math", "no-tree-loop-distribute-patterns")
#endif
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "../ctx.h"
#include "fused.h"
#include "../../backends/cpu/dwconv.h"
#include "../../backends/cpu/gemm.h"

/* CONV_PACKED's slices, each with its own piece of scratch: channels (depthwise) or
 * panels of output positions (the implicit GEMM). */
#define DEPTHWISE_SLICES 8
#define CONV_GEMM_SLICES 16
#define EPILOGUE_PANELS 8
/* Below about 20 microseconds of one core's work a conv runs on one thread (waking a
 * worker costs that much on a busy machine). */
#define CONV_PARALLEL_MIN_FLOPS (1 << 21)

/* ---- Shared helpers ------------------------------------------------------------------ */

/* "(2, 3, 4)" into buf, for error messages. */
static const char *dims_text(char *buf, size_t cap, int rank, const int64_t *dims) {
    size_t used = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < rank && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%lld", i ? ", " : "",
                                 (long long)dims[i]);
    if (used < cap) snprintf(buf + used, cap - used, ")");
    return buf;
}

static int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t max_i64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Floor division for a positive divisor. */
static int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

/* The smallest q >= 0 with start + q * step >= bound (step > 0). */
static int64_t first_reaching(int64_t start, int64_t step, int64_t bound) {
    if (start >= bound) return 0;
    if (step == 1) return bound - start;   /* the common case, without a division */
    return -floor_div(start - bound, step);
}

/* Advances a row-major multi-index over dims; 0 once it wraps around to all zeros. */
static int next_index(int n, const int64_t *dims, int64_t *index) {
    for (int d = n - 1; d >= 0; d--) {
        if (++index[d] < dims[d]) return 1;
        index[d] = 0;
    }
    return 0;
}

static void unravel(int n, const int64_t *dims, int64_t flat, int64_t *index) {
    for (int d = n - 1; d >= 0; d--) {
        index[d] = dims[d] ? flat % dims[d] : 0;
        flat = dims[d] ? flat / dims[d] : 0;
    }
}

/* Dtypes with arithmetic here: floats and integers, not bool, strings or complex. */
static int is_numeric(tm_dtype dt) {
    if (dt == TM_BOOL || dt == TM_STRING || dt == TM_COMPLEX64 || dt == TM_COMPLEX128)
        return 0;
    return tm_dtype_is_float(dt) || tm_dtype_is_signed_int(dt) || tm_dtype_is_unsigned_int(dt);
}

/* Integers are accumulated modulo 2^64 (wrapping as the output dtype will), so signed
 * and unsigned values share one representation. */
static uint64_t load_wrapped(const void *data, tm_dtype dt, int64_t i) {
    if (tm_dtype_is_unsigned_int(dt)) return tm_load_u64(data, dt, (size_t)i);
    return (uint64_t)tm_load_i64(data, dt, (size_t)i);
}

static void store_wrapped(void *data, tm_dtype dt, int64_t i, uint64_t v) {
    if (tm_dtype_is_unsigned_int(dt)) tm_store_u64(data, dt, (size_t)i, v);
    else tm_store_i64(data, dt, (size_t)i, (int64_t)v);
}

/* ---- MATMUL ---------------------------------------------------------------------------- */

/* When every batch dim of b is 1, a's batch folds into the rows of one product
 * (a is contiguous): one large GEMM instead of many small ones. */
static int matmul_folds_batch(int rank, const int64_t *dims_b) {
    for (int d = 0; d < rank - 2; d++)
        if (dims_b[d] != 1) return 0;
    return 1;
}

/* A float32 batch of products each too small for tm_sgemm to thread (attention's per-head
 * products, their gradients) runs as slices of whole products over the pool instead, each
 * slice with its own packing space: the same products, so the same results whatever the
 * thread count. The number of slices (1: the batch runs in order, each product threaded
 * as tm_sgemm sees fit). */
#define MATMUL_BATCH_SLICES 16
#define MATMUL_THREADED_FLOPS (1 << 21)   /* tm_sgemm's own threading starts here */

static int matmul_batch_slices(int64_t batch, int64_t m, int64_t n, int64_t k) {
    if (batch < 2 || 2.0 * (double)m * (double)n * (double)k >= MATMUL_THREADED_FLOPS)
        return 1;
    return batch < MATMUL_BATCH_SLICES ? (int)batch : MATMUL_BATCH_SLICES;
}

static size_t round_scratch(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

tm_status tm__shape_matmul(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                           int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)prim; (void)nin; (void)nout;
    int ta = a->i[0] != 0, tb = a->i[1] != 0, tc = a->i[2] != 0;
    if (nin != 2 && nin != 3)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "matmul: expected 2 inputs and an optional bias, "
                           "got %d", nin);
    const tm_vinfo *x = in[0], *y = in[1];
    if (tc && (nin != 2 || x->rank != 2))
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "matmul: a transposed output needs two "
                           "matrices (no batch, no bias)");
    char tx[160], ty[160];
    if (x->dtype == TM_STRING || y->dtype == TM_STRING)
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "matmul: string tensors are not supported");
    if (x->dtype != y->dtype)
        return tm_ctx_fail(c, TM_ERR_DTYPE, "matmul: operands have different dtypes %s and %s",
                           tm_dtype_name(x->dtype), tm_dtype_name(y->dtype));
    if (!is_numeric(x->dtype))
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "matmul: dtype %s is not supported",
                           tm_dtype_name(x->dtype));
    int r = x->rank;
    dims_text(tx, sizeof tx, x->rank, x->dims);
    dims_text(ty, sizeof ty, y->rank, y->dims);
    if (r < 2 || y->rank != r)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "matmul: operands must have equal rank >= 2, "
                           "got %s and %s", tx, ty);
    if (x->dims[r - 1 - ta] != y->dims[r - 2 + tb])
        return tm_ctx_fail(c, TM_ERR_SHAPE, "matmul: inner dims differ: %s%s times %s%s", tx,
                           ta ? " transposed" : "", ty, tb ? " transposed" : "");
    for (int d = 0; d < r - 2; d++) {
        if (x->dims[d] != y->dims[d] && x->dims[d] != 1 && y->dims[d] != 1)
            return tm_ctx_fail(c, TM_ERR_SHAPE, "matmul: batch dim %d differs: %s times %s",
                               d, tx, ty);
        out->dims[d] = x->dims[d] == 1 ? y->dims[d] : x->dims[d];
    }
    int64_t m = x->dims[r - 2 + ta], k = x->dims[r - 1 - ta], n = y->dims[r - 1 - tb];
    out->dtype = x->dtype;
    out->rank = r;
    out->dims[r - 2] = tc ? n : m;
    out->dims[r - 1] = tc ? m : n;
    *scratch = 0;
    if (nin == 3 && (in[2]->dtype != x->dtype || in[2]->rank != 1 || in[2]->dims[0] != n ||
                     !tm_dtype_is_float(x->dtype)))
        return tm_ctx_fail(c, TM_ERR_SHAPE, "matmul: the bias must be (%lld) of the operands' "
                           "float dtype", (long long)n);
    int64_t rows = m;
    if (!ta && matmul_folds_batch(r, y->dims)) rows = tm_numel(r - 2, x->dims) * m;
    if (x->dtype == TM_FLOAT16 || x->dtype == TM_BFLOAT16) {
        /* f32 copies of one product's a, b and c, then the GEMM's packing space. */
        *scratch = (size_t)(rows * k + k * n + rows * n) * sizeof(float);
    }
    if (x->dtype == TM_FLOAT || x->dtype == TM_FLOAT16 || x->dtype == TM_BFLOAT16)
        *scratch += tm_sgemm_scratch(ta, tb, rows, n, k);
    int64_t batch = tm_numel(r - 2, out->dims);
    if (x->dtype == TM_FLOAT && rows == m && matmul_batch_slices(batch, m, n, k) > 1) {
        /* Products split over the pool: a piece of packing space per slice. */
        size_t one = tm_sgemm_scratch(ta, tb, m, n, k);
        *scratch = (size_t)matmul_batch_slices(batch, m, n, k) * round_scratch(one) + 64;
    }
    return TM_OK;
}

/* Element strides of an operand: (row, column) of a (m, k) or of b (k, n), whether stored
 * as such or transposed. */
typedef struct mm_layout {
    int ta, tb;
    int64_t a_row, a_col, b_row, b_col;
    int64_t c_row, c_col;   /* C's: (n, 1), or (1, m) stored transposed (matmul_generic) */
} mm_layout;

static mm_layout mm_layout_of(int ta, int tb, int64_t m, int64_t n, int64_t k) {
    mm_layout l = {ta, tb, ta ? 1 : k, ta ? m : 1, tb ? 1 : n, tb ? k : 1, n, 1};
    return l;
}

static void matmul_f64(const double *a, const double *b, double *c, int64_t m, int64_t n,
                       int64_t k, const mm_layout *l) {
    for (int64_t i = 0; i < m; i++) {
        double *c_row = c + i * n;
        for (int64_t j = 0; j < n; j++) c_row[j] = 0.0;
        for (int64_t p = 0; p < k; p++) {
            double scaled = a[i * l->a_row + p * l->a_col];
            const double *b_row = b + p * l->b_row;
            if (l->b_col == 1)
                for (int64_t j = 0; j < n; j++) c_row[j] += scaled * b_row[j];
            else
                for (int64_t j = 0; j < n; j++) c_row[j] += scaled * b_row[j * l->b_col];
        }
    }
}

/* int32 products summed in uint32 equal int64 sums wrapped to int32, and vectorize twice
 * as wide. int32_t and uint32_t may alias each other. */
static void matmul_i32(const int32_t *a, const int32_t *b, int32_t *c, int64_t m, int64_t n,
                       int64_t k) {
    for (int64_t i = 0; i < m; i++) {
        uint32_t *c_row = (uint32_t *)(c + i * n);
        for (int64_t j = 0; j < n; j++) c_row[j] = 0;
        for (int64_t p = 0; p < k; p++) {
            uint32_t scaled = (uint32_t)a[i * k + p];
            const uint32_t *b_row = (const uint32_t *)(b + p * n);
            for (int64_t j = 0; j < n; j++) c_row[j] += scaled * b_row[j];
        }
    }
}

static void matmul_i64(const int64_t *a, const int64_t *b, int64_t *c, int64_t m, int64_t n,
                       int64_t k) {
    for (int64_t i = 0; i < m; i++) {
        uint64_t *c_row = (uint64_t *)(c + i * n);
        for (int64_t j = 0; j < n; j++) c_row[j] = 0;
        for (int64_t p = 0; p < k; p++) {
            uint64_t scaled = (uint64_t)a[i * k + p];
            const uint64_t *b_row = (const uint64_t *)(b + p * n);
            for (int64_t j = 0; j < n; j++) c_row[j] += scaled * b_row[j];
        }
    }
}

/* Any other dtype, element by element: floats in double, integers modulo 2^64. */
static void matmul_generic(tm_dtype dt, const void *a, int64_t off_a, const void *b,
                           int64_t off_b, void *c, int64_t off_c, int64_t m, int64_t n,
                           int64_t k, const mm_layout *l) {
    int is_float = tm_dtype_is_float(dt);
    for (int64_t i = 0; i < m; i++) {
        for (int64_t j = 0; j < n; j++) {
            double sum = 0.0;
            uint64_t isum = 0;
            for (int64_t p = 0; p < k; p++) {
                int64_t ia = off_a + i * l->a_row + p * l->a_col;
                int64_t ib = off_b + p * l->b_row + j * l->b_col;
                if (is_float) sum += tm_load_f64(a, dt, (size_t)ia) * tm_load_f64(b, dt, (size_t)ib);
                else isum += load_wrapped(a, dt, ia) * load_wrapped(b, dt, ib);
            }
            int64_t ic = off_c + i * l->c_row + j * l->c_col;
            if (is_float) tm_store_f64(c, dt, (size_t)ic, sum);
            else store_wrapped(c, dt, ic, isum);
        }
    }
}

static void half_to_f32(tm_dtype dt, const uint16_t *src, float *dst, int64_t count) {
    if (dt == TM_FLOAT16)
        for (int64_t i = 0; i < count; i++) dst[i] = tm_f16_to_f32(src[i]);
    else
        for (int64_t i = 0; i < count; i++) dst[i] = tm_bf16_to_f32(src[i]);
}

static void f32_to_half(tm_dtype dt, const float *src, uint16_t *dst, int64_t count) {
    if (dt == TM_FLOAT16)
        for (int64_t i = 0; i < count; i++) dst[i] = tm_f32_to_f16(src[i]);
    else
        for (int64_t i = 0; i < count; i++) dst[i] = tm_f32_to_bf16(src[i]);
}

/* f16 and bf16 go through f32 copies in scratch and sgemm. */
static void matmul_half(tm_dtype dt, const uint16_t *a, const uint16_t *b, uint16_t *c,
                        int64_t m, int64_t n, int64_t k, float *scratch, tm_pool *pool,
                        const mm_layout *l) {
    float *a32 = scratch, *b32 = a32 + m * k, *c32 = b32 + k * n;
    half_to_f32(dt, a, a32, m * k);
    half_to_f32(dt, b, b32, k * n);
    tm_sgemm(l->ta, l->tb, m, n, k, 1.0f, a32, l->ta ? m : k, b32, l->tb ? k : n, 0.0f, c32,
             n, c32 + m * n, pool);
    f32_to_half(dt, c32, c, m * n);
}

/* One product c (m, n) = op(a) (m, k) op(b) (k, n) at element offsets into the tensors,
 * op transposing the operands l asks for. */
/* One product; ep (float32 only, else NULL) runs on its tiles. */
static void matmul_one(tm_dtype dt, const void *a, int64_t off_a, const void *b,
                       int64_t off_b, void *c, int64_t off_c, int64_t m, int64_t n, int64_t k,
                       void *scratch, tm_pool *pool, const mm_layout *l,
                       const tm_sgemm_epilogue *ep) {
    int plain = !l->ta && !l->tb;
    switch (dt) {
    case TM_FLOAT:
        tm_sgemm_ep(l->ta, l->tb, m, n, k, 1.0f, (const float *)a + off_a, l->ta ? m : k,
                    (const float *)b + off_b, l->tb ? k : n, 0.0f, (float *)c + off_c, n, ep,
                    scratch, pool);
        return;
    case TM_DOUBLE:
        matmul_f64((const double *)a + off_a, (const double *)b + off_b, (double *)c + off_c,
                   m, n, k, l);
        return;
    case TM_INT32:
        if (!plain) break;
        matmul_i32((const int32_t *)a + off_a, (const int32_t *)b + off_b,
                   (int32_t *)c + off_c, m, n, k);
        return;
    case TM_INT64:
        if (!plain) break;
        matmul_i64((const int64_t *)a + off_a, (const int64_t *)b + off_b,
                   (int64_t *)c + off_c, m, n, k);
        return;
    case TM_FLOAT16:
    case TM_BFLOAT16:
        matmul_half(dt, (const uint16_t *)a + off_a, (const uint16_t *)b + off_b,
                    (uint16_t *)c + off_c, m, n, k, scratch, pool, l);
        return;
    default:
        break;
    }
    matmul_generic(dt, a, off_a, b, off_b, c, off_c, m, n, k, l);
}

/* Element offsets of the matrices of output batch t in a and b (batch dims of size 1
 * broadcast: they contribute nothing). */
static void matmul_batch_offsets(const tm_tensor *x, const tm_tensor *y, const tm_tensor *z,
                                 int64_t t, int64_t *off_x, int64_t *off_y) {
    int r = z->rank;
    int64_t ox = 0, oy = 0, stride_x = 1, stride_y = 1;
    for (int d = r - 3; d >= 0; d--) {
        int64_t i = t % z->dims[d];
        t /= z->dims[d];
        if (x->dims[d] != 1) ox += i * stride_x;
        if (y->dims[d] != 1) oy += i * stride_y;
        stride_x *= x->dims[d];
        stride_y *= y->dims[d];
    }
    *off_x = ox * x->dims[r - 2] * x->dims[r - 1];
    *off_y = oy * y->dims[r - 2] * y->dims[r - 1];
}

typedef struct matmul_batch_job {
    const tm_tensor *x, *y;
    tm_tensor *z;
    int64_t m, n, k, batch;
    const mm_layout *l;
    char *scratch;
    size_t slice_bytes;
} matmul_batch_job;

static void matmul_batch_slice(void *arg, int ith, int nth) {
    const matmul_batch_job *j = arg;
    int64_t t0 = j->batch * ith / nth, t1 = j->batch * (ith + 1) / nth;
    for (int64_t t = t0; t < t1; t++) {
        int64_t off_x, off_y;
        matmul_batch_offsets(j->x, j->y, j->z, t, &off_x, &off_y);
        matmul_one(TM_FLOAT, j->x->data, off_x, j->y->data, off_y, j->z->data,
                   t * j->m * j->n, j->m, j->n, j->k, j->scratch + (size_t)ith * j->slice_bytes,
                   NULL, j->l, NULL);
    }
}

/* z's rows plus the bias (any float dtype, in double). */
static void add_bias_rows(tm_tensor *z, const tm_tensor *bias) {
    int64_t n = bias->dims[0], rows = n ? tm_tensor_numel_(z) / n : 0;
    if (z->dtype == TM_FLOAT) {
        float *zs = z->data;
        const float *bs = bias->data;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < n; j++) zs[r * n + j] += bs[j];
        return;
    }
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++) {
            size_t at = (size_t)(r * n + j);
            tm_store_f64(z->data, z->dtype, at, tm_load_f64(z->data, z->dtype, at) +
                                                   tm_load_f64(bias->data, bias->dtype, (size_t)j));
        }
}

tm_status tm__kernel_matmul(const tm_kcall *kc) {
    const tm_tensor *x = kc->in[0], *y = kc->in[1];
    tm_tensor *z = kc->out[0];
    int r = z->rank, ta = kc->a->i[0] != 0, tb = kc->a->i[1] != 0;
    if (kc->a->i[2]) {   /* (n, m): two matrices, checked by the shape rule */
        int64_t n = z->dims[0], m = z->dims[1], k = x->dims[1 - ta];
        if (!m || !n) return TM_OK;
        if (z->dtype == TM_FLOAT) {
            tm_sgemm_ct(ta, tb, m, n, k, 1.0f, x->data, ta ? m : k, y->data, tb ? k : n, 0.0f,
                        z->data, m, kc->scratch, kc->pool);
            return TM_OK;
        }
        mm_layout l = mm_layout_of(ta, tb, m, n, k);
        l.c_row = 1;
        l.c_col = m;
        matmul_generic(z->dtype, x->data, 0, y->data, 0, z->data, 0, m, n, k, &l);
        return TM_OK;
    }
    int64_t m = z->dims[r - 2], k = x->dims[r - 1 - ta], n = z->dims[r - 1];
    int64_t batch = tm_numel(r - 2, z->dims);
    const tm_tensor *bias = kc->nin == 3 ? kc->in[2] : NULL;
    if (batch == 0 || m == 0 || n == 0) return TM_OK;
    if (!ta && matmul_folds_batch(r, y->dims)) {
        /* One product; a float32 bias in its epilogue, each tile's while in cache. */
        tm_sgemm_epilogue ep;
        memset(&ep, 0, sizeof ep);
        ep.bias = bias && z->dtype == TM_FLOAT ? bias->data : NULL;
        mm_layout l = mm_layout_of(0, tb, batch * m, n, k);
        matmul_one(z->dtype, x->data, 0, y->data, 0, z->data, 0, batch * m, n, k, kc->scratch,
                   kc->pool, &l, ep.bias ? &ep : NULL);
        if (bias && !ep.bias) add_bias_rows(z, bias);
        return TM_OK;
    }
    mm_layout l = mm_layout_of(ta, tb, m, n, k);
    int slices = matmul_batch_slices(batch, m, n, k);
    if (z->dtype == TM_FLOAT && slices > 1 && tm_pool_threads(kc->pool) > 1 &&
        !tm_use_reference_kernels()) {
        size_t one = round_scratch(tm_sgemm_scratch(ta, tb, m, n, k));
        uintptr_t at = ((uintptr_t)kc->scratch + 63) & ~(uintptr_t)63;
        if (kc->scratch_bytes < (size_t)slices * one + 64)
            return tm__fail(kc->err, TM_ERR_RUNTIME, "internal: matmul scratch too small");
        matmul_batch_job job = {x, y, z, m, n, k, batch, &l, (char *)at, one};
        tm_pool_run_n(kc->pool, slices, matmul_batch_slice, &job);
    } else {
        for (int64_t t = 0; t < batch; t++) {
            int64_t off_x, off_y;
            matmul_batch_offsets(x, y, z, t, &off_x, &off_y);
            matmul_one(z->dtype, x->data, off_x, y->data, off_y, z->data, t * m * n, m, n, k,
                       kc->scratch, kc->pool, &l, NULL);
        }
    }
    if (bias) add_bias_rows(z, bias);
    return TM_OK;
}

/* ---- MATMUL_GELU ----------------------------------------------------------------------- */

tm_status tm__shape_matmul_gelu(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                                int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)nout;
    if (nin != 2 && nin != 3)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "matmul_gelu: expected 2 inputs and an optional "
                           "bias, got %d", nin);
    if (a->i[0] || a->i[1] || a->i[2] || in[0]->dtype != TM_FLOAT)
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "matmul_gelu: float32 operands as stored only");
    tm_status st = tm__shape_matmul(c, prim, a, in, nin, out, 1, scratch);
    if (st != TM_OK) return st;
    if (!matmul_folds_batch(in[1]->rank, in[1]->dims))
        return tm_ctx_fail(c, TM_ERR_SHAPE, "matmul_gelu: the weight's leading dims must be 1");
    out[1] = out[0];
    return TM_OK;
}

/* A fused product's one float32 product over all rows, x (in[0], rows of k) by W (in[1],
 * leading dims 1; transposed with the args' i[1]) into y, with the epilogue ep (its row
 * strides set here: act_out and the residual have y's dims). */
static void fused_product(const tm_kcall *kc, tm_tensor *y, tm_sgemm_epilogue *ep) {
    const tm_tensor *x = kc->in[0], *w = kc->in[1];
    int r = y->rank;
    int64_t rows = tm_numel(r - 1, y->dims), n = y->dims[r - 1], k = x->dims[r - 1];
    if (rows == 0 || n == 0) return;
    ep->ld_act = n;
    ep->ldr = n;
    mm_layout l = mm_layout_of(0, kc->a->i[1] != 0, rows, n, k);
    matmul_one(TM_FLOAT, x->data, 0, w->data, 0, y->data, 0, rows, n, k, kc->scratch, kc->pool,
               &l, ep);
}

/* One product over all rows; in its epilogue the bias, then GELU into output 0 while
 * output 1 keeps the sum (gemm.h's act_out), or with i[3] GELU's derivative at the sum
 * (the activation_d there). */
tm_status tm__kernel_matmul_gelu(const tm_kcall *kc) {
    tm_chain ch = {1, {{TM_P_GELU, TM_CHAIN_UNARY, 0, 0.0f}}};
    tm_sgemm_epilogue ep;
    memset(&ep, 0, sizeof ep);
    ep.bias = kc->nin == 3 ? kc->in[2]->data : NULL;
    if (kc->a->i[3]) {
        ep.activation_d = tm__gelu_erf_d_f32;
    } else {
        ep.activation = tm__chain_apply;
        ep.activation_arg = &ch;
    }
    ep.act_out = kc->out[0]->data;
    fused_product(kc, kc->out[1], &ep);
    return TM_OK;
}

/* ---- MATMUL_ADD, MATMUL_MUL ------------------------------------------------------------ */

/* 1 when r, the operand a fused product's epilogue takes elementwise, is float32 of the
 * product's dims out. Written transposed (i[2]), the (n, m) product may take r's dims
 * instead: the same floats in the same order (the backward's reshape to x's dims). */
static int takes_operand_dims(const tm_args *a, const tm_vinfo *r, tm_vinfo *out) {
    if (a->i[2] && r->dtype == TM_FLOAT && r->rank >= 2 && r->dims[r->rank - 1] == out->dims[1] &&
        tm_numel(r->rank, r->dims) == out->dims[0] * out->dims[1]) {
        out->rank = r->rank;
        memcpy(out->dims, r->dims, (size_t)r->rank * sizeof r->dims[0]);
    }
    return r->dtype == TM_FLOAT && r->rank == out->rank &&
           !memcmp(r->dims, out->dims, (size_t)r->rank * sizeof r->dims[0]);
}

/* MATMUL_ADD's and MATMUL_MUL's shape: a product of in[0..nin - 1) (x, W and for ADD an
 * optional bias; as MATMUL has them, x as stored, W's leading dims 1, or written
 * transposed), then the operand in[nin - 1] (what: "residual" or "factor") of its dims. */
static tm_status shape_product_and_operand(tm_ctx *c, int prim, const tm_args *a,
                                           const tm_vinfo *const *in, int nin, tm_vinfo *out,
                                           size_t *scratch, const char *name, const char *what) {
    if (in[0]->dtype != TM_FLOAT)
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "%s: float32 operands only", name);
    if (!a->i[2] && a->i[0])
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "%s: x as stored (W as stored or "
                           "transposed), or a product written transposed", name);
    tm_status st = tm__shape_matmul(c, prim, a, in, nin - 1, out, 1, scratch);
    if (st != TM_OK) return st;
    if (!a->i[2] && !matmul_folds_batch(in[1]->rank, in[1]->dims))
        return tm_ctx_fail(c, TM_ERR_SHAPE, "%s: the weight's leading dims must be 1", name);
    if (!takes_operand_dims(a, in[nin - 1], out))
        return tm_ctx_fail(c, TM_ERR_SHAPE, "%s: the %s must be float32 of the product's dims",
                           name, what);
    return TM_OK;
}

tm_status tm__shape_matmul_add(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                               int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)nout;
    if (nin != 3 && nin != 4)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "matmul_add: expected x, W, an optional bias and "
                           "the residual, got %d inputs", nin);
    return shape_product_and_operand(c, prim, a, in, nin, out, scratch, "matmul_add",
                                     "residual");
}

tm_status tm__shape_matmul_mul(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                               int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)nout;
    if (nin != 3)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "matmul_mul: expected x, W and the factor, got %d "
                           "inputs", nin);
    return shape_product_and_operand(c, prim, a, in, nin, out, scratch, "matmul_mul", "factor");
}

/* A product written transposed (MATMUL's i[2]: y (n, m), or the operand's dims) of x and
 * W (in[0], in[1]), plus res or times mul as each tile is stored (one of them). */
static void transposed_product(const tm_kcall *kc, tm_tensor *y, const float *res,
                               const float *mul) {
    const tm_tensor *x = kc->in[0], *w = kc->in[1];
    int ta = kc->a->i[0] != 0, tb = kc->a->i[1] != 0;
    int64_t m = y->dims[y->rank - 1], n = tm_numel(y->rank - 1, y->dims), k = x->dims[1 - ta];
    if (!m || !n) return;
    if (mul)
        tm_sgemm_ct_mul(ta, tb, m, n, k, 1.0f, x->data, ta ? m : k, w->data, tb ? k : n, 0.0f,
                        y->data, m, mul, kc->scratch, kc->pool);
    else
        tm_sgemm_ct_add(ta, tb, m, n, k, 1.0f, x->data, ta ? m : k, w->data, tb ? k : n, 0.0f,
                        y->data, m, res, kc->scratch, kc->pool);
}

/* The product times f: written transposed, as each tile is stored; else over all rows,
 * in each tile's epilogue. */
tm_status tm__kernel_matmul_mul(const tm_kcall *kc) {
    tm_tensor *y = kc->out[0];
    const float *f = kc->in[2]->data;
    if (kc->a->i[2]) {
        transposed_product(kc, y, NULL, f);
        return TM_OK;
    }
    tm_sgemm_epilogue ep;
    memset(&ep, 0, sizeof ep);
    ep.mul = f;
    ep.ldm = y->dims[y->rank - 1];
    fused_product(kc, y, &ep);
    return TM_OK;
}

/* One product over all rows; the bias and the residual in its epilogue (written
 * transposed: the residual as each tile is stored). */
tm_status tm__kernel_matmul_add(const tm_kcall *kc) {
    tm_tensor *y = kc->out[0];
    const float *r = kc->in[kc->nin - 1]->data;
    if (kc->a->i[2]) {   /* (n, m), as MATMUL's i[2], or the residual's dims */
        transposed_product(kc, y, r, NULL);
        return TM_OK;
    }
    tm_sgemm_epilogue ep;
    memset(&ep, 0, sizeof ep);
    ep.bias = kc->nin == 4 ? kc->in[2]->data : NULL;
    ep.residual = r;
    fused_product(kc, y, &ep);
    return TM_OK;
}

/* ---- MATMUL_COLSUM ---------------------------------------------------------------------- */

/* x (..., R, K) and g (..., R, N), float32, each R rows as stored (leading dims folded into
 * the rows); output 0 the column sums of g over all its rows, (1, ..., 1, N) of rank
 * a->i[0]; output 1 x^T g, (1, ..., 1, K, N) of rank a->i[1]. */
tm_status tm__shape_matmul_colsum(tm_ctx *c, int prim, const tm_args *a,
                                  const tm_vinfo *const *in, int nin, tm_vinfo *out, int nout,
                                  size_t *scratch) {
    (void)prim; (void)nin; (void)nout;
    const tm_vinfo *x = in[0], *g = in[1];
    if (x->dtype != TM_FLOAT || g->dtype != TM_FLOAT)
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "matmul_colsum: float32 operands only");
    if (x->rank < 2 || g->rank < 2 || a->i[0] < 1 || a->i[1] < 2 || a->i[0] > TM_MAX_RANK ||
        a->i[1] > TM_MAX_RANK)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "matmul_colsum: operands of rank 2 or more, "
                           "outputs of rank %lld and %lld", (long long)a->i[0],
                           (long long)a->i[1]);
    int64_t k = x->dims[x->rank - 1], n = g->dims[g->rank - 1];
    int64_t rows = k ? tm_numel(x->rank, x->dims) / k : 0;
    if (n == 0 || k == 0 || rows * n != tm_numel(g->rank, g->dims))
        return tm_ctx_fail(c, TM_ERR_SHAPE, "matmul_colsum: x and g must have as many rows");
    for (int o = 0; o < 2; o++) {
        int r = (int)a->i[o];
        out[o].dtype = TM_FLOAT;
        out[o].rank = r;
        for (int d = 0; d < r; d++) out[o].dims[d] = 1;
        out[o].dims[r - 1] = n;
        if (o == 1) out[o].dims[r - 2] = k;
    }
    *scratch = round_scratch(tm_sgemm_scratch(1, 0, k, n, rows)) + (size_t)n * sizeof(double) + 64;
    return TM_OK;
}

/* One product and the column sums beside it (tm_sgemm_colsum: g read once; the plain
 * loops for both under TM_REFERENCE_KERNELS), the sums in double, row by row, as
 * REDUCE_SUM adds them. */
tm_status tm__kernel_matmul_colsum(const tm_kcall *kc) {
    const tm_tensor *x = kc->in[0], *g = kc->in[1];
    tm_tensor *db = kc->out[0], *dw = kc->out[1];
    int64_t k = x->dims[x->rank - 1], n = g->dims[g->rank - 1];
    int64_t rows = tm_numel(x->rank, x->dims) / k;
    uintptr_t at = ((uintptr_t)kc->scratch + 63) & ~(uintptr_t)63;
    double *sums = (double *)at;
    void *gemm = (char *)at + round_scratch((size_t)n * sizeof(double));
    memset(sums, 0, (size_t)n * sizeof(double));
    tm_sgemm_colsum(1, k, n, rows, x->data, k, g->data, n, dw->data, n, sums, gemm, kc->pool);
    float *out = db->data;
    for (int64_t j = 0; j < n; j++) out[j] = (float)sums[j];
    return TM_OK;
}

/* ---- Convolution geometry -------------------------------------------------------------- */

/* Everything CONV and CONV_TRANSPOSE need, read from the args and the input dims.
 * "in" is x's spatial grid, "out" is y's; for the transpose the weights map out to in. */
typedef struct conv_geom {
    int n;                          /* spatial rank */
    int64_t group, batch, in_channels, out_channels;
    int64_t in[TM_MAX_RANK], kernel[TM_MAX_RANK], out[TM_MAX_RANK];
    int64_t stride[TM_MAX_RANK], pad_begin[TM_MAX_RANK], pad_end[TM_MAX_RANK];
    int64_t dilation[TM_MAX_RANK], out_pad[TM_MAX_RANK];
    int64_t in_size, kernel_size, out_size;   /* products of the grids */
} conv_geom;

/* Fills g from args and dims; on a bad combination writes why and returns its status. */
static tm_status conv_geom_read(const tm_args *a, int transpose, int rank_x,
                                const int64_t *dims_x, int rank_w, const int64_t *dims_w,
                                conv_geom *g, char *why, size_t why_cap) {
    char tx[160], tw[160];
    const char *name = transpose ? "conv_transpose" : "conv";
    memset(g, 0, sizeof *g);
    int64_t n = a->i[0];
    if (n < 1 || n > TM_MAX_RANK - 2) {
        snprintf(why, why_cap, "%s: spatial rank %lld is not in [1, %d]", name, (long long)n,
                 TM_MAX_RANK - 2);
        return TM_ERR_UNSUPPORTED;
    }
    g->n = (int)n;
    dims_text(tx, sizeof tx, rank_x, dims_x);
    dims_text(tw, sizeof tw, rank_w, dims_w);
    if (rank_x != g->n + 2 || rank_w != g->n + 2) {
        snprintf(why, why_cap, "%s: input %s and weights %s must both have rank %d", name, tx,
                 tw, g->n + 2);
        return TM_ERR_SHAPE;
    }
    g->group = a->i[1];
    g->batch = dims_x[0];
    g->in_channels = dims_x[1];
    if (g->group < 1 || g->in_channels % g->group != 0) {
        snprintf(why, why_cap, "%s: group %lld does not divide the %lld input channels of %s",
                 name, (long long)g->group, (long long)g->in_channels, tx);
        return TM_ERR_SHAPE;
    }
    int64_t channels_per_group = g->in_channels / g->group;
    if (transpose) {
        g->out_channels = dims_w[1] * g->group;
        if (dims_w[0] != g->in_channels) {
            snprintf(why, why_cap, "%s: weights %s must have %lld input channels (dim 0) for "
                     "input %s", name, tw, (long long)g->in_channels, tx);
            return TM_ERR_SHAPE;
        }
    } else {
        g->out_channels = dims_w[0];
        if (dims_w[1] != channels_per_group || g->out_channels % g->group != 0) {
            snprintf(why, why_cap, "%s: weights %s do not fit input %s with group %lld (dim 1 "
                     "must be %lld, dim 0 a multiple of the group)", name, tw, tx,
                     (long long)g->group, (long long)channels_per_group);
            return TM_ERR_SHAPE;
        }
    }
    g->in_size = g->kernel_size = g->out_size = 1;
    for (int d = 0; d < g->n; d++) {
        g->in[d] = dims_x[2 + d];
        g->kernel[d] = dims_w[2 + d];
        g->stride[d] = a->i[2 + d];
        g->pad_begin[d] = a->i[2 + g->n + d];
        g->pad_end[d] = a->i[2 + 2 * g->n + d];
        g->dilation[d] = a->i[2 + 3 * g->n + d];
        g->out_pad[d] = transpose ? a->i[2 + 4 * g->n + d] : 0;
        /* Negative pads are allowed: they crop (a ConvTranspose output_shape larger than
         * the natural one gives a negative end pad). */
        if (g->kernel[d] < 1 || g->stride[d] < 1 || g->dilation[d] < 1 || g->out_pad[d] < 0) {
            snprintf(why, why_cap, "%s: spatial axis %d: kernel %lld, stride %lld and dilation "
                     "%lld must be >= 1, output padding %lld >= 0", name, d,
                     (long long)g->kernel[d], (long long)g->stride[d],
                     (long long)g->dilation[d], (long long)g->out_pad[d]);
            return TM_ERR_SHAPE;
        }
        int64_t extent = (g->kernel[d] - 1) * g->dilation[d] + 1;
        if (transpose) {
            g->out[d] = g->stride[d] * (g->in[d] - 1) + g->out_pad[d] + extent
                        - g->pad_begin[d] - g->pad_end[d];
        } else {
            int64_t span = g->in[d] + g->pad_begin[d] + g->pad_end[d] - extent;
            g->out[d] = span < 0 ? -1 : span / g->stride[d] + 1;
        }
        if (g->out[d] < 0) {
            snprintf(why, why_cap, "%s: spatial axis %d: input %s with weights %s, pads %lld/%lld "
                     "and dilation %lld leaves no output", name, d, tx, tw,
                     (long long)g->pad_begin[d], (long long)g->pad_end[d],
                     (long long)g->dilation[d]);
            return TM_ERR_SHAPE;
        }
        g->in_size *= g->in[d];
        g->kernel_size *= g->kernel[d];
        g->out_size *= g->out[d];
    }
    return TM_OK;
}

/* The GEMM operand built in scratch has `rows` rows (channels times kernel offsets) and
 * one column per spatial position; its columns are processed in tiles so that scratch
 * stays near TILE_BYTES however large the image. */
#define CONV_TILE_BYTES ((int64_t)8 << 20)

static int64_t conv_tile(int64_t rows, int64_t columns) {
    if (rows <= 0 || columns <= 0) return columns > 0 ? columns : 1;
    int64_t tile = CONV_TILE_BYTES / (rows * (int64_t)sizeof(float));
    tile = max_i64(tile, 256);
    return min_i64(tile, columns);
}

/* A 1x1 kernel with stride 1 and no padding: x itself is the GEMM operand. */
static int conv_is_pointwise(const conv_geom *g) {
    for (int d = 0; d < g->n; d++)
        if (g->kernel[d] != 1 || g->stride[d] != 1 || g->pad_begin[d] || g->pad_end[d]
            || g->out_pad[d])
            return 0;
    return 1;
}

/* The f32 path's GEMM: rows and columns of the operand kept in scratch. Conv: rows are
 * (input channel, kernel offset) of a group, columns output positions (im2col). Transpose:
 * rows are (output channel, kernel offset), columns input positions (col2im). */
static void conv_gemm_shape(const conv_geom *g, int transpose, int64_t *rows,
                            int64_t *columns) {
    if (transpose) {
        *rows = g->out_channels / g->group * g->kernel_size;
        *columns = g->in_size;
    } else {
        *rows = g->in_channels / g->group * g->kernel_size;
        *columns = g->out_size;
    }
}

/* Bytes of the im2col/col2im tile (0 for pointwise kernels, whose operand is x itself). */
static size_t conv_col_bytes(const conv_geom *g, int transpose) {
    if (conv_is_pointwise(g)) return 0;
    int64_t rows, columns;
    conv_gemm_shape(g, transpose, &rows, &columns);
    return (size_t)rows * (size_t)conv_tile(rows, columns) * sizeof(float);
}

/* tm_sgemm's scratch for the largest product conv_f32_group or its transpose runs. */
static size_t conv_sgemm_bytes(const conv_geom *g, int transpose) {
    int64_t rows, columns;
    conv_gemm_shape(g, transpose, &rows, &columns);
    int64_t len = conv_is_pointwise(g) ? columns : conv_tile(rows, columns);
    if (transpose) return tm_sgemm_scratch(1, 0, rows, len, g->in_channels / g->group);
    return tm_sgemm_scratch(0, 0, g->out_channels / g->group, len, rows);
}

/* The f32 path's memory: the column tile, then tm_sgemm's scratch; and the threads. */
typedef struct conv_mem {
    float *col;
    void *gemm;
    tm_pool *pool;
} conv_mem;

static tm_status conv_shape(tm_ctx *c, int transpose, const tm_args *a,
                            const tm_vinfo *const *in, int nin, tm_vinfo *out, size_t *scratch) {
    const char *name = transpose ? "conv_transpose" : "conv";
    if (nin != 2 && nin != 3)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "%s: expected 2 or 3 inputs (x, w, [bias]), got %d",
                           name, nin);
    for (int i = 0; i < nin; i++) {
        if (in[i]->dtype == TM_STRING)
            return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "%s: string tensors are not supported",
                               name);
        if (in[i]->dtype != in[0]->dtype)
            return tm_ctx_fail(c, TM_ERR_DTYPE, "%s: input %d is %s but x is %s", name, i,
                               tm_dtype_name(in[i]->dtype), tm_dtype_name(in[0]->dtype));
    }
    if (!is_numeric(in[0]->dtype))
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "%s: dtype %s is not supported", name,
                           tm_dtype_name(in[0]->dtype));
    conv_geom g;
    char why[700];
    tm_status s = conv_geom_read(a, transpose, in[0]->rank, in[0]->dims, in[1]->rank,
                                 in[1]->dims, &g, why, sizeof why);
    if (s != TM_OK) return tm_ctx_fail(c, s, "%s", why);
    if (nin == 3 && (in[2]->rank != 1 || in[2]->dims[0] != g.out_channels)) {
        char tb[160];
        return tm_ctx_fail(c, TM_ERR_SHAPE, "%s: bias %s must be (%lld)", name,
                           dims_text(tb, sizeof tb, in[2]->rank, in[2]->dims),
                           (long long)g.out_channels);
    }
    out->dtype = in[0]->dtype;
    out->rank = g.n + 2;
    out->dims[0] = g.batch;
    out->dims[1] = g.out_channels;
    for (int d = 0; d < g.n; d++) out->dims[2 + d] = g.out[d];
    *scratch = 0;
    if (in[0]->dtype == TM_FLOAT && !conv_is_pointwise(&g)) {
        int64_t rows, columns;
        conv_gemm_shape(&g, transpose, &rows, &columns);
        size_t bytes;
        if (!tm__mul_ok((size_t)rows, (size_t)conv_tile(rows, columns) * sizeof(float), &bytes))
            return tm_ctx_fail(c, TM_ERR_NO_MEMORY, "%s: scratch size overflows", name);
        *scratch = bytes;
    }
    if (in[0]->dtype == TM_FLOAT) *scratch += conv_sgemm_bytes(&g, transpose);
    return TM_OK;
}

tm_status tm__shape_conv(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                         int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)prim; (void)nout;
    return conv_shape(c, 0, a, in, nin, out, scratch);
}

tm_status tm__shape_conv_transpose(tm_ctx *c, int prim, const tm_args *a,
                                   const tm_vinfo *const *in, int nin, tm_vinfo *out, int nout,
                                   size_t *scratch) {
    (void)prim; (void)nout;
    return conv_shape(c, 1, a, in, nin, out, scratch);
}

/* ---- im2col and col2im (f32) ------------------------------------------------------------ */

/* One row of the scratch operand: a channel plane `plane` of grid `to_dims` and a kernel
 * offset. Position p of the `from` grid (positions [p0, p0 + len)) meets the plane at
 * from * stride - pad_begin + offset * dilation on every axis.
 * gather (im2col): row[q] = plane at that point, or 0 outside it.
 * scatter (col2im): plane at that point += row[q], for points inside it. */
typedef struct conv_row_walk {
    const conv_geom *g;
    const int64_t *from_dims, *to_dims;
    const int64_t *offset;          /* kernel offset per axis */
    int64_t p0, len;
} conv_row_walk;

static void conv_walk_row(const conv_row_walk *w, const float *plane_in, float *plane_out,
                          float *row, int scatter) {
    const conv_geom *g = w->g;
    int n = g->n, last = n - 1;
    int64_t from[TM_MAX_RANK];
    unravel(n, w->from_dims, w->p0, from);
    int64_t stride = g->stride[last], to_last = w->to_dims[last];
    for (int64_t q = 0; q < w->len;) {
        int64_t run = min_i64(w->len - q, w->from_dims[last] - from[last]);
        int64_t base = 0;
        int inside = 1;
        for (int d = 0; d < last; d++) {
            int64_t t = from[d] * g->stride[d] - g->pad_begin[d] + w->offset[d] * g->dilation[d];
            if (t < 0 || t >= w->to_dims[d]) inside = 0;
            base = base * w->to_dims[d] + t;
        }
        base *= to_last;
        int64_t start = from[last] * stride - g->pad_begin[last]
                        + w->offset[last] * g->dilation[last];
        int64_t lo = inside ? min_i64(first_reaching(start, stride, 0), run) : run;
        int64_t hi = inside ? max_i64(lo, min_i64(first_reaching(start, stride, to_last), run))
                            : run;
        float *seg = row + q;
        int64_t first = base + start;   /* may be negative: only [lo, hi) is dereferenced */
        if (scatter) {
            for (int64_t j = lo; j < hi; j++) plane_out[first + j * stride] += seg[j];
        } else {
            for (int64_t j = 0; j < lo; j++) seg[j] = 0.0f;
            if (stride == 1 && hi > lo)
                memcpy(seg + lo, plane_in + first + lo, (size_t)(hi - lo) * sizeof *seg);
            else
                for (int64_t j = lo; j < hi; j++) seg[j] = plane_in[first + j * stride];
            for (int64_t j = hi; j < run; j++) seg[j] = 0.0f;
        }
        q += run;
        from[last] += run;
        if (from[last] == w->from_dims[last]) {
            from[last] = 0;
            for (int d = last - 1; d >= 0 && ++from[d] == w->from_dims[d]; d--) from[d] = 0;
        }
    }
}

/* Rows of scratch: (channel, kernel offset) of `channels` planes of `plane_size`. */
static void conv_walk_rows(const conv_geom *g, const int64_t *from_dims,
                           const int64_t *to_dims, int64_t plane_size, int64_t channels,
                           const float *planes_in, float *planes_out, float *col, int64_t p0,
                           int64_t len, int scatter) {
    int64_t offset[TM_MAX_RANK];
    conv_row_walk w = {g, from_dims, to_dims, offset, p0, len};
    for (int64_t ch = 0; ch < channels; ch++) {
        memset(offset, 0, sizeof offset);
        for (int64_t kk = 0; kk < g->kernel_size; kk++) {
            float *row = col + (ch * g->kernel_size + kk) * len;
            conv_walk_row(&w, planes_in ? planes_in + ch * plane_size : NULL,
                          planes_out ? planes_out + ch * plane_size : NULL, row, scatter);
            next_index(g->n, g->kernel, offset);
        }
    }
}

static void add_bias_f32(float *y, const float *bias, int64_t channels, int64_t size) {
    for (int64_t ch = 0; ch < channels; ch++)
        for (int64_t i = 0; i < size; i++) y[ch * size + i] += bias[ch];
}

/* y (Mg, out) of one image and group = w_g (Mg, rows) . im2col(x_g) (rows, out). */
static void conv_f32_group(const conv_geom *g, const float *x, const float *w, float *y,
                           const conv_mem *mem) {
    float *col = mem->col;
    int64_t out_per_group = g->out_channels / g->group;
    int64_t rows, columns;
    conv_gemm_shape(g, 0, &rows, &columns);
    if (conv_is_pointwise(g)) {
        tm_sgemm(0, 0, out_per_group, columns, rows, 1.0f, w, rows, x, g->in_size, 0.0f, y,
                 g->out_size, mem->gemm, mem->pool);
        return;
    }
    int64_t tile = conv_tile(rows, columns);
    for (int64_t p0 = 0; p0 < columns; p0 += tile) {
        int64_t len = min_i64(tile, columns - p0);
        conv_walk_rows(g, g->out, g->in, g->in_size, g->in_channels / g->group, x, NULL, col,
                       p0, len, 0);
        tm_sgemm(0, 0, out_per_group, len, rows, 1.0f, w, rows, col, len, 0.0f, y + p0,
                 g->out_size, mem->gemm, mem->pool);
    }
}

static void conv_f32(const conv_geom *g, const float *x, const float *w, const float *bias,
                     float *y, const conv_mem *mem) {
    int64_t in_per_group = g->in_channels / g->group;
    int64_t out_per_group = g->out_channels / g->group;
    int64_t w_group = out_per_group * in_per_group * g->kernel_size;
    for (int64_t b = 0; b < g->batch; b++) {
        for (int64_t grp = 0; grp < g->group; grp++) {
            conv_f32_group(g, x + (b * g->in_channels + grp * in_per_group) * g->in_size,
                           w + grp * w_group,
                           y + (b * g->out_channels + grp * out_per_group) * g->out_size, mem);
        }
        if (bias) add_bias_f32(y + b * g->out_channels * g->out_size, bias, g->out_channels,
                               g->out_size);
    }
}

/* y (Mg, out) of one image and group = col2im(w_g^T (rows, Cg) . x_g (Cg, in)). */
static void conv_transpose_f32_group(const conv_geom *g, const float *x, const float *w,
                                     float *y, const conv_mem *mem) {
    float *col = mem->col;
    int64_t in_per_group = g->in_channels / g->group;
    int64_t rows, columns;
    conv_gemm_shape(g, 1, &rows, &columns);
    if (conv_is_pointwise(g)) {
        tm_sgemm(1, 0, rows, columns, in_per_group, 1.0f, w, rows, x, g->in_size, 0.0f, y,
                 g->out_size, mem->gemm, mem->pool);
        return;
    }
    int64_t out_per_group = g->out_channels / g->group;
    memset(y, 0, (size_t)(out_per_group * g->out_size) * sizeof *y);
    int64_t tile = conv_tile(rows, columns);
    for (int64_t p0 = 0; p0 < columns; p0 += tile) {
        int64_t len = min_i64(tile, columns - p0);
        tm_sgemm(1, 0, rows, len, in_per_group, 1.0f, w, rows, x + p0, g->in_size, 0.0f, col,
                 len, mem->gemm, mem->pool);
        conv_walk_rows(g, g->in, g->out, g->out_size, out_per_group, NULL, y, col, p0, len, 1);
    }
}

static void conv_transpose_f32(const conv_geom *g, const float *x, const float *w,
                               const float *bias, float *y, const conv_mem *mem) {
    int64_t in_per_group = g->in_channels / g->group;
    int64_t out_per_group = g->out_channels / g->group;
    int64_t w_group = in_per_group * out_per_group * g->kernel_size;
    for (int64_t b = 0; b < g->batch; b++) {
        for (int64_t grp = 0; grp < g->group; grp++) {
            conv_transpose_f32_group(
                g, x + (b * g->in_channels + grp * in_per_group) * g->in_size, w + grp * w_group,
                y + (b * g->out_channels + grp * out_per_group) * g->out_size, mem);
        }
        if (bias) add_bias_f32(y + b * g->out_channels * g->out_size, bias, g->out_channels,
                               g->out_size);
    }
}

/* ---- Direct convolution (reference, every dtype) ------------------------------------- */

/* A running sum in the dtype's accumulator: double for floats, modulo 2^64 for ints. */
typedef struct conv_sum {
    int is_float;
    double f;
    uint64_t u;
} conv_sum;

static void conv_sum_add(conv_sum *s, const tm_tensor *x, int64_t ix, const tm_tensor *w,
                         int64_t iw) {
    if (s->is_float)
        s->f += tm_load_f64(x->data, x->dtype, (size_t)ix) * tm_load_f64(w->data, w->dtype, (size_t)iw);
    else
        s->u += load_wrapped(x->data, x->dtype, ix) * load_wrapped(w->data, w->dtype, iw);
}

static void conv_sum_store(conv_sum *s, const tm_tensor *bias, int64_t channel, tm_tensor *y,
                           int64_t iy) {
    if (s->is_float) {
        if (bias) s->f += tm_load_f64(bias->data, bias->dtype, (size_t)channel);
        tm_store_f64(y->data, y->dtype, (size_t)iy, s->f);
    } else {
        if (bias) s->u += load_wrapped(bias->data, bias->dtype, channel);
        store_wrapped(y->data, y->dtype, iy, s->u);
    }
}

/* Flat index into the `in` grid of the input point that output point `o` with kernel
 * offset `offset` reads, or -1 when it falls in the padding (or, for the transpose,
 * between strides). */
static int64_t conv_source(const conv_geom *g, int transpose, const int64_t *o,
                           const int64_t *offset) {
    int64_t flat = 0;
    for (int d = 0; d < g->n; d++) {
        int64_t s;
        if (transpose) {
            int64_t t = o[d] + g->pad_begin[d] - offset[d] * g->dilation[d];
            if (t < 0 || t % g->stride[d] != 0) return -1;
            s = t / g->stride[d];
        } else {
            s = o[d] * g->stride[d] - g->pad_begin[d] + offset[d] * g->dilation[d];
        }
        if (s < 0 || s >= g->in[d]) return -1;
        flat = flat * g->in[d] + s;
    }
    return flat;
}

/* One output element: the sum over the group's input channels and the kernel. */
static void conv_direct_point(const conv_geom *g, int transpose, const tm_tensor *x,
                              const tm_tensor *w, int64_t b, int64_t m, const int64_t *o,
                              conv_sum *sum) {
    int64_t in_per_group = g->in_channels / g->group;
    int64_t out_per_group = g->out_channels / g->group;
    int64_t grp = m / out_per_group, m_in_group = m % out_per_group;
    for (int64_t c = 0; c < in_per_group; c++) {
        int64_t channel = grp * in_per_group + c;
        int64_t x_plane = (b * g->in_channels + channel) * g->in_size;
        int64_t w_base = transpose ? (channel * out_per_group + m_in_group) * g->kernel_size
                                   : (m * in_per_group + c) * g->kernel_size;
        int64_t offset[TM_MAX_RANK] = {0};
        for (int64_t kk = 0; kk < g->kernel_size; kk++) {
            int64_t s = conv_source(g, transpose, o, offset);
            if (s >= 0) conv_sum_add(sum, x, x_plane + s, w, w_base + kk);
            next_index(g->n, g->kernel, offset);
        }
    }
}

static void conv_direct(const conv_geom *g, int transpose, const tm_tensor *x,
                        const tm_tensor *w, const tm_tensor *bias, tm_tensor *y) {
    int is_float = tm_dtype_is_float(y->dtype);
    for (int64_t b = 0; b < g->batch; b++) {
        for (int64_t m = 0; m < g->out_channels; m++) {
            int64_t o[TM_MAX_RANK] = {0};
            int64_t y_plane = (b * g->out_channels + m) * g->out_size;
            for (int64_t p = 0; p < g->out_size; p++) {
                conv_sum sum = {is_float, 0.0, 0};
                conv_direct_point(g, transpose, x, w, b, m, o, &sum);
                conv_sum_store(&sum, bias, m, y, y_plane + p);
                next_index(g->n, g->out, o);
            }
        }
    }
}

static tm_status conv_kernel(const tm_kcall *kc, int transpose) {
    const tm_tensor *x = kc->in[0], *w = kc->in[1];
    const tm_tensor *bias = kc->nin > 2 ? kc->in[2] : NULL;
    tm_tensor *y = kc->out[0];
    conv_geom g;
    char why[700];
    tm_status s = conv_geom_read(kc->a, transpose, x->rank, x->dims, w->rank, w->dims, &g, why,
                                 sizeof why);
    if (s != TM_OK) return tm__fail(kc->err, s, "%s", why);
    if (y->dtype != TM_FLOAT || tm_use_reference_kernels()) {
        conv_direct(&g, transpose, x, w, bias, y);
        return TM_OK;
    }
    size_t col_bytes = conv_col_bytes(&g, transpose);
    size_t gemm_bytes = conv_sgemm_bytes(&g, transpose);
    if (kc->scratch_bytes < col_bytes + gemm_bytes)
        return tm__fail(kc->err, TM_ERR_RUNTIME, "internal: conv scratch too small");
    conv_mem mem = {kc->scratch, gemm_bytes ? (char *)kc->scratch + col_bytes : NULL, kc->pool};
    const float *bias_data = bias ? bias->data : NULL;
    if (transpose) conv_transpose_f32(&g, x->data, w->data, bias_data, y->data, &mem);
    else conv_f32(&g, x->data, w->data, bias_data, y->data, &mem);
    return TM_OK;
}

tm_status tm__kernel_conv(const tm_kcall *kc) { return conv_kernel(kc, 0); }
tm_status tm__kernel_conv_transpose(const tm_kcall *kc) { return conv_kernel(kc, 1); }

/* ---- POOL and MAXPOOL_INDICES ------------------------------------------------------------- */

enum { POOL_MAX = 0, POOL_AVERAGE = 1, POOL_LP = 2 };

typedef struct pool_geom {
    int n, kind, count_include_pad, ceil_mode, column_major;
    int64_t p;
    int64_t batch, channels;
    int64_t in[TM_MAX_RANK], kernel[TM_MAX_RANK], out[TM_MAX_RANK];
    int64_t stride[TM_MAX_RANK], pad_begin[TM_MAX_RANK], pad_end[TM_MAX_RANK];
    int64_t dilation[TM_MAX_RANK];
    int64_t in_size, out_size;
} pool_geom;

/* Output length of one axis. With ceil_mode the last window may overhang the end
 * padding, but it must start inside the input or the begin padding. */
static int64_t pool_out_dim(const pool_geom *g, int d) {
    int64_t extent = (g->kernel[d] - 1) * g->dilation[d] + 1;
    int64_t span = g->in[d] + g->pad_begin[d] + g->pad_end[d] - extent;
    if (span < 0) return -1;
    int64_t out = (g->ceil_mode ? (span + g->stride[d] - 1) / g->stride[d] : span / g->stride[d]) + 1;
    if (g->ceil_mode && (out - 1) * g->stride[d] >= g->in[d] + g->pad_begin[d]) out--;
    return out;
}

static tm_status pool_geom_read(const tm_args *a, int with_indices, int rank,
                                const int64_t *dims, pool_geom *g, char *why, size_t why_cap) {
    char tx[160];
    memset(g, 0, sizeof *g);
    int64_t n = a->i[0];
    dims_text(tx, sizeof tx, rank, dims);
    if (n < 1 || n > TM_MAX_RANK - 2 || rank != n + 2) {
        snprintf(why, why_cap, "pool: spatial rank %lld does not fit input %s (rank must be "
                 "spatial rank + 2, spatial rank in [1, %d])", (long long)n, tx, TM_MAX_RANK - 2);
        return TM_ERR_SHAPE;
    }
    g->n = (int)n;
    g->kind = with_indices ? POOL_MAX : (int)a->i[1];
    g->count_include_pad = a->i[2] != 0;
    g->ceil_mode = a->i[3] != 0;
    g->p = a->i[4];
    g->column_major = with_indices && a->i[5 + 5 * g->n] == 1;
    if (g->kind < POOL_MAX || g->kind > POOL_LP || (g->kind == POOL_LP && g->p < 1)) {
        snprintf(why, why_cap, "pool: kind %lld (p %lld) is not max (0), average (1) or lp (2) "
                 "with p >= 1", (long long)a->i[1], (long long)g->p);
        return TM_ERR_UNSUPPORTED;
    }
    g->batch = dims[0];
    g->channels = dims[1];
    g->in_size = g->out_size = 1;
    for (int d = 0; d < g->n; d++) {
        g->in[d] = dims[2 + d];
        g->kernel[d] = a->i[5 + d];
        g->stride[d] = a->i[5 + g->n + d];
        g->pad_begin[d] = a->i[5 + 2 * g->n + d];
        g->pad_end[d] = a->i[5 + 3 * g->n + d];
        g->dilation[d] = a->i[5 + 4 * g->n + d];
        if (g->kernel[d] < 1 || g->stride[d] < 1 || g->dilation[d] < 1 || g->pad_begin[d] < 0
            || g->pad_end[d] < 0) {
            snprintf(why, why_cap, "pool: spatial axis %d: kernel %lld, stride %lld and "
                     "dilation %lld must be >= 1, pads %lld/%lld >= 0", d,
                     (long long)g->kernel[d], (long long)g->stride[d],
                     (long long)g->dilation[d], (long long)g->pad_begin[d],
                     (long long)g->pad_end[d]);
            return TM_ERR_SHAPE;
        }
        g->out[d] = pool_out_dim(g, d);
        if (g->out[d] < 0) {
            snprintf(why, why_cap, "pool: spatial axis %d: the window (kernel %lld, dilation "
                     "%lld) is larger than input %s with pads %lld/%lld", d,
                     (long long)g->kernel[d], (long long)g->dilation[d], tx,
                     (long long)g->pad_begin[d], (long long)g->pad_end[d]);
            return TM_ERR_SHAPE;
        }
        g->in_size *= g->in[d];
        g->out_size *= g->out[d];
    }
    return TM_OK;
}

tm_status tm__shape_pool(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                         int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)nin;
    const tm_vinfo *x = in[0];
    if (!is_numeric(x->dtype))
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "pool: dtype %s is not supported",
                           tm_dtype_name(x->dtype));
    pool_geom g;
    char why[700];
    tm_status s = pool_geom_read(a, prim == TM_P_MAXPOOL_INDICES, x->rank, x->dims, &g, why,
                                 sizeof why);
    if (s != TM_OK) return tm_ctx_fail(c, s, "%s", why);
    if (g.kind != POOL_MAX && !tm_dtype_is_float(x->dtype))
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "pool: %s pooling of %s is not supported",
                           g.kind == POOL_MAX ? "max" : g.kind == POOL_AVERAGE ? "average" : "lp",
                           tm_dtype_name(x->dtype));
    for (int i = 0; i < nout; i++) {
        out[i].dtype = i == 0 ? x->dtype : TM_INT64;
        out[i].rank = x->rank;
        out[i].dims[0] = g.batch;
        out[i].dims[1] = g.channels;
        for (int d = 0; d < g.n; d++) out[i].dims[2 + d] = g.out[d];
    }
    *scratch = 0;
    return TM_OK;
}

/* The part of one axis's window that lies inside the input: kernel taps [lo, hi). */
static void pool_taps(const pool_geom *g, int d, int64_t o, int64_t bound_begin,
                      int64_t bound_end, int64_t *lo, int64_t *hi) {
    int64_t start = o * g->stride[d] - g->pad_begin[d];
    *lo = min_i64(first_reaching(start, g->dilation[d], bound_begin), g->kernel[d]);
    *hi = max_i64(*lo, min_i64(first_reaching(start, g->dilation[d], bound_end), g->kernel[d]));
}

/* The reduction of one window in the widest type of its dtype class. */
typedef struct pool_acc {
    int cls;           /* 0 float, 1 signed, 2 unsigned */
    double best, sum;
    int64_t best_signed;
    uint64_t best_unsigned;
    int64_t best_at;   /* row-major spatial index of the maximum, -1 when none */
} pool_acc;

static void pool_visit(const pool_geom *g, pool_acc *acc, const tm_tensor *x, int64_t plane,
                       int64_t at) {
    int64_t i = plane + at;
    if (acc->cls == 1) {
        int64_t v = tm_load_i64(x->data, x->dtype, (size_t)i);
        if (acc->best_at < 0 || v > acc->best_signed) acc->best_signed = v, acc->best_at = at;
        return;
    }
    if (acc->cls == 2) {
        uint64_t v = tm_load_u64(x->data, x->dtype, (size_t)i);
        if (acc->best_at < 0 || v > acc->best_unsigned) acc->best_unsigned = v, acc->best_at = at;
        return;
    }
    double v = tm_load_f64(x->data, x->dtype, (size_t)i);
    if (g->kind == POOL_MAX) {
        /* NaNs never win, as in ONNX Runtime; an all -inf window reports its first tap. */
        if (acc->best_at < 0) acc->best_at = at;
        if (v > acc->best) acc->best = v, acc->best_at = at;
    } else if (g->kind == POOL_AVERAGE) {
        acc->sum += v;
    } else {
        acc->sum += g->p == 1 ? fabs(v) : g->p == 2 ? v * v : pow(fabs(v), (double)g->p);
    }
}

/* pool_visit for the taps [lo, hi) of one f32 row, without a call per element. */
static void pool_run_f32(const pool_geom *g, pool_acc *acc, const float *plane, int64_t first,
                         int64_t lo, int64_t hi, int64_t step) {
    if (g->kind == POOL_MAX) {
        float best = (float)acc->best;
        int64_t best_at = acc->best_at < 0 && lo < hi ? first + lo * step : acc->best_at;
        for (int64_t t = lo; t < hi; t++) {
            /* Selects rather than branches: which tap wins is unpredictable. */
            float v = plane[first + t * step];
            int better = v > best;
            best = better ? v : best;
            best_at = better ? first + t * step : best_at;
        }
        acc->best = best;
        acc->best_at = best_at;
        return;
    }
    double sum = 0.0;
    if (g->kind == POOL_AVERAGE)
        for (int64_t t = lo; t < hi; t++) sum += plane[first + t * step];
    else if (g->p == 2)
        for (int64_t t = lo; t < hi; t++) sum += (double)plane[first + t * step] * plane[first + t * step];
    else
        for (int64_t t = lo; t < hi; t++) sum += pow(fabs((double)plane[first + t * step]), (double)g->p);
    acc->sum += sum;
}

/* Visits the taps of the window of output point o inside the input; returns how many
 * positions the average divides by. */
static int64_t pool_window(const pool_geom *g, const int64_t *o, const tm_tensor *x,
                           int64_t plane, pool_acc *acc) {
    int64_t lo[TM_MAX_RANK], hi[TM_MAX_RANK], tap[TM_MAX_RANK];
    int64_t inside = 1, padded = 1;
    for (int d = 0; d < g->n; d++) {
        pool_taps(g, d, o[d], 0, g->in[d], &lo[d], &hi[d]);
        inside *= hi[d] - lo[d];
        tap[d] = lo[d];
        if (g->count_include_pad) {
            /* Positions past the end padding (ceil_mode's overhang) never count. */
            int64_t padded_lo, padded_hi;
            pool_taps(g, d, o[d], -g->pad_begin[d], g->in[d] + g->pad_end[d], &padded_lo,
                      &padded_hi);
            padded *= padded_hi - padded_lo;
        }
    }
    if (inside == 0) return g->count_include_pad ? padded : 0;
    int last = g->n - 1;
    for (;;) {
        int64_t base = 0;
        for (int d = 0; d < last; d++)
            base = (base + o[d] * g->stride[d] - g->pad_begin[d] + tap[d] * g->dilation[d])
                   * g->in[d + 1];
        int64_t first = base + o[last] * g->stride[last] - g->pad_begin[last];
        if (x->dtype == TM_FLOAT)
            pool_run_f32(g, acc, (const float *)x->data + plane, first, lo[last], hi[last],
                         g->dilation[last]);
        else
            for (int64_t t = lo[last]; t < hi[last]; t++)
                pool_visit(g, acc, x, plane, first + t * g->dilation[last]);
        int d = last - 1;
        for (; d >= 0; d--) {
            if (++tap[d] < hi[d]) break;
            tap[d] = lo[d];
        }
        if (d < 0) break;
    }
    return g->count_include_pad ? padded : inside;
}

/* Row-major spatial index to the flat index ONNX reports (column-major if asked). */
static int64_t pool_index(const pool_geom *g, int64_t at) {
    if (!g->column_major) return at;
    int64_t index[TM_MAX_RANK], flat = 0;
    unravel(g->n, g->in, at, index);
    for (int d = g->n - 1; d >= 0; d--) flat = flat * g->in[d] + index[d];
    return flat;
}

static void pool_store(const pool_geom *g, const pool_acc *acc, int64_t count, tm_tensor *y,
                       int64_t i) {
    if (acc->cls == 1) {
        tm_store_i64(y->data, y->dtype, (size_t)i, acc->best_signed);
        return;
    }
    if (acc->cls == 2) {
        tm_store_u64(y->data, y->dtype, (size_t)i, acc->best_unsigned);
        return;
    }
    double v = acc->best;
    if (g->kind == POOL_AVERAGE) v = count ? acc->sum / (double)count : NAN;
    else if (g->kind == POOL_LP)
        v = g->p == 1 ? acc->sum : g->p == 2 ? sqrt(acc->sum) : pow(acc->sum, 1.0 / (double)g->p);
    if (y->dtype == TM_FLOAT) ((float *)y->data)[i] = (float)v;
    else tm_store_f64(y->data, y->dtype, (size_t)i, v);
}

/* Average pooling of f32 over 2-D windows that all lie inside the input (no dilation):
 * the sums pool_window makes in its order (a double per window row, added to the
 * window's double sum), without its bookkeeping per output point. 0 when the geometry is
 * not that. */
static int pool_average_inside_2d(const pool_geom *g, const float *x, float *y) {
    if (g->n != 2 || g->kind != POOL_AVERAGE) return 0;
    for (int d = 0; d < 2; d++)
        if (g->dilation[d] != 1 || g->pad_begin[d] != 0 || g->out[d] < 1 ||
            (g->out[d] - 1) * g->stride[d] + g->kernel[d] > g->in[d])
            return 0;
    int64_t iw = g->in[1], kh = g->kernel[0], kw = g->kernel[1];
    double count = (double)(kh * kw);
    for (int64_t plane = 0; plane < g->batch * g->channels; plane++) {
        const float *xp = x + plane * g->in_size;
        float *yp = y + plane * g->out_size;
        for (int64_t oy = 0; oy < g->out[0]; oy++)
            for (int64_t ox = 0; ox < g->out[1]; ox++) {
                const float *w = xp + oy * g->stride[0] * iw + ox * g->stride[1];
                double sum = 0.0;
                for (int64_t ky = 0; ky < kh; ky++) {
                    double row = 0.0;
                    for (int64_t kx = 0; kx < kw; kx++) row += w[ky * iw + kx];
                    sum += row;
                }
                yp[oy * g->out[1] + ox] = (float)(sum / count);
            }
    }
    return 1;
}

tm_status tm__kernel_pool(const tm_kcall *kc) {
    const tm_tensor *x = kc->in[0];
    tm_tensor *y = kc->out[0];
    int64_t *indices = kc->nout > 1 ? kc->out[1]->data : NULL;
    pool_geom g;
    char why[700];
    tm_status s = pool_geom_read(kc->a, kc->prim == TM_P_MAXPOOL_INDICES, x->rank, x->dims, &g,
                                 why, sizeof why);
    if (s != TM_OK) return tm__fail(kc->err, s, "%s", why);
    if (x->dtype == TM_FLOAT && y->dtype == TM_FLOAT && !indices &&
        pool_average_inside_2d(&g, x->data, y->data))
        return TM_OK;
    int cls = tm_dtype_is_float(x->dtype) ? 0 : tm_dtype_is_signed_int(x->dtype) ? 1 : 2;
    for (int64_t plane = 0; plane < g.batch * g.channels; plane++) {
        int64_t o[TM_MAX_RANK] = {0};
        for (int64_t p = 0; p < g.out_size; p++) {
            pool_acc acc = {cls, -INFINITY, 0.0, 0, 0, -1};
            int64_t count = pool_window(&g, o, x, plane * g.in_size, &acc);
            int64_t i = plane * g.out_size + p;
            pool_store(&g, &acc, count, y, i);
            if (indices)
                indices[i] = acc.best_at < 0 ? -1 : plane * g.in_size + pool_index(&g, acc.best_at);
            next_index(g.n, g.out, o);
        }
    }
    return TM_OK;
}

/* ---- CONV_PACKED ------------------------------------------------------------------------
 * A float32 convolution made by passes/conv.c: weights packed once into the GEMM
 * micro-kernel's row panels and multiplied by panels packed straight from the image (an
 * implicit GEMM: no im2col matrix), or a depthwise kernel computed directly row by row;
 * bias, chain and residual in the epilogue. */

enum { CP_WDIMS = 20, CP_KIND = 28, CP_PANEL = 29, CP_DEPTH = 30, CP_BIAS = 31,
       CP_RESIDUAL = 32, CP_CHAIN = 33 };
/* CP_SHUFFLE: a CONV_TRANSPOSE whose kernel equals its stride (no pads, dilation or
 * output padding, one group, two spatial dims): each input position feeds its own
 * kh x kw output block, so it is one GEMM, rows (m, a, b) = M * kh * kw by the input's
 * positions, whose results are scattered into place (a pixel shuffle). w is that GEMM's
 * (M * kh * kw, C) matrix, packed; the args are CONV_TRANSPOSE's. */
enum { CP_GEMM = 0, CP_DEPTHWISE = 1, CP_SHUFFLE = 2 };

/* The geometry from the args (the weight's dims are kept there: w may be packed). */
static tm_status conv_packed_geom(const tm_args *a, int rank_x, const int64_t *dims_x,
                                  conv_geom *g, char *why, size_t cap) {
    int64_t n = a->i[0];
    if (n < 1 || n > TM_MAX_RANK - 2) {
        snprintf(why, cap, "conv_packed: bad spatial rank %lld", (long long)n);
        return TM_ERR_INVALID_ARGUMENT;
    }
    int shuffle = a->i[CP_KIND] == CP_SHUFFLE;
    tm_status s = conv_geom_read(a, shuffle, rank_x, dims_x, (int)n + 2, a->i + CP_WDIMS, g,
                                 why, cap);
    if (s == TM_OK && shuffle) {
        int ok = g->n == 2 && g->group == 1;
        for (int d = 0; ok && d < g->n; d++)
            ok = g->stride[d] == g->kernel[d] && !g->pad_begin[d] && !g->pad_end[d] &&
                 g->dilation[d] == 1 && !g->out_pad[d];
        if (!ok) {
            snprintf(why, cap, "conv_packed: the shuffle form needs a 2-D transpose with "
                     "stride = kernel and nothing else");
            return TM_ERR_INVALID_ARGUMENT;
        }
    }
    return s;
}

static size_t conv_gemm_scratch(const conv_geom *g, int64_t depth);

/* Outputs of at most this many positions take conv_packed_small; its scratch: the image's
 * columns, (K_g, positions). */
#define SMALL_OUT 8
static size_t conv_small_scratch(const conv_geom *g) {
    return (size_t)(g->in_channels / g->group * g->kernel_size * g->out_size) * sizeof(float) + 64;
}
static int64_t depthwise_work_floats(const conv_geom *g);

/* CP_SHUFFLE's scratch: the row offsets, then a (rows x 64) buffer per slice. */
static size_t shuffle_scratch(const conv_geom *g) {
    size_t rows = (size_t)(g->out_channels * g->kernel_size);
    return (size_t)g->in_channels * sizeof(int64_t) + 128 +
           (size_t)CONV_GEMM_SLICES * rows * 64 * sizeof(float);
}

static int conv_packed_depthwise_ok(const conv_geom *g) {
    return g->group == g->in_channels && g->out_channels == g->in_channels;
}

tm_status tm__shape_conv_packed(tm_ctx *c, int prim, const tm_args *a,
                                const tm_vinfo *const *in, int nin, tm_vinfo *out, int nout,
                                size_t *scratch) {
    (void)prim; (void)nout;
    int with_bias = a->i[CP_BIAS] != 0, with_residual = a->i[CP_RESIDUAL] != 0;
    int kind = (int)a->i[CP_KIND];
    tm_chain ch;
    if (!tm__chain_decode(a->i + CP_CHAIN, TM_ARGS_MAX_I - CP_CHAIN, &ch) ||
        (kind != CP_GEMM && kind != CP_DEPTHWISE && kind != CP_SHUFFLE) || a->i[CP_PANEL] < 1 ||
        a->i[CP_PANEL] > 64 || a->i[CP_DEPTH] < 1)
        return tm_ctx_fail(c, TM_ERR_INVALID_ARGUMENT, "conv_packed: bad arguments");
    if (nin != 2 + with_bias + with_residual)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "conv_packed: expected %d inputs, got %d",
                           2 + with_bias + with_residual, nin);
    for (int i = 0; i < nin; i++)
        if (in[i]->dtype != TM_FLOAT)
            return tm_ctx_fail(c, TM_ERR_DTYPE, "conv_packed: input %d is %s, not float32", i,
                               tm_dtype_name(in[i]->dtype));
    conv_geom g;
    char why[700];
    tm_status s = conv_packed_geom(a, in[0]->rank, in[0]->dims, &g, why, sizeof why);
    if (s != TM_OK) return tm_ctx_fail(c, s, "%s", why);
    int64_t m_g = g.out_channels / g.group, k_g = g.in_channels / g.group * g.kernel_size;
    int64_t want = kind == CP_GEMM
                       ? g.group * (int64_t)tm_sgemm_packed_floats(m_g, k_g, (int)a->i[CP_PANEL])
                   : kind == CP_SHUFFLE
                       ? (int64_t)tm_sgemm_packed_floats(g.out_channels * g.kernel_size,
                                                         g.in_channels, (int)a->i[CP_PANEL])
                       : g.out_channels * g.kernel_size;
    if (tm_numel(in[1]->rank, in[1]->dims) != want || (kind == CP_DEPTHWISE && !conv_packed_depthwise_ok(&g)))
        return tm_ctx_fail(c, TM_ERR_SHAPE, "conv_packed: the weight does not fit the geometry");
    if (with_bias && (in[2]->rank != 1 || in[2]->dims[0] != g.out_channels))
        return tm_ctx_fail(c, TM_ERR_SHAPE, "conv_packed: bias must be (%lld)",
                           (long long)g.out_channels);
    out->dtype = TM_FLOAT;
    out->rank = g.n + 2;
    out->dims[0] = g.batch;
    out->dims[1] = g.out_channels;
    for (int d = 0; d < g.n; d++) out->dims[2 + d] = g.out[d];
    if (with_residual) {
        const tm_vinfo *r = in[nin - 1];
        if (r->rank != out->rank || memcmp(r->dims, out->dims, (size_t)r->rank * sizeof r->dims[0]))
            return tm_ctx_fail(c, TM_ERR_SHAPE, "conv_packed: the residual must have the output's dims");
    }
    *scratch = 0;
    if (kind == CP_GEMM) {
        *scratch = conv_gemm_scratch(&g, a->i[CP_DEPTH]);
    } else if (kind == CP_SHUFFLE) {
        /* The row offsets, then a (rows x panel) buffer per slice (panel <= 64). */
        *scratch = shuffle_scratch(&g);
    } else {
        /* Per slice: backends/cpu/dwconv.c's work space (none where the reference runs). */
        *scratch = (size_t)(DEPTHWISE_SLICES * depthwise_work_floats(&g)) * sizeof(float);
    }
    return TM_OK;
}

typedef struct conv_packed_call {
    const conv_geom *g;
    const float *x, *w, *bias, *residual;
    float *y;
    const tm_chain *chain;
    int panel, depth;
    float *scratch;
    size_t scratch_bytes;
    tm_pool *pool;
} conv_packed_call;

/* y = chain(row + bias) + residual, over one output row of n values. */
static void finish_row(const conv_packed_call *cp, float *acc, float bias, const float *res,
                       float *y, int64_t n) {
    if (tm__chain_apply_ends(cp->chain, bias, acc, res, y, n)) return;
    for (int64_t i = 0; i < n; i++) acc[i] += bias;
    if (cp->chain->n) tm__chain_apply(cp->chain, acc, acc, n);
    if (res)
        for (int64_t i = 0; i < n; i++) y[i] = acc[i] + res[i];
    else if (y != acc)
        memcpy(y, acc, (size_t)n * sizeof *y);
}

/* Depthwise, one or two spatial dims: each channel's plane by backends/cpu/dwconv.c (a
 * 1-D one as a plane of one row), the epilogue after each block of its rows. */
static int depthwise_geom(const conv_geom *g, tm_dwconv_geom *d) {
    if (g->n == 1)
        *d = (tm_dwconv_geom){1, g->in[0], 1, g->out[0], 1, g->kernel[0], 1, g->stride[0], 1,
                              g->dilation[0], 0, g->pad_begin[0]};
    else if (g->n == 2)
        *d = (tm_dwconv_geom){g->in[0], g->in[1], g->out[0], g->out[1], g->kernel[0],
                              g->kernel[1], g->stride[0], g->stride[1], g->dilation[0],
                              g->dilation[1], g->pad_begin[0], g->pad_begin[1]};
    else
        return 0;
    return tm_dwconv_ok(d);
}

/* Floats of one slice's work space for the depthwise kernel (0: the reference runs). */
static int64_t depthwise_work_floats(const conv_geom *g) {
    tm_dwconv_geom d;
    return depthwise_geom(g, &d) ? (int64_t)tm_dwconv_work_floats(&d) : 0;
}

typedef struct depthwise_job {
    const conv_packed_call *cp;
    tm_dwconv_kernel kernel;
    tm_dwconv_geom geom;
} depthwise_job;

typedef struct depthwise_rows {
    const conv_packed_call *cp;
    float bias, *y;
    const float *res;
    int64_t ow;
} depthwise_rows;

static void depthwise_done(void *arg, int64_t row0, int64_t rows) {
    const depthwise_rows *d = arg;
    float *y = d->y + row0 * d->ow;
    finish_row(d->cp, y, d->bias, d->res ? d->res + row0 * d->ow : NULL, y, rows * d->ow);
}

static void depthwise_slice(void *arg, int ith, int nth) {
    const depthwise_job *job = arg;
    const conv_packed_call *cp = job->cp;
    const conv_geom *g = cp->g;
    int64_t total = g->batch * g->out_channels;
    float *work = cp->scratch + (size_t)ith * tm_dwconv_work_floats(&job->geom);
    for (int64_t t = total * ith / nth; t < total * (ith + 1) / nth; t++) {
        int64_t b = t / g->out_channels, ch = t % g->out_channels;
        int64_t at = (b * g->out_channels + ch) * g->out_size;
        depthwise_rows d = {cp, cp->bias ? cp->bias[ch] : 0.0f, cp->y + at,
                            cp->residual ? cp->residual + at : NULL, job->geom.ow};
        tm_dwconv_plane(job->kernel, &job->geom, cp->x + (b * g->in_channels + ch) * g->in_size,
                        cp->w + ch * g->kernel_size, cp->y + at, work, depthwise_done, &d);
    }
}

/* Plain loops over the packed layout (any kind): the reference kernel. */
/* Plain loops for CP_SHUFFLE: out[m, y kh + a, x kw + b] = sum_c x[c, y, x] w'[(m, a, b), c]. */
static void conv_shuffle_reference(const conv_packed_call *cp) {
    const conv_geom *g = cp->g;
    int64_t rows = g->out_channels * g->kernel_size, kh = g->kernel[0], kw = g->kernel[1];
    int64_t w_in = g->in[1], ow = g->out[1];
    float acc[1];
    for (int64_t b = 0; b < g->batch; b++)
        for (int64_t r = 0; r < rows; r++) {
            int64_t m = r / g->kernel_size, ay = r % g->kernel_size / kw, bx = r % kw;
            for (int64_t p = 0; p < g->in_size; p++) {
                double sum = 0.0;
                for (int64_t c = 0; c < g->in_channels; c++) {
                    int64_t pc = c / cp->depth * cp->depth;
                    int64_t kcb = g->in_channels - pc < cp->depth ? g->in_channels - pc : cp->depth;
                    int64_t height = (rows + cp->panel - 1) / cp->panel * cp->panel;
                    float wv = cp->w[pc * height + r / cp->panel * kcb * cp->panel +
                                     (c - pc) * cp->panel + r % cp->panel];
                    sum += (double)cp->x[(b * g->in_channels + c) * g->in_size + p] * wv;
                }
                acc[0] = (float)sum;
                int64_t at = (b * g->out_channels + m) * g->out_size +
                             (p / w_in * kh + ay) * ow + p % w_in * kw + bx;
                finish_row(cp, acc, cp->bias ? cp->bias[m] : 0.0f,
                           cp->residual ? cp->residual + at : NULL, cp->y + at, 1);
            }
        }
}

static void conv_packed_reference(const conv_packed_call *cp, int kind) {
    if (kind == CP_SHUFFLE) {
        conv_shuffle_reference(cp);
        return;
    }
    const conv_geom *g = cp->g;
    int64_t m_g = g->out_channels / g->group, c_g = g->in_channels / g->group;
    int64_t k_g = c_g * g->kernel_size;
    size_t group_floats = kind == CP_GEMM ? tm_sgemm_packed_floats(m_g, k_g, cp->panel) : 0;
    float acc[1];
    for (int64_t b = 0; b < g->batch; b++)
        for (int64_t m = 0; m < g->out_channels; m++) {
            int64_t grp = m / m_g, row = m % m_g;
            int64_t o[TM_MAX_RANK] = {0};
            for (int64_t p = 0; p < g->out_size; p++) {
                double sum = 0.0;
                for (int64_t ci = 0; ci < c_g; ci++) {
                    const float *xp = cp->x + (b * g->in_channels + grp * c_g + ci) * g->in_size;
                    int64_t offset[TM_MAX_RANK] = {0};
                    for (int64_t kk = 0; kk < g->kernel_size; kk++) {
                        int64_t s = conv_source(g, 0, o, offset);
                        if (s >= 0) {
                            float wv;
                            if (kind == CP_GEMM) {
                                /* Element (ci * K + kk, row) of the group's packed matrix. */
                                int64_t q = ci * g->kernel_size + kk, pc = q / cp->depth * cp->depth;
                                int64_t kcb = k_g - pc < cp->depth ? k_g - pc : cp->depth;
                                int64_t height = (m_g + cp->panel - 1) / cp->panel * cp->panel;
                                wv = cp->w[(size_t)grp * group_floats + (size_t)(pc * height
                                           + row / cp->panel * kcb * cp->panel
                                           + (q - pc) * cp->panel + row % cp->panel)];
                            } else {
                                wv = cp->w[m * g->kernel_size + kk];
                            }
                            sum += (double)xp[s] * wv;
                        }
                        next_index(g->n, g->kernel, offset);
                    }
                }
                acc[0] = (float)sum;
                int64_t at = (b * g->out_channels + m) * g->out_size + p;
                finish_row(cp, acc, cp->bias ? cp->bias[m] : 0.0f,
                           cp->residual ? cp->residual + at : NULL, cp->y + at, 1);
                next_index(g->n, g->out, o);
            }
        }
}

/* Implicit GEMM: W (M_g, K_g) . im2col(x) without the im2col matrix, by one of three
 * paths. Pointwise kernels read x's rows where they lie (through a table of row offsets:
 * tm__sgemm_indirect_fn), and so do stride-1 2-D kernels after x is copied once into a
 * zero-padded buffer (a panel then never crosses an output row, and every row it reads
 * is a run of that buffer). Anything else packs each panel of nr output positions from
 * the image, block by block of depth. The epilogue follows a group of panels. */
enum { CONV_PATH_PACK, CONV_PATH_POINTWISE, CONV_PATH_PADDED };

typedef struct conv_gemm_job {
    const conv_packed_call *cp;
    const tm__sgemm_arch *ar;
    int64_t b, grp, m_g, c_g, k_g;
    int path;
    int64_t panels, panels_per_row, padded_w, padded_rows;
    const float *padded;      /* CONV_PATH_PADDED: this group's padded planes */
    const int64_t *offsets;   /* the indirect paths: row p of B at base + offsets[p] */
    float *panel_space;       /* CONV_PATH_PACK: a panel block per slice */
    size_t panel_floats;
} conv_gemm_job;

/* Floats of one slice's packed panel block (CONV_PATH_PACK). */
static size_t conv_gemm_panel_floats(const tm__sgemm_arch *ar, int64_t k_g, int64_t depth) {
    return (size_t)(min_i64(k_g, depth) * ar->nr);
}

static int conv_gemm_path(const conv_geom *g) {
    if (conv_is_pointwise(g)) return CONV_PATH_POINTWISE;
    if (g->n != 2) return CONV_PATH_PACK;
    for (int d = 0; d < 2; d++)
        if (g->stride[d] != 1 || g->pad_begin[d] < 0 || g->pad_end[d] < 0) return CONV_PATH_PACK;
    return CONV_PATH_PADDED;
}

/* The padded planes' grid: input plus pads (CONV_PATH_PADDED). */
static void conv_padded_grid(const conv_geom *g, int64_t *h, int64_t *w) {
    *h = g->in[0] + g->pad_begin[0] + g->pad_end[0];
    *w = g->in[1] + g->pad_begin[1] + g->pad_end[1];
}

/* Scratch of the implicit GEMM, with nr at most 64: padded planes, the offset table,
 * then a packed panel block per slice. */
static size_t conv_gemm_scratch(const conv_geom *g, int64_t depth) {
    int64_t c_g = g->in_channels / g->group, k_g = c_g * g->kernel_size;
    size_t bytes = (size_t)k_g * sizeof(int64_t) + 64;
    int path = conv_gemm_path(g);
    if (path == CONV_PATH_PADDED) {
        int64_t h, w;
        conv_padded_grid(g, &h, &w);
        bytes += (size_t)(c_g * h * w) * sizeof(float) + 64;
    }
    if (path == CONV_PATH_PACK)
        bytes += (size_t)CONV_GEMM_SLICES * (size_t)min_i64(k_g, depth) * 64 * sizeof(float);
    if (g->out_size <= SMALL_OUT) {   /* conv_packed_small's columns instead */
        size_t small = conv_small_scratch(g);
        if (small > bytes) bytes = small;
    }
    return bytes;
}

typedef float copy_vec __attribute__((vector_size(64), aligned(4), may_alias));
static inline void copy_run(float *restrict d, const float *restrict s, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) *(copy_vec *)(d + i) = *(const copy_vec *)(s + i);
    for (; i < n; i++) d[i] = s[i];
}

/* Where a panel's output positions sit: runs along output rows, and per kernel column
 * the part of each run that reads inside the input row. */
#define PANEL_MAX_PIECES 64
#define PANEL_MAX_TAPS 512
typedef struct panel_piece {
    int64_t oy, t, run;
} panel_piece;

/* Rows [pc, pc + kcb) of im2col(x) for output positions [j0, j0 + cols) into panel (kcb
 * rows of nr floats, zero beyond cols). Row q of im2col is input channel q / K at kernel
 * offset q % K. Two spatial dims: the panel's runs and each kernel column's bounds are
 * worked out once, then every row is a few copies with no division; other ranks (and
 * panels with too many pieces) go point by point. */
static void pack_image_panel(const conv_geom *g, const float *x, int64_t pc, int64_t kcb,
                             int64_t j0, int64_t cols, int nr, float *panel) {
    int64_t ks = g->kernel_size;
    panel_piece piece[PANEL_MAX_PIECES];
    int64_t lo[PANEL_MAX_TAPS], hi[PANEL_MAX_TAPS], start[PANEL_MAX_TAPS];
    int n_pieces = 0, fast = g->n == 2;
    if (fast) {
        int64_t ow = g->out[1];
        for (int64_t t = 0, oy = j0 / ow, ox = j0 % ow; t < cols && fast; oy++, ox = 0) {
            int64_t run = min_i64(cols - t, ow - ox);
            if (n_pieces == PANEL_MAX_PIECES || g->kernel[1] * PANEL_MAX_PIECES > PANEL_MAX_TAPS) {
                fast = 0;
                break;
            }
            piece[n_pieces++] = (panel_piece){oy, t, run};
            for (int64_t kx = 0; kx < g->kernel[1]; kx++) {
                int64_t at = kx * PANEL_MAX_PIECES + n_pieces - 1;
                int64_t st = ox * g->stride[1] - g->pad_begin[1] + kx * g->dilation[1];
                start[at] = st;
                lo[at] = min_i64(first_reaching(st, g->stride[1], 0), run);
                hi[at] = max_i64(lo[at], min_i64(first_reaching(st, g->stride[1], g->in[1]), run));
            }
            t += run;
        }
    }
    if (fast) {
        int64_t kh = g->kernel[0], kw = g->kernel[1], iw = g->in[1], sx = g->stride[1];
        int64_t ci = pc / ks, ky = pc % ks / kw, kx = pc % ks % kw;
        for (int64_t r = 0; r < kcb; r++) {
            float *d = panel + r * nr;
            const float *plane = x + ci * g->in_size;
            for (int p = 0; p < n_pieces; p++) {
                float *seg = d + piece[p].t;
                int64_t run = piece[p].run;
                int64_t iy = piece[p].oy * g->stride[0] - g->pad_begin[0] + ky * g->dilation[0];
                if (iy < 0 || iy >= g->in[0]) {
                    for (int64_t u = 0; u < run; u++) seg[u] = 0.0f;
                    continue;
                }
                int64_t at = kx * PANEL_MAX_PIECES + p, l = lo[at], h = hi[at];
                const float *row = plane + iy * iw + start[at];
                for (int64_t u = 0; u < l; u++) seg[u] = 0.0f;
                if (sx == 1) copy_run(seg + l, row + l, h - l);
                else
                    for (int64_t u = l; u < h; u++) seg[u] = row[u * sx];
                for (int64_t u = h; u < run; u++) seg[u] = 0.0f;
            }
            for (int64_t t = cols; t < nr; t++) d[t] = 0.0f;
            if (++kx == kw) {
                kx = 0;
                if (++ky == kh) {
                    ky = 0;
                    ci++;
                }
            }
        }
        return;
    }
    for (int64_t q = pc; q < pc + kcb; q++) {
        float *d = panel + (q - pc) * nr;
        const float *plane = x + q / ks * g->in_size;
        int64_t offset[TM_MAX_RANK], o[TM_MAX_RANK];
        unravel(g->n, g->kernel, q % ks, offset);
        unravel(g->n, g->out, j0, o);
        for (int64_t t = 0; t < cols; t++) {
            int64_t src = conv_source(g, 0, o, offset);
            d[t] = src >= 0 ? plane[src] : 0.0f;
            next_index(g->n, g->out, o);
        }
        for (int64_t t = cols; t < nr; t++) d[t] = 0.0f;
    }
}

static void conv_gemm_slice(void *arg, int ith, int nth) {
    const conv_gemm_job *job = arg;
    const conv_packed_call *cp = job->cp;
    const conv_geom *g = cp->g;
    const tm__sgemm_arch *ar = job->ar;
    float *panel = job->panel_space ? job->panel_space + (size_t)ith * job->panel_floats : NULL;
    const float *x = cp->x + (job->b * g->in_channels + job->grp * job->c_g) * g->in_size;
    size_t group_floats = tm_sgemm_packed_floats(job->m_g, job->k_g, cp->panel);
    const float *w = cp->w + (size_t)job->grp * group_floats;
    int64_t first = job->b * g->out_channels + job->grp * job->m_g;
    float *y = cp->y + first * g->out_size;
    int64_t height = (job->m_g + ar->mr - 1) / ar->mr * ar->mr;
    int64_t p_end = job->panels * (ith + 1) / nth, group_start = job->panels * ith / nth;
    int64_t e0 = -1;
    for (int64_t pi = group_start; pi < p_end; pi++) {
        int64_t j0, cols;
        const float *base = NULL;
        if (job->path == CONV_PATH_PADDED) {
            int64_t oy = pi / job->panels_per_row, ox = pi % job->panels_per_row * ar->nr;
            j0 = oy * g->out[1] + ox;
            cols = min_i64(ar->nr, g->out[1] - ox);
            base = job->padded + oy * job->padded_w + ox;
        } else {
            j0 = pi * ar->nr;
            cols = min_i64(ar->nr, g->out_size - j0);
            base = x + j0;
        }
        if (e0 < 0) e0 = j0;
        if (job->path == CONV_PATH_PADDED && pi % job->panels_per_row == 0) {
            /* A new output row reads one input row per channel that no panel touched
             * yet: its start, requested now (the micro-kernel prefetches the rest of a row
             * a panel ahead). */
            int64_t hp = job->padded_rows;
            int64_t oy = pi / job->panels_per_row, fresh = oy + (g->kernel[0] - 1) * g->dilation[0];
            for (int64_t ch = 0; fresh < hp && ch < job->c_g; ch++) {
                const float *r = job->padded + (ch * hp + fresh) * job->padded_w;
                for (int64_t q = 0; q < 2 * ar->nr && q < job->padded_w; q += 16)
                    __builtin_prefetch(r + q);
            }
        }
        for (int64_t pc = 0; pc < job->k_g; pc += cp->depth) {
            int64_t kcb = min_i64(cp->depth, job->k_g - pc);
            const float *block = w + pc * height;
            float beta = pc == 0 ? 0.0f : 1.0f;
            if (job->path == CONV_PATH_PACK) pack_image_panel(g, x, pc, kcb, j0, cols, ar->nr, panel);
            for (int64_t i = 0; i < job->m_g; i += ar->mr) {
                int mr = (int)min_i64(ar->mr, job->m_g - i);
                const float *a = block + i / ar->mr * kcb * ar->mr;
                float *c = y + i * g->out_size + j0;
                if (job->path == CONV_PATH_PACK)
                    ar->tile(kcb, a, 1, ar->mr, panel, c, g->out_size, mr, (int)cols, 1.0f, beta);
                else
                    ar->tile_indirect(kcb, a, base, job->offsets + pc, c, g->out_size, mr,
                                      (int)cols, beta);
            }
        }
        /* The epilogue a group of panels at a time: longer rows, less overhead per call,
         * while the group's outputs are still in cache. Panels are consecutive positions. */
        if (pi + 1 - group_start < EPILOGUE_PANELS && pi + 1 < p_end) continue;
        int64_t e1 = j0 + cols;
        for (int64_t i = 0; i < job->m_g; i++) {
            float *row = y + i * g->out_size + e0;
            const float *res = cp->residual ? cp->residual + (first + i) * g->out_size + e0 : NULL;
            finish_row(cp, row, cp->bias ? cp->bias[job->grp * job->m_g + i] : 0.0f, res, row,
                       e1 - e0);
        }
        group_start = pi + 1;
        e0 = -1;
    }
}

/* x's planes of one image and group into the zero-padded buffer. */
static void conv_pad_planes(const conv_geom *g, const float *x, int64_t channels, float *dst) {
    int64_t hp, wp;
    conv_padded_grid(g, &hp, &wp);
    int64_t top = g->pad_begin[0], left = g->pad_begin[1], ih = g->in[0], iw = g->in[1];
    for (int64_t ch = 0; ch < channels; ch++) {
        float *plane = dst + ch * hp * wp;
        const float *src = x + ch * g->in_size;
        memset(plane, 0, (size_t)(top * wp) * sizeof *plane);
        for (int64_t r = 0; r < ih; r++) {
            float *row = plane + (top + r) * wp;
            for (int64_t i = 0; i < left; i++) row[i] = 0.0f;
            memcpy(row + left, src + r * iw, (size_t)iw * sizeof *row);
            for (int64_t i = left + iw; i < wp; i++) row[i] = 0.0f;
        }
        memset(plane + (top + ih) * wp, 0, (size_t)((hp - top - ih) * wp) * sizeof *plane);
    }
}

typedef struct pad_job {
    const conv_geom *g;
    const float *x;
    int64_t channels;
    float *dst;
} pad_job;

static void pad_slice(void *arg, int ith, int nth) {
    const pad_job *j = arg;
    int64_t hp, wp;
    conv_padded_grid(j->g, &hp, &wp);
    int64_t c0 = j->channels * ith / nth, c1 = j->channels * (ith + 1) / nth;
    if (c1 > c0)
        conv_pad_planes(j->g, j->x + c0 * j->g->in_size, c1 - c0, j->dst + c0 * hp * wp);
}

/* ---- Few output positions ---------------------------------------------------------------
 * A convolution whose output has at most SMALL_OUT positions (Silero VAD's, run per 32 ms
 * chunk, has 4, 2 and 1; a classifier head's 1): the GEMM paths above fill panels nr (32)
 * positions wide, so most of every tile's work would be on zero columns. Here the image's
 * columns for all positions are gathered once, (K_g, n), and each row tile of the packed
 * weights is multiplied by them with its mr rows in the vector lanes. The sum over k runs
 * in the tile kernels' order: one product per step of k, block by block of depth, each
 * block's sum added to the rows after the first. */

/* cols (k_g, n): row q is input channel q / K at kernel offset q % K, for every position. */
static void conv_small_columns(const conv_geom *g, const float *x, int64_t k_g, float *cols) {
    int64_t n = g->out_size;
    if (g->n == 1) {
        int64_t ks = g->kernel[0], in = g->in[0];
        for (int64_t q = 0; q < k_g; q++) {
            const float *plane = x + q / ks * in;
            int64_t first = q % ks * g->dilation[0] - g->pad_begin[0];
            for (int64_t t = 0; t < n; t++) {
                int64_t at = first + t * g->stride[0];
                cols[q * n + t] = at >= 0 && at < in ? plane[at] : 0.0f;
            }
        }
        return;
    }
    for (int64_t q = 0; q < k_g; q++) {
        const float *plane = x + q / g->kernel_size * g->in_size;
        int64_t offset[TM_MAX_RANK], o[TM_MAX_RANK] = {0};
        unravel(g->n, g->kernel, q % g->kernel_size, offset);
        for (int64_t t = 0; t < n; t++) {
            int64_t src = conv_source(g, 0, o, offset);
            cols[q * n + t] = src >= 0 ? plane[src] : 0.0f;
            next_index(g->n, g->out, o);
        }
    }
}

/* acc (n, MR) = the row tile a (kcb steps of MR floats) times cols (kcb, n); MR a constant
 * so that the compiler keeps a row tile in vector registers. One rounding a step, as the
 * tile kernels' FMAs (ISO C mode contracts nothing by itself). */
#ifdef __FMA__
#define SMALL_FMA(a, b, c) fmaf(a, b, c)
#else
#define SMALL_FMA(a, b, c) ((a) * (b) + (c))
#endif
#define CONV_SMALL_TILE(MR)                                                                    \
    static void conv_small_tile_##MR(int64_t kcb, const float *restrict a,                   \
                                     const float *restrict cols, int64_t n,                   \
                                     float *restrict out) {                                   \
        float c[SMALL_OUT][MR] = {{0.0f}};                                                    \
        for (int64_t k = 0; k < kcb; k++) {                                                   \
            const float *ak = a + k * MR, *bk = cols + k * n;                                 \
            for (int64_t t = 0; t < n; t++) {                                                 \
                float b = bk[t];                                                              \
                for (int r = 0; r < MR; r++) c[t][r] = SMALL_FMA(ak[r], b, c[t][r]);          \
            }                                                                                 \
        }                                                                                     \
        for (int64_t t = 0; t < n; t++)                                                       \
            for (int r = 0; r < MR; r++) out[t * MR + r] = c[t][r];                           \
    }
CONV_SMALL_TILE(6)
CONV_SMALL_TILE(12)
CONV_SMALL_TILE(16)

static void conv_small_tile_any(int mr, int64_t kcb, const float *a, const float *cols, int64_t n,
                                float *acc) {
    for (int64_t i = 0; i < n * mr; i++) acc[i] = 0.0f;
    for (int64_t k = 0; k < kcb; k++)
        for (int64_t t = 0; t < n; t++)
            for (int r = 0; r < mr; r++)
                acc[t * mr + r] = SMALL_FMA(a[k * mr + r], cols[k * n + t], acc[t * mr + r]);
}

typedef struct conv_small_job {
    const conv_packed_call *cp;
    int mr;
    int64_t b, grp, m_g, k_g, tiles;
    const float *cols;
} conv_small_job;

static void conv_small_slice(void *arg, int ith, int nth) {
    const conv_small_job *job = arg;
    const conv_packed_call *cp = job->cp;
    const conv_geom *g = cp->g;
    int mr = job->mr;
    int64_t n = g->out_size, height = (job->m_g + mr - 1) / mr * mr;
    const float *w = cp->w + (size_t)job->grp * tm_sgemm_packed_floats(job->m_g, job->k_g, cp->panel);
    int64_t first = job->b * g->out_channels + job->grp * job->m_g;
    float acc[SMALL_OUT * 16], sum[SMALL_OUT * 16];
    for (int64_t tile = job->tiles * ith / nth; tile < job->tiles * (ith + 1) / nth; tile++) {
        int64_t i = tile * mr;
        for (int64_t pc = 0; pc < job->k_g; pc += cp->depth) {
            int64_t kcb = min_i64(cp->depth, job->k_g - pc);
            const float *a = w + pc * height + i / mr * kcb * mr, *cols = job->cols + pc * n;
            float *into = pc == 0 ? sum : acc;
            if (mr == 12) conv_small_tile_12(kcb, a, cols, n, into);
            else if (mr == 6) conv_small_tile_6(kcb, a, cols, n, into);
            else if (mr == 16) conv_small_tile_16(kcb, a, cols, n, into);
            else conv_small_tile_any(mr, kcb, a, cols, n, into);
            if (pc)
                for (int64_t e = 0; e < n * mr; e++) sum[e] += acc[e];
        }
        int rows = (int)min_i64(mr, job->m_g - i);
        for (int r = 0; r < rows; r++) {
            int64_t row = first + i + r;
            float *y = cp->y + row * n;
            for (int64_t t = 0; t < n; t++) y[t] = sum[t * mr + r];
            finish_row(cp, y, cp->bias ? cp->bias[job->grp * job->m_g + i + r] : 0.0f,
                       cp->residual ? cp->residual + row * n : NULL, y, n);
        }
    }
}

/* Whether conv_packed_small takes this convolution (its scratch then fits). */
static int conv_small_ok(const conv_packed_call *cp, const tm__sgemm_arch *ar) {
    const conv_geom *g = cp->g;
    return g->out_size <= SMALL_OUT && ar->mr <= 16 && cp->scratch_bytes >= conv_small_scratch(g);
}

static void conv_packed_small(const conv_packed_call *cp, const tm__sgemm_arch *ar) {
    const conv_geom *g = cp->g;
    conv_small_job job = {cp, ar->mr, 0, 0, g->out_channels / g->group,
                          g->in_channels / g->group * g->kernel_size, 0, NULL};
    job.tiles = (job.m_g + ar->mr - 1) / ar->mr;
    float *cols = (float *)(((uintptr_t)cp->scratch + 63) & ~(uintptr_t)63);
    job.cols = cols;
    int slices = (int)min_i64(job.tiles, CONV_GEMM_SLICES);
    if (tm_pool_threads(cp->pool) == 1 ||
        2.0 * (double)job.m_g * (double)g->out_size * (double)job.k_g < CONV_PARALLEL_MIN_FLOPS)
        slices = 1;
    for (job.b = 0; job.b < g->batch; job.b++)
        for (job.grp = 0; job.grp < g->group; job.grp++) {
            conv_small_columns(g, cp->x + (job.b * g->in_channels + job.grp * (g->in_channels / g->group)) *
                                              g->in_size, job.k_g, cols);
            if (slices <= 1) conv_small_slice(&job, 0, 1);
            else tm_pool_run_n(cp->pool, slices, conv_small_slice, &job);
        }
}

static void conv_packed_gemm(const conv_packed_call *cp, const tm__sgemm_arch *ar) {
    const conv_geom *g = cp->g;
    conv_gemm_job job;
    memset(&job, 0, sizeof job);
    job.cp = cp;
    job.ar = ar;
    job.m_g = g->out_channels / g->group;
    job.c_g = g->in_channels / g->group;
    job.k_g = job.c_g * g->kernel_size;
    job.path = conv_gemm_path(g);
    /* Scratch: offsets, then the padded planes or the panel blocks. */
    int64_t *offsets = (int64_t *)(((uintptr_t)cp->scratch + 63) & ~(uintptr_t)63);
    float *rest = (float *)(((uintptr_t)(offsets + job.k_g) + 63) & ~(uintptr_t)63);
    job.offsets = offsets;
    int64_t hp = 0, wp = 0;
    if (job.path == CONV_PATH_PADDED) {
        conv_padded_grid(g, &hp, &wp);
        job.padded_w = wp;
        job.padded_rows = hp;
        job.panels_per_row = (g->out[1] + ar->nr - 1) / ar->nr;
        job.panels = g->out[0] * job.panels_per_row;
        for (int64_t ch = 0, p = 0; ch < job.c_g; ch++)
            for (int64_t ky = 0; ky < g->kernel[0]; ky++)
                for (int64_t kx = 0; kx < g->kernel[1]; kx++)
                    offsets[p++] = ch * hp * wp + ky * g->dilation[0] * wp + kx * g->dilation[1];
    } else {
        job.panels = (g->out_size + ar->nr - 1) / ar->nr;
        for (int64_t p = 0; p < job.k_g; p++) offsets[p] = p * g->in_size;
        if (job.path == CONV_PATH_PACK) {
            job.panel_space = rest;
            job.panel_floats = conv_gemm_panel_floats(ar, job.k_g, cp->depth);
        }
    }
    int slices = (int)min_i64(job.panels, CONV_GEMM_SLICES);
    if (tm_pool_threads(cp->pool) == 1 ||
        2.0 * (double)job.m_g * (double)g->out_size * (double)job.k_g < CONV_PARALLEL_MIN_FLOPS)
        slices = 1;
    for (job.b = 0; job.b < g->batch; job.b++)
        for (job.grp = 0; job.grp < g->group; job.grp++) {
            if (job.path == CONV_PATH_PADDED) {
                pad_job pj = {g, cp->x + (job.b * g->in_channels + job.grp * job.c_g) * g->in_size,
                              job.c_g, rest};
                if (slices <= 1 || job.c_g < 2) pad_slice(&pj, 0, 1);
                else tm_pool_run_n(cp->pool, (int)min_i64(job.c_g, DEPTHWISE_SLICES), pad_slice, &pj);
                job.padded = rest;
            }
            if (slices <= 1) conv_gemm_slice(&job, 0, 1);
            else tm_pool_run_n(cp->pool, slices, conv_gemm_slice, &job);
        }
}

typedef struct shuffle_job {
    const conv_packed_call *cp;
    const tm__sgemm_arch *ar;
    const int64_t *offsets;   /* row c of B (input channel c) at x + offsets[c] */
    float *buffers;           /* a (rows x nr) buffer per slice */
    int64_t b, panels;
} shuffle_job;

/* Panels of nr input positions: every row tile of w' against the panel into a buffer
 * (rows x nr), biases added, the chain run once over the whole buffer, then each row
 * (m, a, b) scattered into its output blocks (kw = 2: the two rows of b interleaved). */
static void shuffle_slice(void *arg, int ith, int nth) {
    const shuffle_job *job = arg;
    const conv_packed_call *cp = job->cp;
    const conv_geom *g = cp->g;
    const tm__sgemm_arch *ar = job->ar;
    int64_t rows = g->out_channels * g->kernel_size, kh = g->kernel[0], kw = g->kernel[1];
    int64_t w_in = g->in[1], ow = g->out[1], depth = g->in_channels, nr = ar->nr;
    const float *x = cp->x + job->b * g->in_channels * g->in_size;
    float *buf = job->buffers + (size_t)ith * (size_t)(rows * nr);
    int64_t target[64];   /* per panel column: its output block's corner */
    for (int64_t pi = job->panels * ith / nth; pi < job->panels * (ith + 1) / nth; pi++) {
        int64_t j0 = pi * nr, cols = min_i64(nr, g->in_size - j0);
        int one_row = j0 / w_in == (j0 + cols - 1) / w_in;
        for (int64_t t = 0; t < cols; t++)
            target[t] = (j0 + t) / w_in * kh * ow + (j0 + t) % w_in * kw;
        for (int64_t i = 0; i < rows; i += ar->mr)
            ar->tile_indirect(depth, cp->w + i * depth, x + j0, job->offsets, buf + i * nr, nr,
                              (int)min_i64(ar->mr, rows - i), (int)cols, 0.0f);
        for (int64_t r = 0; r < rows; r++) {
            float bias = cp->bias ? cp->bias[r / g->kernel_size] : 0.0f;
            for (int64_t t = 0; t < cols; t++) buf[r * nr + t] += bias;
        }
        /* Past cols (a short last panel) the buffer holds stale values the scatter never
         * reads: the chain may run over them. */
        if (cp->chain->n) tm__chain_apply(cp->chain, buf, buf, rows * nr);
        for (int64_t r = 0; r < rows; r++) {
            int64_t m = r / g->kernel_size, ay = r % g->kernel_size / kw, bx = r % kw;
            int64_t plane = (job->b * g->out_channels + m) * g->out_size + ay * ow + bx;
            float *y = cp->y + plane;
            const float *res = cp->residual ? cp->residual + plane : NULL;
            const float *v = buf + r * nr;
            if (kw == 2 && bx == 0 && one_row && !res) {
                /* Rows (m, a, 0) and (m, a, 1) side by side: one contiguous run. */
                const float *v1 = v + nr;
                float *out = y + target[0];
                for (int64_t t = 0; t < cols; t++) {
                    out[2 * t] = v[t];
                    out[2 * t + 1] = v1[t];
                }
                r++;
                continue;
            }
            if (res)
                for (int64_t t = 0; t < cols; t++) y[target[t]] = v[t] + res[target[t]];
            else
                for (int64_t t = 0; t < cols; t++) y[target[t]] = v[t];
        }
    }
}

static void conv_packed_shuffle(const conv_packed_call *cp, const tm__sgemm_arch *ar) {
    const conv_geom *g = cp->g;
    int64_t *offsets = (int64_t *)(((uintptr_t)cp->scratch + 63) & ~(uintptr_t)63);
    for (int64_t c = 0; c < g->in_channels; c++) offsets[c] = c * g->in_size;
    float *buffers = (float *)(((uintptr_t)(offsets + g->in_channels) + 63) & ~(uintptr_t)63);
    shuffle_job job = {cp, ar, offsets, buffers, 0, (g->in_size + ar->nr - 1) / ar->nr};
    int64_t rows = g->out_channels * g->kernel_size;
    int slices = (int)min_i64(job.panels, CONV_GEMM_SLICES);
    if (tm_pool_threads(cp->pool) == 1 ||
        2.0 * (double)rows * (double)g->in_size * (double)g->in_channels < CONV_PARALLEL_MIN_FLOPS)
        slices = 1;
    for (job.b = 0; job.b < g->batch; job.b++) {
        if (slices <= 1) shuffle_slice(&job, 0, 1);
        else tm_pool_run_n(cp->pool, slices, shuffle_slice, &job);
    }
}

tm_status tm__kernel_conv_packed(const tm_kcall *kc) {
    const tm_args *a = kc->a;
    int with_bias = a->i[CP_BIAS] != 0, with_residual = a->i[CP_RESIDUAL] != 0;
    int kind = (int)a->i[CP_KIND];
    const tm_tensor *x = kc->in[0];
    conv_geom g;
    char why[700];
    tm_status s = conv_packed_geom(a, x->rank, x->dims, &g, why, sizeof why);
    if (s != TM_OK) return tm__fail(kc->err, s, "%s", why);
    tm_chain ch;
    if (!tm__chain_decode(a->i + CP_CHAIN, TM_ARGS_MAX_I - CP_CHAIN, &ch))
        return tm__fail(kc->err, TM_ERR_INVALID_ARGUMENT, "conv_packed: bad chain");
    conv_packed_call cp = {&g, x->data, kc->in[1]->data, with_bias ? kc->in[2]->data : NULL,
                           with_residual ? kc->in[kc->nin - 1]->data : NULL, kc->out[0]->data,
                           &ch, (int)a->i[CP_PANEL], (int)a->i[CP_DEPTH], kc->scratch,
                           kc->scratch_bytes, kc->pool};
    if (tm_use_reference_kernels()) {
        conv_packed_reference(&cp, kind);
        return TM_OK;
    }
    if (kind == CP_DEPTHWISE) {
        depthwise_job job = {&cp, tm_dwconv_pick(), {0}};
        if (!depthwise_geom(&g, &job.geom)) {
            conv_packed_reference(&cp, kind);
            return TM_OK;
        }
        if (kc->scratch_bytes < (size_t)(DEPTHWISE_SLICES * depthwise_work_floats(&g)) * sizeof(float))
            return tm__fail(kc->err, TM_ERR_RUNTIME, "internal: conv_packed scratch too small");
        int64_t planes = g.batch * g.out_channels;
        int slices = (int)min_i64(planes, DEPTHWISE_SLICES);
        if (tm_pool_threads(kc->pool) == 1 ||
            2.0 * (double)planes * (double)g.out_size * (double)g.kernel_size < CONV_PARALLEL_MIN_FLOPS)
            slices = 1;
        if (slices <= 1) depthwise_slice(&job, 0, 1);
        else tm_pool_run_n(kc->pool, slices, depthwise_slice, &job);
        return TM_OK;
    }
    const tm__sgemm_arch *ar = tm__sgemm_active_arch();
    int64_t k_g = g.in_channels / g.group * g.kernel_size;
    if (!ar || ar->mr != cp.panel) {   /* packed for another micro-kernel */
        conv_packed_reference(&cp, kind);
        return TM_OK;
    }
    if (kind == CP_SHUFFLE) {
        if (cp.depth != g.in_channels || ar->nr > 64 || kc->scratch_bytes < shuffle_scratch(&g)) {
            conv_packed_reference(&cp, kind);
            return TM_OK;
        }
        conv_packed_shuffle(&cp, ar);
        return TM_OK;
    }
    (void)k_g;
    if (kc->scratch_bytes < conv_gemm_scratch(&g, cp.depth))
        return tm__fail(kc->err, TM_ERR_RUNTIME, "internal: conv_packed scratch too small");
    if (conv_small_ok(&cp, ar)) conv_packed_small(&cp, ar);
    else conv_packed_gemm(&cp, ar);
    return TM_OK;
}
