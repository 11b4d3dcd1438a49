/* Audio in: a sound file (WAV, FLAC, OGG/Vorbis, ... through libsndfile) or a .npy waveform
 * read as one mono float32 signal at a given rate, decoded and resampled as transformers.js's
 * reference inputs were: whole, or block by block with flat memory (tm__audio_stream). Not a
 * player and not a writer. */
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

/* Linear interpolation from rate_in to rate_out, the method of the transformers.js
 * references (no anti-alias filter): n_out = round(n_in * rate_out / rate_in); output i
 * reads t = i * rate_in / rate_out, j = floor(t),
 * out[i] = x[j] + (x[min(j + 1, n_in - 1)] - x[j]) * (t - j), in doubles.
 * *out is malloc'ed (*n_out of them, at least one element allocated). */
tm_status tm__audio_resample_linear(const float *x, size_t n_in, int rate_in, int rate_out,
                                    float **out, size_t *n_out, tm_error *err);

/* How channels become one: transformers.js's load_audio (two channels sqrt(2) * (L + R) / 2,
 * other counts the first channel: what tm__audio_load does), or their mean in float32, as
 * Silero's read_audio does (torch's mean over channels). */
typedef enum tm__audio_mix {
    TM__MIX_TJS = 0,
    TM__MIX_MEAN = 1
} tm__audio_mix;

/* A file read block by block: memory stays flat whatever its length (a block of 4096
 * frames). The same checks and errors as tm__audio_load at open (except that a file of zero
 * frames opens, and reads nothing), the same resampling (tm__audio_resample_linear's
 * doubles, sample for sample) once tm__audio_stream_set_rate asked for a rate; without it
 * the file's own rate. A .npy is read whole at open and taken as at the rate asked for.
 * A file that ends before its header says is an error naming it, at the read that finds
 * it. Not thread-safe. */
typedef struct tm__audio_stream tm__audio_stream;
tm_status tm__audio_stream_open(const char *path, tm__audio_mix mix, tm__audio_stream **out,
                                tm__audio_info *info, tm_error *err);
/* Before the first read. */
tm_status tm__audio_stream_set_rate(tm__audio_stream *st, int rate, tm_error *err);
/* Samples the stream gives in all, at its output rate. */
int64_t tm__audio_stream_length(const tm__audio_stream *st);
/* Up to cap samples into out; *n is 0 at the end. */
tm_status tm__audio_stream_read(tm__audio_stream *st, float *out, size_t cap, size_t *n,
                                tm_error *err);
void tm__audio_stream_close(tm__audio_stream *st);

/* A clip read in windows at any position (Whisper's chunks with their strides; for one
 * pass from start to end, tm__audio_stream): the same samples as tm__audio_load's, without holding them all.
 * PCM, float and companded files (WAV, AIFF, ...) and FLAC are read window by window
 * (their seeks are exact); lossy ones (OGG/Vorbis, Opus, MP3) and .npy waveforms are read
 * whole when opened. Opening checks what tm__audio_load checks before reading (a missing,
 * unreadable or empty file, a data chunk longer than the file); a window that cannot be
 * read whole is TM_ERR_PARSE ("truncated or corrupt"). info may be NULL. */
typedef struct tm__audio_window tm__audio_window;
tm_status tm__audio_window_open(const char *path, int rate, tm__audio_window **out, tm__audio_info *info,
                                tm_error *err);
/* The clip's samples at the rate asked for. */
size_t tm__audio_window_length(const tm__audio_window *st);
/* Samples [from, from + n) at that rate into out (n floats). */
tm_status tm__audio_window_read(tm__audio_window *st, size_t from, size_t n, float *out, tm_error *err);
void tm__audio_window_close(tm__audio_window *st);

#endif
