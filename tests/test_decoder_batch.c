/* Decoders of several sequences (tm_decoder_options.batch, src/runtime/decoder.c): prompts
 * of different lengths padded on the left and stepped together give each row the logits
 * its sequence gets alone; rows filled from decoders of one sequence and freed between
 * steps (tm__decoder_put_row / tm__decoder_free_row, as tm_batch uses them) likewise,
 * including a batch that grows when a longer sequence joins and one that drops the
 * padding no row reads any more; a batch step allocates nothing; an export without
 * position_ids takes only sequences of the batch's length; float16 caches likewise. On the tiny LLaMA and
 * GPT-2 merged exports (fp32 and q4). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "transmuter.h"
#include "../src/runtime/runtime.h"
#include "check.h"
#include "count_allocs.h"

enum { MAXB = 4, MAXLEN = 96 };
static tm_dtype kv_dtype = TM_FLOAT;   /* the caches' (tm_decoder_options.kv_dtype) */

/* Relative difference of two float rows. */
static double row_err(const float *a, const float *b, int64_t n) {
    double diff = 0, scale = 0;
    for (int64_t k = 0; k < n; k++) {
        double d = fabs((double)a[k] - (double)b[k]);
        if (!(d <= diff)) diff = d;
        if (fabs((double)b[k]) > scale) scale = fabs((double)b[k]);
    }
    return scale ? diff / scale : diff;
}

/* The last position's logits of row r of a decoder's last append (float32). */
static const float *last_row(const tm_decoder *d, int64_t r, int64_t *vocab) {
    const tm_tensor *t = tm_decoder_logits(d);
    if (!t || tm_tensor_rank(t) != 3 || tm_tensor_dtype(t) != TM_FLOAT) return NULL;
    const int64_t *dims = tm_tensor_dims(t);
    *vocab = dims[2];
    return (const float *)tm_tensor_data_const(t) + ((r * dims[1]) + dims[1] - 1) * dims[2];
}

static int64_t token_at(int seq, int64_t k) { return (int64_t)((seq * 37 + k * 11 + 3) % 60 + 1); }

/* A decoder of one sequence after its prompt. */
static tm_decoder *single(tm_model *m, int seq, int64_t plen) {
    tm_decoder_options o;
    tm_decoder_options_default(&o);
    o.last_logits_only = 1;
    o.kv_dtype = kv_dtype;
    tm_decoder *d = NULL;
    tm_error err = {0};
    int64_t ids[MAXLEN];
    for (int64_t k = 0; k < plen; k++) ids[k] = token_at(seq, k);
    if (tm_decoder_create(m, &o, &d, &err) != TM_OK || tm_decoder_append(d, ids, plen, &err) != TM_OK) {
        CHECK(0, "single %d: %s", seq, err.message);
        tm_decoder_free(d);
        return NULL;
    }
    return d;
}

/* Sequence seq alone: a prompt of plen tokens, then `steps` tokens one at a time; the
 * logits after the prompt and after each step into want (steps + 1 rows of vocab). */
static int alone(tm_model *m, int seq, int64_t plen, int steps, float *want, int64_t *vocab) {
    tm_decoder *d = single(m, seq, plen);
    tm_error err = {0};
    int64_t ids[MAXLEN];
    for (int64_t k = 0; k < plen + steps; k++) ids[k] = token_at(seq, k);
    int ok = d != NULL;
    for (int s = 0; ok && s <= steps; s++) {
        const float *l = last_row(d, 0, vocab);
        if (!l) ok = 0;
        else memcpy(want + (size_t)s * (size_t)*vocab, l, (size_t)*vocab * sizeof *l);
        if (ok && s < steps) ok = tm_decoder_append(d, ids + plen + s, 1, &err) == TM_OK;
    }
    if (!ok) CHECK(0, "alone %d: %s", seq, err.message);
    tm_decoder_free(d);
    return ok;
}

/* B prompts of different lengths, left-padded into one append, then steps together. */
static void test_padded_prompts(const char *path, double tol) {
    tm_model *m = NULL;
    tm_error err = {0};
    if (tm_model_load(path, NULL, &m, &err) != TM_OK) {
        CHECK(0, "%s: %s", path, err.message);
        return;
    }
    enum { B = 3, STEPS = 6 };
    /* An export without position_ids numbers positions by the cache's length: padding
     * would shift them, so its prompts are of one length (the batch as such checked). */
    int positions = tm_model_input_index(m, "position_ids") >= 0;
    const int64_t plen[B] = {positions ? 4 : 7, 7, positions ? 2 : 7};
    int64_t vocab = 0, longest = 7;
    float *want[B];
    for (int b = 0; b < B; b++) {
        want[b] = malloc(sizeof(float) * 70000 * (STEPS + 1));
        alone(m, b, plen[b], STEPS, want[b], &vocab);
    }
    tm_decoder_options o;
    tm_decoder_options_default(&o);
    o.last_logits_only = 1;
    o.kv_dtype = kv_dtype;
    o.batch = B;
    tm_decoder *d = NULL;
    CHECK(tm_decoder_create(m, &o, &d, &err) == TM_OK, "%s: %s", path, err.message);
    int64_t ids[B * 7];
    uint8_t mask[B * 7];
    for (int b = 0; b < B; b++)
        for (int64_t k = 0; k < longest; k++) {
            int64_t pad = longest - plen[b];
            ids[b * longest + k] = k < pad ? 0 : token_at(b, k - pad);
            mask[b * longest + k] = k >= pad;
        }
    int ok = d && tm_decoder_append_batch(d, ids, longest, mask, &err) == TM_OK;
    CHECK(ok, "%s: padded prompts: %s", path, err.message);
    long allocs = 0;
    for (int s = 0; ok && s <= STEPS; s++) {
        for (int b = 0; b < B; b++) {
            int64_t v = 0;
            const float *l = last_row(d, b, &v);
            double e = l && v == vocab ? row_err(l, want[b] + (size_t)s * (size_t)vocab, vocab) : INFINITY;
            CHECK(e <= tol, "%s: row %d step %d: logits %g from its sequence's alone", path, b, s, e);
        }
        if (s == STEPS) break;
        int64_t next[B];
        for (int b = 0; b < B; b++) next[b] = token_at(b, plen[b] + s);
        long before = process_allocs;
        ok = tm_decoder_append_batch(d, next, 1, NULL, &err) == TM_OK;
        if (s >= 2) allocs += process_allocs - before;   /* plans and sessions made by then */
        CHECK(ok, "%s: step %d: %s", path, s, err.message);
    }
    CHECK(allocs == 0, "%s: batch steps allocated %ld times", path, allocs);
    CHECK(tm_decoder_append(d, ids, 1, &err) == TM_ERR_INVALID_ARGUMENT && strstr(err.message, "append_batch"),
          "%s: tm_decoder_append on a batch: %s", path, err.message);
    tm_decoder_free(d);
    for (int b = 0; b < B; b++) free(want[b]);
    tm_model_free(m);
}

/* Rows come and go: a batch of 2 whose rows are filled from single decoders (a longer one
 * growing the batch), stepped, freed and refilled; the last refill leaves more than half
 * the cache as padding that no row reads, which the next step drops. Each row's logits
 * against its sequence alone. */
static void test_rows(const char *path, double tol) {
    tm_model *m = NULL;
    tm_error err = {0};
    if (tm_model_load(path, NULL, &m, &err) != TM_OK) {
        CHECK(0, "%s: %s", path, err.message);
        return;
    }
    enum { SEQS = 4, STEPS = 60 };
    /* seq: prompt length, the batch step it joins at, its row, steps it runs */
    static const struct { int64_t plen; int join, row, steps; } plan[SEQS] = {
        {3, 0, 0, 45}, {9, 4, 1, 10}, {2, 40, 1, 20}, {5, 50, 0, 8},
    };
    int64_t vocab = 0;
    float *want[SEQS];
    for (int q = 0; q < SEQS; q++) {
        want[q] = malloc(sizeof(float) * 70000 * (size_t)(plan[q].steps + 1));
        alone(m, q, plan[q].plen, plan[q].steps, want[q], &vocab);
    }
    tm_decoder_options o;
    tm_decoder_options_default(&o);
    o.last_logits_only = 1;
    o.kv_dtype = kv_dtype;
    o.batch = 2;
    tm_decoder *d = NULL;
    CHECK(tm_decoder_create(m, &o, &d, &err) == TM_OK, "%s: %s", path, err.message);
    if (d && tm_model_input_index(m, "position_ids") < 0) {
        /* Positions numbered by the cache's length: sequences of other lengths refused. */
        tm_decoder *a = single(m, 0, 3), *b = single(m, 1, 5);
        /* (an empty batch takes any length: b first, then a in its place) */
        tm__decoder_free_row(d, 0);
        tm__decoder_free_row(d, 1);
        CHECK(a && b && tm__decoder_put_row(d, 0, b, 0, &err) == TM_OK, "%s: %s", path, err.message);
        CHECK(a && b && tm__decoder_put_row(d, 0, a, 0, &err) == TM_OK, "%s: %s", path, err.message);
        CHECK(tm__decoder_put_row(d, 1, b, 0, &err) == TM_ERR_UNSUPPORTED &&
              strstr(err.message, "position_ids"), "%s: a longer row joined: %s", path, err.message);
        tm_decoder_free(a);
        tm_decoder_free(b);
        tm_decoder_free(d);
        for (int q = 0; q < SEQS; q++) free(want[q]);
        tm_model_free(m);
        return;
    }
    int holder[2] = {-1, -1}, done[SEQS] = {0};
    int64_t before = -1, after = -1;
    if (d) tm__decoder_free_row(d, 0), tm__decoder_free_row(d, 1);
    for (int step = 0; d && step < STEPS; step++) {
        for (int q = 0; q < SEQS; q++) {
            if (plan[q].join != step) continue;
            int r = plan[q].row;
            tm_decoder *s = single(m, q, plan[q].plen);
            CHECK(s && tm__decoder_put_row(d, r, s, 0, &err) == TM_OK, "%s: seq %d into row %d: %s",
                  path, q, r, err.message);
            /* its first logits are the prompt's, in the single decoder */
            int64_t v = 0;
            const float *l = s ? last_row(s, 0, &v) : NULL;
            double e = l && v == vocab ? row_err(l, want[q], vocab) : INFINITY;
            CHECK(e <= tol, "%s: seq %d prompt: %g", path, q, e);
            tm_decoder_free(s);
            holder[r] = q;
            done[q] = 0;
        }
        if (step == 45) before = tm_decoder_length(d);
        int64_t next[2] = {0, 0};
        for (int r = 0; r < 2; r++)
            if (holder[r] >= 0) {
                int q = holder[r];
                next[r] = token_at(q, plan[q].plen + done[q]);
            }
        if (tm_decoder_append_batch(d, next, 1, NULL, &err) != TM_OK) {
            CHECK(0, "%s: step %d: %s", path, step, err.message);
            break;
        }
        if (step == 45) after = tm_decoder_length(d);
        for (int r = 0; r < 2; r++) {
            int q = holder[r];
            if (q < 0) continue;
            done[q]++;
            int64_t v = 0;
            const float *l = last_row(d, r, &v);
            double e = l && v == vocab ? row_err(l, want[q] + (size_t)done[q] * (size_t)vocab, vocab) : INFINITY;
            CHECK(e <= tol, "%s: seq %d (row %d) step %d: logits %g from its sequence's alone",
                  path, q, r, done[q], e);
            if (done[q] == plan[q].steps) {
                tm__decoder_free_row(d, r);
                holder[r] = -1;
            }
        }
    }
    /* Seq 0 ended at step 44: from step 45 row 1's seq 2, joined at step 40, is the only
     * one, and the positions before it no row reads were dropped. */
    CHECK(before > 40 && after >= 0 && after < before, "%s: the padding no row reads was "
          "not dropped (%lld positions before step 45, %lld after)", path, (long long)before,
          (long long)after);
    tm_decoder_free(d);
    for (int q = 0; q < SEQS; q++) free(want[q]);
    tm_model_free(m);
}

int main(int argc, char **argv) {
    const char *root = argc > 1 ? argv[1] : "tests/data/tiny";
    static const struct { const char *file; double tol; } models[] = {
        {"llama/decoder_model_merged.onnx", 1e-5},
        {"llama/decoder_model_merged_q4.onnx", 1e-4},
        {"gpt2/decoder_model_merged.onnx", 1e-5},
        {"gpt2/decoder_with_past_model.onnx", 1e-5},
    };
    char path[1024];
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", root, models[i].file);
        test_padded_prompts(path, models[i].tol);
        test_rows(path, models[i].tol);
    }
    /* float16 caches, in the batch as in each sequence alone */
    kv_dtype = TM_FLOAT16;
    snprintf(path, sizeof path, "%s/llama/decoder_model_merged.onnx", root);
    test_padded_prompts(path, 1e-5);
    test_rows(path, 1e-5);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
