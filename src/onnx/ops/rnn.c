/* RNN, GRU and LSTM (every opset, 1-27), unrolled over the sequence length, which is a
 * static dim: one matmul for the input projection of all steps, then per step a matmul
 * with R and elementwise gates, so plans compile them whole. Directions, activations with
 * their alpha/beta, clip, sequence_lens (a mask: finished sequences keep their state and
 * output zeros), initial states, peepholes, input_forget, linear_before_reset and layout.
 * Half-precision nodes compute in float32. Not a fused recurrent primitive. */
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include "elementwise.h"

typedef enum { CELL_RNN = 0, CELL_GRU = 1, CELL_LSTM = 2 } cell_kind;

enum { ACT_SIGMOID, ACT_TANH, ACT_RELU, ACT_AFFINE, ACT_LEAKY_RELU, ACT_THRESHOLDED_RELU,
       ACT_SCALED_TANH, ACT_HARD_SIGMOID, ACT_ELU, ACT_SOFTSIGN, ACT_SOFTPLUS, ACT__COUNT };

typedef struct activation {
    int kind;
    double alpha, beta;
} activation;

typedef struct cell_spec {
    cell_kind kind;
    int gates, n_act, dirs, reverse, layout;
    int64_t seq, batch, input, hidden;
    int has_clip, linear_before_reset, input_forget;
    double clip;
    activation act[6];
    tm_dtype dtype, compute;
} cell_spec;

/* One direction's weights, already in the compute dtype. */
typedef struct cell_weights {
    tm_val xw;        /* (S, B, G*H): X W^T + biases that add outside the gates */
    tm_val rt;        /* (H, G*H): R^T */
    tm_val rb_h;      /* GRU with linear_before_reset: R's bias of the h gate, (1, H) */
    tm_val peep[3];   /* LSTM peepholes i, o, f as (1, H), or TM_NONE */
    tm_val h0, c0;    /* (B, H) */
} cell_weights;

/* Turns a node failure into the -1 of the int-returning readers below. */
static int failed(tm_status status) {
    (void)status;
    return -1;
}

/* ---- Activations ------------------------------------------------------------------------ */

static const struct {
    const char *name;
    int alpha, beta;          /* which parameters it takes */
    double alpha0, beta0;     /* their defaults, as the ONNX operators of that name */
} act_table[ACT__COUNT] = {
    [ACT_SIGMOID] = {"Sigmoid", 0, 0, 0, 0},
    [ACT_TANH] = {"Tanh", 0, 0, 0, 0},
    [ACT_RELU] = {"Relu", 0, 0, 0, 0},
    [ACT_AFFINE] = {"Affine", 1, 1, 1.0, 0.0},
    [ACT_LEAKY_RELU] = {"LeakyRelu", 1, 0, 0.01, 0},
    [ACT_THRESHOLDED_RELU] = {"ThresholdedRelu", 1, 0, 1.0, 0},
    [ACT_SCALED_TANH] = {"ScaledTanh", 1, 1, 1.0, 1.0},
    [ACT_HARD_SIGMOID] = {"HardSigmoid", 1, 1, 0.2, 0.5},
    [ACT_ELU] = {"Elu", 1, 0, 1.0, 0},
    [ACT_SOFTSIGN] = {"Softsign", 0, 0, 0, 0},
    [ACT_SOFTPLUS] = {"Softplus", 0, 0, 0, 0},
};

/* Reads activations (defaults: f=Sigmoid, g=h=Tanh; RNN f=Tanh) for every direction;
 * alphas and betas are consumed in order by the functions that take them. */
static int read_activations(tm_lower *L, cell_spec *s) {
    static const int defaults[3][3] = {{ACT_TANH}, {ACT_SIGMOID, ACT_TANH},
                                       {ACT_SIGMOID, ACT_TANH, ACT_TANH}};
    int want = s->n_act * s->dirs;
    const tm_bytes *names;
    const float *alphas, *betas;
    int n = tm_attr_strings(L, "activations", &names);
    int na = tm_attr_floats(L, "activation_alpha", &alphas);
    int nb = tm_attr_floats(L, "activation_beta", &betas);
    if (n >= 0 && n != want && n != s->n_act)
        return failed(tm_lfail(L, TM_ERR_SHAPE, "attribute 'activations' has %d entries; "
                               "expected %d", n, want));
    int ia = 0, ib = 0;
    for (int k = 0; k < want; k++) {
        activation *a = &s->act[k];
        a->kind = defaults[s->kind][k % s->n_act];
        if (n >= 0) {
            const tm_bytes *b = &names[k % n];
            a->kind = -1;
            for (int f = 0; f < ACT__COUNT; f++)
                if (strlen(act_table[f].name) == b->len &&
                    !strncasecmp(act_table[f].name, b->data, b->len))
                    a->kind = f;
            if (a->kind < 0)
                return failed(tm_lfail(L, TM_ERR_UNSUPPORTED, "attribute 'activations' names "
                                       "'%.*s', which is not a recurrent activation",
                                       (int)b->len, b->data));
        }
        a->alpha = act_table[a->kind].alpha0;
        a->beta = act_table[a->kind].beta0;
        if (act_table[a->kind].alpha && ia < na) a->alpha = alphas[ia++];
        if (act_table[a->kind].beta && ib < nb) a->beta = betas[ib++];
    }
    return 0;
}

static tm_val scalar_op(tm_ctx *c, int prim, tm_val x, double v) {
    return tm_binary(c, prim, x, tm_scalar_like(c, x, v));
}

static tm_val apply_activation(tm_ctx *c, const activation *a, tm_val x) {
    tm_val zero = tm_scalar_like(c, x, 0.0);
    switch (a->kind) {
    case ACT_SIGMOID: return tm_unary(c, TM_P_SIGMOID, x);
    case ACT_TANH: return tm_unary(c, TM_P_TANH, x);
    case ACT_RELU: return tm_unary(c, TM_P_RELU, x);
    case ACT_AFFINE: return scalar_op(c, TM_P_ADD, scalar_op(c, TM_P_MUL, x, a->alpha), a->beta);
    case ACT_LEAKY_RELU:
        return tm_where(c, tm_binary(c, TM_P_GE, x, zero), x, scalar_op(c, TM_P_MUL, x, a->alpha));
    case ACT_THRESHOLDED_RELU:
        return tm_where(c, scalar_op(c, TM_P_GT, x, a->alpha), x, zero);
    case ACT_SCALED_TANH:
        return scalar_op(c, TM_P_MUL, tm_unary(c, TM_P_TANH, scalar_op(c, TM_P_MUL, x, a->beta)),
                         a->alpha);
    case ACT_HARD_SIGMOID: {
        tm_val y = scalar_op(c, TM_P_ADD, scalar_op(c, TM_P_MUL, x, a->alpha), a->beta);
        return scalar_op(c, TM_P_MIN, scalar_op(c, TM_P_MAX, y, 0.0), 1.0);
    }
    case ACT_ELU: {
        tm_val neg = scalar_op(c, TM_P_SUB, tm_unary(c, TM_P_EXP, x), 1.0);
        return tm_where(c, tm_binary(c, TM_P_GE, x, zero), x,
                        scalar_op(c, TM_P_MUL, neg, a->alpha));
    }
    case ACT_SOFTSIGN:
        return tm_div(c, x, scalar_op(c, TM_P_ADD, tm_unary(c, TM_P_ABS, x), 1.0));
    default: /* softplus */
        return tm_unary(c, TM_P_LOG, scalar_op(c, TM_P_ADD, tm_unary(c, TM_P_EXP, x), 1.0));
    }
}

/* Activation k of direction d applied to a gate's pre-activation, clipped first. */
static tm_val gate(tm_ctx *c, const cell_spec *s, int d, int k, tm_val x) {
    if (s->has_clip)
        x = scalar_op(c, TM_P_MIN, scalar_op(c, TM_P_MAX, x, -s->clip), s->clip);
    return apply_activation(c, &s->act[d * s->n_act + k], x);
}

/* ---- Reading the node ------------------------------------------------------------------- */

static tm_val to_compute(tm_ctx *c, const cell_spec *s, tm_val v) {
    return v == TM_NONE ? TM_NONE : tm_cast(c, v, s->compute);
}

/* Fails unless v (input i, optional when absent) has the given dims. */
static int check_dims(tm_lower *L, int i, tm_val v, int rank, const int64_t *dims) {
    tm_ctx *c = tm_lctx(L);
    if (v == TM_NONE || !tm_ctx_ok(c)) return !tm_ctx_ok(c);
    int ok = tm_vrank(c, v) == rank;
    for (int d = 0; ok && d < rank; d++) ok = tm_vdims(c, v)[d] == dims[d];
    if (ok) return 0;
    char want[128];
    size_t at = 0;
    for (int d = 0; d < rank && at < sizeof want; d++)
        at += (size_t)snprintf(want + at, sizeof want - at, d ? ", %lld" : "%lld",
                               (long long)dims[d]);
    tm_lfail(L, TM_ERR_SHAPE, "input %d ('%s') must have shape (%s)", i, tm_lnode(L)->inputs[i],
             want);
    return 1;
}

static int read_spec(tm_lower *L, cell_kind kind, tm_val x, tm_val w, tm_val r, cell_spec *s) {
    tm_ctx *c = tm_lctx(L);
    memset(s, 0, sizeof *s);
    s->kind = kind;
    s->gates = kind == CELL_RNN ? 1 : kind == CELL_GRU ? 3 : 4;
    s->n_act = kind == CELL_RNN ? 1 : kind == CELL_GRU ? 2 : 3;
    s->dtype = tm_vdtype(c, x);
    s->compute = s->dtype == TM_DOUBLE ? TM_DOUBLE : TM_FLOAT;
    s->layout = tm_lopset(L) >= 14 ? (int)tm_attr_i(L, "layout", 0) : 0;
    if (s->layout != 0 && s->layout != 1)
        return failed(tm_lfail(L, TM_ERR_UNSUPPORTED, "attribute 'layout' is %d; expected 0 "
                               "or 1", s->layout));
    const char *dir = tm_attr_s(L, "direction", "forward");
    if (!strcmp(dir, "bidirectional")) s->dirs = 2;
    else if (!strcmp(dir, "forward") || !strcmp(dir, "reverse")) s->dirs = 1;
    else
        return failed(tm_lfail(L, TM_ERR_UNSUPPORTED, "attribute 'direction' is '%s'; expected "
                               "forward, reverse or bidirectional", dir));
    s->reverse = !strcmp(dir, "reverse");
    if (tm_vrank(c, x) != 3 || tm_vrank(c, w) != 3 || tm_vrank(c, r) != 3)
        return failed(tm_lfail(L, TM_ERR_SHAPE, "inputs X, W and R must have rank 3, got %d, %d "
                               "and %d", tm_vrank(c, x), tm_vrank(c, w), tm_vrank(c, r)));
    const int64_t *xd = tm_vdims(c, x);
    s->seq = xd[s->layout];
    s->batch = xd[1 - s->layout];
    s->input = xd[2];
    s->hidden = tm_vdims(c, r)[2];
    int64_t attr_hidden = tm_attr_i(L, "hidden_size", s->hidden);
    if (attr_hidden != s->hidden)
        return failed(tm_lfail(L, TM_ERR_SHAPE, "attribute hidden_size=%lld differs from R's "
                               "last dim %lld", (long long)attr_hidden,
                               (long long)s->hidden));
    int64_t gh = s->gates * s->hidden;
    if (check_dims(L, 1, w, 3, (int64_t[]){s->dirs, gh, s->input}) ||
        check_dims(L, 2, r, 3, (int64_t[]){s->dirs, gh, s->hidden}))
        return -1;
    s->has_clip = tm_attr_has(L, "clip");
    s->clip = tm_attr_f(L, "clip", 0.0f);
    s->linear_before_reset = kind == CELL_GRU && tm_attr_i(L, "linear_before_reset", 0) != 0;
    s->input_forget = kind == CELL_LSTM && tm_attr_i(L, "input_forget", 0) != 0;
    if (s->has_clip && !(s->clip > 0))
        return failed(tm_lfail(L, TM_ERR_SHAPE, "attribute clip=%g must be > 0", s->clip));
    return read_activations(L, s);
}

/* An initial state (input i) of direction d as (B, H), zeros when absent. */
static tm_val initial_state(tm_lower *L, const cell_spec *s, int i, int d) {
    tm_ctx *c = tm_lctx(L);
    int64_t bh[2] = {s->batch, s->hidden};
    tm_val v = tm_lin(L, i);
    if (v == TM_NONE) return tm_const_fill(c, s->compute, 2, bh, 0.0);
    int64_t dims[3] = {s->dirs, s->batch, s->hidden};
    if (s->layout) {
        dims[0] = s->batch;
        dims[1] = s->dirs;
    }
    if (check_dims(L, i, v, 3, dims)) return TM_NONE;
    v = tm_slice_axis(c, to_compute(c, s, v), s->layout, d, 1);
    return tm_reshape(c, v, 2, bh);
}

/* Direction d's weights; x is (S*B, I) in the compute dtype. */
static int load_weights(tm_lower *L, const cell_spec *s, int d, tm_val x, cell_weights *cw) {
    tm_ctx *c = tm_lctx(L);
    int64_t h = s->hidden, gh = s->gates * h, perm[2] = {1, 0};
    tm_val w = tm_reshape(c, tm_slice_axis(c, to_compute(c, s, tm_lin(L, 1)), 0, d, 1), 2,
                          (int64_t[]){gh, s->input});
    tm_val r = tm_reshape(c, tm_slice_axis(c, to_compute(c, s, tm_lin(L, 2)), 0, d, 1), 2,
                          (int64_t[]){gh, h});
    cw->rt = tm_transpose(c, r, perm);
    tm_val xw = tm_matmul(c, x, tm_transpose(c, w, perm)); /* (S*B, G*H) */
    cw->rb_h = TM_NONE;
    tm_val b = tm_lin(L, 3);
    if (b != TM_NONE) {
        if (check_dims(L, 3, b, 2, (int64_t[]){s->dirs, 2 * gh})) return -1;
        b = tm_reshape(c, tm_slice_axis(c, to_compute(c, s, b), 0, d, 1), 1, (int64_t[]){2 * gh});
        tm_val wb = tm_slice_axis(c, b, 0, 0, gh), rb = tm_slice_axis(c, b, 0, gh, gh);
        if (s->linear_before_reset) {
            /* R's bias of the h gate is scaled by the reset gate: keep it apart. */
            cw->rb_h = tm_reshape(c, tm_slice_axis(c, rb, 0, 2 * h, h), 2, (int64_t[]){1, h});
            tm_val zero = tm_const_fill(c, s->compute, 1, &h, 0.0);
            tm_val parts[2] = {tm_slice_axis(c, rb, 0, 0, 2 * h), zero};
            rb = tm_concat(c, parts, 2, 0);
        }
        xw = tm_add(c, xw, tm_add(c, wb, rb));
    }
    cw->xw = tm_reshape(c, xw, 3, (int64_t[]){s->seq, s->batch, gh});
    for (int k = 0; k < 3; k++) cw->peep[k] = TM_NONE;
    tm_val p = s->kind == CELL_LSTM ? tm_lin(L, 7) : TM_NONE;
    if (p != TM_NONE) {
        if (check_dims(L, 7, p, 2, (int64_t[]){s->dirs, 3 * h})) return -1;
        p = tm_slice_axis(c, to_compute(c, s, p), 0, d, 1);
        for (int k = 0; k < 3; k++)
            cw->peep[k] = tm_slice_axis(c, p, 1, k * h, h); /* (1, H) */
    }
    cw->h0 = initial_state(L, s, 5, d);
    cw->c0 = s->kind == CELL_LSTM ? initial_state(L, s, 6, d) : TM_NONE;
    return tm_ctx_ok(c) ? 0 : -1;
}

/* ---- The unrolled steps ----------------------------------------------------------------- */

/* Gate k of a (B, G*H) block of pre-activations. */
static tm_val gate_slice(tm_ctx *c, const cell_spec *s, tm_val v, int k) {
    return tm_slice_axis(c, v, 1, k * s->hidden, s->hidden);
}

static tm_val add_peephole(tm_ctx *c, tm_val x, tm_val p, tm_val state) {
    return p == TM_NONE ? x : tm_add(c, x, tm_mul(c, p, state));
}

/* One step from state (h, cell) given this step's input projection xw (B, G*H); returns
 * the new hidden state and updates *cell for LSTM. */
static tm_val step(tm_ctx *c, const cell_spec *s, int d, const cell_weights *cw, tm_val xw,
                   tm_val h, tm_val *cell) {
    int64_t hs = s->hidden;
    if (s->kind == CELL_RNN) return gate(c, s, d, 0, tm_add(c, xw, tm_matmul(c, h, cw->rt)));
    if (s->kind == CELL_LSTM) {
        tm_val g = tm_add(c, xw, tm_matmul(c, h, cw->rt)); /* i, o, f, c */
        tm_val i = gate(c, s, d, 0, add_peephole(c, gate_slice(c, s, g, 0), cw->peep[0], *cell));
        tm_val f = s->input_forget
                       ? tm_sub(c, tm_scalar_like(c, i, 1.0), i)
                       : gate(c, s, d, 0,
                              add_peephole(c, gate_slice(c, s, g, 2), cw->peep[2], *cell));
        tm_val cand = gate(c, s, d, 1, gate_slice(c, s, g, 3));
        *cell = tm_add(c, tm_mul(c, f, *cell), tm_mul(c, i, cand));
        tm_val o = gate(c, s, d, 0, add_peephole(c, gate_slice(c, s, g, 1), cw->peep[1], *cell));
        return tm_mul(c, o, apply_activation(c, &s->act[d * s->n_act + 2], *cell));
    }
    /* GRU: z, r, h. */
    tm_val rz = tm_slice_axis(c, cw->rt, 1, 0, 2 * hs);
    tm_val rh = tm_slice_axis(c, cw->rt, 1, 2 * hs, hs);
    tm_val zr = tm_add(c, tm_slice_axis(c, xw, 1, 0, 2 * hs), tm_matmul(c, h, rz));
    tm_val z = gate(c, s, d, 0, gate_slice(c, s, zr, 0));
    tm_val r = gate(c, s, d, 0, gate_slice(c, s, zr, 1));
    tm_val hx = gate_slice(c, s, xw, 2), pre;
    if (s->linear_before_reset) {
        tm_val hr = tm_matmul(c, h, rh);
        if (cw->rb_h != TM_NONE) hr = tm_add(c, hr, cw->rb_h);
        pre = tm_add(c, hx, tm_mul(c, r, hr));
    } else {
        pre = tm_add(c, hx, tm_matmul(c, tm_mul(c, r, h), rh));
    }
    tm_val cand = gate(c, s, d, 1, pre);
    return tm_add(c, cand, tm_mul(c, z, tm_sub(c, h, cand))); /* (1 - z) h~ + z h */
}

/* The (S, B, 1) mask of steps inside sequence_lens, or TM_NONE when every sequence is
 * known to run the full length. */
static tm_val sequence_mask(tm_lower *L, const cell_spec *s) {
    tm_ctx *c = tm_lctx(L);
    tm_val lens = tm_lin(L, 4);
    if (lens == TM_NONE) return TM_NONE;
    if (tm_ew_check(L, 4, lens, TM_DT(TM_INT32) | TM_DT(TM_INT64)) ||
        check_dims(L, 4, lens, 1, &s->batch))
        return TM_NONE;
    const tm_tensor *known = tm_vdata(c, lens);
    if (known) {
        int full = 1;
        for (int64_t b = 0; b < s->batch; b++) {
            int64_t v = tm_load_i64(known->data, known->dtype, (size_t)b);
            if (v < 0 || v > s->seq) {
                tm_lfail(L, TM_ERR_SHAPE, "input 'sequence_lens' has %lld for batch %lld; "
                         "lengths must lie in [0, %lld]", (long long)v, (long long)b,
                         (long long)s->seq);
                return TM_NONE;
            }
            full &= v == s->seq;
        }
        if (full) return TM_NONE;
    }
    int64_t tdims[3] = {s->seq, 1, 1};
    tm_tensor *t = tm_tensor_alloc(TM_INT64, 3, tdims, c->allocator);
    if (!t) {
        tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
        return TM_NONE;
    }
    for (int64_t k = 0; k < s->seq; k++) ((int64_t *)t->data)[k] = k;
    tm_val times = tm_val_tensor(c, t, 0);
    lens = tm_reshape(c, tm_cast(c, lens, TM_INT64), 3, (int64_t[]){1, s->batch, 1});
    return tm_binary(c, TM_P_LT, times, lens);
}

/* Runs direction d over all steps; fills ys[t] (B, H) in time order and the final states. */
static void run_direction(tm_ctx *c, const cell_spec *s, int d, const cell_weights *cw,
                          tm_val mask, tm_val *ys, tm_val *h_last, tm_val *c_last) {
    int backward = s->reverse || d == 1;
    int64_t bg[2] = {s->batch, s->gates * s->hidden}, b1[2] = {s->batch, 1};
    tm_val h = cw->h0, cell = cw->c0;
    for (int64_t k = 0; k < s->seq && tm_ctx_ok(c); k++) {
        int64_t t = backward ? s->seq - 1 - k : k;
        tm_val xw = tm_reshape(c, tm_slice_axis(c, cw->xw, 0, t, 1), 2, bg);
        tm_val new_cell = cell;
        tm_val nh = step(c, s, d, cw, xw, h, &new_cell);
        if (mask == TM_NONE) {
            ys[t] = h = nh;
            cell = new_cell;
            continue;
        }
        tm_val m = tm_reshape(c, tm_slice_axis(c, mask, 0, t, 1), 2, b1);
        ys[t] = tm_where(c, m, nh, tm_scalar_like(c, nh, 0.0));
        h = tm_where(c, m, nh, h);
        if (s->kind == CELL_LSTM) cell = tm_where(c, m, new_cell, cell);
    }
    *h_last = h;
    *c_last = cell;
}

/* Stacks per-direction (B, H) states into (D, B, H), or (B, D, H) for layout 1. */
static tm_val stack_states(tm_ctx *c, const cell_spec *s, const tm_val *v) {
    int64_t one[3] = {1, s->batch, s->hidden};
    tm_val parts[2];
    for (int d = 0; d < s->dirs; d++) parts[d] = tm_reshape(c, v[d], 3, one);
    tm_val out = tm_concat(c, parts, s->dirs, 0);
    if (s->layout) out = tm_transpose(c, out, (int64_t[]){1, 0, 2});
    return tm_cast(c, out, s->dtype);
}

/* Y as (S, D, B, H), or (B, S, D, H) for layout 1, from ys[d][t]. */
static tm_val stack_outputs(tm_ctx *c, const cell_spec *s, tm_val *const *ys) {
    int64_t dims[4] = {s->seq, s->dirs, s->batch, s->hidden};
    tm_val y;
    if (s->seq == 0) {
        y = tm_const_fill(c, s->compute, 4, dims, 0.0);
    } else {
        int64_t one[4] = {1, 1, s->batch, s->hidden};
        tm_val dirs[2];
        for (int d = 0; d < s->dirs; d++) {
            for (int64_t t = 0; t < s->seq; t++) ys[d][t] = tm_reshape(c, ys[d][t], 4, one);
            dirs[d] = tm_concat(c, ys[d], (int)s->seq, 0);
        }
        y = tm_concat(c, dirs, s->dirs, 1);
    }
    if (s->layout) y = tm_transpose(c, y, (int64_t[]){2, 0, 1, 3});
    return tm_cast(c, y, s->dtype);
}

static tm_status lower_cell(tm_lower *L, cell_kind kind) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0), w = tm_ew_input(L, 1), r = tm_ew_input(L, 2);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT)) return c->status;
    static const int same[] = {1, 2, 3, 5, 6, 7};
    for (int k = 0; k < 6; k++)
        if (same[k] < tm_lnin(L) && tm_ew_same_dtype(L, 0, x, same[k], tm_lin(L, same[k])))
            return c->status;
    cell_spec s;
    if (read_spec(L, kind, x, w, r, &s)) return c->status;
    if (s.seq > INT32_MAX) return tm_lfail(L, TM_ERR_UNSUPPORTED, "the sequence is too long");
    tm_val mask = sequence_mask(L, &s);
    tm_val xc = to_compute(c, &s, x);
    if (s.layout) xc = tm_transpose(c, xc, (int64_t[]){1, 0, 2});
    xc = tm_reshape(c, xc, 2, (int64_t[]){s.seq * s.batch, s.input});
    tm_val *ys[2] = {calloc((size_t)s.seq + 1, sizeof(tm_val)),
                     calloc((size_t)s.seq + 1, sizeof(tm_val))};
    tm_val h_last[2], c_last[2];
    if (!ys[0] || !ys[1]) tm_lfail(L, TM_ERR_NO_MEMORY, "out of memory");
    for (int d = 0; d < s.dirs && tm_ctx_ok(c); d++) {
        cell_weights cw;
        if (load_weights(L, &s, d, xc, &cw)) break;
        run_direction(c, &s, d, &cw, mask, ys[d], &h_last[d], &c_last[d]);
    }
    if (tm_ctx_ok(c)) {
        if (tm_lwants(L, 0)) tm_lout(L, 0, stack_outputs(c, &s, ys));
        if (tm_lwants(L, 1)) tm_lout(L, 1, stack_states(c, &s, h_last));
        if (kind == CELL_LSTM && tm_lwants(L, 2)) tm_lout(L, 2, stack_states(c, &s, c_last));
    }
    free(ys[0]);
    free(ys[1]);
    return c->status;
}

static tm_status lower_rnn(tm_lower *L) { return lower_cell(L, CELL_RNN); }
static tm_status lower_gru(tm_lower *L) { return lower_cell(L, CELL_GRU); }
static tm_status lower_lstm(tm_lower *L) { return lower_cell(L, CELL_LSTM); }

TM_REGISTER_OP("", "RNN", 1, 27, lower_rnn);
TM_REGISTER_OP("", "GRU", 1, 27, lower_gru);
TM_REGISTER_OP("", "LSTM", 1, 27, lower_lstm);
