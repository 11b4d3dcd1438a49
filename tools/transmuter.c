/* The transmuter command: `info` describes a model, `run` runs it on .npy/.pb inputs,
 * `test-onnx` runs cases in the ONNX backend-test layout. A thin layer over the public
 * API plus the runtime's internal sequence-aware entry points (for test-onnx). */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "transmuter.h"
#include "core/tensor.h"
#include "io/names.h"
#include "io/npy.h"
#include "onnx/model.h"
#include "runtime/runtime.h"
#include "hub/hub.h"

int tm__cmd_generate(int argc, char **argv);   /* tools/generate.c */
int tm__cmd_finetune(int argc, char **argv);   /* tools/finetune.c */
int tm__cmd_stream(int argc, char **argv);     /* tools/cmd_stream.c */
int tm__cmd_tokenize(int argc, char **argv);   /* tools/cmd_tokenize.c */
int tm__cmd_detokenize(int argc, char **argv); /* tools/cmd_tokenize.c */
int tm__cmd_chat_template(int argc, char **argv);   /* tools/cmd_chat_template.c */
int tm__cmd_pipeline(int argc, char **argv);   /* tools/cmd_pipeline.c */
int tm__cmd_embed(int argc, char **argv);      /* tools/cmd_pipeline.c */
int tm__cmd_classify(int argc, char **argv);   /* tools/cmd_pipeline.c */
int tm__cmd_audio_features(int argc, char **argv);   /* tools/cmd_audio.c */
int tm__cmd_image_features(int argc, char **argv);   /* tools/cmd_image.c */
int tm__cmd_serve(int argc, char **argv);      /* tools/cmd_serve.c */
int tm__cmd_vad(int argc, char **argv);        /* tools/cmd_vad.c */
int tm__cmd_ocr(int argc, char **argv);        /* tools/cmd_ocr.c */

static void usage(FILE *f) {
    fprintf(f,
            "usage:\n"
            "  transmuter info MODEL [--quiet]\n"
            "  transmuter run MODEL --inputs DIR --out DIR [--eager] [--static NAME ...]\n"
            "                 [--quiet]\n"
            "                 [--threads N] [--compute-type f32] [--dump DIR]\n"
            "                 [--dequantize-nbits[-once]] [--[no-]nbits-int8]\n"
            "  transmuter test-onnx DIR... [--mode eager|plan|both] [--expected-failures FILE]\n"
            "                 [--quiet]\n"
            "  transmuter compare OUT_DIR REF_DIR [--rtol R] [--atol A]\n"
            "  transmuter bench MODEL --inputs DIR [--static NAME ...] [--threads N]\n"
            "                 [--repeat N] [--warmup W] [--out DIR] [--dequantize-nbits[-once]]\n"
            "                 [--[no-]nbits-int8]\n"
            "                 [--serve]\n"
            "                 (one JSON line; --serve: then one per 'run N' line on stdin)\n"
            "  transmuter ls hf://OWNER/REPO[@REVISION]   (.onnx files: sizes, variants)\n"
            "  transmuter generate MODEL --prompt-ids 1,2,3 --max-new N [--eager] [--threads N]\n"
            "                 [--copy-cache] [--json] [--dequantize-nbits[-once]] [--[no-]nbits-int8]\n"
            "                 (greedy decoding with a decoder export; ids to stdout)\n"
            "  transmuter generate REPO_FOLDER --prompt TEXT | --chat MESSAGES.json [--max-new N]\n"
            "                 [--do-sample] [--temperature T] [--top-k K] [--top-p P] [--seed S]\n"
            "                 [--num-beams N] [--repetition-penalty R] [--dtype q4]\n"
            "                 (text streamed out: tokenizer, chat template, sampling, beams)\n"
            "  transmuter stream MODEL --requests FILE.jsonl [--threads N] [--json]\n"
            "                 (an encoder over requests of changing shapes, through the plan cache)\n"
            "  transmuter finetune MODEL --data FILE.jsonl|DIR --out OUT.onnx [--steps N]\n"
            "                 [--batch-size B] [--lr LR] ...   (see transmuter finetune --help)\n"
            "  transmuter tokenize TOKENIZER TEXT [--pair TEXT] [--no-special] [--json]\n"
            "  transmuter tokenize TOKENIZER --jsonl FILE|-   (see transmuter tokenize --help)\n"
            "  transmuter detokenize TOKENIZER IDS [--skip-special]\n"
            "  transmuter chat-template TOKENIZER MESSAGES.json [--add-generation-prompt]\n"
            "                 [--vars JSON] [--template NAME] [--ids]\n"
            "  transmuter pipeline TASK REPO INPUT... [--json] [--dtype q8]   (see --help)\n"
            "  transmuter pipeline TASK REPO --call JSON   (transformers.js's JSON out)\n"
            "  transmuter embed REPO TEXT...      (sentence embeddings)\n"
            "  transmuter classify REPO TEXT...   (text-classification labels)\n"
            "  transmuter audio-features AUDIO --out DIR [--processor CONFIG]   (decoded\n"
            "                 waveform and feature extractor outputs as .npy; see --help)\n"
            "  transmuter image-features IMAGE --out DIR [--processor CONFIG]   (decoded\n"
            "                 image and image processor outputs as .npy; see --help)\n"
            "  transmuter serve MODEL... [--host H] [--port N] [--api-key K]   (HTTP: OpenAI,\n"
            "                 TEI and Open Inference Protocol routes; see --help)\n"
            "  transmuter vad AUDIO... [--model FILE] [--threshold T] [--min-speech-ms N]\n"
            "                 [--min-silence-ms N] [--speech-pad-ms N] [--json]   (speech\n"
            "                 segments by Silero VAD v5; see --help)\n"
            "  transmuter ocr IMAGE... [--models DIR] [--json]   (the text of images: PaddleOCR's\n"
            "                 PP-OCRv4 models, see --help)\n"
            "MODEL is a file or hf://OWNER/REPO/PATH[@REVISION], fetched into the Hugging Face\n"
            "cache with a progress bar (--quiet: none) and used from there afterwards.\n"
            "Inputs are read from DIR/NAME.npy or DIR/NAME.pb, outputs written as NAME.npy;\n"
            "in file names every byte of NAME outside [A-Za-z0-9._-] is written %%XX.\n");
}

static int report(const char *what, tm_status st, const tm_error *err) {
    const char *msg = err->message[0] ? err->message : tm_status_name(st);
    /* Loader messages already start with the file they are about. */
    if (!strncmp(msg, what, strlen(what))) fprintf(stderr, "transmuter: %s\n", msg);
    else fprintf(stderr, "transmuter: %s: %s\n", what, msg);
    return 1;
}

static int read_file(const char *path, char **data, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return -1;
    }
    long n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) {
        fclose(f);
        return -1;
    }
    *data = malloc((size_t)n + 1);
    if (!*data || fread(*data, 1, (size_t)n, f) != (size_t)n) {
        free(*data);
        fclose(f);
        return -1;
    }
    fclose(f);
    *size = (size_t)n;
    return 0;
}

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static int dir_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* ---- info -------------------------------------------------------------------------- */

static void print_desc(const tm_value_desc *d) {
    printf("  %s: %s", d->name, tm_dtype_name(d->dtype));
    if (d->rank < 0) {
        printf(" (shape unknown)\n");
        return;
    }
    printf(" [");
    for (int i = 0; i < d->rank; i++) {
        if (i) printf(", ");
        if (d->dims[i] >= 0) printf("%lld", (long long)d->dims[i]);
        else printf("%s", d->dim_params && d->dim_params[i] ? d->dim_params[i] : "?");
    }
    printf("]\n");
}

static int cmd_info(int argc, char **argv) {
    if (argc < 1) {
        usage(stderr);
        return 2;
    }
    tm_error err = {0};
    tm_model *m = NULL;
    tm_status st = tm_model_load(argv[0], NULL, &m, &err);
    if (st != TM_OK) return report(argv[0], st, &err);
    printf("model: %s\n", argv[0]);
    printf("inputs:\n");
    for (int i = 0; i < tm_model_n_inputs(m); i++) {
        tm_value_desc d;
        tm_model_input(m, i, &d);
        print_desc(&d);
    }
    printf("outputs:\n");
    for (int i = 0; i < tm_model_n_outputs(m); i++) {
        tm_value_desc d;
        tm_model_output(m, i, &d);
        print_desc(&d);
    }
    printf("opsets:\n");
    for (int i = 0; i < tm_model_n_opsets(m); i++) {
        const char *dom;
        int64_t v;
        tm_model_opset(m, i, &dom, &v);
        printf("  %s %lld\n", dom[0] ? dom : "ai.onnx", (long long)v);
    }
    printf("ops:\n");
    for (int i = 0; i < tm_model_n_op_types(m); i++) {
        const char *dom, *op;
        int count;
        tm_model_op_type(m, i, &dom, &op, &count);
        printf("  %5d  %s%s%s\n", count, dom[0] ? dom : "", dom[0] ? ":" : "", op);
    }
    const char *missing = tm_model_missing_ops(m);
    printf("missing ops: %s\n", missing ? missing : "none");
    tm_model_free(m);
    return 0;
}

/* ---- run --------------------------------------------------------------------------- */

static tm_status read_tensor_file(const char *path, tm_tensor **out, tm_error *err) {
    size_t n = strlen(path);
    if (n > 4 && !strcmp(path + n - 4, ".npy")) return tm_npy_read(path, out, err);
    char *data = NULL;
    size_t size = 0;
    if (read_file(path, &data, &size))
        return tm__fail(err, TM_ERR_IO, "%s: %s", path, strerror(errno));
    tm_status st = (tm_status)tm_onnx_parse_tensor(data, size, out, err);
    free(data);
    return st;
}

static tm_status find_input_file(const char *dir, const char *name, char *path, size_t cap) {
    char *enc = tm_name_encode(name);
    if (!enc) return TM_ERR_NO_MEMORY;
    snprintf(path, cap, "%s/%s.npy", dir, enc);
    if (!file_exists(path)) snprintf(path, cap, "%s/%s.pb", dir, enc);
    free(enc);
    return file_exists(path) ? TM_OK : TM_ERR_NOT_FOUND;
}

/* --dump: every node's tensor outputs written as NAME.npy while running eagerly. */
static int dump_node(void *user, const char *node, const char *op, int n,
                     const char *const *names, const tm_tensor *const *ts) {
    (void)node;
    (void)op;
    const char *dir = user;
    for (int i = 0; i < n; i++) {
        if (!ts[i] || !names[i][0]) continue;
        char *enc = tm_name_encode(names[i]);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.npy", dir, enc ? enc : "value");
        free(enc);
        tm_error err;
        if (tm_npy_write(path, ts[i], &err) != TM_OK) {
            fprintf(stderr, "transmuter: %s\n", err.message);
            return 1;
        }
    }
    return 0;
}

static int cmd_run(int argc, char **argv) {
    const char *model_path = NULL, *in_dir = NULL, *out_dir = NULL, *dump_dir = NULL;
    int eager = 0, threads = 0, n_static = 0;
    const char *static_names[64];
    tm_load_options lo;
    tm_load_options_default(&lo);
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--inputs") && i + 1 < argc) in_dir = argv[++i];
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out_dir = argv[++i];
        else if (!strcmp(argv[i], "--eager")) eager = 1;
        else if (!strcmp(argv[i], "--dump") && i + 1 < argc) {
            dump_dir = argv[++i];
            eager = 1;
        }
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dequantize-nbits")) lo.dequantize_nbits = 1;
        else if (!strcmp(argv[i], "--nbits-int8")) lo.nbits_int8 = 1;
        else if (!strcmp(argv[i], "--no-nbits-int8")) lo.nbits_int8 = -1;
        else if (!strcmp(argv[i], "--dequantize-nbits-once")) lo.dequantize_nbits = 2;
        else if (!strcmp(argv[i], "--compute-type") && i + 1 < argc) {
            const char *t = argv[++i];
            if (!strcmp(t, "f32") || !strcmp(t, "float32")) lo.compute_type = TM_FLOAT;
            else {
                fprintf(stderr, "transmuter: unknown compute type '%s' (use f32)\n", t);
                return 2;
            }
        } else if (!strcmp(argv[i], "--static") && i + 1 < argc) {
            if (n_static == 64) {
                fprintf(stderr, "transmuter: too many --static inputs\n");
                return 2;
            }
            static_names[n_static++] = argv[++i];
        } else if (argv[i][0] != '-' && !model_path) model_path = argv[i];
        else {
            fprintf(stderr, "transmuter: unknown argument '%s'\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }
    if (!model_path || !in_dir || !out_dir) {
        usage(stderr);
        return 2;
    }
    lo.threads = threads;
    tm_error err = {0};
    tm_model *m = NULL;
    tm_status st = tm_model_load(model_path, &lo, &m, &err);
    if (st != TM_OK) return report(model_path, st, &err);
    int n_in = tm_model_n_inputs(m), n_out = tm_model_n_outputs(m), rc = 0, n_given = 0;
    const char **names = calloc((size_t)n_in + 1, sizeof *names);
    tm_tensor **inputs = calloc((size_t)n_in + 1, sizeof *inputs);
    tm_tensor **outputs = calloc((size_t)n_out + 1, sizeof *outputs);
    const tm_tensor *statics[64];
    if (!names || !inputs || !outputs) {
        fprintf(stderr, "transmuter: out of memory\n");
        rc = 1;
        goto done;
    }
    for (int i = 0; i < n_in; i++) {
        tm_value_desc d;
        tm_model_input(m, i, &d);
        char path[4096];
        if (find_input_file(in_dir, d.name, path, sizeof path) != TM_OK) {
            fprintf(stderr, "transmuter: missing input '%s': no %s/NAME.npy or .pb for it\n",
                    d.name, in_dir);
            rc = 1;
            goto done;
        }
        st = read_tensor_file(path, &inputs[n_given], &err);
        if (st != TM_OK) {
            rc = report(path, st, &err);
            goto done;
        }
        names[n_given++] = d.name;
    }
    for (int s = 0; s < n_static; s++) {
        statics[s] = NULL;
        for (int i = 0; i < n_given; i++)
            if (!strcmp(names[i], static_names[s])) statics[s] = inputs[i];
        if (!statics[s]) {
            fprintf(stderr, "transmuter: --static '%s' is not an input of the model\n",
                    static_names[s]);
            rc = 1;
            goto done;
        }
    }
    if (eager) {
        tm_run_options ro;
        tm_run_options_default(&ro);
        if (dump_dir) {
            if (!dir_exists(dump_dir) && mkdir(dump_dir, 0777) != 0) {
                fprintf(stderr, "transmuter: cannot create %s: %s\n", dump_dir, strerror(errno));
                rc = 1;
                goto done;
            }
            ro.on_node = dump_node;
            ro.user = (void *)dump_dir;
        }
        st = tm_run_eager(m, n_given, names, (const tm_tensor *const *)inputs, outputs, &ro, &err);
    } else {
        tm_plan_options po;
        tm_plan_options_default(&po);
        po.n_static = n_static;
        po.static_names = static_names;
        po.static_values = statics;
        tm_plan *plan = NULL;
        tm_session *sess = NULL;
        st = tm_plan_create(m, n_given, names, (const tm_tensor *const *)inputs, &po, &plan, &err);
        if (st == TM_OK) st = tm_session_create(plan, &sess, &err);
        if (st == TM_OK)
            st = tm_session_run(sess, n_given, names, (const tm_tensor *const *)inputs, outputs,
                                &err);
        tm_session_free(sess);
        tm_plan_free(plan);
    }
    if (st != TM_OK) {
        rc = report(model_path, st, &err);
        goto done;
    }
    if (!dir_exists(out_dir) && mkdir(out_dir, 0777) != 0) {
        fprintf(stderr, "transmuter: cannot create %s: %s\n", out_dir, strerror(errno));
        rc = 1;
        goto done;
    }
    for (int i = 0; i < n_out; i++) {
        tm_value_desc d;
        tm_model_output(m, i, &d);
        if (!outputs[i]) continue;
        char *enc = tm_name_encode(d.name);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s.npy", out_dir, enc ? enc : "output");
        free(enc);
        st = tm_npy_write(path, outputs[i], &err);
        if (st != TM_OK) {
            rc = report(path, st, &err);
            goto done;
        }
    }
done:
    for (int i = 0; inputs && i < n_in; i++) tm_tensor_free(inputs[i]);
    for (int i = 0; outputs && i < n_out; i++) tm_tensor_free(outputs[i]);
    free(names);
    free(inputs);
    free(outputs);
    tm_model_free(m);
    return rc;
}

/* ---- test-onnx --------------------------------------------------------------------- */

typedef struct tolerance {
    char *folder_case;    /* "folder/case" */
    double rtol, atol;
} tolerance;

typedef struct xfail {
    char *key;            /* "folder/case" or "folder/case:mode" */
    char *reason;         /* "random: ..." runs the case and checks dtypes and shapes only */
} xfail;

typedef struct runner {
    int eager, plan, quiet;
    tolerance *tols;
    int n_tols;
    xfail *xfails;
    int n_xfails;
    int passed, failed, skipped;
    char *manifests[16];
    int n_manifests;
} runner;

static void load_manifest(runner *r, const char *dir) {
    /* MANIFEST.tsv of the backend data: folder, case, ..., rtol, atol as the last two. */
    char path[4096];
    if (snprintf(path, sizeof path, "%s/MANIFEST.tsv", dir) >= (int)sizeof path) return;
    FILE *f = fopen(path, "r");
    if (!f) return;
    char line[8192];
    while (fgets(line, sizeof line, f)) {
        char *fields[32];
        int n = 0;
        for (char *p = line; n < 32;) {
            fields[n++] = p;
            char *tab = strchr(p, '\t');
            if (!tab) break;
            *tab = 0;
            p = tab + 1;
        }
        if (n < 4 || !strcmp(fields[0], "folder")) continue;
        char key[512];
        snprintf(key, sizeof key, "%s/%s", fields[0], fields[1]);
        tolerance *t = realloc(r->tols, (size_t)(r->n_tols + 1) * sizeof *t);
        if (!t) break;
        r->tols = t;
        t[r->n_tols].folder_case = strdup(key);
        t[r->n_tols].rtol = atof(fields[n - 2]);
        t[r->n_tols].atol = atof(fields[n - 1]);
        r->n_tols++;
    }
    fclose(f);
}

static void load_xfails(runner *r, const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "transmuter: cannot read %s: %s\n", path, strerror(errno));
        return;
    }
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0] || line[0] == '#') continue;
        char *sp = line + strcspn(line, " \t");
        char *reason = *sp ? sp + 1 : sp;
        *sp = 0;
        while (*reason == ' ' || *reason == '\t') reason++;
        xfail *x = realloc(r->xfails, (size_t)(r->n_xfails + 1) * sizeof *x);
        if (!x) break;
        r->xfails = x;
        x[r->n_xfails].key = strdup(line);
        x[r->n_xfails].reason = strdup(reason);
        r->n_xfails++;
    }
    fclose(f);
}

static const char *find_xfail(const runner *r, const char *key, const char *mode) {
    char km[600];
    /* A key too long for key:mode can only match as itself. */
    int with_mode = snprintf(km, sizeof km, "%s:%s", key, mode) < (int)sizeof km;
    for (int i = 0; i < r->n_xfails; i++)
        if (!strcmp(r->xfails[i].key, key) || (with_mode && !strcmp(r->xfails[i].key, km)))
            return r->xfails[i].reason;
    return NULL;
}

static void case_tolerance(const runner *r, const char *key, double *rtol, double *atol) {
    *rtol = 1e-3;
    *atol = 1e-7;
    for (int i = 0; i < r->n_tols; i++)
        if (!strcmp(r->tols[i].folder_case, key)) {
            *rtol = r->tols[i].rtol;
            *atol = r->tols[i].atol;
        }
}

static tm_status read_xval(const char *path, const tm_type *type, tm_xval *out, tm_error *err) {
    memset(out, 0, sizeof *out);
    char *data = NULL;
    size_t size = 0;
    if (read_file(path, &data, &size))
        return tm__fail(err, TM_ERR_IO, "%s: %s", path, strerror(errno));
    tm_status st;
    const tm_type *t = type;
    if (t->kind == TM_TYPE_SEQUENCE) {
        st = (tm_status)tm_onnx_parse_sequence(data, size, &out->seq, &out->n, err);
        out->kind = TM_X_SEQUENCE;
        out->seq_dtype = t->elem ? (tm_dtype)t->elem->elem_dtype : TM_UNDEFINED;
    } else if (t->kind == TM_TYPE_OPTIONAL) {
        int is_seq = 0;
        tm_tensor **vals = NULL;
        int n = 0;
        st = (tm_status)tm_onnx_parse_optional(data, size, &vals, &n, &is_seq, err);
        if (st == TM_OK) {
            if (is_seq) {
                out->kind = TM_X_SEQUENCE;
                out->seq = vals;
                out->n = n;
                out->seq_dtype = t->elem && t->elem->elem ? (tm_dtype)t->elem->elem->elem_dtype
                                                          : TM_UNDEFINED;
            } else if (n == 1) {
                out->kind = TM_X_TENSOR;
                out->t = vals[0];
                free(vals);
            } else {
                out->kind = TM_X_NONE;
                free(vals);
            }
        }
    } else {
        st = (tm_status)tm_onnx_parse_tensor(data, size, &out->t, err);
        out->kind = TM_X_TENSOR;
    }
    free(data);
    if (st != TM_OK) memset(out, 0, sizeof *out);
    return st;
}

static double elem_f64(const tm_tensor *t, size_t i) {
    if (tm_dtype_is_float(t->dtype)) return tm_load_f64(t->data, t->dtype, i);
    if (tm_dtype_is_unsigned_int(t->dtype)) return (double)tm_load_u64(t->data, t->dtype, i);
    return (double)tm_load_i64(t->data, t->dtype, i);
}

/* Set while a case whose values come from a random generator runs: only dtypes and shapes
 * are compared (its list entry says why). */
static int compare_shapes_only;

/* Compares got with expected; fills why on mismatch. */
static int compare_tensor(const tm_tensor *got, const tm_tensor *exp, double rtol, double atol,
                          char *why, size_t cap) {
    if (!got) {
        snprintf(why, cap, "no output produced");
        return 0;
    }
    if (got->dtype != exp->dtype) {
        snprintf(why, cap, "dtype %s, expected %s", tm_dtype_name(got->dtype),
                 tm_dtype_name(exp->dtype));
        return 0;
    }
    if (got->rank != exp->rank ||
        memcmp(got->dims, exp->dims, (size_t)got->rank * sizeof got->dims[0])) {
        char a[200] = "", b[200] = "";
        size_t la = 0, lb = 0;
        for (int i = 0; i < got->rank; i++) la += (size_t)snprintf(a + la, sizeof a - la, "%s%lld", i ? "," : "", (long long)got->dims[i]);
        for (int i = 0; i < exp->rank; i++) lb += (size_t)snprintf(b + lb, sizeof b - lb, "%s%lld", i ? "," : "", (long long)exp->dims[i]);
        snprintf(why, cap, "shape (%s), expected (%s)", a, b);
        return 0;
    }
    int64_t n = tm_numel(got->rank, got->dims);
    if (compare_shapes_only) return 1;
    for (int64_t i = 0; i < n; i++) {
        if (got->dtype == TM_STRING) {
            const char *x = ((char **)got->data)[i], *y = ((char **)exp->data)[i];
            if (strcmp(x ? x : "", y ? y : "")) {
                snprintf(why, cap, "index %lld: \"%s\", expected \"%s\"", (long long)i,
                         x ? x : "", y ? y : "");
                return 0;
            }
            continue;
        }
        if (got->dtype == TM_COMPLEX64 || got->dtype == TM_COMPLEX128) {
            snprintf(why, cap, "complex outputs are not compared");
            return 0;
        }
        double x = elem_f64(got, (size_t)i), y = elem_f64(exp, (size_t)i);
        if (tm_dtype_is_float(got->dtype)) {
            if (isnan(x) && isnan(y)) continue;
            if (isinf(y) && x == y) continue;
            if (fabs(x - y) <= atol + rtol * fabs(y)) continue;
        } else if (x == y) {
            continue;
        }
        snprintf(why, cap, "index %lld: %.9g, expected %.9g (rtol %g, atol %g)", (long long)i, x, y,
                 rtol, atol);
        return 0;
    }
    return 1;
}

static int compare_xval(const tm_xval *got, const tm_xval *exp, double rtol, double atol,
                        char *why, size_t cap) {
    if (exp->kind == TM_X_NONE) {
        if (got->kind != TM_X_NONE) {
            snprintf(why, cap, "expected an empty optional");
            return 0;
        }
        return 1;
    }
    if (exp->kind == TM_X_TENSOR) {
        if (got->kind != TM_X_TENSOR) {
            snprintf(why, cap, "expected a tensor, got %s", got->kind == TM_X_NONE ? "nothing" : "a sequence");
            return 0;
        }
        return compare_tensor(got->t, exp->t, rtol, atol, why, cap);
    }
    if (got->kind != TM_X_SEQUENCE) {
        snprintf(why, cap, "expected a sequence");
        return 0;
    }
    if (got->n != exp->n) {
        snprintf(why, cap, "sequence of %d, expected %d", got->n, exp->n);
        return 0;
    }
    for (int i = 0; i < got->n; i++) {
        char sub[400];
        if (!compare_tensor(got->seq[i], exp->seq[i], rtol, atol, sub, sizeof sub)) {
            snprintf(why, cap, "sequence element %d: %s", i, sub);
            return 0;
        }
    }
    return 1;
}

/* Runs one case (folder/case_dir) in one mode; returns 1 pass, 0 fail with why. */
static int run_case(const char *case_dir, int plan_mode, double rtol, double atol, char *why,
                    size_t cap) {
    char path[4096];
    snprintf(path, sizeof path, "%s/model.onnx", case_dir);
    tm_error err = {0};
    tm_model *m = NULL;
    tm_status st = tm_model_load(path, NULL, &m, &err);
    if (st != TM_OK) {
        snprintf(why, cap, "load: %s", err.message);
        return 0;
    }
    const tm_graph *g = m->onnx->graph;
    int ok = 1, n_in = 0, n_out = g->n_outputs;
    const char **names = calloc((size_t)g->n_inputs + 1, sizeof *names);
    tm_xval *in = calloc((size_t)g->n_inputs + 1, sizeof *in);
    tm_xval *exp = calloc((size_t)n_out + 1, sizeof *exp);
    tm_xval *got = calloc((size_t)n_out + 1, sizeof *got);
    tm_plan *plan = NULL;
    tm_session *sess = NULL;
    if (!names || !in || !exp || !got) {
        snprintf(why, cap, "out of memory");
        ok = 0;
        goto done;
    }
    for (int k = 0; k < m->n_in; k++) {
        int gi = m->in_graph_index[k];
        snprintf(path, sizeof path, "%s/test_data_set_0/input_%d.pb", case_dir, k);
        if (!file_exists(path)) break;
        st = read_xval(path, &g->inputs[gi].type, &in[n_in], &err);
        if (st != TM_OK) {
            if (snprintf(why, cap, "reading %s: %s", path, err.message) >= (int)cap)
                memcpy(why + cap - 4, "...", 4);   /* a long path: the message cut short */
            ok = 0;
            goto done;
        }
        names[n_in++] = g->inputs[gi].name;
    }
    for (int k = 0; k < n_out; k++) {
        snprintf(path, sizeof path, "%s/test_data_set_0/output_%d.pb", case_dir, k);
        st = read_xval(path, &g->outputs[k].type, &exp[k], &err);
        if (st != TM_OK) {
            if (snprintf(why, cap, "reading %s: %s", path, err.message) >= (int)cap)
                memcpy(why + cap - 4, "...", 4);   /* a long path: the message cut short */
            ok = 0;
            goto done;
        }
    }
    if (plan_mode) {
        st = tm__plan_create_x(m, n_in, names, in, NULL, &plan, &err);
        if (st == TM_OK) st = tm_session_create(plan, &sess, &err);
        if (st == TM_OK) st = tm__session_run_x(sess, n_in, names, in, got, &err);
    } else {
        st = tm__run_eager_x(m, n_in, names, in, got, NULL, &err);
    }
    if (st != TM_OK) {
        snprintf(why, cap, "%s", err.message);
        ok = 0;
        goto done;
    }
    for (int k = 0; k < n_out && ok; k++) {
        char sub[600];
        if (!compare_xval(&got[k], &exp[k], rtol, atol, sub, sizeof sub)) {
            snprintf(why, cap, "output %d ('%s'): %s", k, g->outputs[k].name, sub);
            ok = 0;
        }
    }
done:
    for (int k = 0; in && k < g->n_inputs; k++) tm_xval_clear(&in[k]);
    for (int k = 0; exp && k < n_out; k++) tm_xval_clear(&exp[k]);
    for (int k = 0; got && k < n_out; k++) tm_xval_clear(&got[k]);
    free(in);
    free(exp);
    free(got);
    free((void *)names);
    tm_session_free(sess);
    tm_plan_free(plan);
    tm_model_free(m);
    return ok;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

typedef struct folder_stats {
    char name[256];
    int pass[2], fail[2], skip[2];
} folder_stats;

static void run_one(runner *r, const char *case_dir, folder_stats *fs) {
    char key[600], folder[512];
    const char *slash = strrchr(case_dir, '/');
    const char *case_name = slash ? slash + 1 : case_dir;
    snprintf(folder, sizeof folder, "%.*s", slash ? (int)(slash - case_dir) : 0, case_dir);
    const char *fslash = strrchr(folder, '/');
    snprintf(key, sizeof key, "%s/%s", fslash ? fslash + 1 : folder, case_name);
    double rtol, atol;
    case_tolerance(r, key, &rtol, &atol);
    for (int mode = 0; mode < 2; mode++) {
        if ((mode == 0 && !r->eager) || (mode == 1 && !r->plan)) continue;
        const char *mname = mode ? "plan" : "eager";
        const char *xf = find_xfail(r, key, mname);
        if (xf && !strncmp(xf, "random:", 7)) {
            char why[1200];
            why[0] = 0;
            compare_shapes_only = 1;
            int ok = run_case(case_dir, mode, rtol, atol, why, sizeof why);
            compare_shapes_only = 0;
            if (ok) {
                r->passed++;
                fs->pass[mode]++;
                if (!r->quiet) printf("RANDOM %s [%s]: dtypes and shapes checked (%s)\n", key, mname, xf + 7);
            } else {
                r->failed++;
                fs->fail[mode]++;
                printf("FAIL %s [%s]: %s\n", key, mname, why);
            }
            continue;
        }
        if (xf) {
            r->skipped++;
            fs->skip[mode]++;
            if (!r->quiet) printf("SKIP %s [%s]: expected failure: %s\n", key, mname, xf);
            continue;
        }
        char why[1200];
        why[0] = 0;
        if (run_case(case_dir, mode, rtol, atol, why, sizeof why)) {
            r->passed++;
            fs->pass[mode]++;
        } else {
            r->failed++;
            fs->fail[mode]++;
            printf("FAIL %s [%s]: %s\n", key, mname, why);
        }
        fflush(stdout);
    }
}

static int is_case_dir(const char *dir) {
    char p[4096];
    snprintf(p, sizeof p, "%s/model.onnx", dir);
    return file_exists(p);
}

static void run_tree(runner *r, const char *dir, int depth) {
    if (is_case_dir(dir)) {
        folder_stats fs;
        memset(&fs, 0, sizeof fs);
        run_one(r, dir, &fs);
        return;
    }
    if (depth > 3) return;
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "transmuter: cannot open %s: %s\n", dir, strerror(errno));
        r->failed++;
        return;
    }
    char **subs = NULL;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        if (!dir_exists(p)) continue;
        char **s = realloc(subs, (size_t)(n + 1) * sizeof *s);
        if (!s) break;
        subs = s;
        subs[n++] = strdup(p);
    }
    closedir(d);
    qsort(subs, (size_t)n, sizeof *subs, cmp_str);
    int cases = 0;
    for (int i = 0; i < n; i++) cases += is_case_dir(subs[i]);
    folder_stats fs;
    memset(&fs, 0, sizeof fs);
    snprintf(fs.name, sizeof fs.name, "%s", dir);
    for (int i = 0; i < n; i++) {
        if (is_case_dir(subs[i])) run_one(r, subs[i], &fs);
        else run_tree(r, subs[i], depth + 1);
        free(subs[i]);
    }
    free(subs);
    if (cases) {
        for (int mode = 0; mode < 2; mode++) {
            if ((mode == 0 && !r->eager) || (mode == 1 && !r->plan)) continue;
            int total = fs.pass[mode] + fs.fail[mode] + fs.skip[mode];
            printf("folder %s [%s]: %d passed, %d failed, %d skipped (%.1f%% of %d pass)\n",
                   fs.name, mode ? "plan" : "eager", fs.pass[mode], fs.fail[mode], fs.skip[mode],
                   total ? 100.0 * fs.pass[mode] / total : 0.0, total);
        }
    }
}

static int cmd_test_onnx(int argc, char **argv) {
    runner r;
    memset(&r, 0, sizeof r);
    r.eager = r.plan = 1;
    const char **dirs = calloc((size_t)argc + 1, sizeof *dirs);
    int n_dirs = 0;
    if (!dirs) return 1;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--mode") && i + 1 < argc) {
            const char *m = argv[++i];
            r.eager = !strcmp(m, "eager") || !strcmp(m, "both");
            r.plan = !strcmp(m, "plan") || !strcmp(m, "both");
            if (!r.eager && !r.plan) {
                fprintf(stderr, "transmuter: --mode must be eager, plan or both\n");
                return 2;
            }
        } else if (!strcmp(argv[i], "--expected-failures") && i + 1 < argc) {
            load_xfails(&r, argv[++i]);
        } else if (!strcmp(argv[i], "--quiet")) {
            r.quiet = 1;
        } else if (argv[i][0] == '-') {
            fprintf(stderr, "transmuter: unknown option '%s'\n", argv[i]);
            return 2;
        } else {
            dirs[n_dirs++] = argv[i];
        }
    }
    if (!n_dirs) {
        usage(stderr);
        return 2;
    }
    for (int i = 0; i < n_dirs; i++) {
        /* Tolerances come from a MANIFEST.tsv up to two levels above the cases. */
        char p[4096];
        snprintf(p, sizeof p, "%s", dirs[i]);
        for (int up = 0; up < 3; up++) {
            char mf[4200];
            snprintf(mf, sizeof mf, "%s/MANIFEST.tsv", p);
            if (file_exists(mf)) {
                /* Each MANIFEST.tsv is read once, however many of its cases are named. */
                int seen = 0;
                for (int j = 0; j < r.n_manifests; j++)
                    if (!strcmp(r.manifests[j], p)) seen = 1;
                if (!seen && r.n_manifests < 16) {
                    r.manifests[r.n_manifests++] = strdup(p);
                    load_manifest(&r, p);
                }
                break;
            }
            char *s = strrchr(p, '/');
            if (!s) {
                snprintf(p, sizeof p, ".");
                if (up) break;
                continue;
            }
            *s = 0;
        }
    }
    for (int i = 0; i < n_dirs; i++) run_tree(&r, dirs[i], 0);
    printf("%d passed, %d failed, %d skipped\n", r.passed, r.failed, r.skipped);
    for (int i = 0; i < r.n_tols; i++) free(r.tols[i].folder_case);
    for (int i = 0; i < r.n_xfails; i++) {
        free(r.xfails[i].key);
        free(r.xfails[i].reason);
    }
    free(r.tols);
    free(r.xfails);
    free(dirs);
    for (int i = 0; i < r.n_manifests; i++) free(r.manifests[i]);
    return r.failed ? 1 : 0;
}

/* ---- compare --------------------------------------------------------------------- */

/* Every NAME.npy of REF_DIR must exist in OUT_DIR and match within tolerance. */
static int cmd_compare(int argc, char **argv) {
    const char *out_dir = NULL, *ref_dir = NULL;
    double rtol = 1e-4, atol = 1e-5;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--rtol") && i + 1 < argc) rtol = atof(argv[++i]);
        else if (!strcmp(argv[i], "--atol") && i + 1 < argc) atol = atof(argv[++i]);
        else if (!out_dir) out_dir = argv[i];
        else if (!ref_dir) ref_dir = argv[i];
        else {
            usage(stderr);
            return 2;
        }
    }
    if (!out_dir || !ref_dir) {
        usage(stderr);
        return 2;
    }
    DIR *d = opendir(ref_dir);
    if (!d) {
        fprintf(stderr, "transmuter: cannot open %s: %s\n", ref_dir, strerror(errno));
        return 1;
    }
    int bad = 0, n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len < 5 || strcmp(e->d_name + len - 4, ".npy")) continue;
        char a[4096], b[4096], why[1200];
        snprintf(a, sizeof a, "%s/%s", out_dir, e->d_name);
        snprintf(b, sizeof b, "%s/%s", ref_dir, e->d_name);
        tm_tensor *ta = NULL, *tb = NULL;
        tm_error err = {0};
        n++;
        if (tm_npy_read(b, &tb, &err) != TM_OK) {
            printf("FAIL %s: %s\n", e->d_name, err.message);
            bad++;
        } else if (tm_npy_read(a, &ta, &err) != TM_OK) {
            printf("FAIL %s: %s\n", e->d_name, err.message);
            bad++;
        } else if (!compare_tensor(ta, tb, rtol, atol, why, sizeof why)) {
            printf("FAIL %s: %s\n", e->d_name, why);
            bad++;
        } else {
            printf("ok   %s\n", e->d_name);
        }
        tm_tensor_free(ta);
        tm_tensor_free(tb);
    }
    closedir(d);
    if (!n) {
        printf("FAIL: no .npy files in %s\n", ref_dir);
        return 1;
    }
    return bad ? 1 : 0;
}

/* ---- bench ------------------------------------------------------------------------- */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static long peak_rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kib = atol(line + 6);
    if (f) fclose(f);
    return kib;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Times a compiled plan: load, plan creation, then `repeat` runs after `warmup`, with
 * caller-owned output buffers (so a run allocates nothing of ours). */
static int cmd_bench(int argc, char **argv) {
    const char *model_path = NULL, *in_dir = NULL, *out_dir = NULL;
    int threads = 0, repeat = 20, warmup = 3, n_static = 0, dequantize_nbits = 0, serve = 0;
    int nbits_int8 = 0;
    const char *static_names[64];
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--inputs") && i + 1 < argc) in_dir = argv[++i];
        else if (!strcmp(argv[i], "--serve")) serve = 1;
        else if (!strcmp(argv[i], "--out") && i + 1 < argc) out_dir = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) repeat = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) warmup = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--dequantize-nbits")) dequantize_nbits = 1;
        else if (!strcmp(argv[i], "--nbits-int8")) nbits_int8 = 1;
        else if (!strcmp(argv[i], "--no-nbits-int8")) nbits_int8 = -1;
        else if (!strcmp(argv[i], "--dequantize-nbits-once")) dequantize_nbits = 2;
        else if (!strcmp(argv[i], "--static") && i + 1 < argc && n_static < 64) static_names[n_static++] = argv[++i];
        else if (argv[i][0] != '-' && !model_path) model_path = argv[i];
        else {
            fprintf(stderr, "transmuter: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (!model_path || !in_dir || repeat < 1) {
        usage(stderr);
        return 2;
    }
    tm_load_options lo;
    tm_load_options_default(&lo);
    lo.threads = threads;
    lo.dequantize_nbits = dequantize_nbits;
    lo.nbits_int8 = nbits_int8;
    tm_error err = {0};
    tm_model *m = NULL;
    double t0 = now_ms();
    tm_status st = tm_model_load(model_path, &lo, &m, &err);
    double load_ms = now_ms() - t0;
    if (st != TM_OK) return report(model_path, st, &err);
    int n_in = tm_model_n_inputs(m), n_out = tm_model_n_outputs(m), rc = 0;
    const char **names = calloc((size_t)n_in + 1, sizeof *names);
    tm_tensor **inputs = calloc((size_t)n_in + 1, sizeof *inputs);
    tm_tensor **outputs = calloc((size_t)n_out + 1, sizeof *outputs);
    double *times = calloc((size_t)repeat, sizeof *times);
    const tm_tensor *statics[64];
    tm_plan *plan = NULL;
    tm_session *sess = NULL;
    if (!names || !inputs || !outputs || !times) {
        rc = 1;
        goto done;
    }
    for (int i = 0; i < n_in; i++) {
        tm_value_desc d;
        tm_model_input(m, i, &d);
        char path[4096];
        if (find_input_file(in_dir, d.name, path, sizeof path) != TM_OK) {
            fprintf(stderr, "transmuter: missing input '%s' in %s\n", d.name, in_dir);
            rc = 1;
            goto done;
        }
        st = read_tensor_file(path, &inputs[i], &err);
        if (st != TM_OK) {
            rc = report(path, st, &err);
            goto done;
        }
        names[i] = d.name;
    }
    for (int s = 0; s < n_static; s++) {
        statics[s] = NULL;
        for (int i = 0; i < n_in; i++)
            if (!strcmp(names[i], static_names[s])) statics[s] = inputs[i];
        if (!statics[s]) {
            fprintf(stderr, "transmuter: --static '%s' is not an input\n", static_names[s]);
            rc = 1;
            goto done;
        }
    }
    tm_plan_options po;
    tm_plan_options_default(&po);
    po.n_static = n_static;
    po.static_names = static_names;
    po.static_values = statics;
    t0 = now_ms();
    st = tm_plan_create(m, n_in, names, (const tm_tensor *const *)inputs, &po, &plan, &err);
    if (st == TM_OK) st = tm_session_create(plan, &sess, &err);
    double plan_ms = now_ms() - t0;
    if (st == TM_OK) {
        t0 = now_ms();
        st = tm_session_run(sess, n_in, names, (const tm_tensor *const *)inputs, outputs, &err);
        double first_ms = now_ms() - t0;
        for (int w = 1; w < warmup && st == TM_OK; w++)
            st = tm_session_run(sess, n_in, names, (const tm_tensor *const *)inputs, outputs, &err);
        if (st == TM_OK)
            printf("{\"load_ms\": %.3f, \"plan_ms\": %.3f, \"first_run_ms\": %.3f, "
                   "\"kernels\": %d, \"breaks\": %d, \"arena_mb\": %.2f, \"weight_mb\": %.2f, "
                   "%s", load_ms, plan_ms, first_ms, tm_plan_n_kernels(plan),
                   tm_plan_n_breaks(plan), tm_plan_arena_bytes(plan) / 1048576.0,
                   tm_plan_weight_bytes(plan) / 1048576.0, serve ? "\"ready\": 1}\n" : "");
        if (serve) fflush(stdout);
        /* --serve: timed rounds on request ("run N" lines), so that a driver can alternate
         * them with another runtime's without reloading either. */
        char line[64];
        while (st == TM_OK && (serve ? fgets(line, sizeof line, stdin) != NULL : repeat > 0)) {
            int n = repeat;
            if (serve) {
                if (!strncmp(line, "quit", 4)) break;
                if (strncmp(line, "run ", 4) || (n = atoi(line + 4)) < 1 || n > repeat) {
                    fprintf(stderr, "transmuter: bench --serve: expected 'run N' (N <= %d)\n", repeat);
                    st = TM_ERR_INVALID_ARGUMENT;
                    break;
                }
            }
            for (int r = 0; r < n && st == TM_OK; r++) {
                t0 = now_ms();
                st = tm_session_run(sess, n_in, names, (const tm_tensor *const *)inputs, outputs, &err);
                times[r] = now_ms() - t0;
            }
            if (st != TM_OK) break;
            double sum = 0;
            printf("%s\"times\": [", serve ? "{" : "");
            for (int r = 0; r < n; r++) {
                sum += times[r];
                printf("%s%.4f", r ? ", " : "", times[r]);
            }
            qsort(times, (size_t)n, sizeof *times, cmp_double);
            double median = n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
            printf("], \"median_ms\": %.4f, \"min_ms\": %.4f, \"mean_ms\": %.4f, \"max_ms\": %.4f, "
                   "\"repeat\": %d, \"peak_rss_mb\": %.1f}\n", median, times[0], sum / n,
                   times[n - 1], n, peak_rss_kib() / 1024.0);
            fflush(stdout);
            if (!serve) break;
        }
    }
    if (st != TM_OK) {
        rc = report(model_path, st, &err);
        goto done;
    }
    if (out_dir) {
        if (!dir_exists(out_dir) && mkdir(out_dir, 0777) != 0) {
            fprintf(stderr, "transmuter: cannot create %s\n", out_dir);
            rc = 1;
            goto done;
        }
        for (int i = 0; i < n_out; i++) {
            tm_value_desc d;
            tm_model_output(m, i, &d);
            char *enc = tm_name_encode(d.name);
            char path[4096];
            snprintf(path, sizeof path, "%s/%s.npy", out_dir, enc ? enc : "output");
            free(enc);
            if (outputs[i] && tm_npy_write(path, outputs[i], &err) != TM_OK) {
                rc = report(path, TM_ERR_IO, &err);
                goto done;
            }
        }
    }
done:
    for (int i = 0; inputs && i < n_in; i++) tm_tensor_free(inputs[i]);
    for (int i = 0; outputs && i < n_out; i++) tm_tensor_free(outputs[i]);
    free(names);
    free(inputs);
    free(outputs);
    free(times);
    tm_session_free(sess);
    tm_plan_free(plan);
    tm_model_free(m);
    return rc;
}

/* ---- ls, --quiet (hf:// sources) ------------------------------------------------------ */

static int cmd_ls(int argc, char **argv) {
    if (argc != 1) {
        usage(stderr);
        return 2;
    }
    tm_error err = {0};
    tm_status st = tm_hub_list(argv[0], stdout, &err);
    return st == TM_OK ? 0 : report(argv[0], st, &err);
}

/* --quiet of run, info and ls: no download progress bar. The hub honours huggingface_hub's
 * own switch, so setting it here covers the library calls too. Returns the new argc. */
static int take_quiet(int argc, char **argv) {
    int k = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--quiet")) argv[k++] = argv[i];
        else setenv("HF_HUB_DISABLE_PROGRESS_BARS", "1", 1);
    }
    argv[k] = NULL;
    return k;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "info") || !strcmp(argv[1], "run") || !strcmp(argv[1], "ls"))
        argc = take_quiet(argc, argv);
    if (!strcmp(argv[1], "ls")) return cmd_ls(argc - 2, argv + 2);
    if (!strcmp(argv[1], "info")) return cmd_info(argc - 2, argv + 2);
    if (!strcmp(argv[1], "run")) return cmd_run(argc - 2, argv + 2);
    if (!strcmp(argv[1], "test-onnx")) return cmd_test_onnx(argc - 2, argv + 2);
    if (!strcmp(argv[1], "compare")) return cmd_compare(argc - 2, argv + 2);
    if (!strcmp(argv[1], "bench")) return cmd_bench(argc - 2, argv + 2);
    if (!strcmp(argv[1], "generate")) return tm__cmd_generate(argc - 2, argv + 2);
    if (!strcmp(argv[1], "finetune")) return tm__cmd_finetune(argc - 2, argv + 2);
    if (!strcmp(argv[1], "stream")) return tm__cmd_stream(argc - 2, argv + 2);
    if (!strcmp(argv[1], "tokenize")) return tm__cmd_tokenize(argc - 2, argv + 2);
    if (!strcmp(argv[1], "detokenize")) return tm__cmd_detokenize(argc - 2, argv + 2);
    if (!strcmp(argv[1], "chat-template")) return tm__cmd_chat_template(argc - 2, argv + 2);
    if (!strcmp(argv[1], "pipeline")) return tm__cmd_pipeline(argc - 2, argv + 2);
    if (!strcmp(argv[1], "embed")) return tm__cmd_embed(argc - 2, argv + 2);
    if (!strcmp(argv[1], "classify")) return tm__cmd_classify(argc - 2, argv + 2);
    if (!strcmp(argv[1], "audio-features")) return tm__cmd_audio_features(argc - 2, argv + 2);
    if (!strcmp(argv[1], "image-features")) return tm__cmd_image_features(argc - 2, argv + 2);
    if (!strcmp(argv[1], "serve")) return tm__cmd_serve(argc - 2, argv + 2);
    if (!strcmp(argv[1], "vad")) return tm__cmd_vad(argc - 2, argv + 2);
    if (!strcmp(argv[1], "ocr")) return tm__cmd_ocr(argc - 2, argv + 2);
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("transmuter %s\n", tm_version());
        return 0;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    fprintf(stderr, "transmuter: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
