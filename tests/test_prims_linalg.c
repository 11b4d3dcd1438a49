/* Tests of the linalg primitives (MATMUL, CONV, CONV_TRANSPOSE, POOL, MAXPOOL_INDICES)
 * and of tm_sgemm: against naive loops in double written here, and against the ONNX
 * backend test data when /work/shared/onnx-backend is present.
 * Not a test of the ONNX lowerings: node attributes are turned into args by hand. */
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../src/backends/cpu/gemm.h"
#include "../src/core/ctx.h"
#include "../src/onnx/model.h"

#define BACKEND_DIR "/work/shared/onnx-backend/node"

#define CHECK_RNG_SEED 0x9e3779b97f4a7c15ULL
#include "check.h"

/* ---- Values -------------------------------------------------------------------------- */

static void store(void *data, tm_dtype dt, int64_t i, double v) {
    if (tm_dtype_is_float(dt)) tm_store_f64(data, dt, (size_t)i, v);
    else if (tm_dtype_is_unsigned_int(dt)) tm_store_u64(data, dt, (size_t)i, (uint64_t)(int64_t)v);
    else tm_store_i64(data, dt, (size_t)i, (int64_t)v);
}

static double load(const void *data, tm_dtype dt, int64_t i) {
    if (tm_dtype_is_float(dt)) return tm_load_f64(data, dt, (size_t)i);
    if (tm_dtype_is_unsigned_int(dt)) return (double)tm_load_u64(data, dt, (size_t)i);
    return (double)tm_load_i64(data, dt, (size_t)i);
}

/* A value of dtype dt holding `values`; values[] is overwritten with what the dtype
 * actually holds, so expectations use the rounded inputs. */
static tm_val make(tm_ctx *c, tm_dtype dt, int rank, const int64_t *dims, double *values) {
    tm_tensor *t = tm_tensor_alloc(dt, rank, dims, NULL);
    if (!t) return TM_NONE;
    int64_t n = numel(rank, dims);
    for (int64_t i = 0; i < n; i++) {
        store(t->data, dt, i, values[i]);
        values[i] = load(t->data, dt, i);
    }
    return tm_val_tensor(c, t, 0);
}

/* Random values: floats in [-scale, scale), integers in [-scale, scale]. */
static double *random_values(tm_dtype dt, int64_t n, double scale) {
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    for (int64_t i = 0; i < n; i++) {
        v[i] = random_unit() * scale;
        if (!tm_dtype_is_float(dt)) v[i] = floor(v[i] + 0.5);
        if (tm_dtype_is_unsigned_int(dt)) v[i] = fabs(v[i]);
    }
    return v;
}

/* Tolerances for results rounded to dt (after sums in f32 or wider). */
static double tolerance(tm_dtype dt) {
    switch (dt) {
    case TM_DOUBLE: return 1e-9;
    case TM_FLOAT: return 2e-5;
    case TM_FLOAT16: return 2e-3;
    case TM_BFLOAT16: return 1.6e-2;
    default: return tm_dtype_is_float(dt) ? 0.13 : 0.0;
    }
}

/* Compares v (its dims and data) with want: |got - want| <= tol * (1 + |want|). */
static void expect_values(tm_ctx *c, tm_val v, int rank, const int64_t *dims,
                          const double *want, double tol, const char *name) {
    const tm_tensor *t = tm_ctx_ok(c) ? tm_vdata(c, v) : NULL;
    check(t != NULL, "%s: no result (%s)", name, c->err.message);
    if (!t) return;
    int same = t->rank == rank;
    for (int d = 0; same && d < rank; d++) same = t->dims[d] == dims[d];
    check(same, "%s: wrong output shape", name);
    if (!same) return;
    int64_t n = numel(rank, dims), bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++) {
        double got = load(t->data, t->dtype, i);
        int ok = (isnan(want[i]) && isnan(got)) || fabs(got - want[i]) <= tol * (1.0 + fabs(want[i]));
        if (!ok && bad++ == 0) first = i;
    }
    check(bad == 0, "%s: %lld of %lld values differ, first at %lld: got %.9g want %.9g", name,
          (long long)bad, (long long)n, (long long)first,
          first >= 0 ? load(t->data, t->dtype, first) : 0.0, first >= 0 ? want[first] : 0.0);
}

static void expect_failure(tm_ctx *c, tm_status code, const char *needle, const char *name) {
    check(c->status == code, "%s: status %d, want %d (%s)", name, (int)c->status, (int)code,
          c->err.message);
    check(strstr(c->err.message, needle) != NULL, "%s: message '%s' lacks '%s'", name,
          c->err.message, needle);
}

/* The integer v wrapped to dt, as the kernels must store it. */
static double wrap_to(tm_dtype dt, uint64_t v) {
    uint64_t cell = 0;
    if (tm_dtype_is_unsigned_int(dt)) tm_store_u64(&cell, dt, 0, v);
    else tm_store_i64(&cell, dt, 0, (int64_t)v);
    return load(&cell, dt, 0);
}

/* ---- tm_sgemm ------------------------------------------------------------------------ */

static void test_sgemm_against_reference(void) {
    const int64_t m = 37, n = 45, k = 29, ld = 64;
    const size_t cells = (size_t)(ld * ld);
    float *a = malloc(cells * sizeof *a), *b = malloc(cells * sizeof *b);
    float *c1 = malloc(cells * sizeof *c1), *c2 = malloc(cells * sizeof *c2);
    void *work = malloc(tm_sgemm_scratch(1, 1, m, n, k) + 1);
    for (int64_t i = 0; i < ld * ld; i++) {
        a[i] = (float)random_unit();
        b[i] = (float)random_unit();
    }
    for (int trans_a = 0; trans_a < 2; trans_a++)
        for (int trans_b = 0; trans_b < 2; trans_b++)
            for (int beta_case = 0; beta_case < 2; beta_case++) {
                float beta = beta_case ? 0.5f : 0.0f;
                for (int64_t i = 0; i < ld * ld; i++) c1[i] = c2[i] = beta_case ? 1.0f : NAN;
                tm_sgemm(trans_a, trans_b, m, n, k, 1.5f, a, ld, b, ld, beta, c1, ld, work, NULL);
                tm_sgemm_reference(trans_a, trans_b, m, n, k, 1.5f, a, ld, b, ld, beta, c2, ld);
                double worst = 0.0;
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = 0; j < n; j++) {
                        double want = 0.0;
                        for (int64_t p = 0; p < k; p++)
                            want += (double)(trans_a ? a[p * ld + i] : a[i * ld + p])
                                    * (trans_b ? b[j * ld + p] : b[p * ld + j]);
                        want = 1.5 * want + (beta_case ? 0.5 : 0.0);
                        double e1 = fabs(c1[i * ld + j] - want), e2 = fabs(c2[i * ld + j] - want);
                        worst = fmax(worst, fmax(e1, e2));
                        if (isnan(c1[i * ld + j]) || isnan(c2[i * ld + j])) worst = INFINITY;
                    }
                int untouched = c1[m * ld] == c2[m * ld] || (isnan(c1[m * ld]) && isnan(c2[m * ld]));
                check(worst < 1e-4 && untouched, "sgemm trans %d/%d beta %g: error %g", trans_a,
                      trans_b, beta, worst);
            }
    /* k = 0: C = beta * C. */
    c1[0] = 4.0f;
    tm_sgemm(0, 0, 1, 1, 0, 1.0f, a, 1, b, 1, 0.5f, c1, 1, NULL, NULL);
    check(c1[0] == 2.0f, "sgemm k=0 scales C: got %g", c1[0]);
    free(a);
    free(b);
    free(c1);
    free(c2);
    free(work);
}

/* The packed path against the reference over shapes that cross every block and tile
 * boundary, each transpose, padded leading dims, alpha and beta; then the same products
 * split over a pool of 2 and 3 threads must give bit-identical results. */
typedef struct sgemm_case {
    int64_t m, n, k;
} sgemm_case;

/* A product stored transposed, checked against tm_sgemm's result c1 (from c2, beta's C):
 * tm_sgemm_ct (res NULL), tm_sgemm_ct_add (+ res, laid out as C) or with mul
 * tm_sgemm_ct_mul (times res), on 1 and 3 threads. */
typedef struct ct_case {
    int trans_a, trans_b;
    int64_t m, n, k;
    float alpha;
    const float *a;
    int64_t lda;
    const float *b;
    int64_t ldb;
    float beta;
    const float *c1, *c2;
    int64_t ldc, ldt;
    void *work;
    tm_pool **pools;
} ct_case;

static void check_ct(const ct_case *t, const float *res, int mul) {
    int64_t m = t->m, n = t->n, k = t->k, ldt = t->ldt;
    int exact = m > 3 && (double)m * (double)n * (double)k > 512.0;
    float *ct = malloc((size_t)(n * ldt) * sizeof *ct);
    for (int pi = -1; pi < 2; pi += 2) {
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < ldt; i++) ct[j * ldt + i] = i < m ? t->c2[i * t->ldc + j] : 7.0f;
        tm_pool *pool = pi < 0 ? NULL : t->pools[pi];
        if (res && mul)
            tm_sgemm_ct_mul(t->trans_a, t->trans_b, m, n, k, t->alpha, t->a, t->lda, t->b,
                            t->ldb, t->beta, ct, ldt, res, t->work, pool);
        else if (res)
            tm_sgemm_ct_add(t->trans_a, t->trans_b, m, n, k, t->alpha, t->a, t->lda, t->b,
                            t->ldb, t->beta, ct, ldt, res, t->work, pool);
        else
            tm_sgemm_ct(t->trans_a, t->trans_b, m, n, k, t->alpha, t->a, t->lda, t->b, t->ldb,
                        t->beta, ct, ldt, t->work, pool);
        double err = 0.0;
        int same = 1, kept = 1;
        for (int64_t j = 0; j < n; j++)
            for (int64_t i = 0; i < ldt; i++) {
                float got = ct[j * ldt + i];
                if (i >= m) {
                    kept &= got == 7.0f;
                    continue;
                }
                float want = t->c1[i * t->ldc + j];
                if (res && mul) want *= res[j * ldt + i];
                else if (res) want += res[j * ldt + i];
                same &= memcmp(&got, &want, sizeof got) == 0;
                double e = fabs((double)got - want) / (1.0 + sqrt((double)k));
                err = isnan(e) ? INFINITY : fmax(err, e);
            }
        check((exact ? same : err < 1e-5) && kept,
              "%s %lldx%lldx%lld trans %d/%d beta %g on %d threads: %s, error %g, padding %s",
              res ? mul ? "sgemm_ct_mul" : "sgemm_ct_add" : "sgemm_ct", (long long)m,
              (long long)n, (long long)k,
              t->trans_a, t->trans_b, t->beta, pi < 0 ? 1 : 3, same ? "same bits" : "other bits",
              err, kept ? "kept" : "written");
    }
    free(ct);
}

static void test_sgemm_shapes(void) {
    const sgemm_case cases[] = {
        {1, 1, 600}, {1, 768, 768}, {2, 70, 33}, {3, 129, 257}, {4, 16, 16}, {5, 17, 9},
        {6, 16, 256}, {7, 31, 255}, {12, 32, 1}, {13, 33, 2}, {25, 47, 513}, {64, 64, 64},
        {96, 100, 300}, {97, 65, 129}, {130, 50, 40}, {200, 37, 600}, {9, 4100, 3},
        {128, 384, 64}, {33, 3, 70}, {40, 1, 50},
        /* B as stored is read in place while A's depth block is at most 384 KB, packed
         * past it: both sides of that switch, one and two depth blocks */
        {256, 70, 384}, {257, 70, 384}, {300, 45, 400}, {520, 33, 200}};
    tm_pool *pools[2] = {tm_pool_create(2), tm_pool_create(3)};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int64_t m = cases[ci].m, n = cases[ci].n, k = cases[ci].k;
        int64_t pad = 3;   /* leading dims larger than the rows they hold */
        int64_t cells_a = (m > k ? m : k) * ((m > k ? m : k) + pad);
        int64_t cells_b = (n > k ? n : k) * ((n > k ? n : k) + pad);
        int64_t ldc = n + pad, cells_c = m * ldc;
        float *a = malloc((size_t)cells_a * sizeof *a), *b = malloc((size_t)cells_b * sizeof *b);
        float *c0 = malloc((size_t)cells_c * sizeof *c0), *c1 = malloc((size_t)cells_c * sizeof *c1);
        float *c2 = malloc((size_t)cells_c * sizeof *c2);
        for (int64_t i = 0; i < cells_a; i++) a[i] = (float)random_unit();
        for (int64_t i = 0; i < cells_b; i++) b[i] = (float)random_unit();
        for (int variant = 0; variant < 8; variant++) {
            int trans_a = variant & 1, trans_b = (variant >> 1) & 1, with_beta = variant >> 2;
            int64_t lda = (trans_a ? m : k) + pad, ldb = (trans_b ? k : n) + pad;
            float alpha = with_beta ? -0.75f : 1.0f, beta = with_beta ? 0.5f : 0.0f;
            void *work = malloc(tm_sgemm_scratch(trans_a, trans_b, m, n, k) + 1);
            for (int64_t i = 0; i < cells_c; i++) {
                float v = with_beta ? (float)random_unit() : NAN;
                c0[i] = c1[i] = c2[i] = v;
            }
            tm_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c1, ldc, work, NULL);
            tm_sgemm_reference(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c0, ldc);
            double worst = 0.0;
            int pad_kept = 1;
            for (int64_t i = 0; i < m; i++) {
                for (int64_t j = 0; j < n; j++) {
                    double e = fabs((double)c1[i * ldc + j] - c0[i * ldc + j]);
                    worst = isnan(e) ? INFINITY : fmax(worst, e / (1.0 + sqrt((double)k)));
                }
                for (int64_t j = n; j < ldc; j++)
                    pad_kept &= memcmp(&c1[i * ldc + j], &c2[i * ldc + j], sizeof(float)) == 0;
            }
            check(worst < 1e-5 && pad_kept, "sgemm %lldx%lldx%lld trans %d/%d beta %g: "
                  "error %g, padding %s", (long long)m, (long long)n, (long long)k, trans_a,
                  trans_b, beta, worst, pad_kept ? "kept" : "written");
            for (int pi = 0; pi < 2; pi++) {
                for (int64_t i = 0; i < cells_c; i++) c0[i] = c2[i];
                tm_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c0, ldc, work,
                         pools[pi]);
                check(memcmp(c0, c1, (size_t)cells_c * sizeof *c0) == 0,
                      "sgemm %lldx%lldx%lld trans %d/%d on %d threads differs from 1 thread",
                      (long long)m, (long long)n, (long long)k, trans_a, trans_b,
                      tm_pool_threads(pools[pi]));
            }
            /* C stored transposed (tm_sgemm_ct), on 1 and 3 threads: tm_sgemm's result
             * transposed, bit for bit where the packed path runs (past 3 rows and 512
             * flops; the plain loops' to rounding below), and C's padding kept; then with
             * a residual (tm_sgemm_ct_add): that result plus r, to the bit, r added after
             * the last depth block; and times r (tm_sgemm_ct_mul) likewise. */
            {
                ct_case cc = {trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c1, c2,
                              ldc, m + pad, work, pools};
                check_ct(&cc, NULL, 0);
                float *res = malloc((size_t)(n * cc.ldt) * sizeof *res);
                for (int64_t i = 0; i < n * cc.ldt; i++) res[i] = (float)random_unit();
                check_ct(&cc, res, 0);
                check_ct(&cc, res, 1);
                free(res);
            }
            /* B as stored, alpha 1, beta 0, with B's column sums (tm_sgemm_colsum): the
             * product tm_sgemm makes and B's rows added in order in double, both to the bit,
             * on 1 and 3 threads. */
            if (!trans_b && !with_beta) {
                double *want_s = calloc((size_t)n, sizeof *want_s), *got_s = calloc((size_t)n, sizeof *got_s);
                for (int64_t p = 0; p < k; p++)
                    for (int64_t j = 0; j < n; j++) want_s[j] += (double)b[p * ldb + j];
                for (int pi = -1; pi < 2; pi += 2) {
                    for (int64_t i = 0; i < cells_c; i++) c0[i] = c2[i];
                    memset(got_s, 0, (size_t)n * sizeof *got_s);
                    tm_sgemm_colsum(trans_a, m, n, k, a, lda, b, ldb, c0, ldc, got_s, work,
                                    pi < 0 ? NULL : pools[pi]);
                    check(memcmp(c0, c1, (size_t)cells_c * sizeof *c0) == 0 &&
                              memcmp(got_s, want_s, (size_t)n * sizeof *got_s) == 0,
                          "sgemm_colsum %lldx%lldx%lld trans %d on %d threads: product %s, "
                          "column sums %s", (long long)m, (long long)n, (long long)k, trans_a,
                          pi < 0 ? 1 : 3, memcmp(c0, c1, (size_t)cells_c * sizeof *c0) ? "differs" : "same",
                          memcmp(got_s, want_s, (size_t)n * sizeof *got_s) ? "differ" : "same");
                }
                free(want_s);
                free(got_s);
            }
            /* With a bias epilogue, on 1 and 3 threads: the product, then the bias added,
             * to the bit (each tile's after its last depth block); padding kept. */
            float *bias = malloc((size_t)n * sizeof *bias), *want_b = malloc((size_t)cells_c * sizeof *want_b);
            for (int64_t j = 0; j < n; j++) bias[j] = (float)random_unit();
            for (int64_t i = 0; i < cells_c; i++) want_b[i] = c1[i];
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) want_b[i * ldc + j] += bias[j];
            tm_sgemm_epilogue ep;
            memset(&ep, 0, sizeof ep);
            ep.bias = bias;
            for (int pi = -1; pi < 2; pi += 2) {
                for (int64_t i = 0; i < cells_c; i++) c0[i] = c2[i];
                tm_sgemm_ep(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c0, ldc, &ep,
                            work, pi < 0 ? NULL : pools[pi]);
                check(memcmp(c0, want_b, (size_t)cells_c * sizeof *c0) == 0,
                      "sgemm_ep %lldx%lldx%lld trans %d/%d beta %g: not the product plus the "
                      "bias", (long long)m, (long long)n, (long long)k, trans_a, trans_b, beta);
            }
            /* And times f after the bias (ep.mul, row stride ldc): (product + bias) f, to
             * the bit, on 1 and 3 threads. */
            float *f = malloc((size_t)cells_c * sizeof *f);
            for (int64_t i = 0; i < cells_c; i++) f[i] = (float)random_unit();
            for (int64_t i = 0; i < m; i++)
                for (int64_t j = 0; j < n; j++) want_b[i * ldc + j] *= f[i * ldc + j];
            ep.mul = f;
            ep.ldm = ldc;
            for (int pi = -1; pi < 2; pi += 2) {
                for (int64_t i = 0; i < cells_c; i++) c0[i] = c2[i];
                tm_sgemm_ep(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c0, ldc, &ep,
                            work, pi < 0 ? NULL : pools[pi]);
                int same = 1;
                for (int64_t i = 0; i < m; i++)
                    same &= memcmp(c0 + i * ldc, want_b + i * ldc, (size_t)n * sizeof *c0) == 0;
                check(same, "sgemm_ep %lldx%lldx%lld trans %d/%d beta %g: not (the product plus "
                      "the bias) times f", (long long)m, (long long)n, (long long)k, trans_a,
                      trans_b, beta);
            }
            free(f);
            free(bias);
            free(want_b);
            free(work);
        }
        free(a), free(b), free(c0), free(c1), free(c2);
    }
    tm_pool_free(pools[0]);
    tm_pool_free(pools[1]);
}

/* ---- Packed operands: tm_sgemm_bpacked and tm_sgemm_apacked ---------------------------- */

/* The activation callback the epilogue calls: a clipped ramp, any pure function will do. */
static void clip_activation(const void *arg, const float *x, float *y, int64_t n) {
    float hi = *(const float *)arg;
    for (int64_t i = 0; i < n; i++) y[i] = x[i] < 0.0f ? 0.0f : x[i] > hi ? hi : x[i];
}

/* Both packed paths, each epilogue part on and off, against a double-precision loop over
 * the unpacked operands; shapes cross tile, panel, depth and task boundaries; the results
 * on 2 and 3 threads must equal one thread's bit for bit, and the plain references
 * (TM_REFERENCE_KERNELS' path) must agree too. */
static void test_sgemm_packed(void) {
    const sgemm_case cases[] = {{1, 1, 1}, {1, 40, 7}, {4, 33, 300}, {12, 32, 256},
                                {13, 65, 257}, {37, 100, 600}, {128, 384, 384},
                                {130, 513, 65}, {25, 1030, 20}, {20, 70, 300}, {31, 96, 257},
                                /* around the column split of products of <= 48 rows */
                                {48, 70, 530}, {49, 40, 100}, {24, 300, 520},
                                /* around the panel-by-panel order of tasks of <= 132 rows
                                 * (and its prefetch of the next panel and block) */
                                {132, 70, 530}, {133, 40, 100}, {120, 300, 1030}, {60, 1030, 20}};
    tm_pool *pools[2] = {tm_pool_create(2), tm_pool_create(3)};
    float hi = 0.75f;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int64_t m = cases[ci].m, n = cases[ci].n, k = cases[ci].k, pad = 5;
        int64_t lda = k + pad, ldb = n + pad, ldc = n + pad;
        float *a = malloc((size_t)(m * lda) * sizeof *a), *b = malloc((size_t)(k * ldb) * sizeof *b);
        float *bias_c = malloc((size_t)n * sizeof *bias_c), *bias_r = malloc((size_t)m * sizeof *bias_r);
        float *res = malloc((size_t)(m * ldc) * sizeof *res);
        float *c[4];
        for (int i = 0; i < 4; i++) c[i] = malloc((size_t)(m * ldc) * sizeof *c[i]);
        for (int64_t i = 0; i < m * lda; i++) a[i] = (float)random_unit();
        for (int64_t i = 0; i < k * ldb; i++) b[i] = (float)random_unit();
        for (int64_t i = 0; i < n; i++) bias_c[i] = (float)random_unit();
        for (int64_t i = 0; i < m; i++) bias_r[i] = (float)random_unit();
        for (int64_t i = 0; i < m * ldc; i++) res[i] = (float)random_unit();
        int bp_panel, bp_depth, ap_panel, ap_depth;
        tm_sgemm_pack_layout(&bp_panel, &bp_depth);
        tm_sgemm_pack_a_layout(&ap_panel, &ap_depth);
        float *bp = malloc(tm_sgemm_packed_floats(n, k, bp_panel) * sizeof *bp);
        float *ap = malloc(tm_sgemm_packed_floats(m, k, ap_panel) * sizeof *ap);
        tm_sgemm_pack_b(0, n, k, b, ldb, bp_panel, bp_depth, bp);
        tm_sgemm_pack_a(0, m, k, a, lda, ap_panel, ap_depth, ap);
        size_t scratch_bytes = tm_sgemm_apacked_scratch(m, n, k);
        void *scratch = malloc(scratch_bytes + 1);
        for (int variant = 0; variant < 8; variant++) {
            int use_a = variant & 1, with_act = (variant >> 1) & 1, with_res = variant >> 2;
            tm_sgemm_epilogue ep = {.bias = use_a ? bias_r : bias_c, .bias_rows = use_a,
                                    .activation = with_act ? clip_activation : NULL,
                                    .activation_arg = &hi, .residual = with_res ? res : NULL,
                                    .ldr = ldc};
            for (int i = 0; i < 4; i++)
                for (int64_t j = 0; j < m * ldc; j++) c[i][j] = NAN;
            for (int t = 0; t < 3; t++) {
                tm_pool *pool = t ? pools[t - 1] : NULL;
                if (use_a)
                    tm_sgemm_apacked(m, n, k, ap, ap_panel, ap_depth, b, ldb, c[t], ldc, &ep,
                                     scratch, scratch_bytes, pool);
                else
                    tm_sgemm_bpacked(m, n, k, a, lda, bp, bp_panel, bp_depth, c[t], ldc, &ep, pool);
            }
            if (use_a)
                tm_sgemm_apacked_reference(m, n, k, ap, ap_panel, ap_depth, b, ldb, c[3], ldc, &ep);
            else
                tm_sgemm_bpacked_reference(m, n, k, a, lda, bp, bp_panel, bp_depth, c[3], ldc, &ep);
            double worst = 0.0;
            int same = 1, pad_kept = 1;
            for (int64_t i = 0; i < m; i++) {
                for (int64_t j = 0; j < n; j++) {
                    double want = 0.0;
                    for (int64_t p = 0; p < k; p++) want += (double)a[i * lda + p] * b[p * ldb + j];
                    want += use_a ? bias_r[i] : bias_c[j];
                    if (with_act) want = want < 0 ? 0 : want > hi ? hi : want;
                    if (with_res) want += res[i * ldc + j];
                    for (int t = 0; t < 4; t++) {
                        double e = fabs((double)c[t][i * ldc + j] - want) / (1.0 + sqrt((double)k));
                        worst = isnan(e) ? INFINITY : fmax(worst, e);
                    }
                    for (int t = 1; t < 3; t++)
                        same &= memcmp(&c[t][i * ldc + j], &c[0][i * ldc + j], sizeof(float)) == 0;
                }
                for (int64_t j = n; j < ldc; j++) pad_kept &= isnan(c[0][i * ldc + j]);
            }
            check(worst < 1e-5 && same && pad_kept,
                  "%s %lldx%lldx%lld activation %d residual %d: error %g, threads %s, padding %s",
                  use_a ? "sgemm_apacked" : "sgemm_bpacked", (long long)m, (long long)n,
                  (long long)k, with_act, with_res, worst, same ? "agree" : "DIFFER",
                  pad_kept ? "kept" : "written");
            /* tm_sgemm_ep on B as stored and on B transposed: either packing makes the
             * same panels, so the same sums and bits, on 1 and 3 threads. */
            if (!use_a && m > 3) {
                void *work = malloc(tm_sgemm_scratch(0, 0, m, n, k) + 1);
                void *work_t = malloc(tm_sgemm_scratch(0, 1, m, n, k) + 1);
                float *bt = malloc((size_t)(n * k) * sizeof *bt), *ct = malloc((size_t)(m * ldc) * sizeof *ct);
                for (int64_t p = 0; p < k; p++)
                    for (int64_t j = 0; j < n; j++) bt[j * k + p] = b[p * ldb + j];
                for (int t = 0; t < 2; t++) {
                    for (int64_t j = 0; j < m * ldc; j++) c[3][j] = ct[j] = NAN;
                    tm_sgemm_ep(0, 0, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c[3], ldc, &ep, work,
                                t ? pools[1] : NULL);
                    tm_sgemm_ep(0, 1, m, n, k, 1.0f, a, lda, bt, k, 0.0f, ct, ldc, &ep, work_t,
                                t ? pools[1] : NULL);
                    int bits = 1;
                    for (int64_t i = 0; i < m; i++) {
                        bits &= memcmp(&c[3][i * ldc], &ct[i * ldc], (size_t)n * sizeof(float)) == 0;
                        for (int64_t j = n; j < ldc; j++) bits &= isnan(c[3][i * ldc + j]);
                    }
                    check(bits, "sgemm_ep %lldx%lldx%lld activation %d residual %d on %d threads: "
                          "B as stored and B transposed differ", (long long)m, (long long)n,
                          (long long)k, with_act, with_res, t ? 3 : 1);
                }
                free(work), free(work_t), free(bt), free(ct);
            }
        }
        /* A column bias alone (written into each tile before the product when k fits one
         * depth block, else added by the epilogue): the product, then the bias, to the bit,
         * on 1 and 3 threads. */
        tm_sgemm_bpacked(m, n, k, a, lda, bp, bp_panel, bp_depth, c[0], ldc, NULL, NULL);
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) c[0][i * ldc + j] += bias_c[j];
        tm_sgemm_epilogue bias_only = {.bias = bias_c};
        for (int t = 1; t <= 2; t++) {   /* c[1] on one thread, c[2] on three */
            tm_sgemm_bpacked(m, n, k, a, lda, bp, bp_panel, bp_depth, c[t], ldc, &bias_only,
                             t == 1 ? NULL : pools[1]);
            int exact = 1;
            for (int64_t i = 0; i < m; i++)
                exact &= memcmp(&c[t][i * ldc], &c[0][i * ldc], (size_t)n * sizeof(float)) == 0;
            check(exact, "sgemm_bpacked %lldx%lldx%lld bias on %d threads: not the product "
                  "plus the bias", (long long)m, (long long)n, (long long)k, t == 1 ? 1 : 3);
        }
        /* act_out (a gradient plan's MATMUL_GELU): the activation (and residual) to a
         * second output, C left holding product plus bias; each to the bit what the
         * in-place epilogue and the bias-only product give, in tm_sgemm_ep (small and
         * packed paths) and tm_sgemm_bpacked, on 1 and 3 threads. */
        void *ep_scratch = malloc(tm_sgemm_scratch(0, 0, m, n, k) + 1);
        float *act = malloc((size_t)(m * ldc) * sizeof *act);
        for (int way = 0; way < 2; way++)
            for (int with_res = 0; with_res < 2; with_res++)
                for (int t = 1; t <= 2; t++) {
                    tm_pool *pool = t == 1 ? NULL : pools[1];
                    tm_sgemm_epilogue in_place = {.bias = bias_c, .activation = clip_activation,
                                                  .activation_arg = &hi,
                                                  .residual = with_res ? res : NULL, .ldr = ldc};
                    tm_sgemm_epilogue to_act = in_place, bias_alone = {.bias = bias_c};
                    to_act.act_out = act;
                    to_act.ld_act = ldc;
                    for (int64_t j = 0; j < m * ldc; j++) act[j] = NAN;
                    const tm_sgemm_epilogue *eps[3] = {&in_place, &bias_alone, &to_act};
                    for (int e = 0; e < 3; e++) {
                        if (way == 0)
                            tm_sgemm_ep(0, 0, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c[e], ldc, eps[e],
                                        ep_scratch, pool);
                        else
                            tm_sgemm_bpacked(m, n, k, a, lda, bp, bp_panel, bp_depth, c[e], ldc, eps[e],
                                             pool);
                    }
                    int act_same = 1, sum_same = 1, pad_kept = 1;
                    for (int64_t i = 0; i < m; i++) {
                        act_same &= memcmp(&act[i * ldc], &c[0][i * ldc], (size_t)n * sizeof(float)) == 0;
                        sum_same &= memcmp(&c[2][i * ldc], &c[1][i * ldc], (size_t)n * sizeof(float)) == 0;
                        for (int64_t j = n; j < ldc; j++) pad_kept &= isnan(act[i * ldc + j]);
                    }
                    check(act_same && sum_same && pad_kept,
                          "%s %lldx%lldx%lld act_out, residual %d, %d threads: activation %s, "
                          "sum %s, padding %s", way ? "sgemm_bpacked" : "sgemm_ep", (long long)m,
                          (long long)n, (long long)k, with_res, t == 1 ? 1 : 3,
                          act_same ? "as in place" : "DIFFERS", sum_same ? "kept" : "WRONG",
                          pad_kept ? "kept" : "written");
                }
        free(ep_scratch), free(act);
        free(a), free(b), free(bias_c), free(bias_r), free(res), free(bp), free(ap), free(scratch);
        for (int i = 0; i < 4; i++) free(c[i]);
    }
    tm_pool_free(pools[0]);
    tm_pool_free(pools[1]);
}


/* Every slice of a pool job runs exactly once, also when two threads share the pool. */
static void count_slice(void *arg, int ith, int nth) {
    int *seen = arg;
    __atomic_fetch_add(&seen[ith], 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&seen[8], nth, __ATOMIC_RELAXED);
}

/* The factor of tm_sgemm_ct_mul and of the epilogue's mul flushes subnormals: a sum, a
 * factor or a product below FLT_MIN in magnitude counts as a zero of its sign (GELU_GRAD's
 * vector kernel under FTZ and DAZ). Factors about FLT_MIN make about half the products
 * subnormal, and a few factors are subnormal themselves; packed and plain paths. */
static float flushed(float v) { return fabsf(v) < FLT_MIN ? copysignf(0.0f, v) : v; }

static void test_sgemm_mul_flush(void) {
    const sgemm_case cases[] = {{2, 5, 7}, {40, 70, 33}, {128, 96, 300}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int64_t m = cases[ci].m, n = cases[ci].n, k = cases[ci].k;
        float *a = malloc((size_t)(m * k) * sizeof *a), *b = malloc((size_t)(k * n) * sizeof *b);
        float *f = malloc((size_t)(m * n) * sizeof *f), *c = malloc((size_t)(m * n) * sizeof *c);
        float *got = malloc((size_t)(m * n) * sizeof *got);
        float *ct = malloc((size_t)(m * n) * sizeof *ct);
        for (int64_t i = 0; i < m * k; i++) a[i] = (float)random_unit();
        for (int64_t i = 0; i < k * n; i++) b[i] = (float)random_unit();
        for (int64_t i = 0; i < m * n; i++)
            f[i] = (float)random_unit() * (i % 7 == 3 ? 1e-39f : 2.0f * FLT_MIN);
        void *work = malloc(tm_sgemm_scratch(0, 0, m, n, k) + tm_sgemm_scratch(0, 1, n, m, k) + 64);
        tm_sgemm(0, 0, m, n, k, 1.0f, a, k, b, n, 0.0f, c, n, work, NULL);
        int tiny = 0;
        for (int64_t i = 0; i < m * n; i++) {
            float p = c[i] * f[i];
            tiny += p != 0.0f && fabsf(p) < FLT_MIN;
            c[i] = flushed(flushed(c[i]) * flushed(f[i]));
        }
        tm_sgemm_epilogue ep;
        memset(&ep, 0, sizeof ep);
        ep.mul = f;
        ep.ldm = n;
        tm_sgemm_ep(0, 0, m, n, k, 1.0f, a, k, b, n, 0.0f, got, n, &ep, work, NULL);
        check(tiny > 0 && !memcmp(got, c, (size_t)(m * n) * sizeof *c),
              "sgemm_ep %lldx%lldx%lld times a factor: subnormals not flushed (%d tiny products)",
              (long long)m, (long long)n, (long long)k, tiny);
        /* The product written transposed: C (n, m) of (b^T a^T), stored as (a b), times f
         * laid out as that C. */
        float *bt = malloc((size_t)(k * n) * sizeof *bt);
        for (int64_t p = 0; p < k; p++)
            for (int64_t j = 0; j < n; j++) bt[j * k + p] = b[p * n + j];
        tm_sgemm_ct_mul(0, 1, n, m, k, 1.0f, bt, k, a, k, 0.0f, ct, n, f, work, NULL);
        int same = 1;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++)
                same &= !memcmp(&ct[i * n + j], &c[i * n + j], sizeof *c);
        check(same, "sgemm_ct_mul %lldx%lldx%lld: subnormals not flushed as the epilogue's",
              (long long)n, (long long)m, (long long)k);
        free(bt);
        free(a), free(b), free(f), free(c), free(got), free(ct), free(work);
    }
}

static void test_pool_runs_every_slice(void) {
    tm_pool *pool = tm_pool_create(4);
    int seen[9] = {0};
    for (int r = 0; r < 1000; r++) tm_pool_run(pool, 0, count_slice, seen);
    int ok = 1;
    for (int i = 0; i < 4; i++) ok &= seen[i] == 1000;
    check(ok && seen[8] == 4 * 4 * 1000 && tm_pool_threads(pool) == 4,
          "pool: every slice once per job (%d %d %d %d)", seen[0], seen[1], seen[2], seen[3]);
    memset(seen, 0, sizeof seen);
    tm_pool_run(pool, 2, count_slice, seen);
    check(seen[0] == 1 && seen[1] == 1 && seen[2] == 0, "pool: max_threads limits the slices");
    tm_pool_free(pool);
    tm_pool_free(NULL);
    memset(seen, 0, sizeof seen);
    tm_pool_run(NULL, 0, count_slice, seen);
    check(seen[0] == 1 && seen[8] == 1, "pool: NULL runs the job on the caller");
}

/* ---- MATMUL -------------------------------------------------------------------------- */

/* want (batch..., m, n) with numpy broadcasting of batch dims; floats in double,
 * integers modulo 2^64. */
static void naive_matmul(tm_dtype dt, int rank, const int64_t *da, const double *a,
                         const int64_t *db, const double *b, int64_t *dout, double *want) {
    int64_t m = da[rank - 2], k = da[rank - 1], n = db[rank - 1];
    for (int d = 0; d < rank - 2; d++) dout[d] = da[d] == 1 ? db[d] : da[d];
    dout[rank - 2] = m;
    dout[rank - 1] = n;
    int64_t batch = numel(rank - 2, dout);
    for (int64_t t = 0; t < batch; t++) {
        int64_t rest = t, oa = 0, ob = 0, sa = 1, sb = 1;
        for (int d = rank - 3; d >= 0; d--) {
            int64_t i = rest % dout[d];
            rest /= dout[d];
            oa += (da[d] == 1 ? 0 : i) * sa;
            ob += (db[d] == 1 ? 0 : i) * sb;
            sa *= da[d];
            sb *= db[d];
        }
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double sum = 0.0;
                uint64_t isum = 0;
                for (int64_t p = 0; p < k; p++) {
                    double x = a[oa * m * k + i * k + p], y = b[ob * k * n + p * n + j];
                    sum += x * y;
                    isum += (uint64_t)(int64_t)x * (uint64_t)(int64_t)y;
                }
                want[(t * m + i) * n + j] = tm_dtype_is_float(dt) ? sum : wrap_to(dt, isum);
            }
    }
}

static void run_matmul(tm_dtype dt, int rank, const int64_t *da, const int64_t *db,
                       double scale, const char *name) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    double *a = random_values(dt, numel(rank, da), scale);
    double *b = random_values(dt, numel(rank, db), scale);
    tm_val in[2] = {make(&c, dt, rank, da, a), make(&c, dt, rank, db, b)};
    tm_val out = tm_prim(&c, TM_P_MATMUL, in, 2, NULL);
    int64_t dout[TM_MAX_RANK];
    int64_t batch = 1;
    for (int d = 0; d < rank - 2; d++) batch *= da[d] == 1 ? db[d] : da[d];
    double *want = malloc((size_t)(batch * da[rank - 2] * db[rank - 1] + 1) * sizeof *want);
    naive_matmul(dt, rank, da, a, db, b, dout, want);
    char label[160];
    snprintf(label, sizeof label, "matmul %s %s", tm_dtype_name(dt), name);
    expect_values(&c, out, rank, dout, want, tolerance(dt), label);
    free(a);
    free(b);
    free(want);
    tm_ctx_destroy(&c);
}

/* x (batch..., R, C) with its last two axes swapped, as MATMUL's transposed operands are
 * stored. */
static double *swap_last_two(int rank, const int64_t *d, const double *x, int64_t *dt) {
    int64_t rows = d[rank - 2], cols = d[rank - 1], batch = numel(rank - 2, d);
    double *y = malloc((size_t)(numel(rank, d) + 1) * sizeof *y);
    for (int i = 0; i < rank; i++) dt[i] = d[i];
    dt[rank - 2] = cols;
    dt[rank - 1] = rows;
    for (int64_t t = 0; t < batch; t++)
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = 0; j < cols; j++)
                y[t * rows * cols + j * rows + i] = x[t * rows * cols + i * cols + j];
    return y;
}

/* MATMUL with i[0] / i[1] set reads a / b stored transposed: the same product. */
static void run_matmul_transposed(tm_dtype dt, int rank, const int64_t *da, const int64_t *db,
                                  int ta, int tb, double scale, const char *name) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    double *a = random_values(dt, numel(rank, da), scale);
    double *b = random_values(dt, numel(rank, db), scale);
    int64_t sa[TM_MAX_RANK], sb[TM_MAX_RANK];
    double *at = swap_last_two(rank, da, a, sa), *bt = swap_last_two(rank, db, b, sb);
    if (!ta) memcpy(sa, da, (size_t)rank * sizeof *sa);
    if (!tb) memcpy(sb, db, (size_t)rank * sizeof *sb);
    tm_val in[2] = {make(&c, dt, rank, sa, ta ? at : a), make(&c, dt, rank, sb, tb ? bt : b)};
    tm_args args;
    memset(&args, 0, sizeof args);
    args.i[0] = ta;
    args.i[1] = tb;
    tm_val out = tm_prim(&c, TM_P_MATMUL, in, 2, &args);
    int64_t dout[TM_MAX_RANK], batch = 1;
    for (int d = 0; d < rank - 2; d++) batch *= da[d] == 1 ? db[d] : da[d];
    double *want = malloc((size_t)(batch * da[rank - 2] * db[rank - 1] + 1) * sizeof *want);
    naive_matmul(dt, rank, da, a, db, b, dout, want);
    char label[160];
    snprintf(label, sizeof label, "matmul %s %s, transposed a %d b %d", tm_dtype_name(dt), name,
             ta, tb);
    expect_values(&c, out, rank, dout, want, tolerance(dt), label);
    free(a);
    free(b);
    free(at);
    free(bt);
    free(want);
    tm_ctx_destroy(&c);
}

static void test_matmul_transposed(void) {
    const int64_t a2[] = {37, 53}, b2[] = {53, 29};
    const int64_t a3[] = {3, 4, 6}, b3[] = {1, 6, 5};
    const int64_t a4[] = {2, 1, 5, 7}, b4[] = {1, 3, 7, 4};
    tm_dtype dts[] = {TM_FLOAT, TM_DOUBLE, TM_FLOAT16, TM_INT32, TM_INT64, TM_INT8};
    double scales[] = {1.0, 1.0, 1.0, 3e9 / 2, 1e6, 127};
    for (size_t i = 0; i < sizeof dts / sizeof *dts; i++)
        for (int t = 1; t < 4; t++) {
            run_matmul_transposed(dts[i], 2, a2, b2, t & 1, t >> 1, scales[i], "2-D");
            run_matmul_transposed(dts[i], 3, a3, b3, t & 1, t >> 1, scales[i], "b broadcast");
            run_matmul_transposed(dts[i], 4, a4, b4, t & 1, t >> 1, scales[i], "broadcast");
        }
}

static void test_matmul(void) {
    const int64_t a2[] = {37, 53}, b2[] = {53, 29};
    run_matmul(TM_FLOAT, 2, a2, b2, 1.0, "2-D");
    const int64_t a4[] = {2, 1, 5, 7}, b4[] = {1, 3, 7, 4};
    run_matmul(TM_FLOAT, 4, a4, b4, 1.0, "broadcast both ways");
    const int64_t a3[] = {3, 4, 6}, b3[] = {1, 6, 5};
    run_matmul(TM_FLOAT, 3, a3, b3, 1.0, "b broadcast (folded batch)");
    const int64_t a3b[] = {1, 4, 6}, b3b[] = {3, 6, 5};
    run_matmul(TM_FLOAT, 3, a3b, b3b, 1.0, "a broadcast");
    const int64_t a3c[] = {2, 64, 48}, b3c[] = {2, 48, 40};
    run_matmul(TM_FLOAT, 3, a3c, b3c, 1.0, "batched");
    const int64_t a_k0[] = {3, 0}, b_k0[] = {0, 4};
    run_matmul(TM_FLOAT, 2, a_k0, b_k0, 1.0, "k=0 gives zeros");
    const int64_t a_m0[] = {2, 0, 3}, b_m0[] = {2, 3, 4};
    run_matmul(TM_FLOAT, 3, a_m0, b_m0, 1.0, "m=0");
    const int64_t a_b0[] = {0, 2, 3}, b_b0[] = {1, 3, 4};
    run_matmul(TM_FLOAT, 3, a_b0, b_b0, 1.0, "batch 0");
    const int64_t a_r8[] = {1, 2, 1, 1, 2, 1, 3, 2}, b_r8[] = {2, 1, 1, 2, 1, 1, 2, 3};
    run_matmul(TM_FLOAT, 8, a_r8, b_r8, 1.0, "rank 8");
    tm_dtype floats[] = {TM_DOUBLE, TM_FLOAT16, TM_BFLOAT16, TM_FLOAT8E4M3FN};
    for (size_t i = 0; i < sizeof floats / sizeof *floats; i++) {
        run_matmul(floats[i], 2, a2, b2, 1.0, "2-D");
        run_matmul(floats[i], 4, a4, b4, 1.0, "broadcast");
        run_matmul(floats[i], 3, a3, b3, 1.0, "folded batch");
    }
    /* Integers: large values so that sums wrap. */
    tm_dtype ints[] = {TM_INT32, TM_INT64, TM_INT8, TM_UINT8, TM_INT16, TM_UINT32, TM_INT4};
    double scales[] = {3e9 / 2, 1e6, 127, 255, 3e4, 4e9, 7};
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++) {
        run_matmul(ints[i], 2, a2, b2, scales[i] > 1e18 ? 1e18 : scales[i], "2-D");
        run_matmul(ints[i], 4, a4, b4, scales[i], "broadcast");
    }
}

static void test_matmul_int_wrap(void) {
    /* 2^20 * 2^20 * 4 = 2^42 wraps to 0 in int32; in int64 it is exact. */
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    const int64_t da[] = {1, 4}, db[] = {4, 1}, dout[] = {1, 1};
    double a[] = {1 << 20, 1 << 20, 1 << 20, 1 << 20}, b[] = {1 << 20, 1 << 20, 1 << 20, 1 << 20};
    double a2[4], b2[4];
    memcpy(a2, a, sizeof a);
    memcpy(b2, b, sizeof b);
    tm_val in32[2] = {make(&c, TM_INT32, 2, da, a), make(&c, TM_INT32, 2, db, b)};
    tm_val in64[2] = {make(&c, TM_INT64, 2, da, a2), make(&c, TM_INT64, 2, db, b2)};
    double zero = 0.0, big = 4398046511104.0;
    expect_values(&c, tm_prim(&c, TM_P_MATMUL, in32, 2, NULL), 2, dout, &zero, 0, "int32 wraps");
    expect_values(&c, tm_prim(&c, TM_P_MATMUL, in64, 2, NULL), 2, dout, &big, 0, "int64 exact");
    tm_ctx_destroy(&c);
}

static void matmul_error(tm_dtype da_type, int ra, const int64_t *da, tm_dtype db_type, int rb,
                         const int64_t *db, tm_status code, const char *needle) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_val in[2] = {tm_val_tensor(&c, tm_tensor_alloc(da_type, ra, da, NULL), 0),
                    tm_val_tensor(&c, tm_tensor_alloc(db_type, rb, db, NULL), 0)};
    tm_val out = tm_prim(&c, TM_P_MATMUL, in, 2, NULL);
    check(out == TM_NONE, "matmul error case '%s' succeeded", needle);
    expect_failure(&c, code, needle, "matmul error");
    tm_ctx_destroy(&c);
}

static void test_matmul_errors(void) {
    const int64_t d23[] = {2, 3}, d34[] = {3, 4}, d44[] = {4, 4}, d3[] = {3};
    const int64_t d234[] = {2, 3, 4}, d345[] = {3, 4, 5};
    matmul_error(TM_FLOAT, 2, d23, TM_DOUBLE, 2, d34, TM_ERR_DTYPE, "different dtypes");
    matmul_error(TM_FLOAT, 2, d23, TM_FLOAT, 2, d44, TM_ERR_SHAPE, "inner dims differ: (2, 3)");
    matmul_error(TM_FLOAT, 2, d23, TM_FLOAT, 1, d3, TM_ERR_SHAPE, "equal rank >= 2");
    matmul_error(TM_FLOAT, 3, d234, TM_FLOAT, 3, d345, TM_ERR_SHAPE, "batch dim 0 differs");
    matmul_error(TM_BOOL, 2, d23, TM_BOOL, 2, d34, TM_ERR_UNSUPPORTED, "bool");
    matmul_error(TM_STRING, 2, d23, TM_STRING, 2, d34, TM_ERR_UNSUPPORTED, "string");
    matmul_error(TM_FLOAT, 2, d23, TM_STRING, 2, d34, TM_ERR_UNSUPPORTED, "string");
}

/* ---- CONV and CONV_TRANSPOSE --------------------------------------------------------- */

typedef struct conv_case {
    int n;
    int64_t group;
    int64_t stride[6], pad_begin[6], pad_end[6], dilation[6], out_pad[6];
} conv_case;

static void conv_args(const conv_case *cc, int transpose, tm_args *a) {
    memset(a, 0, sizeof *a);
    int n = cc->n;
    a->i[0] = n;
    a->i[1] = cc->group;
    for (int d = 0; d < n; d++) {
        a->i[2 + d] = cc->stride[d] ? cc->stride[d] : 1;
        a->i[2 + n + d] = cc->pad_begin[d];
        a->i[2 + 2 * n + d] = cc->pad_end[d];
        a->i[2 + 3 * n + d] = cc->dilation[d] ? cc->dilation[d] : 1;
        if (transpose) a->i[2 + 4 * n + d] = cc->out_pad[d];
    }
}

static int64_t arg_stride(const conv_case *cc, int d) { return cc->stride[d] ? cc->stride[d] : 1; }
static int64_t arg_dilation(const conv_case *cc, int d) { return cc->dilation[d] ? cc->dilation[d] : 1; }

/* Flat index of a multi-index over dims. */
static int64_t flat_of(int n, const int64_t *dims, const int64_t *index) {
    int64_t f = 0;
    for (int d = 0; d < n; d++) f = f * dims[d] + index[d];
    return f;
}

static void index_of(int n, const int64_t *dims, int64_t flat, int64_t *index) {
    for (int d = n - 1; d >= 0; d--) {
        index[d] = flat % dims[d];
        flat /= dims[d];
    }
}

/* y = conv(x, w) + bias in double, as the ONNX spec describes it (gather form). */
static void naive_conv(const conv_case *cc, const int64_t *dx, const double *x,
                       const int64_t *dw, const double *w, const double *bias, int64_t *dy,
                       double *y, int is_int) {
    int n = cc->n;
    int64_t channels_per_group = dx[1] / cc->group, out_per_group = dw[0] / cc->group;
    dy[0] = dx[0];
    dy[1] = dw[0];
    for (int d = 0; d < n; d++)
        dy[2 + d] = (dx[2 + d] + cc->pad_begin[d] + cc->pad_end[d]
                     - (dw[2 + d] - 1) * arg_dilation(cc, d) - 1) / arg_stride(cc, d) + 1;
    int64_t total = numel(n + 2, dy), kernel = numel(n, dw + 2);
    for (int64_t f = 0; f < total; f++) {
        int64_t idx[8], k[8], s[8];
        index_of(n + 2, dy, f, idx);
        int64_t b = idx[0], m = idx[1], g = m / out_per_group;
        double sum = bias ? bias[m] : 0.0;
        uint64_t isum = bias ? (uint64_t)(int64_t)bias[m] : 0;
        for (int64_t c = 0; c < channels_per_group; c++)
            for (int64_t kf = 0; kf < kernel; kf++) {
                index_of(n, dw + 2, kf, k);
                int inside = 1;
                for (int d = 0; d < n; d++) {
                    s[d] = idx[2 + d] * arg_stride(cc, d) - cc->pad_begin[d] + k[d] * arg_dilation(cc, d);
                    inside &= s[d] >= 0 && s[d] < dx[2 + d];
                }
                if (!inside) continue;
                double xv = x[(b * dx[1] + g * channels_per_group + c) * numel(n, dx + 2)
                              + flat_of(n, dx + 2, s)];
                double wv = w[(m * channels_per_group + c) * kernel + kf];
                sum += xv * wv;
                isum += (uint64_t)(int64_t)xv * (uint64_t)(int64_t)wv;
            }
        y[f] = is_int ? (double)(int64_t)isum : sum;
    }
}

/* y = conv_transpose(x, w) + bias in double, in scatter form (each input point spreads
 * over the output). */
static void naive_conv_transpose(const conv_case *cc, const int64_t *dx, const double *x,
                                 const int64_t *dw, const double *w, const double *bias,
                                 int64_t *dy, double *y) {
    int n = cc->n;
    int64_t channels_per_group = dx[1] / cc->group, out_per_group = dw[1];
    dy[0] = dx[0];
    dy[1] = dw[1] * cc->group;
    for (int d = 0; d < n; d++)
        dy[2 + d] = arg_stride(cc, d) * (dx[2 + d] - 1) + cc->out_pad[d]
                    + (dw[2 + d] - 1) * arg_dilation(cc, d) + 1 - cc->pad_begin[d] - cc->pad_end[d];
    int64_t total_y = numel(n + 2, dy), total_x = numel(n + 2, dx), kernel = numel(n, dw + 2);
    int64_t plane_y = numel(n, dy + 2);
    for (int64_t f = 0; f < total_y; f++) y[f] = bias ? bias[(f / plane_y) % dy[1]] : 0.0;
    for (int64_t f = 0; f < total_x; f++) {
        int64_t idx[8], k[8], o[8];
        index_of(n + 2, dx, f, idx);
        int64_t b = idx[0], ci = idx[1], g = ci / channels_per_group;
        for (int64_t mm = 0; mm < out_per_group; mm++)
            for (int64_t kf = 0; kf < kernel; kf++) {
                index_of(n, dw + 2, kf, k);
                int inside = 1;
                for (int d = 0; d < n; d++) {
                    o[d] = idx[2 + d] * arg_stride(cc, d) - cc->pad_begin[d] + k[d] * arg_dilation(cc, d);
                    inside &= o[d] >= 0 && o[d] < dy[2 + d];
                }
                if (!inside) continue;
                int64_t m = g * out_per_group + mm;
                y[(b * dy[1] + m) * plane_y + flat_of(n, dy + 2, o)] +=
                    x[f] * w[(ci * out_per_group + mm) * kernel + kf];
            }
    }
}

static void run_conv(tm_dtype dt, int transpose, const conv_case *cc, const int64_t *dx,
                     const int64_t *dw, int with_bias, const char *name) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    int rank = cc->n + 2;
    int is_int = !tm_dtype_is_float(dt);
    double scale = is_int ? 5 : 1.0;
    int64_t channels = transpose ? dw[1] * cc->group : dw[0];
    double *x = random_values(dt, numel(rank, dx), scale);
    double *w = random_values(dt, numel(rank, dw), scale);
    double *bias = with_bias ? random_values(dt, channels, scale) : NULL;
    tm_val in[3] = {make(&c, dt, rank, dx, x), make(&c, dt, rank, dw, w), TM_NONE};
    if (with_bias) in[2] = make(&c, dt, 1, &channels, bias);
    tm_args a;
    conv_args(cc, transpose, &a);
    tm_val out = tm_prim(&c, transpose ? TM_P_CONV_TRANSPOSE : TM_P_CONV, in, 2 + with_bias, &a);
    int64_t dy[8];
    /* Generous bound on the output size for the expectation buffer. */
    int64_t cap = channels * dx[0];
    for (int d = 0; d < cc->n; d++)
        cap *= (dx[2 + d] + 2) * arg_stride(cc, d) + dw[2 + d] * arg_dilation(cc, d)
               + cc->out_pad[d] + cc->pad_begin[d] + cc->pad_end[d] + 2;
    double *want = calloc((size_t)cap + 1, sizeof *want);
    if (transpose) naive_conv_transpose(cc, dx, x, dw, w, bias, dy, want);
    else naive_conv(cc, dx, x, dw, w, bias, dy, want, is_int);
    if (is_int)
        for (int64_t i = 0; i < numel(rank, dy); i++) want[i] = wrap_to(dt, (uint64_t)(int64_t)want[i]);
    char label[200];
    snprintf(label, sizeof label, "%s %s %s", transpose ? "conv_transpose" : "conv",
             tm_dtype_name(dt), name);
    /* f32 sums of hundreds of terms: a little more room than a single rounding. */
    double tol = dt == TM_FLOAT ? 1e-4 : tolerance(dt);
    expect_values(&c, out, rank, dy, want, tol, label);
    free(x);
    free(w);
    free(bias);
    free(want);
    tm_ctx_destroy(&c);
}

static void test_conv(void) {
    tm_dtype dts[] = {TM_FLOAT, TM_DOUBLE, TM_FLOAT16, TM_BFLOAT16, TM_INT32};
    for (size_t i = 0; i < sizeof dts / sizeof *dts; i++) {
        tm_dtype dt = dts[i];
        conv_case c2 = {2, 2, {2, 1}, {1, 0}, {2, 1}, {1, 2}, {0}};
        const int64_t x2[] = {2, 4, 7, 6}, w2[] = {6, 2, 3, 2};
        run_conv(dt, 0, &c2, x2, w2, 1, "2-D group 2, strides, pads, dilations, bias");
        conv_case c1 = {1, 1, {2}, {1}, {2}, {1}, {0}};
        const int64_t x1[] = {1, 3, 10}, w1[] = {2, 3, 3};
        run_conv(dt, 0, &c1, x1, w1, 0, "1-D");
        conv_case c3 = {3, 1, {1, 2, 1}, {1, 0, 1}, {0, 1, 1}, {2, 1, 1}, {0}};
        const int64_t x3[] = {1, 2, 5, 4, 3}, w3[] = {3, 2, 2, 3, 2};
        run_conv(dt, 0, &c3, x3, w3, 1, "3-D");
    }
    conv_case pw = {2, 1, {1, 1}, {0}, {0}, {1, 1}, {0}};
    const int64_t xp[] = {2, 8, 5, 5}, wp[] = {4, 8, 1, 1};
    run_conv(TM_FLOAT, 0, &pw, xp, wp, 1, "pointwise 1x1");
    conv_case dw = {2, 4, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {0}};
    const int64_t xd[] = {1, 4, 6, 6}, wd[] = {8, 1, 3, 3};
    run_conv(TM_FLOAT, 0, &dw, xd, wd, 1, "depthwise (group = channels)");
    conv_case c4 = {4, 1, {1, 1, 1, 2}, {0, 1, 0, 0}, {0, 0, 1, 0}, {1, 1, 1, 1}, {0}};
    const int64_t x4[] = {1, 2, 3, 3, 3, 4}, w4[] = {2, 2, 2, 2, 1, 2};
    run_conv(TM_FLOAT, 0, &c4, x4, w4, 0, "4-D");
    /* Negative pads crop the input. */
    conv_case crop = {2, 1, {1, 1}, {-1, 0}, {0, -1}, {1, 1}, {0}};
    const int64_t xc[] = {1, 2, 6, 6}, wc[] = {3, 2, 2, 2};
    run_conv(TM_FLOAT, 0, &crop, xc, wc, 1, "negative pads");
    /* Large enough to need several column tiles of scratch. */
    conv_case big = {2, 1, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {0}};
    const int64_t xb[] = {1, 64, 64, 64}, wb[] = {3, 64, 3, 3};
    run_conv(TM_FLOAT, 0, &big, xb, wb, 1, "tiled im2col");
    conv_case e = {2, 1, {1, 1}, {0}, {0}, {1, 1}, {0}};
    const int64_t xe[] = {0, 2, 4, 4}, we[] = {3, 2, 2, 2};
    run_conv(TM_FLOAT, 0, &e, xe, we, 1, "batch 0");
    const int64_t xe2[] = {2, 0, 4, 4}, we2[] = {3, 0, 2, 2};
    run_conv(TM_FLOAT, 0, &e, xe2, we2, 1, "0 input channels gives the bias");
}

static void test_conv_transpose(void) {
    tm_dtype dts[] = {TM_FLOAT, TM_DOUBLE, TM_FLOAT16};
    for (size_t i = 0; i < sizeof dts / sizeof *dts; i++) {
        tm_dtype dt = dts[i];
        conv_case c2 = {2, 2, {2, 3}, {1, 0}, {0, 2}, {1, 2}, {1, 1}};
        const int64_t x2[] = {2, 4, 3, 4}, w2[] = {4, 3, 3, 2};
        run_conv(dt, 1, &c2, x2, w2, 1, "2-D group 2, strides, pads, dilations, output_padding");
        conv_case c1 = {1, 1, {1}, {0}, {0}, {1}, {0}};
        const int64_t x1[] = {1, 1, 3}, w1[] = {1, 2, 3};
        run_conv(dt, 1, &c1, x1, w1, 0, "1-D");
        conv_case c3 = {3, 1, {2, 1, 2}, {1, 0, 0}, {0, 1, 1}, {1, 2, 1}, {1, 0, 0}};
        const int64_t x3[] = {1, 2, 3, 4, 2}, w3[] = {2, 2, 2, 2, 3};
        run_conv(dt, 1, &c3, x3, w3, 1, "3-D");
    }
    conv_case pw = {2, 1, {1, 1}, {0}, {0}, {1, 1}, {0}};
    const int64_t xp[] = {2, 8, 5, 5}, wp[] = {8, 4, 1, 1};
    run_conv(TM_FLOAT, 1, &pw, xp, wp, 1, "pointwise 1x1");
    conv_case neg = {2, 1, {3, 2}, {0, 0}, {-1, 0}, {1, 1}, {0}};
    const int64_t xn[] = {1, 1, 3, 3}, wn[] = {1, 2, 3, 3};
    run_conv(TM_FLOAT, 1, &neg, xn, wn, 0, "negative end pad (output_shape larger)");
    conv_case big = {2, 1, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 1}};
    const int64_t xb[] = {1, 4, 70, 70}, wb[] = {4, 128, 3, 3};
    run_conv(TM_FLOAT, 1, &big, xb, wb, 1, "tiled col2im");
}

static void conv_error(int transpose, int rank_x, const int64_t *dx, int rank_w,
                       const int64_t *dw, const conv_case *cc, int64_t bias_len,
                       tm_status code, const char *needle) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_val in[3] = {tm_val_tensor(&c, tm_tensor_alloc(TM_FLOAT, rank_x, dx, NULL), 0),
                    tm_val_tensor(&c, tm_tensor_alloc(TM_FLOAT, rank_w, dw, NULL), 0), TM_NONE};
    if (bias_len >= 0) in[2] = tm_val_tensor(&c, tm_tensor_alloc(TM_FLOAT, 1, &bias_len, NULL), 0);
    tm_args a;
    conv_args(cc, transpose, &a);
    tm_val out = tm_prim(&c, transpose ? TM_P_CONV_TRANSPOSE : TM_P_CONV, in,
                         bias_len >= 0 ? 3 : 2, &a);
    check(out == TM_NONE, "conv error case '%s' succeeded", needle);
    expect_failure(&c, code, needle, "conv error");
    tm_ctx_destroy(&c);
}

static void test_conv_errors(void) {
    conv_case g3 = {2, 3, {1, 1}, {0}, {0}, {1, 1}, {0}};
    conv_case g1 = {2, 1, {1, 1}, {0}, {0}, {1, 1}, {0}};
    conv_case zero_stride = {2, 1, {1, 0}, {0}, {0}, {1, 1}, {0}};
    zero_stride.stride[1] = 0;
    const int64_t x[] = {1, 4, 5, 5}, w[] = {2, 4, 3, 3}, w_big[] = {2, 4, 7, 3};
    const int64_t w_bad[] = {2, 3, 3, 3}, x3[] = {1, 4, 5};
    conv_error(0, 4, x, 4, w, &g3, -1, TM_ERR_SHAPE, "group 3 does not divide");
    conv_error(0, 4, x, 4, w_bad, &g1, -1, TM_ERR_SHAPE, "weights (2, 3, 3, 3) do not fit");
    conv_error(0, 4, x, 4, w_big, &g1, -1, TM_ERR_SHAPE, "leaves no output");
    conv_error(0, 4, x, 4, w, &g1, 3, TM_ERR_SHAPE, "bias (3) must be (2)");
    conv_error(0, 3, x3, 4, w, &g1, -1, TM_ERR_SHAPE, "must both have rank 4");
    /* A stride of 0 would divide by zero. */
    tm_args a;
    conv_args(&g1, 0, &a);
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    a.i[3] = 0;
    tm_val in[2] = {tm_val_tensor(&c, tm_tensor_alloc(TM_FLOAT, 4, x, NULL), 0),
                    tm_val_tensor(&c, tm_tensor_alloc(TM_FLOAT, 4, w, NULL), 0)};
    check(tm_prim(&c, TM_P_CONV, in, 2, &a) == TM_NONE, "conv with stride 0 succeeded");
    expect_failure(&c, TM_ERR_SHAPE, "stride 0", "conv stride 0");
    tm_ctx_destroy(&c);
    const int64_t wt[] = {3, 2, 3, 3};
    conv_error(1, 4, x, 4, wt, &g1, -1, TM_ERR_SHAPE, "must have 4 input channels");
    (void)zero_stride;
}

/* ---- POOL ----------------------------------------------------------------------------- */

typedef struct pool_case {
    int n, kind, count_include_pad, ceil_mode, p, column_major;
    int64_t kernel[6], stride[6], pad_begin[6], pad_end[6], dilation[6];
} pool_case;

static void pool_args(const pool_case *pc, tm_args *a) {
    memset(a, 0, sizeof *a);
    int n = pc->n;
    a->i[0] = n;
    a->i[1] = pc->kind;
    a->i[2] = pc->count_include_pad;
    a->i[3] = pc->ceil_mode;
    a->i[4] = pc->p;
    for (int d = 0; d < n; d++) {
        a->i[5 + d] = pc->kernel[d];
        a->i[5 + n + d] = pc->stride[d] ? pc->stride[d] : 1;
        a->i[5 + 2 * n + d] = pc->pad_begin[d];
        a->i[5 + 3 * n + d] = pc->pad_end[d];
        a->i[5 + 4 * n + d] = pc->dilation[d] ? pc->dilation[d] : 1;
    }
    a->i[5 + 5 * n] = pc->column_major;
}

/* Pooling as the ONNX reference describes it: every tap of every window is looked at. */
static void naive_pool(const pool_case *pc, const int64_t *dx, const double *x, int64_t *dy,
                       double *y, double *indices) {
    int n = pc->n;
    dy[0] = dx[0];
    dy[1] = dx[1];
    for (int d = 0; d < n; d++) {
        int64_t s = pc->stride[d] ? pc->stride[d] : 1, dil = pc->dilation[d] ? pc->dilation[d] : 1;
        int64_t span = dx[2 + d] + pc->pad_begin[d] + pc->pad_end[d] - (pc->kernel[d] - 1) * dil - 1;
        int64_t out = pc->ceil_mode ? (int64_t)ceil((double)span / (double)s) + 1 : span / s + 1;
        if (pc->ceil_mode && (out - 1) * s >= dx[2 + d] + pc->pad_begin[d]) out--;
        dy[2 + d] = out;
    }
    int64_t total = numel(n + 2, dy), kernel = numel(n, pc->kernel), plane = numel(n, dx + 2);
    for (int64_t f = 0; f < total; f++) {
        int64_t idx[8], k[8], pos[8];
        index_of(n + 2, dy, f, idx);
        int64_t channel_plane = idx[0] * dx[1] + idx[1];
        double best = -INFINITY, sum = 0.0;
        int64_t best_at = -1, in_input = 0, in_padded = 0;
        for (int64_t kf = 0; kf < kernel; kf++) {
            index_of(n, pc->kernel, kf, k);
            int inside = 1, padded = 1;
            for (int d = 0; d < n; d++) {
                int64_t s = pc->stride[d] ? pc->stride[d] : 1, dil = pc->dilation[d] ? pc->dilation[d] : 1;
                pos[d] = idx[2 + d] * s - pc->pad_begin[d] + k[d] * dil;
                inside &= pos[d] >= 0 && pos[d] < dx[2 + d];
                padded &= pos[d] >= -pc->pad_begin[d] && pos[d] < dx[2 + d] + pc->pad_end[d];
            }
            in_padded += padded;
            if (!inside) continue;
            in_input++;
            int64_t at = flat_of(n, dx + 2, pos);
            double v = x[channel_plane * plane + at];
            if (v > best || best_at < 0) {
                if (v > best) best = v;
                if (best == v) best_at = at;
            }
            sum += pc->kind == 1 ? v : pow(fabs(v), pc->p);
        }
        if (pc->kind == 0) y[f] = best;
        else if (pc->kind == 1) y[f] = sum / (double)(pc->count_include_pad ? in_padded : in_input);
        else y[f] = pow(sum, 1.0 / pc->p);
        if (indices) {
            int64_t at = best_at;
            if (pc->column_major) {
                index_of(n, dx + 2, best_at, pos);
                at = 0;
                for (int d = n - 1; d >= 0; d--) at = at * dx[2 + d] + pos[d];
            }
            indices[f] = (double)(channel_plane * plane + at);
        }
    }
}

static void run_pool(tm_dtype dt, const pool_case *pc, const int64_t *dx, int with_indices,
                     const char *name) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    int rank = pc->n + 2;
    double *x = random_values(dt, numel(rank, dx), tm_dtype_is_float(dt) ? 1.0 : 100.0);
    tm_val in = make(&c, dt, rank, dx, x);
    tm_args a;
    pool_args(pc, &a);
    tm_val out[2] = {TM_NONE, TM_NONE};
    if (with_indices) tm_prim_n(&c, TM_P_MAXPOOL_INDICES, &in, 1, &a, out, 2);
    else out[0] = tm_prim(&c, TM_P_POOL, &in, 1, &a);
    int64_t dy[8], cap = numel(rank, dx) * 4 + 64;
    for (int d = 0; d < pc->n; d++) cap *= 2;
    double *want = calloc((size_t)cap, sizeof *want), *want_idx = calloc((size_t)cap, sizeof *want);
    naive_pool(pc, dx, x, dy, want, want_idx);
    char label[200];
    snprintf(label, sizeof label, "pool %s %s", tm_dtype_name(dt), name);
    expect_values(&c, out[0], rank, dy, want, tolerance(dt), label);
    if (with_indices) {
        strcat(label, " indices");
        expect_values(&c, out[1], rank, dy, want_idx, 0.0, label);
    }
    free(x);
    free(want);
    free(want_idx);
    tm_ctx_destroy(&c);
}

static void test_pool(void) {
    const int64_t x2[] = {2, 3, 9, 8};
    pool_case max2 = {2, 0, 0, 0, 0, 0, {3, 2}, {2, 1}, {1, 0}, {1, 1}, {1, 2}};
    pool_case avg2 = {2, 1, 0, 0, 0, 0, {3, 3}, {2, 2}, {1, 1}, {2, 1}, {1, 1}};
    tm_dtype floats[] = {TM_FLOAT, TM_DOUBLE, TM_FLOAT16, TM_BFLOAT16};
    for (size_t i = 0; i < sizeof floats / sizeof *floats; i++) {
        for (int ceil_mode = 0; ceil_mode < 2; ceil_mode++) {
            pool_case m = max2, av = avg2, lp = avg2;
            m.ceil_mode = av.ceil_mode = lp.ceil_mode = ceil_mode;
            run_pool(floats[i], &m, x2, 0, ceil_mode ? "max 2-D ceil" : "max 2-D");
            run_pool(floats[i], &av, x2, 0, ceil_mode ? "average ceil" : "average");
            av.count_include_pad = 1;
            run_pool(floats[i], &av, x2, 0, ceil_mode ? "average count pad ceil" : "average count pad");
            lp.kind = 2;
            lp.p = 2;
            run_pool(floats[i], &lp, x2, 0, "lp p=2");
            lp.p = 3;
            run_pool(floats[i], &lp, x2, 0, "lp p=3");
        }
    }
    /* windows all inside the input (the f32 fast path): PP-OCR's recognizer head (3 x 2,
     * stride 3 x 2), overlapping ones, one that leaves the last column out, and ones whose
     * end padding no window reaches (count_include_pad then counts the same) */
    const int64_t xr[] = {2, 5, 3, 13}, xo[] = {1, 3, 7, 9};
    pool_case inside[] = {{2, 1, 0, 0, 0, 0, {3, 2}, {3, 2}, {0, 0}, {0, 0}, {1, 1}},
                          {2, 1, 1, 0, 0, 0, {2, 3}, {1, 2}, {0, 0}, {0, 0}, {1, 1}},
                          {2, 1, 1, 0, 0, 0, {3, 3}, {2, 3}, {0, 0}, {0, 1}, {1, 1}},
                          {2, 1, 0, 1, 0, 0, {1, 1}, {1, 1}, {0, 0}, {0, 0}, {1, 1}}};
    run_pool(TM_FLOAT, &inside[0], xr, 0, "average inside 3x2");
    run_pool(TM_FLOAT, &inside[1], xo, 0, "average inside overlapping");
    run_pool(TM_FLOAT, &inside[2], xo, 0, "average inside, unreached end pad");
    run_pool(TM_FLOAT, &inside[3], xo, 0, "average inside 1x1 ceil");
    pool_case dil = {2, 1, 1, 1, 0, 0, {2, 3}, {3, 2}, {1, 2}, {1, 1}, {2, 2}};
    run_pool(TM_FLOAT, &dil, x2, 0, "average dilated ceil count pad");
    const int64_t x1[] = {1, 2, 11};
    pool_case m1 = {1, 0, 0, 1, 0, 0, {3}, {2}, {1}, {1}, {1}};
    run_pool(TM_FLOAT, &m1, x1, 0, "max 1-D");
    const int64_t x3[] = {1, 2, 5, 6, 4};
    pool_case a3 = {3, 1, 0, 1, 0, 0, {2, 3, 2}, {2, 2, 1}, {0, 1, 1}, {1, 1, 0}, {2, 1, 1}};
    run_pool(TM_FLOAT, &a3, x3, 0, "average 3-D");
    a3.count_include_pad = 1;
    run_pool(TM_FLOAT, &a3, x3, 0, "average 3-D count pad");
    tm_dtype ints[] = {TM_INT8, TM_UINT8, TM_INT32, TM_INT64};
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
        run_pool(ints[i], &max2, x2, 0, "max 2-D");
    run_pool(TM_FLOAT, &max2, x2, 1, "max 2-D with indices");
    pool_case col = max2;
    col.column_major = 1;
    run_pool(TM_FLOAT, &col, x2, 1, "max 2-D with column-major indices");
    run_pool(TM_FLOAT, &a3, x3, 0, "average 3-D");
    pool_case m3 = a3;
    m3.kind = 0;
    m3.column_major = 1;
    run_pool(TM_DOUBLE, &m3, x3, 1, "max 3-D column-major indices");
    const int64_t x0[] = {0, 3, 4, 4};
    run_pool(TM_FLOAT, &max2, x0, 1, "batch 0");
}

static void pool_error(tm_dtype dt, const pool_case *pc, int rank, const int64_t *dx,
                       tm_status code, const char *needle) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_val in = tm_val_tensor(&c, tm_tensor_alloc(dt, rank, dx, NULL), 0);
    tm_args a;
    pool_args(pc, &a);
    check(tm_prim(&c, TM_P_POOL, &in, 1, &a) == TM_NONE, "pool error '%s' succeeded", needle);
    expect_failure(&c, code, needle, "pool error");
    tm_ctx_destroy(&c);
}

static void test_pool_errors(void) {
    const int64_t x[] = {1, 1, 4, 4}, x3[] = {1, 4, 4};
    pool_case avg = {2, 1, 0, 0, 0, 0, {2, 2}, {1, 1}, {0}, {0}, {1, 1}};
    pool_case big = {2, 0, 0, 0, 0, 0, {5, 2}, {1, 1}, {0}, {0}, {1, 1}};
    pool_case lp0 = {2, 2, 0, 0, 0, 0, {2, 2}, {1, 1}, {0}, {0}, {1, 1}};
    pool_case neg = {2, 0, 0, 0, 0, 0, {2, 2}, {1, 1}, {-1, 0}, {0}, {1, 1}};
    pool_error(TM_INT32, &avg, 4, x, TM_ERR_UNSUPPORTED, "average pooling of int32");
    pool_error(TM_FLOAT, &big, 4, x, TM_ERR_SHAPE, "larger than input (1, 1, 4, 4)");
    pool_error(TM_FLOAT, &lp0, 4, x, TM_ERR_UNSUPPORTED, "p >= 1");
    pool_error(TM_FLOAT, &neg, 4, x, TM_ERR_SHAPE, "pads -1/0");
    pool_error(TM_FLOAT, &avg, 3, x3, TM_ERR_SHAPE, "does not fit input (1, 4, 4)");
    pool_error(TM_STRING, &big, 4, x, TM_ERR_UNSUPPORTED, "string");
}

/* ---- Trace mode: shape rules run without data ---------------------------------------- */

static void expect_dims(tm_ctx *c, tm_val v, tm_dtype dt, int rank, const int64_t *dims,
                        const char *name) {
    int ok = tm_ctx_ok(c) && v != TM_NONE && tm_vdata(c, v) == NULL && tm_vdtype(c, v) == dt
             && tm_vrank(c, v) == rank;
    for (int d = 0; ok && d < rank; d++) ok = tm_vdims(c, v)[d] == dims[d];
    check(ok, "trace %s: wrong symbolic result (%s)", name, c->err.message);
}

static void test_trace_shapes(void) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_TRACE, NULL);
    const int64_t da[] = {2, 1, 5, 7}, db[] = {1, 3, 7, 4}, dab[] = {2, 3, 5, 4};
    tm_val mm[2] = {tm_val_symbolic(&c, TM_FLOAT16, 4, da, 0), tm_val_symbolic(&c, TM_FLOAT16, 4, db, 1)};
    expect_dims(&c, tm_prim(&c, TM_P_MATMUL, mm, 2, NULL), TM_FLOAT16, 4, dab, "matmul");
    conv_case cc = {2, 1, {2, 2}, {1, 1}, {1, 1}, {1, 1}, {1, 1}};
    tm_args a;
    conv_args(&cc, 0, &a);
    const int64_t dx[] = {1, 3, 8, 8}, dw[] = {4, 3, 3, 3}, dy[] = {1, 4, 4, 4};
    tm_val cv[2] = {tm_val_symbolic(&c, TM_FLOAT, 4, dx, 2), tm_val_symbolic(&c, TM_FLOAT, 4, dw, 3)};
    expect_dims(&c, tm_prim(&c, TM_P_CONV, cv, 2, &a), TM_FLOAT, 4, dy, "conv");
    conv_args(&cc, 1, &a);
    const int64_t dwt[] = {3, 2, 3, 3}, dyt[] = {1, 2, 16, 16};
    tm_val ct[2] = {cv[0], tm_val_symbolic(&c, TM_FLOAT, 4, dwt, 4)};
    expect_dims(&c, tm_prim(&c, TM_P_CONV_TRANSPOSE, ct, 2, &a), TM_FLOAT, 4, dyt, "conv_transpose");
    pool_case pc = {2, 0, 0, 1, 0, 0, {3, 3}, {2, 2}, {0}, {0}, {1, 1}};
    pool_args(&pc, &a);
    tm_val out[2];
    const int64_t dp[] = {1, 3, 4, 4};
    tm_prim_n(&c, TM_P_MAXPOOL_INDICES, cv, 1, &a, out, 2);
    expect_dims(&c, out[0], TM_FLOAT, 4, dp, "maxpool values");
    expect_dims(&c, out[1], TM_INT64, 4, dp, "maxpool indices");
    tm_ctx_destroy(&c);
}

/* ---- ONNX backend test data ---------------------------------------------------------- */

static tm_tensor *read_tensor_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc((size_t)size + 1);
    tm_tensor *t = NULL;
    if (fread(buf, 1, (size_t)size, f) == (size_t)size)
        if (tm_onnx_parse_tensor(buf, (size_t)size, &t, NULL) != 0) t = NULL;
    free(buf);
    fclose(f);
    return t;
}

static const tm_attr *find_attr(const tm_node *node, const char *name) {
    for (int i = 0; i < node->n_attrs; i++)
        if (strcmp(node->attrs[i].name, name) == 0) return &node->attrs[i];
    return NULL;
}

static int64_t attr_int(const tm_node *node, const char *name, int64_t fallback) {
    const tm_attr *a = find_attr(node, name);
    return a ? a->i : fallback;
}

/* Fills out[0..n) from an ints attribute, or with fallback; returns 1 when present. */
static int attr_ints(const tm_node *node, const char *name, int64_t *out, int n,
                     int64_t fallback) {
    const tm_attr *a = find_attr(node, name);
    for (int i = 0; i < n; i++) out[i] = a && (size_t)i < a->n ? a->ints[i] : fallback;
    return a != NULL;
}

static int attr_string_is(const tm_node *node, const char *name, const char *value) {
    const tm_attr *a = find_attr(node, name);
    if (!a) return strcmp(value, "NOTSET") == 0;
    return a->s.len == strlen(value) && memcmp(a->s.data, value, a->s.len) == 0;
}

static int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

/* Splits total padding as SAME_UPPER (extra at the end) or SAME_LOWER. */
static void split_same(int64_t total, int upper, int64_t *begin, int64_t *end) {
    if (upper) {
        *begin = floor_div(total, 2);
        *end = total - *begin;
    } else {
        *end = floor_div(total, 2);
        *begin = total - *end;
    }
}

/* Window geometry of a node (what a lowering would compute from its attributes). */
typedef struct node_geom {
    int n;
    int64_t kernel[6], stride[6], pad_begin[6], pad_end[6], dilation[6], out_pad[6];
} node_geom;

static int read_node_geom(const tm_node *node, const tm_tensor *x, const tm_tensor *w,
                          int transpose, node_geom *g) {
    int n = g->n = x->rank - 2;
    int64_t pads[12];
    if (!attr_ints(node, "kernel_shape", g->kernel, n, 1) && w)
        for (int d = 0; d < n; d++) g->kernel[d] = w->dims[2 + d];
    attr_ints(node, "strides", g->stride, n, 1);
    attr_ints(node, "dilations", g->dilation, n, 1);
    attr_ints(node, "output_padding", g->out_pad, n, 0);
    attr_ints(node, "pads", pads, 2 * n, 0);
    int ceil_mode = (int)attr_int(node, "ceil_mode", 0);
    int upper = attr_string_is(node, "auto_pad", "SAME_UPPER");
    int lower = attr_string_is(node, "auto_pad", "SAME_LOWER");
    int64_t output_shape[6];
    int has_output_shape = attr_ints(node, "output_shape", output_shape, n, 0);
    for (int d = 0; d < n; d++) {
        g->pad_begin[d] = pads[d];
        g->pad_end[d] = pads[n + d];
        int64_t extent = (g->kernel[d] - 1) * g->dilation[d] + 1, in = x->dims[2 + d];
        if (transpose && (has_output_shape || upper || lower)) {
            int64_t out = has_output_shape ? output_shape[d] : in * g->stride[d];
            int64_t total = g->stride[d] * (in - 1) + g->out_pad[d] + extent - out;
            split_same(total, upper, &g->pad_begin[d], &g->pad_end[d]);
        } else if (!transpose && (upper || lower)) {
            int64_t out = (in + g->stride[d] - 1) / g->stride[d];
            int64_t total = (out - 1) * g->stride[d] + extent - in;
            split_same(total < 0 ? 0 : total, upper, &g->pad_begin[d], &g->pad_end[d]);
        }
    }
    (void)ceil_mode;
    return 1;
}

static int run_backend_case(const char *dir, int *ran) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s/model.onnx", BACKEND_DIR, dir);
    tm_onnx_model *model = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    if (tm_onnx_load_file(path, &model, &err) != 0 || !model) return 0;
    const tm_node *node = &model->graph->nodes[0];
    tm_tensor *inputs[3] = {0}, *outputs[2] = {0};
    int n_in = 0, n_out = 0;
    for (; n_in < 3; n_in++) {
        snprintf(path, sizeof path, "%s/%s/test_data_set_0/input_%d.pb", BACKEND_DIR, dir, n_in);
        if (!(inputs[n_in] = read_tensor_file(path))) break;
    }
    for (; n_out < 2; n_out++) {
        snprintf(path, sizeof path, "%s/%s/test_data_set_0/output_%d.pb", BACKEND_DIR, dir, n_out);
        if (!(outputs[n_out] = read_tensor_file(path))) break;
    }
    const char *op = node->op_type;
    int transpose = strcmp(op, "ConvTranspose") == 0;
    int is_conv = transpose || strcmp(op, "Conv") == 0;
    node_geom g;
    memset(&g, 0, sizeof g);
    read_node_geom(node, inputs[0], is_conv ? inputs[1] : NULL, transpose, &g);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = g.n;
    int prim;
    if (is_conv) {
        prim = transpose ? TM_P_CONV_TRANSPOSE : TM_P_CONV;
        a.i[1] = attr_int(node, "group", 1);
        for (int d = 0; d < g.n; d++) {
            a.i[2 + d] = g.stride[d];
            a.i[2 + g.n + d] = g.pad_begin[d];
            a.i[2 + 2 * g.n + d] = g.pad_end[d];
            a.i[2 + 3 * g.n + d] = g.dilation[d];
            a.i[2 + 4 * g.n + d] = g.out_pad[d];
        }
    } else {
        prim = n_out > 1 ? TM_P_MAXPOOL_INDICES : TM_P_POOL;
        a.i[1] = strcmp(op, "MaxPool") == 0 ? 0 : strcmp(op, "AveragePool") == 0 ? 1 : 2;
        a.i[2] = attr_int(node, "count_include_pad", 0);
        a.i[3] = attr_int(node, "ceil_mode", 0);
        a.i[4] = attr_int(node, "p", 2);
        for (int d = 0; d < g.n; d++) {
            a.i[5 + d] = g.kernel[d];
            a.i[5 + g.n + d] = g.stride[d];
            a.i[5 + 2 * g.n + d] = g.pad_begin[d];
            a.i[5 + 3 * g.n + d] = g.pad_end[d];
            a.i[5 + 4 * g.n + d] = g.dilation[d];
        }
        a.i[5 + 5 * g.n] = attr_int(node, "storage_order", 0);
    }
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_val in[3], out[2] = {TM_NONE, TM_NONE};
    for (int i = 0; i < n_in; i++) in[i] = tm_val_tensor(&c, inputs[i], 0);
    tm_prim_n(&c, prim, in, n_in, &a, out, prim == TM_P_MAXPOOL_INDICES ? 2 : 1);
    char label[300];
    for (int i = 0; i < n_out; i++) {
        int64_t n = numel(outputs[i]->rank, outputs[i]->dims);
        double *want = malloc((size_t)(n + 1) * sizeof *want);
        for (int64_t j = 0; j < n; j++) want[j] = load(outputs[i]->data, outputs[i]->dtype, j);
        snprintf(label, sizeof label, "backend %s output %d", dir, i);
        expect_values(&c, out[i], outputs[i]->rank, outputs[i]->dims, want,
                      outputs[i]->dtype == TM_FLOAT ? 1e-4 : tolerance(outputs[i]->dtype), label);
        free(want);
        tm_tensor_free(outputs[i]);
    }
    tm_ctx_destroy(&c);
    tm_onnx_model_free(model);
    (*ran)++;
    return 1;
}

/* Some expected outputs are written with four decimals, hence 1e-4 for f32. */
static void test_backend_data(void) {
    static const char *const cases[] = {
        "test_averagepool_1d_default", "test_averagepool_2d_ceil",
        "test_averagepool_2d_ceil_last_window_starts_on_pad", "test_averagepool_2d_default",
        "test_averagepool_2d_dilations", "test_averagepool_2d_pads",
        "test_averagepool_2d_pads_count_include_pad", "test_averagepool_2d_precomputed_pads",
        "test_averagepool_2d_precomputed_pads_count_include_pad",
        "test_averagepool_2d_precomputed_same_upper", "test_averagepool_2d_precomputed_strides",
        "test_averagepool_2d_same_lower", "test_averagepool_2d_same_upper",
        "test_averagepool_2d_strides", "test_averagepool_3d_default",
        "test_averagepool_3d_dilations_large_count_include_pad_is_0_ceil_mode_is_False",
        "test_averagepool_3d_dilations_large_count_include_pad_is_0_ceil_mode_is_True",
        "test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_False",
        "test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_True",
        "test_averagepool_3d_dilations_small",
        "test_maxpool_1d_default", "test_maxpool_2d_ceil",
        "test_maxpool_2d_ceil_output_size_reduce_by_one", "test_maxpool_2d_default",
        "test_maxpool_2d_dilations", "test_maxpool_2d_pads", "test_maxpool_2d_precomputed_pads",
        "test_maxpool_2d_precomputed_same_upper", "test_maxpool_2d_precomputed_strides",
        "test_maxpool_2d_same_lower", "test_maxpool_2d_same_upper", "test_maxpool_2d_strides",
        "test_maxpool_2d_uint8", "test_maxpool_3d_default", "test_maxpool_3d_dilations",
        "test_maxpool_3d_dilations_use_ref_impl", "test_maxpool_3d_dilations_use_ref_impl_large",
        "test_maxpool_with_argmax_2d_precomputed_pads",
        "test_maxpool_with_argmax_2d_precomputed_strides",
        "test_lppool_1d_default", "test_lppool_2d_default", "test_lppool_2d_dilations",
        "test_lppool_2d_pads", "test_lppool_2d_same_lower", "test_lppool_2d_same_upper",
        "test_lppool_2d_strides", "test_lppool_3d_default",
        "test_conv_with_autopad_same", "test_conv_with_strides_and_asymmetric_padding",
        "test_conv_with_strides_no_padding", "test_conv_with_strides_padding",
        "test_basic_conv_with_padding", "test_basic_conv_without_padding",
        "test_convtranspose", "test_convtranspose_1d", "test_convtranspose_3d",
        "test_convtranspose_autopad_same", "test_convtranspose_dilations",
        "test_convtranspose_group_2", "test_convtranspose_group_2_image_3",
        "test_convtranspose_kernel_shape", "test_convtranspose_output_shape",
        "test_convtranspose_pad", "test_convtranspose_pads",
    };
    int ran = 0, missing = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        if (!run_backend_case(cases[i], &ran)) missing++;
    printf("backend data: %d cases run, %d not found\n", ran, missing);
}

int main(void) {
    test_sgemm_against_reference();
    test_sgemm_shapes();
    test_sgemm_packed();
    test_sgemm_mul_flush();
    test_pool_runs_every_slice();
    test_matmul();
    test_matmul_int_wrap();
    test_matmul_transposed();
    test_matmul_errors();
    test_conv();
    test_conv_transpose();
    test_conv_errors();
    test_pool();
    test_pool_errors();
    test_trace_shapes();
    test_backend_data();
    printf("reference kernels: %s (sgemm: %s)\n", tm_use_reference_kernels() ? "on" : "off",
           tm_sgemm_kernel_name());
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
