/* `transmuter generate`, two forms. On a model file: greedy decoding with a decoder export
 * (decoder_model_merged.onnx, decoder_with_past_model.onnx), the prompt's ids, then one
 * token at a time; compiled, through tm_decoder (the KV cache in place, one plan for every
 * decode step); with --eager, node by node with the cache fed back: the raw-model loop,
 * token ids in and out. On a repository folder: text in, text streamed out, through
 * tm_generator (its tokenizer, chat template, generation_config.json; sampling and beams). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <sys/stat.h>
#include "transmuter.h"
#include "core/dtype.h"
#include "hub/json.h"

int tm__cmd_generate(int argc, char **argv);
static int generate_ids(int argc, char **argv);

static long long strtoll10(const char *s, char **end) { return strtoll(s, end, 10); }

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
    tm_dtype kv_dtype;    /* --kv-dtype: TM_FLOAT16, or TM_UNDEFINED (float32) */
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
    o.kv_dtype = l->kv_dtype;
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
               "                           [--eager] [--copy-cache] [--kv-dtype f32|f16] [--json]\n"
               "                           [--compute-type f32]\n"
               "                           [--dequantize-nbits[-once]] [--[no-]nbits-int8]\n"
               "       transmuter generate REPO_FOLDER --prompt TEXT ... (see its --help)\n"
               "Greedy decoding with a decoder export (decoder_model_merged.onnx, or\n"
               "decoder_with_past_model.onnx): the prompt's ids, then --max-new tokens, printed\n"
               "as ids separated by commas; timings on stderr.\n"
               "  --eager        run node by node, the cache fed back (no plans)\n"
               "  --copy-cache   compiled, but the cache copied each step instead of kept in place\n"
               "  --kv-dtype T   the cache kept in place in f32 (default) or f16: half the memory\n"
               "                 and the bytes a step reads (logits within about 1e-4 of f32's)\n"
               "  --json         one JSON line instead: prefill_ms, decode_ms (per step),\n"
               "                 decode_ms_median, tokens_per_s, plans_made, generic_plans,\n"
               "                 peak_rss_mb, load_ms, tokens\n");
}

static void usage(void) { usage_to(stderr); }

static int generate_ids(int argc, char **argv) {
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
        else if (!strcmp(argv[i], "--kv-dtype") && i + 1 < argc) {
            const char *t = argv[++i];
            if (!strcmp(t, "f16") || !strcmp(t, "float16")) l.kv_dtype = TM_FLOAT16;
            else if (strcmp(t, "f32") && strcmp(t, "float32")) {
                fprintf(stderr, "transmuter: unknown KV cache dtype '%s' (use f32 or f16)\n", t);
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage_to(stdout);
            return 0;
        }
        else if (!strcmp(argv[i], "--dequantize-nbits")) lo.dequantize_nbits = 1;
        else if (!strcmp(argv[i], "--nbits-int8")) lo.nbits_int8 = 1;
        else if (!strcmp(argv[i], "--no-nbits-int8")) lo.nbits_int8 = -1;
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
               "\"kv_dtype\": \"%s\", \"decode_ms\": [", l.n_prompt, l.max_new, load_ms, l.prefill_ms,
               med, l.decode_ms, n_decode ? n_decode / (l.decode_ms / 1e3) : 0.0, ps.plans,
               ps.generic_plans, rss, l.eager ? "eager" : l.copy_cache ? "copy-cache" : "in-place",
               l.kv_dtype == TM_FLOAT16 ? "f16" : "f32");
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
                : l.kv_dtype == TM_FLOAT16 ? "compiled, cache in place in f16"
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

/* ---- A repository folder: text in, text out (tm_generator) -------------------------- */

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            char *g = realloc(buf, cap = (n + 4096 + 1) * 2);
            if (!g) break;
            buf = g;
        }
        size_t got = fread(buf + n, 1, 4096, f);
        n += got;
        if (got < 4096) break;
    }
    fclose(f);
    if (buf) buf[n] = 0;
    return buf;
}

static int file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* The file name suffix of a dtype, as transformers.js names the exports. */
static const char *dtype_suffix(const char *dtype) {
    static const char *map[][2] = {{"fp32", ""}, {"fp16", "_fp16"}, {"q8", "_quantized"},
                                   {"int8", "_int8"}, {"uint8", "_uint8"}, {"q4", "_q4"},
                                   {"q4f16", "_q4f16"}, {"bnb4", "_bnb4"}};
    for (size_t k = 0; k < sizeof map / sizeof *map; k++)
        if (!strcmp(dtype, map[k][0])) return map[k][1];
    return NULL;
}

typedef struct stream_state {
    int any;
    int quiet;   /* --json: the text goes into the JSON line at the end instead */
} stream_state;

static int print_text(void *user, const char *text, size_t len, int32_t token) {
    stream_state *s = user;
    if (!s->quiet) {
        fwrite(text, 1, len, stdout);
        fflush(stdout);
    }
    s->any |= len > 0;
    (void)token;
    return 0;
}

/* s as a JSON string on stdout. */
static void print_json_string(const char *s, size_t n) {
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

/* tokenizer_config.json's add_bos_token or add_eos_token: transformers.js's text-generation
 * pipeline adds the special tokens to a plain prompt only then. */
static int adds_special_tokens(const tm_tokenizer *tok) {
    const char *cfg = tm_tokenizer_config_json(tok);
    tm_json *j = cfg ? tm_json_parse(cfg, strlen(cfg)) : NULL;
    const tm_json *b = j ? tm_json_get(j, "add_bos_token") : NULL, *e = j ? tm_json_get(j, "add_eos_token") : NULL;
    int yes = (b && b->type == TM_JSON_BOOL && b->number) || (e && e->type == TM_JSON_BOOL && e->number);
    tm_json_free(j);
    return yes;
}

static void usage_repo(FILE *f) {
    fprintf(f, "usage: transmuter generate REPO_FOLDER --prompt TEXT | --chat MESSAGES.json\n"
               "         [--max-new N] [--do-sample] [--temperature T] [--top-k K] [--top-p P]\n"
               "         [--seed S] [--num-beams N] [--repetition-penalty R] [--dtype fp32|q4|...]\n"
               "         [--min-new N] [--kv-dtype f32|f16] [--json]\n"
               "         [--threads N]\n"
               "Text generation on a Hugging Face-style folder: its tokenizer, config.json and\n"
               "generation_config.json, and onnx/decoder_model_merged[_DTYPE].onnx (else\n"
               "onnx/model[_DTYPE].onnx; with onnx/encoder_model[_DTYPE].onnx for an encoder-decoder).\n"
               "The new text is streamed to stdout as it is generated (beams: at the end).\n"
               "--max-new defaults to generation_config.json's max_new_tokens, else 256 (the\n"
               "text pipelines' default). --chat takes a JSON list of {\"role\", \"content\"} rendered\n"
               "with the tokenizer's chat template. --min-new N: no end token before N new\n"
               "tokens. --kv-dtype f16: the KV cache kept in half precision. --json: one JSON line instead of the stream: load_ms (tokenizer, configs,\n"
               "models), total_ms (the rest: template, encoding, plans, prefill, every step),\n"
               "prompt_tokens, new_tokens, tokens_per_s (over total_ms), peak_rss_mb, text.\n");
}

/* The encoder's outputs for an encoder-decoder's generator. */
static tm_status encode_source(tm_model *enc, tm_generator *g, const int32_t *ids, size_t n, tm_error *err) {
    int64_t dims[2] = {1, (int64_t)n};
    tm_tensor *t_ids = tm_tensor_new(TM_INT64, 2, dims), *t_mask = tm_tensor_new(TM_INT64, 2, dims);
    int n_out = tm_model_n_outputs(enc);
    tm_tensor **out = calloc((size_t)n_out + 1, sizeof *out);
    tm_status st = t_ids && t_mask && out ? TM_OK : TM_ERR_NO_MEMORY;
    if (st != TM_OK) snprintf(err->message, sizeof err->message, "out of memory");
    for (size_t i = 0; st == TM_OK && i < n; i++) {
        ((int64_t *)tm_tensor_data(t_ids))[i] = ids[i];
        ((int64_t *)tm_tensor_data(t_mask))[i] = 1;
    }
    const char *names[2] = {"input_ids", "attention_mask"};
    const tm_tensor *in[2] = {t_ids, t_mask};
    int n_in = tm_model_input_index(enc, "attention_mask") >= 0 ? 2 : 1;
    if (st == TM_OK) st = tm_model_run(enc, n_in, names, in, out, NULL, err);
    int hidden = tm_model_output_index(enc, "last_hidden_state");
    if (st == TM_OK) st = tm_generator_set_input(g, "encoder_hidden_states", out[hidden >= 0 ? hidden : 0], err);
    /* A decoder that takes the encoder's mask gets it; one that does not is fine. */
    if (st == TM_OK) {
        tm_error e2 = {0};
        tm_generator_set_input(g, "encoder_attention_mask", t_mask, &e2);
    }
    for (int k = 0; out && k < n_out; k++) tm_tensor_free(out[k]);
    free(out);
    tm_tensor_free(t_ids);
    tm_tensor_free(t_mask);
    return st;
}

static int generate_repo(int argc, char **argv) {
    const char *folder = NULL, *prompt = NULL, *chat = NULL, *dtype = "fp32";
    int kv16 = 0;
    tm_generation_config cfg;
    tm_generation_config_default(&cfg);
    tm_load_options lo;
    tm_load_options_default(&lo);
    long long max_new = -1, min_new = -1, top_k = -1, seed = -1, beams = -1;
    double temperature = -1, top_p = -1, rep = -1;
    int sample = 0, json = 0;
    double t_start = now_ms(), t_loaded = t_start;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
#define NEXT_NUM(var, conv) do { if (!v) goto bad; var = conv(v, &end); i++; if (*end || end == v) goto bad; } while (0)
        if (!strcmp(a, "--prompt") && v) prompt = argv[++i];
        else if (!strcmp(a, "--chat") && v) chat = argv[++i];
        else if (!strcmp(a, "--dtype") && v) dtype = argv[++i];
        else if (!strcmp(a, "--max-new")) NEXT_NUM(max_new, strtoll10);
        else if (!strcmp(a, "--min-new")) NEXT_NUM(min_new, strtoll10);
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--top-k")) NEXT_NUM(top_k, strtoll10);
        else if (!strcmp(a, "--seed")) NEXT_NUM(seed, strtoll10);
        else if (!strcmp(a, "--num-beams")) NEXT_NUM(beams, strtoll10);
        else if (!strcmp(a, "--threads")) { long long t; NEXT_NUM(t, strtoll10); lo.threads = (int)t; }
        else if (!strcmp(a, "--temperature")) NEXT_NUM(temperature, strtod);
        else if (!strcmp(a, "--top-p")) NEXT_NUM(top_p, strtod);
        else if (!strcmp(a, "--repetition-penalty")) NEXT_NUM(rep, strtod);
        else if (!strcmp(a, "--do-sample")) sample = 1;
        else if (!strcmp(a, "--kv-dtype") && v) {
            const char *t = argv[++i];
            if (!strcmp(t, "f16") || !strcmp(t, "float16")) kv16 = 1;
            else if (strcmp(t, "f32") && strcmp(t, "float32")) {
                fprintf(stderr, "transmuter: unknown KV cache dtype '%s' (use f32 or f16)\n", t);
                return 2;
            }
        }
        else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage_repo(stdout);
            return 0;
        } else if (a[0] != '-' && !folder) folder = a;
        else {
        bad:
            fprintf(stderr, "transmuter: generate: bad or unknown argument '%s'%s\n", a, v ? "" : " (a value missing?)");
            usage_repo(stderr);
            return 2;
        }
#undef NEXT_NUM
    }
    if (!folder || (!prompt) == (!chat)) {
        fprintf(stderr, "transmuter: generate: a folder and one of --prompt or --chat are needed\n");
        usage_repo(stderr);
        return 2;
    }
    const char *suffix = dtype_suffix(dtype);
    if (!suffix) {
        fprintf(stderr, "transmuter: generate: unknown --dtype '%s' (fp32, fp16, q8, int8, uint8, q4, "
                        "q4f16, bnb4)\n", dtype);
        return 2;
    }
    int rc = 1;
    tm_error err = {0};
    tm_tokenizer *tok = NULL;
    tm_model *dec = NULL, *enc = NULL;
    tm_generator *g = NULL;
    char *config = NULL, *gen_config = NULL, *messages = NULL, *rendered = NULL;
    tm_chat_template *tpl = NULL;
    tm_encoding *e = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", folder);
    config = read_text(path);
    snprintf(path, sizeof path, "%s/generation_config.json", folder);
    gen_config = read_text(path);
    tm_status st = tm_tokenizer_load(folder, NULL, &tok, &err);
    if (st == TM_OK) st = tm_generation_config_from_json(&cfg, config, gen_config, &err);
    if (st != TM_OK) goto fail;
    if (max_new > 0) cfg.max_new_tokens = max_new;
    else if (cfg.max_new_tokens < 0) cfg.max_new_tokens = 256;
    if (min_new >= 0) cfg.min_new_tokens = min_new;
    if (sample) cfg.do_sample = 1;
    if (temperature >= 0) cfg.temperature = temperature;
    if (top_k >= 0) cfg.top_k = top_k;
    if (top_p >= 0) cfg.top_p = top_p;
    if (seed >= 0) cfg.seed = (uint64_t)seed;
    if (beams >= 0) cfg.num_beams = (int)beams;
    if (rep >= 0) cfg.repetition_penalty = rep;
    if (kv16) cfg.kv_dtype = TM_FLOAT16;
    const char *names[2] = {"decoder_model_merged", "model"};
    for (int k = 0; k < 2 && !dec; k++) {
        snprintf(path, sizeof path, "%s/onnx/%s%s.onnx", folder, names[k], suffix);
        if (!file_exists(path)) continue;
        if ((st = tm_model_load(path, &lo, &dec, &err)) != TM_OK) goto fail;
    }
    if (!dec) {
        fprintf(stderr, "transmuter: generate: %s has no onnx/decoder_model_merged%s.onnx nor "
                        "onnx/model%s.onnx\n", folder, suffix, suffix);
        goto done;
    }
    snprintf(path, sizeof path, "%s/onnx/encoder_model%s.onnx", folder, suffix);
    if (file_exists(path) && (st = tm_model_load(path, &lo, &enc, &err)) != TM_OK) goto fail;
    t_loaded = now_ms();
    const char *text = prompt;
    int add_special = enc ? 1 : adds_special_tokens(tok);
    if (chat) {
        messages = read_text(chat);
        const char *src = tm_tokenizer_chat_template(tok, NULL);
        if (!messages) {
            fprintf(stderr, "transmuter: generate: cannot read %s\n", chat);
            goto done;
        }
        if (!src) {
            fprintf(stderr, "transmuter: generate: the tokenizer of %s has no chat template\n", folder);
            goto done;
        }
        /* The special tokens as variables, as transformers passes them. */
        char vars[1024] = "{";
        const char *roles[][2] = {{"bos_token", NULL}, {"eos_token", NULL}, {"unk_token", NULL}, {"pad_token", NULL}};
        tm_special_role rr[4] = {TM_SPECIAL_BOS, TM_SPECIAL_EOS, TM_SPECIAL_UNK, TM_SPECIAL_PAD};
        for (int k = 0; k < 4; k++) {
            const char *t = tm_tokenizer_special_token(tok, rr[k], NULL);
            if (!t || strchr(t, '"') || strchr(t, '\\') || strlen(vars) + strlen(t) + 32 > sizeof vars) continue;
            snprintf(vars + strlen(vars), sizeof vars - strlen(vars), "%s\"%s\": \"%s\"",
                     strlen(vars) > 1 ? ", " : "", roles[k][0], t);
        }
        strcat(vars, "}");
        st = tm_chat_template_create(src, strlen(src), &tpl, &err);
        if (st == TM_OK) st = tm_chat_template_render(tpl, messages, vars, 1, &rendered, NULL, &err);
        if (st != TM_OK) goto fail;
        text = rendered;
        add_special = 0;
    }
    tm_encode_options eo = tm_encode_options_default();
    eo.add_special_tokens = add_special;
    st = tm_tokenizer_encode(tok, text, strlen(text), NULL, 0, &eo, &e, &err);
    if (st == TM_OK) st = tm_generator_create(dec, &cfg, tok, &g, &err);
    if (st != TM_OK) goto fail;
    const int32_t *ids = tm_encoding_ids(e);
    size_t n = tm_encoding_n(e);
    if (enc) st = encode_source(enc, g, ids, n, &err);
    else st = tm_generator_append(g, ids, n, &err);
    double t0 = now_ms();
    stream_state ss = {0, json};
    if (st == TM_OK) st = tm_generator_generate(g, print_text, &ss, &err);
    double t_end = now_ms(), ms = t_end - t0;
    if (st != TM_OK) goto fail;
    const int32_t *out;
    size_t n_out = 0;
    tm_generator_sequence(g, 0, &out, &n_out, NULL);
    size_t n_new = n_out - tm_generator_prompt_length(g);
    if (json) {
        /* Times as bench/tjs_pipeline.mjs gives transformers.js's: load (tokenizer, config,
         * models) apart; the call (template, encoding, plans, prefill, every step) whole. */
        char *decoded = NULL;
        size_t dlen = 0;
        st = tm_tokenizer_decode(tok, out + tm_generator_prompt_length(g), n_new, 1, -1, &decoded,
                                 &dlen, &err);
        if (st != TM_OK) goto fail;
        printf("{\"load_ms\": %.3f, \"total_ms\": %.3f, \"prompt_tokens\": %zu, \"new_tokens\": %zu, "
               "\"tokens_per_s\": %.2f, \"peak_rss_mb\": %.1f, \"text\": ", t_loaded - t_start,
               t_end - t_loaded, n, n_new, n_new ? n_new / ((t_end - t_loaded) / 1e3) : 0.0,
               tm__peak_rss_mb());
        print_json_string(decoded, dlen);
        printf("}\n");
        free(decoded);
        rc = 0;
        goto done;
    }
    printf("\n");
    fflush(stdout);
    fprintf(stderr, "%zu prompt tokens, %zu new in %.1f ms (%.1f tokens/s)%s\n", n, n_new, ms,
            n_new ? n_new / (ms / 1e3) : 0.0, cfg.num_beams > 1 ? ", beam search" :
            cfg.do_sample ? ", sampled" : ", greedy");
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "transmuter: generate: %s\n", err.message[0] ? err.message : tm_status_name(st));
done:
    tm_generator_free(g);
    tm_encoding_free(e);
    tm_chat_template_free(tpl);
    free(rendered);
    free(messages);
    tm_model_free(dec);
    tm_model_free(enc);
    tm_tokenizer_free(tok);
    tm_generation_config_clear(&cfg);
    free(config);
    free(gen_config);
    return rc;
}

int tm__cmd_generate(int argc, char **argv) {
    /* A folder is a repository: text generation; a file, the raw-model loop. */
    for (int i = 0; i < argc; i++) {
        if (argv[i][0] == '-') {
            /* skip the value of the options that take one */
            if (i + 1 < argc && strcmp(argv[i], "--eager") && strcmp(argv[i], "--json") &&
                strcmp(argv[i], "--copy-cache") && strcmp(argv[i], "--do-sample") &&
                strncmp(argv[i], "--dequantize", 12) && strcmp(argv[i], "--help") && strcmp(argv[i], "-h"))
                i++;
            continue;
        }
        if (is_dir(argv[i])) return generate_repo(argc, argv);
        break;
    }
    return generate_ids(argc, argv);
}
