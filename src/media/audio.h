/* Audio in: a sound file (WAV, FLAC, OGG/Vorbis, ... through libsndfile) or a .npy waveform
 * read as one mono float32 signal at a given rate, decoded and resampled as transformers.js's
 * reference inputs were: whole, or window by window (long clips in chunks). Not a player,
 * not a writer. */
#ifndef TM_MEDIA_AUDIO_H
#define TM_MEDIA_AUDIO_H

#include <stddef.h>
#include <stdint.h>
#include "../../include/transmuter.h"

/* What was read, before resampling. */
typedef struct tm__audio_info {
    int rate_in;                  /* the file's sampling rate (the target rate for .npy) */
    int channels_in;
    int64_t samples_in;           /* frames in the file */
} tm__audio_info;

/* Reads path as mono float32 at `rate` Hz into *samples (malloc'ed, *n of them).
 * A sound file: samples as floats (16-bit PCM s/32768), two channels mixed as
 * transformers.js's load_audio does, sqrt(2) * (L + R) / 2 (other counts keep the first
 * channel, as it does), then resampled by tm__audio_resample_linear when its rate differs.
 * A .npy (float32 or float64, one dimension, or (1, N)): taken as already at `rate`.
 * Errors name the file: a missing one (TM_ERR_IO), one libsndfile cannot read (TM_ERR_PARSE or
 * TM_ERR_UNSUPPORTED), a truncated one (fewer frames than its header says: TM_ERR_PARSE),
 * and a clip without samples (TM_ERR_INVALID_ARGUMENT: an empty clip is refused, not
 * passed on). info may be NULL. On error *samples and *n are untouched. */
tm_status tm__audio_load(const char *path, int rate, float **samples, size_t *n,
                         tm__audio_info *info, tm_error *err);

/* A clip read in windows: the same samples as tm__audio_load's, without holding them all.
 * PCM, float and companded files (WAV, AIFF, ...) and FLAC are read window by window
 * (their seeks are exact); lossy ones (OGG/Vorbis, Opus, MP3) and .npy waveforms are read
 * whole when opened. Opening checks what tm__audio_load checks before reading (a missing,
 * unreadable or empty file, a data chunk longer than the file); a window that cannot be
 * read whole is TM_ERR_PARSE ("truncated or corrupt"). info may be NULL. */
typedef struct tm__audio_stream tm__audio_stream;
tm_status tm__audio_stream_open(const char *path, int rate, tm__audio_stream **out, tm__audio_info *info,
                                tm_error *err);
/* The clip's samples at the rate asked for. */
size_t tm__audio_stream_length(const tm__audio_stream *st);
/* Samples [from, from + n) at that rate into out (n floats). */
tm_status tm__audio_stream_read(tm__audio_stream *st, size_t from, size_t n, float *out, tm_error *err);
void tm__audio_stream_close(tm__audio_stream *st);

/* Linear interpolation from rate_in to rate_out, the method of the transformers.js
 * references (no anti-alias filter): n_out = round(n_in * rate_out / rate_in); output i
 * reads t = i * rate_in / rate_out, j = floor(t),
 * out[i] = x[j] + (x[min(j + 1, n_in - 1)] - x[j]) * (t - j), in doubles.
 * *out is malloc'ed (*n_out of them, at least one element allocated). */
tm_status tm__audio_resample_linear(const float *x, size_t n_in, int rate_in, int rate_out,
                                    float **out, size_t *n_out, tm_error *err);

#endif
