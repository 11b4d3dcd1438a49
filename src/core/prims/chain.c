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

/* Chunk by chunk (L1-sized): each step reads the previous one's buffer and writes the
 * other, the last straight into y; u points at x itself until a SAVE copies t. */
void tm__chain_apply(const void *chain, const float *x, float *y, int64_t n) {
    const tm_chain *ch = chain;
    float a[CHUNK], b[CHUNK], saved[CHUNK];
    if (ch->n == 0) {
        if (y != x) memmove(y, x, (size_t)n * sizeof *y);
        return;
    }
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
