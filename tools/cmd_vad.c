/* `transmuter vad`: speech segments of sound files by Silero VAD v5 (tm_vad_file), printed
 * in seconds or as JSON. Not a recorder or a splitter: it writes no audio. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../include/transmuter.h"

int tm__cmd_vad(int argc, char **argv);

#define DEFAULT_MODEL "models/silero_vad_v5.onnx"

static void usage(FILE *f) {
    fprintf(f,
            "usage: transmuter vad AUDIO... [--model FILE] [--method silero|avr]\n"
            "                 [--threshold T] [--neg-threshold T] [--min-speech-ms N]\n"
            "                 [--min-silence-ms N] [--speech-pad-ms N] [--max-speech-s S]\n"
            "                 [--rate 16000|8000] [--threads N] [--json] [--probs]\n"
            "Speech segments of each AUDIO (WAV, FLAC, OGG, ... or a .npy float32 waveform),\n"
            "found by Silero VAD v5, one \"START END\" line each in seconds (several files:\n"
            "\"FILE START END\"); --json: [{\"start\": s, \"end\": s}, ...], one array a line per file.\n"
            "Files are read block by block (memory stays flat), channels averaged, resampled\n"
            "to 16 kHz (an 8 kHz file runs at 8 kHz; --rate chooses).\n"
            "  --method silero   Silero's get_speech_timestamps (default): threshold 0.5,\n"
            "                    neg-threshold threshold - 0.15, min-speech 250 ms,\n"
            "                    min-silence 100 ms, speech-pad 30 ms, no max-speech\n"
            "  --method avr      the frame processor of the npm package avr-vad (RealTimeVAD,\n"
            "                    v5): min-speech 9, min-silence 24 (its redemption), speech-pad\n"
            "                    3 frames of 32 ms (ms given are rounded up to frames)\n"
            "  --model FILE      silero_vad.onnx v5 (default %s;\n"
            "                    sh tools/get-vad-model.sh puts it there)\n"
            "  --probs           each chunk's speech probability, one a line, instead\n"
            "  --threads N       the model's threads (default 1: a chunk is too small to share)\n",
            DEFAULT_MODEL);
}

/* Seconds with every digit a sample at 8 or 16 kHz needs (1/16000 = 0.0000625), no more. */
static void print_seconds(double s) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.7f", s);
    size_t n = strlen(buf);
    while (n > 1 && buf[n - 1] == '0' && buf[n - 2] != '.') buf[--n] = '\0';
    fputs(buf, stdout);
}

static void print_probability(void *user, int64_t chunk, float p) {
    (void)user;
    (void)chunk;
    printf("%.9g\n", p);
}

/* An integer option value in [lo, hi]. */
static int int_arg(const char *flag, const char *v, long lo, long hi, int *out) {
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || !*v || *end || x < lo || x > hi) {
        fprintf(stderr, "transmuter vad: %s wants an integer from %ld to %ld, not '%s'\n", flag, lo, hi, v);
        return 0;
    }
    *out = (int)x;
    return 1;
}

static int double_arg(const char *flag, const char *v, double lo, double hi, double *out) {
    char *end = NULL;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || !*v || *end || !(x >= lo && x <= hi)) {
        fprintf(stderr, "transmuter vad: %s wants a number from %g to %g, not '%s'\n", flag, lo, hi, v);
        return 0;
    }
    *out = x;
    return 1;
}

int tm__cmd_vad(int argc, char **argv) {
    tm_vad_options o;
    tm_vad_options_default(&o);
    const char *model_path = NULL;
    const char **files = calloc((size_t)argc + 1, sizeof *files);
    int n_files = 0, json = 0, probs = 0, threads = 1, ok = 1;
    if (!files) return 1;
    for (int i = 0; i < argc && ok; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = a[0] == '-' && a[1] == '-' && strcmp(a, "--json") && strcmp(a, "--probs") &&
                    strcmp(a, "--help");
        if (takes && !v) {
            fprintf(stderr, "transmuter vad: %s needs a value\n", a);
            ok = 0;
            break;
        }
        if (!strcmp(a, "--help")) {
            usage(stdout);
            free(files);
            return 0;
        } else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--probs")) probs = 1;
        else if (!strcmp(a, "--model")) model_path = v;
        else if (!strcmp(a, "--method")) {
            if (!strcmp(v, "silero")) o.method = TM_VAD_SILERO;
            else if (!strcmp(v, "avr")) o.method = TM_VAD_AVR;
            else {
                fprintf(stderr, "transmuter vad: --method is silero or avr, not '%s'\n", v);
                ok = 0;
            }
        } else if (!strcmp(a, "--threshold")) ok = double_arg(a, v, 0.0, 1.0, &o.threshold);
        else if (!strcmp(a, "--neg-threshold")) ok = double_arg(a, v, 0.0, 1.0, &o.neg_threshold);
        else if (!strcmp(a, "--max-speech-s")) ok = double_arg(a, v, 0.0, 1e8, &o.max_speech_s);
        else if (!strcmp(a, "--min-speech-ms")) ok = int_arg(a, v, 0, 3600000, &o.min_speech_ms);
        else if (!strcmp(a, "--min-silence-ms")) ok = int_arg(a, v, 0, 3600000, &o.min_silence_ms);
        else if (!strcmp(a, "--speech-pad-ms")) ok = int_arg(a, v, 0, 3600000, &o.speech_pad_ms);
        else if (!strcmp(a, "--threads")) ok = int_arg(a, v, 0, 1024, &threads);
        else if (!strcmp(a, "--rate")) {
            ok = int_arg(a, v, 8000, 16000, &o.sample_rate);
            if (ok && o.sample_rate != 8000 && o.sample_rate != 16000) {
                fprintf(stderr, "transmuter vad: --rate is 16000 or 8000, not %s\n", v);
                ok = 0;
            }
        } else if (a[0] == '-' && a[1] == '-') {
            fprintf(stderr, "transmuter vad: unknown option %s\n", a);
            ok = 0;
        } else {
            files[n_files++] = a;
            continue;
        }
        if (takes) i++;
    }
    if (ok && !n_files) {
        usage(stderr);
        ok = 0;
    }
    if (!ok) {
        free(files);
        return 2;
    }
    if (!model_path) {
        model_path = DEFAULT_MODEL;
        if (access(model_path, R_OK) != 0) {
            fprintf(stderr,
                    "transmuter vad: no model at '%s' (%s): give --model FILE (Silero VAD v5's "
                    "silero_vad.onnx), or run `sh tools/get-vad-model.sh` in the source tree to put "
                    "it there\n", model_path, strerror(errno));
            free(files);
            return 1;
        }
    }
    tm_load_options lo;
    tm_load_options_default(&lo);
    lo.threads = threads;
    tm_model *model = NULL;
    tm_error err;
    if (tm_model_load(model_path, &lo, &model, &err) != TM_OK) {
        fprintf(stderr, "transmuter vad: %s\n", err.message);
        free(files);
        return 1;
    }
    if (probs) o.on_probability = print_probability;
    int rc = 0;
    for (int f = 0; f < n_files; f++) {
        tm_vad_segment *seg = NULL;
        size_t n = 0;
        if (tm_vad_file(model, files[f], &o, &seg, &n, &err) != TM_OK) {
            fflush(stdout);
            fprintf(stderr, "transmuter vad: %s\n", err.message);
            rc = 1;
            continue;
        }
        if (probs) {
            free(seg);
            continue;
        }
        if (json) putchar('[');
        for (size_t i = 0; i < n; i++) {
            if (json) {
                printf("%s{\"start\": ", i ? ", " : "");
                print_seconds(seg[i].start_s);
                printf(", \"end\": ");
                print_seconds(seg[i].end_s);
                putchar('}');
            } else {
                if (n_files > 1) printf("%s\t", files[f]);
                print_seconds(seg[i].start_s);
                putchar('\t');
                print_seconds(seg[i].end_s);
                putchar('\n');
            }
        }
        if (json) printf("]\n");
        free(seg);
    }
    tm_model_free(model);
    free(files);
    return rc;
}
