/* NonMaxSuppression (opsets 10-27): greedy selection per batch and class, computed on the
 * host from the boxes and scores, giving a constant (num_selected, 3) int64 result. Under
 * trace the boxes and scores must be known, else the plan breaks here. Not a primitive:
 * the output length depends on the data. */
#include <stdlib.h>
#include "elementwise.h"

typedef struct nms_params {
    int64_t max_per_class;
    double iou_threshold, score_threshold;
    int has_score_threshold, center_point_box;
} nms_params;

typedef struct scored_box {
    double score;
    int64_t index;
} scored_box;

/* Highest score first; ties keep the lower box index first. */
static int by_score(const void *pa, const void *pb) {
    const scored_box *a = pa, *b = pb;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    return (a->index > b->index) - (a->index < b->index);
}

/* A box's extent as (y_min, x_min, y_max, x_max). */
static void box_extent(const tm_tensor *boxes, int64_t at, int center, double *e) {
    double v[4];
    for (int k = 0; k < 4; k++) v[k] = tm_load_f64(boxes->data, boxes->dtype, (size_t)(at + k));
    if (center) {
        e[0] = v[1] - v[3] / 2;
        e[1] = v[0] - v[2] / 2;
        e[2] = v[1] + v[3] / 2;
        e[3] = v[0] + v[2] / 2;
        return;
    }
    e[0] = v[0] < v[2] ? v[0] : v[2];
    e[2] = v[0] < v[2] ? v[2] : v[0];
    e[1] = v[1] < v[3] ? v[1] : v[3];
    e[3] = v[1] < v[3] ? v[3] : v[1];
}

/* Whether two boxes overlap by more than the threshold (intersection over union). */
static int suppresses(const double *a, const double *b, double threshold) {
    double y0 = a[0] > b[0] ? a[0] : b[0], x0 = a[1] > b[1] ? a[1] : b[1];
    double y1 = a[2] < b[2] ? a[2] : b[2], x1 = a[3] < b[3] ? a[3] : b[3];
    if (x1 <= x0 || y1 <= y0) return 0;
    double inter = (x1 - x0) * (y1 - y0);
    double area_a = (a[2] - a[0]) * (a[3] - a[1]), area_b = (b[2] - b[0]) * (b[3] - b[1]);
    double uni = area_a + area_b - inter;
    if (inter <= 0 || area_a <= 0 || area_b <= 0 || uni <= 0) return 0;
    return inter / uni > threshold;
}

/* Appends the selected (batch, class, box) triples of one class to out (grown as needed). */
static int select_class(const tm_tensor *boxes, const tm_tensor *scores, int64_t b, int64_t cl,
                        const nms_params *p, scored_box *cand, double *extent, int64_t *kept,
                        int64_t **out, int64_t *n_out, int64_t *cap) {
    int64_t n_boxes = boxes->dims[1], n_cand = 0, n_kept = 0;
    int64_t row = (b * scores->dims[1] + cl) * n_boxes;
    for (int64_t i = 0; i < n_boxes; i++) {
        double s = tm_load_f64(scores->data, scores->dtype, (size_t)(row + i));
        if (p->has_score_threshold && !(s > p->score_threshold)) continue;
        cand[n_cand].score = s;
        cand[n_cand++].index = i;
    }
    qsort(cand, (size_t)n_cand, sizeof *cand, by_score);
    for (int64_t i = 0; i < n_cand && n_kept < p->max_per_class; i++) {
        double *e = extent + 4 * cand[i].index;
        box_extent(boxes, (b * n_boxes + cand[i].index) * 4, p->center_point_box, e);
        int keep = 1;
        for (int64_t j = 0; j < n_kept && keep; j++)
            keep = !suppresses(e, extent + 4 * kept[j], p->iou_threshold);
        if (!keep) continue;
        kept[n_kept++] = cand[i].index;
        if (*n_out == *cap) {
            int64_t grown = *cap ? *cap * 2 : 64;
            int64_t *o = realloc(*out, (size_t)grown * 3 * sizeof *o);
            if (!o) return -1;
            *out = o;
            *cap = grown;
        }
        int64_t *t = *out + 3 * (*n_out)++;
        t[0] = b;
        t[1] = cl;
        t[2] = cand[i].index;
    }
    return 0;
}

/* The optional scalar inputs; absent or empty ones keep their defaults. */
static int read_params(tm_lower *L, nms_params *p) {
    tm_ctx *c = tm_lctx(L);
    memset(p, 0, sizeof *p);
    p->center_point_box = tm_attr_i(L, "center_point_box", 0) != 0;
    if (tm_lhas(L, 2) && tm_vnumel(c, tm_lin(L, 2)) > 0) {
        int64_t v;
        if (tm_ew_check(L, 2, tm_lin(L, 2), TM_DT(TM_INT64)) ||
            tm_host_i64(c, tm_lin(L, 2), &v, 1) < 0)
            return -1;
        p->max_per_class = v > 0 ? v : 0;
    }
    if (tm_lhas(L, 3) && tm_vnumel(c, tm_lin(L, 3)) > 0 &&
        (tm_ew_check(L, 3, tm_lin(L, 3), TM_DTS_FLOAT) ||
         tm_host_f64(c, tm_lin(L, 3), &p->iou_threshold)))
        return -1;
    if (tm_lhas(L, 4) && tm_vnumel(c, tm_lin(L, 4)) > 0) {
        if (tm_ew_check(L, 4, tm_lin(L, 4), TM_DTS_FLOAT) ||
            tm_host_f64(c, tm_lin(L, 4), &p->score_threshold))
            return -1;
        p->has_score_threshold = 1;
    }
    return 0;
}

static int center_point_box_ok(tm_lower *L) {
    int64_t v = tm_attr_i(L, "center_point_box", 0);
    if (v == 0 || v == 1) return 0;
    tm_lfail(L, TM_ERR_UNSUPPORTED, "attribute 'center_point_box' is %lld; expected 0 or 1",
             (long long)v);
    return -1;
}

static tm_status lower_nms(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val bv = tm_ew_input(L, 0), sv = tm_ew_input(L, 1);
    if (tm_ew_check(L, 0, bv, TM_DTS_FLOAT) || tm_ew_check(L, 1, sv, TM_DTS_FLOAT))
        return c->status;
    const int64_t *bd = tm_vdims(c, bv), *sd = tm_vdims(c, sv);
    if (tm_vrank(c, bv) != 3 || bd[2] != 4 || tm_vrank(c, sv) != 3 || sd[0] != bd[0] ||
        sd[2] != bd[1])
        return tm_lfail(L, TM_ERR_SHAPE, "input 'boxes' must be (B, N, 4) and 'scores' "
                        "(B, C, N); got ranks %d and %d", tm_vrank(c, bv), tm_vrank(c, sv));
    if (center_point_box_ok(L)) return c->status;
    nms_params p;
    if (read_params(L, &p)) return c->status;
    const tm_tensor *boxes = tm_host(c, bv), *scores = boxes ? tm_host(c, sv) : NULL;
    if (!scores) return c->status;
    int64_t n_boxes = bd[1], *out = NULL, n_out = 0, cap = 0;
    scored_box *cand = malloc((size_t)(n_boxes + 1) * sizeof *cand);
    double *extent = malloc((size_t)(n_boxes + 1) * 4 * sizeof *extent);
    int64_t *kept = malloc((size_t)(n_boxes + 1) * sizeof *kept);
    int failed = !cand || !extent || !kept;
    for (int64_t b = 0; b < bd[0] && !failed; b++)
        for (int64_t cl = 0; cl < sd[1] && !failed; cl++)
            failed = select_class(boxes, scores, b, cl, &p, cand, extent, kept, &out, &n_out,
                                  &cap) != 0;
    free(cand);
    free(extent);
    free(kept);
    int64_t dims[2] = {n_out, 3};
    tm_tensor *t = failed ? NULL : tm_tensor_alloc(TM_INT64, 2, dims, c->allocator);
    if (!t) {
        free(out);
        return tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory selecting boxes");
    }
    if (n_out) memcpy(t->data, out, (size_t)n_out * 3 * sizeof *out);
    free(out);
    tm_lout(L, 0, tm_val_tensor(c, t, 0));
    return c->status;
}
TM_REGISTER_OP("", "NonMaxSuppression", 10, 27, lower_nms);
