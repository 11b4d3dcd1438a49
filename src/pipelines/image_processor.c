/* The image processors of transformers.js 4.3 (ImageProcessor.preprocess and the
 * ConvNeXT override of resize) read from preprocessor_config.json: RGB conversion, resize
 * by sharp (src/media/image.c), centre crop, then rescale and normalize in its order and
 * precision (a Float32Array: each step rounded to float32, the arithmetic in doubles) and
 * padding. Not the pipelines' post-processing. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "image_processor.h"
#include "../core/status.h"

typedef enum proc_kind { PROC_VIT, PROC_CONVNEXT, PROC_CLIP, PROC_DPT, PROC_DETR } proc_kind;

static const struct {
    const char *name;
    proc_kind kind;
} known[] = {
    {"ViTImageProcessor", PROC_VIT},           {"ViTFeatureExtractor", PROC_VIT},
    {"ConvNextImageProcessor", PROC_CONVNEXT}, {"ConvNextFeatureExtractor", PROC_CONVNEXT},
    {"CLIPImageProcessor", PROC_CLIP},         {"CLIPFeatureExtractor", PROC_CLIP},
    {"DPTImageProcessor", PROC_DPT},           {"DPTFeatureExtractor", PROC_DPT},
    {"DetrImageProcessor", PROC_DETR},         {"DetrFeatureExtractor", PROC_DETR},
};

/* size, crop_size and pad_size: a number, or an object of the keys below (-1: absent). */
typedef struct size_spec {
    int present;
    int64_t number;
    int64_t shortest_edge, longest_edge, height, width;
} size_spec;

struct tm__image_proc {
    char type[64];
    proc_kind kind;
    double mean[4], std[4];
    int n_mean, n_std;          /* 1: one value for every channel */
    tm__resample resample;
    int do_rescale, do_normalize, do_resize, do_center_crop, do_convert_rgb, do_pad, do_flip;
    double rescale_factor;
    size_spec size, crop_size, pad_size;
    int64_t max_size;           /* config.max_size for a number size, -1: none */
    int64_t size_divisibility;  /* -1: none */
    int keep_aspect_ratio;
    int64_t ensure_multiple_of; /* -1: none */
    double crop_pct;            /* ConvNeXT */
};

/* A value is "defined" as JavaScript's ?? sees it: present and not null. */
static const tm_json *defined(const tm_json *c, const char *key) {
    const tm_json *v = tm_json_get(c, key);
    return v && v->type != TM_JSON_NULL ? v : NULL;
}

static tm_status get_bool(const tm_json *c, const char *key, int dflt, int *out, const char *src, tm_error *err) {
    const tm_json *v = defined(c, key);
    if (!v) {
        *out = dflt;
        return TM_OK;
    }
    if (v->type != TM_JSON_BOOL) return tm__fail(err, TM_ERR_PARSE, "%s: %s is not a boolean", src, key);
    *out = v->number != 0;
    return TM_OK;
}

static tm_status get_int(const tm_json *v, const char *key, int64_t *out, const char *src, tm_error *err) {
    if (v->type != TM_JSON_NUMBER || v->number != floor(v->number) || v->number < 0 || v->number > 1e9)
        return tm__fail(err, TM_ERR_PARSE, "%s: %s is not a non-negative integer", src, key);
    *out = (int64_t)v->number;
    return TM_OK;
}

static tm_status get_size(const tm_json *c, const char *key, size_spec *out, const char *src, tm_error *err) {
    memset(out, 0, sizeof *out);
    out->number = out->shortest_edge = out->longest_edge = out->height = out->width = -1;
    const tm_json *v = defined(c, key);
    if (!v) return TM_OK;
    out->present = 1;
    if (v->type == TM_JSON_NUMBER) return get_int(v, key, &out->number, src, err);
    if (v->type != TM_JSON_OBJECT) return tm__fail(err, TM_ERR_PARSE, "%s: %s is not a number or an object", src, key);
    static const char *const keys[] = {"shortest_edge", "longest_edge", "height", "width"};
    int64_t *fields[] = {&out->shortest_edge, &out->longest_edge, &out->height, &out->width};
    for (int i = 0; i < 4; i++) {
        const tm_json *f = defined(v, keys[i]);
        char name[64];
        snprintf(name, sizeof name, "%s.%s", key, keys[i]);
        tm_status s = f ? get_int(f, name, fields[i], src, err) : TM_OK;
        if (s) return s;
    }
    return TM_OK;
}

/* image_mean / image_std (or mean / std): a number or an array of numbers. */
static tm_status get_stats(const tm_json *c, const char *key, const char *alias, double *out, int *n,
                           const char *src, tm_error *err) {
    const tm_json *v = defined(c, key);
    if (!v) v = defined(c, alias);
    *n = 0;
    if (!v) return TM_OK;
    if (v->type == TM_JSON_NUMBER) {
        out[0] = v->number;
        *n = 1;
        return TM_OK;
    }
    if (v->type != TM_JSON_ARRAY || v->n < 1 || v->n > 4)
        return tm__fail(err, TM_ERR_PARSE, "%s: %s is not a number or an array of 1 to 4 numbers", src, key);
    for (int i = 0; i < v->n; i++) {
        if (v->items[i].type != TM_JSON_NUMBER) return tm__fail(err, TM_ERR_PARSE, "%s: %s[%d] is not a number", src, key, i);
        out[i] = v->items[i].number;
    }
    *n = v->n;
    return TM_OK;
}

static tm_status read_config(tm__image_proc *p, const tm_json *c, const char *src, tm_error *err) {
    tm_status s = get_stats(c, "image_mean", "mean", p->mean, &p->n_mean, src, err);
    if (!s) s = get_stats(c, "image_std", "std", p->std, &p->n_std, src, err);
    const tm_json *v = defined(c, "resample");
    int64_t resample = 2;
    if (!s && v) s = get_int(v, "resample", &resample, src, err);
    if (s) return s;
    /* transformers.js in node: 4 (box) and 5 (hamming) fall back to bilinear */
    if (resample == 0) p->resample = TM__RESAMPLE_NEAREST;
    else if (resample == 2 || resample == 4 || resample == 5) p->resample = TM__RESAMPLE_BILINEAR;
    else if (resample == 3) p->resample = TM__RESAMPLE_BICUBIC;
    else if (resample == 1) p->resample = TM__RESAMPLE_LANCZOS;
    else return tm__fail(err, TM_ERR_PARSE, "%s: resample %lld is not a PIL filter number", src, (long long)resample);
    p->rescale_factor = 1.0 / 255;
    v = defined(c, "rescale_factor");
    if (v && v->type != TM_JSON_NUMBER) return tm__fail(err, TM_ERR_PARSE, "%s: rescale_factor is not a number", src);
    if (v) p->rescale_factor = v->number;
    s = get_bool(c, "do_rescale", 1, &p->do_rescale, src, err);
    if (!s) s = get_bool(c, "do_normalize", 0, &p->do_normalize, src, err);
    if (!s) s = get_size(c, "size", &p->size, src, err);
    if (!s && !p->size.present) s = get_size(c, "image_size", &p->size, src, err);
    if (!s) s = get_bool(c, "do_resize", p->size.present, &p->do_resize, src, err);
    if (!s) s = get_bool(c, "do_center_crop", 0, &p->do_center_crop, src, err);
    if (!s) s = get_size(c, "crop_size", &p->crop_size, src, err);
    if (!s) s = get_bool(c, "do_convert_rgb", 1, &p->do_convert_rgb, src, err);
    if (!s) s = get_bool(c, "do_pad", 0, &p->do_pad, src, err);
    if (!s) s = get_size(c, "pad_size", &p->pad_size, src, err);
    if (!s) s = get_bool(c, "do_flip_channel_order", 0, &p->do_flip, src, err);
    if (!s) s = get_bool(c, "keep_aspect_ratio", 0, &p->keep_aspect_ratio, src, err);
    p->max_size = p->size_divisibility = p->ensure_multiple_of = -1;
    if (!s && (v = defined(c, "max_size"))) s = get_int(v, "max_size", &p->max_size, src, err);
    if (!s && (v = defined(c, "size_divisibility"))) s = get_int(v, "size_divisibility", &p->size_divisibility, src, err);
    if (!s && p->size_divisibility < 0 && (v = defined(c, "size_divisor")))
        s = get_int(v, "size_divisor", &p->size_divisibility, src, err);
    if (!s && (v = defined(c, "ensure_multiple_of"))) s = get_int(v, "ensure_multiple_of", &p->ensure_multiple_of, src, err);
    if (s) return s;
    if (p->size_divisibility == 0 || p->ensure_multiple_of == 0)
        return tm__fail(err, TM_ERR_PARSE, "%s: size_divisibility and ensure_multiple_of must be positive", src);
    int flag = 0;
    if ((s = get_bool(c, "do_thumbnail", 0, &flag, src, err))) return s;
    if (flag) return tm__fail(err, TM_ERR_UNSUPPORTED, "%s: do_thumbnail is not supported yet", src);
    if ((s = get_bool(c, "do_crop_margin", 0, &flag, src, err))) return s;
    if (flag) return tm__fail(err, TM_ERR_UNSUPPORTED, "%s: do_crop_margin is not supported yet", src);
    /* ImageProcessor's constructor: a width/height size is the pad size when nothing else is */
    if (p->do_pad && !p->pad_size.present && p->size_divisibility < 0 && p->size.width >= 0 && p->size.height >= 0) {
        p->pad_size = p->size;
        p->pad_size.number = -1;
    }
    if (p->do_center_crop && !p->crop_size.present)
        return tm__fail(err, TM_ERR_PARSE, "%s: do_center_crop without crop_size", src);
    if (p->do_normalize && (!p->n_mean || !p->n_std))
        return tm__fail(err, TM_ERR_PARSE, "%s: do_normalize without image_mean and image_std", src);
    p->crop_pct = 224.0 / 256;
    if ((v = defined(c, "crop_pct"))) {
        if (v->type != TM_JSON_NUMBER || !(v->number > 0))
            return tm__fail(err, TM_ERR_PARSE, "%s: crop_pct is not a positive number", src);
        p->crop_pct = v->number;
    }
    if (p->kind == PROC_CONVNEXT && p->do_resize && p->size.shortest_edge < 0)
        return tm__fail(err, TM_ERR_PARSE, "%s: ConvNextImageProcessor needs size.shortest_edge", src);
    return TM_OK;
}

tm_status tm__image_proc_open(const tm_json *config, const char *source, tm__image_proc **out, tm_error *err) {
    if (!config || config->type != TM_JSON_OBJECT)
        return tm__fail(err, TM_ERR_PARSE, "%s: preprocessor_config.json is not a JSON object", source);
    const char *type = tm_json_get_string(config, "image_processor_type");
    if (!type) type = tm_json_get_string(config, "feature_extractor_type");
    if (!type) return tm__fail(err, TM_ERR_PARSE, "%s: no image_processor_type in preprocessor_config.json", source);
    size_t k = 0;
    while (k < sizeof known / sizeof known[0] && strcmp(known[k].name, type)) k++;
    if (k == sizeof known / sizeof known[0])
        return tm__fail(err, TM_ERR_UNSUPPORTED,
                        "%s: image processor '%s' is not supported (we have ViTImageProcessor, "
                        "ConvNextImageProcessor, CLIPImageProcessor, DPTImageProcessor, DetrImageProcessor)",
                        source, type);
    tm__image_proc *p = calloc(1, sizeof *p);
    if (!p) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    snprintf(p->type, sizeof p->type, "%s", type);
    p->kind = known[k].kind;
    tm_status s = read_config(p, config, source, err);
    if (s) {
        free(p);
        return s;
    }
    *out = p;
    return TM_OK;
}

void tm__image_proc_free(tm__image_proc *p) { free(p); }

const char *tm__image_proc_type(const tm__image_proc *p) { return p->type; }

int tm__image_proc_has_pixel_mask(const tm__image_proc *p) { return p->kind == PROC_DETR; }

/* Math.floor(Number(v.toFixed(2))): printf's exact decimal rounding agrees with toFixed
 * here, since a tie at .xx5 would need v * 100 to be a half, which floor does not see. */
static int64_t floor_fixed2(double v) {
    char buf[64];
    snprintf(buf, sizeof buf, "%.2f", v);
    return (int64_t)floor(strtod(buf, NULL));
}

static double bankers_round(double x) {
    double r = round(x);
    if (fabs(x - trunc(x)) == 0.5) r = 2.0 * round(x / 2.0);
    return r;
}

/* ImageProcessor.get_resize_output_image_size: (width, height). */
static tm_status output_size(const tm__image_proc *p, int64_t src_w, int64_t src_h, const size_spec *size,
                             int64_t *w, int64_t *h, tm_error *err) {
    int64_t shortest = -1, longest = -1;
    if (size->number >= 0) {
        shortest = size->number;
        longest = p->max_size >= 0 ? p->max_size : shortest;
    } else {
        shortest = size->shortest_edge;
        longest = size->longest_edge;
    }
    if (shortest >= 0 || longest >= 0) {
        double sf = shortest < 0 ? 1 : fmax((double)shortest / (double)src_w, (double)shortest / (double)src_h);
        double nw = (double)src_w * sf, nh = (double)src_h * sf;
        double lf = longest < 0 ? 1 : fmin((double)longest / nw, (double)longest / nh);
        *w = floor_fixed2(nw * lf);
        *h = floor_fixed2(nh * lf);
        if (p->size_divisibility > 0) {
            int64_t d = p->size_divisibility;
            *w = (*w / d > 1 ? *w / d : 1) * d;
            *h = (*h / d > 1 ? *h / d : 1) * d;
        }
        return TM_OK;
    }
    if (size->width >= 0 && size->height >= 0) {
        *w = size->width;
        *h = size->height;
        if (p->keep_aspect_ratio && p->ensure_multiple_of > 0) {
            double scale_h = (double)*h / (double)src_h, scale_w = (double)*w / (double)src_w;
            if (fabs(1 - scale_w) < fabs(1 - scale_h)) scale_h = scale_w;
            else scale_w = scale_h;
            double m = (double)p->ensure_multiple_of;
            *h = (int64_t)(bankers_round(scale_h * (double)src_h / m) * m);
            *w = (int64_t)(bankers_round(scale_w * (double)src_w / m) * m);
        }
        return TM_OK;
    }
    if (p->size_divisibility > 0) {
        int64_t d = p->size_divisibility;
        *w = (src_w / d > 1 ? src_w / d : 1) * d;
        *h = (src_h / d > 1 ? src_h / d : 1) * d;
        return TM_OK;
    }
    return tm__fail(err, TM_ERR_UNSUPPORTED, "%s: the size setting of preprocessor_config.json gives no output size",
                    p->type);
}

/* RawImage.resize: nothing when the size is already right. */
static tm_status resize_to(const tm__image_proc *p, tm__image *im, int64_t w, int64_t h, tm_error *err) {
    if (im->w == w && im->h == h) return TM_OK;
    tm__image out;
    tm_status s = tm__image_resize(im, w, h, p->resample, &out, err);
    if (s) return s;
    tm__image_clear(im);
    *im = out;
    return TM_OK;
}

static tm_status crop_to(tm__image *im, int64_t w, int64_t h, tm_error *err) {
    if (im->w == w && im->h == h) return TM_OK;
    tm__image out;
    tm_status s = tm__image_center_crop(im, w, h, &out, err);
    if (s) return s;
    tm__image_clear(im);
    *im = out;
    return TM_OK;
}

static tm_status resize(const tm__image_proc *p, tm__image *im, tm_error *err) {
    int64_t w, h;
    if (p->kind == PROC_CONVNEXT) {
        int64_t se = p->size.shortest_edge;
        if (se >= 384) return resize_to(p, im, se, se, err);
        size_spec sub = {1, -1, (int64_t)floor((double)se / p->crop_pct), -1, -1, -1};
        tm_status s = output_size(p, im->w, im->h, &sub, &w, &h, err);
        if (!s) s = resize_to(p, im, w, h, err);
        if (!s) s = crop_to(im, se, se, err);
        return s;
    }
    tm_status s = output_size(p, im->w, im->h, &p->size, &w, &h, err);
    return s ? s : resize_to(p, im, w, h, err);
}

tm_status tm__image_proc_run(const tm__image_proc *p, const tm__image *image, tm_tensor **pixel_values,
                             int64_t reshaped[2], tm_error *err) {
    tm__image im = {0};
    tm_status s = TM_OK;
    size_t bytes = (size_t)(image->w * image->h * image->channels);
    if (!(im.px = malloc(bytes ? bytes : 1))) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    memcpy(im.px, image->px, bytes);
    im.w = image->w, im.h = image->h, im.channels = image->channels;
    if (p->do_convert_rgb) s = tm__image_to_rgb(&im, err);
    if (!s && p->do_resize) s = resize(p, &im, err);
    if (!s && p->do_center_crop) {
        int64_t cw = p->crop_size.number >= 0 ? p->crop_size.number : p->crop_size.width;
        int64_t ch = p->crop_size.number >= 0 ? p->crop_size.number : p->crop_size.height;
        if (cw <= 0 || ch <= 0) s = tm__fail(err, TM_ERR_PARSE, "%s: crop_size has no width and height", p->type);
        else s = crop_to(&im, cw, ch, err);
    }
    const int C = im.channels;
    if (!s && p->do_normalize && ((p->n_mean != 1 && p->n_mean != C) || (p->n_std != 1 && p->n_std != C)))
        s = tm__fail(err, TM_ERR_SHAPE, "%s: image_mean and image_std have %d and %d values for %d channels", p->type,
                     p->n_mean, p->n_std, C);
    if (!s && p->do_flip && C != 3)
        s = tm__fail(err, TM_ERR_UNSUPPORTED, "%s: flipping the channel order needs an RGB image", p->type);
    /* the padded size (pad_image pads at the bottom and right with zeros) */
    int64_t H = im.h, W = im.w;
    if (!s && p->do_pad) {
        if (p->pad_size.present) {
            W = p->pad_size.number >= 0 ? p->pad_size.number : p->pad_size.width;
            H = p->pad_size.number >= 0 ? p->pad_size.number : p->pad_size.height;
        } else if (p->size_divisibility > 0) {
            int64_t d = p->size_divisibility;
            W = (im.w + d - 1) / d * d;
            H = (im.h + d - 1) / d * d;
        }
        if (W < im.w || H < im.h)
            s = tm__fail(err, TM_ERR_UNSUPPORTED, "%s: pad size %lld x %lld is smaller than the image (%lld x %lld)",
                         p->type, (long long)W, (long long)H, (long long)im.w, (long long)im.h);
    }
    int64_t dims[4] = {1, C, H, W};
    tm_tensor *t = s ? NULL : tm_tensor_new(TM_FLOAT, 4, dims);
    if (!s && !t) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    if (!s) {
        float *o = tm_tensor_data(t);
        memset(o, 0, (size_t)(C * H * W) * sizeof *o);
        for (int64_t y = 0; y < im.h; y++)
            for (int64_t x = 0; x < im.w; x++)
                for (int c = 0; c < C; c++) {
                    float v = im.px[(y * im.w + x) * C + c];
                    if (p->do_rescale) v = (float)(p->rescale_factor * (double)v);
                    if (p->do_normalize) {
                        double mean = p->mean[p->n_mean == 1 ? 0 : c], std = p->std[p->n_std == 1 ? 0 : c];
                        v = (float)(((double)v - mean) / std);
                    }
                    int oc = p->do_flip ? 2 - c : c;
                    o[((int64_t)oc * H + y) * W + x] = v;
                }
        reshaped[0] = im.h;
        reshaped[1] = im.w;
        *pixel_values = t;
    }
    tm__image_clear(&im);
    return s;
}
