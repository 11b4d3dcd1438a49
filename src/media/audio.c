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

/* Math.round(n_in * rate_out / rate_in): the samples at the new rate. */
static double resampled_count(size_t n_in, int rate_in, int rate_out) {
    return floor((double)n_in * rate_out / rate_in + 0.5);
}

/* The input sample output i starts from: floor(i * rate_in / rate_out), at most n_in - 1. */
static size_t source_index(size_t i, size_t n_in, int rate_in, int rate_out) {
    size_t j = (size_t)floor((double)i * rate_in / rate_out);
    return j < n_in ? j : n_in - 1;
}

/* Outputs [from, from + n) of the linear interpolation into y; x holds input samples
 * [x_first, ...] of n_in, as many as those outputs read. */
static void interpolate(const float *x, size_t x_first, size_t n_in, int rate_in, int rate_out, size_t from,
                        size_t n, float *y) {
    for (size_t i = from; i < from + n; i++) {
        double t = (double)i * rate_in / rate_out;
        size_t j = source_index(i, n_in, rate_in, rate_out);
        size_t k = j + 1 < n_in ? j + 1 : n_in - 1;
        double a = x[j - x_first], b = x[k - x_first];
        y[i - from] = (float)(a + (b - a) * (t - (double)j));
    }
}

tm_status tm__audio_resample_linear(const float *x, size_t n_in, int rate_in, int rate_out,
                                    float **out, size_t *n_out, tm_error *err) {
    if (rate_in <= 0 || rate_out <= 0)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "resampling from %d Hz to %d Hz", rate_in, rate_out);
    double count = resampled_count(n_in, rate_in, rate_out);
    /* 2^31 samples (37 hours at 16 kHz): a header with a tiny rate must not ask for more */
    if (count > 2147483648.0)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%zu samples at %d Hz are %.0f at %d Hz: too long", n_in,
                        rate_in, count, rate_out);
    size_t m = (size_t)count;
    float *y = malloc((m ? m : 1) * sizeof *y);
    if (!y) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory resampling %zu samples", n_in);
    interpolate(x, 0, n_in, rate_in, rate_out, 0, m, y);
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

/* ---- Streams: a clip read window by window ------------------------------------------ */

struct tm__audio_stream {
    char *path;
    int rate;                     /* the rate asked for */
    tm__audio_info info;          /* the file's rate, channels and frames */
    size_t length;                /* samples at `rate` */
    SNDFILE *file;                /* read window by window; NULL: `whole` holds the clip */
    size_t at;                    /* the file's position, in frames */
    float *whole;                 /* mono at the file's rate (a .npy; lossy or unseekable files) */
    double *raw;                  /* a window's frames as libsndfile gives them */
    float *mono;                  /* a window mixed to mono */
    size_t cap;                   /* frames raw and mono hold */
};

void tm__audio_stream_close(tm__audio_stream *st) {
    if (!st) return;
    if (st->file) sf_close(st->file);
    free(st->path);
    free(st->whole);
    free(st->raw);
    free(st->mono);
    free(st);
}

size_t tm__audio_stream_length(const tm__audio_stream *st) { return st->length; }

/* Room for `frames` frames in the window buffers. */
static tm_status window_room(tm__audio_stream *st, size_t frames, tm_error *err) {
    if (frames <= st->cap) return TM_OK;
    size_t ch = (size_t)st->info.channels_in;
    if (frames > SIZE_MAX / sizeof(double) / ch / 2)
        return tm__fail(err, TM_ERR_NO_MEMORY, "%s: %zu frames is too long", st->path, frames);
    double *raw = realloc(st->raw, frames * ch * sizeof *raw);
    if (raw) st->raw = raw;
    float *mono = realloc(st->mono, frames * sizeof *mono);
    if (mono) st->mono = mono;
    if (!raw || !mono) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory reading %s", st->path);
    st->cap = frames;
    return TM_OK;
}

/* Frames [first, first + count) of the file mixed to mono into st->mono: two channels as
 * load_audio's sqrt(2) * (L + R) / 2 on the float32 channel data, more keep the first. */
static tm_status read_frames(tm__audio_stream *st, size_t first, size_t count, tm_error *err) {
    tm_status s = window_room(st, count, err);
    if (s) return s;
    size_t ch = (size_t)st->info.channels_in;
    /* no seek where the file already is (a file that cannot seek is read once, from 0) */
    sf_count_t got = first == st->at || sf_seek(st->file, (sf_count_t)first, SEEK_SET) == (sf_count_t)first
                         ? sf_readf_double(st->file, st->raw, (sf_count_t)count) : -1;
    st->at = got > 0 ? first + (size_t)got : (size_t)-1;
    /* doubles: 16-bit PCM comes as s / 32768 exactly (libsndfile's normalisation) */
    if (got != (sf_count_t)count)
        return tm__fail(err, TM_ERR_PARSE, "%s: truncated or corrupt: its header says %lld frames, %lld could be read%s%s",
                        st->path, (long long)st->info.samples_in, (long long)first + (got > 0 ? got : 0),
                        sf_error(st->file) ? ": " : "", sf_error(st->file) ? sf_strerror(st->file) : "");
    for (size_t i = 0; i < count; i++) {
        if (ch == 2) {
            double l = (float)st->raw[2 * i], r = (float)st->raw[2 * i + 1];
            st->mono[i] = (float)(sqrt(2.0) * (l + r) / 2);
        } else {
            st->mono[i] = (float)st->raw[i * ch];
        }
    }
    return TM_OK;
}

/* Formats whose seeks land on the very samples a read from the start gives: PCM, float
 * and companded data in any container, and FLAC. Lossy ones (Vorbis, Opus, MP3) are read
 * whole once instead. */
static int exact_seeks(const SF_INFO *sfi) {
    int sub = sfi->format & SF_FORMAT_SUBMASK;
    return sfi->seekable && (sub == SF_FORMAT_PCM_S8 || sub == SF_FORMAT_PCM_U8 || sub == SF_FORMAT_PCM_16 ||
                             sub == SF_FORMAT_PCM_24 || sub == SF_FORMAT_PCM_32 || sub == SF_FORMAT_FLOAT ||
                             sub == SF_FORMAT_DOUBLE || sub == SF_FORMAT_ULAW || sub == SF_FORMAT_ALAW);
}

/* A sound file through libsndfile: its header checked; read whole now unless its seeks
 * are exact. */
static tm_status open_sound(tm__audio_stream *st, tm_error *err) {
    FILE *probe = fopen(st->path, "rb");
    if (!probe) return tm__fail(err, TM_ERR_IO, "cannot open audio file '%s': %s", st->path, strerror(errno));
    fclose(probe);
    SF_INFO sfi;
    memset(&sfi, 0, sizeof sfi);
    st->file = sf_open(st->path, SFM_READ, &sfi);
    if (!st->file) {
        int code = sf_error(NULL);
        const char *why = sf_strerror(NULL);
        return tm__fail(err, code == SF_ERR_UNRECOGNISED_FORMAT ? TM_ERR_UNSUPPORTED : TM_ERR_PARSE,
                        "%s: not an audio file we can read (WAV, FLAC, OGG, AIFF, ...): %s", st->path, why);
    }
    long long claimed = 0, present = 0;
    if (data_chunk_short(st->file, &claimed, &present))
        return tm__fail(err, TM_ERR_PARSE, "%s: truncated or corrupt: its data chunk says %lld bytes, the file holds %lld",
                        st->path, claimed, present);
    if (sfi.channels < 1 || sfi.samplerate <= 0)
        return tm__fail(err, TM_ERR_PARSE, "%s: %d channels at %d Hz", st->path, sfi.channels, sfi.samplerate);
    if (sfi.frames <= 0)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s: the clip has no samples (zero length)", st->path);
    st->info = (tm__audio_info){sfi.samplerate, sfi.channels, (int64_t)sfi.frames};
    if (exact_seeks(&sfi)) return TM_OK;
    tm_status s = read_frames(st, 0, (size_t)sfi.frames, err);
    if (s) return s;
    st->whole = st->mono;   /* the window buffers become the clip */
    st->mono = NULL;
    free(st->raw);
    st->raw = NULL;
    st->cap = 0;
    sf_close(st->file);
    st->file = NULL;
    return TM_OK;
}

tm_status tm__audio_stream_open(const char *path, int rate, tm__audio_stream **out, tm__audio_info *info,
                                tm_error *err) {
    if (!path || !out || rate <= 0) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm__audio_stream_open: bad argument");
    tm__audio_stream *st = calloc(1, sizeof *st);
    if (st) st->path = strdup(path);
    if (!st || !st->path) {
        tm__audio_stream_close(st);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    }
    st->rate = rate;
    tm_status s;
    if (ends_with(path, ".npy")) {
        size_t n = 0;
        s = load_npy(path, &st->whole, &n, err);
        st->info = (tm__audio_info){rate, 1, (int64_t)n};
    } else {
        s = open_sound(st, err);
    }
    size_t frames = (size_t)st->info.samples_in;
    double count = s ? 0 : resampled_count(frames, st->info.rate_in, rate);
    if (!s && count > 2147483648.0)
        s = tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s: %zu samples at %d Hz are %.0f at %d Hz: too long", path, frames,
                     st->info.rate_in, count, rate);
    else if (!s && count < 1)
        s = tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s: no samples left at %d Hz", path, rate);
    if (s) {
        tm__audio_stream_close(st);
        return s;
    }
    st->length = st->info.rate_in == rate ? frames : (size_t)count;
    if (info) *info = st->info;
    *out = st;
    return TM_OK;
}

tm_status tm__audio_stream_read(tm__audio_stream *st, size_t from, size_t n, float *out, tm_error *err) {
    if (from > st->length || n > st->length - from)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s: samples %zu to %zu of %zu", st->path, from, from + n,
                        st->length);
    if (n == 0) return TM_OK;
    size_t frames = (size_t)st->info.samples_in, first = from, last = from + n - 1;
    int same_rate = st->info.rate_in == st->rate;
    if (!same_rate) {
        /* the input samples those outputs interpolate between */
        first = source_index(from, frames, st->info.rate_in, st->rate);
        size_t j = source_index(from + n - 1, frames, st->info.rate_in, st->rate);
        last = j + 1 < frames ? j + 1 : frames - 1;
    }
    const float *x = st->whole + (st->whole ? first : 0);
    if (!st->whole) {
        tm_status s = read_frames(st, first, last - first + 1, err);
        if (s) return s;
        x = st->mono;
    }
    if (same_rate) memcpy(out, x, n * sizeof *out);
    else interpolate(x, first, frames, st->info.rate_in, st->rate, from, n, out);
    return TM_OK;
}

tm_status tm__audio_load(const char *path, int rate, float **samples, size_t *n,
                         tm__audio_info *info, tm_error *err) {
    if (!path || !samples || !n || rate <= 0)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm__audio_load: bad argument");
    tm__audio_stream *st = NULL;
    tm_status s = tm__audio_stream_open(path, rate, &st, info, err);
    if (s) return s;
    float *x = malloc(st->length * sizeof *x);
    s = x ? tm__audio_stream_read(st, 0, st->length, x, err) : tm__fail(err, TM_ERR_NO_MEMORY, "out of memory reading %s", path);
    if (!s) {
        *samples = x;
        *n = st->length;
    } else {
        free(x);
    }
    tm__audio_stream_close(st);
    return s;
}
