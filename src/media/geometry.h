/* Plane geometry and pixel warps for text detection (src/pipelines/ocr.c): the regions of a
 * binary map, convex hulls, minimum-area rectangles, the outward offset of a convex polygon,
 * perspective transforms and the warps, resizes and quarter turns of tm__image they drive.
 * Not a general geometry library: the polygons are small, and the offset takes convex ones. */
#ifndef TM_MEDIA_GEOMETRY_H
#define TM_MEDIA_GEOMETRY_H

#include <stddef.h>
#include <stdint.h>
#include "image.h"

/* Pixel coordinates: x to the right, y down; a pixel's centre is at its integer index. */
typedef struct tm__point {
    double x, y;
} tm__point;

/* The 8-connected regions of non-zero pixels of a (h, w) map, in the order a raster scan
 * meets them. Region i has the points [start[i], start[i + 1]): both ends of each of its
 * runs (a row's stretch of consecutive pixels), rows top to bottom. Those have the same
 * convex hull, hence the same minimum-area rectangle, as the region's traced contour
 * (OpenCV's findContours), which is all that text detection asks of a contour. */
typedef struct tm__regions {
    size_t n;
    size_t *start;               /* n + 1 offsets into points */
    tm__point *points;
    int64_t *pixels;             /* pixel count of each region */
} tm__regions;

tm_status tm__find_regions(const uint8_t *map, int64_t w, int64_t h, tm__regions *out, tm_error *err);
void tm__regions_clear(tm__regions *r);

/* The convex hull of p[0..n) into hull (room for n points), counter-clockwise as drawn
 * with y up (clockwise on screen), without collinear points; returns its size (1 for
 * points that are all equal, 2 for collinear ones, 0 for n = 0). Andrew's monotone chain
 * on a sorted copy: O(n log n), and the only allocation may fail. */
tm_status tm__convex_hull(const tm__point *p, size_t n, tm__point *hull, size_t *n_hull, tm_error *err);

/* The rectangle of least area holding p[0..n) (n >= 1), by rotating calipers over the
 * edges of their hull: corners in box, their sides' lengths in *side_a (box[0]-box[1])
 * and *side_b (box[1]-box[2]). Degenerate sets give a rectangle of width 0. */
tm_status tm__min_area_rect(const tm__point *p, size_t n, tm__point box[4], double *side_a, double *side_b,
                            tm_error *err);

/* Reorders the corners of a rectangle as top-left, top-right, bottom-right, bottom-left the
 * way PaddleOCR's get_mini_boxes does: the two leftmost by x, of them the upper one first
 * and the lower one last; of the two rightmost the upper one second. */
void tm__box_order(tm__point box[4]);

/* Signed area by the shoelace formula (positive when counter-clockwise with y up) and the
 * perimeter of the closed polygon p[0..n). */
double tm__polygon_area(const tm__point *p, size_t n);
double tm__polygon_perimeter(const tm__point *p, size_t n);

/* The convex polygon p[0..n) (n >= 3, either orientation) moved outward by delta > 0 with
 * round corners, as Clipper's offset with round joins: each edge pushed out along its
 * normal, each vertex replaced by an arc of radius delta whose chords stay within
 * `tolerance` of the circle. *out is a new array (free()) of *n_out points, counter-
 * clockwise with y up. A reflex vertex (the polygon is not convex) gets no arc. */
tm_status tm__offset_convex(const tm__point *p, size_t n, double delta, double tolerance, tm__point **out,
                            size_t *n_out, tm_error *err);

/* The 3x3 homography m (row-major, m[8] = 1) that maps from[i] to to[i] for the four
 * points: u = (m0 x + m1 y + m2) / (m6 x + m7 y + m8), v likewise with m3..m5. Fails
 * (TM_ERR_INVALID_ARGUMENT) when three of the points are collinear. */
tm_status tm__perspective_transform(const tm__point from[4], const tm__point to[4], double m[9], tm_error *err);

typedef enum tm__interpolation {
    TM__INTERPOLATE_BILINEAR,
    TM__INTERPOLATE_BICUBIC,     /* a = -0.75, OpenCV's cubic convolution */
} tm__interpolation;

/* out(x, y) = in(m applied to (x, y)) for the (h, w) output: m maps output pixel
 * coordinates to input ones (the inverse of the picture's motion). Pixels outside the input
 * repeat its nearest edge (OpenCV's BORDER_REPLICATE); values rounded to nearest. *out is
 * new, with in's channels. */
tm_status tm__image_warp(const tm__image *in, const double m[9], int64_t w, int64_t h, tm__interpolation method,
                         tm__image *out, tm_error *err);

/* A resize with pixel centres aligned, as OpenCV's resize (input x = (x + 0.5) * in.w / w
 * - 0.5, edges repeated), without an anti-aliasing filter. *out is new. */
tm_status tm__image_resize_centered(const tm__image *in, int64_t w, int64_t h, tm__interpolation method,
                                    tm__image *out, tm_error *err);

/* in turned counter-clockwise by quarter_turns * 90 degrees (1, 2 or 3; NumPy's rot90).
 * *out is new. */
tm_status tm__image_rotate(const tm__image *in, int quarter_turns, tm__image *out, tm_error *err);

#endif
