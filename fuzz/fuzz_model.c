/* libFuzzer target: the whole load path of a model from arbitrary bytes. tm_model_load_buffer
 * (parse plus graph checks), the missing-op census, then a plan for inputs made from the
 * model's own input spec (symbolic dims set small) and one run of it. Not external data
 * (fuzz_external.c). Every failure must be a status with a message, never a crash. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "transmuter.h"

/* Tensors, arenas and constant folding go through this allocator: it refuses big blocks,
 * so a few bytes declaring a huge shape end in TM_ERR_NO_MEMORY (an error path we want
 * exercised) instead of the fuzzer's malloc limit. */
#define MAX_BLOCK ((size_t)64 << 20)
static void *capped_alloc(void *user, size_t size) {
    (void)user;
    if (size > MAX_BLOCK) return NULL;
    void *p = NULL;
    return posix_memalign(&p, 64, size ? size : 1) == 0 ? p : NULL;
}
static void capped_free(void *user, void *p) {
    (void)user;
    free(p);
}
static const tm_allocator ALLOCATOR = {capped_alloc, capped_free, NULL};

#define MAX_INPUTS 64
#define MAX_INPUT_ELEMS 4096
#define MAX_RUN_ARENA ((size_t)16 << 20)

/* A zero-filled input shaped by desc: unknown dims are 2, an unknown rank is 1. NULL
 * when the declared shape is too big to make (then no plan is tried). */
static tm_tensor *make_input(const tm_value_desc *d) {
    tm_dtype dt = d->dtype == TM_UNDEFINED ? TM_FLOAT : d->dtype;
    int rank = d->rank < 0 ? 1 : d->rank;
    if (rank > 8) return NULL;
    int64_t dims[8];
    int64_t numel = 1;
    for (int i = 0; i < rank; i++) {
        int64_t v = d->rank < 0 || d->dims[i] < 0 ? 2 : d->dims[i];
        if (v > MAX_INPUT_ELEMS) return NULL;
        dims[i] = v;
        numel *= v;
        if (numel > MAX_INPUT_ELEMS) return NULL;
    }
    tm_tensor *t = tm_tensor_new(dt, rank, dims);
    if (t && dt == TM_STRING)
        for (int64_t i = 0; i < numel; i++) tm_tensor_set_string(t, i, "");
    return t;
}

static void try_plan(tm_model *m) {
    int n = tm_model_n_inputs(m);
    if (n > MAX_INPUTS) return;
    const char *names[MAX_INPUTS];
    tm_tensor *inputs[MAX_INPUTS] = {0};
    int ok = 1;
    for (int i = 0; i < n; i++) {
        tm_value_desc d;
        if (tm_model_input(m, i, &d) != TM_OK) abort();
        names[i] = d.name;
        inputs[i] = make_input(&d);
        if (!inputs[i]) ok = 0;
    }
    tm_plan *plan = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    if (ok) {
        tm_status st = tm_plan_create(m, n, names, (const tm_tensor *const *)inputs, NULL,
                                      &plan, &err);
        if (st != TM_OK && (plan || !err.message[0])) abort();
    }
    if (plan && tm_plan_arena_bytes(plan) <= MAX_RUN_ARENA) {
        tm_session *s = NULL;
        if (tm_session_create(plan, &s, &err) == TM_OK) {
            int n_out = tm_model_n_outputs(m);
            tm_tensor **outs = calloc((size_t)n_out + 1, sizeof *outs);
            if (outs) {
                memset(&err, 0, sizeof err);
                tm_status st = tm_session_run(s, n, names, (const tm_tensor *const *)inputs,
                                              outs, &err);
                if (st != TM_OK && !err.message[0]) abort();
                for (int i = 0; i < n_out; i++) tm_tensor_free(outs[i]);
                free(outs);
            }
            tm_session_free(s);
        }
    }
    tm_plan_free(plan);
    for (int i = 0; i < n; i++) tm_tensor_free(inputs[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tm_load_options opts;
    tm_load_options_default(&opts);
    opts.threads = 1;
    opts.allocator = &ALLOCATOR;
    tm_model *m = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    if (tm_model_load_buffer(data, size, NULL, &opts, &m, &err) != TM_OK) {
        if (m || !err.message[0]) abort();
        return 0;
    }
    const char *missing = tm_model_missing_ops(m);
    if (missing && !missing[0]) abort();   /* NULL or a list, never "" */
    for (int i = 0; i < tm_model_n_op_types(m); i++) {
        const char *domain, *op;
        int count;
        if (tm_model_op_type(m, i, &domain, &op, &count) != TM_OK || count < 1) abort();
    }
    try_plan(m);
    tm_model_free(m);
    return 0;
}
