/* `transmuter ocr IMAGE...`: the text of images through the library's OCR (tm_ocr_*), as
 * lines of text or as JSON with scores and boxes. Finds the models folder that
 * tools/get-ocr-models.sh fills; not where the models are made or fetched. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "../include/transmuter.h"
#include "../src/pipelines/pipelines.h"

int tm__cmd_ocr(int argc, char **argv);

#define INSTALL_HINT "install them with: sh tools/get-ocr-models.sh (or name a folder with --models DIR)"

static void usage(FILE *f) {
    fprintf(f,
            "usage: transmuter ocr IMAGE... [--models DIR] [--json] [--no-classifier] [--threads N]\n"
            "                  [--max-side N]\n"
            "Reads the text of each IMAGE (PNG, JPEG or WebP) with PaddleOCR's PP-OCRv4 models and\n"
            "prints its lines in reading order; with several images each block starts with\n"
            "'==> IMAGE <=='. --json prints per image one line holding\n"
            "[{\"text\": ..., \"score\": ..., \"box\": [[x, y], [x, y], [x, y], [x, y]]}, ...] (corners\n"
            "top-left, top-right, bottom-right, bottom-left, in pixels).\n"
            "--models DIR: the folder of %s, %s,\n"
            "  %s and %s; by default $TM_OCR_MODELS, else\n"
            "  models/ocr here or beside the program's folder (tools/get-ocr-models.sh fills it).\n"
            "--no-classifier: do not turn upside-down lines (the direction classifier is not loaded).\n"
            "--max-side N: the detector sees images longer than N pixels scaled down (default 2048;\n"
            "  0: never).\n",
            TM_OCR_DETECTION_FILE, TM_OCR_RECOGNITION_FILE, TM_OCR_CLASSIFIER_FILE, TM_OCR_DICTIONARY_FILE);
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* The default folder: $TM_OCR_MODELS, ./models/ocr, or models/ocr in the folder above the
 * program's (build/transmuter in a checkout). */
static const char *default_models(char *buf, size_t cap) {
    const char *env = getenv("TM_OCR_MODELS");
    if (env && *env) return env;
    if (is_dir("models/ocr")) return "models/ocr";
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            snprintf(buf, cap, "%s/../models/ocr", exe);
            if (is_dir(buf)) return buf;
        }
    }
    return "models/ocr";
}

static int print_json(const tm_ocr_result *r) {
    tm__buf b = {0};
    tm__put(&b, "[");
    for (size_t i = 0; i < tm_ocr_result_count(r); i++) {
        const tm_ocr_line *l = tm_ocr_result_line(r, i);
        tm__put(&b, i ? ", {\"text\": " : "{\"text\": ");
        tm__put_string(&b, l->text);
        tm__put(&b, ", \"score\": ");
        tm__put_number(&b, l->score);
        tm__put(&b, ", \"box\": [");
        for (int c = 0; c < 4; c++) {
            tm__put(&b, c ? ", [" : "[");
            tm__put_number(&b, l->box[c][0]);
            tm__put(&b, ", ");
            tm__put_number(&b, l->box[c][1]);
            tm__put(&b, "]");
        }
        tm__put(&b, "]}");
    }
    tm__put(&b, "]");
    int ok = !b.oom;
    if (ok) printf("%s\n", b.s);
    free(b.s);
    if (!ok) fprintf(stderr, "transmuter: out of memory\n");
    return ok;
}

int tm__cmd_ocr(int argc, char **argv) {
    tm_ocr_options opts;
    tm_ocr_options_default(&opts);
    const char *models = NULL;
    int json = 0, n_images = 0;
    char **images = calloc((size_t)argc + 1, sizeof *images);
    if (!images) return 1;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            free(images);
            return 0;
        } else if (!strcmp(a, "--models") && i + 1 < argc) models = argv[++i];
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--no-classifier")) opts.use_classifier = 0;
        else if (!strcmp(a, "--threads") && i + 1 < argc) opts.threads = atoi(argv[++i]);
        else if (!strcmp(a, "--max-side") && i + 1 < argc) opts.max_side = atoi(argv[++i]);
        else if (a[0] == '-' && a[1]) {
            fprintf(stderr, "transmuter ocr: unknown or incomplete option '%s'\n", a);
            usage(stderr);
            free(images);
            return 2;
        } else images[n_images++] = argv[i];
    }
    if (n_images == 0) {
        usage(stderr);
        free(images);
        return 2;
    }
    char buf[PATH_MAX + 32];
    if (!models) models = default_models(buf, sizeof buf);
    tm_ocr *ocr;
    tm_error err = {0};
    tm_status s = tm_ocr_create(models, &opts, &ocr, &err);
    if (s) {
        fprintf(stderr, "transmuter: %s\n", err.message[0] ? err.message : tm_status_name(s));
        if (s == TM_ERR_NOT_FOUND) fprintf(stderr, "transmuter: the OCR models are missing: " INSTALL_HINT "\n");
        free(images);
        return 1;
    }
    int failures = 0;
    for (int i = 0; i < n_images; i++) {
        tm_ocr_result *r;
        s = tm_ocr_run(ocr, images[i], &r, &err);
        if (s) {
            fprintf(stderr, "transmuter: %s\n", err.message[0] ? err.message : tm_status_name(s));
            failures++;
            continue;
        }
        if (json) {
            failures += !print_json(r);
        } else {
            if (n_images > 1) printf("%s==> %s <==\n", i ? "\n" : "", images[i]);
            for (size_t k = 0; k < tm_ocr_result_count(r); k++) printf("%s\n", tm_ocr_result_line(r, k)->text);
        }
        fflush(stdout);
        tm_ocr_result_free(r);
    }
    tm_ocr_free(ocr);
    free(images);
    return failures ? 1 : 0;
}
