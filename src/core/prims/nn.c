/* Fused neural-network primitives (rows in nn.def): SOFTMAX / log-softmax over one axis
 * and LAYERNORM / RMS norm, their shape rules and CPU kernels. Float32 has typed fast
 * paths; every other float dtype is computed in double through the dtype accessors.
 * Not the ONNX lowerings (older Softmax's 2-D coercion, axis normalisation). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../ctx.h"
#include "fused.h"
#include "../../backends/cpu/gemm.h"
#include "../../backends/cpu/pool.h"

/* x86 fast paths are compiled per function (target attributes) and picked at run time,
 * so a portable build keeps them and an old CPU never reaches them. */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define NN_X86 1
#include <immintrin.h>
#endif

/* The build's -O2 keeps loops that need a scalar epilogue scalar (GCC's very-cheap vector
 * cost model): the gradient kernels' row loops ask for the full vectorizer, as
 * elementwise.c does for its whole file. */
#if defined(__GNUC__) && !defined(__clang__)
#define NN_VECTORIZE __attribute__((optimize("O3")))
#else
#define NN_VECTORIZE
#endif

/* "(2, 3, 4)" into buf, for error messages. */
static const char *dims_text(char *buf, size_t cap, int rank, const int64_t *dims) {
    size_t used = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < rank && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%lld", i ? ", " : "",
                                 (long long)dims[i]);
    if (used < cap) snprintf(buf + used, cap - used, ")");
    return buf;
}

/* Sums of float rows in independent partial sums: the compiler vectorizes them, which a
 * single running sum (a strict order of additions) forbids. */
#define PARTIALS 16

/* ---- Rows over the pool -------------------------------------------------------------
 * Row-wise kernels (softmax, layer norm and their backwards) split their rows over the
 * model's pool when there are enough elements to pay for waking it; rows are computed
 * alone, so any split gives the same bytes. Between a plan's parallel products the
 * workers are still polling (pool.c's spin), so even a 128 x 384 layer norm (30-45 us
 * alone) gains: MiniLM 1 x 128 on two threads, its 13 layer norms 0.48-0.64 -> 0.31-0.33
 * ms a run (1 << 16 before: they ran on one thread). */

#define NN_PARALLEL_MIN_ELEMENTS ((int64_t)1 << 15)
#define NN_PARALLEL_SLICES 8

typedef void (*nn_rows_fn)(const void *job, int64_t r0, int64_t r1);

typedef struct nn_rows_job {
    nn_rows_fn fn;
    const void *job;
    int64_t rows;
} nn_rows_job;

static void nn_rows_slice(void *arg, int ith, int nth) {
    const nn_rows_job *j = arg;
    int64_t r0 = j->rows * ith / nth, r1 = j->rows * (ith + 1) / nth;
    if (r0 < r1) j->fn(j->job, r0, r1);
}

static void nn_rows_run(struct tm_pool *pool, int64_t rows, int64_t row_len, nn_rows_fn fn,
                        const void *job) {
    if (rows > 1 && tm_pool_threads(pool) > 1 && rows * row_len >= NN_PARALLEL_MIN_ELEMENTS) {
        nn_rows_job j = {fn, job, rows};
        tm_pool_run_n(pool, NN_PARALLEL_SLICES, nn_rows_slice, &j);
    } else {
        fn(job, 0, rows);
    }
}

static float max_f32(const float *x, int64_t n) {
    float part[PARTIALS];
    for (int q = 0; q < PARTIALS; q++) part[q] = -INFINITY;
    int64_t j = 0;
    for (; j + PARTIALS <= n; j += PARTIALS)
        for (int q = 0; q < PARTIALS; q++) part[q] = x[j + q] > part[q] ? x[j + q] : part[q];
    float best = -INFINITY;
    for (int q = 0; q < PARTIALS; q++) best = part[q] > best ? part[q] : best;
    for (; j < n; j++) best = x[j] > best ? x[j] : best;
    return best;
}

/* ---- SOFTMAX --------------------------------------------------------------------------- */

/* x viewed as (outer, length, inner) around the softmax axis. */
static void softmax_split(int rank, const int64_t *dims, int axis, int64_t *outer,
                          int64_t *length, int64_t *inner) {
    *outer = tm_numel(axis, dims);
    *length = dims[axis];
    *inner = tm_numel(rank - axis - 1, dims + axis + 1);
}

tm_status tm__shape_softmax(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                            int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)prim; (void)nin; (void)nout;
    const tm_vinfo *x = in[0];
    char tx[160];
    if (x->dtype == TM_STRING)
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "softmax: string tensors are not supported");
    if (!tm_dtype_is_float(x->dtype))
        return tm_ctx_fail(c, TM_ERR_DTYPE, "softmax: x must be a float tensor, got %s",
                           tm_dtype_name(x->dtype));
    if (a->i[0] < 0 || a->i[0] >= x->rank)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "softmax: axis %lld is out of range for x %s",
                           (long long)a->i[0], dims_text(tx, sizeof tx, x->rank, x->dims));
    if (a->i[1] != 0 && a->i[1] != 1)
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "softmax: i[1] must be 0 (softmax) or 1 "
                           "(log-softmax), got %lld", (long long)a->i[1]);
    out->dtype = x->dtype;
    out->rank = x->rank;
    memcpy(out->dims, x->dims, sizeof out->dims);
    int64_t outer, length, inner;
    softmax_split(x->rank, x->dims, (int)a->i[0], &outer, &length, &inner);
    /* f32 along an inner axis: running max and sum of `inner` lanes at once. */
    *scratch = x->dtype == TM_FLOAT && inner > 1 ? (size_t)inner * 2 * sizeof(float) : 0;
    return TM_OK;
}

/* One contiguous row: y = exp(x - max) / sum, or x - max - log(sum). */
static void softmax_row_f32(const float *x, float *y, int64_t n, int log_form) {
    if (n == 0) return;
    float top = max_f32(x, n);
    if (log_form) {
        float sum = 0.0f;
        for (int64_t j = 0; j < n; j++) sum += expf(x[j] - top);
        /* (x - top) first: top + log(sum) would round away the small part. */
        float log_sum = logf(sum);
        for (int64_t j = 0; j < n; j++) y[j] = (x[j] - top) - log_sum;
        return;
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        y[j] = expf(x[j] - top);
        sum += y[j];
    }
    float scale = 1.0f / sum;
    for (int64_t j = 0; j < n; j++) y[j] *= scale;
}

/* One (length, inner) block, the softmax running down its columns. */
static void softmax_block_f32(const float *x, float *y, int64_t length, int64_t inner,
                              int log_form, float *top, float *sum) {
    for (int64_t i = 0; i < inner; i++) {
        top[i] = -INFINITY;
        sum[i] = 0.0f;
    }
    for (int64_t j = 0; j < length; j++)
        for (int64_t i = 0; i < inner; i++) {
            float v = x[j * inner + i];
            top[i] = v > top[i] ? v : top[i];
        }
    for (int64_t j = 0; j < length; j++)
        for (int64_t i = 0; i < inner; i++) {
            float e = expf(x[j * inner + i] - top[i]);
            if (!log_form) y[j * inner + i] = e;
            sum[i] += e;
        }
    for (int64_t i = 0; i < inner; i++) sum[i] = log_form ? logf(sum[i]) : 1.0f / sum[i];
    for (int64_t j = 0; j < length; j++)
        for (int64_t i = 0; i < inner; i++) {
            if (log_form) y[j * inner + i] = (x[j * inner + i] - top[i]) - sum[i];
            else y[j * inner + i] *= sum[i];
        }
}

#ifdef NN_X86
/* exp(x) for 8 and 16 lanes: Cephes' expf (a degree-6 polynomial on x - n ln 2), relative
 * error about 1e-7; 2^n applied as two factors so results down to the subnormals stay
 * right (inputs are clamped to [-104, 89]: below, exp rounds to 0). NaN stays NaN. */
#define EXP_LOG2E 1.44269504088896341f
#define EXP_C1 0.693359375f
#define EXP_C2 -2.12194440e-4f
#define EXP_P0 1.9875691500e-4f
#define EXP_P1 1.3981999507e-3f
#define EXP_P2 8.3334519073e-3f
#define EXP_P3 4.1665795894e-2f
#define EXP_P4 1.6666665459e-1f
#define EXP_P5 5.0000001201e-1f

__attribute__((target("avx2,fma"))) static inline __m256 exp_avx2(__m256 x) {
    __m256 c = _mm256_max_ps(x, _mm256_set1_ps(-104.0f));  /* NaN x gives -104 here */
    c = _mm256_min_ps(c, _mm256_set1_ps(89.0f));
    __m256 n = _mm256_floor_ps(_mm256_fmadd_ps(c, _mm256_set1_ps(EXP_LOG2E),
                                               _mm256_set1_ps(0.5f)));
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_C1), c);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(EXP_C2), r);
    __m256 p = _mm256_set1_ps(EXP_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_P5));
    p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i k = _mm256_cvtps_epi32(n);
    __m256i half = _mm256_srai_epi32(k, 1);
    __m256i bias = _mm256_set1_epi32(127);
    __m256 f1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
    __m256 f2 = _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(k, half), bias), 23));
    __m256 y = _mm256_mul_ps(_mm256_mul_ps(p, f1), f2);
    return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

__attribute__((target("avx512f"))) static inline __m512 exp_avx512(__m512 x) {
    /* The clamps' operands in the order that lets a NaN through (min and max return the
     * second when either is NaN), so no fix-up step; n = round(x log2 e) by adding and
     * taking away 1.5 x 2^23 (two FMA-pipe operations where roundscale is two uops on one
     * pipe of an Intel core). Below ln(FLT_MIN) the result is 0, not a subnormal: a
     * masked score (a padded key: the exporters' mask is the float minimum) made one,
     * and an Intel core takes a microcode assist on each (64 x 128 score blocks with 8
     * keys masked: 1.1 -> 0.5 ns a score); masked lanes take none. */
    __mmask16 normal = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.33654f), _CMP_NLT_UQ);
    __m512 c = _mm512_max_ps(_mm512_set1_ps(-88.0f), x);
    c = _mm512_min_ps(_mm512_set1_ps(89.0f), c);
    __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(c, _mm512_set1_ps(EXP_LOG2E), _mm512_set1_ps(12582912.0f)),
                             _mm512_set1_ps(12582912.0f));
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_C1), c);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_C2), r);
    __m512 p = _mm512_set1_ps(EXP_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_P5));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    /* p 2^n in one instruction (the AVX2 form's two exponent factors: n reaches 128). */
    return _mm512_maskz_scalef_ps(normal, p, n);
}

/* One contiguous f32 row as softmax_row_f32, 8 lanes at a time. Sums run in 8 f32
 * partials (the scalar path has one): no worse rounding. */
__attribute__((target("avx2,fma")))
static void softmax_row_avx2(const float *x, float *y, int64_t n, int log_form) {
    if (n == 0) return;
    float lanes[8];
    __m256 vtop = _mm256_set1_ps(-INFINITY);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) vtop = _mm256_max_ps(_mm256_loadu_ps(x + j), vtop);
    _mm256_storeu_ps(lanes, vtop);
    float top = -INFINITY;
    for (int q = 0; q < 8; q++) top = lanes[q] > top ? lanes[q] : top;
    for (int64_t t = j; t < n; t++) top = x[t] > top ? x[t] : top;
    vtop = _mm256_set1_ps(top);
    __m256 vsum = _mm256_setzero_ps();
    for (j = 0; j + 8 <= n; j += 8) {
        __m256 e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + j), vtop));
        if (!log_form) _mm256_storeu_ps(y + j, e);
        vsum = _mm256_add_ps(vsum, e);
    }
    if (j < n) {  /* the tail through a buffer padded with -inf (exp gives 0) */
        for (int q = 0; q < 8; q++) lanes[q] = j + q < n ? x[j + q] : -INFINITY;
        __m256 e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(lanes), vtop));
        vsum = _mm256_add_ps(vsum, e);  /* padding adds 0, or NaN where the row is NaN */
        _mm256_storeu_ps(lanes, e);
        if (!log_form)
            for (int64_t t = j; t < n; t++) y[t] = lanes[t - j];
    }
    _mm256_storeu_ps(lanes, vsum);
    float sum = 0.0f;
    for (int q = 0; q < 8; q++) sum += lanes[q];
    if (log_form) {
        float log_sum = logf(sum);
        for (j = 0; j < n; j++) y[j] = (x[j] - top) - log_sum;
        return;
    }
    __m256 scale = _mm256_set1_ps(1.0f / sum);
    for (j = 0; j + 8 <= n; j += 8) _mm256_storeu_ps(y + j, _mm256_mul_ps(_mm256_loadu_ps(y + j), scale));
    for (; j < n; j++) y[j] *= 1.0f / sum;
}

/* R rows (R <= 4) of n, 16 lanes at a time, side by side: row r from src[r] into dst[r]
 * (the same row, or another). A row's passes are short dependent chains (a running
 * maximum, a running sum, their reductions, then the scaling), and one row leaves the
 * core waiting on them; four rows side by side fill it (attention's score rows, 128 long
 * in MiniLM; a SOFTMAX kernel's rows likewise, 0.16 -> 0.11 ms for MiniLM's 12 x 128
 * rows of 128 in a gradient plan). pre (NULL: none; see tm__softmax_block_f32) scales
 * then masks (masks[r]) in the first pass, which then stores the scores into dst. Tails
 * through masked loads and stores; each row's steps and their order do not depend on R. */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void
softmax_rows_body(const float *const *src, float *const *dst, const int R, int64_t n,
                  const tm_softmax_pre *pre, const float *const *masks, int log_form) {
    __m512 top[4], sum[4];
    const float *from[4];   /* the rows the later passes read: src, or dst once pre ran */
    int64_t full = n / 16 * 16;
    __mmask16 tail = (__mmask16)((1u << (n - full)) - 1u);
    const __m512 scale_by = _mm512_set1_ps(pre ? pre->scale : 1.0f);
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        top[r] = _mm512_set1_ps(-INFINITY);
        from[r] = pre ? dst[r] : src[r];
    }
    for (int64_t j = 0; j < n; j += 16) {
        __mmask16 m = j < full ? (__mmask16)0xffff : tail;
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            __m512 v = _mm512_maskz_loadu_ps(m, src[r] + j);
            if (pre) {
                if (pre->scale_kind == 1) v = _mm512_mul_ps(v, scale_by);
                else if (pre->scale_kind == 2) v = _mm512_div_ps(v, scale_by);
                if (masks[r])
                    v = _mm512_add_ps(v, pre->mask_scalar ? _mm512_set1_ps(masks[r][0])
                                                          : _mm512_maskz_loadu_ps(m, masks[r] + j));
                _mm512_mask_storeu_ps(dst[r] + j, m, v);
            }
            top[r] = _mm512_mask_max_ps(top[r], m, v, top[r]);
        }
    }
    float tops[4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) {
        tops[r] = _mm512_reduce_max_ps(top[r]);
        top[r] = _mm512_set1_ps(tops[r]);
        sum[r] = _mm512_setzero_ps();
    }
    for (int64_t j = 0; j < full; j += 16) {
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            __m512 e = exp_avx512(_mm512_sub_ps(_mm512_loadu_ps(from[r] + j), top[r]));
            if (!log_form) _mm512_storeu_ps(dst[r] + j, e);
            sum[r] = _mm512_add_ps(sum[r], e);
        }
    }
    if (full < n) {
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            __m512 e = exp_avx512(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, from[r] + full), top[r]));
            if (!log_form) _mm512_mask_storeu_ps(dst[r] + full, tail, e);
            sum[r] = _mm512_mask_add_ps(sum[r], tail, sum[r], e);
        }
    }
    if (log_form) {   /* (x - top) - log(sum), as the scalar row has it */
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            float log_sum = logf(_mm512_reduce_add_ps(sum[r]));
            for (int64_t j = 0; j < n; j++) dst[r][j] = (from[r][j] - tops[r]) - log_sum;
        }
        return;
    }
    __m512 scale[4];
#pragma GCC unroll 4
    for (int r = 0; r < R; r++) scale[r] = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum[r]));
    for (int64_t j = 0; j < full; j += 16) {
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            _mm512_storeu_ps(dst[r] + j, _mm512_mul_ps(_mm512_loadu_ps(dst[r] + j), scale[r]));
    }
    if (full < n) {
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            _mm512_mask_storeu_ps(dst[r] + full, tail,
                                  _mm512_mul_ps(_mm512_maskz_loadu_ps(tail, dst[r] + full), scale[r]));
    }
}

/* R a constant in each form, so that the rows' running maxima and sums stay in registers
 * (a count known only at run time, and loops GCC would not unroll, kept them in memory:
 * MiniLM's 64 x 128 score blocks 0.58 -> 0.42 ns a score on a Xeon). */
__attribute__((target("avx512f")))
static void softmax_rows_avx512(const float *const *src, float *const *dst, int R, int64_t n,
                                const tm_softmax_pre *pre, const float *const *masks,
                                int log_form) {
    switch (R) {
    case 1: softmax_rows_body(src, dst, 1, n, pre, masks, log_form); break;
    case 2: softmax_rows_body(src, dst, 2, n, pre, masks, log_form); break;
    case 3: softmax_rows_body(src, dst, 3, n, pre, masks, log_form); break;
    default: softmax_rows_body(src, dst, 4, n, pre, masks, log_form); break;
    }
}

/* rows rows of n, ld floats apart, from x into y (the same rows, or others), four at a
 * time; pre and masks (masks[r] for row r) as softmax_rows_avx512 takes them. */
__attribute__((target("avx512f")))
static void softmax_rows4_avx512(const float *x, float *y, int64_t ld, int64_t rows, int64_t n,
                                 const tm_softmax_pre *pre, const float *const *masks,
                                 int log_form) {
    for (int64_t r0 = 0; r0 < rows; r0 += 4) {
        const float *src[4];
        float *dst[4];
        int R = rows - r0 < 4 ? (int)(rows - r0) : 4;
        for (int r = 0; r < R; r++) {
            src[r] = x + (r0 + r) * ld;
            dst[r] = y + (r0 + r) * ld;
        }
        softmax_rows_avx512(src, dst, R, n, pre, masks ? masks + r0 : NULL, log_form);
    }
}

/* One contiguous f32 row as softmax_row_f32: the rows kernel on one row. */
__attribute__((target("avx512f")))
static void softmax_row_avx512(const float *x, float *y, int64_t n, int log_form) {
    if (n > 0) softmax_rows_avx512(&x, &y, 1, n, NULL, NULL, log_form);
}
#endif

typedef void (*softmax_row_fn)(const float *x, float *y, int64_t n, int log_form);

/* The best row kernel this CPU runs (TM_KERNEL_ISA=avx2|scalar forces a lesser one, for
 * tests and comparisons). */
static softmax_row_fn softmax_row_pick(void) {
    softmax_row_fn picked;
#ifdef NN_X86
    const char *isa = getenv("TM_KERNEL_ISA");
    int allow512 = !isa || !strcmp(isa, "avx512"), allow2 = allow512 || !strcmp(isa, "avx2");
    __builtin_cpu_init();
    if (allow512 && __builtin_cpu_supports("avx512f")) return picked = softmax_row_avx512;
    if (allow2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return picked = softmax_row_avx2;
#endif
    return picked = softmax_row_f32;
}

static pthread_once_t fused_row_once = PTHREAD_ONCE_INIT;
static softmax_row_fn fused_row;   /* written once, under fused_row_once */

static void pick_fused_row(void) {
    fused_row = tm_use_reference_kernels() ? softmax_row_f32 : softmax_row_pick();
}

void tm__softmax_rows_f32(const float *x, float *y, int64_t n) {
    pthread_once(&fused_row_once, pick_fused_row);
    fused_row(x, y, n, 0);
}

/* A row's scores scaled and masked as pre says, in plain steps (the vector kernel's). */
static void pre_row(float *row, int64_t n, const tm_softmax_pre *pre, const float *mask) {
    if (pre->scale_kind == 1)
        for (int64_t j = 0; j < n; j++) row[j] *= pre->scale;
    else if (pre->scale_kind == 2)
        for (int64_t j = 0; j < n; j++) row[j] /= pre->scale;
    if (mask && pre->mask_scalar)
        for (int64_t j = 0; j < n; j++) row[j] += mask[0];
    else if (mask)
        for (int64_t j = 0; j < n; j++) row[j] += mask[j];
}

void tm__softmax_block_f32(float *s, int64_t rows, int64_t n, int64_t lds,
                           const tm_softmax_pre *pre, const float *const *masks) {
    pthread_once(&fused_row_once, pick_fused_row);
    if (n <= 0) return;
#ifdef NN_X86
    if (fused_row == softmax_row_avx512) {
        softmax_rows4_avx512(s, s, lds, rows, n, pre, masks, 0);
        return;
    }
#endif
    for (int64_t r = 0; r < rows; r++) {
        pre_row(s + r * lds, n, pre, masks[r]);
        fused_row(s + r * lds, s + r * lds, n, 0);
    }
}

/* Any float dtype, one lane at a time in double. */
static void softmax_lane_generic(const tm_tensor *x, tm_tensor *y, int64_t first,
                                 int64_t length, int64_t inner, int log_form) {
    double top = -INFINITY, sum = 0.0;
    for (int64_t j = 0; j < length; j++) {
        double v = tm_load_f64(x->data, x->dtype, (size_t)(first + j * inner));
        top = v > top ? v : top;
    }
    for (int64_t j = 0; j < length; j++)
        sum += exp(tm_load_f64(x->data, x->dtype, (size_t)(first + j * inner)) - top);
    double log_sum = log(sum);
    for (int64_t j = 0; j < length; j++) {
        size_t i = (size_t)(first + j * inner);
        double v = tm_load_f64(x->data, x->dtype, i);
        tm_store_f64(y->data, y->dtype, i, log_form ? (v - top) - log_sum : exp(v - top) / sum);
    }
}

typedef struct softmax_rows_job {
    softmax_row_fn row;
    const float *x;
    float *y;
    int64_t length;
    int log_form;
} softmax_rows_job;

static void softmax_rows(const void *arg, int64_t r0, int64_t r1) {
    const softmax_rows_job *j = arg;
#ifdef NN_X86
    if (j->row == softmax_row_avx512) {   /* four rows side by side, as attention's */
        softmax_rows4_avx512(j->x + r0 * j->length, j->y + r0 * j->length, j->length, r1 - r0,
                             j->length, NULL, NULL, j->log_form);
        return;
    }
#endif
    for (int64_t o = r0; o < r1; o++)
        j->row(j->x + o * j->length, j->y + o * j->length, j->length, j->log_form);
}

tm_status tm__kernel_softmax(const tm_kcall *kc) {
    const tm_tensor *x = kc->in[0];
    tm_tensor *y = kc->out[0];
    int log_form = kc->a->i[1] == 1;
    int64_t outer, length, inner;
    softmax_split(x->rank, x->dims, (int)kc->a->i[0], &outer, &length, &inner);
    /* Nothing to do for an empty tensor, whose scratch is NULL (NULL + 0 is undefined). */
    if (outer == 0 || length == 0 || inner == 0) return TM_OK;
    if (x->dtype == TM_FLOAT && !tm_use_reference_kernels()) {
        const float *xs = x->data;
        float *ys = y->data;
        if (inner == 1) {
            softmax_rows_job job = {softmax_row_pick(), xs, ys, length, log_form};
            nn_rows_run(kc->pool, outer, length, softmax_rows, &job);
            return TM_OK;
        }
        for (int64_t o = 0; o < outer; o++) {
            int64_t first = o * length * inner;
            softmax_block_f32(xs + first, ys + first, length, inner, log_form, kc->scratch,
                              (float *)kc->scratch + inner);
        }
        return TM_OK;
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++)
            softmax_lane_generic(x, y, o * length * inner + i, length, inner, log_form);
    return TM_OK;
}

/* ---- LAYERNORM -------------------------------------------------------------------------- */

/* Scale and bias fit the normalised shape x.dims[axis:] when, aligned to its right, each
 * of their dims equals it or is 1. */
static int layernorm_fits(const tm_vinfo *p, int rank, const int64_t *dims, int axis) {
    int normalised = rank - axis;
    if (p->rank > normalised) return 0;
    for (int d = 0; d < p->rank; d++) {
        int64_t target = dims[rank - p->rank + d];
        if (p->dims[d] != target && p->dims[d] != 1) return 0;
    }
    return 1;
}

/* Scale and bias are used as they are only when they are f32 of the full normalised
 * size with f32 x; otherwise they are expanded once into scratch (float for f32 x,
 * double for the others). */
static int layernorm_param_direct(tm_dtype x_dtype, tm_dtype param_dtype, int64_t param_count,
                                  int64_t count) {
    return x_dtype == TM_FLOAT && param_dtype == TM_FLOAT && param_count == count;
}

tm_status tm__shape_layernorm(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                              int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)prim; (void)nout;
    const tm_vinfo *x = in[0];
    char tx[160], tp[160];
    if (nin != 2 && nin != 3)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "layernorm: expected 2 or 3 inputs (x, scale, "
                           "[bias]), got %d", nin);
    for (int i = 0; i < nin; i++) {
        if (in[i]->dtype == TM_STRING)
            return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "layernorm: string tensors are not "
                               "supported");
        if (!tm_dtype_is_float(in[i]->dtype))
            return tm_ctx_fail(c, TM_ERR_DTYPE, "layernorm: input %d must be a float tensor, "
                               "got %s", i, tm_dtype_name(in[i]->dtype));
    }
    dims_text(tx, sizeof tx, x->rank, x->dims);
    if (a->i[0] < 0 || a->i[0] >= x->rank)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "layernorm: axis %lld is out of range for x %s",
                           (long long)a->i[0], tx);
    if (a->i[1] != 0 && a->i[1] != 1)
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "layernorm: i[1] must be 0 (layer norm) or "
                           "1 (RMS norm), got %lld", (long long)a->i[1]);
    int axis = (int)a->i[0];
    for (int i = 1; i < nin; i++) {
        if (!layernorm_fits(in[i], x->rank, x->dims, axis))
            return tm_ctx_fail(c, TM_ERR_SHAPE, "layernorm: %s %s does not broadcast to the "
                               "normalised dims of x %s from axis %d", i == 1 ? "scale" : "bias",
                               dims_text(tp, sizeof tp, in[i]->rank, in[i]->dims), tx, axis);
    }
    out[0].dtype = x->dtype;
    out[0].rank = x->rank;
    memcpy(out[0].dims, x->dims, sizeof out[0].dims);
    for (int i = 1; i < 3; i++) {
        out[i].dtype = TM_FLOAT;
        out[i].rank = x->rank;
        for (int d = 0; d < x->rank; d++) out[i].dims[d] = d < axis ? x->dims[d] : 1;
    }
    int64_t count = tm_numel(x->rank - axis, x->dims + axis);
    int direct = 1;
    for (int i = 1; i < nin; i++)
        direct &= layernorm_param_direct(x->dtype, in[i]->dtype,
                                         tm_numel(in[i]->rank, in[i]->dims), count);
    size_t elem = x->dtype == TM_FLOAT ? sizeof(float) : sizeof(double);
    *scratch = direct ? 0 : (size_t)count * (size_t)(nin - 1) * elem;
    return TM_OK;
}

/* Element j of the normalised block of p, broadcast over x.dims[axis:]. */
static int64_t layernorm_param_index(const tm_tensor *p, const tm_tensor *x, int axis,
                                     int64_t j) {
    int64_t at = 0, stride = 1;
    for (int d = x->rank - 1; d >= axis; d--) {
        int64_t i = j % x->dims[d];
        j /= x->dims[d];
        int pd = d - (x->rank - p->rank);
        if (pd < 0) break;
        if (p->dims[pd] != 1) at += i * stride;
        stride *= p->dims[pd];
    }
    return at;
}

/* Expands scale and bias over the normalised block into float (as_float) or double. */
static void layernorm_expand(const tm_tensor *const *params, int n_params, const tm_tensor *x,
                             int axis, int64_t count, int as_float, void *scratch) {
    for (int i = 0; i < n_params; i++)
        for (int64_t j = 0; j < count; j++) {
            int64_t at = layernorm_param_index(params[i], x, axis, j);
            double v = tm_load_f64(params[i]->data, params[i]->dtype, (size_t)at);
            if (as_float) ((float *)scratch)[i * count + j] = (float)v;
            else ((double *)scratch)[i * count + j] = v;
        }
}

/* Sum of a float row in double lanes. */
static double sum_f32_wide(const float *x, int64_t n) {
    double part[PARTIALS] = {0};
    int64_t j = 0;
    for (; j + PARTIALS <= n; j += PARTIALS)
        for (int q = 0; q < PARTIALS; q++) part[q] += x[j + q];
    double total = 0.0;
    for (int q = 0; q < PARTIALS; q++) total += part[q];
    for (; j < n; j++) total += x[j];
    return total;
}

/* Sum of (x - center)^2 in double, center unrounded. */
static double sum_sq_f32_wide(const float *x, int64_t n, double center) {
    double part[PARTIALS] = {0};
    int64_t j = 0;
    for (; j + PARTIALS <= n; j += PARTIALS)
        for (int q = 0; q < PARTIALS; q++) {
            double d = (double)x[j + q] - center;
            part[q] += d * d;
        }
    double total = 0.0;
    for (int q = 0; q < PARTIALS; q++) total += part[q];
    for (; j < n; j++) total += ((double)x[j] - center) * ((double)x[j] - center);
    return total;
}

/* The mean stays in double until x - mean: rounded to float first, it would move every
 * output by up to half an ulp of the mean over sigma, which is 2e-3 for the rows of
 * ONNX Runtime's transformer test graphs (mean 36,000, sigma 1 to 80). */
static void layernorm_row_f32(const float *x, float *y, int64_t n, const float *scale,
                              const float *bias, int rms, double epsilon, float *mean_out,
                              float *inv_std_out) {
    double mean = rms || n == 0 ? 0.0 : sum_f32_wide(x, n) / (double)n;
    double variance = n ? sum_sq_f32_wide(x, n, mean) / (double)n : 0.0;
    double inv_std = 1.0 / sqrt(variance + epsilon);
    *mean_out = (float)mean;
    *inv_std_out = (float)inv_std;
    if (bias)
        for (int64_t j = 0; j < n; j++)
            y[j] = (float)(((double)x[j] - mean) * inv_std) * scale[j] + bias[j];
    else
        for (int64_t j = 0; j < n; j++) y[j] = (float)(((double)x[j] - mean) * inv_std) * scale[j];
}

#ifdef NN_X86
/* layernorm_row_f32 sixteen lanes at a time, each lane one of its PARTIALS double sums
 * (two vectors of 8), in the same order: the same bits. The products stay two roundings
 * (float multiply, then add), as the scalar form without contraction. */
/* The low and high 8 lanes of v in double. */
__attribute__((target("avx512f"))) static inline __m512d widen_lo(__m512 v) {
    return _mm512_cvtps_pd(_mm512_castps512_ps256(v));
}
__attribute__((target("avx512f"))) static inline __m512d widen_hi(__m512 v) {
    return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

__attribute__((target("avx512f"))) static double sum_lanes_avx512(__m512d lo, __m512d hi) {
    double part[PARTIALS];
    _mm512_storeu_pd(part, lo);
    _mm512_storeu_pd(part + 8, hi);
    double total = 0.0;
    for (int q = 0; q < PARTIALS; q++) total += part[q];
    return total;
}

__attribute__((target("avx512f")))
static void layernorm_row_f32_avx512(const float *x, float *y, int64_t n, const float *scale,
                                     const float *bias, int rms, double epsilon,
                                     float *mean_out, float *inv_std_out) {
    int64_t whole = n / PARTIALS * PARTIALS;
    double mean = 0.0;
    if (!rms && n) {
        __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
        for (int64_t j = 0; j < whole; j += PARTIALS) {
            __m512 v = _mm512_loadu_ps(x + j);
            lo = _mm512_add_pd(lo, widen_lo(v));
            hi = _mm512_add_pd(hi, widen_hi(v));
        }
        double total = sum_lanes_avx512(lo, hi);
        for (int64_t j = whole; j < n; j++) total += x[j];
        mean = total / (double)n;
    }
    double variance = 0.0;
    if (n) {
        __m512d c = _mm512_set1_pd(mean), lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
        for (int64_t j = 0; j < whole; j += PARTIALS) {
            __m512 v = _mm512_loadu_ps(x + j);
            __m512d dl = _mm512_sub_pd(widen_lo(v), c);
            __m512d dh = _mm512_sub_pd(widen_hi(v), c);
            lo = _mm512_add_pd(lo, _mm512_mul_pd(dl, dl));
            hi = _mm512_add_pd(hi, _mm512_mul_pd(dh, dh));
        }
        double total = sum_lanes_avx512(lo, hi);
        for (int64_t j = whole; j < n; j++) total += ((double)x[j] - mean) * ((double)x[j] - mean);
        variance = total / (double)n;
    }
    double inv_std = 1.0 / sqrt(variance + epsilon);
    *mean_out = (float)mean;
    *inv_std_out = (float)inv_std;
    __m512d c = _mm512_set1_pd(mean), is = _mm512_set1_pd(inv_std);
    int64_t j = 0;
    for (; j < n; j += 16) {
        __mmask16 m = n - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - j)) - 1);
        __m512 v = _mm512_maskz_loadu_ps(m, x + j);
        __m512d dl = _mm512_mul_pd(_mm512_sub_pd(widen_lo(v), c), is);
        __m512d dh = _mm512_mul_pd(_mm512_sub_pd(widen_hi(v), c), is);
        __m512 t = _mm512_castpd_ps(_mm512_insertf64x4(
            _mm512_castps_pd(_mm512_castps256_ps512(_mm512_cvtpd_ps(dl))),
            _mm256_castps_pd(_mm512_cvtpd_ps(dh)), 1));
        t = _mm512_mul_ps(t, _mm512_maskz_loadu_ps(m, scale + j));
        if (bias) t = _mm512_add_ps(t, _mm512_maskz_loadu_ps(m, bias + j));
        _mm512_mask_storeu_ps(y + j, m, t);
    }
}
#endif

static void layernorm_row_generic(const tm_tensor *x, tm_tensor *y, int64_t first, int64_t n,
                                  const double *scale, const double *bias, int rms,
                                  double epsilon, float *mean_out, float *inv_std_out) {
    double sum = 0.0, sq = 0.0;
    if (!rms)
        for (int64_t j = 0; j < n; j++) sum += tm_load_f64(x->data, x->dtype, (size_t)(first + j));
    double mean = rms || n == 0 ? 0.0 : sum / (double)n;
    for (int64_t j = 0; j < n; j++) {
        double d = tm_load_f64(x->data, x->dtype, (size_t)(first + j)) - mean;
        sq += d * d;
    }
    double inv_std = 1.0 / sqrt((n ? sq / (double)n : 0.0) + epsilon);
    *mean_out = (float)mean;
    *inv_std_out = (float)inv_std;
    for (int64_t j = 0; j < n; j++) {
        size_t i = (size_t)(first + j);
        double v = (tm_load_f64(x->data, x->dtype, i) - mean) * inv_std * scale[j];
        tm_store_f64(y->data, y->dtype, i, bias ? v + bias[j] : v);
    }
}

typedef void (*layernorm_row_fn)(const float *x, float *y, int64_t n, const float *scale,
                                 const float *bias, int rms, double epsilon, float *mean_out,
                                 float *inv_std_out);

/* The f32 row this CPU runs (the same bits either way; TM_KERNEL_ISA=scalar|avx2 or
 * TM_REFERENCE_KERNELS=1 keep the plain loops). */
static layernorm_row_fn layernorm_row_pick(void) {
#ifdef NN_X86
    const char *isa = getenv("TM_KERNEL_ISA");
    __builtin_cpu_init();
    if (!tm_use_reference_kernels() && (!isa || !strcmp(isa, "avx512")) &&
        __builtin_cpu_supports("avx512f"))
        return layernorm_row_f32_avx512;
#endif
    return layernorm_row_f32;
}

typedef struct layernorm_job {
    const tm_tensor *x;
    tm_tensor *y;
    float *mean, *inv_std;
    int64_t count;
    const void *scale, *bias;
    int rms;
    double epsilon;
    layernorm_row_fn row_f32;
} layernorm_job;

static void layernorm_rows(const void *arg, int64_t r0, int64_t r1) {
    const layernorm_job *j = arg;
    int64_t count = j->count;
    for (int64_t r = r0; r < r1; r++) {
        if (j->x->dtype == TM_FLOAT)
            j->row_f32((const float *)j->x->data + r * count, (float *)j->y->data + r * count,
                       count, j->scale, j->bias, j->rms, j->epsilon, &j->mean[r], &j->inv_std[r]);
        else
            layernorm_row_generic(j->x, j->y, r * count, count, j->scale, j->bias, j->rms,
                                  j->epsilon, &j->mean[r], &j->inv_std[r]);
    }
}

tm_status tm__kernel_layernorm(const tm_kcall *kc) {
    const tm_tensor *x = kc->in[0];
    tm_tensor *y = kc->out[0];
    float *mean = kc->out[1]->data, *inv_std = kc->out[2]->data;
    int axis = (int)kc->a->i[0], rms = kc->a->i[1] == 1;
    double epsilon = kc->a->f[0];
    int n_params = kc->nin - 1;
    int64_t count = tm_numel(x->rank - axis, x->dims + axis);
    int64_t rows = tm_numel(axis, x->dims);
    const void *scale = kc->in[1]->data, *bias = n_params > 1 ? kc->in[2]->data : NULL;
    int direct = 1;
    for (int i = 1; i < kc->nin; i++)
        direct &= layernorm_param_direct(x->dtype, kc->in[i]->dtype,
                                         tm_tensor_numel_(kc->in[i]), count);
    if (!direct) {
        layernorm_expand(kc->in + 1, n_params, x, axis, count, x->dtype == TM_FLOAT, kc->scratch);
        size_t elem = x->dtype == TM_FLOAT ? sizeof(float) : sizeof(double);
        scale = kc->scratch;
        bias = n_params > 1 ? (const char *)kc->scratch + (size_t)count * elem : NULL;
    }
    layernorm_job job = {x, y, mean, inv_std, count, scale, bias, rms, epsilon, layernorm_row_pick()};
    if (x->dtype == TM_FLOAT) nn_rows_run(kc->pool, rows, count, layernorm_rows, &job);
    else layernorm_rows(&job, 0, rows);
    return TM_OK;
}

/* ---- SOFTMAX_GRAD ------------------------------------------------------------------------
 * The backward of SOFTMAX in one pass per row (its rule in primitives was a product, a
 * reduction, a difference and a product over the whole attention matrix). */

tm_status tm__shape_softmax_grad(tm_ctx *c, int prim, const tm_args *a,
                                 const tm_vinfo *const *in, int nin, tm_vinfo *out, int nout,
                                 size_t *scratch) {
    (void)prim; (void)nin; (void)nout;
    const tm_vinfo *y = in[0], *gy = in[1];
    char ty[160], tg[160];
    if (!tm_dtype_is_float(y->dtype) || y->dtype == TM_STRING || gy->dtype != y->dtype)
        return tm_ctx_fail(c, TM_ERR_DTYPE, "softmax_grad: y and gy must be of one float "
                           "dtype, not %s and %s", tm_dtype_name(y->dtype), tm_dtype_name(gy->dtype));
    if (gy->rank != y->rank || memcmp(gy->dims, y->dims, (size_t)y->rank * sizeof y->dims[0]))
        return tm_ctx_fail(c, TM_ERR_SHAPE, "softmax_grad: gy %s must have y's dims %s",
                           dims_text(tg, sizeof tg, gy->rank, gy->dims),
                           dims_text(ty, sizeof ty, y->rank, y->dims));
    if (a->i[0] < 0 || a->i[0] >= y->rank || (a->i[1] != 0 && a->i[1] != 1))
        return tm_ctx_fail(c, TM_ERR_SHAPE, "softmax_grad: axis %lld (rank %d) or form %lld "
                           "is invalid", (long long)a->i[0], y->rank, (long long)a->i[1]);
    out->dtype = y->dtype;
    out->rank = y->rank;
    memcpy(out->dims, y->dims, sizeof out->dims);
    *scratch = 0;
    return TM_OK;
}

/* One contiguous float32 row: the sum in double partial sums (vectorized), the rest in
 * float32 as the primitives it replaces computed it. */
NN_VECTORIZE
static void softmax_grad_row_f32(const float *restrict y, const float *restrict gy,
                                 float *restrict gx, int64_t n, int log_form) {
    double part[PARTIALS] = {0}, dot = 0.0;
    int64_t j = 0;
    if (log_form) {
        for (; j + PARTIALS <= n; j += PARTIALS)
            for (int q = 0; q < PARTIALS; q++) part[q] += gy[j + q];
        for (; j < n; j++) dot += gy[j];
    } else {
        for (; j + PARTIALS <= n; j += PARTIALS)
            for (int q = 0; q < PARTIALS; q++) part[q] += (double)gy[j + q] * y[j + q];
        for (; j < n; j++) dot += (double)gy[j] * y[j];
    }
    for (int q = 0; q < PARTIALS; q++) dot += part[q];
    float d = (float)dot;
    if (log_form)
        for (j = 0; j < n; j++) gx[j] = gy[j] - expf(y[j]) * d;
    else
        for (j = 0; j < n; j++) gx[j] = y[j] * (gy[j] - d);
}

typedef struct softmax_grad_job {
    const float *y, *gy;
    float *gx;
    int64_t length;
    int log_form;
} softmax_grad_job;

static void softmax_grad_rows(const void *arg, int64_t r0, int64_t r1) {
    const softmax_grad_job *j = arg;
    for (int64_t o = r0; o < r1; o++)
        softmax_grad_row_f32(j->y + o * j->length, j->gy + o * j->length,
                             j->gx + o * j->length, j->length, j->log_form);
}

tm_status tm__kernel_softmax_grad(const tm_kcall *kc) {
    const tm_tensor *y = kc->in[0], *gy = kc->in[1];
    tm_tensor *gx = kc->out[0];
    int log_form = kc->a->i[1] == 1;
    int64_t outer, length, inner;
    softmax_split(y->rank, y->dims, (int)kc->a->i[0], &outer, &length, &inner);
    if (y->dtype == TM_FLOAT && inner == 1 && !tm_use_reference_kernels()) {
        softmax_grad_job job = {y->data, gy->data, gx->data, length, log_form};
        nn_rows_run(kc->pool, outer, length, softmax_grad_rows, &job);
        return TM_OK;
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            size_t first = (size_t)(o * length * inner + i), step = (size_t)inner;
            double dot = 0.0;
            for (int64_t j = 0; j < length; j++) {
                size_t at = first + (size_t)j * step;
                double g = tm_load_f64(gy->data, gy->dtype, at);
                dot += log_form ? g : g * tm_load_f64(y->data, y->dtype, at);
            }
            for (int64_t j = 0; j < length; j++) {
                size_t at = first + (size_t)j * step;
                double g = tm_load_f64(gy->data, gy->dtype, at), v = tm_load_f64(y->data, y->dtype, at);
                tm_store_f64(gx->data, gx->dtype, at, log_form ? g - exp(v) * dot : v * (g - dot));
            }
        }
    return TM_OK;
}

/* ---- LAYERNORM_GRAD ----------------------------------------------------------------------
 * The backward of a float32 layer or RMS norm from the statistics its forward saved, in
 * two passes per row (the rule in primitives took about fifteen kernels per norm), in
 * float32 arithmetic as those were, with every sum in double:
 *   xhat = (x - mean) inv,  gxhat = gy scale,
 *   dx = inv (gxhat - mean(gxhat) - xhat mean(gxhat xhat))   (RMS: without mean(gxhat)),
 *   dscale = sum over rows of gy xhat,  dbias = sum over rows of gy. */

/* The column sums (scale's and bias's cotangents) run per chunk of rows, in double, then
 * over the chunks in order: chunks are fixed by the row count alone, so the pool may take
 * them in any split and the sums come out the same. */
#define LAYERNORM_GRAD_MAX_CHUNKS 32
#define LAYERNORM_GRAD_MIN_CHUNK_ROWS 32

static int64_t layernorm_grad_chunks(int64_t rows) {
    int64_t chunks = (rows + LAYERNORM_GRAD_MIN_CHUNK_ROWS - 1) / LAYERNORM_GRAD_MIN_CHUNK_ROWS;
    if (chunks > LAYERNORM_GRAD_MAX_CHUNKS) chunks = LAYERNORM_GRAD_MAX_CHUNKS;
    return chunks < 1 ? 1 : chunks;
}

tm_status tm__shape_layernorm_grad(tm_ctx *c, int prim, const tm_args *a,
                                   const tm_vinfo *const *in, int nin, tm_vinfo *out, int nout,
                                   size_t *scratch) {
    (void)prim; (void)nin; (void)nout;
    const tm_vinfo *x = in[0], *scale = in[1], *mean = in[2], *inv = in[3], *gy = in[4];
    char tx[160];
    dims_text(tx, sizeof tx, x->rank, x->dims);
    if (x->dtype != TM_FLOAT || scale->dtype != TM_FLOAT || gy->dtype != TM_FLOAT ||
        mean->dtype != TM_FLOAT || inv->dtype != TM_FLOAT)
        return tm_ctx_fail(c, TM_ERR_DTYPE, "layernorm_grad: every input must be float32");
    int axis = (int)a->i[0];
    if (axis < 0 || axis >= x->rank || (a->i[1] != 0 && a->i[1] != 1))
        return tm_ctx_fail(c, TM_ERR_SHAPE, "layernorm_grad: axis %d or form %lld is invalid "
                           "for x %s", axis, (long long)a->i[1], tx);
    int64_t count = tm_numel(x->rank - axis, x->dims + axis), rows = tm_numel(axis, x->dims);
    int same = gy->rank == x->rank && !memcmp(gy->dims, x->dims, (size_t)x->rank * sizeof x->dims[0]);
    if (!same || tm_numel(scale->rank, scale->dims) != count ||
        tm_numel(mean->rank, mean->dims) != rows || tm_numel(inv->rank, inv->dims) != rows)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "layernorm_grad: gy must have x's dims %s, scale "
                           "%lld elements and the statistics %lld", tx, (long long)count,
                           (long long)rows);
    out[0].dtype = TM_FLOAT;
    out[0].rank = x->rank;
    memcpy(out[0].dims, x->dims, sizeof out[0].dims);
    for (int i = 1; i < 3; i++) {
        out[i].dtype = TM_FLOAT;
        out[i].rank = scale->rank;
        memcpy(out[i].dims, scale->dims, sizeof out[i].dims);
    }
    *scratch = (size_t)layernorm_grad_chunks(rows) * (size_t)count * 2 * sizeof(double);
    return TM_OK;
}

/* One row (restrict parameters spare the vectorizer run-time alias checks). xhat goes
 * into dx first; the row sums run in float partial sums (vector lanes) added up in
 * double, the column sums (scale's and bias's cotangents) in double, in the same pass
 * (a pass of their own over the row took a fifth of the kernel: 128 x 384, one Xeon
 * core, 33 -> 26 microseconds, the same bits). */
NN_VECTORIZE
static void layernorm_grad_row_f32(const float *restrict x, const float *restrict gy,
                                   const float *restrict scale, float *restrict dx,
                                   double *restrict acc_scale, double *restrict acc_bias,
                                   int64_t n, float m, float s, int rms) {
    float part_g[PARTIALS] = {0}, part_gx[PARTIALS] = {0};
    double sum_g = 0.0, sum_gx = 0.0;
    int64_t j = 0;
    for (; j + PARTIALS <= n; j += PARTIALS)
        for (int q = 0; q < PARTIALS; q++) {
            float xhat = (x[j + q] - m) * s, g = gy[j + q] * scale[j + q];
            dx[j + q] = xhat;
            part_g[q] += g;
            part_gx[q] += g * xhat;
            acc_scale[j + q] += (double)(gy[j + q] * xhat);
            acc_bias[j + q] += gy[j + q];
        }
    for (; j < n; j++) {
        float xhat = (x[j] - m) * s, g = gy[j] * scale[j];
        dx[j] = xhat;
        sum_g += g;
        sum_gx += g * xhat;
        acc_scale[j] += (double)(gy[j] * xhat);
        acc_bias[j] += gy[j];
    }
    for (int q = 0; q < PARTIALS; q++) sum_g += part_g[q], sum_gx += part_gx[q];
    float mean_g = rms ? 0.0f : (float)(sum_g / (double)n), mean_gx = (float)(sum_gx / (double)n);
    for (j = 0; j < n; j++) dx[j] = s * (gy[j] * scale[j] - mean_g - dx[j] * mean_gx);
}

typedef struct layernorm_grad_job {
    const float *x, *gy, *scale, *mean, *inv;
    float *dx;
    double *acc;                     /* per chunk: n scale sums, then n bias sums */
    int64_t n, rows, chunks;
    int rms;
} layernorm_grad_job;

/* Chunks [c0, c1): their rows' dx and each chunk's column sums. */
static void layernorm_grad_chunk_range(const void *arg, int64_t c0, int64_t c1) {
    const layernorm_grad_job *j = arg;
    int64_t n = j->n;
    for (int64_t ch = c0; ch < c1; ch++) {
        double *acc_scale = j->acc + (size_t)ch * 2 * (size_t)n, *acc_bias = acc_scale + n;
        memset(acc_scale, 0, (size_t)n * 2 * sizeof(double));
        int64_t r0 = j->rows * ch / j->chunks, r1 = j->rows * (ch + 1) / j->chunks;
        for (int64_t r = r0; r < r1; r++)
            layernorm_grad_row_f32(j->x + r * n, j->gy + r * n, j->scale, j->dx + r * n,
                                   acc_scale, acc_bias, n, j->rms ? 0.0f : j->mean[r], j->inv[r],
                                   j->rms);
    }
}

tm_status tm__kernel_layernorm_grad(const tm_kcall *kc) {
    const tm_tensor *x = kc->in[0];
    int axis = (int)kc->a->i[0], rms = kc->a->i[1] == 1;
    int64_t n = tm_numel(x->rank - axis, x->dims + axis), rows = tm_numel(axis, x->dims);
    float *dscale = kc->out[1]->data, *dbias = kc->out[2]->data;
    layernorm_grad_job job = {x->data, kc->in[4]->data, kc->in[1]->data, kc->in[2]->data,
                              kc->in[3]->data, kc->out[0]->data, kc->scratch, n, rows,
                              layernorm_grad_chunks(rows), rms};
    if (n == 0) return TM_OK;
    /* Rows per chunk are about rows / chunks, so the chunk count stands in for the rows. */
    nn_rows_run(kc->pool, job.chunks, rows / job.chunks * n, layernorm_grad_chunk_range, &job);
    for (int64_t i = 0; i < n; i++) {
        double sum_scale = 0.0, sum_bias = 0.0;
        for (int64_t ch = 0; ch < job.chunks; ch++) {
            sum_scale += job.acc[(size_t)ch * 2 * (size_t)n + (size_t)i];
            sum_bias += job.acc[(size_t)ch * 2 * (size_t)n + (size_t)(n + i)];
        }
        dscale[i] = (float)sum_scale;
        dbias[i] = (float)sum_bias;
    }
    return TM_OK;
}
