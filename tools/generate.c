/* `transmuter generate`: greedy decoding with a decoder export (decoder_model_merged.onnx,
 * decoder_with_past_model.onnx): the prompt, then one token at a time. Compiled, through
 * tm_decoder (the KV cache in place, one plan for every decode step); with --eager, node
 * by node with the cache fed back. The raw-model loop: token ids in and out, no
 * tokenizer, no sampling, batch 1. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include "transmuter.h"
#include "core/dtype.h"

int tm__cmd_generate(int argc, char **argv);

/* What the loop feeds and reads, found by name in the model's inputs and outputs. */
typedef struct decoder {
    tm_model *model;
    int n_in, n_out;
    int ids, mask, positions, branch;   /* input indices, -1 when the model lacks them */
    int logits;                         /* output index */
    int *present_of;                    /* per input: the output that feeds it back, or -1 */
    int *past_axis;                     /* per past input: the axis that grows */
} decoder;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "transmuter: generate: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

/* "1,2,3" -> ids; returns the count, or -1 on anything but comma-separated integers. */
static int parse_ids(const char *s, int64_t **out) {
    int cap = 16, n = 0;
    int64_t *ids = malloc((size_t)cap * sizeof *ids);
    for (;;) {
        char *end;
        long long v = ids ? strtoll(s, &end, 10) : 0;
        if (!ids || end == s || (*end && *end != ',')) break;
        if (n == cap) {
            int64_t *grown = realloc(ids, (size_t)(cap *= 2) * sizeof *ids);
            if (!grown) break;
            ids = grown;
        }
        ids[n++] = v;
        if (!*end) {
            *out = ids;
            return n;
        }
        s = end + 1;
    }
    free(ids);
    return -1;
}

/* The output that carries an input's next value: past_key_values.N.key <- present.N.key
 * (Optimum's names), past.N <- present.N. */
static int present_index(const tm_model *m, const char *input) {
    const char *rest = NULL;
    if (!strncmp(input, "past_key_values", 15)) rest = input + 15;
    else if (!strncmp(input, "past", 4)) rest = input + 4;
    if (!rest) return -1;
    char name[512];
    snprintf(name, sizeof name, "present%s", rest);
    return tm_model_output_index(m, name);
}

static int describe(decoder *d) {
    tm_model *m = d->model;
    d->n_in = tm_model_n_inputs(m);
    d->n_out = tm_model_n_outputs(m);
    d->ids = tm_model_input_index(m, "input_ids");
    d->mask = tm_model_input_index(m, "attention_mask");
    d->positions = tm_model_input_index(m, "position_ids");
    d->branch = tm_model_input_index(m, "use_cache_branch");
    d->logits = tm_model_output_index(m, "logits");
    if (d->ids < 0) return fail("the model has no input 'input_ids'");
    if (d->logits < 0) return fail("the model has no output 'logits'");
    d->present_of = calloc((size_t)d->n_in, sizeof *d->present_of);
    d->past_axis = calloc((size_t)d->n_in, sizeof *d->past_axis);
    if (!d->present_of || !d->past_axis) return fail("out of memory");
    for (int i = 0; i < d->n_in; i++) {
        tm_value_desc in;
        tm_model_input(m, i, &in);
        d->present_of[i] = -1;
        if (i == d->ids || i == d->mask || i == d->positions || i == d->branch) continue;
        d->present_of[i] = present_index(m, in.name);
        if (d->present_of[i] < 0)
            return fail("input '%s' is not one a merged decoder takes (input_ids, attention_mask, "
                        "position_ids, past_key_values.* with present.* outputs, use_cache_branch)",
                        in.name);
        if (in.rank < 1) return fail("past input '%s' has no declared shape", in.name);
        /* The past axis is the one named like a past length; else the second last
         * ([batch, heads, past, head_dim]). */
        d->past_axis[i] = in.rank >= 2 ? in.rank - 2 : 0;
        for (int k = 0; k < in.rank; k++)
            if (in.dims[k] < 0 && in.dim_params && in.dim_params[k] && strstr(in.dim_params[k], "past"))
                d->past_axis[i] = k;
    }
    for (int i = 0; i < d->n_in; i++)
        if (d->present_of[i] >= 0) return 0;
    return fail("the model takes no past_key_values.* inputs: generate needs a decoder that "
                "takes its cache back (decoder_model_merged.onnx)");
}

/* An empty cache entry: the declared dims, batch 1, length 0 along the past axis. */
static tm_tensor *empty_past(const decoder *d, int i) {
    tm_value_desc in;
    tm_model_input(d->model, i, &in);
    int64_t dims[8];
    if (in.rank > 8) return NULL;
    for (int k = 0; k < in.rank; k++) {
        const char *p = in.dim_params ? in.dim_params[k] : NULL;
        if (k == d->past_axis[i]) dims[k] = 0;
        else if (in.dims[k] >= 0) dims[k] = in.dims[k];
        else if (p && strstr(p, "batch")) dims[k] = 1;
        else {
            fail("cannot tell the size of dim %s of input '%s' for an empty cache",
                 p ? p : "?", in.name);
            return NULL;
        }
    }
    return tm_tensor_new(in.dtype, in.rank, dims);
}

/* An integer input of shape [1, n] (ids, mask, positions) in the model's declared type. */
static tm_tensor *int_row(const decoder *d, int input, const int64_t *values, int64_t n) {
    tm_value_desc in;
    tm_model_input(d->model, input, &in);
    int64_t dims[2] = {1, n};
    tm_tensor *t = tm_tensor_new(in.dtype == TM_INT32 ? TM_INT32 : TM_INT64, 2, dims);
    if (!t) return NULL;
    void *data = tm_tensor_data(t);
    for (int64_t k = 0; k < n; k++) {
        if (in.dtype == TM_INT32) ((int32_t *)data)[k] = (int32_t)values[k];
        else ((int64_t *)data)[k] = values[k];
    }
    return t;
}

/* Greedy choice over the last position's logits (the first maximum, as argmax does). */
static int64_t argmax_last(const tm_tensor *logits) {
    int rank = tm_tensor_rank(logits);
    int64_t vocab = rank ? tm_tensor_dims(logits)[rank - 1] : 1;
    int64_t start = tm_tensor_numel(logits) - vocab, best = 0;
    const void *p = tm_tensor_data_const(logits);
    float best_v = 0;
    for (int64_t k = 0; k < vocab; k++) {
        float v;
        switch (tm_tensor_dtype(logits)) {
        case TM_FLOAT16: v = tm_f16_to_f32(((const uint16_t *)p)[start + k]); break;
        case TM_BFLOAT16: v = tm_bf16_to_f32(((const uint16_t *)p)[start + k]); break;
        case TM_DOUBLE: v = (float)((const double *)p)[start + k]; break;
        default: v = ((const float *)p)[start + k]; break;
        }
        if (k == 0 || v > best_v) {
            best_v = v;
            best = k;
        }
    }
    return best;
}

typedef struct loop {
    int eager, max_new, json, copy_cache;
    int64_t *prompt;
    int n_prompt;
    int64_t *generated;
    double *step_ms;      /* per decode step (tokens 2..max_new) */
    double prefill_ms, decode_ms;
} loop;

/* One step: `tokens` at positions past..past+n-1 with the cache in `past` (per input;
 * NULL for non-cache inputs). Outputs replace the cache; returns the next token or -1. */
static int64_t step(decoder *d, const loop *l, tm_tensor **past, const int64_t *tokens, int64_t n,
                    int64_t past_len) {
    int n_in = d->n_in, n_out = d->n_out;
    const char **names = calloc((size_t)n_in, sizeof *names);
    const tm_tensor **inputs = calloc((size_t)n_in, sizeof *inputs);
    tm_tensor **outputs = calloc((size_t)n_out, sizeof *outputs);
    tm_tensor *ids = NULL, *mask = NULL, *positions = NULL, *branch = NULL;
    int64_t *ones = malloc((size_t)(past_len + n) * sizeof *ones);
    int64_t next = -1;
    if (!names || !inputs || !outputs || !ones) {
        fail("out of memory");
        goto done;
    }
    for (int64_t k = 0; k < past_len + n; k++) ones[k] = 1;
    ids = int_row(d, d->ids, tokens, n);
    if (d->mask >= 0) mask = int_row(d, d->mask, ones, past_len + n);
    if (d->positions >= 0) {
        for (int64_t k = 0; k < n; k++) ones[k] = past_len + k;   /* reused as positions */
        positions = int_row(d, d->positions, ones, n);
    }
    if (d->branch >= 0) {
        int64_t one = 1;
        branch = tm_tensor_new(TM_BOOL, 1, &one);
        if (branch) *(uint8_t *)tm_tensor_data(branch) = past_len > 0;
    }
    if (!ids || (d->mask >= 0 && !mask) || (d->positions >= 0 && !positions) ||
        (d->branch >= 0 && !branch)) {
        fail("out of memory");
        goto done;
    }
    for (int i = 0; i < n_in; i++) {
        tm_value_desc in;
        tm_model_input(d->model, i, &in);
        names[i] = in.name;
        inputs[i] = i == d->ids ? ids : i == d->mask ? mask : i == d->positions ? positions
                  : i == d->branch ? branch : past[i];
    }
    tm_error err = {0};
    tm_status st;
    if (l->eager) {
        st = tm_run_eager(d->model, n_in, names, inputs, outputs, NULL, &err);
    } else {
        /* use_cache_branch as a static input folds the If; each step still has a new
         * past length, so each step makes (and caches) a plan of its own. */
        tm_plan_options po;
        tm_plan_options_default(&po);
        const char *static_names[1] = {"use_cache_branch"};
        const tm_tensor *static_values[1] = {branch};
        if (branch) {
            po.n_static = 1;
            po.static_names = static_names;
            po.static_values = static_values;
        }
        st = tm_model_run(d->model, n_in, names, inputs, outputs, &po, &err);
    }
    if (st != TM_OK) {
        fail("%s", err.message[0] ? err.message : tm_status_name(st));
        goto done;
    }
    if (!outputs[d->logits]) {
        fail("the model gave no logits");
        goto done;
    }
    next = argmax_last(outputs[d->logits]);
    for (int i = 0; i < n_in; i++) {
        if (d->present_of[i] < 0) continue;
        tm_tensor_free(past[i]);
        past[i] = outputs[d->present_of[i]];        /* the cache is now the caller's */
        outputs[d->present_of[i]] = NULL;
        if (!past[i]) {
            fail("the model gave no value for the cache input '%s'", names[i]);
            next = -1;
        }
    }
done:
    for (int i = 0; outputs && i < n_out; i++) tm_tensor_free(outputs[i]);
    tm_tensor_free(ids);
    tm_tensor_free(mask);
    tm_tensor_free(positions);
    tm_tensor_free(branch);
    free(ones);
    free(names);
    free(inputs);
    free(outputs);
    return next;
}

/* The compiled loop: tm_decoder. */
static int generate_compiled(decoder *dd, loop *l) {
    tm_decoder_options o;
    tm_decoder_options_default(&o);
    o.kv_in_place = !l->copy_cache;
    o.last_logits_only = 1;   /* greedy reads the last position only */
    o.capacity = l->n_prompt + l->max_new;
    tm_decoder *d = NULL;
    tm_error err = {0};
    tm_status st = tm_decoder_create(dd->model, &o, &d, &err);
    double t0 = now_ms();
    if (st == TM_OK) st = tm_decoder_append(d, l->prompt, l->n_prompt, &err);
    l->prefill_ms = now_ms() - t0;
    double start = now_ms();
    for (int k = 0; st == TM_OK && k < l->max_new; k++) {
        l->generated[k] = argmax_last(tm_decoder_logits(d));
        if (k + 1 == l->max_new) break;
        double s0 = now_ms();
        st = tm_decoder_append(d, &l->generated[k], 1, &err);
        l->step_ms[k] = now_ms() - s0;
    }
    l->decode_ms = now_ms() - start;
    tm_decoder_free(d);
    if (st != TM_OK) return fail("%s", err.message[0] ? err.message : tm_status_name(st));
    return 0;
}

/* This process's peak resident memory in MB: VmHWM (getrusage's ru_maxrss keeps the
 * peak of the process that exec'd us). Also transmuter stream's. */
double tm__peak_rss_mb(void);
double tm__peak_rss_mb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kb = strtol(line + 6, NULL, 10);
    if (f) fclose(f);
    if (kb < 0) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        kb = ru.ru_maxrss;
    }
    return kb / 1024.0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(const double *v, int n) {
    if (n < 1) return 0;
    double *c = malloc((size_t)n * sizeof *c);
    if (!c) return 0;
    memcpy(c, v, (size_t)n * sizeof *c);
    qsort(c, (size_t)n, sizeof *c, cmp_double);
    double m = n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
    free(c);
    return m;
}

static int generate(decoder *d, loop *l) {
    tm_tensor **past = calloc((size_t)d->n_in, sizeof *past);
    int rc = 1;
    if (!past) return fail("out of memory");
    for (int i = 0; i < d->n_in; i++)
        if (d->present_of[i] >= 0 && !(past[i] = empty_past(d, i))) goto done;
    double t0 = now_ms();
    int64_t token = step(d, l, past, l->prompt, l->n_prompt, 0);
    l->prefill_ms = now_ms() - t0;
    if (token < 0) goto done;
    l->generated[0] = token;
    t0 = now_ms();
    for (int k = 1; k < l->max_new; k++) {
        double s0 = now_ms();
        token = step(d, l, past, &l->generated[k - 1], 1, l->n_prompt + k - 1);
        l->step_ms[k - 1] = now_ms() - s0;
        if (token < 0) goto done;
        l->generated[k] = token;
    }
    l->decode_ms = now_ms() - t0;
    rc = 0;
done:
    for (int i = 0; i < d->n_in; i++) tm_tensor_free(past[i]);
    free(past);
    return rc;
}

static void usage_to(FILE *f) {
    fprintf(f, "usage: transmuter generate MODEL --prompt-ids 1,2,3 --max-new N [--threads N]\n"
               "                           [--eager] [--copy-cache] [--json] [--compute-type f32]\n"
               "                           [--dequantize-nbits[-once]]\n"
               "Greedy decoding with a decoder export (decoder_model_merged.onnx, or\n"
               "decoder_with_past_model.onnx): the prompt's ids, then --max-new tokens, printed\n"
               "as ids separated by commas; timings on stderr.\n"
               "  --eager        run node by node, the cache fed back (no plans)\n"
               "  --copy-cache   compiled, but the cache copied each step instead of kept in place\n"
               "  --json         one JSON line instead: prefill_ms, decode_ms (per step),\n"
               "                 decode_ms_median, tokens_per_s, plans_made, generic_plans,\n"
               "                 peak_rss_mb, load_ms, tokens\n");
}

static void usage(void) { usage_to(stderr); }

int tm__cmd_generate(int argc, char **argv) {
    const char *model_path = NULL, *prompt = NULL;
    loop l = {0};
    l.max_new = 16;
    tm_load_options lo;
    tm_load_options_default(&lo);
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--prompt-ids") && i + 1 < argc) prompt = argv[++i];
        else if (!strcmp(argv[i], "--max-new") && i + 1 < argc) l.max_new = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) lo.threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--eager")) l.eager = 1;
        else if (!strcmp(argv[i], "--json")) l.json = 1;
        else if (!strcmp(argv[i], "--copy-cache")) l.copy_cache = 1;
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage_to(stdout);
            return 0;
        }
        else if (!strcmp(argv[i], "--dequantize-nbits")) lo.dequantize_nbits = 1;
        else if (!strcmp(argv[i], "--dequantize-nbits-once")) lo.dequantize_nbits = 2;
        else if (!strcmp(argv[i], "--compute-type") && i + 1 < argc) {
            const char *t = argv[++i];
            if (strcmp(t, "f32") && strcmp(t, "float32")) {
                fprintf(stderr, "transmuter: unknown compute type '%s' (use f32)\n", t);
                return 2;
            }
            lo.compute_type = TM_FLOAT;
        } else if (argv[i][0] != '-' && !model_path) model_path = argv[i];
        else {
            fprintf(stderr, "transmuter: unknown argument '%s'\n", argv[i]);
            usage();
            return 2;
        }
    }
    if (!model_path || !prompt || l.max_new < 1) {
        usage();
        return 2;
    }
    l.n_prompt = parse_ids(prompt, &l.prompt);
    if (l.n_prompt < 0) {
        fprintf(stderr, "transmuter: generate: --prompt-ids takes integers separated by commas, "
                        "not '%s'\n", prompt);
        return 2;
    }
    decoder d = {0};
    tm_error err = {0};
    int rc = 1;
    l.generated = calloc((size_t)l.max_new, sizeof *l.generated);
    l.step_ms = calloc((size_t)l.max_new, sizeof *l.step_ms);
    double t0 = now_ms();
    tm_status st = tm_model_load(model_path, &lo, &d.model, &err);
    double load_ms = now_ms() - t0;
    if (st != TM_OK) {
        fprintf(stderr, "transmuter: %s\n", err.message[0] ? err.message : tm_status_name(st));
        goto done;
    }
    if (!l.generated || !l.step_ms || describe(&d)) goto done;
    if (l.eager ? generate(&d, &l) : generate_compiled(&d, &l)) goto done;
    int n_decode = l.max_new - 1;
    double med = median(l.step_ms, n_decode);
    tm_plan_stats ps = {.size = sizeof ps};
    tm_model_plan_stats(d.model, &ps);
    double rss = tm__peak_rss_mb();
    if (l.json) {
        printf("{\"prompt_tokens\": %d, \"new_tokens\": %d, \"load_ms\": %.3f, \"prefill_ms\": %.3f, "
               "\"decode_ms_median\": %.4f, \"decode_ms_total\": %.3f, \"tokens_per_s\": %.2f, "
               "\"plans_made\": %zu, \"generic_plans\": %zu, \"peak_rss_mb\": %.1f, \"mode\": \"%s\", "
               "\"decode_ms\": [", l.n_prompt, l.max_new, load_ms, l.prefill_ms, med, l.decode_ms,
               n_decode ? n_decode / (l.decode_ms / 1e3) : 0.0, ps.plans, ps.generic_plans,
               rss, l.eager ? "eager" : l.copy_cache ? "copy-cache" : "in-place");
        for (int k = 0; k < n_decode; k++) printf("%s%.4f", k ? ", " : "", l.step_ms[k]);
        printf("], \"tokens\": [");
        for (int k = 0; k < l.max_new; k++) printf("%s%lld", k ? ", " : "", (long long)l.generated[k]);
        printf("]}\n");
    } else {
        for (int k = 0; k < l.max_new; k++) printf("%s%lld", k ? "," : "", (long long)l.generated[k]);
        printf("\n");
        fprintf(stderr, "load %.1f ms; prefill %d tokens in %.1f ms (%.1f tokens/s); decode %d tokens "
                        "in %.1f ms (%.1f tokens/s, median step %.3f ms); %s; plans made: %zu for one "
                        "shape, %zu serving many\n",
                load_ms, l.n_prompt, l.prefill_ms, l.n_prompt / (l.prefill_ms / 1e3), n_decode,
                l.decode_ms, n_decode ? n_decode / (l.decode_ms / 1e3) : 0.0, med,
                l.eager ? "eager" : l.copy_cache ? "compiled, cache copied each step"
                                                 : "compiled, cache in place",
                ps.plans, ps.generic_plans);
    }
    rc = 0;
done:
    tm_model_free(d.model);
    free(d.present_of);
    free(d.past_axis);
    free(l.prompt);
    free(l.generated);
    free(l.step_ms);
    return rc;
}
