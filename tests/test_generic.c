/* Plans that serve changing sizes (src/runtime/generic.c): every tiny export run through
 * tm_model_run at a series of lengths (a decoder's past, a prompt's length, an encoder's
 * sequence length, a batch size), each run's outputs against an eager run and against a
 * plan made for that one shape; the cache must have made a generic plan and served the
 * later sizes with it; a bound session allocates nothing, and re-binding to a smaller
 * size allocates nothing either. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "transmuter.h"
#include "core/tensor.h"
#include "core/dtype.h"
#include "io/npy.h"
#include "check.h"
#include "count_allocs.h"

static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static double urand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (double)(rng >> 11) / 9007199254740992.0;
}

typedef struct sizes {
    int64_t batch, seq, past;
} sizes;

/* The size a declared dim takes at these sizes, from its name (Optimum's names); -1 when
 * the template's dim stays. */
static int64_t dim_for(const char *name, const sizes *z) {
    if (!name) return -1;
    if (strstr(name, "batch")) return z->batch;
    if (strstr(name, "past") && strstr(name, "+ 1")) return z->past + 1;
    if (strstr(name, "past")) return z->past;
    if (strstr(name, "attention_mask") || strstr(name, "total")) return z->past + z->seq;
    if (!strcmp(name, "sequence_length") || !strcmp(name, "decoder_sequence_length"))
        return z->seq;
    return -1;
}

typedef struct model_case {
    const char *path;
    tm_model *m;
    int n;
    const char **names;
    tm_tensor **tmpl;      /* the shipped case's inputs: dtypes and fixed dims */
    double tol;
} model_case;

/* Inputs at sizes z: ids small and random, masks ones, positions past.., floats random. */
static tm_tensor **make_inputs(const model_case *mc, const sizes *z) {
    tm_tensor **in = calloc((size_t)mc->n, sizeof *in);
    for (int i = 0; i < mc->n; i++) {
        tm_value_desc d;
        tm_model_input(mc->m, i, &d);
        const tm_tensor *t = mc->tmpl[i];
        int64_t dims[TM_MAX_RANK];
        for (int k = 0; k < t->rank; k++) {
            int64_t v = dim_for(d.dim_params && k < d.rank ? d.dim_params[k] : NULL, z);
            dims[k] = v >= 0 ? v : t->dims[k];
        }
        in[i] = tm_tensor_new(t->dtype, t->rank, dims);
        int64_t n = tm_numel(t->rank, dims);
        for (int64_t e = 0; e < n; e++) {
            double v;
            if (!strcmp(d.name, "use_cache_branch")) v = z->past > 0;
            else if (strstr(d.name, "mask")) v = 1;
            else if (strstr(d.name, "token_type")) v = 0;
            else if (strstr(d.name, "position_ids")) v = (double)(z->past + e % dims[t->rank - 1]);
            else if (strstr(d.name, "input_ids")) v = (double)(int)(urand() * 60);
            else v = urand() * 2 - 1;
            if (tm_dtype_is_float(t->dtype)) tm_store_f64(in[i]->data, t->dtype, (size_t)e, v);
            else tm_store_i64(in[i]->data, t->dtype, (size_t)e, (int64_t)v);
        }
    }
    return in;
}

/* max |a - b| / max |b| (normwise: random inputs make some elements near zero). */
static double max_rel_err(const tm_tensor *a, const tm_tensor *b) {
    if (!a || !b || a->dtype != b->dtype || a->rank != b->rank ||
        memcmp(a->dims, b->dims, (size_t)a->rank * sizeof a->dims[0]))
        return INFINITY;
    double diff = 0, scale = 0;
    int64_t n = tm_numel(a->rank, a->dims);
    for (int64_t e = 0; e < n; e++) {
        double x = tm_dtype_is_float(a->dtype) ? tm_load_f64(a->data, a->dtype, (size_t)e)
                                               : (double)tm_load_i64(a->data, a->dtype, (size_t)e);
        double y = tm_dtype_is_float(b->dtype) ? tm_load_f64(b->data, b->dtype, (size_t)e)
                                               : (double)tm_load_i64(b->data, b->dtype, (size_t)e);
        if (!(fabs(x - y) <= diff)) diff = fabs(x - y);
        if (fabs(y) > scale) scale = fabs(y);
    }
    return scale > 0 ? diff / scale : diff;
}

static void free_all(tm_tensor **t, int n) {
    for (int i = 0; t && i < n; i++) tm_tensor_free(t[i]);
    free(t);
}

/* One size: the cache's run against eager and against a plan for this shape. */
static void run_one(model_case *mc, const sizes *z, const char *what) {
    tm_tensor **in = make_inputs(mc, z);
    int n_out = tm_model_n_outputs(mc->m);
    tm_tensor **o_cache = calloc((size_t)n_out, sizeof *o_cache);
    tm_tensor **o_eager = calloc((size_t)n_out, sizeof *o_eager);
    tm_tensor **o_plan = calloc((size_t)n_out, sizeof *o_plan);
    tm_plan_options po;
    tm_plan_options_default(&po);
    const char *sn[1] = {"use_cache_branch"};
    const tm_tensor *sv[1] = {NULL};
    for (int i = 0; i < mc->n; i++)
        if (!strcmp(mc->names[i], "use_cache_branch")) sv[0] = in[i];
    if (sv[0]) {
        po.n_static = 1;
        po.static_names = sn;
        po.static_values = sv;
    }
    tm_error err = {0};
    const tm_tensor *const *cin = (const tm_tensor *const *)in;
    tm_status st = tm_model_run(mc->m, mc->n, mc->names, cin, o_cache, &po, &err);
    CHECK(st == TM_OK, "%s %s b%lld s%lld p%lld: cached run: %s", mc->path, what,
          (long long)z->batch, (long long)z->seq, (long long)z->past, err.message);
    st = tm_run_eager(mc->m, mc->n, mc->names, cin, o_eager, NULL, &err);
    CHECK(st == TM_OK, "%s: eager run: %s", mc->path, err.message);
    tm_plan *plan = NULL;
    tm_session *s = NULL;
    st = tm_plan_create(mc->m, mc->n, mc->names, cin, &po, &plan, &err);
    if (st == TM_OK) st = tm_session_create(plan, &s, &err);
    if (st == TM_OK) st = tm_session_run(s, mc->n, mc->names, cin, o_plan, &err);
    CHECK(st == TM_OK, "%s: one-shape plan: %s", mc->path, err.message);
    for (int k = 0; k < n_out; k++) {
        if (!o_eager[k]) continue;
        double e1 = max_rel_err(o_cache[k], o_eager[k]);
        double e2 = max_rel_err(o_cache[k], o_plan[k]);
        CHECK(e1 <= mc->tol, "%s %s b%lld s%lld p%lld output %d: %g from eager", mc->path, what,
              (long long)z->batch, (long long)z->seq, (long long)z->past, k, e1);
        CHECK(e2 <= 1e-6, "%s %s b%lld s%lld p%lld output %d: %g from the one-shape plan",
              mc->path, what, (long long)z->batch, (long long)z->seq, (long long)z->past, k, e2);
    }
    tm_session_free(s);
    tm_plan_free(plan);
    free_all(o_cache, n_out);
    free_all(o_eager, n_out);
    free_all(o_plan, n_out);
    free_all(in, mc->n);
}

static int has_input(const model_case *mc, const char *part) {
    for (int i = 0; i < mc->n; i++)
        if (strstr(mc->names[i], part)) return 1;
    return 0;
}

static int load_case(model_case *mc, const char *path) {
    memset(mc, 0, sizeof *mc);
    mc->path = path;
    tm_error err = {0};
    tm_load_options lo;
    tm_load_options_default(&lo);
    lo.threads = 1;
    if (tm_model_load(path, &lo, &mc->m, &err) != TM_OK) {
        CHECK(0, "%s: %s", path, err.message);
        return 0;
    }
    mc->n = tm_model_n_inputs(mc->m);
    mc->names = calloc((size_t)mc->n, sizeof *mc->names);
    mc->tmpl = calloc((size_t)mc->n, sizeof *mc->tmpl);
    char dir[1024];
    snprintf(dir, sizeof dir, "%.*s.cases/default/inputs", (int)(strlen(path) - 5), path);
    for (int i = 0; i < mc->n; i++) {
        tm_value_desc d;
        tm_model_input(mc->m, i, &d);
        mc->names[i] = d.name;
        char f[1400];
        snprintf(f, sizeof f, "%s/%s.npy", dir, d.name);
        if (tm_npy_read(f, &mc->tmpl[i], &err) != TM_OK) {
            CHECK(0, "%s: template input %s: %s", path, d.name, err.message);
            return 0;
        }
    }
    int half = strstr(path, "fp16") || strstr(path, "q4") || strstr(path, "quantized");
    mc->tol = half ? 1e-2 : 1e-5;
    return 1;
}

static void free_case(model_case *mc) {
    free_all(mc->tmpl, mc->n);
    free(mc->names);
    tm_model_free(mc->m);
}

static void expect_generic(model_case *mc, const char *what, size_t runs_before, int n_runs) {
    tm_plan_stats ps = {.size = sizeof ps};
    tm_model_plan_stats(mc->m, &ps);
    CHECK(ps.generic_plans >= 1, "%s %s: no generic plan made (%zu failed tries)", mc->path,
          what, ps.generic_failed);
    /* The first two sizes make plans of their own; the others are the generic plan's. */
    CHECK(ps.generic_runs >= (size_t)(n_runs - 2) + runs_before, "%s %s: %zu of %d runs served "
          "by a generic plan", mc->path, what, ps.generic_runs - runs_before, n_runs);
}

static void test_model(const char *path) {
    model_case mc;
    if (!load_case(&mc, path)) {
        if (mc.m) free_case(&mc);
        return;
    }
    int decoder = has_input(&mc, "past");
    tm_plan_stats ps = {.size = sizeof ps};
    if (decoder) {
        /* Decode steps: one new token on a growing (and then shrinking) past. */
        static const int64_t pasts[] = {6, 7, 8, 12, 9, 20, 3, 33};
        int n = (int)(sizeof pasts / sizeof pasts[0]);
        for (int i = 0; i < n; i++) run_one(&mc, &(sizes){1, 1, pasts[i]}, "decode");
        expect_generic(&mc, "decode", 0, n);
        if (has_input(&mc, "use_cache_branch")) {
            /* Prompts of many lengths, no past. */
            static const int64_t seqs[] = {5, 9, 13, 7, 17, 2};
            tm_model_plan_stats(mc.m, &ps);
            size_t before = ps.generic_runs;
            int m = (int)(sizeof seqs / sizeof seqs[0]);
            for (int i = 0; i < m; i++) run_one(&mc, &(sizes){1, seqs[i], 0}, "prefill");
            expect_generic(&mc, "prefill", before, m);
        }
    } else {
        static const int64_t seqs[] = {5, 9, 13, 7, 17, 2, 31};
        int n = (int)(sizeof seqs / sizeof seqs[0]);
        for (int i = 0; i < n; i++) run_one(&mc, &(sizes){1, seqs[i], 0}, "length");
        expect_generic(&mc, "length", 0, n);
        /* Batch sizes at one length. */
        static const int64_t batches[] = {2, 3, 5, 4};
        tm_model_plan_stats(mc.m, &ps);
        size_t before = ps.generic_runs;
        int m = (int)(sizeof batches / sizeof batches[0]);
        for (int i = 0; i < m; i++) run_one(&mc, &(sizes){batches[i], 6, 0}, "batch");
        expect_generic(&mc, "batch", before, m);
    }
    free_case(&mc);
}

/* A generic session: a run at its bound size allocates nothing, nor does binding again
 * to sizes whose arena fits (two sizes alternating, each with its own output tensors). */
static void test_no_allocation(const char *path) {
    model_case mc;
    if (!load_case(&mc, path)) return;
    tm_plan_options po;
    tm_plan_options_default(&po);
    int n_out = tm_model_n_outputs(mc.m);
    static const int64_t seqs[] = {5, 9, 40, 12};
    tm_tensor **in[4], **out[4];
    tm_error err = {0};
    for (int i = 0; i < 4; i++) {
        in[i] = make_inputs(&mc, &(sizes){1, seqs[i], 0});
        out[i] = calloc((size_t)n_out, sizeof **out);
        tm_status st = tm_model_run(mc.m, mc.n, mc.names, (const tm_tensor *const *)in[i], out[i],
                                    &po, &err);
        CHECK(st == TM_OK, "%s: %s", path, err.message);
    }
    for (int r = 0; r < 6; r++) {
        int i = 2 + r % 2;
        long before = process_allocs;
        tm_status st = tm_model_run(mc.m, mc.n, mc.names, (const tm_tensor *const *)in[i], out[i],
                                    &po, &err);
        long allocs = process_allocs - before;
        CHECK(st == TM_OK, "%s: %s", path, err.message);
        if (COUNTING_ALLOCS)
            CHECK(allocs == 0, "%s length %lld: a run of the generic plan allocated %ld times",
                  path, (long long)seqs[i], allocs);
    }
    tm_plan_stats ps = {.size = sizeof ps};
    tm_model_plan_stats(mc.m, &ps);
    CHECK(ps.generic_runs >= 7, "%s: %zu runs of the generic plan", path, ps.generic_runs);
    for (int i = 0; i < 4; i++) {
        free_all(in[i], mc.n);
        free_all(out[i], n_out);
    }
    free_case(&mc);
}

/* tm_plan_create with dynamic: one plan, one session, many sizes; the dims that vary by
 * default (the named ones) or as given; max_size refused beyond. */
static void test_dynamic_plan(const char *path, const sizes *first, const sizes *later, int n_later,
                              const char *vary_name, int vary_axis, const char *what) {
    model_case mc;
    if (!load_case(&mc, path)) return;
    tm_tensor **in0 = make_inputs(&mc, first);
    tm_plan_options po;
    tm_plan_options_default(&po);
    po.dynamic = 1;
    po.max_size = 60;
    const char *sn[1] = {"use_cache_branch"};
    const tm_tensor *sv[1] = {NULL};
    for (int i = 0; i < mc.n; i++)
        if (!strcmp(mc.names[i], "use_cache_branch")) sv[0] = in0[i];
    if (sv[0]) {
        po.n_static = 1;
        po.static_names = sn;
        po.static_values = sv;
    }
    const char *vn[1] = {vary_name};
    int va[1] = {vary_axis};
    if (vary_name) {
        po.n_vary = 1;
        po.vary_names = vn;
        po.vary_axes = va;
    }
    tm_plan *plan = NULL;
    tm_session *s = NULL;
    tm_error err = {0};
    tm_status st = tm_plan_create(mc.m, mc.n, mc.names, (const tm_tensor *const *)in0, &po, &plan, &err);
    if (st == TM_OK) st = tm_session_create(plan, &s, &err);
    CHECK(st == TM_OK, "%s %s: %s", path, what, err.message);
    int64_t lo = 0, hi = 0;
    CHECK(plan && tm_plan_serves_sizes(plan, &lo, &hi) && lo == 2 && hi == 60,
          "%s %s: the plan does not serve sizes 2..60", path, what);
    int n_out = tm_model_n_outputs(mc.m);
    for (int r = 0; st == TM_OK && r < n_later; r++) {
        tm_tensor **in = make_inputs(&mc, &later[r]);
        tm_tensor **o_plan = calloc((size_t)n_out, sizeof *o_plan);
        tm_tensor **o_eager = calloc((size_t)n_out, sizeof *o_eager);
        st = tm_session_run(s, mc.n, mc.names, (const tm_tensor *const *)in, o_plan, &err);
        CHECK(st == TM_OK, "%s %s run %d: %s", path, what, r, err.message);
        tm_run_eager(mc.m, mc.n, mc.names, (const tm_tensor *const *)in, o_eager, NULL, &err);
        for (int k = 0; st == TM_OK && k < n_out; k++) {
            double e = max_rel_err(o_plan[k], o_eager[k]);
            CHECK(e <= mc.tol, "%s %s run %d output %d: %g from eager", path, what, r, k, e);
        }
        free_all(o_plan, n_out);
        free_all(o_eager, n_out);
        free_all(in, mc.n);
    }
    /* Beyond max_size: refused with a message naming the bound. */
    sizes big = later[0];
    if (vary_name && !strcmp(vary_name, "input_ids") && vary_axis == 0) big.batch = 61;
    else if (first->past) big.past = 61;
    else big.seq = 61;
    tm_tensor **in = make_inputs(&mc, &big);
    tm_tensor **o = calloc((size_t)n_out, sizeof *o);
    st = tm_session_run(s, mc.n, mc.names, (const tm_tensor *const *)in, o, &err);
    CHECK(s && st == TM_ERR_SHAPE && strstr(err.message, "up to 60"), "%s %s: size 61 not "
          "refused (%s)", path, what, err.message);
    free_all(o, n_out);
    free_all(in, mc.n);
    tm_session_free(s);
    tm_plan_free(plan);
    free_all(in0, mc.n);
    free_case(&mc);
}

/* A value-and-gradient plan with dynamic: one plan for batches of every length (and one
 * for every batch size), its loss and gradients against a gradient plan made for each
 * shape alone. */
static void test_dynamic_grad(const char *path, int vary_batch) {
    tm_model *m = NULL;
    tm_error err = {0};
    tm_load_options lo;
    tm_load_options_default(&lo);
    lo.threads = 1;
    lo.trainable = 1;
    if (tm_model_load(path, &lo, &m, &err) != TM_OK) {
        CHECK(0, "%s: %s", path, err.message);
        return;
    }
    int n_in = tm_model_n_inputs(m);
    const char *names[8];
    for (int i = 0; i < n_in; i++) {
        tm_value_desc d;
        tm_model_input(m, i, &d);
        names[i] = d.name;
    }
    names[n_in] = "labels";
    tm_grad_options go;
    tm_grad_options_default(&go);
    go.loss = TM_LOSS_CROSS_ENTROPY;
    go.output = "logits";
    go.target = "labels";
    /* Inputs (B, L): ids, ones, zeros; labels (B). */
    #define MAKE(B, L, T)                                                              \
        do {                                                                          \
            int64_t dims[2] = {(B), (L)};                                             \
            for (int i = 0; i < n_in; i++) {                                          \
                T[i] = tm_tensor_new(TM_INT64, 2, dims);                              \
                int64_t *v = T[i]->data;                                              \
                for (int64_t e = 0; e < (B) * (L); e++)                               \
                    v[e] = !strcmp(names[i], "input_ids") ? 1 + (e * 7 + (L)) % 50    \
                         : !strcmp(names[i], "attention_mask") ? 1 : 0;               \
            }                                                                         \
            int64_t ld[1] = {(B)};                                                    \
            T[n_in] = tm_tensor_new(TM_INT64, 1, ld);                                 \
            for (int64_t b = 0; b < (B); b++) ((int64_t *)T[n_in]->data)[b] = b % 2;  \
        } while (0)
    tm_tensor *first[8];
    int64_t b0 = vary_batch ? 3 : 2, l0 = 6;
    MAKE(b0, l0, first);
    tm_plan_options po;
    tm_plan_options_default(&po);
    po.dynamic = 1;
    const char *vn[1] = {"input_ids"};
    int va[1] = {vary_batch ? 0 : 1};
    po.n_vary = 1;
    po.vary_names = vn;
    po.vary_axes = va;
    tm_plan *gp = NULL;
    tm_session *gs = NULL;
    tm_status st = tm_grad_plan_create(m, n_in + 1, names, (const tm_tensor *const *)first, &po,
                                       &go, &gp, &err);
    if (st == TM_OK) st = tm_session_create(gp, &gs, &err);
    CHECK(st == TM_OK, "%s: dynamic gradient plan: %s", path, err.message);
    CHECK(gp && tm_plan_serves_sizes(gp, NULL, NULL), "%s: the gradient plan serves one shape "
          "(%s)", path, vary_batch ? "batch" : "length");
    static const int64_t lengths[] = {6, 9, 2, 17, 4}, batches[] = {3, 5, 2, 8, 4};
    for (int r = 0; st == TM_OK && r < 5; r++) {
        int64_t b = vary_batch ? batches[r] : b0, l = vary_batch ? l0 : lengths[r];
        tm_tensor *in[8];
        MAKE(b, l, in);
        int n_out = tm_plan_n_outputs(gp);
        tm_tensor **og = calloc((size_t)n_out, sizeof *og), **os = calloc((size_t)n_out, sizeof *os);
        st = tm_session_run(gs, n_in + 1, names, (const tm_tensor *const *)in, og, &err);
        CHECK(st == TM_OK, "%s b%lld l%lld: %s", path, (long long)b, (long long)l, err.message);
        tm_plan *sp = NULL;
        tm_session *ss = NULL;
        tm_status s2 = tm_grad_plan_create(m, n_in + 1, names, (const tm_tensor *const *)in, NULL,
                                           &go, &sp, &err);
        if (s2 == TM_OK) s2 = tm_session_create(sp, &ss, &err);
        if (s2 == TM_OK) s2 = tm_session_run(ss, n_in + 1, names, (const tm_tensor *const *)in, os, &err);
        CHECK(s2 == TM_OK, "%s: one-shape gradient plan: %s", path, err.message);
        for (int k = 0; st == TM_OK && s2 == TM_OK && k < n_out; k++) {
            double e = max_rel_err(og[k], os[k]);
            CHECK(e <= 1e-6, "%s b%lld l%lld output %d (loss or gradient): %g from the one-shape "
                  "plan", path, (long long)b, (long long)l, k, e);
        }
        free_all(og, n_out);
        free_all(os, n_out);
        tm_session_free(ss);
        tm_plan_free(sp);
        for (int i = 0; i <= n_in; i++) tm_tensor_free(in[i]);
    }
    #undef MAKE
    for (int i = 0; i <= n_in; i++) tm_tensor_free(first[i]);
    tm_session_free(gs);
    tm_plan_free(gp);
    tm_model_free(m);
}

int main(int argc, char **argv) {
    const char *root = argc > 1 ? argv[1] : "tests/data/tiny";
    static const char *models[] = {
        "bert/model.onnx", "bert/model_quantized.onnx", "bert/model_q4.onnx", "bert/model_fp16.onnx",
        "bert-seqcls/model.onnx", "distilbert/model.onnx", "roberta/model.onnx",
        "gpt2/decoder_model.onnx", "gpt2/decoder_model_merged.onnx",
        "gpt2/decoder_model_merged_q4.onnx", "gpt2/decoder_model_merged_quantized.onnx",
        "gpt2/decoder_model_merged_fp16.onnx", "gpt2/decoder_with_past_model.onnx",
        "llama/decoder_model.onnx", "llama/decoder_model_merged.onnx",
        "llama/decoder_model_merged_q4.onnx", "llama/decoder_model_merged_quantized.onnx",
        "llama/decoder_model_merged_fp16.onnx",
        "whisper/decoder_model_merged.onnx", "whisper/decoder_with_past_model.onnx",
    };
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", root, models[i]);
        FILE *f = fopen(path, "rb");
        if (!f) {
            CHECK(0, "%s is missing", path);
            continue;
        }
        fclose(f);
        test_model(path);
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/bert/model.onnx", root);
    test_no_allocation(path);
    static const sizes lengths[] = {{1, 9, 0}, {1, 40, 0}, {1, 2, 0}, {1, 17, 0}};
    test_dynamic_plan(path, &(sizes){1, 5, 0}, lengths, 4, NULL, 0, "dynamic lengths");
    static const sizes batches[] = {{2, 6, 0}, {7, 6, 0}, {4, 6, 0}};
    test_dynamic_plan(path, &(sizes){3, 6, 0}, batches, 3, "input_ids", 0, "dynamic batch");
    snprintf(path, sizeof path, "%s/bert-seqcls/model.onnx", root);
    test_dynamic_grad(path, 0);
    test_dynamic_grad(path, 1);
    snprintf(path, sizeof path, "%s/llama/decoder_model_merged.onnx", root);
    static const sizes pasts[] = {{1, 1, 7}, {1, 1, 30}, {1, 1, 2}, {1, 1, 12}};
    test_dynamic_plan(path, &(sizes){1, 1, 6}, pasts, 4, NULL, 0, "dynamic past");
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
