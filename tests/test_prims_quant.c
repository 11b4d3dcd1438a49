/* The block-quantized primitives (src/core/prims/quant.c) against naive dequantize-then-
 * multiply references written here: MATMUL_NBITS for 2..8 bits, block sizes 16..128,
 * zero points absent/packed/unpacked, g_idx, f16 activations; GATHER_BLOCK_QUANTIZED for
 * uint8 packed and int4 data, with and without zero points. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/ctx.h"
#include "backends/cpu/nbits.h"
#include "backends/cpu/pool.h"
#include "backends/cpu/qgemm.h"

#define CHECK_RNG_SEED 88172645463325252ULL
#include "check.h"

static uint32_t next_u32(void) { return (uint32_t)rng_next(); }
static float next_f(void) { return (float)(next_u32() % 20001) / 10000.0f - 1.0f; }

/* Writes value v (bits wide) at position j of a little-endian bit stream. */
static void put_bits(uint8_t *s, size_t j, int bits, unsigned v) {
    for (int b = 0; b < bits; b++) {
        size_t bit = j * (size_t)bits + (size_t)b;
        if (v & (1u << b)) s[bit >> 3] |= (uint8_t)(1u << (bit & 7));
    }
}

static tm_val make(tm_ctx *c, tm_dtype dt, int rank, const int64_t *dims, tm_tensor **out) {
    tm_tensor *t = tm_tensor_alloc(dt, rank, dims, NULL);
    *out = t;
    return tm_val_tensor(c, t, 0);
}

/* When set, the 4-bit tests run their kernels on these threads. */
static tm_pool *nbits_pool;
/* When set, rows of activations far from 1 in size: row m scaled by 1, 1e-35, 1e30, and
 * every fourth row holding a NaN (its outputs must all be NaN). The integer GEMV scales
 * each block of a row on its own (1e-35: FULL / max|a| would overflow without a pre-scaling). */
static int extreme_rows;
static const float row_scales[4] = {1.0f, 1e-35f, 1e30f, 1.0f};

static void test_matmul_nbits_with(int bits, int64_t bs, int64_t K, int64_t N, int64_t M,
                                   int zp_kind, int with_g, tm_dtype adt, int repack) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    c.pool = nbits_pool;
    int64_t kb = (K + bs - 1) / bs, blob = bs * bits / 8, zp_row = (kb * bits + 7) / 8;
    float *a = malloc(sizeof(float) * (size_t)(M * K));
    unsigned *q = calloc((size_t)(N * kb * bs), sizeof *q);
    float *scale = malloc(sizeof(float) * (size_t)(N * kb));
    float *zp = malloc(sizeof(float) * (size_t)(N * kb));
    int32_t *g = malloc(sizeof(int32_t) * (size_t)K);
    for (int64_t i = 0; i < M * K; i++)
        a[i] = next_f() * (extreme_rows ? row_scales[(i / K) % 4] : 1.0f);
    if (extreme_rows)
        for (int64_t m = 3; m < M; m += 4) a[m * K + K / 2] = NAN;
    for (int64_t i = 0; i < N * kb * bs; i++) q[i] = next_u32() % (1u << bits);
    for (int64_t i = 0; i < N * kb; i++) {
        scale[i] = next_f() * 0.1f;
        zp[i] = zp_kind ? (float)(next_u32() % (1u << bits)) : (float)(1 << (bits - 1));
    }
    for (int64_t k = 0; k < K; k++) g[k] = with_g ? (int32_t)(next_u32() % kb) : (int32_t)(k / bs);
    int64_t ad[2] = {M, K}, bd[3] = {N, kb, blob}, sd[1] = {N * kb};
    tm_tensor *ta, *tb, *ts;
    tm_val in[5];
    in[0] = make(&c, adt, 2, ad, &ta);
    for (int64_t i = 0; i < M * K; i++) {
        if (adt == TM_FLOAT16) ((uint16_t *)ta->data)[i] = tm_f32_to_f16(a[i]);
        else ((float *)ta->data)[i] = a[i];
        if (adt == TM_FLOAT16) a[i] = tm_f16_to_f32(((uint16_t *)ta->data)[i]);
    }
    in[1] = make(&c, TM_UINT8, 3, bd, &tb);
    for (int64_t n = 0; n < N; n++)
        for (int64_t b = 0; b < kb; b++)
            for (int64_t j = 0; j < bs; j++)
                put_bits((uint8_t *)tb->data + (n * kb + b) * blob, (size_t)j, bits,
                         q[(n * kb + b) * bs + j]);
    in[2] = make(&c, adt, 1, sd, &ts);
    for (int64_t i = 0; i < N * kb; i++) {
        if (adt == TM_FLOAT16) {
            ((uint16_t *)ts->data)[i] = tm_f32_to_f16(scale[i]);
            scale[i] = tm_f16_to_f32(((uint16_t *)ts->data)[i]);
        } else {
            ((float *)ts->data)[i] = scale[i];
        }
    }
    int nin = 3;
    if (zp_kind == 1) {
        int64_t zd[2] = {N, zp_row};
        tm_tensor *tz;
        in[nin++] = make(&c, TM_UINT8, 2, zd, &tz);
        for (int64_t n = 0; n < N; n++)
            for (int64_t b = 0; b < kb; b++)
                put_bits((uint8_t *)tz->data + n * zp_row, (size_t)b, bits, (unsigned)zp[n * kb + b]);
    } else if (zp_kind == 2) {
        tm_tensor *tz;
        in[nin++] = make(&c, adt, 1, sd, &tz);
        for (int64_t i = 0; i < N * kb; i++) {
            if (adt == TM_FLOAT16) ((uint16_t *)tz->data)[i] = tm_f32_to_f16(zp[i]);
            else ((float *)tz->data)[i] = zp[i];
        }
    }
    if (with_g) {
        int64_t gd[1] = {K};
        tm_tensor *tg;
        in[nin++] = make(&c, TM_INT32, 1, gd, &tg);
        memcpy(tg->data, g, sizeof(int32_t) * (size_t)K);
    }
    tm_args args;
    memset(&args, 0, sizeof args);
    args.i[0] = K;
    args.i[1] = N;
    args.i[2] = bits;
    args.i[3] = bs;
    args.i[4] = zp_kind;
    args.i[5] = with_g;
    /* The fast kernels read the weights repacked by NBITS_PACK (when they take them). */
    if (repack) {
        in[1] = tm_prim(&c, TM_P_NBITS_PACK, in + 1, nin - 1, &args);
        nin = 2;
        args.i[6] = 1;
    }
    tm_val y = tm_prim(&c, TM_P_MATMUL_NBITS, in, nin, &args);
    CHECK(tm_ctx_ok(&c), "bits %d bs %lld: %s", bits, (long long)bs, c.err.message);
    if (tm_ctx_ok(&c)) {
        const tm_tensor *ty = tm_vdata(&c, y);
        double worst = 0;
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double want = 0, size = 0;  /* error normalised by the sum of |terms| */
                for (int64_t k = 0; k < K; k++) {
                    int64_t grp = g[k];
                    double w = ((double)q[(n * kb + k / bs) * bs + k % bs] - zp[n * kb + grp]) *
                               scale[n * kb + grp];
                    want += a[m * K + k] * w;
                    size += fabs(a[m * K + k] * w);
                }
                double got = adt == TM_FLOAT16 ? tm_f16_to_f32(((uint16_t *)ty->data)[m * N + n])
                                               : ((float *)ty->data)[m * N + n];
                if (isnan(want)) {
                    CHECK(isnan(got), "M %lld K %lld N %lld: row %lld with a NaN gave %g", (long long)M,
                          (long long)K, (long long)N, (long long)m, got);
                    continue;
                }
                double err = fabs(got - want) / (extreme_rows ? 1e-300 + size : 1e-6 + size);
                if (err > worst) worst = err;
            }
        CHECK(worst < (adt == TM_FLOAT16 ? 2e-3 : 1e-5),
              "bits %d bs %lld M %lld K %lld N %lld zp %d g %d %s repacked %d (%s): rel err %g",
              bits, (long long)bs, (long long)M, (long long)K, (long long)N, zp_kind, with_g,
              tm_dtype_name(adt), repack, tm_nbits_kernel_name(), worst);
    }
    free(a);
    free(q);
    free(scale);
    free(zp);
    free(g);
    tm_ctx_destroy(&c);
}

/* The reference, and where the fast kernels take the weights, the repacked path too. */
static void test_matmul_nbits(int bits, int64_t bs, int64_t K, int64_t N, int64_t M, int zp_kind,
                              int with_g, tm_dtype adt) {
    test_matmul_nbits_with(bits, bs, K, N, M, zp_kind, with_g, adt, 0);
    if (bits == 4 && !with_g && bs >= 16 && adt == TM_FLOAT)
        test_matmul_nbits_with(bits, bs, K, N, M, zp_kind, with_g, adt, 1);
}

/* The 4-bit GEMV gives the same bits on any number of threads: which of its one-row
 * kernels (a group alone, or two side by side) runs a group depends on where a thread's
 * claimed groups end, so both must sum a group alike. One row and five (a pass of four,
 * then one), blocks of 32 and 64, 14 groups and a short 15th. */
static void test_nbits_threads_bitwise(void) {
    tm_pool *pools[2] = {tm_pool_create(2), tm_pool_create(3)};
    const int64_t blocks_of[2] = {32, 64}, rows_of[2] = {1, 5}, n = 229, k = 1024;
    for (int bi = 0; bi < 2; bi++) {
        int64_t bs = blocks_of[bi], kb = k / bs;
        uint8_t *b = malloc((size_t)(n * kb * bs / 2)), *zp = malloc((size_t)(n * ((kb + 1) / 2)));
        float *scales = malloc(sizeof(float) * (size_t)(n * kb));
        for (int64_t i = 0; i < n * kb * bs / 2; i++) b[i] = (uint8_t)next_u32();
        for (int64_t i = 0; i < n * ((kb + 1) / 2); i++) zp[i] = (uint8_t)next_u32();
        for (int64_t i = 0; i < n * kb; i++) scales[i] = next_f() * 0.1f;
        tm_nbits_weights w = {n, k, bs, b, scales, zp, NULL};
        void *packed = malloc(tm_nbits_packed_size(n, k, bs, 0));
        tm_nbits_pack(&w, packed);
        for (int ri = 0; ri < 2; ri++) {
            int64_t m = rows_of[ri];
            float *a = malloc(sizeof(float) * (size_t)(m * k)), *y[3];
            for (int64_t i = 0; i < m * k; i++) a[i] = next_f();
            void *scratch = malloc(tm_nbits_scratch(m, k, bs));
            for (int t = 0; t < 3; t++) {
                y[t] = malloc(sizeof(float) * (size_t)(m * n));
                tm_nbits_matmul(packed, m, a, y[t], scratch, NULL, t ? pools[t - 1] : NULL);
            }
            CHECK(!memcmp(y[0], y[1], sizeof(float) * (size_t)(m * n)) &&
                      !memcmp(y[0], y[2], sizeof(float) * (size_t)(m * n)),
                  "4-bit GEMV, block %lld, %lld rows: 1, 2 and 3 threads give the same bits",
                  (long long)bs, (long long)m);
            for (int t = 0; t < 3; t++) free(y[t]);
            free(a);
            free(scratch);
        }
        free(b), free(zp), free(scales), free(packed);
    }
    tm_pool_free(pools[0]);
    tm_pool_free(pools[1]);
}

/* The GEMV's split of a row into a scale and three digits per block: a block of large
 * finite values whose sum overflows float (32 x 1.5e37) is split like any other, to
 * within 2^-24 of its largest value. */
static void test_nbits_split_large(void) {
    const tm__nbits_arch *ar = tm__nbits_arch_avx512();
    if (!ar) {
        printf("skipped: no AVX-512 VNNI split on this CPU\n");
        return;
    }
    float a[64];
    for (int i = 0; i < 64; i++) a[i] = 1.5e37f * (0.5f + 0.5f * (float)(next_u32() % 1000) / 1000.0f);
    void *buf = malloc(tm__nbits_qrow_bytes(64, 2) + 64);
    void *at = (void *)(((uintptr_t)buf + 63) & ~(uintptr_t)63);
    tm__nbits_qrow q;
    ar->split(a, 64, 32, 2, at, &q);
    double worst = 0;
    for (int i = 0; i < 64; i++) {
        int b = i / 32;
        double v = (double)q.sa[b] * ((double)q.d[0][i] * 65536.0 + (double)q.d[1][i] * 256.0 + q.d[2][i]);
        worst = fmax(worst, fabs(v - a[i]) / 3e37);
    }
    CHECK(isfinite(q.sa[0]) && isfinite(q.sa[1]) && worst < 1e-7,
          "split of a block of 1.5e37s: scales %g %g, worst error %g of the block's top", q.sa[0],
          q.sa[1], worst);
    free(buf);
}

/* The int8-activation path (accuracy_level 4) against a reference written here from the
 * weights as stored: A quantized per row and block (scale max|a| / 127, round to nearest
 * even, clamp to +-127), per block the exact integer sum less the zero point times the
 * sum of the quantized values, finished with the same fused multiply-adds, so every ISA
 * path must give the reference's bits; and within a normalised bound of the f32 product.
 * zp_kind: 0 none (8), 1 packed nibbles, 2 float. */
static void test_nbits_int8_case(int64_t bs, int64_t k, int64_t n, int64_t m, int zp_kind,
                                 tm_pool *pool) {
    int64_t kb = (k + bs - 1) / bs;
    uint8_t *b = malloc((size_t)(n * kb * bs / 2)), *zp = malloc((size_t)(n * ((kb + 1) / 2)));
    float *scales = malloc(sizeof(float) * (size_t)(n * kb)), *zpf = malloc(sizeof(float) * (size_t)(n * kb));
    for (int64_t i = 0; i < n * kb * bs / 2; i++) b[i] = (uint8_t)next_u32();
    for (int64_t i = 0; i < n * ((kb + 1) / 2); i++) zp[i] = (uint8_t)next_u32();
    for (int64_t i = 0; i < n * kb; i++) scales[i] = next_f() * 0.1f, zpf[i] = 7.5f + next_f() * 3.0f;
    tm_nbits_weights w = {n, k, bs, b, scales, zp_kind == 1 ? zp : NULL, zp_kind == 2 ? zpf : NULL};
    void *packed = malloc(tm_nbits_packed_size(n, k, bs, zp_kind == 2));
    tm_nbits_pack(&w, packed);
    float *a = malloc(sizeof(float) * (size_t)(m * k)), *ref = calloc((size_t)(m * n), sizeof(float));
    float *exact = calloc((size_t)(m * n), sizeof(float)), *y = malloc(sizeof(float) * (size_t)(m * n));
    for (int64_t i = 0; i < m * k; i++) a[i] = next_f() * (i % 7 == 3 ? 4.0f : 1.0f);
    int8_t *q = calloc((size_t)(kb * bs), 1);
    float *sa = malloc(sizeof(float) * (size_t)kb), *qsum = malloc(sizeof(float) * (size_t)kb);
    for (int64_t r = 0; r < m; r++) {
        const float *row = a + r * k;
        for (int64_t blk = 0; blk < kb; blk++) {
            int64_t k0 = blk * bs, kc = k - k0 < bs ? k - k0 : bs;
            float top = 0.0f;
            for (int64_t i = 0; i < kc; i++) top = fmaxf(top, fabsf(row[k0 + i]));
            sa[blk] = top / 127.0f;
            int32_t s = 0;
            for (int64_t i = 0; i < kc; i++) {
                float v = fminf(127.0f, fmaxf(-127.0f, nearbyintf(row[k0 + i] * (127.0f / top))));
                q[k0 + i] = (int8_t)v;
                s += (int32_t)v;
            }
            qsum[blk] = (float)s;
        }
        for (int64_t c = 0; c < n; c++) {
            float out = 0.0f;
            double e = 0.0;
            for (int64_t blk = 0; blk < kb; blk++) {
                int64_t k0 = blk * bs, kc = k - k0 < bs ? k - k0 : bs;
                float z = zp_kind == 2 ? zpf[c * kb + blk]
                          : zp_kind == 1 ? (float)((zp[c * ((kb + 1) / 2) + blk / 2] >> (blk & 1) * 4) & 15)
                                         : 8.0f;
                float sc = scales[c * kb + blk];
                int32_t acc = 0;
                for (int64_t i = 0; i < kc; i++) {
                    uint8_t byte = b[(c * kb + blk) * (bs / 2) + i / 2];
                    int wq = i & 1 ? byte >> 4 : byte & 15;
                    acc += wq * q[k0 + i];
                    e += (double)row[k0 + i] * ((wq - z) * sc);
                }
                out = fmaf(fmaf(-z, qsum[blk], (float)acc), sc * sa[blk], out);
            }
            ref[r * n + c] = out;
            exact[r * n + c] = (float)e;
        }
    }
    const char *isas[3] = {"avx512", "avx2", "scalar"};
    for (int t = 0; t < 3; t++) {
        setenv("TM_KERNEL_ISA", isas[t], 1);
        void *scratch = malloc(tm_nbits_scratch(m, k, bs));
        tm_nbits_matmul_int8(packed, m, a, y, scratch, NULL, t == 0 ? pool : NULL);
        double worst = 0.0, worst_exact = 0.0, scale = 1e-30;
        for (int64_t i = 0; i < m * n; i++) scale = fmax(scale, fabs(exact[i]));
        for (int64_t i = 0; i < m * n; i++) {
            worst = fmax(worst, fabs((double)y[i] - ref[i]));
            worst_exact = fmax(worst_exact, fabs((double)y[i] - exact[i]) / scale);
        }
        CHECK(worst == 0.0 && worst_exact < 2e-2,
              "int8 4-bit %s (%s), block %lld, k %lld, n %lld, m %lld, zp %d: %g from the "
              "reference, %g of the largest |y| from the f32 product", isas[t],
              tm_nbits_int8_kernel_name(), (long long)bs, (long long)k, (long long)n,
              (long long)m, zp_kind, worst, worst_exact);
        free(scratch);
    }
    unsetenv("TM_KERNEL_ISA");
    free(b), free(zp), free(scales), free(zpf), free(packed), free(a), free(ref), free(exact);
    free(y), free(q), free(sa), free(qsum);
}

static void test_nbits_int8(void) {
    tm_pool *pool = tm_pool_create(3);
    test_nbits_int8_case(32, 200, 37, 33, 1, pool);    /* K not a multiple of the block */
    test_nbits_int8_case(32, 256, 64, 5, 0, pool);
    test_nbits_int8_case(16, 72, 19, 1, 2, pool);
    test_nbits_int8_case(64, 300, 50, 7, 1, pool);
    test_nbits_int8_case(128, 128, 17, 3, 2, pool);
    test_nbits_int8_case(32, 1024, 229, 40, 1, pool);  /* enough weights for the pool */
    tm_pool_free(pool);
}

static void test_gather_bq(tm_dtype dt, int with_zp) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    int64_t rows = 10, cols = 64, bs = 16, nblk = cols / bs;
    int comp = dt == TM_UINT8 ? 2 : 1;
    int64_t dd[2] = {rows, cols / comp}, sd[2] = {rows, nblk}, zd[2] = {rows, (nblk + comp - 1) / comp};
    tm_tensor *td, *ts, *tz = NULL, *ti;
    tm_val in[4];
    in[0] = make(&c, dt, 2, dd, &td);
    int q[10][64];
    float scale[10][4], zp[10][4];
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < cols; k++) {
            q[r][k] = dt == TM_INT4 ? (int)(next_u32() % 16) - 8 : (int)(next_u32() % 16);
            if (dt == TM_UINT8) ((uint8_t *)td->data)[r * dd[1] + k / 2] |= (uint8_t)(q[r][k] << (4 * (k % 2)));
            else if (dt == TM_INT4) ((int8_t *)td->data)[r * cols + k] = (int8_t)q[r][k];
            else ((uint8_t *)td->data)[r * cols + k] = (uint8_t)q[r][k];
        }
    in[2] = make(&c, TM_FLOAT, 2, sd, &ts);
    for (int r = 0; r < rows; r++)
        for (int b = 0; b < nblk; b++) {
            scale[r][b] = next_f();
            ((float *)ts->data)[r * nblk + b] = scale[r][b];
            zp[r][b] = dt == TM_UINT8 ? 8.0f : 0.0f;
        }
    int nin = 3;
    if (with_zp) {
        in[nin++] = make(&c, dt, 2, zd, &tz);
        for (int r = 0; r < rows; r++)
            for (int b = 0; b < nblk; b++) {
                int z = dt == TM_INT4 ? (int)(next_u32() % 16) - 8 : (int)(next_u32() % 16);
                zp[r][b] = (float)z;
                if (dt == TM_UINT8) ((uint8_t *)tz->data)[r * zd[1] + b / 2] |= (uint8_t)(z << (4 * (b % 2)));
                else if (dt == TM_INT4) ((int8_t *)tz->data)[r * nblk + b] = (int8_t)z;
                else ((uint8_t *)tz->data)[r * nblk + b] = (uint8_t)z;
            }
    }
    int64_t id[2] = {2, 3};
    in[1] = make(&c, TM_INT64, 2, id, &ti);
    int64_t idx[6] = {0, 9, -1, 4, 4, 2};
    memcpy(ti->data, idx, sizeof idx);
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = 0;
    a.i[1] = 1;
    a.i[2] = bs;
    a.i[3] = 4;
    a.i[4] = with_zp;
    tm_val y = tm_prim(&c, TM_P_GATHER_BLOCK_QUANTIZED, in, nin, &a);
    CHECK(tm_ctx_ok(&c), "gather %s: %s", tm_dtype_name(dt), c.err.message);
    if (tm_ctx_ok(&c)) {
        const tm_tensor *t = tm_vdata(&c, y);
        CHECK(t->rank == 3 && t->dims[0] == 2 && t->dims[1] == 3 && t->dims[2] == cols, "gather shape");
        int bad = 0;
        for (int i = 0; i < 6; i++) {
            int r = (int)(idx[i] < 0 ? idx[i] + rows : idx[i]);
            for (int k = 0; k < cols; k++) {
                float want = ((float)q[r][k] - zp[r][k / bs]) * scale[r][k / bs];
                if (fabsf(((float *)t->data)[i * cols + k] - want) > 1e-6f) bad++;
            }
        }
        CHECK(bad == 0, "gather %s zp %d: %d wrong values", tm_dtype_name(dt), with_zp, bad);
    }
    /* An index out of range is a clear runtime error. */
    ((int64_t *)ti->data)[0] = 10;
    tm_ctx c2;
    tm_ctx_init(&c2, TM_MODE_EAGER, NULL);
    tm_tensor *copies[4];
    tm_val in2[4];
    for (int i = 0; i < nin; i++) {
        copies[i] = tm_tensor_clone(tm_vdata(&c, in[i]), NULL);
        in2[i] = tm_val_tensor(&c2, copies[i], 0);
    }
    tm_prim(&c2, TM_P_GATHER_BLOCK_QUANTIZED, in2, nin, &a);
    CHECK(!tm_ctx_ok(&c2) && strstr(c2.err.message, "out of range"), "bad index: %s", c2.err.message);
    tm_ctx_destroy(&c2);
    tm_ctx_destroy(&c);
}

/* ---- The exact 8-bit product: QGEMM_PACK_B + MATMUL_INTEGER --------------------------- */

/* A value of an 8-bit dtype: extremes first, then random. */
static int32_t q8_value(tm_dtype dt, int pick) {
    int lo = dt == TM_INT8 ? -128 : 0, hi = dt == TM_INT8 ? 127 : 255;
    if (pick == 0) return lo;
    if (pick == 1) return hi;
    return lo + (int32_t)(next_u32() % (uint32_t)(hi - lo + 1));
}

static void put8(tm_tensor *t, int64_t i, int32_t v) {
    if (t->dtype == TM_INT8) ((int8_t *)t->data)[i] = (int8_t)v;
    else ((uint8_t *)t->data)[i] = (uint8_t)v;
}

/* One product (m, k) x (k, n) against a naive int64 loop wrapped to int32; zp_mode 0:
 * scalar zero points at their extremes (lo for A, hi for B), 1: random scalars, 2: per
 * row of A and per column of B. out_f32: also scale (per column when n_scale > 1) and
 * bias, compared bit for bit with the two float operations. */
static void test_qgemm_case(tm_dtype adt, tm_dtype bdt, int64_t m, int64_t k, int64_t n,
                            int zp_mode, int out_f32, int values, tm_pool *pool) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    c.pool = pool;
    int64_t ad[2] = {m, k}, bd[2] = {k, n}, zad[1] = {zp_mode == 2 ? m : 1},
            zbd[1] = {zp_mode == 2 ? n : 1}, sd[1] = {out_f32 == 2 ? n : 1}, bsd[1] = {n};
    tm_tensor *ta, *tb, *tza, *tzb, *ts = NULL, *tbias = NULL;
    tm_val va = make(&c, adt, 2, ad, &ta), vb = make(&c, bdt, 2, bd, &tb);
    tm_val vza = make(&c, adt, 1, zad, &tza), vzb = make(&c, bdt, 1, zbd, &tzb);
    int32_t *a = malloc(sizeof(int32_t) * (size_t)(m * k)), *b = malloc(sizeof(int32_t) * (size_t)(k * n));
    int32_t *za = malloc(sizeof(int32_t) * (size_t)zad[0]), *zb = malloc(sizeof(int32_t) * (size_t)zbd[0]);
    for (int64_t i = 0; i < m * k; i++) put8(ta, i, a[i] = q8_value(adt, values == 0 ? (int)(i % 2) : 2));
    for (int64_t i = 0; i < k * n; i++) put8(tb, i, b[i] = q8_value(bdt, values == 0 ? (int)(i % 3 == 0) : 2));
    for (int64_t i = 0; i < zad[0]; i++) put8(tza, i, za[i] = q8_value(adt, zp_mode == 0 ? 1 : 2));
    for (int64_t i = 0; i < zbd[0]; i++) put8(tzb, i, zb[i] = q8_value(bdt, zp_mode == 0 ? 0 : 2));
    tm_args args;
    memset(&args, 0, sizeof args);
    args.i[0] = k;
    args.i[1] = n;
    tm_val pin[2] = {vb, vzb};
    tm_val packed = tm_prim(&c, TM_P_QGEMM_PACK_B, pin, 2, &args);
    tm_val in[5] = {va, packed, vza, TM_NONE, TM_NONE};
    int nin = 3;
    if (out_f32) {
        args.i[2] = 1;
        args.i[3] = 1;
        in[nin++] = make(&c, TM_FLOAT, 1, sd, &ts);
        in[nin++] = make(&c, TM_FLOAT, 1, bsd, &tbias);
        for (int64_t i = 0; i < sd[0]; i++) ((float *)ts->data)[i] = next_f() * 1e-3f;
        for (int64_t i = 0; i < n; i++) ((float *)tbias->data)[i] = next_f();
    }
    tm_val y = tm_prim(&c, TM_P_MATMUL_INTEGER, in, nin, &args);
    CHECK(tm_ctx_ok(&c), "qgemm %s x %s: %s", tm_dtype_name(adt), tm_dtype_name(bdt), c.err.message);
    if (tm_ctx_ok(&c)) {
        const tm_tensor *t = tm_vdata(&c, y);
        int64_t bad = 0;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                int64_t sum = 0;
                for (int64_t p = 0; p < k; p++)
                    sum += (int64_t)(a[i * k + p] - za[zp_mode == 2 ? i : 0]) *
                           (b[p * n + j] - zb[zp_mode == 2 ? j : 0]);
                uint32_t bits = (uint32_t)(uint64_t)sum;
                int32_t want;
                memcpy(&want, &bits, sizeof want);
                if (!out_f32) {
                    if (((const int32_t *)t->data)[i * n + j] != want) bad++;
                    continue;
                }
                float f = (float)want * ((float *)ts->data)[out_f32 == 2 ? j : 0];
                f = f + ((float *)tbias->data)[j];
                if (memcmp(&f, (const float *)t->data + i * n + j, sizeof f)) bad++;
            }
        CHECK(bad == 0, "qgemm %s x %s (%s) m %lld k %lld n %lld zp %d f32 %d values %d: %lld wrong",
              tm_dtype_name(adt), tm_dtype_name(bdt), tm_qgemm_kernel_name(), (long long)m,
              (long long)k, (long long)n, zp_mode, out_f32, values, (long long)bad);
    }
    free(a);
    free(b);
    free(za);
    free(zb);
    tm_ctx_destroy(&c);
}

/* a (2, 3, K) with a zero point per row of every batch (6 values) and per column of B. */
static void test_qgemm_batched(void) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    enum { BATCH = 2, ROWS = 3, KK = 9, NN = 5 };
    int64_t ad[3] = {BATCH, ROWS, KK}, bd[2] = {KK, NN}, zad[1] = {BATCH * ROWS}, zbd[1] = {NN};
    tm_tensor *ta, *tb, *tza, *tzb;
    tm_val va = make(&c, TM_UINT8, 3, ad, &ta), vb = make(&c, TM_INT8, 2, bd, &tb);
    tm_val vza = make(&c, TM_UINT8, 1, zad, &tza), vzb = make(&c, TM_INT8, 1, zbd, &tzb);
    int32_t a[BATCH * ROWS * KK], b[KK * NN], za[BATCH * ROWS], zb[NN];
    for (int i = 0; i < BATCH * ROWS * KK; i++) put8(ta, i, a[i] = q8_value(TM_UINT8, 2));
    for (int i = 0; i < KK * NN; i++) put8(tb, i, b[i] = q8_value(TM_INT8, 2));
    for (int i = 0; i < BATCH * ROWS; i++) put8(tza, i, za[i] = q8_value(TM_UINT8, 2));
    for (int i = 0; i < NN; i++) put8(tzb, i, zb[i] = q8_value(TM_INT8, 2));
    tm_args args;
    memset(&args, 0, sizeof args);
    args.i[0] = KK;
    args.i[1] = NN;
    tm_val pin[2] = {vb, vzb};
    tm_val in[3] = {va, tm_prim(&c, TM_P_QGEMM_PACK_B, pin, 2, &args), vza};
    tm_val y = tm_prim(&c, TM_P_MATMUL_INTEGER, in, 3, &args);
    CHECK(tm_ctx_ok(&c), "batched qgemm: %s", c.err.message);
    int bad = 0;
    for (int r = 0; tm_ctx_ok(&c) && r < BATCH * ROWS; r++)
        for (int j = 0; j < NN; j++) {
            int32_t want = 0;
            for (int p = 0; p < KK; p++) want += (a[r * KK + p] - za[r]) * (b[p * NN + j] - zb[j]);
            if (((const int32_t *)tm_vdata(&c, y)->data)[r * NN + j] != want) bad++;
        }
    CHECK(bad == 0, "batched qgemm with a zero point per row of every batch: %d wrong", bad);
    tm_ctx_destroy(&c);
}

/* An activation whose double or missing application shows: y = 2 x + 1. Counts calls. */
static int qgemm_act_calls;
static void qgemm_affine(const void *arg, const float *x, float *y, int64_t n) {
    (void)arg;
    qgemm_act_calls++;
    for (int64_t i = 0; i < n; i++) y[i] = 2.0f * x[i] + 1.0f;
}

/* tm_qgemm with an f32 epilogue that has an activation and a residual, against
 * tm_qgemm_reference, bit for bit: rows over several of the kernel's row blocks (256 KB
 * of A each), an odd number of 64-column panels with a short last one (the activation
 * runs over pairs of panels), 1 and 3 threads, every kernel. */
static void test_qgemm_activation(void) {
    const int64_t m = 700, k = 1000, n = 4 * 64 + 7;
    uint8_t *a = malloc((size_t)(m * k));
    int8_t *b = malloc((size_t)(k * n));
    float *res = malloc(sizeof(float) * (size_t)(m * n)), *bias = malloc(sizeof(float) * (size_t)n);
    float *want = malloc(sizeof(float) * (size_t)(m * n)), *got = malloc(sizeof(float) * (size_t)(m * n));
    for (int64_t i = 0; i < m * k; i++) a[i] = (uint8_t)q8_value(TM_UINT8, 2);
    for (int64_t i = 0; i < k * n; i++) b[i] = (int8_t)q8_value(TM_INT8, 2);
    for (int64_t i = 0; i < m * n; i++) res[i] = next_f();
    for (int64_t i = 0; i < n; i++) bias[i] = next_f();
    uint8_t za = 3;
    int8_t zb = -2;
    void *packed = malloc(tm_qgemm_packed_size(k, n));
    tm_qgemm_pack_b(b, 1, 0, n, k, n, &zb, 1, packed);
    float scale = 1e-4f;
    tm_sgemm_epilogue ep = {.activation = qgemm_affine, .residual = res, .ldr = n};
    tm_qgemm_args g = {m, n, k, a, 0, k, &za, 1, packed, NULL, want, n, &scale, 1, bias, n, &ep};
    tm_qgemm_reference(&g);
    void *scratch = malloc(tm_qgemm_scratch(m, k, 0));
    tm_pool *pool = tm_pool_create(3);
    const char *isas[] = {"amx", "avx512", "avx2"};
    for (int is = 0; is < 3; is++)
        for (int threads = 1; threads <= 3; threads += 2) {
            setenv("TM_KERNEL_ISA", isas[is], 1);
            memset(got, 0, sizeof(float) * (size_t)(m * n));
            g.c_float = got;
            qgemm_act_calls = 0;
            tm_qgemm(&g, scratch, threads == 1 ? NULL : pool);
            int64_t bad = 0;
            for (int64_t i = 0; i < m * n; i++) bad += memcmp(&got[i], &want[i], sizeof(float)) != 0;
            CHECK(bad == 0 && qgemm_act_calls > 0, "qgemm activation epilogue (%s, %d threads): %lld wrong",
                  tm_qgemm_kernel_name(), threads, (long long)bad);
        }
    unsetenv("TM_KERNEL_ISA");
    tm_pool_free(pool);
    free(scratch);
    free(packed);
    free(a);
    free(b);
    free(res);
    free(bias);
    free(want);
    free(got);
}

static void test_qgemm(void) {
    const tm_dtype dts[2] = {TM_UINT8, TM_INT8};
    /* Rows around the AVX-512 tile (6) and the AMX one (16), depths around the group of 4,
     * the AMX step of 64 bytes and longer, columns around the 64-column panel and its
     * 16-lane vectors. "amx" is the default's choice (VNNI where the CPU or OS has no AMX). */
    const int64_t ms[] = {1, 5, 6, 7, 13, 16, 17, 33}, ks[] = {1, 3, 4, 5, 17, 63, 64, 65, 131, 258},
                  ns[] = {1, 15, 16, 63, 64, 65, 130};
    const char *isas[] = {"amx", "avx512", "avx2", "scalar"};
    tm_pool *pool = tm_pool_create(3);
    for (int is = 0; is < 4; is++) {
        setenv("TM_KERNEL_ISA", isas[is], 1);
        for (int da = 0; da < 2; da++)
            for (int db = 0; db < 2; db++) {
                int v = 0;
                for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
                    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
                        size_t ni = (mi + ki) % (sizeof ns / sizeof ns[0]);
                        test_qgemm_case(dts[da], dts[db], ms[mi], ks[ki], ns[ni], v % 3, 0,
                                        v % 4 == 0 ? 0 : 1, NULL);
                        v++;
                    }
                /* f32 epilogue with a scalar and a per-column scale; threads. */
                test_qgemm_case(dts[da], dts[db], 9, 37, 70, 2, 1, 1, pool);
                test_qgemm_case(dts[da], dts[db], 2, 64, 129, 1, 2, 1, pool);
                test_qgemm_case(dts[da], dts[db], 30, 100, 200, 2, 2, 1, pool);
                test_qgemm_case(dts[da], dts[db], 50, 200, 129, 2, 1, 1, pool);
                /* Enough rows for AMX's split of rows over the threads. */
                test_qgemm_case(dts[da], dts[db], 257, 70, 130, 2, 2, 1, pool);
            }
        /* Sums that wrap around int32: (255 - 0) * (-128 - 127) summed 40000 times. */
        test_qgemm_case(TM_UINT8, TM_INT8, 17, 40000, 17, 0, 0, 0, NULL);
    }
    unsetenv("TM_KERNEL_ISA");
    tm_pool_free(pool);
}

/* ---- DYNAMIC_QUANTIZE ----------------------------------------------------------------- */

static void run_dynamic_quantize(const float *x, int64_t n, uint8_t *y, float *scale, uint8_t *zp) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    c.pool = nbits_pool;
    tm_tensor *tx;
    tm_val vx = make(&c, TM_FLOAT, 1, &n, &tx);
    memcpy(tx->data, x, sizeof(float) * (size_t)n);
    tm_val out[3];
    tm_status st = tm_prim_n(&c, TM_P_DYNAMIC_QUANTIZE, &vx, 1, NULL, out, 3);
    CHECK(st == TM_OK, "dynamic_quantize: %s", c.err.message);
    if (st == TM_OK) {
        memcpy(y, tm_vdata(&c, out[0])->data, (size_t)n);
        *scale = *(const float *)tm_vdata(&c, out[1])->data;
        *zp = *(const uint8_t *)tm_vdata(&c, out[2])->data;
    }
    tm_ctx_destroy(&c);
}

static void test_dynamic_quantize(void) {
    /* Known values: range [-1, 2] gives scale 3/255 and zero point 85. */
    const float x0[4] = {-1.0f, 0.0f, 1.0f, 2.0f};
    uint8_t y[200], y2[200];
    float s, s2;
    uint8_t z, z2;
    run_dynamic_quantize(x0, 4, y, &s, &z);
    CHECK(s == 3.0f / 255.0f && z == 85 && y[0] == 0 && y[1] == 85 && y[2] == 170 && y[3] == 255,
          "dynamic_quantize [-1 0 1 2]: scale %g zp %u y %u %u %u %u", s, z, y[0], y[1], y[2], y[3]);
    const float zeros[3] = {0, 0, 0};
    run_dynamic_quantize(zeros, 3, y, &s, &z);
    CHECK(s == 1.0f && z == 0 && y[0] == 0, "dynamic_quantize of zeros: scale %g zp %u", s, z);
    /* Halves round to even: with range [0, 255] the scale is 1. */
    const float ties[5] = {0.5f, 1.5f, 2.5f, 254.5f, 255.0f};
    run_dynamic_quantize(ties, 5, y, &s, &z);
    CHECK(s == 1.0f && z == 0 && y[0] == 0 && y[1] == 2 && y[2] == 2 && y[3] == 254,
          "dynamic_quantize ties: %u %u %u %u", y[0], y[1], y[2], y[3]);
    /* The AVX-512 kernel against the reference, lengths around its 16 lanes, NaN inside. */
    float x[200];
    for (int64_t n = 1; n <= 200; n += 13) {
        for (int64_t i = 0; i < n; i++) x[i] = next_f() * 3.0f + 0.5f;
        if (n > 20) x[7] = NAN;
        setenv("TM_KERNEL_ISA", "avx512", 1);
        run_dynamic_quantize(x, n, y, &s, &z);
        setenv("TM_KERNEL_ISA", "scalar", 1);
        run_dynamic_quantize(x, n, y2, &s2, &z2);
        CHECK(s == s2 && z == z2 && !memcmp(y, y2, (size_t)n), "dynamic_quantize n %lld: fast and "
              "reference differ (scale %g/%g zp %u/%u)", (long long)n, s, s2, z, z2);
        /* Each value is the nearest step: |(y - zp) * scale - x| <= scale / 2. */
        int bad = 0;
        for (int64_t i = 0; i < n; i++)
            if (x[i] == x[i] && fabsf(((float)y2[i] - z2) * s2 - x[i]) > s2 * 0.5001f) bad++;
        CHECK(bad == 0 && (n <= 20 || y2[7] == 0), "dynamic_quantize n %lld: %d values off",
              (long long)n, bad);
    }
    /* The fast kernel divides by a reciprocal and two correction steps, which must round
     * as IEEE division does: quotients next to a half, where one ulp changes the integer,
     * a few ulps either side of every (j + 1/2) s, over many ranges. */
    enum { NQ = 4096 };
    float *xq = malloc(sizeof(float) * NQ);
    uint8_t *yq = malloc(NQ), *yq2 = malloc(NQ);
    int ties_bad = 0;
    for (int round = 0; round < 40; round++) {
        float lo = -(next_f() + 0.25f) * (float)(1 + round % 7) * (round % 3 ? 1.0f : 1e-3f);
        float hi = (next_f() + 0.25f) * (float)(1 + round % 5) * (round % 3 ? 1.0f : 1e-3f);
        xq[0] = lo;
        xq[1] = hi;
        float step = (hi - lo) / 255.0f;   /* near the scale: quotients near (k + 1/2) */
        int k0 = (int)ceilf(lo / step), span = (int)floorf(hi / step) - k0;
        for (int i = 2; i < NQ; i++) {
            float v = ((float)(k0 + i % span) + 0.5f) * step;
            for (int u = (i / 255) % 7 - 3; u != 0; u += u < 0 ? 1 : -1)
                v = nextafterf(v, u < 0 ? -INFINITY : INFINITY);
            xq[i] = v < lo ? lo : v > hi ? hi : v;
        }
        setenv("TM_KERNEL_ISA", "avx512", 1);
        run_dynamic_quantize(xq, NQ, yq, &s, &z);
        setenv("TM_KERNEL_ISA", "scalar", 1);
        run_dynamic_quantize(xq, NQ, yq2, &s2, &z2);
        ties_bad += s != s2 || z != z2 || memcmp(yq, yq2, NQ) != 0;
    }
    CHECK(ties_bad == 0, "dynamic_quantize near halves: %d of 40 ranges differ from the reference",
          ties_bad);
    free(xq);
    free(yq);
    free(yq2);
    unsetenv("TM_KERNEL_ISA");
    /* Large enough to be split over threads (the range per slice, then the stores): the
     * same bytes as on one thread; the extremes in the last and a middle slice. */
    const int64_t big = 200003;
    float *xb = malloc(sizeof(float) * (size_t)big);
    uint8_t *yb = malloc((size_t)big), *yb2 = malloc((size_t)big);
    for (int64_t i = 0; i < big; i++) xb[i] = next_f();
    xb[big - 2] = -7.5f;
    xb[big / 2 + 3] = 9.25f;
    run_dynamic_quantize(xb, big, yb, &s, &z);
    nbits_pool = tm_pool_create(3);
    run_dynamic_quantize(xb, big, yb2, &s2, &z2);
    tm_pool_free(nbits_pool);
    nbits_pool = NULL;
    CHECK(s == s2 && z == z2 && !memcmp(yb, yb2, (size_t)big) && s == 16.75f / 255.0f,
          "dynamic_quantize of %lld on threads: scale %g/%g zp %u/%u", (long long)big, s, s2, z, z2);
    free(xb);
    free(yb);
    free(yb2);
}

/* ---- CONV_INTEGER ----------------------------------------------------------------------- */

/* One convolution against a naive loop over (x - xzp)(w - wzp) with zero padding of the
 * centred x. n spatial dims of size `size`, kernel `ker`, stride, dilation, pads. */
static void test_conv_integer_case(tm_dtype xdt, tm_dtype wdt, int n, int64_t size, int64_t ker,
                                   int64_t stride, int64_t dil, int64_t pad, int per_channel) {
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    const int64_t B = 2, C = 3, M = 5;
    int64_t xd[5] = {B, C, size, size, size}, wd[5] = {M, C, ker, ker, ker}, zd[1] = {per_channel ? M : 1};
    tm_tensor *tx, *tw, *txz, *twz;
    tm_val vx = make(&c, xdt, 2 + n, xd, &tx), vw = make(&c, wdt, 2 + n, wd, &tw);
    tm_val vxz = make(&c, xdt, 0, NULL, &txz), vwz = make(&c, wdt, 1, zd, &twz);
    int64_t nx = tm_numel(2 + n, xd), nw = tm_numel(2 + n, wd);
    int32_t *x = malloc(sizeof(int32_t) * (size_t)nx), *w = malloc(sizeof(int32_t) * (size_t)nw), xz, wz[5];
    for (int64_t i = 0; i < nx; i++) put8(tx, i, x[i] = q8_value(xdt, 2));
    for (int64_t i = 0; i < nw; i++) put8(tw, i, w[i] = q8_value(wdt, 2));
    put8(txz, 0, xz = q8_value(xdt, 2));
    for (int64_t i = 0; i < zd[0]; i++) put8(twz, i, wz[i] = q8_value(wdt, 2));
    int64_t span = (ker - 1) * dil + 1, out = (size + 2 * pad - span) / stride + 1;
    int64_t kdim = C, positions = 1;
    tm_args a, pack;
    memset(&a, 0, sizeof a);
    memset(&pack, 0, sizeof pack);
    a.i[0] = n;
    a.i[1] = 1;
    for (int d = 0; d < n; d++) {
        a.i[2 + d] = stride;
        a.i[2 + n + d] = pad;
        a.i[2 + 2 * n + d] = pad;
        a.i[2 + 3 * n + d] = dil;
        a.i[2 + 4 * n + d] = ker;
        kdim *= ker;
        positions *= out;
    }
    a.i[2 + 5 * n] = M;
    pack.i[0] = kdim;
    pack.i[1] = M;
    pack.i[2] = 1;
    tm_val pin[2] = {vw, vwz};
    tm_val in[3] = {vx, tm_prim(&c, TM_P_QGEMM_PACK_B, pin, 2, &pack), vxz};
    tm_val y = tm_prim(&c, TM_P_CONV_INTEGER, in, 3, &a);
    CHECK(tm_ctx_ok(&c), "conv_integer: %s", c.err.message);
    if (tm_ctx_ok(&c)) {
        const int32_t *got = tm_vdata(&c, y)->data;
        int64_t bad = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t m = 0; m < M; m++)
                for (int64_t p = 0; p < positions; p++) {
                    int64_t o[3] = {p, 0, 0}, rest = p;
                    for (int d = n - 1; d >= 0; d--) {
                        o[d] = rest % out;
                        rest /= out;
                    }
                    int64_t sum = 0;
                    for (int64_t ch = 0; ch < C; ch++)
                        for (int64_t kk = 0; kk < kdim / C; kk++) {
                            int64_t kq[3] = {kk, 0, 0}, kr = kk, idx = 0, inside = 1;
                            for (int d = n - 1; d >= 0; d--) {
                                kq[d] = kr % ker;
                                kr /= ker;
                            }
                            for (int d = 0; d < n; d++) {
                                int64_t pos = o[d] * stride - pad + kq[d] * dil;
                                inside &= pos >= 0 && pos < size;
                                idx = idx * size + pos;
                            }
                            if (!inside) continue;
                            int32_t xv = x[(b * C + ch) * (nx / (B * C)) + idx] - xz;
                            int32_t wv = w[(m * C + ch) * (kdim / C) + kk] - wz[per_channel ? m : 0];
                            sum += (int64_t)xv * wv;
                        }
                    if (got[(b * M + m) * positions + p] != (int32_t)sum) bad++;
                }
        CHECK(bad == 0, "conv_integer %s x %s n %d size %lld kernel %lld stride %lld dilation "
              "%lld pad %lld per-channel %d: %lld wrong", tm_dtype_name(xdt), tm_dtype_name(wdt),
              n, (long long)size, (long long)ker, (long long)stride, (long long)dil,
              (long long)pad, per_channel, (long long)bad);
    }
    free(x);
    free(w);
    tm_ctx_destroy(&c);
}

static void test_conv_integer(void) {
    const tm_dtype dts[2] = {TM_UINT8, TM_INT8};
    for (int i = 0; i < 4; i++) {
        tm_dtype xd = dts[i % 2], wd = dts[i / 2];
        test_conv_integer_case(xd, wd, 2, 7, 3, 1, 1, 1, i % 2);
        test_conv_integer_case(xd, wd, 2, 9, 3, 2, 2, 2, 1);
        test_conv_integer_case(xd, wd, 1, 11, 4, 3, 1, 0, 0);
        test_conv_integer_case(xd, wd, 3, 5, 2, 1, 2, 1, 1);
    }
}

int main(void) {
    int bits_list[] = {2, 3, 4, 5, 8};
    for (int b = 0; b < 5; b++)
        for (int zp = 0; zp < 3; zp++) test_matmul_nbits(bits_list[b], 32, 96, 7, 3, zp, 0, TM_FLOAT);
    test_matmul_nbits(4, 16, 40, 5, 2, 1, 0, TM_FLOAT);   /* K not a multiple of the block */
    test_matmul_nbits(4, 128, 256, 9, 4, 1, 0, TM_FLOAT);
    test_matmul_nbits(4, 32, 64, 6, 2, 1, 1, TM_FLOAT);   /* g_idx */
    test_matmul_nbits(4, 32, 64, 6, 5, 2, 0, TM_FLOAT16);
    /* The 4-bit fast paths on every ISA this CPU has: the GEMV (rows 1-8: groups of 4
     * rows and a remainder), the tile path (more rows: row panels of the f32 tile and
     * a remainder) and the panel path (512 rows or more: panels of 32 columns), each block size, each kind of zero point, K a whole number of blocks
     * or not (an odd number of blocks of 16 leaves half a chunk), N around the groups of
     * 4 columns and the 12-column steps. */
    const char *isas[] = {"avx512", "avx2", "scalar"};
    for (int i = 0; i < 3; i++) {
        setenv("TM_KERNEL_ISA", isas[i], 1);
        int64_t sizes[] = {16, 32, 64, 128};
        for (int b = 0; b < 4; b++)
            for (int zp = 0; zp < 3; zp++)
                for (int64_t m = 1; m <= 6; m += 5)
                    test_matmul_nbits(4, sizes[b], sizes[b] * 3, 5, m, zp, 0, TM_FLOAT);
        test_matmul_nbits(4, 32, 512, 17, 9, 1, 0, TM_FLOAT);
        /* One row over three groups (a pair side by side, then one; the last short), each
         * block size (16 and 128 take the one-group kernel), each zero point. */
        for (int b = 0; b < 4; b++)
            for (int zp = 0; zp < 3; zp++) {
                test_matmul_nbits(4, sizes[b], sizes[b] * 3, 45, 1, zp, 0, TM_FLOAT);
                test_matmul_nbits(4, sizes[b], sizes[b] * 5, 29, 1, zp, 0, TM_FLOAT);   /* a pair, the second short */
            }
        const int64_t ms[] = {1, 3, 8, 9, 33, 70}, ns[] = {1, 4, 13, 25};
        for (int b = 0; b < 4; b++)
            for (int mi = 0; mi < 6; mi++) {
                int64_t k = sizes[b] * 5 - (mi % 2 ? 3 : 0);
                test_matmul_nbits(4, sizes[b], k, ns[(b + mi) % 4], ms[mi], (b + mi) % 3, 0,
                                  TM_FLOAT);
            }
        test_matmul_nbits(4, 16, 16 * 7, 30, 40, 1, 0, TM_FLOAT);   /* 7 blocks of 16 */
        test_matmul_nbits(4, 32, 300, 50, 200, 2, 0, TM_FLOAT);
        test_matmul_nbits(4, 32, 96, 7, 530, 1, 0, TM_FLOAT);       /* beyond 16 row panels */
        /* Large enough to be split over threads: results as on one thread. */
        nbits_pool = tm_pool_create(3);
        test_matmul_nbits(4, 32, 512, 301, 1, 1, 0, TM_FLOAT);
        test_matmul_nbits(4, 64, 512, 301, 40, 0, 0, TM_FLOAT);
        test_matmul_nbits(4, 32, 480, 301, 600, 2, 0, TM_FLOAT);   /* the panel path */
        tm_pool_free(nbits_pool);
        nbits_pool = NULL;
        /* Rows of very small and very large values, and NaN: the GEMV (a row at a time and
         * four at a time) and the panel path. */
        extreme_rows = 1;
        for (int64_t m = 1; m <= 8; m += 7)
            for (int zp = 0; zp < 3; zp++) test_matmul_nbits(4, 32, 96, 20, m, zp, 0, TM_FLOAT);
        test_matmul_nbits(4, 16, 80, 20, 120, 1, 0, TM_FLOAT);
        extreme_rows = 0;
    }
    unsetenv("TM_KERNEL_ISA");
    test_nbits_threads_bitwise();
    test_nbits_split_large();
    test_nbits_int8();
    test_gather_bq(TM_UINT8, 0);
    test_gather_bq(TM_UINT8, 1);
    setenv("TM_KERNEL_ISA", "scalar", 1);   /* the reference, beside the 4-bit row path */
    test_gather_bq(TM_UINT8, 0);
    test_gather_bq(TM_UINT8, 1);
    unsetenv("TM_KERNEL_ISA");
    test_gather_bq(TM_INT4, 0);
    test_gather_bq(TM_INT4, 1);
    test_gather_bq(TM_UINT4, 1);
    test_qgemm();
    test_qgemm_activation();
    test_qgemm_batched();
    test_dynamic_quantize();
    test_conv_integer();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
