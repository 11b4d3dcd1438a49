/* Optimizers: SGD (momentum, dampening, nesterov, weight decay) and AdamW (decoupled
 * weight decay, bias correction, amsgrad) with torch.optim's update rules, learning-rate
 * schedules and gradient-norm clipping. Not the state file (optim_state.c), not gradients. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../backends/cpu/pool.h"
#include "../core/dtype.h"
#include "../core/status.h"
#include "optim.h"

/* Half-precision gradients and master copies are converted in slices of this many
 * elements on the stack, so a step allocates nothing. */
#define HALF_CHUNK 512

void tm_optimizer_params_default(tm_optimizer_params *p, tm_optimizer_kind kind) {
    memset(p, 0, sizeof *p);
    p->size = sizeof *p;
    p->kind = kind;
    p->lr = 1e-3;
    p->beta1 = 0.9;
    p->beta2 = 0.999;
    p->eps = 1e-8;
    p->weight_decay = kind == TM_OPTIMIZER_ADAMW ? 1e-2 : 0.0;
    p->schedule = TM_LR_CONSTANT;
}

double tm_lr_schedule_factor(const tm_optimizer_params *p, int64_t k) {
    if (!p || k < 0) return 0.0;
    int64_t warm = p->warmup_steps > 0 ? p->warmup_steps : 0;
    if (k < warm) return (double)k / (double)warm;
    int64_t span = p->total_steps - warm;
    if (span < 1) span = 1;
    switch (p->schedule) {
    case TM_LR_LINEAR: {
        double f = (double)(p->total_steps - k) / (double)span;
        return f > 0.0 ? f : 0.0;
    }
    case TM_LR_COSINE: {
        double progress = (double)(k - warm) / (double)span;
        double f = 0.5 * (1.0 + cos(M_PI * progress));
        /* past total_steps the cosine would rise again; the schedule ends at 0 */
        return k >= p->total_steps || f < 0.0 ? 0.0 : f;
    }
    default:
        return 1.0;
    }
}

/* ---- Creation ------------------------------------------------------------------------ */

/* The scalars of one parameter's update (the optimizer keeps one a parameter for the step
 * running), computed in double as torch.optim computes them in Python, then rounded to
 * the element type where torch passes them to a kernel. */
typedef struct step_consts {
    double lr, weight_decay, momentum, dampening;
    double decay;                /* AdamW: 1 - lr * weight_decay */
    double beta1, beta2, eps, step_size, bias_correction2_sqrt;
    double grad_mul;             /* clipping factor, negated for maximize; else 1 */
    int nesterov, has_momentum, amsgrad;
} step_consts;

static const char *param_name(const tm_optimizer *o, int i) { return o->p[i].name; }

static tm_status check_params(const tm_optimizer_params *p, tm_error *err) {
    const char *bad = NULL;
    if (p->kind != TM_OPTIMIZER_SGD && p->kind != TM_OPTIMIZER_ADAMW)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "optimizer: unknown kind %d", (int)p->kind);
    if (!(p->lr >= 0.0) || !isfinite(p->lr)) bad = "lr must be finite and >= 0";
    else if (!(p->weight_decay >= 0.0) || !isfinite(p->weight_decay))
        bad = "weight_decay must be finite and >= 0";
    else if (p->kind == TM_OPTIMIZER_SGD && !(p->momentum >= 0.0 && isfinite(p->momentum)))
        bad = "momentum must be finite and >= 0";
    else if (p->kind == TM_OPTIMIZER_SGD && !isfinite(p->dampening))
        bad = "dampening must be finite";
    else if (p->kind == TM_OPTIMIZER_SGD && p->nesterov && (p->momentum <= 0.0 || p->dampening != 0.0))
        bad = "nesterov momentum needs momentum > 0 and dampening 0";
    else if (p->kind == TM_OPTIMIZER_ADAMW && !(p->beta1 >= 0.0 && p->beta1 < 1.0))
        bad = "beta1 must be in [0, 1)";
    else if (p->kind == TM_OPTIMIZER_ADAMW && !(p->beta2 >= 0.0 && p->beta2 < 1.0))
        bad = "beta2 must be in [0, 1)";
    else if (p->kind == TM_OPTIMIZER_ADAMW && !(p->eps >= 0.0 && isfinite(p->eps)))
        bad = "eps must be finite and >= 0";
    else if (p->schedule != TM_LR_CONSTANT && p->schedule != TM_LR_LINEAR &&
             p->schedule != TM_LR_COSINE)
        bad = "unknown learning-rate schedule";
    else if (p->warmup_steps < 0) bad = "warmup_steps must be >= 0";
    else if (p->schedule != TM_LR_CONSTANT && p->total_steps <= 0)
        bad = "a linear or cosine schedule needs total_steps > 0";
    else if (!(p->max_grad_norm >= 0.0) || !isfinite(p->max_grad_norm))
        bad = "max_grad_norm must be finite and >= 0";
    if (bad) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "optimizer: %s", bad);
    return TM_OK;
}

static int is_half(tm_dtype dt) { return dt == TM_FLOAT16 || dt == TM_BFLOAT16; }

static float half_to_f32(tm_dtype dt, uint16_t h) {
    return dt == TM_FLOAT16 ? tm_f16_to_f32(h) : tm_bf16_to_f32(h);
}

static uint16_t f32_to_half(tm_dtype dt, float f) {
    return dt == TM_FLOAT16 ? tm_f32_to_f16(f) : tm_f32_to_bf16(f);
}

void *tm__opt_buffer(const tm_optimizer *o, const tm__opt_param *p, int role) {
    switch (role) {
    case TM__BUF_MASTER: return p->master;
    case TM__BUF_MOMENTUM: return p->has_momentum ? p->momentum : NULL;
    case TM__BUF_EXP_AVG: return p->exp_avg;
    case TM__BUF_EXP_AVG_SQ: return p->exp_avg_sq;
    case TM__BUF_MAX_EXP_AVG_SQ: return p->max_exp_avg_sq;
    default: return NULL;
    }
}

int tm__opt_roles(const tm_optimizer *o, const tm__opt_param *p, int roles[4]) {
    int n = 0;
    for (int r = TM__BUF_MASTER; r <= TM__BUF_MAX_EXP_AVG_SQ; r++)
        if (tm__opt_buffer(o, p, r)) roles[n++] = r;
    return n;
}

static void free_param(const tm_allocator *a, tm__opt_param *p) {
    free(p->name);
    tm__free(a, p->master);
    tm__free(a, p->momentum);
    tm__free(a, p->exp_avg);
    tm__free(a, p->exp_avg_sq);
    tm__free(a, p->max_exp_avg_sq);
}

void tm_optimizer_free(tm_optimizer *o) {
    if (!o) return;
    for (int i = 0; i < o->n; i++) free_param(o->params.allocator, &o->p[i]);
    free(o->p);
    free(o->consts);
    free(o->sumsq);
    tm_pool_free(o->pool);
    free(o);
}

/* A zero-filled state buffer of numel elements of dt (at least one byte). */
static void *zeroed(const tm_allocator *a, size_t numel, tm_dtype dt) {
    size_t bytes;
    if (!tm__mul_ok(numel, tm_dtype_elem_size(dt), &bytes)) return NULL;
    void *b = tm__alloc(a, bytes ? bytes : 1);
    if (b) memset(b, 0, bytes);
    return b;
}

static tm_status init_param(tm_optimizer *o, int i, const char *name, tm_tensor *t,
                            tm_error *err) {
    tm__opt_param *p = &o->p[i];
    const tm_allocator *a = o->params.allocator;
    char fallback[32];
    if (!name) {
        snprintf(fallback, sizeof fallback, "param #%d", i);
        name = fallback;
    }
    if (!(p->name = strdup(name)))
        return tm__fail(err, TM_ERR_NO_MEMORY, "optimizer: out of memory");
    if (!t)
        return tm__fail_at(err, TM_ERR_INVALID_ARGUMENT, NULL, NULL, name,
                           "optimizer: parameter '%s' is NULL", name);
    tm_dtype dt = t->dtype;
    if (dt != TM_FLOAT && dt != TM_DOUBLE && !is_half(dt))
        return tm__fail_at(err, TM_ERR_DTYPE, NULL, NULL, name,
                           "optimizer: parameter '%s' is %s; float32, float64, float16 and "
                           "bfloat16 parameters can be trained", name, tm_dtype_name(dt));
    int64_t numel = tm_numel(t->rank, t->dims);
    if (numel < 0 || (numel > 0 && !t->data))
        return tm__fail_at(err, TM_ERR_INVALID_ARGUMENT, NULL, NULL, name,
                           "optimizer: parameter '%s' has no data", name);
    p->tensor = t;
    p->numel = (size_t)numel;
    p->state_dtype = dt == TM_DOUBLE ? TM_DOUBLE : TM_FLOAT;
    p->weight_decay = o->params.weight_decay;
    int ok = 1;
    if (is_half(dt)) {
        float *m = zeroed(a, p->numel, TM_FLOAT);
        const uint16_t *h = t->data;
        if (m)
            for (size_t k = 0; k < p->numel; k++) m[k] = half_to_f32(dt, h[k]);
        ok &= (p->master = m) != NULL;
    }
    if (o->params.kind == TM_OPTIMIZER_SGD) {
        if (o->params.momentum != 0.0) ok &= (p->momentum = zeroed(a, p->numel, p->state_dtype)) != NULL;
    } else {
        ok &= (p->exp_avg = zeroed(a, p->numel, p->state_dtype)) != NULL;
        ok &= (p->exp_avg_sq = zeroed(a, p->numel, p->state_dtype)) != NULL;
        if (o->params.amsgrad)
            ok &= (p->max_exp_avg_sq = zeroed(a, p->numel, p->state_dtype)) != NULL;
    }
    if (!ok)
        return tm__fail_at(err, TM_ERR_NO_MEMORY, NULL, NULL, name,
                           "optimizer: out of memory for the state of '%s'", name);
    return TM_OK;
}

tm_status tm_optimizer_create(const tm_optimizer_params *params, int n,
                              const char *const *names, tm_tensor *const *tensors,
                              tm_optimizer **out, tm_error *err) {
    if (!params || !out || n < 0 || (n > 0 && !tensors))
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT,
                        "tm_optimizer_create: params, out and the tensors must be given");
    tm_optimizer_params p;
    tm_optimizer_params_default(&p, params->kind);
    memcpy(&p, params, params->size < sizeof p ? params->size : sizeof p);
    p.size = sizeof p;
    tm_status st = check_params(&p, err);
    if (st) return st;
    tm_optimizer *o = calloc(1, sizeof *o);
    if (!o || !(o->p = calloc((size_t)n + 1, sizeof *o->p)) ||
        !(o->consts = calloc((size_t)n + 1, sizeof *o->consts)) ||
        !(o->sumsq = calloc((size_t)n + 1, sizeof *o->sumsq))) {
        if (o) free(o->consts), free(o->p);
        free(o);
        return tm__fail(err, TM_ERR_NO_MEMORY, "optimizer: out of memory");
    }
    o->params = p;
    if (p.threads > 1) o->pool = tm_pool_create(p.threads);   /* NULL: one thread after all */
    for (int i = 0; i < n && !st; i++) {
        o->n = i + 1;
        st = init_param(o, i, names ? names[i] : NULL, tensors[i], err);
        for (int j = 0; j < i && !st; j++)
            if (tensors[j] == tensors[i] ||
                (o->p[j].numel && o->p[j].tensor->data == tensors[i]->data))
                st = tm__fail_at(err, TM_ERR_INVALID_ARGUMENT, NULL, NULL, param_name(o, i),
                                 "optimizer: parameters '%s' and '%s' are the same tensor",
                                 param_name(o, j), param_name(o, i));
    }
    if (st) {
        tm_optimizer_free(o);
        return st;
    }
    *out = o;
    return TM_OK;
}

tm_status tm_optimizer_set_weight_decay(tm_optimizer *o, int i, double wd, tm_error *err) {
    if (!o || i < 0 || i >= o->n)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT,
                        "tm_optimizer_set_weight_decay: no parameter #%d", i);
    if (!(wd >= 0.0) || !isfinite(wd))
        return tm__fail_at(err, TM_ERR_INVALID_ARGUMENT, NULL, NULL, o->p[i].name,
                           "optimizer: weight decay of '%s' must be finite and >= 0",
                           o->p[i].name);
    o->p[i].weight_decay = wd;
    return TM_OK;
}

int64_t tm_optimizer_step_count(const tm_optimizer *o) { return o ? o->steps : 0; }

double tm_optimizer_lr(const tm_optimizer *o) {
    return o ? o->params.lr * tm_lr_schedule_factor(&o->params, o->steps) : 0.0;
}

double tm_optimizer_grad_norm(const tm_optimizer *o) { return o ? o->last_grad_norm : 0.0; }

/* ---- Update rules -------------------------------------------------------------------- */

/* The kernels mirror torch's sequence of in-place tensor operations one element at a
 * time; fma where ATen's vectorised add-with-alpha uses one (a + alpha * b as
 * fmadd(b, alpha, a)), and otherwise its evaluation order, so that a float32 trajectory
 * matches PyTorch's to rounding (tests/test_optim.c against tests/data/optim).
 * Each variant's options are compile-time constants of an always-inlined body, so the
 * loops have no branches and the compiler vectorises them (optim.o is built with
 * -fno-math-errno and the dynamic cost model, see the Makefile); vector sqrt, division
 * and fma round exactly as the scalar ones, so there is one kernel, no reference twin.
 * The gradient is multiplied by grad_mul: the clipping factor, negated for maximize
 * (both exact rearrangements of torch's g * coef, then -g; 1 leaves g as it is). */
#define INLINE static inline __attribute__((always_inline))
#define DEFINE_KERNELS(T, SUFFIX, FMA, SQRT)                                                \
    INLINE void sgd_body_##SUFFIX(T *restrict param, const T *restrict grad,               \
                                  T *restrict buf, size_t n, const step_consts *k,          \
                                  const int decay, const int momentum, const int has_buf,   \
                                  const int nesterov) {                                     \
        const T wd = (T)k->weight_decay, mom = (T)k->momentum;                              \
        const T keep = (T)(1.0 - k->dampening), neg_lr = (T)(-k->lr), gm = (T)k->grad_mul;  \
        for (size_t i = 0; i < n; i++) {                                                    \
            T g = grad[i] * gm;                                                             \
            if (decay) g = FMA(param[i], wd, g);                                            \
            if (momentum) {                                                                 \
                T b = has_buf ? FMA(g, keep, buf[i] * mom) : g;                             \
                buf[i] = b;                                                                 \
                g = nesterov ? FMA(b, mom, g) : b;                                          \
            }                                                                               \
            param[i] = FMA(g, neg_lr, param[i]);                                            \
        }                                                                                   \
    }                                                                                       \
    static void sgd_##SUFFIX(T *param, const T *grad, T *buf, size_t n,                    \
                             const step_consts *k) {                                        \
        int d = k->weight_decay != 0.0;                                                     \
        if (k->momentum == 0.0) {                                                           \
            if (d) sgd_body_##SUFFIX(param, grad, buf, n, k, 1, 0, 0, 0);                   \
            else sgd_body_##SUFFIX(param, grad, buf, n, k, 0, 0, 0, 0);                     \
        } else if (!k->has_momentum) {                                                      \
            if (d && k->nesterov) sgd_body_##SUFFIX(param, grad, buf, n, k, 1, 1, 0, 1);    \
            else if (d) sgd_body_##SUFFIX(param, grad, buf, n, k, 1, 1, 0, 0);              \
            else if (k->nesterov) sgd_body_##SUFFIX(param, grad, buf, n, k, 0, 1, 0, 1);    \
            else sgd_body_##SUFFIX(param, grad, buf, n, k, 0, 1, 0, 0);                     \
        } else {                                                                            \
            if (d && k->nesterov) sgd_body_##SUFFIX(param, grad, buf, n, k, 1, 1, 1, 1);    \
            else if (d) sgd_body_##SUFFIX(param, grad, buf, n, k, 1, 1, 1, 0);              \
            else if (k->nesterov) sgd_body_##SUFFIX(param, grad, buf, n, k, 0, 1, 1, 1);    \
            else sgd_body_##SUFFIX(param, grad, buf, n, k, 0, 1, 1, 0);                     \
        }                                                                                   \
    }                                                                                       \
    INLINE void adamw_body_##SUFFIX(T *restrict param, const T *restrict grad,             \
                                    T *restrict m, T *restrict v, T *restrict vmax,         \
                                    size_t n, const step_consts *k, const int amsgrad) {    \
        const T decay = (T)k->decay, b1 = (T)k->beta1, one_b1 = (T)(1.0 - k->beta1);        \
        const T b2 = (T)k->beta2, one_b2 = (T)(1.0 - k->beta2), eps = (T)k->eps;            \
        const T bc2 = (T)k->bias_correction2_sqrt, neg_step = (T)(-k->step_size);           \
        const T gm = (T)k->grad_mul;                                                        \
        for (size_t i = 0; i < n; i++) {                                                    \
            T g = grad[i] * gm;                                                             \
            T p = param[i] * decay;                                                         \
            T mi = FMA(g, one_b1, m[i] * b1);                                               \
            T vi = v[i] * b2 + one_b2 * g * g;                                              \
            m[i] = mi;                                                                      \
            v[i] = vi;                                                                      \
            T r = vi;                                                                       \
            if (amsgrad) {                                                                  \
                /* torch.maximum: NaN wins */                                               \
                T old = vmax[i];                                                            \
                r = old > vi || old != old ? old : vi;                                      \
                vmax[i] = r;                                                                \
            }                                                                               \
            T denom = SQRT(r) / bc2 + eps;                                                  \
            param[i] = p + neg_step * mi / denom;                                           \
        }                                                                                   \
    }                                                                                       \
    static void adamw_##SUFFIX(T *param, const T *grad, T *m, T *v, T *vmax, size_t n,     \
                               const step_consts *k) {                                      \
        if (k->amsgrad) adamw_body_##SUFFIX(param, grad, m, v, vmax, n, k, 1);              \
        else adamw_body_##SUFFIX(param, grad, m, v, vmax, n, k, 0);                         \
    }

DEFINE_KERNELS(float, f32, fmaf, sqrtf)
DEFINE_KERNELS(double, f64, fma, sqrt)

/* Sum of squares of a gradient, in double. */
static double sum_squares(const tm_tensor *g, size_t n) {
    double s = 0.0;
    switch (g->dtype) {
    case TM_FLOAT: {
        const float *x = g->data;
        for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
        break;
    }
    case TM_DOUBLE: {
        const double *x = g->data;
        for (size_t i = 0; i < n; i++) s += x[i] * x[i];
        break;
    }
    default: {
        const uint16_t *x = g->data;
        for (size_t i = 0; i < n; i++) {
            double f = half_to_f32(g->dtype, x[i]);
            s += f * f;
        }
        break;
    }
    }
    return s;
}

static void run_kernel(const tm_optimizer *o, const tm__opt_param *p, void *param,
                       const void *grad, size_t off, size_t n, const step_consts *k) {
    if (p->state_dtype == TM_DOUBLE) {
        double *pd = (double *)param + off;
        const double *gd = grad;
        if (o->params.kind == TM_OPTIMIZER_SGD)
            sgd_f64(pd, gd, p->momentum ? (double *)p->momentum + off : NULL, n, k);
        else
            adamw_f64(pd, gd, (double *)p->exp_avg + off, (double *)p->exp_avg_sq + off,
                      p->max_exp_avg_sq ? (double *)p->max_exp_avg_sq + off : NULL, n, k);
        return;
    }
    float *pf = (float *)param + off;
    const float *gf = grad;
    if (o->params.kind == TM_OPTIMIZER_SGD)
        sgd_f32(pf, gf, p->momentum ? (float *)p->momentum + off : NULL, n, k);
    else
        adamw_f32(pf, gf, (float *)p->exp_avg + off, (float *)p->exp_avg_sq + off,
                  p->max_exp_avg_sq ? (float *)p->max_exp_avg_sq + off : NULL, n, k);
}

/* Parameter p's step count and its scalars for this step (k holds the step's shared ones). */
static void begin_param(const tm_optimizer *o, tm__opt_param *p, step_consts *k) {
    const tm_optimizer_params *hp = &o->params;
    p->step++;
    k->weight_decay = p->weight_decay;
    k->has_momentum = p->has_momentum;
    if (hp->kind == TM_OPTIMIZER_ADAMW) {
        double step = (double)p->step;
        double bias_correction1 = 1.0 - pow(hp->beta1, step);
        double bias_correction2 = 1.0 - pow(hp->beta2, step);
        k->decay = 1.0 - k->lr * p->weight_decay;
        k->step_size = k->lr / bias_correction1;
        k->bias_correction2_sqrt = sqrt(bias_correction2);
    }
}

/* Elements [off, off + n) of parameter p's update. */
static void update_range(const tm_optimizer *o, const tm__opt_param *p, const tm_tensor *g,
                         size_t off, size_t n, const step_consts *k) {
    if (!is_half(p->tensor->dtype)) {
        size_t bytes = tm_dtype_elem_size(g->dtype);
        run_kernel(o, p, p->tensor->data, (const char *)g->data + off * bytes, off, n, k);
        return;
    }
    /* The update runs on the float32 master; the parameter receives it rounded. */
    tm_dtype dt = p->tensor->dtype;
    uint16_t *h = p->tensor->data;
    float *master = p->master;
    float chunk[HALF_CHUNK];
    for (size_t end = off + n; off < end; off += HALF_CHUNK) {
        size_t c = end - off < HALF_CHUNK ? end - off : HALF_CHUNK;
        const float *gf = (const float *)g->data + off;
        if (g->dtype != TM_FLOAT) {
            const uint16_t *gh = (const uint16_t *)g->data + off;
            for (size_t i = 0; i < c; i++) chunk[i] = half_to_f32(g->dtype, gh[i]);
            gf = chunk;
        }
        run_kernel(o, p, master, gf, off, c, k);
        for (size_t i = 0; i < c; i++) h[off + i] = f32_to_half(dt, master[off + i]);
    }
}

/* The step's updates as one range of elements over every parameter with a gradient, in
 * order; slice ith of nth takes its share of that range. */
typedef struct step_job {
    const tm_optimizer *o;
    const tm_tensor *const *grads;
    size_t total;
} step_job;

static void step_slice(void *arg, int ith, int nth) {
    const step_job *j = arg;
    const tm_optimizer *o = j->o;
    size_t lo = j->total * (size_t)ith / (size_t)nth, hi = j->total * (size_t)(ith + 1) / (size_t)nth;
    size_t at = 0;   /* the current parameter's first element in the range */
    for (int i = 0; i < o->n && at < hi; i++) {
        if (!j->grads[i]) continue;
        size_t n = o->p[i].numel, b = lo > at ? lo - at : 0, e = hi - at < n ? hi - at : n;
        if (b < e) update_range(o, &o->p[i], j->grads[i], b, e - b, &o->consts[i]);
        at += n;
    }
}

/* Elements a slice takes at the least: below it the wake-up of the pool's threads costs
 * more than they save. */
#define STEP_SLICE_MIN ((size_t)1 << 16)

static tm_status check_grad(const tm_optimizer *o, int i, const tm_tensor *g, tm_error *err) {
    const tm__opt_param *p = &o->p[i];
    const tm_tensor *t = p->tensor;
    int dtype_ok = g->dtype == t->dtype || (is_half(t->dtype) && g->dtype == TM_FLOAT);
    if (!dtype_ok)
        return tm__fail_at(err, TM_ERR_DTYPE, NULL, NULL, p->name,
                           "optimizer: the gradient of '%s' is %s, the parameter %s", p->name,
                           tm_dtype_name(g->dtype), tm_dtype_name(t->dtype));
    if (!tm_same_shape(g, t)) {
        char a[160] = "", b[160] = "";
        size_t la = 0, lb = 0;
        for (int d = 0; d < g->rank && la < sizeof a - 24; d++)
            la += (size_t)snprintf(a + la, sizeof a - la, "%s%lld", d ? "," : "", (long long)g->dims[d]);
        for (int d = 0; d < t->rank && lb < sizeof b - 24; d++)
            lb += (size_t)snprintf(b + lb, sizeof b - lb, "%s%lld", d ? "," : "", (long long)t->dims[d]);
        return tm__fail_at(err, TM_ERR_SHAPE, NULL, NULL, p->name,
                           "optimizer: the gradient of '%s' has shape [%s], the parameter [%s]",
                           p->name, a, b);
    }
    if (p->numel && !g->data)
        return tm__fail_at(err, TM_ERR_INVALID_ARGUMENT, NULL, NULL, p->name,
                           "optimizer: the gradient of '%s' has no data", p->name);
    return TM_OK;
}

typedef struct sumsq_job {
    const tm_optimizer *o;
    const tm_tensor *const *grads;
} sumsq_job;

static void sumsq_slice(void *arg, int ith, int nth) {
    (void)nth;
    const sumsq_job *j = arg;
    if (j->grads[ith]) j->o->sumsq[ith] = sum_squares(j->grads[ith], j->o->p[ith].numel);
}

tm_status tm_optimizer_step(tm_optimizer *o, const tm_tensor *const *grads, tm_error *err) {
    if (!o || (o->n > 0 && !grads))
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT,
                        "tm_optimizer_step: optimizer and gradients must be given");
    /* Every gradient is checked before any parameter changes. */
    for (int i = 0; i < o->n; i++) {
        if (!grads[i]) continue;
        tm_status st = check_grad(o, i, grads[i], err);
        if (st) return st;
    }
    const tm_optimizer_params *hp = &o->params;
    /* Each gradient's sum of squares whole (a slice a parameter, on any thread), then
     * added up in order: the same norm whatever the thread count. */
    sumsq_job sj = {o, grads};
    if (o->pool && o->n > 1 && o->n <= 65535) tm_pool_run_n(o->pool, o->n, sumsq_slice, &sj);
    else
        for (int i = 0; i < o->n; i++) sumsq_slice(&sj, i, o->n);
    double sumsq = 0.0;
    for (int i = 0; i < o->n; i++)
        if (grads[i]) sumsq += o->sumsq[i];
    double norm = sqrt(sumsq);
    step_consts k;
    memset(&k, 0, sizeof k);
    k.lr = hp->lr * tm_lr_schedule_factor(hp, o->steps);
    k.momentum = hp->momentum;
    k.dampening = hp->dampening;
    k.nesterov = hp->nesterov;
    k.beta1 = hp->beta1;
    k.beta2 = hp->beta2;
    k.eps = hp->eps;
    k.amsgrad = hp->amsgrad;
    double coef = 1.0;
    if (hp->max_grad_norm > 0.0) {
        /* clip_grad_norm_: the factor is left as computed when it is NaN, as torch.clamp does */
        coef = hp->max_grad_norm / (norm + 1e-6);
        if (coef > 1.0) coef = 1.0;
    }
    k.grad_mul = hp->maximize ? -coef : coef;
    step_job job = {o, grads, 0};
    for (int i = 0; i < o->n; i++)
        if (grads[i]) {
            o->consts[i] = k;
            begin_param(o, &o->p[i], &o->consts[i]);
            job.total += o->p[i].numel;
        }
    int slices = tm_pool_threads(o->pool);
    if ((size_t)slices > job.total / STEP_SLICE_MIN) slices = (int)(job.total / STEP_SLICE_MIN);
    if (slices <= 1) step_slice(&job, 0, 1);
    else tm_pool_run_n(o->pool, slices, step_slice, &job);
    if (hp->kind == TM_OPTIMIZER_SGD && hp->momentum != 0.0)
        for (int i = 0; i < o->n; i++)
            if (grads[i]) o->p[i].has_momentum = 1;
    o->last_grad_norm = norm;
    o->steps++;
    return TM_OK;
}
