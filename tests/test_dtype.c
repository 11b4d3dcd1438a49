/* Tests of src/core/dtype.c: names and sizes, every f16/bf16/float8/float4/e8m0 code through
 * f32 and back, rounding (ties to even) against an independent nearest-value search, the
 * ONNX Cast saturate tables and conformance vectors, loads/stores and sub-byte packing.
 * Not tensors or files (test_npy.c). */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "../src/core/dtype.h"

#include "check.h"

static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static uint64_t f64_bits(double d) { uint64_t u; memcpy(&u, &d, 8); return u; }

/* ---- An independent model of a narrow float format ------------------------------------ */

/* Values come from the textbook formula, rounding from a search for the nearest code: no
 * bit tricks shared with dtype.c. */
typedef struct format {
    const char *name;
    tm_dtype dt;            /* TM_UNDEFINED for f16/bf16 */
    int mant_bits, bias, sign_shift;
    unsigned max_code;      /* largest finite magnitude */
    int has_inf, unsigned_zero;
} format;

static const format formats[] = {
    { "float16", TM_FLOAT16, 10, 15, 15, 0x7BFF, 1, 0 },
    { "bfloat16", TM_BFLOAT16, 7, 127, 15, 0x7F7F, 1, 0 },
    { "e4m3fn", TM_FLOAT8E4M3FN, 3, 7, 7, 0x7E, 0, 0 },
    { "e4m3fnuz", TM_FLOAT8E4M3FNUZ, 3, 8, 7, 0x7F, 0, 1 },
    { "e5m2", TM_FLOAT8E5M2, 2, 15, 7, 0x7B, 1, 0 },
    { "e5m2fnuz", TM_FLOAT8E5M2FNUZ, 2, 16, 7, 0x7F, 0, 1 },
    { "e2m1", TM_FLOAT4E2M1, 1, 1, 3, 0x7, 0, 0 },
};

/* Magnitude of a code, reading max_code + 1 as the next value of an unbounded exponent. */
static double model_value(const format *f, unsigned mag) {
    unsigned e = mag >> f->mant_bits, m = mag & ((1u << f->mant_bits) - 1);
    if (e == 0)
        return ldexp(m, 1 - f->bias - f->mant_bits);
    return ldexp((double)((1u << f->mant_bits) + m), (int)e - f->bias - f->mant_bits);
}

/* Nearest code to |x| (finite), ties to the even code; max_code + 1 means "overflow". */
static unsigned model_round(const format *f, double x) {
    x = fabs(x);
    unsigned lo = 0, hi = f->max_code + 1;
    if (x >= model_value(f, hi))
        return hi;
    while (hi - lo > 1) { /* invariant: value(lo) <= x < value(hi) */
        unsigned mid = (lo + hi) / 2;
        if (model_value(f, mid) <= x)
            lo = mid;
        else
            hi = mid;
    }
    double dlo = x - model_value(f, lo), dhi = model_value(f, hi) - x;
    if (dlo < dhi)
        return lo;
    if (dhi < dlo)
        return hi;
    return (lo & 1) ? hi : lo;
}

/* What the runtime must return for x, following the ONNX Cast tables. */
static unsigned model_encode(const format *f, double x, int saturate) {
    unsigned sign = signbit(x) ? 1u << f->sign_shift : 0;
    if (f->dt == TM_FLOAT4E2M1) {
        if (isnan(x))
            return 0x8;
        saturate = 1;
    }
    if (isnan(x))
        return ~0u; /* any NaN: checked separately */
    unsigned mag = isinf(x) ? f->max_code + 1 : model_round(f, x);
    if (mag > f->max_code) {
        if (saturate && (f->dt != TM_FLOAT16 && f->dt != TM_BFLOAT16))
            return sign | f->max_code;
        if (f->has_inf)
            return sign | (f->max_code + 1); /* the infinity code follows max in all three */
        return f->unsigned_zero ? 0x80 : sign | 0x7F;
    }
    if (mag == 0 && f->unsigned_zero)
        return 0;
    return sign | mag;
}

static unsigned encode(const format *f, float x, int saturate) {
    switch (f->dt) {
    case TM_FLOAT16: return tm_f32_to_f16(x);
    case TM_BFLOAT16: return tm_f32_to_bf16(x);
    case TM_FLOAT4E2M1: return tm_f32_to_f4e2m1(x);
    default: return tm_f32_to_f8(x, f->dt, saturate);
    }
}

static float decode(const format *f, unsigned code) {
    switch (f->dt) {
    case TM_FLOAT16: return tm_f16_to_f32((uint16_t)code);
    case TM_BFLOAT16: return tm_bf16_to_f32((uint16_t)code);
    case TM_FLOAT4E2M1: return tm_f4e2m1_to_f32((uint8_t)code);
    default: return tm_f8_to_f32((uint8_t)code, f->dt);
    }
}

static int is_nan_code(const format *f, unsigned code) {
    unsigned mag = code & ((1u << f->sign_shift) - 1);
    unsigned exp_all = ((1u << f->sign_shift) - 1) & ~((1u << f->mant_bits) - 1);
    switch (f->dt) {
    case TM_FLOAT4E2M1: return 0;
    case TM_FLOAT8E4M3FN: return mag == 0x7F;
    case TM_FLOAT8E4M3FNUZ: case TM_FLOAT8E5M2FNUZ: return code == 0x80;
    default: return (mag & exp_all) == exp_all && (mag & ~exp_all) != 0;
    }
}

static int is_inf_code(const format *f, unsigned code) {
    return f->has_inf && (code & ((1u << f->sign_shift) - 1)) == f->max_code + 1;
}

/* Every code decodes to the formula's value and encodes back to itself. */
static void test_all_codes(const format *f) {
    unsigned n_codes = 1u << (f->sign_shift + 1);
    int bad_value = 0, bad_trip = 0;
    for (unsigned code = 0; code < n_codes; code++) {
        float v = decode(f, code);
        int negative = (code >> f->sign_shift) & 1;
        if (is_nan_code(f, code)) {
            if (!isnan(v) && bad_value++ < 5)
                printf("  %s code 0x%x should decode to NaN, got %g\n", f->name, code, v);
        } else if (is_inf_code(f, code)) {
            if (!(isinf(v) && (v < 0) == negative) && bad_value++ < 5)
                printf("  %s code 0x%x should decode to %sInf\n", f->name, code,
                       negative ? "-" : "+");
        } else {
            double want = model_value(f, code & ((1u << f->sign_shift) - 1));
            if (negative)
                want = -want;
            if (((double)v != want || (signbit(v) != 0) != negative) && bad_value++ < 5)
                printf("  %s code 0x%x decodes to %g, want %g\n", f->name, code, v, want);
        }
        for (int saturate = 0; saturate <= 1; saturate++) {
            unsigned back = encode(f, v, saturate);
            unsigned want = code;
            if (is_inf_code(f, code) && saturate && f->dt != TM_FLOAT16 && f->dt != TM_BFLOAT16)
                want = (code & (1u << f->sign_shift)) | f->max_code; /* Cast: Inf -> max */
            if (back != want && bad_trip++ < 5)
                printf("  %s code 0x%x -> %g -> 0x%x (saturate=%d)\n", f->name, code, v, back,
                       saturate);
        }
    }
    CHECK(bad_value == 0, "%s: %d codes decode wrongly", f->name, bad_value);
    CHECK(bad_trip == 0, "%s: %d codes do not survive a trip through f32", f->name, bad_trip);
}

static int check_encode(const format *f, float x, int saturate, int *shown) {
    unsigned got = encode(f, x, saturate);
    unsigned want = model_encode(f, x, saturate);
    int ok = want == ~0u ? is_nan_code(f, got) : got == want;
    if (!ok && (*shown)++ < 8)
        printf("  %s(%.9g = 0x%08x, saturate=%d) = 0x%x, want 0x%x\n", f->name, x,
               f32_bits(x), saturate, got, want);
    return ok;
}

/* Midpoints between neighbouring codes (the ties) and the floats either side of them, and
 * a sweep over f32 bit patterns, all against the model. */
static void test_rounding(const format *f) {
    int shown = 0, bad = 0, total = 0;
    for (unsigned mag = 0; mag <= f->max_code; mag++) {
        double mid = (model_value(f, mag) + model_value(f, mag + 1)) / 2;
        float m = (float)mid;
        if ((double)m != mid)
            continue; /* bf16's top midpoints are exact; only the model's virtual one may not be */
        float probes[] = { m, nextafterf(m, 0), nextafterf(m, INFINITY), (float)model_value(f, mag) };
        for (int s = 0; s <= 1; s++)
            for (size_t k = 0; k < sizeof probes / sizeof probes[0]; k++) {
                bad += !check_encode(f, probes[k], s, &shown);
                bad += !check_encode(f, -probes[k], s, &shown);
                total += 2;
            }
    }
    for (uint64_t u = 0; u <= 0xFFFFFFFFu; u += 65521) { /* a prime stride hits all exponents */
        float x = bits_f32((uint32_t)u);
        for (int s = 0; s <= 1; s++) {
            bad += !check_encode(f, x, s, &shown);
            total++;
        }
    }
    float specials[] = { 0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, FLT_MAX, -FLT_MAX,
                         FLT_MIN, -FLT_MIN, bits_f32(1), bits_f32(0x80000001) };
    for (size_t k = 0; k < sizeof specials / sizeof specials[0]; k++)
        for (int s = 0; s <= 1; s++) {
            bad += !check_encode(f, specials[k], s, &shown);
            total++;
        }
    CHECK(bad == 0, "%s: %d of %d rounding probes differ from the model", f->name, bad, total);
}

/* ---- float16 specifics ------------------------------------------------------------------ */

static void test_f16(void) {
    int bad = 0;
    for (unsigned h = 0; h < 65536; h++) {
        float f = tm_f16_to_f32((uint16_t)h);
        if (tm_f32_to_f16(f) != h && bad++ < 5)
            printf("  f16 0x%04x -> %g -> 0x%04x\n", h, f, tm_f32_to_f16(f));
    }
    CHECK(bad == 0, "all 65536 f16 values survive f32, NaN payloads included (%d bad)", bad);
    CHECK(tm_f16_to_f32(0x3C00) == 1.0f, "f16 1.0");
    CHECK(tm_f16_to_f32(0x0001) == ldexpf(1, -24), "f16 smallest subnormal");
    CHECK(tm_f16_to_f32(0x03FF) == ldexpf(1023, -24), "f16 largest subnormal");
    CHECK(tm_f16_to_f32(0x0400) == ldexpf(1, -14), "f16 smallest normal");
    CHECK(tm_f16_to_f32(0x7BFF) == 65504.0f, "f16 max");
    CHECK(isinf(tm_f16_to_f32(0xFC00)) && tm_f16_to_f32(0xFC00) < 0, "f16 -inf");
    CHECK(isnan(tm_f16_to_f32(0x7E00)), "f16 NaN");
    CHECK(f32_bits(tm_f16_to_f32(0x8000)) == 0x80000000u, "f16 -0");
    /* ties go to the even mantissa, in normals, subnormals and at the overflow edge */
    CHECK(tm_f32_to_f16(1.0f + ldexpf(1, -11)) == 0x3C00, "1 + half ulp rounds down to even");
    CHECK(tm_f32_to_f16(1.0f + 3 * ldexpf(1, -11)) == 0x3C02, "1 + 1.5 ulp rounds up to even");
    CHECK(tm_f32_to_f16(1.0f + ldexpf(1, -11) + ldexpf(1, -20)) == 0x3C01, "just above tie");
    CHECK(tm_f32_to_f16(ldexpf(1, -25)) == 0x0000, "half the smallest subnormal -> 0");
    CHECK(tm_f32_to_f16(ldexpf(1, -25) * 1.0001f) == 0x0001, "just above -> smallest");
    CHECK(tm_f32_to_f16(3 * ldexpf(1, -25)) == 0x0002, "1.5 subnormal steps -> 2 (even)");
    CHECK(tm_f32_to_f16(-ldexpf(1, -26)) == 0x8000, "tiny negative -> -0");
    CHECK(tm_f32_to_f16(ldexpf(1023.5f, -24)) == 0x0400, "subnormal rounds up into normal");
    CHECK(tm_f32_to_f16(65519.0f) == 0x7BFF, "65519 -> max");
    CHECK(tm_f32_to_f16(65520.0f) == 0x7C00, "65520 (tie with 2^16) -> inf");
    CHECK(tm_f32_to_f16(-1e10f) == 0xFC00, "overflow -> -inf");
    CHECK(tm_f32_to_f16(NAN) == 0x7E00, "quiet NaN -> 0x7E00");
    CHECK((tm_f32_to_f16(bits_f32(0x7F800001)) & 0x7C00) == 0x7C00 &&
          (tm_f32_to_f16(bits_f32(0x7F800001)) & 0x3FF) != 0, "payload below f16 stays NaN");
}

static void test_bf16(void) {
    int bad = 0;
    for (unsigned h = 0; h < 65536; h++) {
        float f = tm_bf16_to_f32((uint16_t)h);
        if (f32_bits(f) != h << 16 || tm_f32_to_bf16(f) != h)
            if (bad++ < 5)
                printf("  bf16 0x%04x -> %g -> 0x%04x\n", h, f, tm_f32_to_bf16(f));
    }
    CHECK(bad == 0, "all 65536 bf16 values survive f32 (%d bad)", bad);
    CHECK(tm_f32_to_bf16(bits_f32(0x3F808000)) == 0x3F80, "bf16 tie rounds down to even");
    CHECK(tm_f32_to_bf16(bits_f32(0x3F818000)) == 0x3F82, "bf16 tie rounds up to even");
    CHECK(tm_f32_to_bf16(bits_f32(0x3F808001)) == 0x3F81, "bf16 above tie");
    CHECK(tm_f32_to_bf16(bits_f32(0x3F807FFF)) == 0x3F80, "bf16 below tie");
    CHECK(tm_f32_to_bf16(FLT_MAX) == 0x7F80, "FLT_MAX rounds to bf16 inf");
    CHECK(tm_f32_to_bf16(bits_f32(0x7F7F7FFF)) == 0x7F7F, "just below bf16 max tie");
    CHECK(tm_f32_to_bf16(bits_f32(0x00008000)) == 0x0000, "subnormal tie to even zero");
    CHECK(tm_f32_to_bf16(bits_f32(0x80018000)) == 0x8002, "negative subnormal tie to even");
    CHECK(tm_f32_to_bf16(bits_f32(0x7F800001)) != 0x7F80 &&
          isnan(tm_bf16_to_f32(tm_f32_to_bf16(bits_f32(0x7F800001)))), "low NaN payload");
    CHECK(tm_f32_to_bf16(-INFINITY) == 0xFF80, "bf16 -inf");
}

/* ---- ONNX backend conformance vectors (onnx v1.22.0 test_cast_FLOAT_to_*) -------------- */

static const uint32_t f8_inputs[15] = {
    0x3ef535b8, 0x3ef5eeb0, 0x3effd6b2, 0x3f51b0e5, 0x3ef0cccc, 0x3f391039, 0x49742400,
    0x33d6bf95, 0x7fc00000, 0x7f800000, 0x7f800000, 0xff800000, 0xb3d6bf95, 0x33d6bf95,
    0xc9742400,
};

static const struct {
    tm_dtype dt;
    int saturate;
    uint8_t out[15];
} f8_vectors[] = {
    { TM_FLOAT8E4M3FN, 1, { 0x2f, 0x2f, 0x30, 0x35, 0x2f, 0x34, 0x7e, 0x00, 0x7f, 0x7e, 0x7e,
                            0xfe, 0x80, 0x00, 0xfe } },
    { TM_FLOAT8E4M3FNUZ, 1, { 0x37, 0x37, 0x38, 0x3d, 0x37, 0x3c, 0x7f, 0x00, 0x80, 0x7f, 0x7f,
                              0xff, 0x00, 0x00, 0xff } },
    { TM_FLOAT8E5M2, 1, { 0x38, 0x38, 0x38, 0x3b, 0x38, 0x3a, 0x7b, 0x00, 0x7e, 0x7b, 0x7b, 0xfb,
                          0x80, 0x00, 0xfb } },
    { TM_FLOAT8E5M2FNUZ, 1, { 0x3c, 0x3c, 0x3c, 0x3f, 0x3c, 0x3e, 0x7f, 0x00, 0x80, 0x7f, 0x7f,
                              0xff, 0x00, 0x00, 0xff } },
    { TM_FLOAT8E4M3FN, 0, { 0x2f, 0x2f, 0x30, 0x35, 0x2f, 0x34, 0x7f, 0x00, 0x7f, 0x7f, 0x7f,
                            0xff, 0x80, 0x00, 0xff } },
    { TM_FLOAT8E4M3FNUZ, 0, { 0x37, 0x37, 0x38, 0x3d, 0x37, 0x3c, 0x80, 0x00, 0x80, 0x80, 0x80,
                              0x80, 0x00, 0x00, 0x80 } },
    { TM_FLOAT8E5M2, 0, { 0x38, 0x38, 0x38, 0x3b, 0x38, 0x3a, 0x7c, 0x00, 0x7e, 0x7c, 0x7c, 0xfc,
                          0x80, 0x00, 0xfc } },
    { TM_FLOAT8E5M2FNUZ, 0, { 0x3c, 0x3c, 0x3c, 0x3f, 0x3c, 0x3e, 0x80, 0x00, 0x80, 0x80, 0x80,
                              0x80, 0x00, 0x00, 0x80 } },
};

static void test_conformance_vectors(void) {
    for (size_t v = 0; v < sizeof f8_vectors / sizeof f8_vectors[0]; v++) {
        int bad = 0;
        for (int i = 0; i < 15; i++) {
            uint8_t got = tm_f32_to_f8(bits_f32(f8_inputs[i]), f8_vectors[v].dt,
                                       f8_vectors[v].saturate);
            if (got != f8_vectors[v].out[i] && bad++ < 3)
                printf("  %s sat=%d in 0x%08x: 0x%02x want 0x%02x\n",
                       tm_dtype_name(f8_vectors[v].dt), f8_vectors[v].saturate, f8_inputs[i],
                       got, f8_vectors[v].out[i]);
        }
        CHECK(bad == 0, "Cast FLOAT->%s saturate=%d conformance vector",
              tm_dtype_name(f8_vectors[v].dt), f8_vectors[v].saturate);
    }

    static const uint32_t f4_in[15] = { 0x3ef5c28f, 0x3e800000, 0x3f866666, 0xc0600000,
                                        0xc1000000, 0x41100000, 0x49742400, 0x33d6bf95,
                                        0x7fc00000, 0x7f800000, 0x7f800000, 0xff800000,
                                        0xc0800000, 0x3c23d70a, 0x80000000 };
    static const uint8_t f4_out[15] = { 0x1, 0x0, 0x2, 0xe, 0xf, 0x7, 0x7, 0x0, 0x8, 0x7, 0x7,
                                        0xf, 0xe, 0x0, 0x8 };
    int bad = 0;
    for (int i = 0; i < 15; i++)
        bad += tm_f32_to_f4e2m1(bits_f32(f4_in[i])) != f4_out[i];
    CHECK(bad == 0, "Cast FLOAT->FLOAT4E2M1 conformance vector (%d bad)", bad);

    static const uint32_t e8_in[8] = { 0x0, 0x3dfdf3b6, 0x3e800000, 0x3f000000, 0x3f8ccccd,
                                       0x40000000, 0x40800000, 0x41000000 };
    static const uint8_t e8_out[8] = { 0x00, 0x7c, 0x7d, 0x7e, 0x80, 0x80, 0x81, 0x82 };
    bad = 0;
    for (int i = 0; i < 8; i++)
        bad += tm_f32_to_e8m0(bits_f32(e8_in[i]), 1) != e8_out[i];
    CHECK(bad == 0, "Cast FLOAT->FLOAT8E8M0 conformance vector (%d bad)", bad);

    static const uint32_t bf_in[12] = { 0x3ef535b8, 0x3ef5eeb0, 0x3effd6b2, 0x3f51b0e5,
                                        0x3ef0cccc, 0x3f51040c, 0x3e57eed1, 0x3f391039,
                                        0x7fc00000, 0x7f800000, 0x7f800000, 0xff800000 };
    static const uint16_t bf_out[12] = { 0x3ef5, 0x3ef6, 0x3f00, 0x3f52, 0x3ef1, 0x3f51,
                                         0x3e58, 0x3f39, 0x7fc0, 0x7f80, 0x7f80, 0xff80 };
    bad = 0;
    for (int i = 0; i < 12; i++)
        bad += tm_f32_to_bf16(bits_f32(bf_in[i])) != bf_out[i];
    CHECK(bad == 0, "Cast FLOAT->BFLOAT16 conformance vector (%d bad)", bad);

    static const uint64_t d_in[12] = {
        0x3fdea6b700000000, 0x3fdebdd600000000, 0x3fdffad640000000, 0x3fea361ca0000000,
        0x3fde199980000000, 0x3fea208180000000, 0x3fcafdda20000000, 0x3fe7220720000000,
        0x7ff8000000000000, 0x7ff0000000000000, 0x7ff0000000000000, 0xfff0000000000000 };
    static const uint16_t d_out[12] = { 0x37aa, 0x37af, 0x37ff, 0x3a8e, 0x3786, 0x3a88, 0x32bf,
                                        0x39c9, 0x7e00, 0x7c00, 0x7c00, 0xfc00 };
    bad = 0;
    for (int i = 0; i < 12; i++) {
        double d;
        uint16_t h;
        memcpy(&d, &d_in[i], 8);
        tm_store_f64(&h, TM_FLOAT16, 0, d);
        bad += h != d_out[i];
    }
    CHECK(bad == 0, "Cast DOUBLE->FLOAT16 conformance vector (%d bad)", bad);
}

/* ---- The saturate tables of Cast, row by row -------------------------------------------- */

static void test_saturation(void) {
    const tm_dtype f8[4] = { TM_FLOAT8E4M3FN, TM_FLOAT8E4M3FNUZ, TM_FLOAT8E5M2,
                             TM_FLOAT8E5M2FNUZ };
    const uint8_t max_code[4] = { 0x7E, 0x7F, 0x7B, 0x7F };
    const float max_value[4] = { 448.0f, 240.0f, 57344.0f, 57344.0f };
    for (int k = 0; k < 4; k++) {
        tm_dtype dt = f8[k];
        const char *n = tm_dtype_name(dt);
        int uz = dt == TM_FLOAT8E4M3FNUZ || dt == TM_FLOAT8E5M2FNUZ;
        CHECK(tm_f8_to_f32(max_code[k], dt) == max_value[k], "%s max value", n);
        /* saturate = 1 */
        CHECK(tm_f32_to_f8(0.0f, dt, 1) == 0, "%s 0", n);
        CHECK(tm_f32_to_f8(-0.0f, dt, 1) == (uz ? 0x00 : 0x80), "%s -0", n);
        CHECK(isnan(tm_f8_to_f32(tm_f32_to_f8(NAN, dt, 1), dt)), "%s NaN", n);
        CHECK(tm_f32_to_f8(INFINITY, dt, 1) == max_code[k], "%s Inf -> max", n);
        CHECK(tm_f32_to_f8(-INFINITY, dt, 1) == (0x80 | max_code[k]), "%s -Inf -> -max", n);
        CHECK(tm_f32_to_f8(1e30f, dt, 1) == max_code[k], "%s big -> max", n);
        CHECK(tm_f32_to_f8(-1e30f, dt, 1) == (0x80 | max_code[k]), "%s -big -> -max", n);
        /* saturate = 0 */
        uint8_t pos_over = dt == TM_FLOAT8E4M3FN ? 0x7F : dt == TM_FLOAT8E5M2 ? 0x7C : 0x80;
        uint8_t neg_over = dt == TM_FLOAT8E4M3FN ? 0xFF : dt == TM_FLOAT8E5M2 ? 0xFC : 0x80;
        CHECK(tm_f32_to_f8(-0.0f, dt, 0) == (uz ? 0x00 : 0x80), "%s -0 (no saturate)", n);
        CHECK(tm_f32_to_f8(INFINITY, dt, 0) == pos_over, "%s Inf (no saturate)", n);
        CHECK(tm_f32_to_f8(-INFINITY, dt, 0) == neg_over, "%s -Inf (no saturate)", n);
        CHECK(tm_f32_to_f8(1e30f, dt, 0) == pos_over, "%s big (no saturate)", n);
        CHECK(tm_f32_to_f8(-1e30f, dt, 0) == neg_over, "%s -big (no saturate)", n);
        CHECK(tm_f32_to_f8(max_value[k], dt, 0) == max_code[k], "%s max stays (no saturate)", n);
        CHECK(tm_f32_to_f8(-NAN, dt, 0) == (uz ? 0x80 : dt == TM_FLOAT8E5M2 ? 0xFE : 0xFF),
              "%s -NaN (no saturate)", n);
    }
    /* [x] > FLT_MAX is judged after rounding: values that round down to max are not over */
    CHECK(tm_f32_to_f8(464.0f, TM_FLOAT8E4M3FN, 0) == 0x7E, "e4m3fn 464 ties down to 448");
    CHECK(tm_f32_to_f8(465.0f, TM_FLOAT8E4M3FN, 0) == 0x7F, "e4m3fn 465 -> NaN");
    CHECK(tm_f32_to_f8(465.0f, TM_FLOAT8E4M3FN, 1) == 0x7E, "e4m3fn 465 -> 448");
    CHECK(tm_f32_to_f8(247.0f, TM_FLOAT8E4M3FNUZ, 0) == 0x7F, "e4m3fnuz 247 -> 240");
    CHECK(tm_f32_to_f8(248.0f, TM_FLOAT8E4M3FNUZ, 0) == 0x80, "e4m3fnuz 248 ties up -> NaN");
    CHECK(tm_f32_to_f8(61439.0f, TM_FLOAT8E5M2, 0) == 0x7B, "e5m2 61439 -> max");
    CHECK(tm_f32_to_f8(61440.0f, TM_FLOAT8E5M2, 0) == 0x7C, "e5m2 61440 ties up -> Inf");
    CHECK(tm_f32_to_f8(61440.0f, TM_FLOAT8E5M2FNUZ, 0) == 0x80, "e5m2fnuz 61440 -> NaN");
    CHECK(tm_f32_to_f8(-1e-30f, TM_FLOAT8E4M3FNUZ, 1) == 0x00, "fnuz tiny negative -> +0");
    CHECK(tm_f32_to_f8(-1e-30f, TM_FLOAT8E5M2, 1) == 0x80, "e5m2 tiny negative -> -0");
    /* subnormals */
    CHECK(tm_f8_to_f32(0x01, TM_FLOAT8E4M3FN) == ldexpf(1, -9), "e4m3fn min subnormal");
    CHECK(tm_f8_to_f32(0x01, TM_FLOAT8E4M3FNUZ) == ldexpf(1, -10), "e4m3fnuz min subnormal");
    CHECK(tm_f8_to_f32(0x01, TM_FLOAT8E5M2) == ldexpf(1, -16), "e5m2 min subnormal");
    CHECK(tm_f8_to_f32(0x01, TM_FLOAT8E5M2FNUZ) == ldexpf(1, -17), "e5m2fnuz min subnormal");
    CHECK(tm_f32_to_f8(ldexpf(1, -10), TM_FLOAT8E4M3FN, 1) == 0x00, "half min subnormal -> 0");
    CHECK(tm_f32_to_f8(ldexpf(3, -10), TM_FLOAT8E4M3FN, 1) == 0x02, "1.5 min subnormal -> 2");
}

/* ---- float4e2m1 and e8m0 -------------------------------------------------------------- */

static void test_f4(void) {
    static const float values[8] = { 0, 0.5f, 1, 1.5f, 2, 3, 4, 6 };
    int bad = 0;
    for (unsigned c = 0; c < 16; c++) {
        float want = (c & 8) ? -values[c & 7] : values[c & 7];
        float got = tm_f4e2m1_to_f32((uint8_t)c);
        bad += got != want || (signbit(got) != 0) != ((c & 8) != 0);
        bad += tm_f32_to_f4e2m1(got) != c;
    }
    CHECK(bad == 0, "all 16 float4e2m1 codes decode and round-trip (%d bad)", bad);
    static const struct { float x; uint8_t code; } cases[] = {
        { 0.25f, 0x0 }, { 0.26f, 0x1 }, { 0.75f, 0x2 }, { 1.25f, 0x2 }, { 1.75f, 0x4 },
        { 2.5f, 0x4 }, { 3.5f, 0x6 }, { 5.0f, 0x6 }, { 5.01f, 0x7 }, { 7.0f, 0x7 },
        { 1e30f, 0x7 }, { -1e30f, 0xF }, { -5.0f, 0xE }, { -0.25f, 0x8 }, { -0.0f, 0x8 },
        { INFINITY, 0x7 }, { -INFINITY, 0xF }, { NAN, 0x8 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(tm_f32_to_f4e2m1(cases[i].x) == cases[i].code, "f4e2m1(%g) = 0x%x, want 0x%x",
              cases[i].x, tm_f32_to_f4e2m1(cases[i].x), cases[i].code);
    CHECK(tm_f4e2m1_to_f32(0xF7) == 6.0f, "f4 decode ignores the high nibble");
}

uint8_t tm_f32_to_e8m0_mode(float f, int saturate, int round_mode); /* dtype.c */

static void test_e8m0(void) {
    int bad = 0;
    for (unsigned c = 0; c < 256; c++) {
        float v = tm_e8m0_to_f32((uint8_t)c);
        if (c == 255) {
            bad += !isnan(v);
            continue;
        }
        bad += (double)v != ldexp(1.0, (int)c - 127);
        for (int s = 0; s <= 1; s++)
            for (int mode = 0; mode < 3; mode++)
                if (tm_f32_to_e8m0_mode(v, s, mode) != c && bad++ < 5)
                    printf("  e8m0 code %u -> %g -> %u (sat %d mode %d)\n", c, v,
                           tm_f32_to_e8m0_mode(v, s, mode), s, mode);
    }
    CHECK(bad == 0, "all 256 e8m0 codes decode and round-trip in every mode (%d bad)", bad);
    CHECK(isnan(tm_e8m0_to_f32(tm_f32_to_e8m0(NAN, 1))), "e8m0 NaN");
    CHECK(tm_f32_to_e8m0(INFINITY, 1) == 0xFE, "e8m0 Inf saturates to max");
    CHECK(tm_f32_to_e8m0(INFINITY, 0) == 0xFF, "e8m0 Inf without saturate is NaN");
    CHECK(tm_f32_to_e8m0(FLT_MAX, 1) == 0xFE, "e8m0 FLT_MAX saturates");
    CHECK(tm_f32_to_e8m0(FLT_MAX, 0) == 0xFF, "e8m0 FLT_MAX rounds up past max -> NaN");
    CHECK(tm_f32_to_e8m0(0.0f, 1) == 0x00, "e8m0 0 saturates to min");
    CHECK(tm_f32_to_e8m0(1e-45f, 1) == 0x00, "e8m0 below min -> min");
    CHECK(tm_f32_to_e8m0(3.0f, 1) == 0x81, "e8m0 rounds up by default");
    CHECK(tm_f32_to_e8m0_mode(3.0f, 1, 1) == 0x80, "e8m0 down");
    CHECK(tm_f32_to_e8m0_mode(3.0f, 1, 2) == 0x81, "e8m0 nearest ties up");
    CHECK(tm_f32_to_e8m0_mode(2.9f, 1, 2) == 0x80, "e8m0 nearest below tie");
    CHECK(tm_f32_to_e8m0_mode(0.0f, 0, 2) == 0xFF, "e8m0 0 without saturate is NaN");
    CHECK(tm_f32_to_e8m0_mode(1e-45f, 0, 2) == 0xFF, "e8m0 below min without saturate");
}

/* ---- Names, sizes, classes -------------------------------------------------------------- */

static void test_names(void) {
    static const char *const names[] = {
        "undefined", "float32", "uint8", "int8", "uint16", "int16", "int32", "int64",
        "string", "bool", "float16", "float64", "uint32", "uint64", "complex64", "complex128",
        "bfloat16", "float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "uint4",
        "int4", "float4e2m1", "float8e8m0", "uint2", "int2",
    };
    static const size_t sizes[] = { 0, 4, 1, 1, 2, 2, 4, 8, sizeof(char *), 1, 2, 8, 4, 8, 8,
                                    16, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1 };
    static const int bits[] = { 0, 32, 8, 8, 16, 16, 32, 64, 0, 8, 16, 64, 32, 64, 64, 128, 16,
                                8, 8, 8, 8, 4, 4, 4, 8, 2, 2 };
    int bad = 0;
    for (int dt = 0; dt <= 26; dt++) {
        bad += strcmp(tm_dtype_name((tm_dtype)dt), names[dt]) != 0;
        bad += tm_dtype_elem_size((tm_dtype)dt) != sizes[dt];
        bad += tm_dtype_bits((tm_dtype)dt) != bits[dt];
        bad += tm_dtype_is_valid(dt) != (dt != 0);
    }
    CHECK(bad == 0, "names, sizes and bits of all 27 dtypes (%d bad)", bad);
    CHECK(!strcmp(tm_dtype_name((tm_dtype)27), "undefined"), "27 is undefined");
    CHECK(!strcmp(tm_dtype_name((tm_dtype)-1), "undefined"), "-1 is undefined");
    CHECK(!tm_dtype_is_valid(27) && !tm_dtype_is_valid(-3), "out of range invalid");
    CHECK(tm_dtype_elem_size((tm_dtype)99) == 0, "unknown size 0");

    int n_float = 0, n_signed = 0, n_unsigned = 0, overlap = 0;
    for (int dt = 0; dt <= 26; dt++) {
        int f = tm_dtype_is_float((tm_dtype)dt), s = tm_dtype_is_signed_int((tm_dtype)dt);
        int u = tm_dtype_is_unsigned_int((tm_dtype)dt);
        n_float += f;
        n_signed += s;
        n_unsigned += u;
        overlap += f + s + u > 1;
    }
    CHECK(n_float == 10 && n_signed == 6 && n_unsigned == 7 && !overlap,
          "classes: %d float, %d signed, %d unsigned, %d overlapping", n_float, n_signed,
          n_unsigned, overlap);
    CHECK(tm_dtype_is_float(TM_FLOAT8E8M0) && tm_dtype_is_float(TM_FLOAT4E2M1), "e8m0/f4 float");
    CHECK(tm_dtype_is_unsigned_int(TM_BOOL), "bool counts as unsigned");
    CHECK(!tm_dtype_is_float(TM_COMPLEX64) && !tm_dtype_is_float(TM_STRING), "complex/string");
}

/* ---- Loads and stores -------------------------------------------------------------------- */

static void test_int_stores(void) {
    uint8_t buf[32];
    struct { tm_dtype dt; int64_t in; int64_t out; } wraps[] = {
        { TM_INT8, 200, -56 }, { TM_INT8, -129, 127 }, { TM_UINT8, -1, 255 },
        { TM_INT16, 40000, 40000 - 65536 }, { TM_UINT16, 65537, 1 },
        { TM_INT32, INT64_C(0x1FFFFFFFF), -1 }, { TM_UINT32, -1, 0xFFFFFFFF },
        { TM_INT64, INT64_MIN, INT64_MIN }, { TM_INT4, 7, 7 }, { TM_INT4, 8, -8 },
        { TM_INT4, 9, -7 }, { TM_INT4, -9, 7 }, { TM_INT4, 15, -1 }, { TM_UINT4, -1, 15 },
        { TM_UINT4, 17, 1 }, { TM_INT2, 2, -2 }, { TM_INT2, 3, -1 }, { TM_INT2, -3, 1 },
        { TM_UINT2, 5, 1 }, { TM_UINT2, -1, 3 }, { TM_BOOL, 2, 1 }, { TM_BOOL, -1, 1 },
        { TM_BOOL, 256, 1 }, { TM_BOOL, 0, 0 },
    };
    for (size_t k = 0; k < sizeof wraps / sizeof wraps[0]; k++) {
        memset(buf, 0xAA, sizeof buf);
        tm_store_i64(buf, wraps[k].dt, 1, wraps[k].in);
        int64_t got = tm_load_i64(buf, wraps[k].dt, 1);
        CHECK(got == wraps[k].out, "store_i64(%s, %lld) reads %lld, want %lld",
              tm_dtype_name(wraps[k].dt), (long long)wraps[k].in, (long long)got,
              (long long)wraps[k].out);
        size_t es = tm_dtype_elem_size(wraps[k].dt);
        CHECK(buf[0] == 0xAA && buf[2 * es] == 0xAA, "store_i64(%s) stays in its element",
              tm_dtype_name(wraps[k].dt));
    }
    /* sub-byte memory holds the value sign-extended (int4/int2) or in the low bits */
    tm_store_i64(buf, TM_INT4, 0, -3);
    CHECK(buf[0] == 0xFD, "int4 -3 is stored as the int8 -3");
    tm_store_i64(buf, TM_UINT4, 0, 0x1F);
    CHECK(buf[0] == 0x0F, "uint4 low bits");
    buf[0] = 0x0F;
    CHECK(tm_load_i64(buf, TM_INT4, 0) == -1, "an unextended nibble still reads as -1");
    buf[0] = 0xF3;
    CHECK(tm_load_u64(buf, TM_UINT4, 0) == 3, "uint4 reads only the low bits");
    buf[0] = 7;
    CHECK(tm_load_u64(buf, TM_BOOL, 0) == 1 && tm_load_f64(buf, TM_BOOL, 0) == 1.0,
          "bool reads nonzero as 1");

    tm_store_u64(buf, TM_UINT64, 0, UINT64_MAX);
    CHECK(tm_load_u64(buf, TM_UINT64, 0) == UINT64_MAX, "uint64 max");
    CHECK(tm_load_i64(buf, TM_UINT64, 0) == -1, "uint64 max read as int64 wraps");
    CHECK(tm_load_f64(buf, TM_UINT64, 0) == 18446744073709551616.0, "uint64 max as double");
    tm_store_i64(buf, TM_INT64, 0, -5);
    CHECK(tm_load_u64(buf, TM_INT64, 0) == (uint64_t)-5, "int64 read as uint64 wraps");
    tm_store_u64(buf, TM_INT8, 0, 0x181);
    CHECK(tm_load_i64(buf, TM_INT8, 0) == -127, "store_u64 wraps into int8");
}

static void test_float_stores(void) {
    uint8_t buf[16];
    struct { tm_dtype dt; double in; int64_t out; } conv[] = {
        { TM_INT32, 3.7, 3 }, { TM_INT32, -3.7, -3 }, { TM_INT8, 300.5, 44 },
        { TM_INT8, -0.9, 0 }, { TM_INT32, NAN, 0 }, { TM_INT64, 1e20, INT64_C(7766279631452241920) },
        { TM_INT64, -9223372036854775808.0, INT64_MIN }, { TM_UINT8, -1.0, 255 },
        { TM_INT4, 9.0, -7 }, { TM_UINT2, 6.0, 2 }, { TM_BOOL, NAN, 1 }, { TM_BOOL, -0.0, 0 },
        { TM_BOOL, 0.25, 1 }, { TM_INT32, INFINITY, 0 },
    };
    for (size_t k = 0; k < sizeof conv / sizeof conv[0]; k++) {
        tm_store_f64(buf, conv[k].dt, 0, conv[k].in);
        int64_t got = tm_load_i64(buf, conv[k].dt, 0);
        CHECK(got == conv[k].out, "store_f64(%s, %g) reads %lld, want %lld",
              tm_dtype_name(conv[k].dt), conv[k].in, (long long)got, (long long)conv[k].out);
    }
    tm_store_f64(buf, TM_UINT64, 0, 1.8e19);
    CHECK(tm_load_u64(buf, TM_UINT64, 0) == UINT64_C(18000000000000000000), "big uint64");

    /* stores round once, from the wide value, never through f32 first */
    uint16_t h;
    tm_store_f64(&h, TM_FLOAT16, 0, 1.0 + ldexp(1, -11) + ldexp(1, -40));
    CHECK(h == 0x3C01, "double just above an f16 tie rounds up (0x%04x)", h);
    tm_store_f64(&h, TM_BFLOAT16, 0, 1.0 + ldexp(1, -8) + ldexp(1, -40));
    CHECK(h == 0x3F81, "double just above a bf16 tie rounds up (0x%04x)", h);
    tm_store_i64(&h, TM_BFLOAT16, 0, (INT64_C(1) << 60) + (INT64_C(1) << 52) + 1);
    CHECK(h == 0x5D81, "int64 just above a bf16 tie rounds up (0x%04x)", h);
    tm_store_i64(&h, TM_BFLOAT16, 0, (INT64_C(1) << 60) + (INT64_C(1) << 52));
    CHECK(h == 0x5D80, "int64 bf16 tie rounds to even (0x%04x)", h);
    tm_store_u64(&h, TM_FLOAT16, 0, UINT64_MAX);
    CHECK(h == 0x7C00, "uint64 max -> f16 inf");
    tm_store_i64(&h, TM_FLOAT16, 0, -65520);
    CHECK(h == 0xFC00, "-65520 -> f16 -inf");
    tm_store_i64(&h, TM_FLOAT16, 0, 2049);
    CHECK(h == 0x6800, "2049 ties to 2048 in f16 (0x%04x)", h);
    tm_store_i64(buf, TM_FLOAT8E4M3FN, 0, 1000);
    CHECK(buf[0] == 0x7E, "int 1000 -> e4m3fn saturates");
    tm_store_i64(buf, TM_FLOAT8E5M2, 0, -3);
    CHECK(tm_load_f64(buf, TM_FLOAT8E5M2, 0) == -3.0, "int -3 -> e5m2");
    tm_store_u64(buf, TM_FLOAT4E2M1, 0, 5);
    CHECK(buf[0] == 0x6, "uint 5 -> f4 ties to 4");
    tm_store_i64(buf, TM_FLOAT8E8M0, 0, 5);
    CHECK(buf[0] == 0x82, "int 5 -> e8m0 rounds up to 8");
    tm_store_f64(buf, TM_FLOAT8E4M3FNUZ, 0, 1e9);
    CHECK(buf[0] == 0x7F, "f64 store to float8 saturates");
    tm_store_i64(buf, TM_INT64, 0, INT64_C(9007199254740993));
    CHECK(tm_load_f64(buf, TM_INT64, 0) == 9007199254740992.0, "int64 -> double rounds");

    /* every float dtype through load/store */
    const tm_dtype floats[] = { TM_FLOAT, TM_DOUBLE, TM_FLOAT16, TM_BFLOAT16, TM_FLOAT8E4M3FN,
                                TM_FLOAT8E4M3FNUZ, TM_FLOAT8E5M2, TM_FLOAT8E5M2FNUZ,
                                TM_FLOAT4E2M1, TM_FLOAT8E8M0 };
    for (size_t k = 0; k < sizeof floats / sizeof floats[0]; k++) {
        memset(buf, 0, sizeof buf);
        tm_store_f64(buf, floats[k], 1, 1.5);
        double want = floats[k] == TM_FLOAT8E8M0 ? 2.0 : 1.5;
        CHECK(tm_load_f64(buf, floats[k], 1) == want, "%s stores 1.5", tm_dtype_name(floats[k]));
        CHECK(tm_load_i64(buf, floats[k], 1) == (int64_t)want, "%s loads as int",
              tm_dtype_name(floats[k]));
        tm_store_i64(buf, floats[k], 0, -2);
        if (floats[k] != TM_FLOAT8E8M0)
            CHECK(tm_load_f64(buf, floats[k], 0) == -2.0, "%s stores -2",
                  tm_dtype_name(floats[k]));
    }
    double big = 1e300;
    tm_store_f64(buf, TM_FLOAT, 0, big);
    CHECK(isinf(tm_load_f64(buf, TM_FLOAT, 0)), "1e300 -> f32 inf");
    /* complex and string are not element-convertible here: they read 0 and ignore stores */
    memset(buf, 0x11, sizeof buf);
    tm_store_f64(buf, TM_COMPLEX64, 0, 3.0);
    tm_store_i64(buf, TM_STRING, 0, 3);
    tm_store_u64(buf, TM_UNDEFINED, 0, 3);
    CHECK(buf[0] == 0x11 && buf[7] == 0x11, "complex/string stores do nothing");
    CHECK(tm_load_f64(buf, TM_COMPLEX64, 0) == 0 && tm_load_i64(buf, TM_STRING, 0) == 0 &&
          tm_load_u64(buf, TM_COMPLEX128, 0) == 0, "complex/string loads are 0");
    CHECK(f64_bits(tm_load_f64(buf, TM_UNDEFINED, 0)) == 0, "undefined loads are 0");
}

/* ---- Sub-byte packing -------------------------------------------------------------------- */

static void test_packing(void) {
    uint8_t in[9] = { 1, 2, 3, 4, 5, 6, 7, 8, 9 }, packed[8], out[9];
    memset(packed, 0xEE, sizeof packed);
    tm_pack_subbyte(in, packed, 9, TM_UINT4);
    CHECK(packed[0] == 0x21 && packed[1] == 0x43 && packed[3] == 0x87 && packed[4] == 0x09,
          "uint4 packs element 0 low, odd tail zero-padded (%02x %02x %02x)", packed[0],
          packed[1], packed[4]);
    CHECK(packed[5] == 0xEE, "uint4 packing writes only ceil(n/2) bytes");
    tm_unpack_subbyte(packed, out, 9, TM_UINT4);
    CHECK(!memcmp(in, out, 9), "uint4 unpack restores");

    int bad = 0;
    for (int pos = 0; pos < 2; pos++)
        for (int v = -8; v < 8; v++) {
            int8_t vals[2] = { 0, 0 };
            vals[pos] = (int8_t)v;
            uint8_t p, u[2];
            tm_pack_subbyte((uint8_t *)vals, &p, 2, TM_INT4);
            tm_unpack_subbyte(&p, u, 2, TM_INT4);
            bad += (int8_t)u[pos] != v || u[1 - pos] != 0;
            bad += p != (uint8_t)((v & 0xF) << (4 * pos));
        }
    CHECK(bad == 0, "int4: every value in both nibbles packs and sign-extends (%d bad)", bad);

    int8_t i2[6] = { -2, -1, 0, 1, 1, -2 };
    uint8_t p2[2] = { 0xFF, 0xFF }, u2[6];
    tm_pack_subbyte((uint8_t *)i2, p2, 6, TM_INT2);
    CHECK(p2[0] == (2 | 3 << 2 | 0 << 4 | 1 << 6) && p2[1] == (1 | 2 << 2),
          "int2 packs four per byte, low bits first (%02x %02x)", p2[0], p2[1]);
    tm_unpack_subbyte(p2, u2, 6, TM_INT2);
    CHECK(!memcmp(i2, u2, 6), "int2 unpack sign-extends");
    uint8_t q2[5] = { 0, 1, 2, 3, 3 }, pq[2], uq[5];
    tm_pack_subbyte(q2, pq, 5, TM_UINT2);
    tm_unpack_subbyte(pq, uq, 5, TM_UINT2);
    CHECK(pq[0] == 0xE4 && pq[1] == 0x03 && !memcmp(q2, uq, 5), "uint2 pack/unpack");
    uint8_t f4[3] = { 0x7, 0xF, 0x8 }, pf[2], uf[3];
    tm_pack_subbyte(f4, pf, 3, TM_FLOAT4E2M1);
    tm_unpack_subbyte(pf, uf, 3, TM_FLOAT4E2M1);
    CHECK(pf[0] == 0xF7 && pf[1] == 0x08 && !memcmp(f4, uf, 3), "float4e2m1 pack is unsigned");
    int8_t neg[2] = { -1, -8 };
    uint8_t pn;
    tm_pack_subbyte((uint8_t *)neg, &pn, 2, TM_INT4);
    CHECK(pn == 0x8F, "int4 pack keeps only the low nibble of sign-extended bytes");
    uint8_t raw[3] = { 9, 8, 7 }, cp[3];
    tm_pack_subbyte(raw, cp, 3, TM_UINT8);
    CHECK(!memcmp(raw, cp, 3), "8-bit types pack as a copy");
}

int main(void) {
    test_names();
    test_f16();
    test_bf16();
    for (size_t k = 0; k < sizeof formats / sizeof formats[0]; k++) {
        test_all_codes(&formats[k]);
        test_rounding(&formats[k]);
    }
    test_conformance_vectors();
    test_saturation();
    test_f4();
    test_e8m0();
    test_int_stores();
    test_float_stores();
    test_packing();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
