/* `transmuter pipeline TASK REPO ...`, and its shortcuts `embed` and `classify`: a task of
 * tm_pipeline_* on a repository, the result printed as transformers.js's JSON (--json, and
 * always with --call) or as readable lines. Not the library: tasks live in src/pipelines. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../include/transmuter.h"
#include "../src/hub/json.h"

int tm__cmd_pipeline(int argc, char **argv);
int tm__cmd_embed(int argc, char **argv);
int tm__cmd_classify(int argc, char **argv);

/* A growing string. */
typedef struct text {
    char *s;
    size_t n, cap;
} text;

static void add(text *t, const char *s, size_t n) {
    if (t->n + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        while (cap < t->n + n + 1) cap *= 2;
        char *x = realloc(t->s, cap);
        if (!x) {
            fprintf(stderr, "transmuter: out of memory\n");
            exit(1);
        }
        t->s = x, t->cap = cap;
    }
    memcpy(t->s + t->n, s, n);
    t->n += n;
    t->s[t->n] = '\0';
}

static void adds(text *t, const char *s) { add(t, s, strlen(s)); }

static void add_string(text *t, const char *s, size_t n) {
    adds(t, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char u[8];
        if (c == '"' || c == '\\') {
            u[0] = '\\', u[1] = (char)c;
            add(t, u, 2);
        } else if (c < 0x20) {
            snprintf(u, sizeof u, "\\u%04x", c);
            adds(t, u);
        } else {
            add(t, s + i, 1);
        }
    }
    adds(t, "\"");
}

/* A parsed value written back as JSON (to hand a part of --call's object to the library). */
static void add_json(text *t, const tm_json *v) {
    char num[40];
    switch (v->type) {
    case TM_JSON_NULL: adds(t, "null"); break;
    case TM_JSON_BOOL: adds(t, v->number ? "true" : "false"); break;
    case TM_JSON_NUMBER:
        snprintf(num, sizeof num, "%.17g", v->number);
        adds(t, num);
        break;
    case TM_JSON_STRING: add_string(t, v->string, v->len); break;
    case TM_JSON_ARRAY:
    case TM_JSON_OBJECT:
        adds(t, v->type == TM_JSON_ARRAY ? "[" : "{");
        for (int i = 0; i < v->n; i++) {
            if (i) adds(t, ",");
            if (v->type == TM_JSON_OBJECT) {
                add_string(t, v->keys[i], strlen(v->keys[i]));
                adds(t, ":");
            }
            add_json(t, &v->items[i]);
        }
        adds(t, v->type == TM_JSON_ARRAY ? "]" : "}");
        break;
    }
}

/* Readable output: a tensor as one line per vector; lists of objects as one line each
 * ("key: value" pairs), a blank line between the lists of a batch. */
static void print_readable(const tm_json *v, int depth) {
    const tm_json *type = tm_json_get(v, "_type");
    if (type && type->type == TM_JSON_STRING && !strcmp(type->string, "Tensor")) {
        const tm_json *dims = tm_json_get(v, "dims"), *data = tm_json_get(v, "data");
        int last = dims && dims->n ? (int)dims->items[dims->n - 1].number : 1;
        printf("# tensor [");
        for (int i = 0; dims && i < dims->n; i++) printf("%s%g", i ? ", " : "", dims->items[i].number);
        printf("]\n");
        for (int i = 0; data && i < data->n; i++)
            printf("%s%.6g%s", i % last ? " " : "", data->items[i].number, (i + 1) % last ? "" : "\n");
        return;
    }
    if (type && type->type == TM_JSON_STRING && !strcmp(type->string, "RawImage")) {
        /* depth-estimation's uint8 image: one line per row of pixels */
        const tm_json *w = tm_json_get(v, "width"), *h = tm_json_get(v, "height"), *c = tm_json_get(v, "channels");
        const tm_json *data = tm_json_get(v, "data");
        int last = w && c ? (int)(w->number * c->number) : 1;
        printf("# image %gx%g, %g channel(s)\n", w ? w->number : 0, h ? h->number : 0, c ? c->number : 0);
        for (int i = 0; data && last > 0 && i < data->n; i++)
            printf("%s%g%s", i % last ? " " : "", data->items[i].number, (i + 1) % last ? "" : "\n");
        return;
    }
    if (v->type == TM_JSON_ARRAY) {
        for (int i = 0; i < v->n; i++) {
            if (i && v->items[i].type == TM_JSON_ARRAY) printf("\n");
            print_readable(&v->items[i], depth + 1);
        }
        return;
    }
    if (v->type == TM_JSON_OBJECT) {
        int line_open = 1;
        for (int i = 0; i < v->n; i++) {
            const tm_json *x = &v->items[i];
            if (x->type == TM_JSON_ARRAY && x->n && x->items[0].type == TM_JSON_OBJECT) {
                /* speech recognition's chunks: one indented line each */
                printf("%s%s:\n", i ? "  " : "", v->keys[i]);
                for (int j = 0; j < x->n; j++) {
                    printf("    ");
                    print_readable(&x->items[j], depth + 1);
                }
                line_open = 0;
                continue;
            }
            printf("%s%s: ", i && line_open ? "  " : "", v->keys[i]);
            line_open = 1;
            if (x->type == TM_JSON_STRING) printf("%s", x->string);
            else if (x->type == TM_JSON_NUMBER) printf("%.6g", x->number);
            else if (x->type == TM_JSON_OBJECT && tm_json_get(x, "_type")) {
                printf("\n");
                print_readable(x, depth + 1);
                continue;
            } else if (x->type == TM_JSON_OBJECT) {
                /* object-detection's box: {xmin: 151, ymin: 333, ...} on the same line */
                printf("{");
                for (int j = 0; j < x->n; j++)
                    if (x->items[j].type == TM_JSON_NUMBER) printf("%s%s: %.6g", j ? ", " : "", x->keys[j], x->items[j].number);
                printf("}");
            } else if (x->type == TM_JSON_ARRAY) {
                for (int j = 0; j < x->n; j++) {
                    if (x->items[j].type == TM_JSON_STRING) printf("%s%s", j ? ", " : "", x->items[j].string);
                    else if (x->items[j].type == TM_JSON_NULL) printf("%snull", j ? ", " : "");
                    else printf("%s%.6g", j ? ", " : "", x->items[j].number);
                }
            }
        }
        if (line_open) printf("\n");
        return;
    }
    if (v->type == TM_JSON_STRING) printf("%s\n", v->string);
}

static int print_result(const char *json, int as_json) {
    if (as_json) {
        printf("%s\n", json);
        return 0;
    }
    tm_json *v = tm_json_parse(json, strlen(json));
    if (!v) {
        printf("%s\n", json);
        return 0;
    }
    print_readable(v, 0);
    tm_json_free(v);
    return 0;
}

static int fail(const tm_error *err, tm_status st, int as_json) {
    const char *msg = err->message[0] ? err->message : tm_status_name(st);
    if (as_json) {
        text t = {0};
        adds(&t, "{\"error\":");
        add_string(&t, msg, strlen(msg));
        adds(&t, "}");
        printf("%s\n", t.s);
        free(t.s);
    } else {
        fprintf(stderr, "transmuter: %s\n", msg);
    }
    return 1;
}

/* Creates the pipeline and runs one call; inputs/options/load are JSON texts. */
static int run(const char *task, const char *repo, const char *inputs, const char *options,
               const char *load, int as_json) {
    tm_pipeline *p = NULL;
    tm_error err;
    tm_status st = tm_pipeline_create(task, repo, load, &p, &err);
    if (st) return fail(&err, st, as_json);
    char *result = NULL;
    st = tm_pipeline_call(p, inputs, options, &result, &err);
    int rc = st ? fail(&err, st, as_json) : print_result(result, as_json);
    free(result);
    tm_pipeline_free(p);
    return rc;
}

/* --call '{"inputs": [...], "options": {...}, "load": {...}}' (other keys ignored). */
static int run_call(const char *task, const char *repo, const char *call, const char *load_arg) {
    tm_json *c = tm_json_parse(call, strlen(call));
    if (!c || c->type != TM_JSON_OBJECT || !tm_json_get(c, "inputs")) {
        tm_json_free(c);
        tm_error err = {.code = TM_ERR_PARSE};
        snprintf(err.message, sizeof err.message, "--call: not a JSON object with \"inputs\"");
        return fail(&err, TM_ERR_PARSE, 1);
    }
    text inputs = {0}, options = {0}, load = {0};
    add_json(&inputs, tm_json_get(c, "inputs"));
    if (tm_json_get(c, "options")) add_json(&options, tm_json_get(c, "options"));
    if (tm_json_get(c, "load")) add_json(&load, tm_json_get(c, "load"));
    int rc = run(task, repo, inputs.s, options.s, load_arg ? load_arg : load.s, 1);
    free(inputs.s);
    free(options.s);
    free(load.s);
    tm_json_free(c);
    return rc;
}

static void pipeline_usage(FILE *f) {
    fprintf(f,
            "usage: transmuter pipeline TASK REPO INPUT... [--json] [--dtype D] [--options JSON]\n"
            "                 [--load JSON] [--threads N]\n"
            "       transmuter pipeline TASK REPO --call JSON\n"
            "Runs a task as transformers.js's pipeline() does, on REPO: a folder or\n"
            "hf://OWNER/REPO[@REVISION] (config.json, tokenizer.json, onnx/model*.onnx;\n"
            "text2text-generation, summarization, translation and Whisper speech recognition:\n"
            "onnx/encoder_model*.onnx and onnx/decoder_model_merged*.onnx).\n"
            "TASK: %s.\n"
            "INPUT: texts (several make one batch); zero-shot-classification: TEXT LABEL...;\n"
            "question-answering: QUESTION CONTEXT; a chat for text-generation goes in --call\n"
            "(e.g. {\"inputs\": [[{\"role\": \"user\", \"content\": \"Hi\"}]]}); audio-classification\n"
            "and automatic-speech-recognition: sound files (WAV, FLAC, OGG, ...) or .npy float32\n"
            "waveforms (preprocessor_config.json instead of a tokenizer for audio-classification;\n"
            "Whisper: options language, task, return_timestamps, chunk_length_s, stride_length_s);\n"
            "image-classification, object-detection and depth-estimation: image files (PNG, JPEG,\n"
            "WebP; object-detection one per call); zero-shot-image-classification: IMAGE LABEL...\n"
            "(options hypothesis_template; top_k, threshold, percentage as transformers.js).\n"
            "--dtype fp32|fp16|q8|int8|uint8|q4|q4f16|bnb4 picks onnx/model{,_fp16,_quantized,...}.onnx;\n"
            "--options JSON the call's options (e.g. '{\"top_k\":null}'), --load JSON the load\n"
            "options (dtype, model_file_name, subfolder, threads).\n"
            "--json prints transformers.js's JSON (an error as {\"error\": message}); else\n"
            "readable lines. --call JSON: {\"inputs\": [...], \"options\": {...}, \"load\": {...}}, a\n"
            "line of tests/data/pipelines/*.cases.jsonl; prints JSON.\n",
            tm_pipeline_tasks());
}

typedef struct args {
    const char *dtype, *options, *load, *call;
    int threads, json;
    int n;                        /* positional arguments */
    const char **pos;
} args;

/* Parses the shared flags; extra handles a command's own (returns 1 when it took one). */
static int parse(int argc, char **argv, args *a, void (*usage)(FILE *)) {
    memset(a, 0, sizeof *a);
    a->pos = calloc((size_t)argc + 1, sizeof *a->pos);
    if (!a->pos) return 1;
    for (int i = 0; i < argc; i++) {
        const char *s = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(s, "--help") || !strcmp(s, "-h")) {
            usage(stdout);
            free(a->pos);
            exit(0);
        } else if (!strcmp(s, "--json")) a->json = 1;
        else if (!strcmp(s, "--dtype") && more) a->dtype = argv[++i];
        else if (!strcmp(s, "--options") && more) a->options = argv[++i];
        else if (!strcmp(s, "--load") && more) a->load = argv[++i];
        else if (!strcmp(s, "--call") && more) a->call = argv[++i];
        else if (!strcmp(s, "--threads") && more) a->threads = atoi(argv[++i]);
        else if (!strcmp(s, "--top-k") && more) {
            /* classify's --top-k N, kept as an option */
            static char opt[64];
            snprintf(opt, sizeof opt, "{\"top_k\":%s}", argv[++i]);
            a->options = opt;
        } else if (s[0] == '-' && s[1] == '-') {
            fprintf(stderr, "transmuter: unknown option %s\n", s);
            usage(stderr);
            free(a->pos);
            return 2;
        } else a->pos[a->n++] = s;
    }
    return 0;
}

/* The load options: --load as given, else from --dtype and --threads. */
static void load_json(const args *a, text *t) {
    if (a->load) {
        adds(t, a->load);
        return;
    }
    adds(t, "{");
    if (a->dtype) {
        adds(t, "\"dtype\":");
        add_string(t, a->dtype, strlen(a->dtype));
    }
    if (a->threads > 0) {
        char n[48];
        snprintf(n, sizeof n, "%s\"threads\":%d", a->dtype ? "," : "", a->threads);
        adds(t, n);
    }
    adds(t, "}");
}

/* Positional texts as the call's arguments for task. */
static void inputs_json(const char *task, const char *const *pos, int n, text *t) {
    adds(t, "[");
    if (!strcmp(task, "zero-shot-classification") || !strcmp(task, "zero-shot-image-classification")) {
        add_string(t, pos[0], strlen(pos[0]));
        adds(t, ",[");
        for (int i = 1; i < n; i++) {
            if (i > 1) adds(t, ",");
            add_string(t, pos[i], strlen(pos[i]));
        }
        adds(t, "]");
    } else if (!strcmp(task, "question-answering")) {
        for (int i = 0; i < n && i < 2; i++) {
            if (i) adds(t, ",");
            add_string(t, pos[i], strlen(pos[i]));
        }
    } else if (n == 1) {
        add_string(t, pos[0], strlen(pos[0]));
    } else {
        adds(t, "[");
        for (int i = 0; i < n; i++) {
            if (i) adds(t, ",");
            add_string(t, pos[i], strlen(pos[i]));
        }
        adds(t, "]");
    }
    adds(t, "]");
}

static int run_task(const char *task, const char *repo, args *a, int first, void (*usage)(FILE *)) {
    int n = a->n - first;
    const char *const *pos = a->pos + first;
    int need = !strcmp(task, "zero-shot-classification") || !strcmp(task, "zero-shot-image-classification") ||
                       !strcmp(task, "question-answering")
                   ? 2
                   : 1;
    if (n < need || (!strcmp(task, "question-answering") && n != 2)) {
        usage(stderr);
        return 2;
    }
    text in = {0}, load = {0};
    inputs_json(task, pos, n, &in);
    load_json(a, &load);
    int rc = run(task, repo, in.s, a->options, load.s, a->json);
    free(in.s);
    free(load.s);
    return rc;
}

int tm__cmd_pipeline(int argc, char **argv) {
    args a;
    int rc = parse(argc, argv, &a, pipeline_usage);
    if (rc) return rc;
    if (a.n < 2 || (a.call && a.n != 2) || (!a.call && a.n < 3)) {
        pipeline_usage(stderr);
        free(a.pos);
        return 2;
    }
    if (a.call) rc = run_call(a.pos[0], a.pos[1], a.call, a.load);
    else rc = run_task(a.pos[0], a.pos[1], &a, 2, pipeline_usage);
    free(a.pos);
    return rc;
}

static void embed_usage(FILE *f) {
    fprintf(f, "usage: transmuter embed REPO TEXT... [--json] [--dtype D] [--options JSON]\n"
               "Sentence embeddings (feature-extraction) of the texts, one batch: pooled and\n"
               "normalized as the repo's sentence-transformers modules say (modules.json,\n"
               "1_Pooling/config.json, a Normalize module), mean pooling and normalized without\n"
               "them; --options '{\"pooling\":\"cls\",\"normalize\":false}' overrides. One vector a\n"
               "line, or --json: transformers.js's tensor JSON.\n");
}

int tm__cmd_embed(int argc, char **argv) {
    args a;
    int rc = parse(argc, argv, &a, embed_usage);
    if (rc) return rc;
    if (a.n < 2) {
        embed_usage(stderr);
        free(a.pos);
        return 2;
    }
    if (!a.options) a.options = "{\"pooling\":\"auto\"}";
    rc = run_task("feature-extraction", a.pos[0], &a, 1, embed_usage);
    free(a.pos);
    return rc;
}

static void classify_usage(FILE *f) {
    fprintf(f, "usage: transmuter classify REPO TEXT... [--top-k N|null] [--json] [--dtype D]\n"
               "Labels of the texts (text-classification: softmax, or sigmoid for multi-label\n"
               "models); --top-k the best N (default 1; null: all).\n");
}

int tm__cmd_classify(int argc, char **argv) {
    args a;
    int rc = parse(argc, argv, &a, classify_usage);
    if (rc) return rc;
    if (a.n < 2) {
        classify_usage(stderr);
        free(a.pos);
        return 2;
    }
    rc = run_task("text-classification", a.pos[0], &a, 1, classify_usage);
    free(a.pos);
    return rc;
}
