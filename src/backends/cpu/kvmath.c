/* The plain C forms of kvmath.h's kernels (the reference the vector forms are tested
 * against, and what runs without AVX2), and the choice among the forms at run time. Not
 * the vector forms (vmath_avx512.c, kvmath_avx2.c). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include "kvmath.h"
#include "../../core/dtype.h"

static inline float elem(const void *x, int64_t i, int half) {
    return half ? tm_f16_to_f32(((const uint16_t *)x)[i]) : ((const float *)x)[i];
}

static void scores_c(int64_t heads, int64_t group, int64_t sk, int64_t d, const float *q,
                     int64_t ldq, const void *k, int64_t ldk, int half, float *s, int64_t lds) {
    for (int64_t h = 0; h < heads; h++)
        for (int64_t r = 0; r < group; r++) {
            const float *qr = q + (h * group + r) * ldq;
            float *sr = s + (h * group + r) * lds;
            for (int64_t j = 0; j < sk; j++) {
                float sum = 0.0f;
                for (int64_t c = 0; c < d; c++) sum += qr[c] * elem(k, j * ldk + h * d + c, half);
                sr[j] = sum;
            }
        }
}

static void values_c(int64_t heads, int64_t group, int64_t sk, int64_t d, const float *p,
                     int64_t lds, const void *v, int64_t ldv, int half, float *o, int64_t ldo) {
    for (int64_t h = 0; h < heads; h++)
        for (int64_t r = 0; r < group; r++) {
            const float *pr = p + (h * group + r) * lds;
            float *orow = o + (h * group + r) * ldo;
            for (int64_t c = 0; c < d; c++) orow[c] = 0.0f;
            for (int64_t j = 0; j < sk; j++)
                for (int64_t c = 0; c < d; c++) orow[c] += pr[j] * elem(v, j * ldv + h * d + c, half);
        }
}

static void to_f16_c(const float *x, uint16_t *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = tm_f32_to_f16(x[i]);
}

static void to_f32_c(const uint16_t *x, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = tm_f16_to_f32(x[i]);
}

static const tm__kvmath kvmath_c = {"c", 1, scores_c, values_c, to_f16_c, to_f32_c};

const tm__kvmath *tm__kvmath_c(void) { return &kvmath_c; }

static pthread_once_t kvmath_once = PTHREAD_ONCE_INIT;
static const tm__kvmath *kvmath_table;   /* written once, under kvmath_once */

static void pick(void) {
    const char *isa = getenv("TM_KERNEL_ISA");
    int allow512 = !isa || !strcmp(isa, "avx512"), allow2 = allow512 || !strcmp(isa, "avx2");
    const tm__kvmath *t = allow512 ? tm__kvmath_avx512() : NULL;
    if (!t && allow2) t = tm__kvmath_avx2();
    kvmath_table = t ? t : &kvmath_c;
}

const tm__kvmath *tm__kvmath_active(void) {
    pthread_once(&kvmath_once, pick);
    return kvmath_table;
}
