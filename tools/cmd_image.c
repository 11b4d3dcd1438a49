/* `transmuter image-features`: a debugging and testing view of the vision tasks' first
 * steps: the decoded image and an image processor's pixel_values, written as .npy files so
 * that they can be compared with transformers.js's (tests/vision.sh). Not a task: no model. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include "../include/transmuter.h"
#include "../src/core/status.h"
#include "../src/hub/json.h"
#include "../src/io/npy.h"
#include "../src/media/image.h"
#include "../src/pipelines/image_processor.h"

int tm__cmd_image_features(int argc, char **argv);

static void usage(FILE *f) {
    fprintf(f, "usage: transmuter image-features IMAGE --out DIR [--processor CONFIG|REPO_FOLDER]\n"
               "Decodes IMAGE (PNG, JPEG or WebP) as the vision tasks do and writes DIR/image.npy\n"
               "((height, width, channels) uint8, channels as in the file); with --processor (a\n"
               "preprocessor_config.json or a folder holding one), also DIR/pixel_values.npy\n"
               "((1, 3, H, W) float32) and, for DetrImageProcessor, DIR/pixel_mask.npy ((1, 64, 64)\n"
               "int64 ones, as transformers.js feeds it). Prints the sizes: original and\n"
               "reshaped (after resize and crop, before padding), as height width.\n");
}

static int fail(const tm_error *err, tm_status st) {
    fprintf(stderr, "transmuter: %s\n", err->message[0] ? err->message : tm_status_name(st));
    return 1;
}

tm_status tm__cli_read_processor_config(const char *where, char *path, size_t cap, tm_json **out,
                                        tm_error *err);   /* cmd_audio.c */

static tm_status open_processor(const char *where, tm__image_proc **proc, tm_error *err) {
    char path[4096];
    tm_json *config = NULL;
    tm_status s = tm__cli_read_processor_config(where, path, sizeof path, &config, err);
    if (s) return s;
    s = tm__image_proc_open(config, path, proc, err);
    tm_json_free(config);
    return s;
}

static tm_status write_npy(const char *dir, const char *name, const tm_tensor *t, tm_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.npy", dir, name);
    return tm_npy_write(path, t, err);
}

int tm__cmd_image_features(int argc, char **argv) {
    const char *input = NULL, *out = NULL, *processor = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--out") && i + 1 < argc) out = argv[++i];
        else if (!strcmp(argv[i], "--processor") && i + 1 < argc) processor = argv[++i];
        else if (argv[i][0] == '-' && argv[i][1] == '-') {
            fprintf(stderr, "transmuter: unknown option %s\n", argv[i]);
            usage(stderr);
            return 2;
        } else if (!input) input = argv[i];
        else {
            usage(stderr);
            return 2;
        }
    }
    if (!input || !out) {
        usage(stderr);
        return 2;
    }
    tm_error err;
    memset(&err, 0, sizeof err);
    tm__image_proc *proc = NULL;
    tm_status s = processor ? open_processor(processor, &proc, &err) : TM_OK;
    if (s) return fail(&err, s);
    tm__image im = {0};
    s = tm__image_load(input, &im, &err);
    if (s) {
        tm__image_proc_free(proc);
        return fail(&err, s);
    }
    if (mkdir(out, 0777) != 0 && errno != EEXIST)
        s = tm__fail(&err, TM_ERR_IO, "cannot create '%s': %s", out, strerror(errno));
    int64_t dims[3] = {im.h, im.w, im.channels};
    tm_tensor *t = s ? NULL : tm_tensor_wrap(TM_UINT8, 3, dims, im.px);
    if (!s) s = t ? write_npy(out, "image", t, &err) : TM_ERR_NO_MEMORY;
    tm_tensor_free(t);
    if (!s) printf("original %lld %lld channels %d\n", (long long)im.h, (long long)im.w, im.channels);
    if (!s && proc) {
        tm_tensor *pv = NULL;
        int64_t reshaped[2];
        s = tm__image_proc_run(proc, &im, &pv, reshaped, &err);
        if (!s) s = write_npy(out, "pixel_values", pv, &err);
        tm_tensor_free(pv);
        if (!s) printf("%s reshaped %lld %lld\n", tm__image_proc_type(proc), (long long)reshaped[0],
                       (long long)reshaped[1]);
        if (!s && tm__image_proc_has_pixel_mask(proc)) {
            int64_t mdims[3] = {1, 64, 64};
            tm_tensor *mask = tm_tensor_new(TM_INT64, 3, mdims);
            if (!mask) s = tm__fail(&err, TM_ERR_NO_MEMORY, "out of memory");
            for (int i = 0; !s && i < 64 * 64; i++) ((int64_t *)tm_tensor_data(mask))[i] = 1;
            if (!s) s = write_npy(out, "pixel_mask", mask, &err);
            tm_tensor_free(mask);
        }
    }
    tm__image_clear(&im);
    tm__image_proc_free(proc);
    return s ? fail(&err, s) : 0;
}
