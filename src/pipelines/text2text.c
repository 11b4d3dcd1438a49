/* text2text-generation, summarization and translation: an encoder-decoder (T5, BART, ...)
 * rewrites each text, as transformers.js's Text2TextGenerationPipeline and its two
 * subclasses: config.json's prefix and task_specific_params[task].prefix put before the
 * text, special tokens added, the output decoded without them, one flat list of
 * {generated_text | summary_text | translation_text} per returned sequence of each input.
 * Inputs run one at a time (the generator is batch 1). Generation is generation_task.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pipelines.h"
#include "../core/status.h"

static const char *output_key(const tm_pipeline *p) {
    if (!strcmp(p->task->name, "summarization")) return "summary_text";
    if (!strcmp(p->task->name, "translation")) return "translation_text";
    return "generated_text";
}

/* The text with config.json's prefix and the task's prefix before it (malloc'ed). */
static char *prefixed(const tm_pipeline *p, const char *text) {
    const char *global = tm_json_get_string(p->repo->config, "prefix");
    const tm_json *params = tm_json_get(tm_json_get(p->repo->config, "task_specific_params"), p->task->name);
    const char *task = tm_json_get_string(params, "prefix");
    if (!global) global = "";
    if (!task) task = "";
    size_t n = strlen(global) + strlen(task) + strlen(text) + 1;
    char *s = malloc(n);
    if (s) snprintf(s, n, "%s%s%s", task, global, text);
    return s;
}

static tm_status call(tm_pipeline *p, const tm_json *inputs, const tm_json *options, tm__buf *out,
                      tm_error *err) {
    const char **texts = NULL;
    size_t n;
    int batched;
    tm_status s = tm__strings(&inputs->items[0], "texts", &texts, &n, &batched, err);
    if (s) return s;
    tm_generation_config cfg;
    s = tm__gen_config(p, options, 256, &cfg, err);
    if (s) {
        free(texts);
        return s;
    }
    const char *key = output_key(p);
    int first = 1;
    tm__put(out, "[");
    for (size_t i = 0; !s && i < n; i++) {
        char *text = prefixed(p, texts[i]);
        int32_t *ids = NULL;
        size_t n_ids = 0;
        char **results = NULL;
        int k = 0;
        s = text ? tm__gen_encode(p, text, 1, &ids, &n_ids, err) : tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        if (!s) s = tm__gen_run(p, &cfg, ids, n_ids, &results, &k, err);
        for (int j = 0; !s && j < k; j++, first = 0) {
            tm__put(out, first ? "{" : ",{");
            tm__put_string(out, key);
            tm__put(out, ":");
            tm__put_string(out, results[j]);
            tm__put(out, "}");
        }
        tm__gen_texts_free(results, k);
        free(ids);
        free(text);
    }
    tm__put(out, "]");
    tm_generation_config_clear(&cfg);
    free(texts);
    return s;
}

const tm__task tm__task_text2text_generation = {"text2text-generation", NULL, tm__gen_check, call, 1, 0, NULL};
const tm__task tm__task_summarization = {"summarization", NULL, tm__gen_check, call, 1, 0, NULL};
const tm__task tm__task_translation = {"translation", NULL, tm__gen_check, call, 1, 0, NULL};
