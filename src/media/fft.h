/* A discrete Fourier transform of any length in doubles, for the audio feature extractors'
 * frames (400 and 512 points): mixed radix (Cooley-Tukey on the length's prime factors),
 * twiddles from cos/sin of exact angles. Not a fast library: no SIMD, no planning by timing. */
#ifndef TM_MEDIA_FFT_H
#define TM_MEDIA_FFT_H

#include <stddef.h>
#include "../../include/transmuter.h"

typedef struct tm__fft tm__fft;

/* A transform of length n (>= 1). */
tm_status tm__fft_create(size_t n, tm__fft **out, tm_error *err);
void tm__fft_free(tm__fft *f);
/* The DFT of n real values x: out gets bins 0..n/2 as (re, im) pairs, 2 * (n/2 + 1)
 * doubles, X[k] = sum_j x[j] exp(-2 pi i j k / n). Not thread-safe on one tm__fft
 * (it keeps its scratch). */
void tm__fft_real(tm__fft *f, const double *x, double *out);

#endif
