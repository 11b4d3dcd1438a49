/* Value-and-gradient plans against forward plans: loads MODEL twice (frozen, and with its
 * float initializers trainable), makes the forward plan of the frozen one and a gradient
 * plan of the trainable one (a loss on an output, its target zeros), then times them in
 * alternation and prints one JSON line: medians, their ratio, arenas, kernels, plan times
 * and peak RSS. In --mode both the forward plan of the trainable model (weights as
 * parameters, as in a training step) is timed alongside, with the ratio to it too. --mode grad (or forward) runs one of them alone, so that peak RSS is that
 * plan's. Results are read in place (tm_session_result); --copy times copying them into
 * caller tensors too. Not a test: nothing here asserts a timing.
 * Usage: grad_bench MODEL [--inputs DIR | --dim NAME=N ...] [--loss mse|ce|output]
 *        [--output NAME] [--trainable GLOB ...] [--mode both|grad|forward]
 *        [--repeat N] [--threads N] [--copy] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "transmuter.h"
#include "../src/io/npy.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* CPU time of the process: on a machine shared with other work, runs on one thread
 * compare more steadily in CPU time than in wall time. */
static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static long status_kib(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, strlen(key))) kib = atol(line + strlen(key));
    if (f) fclose(f);
    return kib;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int fail(const char *what, const tm_error *err) {
    fprintf(stderr, "grad_bench: %s: %s\n", what, err->message);
    return 1;
}

static double loss_value(const tm_tensor *t) {
    if (tm_tensor_dtype(t) == TM_DOUBLE) return *(const double *)tm_tensor_data_const(t);
    if (tm_tensor_dtype(t) == TM_FLOAT) return *(const float *)tm_tensor_data_const(t);
    return -1;
}

typedef struct dim_value {
    const char *name;
    int64_t value;
} dim_value;

/* An input of the model: from DIR/NAME.npy, or made up from its declared shape (symbolic
 * dims from --dim): input_ids in [0, 100), masks of ones, everything else zeros. */
static tm_tensor *make_input(const tm_value_desc *d, const char *dir, const dim_value *dims,
                             int n_dims) {
    if (dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.npy", dir, d->name);
        tm_tensor *t = NULL;
        tm_error err;
        if (tm_npy_read(path, &t, &err) != TM_OK) fprintf(stderr, "grad_bench: %s\n", err.message);
        return t;
    }
    int64_t shape[8];
    for (int i = 0; i < d->rank && i < 8; i++) {
        shape[i] = d->dims[i];
        for (int k = 0; shape[i] < 0 && k < n_dims; k++)
            if (d->dim_params && d->dim_params[i] && !strcmp(d->dim_params[i], dims[k].name))
                shape[i] = dims[k].value;
        if (shape[i] < 0) {
            fprintf(stderr, "grad_bench: input '%s' dim %d is symbolic: give --dim %s=N\n",
                    d->name, i, d->dim_params && d->dim_params[i] ? d->dim_params[i] : "?");
            return NULL;
        }
    }
    tm_tensor *t = tm_tensor_new(d->dtype, d->rank, shape);
    if (!t) return NULL;
    int64_t n = tm_tensor_numel(t);
    if (d->dtype == TM_INT64) {
        int64_t *v = tm_tensor_data(t);
        int mask = strstr(d->name, "mask") != NULL, ids = strstr(d->name, "input_ids") != NULL;
        for (int64_t i = 0; i < n; i++) v[i] = mask ? 1 : ids ? (int64_t)((i * 7919) % 100) : 0;
    }
    return t;
}

int main(int argc, char **argv) {
    const char *path = NULL, *dir = NULL, *loss_name = "mse", *output = NULL, *mode = "both";
    const char *patterns[64];
    dim_value dims[16];
    int n_patterns = 0, n_dims = 0, repeat = 10, threads = 0, copy = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--inputs") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "--loss") && i + 1 < argc) loss_name = argv[++i];
        else if (!strcmp(argv[i], "--output") && i + 1 < argc) output = argv[++i];
        else if (!strcmp(argv[i], "--mode") && i + 1 < argc) mode = argv[++i];
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--copy")) copy = 1;
        else if (!strcmp(argv[i], "--trainable") && i + 1 < argc && n_patterns < 64)
            patterns[n_patterns++] = argv[++i];
        else if (!strcmp(argv[i], "--dim") && i + 1 < argc && n_dims < 16) {
            char *eq = strchr(argv[++i], '=');
            if (!eq) return fprintf(stderr, "grad_bench: --dim NAME=N\n"), 2;
            *eq = 0;
            dims[n_dims].name = argv[i];
            dims[n_dims++].value = atoll(eq + 1);
        } else if (argv[i][0] != '-' && !path) path = argv[i];
        else return fprintf(stderr, "grad_bench: unknown argument '%s'\n", argv[i]), 2;
    }
    if (!path || repeat < 1) return fprintf(stderr, "usage: see bench/grad_bench.c\n"), 2;
    int do_fwd = strcmp(mode, "grad") != 0, do_grad = strcmp(mode, "forward") != 0;
    tm_loss loss = !strcmp(loss_name, "ce") ? TM_LOSS_CROSS_ENTROPY
                 : !strcmp(loss_name, "output") ? TM_LOSS_OUTPUT : TM_LOSS_MSE;
    tm_error err;
    tm_load_options lo;
    tm_load_options_default(&lo);
    lo.threads = threads;
    tm_model *frozen = NULL, *trainable = NULL;
    long rss0 = status_kib("VmRSS:");
    if (tm_model_load(path, &lo, &frozen, &err) != TM_OK) return fail(path, &err);
    int n_in = tm_model_n_inputs(frozen);
    const char *names[64];
    const tm_tensor *inputs[64];
    for (int i = 0; i < n_in && i < 63; i++) {
        tm_value_desc d;
        tm_model_input(frozen, i, &d);
        names[i] = strdup(d.name);  /* outlives the frozen model in --mode grad */
        inputs[i] = make_input(&d, dir, dims, n_dims);
        if (!inputs[i]) return 1;
    }
    /* The forward plan of the frozen model also tells the output's shape. */
    tm_plan *fwd = NULL, *grad = NULL, *tfwd = NULL;
    tm_session *fs = NULL, *gs = NULL, *ts = NULL;
    double t0 = now_ms();
    if (tm_plan_create(frozen, n_in, names, inputs, NULL, &fwd, &err) != TM_OK ||
        tm_session_create(fwd, &fs, &err) != TM_OK)
        return fail("forward plan", &err);
    double fwd_plan_ms = now_ms() - t0;
    int out_index = output ? tm_model_output_index(frozen, output) : 0;
    tm_value_desc od;
    if (out_index < 0 || tm_plan_output(fwd, out_index, &od) != TM_OK)
        return fprintf(stderr, "grad_bench: no output '%s'\n", output ? output : "0"), 1;
    int n_fwd_out = tm_plan_n_outputs(fwd);
    tm_tensor *fwd_out[64] = {0};
    for (int i = 0; i < n_fwd_out && i < 64; i++) {
        tm_value_desc d;
        tm_plan_output(fwd, i, &d);
        fwd_out[i] = tm_tensor_new(d.dtype, d.rank, d.dims);
    }
    tm_tensor *target = loss == TM_LOSS_CROSS_ENTROPY
                            ? tm_tensor_new(TM_INT64, od.rank - 1, od.dims)
                            : tm_tensor_new(od.dtype, od.rank, od.dims);
    char out_name[256];
    snprintf(out_name, sizeof out_name, "%s", od.name);  /* the frozen model may go below */
    if (!do_fwd) {
        tm_session_free(fs);
        tm_plan_free(fwd);
        tm_model_free(frozen);
        fs = NULL;
        fwd = NULL;
        frozen = NULL;
    }
    double grad_plan_ms = 0;
    tm_tensor *grad_out[1024] = {0};
    int n_grad_out = 0;
    if (do_grad) {
        lo.trainable = 1;
        lo.n_trainable_names = n_patterns;
        lo.trainable_names = patterns;
        if (tm_model_load(path, &lo, &trainable, &err) != TM_OK) return fail(path, &err);
        names[n_in] = "target";
        inputs[n_in] = target;
        tm_grad_options go;
        tm_grad_options_default(&go);
        go.loss = loss;
        go.output = out_name;
        t0 = now_ms();
        if (tm_grad_plan_create(trainable, n_in + (loss != TM_LOSS_OUTPUT), names, inputs, NULL,
                                &go, &grad, &err) != TM_OK ||
            tm_session_create(grad, &gs, &err) != TM_OK)
            return fail("gradient plan", &err);
        grad_plan_ms = now_ms() - t0;
        /* The forward plan of the trainable model too: its weights are parameters (read
         * where the optimizer keeps them, not packed at plan time), as a training step's
         * forward has them. */
        if (do_fwd && (tm_plan_create(trainable, n_in, names, inputs, NULL, &tfwd, &err) != TM_OK ||
                       tm_session_create(tfwd, &ts, &err) != TM_OK))
            return fail("forward plan of the trainable model", &err);
        n_grad_out = tm_plan_n_outputs(grad);
        for (int i = 0; i < n_grad_out && i < 1024; i++) {
            tm_value_desc d;
            tm_plan_output(grad, i, &d);
            grad_out[i] = tm_tensor_new(d.dtype, d.rank, d.dims);
        }
    }
    int n_grad_in = n_in + (loss != TM_LOSS_OUTPUT);
    double *tf = calloc((size_t)repeat, sizeof *tf), *tg = calloc((size_t)repeat, sizeof *tg);
    double *cf = calloc((size_t)repeat, sizeof *cf), *cg = calloc((size_t)repeat, sizeof *cg);
    double *tt = calloc((size_t)repeat, sizeof *tt);
    for (int r = -2; r < repeat; r++) {  /* two warm-up rounds */
        if (fs) {
            t0 = now_ms();
            double c0 = cpu_ms();
            if (tm_session_run(fs, n_in, names, inputs, copy ? fwd_out : NULL, &err) != TM_OK)
                return fail("forward", &err);
            if (r >= 0) tf[r] = now_ms() - t0, cf[r] = cpu_ms() - c0;
        }
        if (ts) {
            t0 = now_ms();
            if (tm_session_run(ts, n_in, names, inputs, NULL, &err) != TM_OK)
                return fail("forward of the trainable model", &err);
            if (r >= 0) tt[r] = now_ms() - t0;
        }
        if (gs) {
            t0 = now_ms();
            double c0 = cpu_ms();
            if (tm_session_run(gs, n_grad_in, names, inputs, copy ? grad_out : NULL, &err) != TM_OK)
                return fail("gradient", &err);
            if (r >= 0) tg[r] = now_ms() - t0, cg[r] = cpu_ms() - c0;
        }
    }
    qsort(tf, (size_t)repeat, sizeof *tf, cmp_double);
    qsort(tg, (size_t)repeat, sizeof *tg, cmp_double);
    qsort(cf, (size_t)repeat, sizeof *cf, cmp_double);
    qsort(cg, (size_t)repeat, sizeof *cg, cmp_double);
    qsort(tt, (size_t)repeat, sizeof *tt, cmp_double);
    double mf = tf[repeat / 2], mg = tg[repeat / 2];
    printf("{\"model\": \"%s\", \"mode\": \"%s\", \"loss\": \"%s\", \"repeat\": %d, \"copy\": %d",
           path, mode, loss_name, repeat, copy);
    if (fwd)
        printf(", \"forward_ms\": %.3f, \"forward_min_ms\": %.3f, \"forward_kernels\": %d, "
               "\"forward_arena_mb\": %.2f, \"forward_plan_ms\": %.1f, \"forward_cpu_ms\": %.3f",
               mf, tf[0],
               tm_plan_n_kernels(fwd), tm_plan_arena_bytes(fwd) / 1048576.0, fwd_plan_ms,
               cf[repeat / 2]);
    if (grad)
        printf(", \"grad_ms\": %.3f, \"grad_min_ms\": %.3f, \"grad_kernels\": %d, "
               "\"grad_arena_mb\": %.2f, \"grad_plan_ms\": %.1f, \"params\": %d, \"loss_value\": %.6g, "
               "\"grad_cpu_ms\": %.3f", mg, tg[0], tm_plan_n_kernels(grad), tm_plan_arena_bytes(grad) / 1048576.0,
               grad_plan_ms, tm_plan_n_grads(grad),
               loss_value(copy ? grad_out[0] : tm_session_result(gs, 0)), cg[repeat / 2]);
    if (fwd && grad)
        printf(", \"ratio\": %.3f, \"cpu_ratio\": %.3f", mg / mf, cg[repeat / 2] / cf[repeat / 2]);
    if (tfwd)
        printf(", \"trainable_forward_ms\": %.3f, \"ratio_to_trainable_forward\": %.3f",
               tt[repeat / 2], mg / tt[repeat / 2]);
    printf(", \"rss_at_start_mb\": %.1f, \"peak_rss_mb\": %.1f}\n", rss0 / 1024.0,
           status_kib("VmHWM:") / 1024.0);
    for (int i = 0; i < 64; i++) tm_tensor_free(fwd_out[i]);
    for (int i = 0; i < 1024; i++) tm_tensor_free(grad_out[i]);
    for (int i = 0; i < n_in; i++) {
        tm_tensor_free((tm_tensor *)inputs[i]);
        free((char *)names[i]);
    }
    tm_tensor_free(target);
    free(tf);
    free(tg);
    free(cf);
    free(cg);
    free(tt);
    tm_session_free(ts);
    tm_plan_free(tfwd);
    tm_session_free(fs);
    tm_session_free(gs);
    tm_plan_free(fwd);
    tm_plan_free(grad);
    tm_model_free(frozen);
    tm_model_free(trainable);
    return 0;
}
