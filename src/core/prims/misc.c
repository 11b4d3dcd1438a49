/* Primitives that fit no other family: top-k selection, range (iota) and seeded random
 * draws. Shape rules and reference kernels; there is no general sort primitive here,
 * and no generator state outside a kernel call (see the seed note at RANDOM). */
#include <math.h>
#include <string.h>
#include "../ctx.h"

/* ---- TOPK ------------------------------------------------------------------------------- */

/* A kept candidate: its order key (see order_key) and position along the axis. */
typedef struct topk_entry {
    uint64_t key;
    int64_t index;
} topk_entry;

static int sortable(tm_dtype dt) {
    return tm_dtype_is_float(dt) || tm_dtype_is_signed_int(dt) || tm_dtype_is_unsigned_int(dt);
}

tm_status tm__shape_topk(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                         int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)prim; (void)nin; (void)nout;
    const tm_vinfo *x = in[0];
    if (!sortable(x->dtype))
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "topk: %s values cannot be ordered",
                           tm_dtype_name(x->dtype));
    int64_t axis = a->i[0] < 0 ? a->i[0] + x->rank : a->i[0], k = a->i[1];
    if (x->rank < 1 || axis < 0 || axis >= x->rank)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "topk: axis %lld is out of range for rank %d",
                           (long long)a->i[0], x->rank);
    if (k < 0 || k > x->dims[axis])
        return tm_ctx_fail(c, TM_ERR_SHAPE, "topk: k = %lld is outside 0..%lld (the size of "
                           "axis %lld)", (long long)k, (long long)x->dims[axis], (long long)axis);
    for (int i = 0; i < 2; i++) {
        out[i].dtype = i == 0 ? x->dtype : TM_INT64;
        out[i].rank = x->rank;
        memcpy(out[i].dims, x->dims, sizeof out[i].dims);
        out[i].dims[axis] = k;
    }
    *scratch = (size_t)k * sizeof(topk_entry);
    return TM_OK;
}

/* Maps a double to an unsigned key with the same order. NaN is above everything (as in
 * PyTorch and ONNX Runtime) and all NaNs are equal; -0 equals +0. */
static uint64_t float_key(double v) {
    if (isnan(v)) return UINT64_MAX;
    if (v == 0) v = 0.0;
    uint64_t bits;
    memcpy(&bits, &v, sizeof bits);
    return bits >> 63 ? ~bits : bits | (UINT64_C(1) << 63);
}

/* Element i of x as a key that orders like the value. */
static uint64_t order_key(const tm_tensor *x, int64_t i) {
    tm_dtype dt = x->dtype;
    if (dt == TM_FLOAT) return float_key(((const float *)x->data)[i]);
    if (dt == TM_INT64) return (uint64_t)((const int64_t *)x->data)[i] ^ (UINT64_C(1) << 63);
    if (tm_dtype_is_float(dt)) return float_key(tm_load_f64(x->data, dt, (size_t)i));
    if (tm_dtype_is_signed_int(dt))
        return (uint64_t)tm_load_i64(x->data, dt, (size_t)i) ^ (UINT64_C(1) << 63);
    return tm_load_u64(x->data, dt, (size_t)i);
}

/* a ranks before b: a larger key, or an equal key at a lower index. */
static int better(const topk_entry *a, const topk_entry *b) {
    return a->key > b->key || (a->key == b->key && a->index < b->index);
}

static void swap_entries(topk_entry *a, topk_entry *b) {
    topk_entry t = *a;
    *a = *b;
    *b = t;
}

/* The heap keeps the worst kept entry at the root, so a newcomer is compared once. */
static void sift_down(topk_entry *heap, int64_t n, int64_t i) {
    for (;;) {
        int64_t left = 2 * i + 1, right = left + 1, worst = i;
        if (left < n && better(&heap[worst], &heap[left])) worst = left;
        if (right < n && better(&heap[worst], &heap[right])) worst = right;
        if (worst == i) return;
        swap_entries(&heap[i], &heap[worst]);
        i = worst;
    }
}

static void sift_up(topk_entry *heap, int64_t i) {
    while (i > 0) {
        int64_t parent = (i - 1) / 2;
        if (!better(&heap[parent], &heap[i])) return;
        swap_entries(&heap[parent], &heap[i]);
        i = parent;
    }
}

/* Selects the k best of n elements at x[base + j * stride] into heap[0..k), best first. */
static void select_line(const tm_tensor *x, int64_t base, int64_t stride, int64_t n, int64_t k,
                        uint64_t flip, topk_entry *heap) {
    int64_t size = 0;
    for (int64_t j = 0; j < n; j++) {
        topk_entry e = {order_key(x, base + j * stride) ^ flip, j};
        if (size < k) {
            heap[size] = e;
            sift_up(heap, size++);
        } else if (better(&e, &heap[0])) {
            heap[0] = e;
            sift_down(heap, k, 0);
        }
    }
    for (int64_t end = k - 1; end > 0; end--) {
        swap_entries(&heap[0], &heap[end]);
        sift_down(heap, end, 0);
    }
}

/* Outputs are always sorted best first, which `sorted = 0` (order unspecified) allows too. */
tm_status tm__kernel_topk(const tm_kcall *k) {
    const tm_tensor *x = k->in[0];
    tm_tensor *values = k->out[0], *indices = k->out[1];
    int axis = (int)(k->a->i[0] < 0 ? k->a->i[0] + x->rank : k->a->i[0]);
    int64_t count = k->a->i[1], n = x->dims[axis], outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= x->dims[d];
    for (int d = axis + 1; d < x->rank; d++) inner *= x->dims[d];
    if (count == 0 || outer == 0 || inner == 0) return TM_OK;
    /* Smallest-first is largest-first on complemented keys; ties still go to the lower
     * index, and NaN, the largest key, becomes the smallest and so comes last. */
    uint64_t flip = k->a->i[2] ? 0 : UINT64_MAX;
    size_t size = tm_dtype_elem_size(x->dtype);
    topk_entry *heap = k->scratch;
    int64_t *out_index = indices->data;
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t i = 0; i < inner; i++) {
            int64_t base = o * n * inner + i;
            select_line(x, base, inner, n, count, flip, heap);
            for (int64_t j = 0; j < count; j++) {
                int64_t at = (o * count + j) * inner + i;
                memcpy((char *)values->data + (size_t)at * size,
                       (const char *)x->data + (size_t)(base + heap[j].index * inner) * size,
                       size);
                out_index[at] = heap[j].index;
            }
        }
    }
    return TM_OK;
}

/* ---- RANGE ------------------------------------------------------------------------------ */

tm_status tm__shape_range(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                          int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)prim; (void)in; (void)nin; (void)nout; (void)scratch;
    int64_t dt = a->i[0], count = a->i[1];
    if (!tm_dtype_is_valid((int)dt) || !sortable((tm_dtype)dt) || dt == TM_BOOL)
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "range: cannot make a range of %s",
                           tm_dtype_name((tm_dtype)dt));
    if (count < 0)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "range: negative count %lld", (long long)count);
    out->dtype = (tm_dtype)dt;
    out->rank = 1;
    out->dims[0] = count;
    return TM_OK;
}

/* output[i] = start + i * delta, computed in the output's precision as ONNX Range defines
 * it (f16/bf16/float8 in float32, then rounded; integers wrap). */
tm_status tm__kernel_range(const tm_kcall *k) {
    tm_tensor *y = k->out[0];
    tm_dtype dt = y->dtype;
    int64_t n = y->dims[0];
    if (dt == TM_DOUBLE) {
        double start = k->a->f[0], delta = k->a->f[1], *out = y->data;
        for (int64_t i = 0; i < n; i++) out[i] = start + (double)i * delta;
    } else if (tm_dtype_is_float(dt)) {
        float start = (float)k->a->f[0], delta = (float)k->a->f[1];
        if (dt == TM_FLOAT) {
            float *out = y->data;
            for (int64_t i = 0; i < n; i++) out[i] = start + (float)i * delta;
        } else {
            for (int64_t i = 0; i < n; i++)
                tm_store_f64(y->data, dt, (size_t)i, start + (float)i * delta);
        }
    } else {
        uint64_t start = (uint64_t)k->a->i[2], delta = (uint64_t)k->a->i[3];
        if (dt == TM_INT64) {
            int64_t *out = y->data;
            for (int64_t i = 0; i < n; i++) out[i] = (int64_t)(start + (uint64_t)i * delta);
        } else if (dt == TM_INT32) {
            int32_t *out = y->data;
            for (int64_t i = 0; i < n; i++) out[i] = (int32_t)(start + (uint64_t)i * delta);
        } else {
            for (int64_t i = 0; i < n; i++)
                tm_store_u64(y->data, dt, (size_t)i, start + (uint64_t)i * delta);
        }
    }
    return TM_OK;
}

/* ---- RANDOM_UNIFORM and RANDOM_NORMAL --------------------------------------------------- */

tm_status tm__shape_random(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                           int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)in; (void)nin; (void)nout; (void)scratch;
    const char *name = tm_prims[prim].name;
    int64_t dt = a->i[0], rank = a->i[1];
    if (!tm_dtype_is_valid((int)dt) || !tm_dtype_is_float((tm_dtype)dt))
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "%s: draws floats only, not %s", name,
                           tm_dtype_name((tm_dtype)dt));
    if (rank < 0 || rank > TM_MAX_RANK)
        return tm_ctx_fail(c, TM_ERR_UNSUPPORTED, "%s: rank %lld is outside 0..%d", name,
                           (long long)rank, TM_MAX_RANK);
    for (int d = 0; d < rank; d++)
        if (a->i[2 + d] < 0)
            return tm_ctx_fail(c, TM_ERR_SHAPE, "%s: dim %d is negative (%lld)", name, d,
                               (long long)a->i[2 + d]);
    if (tm_numel((int)rank, &a->i[2]) < 0)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "%s: the element count overflows", name);
    out->dtype = (tm_dtype)dt;
    out->rank = (int)rank;
    for (int d = 0; d < rank; d++) out->dims[d] = a->i[2 + d];
    return TM_OK;
}

/* xoshiro256** (Blackman and Vigna), seeded through splitmix64. */
typedef struct rng {
    uint64_t s[4];
} rng;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(rng *r) {
    uint64_t *s = r->s, result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1) with 53 random bits. */
static double rng_unit(rng *r) { return (double)(rng_next(r) >> 11) * 0x1p-53; }

/* The seed is f[2]; a NaN seed means a fixed default seed. Fresh draws per run (ONNX: no
 * seed given) set i[10] and are seeded by rng_fresh below. */
static rng rng_seeded(double seed) {
    uint64_t x = UINT64_C(0x5eed5eed5eed5eed);
    if (!isnan(seed)) {
        if (seed == 0) seed = 0.0;
        memcpy(&x, &seed, sizeof x);
    }
    rng r;
    for (int i = 0; i < 4; i++) r.s[i] = splitmix64(&x);
    return r;
}

/* Values in [low, high): rounding to the dtype may reach `high`, which is then stepped
 * down (float32, float64) or replaced by `low` (narrower floats, where this is rare). */
static void fill_uniform(tm_tensor *y, int64_t n, double low, double high, rng *r) {
    tm_dtype dt = y->dtype;
    if (dt == TM_FLOAT) {
        float *out = y->data, top = (float)high, bottom = (float)low;
        float below_top = nextafterf(top, bottom);
        for (int64_t i = 0; i < n; i++) {
            float v = (float)(low + rng_unit(r) * (high - low));
            out[i] = v >= top && top > bottom ? below_top : v;
        }
    } else if (dt == TM_DOUBLE) {
        double *out = y->data, below_top = nextafter(high, low);
        for (int64_t i = 0; i < n; i++) {
            double v = low + rng_unit(r) * (high - low);
            out[i] = v >= high && high > low ? below_top : v;
        }
    } else {
        for (int64_t i = 0; i < n; i++) {
            tm_store_f64(y->data, dt, (size_t)i, low + rng_unit(r) * (high - low));
            double v = tm_load_f64(y->data, dt, (size_t)i);
            if (v >= high && high > low) tm_store_f64(y->data, dt, (size_t)i, low);
        }
    }
}

/* Box-Muller: two uniforms give two independent standard normals. */
static void fill_normal(tm_tensor *y, int64_t n, double mean, double scale, rng *r) {
    tm_dtype dt = y->dtype;
    for (int64_t i = 0; i < n; i += 2) {
        double u1 = 1.0 - rng_unit(r), u2 = rng_unit(r); /* u1 in (0, 1]: log is finite */
        double radius = sqrt(-2.0 * log(u1)), angle = 6.283185307179586 * u2;
        double pair[2] = {mean + scale * radius * cos(angle),
                          mean + scale * radius * sin(angle)};
        for (int64_t j = 0; j < 2 && i + j < n; j++) {
            if (dt == TM_FLOAT) ((float *)y->data)[i + j] = (float)pair[j];
            else tm_store_f64(y->data, dt, (size_t)(i + j), pair[j]);
        }
    }
}

/* A fresh draw: the node's seed and the run's, mixed (both already well spread). */
static rng rng_fresh(double seed, uint64_t run_seed) {
    uint64_t x;
    memcpy(&x, &seed, sizeof x);
    x ^= run_seed * UINT64_C(0xd1342543de82ef95);
    rng r;
    for (int i = 0; i < 4; i++) r.s[i] = splitmix64(&x);
    return r;
}

tm_status tm__kernel_random(const tm_kcall *k) {
    tm_tensor *y = k->out[0];
    rng r = k->a->i[10] ? rng_fresh(k->a->f[2], k->run_seed) : rng_seeded(k->a->f[2]);
    int64_t n = tm_tensor_numel_(y);
    if (k->prim == TM_P_RANDOM_UNIFORM) fill_uniform(y, n, k->a->f[0], k->a->f[1], &r);
    else fill_normal(y, n, k->a->f[0], k->a->f[1], &r);
    return TM_OK;
}
