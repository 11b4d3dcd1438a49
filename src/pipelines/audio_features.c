/* Audio feature extractors driven by preprocessor_config.json, each mirroring
 * transformers.js 4.3's code step by step (its window_function, mel_filter_bank and
 * spectrogram, in doubles where it uses JS numbers and float32 where it stores a
 * Float32Array), so that the features equal its processor's output. Not the decoding of
 * files (src/media/audio.c) and not the models. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "audio_features.h"
#include "../core/status.h"
#include "../media/fft.h"

typedef enum { FE_WAV2VEC2, FE_AST, FE_WHISPER } fe_kind;

struct tm__audio_fe {
    fe_kind kind;
    const char *type;
    int sampling_rate;
    int do_normalize;
    /* AST: num_mel_bins, max_length, mean, std. Whisper: feature_size (the mels), n_fft,
     * hop_length, n_samples, nb_max_frames. */
    int n_mels, max_length, n_fft, hop, n_samples, max_frames;
    double mean, std;
    double chunk_length;   /* Whisper: the window's seconds (timestamps' precision) */
    /* The spectrogram's parts: window (frame_length), the FFT's length and mel filters
     * (n_mels, n_bins) as the float32 tensor transformers.js multiplies with. */
    double *window;
    int frame_length, fft_length, n_bins;
    float *mel;
};

/* ---- Reading the config ------------------------------------------------------------------- */

/* A number of the config: absent gives dflt; another type is an error. */
static tm_status num(const tm_json *c, const char *key, double dflt, double *out, const char *source,
                     tm_error *err) {
    const tm_json *v = tm_json_get(c, key);
    if (!v || v->type == TM_JSON_NULL) {
        *out = dflt;
        return TM_OK;
    }
    if (v->type != TM_JSON_NUMBER)
        return tm__fail(err, TM_ERR_PARSE, "%s: preprocessor_config.json's %s is not a number", source, key);
    *out = v->number;
    return TM_OK;
}

/* A positive integer of the config, at most `most`. */
static tm_status count(const tm_json *c, const char *key, double dflt, double most, int *out,
                       const char *source, tm_error *err) {
    double v = 0;
    tm_status s = num(c, key, dflt, &v, source, err);
    if (s) return s;
    if (!(v >= 1 && v <= most && v == floor(v)))
        return tm__fail(err, TM_ERR_PARSE, "%s: preprocessor_config.json's %s is %g (an integer from 1 to %g)",
                        source, key, v, most);
    *out = (int)v;
    return TM_OK;
}

/* ---- Windows and mel filters (transformers.js's audio utils) ------------------------------- */

/* generalized_cosine_window(M, 0.5): hanning(M). */
static void hanning(double *w, int M) {
    if (M == 1) {
        w[0] = 1;
        return;
    }
    double factor = 2 * M_PI / (M - 1);
    for (int i = 0; i < M; i++) w[i] = 0.5 - 0.5 * cos(i * factor);
}

/* window_function(length, "hann", {periodic}). */
static double *hann_window(int length, int periodic) {
    double *w = malloc((size_t)(length + 1) * sizeof *w);
    if (w) hanning(w, periodic ? length + 1 : length);
    return w;
}

static double hz_to_mel_kaldi(double f) { return 1127 * log(1 + f / 700); }

static double hz_to_mel_slaney(double f) {
    return f >= 1e3 ? 15 + log(f / 1e3) * (27 / log(6.4)) : 3 * f / 200;
}

static double mel_to_hz_slaney(double m) {
    return m >= 15 ? 1e3 * exp(log(6.4) / 27 * (m - 15)) : 200 * m / 3;
}

static void linspace(double start, double end, int num, double *out) {
    double step = (end - start) / (num - 1);
    for (int i = 0; i < num; i++) out[i] = start + step * i;
}

/* _create_triangular_filter_bank, then slaney's area normalisation when asked, into the
 * float32 matrix (n_mels, n_bins). */
static void triangular_bank(const double *fft_freqs, int n_bins, const double *filter_freqs, int n_mels,
                            int slaney_norm, float *mel) {
    for (int i = 0; i < n_mels; i++) {
        double enorm = slaney_norm ? 2 / (filter_freqs[i + 2] - filter_freqs[i]) : 1;
        for (int j = 0; j < n_bins; j++) {
            double down = -(filter_freqs[i] - fft_freqs[j]) / (filter_freqs[i + 1] - filter_freqs[i]);
            double up = (filter_freqs[i + 2] - fft_freqs[j]) / (filter_freqs[i + 2] - filter_freqs[i + 1]);
            double v = fmax(0, fmin(down, up));
            if (slaney_norm) v *= enorm;
            mel[(size_t)i * n_bins + j] = (float)v;
        }
    }
}

/* AST: mel_filter_bank(257, n_mels, 20, sr / 2, sr, null, "kaldi", true). */
static int ast_filters(tm__audio_fe *fe) {
    int n_bins = fe->n_bins, M = fe->n_mels;
    double *fft_freqs = malloc((size_t)n_bins * sizeof *fft_freqs);
    double *mel_freqs = malloc((size_t)(M + 2) * sizeof *mel_freqs);
    if (!fft_freqs || !mel_freqs) {
        free(fft_freqs);
        free(mel_freqs);
        return 0;
    }
    linspace(hz_to_mel_kaldi(20), hz_to_mel_kaldi(floor(fe->sampling_rate / 2.0)), M + 2, mel_freqs);
    double bin_width = fe->sampling_rate / ((n_bins - 1) * 2.0);
    for (int i = 0; i < n_bins; i++) fft_freqs[i] = hz_to_mel_kaldi(i * bin_width);
    triangular_bank(fft_freqs, n_bins, mel_freqs, M, 0, fe->mel);
    free(fft_freqs);
    free(mel_freqs);
    return 1;
}

/* Whisper: mel_filter_bank(1 + n_fft / 2, feature_size, 0, 8000, sr, "slaney", "slaney"). */
static int whisper_filters(tm__audio_fe *fe) {
    int n_bins = fe->n_bins, M = fe->n_mels;
    double *fft_freqs = malloc((size_t)n_bins * sizeof *fft_freqs);
    double *filter_freqs = malloc((size_t)(M + 2) * sizeof *filter_freqs);
    if (!fft_freqs || !filter_freqs) {
        free(fft_freqs);
        free(filter_freqs);
        return 0;
    }
    linspace(hz_to_mel_slaney(0), hz_to_mel_slaney(8000), M + 2, filter_freqs);
    for (int i = 0; i < M + 2; i++) filter_freqs[i] = mel_to_hz_slaney(filter_freqs[i]);
    linspace(0, floor(fe->sampling_rate / 2.0), n_bins, fft_freqs);
    triangular_bank(fft_freqs, n_bins, filter_freqs, M, 1, fe->mel);
    free(fft_freqs);
    free(filter_freqs);
    return 1;
}

/* ---- Opening ------------------------------------------------------------------------------ */

void tm__audio_fe_free(tm__audio_fe *fe) {
    if (!fe) return;
    free(fe->window);
    free(fe->mel);
    free(fe);
}

int tm__audio_fe_rate(const tm__audio_fe *fe) { return fe->sampling_rate; }

const char *tm__audio_fe_type(const tm__audio_fe *fe) { return fe->type; }

double tm__audio_fe_chunk_length(const tm__audio_fe *fe) { return fe->chunk_length; }

size_t tm__audio_fe_max_samples(const tm__audio_fe *fe) {
    return fe->kind == FE_WHISPER ? (size_t)fe->n_samples : 0;
}

static tm_status open_spectrogram(tm__audio_fe *fe, const char *source, tm_error *err) {
    int periodic = fe->kind == FE_WHISPER;
    fe->n_bins = fe->fft_length / 2 + 1;
    fe->window = hann_window(fe->frame_length, periodic);
    fe->mel = malloc((size_t)fe->n_mels * (size_t)fe->n_bins * sizeof *fe->mel);
    if (!fe->window || !fe->mel) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    int ok = fe->kind == FE_AST ? ast_filters(fe) : whisper_filters(fe);
    return ok ? TM_OK : tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
}

tm_status tm__audio_fe_open(const tm_json *c, const char *source, tm__audio_fe **out, tm_error *err) {
    const char *type = tm_json_get_string(c, "feature_extractor_type");
    if (!type)
        return tm__fail(err, TM_ERR_UNSUPPORTED, "%s: preprocessor_config.json has no feature_extractor_type", source);
    tm__audio_fe *fe = calloc(1, sizeof *fe);
    if (!fe) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    tm_status s = TM_OK;
    double rate = 16000, normalize = 1;
    const tm_json *dn = tm_json_get(c, "do_normalize");
    if (!strcmp(type, "Wav2Vec2FeatureExtractor")) {
        fe->kind = FE_WAV2VEC2, fe->type = "Wav2Vec2FeatureExtractor";
    } else if (!strcmp(type, "ASTFeatureExtractor")) {
        fe->kind = FE_AST, fe->type = "ASTFeatureExtractor";
        fe->frame_length = 400, fe->fft_length = 512, fe->hop = 160;
        s = count(c, "num_mel_bins", 128, 1024, &fe->n_mels, source, err);
        if (!s) s = count(c, "max_length", 1024, 1 << 20, &fe->max_length, source, err);
        if (!s) s = num(c, "mean", -4.2677393, &fe->mean, source, err);
        if (!s) s = num(c, "std", 4.5689974, &fe->std, source, err);
    } else if (!strcmp(type, "WhisperFeatureExtractor")) {
        fe->kind = FE_WHISPER, fe->type = "WhisperFeatureExtractor";
        s = count(c, "feature_size", 80, 1024, &fe->n_mels, source, err);
        if (!s) s = count(c, "n_fft", 400, 1 << 16, &fe->n_fft, source, err);
        if (!s) s = count(c, "hop_length", 160, 1 << 16, &fe->hop, source, err);
        if (!s) s = count(c, "n_samples", 480000, 1 << 26, &fe->n_samples, source, err);
        if (!s) s = count(c, "nb_max_frames", 3000, 1 << 20, &fe->max_frames, source, err);
        if (!s) s = num(c, "chunk_length", 30, &fe->chunk_length, source, err);
        if (!s && !(fe->chunk_length > 0 && fe->chunk_length < 1e6))
            s = tm__fail(err, TM_ERR_PARSE, "%s: preprocessor_config.json's chunk_length is %g (seconds: above 0)",
                         source, fe->chunk_length);
        fe->frame_length = fe->fft_length = fe->n_fft;
        if (!s && fe->n_fft < 2)
            s = tm__fail(err, TM_ERR_PARSE, "%s: preprocessor_config.json's n_fft is %d", source, fe->n_fft);
    } else {
        free(fe);
        return tm__fail(err, TM_ERR_UNSUPPORTED,
                        "%s: feature_extractor_type '%s' is not supported (Wav2Vec2FeatureExtractor, "
                        "ASTFeatureExtractor and WhisperFeatureExtractor are)", source, type);
    }
    if (!s) s = num(c, "sampling_rate", 16000, &rate, source, err);
    if (!s && !(rate >= 1 && rate <= 1e6 && rate == floor(rate)))
        s = tm__fail(err, TM_ERR_PARSE, "%s: preprocessor_config.json's sampling_rate is %g", source, rate);
    if (!s && dn && dn->type != TM_JSON_BOOL && dn->type != TM_JSON_NULL)
        s = tm__fail(err, TM_ERR_PARSE, "%s: preprocessor_config.json's do_normalize is not a boolean", source);
    if (!s) {
        /* Wav2Vec2's default is true; AST normalizes only when it is set */
        normalize = dn && dn->type == TM_JSON_BOOL ? dn->number : fe->kind == FE_WAV2VEC2;
        fe->sampling_rate = (int)rate;
        fe->do_normalize = normalize != 0;
    }
    if (!s && fe->kind != FE_WAV2VEC2) s = open_spectrogram(fe, source, err);
    if (s) {
        tm__audio_fe_free(fe);
        return s;
    }
    *out = fe;
    return TM_OK;
}

/* ---- The spectrogram ------------------------------------------------------------------------ */

/* transformers.js's spectrogram() for power 2 on a float32 waveform already padded as it
 * must be: frames at i * hop for i < frames (< rows: the rest stay zero), optionally minus
 * their mean and pre-emphasised, windowed, FFT'd; then the mel projection with the floor.
 * mel_out (n_mels, rows) float32. */
static tm_status mel_power(const tm__audio_fe *fe, const float *wave, size_t n, int64_t frames, int64_t rows,
                           int remove_dc, double preemphasis, float *mel_out, tm_error *err) {
    size_t B = (size_t)fe->n_bins, L = (size_t)fe->frame_length;
    tm__fft *fft = NULL;
    tm_status s = tm__fft_create((size_t)fe->fft_length, &fft, err);
    if (s) return s;
    float *power = calloc(B * (size_t)rows, sizeof *power);   /* (bins, rows) */
    double *frame = calloc((size_t)fe->fft_length, sizeof *frame);
    double *spec = malloc(2 * B * sizeof *spec), *col = malloc(B * sizeof *col);
    if (!power || !frame || !spec || !col) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (int64_t i = 0; !s && i < frames; i++) {
        size_t off = (size_t)i * (size_t)fe->hop;
        size_t size = n - off < L ? n - off : L;
        for (size_t j = 0; j < L; j++) frame[j] = j < size ? wave[off + j] : 0;
        if (remove_dc) {
            double sum = 0;
            for (size_t j = 0; j < size; j++) sum += frame[j];
            double mean = sum / (double)size;
            for (size_t j = 0; j < size; j++) frame[j] -= mean;
        }
        if (preemphasis != 0) {
            for (size_t j = size - 1; j >= 1; j--) frame[j] -= preemphasis * frame[j - 1];
            frame[0] *= 1 - preemphasis;
        }
        for (size_t j = 0; j < L; j++) frame[j] *= fe->window[j];
        tm__fft_real(fft, frame, spec);
        for (size_t k = 0; k < B; k++)
            power[k * (size_t)rows + (size_t)i] = (float)(spec[2 * k] * spec[2 * k] + spec[2 * k + 1] * spec[2 * k + 1]);
    }
    /* the (n_mels, bins) x (bins, rows) product of two float32 tensors, summed in doubles */
    for (int m = 0; !s && m < fe->n_mels; m++) {
        const float *filt = fe->mel + (size_t)m * B;
        for (int64_t r = 0; r < rows; r++) {
            double acc = 0;
            for (size_t k = 0; k < B; k++) acc += (double)filt[k] * power[k * (size_t)rows + (size_t)r];
            mel_out[(size_t)m * (size_t)rows + (size_t)r] = (float)acc;
        }
    }
    tm__fft_free(fft);
    free(power);
    free(frame);
    free(spec);
    free(col);
    return s;
}

/* ASTFeatureExtractor: no centring, 400-sample Hann (symmetric) frames every 160 in a
 * 512-point FFT, DC removed, pre-emphasis 0.97, Kaldi mel bank, natural log of
 * max(mel, float32 epsilon), max_length frames (cut or padded), then (x - mean) / (2 std).
 * As in transformers.js, padded frames keep the floor itself, not its log. */
static tm_status run_ast(const tm__audio_fe *fe, const float *x, size_t n, tm_tensor **out, tm_error *err) {
    int64_t frames = n >= (size_t)fe->frame_length ? 1 + (int64_t)((n - (size_t)fe->frame_length) / (size_t)fe->hop) : 0;
    int64_t rows = fe->max_length;
    if (frames > rows) frames = rows;
    int M = fe->n_mels;
    int64_t dims[3] = {1, rows, M};
    tm_tensor *t = tm_tensor_new(TM_FLOAT, 3, dims);
    float *mel = malloc((size_t)M * (size_t)rows * sizeof *mel);
    if (!t || !mel) {
        tm_tensor_free(t);
        free(mel);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    }
    tm_status s = mel_power(fe, x, n, frames, rows, 1, 0.97, mel, err);
    float *y = tm_tensor_data(t);                  /* (rows, M): the transpose */
    const float floor_value = 1.192092955078125e-07f;
    for (int64_t r = 0; !s && r < rows; r++)
        for (int m = 0; m < M; m++) {
            float v = mel[(size_t)m * (size_t)rows + (size_t)r];
            v = v > floor_value ? v : floor_value;
            if (r < frames) v = (float)log(v);
            y[(size_t)r * (size_t)M + (size_t)m] = fe->do_normalize ? (float)((v - fe->mean) / (fe->std * 2)) : v;
        }
    free(mel);
    if (s) {
        tm_tensor_free(t);
        return s;
    }
    *out = t;
    return TM_OK;
}

/* WhisperFeatureExtractor: the clip cut or zero-padded to n_samples, reflect-padded by
 * n_fft / 2 on both sides (centred frames), periodic Hann, slaney mel bank, log10 of
 * max(mel, 1e-10), clamped to its maximum - 8, then (x + 4) / 4. */
static tm_status run_whisper(const tm__audio_fe *fe, const float *x, size_t n, tm_tensor **out, tm_error *err) {
    size_t len = (size_t)fe->n_samples, pad = (size_t)fe->n_fft / 2;
    int64_t rows = (int64_t)(len / (size_t)fe->hop);
    if (rows > fe->max_frames) rows = fe->max_frames;
    if (len < 2 || pad >= len)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "Whisper features: n_samples %zu is too short for n_fft %d",
                        len, fe->n_fft);
    size_t total = len + 2 * pad;
    float *wave = calloc(total, sizeof *wave);
    int M = fe->n_mels;
    int64_t dims[3] = {1, M, rows};
    tm_tensor *t = tm_tensor_new(TM_FLOAT, 3, dims);
    if (!wave || !t) {
        free(wave);
        tm_tensor_free(t);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    }
    memcpy(wave + pad, x, (n < len ? n : len) * sizeof *wave);
    size_t w = len - 1;                            /* padReflect: |(i + w) % 2w - w| */
    for (size_t i = 1; i <= pad; i++) {
        wave[pad - i] = wave[pad + (size_t)llabs((long long)((i + w) % (2 * w)) - (long long)w)];
        wave[w + pad + i] = wave[pad + (size_t)llabs((long long)((w - i + w) % (2 * w)) - (long long)w)];
    }
    int64_t frames = 1 + (int64_t)((total - (size_t)fe->frame_length) / (size_t)fe->hop);
    if (frames > rows) frames = rows;
    float *y = tm_tensor_data(t);
    tm_status s = mel_power(fe, wave, total, frames, rows, 0, 0, y, err);
    free(wave);
    float top = -INFINITY;
    size_t count = (size_t)M * (size_t)rows;
    for (size_t i = 0; !s && i < count; i++) {
        float v = y[i] > 1e-10f ? y[i] : (float)1e-10;
        y[i] = (float)log10(fmax(1e-10, v));
        if (y[i] > top) top = y[i];
    }
    double threshold = (double)top - 8;
    for (size_t i = 0; !s && i < count; i++) y[i] = (float)((fmax(y[i], threshold) + 4) / 4);
    if (s) {
        tm_tensor_free(t);
        return s;
    }
    *out = t;
    return TM_OK;
}

/* Wav2Vec2FeatureExtractor: (x - mean) / sqrt(variance + 1e-7) in doubles (summed in order,
 * as Array.reduce does), stored as float32; an attention mask of ones. */
static tm_status run_wav2vec2(const tm__audio_fe *fe, const float *x, size_t n, tm_tensor **out, tm_error *err) {
    int64_t dims[2] = {1, (int64_t)n};
    tm_tensor *v = tm_tensor_new(TM_FLOAT, 2, dims), *mask = tm_tensor_new(TM_INT64, 2, dims);
    if (!v || !mask) {
        tm_tensor_free(v);
        tm_tensor_free(mask);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    }
    float *y = tm_tensor_data(v);
    int64_t *m = tm_tensor_data(mask);
    for (size_t i = 0; i < n; i++) m[i] = 1;
    if (!fe->do_normalize || n == 0) {
        if (n) memcpy(y, x, n * sizeof *y);
    } else {
        double sum = 0, var = 0;
        for (size_t i = 0; i < n; i++) sum += x[i];
        double mean = sum / (double)n;
        for (size_t i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
        var /= (double)n;
        double sd = sqrt(var + 1e-7);
        for (size_t i = 0; i < n; i++) y[i] = (float)((x[i] - mean) / sd);
    }
    out[0] = v;
    out[1] = mask;
    return TM_OK;
}

tm_status tm__audio_fe_run(const tm__audio_fe *fe, const float *x, size_t n, tm_tensor **out,
                           const char **names, int *n_out, tm_error *err) {
    tm_status s;
    switch (fe->kind) {
    case FE_WAV2VEC2:
        s = run_wav2vec2(fe, x, n, out, err);
        if (s) return s;
        names[0] = "input_values", names[1] = "attention_mask", *n_out = 2;
        return TM_OK;
    case FE_AST:
        s = run_ast(fe, x, n, out, err);
        if (s) return s;
        names[0] = "input_values", *n_out = 1;
        return TM_OK;
    case FE_WHISPER:
        s = run_whisper(fe, x, n, out, err);
        if (s) return s;
        names[0] = "input_features", *n_out = 1;
        return TM_OK;
    }
    return tm__fail(err, TM_ERR_UNSUPPORTED, "unknown feature extractor");
}
