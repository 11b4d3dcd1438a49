/* Whisper in automatic-speech-recognition, as transformers.js 4.3 runs it: the repository's
 * Whisper settings (whisper.c), one call from clips to token sequences (whisper.c), and the
 * tokenizer's _decode_asr that merges the chunks' sequences into text and timestamped
 * chunks (whisper_decode.c). Not the task's table entry (automatic_speech_recognition.c)
 * nor the features (audio_features.c). */
#ifndef TM_PIPELINES_WHISPER_H
#define TM_PIPELINES_WHISPER_H

#include <stddef.h>
#include <stdint.h>
#include "pipelines.h"

/* The task's check for a Whisper repository: the generation task's (config.json,
 * generation_config.json, a decoder with a KV cache, an encoder), a tokenizer, an encoder
 * taking input_features, and the settings each call needs into p->whisper. */
tm_status tm__whisper_check(tm_pipeline *p, tm_error *err);
void tm__whisper_free(struct tm__whisper *w);

/* One call: [path | [paths]] and the options (language, task, return_timestamps,
 * chunk_length_s, stride_length_s, force_full_sequences and generation keys); writes
 * {"text": ...[, "chunks": [...]]} per clip. */
tm_status tm__whisper_call(tm_pipeline *p, const tm_json *inputs, const tm_json *options, tm__buf *out,
                           tm_error *err);

/* The seek loop's step (exposed for tests): where the next pass starts, in feature frames
 * from this pass's start, as _generate_with_seek reads a pass's new tokens gen[0..n) (EOS
 * removed): after the last pair of timestamps (the first one's time, 2 frames a step; the
 * tokens after that timestamp are dropped: *keep), or past the whole segment
 * (segment_frames) when the pass ends on a single timestamp after text or has no pair. A
 * pair at 0.00 would not move (transformers.js loops forever there): the whole segment is
 * taken then. first_ts: the first timestamp token. */
int64_t tm__whisper_seek_offset(const int32_t *gen, size_t n, int32_t first_ts, int64_t segment_frames,
                                size_t *keep);

/* A language as transformers.js's whisper_language_to_code takes it: a name ("French",
 * "castilian"), a code ("fr") or the token ("<|fr|>"), any case. NULL when unknown. */
const char *tm__whisper_language_code(const char *language);
/* The name of a language code ("fr" -> "french"), or NULL. */
const char *tm__whisper_language_name(const char *code);

/* One chunk's generated sequence (prompt included) and its stride in seconds: the chunk's
 * length, then what overlaps the previous and the next chunk. */
typedef struct tm__asr_chunk {
    int32_t *tokens;
    size_t n;
    double stride[3];
} tm__asr_chunk;

/* WhisperTokenizer._decode_asr: special tokens skipped (a language token noted), timestamp
 * tokens (timestamp_begin to timestamp_begin + 1500) close and open chunks, timestamps
 * inside a stride are skipped, and the text of overlapping chunks is joined where their
 * tokens agree longest. Writes {"text": ...} and, with return_timestamps, "chunks":
 * [{"timestamp": [start, end], "text": ...}] (null for a time not seen). force_full: a
 * sequence left without its closing timestamp is an error (transformers.js's throw). */
tm_status tm__whisper_decode_asr(const tm_pipeline *p, const tm__asr_chunk *chunks, size_t n,
                                 int return_timestamps, int force_full, double time_precision,
                                 int32_t timestamp_begin, tm__buf *out, tm_error *err);

#endif
