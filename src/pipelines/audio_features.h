/* The audio feature extractors of preprocessor_config.json, as transformers.js computes them:
 * Wav2Vec2FeatureExtractor (the normalized waveform and an attention mask),
 * ASTFeatureExtractor (Kaldi-style log-mel filter bank, 128 x 1024) and
 * WhisperFeatureExtractor (log10 mel spectrogram of a 30 s window). Not the models' other
 * extractors (SeamlessM4T, CLAP, ...): those are refused by name. */
#ifndef TM_PIPELINES_AUDIO_FEATURES_H
#define TM_PIPELINES_AUDIO_FEATURES_H

#include <stddef.h>
#include "../../include/transmuter.h"
#include "../hub/json.h"

typedef struct tm__audio_fe tm__audio_fe;

/* From a parsed preprocessor_config.json; `source` names it in errors. A missing
 * feature_extractor_type or one we lack is TM_ERR_UNSUPPORTED, a bad value TM_ERR_PARSE. */
tm_status tm__audio_fe_open(const tm_json *config, const char *source, tm__audio_fe **out,
                            tm_error *err);
void tm__audio_fe_free(tm__audio_fe *fe);
/* The rate the extractor expects its waveform at (sampling_rate). */
int tm__audio_fe_rate(const tm__audio_fe *fe);
/* feature_extractor_type, e.g. "ASTFeatureExtractor". */
const char *tm__audio_fe_type(const tm__audio_fe *fe);
/* WhisperFeatureExtractor's chunk_length: the seconds of its window (30 when absent); 0
 * for the other extractors. */
double tm__audio_fe_chunk_length(const tm__audio_fe *fe);
/* The most samples of a clip the extractor reads (Whisper's n_samples: the rest is cut
 * off); 0 when it reads them all. */
size_t tm__audio_fe_max_samples(const tm__audio_fe *fe);

/* The extractor's outputs for one mono waveform x (n samples at tm__audio_fe_rate), each
 * a new tensor with a batch dimension of 1, in this order: input_values (Wav2Vec2: (1, n);
 * AST: (1, max_length, num_mel_bins)) or input_features (Whisper: (1, feature_size,
 * nb_max_frames)), then Wav2Vec2's attention_mask (int64 ones, (1, n)). names[i] gets each
 * output's name (static strings); *n_out how many (at most 2). */
tm_status tm__audio_fe_run(const tm__audio_fe *fe, const float *x, size_t n, tm_tensor **out,
                           const char **names, int *n_out, tm_error *err);

#endif
