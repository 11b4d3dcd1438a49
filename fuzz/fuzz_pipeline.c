/* libFuzzer target: tm_pipeline_call's JSON, the arguments and options a server or a
 * binding hands over from outside, on the encoder text tasks over the tiny repositories of
 * tests/data/pipelines (run from the repository's root, as fuzz/run.sh does). The first
 * byte picks the task; the rest is the inputs JSON, then after a "\n\x00\n" separator the
 * options JSON (none: null). Asserts: an error carries a message and gives no result; a
 * result is one well-formed JSON value. Not the generation tasks (an option may ask for
 * any number of new tokens: slow by request, not a hang; their config reader is
 * fuzz_generation's) nor the media tasks (their inputs are file paths; the decoders are
 * fuzz_audio's and fuzz_image's). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "transmuter.h"
#include "hub/json.h"

static const struct {
    const char *task, *repo;
} uses[] = {
    {"text-classification", "bert-sentiment"},   {"token-classification", "bert-ner"},
    {"question-answering", "distilbert-qa"},     {"fill-mask", "bert-mlm"},
    {"zero-shot-classification", "bert-nli"},    {"feature-extraction", "minilm-embed"},
};
enum { N_USES = sizeof uses / sizeof uses[0] };
static tm_pipeline *pipes[N_USES];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    for (int i = 0; i < N_USES; i++) {
        char repo[256];
        snprintf(repo, sizeof repo, "tests/data/pipelines/%s", uses[i].repo);
        tm_error err;
        memset(&err, 0, sizeof err);
        /* one thread: the inputs are tiny, and libFuzzer's timing stays per input */
        if (tm_pipeline_create(uses[i].task, repo, "{\"threads\": 1}", &pipes[i], &err) != TM_OK) {
            fprintf(stderr, "fuzz_pipeline: %s on %s: %s (run from the repository's root)\n",
                    uses[i].task, repo, err.message);
            abort();
        }
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    tm_pipeline *p = pipes[data[0] % N_USES];
    data++;
    size--;
    size_t in_len = size;
    const uint8_t *sep = memmem(data, size, "\n\0\n", 3);
    if (sep) in_len = (size_t)(sep - data);
    char *inputs = malloc(in_len + 1), *options = NULL;
    if (!inputs) abort();
    memcpy(inputs, data, in_len);
    inputs[in_len] = 0;
    if (sep) {
        size_t n = size - in_len - 3;
        options = malloc(n + 1);
        if (!options) abort();
        memcpy(options, sep + 3, n);
        options[n] = 0;
    }
    char *result = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    if (tm_pipeline_call(p, inputs, options, &result, &err) != TM_OK) {
        if (result || !err.message[0]) abort();
    } else {
        tm_json *j = result ? tm_json_parse(result, strlen(result)) : NULL;
        if (!j) abort();
        tm_json_free(j);
        free(result);
    }
    free(inputs);
    free(options);
    return 0;
}
