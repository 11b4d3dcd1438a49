/* Our side of the OCR bench (bench/ocr/bench.mjs, `make bench-ocr`): loads the models once
 * (tm_ocr_create), then reads the image with tm_ocr_run once per line "run" on stdin and
 * answers each with one JSON line {"ms": wall, "cpu_ms": process CPU, "lines": n}, so that
 * the driver can alternate it with the reference in one process each. The first line
 * printed gives the load time. Not a test: nothing here asserts a timing.
 * Usage: ocr_bench MODELS_DIR IMAGE [--threads N] [--no-classifier] [--max-side N] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "transmuter.h"

static double now_ms(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: ocr_bench MODELS_DIR IMAGE [--threads N] [--no-classifier] [--max-side N]\n");
        return 2;
    }
    tm_ocr_options opts;
    tm_ocr_options_default(&opts);
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) opts.threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-classifier")) opts.use_classifier = 0;
        else if (!strcmp(argv[i], "--max-side") && i + 1 < argc) opts.max_side = atoi(argv[++i]);
    }
    tm_error err;
    tm_ocr *ocr;
    double t0 = now_ms(CLOCK_MONOTONIC);
    if (tm_ocr_create(argv[1], &opts, &ocr, &err) != TM_OK) {
        fprintf(stderr, "ocr_bench: %s\n", err.message);
        return 1;
    }
    printf("{\"load_ms\": %.3f}\n", now_ms(CLOCK_MONOTONIC) - t0);
    fflush(stdout);
    char line[256];
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "run", 3)) break;
        double w0 = now_ms(CLOCK_MONOTONIC), c0 = now_ms(CLOCK_PROCESS_CPUTIME_ID);
        tm_ocr_result *r;
        if (tm_ocr_run(ocr, argv[2], &r, &err) != TM_OK) {
            fprintf(stderr, "ocr_bench: %s\n", err.message);
            tm_ocr_free(ocr);
            return 1;
        }
        double w1 = now_ms(CLOCK_MONOTONIC), c1 = now_ms(CLOCK_PROCESS_CPUTIME_ID);
        printf("{\"ms\": %.3f, \"cpu_ms\": %.3f, \"lines\": %zu}\n", w1 - w0, c1 - c0, tm_ocr_result_count(r));
        fflush(stdout);
        tm_ocr_result_free(r);
    }
    tm_ocr_free(ocr);
    return 0;
}
