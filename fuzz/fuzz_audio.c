/* libFuzzer target: audio files in (src/media/audio.c: libsndfile's readers behind our
 * checks for truncated and empty files, the stereo mix and the linear resampler), then the
 * feature extractors of src/pipelines/audio_features.c on what was decoded. The first byte
 * picks the target rate and which extractors run; the rest is the file, through a memfd (the
 * loader takes a path; a .npy waveform goes through fuzz_npy's reader instead): bits 0-1
 * the rate (16, 8, 22.05 or 44.1 kHz), the high nibble 1 or 2 adds Whisper's or AST's
 * extractor to Wav2Vec2's (their 30 s and 10 s windows cost much more). Asserts: an
 * error carries a message and leaves the outputs untouched; a success has samples, every
 * one read (so ASan sees a short buffer); the extractors' outputs have the shapes they
 * promise. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "core/tensor.h"
#include "hub/json.h"
#include "media/audio.h"
#include "pipelines/audio_features.h"

static const char *const configs[3] = {
    "{\"feature_extractor_type\": \"Wav2Vec2FeatureExtractor\", \"feature_size\": 1, "
    "\"sampling_rate\": 16000, \"padding_value\": 0.0, \"do_normalize\": true, "
    "\"return_attention_mask\": true}",
    "{\"feature_extractor_type\": \"WhisperFeatureExtractor\", \"feature_size\": 80, "
    "\"sampling_rate\": 16000, \"hop_length\": 160, \"chunk_length\": 30, \"n_fft\": 400, "
    "\"n_samples\": 480000, \"nb_max_frames\": 3000, \"padding_value\": 0.0}",
    "{\"feature_extractor_type\": \"ASTFeatureExtractor\", \"feature_size\": 1, "
    "\"sampling_rate\": 16000, \"num_mel_bins\": 128, \"max_length\": 1024, "
    "\"do_normalize\": true, \"mean\": -4.2677393, \"std\": 4.5689974, \"padding_value\": 0.0}",
};
static tm__audio_fe *fes[3];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    for (int i = 0; i < 3; i++) {
        tm_json *j = tm_json_parse(configs[i], strlen(configs[i]));
        tm_error err;
        memset(&err, 0, sizeof err);
        if (!j || tm__audio_fe_open(j, "fuzz", &fes[i], &err) != TM_OK) {
            fprintf(stderr, "fuzz_audio: extractor %d: %s\n", i, err.message);
            abort();
        }
        tm_json_free(j);
    }
    return 0;
}

static void extract(const tm__audio_fe *fe, const float *x, size_t n) {
    tm_tensor *out[2] = {NULL, NULL};
    const char *names[2] = {NULL, NULL};
    int n_out = -1;
    tm_error err;
    memset(&err, 0, sizeof err);
    if (tm__audio_fe_run(fe, x, n, out, names, &n_out, &err) != TM_OK) {
        if (!err.message[0] || out[0] || out[1]) abort();
        return;
    }
    if (n_out < 1 || n_out > 2) abort();
    for (int i = 0; i < n_out; i++) {
        if (!out[i] || !names[i] || out[i]->rank < 2 || out[i]->dims[0] != 1) abort();
        volatile uint8_t sink = 0;   /* every byte read */
        const uint8_t *p = out[i]->data;
        for (size_t k = 0; k < out[i]->nbytes; k += 64) sink ^= p[k];
        if (out[i]->nbytes) sink ^= p[out[i]->nbytes - 1];
        (void)sink;
        tm_tensor_free(out[i]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const int rates[4] = {16000, 8000, 22050, 44100};
    unsigned sel = data[0];
    int fd = memfd_create("fuzz_audio", 0);
    if (fd < 0) abort();
    if (size > 1 && write(fd, data + 1, size - 1) != (ssize_t)(size - 1)) abort();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    float *x = (float *)(uintptr_t)1;   /* must stay untouched on error */
    size_t n = 12345;
    tm__audio_info info;
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status s = tm__audio_load(path, rates[sel & 3], &x, &n, &info, &err);
    close(fd);
    if (s != TM_OK) {
        if (!err.message[0] || x != (float *)(uintptr_t)1 || n != 12345) abort();
        return 0;
    }
    if (!x || n == 0 || info.rate_in <= 0 || info.channels_in <= 0) abort();
    volatile float sum = 0;
    for (size_t i = 0; i < n; i++) sum += x[i];
    (void)sum;
    /* The extractors take 16 kHz; the waveform is cut to 2 s so that an input runs fast
     * (Whisper and AST pad or cut to their own window anyway). */
    size_t m = n < 32000 ? n : 32000;
    extract(fes[0], x, m);
    if (sel >> 4 == 1) extract(fes[1], x, m);   /* a 30 s window each: 1 input in 16 */
    if (sel >> 4 == 2) extract(fes[2], x, m);
    free(x);
    return 0;
}
