/* TfIdfVectorizer: counts the pool's n-grams (with skips) in each row of the input on
 * the host and weights them (TF, IDF, TFIDF), as ONNX Runtime does: 1-grams are counted
 * once whatever the skip, and weights are read by output position. Not tokenisation
 * (StringSplit, StringNormalizer). */
#include <stdlib.h>
#include <string.h>
#include "../lower.h"

/* One n-gram of the pool: its size, first item in the pool, and id (its rank among all
 * the pool's n-grams, which ngram_indexes maps to an output position). */
typedef struct gram {
    int64_t n, item, id;
} gram;

typedef struct pool {
    const int64_t *ints;       /* pool_int64s, or NULL */
    const tm_bytes *strs;      /* pool_strings, or NULL */
    gram *grams;               /* sizes in [min, max], sorted by (n, items) */
    int64_t n_grams;
} pool;

/* The input row being scanned: item k of the sample is x[pos + k * stride]. */
typedef struct sample {
    const tm_tensor *x;
    int64_t pos, stride, n;
} sample;

static int cmp_bytes(const tm_bytes *a, const char *b, size_t lb) {
    size_t la = a->len, m = la < lb ? la : lb;
    int r = m ? memcmp(a->data, b, m) : 0;
    return r ? r : (la > lb) - (la < lb);
}

static int cmp_items(const pool *p, int64_t i, int64_t j) {
    if (p->strs) {
        const tm_bytes *b = &p->strs[j];
        return cmp_bytes(&p->strs[i], b->data ? b->data : "", b->len);
    }
    return (p->ints[i] > p->ints[j]) - (p->ints[i] < p->ints[j]);
}

static int cmp_gram_pool(const pool *p, const gram *a, const gram *b) {
    if (a->n != b->n) return (a->n > b->n) - (a->n < b->n);
    for (int64_t k = 0; k < a->n; k++) {
        int r = cmp_items(p, a->item + k, b->item + k);
        if (r) return r;
    }
    return 0;
}

static int cmp_gram_qsort(const void *a, const void *b, void *p) {
    return cmp_gram_pool(p, a, b);
}

/* Pool n-gram g against the sample. */
static int cmp_gram_sample(const pool *p, const gram *g, const sample *s) {
    if (g->n != s->n) return (g->n > s->n) - (g->n < s->n);
    for (int64_t k = 0; k < g->n; k++) {
        int64_t at = s->pos + k * s->stride;
        int r;
        if (p->strs) {
            const char *str = ((char *const *)s->x->data)[at];
            r = cmp_bytes(&p->strs[g->item + k], str ? str : "", str ? strlen(str) : 0);
        } else {
            int64_t v = tm_load_i64(s->x->data, s->x->dtype, (size_t)at);
            int64_t w = p->ints[g->item + k];
            r = (w > v) - (w < v);
        }
        if (r) return r;
    }
    return 0;
}

static const gram *find_gram(const pool *p, const sample *s) {
    int64_t lo = 0, hi = p->n_grams;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int r = cmp_gram_sample(p, &p->grams[mid], s);
        if (!r) return &p->grams[mid];
        if (r < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

/* Collects the n-grams of sizes [min_n, max_n] from the pool laid out by ngram_counts. */
static tm_status build_pool(tm_lower *L, pool *p, int64_t n_items, const int64_t *counts,
                            int n_counts, int64_t min_n, int64_t max_n, int64_t n_indexes) {
    p->grams = malloc((size_t)(n_items ? n_items : 1) * sizeof *p->grams);
    if (!p->grams) return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    int64_t id = 0;
    for (int i = 0; i < n_counts; i++) {
        int64_t n = i + 1, start = counts[i];
        int64_t end = i + 1 < n_counts ? counts[i + 1] : n_items;
        if (start < 0 || end < start || end > n_items)
            return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute 'ngram_counts' entry %d (%lld) is out "
                            "of the pool's %lld items", i, (long long)start, (long long)n_items);
        if ((end - start) % n)
            return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "the pool's %lld items for %lld-grams do not "
                            "make whole %lld-grams", (long long)(end - start), (long long)n, (long long)n);
        for (int64_t it = start; it < end; it += n, id++)
            if (n >= min_n && n <= max_n) p->grams[p->n_grams++] = (gram){n, it, id};
    }
    if (id > n_indexes)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "the pool has %lld n-grams but attribute "
                        "'ngram_indexes' only %lld entries", (long long)id, (long long)n_indexes);
    qsort_r(p->grams, (size_t)p->n_grams, sizeof *p->grams, cmp_gram_qsort, p);
    for (int64_t i = 1; i < p->n_grams; i++)
        if (!cmp_gram_pool(p, &p->grams[i - 1], &p->grams[i]))
            return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "the pool holds a duplicate %lld-gram",
                            (long long)p->grams[i].n);
    return TM_OK;
}

typedef struct params {
    int64_t min_n, max_n, max_skip;
    const int64_t *indexes;
} params;

static void count_hit(const pool *p, const params *pr, sample *s, uint32_t *counts) {
    const gram *g = find_gram(p, s);
    if (g) counts[pr->indexes[g->id]]++;
}

/* Counts one row's n-grams: 1-grams once, longer ones for each skip distance. */
static void count_row(const pool *p, const params *pr, const tm_tensor *x, int64_t row,
                      int64_t len, uint32_t *counts) {
    sample s = {x, 0, 1, 1};
    int64_t first_n = pr->min_n;
    if (first_n == 1) {
        for (int64_t i = 0; i < len; i++) {
            s.pos = row * len + i;
            count_hit(p, pr, &s, counts);
        }
        if (++first_n > pr->max_n) return;
    }
    for (int64_t dist = 1; dist <= pr->max_skip + 1; dist++)
        for (int64_t i = 0; i + dist * (first_n - 1) < len; i++)
            for (int64_t n = first_n; n <= pr->max_n && i + dist * (n - 1) < len; n++) {
                s = (sample){x, row * len + i, dist, n};
                count_hit(p, pr, &s, counts);
            }
}

/* Counts to outputs. IDF and TFIDF weights are read by output position, as ONNX Runtime
 * (and the ONNX reference) do; positions past the weights keep weight 1. */
static void weigh(const uint32_t *counts, float *y, int64_t rows, int64_t width, int mode,
                  const float *w, int64_t n_w) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t i = 0; i < width; i++) {
            uint32_t f = counts[r * width + i];
            float wi = w && i < n_w ? w[i] : 1.0f;
            float v = mode == 0 ? (float)f : mode == 1 ? (f ? wi : 0.0f) : (float)f * wi;
            y[r * width + i] = v;
        }
}

static tm_status check_input(tm_lower *L, const pool *p, tm_val xv) {
    tm_ctx *c = tm_lctx(L);
    tm_dtype dt = tm_vdtype(c, xv);
    if (dt != TM_STRING && dt != TM_INT32 && dt != TM_INT64)
        return tm_lfail(L, TM_ERR_DTYPE, "input X must be string, int32 or int64, got %s", tm_dtype_name(dt));
    if ((dt == TM_STRING) != (p->strs != NULL))
        return tm_lfail(L, TM_ERR_DTYPE, "input X is %s but the pool is %s", tm_dtype_name(dt),
                        p->strs ? "pool_strings" : "pool_int64s");
    int r = tm_vrank(c, xv);
    if (r > 2 || (r == 2 && tm_vdims(c, xv)[0] < 1))
        return tm_lfail(L, TM_ERR_SHAPE, "input X must be [C] or [B, C] with B > 0, got rank %d", r);
    return TM_OK;
}

static tm_status read_params(tm_lower *L, params *pr, int *mode) {
    const char *m = tm_attr_s(L, "mode", "");
    *mode = !strcmp(m, "TF") ? 0 : !strcmp(m, "IDF") ? 1 : !strcmp(m, "TFIDF") ? 2 : -1;
    if (*mode < 0) return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute 'mode' is '%s', expected TF, IDF or TFIDF", m);
    pr->min_n = tm_attr_i(L, "min_gram_length", 0);
    pr->max_n = tm_attr_i(L, "max_gram_length", 0);
    pr->max_skip = tm_attr_i(L, "max_skip_count", -1);
    if (pr->min_n < 1 || pr->max_n < pr->min_n)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attributes 'min_gram_length' (%lld) and "
                        "'max_gram_length' (%lld) must satisfy 1 <= min <= max",
                        (long long)pr->min_n, (long long)pr->max_n);
    if (pr->max_skip < 0)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute 'max_skip_count' must be >= 0, got %lld",
                        (long long)pr->max_skip);
    return TM_OK;
}

static tm_status lower_tfidf(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    params pr;
    int mode;
    if (read_params(L, &pr, &mode)) return c->status;
    const int64_t *counts;
    int n_counts = tm_attr_ints(L, "ngram_counts", &counts);
    int n_indexes = tm_attr_ints(L, "ngram_indexes", &pr.indexes);
    if (n_counts < 1 || n_indexes < 1)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attributes 'ngram_counts' and 'ngram_indexes' are required");
    if (pr.max_n > n_counts)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute 'max_gram_length' (%lld) exceeds the "
                        "%d sizes of 'ngram_counts'", (long long)pr.max_n, n_counts);
    int64_t width = 0;
    for (int i = 0; i < n_indexes; i++) {
        if (pr.indexes[i] < 0)
            return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute 'ngram_indexes' has a negative entry %lld",
                            (long long)pr.indexes[i]);
        if (pr.indexes[i] + 1 > width) width = pr.indexes[i] + 1;
    }
    const float *w = NULL;
    int n_w = tm_attr_floats(L, "weights", &w);
    if (n_w >= 0 && n_w != n_indexes)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute 'weights' has %d entries, "
                        "'ngram_indexes' %d", n_w, n_indexes);
    pool p = {0};
    int n_items = tm_attr_strings(L, "pool_strings", &p.strs);
    if (n_items < 0) {
        p.strs = NULL;
        n_items = tm_attr_ints(L, "pool_int64s", &p.ints);
    }
    if (n_items < 1)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "a non-empty 'pool_strings' or 'pool_int64s' is required");
    tm_val xv = tm_lin(L, 0);
    if (xv == TM_NONE) return tm_ctx_ok(c) ? tm_lfail(L, TM_ERR_PARSE, "input X is missing") : c->status;
    if (check_input(L, &p, xv)) return c->status;
    const tm_tensor *x = tm_host(c, xv);
    tm_tensor *y = NULL;
    uint32_t *freq = NULL;
    if (!x || build_pool(L, &p, n_items, counts, n_counts, pr.min_n, pr.max_n, n_indexes)) goto done;
    int64_t rows = x->rank == 2 ? x->dims[0] : 1;
    int64_t len = x->rank == 0 ? 1 : x->dims[x->rank - 1];
    int64_t dims[2] = {rows, width};
    y = tm_tensor_alloc(TM_FLOAT, x->rank == 2 ? 2 : 1, x->rank == 2 ? dims : dims + 1, NULL);
    freq = calloc((size_t)(rows * width), sizeof *freq);
    if (!y || !freq) {
        tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    for (int64_t r = 0; r < rows && len > 0; r++) count_row(&p, &pr, x, r, len, freq + r * width);
    weigh(freq, y->data, rows, width, mode, n_w >= 0 ? w : NULL, n_w);
    tm_lout(L, 0, tm_val_tensor(c, y, 0));
    y = NULL;
done:
    tm_tensor_free(y);
    free(freq);
    free(p.grams);
    return c->status;
}
TM_REGISTER_OP("", "TfIdfVectorizer", 9, 27, lower_tfidf);
