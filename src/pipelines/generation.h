/* The generator's private pieces (src/pipelines/): logits processors and warpers, each a
 * small function over one row of float scores, in the order transformers applies them
 * (logits.c); the sampler's PRNG; beam-search bookkeeping (beams.c). Not the public API:
 * tm_generator_* in include/transmuter.h. */
#ifndef TM_PIPELINES_GENERATION_H
#define TM_PIPELINES_GENERATION_H

#include <stddef.h>
#include <stdint.h>
#include "transmuter.h"

/* The fine-tuning shuffle's PRNG (src/train/dataset.h, which generator.c and logits.c
 * include): declared here without the dataset's names, which the pipelines' clash with. */
typedef struct tm__rng tm__rng;

/* ---- Processors (transformers' LogitsProcessor classes; scores float32 as there) ---- */

/* RepetitionPenaltyLogitsProcessor: each distinct id of ids[0..n) has its score multiplied
 * by penalty when negative, divided by it otherwise. mark: vocab bytes, zero (left zero). */
void tm__logits_repetition_penalty(float *scores, int64_t vocab, const int32_t *ids, size_t n,
                                   double penalty, uint8_t *mark);
/* NoRepeatNGramLogitsProcessor: a token that would repeat an n-gram of ids is banned. */
void tm__logits_no_repeat_ngram(float *scores, int64_t vocab, const int32_t *ids, size_t n,
                                int64_t ngram);
/* NoBadWordsLogitsProcessor: the last token of each bad sequence whose other tokens end
 * ids is banned (one-token sequences always). Bad words equal to one EOS are skipped, as
 * Python transformers does. */
void tm__logits_bad_words(float *scores, int64_t vocab, const int32_t *ids, size_t n,
                          const int32_t *bad_ids, const int32_t *bad_lengths, int n_bad,
                          const int32_t *eos, int n_eos);
/* MinLengthLogitsProcessor / MinNewTokensLengthLogitsProcessor: EOS banned while length
 * (total, or new tokens) is below the minimum. */
void tm__logits_min_length(float *scores, int64_t vocab, int64_t length, int64_t min_length,
                           const int32_t *eos, int n_eos);
/* ForcedBOSTokenLogitsProcessor: at length 1, only bos. */
void tm__logits_forced_bos(float *scores, int64_t vocab, int64_t length, int32_t bos);
/* ForcedEOSTokenLogitsProcessor: at length max_length - 1, only the EOS ids. */
void tm__logits_forced_eos(float *scores, int64_t vocab, int64_t length, int64_t max_length,
                           const int32_t *eos, int n_eos);

/* SuppressTokensLogitsProcessor: the ids' scores become -inf. */
void tm__logits_suppress(float *scores, int64_t vocab, const int32_t *ids, int n);
/* SuppressTokensAtBeginLogitsProcessor: the same at length == begin only. */
void tm__logits_begin_suppress(float *scores, int64_t vocab, int64_t length, int64_t begin, const int32_t *ids,
                               int n);
/* transformers.js's WhisperTimeStampLogitsProcessor on a row of ids[0..n): <|notimestamps|>
 * never; at n == begin (the first new position) only timestamps (ids from
 * no_timestamps + 1); later, timestamps come in pairs (after two, text; after one text
 * then one timestamp, no text below eos), and when the timestamps' total probability
 * (log_softmax in float32, summed in double) beats every text token's, only timestamps.
 * Its max_initial_timestamp_index sits in a branch that never runs (the first position
 * `continue`s before it), so it has no parameter here. */
void tm__logits_whisper_timestamps(float *scores, int64_t vocab, const int32_t *ids, size_t n, size_t begin,
                                   int32_t no_timestamps, int32_t eos);

/* ---- Warpers (sampling; Python transformers' semantics) ---- */

void tm__logits_temperature(float *scores, int64_t vocab, double temperature);
/* TopKLogitsWarper: scores below the k-th largest become -inf (ties with it are kept).
 * scratch: vocab floats. */
void tm__logits_top_k(float *scores, int64_t vocab, int64_t k, int64_t min_keep, float *scratch);
/* TopPLogitsWarper: sorted ascending, the tokens whose cumulative probability stays at or
 * below 1 - top_p are removed (the last min_keep kept). order: vocab int32. */
void tm__logits_top_p(float *scores, int64_t vocab, double top_p, int64_t min_keep,
                      int32_t *order);
/* MinPLogitsWarper: probabilities below min_p times the largest are removed. */
void tm__logits_min_p(float *scores, int64_t vocab, double min_p, int64_t min_keep,
                      int32_t *order);
/* TypicalLogitsWarper. scratch: vocab floats. */
void tm__logits_typical(float *scores, int64_t vocab, double mass, int64_t min_keep,
                        int32_t *order, float *scratch);

/* A processor of the caller's (a task's), run on each row after the configured ones, as
 * transformers.js's logits_processor argument of generate(): ids[0..n) are the row's
 * sequence so far. */
typedef void (*tm__logits_fn)(void *user, float *scores, int64_t vocab, const int32_t *ids, size_t n);
/* Sets it (fn NULL: none); user is passed back and must outlive the generator's steps. */
void tm__generator_set_processor(tm_generator *g, tm__logits_fn fn, void *user);

/* For tm_batch (batch.c), which runs the decode steps of several generators as one:
 * whether g can join a batch of model m (one beam, that model); whether it has started
 * (its prompt run) and ended; its decoder (which holds its cache after the prompt); the
 * last token of its sequence (the next step's input); and its step once the batch has run:
 * row `row` of logits (B, n, vocab) processed and a token chosen, as tm_generator_step. */
int tm__generator_batchable(const tm_generator *g, const tm_model *m);
/* The cache dtype its decoders keep (tm_generation_config.kv_dtype; 0: float32). */
tm_dtype tm__generator_kv_dtype(const tm_generator *g);
int tm__generator_started(const tm_generator *g);
int tm__generator_done(const tm_generator *g);
tm_decoder *tm__generator_decoder(tm_generator *g);
/* From now on g steps only in a batch (tm_generator_step refuses: its decoder is stale). */
void tm__generator_set_batched(tm_generator *g);
int32_t tm__generator_last_token(const tm_generator *g);
tm_status tm__generator_take_logits(tm_generator *g, const tm_tensor *logits, int64_t row,
                                    int32_t *token, int *done, tm_error *err);

/* log_softmax in double, rounded to float. */
void tm__log_softmax(float *scores, int64_t vocab);
/* The first index of the largest score. */
int64_t tm__argmax(const float *scores, int64_t vocab);

/* ---- The sampler's PRNG: xoshiro256** seeded by splitmix64, the fine-tuning shuffle's
 * (tm__rng, src/train/dataset.h) ---- */

/* A double in [0, 1): the top 53 bits. */
double tm__rng_uniform(tm__rng *r);
/* A token drawn from softmax(scores) (-inf scores never): the first index whose running
 * sum of exp(score - max) in double passes u times the total. */
int64_t tm__sample(const float *scores, int64_t vocab, double u);

/* ---- Beam search (transformers' BeamSearchScorer and BeamHypotheses) ---- */

typedef struct tm__hyp {
    int32_t *ids;
    size_t n;
    float score;          /* sum of log-probs / generated_len ^ length_penalty */
} tm__hyp;

typedef struct tm__beam_hyps {
    int num_beams;
    double length_penalty;
    tm_early_stopping early_stopping;
    int64_t max_length;
    tm__hyp *hyps;        /* at most num_beams */
    int n;
    double worst;         /* 1e9 while empty */
    int done;
} tm__beam_hyps;

/* Adds hypothesis ids[0..n) of summed log-prob sum_logprobs and generated_len new tokens
 * when it is among the num_beams best; -1 when out of memory, else 0. */
int tm__beam_hyps_add(tm__beam_hyps *h, const int32_t *ids, size_t n, float sum_logprobs,
                      int64_t generated_len);
/* BeamHypotheses.is_done. */
int tm__beam_hyps_is_done(const tm__beam_hyps *h, float best_sum_logprobs, int64_t cur_len,
                          int64_t decoder_prompt_len);
void tm__beam_hyps_clear(tm__beam_hyps *h);

/* One step of BeamSearchScorer.process over candidates sorted best first (scores, tokens,
 * source beams; n_cand of them): fills next_scores, next_tokens, next_sources (num_beams
 * each) and adds finished hypotheses (the beams' ids, seqs[b][0..len), with the EOS not
 * appended, as transformers does). cur_len: length after this step. Returns -1 when out of
 * memory or when fewer than num_beams candidates go on, else 0. */
int tm__beam_process(tm__beam_hyps *h, int num_beams, const float *cand_scores,
                     const int32_t *cand_tokens, const int32_t *cand_sources, int n_cand,
                     int32_t *const *seqs, size_t len, const int32_t *eos, int n_eos,
                     int64_t decoder_prompt_len, float *next_scores, int32_t *next_tokens,
                     int32_t *next_sources);

#endif
