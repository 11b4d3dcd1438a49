/* Cast and CastLike: the CAST primitive (strings included) with the saturate attribute
 * (float8 targets, opset 19 on) and round_mode (float8e8m0 targets, opset 25 on).
 * Not bit reinterpretation (BitCast). */
#include <strings.h>
#include "elementwise.h"

/* Cast-1 named its target type with a string. */
static const struct { const char *name; tm_dtype dtype; } legacy_names[] = {
    {"FLOAT", TM_FLOAT},       {"UINT8", TM_UINT8},     {"INT8", TM_INT8},
    {"UINT16", TM_UINT16},     {"INT16", TM_INT16},     {"INT32", TM_INT32},
    {"INT64", TM_INT64},       {"STRING", TM_STRING},   {"BOOL", TM_BOOL},
    {"FLOAT16", TM_FLOAT16},   {"DOUBLE", TM_DOUBLE},   {"UINT32", TM_UINT32},
    {"UINT64", TM_UINT64},     {"COMPLEX64", TM_COMPLEX64}, {"COMPLEX128", TM_COMPLEX128},
};

static int attr_target(tm_lower *L, tm_dtype *to) {
    const tm_attr *a = tm_attr_get(L, "to");
    if (!a) return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute 'to' is required");
    if (a->type != TM_ATTR_STRING) {
        *to = (tm_dtype)a->i;
        return TM_OK;
    }
    const char *name = tm_attr_s(L, "to", "");
    for (size_t i = 0; i < sizeof legacy_names / sizeof legacy_names[0]; i++) {
        if (!strcasecmp(name, legacy_names[i].name)) {
            *to = legacy_names[i].dtype;
            return TM_OK;
        }
    }
    return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute to='%s' names no data type", name);
}

/* Round modes of the CAST primitive's i[2] (float8e8m0 targets only). */
enum { ROUND_UP = 0, ROUND_DOWN = 1, ROUND_NEAREST = 2 };

static int attr_round_mode(tm_lower *L, int *mode) {
    const char *s = tm_attr_s(L, "round_mode", "up");
    if (!strcmp(s, "up")) *mode = ROUND_UP;
    else if (!strcmp(s, "down")) *mode = ROUND_DOWN;
    else if (!strcmp(s, "nearest")) *mode = ROUND_NEAREST;
    else
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "attribute round_mode='%s' must be \"up\", "
                        "\"down\" or \"nearest\"", s);
    return TM_OK;
}

static tm_status cast_to(tm_lower *L, tm_dtype to, int saturate, int round_mode) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    if (x == TM_NONE) return c->status;
    if (!tm_dtype_is_valid(to) || to == TM_COMPLEX64 || to == TM_COMPLEX128)
        return tm_lfail(L, TM_ERR_UNSUPPORTED, "cannot cast to data type %d (%s)", (int)to,
                        tm_dtype_name(to));
    tm_dtype from = tm_vdtype(c, x);
    if (from == TM_COMPLEX64 || from == TM_COMPLEX128)
        return tm_lfail(L, TM_ERR_UNSUPPORTED, "input 0 ('%s') is %s, which Cast does not take",
                        tm_lnode(L)->inputs[0], tm_dtype_name(from));
    if (from == to) {
        tm_lout(L, 0, x);
        return c->status;
    }
    if (to != TM_FLOAT8E8M0 || round_mode == ROUND_UP) {
        tm_lout(L, 0, tm_cast_sat(c, x, to, saturate));
        return c->status;
    }
    tm_args a;
    memset(&a, 0, sizeof a);
    a.i[0] = to;
    a.i[1] = saturate;
    a.i[2] = round_mode;
    tm_lout(L, 0, tm_prim(c, TM_P_CAST, &x, 1, &a));
    return c->status;
}

static tm_status lower_cast(tm_lower *L) {
    tm_dtype to = TM_UNDEFINED;
    int round_mode = ROUND_UP;
    if (attr_target(L, &to) != TM_OK || attr_round_mode(L, &round_mode) != TM_OK)
        return tm_lctx(L)->status;
    return cast_to(L, to, tm_attr_i(L, "saturate", 1) != 0, round_mode);
}
TM_REGISTER_OP("", "Cast", 1, 27, lower_cast);

static tm_status lower_cast_like(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val like = tm_ew_input(L, 1);
    int round_mode = ROUND_UP;
    if (like == TM_NONE || attr_round_mode(L, &round_mode) != TM_OK) return c->status;
    return cast_to(L, tm_vdtype(c, like), tm_attr_i(L, "saturate", 1) != 0, round_mode);
}
TM_REGISTER_OP("", "CastLike", 15, 28, lower_cast_like);
