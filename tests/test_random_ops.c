/* The random operators through the public API (models in tests/data/random, written by
 * make_models.py): Bernoulli, Dropout in training mode, Multinomial, RandomNormalLike and
 * RandomUniform, each eagerly, through one session run twice, and through tm_model_run.
 * Their values cannot match numpy's generator, so what is checked is what must hold of
 * any correct draw: the support (0/1, kept values scaled exactly, classes in range), the
 * statistics (means, variances, frequencies within 5 standard errors: a false failure is
 * a one-in-a-million event), and the seed contract: with a seed attribute an op returns
 * the same values in every run and mode; without one every run draws anew.
 * Not the primitive-level generator tests (test_prims_misc.c). Prints "N passed, N failed". */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "transmuter.h"

#include "check.h"

#define DIR "tests/data/random/"
#define N 40000

enum { EAGER, SESSION_1, SESSION_2, CACHED, N_RUNS };
static const char *run_names[N_RUNS] = {"eager", "session run 1", "session run 2",
                                        "tm_model_run"};

typedef struct runs {
    tm_tensor *out[N_RUNS][2];   /* outputs 0 and 1 of each run */
    int ok;
} runs;

/* Runs MODEL in every way on the given inputs. */
static runs run_all(const char *model, int n_in, const char *const *names,
                    const tm_tensor *const *inputs) {
    runs r;
    memset(&r, 0, sizeof r);
    tm_model *m = NULL;
    tm_plan *plan = NULL;
    tm_session *s = NULL;
    tm_error err;
    char path[256];
    snprintf(path, sizeof path, DIR "%s.onnx", model);
    if (tm_model_load(path, NULL, &m, &err) != TM_OK) {
        CHECK(0, "%s: load: %s", model, err.message);
        return r;
    }
    int n_out = tm_model_n_outputs(m);
    tm_tensor *out[2] = {NULL, NULL};
    int ok = tm_run_eager(m, n_in, names, inputs, out, NULL, &err) == TM_OK;
    CHECK(ok, "%s: eager: %s", model, ok ? "" : err.message);
    memcpy(r.out[EAGER], out, sizeof out);
    ok = ok && tm_plan_create(m, n_in, names, inputs, NULL, &plan, &err) == TM_OK &&
         tm_session_create(plan, &s, &err) == TM_OK;
    CHECK(ok, "%s: plan: %s", model, ok ? "" : err.message);
    for (int k = SESSION_1; ok && k <= SESSION_2; k++) {
        memset(out, 0, sizeof out);
        ok = tm_session_run(s, n_in, names, inputs, out, &err) == TM_OK;
        CHECK(ok, "%s: %s: %s", model, run_names[k], ok ? "" : err.message);
        memcpy(r.out[k], out, sizeof out);
    }
    memset(out, 0, sizeof out);
    ok = ok && tm_model_run(m, n_in, names, inputs, out, NULL, &err) == TM_OK;
    CHECK(ok, "%s: tm_model_run: %s", model, ok ? "" : err.message);
    memcpy(r.out[CACHED], out, sizeof out);
    r.ok = ok && n_out >= 1;
    tm_session_free(s);
    tm_plan_free(plan);
    tm_model_free(m);
    return r;
}

static void free_runs(runs *r) {
    for (int k = 0; k < N_RUNS; k++)
        for (int j = 0; j < 2; j++) tm_tensor_free(r->out[k][j]);
}

static int same(const tm_tensor *a, const tm_tensor *b) {
    return a && b && tm_tensor_nbytes(a) == tm_tensor_nbytes(b) &&
           !memcmp(tm_tensor_data_const(a), tm_tensor_data_const(b), tm_tensor_nbytes(a));
}

/* The seed contract over output j of every run. */
static void check_seed_contract(const char *model, runs *r, int seeded, int j) {
    if (!r->ok) return;
    if (seeded) {
        for (int k = SESSION_1; k < N_RUNS; k++)
            CHECK(same(r->out[EAGER][j], r->out[k][j]), "%s: output %d of the %s differs from "
                  "the eager run although a seed is given", model, j, run_names[k]);
        return;
    }
    for (int a = 0; a < N_RUNS; a++)
        for (int b = a + 1; b < N_RUNS; b++)
            CHECK(!same(r->out[a][j], r->out[b][j]), "%s: output %d: the %s and the %s drew the "
                  "same values without a seed", model, j, run_names[a], run_names[b]);
}

static tm_tensor *vector(int64_t n) {
    tm_tensor *t = tm_tensor_new(TM_FLOAT, 1, &n);
    return t;
}

/* Bernoulli over probabilities 0, 1 and a ramp: every value is 0 or 1, p = 0 gives 0 and
 * p = 1 gives 1, and the count of ones is within 5 standard errors of the sum of p. */
static void test_bernoulli(int seeded) {
    const char *model = seeded ? "bernoulli_seeded" : "bernoulli";
    tm_tensor *p = vector(N);
    float *pv = tm_tensor_data(p);
    for (int i = 0; i < N; i++) pv[i] = i % 10 == 0 ? 0.0f : i % 10 == 1 ? 1.0f : (float)(i % 97) / 97;
    const char *names[1] = {"p"};
    const tm_tensor *in[1] = {p};
    runs r = run_all(model, 1, names, in);
    for (int k = 0; r.ok && k < N_RUNS; k++) {
        const float *y = tm_tensor_data_const(r.out[k][0]);
        int support = 1;
        double ones = 0, mean = 0, var = 0;
        for (int i = 0; i < N; i++) {
            support &= y[i] == 0.0f || y[i] == 1.0f;
            support &= pv[i] != 0.0f || y[i] == 0.0f;
            support &= pv[i] != 1.0f || y[i] == 1.0f;
            ones += y[i];
            mean += pv[i];
            var += pv[i] * (1 - pv[i]);
        }
        CHECK(support, "%s (%s): values outside {0, 1} or against p = 0 / p = 1", model,
              run_names[k]);
        CHECK(fabs(ones - mean) <= 5 * sqrt(var), "%s (%s): %g ones, expected %g +- %g", model,
              run_names[k], ones, mean, 5 * sqrt(var));
    }
    check_seed_contract(model, &r, seeded, 0);
    free_runs(&r);
    tm_tensor_free(p);
}

/* Dropout(ratio 0.3, training): y is x / 0.7 where the mask is true and 0 elsewhere; the
 * kept fraction is within 5 standard errors of 0.7. training_mode false is the identity. */
static void test_dropout(int seeded) {
    const char *model = seeded ? "dropout_seeded" : "dropout";
    const double ratio = 0.3;
    tm_tensor *x = vector(N);
    float *xv = tm_tensor_data(x);
    for (int i = 0; i < N; i++) xv[i] = (float)((i % 13) - 6) * 0.37f + 0.01f;
    tm_tensor *rt = tm_tensor_new(TM_FLOAT, 0, NULL), *train = tm_tensor_new(TM_BOOL, 0, NULL);
    *(float *)tm_tensor_data(rt) = (float)ratio;
    *(uint8_t *)tm_tensor_data(train) = 1;
    const char *names[3] = {"x", "ratio", "training_mode"};
    const tm_tensor *in[3] = {x, rt, train};
    runs r = run_all(model, 3, names, in);
    float scale = (float)(1.0 / (1.0 - (double)(float)ratio));
    for (int k = 0; r.ok && k < N_RUNS; k++) {
        const float *y = tm_tensor_data_const(r.out[k][0]);
        const uint8_t *mask = r.out[k][1] ? tm_tensor_data_const(r.out[k][1]) : NULL;
        if (!mask) {
            CHECK(0, "%s (%s): no mask", model, run_names[k]);
            continue;
        }
        int exact = 1;
        double kept = 0;
        for (int i = 0; i < N; i++) {
            exact &= mask[i] ? y[i] == xv[i] * scale : y[i] == 0.0f;
            kept += mask[i] != 0;
        }
        double expect = N * (1 - ratio), se = sqrt(N * ratio * (1 - ratio));
        CHECK(exact, "%s (%s): y is not x * mask / (1 - ratio)", model, run_names[k]);
        CHECK(fabs(kept - expect) <= 5 * se, "%s (%s): kept %g, expected %g +- %g", model,
              run_names[k], kept, expect, 5 * se);
    }
    check_seed_contract(model, &r, seeded, 1);
    free_runs(&r);

    *(uint8_t *)tm_tensor_data(train) = 0;
    r = run_all(model, 3, names, in);
    for (int k = 0; r.ok && k < N_RUNS; k++) {
        const uint8_t *mask = r.out[k][1] ? tm_tensor_data_const(r.out[k][1]) : NULL;
        int all = mask != NULL;
        for (int i = 0; all && i < N; i++) all = mask[i] == 1;
        CHECK(same(r.out[k][0], x) && all, "%s (%s): training_mode false is not the identity",
              model, run_names[k]);
    }
    free_runs(&r);
    tm_tensor_free(x);
    tm_tensor_free(rt);
    tm_tensor_free(train);
}

/* Multinomial over logits log(1, 2, 3, 4) (probabilities 0.1 .. 0.4) and a one-hot-like
 * row: every class frequency within 5 standard errors; a class of probability ~0 never. */
static void test_multinomial(int seeded) {
    const char *model = seeded ? "multinomial_seeded" : "multinomial";
    int64_t dims[2] = {2, 4};
    tm_tensor *logits = tm_tensor_new(TM_FLOAT, 2, dims);
    float *l = tm_tensor_data(logits);
    double prob[2][4] = {{0.1, 0.2, 0.3, 0.4}, {0, 0.5, 0.5, 0}};
    for (int c = 0; c < 4; c++) {
        l[c] = logf((float)(c + 1));
        l[4 + c] = prob[1][c] > 0 ? 0.0f : -200.0f;   /* e^-200 / 2: never drawn in 20000 */
    }
    const char *names[1] = {"logits"};
    const tm_tensor *in[1] = {logits};
    runs r = run_all(model, 1, names, in);
    const int samples = 20000;
    for (int k = 0; r.ok && k < N_RUNS; k++) {
        const int64_t *s = tm_tensor_data_const(r.out[k][0]);
        for (int b = 0; b < 2; b++) {
            double count[4] = {0};
            int in_range = 1;
            for (int i = 0; i < samples; i++) {
                int64_t v = s[b * samples + i];
                in_range &= v >= 0 && v < 4;
                if (v >= 0 && v < 4) count[v]++;
            }
            CHECK(in_range, "%s (%s): a class outside 0..3", model, run_names[k]);
            for (int c = 0; c < 4; c++) {
                double e = samples * prob[b][c], se = sqrt(samples * prob[b][c] * (1 - prob[b][c]));
                CHECK(prob[b][c] == 0 ? count[c] == 0 : fabs(count[c] - e) <= 5 * se,
                      "%s (%s): row %d class %d drawn %g times, expected %g +- %g", model,
                      run_names[k], b, c, count[c], e, 5 * se);
            }
        }
    }
    check_seed_contract(model, &r, seeded, 0);
    free_runs(&r);
    tm_tensor_free(logits);
}

/* Mean and variance of n draws within 5 standard errors of the distribution's. */
static void check_moments(const char *what, const double *v, int n, double mean, double var,
                          double kurtosis_excess) {
    double m = 0, s = 0;
    for (int i = 0; i < n; i++) m += v[i];
    m /= n;
    for (int i = 0; i < n; i++) s += (v[i] - m) * (v[i] - m);
    s /= n - 1;
    double se_mean = sqrt(var / n), se_var = var * sqrt((2.0 + kurtosis_excess) / n);
    CHECK(fabs(m - mean) <= 5 * se_mean, "%s: mean %g, expected %g +- %g", what, m, mean,
          5 * se_mean);
    CHECK(fabs(s - var) <= 5 * se_var, "%s: variance %g, expected %g +- %g", what, s, var,
          5 * se_var);
}

/* RandomNormalLike(mean 1.5, scale 2) and RandomUniform(-2, 3, float64): moments, range,
 * and the dtype and shape the attributes ask for. */
static void test_continuous(int seeded) {
    const char *normal = seeded ? "random_normal_like_seeded" : "random_normal_like";
    const char *uniform = seeded ? "random_uniform_seeded" : "random_uniform";
    tm_tensor *x = vector(N);
    memset(tm_tensor_data(x), 0, tm_tensor_nbytes(x));
    const char *names[1] = {"x"};
    const tm_tensor *in[1] = {x};
    double *v = malloc(sizeof(double) * 50000);
    runs r = run_all(normal, 1, names, in);
    for (int k = 0; r.ok && k < N_RUNS; k++) {
        const tm_tensor *y = r.out[k][0];
        CHECK(tm_tensor_dtype(y) == TM_FLOAT && tm_tensor_numel(y) == N, "%s: float (%d)",
              normal, N);
        const float *yv = tm_tensor_data_const(y);
        for (int i = 0; i < N; i++) v[i] = yv[i];
        char what[96];
        snprintf(what, sizeof what, "%s (%s)", normal, run_names[k]);
        check_moments(what, v, N, 1.5, 4.0, 0.0);
    }
    check_seed_contract(normal, &r, seeded, 0);
    free_runs(&r);

    int64_t one = 1;
    tm_tensor *x1 = tm_tensor_new(TM_FLOAT, 1, &one);
    *(float *)tm_tensor_data(x1) = 0;
    in[0] = x1;
    r = run_all(uniform, 1, names, in);
    for (int k = 0; r.ok && k < N_RUNS; k++) {
        const tm_tensor *y = r.out[k][0];
        int ok = tm_tensor_dtype(y) == TM_DOUBLE && tm_tensor_numel(y) == 50000;
        CHECK(ok, "%s: double (50000)", uniform);
        if (!ok) continue;
        const double *yv = tm_tensor_data_const(y);
        int in_range = 1;
        for (int i = 0; i < 50000; i++) in_range &= yv[i] >= -2 && yv[i] < 3;
        CHECK(in_range, "%s (%s): a value outside [-2, 3)", uniform, run_names[k]);
        char what[96];
        snprintf(what, sizeof what, "%s (%s)", uniform, run_names[k]);
        check_moments(what, yv, 50000, 0.5, 25.0 / 12.0, -1.2);
    }
    check_seed_contract(uniform, &r, seeded, 0);
    free_runs(&r);
    free(v);
    tm_tensor_free(x);
    tm_tensor_free(x1);
}

int main(void) {
    for (int seeded = 0; seeded < 2; seeded++) {
        test_bernoulli(seeded);
        test_dropout(seeded);
        test_multinomial(seeded);
        test_continuous(seeded);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
