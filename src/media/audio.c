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

/* Opens a sound file with libsndfile and checks what its header says: errors name the
 * file (missing, unreadable, truncated data chunk, no channels or rate). Zero frames is
 * left to the caller. */
static tm_status open_sound(const char *path, SNDFILE **out, SF_INFO *sfi, tm_error *err) {
    FILE *probe = fopen(path, "rb");
    if (!probe) return tm__fail(err, TM_ERR_IO, "cannot open audio file '%s': %s", path, strerror(errno));
    fclose(probe);
    memset(sfi, 0, sizeof *sfi);
    SNDFILE *f = sf_open(path, SFM_READ, sfi);
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
    else if (sfi->channels < 1 || sfi->samplerate <= 0)
        s = tm__fail(err, TM_ERR_PARSE, "%s: %d channels at %d Hz", path, sfi->channels, sfi->samplerate);
    if (s) {
        sf_close(f);
        return s;
    }
    *out = f;
    return TM_OK;
}

static tm_status short_read(tm_error *err, const char *path, SNDFILE *f, long long want, long long got) {
    return tm__fail(err, TM_ERR_PARSE, "%s: truncated or corrupt: its header says %lld frames, %lld could be read%s%s",
                    path, want, got, sf_error(f) ? ": " : "", sf_error(f) ? sf_strerror(f) : "");
}

/* One frame of ch channels (doubles from libsndfile) to one mono sample. */
static float mix_frame(const double *frame, size_t ch, tm__audio_mix mix) {
    if (mix == TM__MIX_MEAN) {   /* the channels' mean in float32, as torch's mean(dim=0) */
        float sum = 0.0f;
        for (size_t c = 0; c < ch; c++) sum += (float)frame[c];
        return sum / (float)ch;
    }
    if (ch == 2) {   /* load_audio's stereo mix, on the float32 channel data */
        double l = (float)frame[0], r = (float)frame[1];
        return (float)(sqrt(2.0) * (l + r) / 2);
    }
    return (float)frame[0];
}

/* A sound file through libsndfile, mono at its own rate. */
static tm_status load_sound(const char *path, float **samples, size_t *n, tm__audio_info *info,
                            tm_error *err) {
    SF_INFO sfi;
    SNDFILE *f = NULL;
    tm_status s = open_sound(path, &f, &sfi, err);
    if (s) return s;
    if (sfi.frames <= 0)
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
        if (got != (sf_count_t)frames) s = short_read(err, path, f, (long long)frames, got > 0 ? (long long)got : 0);
    }
    for (size_t i = 0; !s && i < frames; i++) mono[i] = mix_frame(raw + i * ch, ch, TM__MIX_TJS);
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

/* ---- Reading block by block ----------------------------------------------------------- */

struct tm__audio_stream {
    char *path;
    SNDFILE *file;              /* NULL for a .npy, read whole into `whole` */
    float *whole;
    size_t whole_at;
    size_t channels;
    tm__audio_mix mix;
    int64_t frames_in;          /* what the header says */
    int64_t read_in;            /* frames read from the file so far */
    int rate_in, rate_out;
    int started;
    int64_t n_out, done_out;    /* samples out in all, and given so far */
    double *raw;                /* (STREAM_BLOCK, channels) */
    float *window;              /* mono input samples [window_start, window_start + window_len) */
    int64_t window_start;
    size_t window_len;
};

enum { STREAM_BLOCK = 4096 };

tm_status tm__audio_stream_open(const char *path, tm__audio_mix mix, tm__audio_stream **out,
                                tm__audio_info *info, tm_error *err) {
    if (!path || !out) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm__audio_stream_open: bad argument");
    tm__audio_stream *st = calloc(1, sizeof *st);
    if (!st || !(st->path = strdup(path))) {
        free(st);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory opening %s", path);
    }
    st->mix = mix;
    tm_status s;
    if (ends_with(path, ".npy")) {
        size_t n = 0;
        s = load_npy(path, &st->whole, &n, err);
        st->frames_in = (int64_t)n;
        st->channels = 1;
        st->rate_in = 0;   /* taken as already at the rate asked for */
    } else {
        SF_INFO sfi;
        s = open_sound(path, &st->file, &sfi, err);
        if (!s) {
            st->frames_in = sfi.frames;
            st->channels = (size_t)sfi.channels;
            st->rate_in = sfi.samplerate;
            st->raw = malloc((size_t)STREAM_BLOCK * st->channels * sizeof *st->raw);
            st->window = malloc((size_t)(STREAM_BLOCK + 2) * sizeof *st->window);
            if (!st->raw || !st->window) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory opening %s", path);
        }
    }
    if (s) {
        tm__audio_stream_close(st);
        return s;
    }
    st->rate_out = st->rate_in;
    st->n_out = st->frames_in;
    if (info) {
        info->rate_in = st->rate_in;
        info->channels_in = (int)st->channels;
        info->samples_in = st->frames_in;
    }
    *out = st;
    return TM_OK;
}

tm_status tm__audio_stream_set_rate(tm__audio_stream *st, int rate, tm_error *err) {
    if (!st || rate <= 0 || st->started)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm__audio_stream_set_rate: bad argument");
    if (!st->file) {   /* a .npy waveform is at whatever rate it is read at */
        st->rate_in = st->rate_out = rate;
        return TM_OK;
    }
    double count = floor((double)st->frames_in * rate / st->rate_in + 0.5);   /* as resample_linear */
    if (count > 9007199254740992.0)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s: %lld frames at %d Hz are too many at %d Hz", st->path,
                        (long long)st->frames_in, st->rate_in, rate);
    st->rate_out = rate;
    st->n_out = (int64_t)count;
    return TM_OK;
}

int64_t tm__audio_stream_length(const tm__audio_stream *st) {
    return st ? st->n_out : 0;
}

/* Appends the next block of the file, mixed to mono, to the window; *got frames (0 at the
 * end). Reading fewer frames than the header says is an error naming the file. */
static tm_status read_block(tm__audio_stream *st, size_t *got, tm_error *err) {
    *got = 0;
    int64_t left = st->frames_in - st->read_in;
    if (left <= 0) return TM_OK;
    sf_count_t want = left < STREAM_BLOCK ? (sf_count_t)left : STREAM_BLOCK;
    sf_count_t n = sf_readf_double(st->file, st->raw, want);
    if (n < want) return short_read(err, st->path, st->file, (long long)st->frames_in,
                                    (long long)st->read_in + (n > 0 ? (long long)n : 0));
    for (sf_count_t i = 0; i < n; i++)
        st->window[st->window_len + (size_t)i] = mix_frame(st->raw + (size_t)i * st->channels, st->channels, st->mix);
    st->window_len += (size_t)n;
    st->read_in += n;
    *got = (size_t)n;
    return TM_OK;
}

/* Drops the window's samples before input index keep (their outputs are done). */
static void window_drop(tm__audio_stream *st, int64_t keep) {
    if (keep <= st->window_start) return;
    size_t drop = (size_t)(keep - st->window_start);
    if (drop > st->window_len) drop = st->window_len;
    memmove(st->window, st->window + drop, (st->window_len - drop) * sizeof *st->window);
    st->window_len -= drop;
    st->window_start += (int64_t)drop;
}

tm_status tm__audio_stream_read(tm__audio_stream *st, float *out, size_t cap, size_t *n, tm_error *err) {
    if (!st || !n || (cap && !out)) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm__audio_stream_read: bad argument");
    st->started = 1;
    size_t k = 0;
    if (!st->file) {   /* .npy */
        size_t left = (size_t)st->frames_in - st->whole_at;
        k = left < cap ? left : cap;
        if (k) memcpy(out, st->whole + st->whole_at, k * sizeof *out);
        st->whole_at += k;
        *n = k;
        return TM_OK;
    }
    while (k < cap && st->done_out < st->n_out) {
        /* Output i reads x[j] and x[j + 1] (the last input where j + 1 runs past the end):
         * the same doubles as tm__audio_resample_linear, so the same floats. */
        int64_t i = st->done_out, j, next;
        double t = 0.0;
        if (st->rate_in == st->rate_out) j = next = i;
        else {
            t = (double)i * st->rate_in / st->rate_out;
            j = (int64_t)floor(t);
            if (j >= st->frames_in) j = st->frames_in - 1;
            next = j + 1 < st->frames_in ? j + 1 : st->frames_in - 1;
        }
        if (next >= st->window_start + (int64_t)st->window_len) {
            window_drop(st, j);
            size_t got = 0;
            tm_status s = read_block(st, &got, err);
            if (s) return s;
            if (!got) return short_read(err, st->path, st->file, (long long)st->frames_in, (long long)st->read_in);
            continue;
        }
        float xj = st->window[j - st->window_start];
        if (st->rate_in == st->rate_out) out[k] = xj;
        else {
            float xk = st->window[next - st->window_start];
            out[k] = (float)((double)xj + ((double)xk - (double)xj) * (t - (double)j));
        }
        k++;
        st->done_out++;
    }
    *n = k;
    return TM_OK;
}

void tm__audio_stream_close(tm__audio_stream *st) {
    if (!st) return;
    if (st->file) sf_close(st->file);
    free(st->whole);
    free(st->raw);
    free(st->window);
    free(st->path);
    free(st);
}

/* Math.round(n_in * rate_out / rate_in): the samples at the new rate. */
static double window_count(size_t n_in, int rate_in, int rate_out) {
    return floor((double)n_in * rate_out / rate_in + 0.5);
}

/* The input sample output i starts from: floor(i * rate_in / rate_out), at most n_in - 1. */
static size_t window_source(size_t i, size_t n_in, int rate_in, int rate_out) {
    size_t j = (size_t)floor((double)i * rate_in / rate_out);
    return j < n_in ? j : n_in - 1;
}

/* Outputs [from, from + n) of the linear interpolation into y; x holds input samples
 * [x_first, ...] of n_in, as many as those outputs read. */
static void window_interpolate(const float *x, size_t x_first, size_t n_in, int rate_in, int rate_out, size_t from,
                        size_t n, float *y) {
    for (size_t i = from; i < from + n; i++) {
        double t = (double)i * rate_in / rate_out;
        size_t j = window_source(i, n_in, rate_in, rate_out);
        size_t k = j + 1 < n_in ? j + 1 : n_in - 1;
        double a = x[j - x_first], b = x[k - x_first];
        y[i - from] = (float)(a + (b - a) * (t - (double)j));
    }
}

/* ---- Windows: a clip read at any position (Whisper's chunks) ----------------------- */

struct tm__audio_window {
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

void tm__audio_window_close(tm__audio_window *st) {
    if (!st) return;
    if (st->file) sf_close(st->file);
    free(st->path);
    free(st->whole);
    free(st->raw);
    free(st->mono);
    free(st);
}

size_t tm__audio_window_length(const tm__audio_window *st) { return st->length; }

/* Room for `frames` frames in the window buffers. */
static tm_status window_room(tm__audio_window *st, size_t frames, tm_error *err) {
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
static tm_status window_frames(tm__audio_window *st, size_t first, size_t count, tm_error *err) {
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
static int window_exact_seeks(const SF_INFO *sfi) {
    int sub = sfi->format & SF_FORMAT_SUBMASK;
    return sfi->seekable && (sub == SF_FORMAT_PCM_S8 || sub == SF_FORMAT_PCM_U8 || sub == SF_FORMAT_PCM_16 ||
                             sub == SF_FORMAT_PCM_24 || sub == SF_FORMAT_PCM_32 || sub == SF_FORMAT_FLOAT ||
                             sub == SF_FORMAT_DOUBLE || sub == SF_FORMAT_ULAW || sub == SF_FORMAT_ALAW);
}

/* A sound file through libsndfile: its header checked; read whole now unless its seeks
 * are exact. */
static tm_status window_open(tm__audio_window *st, tm_error *err) {
    SF_INFO sfi;
    tm_status opened = open_sound(st->path, &st->file, &sfi, err);
    if (opened) return opened;
    if (sfi.frames <= 0)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s: the clip has no samples (zero length)", st->path);
    st->info = (tm__audio_info){sfi.samplerate, sfi.channels, (int64_t)sfi.frames};
    if (window_exact_seeks(&sfi)) return TM_OK;
    tm_status s = window_frames(st, 0, (size_t)sfi.frames, err);
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

tm_status tm__audio_window_open(const char *path, int rate, tm__audio_window **out, tm__audio_info *info,
                                tm_error *err) {
    if (!path || !out || rate <= 0) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm__audio_window_open: bad argument");
    tm__audio_window *st = calloc(1, sizeof *st);
    if (st) st->path = strdup(path);
    if (!st || !st->path) {
        tm__audio_window_close(st);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    }
    st->rate = rate;
    tm_status s;
    if (ends_with(path, ".npy")) {
        size_t n = 0;
        s = load_npy(path, &st->whole, &n, err);
        st->info = (tm__audio_info){rate, 1, (int64_t)n};
    } else {
        s = window_open(st, err);
    }
    size_t frames = (size_t)st->info.samples_in;
    double count = s ? 0 : window_count(frames, st->info.rate_in, rate);
    if (!s && count > 2147483648.0)
        s = tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s: %zu samples at %d Hz are %.0f at %d Hz: too long", path, frames,
                     st->info.rate_in, count, rate);
    else if (!s && count < 1)
        s = tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s: no samples left at %d Hz", path, rate);
    if (s) {
        tm__audio_window_close(st);
        return s;
    }
    st->length = st->info.rate_in == rate ? frames : (size_t)count;
    if (info) *info = st->info;
    *out = st;
    return TM_OK;
}

tm_status tm__audio_window_read(tm__audio_window *st, size_t from, size_t n, float *out, tm_error *err) {
    if (from > st->length || n > st->length - from)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s: samples %zu to %zu of %zu", st->path, from, from + n,
                        st->length);
    if (n == 0) return TM_OK;
    size_t frames = (size_t)st->info.samples_in, first = from, last = from + n - 1;
    int same_rate = st->info.rate_in == st->rate;
    if (!same_rate) {
        /* the input samples those outputs interpolate between */
        first = window_source(from, frames, st->info.rate_in, st->rate);
        size_t j = window_source(from + n - 1, frames, st->info.rate_in, st->rate);
        last = j + 1 < frames ? j + 1 : frames - 1;
    }
    const float *x = st->whole + (st->whole ? first : 0);
    if (!st->whole) {
        tm_status s = window_frames(st, first, last - first + 1, err);
        if (s) return s;
        x = st->mono;
    }
    if (same_rate) memcpy(out, x, n * sizeof *out);
    else window_interpolate(x, first, frames, st->info.rate_in, st->rate, from, n, out);
    return TM_OK;
}
