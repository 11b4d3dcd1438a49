/* Audio files as one mono float32 waveform: libsndfile decodes (WAV, FLAC, OGG/Vorbis and
 * Opus, AIFF, and MP3 where it was built with mpg123, as Debian 12's 1.2 is), this file mixes
 * channels and resamples as the transformers.js references did. Not AAC/M4A or video
 * containers: libsndfile has no such decoder. */
#if !__has_include(<sndfile.h>)
#error "audio input needs libsndfile1-dev: run tools/install-deps.sh"
#endif
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sndfile.h>
#include "audio.h"
#include "../core/status.h"
#include "../io/npy.h"

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

tm_status tm__audio_resample_linear(const float *x, size_t n_in, int rate_in, int rate_out,
                                    float **out, size_t *n_out, tm_error *err) {
    if (rate_in <= 0 || rate_out <= 0)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "resampling from %d Hz to %d Hz", rate_in, rate_out);
    double count = floor((double)n_in * rate_out / rate_in + 0.5);   /* Math.round */
    /* 2^31 samples (37 hours at 16 kHz): a header with a tiny rate must not ask for more */
    if (count > 2147483648.0)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%zu samples at %d Hz are %.0f at %d Hz: too long", n_in,
                        rate_in, count, rate_out);
    size_t m = (size_t)count;
    float *y = malloc((m ? m : 1) * sizeof *y);
    if (!y) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory resampling %zu samples", n_in);
    for (size_t i = 0; i < m; i++) {
        double t = (double)i * rate_in / rate_out;
        size_t j = (size_t)floor(t);
        if (j >= n_in) j = n_in - 1;
        size_t k = j + 1 < n_in ? j + 1 : n_in - 1;
        y[i] = (float)((double)x[j] + ((double)x[k] - (double)x[j]) * (t - (double)j));
    }
    *out = y;
    *n_out = m;
    return TM_OK;
}

/* A .npy waveform: float32 or float64, (N) or (1, N). */
static tm_status load_npy(const char *path, float **samples, size_t *n, tm_error *err) {
    tm_tensor *t = NULL;
    tm_status s = tm_npy_read(path, &t, err);
    if (s) return s;
    int rank = tm_tensor_rank(t);
    const int64_t *dims = tm_tensor_dims(t);
    tm_dtype dt = tm_tensor_dtype(t);
    if (!(rank == 1 || (rank == 2 && dims[0] == 1)) || (dt != TM_FLOAT && dt != TM_DOUBLE)) {
        tm_tensor_free(t);
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT,
                        "%s: a waveform .npy must be float32 or float64 of shape (N) or (1, N)", path);
    }
    size_t m = (size_t)tm_tensor_numel(t);
    if (m == 0) {
        tm_tensor_free(t);
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s: the waveform has no samples", path);
    }
    float *y = malloc(m * sizeof *y);
    if (!y) {
        tm_tensor_free(t);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory reading %s", path);
    }
    if (dt == TM_FLOAT) memcpy(y, tm_tensor_data(t), m * sizeof *y);
    else
        for (size_t i = 0; i < m; i++) y[i] = (float)((const double *)tm_tensor_data(t))[i];
    tm_tensor_free(t);
    *samples = y;
    *n = m;
    return TM_OK;
}

/* Whether the file's data chunk (WAV, AIFF, ...) claims more bytes than the file holds:
 * libsndfile then reads what is there and says so in its log only ("data : N (should be
 * M)"). A length of 0 or 0xFFFFFFFF (a stream written before its length was known) is not
 * taken as a claim. */
static int data_chunk_short(SNDFILE *f, long long *claimed, long long *present) {
    char log[8192];
    log[0] = '\0';
    sf_command(f, SFC_GET_LOG_INFO, log, sizeof log);
    for (const char *p = log; (p = strstr(p, "data")) != NULL; p++) {
        if (sscanf(p, "data : %lld (should be %lld)", claimed, present) == 2 && *present < *claimed &&
            *claimed != 0 && *claimed != 0xFFFFFFFFLL)
            return 1;
    }
    return 0;
}

/* A sound file through libsndfile, mono at its own rate. */
static tm_status load_sound(const char *path, float **samples, size_t *n, tm__audio_info *info,
                            tm_error *err) {
    FILE *probe = fopen(path, "rb");
    if (!probe) return tm__fail(err, TM_ERR_IO, "cannot open audio file '%s': %s", path, strerror(errno));
    fclose(probe);
    SF_INFO sfi;
    memset(&sfi, 0, sizeof sfi);
    SNDFILE *f = sf_open(path, SFM_READ, &sfi);
    if (!f) {
        int code = sf_error(NULL);
        const char *why = sf_strerror(NULL);
        return tm__fail(err, code == SF_ERR_UNRECOGNISED_FORMAT ? TM_ERR_UNSUPPORTED : TM_ERR_PARSE,
                        "%s: not an audio file we can read (WAV, FLAC, OGG, AIFF, ...): %s", path, why);
    }
    tm_status s = TM_OK;
    long long claimed = 0, present = 0;
    if (data_chunk_short(f, &claimed, &present))
        s = tm__fail(err, TM_ERR_PARSE, "%s: truncated or corrupt: its data chunk says %lld bytes, the file holds %lld",
                     path, claimed, present);
    else if (sfi.channels < 1 || sfi.samplerate <= 0)
        s = tm__fail(err, TM_ERR_PARSE, "%s: %d channels at %d Hz", path, sfi.channels, sfi.samplerate);
    else if (sfi.frames <= 0)
        s = tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s: the clip has no samples (zero length)", path);
    else if ((uint64_t)sfi.frames > (uint64_t)(SIZE_MAX / sizeof(double) / (size_t)sfi.channels / 2))
        s = tm__fail(err, TM_ERR_NO_MEMORY, "%s: %lld frames is too long", path, (long long)sfi.frames);
    size_t frames = s ? 0 : (size_t)sfi.frames, ch = (size_t)sfi.channels;
    double *raw = s ? NULL : malloc(frames * ch * sizeof *raw);
    float *mono = s ? NULL : malloc(frames * sizeof *mono);
    if (!s && (!raw || !mono)) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory reading %s", path);
    if (!s) {
        /* doubles: 16-bit PCM comes as s / 32768 exactly (libsndfile's normalisation) */
        sf_count_t got = sf_readf_double(f, raw, (sf_count_t)frames);
        if (got != (sf_count_t)frames)
            s = tm__fail(err, TM_ERR_PARSE, "%s: truncated or corrupt: its header says %zu frames, %lld could be read%s%s",
                         path, frames, (long long)(got > 0 ? got : 0), sf_error(f) ? ": " : "",
                         sf_error(f) ? sf_strerror(f) : "");
    }
    for (size_t i = 0; !s && i < frames; i++) {
        if (ch == 2) {
            /* load_audio's stereo mix, on the float32 channel data */
            double l = (float)raw[2 * i], r = (float)raw[2 * i + 1];
            mono[i] = (float)(sqrt(2.0) * (l + r) / 2);
        } else {
            mono[i] = (float)raw[i * ch];
        }
    }
    sf_close(f);
    free(raw);
    if (s) {
        free(mono);
        return s;
    }
    info->rate_in = sfi.samplerate;
    info->channels_in = sfi.channels;
    info->samples_in = (int64_t)frames;
    *samples = mono;
    *n = frames;
    return TM_OK;
}

tm_status tm__audio_load(const char *path, int rate, float **samples, size_t *n,
                         tm__audio_info *info, tm_error *err) {
    if (!path || !samples || !n || rate <= 0)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm__audio_load: bad argument");
    tm__audio_info local = {rate, 1, 0};
    float *x = NULL;
    size_t m = 0;
    tm_status s;
    if (ends_with(path, ".npy")) {
        s = load_npy(path, &x, &m, err);
        local.samples_in = (int64_t)m;
    } else {
        s = load_sound(path, &x, &m, &local, err);
    }
    if (s) return s;
    if (local.rate_in != rate) {
        float *y = NULL;
        size_t k = 0;
        s = tm__audio_resample_linear(x, m, local.rate_in, rate, &y, &k, err);
        free(x);
        if (s) return s;
        if (k == 0) {
            free(y);
            return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s: no samples left at %d Hz", path, rate);
        }
        x = y, m = k;
    }
    if (info) *info = local;
    *samples = x;
    *n = m;
    return TM_OK;
}
