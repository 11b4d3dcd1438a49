/* Pipelines' private interface: the repository (a folder or hf:// repo: config.json,
 * sentence-transformers' files, the ONNX file for a dtype), the task table, and the helpers
 * every text task shares (tokenizing a batch as transformers.js does, running the model,
 * softmax, a JSON writer). Not public API: include/transmuter.h's "Pipelines" section is. */
#ifndef TM_PIPELINES_H
#define TM_PIPELINES_H

#include <stddef.h>
#include <stdint.h>
#include "../../include/transmuter.h"
#include "../hub/json.h"

/* ---- The repository ------------------------------------------------------------------ */

typedef struct tm__repo {
    char *source;                /* as given: a folder or hf://OWNER/REPO[@REVISION] */
    char *hub_repo;              /* hf:// only: "OWNER/REPO" */
    char *revision;              /* hf:// only: the revision ("main" by default) */
    char *dir;                   /* the local folder (a cache snapshot for hf://) */
    tm_json *config;             /* config.json */
    const char *model_type;      /* config's model_type, or "" */
    const char *problem_type;    /* config's problem_type, or "" */
    /* sentence-transformers (modules.json): pooling of 1_Pooling/config.json ("mean",
     * "cls", "max", "lasttoken"; "" when there is no Pooling module) and whether a
     * Normalize module follows. */
    char st_pooling[16];
    int st_normalize;
} tm__repo;

/* Opens a folder or hf://OWNER/REPO[@REVISION]: reads config.json (required) and
 * sentence-transformers' modules.json and pooling config when present. For hf://, only
 * those files are fetched. */
tm_status tm__repo_open(const char *source, tm__repo **out, tm_error *err);
void tm__repo_free(tm__repo *r);

/* The local path of the repo file `rel` (e.g. "1_Pooling/config.json"), fetched for
 * hf://; TM_ERR_NOT_FOUND when the repo has no such file. *path is malloc'ed. */
tm_status tm__repo_file(const tm__repo *r, const char *rel, char **path, tm_error *err);

/* The ONNX file transformers.js loads for a dtype: SUBFOLDER/NAME{suffix}.onnx with
 * fp32 "", fp16 "_fp16", int8 "_int8", uint8 "_uint8", q8 "_quantized", q4 "_q4",
 * q4f16 "_q4f16", bnb4 "_bnb4". *rel is malloc'ed. */
tm_status tm__repo_onnx_name(const char *dtype, const char *name, const char *subfolder,
                             char **rel, tm_error *err);

/* config.json's id2label[id], or NULL. */
const char *tm__repo_label(const tm__repo *r, int64_t id);
/* Number of labels in config.json's id2label (0 when there is none). */
int tm__repo_n_labels(const tm__repo *r);
/* label2id's value for `label`, compared case-insensitively, or -1. */
int64_t tm__repo_label_id(const tm__repo *r, const char *label);

/* ---- The pipeline object ---------------------------------------------------------------- */

typedef struct tm__buf tm__buf;
typedef struct tm__task tm__task;

struct tm_pipeline {
    const tm__task *task;
    tm__repo *repo;
    tm_model *model;
    tm_tokenizer *tok;
    char *onnx_file;             /* the ONNX file loaded, relative to the repo */
    int threads;                 /* the model's threads (the load option; 0 resolved to the
                                    cores online) */
    int32_t pad_id;              /* -1: none */
    int pad_left;                /* tokenizer_config's padding_side == "left" */
    int64_t model_max_length;    /* -1: none (Infinity in transformers.js) */
    int32_t *special_ids;        /* tokenizer.json's added tokens marked special */
    int n_special;
    int has_token_type_ids;      /* the model takes token_type_ids */
    /* Generation tasks: an encoder-decoder's encoder (the decoder is `model`), and the
     * texts of config.json and generation_config.json (NULL when absent) each call's
     * tm_generation_config starts from. */
    tm_model *encoder;
    char *config_text, *generation_text;
    /* 1: loads SUBFOLDER/encoder_model and SUBFOLDER/decoder_model_merged (the task's
     * encoder_decoder, or its prepare's choice: Whisper for speech recognition). */
    int encoder_decoder;
    /* Speech recognition with Whisper: the repository's settings (whisper.c). */
    struct tm__whisper *whisper;
    /* Audio tasks: preprocessor_config.json's feature extractor (the tokenizer is then
     * optional: tok NULL without tokenizer.json). */
    struct tm__audio_fe *audio_fe;
    /* Vision tasks: preprocessor_config.json's image processor. */
    struct tm__image_proc *image_proc;
};

/* A task's inputs (the audio tasks' tables write 1). */
typedef enum tm__takes { TM__TAKES_TEXT, TM__TAKES_AUDIO, TM__TAKES_IMAGE } tm__takes;

/* A task: its name (and alias), what the model must offer (checked at creation), and the
 * call. inputs is the array of positional arguments; options an object or NULL. */
struct tm__task {
    const char *name;
    const char *alias;           /* another name for the same task, or NULL */
    tm_status (*check)(tm_pipeline *p, tm_error *err);
    tm_status (*call)(tm_pipeline *p, const tm_json *inputs, const tm_json *options,
                      tm__buf *out, tm_error *err);
    /* 1: an encoder-decoder, loaded as transformers.js loads one: SUBFOLDER/encoder_model
     * and SUBFOLDER/decoder_model_merged for the dtype (model_file_name does not apply). */
    int encoder_decoder;
    /* What the task takes: text (the model must have input_ids), audio or images (a
     * tokenizer then only if the task asks for one in its check). */
    tm__takes takes;
    /* Called on the opened repository before the tokenizer and the model are loaded
     * (NULL: nothing): the audio tasks read preprocessor_config.json there and refuse
     * model types they cannot run before looking for ONNX files (speech recognition also
     * sets p->encoder_decoder for Whisper). */
    tm_status (*prepare)(tm_pipeline *p, tm_error *err);
};

/* One per file: src/pipelines/<task>.c. */
extern const tm__task tm__task_feature_extraction;
extern const tm__task tm__task_text_classification;
extern const tm__task tm__task_token_classification;
extern const tm__task tm__task_zero_shot_classification;
extern const tm__task tm__task_fill_mask;
extern const tm__task tm__task_question_answering;
extern const tm__task tm__task_text_generation;
extern const tm__task tm__task_text2text_generation;
extern const tm__task tm__task_summarization;
extern const tm__task tm__task_translation;
extern const tm__task tm__task_audio_classification;
extern const tm__task tm__task_automatic_speech_recognition;
extern const tm__task tm__task_image_classification;
extern const tm__task tm__task_zero_shot_image_classification;
extern const tm__task tm__task_object_detection;
extern const tm__task tm__task_depth_estimation;
extern const tm__task tm__task_image_feature_extraction;

/* ---- Audio tasks (audio.c) ---------------------------------------------------------------- */

/* The prepare step of the audio tasks: preprocessor_config.json (required) into
 * p->audio_fe. */
tm_status tm__audio_prepare(tm_pipeline *p, tm_error *err);
/* The call's first argument as audio inputs: a path (to a sound file or a .npy float32
 * waveform; *batched 0) or an array of them (*batched 1). *paths as tm__strings. */
tm_status tm__audio_inputs(const tm_json *inputs, const char ***paths, size_t *n, int *batched,
                           tm_error *err);
/* Decodes one input at the extractor's rate, extracts its features, runs the model on
 * those it takes and returns the named outputs as float32 tensors (as tm__batch_run). */
tm_status tm__audio_run(tm_pipeline *p, const char *path, int n_out, const char *const *names,
                        tm_tensor **out, tm_error *err);

/* ---- Vision tasks (vision.c) ------------------------------------------------------------ */

/* The prepare step of the vision tasks: preprocessor_config.json (required) into
 * p->image_proc (an unknown image_processor_type is refused here, before the model loads). */
tm_status tm__vision_prepare(tm_pipeline *p, tm_error *err);
/* The call's first argument as image paths: a string (*batched 0) or an array of them
 * (*batched 1). *paths as tm__strings. */
tm_status tm__vision_inputs(const tm_json *inputs, const char ***paths, size_t *n, int *batched,
                            tm_error *err);
/* Loads one image, preprocesses it, runs the model on pixel_values (and DETR's pixel_mask
 * when the model takes it) plus n_extra more named inputs, and returns the named outputs as
 * float32 tensors (as tm__batch_run). size gets the image's (height, width) as read. */
tm_status tm__vision_run(tm_pipeline *p, const char *path, int n_extra, const char *const *extra_names,
                         const tm_tensor *const *extra, int n_out, const char *const *names,
                         tm_tensor **out, int64_t size[2], tm_error *err);
/* transformers.js's maths.softmax on a Float32Array: exps and results rounded to float32,
 * the sum in doubles. */
void tm__softmax_f32(const float *x, size_t n, double *out);

/* ---- Generation tasks (generation_task.c) ---------------------------------------------- */

/* The check of every generation task: reads config.json and generation_config.json into
 * p (a malformed one is an error naming it) and makes sure p->model is a decoder
 * tm_generator can step (and p->encoder an encoder with a last_hidden_state). */
tm_status tm__gen_check(tm_pipeline *p, tm_error *err);

/* The generation config of one call, as transformers.js builds it: config.json, then
 * generation_config.json, then the pipeline's max_new_tokens (the text tasks' 256; 0 or
 * less: none, as speech recognition), then the call's options (generation keys; others
 * such as return_full_text are the task's). A bad option is TM_ERR_INVALID_ARGUMENT naming
 * it; cfg is then cleared. */
tm_status tm__gen_config(const tm_pipeline *p, const tm_json *options, int64_t max_new_tokens,
                         tm_generation_config *cfg, tm_error *err);

/* The prompt's ids: text encoded with or without the special tokens, then cut to
 * model_max_length after they are added (transformers.js 4.3 truncates so: a long t5
 * input loses its </s>). *ids is malloc'ed (at least one element). */
tm_status tm__gen_encode(const tm_pipeline *p, const char *text, int add_special, int32_t **ids,
                         size_t *n, tm_error *err);

/* Generates from one prompt: decoder-only, ids are the decoder's prompt; encoder-decoder,
 * the encoder's input (the decoder starts from decoder_start_token_id). *texts gets
 * cfg->num_return_sequences malloc'ed strings (*n_texts of them): each sequence decoded
 * whole with special tokens skipped; free with tm__gen_texts_free. */
tm_status tm__gen_run(tm_pipeline *p, const tm_generation_config *cfg, const int32_t *ids,
                      size_t n, char ***texts, int *n_texts, tm_error *err);
void tm__gen_texts_free(char **texts, int n);
/* tm__gen_run for count prompts of one call: a decoder-only model's greedy or sampled
 * generations (one beam) step together in a tm_batch of up to TM__GEN_ROWS rows, joining
 * as rows free up; the rest (beams, encoder-decoders, an export without position_ids given
 * prompts of different lengths) run one after another. texts[i] / n_texts[i] as
 * tm__gen_run's for prompt i; on error nothing is left to free. */
enum { TM__GEN_ROWS = 16 };
tm_status tm__gen_run_many(tm_pipeline *p, const tm_generation_config *cfg,
                           int32_t *const *ids, const size_t *n, int count, char ***texts,
                           int *n_texts, tm_error *err);

/* ---- Text batches ------------------------------------------------------------------------- */

/* Token arrays of a batch, (B, T) each, padded and truncated as transformers.js's tokenizer
 * call with {padding: true, truncation: true}: each text (and pair) is encoded whole with
 * its special tokens, then every row is cut to min(longest, model_max_length) tokens
 * (a plain cut: a truncated row ends without its [SEP]) and shorter rows are padded with
 * the pad id (mask 0, type 0) on the tokenizer's padding side. */
typedef struct tm__batch {
    int64_t B, T;
    int64_t *ids, *mask, *types;
} tm__batch;

/* pairs may be NULL (no pairs). */
tm_status tm__batch_encode(const tm_pipeline *p, size_t n, const char *const *texts,
                           const char *const *pairs, tm__batch *out, tm_error *err);
void tm__batch_free(tm__batch *b);
/* The call's first argument as texts (tm__strings: one, or many with *batched 1),
 * encoded as one batch (tm__batch_encode, no pairs): the opening of the one-text tasks. */
tm_status tm__encode_texts(const tm_pipeline *p, const tm_json *inputs, tm__batch *out,
                           int *batched, tm_error *err);

/* Runs the model on named inputs and returns the named outputs as float32 tensors
 * (half-precision outputs converted), each a new tensor; at most 8. A missing output is
 * TM_ERR_NOT_FOUND naming it. */
/* [{"label":...,"score":...}, ...]: the top_k (all when negative or larger) of L scores,
 * best first (ties by index), labelled by config.json's id2label (LABEL_i without one). */
tm_status tm__put_top_labels(const tm_pipeline *p, const double *scores, size_t L, int64_t top_k, tm__buf *out,
                             tm_error *err);
/* The repo's JSON object file rel (e.g. "preprocessor_config.json"), parsed. Not there:
 * TM_ERR_NOT_FOUND saying "no REL (WHY)"; unreadable or not an object: TM_ERR_PARSE. */
tm_status tm__repo_json(tm_pipeline *p, const char *rel, const char *why, tm_json **out, tm_error *err);
tm_status tm__run_model(tm_pipeline *p, int n_in, const char *const *in_names,
                        const tm_tensor *const *in, int n_out, const char *const *names, tm_tensor **out,
                        tm_error *err);
/* Runs the model on a batch (input_ids, attention_mask and token_type_ids when the model
 * takes them) and returns the named outputs as float32 tensors (half-precision outputs
 * converted), each a new tensor. A missing output is TM_ERR_NOT_FOUND naming it. */
tm_status tm__batch_run(tm_pipeline *p, const tm__batch *b, int n_out, const char *const *names,
                        tm_tensor **out, tm_error *err);
/* tm__run_model and tm__batch_run with one_thread 1: the kernels on the calling thread
 * alone (tm_plan_options.one_thread), for runs side by side on threads of the caller's. */
tm_status tm__run_model_on(tm_pipeline *p, int one_thread, int n_in, const char *const *in_names,
                           const tm_tensor *const *in, int n_out, const char *const *names,
                           tm_tensor **out, tm_error *err);
tm_status tm__batch_run_on(tm_pipeline *p, const tm__batch *b, int one_thread, int n_out,
                           const char *const *names, tm_tensor **out, tm_error *err);

/* A float32 copy of a model output of any float type; `name` names it in errors. */
tm_status tm__to_f32(const tm_tensor *t, const char *name, tm_tensor **out, tm_error *err);

/* Whether id is one of the tokenizer's special added tokens (all_special_ids). */
int tm__is_special_id(const tm_pipeline *p, int64_t id);
/* Decodes ids (int64) with cleanup as the tokenizer says; *text is malloc'ed. */
tm_status tm__decode(const tm_pipeline *p, const int64_t *ids, size_t n, int skip_special,
                     char **text, tm_error *err);

/* ---- Numbers ---------------------------------------------------------------------------- */

/* softmax of n values into out, as transformers.js's maths.softmax (in doubles). */
void tm__softmax(const double *x, size_t n, double *out);
/* Indices 0..n-1 sorted by v descending, ties by index (ONNX TopK's order). */
tm_status tm__argsort_desc(const double *v, size_t n, size_t *idx, tm_error *err);

/* ---- Inputs and options --------------------------------------------------------------- */

/* Strings of a positional argument: a string is one (*batched 0), an array of strings
 * many (*batched 1). *texts (malloc'ed, pointing into v) holds *n entries. `what` names
 * the argument in errors. */
tm_status tm__strings(const tm_json *v, const char *what, const char ***texts, size_t *n,
                      int *batched, tm_error *err);
/* An option: absent (or options NULL) gives the default. Wrong types are errors. */
tm_status tm__opt_int(const tm_json *options, const char *key, int64_t dflt, int null_value,
                      int64_t *out, tm_error *err);
tm_status tm__opt_bool(const tm_json *options, const char *key, int dflt, int *out,
                       tm_error *err);
tm_status tm__opt_string(const tm_json *options, const char *key, const char *dflt,
                         const char **out, tm_error *err);

/* ---- JSON output -------------------------------------------------------------------------- */

/* A growing string; a failed allocation is remembered (oom) and reported at the end. */
struct tm__buf {
    char *s;
    size_t n, cap;
    int oom;
};
void tm__put(tm__buf *b, const char *s);
void tm__put_len(tm__buf *b, const char *s, size_t n);
/* A JSON string as JSON.stringify writes it (non-ASCII as is). */
void tm__put_string(tm__buf *b, const char *s);
/* A number, shortest form that reads back to the same double. */
void tm__put_number(tm__buf *b, double v);
void tm__put_int(tm__buf *b, int64_t v);
/* {"_type":"Tensor","type":"float32","dims":[...],"data":[...]} */
void tm__put_tensor(tm__buf *b, const float *data, int rank, const int64_t *dims);
/* A parsed JSON value written back (objects keep their key order). */
void tm__put_json(tm__buf *b, const tm_json *v);

#endif
