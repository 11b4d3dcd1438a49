/* The public API end to end on a shipped tiny export: eager runs with the per-node
 * callback, plans and sessions (no allocation while a plan runs, checked through an
 * injected allocator and, outside sanitizer builds, by interposing malloc), the plan
 * cache, graph breaks and static inputs, and the error contract. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "transmuter.h"
#include "io/npy.h"
#include "io/names.h"
#include "backends/cpu/gemm.h"

#include "check.h"

/* ---- Counting every allocation of the process (not under sanitizers) ---------------- */
#include "count_allocs.h"

/* ---- The injected allocator -------------------------------------------------------- */
static long injected_allocs, injected_frees;
static void *count_alloc(void *user, size_t size) {
    (void)user;
    injected_allocs++;
    void *p = NULL;
    return posix_memalign(&p, 64, size ? size : 1) == 0 ? p : NULL;
}
static void count_free(void *user, void *p) {
    (void)user;
    if (p) injected_frees++;
    free(p);
}

#define DIR "tests/data/tiny/bert"
static const char *names[3] = {"input_ids", "attention_mask", "token_type_ids"};

static tm_tensor *load_npy(const char *dir, const char *name) {
    char *enc = tm_name_encode(name);
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.npy", dir, enc);
    free(enc);
    tm_tensor *t = NULL;
    tm_error err;
    if (tm_npy_read(path, &t, &err) != TM_OK) printf("cannot read %s: %s\n", path, err.message);
    return t;
}

static double max_diff(const tm_tensor *a, const tm_tensor *b) {
    if (tm_tensor_numel(a) != tm_tensor_numel(b) || tm_tensor_dtype(a) != TM_FLOAT) return INFINITY;
    const float *x = tm_tensor_data_const(a), *y = tm_tensor_data_const(b);
    double m = 0;
    for (int64_t i = 0; i < tm_tensor_numel(a); i++) {
        double d = fabs((double)x[i] - y[i]) / (1e-5 / 1e-4 + fabs((double)y[i]));
        if (d > m) m = d;
    }
    return m * 1e-4; /* |x-y| <= 1e-5 + 1e-4|y|  <=>  this <= 1e-4 */
}

static int n_callbacks, callback_saw_tensor;
static int on_node(void *user, const char *node, const char *op, int n, const char *const *outs,
                   const tm_tensor *const *ts) {
    (void)user; (void)node; (void)op; (void)outs;
    n_callbacks++;
    for (int i = 0; i < n; i++)
        if (ts[i] && tm_tensor_numel(ts[i]) >= 0) callback_saw_tensor++;
    return 0;
}
static int stop_early(void *user, const char *node, const char *op, int n,
                      const char *const *outs, const tm_tensor *const *ts) {
    (void)node; (void)op; (void)n; (void)outs; (void)ts;
    return ++*(int *)user >= 3;
}

static void test_bert(void) {
    tm_allocator alloc = {count_alloc, count_free, NULL};
    tm_load_options lo;
    tm_load_options_default(&lo);
    lo.allocator = &alloc;
    tm_model *m = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status st = tm_model_load(DIR "/model.onnx", &lo, &m, &err);
    CHECK(st == TM_OK, "load: %s", err.message);
    if (st != TM_OK) return;
    CHECK(tm_model_n_inputs(m) == 3, "3 inputs, got %d", tm_model_n_inputs(m));
    tm_value_desc d;
    CHECK(tm_model_input(m, 0, &d) == TM_OK && !strcmp(d.name, "input_ids") && d.rank == 2 &&
              d.dims[0] == -1 && d.dim_params[0] && !strcmp(d.dim_params[0], "batch_size"),
          "input 0 description");
    CHECK(tm_model_missing_ops(m) == NULL, "missing ops: %s", tm_model_missing_ops(m));

    const tm_tensor *in[3];
    for (int i = 0; i < 3; i++) in[i] = load_npy(DIR "/model.cases/default/inputs", names[i]);
    tm_tensor *ref = load_npy(DIR "/model.cases/default/ort", "last_hidden_state");
    CHECK(in[0] && in[1] && in[2] && ref, "reference data");
    if (!in[0] || !in[1] || !in[2] || !ref) goto out;

    /* Eager, with the per-node callback. */
    tm_run_options ro;
    tm_run_options_default(&ro);
    ro.on_node = on_node;
    tm_tensor *eager_out = NULL;
    st = tm_run_eager(m, 3, names, in, &eager_out, &ro, &err);
    CHECK(st == TM_OK, "eager: %s", err.message);
    CHECK(n_callbacks > 100 && callback_saw_tensor >= n_callbacks, "callback saw %d nodes, %d tensors",
          n_callbacks, callback_saw_tensor);
    if (eager_out) CHECK(max_diff(eager_out, ref) <= 1e-4, "eager vs ORT: %g", max_diff(eager_out, ref));

    int calls = 0;
    ro.on_node = stop_early;
    ro.user = &calls;
    tm_tensor *unused = NULL;
    st = tm_run_eager(m, 3, names, in, &unused, &ro, &err);
    CHECK(st == TM_ERR_RUNTIME && strstr(err.message, "stopped by callback") && calls == 3 && !unused,
          "a callback stops the run: %d, %s", st, err.message);

    /* Compiled: plan, session, a run that allocates nothing. */
    tm_plan *plan = NULL;
    tm_session *sess = NULL;
    long before_plan = injected_allocs;
    st = tm_plan_create(m, 3, names, in, NULL, &plan, &err);
    CHECK(st == TM_OK, "plan: %s", err.message);
    if (st == TM_OK) st = tm_session_create(plan, &sess, &err);
    CHECK(st == TM_OK, "session: %s", err.message);
    CHECK(injected_allocs > before_plan, "the injected allocator serves plans and sessions");
    CHECK(tm_plan_n_breaks(plan) == 0, "no graph break in BERT");
    CHECK(tm_plan_arena_bytes(plan) > 0, "an arena");
    tm_value_desc od;
    CHECK(tm_plan_output(plan, 0, &od) == TM_OK && od.rank == 3, "planned output shape");
    tm_tensor *out = tm_tensor_new(TM_FLOAT, od.rank, od.dims);
    if (sess && out) {
        st = tm_session_run(sess, 3, names, in, &out, &err); /* warm-up */
        CHECK(st == TM_OK, "run: %s", err.message);
        long a0 = injected_allocs, p0 = process_allocs;
        for (int r = 0; r < 5 && st == TM_OK; r++) st = tm_session_run(sess, 3, names, in, &out, &err);
        long a1 = injected_allocs, p1 = process_allocs;
        CHECK(st == TM_OK, "runs: %s", err.message);
        CHECK(a1 == a0, "injected allocations while the plan ran: %ld", a1 - a0);
        /* Nothing in the process allocates while a plan runs, fast kernels included: the
         * GEMM packs into the session's scratch and the pool's threads exist already
         * (tests/run.sh runs this test with the fast and the reference kernels). */
        if (COUNTING_ALLOCS)
            CHECK(p1 == p0, "process allocations while the plan ran (%s GEMM): %ld",
                  tm_sgemm_kernel_name(), p1 - p0);
        CHECK(max_diff(out, ref) <= 1e-4, "plan vs ORT: %g", max_diff(out, ref));
        if (eager_out) CHECK(max_diff(out, eager_out) <= 1e-5, "plan vs eager");
    }
    /* A wrong shape for the plan is an error, not a crash. */
    int64_t dims[2] = {1, 3};
    tm_tensor *small = tm_tensor_new(TM_INT64, 2, dims);
    const tm_tensor *bad_in[3] = {small, in[1], in[2]};
    st = tm_session_run(sess, 3, names, bad_in, &out, &err);
    CHECK(st == TM_ERR_SHAPE && strstr(err.message, "input_ids"), "wrong shape: %s", err.message);
    tm_tensor_free(small);
    tm_tensor_free(out);
    tm_session_free(sess);
    tm_plan_free(plan);

    /* The plan cache. */
    tm_tensor *o1 = NULL, *o2 = NULL;
    st = tm_model_run(m, 3, names, in, &o1, NULL, &err);
    CHECK(st == TM_OK && o1 && max_diff(o1, ref) <= 1e-4, "model_run: %s", err.message);
    long a0 = injected_allocs;
    st = tm_model_run(m, 3, names, in, &o2, NULL, &err);
    CHECK(st == TM_OK, "model_run again: %s", err.message);
    CHECK(injected_allocs == a0, "the second run reuses the cached plan and session (%ld allocations)",
          injected_allocs - a0);
    tm_tensor_free(o1);
    tm_tensor_free(o2);

    /* Errors: a missing input, an unknown input, NULL frees. */
    st = tm_run_eager(m, 2, names, in, &unused, NULL, &err);
    CHECK(st == TM_ERR_NOT_FOUND && strstr(err.message, "token_type_ids"), "missing input: %s",
          err.message);
    const char *wrong[3] = {"input_ids", "attention_mask", "nope"};
    st = tm_run_eager(m, 3, wrong, in, &unused, NULL, &err);
    CHECK(st == TM_ERR_NOT_FOUND && strstr(err.message, "nope"), "unknown input: %s", err.message);
    st = tm_run_eager(m, 2, names, in, &unused, NULL, NULL); /* a NULL error struct is fine */
    CHECK(st == TM_ERR_NOT_FOUND, "status without an error struct");
    tm_tensor_free(eager_out);
out:
    for (int i = 0; i < 3; i++) tm_tensor_free((tm_tensor *)in[i]);
    tm_tensor_free(ref);
    tm_model_free(m);
    CHECK(injected_allocs == injected_frees, "every injected allocation freed (%ld vs %ld)",
          injected_allocs, injected_frees);
}

/* Merged decoder: the If on use_cache_branch is a graph break unless it is static. */
static void test_merged_decoder(void) {
    const char *dir = "tests/data/tiny/gpt2";
    tm_model *m = NULL;
    tm_error err;
    tm_allocator alloc = {count_alloc, count_free, NULL};
    tm_load_options lo;
    tm_load_options_default(&lo);
    lo.allocator = &alloc;
    if (tm_model_load("tests/data/tiny/gpt2/decoder_model_merged.onnx", &lo, &m, &err) != TM_OK) {
        CHECK(0, "load: %s", err.message);
        return;
    }
    (void)dir;
    int n = tm_model_n_inputs(m);
    const char **nm = calloc((size_t)n, sizeof *nm);
    const tm_tensor **in = calloc((size_t)n, sizeof *in);
    int ok = 1;
    for (int i = 0; i < n; i++) {
        tm_value_desc d;
        tm_model_input(m, i, &d);
        nm[i] = d.name;
        in[i] = load_npy("tests/data/tiny/gpt2/decoder_model_merged.cases/default/inputs", d.name);
        if (!in[i]) ok = 0;
    }
    if (ok) {
        tm_plan *p1 = NULL, *p2 = NULL;
        tm_status st = tm_plan_create(m, n, nm, in, NULL, &p1, &err);
        CHECK(st == TM_OK && tm_plan_n_breaks(p1) == 1, "dynamic If breaks the plan: %s", err.message);
        int ui = -1;
        for (int i = 0; i < n; i++)
            if (!strcmp(nm[i], "use_cache_branch")) ui = i;
        tm_plan_options po;
        tm_plan_options_default(&po);
        const char *sn[1] = {"use_cache_branch"};
        const tm_tensor *sv[1] = {ui >= 0 ? in[ui] : NULL};
        po.n_static = 1;
        po.static_names = sn;
        po.static_values = sv;
        st = tm_plan_create(m, n, nm, in, &po, &p2, &err);
        CHECK(st == TM_OK && tm_plan_n_breaks(p2) == 0, "static use_cache_branch folds the If: %s",
              err.message);
        /* After the break, the rest is traced again with the condition known and cached:
         * a second run with the same condition allocates nothing through the model's
         * allocator (an eager tail would allocate every intermediate). */
        tm_session *s1 = NULL;
        if (st == TM_OK) st = tm_session_create(p1, &s1, &err);
        int n_out = tm_model_n_outputs(m);
        tm_tensor **outs = calloc((size_t)n_out, sizeof *outs);
        if (st == TM_OK) st = tm_session_run(s1, n, nm, in, outs, &err);
        CHECK(st == TM_OK, "run across the break: %s", err.message);
        tm_tensor *ref = load_npy("tests/data/tiny/gpt2/decoder_model_merged.cases/default/ort", "logits");
        int li = tm_model_output_index(m, "logits");
        if (st == TM_OK && ref && li >= 0)
            CHECK(max_diff(outs[li], ref) <= 1e-4, "logits across the break vs ORT: %g", max_diff(outs[li], ref));
        long a0 = injected_allocs;
        if (st == TM_OK) st = tm_session_run(s1, n, nm, in, outs, &err);
        CHECK(st == TM_OK && injected_allocs == a0, "second run reuses the compiled tail (%ld allocations)",
              injected_allocs - a0);
        for (int i = 0; i < n_out; i++) tm_tensor_free(outs[i]);
        free(outs);
        tm_tensor_free(ref);
        tm_session_free(s1);
        tm_plan_free(p1);
        tm_plan_free(p2);
    }
    for (int i = 0; i < n; i++) tm_tensor_free((tm_tensor *)in[i]);
    free(nm);
    free(in);
    tm_model_free(m);
}

static tm_tensor *copy_of(const tm_tensor *t) {
    if (!t) return NULL;
    tm_tensor *c = tm_tensor_new(tm_tensor_dtype(t), tm_tensor_rank(t), tm_tensor_dims(t));
    if (c) memcpy(tm_tensor_data(c), tm_tensor_data_const(t), tm_tensor_nbytes(t));
    return c;
}

static int same_bytes(const tm_tensor *a, const tm_tensor *b) {
    return a && b && tm_tensor_nbytes(a) == tm_tensor_nbytes(b) &&
           !memcmp(tm_tensor_data_const(a), tm_tensor_data_const(b), tm_tensor_nbytes(a));
}

/* Outputs computed in the caller's tensors (a decode step's KV cache is most of what it
 * writes): the same bytes as the session's own buffers give, tm_session_result pointing
 * at the caller's tensor, and the copy at the end kept where a given output overlaps an
 * input that a later kernel still reads. */
static void test_outputs_in_place(void) {
    const char *cases = "tests/data/tiny/gpt2/decoder_model_merged.cases/default/inputs";
    tm_model *m = NULL;
    tm_error err;
    if (tm_model_load("tests/data/tiny/gpt2/decoder_model_merged.onnx", NULL, &m, &err) != TM_OK) {
        CHECK(0, "load: %s", err.message);
        return;
    }
    int n = tm_model_n_inputs(m), n_out = tm_model_n_outputs(m), ui = -1, past1 = -1;
    const char **nm = calloc((size_t)n, sizeof *nm);
    const tm_tensor **in = calloc((size_t)n, sizeof *in);
    int ok = 1;
    for (int i = 0; i < n; i++) {
        tm_value_desc d;
        tm_model_input(m, i, &d);
        nm[i] = d.name;
        in[i] = load_npy(cases, d.name);
        ok = ok && in[i];
        if (!strcmp(d.name, "use_cache_branch")) ui = i;
        if (!strcmp(d.name, "past_key_values.1.key")) past1 = i;
    }
    int pres0 = tm_model_output_index(m, "present.0.key"), li = tm_model_output_index(m, "logits");
    tm_plan_options po;
    tm_plan_options_default(&po);
    const char *sn[1] = {"use_cache_branch"};
    const tm_tensor *sv[1] = {ui >= 0 ? in[ui] : NULL};
    po.n_static = 1;
    po.static_names = sn;
    po.static_values = sv;
    tm_plan *p = NULL;
    tm_session *s = NULL;
    tm_tensor **a = calloc((size_t)n_out, sizeof *a), **b = calloc((size_t)n_out, sizeof *b);
    tm_status st = ok && ui >= 0 && past1 >= 0 && pres0 >= 0 && li >= 0 ? TM_OK : TM_ERR_NOT_FOUND;
    if (st == TM_OK) st = tm_plan_create(m, n, nm, in, &po, &p, &err);
    if (st == TM_OK) st = tm_session_create(p, &s, &err);
    /* The session's own buffers (no outputs given), copied; then NULL entries, then
     * caller tensors first filled with NaN bytes. */
    if (st == TM_OK) st = tm_session_run(s, n, nm, in, NULL, &err);
    for (int i = 0; st == TM_OK && i < n_out; i++) a[i] = copy_of(tm_session_result(s, i));
    tm_tensor **c = calloc((size_t)n_out, sizeof *c);
    if (st == TM_OK) st = tm_session_run(s, n, nm, in, c, &err);
    for (int i = 0; st == TM_OK && i < n_out; i++) {
        CHECK(same_bytes(c[i], a[i]), "output %d into a new tensor: as in the session's buffer", i);
        b[i] = copy_of(c[i]);
        memset(tm_tensor_data(b[i]), 0xff, tm_tensor_nbytes(b[i]));
    }
    if (st == TM_OK) st = tm_session_run(s, n, nm, in, b, &err);
    for (int i = 0; st == TM_OK && i < n_out; i++)
        CHECK(same_bytes(b[i], a[i]), "output %d into the caller's tensor: as in the session's "
              "buffer", i);
    if (st == TM_OK)
        CHECK(tm_session_result(s, pres0) == b[pres0], "tm_session_result is the caller's tensor "
              "the run wrote present.0.key into");
    /* present.0.key's buffer holds past_key_values.1.key, which layer 1 reads after layer
     * 0 wrote present.0.key: that output must be copied at the end. */
    float *shared = NULL;
    tm_tensor *past_in = NULL, *pres_out = NULL;
    if (st == TM_OK) {
        shared = calloc(tm_tensor_nbytes(b[pres0]) / sizeof(float) + 1, sizeof *shared);
        memcpy(shared, tm_tensor_data_const(in[past1]), tm_tensor_nbytes(in[past1]));
        past_in = tm_tensor_wrap(TM_FLOAT, tm_tensor_rank(in[past1]), tm_tensor_dims(in[past1]), shared);
        pres_out = tm_tensor_wrap(TM_FLOAT, tm_tensor_rank(b[pres0]), tm_tensor_dims(b[pres0]), shared);
        const tm_tensor *saved = in[past1];
        in[past1] = past_in;
        tm_tensor *keep = b[pres0];
        b[pres0] = pres_out;
        st = tm_session_run(s, n, nm, in, b, &err);
        in[past1] = saved;
        b[pres0] = keep;
        if (st == TM_OK)
            CHECK(same_bytes(pres_out, a[pres0]) && same_bytes(b[li], a[li]),
                  "an output over an input a later kernel reads: the same results");
    }
    CHECK(st == TM_OK, "runs: %s", err.message);
    for (int i = 0; i < n_out; i++) {
        tm_tensor_free(a[i]);
        tm_tensor_free(b[i]);
        tm_tensor_free(c[i]);
    }
    tm_tensor_free(past_in);
    tm_tensor_free(pres_out);
    free(shared);
    free(a);
    free(b);
    free(c);
    tm_session_free(s);
    tm_plan_free(p);
    for (int i = 0; i < n; i++) tm_tensor_free((tm_tensor *)in[i]);
    free(nm);
    free(in);
    tm_model_free(m);
}

static void test_contract(void) {
    tm_model_free(NULL);
    tm_plan_free(NULL);
    tm_session_free(NULL);
    tm_tensor_free(NULL);
    passed++;
    tm_model *m = (tm_model *)0x1;
    tm_error err;
    tm_status st = tm_model_load("tests/data/no-such-file.onnx", NULL, &m, &err);
    CHECK(st == TM_ERR_IO && m == (tm_model *)0x1 && strstr(err.message, "no-such-file.onnx"),
          "missing file leaves the out-parameter alone: %s", err.message);
    CHECK(!strcmp(tm_version(), TM_VERSION_STRING), "version");
    CHECK(!strcmp(tm_dtype_name(TM_BFLOAT16), "bfloat16"), "dtype names");
}

/* TM_PROFILE=1 (read when a session is made): the profile goes to stderr when the session
 * is freed, over its runs after the first (which faults the arena's pages in), or over
 * that one run when there was no other. Returns what was printed (malloc'ed), or NULL. */
static char *profile_of_runs(tm_plan *plan, int runs, const tm_tensor *const *in) {
    tm_session *s = NULL;
    tm_error err;
    setenv("TM_PROFILE", "1", 1);
    tm_status st = tm_session_create(plan, &s, &err);
    unsetenv("TM_PROFILE");
    for (int r = 0; r < runs && st == TM_OK; r++) st = tm_session_run(s, 3, names, in, NULL, &err);
    CHECK(st == TM_OK, "profiled runs: %s", err.message);
    FILE *tmp = tmpfile();
    int saved = dup(2);
    if (!tmp || saved < 0) {
        tm_session_free(s);
        return NULL;
    }
    fflush(stderr);
    dup2(fileno(tmp), 2);
    tm_session_free(s);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char *text = calloc(1, 1 << 16);
    rewind(tmp);
    if (text) text[fread(text, 1, (1 << 16) - 1, tmp)] = 0;
    fclose(tmp);
    return text;
}

static void test_profile(void) {
    tm_model *m = NULL;
    tm_error err;
    tm_status st = tm_model_load(DIR "/model.onnx", NULL, &m, &err);
    CHECK(st == TM_OK, "load: %s", err.message);
    const tm_tensor *in[3];
    for (int i = 0; i < 3; i++) in[i] = load_npy(DIR "/model.cases/default/inputs", names[i]);
    tm_plan *plan = NULL;
    if (st == TM_OK && in[0] && in[1] && in[2]) st = tm_plan_create(m, 3, names, in, NULL, &plan, &err);
    CHECK(plan != NULL, "plan: %s", err.message);
    for (int runs = 1; plan && runs <= 4; runs += 3) {
        char *text = profile_of_runs(plan, runs, in);
        char want[64];
        snprintf(want, sizeof want, "over %d runs", runs == 1 ? 1 : runs - 1);
        CHECK(text && strstr(text, "profile of") && strstr(text, want),
              "TM_PROFILE after %d runs says '%s': %s", runs, want, text ? text : "(nothing)");
        free(text);
    }
    tm_plan_free(plan);
    tm_model_free(m);
    for (int i = 0; i < 3; i++) tm_tensor_free((tm_tensor *)in[i]);
}

int main(void) {
    test_contract();
    test_profile();
    test_bert();
    test_merged_decoder();
    test_outputs_in_place();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
