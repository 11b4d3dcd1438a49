/* tm_generator_set_logits_fn (src/pipelines/generator_logprobs.c): the caller's processor
 * sees every step's processed row, greedy takes that row's argmax, a change to the row
 * steers the choice, sampling is unaffected by a processor that only reads, NULL
 * removes it, and a NULL generator is an error. On tests/data/pipelines/llama-chat. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "transmuter.h"
#include "check.h"

#define REPO "tests/data/pipelines/llama-chat"

typedef struct seen {
    int calls;
    int64_t argmax[16];
    double lse[16];           /* log-sum-exp of the row: its log-softmax is x - lse */
    size_t len[16];           /* ids so far at each call */
    int ban;                  /* 1: the argmax is set to -inf */
} seen;

static void hook(void *user, float *s, int64_t vocab, const int32_t *ids, size_t n) {
    (void)ids;
    seen *w = user;
    int64_t best = 0;
    for (int64_t v = 1; v < vocab; v++)
        if (s[v] > s[best]) best = v;
    double sum = 0;
    for (int64_t v = 0; v < vocab; v++) sum += exp((double)s[v] - s[best]);
    if (w->calls < 16) {
        w->argmax[w->calls] = best;
        w->lse[w->calls] = s[best] + log(sum);
        w->len[w->calls] = n;
    }
    w->calls++;
    if (w->ban) s[best] = -INFINITY;
}

/* Steps a fresh generator k times with the hook (or none); the tokens into out. */
static void run(tm_model *m, const tm_generation_config *cfg, seen *w, int k, int32_t *out) {
    tm_generator *g = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    const int32_t prompt[] = {1, 15043, 3186};
    CHECK(tm_generator_create(m, cfg, NULL, &g, &err) == TM_OK, "create: %s", err.message);
    if (!g) return;
    CHECK(tm_generator_append(g, prompt, 3, &err) == TM_OK, "append: %s", err.message);
    if (w) CHECK(tm_generator_set_logits_fn(g, hook, w, &err) == TM_OK, "set: %s", err.message);
    for (int i = 0; i < k; i++) {
        int done = 0;
        CHECK(tm_generator_step(g, &out[i], &done, &err) == TM_OK, "step %d: %s", i, err.message);
    }
    tm_generator_free(g);
}

int main(void) {
    tm_model *m = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    if (tm_model_load(REPO "/onnx/model.onnx", NULL, &m, &err) != TM_OK) {
        printf("FAIL load: %s\n0 passed, 1 failed\n", err.message);
        return 1;
    }
    tm_generation_config cfg;
    tm_generation_config_default(&cfg);
    cfg.max_new_tokens = 8;
    cfg.eos_token_ids = NULL;
    cfg.n_eos_token_ids = 0;

    int32_t plain[8], seen_tokens[8], banned[8];
    run(m, &cfg, NULL, 6, plain);
    seen w = {0};
    run(m, &cfg, &w, 6, seen_tokens);
    CHECK(w.calls == 6, "one call per greedy step (%d)", w.calls);
    int same = 1;
    for (int i = 0; i < 6; i++) same &= plain[i] == seen_tokens[i] && w.argmax[i] == plain[i];
    CHECK(same, "greedy takes the argmax of the row the processor sees; reading changes nothing");
    CHECK(w.len[0] == 3 && w.len[5] == 8, "ids so far: prompt, then one more per step (%zu, %zu)", w.len[0], w.len[5]);
    CHECK(isfinite(w.lse[0]) && w.lse[0] > -1e30, "a finite log-sum-exp (%g)", w.lse[0]);

    seen b = {0};
    b.ban = 1;
    run(m, &cfg, &b, 1, banned);
    CHECK(banned[0] != plain[0], "a processor that bans the argmax steers the choice (%d vs %d)", banned[0], plain[0]);

    /* sampling: a reading processor does not change the draws */
    cfg.do_sample = 1;
    cfg.seed = 11;
    cfg.temperature = 0.7;
    int32_t s1[8], s2[8];
    run(m, &cfg, NULL, 6, s1);
    seen w2 = {0};
    run(m, &cfg, &w2, 6, s2);
    CHECK(!memcmp(s1, s2, sizeof(int32_t) * 6) && w2.calls == 6, "sampling: same tokens with a reading processor");

    /* NULL removes it */
    tm_generator *g = NULL;
    cfg.do_sample = 0;
    const int32_t prompt[] = {1, 15043};
    seen w3 = {0};
    int32_t t;
    if (tm_generator_create(m, &cfg, NULL, &g, &err) == TM_OK) {
        tm_generator_append(g, prompt, 2, &err);
        tm_generator_set_logits_fn(g, hook, &w3, &err);
        tm_generator_set_logits_fn(g, NULL, NULL, &err);
        CHECK(tm_generator_step(g, &t, NULL, &err) == TM_OK && w3.calls == 0, "NULL removes the processor");
        tm_generator_free(g);
    }
    memset(&err, 0, sizeof err);
    CHECK(tm_generator_set_logits_fn(NULL, hook, &w3, &err) == TM_ERR_INVALID_ARGUMENT && strstr(err.message, "NULL"),
          "NULL generator: %s", err.message);
    tm_model_free(m);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
