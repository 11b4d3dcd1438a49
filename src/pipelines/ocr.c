/* OCR with PaddleOCR's PP-OCR models: detection (DB) with PaddleOCR's pre- and
 * post-processing (its predict_system), the optional direction classifier, recognition
 * (CTC) of each line fed as put_line says, lines sorted in reading order. Not a Hugging
 * Face task: the models are a folder of their own (include/transmuter.h, "OCR"); the
 * geometry is src/media/geometry.c. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "../core/status.h"
#include "../media/geometry.h"
#include "../media/image.h"

/* The sizes PaddleOCR feeds its models: the detector sees sides that are multiples of 32;
 * the classifier lines of 48 x 192, six at a time; the recognizer lines 48 high. */
#define DET_MULTIPLE 32
#define CLS_HEIGHT 48
#define CLS_WIDTH 192
#define BATCH 6
#define REC_HEIGHT 48
#define REC_WIDTH_STEP 32
#define REC_MAX_WIDTH 16384
#define MIN_BOX_SIDE 3
/* A line is cropped for the recognizer with this fraction of its height added above and
 * below (the box reported stays the detector's): with the detector's tight boxes the
 * recognizer drops spaces between small words. Character error rate of `make ocr-check`'s
 * 21 images (1,639 characters) by margin: 0 0.55%, 0.05 0.06%, 0.1 0.06%, 0.15 and 0.2
 * none, 0.25 1.04% (the upside-down line is then not turned). */
#define CROP_MARGIN 0.15
/* Arcs of the unclip offset are drawn within this distance of the circle (Clipper's
 * default ArcTolerance, which PaddleOCR's pyclipper uses). */
#define ARC_TOLERANCE 0.25

struct tm_ocr {
    tm_model *det, *rec, *cls;   /* cls NULL without the classifier */
    const char *det_input, *rec_input, *cls_input;
    char *det_path, *rec_path, *cls_path, *dict_path;
    char *dict_text;             /* the dictionary file, its lines cut in place */
    const char **classes;        /* [0] the CTC blank (NULL), the lines, then " " */
    size_t n_classes;
    int rec_height;
    tm_ocr_options opts;
};

struct tm_ocr_result {
    size_t n;
    tm_ocr_line *lines;
    char *text;                  /* every line's text, NUL-terminated one after another */
};

void tm_ocr_options_default(tm_ocr_options *o) {
    memset(o, 0, sizeof *o);
    o->size = sizeof *o;
    o->use_classifier = 1;
    o->max_side = 2048;
    o->det_threshold = 0.03f;
    o->box_threshold = 0.6f;
    o->unclip_ratio = 1.5f;
    o->classifier_threshold = 0.9f;
    o->text_threshold = 0.5f;
}

/* ---- Loading ---------------------------------------------------------------------------- */

static char *file_path(const char *folder, const char *given, const char *name) {
    if (given) return strdup(given);
    if (!folder) return NULL;
    size_t n = strlen(folder) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", folder, name);
    return p;
}

static tm_status need_file(const char *what, const char *path, tm_error *err) {
    if (!path) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "OCR: no folder and no path for the %s", what);
    struct stat st;
    if (stat(path, &st) != 0)
        return tm__fail(err, TM_ERR_NOT_FOUND, "OCR %s not found: %s (%s)", what, path, strerror(errno));
    if (!S_ISREG(st.st_mode)) return tm__fail(err, TM_ERR_IO, "OCR %s is not a file: %s", what, path);
    return TM_OK;
}

/* Loads one model and checks its one input is (N, 3, H, W) float and its first output has
 * `out_rank` dims; *input gets the input's name. */
static tm_status load_model(const char *what, const char *path, const tm_ocr_options *o, int out_rank,
                            tm_model **model, const char **input, tm_error *err) {
    tm_status s = need_file(what, path, err);
    if (s) return s;
    tm_load_options lo;
    tm_load_options_default(&lo);
    lo.threads = o->threads;
    tm_model *m;
    if ((s = tm_model_load(path, &lo, &m, err))) return s;
    tm_value_desc in, out;
    const char *missing = tm_model_missing_ops(m);
    if (missing) {
        s = tm__fail(err, TM_ERR_UNSUPPORTED, "OCR %s %s uses operators we do not run: %s", what, path, missing);
    } else if (tm_model_n_inputs(m) != 1 || tm_model_n_outputs(m) < 1 || tm_model_input(m, 0, &in) ||
               tm_model_output(m, 0, &out) || in.dtype != TM_FLOAT || in.rank != 4 ||
               (in.dims[1] != 3 && in.dims[1] != -1) || out.rank != out_rank) {
        s = tm__fail(err, TM_ERR_UNSUPPORTED, "OCR %s %s: not a PaddleOCR model of this kind (want one float input "
                     "(N, 3, H, W) and an output of rank %d)", what, path, out_rank);
    }
    if (s) {
        tm_model_free(m);
        return s;
    }
    *model = m;
    *input = in.name;
    return TM_OK;
}

/* The dictionary: one character (or string) a line, classes 1..n; class 0 is the CTC blank
 * and class n + 1 a space, as PaddleOCR's use_space_char. */
static tm_status load_dictionary(tm_ocr *o, tm_error *err) {
    tm_status s = need_file("dictionary", o->dict_path, err);
    if (s) return s;
    FILE *f = fopen(o->dict_path, "rb");
    if (!f) return tm__fail(err, TM_ERR_IO, "OCR dictionary %s: %s", o->dict_path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *text = malloc(cap + 1);
    for (size_t got; text && (got = fread(text + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            char *grown = cap < ((size_t)1 << 26) ? realloc(text, 2 * cap + 1) : NULL;
            if (!grown) {
                free(text);
                text = NULL;
                break;
            }
            text = grown;
            cap *= 2;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (!text || bad) {
        free(text);
        return tm__fail(err, bad ? TM_ERR_IO : TM_ERR_NO_MEMORY, "OCR dictionary %s: %s", o->dict_path,
                        bad ? "read error" : "out of memory or larger than 64 MiB");
    }
    text[n] = 0;
    size_t lines = 0;
    for (size_t i = 0; i < n; i++) lines += text[i] == '\n';
    if (n > 0 && text[n - 1] != '\n') lines++;
    o->classes = malloc((lines + 2) * sizeof *o->classes);
    if (!o->classes) {
        free(text);
        return tm__fail(err, TM_ERR_NO_MEMORY, "OCR dictionary: out of memory");
    }
    size_t k = 0;
    o->classes[k++] = NULL;
    for (char *line = text; line < text + n;) {
        char *end = memchr(line, '\n', (size_t)(text + n - line));
        if (!end) end = text + n;
        *end = 0;
        if (end > line && end[-1] == '\r') end[-1] = 0;
        o->classes[k++] = line;
        line = end + 1;
    }
    o->classes[k++] = " ";
    o->n_classes = k;
    o->dict_text = text;
    if (lines == 0) return tm__fail(err, TM_ERR_PARSE, "OCR dictionary %s is empty", o->dict_path);
    return TM_OK;
}

void tm_ocr_free(tm_ocr *o) {
    if (!o) return;
    tm_model_free(o->det);
    tm_model_free(o->rec);
    tm_model_free(o->cls);
    free(o->det_path);
    free(o->rec_path);
    free(o->cls_path);
    free(o->dict_path);
    free(o->dict_text);
    free(o->classes);
    free(o);
}

tm_status tm_ocr_create(const char *folder, const tm_ocr_options *opts, tm_ocr **out, tm_error *err) {
    if (!out) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_ocr_create: out is NULL");
    tm_ocr *o = calloc(1, sizeof *o);
    if (!o) return tm__fail(err, TM_ERR_NO_MEMORY, "OCR: out of memory");
    tm_ocr_options_default(&o->opts);
    if (opts) memcpy(&o->opts, opts, opts->size < sizeof o->opts ? opts->size : sizeof o->opts);
    o->opts.size = sizeof o->opts;
    const tm_ocr_options *op = &o->opts;
    o->det_path = file_path(folder, op->detection_model, TM_OCR_DETECTION_FILE);
    o->rec_path = file_path(folder, op->recognition_model, TM_OCR_RECOGNITION_FILE);
    o->cls_path = file_path(folder, op->classifier_model, TM_OCR_CLASSIFIER_FILE);
    o->dict_path = file_path(folder, op->dictionary, TM_OCR_DICTIONARY_FILE);
    /* the options' paths are the caller's: keep only our copies */
    o->opts.detection_model = o->opts.recognition_model = o->opts.classifier_model = o->opts.dictionary = NULL;
    tm_status s = TM_OK;
    if (!(op->det_threshold > 0 && op->det_threshold < 1) || !(op->box_threshold >= 0 && op->box_threshold < 1) ||
        !(op->unclip_ratio > 0 && op->unclip_ratio < 100) || op->max_side < 0 ||
        (op->max_side > 0 && op->max_side < DET_MULTIPLE))
        s = tm__fail(err, TM_ERR_INVALID_ARGUMENT, "OCR options: det_threshold and box_threshold must lie in "
                     "(0, 1), unclip_ratio in (0, 100), max_side be 0 or at least %d", DET_MULTIPLE);
    if (!s) s = load_model("detection model", o->det_path, op, 4, &o->det, &o->det_input, err);
    if (!s) s = load_model("recognition model", o->rec_path, op, 3, &o->rec, &o->rec_input, err);
    if (!s && op->use_classifier)
        s = load_model("direction classifier", o->cls_path, op, 2, &o->cls, &o->cls_input, err);
    if (!s) s = load_dictionary(o, err);
    if (!s) {
        tm_value_desc in, out;
        tm_model_input(o->rec, 0, &in);
        tm_model_output(o->rec, 0, &out);
        o->rec_height = in.dims[2] > 0 ? (int)in.dims[2] : REC_HEIGHT;
        if (out.dims[2] > 0 && (size_t)out.dims[2] != o->n_classes)
            s = tm__fail(err, TM_ERR_INVALID_ARGUMENT, "OCR dictionary %s has %zu entries, and with the blank and "
                         "the space %zu classes, but the recognition model %s gives %lld", o->dict_path,
                         o->n_classes - 2, o->n_classes, o->rec_path, (long long)out.dims[2]);
    }
    if (s) {
        tm_ocr_free(o);
        return s;
    }
    *out = o;
    return TM_OK;
}

/* ---- Running a model ---------------------------------------------------------------------- */

/* A (n, 3, h, w) float tensor of zeros, PaddleOCR's padding. */
static tm_tensor *new_batch(int64_t n, int64_t h, int64_t w) {
    const int64_t dims[4] = {n, 3, h, w};
    return tm_tensor_new(TM_FLOAT, 4, dims);
}

/* Writes the RGB image into item i of a (n, 3, h, w) batch as BGR planes (PaddleOCR reads
 * images with OpenCV), (x / 255 - mean[c]) / std[c] per plane, its top left corner at
 * (left, top); what lies outside is left as it was. */
static void put_planes_at(tm_tensor *t, int64_t i, const tm__image *im, int64_t left, int64_t top,
                          const float mean[3], const float std[3]) {
    const int64_t *d = tm_tensor_dims(t);
    float *base = (float *)tm_tensor_data(t) + i * 3 * d[2] * d[3];
    for (int c = 0; c < 3; c++) {
        float *plane = base + c * d[2] * d[3];
        const int source = 2 - c;
        const float scale = 1.0f / (255.0f * std[c]), shift = mean[c] / std[c];
        for (int64_t y = 0; y < im->h && top + y < d[2]; y++) {
            const uint8_t *p = im->px + y * im->w * 3 + source;
            float *q = plane + (top + y) * d[3] + left;
            for (int64_t x = 0; x < im->w && left + x < d[3]; x++) q[x] = (float)p[3 * x] * scale - shift;
        }
    }
}

/* put_planes_at at the top left. */
static void put_planes(tm_tensor *t, int64_t i, const tm__image *im, const float mean[3], const float std[3]) {
    put_planes_at(t, i, im, 0, 0, mean, std);
}

static tm_status run_model(tm_model *m, const char *input, const char *what, const char *path, tm_tensor *x,
                           tm_tensor **y, tm_error *err) {
    const tm_tensor *inputs[1] = {x};
    tm_tensor *outputs[1] = {NULL};
    tm_status s = tm_model_run(m, 1, &input, inputs, outputs, NULL, err);
    if (s) return s;
    if (tm_tensor_dtype(outputs[0]) != TM_FLOAT) {
        tm_tensor_free(outputs[0]);
        return tm__fail(err, TM_ERR_DTYPE, "OCR %s %s: its output is not float32", what, path);
    }
    *y = outputs[0];
    return TM_OK;
}

/* ---- Detection ---------------------------------------------------------------------------- */

typedef struct box_list {
    size_t n, cap;
    tm__point (*boxes)[4];
} box_list;

static tm_status push_box(box_list *l, const tm__point box[4], tm_error *err) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 32;
        tm__point(*grown)[4] = realloc(l->boxes, cap * sizeof *grown);
        if (!grown) return tm__fail(err, TM_ERR_NO_MEMORY, "OCR: out of memory");
        l->boxes = grown;
        l->cap = cap;
    }
    memcpy(l->boxes[l->n++], box, 4 * sizeof(tm__point));
    return TM_OK;
}

/* Whether (x, y) lies in the convex quad q (either orientation), edges included. */
static int in_quad(const tm__point q[4], double x, double y) {
    int pos = 0, neg = 0;
    for (int i = 0; i < 4; i++) {
        tm__point a = q[i], b = q[(i + 1) % 4];
        double c = (b.x - a.x) * (y - a.y) - (b.y - a.y) * (x - a.x);
        pos |= c > 0, neg |= c < 0;
    }
    return !(pos && neg);
}

/* PaddleOCR's box_score_fast: the mean probability over the pixels of the box, its
 * corners cut to whole pixels as OpenCV's fillPoly takes them. */
static double box_score(const float *prob, int64_t W, int64_t H, const tm__point box[4]) {
    double lo_x = INFINITY, hi_x = -INFINITY, lo_y = INFINITY, hi_y = -INFINITY;
    tm__point q[4];
    for (int i = 0; i < 4; i++) {
        q[i] = (tm__point){trunc(box[i].x), trunc(box[i].y)};
        lo_x = fmin(lo_x, box[i].x), hi_x = fmax(hi_x, box[i].x);
        lo_y = fmin(lo_y, box[i].y), hi_y = fmax(hi_y, box[i].y);
    }
    int64_t x0 = (int64_t)fmax(0, floor(lo_x)), x1 = (int64_t)fmin((double)W - 1, ceil(hi_x));
    int64_t y0 = (int64_t)fmax(0, floor(lo_y)), y1 = (int64_t)fmin((double)H - 1, ceil(hi_y));
    double sum = 0;
    int64_t count = 0;
    for (int64_t y = y0; y <= y1; y++)
        for (int64_t x = x0; x <= x1; x++)
            if (in_quad(q, (double)x, (double)y)) sum += prob[y * W + x], count++;
    return count ? sum / (double)count : 0;
}

/* Where the image lies in the detector's input: scaled by `scale` (both axes) to nw x nh,
 * its top left corner at (ox, oy) of the W x H input, black around it. */
typedef struct letterbox {
    int64_t W, H, nw, nh, ox, oy;
    double scale;
} letterbox;

/* One region of the text map to a box in the image's pixels (PaddleOCR's
 * boxes_from_bitmap): *keep 0 when it is too small or too faint. */
static tm_status region_box(const tm_ocr *o, const float *prob, int64_t W, int64_t H, const tm__point *pts,
                            size_t n, const letterbox *lb, int64_t w, int64_t h, tm__point box[4], int *keep,
                            tm_error *err) {
    double a, b;
    *keep = 0;
    tm_status s = tm__min_area_rect(pts, n, box, &a, &b, err);
    if (s || fmin(a, b) < MIN_BOX_SIDE) return s;
    tm__box_order(box);
    if (box_score(prob, W, H, box) < o->opts.box_threshold) return TM_OK;
    double perimeter = tm__polygon_perimeter(box, 4);
    if (!(perimeter > 0)) return TM_OK;
    double delta = fabs(tm__polygon_area(box, 4)) * o->opts.unclip_ratio / perimeter;
    tm__point *grown;
    size_t m;
    if ((s = tm__offset_convex(box, 4, delta, ARC_TOLERANCE, &grown, &m, err))) return s;
    /* Clipper (pyclipper in PaddleOCR, js-clipper in @gutenye/ocr) gives whole pixels */
    for (size_t i = 0; i < m; i++) grown[i].x = round(grown[i].x), grown[i].y = round(grown[i].y);
    s = tm__min_area_rect(grown, m, box, &a, &b, err);
    free(grown);
    if (s || fmin(a, b) < MIN_BOX_SIDE + 2) return s;
    tm__box_order(box);
    for (int i = 0; i < 4; i++) {
        box[i].x = fmin(fmax(round((box[i].x - lb->ox) / lb->scale), 0), (double)(w - 1));
        box[i].y = fmin(fmax(round((box[i].y - lb->oy) / lb->scale), 0), (double)(h - 1));
    }
    /* PaddleOCR's filter_tag_det_res: boxes of 3 pixels or less across are dropped */
    *keep = (int)hypot(box[0].x - box[1].x, box[0].y - box[1].y) > MIN_BOX_SIDE &&
            (int)hypot(box[0].x - box[3].x, box[0].y - box[3].y) > MIN_BOX_SIDE;
    return TM_OK;
}

/* The detector's input, as @gutenye/ocr-node makes it (sharp's resize with fit "contain"):
 * sides rounded up to multiples of 32 (after scaling the longest side down to max_side),
 * the image scaled by one factor to fit them, centred, black around it. Lines keep their
 * proportions, and an image whose sides are multiples of 32 goes in as it is. */
static letterbox det_letterbox(int64_t w, int64_t h, int max_side) {
    const int64_t longest = w > h ? w : h;
    const double limit = max_side > 0 && longest > max_side ? (double)max_side / (double)longest : 1.0;
    letterbox lb;
    lb.W = (int64_t)ceil((double)w * limit / DET_MULTIPLE) * DET_MULTIPLE;
    lb.H = (int64_t)ceil((double)h * limit / DET_MULTIPLE) * DET_MULTIPLE;
    if (lb.W < DET_MULTIPLE) lb.W = DET_MULTIPLE;
    if (lb.H < DET_MULTIPLE) lb.H = DET_MULTIPLE;
    lb.scale = fmin((double)lb.W / (double)w, (double)lb.H / (double)h);
    lb.nw = (int64_t)llround((double)w * lb.scale), lb.nh = (int64_t)llround((double)h * lb.scale);
    if (lb.nw < 1) lb.nw = 1;
    if (lb.nh < 1) lb.nh = 1;
    if (lb.nw > lb.W) lb.nw = lb.W;
    if (lb.nh > lb.H) lb.nh = lb.H;
    lb.ox = (lb.W - lb.nw) / 2, lb.oy = (lb.H - lb.nh) / 2;
    if (lb.nw == w && lb.nh == h) lb.scale = 1.0;
    return lb;
}

static tm_status detect(const tm_ocr *o, const tm__image *im, box_list *out, tm_error *err) {
    const int64_t w = im->w, h = im->h;
    const letterbox lb = det_letterbox(w, h, o->opts.max_side);
    const int64_t W = lb.W, H = lb.H;
    tm__image resized = {0};
    const tm__image *src = im;
    tm_status s = TM_OK;
    if (lb.nw != w || lb.nh != h) {
        /* sharp's resize (lanczos3), as the reference's */
        if ((s = tm__image_resize(im, lb.nw, lb.nh, TM__RESAMPLE_LANCZOS, &resized, err))) return s;
        src = &resized;
    }
    /* B, G, R as x / 255, as @gutenye/ocr-node feeds this model (PaddleOCR's ImageNet
     * normalization gives a narrower map: boxes a few pixels smaller than the reference's;
     * bench/OCR_RESULTS.md) */
    static const float zero[3] = {0, 0, 0}, one[3] = {1, 1, 1};
    tm_tensor *x = new_batch(1, H, W), *y = NULL;
    if (!x) s = tm__fail(err, TM_ERR_NO_MEMORY, "OCR: out of memory for a %lld x %lld detector input",
                         (long long)W, (long long)H);
    if (!s) {
        memset(tm_tensor_data(x), 0, (size_t)(3 * W * H) * sizeof(float));
        put_planes_at(x, 0, src, lb.ox, lb.oy, zero, one);
        s = run_model(o->det, o->det_input, "detection model", o->det_path, x, &y, err);
    }
    tm_tensor_free(x);
    tm__image_clear(&resized);
    if (s) return s;
    const int64_t *d = tm_tensor_dims(y);
    if (tm_tensor_rank(y) != 4 || d[0] != 1 || d[1] != 1 || d[2] != H || d[3] != W) {
        tm_tensor_free(y);
        return tm__fail(err, TM_ERR_SHAPE, "OCR detection model %s: output is not (1, 1, %lld, %lld)", o->det_path,
                        (long long)H, (long long)W);
    }
    const float *prob = tm_tensor_data_const(y);
    uint8_t *map = malloc((size_t)(W * H));
    tm__regions regions = {0};
    if (!map) s = tm__fail(err, TM_ERR_NO_MEMORY, "OCR: out of memory");
    if (!s) {
        for (int64_t i = 0; i < W * H; i++) map[i] = prob[i] > o->opts.det_threshold;
        s = tm__find_regions(map, W, H, &regions, err);
    }
    for (size_t r = 0; !s && r < regions.n; r++) {
        tm__point box[4];
        int keep;
        s = region_box(o, prob, W, H, regions.points + regions.start[r], regions.start[r + 1] - regions.start[r],
                       &lb, w, h, box, &keep, err);
        if (!s && keep) s = push_box(out, box, err);
    }
    tm__regions_clear(&regions);
    free(map);
    tm_tensor_free(y);
    return s;
}

/* ---- Crops, direction, recognition --------------------------------------------------------- */

/* PaddleOCR's get_rotate_crop_image: the box warped upright to its longer sides' lengths
 * (bicubic, edges repeated), turned a quarter counter-clockwise when it is 1.5 times
 * taller than wide (a vertical line). */
/* The box grown across its line by `frac` of its width across on each side: the top and
 * bottom edges of a wide box moved apart, the left and right ones of a tall box. */
static void grow_across(const tm__point in[4], double frac, tm__point box[4]) {
    memcpy(box, in, 4 * sizeof *box);
    double along = hypot(in[1].x - in[0].x, in[1].y - in[0].y);   /* top edge */
    double down = hypot(in[3].x - in[0].x, in[3].y - in[0].y);    /* left edge */
    if (!(along > 0) || !(down > 0)) return;
    /* pairs (a, b) moved apart along b -> a: (0, 3) and (1, 2) for a wide box, else (0, 1)
     * and (3, 2) */
    const int wide = along >= down, pairs[2][2] = {{0, wide ? 3 : 1}, {wide ? 1 : 3, 2}};
    const double m = frac * (wide ? down : along);
    for (int k = 0; k < 2; k++) {
        const tm__point a = in[pairs[k][0]], b = in[pairs[k][1]];
        double len = hypot(a.x - b.x, a.y - b.y);
        if (!(len > 0)) continue;
        double ux = (a.x - b.x) / len * m, uy = (a.y - b.y) / len * m;
        box[pairs[k][0]].x += ux, box[pairs[k][0]].y += uy;
        box[pairs[k][1]].x -= ux, box[pairs[k][1]].y -= uy;
    }
}

static tm_status crop_box(const tm__image *im, const tm__point found[4], tm__image *out, tm_error *err) {
    tm__point box[4];
    grow_across(found, CROP_MARGIN, box);
    double top = hypot(box[0].x - box[1].x, box[0].y - box[1].y);
    double bottom = hypot(box[2].x - box[3].x, box[2].y - box[3].y);
    double left = hypot(box[0].x - box[3].x, box[0].y - box[3].y);
    double right = hypot(box[1].x - box[2].x, box[1].y - box[2].y);
    int64_t cw = (int64_t)fmax(top, bottom), ch = (int64_t)fmax(left, right);
    if (cw < 1) cw = 1;
    if (ch < 1) ch = 1;
    const tm__point upright[4] = {{0, 0}, {(double)cw, 0}, {(double)cw, (double)ch}, {0, (double)ch}};
    double m[9];
    tm_status s = tm__perspective_transform(upright, box, m, err);
    if (s) return s;
    tm__image crop;
    if ((s = tm__image_warp(im, m, cw, ch, TM__INTERPOLATE_BICUBIC, &crop, err))) return s;
    if ((double)ch / (double)cw >= 1.5) {
        tm__image turned;
        s = tm__image_rotate(&crop, 1, &turned, err);
        tm__image_clear(&crop);
        if (s) return s;
        crop = turned;
    }
    *out = crop;
    return TM_OK;
}

/* The width a line of (w, h) gets at height `height`: ceil(height * w / h), at most cap. */
static int64_t line_width(const tm__image *im, int64_t height, int64_t cap) {
    int64_t v = (int64_t)ceil((double)height * (double)im->w / (double)im->h);
    if (v > cap) v = cap;
    return v < 1 ? 1 : v;
}

/* Resizes a line to (width, height) (bicubic) and writes it into item i of the batch as
 * x / 255; the rest of the row stays 0. PaddleOCR resizes bilinearly and feeds
 * (x / 255 - 0.5) / 0.5; on the rendered images of tests/ocr_images.py both changes read
 * better (bench/OCR_RESULTS.md): bilinear upscaling blurs the gaps between words away, and
 * under PaddleOCR's normalization the classifier turns upright lines upside down. x / 255
 * is what @gutenye/ocr feeds. */
static tm_status put_line(tm_tensor *t, int64_t i, const tm__image *line, int64_t width, int64_t height,
                          tm_error *err) {
    static const float zero[3] = {0, 0, 0}, one[3] = {1, 1, 1};
    if (line->w == width && line->h == height) {
        put_planes(t, i, line, zero, one);
        return TM_OK;
    }
    tm__image r;
    tm_status s = tm__image_resize_centered(line, width, height, TM__INTERPOLATE_BICUBIC, &r, err);
    if (s) return s;
    put_planes(t, i, &r, zero, one);
    tm__image_clear(&r);
    return TM_OK;
}

/* Turns the lines the classifier reads as upside down (class "180") by half a turn. */
static tm_status classify(const tm_ocr *o, tm__image *lines, size_t n, tm_error *err) {
    tm_status s = TM_OK;
    for (size_t b = 0; !s && b < n; b += BATCH) {
        size_t m = n - b < BATCH ? n - b : BATCH;
        tm_tensor *x = new_batch((int64_t)m, CLS_HEIGHT, CLS_WIDTH), *y = NULL;
        if (!x) return tm__fail(err, TM_ERR_NO_MEMORY, "OCR: out of memory");
        for (size_t i = 0; !s && i < m; i++)
            s = put_line(x, (int64_t)i, &lines[b + i], line_width(&lines[b + i], CLS_HEIGHT, CLS_WIDTH), CLS_HEIGHT,
                         err);
        if (!s) s = run_model(o->cls, o->cls_input, "direction classifier", o->cls_path, x, &y, err);
        tm_tensor_free(x);
        if (s) break;
        const int64_t *d = tm_tensor_dims(y);
        if (tm_tensor_rank(y) != 2 || d[0] != (int64_t)m || d[1] != 2) {
            tm_tensor_free(y);
            return tm__fail(err, TM_ERR_SHAPE, "OCR direction classifier %s: output is not (%zu, 2)", o->cls_path, m);
        }
        const float *p = tm_tensor_data_const(y);
        for (size_t i = 0; !s && i < m; i++) {
            if (!(p[2 * i + 1] > p[2 * i] && p[2 * i + 1] > o->opts.classifier_threshold)) continue;
            tm__image turned;
            s = tm__image_rotate(&lines[b + i], 2, &turned, err);
            if (!s) {
                tm__image_clear(&lines[b + i]);
                lines[b + i] = turned;
            }
        }
        tm_tensor_free(y);
    }
    return s;
}

typedef struct read_line {
    char *text;                  /* malloc'ed */
    double score;
} read_line;

/* CTC greedy decoding of one (T, C) row of probabilities: the best class per step, repeats
 * merged, blanks dropped; the score is the mean probability of the characters kept. */
static tm_status decode(const tm_ocr *o, const float *p, int64_t T, int64_t C, read_line *out, tm_error *err) {
    size_t len = 0, cap = 64;
    char *text = malloc(cap);
    double sum = 0;
    int64_t kept = 0, prev = -1;
    if (!text) return tm__fail(err, TM_ERR_NO_MEMORY, "OCR: out of memory");
    for (int64_t t = 0; t < T; t++) {
        const float *row = p + t * C;
        int64_t best = 0;
        for (int64_t c = 1; c < C; c++)
            if (row[c] > row[best]) best = c;
        int repeat = best == prev;
        prev = best;
        if (best == 0 || repeat || (size_t)best >= o->n_classes) continue;
        const char *ch = o->classes[best];
        size_t k = strlen(ch);
        if (len + k + 1 > cap) {
            while (len + k + 1 > cap) cap *= 2;
            char *grown = realloc(text, cap);
            if (!grown) {
                free(text);
                return tm__fail(err, TM_ERR_NO_MEMORY, "OCR: out of memory");
            }
            text = grown;
        }
        memcpy(text + len, ch, k);
        len += k;
        sum += row[best];
        kept++;
    }
    text[len] = 0;
    out->text = text;
    out->score = kept ? sum / (double)kept : 0;
    return TM_OK;
}

/* Each line alone, at height 48 and its own width (ceil(48 w / h)), in a tensor rounded
 * up to a multiple of 32 columns (black beyond the line) so that lines of nearby widths
 * share a plan. PaddleOCR pads six lines sorted by width to the widest of them (and to
 * at least 320); alone they read as well or better (bench/OCR_RESULTS.md), and the
 * padding costs time the recognizer's cost, linear in the width, does not hide. */
static tm_status recognize(const tm_ocr *o, const tm__image *lines, size_t n, read_line *out, tm_error *err) {
    const int64_t H = o->rec_height;
    tm_status s = TM_OK;
    for (size_t i = 0; !s && i < n; i++) {
        /* a line longer than any page would need (341 times its height) is squeezed */
        const int64_t w = line_width(&lines[i], H, REC_MAX_WIDTH);
        const int64_t W = (w + REC_WIDTH_STEP - 1) / REC_WIDTH_STEP * REC_WIDTH_STEP;
        tm_tensor *x = new_batch(1, H, W), *y = NULL;
        if (!x) {
            s = tm__fail(err, TM_ERR_NO_MEMORY, "OCR: out of memory");
            break;
        }
        s = put_line(x, 0, &lines[i], w, H, err);
        if (!s) s = run_model(o->rec, o->rec_input, "recognition model", o->rec_path, x, &y, err);
        tm_tensor_free(x);
        if (s) break;
        const int64_t *d = tm_tensor_dims(y);
        if (tm_tensor_rank(y) != 3 || d[0] != 1 || d[2] < 2)
            s = tm__fail(err, TM_ERR_SHAPE, "OCR recognition model %s: output is not (1, T, classes)", o->rec_path);
        else
            s = decode(o, tm_tensor_data_const(y), d[1], d[2], &out[i], err);
        tm_tensor_free(y);
    }
    return s;
}

/* ---- Reading order ------------------------------------------------------------------------ */

typedef struct placed {
    double top, bottom, left;
    size_t index;
    size_t row;
} placed;

static int cmp_middle(const void *pa, const void *pb) {
    const placed *a = pa, *b = pb;
    double ma = a->top + a->bottom, mb = b->top + b->bottom;
    if (ma != mb) return ma < mb ? -1 : 1;
    return a->left < b->left ? -1 : a->left > b->left;
}

static int cmp_row_left(const void *pa, const void *pb) {
    const placed *a = pa, *b = pb;
    if (a->row != b->row) return a->row < b->row ? -1 : 1;
    if (a->left != b->left) return a->left < b->left ? -1 : 1;
    return a->index < b->index ? -1 : a->index > b->index;
}

/* Rows of boxes: by vertical middle, a box joins the row before it when its middle lies
 * within half the smaller height of that row's first box's middle; then left to right. */
static void reading_order(placed *p, size_t n) {
    qsort(p, n, sizeof *p, cmp_middle);
    size_t row = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
        if (i > 0) {
            double mid = (p[i].top + p[i].bottom) / 2, row_mid = (p[first].top + p[first].bottom) / 2;
            double half = fmin(p[i].bottom - p[i].top, p[first].bottom - p[first].top) / 2;
            if (fabs(mid - row_mid) > half) row++, first = i;
        }
        p[i].row = row;
    }
    qsort(p, n, sizeof *p, cmp_row_left);
}

/* ---- The whole run -------------------------------------------------------------------------- */

static tm_status make_result(const box_list *boxes, const read_line *read, double threshold, tm_ocr_result **out,
                             tm_error *err) {
    size_t n = 0, bytes = 1;
    for (size_t i = 0; i < boxes->n; i++)
        if (read[i].score >= threshold && read[i].text[0]) n++, bytes += strlen(read[i].text) + 1;
    tm_ocr_result *r = calloc(1, sizeof *r);
    placed *p = malloc((n ? n : 1) * sizeof *p);
    if (r) {
        r->lines = calloc(n ? n : 1, sizeof *r->lines);
        r->text = malloc(bytes);
    }
    if (!r || !p || !r->lines || !r->text) {
        tm_ocr_result_free(r);
        free(p);
        return tm__fail(err, TM_ERR_NO_MEMORY, "OCR: out of memory");
    }
    size_t k = 0;
    for (size_t i = 0; i < boxes->n; i++) {
        if (!(read[i].score >= threshold && read[i].text[0])) continue;
        const tm__point *b = boxes->boxes[i];
        placed q = {INFINITY, -INFINITY, INFINITY, i, 0};
        for (int c = 0; c < 4; c++) {
            q.top = fmin(q.top, b[c].y), q.bottom = fmax(q.bottom, b[c].y), q.left = fmin(q.left, b[c].x);
        }
        p[k++] = q;
    }
    reading_order(p, n);
    char *t = r->text;
    for (size_t k2 = 0; k2 < n; k2++) {
        size_t i = p[k2].index;
        tm_ocr_line *line = &r->lines[k2];
        size_t len = strlen(read[i].text);
        memcpy(t, read[i].text, len + 1);
        line->text = t;
        t += len + 1;
        line->score = (float)read[i].score;
        for (int c = 0; c < 4; c++) {
            line->box[c][0] = (float)boxes->boxes[i][c].x;
            line->box[c][1] = (float)boxes->boxes[i][c].y;
        }
    }
    r->n = n;
    free(p);
    *out = r;
    return TM_OK;
}

static tm_status run_image(const tm_ocr *o, const tm__image *im, tm_ocr_result **out, tm_error *err) {
    box_list boxes = {0};
    tm__image *lines = NULL;
    read_line *read = NULL;
    tm_status s = detect(o, im, &boxes, err);
    if (!s && boxes.n) {
        lines = calloc(boxes.n, sizeof *lines);
        read = calloc(boxes.n, sizeof *read);
        if (!lines || !read) s = tm__fail(err, TM_ERR_NO_MEMORY, "OCR: out of memory");
    }
    for (size_t i = 0; !s && i < boxes.n; i++) s = crop_box(im, boxes.boxes[i], &lines[i], err);
    if (!s && boxes.n && o->cls) s = classify(o, lines, boxes.n, err);
    if (!s && boxes.n) s = recognize(o, lines, boxes.n, read, err);
    if (!s) s = make_result(&boxes, read, o->opts.text_threshold, out, err);
    for (size_t i = 0; lines && i < boxes.n; i++) tm__image_clear(&lines[i]);
    for (size_t i = 0; read && i < boxes.n; i++) free(read[i].text);
    free(lines);
    free(read);
    free(boxes.boxes);
    return s;
}

/* RGB from 1, 2, 3 or 4 channels; alpha composited over white (text drawn on a
 * transparent page reads as on paper). */
static tm_status to_rgb(const uint8_t *px, int64_t w, int64_t h, int channels, tm__image *out, tm_error *err) {
    uint8_t *rgb = malloc((size_t)(w * h * 3));
    if (!rgb) return tm__fail(err, TM_ERR_NO_MEMORY, "OCR: out of memory for a %lld x %lld image", (long long)w,
                              (long long)h);
    const int alpha = channels == 2 || channels == 4, colour = channels >= 3;
    for (int64_t i = 0; i < w * h; i++) {
        const uint8_t *p = px + i * channels;
        for (int c = 0; c < 3; c++) {
            int v = p[colour ? c : 0];
            if (alpha) {
                int a = p[channels - 1];
                v = (v * a + 255 * (255 - a) + 127) / 255;
            }
            rgb[3 * i + c] = (uint8_t)v;
        }
    }
    *out = (tm__image){w, h, 3, rgb};
    return TM_OK;
}

tm_status tm_ocr_run_pixels(const tm_ocr *o, const uint8_t *pixels, int64_t width, int64_t height, int channels,
                            tm_ocr_result **out, tm_error *err) {
    if (!o || !pixels || !out)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_ocr_run_pixels: ocr, pixels and out must not be NULL");
    if (width <= 0 || height <= 0 || height > ((int64_t)1 << 28) / width)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "OCR: image size %lld x %lld is out of range",
                        (long long)width, (long long)height);
    if (channels != 1 && channels != 2 && channels != 3 && channels != 4)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "OCR: %d channels (want 1, 2, 3 or 4)", channels);
    tm__image rgb;
    tm_status s = to_rgb(pixels, width, height, channels, &rgb, err);
    if (s) return s;
    s = run_image(o, &rgb, out, err);
    tm__image_clear(&rgb);
    return s;
}

tm_status tm_ocr_run(const tm_ocr *o, const char *path, tm_ocr_result **out, tm_error *err) {
    if (!o || !path || !out)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_ocr_run: ocr, image_path and out must not be NULL");
    tm__image im;
    tm_status s = tm__image_load(path, &im, err);
    if (s) return s;
    s = tm_ocr_run_pixels(o, im.px, im.w, im.h, im.channels, out, err);
    tm__image_clear(&im);
    return s;
}

size_t tm_ocr_result_count(const tm_ocr_result *r) { return r ? r->n : 0; }

const tm_ocr_line *tm_ocr_result_line(const tm_ocr_result *r, size_t i) {
    return r && i < r->n ? &r->lines[i] : NULL;
}

void tm_ocr_result_free(tm_ocr_result *r) {
    if (!r) return;
    free(r->lines);
    free(r->text);
    free(r);
}
