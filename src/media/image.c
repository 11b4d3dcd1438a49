/* Images for the vision pipelines: PNG (libpng), JPEG (libjpeg-turbo, default islow IDCT
 * and fancy upsampling, as libvips uses it) and WebP (libwebp) files to 8-bit pixels with
 * their channels kept, and libvips's affine resize, sharp's lanczos resize and its crop as
 * transformers.js runs them in node. The ONNX ImageDecoder operator decodes these three formats here too (without
 * the EXIF step, alpha then dropped); its other formats and PIL conversions are its own. */
#if !__has_include(<jpeglib.h>) || !__has_include(<png.h>) || !__has_include(<webp/decode.h>)
#error "images need libjpeg62-turbo-dev, libpng-dev and libwebp-dev: run tools/install-deps.sh"
#endif
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jpeglib.h>
#include <jerror.h>
#include <png.h>
#include <webp/decode.h>
#include "image.h"
#include "../core/status.h"

/* Larger images are refused rather than trusting a forged header with the allocation. */
#define MAX_PIXELS ((int64_t)1 << 28)
#define WHY_LEN 200

void tm__image_clear(tm__image *im) {
    if (!im) return;
    free(im->px);
    memset(im, 0, sizeof *im);
}

static tm_status image_alloc(tm__image *im, int64_t w, int64_t h, int channels, const char *what,
                             tm_error *err) {
    if (w <= 0 || h <= 0 || h > MAX_PIXELS / w)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s: image size %lld x %lld is out of range", what,
                        (long long)w, (long long)h);
    im->px = malloc((size_t)(w * h * channels));
    if (!im->px) return tm__fail(err, TM_ERR_NO_MEMORY, "%s: out of memory", what);
    im->w = w;
    im->h = h;
    im->channels = channels;
    return TM_OK;
}

/* ---- EXIF orientation ------------------------------------------------------------------ */

/* The Orientation tag (0x0112) of IFD0 in a TIFF-structured EXIF block, 1 when absent or
 * unreadable: a bad EXIF block does not make the image unreadable (libvips ignores it too). */
static int exif_orientation(const uint8_t *d, size_t n) {
    if (n < 8) return 1;
    int le = d[0] == 'I' && d[1] == 'I';
    if (!le && !(d[0] == 'M' && d[1] == 'M')) return 1;
#define U16(p) (le ? (uint32_t)(p)[0] | (uint32_t)(p)[1] << 8 : (uint32_t)(p)[1] | (uint32_t)(p)[0] << 8)
#define U32(p) (le ? U16(p) | U16((p) + 2) << 16 : U16((p) + 2) | U16(p) << 16)
    uint32_t ifd = U32(d + 4);
    if (ifd > n - 2) return 1;
    uint32_t count = U16(d + ifd);
    for (uint32_t i = 0; i < count; i++) {
        size_t at = (size_t)ifd + 2 + (size_t)i * 12;
        if (at + 12 > n) return 1;
        if (U16(d + at) == 0x0112 && U16(d + at + 2) == 3) {
            uint32_t v = U16(d + at + 8);
            return v >= 1 && v <= 8 ? (int)v : 1;
        }
    }
    return 1;
#undef U16
#undef U32
}

/* Turns the stored pixels upright as sharp's rotate() without arguments does. */
static tm_status apply_orientation(tm__image *im, int orientation, const char *what, tm_error *err) {
    if (orientation <= 1) return TM_OK;
    int swap = orientation >= 5;
    tm__image out = {0};
    tm_status s = image_alloc(&out, swap ? im->h : im->w, swap ? im->w : im->h, im->channels, what, err);
    if (s) return s;
    int64_t W = im->w, H = im->h;
    for (int64_t y = 0; y < out.h; y++)
        for (int64_t x = 0; x < out.w; x++) {
            int64_t sx, sy;
            switch (orientation) {
            case 2: sx = W - 1 - x, sy = y; break;
            case 3: sx = W - 1 - x, sy = H - 1 - y; break;
            case 4: sx = x, sy = H - 1 - y; break;
            case 5: sx = y, sy = x; break;
            case 6: sx = y, sy = H - 1 - x; break;
            case 7: sx = W - 1 - y, sy = H - 1 - x; break;
            default: sx = W - 1 - y, sy = x; break;
            }
            memcpy(out.px + (y * out.w + x) * out.channels, im->px + (sy * W + sx) * im->channels,
                   (size_t)im->channels);
        }
    tm__image_clear(im);
    *im = out;
    return TM_OK;
}

/* ---- JPEG ------------------------------------------------------------------------------- */

typedef struct jpeg_fail {
    struct jpeg_error_mgr mgr;
    jmp_buf jb;
} jpeg_fail;

static void jpeg_on_error(j_common_ptr ci) { longjmp(((jpeg_fail *)ci->err)->jb, 1); }

/* A stream that ends early is an error here (libjpeg would pad it with gray). */
static void jpeg_on_message(j_common_ptr ci, int level) {
    if (level < 0 && ci->err->msg_code == JWRN_JPEG_EOF) jpeg_on_error(ci);
}

static tm_status decode_jpeg(const uint8_t *d, size_t n, const char *path, int orient, tm__image *im,
                             tm_error *err) {
    struct jpeg_decompress_struct ci;
    jpeg_fail jf;
    tm__image got = {0};
    uint8_t *volatile row = NULL, *volatile pixels = NULL;
    volatile int orientation = 1;
    volatile tm_status s = TM_OK;
    ci.err = jpeg_std_error(&jf.mgr);
    jf.mgr.error_exit = jpeg_on_error;
    jf.mgr.emit_message = jpeg_on_message;
    if (setjmp(jf.jb)) {
        char msg[JMSG_LENGTH_MAX] = "";
        (*ci.err->format_message)((j_common_ptr)&ci, msg);
        jpeg_destroy_decompress(&ci);
        free(row);
        free(pixels);
        return s ? s : tm__fail(err, TM_ERR_PARSE, "%s: corrupt or truncated JPEG (%s)", path, msg);
    }
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, d, (unsigned long)n);
    jpeg_save_markers(&ci, JPEG_APP0 + 1, 0xFFFF);
    jpeg_read_header(&ci, TRUE);
    for (jpeg_saved_marker_ptr m = ci.marker_list; m; m = m->next)
        if (m->marker == JPEG_APP0 + 1 && m->data_length > 6 && !memcmp(m->data, "Exif\0\0", 6))
            orientation = exif_orientation(m->data + 6, m->data_length - 6);
    int cmyk = ci.jpeg_color_space == JCS_CMYK || ci.jpeg_color_space == JCS_YCCK;
    int gray = ci.jpeg_color_space == JCS_GRAYSCALE;
    ci.out_color_space = cmyk ? JCS_CMYK : gray ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_start_decompress(&ci);
    if ((s = image_alloc(&got, ci.output_width, ci.output_height, gray ? 1 : 3, path, err)))
        ERREXIT(&ci, JERR_OUT_OF_MEMORY);
    pixels = got.px;
    if (cmyk && !(row = malloc((size_t)ci.output_width * 4))) ERREXIT1(&ci, JERR_OUT_OF_MEMORY, 0);
    while (ci.output_scanline < ci.output_height) {
        uint8_t *dst = got.px + (size_t)ci.output_scanline * ci.output_width * got.channels;
        JSAMPROW r = cmyk ? row : dst;
        jpeg_read_scanlines(&ci, &r, 1);
        /* ink amounts to RGB without a colour profile (Adobe writes them inverted) */
        for (JDIMENSION x = 0; cmyk && x < ci.output_width; x++) {
            const uint8_t *p = row + 4 * x;
            int k = ci.saw_Adobe_marker ? p[3] : 255 - p[3];
            for (int c = 0; c < 3; c++) {
                int v = ci.saw_Adobe_marker ? p[c] : 255 - p[c];
                dst[3 * x + c] = (uint8_t)((v * k + 127) / 255);
            }
        }
    }
    jpeg_finish_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    free(row);
    s = orient ? apply_orientation(&got, orientation, path, err) : TM_OK;
    if (s) {
        free(got.px);
        return s;
    }
    *im = got;
    return TM_OK;
}

/* ---- PNG -------------------------------------------------------------------------------- */

typedef struct png_source {
    const uint8_t *d;
    size_t n, pos;
    char why[WHY_LEN];
} png_source;

static void png_on_read(png_structp p, png_bytep out, size_t len) {
    png_source *src = png_get_io_ptr(p);
    if (len > src->n - src->pos) png_error(p, "the file ends early");
    memcpy(out, src->d + src->pos, len);
    src->pos += len;
}

static void png_on_error(png_structp p, png_const_charp msg) {
    png_source *src = png_get_error_ptr(p);
    snprintf(src->why, sizeof src->why, "%s", msg);
    png_longjmp(p, 1);
}

static void png_on_warning(png_structp p, png_const_charp msg) { (void)p, (void)msg; }

static tm_status decode_png(const uint8_t *d, size_t n, const char *path, int orient, tm__image *im,
                            tm_error *err) {
    png_source src = {d, n, 0, ""};
    png_structp p = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_on_error, png_on_warning);
    png_infop info = p ? png_create_info_struct(p) : NULL;
    if (!info) {
        png_destroy_read_struct(&p, NULL, NULL);
        return tm__fail(err, TM_ERR_NO_MEMORY, "%s: out of memory", path);
    }
    png_source *volatile psrc = &src;
    tm__image got = {0};
    png_bytep *volatile rows = NULL;
    uint8_t *volatile pixels = NULL;
    volatile tm_status s = TM_OK;
    if (setjmp(png_jmpbuf(p))) {
        png_destroy_read_struct(&p, &info, NULL);
        free(rows);
        free(pixels);
        return s ? s : tm__fail(err, TM_ERR_PARSE, "%s: corrupt or truncated PNG (%s)", path, psrc->why);
    }
    png_set_read_fn(p, &src, png_on_read);
    png_read_info(p, info);
    png_set_expand(p);          /* palette to RGB, low bit depths to 8, tRNS to alpha */
    png_set_strip_16(p);        /* the high byte */
    png_set_interlace_handling(p);
    png_read_update_info(p, info);
    png_uint_32 w = png_get_image_width(p, info), h = png_get_image_height(p, info);
    int channels = png_get_channels(p, info);
    if (channels < 1 || channels > 4 || png_get_rowbytes(p, info) != (size_t)w * channels)
        png_error(p, "unexpected row layout");
    if ((s = image_alloc(&got, w, h, channels, path, err))) png_longjmp(p, 1);
    pixels = got.px;
    if (!(rows = malloc(h * sizeof *rows))) png_error(p, "out of memory");
    for (png_uint_32 y = 0; y < h; y++) rows[y] = got.px + (size_t)y * w * channels;
    png_read_image(p, rows);
    int orientation = 1;
#ifdef PNG_eXIf_SUPPORTED
    png_bytep exif = NULL;
    png_uint_32 exif_len = 0;
    if (png_get_eXIf_1(p, info, &exif_len, &exif) && exif) orientation = exif_orientation(exif, exif_len);
#endif
    png_destroy_read_struct(&p, &info, NULL);
    free(rows);
    s = orient ? apply_orientation(&got, orientation, path, err) : TM_OK;
    if (s) {
        free(got.px);
        return s;
    }
    *im = got;
    return TM_OK;
}

/* ---- WebP ------------------------------------------------------------------------------- */

static tm_status decode_webp(const uint8_t *d, size_t n, const char *path, tm__image *im, tm_error *err) {
    WebPBitstreamFeatures f;
    if (WebPGetFeatures(d, n, &f) != VP8_STATUS_OK)
        return tm__fail(err, TM_ERR_PARSE, "%s: corrupt or truncated WebP", path);
    tm__image got = {0};
    int channels = f.has_alpha ? 4 : 3;
    tm_status s = image_alloc(&got, f.width, f.height, channels, path, err);
    if (s) return s;
    size_t stride = (size_t)f.width * channels, size = stride * (size_t)f.height;
    uint8_t *ok = f.has_alpha ? WebPDecodeRGBAInto(d, n, got.px, size, (int)stride)
                              : WebPDecodeRGBInto(d, n, got.px, size, (int)stride);
    if (!ok) {
        free(got.px);
        return tm__fail(err, TM_ERR_PARSE, "%s: corrupt or truncated WebP", path);
    }
    *im = got;
    return TM_OK;
}

/* ---- Loading ---------------------------------------------------------------------------- */

tm_status tm__image_load(const char *path, tm__image *out, tm_error *err) {
    if (!path || !out) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm__image_load: NULL argument");
    FILE *f = fopen(path, "rb");
    if (!f) return tm__fail(err, TM_ERR_IO, "cannot open image '%s': %s", path, strerror(errno));
    uint8_t *d = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0)
        d = malloc((size_t)size + 1);
    size_t n = d ? fread(d, 1, (size_t)size, f) : 0;
    fclose(f);
    if (!d || n != (size_t)size) {
        free(d);
        return tm__fail(err, TM_ERR_IO, "cannot read image '%s'", path);
    }
    tm_status s = tm__image_decode(d, n, path, 1, out, err);
    free(d);
    return s;
}

tm_status tm__image_decode(const uint8_t *d, size_t n, const char *what, int orient, tm__image *out,
                           tm_error *err) {
    if (n == 0) return tm__fail(err, TM_ERR_PARSE, "%s: empty file, not an image", what);
    if (n >= 3 && !memcmp(d, "\xFF\xD8\xFF", 3)) return decode_jpeg(d, n, what, orient, out, err);
    if (n >= 8 && !memcmp(d, "\x89PNG\r\n\x1A\n", 8)) return decode_png(d, n, what, orient, out, err);
    if (n >= 12 && !memcmp(d, "RIFF", 4) && !memcmp(d + 8, "WEBP", 4)) return decode_webp(d, n, what, out, err);
    return tm__fail(err, TM_ERR_UNSUPPORTED, "%s: not a PNG, JPEG or WebP image", what);
}

tm_status tm__image_to_rgb(tm__image *im, tm_error *err) {
    if (im->channels == 3) return TM_OK;
    uint8_t *px = malloc((size_t)(im->w * im->h * 3));
    if (!px) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    const int c = im->channels;
    for (int64_t i = 0; i < im->w * im->h; i++) {
        const uint8_t *p = im->px + i * c;
        px[3 * i] = p[0];
        px[3 * i + 1] = c >= 3 ? p[1] : p[0];
        px[3 * i + 2] = c >= 3 ? p[2] : p[0];
    }
    free(im->px);
    im->px = px;
    im->channels = 3;
    return TM_OK;
}

/* ---- Resampling: libvips's affine on uchar images --------------------------------------
 *
 * vips_affine maps output pixel (x, y) to input (x / sx, y / sy) (no half-pixel shift),
 * stepping along a row by adding the inverse scale. The input is first embedded in a
 * border of black (extend "background", sharp's black background) wide enough for the
 * interpolator's window plus one pixel, so edge pixels blend with black. The interpolators
 * work in 12-bit fixed point: bilinear weights from the truncated fraction, Catmull-Rom
 * bicubic from a 65-entry table indexed by the fraction rounded to 1/64. */

#define INTERPOLATE_SHIFT 12
#define INTERPOLATE_SCALE (1 << INTERPOLATE_SHIFT)
#define TRANSFORM_SCALE 64

/* Catmull-Rom weights at fraction t / 64, in 12-bit fixed point (truncated, as libvips
 * fills its table). */
static void catmull_weights(int t, int c[4]) {
    double x = (double)((float)t / TRANSFORM_SCALE);
    double a = 1.0 - x, b = -0.5 * x, ab = a * b;
    double c0 = a * ab, c3 = x * ab, d = c3 - c0;
    double c1 = a - c0 + d, c2 = x - c3 - d;
    c[0] = (int)(c0 * INTERPOLATE_SCALE);
    c[1] = (int)(c1 * INTERPOLATE_SCALE);
    c[2] = (int)(c2 * INTERPOLATE_SCALE);
    c[3] = (int)(c3 * INTERPOLATE_SCALE);
}

/* Rounds a 12-bit fixed-point value (floor division for negative ones, as >> does). */
static int fixed_round(int v) { return (v + (INTERPOLATE_SCALE >> 1)) >> INTERPOLATE_SHIFT; }

/* vips_affine by diag(sx, sy) into a w x h image. idx is the input displacement (0 for
 * transformers.js's own affine, 0.5 for the upsizing step of vips_resize); copy_edges picks
 * the border: copies of the edge pixels (extend "copy") or black (extend "background"). */
static tm_status affine(const tm__image *in, int64_t w, int64_t h, double sx, double sy, double idx,
                        int copy_edges, tm__resample method, tm__image *out, tm_error *err) {
    const int C = in->channels;
    const int window = method == TM__RESAMPLE_BICUBIC ? 4 : method == TM__RESAMPLE_BILINEAR ? 2 : 1;
    const int offset = window / 2 - 1 > 0 ? window / 2 - 1 : 0;
    /* the embedded input: border of offset + 1 left/top, window - offset right/bottom */
    const int64_t border = offset + 1, EW = in->w + window - 1 + 2, EH = in->h + window - 1 + 2;
    uint8_t *e = calloc((size_t)(EW * EH * C), 1);
    tm__image o = {0};
    tm_status s = e ? image_alloc(&o, w, h, C, "resize", err) : tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    if (s) {
        free(e);
        return s;
    }
    if (copy_edges) {
        for (int64_t y = 0; y < EH; y++)
            for (int64_t x = 0; x < EW; x++) {
                int64_t ix = x - border, iy = y - border;
                ix = ix < 0 ? 0 : ix >= in->w ? in->w - 1 : ix;
                iy = iy < 0 ? 0 : iy >= in->h ? in->h - 1 : iy;
                memcpy(e + (y * EW + x) * C, in->px + (iy * in->w + ix) * C, (size_t)C);
            }
    } else {
        for (int64_t y = 0; y < in->h; y++)
            memcpy(e + ((y + border) * EW + border) * C, in->px + y * in->w * C, (size_t)(in->w * C));
    }
    /* the inverse of diag(sx, sy) as libvips computes it: 1 / det times the other entry */
    const double inv = 1.0 / (sx * sy), ia = inv * sy, id = inv * sx;
    /* the embedding displaces the input by one pixel more than idx */
    const double shift = idx - 1.0;
    const int64_t lo = offset, hi_x = offset + in->w, hi_y = offset + in->h;
    for (int64_t y = 0; y < h; y++) {
        double ix = 0.0 - shift + offset;
        const double iy = id * (double)y - shift + offset;
        uint8_t *q = o.px + y * w * C;
        for (int64_t x = 0; x < w; x++, ix += ia, q += C) {
            const double fx = floor(ix), fy = floor(iy);
            if (fx < lo || fx > hi_x || fy < lo || fy > hi_y) {
                memset(q, 0, (size_t)C);
                continue;
            }
            const int64_t px = (int64_t)ix, py = (int64_t)iy;
            if (method == TM__RESAMPLE_NEAREST) {
                memcpy(q, e + (py * EW + px) * C, (size_t)C);
            } else if (method == TM__RESAMPLE_BILINEAR) {
                const int X = (int)((ix - (double)px) * INTERPOLATE_SCALE);
                const int Y = (int)((iy - (double)py) * INTERPOLATE_SCALE);
                const int Yd = INTERPOLATE_SCALE - Y;
                const int c4 = (Y * X) >> INTERPOLATE_SHIFT, c2 = (Yd * X) >> INTERPOLATE_SHIFT;
                const int c3 = Y - c4, c1 = Yd - c2;
                const uint8_t *p1 = e + (py * EW + px) * C, *p3 = p1 + EW * C;
                for (int z = 0; z < C; z++)
                    q[z] = (uint8_t)((c1 * p1[z] + c2 * p1[z + C] + c3 * p3[z] + c4 * p3[z + C] +
                                      INTERPOLATE_SCALE / 2) >> INTERPOLATE_SHIFT);
            } else {
                const int six = (int)(ix * TRANSFORM_SCALE * 2) & (TRANSFORM_SCALE * 2 - 1);
                const int siy = (int)(iy * TRANSFORM_SCALE * 2) & (TRANSFORM_SCALE * 2 - 1);
                int cx[4], cy[4];
                catmull_weights((six + 1) >> 1, cx);
                catmull_weights((siy + 1) >> 1, cy);
                const uint8_t *p = e + ((py - 1) * EW + (px - 1)) * C;
                for (int z = 0; z < C; z++) {
                    int r[4];
                    for (int j = 0; j < 4; j++) {
                        const uint8_t *l = p + j * EW * C + z;
                        r[j] = fixed_round(cx[0] * l[0] + cx[1] * l[C] + cx[2] * l[2 * C] + cx[3] * l[3 * C]);
                    }
                    int v = fixed_round(cy[0] * r[0] + cy[1] * r[1] + cy[2] * r[2] + cy[3] * r[3]);
                    q[z] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
                }
            }
        }
    }
    free(e);
    *out = o;
    return TM_OK;
}

/* ---- Resampling: sharp's resize (vips_resize, kernel lanczos3) on uchar images ----------
 *
 * sharp premultiplies alpha (kept in uchar: the products are truncated), then vips_resize
 * reduces each axis that shrinks, vertical first: a box average by an integer factor while
 * the factor is at least twice the "gap" of 2 (rounding up the size, edge pixels repeated),
 * then a lanczos3 convolution of 2 * rint(3 * factor) + 1 taps whose weights, per 1/64th of
 * a pixel, are normalised in double and truncated to 12-bit fixed point. An axis that grows
 * goes through vips_affine with the Catmull-Rom interpolator, edges repeated and the input
 * displaced by half a pixel; the other axis is then sampled at scale 1 with that same
 * displacement. Alpha is divided back out and truncated. */

#define REDUCE_GAP 2.0
#define LANCZOS_PI 3.14159265358979323846

static double sinc(double x) {
    if (x == 0.0) return 1.0;
    x = x * LANCZOS_PI;
    return sin(x) / x;
}

static double lanczos3(double x) { return x >= -3 && x <= 3 ? sinc(x) * sinc(x / 3) : 0.0; }

/* The 65 masks of n taps (x = 0, 1/64 .. 1) in 12-bit fixed point. After the box shrink the
 * residual factor is under 2 * REDUCE_GAP, so n <= 2 * 12 + 1. */
#define MAX_TAPS 25
static void lanczos_masks(int n, double shrink, short *masks) {
    double c[MAX_TAPS];
    for (int t = 0; t <= TRANSFORM_SCALE; t++) {
        const double x = (float)t / TRANSFORM_SCALE, half = x + n / 2.0 - 1;
        double sum = 0.0;
        for (int i = 0; i < n; i++) sum += c[i] = lanczos3((i - half) / shrink);
        for (int i = 0; i < n; i++) c[i] /= sum;
        for (int i = 0; i < n; i++) masks[t * n + i] = (short)(c[i] * INTERPOLATE_SCALE);
    }
}

/* One axis of the image as lines of samples: sample k of line j at px[j * line + k * step],
 * each sample `width` bytes wide (the channels, or a whole row for the vertical axis). */
typedef struct axis_view {
    int64_t lines, length;      /* lines across the axis, samples along it */
    int64_t line, step, width;  /* strides in bytes */
} axis_view;

static axis_view view_of(const tm__image *im, int vertical) {
    const int64_t C = im->channels;
    if (vertical) return (axis_view){1, im->h, 0, im->w * C, im->w * C};
    return (axis_view){im->h, im->w, im->w * C, C, C};
}

static int64_t clamp_index(int64_t i, int64_t n) { return i < 0 ? 0 : i >= n ? n - 1 : i; }

/* vips_shrinkh/v with ceil: the mean of each k samples, sizes rounded up. */
static tm_status box_shrink(const tm__image *in, int vertical, int k, tm__image *out, tm_error *err) {
    const int64_t n = vertical ? in->h : in->w, m = (n + k - 1) / k;
    tm__image o = {0};
    tm_status s = image_alloc(&o, vertical ? in->w : m, vertical ? m : in->h, in->channels, "resize", err);
    if (s) return s;
    const axis_view a = view_of(in, vertical), b = view_of(&o, vertical);
    const uint32_t multiplier = (uint32_t)((1LL << 32) / (256 * k));
    for (int64_t j = 0; j < a.lines; j++)
        for (int64_t x = 0; x < m; x++)
            for (int64_t z = 0; z < a.width; z++) {
                uint32_t sum = (uint32_t)(k / 2);
                for (int i = 0; i < k; i++) sum += in->px[j * a.line + clamp_index(x * k + i, n) * a.step + z];
                o.px[j * b.line + x * b.step + z] = (uint8_t)((sum * multiplier) >> 24);
            }
    *out = o;
    return TM_OK;
}

/* vips_reduceh/v by `shrink` (>= 1) with gap 2, into a new image. */
static tm_status reduce(const tm__image *in, int vertical, double shrink, tm__image *out, tm_error *err) {
    const int64_t n_in = vertical ? in->h : in->w;
    const int64_t size = (int64_t)((double)n_in / shrink + 0.5);
    double extra = (double)size * shrink - (double)n_in, residual = shrink;
    const int k = (int)fmax(1.0, floor((double)n_in / (double)size / REDUCE_GAP));
    tm__image shrunk = {0};
    const tm__image *src = in;
    if (k > 1) {
        tm_status s = box_shrink(in, vertical, k, &shrunk, err);
        if (s) return s;
        src = &shrunk;
        residual /= k;
        extra /= k;
    }
    tm__image o = {0};
    tm_status s;
    if (residual == 1.0) {
        if (src == &shrunk) {
            *out = shrunk;
            return TM_OK;
        }
        s = image_alloc(&o, in->w, in->h, in->channels, "resize", err);
        if (!s) memcpy(o.px, in->px, (size_t)(in->w * in->h * in->channels));
        if (!s) *out = o;
        return s;
    }
    const int taps = 2 * (int)rint(3 * residual) + 1;
    if (taps > MAX_TAPS) {
        tm__image_clear(&shrunk);
        return tm__fail(err, TM_ERR_RUNTIME, "resize: reduce factor %g too large", residual);
    }
    short *masks = malloc(sizeof(short) * (size_t)taps * (TRANSFORM_SCALE + 1));
    s = masks ? image_alloc(&o, vertical ? src->w : size, vertical ? size : src->h, src->channels, "resize", err)
              : tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    if (s) {
        free(masks);
        tm__image_clear(&shrunk);
        return s;
    }
    lanczos_masks(taps, residual, masks);
    const double offset = (1 + extra) / 2.0 - 1;
    const int pad = (int)ceil(taps / 2.0) - 1;
    const int64_t n = vertical ? src->h : src->w;
    const axis_view a = view_of(src, vertical), b = view_of(&o, vertical);
    for (int64_t j = 0; j < a.lines; j++) {
        double X = 0.5 * residual - 0.5 - offset;
        for (int64_t x = 0; x < size; x++, X += residual) {
            const int64_t first = (int64_t)(int)X - pad;
            const int t = (((int)(X * TRANSFORM_SCALE * 2) & (TRANSFORM_SCALE * 2 - 1)) + 1) >> 1;
            const short *c = masks + t * taps;
            for (int64_t z = 0; z < a.width; z++) {
                int sum = INTERPOLATE_SCALE >> 1;
                for (int i = 0; i < taps; i++)
                    sum += c[i] * src->px[j * a.line + clamp_index(first + i, n) * a.step + z];
                sum >>= INTERPOLATE_SHIFT;
                o.px[j * b.line + x * b.step + z] = (uint8_t)(sum < 0 ? 0 : sum > 255 ? 255 : sum);
            }
        }
    }
    free(masks);
    tm__image_clear(&shrunk);
    *out = o;
    return TM_OK;
}

/* sharp's premultiply().cast(uchar) and, after, unpremultiply().cast(uchar); the last
 * channel is alpha. */
static void premultiply(tm__image *im, int undo) {
    const int C = im->channels;
    for (int64_t i = 0; i < im->w * im->h; i++) {
        uint8_t *p = im->px + i * C;
        const uint8_t alpha = p[C - 1];
        const float factor = undo ? (alpha == 0 ? 0.0f : (float)(255.0 / alpha)) : (float)((float)alpha / 255.0);
        for (int z = 0; z < C - 1; z++) {
            const float v = factor * (float)p[z];
            p[z] = (uint8_t)(v >= 255.0f ? 255.0f : v);
        }
    }
}

static tm_status lanczos_resize(const tm__image *in, int64_t w, int64_t h, tm__image *out, tm_error *err) {
    tm__image cur = {0};
    tm_status s = image_alloc(&cur, in->w, in->h, in->channels, "resize", err);
    if (s) return s;
    memcpy(cur.px, in->px, (size_t)(in->w * in->h * in->channels));
    const int alpha = in->channels == 2 || in->channels == 4;
    const double hshrink = (double)in->w / (double)w, vshrink = (double)in->h / (double)h;
    if (hshrink == 1.0 && vshrink == 1.0) {
        *out = cur;
        return TM_OK;
    }
    if (alpha) premultiply(&cur, 0);
    double hscale = 1.0 / hshrink, vscale = 1.0 / vshrink;
    hscale = fmax(hscale, 1.0 / (double)in->w);
    vscale = fmax(vscale, 1.0 / (double)in->h);
    for (int vertical = 1; vertical >= 0; vertical--) {
        const double scale = vertical ? vscale : hscale;
        if (scale >= 1.0) continue;
        tm__image next;
        s = reduce(&cur, vertical, 1.0 / scale, &next, err);
        tm__image_clear(&cur);
        if (s) return s;
        cur = next;
    }
    if (hscale > 1.0 || vscale > 1.0) {
        const double sx = hscale > 1.0 ? hscale : 1.0, sy = vscale > 1.0 ? vscale : 1.0;
        const int64_t ow = (int64_t)floor((double)cur.w * sx + 0.5), oh = (int64_t)floor((double)cur.h * sy + 0.5);
        tm__image next;
        s = affine(&cur, ow, oh, sx, sy, 0.5, 1, TM__RESAMPLE_BICUBIC, &next, err);
        tm__image_clear(&cur);
        if (s) return s;
        cur = next;
    }
    if (alpha) premultiply(&cur, 1);
    if (cur.w != w || cur.h != h) {
        tm__image_clear(&cur);
        return tm__fail(err, TM_ERR_RUNTIME, "lanczos resize to %lld x %lld made %lld x %lld", (long long)w,
                        (long long)h, (long long)cur.w, (long long)cur.h);
    }
    *out = cur;
    return TM_OK;
}

tm_status tm__image_resize(const tm__image *in, int64_t w, int64_t h, tm__resample method,
                           tm__image *out, tm_error *err) {
    if (w <= 0 || h <= 0 || h > MAX_PIXELS / w)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "resize to %lld x %lld: out of range", (long long)w,
                        (long long)h);
    if (method == TM__RESAMPLE_LANCZOS) return lanczos_resize(in, w, h, out, err);
    return affine(in, w, h, (double)w / (double)in->w, (double)h / (double)in->h, 0.0, 0, method, out, err);
}

tm_status tm__image_center_crop(const tm__image *in, int64_t w, int64_t h, tm__image *out, tm_error *err) {
    tm__image o = {0};
    tm_status s = image_alloc(&o, w, h, in->channels, "center crop", err);
    if (s) return s;
    /* sharp: extract at floor(offset) where the image is larger, extend (black) by
     * floor(-offset) before where it is smaller */
    const double ox = (double)(in->w - w) / 2, oy = (double)(in->h - h) / 2;
    const int64_t x0 = ox >= 0 ? (int64_t)floor(ox) : -(int64_t)floor(-ox);
    const int64_t y0 = oy >= 0 ? (int64_t)floor(oy) : -(int64_t)floor(-oy);
    const int C = in->channels;
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < w; x++) {
            int64_t sx = x + x0, sy = y + y0;
            uint8_t *q = o.px + (y * w + x) * C;
            if (sx < 0 || sy < 0 || sx >= in->w || sy >= in->h) memset(q, 0, (size_t)C);
            else memcpy(q, in->px + (sy * in->w + sx) * C, (size_t)C);
        }
    *out = o;
    return TM_OK;
}
