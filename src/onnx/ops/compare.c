/* Comparisons and logic: Equal (strings too), Less, LessOrEqual, Greater, GreaterOrEqual,
 * And, Or, Xor, Not: bool results of broadcasting primitives.
 * Not bitwise integer ops (arith.c). */
#include "elementwise.h"

static tm_status compare_op(tm_lower *L, int prim, uint32_t allowed) {
    tm_ctx *c = tm_lctx(L);
    tm_val a = tm_ew_input(L, 0), b = tm_ew_input(L, 1);
    if (tm_ew_check(L, 0, a, allowed) || tm_ew_same_dtype(L, 0, a, 1, b)) return c->status;
    if (tm_lopset(L) < 7) b = tm_ew_legacy_rhs(L, a, b);
    tm_lout(L, 0, tm_binary(c, prim, a, b));
    return c->status;
}

static tm_status lower_equal(tm_lower *L) {
    return compare_op(L, TM_P_EQ, TM_DTS_NUMERIC | TM_DTS_BOOL | TM_DT(TM_STRING));
}

static tm_status lower_less(tm_lower *L) { return compare_op(L, TM_P_LT, TM_DTS_NUMERIC); }
static tm_status lower_less_or_equal(tm_lower *L) {
    return compare_op(L, TM_P_LE, TM_DTS_NUMERIC);
}
static tm_status lower_greater(tm_lower *L) { return compare_op(L, TM_P_GT, TM_DTS_NUMERIC); }
static tm_status lower_greater_or_equal(tm_lower *L) {
    return compare_op(L, TM_P_GE, TM_DTS_NUMERIC);
}

TM_REGISTER_OP("", "Equal", 1, 27, lower_equal);
TM_REGISTER_OP("", "Less", 1, 27, lower_less);
TM_REGISTER_OP("", "LessOrEqual", 12, 27, lower_less_or_equal);
TM_REGISTER_OP("", "Greater", 1, 27, lower_greater);
TM_REGISTER_OP("", "GreaterOrEqual", 12, 27, lower_greater_or_equal);

static tm_status lower_and(tm_lower *L) { return compare_op(L, TM_P_AND, TM_DTS_BOOL); }
static tm_status lower_or(tm_lower *L) { return compare_op(L, TM_P_OR, TM_DTS_BOOL); }
static tm_status lower_xor(tm_lower *L) { return compare_op(L, TM_P_XOR, TM_DTS_BOOL); }

static tm_status lower_not(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    if (tm_ew_check(L, 0, x, TM_DTS_BOOL)) return c->status;
    tm_lout(L, 0, tm_unary(c, TM_P_NOT, x));
    return c->status;
}

TM_REGISTER_OP("", "And", 1, 27, lower_and);
TM_REGISTER_OP("", "Or", 1, 27, lower_or);
TM_REGISTER_OP("", "Xor", 1, 27, lower_xor);
TM_REGISTER_OP("", "Not", 1, 27, lower_not);
