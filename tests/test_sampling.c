/* Tests of com.microsoft Sampling's token choice (src/onnx/ops/ms_sampling.h): the
 * generator against the C++ standard's check value, top-p filtering against a reference
 * in double, and draws by their frequencies (chi-square). Draw-for-draw agreement with
 * ONNX Runtime is tested end to end by tests/contrib.sh (sampling_* cases). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../src/onnx/ops/ms_sampling.h"

#define CHECK_RNG_SEED 0x5eed5eedULL
#include "check.h"

/* [rand.predef]: the 10000th value of a default-constructed minstd_rand0 (seed 1). */
static void test_generator(void) {
    tm_minstd g = tm_minstd_seeded(1);
    uint32_t x = 0;
    for (int i = 0; i < 10000; i++) x = tm_minstd_next(&g);
    CHECK(x == 1043618065u, "minstd_rand0's 10000th value is %u, expected 1043618065", x);
    tm_minstd zero = tm_minstd_seeded(0), one = tm_minstd_seeded(1);
    CHECK(tm_minstd_next(&zero) == tm_minstd_next(&one), "seed 0 behaves as seed 1 (libstdc++)");
    tm_minstd m = tm_minstd_seeded(2147483647u);
    CHECK(m.x == 1, "a seed equal to the modulus behaves as 1");
    g = tm_minstd_seeded(12345);
    double lo = 1.0, hi = 0.0, sum = 0.0;
    for (int i = 0; i < 100000; i++) {
        double u = tm_minstd_canonical(&g);
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
        sum += u;
    }
    CHECK(lo >= 0.0 && hi < 1.0, "canonical values in [0, 1): %g .. %.17g", lo, hi);
    CHECK(fabs(sum / 100000 - 0.5) < 0.005, "canonical mean %g", sum / 100000);
}

/* The reference: in double, rank tokens by score (ties: the lower index is likelier); in
 * ascending order a token goes when the mass up to and including it is <= 1 - top_p,
 * unless it is one of the max(min_keep, 1) likeliest; custom: in descending order a
 * token goes when the mass before it exceeds top_p. Returns -1 when some running sum
 * is within 1e-4 of the threshold (float32 rounding may decide it either way). */
static int reference_keep(const float *row, int v, const tm_top_p *f, int *keep) {
    int order[64];
    double p[64], max = -INFINITY, sum = 0.0;
    for (int k = 0; k < v; k++) max = row[k] > max ? row[k] : max;
    for (int k = 0; k < v; k++) sum += p[k] = exp((double)row[k] - max);
    for (int k = 0; k < v; k++) p[k] /= sum;
    for (int k = 0; k < v; k++) order[k] = k;
    for (int i = 1; i < v; i++)                         /* insertion sort, ascending */
        for (int j = i; j > 0; j--) {
            int a = order[j - 1], b = order[j];
            int after = row[a] > row[b] || (row[a] == row[b] && a < b);
            if (!after) break;
            order[j - 1] = b;
            order[j] = a;
        }
    for (int k = 0; k < v; k++) keep[k] = 1;
    double cum = 0.0;
    if (f->custom) {
        for (int j = v - 1; j > 0; j--) {
            cum += p[order[j]];
            if (fabs(cum - f->top_p) < 1e-4) return -1;
            if (cum > f->top_p) keep[order[j - 1]] = 0;
        }
        return 0;
    }
    int stay = f->min_keep > 1 ? (int)f->min_keep : 1;
    for (int j = 0; j + stay < v; j++) {
        cum += p[order[j]];
        if (fabs(cum - (1.0 - f->top_p)) < 1e-4) return -1;
        if (cum <= 1.0 - f->top_p) keep[order[j]] = 0;
    }
    return 0;
}

static void test_top_p(void) {
    enum { V = 40 };
    tm_scored_index tmp[V];
    float probs[V];
    int compared = 0;
    for (int trial = 0; trial < 400; trial++) {
        tm_top_p f = {.top_p = (float)uniform(0.05, 0.99), .filter_value = -INFINITY,
                      .min_keep = (int64_t)(rng_next() % 4), .custom = (int)(trial % 3 == 0)};
        float row[V];
        double scale = uniform(0.5, 4.0);
        for (int k = 0; k < V; k++) row[k] = (float)(random_unit() * scale);
        if (trial % 7 == 0) row[3] = row[11] = row[29];    /* ties */
        int keep[V];
        if (reference_keep(row, V, &f, keep) < 0) continue;
        float got[V];
        memcpy(got, row, sizeof row);
        tm_top_p_filter(&f, got, V, tmp, probs);
        int same = 1, kept = 0;
        for (int k = 0; k < V; k++) {
            int ours = got[k] == row[k];
            same &= ours == keep[k] && (ours || got[k] == -INFINITY);
            kept += ours;
        }
        CHECK(same, "trial %d (top_p %g, min_keep %lld, custom %d): kept set differs from "
              "the reference", trial, f.top_p, (long long)f.min_keep, f.custom);
        CHECK(kept >= 1 && (f.custom || kept >= (f.min_keep < V ? f.min_keep : V)),
              "trial %d keeps %d tokens", trial, kept);
        compared++;
    }
    CHECK(compared > 300, "only %d of 400 random rows were clear of the threshold", compared);
    /* top_p 0 and min_tokens_to_keep 0, the attribute defaults: only the likeliest stays. */
    float row[5] = {0.1f, 2.0f, -1.0f, 1.5f, 0.3f};
    tm_top_p f = {.top_p = 0.0f, .filter_value = -INFINITY};
    tm_top_p_filter(&f, row, 5, tmp, probs);
    CHECK(row[1] == 2.0f && isinf(row[0]) && isinf(row[2]) && isinf(row[3]) && isinf(row[4]),
          "top_p 0 keeps the likeliest token alone");
    /* A finite filter_value is written as it is. */
    float row2[4] = {3.0f, 0.0f, 0.0f, 0.0f};
    tm_top_p g = {.top_p = 0.5f, .filter_value = -1000.0f, .min_keep = 1};
    tm_top_p_filter(&g, row2, 4, tmp, probs);
    CHECK(row2[0] == 3.0f && row2[1] == -1000.0f && row2[2] == -1000.0f && row2[3] == -1000.0f,
          "finite filter_value: %g %g %g %g", row2[0], row2[1], row2[2], row2[3]);
}

/* Chi-square of n draws against softmax over the finite entries; filtered tokens must
 * never come. 8 categories at most: the 1e-6 critical value for 7 degrees is 38.9. */
static void check_frequencies(const char *what, const float *row, int v, uint32_t seed) {
    enum { N = 200000 };
    double cdf[16], p[16], max = -INFINITY, sum = 0.0;
    long count[16] = {0};
    for (int k = 0; k < v; k++)
        if (isfinite(row[k]) && row[k] > max) max = row[k];
    for (int k = 0; k < v; k++) sum += p[k] = isfinite(row[k]) ? exp(row[k] - max) : 0.0;
    tm_minstd g = tm_minstd_seeded(seed);
    for (int i = 0; i < N; i++) {
        int32_t t = tm_draw_token(&g, row, v, cdf);
        if (t >= 0 && t < v) count[t]++;
    }
    double chi2 = 0.0;
    int df = -1, never_ok = 1;
    for (int k = 0; k < v; k++) {
        if (p[k] == 0.0) {
            never_ok &= count[k] == 0;
            continue;
        }
        double want = N * p[k] / sum;
        chi2 += (count[k] - want) * (count[k] - want) / want;
        df++;
    }
    CHECK(never_ok, "%s: a filtered token was drawn", what);
    static const double critical[8] = {0, 23.9, 27.6, 30.7, 33.4, 35.9, 38.3, 40.5};
    CHECK(df >= 1 && df < 8 && chi2 < critical[df], "%s: chi-square %.1f with %d degrees "
          "(critical %.1f at p = 1e-6)", what, chi2, df, df >= 1 && df < 8 ? critical[df] : 0);
}

static void test_draws(void) {
    float row[6] = {0.0f, 1.0f, -0.5f, 2.0f, 0.5f, -2.0f};
    check_frequencies("six tokens", row, 6, 1);
    check_frequencies("six tokens, another seed", row, 6, 987654321u);
    float filtered[8] = {1.0f, -INFINITY, 0.2f, -INFINITY, -INFINITY, 1.7f, 0.0f, NAN};
    check_frequencies("with filtered entries", filtered, 8, 42);
    float skewed[3] = {10.0f, 0.0f, 0.0f};   /* probabilities 0.99991, 4.5e-5, 4.5e-5 */
    check_frequencies("skewed", skewed, 3, 7);
    /* After top-p: draws come only from the kept set, in proportion. */
    float top[8] = {2.0f, 1.9f, 0.0f, -1.0f, 1.0f, -3.0f, 0.5f, -0.2f};
    tm_scored_index tmp[8];
    float probs[8];
    tm_top_p f = {.top_p = 0.7f, .filter_value = -INFINITY, .min_keep = 1};
    tm_top_p_filter(&f, top, 8, tmp, probs);
    int kept = 0;
    for (int k = 0; k < 8; k++) kept += isfinite(top[k]);
    CHECK(kept == 3, "top_p 0.7 keeps %d of these 8 tokens, expected 3", kept);
    check_frequencies("after top-p", top, 8, 3);
    /* Nothing finite: the last token, never an index outside the row. */
    float none[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    tm_minstd g = tm_minstd_seeded(5);
    double cdf[8];             /* also the six-token row below */
    int32_t t = tm_draw_token(&g, none, 4, cdf);
    CHECK(t >= 0 && t < 4, "an all-filtered row draws %d", t);
    /* One seed, one stream. */
    tm_minstd a = tm_minstd_seeded(77), b = tm_minstd_seeded(77), c = tm_minstd_seeded(78);
    int same = 1, differs = 0;
    for (int i = 0; i < 50; i++) {
        int32_t x = tm_draw_token(&a, row, 6, cdf), y = tm_draw_token(&b, row, 6, cdf);
        same &= x == y;
        differs |= x != tm_draw_token(&c, row, 6, cdf);
    }
    CHECK(same && differs, "a seed reproduces its draws (%d) and another seed differs (%d)",
          same, differs);
}

int main(void) {
    test_generator();
    test_top_p();
    test_draws();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
