/* Element types: the ONNX TensorProto numbering, sizes, names, and scalar conversions
 * (f16, bf16, the float8 and float4 formats) used by reference kernels.
 * Sub-byte types (int4, uint4, int2, uint2, float4e2m1) are held one element per byte
 * inside the runtime; they are packed only in files (see ../onnx/model.c, ../io/npy.c). */
#ifndef TM_CORE_DTYPE_H
#define TM_CORE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include "../../include/transmuter.h"

/* Bytes per element as held in memory (sub-byte types: 1; string: sizeof(char *)). */
size_t tm_dtype_elem_size(tm_dtype dt);
int tm_dtype_is_float(tm_dtype dt);     /* f16, bf16, f32, f64, float8s, float4 */
int tm_dtype_is_signed_int(tm_dtype dt);
int tm_dtype_is_unsigned_int(tm_dtype dt); /* includes bool */
int tm_dtype_is_valid(int dt);          /* a known ONNX element type other than UNDEFINED */
int tm_dtype_bits(tm_dtype dt);         /* bits per element in files: 4 for int4, 2 for int2 */

/* Scalar conversions. The float8 encoders saturate or not as ONNX Cast's `saturate` says. */
float tm_f16_to_f32(uint16_t h);
uint16_t tm_f32_to_f16(float f);
float tm_bf16_to_f32(uint16_t h);
uint16_t tm_f32_to_bf16(float f);        /* round to nearest even */
float tm_f8_to_f32(uint8_t v, tm_dtype dt);
uint8_t tm_f32_to_f8(float f, tm_dtype dt, int saturate);
float tm_f4e2m1_to_f32(uint8_t v);
uint8_t tm_f32_to_f4e2m1(float f);
float tm_e8m0_to_f32(uint8_t v);
uint8_t tm_f32_to_e8m0(float f, int saturate);
/* Cast's round_mode for e8m0: 0 up (the default), 1 down, 2 nearest. */
uint8_t tm_f32_to_e8m0_mode(float f, int saturate, int round_mode);

/* Element i of a buffer of dtype dt, read or written through a wide type. Floats go
 * through double, signed ints through int64, unsigned ints and bool through uint64.
 * Stores convert as C casts do (ints wrap, floats round to nearest even). */
double tm_load_f64(const void *base, tm_dtype dt, size_t i);
int64_t tm_load_i64(const void *base, tm_dtype dt, size_t i);
uint64_t tm_load_u64(const void *base, tm_dtype dt, size_t i);
void tm_store_f64(void *base, tm_dtype dt, size_t i, double v);
void tm_store_i64(void *base, tm_dtype dt, size_t i, int64_t v);
void tm_store_u64(void *base, tm_dtype dt, size_t i, uint64_t v);

/* Sub-byte packing as in ONNX files: element 0 in the low bits of byte 0. */
void tm_unpack_subbyte(const uint8_t *packed, uint8_t *out, size_t n, tm_dtype dt);
void tm_pack_subbyte(const uint8_t *in, uint8_t *packed, size_t n, tm_dtype dt);

#endif
