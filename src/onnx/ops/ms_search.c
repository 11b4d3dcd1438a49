/* com.microsoft GreedySearch, Sampling and BeamSearch (GPT-2 style decoders; T5
 * encoder-decoder for BeamSearch): the decoder subgraph runs per token, token choice is host
 * code following ONNX Runtime's CPU implementation (Sampling draws with the same generator,
 * so a seed gives ONNX Runtime's tokens). Not Whisper's timestamp processing. */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include "contrib.h"
#include "ms_sampling.h"

typedef struct hypothesis {
    int32_t *tokens;
    int64_t len;
    float score;
} hypothesis;

typedef struct gen {
    tm_lower *L;
    tm_ctx *c;
    const tm_graph *init_decoder, *decoder, *encoder;
    int t5;                                /* model_type 1: encoder-decoder */
    int64_t enc_seq;                       /* encoder input length (T5) */
    int first_past;                        /* decoder input index of the first past (T5) */
    int use_sequence;                      /* T5 decoder takes the whole sequence as input_ids */
    int64_t batch, beams, bb, seq, max_len, min_len, vocab, stride;
    int64_t eos, pad, ngram, num_return;
    float rep_penalty, length_penalty;
    int early_stopping;
    int32_t *vocab_mask, *prefix_mask;     /* host copies or NULL */
    int32_t *seqs, *seqs_next;             /* (bb, max_len) */
    int64_t cur_len;
    int32_t *mask;                         /* (bb, cur_len) */
    int32_t *pos;                          /* (bb) next position ids */
    int32_t *tokens, *indices;             /* (bb) chosen tokens and source beams */
    float *scores;                         /* (bb, vocab) */
    float *beam_scores;                    /* (bb) */
    int vocab_mask_index, prefix_index;    /* inputs read once the vocabulary is known */
    int n_in;
    tm_oval *in;                           /* subgraph feeds */
    tm_val first;                          /* values from here on were made by this node */
    /* beam search */
    hypothesis *hyps;                      /* (batch, beams) */
    int64_t *n_hyps;
    float *worst;
    uint8_t *done;
    float *step_scores;                    /* optional scores output */
} gen;

static void gen_free(gen *g) {
    free(g->vocab_mask);
    free(g->prefix_mask);
    free(g->seqs);
    free(g->seqs_next);
    free(g->mask);
    free(g->pos);
    free(g->tokens);
    free(g->indices);
    free(g->scores);
    free(g->beam_scores);
    free(g->in);
    if (g->hyps)
        for (int64_t i = 0; i < g->batch * g->beams; i++) free(g->hyps[i].tokens);
    free(g->hyps);
    free(g->n_hyps);
    free(g->worst);
    free(g->done);
    free(g->step_scores);
}

/* A new int32 constant of the given dims holding a copy of data. */
static tm_val const_i32(tm_ctx *c, const int32_t *data, int rank, const int64_t *dims) {
    tm_tensor *t = tm_tensor_new(TM_INT32, rank, dims);
    if (!t) {
        tm_ctx_fail(c, TM_ERR_NO_MEMORY, "out of memory");
        return TM_NONE;
    }
    memcpy(tm_tensor_data(t), data, tm_tensor_nbytes(t));
    return tm_val_tensor(c, t, 0);
}

/* Frees (eager) a value this node made, once nothing needs it. */
static void drop(gen *g, tm_val v) {
    if (v != TM_NONE && v >= g->first) tm_val_release(g->c, v);
}

/* drop() for a value that may also be one of the subgraph feeds. */
static void drop_unfed(gen *g, tm_val v) {
    for (int i = 0; i < g->n_in; i++)
        if (g->in[i].kind == TM_OV_TENSOR && g->in[i].v == v) return;
    drop(g, v);
}

/* An input read as int64s on the host: `count` values expected (-1: any). */
static int host_ints(gen *g, int index, int64_t *out, int64_t count, int64_t def) {
    tm_ctx *c = g->c;
    if (!tm_lhas(g->L, index)) {
        *out = def;
        return 0;
    }
    tm_val v = tm_lin(g->L, index);
    if (tm_vnumel(c, v) != count)
        return tm_lfail(g->L, TM_ERR_SHAPE, "input %d ('%s') must hold %lld values", index,
                        tm_lnode(g->L)->inputs[index], (long long)count);
    return tm_host_i64(c, v, out, count) == count ? 0 : -1;
}

static int host_float(gen *g, int index, float *out, float def) {
    *out = def;
    if (!tm_lhas(g->L, index)) return 0;
    double v;
    if (tm_host_f64(g->c, tm_lin(g->L, index), &v)) return -1;
    *out = (float)v;
    return 0;
}

/* An optional int32 mask input copied to the host (count values), or NULL. */
static int host_mask(gen *g, int index, int64_t count, int32_t **out) {
    *out = NULL;
    if (!tm_lhas(g->L, index)) return 0;
    tm_val v = tm_lin(g->L, index);
    if (tm_vnumel(g->c, v) != count)
        return tm_lfail(g->L, TM_ERR_SHAPE, "input %d ('%s') must hold %lld values", index,
                        tm_lnode(g->L)->inputs[index], (long long)count);
    int64_t *tmp = malloc((size_t)count * sizeof *tmp);
    *out = malloc((size_t)count * sizeof **out);
    if (!tmp || !*out) {
        free(tmp);
        return tm_lfail(g->L, TM_ERR_NO_MEMORY, "out of memory");
    }
    int ok = tm_host_i64(g->c, v, tmp, count) == count;
    for (int64_t i = 0; ok && i < count; i++) (*out)[i] = (int32_t)tmp[i];
    free(tmp);
    return ok ? 0 : -1;
}

/* The T5 decoder's layout: input_ids, then any of encoder_input_ids,
 * encoder_attention_mask, encoder_hidden_states, then the self-attention pasts (one per
 * present output) and the cross-attention pasts. */
static int t5_read(gen *g) {
    const tm_graph *d = g->decoder, *e = g->encoder;
    g->first_past = -1;
    for (int i = 1; i < d->n_inputs && g->first_past < 0; i++)
        if (!strncmp(d->inputs[i].name, "past", 4)) g->first_past = i;
    int n_self = d->n_outputs - 1;
    if (g->first_past < 0 || n_self < 1 || d->n_inputs - g->first_past != 2 * n_self ||
        e->n_inputs < 2 || e->n_inputs > 3 || e->n_outputs != 2 + 2 * n_self)
        return tm_lfail(g->L, TM_ERR_SHAPE, "encoder/decoder subgraphs do not have the T5 layout "
                        "(encoder: ids, mask[, decoder ids] -> logits, hidden states, self and "
                        "cross presents; decoder: ids, ..., self and cross pasts -> logits, self "
                        "presents)");
    const tm_type *t = &d->inputs[0].type;
    g->use_sequence = !(t->rank == 2 && t->dims[1].value == 1);
    return 0;
}

/* Attributes, scalar inputs and subgraphs shared by both searches. The input indices
 * differ: vocab_mask, prefix_vocab_mask, attention_mask. */
static int gen_read(gen *g, int vocab_mask_index, int prefix_index, int beam) {
    tm_lower *L = g->L;
    tm_ctx *c = g->c;
    int64_t type = tm_attr_i(L, "model_type", 0);
    if (type != 0 && !(beam && type == 1))
        return tm_lfail(L, TM_ERR_UNSUPPORTED, "attribute model_type=%lld is not supported (0: "
                        "decoder-only; 1: encoder-decoder, BeamSearch only)", (long long)type);
    g->t5 = type == 1;
    g->encoder = tm_attr_g(L, "encoder");
    if (g->t5 && !g->encoder) return tm_lfail(L, TM_ERR_PARSE, "attribute encoder is required");
    g->decoder = tm_attr_g(L, "decoder");
    g->init_decoder = tm_attr_g(L, "init_decoder");
    if (!g->decoder) return tm_lfail(L, TM_ERR_PARSE, "attribute decoder is required");
    if (!tm_attr_has(L, "eos_token_id") || !tm_attr_has(L, "pad_token_id"))
        return tm_lfail(L, TM_ERR_PARSE, "attributes eos_token_id and pad_token_id are required");
    g->eos = tm_attr_i(L, "eos_token_id", -1);
    g->pad = tm_attr_i(L, "pad_token_id", 0);
    g->ngram = tm_attr_i(L, "no_repeat_ngram_size", 0);
    g->early_stopping = tm_attr_i(L, "early_stopping", 0) != 0;
    tm_val ids = tm_ms_input(L, 0, TM_DT(TM_INT32));
    if (!tm_ctx_ok(c) || tm_ms_check_shape(L, 0, ids, 2, -1)) return -1;
    g->batch = tm_vdims(c, ids)[0];
    g->seq = tm_vdims(c, ids)[1];
    if (g->t5) {
        /* Decoding starts from one decoder_start_token_id per row. */
        g->enc_seq = g->seq;
        g->seq = 1;
    }
    if (host_ints(g, 1, &g->max_len, 1, 0) || host_ints(g, 2, &g->min_len, 1, 0)) return -1;
    g->beams = 1;
    g->num_return = 1;
    g->length_penalty = 1.0f;
    if (beam && (host_ints(g, 3, &g->beams, 1, 1) || host_ints(g, 4, &g->num_return, 1, 1) ||
                 host_float(g, 5, &g->length_penalty, 1.0f)))
        return -1;
    if (host_float(g, beam ? 6 : 3, &g->rep_penalty, 1.0f)) return -1;
    if (g->max_len <= g->seq || g->beams < 1 || g->num_return < 1 || g->num_return > g->beams)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "max_length=%lld must exceed the prompt "
                        "length %lld; num_beams=%lld >= num_return_sequences=%lld >= 1",
                        (long long)g->max_len, (long long)g->seq, (long long)g->beams,
                        (long long)g->num_return);
    g->bb = g->batch * g->beams;
    const tm_graph *d = g->decoder;
    g->n_in = d->n_inputs;
    g->vocab = tm_attr_i(L, "vocab_size", -1);
    g->vocab_mask_index = vocab_mask_index;
    g->prefix_index = prefix_index;
    if (g->t5) return t5_read(g);
    if (d->n_inputs < 3 || d->n_outputs < 1 || d->n_outputs - 1 != d->n_inputs - 3)
        return tm_lfail(L, TM_ERR_SHAPE, "decoder subgraph must take input_ids, position_ids, "
                        "attention_mask and one past per present output");
    return 0;
}

static int gen_alloc(gen *g) {
    size_t bb = (size_t)g->bb, ml = (size_t)g->max_len;
    g->seqs = calloc(bb * ml, sizeof *g->seqs);
    g->seqs_next = calloc(bb * ml, sizeof *g->seqs_next);
    g->mask = calloc(bb * ml, sizeof *g->mask);
    g->pos = calloc(bb, sizeof *g->pos);
    g->tokens = calloc(bb, sizeof *g->tokens);
    g->indices = calloc(bb, sizeof *g->indices);
    g->beam_scores = calloc(bb, sizeof *g->beam_scores);
    g->in = calloc((size_t)g->n_in, sizeof *g->in);
    if (!g->seqs || !g->seqs_next || !g->mask || !g->pos || !g->tokens || !g->indices ||
        !g->beam_scores || !g->in)
        return tm_lfail(g->L, TM_ERR_NO_MEMORY, "out of memory");
    return 0;
}

/* A feed as the subgraph declares it (int32 unless it says otherwise). */
static tm_val as_declared(gen *g, tm_val v, int input) {
    int dt = g->decoder->inputs[input].type.elem_dtype;
    return dt && dt != TM_INT32 ? tm_cast(g->c, v, (tm_dtype)dt) : v;
}

static void set_feed(gen *g, int i, tm_val v) {
    g->in[i].kind = TM_OV_TENSOR;
    g->in[i].v = v;
}

/* First run: input_ids expanded over beams, attention mask 0 on pad tokens (or the
 * caller's mask), positions counting the non-pad tokens, empty past states. */
static int gen_first_feeds(gen *g, int mask_index) {
    tm_ctx *c = g->c;
    int64_t n = g->batch * g->seq;
    int64_t *ids = malloc((size_t)n * sizeof *ids), *user = NULL;
    int32_t *eids = malloc((size_t)(g->bb * g->seq) * sizeof *eids);
    int32_t *epos = malloc((size_t)(g->bb * g->seq) * sizeof *epos);
    if (!ids || !eids || !epos) {
        free(ids);
        free(eids);
        free(epos);
        return tm_lfail(g->L, TM_ERR_NO_MEMORY, "out of memory");
    }
    int st = tm_host_i64(c, tm_lin(g->L, 0), ids, n) == n ? 0 : -1;
    if (!st && tm_lhas(g->L, mask_index)) {
        user = malloc((size_t)n * sizeof *user);
        if (!user) st = tm_lfail(g->L, TM_ERR_NO_MEMORY, "out of memory");
        else st = host_ints(g, mask_index, user, n, 0);
    }
    for (int64_t b = 0; !st && b < g->batch; b++) {
        int32_t position = 0;
        for (int64_t k = 0; k < g->beams; k++) {
            int64_t row = b * g->beams + k;
            position = 0;
            for (int64_t j = 0; j < g->seq; j++) {
                int64_t id = ids[b * g->seq + j];
                int pad = id == g->pad;
                int32_t m = user ? (int32_t)user[b * g->seq + j] : !pad;
                eids[row * g->seq + j] = (int32_t)id;
                epos[row * g->seq + j] = pad ? 0 : position;
                if (!pad) position++;
                g->mask[row * g->seq + j] = m;
                g->seqs[row * g->max_len + j] = (int32_t)id;
            }
            g->pos[row] = position;
        }
    }
    free(ids);
    free(user);
    if (!st) {
        int64_t dims[2] = {g->bb, g->seq};
        set_feed(g, 0, as_declared(g, const_i32(c, eids, 2, dims), 0));
        set_feed(g, 1, as_declared(g, const_i32(c, epos, 2, dims), 1));
        set_feed(g, 2, as_declared(g, const_i32(c, g->mask, 2, dims), 2));
    }
    free(eids);
    free(epos);
    g->cur_len = g->seq;
    for (int i = 3; !st && i < g->n_in; i++) {
        const tm_type *t = &g->decoder->inputs[i].type;
        if (t->rank != 5 || t->dims[2].value < 0 || t->dims[4].value < 0)
            return tm_lfail(g->L, TM_ERR_SHAPE, "decoder input %d ('%s') must be a past state "
                            "(2, batch, heads, past, head_size) with known heads and head size",
                            i, g->decoder->inputs[i].name);
        int64_t dims[5] = {2, g->bb, t->dims[2].value, 0, t->dims[4].value};
        tm_dtype dt = t->elem_dtype ? (tm_dtype)t->elem_dtype : TM_FLOAT;
        set_feed(g, i, tm_const_fill(c, dt, 5, dims, 0.0));
    }
    return st || !tm_ctx_ok(c) ? -1 : 0;
}

/* The last position's logits of each row, as float32 on the host, into g->scores. Under
 * trace this read is a graph break: the node then runs eagerly. */
static int gen_logits(gen *g, tm_val logits) {
    tm_ctx *c = g->c;
    int64_t rows = tm_vrank(c, logits) == 3 ? tm_vdims(c, logits)[0] : -1;
    if (rows != g->bb && rows != g->batch)
        return tm_lfail(g->L, TM_ERR_SHAPE, "decoder logits must be (%lld, length, vocab)",
                        (long long)g->bb);
    const int64_t *d = tm_vdims(c, logits);
    int64_t s = d[1];
    if (!g->scores) {
        g->stride = d[2];
        if (g->vocab <= 0 || g->vocab > g->stride) g->vocab = g->stride;
        g->scores = malloc((size_t)(g->bb * g->vocab) * sizeof *g->scores);
        if (!g->scores) return tm_lfail(g->L, TM_ERR_NO_MEMORY, "out of memory");
        if (host_mask(g, g->vocab_mask_index, g->vocab, &g->vocab_mask) ||
            host_mask(g, g->prefix_index, g->batch * g->vocab, &g->prefix_mask))
            return -1;
    }
    tm_val last = tm_cast(c, tm_slice_axis(c, logits, 1, s - 1, 1), TM_FLOAT);
    const tm_tensor *t = tm_host(c, last);
    if (!t) return -1;
    const float *p = t->data;
    /* Batch-sized logits (a T5 encoder's first step) serve every beam of their batch. */
    for (int64_t r = 0; r < g->bb; r++)
        memcpy(g->scores + r * g->vocab, p + (rows == g->bb ? r : r / g->beams) * g->stride,
               (size_t)g->vocab * sizeof(float));
    drop(g, last);
    return 0;
}

/* ONNX Runtime's logits processors, in its order: repetition penalty, no-repeat n-gram,
 * vocabulary mask, prefix vocabulary mask (first step only), minimum length. */
static void process_scores(gen *g, int step) {
    float lowest = -FLT_MAX;
    int64_t v = g->vocab;
    for (int64_t r = 0; r < g->bb; r++) {
        float *s = g->scores + r * v;
        const int32_t *seq = g->seqs + r * g->max_len;
        if (g->rep_penalty != 1.0f) {
            /* Each distinct token once. */
            for (int64_t j = 0; j < g->cur_len; j++) {
                int32_t id = seq[j];
                int seen = 0;
                for (int64_t k = 0; k < j && !seen; k++) seen = seq[k] == id;
                if (seen || id < 0 || id >= v) continue;
                s[id] = s[id] < 0 ? s[id] * g->rep_penalty : s[id] / g->rep_penalty;
            }
        }
        if (g->ngram > 0 && g->ngram <= g->cur_len) {
            int64_t prefix = g->ngram - 1;
            for (int64_t j = 0; j + g->ngram <= g->cur_len; j++) {
                int match = !memcmp(seq + j, seq + g->cur_len - prefix,
                                    (size_t)prefix * sizeof *seq);
                int32_t id = seq[j + prefix];
                if (match && id >= 0 && id < v) s[id] = lowest;
            }
        }
        for (int64_t k = 0; g->vocab_mask && k < v; k++)
            if (!g->vocab_mask[k]) s[k] = lowest;
        const int32_t *pm = g->prefix_mask ? g->prefix_mask + (r / g->beams) * v : NULL;
        for (int64_t k = 0; step == 1 && pm && k < v; k++)
            if (!pm[k]) s[k] = lowest;
        if (g->cur_len < g->min_len && g->eos >= 0 && g->eos < v) s[g->eos] = lowest;
    }
}

/* Next feeds: the chosen tokens, positions advanced (except after the first run), the
 * mask grown by one, and past states reordered by source beam when beams > 1. */
static int gen_update(gen *g, tm_oval *out, int step) {
    tm_ctx *c = g->c;
    int64_t len = g->cur_len;
    int32_t *mask = malloc((size_t)(g->bb * len) * sizeof *mask);
    if (!mask) return tm_lfail(g->L, TM_ERR_NO_MEMORY, "out of memory");
    for (int64_t r = 0; r < g->bb; r++) {
        memcpy(mask + r * len, g->mask + r * (len - 1), (size_t)(len - 1) * sizeof *mask);
        mask[r * len + len - 1] = 1;
        if (step > 1) g->pos[r]++;
    }
    memcpy(g->mask, mask, (size_t)(g->bb * len) * sizeof *mask);
    free(mask);
    int64_t d2[2] = {g->bb, 1}, dm[2] = {g->bb, len};
    tm_val old[3] = {g->in[0].v, g->in[1].v, g->in[2].v};
    set_feed(g, 0, as_declared(g, const_i32(c, g->tokens, 2, d2), 0));
    set_feed(g, 1, as_declared(g, const_i32(c, g->pos, 2, d2), 1));
    set_feed(g, 2, as_declared(g, const_i32(c, g->mask, 2, dm), 2));
    for (int k = 0; k < 3; k++) drop(g, old[k]);
    tm_val index = TM_NONE;
    if (g->beams > 1) index = const_i32(c, g->indices, 1, &g->bb);
    for (int i = 3; i < g->n_in && tm_ctx_ok(c); i++) {
        tm_val present = out[i - 2].v, past = g->in[i].v;
        if (out[i - 2].kind != TM_OV_TENSOR)
            return tm_lfail(g->L, TM_ERR_DTYPE, "decoder output %d must be a tensor", i - 2);
        set_feed(g, i, index != TM_NONE ? tm_gather(c, present, index, 1) : present);
        drop(g, past);
        if (index != TM_NONE) drop(g, present);
    }
    drop(g, index);
    return tm_ctx_ok(c) ? 0 : -1;
}

/* Runs the decoder (init_decoder on the first step) and reads the logits. */
static int gen_step(gen *g, int step, tm_oval *out) {
    const tm_graph *graph = step == 1 && g->init_decoder ? g->init_decoder : g->decoder;
    memset(out, 0, (size_t)graph->n_outputs * sizeof *out);
    if (graph->n_inputs != g->n_in)
        return tm_lfail(g->L, TM_ERR_SHAPE, "init_decoder and decoder take different inputs");
    if (tm_lower_subgraph(g->L, graph, g->n_in, g->in, out) != TM_OK) return -1;
    if (out[0].kind != TM_OV_TENSOR)
        return tm_lfail(g->L, TM_ERR_DTYPE, "decoder output 0 (logits) must be a tensor");
    int st = gen_logits(g, out[0].v);
    drop(g, out[0].v);
    return st;
}

/* ---- Sampling ----------------------------------------------------------------------- */

typedef struct sampler {
    float temperature, presence_penalty;
    tm_top_p filter;
    tm_minstd gen;
    int32_t *presence;         /* (batch, vocab) presence_mask, or NULL */
    tm_scored_index *order;    /* (vocab) scratch */
    float *probs;              /* (vocab) scratch */
    double *cdf;               /* (vocab) scratch */
} sampler;

static void sampler_free(sampler *s) {
    free(s->presence);
    free(s->order);
    free(s->probs);
    free(s->cdf);
}

static int sampler_read(gen *g, sampler *s) {
    tm_lower *L = g->L;
    s->temperature = tm_attr_f(L, "temperature", 1.0f);
    s->presence_penalty = tm_attr_f(L, "presence_penalty", 0.0f);
    s->filter.top_p = tm_attr_f(L, "top_p", 0.0f);
    s->filter.filter_value = tm_attr_f(L, "filter_value", -INFINITY);
    s->filter.min_keep = tm_attr_i(L, "min_tokens_to_keep", 0);
    s->filter.custom = tm_attr_i(L, "custom", 0) != 0;
    int64_t seed = 0;
    if (host_ints(g, 8, &seed, 1, 0)) return -1;
    if (seed < 0 || seed > INT32_MAX)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "input 8 (seed) is %lld; it must be in "
                        "[0, 2^31)", (long long)seed);
    s->gen = tm_minstd_seeded((uint32_t)seed);
    return 0;
}

/* Scratch sized once the vocabulary is known (at the first logits). */
static int sampler_alloc(gen *g, sampler *s) {
    if (s->order) return 0;
    size_t v = (size_t)g->vocab;
    s->order = malloc(v * sizeof *s->order);
    s->probs = malloc(v * sizeof *s->probs);
    s->cdf = malloc(v * sizeof *s->cdf);
    if (!s->order || !s->probs || !s->cdf)
        return tm_lfail(g->L, TM_ERR_NO_MEMORY, "out of memory");
    return host_mask(g, 7, g->batch * g->vocab, &s->presence);
}

/* Temperature, presence penalty, top-p, then one token per row into g->tokens. The
 * presence penalty lowers each token whose presence_mask is 1; ONNX Runtime's CPU kernel
 * (logits_processor.cc) never advances its pointer and subtracts the whole mask from the
 * first score instead, which this does not copy. */
static int sample_tokens(gen *g, sampler *s) {
    if (sampler_alloc(g, s)) return -1;
    int64_t v = g->vocab;
    for (int64_t r = 0; r < g->bb; r++) {
        float *row = g->scores + r * v;
        if (s->temperature > 0.0f && s->temperature != 1.0f)
            for (int64_t k = 0; k < v; k++) row[k] /= s->temperature;
        if (s->presence && s->presence_penalty != 0.0f)
            for (int64_t k = 0; k < v; k++)
                row[k] -= (float)s->presence[r * v + k] * s->presence_penalty;
        tm_top_p_filter(&s->filter, row, v, s->order, s->probs);
    }
    for (int64_t r = 0; r < g->bb; r++)
        g->tokens[r] = tm_draw_token(&s->gen, g->scores + r * v, v, s->cdf);
    return 0;
}

/* ---- Greedy search and sampling: one token per row and step -------------------------- */

static void argmax_tokens(gen *g) {
    for (int64_t r = 0; r < g->bb; r++) {
        const float *s = g->scores + r * g->vocab;
        int64_t best = 0;
        for (int64_t k = 1; k < g->vocab; k++)
            if (s[k] > s[best]) best = k;
        g->tokens[r] = (int32_t)best;
    }
}

/* GreedySearch (smp NULL) or Sampling: decoder runs until max_length or every row has met
 * EOS; rows that met it continue with pad_token_id. Sampling's output 1 is the last
 * step's filtered logits (ONNX Runtime fills it only in debug builds). */
static tm_status run_greedy(tm_lower *L, sampler *smp) {
    gen g;
    memset(&g, 0, sizeof g);
    g.L = L;
    g.c = tm_lctx(L);
    g.first = g.c->n_vals;
    tm_oval *out = NULL;
    int st = gen_read(&g, 4, 5, 0) || (smp && sampler_read(&g, smp)) || gen_alloc(&g) ||
             gen_first_feeds(&g, 6);
    uint8_t *eos_meet = st ? NULL : calloc((size_t)g.bb, 1);
    if (!st && (!eos_meet || !(out = calloc((size_t)g.decoder->n_outputs + 1, sizeof *out))))
        st = tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    for (int step = 1; !st && g.cur_len < g.max_len; step++) {
        if (gen_step(&g, step, out)) break;
        process_scores(&g, step);
        if (smp) {
            if (sample_tokens(&g, smp)) break;
        } else {
            argmax_tokens(&g);
        }
        int all = 1;
        for (int64_t r = 0; r < g.bb; r++) {
            if (eos_meet[r] || g.tokens[r] == g.eos) {
                eos_meet[r] = 1;
                g.tokens[r] = (int32_t)g.pad;
            }
            g.seqs[r * g.max_len + g.cur_len] = g.tokens[r];
            all &= eos_meet[r];
        }
        g.cur_len++;
        if (all || g.cur_len >= g.max_len) {
            for (int i = 1; i < g.decoder->n_outputs; i++) drop(&g, out[i].v);
            break;
        }
        st = gen_update(&g, out, step);
    }
    tm_status status = g.c->status;
    if (tm_ctx_ok(g.c)) {
        /* Positions never generated (every sequence ended early) stay 0, as in ONNX
         * Runtime's zero-filled buffer; finished rows before that hold pad_token_id. */
        int64_t dims[2] = {g.batch, g.max_len};
        tm_lout(L, 0, const_i32(g.c, g.seqs, 2, dims));
        if (smp && tm_lwants(L, 1) && g.scores) {
            int64_t sd[2] = {g.batch, g.vocab};
            tm_tensor *t = tm_tensor_new(TM_FLOAT, 2, sd);
            if (t) memcpy(tm_tensor_data(t), g.scores, tm_tensor_nbytes(t));
            tm_lout(L, 1, t ? tm_val_tensor(g.c, t, 0) : TM_NONE);
            if (!t) tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
        }
        status = g.c->status;
    }
    free(eos_meet);
    free(out);
    gen_free(&g);
    return status;
}

static tm_status lower_greedy_search(tm_lower *L) { return run_greedy(L, NULL); }

static tm_status lower_sampling(tm_lower *L) {
    sampler s;
    memset(&s, 0, sizeof s);
    tm_status st = run_greedy(L, &s);
    sampler_free(&s);
    return st;
}

/* ---- Beam search ---------------------------------------------------------------------- */

/* log_softmax of each row, in float32 as ONNX Runtime's SoftmaxCPU computes it. */
static void log_softmax_rows(float *s, int64_t rows, int64_t n) {
    for (int64_t r = 0; r < rows; r++, s += n) {
        float max = s[0];
        for (int64_t k = 1; k < n; k++)
            if (s[k] > max) max = s[k];
        float sum = 0.0f;
        for (int64_t k = 0; k < n; k++) sum += expf(s[k] - max);
        float shift = max + logf(sum);
        for (int64_t k = 0; k < n; k++) s[k] -= shift;
    }
}

/* Adds a finished hypothesis to batch b's best-`beams` list (score normalised by
 * length^length_penalty); the worst is evicted when the list overflows. */
static int hyp_add(gen *g, int64_t b, const int32_t *tokens, int64_t len, float sum_logprobs) {
    float score = sum_logprobs / powf((float)len, g->length_penalty);
    hypothesis *h = g->hyps + b * g->beams;
    int64_t n = g->n_hyps[b];
    if (n >= g->beams && !(score > g->worst[b])) return 0;
    int64_t slot = n;
    if (n >= g->beams) {
        slot = 0;
        for (int64_t i = 1; i < n; i++)
            if (h[i].score < h[slot].score) slot = i;
    }
    int32_t *copy = malloc((size_t)(len > 0 ? len : 1) * sizeof *copy);
    if (!copy) return tm_lfail(g->L, TM_ERR_NO_MEMORY, "out of memory");
    memcpy(copy, tokens, (size_t)len * sizeof *copy);
    if (slot < n) free(h[slot].tokens);
    h[slot] = (hypothesis){copy, len, score};
    if (n < g->beams) g->n_hyps[b] = ++n;
    float worst = h[0].score;
    for (int64_t i = 1; i < n; i++)
        if (h[i].score < worst) worst = h[i].score;
    g->worst[b] = worst;
    return 0;
}

static int hyp_done(gen *g, int64_t b, float best_sum_logprobs, int64_t len) {
    if (g->n_hyps[b] < g->beams) return 0;
    if (g->early_stopping) return 1;
    return g->worst[b] >= best_sum_logprobs / powf((float)len, g->length_penalty);
}

/* One beam step for every batch: top 2*beams of (beams * vocab) scores, finished
 * hypotheses for EOS among the first `beams`, the rest become the next beams. */
static int beam_process(gen *g) {
    int64_t k2 = 2 * g->beams, v = g->vocab, span = g->beams * v;
    float *top = malloc((size_t)k2 * sizeof *top);
    int64_t *idx = malloc((size_t)k2 * sizeof *idx);
    if (!top || !idx) {
        free(top);
        free(idx);
        return tm_lfail(g->L, TM_ERR_NO_MEMORY, "out of memory");
    }
    int st = 0;
    for (int64_t b = 0; b < g->batch && !st; b++) {
        int64_t base = b * g->beams;
        if (g->done[b]) {
            for (int64_t j = 0; j < g->beams; j++) {
                g->beam_scores[base + j] = 0.0f;
                g->tokens[base + j] = (int32_t)g->pad;
                g->indices[base + j] = 0;
            }
            continue;
        }
        /* Sorted top-k, ties to the lower index. */
        const float *s = g->scores + base * v;
        int64_t n = 0;
        for (int64_t i = 0; i < span; i++) {
            if (n == k2 && !(s[i] > top[n - 1])) continue;
            int64_t p = n < k2 ? n++ : k2 - 1;
            while (p > 0 && s[i] > top[p - 1]) {
                top[p] = top[p - 1];
                idx[p] = idx[p - 1];
                p--;
            }
            top[p] = s[i];
            idx[p] = i;
        }
        int64_t beam = 0;
        for (int64_t j = 0; j < n && beam < g->beams; j++) {
            int32_t token = (int32_t)(idx[j] % v);
            int64_t src = base + idx[j] / v;
            if (g->eos >= 0 && token == g->eos) {
                if (j >= g->beams) continue;
                st = hyp_add(g, b, g->seqs + src * g->max_len, g->cur_len, top[j]);
                if (st) break;
                continue;
            }
            g->beam_scores[base + beam] = top[j];
            g->tokens[base + beam] = token;
            g->indices[base + beam] = (int32_t)src;
            beam++;
        }
        if (!st && beam < g->beams)
            st = tm_lfail(g->L, TM_ERR_RUNTIME, "beam search found %lld of %lld next beams",
                          (long long)beam, (long long)g->beams);
        if (!st && hyp_done(g, b, top[0], g->cur_len)) g->done[b] = 1;
    }
    free(top);
    free(idx);
    return st;
}

/* sequences = sequences[indices] ++ tokens. */
static void beam_append(gen *g) {
    for (int64_t r = 0; r < g->bb; r++) {
        memcpy(g->seqs_next + r * g->max_len, g->seqs + (int64_t)g->indices[r] * g->max_len,
               (size_t)g->cur_len * sizeof *g->seqs);
        g->seqs_next[r * g->max_len + g->cur_len] = g->tokens[r];
    }
    int32_t *t = g->seqs;
    g->seqs = g->seqs_next;
    g->seqs_next = t;
    g->cur_len++;
}

static int beam_alloc(gen *g) {
    size_t n = (size_t)(g->batch * g->beams);
    g->hyps = calloc(n, sizeof *g->hyps);
    g->n_hyps = calloc((size_t)g->batch, sizeof *g->n_hyps);
    g->worst = calloc((size_t)g->batch, sizeof *g->worst);
    g->done = calloc((size_t)g->batch, 1);
    if (!g->hyps || !g->n_hyps || !g->worst || !g->done)
        return tm_lfail(g->L, TM_ERR_NO_MEMORY, "out of memory");
    for (int64_t b = 0; b < g->batch; b++) {
        g->worst[b] = 1e9f;
        for (int64_t j = 1; j < g->beams; j++) g->beam_scores[b * g->beams + j] = -1e9f;
    }
    return 0;
}

static int cmp_hyp_desc(const void *a, const void *b) {
    float x = ((const hypothesis *)a)->score, y = ((const hypothesis *)b)->score;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Open beams join the hypotheses; the best num_return_sequences of each batch are
 * written, padded with pad_token_id. */
static int beam_finalize(gen *g) {
    tm_ctx *c = g->c;
    for (int64_t b = 0; b < g->batch; b++) {
        if (g->done[b]) continue;
        for (int64_t j = 0; j < g->beams; j++) {
            int64_t r = b * g->beams + j;
            if (hyp_add(g, b, g->seqs + r * g->max_len, g->cur_len, g->beam_scores[r])) return -1;
        }
    }
    int64_t rows = g->batch * g->num_return;
    int32_t *out = malloc((size_t)(rows * g->max_len) * sizeof *out);
    float *scores = malloc((size_t)rows * sizeof *scores);
    if (!out || !scores) {
        free(out);
        free(scores);
        return tm_lfail(g->L, TM_ERR_NO_MEMORY, "out of memory");
    }
    for (int64_t i = 0; i < rows * g->max_len; i++) out[i] = (int32_t)g->pad;
    for (int64_t b = 0; b < g->batch; b++) {
        hypothesis *h = g->hyps + b * g->beams;
        qsort(h, (size_t)g->n_hyps[b], sizeof *h, cmp_hyp_desc);
        for (int64_t k = 0; k < g->num_return && k < g->n_hyps[b]; k++) {
            int64_t row = b * g->num_return + k;
            memcpy(out + row * g->max_len, h[k].tokens, (size_t)h[k].len * sizeof *out);
            scores[row] = h[k].score;
        }
    }
    int64_t dims[3] = {g->batch, g->num_return, g->max_len};
    tm_lout(g->L, 0, const_i32(c, out, 3, dims));
    if (tm_lwants(g->L, 1)) {
        tm_tensor *t = tm_tensor_new(TM_FLOAT, 2, dims);
        if (t) memcpy(tm_tensor_data(t), scores, (size_t)rows * sizeof *scores);
        tm_lout(g->L, 1, t ? tm_val_tensor(c, t, 0) : TM_NONE);
    }
    if (tm_lwants(g->L, 2) && g->step_scores) {
        int64_t sd[4] = {g->max_len - g->seq, g->batch, g->beams, g->vocab};
        tm_tensor *t = tm_tensor_new(TM_FLOAT, 4, sd);
        if (t) memcpy(tm_tensor_data(t), g->step_scores, tm_tensor_nbytes(t));
        tm_lout(g->L, 2, t ? tm_val_tensor(c, t, 0) : TM_NONE);
    }
    free(out);
    free(scores);
    return tm_ctx_ok(c) ? 0 : -1;
}

/* One beam step on g->scores (last-position logits): log-softmax, processors, beam
 * scores added, the optional scores output, the scorer and the sequences. */
static int beam_step(gen *g, int step) {
    log_softmax_rows(g->scores, g->bb, g->vocab);
    process_scores(g, step);
    for (int64_t r = 0; r < g->bb; r++)
        for (int64_t k = 0; k < g->vocab; k++) g->scores[r * g->vocab + k] += g->beam_scores[r];
    if (tm_lwants(g->L, 2)) {
        size_t per = (size_t)(g->bb * g->vocab);
        if (!g->step_scores &&
            !(g->step_scores = calloc(per * (size_t)(g->max_len - g->seq), sizeof(float))))
            return tm_lfail(g->L, TM_ERR_NO_MEMORY, "out of memory");
        memcpy(g->step_scores + per * (size_t)(step - 1), g->scores, per * sizeof(float));
    }
    if (beam_process(g)) return -1;
    beam_append(g);
    return 0;
}

static int all_done(const gen *g) {
    for (int64_t b = 0; b < g->batch; b++)
        if (!g->done[b]) return 0;
    return 1;
}

static tm_status lower_gpt_beam_search(gen *g) {
    tm_lower *L = g->L;
    tm_oval *out = NULL;
    int st = gen_first_feeds(g, 9);
    if (!st && !(out = calloc((size_t)g->decoder->n_outputs + 1, sizeof *out)))
        st = tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    for (int step = 1; !st && g->cur_len < g->max_len; step++) {
        if (gen_step(g, step, out) || beam_step(g, step)) break;
        if (all_done(g) || g->cur_len >= g->max_len) {
            for (int i = 1; i < g->decoder->n_outputs; i++) drop(g, out[i].v);
            break;
        }
        st = gen_update(g, out, step);
    }
    free(out);
    return g->c->status;
}

/* Rows of x (batch-major on axis 0) repeated once per beam. */
static tm_val expand_beams(gen *g, tm_val x) {
    if (g->beams == 1 || x == TM_NONE) return x;
    int32_t *rows = malloc((size_t)g->bb * sizeof *rows);
    if (!rows) {
        tm_lfail(g->L, TM_ERR_NO_MEMORY, "out of memory");
        return TM_NONE;
    }
    for (int64_t r = 0; r < g->bb; r++) rows[r] = (int32_t)(r / g->beams);
    tm_val idx = const_i32(g->c, rows, 1, &g->bb);
    free(rows);
    tm_val y = tm_gather(g->c, x, idx, 0);
    drop(g, idx);
    return y;
}

/* T5 encoder run: encoder_input_ids, encoder_attention_mask (0 only on leading pad
 * tokens, or the caller's mask), decoder_input_ids filled with decoder_start_token_id. */
static int t5_encode(gen *g, tm_oval *enc_in, tm_oval *enc_out) {
    tm_ctx *c = g->c;
    int64_t n = g->batch * g->enc_seq, start = tm_attr_i(g->L, "decoder_start_token_id", -1);
    if (start < 0)
        return tm_lfail(g->L, TM_ERR_INVALID_ARGUMENT, "attribute decoder_start_token_id is "
                        "required for encoder-decoder models");
    if (tm_lhas(g->L, 10))
        return tm_lfail(g->L, TM_ERR_UNSUPPORTED, "input 10 (decoder_input_ids) is not "
                        "supported");
    int64_t *ids = malloc((size_t)n * sizeof *ids);
    int32_t *mask = malloc((size_t)n * sizeof *mask), *first = malloc((size_t)g->batch * 4);
    if (!ids || !mask || !first) {
        free(ids);
        free(mask);
        free(first);
        return tm_lfail(g->L, TM_ERR_NO_MEMORY, "out of memory");
    }
    int st = tm_host_i64(c, tm_lin(g->L, 0), ids, n) == n ? 0 : -1;
    for (int64_t b = 0; !st && b < g->batch; b++) {
        int64_t seen = 0;
        for (int64_t j = 0; j < g->enc_seq; j++) {
            int lead_pad = ids[b * g->enc_seq + j] == g->pad && seen == 0;
            mask[b * g->enc_seq + j] = !lead_pad;
            seen += !lead_pad;
        }
        first[b] = (int32_t)start;
    }
    int64_t d[2] = {g->batch, g->enc_seq}, d1[2] = {g->batch, 1};
    tm_val m = TM_NONE;
    if (!st) m = tm_lhas(g->L, 9) ? tm_cast(c, tm_lin(g->L, 9), TM_INT32) : const_i32(c, mask, 2, d);
    tm_val feeds[3] = {tm_lin(g->L, 0), m, st ? TM_NONE : const_i32(c, first, 2, d1)};
    free(ids);
    free(mask);
    free(first);
    if (st || !tm_ctx_ok(c)) return -1;
    for (int i = 0; i < g->encoder->n_inputs; i++) enc_in[i] = (tm_oval){.kind = TM_OV_TENSOR, .v = feeds[i]};
    if (g->encoder->n_inputs < 3) drop(g, feeds[2]);
    for (int64_t r = 0; r < g->bb; r++) g->seqs[r * g->max_len] = (int32_t)start;
    g->cur_len = 1;
    if (tm_lower_subgraph(g->L, g->encoder, g->encoder->n_inputs, enc_in, enc_out) != TM_OK) return -1;
    for (int i = 0; i < g->encoder->n_outputs; i++)
        if (enc_out[i].kind != TM_OV_TENSOR)
            return tm_lfail(g->L, TM_ERR_DTYPE, "encoder output %d must be a tensor", i);
    return gen_logits(g, enc_out[0].v);
}

/* The decoder's input_ids: the chosen tokens, or the whole sequences so far. */
static tm_val t5_input_ids(gen *g) {
    if (!g->use_sequence) {
        int64_t d[2] = {g->bb, 1};
        return const_i32(g->c, g->tokens, 2, d);
    }
    int32_t *buf = malloc((size_t)(g->bb * g->cur_len) * sizeof *buf);
    if (!buf) {
        tm_lfail(g->L, TM_ERR_NO_MEMORY, "out of memory");
        return TM_NONE;
    }
    for (int64_t r = 0; r < g->bb; r++)
        memcpy(buf + r * g->cur_len, g->seqs + r * g->max_len, (size_t)g->cur_len * sizeof *buf);
    int64_t d[2] = {g->bb, g->cur_len};
    tm_val v = const_i32(g->c, buf, 2, d);
    free(buf);
    return v;
}

/* First decoder feeds, by name: encoder inputs and hidden states expanded over beams;
 * pasts from the encoder's presents (self, then cross), expanded. */
static int t5_decoder_feeds(gen *g, const tm_oval *enc_in, const tm_oval *enc_out) {
    const tm_graph *d = g->decoder;
    set_feed(g, 0, t5_input_ids(g));
    for (int i = 1; i < d->n_inputs && tm_ctx_ok(g->c); i++) {
        const char *name = d->inputs[i].name;
        tm_val src;
        if (i >= g->first_past) src = enc_out[2 + i - g->first_past].v;
        else if (!strcmp(name, "encoder_input_ids")) src = enc_in[0].v;
        else if (!strcmp(name, "encoder_attention_mask")) src = enc_in[1].v;
        else if (!strcmp(name, "encoder_hidden_states")) src = enc_out[1].v;
        else return tm_lfail(g->L, TM_ERR_SHAPE, "decoder input %d ('%s') is not a T5 input", i, name);
        set_feed(g, i, expand_beams(g, src));
    }
    return tm_ctx_ok(g->c) ? 0 : -1;
}

/* Next decoder feeds: new input_ids, self-attention pasts reordered by source beam. */
static int t5_update(gen *g, tm_oval *out) {
    tm_ctx *c = g->c;
    drop(g, g->in[0].v);
    set_feed(g, 0, t5_input_ids(g));
    tm_val index = g->beams > 1 ? const_i32(c, g->indices, 1, &g->bb) : TM_NONE;
    int n_self = g->decoder->n_outputs - 1;
    for (int k = 0; k < n_self && tm_ctx_ok(c); k++) {
        int i = g->first_past + k;
        tm_val present = out[1 + k].v, past = g->in[i].v;
        if (out[1 + k].kind != TM_OV_TENSOR)
            return tm_lfail(g->L, TM_ERR_DTYPE, "decoder output %d must be a tensor", 1 + k);
        set_feed(g, i, index != TM_NONE ? tm_gather(c, present, index, 0) : present);
        drop(g, past);
        if (index != TM_NONE) drop(g, present);
    }
    drop(g, index);
    return tm_ctx_ok(c) ? 0 : -1;
}

static tm_status lower_t5_beam_search(gen *g) {
    tm_lower *L = g->L;
    int ne = g->encoder->n_outputs, nd = g->decoder->n_outputs;
    tm_oval *enc_in = calloc(3, sizeof *enc_in), *enc_out = calloc((size_t)ne, sizeof *enc_out);
    tm_oval *out = calloc((size_t)nd + 1, sizeof *out);
    int st = !enc_in || !enc_out || !out ? tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory") : 0;
    if (!st) st = t5_encode(g, enc_in, enc_out);
    /* The encoder's logits give the first token, when two or more remain. */
    if (!st && g->cur_len + 1 < g->max_len) st = beam_step(g, 1) || t5_decoder_feeds(g, enc_in, enc_out);
    for (int i = 0; enc_out && i < ne; i++) drop_unfed(g, enc_out[i].v);
    for (int step = 2; !st && g->cur_len < g->max_len; step++) {
        if (gen_step(g, step, out) || beam_step(g, step)) break;
        if (all_done(g) || g->cur_len >= g->max_len) {
            for (int i = 1; i < nd; i++) drop(g, out[i].v);
            break;
        }
        st = t5_update(g, out);
    }
    free(enc_in);
    free(enc_out);
    free(out);
    return g->c->status;
}

static tm_status lower_beam_search(tm_lower *L) {
    gen g;
    memset(&g, 0, sizeof g);
    g.L = L;
    g.c = tm_lctx(L);
    g.first = g.c->n_vals;
    if (!gen_read(&g, 7, 8, 1) && !gen_alloc(&g) && !beam_alloc(&g)) {
        if (g.t5) lower_t5_beam_search(&g);
        else lower_gpt_beam_search(&g);
        if (tm_ctx_ok(g.c)) beam_finalize(&g);
    }
    tm_status status = g.c->status;
    gen_free(&g);
    return status;
}

TM_REGISTER_OP("com.microsoft", "GreedySearch", 1, 1, lower_greedy_search);
TM_REGISTER_OP("com.microsoft", "Sampling", 1, 1, lower_sampling);
TM_REGISTER_OP("com.microsoft", "BeamSearch", 1, 1, lower_beam_search);
