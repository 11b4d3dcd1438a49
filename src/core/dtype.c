/* Element types: sizes, names, and exact scalar conversions between the wide C types and
 * the narrow ONNX formats (f16, bf16, the float8s, float4e2m1, e8m0, int4/int2).
 * Not a kernel library: these are per-element helpers for reference code and file I/O. */
#include "dtype.h"

#include <math.h>
#include <string.h>

/* ---- Names, sizes, classes ------------------------------------------------------------ */

static const char *const dtype_names[] = {
    "undefined", "float32", "uint8", "int8", "uint16", "int16", "int32", "int64",
    "string", "bool", "float16", "float64", "uint32", "uint64", "complex64", "complex128",
    "bfloat16", "float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "uint4",
    "int4", "float4e2m1", "float8e8m0", "uint2", "int2",
};

const char *tm_dtype_name(tm_dtype dt) {
    if (!tm_dtype_is_valid((int)dt))
        return "undefined";
    return dtype_names[dt];
}

int tm_dtype_is_valid(int dt) {
    return dt >= TM_FLOAT && dt <= TM_INT2;
}

size_t tm_dtype_elem_size(tm_dtype dt) {
    switch (dt) {
    case TM_FLOAT: case TM_INT32: case TM_UINT32: return 4;
    case TM_DOUBLE: case TM_INT64: case TM_UINT64: case TM_COMPLEX64: return 8;
    case TM_COMPLEX128: return 16;
    case TM_FLOAT16: case TM_BFLOAT16: case TM_INT16: case TM_UINT16: return 2;
    case TM_STRING: return sizeof(char *);
    case TM_UINT8: case TM_INT8: case TM_BOOL:
    case TM_FLOAT8E4M3FN: case TM_FLOAT8E4M3FNUZ: case TM_FLOAT8E5M2: case TM_FLOAT8E5M2FNUZ:
    case TM_FLOAT8E8M0: case TM_UINT4: case TM_INT4: case TM_FLOAT4E2M1:
    case TM_UINT2: case TM_INT2:
        return 1;
    default:
        return 0;
    }
}

int tm_dtype_bits(tm_dtype dt) {
    switch (dt) {
    case TM_UINT4: case TM_INT4: case TM_FLOAT4E2M1: return 4;
    case TM_UINT2: case TM_INT2: return 2;
    case TM_STRING: return 0; /* variable length: no fixed width */
    default: return (int)tm_dtype_elem_size(dt) * 8;
    }
}

int tm_dtype_is_float(tm_dtype dt) {
    switch (dt) {
    case TM_FLOAT: case TM_DOUBLE: case TM_FLOAT16: case TM_BFLOAT16:
    case TM_FLOAT8E4M3FN: case TM_FLOAT8E4M3FNUZ: case TM_FLOAT8E5M2: case TM_FLOAT8E5M2FNUZ:
    case TM_FLOAT8E8M0: case TM_FLOAT4E2M1:
        return 1;
    default:
        return 0;
    }
}

int tm_dtype_is_signed_int(tm_dtype dt) {
    switch (dt) {
    case TM_INT8: case TM_INT16: case TM_INT32: case TM_INT64: case TM_INT4: case TM_INT2:
        return 1;
    default:
        return 0;
    }
}

int tm_dtype_is_unsigned_int(tm_dtype dt) {
    switch (dt) {
    case TM_UINT8: case TM_UINT16: case TM_UINT32: case TM_UINT64: case TM_UINT4:
    case TM_UINT2: case TM_BOOL:
        return 1;
    default:
        return 0;
    }
}

/* ---- Bit casts -------------------------------------------------------------------------- */

static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint64_t f64_bits(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }

/* ---- One rounding routine for every narrow float format -------------------------------- */

/* A narrow binary float format. Codes are sign | magnitude, the sign at bit sign_shift. */
typedef struct narrow_format {
    int mant_bits;
    int bias;
    int sign_shift;
    uint32_t max_code;  /* magnitude of the largest finite value */
    uint32_t inf_code;  /* magnitude of infinity; 0 when the format has none */
    uint32_t nan_code;  /* magnitude of the NaN we write (unsigned-zero formats: the code) */
    int unsigned_zero;  /* FNUZ: no -0, and the -0 pattern is the only NaN */
    int always_saturate; /* float4e2m1: no Inf/NaN, so out of range can only clamp */
} narrow_format;

static const narrow_format fmt_f16 = { 10, 15, 15, 0x7BFF, 0x7C00, 0x7E00, 0, 0 };
static const narrow_format fmt_bf16 = { 7, 127, 15, 0x7F7F, 0x7F80, 0x7FC0, 0, 0 };
static const narrow_format fmt_e4m3fn = { 3, 7, 7, 0x7E, 0, 0x7F, 0, 0 };
static const narrow_format fmt_e4m3fnuz = { 3, 8, 7, 0x7F, 0, 0x80, 1, 0 };
static const narrow_format fmt_e5m2 = { 2, 15, 7, 0x7B, 0x7C, 0x7E, 0, 0 };
static const narrow_format fmt_e5m2fnuz = { 2, 16, 7, 0x7F, 0, 0x80, 1, 0 };
static const narrow_format fmt_e2m1 = { 1, 1, 3, 0x7, 0, 0, 0, 1 };

static uint32_t narrow_zero(const narrow_format *f, int negative) {
    return (negative && !f->unsigned_zero) ? (1u << f->sign_shift) : 0;
}

/* What a value too large for the format becomes (infinities included). */
static uint32_t narrow_overflow(const narrow_format *f, int negative, int saturate) {
    uint32_t sign = negative ? (1u << f->sign_shift) : 0;
    if (saturate || f->always_saturate)
        return sign | f->max_code;
    if (f->inf_code)
        return sign | f->inf_code;
    if (f->unsigned_zero)
        return f->nan_code;
    return sign | f->nan_code;
}

/* Rounds sig * 2^exp (sig > 0, exact) to the nearest code, ties to even. Working on an
 * exact integer significand lets doubles and 64-bit integers round once, never twice. */
static uint32_t narrow_round(const narrow_format *f, int negative, uint64_t sig, int exp,
                             int saturate) {
    if (sig == 0)
        return narrow_zero(f, negative);
    int len = 64 - __builtin_clzll(sig);
    int e = exp + len - 1;                 /* floor(log2(value)) */
    int e_min = 1 - f->bias;               /* exponent of the smallest normal */
    int q = (e > e_min ? e : e_min) - f->mant_bits; /* log2 of the spacing of codes here */
    int shift = q - exp;
    uint64_t n;
    if (shift <= 0) {
        n = sig << -shift;                 /* exact; at most mant_bits + 1 bits */
    } else if (shift > 64) {
        n = 0;                             /* below half the smallest step */
    } else if (shift == 64) {
        n = sig > (UINT64_C(1) << 63);     /* exactly half rounds to even, i.e. 0 */
    } else {
        n = sig >> shift;
        uint64_t rem = sig & ((UINT64_C(1) << shift) - 1);
        uint64_t half = UINT64_C(1) << (shift - 1);
        if (rem > half || (rem == half && (n & 1)))
            n++;
    }
    if (n == 0)
        return narrow_zero(f, negative);
    if (n >> (f->mant_bits + 1)) {         /* rounding carried into the next binade */
        n >>= 1;
        q++;
    }
    uint64_t code;
    if (n < (UINT64_C(1) << f->mant_bits)) {
        code = n;                          /* subnormal */
    } else {
        int64_t biased = (int64_t)q + f->mant_bits + f->bias;
        code = ((uint64_t)biased << f->mant_bits) | (n - (UINT64_C(1) << f->mant_bits));
    }
    if (code > f->max_code)
        return narrow_overflow(f, negative, saturate);
    return (negative ? (1u << f->sign_shift) : 0) | (uint32_t)code;
}

/* Splits a finite double into sign, integer significand and exponent. */
static void split_double(double d, int *negative, uint64_t *sig, int *exp) {
    uint64_t u = f64_bits(d);
    int biased = (int)((u >> 52) & 0x7FF);
    *negative = (int)(u >> 63);
    *sig = u & ((UINT64_C(1) << 52) - 1);
    if (biased == 0) {
        *exp = -1074;
    } else {
        *sig |= UINT64_C(1) << 52;
        *exp = biased - 1075;
    }
}

/* NaN and infinity are handled by the callers, which know their format's conventions. */
static uint32_t narrow_from_finite_double(const narrow_format *f, double d, int saturate) {
    int negative, exp;
    uint64_t sig;
    split_double(d, &negative, &sig, &exp);
    return narrow_round(f, negative, sig, exp, saturate);
}

static uint32_t narrow_from_i64(const narrow_format *f, int64_t v, int saturate) {
    uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    return narrow_round(f, v < 0, mag, 0, saturate);
}

/* Decodes a finite, non-NaN code of format f. */
static double narrow_decode(const narrow_format *f, uint32_t code) {
    uint32_t mag = code & ((1u << f->sign_shift) - 1);
    uint32_t mant = mag & ((1u << f->mant_bits) - 1);
    int biased = (int)(mag >> f->mant_bits);
    double v;
    if (biased == 0)
        v = ldexp((double)mant, 1 - f->bias - f->mant_bits);
    else
        v = ldexp((double)(mant | (1u << f->mant_bits)), biased - f->bias - f->mant_bits);
    return (code >> f->sign_shift) & 1 ? -v : v;
}

/* ---- float16 ------------------------------------------------------------------------ */

float tm_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1F;
    uint32_t mant = h & 0x3FF;
    if (exp == 0x1F) /* keep the NaN payload so f16 -> f32 -> f16 is the identity */
        return bits_f32(sign | 0x7F800000 | (mant << 13));
    if (exp == 0) {
        float v = ldexpf((float)mant, -24); /* subnormal (or zero): exact in f32 */
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

static uint16_t f16_nan(uint64_t sign, uint64_t top_payload10) {
    uint16_t payload = (uint16_t)(top_payload10 & 0x3FF);
    return (uint16_t)((sign ? 0x8000 : 0) | 0x7C00 | (payload ? payload : 0x200));
}

static uint16_t f16_from_double(double d) {
    uint64_t u = f64_bits(d);
    if (isnan(d))
        return f16_nan(u >> 63, (u >> 42) & 0x3FF);
    if (isinf(d))
        return (uint16_t)((u >> 63) ? 0xFC00 : 0x7C00);
    return (uint16_t)narrow_from_finite_double(&fmt_f16, d, 0);
}

uint16_t tm_f32_to_f16(float f) {
    /* NaN from the f32 bits: widening to double would quiet a signalling NaN's payload. */
    uint32_t u = f32_bits(f);
    if ((u & 0x7FFFFFFF) > 0x7F800000)
        return f16_nan(u >> 31, (u >> 13) & 0x3FF);
    return f16_from_double((double)f);
}

/* ---- bfloat16 ------------------------------------------------------------------------ */

float tm_bf16_to_f32(uint16_t h) {
    return bits_f32((uint32_t)h << 16);
}

uint16_t tm_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7FFFFFFF) > 0x7F800000) { /* NaN: keep sign and top payload, stay a NaN */
        uint16_t h = (uint16_t)(u >> 16);
        return (h & 0x7F) ? h : (uint16_t)(h | 0x40);
    }
    /* Adding 0x7FFF plus the kept lsb rounds to nearest, ties to even; overflow carries
     * into the exponent and lands on infinity exactly as IEEE rounding does. */
    return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

static uint16_t bf16_from_double(double d) {
    if (isnan(d) || isinf(d))
        return tm_f32_to_bf16((float)d);
    return (uint16_t)narrow_from_finite_double(&fmt_bf16, d, 0);
}

/* ---- float8 --------------------------------------------------------------------------- */

static const narrow_format *f8_format(tm_dtype dt) {
    switch (dt) {
    case TM_FLOAT8E4M3FN: return &fmt_e4m3fn;
    case TM_FLOAT8E4M3FNUZ: return &fmt_e4m3fnuz;
    case TM_FLOAT8E5M2: return &fmt_e5m2;
    case TM_FLOAT8E5M2FNUZ: return &fmt_e5m2fnuz;
    default: return NULL;
    }
}

float tm_f8_to_f32(uint8_t v, tm_dtype dt) {
    const narrow_format *f = f8_format(dt);
    if (!f)
        return NAN;
    if (f->unsigned_zero) {
        if (v == 0x80)
            return NAN;
    } else if (dt == TM_FLOAT8E4M3FN) {
        if ((v & 0x7F) == 0x7F)
            return copysignf(NAN, (v & 0x80) ? -1.0f : 1.0f);
    } else { /* e5m2: IEEE-like, exponent all ones */
        if ((v & 0x7C) == 0x7C) {
            if ((v & 0x03) == 0)
                return (v & 0x80) ? -INFINITY : INFINITY;
            /* keep the payload so every NaN byte survives a trip through f32 */
            return bits_f32(((uint32_t)(v & 0x80) << 24) | 0x7F800000 |
                            ((uint32_t)(v & 0x03) << 21));
        }
    }
    return (float)narrow_decode(f, v);
}

/* The ONNX Cast tables: saturate clamps out-of-range values and infinities to +-max;
 * otherwise they become Inf (e5m2) or NaN. NaN stays NaN (FNUZ: the single 0x80). */
static uint8_t f8_from_double(double d, tm_dtype dt, int saturate) {
    const narrow_format *f = f8_format(dt);
    if (!f)
        return 0;
    int negative = signbit(d) != 0;
    if (isnan(d)) {
        if (f->unsigned_zero)
            return 0x80;
        if (dt == TM_FLOAT8E5M2) {
            uint32_t payload = (uint32_t)((f64_bits(d) >> 50) & 0x3);
            return (uint8_t)((negative ? 0x80 : 0) | 0x7C | (payload ? payload : 0x3));
        }
        return (uint8_t)((negative ? 0x80 : 0) | 0x7F);
    }
    if (isinf(d))
        return (uint8_t)narrow_overflow(f, negative, saturate);
    return (uint8_t)narrow_from_finite_double(f, d, saturate);
}

uint8_t tm_f32_to_f8(float f, tm_dtype dt, int saturate) {
    uint32_t u = f32_bits(f);
    if (dt == TM_FLOAT8E5M2 && (u & 0x7FFFFFFF) > 0x7F800000) { /* as in tm_f32_to_f16 */
        uint32_t payload = (u >> 21) & 0x3;
        return (uint8_t)((u >> 31 ? 0x80 : 0) | 0x7C | (payload ? payload : 0x3));
    }
    return f8_from_double((double)f, dt, saturate);
}

/* ---- float4e2m1 ----------------------------------------------------------------------- */

float tm_f4e2m1_to_f32(uint8_t v) {
    return (float)narrow_decode(&fmt_e2m1, v & 0xF);
}

/* float4e2m1 has no Inf/NaN: out-of-range values and infinities clamp to +-6. NaN gives
 * 0x8 (-0), which is what the ONNX backend data (from ml_dtypes) expects; the ONNX float4
 * page says 6 instead, but the conformance data is what models are checked against. */
static uint8_t f4_from_double(double d) {
    if (isnan(d))
        return 0x8;
    if (isinf(d))
        return d < 0 ? 0xF : 0x7;
    return (uint8_t)narrow_from_finite_double(&fmt_e2m1, d, 1);
}

uint8_t tm_f32_to_f4e2m1(float f) {
    return f4_from_double((double)f);
}

/* ---- float8e8m0 ----------------------------------------------------------------------- */

float tm_e8m0_to_f32(uint8_t v) {
    if (v == 0xFF)
        return NAN;
    if (v == 0)
        return bits_f32(0x00400000); /* 2^-127, an f32 subnormal */
    return bits_f32((uint32_t)v << 23);
}

/* Rounding modes of Cast-25's round_mode attribute, for tm_f32_to_e8m0_mode. */
enum { TM_E8M0_ROUND_UP = 0, TM_E8M0_ROUND_DOWN = 1, TM_E8M0_ROUND_NEAREST = 2 };

uint8_t tm_f32_to_e8m0_mode(float f, int saturate, int round_mode);

/* Follows onnx.numpy_helper.to_float8e8m0 for normal f32 input: the sign is ignored
 * (negative input is unspecified), the f32 exponent field is the code and the mantissa
 * only decides rounding. Where that helper reads f32 bits too literally we follow the Cast
 * table instead: +-Inf saturates to E8M0_MAX, f32 subnormals are rounded by value (so
 * 2^-127, code 0, comes back exactly), and without saturate 0 and values below E8M0_MIN
 * that do not round up to it are NaN. */
uint8_t tm_f32_to_e8m0_mode(float f, int saturate, int round_mode) {
    uint32_t u = f32_bits(f);
    uint32_t exp = (u >> 23) & 0xFF;
    uint32_t mant = u & 0x7FFFFF;
    if (exp == 0xFF)
        return (mant == 0 && saturate) ? 0xFE : 0xFF;
    if (exp == 0) { /* value mant * 2^-149; code 0 (2^-127) is mant 0x400000 */
        if (mant == 0)
            return saturate ? 0x00 : 0xFF;
        if (round_mode == TM_E8M0_ROUND_UP)
            return mant > 0x400000;
        if (mant < 0x400000 && !saturate)
            return 0xFF;
        if (round_mode == TM_E8M0_ROUND_DOWN)
            return 0;
        return mant >= 0x600000; /* the midpoint of 2^-127 and 2^-126; ties go up */
    }
    int up = 0;
    if (round_mode == TM_E8M0_ROUND_NEAREST)
        up = mant >= 0x400000; /* 1.5 * 2^e is the midpoint; ties go up */
    else if (round_mode == TM_E8M0_ROUND_UP)
        up = mant != 0;
    if (up && exp == 0xFE && saturate)
        up = 0;
    return (uint8_t)(exp + (uint32_t)up);
}

uint8_t tm_f32_to_e8m0(float f, int saturate) {
    return tm_f32_to_e8m0_mode(f, saturate, TM_E8M0_ROUND_UP);
}

/* ---- Loads ------------------------------------------------------------------------------ */

/* Sub-byte values sit in the low bits; sign-extend from there so a byte that holds the
 * raw nibble (0xF) and one that holds the widened value (0xFF) both read as -1. */
static int64_t sext(uint8_t b, int bits) {
    int shift = 8 - bits;
    return (int8_t)(uint8_t)(b << shift) >> shift;
}

double tm_load_f64(const void *base, tm_dtype dt, size_t i) {
    const uint8_t *p = base;
    switch (dt) {
    case TM_FLOAT: { float v; memcpy(&v, p + i * 4, 4); return v; }
    case TM_DOUBLE: { double v; memcpy(&v, p + i * 8, 8); return v; }
    case TM_FLOAT16: { uint16_t v; memcpy(&v, p + i * 2, 2); return tm_f16_to_f32(v); }
    case TM_BFLOAT16: { uint16_t v; memcpy(&v, p + i * 2, 2); return tm_bf16_to_f32(v); }
    case TM_FLOAT8E4M3FN: case TM_FLOAT8E4M3FNUZ: case TM_FLOAT8E5M2: case TM_FLOAT8E5M2FNUZ:
        return tm_f8_to_f32(p[i], dt);
    case TM_FLOAT8E8M0: return tm_e8m0_to_f32(p[i]);
    case TM_FLOAT4E2M1: return tm_f4e2m1_to_f32(p[i]);
    case TM_INT8: case TM_INT16: case TM_INT32: case TM_INT64: case TM_INT4: case TM_INT2:
        return (double)tm_load_i64(base, dt, i);
    case TM_UINT8: case TM_UINT16: case TM_UINT32: case TM_UINT64: case TM_UINT4:
    case TM_UINT2: case TM_BOOL:
        return (double)tm_load_u64(base, dt, i);
    default:
        return 0.0;
    }
}

/* double -> int64 as C would do it, made total: NaN is 0, and values outside int64 wrap
 * modulo 2^64 (infinities count as 0) instead of being undefined behaviour. */
static uint64_t wrap_double(double d) {
    if (!isfinite(d))
        return 0;
    d = trunc(d);
    if (d >= -9223372036854775808.0 && d < 9223372036854775808.0)
        return (uint64_t)(int64_t)d;
    d = fmod(d, 18446744073709551616.0);
    if (d < 0)
        d += 18446744073709551616.0;
    if (d >= 9223372036854775808.0)
        return (uint64_t)(d - 9223372036854775808.0) + (UINT64_C(1) << 63);
    return (uint64_t)d;
}

int64_t tm_load_i64(const void *base, tm_dtype dt, size_t i) {
    const uint8_t *p = base;
    switch (dt) {
    case TM_INT8: return (int8_t)p[i];
    case TM_INT16: { int16_t v; memcpy(&v, p + i * 2, 2); return v; }
    case TM_INT32: { int32_t v; memcpy(&v, p + i * 4, 4); return v; }
    case TM_INT64: { int64_t v; memcpy(&v, p + i * 8, 8); return v; }
    case TM_INT4: return sext(p[i], 4);
    case TM_INT2: return sext(p[i], 2);
    case TM_UINT8: case TM_UINT16: case TM_UINT32: case TM_UINT64: case TM_UINT4:
    case TM_UINT2: case TM_BOOL:
        return (int64_t)tm_load_u64(base, dt, i);
    default:
        if (tm_dtype_is_float(dt))
            return (int64_t)wrap_double(tm_load_f64(base, dt, i));
        return 0;
    }
}

uint64_t tm_load_u64(const void *base, tm_dtype dt, size_t i) {
    const uint8_t *p = base;
    switch (dt) {
    case TM_UINT8: return p[i];
    case TM_UINT16: { uint16_t v; memcpy(&v, p + i * 2, 2); return v; }
    case TM_UINT32: { uint32_t v; memcpy(&v, p + i * 4, 4); return v; }
    case TM_UINT64: { uint64_t v; memcpy(&v, p + i * 8, 8); return v; }
    case TM_UINT4: return p[i] & 0xF;
    case TM_UINT2: return p[i] & 0x3;
    case TM_BOOL: return p[i] != 0;
    case TM_INT8: case TM_INT16: case TM_INT32: case TM_INT64: case TM_INT4: case TM_INT2:
        return (uint64_t)tm_load_i64(base, dt, i);
    default:
        if (tm_dtype_is_float(dt))
            return wrap_double(tm_load_f64(base, dt, i));
        return 0;
    }
}

/* ---- Stores ----------------------------------------------------------------------------- */

/* Writes the low bits of v, as a C cast to the narrow width does (two's complement). */
static void store_int_bits(uint8_t *p, tm_dtype dt, size_t i, uint64_t v) {
    switch (dt) {
    case TM_INT8: case TM_UINT8: p[i] = (uint8_t)v; break;
    case TM_INT16: case TM_UINT16: { uint16_t w = (uint16_t)v; memcpy(p + i * 2, &w, 2); break; }
    case TM_INT32: case TM_UINT32: { uint32_t w = (uint32_t)v; memcpy(p + i * 4, &w, 4); break; }
    case TM_INT64: case TM_UINT64: memcpy(p + i * 8, &v, 8); break;
    case TM_INT4: p[i] = (uint8_t)sext((uint8_t)(v & 0xF), 4); break;
    case TM_INT2: p[i] = (uint8_t)sext((uint8_t)(v & 0x3), 2); break;
    case TM_UINT4: p[i] = (uint8_t)(v & 0xF); break;
    case TM_UINT2: p[i] = (uint8_t)(v & 0x3); break;
    case TM_BOOL: p[i] = v != 0; break;
    default: break;
    }
}

void tm_store_f64(void *base, tm_dtype dt, size_t i, double v) {
    uint8_t *p = base;
    switch (dt) {
    case TM_FLOAT: { float f = (float)v; memcpy(p + i * 4, &f, 4); return; }
    case TM_DOUBLE: memcpy(p + i * 8, &v, 8); return;
    case TM_FLOAT16: { uint16_t h = f16_from_double(v); memcpy(p + i * 2, &h, 2); return; }
    case TM_BFLOAT16: { uint16_t h = bf16_from_double(v); memcpy(p + i * 2, &h, 2); return; }
    case TM_FLOAT8E4M3FN: case TM_FLOAT8E4M3FNUZ: case TM_FLOAT8E5M2: case TM_FLOAT8E5M2FNUZ:
        p[i] = f8_from_double(v, dt, 1);
        return;
    /* Cast to e8m0 is defined on float32 (the reference converts to f32 first). */
    case TM_FLOAT8E8M0: p[i] = tm_f32_to_e8m0((float)v, 1); return;
    case TM_FLOAT4E2M1: p[i] = f4_from_double(v); return;
    case TM_BOOL: p[i] = v != 0; return; /* NaN is true, as ONNX Cast says */
    default:
        store_int_bits(p, dt, i, wrap_double(v));
        return;
    }
}

void tm_store_i64(void *base, tm_dtype dt, size_t i, int64_t v) {
    uint8_t *p = base;
    switch (dt) {
    case TM_FLOAT: { float f = (float)v; memcpy(p + i * 4, &f, 4); return; }
    case TM_DOUBLE: { double d = (double)v; memcpy(p + i * 8, &d, 8); return; }
    case TM_FLOAT16: {
        uint16_t h = (uint16_t)narrow_from_i64(&fmt_f16, v, 0);
        memcpy(p + i * 2, &h, 2);
        return;
    }
    case TM_BFLOAT16: {
        uint16_t h = (uint16_t)narrow_from_i64(&fmt_bf16, v, 0);
        memcpy(p + i * 2, &h, 2);
        return;
    }
    case TM_FLOAT8E4M3FN: case TM_FLOAT8E4M3FNUZ: case TM_FLOAT8E5M2: case TM_FLOAT8E5M2FNUZ:
        p[i] = (uint8_t)narrow_from_i64(f8_format(dt), v, 1);
        return;
    case TM_FLOAT8E8M0: p[i] = tm_f32_to_e8m0((float)v, 1); return;
    case TM_FLOAT4E2M1: p[i] = (uint8_t)narrow_from_i64(&fmt_e2m1, v, 1); return;
    default:
        store_int_bits(p, dt, i, (uint64_t)v);
        return;
    }
}

void tm_store_u64(void *base, tm_dtype dt, size_t i, uint64_t v) {
    uint8_t *p = base;
    switch (dt) {
    case TM_FLOAT: { float f = (float)v; memcpy(p + i * 4, &f, 4); return; }
    case TM_DOUBLE: { double d = (double)v; memcpy(p + i * 8, &d, 8); return; }
    case TM_FLOAT16: {
        uint16_t h = (uint16_t)narrow_round(&fmt_f16, 0, v, 0, 0);
        memcpy(p + i * 2, &h, 2);
        return;
    }
    case TM_BFLOAT16: {
        uint16_t h = (uint16_t)narrow_round(&fmt_bf16, 0, v, 0, 0);
        memcpy(p + i * 2, &h, 2);
        return;
    }
    case TM_FLOAT8E4M3FN: case TM_FLOAT8E4M3FNUZ: case TM_FLOAT8E5M2: case TM_FLOAT8E5M2FNUZ:
        p[i] = (uint8_t)narrow_round(f8_format(dt), 0, v, 0, 1);
        return;
    case TM_FLOAT8E8M0: p[i] = tm_f32_to_e8m0((float)v, 1); return;
    case TM_FLOAT4E2M1: p[i] = (uint8_t)narrow_round(&fmt_e2m1, 0, v, 0, 1); return;
    default:
        store_int_bits(p, dt, i, v);
        return;
    }
}

/* ---- Sub-byte packing ------------------------------------------------------------------ */

void tm_unpack_subbyte(const uint8_t *packed, uint8_t *out, size_t n, tm_dtype dt) {
    int bits = tm_dtype_bits(dt);
    if (bits == 8) {
        memcpy(out, packed, n);
        return;
    }
    if (bits != 4 && bits != 2)
        return;
    int per_byte = 8 / bits;
    uint8_t mask = (uint8_t)((1u << bits) - 1);
    int is_signed = tm_dtype_is_signed_int(dt);
    for (size_t i = 0; i < n; i++) {
        uint8_t v = (uint8_t)((packed[i / per_byte] >> ((i % per_byte) * bits)) & mask);
        out[i] = is_signed ? (uint8_t)sext(v, bits) : v;
    }
}

void tm_pack_subbyte(const uint8_t *in, uint8_t *packed, size_t n, tm_dtype dt) {
    int bits = tm_dtype_bits(dt);
    if (bits == 8) {
        memcpy(packed, in, n);
        return;
    }
    if (bits != 4 && bits != 2)
        return;
    int per_byte = 8 / bits;
    uint8_t mask = (uint8_t)((1u << bits) - 1);
    memset(packed, 0, (n + (size_t)per_byte - 1) / (size_t)per_byte);
    for (size_t i = 0; i < n; i++)
        packed[i / per_byte] |= (uint8_t)((in[i] & mask) << ((i % per_byte) * bits));
}
