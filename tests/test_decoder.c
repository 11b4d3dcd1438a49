/* tm_decoder (src/runtime/decoder.c, included for its insides): the tiny decoder exports
 * stepped token by token, each step's logits against an eager run fed its own cache; the
 * decode steps served by one generic plan that keeps every cache in place (KV_APPEND, the
 * present output in the decoder's buffer: no copy) and allocates nothing once made; the
 * cache growing past its first capacity; a reset sequence equal to the first; the cache
 * copied each step when asked; errors for exports that are not decoders. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../src/runtime/decoder.c"
#include "check.h"
#include "count_allocs.h"

static const int64_t tokens[] = {3, 17, 5, 42, 8, 1, 29, 11, 50, 2, 33, 7, 19, 23, 4, 9, 40, 12, 6, 31};
enum { N_TOKENS = 20 };
static int64_t n_prompt = 5;   /* the first append's length */
static tm_dtype loop_kv_dtype = TM_UNDEFINED;   /* run_loop's tm_decoder_options.kv_dtype */

static double norm_err(const tm_tensor *a, const tm_tensor *b) {
    if (!a || !b || a->rank != b->rank || memcmp(a->dims, b->dims, (size_t)a->rank * sizeof a->dims[0]))
        return INFINITY;
    double diff = 0, scale = 0;
    int64_t n = tm_numel(a->rank, a->dims);
    for (int64_t e = 0; e < n; e++) {
        double x = tm_load_f64(a->data, a->dtype, (size_t)e), y = tm_load_f64(b->data, b->dtype, (size_t)e);
        if (!(fabs(x - y) <= diff)) diff = fabs(x - y);
        if (fabs(y) > scale) scale = fabs(y);
    }
    return scale ? diff / scale : diff;
}

/* The reference: eager runs, the presents fed back as the next past. */
typedef struct ref_loop {
    tm_model *m;
    int n_in;
    tm_tensor **past;     /* per input */
} ref_loop;

static tm_tensor *row(tm_dtype dt, const int64_t *v, int64_t n) {
    int64_t dims[2] = {1, n};
    tm_tensor *t = tm_tensor_new(dt, 2, dims);
    for (int64_t k = 0; k < n; k++) tm_store_i64(t->data, dt, (size_t)k, v[k]);
    return t;
}

/* An encoder's output for the encoder-decoder exports (Whisper): (1, 6, 32). */
static tm_tensor *encoder_states(void) {
    static tm_tensor *t;
    if (!t) {
        int64_t dims[3] = {1, 6, 32};
        t = tm_tensor_new(TM_FLOAT, 3, dims);
        float *v = t->data;
        for (int e = 0; e < 6 * 32; e++) v[e] = (float)((e * 37 % 101) - 50) / 50.0f;
    }
    return t;
}

static tm_tensor *ref_step(ref_loop *r, const int64_t *tok, int64_t n, int64_t past) {
    const char *names[64];
    const tm_tensor *in[64];
    tm_tensor *own[64] = {0};
    int64_t vals[256];
    for (int i = 0; i < r->n_in; i++) {
        tm_value_desc d;
        tm_model_input(r->m, i, &d);
        names[i] = d.name;
        if (!strcmp(d.name, "input_ids")) own[i] = row(d.dtype, tok, n);
        else if (!strcmp(d.name, "attention_mask")) {
            for (int64_t k = 0; k < past + n; k++) vals[k] = 1;
            own[i] = row(d.dtype, vals, past + n);
        } else if (!strcmp(d.name, "position_ids")) {
            for (int64_t k = 0; k < n; k++) vals[k] = past + k;
            own[i] = row(d.dtype, vals, n);
        } else if (!strcmp(d.name, "use_cache_branch")) {
            int64_t one = 1;
            own[i] = tm_tensor_new(TM_BOOL, 1, &one);
            *(uint8_t *)own[i]->data = past > 0;
        }
        in[i] = own[i] ? own[i] : !strcmp(d.name, "encoder_hidden_states") ? encoder_states()
                                                                          : r->past[i];
    }
    int n_out = tm_model_n_outputs(r->m);
    tm_tensor *out[64] = {0};
    tm_error err = {0};
    tm_status st = tm_run_eager(r->m, r->n_in, names, in, out, NULL, &err);
    CHECK(st == TM_OK, "eager reference: %s", err.message);
    tm_tensor *logits = NULL;
    for (int o = 0; o < n_out; o++) {
        tm_value_desc d;
        tm_model_output(r->m, o, &d);
        if (!strcmp(d.name, "logits")) {
            logits = out[o];
            out[o] = NULL;
        }
    }
    for (int i = 0; i < r->n_in; i++) {
        tm_tensor_free(own[i]);
        int pi = present_index(r->m, names[i]);
        /* An encoder's cache comes from the prompt's step and is kept as it is. */
        if (strstr(names[i], ".encoder.") && past > 0) continue;
        if (!own[i] && past_name(names[i]) && pi >= 0) {
            tm_tensor_free(r->past[i]);
            r->past[i] = out[pi];
            out[pi] = NULL;
        }
    }
    for (int o = 0; o < n_out; o++) tm_tensor_free(out[o]);
    return logits;
}

static void ref_init(ref_loop *r, tm_model *m) {
    r->m = m;
    r->n_in = tm_model_n_inputs(m);
    r->past = calloc((size_t)r->n_in, sizeof *r->past);
    for (int i = 0; i < r->n_in; i++) {
        tm_value_desc d;
        tm_model_input(m, i, &d);
        if (!past_name(d.name)) continue;
        int64_t dims[4] = {1, d.dims[1], 0, d.dims[3]};
        r->past[i] = tm_tensor_new(d.dtype, 4, dims);
    }
}

static void ref_free(ref_loop *r) {
    for (int i = 0; i < r->n_in; i++) tm_tensor_free(r->past[i]);
    free(r->past);
}

/* The whole loop, step by step against the reference; returns the decoder for the
 * caller's checks (NULL on failure). */
static void run_loop(const char *path, int in_place, int64_t capacity, double tol,
                     int fused) {
    tm_model *m = NULL;
    tm_error err = {0};
    tm_load_options lo;
    tm_load_options_default(&lo);
    lo.threads = 1;
    if (tm_model_load(path, &lo, &m, &err) != TM_OK) {
        CHECK(0, "%s: %s", path, err.message);
        return;
    }
    tm_decoder_options o;
    tm_decoder_options_default(&o);
    o.kv_in_place = in_place;
    o.capacity = capacity;
    o.kv_dtype = loop_kv_dtype;
    tm_decoder *d = NULL;
    tm_status st = tm_decoder_create(m, &o, &d, &err);
    CHECK(st == TM_OK, "%s: %s", path, err.message);
    if (st != TM_OK) {
        tm_model_free(m);
        return;
    }
    if (tm_model_input_index(m, "encoder_hidden_states") >= 0) {
        int64_t one = 1;
        CHECK(tm_decoder_append(d, &one, 1, &err) != TM_OK &&
              strstr(err.message, "encoder_hidden_states"), "%s: an append before the encoder's "
              "output is given is refused (%s)", path, err.message);
        st = tm_decoder_set_input(d, "encoder_hidden_states", encoder_states(), &err);
        CHECK(st == TM_OK, "%s: set_input: %s", path, err.message);
    }
    tm_tensor *first[N_TOKENS] = {0};
    for (int pass = 0; pass < 2; pass++) {   /* the second after a reset */
        ref_loop r;
        ref_init(&r, m);
        tm_decoder_reset(d);
        int64_t at = 0;
        for (int k = 0; at < N_TOKENS; k++) {
            /* A prompt, decode steps, then a chunk of three (a plan of its own shape). */
            int64_t n = k == 0 ? n_prompt : k == 9 ? 3 : 1;
            long before = process_allocs;
            st = tm_decoder_append(d, tokens + at, n, &err);
            long allocs = process_allocs - before;
            CHECK(st == TM_OK, "%s step %d: %s", path, k, err.message);
            if (st != TM_OK) break;
            /* Once the decode plan exists (and the cache need not grow), nothing is allocated. */
            if (COUNTING_ALLOCS && k >= 3 && k != 9 && at + n <= capacity && capacity > 0)
                CHECK(allocs == 0, "%s step %d (past %lld): %ld allocations", path, k,
                      (long long)at, allocs);
            tm_tensor *want = ref_step(&r, tokens + at, n, at);
            const tm_tensor *got = tm_decoder_logits(d);
            double e = norm_err(got, want);
            CHECK(e <= tol, "%s step %d (past %lld, in place %d, kv %s): logits %g from eager",
                  path, k, (long long)at, in_place, tm_dtype_name(loop_kv_dtype), e);
            if (getenv("TM_TEST_VERBOSE") && k < 12)
                printf("%s k %d kv %s: %g\n", path, k, tm_dtype_name(loop_kv_dtype), e);
            if (pass == 0) first[k] = tm_tensor_clone(got, NULL);
            else CHECK(norm_err(got, first[k]) == 0, "%s step %d: the sequence after a reset "
                       "differs", path, k);
            if (k == 9) CHECK(d->n_shaped >= 1, "%s: a chunk of 3 made no plan of its own", path);
            tm_tensor_free(want);
            at += n;
        }
        CHECK(tm_decoder_length(d) == N_TOKENS, "%s: length %lld", path,
              (long long)tm_decoder_length(d));
        ref_free(&r);
    }
    /* The decode steps: one generic plan; in place, each present is the decoder's buffer. */
    CHECK(d->decode.plan && d->decode.plan->gen, "%s: decode steps have no generic plan", path);
    for (int i = 0; d->decode.plan && i < d->n_in; i++) {
        if (d->present_of[i] < 0) continue;
        if (d->fixed[i]) {   /* an encoder's cache: read as it is, never copied back */
            CHECK(d->decode.mode[i] == KV_COPY, "%s: encoder cache '%s' mode %d", path,
                  d->names[i], d->decode.mode[i]);
            continue;
        }
        const tm_tensor *pr = tm_session_result(d->decode.session, d->present_of[i]);
        if (in_place && fused) {
            CHECK(d->decode.mode[i] == KV_IN_PLACE, "%s: cache '%s' not kept in place", path,
                  d->names[i]);
            CHECK(pr && pr->data == d->buf[i], "%s: present of '%s' is not the cache buffer",
                  path, d->names[i]);
            /* kv_dtype float16: the buffer, the plan's past input and its present so. */
            tm_value_desc in;
            tm_model_input(m, i, &in);
            int half = loop_kv_dtype == TM_FLOAT16 && in.dtype == TM_FLOAT;
            CHECK(d->elem[i] == (half ? 2u : tm_dtype_elem_size(in.dtype)) &&
                  d->decode.plan->input_dtype[i] == (half ? TM_FLOAT16 : in.dtype) &&
                  pr && pr->dtype == (half ? TM_FLOAT16 : in.dtype),
                  "%s: cache '%s' kept in %s (elem %zu), asked %s", path, d->names[i],
                  tm_dtype_name(d->decode.plan->input_dtype[i]), d->elem[i],
                  tm_dtype_name(loop_kv_dtype));
        } else {
            CHECK(d->decode.mode[i] == KV_COPY, "%s: cache '%s' is not copied back (mode %d, "
                  "in place %d)", path, d->names[i], d->decode.mode[i], in_place);
        }
    }
    for (int k = 0; k < N_TOKENS; k++) tm_tensor_free(first[k]);
    tm_decoder_free(d);
    tm_model_free(m);
}

static void expect_refused(const char *path, const char *part) {
    tm_model *m = NULL;
    tm_error err = {0};
    if (tm_model_load(path, NULL, &m, &err) != TM_OK) {
        CHECK(0, "%s: %s", path, err.message);
        return;
    }
    tm_decoder *d = NULL;
    tm_status st = tm_decoder_create(m, NULL, &d, &err);
    CHECK(st != TM_OK && strstr(err.message, part), "%s: refused with '%s' (got: %s)", path, part,
          err.message);
    tm_decoder_free(d);
    tm_model_free(m);
}

/* KV_APPEND on its own: in another buffer and in place, batches 1 and 3 (position-major:
 * nothing moves in place whatever the batch), against the concat it replaces. */
static void test_kv_append_kernel(void) {
    for (int b_n = 1; b_n <= 3; b_n += 2)
        for (int same = 0; same <= 1; same++) {
            int64_t p_n = 5, s_n = 2, h_n = 3, d_n = 4, t_n = p_n + s_n;
            int64_t cdims[4] = {p_n, b_n, h_n, d_n}, xdims[4] = {b_n, h_n, s_n, d_n};
            int64_t ydims[4] = {t_n, b_n, h_n, d_n};
            tm_tensor *cache = tm_tensor_new(TM_FLOAT, 4, cdims), *x = tm_tensor_new(TM_FLOAT, 4, xdims);
            tm_tensor *y = tm_tensor_new(TM_FLOAT, 4, ydims);
            float *cd = cache->data, *xd = x->data;
            for (int64_t e = 0; e < b_n * p_n * h_n * d_n; e++) cd[e] = (float)(e + 1);
            for (int64_t e = 0; e < b_n * h_n * s_n * d_n; e++) xd[e] = (float)(-e - 1);
            /* The expected (T, B, H, D): past positions then the new ones transposed. */
            float *want = calloc((size_t)(b_n * t_n * h_n * d_n), sizeof *want);
            for (int64_t b = 0; b < b_n; b++)
                for (int64_t t = 0; t < t_n; t++)
                    for (int64_t h = 0; h < h_n; h++)
                        for (int64_t k = 0; k < d_n; k++)
                            want[((t * b_n + b) * h_n + h) * d_n + k] =
                                t < p_n ? cd[((t * b_n + b) * h_n + h) * d_n + k]
                                        : xd[((b * h_n + h) * s_n + (t - p_n)) * d_n + k];
            tm_tensor *out = y;
            tm_tensor shared;
            if (same) {
                /* The cache buffer with room: the output is the same memory. */
                float *room = calloc((size_t)(b_n * t_n * h_n * d_n), sizeof *room);
                memcpy(room, cd, (size_t)(b_n * p_n * h_n * d_n) * sizeof *room);
                shared = *y;
                shared.data = room;
                shared.owns_data = 0;
                cache->data = room;
                out = &shared;
            }
            tm_ctx c;
            tm_ctx_init(&c, TM_MODE_EAGER, NULL);
            tm_args a;
            memset(&a, 0, sizeof a);
            const tm_tensor *in[2] = {cache, x};
            tm_status st = tm_run_kernel(&c, TM_P_KV_APPEND, &a, in, 2, &out, 1, 0);
            CHECK(st == TM_OK && !memcmp(out->data, want, (size_t)(b_n * t_n * h_n * d_n) * sizeof *want),
                  "kv_append batch %d %s", b_n, same ? "in place" : "into another buffer");
            tm_ctx_destroy(&c);
            if (same) {
                free(shared.data);
                cache->data = cd;
            }
            free(want);
            tm_tensor_free(cache);
            tm_tensor_free(x);
            tm_tensor_free(y);
        }
}

/* Prompts of several lengths on one decoder: the first gets a plan of its own, the second
 * starts the generic prompt plan, which the later ones use; each prompt's logits against
 * eager, and a decode step after each. */
static void test_prompts(const char *path) {
    tm_model *m = NULL;
    tm_error err = {0};
    if (tm_model_load(path, NULL, &m, &err) != TM_OK) {
        CHECK(0, "%s: %s", path, err.message);
        return;
    }
    tm_decoder *d = NULL;
    CHECK(tm_decoder_create(m, NULL, &d, &err) == TM_OK, "%s: %s", path, err.message);
    static const int64_t lengths[] = {5, 7, 9, 4, 12};
    for (int r = 0; d && r < 5; r++) {
        ref_loop ref;
        ref_init(&ref, m);
        tm_decoder_reset(d);
        for (int step = 0; step < 2; step++) {
            int64_t at = step ? lengths[r] : 0, n = step ? 1 : lengths[r];
            tm_status st = tm_decoder_append(d, tokens + at, n, &err);
            CHECK(st == TM_OK, "%s prompt %lld: %s", path, (long long)lengths[r], err.message);
            tm_tensor *want = ref_step(&ref, tokens + at, n, at);
            double e = norm_err(tm_decoder_logits(d), want);
            CHECK(e <= 1e-5, "%s prompt %lld step %d: logits %g from eager", path,
                  (long long)lengths[r], step, e);
            tm_tensor_free(want);
        }
        ref_free(&ref);
        if (r >= 1)
            CHECK(d->prefill.plan && d->prefill.plan->gen, "%s: no generic prompt plan after two "
                  "prompt lengths", path);
    }
    tm_plan_stats ps = {.size = sizeof ps};
    tm_model_plan_stats(m, &ps);
    CHECK(ps.generic_plans == 2, "%s: %zu generic plans (decode steps and prompts expected)",
          path, ps.generic_plans);
    tm_decoder_free(d);
    tm_model_free(m);
}

/* Decoders of one model share their plans: a second and a third decoder, stepped in turn
 * with the first (separate sessions and caches), make no plan, and each one's logits equal
 * what the first decoder gave for the same tokens; a decoder with other options makes its
 * own. The model frees the shared plans (the decoders are freed first and last). */
static void test_shared_plans(const char *path) {
    tm_model *m = NULL;
    tm_error err = {0};
    if (tm_model_load(path, NULL, &m, &err) != TM_OK) {
        CHECK(0, "%s: %s", path, err.message);
        return;
    }
    enum { N = 3, STEPS = 6 };
    tm_decoder *d[N] = {0};
    tm_tensor *first[STEPS] = {0};
    for (int k = 0; k < N; k++)
        CHECK(tm_decoder_create(m, NULL, &d[k], &err) == TM_OK, "%s: %s", path, err.message);
    tm_plan_stats before = {.size = sizeof before}, after = {.size = sizeof after};
    for (int k = 0; k < N && d[k]; k++) {
        if (k == 1) tm_model_plan_stats(m, &before);
        for (int step = 0; step < STEPS; step++) {
            int64_t at = step ? 4 + step - 1 : 0, n = step ? 1 : 4;
            CHECK(tm_decoder_append(d[k], tokens + at, n, &err) == TM_OK, "%s decoder %d: %s", path,
                  k, err.message);
            const tm_tensor *lg = tm_decoder_logits(d[k]);
            if (k == 0) first[step] = tm_tensor_clone(lg, NULL);
            else CHECK(norm_err(lg, first[step]) == 0.0, "%s: decoder %d step %d differs from the "
                       "first's", path, k, step);
        }
    }
    tm_model_plan_stats(m, &after);
    CHECK(after.plans == before.plans && after.generic_plans == before.generic_plans,
          "%s: later decoders made plans (%zu -> %zu, generic %zu -> %zu)", path, before.plans,
          after.plans, before.generic_plans, after.generic_plans);
    CHECK(d[0] && d[1] && d[0]->decode.plan && d[0]->decode.plan == d[1]->decode.plan,
          "%s: the decode steps' plan is not shared", path);
    /* Freed in the middle, the others go on with the plans. */
    tm_decoder_free(d[0]);
    d[0] = NULL;
    CHECK(d[1] && tm_decoder_append(d[1], tokens + 9, 1, &err) == TM_OK, "%s: %s", path, err.message);
    tm_decoder_options o;
    tm_decoder_options_default(&o);
    o.last_logits_only = 1;
    tm_decoder *other = NULL;
    CHECK(tm_decoder_create(m, &o, &other, &err) == TM_OK, "%s: %s", path, err.message);
    CHECK(other && tm_decoder_append(other, tokens, 4, &err) == TM_OK, "%s: %s", path, err.message);
    tm_plan_stats last = {.size = sizeof last};
    tm_model_plan_stats(m, &last);
    CHECK(last.plans == after.plans + 1, "%s: other options made %zu plans, not 1", path,
          last.plans - after.plans);
    tm_decoder_free(other);
    for (int step = 0; step < STEPS; step++) tm_tensor_free(first[step]);
    for (int k = 0; k < N; k++) tm_decoder_free(d[k]);
    tm_model_free(m);
}

/* last_logits_only: prompts of several lengths and a decode step after each, the last
 * position's logits against the last row of a decoder that computes them all; the
 * prompt plan's logits output holds one row. */
static void test_last_logits(const char *path, double tol) {
    tm_model *m = NULL;
    tm_error err = {0};
    if (tm_model_load(path, NULL, &m, &err) != TM_OK) {
        CHECK(0, "%s: %s", path, err.message);
        return;
    }
    tm_decoder_options o;
    tm_decoder_options_default(&o);
    tm_decoder *all = NULL, *last = NULL;
    CHECK(tm_decoder_create(m, &o, &all, &err) == TM_OK, "%s: %s", path, err.message);
    o.last_logits_only = 1;
    CHECK(tm_decoder_create(m, &o, &last, &err) == TM_OK, "%s: %s", path, err.message);
    static const int64_t lengths[] = {5, 7, 9, 4, 12};
    for (int r = 0; all && last && r < 5; r++) {
        tm_decoder_reset(all);
        tm_decoder_reset(last);
        for (int step = 0; step < 2; step++) {
            int64_t at = step ? lengths[r] : 0, n = step ? 1 : lengths[r];
            CHECK(tm_decoder_append(all, tokens + at, n, &err) == TM_OK, "%s: %s", path, err.message);
            CHECK(tm_decoder_append(last, tokens + at, n, &err) == TM_OK, "%s: %s", path, err.message);
            const tm_tensor *a = tm_decoder_logits(all), *l = tm_decoder_logits(last);
            if (!a || !l || a->rank != 3 || l->rank != 3) {
                CHECK(0, "%s: logits missing", path);
                continue;
            }
            CHECK(l->dims[1] == 1, "%s prompt %lld step %d: %lld rows of logits, not 1", path,
                  (long long)lengths[r], step, (long long)l->dims[1]);
            int64_t vocab = a->dims[2], dims[3] = {1, 1, vocab};
            tm_tensor *want = tm_tensor_new(a->dtype, 3, dims);
            size_t row = (size_t)vocab * tm_dtype_elem_size(a->dtype);
            memcpy(want->data, (const char *)a->data + (size_t)(a->dims[1] - 1) * row, row);
            double e = norm_err(l, want);
            CHECK(e <= tol, "%s prompt %lld step %d: last-row logits %g from all rows'", path,
                  (long long)lengths[r], step, e);
            tm_tensor_free(want);
        }
    }
    CHECK(last && last->prefill.plan && last->prefill.plan->gen,
          "%s: no generic prompt plan with last_logits_only", path);
    tm_decoder_free(all);
    tm_decoder_free(last);
    tm_model_free(m);
}

/* last_row_names on an encoder through tm_model_run: BERT's last_hidden_state's last row
 * against the full output's; a name the model lacks is an error naming it. */
static void test_last_row_encoder(const char *path) {
    tm_model *m = NULL;
    tm_error err = {0};
    if (tm_model_load(path, NULL, &m, &err) != TM_OK) {
        CHECK(0, "%s: %s", path, err.message);
        return;
    }
    const char *names[3] = {"input_ids", "attention_mask", "token_type_ids"};
    int64_t ones[12];
    for (int k = 0; k < 12; k++) ones[k] = 1;
    for (int64_t n = 3; n <= 12; n += 3) {
        tm_tensor *ids = row(TM_INT64, tokens, n), *mask = row(TM_INT64, ones, n);
        tm_tensor *types = row(TM_INT64, tokens, n);
        memset(types->data, 0, types->nbytes);
        const tm_tensor *in[3] = {ids, mask, types};
        tm_tensor *full = NULL, *last = NULL;
        tm_plan_options po;
        tm_plan_options_default(&po);
        const char *want_last[1] = {"last_hidden_state"};
        CHECK(tm_model_run(m, 3, names, in, &full, NULL, &err) == TM_OK, "%s: %s", path, err.message);
        po.n_last_row = 1;
        po.last_row_names = want_last;
        CHECK(tm_model_run(m, 3, names, in, &last, &po, &err) == TM_OK, "%s: %s", path, err.message);
        if (full && last) {
            int64_t h = full->dims[2], dims[3] = {1, 1, h};
            tm_tensor *want = tm_tensor_new(TM_FLOAT, 3, dims);
            memcpy(want->data, (const float *)full->data + (n - 1) * h, (size_t)h * sizeof(float));
            double e = norm_err(last, want);
            CHECK(e <= 1e-5, "%s length %lld: last row %g from the full output's", path,
                  (long long)n, e);
            tm_tensor_free(want);
        }
        tm_tensor_free(full);
        tm_tensor_free(last);
        const char *bad[1] = {"nope"};
        po.last_row_names = bad;
        tm_tensor *none = NULL;
        tm_error e2 = {0};
        tm_status st = tm_model_run(m, 3, names, in, &none, &po, &e2);
        CHECK(st == TM_ERR_INVALID_ARGUMENT && strstr(e2.message, "no output 'nope'"),
              "%s: last_row_names 'nope' gave %d: %s", path, (int)st, e2.message);
        tm_tensor_free(none);
        tm_tensor_free(ids);
        tm_tensor_free(mask);
        tm_tensor_free(types);
    }
    tm_model_free(m);
}

static int64_t argmax_last(const tm_tensor *t) {
    int64_t vocab = t->dims[t->rank - 1], n = tm_numel(t->rank, t->dims);
    const float *x = (const float *)t->data + (n - vocab);
    int64_t best = 0;
    for (int64_t k = 1; k < vocab; k++)
        if (x[k] > x[best]) best = k;
    return best;
}

/* Greedy generation with the cache in float16 beside one in float32: each step's logits
 * within tol of float32's (normwise), the same tokens. */
static void test_half_greedy(const char *path, double tol) {
    tm_model *m = NULL;
    tm_error err = {0};
    if (tm_model_load(path, NULL, &m, &err) != TM_OK) {
        CHECK(0, "%s: %s", path, err.message);
        return;
    }
    tm_decoder *d[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        tm_decoder_options o;
        tm_decoder_options_default(&o);
        o.kv_dtype = k ? TM_FLOAT16 : TM_FLOAT;
        o.capacity = 8;   /* grows: the float16 buffers too */
        CHECK(tm_decoder_create(m, &o, &d[k], &err) == TM_OK, "%s: %s", path, err.message);
    }
    enum { STEPS = 40 };
    int64_t tok[2] = {0, 0}, same = 0;
    double worst = 0;
    for (int step = 0; d[0] && d[1] && step < STEPS; step++) {
        for (int k = 0; k < 2; k++) {
            tm_status st = step == 0 ? tm_decoder_append(d[k], tokens, 6, &err)
                                     : tm_decoder_append(d[k], &tok[k], 1, &err);
            CHECK(st == TM_OK, "%s step %d: %s", path, step, err.message);
            if (st != TM_OK) goto done;
        }
        double e = norm_err(tm_decoder_logits(d[1]), tm_decoder_logits(d[0]));
        if (!(e <= worst)) worst = e;
        for (int k = 0; k < 2; k++) tok[k] = argmax_last(tm_decoder_logits(d[k]));
        if (tok[0] != tok[1]) break;
        same++;
    }
    CHECK(worst <= tol, "%s: float16 cache's logits %g from float32's", path, worst);
    CHECK(same == STEPS, "%s: float16 cache's tokens differ from float32's at step %lld", path,
          (long long)same);
    if (getenv("TM_TEST_VERBOSE")) printf("%s: greedy float16 %g, %lld steps\n", path, worst, (long long)same);
    /* Beam search's fork: a float16 cache copied into another float16 decoder steps as the
     * original does; into a float32 one it is refused. */
    tm_decoder_options o;
    tm_decoder_options_default(&o);
    o.kv_dtype = TM_FLOAT16;
    tm_decoder *fork = NULL;
    CHECK(tm_decoder_create(m, &o, &fork, &err) == TM_OK, "%s: %s", path, err.message);
    if (fork && tm_decoder_copy_state(fork, d[1], &err) == TM_OK) {
        int64_t t = 7;
        CHECK(tm_decoder_append(fork, &t, 1, &err) == TM_OK && tm_decoder_append(d[1], &t, 1, &err) == TM_OK,
              "%s: %s", path, err.message);
        CHECK(norm_err(tm_decoder_logits(fork), tm_decoder_logits(d[1])) == 0, "%s: a copied float16 "
              "cache steps otherwise", path);
    } else {
        CHECK(0, "%s: copy_state of a float16 cache: %s", path, err.message);
    }
    CHECK(tm_decoder_copy_state(d[0], d[1], &err) != TM_OK && strstr(err.message, "kv_dtype"),
          "%s: a float16 cache copied into a float32 decoder (%s)", path, err.message);
    tm_decoder_free(fork);
done:
    tm_decoder_free(d[0]);
    tm_decoder_free(d[1]);
    tm_model_free(m);
}

int main(int argc, char **argv) {
    test_kv_append_kernel();
    const char *root = argc > 1 ? argv[1] : "tests/data/tiny";
    /* fused: the attention is one ATTENTION kernel, so the caches are kept in place
     * (half-precision attention, and Whisper's on (B * H, S, D) operands, are not fused
     * yet: their caches are copied each step). */
    static const struct { const char *file; double tol; int fused; } models[] = {
        {"llama/decoder_model_merged.onnx", 1e-5, 1},
        {"llama/decoder_model_merged_q4.onnx", 1e-4, 1},
        {"llama/decoder_model_merged_quantized.onnx", 1e-2, 1},
        {"llama/decoder_model_merged_fp16.onnx", 1e-2, 0},
        {"llama-external-data/decoder_model_merged.onnx", 1e-5, 1},
        {"gpt2/decoder_model_merged.onnx", 1e-5, 1},
        {"gpt2/decoder_model_merged_q4.onnx", 1e-4, 1},
        {"gpt2/decoder_with_past_model.onnx", 1e-5, 1},
        {"whisper/decoder_model_merged.onnx", 1e-5, 0},
        {"whisper/decoder_model_merged_q4.onnx", 1e-4, 0},
    };
    char path[1024];
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", root, models[i].file);
        run_loop(path, 1, 64, models[i].tol, models[i].fused);   /* room for it all */
        run_loop(path, 1, 3, models[i].tol, models[i].fused);    /* grows twice */
        run_loop(path, 0, 64, models[i].tol, models[i].fused);   /* copied each step */
    }
    /* The caches in float16 (kv_dtype): against eager float32 runs, at HALF_TOL where they
     * are kept in place (the fused ones). Each k and v element is rounded to 11 significant
     * bits, a relative error of at most 2^-12; the scores and values are sums of such
     * products, whose errors partly cancel, and the logits carry them through the later
     * layers: the tiny exports measure 2e-5 to 9e-5 normwise. HALF_TOL is 2^-11 (4.9e-4),
     * one float16 rounding at most, well above those and 50x the float32 runs' 1e-5: a
     * cache rounded to bfloat16 (2^-9) or not widened right fails it. Copied caches stay
     * float32, at the float32 tolerances. */
    const double HALF_TOL = 4.9e-4;
    loop_kv_dtype = TM_FLOAT16;
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", root, models[i].file);
        double tol = models[i].fused && models[i].tol < HALF_TOL ? HALF_TOL : models[i].tol;
        run_loop(path, 1, 64, tol, models[i].fused);
        run_loop(path, 1, 3, tol, models[i].fused);
        run_loop(path, 0, 64, models[i].tol, models[i].fused);
    }
    loop_kv_dtype = TM_UNDEFINED;
    static const char *const greedy[] = {"llama/decoder_model_merged.onnx",
                                         "llama/decoder_model_merged_q4.onnx",
                                         "gpt2/decoder_model_merged.onnx",
                                         "gpt2/decoder_with_past_model.onnx"};
    for (size_t i = 0; i < sizeof greedy / sizeof greedy[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", root, greedy[i]);
        test_half_greedy(path, HALF_TOL);
    }
    snprintf(path, sizeof path, "%s/llama/decoder_model_merged.onnx", root);
    test_prompts(path);
    test_shared_plans(path);
    snprintf(path, sizeof path, "%s/gpt2/decoder_with_past_model.onnx", root);
    test_shared_plans(path);
    static const struct { const char *file; double tol; } last_models[] = {
        {"llama/decoder_model_merged.onnx", 1e-5},
        {"llama/decoder_model_merged_q4.onnx", 1e-4},
        {"gpt2/decoder_model_merged.onnx", 1e-5},
        {"gpt2/decoder_model_merged_q4.onnx", 1e-4},
        {"gpt2/decoder_with_past_model.onnx", 1e-5},
    };
    for (size_t i = 0; i < sizeof last_models / sizeof last_models[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", root, last_models[i].file);
        test_last_logits(path, last_models[i].tol);
    }
    /* A one-token prompt: its plan and the next step's (past 1) are plans of their own. */
    n_prompt = 1;
    snprintf(path, sizeof path, "%s/llama/decoder_model_merged.onnx", root);
    run_loop(path, 1, 64, 1e-5, 1);
    snprintf(path, sizeof path, "%s/gpt2/decoder_model_merged.onnx", root);
    run_loop(path, 1, 64, 1e-5, 1);
    snprintf(path, sizeof path, "%s/bert/model.onnx", root);
    test_last_row_encoder(path);
    expect_refused(path, "is not one a decoder takes");
    snprintf(path, sizeof path, "%s/gpt2/decoder_model.onnx", root);
    expect_refused(path, "takes no past_key_values");
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
