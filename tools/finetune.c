/* `transmuter finetune`: fine-tunes a sequence-classification export (logits (batch,
 * num_labels)) on a JSONL or NPY dataset of token ids and labels with cross-entropy and
 * AdamW (or SGD), through compiled value-and-gradient plans, and saves the new weights
 * with tm_model_save. Not a tokenizer, not an evaluation loop, not token classification. */
#include <errno.h>
#include <fnmatch.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "transmuter.h"
#include "backends/cpu/pool.h"
#include "core/tensor.h"
#include "onnx/model.h"
#include "runtime/runtime.h"
#include "train/dataset.h"
#include "train/finetune.h"

int tm__cmd_finetune(int argc, char **argv);

#define FT_MAX_GLOBS 64
/* The plan input the labels are fed through (the model's inputs are checked not to
 * include it). */
#define LABELS_INPUT "labels"

static const char *const finetune_usage =
    "usage: transmuter finetune MODEL --data FILE.jsonl|DIR --out OUT.onnx [options]\n"
    "  training     --steps N | --epochs E (default 1 epoch)   --batch-size B (8)\n"
    "               --stop-after K (save after step K of the N, to --resume later)\n"
    "               --lr LR (5e-5)   --weight-decay WD (0)   --no-decay GLOB ...\n"
    "               --optimizer adamw|sgd (adamw)   --beta1 B1 (0.9)   --beta2 B2 (0.999)\n"
    "               --eps EPS (1e-8)   --momentum M (sgd, 0)   --max-grad-norm X (1; 0: off)\n"
    "               --schedule constant|linear|cosine (linear)   --warmup N (0 steps)\n"
    "               --trainable GLOB ... (default: every float initializer)\n"
    "  data         --shuffle   --seed S (0)   --drop-last   --max-length L (pad to L)\n"
    "               --pad-multiple K (pad each batch to a multiple of K)   --pad-id ID (0)\n"
    "  model        --logits NAME (default: 'logits', or the only rank-2 float output)\n"
    "               --compute-type f32|exported (f32 for half-precision models)\n"
    "               --threads N   --plan-cache N (plans kept, 8)\n"
    "  output       --external-data auto|never|always   --resume STATE   --save-state STATE\n"
    "               --dump DIR (gradients per step, losses, final parameters)   --quiet\n";

typedef struct ft_args {
    const char *model, *data, *out, *logits, *dump, *resume, *save_state;
    int64_t steps, stop_after, epochs, batch_size, warmup, max_length, pad_multiple, pad_id, seed;
    double lr, weight_decay, beta1, beta2, eps, momentum, max_grad_norm;
    tm_optimizer_kind optimizer;
    tm_lr_schedule schedule;
    int shuffle, drop_last, threads, plan_cache, quiet;
    int compute_type;            /* -1: decide from the model; TM_UNDEFINED; TM_FLOAT */
    tm_external_data external;
    const char *trainable[FT_MAX_GLOBS], *no_decay[FT_MAX_GLOBS];
    int n_trainable, n_no_decay;
} ft_args;

static int fail(const char *fmt, ...) TM_PRINTF(1, 2);
static int fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "transmuter: finetune: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- Arguments ------------------------------------------------------------------------ */

static int parse_int(const char *opt, const char *s, int64_t min, int64_t *out) {
    char *end;
    errno = 0;
    long long v = s ? strtoll(s, &end, 10) : 0;
    if (!s || end == s || *end || errno || v < min)
        return fail("%s takes an integer >= %lld, not '%s'", opt, (long long)min, s ? s : "");
    *out = v;
    return 0;
}

static int parse_real(const char *opt, const char *s, double min, double *out) {
    char *end;
    errno = 0;
    double v = s ? strtod(s, &end) : 0;
    if (!s || end == s || *end || errno || !isfinite(v) || v < min)
        return fail("%s takes a number >= %g, not '%s'", opt, min, s ? s : "");
    *out = v;
    return 0;
}

static void defaults(ft_args *a) {
    memset(a, 0, sizeof *a);
    /* Hugging Face Trainer's defaults (TrainingArguments), the usual starting point. */
    a->batch_size = 8;
    a->lr = 5e-5;
    a->beta1 = 0.9;
    a->beta2 = 0.999;
    a->eps = 1e-8;
    a->max_grad_norm = 1.0;
    a->optimizer = TM_OPTIMIZER_ADAMW;
    a->schedule = TM_LR_LINEAR;
    a->plan_cache = 8;
    a->compute_type = -1;
    a->external = TM_EXTERNAL_AUTO;
}

static int takes_value(const char *o) {
    static const char *const with_value[] = {
        "--data", "--out", "--logits", "--dump", "--resume", "--save-state", "--steps",
        "--stop-after", "--epochs", "--batch-size", "--warmup", "--max-length", "--pad-multiple",
        "--pad-id", "--seed", "--threads", "--plan-cache", "--lr", "--weight-decay", "--beta1",
        "--beta2", "--eps", "--momentum", "--max-grad-norm", "--optimizer", "--schedule",
        "--compute-type", "--external-data", "--trainable", "--no-decay"};
    for (size_t i = 0; i < sizeof with_value / sizeof *with_value; i++)
        if (!strcmp(o, with_value[i])) return 1;
    return 0;
}

static int parse_args(int argc, char **argv, ft_args *a) {
    defaults(a);
    for (int i = 0; i < argc; i++) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int64_t n = 0;
        int rc = 0, takes = 1;
#define IS(name) (!strcmp(o, name))
        if (IS("--shuffle")) a->shuffle = 1, takes = 0;
        else if (IS("--drop-last")) a->drop_last = 1, takes = 0;
        else if (IS("--quiet")) a->quiet = 1, takes = 0;
        else if (!v && takes_value(o)) return fail("%s needs a value", o);
        else if (IS("--data")) a->data = v;
        else if (IS("--out")) a->out = v;
        else if (IS("--logits")) a->logits = v;
        else if (IS("--dump")) a->dump = v;
        else if (IS("--resume")) a->resume = v;
        else if (IS("--save-state")) a->save_state = v;
        else if (IS("--steps")) rc = parse_int(o, v, 1, &a->steps);
        else if (IS("--stop-after")) rc = parse_int(o, v, 1, &a->stop_after);
        else if (IS("--epochs")) rc = parse_int(o, v, 1, &a->epochs);
        else if (IS("--batch-size")) rc = parse_int(o, v, 1, &a->batch_size);
        else if (IS("--warmup")) rc = parse_int(o, v, 0, &a->warmup);
        else if (IS("--max-length")) rc = parse_int(o, v, 1, &a->max_length);
        else if (IS("--pad-multiple")) rc = parse_int(o, v, 1, &a->pad_multiple);
        else if (IS("--pad-id")) rc = parse_int(o, v, 0, &a->pad_id);
        else if (IS("--seed")) rc = parse_int(o, v, 0, &a->seed);
        else if (IS("--threads")) rc = parse_int(o, v, 0, &n), a->threads = (int)n;
        else if (IS("--plan-cache")) rc = parse_int(o, v, 1, &n), a->plan_cache = (int)n;
        else if (IS("--lr")) rc = parse_real(o, v, 0, &a->lr);
        else if (IS("--weight-decay")) rc = parse_real(o, v, 0, &a->weight_decay);
        else if (IS("--beta1")) rc = parse_real(o, v, 0, &a->beta1);
        else if (IS("--beta2")) rc = parse_real(o, v, 0, &a->beta2);
        else if (IS("--eps")) rc = parse_real(o, v, 0, &a->eps);
        else if (IS("--momentum")) rc = parse_real(o, v, 0, &a->momentum);
        else if (IS("--max-grad-norm")) rc = parse_real(o, v, 0, &a->max_grad_norm);
        else if (IS("--optimizer")) {
            if (!strcmp(v, "adamw")) a->optimizer = TM_OPTIMIZER_ADAMW;
            else if (!strcmp(v, "sgd")) a->optimizer = TM_OPTIMIZER_SGD;
            else return fail("--optimizer is adamw or sgd, not '%s'", v);
        } else if (IS("--schedule")) {
            if (!strcmp(v, "constant")) a->schedule = TM_LR_CONSTANT;
            else if (!strcmp(v, "linear")) a->schedule = TM_LR_LINEAR;
            else if (!strcmp(v, "cosine")) a->schedule = TM_LR_COSINE;
            else return fail("--schedule is constant, linear or cosine, not '%s'", v);
        } else if (IS("--compute-type")) {
            if (!strcmp(v, "f32") || !strcmp(v, "float32")) a->compute_type = TM_FLOAT;
            else if (!strcmp(v, "exported")) a->compute_type = TM_UNDEFINED;
            else return fail("--compute-type is f32 or exported, not '%s'", v);
        } else if (IS("--external-data")) {
            if (!strcmp(v, "auto")) a->external = TM_EXTERNAL_AUTO;
            else if (!strcmp(v, "never")) a->external = TM_EXTERNAL_NEVER;
            else if (!strcmp(v, "always")) a->external = TM_EXTERNAL_ALWAYS;
            else return fail("--external-data is auto, never or always, not '%s'", v);
        } else if (IS("--trainable") || IS("--no-decay")) {
            int *n_globs = IS("--trainable") ? &a->n_trainable : &a->n_no_decay;
            const char **globs = IS("--trainable") ? a->trainable : a->no_decay;
            if (*n_globs == FT_MAX_GLOBS) return fail("more than %d %s patterns", FT_MAX_GLOBS, o);
            globs[(*n_globs)++] = v;
        } else if (o[0] != '-' && !a->model) a->model = o, takes = 0;
        else return fail("unknown argument '%s' (see transmuter finetune --help)", o);
#undef IS
        if (rc) return rc;
        i += takes;
    }
    if (!a->model || !a->data || !a->out)
        return fail("MODEL, --data and --out are required\n%s", finetune_usage);
    if (a->steps && a->epochs) return fail("give --steps or --epochs, not both");
    if (a->max_length && a->pad_multiple) return fail("give --max-length or --pad-multiple, not both");
    if (a->beta1 >= 1 || a->beta2 >= 1) return fail("--beta1 and --beta2 must be below 1");
    if (a->optimizer == TM_OPTIMIZER_ADAMW && a->eps <= 0) return fail("--eps must be > 0");
    if (a->optimizer != TM_OPTIMIZER_SGD && a->momentum) return fail("--momentum is for --optimizer sgd");
    return 0;
}

/* ---- What the model takes and gives ------------------------------------------------------ */

typedef struct ft_model {
    tm_model *m;
    int logits;                  /* output index */
    int64_t num_labels;          /* -1 until known */
    int n_in;
    const char *in_names[4];     /* the model's inputs, then LABELS_INPUT */
    int in_kind[3];              /* 0 input_ids, 1 attention_mask, 2 token_type_ids */
    tm_dtype id_dtype;
    int64_t vocab, type_vocab, positions; /* 0 when not found */
} ft_model;

/* The rows of the embedding table a Gather reads with `indices` (an initializer, maybe
 * behind Identity nodes), or 0. */
static int64_t table_rows(const tm_graph *g, const char *indices, const char *name_part) {
    for (int k = 0; k < g->n_nodes; k++) {
        const tm_node *n = &g->nodes[k];
        if (strcmp(n->op_type, "Gather") || n->n_inputs < 2) continue;
        const char *data = n->inputs[0];
        if (indices && strcmp(n->inputs[1], indices)) continue;
        for (int hops = 0; hops < 8; hops++) {
            int moved = 0;
            for (int j = 0; j < g->n_nodes && !moved; j++)
                if (!strcmp(g->nodes[j].op_type, "Identity") && g->nodes[j].n_outputs == 1 &&
                    !strcmp(g->nodes[j].outputs[0], data))
                    data = g->nodes[j].inputs[0], moved = 1;
            if (!moved) break;
        }
        if (name_part && !strstr(data, name_part)) continue;
        for (int i = 0; i < g->n_inits; i++)
            if (!strcmp(g->inits[i].name, data) && g->inits[i].tensor->rank == 2)
                return g->inits[i].tensor->dims[0];
    }
    return 0;
}

static int find_logits(ft_model *fm, const char *want) {
    tm_model *m = fm->m;
    int n_out = tm_model_n_outputs(m);
    fm->logits = want ? tm_model_output_index(m, want) : tm_model_output_index(m, "logits");
    if (want && fm->logits < 0) return fail("the model has no output '%s' (--logits)", want);
    if (fm->logits < 0) {
        int found = 0;
        for (int i = 0; i < n_out; i++) {
            tm_value_desc d;
            tm_model_output(m, i, &d);
            if (d.rank == 2 && tm_dtype_is_float(d.dtype)) fm->logits = i, found++;
        }
        if (found != 1) {
            char list[1024] = "";
            size_t len = 0;
            for (int i = 0; i < n_out && len < sizeof list - 200; i++) {
                tm_value_desc d;
                tm_model_output(m, i, &d);
                len += (size_t)snprintf(list + len, sizeof list - len, "%s'%s' (%s, rank %d)",
                                        i ? ", " : "", d.name, tm_dtype_name(d.dtype), d.rank);
            }
            return fail("the model has %s logits-like output (float, rank 2: batch x labels); "
                        "its outputs are %s: fine-tune a sequence-classification export, or "
                        "name the output with --logits", found ? "more than one" : "no", list);
        }
    }
    tm_value_desc d;
    tm_model_output(m, fm->logits, &d);
    if (!tm_dtype_is_float(d.dtype) || (d.rank >= 0 && d.rank != 2))
        return fail("output '%s' is %s of rank %d: the logits of sequence classification are "
                    "float (batch, num_labels)", d.name, tm_dtype_name(d.dtype), d.rank);
    fm->num_labels = d.rank == 2 && d.dims[1] > 0 ? d.dims[1] : -1;
    return 0;
}

static int describe_inputs(ft_model *fm, const tm__dataset *ds) {
    static const char *const known[3] = {"input_ids", "attention_mask", "token_type_ids"};
    tm_model *m = fm->m;
    fm->n_in = tm_model_n_inputs(m);
    if (fm->n_in > 3)
        return fail("the model takes %d inputs; a token dataset feeds input_ids, "
                    "attention_mask and token_type_ids only", fm->n_in);
    int has[3] = {0, 0, 0};
    for (int i = 0; i < fm->n_in; i++) {
        tm_value_desc d;
        tm_model_input(m, i, &d);
        int k = 0;
        while (k < 3 && strcmp(d.name, known[k])) k++;
        if (k == 3)
            return fail("the dataset does not fit the model: model input '%s' is not one of "
                        "input_ids, attention_mask, token_type_ids (what %s gives)", d.name,
                        ds->source);
        if (d.dtype != TM_INT64 && d.dtype != TM_INT32)
            return fail("model input '%s' is %s: token ids are fed as int64 or int32", d.name,
                        tm_dtype_name(d.dtype));
        if (d.rank != 2)
            return fail("model input '%s' has rank %d: token inputs are (batch, sequence)",
                        d.name, d.rank);
        if (i && d.dtype != fm->id_dtype)
            return fail("model inputs mix %s and %s: the batcher feeds one integer type",
                        tm_dtype_name(fm->id_dtype), tm_dtype_name(d.dtype));
        fm->id_dtype = d.dtype;
        fm->in_names[i] = known[k];
        fm->in_kind[i] = k;
        has[k] = 1;
    }
    fm->in_names[fm->n_in] = LABELS_INPUT;
    if (!has[0]) return fail("the model has no input_ids input: it does not read token ids");
    for (int64_t i = 0; i < ds->n && !has[2]; i++) {
        const tm__example *e = &ds->examples[i];
        for (int64_t k = 0; e->token_type_ids && k < e->len; k++)
            if (e->token_type_ids[k])
                return fail("the dataset does not fit the model: %s %s %lld has token type "
                            "%lld, and the model has no token_type_ids input", ds->source,
                            ds->is_jsonl ? "line" : "row", (long long)e->where,
                            (long long)e->token_type_ids[k]);
    }
    const tm_graph *g = m->onnx->graph;
    fm->vocab = table_rows(g, "input_ids", NULL);
    fm->type_vocab = has[2] ? table_rows(g, "token_type_ids", NULL) : 0;
    fm->positions = table_rows(g, NULL, "position_embeddings");
    if (fm->positions && ds->max_len > fm->positions)
        for (int64_t i = 0; i < ds->n; i++)
            if (ds->examples[i].len > fm->positions)
                return fail("the dataset does not fit the model: %s %s %lld has %lld tokens, "
                            "and the model has %lld positions", ds->source,
                            ds->is_jsonl ? "line" : "row", (long long)ds->examples[i].where,
                            (long long)ds->examples[i].len, (long long)fm->positions);
    if (!has[1]) {
        int64_t len0 = ds->examples[0].len;
        for (int64_t i = 1; i < ds->n; i++)
            if (ds->examples[i].len != len0)
                return fail("the model has no attention_mask input, so padding would be "
                            "attended to, and %s has examples of different lengths", ds->source);
    }
    return 0;
}

/* A model without a static label count: one forward plan on a (1, 1) batch tells it. */
static int learn_num_labels(ft_model *fm) {
    const int64_t dims[2] = {1, 1};
    tm_tensor *in[3] = {NULL, NULL, NULL};
    tm_plan *p = NULL;
    tm_error err;
    int rc = 0;
    for (int i = 0; i < fm->n_in; i++) {
        in[i] = tm_tensor_new(fm->id_dtype, 2, dims);
        if (!in[i]) rc = fail("out of memory");
        else if (fm->in_kind[i] == 1) tm_store_f64(in[i]->data, fm->id_dtype, 0, 1);
    }
    tm_value_desc d;
    if (!rc && tm_plan_create(fm->m, fm->n_in, fm->in_names, (const tm_tensor *const *)in, NULL,
                              &p, &err) != TM_OK)
        rc = fail("cannot tell the number of labels from a forward plan: %s", err.message);
    if (!rc && (tm_plan_output(p, fm->logits, &d) != TM_OK || d.rank != 2 || d.dims[1] <= 0))
        rc = fail("output '%s' is not (batch, num_labels) on a batch of one",
                  fm->m->out_desc[fm->logits].name);
    if (!rc) fm->num_labels = d.dims[1];
    tm_plan_free(p);
    for (int i = 0; i < 3; i++) tm_tensor_free(in[i]);
    return rc;
}

/* ---- Plans, cached per batch shape ------------------------------------------------------- */

/* A value-and-gradient plan is made for one (batch, length): the last partial batch of
 * an epoch, or batches padded to other lengths, need plans of their own. They are kept
 * (least recently used dropped beyond --plan-cache), since shapes recur every epoch;
 * --max-length or --pad-multiple bound how many distinct shapes there are. */
typedef struct ft_plan {
    int64_t batch, length;   /* length -1: a plan serving every length of 2 or more */
    tm_plan *plan;
    tm_session *session;
    uint64_t used;
} ft_plan;

typedef struct ft_plans {
    ft_plan *e;
    int n, cap;
    uint64_t clock;
    int made;
    double plan_ms;
} ft_plans;

static void plans_free(ft_plans *ps) {
    for (int i = 0; i < ps->n; i++) {
        tm_session_free(ps->e[i].session);
        tm_plan_free(ps->e[i].plan);
    }
    free(ps->e);
}

static ft_plan *plan_for(ft_plans *ps, const ft_model *fm, const tm_tensor *const *in,
                         int64_t batch, int64_t length, int quiet) {
    for (int i = 0; i < ps->n; i++)
        if (ps->e[i].batch == batch && (ps->e[i].length == length ||
                                        (ps->e[i].length == -1 && length >= 2))) {
            ps->e[i].used = ++ps->clock;
            return &ps->e[i];
        }
    if (ps->n == ps->cap) {          /* drop the least recently used */
        int lru = 0;
        for (int i = 1; i < ps->n; i++)
            if (ps->e[i].used < ps->e[lru].used) lru = i;
        tm_session_free(ps->e[lru].session);
        tm_plan_free(ps->e[lru].plan);
        ps->e[lru] = ps->e[--ps->n];
    }
    tm_grad_options go;
    tm_grad_options_default(&go);
    go.loss = TM_LOSS_CROSS_ENTROPY;
    go.output = fm->m->out_desc[fm->logits].name;
    go.target = LABELS_INPUT;
    ft_plan *p = &ps->e[ps->n];
    memset(p, 0, sizeof *p);
    tm_error err;
    double t0 = now_ms();
    /* One plan for every padded length of this batch size (shapes that change): the
     * lengths of input_ids and of every input the model names alike. */
    tm_plan_options po;
    tm_plan_options_default(&po);
    const char *vary_names[1] = {"input_ids"};
    int vary_axes[1] = {1};
    po.dynamic = length >= 2 && !getenv("TM_FINETUNE_PLAN_PER_SHAPE");
    po.n_vary = 1;
    po.vary_names = vary_names;
    po.vary_axes = vary_axes;
    if (tm_grad_plan_create(fm->m, fm->n_in + 1, fm->in_names, in, &po, &go, &p->plan, &err) != TM_OK ||
        tm_session_create(p->plan, &p->session, &err) != TM_OK) {
        fail("the value-and-gradient plan for a batch of %lld x %lld: %s", (long long)batch,
             (long long)length, err.message);
        tm_plan_free(p->plan);
        return NULL;
    }
    double ms = now_ms() - t0;
    ps->plan_ms += ms;
    ps->made++;
    int every = tm_plan_serves_sizes(p->plan, NULL, NULL);
    if (!quiet) {
        if (every)
            printf("plan for batch %lld x every length: %d kernels, arena %.1f MB at length %lld, "
                   "made in %.0f ms\n", (long long)batch, tm_plan_n_kernels(p->plan),
                   tm_plan_arena_bytes(p->plan) / 1048576.0, (long long)length + 1, ms);
        else
            printf("plan for batch %lld x %lld: %d kernels, arena %.1f MB, made in %.0f ms\n",
                   (long long)batch, (long long)length, tm_plan_n_kernels(p->plan),
                   tm_plan_arena_bytes(p->plan) / 1048576.0, ms);
    }
    p->batch = batch;
    p->length = every ? -1 : length;
    p->used = ++ps->clock;
    ps->n++;
    return p;
}

/* ---- The command --------------------------------------------------------------------------- */

typedef struct ft_run {
    ft_args a;
    ft_model fm;
    tm__dataset *ds;
    tm__batcher *bt;
    tm__batch batch;
    ft_plans plans;
    tm_optimizer *opt;
    int n_params;
    const char **names;
    tm_tensor **params;
    const tm_tensor **grads;
    double *loss, *lr;
} ft_run;

static void run_free(ft_run *r) {
    plans_free(&r->plans);
    tm__batch_clear(&r->batch);
    tm__batcher_free(r->bt);
    tm__dataset_free(r->ds);
    tm_optimizer_free(r->opt);
    tm_model_free(r->fm.m);
    free(r->names);
    free(r->params);
    free(r->grads);
    free(r->loss);
    free(r->lr);
}

/* The folder OUT goes in is made before training (not found only when saving, after it). */
static int make_out_folder(const char *out) {
    struct stat st;
    if (stat(out, &st) == 0 && S_ISDIR(st.st_mode))
        return fail("--out '%s' is a folder: give the file to write, e.g. %s/model.onnx", out, out);
    char dir[4096];
    const char *slash = strrchr(out, '/');
    if (!slash) return 0;
    if ((size_t)(slash - out) >= sizeof dir) return fail("--out '%s' is too long", out);
    memcpy(dir, out, (size_t)(slash - out));
    dir[slash - out] = 0;
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(dir, 0777) != 0 && errno != EEXIST)
            return fail("cannot create '%s' for --out: %s", dir, strerror(errno));
        *p = '/';
    }
    if (dir[0] && mkdir(dir, 0777) != 0 && errno != EEXIST)
        return fail("cannot create '%s' for --out: %s", dir, strerror(errno));
    if (dir[0] && (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)))
        return fail("--out '%s': '%s' is not a folder", out, dir);
    return 0;
}

static int load_model(ft_run *r) {
    const ft_args *a = &r->a;
    tm_load_options lo;
    tm_load_options_default(&lo);
    lo.threads = a->threads;
    /* f32 compute is a no-op for float32 models; half-precision ones then train in
     * float32 (their parameters stored so) and are saved back in their own dtype. */
    lo.compute_type = a->compute_type < 0 ? TM_FLOAT : (tm_dtype)a->compute_type;
    lo.trainable = 1;
    lo.n_trainable_names = a->n_trainable;
    lo.trainable_names = a->trainable;
    tm_error err;
    if (tm_model_load(a->model, &lo, &r->fm.m, &err) != TM_OK) {
        const char *msg = err.message;
        return strncmp(msg, a->model, strlen(a->model)) ? fail("%s: %s", a->model, msg) : fail("%s", msg);
    }
    if (tm_model_missing_ops(r->fm.m))
        return fail("%s uses operators Transmuter does not support: %s", a->model,
                    tm_model_missing_ops(r->fm.m));
    r->n_params = tm_model_n_params(r->fm.m);
    if (r->n_params == 0) return fail("%s has no float initializer to train", a->model);
    return 0;
}

static int make_optimizer(ft_run *r) {
    const ft_args *a = &r->a;
    r->names = calloc((size_t)r->n_params, sizeof *r->names);
    r->params = calloc((size_t)r->n_params, sizeof *r->params);
    r->grads = calloc((size_t)r->n_params, sizeof *r->grads);
    if (!r->names || !r->params || !r->grads) return fail("out of memory");
    for (int i = 0; i < r->n_params; i++) {
        tm_param_desc d;
        tm_model_param(r->fm.m, i, &d);
        r->names[i] = d.name;
        r->params[i] = d.tensor;
    }
    tm_optimizer_params op;
    tm_optimizer_params_default(&op, a->optimizer);
    op.lr = a->lr;
    op.weight_decay = a->weight_decay;
    op.momentum = a->momentum;
    op.beta1 = a->beta1;
    op.beta2 = a->beta2;
    op.eps = a->eps;
    op.schedule = a->schedule;
    op.warmup_steps = a->warmup;
    op.total_steps = a->steps;
    /* The update on as many threads as the model's kernels (--threads; 0: every core). */
    op.threads = a->threads > 0 ? a->threads : tm_pool_online_cpus();
    op.max_grad_norm = a->max_grad_norm;
    tm_error err;
    if (tm_optimizer_create(&op, r->n_params, r->names, r->params, &r->opt, &err) != TM_OK)
        return fail("optimizer: %s", err.message);
    for (int k = 0; k < a->n_no_decay; k++) {
        int any = 0;
        for (int i = 0; i < r->n_params; i++)
            if (!fnmatch(a->no_decay[k], r->names[i], 0)) {
                any = 1;
                if (tm_optimizer_set_weight_decay(r->opt, i, 0.0, &err) != TM_OK)
                    return fail("optimizer: %s", err.message);
            }
        if (!any) return fail("--no-decay '%s' matches no parameter", a->no_decay[k]);
    }
    if (a->resume && tm_optimizer_load_state(r->opt, a->resume, &err) != TM_OK)
        return fail("--resume: %s", err.message);
    return 0;
}

static int load_data(ft_run *r) {
    ft_args *a = &r->a;
    tm_error err;
    if (tm__dataset_load(a->data, &r->ds, &err) != TM_OK) return fail("%s", err.message);
    if (find_logits(&r->fm, a->logits) || describe_inputs(&r->fm, r->ds)) return 1;
    if (r->fm.num_labels < 0 && learn_num_labels(&r->fm)) return 1;
    if (r->fm.num_labels < 2)
        return fail("output '%s' has %lld label: cross-entropy needs at least 2 classes (a "
                    "regression head is not fine-tuned by this command)",
                    r->fm.m->out_desc[r->fm.logits].name, (long long)r->fm.num_labels);
    int64_t longest = a->max_length ? a->max_length : r->ds->max_len;
    if (a->pad_multiple) longest = (longest + a->pad_multiple - 1) / a->pad_multiple * a->pad_multiple;
    if (r->fm.positions && longest > r->fm.positions)
        return fail("batches would be %lld tokens long, and the model has %lld positions "
                    "(--max-length, --pad-multiple)", (long long)longest, (long long)r->fm.positions);
    tm__batch_options bo;
    tm__batch_options_default(&bo);
    bo.batch_size = a->batch_size;
    bo.max_length = a->max_length;
    bo.pad_multiple = a->pad_multiple;
    bo.pad_id = a->pad_id;
    bo.shuffle = a->shuffle;
    bo.seed = (uint64_t)a->seed;
    bo.drop_last = a->drop_last;
    bo.vocab_size = r->fm.vocab;
    bo.type_vocab_size = r->fm.type_vocab;
    bo.num_labels = r->fm.num_labels;
    bo.id_dtype = r->fm.id_dtype;
    if (tm__batcher_create(r->ds, &bo, &r->bt, &err) != TM_OK) return fail("%s", err.message);
    if (!a->steps) {
        int64_t n = r->ds->n, per_epoch = a->drop_last ? n / a->batch_size
                                                       : (n + a->batch_size - 1) / a->batch_size;
        a->steps = per_epoch * (a->epochs ? a->epochs : 1);
    }
    return 0;
}

static const tm_tensor *batch_input(const tm__batch *b, int kind) {
    return kind == 0 ? b->input_ids : kind == 1 ? b->attention_mask : b->token_type_ids;
}

/* One optimizer step on the next batch; k counts the steps of this run. */
static int train_step(ft_run *r, int64_t step, int64_t k) {
    const ft_args *a = &r->a;
    tm_error err;
    double t0 = now_ms();
    if (tm__batcher_next(r->bt, &r->batch, &err) != TM_OK) return fail("%s", err.message);
    const tm_tensor *in[4];
    for (int i = 0; i < r->fm.n_in; i++) in[i] = batch_input(&r->batch, r->fm.in_kind[i]);
    in[r->fm.n_in] = r->batch.labels;
    const int64_t *dims = r->batch.input_ids->dims;
    ft_plan *p = plan_for(&r->plans, &r->fm, in, dims[0], dims[1], a->quiet);
    if (!p) return 1;
    if (tm_session_run(p->session, r->fm.n_in + 1, r->fm.in_names, in, NULL, &err) != TM_OK)
        return fail("step %lld: %s", (long long)step + 1, err.message);
    const tm_tensor *loss = tm_session_result(p->session, 0);
    double value = tm_load_f64(loss->data, loss->dtype, 0);
    if (!isfinite(value))
        return fail("step %lld: the loss is %g (lower --lr, or clip with --max-grad-norm); "
                    "nothing saved", (long long)step + 1, value);
    for (int i = 0; i < r->n_params; i++) r->grads[i] = NULL;
    for (int j = 0; j < tm_plan_n_grads(p->plan); j++)
        r->grads[tm_plan_grad_param(p->plan, j)] = tm_session_result(p->session, 1 + j);
    r->loss[k] = value;
    r->lr[k] = tm_optimizer_lr(r->opt);
    if (a->dump && tm__dump_step(a->dump, k, r->n_params, r->names, r->grads, &err) != TM_OK)
        return fail("--dump: %s", err.message);
    if (tm_optimizer_step(r->opt, r->grads, &err) != TM_OK)
        return fail("step %lld: %s", (long long)step + 1, err.message);
    printf("step %lld/%lld  loss %.8f  lr %.4e  grad-norm %.6g  batch %lld x %lld  %.1f ms\n",
           (long long)step + 1, (long long)a->steps, value, r->lr[k],
           tm_optimizer_grad_norm(r->opt), (long long)dims[0], (long long)dims[1],
           now_ms() - t0);
    fflush(stdout);
    return 0;
}

static int save_results(ft_run *r, int64_t ran) {
    const ft_args *a = &r->a;
    tm_error err;
    tm_save_options so;
    tm_save_options_default(&so);
    so.external_data = a->external;
    if (tm_model_save(r->fm.m, a->out, r->n_params, r->names, (const tm_tensor *const *)r->params,
                      &so, &err) != TM_OK)
        return fail("%s", err.message);
    if (a->save_state && tm_optimizer_save_state(r->opt, a->save_state, &err) != TM_OK)
        return fail("--save-state: %s", err.message);
    if (a->dump && tm__dump_finish(a->dump, ran, r->loss, r->lr, r->n_params, r->names,
                                   (const tm_tensor *const *)r->params, &err) != TM_OK)
        return fail("--dump: %s", err.message);
    return 0;
}

int tm__cmd_finetune(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(finetune_usage, stdout);
            return 0;
        }
    ft_run r;
    memset(&r, 0, sizeof r);
    if (parse_args(argc, argv, &r.a)) return 1;
    if (r.a.quiet) setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1", 1);
    r.plans.cap = r.a.plan_cache;
    r.plans.e = calloc((size_t)r.plans.cap, sizeof *r.plans.e);
    int rc = !r.plans.e ? fail("out of memory") : 0;
    if (!rc) rc = make_out_folder(r.a.out);
    if (!rc) rc = load_model(&r);
    if (!rc) rc = load_data(&r);
    if (!rc) rc = make_optimizer(&r);
    int64_t start = r.opt ? tm_optimizer_step_count(r.opt) : 0;
    int64_t end = r.a.stop_after && r.a.stop_after < r.a.steps ? r.a.stop_after : r.a.steps;
    if (!rc && start >= end)
        rc = fail("the state in '%s' has taken %lld steps already; --steps %lld%s asks for no "
                  "more", r.a.resume, (long long)start, (long long)r.a.steps,
                  end < r.a.steps ? " with --stop-after" : "");
    int64_t ran = 0;
    if (!rc) {
        r.loss = calloc((size_t)(end - start), sizeof *r.loss);
        r.lr = calloc((size_t)(end - start), sizeof *r.lr);
        if (!r.loss || !r.lr) rc = fail("out of memory");
        tm_error err;
        /* Resuming continues the data where the saved run left it. */
        for (int64_t s = 0; !rc && s < start; s++)
            if (tm__batcher_next(r.bt, &r.batch, &err) != TM_OK) rc = fail("%s", err.message);
        if (!rc && !r.a.quiet)
            printf("fine-tuning %s: %d parameters, %lld examples, %lld labels, steps %lld to "
                   "%lld\n", r.a.model, r.n_params, (long long)r.ds->n,
                   (long long)r.fm.num_labels, (long long)start + 1, (long long)end);
    }
    double t0 = now_ms();
    for (int64_t s = start; !rc && s < end; s++, ran++) rc = train_step(&r, s, ran);
    double train_ms = now_ms() - t0;
    if (!rc) rc = save_results(&r, ran);
    if (!rc)
        printf("saved %s after %lld steps (%.1f ms per step; plans made: %d, in %.0f ms)\n",
               r.a.out, (long long)end, ran ? (train_ms - r.plans.plan_ms) / ran : 0.0,
               r.plans.made, r.plans.plan_ms);
    run_free(&r);
    return rc;
}
