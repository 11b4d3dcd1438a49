/* Thread safety of the public API: one compiled plan run from 8 threads, each with its own
 * session; tm_model_run from 8 threads sharing one model's plan cache, with shapes that
 * change so that plans are made and evicted while others run; eager runs side by side;
 * and a merged decoder whose plan breaks on use_cache_branch, so that tail plans are made
 * on first sight by whichever thread gets there. Every result must equal the
 * single-threaded one bit for bit. `make check-tsan` runs it under ThreadSanitizer.
 * Not a speed test. Prints "N passed, N failed". */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "transmuter.h"
#include "io/names.h"
#include "io/npy.h"

#define N_THREADS 8

#include "check.h"

/* Same dtype, shape and bytes. */
static int same_tensor(const tm_tensor *a, const tm_tensor *b) {
    if (!a || !b) return a == b;
    if (tm_tensor_dtype(a) != tm_tensor_dtype(b) || tm_tensor_rank(a) != tm_tensor_rank(b))
        return 0;
    if (memcmp(tm_tensor_dims(a), tm_tensor_dims(b), (size_t)tm_tensor_rank(a) * sizeof(int64_t)))
        return 0;
    return memcmp(tm_tensor_data_const(a), tm_tensor_data_const(b), tm_tensor_nbytes(a)) == 0;
}

static void free_all(tm_tensor **t, int n) {
    for (int i = 0; i < n; i++) {
        tm_tensor_free(t[i]);
        t[i] = NULL;
    }
}

/* intra_op: the model's own pool, which then serves every calling thread in turn. */
static tm_model *load(const char *path, size_t cache_limit, int intra_op) {
    tm_load_options o;
    tm_load_options_default(&o);
    o.threads = intra_op;
    o.plan_cache_limit = cache_limit;
    tm_model *m = NULL;
    tm_error err;
    if (tm_model_load(path, &o, &m, &err) != TM_OK) printf("cannot load %s: %s\n", path, err.message);
    return m;
}

/* ---- BERT inputs of any sequence length, made here ----------------------------------- */

#define BERT "tests/data/tiny/bert/model.onnx"
#define N_LENGTHS 5
static const char *bert_names[3] = {"input_ids", "attention_mask", "token_type_ids"};

typedef struct bert_inputs {
    int64_t ids[16], mask[16], types[16];
    tm_tensor *t[3];              /* (1, T) each, wrapping the arrays above */
} bert_inputs;

static void bert_make(bert_inputs *in, int len, unsigned seed) {
    int64_t dims[2] = {1, len};
    for (int i = 0; i < len; i++) {
        seed = seed * 1103515245u + 12345u;
        in->ids[i] = (int64_t)((seed >> 16) % 100);
        in->mask[i] = 1;
        in->types[i] = i >= len / 2;
    }
    in->t[0] = tm_tensor_wrap(TM_INT64, 2, dims, in->ids);
    in->t[1] = tm_tensor_wrap(TM_INT64, 2, dims, in->mask);
    in->t[2] = tm_tensor_wrap(TM_INT64, 2, dims, in->types);
}

static void bert_free(bert_inputs *in) { free_all(in->t, 3); }

/* ---- A: one plan, a session per thread ---------------------------------------------- */

typedef struct worker {
    pthread_t thread;
    int index;
    int mismatches, errors;
    char error[sizeof ((tm_error *)0)->message];
} worker;

static void note_error(worker *w, const tm_error *err) {
    if (!w->errors++) snprintf(w->error, sizeof w->error, "%s", err->message);
}

static struct {
    tm_plan *plan;
    bert_inputs in;
    tm_tensor *ref;
    int iterations;
} shared_plan;

static void *plan_worker(void *arg) {
    worker *w = arg;
    tm_session *s = NULL;
    tm_error err;
    if (tm_session_create(shared_plan.plan, &s, &err) != TM_OK) {
        note_error(w, &err);
        return NULL;
    }
    /* Alternately into a caller tensor (the no-allocation path) and a new one. */
    tm_tensor *mine = tm_tensor_new(tm_tensor_dtype(shared_plan.ref), tm_tensor_rank(shared_plan.ref),
                                    tm_tensor_dims(shared_plan.ref));
    for (int i = 0; i < shared_plan.iterations; i++) {
        tm_tensor *out[1] = {i % 2 ? mine : NULL};
        if (tm_session_run(s, 3, bert_names, (const tm_tensor *const *)shared_plan.in.t, out,
                           &err) != TM_OK) {
            note_error(w, &err);
            break;
        }
        if (!same_tensor(out[0], shared_plan.ref)) w->mismatches++;
        if (!(i % 2)) tm_tensor_free(out[0]);
    }
    tm_tensor_free(mine);
    tm_session_free(s);
    return NULL;
}

static void run_workers(void *(*fn)(void *), worker *w, const char *what) {
    for (int i = 0; i < N_THREADS; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].index = i;
        if (pthread_create(&w[i].thread, NULL, fn, &w[i]) != 0) {
            printf("cannot start thread %d\n", i);
            exit(1);
        }
    }
    int mismatches = 0, errors = 0;
    const char *first_error = "";
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(w[i].thread, NULL);
        mismatches += w[i].mismatches;
        errors += w[i].errors;
        if (w[i].errors && !first_error[0]) first_error = w[i].error;
    }
    CHECK(errors == 0, "%s: %d runs failed, first: %s", what, errors, first_error);
    CHECK(mismatches == 0, "%s: %d results differ from the single-threaded run", what, mismatches);
}

static void test_shared_plan(int intra_op, int iterations) {
    tm_model *m = load(BERT, 0, intra_op);
    if (!m) { failed++; return; }
    bert_make(&shared_plan.in, 7, 1);
    tm_error err;
    tm_status st = tm_plan_create(m, 3, bert_names, (const tm_tensor *const *)shared_plan.in.t,
                                  NULL, &shared_plan.plan, &err);
    CHECK(st == TM_OK, "plan: %s", err.message);
    tm_session *s = NULL;
    if (st == TM_OK) st = tm_session_create(shared_plan.plan, &s, &err);
    tm_tensor *out[1] = {NULL};
    if (st == TM_OK)
        st = tm_session_run(s, 3, bert_names, (const tm_tensor *const *)shared_plan.in.t, out, &err);
    CHECK(st == TM_OK, "single-threaded run: %s", err.message);
    tm_session_free(s);
    shared_plan.ref = out[0];
    shared_plan.iterations = iterations;
    worker w[N_THREADS];
    char what[96];
    snprintf(what, sizeof what, "one plan, 8 sessions, %d intra-op thread(s)", intra_op);
    if (st == TM_OK) run_workers(plan_worker, w, what);
    tm_tensor_free(shared_plan.ref);
    tm_plan_free(shared_plan.plan);
    bert_free(&shared_plan.in);
    tm_model_free(m);
}

/* ---- B and C: tm_model_run and tm_run_eager on a shared model -------------------------- */

static struct {
    tm_model *model;
    bert_inputs in[N_LENGTHS];    /* lengths 3 .. 7 */
    tm_tensor *ref[N_LENGTHS];
    tm_tensor *ref_eager[N_LENGTHS];
    int iterations;
    int eager;
} shared_model;

static void *model_worker(void *arg) {
    worker *w = arg;
    tm_error err;
    /* Odd workers keep their runs' kernels on their own thread (one_thread): the same
     * plans, the same results, bit for bit. */
    tm_plan_options po;
    tm_plan_options_default(&po);
    po.one_thread = w->index % 2;
    for (int i = 0; i < shared_model.iterations; i++) {
        int k = (w->index + i) % N_LENGTHS;
        tm_tensor *out[1] = {NULL};
        tm_status st = shared_model.eager
            ? tm_run_eager(shared_model.model, 3, bert_names,
                           (const tm_tensor *const *)shared_model.in[k].t, out, NULL, &err)
            : tm_model_run(shared_model.model, 3, bert_names,
                           (const tm_tensor *const *)shared_model.in[k].t, out, &po, &err);
        if (st != TM_OK) {
            note_error(w, &err);
            break;
        }
        const tm_tensor *ref = shared_model.eager ? shared_model.ref_eager[k] : shared_model.ref[k];
        if (!same_tensor(out[0], ref)) w->mismatches++;
        tm_tensor_free(out[0]);
    }
    return NULL;
}

static void test_shared_model(int intra_op, int iterations) {
    /* A cache of 2 plans for 5 shapes: every thread keeps making and evicting plans. */
    tm_model *m = load(BERT, 2, intra_op);
    if (!m) { failed++; return; }
    shared_model.model = m;
    tm_error err;
    int ok = 1;
    for (int k = 0; k < N_LENGTHS && ok; k++) {
        bert_make(&shared_model.in[k], 3 + k, 100 + (unsigned)k);
        tm_tensor *out[1] = {NULL}, *eager[1] = {NULL};
        ok = tm_model_run(m, 3, bert_names, (const tm_tensor *const *)shared_model.in[k].t, out,
                          NULL, &err) == TM_OK &&
             tm_run_eager(m, 3, bert_names, (const tm_tensor *const *)shared_model.in[k].t,
                          eager, NULL, &err) == TM_OK;
        shared_model.ref[k] = out[0];
        shared_model.ref_eager[k] = eager[0];
    }
    CHECK(ok, "single-threaded references: %s", err.message);
    worker w[N_THREADS];
    if (ok) {
        char what[96];
        shared_model.iterations = iterations;
        shared_model.eager = 0;
        snprintf(what, sizeof what, "tm_model_run, 8 threads, plans evicted, %d intra-op", intra_op);
        run_workers(model_worker, w, what);
        shared_model.iterations = iterations / 10 + 1;
        shared_model.eager = 1;
        snprintf(what, sizeof what, "tm_run_eager, 8 threads, %d intra-op", intra_op);
        run_workers(model_worker, w, what);
    }
    for (int k = 0; k < N_LENGTHS; k++) {
        tm_tensor_free(shared_model.ref[k]);
        tm_tensor_free(shared_model.ref_eager[k]);
        bert_free(&shared_model.in[k]);
    }
    tm_model_free(m);
}

/* ---- D: a merged decoder, whose plan breaks on use_cache_branch ------------------------ */

#define MERGED "tests/data/tiny/gpt2/decoder_model_merged"
#define MAX_IO 16

static struct {
    tm_model *model;              /* fresh for the threads: no plan and no tail plan yet */
    tm_plan *plan;                /* for case 0, also fresh */
    int n_in, n_out;
    const char *names[MAX_IO];
    tm_tensor *in[2][MAX_IO];     /* cases "default" (with past) and "nocache" */
    tm_tensor *ref[2][MAX_IO];
    int iterations;
} merged;

static tm_tensor *read_input(const char *which, const char *name) {
    char *enc = tm_name_encode(name);
    char path[1024];
    snprintf(path, sizeof path, MERGED ".cases/%s/inputs/%s.npy", which, enc);
    free(enc);
    tm_tensor *t = NULL;
    tm_error err;
    if (tm_npy_read(path, &t, &err) != TM_OK) printf("cannot read %s: %s\n", path, err.message);
    return t;
}

static int same_outputs(tm_tensor **out, tm_tensor **ref) {
    for (int o = 0; o < merged.n_out; o++)
        if (!same_tensor(out[o], ref[o])) return 0;
    return 1;
}

/* Even iterations: this thread's session of the shared plan (case 0). Odd ones:
 * tm_model_run on either case, so both cached plans and their tails are made by
 * whichever thread comes first. */
static void *merged_worker(void *arg) {
    worker *w = arg;
    tm_session *s = NULL;
    tm_error err;
    if (tm_session_create(merged.plan, &s, &err) != TM_OK) {
        note_error(w, &err);
        return NULL;
    }
    for (int i = 0; i < merged.iterations; i++) {
        int k = i % 2 ? (w->index + i / 2) % 2 : 0;
        tm_tensor *out[MAX_IO] = {NULL};
        const tm_tensor *const *in = (const tm_tensor *const *)merged.in[k];
        tm_status st = i % 2 ? tm_model_run(merged.model, merged.n_in, merged.names, in, out,
                                             NULL, &err)
                             : tm_session_run(s, merged.n_in, merged.names, in, out, &err);
        if (st != TM_OK) {
            note_error(w, &err);
            break;
        }
        if (!same_outputs(out, merged.ref[k])) w->mismatches++;
        free_all(out, merged.n_out);
    }
    tm_session_free(s);
    return NULL;
}

static void test_merged_decoder(void) {
    tm_model *ref_model = load(MERGED ".onnx", 0, 1);
    merged.model = load(MERGED ".onnx", 0, 1);
    if (!ref_model || !merged.model) {
        failed++;
        tm_model_free(ref_model);
        tm_model_free(merged.model);
        return;
    }
    merged.n_in = tm_model_n_inputs(ref_model);
    merged.n_out = tm_model_n_outputs(ref_model);
    int ok = merged.n_in <= MAX_IO && merged.n_out <= MAX_IO;
    for (int i = 0; i < merged.n_in && ok; i++) {
        tm_value_desc d;
        tm_model_input(ref_model, i, &d);
        merged.names[i] = d.name;
        merged.in[0][i] = read_input("default", d.name);
        merged.in[1][i] = read_input("nocache", d.name);
        ok = merged.in[0][i] && merged.in[1][i];
    }
    CHECK(ok, "merged decoder inputs");
    tm_error err;
    for (int k = 0; k < 2 && ok; k++)
        ok = tm_model_run(ref_model, merged.n_in, merged.names,
                          (const tm_tensor *const *)merged.in[k], merged.ref[k], NULL,
                          &err) == TM_OK;
    CHECK(ok, "merged decoder, single-threaded: %s", ok ? "" : err.message);
    if (ok)
        ok = tm_plan_create(merged.model, merged.n_in, merged.names,
                            (const tm_tensor *const *)merged.in[0], NULL, &merged.plan,
                            &err) == TM_OK;
    CHECK(ok, "merged decoder plan: %s", ok ? "" : err.message);
    if (ok) CHECK(tm_plan_n_breaks(merged.plan) == 1, "the merged decoder's plan should break");
    worker w[N_THREADS];
    merged.iterations = 20;
    if (ok) run_workers(merged_worker, w, "merged decoder, tail plans made by 8 threads");
    for (int k = 0; k < 2; k++) {
        free_all(merged.ref[k], merged.n_out);
        free_all(merged.in[k], merged.n_in);
    }
    tm_plan_free(merged.plan);
    tm_model_free(merged.model);
    tm_model_free(ref_model);
}

int main(void) {
    test_shared_plan(1, 500);
    test_shared_plan(2, 100);
    test_shared_model(1, 200);
    test_shared_model(2, 50);
    test_merged_decoder();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
