/* The AVX-512 epilogue of the 8-bit GEMM's tiles (qgemm_avx512.c, qgemm_amx.c): one
 * vector of 16 int32 dot products of row r, columns 16t..16t+15, with the zero-point terms
 * taken off, stored as int32 or as f32 acc * scale (+ bias). Included only by files
 * compiled with AVX-512 F/BW/VL. */
#ifndef TM_BACKENDS_CPU_QGEMM_EPILOGUE_AVX512_H
#define TM_BACKENDS_CPU_QGEMM_EPILOGUE_AVX512_H

#include <immintrin.h>
#include "qgemm.h"

static inline __mmask16 tm__qgemm_lanes(int count) {
    return count >= 16 ? (__mmask16)0xffff : count <= 0 ? 0 : (__mmask16)((1u << count) - 1);
}

static inline void tm__qgemm_epilogue16(__m512i acc, int r, int t, int nr, const tm__qgemm_epilogue *e) {
    __mmask16 m = tm__qgemm_lanes(nr - 16 * t);
    if (e->rowsum) {
        __m512i zb = _mm512_loadu_si512(e->zb + 16 * t);
        acc = _mm512_sub_epi32(acc, _mm512_mullo_epi32(zb, _mm512_set1_epi32(e->rowsum[r])));
    }
    if (e->za[r]) {
        __m512i ct = _mm512_loadu_si512(e->colterm + 16 * t);
        acc = _mm512_sub_epi32(acc, _mm512_mullo_epi32(ct, _mm512_set1_epi32(e->za[r])));
    }
    if (e->c_int) {
        _mm512_mask_storeu_epi32(e->c_int + r * e->ldc + 16 * t, m, acc);
        return;
    }
    __m512 s = e->scale_per_col ? _mm512_maskz_loadu_ps(m, e->scale + 16 * t)
                                : _mm512_set1_ps(e->scale[0]);
    __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(acc), s);
    if (e->bias)
        y = _mm512_add_ps(y, e->bias_per_col ? _mm512_maskz_loadu_ps(m, e->bias + 16 * t)
                                             : _mm512_set1_ps(e->bias[0]));
    _mm512_mask_storeu_ps(e->c_float + r * e->ldc + 16 * t, m, y);
}

#endif
