/* `transmuter audio-features`: a debugging and testing view of the audio tasks' first
 * steps: the decoded waveform and a feature extractor's outputs, written as .npy files so
 * that they can be compared with transformers.js's (tests/audio.sh). Not a task: no model. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "../include/transmuter.h"
#include "../src/core/status.h"
#include "../src/hub/json.h"
#include "../src/io/npy.h"
#include "../src/media/audio.h"
#include "../src/pipelines/audio_features.h"

int tm__cmd_audio_features(int argc, char **argv);

static void usage(FILE *f) {
    fprintf(f, "usage: transmuter audio-features INPUT --out DIR [--processor CONFIG|REPO_FOLDER]\n"
               "                 [--rate HZ]\n"
               "Decodes INPUT (a sound file libsndfile reads, or a .npy float32 waveform taken as\n"
               "already at the rate) to mono float32 at the processor's sampling_rate (or --rate;\n"
               "16000 without either), mixing and resampling as the audio tasks do, and writes\n"
               "DIR/waveform.npy; with --processor (a preprocessor_config.json or a folder\n"
               "holding one), also DIR/NAME.npy for each of the feature extractor's outputs\n"
               "(input_values, input_features, attention_mask), batch dimension included.\n"
               "Prints what was read: rate, channels and samples in, samples out.\n");
}

static int fail(const tm_error *err, tm_status st) {
    fprintf(stderr, "transmuter: %s\n", err->message[0] ? err->message : tm_status_name(st));
    return 1;
}

/* preprocessor_config.json of `where` (the file, or a folder holding one), parsed; its
 * path in path. Shared with image-features (cmd_image.c). */
tm_status tm__cli_read_processor_config(const char *where, char *path, size_t cap, tm_json **out,
                                        tm_error *err) {
    struct stat st;
    if (stat(where, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(path, cap, "%s/preprocessor_config.json", where);
    else
        snprintf(path, cap, "%s", where);
    if (access(path, R_OK) != 0) return tm__fail(err, TM_ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    if (!(*out = tm_json_read_file(path))) return tm__fail(err, TM_ERR_PARSE, "%s: not valid JSON", path);
    return TM_OK;
}

/* The extractor of a preprocessor_config.json (or of a folder's). */
static tm_status open_processor(const char *where, tm__audio_fe **fe, tm_error *err) {
    char path[4096];
    tm_json *config = NULL;
    tm_status s = tm__cli_read_processor_config(where, path, sizeof path, &config, err);
    if (s) return s;
    s = tm__audio_fe_open(config, path, fe, err);
    tm_json_free(config);
    return s;
}

static tm_status write_npy(const char *dir, const char *name, const tm_tensor *t, tm_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.npy", dir, name);
    return tm_npy_write(path, t, err);
}

int tm__cmd_audio_features(int argc, char **argv) {
    const char *input = NULL, *out = NULL, *processor = NULL;
    int rate = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--processor") && i + 1 < argc) processor = argv[++i];
        else if (!strcmp(argv[i], "--rate") && i + 1 < argc) rate = atoi(argv[++i]);
        else if (argv[i][0] == '-' && argv[i][1] == '-') {
            fprintf(stderr, "transmuter: unknown option %s\n", argv[i]);
            usage(stderr);
            return 2;
        } else if (!input) input = argv[i];
        else {
            usage(stderr);
            return 2;
        }
    }
    if (!input || !out) {
        usage(stderr);
        return 2;
    }
    tm_error err;
    memset(&err, 0, sizeof err);
    tm__audio_fe *fe = NULL;
    tm_status s = processor ? open_processor(processor, &fe, &err) : TM_OK;
    if (s) return fail(&err, s);
    if (rate <= 0) rate = fe ? tm__audio_fe_rate(fe) : 16000;
    float *x = NULL;
    size_t n = 0;
    tm__audio_info info;
    s = tm__audio_load(input, rate, &x, &n, &info, &err);
    if (s) {
        tm__audio_fe_free(fe);
        return fail(&err, s);
    }
    if (mkdir(out, 0777) != 0 && errno != EEXIST)
        s = tm__fail(&err, TM_ERR_IO, "cannot create '%s': %s", out, strerror(errno));
    int64_t dims[1] = {(int64_t)n};
    tm_tensor *wave = s ? NULL : tm_tensor_wrap(TM_FLOAT, 1, dims, x);
    if (!s) s = wave ? write_npy(out, "waveform", wave, &err) : TM_ERR_NO_MEMORY;
    tm_tensor_free(wave);
    if (!s) printf("rate_in %d channels_in %d samples_in %lld rate_out %d samples_out %zu\n", info.rate_in,
                   info.channels_in, (long long)info.samples_in, rate, n);
    if (!s && fe) {
        tm_tensor *t[2] = {NULL, NULL};
        const char *names[2];
        int n_out = 0;
        s = tm__audio_fe_run(fe, x, n, t, names, &n_out, &err);
        for (int i = 0; !s && i < n_out; i++) {
            s = write_npy(out, names[i], t[i], &err);
            if (!s) printf("%s %s\n", tm__audio_fe_type(fe), names[i]);
        }
        for (int i = 0; i < n_out; i++) tm_tensor_free(t[i]);
    }
    free(x);
    tm__audio_fe_free(fe);
    return s ? fail(&err, s) : 0;
}
