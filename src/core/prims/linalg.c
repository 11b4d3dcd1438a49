/* Matrix products, convolutions and pooling (rows in linalg.def): their shape rules and
 * CPU kernels. Float32 runs through tm_sgemm (packed, threaded over kc->pool); every other
 * dtype through plain loops that accumulate in double or in 64-bit integers.
 * Not the ONNX side: auto_pad, output_shape, MatMulInteger and 1-D matmul operands are
 * turned into these primitives' explicit arguments by the lowerings. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "../ctx.h"
#include "../../backends/cpu/gemm.h"

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

tm_status tm__shape_matmul(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                           int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)prim; (void)nin; (void)nout;
    int ta = a->i[0] != 0, tb = a->i[1] != 0;
    const tm_vinfo *x = in[0], *y = in[1];
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
    out->dims[r - 2] = m;
    out->dims[r - 1] = n;
    *scratch = 0;
    int64_t rows = m;
    if (!ta && matmul_folds_batch(r, y->dims)) rows = tm_numel(r - 2, x->dims) * m;
    if (x->dtype == TM_FLOAT16 || x->dtype == TM_BFLOAT16) {
        /* f32 copies of one product's a, b and c, then the GEMM's packing space. */
        *scratch = (size_t)(rows * k + k * n + rows * n) * sizeof(float);
    }
    if (x->dtype == TM_FLOAT || x->dtype == TM_FLOAT16 || x->dtype == TM_BFLOAT16)
        *scratch += tm_sgemm_scratch(ta, tb, rows, n, k);
    return TM_OK;
}

/* Element strides of an operand: (row, column) of a (m, k) or of b (k, n), whether stored
 * as such or transposed. */
typedef struct mm_layout {
    int ta, tb;
    int64_t a_row, a_col, b_row, b_col;
} mm_layout;

static mm_layout mm_layout_of(int ta, int tb, int64_t m, int64_t n, int64_t k) {
    mm_layout l = {ta, tb, ta ? 1 : k, ta ? m : 1, tb ? 1 : n, tb ? k : 1};
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
            int64_t ic = off_c + i * n + j;
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
static void matmul_one(tm_dtype dt, const void *a, int64_t off_a, const void *b,
                       int64_t off_b, void *c, int64_t off_c, int64_t m, int64_t n, int64_t k,
                       void *scratch, tm_pool *pool, const mm_layout *l) {
    int plain = !l->ta && !l->tb;
    switch (dt) {
    case TM_FLOAT:
        tm_sgemm(l->ta, l->tb, m, n, k, 1.0f, (const float *)a + off_a, l->ta ? m : k,
                 (const float *)b + off_b, l->tb ? k : n, 0.0f, (float *)c + off_c, n, scratch,
                 pool);
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

tm_status tm__kernel_matmul(const tm_kcall *kc) {
    const tm_tensor *x = kc->in[0], *y = kc->in[1];
    tm_tensor *z = kc->out[0];
    int r = z->rank, ta = kc->a->i[0] != 0, tb = kc->a->i[1] != 0;
    int64_t m = z->dims[r - 2], k = x->dims[r - 1 - ta], n = z->dims[r - 1];
    int64_t batch = tm_numel(r - 2, z->dims);
    if (batch == 0 || m == 0 || n == 0) return TM_OK;
    if (!ta && matmul_folds_batch(r, y->dims)) {
        mm_layout l = mm_layout_of(0, tb, batch * m, n, k);
        matmul_one(z->dtype, x->data, 0, y->data, 0, z->data, 0, batch * m, n, k, kc->scratch,
                   kc->pool, &l);
        return TM_OK;
    }
    mm_layout l = mm_layout_of(ta, tb, m, n, k);
    for (int64_t t = 0; t < batch; t++) {
        int64_t off_x, off_y;
        matmul_batch_offsets(x, y, z, t, &off_x, &off_y);
        matmul_one(z->dtype, x->data, off_x, y->data, off_y, z->data, t * m * n, m, n, k,
                   kc->scratch, kc->pool, &l);
    }
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

tm_status tm__kernel_pool(const tm_kcall *kc) {
    const tm_tensor *x = kc->in[0];
    tm_tensor *y = kc->out[0];
    int64_t *indices = kc->nout > 1 ? kc->out[1]->data : NULL;
    pool_geom g;
    char why[700];
    tm_status s = pool_geom_read(kc->a, kc->prim == TM_P_MAXPOOL_INDICES, x->rank, x->dims, &g,
                                 why, sizeof why);
    if (s != TM_OK) return tm__fail(kc->err, s, "%s", why);
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
