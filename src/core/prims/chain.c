/* Elementwise chains (fused.h): their encoding in primitive args and the interpreter that
 * runs one over a row of floats, chunk by chunk in L1, each step a vectorizable loop.
 * Used by the epilogues of LINEAR and CONV_PACKED; not a pass (passes/ make chains). */
#if defined(__GNUC__) && !defined(__clang__)
/* -O2 leaves plain loops scalar (GCC's very-cheap vector cost model); these loops run
 * over every element they touch: the full vectorizer. No floating-point contraction:
 * each step rounds as the unfused primitive does. */
#pragma GCC optimize("O3", "no-trapping-math")
#endif
#include <string.h>
#include "fused.h"
#include "../../backends/cpu/vmath.h"

#define CHUNK 256

/* x86: chains of plain arithmetic run in registers (chain_regs_avx512), compiled per
 * function and picked at run time like nn.c's kernels. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define CHAIN_X86 1
#include <immintrin.h>
#endif

int tm__chain_step_ok(int prim, int operand) {
    if (operand == TM_CHAIN_UNARY) {
        switch (prim) {
        case TM_P_NEG: case TM_P_ABS: case TM_P_EXP: case TM_P_SQRT: case TM_P_RECIPROCAL:
        case TM_P_TANH: case TM_P_ERF: case TM_P_SIGMOID: case TM_P_RELU: case TM_P_GELU:
            return 1;
        default:
            return 0;
        }
    }
    if (operand == TM_CHAIN_SAVE) return 1;
    if (operand < TM_CHAIN_SCALAR_RIGHT || operand > TM_CHAIN_SAVED_LEFT) return 0;
    switch (prim) {
    case TM_P_ADD: case TM_P_SUB: case TM_P_MUL: case TM_P_DIV: case TM_P_MAX: case TM_P_MIN:
        return 1;
    default:
        return 0;
    }
}

void tm__chain_encode(const tm_chain *ch, int64_t *args) {
    args[0] = ch->n;
    for (int s = 0; s < ch->n; s++) {
        const tm_chain_step *st = &ch->step[s];
        int64_t value = st->value;
        if (st->operand == TM_CHAIN_SCALAR_RIGHT || st->operand == TM_CHAIN_SCALAR_LEFT) {
            uint32_t bits;
            memcpy(&bits, &st->scalar, sizeof bits);
            value = bits;
        }
        args[1 + 3 * s] = st->prim;
        args[2 + 3 * s] = st->operand;
        args[3 + 3 * s] = value;
    }
}

int tm__chain_decode(const int64_t *args, int room, tm_chain *ch) {
    memset(ch, 0, sizeof *ch);
    int64_t n = args[0];
    if (n < 0 || n > TM_CHAIN_MAX_STEPS || TM_CHAIN_ARGS(n) > room) return 0;
    for (int s = 0; s < n; s++) {
        tm_chain_step *st = &ch->step[s];
        int64_t prim = args[1 + 3 * s], operand = args[2 + 3 * s], value = args[3 + 3 * s];
        if (prim < 0 || prim >= TM_P__COUNT || !tm__chain_step_ok((int)prim, (int)operand)) {
            memset(ch, 0, sizeof *ch);
            return 0;
        }
        st->prim = (int)prim;
        st->operand = (int)operand;
        st->value = value;
        if (operand == TM_CHAIN_SCALAR_RIGHT || operand == TM_CHAIN_SCALAR_LEFT) {
            uint32_t bits = (uint32_t)value;
            memcpy(&st->scalar, &bits, sizeof bits);
        }
    }
    ch->n = (int)n;
    return 1;
}

/* t = prim(l, r) with l or r a scalar or a row: the binary kernel's own expressions. */
#define BINARY_CASES(L, R)                                                       \
    switch (prim) {                                                              \
    case TM_P_ADD: for (int64_t i = 0; i < n; i++) t[i] = (L) + (R); break;      \
    case TM_P_SUB: for (int64_t i = 0; i < n; i++) t[i] = (L) - (R); break;      \
    case TM_P_MUL: for (int64_t i = 0; i < n; i++) t[i] = (L) * (R); break;      \
    case TM_P_DIV: for (int64_t i = 0; i < n; i++) t[i] = (L) / (R); break;      \
    case TM_P_MAX:                                                               \
        for (int64_t i = 0; i < n; i++) {                                        \
            float l = (L), r = (R);                                              \
            t[i] = (l > r || l != l) ? l : r;                                    \
        }                                                                        \
        break;                                                                   \
    case TM_P_MIN:                                                               \
        for (int64_t i = 0; i < n; i++) {                                        \
            float l = (L), r = (R);                                              \
            t[i] = (l < r || l != l) ? l : r;                                    \
        }                                                                        \
        break;                                                                   \
    default: break;                                                              \
    }

static void binary_step(int prim, int operand, float s, const float *x, const float *t_in,
                        float *t, int64_t n) {
    /* t may be t_in or x (in place); no restrict, so the compiler checks. */
    switch (operand) {
    case TM_CHAIN_SCALAR_RIGHT: BINARY_CASES(t_in[i], s); break;
    case TM_CHAIN_SCALAR_LEFT: BINARY_CASES(s, t_in[i]); break;
    case TM_CHAIN_SAVED_RIGHT: BINARY_CASES(t_in[i], x[i]); break;
    case TM_CHAIN_SAVED_LEFT: BINARY_CASES(x[i], t_in[i]); break;
    default: break;
    }
}

#ifdef CHAIN_X86
/* The register form: 64 floats at a time in four registers, every step applied to them
 * before the next block is loaded (a chain of ten steps otherwise reads and writes each
 * value ten times). Each step is the same IEEE operation as binary_step's on each lane
 * (MAX and MIN with its NaN rule: l wins when l > r or l is NaN), so the bits agree.
 * Steps: SAVE, RELU, and the six binaries with a scalar or the saved value. */
enum { RK_SAVE = 100, RK_RELU = 101 };

static int chain_regs_code(const tm_chain_step *st) {
    if (st->operand == TM_CHAIN_SAVE) return RK_SAVE;
    if (st->operand == TM_CHAIN_UNARY) return st->prim == TM_P_RELU ? RK_RELU : -1;
    int p;
    switch (st->prim) {
    case TM_P_ADD: p = 0; break;
    case TM_P_SUB: p = 1; break;
    case TM_P_MUL: p = 2; break;
    case TM_P_DIV: p = 3; break;
    case TM_P_MAX: p = 4; break;
    case TM_P_MIN: p = 5; break;
    default: return -1;
    }
    return p * 4 + (st->operand - TM_CHAIN_SCALAR_RIGHT);
}

__attribute__((target("avx512f"))) static inline __m512 rk_max(__m512 l, __m512 r) {
    __mmask16 k = _mm512_cmp_ps_mask(l, r, _CMP_GT_OQ) | _mm512_cmp_ps_mask(l, l, _CMP_UNORD_Q);
    return _mm512_mask_blend_ps(k, r, l);
}
__attribute__((target("avx512f"))) static inline __m512 rk_min(__m512 l, __m512 r) {
    __mmask16 k = _mm512_cmp_ps_mask(l, r, _CMP_LT_OQ) | _mm512_cmp_ps_mask(l, l, _CMP_UNORD_Q);
    return _mm512_mask_blend_ps(k, r, l);
}

#define RK_EACH(L, R, F)                                                                     \
    for (int q = 0; q < 4; q++) t[q] = F(L, R)
#define RK_CASES(P, F)                                                                       \
    case P * 4 + 0: RK_EACH(t[q], sc[s], F); break;                                          \
    case P * 4 + 1: RK_EACH(sc[s], t[q], F); break;                                          \
    case P * 4 + 2: RK_EACH(t[q], u[q], F); break;                                           \
    case P * 4 + 3: RK_EACH(u[q], t[q], F); break;

/* y = chain(x + bias) + res: bias added first when with_bias, res (NULL: none) last. */
__attribute__((target("avx512f")))
static void chain_regs_avx512(const tm_chain *ch, const int *code, int with_bias, float bias,
                              const float *x, const float *res, float *y, int64_t n) {
    __m512 sc[TM_CHAIN_MAX_STEPS], vb = _mm512_set1_ps(bias);
    for (int s = 0; s < ch->n; s++) sc[s] = _mm512_set1_ps(ch->step[s].scalar);
    for (int64_t j = 0; j < n; j += 64) {
        __mmask16 m[4];
        __m512 t[4], u[4];
        for (int q = 0; q < 4; q++) {
            int64_t left = n - j - 16 * q;
            m[q] = left >= 16 ? (__mmask16)0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
            t[q] = _mm512_maskz_loadu_ps(m[q], x + j + 16 * q);
            if (with_bias) t[q] = _mm512_add_ps(t[q], vb);
            u[q] = t[q];
        }
        for (int s = 0; s < ch->n; s++) {
            switch (code[s]) {
            case RK_SAVE:
                for (int q = 0; q < 4; q++) u[q] = t[q];
                break;
            case RK_RELU:   /* v < 0 ? 0 : v */
                for (int q = 0; q < 4; q++)
                    t[q] = _mm512_mask_mov_ps(t[q], _mm512_cmp_ps_mask(t[q], _mm512_setzero_ps(),
                                                                       _CMP_LT_OQ),
                                              _mm512_setzero_ps());
                break;
            RK_CASES(0, _mm512_add_ps)
            RK_CASES(1, _mm512_sub_ps)
            RK_CASES(2, _mm512_mul_ps)
            RK_CASES(3, _mm512_div_ps)
            RK_CASES(4, rk_max)
            RK_CASES(5, rk_min)
            default: break;
            }
        }
        for (int q = 0; q < 4; q++) {
            if (res) t[q] = _mm512_add_ps(t[q], _mm512_maskz_loadu_ps(m[q], res + j + 16 * q));
            _mm512_mask_storeu_ps(y + j + 16 * q, m[q], t[q]);
        }
    }
}

/* 1 when the register form ran the chain. */
static int chain_regs(const tm_chain *ch, int with_bias, float bias, const float *x,
                      const float *res, float *y, int64_t n) {
    const tm__vmath *vm = tm__vmath_active();   /* NULL: reference kernels or no AVX-512 */
    if (!vm || n < 16) return 0;
    int code[TM_CHAIN_MAX_STEPS];
    for (int s = 0; s < ch->n; s++)
        if ((code[s] = chain_regs_code(&ch->step[s])) < 0) return 0;
    chain_regs_avx512(ch, code, with_bias, bias, x, res, y, n);
    return 1;
}
#endif

/* Chunk by chunk (L1-sized): each step reads the previous one's buffer and writes the
 * other, the last straight into y; u points at x itself until a SAVE copies t. */
void tm__chain_apply(const void *chain, const float *x, float *y, int64_t n) {
    const tm_chain *ch = chain;
    float a[CHUNK], b[CHUNK], saved[CHUNK];
    if (ch->n == 0) {
        if (y != x) memmove(y, x, (size_t)n * sizeof *y);
        return;
    }
#ifdef CHAIN_X86
    if (chain_regs(ch, 0, 0.0f, x, NULL, y, n)) return;
#endif
    for (int64_t j = 0; j < n; j += CHUNK) {
        int64_t len = n - j < CHUNK ? n - j : CHUNK;
        const float *t = x + j, *u = x + j;
        for (int s = 0; s < ch->n; s++) {
            const tm_chain_step *st = &ch->step[s];
            int last = s == ch->n - 1;
            float *out = last ? y + j : t == a ? b : a;
            if (st->operand == TM_CHAIN_SAVE) {
                memcpy(saved, t, (size_t)len * sizeof *saved);
                u = saved;
                if (last && t != out) memmove(out, t, (size_t)len * sizeof *out);
                continue;
            }
            if (st->operand == TM_CHAIN_UNARY) {
                /* The whitelisted unaries read no argument but GELU's i[0]. */
                tm_args ua;
                ua.i[0] = st->value;
                const tm__vmath *vm = st->prim == TM_P_GELU && st->value == 0 ? tm__vmath_active() : NULL;
                if (vm && vm->gelu_erf) {
                    vm->gelu_erf(t, out, len);   /* in place is fine: lane by lane */
                } else if (out == t || out == u) {   /* in place at the end: through a buffer */
                    float *tmp = t == a ? b : a;
                    tm__unary_f32_rows(st->prim, &ua, t, tmp, len);
                    memcpy(out, tmp, (size_t)len * sizeof *out);
                } else {
                    tm__unary_f32_rows(st->prim, &ua, t, out, len);
                }
            } else {
                binary_step(st->prim, st->operand, st->scalar, u, t, out, len);
            }
            t = out;
        }
    }
}

int tm__chain_apply_ends(const void *chain, float bias, const float *x, const float *res,
                         float *y, int64_t n) {
#ifdef CHAIN_X86
    return chain_regs(chain, 1, bias, x, res, y, n);
#else
    (void)chain, (void)bias, (void)x, (void)res, (void)y, (void)n;
    return 0;
#endif
}
