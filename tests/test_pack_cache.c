/* The per-model cache of packed weights (src/runtime/pack_cache.c): plans of one model for
 * different input shapes (a decoder's every past length) pack each weight once between
 * them, results unchanged, and the cache goes with the model. Uses the tiny BERT export
 * in tests/data; reaches into the model (runtime.h) to count the cache's entries. */
#include <stdio.h>
#include <string.h>
#include "../src/runtime/runtime.h"
#include "../src/runtime/pack_cache.h"

#include "check.h"

#define MODEL "tests/data/tiny/bert/model.onnx"

/* Runs a plan for sequence length len; output 0 into *out (caller frees). */
static int run_plan(tm_model *m, int len, tm_tensor **out) {
    int64_t dims[2] = {1, len};
    tm_tensor *t[3];
    for (int i = 0; i < 3; i++) {
        t[i] = tm_tensor_new(TM_INT64, 2, dims);
        int64_t *d = tm_tensor_data(t[i]);
        for (int j = 0; j < len; j++) d[j] = i == 0 ? 3 + 7 * j % 50 : i == 1 ? 1 : 0;
    }
    const char *names[3] = {"input_ids", "attention_mask", "token_type_ids"};
    tm_plan *plan = NULL;
    tm_session *s = NULL;
    tm_error err;
    tm_status st = tm_plan_create(m, 3, names, (const tm_tensor *const *)t, NULL, &plan, &err);
    if (st == TM_OK) st = tm_session_create(plan, &s, &err);
    *out = NULL;
    if (st == TM_OK) st = tm_session_run(s, 3, names, (const tm_tensor *const *)t, out, &err);
    if (st != TM_OK) printf("FAIL: plan for length %d: %s\n", len, err.message);
    tm_session_free(s);
    tm_plan_free(plan);
    for (int i = 0; i < 3; i++) tm_tensor_free(t[i]);
    return st == TM_OK;
}

int main(void) {
    tm_model *m = NULL;
    tm_error err;
    if (tm_model_load(MODEL, NULL, &m, &err) != TM_OK) {
        printf("FAIL: %s\n0 passed, 1 failed\n", err.message);
        return 1;
    }
    tm_tensor *a = NULL, *b = NULL, *c = NULL;
    CHECK(run_plan(m, 5, &a), "a plan for length 5");
    size_t first = tm__pack_cache_count(m->packed);
    CHECK(first > 0, "the first plan packed its weights into the model's cache (%zu)", first);
    CHECK(run_plan(m, 9, &b), "a plan for length 9");
    CHECK(tm__pack_cache_count(m->packed) == first,
          "a second plan shares the packed weights: %zu entries after it, %zu before",
          tm__pack_cache_count(m->packed), first);
    /* The same shape again, after the plans that filled the cache are gone: the same
     * output as the first plan, bit for bit. */
    CHECK(run_plan(m, 5, &c), "a plan for length 5 again");
    CHECK(a && c && tm_tensor_nbytes(a) == tm_tensor_nbytes(c) &&
          !memcmp(tm_tensor_data_const(a), tm_tensor_data_const(c), tm_tensor_nbytes(a)),
          "a plan on cached weights gives the first plan's output");
    tm_tensor_free(a);
    tm_tensor_free(b);
    tm_tensor_free(c);
    tm_model_free(m);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
