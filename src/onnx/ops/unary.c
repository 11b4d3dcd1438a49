/* Unary math operators, each one elementwise primitive (Abs, Neg, Sign, Exp, Log, Sqrt,
 * Reciprocal, Floor, Ceil, Round, the trigonometric and hyperbolic functions, Erf, IsNaN,
 * IsInf), and Identity (tensors, sequences and optionals). Not activations (activation.c). */
#include "elementwise.h"

typedef struct unary_entry {
    const char *op_type;
    int prim;
    uint32_t allowed;
} unary_entry;

#define FLOATS TM_DTS_FLOAT
#define SIGNED (TM_DTS_FLOAT | TM_DTS_SINT)

static const unary_entry unary_table[] = {
    {"Abs", TM_P_ABS, TM_DTS_NUMERIC},   {"Neg", TM_P_NEG, SIGNED},
    {"Sign", TM_P_SIGN, TM_DTS_NUMERIC}, {"Exp", TM_P_EXP, FLOATS},
    {"Log", TM_P_LOG, FLOATS},           {"Sqrt", TM_P_SQRT, FLOATS},
    {"Reciprocal", TM_P_RECIPROCAL, FLOATS},
    {"Floor", TM_P_FLOOR, FLOATS},       {"Ceil", TM_P_CEIL, FLOATS},
    {"Round", TM_P_ROUND, FLOATS},       {"Sin", TM_P_SIN, FLOATS},
    {"Cos", TM_P_COS, FLOATS},           {"Tan", TM_P_TAN, FLOATS},
    {"Asin", TM_P_ASIN, FLOATS},         {"Acos", TM_P_ACOS, FLOATS},
    {"Atan", TM_P_ATAN, FLOATS},         {"Sinh", TM_P_SINH, FLOATS},
    {"Cosh", TM_P_COSH, FLOATS},         {"Tanh", TM_P_TANH, FLOATS},
    {"Asinh", TM_P_ASINH, FLOATS},       {"Acosh", TM_P_ACOSH, FLOATS},
    {"Atanh", TM_P_ATANH, FLOATS},       {"Erf", TM_P_ERF, TM_DTS_NUMERIC},
    {"IsNaN", TM_P_ISNAN, TM_DTS_FLOAT | TM_DTS_FLOAT8},
};

static const unary_entry *find_unary(const char *op_type) {
    for (size_t i = 0; i < sizeof unary_table / sizeof unary_table[0]; i++)
        if (!strcmp(unary_table[i].op_type, op_type)) return &unary_table[i];
    return NULL;
}

static tm_status lower_unary_math(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    const unary_entry *e = find_unary(tm_lnode(L)->op_type);
    if (!e)
        return tm_lfail(L, TM_ERR_RUNTIME, "internal: no unary primitive for %s",
                        tm_lnode(L)->op_type);
    tm_val x = tm_ew_input(L, 0);
    if (tm_ew_check(L, 0, x, e->allowed)) return c->status;
    tm_dtype dt = tm_vdtype(c, x);
    /* Erf takes integers too (opset 13); its value is computed on floats. */
    if (e->prim == TM_P_ERF && !tm_dtype_is_float(dt)) {
        tm_lout(L, 0, tm_cast(c, tm_unary(c, TM_P_ERF, tm_cast(c, x, TM_DOUBLE)), dt));
        return c->status;
    }
    tm_lout(L, 0, tm_unary(c, e->prim, x));
    return c->status;
}

TM_REGISTER_OP("", "Abs", 1, 27, lower_unary_math);
TM_REGISTER_OP("", "Neg", 1, 27, lower_unary_math);
TM_REGISTER_OP("", "Sign", 9, 27, lower_unary_math);
TM_REGISTER_OP("", "Exp", 1, 27, lower_unary_math);
TM_REGISTER_OP("", "Log", 1, 27, lower_unary_math);
TM_REGISTER_OP("", "Sqrt", 1, 27, lower_unary_math);
TM_REGISTER_OP("", "Reciprocal", 1, 27, lower_unary_math);
TM_REGISTER_OP("", "Floor", 1, 27, lower_unary_math);
TM_REGISTER_OP("", "Ceil", 1, 27, lower_unary_math);
TM_REGISTER_OP("", "Round", 11, 27, lower_unary_math);
TM_REGISTER_OP("", "Sin", 7, 27, lower_unary_math);
TM_REGISTER_OP("", "Cos", 7, 27, lower_unary_math);
TM_REGISTER_OP("", "Tan", 7, 27, lower_unary_math);
TM_REGISTER_OP("", "Asin", 7, 27, lower_unary_math);
TM_REGISTER_OP("", "Acos", 7, 27, lower_unary_math);
TM_REGISTER_OP("", "Atan", 7, 27, lower_unary_math);
TM_REGISTER_OP("", "Sinh", 9, 27, lower_unary_math);
TM_REGISTER_OP("", "Cosh", 9, 27, lower_unary_math);
TM_REGISTER_OP("", "Tanh", 1, 27, lower_unary_math);
TM_REGISTER_OP("", "Asinh", 9, 27, lower_unary_math);
TM_REGISTER_OP("", "Acosh", 9, 27, lower_unary_math);
TM_REGISTER_OP("", "Atanh", 9, 27, lower_unary_math);
TM_REGISTER_OP("", "Erf", 9, 27, lower_unary_math);
TM_REGISTER_OP("", "IsNaN", 9, 27, lower_unary_math);

static tm_status lower_isinf(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    if (tm_ew_check(L, 0, x, TM_DTS_FLOAT | TM_DTS_FLOAT8)) return c->status;
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = tm_attr_i(L, "detect_positive", 1) != 0;
    a.i[1] = tm_attr_i(L, "detect_negative", 1) != 0;
    tm_lout(L, 0, tm_prim(c, TM_P_ISINF, &x, 1, &a));
    return c->status;
}
TM_REGISTER_OP("", "IsInf", 10, 27, lower_isinf);

/* Identity passes any value through, sequences and optionals included (opsets 14, 16). */
static tm_status lower_identity(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    const tm_oval *in = tm_lin_oval(L, 0);
    if (!in) return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "input 0 is required but missing");
    tm_lout_oval(L, 0, in);
    return c->status;
}
TM_REGISTER_OP("", "Identity", 1, 27, lower_identity);
