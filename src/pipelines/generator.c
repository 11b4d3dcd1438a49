/* tm_generator: text generation one step at a time over tm_decoder, as transformers'
 * generate() does it: the generation config (defaults, config.json and
 * generation_config.json), the logits processors in transformers' order, greedy choice,
 * seeded sampling, beam search (one decoder per beam, caches copied when beams fork),
 * stopping criteria, and streaming of decoded text. Not a pipeline: no tokenizing of the
 * prompt, no chat template, no encoder run (the caller gives the encoder's outputs). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "generation.h"
#include "../train/dataset.h"
#include "../core/status.h"
#include "../core/dtype.h"
#include "../hub/json.h"

/* ---- Configuration ------------------------------------------------------------------- */

/* The lists a config owns (from_json) or a generator copies: one block each. */
typedef struct gen_lists {
    int32_t *eos;
    int32_t *bad_ids, *bad_lengths;
    char **stops;
    int n_stops;
    int32_t *suppress, *begin_suppress;
} gen_lists;

static void lists_free(gen_lists *l) {
    if (!l) return;
    free(l->eos);
    free(l->bad_ids);
    free(l->bad_lengths);
    free(l->suppress);
    free(l->begin_suppress);
    for (int k = 0; l->stops && k < l->n_stops; k++) free(l->stops[k]);
    free(l->stops);
    free(l);
}

/* dst's list fields pointed at a deep copy of src's lists, owned by *out. */
static int lists_copy(tm_generation_config *dst, const tm_generation_config *src, gen_lists **out) {
    gen_lists *l = calloc(1, sizeof *l);
    if (!l) return -1;
    size_t n_bad_ids = 0;
    for (int b = 0; b < src->n_bad_words; b++) n_bad_ids += (size_t)(src->bad_words_lengths[b] > 0 ? src->bad_words_lengths[b] : 0);
    l->eos = malloc(((size_t)src->n_eos_token_ids + 1) * sizeof *l->eos);
    l->bad_ids = malloc((n_bad_ids + 1) * sizeof *l->bad_ids);
    l->bad_lengths = malloc(((size_t)src->n_bad_words + 1) * sizeof *l->bad_lengths);
    l->stops = calloc((size_t)src->n_stop_strings + 1, sizeof *l->stops);
    l->suppress = malloc(((size_t)src->n_suppress_tokens + 1) * sizeof *l->suppress);
    l->begin_suppress = malloc(((size_t)src->n_begin_suppress_tokens + 1) * sizeof *l->begin_suppress);
    if (!l->eos || !l->bad_ids || !l->bad_lengths || !l->stops || !l->suppress || !l->begin_suppress) {
        lists_free(l);
        return -1;
    }
    if (src->n_eos_token_ids) memcpy(l->eos, src->eos_token_ids, (size_t)src->n_eos_token_ids * sizeof *l->eos);
    if (n_bad_ids) memcpy(l->bad_ids, src->bad_words_ids, n_bad_ids * sizeof *l->bad_ids);
    if (src->n_suppress_tokens)
        memcpy(l->suppress, src->suppress_tokens, (size_t)src->n_suppress_tokens * sizeof *l->suppress);
    if (src->n_begin_suppress_tokens)
        memcpy(l->begin_suppress, src->begin_suppress_tokens,
               (size_t)src->n_begin_suppress_tokens * sizeof *l->begin_suppress);
    for (int b = 0; b < src->n_bad_words; b++)
        l->bad_lengths[b] = src->bad_words_lengths[b] > 0 ? src->bad_words_lengths[b] : 0;
    for (int k = 0; k < src->n_stop_strings; k++) {
        l->stops[k] = strdup(src->stop_strings[k] ? src->stop_strings[k] : "");
        l->n_stops = k + 1;
        if (!l->stops[k]) {
            lists_free(l);
            return -1;
        }
    }
    *dst = *src;
    dst->eos_token_ids = l->eos;
    dst->bad_words_ids = l->bad_ids;
    dst->bad_words_lengths = l->bad_lengths;
    dst->stop_strings = (const char *const *)l->stops;
    dst->suppress_tokens = l->suppress;
    dst->begin_suppress_tokens = l->begin_suppress;
    *out = l;
    return 0;
}

void tm_generation_config_default(tm_generation_config *c) {
    memset(c, 0, sizeof *c);
    c->size = sizeof *c;
    c->max_length = 20;
    c->max_new_tokens = -1;
    c->temperature = 1.0;
    c->top_k = 50;
    c->top_p = 1.0;
    c->typical_p = 1.0;
    c->repetition_penalty = 1.0;
    c->forced_bos_token_id = -1;
    c->forced_eos_token_id = -1;
    c->pad_token_id = -1;
    c->bos_token_id = -1;
    c->decoder_start_token_id = -1;
    c->num_beams = 1;
    c->length_penalty = 1.0;
    c->early_stopping = TM_EARLY_STOPPING_FALSE;
    c->num_return_sequences = 1;
}

void tm_generation_config_clear(tm_generation_config *c) {
    if (!c) return;
    lists_free(c->owned_);
    c->owned_ = NULL;
    c->eos_token_ids = NULL;
    c->n_eos_token_ids = 0;
    c->bad_words_ids = c->bad_words_lengths = NULL;
    c->n_bad_words = 0;
    c->stop_strings = NULL;
    c->n_stop_strings = 0;
    c->suppress_tokens = c->begin_suppress_tokens = NULL;
    c->n_suppress_tokens = c->n_begin_suppress_tokens = 0;
}

static int json_int(const tm_json *v, int64_t *out) {
    if (!v || v->type != TM_JSON_NUMBER || v->number != floor(v->number) || fabs(v->number) > 9e15)
        return 0;
    *out = (int64_t)v->number;
    return 1;
}

static int json_id(const tm_json *v, int32_t *out) {
    int64_t x;
    if (!json_int(v, &x) || x < -1 || x > INT32_MAX) return 0;
    *out = (int32_t)x;
    return 1;
}

/* A JSON list of token ids (each 0 or more) as a malloc'ed array: 1, 0 when v is not such
 * a list, -1 when out of memory. */
static int id_list(const tm_json *v, int32_t **out, int *n) {
    if (v->type != TM_JSON_ARRAY) return 0;
    int32_t *ids = malloc(((size_t)v->n + 1) * sizeof *ids);
    if (!ids) return -1;
    for (int j = 0; j < v->n; j++)
        if (!json_id(&v->items[j], &ids[j]) || ids[j] < 0) {
            free(ids);
            return 0;
        }
    *out = ids;
    *n = v->n;
    return 1;
}

/* One document's keys into c (lists into scratch, which owns them until the end). */
static tm_status apply_json(tm_generation_config *c, gen_lists *scratch, const char *text,
                            const char *file, tm_error *err) {
    tm_json *root = tm_json_parse(text, strlen(text));
    if (!root || root->type != TM_JSON_OBJECT) {
        tm_json_free(root);
        return tm__fail(err, TM_ERR_PARSE, "%s is not a JSON object", file);
    }
    tm_status st = TM_OK;
    const char *bad = NULL;
    for (int k = 0; k < root->n && !bad; k++) {
        const char *key = root->keys[k];
        const tm_json *v = &root->items[k];
        int64_t i64;
        if (v->type == TM_JSON_NULL) continue;   /* unset: keep what is there */
#define INT_KEY(name, field, lo)                                                   \
        if (!strcmp(key, name)) {                                                  \
            if (!json_int(v, &i64) || i64 < (lo)) bad = name;                      \
            else c->field = i64;                                                   \
            continue;                                                              \
        }
#define NUM_KEY(name, field)                                                       \
        if (!strcmp(key, name)) {                                                  \
            if (v->type != TM_JSON_NUMBER) bad = name;                             \
            else c->field = v->number;                                             \
            continue;                                                              \
        }
#define ID_KEY(name, field)                                                        \
        if (!strcmp(key, name)) {                                                  \
            if (!json_id(v, &c->field)) bad = name;                                \
            continue;                                                              \
        }
        INT_KEY("max_length", max_length, 0)
        INT_KEY("max_new_tokens", max_new_tokens, 0)
        INT_KEY("min_length", min_length, 0)
        INT_KEY("min_new_tokens", min_new_tokens, 0)
        INT_KEY("top_k", top_k, 0)
        INT_KEY("no_repeat_ngram_size", no_repeat_ngram_size, 0)
        NUM_KEY("temperature", temperature)
        NUM_KEY("top_p", top_p)
        NUM_KEY("min_p", min_p)
        NUM_KEY("typical_p", typical_p)
        NUM_KEY("repetition_penalty", repetition_penalty)
        NUM_KEY("length_penalty", length_penalty)
        ID_KEY("forced_bos_token_id", forced_bos_token_id)
        ID_KEY("pad_token_id", pad_token_id)
        ID_KEY("bos_token_id", bos_token_id)
        ID_KEY("decoder_start_token_id", decoder_start_token_id)
        if (!strcmp(key, "seed")) {
            if (!json_int(v, &i64) || i64 < 0) bad = key;
            else c->seed = (uint64_t)i64;
        } else if (!strcmp(key, "num_beams") || !strcmp(key, "num_return_sequences")) {
            if (!json_int(v, &i64) || i64 < 1 || i64 > 1024) bad = key;
            else if (key[4] == 'b') c->num_beams = (int)i64;
            else c->num_return_sequences = (int)i64;
        } else if (!strcmp(key, "do_sample")) {
            if (v->type != TM_JSON_BOOL) bad = key;
            else c->do_sample = v->number != 0;
        } else if (!strcmp(key, "early_stopping")) {
            if (v->type == TM_JSON_BOOL) c->early_stopping = v->number ? TM_EARLY_STOPPING_TRUE : TM_EARLY_STOPPING_FALSE;
            else if (v->type == TM_JSON_STRING && !strcmp(v->string, "never")) c->early_stopping = TM_EARLY_STOPPING_NEVER;
            else bad = key;
        } else if (!strcmp(key, "eos_token_id") || !strcmp(key, "forced_eos_token_id")) {
            /* a number or a list of numbers; forced_eos_token_id keeps the first */
            int n = v->type == TM_JSON_ARRAY ? v->n : 1;
            int32_t *ids = malloc(((size_t)n + 1) * sizeof *ids);
            if (!ids) {
                st = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
                break;
            }
            for (int j = 0; j < n && !bad; j++)
                if (!json_id(v->type == TM_JSON_ARRAY ? &v->items[j] : v, &ids[j]) || ids[j] < 0) bad = key;
            if (bad || key[0] == 'f') {
                if (!bad) c->forced_eos_token_id = n ? ids[0] : -1;
                free(ids);
                continue;
            }
            free(scratch->eos);
            scratch->eos = ids;
            c->eos_token_ids = ids;
            c->n_eos_token_ids = n;
        } else if (!strcmp(key, "bad_words_ids")) {
            if (v->type != TM_JSON_ARRAY) {
                bad = key;
                continue;
            }
            size_t total = 0;
            for (int j = 0; j < v->n && !bad; j++) {
                if (v->items[j].type != TM_JSON_ARRAY) bad = key;
                else total += (size_t)v->items[j].n;
            }
            if (bad) continue;
            int32_t *ids = malloc((total + 1) * sizeof *ids), *lens = malloc(((size_t)v->n + 1) * sizeof *lens);
            if (!ids || !lens) {
                free(ids);
                free(lens);
                st = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
                break;
            }
            size_t at = 0;
            for (int j = 0; j < v->n && !bad; j++) {
                lens[j] = v->items[j].n;
                for (int q = 0; q < v->items[j].n && !bad; q++)
                    if (!json_id(&v->items[j].items[q], &ids[at++]) || ids[at - 1] < 0) bad = key;
            }
            if (bad) {
                free(ids);
                free(lens);
                continue;
            }
            free(scratch->bad_ids);
            free(scratch->bad_lengths);
            scratch->bad_ids = ids;
            scratch->bad_lengths = lens;
            c->bad_words_ids = ids;
            c->bad_words_lengths = lens;
            c->n_bad_words = v->n;
        } else if (!strcmp(key, "suppress_tokens") || !strcmp(key, "begin_suppress_tokens")) {
            int32_t *ids = NULL;
            int n = 0, got = id_list(v, &ids, &n);
            if (got < 0) {
                st = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
                break;
            }
            if (!got) {
                bad = key;
            } else if (key[0] == 's') {
                free(scratch->suppress);
                scratch->suppress = ids;
                c->suppress_tokens = ids;
                c->n_suppress_tokens = n;
            } else {
                free(scratch->begin_suppress);
                scratch->begin_suppress = ids;
                c->begin_suppress_tokens = ids;
                c->n_begin_suppress_tokens = n;
            }
        } else if (!strcmp(key, "stop_strings")) {
            int n = v->type == TM_JSON_ARRAY ? v->n : 1;
            for (int j = 0; j < n && !bad; j++)
                if ((v->type == TM_JSON_ARRAY ? v->items[j] : *v).type != TM_JSON_STRING) bad = key;
            if (bad) continue;
            char **s = calloc((size_t)n + 1, sizeof *s);
            for (int j = 0; s && j < n; j++)
                if (!(s[j] = strdup((v->type == TM_JSON_ARRAY ? v->items[j] : *v).string))) {
                    for (int q = 0; q < j; q++) free(s[q]);
                    free(s);
                    s = NULL;
                }
            if (!s) {
                st = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
                break;
            }
            for (int q = 0; q < scratch->n_stops; q++) free(scratch->stops[q]);
            free(scratch->stops);
            scratch->stops = s;
            scratch->n_stops = n;
            c->stop_strings = (const char *const *)s;
            c->n_stop_strings = n;
        }
#undef INT_KEY
#undef NUM_KEY
#undef ID_KEY
    }
    if (bad && st == TM_OK)
        st = tm__fail(err, TM_ERR_PARSE, "%s: key '%s' has a value of the wrong type or range", file, bad);
    tm_json_free(root);
    return st;
}

tm_status tm_generation_config_from_json(tm_generation_config *cfg, const char *config_json,
                                         const char *generation_json, tm_error *err) {
    if (!cfg) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_generation_config_from_json: NULL config");
    tm_generation_config c = *cfg;
    gen_lists *scratch = calloc(1, sizeof *scratch);
    if (!scratch) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    tm_status st = TM_OK;
    if (config_json) st = apply_json(&c, scratch, config_json, "config.json", err);
    if (st == TM_OK && generation_json)
        st = apply_json(&c, scratch, generation_json, "generation_config.json", err);
    gen_lists *owned = NULL;
    if (st == TM_OK && lists_copy(&c, &c, &owned))
        st = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    lists_free(scratch);
    if (st != TM_OK) return st;
    lists_free(cfg->owned_);
    c.owned_ = owned;
    *cfg = c;
    return TM_OK;
}

/* ---- The generator ------------------------------------------------------------------- */

struct tm_generator {
    tm_model *m;
    tm_generation_config cfg;   /* its lists in `lists` */
    gen_lists *lists;
    const tm_tokenizer *tok;
    int nb;                     /* beams (decoders); 1 for greedy and sampling */
    tm_decoder **dec, **dec_next;
    int32_t **seq, **seq_next;  /* per beam: the ids so far (all beams one length) */
    size_t len, cap;
    size_t prompt_len;
    int64_t max_len;            /* the total length generation stops at */
    int started, done;
    int64_t vocab;
    float *scores;              /* nb rows of vocab */
    float *scratch;
    int32_t *order;
    uint8_t *mark;              /* vocab bytes, zero between uses */
    tm__rng rng;
    /* beams */
    float *beam_scores, *next_scores, *cand_scores;
    int32_t *cand_tokens, *cand_sources, *next_tokens, *next_sources;
    int n_cand;
    uint8_t *taken;
    tm__beam_hyps hyps;
    /* the caller's processor, after the configured ones (tm__generator_set_processor) */
    tm__logits_fn extra;
    void *extra_user;
    int batched;                /* its steps have run in a tm_batch (its decoder is stale) */
    /* results once done (beams) */
    int n_results;
    int32_t **res;
    size_t *res_n;
    float *res_score;
};

void tm_generator_free(tm_generator *g) {
    if (!g) return;
    for (int b = 0; g->dec && b < g->nb; b++) tm_decoder_free(g->dec[b]);
    for (int b = 0; g->seq && b < g->nb; b++) free(g->seq[b]);
    for (int b = 0; g->seq_next && b < g->nb; b++) free(g->seq_next[b]);
    for (int r = 0; g->res && r < g->n_results; r++) free(g->res[r]);
    free(g->dec);
    free(g->dec_next);
    free(g->seq);
    free(g->seq_next);
    free(g->scores);
    free(g->scratch);
    free(g->order);
    free(g->mark);
    free(g->beam_scores);
    free(g->next_scores);
    free(g->cand_scores);
    free(g->cand_tokens);
    free(g->cand_sources);
    free(g->next_tokens);
    free(g->next_sources);
    free(g->taken);
    free(g->res);
    free(g->res_n);
    free(g->res_score);
    tm__beam_hyps_clear(&g->hyps);
    lists_free(g->lists);
    free(g);
}

static tm_status check_config(const tm_generation_config *c, const tm_tokenizer *tok, tm_error *err) {
#define BAD(...) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, __VA_ARGS__)
    if (c->num_beams < 1) BAD("num_beams must be 1 or more, not %d", c->num_beams);
    if (c->num_return_sequences < 1) BAD("num_return_sequences must be 1 or more, not %d", c->num_return_sequences);
    if (c->num_beams > 1 && c->do_sample)
        BAD("beam sampling (do_sample with num_beams %d) is not supported: use one or the other", c->num_beams);
    if (c->num_return_sequences > c->num_beams)
        BAD("num_return_sequences (%d) must be at most num_beams (%d): for several samples, run "
            "a generator per sample", c->num_return_sequences, c->num_beams);
    if (c->max_length < 1 && c->max_new_tokens < 0) BAD("max_length must be 1 or more (or set max_new_tokens)");
    if (c->max_new_tokens == 0) BAD("max_new_tokens must be 1 or more");
    if (c->do_sample && !(c->temperature > 0))
        BAD("temperature must be above 0 when sampling, not %g (for greedy choice, do_sample 0)", c->temperature);
    if (c->do_sample && !(c->top_p > 0 && c->top_p <= 1)) BAD("top_p must be in (0, 1], not %g", c->top_p);
    if (c->do_sample && !(c->min_p >= 0 && c->min_p <= 1)) BAD("min_p must be in [0, 1], not %g", c->min_p);
    if (c->do_sample && !(c->typical_p > 0 && c->typical_p <= 1)) BAD("typical_p must be in (0, 1], not %g", c->typical_p);
    if (c->top_k < 0) BAD("top_k must be 0 (off) or more, not %lld", (long long)c->top_k);
    if (!(c->repetition_penalty > 0)) BAD("repetition_penalty must be above 0, not %g", c->repetition_penalty);
    if (c->no_repeat_ngram_size < 0) BAD("no_repeat_ngram_size must be 0 (off) or more");
    if (c->n_eos_token_ids < 0 || c->n_bad_words < 0 || c->n_stop_strings < 0 || c->n_suppress_tokens < 0 ||
        c->n_begin_suppress_tokens < 0)
        BAD("a list has a negative length");
    if ((c->n_eos_token_ids && !c->eos_token_ids) || (c->n_bad_words && (!c->bad_words_ids || !c->bad_words_lengths)) ||
        (c->n_stop_strings && !c->stop_strings) || (c->n_suppress_tokens && !c->suppress_tokens) ||
        (c->n_begin_suppress_tokens && !c->begin_suppress_tokens))
        BAD("a list of the generation config has a length but no items");
    for (int k = 0; k < c->n_suppress_tokens; k++)
        if (c->suppress_tokens[k] < 0) BAD("suppress_tokens: id %d is negative", c->suppress_tokens[k]);
    for (int k = 0; k < c->n_begin_suppress_tokens; k++)
        if (c->begin_suppress_tokens[k] < 0) BAD("begin_suppress_tokens: id %d is negative", c->begin_suppress_tokens[k]);
    for (int k = 0; k < c->n_eos_token_ids; k++)
        if (c->eos_token_ids[k] < 0) BAD("eos_token_id %d is negative", c->eos_token_ids[k]);
    if (c->n_stop_strings && !tok) BAD("stop strings need a tokenizer (tm_generator_create's tok)");
    for (int k = 0; k < c->n_stop_strings; k++)
        if (!c->stop_strings[k] || !c->stop_strings[k][0]) BAD("stop string %d is empty", k);
#undef BAD
    return TM_OK;
}

tm_status tm_generator_create(tm_model *model, const tm_generation_config *cfg,
                              const tm_tokenizer *tok, tm_generator **out, tm_error *err) {
    if (!model || !out) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_generator_create: NULL argument");
    tm_generation_config c;
    tm_generation_config_default(&c);
    if (cfg) {
        size_t n = cfg->size && cfg->size < sizeof c ? cfg->size : sizeof c;
        memcpy(&c, cfg, n);
        c.size = sizeof c;
    }
    tm_status st = check_config(&c, tok, err);
    if (st != TM_OK) return st;
    tm_generator *g = calloc(1, sizeof *g);
    if (!g) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    g->m = model;
    g->tok = tok;
    g->nb = c.num_beams;
    g->hyps.worst = 1e9;
    if (lists_copy(&g->cfg, &c, &g->lists)) {
        free(g);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    }
    g->cfg.owned_ = NULL;
    tm__rng_seed(&g->rng, c.seed);
    int nb = g->nb;
    g->dec = calloc((size_t)nb, sizeof *g->dec);
    g->dec_next = calloc((size_t)nb, sizeof *g->dec_next);
    g->seq = calloc((size_t)nb, sizeof *g->seq);
    g->seq_next = calloc((size_t)nb, sizeof *g->seq_next);
    g->taken = calloc((size_t)nb, 1);
    g->beam_scores = calloc((size_t)nb, sizeof(float));
    g->next_scores = calloc((size_t)nb, sizeof(float));
    g->next_tokens = calloc((size_t)nb, sizeof(int32_t));
    g->next_sources = calloc((size_t)nb, sizeof(int32_t));
    g->n_cand = (c.n_eos_token_ids + 1 > 2 ? c.n_eos_token_ids + 1 : 2) * nb;
    g->cand_scores = calloc((size_t)g->n_cand, sizeof(float));
    g->cand_tokens = calloc((size_t)g->n_cand, sizeof(int32_t));
    g->cand_sources = calloc((size_t)g->n_cand, sizeof(int32_t));
    if (!g->dec || !g->dec_next || !g->seq || !g->seq_next || !g->taken || !g->beam_scores ||
        !g->next_scores || !g->next_tokens || !g->next_sources || !g->cand_scores ||
        !g->cand_tokens || !g->cand_sources)
        st = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    /* Only the last position's logits are read (read_logits): the prompt's plans compute no
     * other row (tm_plan_options.last_row_names). */
    tm_decoder_options dopt;
    tm_decoder_options_default(&dopt);
    dopt.last_logits_only = 1;
    dopt.kv_dtype = c.kv_dtype;
    for (int b = 0; st == TM_OK && b < nb; b++) st = tm_decoder_create(model, &dopt, &g->dec[b], err);
    if (st != TM_OK) {
        tm_generator_free(g);
        return st;
    }
    g->hyps.num_beams = nb;
    g->hyps.length_penalty = c.length_penalty;
    g->hyps.early_stopping = c.early_stopping;
    *out = g;
    return TM_OK;
}

void tm__generator_set_processor(tm_generator *g, tm__logits_fn fn, void *user) {
    g->extra = fn;
    g->extra_user = user;
}

tm_status tm_generator_set_input(tm_generator *g, const char *name, const tm_tensor *value,
                                 tm_error *err) {
    if (!g) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_generator_set_input: NULL generator");
    if (g->started)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_generator_set_input: generation has "
                        "started; give '%s' before the first step", name ? name : "");
    for (int b = 0; b < g->nb; b++) {
        tm_status st = tm_decoder_set_input(g->dec[b], name, value, err);
        if (st != TM_OK) return st;
    }
    return TM_OK;
}

/* Room for one more token in every beam's sequence. */
static int grow(tm_generator *g, size_t need) {
    if (need <= g->cap) return 0;
    size_t cap = g->cap ? g->cap : 64;
    while (cap < need) cap *= 2;
    for (int b = 0; b < g->nb; b++) {
        int32_t *s = realloc(g->seq[b], cap * sizeof *s);
        if (!s) return -1;
        g->seq[b] = s;
        s = realloc(g->seq_next[b], cap * sizeof *s);
        if (!s) return -1;
        g->seq_next[b] = s;
    }
    g->cap = cap;
    return 0;
}

tm_status tm_generator_append(tm_generator *g, const int32_t *ids, size_t n, tm_error *err) {
    if (!g || (n && !ids)) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_generator_append: NULL argument");
    if (g->started)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_generator_append: the prompt is given "
                        "before the first step");
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "prompt token %zu is negative (%d)", i, ids[i]);
    if (grow(g, g->len + n)) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    memcpy(g->seq[0] + g->len, ids, n * sizeof *ids);
    g->len += n;
    return TM_OK;
}

/* Runs the ids that are new to beam b's decoder: the whole prompt at the start, else the
 * last token. */
static tm_status feed(tm_generator *g, int b, size_t from, tm_error *err) {
    size_t n = g->len - from;
    int64_t small[64] = {0}, *ids = n <= 64 ? small : malloc(n * sizeof *ids);
    if (!ids) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < n; i++) ids[i] = g->seq[b][from + i];
    tm_status st = tm_decoder_append(g->dec[b], ids, (int64_t)n, err);
    if (ids != small) free(ids);
    return st;
}

/* The last position's logits of batch row `batch_row` of t, (B, n, vocab), as float, into
 * row `dst` of g->scores. */
static tm_status logits_of(tm_generator *g, const tm_tensor *t, int64_t batch_row, int dst,
                           float **row, tm_error *err) {
    int rank = t ? tm_tensor_rank(t) : 0;
    if (!t || rank < 1)
        return tm__fail(err, TM_ERR_SHAPE, "the decoder gave no logits");
    int64_t vocab = tm_tensor_dims(t)[rank - 1];
    tm_dtype dt = tm_tensor_dtype(t);
    if (dt != TM_FLOAT && dt != TM_FLOAT16 && dt != TM_BFLOAT16 && dt != TM_DOUBLE)
        return tm__fail(err, TM_ERR_UNSUPPORTED, "logits of type %s: a float type is expected",
                        tm_dtype_name(dt));
    if (vocab < 1) return tm__fail(err, TM_ERR_SHAPE, "the logits have no vocabulary axis");
    if (!g->scores) {
        g->vocab = vocab;
        g->scores = malloc((size_t)g->nb * (size_t)vocab * sizeof *g->scores);
        g->scratch = malloc((size_t)vocab * sizeof *g->scratch);
        g->order = malloc((size_t)vocab * sizeof *g->order);
        g->mark = calloc((size_t)vocab, 1);
        if (!g->scores || !g->scratch || !g->order || !g->mark) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    } else if (vocab != g->vocab) {
        return tm__fail(err, TM_ERR_SHAPE, "the logits' vocabulary changed from %lld to %lld",
                        (long long)g->vocab, (long long)vocab);
    }
    float *r = g->scores + (size_t)dst * (size_t)vocab;
    int64_t rows = tm_tensor_numel(t) / vocab, per = rank >= 3 ? rows / tm_tensor_dims(t)[0] : rows;
    if (batch_row < 0 || (batch_row + 1) * per > rows)
        return tm__fail(err, TM_ERR_SHAPE, "the logits hold no batch row %lld", (long long)batch_row);
    size_t start = (size_t)(((batch_row + 1) * per - 1) * vocab);
    const void *p = tm_tensor_data_const(t);
    if (dt == TM_FLOAT) memcpy(r, (const float *)p + start, (size_t)vocab * sizeof *r);
    else for (int64_t v = 0; v < vocab; v++) r[v] = (float)tm_load_f64(p, dt, start + (size_t)v);
    *row = r;
    return TM_OK;
}

/* The last position's logits of beam b's decoder into row `dst` of g->scores. */
static tm_status read_logits(tm_generator *g, int b, int dst, float **row, tm_error *err) {
    return logits_of(g, tm_decoder_logits(g->dec[b]), 0, dst, row, err);
}

/* The processors of transformers' _get_logits_processor, in its order, on one row. */
static void process(tm_generator *g, float *s, const int32_t *ids, size_t n) {
    const tm_generation_config *c = &g->cfg;
    int64_t V = g->vocab;
    if (c->repetition_penalty != 1.0) tm__logits_repetition_penalty(s, V, ids, n, c->repetition_penalty, g->mark);
    if (c->no_repeat_ngram_size > 0) tm__logits_no_repeat_ngram(s, V, ids, n, c->no_repeat_ngram_size);
    if (c->n_bad_words)
        tm__logits_bad_words(s, V, ids, n, c->bad_words_ids, c->bad_words_lengths, c->n_bad_words,
                             c->eos_token_ids, c->n_eos_token_ids);
    if (c->min_length > 0) tm__logits_min_length(s, V, (int64_t)n, c->min_length, c->eos_token_ids, c->n_eos_token_ids);
    if (c->min_new_tokens > 0)
        tm__logits_min_length(s, V, (int64_t)(n - g->prompt_len), c->min_new_tokens, c->eos_token_ids,
                              c->n_eos_token_ids);
    if (c->forced_bos_token_id >= 0) tm__logits_forced_bos(s, V, (int64_t)n, c->forced_bos_token_id);
    if (c->forced_eos_token_id >= 0) tm__logits_forced_eos(s, V, (int64_t)n, g->max_len, &c->forced_eos_token_id, 1);
    if (c->n_suppress_tokens) tm__logits_suppress(s, V, c->suppress_tokens, c->n_suppress_tokens);
    if (c->n_begin_suppress_tokens) {
        /* the first new position; after a one-token prompt with a forced BOS, the one after it */
        int64_t begin = g->prompt_len > 1 || c->forced_bos_token_id < 0 ? (int64_t)g->prompt_len
                                                                         : (int64_t)g->prompt_len + 1;
        tm__logits_begin_suppress(s, V, (int64_t)n, begin, c->begin_suppress_tokens, c->n_begin_suppress_tokens);
    }
    if (g->extra) g->extra(g->extra_user, s, V, ids, n);
}

/* The sampling warpers, in transformers' order (each only when it changes something). */
static void warp(tm_generator *g, float *s) {
    const tm_generation_config *c = &g->cfg;
    int64_t V = g->vocab;
    if (c->temperature != 1.0) tm__logits_temperature(s, V, c->temperature);
    if (c->top_k > 0) tm__logits_top_k(s, V, c->top_k, 1, g->scratch);
    if (c->top_p < 1.0) tm__logits_top_p(s, V, c->top_p, 1, g->order);
    if (c->min_p > 0) tm__logits_min_p(s, V, c->min_p, 1, g->order);
    if (c->typical_p < 1.0) tm__logits_typical(s, V, c->typical_p, 1, g->order, g->scratch);
}

static int is_eos(const tm_generator *g, int32_t t) {
    for (int k = 0; k < g->cfg.n_eos_token_ids; k++)
        if (g->cfg.eos_token_ids[k] == t) return 1;
    return 0;
}

/* The new text of sequence 0 (special tokens skipped), for stop strings and streaming. */
static tm_status new_text(const tm_generator *g, char **text, size_t *n, tm_error *err) {
    return tm_tokenizer_decode(g->tok, g->seq[0] + g->prompt_len, g->len - g->prompt_len, 1, -1,
                               text, n, err);
}

static tm_status start(tm_generator *g, tm_error *err) {
    if (g->len == 0) {
        int32_t first = g->cfg.decoder_start_token_id >= 0 ? g->cfg.decoder_start_token_id : g->cfg.bos_token_id;
        if (first < 0)
            return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "nothing to generate from: append a "
                            "prompt (or set decoder_start_token_id or bos_token_id)");
        tm_status st = tm_generator_append(g, &first, 1, err);
        if (st != TM_OK) return st;
    }
    g->prompt_len = g->len;
    g->max_len = g->cfg.max_new_tokens >= 0 ? (int64_t)g->prompt_len + g->cfg.max_new_tokens : g->cfg.max_length;
    g->hyps.max_length = g->max_len;
    if (g->nb > 1 && g->cfg.early_stopping == TM_EARLY_STOPPING_NEVER && g->cfg.length_penalty > 0 &&
        g->max_len <= (int64_t)g->prompt_len)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "max_length (%lld) must be above the prompt's "
                        "length (%zu) for early_stopping \"never\"", (long long)g->max_len, g->prompt_len);
    tm_status st = feed(g, 0, 0, err);
    if (st != TM_OK) return st;
    for (int b = 1; b < g->nb; b++) {
        memcpy(g->seq[b], g->seq[0], g->len * sizeof *g->seq[b]);
        g->beam_scores[b] = -1e9f;
    }
    g->started = 1;
    return TM_OK;
}

/* Greedy or sampling: processes the row s of scores and chooses the next token. */
static tm_status choose(tm_generator *g, float *s, int32_t *token, tm_error *err) {
    tm_status st = TM_OK;
    if (grow(g, g->len + 1)) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    process(g, s, g->seq[0], g->len);
    int64_t t;
    if (g->cfg.do_sample) {
        warp(g, s);
        t = tm__sample(s, g->vocab, tm__rng_uniform(&g->rng));
    } else {
        t = tm__argmax(s, g->vocab);
    }
    g->seq[0][g->len++] = (int32_t)t;
    *token = (int32_t)t;
    if (is_eos(g, (int32_t)t) || (int64_t)g->len >= g->max_len) g->done = 1;
    if (!g->done && g->cfg.n_stop_strings) {
        char *text = NULL;
        size_t n = 0;
        st = new_text(g, &text, &n, err);
        if (st != TM_OK) return st;
        for (int k = 0; k < g->cfg.n_stop_strings && !g->done; k++)
            if (strstr(text, g->cfg.stop_strings[k])) g->done = 1;
        free(text);
    }
    return TM_OK;
}

static tm_status step_single(tm_generator *g, int32_t *token, tm_error *err) {
    tm_status st = TM_OK;
    if (g->started) st = feed(g, 0, g->len - 1, err);
    else st = start(g, err);
    float *s = NULL;
    if (st == TM_OK) st = read_logits(g, 0, 0, &s, err);
    if (st != TM_OK) return st;
    return choose(g, s, token, err);
}

/* ---- For tm_batch (batch.c): a generator whose decode steps another decoder runs ---- */

int tm__generator_batchable(const tm_generator *g, const tm_model *m) {
    return g && g->nb == 1 && g->m == m;
}

int tm__generator_started(const tm_generator *g) { return g->started; }

tm_dtype tm__generator_kv_dtype(const tm_generator *g) { return g->cfg.kv_dtype; }

int tm__generator_done(const tm_generator *g) { return g->done; }

tm_decoder *tm__generator_decoder(tm_generator *g) { return g->dec[0]; }

void tm__generator_set_batched(tm_generator *g) { g->batched = 1; }

int32_t tm__generator_last_token(const tm_generator *g) { return g->len ? g->seq[0][g->len - 1] : -1; }

tm_status tm__generator_take_logits(tm_generator *g, const tm_tensor *logits, int64_t row,
                                    int32_t *token, int *done, tm_error *err) {
    if (g->done) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "generation has ended");
    float *s = NULL;
    tm_status st = logits_of(g, logits, row, 0, &s, err);
    if (st == TM_OK) st = choose(g, s, token, err);
    if (st == TM_OK && done) *done = g->done;
    return st;
}

/* The n_cand best of nb * vocab scores, best first (ties: the lower index first). */
static void top_candidates(tm_generator *g) {
    int n = 0, k = g->n_cand;
    int64_t V = g->vocab, total = (int64_t)g->nb * V;
    for (int64_t i = 0; i < total; i++) {
        float s = g->scores[i];
        if (n == k && !(s > g->cand_scores[k - 1])) continue;
        int at = n < k ? n++ : k - 1;
        while (at > 0 && s > g->cand_scores[at - 1]) {
            g->cand_scores[at] = g->cand_scores[at - 1];
            g->cand_tokens[at] = g->cand_tokens[at - 1];
            g->cand_sources[at] = g->cand_sources[at - 1];
            at--;
        }
        g->cand_scores[at] = s;
        g->cand_tokens[at] = (int32_t)(i % V);
        g->cand_sources[at] = (int32_t)(i / V);
    }
    g->n_cand = n;
}

static int cmp_hyp(const void *a, const void *b) {
    const tm__hyp *x = a, *y = b;
    return x->score < y->score ? -1 : x->score > y->score;
}

/* BeamSearchScorer.finalize: the running beams join the hypotheses unless done; the best
 * num_return_sequences, each with the first EOS after it when shorter than the longest
 * (and than max_length). */
static tm_status finalize(tm_generator *g, tm_error *err) {
    tm__beam_hyps *h = &g->hyps;
    if (!h->done)
        for (int b = 0; b < g->nb; b++)
            if (tm__beam_hyps_add(h, g->seq[b], g->len, g->beam_scores[b], (int64_t)(g->len - g->prompt_len)))
                return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    /* Python's sorted() is stable and pop() takes the last: among equal scores the
     * latest added wins. A stable order by index then reversed per score. */
    int n = h->n;
    for (int a = 1; a < n; a++) {   /* insertion sort: stable, n <= num_beams */
        tm__hyp x = h->hyps[a];
        int j = a;
        while (j > 0 && cmp_hyp(&h->hyps[j - 1], &x) > 0) {
            h->hyps[j] = h->hyps[j - 1];
            j--;
        }
        h->hyps[j] = x;
    }
    int keep = g->cfg.num_return_sequences < n ? g->cfg.num_return_sequences : n;
    g->res = calloc((size_t)keep + 1, sizeof *g->res);
    g->res_n = calloc((size_t)keep + 1, sizeof *g->res_n);
    g->res_score = calloc((size_t)keep + 1, sizeof *g->res_score);
    if (!g->res || !g->res_n || !g->res_score) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    size_t longest = 0;
    for (int r = 0; r < keep; r++)
        if (h->hyps[n - 1 - r].n > longest) longest = h->hyps[n - 1 - r].n;
    int64_t max_out = (int64_t)longest + 1 < g->max_len ? (int64_t)longest + 1 : g->max_len;
    for (int r = 0; r < keep; r++) {
        tm__hyp *hy = &h->hyps[n - 1 - r];
        int add = (int64_t)hy->n < max_out && g->cfg.n_eos_token_ids > 0;
        g->res[r] = malloc((hy->n + 1) * sizeof **g->res);
        if (!g->res[r]) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        g->n_results = r + 1;
        memcpy(g->res[r], hy->ids, hy->n * sizeof **g->res);
        if (add) g->res[r][hy->n] = g->cfg.eos_token_ids[0];
        g->res_n[r] = hy->n + (size_t)add;
        g->res_score[r] = hy->score;
    }
    return TM_OK;
}

static tm_status step_beams(tm_generator *g, int32_t *token, tm_error *err) {
    int nb = g->nb;
    int first = !g->started;
    tm_status st = TM_OK;
    if (first) st = start(g, err);
    else
        for (int b = 0; b < nb && st == TM_OK; b++) st = feed(g, b, g->len - 1, err);
    int64_t V;
    for (int b = 0; b < nb && st == TM_OK; b++) {
        float *row = NULL;
        /* At the start every beam is the prompt: beam 0's logits serve all. */
        st = read_logits(g, first ? 0 : b, b, &row, err);
        if (st != TM_OK) break;
        V = g->vocab;
        tm__log_softmax(row, V);
        process(g, row, g->seq[b], g->len);
        for (int64_t v = 0; v < V; v++) row[v] += g->beam_scores[b];
    }
    if (st != TM_OK) return st;
    if (grow(g, g->len + 1)) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    g->n_cand = (g->cfg.n_eos_token_ids + 1 > 2 ? g->cfg.n_eos_token_ids + 1 : 2) * nb;
    top_candidates(g);
    if (tm__beam_process(&g->hyps, nb, g->cand_scores, g->cand_tokens, g->cand_sources, g->n_cand,
                         g->seq, g->len, g->cfg.eos_token_ids, g->cfg.n_eos_token_ids,
                         (int64_t)g->prompt_len, g->next_scores, g->next_tokens, g->next_sources))
        return tm__fail(err, g->n_cand < nb ? TM_ERR_INVALID_ARGUMENT : TM_ERR_NO_MEMORY,
                        g->n_cand < nb ? "beam search: fewer candidates than beams (a vocabulary "
                        "smaller than num_beams?)" : "out of memory");
    /* The beams' decoders follow their sources: a source's first follower takes its
     * decoder, later ones a copy in a decoder no beam follows. */
    memset(g->taken, 0, (size_t)nb);
    for (int j = 0; j < nb; j++) {
        int src = g->next_sources[j];
        g->dec_next[j] = g->taken[src] ? NULL : g->dec[src];
        g->taken[src] = 1;
    }
    int free_at = 0;
    for (int j = 0; j < nb; j++) {
        if (g->dec_next[j]) continue;
        while (g->taken[free_at]) free_at++;
        g->dec_next[j] = g->dec[free_at++];
        st = tm_decoder_copy_state(g->dec_next[j], g->dec[g->next_sources[j]], err);
        if (st != TM_OK) {
            /* The decoders are all still owned by g->dec; generation cannot go on. */
            g->done = 1;
            return st;
        }
    }
    memcpy(g->dec, g->dec_next, (size_t)nb * sizeof *g->dec);
    for (int j = 0; j < nb; j++) {
        memcpy(g->seq_next[j], g->seq[g->next_sources[j]], g->len * sizeof **g->seq);
        g->seq_next[j][g->len] = g->next_tokens[j];
        g->beam_scores[j] = g->next_scores[j];
    }
    int32_t **t = g->seq;
    g->seq = g->seq_next;
    g->seq_next = t;
    g->len++;
    *token = g->seq[0][g->len - 1];
    if (g->hyps.done || (int64_t)g->len >= g->max_len) {
        g->done = 1;
        return finalize(g, err);
    }
    return TM_OK;
}

tm_status tm_generator_step(tm_generator *g, int32_t *token, int *done, tm_error *err) {
    if (!g) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_generator_step: NULL generator");
    if (g->done) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_generator_step: generation has ended");
    if (g->batched)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_generator_step: the generator's steps "
                        "run in a tm_batch (its cache is there)");
    int32_t t = -1;
    tm_status st = g->nb > 1 ? step_beams(g, &t, err) : step_single(g, &t, err);
    if (st != TM_OK) return st;
    if (token) *token = t;
    if (done) *done = g->done;
    return TM_OK;
}

/* Python's _is_chinese_char: the CJK blocks after which TextStreamer flushes. */
static int is_cjk(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* The last code point of s[0..n) (0 for none or a broken one). */
static uint32_t last_char(const char *s, size_t n) {
    size_t i = n;
    while (i > 0 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) i--;
    if (i == 0) return 0;
    const unsigned char *p = (const unsigned char *)s + i - 1;
    size_t len = n - (i - 1);
    if (p[0] < 0x80) return len == 1 ? p[0] : 0;
    if ((p[0] & 0xE0) == 0xC0 && len == 2) return (uint32_t)(p[0] & 0x1F) << 6 | (p[1] & 0x3F);
    if ((p[0] & 0xF0) == 0xE0 && len == 3)
        return (uint32_t)(p[0] & 0x0F) << 12 | (uint32_t)(p[1] & 0x3F) << 6 | (p[2] & 0x3F);
    if ((p[0] & 0xF8) == 0xF0 && len == 4)
        return (uint32_t)(p[0] & 0x07) << 18 | (uint32_t)(p[1] & 0x3F) << 12 |
               (uint32_t)(p[2] & 0x3F) << 6 | (p[3] & 0x3F);
    return 0;
}

/* TextStreamer's rule: text that ends with a newline or a CJK character is final; else up
 * to its last space (a word may still grow, an incomplete byte sequence decodes to U+FFFD
 * that more bytes replace). */
size_t tm_generator_stable_length(const char *text, size_t n) {
    if (!text || n == 0) return 0;
    if (text[n - 1] == '\n' || is_cjk(last_char(text, n))) return n;
    for (size_t i = n; i > 0; i--)
        if (text[i - 1] == ' ') return i;
    return 0;
}

tm_status tm_generator_generate(tm_generator *g, tm_generator_stream_fn stream, void *user,
                                tm_error *err) {
    if (!g) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_generator_generate: NULL generator");
    size_t printed = 0;
    int stopped = 0;
    tm_status st = TM_OK;
    while (!g->done && !stopped && st == TM_OK) {
        int32_t t;
        st = tm_generator_step(g, &t, NULL, err);
        if (st != TM_OK || !stream || g->nb > 1) continue;
        if (!g->tok) {
            stopped = stream(user, "", 0, t) != 0;
            continue;
        }
        char *text = NULL;
        size_t n = 0;
        st = new_text(g, &text, &n, err);
        if (st != TM_OK) break;
        size_t end = g->done ? n : tm_generator_stable_length(text, n);
        if (end > printed) {
            stopped = stream(user, text + printed, end - printed, t) != 0;
            printed = end;
        }
        free(text);
    }
    if (st == TM_OK && stream && g->tok && !stopped) {
        /* The rest (beams: the best sequence's new text, once). */
        const int32_t *ids;
        size_t n_ids;
        st = tm_generator_sequence(g, 0, &ids, &n_ids, err);
        char *text = NULL;
        size_t n = 0;
        if (st == TM_OK)
            st = tm_tokenizer_decode(g->tok, ids + g->prompt_len, n_ids - g->prompt_len, 1, -1,
                                     &text, &n, err);
        if (st == TM_OK && n > printed) stream(user, text + printed, n - printed, -1);
        free(text);
    }
    if (stopped) g->done = 1;
    return st;
}

int tm_generator_n_sequences(const tm_generator *g) {
    if (!g) return 0;
    return g->nb > 1 && g->done ? g->n_results : 1;
}

tm_status tm_generator_sequence(const tm_generator *g, int i, const int32_t **ids, size_t *n,
                                tm_error *err) {
    if (!g || !ids || !n) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_generator_sequence: NULL argument");
    if (i < 0 || i >= tm_generator_n_sequences(g))
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "sequence %d: there are %d", i, tm_generator_n_sequences(g));
    if (g->nb > 1 && g->done) {
        *ids = g->res[i];
        *n = g->res_n[i];
    } else {
        *ids = g->seq[0];
        *n = g->len;
    }
    return TM_OK;
}

size_t tm_generator_prompt_length(const tm_generator *g) { return g ? g->prompt_len : 0; }

double tm_generator_score(const tm_generator *g, int i) {
    if (!g || g->nb == 1 || !g->done || i < 0 || i >= g->n_results) return 0;
    return g->res_score[i];
}
