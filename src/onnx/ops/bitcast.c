/* BitCast (opset 26): the same bits seen as another dtype of equal width. Integer and
 * bool pairs are a wrapping CAST; pairs involving floats or sub-byte types are copied
 * byte for byte on the host (a plan breaks there: no bit-reinterpreting primitive yet). */
#include "elementwise.h"

static int is_byte_integer(tm_dtype dt) {
    return dt == TM_BOOL || ((tm_dtype_is_signed_int(dt) || tm_dtype_is_unsigned_int(dt)) &&
                             tm_dtype_bits(dt) >= 8);
}

/* Sub-byte elements sit one per byte, signed ones sign-extended: keep the low `bits`. */
static void reinterpret_subbyte(const uint8_t *in, uint8_t *out, int64_t n, int bits,
                                int to_signed) {
    uint8_t mask = (uint8_t)((1u << bits) - 1), sign = (uint8_t)(1u << (bits - 1));
    for (int64_t i = 0; i < n; i++) {
        uint8_t v = in[i] & mask;
        out[i] = to_signed && (v & sign) ? (uint8_t)(v | (uint8_t)~mask) : v;
    }
}

static tm_val reinterpret_on_host(tm_ctx *c, tm_val x, tm_dtype to) {
    const tm_tensor *t = tm_host(c, x);
    if (!t) return TM_NONE;
    tm_tensor *y = tm_tensor_alloc(to, t->rank, t->dims, c->allocator);
    if (!y) {
        tm_ctx_fail(c, TM_ERR_NO_MEMORY, "out of memory");
        return TM_NONE;
    }
    int64_t n = tm_tensor_numel_(t);
    int bits = tm_dtype_bits(to);
    if (bits < 8) reinterpret_subbyte(t->data, y->data, n, bits, tm_dtype_is_signed_int(to));
    else if (y->nbytes) memcpy(y->data, t->data, y->nbytes);
    /* A bool holds 0 or 1: any other byte reads as true. */
    for (int64_t i = 0; to == TM_BOOL && i < n; i++)
        ((uint8_t *)y->data)[i] = ((uint8_t *)y->data)[i] != 0;
    return tm_val_tensor(c, y, 0);
}

static tm_status lower_bitcast(tm_lower *L) {
    tm_ctx *c = tm_lctx(L);
    tm_val x = tm_ew_input(L, 0);
    if (x == TM_NONE) return c->status;
    tm_dtype from = tm_vdtype(c, x);
    int64_t to = tm_attr_i(L, "to", 0);
    if (!tm_attr_has(L, "to") || !tm_dtype_is_valid((int)to) || to == TM_STRING)
        return tm_lfail(L, TM_ERR_DTYPE, "attribute to=%lld is not a non-string dtype",
                        (long long)to);
    if (from == TM_STRING)
        return tm_lfail(L, TM_ERR_DTYPE, "input 0 is a string tensor, which has no bits to "
                        "reinterpret");
    if (tm_dtype_bits(from) != tm_dtype_bits((tm_dtype)to))
        return tm_lfail(L, TM_ERR_DTYPE, "input 0 is %s (%d bits) but to=%s has %d bits",
                        tm_dtype_name(from), tm_dtype_bits(from), tm_dtype_name((tm_dtype)to),
                        tm_dtype_bits((tm_dtype)to));
    if (from == (tm_dtype)to) {
        tm_lout(L, 0, x);
    } else if (is_byte_integer(from) && is_byte_integer((tm_dtype)to) && to != TM_BOOL) {
        tm_lout(L, 0, tm_cast(c, x, (tm_dtype)to));
    } else {
        tm_lout(L, 0, reinterpret_on_host(c, x, (tm_dtype)to));
    }
    return c->status;
}

TM_REGISTER_OP("", "BitCast", 26, 27, lower_bitcast);
