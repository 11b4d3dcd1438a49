/* Tests of the geometry under text detection (src/media/geometry.c) against hand-computed
 * values: regions of a map, convex hull, minimum-area rectangle and its corner order, the
 * DB "unclip" offset, perspective transforms, warps, resizes and quarter turns. The OCR
 * pipeline itself is tested end to end by tests/ocr.sh. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../src/media/geometry.h"
#include "check.h"

static int near(double a, double b, double tol) { return fabs(a - b) <= tol; }

static int has_point(const tm__point *p, size_t n, double x, double y) {
    for (size_t i = 0; i < n; i++)
        if (near(p[i].x, x, 1e-9) && near(p[i].y, y, 1e-9)) return 1;
    return 0;
}

static void test_regions(void) {
    /* two regions: a diagonal chain (8-connected) and a ring with a hole */
    static const char *rows[] = {
        "1.....111",
        ".1....1.1",
        "..1...111",
        ".........",
        "11.......",
    };
    const int64_t w = 9, h = 5;
    uint8_t map[45];
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < w; x++) map[y * w + x] = rows[y][x] == '1';
    tm__regions r;
    tm_error err;
    CHECK(tm__find_regions(map, w, h, &r, &err) == TM_OK, "find_regions: %s", err.message);
    CHECK(r.n == 3, "regions: %zu, want 3", r.n);
    if (r.n != 3) {
        tm__regions_clear(&r);
        return;
    }
    /* raster order: the chain (first pixel (0,0)), the ring ((6,0)), the bottom bar ((0,4)) */
    CHECK(r.pixels[0] == 3 && r.pixels[1] == 8 && r.pixels[2] == 2, "pixel counts %lld %lld %lld",
          (long long)r.pixels[0], (long long)r.pixels[1], (long long)r.pixels[2]);
    size_t n0 = r.start[1] - r.start[0], n1 = r.start[2] - r.start[1], n2 = r.start[3] - r.start[2];
    CHECK(n0 == 6 && n1 == 8 && n2 == 2, "points per region %zu %zu %zu", n0, n1, n2);
    const tm__point *p = r.points;
    CHECK(has_point(p, n0, 0, 0) && has_point(p, n0, 1, 1) && has_point(p, n0, 2, 2), "chain points");
    const tm__point *q = r.points + r.start[1];
    /* the ring's middle row is two runs of one pixel: both ends of each, (6,1) and (8,1) */
    CHECK(has_point(q, n1, 6, 0) && has_point(q, n1, 8, 0) && has_point(q, n1, 6, 1) && has_point(q, n1, 8, 1) &&
          has_point(q, n1, 6, 2) && has_point(q, n1, 8, 2), "ring points");
    const tm__point *b = r.points + r.start[2];
    CHECK(has_point(b, n2, 0, 4) && has_point(b, n2, 1, 4), "bar points");
    tm__regions_clear(&r);

    /* a map of zeros has no regions; a full one is one region of one run per row */
    uint8_t zeros[12] = {0}, ones[12];
    memset(ones, 1, sizeof ones);
    CHECK(tm__find_regions(zeros, 4, 3, &r, &err) == TM_OK && r.n == 0, "empty map");
    tm__regions_clear(&r);
    CHECK(tm__find_regions(ones, 4, 3, &r, &err) == TM_OK && r.n == 1 && r.pixels[0] == 12 && r.start[1] == 6,
          "full map");
    tm__regions_clear(&r);
    CHECK(tm__find_regions(ones, 0, 3, &r, &err) == TM_ERR_INVALID_ARGUMENT, "zero width refused");
}

static void test_hull(void) {
    /* a square's corners, its centre, points on its edges, a repeated corner */
    const tm__point p[] = {{0, 0}, {2, 0}, {2, 2}, {0, 2}, {1, 1}, {1, 0}, {2, 1}, {0, 0}};
    tm__point hull[8];
    size_t n;
    tm_error err;
    CHECK(tm__convex_hull(p, 8, hull, &n, &err) == TM_OK && n == 4, "hull size %zu, want 4", n);
    for (int i = 0; i < 4; i++) CHECK(has_point(hull, n, p[i].x, p[i].y), "hull corner %d", i);
    CHECK(tm__polygon_area(hull, n) > 0, "hull counter-clockwise with y up");
    const tm__point same[] = {{3, 4}, {3, 4}};
    CHECK(tm__convex_hull(same, 2, hull, &n, &err) == TM_OK && n == 1, "equal points: one");
    const tm__point line[] = {{0, 0}, {2, 2}, {1, 1}};
    CHECK(tm__convex_hull(line, 3, hull, &n, &err) == TM_OK && n == 2, "collinear points: two");
}

static void test_min_area_rect(void) {
    tm__point box[4];
    double a, b;
    tm_error err;
    /* the corners of a 10 x 2 rectangle turned by atan(3/4), plus points inside it */
    const tm__point tilted[] = {{0, 0}, {8, 6}, {6.8, 7.6}, {-1.2, 1.6}, {4, 3}, {3.4, 3.8}};
    CHECK(tm__min_area_rect(tilted, 6, box, &a, &b, &err) == TM_OK, "min_area_rect: %s", err.message);
    CHECK(near(fmax(a, b), 10, 1e-9) && near(fmin(a, b), 2, 1e-9), "tilted sides %g %g, want 10 2", a, b);
    tm__box_order(box);
    const double want[4][2] = {{0, 0}, {8, 6}, {6.8, 7.6}, {-1.2, 1.6}};
    for (int i = 0; i < 4; i++)
        CHECK(near(box[i].x, want[i][0], 1e-9) && near(box[i].y, want[i][1], 1e-9), "tilted corner %d: (%g, %g)",
              i, box[i].x, box[i].y);

    /* a diamond: the best rectangle is the diamond itself (area 2), not its bounding box (4) */
    const tm__point diamond[] = {{0, 1}, {1, 0}, {2, 1}, {1, 2}};
    CHECK(tm__min_area_rect(diamond, 4, box, &a, &b, &err) == TM_OK && near(a * b, 2, 1e-9) &&
              near(a, sqrt(2), 1e-9),
          "diamond area %g", a * b);

    /* an axis-aligned region of pixels 0..4 x 0..1: sides 4 and 1 (pixel centres) */
    const tm__point run_ends[] = {{0, 0}, {4, 0}, {0, 1}, {4, 1}};
    CHECK(tm__min_area_rect(run_ends, 4, box, &a, &b, &err) == TM_OK && near(a * b, 4, 1e-9), "axis area %g", a * b);
    tm__box_order(box);
    CHECK(near(box[0].x, 0, 1e-9) && near(box[0].y, 0, 1e-9) && near(box[1].x, 4, 1e-9) && near(box[1].y, 0, 1e-9) &&
              near(box[2].x, 4, 1e-9) && near(box[2].y, 1, 1e-9) && near(box[3].x, 0, 1e-9) && near(box[3].y, 1, 1e-9),
          "axis corners in order");

    /* one pixel and one row: rectangles of width 0 */
    const tm__point dot[] = {{5, 7}};
    CHECK(tm__min_area_rect(dot, 1, box, &a, &b, &err) == TM_OK && a == 0 && b == 0 && box[2].x == 5, "a point");
    const tm__point row[] = {{1, 3}, {6, 3}};
    CHECK(tm__min_area_rect(row, 2, box, &a, &b, &err) == TM_OK && near(a, 5, 1e-12) && b == 0, "a row");
    CHECK(tm__min_area_rect(row, 0, box, &a, &b, &err) == TM_ERR_INVALID_ARGUMENT, "no points refused");
}

static void test_polygon_measures(void) {
    const tm__point r[] = {{0, 0}, {4, 0}, {4, 2}, {0, 2}};
    CHECK(near(tm__polygon_area(r, 4), 8, 1e-12), "area %g", tm__polygon_area(r, 4));
    const tm__point rc[] = {{0, 0}, {0, 2}, {4, 2}, {4, 0}};
    CHECK(near(tm__polygon_area(rc, 4), -8, 1e-12), "clockwise area %g", tm__polygon_area(rc, 4));
    CHECK(near(tm__polygon_perimeter(r, 4), 12, 1e-12), "perimeter %g", tm__polygon_perimeter(r, 4));
}

/* Distance from p to the boundary of the axis-aligned square [0, s]^2, p outside it. */
static double outside_distance(tm__point p, double s) {
    double dx = p.x < 0 ? -p.x : p.x > s ? p.x - s : 0, dy = p.y < 0 ? -p.y : p.y > s ? p.y - s : 0;
    return hypot(dx, dy);
}

static void test_offset(void) {
    tm_error err;
    tm__point *o;
    size_t n;
    /* a 10 x 10 square by 2, tolerance 0.25: arcs of 90 degrees cut in chords of at most
     * 2 acos(1 - 0.25 / 2) = 1.011 rad, so two of 45 degrees: 3 points a corner */
    const tm__point sq[] = {{0, 0}, {10, 0}, {10, 10}, {0, 10}};
    CHECK(tm__offset_convex(sq, 4, 2, 0.25, &o, &n, &err) == TM_OK, "offset: %s", err.message);
    CHECK(n == 12, "offset points %zu, want 12", n);
    int on_circle = 1;
    for (size_t i = 0; i < n; i++) on_circle &= near(outside_distance(o[i], 10), 2, 1e-9);
    CHECK(on_circle, "every offset point 2 from the square");
    /* 100 + four 10 x 2 strips + four corners of two triangles with apex angle 45 degrees */
    double want = 180 + 16 * sin(M_PI / 4);
    CHECK(near(tm__polygon_area(o, n), want, 1e-9), "offset area %g, want %g", tm__polygon_area(o, n), want);
    tm__point box[4];
    double a, b;
    CHECK(tm__min_area_rect(o, n, box, &a, &b, &err) == TM_OK && near(a, 14, 1e-9) && near(b, 14, 1e-9),
          "offset's rectangle %g x %g, want 14 x 14", a, b);
    free(o);
    /* clockwise input: the same polygon */
    const tm__point cw[] = {{0, 0}, {0, 10}, {10, 10}, {10, 0}};
    CHECK(tm__offset_convex(cw, 4, 2, 0.25, &o, &n, &err) == TM_OK && n == 12 &&
              near(tm__polygon_area(o, n), want, 1e-9),
          "clockwise square offset");
    free(o);

    /* DB's unclip of a 20 x 4 box: distance = area * 1.5 / perimeter = 2.5, so 25 x 9 */
    const tm__point text[] = {{0, 0}, {20, 0}, {20, 4}, {0, 4}};
    double d = fabs(tm__polygon_area(text, 4)) * 1.5 / tm__polygon_perimeter(text, 4);
    CHECK(near(d, 2.5, 1e-12), "unclip distance %g", d);
    CHECK(tm__offset_convex(text, 4, d, 0.25, &o, &n, &err) == TM_OK, "unclip offset");
    CHECK(tm__min_area_rect(o, n, box, &a, &b, &err) == TM_OK && near(fmax(a, b), 25, 1e-9) &&
              near(fmin(a, b), 9, 1e-9),
          "unclipped box %g x %g, want 25 x 9", a, b);
    free(o);
    CHECK(tm__offset_convex(text, 2, 1, 0.25, &o, &n, &err) == TM_ERR_INVALID_ARGUMENT, "two points refused");
    CHECK(tm__offset_convex(text, 4, 0, 0.25, &o, &n, &err) == TM_ERR_INVALID_ARGUMENT, "zero distance refused");
}

static void apply(const double m[9], tm__point p, tm__point *q) {
    double d = m[6] * p.x + m[7] * p.y + m[8];
    q->x = (m[0] * p.x + m[1] * p.y + m[2]) / d;
    q->y = (m[3] * p.x + m[4] * p.y + m[5]) / d;
}

static void test_perspective(void) {
    tm_error err;
    double m[9];
    /* an affine map: scale (2, 3), shift (1, 2) */
    const tm__point unit[4] = {{0, 0}, {1, 0}, {1, 1}, {0, 1}};
    const tm__point moved[4] = {{1, 2}, {3, 2}, {3, 5}, {1, 5}};
    CHECK(tm__perspective_transform(unit, moved, m, &err) == TM_OK, "affine: %s", err.message);
    const double want[9] = {2, 0, 1, 0, 3, 2, 0, 0, 1};
    int same = 1;
    for (int i = 0; i < 9; i++) same &= near(m[i], want[i], 1e-12);
    CHECK(same, "affine homography");
    /* a true perspective: the images of four points under a known m give m back */
    const double truth[9] = {1, 0.2, 3, 0.1, 1, 4, 0.001, 0.002, 1};
    const tm__point from[4] = {{10, 20}, {200, 15}, {220, 90}, {5, 100}};
    tm__point to[4];
    for (int i = 0; i < 4; i++) apply(truth, from[i], &to[i]);
    CHECK(tm__perspective_transform(from, to, m, &err) == TM_OK, "perspective: %s", err.message);
    same = 1;
    for (int i = 0; i < 9; i++) same &= near(m[i], truth[i], 1e-9 * (1 + fabs(truth[i])));
    CHECK(same, "perspective homography recovered");
    const tm__point collinear[4] = {{0, 0}, {1, 1}, {2, 2}, {0, 1}};
    CHECK(tm__perspective_transform(collinear, moved, m, &err) == TM_ERR_INVALID_ARGUMENT, "collinear refused");
}

static tm__image gray(int64_t w, int64_t h, const uint8_t *v) {
    tm__image im = {w, h, 1, malloc((size_t)(w * h))};
    memcpy(im.px, v, (size_t)(w * h));
    return im;
}

static int pixels_are(const tm__image *im, int64_t w, int64_t h, const uint8_t *want) {
    return im->w == w && im->h == h && !memcmp(im->px, want, (size_t)(w * h * im->channels));
}

static void test_warps(void) {
    tm_error err;
    const uint8_t v[12] = {10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120};
    tm__image in = gray(4, 3, v), out;
    const double identity[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    CHECK(tm__image_warp(&in, identity, 4, 3, TM__INTERPOLATE_BICUBIC, &out, &err) == TM_OK &&
              pixels_are(&out, 4, 3, v),
          "bicubic identity");
    tm__image_clear(&out);
    CHECK(tm__image_warp(&in, identity, 4, 3, TM__INTERPOLATE_BILINEAR, &out, &err) == TM_OK &&
              pixels_are(&out, 4, 3, v),
          "bilinear identity");
    tm__image_clear(&out);
    /* half a pixel to the right, bilinear: means of neighbours, the last column repeated */
    const double half[9] = {1, 0, 0.5, 0, 1, 0, 0, 0, 1};
    const uint8_t half_want[12] = {15, 25, 35, 40, 55, 65, 75, 80, 95, 105, 115, 120};
    CHECK(tm__image_warp(&in, half, 4, 3, TM__INTERPOLATE_BILINEAR, &out, &err) == TM_OK &&
              pixels_are(&out, 4, 3, half_want),
          "bilinear half-pixel shift");
    tm__image_clear(&out);
    /* one pixel left and up: the first row and column repeat (BORDER_REPLICATE) */
    const double back[9] = {1, 0, -1, 0, 1, -1, 0, 0, 1};
    const uint8_t back_want[12] = {10, 10, 20, 30, 10, 10, 20, 30, 50, 50, 60, 70};
    CHECK(tm__image_warp(&in, back, 4, 3, TM__INTERPOLATE_BICUBIC, &out, &err) == TM_OK &&
              pixels_are(&out, 4, 3, back_want),
          "replicated edges");
    tm__image_clear(&out);
    /* bicubic at t = 1/2 between 20 and 30 in a straight ramp stays on the ramp (25) */
    const uint8_t ramp[8] = {10, 20, 30, 40, 10, 20, 30, 40};
    tm__image r = gray(4, 2, ramp);
    const double mid[9] = {1, 0, 1.5, 0, 1, 0, 0, 0, 1};
    CHECK(tm__image_warp(&r, mid, 1, 1, TM__INTERPOLATE_BICUBIC, &out, &err) == TM_OK && out.px[0] == 25,
          "bicubic on a ramp: %d", out.px[0]);
    tm__image_clear(&out);
    tm__image_clear(&r);

    /* the crop of the quad (1,1) (3,1) (3,2) (1,2) to 2 x 1, the way OCR crops a box */
    const tm__point dst[4] = {{0, 0}, {2, 0}, {2, 1}, {0, 1}}, src[4] = {{1, 1}, {3, 1}, {3, 2}, {1, 2}};
    double m[9];
    CHECK(tm__perspective_transform(dst, src, m, &err) == TM_OK, "crop transform");
    const uint8_t crop_want[2] = {60, 70};
    CHECK(tm__image_warp(&in, m, 2, 1, TM__INTERPOLATE_BICUBIC, &out, &err) == TM_OK &&
              pixels_are(&out, 2, 1, crop_want),
          "perspective crop");
    tm__image_clear(&out);
    CHECK(tm__image_warp(&in, m, 0, 1, TM__INTERPOLATE_BICUBIC, &out, &err) == TM_ERR_INVALID_ARGUMENT,
          "zero-size warp refused");
    tm__image_clear(&in);

    /* resizes with pixel centres aligned: 4 -> 2 averages pairs; 2 -> 4 at 1/4 and 3/4 */
    const uint8_t four[4] = {0, 100, 200, 40}, two[2] = {0, 100};
    tm__image a = gray(4, 1, four), b = gray(2, 1, two);
    const uint8_t down_want[2] = {50, 120}, up_want[4] = {0, 25, 75, 100};
    CHECK(tm__image_resize_centered(&a, 2, 1, TM__INTERPOLATE_BILINEAR, &out, &err) == TM_OK && pixels_are(&out, 2, 1, down_want), "downsize");
    tm__image_clear(&out);
    CHECK(tm__image_resize_centered(&b, 4, 1, TM__INTERPOLATE_BILINEAR, &out, &err) == TM_OK && pixels_are(&out, 4, 1, up_want), "upsize");
    tm__image_clear(&out);
    tm__image_clear(&a);
    tm__image_clear(&b);
}

static void test_rotate(void) {
    tm_error err;
    /* 3 x 2:  1 2 3
     *         4 5 6 */
    const uint8_t v[6] = {1, 2, 3, 4, 5, 6};
    tm__image in = gray(3, 2, v), out;
    const uint8_t ccw[6] = {3, 6, 2, 5, 1, 4}, half[6] = {6, 5, 4, 3, 2, 1}, cw[6] = {4, 1, 5, 2, 6, 3};
    CHECK(tm__image_rotate(&in, 1, &out, &err) == TM_OK && pixels_are(&out, 2, 3, ccw), "quarter turn");
    tm__image_clear(&out);
    CHECK(tm__image_rotate(&in, 2, &out, &err) == TM_OK && pixels_are(&out, 3, 2, half), "half turn");
    tm__image_clear(&out);
    CHECK(tm__image_rotate(&in, 3, &out, &err) == TM_OK && pixels_are(&out, 2, 3, cw), "three quarter turns");
    tm__image_clear(&out);
    tm__image_clear(&in);
}

int main(void) {
    test_regions();
    test_hull();
    test_min_area_rect();
    test_polygon_measures();
    test_offset();
    test_perspective();
    test_warps();
    test_rotate();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
