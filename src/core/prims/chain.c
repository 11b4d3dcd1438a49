/* Elementwise chains (fused.h): their encoding in primitive args and the interpreter that
 * runs one over a row of floats, chunk by chunk in L1, each step a vectorizable loop.
 * Used by the epilogues of LINEAR and CONV_PACKED; not a pass (passes/ make chains). */
#include <string.h>
#include "fused.h"

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
    if (operand < TM_CHAIN_SCALAR_RIGHT || operand > TM_CHAIN_INPUT_LEFT) return 0;
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

static void binary_step(int prim, int operand, float s, const float *restrict x,
                        float *restrict t, int64_t n) {
    switch (operand) {
    case TM_CHAIN_SCALAR_RIGHT: BINARY_CASES(t[i], s); break;
    case TM_CHAIN_SCALAR_LEFT: BINARY_CASES(s, t[i]); break;
    case TM_CHAIN_INPUT_RIGHT: BINARY_CASES(t[i], x[i]); break;
    case TM_CHAIN_INPUT_LEFT: BINARY_CASES(x[i], t[i]); break;
    default: break;
    }
}

void tm__chain_apply(const void *chain, const float *x, float *y, int64_t n) {
    const tm_chain *ch = chain;
    float in[CHUNK], a[CHUNK], b[CHUNK];
    for (int64_t j = 0; j < n; j += CHUNK) {
        int64_t len = n - j < CHUNK ? n - j : CHUNK;
        memcpy(in, x + j, (size_t)len * sizeof *in);
        float *t = a, *spare = b;
        memcpy(t, in, (size_t)len * sizeof *t);
        for (int s = 0; s < ch->n; s++) {
            const tm_chain_step *st = &ch->step[s];
            if (st->operand == TM_CHAIN_UNARY) {
                tm_args ua;
                memset(&ua, 0, sizeof ua);
                ua.i[0] = st->value;
                tm__unary_f32_rows(st->prim, &ua, t, spare, len);
                float *swap = t;
                t = spare;
                spare = swap;
            } else {
                binary_step(st->prim, st->operand, st->scalar, in, t, len);
            }
        }
        memcpy(y + j, t, (size_t)len * sizeof *t);
    }
}
