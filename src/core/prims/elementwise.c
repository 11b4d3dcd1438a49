/* Elementwise primitives: unary maths, binary arithmetic/comparison/logic with size-1
 * broadcasting, where, and cast between every pair of dtypes (strings included).
 * Not ONNX broadcasting or type promotion: lowerings align ranks and dtypes first. */
#if defined(__GNUC__) && !defined(__clang__)
/* The build's -O2 leaves plain loops scalar (GCC's very-cheap vector cost model); these
 * loops are the hot path of every model, so this file asks for the full vectorizer,
 * floor/ceil/round as vector instructions (no FP traps are ever enabled) and fused
 * multiply-adds in the polynomials. */
#pragma GCC optimize("O3", "no-trapping-math", "fp-contract=fast")
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__AVX__) || defined(__F16C__)
#include <immintrin.h>
#endif
#include "../ctx.h"
#include "../../backends/cpu/vmath.h"
#include "fused.h"
#include "../../backends/cpu/gemm.h" /* tm_use_reference_kernels */
#include "../../backends/cpu/pool.h"

/* ---- Dtype classes ------------------------------------------------------------------- */

typedef enum {
    DOMAIN_NONE, DOMAIN_FLOAT, DOMAIN_SIGNED, DOMAIN_UNSIGNED, DOMAIN_BOOL, DOMAIN_STRING
} value_domain;

/* How a kernel computes on a dtype: floats in double, ints in 64 bits, bool as 0/1. */
static value_domain domain_of(tm_dtype dt) {
    if (dt == TM_BOOL) return DOMAIN_BOOL;
    if (dt == TM_STRING) return DOMAIN_STRING;
    if (tm_dtype_is_float(dt)) return DOMAIN_FLOAT;
    if (tm_dtype_is_signed_int(dt)) return DOMAIN_SIGNED;
    if (tm_dtype_is_unsigned_int(dt)) return DOMAIN_UNSIGNED;
    return DOMAIN_NONE;  /* complex, undefined */
}

static int is_int_domain(value_domain d) { return d == DOMAIN_SIGNED || d == DOMAIN_UNSIGNED; }
static int is_numeric_domain(value_domain d) { return d == DOMAIN_FLOAT || is_int_domain(d); }

/* Float to integer without undefined behaviour: truncate, NaN is 0, out of range clamps
 * to the int64 range (narrower targets then wrap, as ONNX's int4 cast data expects). */
static inline int64_t f64_to_i64(double d) {
    if (d != d) return 0;
    if (d >= 9223372036854775808.0) return INT64_MAX;
    if (d < -9223372036854775808.0) return INT64_MIN;
    return (int64_t)d;
}

static inline uint64_t f64_to_u64(double d) {
    if (d != d) return 0;
    if (d >= 18446744073709551616.0) return UINT64_MAX;
    if (d >= 9223372036854775808.0) return (uint64_t)d;
    return (uint64_t)f64_to_i64(d);  /* negative values wrap, as C casts of ints do */
}

/* Any numeric element as a double (POW's exponent may be of another dtype). */
static double load_any_f64(const void *base, tm_dtype dt, size_t i) {
    value_domain d = domain_of(dt);
    if (d == DOMAIN_SIGNED) return (double)tm_load_i64(base, dt, i);
    if (d == DOMAIN_UNSIGNED || d == DOMAIN_BOOL) return (double)tm_load_u64(base, dt, i);
    return tm_load_f64(base, dt, i);
}

static const char *prim_name(int prim) { return tm_prims[prim].name; }

/* "[2, 3, 4]" into buf. */
static const char *dims_str(char *buf, size_t cap, int rank, const int64_t *dims) {
    size_t used = (size_t)snprintf(buf, cap, "[");
    for (int d = 0; d < rank && used < cap; d++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%lld", d ? ", " : "",
                                 (long long)dims[d]);
    if (used < cap) snprintf(buf + used, cap - used, "]");
    return buf;
}

/* ---- Broadcast walk ------------------------------------------------------------------ */

enum { WALK_MAX_INPUTS = 3 };

/* The output's dims with per-input element strides (0 on broadcast dims), size-1 dims
 * dropped and adjacent dims merged where every input allows it. After merging, the
 * innermost step of each input is 0 (broadcast) or 1 (contiguous). */
typedef struct walk {
    int rank, nin;
    int64_t dims[TM_MAX_RANK];
    int64_t step[WALK_MAX_INPUTS][TM_MAX_RANK];
} walk;

/* Called for each innermost row: element offsets of the inputs, their innermost steps,
 * the output offset (the output is contiguous) and the row length. */
typedef void (*row_fn)(const void *job, const int64_t *offset, const int64_t *step,
                       int64_t out_offset, int64_t n);

static void walk_init(walk *w, const tm_tensor *out, const tm_tensor *const *in, int nin) {
    int64_t own[WALK_MAX_INPUTS][TM_MAX_RANK];
    for (int k = 0; k < nin; k++) {
        int64_t s = 1;
        for (int d = out->rank - 1; d >= 0; d--) {
            own[k][d] = in[k]->dims[d] == 1 ? 0 : s;
            s *= in[k]->dims[d];
        }
    }
    w->rank = 0;
    w->nin = nin;
    for (int d = 0; d < out->rank; d++) {
        int64_t size = out->dims[d];
        if (size == 1) continue;
        int r = w->rank;
        int merge = r > 0;
        for (int k = 0; k < nin && merge; k++)
            if (w->step[k][r - 1] != own[k][d] * size) merge = 0;
        if (merge) {
            w->dims[r - 1] *= size;
            for (int k = 0; k < nin; k++) w->step[k][r - 1] = own[k][d];
            continue;
        }
        w->dims[r] = size;
        for (int k = 0; k < nin; k++) w->step[k][r] = own[k][d];
        w->rank++;
    }
    if (w->rank == 0) {
        w->rank = 1;
        w->dims[0] = 1;
        for (int k = 0; k < nin; k++) w->step[k][0] = 0;
    }
}

/* Elements [first, last) of the output, in flat order: row by row, the first and last
 * rows possibly partial (a row's part is a row with offsets moved along it). */
static void walk_range(const walk *w, row_fn row, const void *job, int64_t first,
                       int64_t last) {
    int r = w->rank;
    int64_t n = w->dims[r - 1];
    int64_t index[TM_MAX_RANK] = {0};
    int64_t offset[WALK_MAX_INPUTS] = {0};
    int64_t inner[WALK_MAX_INPUTS];
    for (int k = 0; k < w->nin; k++) inner[k] = w->step[k][r - 1];
    /* The multi-index of the first row. */
    int64_t row_index = first / n, rest = row_index;
    for (int d = r - 2; d >= 0; d--) {
        index[d] = rest % w->dims[d];
        rest /= w->dims[d];
        for (int k = 0; k < w->nin; k++) offset[k] += index[d] * w->step[k][d];
    }
    int64_t at = row_index * n;
    while (at < last) {
        int64_t begin = first > at ? first - at : 0, end = last - at < n ? last - at : n;
        int64_t moved[WALK_MAX_INPUTS];
        for (int k = 0; k < w->nin; k++) moved[k] = offset[k] + begin * inner[k];
        row(job, moved, inner, at + begin, end - begin);
        at += n;
        for (int d = r - 2; d >= 0; d--) {
            for (int k = 0; k < w->nin; k++) offset[k] += w->step[k][d];
            if (++index[d] < w->dims[d]) break;
            for (int k = 0; k < w->nin; k++) offset[k] -= w->step[k][d] * w->dims[d];
            index[d] = 0;
        }
    }
}

static int64_t walk_total(const walk *w) {
    int64_t total = 1;
    for (int d = 0; d < w->rank; d++) total *= w->dims[d];
    return total;
}

static void walk_run(const walk *w, row_fn row, const void *job) {
    walk_range(w, row, job, 0, walk_total(w));
}

/* Large outputs split over the pool: below this many elements one thread (waking a
 * worker costs about what a thread does to this many in that time; nn.c's rows have the
 * same bound, measured there). Slices are claimed, so a worker that wakes late only
 * leaves the caller more of them. */
#define PARALLEL_MIN_ELEMENTS ((int64_t)1 << 15)
#define PARALLEL_SLICES 8

typedef struct walk_job {
    const walk *w;
    row_fn row;
    const void *job;
    int64_t total;
} walk_job;

static void walk_slice(void *arg, int ith, int nth) {
    const walk_job *j = arg;
    /* Slice bounds on multiples of 16 elements, so no vector straddles two slices. */
    int64_t units = (j->total + 15) / 16;
    int64_t first = units * ith / nth * 16, last = units * (ith + 1) / nth * 16;
    if (last > j->total) last = j->total;
    if (first < last) walk_range(j->w, j->row, j->job, first, last);
}

static void walk_run_pool(const walk *w, row_fn row, const void *job, struct tm_pool *pool) {
    int64_t total = walk_total(w);
    if (!pool || tm_pool_threads(pool) < 2 || total < PARALLEL_MIN_ELEMENTS) {
        walk_range(w, row, job, 0, total);
        return;
    }
    walk_job j = {w, row, job, total};
    tm_pool_run_n(pool, PARALLEL_SLICES, walk_slice, &j);
}

/* Output dims of inputs of equal rank whose dims are equal or 1. */
static tm_status broadcast_shape(tm_ctx *c, int prim, const tm_vinfo *const *in, int nin,
                                 tm_vinfo *out) {
    int rank = in[0]->rank;
    for (int k = 1; k < nin; k++)
        if (in[k]->rank != rank)
            return tm_ctx_fail(c, TM_ERR_SHAPE, "%s: input %d has rank %d but input 0 has "
                               "rank %d (lowerings must align ranks)", prim_name(prim), k,
                               in[k]->rank, rank);
    for (int d = 0; d < rank; d++) {
        int64_t size = 1;
        for (int k = 0; k < nin; k++) {
            int64_t s = in[k]->dims[d];
            if (s == 1) continue;
            if (size == 1) {
                size = s;
            } else if (s != size) {
                char b0[160], b1[160];
                return tm_ctx_fail(c, TM_ERR_SHAPE, "%s: input dims %s and %s do not "
                                   "broadcast (dim %d: %lld vs %lld)", prim_name(prim),
                                   dims_str(b0, sizeof b0, rank, in[0]->dims),
                                   dims_str(b1, sizeof b1, rank, in[k]->dims), d,
                                   (long long)size, (long long)s);
            }
        }
        out->dims[d] = size;
    }
    out->rank = rank;
    return TM_OK;
}

/* ---- Unary: shape rule ---------------------------------------------------------------- */

static int unary_accepts(int prim, value_domain d) {
    switch (prim) {
    case TM_P_NEG: case TM_P_ABS: case TM_P_SIGN: case TM_P_RELU:
        return is_numeric_domain(d);
    case TM_P_NOT:
        return d == DOMAIN_BOOL;
    case TM_P_BITNOT:
        return is_int_domain(d);
    default:  /* transcendental, rounding, ISNAN/ISINF */
        return d == DOMAIN_FLOAT;
    }
}

tm_status tm__shape_unary(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                          int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)a; (void)nin; (void)nout;
    tm_dtype dt = in[0]->dtype;
    value_domain d = domain_of(dt);
    if (d == DOMAIN_STRING || d == DOMAIN_NONE)
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "%s: %s tensors are not supported",
                           prim_name(prim), tm_dtype_name(dt));
    if (!unary_accepts(prim, d))
        return tm_ctx_fail(c, TM_ERR_DTYPE, "%s does not take %s input", prim_name(prim),
                           tm_dtype_name(dt));
    out->dtype = (prim == TM_P_ISNAN || prim == TM_P_ISINF) ? TM_BOOL : dt;
    out->rank = in[0]->rank;
    memcpy(out->dims, in[0]->dims, sizeof out->dims);
    *scratch = 0;
    return TM_OK;
}

/* ---- Unary: kernels --------------------------------------------------------------------- */

#define SQRT_HALF 0.70710678118654752440
#define SQRT_2_OVER_PI 0.79788456080286535588

static double sigmoid_f64(double x) {
    double e = exp(-fabs(x));  /* never overflows */
    double r = 1.0 / (1.0 + e);
    return x >= 0 ? r : e * r;
}

/* Both forms avoid the cancellation of 1 + (something near -1) for negative x:
 * 1 + erf(-u) is erfc(u), and 1 + tanh(u) is 2 sigmoid(2u). */
static double gelu_f64(double x, int tanh_form) {
    if (tanh_form) return x * sigmoid_f64(2.0 * SQRT_2_OVER_PI * (x + 0.044715 * x * x * x));
    return 0.5 * x * erfc(-x * SQRT_HALF);
}

static double unary_f64(int prim, double x, const tm_args *a) {
    switch (prim) {
    case TM_P_NEG: return -x;
    case TM_P_ABS: return fabs(x);
    case TM_P_SIGN: return x > 0 ? 1.0 : x < 0 ? -1.0 : x;  /* NaN and zeros stay */
    case TM_P_EXP: return exp(x);
    case TM_P_LOG: return log(x);
    case TM_P_SQRT: return sqrt(x);
    case TM_P_RECIPROCAL: return 1.0 / x;
    case TM_P_FLOOR: return floor(x);
    case TM_P_CEIL: return ceil(x);
    case TM_P_ROUND: return nearbyint(x);  /* default rounding mode: half to even */
    case TM_P_SIN: return sin(x);
    case TM_P_COS: return cos(x);
    case TM_P_TAN: return tan(x);
    case TM_P_ASIN: return asin(x);
    case TM_P_ACOS: return acos(x);
    case TM_P_ATAN: return atan(x);
    case TM_P_SINH: return sinh(x);
    case TM_P_COSH: return cosh(x);
    case TM_P_TANH: return tanh(x);
    case TM_P_ASINH: return asinh(x);
    case TM_P_ACOSH: return acosh(x);
    case TM_P_ATANH: return atanh(x);
    case TM_P_ERF: return erf(x);
    case TM_P_SIGMOID: return sigmoid_f64(x);
    case TM_P_RELU: return x < 0 ? 0.0 : x;  /* NaN propagates */
    case TM_P_GELU: return gelu_f64(x, a->i[0] == 1);
    case TM_P_ISNAN: return isnan(x);
    case TM_P_ISINF:
        return isinf(x) && ((x > 0 && a->i[0]) || (x < 0 && a->i[1]));
    default: return 0.0;
    }
}

/* ---- Unary: f32 maths the compiler can vectorize ------------------------------------------
 * glibc's expf, tanhf and erff are scalar calls (5 to 20 ns an element). These branch-free
 * forms (Cephes' expf and tanhf, Numerical Recipes' erfc, erf's Taylor series near 0) stay
 * within a few ulp (relative error under 1e-6) and loops over tensors become vector code. */

static inline float pow2i_f32(int32_t n) {  /* 2^n for n in [-126, 127] */
    uint32_t bits = (uint32_t)(n + 127) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline float exp_f32(float x) {
    float c = x > -104.0f ? x : -104.0f;  /* NaN lands here too; it is restored below */
    c = c < 89.0f ? c : 89.0f;
    float n = floorf(c * 1.44269504088896341f + 0.5f);
    float r = c - n * 0.693359375f;       /* ln 2 in two parts keeps r exact */
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t k = (int32_t)n, half = k / 2;  /* two factors: 2^k may leave the normal range */
    float y = p * pow2i_f32(half) * pow2i_f32(k - half);
    return x != x ? x : y;
}

static inline float tanh_f32(float x) {
    float a = fabsf(x), z = x * x;
    float small = ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z +
                    1.33314422036e-1f) * z - 3.33332819422e-1f) * z * x + x;
    float large = 1.0f - 2.0f / (exp_f32(2.0f * a) + 1.0f);
    large = x < 0 ? -large : large;
    return a < 0.625f ? small : large;
}

/* erfc(z) for z >= 0, relative error about 1.2e-7 everywhere (tails included). */
static inline float erfc_nonnegative_f32(float z) {
    float t = 1.0f / (1.0f + 0.5f * z);
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    return t * exp_f32(p - z * z);
}

static inline float erf_f32(float x) {
    float a = fabsf(x), z = x * x;
    float p = -1.492565035840625e-05f;  /* 2/sqrt(pi) (-1)^k / (k! (2k+1)) */
    p = p * z + 1.2055332981789664e-04f;
    p = p * z - 8.548327023450852e-04f;
    p = p * z + 5.223977625442188e-03f;
    p = p * z - 2.6866170645131252e-02f;
    p = p * z + 1.1283791670955126e-01f;
    p = p * z - 3.7612638903183754e-01f;
    p = p * z + 1.1283791670955126f;
    float far = 1.0f - erfc_nonnegative_f32(a);
    far = x < 0 ? -far : far;
    return a < 0.5f ? x * p : far;
}

/* Cephes' logf: the mantissa in [sqrt(1/2), sqrt 2) and a polynomial in it minus 1. */
static inline float log_f32(float x) {
    int subnormal = x < 1.17549435e-38f;
    float scaled = subnormal ? x * 8388608.0f : x;  /* 2^23 brings subnormals to normal */
    uint32_t bits;
    memcpy(&bits, &scaled, sizeof bits);
    float e = (float)((int32_t)((bits >> 23) & 0xFF) - 126) - (subnormal ? 23.0f : 0.0f);
    bits = (bits & 0x807FFFFFu) | 0x3F000000u;      /* mantissa m in [0.5, 1) */
    float m;
    memcpy(&m, &bits, sizeof m);
    int low = m < 0.707106781186547524f;
    e = low ? e - 1.0f : e;
    float t = low ? m + m - 1.0f : m - 1.0f, z = t * t;
    float p = 7.0376836292e-2f;
    p = p * t - 1.1514610310e-1f;
    p = p * t + 1.1676998740e-1f;
    p = p * t - 1.2420140846e-1f;
    p = p * t + 1.4249322787e-1f;
    p = p * t - 1.6668057665e-1f;
    p = p * t + 2.0000714765e-1f;
    p = p * t - 2.4999993993e-1f;
    p = p * t + 3.3333331174e-1f;
    float y = p * t * z - 2.12194440e-4f * e - 0.5f * z;
    float r = t + y + 0.693359375f * e;
    r = x == 0 ? -INFINITY : r;
    r = x < 0 ? NAN : r;
    r = x == INFINITY ? INFINITY : r;
    return x != x ? x : r;
}

/* sqrtf keeps its errno call (and stays scalar) even where errno is never read. */
static void sqrt_f32(const float *restrict x, float *restrict y, int64_t n) {
    int64_t i = 0;
#if defined(__AVX__)
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_sqrt_ps(_mm256_loadu_ps(x + i)));
#endif
    for (; i < n; i++) y[i] = sqrtf(x[i]);
}

/* 0.5 x (1 + erf(x / sqrt 2)), with 1 + erf(-u) written erfc(u) so negative x keeps its
 * relative accuracy. */
static inline float gelu_erf_f32(float x) {
    float e = erfc_nonnegative_f32(fabsf(x) * (float)SQRT_HALF);
    return 0.5f * x * (x >= 0 ? 2.0f - e : e);
}

static inline float sigmoid_f32(float x) {
    float e = exp_f32(-fabsf(x));  /* never overflows */
    float r = 1.0f / (1.0f + e);
    return x >= 0 ? r : e * r;
}

/* 0.5 x (1 + tanh(u)) as x sigmoid(2u): the same value, without the cancellation. */
static inline float gelu_tanh_f32(float x) {
    return x * sigmoid_f32(2.0f * (float)SQRT_2_OVER_PI * (x + 0.044715f * x * x * x));
}

#define UNARY_LOOP(EXPR)                                  \
    do {                                                  \
        for (int64_t i = 0; i < n; i++) {                 \
            float v = x[i];                               \
            y[i] = (EXPR);                                \
        }                                                 \
    } while (0)

static void unary_f32_math(int prim, const tm_args *a, const float *restrict x,
                           float *restrict y, int64_t n) {
    switch (prim) {
    case TM_P_NEG: UNARY_LOOP(-v); break;
    case TM_P_ABS: UNARY_LOOP(fabsf(v)); break;
    case TM_P_SIGN: UNARY_LOOP(v > 0 ? 1.0f : v < 0 ? -1.0f : v); break;
    case TM_P_EXP: UNARY_LOOP(exp_f32(v)); break;
    case TM_P_LOG: UNARY_LOOP(log_f32(v)); break;
    case TM_P_SQRT: sqrt_f32(x, y, n); break;
    case TM_P_RECIPROCAL: UNARY_LOOP(1.0f / v); break;
    case TM_P_FLOOR: UNARY_LOOP(floorf(v)); break;
    case TM_P_CEIL: UNARY_LOOP(ceilf(v)); break;
    case TM_P_ROUND: UNARY_LOOP(nearbyintf(v)); break;
    case TM_P_SIN: UNARY_LOOP(sinf(v)); break;
    case TM_P_COS: UNARY_LOOP(cosf(v)); break;
    case TM_P_TAN: UNARY_LOOP(tanf(v)); break;
    case TM_P_ASIN: UNARY_LOOP(asinf(v)); break;
    case TM_P_ACOS: UNARY_LOOP(acosf(v)); break;
    case TM_P_ATAN: UNARY_LOOP(atanf(v)); break;
    case TM_P_SINH: UNARY_LOOP(sinhf(v)); break;
    case TM_P_COSH: UNARY_LOOP(coshf(v)); break;
    case TM_P_TANH: UNARY_LOOP(tanh_f32(v)); break;
    case TM_P_ASINH: UNARY_LOOP(asinhf(v)); break;
    case TM_P_ACOSH: UNARY_LOOP(acoshf(v)); break;
    case TM_P_ATANH: UNARY_LOOP(atanhf(v)); break;
    case TM_P_ERF: UNARY_LOOP(erf_f32(v)); break;
    case TM_P_RELU: UNARY_LOOP(v < 0 ? 0.0f : v); break;
    case TM_P_SIGMOID: UNARY_LOOP(sigmoid_f32(v)); break;
    case TM_P_GELU:
        if (a->i[0] == 1) UNARY_LOOP(gelu_tanh_f32(v));
        else if (tm__vmath_active() && tm__vmath_active()->gelu_erf)
            tm__vmath_active()->gelu_erf(x, y, n);
        else UNARY_LOOP(gelu_erf_f32(v));
        break;
    default:
        for (int64_t i = 0; i < n; i++) y[i] = (float)unary_f64(prim, x[i], a);
        break;
    }
}

void tm__unary_f32_rows(int prim, const tm_args *a, const float *x, float *y, int64_t n) {
    unary_f32_math(prim, a, x, y, n);
}

static void unary_f32(int prim, const tm_args *a, const float *x, void *out, int64_t n) {
    if (prim == TM_P_ISNAN || prim == TM_P_ISINF) {
        uint8_t *y = out;
        if (prim == TM_P_ISNAN) {
            for (int64_t i = 0; i < n; i++) y[i] = x[i] != x[i];
            return;
        }
        for (int64_t i = 0; i < n; i++)
            y[i] = (x[i] == INFINITY && a->i[0]) || (x[i] == -INFINITY && a->i[1]);
        return;
    }
    unary_f32_math(prim, a, x, out, n);
}

static int64_t unary_i64(int prim, int64_t x) {
    uint64_t u = (uint64_t)x;
    switch (prim) {
    case TM_P_NEG: return (int64_t)(0 - u);  /* INT_MIN wraps to itself */
    case TM_P_ABS: return x < 0 ? (int64_t)(0 - u) : x;
    case TM_P_SIGN: return (x > 0) - (x < 0);
    case TM_P_RELU: return x < 0 ? 0 : x;
    case TM_P_BITNOT: return ~x;
    default: return 0;
    }
}

static uint64_t unary_u64(int prim, uint64_t x) {
    switch (prim) {
    case TM_P_NEG: return 0 - x;
    case TM_P_ABS: case TM_P_RELU: return x;
    case TM_P_SIGN: return x != 0;
    case TM_P_BITNOT: return ~x;
    case TM_P_NOT: return !x;
    default: return 0;
    }
}

static void unary_generic(int prim, const tm_args *a, const tm_tensor *x, tm_tensor *y,
                          int64_t n) {
    tm_dtype dt = x->dtype, ot = y->dtype;
    switch (domain_of(dt)) {
    case DOMAIN_FLOAT:
        for (int64_t i = 0; i < n; i++) {
            double r = unary_f64(prim, tm_load_f64(x->data, dt, (size_t)i), a);
            if (ot == TM_BOOL) ((uint8_t *)y->data)[i] = r != 0;
            else tm_store_f64(y->data, ot, (size_t)i, r);
        }
        return;
    case DOMAIN_SIGNED:
        for (int64_t i = 0; i < n; i++)
            tm_store_i64(y->data, ot, (size_t)i,
                         unary_i64(prim, tm_load_i64(x->data, dt, (size_t)i)));
        return;
    default:
        for (int64_t i = 0; i < n; i++)
            tm_store_u64(y->data, ot, (size_t)i,
                         unary_u64(prim, tm_load_u64(x->data, dt, (size_t)i)));
        return;
    }
}

typedef struct unary_job {
    int prim;
    const tm_args *a;
    const float *x;
    void *y;
    int64_t n;
} unary_job;

static void unary_slice(void *arg, int ith, int nth) {
    const unary_job *j = arg;
    int64_t units = (j->n + 15) / 16;
    int64_t first = units * ith / nth * 16, last = units * (ith + 1) / nth * 16;
    if (last > j->n) last = j->n;
    /* ISNAN/ISINF write bytes, every other unary floats. */
    size_t out_size = j->prim == TM_P_ISNAN || j->prim == TM_P_ISINF ? 1 : sizeof(float);
    if (first < last)
        unary_f32(j->prim, j->a, j->x + first, (char *)j->y + (size_t)first * out_size,
                  last - first);
}

tm_status tm__kernel_unary(const tm_kcall *k) {
    const tm_tensor *x = k->in[0];
    tm_tensor *y = k->out[0];
    int64_t n = tm_tensor_numel_(x);
    if (n <= 0) return TM_OK;
    int fast = !tm_use_reference_kernels();
    if (x->dtype == TM_FLOAT && fast) {
        if (n >= PARALLEL_MIN_ELEMENTS && tm_pool_threads(k->pool) > 1) {
            unary_job job = {k->prim, k->a, x->data, y->data, n};
            tm_pool_run_n(k->pool, PARALLEL_SLICES, unary_slice, &job);
            return TM_OK;
        }
        unary_f32(k->prim, k->a, x->data, y->data, n);
        return TM_OK;
    }
    if (x->dtype == TM_DOUBLE && y->dtype == TM_DOUBLE && fast) {
        const double *xs = x->data;
        double *ys = y->data;
        for (int64_t i = 0; i < n; i++) ys[i] = unary_f64(k->prim, xs[i], k->a);
        return TM_OK;
    }
    unary_generic(k->prim, k->a, x, y, n);
    return TM_OK;
}

/* ---- Binary: scalar semantics per domain ----------------------------------------------- */

static int is_comparison(int prim) {
    return prim == TM_P_EQ || prim == TM_P_LT || prim == TM_P_LE || prim == TM_P_GT ||
           prim == TM_P_GE;
}

/* Python's modulo: the result takes the divisor's sign. */
static double python_mod_f64(double x, double y) {
    double r = fmod(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return r;
}

static float python_mod_f32(float x, float y) {
    float r = fmodf(x, y);
    if (r != 0 && ((r < 0) != (y < 0))) r += y;
    return r;
}

static double binary_f64(int prim, double x, double y, int python_mod) {
    switch (prim) {
    case TM_P_ADD: return x + y;
    case TM_P_SUB: return x - y;
    case TM_P_MUL: return x * y;
    case TM_P_DIV: return x / y;
    case TM_P_POW: return pow(x, y);
    case TM_P_MAX: return (x > y || x != x) ? x : y;  /* NaN in either propagates */
    case TM_P_MIN: return (x < y || x != x) ? x : y;
    case TM_P_MOD: return python_mod ? python_mod_f64(x, y) : fmod(x, y);
    case TM_P_EQ: return x == y;
    case TM_P_LT: return x < y;
    case TM_P_LE: return x <= y;
    case TM_P_GT: return x > y;
    case TM_P_GE: return x >= y;
    default: return 0.0;
    }
}

/* x^e by repeated squaring, wrapping like the dtype's multiplication. */
static uint64_t ipow_bits(uint64_t base, uint64_t e) {
    uint64_t r = 1;
    while (e) {
        if (e & 1) r *= base;
        base *= base;
        e >>= 1;
    }
    return r;
}

static int64_t ipow_i64(int64_t base, int64_t e) {
    if (e < 0) {  /* 1/base^|e| truncates to 0 unless |base| == 1 */
        if (base == 1) return 1;
        if (base == -1) return (e & 1) ? -1 : 1;
        return 0;
    }
    return (int64_t)ipow_bits((uint64_t)base, (uint64_t)e);
}

/* Signed integers computed in 64 bits; the store wraps to the dtype. Division by zero
 * gives 0 and INT_MIN / -1 wraps, so no input traps. */
static int64_t binary_i64(int prim, int64_t x, int64_t y, int python_mod) {
    uint64_t ux = (uint64_t)x, uy = (uint64_t)y;
    switch (prim) {
    case TM_P_ADD: return (int64_t)(ux + uy);
    case TM_P_SUB: return (int64_t)(ux - uy);
    case TM_P_MUL: return (int64_t)(ux * uy);
    case TM_P_DIV:
        if (y == 0) return 0;
        if (y == -1) return (int64_t)(0 - ux);
        return x / y;
    case TM_P_MOD: {
        if (y == 0 || y == -1) return 0;
        int64_t r = x % y;
        if (python_mod && r != 0 && ((r < 0) != (y < 0))) r += y;
        return r;
    }
    case TM_P_POW: return ipow_i64(x, y);
    case TM_P_MAX: return x > y ? x : y;
    case TM_P_MIN: return x < y ? x : y;
    case TM_P_EQ: return x == y;
    case TM_P_LT: return x < y;
    case TM_P_LE: return x <= y;
    case TM_P_GT: return x > y;
    case TM_P_GE: return x >= y;
    case TM_P_BITAND: return x & y;
    case TM_P_BITOR: return x | y;
    case TM_P_BITXOR: return x ^ y;
    default: return 0;
    }
}

/* Unsigned integers and bool; `bits` is the dtype's width, for shifts. */
static uint64_t binary_u64(int prim, uint64_t x, uint64_t y, int bits) {
    switch (prim) {
    case TM_P_ADD: return x + y;
    case TM_P_SUB: return x - y;
    case TM_P_MUL: return x * y;
    case TM_P_DIV: return y ? x / y : 0;
    case TM_P_MOD: return y ? x % y : 0;
    case TM_P_POW: return ipow_bits(x, y);
    case TM_P_MAX: return x > y ? x : y;
    case TM_P_MIN: return x < y ? x : y;
    case TM_P_EQ: return x == y;
    case TM_P_LT: return x < y;
    case TM_P_LE: return x <= y;
    case TM_P_GT: return x > y;
    case TM_P_GE: return x >= y;
    case TM_P_AND: case TM_P_BITAND: return x & y;
    case TM_P_OR: case TM_P_BITOR: return x | y;
    case TM_P_XOR: case TM_P_BITXOR: return x ^ y;
    case TM_P_SHL: return y >= (uint64_t)bits ? 0 : x << y;
    case TM_P_SHR: return y >= (uint64_t)bits ? 0 : x >> y;
    default: return 0;
    }
}

/* ---- Binary: shape rule ---------------------------------------------------------------- */

static tm_status binary_dtypes(tm_ctx *c, int prim, tm_dtype da, tm_dtype db) {
    value_domain a = domain_of(da), b = domain_of(db);
    const char *name = prim_name(prim);
    int string_eq = prim == TM_P_EQ && a == DOMAIN_STRING && b == DOMAIN_STRING;
    if (!string_eq && (a == DOMAIN_STRING || b == DOMAIN_STRING || a == DOMAIN_NONE ||
                       b == DOMAIN_NONE))
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "%s: %s and %s tensors are not supported",
                           name, tm_dtype_name(da), tm_dtype_name(db));
    if (prim == TM_P_POW) {  /* the exponent's dtype may differ (ONNX Pow) */
        if (!is_numeric_domain(a) || !is_numeric_domain(b))
            return tm_ctx_fail(c, TM_ERR_DTYPE, "pow needs numeric inputs, got %s and %s",
                               tm_dtype_name(da), tm_dtype_name(db));
        return TM_OK;
    }
    if (da != db)
        return tm_ctx_fail(c, TM_ERR_DTYPE, "%s needs inputs of one dtype, got %s and %s",
                           name, tm_dtype_name(da), tm_dtype_name(db));
    int ok;
    switch (prim) {
    case TM_P_AND: case TM_P_OR: case TM_P_XOR: ok = a == DOMAIN_BOOL; break;
    case TM_P_BITAND: case TM_P_BITOR: case TM_P_BITXOR: ok = is_int_domain(a); break;
    case TM_P_SHL: case TM_P_SHR: ok = a == DOMAIN_UNSIGNED; break;
    case TM_P_EQ: ok = 1; break;
    case TM_P_LT: case TM_P_LE: case TM_P_GT: case TM_P_GE:
        ok = is_numeric_domain(a) || a == DOMAIN_BOOL;
        break;
    default: ok = is_numeric_domain(a); break;  /* arithmetic */
    }
    if (!ok)
        return tm_ctx_fail(c, TM_ERR_DTYPE, "%s does not take %s inputs", name,
                           tm_dtype_name(da));
    return TM_OK;
}

tm_status tm__shape_binary(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                           int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)a; (void)nout;
    tm_status s = binary_dtypes(c, prim, in[0]->dtype, in[1]->dtype);
    if (s != TM_OK) return s;
    s = broadcast_shape(c, prim, in, nin, out);
    if (s != TM_OK) return s;
    out->dtype = is_comparison(prim) ? TM_BOOL : in[0]->dtype;
    *scratch = 0;
    return TM_OK;
}

/* ---- Binary: kernels -------------------------------------------------------------------- */

typedef struct binary_job {
    int prim;
    int python_mod;      /* MOD with i[0] == 0 */
    tm_dtype a_dtype, b_dtype, out_dtype;
    const void *a, *b;
    void *out;
} binary_job;

/* One row: steps are 0 (broadcast) or 1, so four loops cover every case and each is a
 * plain loop the compiler vectorizes. Uses j, offset, step, out_offset and n. */
#define BINARY_LOOP(TO, TA, TB, EXPR)                                                 \
    do {                                                                              \
        TO *restrict o_ = (TO *)j->out + out_offset;                                  \
        const TA *restrict a_ = (const TA *)j->a + offset[0];                         \
        const TB *restrict b_ = (const TB *)j->b + offset[1];                         \
        if (step[0] && step[1]) {                                                     \
            for (int64_t i = 0; i < n; i++) {                                         \
                TA x = a_[i];                                                         \
                TB y = b_[i];                                                         \
                (void)x, (void)y;                                                     \
                o_[i] = (TO)(EXPR);                                                   \
            }                                                                         \
        } else if (step[0]) {                                                         \
            TB y = b_[0];                                                             \
            for (int64_t i = 0; i < n; i++) {                                         \
                TA x = a_[i];                                                         \
                (void)x, (void)y;                                                     \
                o_[i] = (TO)(EXPR);                                                   \
            }                                                                         \
        } else if (step[1]) {                                                         \
            TA x = a_[0];                                                             \
            for (int64_t i = 0; i < n; i++) {                                         \
                TB y = b_[i];                                                         \
                (void)x, (void)y;                                                     \
                o_[i] = (TO)(EXPR);                                                   \
            }                                                                         \
        } else {                                                                      \
            TA x = a_[0];                                                             \
            TB y = b_[0];                                                             \
            (void)x, (void)y;                                                         \
            TO v_ = (TO)(EXPR);                                                       \
            for (int64_t i = 0; i < n; i++) o_[i] = v_;                               \
        }                                                                             \
    } while (0)

#define FLOAT_ROW(NAME, T, POW, FMOD, PYMOD)                                          \
    static void NAME(const void *job, const int64_t *offset, const int64_t *step,    \
                     int64_t out_offset, int64_t n) {                                 \
        const binary_job *j = job;                                                    \
        switch (j->prim) {                                                            \
        case TM_P_ADD: BINARY_LOOP(T, T, T, x + y); break;                            \
        case TM_P_SUB: BINARY_LOOP(T, T, T, x - y); break;                            \
        case TM_P_MUL: BINARY_LOOP(T, T, T, x * y); break;                            \
        case TM_P_DIV: BINARY_LOOP(T, T, T, x / y); break;                            \
        case TM_P_POW: /* squares and cubes (x^2 in norms, x^3 in GELU) as products */ \
            if (!step[1] && ((const T *)j->b)[offset[1]] == 2)                        \
                BINARY_LOOP(T, T, T, x * x);                                          \
            else if (!step[1] && ((const T *)j->b)[offset[1]] == 3)                   \
                BINARY_LOOP(T, T, T, x * x * x);                                      \
            else                                                                      \
                BINARY_LOOP(T, T, T, POW(x, y));                                      \
            break;                                                                    \
        case TM_P_MAX: BINARY_LOOP(T, T, T, (x > y || x != x) ? x : y); break;        \
        case TM_P_MIN: BINARY_LOOP(T, T, T, (x < y || x != x) ? x : y); break;        \
        case TM_P_MOD:                                                                \
            if (j->python_mod) BINARY_LOOP(T, T, T, PYMOD(x, y));                     \
            else BINARY_LOOP(T, T, T, FMOD(x, y));                                    \
            break;                                                                    \
        case TM_P_EQ: BINARY_LOOP(uint8_t, T, T, x == y); break;                      \
        case TM_P_LT: BINARY_LOOP(uint8_t, T, T, x < y); break;                       \
        case TM_P_LE: BINARY_LOOP(uint8_t, T, T, x <= y); break;                      \
        case TM_P_GT: BINARY_LOOP(uint8_t, T, T, x > y); break;                       \
        case TM_P_GE: BINARY_LOOP(uint8_t, T, T, x >= y); break;                      \
        default: break;                                                               \
        }                                                                             \
    }

FLOAT_ROW(row_f32, float, powf, fmodf, python_mod_f32)
FLOAT_ROW(row_f64, double, pow, fmod, python_mod_f64)

/* Signed rows wrap through the unsigned type; the rarer ops go through binary_i64. */
#define INT_ROW(NAME, T, UT)                                                           \
    static void NAME(const void *job, const int64_t *offset, const int64_t *step,     \
                     int64_t out_offset, int64_t n) {                                  \
        const binary_job *j = job;                                                     \
        switch (j->prim) {                                                             \
        case TM_P_ADD: BINARY_LOOP(T, T, T, (UT)x + (UT)y); break;                     \
        case TM_P_SUB: BINARY_LOOP(T, T, T, (UT)x - (UT)y); break;                     \
        case TM_P_MUL: BINARY_LOOP(T, T, T, (UT)x * (UT)y); break;                     \
        case TM_P_MAX: BINARY_LOOP(T, T, T, x > y ? x : y); break;                     \
        case TM_P_MIN: BINARY_LOOP(T, T, T, x < y ? x : y); break;                     \
        case TM_P_EQ: BINARY_LOOP(uint8_t, T, T, x == y); break;                       \
        case TM_P_LT: BINARY_LOOP(uint8_t, T, T, x < y); break;                        \
        case TM_P_LE: BINARY_LOOP(uint8_t, T, T, x <= y); break;                       \
        case TM_P_GT: BINARY_LOOP(uint8_t, T, T, x > y); break;                        \
        case TM_P_GE: BINARY_LOOP(uint8_t, T, T, x >= y); break;                       \
        default:                                                                       \
            BINARY_LOOP(T, T, T, (UT)binary_i64(j->prim, x, y, j->python_mod));        \
            break;                                                                     \
        }                                                                              \
    }

INT_ROW(row_i32, int32_t, uint32_t)
INT_ROW(row_i64, int64_t, uint64_t)

static void row_generic(const void *job, const int64_t *offset, const int64_t *step,
                        int64_t out_offset, int64_t n);

/* uint8 (bytes of packed weights dequantized in a graph, folded at plan time): the
 * arithmetic that wraps, shifts and bitwise ops as plain loops; the rest element by
 * element. */
static void row_u8(const void *job, const int64_t *offset, const int64_t *step,
                   int64_t out_offset, int64_t n) {
    const binary_job *j = job;
    switch (j->prim) {
    case TM_P_ADD: BINARY_LOOP(uint8_t, uint8_t, uint8_t, x + y); break;
    case TM_P_SUB: BINARY_LOOP(uint8_t, uint8_t, uint8_t, x - y); break;
    case TM_P_MUL: BINARY_LOOP(uint8_t, uint8_t, uint8_t, x * y); break;
    case TM_P_BITAND: BINARY_LOOP(uint8_t, uint8_t, uint8_t, x & y); break;
    case TM_P_BITOR: BINARY_LOOP(uint8_t, uint8_t, uint8_t, x | y); break;
    case TM_P_BITXOR: BINARY_LOOP(uint8_t, uint8_t, uint8_t, x ^ y); break;
    case TM_P_SHL: BINARY_LOOP(uint8_t, uint8_t, uint8_t, y >= 8 ? 0 : x << y); break;
    case TM_P_SHR: BINARY_LOOP(uint8_t, uint8_t, uint8_t, y >= 8 ? 0 : x >> y); break;
    default: row_generic(job, offset, step, out_offset, n); break;
    }
}

static void row_bool(const void *job, const int64_t *offset, const int64_t *step,
                     int64_t out_offset, int64_t n) {
    const binary_job *j = job;
    switch (j->prim) {
    case TM_P_AND: BINARY_LOOP(uint8_t, uint8_t, uint8_t, (x != 0) & (y != 0)); break;
    case TM_P_OR: BINARY_LOOP(uint8_t, uint8_t, uint8_t, (x != 0) | (y != 0)); break;
    case TM_P_XOR: BINARY_LOOP(uint8_t, uint8_t, uint8_t, (x != 0) ^ (y != 0)); break;
    case TM_P_EQ: BINARY_LOOP(uint8_t, uint8_t, uint8_t, (x != 0) == (y != 0)); break;
    case TM_P_LT: BINARY_LOOP(uint8_t, uint8_t, uint8_t, (x != 0) < (y != 0)); break;
    case TM_P_LE: BINARY_LOOP(uint8_t, uint8_t, uint8_t, (x != 0) <= (y != 0)); break;
    case TM_P_GT: BINARY_LOOP(uint8_t, uint8_t, uint8_t, (x != 0) > (y != 0)); break;
    case TM_P_GE: BINARY_LOOP(uint8_t, uint8_t, uint8_t, (x != 0) >= (y != 0)); break;
    default: break;
    }
}

static void store_result_i64(const binary_job *j, size_t eo, int64_t r) {
    if (is_comparison(j->prim)) ((uint8_t *)j->out)[eo] = r != 0;
    else tm_store_i64(j->out, j->out_dtype, eo, r);
}

static void binary_element_signed(const binary_job *j, size_t ea, size_t eb, size_t eo) {
    int64_t x = tm_load_i64(j->a, j->a_dtype, ea);
    if (j->prim == TM_P_POW && domain_of(j->b_dtype) == DOMAIN_FLOAT) {
        double p = pow((double)x, tm_load_f64(j->b, j->b_dtype, eb));
        tm_store_i64(j->out, j->out_dtype, eo, f64_to_i64(p));
        return;
    }
    int64_t y = tm_load_i64(j->b, j->b_dtype, eb);
    if (j->prim == TM_P_POW && domain_of(j->b_dtype) != DOMAIN_SIGNED)
        y = (int64_t)tm_load_u64(j->b, j->b_dtype, eb);
    store_result_i64(j, eo, binary_i64(j->prim, x, y, j->python_mod));
}

static void binary_element_unsigned(const binary_job *j, size_t ea, size_t eb, size_t eo) {
    uint64_t x = tm_load_u64(j->a, j->a_dtype, ea);
    uint64_t r;
    value_domain bd = domain_of(j->b_dtype);
    if (j->prim == TM_P_POW && bd == DOMAIN_FLOAT) {
        r = f64_to_u64(pow((double)x, tm_load_f64(j->b, j->b_dtype, eb)));
    } else if (j->prim == TM_P_POW && bd == DOMAIN_SIGNED &&
               tm_load_i64(j->b, j->b_dtype, eb) < 0) {
        r = x == 1;  /* 1/x^|e| truncates to 0 unless x == 1 */
    } else {
        uint64_t y = tm_load_u64(j->b, j->b_dtype, eb);
        r = binary_u64(j->prim, x, y, tm_dtype_bits(j->a_dtype));
    }
    if (is_comparison(j->prim)) ((uint8_t *)j->out)[eo] = r != 0;
    else tm_store_u64(j->out, j->out_dtype, eo, r);
}

static void binary_element(const binary_job *j, size_t ea, size_t eb, size_t eo) {
    switch (domain_of(j->a_dtype)) {
    case DOMAIN_FLOAT: {
        double x = tm_load_f64(j->a, j->a_dtype, ea);
        double y = load_any_f64(j->b, j->b_dtype, eb);
        double r = binary_f64(j->prim, x, y, j->python_mod);
        if (is_comparison(j->prim)) ((uint8_t *)j->out)[eo] = r != 0;
        else tm_store_f64(j->out, j->out_dtype, eo, r);
        return;
    }
    case DOMAIN_SIGNED:
        binary_element_signed(j, ea, eb, eo);
        return;
    case DOMAIN_UNSIGNED: case DOMAIN_BOOL:
        binary_element_unsigned(j, ea, eb, eo);
        return;
    case DOMAIN_STRING: {  /* EQ only (the shape rule allows nothing else) */
        const char *x = ((char *const *)j->a)[ea], *y = ((char *const *)j->b)[eb];
        ((uint8_t *)j->out)[eo] = strcmp(x ? x : "", y ? y : "") == 0;
        return;
    }
    default:
        return;
    }
}

static void row_generic(const void *job, const int64_t *offset, const int64_t *step,
                        int64_t out_offset, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        binary_element(job, (size_t)(offset[0] + i * step[0]),
                       (size_t)(offset[1] + i * step[1]), (size_t)(out_offset + i));
}

static row_fn binary_row(const binary_job *j) {
    if (j->a_dtype != j->b_dtype || tm_use_reference_kernels()) return row_generic;
    int prim = j->prim;
    switch (j->a_dtype) {
    case TM_FLOAT: return row_f32;
    case TM_DOUBLE: return row_f64;
    case TM_INT32: return row_i32;
    case TM_INT64: return row_i64;
    case TM_UINT8: return j->out_dtype == TM_UINT8 ? row_u8 : row_generic;
    case TM_BOOL:
        return (prim == TM_P_AND || prim == TM_P_OR || prim == TM_P_XOR ||
                is_comparison(prim)) ? row_bool : row_generic;
    default: return row_generic;
    }
}

tm_status tm__kernel_binary(const tm_kcall *k) {
    tm_tensor *out = k->out[0];
    if (tm_tensor_numel_(out) <= 0) return TM_OK;
    binary_job j = {
        .prim = k->prim, .python_mod = k->a->i[0] == 0,
        .a_dtype = k->in[0]->dtype, .b_dtype = k->in[1]->dtype, .out_dtype = out->dtype,
        .a = k->in[0]->data, .b = k->in[1]->data, .out = out->data,
    };
    walk w;
    walk_init(&w, out, k->in, 2);
    walk_run_pool(&w, binary_row(&j), &j, k->pool);
    return TM_OK;
}

/* ---- Where ------------------------------------------------------------------------------ */

tm_status tm__shape_where(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                          int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)a; (void)nout;
    if (in[0]->dtype != TM_BOOL)
        return tm_ctx_fail(c, TM_ERR_DTYPE, "where: the condition must be bool, got %s",
                           tm_dtype_name(in[0]->dtype));
    tm_dtype dt = in[1]->dtype;
    value_domain d = domain_of(dt);
    if (d == DOMAIN_STRING || d == DOMAIN_NONE)
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "where: %s values are not supported",
                           tm_dtype_name(dt));
    if (in[2]->dtype != dt)
        return tm_ctx_fail(c, TM_ERR_DTYPE, "where: the two value inputs differ in dtype "
                           "(%s and %s)", tm_dtype_name(dt), tm_dtype_name(in[2]->dtype));
    tm_status s = broadcast_shape(c, prim, in, nin, out);
    if (s != TM_OK) return s;
    out->dtype = dt;
    *scratch = 0;
    return TM_OK;
}

typedef struct where_job {
    const uint8_t *cond;
    const void *x, *y;
    void *out;
} where_job;

/* Values are moved as raw elements, so one loop per element size serves every dtype. */
#define WHERE_LOOP(T)                                                                     \
    do {                                                                                  \
        const T *x_ = (const T *)j->x + offset[1];                                        \
        const T *y_ = (const T *)j->y + offset[2];                                        \
        T *o_ = (T *)j->out + out_offset;                                                 \
        if (step[0] && step[1] && step[2]) {                                              \
            for (int64_t i = 0; i < n; i++) o_[i] = c_[i] ? x_[i] : y_[i];                \
            break;                                                                        \
        }                                                                                 \
        for (int64_t i = 0; i < n; i++)                                                   \
            o_[i] = c_[i * step[0]] ? x_[i * step[1]] : y_[i * step[2]];                  \
    } while (0)

#define WHERE_ROW(NAME, T)                                                                \
    static void NAME(const void *job, const int64_t *offset, const int64_t *step,        \
                     int64_t out_offset, int64_t n) {                                     \
        const where_job *j = job;                                                         \
        const uint8_t *c_ = j->cond + offset[0];                                          \
        WHERE_LOOP(T);                                                                    \
    }

WHERE_ROW(where_row_1, uint8_t)
WHERE_ROW(where_row_2, uint16_t)
WHERE_ROW(where_row_4, uint32_t)
WHERE_ROW(where_row_8, uint64_t)

tm_status tm__kernel_where(const tm_kcall *k) {
    tm_tensor *out = k->out[0];
    if (tm_tensor_numel_(out) <= 0) return TM_OK;
    where_job j = {k->in[0]->data, k->in[1]->data, k->in[2]->data, out->data};
    row_fn row;
    switch (tm_dtype_elem_size(out->dtype)) {
    case 1: row = where_row_1; break;
    case 2: row = where_row_2; break;
    case 4: row = where_row_4; break;
    case 8: row = where_row_8; break;
    default:
        return tm__fail(k->err, TM_ERR_UNSUPPORTED, "where: %s values are not supported",
                        tm_dtype_name(out->dtype));
    }
    walk w;
    walk_init(&w, out, k->in, 3);
    walk_run(&w, row, &j);
    return TM_OK;
}

/* ---- Cast: shape rule -------------------------------------------------------------------- */

tm_status tm__shape_cast(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                         int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)prim; (void)nin; (void)nout;
    tm_dtype from = in[0]->dtype;
    int64_t to = a->i[0];
    if (!tm_dtype_is_valid((int)to) || to != (int)to)
        return tm_ctx_fail(c, TM_ERR_DTYPE, "cast: %lld is not a dtype", (long long)to);
    if (domain_of(from) == DOMAIN_NONE || domain_of((tm_dtype)to) == DOMAIN_NONE)
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "cast from %s to %s is not supported",
                           tm_dtype_name(from), tm_dtype_name((tm_dtype)to));
    out->dtype = (tm_dtype)to;
    out->rank = in[0]->rank;
    memcpy(out->dims, in[0]->dims, sizeof out->dims);
    *scratch = 0;
    return TM_OK;
}

/* ---- Cast: numbers to numbers ------------------------------------------------------------ */

static int is_float8(tm_dtype dt) {
    return dt == TM_FLOAT8E4M3FN || dt == TM_FLOAT8E4M3FNUZ || dt == TM_FLOAT8E5M2 ||
           dt == TM_FLOAT8E5M2FNUZ;
}



/* CAST's i[1] (saturate, float8 targets) and i[2] (round_mode, float8e8m0). */
typedef struct cast_rules {
    int saturate;
    int round_mode;
} cast_rules;

/* Narrow float targets that honour the rules (the dtype.h stores always saturate and
 * round e8m0 up). */
static int store_saturating_narrow(void *base, tm_dtype dt, size_t i, double v,
                                   const cast_rules *rules) {
    if (is_float8(dt) && !rules->saturate) {
        ((uint8_t *)base)[i] = tm_f32_to_f8((float)v, dt, 0);
        return 1;
    }
    if (dt == TM_FLOAT8E8M0) {
        uint8_t code = tm_f32_to_e8m0_mode((float)v, rules->saturate, rules->round_mode);
        ((uint8_t *)base)[i] = code;
        return 1;
    }
    return 0;
}

static void cast_store_f64(void *base, tm_dtype dt, size_t i, double v,
                           const cast_rules *rules) {
    switch (domain_of(dt)) {
    case DOMAIN_SIGNED: tm_store_i64(base, dt, i, f64_to_i64(v)); return;
    case DOMAIN_UNSIGNED: tm_store_u64(base, dt, i, f64_to_u64(v)); return;
    case DOMAIN_BOOL: ((uint8_t *)base)[i] = v != 0; return;  /* NaN is true */
    default:
        if (!store_saturating_narrow(base, dt, i, v, rules)) tm_store_f64(base, dt, i, v);
        return;
    }
}

static void cast_element(const tm_tensor *x, tm_tensor *y, size_t i, const cast_rules *rules) {
    tm_dtype from = x->dtype, to = y->dtype;
    switch (domain_of(from)) {
    case DOMAIN_FLOAT:
        cast_store_f64(y->data, to, i, tm_load_f64(x->data, from, i), rules);
        return;
    case DOMAIN_SIGNED: {
        int64_t v = tm_load_i64(x->data, from, i);
        if (!store_saturating_narrow(y->data, to, i, (double)v, rules))
            tm_store_i64(y->data, to, i, v);
        return;
    }
    default: {
        uint64_t v = tm_load_u64(x->data, from, i);
        if (!store_saturating_narrow(y->data, to, i, (double)v, rules))
            tm_store_u64(y->data, to, i, v);
        return;
    }
    }
}

#define CAST_LOOP(TI, TO, EXPR)                                   \
    do {                                                          \
        const TI *restrict s_ = src;                              \
        TO *restrict d_ = dst;                                    \
        for (int64_t i = 0; i < n; i++) {                         \
            TI x = s_[i];                                         \
            d_[i] = (EXPR);                                       \
        }                                                         \
        return 1;                                                 \
    } while (0)

/* From one common C type to every common C type; FLOAT_SRC selects the safe float-to-int
 * conversion. Returns from the enclosing function when it handled the pair. */
#define CAST_FROM(TI, FLOAT_SRC)                                                          \
    switch (to) {                                                                         \
    case TM_FLOAT: CAST_LOOP(TI, float, (float)x);                                        \
    case TM_DOUBLE: CAST_LOOP(TI, double, (double)x);                                     \
    case TM_INT64: CAST_LOOP(TI, int64_t, FLOAT_SRC ? f64_to_i64((double)x) : (int64_t)x); \
    case TM_INT32:                                                                        \
        CAST_LOOP(TI, int32_t, (int32_t)(FLOAT_SRC ? f64_to_i64((double)x) : (int64_t)x)); \
    case TM_INT8:                                                                         \
        CAST_LOOP(TI, int8_t, (int8_t)(FLOAT_SRC ? f64_to_i64((double)x) : (int64_t)x));   \
    case TM_UINT8:                                                                        \
        CAST_LOOP(TI, uint8_t, (uint8_t)(FLOAT_SRC ? f64_to_i64((double)x) : (int64_t)x)); \
    case TM_BOOL: CAST_LOOP(TI, uint8_t, (uint8_t)(x != 0));                              \
    default: return 0;                                                                    \
    }

#if defined(__F16C__) && defined(__AVX__)
/* The F16C instructions round to nearest even as tm_f32_to_f16 does. */
static int f16_from_f32_row(const float *x, uint16_t *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = tm_f32_to_f16(x[i]);
    return 1;
}

static int f32_from_f16_row(const uint16_t *x, float *y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    for (; i < n; i++) y[i] = tm_f16_to_f32(x[i]);
    return 1;
}
#endif

/* Typed loops for the pairs that models use; 0 when the pair is not one of them. */
static int cast_fast(tm_dtype from, tm_dtype to, const void *src, void *dst, int64_t n) {
#if defined(__F16C__) && defined(__AVX__)
    if (from == TM_FLOAT && to == TM_FLOAT16) return f16_from_f32_row(src, dst, n);
    if (from == TM_FLOAT16 && to == TM_FLOAT) return f32_from_f16_row(src, dst, n);
#endif
    if (from == TM_FLOAT16 && to == TM_FLOAT) CAST_LOOP(uint16_t, float, tm_f16_to_f32(x));
    if (from == TM_FLOAT && to == TM_FLOAT16) CAST_LOOP(float, uint16_t, tm_f32_to_f16(x));
    if (from == TM_BFLOAT16 && to == TM_FLOAT) CAST_LOOP(uint16_t, float, tm_bf16_to_f32(x));
    if (from == TM_FLOAT && to == TM_BFLOAT16) CAST_LOOP(float, uint16_t, tm_f32_to_bf16(x));
    switch (from) {
    case TM_FLOAT: CAST_FROM(float, 1)
    case TM_DOUBLE: CAST_FROM(double, 1)
    case TM_INT64: CAST_FROM(int64_t, 0)
    case TM_INT32: CAST_FROM(int32_t, 0)
    case TM_INT8: CAST_FROM(int8_t, 0)
    case TM_UINT8: CAST_FROM(uint8_t, 0)
    case TM_BOOL: CAST_FROM(uint8_t, 0)
    default: return 0;
    }
}

/* ---- Cast: strings ------------------------------------------------------------------------ */

/* Whether `back` (parsed from text) reads as the same element of dtype dt as v. */
static int same_element(double back, double v, tm_dtype dt) {
    if (dt == TM_DOUBLE) return back == v;
    if (dt == TM_FLOAT) return (float)back == (float)v;
    uint8_t cell[8];
    tm_store_f64(cell, dt, 0, back);
    return tm_load_f64(cell, dt, 0) == v;
}

/* The shortest decimal that reads back as the same element, laid out as numpy's str()
 * does (the ONNX backend data comes from it): positional for 1e-4 <= |v| < 1e16, with
 * ".0" on whole numbers, else scientific ("1e-05", "1.5e+16"). NaN and infinities are
 * written "NaN", "INF", "-INF", the spellings ONNX Cast reads back. */
static void format_float(char *buf, size_t cap, double v, tm_dtype dt) {
    if (isnan(v)) { snprintf(buf, cap, "NaN"); return; }
    if (isinf(v)) { snprintf(buf, cap, v < 0 ? "-INF" : "INF"); return; }
    if (v == 0) { snprintf(buf, cap, signbit(v) ? "-0.0" : "0.0"); return; }
    char sci[40];
    for (int precision = 0; precision <= 17; precision++) {
        snprintf(sci, sizeof sci, "%.*e", precision, v);
        if (same_element(strtod(sci, NULL), v, dt)) break;
    }
    /* sci is "[-]d[.ddd]e[+-]xx": collect the digits and the decimal exponent. */
    char digits[24];
    int ndigits = 0;
    const char *p = sci + (sci[0] == '-');
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9' && ndigits < (int)sizeof digits - 1) digits[ndigits++] = *p;
    int exp10 = atoi(p + 1);
    while (ndigits > 1 && digits[ndigits - 1] == '0') ndigits--;
    digits[ndigits] = 0;
    const char *sign = v < 0 ? "-" : "";
    double mag = fabs(v);
    if (mag < 1e-4 || mag >= 1e16) {
        snprintf(buf, cap, "%s%c%s%se%c%02d", sign, digits[0], ndigits > 1 ? "." : "",
                 digits + 1, exp10 < 0 ? '-' : '+', abs(exp10));
        return;
    }
    char text[64];
    int len = 0;
    if (exp10 < 0) {
        len += snprintf(text + len, sizeof text - (size_t)len, "0.");
        for (int z = 0; z < -exp10 - 1; z++) text[len++] = '0';
        len += snprintf(text + len, sizeof text - (size_t)len, "%s", digits);
    } else {
        for (int d = 0; d <= exp10; d++) text[len++] = d < ndigits ? digits[d] : '0';
        text[len++] = '.';
        if (ndigits > exp10 + 1)
            len += snprintf(text + len, sizeof text - (size_t)len, "%s", digits + exp10 + 1);
        else
            text[len++] = '0';
        text[len] = 0;
    }
    snprintf(buf, cap, "%s%s", sign, text);
}

static void format_element(char *buf, size_t cap, const tm_tensor *x, size_t i) {
    switch (domain_of(x->dtype)) {
    case DOMAIN_FLOAT:
        format_float(buf, cap, tm_load_f64(x->data, x->dtype, i), x->dtype);
        return;
    case DOMAIN_SIGNED:
        snprintf(buf, cap, "%lld", (long long)tm_load_i64(x->data, x->dtype, i));
        return;
    default:
        snprintf(buf, cap, "%llu", (unsigned long long)tm_load_u64(x->data, x->dtype, i));
        return;
    }
}

static tm_status cast_to_string(const tm_kcall *k, const tm_tensor *x, tm_tensor *y, int64_t n) {
    char **out = y->data;
    char buf[96];
    for (int64_t i = 0; i < n; i++) {
        const char *text = buf;
        if (x->dtype == TM_STRING) {
            text = ((char *const *)x->data)[i];
            if (!text) text = "";
        } else {
            format_element(buf, sizeof buf, x, (size_t)i);
        }
        free(out[i]);  /* the array starts zeroed; this only guards a reused output */
        out[i] = strdup(text);
        if (!out[i])
            return tm__fail(k->err, TM_ERR_NO_MEMORY, "cast: out of memory writing strings");
    }
    return TM_OK;
}

static int equals_ignoring_case(const char *s, const char *word) {
    for (; *s && *word; s++, word++) {
        char a = *s >= 'A' && *s <= 'Z' ? (char)(*s - 'A' + 'a') : *s;
        if (a != *word) return 0;
    }
    return *s == 0 && *word == 0;
}

/* Whole-string integer parse; 0 when the text is not a plain integer. */
static int parse_integer(const char *s, int is_unsigned, uint64_t *out) {
    char *end;
    if (is_unsigned && !strchr(s, '-')) *out = strtoull(s, &end, 10);
    else *out = (uint64_t)strtoll(s, &end, 10);
    if (end == s) return 0;
    while (*end == ' ' || *end == '\t' || *end == '\n') end++;
    return *end == 0;
}

/* strtod reads "inf", "+INF", "-inf", "NaN" in any case, as ONNX asks. Text that is not
 * a number (undefined in ONNX) reads as 0. */
static void parse_element(tm_tensor *y, size_t i, const char *s, const cast_rules *rules) {
    if (!s) s = "";
    tm_dtype dt = y->dtype;
    value_domain d = domain_of(dt);
    uint64_t integer;
    if (d == DOMAIN_BOOL && (equals_ignoring_case(s, "true") || equals_ignoring_case(s, "false"))) {
        ((uint8_t *)y->data)[i] = equals_ignoring_case(s, "true");
        return;
    }
    if ((d == DOMAIN_SIGNED || d == DOMAIN_UNSIGNED) &&
        parse_integer(s, d == DOMAIN_UNSIGNED, &integer)) {
        tm_store_u64(y->data, dt, i, integer);  /* exact beyond 2^53, wraps like a cast */
        return;
    }
    cast_store_f64(y->data, dt, i, strtod(s, NULL), rules);
}

/* ---- Cast: kernel -------------------------------------------------------------------------- */

tm_status tm__kernel_cast(const tm_kcall *k) {
    const tm_tensor *x = k->in[0];
    tm_tensor *y = k->out[0];
    int64_t n = tm_tensor_numel_(x);
    cast_rules rules = {k->a->i[1] != 0, (int)k->a->i[2]};
    if (n <= 0) return TM_OK;
    if (y->dtype == TM_STRING) return cast_to_string(k, x, y, n);
    if (x->dtype == TM_STRING) {
        for (int64_t i = 0; i < n; i++)
            parse_element(y, (size_t)i, ((char *const *)x->data)[i], &rules);
        return TM_OK;
    }
    if (x->dtype == y->dtype) {
        memcpy(y->data, x->data, (size_t)n * tm_dtype_elem_size(x->dtype));
        return TM_OK;
    }
    if (!tm_use_reference_kernels() && cast_fast(x->dtype, y->dtype, x->data, y->data, n))
        return TM_OK;
    for (int64_t i = 0; i < n; i++) cast_element(x, y, (size_t)i, &rules);
    return TM_OK;
}

/* ---- GELU_GRAD ----------------------------------------------------------------------------
 * The cotangent of GELU in one pass over x and gy (its decomposition into primitives made
 * about ten passes over activations of a transformer's widest layer). Same maths as the
 * GELU kernels: the erf form's Phi(x) from erfc, the tanh form through sigmoid. */

tm_status tm__shape_gelu_grad(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                              int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)prim; (void)a; (void)nin; (void)nout;
    const tm_vinfo *x = in[0], *gy = in[1];
    if (domain_of(x->dtype) != DOMAIN_FLOAT || gy->dtype != x->dtype)
        return tm_ctx_fail(c, TM_ERR_DTYPE, "gelu_grad: x and gy must be of one float dtype, "
                           "not %s and %s", tm_dtype_name(x->dtype), tm_dtype_name(gy->dtype));
    if (gy->rank != x->rank || memcmp(gy->dims, x->dims, (size_t)x->rank * sizeof x->dims[0]))
        return tm_ctx_fail(c, TM_ERR_SHAPE, "gelu_grad: gy must have x's dims");
    out->dtype = x->dtype;
    out->rank = x->rank;
    memcpy(out->dims, x->dims, sizeof out->dims);
    *scratch = 0;
    return TM_OK;
}

#define INV_SQRT_2PI 0.39894228040143267794

static double gelu_derivative_f64(double x, int tanh_form) {
    if (tanh_form) {
        double s = sigmoid_f64(2.0 * SQRT_2_OVER_PI * (x + 0.044715 * x * x * x));
        double du = SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * x * x);
        return s + 2.0 * x * s * (1.0 - s) * du;
    }
    return 0.5 * erfc(-x * SQRT_HALF) + x * INV_SQRT_2PI * exp(-0.5 * x * x);
}

static inline float gelu_erf_derivative_f32(float x) {
    float e = erfc_nonnegative_f32(fabsf(x) * (float)SQRT_HALF);
    float cdf = 0.5f * (x >= 0 ? 2.0f - e : e);
    return cdf + x * (float)INV_SQRT_2PI * exp_f32(-0.5f * x * x);
}

static inline float gelu_tanh_derivative_f32(float x) {
    float s = sigmoid_f32(2.0f * (float)SQRT_2_OVER_PI * (x + 0.044715f * x * x * x));
    float du = (float)SQRT_2_OVER_PI * (1.0f + 3 * 0.044715f * x * x);
    return s + 2.0f * x * s * (1.0f - s) * du;
}

void tm__gelu_erf_d_f32(const float *x, float *y, float *dx, int64_t n) {
    const tm__vmath *vm = tm__vmath_active();
    if (vm && vm->gelu_erf_d) {
        vm->gelu_erf_d(x, y, dx, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        float v = x[i];
        y[i] = gelu_erf_f32(v);
        dx[i] = gelu_erf_derivative_f32(v);
    }
}

typedef struct gelu_grad_job {
    const float *x, *gy;
    float *y;
    int64_t n;
    int tanh_form;
} gelu_grad_job;

/* Elements [first, last) in float32. */
static void gelu_grad_f32(const gelu_grad_job *j, int64_t first, int64_t last) {
    const float *restrict xs = j->x + first, *restrict gs = j->gy + first;
    float *restrict ys = j->y + first;
    int64_t n = last - first;
    const tm__vmath *vm = tm__vmath_active();
    if (j->tanh_form)
        for (int64_t i = 0; i < n; i++) ys[i] = gs[i] * gelu_tanh_derivative_f32(xs[i]);
    else if (vm && vm->gelu_erf_grad)
        vm->gelu_erf_grad(xs, gs, ys, n);
    else   /* subnormals flushed, as the vector kernel's FTZ and DAZ (and MATMUL_MUL) do */
        for (int64_t i = 0; i < n; i++)
            ys[i] = tm__mul_flushed(gs[i], gelu_erf_derivative_f32(xs[i]));
}

static void gelu_grad_slice(void *arg, int ith, int nth) {
    const gelu_grad_job *j = arg;
    int64_t units = (j->n + 15) / 16;
    int64_t first = units * ith / nth * 16, last = units * (ith + 1) / nth * 16;
    if (last > j->n) last = j->n;
    if (first < last) gelu_grad_f32(j, first, last);
}

tm_status tm__kernel_gelu_grad(const tm_kcall *k) {
    const tm_tensor *x = k->in[0], *gy = k->in[1];
    tm_tensor *y = k->out[0];
    int64_t n = tm_tensor_numel_(x);
    int tanh_form = k->a->i[0] == 1;
    if (x->dtype == TM_FLOAT && !tm_use_reference_kernels()) {
        gelu_grad_job job = {x->data, gy->data, y->data, n, tanh_form};
        if (n >= PARALLEL_MIN_ELEMENTS && tm_pool_threads(k->pool) > 1)
            tm_pool_run_n(k->pool, PARALLEL_SLICES, gelu_grad_slice, &job);
        else
            gelu_grad_f32(&job, 0, n);
        return TM_OK;
    }
    for (int64_t i = 0; i < n; i++) {
        double d = gelu_derivative_f64(tm_load_f64(x->data, x->dtype, (size_t)i), tanh_form);
        tm_store_f64(y->data, y->dtype, (size_t)i, tm_load_f64(gy->data, gy->dtype, (size_t)i) * d);
    }
    return TM_OK;
}
