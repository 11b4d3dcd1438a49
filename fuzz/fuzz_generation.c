/* libFuzzer target: the generation config's JSON reader (tm_generation_config_from_json) on
 * arbitrary bytes as generation_config.json, then every logits processor and warper
 * (src/pipelines/logits.c, Whisper's suppressions and timestamp rules included) with the
 * parameters it read on a row of 64 scores made from the input, and a draw. Asserts: an error carries a message and leaves the config unchanged;
 * a config's lists hold what they claim (every item is read, so ASan sees a short array);
 * the draw and the greedy choice are tokens of the row. Not the generator's model runs
 * (tests/test_generator.c). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "transmuter.h"
#include "pipelines/generation.h"

enum { V = 64 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    tm_generation_config c, before;
    tm_generation_config_default(&c);
    before = c;
    tm_error err;
    memset(&err, 0, sizeof err);
    if (tm_generation_config_from_json(&c, NULL, text, &err) != TM_OK) {
        if (!err.message[0] || memcmp(&c, &before, sizeof c)) abort();
        free(text);
        return 0;
    }
    int64_t sum = 0;
    for (int k = 0; k < c.n_eos_token_ids; k++) sum += c.eos_token_ids[k];
    int64_t n_bad = 0;
    for (int b = 0; b < c.n_bad_words; b++) {
        if (c.bad_words_lengths[b] < 0) abort();
        n_bad += c.bad_words_lengths[b];
    }
    for (int64_t k = 0; k < n_bad; k++) sum += c.bad_words_ids[k];
    for (int k = 0; k < c.n_stop_strings; k++) sum += (int64_t)strlen(c.stop_strings[k]);
    for (int k = 0; k < c.n_suppress_tokens; k++) sum += c.suppress_tokens[k];
    for (int k = 0; k < c.n_begin_suppress_tokens; k++) sum += c.begin_suppress_tokens[k];
    (void)sum;

    float s[V], scratch[V];
    int32_t order[V], ids[16];
    uint8_t mark[V] = {0};
    for (int v = 0; v < V; v++) s[v] = (float)((int)data[v % (size ? size : 1)] % 31 - 15) / 3.0f;
    size_t n = size < 16 ? size : 16;
    for (size_t i = 0; i < n; i++) ids[i] = data[i] % V;
    if (c.repetition_penalty > 0 && isfinite(c.repetition_penalty))
        tm__logits_repetition_penalty(s, V, ids, n, c.repetition_penalty, mark);
    for (int v = 0; v < V; v++)
        if (mark[v]) abort();   /* the marks are left cleared */
    if (c.no_repeat_ngram_size > 0) tm__logits_no_repeat_ngram(s, V, ids, n, c.no_repeat_ngram_size);
    tm__logits_bad_words(s, V, ids, n, c.bad_words_ids, c.bad_words_lengths, c.n_bad_words,
                         c.eos_token_ids, c.n_eos_token_ids);
    tm__logits_min_length(s, V, (int64_t)n, c.min_length, c.eos_token_ids, c.n_eos_token_ids);
    tm__logits_forced_bos(s, V, (int64_t)n, c.forced_bos_token_id);
    tm__logits_forced_eos(s, V, (int64_t)n, c.max_length, c.eos_token_ids, c.n_eos_token_ids);
    tm__logits_suppress(s, V, c.suppress_tokens, c.n_suppress_tokens);
    tm__logits_begin_suppress(s, V, (int64_t)n, (int64_t)(size % 8), c.begin_suppress_tokens, c.n_begin_suppress_tokens);
    /* Whisper's timestamp rules with forced_bos_token_id as <|notimestamps|> */
    tm__logits_whisper_timestamps(s, V, ids, n, size % 8, c.forced_bos_token_id,
                                  c.n_eos_token_ids ? c.eos_token_ids[0] : V);
    if (c.temperature > 0 && isfinite(c.temperature)) tm__logits_temperature(s, V, c.temperature);
    if (c.top_k > 0) tm__logits_top_k(s, V, c.top_k, 1, scratch);
    if (c.top_p > 0 && c.top_p <= 1) tm__logits_top_p(s, V, c.top_p, 1, order);
    if (c.min_p > 0 && c.min_p <= 1) tm__logits_min_p(s, V, c.min_p, 1, order);
    if (c.typical_p > 0 && c.typical_p <= 1) tm__logits_typical(s, V, c.typical_p, 1, order, scratch);
    int64_t t = tm__sample(s, V, (double)(size % 97) / 97.0), g = tm__argmax(s, V);
    if (t < 0 || t >= V || g < 0 || g >= V) abort();
    tm__log_softmax(s, V);
    tm_generation_config_clear(&c);
    free(text);
    return 0;
}
