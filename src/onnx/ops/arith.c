/* Arithmetic and bitwise operators: Add, Sub, Mul, Div, Pow, Mod, the variadic Max, Min,
 * Sum and Mean, BitShift and Bitwise{And,Or,Xor,Not}, as broadcasting binary primitives.
 * Not comparisons (compare.c) nor unary math (unary.c). */
#include "elementwise.h"

/* Two same-typed operands; opsets before 7 use the broadcast/axis attributes. */
static tm_status binary_op(tm_lower *L, int prim, uint32_t allowed) {
    tm_ctx *c = tm_lctx(L);
    tm_val a = tm_ew_input(L, 0), b = tm_ew_input(L, 1);
    if (tm_ew_check(L, 0, a, allowed) || tm_ew_same_dtype(L, 0, a, 1, b)) return c->status;
    if (tm_lopset(L) < 7) b = tm_ew_legacy_rhs(L, a, b);
    tm_lout(L, 0, tm_binary(c, prim, a, b));
    return c->status;
}

static tm_status lower_add(tm_lower *L) { return binary_op(L, TM_P_ADD, TM_DTS_NUMERIC); }
static tm_status lower_sub(tm_lower *L) { return binary_op(L, TM_P_SUB, TM_DTS_NUMERIC); }
static tm_status lower_mul(tm_lower *L) { return binary_op(L, TM_P_MUL, TM_DTS_NUMERIC); }
static tm_status lower_div(tm_lower *L) { return binary_op(L, TM_P_DIV, TM_DTS_NUMERIC); }

TM_REGISTER_OP("", "Add", 1, 27, lower_add);
TM_REGISTER_OP("", "Sub", 1, 27, lower_sub);
TM_REGISTER_OP("", "Mul", 1, 28, lower_mul);
TM_REGISTER_OP("", "Div", 1, 28, lower_div);

/* Pow's exponent may have another dtype than its base (opset 12 on); the result has the
 * base's dtype and the primitive takes the mix. An f32/f64 base gets its exponent cast to
 * its own dtype, which keeps the common case on the primitive's same-dtype fast path. */
static tm_status lower_pow(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0), y = tm_ew_input(L, 1);
    if (tm_ew_check(L, 0, x, TM_DTS_NUMERIC) || tm_ew_check(L, 1, y, TM_DTS_NUMERIC))
        return c->status;
    if (tm_lopset(L) < 7) y = tm_ew_legacy_rhs(L, x, y);
    tm_dtype tx = tm_vdtype(c, x);
    if (tx == TM_FLOAT || tx == TM_DOUBLE) y = tm_cast(c, y, tx);
    tm_lout(L, 0, tm_binary(c, TM_P_POW, x, y));
    return c->status;
}
TM_REGISTER_OP("", "Pow", 1, 27, lower_pow);

/* Mod: fmod=0 is Python's % (the sign of the divisor), integers only; fmod=1 is C's fmod
 * (the sign of the dividend). */
static tm_status lower_mod(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val a = tm_ew_input(L, 0), b = tm_ew_input(L, 1);
    if (tm_ew_check(L, 0, a, TM_DTS_NUMERIC) || tm_ew_same_dtype(L, 0, a, 1, b))
        return c->status;
    int64_t fmod = tm_attr_i(L, "fmod", 0);
    if (fmod != 0 && fmod != 1)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute fmod=%lld must be 0 or 1",
                        (long long)fmod);
    if (!fmod && tm_dtype_is_float(tm_vdtype(c, a)))
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute fmod=0 needs integer inputs, "
                        "but input 0 is %s (set fmod=1 for floats)",
                        tm_dtype_name(tm_vdtype(c, a)));
    int r = tm_vrank(c, a) > tm_vrank(c, b) ? tm_vrank(c, a) : tm_vrank(c, b);
    tm_val in[2] = {tm_align_rank(c, a, r), tm_align_rank(c, b, r)};
    tm_args args;
    memset(&args, 0, sizeof args);
    args.i[0] = fmod;
    tm_lout(L, 0, tm_prim(c, TM_P_MOD, in, 2, &args));
    return c->status;
}
TM_REGISTER_OP("", "Mod", 10, 27, lower_mod);

/* Max, Min, Sum, Mean: any number of same-typed inputs, broadcast together (opsets before
 * 8 required equal shapes, which broadcasting also covers). */
static tm_status variadic_op(tm_lower *L, int prim, uint32_t allowed, int mean) {
    tm_ctx *c = tm_lctx(L);
    int n = tm_lnin(L);
    if (n < 1) return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "needs at least one input");
    tm_val acc = tm_ew_input(L, 0);
    if (tm_ew_check(L, 0, acc, allowed)) return c->status;
    for (int i = 1; i < n; i++) {
        tm_val x = tm_ew_input(L, i);
        if (tm_ew_same_dtype(L, 0, acc, i, x)) return c->status;
        acc = tm_binary(c, prim, acc, x);
    }
    if (mean && n > 1) acc = tm_div(c, acc, tm_scalar_like(c, acc, n));
    tm_lout(L, 0, acc);
    return c->status;
}

static tm_status lower_max(tm_lower *L) { return variadic_op(L, TM_P_MAX, TM_DTS_NUMERIC, 0); }
static tm_status lower_min(tm_lower *L) { return variadic_op(L, TM_P_MIN, TM_DTS_NUMERIC, 0); }
static tm_status lower_sum(tm_lower *L) { return variadic_op(L, TM_P_ADD, TM_DTS_NUMERIC, 0); }
static tm_status lower_mean(tm_lower *L) { return variadic_op(L, TM_P_ADD, TM_DTS_FLOAT, 1); }

TM_REGISTER_OP("", "Max", 1, 27, lower_max);
TM_REGISTER_OP("", "Min", 1, 27, lower_min);
TM_REGISTER_OP("", "Sum", 1, 27, lower_sum);
TM_REGISTER_OP("", "Mean", 1, 27, lower_mean);

static tm_status lower_bitshift(tm_lower *L) {
    const char *dir = tm_attr_s(L, "direction", "");
    if (!strcmp(dir, "LEFT")) return binary_op(L, TM_P_SHL, TM_DTS_UINT);
    if (!strcmp(dir, "RIGHT")) return binary_op(L, TM_P_SHR, TM_DTS_UINT);
    return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute direction='%s' must be \"LEFT\" or "
                    "\"RIGHT\"", dir);
}
TM_REGISTER_OP("", "BitShift", 11, 27, lower_bitshift);

static tm_status lower_bitwise_and(tm_lower *L) { return binary_op(L, TM_P_BITAND, TM_DTS_INT); }
static tm_status lower_bitwise_or(tm_lower *L) { return binary_op(L, TM_P_BITOR, TM_DTS_INT); }
static tm_status lower_bitwise_xor(tm_lower *L) { return binary_op(L, TM_P_BITXOR, TM_DTS_INT); }

static tm_status lower_bitwise_not(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    if (tm_ew_check(L, 0, x, TM_DTS_INT)) return c->status;
    tm_lout(L, 0, tm_unary(c, TM_P_BITNOT, x));
    return c->status;
}

TM_REGISTER_OP("", "BitwiseAnd", 18, 27, lower_bitwise_and);
TM_REGISTER_OP("", "BitwiseOr", 18, 27, lower_bitwise_or);
TM_REGISTER_OP("", "BitwiseXor", 18, 27, lower_bitwise_xor);
TM_REGISTER_OP("", "BitwiseNot", 18, 27, lower_bitwise_not);
