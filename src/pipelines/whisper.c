/* Whisper's speech recognition as transformers.js 4.3's _call_whisper and
 * WhisperForConditionalGeneration.generate run it: the prompt (<|startoftranscript|>, the
 * language and task tokens, <|notimestamps|> unless timestamps are asked), long clips cut
 * into overlapping chunks (chunk_length_s, stride_length_s), the encoder and a tm_generator
 * per chunk with the timestamp rules as a processor of its own, and the seek loop that
 * timestamps without max_new_tokens use. Not the merge of the chunks (whisper_decode.c). */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "whisper.h"
#include "audio_features.h"
#include "generation.h"
#include "../core/status.h"
#include "../media/audio.h"

/* ---- Languages ---------------------------------------------------------------------------- */

/* Whisper's languages (code, name) in its token order, then other names transformers.js
 * accepts for some of them. */
static const char *const languages[][2] = {
    {"en", "english"}, {"zh", "chinese"}, {"de", "german"}, {"es", "spanish"}, {"ru", "russian"},
    {"ko", "korean"}, {"fr", "french"}, {"ja", "japanese"}, {"pt", "portuguese"}, {"tr", "turkish"},
    {"pl", "polish"}, {"ca", "catalan"}, {"nl", "dutch"}, {"ar", "arabic"}, {"sv", "swedish"},
    {"it", "italian"}, {"id", "indonesian"}, {"hi", "hindi"}, {"fi", "finnish"},
    {"vi", "vietnamese"}, {"he", "hebrew"}, {"uk", "ukrainian"}, {"el", "greek"}, {"ms", "malay"},
    {"cs", "czech"}, {"ro", "romanian"}, {"da", "danish"}, {"hu", "hungarian"}, {"ta", "tamil"},
    {"no", "norwegian"}, {"th", "thai"}, {"ur", "urdu"}, {"hr", "croatian"}, {"bg", "bulgarian"},
    {"lt", "lithuanian"}, {"la", "latin"}, {"mi", "maori"}, {"ml", "malayalam"}, {"cy", "welsh"},
    {"sk", "slovak"}, {"te", "telugu"}, {"fa", "persian"}, {"lv", "latvian"}, {"bn", "bengali"},
    {"sr", "serbian"}, {"az", "azerbaijani"}, {"sl", "slovenian"}, {"kn", "kannada"},
    {"et", "estonian"}, {"mk", "macedonian"}, {"br", "breton"}, {"eu", "basque"},
    {"is", "icelandic"}, {"hy", "armenian"}, {"ne", "nepali"}, {"mn", "mongolian"},
    {"bs", "bosnian"}, {"kk", "kazakh"}, {"sq", "albanian"}, {"sw", "swahili"}, {"gl", "galician"},
    {"mr", "marathi"}, {"pa", "punjabi"}, {"si", "sinhala"}, {"km", "khmer"}, {"sn", "shona"},
    {"yo", "yoruba"}, {"so", "somali"}, {"af", "afrikaans"}, {"oc", "occitan"}, {"ka", "georgian"},
    {"be", "belarusian"}, {"tg", "tajik"}, {"sd", "sindhi"}, {"gu", "gujarati"}, {"am", "amharic"},
    {"yi", "yiddish"}, {"lo", "lao"}, {"uz", "uzbek"}, {"fo", "faroese"}, {"ht", "haitian creole"},
    {"ps", "pashto"}, {"tk", "turkmen"}, {"nn", "nynorsk"}, {"mt", "maltese"}, {"sa", "sanskrit"},
    {"lb", "luxembourgish"}, {"my", "myanmar"}, {"bo", "tibetan"}, {"tl", "tagalog"},
    {"mg", "malagasy"}, {"as", "assamese"}, {"tt", "tatar"}, {"haw", "hawaiian"}, {"ln", "lingala"},
    {"ha", "hausa"}, {"ba", "bashkir"}, {"jw", "javanese"}, {"su", "sundanese"},
};
static const char *const other_names[][2] = {
    {"my", "burmese"}, {"ca", "valencian"}, {"nl", "flemish"}, {"ht", "haitian"},
    {"lb", "letzeburgesch"}, {"ps", "pushto"}, {"pa", "panjabi"}, {"ro", "moldavian"},
    {"ro", "moldovan"}, {"si", "sinhalese"}, {"es", "castilian"},
};
#define N_LANGUAGES (sizeof languages / sizeof languages[0])
#define N_OTHER_NAMES (sizeof other_names / sizeof other_names[0])

const char *tm__whisper_language_name(const char *code) {
    for (size_t i = 0; i < N_LANGUAGES; i++)
        if (!strcmp(languages[i][0], code)) return languages[i][1];
    return NULL;
}

/* The language in lower case, or its code when it is a token <|xx|>, into low (64
 * bytes); 0 when too long. */
static int lower_language(const char *language, char *low) {
    size_t n = strlen(language);
    if (n >= 64) return 0;
    for (size_t i = 0; i <= n; i++) low[i] = (char)tolower((unsigned char)language[i]);
    if (n == 6 && !strncmp(low, "<|", 2) && !strcmp(low + 4, "|>") && low[2] >= 'a' && low[2] <= 'z' &&
        low[3] >= 'a' && low[3] <= 'z')
        memmove(low, low + 2, 2), low[2] = '\0';
    return 1;
}

const char *tm__whisper_language_code(const char *language) {
    char low[64];
    if (!lower_language(language, low)) return NULL;
    for (size_t i = 0; i < N_LANGUAGES; i++)
        if (!strcmp(languages[i][1], low) || !strcmp(languages[i][0], low)) return languages[i][0];
    for (size_t i = 0; i < N_OTHER_NAMES; i++)
        if (!strcmp(other_names[i][1], low)) return other_names[i][0];
    return NULL;
}

/* transformers.js's error for an unknown language: the codes when it looks like one (two
 * letters), else the names. */
static tm_status unknown_language(const char *given, tm_error *err) {
    char list[2048], language[64];
    size_t at = 0;
    if (!lower_language(given, language)) snprintf(language, sizeof language, "%.60s", given);
    int codes = strlen(language) == 2;
    for (size_t i = 0; i < N_LANGUAGES && at < sizeof list; i++)
        at += (size_t)snprintf(list + at, sizeof list - at, "%s\"%s\"", i ? "," : "", languages[i][codes ? 0 : 1]);
    return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "Language \"%s\" is not supported. Must be one of: [%s]",
                    language, list);
}

/* ---- The repository's settings ------------------------------------------------------------ */

struct tm__whisper {
    tm_json *generation;          /* generation_config.json, parsed (NULL: none) */
    int multilingual;             /* is_multilingual */
    const tm_json *lang_to_id, *task_to_id;
    int32_t no_timestamps;        /* no_timestamps_token_id; -1: none */
    int return_timestamps;        /* generation_config.json's default */
    int64_t max_source_positions; /* config.json: encoder positions (frames / 2) */
    int32_t timestamp_begin;      /* the tokenizer's <|notimestamps|> + 1; -1: none */
};

void tm__whisper_free(struct tm__whisper *w) {
    if (!w) return;
    tm_json_free(w->generation);
    free(w);
}

/* A key of the generation config: generation_config.json's, else config.json's (as
 * transformers.js lays the one over the other). */
static const tm_json *setting(const tm_pipeline *p, const char *key) {
    const tm_json *v = p->whisper->generation ? tm_json_get(p->whisper->generation, key) : NULL;
    return v ? v : tm_json_get(p->repo->config, key);
}

static tm_status read_settings(tm_pipeline *p, struct tm__whisper *w, tm_error *err) {
    const tm_json *v;
    if ((v = setting(p, "is_multilingual")) && v->type == TM_JSON_BOOL) w->multilingual = v->number != 0;
    if ((v = setting(p, "return_timestamps")) && v->type == TM_JSON_BOOL) w->return_timestamps = v->number != 0;
    w->lang_to_id = setting(p, "lang_to_id");
    w->task_to_id = setting(p, "task_to_id");
    w->no_timestamps = -1;
    v = setting(p, "no_timestamps_token_id");
    if (v && v->type == TM_JSON_NUMBER && v->number >= 0 && v->number < INT32_MAX && v->number == floor(v->number))
        w->no_timestamps = (int32_t)v->number;
    else if (v && v->type != TM_JSON_NULL)
        return tm__fail(err, TM_ERR_PARSE, "%s: no_timestamps_token_id is not a token id", p->repo->source);
    w->max_source_positions = 1500;
    v = tm_json_get(p->repo->config, "max_source_positions");
    if (v && v->type == TM_JSON_NUMBER) {
        if (!(v->number >= 1 && v->number <= 1e6 && v->number == floor(v->number)))
            return tm__fail(err, TM_ERR_PARSE, "%s: config.json's max_source_positions is %g", p->repo->source, v->number);
        w->max_source_positions = (int64_t)v->number;
    }
    int32_t id = tm_tokenizer_token_to_id(p->tok, "<|notimestamps|>", 16);
    w->timestamp_begin = id >= 0 ? id + 1 : -1;
    return TM_OK;
}

tm_status tm__whisper_check(tm_pipeline *p, tm_error *err) {
    if (!p->tok)
        return tm__fail(err, TM_ERR_NOT_FOUND, "%s: no tokenizer.json (%s needs a tokenizer)", p->repo->source,
                        p->task->name);
    tm_status s = tm__gen_check(p, err);
    if (s) return s;
    if (tm_model_input_index(p->encoder, "input_features") < 0)
        return tm__fail(err, TM_ERR_UNSUPPORTED, "%s: the encoder has no input 'input_features' (what "
                        "WhisperFeatureExtractor gives)", p->repo->source);
    p->whisper = calloc(1, sizeof *p->whisper);
    if (!p->whisper) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    if (p->generation_text) {
        p->whisper->generation = tm_json_parse(p->generation_text, strlen(p->generation_text));
        if (!p->whisper->generation)
            return tm__fail(err, TM_ERR_PARSE, "%s: generation_config.json is not valid JSON", p->repo->source);
    }
    return read_settings(p, p->whisper, err);
}

/* ---- A call's options --------------------------------------------------------------------- */

typedef struct asr_opts {
    tm_generation_config cfg;
    int32_t init[4];              /* the decoder's prompt */
    int n_init;
    int timestamps;               /* return_timestamps: chunks with times */
    int timestamp_rules;          /* the generation's timestamp processor */
    int seek;                     /* timestamps without max_new_tokens: the seek loop */
    double chunk_length_s, stride_length_s;   /* stride_length_s < 0: chunk_length_s / 6 */
    int force_full;
} asr_opts;

/* A number of seconds, 0 or more (absent or null: dflt). */
static tm_status opt_seconds(const tm_json *options, const char *key, double dflt, double *out, tm_error *err) {
    const tm_json *v = tm_json_get(options, key);
    if (!v || v->type == TM_JSON_NULL) *out = dflt;
    else if (v->type == TM_JSON_NUMBER && v->number >= 0 && v->number <= 1e7) *out = v->number;
    else return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "option %s must be a number of seconds, 0 or more", key);
    return TM_OK;
}

/* return_timestamps: true or false; "word" (token-level times from cross-attentions, which
 * the exports we run do not give) is refused by name. */
static tm_status opt_timestamps(const tm_pipeline *p, const tm_json *options, asr_opts *o, tm_error *err) {
    const tm_json *v = tm_json_get(options, "return_timestamps");
    if (v && v->type == TM_JSON_STRING && !strcmp(v->string, "word"))
        return tm__fail(err, TM_ERR_UNSUPPORTED, "return_timestamps \"word\" (word-level timestamps from the "
                        "decoder's cross-attentions) is not supported: use true for segment timestamps");
    if (v && v->type != TM_JSON_BOOL && v->type != TM_JSON_NULL)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "option return_timestamps must be true, false or \"word\"");
    o->timestamps = v && v->type == TM_JSON_BOOL && v->number != 0;
    o->timestamp_rules = v && v->type == TM_JSON_BOOL ? o->timestamps : p->whisper->return_timestamps;
    const tm_json *max_new = tm_json_get(options, "max_new_tokens");
    o->seek = o->timestamp_rules && !(max_new && max_new->type == TM_JSON_NUMBER && max_new->number != 0);
    if (o->timestamp_rules && p->whisper->no_timestamps < 0)
        return tm__fail(err, TM_ERR_UNSUPPORTED, "%s: return_timestamps needs the generation config's "
                        "no_timestamps_token_id (the model has no timestamp tokens)", p->repo->source);
    if (o->timestamp_rules && o->cfg.n_eos_token_ids < 1)
        return tm__fail(err, TM_ERR_UNSUPPORTED, "%s: return_timestamps needs an eos_token_id", p->repo->source);
    return TM_OK;
}

/* An id of lang_to_id or task_to_id, or -1. */
static int32_t lookup_id(const tm_json *map, const char *key) {
    const tm_json *v = tm_json_get(map, key);
    return v && v->type == TM_JSON_NUMBER && v->number >= 0 && v->number < INT32_MAX ? (int32_t)v->number : -1;
}

/* _retrieve_init_tokens: <|startoftranscript|>, then for a multilingual model <|lang|> (en
 * by default) and the task's token (transcribe by default), then <|notimestamps|> unless
 * timestamps are generated. A language or task the model lacks is an error (transformers.js
 * drops its token silently). */
static tm_status init_tokens(const tm_pipeline *p, const char *language, const char *task, asr_opts *o,
                             tm_error *err) {
    const struct tm__whisper *w = p->whisper;
    if (o->cfg.decoder_start_token_id < 0)
        return tm__fail(err, TM_ERR_UNSUPPORTED, "%s: no decoder_start_token_id (<|startoftranscript|>) in "
                        "config.json or generation_config.json", p->repo->source);
    o->init[o->n_init++] = o->cfg.decoder_start_token_id;
    if (w->multilingual) {
        const char *code = tm__whisper_language_code(language ? language : "en");
        if (!code) return unknown_language(language, err);
        char token[16];
        snprintf(token, sizeof token, "<|%s|>", code);
        int32_t lang = lookup_id(w->lang_to_id, token), task_id = lookup_id(w->task_to_id, task ? task : "transcribe");
        if (lang < 0)
            return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s: language \"%s\": the model has no %s in its "
                            "generation config's lang_to_id", p->repo->source, language ? language : "en", token);
        if (task_id < 0)
            return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s: task \"%s\" is not in the generation config's "
                            "task_to_id (Whisper's are transcribe and translate)", p->repo->source,
                            task ? task : "transcribe");
        o->init[o->n_init++] = lang;
        o->init[o->n_init++] = task_id;
    } else if (language || task) {
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "Cannot specify `task` or `language` for an English-only "
                        "model (%s: its generation config says is_multilingual false)", p->repo->source);
    }
    int32_t last = o->init[o->n_init - 1];
    if (!o->timestamp_rules && w->no_timestamps >= 0 && last != w->no_timestamps) o->init[o->n_init++] = w->no_timestamps;
    else if (o->timestamp_rules && last == w->no_timestamps) o->n_init--;
    return TM_OK;
}

/* The chunking options: chunk_length_s (0: the clip whole, cut to the extractor's window)
 * and stride_length_s (chunk_length_s / 6 by default), which both sides of a chunk
 * overlap by. */
static tm_status opt_chunks(const tm_json *options, asr_opts *o, tm_error *err) {
    tm_status s = opt_seconds(options, "chunk_length_s", 0, &o->chunk_length_s, err);
    if (!s) s = opt_seconds(options, "stride_length_s", -1, &o->stride_length_s, err);
    if (s || o->chunk_length_s <= 0) return s;
    if (o->stride_length_s < 0) o->stride_length_s = o->chunk_length_s / 6;
    else if (o->chunk_length_s <= o->stride_length_s)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "`chunk_length_s` must be larger than `stride_length_s`.");
    if (o->chunk_length_s <= 2 * o->stride_length_s)
        /* transformers.js would not move forward (its jump is chunk - 2 * stride) */
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "chunk_length_s (%g) must be more than twice stride_length_s "
                        "(%g): the stride overlaps both sides of a chunk", o->chunk_length_s, o->stride_length_s);
    return TM_OK;
}

static tm_status read_options(tm_pipeline *p, const tm_json *options, asr_opts *o, tm_error *err) {
    memset(o, 0, sizeof *o);
    const char *language = NULL, *task = NULL;
    tm_status s = tm__gen_config(p, options, 0, &o->cfg, err);
    if (s) return s;
    s = opt_timestamps(p, options, o, err);
    if (!s) s = opt_chunks(options, o, err);
    if (!s) s = tm__opt_bool(options, "force_full_sequences", 0, &o->force_full, err);
    if (!s) s = tm__opt_string(options, "language", NULL, &language, err);
    if (!s) s = tm__opt_string(options, "task", NULL, &task, err);
    if (!s) s = init_tokens(p, language, task, o, err);
    if (s) tm_generation_config_clear(&o->cfg);
    return s;
}

/* ---- Generation --------------------------------------------------------------------------- */

/* WhisperTimeStampLogitsProcessor's parameters, for the generator's processor hook. */
typedef struct timestamp_rules {
    size_t begin;
    int32_t no_timestamps, eos;
} timestamp_rules;

static void apply_timestamp_rules(void *user, float *scores, int64_t vocab, const int32_t *ids, size_t n) {
    const timestamp_rules *r = user;
    tm__logits_whisper_timestamps(scores, vocab, ids, n, r->begin, r->no_timestamps, r->eos);
}

/* The encoder on features (1, mels, frames); its last_hidden_state into the generator. */
static tm_status encode(tm_pipeline *p, const tm_tensor *features, tm_generator *g, tm_error *err) {
    int n_out = tm_model_n_outputs(p->encoder);
    tm_tensor **out = calloc((size_t)(n_out > 0 ? n_out : 1), sizeof *out);
    if (!out) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    const char *name = "input_features";
    tm_status s = tm_model_run(p->encoder, 1, &name, &features, out, NULL, err);
    int hidden = tm_model_output_index(p->encoder, "last_hidden_state");   /* checked at creation */
    if (!s) s = tm_generator_set_input(g, "encoder_hidden_states", out[hidden], err);
    for (int k = 0; k < n_out; k++) tm_tensor_free(out[k]);
    free(out);
    return s;
}

/* One generation on features: the prompt, then new tokens until EOS or the length limit;
 * *seq gets the whole sequence (malloc'ed). */
static tm_status generate(tm_pipeline *p, const asr_opts *o, const tm_tensor *features, int32_t **seq,
                          size_t *n, tm_error *err) {
    tm_generator *g = NULL;
    timestamp_rules rules = {(size_t)o->n_init, p->whisper->no_timestamps,
                             o->cfg.n_eos_token_ids ? o->cfg.eos_token_ids[0] : -1};
    tm_status s = tm_generator_create(p->model, &o->cfg, p->tok, &g, err);
    if (!s) s = encode(p, features, g, err);
    if (!s) s = tm_generator_append(g, o->init, (size_t)o->n_init, err);
    if (!s && o->timestamp_rules) tm__generator_set_processor(g, apply_timestamp_rules, &rules);
    if (!s) s = tm_generator_generate(g, NULL, NULL, err);
    const int32_t *ids = NULL;
    size_t len = 0;
    if (!s) s = tm_generator_sequence(g, 0, &ids, &len, err);
    int32_t *copy = s ? NULL : malloc((len + 1) * sizeof *copy);
    if (!s && !copy) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    if (!s) {
        memcpy(copy, ids, len * sizeof *copy);
        *seq = copy;
        *n = len;
    }
    tm_generator_free(g);
    return s;
}

/* Frames [from, to) of features (1, M, T) at the start of a zeroed (1, M, width). */
static tm_tensor *segment(const tm_tensor *features, int64_t from, int64_t to, int64_t width) {
    const int64_t *d = tm_tensor_dims(features);
    int64_t M = d[1], T = d[2], dims[3] = {1, M, width};
    tm_tensor *t = tm_tensor_new(TM_FLOAT, 3, dims);
    if (!t) return NULL;
    float *y = tm_tensor_data(t);
    const float *x = tm_tensor_data_const(features);
    memset(y, 0, (size_t)(M * width) * sizeof *y);
    for (int64_t m = 0; m < M; m++) memcpy(y + m * width, x + m * T + from, (size_t)(to - from) * sizeof *y);
    return t;
}

int64_t tm__whisper_seek_offset(const int32_t *gen, size_t n, int32_t first_ts, int64_t segment_frames,
                                size_t *keep) {
    size_t last_pair = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (gen[i] >= first_ts && gen[i + 1] >= first_ts) last_pair = i + 1;
    int single_ending = n >= 2 && gen[n - 1] >= first_ts && gen[n - 2] < first_ts;
    *keep = n;
    if (!last_pair || single_ending) return segment_frames;
    int64_t offset = (int64_t)(gen[last_pair - 1] - first_ts) * 2;   /* input_stride 2 */
    if (offset <= 0) return segment_frames;
    *keep = last_pair;
    return offset;
}

/* A growing id list. */
typedef struct id_buf {
    int32_t *v;
    size_t n, cap;
} id_buf;

static int id_buf_add(id_buf *b, const int32_t *x, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n) cap *= 2;
        int32_t *v = realloc(b->v, cap * sizeof *v);
        if (!v) return -1;
        b->v = v, b->cap = cap;
    }
    memcpy(b->v + b->n, x, n * sizeof *x);
    b->n += n;
    return 0;
}

/* _generate_with_seek: passes over the features from `seek` on (the rest zero-padded to
 * the encoder's 2 * max_source_positions frames) until they are used up or a pass gives
 * nothing; each pass's timestamps moved by its start. *seq: prompt, tokens, EOS. */
static tm_status generate_seeking(tm_pipeline *p, const asr_opts *o, const tm_tensor *features, int32_t **seq,
                                  size_t *n, tm_error *err) {
    int64_t total = tm_tensor_dims(features)[2], width = 2 * p->whisper->max_source_positions;
    int32_t eos = o->cfg.eos_token_ids[0], first_ts = p->whisper->no_timestamps + 1;
    id_buf all = {0};
    tm_status s = id_buf_add(&all, o->init, (size_t)o->n_init) ? tm__fail(err, TM_ERR_NO_MEMORY, "out of memory") : TM_OK;
    for (int64_t seek = 0; !s && seek < total;) {
        int64_t end = seek + width < total ? seek + width : total;
        tm_tensor *part = segment(features, seek, end, width);
        int32_t *pass = NULL;
        size_t len = 0;
        s = part ? generate(p, o, part, &pass, &len, err) : tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        tm_tensor_free(part);
        if (s) break;
        int32_t *gen = pass + o->n_init;
        size_t n_gen = len - (size_t)o->n_init, keep;
        if (n_gen > 0 && gen[n_gen - 1] == eos) n_gen--;
        if (n_gen == 0) {
            free(pass);
            break;
        }
        int64_t offset = tm__whisper_seek_offset(gen, n_gen, first_ts, end - seek, &keep);
        for (size_t i = 0; i < keep; i++)
            if (gen[i] >= first_ts) {
                int64_t moved = gen[i] + seek / 2;
                gen[i] = (int32_t)(moved < first_ts + 1500 ? moved : first_ts + 1500);
            }
        if (id_buf_add(&all, gen, keep)) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        free(pass);
        seek += offset;
    }
    if (!s && id_buf_add(&all, &eos, 1)) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    if (s) {
        free(all.v);
        return s;
    }
    *seq = all.v;
    *n = all.n;
    return TM_OK;
}

/* One chunk of a clip: its features, then its tokens. */
static tm_status transcribe_chunk(tm_pipeline *p, const asr_opts *o, const float *x, size_t n, tm__asr_chunk *chunk,
                                  tm_error *err) {
    tm_tensor *features[2] = {NULL, NULL};
    const char *names[2];
    int n_features = 0;
    tm_status s = tm__audio_fe_run(p->audio_fe, x, n, features, names, &n_features, err);
    if (!s) s = o->seek ? generate_seeking(p, o, features[0], &chunk->tokens, &chunk->n, err)
                        : generate(p, o, features[0], &chunk->tokens, &chunk->n, err);
    for (int i = 0; i < n_features; i++) tm_tensor_free(features[i]);
    return s;
}

/* ---- A clip ----------------------------------------------------------------------------- */

static void chunks_free(tm__asr_chunk *c, size_t n) {
    for (size_t i = 0; c && i < n; i++) free(c[i].tokens);
    free(c);
}

/* Samples [from, to) of the clip, as many as the extractor reads, into *buf (grown). */
static tm_status read_window(const tm_pipeline *p, tm__audio_window *clip, size_t from, size_t to, float **buf,
                             size_t *cap, size_t *n, tm_error *err) {
    size_t most = tm__audio_fe_max_samples(p->audio_fe);
    *n = most && to - from > most ? most : to - from;
    if (*n > *cap) {
        float *b = realloc(*buf, *n * sizeof *b);
        if (!b) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory reading %zu samples", *n);
        *buf = b, *cap = *n;
    }
    return tm__audio_window_read(clip, from, *n, *buf, err);
}

/* The clip in chunks as _call_whisper cuts it: windows of chunk_length_s every
 * chunk_length_s - 2 * stride_length_s (positions in samples as doubles, cut to whole
 * samples), each read from the file and transcribed in turn (an hour-long file is never
 * held whole); the strides in seconds. Without chunk_length_s, one chunk (of which the
 * extractor reads the first 30 s). */
static tm_status transcribe_clip(tm_pipeline *p, const asr_opts *o, tm__audio_window *clip, tm__asr_chunk **out,
                                 size_t *n_out, tm_error *err) {
    size_t n = tm__audio_window_length(clip), cap = 0, len = 0;
    float *x = NULL;
    double rate = tm__audio_fe_rate(p->audio_fe);
    double window = o->chunk_length_s > 0 ? rate * o->chunk_length_s : (double)n;
    double stride = o->chunk_length_s > 0 ? rate * o->stride_length_s : 0, jump = window - 2 * stride;
    if (window < 1 || jump < 1)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "chunk_length_s %g with stride_length_s %g: a chunk or its "
                        "step is shorter than one sample", o->chunk_length_s, o->stride_length_s);
    tm__asr_chunk *chunks = NULL;
    size_t count = 0;
    tm_status s = TM_OK;
    for (double offset = 0;;) {
        double offset_end = offset + window;
        size_t from = (size_t)offset < n ? (size_t)offset : n;
        size_t to = offset_end < (double)n ? (size_t)offset_end : n;
        int is_last = offset_end >= (double)n;
        tm__asr_chunk *c = realloc(chunks, (count + 1) * sizeof *c);
        if (!c) {
            s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
            break;
        }
        chunks = c;
        c = &chunks[count];
        double left = offset == 0 ? 0 : stride, right = is_last ? 0 : stride;
        *c = (tm__asr_chunk){NULL, 0, {(double)(to - from) / rate, left / rate, right / rate}};
        s = read_window(p, clip, from, to, &x, &cap, &len, err);
        if (!s) s = transcribe_chunk(p, o, x, len, c, err);
        count++;
        if (s || is_last) break;
        offset += jump;
    }
    free(x);
    if (s) {
        chunks_free(chunks, count);
        return s;
    }
    *out = chunks;
    *n_out = count;
    return TM_OK;
}

tm_status tm__whisper_call(tm_pipeline *p, const tm_json *inputs, const tm_json *options, tm__buf *out,
                           tm_error *err) {
    const char **paths = NULL;
    size_t n = 0;
    int batched = 0;
    tm_status s = tm__audio_inputs(inputs, &paths, &n, &batched, err);
    if (s) return s;
    asr_opts o;
    s = read_options(p, options, &o, err);
    if (s) {
        free(paths);
        return s;
    }
    double time_precision = tm__audio_fe_chunk_length(p->audio_fe) / (double)p->whisper->max_source_positions;
    int32_t timestamp_begin = p->whisper->timestamp_begin >= 0 ? p->whisper->timestamp_begin : INT32_MAX;
    if (batched) tm__put(out, "[");
    for (size_t i = 0; !s && i < n; i++) {
        tm__audio_window *clip = NULL;
        tm__asr_chunk *chunks = NULL;
        size_t n_chunks = 0;
        s = tm__audio_window_open(paths[i], tm__audio_fe_rate(p->audio_fe), &clip, NULL, err);
        if (!s) s = transcribe_clip(p, &o, clip, &chunks, &n_chunks, err);
        tm__audio_window_close(clip);
        if (!s && i) tm__put(out, ",");
        if (!s)
            s = tm__whisper_decode_asr(p, chunks, n_chunks, o.timestamps, o.force_full, time_precision,
                                       timestamp_begin, out, err);
        chunks_free(chunks, n_chunks);
    }
    if (batched) tm__put(out, "]");
    tm_generation_config_clear(&o.cfg);
    free(paths);
    return s;
}
