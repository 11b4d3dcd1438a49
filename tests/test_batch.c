/* tm_batch (src/pipelines/batch.c): generators of different prompts and parameters
 * (greedy, seeded sampling with top-k / top-p, repetition penalty, no-repeat n-grams, an
 * EOS list, different lengths) stepped together in a batch with fewer rows than
 * generators, joining as rows free up (continuous batching), and in one with rows for all
 * (its size class growing and shrinking), give the tokens each gives stepped alone; errors: a full batch, a beam search, another model, stepping a batched
 * generator alone. Tiny LLaMA merged exports, fp32 and q4. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "transmuter.h"
#include "check.h"

enum { GENS = 7, MAXROWS = 8, MAXTOK = 64 };
static int ROWS = 3;   /* the batch's max_rows */
static tm_dtype kv_dtype = TM_FLOAT;

static void config(int i, tm_generation_config *c) {
    tm_generation_config_default(c);
    c->kv_dtype = kv_dtype;
    c->max_new_tokens = 6 + (i * 5) % 13;
    switch (i % 4) {
    case 1:
        c->do_sample = 1;
        c->seed = 1000 + (uint64_t)i;
        c->top_k = 20;
        c->top_p = 0.9;
        c->temperature = 0.8;
        break;
    case 2: c->repetition_penalty = 1.3; break;
    case 3: c->no_repeat_ngram_size = 2; break;
    default: break;
    }
}

static int64_t prompt(int i, int32_t *ids) {
    int64_t n = 2 + (i * 3) % 7;
    for (int64_t k = 0; k < n; k++) ids[k] = (int32_t)((i * 31 + k * 7 + 5) % 90 + 1);
    return n;
}

/* Generator i's tokens stepped alone. */
static int alone(tm_model *m, int i, int32_t *out) {
    tm_generation_config c;
    config(i, &c);
    tm_generator *g = NULL;
    tm_error err = {0};
    int32_t ids[16];
    int64_t n = prompt(i, ids);
    int k = 0, done = 0;
    if (tm_generator_create(m, &c, NULL, &g, &err) != TM_OK || tm_generator_append(g, ids, (size_t)n, &err) != TM_OK) {
        CHECK(0, "generator %d: %s", i, err.message);
        tm_generator_free(g);
        return 0;
    }
    while (!done && k < MAXTOK) {
        if (tm_generator_step(g, &out[k], &done, &err) != TM_OK) {
            CHECK(0, "generator %d step %d: %s", i, k, err.message);
            break;
        }
        k++;
    }
    tm_generator_free(g);
    return k;
}

static void test_continuous(const char *path) {
    tm_model *m = NULL;
    tm_error err = {0};
    if (tm_model_load(path, NULL, &m, &err) != TM_OK) {
        CHECK(0, "%s: %s", path, err.message);
        return;
    }
    int32_t want[GENS][MAXTOK], got[GENS][MAXTOK];
    int n_want[GENS], n_got[GENS] = {0};
    for (int i = 0; i < GENS; i++) n_want[i] = alone(m, i, want[i]);
    tm_batch *b = NULL;
    CHECK(tm_batch_create(m, ROWS, &b, &err) == TM_OK, "%s: %s", path, err.message);
    tm_generator *gens[GENS] = {0};
    int next = 0, finished = 0, steps = 0, at_row[MAXROWS];
    for (int r = 0; r < MAXROWS; r++) at_row[r] = -1;
    while (b && finished < GENS && steps < 500) {
        /* join while rows are free */
        while (next < GENS && tm_batch_count(b) < ROWS) {
            int i = next++, row = -1, done = 0;
            tm_generation_config c;
            config(i, &c);
            int32_t ids[16], t = -1;
            int64_t n = prompt(i, ids);
            if (tm_generator_create(m, &c, NULL, &gens[i], &err) != TM_OK ||
                tm_generator_append(gens[i], ids, (size_t)n, &err) != TM_OK ||
                tm_batch_add(b, gens[i], &row, &t, &done, &err) != TM_OK) {
                CHECK(0, "%s: generator %d joining: %s", path, i, err.message);
                finished++;
                continue;
            }
            got[i][n_got[i]++] = t;
            if (done) finished++;
            else at_row[row] = i;
        }
        int32_t tokens[MAXROWS];
        int done[MAXROWS];
        if (tm_batch_step(b, tokens, done, &err) != TM_OK) {
            CHECK(0, "%s: batch step %d: %s", path, steps, err.message);
            break;
        }
        steps++;
        for (int r = 0; r < ROWS; r++) {
            if (at_row[r] < 0) {
                CHECK(tokens[r] == -1 && done[r] == -1, "%s: free row %d stepped", path, r);
                continue;
            }
            int i = at_row[r];
            if (n_got[i] < MAXTOK) got[i][n_got[i]++] = tokens[r];
            if (done[r]) {
                finished++;
                at_row[r] = -1;
                CHECK(tm_batch_generator(b, r) == NULL, "%s: row %d held after its end", path, r);
            }
        }
    }
    for (int i = 0; i < GENS; i++) {
        int first = 0;
        while (first < n_got[i] && first < n_want[i] && got[i][first] == want[i][first]) first++;
        CHECK(n_got[i] == n_want[i] && first == n_want[i], "%s: generator %d: %d tokens in the "
              "batch, %d alone (first difference at %d)", path, i, n_got[i], n_want[i], first);
    }
    /* every batched generator reads back its whole sequence */
    for (int i = 0; i < GENS && gens[i]; i++) {
        const int32_t *ids = NULL;
        size_t n = 0;
        int32_t p[16];
        int64_t np = prompt(i, p);
        CHECK(tm_generator_sequence(gens[i], 0, &ids, &n, &err) == TM_OK && n == (size_t)np + (size_t)n_want[i] &&
              !memcmp(ids + np, want[i], (size_t)n_want[i] * sizeof *ids),
              "%s: generator %d's sequence", path, i);
    }
    int32_t t;
    CHECK(gens[0] && tm_generator_step(gens[0], &t, NULL, &err) == TM_ERR_INVALID_ARGUMENT,
          "%s: a generator done in a batch stepped again", path);
    for (int i = 0; i < GENS; i++) tm_generator_free(gens[i]);
    tm_batch_free(b);
    tm_model_free(m);
}

static void test_errors(const char *path, const char *other) {
    tm_model *m = NULL, *m2 = NULL;
    tm_error err = {0};
    if (tm_model_load(path, NULL, &m, &err) != TM_OK || tm_model_load(other, NULL, &m2, &err) != TM_OK) {
        CHECK(0, "%s: %s", path, err.message);
        tm_model_free(m);
        return;
    }
    tm_batch *b = NULL;
    CHECK(tm_batch_create(m, 0, &b, &err) == TM_ERR_INVALID_ARGUMENT && !b, "max_rows 0 taken");
    CHECK(tm_batch_create(m, 1, &b, &err) == TM_OK, "%s", err.message);
    tm_generation_config c;
    tm_generation_config_default(&c);
    c.max_new_tokens = 30;
    int32_t ids[3] = {5, 9, 2}, t;
    int row, done;
    tm_generator *g1 = NULL, *g2 = NULL, *beams = NULL, *foreign = NULL;
    tm_generator_create(m, &c, NULL, &g1, &err);
    tm_generator_create(m, &c, NULL, &g2, &err);
    tm_generator_create(m2, &c, NULL, &foreign, &err);
    c.num_beams = 2;
    tm_generator_create(m, &c, NULL, &beams, &err);
    for (tm_generator **g = (tm_generator *[]){g1, g2, beams, foreign}, **e = g + 4; g < e; g++)
        if (*g) tm_generator_append(*g, ids, 3, &err);
    CHECK(tm_batch_add(b, g1, &row, &t, &done, &err) == TM_OK && row == 0, "%s", err.message);
    CHECK(tm_batch_add(b, g1, &row, &t, &done, &err) == TM_ERR_INVALID_ARGUMENT, "added twice");
    CHECK(tm_batch_add(b, g2, &row, &t, &done, &err) == TM_ERR_INVALID_ARGUMENT &&
          strstr(err.message, "full"), "a full batch: %s", err.message);
    CHECK(tm_batch_add(b, beams, &row, &t, &done, &err) == TM_ERR_INVALID_ARGUMENT &&
          strstr(err.message, "beams"), "beams: %s", err.message);
    CHECK(tm_batch_add(b, foreign, &row, &t, &done, &err) == TM_ERR_INVALID_ARGUMENT &&
          strstr(err.message, "another model"), "another model: %s", err.message);
    tm_generator *half = NULL;
    c.num_beams = 1;
    c.kv_dtype = TM_FLOAT16;
    tm_generator_create(m, &c, NULL, &half, &err);
    if (half) tm_generator_append(half, ids, 3, &err);
    tm_batch *b2 = NULL;
    tm_batch_create(m, 2, &b2, &err);
    CHECK(b2 && tm_batch_add(b2, g2, &row, &t, &done, &err) == TM_OK, "%s", err.message);
    CHECK(b2 && tm_batch_add(b2, half, &row, &t, &done, &err) == TM_ERR_INVALID_ARGUMENT &&
          strstr(err.message, "precision"), "a float16 generator in a float32 batch: %s", err.message);
    tm_batch_free(b2);
    tm_generator_free(half);
    CHECK(tm_generator_step(g1, &t, &done, &err) == TM_ERR_INVALID_ARGUMENT &&
          strstr(err.message, "tm_batch"), "a batched generator stepped alone: %s", err.message);
    tm_batch_remove(b, 0);
    CHECK(tm_batch_count(b) == 0 && tm_batch_generator(b, 0) == NULL, "remove");
    CHECK(tm_batch_step(b, NULL, NULL, &err) == TM_OK, "an empty batch's step: %s", err.message);
    tm_generator_free(g1);
    tm_generator_free(g2);
    tm_generator_free(beams);
    tm_generator_free(foreign);
    tm_batch_free(b);
    tm_batch_free(NULL);
    tm_model_free(m);
    tm_model_free(m2);
}

int main(int argc, char **argv) {
    const char *root = argc > 1 ? argv[1] : "tests/data/tiny";
    char path[1024], other[1024];
    snprintf(path, sizeof path, "%s/llama/decoder_model_merged.onnx", root);
    test_continuous(path);
    snprintf(path, sizeof path, "%s/llama/decoder_model_merged_q4.onnx", root);
    test_continuous(path);
    snprintf(path, sizeof path, "%s/llama/decoder_model_merged.onnx", root);
    snprintf(other, sizeof other, "%s/llama/decoder_model_merged_q4.onnx", root);
    test_errors(path, other);
    /* 8 rows for 7 generators: the batch grows through its classes (1, 2, 4, 8) as they
     * join and shrinks (8 to 2) as they end, each change moving the held rows */
    ROWS = 8;
    test_continuous(path);
    ROWS = 3;
    /* float16 caches: the batch takes its generators' precision */
    kv_dtype = TM_FLOAT16;
    test_continuous(path);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
