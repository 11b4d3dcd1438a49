/* ATTENTION (nn.def): scaled, masked softmax attention per head in one kernel, reading q,
 * k and v in whichever of the two layouts exports leave them (so the transposes around
 * attention and the copies of grouped k/v heads disappear) and writing the layout the
 * next node wants. Made by runtime/passes/attention.c; not a lowering of ONNX's
 * Attention operators (src/onnx/ops/attention.c, ms_attention.c). */
#if defined(__GNUC__) && !defined(__clang__)
/* -O2 leaves plain loops scalar (GCC's very-cheap vector cost model); the score rows are
 * scaled and masked by plain loops: the full vectorizer. No contraction: each step
 * rounds as the unfused primitives do. */
#pragma GCC optimize("O3", "no-trapping-math")
#endif
#include <stdio.h>
#include <string.h>
#include "../ctx.h"
#include "fused.h"
#include "../../backends/cpu/gemm.h"
#include "../../backends/cpu/vmath.h"
#include "../../backends/cpu/kvmath.h"
#include "../dtype.h"

/* Query rows per task: the score block (rows x Sk) stays in cache. */
#define QUERY_BLOCK 64
/* Tasks run in this many slices at most, each with its own piece of scratch. */
#define SLICES 16

enum { SCALE_NONE = 0, SCALE_MUL = 1, SCALE_DIV = 2 };

/* (B, H, S, D) of an operand in layout 0 (B, H, S, D), 1 (B, S, H, D) or 2 (S, B, H, D)
 * (a KV cache kept in place for a batch: passes/kv_append.c), and the element strides of
 * its batch, head and sequence axes. */
typedef struct operand {
    int64_t b, h, s, d;
    int64_t batch_stride, head_stride, row_stride;
} operand;

static operand operand_of(const int64_t *dims, int layout) {
    operand o;
    o.d = dims[3];
    if (layout == 2) {
        o.s = dims[0];
        o.b = dims[1];
        o.h = dims[2];
        o.batch_stride = o.h * o.d;
        o.head_stride = o.d;
        o.row_stride = o.b * o.h * o.d;
        return o;
    }
    o.b = dims[0];
    o.h = layout ? dims[2] : dims[1];
    o.s = layout ? dims[1] : dims[2];
    o.batch_stride = dims[1] * dims[2] * dims[3];
    o.head_stride = layout ? o.d : o.s * o.d;
    o.row_stride = layout ? o.h * o.d : o.d;
    return o;
}

typedef struct geometry {
    operand q, k, v, out;
    int64_t group;                 /* query heads per kv head */
    int64_t mask_stride[4];        /* 0 along broadcast dims */
    int scale_kind;
    float scale;
    int causal;                    /* i[6]: key j > (Sk - Sq) + i of query i is f[1] */
    float fill;
    int half;                      /* k and v float16 (a cache kept so, passes/kv_append.c) */
} geometry;

/* Causal rows as the graph computes them: the scale first (so the masked scores are the
 * fill itself, exactly, as WHERE(causal, scaled, fill) gives), then the rest of
 * finish_scores without it. Exact also where a padding mask leaves a row with nothing
 * but masked keys (their sum with the mask then decides, as in the graph). Returns
 * whether the rows are scaled now. */
static int causal_rows(const geometry *g, float *scores, int64_t ld, int64_t rows, int64_t i0) {
    if (!g->causal) return 0;
    for (int64_t r = 0; r < rows; r++) {
        float *row = scores + r * ld;
        int64_t keep = g->k.s - g->q.s + i0 + r + 1;
        if (g->scale_kind == SCALE_MUL)
            for (int64_t j = 0; j < keep; j++) row[j] = row[j] * g->scale;
        else if (g->scale_kind == SCALE_DIV)
            for (int64_t j = 0; j < keep; j++) row[j] = row[j] / g->scale;
        for (int64_t j = keep; j < g->k.s; j++) row[j] = g->fill;
    }
    return 1;
}

static tm_status read_geometry(const tm_args *a, int nin, const int64_t *const *dims,
                               const int *ranks, geometry *g, char *why, size_t cap) {
    for (int i = 0; i < nin; i++)
        if (ranks[i] != 4) {
            snprintf(why, cap, "attention: input %d has rank %d, expected 4", i, ranks[i]);
            return TM_ERR_SHAPE;
        }
    for (int i = 0; i < 4; i++)
        if (a->i[i] != 0 && a->i[i] != 1 && !(a->i[i] == 2 && (i == 1 || i == 2))) {
            snprintf(why, cap, "attention: layout %lld of input %d is not 0 or 1 (2 for k "
                     "and v)", (long long)a->i[i], i);
            return TM_ERR_INVALID_ARGUMENT;
        }
    g->q = operand_of(dims[0], (int)a->i[0]);
    g->k = operand_of(dims[1], (int)a->i[1]);
    g->v = operand_of(dims[2], (int)a->i[2]);
    if (g->k.b != g->q.b || g->v.b != g->q.b || g->k.h != g->v.h || g->k.s != g->v.s ||
        g->k.d != g->q.d || g->k.h < 1 || g->q.h % g->k.h) {
        snprintf(why, cap, "attention: q (B %lld, H %lld, D %lld), k (B %lld, H %lld, S %lld, "
                 "D %lld) and v (B %lld, H %lld, S %lld) do not fit", (long long)g->q.b,
                 (long long)g->q.h, (long long)g->q.d, (long long)g->k.b, (long long)g->k.h,
                 (long long)g->k.s, (long long)g->k.d, (long long)g->v.b, (long long)g->v.h,
                 (long long)g->v.s);
        return TM_ERR_SHAPE;
    }
    g->group = g->q.h / g->k.h;
    int64_t out_dims[4] = {g->q.b, g->q.h, g->q.s, g->v.d};
    if (a->i[3]) {
        out_dims[1] = g->q.s;
        out_dims[2] = g->q.h;
    }
    g->out = operand_of(out_dims, (int)a->i[3]);
    memset(g->mask_stride, 0, sizeof g->mask_stride);
    if (a->i[4]) {
        if (nin != 4) {
            snprintf(why, cap, "attention: a mask is announced but not given");
            return TM_ERR_SHAPE;
        }
        const int64_t *m = dims[3];
        int64_t want[4] = {g->q.b, g->q.h, g->q.s, g->k.s}, stride = 1;
        for (int d = 3; d >= 0; d--) {
            if (m[d] != 1 && m[d] != want[d]) {
                snprintf(why, cap, "attention: mask dim %d is %lld, not 1 or %lld", d,
                         (long long)m[d], (long long)want[d]);
                return TM_ERR_SHAPE;
            }
            g->mask_stride[d] = m[d] == 1 ? 0 : stride;
            stride *= m[d];
        }
    } else if (nin != 3) {
        snprintf(why, cap, "attention: expected 3 inputs without a mask, got %d", nin);
        return TM_ERR_SHAPE;
    }
    g->scale_kind = (int)a->i[5];
    g->scale = (float)a->f[0];
    g->causal = a->i[6] != 0;
    g->fill = (float)a->f[1];
    if (g->causal && g->q.s > g->k.s) {
        snprintf(why, cap, "attention: causal with %lld queries over %lld keys",
                 (long long)g->q.s, (long long)g->k.s);
        return TM_ERR_SHAPE;
    }
    if (g->scale_kind < SCALE_NONE || g->scale_kind > SCALE_DIV) {
        snprintf(why, cap, "attention: bad scale step %d", g->scale_kind);
        return TM_ERR_INVALID_ARGUMENT;
    }
    return TM_OK;
}

/* Floats of one kv head's k and v rows converted from float16 (16-float aligned). */
static size_t half_floats(const geometry *g) {
    return (size_t)((g->k.s * g->q.d + 15) / 16 * 16 + (g->k.s * g->v.d + 15) / 16 * 16);
}

/* Rows of one task's products. With one query a head (a decode step) a task takes the
 * query heads that share a kv head, as rows (each of their scores and values is the
 * same chain of FMAs either way): k and v are read once for the group, not once a head. */
static int64_t task_rows(const geometry *g) {
    int64_t rows = g->q.s == 1 ? g->group : g->q.s;
    return rows < QUERY_BLOCK ? rows : QUERY_BLOCK;
}

/* Tasks per (batch, kv head) with heads as rows, per (batch, query head) otherwise. */
static int64_t task_blocks(const geometry *g) {
    return ((g->q.s == 1 ? g->group : g->q.s) + QUERY_BLOCK - 1) / QUERY_BLOCK;
}

/* The task's product sizes, for the GEMMs' scratch; a decode step's sweep (kvmath.h)
 * takes every query head's scores of a batch at most. A float16 k and v are read through
 * float32 copies of one kv head's rows (prompts), after the rest. */
static size_t slice_floats(const geometry *g) {
    int64_t rows = task_rows(g);
    size_t gemm = tm_sgemm_scratch(0, 1, rows, g->k.s, g->q.d);
    size_t pv = tm_sgemm_scratch(0, 0, rows, g->v.d, g->k.s);
    if (pv > gemm) gemm = pv;
    /* The vector kernels' k transposed, where they take the head size. */
    size_t kt = (size_t)(g->q.d * ((g->k.s + 15) / 16 * 16));
    if (kt > gemm / sizeof(float)) gemm = kt * sizeof(float);
    size_t n = (size_t)(rows * g->k.s) + gemm / sizeof(float) + 32;
    if (g->q.s == 1 && (size_t)(g->q.h * g->k.s) + 32 > n) n = (size_t)(g->q.h * g->k.s) + 32;
    return n + (g->half ? half_floats(g) : 0);
}

/* The vector kernels for these head sizes, or NULL (the GEMMs). */
static const tm__vmath *vector_kernels(const geometry *g) {
    const tm__vmath *vm = tm__vmath_active();
    if (!vm || !vm->attn_scores || g->q.d % 16 || g->v.d % 16 || g->q.d > TM_ATTN_MAX_D ||
        g->v.d > TM_ATTN_MAX_D)
        return NULL;
    return vm;
}

tm_status tm__shape_attention(tm_ctx *c, int prim, const tm_args *a, const tm_vinfo *const *in,
                              int nin, tm_vinfo *out, int nout, size_t *scratch) {
    (void)prim; (void)nout;
    if (nin < 3 || nin > 4)
        return tm_ctx_fail(c, TM_ERR_SHAPE, "attention: expected 3 or 4 inputs, got %d", nin);
    const int64_t *dims[4];
    int ranks[4];
    for (int i = 0; i < nin; i++) {
        /* k and v may be a float16 cache (ATTENTION alone, both so) */
        int half_ok = prim == TM_P_ATTENTION && (i == 1 || i == 2) &&
                      in[1]->dtype == TM_FLOAT16 && in[2]->dtype == TM_FLOAT16;
        if (in[i]->dtype != TM_FLOAT && !half_ok)
            return tm_ctx_fail(c, TM_ERR_DTYPE, "attention: input %d is %s, not float32", i,
                               tm_dtype_name(in[i]->dtype));
        dims[i] = in[i]->dims;
        ranks[i] = in[i]->rank;
    }
    geometry g;
    char why[400];
    tm_status s = read_geometry(a, nin, dims, ranks, &g, why, sizeof why);
    if (s != TM_OK) return tm_ctx_fail(c, s, "%s", why);
    g.half = in[1]->dtype == TM_FLOAT16;
    out->dtype = TM_FLOAT;
    out->rank = 4;
    out->dims[0] = g.q.b;
    out->dims[1] = a->i[3] ? g.q.s : g.q.h;
    out->dims[2] = a->i[3] ? g.q.h : g.q.s;
    out->dims[3] = g.v.d;
    if (nout == 2) {   /* ATTENTION_TRAIN: the probabilities too */
        out[1].dtype = TM_FLOAT;
        out[1].rank = 4;
        out[1].dims[0] = g.q.b;
        out[1].dims[1] = g.q.h;
        out[1].dims[2] = g.q.s;
        out[1].dims[3] = g.k.s;
    }
    *scratch = SLICES * slice_floats(&g) * sizeof(float) + 64;
    return TM_OK;
}

typedef struct attention_call {
    const geometry *g;
    const float *q;
    const void *k, *v;    /* float32, or float16 (g->half) */
    const float *mask;
    float *out;
    float *probs;          /* ATTENTION_TRAIN's second output, NULL: scores in scratch */
    float *scratch;
    size_t slice_floats;
    int64_t blocks;        /* tasks per head (task_blocks) */
} attention_call;

/* The mask row of query row i of head h in batch b, or NULL without a mask. */
static const float *mask_row(const attention_call *ac, int64_t b, int64_t h, int64_t i) {
    const geometry *g = ac->g;
    if (!ac->mask) return NULL;
    return ac->mask + b * g->mask_stride[0] + h * g->mask_stride[1] + i * g->mask_stride[2];
}

/* Rows of scores in place: scaled, masked, softmaxed (several side by side). */
static void finish_scores(const attention_call *ac, float *scores, int64_t rows,
                          const float *const *masks, int scaled) {
    const geometry *g = ac->g;
    tm_softmax_pre pre = {scaled ? SCALE_NONE : g->scale_kind, scaled ? 1.0f : g->scale,
                          g->mask_stride[3] == 0};
    tm__softmax_block_f32(scores, rows, g->k.s, g->k.s, &pre, masks);
}

/* The sweep kernels (kvmath.h) for a decode step's head sizes. */
static const tm__kvmath *sweep_kernels(const geometry *g) {
    const tm__kvmath *km = tm__kvmath_active();
    return g->q.d % km->d_multiple || g->v.d % km->d_multiple ? tm__kvmath_c() : km;
}

/* A decode step (one query a head): the slice's kv heads of each batch in one sweep over
 * the cache's rows (kvmath.h), their scores side by side; the slices split the (batch, kv
 * head) pairs, and each score and value is the same chain of operations however they are
 * split. */
static void decode_slice(const attention_call *ac, int ith, int nth) {
    const geometry *g = ac->g;
    const tm__kvmath *km = sweep_kernels(g);
    int64_t tasks = g->q.b * g->k.h, t1 = tasks * (ith + 1) / nth;
    float *scratch = ac->scratch + (size_t)ith * ac->slice_floats;
    size_t es = g->half ? 2 : 4;
    for (int64_t t = tasks * ith / nth; t < t1;) {
        int64_t b = t / g->k.h, kv0 = t % g->k.h;
        int64_t kv1 = t1 - b * g->k.h < g->k.h ? t1 - b * g->k.h : g->k.h;
        int64_t heads = kv1 - kv0, h0 = kv0 * g->group, rows = heads * g->group;
        /* Rows (b, h0 + r) of (B, Hq, 1, Sk): the probabilities kept, else scratch. */
        float *scores = ac->probs ? ac->probs + (b * g->q.h + h0) * g->k.s : scratch;
        const float *q = ac->q + b * g->q.batch_stride + h0 * g->q.head_stride;
        const char *k = (const char *)ac->k + (size_t)(b * g->k.batch_stride + kv0 * g->k.head_stride) * es;
        const char *v = (const char *)ac->v + (size_t)(b * g->v.batch_stride + kv0 * g->v.head_stride) * es;
        float *o = ac->out + b * g->out.batch_stride + h0 * g->out.head_stride;
        /* The sweep reads head h at h * d of a row: heads side by side ((B, S, H, D)), or
         * each head's rows one after another ((B, H, S, D): then heads one at a time). */
        int side_by_side = g->k.head_stride == g->k.d && g->v.head_stride == g->v.d;
        int64_t step = side_by_side ? heads : 1;
        for (int64_t h = 0; h < heads; h += step) {
            size_t at_k = (size_t)(h * g->k.head_stride) * es;
            float *sh = scores + h * g->group * g->k.s;
            km->scores(step, g->group, g->k.s, g->q.d, q + h * g->group * g->q.head_stride,
                       g->q.head_stride, k + at_k, g->k.row_stride, g->half, sh, g->k.s);
        }
        const float *masks[QUERY_BLOCK];
        for (int64_t r0 = 0; r0 < rows; r0 += QUERY_BLOCK) {
            int64_t n = rows - r0 < QUERY_BLOCK ? rows - r0 : QUERY_BLOCK;
            for (int64_t r = 0; r < n; r++) masks[r] = mask_row(ac, b, h0 + r0 + r, 0);
            finish_scores(ac, scores + r0 * g->k.s, n, masks, 0);
        }
        for (int64_t h = 0; h < heads; h += step) {
            size_t at_v = (size_t)(h * g->v.head_stride) * es;
            km->values(step, g->group, g->k.s, g->v.d, scores + h * g->group * g->k.s, g->k.s,
                       v + at_v, g->v.row_stride, g->half, o + h * g->group * g->out.head_stride,
                       g->out.head_stride);
        }
        t += heads;
    }
}

/* One kv head's k and v rows (float16) as float32 rows of d, into kf and vf. */
static void widen_head(const geometry *g, const tm__kvmath *km, const uint16_t *k,
                       const uint16_t *v, float *kf, float *vf) {
    for (int64_t j = 0; j < g->k.s; j++) {
        km->to_f32(k + j * g->k.row_stride, kf + j * g->q.d, g->q.d);
        km->to_f32(v + j * g->v.row_stride, vf + j * g->v.d, g->v.d);
    }
}

static void attention_slice(void *arg, int ith, int nth) {
    const attention_call *ac = arg;
    const geometry *g = ac->g;
    if (g->q.s == 1) {
        decode_slice(ac, ith, nth);
        return;
    }
    float *scores = ac->scratch + (size_t)ith * ac->slice_floats;
    float *gemm = scores + task_rows(g) * g->k.s;
    /* A float16 cache's head, widened: at the slice's end. */
    float *kf = ac->scratch + (size_t)(ith + 1) * ac->slice_floats - (g->half ? half_floats(g) : 0);
    float *vf = kf + (g->k.s * g->q.d + 15) / 16 * 16;
    int64_t per_batch = g->q.h;
    int64_t tasks = g->q.b * per_batch * ac->blocks;
    const tm__vmath *vm = vector_kernels(g);
    int64_t packed = -1, widened = -1;
    for (int64_t t = tasks * ith / nth; t < tasks * (ith + 1) / nth; t++) {
        int64_t b = t / (per_batch * ac->blocks), h = t / ac->blocks % per_batch;
        int64_t i0 = t % ac->blocks * QUERY_BLOCK;   /* the task's first row */
        /* Rows are a head's queries. */
        int64_t kv = h / g->group, rows = g->q.s - i0;
        int64_t ldq = g->q.row_stride, ldo = g->out.row_stride;
        if (rows > QUERY_BLOCK) rows = QUERY_BLOCK;
        /* The probabilities kept: the task's rows are consecutive rows of (B, Hq, Sq, Sk). */
        if (ac->probs) scores = ac->probs + ((b * g->q.h + h) * g->q.s + i0) * g->k.s;
        const float *q = ac->q + b * g->q.batch_stride + h * g->q.head_stride + i0 * g->q.row_stride;
        const float *k, *v;
        int64_t ldk = g->k.row_stride, ldv = g->v.row_stride;
        int64_t head = b * g->k.h + kv;
        if (g->half) {
            if (head != widened)
                widen_head(g, tm__kvmath_active(),
                           (const uint16_t *)ac->k + b * g->k.batch_stride + kv * g->k.head_stride,
                           (const uint16_t *)ac->v + b * g->v.batch_stride + kv * g->v.head_stride,
                           kf, vf);
            widened = head;
            k = kf;
            v = vf;
            ldk = g->q.d;
            ldv = g->v.d;
        } else {
            k = (const float *)ac->k + b * g->k.batch_stride + kv * g->k.head_stride;
            v = (const float *)ac->v + b * g->v.batch_stride + kv * g->v.head_stride;
        }
        float *o = ac->out + b * g->out.batch_stride + h * g->out.head_stride + i0 * g->out.row_stride;
        /* k transposed once for the query blocks and heads that share it. */
        if (vm) vm->attn_scores(rows, g->k.s, g->q.d, q, ldq, k, ldk, scores, g->k.s, gemm,
                                head != packed);
        else tm_sgemm(0, 1, rows, g->k.s, g->q.d, 1.0f, q, ldq, k, ldk, 0.0f, scores, g->k.s,
                      gemm, NULL);
        if (rows > TM_ATTN_DIRECT_ROWS) packed = head;   /* else kt was left alone */
        const float *masks[QUERY_BLOCK];
        for (int64_t r = 0; r < rows; r++) masks[r] = mask_row(ac, b, h, i0 + r);
        int scaled = causal_rows(g, scores, g->k.s, rows, i0);
        finish_scores(ac, scores, rows, masks, scaled);
        if (vm) vm->attn_values(rows, g->k.s, g->v.d, scores, g->k.s, v, ldv, o, ldo);
        else tm_sgemm(0, 0, rows, g->v.d, g->k.s, 1.0f, scores, g->k.s, v, ldv, 0.0f, o, ldo,
                      gemm, NULL);
    }
}

/* Element i of k or v: float32, or float16 widened. */
static inline float kv_elem(const void *x, int64_t i, int half) {
    return half ? tm_f16_to_f32(((const uint16_t *)x)[i]) : ((const float *)x)[i];
}

/* Plain loops, one query at a time: the reference kernel. */
static void attention_reference(const attention_call *ac, float *row) {
    const geometry *g = ac->g;
    for (int64_t b = 0; b < g->q.b; b++)
        for (int64_t h = 0; h < g->q.h; h++)
            for (int64_t i = 0; i < g->q.s; i++) {
                int64_t kv = h / g->group;
                const float *q = ac->q + b * g->q.batch_stride + h * g->q.head_stride + i * g->q.row_stride;
                /* The probabilities kept (ATTENTION_TRAIN), else the scratch row. */
                if (ac->probs) row = ac->probs + ((b * g->q.h + h) * g->q.s + i) * g->k.s;
                for (int64_t j = 0; j < g->k.s; j++) {
                    int64_t k = b * g->k.batch_stride + kv * g->k.head_stride + j * g->k.row_stride;
                    float sum = 0.0f;
                    for (int64_t d = 0; d < g->q.d; d++) sum += q[d] * kv_elem(ac->k, k + d, g->half);
                    row[j] = sum;
                }
                const float *mask = mask_row(ac, b, h, i);
                int scaled = causal_rows(g, row, g->k.s, 1, i);
                finish_scores(ac, row, 1, &mask, scaled);
                float *o = ac->out + b * g->out.batch_stride + h * g->out.head_stride + i * g->out.row_stride;
                for (int64_t d = 0; d < g->v.d; d++) {
                    float sum = 0.0f;
                    for (int64_t j = 0; j < g->k.s; j++)
                        sum += row[j] * kv_elem(ac->v, b * g->v.batch_stride + kv * g->v.head_stride +
                                                           j * g->v.row_stride + d, g->half);
                    o[d] = sum;
                }
            }
}

tm_status tm__kernel_attention(const tm_kcall *kc) {
    const int64_t *dims[4];
    int ranks[4];
    for (int i = 0; i < kc->nin; i++) {
        dims[i] = kc->in[i]->dims;
        ranks[i] = kc->in[i]->rank;
    }
    geometry g;
    char why[400];
    tm_status s = read_geometry(kc->a, kc->nin, dims, ranks, &g, why, sizeof why);
    if (s != TM_OK) return tm__fail(kc->err, s, "%s", why);
    g.half = kc->in[1]->dtype == TM_FLOAT16;
    if (g.q.b == 0 || g.q.h == 0 || g.q.s == 0 || g.v.d == 0) return TM_OK;
    if (g.k.s == 0) {   /* nothing to attend to: an empty sum */
        memset(kc->out[0]->data, 0, kc->out[0]->nbytes);
        return TM_OK;
    }
    uintptr_t at = ((uintptr_t)kc->scratch + 63) & ~(uintptr_t)63;
    attention_call ac = {&g, kc->in[0]->data, kc->in[1]->data, kc->in[2]->data,
                         kc->a->i[4] ? kc->in[3]->data : NULL, kc->out[0]->data,
                         kc->nout == 2 ? kc->out[1]->data : NULL, (float *)at,
                         slice_floats(&g), task_blocks(&g)};
    if (kc->scratch_bytes < SLICES * ac.slice_floats * sizeof(float) + 64)
        return tm__fail(kc->err, TM_ERR_RUNTIME, "internal: attention scratch too small");
    if (tm_use_reference_kernels()) {
        attention_reference(&ac, ac.scratch);
        return TM_OK;
    }
    int64_t tasks = g.q.b * (g.q.s == 1 ? g.k.h : g.q.h) * ac.blocks;
    int slices = tasks < SLICES ? (int)tasks : SLICES;
    /* Below about 20 microseconds of one core's work, one thread (waking a worker costs
     * that much on a busy machine). A decode step is little arithmetic over a long k and
     * v (the small LLaMA's at past 512: 1.6 MFLOP over 1 MB), so the bytes read count too. */
    double flops = 4.0 * (double)g.q.b * (double)g.q.h * (double)g.q.s * (double)g.k.s *
                   (double)g.q.d;
    double kv_bytes = (g.half ? 2.0 : 4.0) * (double)g.q.b * (double)g.k.h * (double)g.k.s * (double)(g.q.d + g.v.d);
    if (tm_pool_threads(kc->pool) == 1 || (flops < (double)(1 << 21) && kv_bytes < (double)(1 << 18)))
        slices = 1;
    if (slices <= 1) attention_slice(&ac, 0, 1);
    else tm_pool_run_n(kc->pool, slices, attention_slice, &ac);
    return TM_OK;
}

/* ---- ATTENTION_GRAD ---------------------------------------------------------------- */

/* The geometry of q, k, v as ATTENTION reads them (no mask), and p and the output's
 * cotangent checked against it. */
static tm_status grad_geometry(const tm_args *a, const int64_t *const *dims, const int *ranks,
                               geometry *g, char *why, size_t cap) {
    tm_args plain = *a;
    plain.i[4] = 0;
    for (int i = 3; i < 5; i++)
        if (ranks[i] != 4) {
            snprintf(why, cap, "attention_grad: input %d has rank %d, expected 4", i, ranks[i]);
            return TM_ERR_SHAPE;
        }
    tm_status s = read_geometry(&plain, 3, dims, ranks, g, why, cap);
    if (s != TM_OK) return s;
    if (g->group != 1) {
        snprintf(why, cap, "attention_grad: q has %lld heads, k and v %lld: grouped heads are "
                 "not supported", (long long)g->q.h, (long long)g->k.h);
        return TM_ERR_UNSUPPORTED;
    }
    int64_t want_p[4] = {g->q.b, g->q.h, g->q.s, g->k.s};
    int64_t want_o[4] = {g->q.b, a->i[3] ? g->q.s : g->q.h, a->i[3] ? g->q.h : g->q.s, g->v.d};
    if (memcmp(dims[3], want_p, sizeof want_p) || memcmp(dims[4], want_o, sizeof want_o)) {
        snprintf(why, cap, "attention_grad: p or the output's cotangent does not fit q, k and v");
        return TM_ERR_SHAPE;
    }
    return TM_OK;
}

/* Query rows a block of the backward takes: as many as keep its dp within
 * GRAD_BLOCK_FLOATS (fewer, larger products), at least QUERY_BLOCK / 4, at most Sq. */
#define GRAD_BLOCK_FLOATS (1 << 16)

static int64_t grad_block_rows(const geometry *g) {
    int64_t rows = g->k.s > 0 ? GRAD_BLOCK_FLOATS / g->k.s : g->q.s;
    if (rows < QUERY_BLOCK / 4) rows = QUERY_BLOCK / 4;
    return rows < g->q.s ? rows : g->q.s;
}

/* Floats of one slice's scratch: a query block's dp (rows x Sk), then the products'. */
static size_t grad_slice_floats(const geometry *g) {
    int64_t rows = grad_block_rows(g), sk = g->k.s;
    size_t most = tm_sgemm_scratch(0, 1, rows, sk, g->v.d);
    size_t s;
    if ((s = tm_sgemm_scratch(1, 0, sk, g->v.d, rows)) > most) most = s;
    if ((s = tm_sgemm_scratch(0, 0, rows, g->q.d, sk)) > most) most = s;
    if ((s = tm_sgemm_scratch(1, 0, sk, g->q.d, rows)) > most) most = s;
    return (size_t)(rows * sk) + (most + sizeof(float) - 1) / sizeof(float) + 32;
}

tm_status tm__shape_attention_grad(tm_ctx *c, int prim, const tm_args *a,
                                   const tm_vinfo *const *in, int nin, tm_vinfo *out, int nout,
                                   size_t *scratch) {
    (void)prim; (void)nin; (void)nout;
    const int64_t *dims[5];
    int ranks[5];
    for (int i = 0; i < 5; i++) {
        if (in[i]->dtype != TM_FLOAT)
            return tm_ctx_fail(c, TM_ERR_DTYPE, "attention_grad: input %d is %s, not float32",
                               i, tm_dtype_name(in[i]->dtype));
        dims[i] = in[i]->dims;
        ranks[i] = in[i]->rank;
    }
    geometry g;
    char why[400];
    tm_status s = grad_geometry(a, dims, ranks, &g, why, sizeof why);
    if (s != TM_OK) return tm_ctx_fail(c, s, "%s", why);
    for (int i = 0; i < 3; i++) {
        out[i].dtype = TM_FLOAT;
        out[i].rank = 4;
        memcpy(out[i].dims, in[i]->dims, sizeof out[i].dims);
    }
    *scratch = SLICES * grad_slice_floats(&g) * sizeof(float) + 64;
    return TM_OK;
}

typedef struct attention_grad_call {
    const geometry *g;
    const float *q, *k, *v, *p, *dout;
    float *dq, *dk, *dv;
    float *scratch;
    size_t slice_floats;
} attention_grad_call;

/* ds = p (dp - sum(dp p)) times the scale's derivative, in place of dp: SOFTMAX_GRAD's
 * steps, then the scale's, in one pass. The row sum in 16 float partial sums (lanes of one
 * vector, 8 terms each at 128 keys) added in double: partial sums in double took 1.3x
 * the time (MiniLM's 12 heads x 128 x 128: 0.071 -> 0.055 ms a layer, the rest of it
 * reading p from memory). */
#define DOT_PARTIALS 16
static void scores_grad(float *dp, const float *p, int64_t rows, int64_t sk, int scale_kind,
                        float scale) {
    for (int64_t r = 0; r < rows; r++) {
        float *d = dp + r * sk;
        const float *pr = p + r * sk;
        float part[DOT_PARTIALS] = {0};
        double dot = 0.0;
        int64_t j = 0;
        for (; j + DOT_PARTIALS <= sk; j += DOT_PARTIALS)
            for (int u = 0; u < DOT_PARTIALS; u++) part[u] += d[j + u] * pr[j + u];
        for (; j < sk; j++) dot += (double)d[j] * pr[j];
        for (int u = 0; u < DOT_PARTIALS; u++) dot += part[u];
        float f = (float)dot;
        if (scale_kind == SCALE_MUL)
            for (j = 0; j < sk; j++) d[j] = pr[j] * (d[j] - f) * scale;
        else if (scale_kind == SCALE_DIV)
            for (j = 0; j < sk; j++) d[j] = pr[j] * (d[j] - f) / scale;
        else
            for (j = 0; j < sk; j++) d[j] = pr[j] * (d[j] - f);
    }
}

static void attention_grad_slice(void *arg, int ith, int nth) {
    const attention_grad_call *ac = arg;
    const geometry *g = ac->g;
    float *dp = ac->scratch + (size_t)ith * ac->slice_floats;
    int64_t rows_max = grad_block_rows(g), sk = g->k.s;
    float *gemm = dp + rows_max * sk;
    int64_t tasks = g->q.b * g->q.h;
    for (int64_t t = tasks * ith / nth; t < tasks * (ith + 1) / nth; t++) {
        int64_t b = t / g->q.h, h = t % g->q.h;
        const float *q = ac->q + b * g->q.batch_stride + h * g->q.head_stride;
        const float *k = ac->k + b * g->k.batch_stride + h * g->k.head_stride;
        const float *v = ac->v + b * g->v.batch_stride + h * g->v.head_stride;
        const float *dout = ac->dout + b * g->out.batch_stride + h * g->out.head_stride;
        float *dq = ac->dq + b * g->q.batch_stride + h * g->q.head_stride;
        float *dk = ac->dk + b * g->k.batch_stride + h * g->k.head_stride;
        float *dv = ac->dv + b * g->v.batch_stride + h * g->v.head_stride;
        const float *p = ac->p + (b * g->q.h + h) * g->q.s * sk;
        for (int64_t i0 = 0; i0 < g->q.s; i0 += rows_max) {
            int64_t rows = g->q.s - i0 < rows_max ? g->q.s - i0 : rows_max;
            const float *pb = p + i0 * sk, *ob = dout + i0 * g->out.row_stride;
            const float *qb = q + i0 * g->q.row_stride;
            float beta = i0 ? 1.0f : 0.0f;   /* dv and dk sum over the query blocks */
            tm_sgemm(1, 0, sk, g->v.d, rows, 1.0f, pb, sk, ob, g->out.row_stride, beta, dv,
                     g->v.row_stride, gemm, NULL);
            tm_sgemm(0, 1, rows, sk, g->v.d, 1.0f, ob, g->out.row_stride, v, g->v.row_stride,
                     0.0f, dp, sk, gemm, NULL);
            scores_grad(dp, pb, rows, sk, g->scale_kind, g->scale);
            tm_sgemm(0, 0, rows, g->q.d, sk, 1.0f, dp, sk, k, g->k.row_stride, 0.0f,
                     dq + i0 * g->q.row_stride, g->q.row_stride, gemm, NULL);
            tm_sgemm(1, 0, sk, g->q.d, rows, 1.0f, dp, sk, qb, g->q.row_stride, beta, dk,
                     g->k.row_stride, gemm, NULL);
        }
    }
}

tm_status tm__kernel_attention_grad(const tm_kcall *kc) {
    const int64_t *dims[5];
    int ranks[5];
    for (int i = 0; i < 5; i++) {
        dims[i] = kc->in[i]->dims;
        ranks[i] = kc->in[i]->rank;
    }
    geometry g;
    char why[400];
    tm_status s = grad_geometry(kc->a, dims, ranks, &g, why, sizeof why);
    if (s != TM_OK) return tm__fail(kc->err, s, "%s", why);
    for (int i = 0; i < 3; i++)   /* no queries or no keys: nothing flows back */
        if ((g.q.s == 0 || g.k.s == 0) && kc->out[i]->nbytes)
            memset(kc->out[i]->data, 0, kc->out[i]->nbytes);
    if (g.q.b == 0 || g.q.h == 0 || g.q.s == 0 || g.k.s == 0) return TM_OK;
    uintptr_t at = ((uintptr_t)kc->scratch + 63) & ~(uintptr_t)63;
    attention_grad_call ac = {&g, kc->in[0]->data, kc->in[1]->data, kc->in[2]->data,
                              kc->in[3]->data, kc->in[4]->data, kc->out[0]->data,
                              kc->out[1]->data, kc->out[2]->data, (float *)at,
                              grad_slice_floats(&g)};
    if (kc->scratch_bytes < SLICES * ac.slice_floats * sizeof(float) + 64)
        return tm__fail(kc->err, TM_ERR_RUNTIME, "internal: attention_grad scratch too small");
    int64_t tasks = g.q.b * g.q.h;
    int slices = tasks < SLICES ? (int)tasks : SLICES;
    double flops = 8.0 * (double)tasks * (double)g.q.s * (double)g.k.s * (double)g.q.d;
    if (tm_pool_threads(kc->pool) == 1 || flops < (double)(1 << 21)) slices = 1;
    if (slices <= 1) attention_grad_slice(&ac, 0, 1);
    else tm_pool_run_n(kc->pool, slices, attention_grad_slice, &ac);
    return TM_OK;
}
