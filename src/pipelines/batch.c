/* tm_batch: the decode steps of several generators as one run of the model (continuous
 * batching). A tm_decoder of B sequences holds a row per generator; a generator joins
 * after its prompt has run on its own decoder (tm__decoder_put_row copies that cache in),
 * each step feeds every row its generator's last token, and each generator takes its row
 * of the logits (tm__generator_take_logits: its own processors and choice). A generator
 * that ends frees its row at once; free rows run a one-token sequence of their own.
 * B follows the generators held, in size classes (1, 2, 4, ... up to max_rows): a step
 * costs what its rows cost, so one stream does not pay for sixteen. A class that is too
 * small grows when a generator joins, one four times too large shrinks after a step; each
 * change copies the held rows' caches into a decoder of the new class (its plans are the
 * model's, traced once per class). The caller's row numbers are slots, which stay while a
 * generator is in the batch whatever its row in the decoder. */
#include <stdlib.h>
#include <string.h>
#include "generation.h"
#include "../core/status.h"
#include "../runtime/runtime.h"

struct tm_batch {
    tm_model *m;
    int rows;             /* max_rows: the slots */
    tm_dtype kv_dtype;    /* the decoder's caches: its generators' */
    tm_decoder *dec;      /* B = cls sequences */
    int cls;
    tm_generator **gen;   /* per slot, NULL: free */
    int *phys;            /* per slot: its row in dec, or -1 */
    int *slot_of;         /* per row of dec: its slot, or -1 */
    int64_t *ids;         /* per row of dec: the step's input */
    int count;
};

/* The class for n generators: the smallest power of two from n, at most max_rows. */
static int class_for(const tm_batch *b, int n) {
    int c = 1;
    while (c < n) c *= 2;
    return c < b->rows ? c : b->rows;
}

/* A decoder of B sequences, caches in kv_dtype, every row free. */
static tm_status new_decoder(tm_batch *b, int B, tm_dtype kv_dtype, tm_decoder **out,
                             tm_error *err) {
    tm_decoder_options o;
    tm_decoder_options_default(&o);
    o.last_logits_only = 1;
    o.batch = B;
    o.kv_dtype = kv_dtype;
    tm_status st = tm_decoder_create(b->m, &o, out, err);
    if (st != TM_OK) return st;
    for (int r = 0; r < B; r++) tm__decoder_free_row(*out, r);
    return TM_OK;
}

/* The held generators move into a decoder of B rows (in slot order). On error nothing
 * has changed. */
static tm_status migrate(tm_batch *b, int B, tm_dtype kv_dtype, tm_error *err) {
    tm_decoder *nd = NULL;
    tm_status st = new_decoder(b, B, kv_dtype, &nd, err);
    int next = 0;
    for (int s = 0; st == TM_OK && s < b->rows; s++)
        if (b->gen[s]) st = tm__decoder_put_row(nd, next++, b->dec, b->phys[s], err);
    if (st != TM_OK) {
        tm_decoder_free(nd);
        return st;
    }
    for (int r = 0; r < b->rows; r++) b->slot_of[r] = -1;
    next = 0;
    for (int s = 0; s < b->rows; s++) {
        b->phys[s] = b->gen[s] ? next++ : -1;
        if (b->phys[s] >= 0) b->slot_of[b->phys[s]] = s;
    }
    tm_decoder_free(b->dec);
    b->dec = nd;
    b->cls = B;
    b->kv_dtype = kv_dtype;
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
    b->phys = malloc((size_t)max_rows * sizeof *b->phys);
    b->slot_of = malloc((size_t)max_rows * sizeof *b->slot_of);
    b->ids = calloc((size_t)max_rows, sizeof *b->ids);
    tm_status st = b->gen && b->phys && b->slot_of && b->ids ? TM_OK
                                                             : tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (int r = 0; st == TM_OK && r < max_rows; r++) b->phys[r] = b->slot_of[r] = -1;
    if (st == TM_OK) st = new_decoder(b, 1, TM_FLOAT, &b->dec, err);
    if (st != TM_OK) {
        tm_batch_free(b);
        return st;
    }
    b->cls = 1;
    b->kv_dtype = TM_FLOAT;
    *out = b;
    return TM_OK;
}

void tm_batch_free(tm_batch *b) {
    if (!b) return;
    tm_decoder_free(b->dec);
    free(b->gen);
    free(b->phys);
    free(b->slot_of);
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
    int slot = -1;
    for (int s = 0; s < b->rows; s++) {
        if (b->gen[s] == g)
            return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_batch_add: the generator is in "
                            "the batch already (row %d)", s);
        if (!b->gen[s] && slot < 0) slot = s;
    }
    if (slot < 0)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_batch_add: the batch is full (%d rows)",
                        b->rows);
    /* An empty batch takes the cache dtype of the generator that comes; one in use only
     * generators of its own. */
    tm_dtype want = tm__generator_kv_dtype(g) == TM_FLOAT16 ? TM_FLOAT16 : TM_FLOAT;
    if (want != b->kv_dtype && b->count)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_batch_add: the generator keeps its "
                        "cache in another precision (kv_dtype) than the batch's");
    tm_status st = TM_OK;
    if (want != b->kv_dtype) st = migrate(b, b->cls, want, err);
    if (st != TM_OK) return st;
    int32_t t = -1;
    int d = 0;
    if (!tm__generator_started(g)) {
        st = tm_generator_step(g, &t, &d, err);
        if (st != TM_OK) return st;
    }
    if (token) *token = t;
    if (done) *done = d;
    *row = -1;
    if (d) return TM_OK;
    if (b->count + 1 > b->cls) st = migrate(b, class_for(b, b->count + 1), b->kv_dtype, err);
    int r = 0;
    while (st == TM_OK && r < b->cls && b->slot_of[r] >= 0) r++;
    if (st == TM_OK) st = tm__decoder_put_row(b->dec, r, tm__generator_decoder(g), 0, err);
    if (st != TM_OK) return st;
    tm__generator_set_batched(g);
    b->gen[slot] = g;
    b->phys[slot] = r;
    b->slot_of[r] = slot;
    b->count++;
    *row = slot;
    return TM_OK;
}

tm_status tm_batch_step(tm_batch *b, int32_t *tokens, int *done, tm_error *err) {
    if (!b) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_batch_step: NULL batch");
    for (int s = 0; s < b->rows; s++) {
        if (tokens) tokens[s] = -1;
        if (done) done[s] = -1;
    }
    if (!b->count) return TM_OK;
    for (int r = 0; r < b->cls; r++)
        b->ids[r] = b->slot_of[r] >= 0 ? tm__generator_last_token(b->gen[b->slot_of[r]]) : 0;
    tm_status st = tm_decoder_append_batch(b->dec, b->ids, 1, NULL, err);
    if (st != TM_OK) return st;
    const tm_tensor *logits = tm_decoder_logits(b->dec);
    /* Each generator's choice is its own: one that fails (out of memory, a stop string
     * that cannot be decoded) is reported after the others have stepped. */
    tm_status first = TM_OK;
    for (int s = 0; s < b->rows; s++) {
        tm_generator *g = b->gen[s];
        if (!g) continue;
        int32_t t = -1;
        int d = 0;
        tm_error e2 = {0};
        st = tm__generator_take_logits(g, logits, b->phys[s], &t, &d, &e2);
        if (st != TM_OK) {
            if (first == TM_OK) {
                first = st;
                if (err) *err = e2;
            }
            d = 1;   /* it cannot go on: it leaves */
        }
        if (tokens) tokens[s] = t;
        if (done) done[s] = d;
        if (d) tm_batch_remove(b, s);
    }
    /* A class four times too large shrinks (a failure to leaves it as it is: it works). */
    if (b->cls > 1 && b->count * 4 <= b->cls) {
        tm_error e3 = {0};
        migrate(b, class_for(b, b->count ? b->count : 1), b->kv_dtype, &e3);
    }
    return first;
}

tm_generator *tm_batch_generator(const tm_batch *b, int row) {
    return b && row >= 0 && row < b->rows ? b->gen[row] : NULL;
}

int tm_batch_count(const tm_batch *b) { return b ? b->count : 0; }

void tm_batch_remove(tm_batch *b, int row) {
    if (!b || row < 0 || row >= b->rows || !b->gen[row]) return;
    tm__decoder_free_row(b->dec, b->phys[row]);
    b->slot_of[b->phys[row]] = -1;
    b->phys[row] = -1;
    b->gen[row] = NULL;
    b->count--;
}
