/* automatic-speech-recognition, as transformers.js's pipeline picks its method by model
 * type: CTC models (wav2vec2, HuBERT, UniSpeech) here, the argmax token of each frame's
 * logits decoded by the repo's tokenizer with special tokens skipped (its CTC decoder
 * collapses repeats and turns the word delimiter into a space), trimmed: {"text": ...} per
 * clip, as _call_wav2vec2; Whisper (an encoder-decoder that generates) in whisper.c.
 * Moonshine and the other generating models are refused by name. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include "pipelines.h"
#include "whisper.h"
#include "../core/status.h"

static const char *const ctc_types[] = {"wav2vec2", "wav2vec2-bert", "unispeech", "unispeech-sat", "hubert"};

static int is_ctc(const char *model_type) {
    for (size_t i = 0; i < sizeof ctc_types / sizeof ctc_types[0]; i++)
        if (!strcmp(model_type, ctc_types[i])) return 1;
    return 0;
}

static int is_whisper(const tm_pipeline *p) {
    const char *type = p->repo->model_type;
    return !strcmp(type, "whisper") || !strcmp(type, "lite-whisper");
}

/* Before any ONNX file is looked for: the model type decides the method (and, for Whisper,
 * that an encoder and a decoder are loaded). */
static tm_status prepare(tm_pipeline *p, tm_error *err) {
    const char *type = p->repo->model_type;
    if (!strcmp(type, "moonshine"))
        return tm__fail(err, TM_ERR_UNSUPPORTED,
                        "%s: automatic-speech-recognition with a %s model is not supported yet; Whisper and "
                        "CTC models (wav2vec2, hubert, unispeech) are", p->repo->source, type);
    if (!is_ctc(type) && !is_whisper(p))
        return tm__fail(err, TM_ERR_UNSUPPORTED,
                        "%s: automatic-speech-recognition does not support model type '%s' (whisper, and CTC "
                        "models: wav2vec2, wav2vec2-bert, unispeech, unispeech-sat, hubert)", p->repo->source, type);
    p->encoder_decoder = is_whisper(p);
    return tm__audio_prepare(p, err);
}

static tm_status check(tm_pipeline *p, tm_error *err) {
    if (is_whisper(p)) return tm__whisper_check(p, err);
    if (!p->tok)
        return tm__fail(err, TM_ERR_NOT_FOUND, "%s: no tokenizer.json (%s needs a tokenizer)", p->repo->source,
                        p->task->name);
    if (tm_model_output_index(p->model, "logits") < 0)
        return tm__fail(err, TM_ERR_UNSUPPORTED, "%s: %s needs an output 'logits'", p->onnx_file, p->task->name);
    return TM_OK;
}

/* {"text": ...} of one clip's logits (1, frames, vocab). */
static tm_status put_clip(tm_pipeline *p, const tm_tensor *logits, tm__buf *out, tm_error *err) {
    const int64_t *dims = tm_tensor_dims(logits);
    if (tm_tensor_rank(logits) != 3 || dims[0] != 1 || dims[2] < 1)
        return tm__fail(err, TM_ERR_SHAPE, "%s: logits are not (1, frames, vocabulary)", p->onnx_file);
    size_t T = (size_t)dims[1], V = (size_t)dims[2];
    const float *x = tm_tensor_data((tm_tensor *)logits);
    int64_t *ids = malloc((T ? T : 1) * sizeof *ids);
    if (!ids) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (size_t t = 0; t < T; t++) {
        size_t best = 0;   /* the first of equal maxima, as transformers.js's max() */
        for (size_t v = 1; v < V; v++)
            if (x[t * V + v] > x[t * V + best]) best = v;
        ids[t] = (int64_t)best;
    }
    char *text = NULL;
    tm_status s = tm__decode(p, ids, T, 1, &text, err);
    free(ids);
    if (s) return s;
    /* String.trim(): ASCII white space here (the decoder gives spaces) */
    char *a = text, *b = text + strlen(text);
    while (*a && isspace((unsigned char)*a)) a++;
    while (b > a && isspace((unsigned char)b[-1])) b--;
    *b = '\0';
    tm__put(out, "{\"text\":");
    tm__put_string(out, a);
    tm__put(out, "}");
    free(text);
    return TM_OK;
}

static tm_status call(tm_pipeline *p, const tm_json *inputs, const tm_json *options, tm__buf *out,
                      tm_error *err) {
    if (is_whisper(p)) return tm__whisper_call(p, inputs, options, out, err);
    const char **paths = NULL;
    size_t n = 0;
    int batched = 0;
    tm_status s = tm__audio_inputs(inputs, &paths, &n, &batched, err);
    if (s) return s;
    if (batched) tm__put(out, "[");
    for (size_t i = 0; !s && i < n; i++) {
        tm_tensor *logits = NULL;
        const char *name = "logits";
        s = tm__audio_run(p, paths[i], 1, &name, &logits, err);
        if (!s && i) tm__put(out, ",");
        if (!s) s = put_clip(p, logits, out, err);
        tm_tensor_free(logits);
    }
    if (batched) tm__put(out, "]");
    free(paths);
    return s;
}

const tm__task tm__task_automatic_speech_recognition = {
    "automatic-speech-recognition", NULL, check, call, 0, 1, prepare,
};
