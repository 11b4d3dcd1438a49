/* tm_batch: the decode steps of several generators as one run of the model (continuous
 * batching). One tm_decoder of max_rows sequences holds a row per generator; a generator
 * joins after its prompt has run on its own decoder (tm__decoder_put_row copies that
 * cache in), each step feeds every row its generator's last token, and each generator
 * takes its row of the logits (tm__generator_take_logits: its own processors and choice).
 * Free rows run a one-token sequence of their own, masked from the rest; a generator that
 * ends frees its row at once. */
#include <stdlib.h>
#include <string.h>
#include "generation.h"
#include "../core/status.h"
#include "../runtime/runtime.h"

struct tm_batch {
    tm_model *m;
    int rows;
    tm_dtype kv_dtype;    /* the decoder's caches: its generators' */
    tm_decoder *dec;
    tm_generator **gen;   /* per row, NULL: free */
    int64_t *ids;         /* per row: the step's input */
    int count;
};

/* The batch decoder, its caches in kv_dtype, every row free. */
static tm_status make_decoder(tm_batch *b, tm_dtype kv_dtype, tm_error *err) {
    tm_decoder_options o;
    tm_decoder_options_default(&o);
    o.last_logits_only = 1;
    o.batch = b->rows;
    o.kv_dtype = kv_dtype;
    tm_decoder *d = NULL;
    tm_status st = tm_decoder_create(b->m, &o, &d, err);
    if (st != TM_OK) return st;
    tm_decoder_free(b->dec);
    b->dec = d;
    b->kv_dtype = kv_dtype;
    for (int r = 0; r < b->rows; r++) tm__decoder_free_row(d, r);
    return TM_OK;
}

tm_status tm_batch_create(tm_model *model, int max_rows, tm_batch **out, tm_error *err) {
    if (!model || !out) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_batch_create: NULL argument");
    if (max_rows < 1 || max_rows > 4096)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_batch_create: max_rows %d is not "
                        "between 1 and 4096", max_rows);
    tm_batch *b = calloc(1, sizeof *b);
    if (!b) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    b->m = model;
    b->rows = max_rows;
    b->gen = calloc((size_t)max_rows, sizeof *b->gen);
    b->ids = calloc((size_t)max_rows, sizeof *b->ids);
    tm_status st = b->gen && b->ids ? TM_OK : tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    if (st == TM_OK) st = make_decoder(b, TM_FLOAT, err);
    if (st != TM_OK) {
        tm_batch_free(b);
        return st;
    }
    *out = b;
    return TM_OK;
}

void tm_batch_free(tm_batch *b) {
    if (!b) return;
    tm_decoder_free(b->dec);
    free(b->gen);
    free(b->ids);
    free(b);
}

tm_status tm_batch_add(tm_batch *b, tm_generator *g, int *row, int32_t *token, int *done,
                       tm_error *err) {
    if (!b || !g || !row) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_batch_add: NULL argument");
    if (!tm__generator_batchable(g, b->m))
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_batch_add: the generator runs another "
                        "model or searches beams (a batch takes one sequence per generator)");
    if (tm__generator_done(g))
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_batch_add: generation has ended");
    int free_row = -1;
    for (int r = 0; r < b->rows && free_row < 0; r++) {
        if (b->gen[r] == g)
            return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_batch_add: the generator is in "
                            "the batch already (row %d)", r);
        if (!b->gen[r]) free_row = r;
    }
    if (free_row < 0)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_batch_add: the batch is full (%d rows)",
                        b->rows);
    /* An empty batch takes the cache dtype of the generator that comes; one in use only
     * generators of its own. */
    tm_dtype want = tm__generator_kv_dtype(g) == TM_FLOAT16 ? TM_FLOAT16 : TM_FLOAT;
    if (want != b->kv_dtype) {
        if (b->count)
            return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_batch_add: the generator keeps its "
                            "cache in another precision (kv_dtype) than the batch's");
        tm_status st = make_decoder(b, want, err);
        if (st != TM_OK) return st;
    }
    int32_t t = -1;
    int d = 0;
    tm_status st = TM_OK;
    if (!tm__generator_started(g)) {
        st = tm_generator_step(g, &t, &d, err);
        if (st != TM_OK) return st;
    }
    if (token) *token = t;
    if (done) *done = d;
    *row = -1;
    if (d) return TM_OK;
    st = tm__decoder_put_row(b->dec, free_row, tm__generator_decoder(g), err);
    if (st != TM_OK) return st;
    tm__generator_set_batched(g);
    b->gen[free_row] = g;
    b->count++;
    *row = free_row;
    return TM_OK;
}

tm_status tm_batch_step(tm_batch *b, int32_t *tokens, int *done, tm_error *err) {
    if (!b) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_batch_step: NULL batch");
    for (int r = 0; r < b->rows; r++) {
        if (tokens) tokens[r] = -1;
        if (done) done[r] = -1;
    }
    if (!b->count) return TM_OK;
    for (int r = 0; r < b->rows; r++) b->ids[r] = b->gen[r] ? tm__generator_last_token(b->gen[r]) : 0;
    tm_status st = tm_decoder_append_batch(b->dec, b->ids, 1, NULL, err);
    if (st != TM_OK) return st;
    const tm_tensor *logits = tm_decoder_logits(b->dec);
    /* Each generator's choice is its own: one that fails (out of memory, a stop string
     * that cannot be decoded) is reported after the others have stepped. */
    tm_status first = TM_OK;
    for (int r = 0; r < b->rows; r++) {
        tm_generator *g = b->gen[r];
        if (!g) continue;
        int32_t t = -1;
        int d = 0;
        tm_error e2 = {0};
        st = tm__generator_take_logits(g, logits, r, &t, &d, &e2);
        if (st != TM_OK) {
            if (first == TM_OK) {
                first = st;
                if (err) *err = e2;
            }
            d = 1;   /* it cannot go on: it leaves */
        }
        if (tokens) tokens[r] = t;
        if (done) done[r] = d;
        if (d) tm_batch_remove(b, r);
    }
    return first;
}

tm_generator *tm_batch_generator(const tm_batch *b, int row) {
    return b && row >= 0 && row < b->rows ? b->gen[row] : NULL;
}

int tm_batch_count(const tm_batch *b) { return b ? b->count : 0; }

void tm_batch_remove(tm_batch *b, int row) {
    if (!b || row < 0 || row >= b->rows || !b->gen[row]) return;
    b->gen[row] = NULL;
    b->count--;
    tm__decoder_free_row(b->dec, row);
}
