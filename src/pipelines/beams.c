/* Beam search's bookkeeping as transformers' BeamSearchScorer and BeamHypotheses do it:
 * the finished hypotheses of one input with their length-penalised scores, the choice of
 * the next beams among the step's best candidates, and the stopping rule of
 * early_stopping. Not the model runs: generator.c steps the beams' decoders. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "generation.h"

int tm__beam_hyps_add(tm__beam_hyps *h, const int32_t *ids, size_t n, float sum_logprobs,
                      int64_t generated_len) {
    float score = (float)(sum_logprobs / pow((double)generated_len, h->length_penalty));
    if (h->n >= h->num_beams && !(score > h->worst)) return 0;
    if (!h->hyps) {
        h->hyps = calloc((size_t)h->num_beams + 1, sizeof *h->hyps);
        if (!h->hyps) return -1;
    }
    int32_t *copy = malloc((n ? n : 1) * sizeof *copy);
    if (!copy) return -1;
    memcpy(copy, ids, n * sizeof *copy);
    h->hyps[h->n++] = (tm__hyp){copy, n, score};
    if (h->n > h->num_beams) {
        /* Drop the worst (the first of the lowest, as Python's sorted() finds it); the
         * new worst is the second lowest. */
        int worst = 0;
        for (int k = 1; k < h->n; k++)
            if (h->hyps[k].score < h->hyps[worst].score) worst = k;
        free(h->hyps[worst].ids);
        memmove(h->hyps + worst, h->hyps + worst + 1, (size_t)(h->n - worst - 1) * sizeof *h->hyps);
        h->n--;
        double w = INFINITY;
        for (int k = 0; k < h->n; k++)
            if (h->hyps[k].score < w) w = h->hyps[k].score;
        h->worst = w;
    } else {
        h->worst = score < h->worst ? score : h->worst;
    }
    return 0;
}

int tm__beam_hyps_is_done(const tm__beam_hyps *h, float best_sum_logprobs, int64_t cur_len,
                          int64_t decoder_prompt_len) {
    if (h->n < h->num_beams) return 0;
    if (h->early_stopping == TM_EARLY_STOPPING_TRUE) return 1;
    int64_t len = cur_len - decoder_prompt_len;
    if (h->early_stopping == TM_EARLY_STOPPING_NEVER && h->length_penalty > 0)
        len = h->max_length - decoder_prompt_len;
    float best = (float)(best_sum_logprobs / pow((double)len, h->length_penalty));
    return h->worst >= best;
}

void tm__beam_hyps_clear(tm__beam_hyps *h) {
    for (int k = 0; h->hyps && k < h->n; k++) free(h->hyps[k].ids);
    free(h->hyps);
    h->hyps = NULL;
    h->n = 0;
    h->worst = 1e9;
}

static int is_eos(int32_t id, const int32_t *eos, int n_eos) {
    for (int k = 0; k < n_eos; k++)
        if (eos[k] == id) return 1;
    return 0;
}

int tm__beam_process(tm__beam_hyps *h, int num_beams, const float *cand_scores,
                     const int32_t *cand_tokens, const int32_t *cand_sources, int n_cand,
                     int32_t *const *seqs, size_t len, const int32_t *eos, int n_eos,
                     int64_t decoder_prompt_len, float *next_scores, int32_t *next_tokens,
                     int32_t *next_sources) {
    int64_t cur_len = (int64_t)len + 1;
    int beam = 0;
    for (int rank = 0; rank < n_cand && beam < num_beams; rank++) {
        if (is_eos(cand_tokens[rank], eos, n_eos)) {
            /* An EOS outside the num_beams best candidates does not finish a beam. */
            if (rank >= num_beams) continue;
            if (tm__beam_hyps_add(h, seqs[cand_sources[rank]], len, cand_scores[rank],
                                  cur_len - decoder_prompt_len))
                return -1;
        } else {
            next_scores[beam] = cand_scores[rank];
            next_tokens[beam] = cand_tokens[rank];
            next_sources[beam] = cand_sources[rank];
            beam++;
        }
    }
    if (beam < num_beams) return -1;
    h->done = h->done || tm__beam_hyps_is_done(h, cand_scores[0], cur_len, decoder_prompt_len);
    return 0;
}
