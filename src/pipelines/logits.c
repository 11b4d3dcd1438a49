/* Logits processors and warpers for the generator, one small function each, as Python
 * transformers' LogitsProcessor classes compute them on one row of float32 scores; the
 * sampler's PRNG and draw. Not the order they run in: generator.c calls them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "generation.h"
#include "../train/dataset.h"

static int is_eos(int32_t id, const int32_t *eos, int n_eos) {
    for (int k = 0; k < n_eos; k++)
        if (eos[k] == id) return 1;
    return 0;
}

void tm__logits_repetition_penalty(float *scores, int64_t vocab, const int32_t *ids, size_t n,
                                   double penalty, uint8_t *mark) {
    /* Each distinct id once: marked as it is done, the marks cleared after. */
    for (size_t i = 0; i < n; i++) {
        int32_t t = ids[i];
        if (t < 0 || t >= vocab || mark[t]) continue;
        mark[t] = 1;
        double s = scores[t];
        scores[t] = (float)(s < 0 ? s * penalty : s / penalty);
    }
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < vocab) mark[ids[i]] = 0;
}

void tm__logits_no_repeat_ngram(float *scores, int64_t vocab, const int32_t *ids, size_t n,
                                int64_t ngram) {
    if (ngram < 1 || (int64_t)n + 1 < ngram) return;
    size_t m = (size_t)ngram - 1;   /* the prefix: the last m tokens of ids */
    for (size_t j = 0; j + m < n; j++) {
        if (memcmp(ids + j, ids + n - m, m * sizeof *ids)) continue;
        int32_t t = ids[j + m];
        if (t >= 0 && t < vocab) scores[t] = -INFINITY;
    }
}

void tm__logits_bad_words(float *scores, int64_t vocab, const int32_t *ids, size_t n,
                          const int32_t *bad_ids, const int32_t *bad_lengths, int n_bad,
                          const int32_t *eos, int n_eos) {
    const int32_t *w = bad_ids;
    for (int b = 0; b < n_bad; w += bad_lengths[b], b++) {
        size_t len = (size_t)bad_lengths[b];
        if (len == 0) continue;
        /* Python drops a bad word that is one EOS (transformers.js does not). */
        if (len == 1 && is_eos(w[0], eos, n_eos)) continue;
        if (n < len - 1 || memcmp(w, ids + n - (len - 1), (len - 1) * sizeof *ids)) continue;
        if (w[len - 1] >= 0 && w[len - 1] < vocab) scores[w[len - 1]] = -INFINITY;
    }
}

void tm__logits_min_length(float *scores, int64_t vocab, int64_t length, int64_t min_length,
                           const int32_t *eos, int n_eos) {
    if (length >= min_length) return;
    for (int k = 0; k < n_eos; k++)
        if (eos[k] >= 0 && eos[k] < vocab) scores[eos[k]] = -INFINITY;
}

void tm__logits_forced_bos(float *scores, int64_t vocab, int64_t length, int32_t bos) {
    if (length != 1 || bos < 0 || bos >= vocab) return;
    for (int64_t v = 0; v < vocab; v++) scores[v] = -INFINITY;
    scores[bos] = 0;
}

void tm__logits_forced_eos(float *scores, int64_t vocab, int64_t length, int64_t max_length,
                           const int32_t *eos, int n_eos) {
    if (length != max_length - 1 || n_eos < 1) return;
    for (int64_t v = 0; v < vocab; v++) scores[v] = -INFINITY;
    for (int k = 0; k < n_eos; k++)
        if (eos[k] >= 0 && eos[k] < vocab) scores[eos[k]] = 0;
}

void tm__logits_suppress(float *scores, int64_t vocab, const int32_t *ids, int n) {
    for (int k = 0; k < n; k++)
        if (ids[k] >= 0 && ids[k] < vocab) scores[ids[k]] = -INFINITY;
}

void tm__logits_begin_suppress(float *scores, int64_t vocab, int64_t length, int64_t begin, const int32_t *ids,
                               int n) {
    if (length == begin) tm__logits_suppress(scores, vocab, ids, n);
}

static void fill_inf(float *scores, int64_t from, int64_t to) {
    for (int64_t v = from < 0 ? 0 : from; v < to; v++) scores[v] = -INFINITY;
}

/* Whether the timestamps' summed probability beats each text token's: log_softmax as
 * transformers.js's maths.log_softmax on a Float32Array (max, a double sum of exps, each
 * result rounded to float32), the timestamps' exps rounded to float32 and summed in double. */
static int timestamps_win(const float *scores, int64_t vocab, int64_t first) {
    double mx = scores[0], sum = 0;
    for (int64_t v = 1; v < vocab; v++)
        if (scores[v] > mx) mx = scores[v];
    for (int64_t v = 0; v < vocab; v++) sum += exp((double)scores[v] - mx);
    double log_sum = log(sum), total = 0;
    float best_text = -INFINITY;
    for (int64_t v = 0; v < vocab; v++) {
        float lp = (float)((double)scores[v] - mx - log_sum);
        if (v >= first) total += (float)exp((double)lp);
        else if (v == 0 || lp > best_text) best_text = lp;
    }
    return log(total) > (double)best_text;
}

void tm__logits_whisper_timestamps(float *scores, int64_t vocab, const int32_t *ids, size_t n, size_t begin,
                                   int32_t no_timestamps, int32_t eos) {
    int64_t first = (int64_t)no_timestamps + 1;   /* the first timestamp token */
    if (no_timestamps < 0 || first >= vocab) return;
    scores[no_timestamps] = -INFINITY;
    if (n == begin) {
        fill_inf(scores, 0, first);
        return;
    }
    const int32_t *seq = ids + (begin < n ? begin : n);
    size_t len = begin < n ? n - begin : 0;
    int last_ts = len >= 1 && seq[len - 1] >= first;
    int penultimate_ts = len < 2 || seq[len - 2] >= first;
    if (last_ts && penultimate_ts) fill_inf(scores, first, vocab);
    else if (last_ts) fill_inf(scores, 0, eos < vocab ? eos : vocab);
    if (timestamps_win(scores, vocab, first)) fill_inf(scores, 0, first);
}

void tm__logits_temperature(float *scores, int64_t vocab, double temperature) {
    for (int64_t v = 0; v < vocab; v++) scores[v] = (float)(scores[v] / temperature);
}

/* The k-th largest of v[0..n) (k from 1), v reordered: Hoare's selection. */
static float kth_largest(float *v, int64_t n, int64_t k) {
    int64_t lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        float pivot = v[lo + (hi - lo) / 2];
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (v[i] > pivot) i++;
            while (v[j] < pivot) j--;
            if (i <= j) {
                float t = v[i];
                v[i++] = v[j];
                v[j--] = t;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else return v[want];
    }
    return v[want];
}

void tm__logits_top_k(float *scores, int64_t vocab, int64_t k, int64_t min_keep, float *scratch) {
    if (k < min_keep) k = min_keep;
    if (k <= 0 || k >= vocab) return;
    memcpy(scratch, scores, (size_t)vocab * sizeof *scratch);
    float kth = kth_largest(scratch, vocab, k);
    for (int64_t v = 0; v < vocab; v++)
        if (scores[v] < kth) scores[v] = -INFINITY;
}

/* Indices sorted by score, ascending; ties by index (a stable sort). */
static const float *sort_scores;
static int cmp_idx_asc(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    float x = sort_scores[i], y = sort_scores[j];
    if (x < y) return -1;
    if (x > y) return 1;
    return (i > j) - (i < j);
}

/* qsort has no context argument: the scores sorted by are passed through a static, so
 * these sorts are not thread-safe; a generator serialises them behind one lock. */
#include <pthread.h>
static pthread_mutex_t sort_lock = PTHREAD_MUTEX_INITIALIZER;

static void argsort_asc(const float *scores, int64_t vocab, int32_t *order) {
    for (int64_t v = 0; v < vocab; v++) order[v] = (int32_t)v;
    pthread_mutex_lock(&sort_lock);
    sort_scores = scores;
    qsort(order, (size_t)vocab, sizeof *order, cmp_idx_asc);
    pthread_mutex_unlock(&sort_lock);
}

/* softmax's max and sum of exp(s - max) in double. */
static double softmax_sum(const float *s, int64_t vocab, double *max_out) {
    double mx = -INFINITY, sum = 0;
    for (int64_t v = 0; v < vocab; v++)
        if (s[v] > mx) mx = s[v];
    for (int64_t v = 0; v < vocab; v++) sum += exp((double)s[v] - mx);
    *max_out = mx;
    return sum;
}

void tm__logits_top_p(float *scores, int64_t vocab, double top_p, int64_t min_keep,
                      int32_t *order) {
    if (top_p >= 1.0) return;
    argsort_asc(scores, vocab, order);
    double mx, sum = softmax_sum(scores, vocab, &mx);
    float cumf = 0;   /* a float32 running sum of float32 probabilities, as torch's cumsum */
    int64_t limit = vocab - (min_keep > 0 ? min_keep : 1);
    float thresh = (float)(1.0 - top_p);
    int64_t v = 0;
    for (; v < limit; v++) {
        float p = (float)(exp((double)scores[order[v]] - mx) / sum);
        cumf += p;
        if (!(cumf <= thresh)) break;
    }
    for (int64_t r = 0; r < v; r++) scores[order[r]] = -INFINITY;
}

void tm__logits_min_p(float *scores, int64_t vocab, double min_p, int64_t min_keep,
                      int32_t *order) {
    if (min_p <= 0) return;
    double mx, sum = softmax_sum(scores, vocab, &mx);
    float top = (float)(1.0 / sum);   /* the largest probability: exp(0) / sum */
    float scaled = (float)(min_p * top);
    argsort_asc(scores, vocab, order);
    /* order is ascending: the min_keep best are the last ones. */
    for (int64_t r = 0; r < vocab - min_keep; r++) {
        int32_t t = order[r];
        float p = (float)(exp((double)scores[t] - mx) / sum);
        if (p < scaled) scores[t] = -INFINITY;
    }
}

static const float *typ_shift;
static int cmp_shift_asc(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    float x = typ_shift[i], y = typ_shift[j];
    if (x < y) return -1;
    if (x > y) return 1;
    return (i > j) - (i < j);
}

void tm__logits_typical(float *scores, int64_t vocab, double mass, int64_t min_keep,
                        int32_t *order, float *scratch) {
    if (mass >= 1.0) return;
    double mx, sum = softmax_sum(scores, vocab, &mx), lse = mx + log(sum), ent = 0;
    for (int64_t v = 0; v < vocab; v++) {
        double lp = (double)scores[v] - lse;
        if (isfinite(lp)) ent -= lp * exp(lp);   /* nansum: -inf * 0 left out */
    }
    for (int64_t v = 0; v < vocab; v++) {
        double lp = (double)scores[v] - lse;
        scratch[v] = (float)fabs(-lp - ent);
    }
    for (int64_t v = 0; v < vocab; v++) order[v] = (int32_t)v;
    pthread_mutex_lock(&sort_lock);
    typ_shift = scratch;
    qsort(order, (size_t)vocab, sizeof *order, cmp_shift_asc);
    pthread_mutex_unlock(&sort_lock);
    /* last_ind: how many cumulative probabilities (in that order) stay below mass. */
    float cumf = 0;
    int64_t last = 0;
    for (int64_t r = 0; r < vocab; r++) {
        cumf += (float)(exp((double)scores[order[r]] - mx) / sum);
        if (cumf < (float)mass) last++;
    }
    if (last > vocab - 1) last = vocab - 1;
    float cut = scratch[order[last]];
    for (int64_t r = min_keep; r < vocab; r++)
        if (scratch[order[r]] > cut) scores[order[r]] = -INFINITY;
}

void tm__log_softmax(float *scores, int64_t vocab) {
    double mx, sum = softmax_sum(scores, vocab, &mx), lse = mx + log(sum);
    for (int64_t v = 0; v < vocab; v++) scores[v] = (float)((double)scores[v] - lse);
}

int64_t tm__argmax(const float *scores, int64_t vocab) {
    int64_t best = 0;
    for (int64_t v = 1; v < vocab; v++)
        if (scores[v] > scores[best]) best = v;
    return best;
}

double tm__rng_uniform(tm__rng *r) { return (double)(tm__rng_next(r) >> 11) * 0x1.0p-53; }

int64_t tm__sample(const float *scores, int64_t vocab, double u) {
    double mx, sum = softmax_sum(scores, vocab, &mx), target = u * sum, run = 0;
    int64_t last = -1;
    for (int64_t v = 0; v < vocab; v++) {
        if (scores[v] == -INFINITY) continue;
        run += exp((double)scores[v] - mx);
        last = v;
        if (run > target) return v;
    }
    return last >= 0 ? last : tm__argmax(scores, vocab);
}
