/* Slice: starts/ends/axes as attributes (opsets 1-9) or host-known inputs with steps
 * (10 and later), clamped as the spec says, into one SLICE primitive. Not Split. */
#include <stdint.h>
#include "../lower.h"

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) {
    return v < lo ? lo : v > hi ? hi : v;
}

/* One axis of dim d: the spec's clamping, then the element count. */
static void slice_axis(int64_t d, int64_t start, int64_t end, int64_t step, int64_t *first,
                       int64_t *count) {
    if (start < 0) start += d;
    if (end < 0) end += d;
    uint64_t span, stride;
    if (step > 0) {
        start = clamp64(start, 0, d);
        end = clamp64(end, 0, d);
        span = end > start ? (uint64_t)(end - start) : 0;
        stride = (uint64_t)step;
    } else {
        start = clamp64(start, 0, d - 1);
        end = clamp64(end, -1, d - 1);
        span = start > end ? (uint64_t)(start - end) : 0;
        stride = (uint64_t)0 - (uint64_t)step;
    }
    *count = span ? (int64_t)((span - 1) / stride + 1) : 0;
    *first = *count ? start : 0;
}

static tm_status slice_apply(tm_lower *L, tm_val x, const int64_t *starts, const int64_t *ends,
                             const int64_t *axes, const int64_t *steps, int n) {
    tm_ctx *c = tm_lctx(L);
    int rank = tm_vrank(c, x);
    int64_t st[TM_MAX_RANK], sp[TM_MAX_RANK], cn[TM_MAX_RANK];
    int seen[TM_MAX_RANK] = {0};
    for (int d = 0; d < rank; d++) {
        st[d] = 0;
        sp[d] = 1;
        cn[d] = tm_vdims(c, x)[d];
    }
    for (int i = 0; i < n; i++) {
        int64_t a = axes ? axes[i] : i;
        if (a < 0) a += rank;
        if (a < 0 || a >= rank || seen[a])
            return tm_lfail(L, TM_ERR_SHAPE, "axes entry %lld is %s for rank %d",
                            (long long)(axes ? axes[i] : i),
                            a >= 0 && a < rank ? "repeated" : "out of range", rank);
        seen[a] = 1;
        int64_t step = steps ? steps[i] : 1;
        if (step == 0) return tm_lfail(L, TM_ERR_SHAPE, "steps entry %d is 0", i);
        sp[a] = step;
        slice_axis(tm_vdims(c, x)[a], starts[i], ends[i], step, &st[a], &cn[a]);
    }
    tm_lout(L, 0, tm_slice(c, x, st, sp, cn));
    return c->status;
}

static tm_status lower_slice_v1(tm_lower *L) {
    tm_val x = tm_lin(L, 0);
    if (x == TM_NONE) return tm_lfail(L, TM_ERR_PARSE, "input 0 ('data') is missing");
    const int64_t *starts, *ends, *axes = NULL;
    int ns = tm_attr_ints(L, "starts", &starts), ne = tm_attr_ints(L, "ends", &ends);
    if (ns < 0 || ne < 0)
        return tm_lfail(L, TM_ERR_PARSE, "attribute '%s' is missing", ns < 0 ? "starts" : "ends");
    if (ns != ne)
        return tm_lfail(L, TM_ERR_SHAPE, "attributes 'starts' (%d) and 'ends' (%d) differ in "
                        "length", ns, ne);
    int na = tm_attr_ints(L, "axes", &axes);
    if (na >= 0 && na != ns)
        return tm_lfail(L, TM_ERR_SHAPE, "attribute 'axes' has %d entries, 'starts' has %d", na,
                        ns);
    return slice_apply(L, x, starts, ends, na >= 0 ? axes : NULL, NULL, ns);
}
TM_REGISTER_OP("", "Slice", 1, 9, lower_slice_v1);

static const char *const input_names[] = {"data", "starts", "ends", "axes", "steps"};

/* Input i as int64s on the host; -1 on error. */
static int read_ints(tm_lower *L, int i, int64_t *out) {
    tm_ctx *c = tm_lctx(L);
    tm_val v = tm_lin(L, i);
    tm_dtype dt = tm_vdtype(c, v);
    if (dt != TM_INT64 && dt != TM_INT32) {
        tm_lfail(L, TM_ERR_DTYPE, "input '%s' must be int32 or int64, got %s", input_names[i],
                 tm_dtype_name(dt));
        return -1;
    }
    if (tm_vrank(c, v) != 1 || tm_vnumel(c, v) > TM_MAX_RANK) {
        tm_lfail(L, TM_ERR_SHAPE, "input '%s' must be 1-D with at most %d entries",
                 input_names[i], TM_MAX_RANK);
        return -1;
    }
    return (int)tm_host_i64(c, v, out, TM_MAX_RANK);
}

static tm_status lower_slice(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_lin(L, 0);
    if (x == TM_NONE) return tm_lfail(L, TM_ERR_PARSE, "input 0 ('data') is missing");
    if (!tm_lhas(L, 1) || !tm_lhas(L, 2))
        return tm_lfail(L, TM_ERR_PARSE, "input '%s' is missing",
                        tm_lhas(L, 1) ? "ends" : "starts");
    int64_t v[5][TM_MAX_RANK];
    int n[5] = {0};
    for (int i = 1; i < 5; i++) {
        n[i] = -1;
        if (!tm_lhas(L, i)) continue;
        n[i] = read_ints(L, i, v[i]);
        if (n[i] < 0) return c->status;
    }
    for (int i = 2; i < 5; i++)
        if (n[i] >= 0 && n[i] != n[1])
            return tm_lfail(L, TM_ERR_SHAPE, "input '%s' has %d entries, 'starts' has %d",
                            input_names[i], n[i], n[1]);
    return slice_apply(L, x, v[1], v[2], n[3] >= 0 ? v[3] : NULL, n[4] >= 0 ? v[4] : NULL, n[1]);
}
TM_REGISTER_OP("", "Slice", 10, 27, lower_slice);
