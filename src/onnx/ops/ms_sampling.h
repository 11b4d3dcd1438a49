/* The token choice of com.microsoft Sampling, as ONNX Runtime's CPU kernel makes it: its
 * random generator, top-p filtering and the multinomial draw over one row of scores.
 * Host code only; the generation loop is in ms_search.c. */
#ifndef TM_ONNX_OPS_MS_SAMPLING_H
#define TM_ONNX_OPS_MS_SAMPLING_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* ONNX Runtime draws with std::default_random_engine, which libstdc++ makes minstd_rand0
 * (x = 16807 x mod 2^31 - 1), seeded by the seed input (0 when absent), through
 * std::uniform_real_distribution<double>, i.e. generate_canonical<double, 53>: two draws
 * per number. Doing the same gives ONNX Runtime's draws bit for bit. */
typedef struct tm_minstd {
    uint32_t x;
} tm_minstd;

static inline tm_minstd tm_minstd_seeded(uint32_t seed) {
    uint32_t x = seed % 2147483647u;
    return (tm_minstd){x ? x : 1u};       /* libstdc++: a seed of 0 mod m gives state 1 */
}

static inline uint32_t tm_minstd_next(tm_minstd *g) {
    g->x = (uint32_t)((uint64_t)g->x * 16807u % 2147483647u);
    return g->x;
}

/* A double in [0, 1) as libstdc++'s generate_canonical computes it: the engine's range R
 * is 2^31 - 2, so two draws a, b give ((a - 1) + (b - 1) R) / R^2, in double. */
static inline double tm_minstd_canonical(tm_minstd *g) {
    const double range = 2147483646.0;
    double sum = (double)(tm_minstd_next(g) - 1u);
    sum += (double)(tm_minstd_next(g) - 1u) * range;
    double u = sum / (range * range);
    return u >= 1.0 ? nextafter(1.0, 0.0) : u;
}

typedef struct tm_top_p {
    float top_p, filter_value;
    int64_t min_keep;          /* min_tokens_to_keep */
    int custom;                /* attribute custom: descending order, keep while sum <= top_p */
} tm_top_p;

typedef struct tm_scored_index {
    float score;
    int32_t index;
} tm_scored_index;

/* Likelihood order: by score, and among equal scores the lower index counts as the
 * likelier (as argmax takes the first). ONNX Runtime's std::sort leaves the order of
 * equal scores to its library; it matters only when a tie straddles the threshold. */
static inline int tm_by_score_up(const void *a, const void *b) {
    const tm_scored_index *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? -1 : 1;
    return (x->index < y->index) - (x->index > y->index);
}

static inline int tm_by_score_down(const void *a, const void *b) { return tm_by_score_up(b, a); }

/* Top-p filtering of one row of v scores (ONNX Runtime's cumulate_and_filter): the scores
 * sorted, their softmax (float32) summed from the least likely, and each token whose
 * running sum stays <= 1 - top_p set to filter_value; never the min_tokens_to_keep
 * likeliest, nor the likeliest one (ONNX Runtime, with min_tokens_to_keep 0, may filter
 * every token and then draw the index v, outside the vocabulary). `custom`: descending,
 * a token goes once the sum of those before it exceeds top_p (the first always stays).
 * tmp and probs are scratch of v entries. */
static inline void tm_top_p_filter(const tm_top_p *f, float *row, int64_t v,
                                   tm_scored_index *tmp, float *probs) {
    if (v < 1) return;
    for (int64_t k = 0; k < v; k++) tmp[k] = (tm_scored_index){row[k], (int32_t)k};
    qsort(tmp, (size_t)v, sizeof *tmp, f->custom ? tm_by_score_down : tm_by_score_up);
    float max = tmp[f->custom ? 0 : v - 1].score, sum = 0.0f;
    for (int64_t k = 0; k < v; k++) sum += probs[k] = expf(tmp[k].score - max);
    for (int64_t k = 0; k < v; k++) probs[k] /= sum;
    float cum = 0.0f;
    if (f->custom) {
        for (int64_t j = 0; j + 1 < v; j++) {
            cum += probs[j];
            if (cum > f->top_p) row[tmp[j + 1].index] = f->filter_value;
        }
        return;
    }
    int64_t keep = f->min_keep > 1 ? f->min_keep : 1;
    for (int64_t j = 0; j + keep < v; j++) {
        cum += probs[j];
        if (cum <= 1.0f - f->top_p) row[tmp[j].index] = f->filter_value;
    }
}

/* One draw from softmax(row) over its finite entries (ONNX Runtime's Multinomial:
 * cumulative weights exp(x - max) in double, then the first token whose cumulative
 * weight exceeds u * total). cdf is scratch of v entries. */
static inline int32_t tm_draw_token(tm_minstd *g, const float *row, int64_t v, double *cdf) {
    float max = -FLT_MAX;
    for (int64_t k = 0; k < v; k++)
        if (isfinite(row[k]) && row[k] > max) max = row[k];
    double total = 0.0;
    int64_t last = 0;
    for (int64_t k = 0; k < v; k++) {
        if (isfinite(row[k])) {
            total += exp((double)row[k] - (double)max);
            last = k;
        }
        cdf[k] = total;
    }
    double target = tm_minstd_canonical(g) * total;
    int64_t lo = 0, hi = v;                 /* upper bound: the first cdf > target */
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (cdf[mid] > target) hi = mid;
        else lo = mid + 1;
    }
    /* None above the target (every weight 0, or u * total rounded up to total): the last
     * token with a weight, where ONNX Runtime would return v. */
    return (int32_t)(lo < v ? lo : last);
}

#endif
