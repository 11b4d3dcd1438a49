/* Plane geometry and pixel warps for text detection: regions of a binary map by runs,
 * convex hull, minimum-area rectangle, convex polygon offset, perspective transform, and
 * the warps of tm__image. Written here rather than taken from a library: OpenCV and
 * Clipper (libpolyclipping) are C++, and the detector needs only their convex cases. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "geometry.h"
#include "../core/status.h"

#define MAX_PIXELS ((int64_t)1 << 28)

/* ---- Regions ---------------------------------------------------------------------------- */

typedef struct run {
    int64_t y, x0, x1;           /* pixels x0..x1 inclusive of row y */
} run;

static size_t find_root(size_t *parent, size_t i) {
    while (parent[i] != i) {
        parent[i] = parent[parent[i]];
        i = parent[i];
    }
    return i;
}

static void join(size_t *parent, size_t a, size_t b) {
    a = find_root(parent, a);
    b = find_root(parent, b);
    /* the smaller index stays the root: a region's id is its first run's */
    if (a < b) parent[b] = a;
    else if (b < a) parent[a] = b;
}

/* Every run of the map, rows in order; *row_first gets h + 1 offsets of each row's runs. */
static tm_status collect_runs(const uint8_t *map, int64_t w, int64_t h, run **runs, size_t *n_runs,
                              size_t **row_first, tm_error *err) {
    size_t cap = 1024, n = 0;
    run *r = malloc(cap * sizeof *r);
    size_t *first = malloc((size_t)(h + 1) * sizeof *first);
    if (!r || !first) {
        free(r);
        free(first);
        return tm__fail(err, TM_ERR_NO_MEMORY, "text regions: out of memory");
    }
    for (int64_t y = 0; y < h; y++) {
        first[y] = n;
        const uint8_t *row = map + y * w;
        for (int64_t x = 0; x < w;) {
            if (!row[x]) {
                x++;
                continue;
            }
            int64_t x0 = x;
            while (x < w && row[x]) x++;
            if (n == cap) {
                run *grown = realloc(r, 2 * cap * sizeof *r);
                if (!grown) {
                    free(r);
                    free(first);
                    return tm__fail(err, TM_ERR_NO_MEMORY, "text regions: out of memory");
                }
                r = grown;
                cap *= 2;
            }
            r[n++] = (run){y, x0, x - 1};
        }
    }
    first[h] = n;
    *runs = r;
    *n_runs = n;
    *row_first = first;
    return TM_OK;
}

tm_status tm__find_regions(const uint8_t *map, int64_t w, int64_t h, tm__regions *out, tm_error *err) {
    if (w <= 0 || h <= 0 || h > MAX_PIXELS / w)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "text regions: map size %lld x %lld is out of range",
                        (long long)w, (long long)h);
    run *runs = NULL;
    size_t n_runs = 0, *row_first = NULL;
    tm_status s = collect_runs(map, w, h, &runs, &n_runs, &row_first, err);
    if (s) return s;
    size_t *parent = malloc((n_runs + 1) * sizeof *parent);
    size_t *id = malloc((n_runs + 1) * sizeof *id);
    tm__regions r = {0};
    if (!parent || !id) goto no_memory;
    for (size_t i = 0; i < n_runs; i++) parent[i] = i;
    /* 8-connectivity: a run touches the runs of the row above that overlap it widened by one
     * pixel on each side; both rows' runs are sorted, so one sweep finds them */
    for (int64_t y = 1; y < h; y++) {
        size_t a = row_first[y - 1], a_end = row_first[y];
        for (size_t b = row_first[y]; b < row_first[y + 1]; b++) {
            while (a < a_end && runs[a].x1 < runs[b].x0 - 1) a++;
            for (size_t k = a; k < a_end && runs[k].x0 <= runs[b].x1 + 1; k++) join(parent, k, b);
        }
    }
    for (size_t i = 0; i < n_runs; i++) {
        size_t root = find_root(parent, i);
        if (root == i) id[i] = r.n++;
        else id[i] = id[root];
    }
    r.start = calloc(r.n + 1, sizeof *r.start);
    r.pixels = calloc(r.n + 1, sizeof *r.pixels);
    r.points = malloc((2 * n_runs + 1) * sizeof *r.points);
    if (!r.start || !r.pixels || !r.points) goto no_memory;
    for (size_t i = 0; i < n_runs; i++) {
        r.start[id[i] + 1] += 2;
        r.pixels[id[i]] += runs[i].x1 - runs[i].x0 + 1;
    }
    for (size_t k = 0; k < r.n; k++) r.start[k + 1] += r.start[k];
    /* fill in run order (rows top to bottom), using parent as each region's cursor */
    for (size_t k = 0; k < r.n; k++) parent[k] = r.start[k];
    for (size_t i = 0; i < n_runs; i++) {
        size_t at = parent[id[i]];
        r.points[at] = (tm__point){(double)runs[i].x0, (double)runs[i].y};
        r.points[at + 1] = (tm__point){(double)runs[i].x1, (double)runs[i].y};
        parent[id[i]] = at + 2;
    }
    free(runs);
    free(row_first);
    free(parent);
    free(id);
    *out = r;
    return TM_OK;
no_memory:
    free(runs);
    free(row_first);
    free(parent);
    free(id);
    tm__regions_clear(&r);
    return tm__fail(err, TM_ERR_NO_MEMORY, "text regions: out of memory");
}

void tm__regions_clear(tm__regions *r) {
    if (!r) return;
    free(r->start);
    free(r->points);
    free(r->pixels);
    memset(r, 0, sizeof *r);
}

/* ---- Hull and rectangles ------------------------------------------------------------------ */

static double cross(tm__point o, tm__point a, tm__point b) {
    return (a.x - o.x) * (b.y - o.y) - (a.y - o.y) * (b.x - o.x);
}

static int by_x_then_y(const void *pa, const void *pb) {
    const tm__point *a = pa, *b = pb;
    if (a->x != b->x) return a->x < b->x ? -1 : 1;
    if (a->y != b->y) return a->y < b->y ? -1 : 1;
    return 0;
}

tm_status tm__convex_hull(const tm__point *p, size_t n, tm__point *hull, size_t *n_hull, tm_error *err) {
    if (n == 0) {
        *n_hull = 0;
        return TM_OK;
    }
    tm__point *s = malloc(n * sizeof *s);
    if (!s) return tm__fail(err, TM_ERR_NO_MEMORY, "convex hull: out of memory");
    memcpy(s, p, n * sizeof *s);
    qsort(s, n, sizeof *s, by_x_then_y);
    size_t u = 0;                /* unique points, sorted */
    for (size_t i = 0; i < n; i++)
        if (u == 0 || s[i].x != s[u - 1].x || s[i].y != s[u - 1].y) s[u++] = s[i];
    if (u <= 2) {
        memcpy(hull, s, u * sizeof *s);
        *n_hull = u;
        free(s);
        return TM_OK;
    }
    /* lower chain left to right, then upper chain right to left; while they are built
     * they may hold up to 2u - 1 points, the hull has at most u */
    tm__point *h = malloc(2 * u * sizeof *h);
    if (!h) {
        free(s);
        return tm__fail(err, TM_ERR_NO_MEMORY, "convex hull: out of memory");
    }
    size_t k = 0;
    for (size_t i = 0; i < u; i++) {
        while (k >= 2 && cross(h[k - 2], h[k - 1], s[i]) <= 0) k--;
        h[k++] = s[i];
    }
    for (size_t i = u - 1, lower = k + 1; i-- > 0;) {
        while (k >= lower && cross(h[k - 2], h[k - 1], s[i]) <= 0) k--;
        h[k++] = s[i];
    }
    k--;                         /* the last point is the first one again */
    memcpy(hull, h, k * sizeof *h);
    *n_hull = k;
    free(h);
    free(s);
    return TM_OK;
}

static double distance(tm__point a, tm__point b) { return hypot(a.x - b.x, a.y - b.y); }

tm_status tm__min_area_rect(const tm__point *p, size_t n, tm__point box[4], double *side_a, double *side_b,
                            tm_error *err) {
    if (n == 0) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "minimum-area rectangle of no points");
    tm__point *h = malloc(n * sizeof *h);
    if (!h) return tm__fail(err, TM_ERR_NO_MEMORY, "minimum-area rectangle: out of memory");
    size_t m;
    tm_status s = tm__convex_hull(p, n, h, &m, err);
    if (s) {
        free(h);
        return s;
    }
    if (m <= 2) {
        tm__point a = h[0], b = h[m - 1];
        box[0] = a, box[1] = b, box[2] = b, box[3] = a;
        free(h);
        *side_a = distance(a, b);
        *side_b = 0;
        return TM_OK;
    }
    /* one side of the best rectangle lies along an edge of the hull (Freeman and Shapira);
     * for each edge, the extent of the hull along it and across it */
    double best = INFINITY;
    for (size_t i = 0; i < m; i++) {
        tm__point a = h[i], b = h[(i + 1) % m];
        double len = distance(a, b);
        if (len == 0) continue;
        double ux = (b.x - a.x) / len, uy = (b.y - a.y) / len;
        double lo_u = INFINITY, hi_u = -INFINITY, lo_v = INFINITY, hi_v = -INFINITY;
        for (size_t j = 0; j < m; j++) {
            double dx = h[j].x - a.x, dy = h[j].y - a.y;
            double pu = dx * ux + dy * uy, pv = -dx * uy + dy * ux;
            if (pu < lo_u) lo_u = pu;
            if (pu > hi_u) hi_u = pu;
            if (pv < lo_v) lo_v = pv;
            if (pv > hi_v) hi_v = pv;
        }
        double area = (hi_u - lo_u) * (hi_v - lo_v);
        if (area < best) {
            best = area;
            const double us[4] = {lo_u, hi_u, hi_u, lo_u}, vs[4] = {lo_v, lo_v, hi_v, hi_v};
            for (int c = 0; c < 4; c++)
                box[c] = (tm__point){a.x + us[c] * ux - vs[c] * uy, a.y + us[c] * uy + vs[c] * ux};
            *side_a = hi_u - lo_u;
            *side_b = hi_v - lo_v;
        }
    }
    free(h);
    return TM_OK;
}

void tm__box_order(tm__point box[4]) {
    tm__point p[4];
    memcpy(p, box, sizeof p);
    /* a stable sort by x of four points (ties keep their order, as Python's sorted) */
    for (int i = 1; i < 4; i++)
        for (int j = i; j > 0 && p[j].x < p[j - 1].x; j--) {
            tm__point t = p[j];
            p[j] = p[j - 1];
            p[j - 1] = t;
        }
    int top_left = p[1].y > p[0].y ? 0 : 1, top_right = p[3].y > p[2].y ? 2 : 3;
    box[0] = p[top_left];
    box[1] = p[top_right];
    box[2] = p[5 - top_right];
    box[3] = p[1 - top_left];
}

double tm__polygon_area(const tm__point *p, size_t n) {
    double twice = 0;
    for (size_t i = 0; i < n; i++) {
        tm__point a = p[i], b = p[(i + 1) % n];
        twice += a.x * b.y - b.x * a.y;
    }
    return twice / 2;
}

double tm__polygon_perimeter(const tm__point *p, size_t n) {
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += distance(p[i], p[(i + 1) % n]);
    return sum;
}

/* ---- Offset -------------------------------------------------------------------------------- */

tm_status tm__offset_convex(const tm__point *p, size_t n, double delta, double tolerance, tm__point **out,
                            size_t *n_out, tm_error *err) {
    if (n < 3 || !(delta > 0) || !(tolerance > 0))
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "polygon offset: needs 3 or more points and a positive "
                        "distance and tolerance (got %zu, %g, %g)", n, delta, tolerance);
    /* the angle between arc points: a chord of a circle of radius delta spanning step
     * radians lies delta * (1 - cos(step / 2)) inside it at most */
    double step = tolerance >= delta ? M_PI / 2 : 2 * acos(1 - tolerance / delta);
    if (step > M_PI / 2) step = M_PI / 2;
    size_t per_vertex = (size_t)ceil(M_PI / step) + 2, cap = n * per_vertex;
    tm__point *o = malloc(cap * sizeof *o);
    if (!o) return tm__fail(err, TM_ERR_NO_MEMORY, "polygon offset: out of memory");
    /* walk counter-clockwise (y up), where the outward normal of edge d is (d.y, -d.x) */
    const int reverse = tm__polygon_area(p, n) < 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        size_t at = reverse ? n - 1 - i : i;
        size_t prev = reverse ? (at + 1) % n : (at + n - 1) % n, next = reverse ? (at + n - 1) % n : (at + 1) % n;
        tm__point v = p[at], a = p[prev], b = p[next];
        double la = distance(a, v), lb = distance(v, b);
        if (la == 0 || lb == 0) continue;
        tm__point n0 = {(v.y - a.y) / la, -(v.x - a.x) / la}, n1 = {(b.y - v.y) / lb, -(b.x - v.x) / lb};
        double turn = atan2(n0.x * n1.y - n0.y * n1.x, n0.x * n1.x + n0.y * n1.y);
        o[k++] = (tm__point){v.x + delta * n0.x, v.y + delta * n0.y};
        if (turn > 0) {
            size_t parts = (size_t)ceil(turn / step);
            double s = turn / (double)parts;
            for (size_t j = 1; j < parts; j++) {
                double c = cos(s * (double)j), sn = sin(s * (double)j);
                o[k++] = (tm__point){v.x + delta * (n0.x * c - n0.y * sn), v.y + delta * (n0.x * sn + n0.y * c)};
            }
        }
        if (turn != 0) o[k++] = (tm__point){v.x + delta * n1.x, v.y + delta * n1.y};
    }
    *out = o;
    *n_out = k;
    return TM_OK;
}

/* ---- Perspective --------------------------------------------------------------------------- */

tm_status tm__perspective_transform(const tm__point from[4], const tm__point to[4], double m[9], tm_error *err) {
    /* eight equations in m0..m7 (m8 = 1): u (m6 x + m7 y + 1) = m0 x + m1 y + m2, and v */
    double a[8][9] = {{0}};
    for (int i = 0; i < 4; i++) {
        double x = from[i].x, y = from[i].y, u = to[i].x, v = to[i].y;
        double *r = a[2 * i], *q = a[2 * i + 1];
        r[0] = x, r[1] = y, r[2] = 1, r[6] = -u * x, r[7] = -u * y, r[8] = u;
        q[3] = x, q[4] = y, q[5] = 1, q[6] = -v * x, q[7] = -v * y, q[8] = v;
    }
    /* Gaussian elimination with partial pivoting */
    double scale = 0;
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++) scale = fmax(scale, fabs(a[i][j]));
    for (int c = 0; c < 8; c++) {
        int pivot = c;
        for (int r = c + 1; r < 8; r++)
            if (fabs(a[r][c]) > fabs(a[pivot][c])) pivot = r;
        if (!(fabs(a[pivot][c]) > 1e-12 * (scale > 1 ? scale : 1)))
            return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "perspective transform: three of the four points are "
                            "collinear");
        if (pivot != c)
            for (int j = 0; j < 9; j++) {
                double t = a[c][j];
                a[c][j] = a[pivot][j];
                a[pivot][j] = t;
            }
        for (int r = 0; r < 8; r++) {
            if (r == c || a[r][c] == 0) continue;
            double f = a[r][c] / a[c][c];
            for (int j = c; j < 9; j++) a[r][j] -= f * a[c][j];
        }
    }
    for (int i = 0; i < 8; i++) m[i] = a[i][8] / a[i][i];
    m[8] = 1;
    return TM_OK;
}

/* OpenCV's cubic convolution weights (a = -0.75) for the fraction t in [0, 1). */
static void cubic_weights(double t, double w[4]) {
    const double A = -0.75;
    w[0] = ((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A;
    w[1] = ((A + 2) * t - (A + 3)) * t * t + 1;
    w[2] = ((A + 2) * (1 - t) - (A + 3)) * (1 - t) * (1 - t) + 1;
    w[3] = 1 - w[0] - w[1] - w[2];
}

static int64_t clamp_index(int64_t i, int64_t n) { return i < 0 ? 0 : i >= n ? n - 1 : i; }

static uint8_t to_byte(double v) {
    if (!(v > 0)) return 0;
    if (v >= 255) return 255;
    return (uint8_t)lrint(v);
}

/* Where output pixel (x, y) reads: (sx, sy) by the 3x3 map m; 0 when not finite. */
static int warp_source(const double m[9], int64_t x, int64_t y, double *sx, double *sy) {
    double d = m[6] * (double)x + m[7] * (double)y + m[8];
    *sx = (m[0] * (double)x + m[1] * (double)y + m[2]) / d;
    *sy = (m[3] * (double)x + m[4] * (double)y + m[5]) / d;
    return isfinite(*sx) && isfinite(*sy);
}

/* The taps along one axis of a source coordinate s in [0, n): their indices and weights. */
typedef struct warp_taps {
    int64_t at[4];
    double w[4];
} warp_taps;

static void taps_of(double s, int64_t n, tm__interpolation method, warp_taps *t) {
    const int taps = method == TM__INTERPOLATE_BICUBIC ? 4 : 2, before = taps / 2 - 1;
    /* far outside, every tap is the same edge pixel: keep the floor in range */
    s = fmin(fmax(s, -8.0), (double)n + 8);
    double f = floor(s);
    if (method == TM__INTERPOLATE_BICUBIC) {
        cubic_weights(s - f, t->w);
    } else {
        t->w[0] = 1 - (s - f), t->w[1] = s - f;
    }
    for (int i = 0; i < taps; i++) t->at[i] = clamp_index((int64_t)f - before + i, n);
}

/* One output pixel's C channels from the taps: per channel, per tap row the weighted sum
 * along x, then those along y. */
static void sample(const tm__image *in, int taps, const warp_taps *tx, const warp_taps *ty, uint8_t *q) {
    const int C = in->channels;
    for (int c = 0; c < C; c++) {
        double sum = 0;
        for (int j = 0; j < taps; j++) {
            const uint8_t *row = in->px + ty->at[j] * in->w * C + c;
            double r = 0;
            for (int i = 0; i < taps; i++) r += tx->w[i] * row[tx->at[i] * C];
            sum += ty->w[j] * r;
        }
        q[c] = to_byte(sum);
    }
}

tm_status tm__image_warp(const tm__image *in, const double m[9], int64_t w, int64_t h, tm__interpolation method,
                         tm__image *out, tm_error *err) {
    if (w <= 0 || h <= 0 || h > MAX_PIXELS / w)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "warp to %lld x %lld: out of range", (long long)w, (long long)h);
    const int C = in->channels;
    const int64_t W = in->w, H = in->h;
    const int taps = method == TM__INTERPOLATE_BICUBIC ? 4 : 2;
    /* A map with no perspective part and no shear (a resize): d is exactly 1, sx depends
     * on x alone and sy on y alone (the products with the zero entries add +0), so each
     * column's and each row's taps are worked out once, to the same bits. */
    int separable = m[1] == 0 && m[3] == 0 && m[6] == 0 && m[7] == 0 && m[8] == 1;
    warp_taps *cols = NULL;
    unsigned char *col_ok = NULL;
    if (separable) {
        cols = malloc((size_t)w * sizeof *cols);
        col_ok = malloc((size_t)w);
        if (!cols || !col_ok) {
            free(cols), free(col_ok);
            return tm__fail(err, TM_ERR_NO_MEMORY, "warp: out of memory");
        }
        for (int64_t x = 0; x < w; x++) {
            double sx, sy;
            warp_source(m, x, 0, &sx, &sy);
            col_ok[x] = (unsigned char)isfinite(sx);
            if (col_ok[x]) taps_of(sx, W, method, &cols[x]);
        }
    }
    /* Separable: the sums along x of each source row read, when they fit in 32 MiB (a
     * line enlarged for the recognizer reads each source row for two or three output rows). */
    double *rows = NULL;
    unsigned char *row_done = NULL;
    if (separable && H <= (((int64_t)4 << 20) / C) / w) {
        rows = malloc((size_t)(H * w * C) * sizeof *rows);
        row_done = calloc((size_t)H, 1);
        if (!rows || !row_done) free(rows), free(row_done), rows = NULL, row_done = NULL;
    }
    uint8_t *px = malloc((size_t)(w * h * C));
    if (!px) {
        free(cols), free(col_ok), free(rows), free(row_done);
        return tm__fail(err, TM_ERR_NO_MEMORY, "warp: out of memory");
    }
    for (int64_t y = 0; y < h; y++) {
        uint8_t *q = px + y * w * C;
        if (separable) {
            double sx, sy;
            warp_taps ty;
            warp_source(m, 0, y, &sx, &sy);
            int row_ok = isfinite(sy);
            if (row_ok) taps_of(sy, H, method, &ty);
            if (row_ok && rows) {
                /* each tap row's sums along x, made once for all the output rows that
                 * read that source row: the same products and sums as sample's */
                for (int j = 0; j < taps; j++) {
                    int64_t sr = ty.at[j];
                    if (row_done[sr]) continue;
                    double *hs = rows + sr * w * C;
                    for (int64_t x = 0; x < w; x++)
                        for (int c = 0; c < C && col_ok[x]; c++) {
                            const uint8_t *row = in->px + sr * W * C + c;
                            double r = 0;
                            for (int i = 0; i < taps; i++) r += cols[x].w[i] * row[cols[x].at[i] * C];
                            hs[x * C + c] = r;
                        }
                    row_done[sr] = 1;
                }
                for (int64_t x = 0; x < w; x++, q += C) {
                    if (!col_ok[x]) {
                        memset(q, 0, (size_t)C);
                        continue;
                    }
                    for (int c = 0; c < C; c++) {
                        double sum = 0;
                        for (int j = 0; j < taps; j++) sum += ty.w[j] * rows[(ty.at[j] * w + x) * C + c];
                        q[c] = to_byte(sum);
                    }
                }
                continue;
            }
            for (int64_t x = 0; x < w; x++, q += C) {
                if (!row_ok || !col_ok[x]) memset(q, 0, (size_t)C);
                else sample(in, taps, &cols[x], &ty, q);
            }
            continue;
        }
        for (int64_t x = 0; x < w; x++, q += C) {
            double sx, sy;
            if (!warp_source(m, x, y, &sx, &sy)) {
                memset(q, 0, (size_t)C);
                continue;
            }
            warp_taps tx, ty;
            taps_of(sx, W, method, &tx);
            taps_of(sy, H, method, &ty);
            sample(in, taps, &tx, &ty, q);
        }
    }
    free(cols), free(col_ok), free(rows), free(row_done);
    *out = (tm__image){w, h, C, px};
    return TM_OK;
}

tm_status tm__image_resize_centered(const tm__image *in, int64_t w, int64_t h, tm__interpolation method,
                                    tm__image *out, tm_error *err) {
    if (w <= 0 || h <= 0)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "resize to %lld x %lld: out of range", (long long)w, (long long)h);
    const double sx = (double)in->w / (double)w, sy = (double)in->h / (double)h;
    const double m[9] = {sx, 0, 0.5 * sx - 0.5, 0, sy, 0.5 * sy - 0.5, 0, 0, 1};
    return tm__image_warp(in, m, w, h, method, out, err);
}

tm_status tm__image_rotate(const tm__image *in, int quarter_turns, tm__image *out, tm_error *err) {
    quarter_turns = ((quarter_turns % 4) + 4) % 4;
    const int64_t W = in->w, H = in->h, w = quarter_turns % 2 ? H : W, h = quarter_turns % 2 ? W : H;
    const int C = in->channels;
    uint8_t *px = malloc((size_t)(W * H * C));
    if (!px) return tm__fail(err, TM_ERR_NO_MEMORY, "rotate: out of memory");
    for (int64_t y = 0; y < h; y++)
        for (int64_t x = 0; x < w; x++) {
            int64_t ix, iy;      /* the input pixel that lands at (x, y) */
            switch (quarter_turns) {
            case 1: ix = W - 1 - y, iy = x; break;
            case 2: ix = W - 1 - x, iy = H - 1 - y; break;
            case 3: ix = y, iy = H - 1 - x; break;
            default: ix = x, iy = y; break;
            }
            memcpy(px + (y * w + x) * C, in->px + (iy * W + ix) * C, (size_t)C);
        }
    *out = (tm__image){w, h, C, px};
    return TM_OK;
}
