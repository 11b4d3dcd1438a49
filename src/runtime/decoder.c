/* tm_decoder: a decoder export stepped token by token with its KV cache kept in place.
 * The cache of each past input lives in one buffer of the decoder's with room to grow
 * (doubling when full); plans made with kv_in_place take it there position-major, (P, B,
 * H, D), and write each step's new positions after the P (passes/kv_append.c), so a step
 * copies no cache and, once its plans exist, allocates nothing. A decoder of B sequences
 * (tm_decoder_options.batch) steps them together: each row has its own attention mask
 * (padding it did not attend to) and positions, and rows can be filled from a decoder of
 * one sequence and freed between steps (tm__decoder_put_row, tm__decoder_free_row: the
 * continuous batching of tm_batch). The plans: one generic plan for every
 * decode step of one token on a past of 2 or more, one for every prompt of 2 or more
 * tokens on an empty cache (generic.c; each made once from three traces), and plans per
 * shape for the rest (a one-token prompt, chunks appended to a cache), a few kept.
 * Inputs are found by name (input_ids; attention_mask, position_ids, use_cache_branch
 * when the export has them; past_key_values.* or past.* with present.* outputs); a cache
 * that the plan cannot keep in place (not concatenated on a (B, H, P, D) length axis) is
 * fed back by copying its present output. Not a generator: no sampling, no tokenizer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "plan_internal.h"
#include "../core/dtype.h"
#include "../backends/cpu/kvmath.h"

enum { N_SHAPED = 8 };

enum { KV_COPY = 0, KV_IN_PLACE = 1, KV_FRESH = 2 };

typedef struct dec_shared dec_shared;

typedef struct dec_plan {
    tm_plan *plan;
    dec_shared *shared;   /* the model's entry that owns plan (NULL: none) */
    tm_session *session;
    int64_t past, seq;    /* a plan per shape: its sizes; -1 for the generic ones */
    uint8_t *mode;        /* per cache input: KV_IN_PLACE (the plan appends to the buffer),
                           * KV_COPY (it reads the buffer (B, H, P, D) and its present is
                           * copied back), KV_FRESH (it does not read the past: a prompt
                           * on an empty cache; its present is copied in) */
} dec_plan;

struct tm_decoder {
    tm_model *m;
    int n_in, n_out;
    int ids, mask, positions, branch, logits;
    const char **names;
    int *present_of;      /* per input: its present output, or -1 */
    uint8_t *fixed;       /* per cache input: an encoder's cache (cross-attention), whose
                           * length is the encoder's: made by the prompt's plan, read as
                           * it is by every later step (B, H, E, D) */
    tm_tensor **given;    /* per input: one the caller gives (tm_decoder_set_input), or NULL */
    int64_t enc_len;      /* E: the encoder's length (dim 1 of the input given), or -1 */
    int *kv;              /* per cache input: the buffer's layout, (P, B, H, D) (1) or (B, H,
                           * P, D) (0), set by the first plan that reads it; -1 unknown */
    int64_t *heads, *width;   /* per cache input: H and D of (B, H, P, D) */
    size_t *elem;         /* per cache input: the buffer's element size (2: a float32 cache
                           * kept in float16, kv_dtype) */
    void **buf;           /* per cache input: capacity rows */
    tm_tensor *t;         /* per input: the tensor a run reads (dims set per step) */
    tm_tensor *t_branch;
    int64_t *ids_buf, *mask_buf, *pos_buf;   /* a step's inputs, (B, n), (B, past + n) */
    int32_t *ids32, *mask32, *pos32;
    int64_t capacity, length;
    int64_t batch;        /* B */
    int padded;           /* some row has positions it does not attend to: the mask is
                           * built per step from rowmask (else all ones) */
    uint8_t *rowmask;     /* (B, capacity): 1 where row b attends to position t */
    int64_t *seen;        /* per row: positions it attends to (the next position id) */
    uint8_t *row_free;    /* per row: 1 when no sequence holds it (tm__decoder_free_row) */
    int in_place;         /* kv_in_place asked */
    tm_dtype kv_dtype;    /* kv_dtype asked: TM_FLOAT16, or TM_UNDEFINED */
    int last_only;        /* last_logits_only asked */
    int layout_known;     /* the decode plan has told each cache's layout */
    dec_plan *pending;    /* the first prompt's plan, whose presents wait in its session
                           * for the layouts (taken at the next append) */
    int64_t pending_past, pending_n;
    dec_plan decode, prefill;
    dec_plan shaped[N_SHAPED];
    int n_shaped, next_shaped;
    const tm_tensor *last_logits;
};

void tm_decoder_options_default(tm_decoder_options *o) {
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->kv_in_place = 1;
}

static int past_name(const char *s) {
    return !strncmp(s, "past_key_values", 15) || !strncmp(s, "past.", 5);
}

/* past_key_values.N.key <- present.N.key (Optimum's names), past.N <- present.N. */
static int present_index(const tm_model *m, const char *input) {
    const char *rest = !strncmp(input, "past_key_values", 15) ? input + 15 : input + 4;
    char name[512];
    snprintf(name, sizeof name, "present%s", rest);
    return tm_model_output_index(m, name);
}

static void shared_release(tm_model *m, dec_shared *e);

static void plan_clear(tm_model *m, dec_plan *p) {
    tm_session_free(p->session);
    if (p->shared) shared_release(m, p->shared);
    else tm_plan_free(p->plan);
    free(p->mode);
    memset(p, 0, sizeof *p);
}

void tm_decoder_free(tm_decoder *d) {
    if (!d) return;
    plan_clear(d->m, &d->decode);
    plan_clear(d->m, &d->prefill);
    for (int i = 0; i < d->n_shaped; i++) plan_clear(d->m, &d->shaped[i]);
    for (int i = 0; d->buf && i < d->n_in; i++) free(d->buf[i]);
    free(d->buf);
    free(d->names);
    free(d->present_of);
    for (int i = 0; d->given && i < d->n_in; i++) tm_tensor_free(d->given[i]);
    free(d->given);
    free(d->fixed);
    free(d->kv);
    free(d->heads);
    free(d->width);
    free(d->elem);
    free(d->t);
    tm_tensor_free(d->t_branch);
    free(d->ids_buf);
    free(d->mask_buf);
    free(d->pos_buf);
    free(d->ids32);
    free(d->mask32);
    free(d->pos32);
    free(d->rowmask);
    free(d->seen);
    free(d->row_free);
    free(d);
}

static int int32_input(const tm_decoder *d, int i) {
    tm_value_desc in;
    tm_model_input(d->m, i, &in);
    return in.dtype == TM_INT32;
}

/* Room for `need` positions: the cache buffers and the rows of ids, mask and positions
 * grow (doubling); the rows the cache holds are kept. */
static tm_status reserve_steps(tm_decoder *d, tm_session *s, tm_error *err);

/* A zeroed cache buffer. From 2 MiB up on whole huge pages: a decode step reads every
 * head's rows of every layer's cache, strided through the interleaved layout, and on 4 KiB
 * pages a long cache (the small LLaMA's at 2,048 positions: 16 buffers of 2 MiB) touches
 * more pages per step than the TLB holds. free() releases either kind. */
static void *cache_alloc(size_t bytes) {
    const size_t huge = (size_t)2 << 20;
    if (bytes < huge) return calloc(1, bytes ? bytes : 1);
    size_t rounded = (bytes + huge - 1) / huge * huge;
    void *p = aligned_alloc(huge, rounded);
    if (!p) return NULL;
#if defined(MADV_HUGEPAGE)
    madvise(p, rounded, MADV_HUGEPAGE);
#endif
    memset(p, 0, rounded);
    return p;
}

static tm_status reserve(tm_decoder *d, int64_t need, tm_error *err) {
    if (need <= d->capacity) return TM_OK;
    int64_t cap = d->capacity ? d->capacity : 256;
    while (cap < need) cap *= 2;
    int64_t B = d->batch;
    for (int i = 0; i < d->n_in; i++) {
        if (d->present_of[i] < 0 || d->fixed[i]) continue;
        size_t pos = (size_t)(B * d->heads[i] * d->width[i]) * d->elem[i];
        void *nb = cache_alloc((size_t)cap * pos);
        if (!nb) return tm__fail(err, TM_ERR_NO_MEMORY, "cannot grow the KV cache to %lld "
                                 "positions", (long long)cap);
        if (d->buf[i] && d->length) {
            if (d->kv[i] == 0) {
                /* (B, H, P, D) contiguous: each head's rows move to its new place. */
                size_t run = (size_t)(d->length * d->width[i]) * d->elem[i];
                for (int64_t h = 0; h < B * d->heads[i]; h++)
                    memcpy((char *)nb + (size_t)h * run, (char *)d->buf[i] + (size_t)h * run, run);
            } else {
                memcpy(nb, d->buf[i], (size_t)d->length * pos);
            }
        }
        free(d->buf[i]);
        d->buf[i] = nb;
    }
    size_t cells = (size_t)(B * cap);
    int64_t *a = realloc(d->ids_buf, cells * sizeof *a);
    if (a) d->ids_buf = a;
    int64_t *b = a ? realloc(d->mask_buf, cells * sizeof *b) : NULL;
    if (b) d->mask_buf = b;
    int64_t *c = b ? realloc(d->pos_buf, cells * sizeof *c) : NULL;
    if (c) d->pos_buf = c;
    int32_t *a32 = c ? realloc(d->ids32, cells * sizeof *a32) : NULL;
    if (a32) d->ids32 = a32;
    int32_t *b32 = a32 ? realloc(d->mask32, cells * sizeof *b32) : NULL;
    if (b32) d->mask32 = b32;
    int32_t *c32 = b32 ? realloc(d->pos32, cells * sizeof *c32) : NULL;
    if (c32) d->pos32 = c32;
    uint8_t *rm = c32 ? calloc(cells, 1) : NULL;
    if (!rm) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (int64_t r = 0; d->rowmask && r < B; r++)
        memcpy(rm + r * cap, d->rowmask + r * d->capacity, (size_t)d->length);
    free(d->rowmask);
    d->rowmask = rm;
    /* Unpadded, the mask is all ones: (B, past + n) of them from the start. */
    if (!d->padded)
        for (size_t k = 0; k < cells; k++) {
            d->mask_buf[k] = 1;
            d->mask32[k] = 1;
        }
    d->capacity = cap;
    if (d->decode.session) return reserve_steps(d, d->decode.session, err);
    return TM_OK;
}

/* The decode plan's session made ready for every past up to the capacity, or up to the
 * longest the model takes (a position table's length stops the shape rules: halve). */
static tm_status reserve_steps(tm_decoder *d, tm_session *s, tm_error *err) {
    for (int64_t p = d->capacity; p >= 2; p /= 2) {
        tm_error e2;
        memset(&e2, 0, sizeof e2);
        tm_status st = tm__gen_reserve(s, p, &e2);
        if (st == TM_OK) return TM_OK;
        if (st == TM_ERR_NO_MEMORY) {
            tm__error_copy(err, &e2);
            return st;
        }
    }
    return TM_OK;
}

static void set_dims(tm_tensor *t, tm_dtype dt, int rank, const int64_t *dims, void *data) {
    t->dtype = dt;
    t->rank = rank;
    for (int k = 0; k < rank; k++) t->dims[k] = dims[k];
    t->nbytes = (size_t)tm_numel(rank, dims) * tm_dtype_elem_size(dt);
    t->data = data;
    t->owns_data = 0;
}

/* The dtype of cache i's buffer: the model's, or float16 in place of its float32. */
static tm_dtype buffer_dtype(const tm_decoder *d, int i, tm_dtype model) {
    return model == TM_FLOAT && d->elem[i] == 2 ? TM_FLOAT16 : model;
}

/* The inputs of a step of n tokens on a past of length past, in the tensors d->t: the
 * cache views in the layout of `in_place` (1: (P, B, H, D)). */
static void bind_step(tm_decoder *d, int64_t past, int64_t n, int in_place, const uint8_t *mode) {
    for (int i = 0; i < d->n_in; i++) {
        tm_value_desc in;
        tm_model_input(d->m, i, &in);
        if (i == d->ids || i == d->mask || i == d->positions) {
            int64_t len = i == d->mask ? past + n : n;
            int64_t dims[2] = {d->batch, len};
            int is32 = in.dtype == TM_INT32;
            void *data = i == d->ids ? (is32 ? (void *)d->ids32 : (void *)d->ids_buf)
                       : i == d->mask ? (is32 ? (void *)d->mask32 : (void *)d->mask_buf)
                                      : (is32 ? (void *)d->pos32 : (void *)d->pos_buf);
            set_dims(&d->t[i], is32 ? TM_INT32 : TM_INT64, 2, dims, data);
        } else if (i == d->branch) {
            *(uint8_t *)d->t_branch->data = past > 0;
        } else if (d->given[i]) {
            d->t[i] = *d->given[i];
            d->t[i].owns_data = 0;
        } else if (d->present_of[i] >= 0 && d->fixed[i]) {
            int64_t dims[4] = {d->batch, d->heads[i], d->enc_len, d->width[i]};
            set_dims(&d->t[i], in.dtype, 4, dims, d->buf[i]);
        } else if (d->present_of[i] >= 0) {
            int64_t kv[4] = {past, d->batch, d->heads[i], d->width[i]};
            int64_t plain[4] = {d->batch, d->heads[i], past, d->width[i]};
            int in_kv = in_place && mode[i] == KV_IN_PLACE;
            set_dims(&d->t[i], in_kv ? buffer_dtype(d, i, in.dtype) : in.dtype, 4, in_kv ? kv : plain,
                     d->buf[i]);
        }
    }
}

static const tm_tensor *const *step_inputs(tm_decoder *d, const tm_tensor **scratch) {
    for (int i = 0; i < d->n_in; i++) scratch[i] = i == d->branch ? d->t_branch : &d->t[i];
    return scratch;
}

static void plan_options(const tm_decoder *d, tm_plan_options *po, const char **sn,
                         const tm_tensor **sv) {
    static const char *const logits_name[1] = {"logits"};
    tm_plan_options_default(po);
    po->kv_in_place = d->in_place;
    po->kv_dtype = d->kv_dtype;
    if (d->last_only) {
        po->n_last_row = 1;
        po->last_row_names = logits_name;
    }
    if (d->branch >= 0) {
        sn[0] = d->names[d->branch];
        sv[0] = d->t_branch;
        po->n_static = 1;
        po->static_names = sn;
        po->static_values = sv;
    }
}

/* Tensors in the model's own layout at sizes (past, n), zeroed (plans are traced from
 * their shapes). */
static tm_xval *model_layout_inputs(tm_decoder *d, int64_t past, int64_t n) {
    tm_xval *x = calloc((size_t)d->n_in + 1, sizeof *x);
    if (!x) return NULL;
    for (int i = 0; i < d->n_in; i++) {
        tm_value_desc in;
        tm_model_input(d->m, i, &in);
        x[i].kind = TM_X_TENSOR;
        if (i == d->branch) {
            x[i].t = tm_tensor_clone(d->t_branch, NULL);
            if (x[i].t) *(uint8_t *)x[i].t->data = past > 0;
        } else if (d->given[i]) {
            x[i].t = tm_tensor_clone(d->given[i], NULL);
        } else if (d->present_of[i] >= 0) {
            int64_t dims[4] = {d->batch, d->heads[i], d->fixed[i] ? d->enc_len : past, d->width[i]};
            x[i].t = tm_tensor_alloc(in.dtype, 4, dims, NULL);
        } else {
            int64_t dims[2] = {d->batch, i == d->mask ? past + n : n};
            x[i].t = tm_tensor_alloc(int32_input(d, i) ? TM_INT32 : TM_INT64, 2, dims, NULL);
        }
        if (!x[i].t) {
            for (int k = 0; k <= i; k++) tm_tensor_free(x[k].t);
            free(x);
            return NULL;
        }
    }
    return x;
}

static void free_xvals(tm_xval *x, int n) {
    for (int i = 0; x && i < n; i++) tm_tensor_free(x[i].t);
    free(x);
}

/* Whether a kernel of plan p reads graph input i. */
static int plan_reads(const tm_plan *p, int i) {
    for (int pv = 0; pv < p->n_values; pv++) {
        if (p->values[pv].kind != PV_INPUT || p->values[pv].input != i) continue;
        for (int k = 0; k < p->n_kernels; k++)
            for (int j = 0; j < p->kernels[k].nin; j++)
                if (p->kernels[k].in[j] == pv) return 1;
        for (int o = 0; o < p->n_outputs; o++)
            if (p->output_pv && p->output_pv[o] == pv) return 1;
    }
    return 0;
}

/* How plan dp treats each cache (dec_plan.mode); the buffers' layouts follow the first
 * plan that reads them, and every later one must read them alike. */
static tm_status learn_kv(tm_decoder *d, dec_plan *dp, tm_error *err) {
    dp->mode = calloc((size_t)d->n_in + 1, 1);
    if (!dp->mode) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; i < d->n_in; i++) {
        if (d->present_of[i] < 0) continue;
        if (d->fixed[i]) {
            dp->mode[i] = plan_reads(dp->plan, i) ? KV_COPY : KV_FRESH;
            continue;
        }
        int kv = tm_plan_kv_input(dp->plan, i);
        if (!kv && !plan_reads(dp->plan, i)) {
            dp->mode[i] = KV_FRESH;
            continue;
        }
        dp->mode[i] = kv ? KV_IN_PLACE : KV_COPY;
        if (d->kv[i] < 0) {
            d->kv[i] = kv;
            /* The buffer holds what the plan reads (no rows yet: sized anew if need be). */
            tm_value_desc in;
            tm_model_input(d->m, i, &in);
            size_t es = tm_dtype_elem_size(kv ? dp->plan->input_dtype[i] : in.dtype);
            if (es != d->elem[i]) {
                void *nb = cache_alloc((size_t)(d->capacity * d->batch * d->heads[i] * d->width[i]) * es);
                if (!nb) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
                free(d->buf[i]);
                d->buf[i] = nb;
                d->elem[i] = es;
            }
        } else if (d->kv[i] != kv)
            return tm__fail(err, TM_ERR_UNSUPPORTED, "the plans of this decoder disagree on "
                            "whether cache '%s' is kept in place", d->names[i]);
    }
    return TM_OK;
}

/* ---- Plans shared by a model's decoders ----------------------------------------------
 * A plan is read-only once made (a run keeps its state in its session), so the decoders of
 * one model share theirs: a server's requests, a generator's beams and a pipeline's calls
 * each make a decoder, and only the first pays for the traces. An entry is keyed by what
 * its plan was traced from: the kind and sizes, the decoder's options and the inputs given
 * (an encoder's output, by dtype and shape). A generic plan the graph does not allow is
 * remembered too (plan NULL, the reason kept), so that no later decoder traces it again.
 * The model keeps at most MAX_SHARED entries: beyond that, the least recently used that no
 * decoder holds is freed (tm__decoder_plans_free frees the rest with the model). */
enum { MAX_SHARED = 32 };

struct dec_shared {
    char *key;
    tm_plan *plan;        /* NULL: the graph did not allow it (why) */
    char *why;
    int refs;             /* decoders holding plan */
    dec_shared *next;     /* most recently used first */
};

static void shared_free(dec_shared *e) {
    tm_plan_free(e->plan);
    free(e->key);
    free(e->why);
    free(e);
}

void tm__decoder_plans_free(tm_model *m) {
    for (dec_shared *e = m->dec_plans, *next; e; e = next) {
        next = e->next;
        shared_free(e);
    }
    m->dec_plans = NULL;
    m->n_dec_plans = 0;
}

static void shared_release(tm_model *m, dec_shared *e) {
    pthread_mutex_lock(&m->cache_lock);
    e->refs--;
    pthread_mutex_unlock(&m->cache_lock);
}

/* The key of a plan of kind ('d' generic decode, 'p' generic prompt, 's' one shape) at
 * (past, n) for decoder d, or NULL (out of memory). */
static char *shared_key(const tm_decoder *d, char kind, int64_t past, int64_t n) {
    char *key = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&key, &len);
    if (!f) return NULL;
    fprintf(f, "%c %lld %lld %d %d %lld %lld %d", kind, (long long)past, (long long)n, d->in_place,
            d->last_only, (long long)d->enc_len, (long long)d->batch, (int)d->kv_dtype);
    for (int i = 0; i < d->n_in; i++) {
        if (!d->given[i]) continue;
        const tm_tensor *t = d->given[i];
        fprintf(f, " %d:%d", i, (int)t->dtype);
        for (int k = 0; k < t->rank; k++) fprintf(f, ",%lld", (long long)t->dims[k]);
    }
    if (fclose(f) != 0) {
        free(key);
        return NULL;
    }
    return key;
}

/* The model's entry of key, moved first and held (refs + 1 when it has a plan), or NULL.
 * Under the model's lock. */
static dec_shared *shared_find(tm_model *m, const char *key) {
    for (dec_shared **pp = &m->dec_plans; *pp; pp = &(*pp)->next) {
        dec_shared *e = *pp;
        if (strcmp(e->key, key)) continue;
        *pp = e->next;
        e->next = m->dec_plans;
        m->dec_plans = e;
        if (e->plan) e->refs++;
        return e;
    }
    return NULL;
}

/* Adds an entry (key and plan owned by it from here; plan NULL with why: a failure), held
 * once when it has a plan; or, when another thread added the same key meanwhile, frees
 * these and returns that one, held. NULL: out of memory (key and plan freed). */
static dec_shared *shared_add(tm_model *m, char *key, tm_plan *plan, const char *why) {
    pthread_mutex_lock(&m->cache_lock);
    dec_shared *e = shared_find(m, key);
    if (e) {
        pthread_mutex_unlock(&m->cache_lock);
        free(key);
        tm_plan_free(plan);
        return e;
    }
    e = calloc(1, sizeof *e);
    if (!e || (why && !(e->why = strdup(why)))) {
        pthread_mutex_unlock(&m->cache_lock);
        free(e);
        free(key);
        tm_plan_free(plan);
        return NULL;
    }
    e->key = key;
    e->plan = plan;
    e->refs = plan ? 1 : 0;
    e->next = m->dec_plans;
    m->dec_plans = e;
    m->n_dec_plans++;
    while (m->n_dec_plans > MAX_SHARED) {   /* the least recently used that nobody holds */
        dec_shared **victim = NULL;
        for (dec_shared **pp = &m->dec_plans; *pp; pp = &(*pp)->next)
            if ((*pp)->refs == 0 && *pp != e) victim = pp;
        if (!victim) break;
        dec_shared *v = *victim;
        *victim = v->next;
        shared_free(v);
        m->n_dec_plans--;
    }
    pthread_mutex_unlock(&m->cache_lock);
    return e;
}

/* Traces the generic plan of decode steps (n = 1, past = 2, 3, 4 ...) or of prompts (past
 * 0, n = 2, 3, 4 ...) into *plan. */
static tm_status trace_generic(tm_decoder *d, int prompt, tm_plan **plan, tm_error *err) {
    tm_xval *x[3] = {0};
    tm_status st = TM_OK;
    for (int j = 0; j < 3 && st == TM_OK; j++) {
        x[j] = prompt ? model_layout_inputs(d, 0, 2 + j) : model_layout_inputs(d, 2 + j, 1);
        if (!x[j]) st = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    }
    int pin = prompt ? d->ids : d->mask, pax = 1;
    if (!prompt && pin < 0)
        for (int i = 0; i < d->n_in && pin < 0; i++)
            if (d->present_of[i] >= 0 && !d->fixed[i]) {
                pin = i;
                pax = 2;
            }
    tm_plan_options po;
    const char *sn[1];
    const tm_tensor *sv[1];
    plan_options(d, &po, sn, sv);
    /* The static branch value is the samples' own. */
    if (d->branch >= 0) sv[0] = x[0][d->branch].t;
    if (st == TM_OK)
        st = tm__plan_generalize(d->m, d->n_in, d->names, x, &po, NULL, pin, pax, plan, err);
    for (int j = 0; j < 3; j++) free_xvals(x[j], d->n_in);
    return st;
}

/* Traces the plan of one shape (past, n) into *plan. */
static tm_status trace_shaped(tm_decoder *d, int64_t past, int64_t n, tm_plan **plan,
                              tm_error *err) {
    tm_xval *x = model_layout_inputs(d, past, n);
    if (!x) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    const tm_tensor **t = calloc((size_t)d->n_in + 1, sizeof *t);
    tm_status st = t ? TM_OK : tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; t && i < d->n_in; i++) t[i] = x[i].t;
    tm_plan_options po;
    const char *sn[1];
    const tm_tensor *sv[1];
    plan_options(d, &po, sn, sv);
    if (d->branch >= 0) sv[0] = x[d->branch].t;
    if (st == TM_OK) st = tm_plan_create(d->m, d->n_in, d->names, t, &po, plan, err);
    free(t);
    free_xvals(x, d->n_in);
    return st;
}

/* out's plan of kind at (past, n): the model's shared one, or traced now and shared
 * (*made = 1). A generic plan the graph did not allow, now or before, is
 * TM_ERR_UNSUPPORTED with the reason. */
static tm_status obtain_plan(tm_decoder *d, char kind, int64_t past, int64_t n, dec_plan *out,
                             int *made, tm_error *err) {
    *made = 0;
    char *key = shared_key(d, kind, past, n);
    if (!key) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    pthread_mutex_lock(&d->m->cache_lock);
    dec_shared *e = shared_find(d->m, key);
    pthread_mutex_unlock(&d->m->cache_lock);
    if (!e) {
        tm_plan *plan = NULL;
        tm_status st = kind == 's' ? trace_shaped(d, past, n, &plan, err)
                                   : trace_generic(d, kind == 'p', &plan, err);
        if (st == TM_ERR_NO_MEMORY || (st != TM_OK && kind == 's')) {
            free(key);
            return st;
        }
        *made = 1;
        e = shared_add(d->m, key, st == TM_OK ? plan : NULL,
                       st == TM_OK ? NULL : err && err->message[0] ? err->message : "no generic plan");
        if (!e) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    } else {
        free(key);
    }
    if (!e->plan)
        return tm__fail(err, TM_ERR_UNSUPPORTED, "%s", e->why);
    out->plan = e->plan;
    out->shared = e;
    return TM_OK;
}

/* The generic plan of decode steps or of prompts, with the decoder's session. */
static tm_status make_generic(tm_decoder *d, int prompt, dec_plan *out, int *made,
                              tm_error *err) {
    tm_status st = obtain_plan(d, prompt ? 'p' : 'd', 0, 0, out, made, err);
    if (st == TM_OK) st = learn_kv(d, out, err);
    if (st == TM_OK) st = tm_session_create(out->plan, &out->session, err);
    /* Decode steps up to the capacity then bind without allocating. */
    if (st == TM_OK && !prompt) st = reserve_steps(d, out->session, err);
    if (st != TM_OK) plan_clear(d->m, out);
    out->past = out->seq = -1;
    return st;
}

static tm_status make_shaped(tm_decoder *d, int64_t past, int64_t n, dec_plan *out, int *made,
                             tm_error *err) {
    tm_status st = obtain_plan(d, 's', past, n, out, made, err);
    if (st == TM_OK) st = learn_kv(d, out, err);
    if (st == TM_OK) st = tm_session_create(out->plan, &out->session, err);
    if (st != TM_OK) plan_clear(d->m, out);
    out->past = past;
    out->seq = n;
    return st;
}

/* Counts into the model's tm_plan_stats. */
static void count(tm_model *m, size_t *field) {
    pthread_mutex_lock(&m->cache_lock);
    (*field)++;
    pthread_mutex_unlock(&m->cache_lock);
}

static tm_status plan_for(tm_decoder *d, int64_t past, int64_t n, dec_plan **out,
                          tm_error *err) {
    int generic_ok = !getenv("TM_GENERIC") || strcmp(getenv("TM_GENERIC"), "0");
    if (generic_ok && n == 1 && past >= 2) {
        if (!d->decode.plan && d->decode.past != -2) {
            tm_error e2;
            memset(&e2, 0, sizeof e2);
            int made = 0;
            if (make_generic(d, 0, &d->decode, &made, &e2) != TM_OK) {
                if (e2.code == TM_ERR_NO_MEMORY) {
                    tm__error_copy(err, &e2);
                    return e2.code;
                }
                if (getenv("TM_GENERIC_DEBUG"))
                    fprintf(stderr, "transmuter: decoder: no generic decode plan: %s\n", e2.message);
                d->decode.past = -2;   /* the graph does not allow it: plans per shape */
                if (made) count(d->m, &d->m->n_generic_failed);
            } else if (made) {
                count(d->m, &d->m->n_generic);
            }
        }
        if (d->decode.plan) {
            *out = &d->decode;
            return TM_OK;
        }
    }
    /* Prompts: the first length gets a plan of its own (one trace, not three: the time to
     * the first token), a second length the generic plan. */
    int other_prompt = 0;
    for (int i = 0; i < d->n_shaped; i++)
        other_prompt |= d->shaped[i].past == 0 && d->shaped[i].seq >= 2 && d->shaped[i].seq != n;
    if (generic_ok && past == 0 && n >= 2 && (other_prompt || d->prefill.plan)) {
        if (!d->prefill.plan && d->prefill.past != -2) {
            tm_error e2;
            memset(&e2, 0, sizeof e2);
            int made = 0;
            if (make_generic(d, 1, &d->prefill, &made, &e2) != TM_OK) {
                if (e2.code == TM_ERR_NO_MEMORY) {
                    tm__error_copy(err, &e2);
                    return e2.code;
                }
                if (getenv("TM_GENERIC_DEBUG"))
                    fprintf(stderr, "transmuter: decoder: no generic prompt plan: %s\n", e2.message);
                d->prefill.past = -2;
                if (made) count(d->m, &d->m->n_generic_failed);
            } else if (made) {
                count(d->m, &d->m->n_generic);
            }
        }
        if (d->prefill.plan) {
            *out = &d->prefill;
            return TM_OK;
        }
    }
    for (int i = 0; i < d->n_shaped; i++)
        if (d->shaped[i].past == past && d->shaped[i].seq == n) {
            *out = &d->shaped[i];
            return TM_OK;
        }
    dec_plan *slot;
    if (d->n_shaped < N_SHAPED) slot = &d->shaped[d->n_shaped++];
    else {
        slot = &d->shaped[d->next_shaped];
        d->next_shaped = (d->next_shaped + 1) % N_SHAPED;
        plan_clear(d->m, slot);
    }
    int made = 0;
    tm_status st = make_shaped(d, past, n, slot, &made, err);
    if (st == TM_OK && made) count(d->m, &d->m->n_plans);
    if (st != TM_OK) {
        /* Keep the table dense: the failed slot is the last or is refilled later. */
        slot->past = slot->seq = -3;
        return st;
    }
    *out = slot;
    return TM_OK;
}

tm_status tm_decoder_create(tm_model *model, const tm_decoder_options *opts, tm_decoder **out,
                            tm_error *err) {
    if (!model || !out) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_decoder_create: NULL argument");
    tm_decoder_options o;
    tm_decoder_options_default(&o);
    if (opts) memcpy(&o, opts, opts->size && opts->size < sizeof o ? opts->size : sizeof o);
    tm_decoder *d = calloc(1, sizeof *d);
    if (!d) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    d->m = model;
    if (o.batch < 0 || o.batch > 4096) {
        free(d);
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_decoder_create: batch %lld is not "
                        "between 1 and 4096", (long long)o.batch);
    }
    d->batch = o.batch ? o.batch : 1;
    d->in_place = o.kv_in_place != 0;
    d->last_only = o.last_logits_only != 0;
    d->kv_dtype = o.kv_dtype == TM_FLOAT16 ? TM_FLOAT16 : TM_UNDEFINED;
    d->n_in = tm_model_n_inputs(model);
    d->n_out = tm_model_n_outputs(model);
    d->ids = tm_model_input_index(model, "input_ids");
    d->mask = tm_model_input_index(model, "attention_mask");
    d->positions = tm_model_input_index(model, "position_ids");
    d->branch = tm_model_input_index(model, "use_cache_branch");
    d->logits = tm_model_output_index(model, "logits");
    size_t n = (size_t)d->n_in + 1;
    d->names = calloc(n, sizeof *d->names);
    d->present_of = calloc(n, sizeof *d->present_of);
    d->kv = calloc(n, sizeof *d->kv);
    d->heads = calloc(n, sizeof *d->heads);
    d->width = calloc(n, sizeof *d->width);
    d->elem = calloc(n, sizeof *d->elem);
    d->buf = calloc(n, sizeof *d->buf);
    d->t = calloc(n, sizeof *d->t);
    d->fixed = calloc(n, 1);
    d->given = calloc(n, sizeof *d->given);
    d->seen = calloc((size_t)d->batch, sizeof *d->seen);
    d->row_free = calloc((size_t)d->batch, 1);
    d->enc_len = -1;
    int64_t one = 1;
    d->t_branch = tm_tensor_alloc(TM_BOOL, 1, &one, NULL);
    tm_status st = TM_OK;
    if (!d->names || !d->present_of || !d->kv || !d->heads || !d->width || !d->elem ||
        !d->buf || !d->t || !d->t_branch || !d->fixed || !d->given || !d->seen || !d->row_free)
        st = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    if (st == TM_OK && o.kv_dtype != TM_UNDEFINED && o.kv_dtype != TM_FLOAT && o.kv_dtype != TM_FLOAT16)
        st = tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_decoder_options.kv_dtype is %s: the "
                      "cache is kept in float32 or float16", tm_dtype_name(o.kv_dtype));
    if (st == TM_OK && d->ids < 0)
        st = tm__fail(err, TM_ERR_UNSUPPORTED, "the model has no input 'input_ids': a decoder "
                      "takes token ids");
    int n_cache = 0;
    for (int i = 0; st == TM_OK && i < d->n_in; i++) {
        tm_value_desc in;
        tm_model_input(model, i, &in);
        d->names[i] = in.name;
        d->present_of[i] = -1;
        d->kv[i] = -1;
        if (i == d->ids || i == d->mask || i == d->positions || i == d->branch) continue;
        if (!past_name(in.name)) {
            /* encoder_hidden_states and the like: the caller gives them. */
            if (!strstr(in.name, "encoder")) {
                st = tm__fail(err, TM_ERR_UNSUPPORTED, "input '%s' is not one a decoder takes "
                              "(input_ids, attention_mask, position_ids, use_cache_branch, "
                              "past_key_values.* with present.* outputs, encoder_* given with "
                              "tm_decoder_set_input)", in.name);
                break;
            }
            continue;
        }
        if ((d->present_of[i] = present_index(model, in.name)) < 0) {
            st = tm__fail(err, TM_ERR_UNSUPPORTED, "input '%s' has no present output to take "
                          "back (present%s)", in.name, in.name + (in.name[4] == '.' ? 4 : 15));
            break;
        }
        d->fixed[i] = strstr(in.name, ".encoder.") != NULL;
        if (in.rank != 4 || in.dims[1] < 1 || in.dims[3] < 1) {
            st = tm__fail(err, TM_ERR_UNSUPPORTED, "cache input '%s' is not (batch, heads, "
                          "length, width) with the heads and width fixed", in.name);
            break;
        }
        d->heads[i] = in.dims[1];
        d->width[i] = in.dims[3];
        d->elem[i] = tm_dtype_elem_size(in.dtype);
        /* Sized for float16 at first when asked (the first plan tells, learn_kv). */
        if (d->in_place && d->kv_dtype == TM_FLOAT16 && in.dtype == TM_FLOAT && !d->fixed[i])
            d->elem[i] = 2;
        n_cache++;
    }
    if (st == TM_OK && d->logits < 0)
        st = tm__fail(err, TM_ERR_UNSUPPORTED, "the model has no output 'logits'");
    if (st == TM_OK && !n_cache)
        st = tm__fail(err, TM_ERR_UNSUPPORTED, "the model takes no past_key_values.* inputs: "
                      "a decoder steps an export that takes its cache back "
                      "(decoder_model_merged.onnx, decoder_with_past_model.onnx)");
    int64_t cap = o.capacity > 0 ? o.capacity : 256;
    /* Layouts are known once a plan exists: buffers first sized for either. */
    if (st == TM_OK) st = reserve(d, cap, err);
    if (st != TM_OK) {
        tm_decoder_free(d);
        return st;
    }
    *out = d;
    return TM_OK;
}

int64_t tm_decoder_length(const tm_decoder *d) { return d ? d->length : 0; }

void tm_decoder_reset(tm_decoder *d) {
    if (!d) return;
    if (d->padded)   /* the mask back to all ones */
        for (int64_t k = 0; k < d->batch * d->capacity; k++) {
            d->mask_buf[k] = 1;
            d->mask32[k] = 1;
        }
    d->padded = 0;
    memset(d->seen, 0, (size_t)d->batch * sizeof *d->seen);
    memset(d->row_free, 0, (size_t)d->batch);
    d->length = 0;
    d->last_logits = NULL;
    d->pending = NULL;   /* that prompt's cache is dropped with it */
}

const tm_tensor *tm_decoder_logits(const tm_decoder *d) { return d ? d->last_logits : NULL; }

/* The presents of a run of plan p (on past, n tokens) that it did not write in place,
 * into the buffers: which 0 all, 1 the encoder's caches only, 2 all but those. */
static tm_status take_presents(tm_decoder *d, dec_plan *p, int64_t past, int64_t n, int which,
                               tm_error *err) {
    /* Caches not kept in place: their present (B, H, P + n, D) becomes the next past, in
     * the buffer's layout. */
    for (int i = 0; i < d->n_in; i++) {
        if (d->present_of[i] < 0 || p->mode[i] == KV_IN_PLACE) continue;
        const tm_tensor *pr = tm_session_result(p->session, d->present_of[i]);
        if (d->fixed[i] ? which == 2 : which == 1) continue;
        if (d->fixed[i]) {
            /* An encoder's cache: taken once, from the prompt's plan, then read as it is. */
            if (p->mode[i] != KV_FRESH) continue;
            size_t want = (size_t)(d->batch * d->heads[i] * d->enc_len * d->width[i]) * d->elem[i];
            if (!pr || pr->nbytes != want) {
                tm_value_desc od;
                tm_model_output(d->m, d->present_of[i], &od);
                return tm__fail(err, TM_ERR_SHAPE, "output '%s' is not (%lld, %lld, %lld, %lld)",
                                od.name, (long long)d->batch, (long long)d->heads[i],
                                (long long)d->enc_len, (long long)d->width[i]);
            }
            memcpy(d->buf[i], pr->data, want);
            continue;
        }
        int64_t b_n = d->batch, h_n = d->heads[i], d_n = d->width[i], t_n = past + n;
        size_t es = d->elem[i];
        tm_value_desc in;
        tm_model_input(d->m, i, &in);
        /* A float32 present into a float16 buffer: converted (kv_dtype). */
        int half = buffer_dtype(d, i, in.dtype) != in.dtype;
        size_t want = (size_t)(b_n * h_n * t_n * d_n) * tm_dtype_elem_size(in.dtype);
        if (!pr || pr->nbytes != want) {
            tm_value_desc od;
            tm_model_output(d->m, d->present_of[i], &od);
            return tm__fail(err, TM_ERR_SHAPE, "output '%s' is not the cache grown by %lld",
                            od.name, (long long)n);
        }
        if (d->kv[i] == 1) {
            /* (B, H, T, D) into (T, B, H, D). */
            for (int64_t bh = 0; bh < b_n * h_n; bh++)
                for (int64_t t = 0; t < t_n; t++) {
                    char *to = (char *)d->buf[i] + (size_t)((t * b_n * h_n + bh) * d_n) * es;
                    if (half)
                        tm__kvmath_active()->to_f16((const float *)pr->data + (bh * t_n + t) * d_n,
                                                    (uint16_t *)to, d_n);
                    else
                        memcpy(to, (const char *)pr->data + (size_t)((bh * t_n + t) * d_n) * es,
                               (size_t)d_n * es);
                }
        } else {
            memcpy(d->buf[i], pr->data, want);
        }
    }
    return TM_OK;
}

/* Drops the first `lead` positions, which no row attends to, from the caches and masks. */
static void drop_leading(tm_decoder *d, int64_t lead) {
    int64_t B = d->batch, keep = d->length - lead;
    for (int i = 0; i < d->n_in; i++) {
        if (d->present_of[i] < 0 || d->fixed[i]) continue;
        size_t es = d->elem[i], head = (size_t)d->width[i] * es;
        char *b = d->buf[i];
        if (d->kv[i] == 1) {
            size_t pos = (size_t)(B * d->heads[i]) * head;
            memmove(b, b + (size_t)lead * pos, (size_t)keep * pos);
        } else {   /* (B, H, P, D) packed at the length: each head's rows */
            for (int64_t bh = 0; bh < B * d->heads[i]; bh++)
                memmove(b + (size_t)(bh * keep) * head, b + (size_t)(bh * d->length + lead) * head,
                        (size_t)keep * head);
        }
    }
    for (int64_t r = 0; r < B; r++)
        memmove(d->rowmask + r * d->capacity, d->rowmask + r * d->capacity + lead, (size_t)keep);
    d->length = keep;
}

/* Row r's first attended position before `end` (end when none). */
static int64_t first_attended(const tm_decoder *d, int64_t r, int64_t end) {
    const uint8_t *m = d->rowmask + r * d->capacity;
    int64_t t = 0;
    while (t < end && !m[t]) t++;
    return t;
}

/* A padded decoder's leading positions that no row attends to any more (rows that ended
 * and were refilled leave them), dropped once they are half the cache: a copy of the rest,
 * so each position is moved at most about once on average. */
static void compact(tm_decoder *d) {
    int64_t lead = d->length;
    for (int64_t r = 0; r < d->batch && lead > 0; r++) lead = first_attended(d, r, lead);
    if (lead > d->length - 2) lead = d->length - 2;
    if (lead >= 32 && 2 * lead >= d->length) drop_leading(d, lead);
}

/* Fills the step's ids, positions and mask, (B, n) and (B, past + n), from tokens and the
 * new positions' mask (NULL: all attended); rows that no sequence holds attend to their
 * new position alone. The rows' counts are not advanced (done once the step has run). */
static void fill_step(tm_decoder *d, const int64_t *tokens, int64_t n, const uint8_t *mask) {
    int64_t B = d->batch, past = d->length, len = past + n;
    for (int64_t k = 0; k < B * n; k++) {
        d->ids_buf[k] = tokens[k];
        d->ids32[k] = (int32_t)tokens[k];
    }
    for (int64_t r = 0; r < B; r++) {
        uint8_t *rm = d->rowmask + r * d->capacity;
        int64_t seen = d->row_free[r] ? 0 : d->seen[r];
        if (d->row_free[r] && past > 0) rm[past - 1] = 0;
        for (int64_t k = 0; k < n; k++) {
            int on = d->row_free[r] ? k == n - 1 : !mask || mask[r * n + k];
            rm[past + k] = (uint8_t)on;
            /* transformers' positions: the attended ones counted from 0, padding at 1 */
            int64_t p = on ? seen++ : 1;
            d->pos_buf[r * n + k] = p;
            d->pos32[r * n + k] = (int32_t)p;
        }
    }
    if (!d->padded) return;
    for (int64_t r = 0; r < B; r++) {
        const uint8_t *rm = d->rowmask + r * d->capacity;
        for (int64_t t = 0; t < len; t++) {
            d->mask_buf[r * len + t] = rm[t];
            d->mask32[r * len + t] = rm[t];
        }
    }
}

static tm_status append_rows(tm_decoder *d, const int64_t *tokens, int64_t n,
                             const uint8_t *mask, tm_error *err);

tm_status tm_decoder_append(tm_decoder *d, const int64_t *tokens, int64_t n, tm_error *err) {
    if (!d || (n && !tokens) || n < 1)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_decoder_append: no tokens");
    if (d->batch != 1)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_decoder_append: the decoder holds %lld "
                        "sequences: tm_decoder_append_batch", (long long)d->batch);
    return append_rows(d, tokens, n, NULL, err);
}

tm_status tm_decoder_append_batch(tm_decoder *d, const int64_t *tokens, int64_t n,
                                  const uint8_t *mask, tm_error *err) {
    if (!d || !tokens || n < 1)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_decoder_append_batch: no tokens");
    return append_rows(d, tokens, n, mask, err);
}

static tm_status append_rows(tm_decoder *d, const int64_t *tokens, int64_t n,
                             const uint8_t *mask, tm_error *err) {
    for (int64_t k = 0; mask && !d->padded && k < d->batch * n; k++)
        if (!mask[k]) d->padded = 1;
    if (d->padded && d->positions >= 0) compact(d);   /* else positions count the cache */
    int64_t past = d->length;
    tm_status st = TM_OK;
    dec_plan *p = NULL;
    for (int i = 0; i < d->n_in; i++)
        if (d->present_of[i] < 0 && i != d->ids && i != d->mask && i != d->positions &&
            i != d->branch && !d->given[i])
            return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "input '%s' must be given first "
                            "(tm_decoder_set_input)", d->names[i]);
    /* The buffers' layouts are the decode steps' (in place or not). A first prompt whose
     * plan does not read the cache runs before they are known (its presents wait in its
     * session: the first token sooner); anything else needs the decode plan first. */
    if (!d->layout_known && !(past == 0 && !d->pending)) {
        st = plan_for(d, 2, 1, &p, err);
        if (st != TM_OK) return st;
        for (int i = 0; i < d->n_in; i++)
            if (d->present_of[i] >= 0 && d->kv[i] < 0) d->kv[i] = 0;
        d->layout_known = 1;
    }
    if (d->pending && d->layout_known) {
        st = take_presents(d, d->pending, d->pending_past, d->pending_n, 2, err);
        d->pending = NULL;
        if (st != TM_OK) return st;
    }
    st = reserve(d, past + n, err);
    if (st == TM_OK) st = plan_for(d, past, n, &p, err);
    if (st != TM_OK) return st;
    if (!d->layout_known) {
        int reads = 0;
        for (int i = 0; i < d->n_in; i++)
            reads |= d->present_of[i] >= 0 && !d->fixed[i] && p->mode[i] != KV_FRESH;
        if (reads) {   /* it reads the cache: the layouts first after all */
            dec_plan *dp = NULL;
            st = plan_for(d, 2, 1, &dp, err);
            if (st != TM_OK) return st;
            for (int i = 0; i < d->n_in; i++)
                if (d->present_of[i] >= 0 && d->kv[i] < 0) d->kv[i] = 0;
            d->layout_known = 1;
            st = plan_for(d, past, n, &p, err);
            if (st != TM_OK) return st;
        }
    }
    fill_step(d, tokens, n, mask);
    bind_step(d, past, n, d->in_place, p->mode);
    const tm_tensor *in_small[64];
    const tm_tensor **in = d->n_in <= 64 ? in_small : malloc((size_t)d->n_in * sizeof *in);
    if (!in) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    st = tm_session_run(p->session, d->n_in, d->names, step_inputs(d, in), NULL, err);
    if (in != in_small) free(in);
    if (st != TM_OK) return st;
    st = take_presents(d, p, past, n, d->layout_known ? 0 : 1, err);
    if (st != TM_OK) return st;
    if (!d->layout_known) {
        d->pending = p;
        d->pending_past = past;
        d->pending_n = n;
    }
    d->last_logits = tm_session_result(p->session, d->logits);
    d->length = past + n;
    for (int64_t r = 0; r < d->batch; r++) {
        const uint8_t *rm = d->rowmask + r * d->capacity;
        if (d->row_free[r]) d->seen[r] = 0;
        for (int64_t k = 0; k < n; k++) d->seen[r] += rm[past + k];
    }
    count(d->m, &d->m->n_runs);
    if (p->past == -1) count(d->m, &d->m->n_generic_runs);
    return TM_OK;
}

/* The layouts known and a first prompt's waiting presents taken: the whole state in the
 * buffers (what a copy reads). */
static tm_status settle(tm_decoder *d, tm_error *err) {
    tm_status st = TM_OK;
    if (!d->layout_known) {
        dec_plan *p = NULL;
        st = plan_for(d, 2, 1, &p, err);
        if (st != TM_OK) return st;
        for (int i = 0; i < d->n_in; i++)
            if (d->present_of[i] >= 0 && d->kv[i] < 0) d->kv[i] = 0;
        d->layout_known = 1;
    }
    if (d->pending) {
        st = take_presents(d, d->pending, d->pending_past, d->pending_n, 2, err);
        d->pending = NULL;
    }
    return st;
}

tm_status tm_decoder_copy_state(tm_decoder *dst, tm_decoder *src, tm_error *err) {
    if (!dst || !src)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_decoder_copy_state: NULL argument");
    if (dst == src) return TM_OK;
    if (dst->m != src->m)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_decoder_copy_state: the decoders "
                        "run different models");
    if (dst->batch != src->batch)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_decoder_copy_state: the decoders "
                        "hold %lld and %lld sequences", (long long)dst->batch, (long long)src->batch);
    if (dst->enc_len != src->enc_len)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_decoder_copy_state: the decoders "
                        "were given encoder inputs of different lengths (%lld and %lld)",
                        (long long)dst->enc_len, (long long)src->enc_len);
    if (src->length == 0) {
        tm_decoder_reset(dst);
        return TM_OK;
    }
    tm_status st = settle(src, err);
    if (st == TM_OK) st = settle(dst, err);
    for (int i = 0; st == TM_OK && i < src->n_in; i++)
        if (src->present_of[i] >= 0 && !src->fixed[i] &&
            (src->kv[i] != dst->kv[i] || src->elem[i] != dst->elem[i]))
            st = tm__fail(err, TM_ERR_UNSUPPORTED, "tm_decoder_copy_state: the decoders keep "
                          "cache '%s' in different layouts (kv_in_place or kv_dtype differs)",
                          src->names[i]);
    if (st == TM_OK) st = reserve(dst, src->length, err);
    if (st != TM_OK) return st;
    for (int i = 0; i < src->n_in; i++) {
        if (src->present_of[i] < 0) continue;
        /* Both layouts hold the cache's rows from the buffer's start: (P, B, H, D), or
         * (B, H, P, D) packed at the current length. */
        int64_t len = src->fixed[i] ? src->enc_len : src->length;
        memcpy(dst->buf[i], src->buf[i],
               (size_t)(len * src->batch * src->heads[i] * src->width[i]) * src->elem[i]);
    }
    if (src->padded && !dst->padded) {
        dst->padded = 1;
    } else if (!src->padded && dst->padded) {
        for (int64_t k = 0; k < dst->batch * dst->capacity; k++) {
            dst->mask_buf[k] = 1;
            dst->mask32[k] = 1;
        }
        dst->padded = 0;
    }
    for (int64_t r = 0; r < src->batch; r++)
        memcpy(dst->rowmask + r * dst->capacity, src->rowmask + r * src->capacity, (size_t)src->length);
    memcpy(dst->seen, src->seen, (size_t)src->batch * sizeof *dst->seen);
    memcpy(dst->row_free, src->row_free, (size_t)src->batch);
    dst->length = src->length;
    dst->last_logits = NULL;
    return TM_OK;
}

tm_status tm_decoder_set_input(tm_decoder *d, const char *name, const tm_tensor *value,
                               tm_error *err) {
    if (!d || !name || !value)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_decoder_set_input: NULL argument");
    int i = tm_model_input_index(d->m, name);
    if (i < 0 || d->present_of[i] >= 0 || i == d->ids || i == d->mask || i == d->positions ||
        i == d->branch)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "'%s' is not an input the decoder takes "
                        "from its caller", name);
    if (value->rank < 2)
        return tm__fail(err, TM_ERR_SHAPE, "input '%s' must be (batch, length, ...)", name);
    tm_tensor *copy = tm_tensor_clone(value, NULL);
    if (!copy) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    int64_t e = value->dims[1];
    /* The encoder's caches, sized by its length: new buffers when it changes; plans made
     * for another length are dropped. */
    if (e != d->enc_len) {
        for (int k = 0; k < d->n_in; k++) {
            if (d->present_of[k] < 0 || !d->fixed[k]) continue;
            void *nb = calloc((size_t)(d->batch * d->heads[k] * e * d->width[k]), d->elem[k]);
            if (!nb) {
                tm_tensor_free(copy);
                return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
            }
            free(d->buf[k]);
            d->buf[k] = nb;
        }
        plan_clear(d->m, &d->decode);
        plan_clear(d->m, &d->prefill);
        for (int k = 0; k < d->n_shaped; k++) plan_clear(d->m, &d->shaped[k]);
        d->n_shaped = 0;
        d->next_shaped = 0;
        d->layout_known = 0;
        d->pending = NULL;
        for (int k = 0; k < d->n_in; k++) d->kv[k] = -1;
        d->length = 0;
        d->last_logits = NULL;
        d->enc_len = e;
    }
    tm_tensor_free(d->given[i]);
    d->given[i] = copy;
    return TM_OK;
}

int64_t tm_decoder_batch(const tm_decoder *d) { return d ? d->batch : 0; }

/* ---- Rows filled and freed between steps (tm_batch's continuous batching) ------------ */

tm_status tm__decoder_put_row(tm_decoder *d, int64_t row, tm_decoder *src, int64_t src_row,
                              tm_error *err) {
    if (!d || !src || d == src || row < 0 || row >= d->batch || src_row < 0 ||
        src_row >= src->batch || src->m != d->m)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "decoder row: a row of the batch and a "
                        "row of another decoder of the same model are needed");
    for (int i = 0; i < d->n_in; i++)
        if (d->given[i] || src->given[i])
            return tm__fail(err, TM_ERR_UNSUPPORTED, "decoder row: encoder inputs ('%s') are "
                            "not carried between batches", d->names[i]);
    /* The source row's positions from its first attended one (its leading padding stays). */
    const uint8_t *srm = src->rowmask + src_row * src->capacity;
    int64_t first = first_attended(src, src_row, src->length);
    if (src->length - first < 1 || src->row_free[src_row])
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "decoder row: the sequence is empty");
    int src_padded = 0;
    for (int64_t t = first; t < src->length; t++) src_padded |= !srm[t];
    tm_status st = settle(src, err);
    if (st == TM_OK) st = settle(d, err);
    for (int i = 0; st == TM_OK && i < d->n_in; i++)
        if (d->present_of[i] >= 0 && (d->kv[i] != 1 || src->kv[i] != 1))
            st = tm__fail(err, TM_ERR_UNSUPPORTED, "decoder row: cache '%s' is not kept in "
                          "place, which moving sequences between batches needs", d->names[i]);
        else if (d->present_of[i] >= 0 && d->elem[i] != src->elem[i])
            st = tm__fail(err, TM_ERR_INVALID_ARGUMENT, "decoder row: cache '%s' is held in "
                          "another precision in the batch (kv_dtype differs)", d->names[i]);
    /* No other row held: the batch starts again at this sequence's length. */
    int others = 0;
    for (int64_t r = 0; r < d->batch; r++) others |= r != row && !d->row_free[r];
    if (!others) d->length = 0;
    int64_t ls = src->length - first, L = d->length > ls ? d->length : ls;
    if (st == TM_OK && d->positions < 0 && ((others && ls != d->length) || src_padded || first))
        st = tm__fail(err, TM_ERR_UNSUPPORTED, "decoder row: the export takes no position_ids "
                      "(it numbers positions by the cache's length), so a sequence of %lld "
                      "positions cannot join a batch of %lld", (long long)ls, (long long)d->length);
    if (st == TM_OK) st = reserve(d, L + 1, err);
    if (st != TM_OK) return st;
    int64_t B = d->batch, shift = L - d->length;
    if (shift > 0) {   /* the other rows move up: their new first positions are padding */
        for (int i = 0; i < d->n_in; i++) {
            if (d->present_of[i] < 0) continue;
            size_t pos = (size_t)(B * d->heads[i] * d->width[i]) * d->elem[i];
            char *b = d->buf[i];
            memmove(b + (size_t)shift * pos, b, (size_t)d->length * pos);
            memset(b, 0, (size_t)shift * pos);
        }
        for (int64_t r = 0; r < B; r++) {
            uint8_t *rm = d->rowmask + r * d->capacity;
            memmove(rm + shift, rm, (size_t)d->length);
            memset(rm, 0, (size_t)shift);
        }
        d->length = L;
    }
    int64_t at = L - ls, SB = src->batch;
    for (int i = 0; i < d->n_in; i++) {
        if (d->present_of[i] < 0) continue;
        size_t row_bytes = (size_t)(d->heads[i] * d->width[i]) * d->elem[i];
        char *b = d->buf[i];
        for (int64_t t = 0; t < L; t++) {
            char *dst = b + (size_t)(t * B + row) * row_bytes;
            if (t < at) memset(dst, 0, row_bytes);   /* padding: never read, zeroed all the same */
            else memcpy(dst, (const char *)src->buf[i] + (size_t)((t - at + first) * SB + src_row) * row_bytes,
                        row_bytes);
        }
    }
    uint8_t *rm = d->rowmask + row * d->capacity;
    memset(rm, 0, (size_t)at);
    memcpy(rm + at, srm + first, (size_t)ls);
    d->seen[row] = src->seen[src_row];
    d->row_free[row] = 0;
    if (at > 0 || src_padded) d->padded = 1;
    d->last_logits = NULL;
    return TM_OK;
}

void tm__decoder_free_row(tm_decoder *d, int64_t row) {
    if (!d || row < 0 || row >= d->batch) return;
    memset(d->rowmask + row * d->capacity, 0, (size_t)d->length);
    d->seen[row] = 0;
    d->row_free[row] = 1;
    d->padded = 1;
}
