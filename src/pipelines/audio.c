/* What the audio tasks share: reading preprocessor_config.json into a feature extractor,
 * the call's audio arguments (paths), and one clip from file to model outputs. Not the
 * decoding (src/media/audio.c) nor the features (audio_features.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pipelines.h"
#include "audio_features.h"
#include "../core/status.h"
#include "../media/audio.h"

tm_status tm__audio_prepare(tm_pipeline *p, tm_error *err) {
    tm_json *config = NULL;
    char why[160];
    snprintf(why, sizeof why, "%s needs a feature extractor", p->task->name);
    tm_status s = tm__repo_json(p, "preprocessor_config.json", why, &config, err);
    if (s) return s;
    s = tm__audio_fe_open(config, p->repo->source, &p->audio_fe, err);
    tm_json_free(config);
    return s;
}

tm_status tm__audio_inputs(const tm_json *inputs, const char ***paths, size_t *n, int *batched,
                           tm_error *err) {
    const tm_json *v = inputs->n > 0 ? &inputs->items[0] : NULL;
    if (v && v->type != TM_JSON_STRING && v->type != TM_JSON_ARRAY)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT,
                        "audio: a path to a sound file or a .npy float32 waveform (or an array of them)");
    return tm__strings(v, "audio", paths, n, batched, err);
}

tm_status tm__audio_run(tm_pipeline *p, const char *path, int n_out, const char *const *names,
                        tm_tensor **out, tm_error *err) {
    for (int i = 0; i < n_out; i++)   /* before the audio is decoded */
        if (tm_model_output_index(p->model, names[i]) < 0)
            return tm__fail(err, TM_ERR_NOT_FOUND, "%s: the model has no output '%s'", p->onnx_file, names[i]);
    float *x = NULL;
    size_t n = 0;
    tm_status s = tm__audio_load(path, tm__audio_fe_rate(p->audio_fe), &x, &n, NULL, err);
    if (s) return s;
    tm_tensor *features[2] = {NULL, NULL};
    const char *feature_names[2];
    int n_features = 0;
    s = tm__audio_fe_run(p->audio_fe, x, n, features, feature_names, &n_features, err);
    free(x);
    /* the extractor's outputs the model takes (wav2vec2 exports have no attention_mask) */
    const char *use_names[2];
    const tm_tensor *use[2];
    int n_in = 0;
    for (int i = 0; !s && i < n_features; i++)
        if (tm_model_input_index(p->model, feature_names[i]) >= 0) {
            use_names[n_in] = feature_names[i];
            use[n_in++] = features[i];
        }
    if (!s && n_in == 0)
        s = tm__fail(err, TM_ERR_UNSUPPORTED, "%s: the model has no input '%s' (what %s gives)", p->onnx_file,
                     feature_names[0], tm__audio_fe_type(p->audio_fe));
    if (!s) s = tm__run_model(p, n_in, use_names, use, n_out, names, out, err);
    for (int i = 0; i < n_features; i++) tm_tensor_free(features[i]);
    return s;
}
