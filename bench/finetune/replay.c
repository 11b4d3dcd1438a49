/* finetune_replay: our AdamW (tm_optimizer) fed the gradients PyTorch recorded
 * (bench/finetune/torch_ref.py's dump), over the model's float initializers as loaded by
 * us; its weights must follow PyTorch's, and the model tm_model_save writes from them must
 * give PyTorch's final logits on the batch (read by our dataset reader and batcher).
 * Not our gradients: those come from the autodiff work and are compared by compare.py.
 *   finetune_replay MODEL.onnx TORCH_DUMP_DIR OUT_DIR */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../../src/runtime/runtime.h"
#include "../../src/hub/json.h"
#include "../../src/io/names.h"
#include "../../src/io/npy.h"
#include "../../src/train/dataset.h"
#include "../../src/train/finetune.h"

static tm_tensor *read_named(const char *dir, const char *name) {
    char *enc = tm_name_encode(name);
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.npy", dir, enc);
    free(enc);
    tm_tensor *t = NULL;
    tm_error err;
    if (tm_npy_read(path, &t, &err) != TM_OK) fprintf(stderr, "finetune_replay: %s\n", err.message);
    return t;
}

static double rel_err(const tm_tensor *a, const tm_tensor *b) {
    if (!a || !b || a->dtype != b->dtype || !tm_same_shape(a, b)) return INFINITY;
    double diff = 0.0, scale = 0.0;
    for (int64_t k = 0; k < tm_numel(a->rank, a->dims); k++) {
        double x = tm_load_f64(a->data, a->dtype, (size_t)k), y = tm_load_f64(b->data, b->dtype, (size_t)k);
        if (fabs(x - y) > diff) diff = fabs(x - y);
        if (fabs(y) > scale) scale = fabs(y);
    }
    return scale > 0 ? diff / scale : diff;
}

static double number(const tm_json *cfg, const char *key, int index) {
    const tm_json *v = tm_json_get(cfg, key);
    if (v && index >= 0 && v->type == TM_JSON_ARRAY && index < v->n) v = &v->items[index];
    if (!v || v->type != TM_JSON_NUMBER) {
        fprintf(stderr, "finetune_replay: config.json has no number '%s'\n", key);
        exit(2);
    }
    return v->number;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: finetune_replay MODEL.onnx TORCH_DUMP_DIR OUT_DIR\n");
        return 2;
    }
    const char *model_path = argv[1], *ref = argv[2], *out = argv[3];
    char path[4200];
    snprintf(path, sizeof path, "%s/config.json", ref);
    FILE *f = fopen(path, "rb");
    char text[1 << 16];
    size_t len = f ? fread(text, 1, sizeof text, f) : 0;
    if (f) fclose(f);
    tm_json *cfg = tm_json_parse(text, len);
    if (!cfg) {
        fprintf(stderr, "finetune_replay: cannot read %s\n", path);
        return 2;
    }
    tm_model *m = NULL;
    tm_error err;
    if (tm_model_load(model_path, NULL, &m, &err) != TM_OK) {
        fprintf(stderr, "finetune_replay: %s\n", err.message);
        return 1;
    }
    const tm_graph *g = m->onnx->graph;
    int n = 0;
    const char **names = calloc((size_t)g->n_inits + 1, sizeof *names);
    tm_tensor **params = calloc((size_t)g->n_inits + 1, sizeof *params);
    for (int i = 0; i < g->n_inits; i++)
        if (g->inits[i].tensor->dtype == TM_FLOAT) {
            names[n] = g->inits[i].name;
            params[n++] = tm_tensor_clone(g->inits[i].tensor, NULL); /* the loaded ones are read-only */
        }
    tm_optimizer_params op;
    tm_optimizer_params_default(&op, TM_OPTIMIZER_ADAMW);
    op.lr = number(cfg, "lr", -1);
    op.beta1 = number(cfg, "betas", 0);
    op.beta2 = number(cfg, "betas", 1);
    op.eps = number(cfg, "eps", -1);
    op.weight_decay = number(cfg, "weight_decay", -1);
    int steps = (int)number(cfg, "steps", -1), batch_size = (int)number(cfg, "batch_size", -1);
    tm_optimizer *opt = NULL;
    if (tm_optimizer_create(&op, n, names, params, &opt, &err) != TM_OK) {
        fprintf(stderr, "finetune_replay: %s\n", err.message);
        return 1;
    }
    tm_tensor **grads = calloc((size_t)n + 1, sizeof *grads);
    for (int s = 0; s < steps; s++) {
        snprintf(path, sizeof path, "%s/grads/%04d", ref, s);
        for (int i = 0; i < n; i++) grads[i] = read_named(path, names[i]);
        for (int i = 0; i < n; i++)
            if (!grads[i]) return 1;
        if (tm_optimizer_step(opt, (const tm_tensor *const *)grads, &err) != TM_OK) {
            fprintf(stderr, "finetune_replay: step %d: %s\n", s, err.message);
            return 1;
        }
        for (int i = 0; i < n; i++) tm_tensor_free(grads[i]);
    }
    snprintf(path, sizeof path, "%s/params", ref);
    double worst = 0.0;
    for (int i = 0; i < n; i++) {
        tm_tensor *want = read_named(path, names[i]);
        double e = rel_err(params[i], want);
        if (e > worst) worst = e;
        tm_tensor_free(want);
    }
    printf("weights after %d AdamW steps on PyTorch's gradients: max rel err %.3e over %d tensors\n",
           steps, worst, n);

    /* Save, reload, run on the batch: PyTorch's final logits. */
    mkdir(out, 0755);
    char saved[4200];
    snprintf(saved, sizeof saved, "%s/model.onnx", out);
    if (tm_model_save(m, saved, n, names, (const tm_tensor *const *)params, NULL, &err) != TM_OK) {
        fprintf(stderr, "finetune_replay: %s\n", err.message);
        return 1;
    }
    const tm_json *data = tm_json_get(cfg, "data");
    char data_path[4200];
    snprintf(data_path, sizeof data_path, "%s", data && data->type == TM_JSON_STRING ? data->string : "");
    tm__dataset *ds = NULL;
    tm__batcher *bt = NULL;
    tm__batch batch = {0};
    tm__batch_options bo;
    tm__batch_options_default(&bo);
    bo.batch_size = batch_size;
    tm_model *trained = NULL;
    if (tm__dataset_load(data_path, &ds, &err) || tm__batcher_create(ds, &bo, &bt, &err) ||
        tm__batcher_next(bt, &batch, &err) || tm_model_load(saved, NULL, &trained, &err)) {
        fprintf(stderr, "finetune_replay: %s\n", err.message);
        return 1;
    }
    const char *in_names[3] = {"input_ids", "attention_mask", "token_type_ids"};
    const tm_tensor *in[3] = {batch.input_ids, batch.attention_mask, batch.token_type_ids};
    tm_tensor *logits[1] = {NULL}, *before[1] = {NULL};
    if (tm_model_run(trained, 3, in_names, in, logits, NULL, &err) ||
        tm_model_run(m, 3, in_names, in, before, NULL, &err)) {
        fprintf(stderr, "finetune_replay: %s\n", err.message);
        return 1;
    }
    snprintf(path, sizeof path, "%s/final_logits.npy", ref);
    tm_tensor *want = NULL;
    if (tm_npy_read(path, &want, &err) != TM_OK) {
        fprintf(stderr, "finetune_replay: %s\n", err.message);
        return 1;
    }
    double diff = 0.0, moved = 0.0;
    for (int64_t k = 0; k < tm_numel(want->rank, want->dims); k++) {
        double y = ((const float *)want->data)[k];
        diff = fmax(diff, fabs(((const float *)logits[0]->data)[k] - y));
        moved = fmax(moved, fabs(((const float *)before[0]->data)[k] - y));
    }
    double loss = 0.0;
    tm__cross_entropy(logits[0], batch.labels, &loss, NULL, &err);
    printf("saved model %s: logits max |ours - PyTorch| %.3e (training moved them by %.3e); "
           "loss %.8f\n", saved, diff, moved, loss);
    int ok = worst <= 1e-5 && diff <= 1e-5 && moved > 1e-3;
    printf("%s\n", ok ? "replay ok" : "replay FAILED");
    tm_tensor_free(want);
    tm_tensor_free(logits[0]);
    tm_tensor_free(before[0]);
    tm__batch_clear(&batch);
    tm__batcher_free(bt);
    tm__dataset_free(ds);
    tm_model_free(trained);
    tm_optimizer_free(opt);
    for (int i = 0; i < n; i++) tm_tensor_free(params[i]);
    free(params);
    free(names);
    free(grads);
    tm_json_free(cfg);
    tm_model_free(m);
    return ok ? 0 : 1;
}
