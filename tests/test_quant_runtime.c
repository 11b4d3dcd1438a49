/* The quantized paths end to end inside the runtime: the pass that fuses MATMUL_INTEGER ->
 * Cast -> Mul -> Add (traces built here, near misses left alone, fused and unfused results
 * equal bit for bit); the model's fold cache (plans for other shapes and eager runs reuse
 * one packing per weight, the weights' pages given back do not change any output, a model
 * loaded from memory folds per trace); the dequantize_nbits load option against the
 * packed 4-bit kernels. Models: the tiny int8 and q4 BERT exports in tests/data. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../src/runtime/fold_cache.c"
#include "../src/runtime/passes.h"
#include "../src/core/prims/fused.h"
#include "io/npy.h"

#define CHECK_RNG_SEED 88172645463325252ULL
#include "check.h"

/* ---- The MATMUL_INTEGER epilogue pass ------------------------------------------------- */

enum { M = 5, K = 9, N = 7 };

typedef struct chain {
    tm_val a, packed, acc, f, y, z, scale, bias, residual;
} chain;

static tm_val const_tensor(tm_ctx *c, tm_dtype dt, int rank, const int64_t *dims, int seed) {
    tm_tensor *t = tm_tensor_alloc(dt, rank, dims, NULL);
    int64_t n = tm_numel(rank, dims);
    for (int64_t i = 0; i < n; i++) {
        uint32_t r = (uint32_t)rng_next() + (uint32_t)seed;
        if (dt == TM_FLOAT) ((float *)t->data)[i] = (float)(r % 2001) / 1000.0f - 1.0f;
        else ((uint8_t *)t->data)[i] = (uint8_t)r;
    }
    return tm_val_tensor(c, t, 0);
}

/* A (1, 1) f32 constant, for the binary primitives' aligned ranks. */
static tm_val const_value(tm_ctx *c, double v) {
    int64_t d[2] = {1, 1};
    tm_tensor *t = tm_tensor_alloc(TM_FLOAT, 2, d, NULL);
    ((float *)t->data)[0] = (float)v;
    return tm_val_tensor(c, t, 0);
}

/* a (M, K) uint8 -> MATMUL_INTEGER with B (K, N) int8 -> CAST f32 -> MUL scale -> ADD bias
 * [-> GELU of form gelu - 1 when gelu is 1 or 2; its erf chain when 3; the erf GELU then
 * an ADD of the residual r (M, N) when 4]; the scale (scale_rows, scale_cols): (1, N) per
 * column, (1, 1), or a near miss. In trace mode a is symbolic. */
static chain build_gelu(tm_ctx *c, tm_val a, int64_t scale_rows, int64_t scale_cols, int gelu,
                        tm_val r) {
    chain ch;
    ch.a = a;
    ch.residual = gelu == 4 ? r : TM_NONE;
    int64_t bd[2] = {K, N}, sd[2] = {scale_rows, scale_cols}, bsd[2] = {1, N};
    tm_val b = const_tensor(c, TM_INT8, 2, bd, 1);
    ch.z = tm_const_scalar(c, TM_UINT8, 3.0);
    tm_args args;
    memset(&args, 0, sizeof args);
    args.i[0] = K;
    args.i[1] = N;
    tm_val pin[2] = {b, tm_const_scalar(c, TM_INT8, -2.0)};
    ch.packed = tm_prim(c, TM_P_QGEMM_PACK_B, pin, 2, &args);
    tm_val in[3] = {a, ch.packed, ch.z};
    ch.acc = tm_prim(c, TM_P_MATMUL_INTEGER, in, 3, &args);
    tm_args cast;
    memset(&cast, 0, sizeof cast);
    cast.i[0] = TM_FLOAT;
    ch.f = tm_prim(c, TM_P_CAST, &ch.acc, 1, &cast);
    ch.scale = const_tensor(c, TM_FLOAT, 2, sd, 2);
    tm_val mul_in[2] = {ch.scale, ch.f};   /* the scale first: either order is taken */
    tm_val prod = tm_prim(c, TM_P_MUL, mul_in, 2, NULL);
    ch.bias = const_tensor(c, TM_FLOAT, 2, bsd, 3);
    tm_val add_in[2] = {prod, ch.bias};
    ch.y = tm_prim(c, TM_P_ADD, add_in, 2, NULL);
    if (gelu == 3) {   /* the export's erf chain: x * 0.5 * (1 + erf(x / sqrt 2)) */
        tm_val x = ch.y;
        tm_val d_in[2] = {x, const_value(c, 1.41421356237309504880)};
        tm_val e = tm_prim(c, TM_P_ERF, (tm_val[]){tm_prim(c, TM_P_DIV, d_in, 2, NULL)}, 1, NULL);
        tm_val h_in[2] = {e, const_value(c, 1.0)};
        tm_val m_in[2] = {x, const_value(c, 0.5)};
        tm_val p_in[2] = {tm_prim(c, TM_P_MUL, m_in, 2, NULL), tm_prim(c, TM_P_ADD, h_in, 2, NULL)};
        ch.y = tm_prim(c, TM_P_MUL, p_in, 2, NULL);
    } else if (gelu) {
        tm_args ga;
        memset(&ga, 0, sizeof ga);
        ga.i[0] = gelu == 2;
        ch.y = tm_prim(c, TM_P_GELU, &ch.y, 1, &ga);
    }
    if (gelu == 4) {
        tm_val r_in[2] = {ch.y, r};
        ch.y = tm_prim(c, TM_P_ADD, r_in, 2, NULL);
    }
    return ch;
}

static chain build(tm_ctx *c, tm_val a, int64_t scale_rows, int64_t scale_cols) {
    return build_gelu(c, a, scale_rows, scale_cols, 0, TM_NONE);
}

static int32_t producer_prim(const tm_ctx *c, tm_val v) {
    int32_t p = c->vals[v].producer;
    return p < 0 ? -1 : c->nodes[p].prim;
}

static void test_pass(void) {
    /* Fused: the ADD's node (or the GELU's, or the residual ADD's after it) becomes
     * MATMUL_INTEGER with scale and bias (and the GELU as its epilogue chain, and the
     * residual). */
    for (int gelu = 0; gelu < 5; gelu++) {
        tm_ctx t;
        tm_ctx_init(&t, TM_MODE_TRACE, NULL);
        int64_t ad[2] = {M, K}, rd[2] = {M, N};
        tm_val a = tm_val_symbolic(&t, TM_UINT8, 2, ad, 0);
        tm_val r = tm_val_symbolic(&t, TM_FLOAT, 2, rd, 1);
        uint64_t seed_state = rng_state;
        chain ch = build_gelu(&t, a, 1, N, gelu, r);
        tm_pass_roots roots = {&ch.y, 1};
        CHECK(tm_ctx_ok(&t) && tm__run_passes(&t, &roots) == TM_OK, "pass: %s", t.err.message);
        int32_t node = t.vals[ch.y].producer;
        tm_chain fch;
        int chain_ok = node >= 0 && tm__chain_decode(t.nodes[node].args.i + TM_QGEMM_ARG_CHAIN,
                                                     TM_ARGS_MAX_I - TM_QGEMM_ARG_CHAIN, &fch) &&
                       fch.n == (gelu != 0) &&
                       (!gelu || (fch.step[0].prim == TM_P_GELU && fch.step[0].value == (gelu == 2)));
        CHECK(chain_ok && t.nodes[node].prim == TM_P_MATMUL_INTEGER && t.nodes[node].args.i[2] == 1 &&
                  t.nodes[node].args.i[3] == 1 && t.nodes[node].nin == 5 + (gelu == 4) &&
                  t.nodes[node].args.i[4] == (gelu == 4),
              "gelu %d: the chain is one MATMUL_INTEGER with scale and bias", gelu);
        /* The fused node evaluated eagerly equals the chain evaluated eagerly. */
        tm_ctx e;
        tm_ctx_init(&e, TM_MODE_EAGER, NULL);
        tm_val ea = const_tensor(&e, TM_UINT8, 2, ad, 4), er = const_tensor(&e, TM_FLOAT, 2, rd, 5);
        rng_state = seed_state;
        chain ech = build_gelu(&e, ea, 1, N, gelu, er);
        if (node >= 0) {
            const tm_rnode *fused = &t.nodes[node];
            tm_val fin[6] = {ea, ech.packed, ech.z, ech.scale, ech.bias, er};
            tm_val fy = tm_prim(&e, TM_P_MATMUL_INTEGER, fin, 5 + (gelu == 4), &fused->args);
            CHECK(tm_ctx_ok(&e), "fused eager run: %s", e.err.message);
            /* Bit for bit, but for the erf chain, whose primitives round on their own. */
            if (tm_ctx_ok(&e) && gelu < 3)
                CHECK(!memcmp(tm_vdata(&e, fy)->data, tm_vdata(&e, ech.y)->data, sizeof(float) * M * N),
                      "gelu %d: fused and unfused results are equal bit for bit", gelu);
            if (tm_ctx_ok(&e) && gelu >= 3) {
                const float *f = tm_vdata(&e, fy)->data, *u = tm_vdata(&e, ech.y)->data;
                int bad = 0;
                for (int i = 0; i < M * N; i++) bad += !(fabsf(f[i] - u[i]) <= 1e-6f + 1e-6f * fabsf(u[i]));
                CHECK(bad == 0, "erf chain: %d of the fused results differ from the chain's", bad);
            }
        }
        tm_ctx_destroy(&e);
        tm_ctx_destroy(&t);
    }
    int64_t ad[2] = {M, K};

    /* Near misses stay as they are. */
    for (int miss = 0; miss < 3; miss++) {
        tm_ctx c;
        tm_ctx_init(&c, TM_MODE_TRACE, NULL);
        tm_val x = tm_val_symbolic(&c, TM_UINT8, 2, ad, 0);
        chain m = build(&c, x, miss == 0 ? M : 1, miss == 0 ? 1 : N);   /* 0: one per row */
        tm_val root[2] = {m.y, m.f};
        tm_val extra = TM_NONE;
        if (miss == 2) {   /* the cast's output read by another node */
            tm_val in[2] = {m.f, m.f};
            extra = tm_prim(&c, TM_P_ADD, in, 2, NULL);
            root[1] = extra;
        }
        tm_pass_roots r = {root, miss == 0 ? 1 : 2};   /* 1: the cast's output is a root */
        CHECK(tm_ctx_ok(&c) && tm__run_passes(&c, &r) == TM_OK, "near miss %d: %s", miss,
              c.err.message);
        CHECK(producer_prim(&c, m.y) == TM_P_ADD && producer_prim(&c, m.acc) == TM_P_MATMUL_INTEGER,
              "near miss %d is left unfused", miss);
        tm_ctx_destroy(&c);
    }
}

/* ---- The fold cache and the dequantize_nbits option ------------------------------------ */

static const char *const NAMES[3] = {"input_ids", "attention_mask", "token_type_ids"};

/* The stored case inputs (2, 7), cut to (rows, cols). */
static void inputs_of(const char *model_dir, int64_t rows, int64_t cols, tm_tensor **out) {
    for (int i = 0; i < 3; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s.npy", model_dir, NAMES[i]);
        tm_tensor *full = NULL;
        tm_error err;
        CHECK(tm_npy_read(path, &full, &err) == TM_OK, "%s: %s", path, err.message);
        int64_t d[2] = {rows, cols};
        out[i] = tm_tensor_alloc(TM_INT64, 2, d, NULL);
        for (int64_t r = 0; full && r < rows; r++)
            memcpy((int64_t *)out[i]->data + r * cols, (const int64_t *)full->data + r * full->dims[1],
                   sizeof(int64_t) * (size_t)cols);
        tm_tensor_free(full);
    }
}

static int cache_entries(const tm_model *m) {
    return m->fold_cache ? ((const model_fold_cache *)m->fold_cache)->n : -1;
}

/* Output 0 of a fresh plan (compiled) or of an eager run. */
static tm_tensor *run(tm_model *m, tm_tensor *const *in, int eager) {
    tm_tensor *out[1] = {NULL};
    tm_error err;
    tm_status st;
    if (eager) {
        st = tm_run_eager(m, 3, NAMES, (const tm_tensor *const *)in, out, NULL, &err);
    } else {
        tm_plan *p = NULL;
        tm_session *s = NULL;
        st = tm_plan_create(m, 3, NAMES, (const tm_tensor *const *)in, NULL, &p, &err);
        if (st == TM_OK) st = tm_session_create(p, &s, &err);
        if (st == TM_OK) st = tm_session_run(s, 3, NAMES, (const tm_tensor *const *)in, out, &err);
        tm_session_free(s);
        tm_plan_free(p);
    }
    CHECK(st == TM_OK, "run: %s", err.message);
    return out[0];
}

static int same(const tm_tensor *a, const tm_tensor *b) {
    return a && b && a->dtype == b->dtype && tm_numel(a->rank, a->dims) == tm_numel(b->rank, b->dims) &&
           !memcmp(a->data, b->data, (size_t)tm_numel(a->rank, a->dims) * tm_dtype_elem_size(a->dtype));
}

/* Largest |a - b|, or infinity when the shapes differ. */
static double max_diff(const tm_tensor *a, const tm_tensor *b) {
    if (!a || !b || tm_numel(a->rank, a->dims) != tm_numel(b->rank, b->dims)) return INFINITY;
    double worst = 0;
    for (int64_t i = 0; i < tm_numel(a->rank, a->dims); i++) {
        double d = fabs(((const float *)a->data)[i] - ((const float *)b->data)[i]);
        if (!(d <= worst)) worst = d;
    }
    return worst;
}

/* tol: how far eager runs may be from plans, whose fusion passes round differently (an
 * int8 export can move a value across a quantization step). */
static void test_fold_cache(const char *model, const char *cases, double tol) {
    tm_model *m = NULL;
    tm_error err;
    if (tm_model_load(model, NULL, &m, &err) != TM_OK) {
        CHECK(0, "%s: %s", model, err.message);
        return;
    }
    tm_tensor *small[3], *big[3];
    inputs_of(cases, 1, 5, small);
    inputs_of(cases, 2, 7, big);
    tm_tensor *p1 = run(m, small, 0);
    int entries = cache_entries(m);
    CHECK(entries > 0, "%s: the first plan fills the fold cache (%d entries)", model, entries);
    tm_tensor *p2 = run(m, big, 0);
    tm_tensor *e2 = run(m, big, 1);
    tm_tensor *p1_again = run(m, small, 0);
    CHECK(cache_entries(m) == entries, "%s: another shape and an eager run reuse the %d packings "
          "(now %d)", model, entries, cache_entries(m));
    CHECK(max_diff(p2, e2) <= tol, "%s: plan and eager outputs differ by %g", model, max_diff(p2, e2));
    CHECK(same(p1, p1_again), "%s: outputs are unchanged after the weights' pages went back", model);
    tm_model_free(m);

    /* From memory: no mapped file, so each trace packs its own copy; same outputs. */
    FILE *f = fopen(model, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *buf = malloc((size_t)size);
    CHECK(fread(buf, 1, (size_t)size, f) == (size_t)size, "read %s", model);
    fclose(f);
    CHECK(tm_model_load_buffer(buf, (size_t)size, NULL, NULL, &m, &err) == TM_OK, "%s from memory: %s",
          model, err.message);
    if (m) {
        tm_tensor *b2 = run(m, big, 0);
        CHECK(cache_entries(m) == 0 && same(b2, p2), "%s from memory: nothing cached, same outputs",
              model);
        tm_tensor_free(b2);
        tm_model_free(m);
    }
    free(buf);
    tm_tensor_free(p1);
    tm_tensor_free(p2);
    tm_tensor_free(e2);
    tm_tensor_free(p1_again);
    for (int i = 0; i < 3; i++) {
        tm_tensor_free(small[i]);
        tm_tensor_free(big[i]);
    }
}

/* Model b's outputs, eager and from a plan, against the packed kernels' (model a's). */
static void check_like_packed(tm_model *a, tm_model *b, tm_tensor **in, const char *what) {
    for (int eager = 0; eager < 2; eager++) {
        tm_tensor *x = run(a, in, eager), *y = run(b, in, eager);
        double worst = max_diff(x, y);
        CHECK(worst < 1e-5, "%s (%s) differs from the packed kernels by %g", what,
              eager ? "eager" : "plan", worst);
        tm_tensor_free(x);
        tm_tensor_free(y);
    }
}

/* Kernels of m's plan for these inputs, or -1 (the failure checked). */
static int plan_kernels(tm_model *m, tm_tensor **in) {
    tm_plan *p = NULL;
    tm_error err;
    int ok = tm_plan_create(m, 3, NAMES, (const tm_tensor *const *)in, NULL, &p, &err) == TM_OK;
    CHECK(ok, "plan: %s", ok ? "" : err.message);
    int n = ok ? tm_plan_n_kernels(p) : -1;
    tm_plan_free(p);
    return n;
}

static void test_dequantize_nbits(const char *model, const char *cases) {
    tm_model *packed = NULL, *per_run = NULL;
    tm_load_options lo;
    tm_load_options_default(&lo);
    tm_error err;
    CHECK(tm_model_load(model, &lo, &packed, &err) == TM_OK, "%s: %s", model, err.message);
    lo.dequantize_nbits = 1;
    CHECK(tm_model_load(model, &lo, &per_run, &err) == TM_OK, "%s: %s", model, err.message);
    if (!packed || !per_run) return;
    tm_tensor *in[3];
    inputs_of(cases, 2, 7, in);
    check_like_packed(packed, per_run, in, "dequantize_nbits");
    CHECK(cache_entries(per_run) == 0 && cache_entries(packed) > 0,
          "dequantize_nbits packs nothing (%d entries, %d with packing)", cache_entries(per_run),
          cache_entries(packed));
    /* dequantize_nbits = 2: the weights dequantized once, folded into the plan (no
     * per-run dequantization, no 4-bit kernel left), the same values. */
    tm_model *once = NULL;
    lo.dequantize_nbits = 2;
    CHECK(tm_model_load(model, &lo, &once, &err) == TM_OK, "%s: %s", model, err.message);
    if (once) {
        check_like_packed(packed, once, in, "dequantize_nbits = 2");
        int folded = plan_kernels(once, in), unfolded = plan_kernels(per_run, in);
        CHECK(folded >= 0 && unfolded >= 0 && folded < unfolded,
              "dequantize_nbits = 2 folds the dequantization (%d kernels, %d per run)", folded,
              unfolded);
        tm_model_free(once);
    }
    for (int i = 0; i < 3; i++) tm_tensor_free(in[i]);
    tm_model_free(packed);
    tm_model_free(per_run);
}

/* The q4 export with its weights dequantized in the graph by standard operators
 * (model_q4_dequantized.onnx, from bench/dequantize_graph.py): a plan folds the chain
 * (BitShift, Sub, Concat, Cast, (q - zp) * scale, Transpose) into f32 weights, releasing
 * each folded step once its last reader has run, and gives the packed kernels' outputs;
 * so does an eager run, which releases the same values. */
static void test_dequantized_in_graph(void) {
    tm_model *packed = NULL, *graph = NULL;
    tm_error err;
    CHECK(tm_model_load("tests/data/tiny/bert/model_q4.onnx", NULL, &packed, &err) == TM_OK,
          "model_q4: %s", err.message);
    CHECK(tm_model_load("tests/data/tiny/bert/model_q4_dequantized.onnx", NULL, &graph, &err) == TM_OK,
          "model_q4_dequantized: %s", err.message);
    if (packed && graph) {
        tm_tensor *in[3];
        inputs_of("tests/data/tiny/bert/model_q4.cases/default/inputs", 2, 7, in);
        check_like_packed(packed, graph, in, "dequantized in the graph");
        /* Nothing of the chain is left to run: its kernels all folded. */
        int folded = plan_kernels(graph, in), kernels = plan_kernels(packed, in);
        CHECK(folded >= 0 && kernels >= 0 && folded <= kernels,
              "the chain folds (%d kernels, %d packed)", folded, kernels);
        for (int i = 0; i < 3; i++) tm_tensor_free(in[i]);
    }
    tm_model_free(packed);
    tm_model_free(graph);
}

int main(void) {
    test_pass();
    test_dequantized_in_graph();
    test_fold_cache("tests/data/tiny/bert/model_quantized.onnx",
                    "tests/data/tiny/bert/model_quantized.cases/default/inputs", 2e-3);
    test_fold_cache("tests/data/tiny/bert/model_q4.onnx",
                    "tests/data/tiny/bert/model_q4.cases/default/inputs", 1e-5);
    test_dequantize_nbits("tests/data/tiny/bert/model_q4.onnx",
                          "tests/data/tiny/bert/model_q4.cases/default/inputs");
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
