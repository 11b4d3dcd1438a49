/* libFuzzer target: tm_optimizer_load_state (the optimizer state file reader) on arbitrary
 * bytes, for an AdamW (with amsgrad) and an SGD optimizer over a float32, a float64 and a
 * bfloat16 parameter (the last has a master copy). The bytes reach the reader through a
 * memfd, as the reader takes a path. Asserts: an error carries a message and leaves the
 * optimizer exactly as it was (state bytes, step count); a success leaves an optimizer that
 * steps and saves. Not the writer (tests/test_optim.c round-trips it). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "transmuter.h"
#include "train/optim.h"

static tm_tensor *params[3], *grads[3];
static const char *names[3] = {"w", "b", "h"};

static void init_tensors(void) {
    if (params[0]) return;
    int64_t d0[2] = {3, 4}, d1[1] = {5}, d2[1] = {2};
    params[0] = tm_tensor_new(TM_FLOAT, 2, d0);
    params[1] = tm_tensor_new(TM_DOUBLE, 1, d1);
    params[2] = tm_tensor_new(TM_BFLOAT16, 1, d2);
    grads[0] = tm_tensor_new(TM_FLOAT, 2, d0);
    grads[1] = tm_tensor_new(TM_DOUBLE, 1, d1);
    grads[2] = tm_tensor_new(TM_FLOAT, 1, d2);
    for (int i = 0; i < 3; i++) {
        memset(tm_tensor_data(params[i]), 0x3c, tm_tensor_nbytes(params[i]));
        memset(tm_tensor_data(grads[i]), 0x3b, tm_tensor_nbytes(grads[i]));
    }
}

/* The optimizer's whole state as bytes (step counts, every buffer, in order), read through
 * the private struct (src/train/optim.h) so that no file is written per input. */
static size_t snapshot(const tm_optimizer *o, uint8_t **out) {
    size_t cap = 64, n = 0;
    uint8_t *b = malloc(cap);
    for (int i = -1; i < o->n; i++) {
        const void *src[6];
        size_t len[6];
        int k = 0;
        if (i < 0) {
            src[k] = &o->steps, len[k++] = sizeof o->steps;
        } else {
            const tm__opt_param *p = &o->p[i];
            size_t el = p->state_dtype == TM_DOUBLE ? 8 : 4;
            src[k] = &p->step, len[k++] = sizeof p->step;
            src[k] = &p->has_momentum, len[k++] = sizeof p->has_momentum;
            for (int role = TM__BUF_MASTER; role <= TM__BUF_MAX_EXP_AVG_SQ; role++) {
                const void *buf = tm__opt_buffer(o, p, role);
                if (!buf) continue;
                src[k] = buf;
                len[k++] = p->numel * (role == TM__BUF_MASTER ? 4 : el);
            }
        }
        for (int j = 0; j < k; j++) {
            while (n + len[j] > cap) b = realloc(b, cap *= 2);
            memcpy(b + n, src[j], len[j]);
            n += len[j];
        }
    }
    *out = b;
    return n;
}

static void one(tm_optimizer_kind kind, int amsgrad, const uint8_t *data, size_t size) {
    tm_optimizer_params p;
    tm_optimizer_params_default(&p, kind);
    p.amsgrad = amsgrad;
    if (kind == TM_OPTIMIZER_SGD) p.momentum = 0.9;
    tm_optimizer *o = NULL;
    tm_error err;
    if (tm_optimizer_create(&p, 3, names, params, &o, &err) != TM_OK) abort();
    if (tm_optimizer_step(o, (const tm_tensor *const *)grads, &err) != TM_OK) abort();
    uint8_t *before;
    size_t before_n = snapshot(o, &before);
    int64_t steps = tm_optimizer_step_count(o);

    int fd = memfd_create("state-in", 0);
    if (fd < 0) abort();
    if (size && write(fd, data, size) != (ssize_t)size) abort();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    memset(&err, 0, sizeof err);
    tm_status st = tm_optimizer_load_state(o, path, &err);
    close(fd);
    if (st != TM_OK) {
        if (!err.message[0]) abort();
        uint8_t *after;
        size_t after_n = snapshot(o, &after);
        if (after_n != before_n || memcmp(before, after, before_n) ||
            tm_optimizer_step_count(o) != steps)
            abort();   /* a refused file changed the optimizer */
        free(after);
    } else if (tm_optimizer_step(o, (const tm_tensor *const *)grads, &err) != TM_OK) {
        abort();
    }
    free(before);
    tm_optimizer_free(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    init_tensors();
    one(TM_OPTIMIZER_ADAMW, 1, data, size);
    one(TM_OPTIMIZER_SGD, 0, data, size);
    return 0;
}
