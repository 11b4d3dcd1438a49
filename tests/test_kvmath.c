/* The kernels over a KV cache (src/backends/cpu/kvmath.h): each vector table this CPU has
 * (AVX-512, AVX2 with F16C) against the C table, over many shapes, float32 and float16
 * caches, and the float16 conversions against tm_f32_to_f16 bit for bit; then ATTENTION
 * reading a float16 k and v against the same values in float32 (the widening is exact:
 * prompts give the same bits, decode steps within float32 rounding), and KV_APPEND into
 * a float16 cache. Run under TM_KERNEL_ISA=avx2 and scalar too (tests/run.sh). */
#include <math.h>
#include <string.h>
#include "../src/core/ctx.h"
#include "../src/core/dtype.h"
#include "../src/core/prims/fused.h"
#include "../src/backends/cpu/kvmath.h"
#define CHECK_RNG_SEED 0x6b76f16ULL
#include "check.h"

tm_status tm__shape_attention(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                              int nin, tm_vinfo *out, int nout, size_t *scratch);

static float rnd(void) { return (float)uniform(-1.0, 1.0); }

/* One table's sweep against the C table's at one shape: scores and values within 1e-5
 * of the sum of the terms' magnitudes (the orders of the sums differ). */
static void compare_sweep(const tm__kvmath *t, int64_t heads, int64_t group, int64_t sk,
                          int64_t d, int half) {
    const tm__kvmath *c = tm__kvmath_c();
    int64_t ldq = d + 8, ldk = heads * d + 16, lds = sk + 3, ldo = d + 4, rows = heads * group;
    float *q = malloc(sizeof(float) * (size_t)(rows * ldq));
    float *kf = malloc(sizeof(float) * (size_t)(sk * ldk)), *vf = malloc(sizeof(float) * (size_t)(sk * ldk));
    uint16_t *kh = malloc(2 * (size_t)(sk * ldk)), *vh = malloc(2 * (size_t)(sk * ldk));
    float *s1 = calloc((size_t)(rows * lds), sizeof(float)), *s2 = calloc((size_t)(rows * lds), sizeof(float));
    float *o1 = calloc((size_t)(rows * ldo), sizeof(float)), *o2 = calloc((size_t)(rows * ldo), sizeof(float));
    for (int64_t i = 0; i < rows * ldq; i++) q[i] = rnd();
    for (int64_t i = 0; i < sk * ldk; i++) {
        kh[i] = tm_f32_to_f16(rnd());
        vh[i] = tm_f32_to_f16(rnd());
        kf[i] = half ? tm_f16_to_f32(kh[i]) : rnd();
        vf[i] = half ? tm_f16_to_f32(vh[i]) : rnd();
    }
    const void *k = half ? (const void *)kh : kf, *v = half ? (const void *)vh : vf;
    t->scores(heads, group, sk, d, q, ldq, k, ldk, half, s1, lds);
    c->scores(heads, group, sk, d, q, ldq, k, ldk, half, s2, lds);
    double worst = 0;
    for (int64_t h = 0; h < heads; h++)
        for (int64_t r = 0; r < group; r++)
            for (int64_t j = 0; j < sk; j++) {
                const float *qr = q + (h * group + r) * ldq;
                double mag = 0;
                for (int64_t e = 0; e < d; e++) mag += fabs(qr[e] * kf[j * ldk + h * d + e]);
                int64_t at = (h * group + r) * lds + j;
                double err = fabs((double)s1[at] - s2[at]) / (mag + 1e-30);
                if (!(err <= worst)) worst = err;
            }
    CHECK(worst <= 1e-5, "%s scores heads %lld group %lld sk %lld d %lld half %d: %g", t->name,
          (long long)heads, (long long)group, (long long)sk, (long long)d, half, worst);
    /* values from the scores as probabilities (any weights will do) */
    t->values(heads, group, sk, d, s2, lds, v, ldk, half, o1, ldo);
    c->values(heads, group, sk, d, s2, lds, v, ldk, half, o2, ldo);
    worst = 0;
    for (int64_t h = 0; h < heads; h++)
        for (int64_t r = 0; r < group; r++)
            for (int64_t e = 0; e < d; e++) {
                const float *p = s2 + (h * group + r) * lds;
                double mag = 0;
                for (int64_t j = 0; j < sk; j++) mag += fabs(p[j] * vf[j * ldk + h * d + e]);
                int64_t at = (h * group + r) * ldo + e;
                double err = fabs((double)o1[at] - o2[at]) / (mag + 1e-30);
                if (!(err <= worst)) worst = err;
            }
    CHECK(worst <= 1e-5, "%s values heads %lld group %lld sk %lld d %lld half %d: %g", t->name,
          (long long)heads, (long long)group, (long long)sk, (long long)d, half, worst);
    free(q); free(kf); free(vf); free(kh); free(vh); free(s1); free(s2); free(o1); free(o2);
}

/* The conversions against tm_f32_to_f16 / tm_f16_to_f32, bit for bit (NaN: a NaN). */
static void compare_conversions(const tm__kvmath *t) {
    enum { N = 1000 };
    static float x[N], back[N];
    static uint16_t h[N], want[N];
    static const float special[] = {0.0f, -0.0f, 1.0f, 65504.0f, 65519.0f, 65520.0f, 1e6f, -1e6f,
                                    6.1035156e-05f, 5.9604645e-08f, 2.9802322e-08f, 2.98e-08f,
                                    1e-9f, 1.00048828125f, 1.000732421875f, 3.0517578e-05f};
    for (int i = 0; i < N; i++) {
        int n_sp = (int)(sizeof special / sizeof special[0]);
        x[i] = i < n_sp ? special[i] : (float)(rnd() * pow(2.0, (double)(i % 40) - 28.0));
    }
    x[N - 1] = NAN;
    x[N - 2] = INFINITY;
    x[N - 3] = -INFINITY;
    for (int64_t n = 1; n <= N; n += n < 40 ? 1 : 137) {
        memset(h, 0xAB, sizeof h);
        t->to_f16(x + N - n, h, n);
        int bad = -1;
        for (int64_t i = 0; i < n && bad < 0; i++) {
            uint16_t w = tm_f32_to_f16(x[N - n + i]);
            if (h[i] != w && !(isnan(x[N - n + i]) && (h[i] & 0x7C00) == 0x7C00 && (h[i] & 0x3FF)))
                bad = (int)i;
        }
        CHECK(bad < 0 && h[n] == 0xABAB, "%s to_f16 n %lld: element %d (%g) or the one after",
              t->name, (long long)n, bad, bad >= 0 ? (double)x[N - n + bad] : 0.0);
    }
    for (int i = 0; i < N; i++) want[i] = (uint16_t)(i * 67 + (i >> 3));
    for (int64_t n = 1; n <= N; n += n < 40 ? 1 : 137) {
        memset(back, 0, sizeof back);
        t->to_f32(want, back, n);
        int bad = -1;
        for (int64_t i = 0; i < n && bad < 0; i++) {
            float w = tm_f16_to_f32(want[i]);
            if (memcmp(&back[i], &w, 4) && !(isnan(w) && isnan(back[i]))) bad = (int)i;
        }
        CHECK(bad < 0, "%s to_f32 n %lld: element %d", t->name, (long long)n, bad);
    }
}

static void test_tables(void) {
    const tm__kvmath *tables[2] = {tm__kvmath_avx512(), tm__kvmath_avx2()};
    static const int64_t ds[] = {8, 16, 24, 32, 48, 64, 128};
    static const int64_t sks[] = {1, 7, 8, 15, 16, 17, 33, 40};
    int ran = 0;
    for (int ti = 0; ti < 2; ti++) {
        const tm__kvmath *t = tables[ti];
        if (!t) {
            printf("(no %s table on this CPU)\n", ti ? "AVX2" : "AVX-512");
            continue;
        }
        ran++;
        compare_conversions(t);
        for (size_t di = 0; di < sizeof ds / sizeof ds[0]; di++) {
            if (ds[di] % t->d_multiple) continue;
            for (size_t si = 0; si < sizeof sks / sizeof sks[0]; si++)
                for (int64_t heads = 1; heads <= 3; heads++)
                    for (int64_t group = 1; group <= 7; group += 2)
                        for (int half = 0; half <= 1; half++)
                            compare_sweep(t, heads, group, sks[si], ds[di], half);
        }
    }
    compare_conversions(tm__kvmath_c());
    printf("kvmath: active table %s, %d vector tables compared\n", tm__kvmath_active()->name, ran);
}

/* ATTENTION on float16 k and v against the same values widened to float32: the same bits.
 * q (B, Hq, Sq, D), k and v in the cache layout (B, Sk, Hk, D), an additive mask. */
static void attention_case(int64_t hq, int64_t hk, int64_t sq, int64_t sk, int64_t d, int causal) {
    int64_t qd[4] = {1, hq, sq, d}, kd[4] = {1, sk, hk, d}, md[4] = {1, 1, sq, sk};
    tm_tensor *q = tm_tensor_new(TM_FLOAT, 4, qd), *mask = tm_tensor_new(TM_FLOAT, 4, md);
    tm_tensor *kf = tm_tensor_new(TM_FLOAT, 4, kd), *vf = tm_tensor_new(TM_FLOAT, 4, kd);
    tm_tensor *kh = tm_tensor_new(TM_FLOAT16, 4, kd), *vh = tm_tensor_new(TM_FLOAT16, 4, kd);
    int64_t od[4] = {1, hq, sq, d};
    tm_tensor *o1 = tm_tensor_new(TM_FLOAT, 4, od), *o2 = tm_tensor_new(TM_FLOAT, 4, od);
    float *qv = q->data, *mv = mask->data;
    for (int64_t i = 0; i < hq * sq * d; i++) qv[i] = rnd();
    for (int64_t i = 0; i < sq * sk; i++) mv[i] = i % 5 == 3 ? -1e4f : 0.0f;
    for (int64_t i = 0; i < sk * hk * d; i++) {
        ((uint16_t *)kh->data)[i] = tm_f32_to_f16(rnd() * 2);
        ((uint16_t *)vh->data)[i] = tm_f32_to_f16(rnd() * 2);
        ((float *)kf->data)[i] = tm_f16_to_f32(((uint16_t *)kh->data)[i]);
        ((float *)vf->data)[i] = tm_f16_to_f32(((uint16_t *)vh->data)[i]);
    }
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[1] = 1;   /* k and v in (B, S, H, D) */
    a.i[2] = 1;
    a.i[4] = 1;   /* with the mask */
    a.i[5] = 1;
    a.f[0] = 0.125;
    a.i[6] = causal;
    a.f[1] = -3.4e38;
    tm_tensor *outs[2] = {o1, o2};
    for (int half = 0; half <= 1; half++) {
        const tm_tensor *in[4] = {q, half ? kh : kf, half ? vh : vf, mask};
        tm_vinfo vi[4], out;
        const tm_vinfo *vp[4];
        for (int i = 0; i < 4; i++) {
            memset(&vi[i], 0, sizeof vi[i]);
            vi[i].dtype = in[i]->dtype;
            vi[i].rank = 4;
            memcpy(vi[i].dims, in[i]->dims, sizeof in[i]->dims[0] * 4);
            vp[i] = &vi[i];
        }
        tm_ctx c;
        tm_ctx_init(&c, TM_MODE_EAGER, NULL);
        size_t scratch = 0;
        tm_status st = tm__shape_attention(&c, TM_P_ATTENTION, &a, vp, 4, &out, 1, &scratch);
        if (st == TM_OK) st = tm_run_kernel(&c, TM_P_ATTENTION, &a, in, 4, &outs[half], 1, scratch);
        CHECK(st == TM_OK, "attention half %d: %s", half, c.err.message);
        tm_ctx_destroy(&c);
    }
    /* A prompt widens the rows and takes the float32 path: the same bits. A decode step's
     * AVX-512 scores over float16 keys share each key's load among the group's rows (other
     * sums of the same products): within float32 rounding. */
    double diff = 0, top = 0;
    for (int64_t i = 0; i < hq * sq * d; i++) {
        double a1 = ((float *)o1->data)[i], a2 = ((float *)o2->data)[i];
        if (!(fabs(a1 - a2) <= diff)) diff = fabs(a1 - a2);
        if (fabs(a1) > top) top = fabs(a1);
    }
    int exact = !memcmp(o1->data, o2->data, o1->nbytes);
    CHECK(sq == 1 ? diff <= 1e-6 * top : exact, "attention Hq %lld Hk %lld Sq %lld Sk %lld D "
          "%lld: float16 k and v differ from their float32 values (%g of %g)", (long long)hq,
          (long long)hk, (long long)sq, (long long)sk, (long long)d, diff, top);
    double mag = 0;
    for (int64_t i = 0; i < hq * sq * d; i++) mag += fabs(((float *)o1->data)[i]);
    CHECK(mag > 0 && isfinite(mag), "attention output is %g", mag);
    tm_tensor_free(q); tm_tensor_free(mask); tm_tensor_free(kf); tm_tensor_free(vf);
    tm_tensor_free(kh); tm_tensor_free(vh); tm_tensor_free(o1); tm_tensor_free(o2);
}

/* KV_APPEND of float32 rows into a float16 cache, in place: the past rows kept, the new
 * ones converted as tm_f32_to_f16 does. */
static void test_append_half(void) {
    int64_t p_n = 4, s_n = 3, h_n = 2, d_n = 24, t_n = p_n + s_n;
    /* the cache position-major, (P, B, H, D), batch 1 */
    int64_t cd[4] = {p_n, 1, h_n, d_n}, xd[4] = {1, h_n, s_n, d_n}, yd[4] = {t_n, 1, h_n, d_n};
    uint16_t *room = calloc((size_t)(t_n * h_n * d_n), 2);
    for (int64_t e = 0; e < p_n * h_n * d_n; e++) room[e] = (uint16_t)(e * 3 + 1);
    tm_tensor *x = tm_tensor_new(TM_FLOAT, 4, xd);
    for (int64_t e = 0; e < h_n * s_n * d_n; e++) ((float *)x->data)[e] = rnd() * 100;
    tm_tensor cache, y;
    memset(&cache, 0, sizeof cache);
    cache.dtype = TM_FLOAT16;
    cache.rank = 4;
    memcpy(cache.dims, cd, sizeof cd);
    cache.data = room;
    cache.nbytes = (size_t)(p_n * h_n * d_n) * 2;
    y = cache;
    memcpy(y.dims, yd, sizeof yd);
    y.nbytes = (size_t)(t_n * h_n * d_n) * 2;
    tm_vinfo vi[2], out;
    const tm_vinfo *vp[2] = {&vi[0], &vi[1]};
    memset(vi, 0, sizeof vi);
    vi[0].dtype = TM_FLOAT16;
    vi[0].rank = 4;
    memcpy(vi[0].dims, cd, sizeof cd);
    vi[1].dtype = TM_FLOAT;
    vi[1].rank = 4;
    memcpy(vi[1].dims, xd, sizeof xd);
    tm_ctx c;
    tm_ctx_init(&c, TM_MODE_EAGER, NULL);
    tm_args a;
    memset(&a, 0, sizeof a);
    size_t scratch = 0;
    tm_status st = tm_prims[TM_P_KV_APPEND].shape(&c, TM_P_KV_APPEND, &a, vp, 2, &out, 1, &scratch);
    CHECK(st == TM_OK && out.dtype == TM_FLOAT16 && out.dims[0] == t_n, "kv_append float16 shape: %s",
          c.err.message);
    const tm_tensor *in[2] = {&cache, x};
    tm_tensor *yo = &y;
    if (st == TM_OK) st = tm_run_kernel(&c, TM_P_KV_APPEND, &a, in, 2, &yo, 1, 0);
    int bad = st != TM_OK;
    for (int64_t t = 0; t < t_n && !bad; t++)
        for (int64_t h = 0; h < h_n; h++)
            for (int64_t k = 0; k < d_n; k++) {
                int64_t e = (t * h_n + h) * d_n + k;
                uint16_t want = t < p_n ? (uint16_t)(e * 3 + 1)
                                        : tm_f32_to_f16(((float *)x->data)[(h * s_n + t - p_n) * d_n + k]);
                if (room[e] != want) bad = 1;
            }
    CHECK(!bad, "kv_append into a float16 cache");
    tm_ctx_destroy(&c);
    tm_tensor_free(x);
    free(room);
}

int main(void) {
    test_tables();
    /* decode steps (one query a head), grouped and not; prompts, causal or not */
    attention_case(6, 2, 1, 37, 64, 0);
    attention_case(4, 4, 1, 70, 16, 0);
    attention_case(12, 4, 1, 300, 64, 0);
    attention_case(3, 1, 1, 5, 128, 0);
    attention_case(6, 2, 5, 37, 64, 1);
    attention_case(4, 2, 9, 9, 32, 1);
    attention_case(2, 2, 70, 75, 64, 0);
    test_append_half();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
