/* Tests of audio in (src/media/audio.c, fft.c) and the audio feature extractors
 * (src/pipelines/audio_features.c) at the level of their functions: the DFT against a plain
 * sum in long double, the resampler's counts and values, hand-made WAV files (stereo mix,
 * 16-bit scaling, truncation, no samples), streams read in windows against the whole clip
 * (WAV, FLAC, OGG, resampled or not), configs refused by name, and extractor outputs
 * that can be worked out by hand (silence, a constant); truncations and byte flips of a
 * small WAV give a result or an error, never a crash; the block-by-block reader gives the
 * whole-file reader's samples at every rate and read size. transformers.js's arrays are
 * compared in tests/audio.sh. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../src/core/tensor.h"
#include "../src/hub/json.h"
#include "../src/media/audio.h"
#include "../src/media/fft.h"
#include "../src/pipelines/audio_features.h"
#include <sndfile.h>

#include "check.h"

static char dir[96];   /* TMPDIR plus a name: longer TMPDIRs fail mkdtemp, said below */

static void test_fft(void) {
    static const size_t lengths[] = {1, 2, 3, 4, 5, 6, 7, 8, 12, 97, 400, 512, 1000};
    uint64_t state = 42;
    for (size_t li = 0; li < sizeof lengths / sizeof lengths[0]; li++) {
        size_t n = lengths[li];
        double *x = malloc(n * sizeof *x), *out = malloc(2 * (n / 2 + 1) * sizeof *out);
        for (size_t j = 0; j < n; j++) {
            state ^= state << 13, state ^= state >> 7, state ^= state << 17;
            x[j] = (double)(state >> 11) / 9007199254740992.0 - 0.5;
        }
        tm__fft *f = NULL;
        CHECK(tm__fft_create(n, &f, NULL) == TM_OK, "fft of %zu", n);
        if (!f) continue;
        tm__fft_real(f, x, out);
        double worst = 0;
        for (size_t k = 0; k <= n / 2; k++) {
            long double re = 0, im = 0;
            for (size_t j = 0; j < n; j++) {
                long double a = -2 * 3.141592653589793238462643383279502884L * (long double)((j * k) % n) / n;
                re += x[j] * cosl(a), im += x[j] * sinl(a);
            }
            worst = fmax(worst, fabs((double)(re - out[2 * k])) + fabs((double)(im - out[2 * k + 1])));
        }
        CHECK(worst < 1e-12 * (double)n, "fft of %zu: max error %g against the plain sum", n, worst);
        tm__fft_free(f);
        free(x);
        free(out);
    }
    tm__fft *f = NULL;
    CHECK(tm__fft_create(0, &f, NULL) == TM_ERR_INVALID_ARGUMENT && !f, "fft of 0 points refused");
    tm__fft_free(NULL);
}

static void test_resample(void) {
    /* the reference clips' counts: round(n * out / in) */
    static const struct { size_t n; int in; size_t want; } counts[] = {
        {66150, 44100, 24000}, {20472, 8000, 40944}, {108417, 48000, 36139}, {44100, 22050, 32000}};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        float *x = calloc(counts[i].n, sizeof *x), *y = NULL;
        size_t m = 0;
        tm_status s = tm__audio_resample_linear(x, counts[i].n, counts[i].in, 16000, &y, &m, NULL);
        CHECK(s == TM_OK && m == counts[i].want, "%zu samples at %d Hz give %zu at 16 kHz, not %zu", counts[i].n,
              counts[i].in, counts[i].want, m);
        free(x);
        free(y);
    }
    const float x[3] = {0, 1, 2};
    float *y = NULL;
    size_t m = 0;
    CHECK(tm__audio_resample_linear(x, 3, 8000, 16000, &y, &m, NULL) == TM_OK && m == 6, "upsampling by 2");
    const float want[6] = {0, 0.5f, 1, 1.5f, 2, 2};   /* the last sample held past the end */
    for (size_t i = 0; y && i < 6; i++) CHECK(y[i] == want[i], "upsampled[%zu] = %g, not %g", i, y[i], want[i]);
    free(y);
    y = NULL;
    CHECK(tm__audio_resample_linear(x, 3, 0, 16000, &y, &m, NULL) == TM_ERR_INVALID_ARGUMENT && !y, "rate 0 refused");
    CHECK(tm__audio_resample_linear(x, 3, 1, 1000000000, &y, &m, NULL) == TM_ERR_INVALID_ARGUMENT && !y,
          "a resampled clip of 3e9 samples refused");
}

/* A 16-bit PCM WAV of `frames` frames; data_bytes is what the header claims, `keep` how
 * many data bytes are written. */
static void write_wav(const char *path, int channels, int rate, const int16_t *pcm, size_t frames,
                      uint32_t data_bytes, size_t keep) {
    FILE *f = fopen(path, "wb");
    uint32_t riff = 36 + data_bytes, fmt_size = 16, byte_rate = (uint32_t)(rate * channels * 2);
    uint16_t format = 1, ch = (uint16_t)channels, align = (uint16_t)(channels * 2), bits = 16;
    fwrite("RIFF", 1, 4, f), fwrite(&riff, 4, 1, f), fwrite("WAVEfmt ", 1, 8, f);
    fwrite(&fmt_size, 4, 1, f), fwrite(&format, 2, 1, f), fwrite(&ch, 2, 1, f);
    uint32_t r = (uint32_t)rate;
    fwrite(&r, 4, 1, f), fwrite(&byte_rate, 4, 1, f), fwrite(&align, 2, 1, f), fwrite(&bits, 2, 1, f);
    fwrite("data", 1, 4, f), fwrite(&data_bytes, 4, 1, f);
    size_t all = frames * (size_t)channels * 2;
    fwrite(pcm, 1, keep < all ? keep : all, f);
    fclose(f);
}

static void test_wav(void) {
    char path[128];
    int16_t pcm[8] = {16384, -16384, 32767, 1, -32768, -32768, 0, 100};
    snprintf(path, sizeof path, "%s/stereo.wav", dir);
    write_wav(path, 2, 16000, pcm, 4, 16, 16);
    float *x = NULL;
    size_t n = 0;
    tm__audio_info info;
    tm_error err;
    tm_status s = tm__audio_load(path, 16000, &x, &n, &info, &err);
    CHECK(s == TM_OK && n == 4 && info.channels_in == 2 && info.rate_in == 16000, "stereo WAV: %s", err.message);
    for (size_t i = 0; s == TM_OK && i < 4; i++) {
        double l = pcm[2 * i] / 32768.0, r = pcm[2 * i + 1] / 32768.0;
        float want = (float)(sqrt(2.0) * ((double)(float)l + (double)(float)r) / 2);
        CHECK(x[i] == want, "stereo mix [%zu]: %.9g, not %.9g", i, x[i], want);
    }
    free(x);

    snprintf(path, sizeof path, "%s/mono8k.wav", dir);
    write_wav(path, 1, 8000, pcm, 8, 16, 16);
    x = NULL;
    s = tm__audio_load(path, 16000, &x, &n, &info, &err);
    CHECK(s == TM_OK && n == 16 && info.samples_in == 8 && x[0] == 0.5f && x[2] == -0.5f && x[4] == 32767 / 32768.0f,
          "8 kHz mono resampled to 16 kHz: %s", err.message);
    free(x);

    snprintf(path, sizeof path, "%s/truncated.wav", dir);
    write_wav(path, 1, 16000, pcm, 8, 1000, 16);
    float *untouched = (float *)&err;
    x = untouched;
    n = 77;
    s = tm__audio_load(path, 16000, &x, &n, NULL, &err);
    CHECK(s == TM_ERR_PARSE && strstr(err.message, path) && strstr(err.message, "truncated"),
          "a truncated WAV: %d %s", s, err.message);
    CHECK(x == untouched && n == 77, "outputs untouched on error");

    snprintf(path, sizeof path, "%s/empty.wav", dir);
    write_wav(path, 1, 16000, pcm, 0, 0, 0);
    s = tm__audio_load(path, 16000, &x, &n, NULL, &err);
    CHECK(s == TM_ERR_INVALID_ARGUMENT && strstr(err.message, "no samples"), "an empty WAV: %d %s", s, err.message);

    snprintf(path, sizeof path, "%s/missing.wav", dir);
    s = tm__audio_load(path, 16000, &x, &n, NULL, &err);
    CHECK(s == TM_ERR_IO && strstr(err.message, path), "a missing file: %d %s", s, err.message);
}

/* The stream reads what tm__audio_load reads, sample for sample, in reads of any size. */
static void test_stream(void) {
    enum { FRAMES = 20011 };
    static const int rates[] = {8000, 11025, 16000, 22050, 44100, 48000};
    static const size_t caps[] = {1, 7, 4095, 4097, 100000};
    int16_t *pcm = malloc(2 * FRAMES * sizeof *pcm);
    float *got = malloc(2 * 3 * FRAMES * sizeof *got);
    uint64_t state = 7;
    for (size_t i = 0; i < 2 * FRAMES; i++) {
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        pcm[i] = (int16_t)(state >> 48);
    }
    char path[128];
    tm_error err;
    for (int channels = 1; channels <= 2; channels++)
        for (size_t ri = 0; ri < sizeof rates / sizeof rates[0]; ri++) {
            snprintf(path, sizeof path, "%s/stream%d_%d.wav", dir, channels, rates[ri]);
            write_wav(path, channels, rates[ri], pcm, FRAMES, FRAMES * 2 * (uint32_t)channels, FRAMES * 2 * (size_t)channels);
            float *want = NULL;
            size_t n = 0;
            if (tm__audio_load(path, 16000, &want, &n, NULL, &err) != TM_OK) {
                CHECK(0, "%s: %s", path, err.message);
                continue;
            }
            for (size_t ci = 0; ci < sizeof caps / sizeof caps[0]; ci++) {
                tm__audio_stream *st = NULL;
                tm__audio_info info;
                size_t total = 0, k = 1;
                tm_status s = tm__audio_stream_open(path, TM__MIX_TJS, &st, &info, &err);
                if (!s) s = tm__audio_stream_set_rate(st, 16000, &err);
                CHECK(!s && info.rate_in == rates[ri] && info.channels_in == channels && info.samples_in == FRAMES &&
                      tm__audio_stream_length(st) == (int64_t)n, "stream of %s: %s", path, err.message);
                while (!s && k && total < 3 * FRAMES) {
                    size_t cap = caps[ci] < 3 * FRAMES - total ? caps[ci] : 3 * FRAMES - total;
                    s = tm__audio_stream_read(st, got + total, cap, &k, &err);
                    total += k;
                }
                CHECK(!s && total == n && !memcmp(got, want, n * sizeof *got),
                      "%s read %zu at a time: %zu samples of %zu, %s", path, caps[ci], total, n, s ? err.message : "differ");
                tm__audio_stream_close(st);
            }
            free(want);
        }
    /* Silero's mix: the channels' mean in float32 */
    tm__audio_stream *st = NULL;
    size_t k = 0;
    snprintf(path, sizeof path, "%s/stream2_16000.wav", dir);
    tm_status s = tm__audio_stream_open(path, TM__MIX_MEAN, &st, NULL, &err);
    if (!s) s = tm__audio_stream_read(st, got, FRAMES, &k, &err);
    int same = !s && k == FRAMES;
    for (size_t i = 0; same && i < FRAMES; i++)
        same = got[i] == ((float)(pcm[2 * i] / 32768.0) + (float)(pcm[2 * i + 1] / 32768.0)) / 2.0f;
    CHECK(same, "mean of two channels: %s", s ? err.message : "differs");
    tm__audio_stream_close(st);
    /* a WAV of no frames opens and reads nothing; a truncated one is refused naming it */
    snprintf(path, sizeof path, "%s/stream_empty.wav", dir);
    write_wav(path, 1, 16000, pcm, 0, 0, 0);
    st = NULL;
    s = tm__audio_stream_open(path, TM__MIX_MEAN, &st, NULL, &err);
    if (!s) s = tm__audio_stream_read(st, got, 10, &k, &err);
    CHECK(!s && k == 0, "an empty WAV streams nothing: %s", err.message);
    tm__audio_stream_close(st);
    snprintf(path, sizeof path, "%s/stream_cut.wav", dir);
    write_wav(path, 1, 16000, pcm, FRAMES, FRAMES * 2, FRAMES);
    st = NULL;
    s = tm__audio_stream_open(path, TM__MIX_MEAN, &st, NULL, &err);
    CHECK(s == TM_ERR_PARSE && !st && strstr(err.message, path) && strstr(err.message, "truncated"),
          "a truncated WAV: %d %s", s, err.message);
    tm__audio_stream_close(NULL);
    free(pcm);
    free(got);
}

/* A file written by libsndfile (FLAC, OGG): 0 when this libsndfile cannot write it. */
static int write_sndfile(const char *path, int format, int channels, int rate, const int16_t *pcm, size_t frames) {
    SF_INFO info = {.samplerate = rate, .channels = channels, .format = format};
    SNDFILE *f = sf_open(path, SFM_WRITE, &info);
    if (!f) return 0;
    sf_count_t put = sf_writef_short(f, pcm, (sf_count_t)frames);
    sf_close(f);
    return put == (sf_count_t)frames;
}

/* Windows of a clip are the very samples of the whole clip, at the file's rate and
 * resampled, mono and stereo, read in place (WAV, FLAC) or whole at opening (OGG, .npy). */
static void test_windows(void) {
    enum { FRAMES = 9001 };
    int16_t *pcm = malloc(2 * FRAMES * sizeof *pcm);
    uint64_t state = 7;
    for (size_t i = 0; i < 2 * FRAMES; i++) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        pcm[i] = (int16_t)(state >> 48);
    }
    struct { const char *name; int format, channels, rate; } files[] = {
        {"s44k.wav", 0, 2, 44100}, {"m8k.wav", 0, 1, 8000}, {"m16k.wav", 0, 1, 16000},
        {"s22k.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 2, 22050}, {"m48k.ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS, 1, 48000},
    };
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        char path[160];
        snprintf(path, sizeof path, "%s/%s", dir, files[f].name);
        uint32_t bytes = (uint32_t)(FRAMES * files[f].channels * 2);
        if (!files[f].format) write_wav(path, files[f].channels, files[f].rate, pcm, FRAMES, bytes, bytes);
        else if (!write_sndfile(path, files[f].format, files[f].channels, files[f].rate, pcm, FRAMES)) {
            printf("skip: this libsndfile cannot write %s\n", files[f].name);
            continue;
        }
        float *whole = NULL;
        size_t n = 0;
        tm_error err = {0};
        tm__audio_window *st = NULL;
        tm_status s = tm__audio_load(path, 16000, &whole, &n, NULL, &err);
        if (!s) s = tm__audio_window_open(path, 16000, &st, NULL, &err);
        CHECK(s == TM_OK && tm__audio_window_length(st) == n, "%s: %s", files[f].name, err.message);
        /* windows forwards, backwards, overlapping, one sample, the very end */
        size_t windows[][2] = {{0, n / 3}, {n / 4, n / 2}, {n - 1, 1}, {10, 1}, {n / 2, n - n / 2}, {0, n}, {123, 0}};
        float *part = malloc((n + 1) * sizeof *part);
        for (size_t w = 0; !s && w < sizeof windows / sizeof *windows; w++) {
            s = tm__audio_window_read(st, windows[w][0], windows[w][1], part, &err);
            CHECK(s == TM_OK && !memcmp(part, whole + windows[w][0], windows[w][1] * sizeof *part),
                  "%s: samples %zu + %zu as the whole clip's (%s)", files[f].name, windows[w][0], windows[w][1],
                  s ? err.message : "");
        }
        CHECK(st && tm__audio_window_read(st, n - 10, 11, part, &err) == TM_ERR_INVALID_ARGUMENT,
              "%s: a window past the end is refused", files[f].name);
        free(part);
        free(whole);
        tm__audio_window_close(st);
    }
    /* a file cut after opening: the window that cannot be read says so */
    char path[160];
    snprintf(path, sizeof path, "%s/cut_later.wav", dir);
    write_wav(path, 1, 16000, pcm, FRAMES, 2 * FRAMES, 2 * FRAMES);
    tm__audio_window *st = NULL;
    tm_error err = {0};
    CHECK(tm__audio_window_open(path, 16000, &st, NULL, &err) == TM_OK, "open %s: %s", path, err.message);
    CHECK(truncate(path, 44 + 2 * 1000) == 0, "truncate %s", path);
    float part[100];
    tm_status s = st ? tm__audio_window_read(st, 5000, 100, part, &err) : TM_ERR_IO;
    CHECK(s == TM_ERR_PARSE && strstr(err.message, "truncated or corrupt"), "a window past a cut: %d %s", s,
          err.message);
    tm__audio_window_close(st);
    free(pcm);
}

static tm__audio_fe *open_fe(const char *json, tm_status want, const char *message) {
    tm_json *c = tm_json_parse(json, strlen(json));
    tm__audio_fe *fe = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status s = tm__audio_fe_open(c, "REPO", &fe, &err);
    CHECK(s == want && (!message || strstr(err.message, message)), "%s: %d %s", json, s, err.message);
    tm_json_free(c);
    return fe;
}

static void test_extractors(void) {
    open_fe("{\"feature_extractor_type\":\"ClapFeatureExtractor\"}", TM_ERR_UNSUPPORTED, "'ClapFeatureExtractor' is not supported");
    open_fe("{}", TM_ERR_UNSUPPORTED, "no feature_extractor_type");
    open_fe("{\"feature_extractor_type\":\"WhisperFeatureExtractor\",\"sampling_rate\":\"16k\"}", TM_ERR_PARSE, "sampling_rate");
    open_fe("{\"feature_extractor_type\":\"ASTFeatureExtractor\",\"num_mel_bins\":0}", TM_ERR_PARSE, "num_mel_bins");

    float *silence = calloc(16000, sizeof *silence);
    tm_tensor *out[2] = {NULL, NULL};
    const char *names[2];
    int n_out = 0;
    /* Whisper: silence is log10(1e-10) everywhere, so (x + 4) / 4 = -1.5 */
    tm__audio_fe *fe = open_fe("{\"feature_extractor_type\":\"WhisperFeatureExtractor\"}", TM_OK, NULL);
    if (fe && tm__audio_fe_run(fe, silence, 16000, out, names, &n_out, NULL) == TM_OK) {
        const int64_t *d = tm_tensor_dims(out[0]);
        CHECK(n_out == 1 && !strcmp(names[0], "input_features") && d[0] == 1 && d[1] == 80 && d[2] == 3000,
              "whisper's shape");
        const float *y = tm_tensor_data(out[0]);
        int all = 1;
        for (int64_t i = 0; i < 80 * 3000; i++) all &= y[i] == -1.5f;
        CHECK(all, "whisper of silence is -1.5 everywhere");
        tm_tensor_free(out[0]);
    }
    tm__audio_fe_free(fe);
    /* AST: frames of silence hit the floor, log(eps); the padding keeps eps itself */
    fe = open_fe("{\"feature_extractor_type\":\"ASTFeatureExtractor\",\"mean\":1,\"std\":0.5,\"do_normalize\":true}", TM_OK, NULL);
    if (fe && tm__audio_fe_run(fe, silence, 16000, out, names, &n_out, NULL) == TM_OK) {
        const float *y = tm_tensor_data(out[0]);
        float eps = 1.192092955078125e-07f, logged = (float)log(eps);
        int64_t frames = 1 + (16000 - 400) / 160;   /* 98 */
        CHECK(y[0] == (float)((logged - 1.0) / 1.0) && y[(frames - 1) * 128 + 127] == y[0], "AST frame of silence: %g", y[0]);
        CHECK(y[frames * 128] == (float)((eps - 1.0) / 1.0) && y[1024 * 128 - 1] == y[frames * 128],
              "AST padding: %g", y[frames * 128]);
        tm_tensor_free(out[0]);
    }
    tm__audio_fe_free(fe);
    /* Wav2Vec2: a constant has no variance left: zeros, and a mask of ones */
    for (int i = 0; i < 16000; i++) silence[i] = 0.25f;
    fe = open_fe("{\"feature_extractor_type\":\"Wav2Vec2FeatureExtractor\"}", TM_OK, NULL);
    if (fe && tm__audio_fe_run(fe, silence, 16000, out, names, &n_out, NULL) == TM_OK) {
        const float *y = tm_tensor_data(out[0]);
        const int64_t *m = tm_tensor_data(out[1]);
        CHECK(n_out == 2 && !strcmp(names[1], "attention_mask") && y[0] == 0 && y[15999] == 0 && m[0] == 1 && m[15999] == 1,
              "wav2vec2 of a constant");
        tm_tensor_free(out[0]);
        tm_tensor_free(out[1]);
    }
    tm__audio_fe_free(fe);
    free(silence);
}

/* Truncations and flipped bytes (every one in and near the header) of a small stereo WAV: a result or an error with
 * a message, never a crash; what decodes goes through small extractors too. */
static void test_damaged_wavs(void) {
    char path[128], damaged[128];
    int16_t pcm[2 * 600];
    for (int i = 0; i < 2 * 600; i++) pcm[i] = (int16_t)((i * 7919) % 65536 - 32768);
    snprintf(path, sizeof path, "%s/small.wav", dir);
    snprintf(damaged, sizeof damaged, "%s/damaged.wav", dir);
    write_wav(path, 2, 22050, pcm, 600, 2400, 2400);
    uint8_t *bytes = NULL;
    size_t size = 0;
    if (!read_all(path, &bytes, &size)) {
        CHECK(0, "cannot read back %s", path);
        return;
    }
    static const char *const configs[] = {
        "{\"feature_extractor_type\":\"Wav2Vec2FeatureExtractor\"}",
        "{\"feature_extractor_type\":\"ASTFeatureExtractor\",\"max_length\":6,\"num_mel_bins\":16}",
        "{\"feature_extractor_type\":\"WhisperFeatureExtractor\",\"n_samples\":1600,\"nb_max_frames\":10,"
        "\"feature_size\":8}",
    };
    tm__audio_fe *fe[3];
    for (int i = 0; i < 3; i++) fe[i] = open_fe(configs[i], TM_OK, NULL);
    int bad = 0, decoded = 0;
    int tried = 0;
    for (size_t k = 0; k < 2 * size + 1; k++) {
        /* every byte of the 44-byte header and a little past it; the samples now and then */
        size_t at = k <= size ? k : k - size - 1;
        if (at > 64 && at % 97 != 0 && k != size) continue;
        tried++;
        FILE *f = fopen(damaged, "wb");
        if (k <= size) {
            fwrite(bytes, 1, k, f);   /* the first k bytes */
        } else {
            bytes[at] ^= 0xFF;
            fwrite(bytes, 1, size, f);
            bytes[at] ^= 0xFF;
        }
        fclose(f);
        float *x = NULL;
        size_t n = 0;
        tm_error err;
        memset(&err, 0, sizeof err);
        tm_status s = tm__audio_load(damaged, 16000, &x, &n, NULL, &err);
        if (s != TM_OK) {
            bad += !err.message[0] || x != NULL;
            continue;
        }
        decoded++;
        bad += n == 0;
        for (int i = 0; i < 3; i++) {
            tm_tensor *out[2] = {NULL, NULL};
            const char *names[2];
            int n_out = 0;
            if (fe[i] && tm__audio_fe_run(fe[i], x, n, out, names, &n_out, NULL) == TM_OK)
                for (int j = 0; j < n_out; j++) tm_tensor_free(out[j]);
        }
        free(x);
    }
    CHECK(bad == 0, "%d damaged WAVs gave an error without a message or an empty result", bad);
    CHECK(decoded > 0 && decoded < tried, "damaged WAVs: %d of %d decoded", decoded, tried);
    for (int i = 0; i < 3; i++) tm__audio_fe_free(fe[i]);
    free(bytes);
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, sizeof dir, "%s/tm-test-audio-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        printf("cannot make a folder %s (TMPDIR too long?)\n0 passed, 1 failed\n", dir);
        return 1;
    }
    test_fft();
    test_resample();
    test_wav();
    test_stream();
    test_windows();
    test_extractors();
    test_damaged_wavs();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("could not remove %s\n", dir);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
