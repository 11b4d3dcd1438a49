/* Tests of the optimizers (src/train/optim.c, optim_state.c) against PyTorch: the
 * trajectories of tests/data/optim (made by tests/gen_optim_ref.py with torch.optim.SGD and
 * AdamW) step by step, their final state, resuming from a saved state, half-precision
 * parameters with master copies, schedules, and every error of the API and the state file.
 * Not gradients (the autodiff tests). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/core/tensor.h"
#include "../src/io/npy.h"
#include "../src/train/optim.h"
#include "check.h"

#define DATA "tests/data/optim"
#define N_PARAMS 3
/* float32: the trajectories agree with PyTorch to rounding; a few ulps over six steps. */
#define TOL_F32 1e-6
#define TOL_F64 1e-13

static char temp_dir[256];

typedef struct ref_case {
    char name[64];
    tm_optimizer_params params;
    double wd_param1;
    int has_wd_param1;
    int steps;
    tm_dtype dtype;
    tm_tensor *traj[N_PARAMS], *grads[N_PARAMS], *skip, *lr;
} ref_case;

static tm_tensor *load(const char *dir, const char *file, int required) {
    char path[512];
    snprintf(path, sizeof path, DATA "/%s/%s", dir, file);
    if (!required && access(path, F_OK) != 0) return NULL;
    tm_tensor *t = NULL;
    tm_error err;
    if (tm_npy_read(path, &t, &err) != TM_OK) {
        check(0, "reading %s: %s", path, err.message);
        return NULL;
    }
    return t;
}

/* One line of cases.txt: NAME key=value ... */
static int parse_case(char *line, ref_case *c) {
    memset(c, 0, sizeof *c);
    char *save = NULL, *w = strtok_r(line, " \n", &save);
    if (!w || w[0] == '#') return 0;
    snprintf(c->name, sizeof c->name, "%s", w);
    c->dtype = TM_FLOAT;
    char *rest[32];
    int nr = 0;
    while ((w = strtok_r(NULL, " \n", &save)) && nr < 32) rest[nr++] = w;
    tm_optimizer_kind kind = TM_OPTIMIZER_SGD;
    for (int i = 0; i < nr; i++)
        if (!strcmp(rest[i], "kind=adamw")) kind = TM_OPTIMIZER_ADAMW;
    tm_optimizer_params_default(&c->params, kind);
    tm_optimizer_params *p = &c->params;
    for (int i = 0; i < nr; i++) {
        char *eq = strchr(rest[i], '=');
        if (!eq) continue;
        *eq = '\0';
        const char *k = rest[i], *v = eq + 1;
        double x = atof(v);
        if (!strcmp(k, "steps")) c->steps = atoi(v);
        else if (!strcmp(k, "lr")) p->lr = x;
        else if (!strcmp(k, "weight_decay")) p->weight_decay = x;
        else if (!strcmp(k, "momentum")) p->momentum = x;
        else if (!strcmp(k, "dampening")) p->dampening = x;
        else if (!strcmp(k, "nesterov")) p->nesterov = atoi(v);
        else if (!strcmp(k, "beta1")) p->beta1 = x;
        else if (!strcmp(k, "beta2")) p->beta2 = x;
        else if (!strcmp(k, "eps")) p->eps = x;
        else if (!strcmp(k, "amsgrad")) p->amsgrad = atoi(v);
        else if (!strcmp(k, "maximize")) p->maximize = atoi(v);
        else if (!strcmp(k, "warmup")) p->warmup_steps = atoi(v);
        else if (!strcmp(k, "total")) p->total_steps = atoi(v);
        else if (!strcmp(k, "max_grad_norm")) p->max_grad_norm = x;
        else if (!strcmp(k, "wd_param1")) { c->wd_param1 = x; c->has_wd_param1 = 1; }
        else if (!strcmp(k, "dtype")) c->dtype = !strcmp(v, "float64") ? TM_DOUBLE : TM_FLOAT;
        else if (!strcmp(k, "schedule"))
            p->schedule = !strcmp(v, "linear") ? TM_LR_LINEAR
                        : !strcmp(v, "cosine") ? TM_LR_COSINE : TM_LR_CONSTANT;
    }
    for (int i = 0; i < N_PARAMS; i++) {
        char f[64];
        snprintf(f, sizeof f, "p%d_traj.npy", i);
        c->traj[i] = load(c->name, f, 1);
        snprintf(f, sizeof f, "p%d_grads.npy", i);
        c->grads[i] = load(c->name, f, 1);
        if (!c->traj[i] || !c->grads[i]) return 0;
    }
    c->skip = load(c->name, "skip.npy", 1);
    c->lr = load(c->name, "lr.npy", 1);
    return c->skip && c->lr;
}

static void free_case(ref_case *c) {
    for (int i = 0; i < N_PARAMS; i++) {
        tm_tensor_free(c->traj[i]);
        tm_tensor_free(c->grads[i]);
    }
    tm_tensor_free(c->skip);
    tm_tensor_free(c->lr);
}

/* Row `row` of a stacked (rows, ...) tensor as a borrowed tensor of the trailing shape. */
static tm_tensor *row_view(const tm_tensor *t, int64_t row) {
    size_t per = t->nbytes / (size_t)t->dims[0];
    return tm_tensor_borrow(t->dtype, t->rank - 1, t->dims + 1, (char *)t->data + per * (size_t)row);
}

static tm_tensor *row_copy(const tm_tensor *t, int64_t row) {
    tm_tensor *v = row_view(t, row), *c = tm_tensor_clone(v, NULL);
    tm_tensor_free(v);
    return c;
}

/* Normwise relative error max|a - b| / max|b| (an element that passes near zero keeps the
 * absolute rounding error of its neighbours, so an elementwise ratio would measure noise). */
static double rel_err(const tm_tensor *a, const void *b_data, tm_dtype b_dtype, size_t n) {
    double diff = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        double x = tm_load_f64(a->data, a->dtype, i), y = tm_load_f64(b_data, b_dtype, i);
        double d = fabs(x - y);
        if (!(d <= diff)) diff = d;
        if (fabs(y) > scale) scale = fabs(y);
    }
    return scale > 0.0 ? diff / scale : diff;
}

static int skipped(const ref_case *c, int step, int i) {
    return ((const int64_t *)c->skip->data)[step * N_PARAMS + i] != 0;
}

static tm_optimizer *make_optimizer(const ref_case *c, tm_tensor **params) {
    static const char *const names[N_PARAMS] = {"p0", "p1", "p2"};
    tm_optimizer *o = NULL;
    tm_error err;
    if (tm_optimizer_create(&c->params, N_PARAMS, names, params, &o, &err) != TM_OK) {
        check(0, "%s: create: %s", c->name, err.message);
        return NULL;
    }
    if (c->has_wd_param1 && tm_optimizer_set_weight_decay(o, 1, c->wd_param1, &err) != TM_OK)
        check(0, "%s: set_weight_decay: %s", c->name, err.message);
    return o;
}

static int do_step(const ref_case *c, tm_optimizer *o, int step) {
    tm_tensor *g[N_PARAMS];
    for (int i = 0; i < N_PARAMS; i++) g[i] = skipped(c, step, i) ? NULL : row_view(c->grads[i], step);
    tm_error err;
    tm_status st = tm_optimizer_step(o, (const tm_tensor *const *)g, &err);
    for (int i = 0; i < N_PARAMS; i++) tm_tensor_free(g[i]);
    if (st) check(0, "%s: step %d: %s", c->name, step, err.message);
    return st == TM_OK;
}

static const char *state_file(int role) {
    switch (role) {
    case TM__BUF_MOMENTUM: return "momentum_buffer";
    case TM__BUF_EXP_AVG: return "exp_avg";
    case TM__BUF_EXP_AVG_SQ: return "exp_avg_sq";
    default: return "max_exp_avg_sq";
    }
}

/* The whole trajectory, step by step, then the state PyTorch ended with. */
static void test_trajectory(const ref_case *c) {
    tm_tensor *params[N_PARAMS];
    for (int i = 0; i < N_PARAMS; i++) params[i] = row_copy(c->traj[i], 0);
    tm_optimizer *o = make_optimizer(c, params);
    double tol = c->dtype == TM_DOUBLE ? TOL_F64 : TOL_F32, worst = 0.0;
    for (int step = 0; o && step < c->steps; step++) {
        double lr = ((const double *)c->lr->data)[step];
        check(fabs(tm_optimizer_lr(o) - lr) <= 1e-15 * fabs(lr), "%s: lr of step %d is %.17g, "
              "PyTorch's %.17g", c->name, step, tm_optimizer_lr(o), lr);
        if (!do_step(c, o, step)) break;
        for (int i = 0; i < N_PARAMS; i++) {
            tm_tensor *want = row_view(c->traj[i], step + 1);
            double e = rel_err(params[i], want->data, want->dtype, (size_t)tm_numel(want->rank, want->dims));
            if (e > worst) worst = e;
            check(e <= tol, "%s: p%d after step %d: rel. error %.3g > %.1g", c->name, i, step, e, tol);
            tm_tensor_free(want);
        }
    }
    printf("%-22s %d steps, largest rel. error vs PyTorch %.3g\n", c->name, c->steps, worst);
    CHECK(o && tm_optimizer_step_count(o) == c->steps, "%s: step count", c->name);
    for (int i = 0; o && i < N_PARAMS; i++) {
        const tm__opt_param *p = &o->p[i];
        char f[64];
        snprintf(f, sizeof f, "p%d_step.npy", i);
        tm_tensor *st = load(c->name, f, 0);
        if (st) {
            CHECK(p->step == *(const int64_t *)st->data, "%s: p%d step %lld, PyTorch %lld",
                  c->name, i, (long long)p->step, (long long)*(const int64_t *)st->data);
            tm_tensor_free(st);
        }
        for (int role = TM__BUF_MOMENTUM; role <= TM__BUF_MAX_EXP_AVG_SQ; role++) {
            snprintf(f, sizeof f, "p%d_%s.npy", i, state_file(role));
            tm_tensor *want = load(c->name, f, 0);
            const void *have = tm__opt_buffer(o, p, role);
            CHECK(!want == !have, "%s: p%d %s %s", c->name, i, state_file(role),
                  want ? "missing here" : "here but not in PyTorch");
            if (want && have) {
                tm_tensor *hv = tm_tensor_borrow(p->state_dtype, want->rank, want->dims, (void *)have);
                double e = rel_err(hv, want->data, want->dtype, p->numel);
                CHECK(e <= tol, "%s: p%d %s rel. error %.3g", c->name, i, state_file(role), e);
                tm_tensor_free(hv);
            }
            tm_tensor_free(want);
        }
    }
    tm_optimizer_free(o);
    for (int i = 0; i < N_PARAMS; i++) tm_tensor_free(params[i]);
}

static int same_bytes(tm_tensor *const *a, tm_tensor *const *b) {
    for (int i = 0; i < N_PARAMS; i++)
        if (a[i]->nbytes != b[i]->nbytes || memcmp(a[i]->data, b[i]->data, a[i]->nbytes)) return 0;
    return 1;
}

/* Stopping after `split` steps, saving, and resuming in a new optimizer gives bit for bit
 * the uninterrupted run. */
static void test_resume(const ref_case *c, int split) {
    tm_tensor *whole[N_PARAMS], *parts[N_PARAMS];
    for (int i = 0; i < N_PARAMS; i++) {
        whole[i] = row_copy(c->traj[i], 0);
        parts[i] = row_copy(c->traj[i], 0);
    }
    tm_optimizer *o = make_optimizer(c, whole);
    for (int s = 0; o && s < c->steps; s++) do_step(c, o, s);
    tm_optimizer_free(o);
    char path[512];
    snprintf(path, sizeof path, "%s/%s.state", temp_dir, c->name);
    o = make_optimizer(c, parts);
    for (int s = 0; o && s < split; s++) do_step(c, o, s);
    tm_error err;
    CHECK(o && tm_optimizer_save_state(o, path, &err) == TM_OK, "%s: save: %s", c->name, err.message);
    tm_optimizer_free(o);
    o = make_optimizer(c, parts);
    CHECK(o && tm_optimizer_load_state(o, path, &err) == TM_OK, "%s: load: %s", c->name, err.message);
    CHECK(o && tm_optimizer_step_count(o) == split, "%s: step count after load", c->name);
    for (int s = split; o && s < c->steps; s++) do_step(c, o, s);
    CHECK(same_bytes(whole, parts), "%s: resumed after %d steps differs from the whole run",
          c->name, split);
    tm_optimizer_free(o);
    unlink(path);
    for (int i = 0; i < N_PARAMS; i++) {
        tm_tensor_free(whole[i]);
        tm_tensor_free(parts[i]);
    }
}

/* Half-precision parameters: the master copy follows the float32 run from the same
 * rounded start bit for bit, and the parameter is the master rounded to nearest even.
 * p0's gradients come in the half type, the others in float32. */
static tm_tensor *rounded(const tm_tensor *t, tm_dtype half, tm_dtype to) {
    tm_tensor *r = tm_tensor_alloc(to, t->rank, t->dims, NULL);
    for (int64_t k = 0; k < tm_numel(t->rank, t->dims); k++) {
        double v = tm_load_f64(t->data, t->dtype, (size_t)k);
        if (to != half) {
            uint16_t h;
            tm_store_f64(&h, half, 0, v);
            v = tm_load_f64(&h, half, 0);
        }
        tm_store_f64(r->data, to, (size_t)k, v);
    }
    return r;
}

static void test_half(const ref_case *c, tm_dtype half) {
    tm_tensor *p32[N_PARAMS], *ph[N_PARAMS];
    for (int i = 0; i < N_PARAMS; i++) {
        tm_tensor *start = row_view(c->traj[i], 0);
        ph[i] = rounded(start, half, half);
        p32[i] = rounded(start, half, TM_FLOAT);
        tm_tensor_free(start);
    }
    tm_optimizer *o32 = make_optimizer(c, p32), *oh = make_optimizer(c, ph);
    int exact = 1;
    for (int s = 0; o32 && oh && s < c->steps; s++) {
        tm_tensor *g32[N_PARAMS], *gh[N_PARAMS];
        for (int i = 0; i < N_PARAMS; i++) {
            g32[i] = gh[i] = NULL;
            if (skipped(c, s, i)) continue;
            tm_tensor *g = row_view(c->grads[i], s);
            g32[i] = i == 0 ? rounded(g, half, TM_FLOAT) : tm_tensor_clone(g, NULL);
            gh[i] = i == 0 ? rounded(g, half, half) : tm_tensor_clone(g, NULL);
            tm_tensor_free(g);
        }
        tm_error err;
        CHECK(tm_optimizer_step(o32, (const tm_tensor *const *)g32, &err) == TM_OK, "%s", err.message);
        CHECK(tm_optimizer_step(oh, (const tm_tensor *const *)gh, &err) == TM_OK, "%s %s: %s",
              c->name, tm_dtype_name(half), err.message);
        for (int i = 0; i < N_PARAMS; i++) {
            size_t n = oh->p[i].numel;
            exact &= memcmp(oh->p[i].master, p32[i]->data, n * sizeof(float)) == 0;
            for (size_t k = 0; k < n; k++) {
                uint16_t want;
                tm_store_f64(&want, half, 0, ((const float *)p32[i]->data)[k]);
                exact &= ((const uint16_t *)ph[i]->data)[k] == want;
            }
            tm_tensor_free(g32[i]);
            tm_tensor_free(gh[i]);
        }
    }
    CHECK(exact, "%s %s: master copy or rounded parameter differs from the float32 run",
          c->name, tm_dtype_name(half));
    /* the master copy travels in the state file */
    char path[512];
    snprintf(path, sizeof path, "%s/%s_%s.state", temp_dir, c->name, tm_dtype_name(half));
    tm_error err;
    CHECK(oh && tm_optimizer_save_state(oh, path, &err) == TM_OK, "save: %s", err.message);
    tm_optimizer *back = make_optimizer(c, ph);
    CHECK(back && tm_optimizer_load_state(back, path, &err) == TM_OK, "load: %s", err.message);
    for (int i = 0; back && oh && i < N_PARAMS; i++)
        CHECK(!memcmp(back->p[i].master, oh->p[i].master, oh->p[i].numel * sizeof(float)),
              "%s %s: master copy of p%d after load", c->name, tm_dtype_name(half), i);
    unlink(path);
    tm_optimizer_free(back);
    tm_optimizer_free(o32);
    tm_optimizer_free(oh);
    for (int i = 0; i < N_PARAMS; i++) {
        tm_tensor_free(p32[i]);
        tm_tensor_free(ph[i]);
    }
}

static void run_reference_cases(void) {
    char path[256];
    snprintf(path, sizeof path, DATA "/cases.txt");
    FILE *f = fopen(path, "r");
    if (!f) {
        check(0, "cannot open %s", path);
        return;
    }
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        ref_case c;
        if (!parse_case(line, &c)) {
            free_case(&c);
            continue;
        }
        n++;
        test_trajectory(&c);
        test_resume(&c, 2);
        test_resume(&c, 0);
        if (c.dtype == TM_FLOAT && !c.params.max_grad_norm) {
            test_half(&c, TM_FLOAT16);
            test_half(&c, TM_BFLOAT16);
        }
        free_case(&c);
    }
    fclose(f);
    CHECK(n >= 10, "only %d reference cases in %s", n, path);
}

/* ---- Errors ---------------------------------------------------------------------------- */

static tm_tensor *filled(tm_dtype dt, int rank, const int64_t *dims, double base) {
    tm_tensor *t = tm_tensor_alloc(dt, rank, dims, NULL);
    for (int64_t k = 0; k < tm_numel(rank, dims); k++)
        tm_store_f64(t->data, dt, (size_t)k, base + 0.25 * (double)k);
    return t;
}

static void test_schedules(void) {
    tm_optimizer_params p;
    tm_optimizer_params_default(&p, TM_OPTIMIZER_ADAMW);
    CHECK(p.lr == 1e-3 && p.weight_decay == 1e-2 && p.beta1 == 0.9 && p.beta2 == 0.999 &&
          p.eps == 1e-8 && !p.amsgrad, "AdamW defaults");
    tm_optimizer_params_default(&p, TM_OPTIMIZER_SGD);
    CHECK(p.weight_decay == 0.0 && p.momentum == 0.0, "SGD defaults");
    p.schedule = TM_LR_LINEAR;
    p.warmup_steps = 3;
    p.total_steps = 10;
    const double lin[][2] = {{-1, 0}, {0, 0}, {1, 1.0 / 3}, {2, 2.0 / 3}, {3, 1}, {6, 4.0 / 7},
                             {9, 1.0 / 7}, {10, 0}, {12, 0}};
    for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++)
        CHECK(fabs(tm_lr_schedule_factor(&p, (int64_t)lin[i][0]) - lin[i][1]) < 1e-15,
              "linear factor at %g: %g, expected %g", lin[i][0],
              tm_lr_schedule_factor(&p, (int64_t)lin[i][0]), lin[i][1]);
    p.schedule = TM_LR_COSINE;
    p.total_steps = 11;
    const double cosv[][2] = {{1, 1.0 / 3}, {3, 1}, {5, 0.5 * (1 + cos(M_PI * 0.25))}, {7, 0.5},
                              {11, 0}, {15, 0}};
    for (size_t i = 0; i < sizeof cosv / sizeof cosv[0]; i++)
        CHECK(fabs(tm_lr_schedule_factor(&p, (int64_t)cosv[i][0]) - cosv[i][1]) < 1e-15,
              "cosine factor at %g: %g, expected %g", cosv[i][0],
              tm_lr_schedule_factor(&p, (int64_t)cosv[i][0]), cosv[i][1]);
    p.schedule = TM_LR_CONSTANT;
    p.warmup_steps = 2;
    CHECK(tm_lr_schedule_factor(&p, 1) == 0.5 && tm_lr_schedule_factor(&p, 2) == 1.0 &&
          tm_lr_schedule_factor(&p, 1000) == 1.0, "constant with warmup");
}

static void expect_create_fails(const tm_optimizer_params *p, int n, tm_tensor **t,
                                tm_status want, const char *needle, const char *what) {
    tm_optimizer *o = (tm_optimizer *)&o; /* must stay untouched */
    tm_optimizer *before = o;
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status st = tm_optimizer_create(p, n, NULL, t, &o, &err);
    CHECK(st == want && o == before && strstr(err.message, needle),
          "%s: status %d, message '%s' (expected %d with '%s')", what, st, err.message, want, needle);
}

static void test_api_errors(void) {
    const int64_t d23[] = {2, 3}, d32[] = {3, 2}, d6[] = {6};
    tm_tensor *a = filled(TM_FLOAT, 2, d23, 1.0), *b = filled(TM_FLOAT, 1, d6, -1.0);
    tm_tensor *i32 = filled(TM_INT32, 1, d6, 0.0);
    tm_optimizer_params p;
    tm_optimizer_params_default(&p, TM_OPTIMIZER_SGD);
    tm_tensor *bad[] = {a, i32};
    expect_create_fails(&p, 2, bad, TM_ERR_DTYPE, "param #1", "int32 parameter");
    tm_tensor *dup[] = {a, a};
    expect_create_fails(&p, 2, dup, TM_ERR_INVALID_ARGUMENT, "same tensor", "duplicate");
    tm_tensor *ok[] = {a, b};
    p.nesterov = 1;
    expect_create_fails(&p, 2, ok, TM_ERR_INVALID_ARGUMENT, "nesterov", "nesterov without momentum");
    tm_optimizer_params_default(&p, TM_OPTIMIZER_ADAMW);
    p.lr = -1;
    expect_create_fails(&p, 2, ok, TM_ERR_INVALID_ARGUMENT, "lr", "negative lr");
    tm_optimizer_params_default(&p, TM_OPTIMIZER_ADAMW);
    p.beta2 = 1.0;
    expect_create_fails(&p, 2, ok, TM_ERR_INVALID_ARGUMENT, "beta2", "beta2 = 1");
    tm_optimizer_params_default(&p, TM_OPTIMIZER_ADAMW);
    p.schedule = TM_LR_LINEAR;
    expect_create_fails(&p, 2, ok, TM_ERR_INVALID_ARGUMENT, "total_steps", "linear, no total");
    p.schedule = TM_LR_CONSTANT;
    p.kind = (tm_optimizer_kind)7;
    expect_create_fails(&p, 2, ok, TM_ERR_INVALID_ARGUMENT, "kind", "unknown kind");
    tm_optimizer_free(NULL);

    /* a bad gradient changes nothing */
    tm_optimizer_params_default(&p, TM_OPTIMIZER_ADAMW);
    const char *names[] = {"w", "b"};
    tm_optimizer *o = NULL;
    tm_error err;
    CHECK(tm_optimizer_create(&p, 2, names, ok, &o, &err) == TM_OK, "create: %s", err.message);
    tm_tensor *a0 = tm_tensor_clone(a, NULL), *b0 = tm_tensor_clone(b, NULL);
    tm_tensor *ga = filled(TM_FLOAT, 2, d23, 0.5), *gwrong = filled(TM_FLOAT, 2, d32, 0.5);
    tm_tensor *g64 = filled(TM_DOUBLE, 1, d6, 0.5);
    const tm_tensor *g1[] = {ga, gwrong};
    CHECK(tm_optimizer_step(o, g1, &err) == TM_ERR_SHAPE && strstr(err.message, "'b'") &&
          strstr(err.message, "[3,2]") && strstr(err.message, "[6]") && !strcmp(err.value, "b"),
          "wrong shape: %s", err.message);
    const tm_tensor *g2[] = {ga, g64};
    CHECK(tm_optimizer_step(o, g2, &err) == TM_ERR_DTYPE && strstr(err.message, "float64"),
          "wrong dtype: %s", err.message);
    CHECK(!memcmp(a->data, a0->data, a->nbytes) && !memcmp(b->data, b0->data, b->nbytes) &&
          tm_optimizer_step_count(o) == 0 && o->p[0].step == 0,
          "a failed step changed the parameters or the step count");
    CHECK(tm_optimizer_set_weight_decay(o, 2, 0.0, &err) == TM_ERR_INVALID_ARGUMENT &&
          tm_optimizer_set_weight_decay(o, 0, -1.0, &err) == TM_ERR_INVALID_ARGUMENT,
          "set_weight_decay checks its arguments");
    const tm_tensor *gnone[] = {NULL, NULL};
    CHECK(tm_optimizer_step(o, gnone, &err) == TM_OK && !memcmp(a->data, a0->data, a->nbytes) &&
          o->p[0].step == 0 && tm_optimizer_step_count(o) == 1,
          "a step without gradients changes no parameter");
    tm_optimizer_free(o);
    /* an empty parameter is legal and steps as a no-op */
    const int64_t d0[] = {0};
    tm_tensor *empty = tm_tensor_alloc(TM_FLOAT, 1, d0, NULL), *gempty = tm_tensor_alloc(TM_FLOAT, 1, d0, NULL);
    tm_optimizer_params_default(&p, TM_OPTIMIZER_ADAMW);
    p.amsgrad = 1;
    CHECK(tm_optimizer_create(&p, 1, NULL, &empty, &o, &err) == TM_OK, "empty: %s", err.message);
    const tm_tensor *ge[] = {gempty};
    CHECK(o && tm_optimizer_step(o, ge, &err) == TM_OK && o->p[0].step == 1, "empty step: %s", err.message);
    tm_optimizer_free(o);
    tm_tensor_free(empty);
    tm_tensor_free(gempty);
    tm_tensor *all[] = {a, b, i32, a0, b0, ga, gwrong, g64};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tm_tensor_free(all[i]);
}

static void write_all(const char *path, const uint8_t *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, size, f);
        fclose(f);
    }
}

/* Snapshot of everything a load could change. */
static uint64_t state_digest(const tm_optimizer *o) {
    uint64_t h = 1469598103934665603ull ^ (uint64_t)o->steps;
    for (int i = 0; i < o->n; i++) {
        const tm__opt_param *p = &o->p[i];
        h = (h ^ (uint64_t)p->step ^ (uint64_t)p->has_momentum) * 1099511628211ull;
        int roles[4];
        int nr = tm__opt_roles(o, p, roles);
        for (int r = 0; r < nr; r++) {
            const uint8_t *b = tm__opt_buffer(o, p, roles[r]);
            for (size_t k = 0; k < p->numel * sizeof(float); k++) h = (h ^ b[k]) * 1099511628211ull;
        }
    }
    return h;
}

static void expect_load_fails(tm_optimizer *o, const char *path, tm_status want,
                              const char *needle, const char *what) {
    uint64_t before = state_digest(o);
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status st = tm_optimizer_load_state(o, path, &err);
    CHECK(st == want && (!needle || strstr(err.message, needle)) && state_digest(o) == before,
          "%s: status %d '%s' (expected %d with '%s'), state %s", what, st, err.message, want,
          needle ? needle : "", state_digest(o) == before ? "unchanged" : "CHANGED");
}

static tm_optimizer *small_optimizer(tm_optimizer_kind kind, int amsgrad, const char *name1,
                                     tm_tensor **t) {
    tm_optimizer_params p;
    tm_optimizer_params_default(&p, kind);
    p.amsgrad = amsgrad;
    p.momentum = kind == TM_OPTIMIZER_SGD ? 0.9 : 0.0;
    const char *names[] = {"w", name1};
    tm_optimizer *o = NULL;
    tm_error err;
    if (tm_optimizer_create(&p, 2, names, t, &o, &err) != TM_OK) check(0, "create: %s", err.message);
    return o;
}

static void test_state_errors(void) {
    const int64_t d23[] = {2, 3}, d6[] = {6}, d7[] = {7};
    tm_tensor *a = filled(TM_FLOAT, 2, d23, 1.0), *b = filled(TM_FLOAT16, 1, d6, -1.0);
    tm_tensor *t[] = {a, b};
    tm_tensor *ga = filled(TM_FLOAT, 2, d23, 0.5), *gb = filled(TM_FLOAT, 1, d6, 0.25);
    const tm_tensor *g[] = {ga, gb};
    tm_optimizer *o = small_optimizer(TM_OPTIMIZER_ADAMW, 1, "b", t);
    tm_error err;
    CHECK(tm_optimizer_step(o, g, &err) == TM_OK && tm_optimizer_step(o, g, &err) == TM_OK,
          "steps: %s", err.message);
    char path[512], bad[600];
    snprintf(path, sizeof path, "%s/small.state", temp_dir);
    snprintf(bad, sizeof bad, "%s/bad.state", temp_dir);
    CHECK(tm_optimizer_save_state(o, path, &err) == TM_OK, "save: %s", err.message);

    tm_optimizer *fresh = small_optimizer(TM_OPTIMIZER_ADAMW, 1, "b", t);
    tm_optimizer *sgd = small_optimizer(TM_OPTIMIZER_SGD, 0, "b", t);
    tm_optimizer *noams = small_optimizer(TM_OPTIMIZER_ADAMW, 0, "b", t);
    tm_optimizer *renamed = small_optimizer(TM_OPTIMIZER_ADAMW, 1, "bias", t);
    expect_load_fails(sgd, path, TM_ERR_INVALID_ARGUMENT, "saved by AdamW", "kind");
    expect_load_fails(noams, path, TM_ERR_INVALID_ARGUMENT, "amsgrad", "amsgrad");
    expect_load_fails(renamed, path, TM_ERR_INVALID_ARGUMENT, "'bias'", "name");
    tm_tensor *c = filled(TM_FLOAT16, 1, d7, 0.0), *d = filled(TM_FLOAT, 1, d6, 0.0);
    tm_tensor *tc[] = {a, c}, *td[] = {a, d};
    tm_optimizer *reshaped = small_optimizer(TM_OPTIMIZER_ADAMW, 1, "b", tc);
    tm_optimizer *retyped = small_optimizer(TM_OPTIMIZER_ADAMW, 1, "b", td);
    expect_load_fails(reshaped, path, TM_ERR_INVALID_ARGUMENT, "dimension 0", "shape");
    expect_load_fails(retyped, path, TM_ERR_INVALID_ARGUMENT, "float16", "dtype");
    tm_optimizer_params p;
    tm_optimizer_params_default(&p, TM_OPTIMIZER_ADAMW);
    p.amsgrad = 1;
    tm_optimizer *one = NULL;
    CHECK(tm_optimizer_create(&p, 1, NULL, t, &one, &err) == TM_OK, "create: %s", err.message);
    expect_load_fails(one, path, TM_ERR_INVALID_ARGUMENT, "2 parameters", "count");
    snprintf(bad, sizeof bad, "%s/missing.state", temp_dir);
    expect_load_fails(fresh, bad, TM_ERR_NOT_FOUND, "missing.state", "missing file");
    snprintf(bad, sizeof bad, "%s/bad.state", temp_dir);

    uint8_t *data = NULL;
    size_t size = 0;
    CHECK(read_all(path, &data, &size), "read back %s", path);
    /* every truncation and every single-byte change is refused, and changes nothing */
    int all_refused = 1;
    for (size_t n = 0; n < size; n++) {
        write_all(bad, data, n);
        uint64_t before = state_digest(fresh);
        all_refused &= tm_optimizer_load_state(fresh, bad, &err) != TM_OK && state_digest(fresh) == before;
    }
    CHECK(all_refused, "a truncated state file was accepted or changed the optimizer");
    write_all(bad, data, size - 1);
    expect_load_fails(fresh, bad, TM_ERR_PARSE, "truncated", "truncated by one byte");
    all_refused = 1;
    for (size_t k = 0; k < size; k++) {
        data[k] ^= 0x10;
        write_all(bad, data, size);
        data[k] ^= 0x10;
        uint64_t before = state_digest(fresh);
        tm_status st = tm_optimizer_load_state(fresh, bad, &err);
        all_refused &= st != TM_OK && state_digest(fresh) == before;
    }
    CHECK(all_refused, "a state file with a changed byte was accepted or changed the optimizer");
    data[size - 20] ^= 1; /* inside the last buffer: only the checksum can tell */
    write_all(bad, data, size);
    expect_load_fails(fresh, bad, TM_ERR_PARSE, "checksum", "flipped data bit");
    data[size - 20] ^= 1;
    data[0] = 'X';
    write_all(bad, data, size);
    expect_load_fails(fresh, bad, TM_ERR_PARSE, "not an optimizer state", "magic");
    data[0] = 'T';
    data[8] = 9;
    write_all(bad, data, size);
    expect_load_fails(fresh, bad, TM_ERR_UNSUPPORTED, "version 9", "version");
    free(data);

    CHECK(tm_optimizer_load_state(fresh, path, &err) == TM_OK, "load: %s", err.message);
    CHECK(state_digest(fresh) == state_digest(o), "the loaded state differs from the saved one");
    CHECK(tm_optimizer_save_state(o, "/nonexistent-dir/x.state", &err) == TM_ERR_IO &&
          strstr(err.message, "nonexistent-dir"), "save into a missing folder: %s", err.message);
    unlink(path);
    unlink(bad);
    tm_optimizer *all[] = {o, fresh, sgd, noams, renamed, reshaped, retyped, one};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tm_optimizer_free(all[i]);
    tm_tensor *ts[] = {a, b, c, d, ga, gb};
    for (size_t i = 0; i < sizeof ts / sizeof ts[0]; i++) tm_tensor_free(ts[i]);
}

/* The same steps on 1 and on 3 threads give the same parameters and state, bit for bit:
 * float32, float64 and both half types (their float32 masters), big enough to be split
 * (one parameter across slices, slices across parameters), a parameter without a
 * gradient on some steps; AdamW with amsgrad, decay and clipping, and SGD with nesterov
 * momentum. */
static tm_tensor *filled_1d(tm_dtype dt, int64_t n, uint64_t seed, double scale) {
    int64_t dims[1] = {n};
    tm_tensor *t = tm_tensor_alloc(dt, 1, dims, NULL);
    uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 7;
    for (int64_t i = 0; t && i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        double v = scale * ((double)(s % 20001) / 10000.0 - 1.0);
        tm_store_f64(t->data, dt, (size_t)i, v);
    }
    return t;
}

static void test_threads(void) {
    const tm_dtype dts[5] = {TM_FLOAT, TM_DOUBLE, TM_FLOAT16, TM_BFLOAT16, TM_FLOAT};
    const int64_t sizes[5] = {150001, 70000, 90007, 3, 131072};
    for (int kind = 0; kind < 2; kind++) {
        tm_optimizer *o[2] = {NULL, NULL};
        tm_tensor *params[2][5];
        for (int t = 0; t < 2; t++) {
            for (int i = 0; i < 5; i++) params[t][i] = filled_1d(dts[i], sizes[i], (uint64_t)i + 1, 1.0);
            tm_optimizer_params op;
            tm_optimizer_params_default(&op, kind ? TM_OPTIMIZER_SGD : TM_OPTIMIZER_ADAMW);
            op.threads = t ? 3 : 1;
            op.lr = 0.01;
            op.max_grad_norm = 50.0;
            if (kind) {
                op.momentum = 0.9;
                op.nesterov = 1;
                op.weight_decay = 0.01;
            } else {
                op.amsgrad = 1;
            }
            tm_error err;
            CHECK(tm_optimizer_create(&op, 5, NULL, params[t], &o[t], &err) == TM_OK, "%s",
                  err.message);
        }
        for (int step = 0; o[0] && o[1] && step < 4; step++) {
            tm_tensor *g[5];
            for (int i = 0; i < 5; i++)
                g[i] = i == 4 && step == 1 ? NULL
                       : filled_1d(i >= 2 && i <= 3 && step % 2 ? TM_FLOAT : dts[i], sizes[i],
                                (uint64_t)(100 * step + i), 0.1);
            tm_error err;
            for (int t = 0; t < 2; t++)
                CHECK(tm_optimizer_step(o[t], (const tm_tensor *const *)g, &err) == TM_OK, "%s",
                      err.message);
            for (int i = 0; i < 5; i++) tm_tensor_free(g[i]);
        }
        int same = o[0] && o[1];
        for (int i = 0; same && i < 5; i++) {
            same &= memcmp(params[0][i]->data, params[1][i]->data, params[0][i]->nbytes) == 0;
            for (int role = TM__BUF_MASTER; role <= TM__BUF_MAX_EXP_AVG_SQ; role++) {
                const void *a = tm__opt_buffer(o[0], &o[0]->p[i], role);
                const void *b = tm__opt_buffer(o[1], &o[1]->p[i], role);
                size_t bytes = (size_t)sizes[i] * (dts[i] == TM_DOUBLE ? 8 : 4);
                same &= (!a && !b) || (a && b && memcmp(a, b, bytes) == 0);
            }
        }
        CHECK(same, "%s: 3 threads give other parameters or state than 1",
              kind ? "sgd" : "adamw");
        CHECK(tm_optimizer_grad_norm(o[0]) == tm_optimizer_grad_norm(o[1]), "the same norm");
        for (int t = 0; t < 2; t++) {
            tm_optimizer_free(o[t]);
            for (int i = 0; i < 5; i++) tm_tensor_free(params[t][i]);
        }
    }
}

int main(void) {
    snprintf(temp_dir, sizeof temp_dir, "%s/tm_optim_%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    if (mkdir(temp_dir, 0700) != 0) {
        printf("cannot create %s\n", temp_dir);
        return 1;
    }
    run_reference_cases();
    test_schedules();
    test_api_errors();
    test_state_errors();
    test_threads();
    rmdir(temp_dir);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
