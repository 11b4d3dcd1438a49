/* Movement primitives: reshape, transpose, slice, pad, concat, expand, the gathers and
 * scatters, copy. Shape rules and reference kernels that only move elements, for every
 * dtype (strings are copied with strdup); no arithmetic beyond the scatter reductions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif
#include "../ctx.h"
#include "../../backends/cpu/pool.h"
#include "../../backends/cpu/kvmath.h"

enum { PAD_CONSTANT = 0, PAD_REFLECT = 1, PAD_EDGE = 2, PAD_WRAP = 3 };
enum { REDUCE_NONE = 0, REDUCE_ADD = 1, REDUCE_MUL = 2, REDUCE_MAX = 3, REDUCE_MIN = 4 };

/* ---- Small shape helpers -------------------------------------------------------------- */

static int64_t product(const int64_t *dims, int from, int to) {
    int64_t p = 1;
    for (int d = from; d < to; d++) p *= dims[d];
    return p;
}

/* Row-major strides in elements. */
static void strides_of(int rank, const int64_t *dims, int64_t *strides) {
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        strides[d] = s;
        s *= dims[d];
    }
}

/* Steps idx through dims[0..rank), last axis fastest; 0 once it wraps around. */
static int next_index(int64_t *idx, const int64_t *dims, int rank) {
    for (int d = rank - 1; d >= 0; d--) {
        if (++idx[d] < dims[d]) return 1;
        idx[d] = 0;
    }
    return 0;
}

static void set_out(tm_vinfo *out, tm_dtype dt, int rank, const int64_t *dims) {
    out->dtype = dt;
    out->rank = rank;
    for (int d = 0; d < rank; d++) out->dims[d] = dims[d];
}

/* Normalises a possibly negative axis; -1 when out of range. */
static int axis_of(int64_t axis, int rank) {
    int64_t a = axis < 0 ? axis + rank : axis;
    return a >= 0 && a < rank ? (int)a : -1;
}

static int is_index_dtype(tm_dtype dt) { return dt == TM_INT32 || dt == TM_INT64; }

/* Lists dims as "(2, 3, 4)" for messages. */
static const char *dims_text(char *buf, size_t cap, int rank, const int64_t *dims) {
    size_t n = (size_t)snprintf(buf, cap, "(");
    for (int d = 0; d < rank && n < cap; d++)
        n += (size_t)snprintf(buf + n, cap - n, d ? ", %lld" : "%lld", (long long)dims[d]);
    if (n < cap) snprintf(buf + n, cap - n, ")");
    return buf;
}

/* ---- Moving elements of any dtype ----------------------------------------------------- */

/* How elements of one dtype are copied: as bytes, or as strdup'ed strings. A failed
 * strdup is remembered and reported once the kernel is done. */
typedef struct mover {
    size_t size;
    int strings;
    int failed;
} mover;

static mover mover_for(tm_dtype dt) {
    mover m = {tm_dtype_elem_size(dt), dt == TM_STRING, 0};
    return m;
}

static tm_status mover_status(const mover *m, const tm_kcall *k) {
    if (!m->failed) return TM_OK;
    return tm__fail(k->err, TM_ERR_NO_MEMORY, "out of memory copying strings");
}

/* Output string arrays start zeroed; freeing first also makes overwrites (scatter) safe. */
static void set_string(mover *m, char **slot, const char *s) {
    free(*slot);
    *slot = NULL;
    if (!s) return;
    *slot = strdup(s);
    if (!*slot) m->failed = 1;
}

/* dst[di .. di+n) = src[si .. si+n); the two never overlap. */
static void copy_elements(mover *m, void *dst, int64_t di, const void *src, int64_t si,
                          int64_t n) {
    if (n <= 0) return;
    if (m->strings) {
        char **d = (char **)dst + di;
        char *const *s = (char *const *)src + si;
        for (int64_t i = 0; i < n; i++) set_string(m, &d[i], s[i]);
        return;
    }
    memcpy((char *)dst + (size_t)di * m->size, (const char *)src + (size_t)si * m->size,
           (size_t)n * m->size);
}

#define STRIDED_LOOP(SIZE)                                                                 \
    for (int64_t i = 0; i < count; i++) memcpy(d + i * SIZE, s + i * stride * SIZE, SIZE)

/* dst[di + j] = src[si + j * stride] for j < count (stride in elements, may be negative). */
static void copy_strided(mover *m, void *dst, int64_t di, const void *src, int64_t si,
                         int64_t stride, int64_t count) {
    if (m->strings) {
        char **d = (char **)dst + di;
        char *const *s = (char *const *)src + si;
        for (int64_t i = 0; i < count; i++) set_string(m, &d[i], s[i * stride]);
        return;
    }
    char *d = (char *)dst + (size_t)di * m->size;
    const char *s = (const char *)src + (int64_t)m->size * si;
    switch (m->size) {
    case 1: STRIDED_LOOP(1); break;
    case 2: STRIDED_LOOP(2); break;
    case 4: STRIDED_LOOP(4); break;
    case 8: STRIDED_LOOP(8); break;
    default:
        for (int64_t i = 0; i < count; i++)
            memcpy(d + (size_t)i * m->size, s + i * stride * (int64_t)m->size, m->size);
    }
}

/* dst[di .. di+n) = src[si] (a broadcast). */
static void fill_elements(mover *m, void *dst, int64_t di, const void *src, int64_t si,
                          int64_t n) {
    copy_strided(m, dst, di, src, si, 0, n);
}

/* ---- RESHAPE and COPY ------------------------------------------------------------------- */

tm_status tm__shape_reshape(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                            int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)prim; (void)nin; (void)nout; (void)scratch;
    int64_t rank = a->i[0];
    if (rank < 0 || rank > TM_MAX_RANK)
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "reshape: rank %lld is outside 0..%d",
                           (long long)rank, TM_MAX_RANK);
    const int64_t *dims = &a->i[1];
    char b1[160], b2[160];
    for (int d = 0; d < rank; d++)
        if (dims[d] < 0)
            return tm_ctx_fail(c, TM_ERR_SHAPE, "reshape: target dims %s have a negative dim",
                               dims_text(b1, sizeof b1, (int)rank, dims));
    int64_t have = tm_numel(in[0]->rank, in[0]->dims), want = tm_numel((int)rank, dims);
    if (want < 0 || have != want)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "reshape: cannot reshape %s into %s",
                           dims_text(b1, sizeof b1, in[0]->rank, in[0]->dims),
                           dims_text(b2, sizeof b2, (int)rank, dims));
    set_out(out, in[0]->dtype, (int)rank, dims);
    return TM_OK;
}

static tm_status copy_whole(const tm_kcall *k) {
    const tm_tensor *x = k->in[0];
    tm_tensor *y = k->out[0];
    if (y->data == x->data) return TM_OK; /* a view: the plan made them share memory */
    mover m = mover_for(x->dtype);
    copy_elements(&m, y->data, 0, x->data, 0, tm_tensor_numel_(x));
    return mover_status(&m, k);
}

tm_status tm__kernel_reshape(const tm_kcall *k) { return copy_whole(k); }

tm_status tm__shape_copy(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                         int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)c; (void)prim; (void)a; (void)nin; (void)nout; (void)scratch;
    set_out(out, in[0]->dtype, in[0]->rank, in[0]->dims);
    return TM_OK;
}

tm_status tm__kernel_copy(const tm_kcall *k) { return copy_whole(k); }

/* ---- TRANSPOSE -------------------------------------------------------------------------- */

tm_status tm__shape_transpose(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                              int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)prim; (void)nin; (void)nout; (void)scratch;
    int rank = in[0]->rank, seen[TM_MAX_RANK] = {0};
    int64_t dims[TM_MAX_RANK];
    char buf[160];
    for (int d = 0; d < rank; d++) {
        int64_t p = a->i[d];
        if (p < 0 || p >= rank || seen[p])
            return tm_ctx_fail(c, TM_ERR_SHAPE, "transpose: perm %s is not a permutation of "
                               "0..%d", dims_text(buf, sizeof buf, rank, a->i), rank - 1);
        seen[p] = 1;
        dims[d] = in[0]->dims[p];
    }
    set_out(out, in[0]->dtype, rank, dims);
    return TM_OK;
}

/* Drops size-1 axes and merges input axes that stay neighbours in the output, so that
 * (0, 2, 3, 1) on (B, C, H, W) becomes (0, 2, 1) on (B, C, H*W). Fills the input dims and
 * perm of that simpler problem and returns its rank. */
static int simplify_transpose(int rank, const int64_t *in_dims, const int64_t *perm,
                              int64_t *dims, int *new_perm) {
    int renumber[TM_MAX_RANK], kept = 0;
    int64_t kept_dims[TM_MAX_RANK];
    for (int a = 0; a < rank; a++) {
        renumber[a] = in_dims[a] == 1 ? -1 : kept;
        if (in_dims[a] != 1) kept_dims[kept++] = in_dims[a];
    }
    int first[TM_MAX_RANK], groups = 0, previous = -2;
    int64_t size[TM_MAX_RANK];
    for (int d = 0; d < rank; d++) {
        int a = renumber[perm[d]];
        if (a < 0) continue;
        if (a == previous + 1) {
            size[groups - 1] *= kept_dims[a];
        } else {
            first[groups] = a;
            size[groups++] = kept_dims[a];
        }
        previous = a;
    }
    for (int g = 0; g < groups; g++) {
        int position = 0;
        for (int h = 0; h < groups; h++) position += first[h] < first[g];
        new_perm[g] = position;
        dims[position] = size[g];
    }
    return groups;
}

#define TILE_LOOP(SIZE)                                                                    \
    for (int64_t i = i0; i < i1; i++)                                                      \
        for (int64_t j = j0; j < j1; j++)                                                  \
            memcpy(d + (i * dst_stride + j) * SIZE, s + (j * src_stride + i) * SIZE, SIZE)

#if defined(__AVX__)
/* One full 8 x 8 tile of 4-byte elements in registers: dst row e (of 8, stride ds) gets
 * column e of the 8 source rows (stride ss). Four times the element-by-element tile on
 * the backward's transposed products (e.g. 1536 x 128 float32). */
static inline void transpose8x8_4byte(const char *s, int64_t ss, char *d, int64_t ds) {
    __m256 r[8], t[8], u[8];
    for (int k = 0; k < 8; k++) r[k] = _mm256_loadu_ps((const float *)(s + k * ss));
    for (int k = 0; k < 8; k += 2) {
        t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
        t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
    }
    for (int k = 0; k < 8; k += 4) {
        u[k] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int k = 0; k < 4; k++) {
        _mm256_storeu_ps((float *)(d + k * ds), _mm256_permute2f128_ps(u[k], u[k + 4], 0x20));
        _mm256_storeu_ps((float *)(d + (k + 4) * ds), _mm256_permute2f128_ps(u[k], u[k + 4], 0x31));
    }
}
#endif

/* dst[i * dst_stride + j] = src[j * src_stride + i] for i < n_i, j < n_j (element
 * indices from dst_at, src_at): reads run along i, writes along j, in 8 x 8 tiles.
 * Larger tiles lose to cache-set conflicts when the strides are powers of two. */
static void transpose_plane(mover *m, void *dst, int64_t dst_at, int64_t dst_stride,
                            const void *src, int64_t src_at, int64_t src_stride, int64_t n_i,
                            int64_t n_j) {
    enum { TILE = 8, PAIR = 16 };
    char *d = (char *)dst + (size_t)dst_at * m->size;
    const char *s = (const char *)src + (size_t)src_at * m->size;
    int typed = !m->strings && (m->size == 1 || m->size == 2 || m->size == 4 || m->size == 8);
    /* Two tiles side by side along i before the next j: the 64-byte lines of the source
     * rows are used whole while loaded (with power-of-two strides every row falls in one
     * L1 set, so a line left for a later pass over i is gone by then). */
    for (int64_t ip = 0; ip < n_i; ip += PAIR)
    for (int64_t j0 = 0; j0 < n_j; j0 += TILE) {
        int64_t j1 = j0 + TILE < n_j ? j0 + TILE : n_j;
        int64_t ie = ip + PAIR < n_i ? ip + PAIR : n_i;
        for (int64_t i0 = ip; i0 < ie; i0 += TILE) {
            int64_t i1 = i0 + TILE < ie ? i0 + TILE : ie;
            switch (typed ? m->size : 0) {
            case 1: TILE_LOOP(1); break;
            case 2: TILE_LOOP(2); break;
            case 4:
#if defined(__AVX__)
                if (i1 - i0 == TILE && j1 - j0 == TILE) {
                    transpose8x8_4byte(s + (j0 * src_stride + i0) * 4, src_stride * 4,
                                       d + (i0 * dst_stride + j0) * 4, dst_stride * 4);
                    break;
                }
#endif
                TILE_LOOP(4);
                break;
            case 8: TILE_LOOP(8); break;
            default:
                for (int64_t i = i0; i < i1; i++)
                    for (int64_t j = j0; j < j1; j++)
                        copy_elements(m, dst, dst_at + i * dst_stride + j, src,
                                      src_at + j * src_stride + i, 1);
            }
        }
    }
}

/* The last axis stays last: every output row is a contiguous input row (memcpy). Rows
 * [r0, r1) of the output, walking the input offset incrementally (a row of attention's
 * head split is 32 floats: the walk must cost less than the copy). */
typedef struct rows_job {
    mover *m;
    void *dst;
    const void *src;
    int rank;                        /* axes of the row index: rank - 1 of the tensor */
    int64_t dims[TM_MAX_RANK];       /* output dims of those axes */
    int64_t strides[TM_MAX_RANK];    /* input stride (elements) of each */
    int64_t row;
} rows_job;

static void transpose_rows_range(const rows_job *j, int64_t r0, int64_t r1) {
    int64_t idx[TM_MAX_RANK] = {0}, from = 0, rest = r0;
    for (int d = j->rank - 1; d >= 0; d--) {
        idx[d] = rest % j->dims[d];
        rest /= j->dims[d];
        from += idx[d] * j->strides[d];
    }
    size_t bytes = (size_t)j->row * j->m->size;
    char *d = (char *)j->dst + (size_t)(r0 * j->row) * j->m->size;
    const char *s = j->src;
    for (int64_t r = r0; r < r1; r++, d += bytes) {
        if (j->m->strings) copy_elements(j->m, j->dst, r * j->row, j->src, from, j->row);
        else memcpy(d, s + (size_t)from * j->m->size, bytes);
        int a = j->rank - 1;
        from += j->strides[a];
        while (++idx[a] == j->dims[a] && a > 0) {
            from -= j->strides[a] * j->dims[a];
            idx[a] = 0;
            a--;
            from += j->strides[a];
        }
    }
}

static void transpose_rows_slice(void *arg, int ith, int nth) {
    const rows_job *j = arg;
    int64_t rows = tm_numel(j->rank, j->dims);
    transpose_rows_range(j, rows * ith / nth, rows * (ith + 1) / nth);
}

/* Below this many bytes a transpose stays on one thread (about 5 us of copying). Lower
 * than the copy alone would pay for: a gradient's flipped product (W gy^T, threaded by
 * its columns) leaves half its result in each core's cache, and its transpose on one
 * thread read the other half across cores (MiniLM 1 x 128's gradient plan on two Zen 5
 * threads: its thirty 384 x 128 transposes 0.05 -> 0.03 ms each, all 36 1.98 -> 1.39 ms
 * a run; split the same way as the product, each thread reads its own). */
#define TRANSPOSE_PARALLEL_BYTES ((size_t)1 << 17)

static void transpose_rows(mover *m, void *dst, const void *src, int rank,
                           const int64_t *dims, const int *perm, tm_pool *pool) {
    int64_t in_strides[TM_MAX_RANK];
    strides_of(rank, dims, in_strides);
    rows_job j = {m, dst, src, rank - 1, {0}, {0}, dims[perm[rank - 1]]};
    for (int d = 0; d < rank - 1; d++) {
        j.dims[d] = dims[perm[d]];
        j.strides[d] = in_strides[perm[d]];
    }
    int64_t rows = tm_numel(rank - 1, j.dims);
    if (rows == 0 || j.row == 0) return;
    size_t bytes = (size_t)(rows * j.row) * m->size;
    int nth = m->strings || bytes < TRANSPOSE_PARALLEL_BYTES ? 1 : tm_pool_threads(pool);
    if (nth <= 1) transpose_rows_range(&j, 0, rows);
    else tm_pool_run(pool, nth, transpose_rows_slice, &j);
}

typedef struct planes_job {
    mover *m;
    void *dst;
    const void *src;
    int others;                                  /* axes other than the plane's two */
    int64_t dims[TM_MAX_RANK], in[TM_MAX_RANK], out[TM_MAX_RANK];
    int64_t dst_stride, src_stride, n_i, n_j;    /* the plane */
    int64_t blocks;                              /* 16-wide blocks of i per plane */
} planes_job;

/* Units [u0, u1): unit u is block u % blocks of plane u / blocks. */
static void transpose_planes_range(const planes_job *j, int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; u++) {
        int64_t plane = u / j->blocks, b = u % j->blocks, from = 0, to = 0;
        for (int d = j->others - 1; d >= 0; d--) {
            int64_t i = plane % j->dims[d];
            plane /= j->dims[d];
            from += i * j->in[d];
            to += i * j->out[d];
        }
        int64_t i0 = b * 16, n = j->n_i - i0 < 16 ? j->n_i - i0 : 16;
        transpose_plane(j->m, j->dst, to + i0 * j->dst_stride, j->dst_stride, j->src, from + i0,
                        j->src_stride, n, j->n_j);
    }
}

static void transpose_planes_slice(void *arg, int ith, int nth) {
    const planes_job *j = arg;
    int64_t units = tm_numel(j->others, j->dims) * j->blocks;
    transpose_planes_range(j, units * ith / nth, units * (ith + 1) / nth);
}

/* The last axis moves to output axis `a`: a tiled 2-D transpose in the plane of the
 * input's last axis and the output's last axis, once per index of the other axes, in
 * blocks of 16 of the input's last axis (split over the pool when large). */
static void transpose_planes(mover *m, void *dst, const void *src, int rank,
                             const int64_t *dims, const int *perm, tm_pool *pool) {
    int64_t in_strides[TM_MAX_RANK], out_dims[TM_MAX_RANK], out_strides[TM_MAX_RANK];
    strides_of(rank, dims, in_strides);
    for (int d = 0; d < rank; d++) out_dims[d] = dims[perm[d]];
    strides_of(rank, out_dims, out_strides);
    int a = 0;
    while (perm[a] != rank - 1) a++;
    planes_job j = {m, dst, src, 0, {0}, {0}, {0}, out_strides[a], in_strides[perm[rank - 1]],
                    dims[rank - 1], out_dims[rank - 1], 0};
    for (int d = 0; d < rank - 1; d++) {
        if (d == a) continue;
        j.dims[j.others] = out_dims[d];
        j.in[j.others] = in_strides[perm[d]];
        j.out[j.others++] = out_strides[d];
    }
    j.blocks = (j.n_i + 15) / 16;
    int64_t units = tm_numel(j.others, j.dims) * j.blocks;
    if (units == 0 || j.n_j == 0) return;
    size_t bytes = (size_t)(tm_numel(rank, dims)) * m->size;
    int nth = m->strings || bytes < TRANSPOSE_PARALLEL_BYTES ? 1 : tm_pool_threads(pool);
    if (nth > units) nth = (int)units;
    if (nth <= 1) transpose_planes_range(&j, 0, units);
    else tm_pool_run(pool, nth, transpose_planes_slice, &j);
}

tm_status tm__kernel_transpose(const tm_kcall *k) {
    const tm_tensor *x = k->in[0];
    tm_tensor *y = k->out[0];
    mover m = mover_for(x->dtype);
    int64_t n = tm_tensor_numel_(x);
    if (n == 0) return TM_OK;
    int64_t dims[TM_MAX_RANK];
    int perm[TM_MAX_RANK];
    int rank = simplify_transpose(x->rank, x->dims, k->a->i, dims, perm);
    if (rank <= 1) copy_elements(&m, y->data, 0, x->data, 0, n);
    else if (perm[rank - 1] == rank - 1)
        transpose_rows(&m, y->data, x->data, rank, dims, perm, k->pool);
    else transpose_planes(&m, y->data, x->data, rank, dims, perm, k->pool);
    return mover_status(&m, k);
}

/* ---- SLICE ------------------------------------------------------------------------------ */

tm_status tm__shape_slice(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                          int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)prim; (void)nin; (void)nout; (void)scratch;
    int rank = in[0]->rank;
    int64_t dims[TM_MAX_RANK];
    for (int d = 0; d < rank; d++) {
        int64_t start = a->i[3 * d], step = a->i[3 * d + 1], count = a->i[3 * d + 2];
        int64_t size = in[0]->dims[d], span, last;
        int ok = step != 0 && count >= 0;
        if (ok && count > 0)
            ok = start >= 0 && start < size && !__builtin_mul_overflow(count - 1, step, &span) &&
                 !__builtin_add_overflow(start, span, &last) && last >= 0 && last < size;
        if (!ok)
            return tm_ctx_fail(c, TM_ERR_SHAPE, "slice: axis %d of size %lld cannot take "
                               "start %lld, step %lld, count %lld", d, (long long)size,
                               (long long)start, (long long)step, (long long)count);
        dims[d] = count;
    }
    set_out(out, in[0]->dtype, rank, dims);
    return TM_OK;
}

tm_status tm__kernel_slice(const tm_kcall *k) {
    const tm_tensor *x = k->in[0];
    tm_tensor *y = k->out[0];
    const int64_t *args = k->a->i;
    mover m = mover_for(x->dtype);
    if (tm_tensor_numel_(y) == 0) return TM_OK;
    /* Trailing axes taken whole form one contiguous block per element of the rest. */
    int last = x->rank - 1;
    int64_t block = 1;
    while (last >= 0 && args[3 * last] == 0 && args[3 * last + 1] == 1 &&
           args[3 * last + 2] == x->dims[last])
        block *= x->dims[last--];
    if (last < 0) {
        copy_elements(&m, y->data, 0, x->data, 0, block);
        return mover_status(&m, k);
    }
    int64_t strides[TM_MAX_RANK], counts[TM_MAX_RANK], idx[TM_MAX_RANK] = {0};
    strides_of(x->rank, x->dims, strides);
    for (int d = 0; d <= last; d++) counts[d] = args[3 * d + 2];
    int64_t inner_count = counts[last], inner_step = args[3 * last + 1], pos = 0;
    do {
        int64_t from = args[3 * last] * strides[last];
        for (int d = 0; d < last; d++)
            from += (args[3 * d] + idx[d] * args[3 * d + 1]) * strides[d];
        if (inner_step == 1) {
            copy_elements(&m, y->data, pos, x->data, from, inner_count * block);
        } else if (block == 1) {
            copy_strided(&m, y->data, pos, x->data, from, inner_step, inner_count);
        } else {
            for (int64_t j = 0; j < inner_count; j++)
                copy_elements(&m, y->data, pos + j * block, x->data,
                              from + j * inner_step * block, block);
        }
        pos += inner_count * block;
    } while (next_index(idx, counts, last));
    return mover_status(&m, k);
}

/* ---- PAD -------------------------------------------------------------------------------- */

/* Negative pads crop first; positive pads then extend what is left (ONNX Runtime's order).
 * For axis d: `crop_begin` elements are dropped at the start, `kept` remain. */
typedef struct pad_axis {
    int64_t crop_begin, kept, pad_begin, out;
} pad_axis;

static pad_axis pad_axis_of(const tm_args *a, int rank, int d, int64_t size) {
    int64_t begin = a->i[1 + d], end = a->i[1 + rank + d];
    pad_axis p;
    p.crop_begin = begin < 0 ? -begin : 0;
    p.pad_begin = begin > 0 ? begin : 0;
    p.kept = size - p.crop_begin - (end < 0 ? -end : 0);
    p.out = size + begin + end;
    return p;
}

tm_status tm__shape_pad(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                        int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)prim; (void)nin; (void)nout;
    int rank = in[0]->rank;
    int64_t mode = a->i[0], dims[TM_MAX_RANK], total = 0;
    if (mode < PAD_CONSTANT || mode > PAD_WRAP)
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "pad: unknown mode %lld", (long long)mode);
    for (int d = 0; d < rank; d++) {
        int64_t begin = a->i[1 + d], end = a->i[1 + rank + d];
        if (begin < -in[0]->dims[d] || end < -in[0]->dims[d] ||
            begin > INT64_MAX / 4 || end > INT64_MAX / 4)
            return tm_ctx_fail(c, TM_ERR_SHAPE, "pad: pads %lld and %lld do not fit axis %d "
                               "of size %lld", (long long)begin, (long long)end, d,
                               (long long)in[0]->dims[d]);
        pad_axis p = pad_axis_of(a, rank, d, in[0]->dims[d]);
        if (p.kept < 0)
            return tm_ctx_fail(c, TM_ERR_SHAPE, "pad: pads %lld and %lld crop more than axis "
                               "%d of size %lld", (long long)begin, (long long)end, d,
                               (long long)in[0]->dims[d]);
        if (mode != PAD_CONSTANT && p.kept == 0 && p.out > 0)
            return tm_ctx_fail(c, TM_ERR_SHAPE, "pad: %s mode cannot pad axis %d, which is "
                               "empty", mode == PAD_REFLECT ? "reflect" :
                               mode == PAD_EDGE ? "edge" : "wrap", d);
        dims[d] = p.out;
        total += p.out;
    }
    set_out(out, in[0]->dtype, rank, dims);
    *scratch = (size_t)total * sizeof(int64_t);
    return TM_OK;
}

/* Where output position o of an axis reads from in the input, or -1 for the constant. */
static int64_t pad_source(const pad_axis *p, int64_t mode, int64_t o) {
    int64_t q = o - p->pad_begin, n = p->kept;
    if (q >= 0 && q < n) return p->crop_begin + q;
    if (mode == PAD_CONSTANT) return -1;
    if (mode == PAD_EDGE) {
        q = q < 0 ? 0 : n - 1;
    } else if (mode == PAD_WRAP) {
        q %= n;
        if (q < 0) q += n;
    } else if (n == 1) {
        q = 0;
    } else { /* reflect, repeated as numpy does for pads wider than the axis */
        int64_t period = 2 * (n - 1);
        q %= period;
        if (q < 0) q += period;
        if (q >= n) q = period - q;
    }
    return p->crop_begin + q;
}

/* One element holding the constant in the output's dtype (strings: NULL, read as ""). */
static void pad_constant(tm_dtype dt, double value, unsigned char *bytes) {
    memset(bytes, 0, 16);
    /* tm_store_f64 converts to integers without undefined behaviour (NaN, out of range). */
    if (tm_dtype_is_float(dt) || tm_dtype_is_signed_int(dt) || tm_dtype_is_unsigned_int(dt))
        tm_store_f64(bytes, dt, 0, value);
    else if (dt == TM_COMPLEX64) tm_store_f64(bytes, TM_FLOAT, 0, value);
    else if (dt == TM_COMPLEX128) tm_store_f64(bytes, TM_DOUBLE, 0, value);
}

tm_status tm__kernel_pad(const tm_kcall *k) {
    const tm_tensor *x = k->in[0];
    tm_tensor *y = k->out[0];
    int rank = x->rank;
    int64_t mode = k->a->i[0];
    mover m = mover_for(x->dtype);
    unsigned char constant[16];
    pad_constant(x->dtype, k->a->f[0], constant);
    if (rank == 0) {
        copy_elements(&m, y->data, 0, x->data, 0, 1);
        return mover_status(&m, k);
    }
    if (tm_tensor_numel_(y) == 0) return TM_OK;
    pad_axis axes[TM_MAX_RANK] = {{0}};
    int64_t *source[TM_MAX_RANK] = {0}, *next = k->scratch, strides[TM_MAX_RANK];
    strides_of(rank, x->dims, strides);
    for (int d = 0; d < rank; d++) {
        axes[d] = pad_axis_of(k->a, rank, d, x->dims[d]);
        source[d] = next;
        for (int64_t o = 0; o < axes[d].out; o++) next[o] = pad_source(&axes[d], mode, o);
        next += axes[d].out;
    }
    const pad_axis *inner = &axes[rank - 1];
    const int64_t *inner_source = source[rank - 1];
    int64_t out_dims[TM_MAX_RANK], idx[TM_MAX_RANK] = {0}, pos = 0, row = inner->out;
    for (int d = 0; d < rank; d++) out_dims[d] = axes[d].out;
    do {
        int64_t from = 0;
        int constant_row = 0;
        for (int d = 0; d < rank - 1; d++) {
            int64_t s = source[d][idx[d]];
            if (s < 0) constant_row = 1;
            from += s * strides[d];
        }
        if (constant_row) {
            fill_elements(&m, y->data, pos, constant, 0, row);
        } else {
            copy_elements(&m, y->data, pos + inner->pad_begin, x->data,
                          from + inner->crop_begin, inner->kept);
            for (int64_t o = 0; o < row; o++) {
                if (o == inner->pad_begin) o += inner->kept;
                if (o >= row) break;
                if (inner_source[o] < 0) fill_elements(&m, y->data, pos + o, constant, 0, 1);
                else copy_elements(&m, y->data, pos + o, x->data, from + inner_source[o], 1);
            }
        }
        pos += row;
    } while (next_index(idx, out_dims, rank - 1));
    return mover_status(&m, k);
}

/* ---- CONCAT ----------------------------------------------------------------------------- */

tm_status tm__shape_concat(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                           int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)prim; (void)nout; (void)scratch;
    if (nin < 1) return tm_ctx_fail(c, TM_ERR_SHAPE, "concat: needs at least one input");
    int rank = in[0]->rank, axis = axis_of(a->i[0], rank);
    if (axis < 0)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "concat: axis %lld is out of range for rank %d",
                           (long long)a->i[0], rank);
    int64_t dims[TM_MAX_RANK];
    char b1[160], b2[160];
    memcpy(dims, in[0]->dims, sizeof dims);
    dims[axis] = 0;
    for (int i = 0; i < nin; i++) {
        if (in[i]->dtype != in[0]->dtype)
            return tm_ctx_fail(c, TM_ERR_DTYPE, "concat: input %d is %s, input 0 is %s", i,
                               tm_dtype_name(in[i]->dtype), tm_dtype_name(in[0]->dtype));
        int same = in[i]->rank == rank;
        for (int d = 0; same && d < rank; d++)
            same = d == axis || in[i]->dims[d] == in[0]->dims[d];
        if (!same)
            return tm_ctx_fail(c, TM_ERR_SHAPE, "concat: input %d has dims %s, input 0 has %s "
                               "(only axis %d may differ)", i,
                               dims_text(b1, sizeof b1, in[i]->rank, in[i]->dims),
                               dims_text(b2, sizeof b2, rank, in[0]->dims), axis);
        dims[axis] += in[i]->dims[axis];
    }
    set_out(out, in[0]->dtype, rank, dims);
    return TM_OK;
}

/* Below this many bytes a concat stays on one thread. */
#define CONCAT_PARALLEL_BYTES ((size_t)1 << 18)

/* A concat of plain elements as a byte range of the output: each outer step is the
 * inputs' chunks in order, `group` bytes in all. Threads take equal slices of the bytes
 * (a decode step's KV-cache concat is a few large chunks: splitting by chunk would leave
 * a thread idle). */
typedef struct concat_job {
    const tm_kcall *k;
    int axis;
    size_t size, group, total;
} concat_job;

static void concat_bytes(const concat_job *j, size_t b0, size_t b1) {
    const tm_kcall *k = j->k;
    char *dst = k->out[0]->data;
    size_t o = b0 / j->group, at = o * j->group;
    for (; at < b1; o++)
        for (int i = 0; i < k->nin && at < b1; i++) {
            const tm_tensor *x = k->in[i];
            size_t chunk = (size_t)product(x->dims, j->axis, x->rank) * j->size;
            size_t lo = at > b0 ? at : b0, hi = at + chunk < b1 ? at + chunk : b1;
            if (lo < hi) memcpy(dst + lo, (const char *)x->data + o * chunk + (lo - at), hi - lo);
            at += chunk;
        }
}

static void concat_slice(void *arg, int ith, int nth) {
    const concat_job *j = arg;
    /* Slices cut at 64-byte lines, so that no two threads write one line. */
    size_t lines = (j->total + 63) / 64;
    size_t b0 = lines * (size_t)ith / (size_t)nth * 64, b1 = lines * (size_t)(ith + 1) / (size_t)nth * 64;
    concat_bytes(j, b0, b1 < j->total ? b1 : j->total);
}

tm_status tm__kernel_concat(const tm_kcall *k) {
    tm_tensor *y = k->out[0];
    int axis = axis_of(k->a->i[0], y->rank);
    mover m = mover_for(y->dtype);
    if (!m.strings) {
        concat_job j = {k, axis, m.size, (size_t)product(y->dims, axis, y->rank) * m.size,
                        (size_t)tm_tensor_numel_(y) * m.size};
        if (j.total == 0) return TM_OK;
        int nth = j.total < CONCAT_PARALLEL_BYTES ? 1 : tm_pool_threads(k->pool);
        if (nth <= 1) concat_bytes(&j, 0, j.total);
        else tm_pool_run(k->pool, nth, concat_slice, &j);
        return TM_OK;
    }
    int64_t outer = product(y->dims, 0, axis), pos = 0;
    for (int64_t o = 0; o < outer; o++) {
        for (int i = 0; i < k->nin; i++) {
            const tm_tensor *x = k->in[i];
            int64_t chunk = product(x->dims, axis, x->rank);
            copy_elements(&m, y->data, pos, x->data, o * chunk, chunk);
            pos += chunk;
        }
    }
    return mover_status(&m, k);
}

/* ---- EXPAND ----------------------------------------------------------------------------- */

tm_status tm__shape_expand(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                           int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)prim; (void)nin; (void)nout; (void)scratch;
    int rank = in[0]->rank;
    const int64_t *dims = &a->i[1];
    char b1[160], b2[160];
    if (a->i[0] != rank)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "expand: target rank %lld differs from the input "
                           "rank %d", (long long)a->i[0], rank);
    for (int d = 0; d < rank; d++)
        if (dims[d] < 0 || (in[0]->dims[d] != dims[d] && in[0]->dims[d] != 1))
            return tm_ctx_fail(c, TM_ERR_SHAPE, "expand: cannot expand %s to %s",
                               dims_text(b1, sizeof b1, rank, in[0]->dims),
                               dims_text(b2, sizeof b2, rank, dims));
    set_out(out, in[0]->dtype, rank, dims);
    return TM_OK;
}

tm_status tm__kernel_expand(const tm_kcall *k) {
    const tm_tensor *x = k->in[0];
    tm_tensor *y = k->out[0];
    mover m = mover_for(x->dtype);
    if (tm_tensor_numel_(y) == 0) return TM_OK;
    /* Merge neighbouring axes of the same kind (copied or broadcast); drop size-1 ones. */
    int64_t dims[TM_MAX_RANK], strides[TM_MAX_RANK], idx[TM_MAX_RANK] = {0};
    int broadcast[TM_MAX_RANK], rank = 0;
    for (int d = 0; d < y->rank; d++) {
        if (y->dims[d] == 1) continue;
        int b = x->dims[d] == 1;
        if (rank > 0 && broadcast[rank - 1] == b) {
            dims[rank - 1] *= y->dims[d];
        } else {
            broadcast[rank] = b;
            dims[rank++] = y->dims[d];
        }
    }
    if (rank == 0) {
        copy_elements(&m, y->data, 0, x->data, 0, 1);
        return mover_status(&m, k);
    }
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        strides[d] = broadcast[d] ? 0 : s;
        if (!broadcast[d]) s *= dims[d];
    }
    int64_t row = dims[rank - 1], pos = 0;
    do {
        int64_t from = 0;
        for (int d = 0; d < rank - 1; d++) from += idx[d] * strides[d];
        if (broadcast[rank - 1]) fill_elements(&m, y->data, pos, x->data, from, row);
        else copy_elements(&m, y->data, pos, x->data, from, row);
        pos += row;
    } while (next_index(idx, dims, rank - 1));
    return mover_status(&m, k);
}

/* ---- Indices ---------------------------------------------------------------------------- */

static int64_t load_index(const tm_tensor *t, int64_t i) {
    if (t->dtype == TM_INT32) return ((const int32_t *)t->data)[i];
    return ((const int64_t *)t->data)[i];
}

/* Wraps a negative index by the axis size; fails the kernel when it is out of range. */
static tm_status resolve_index(const tm_kcall *k, int64_t raw, int64_t size, int axis,
                               int64_t *out) {
    int64_t v = raw < 0 ? raw + size : raw;
    if (v >= 0 && v < size) {
        *out = v;
        return TM_OK;
    }
    return tm__fail(k->err, TM_ERR_RUNTIME, "index %lld is out of range for axis %d of size "
                    "%lld (valid: -%lld to %lld)", (long long)raw, axis, (long long)size,
                    (long long)size, (long long)size - 1);
}

static tm_status check_indices_dtype(tm_ctx *c, const char *prim, const tm_vinfo *indices) {
    if (is_index_dtype(indices->dtype)) return TM_OK;
    return tm_ctx_fail(c, TM_ERR_DTYPE, "%s: indices must be int32 or int64, not %s", prim,
                       tm_dtype_name(indices->dtype));
}

/* ---- GATHER ----------------------------------------------------------------------------- */

tm_status tm__shape_gather(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                           int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)prim; (void)nin; (void)nout; (void)scratch;
    const tm_vinfo *data = in[0], *indices = in[1];
    if (check_indices_dtype(c, "gather", indices) != TM_OK) return c->status;
    int axis = axis_of(a->i[0], data->rank);
    if (axis < 0)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "gather: axis %lld is out of range for data of "
                           "rank %d", (long long)a->i[0], data->rank);
    int rank = data->rank - 1 + indices->rank;
    if (rank > TM_MAX_RANK)
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "gather: output rank %d exceeds %d", rank,
                           TM_MAX_RANK);
    int64_t dims[TM_MAX_RANK];
    int n = 0;
    for (int d = 0; d < axis; d++) dims[n++] = data->dims[d];
    for (int d = 0; d < indices->rank; d++) dims[n++] = indices->dims[d];
    for (int d = axis + 1; d < data->rank; d++) dims[n++] = data->dims[d];
    set_out(out, data->dtype, rank, dims);
    return TM_OK;
}

#define GATHER_LOOP(SIZE, INDEX_TYPE)                                                      \
    for (int64_t j = 0; j < count; j++) {                                                  \
        int64_t v = ((const INDEX_TYPE *)indices->data)[j];                                \
        memcpy(d + j * SIZE, s + (v < 0 ? v + axis_size : v) * SIZE, SIZE);                \
    }

#define GATHER_SIZES(INDEX_TYPE)                                                           \
    switch (m->size) {                                                                     \
    case 1: GATHER_LOOP(1, INDEX_TYPE); break;                                             \
    case 2: GATHER_LOOP(2, INDEX_TYPE); break;                                             \
    case 4: GATHER_LOOP(4, INDEX_TYPE); break;                                             \
    default: GATHER_LOOP(8, INDEX_TYPE); break;                                            \
    }

/* One element per index (inner size 1, sizes 1 to 8): typed loops instead of a memcpy
 * call each, the index dtype chosen outside the loop. */
static void gather_scalars(mover *m, char *d, const char *s, const tm_tensor *indices,
                           int64_t count, int64_t axis_size) {
    if (indices->dtype == TM_INT32) GATHER_SIZES(int32_t)
    else GATHER_SIZES(int64_t)
}

tm_status tm__kernel_gather(const tm_kcall *k) {
    const tm_tensor *data = k->in[0], *indices = k->in[1];
    tm_tensor *y = k->out[0];
    int axis = axis_of(k->a->i[0], data->rank);
    mover m = mover_for(data->dtype);
    int64_t outer = product(data->dims, 0, axis), axis_size = data->dims[axis];
    int64_t inner = product(data->dims, axis + 1, data->rank);
    int64_t count = tm_tensor_numel_(indices), v;
    if (tm_tensor_numel_(y) == 0) return TM_OK;
    /* Checked once up front, so the copy loops need not check and nothing is half done. */
    for (int64_t j = 0; j < count; j++)
        if (resolve_index(k, load_index(indices, j), axis_size, axis, &v) != TM_OK)
            return TM_ERR_RUNTIME;
    for (int64_t o = 0; o < outer; o++) {
        int64_t base = o * axis_size * inner, pos = o * count * inner;
        if (inner == 1 && !m.strings && m.size <= 8) {
            gather_scalars(&m, (char *)y->data + (size_t)pos * m.size,
                           (const char *)data->data + (size_t)base * m.size, indices, count,
                           axis_size);
            continue;
        }
        for (int64_t j = 0; j < count; j++) {
            v = load_index(indices, j);
            if (v < 0) v += axis_size;
            copy_elements(&m, y->data, pos + j * inner, data->data, base + v * inner, inner);
        }
    }
    return mover_status(&m, k);
}

/* ---- GATHER_ELEMENTS and SCATTER_ELEMENTS ----------------------------------------------- */

/* indices: same rank as data, no larger on any axis but `axis` (ONNX Runtime's rule). */
static tm_status check_elements_shapes(tm_ctx *c, const char *prim, const tm_vinfo *data,
                                       const tm_vinfo *indices, int64_t axis_arg, int *axis) {
    char b1[160], b2[160];
    if (check_indices_dtype(c, prim, indices) != TM_OK) return c->status;
    *axis = axis_of(axis_arg, data->rank);
    if (*axis < 0)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "%s: axis %lld is out of range for data of rank "
                           "%d", prim, (long long)axis_arg, data->rank);
    int ok = indices->rank == data->rank;
    for (int d = 0; ok && d < data->rank; d++)
        ok = d == *axis || indices->dims[d] <= data->dims[d];
    if (!ok)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "%s: indices %s do not fit data %s on axis %d",
                           prim, dims_text(b1, sizeof b1, indices->rank, indices->dims),
                           dims_text(b2, sizeof b2, data->rank, data->dims), *axis);
    return TM_OK;
}

tm_status tm__shape_gather_elements(tm_ctx *c, int prim, const tm_args *a,
                                    const tm_vinfo *const *in, int nin, tm_vinfo *out,
                                    int nout, size_t *scratch) {
    (void)prim; (void)nin; (void)nout; (void)scratch;
    int axis;
    if (check_elements_shapes(c, "gather_elements", in[0], in[1], a->i[0], &axis) != TM_OK)
        return c->status;
    set_out(out, in[0]->dtype, in[1]->rank, in[1]->dims);
    return TM_OK;
}

/* Calls visit(data element, index element) for every element of indices, in order;
 * stops at the first failure. */
typedef tm_status (*element_visit)(const tm_kcall *k, mover *m, int64_t data_at, int64_t at);

static tm_status walk_elements(const tm_kcall *k, mover *m, const tm_tensor *data,
                               const tm_tensor *indices, int axis, element_visit visit) {
    int rank = indices->rank;
    int64_t strides[TM_MAX_RANK], idx[TM_MAX_RANK] = {0}, at = 0, v = 0;
    strides_of(rank, data->dims, strides);
    if (tm_tensor_numel_(indices) == 0) return TM_OK;
    int64_t row = indices->dims[rank - 1], axis_size = data->dims[axis];
    do {
        int64_t base = 0;
        for (int d = 0; d < rank - 1; d++) base += d == axis ? 0 : idx[d] * strides[d];
        for (int64_t j = 0; j < row; j++, at++) {
            if (resolve_index(k, load_index(indices, at), axis_size, axis, &v) != TM_OK)
                return TM_ERR_RUNTIME;
            int64_t data_at = base + v * strides[axis] + (axis == rank - 1 ? 0 : j);
            tm_status s = visit(k, m, data_at, at);
            if (s != TM_OK) return s;
        }
    } while (next_index(idx, indices->dims, rank - 1));
    return TM_OK;
}

static tm_status gather_one(const tm_kcall *k, mover *m, int64_t data_at, int64_t at) {
    copy_elements(m, k->out[0]->data, at, k->in[0]->data, data_at, 1);
    return TM_OK;
}

tm_status tm__kernel_gather_elements(const tm_kcall *k) {
    int axis = axis_of(k->a->i[0], k->in[0]->rank);
    mover m = mover_for(k->in[0]->dtype);
    tm_status s = walk_elements(k, &m, k->in[0], k->in[1], axis, gather_one);
    return s != TM_OK ? s : mover_status(&m, k);
}

/* ---- Scatter reductions ----------------------------------------------------------------- */

static const char *reduction_name(int64_t r) {
    static const char *names[] = {"none", "add", "mul", "max", "min"};
    return r >= 0 && r <= REDUCE_MIN ? names[r] : "unknown";
}

static tm_status check_reduction(tm_ctx *c, const char *prim, int64_t reduction, tm_dtype dt) {
    if (reduction < REDUCE_NONE || reduction > REDUCE_MIN)
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "%s: unknown reduction %lld", prim,
                           (long long)reduction);
    if (reduction != REDUCE_NONE && !tm_dtype_is_float(dt) && !tm_dtype_is_signed_int(dt) &&
        !tm_dtype_is_unsigned_int(dt))
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "%s: reduction '%s' is not defined on %s",
                           prim, reduction_name(reduction), tm_dtype_name(dt));
    return TM_OK;
}

static double combine_f64(int64_t reduction, double old, double update) {
    switch (reduction) {
    case REDUCE_ADD: return old + update;
    case REDUCE_MUL: return old * update;
    case REDUCE_MAX: return isnan(update) || update > old ? update : old; /* NaN wins */
    default: return isnan(update) || update < old ? update : old;
    }
}

static uint64_t combine_u64(int64_t reduction, uint64_t old, uint64_t update) {
    switch (reduction) {
    case REDUCE_ADD: return old + update;
    case REDUCE_MUL: return old * update;
    case REDUCE_MAX: return update > old ? update : old;
    default: return update < old ? update : old;
    }
}

/* Signed add and mul wrap as two's complement (through uint64: no undefined overflow). */
static int64_t combine_i64(int64_t reduction, int64_t old, int64_t update) {
    switch (reduction) {
    case REDUCE_ADD: return (int64_t)((uint64_t)old + (uint64_t)update);
    case REDUCE_MUL: return (int64_t)((uint64_t)old * (uint64_t)update);
    case REDUCE_MAX: return update > old ? update : old;
    default: return update < old ? update : old;
    }
}

/* out[at] = out[at] (reduction) updates[update_at]; plain copy for REDUCE_NONE. */
static void scatter_one(mover *m, int64_t reduction, tm_tensor *out, int64_t at,
                        const tm_tensor *updates, int64_t update_at) {
    tm_dtype dt = out->dtype;
    if (reduction == REDUCE_NONE) {
        copy_elements(m, out->data, at, updates->data, update_at, 1);
    } else if (dt == TM_FLOAT) {
        float *o = (float *)out->data + at;
        *o = (float)combine_f64(reduction, *o, ((const float *)updates->data)[update_at]);
    } else if (tm_dtype_is_float(dt)) {
        double old = tm_load_f64(out->data, dt, (size_t)at);
        double update = tm_load_f64(updates->data, dt, (size_t)update_at);
        tm_store_f64(out->data, dt, (size_t)at, combine_f64(reduction, old, update));
    } else if (tm_dtype_is_signed_int(dt)) {
        int64_t old = tm_load_i64(out->data, dt, (size_t)at);
        int64_t update = tm_load_i64(updates->data, dt, (size_t)update_at);
        tm_store_i64(out->data, dt, (size_t)at, combine_i64(reduction, old, update));
    } else {
        uint64_t old = tm_load_u64(out->data, dt, (size_t)at);
        uint64_t update = tm_load_u64(updates->data, dt, (size_t)update_at);
        tm_store_u64(out->data, dt, (size_t)at, combine_u64(reduction, old, update));
    }
}

/* Scatters start from a copy of data, unless a plan runs them in place. */
static void copy_data_once(mover *m, tm_tensor *out, const tm_tensor *data) {
    if (out->data != data->data)
        copy_elements(m, out->data, 0, data->data, 0, tm_tensor_numel_(data));
}

static tm_status check_updates(tm_ctx *c, const char *prim, const tm_vinfo *data,
                               const tm_vinfo *updates, int rank, const int64_t *dims) {
    char b1[160], b2[160];
    if (updates->dtype != data->dtype)
        return tm_ctx_fail(c, TM_ERR_DTYPE, "%s: updates are %s, data is %s", prim,
                           tm_dtype_name(updates->dtype), tm_dtype_name(data->dtype));
    int same = updates->rank == rank;
    for (int d = 0; same && d < rank; d++) same = updates->dims[d] == dims[d];
    if (!same)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "%s: updates have dims %s, expected %s", prim,
                           dims_text(b1, sizeof b1, updates->rank, updates->dims),
                           dims_text(b2, sizeof b2, rank, dims));
    return TM_OK;
}

tm_status tm__shape_scatter_elements(tm_ctx *c, int prim, const tm_args *a,
                                     const tm_vinfo *const *in, int nin, tm_vinfo *out,
                                     int nout, size_t *scratch) {
    (void)prim; (void)nin; (void)nout; (void)scratch;
    const char *name = "scatter_elements";
    int axis;
    if (check_elements_shapes(c, name, in[0], in[1], a->i[0], &axis) != TM_OK ||
        check_updates(c, name, in[0], in[2], in[1]->rank, in[1]->dims) != TM_OK ||
        check_reduction(c, name, a->i[1], in[0]->dtype) != TM_OK)
        return c->status;
    set_out(out, in[0]->dtype, in[0]->rank, in[0]->dims);
    return TM_OK;
}

static tm_status scatter_visit(const tm_kcall *k, mover *m, int64_t data_at, int64_t at) {
    scatter_one(m, k->a->i[1], k->out[0], data_at, k->in[2], at);
    return TM_OK;
}

/* Rejects out-of-range indices before the output is touched, so nothing is half done. */
static tm_status check_only(const tm_kcall *k, mover *m, int64_t data_at, int64_t at) {
    (void)k; (void)m; (void)data_at; (void)at;
    return TM_OK;
}

tm_status tm__kernel_scatter_elements(const tm_kcall *k) {
    const tm_tensor *data = k->in[0], *indices = k->in[1];
    tm_tensor *y = k->out[0];
    int axis = axis_of(k->a->i[0], data->rank);
    mover m = mover_for(data->dtype);
    tm_status s = walk_elements(k, &m, data, indices, axis, check_only);
    if (s != TM_OK) return s;
    copy_data_once(&m, y, data);
    s = walk_elements(k, &m, data, indices, axis, scatter_visit);
    return s != TM_OK ? s : mover_status(&m, k);
}

/* ---- GATHER_ND and SCATTER_ND ----------------------------------------------------------- */

tm_status tm__shape_gather_nd(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                              int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)prim; (void)nin; (void)nout; (void)scratch;
    const tm_vinfo *data = in[0], *indices = in[1];
    char b1[160], b2[160];
    if (check_indices_dtype(c, "gather_nd", indices) != TM_OK) return c->status;
    int64_t batch = a->i[0];
    int r = data->rank, q = indices->rank;
    if (q < 1 || r < 1 || batch < 0 || batch >= (q < r ? q : r))
        return tm_ctx_fail(c, TM_ERR_SHAPE, "gather_nd: batch_dims %lld does not fit data of "
                           "rank %d and indices of rank %d", (long long)batch, r, q);
    int64_t depth = indices->dims[q - 1];
    int ok = depth >= 1 && depth <= r - batch;
    for (int d = 0; ok && d < batch; d++) ok = indices->dims[d] == data->dims[d];
    if (!ok)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "gather_nd: indices %s do not fit data %s with "
                           "batch_dims %lld", dims_text(b1, sizeof b1, q, indices->dims),
                           dims_text(b2, sizeof b2, r, data->dims), (long long)batch);
    int rank = q - 1 + r - (int)batch - (int)depth;
    if (rank > TM_MAX_RANK)
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "gather_nd: output rank %d exceeds %d", rank,
                           TM_MAX_RANK);
    int64_t dims[TM_MAX_RANK];
    int n = 0;
    for (int d = 0; d < q - 1; d++) dims[n++] = indices->dims[d];
    for (int d = (int)(batch + depth); d < r; d++) dims[n++] = data->dims[d];
    set_out(out, data->dtype, rank, dims);
    return TM_OK;
}

/* The element offset, inside one batch of data, of the slice named by `depth` indices
 * starting at index element `at`. */
static tm_status nd_offset(const tm_kcall *k, const tm_tensor *data, const tm_tensor *indices,
                           int first_axis, int64_t depth, int64_t at, int64_t *offset) {
    int64_t strides[TM_MAX_RANK], v = 0;
    strides_of(data->rank, data->dims, strides);
    *offset = 0;
    for (int64_t j = 0; j < depth; j++) {
        int axis = first_axis + (int)j;
        if (resolve_index(k, load_index(indices, at + j), data->dims[axis], axis, &v) != TM_OK)
            return TM_ERR_RUNTIME;
        *offset += v * strides[axis];
    }
    return TM_OK;
}

tm_status tm__kernel_gather_nd(const tm_kcall *k) {
    const tm_tensor *data = k->in[0], *indices = k->in[1];
    tm_tensor *y = k->out[0];
    int batch_dims = (int)k->a->i[0], q = indices->rank;
    int64_t depth = indices->dims[q - 1];
    int64_t batches = product(data->dims, 0, batch_dims);
    int64_t per_batch = product(indices->dims, batch_dims, q - 1);
    int64_t slice = product(data->dims, batch_dims + (int)depth, data->rank);
    int64_t batch_size = product(data->dims, batch_dims, data->rank), offset;
    mover m = mover_for(data->dtype);
    for (int64_t b = 0; b < batches; b++) {
        for (int64_t j = 0; j < per_batch; j++) {
            int64_t tuple = b * per_batch + j;
            if (nd_offset(k, data, indices, batch_dims, depth, tuple * depth, &offset) != TM_OK)
                return TM_ERR_RUNTIME;
            copy_elements(&m, y->data, tuple * slice, data->data, b * batch_size + offset,
                          slice);
        }
    }
    return mover_status(&m, k);
}

tm_status tm__shape_scatter_nd(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                               int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)prim; (void)nin; (void)nout; (void)scratch;
    const tm_vinfo *data = in[0], *indices = in[1];
    const char *name = "scatter_nd";
    if (check_indices_dtype(c, name, indices) != TM_OK) return c->status;
    int r = data->rank, q = indices->rank;
    int64_t depth = q >= 1 ? indices->dims[q - 1] : -1;
    if (depth < 0 || depth > r)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "scatter_nd: indices of rank %d with last dim "
                           "%lld do not fit data of rank %d", q, (long long)depth, r);
    int rank = q - 1 + r - (int)depth;
    if (rank > TM_MAX_RANK)
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "scatter_nd: updates rank %d exceeds %d",
                           rank, TM_MAX_RANK);
    int64_t dims[TM_MAX_RANK];
    int n = 0;
    for (int d = 0; d < q - 1; d++) dims[n++] = indices->dims[d];
    for (int d = (int)depth; d < r; d++) dims[n++] = data->dims[d];
    if (check_updates(c, name, data, in[2], rank, dims) != TM_OK ||
        check_reduction(c, name, a->i[0], data->dtype) != TM_OK)
        return c->status;
    set_out(out, data->dtype, r, data->dims);
    return TM_OK;
}

tm_status tm__kernel_scatter_nd(const tm_kcall *k) {
    const tm_tensor *data = k->in[0], *indices = k->in[1], *updates = k->in[2];
    tm_tensor *y = k->out[0];
    int64_t reduction = k->a->i[0], depth = indices->dims[indices->rank - 1], offset;
    int64_t tuples = product(indices->dims, 0, indices->rank - 1);
    int64_t slice = product(data->dims, (int)depth, data->rank);
    mover m = mover_for(data->dtype);
    for (int64_t t = 0; t < tuples; t++)
        if (nd_offset(k, data, indices, 0, depth, t * depth, &offset) != TM_OK)
            return TM_ERR_RUNTIME;
    copy_data_once(&m, y, data);
    for (int64_t t = 0; t < tuples; t++) {
        nd_offset(k, data, indices, 0, depth, t * depth, &offset);
        if (reduction == REDUCE_NONE) {
            copy_elements(&m, y->data, offset, updates->data, t * slice, slice);
            continue;
        }
        for (int64_t j = 0; j < slice; j++)
            scatter_one(&m, reduction, y, offset + j, updates, t * slice + j);
    }
    return mover_status(&m, k);
}

/* ---- INDEX_ADD ----------------------------------------------------------------------- */

tm_status tm__shape_index_add(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                              int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)prim; (void)nin; (void)nout; (void)scratch;
    const tm_vinfo *indices = in[0], *updates = in[1];
    char b1[160];
    if (check_indices_dtype(c, "index_add", indices) != TM_OK) return c->status;
    if (!tm_dtype_is_differentiable(updates->dtype))
        return tm_ctx_fail(c, TM_ERR_DTYPE, "index_add: updates must be float32, float64, "
                           "float16 or bfloat16, not %s", tm_dtype_name(updates->dtype));
    if (indices->rank != 1 || updates->rank < 1 || updates->dims[0] != indices->dims[0])
        return tm_ctx_fail(c, TM_ERR_SHAPE, "index_add: updates %s must hold one row per "
                           "index of the rank-1 indices (%d dims)",
                           dims_text(b1, sizeof b1, updates->rank, updates->dims), indices->rank);
    if (a->i[0] <= 0)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "index_add: %lld rows", (long long)a->i[0]);
    set_out(out, updates->dtype, updates->rank, updates->dims);
    out->dims[0] = a->i[0];
    return TM_OK;
}

typedef struct index_add_job {
    const tm_kcall *k;
    int64_t rows, row_len, n;
    const int64_t *stale;     /* INDEX_ADD_KEPT: rows the last run wrote (count first) */
} index_add_job;

/* Zeroes n bytes. Large outputs (an embedding table's gradient: 47 MB for MiniLM) are
 * written with non-temporal stores: they would evict the whole cache anyway, and
 * streaming skips reading every line before writing it (47 MB in two thirds of memset's
 * time, measured alone on the development machine). */
static void zero_bytes(void *p, size_t n) {
#if defined(__AVX__)
    if (n >= ((size_t)1 << 20)) {
        char *c = p;
        size_t head = (32 - ((uintptr_t)c & 31)) & 31;
        memset(c, 0, head);
        size_t body = (n - head) & ~(size_t)31;
        __m256 zero = _mm256_setzero_ps();
        for (size_t i = 0; i < body; i += 32) _mm256_stream_ps((float *)(c + head + i), zero);
        _mm_sfence();
        memset(c + head + body, 0, n - head - body);
        return;
    }
#endif
    memset(p, 0, n);
}

/* Slice ith of nth owns a range of output rows: it zeroes them (INDEX_ADD_KEPT: only the
 * stale rows among them), then adds the updates aimed at them in order of j, so any
 * thread count gives the same sums. */
static void index_add_slice(void *arg, int ith, int nth) {
    const index_add_job *job = arg;
    const tm_tensor *indices = job->k->in[0], *updates = job->k->in[1];
    tm_tensor *y = job->k->out[0];
    int64_t r0 = job->rows * ith / nth, r1 = job->rows * (ith + 1) / nth, len = job->row_len;
    size_t esize = tm_dtype_elem_size(y->dtype), row_bytes = (size_t)len * esize;
    if (!job->stale) {
        zero_bytes((char *)y->data + (size_t)r0 * row_bytes, (size_t)(r1 - r0) * row_bytes);
    } else {
        for (int64_t j = 0; j < job->stale[0]; j++)
            if (job->stale[1 + j] >= r0 && job->stale[1 + j] < r1)
                memset((char *)y->data + (size_t)job->stale[1 + j] * row_bytes, 0, row_bytes);
    }
    for (int64_t j = 0; j < job->n; j++) {
        int64_t r = load_index(indices, j);
        if (r < 0) r += job->rows;
        if (r < r0 || r >= r1) continue;
        if (y->dtype == TM_FLOAT) {
            float *dst = (float *)y->data + r * len;
            const float *src = (const float *)updates->data + j * len;
            for (int64_t e = 0; e < len; e++) dst[e] += src[e];
        } else if (y->dtype == TM_DOUBLE) {
            double *dst = (double *)y->data + r * len;
            const double *src = (const double *)updates->data + j * len;
            for (int64_t e = 0; e < len; e++) dst[e] += src[e];
        } else {
            for (int64_t e = 0; e < len; e++) {
                size_t o = (size_t)(r * len + e), u = (size_t)(j * len + e);
                tm_store_f64(y->data, y->dtype, o, tm_load_f64(y->data, y->dtype, o) +
                                                     tm_load_f64(updates->data, y->dtype, u));
            }
        }
    }
}

/* Below this many output bytes one thread zeroes faster than a pool wakes. */
#define INDEX_ADD_PARALLEL_BYTES ((size_t)1 << 20)

tm_status tm__kernel_index_add(const tm_kcall *k) {
    const tm_tensor *indices = k->in[0];
    tm_tensor *y = k->out[0];
    index_add_job job = {k, y->dims[0], product(y->dims, 1, y->rank), indices->dims[0], NULL};
    for (int64_t j = 0; j < job.n; j++) {
        int64_t v;
        if (resolve_index(k, load_index(indices, j), job.rows, 0, &v) != TM_OK) return TM_ERR_RUNTIME;
    }
    int nth = y->nbytes < INDEX_ADD_PARALLEL_BYTES ? 1 : tm_pool_threads(k->pool);
    if (nth > job.rows) nth = (int)job.rows;
    if (nth <= 1) index_add_slice(&job, 0, 1);
    else tm_pool_run(k->pool, nth, index_add_slice, &job);
    return TM_OK;
}

/* ---- INDEX_ADD_KEPT ------------------------------------------------------------------ */

tm_status tm__shape_index_add_kept(tm_ctx *c, int prim, const tm_args *a,
                                   const tm_vinfo *const *in, int nin, tm_vinfo *out, int nout,
                                   size_t *scratch) {
    if (tm__shape_index_add(c, prim, a, in, nin, out, 1, scratch) != TM_OK) return c->status;
    int64_t written = in[0]->dims[0] + 1;
    set_out(&out[1], TM_INT64, 1, &written);
    return TM_OK;
}

/* Output 0 holds the last run's sums, zero except in the rows output 1 lists: those rows
 * are zeroed and the rest is left as it is (a table of 30522 rows with 128 written is
 * 0.4% of a full zeroing). A list that cannot be the last run's (a count out of range,
 * a row outside the table) zeroes the whole table instead. */
tm_status tm__kernel_index_add_kept(const tm_kcall *k) {
    const tm_tensor *indices = k->in[0];
    tm_tensor *y = k->out[0];
    int64_t *written = k->out[1]->data;
    index_add_job job = {k, y->dims[0], product(y->dims, 1, y->rank), indices->dims[0], written};
    for (int64_t j = 0; j < job.n; j++) {
        int64_t v;
        if (resolve_index(k, load_index(indices, j), job.rows, 0, &v) != TM_OK) return TM_ERR_RUNTIME;
    }
    int known = written[0] >= 0 && written[0] <= job.n;
    for (int64_t j = 0; known && j < written[0]; j++)
        known = written[1 + j] >= 0 && written[1 + j] < job.rows;
    if (!known) job.stale = NULL;
    size_t work = known ? (size_t)job.n * (size_t)job.row_len * tm_dtype_elem_size(y->dtype)
                        : y->nbytes;
    int nth = work < INDEX_ADD_PARALLEL_BYTES ? 1 : tm_pool_threads(k->pool);
    if (nth > job.rows) nth = (int)job.rows;
    if (nth <= 1) index_add_slice(&job, 0, 1);
    else tm_pool_run(k->pool, nth, index_add_slice, &job);
    for (int64_t j = 0; j < job.n; j++) {
        int64_t r = load_index(indices, j);
        written[1 + j] = r < 0 ? r + job.rows : r;
    }
    written[0] = job.n;
    return TM_OK;
}

/* ---- KV_APPEND ------------------------------------------------------------------------ */

tm_status tm__shape_kv_append(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                              int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)prim; (void)a; (void)nin; (void)nout; (void)scratch;
    const tm_vinfo *cache = in[0], *x = in[1];
    /* float16 cache, float32 rows: passes/kv_append.c's half-precision cache */
    int half = cache->dtype == TM_FLOAT16 && x->dtype == TM_FLOAT;
    if (cache->rank != 4 || x->rank != 4 || (cache->dtype != x->dtype && !half) ||
        x->dtype == TM_STRING)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "kv_append: needs a rank-4 cache and rank-4 new "
                           "rows of one dtype (or a float16 cache and float32 rows)");
    if (cache->dims[1] != x->dims[0] || cache->dims[2] != x->dims[1] ||
        cache->dims[3] != x->dims[3])
        return tm_ctx_fail(c, TM_ERR_SHAPE, "kv_append: the cache (P, B, H, D) and the new "
                           "rows (B, H, S, D) disagree");
    int64_t dims[4] = {cache->dims[0] + x->dims[2], cache->dims[1], cache->dims[2], cache->dims[3]};
    set_out(out, cache->dtype, 4, dims);
    return TM_OK;
}

tm_status tm__kernel_kv_append(const tm_kcall *k) {
    const tm_tensor *cache = k->in[0], *x = k->in[1];
    tm_tensor *y = k->out[0];
    size_t es = tm_dtype_elem_size(y->dtype);
    int half = y->dtype == TM_FLOAT16 && x->dtype == TM_FLOAT;
    const tm__kvmath *km = half ? tm__kvmath_active() : NULL;
    int64_t b_n = x->dims[0], h_n = x->dims[1], s_n = x->dims[2], d_n = x->dims[3];
    int64_t p_n = cache->dims[0];
    size_t pos = (size_t)(b_n * h_n * d_n) * es, head = (size_t)d_n * es;
    /* Position-major: the new positions go after the P, whatever the batch, and in place
     * (a decoder's case) the first P are there already. */
    if (y->data != cache->data) memmove(y->data, cache->data, (size_t)p_n * pos);
    for (int64_t s = 0; s < s_n; s++)
        for (int64_t b = 0; b < b_n; b++)
            for (int64_t h = 0; h < h_n; h++) {
                char *dst = (char *)y->data + (size_t)(p_n + s) * pos + (size_t)(b * h_n + h) * head;
                int64_t from = (((b * h_n + h) * s_n) + s) * d_n;   /* x's element */
                if (half) km->to_f16((const float *)x->data + from, (uint16_t *)dst, d_n);
                else memcpy(dst, (const char *)x->data + (size_t)from * es, head);
            }
    return TM_OK;
}
