/* libFuzzer target: images in (src/media/image.c: the PNG, JPEG and WebP decoders behind our
 * checks, the EXIF orientation, the gray/alpha/RGB conversion, libvips's affine resize and
 * the centre crop as sharp does them), then an image processor of
 * src/pipelines/image_processor.c on what was decoded. The first byte picks: bit 0 the EXIF
 * step, bits 1-2 the processor (ViT bilinear, ConvNext bicubic + crop_pct, DETR with its
 * size limits and padding, CLIP), bits 3-4 the resampling of a direct resize to a size the
 * second and third bytes give (1 to 256 each way), then a centre crop. The rest is the file.
 * (Processors only on images up to a megapixel with sides at most 64 times apart: see
 * below.) Asserts: an error carries a message and leaves the image untouched; a decoded image has
 * sane sizes and every pixel read; every output has the shape promised. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/tensor.h"
#include "hub/json.h"
#include "media/image.h"
#include "pipelines/image_processor.h"

static const char *const configs[4] = {
    "{\"image_processor_type\": \"ViTImageProcessor\", \"do_resize\": true, \"size\": {\"height\": 32, "
    "\"width\": 32}, \"resample\": 2, \"do_rescale\": true, \"rescale_factor\": 0.00392156862745098, "
    "\"do_normalize\": true, \"image_mean\": [0.5, 0.5, 0.5], \"image_std\": [0.5, 0.5, 0.5]}",
    "{\"image_processor_type\": \"ConvNextImageProcessor\", \"do_resize\": true, \"size\": "
    "{\"shortest_edge\": 32}, \"crop_pct\": 0.875, \"resample\": 3, \"do_rescale\": true, "
    "\"rescale_factor\": 0.00392156862745098, \"do_normalize\": true, \"image_mean\": [0.485, 0.456, "
    "0.406], \"image_std\": [0.229, 0.224, 0.225]}",
    "{\"image_processor_type\": \"DetrImageProcessor\", \"do_resize\": true, \"size\": "
    "{\"shortest_edge\": 40, \"longest_edge\": 64}, \"resample\": 2, \"do_rescale\": true, "
    "\"rescale_factor\": 0.00392156862745098, \"do_normalize\": true, \"image_mean\": [0.485, 0.456, "
    "0.406], \"image_std\": [0.229, 0.224, 0.225], \"do_pad\": true}",
    "{\"image_processor_type\": \"CLIPImageProcessor\", \"do_resize\": true, \"size\": "
    "{\"shortest_edge\": 24}, \"resample\": 3, \"do_center_crop\": true, \"crop_size\": {\"height\": 24, "
    "\"width\": 24}, \"do_rescale\": true, \"rescale_factor\": 0.00392156862745098, \"do_normalize\": "
    "true, \"image_mean\": [0.48145466, 0.4578275, 0.40821073], \"image_std\": [0.26862954, 0.26130258, "
    "0.27577711], \"do_convert_rgb\": true}",
};
static tm__image_proc *procs[4];

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    for (int i = 0; i < 4; i++) {
        tm_json *j = tm_json_parse(configs[i], strlen(configs[i]));
        tm_error err;
        memset(&err, 0, sizeof err);
        if (!j || tm__image_proc_open(j, "fuzz", &procs[i], &err) != TM_OK) {
            fprintf(stderr, "fuzz_image: processor %d: %s\n", i, err.message);
            abort();
        }
        tm_json_free(j);
    }
    return 0;
}

static void read_all(const tm__image *im) {
    if (im->w < 1 || im->h < 1 || im->channels < 1 || im->channels > 4 || !im->px) abort();
    volatile uint8_t sink = 0;
    size_t n = (size_t)(im->w * im->h * im->channels);
    for (size_t i = 0; i < n; i += 61) sink ^= im->px[i];
    sink ^= im->px[n - 1];
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 3) return 0;
    unsigned sel = data[0];
    int64_t w = 1 + data[1], h = 1 + data[2];
    tm__image im;
    memset(&im, 0x5a, sizeof im);
    tm__image untouched = im;
    tm_error err;
    memset(&err, 0, sizeof err);
    if (tm__image_decode(data + 3, size - 3, "fuzz input", sel & 1, &im, &err) != TM_OK) {
        if (!err.message[0] || memcmp(&im, &untouched, sizeof im)) abort();
        return 0;
    }
    read_all(&im);
    tm__image small, crop;
    memset(&small, 0, sizeof small);
    memset(&crop, 0, sizeof crop);
    if (tm__image_resize(&im, w, h, (tm__resample)((sel >> 3) % 3), &small, &err) == TM_OK) {
        if (small.w != w || small.h != h || small.channels != im.channels) abort();
        read_all(&small);
        if (tm__image_center_crop(&small, 1 + data[2] % 64, 1 + data[1] % 64, &crop, &err) == TM_OK) {
            read_all(&crop);
            tm__image_clear(&crop);
        } else if (!err.message[0]) {
            abort();
        }
        tm__image_clear(&small);
    } else if (!err.message[0]) {
        abort();
    }
    /* The processors keep the aspect ratio: a forged 51,244 x 1 JPEG of 556 bytes becomes
     * 1.2 million x 24 pixels of bicubic work, legitimately (transformers.js does the same),
     * but seconds under ASan, a timeout here. Processors run on images up to a megapixel
     * whose sides differ by at most 64 times. */
    int64_t lo = im.w < im.h ? im.w : im.h, hi = im.w < im.h ? im.h : im.w;
    if (im.w * im.h > ((int64_t)1 << 20) || hi > 64 * lo) {
        tm__image_clear(&im);
        return 0;
    }
    if (tm__image_to_rgb(&im, &err) != TM_OK) {
        if (!err.message[0]) abort();
        tm__image_clear(&im);
        return 0;
    }
    if (im.channels != 3) abort();
    tm_tensor *pv = NULL;
    int64_t reshaped[2] = {-1, -1};
    if (tm__image_proc_run(procs[(sel >> 1) & 3], &im, &pv, reshaped, &err) == TM_OK) {
        if (!pv || pv->rank != 4 || pv->dims[0] != 1 || pv->dims[1] != 3 || reshaped[0] < 1 ||
            reshaped[1] < 1)
            abort();
        volatile float sink = 0;
        const float *x = pv->data;
        for (int64_t i = 0; i < tm_tensor_numel_(pv); i += 17) sink += x[i];
        (void)sink;
        tm_tensor_free(pv);
    } else if (!err.message[0] || pv) {
        abort();
    }
    tm__image_clear(&im);
    return 0;
}
