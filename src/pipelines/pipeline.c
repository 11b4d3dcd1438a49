/* The public pipeline object: a task on a repository, called with JSON in and JSON out in
 * transformers.js's shapes. Creation opens the repository, loads its tokenizer and the ONNX
 * file for the dtype asked, and lets the task check the model; the tasks themselves live
 * one per file beside this one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "pipelines.h"
#include "../core/status.h"
#include "../hub/hub.h"
#include "audio_features.h"
#include "image_processor.h"
#include "whisper.h"

/* The task table: one entry per file of src/pipelines/ that defines a task. */
static const tm__task *const tasks[] = {
    &tm__task_feature_extraction, &tm__task_text_classification, &tm__task_token_classification,
    &tm__task_zero_shot_classification, &tm__task_fill_mask, &tm__task_question_answering,
    &tm__task_text_generation, &tm__task_text2text_generation, &tm__task_summarization,
    &tm__task_translation, &tm__task_audio_classification, &tm__task_automatic_speech_recognition,
    &tm__task_image_classification, &tm__task_zero_shot_image_classification, &tm__task_object_detection,
    &tm__task_depth_estimation, &tm__task_image_feature_extraction,
};

static const tm__task *find_task(const char *name) {
    for (size_t i = 0; i < sizeof tasks / sizeof tasks[0]; i++)
        if (!strcmp(tasks[i]->name, name) || (tasks[i]->alias && !strcmp(tasks[i]->alias, name)))
            return tasks[i];
    return NULL;
}

const char *tm_pipeline_tasks(void) {
    return "feature-extraction (embeddings), text-classification (sentiment-analysis), "
           "token-classification (ner), zero-shot-classification, fill-mask, question-answering, "
           "text-generation, text2text-generation, summarization, translation, audio-classification, "
           "automatic-speech-recognition, image-classification, zero-shot-image-classification, "
           "object-detection, depth-estimation, image-feature-extraction";
}

/* tokenizer_config.json's padding_side and tokenizer.json's special added tokens. */
static tm_status read_tokenizer_extras(tm_pipeline *p, tm_error *err) {
    const char *config = tm_tokenizer_config_json(p->tok);
    if (config) {
        tm_json *c = tm_json_parse(config, strlen(config));
        const char *side = tm_json_get_string(c, "padding_side");
        p->pad_left = side && !strcmp(side, "left");
        tm_json_free(c);
    }
    char *path = NULL;
    tm_status s = tm__repo_file(p->repo, "tokenizer.json", &path, err);
    if (s) return s;
    tm_json *doc = tm_json_read_file(path);
    free(path);
    if (!doc) return tm__fail(err, TM_ERR_PARSE, "%s: cannot read tokenizer.json", p->repo->source);
    const tm_json *added = tm_json_get(doc, "added_tokens");
    int cap = added && added->type == TM_JSON_ARRAY ? added->n : 0;
    p->special_ids = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *p->special_ids);
    if (!p->special_ids) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; !s && i < cap; i++) {
        const tm_json *t = &added->items[i], *id = tm_json_get(t, "id"), *sp = tm_json_get(t, "special");
        if (id && id->type == TM_JSON_NUMBER && sp && sp->type == TM_JSON_BOOL && sp->number != 0)
            p->special_ids[p->n_special++] = (int32_t)id->number;
    }
    tm_json_free(doc);
    return s;
}

/* Loads SUBFOLDER/NAME{dtype suffix}.onnx into *model; *rel gets its relative path. */
static tm_status load_onnx(tm_pipeline *p, const char *dtype, const char *name, const char *subfolder,
                           int64_t threads, tm_model **model, char **rel, tm_error *err) {
    tm_status s = tm__repo_onnx_name(dtype, name, subfolder, rel, err);
    if (s) return s;
    char *path = NULL;
    tm_error e;
    tm__error_clear(&e);
    s = tm__repo_file(p->repo, *rel, &path, &e);
    if (s == TM_ERR_NOT_FOUND)
        return tm__fail(err, s, "%s has no %s (the file for dtype %s)", p->repo->source, *rel, dtype);
    if (s) {
        tm__error_copy(err, &e);
        return s;
    }
    tm_load_options o;
    tm_load_options_default(&o);
    o.threads = (int)threads;
    if (p->repo->hub_repo) {
        /* through hf:// so that the loader fetches its external data too */
        size_t n = strlen(p->repo->hub_repo) + strlen(*rel) + strlen(p->repo->revision) + 8;
        char *src = malloc(n);
        if (!src) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        else {
            snprintf(src, n, "hf://%s/%s@%s", p->repo->hub_repo, *rel, p->repo->revision);
            s = tm_model_load(src, &o, model, err);
            free(src);
        }
    } else {
        s = tm_model_load(path, &o, model, err);
    }
    free(path);
    if (!s && tm_model_missing_ops(*model))
        s = tm__fail(err, TM_ERR_UNSUPPORTED, "%s: operators we cannot run: %s", *rel,
                     tm_model_missing_ops(*model));
    return s;
}

static tm_status load_model(tm_pipeline *p, const tm_json *load, tm_error *err) {
    const char *dtype = "fp32", *name = "model", *subfolder = "onnx";
    int64_t threads = 0;
    tm_status s = tm__opt_string(load, "dtype", dtype, &dtype, err);
    if (!s) s = tm__opt_string(load, "model_file_name", name, &name, err);
    if (!s) s = tm__opt_string(load, "subfolder", subfolder, &subfolder, err);
    if (!s) s = tm__opt_int(load, "threads", 0, 0, &threads, err);
    if (!s && !strcmp(dtype, "auto")) dtype = "fp32";
    if (s) return s;
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    p->threads = threads > 0 ? (int)threads : online > 0 ? (int)online : 1;
    if (!p->encoder_decoder) return load_onnx(p, dtype, name, subfolder, threads, &p->model, &p->onnx_file, err);
    /* an encoder-decoder: the encoder first, then the merged decoder (onnx_file) */
    char *encoder_file = NULL;
    s = load_onnx(p, dtype, "encoder_model", subfolder, threads, &p->encoder, &encoder_file, err);
    free(encoder_file);
    if (!s) s = load_onnx(p, dtype, "decoder_model_merged", subfolder, threads, &p->model, &p->onnx_file, err);
    return s;
}

tm_status tm_pipeline_create(const char *task, const char *repo, const char *load_json,
                             tm_pipeline **out, tm_error *err) {
    if (!task || !repo || !out) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_pipeline_create: NULL argument");
    const tm__task *t = find_task(task);
    if (!t)
        return tm__fail(err, TM_ERR_UNSUPPORTED, "unknown task '%s' (tasks: %s)", task, tm_pipeline_tasks());
    tm_json *load = NULL;
    if (load_json && *load_json) {
        load = tm_json_parse(load_json, strlen(load_json));
        if (!load || (load->type != TM_JSON_OBJECT && load->type != TM_JSON_NULL)) {
            tm_json_free(load);
            return tm__fail(err, TM_ERR_PARSE, "load options: not a JSON object");
        }
    }
    tm_pipeline *p = calloc(1, sizeof *p);
    tm_status s = p ? TM_OK : tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    if (!s) {
        p->task = t;
        p->pad_id = -1;
        p->encoder_decoder = t->encoder_decoder;
        s = tm__repo_open(repo, &p->repo, err);
    }
    if (!s && t->prepare) s = t->prepare(p, err);
    if (!s) {
        tm_error e;
        tm__error_clear(&e);
        const char *src = p->repo->hub_repo ? repo : p->repo->dir;
        s = tm_tokenizer_load(src, NULL, &p->tok, &e);
        if (s == TM_ERR_NOT_FOUND && t->takes != TM__TAKES_TEXT) s = TM_OK;   /* the task's check decides */
        else if (s == TM_ERR_NOT_FOUND) s = tm__fail(err, s, "%s: no tokenizer.json (%s needs a tokenizer)", repo, task);
        else if (s) tm__error_copy(err, &e);
    }
    if (!s && p->tok) {
        tm_tokenizer_special_token(p->tok, TM_SPECIAL_PAD, &p->pad_id);
        p->model_max_length = tm_tokenizer_model_max_length(p->tok);
        s = read_tokenizer_extras(p, err);
    }
    if (!s) s = load_model(p, load, err);
    if (!s) {
        p->has_token_type_ids = tm_model_input_index(p->model, "token_type_ids") >= 0;
        if (t->takes == TM__TAKES_TEXT && tm_model_input_index(p->model, "input_ids") < 0)
            s = tm__fail(err, TM_ERR_UNSUPPORTED, "%s: the model has no input_ids input (%s takes text)",
                         p->onnx_file, task);
    }
    if (!s && t->check) s = t->check(p, err);
    tm_json_free(load);
    if (s) {
        tm_pipeline_free(p);
        return s;
    }
    *out = p;
    return TM_OK;
}

tm_status tm_pipeline_call(tm_pipeline *p, const char *inputs_json, const char *options_json,
                           char **result_json, tm_error *err) {
    if (!p || !inputs_json || !result_json)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_pipeline_call: NULL argument");
    tm_json *inputs = tm_json_parse(inputs_json, strlen(inputs_json));
    if (!inputs) return tm__fail(err, TM_ERR_PARSE, "inputs: not valid JSON");
    if (inputs->type == TM_JSON_STRING) {
        /* one text: the same as [text] */
        tm_json_free(inputs);
        size_t n = strlen(inputs_json);
        char *wrapped = malloc(n + 3);
        if (!wrapped) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        snprintf(wrapped, n + 3, "[%s]", inputs_json);
        inputs = tm_json_parse(wrapped, n + 2);
        free(wrapped);
        if (!inputs) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    }
    if (inputs->type != TM_JSON_ARRAY || inputs->n == 0) {
        tm_json_free(inputs);
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT,
                        "inputs: a JSON array of the call's arguments (e.g. [\"text\"]) or one string");
    }
    tm_json *options = NULL;
    if (options_json && *options_json) {
        options = tm_json_parse(options_json, strlen(options_json));
        if (!options || (options->type != TM_JSON_OBJECT && options->type != TM_JSON_NULL)) {
            tm_json_free(options);
            tm_json_free(inputs);
            return tm__fail(err, TM_ERR_PARSE, "options: not a JSON object");
        }
    }
    tm__buf b = {0};
    tm_status s = p->task->call(p, inputs, options, &b, err);
    if (!s && b.oom) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory writing the result");
    tm_json_free(options);
    tm_json_free(inputs);
    if (s) {
        free(b.s);
        return s;
    }
    *result_json = b.s;
    return TM_OK;
}

const char *tm_pipeline_task(const tm_pipeline *p) { return p ? p->task->name : NULL; }

const char *tm_pipeline_model_file(const tm_pipeline *p) { return p ? p->onnx_file : NULL; }

void tm_pipeline_free(tm_pipeline *p) {
    if (!p) return;
    tm_model_free(p->model);
    tm_model_free(p->encoder);
    free(p->config_text);
    free(p->generation_text);
    tm_tokenizer_free(p->tok);
    tm__repo_free(p->repo);
    free(p->onnx_file);
    free(p->special_ids);
    tm__audio_fe_free(p->audio_fe);
    tm__image_proc_free(p->image_proc);
    tm__whisper_free(p->whisper);
    free(p);
}
