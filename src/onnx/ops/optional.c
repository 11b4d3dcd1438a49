/* Optional, OptionalHasElement, OptionalGetElement: an optional is the value itself (a
 * tensor or a sequence) with `optional` set, or kind TM_OV_NONE when empty. Nothing is
 * computed; values pass through. Not the sequence operators (sequence.c). */
#include <string.h>
#include "../lower.h"

static tm_status lower_optional(tm_lower *L) {
    tm_oval ov;
    memset(&ov, 0, sizeof ov);
    const tm_oval *x = tm_lin_oval(L, 0);
    if (x && x->kind != TM_OV_NONE) {
        ov = *x;
    } else if (!tm_attr_has(L, "type")) {
        return tm_lfail(L, TM_ERR_PARSE, "an Optional without input needs attribute 'type'");
    }
    ov.optional = 1;
    tm_lout_oval(L, 0, &ov);
    return tm_lctx(L)->status;
}
TM_REGISTER_OP("", "Optional", 15, 27, lower_optional);

/* Opset 15 requires the input; 18 reads a missing input as an empty optional. */
static tm_status lower_optional_has_element(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    if (tm_lopset(L) < 18 && !tm_lin_oval(L, 0))
        return tm_lfail(L, TM_ERR_PARSE, "input 0 ('input') is missing");
    tm_lout(L, 0, tm_const_scalar(c, TM_BOOL, tm_lhas(L, 0) ? 1.0 : 0.0));
    return c->status;
}
TM_REGISTER_OP("", "OptionalHasElement", 15, 27, lower_optional_has_element);

/* Opset 18 also accepts a plain tensor or sequence (returned as is); the values here do
 * not record whether they were declared optional, so both opsets share this. */
static tm_status lower_optional_get_element(tm_lower *L) {
    const tm_oval *x = tm_lin_oval(L, 0);
    if (!x || x->kind == TM_OV_NONE)
        return tm_lfail(L, TM_ERR_INVALID_ARGUMENT, "input 0 ('%s') is an empty optional",
                        tm_lnin(L) ? tm_lnode(L)->inputs[0] : "");
    tm_oval ov = *x;
    ov.optional = 0;
    tm_lout_oval(L, 0, &ov);
    return tm_lctx(L)->status;
}
TM_REGISTER_OP("", "OptionalGetElement", 15, 27, lower_optional_get_element);
