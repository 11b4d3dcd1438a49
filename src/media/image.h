/* Images in: a PNG, JPEG or WebP file decoded to 8-bit interleaved pixels as transformers.js
 * gets them in node (sharp: libvips over libpng/libjpeg-turbo/libwebp), and the pixel
 * operations its image processors ask sharp for (affine resize, crop). Not an encoder; the
 * ONNX ImageDecoder operator borrows the decoders (tm__image_decode). */
#ifndef TM_MEDIA_IMAGE_H
#define TM_MEDIA_IMAGE_H

#include <stddef.h>
#include <stdint.h>
#include "../../include/transmuter.h"

/* (h, w, channels) uint8, rows top to bottom; channels 1 (gray), 2 (gray + alpha), 3 (RGB)
 * or 4 (RGBA). */
typedef struct tm__image {
    int64_t w, h;
    int channels;
    uint8_t *px;
} tm__image;

/* Reads path into *out as RawImage.read does in node: channels as the file has them (gray
 * stays 1, alpha kept), 16-bit samples by their high byte (libvips's 16 -> 8-bit
 * colourspace step), palettes expanded, and the EXIF orientation of a JPEG applied (sharp's
 * rotate()). Errors name the file: missing (TM_ERR_IO), not PNG/JPEG/WebP
 * (TM_ERR_UNSUPPORTED), truncated or corrupt (TM_ERR_PARSE), zero or huge sizes
 * (TM_ERR_INVALID_ARGUMENT). On error *out is untouched. */
tm_status tm__image_load(const char *path, tm__image *out, tm_error *err);
void tm__image_clear(tm__image *im);
/* As tm__image_load, from encoded bytes in memory; `what` names them in errors, and the EXIF
 * orientation is applied only when orient is 1. */
tm_status tm__image_decode(const uint8_t *data, size_t n, const char *what, int orient, tm__image *out,
                           tm_error *err);

/* RawImage.rgb(): gray repeated into three channels, alpha dropped (not composited). */
tm_status tm__image_to_rgb(tm__image *im, tm_error *err);

typedef enum tm__resample {
    TM__RESAMPLE_NEAREST,
    TM__RESAMPLE_BILINEAR,
    TM__RESAMPLE_BICUBIC,
    TM__RESAMPLE_LANCZOS,
} tm__resample;

/* RawImage.resize(w, h) in node. Nearest, bilinear, bicubic: libvips's affine transform by
 * (w / in.w, h / in.h) with its uchar interpolators (fixed point, 12 bits), black beyond the
 * edges. Lanczos: sharp's resize (vips_resize, lanczos3; see image.c). *out is new. */
tm_status tm__image_resize(const tm__image *in, int64_t w, int64_t h, tm__resample method,
                           tm__image *out, tm_error *err);

/* RawImage.center_crop(w, h) in node: the window at floor((in - size) / 2), padded with
 * black where the image is smaller. *out is new. */
tm_status tm__image_center_crop(const tm__image *in, int64_t w, int64_t h, tm__image *out,
                                tm_error *err);

#endif
