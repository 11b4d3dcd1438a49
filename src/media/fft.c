/* Mixed-radix DFT (decimation in time on the smallest prime factor first, a generic
 * butterfly per factor) of a real frame. Written here because FFTW, Debian's FFT library,
 * is GPL, and the frames are short: 400 = 2^4 5^2 and 512 = 2^9 points cost about 18
 * complex multiply-adds per output, less than the mel projection that follows. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "fft.h"
#include "../core/status.h"

struct tm__fft {
    size_t n;
    double *w;                   /* (n, 2): exp(-2 pi i k / n) */
    double *buf, *tmp;           /* (n, 2) each: the complex input, the result */
    double *acc;                 /* (largest factor, 2): one butterfly's outputs */
};

static size_t smallest_factor(size_t n) {
    for (size_t p = 2; p * p <= n; p++)
        if (n % p == 0) return p;
    return n;
}

tm_status tm__fft_create(size_t n, tm__fft **out, tm_error *err) {
    if (n < 1 || n > ((size_t)1 << 26)) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "FFT length %zu", n);
    tm__fft *f = calloc(1, sizeof *f);
    size_t pmax = 1;
    for (size_t m = n; m > 1; m /= smallest_factor(m))
        if (smallest_factor(m) > pmax) pmax = smallest_factor(m);
    if (f) {
        f->n = n;
        f->w = malloc(2 * n * sizeof *f->w);
        f->buf = malloc(2 * n * sizeof *f->buf);
        f->tmp = malloc(2 * n * sizeof *f->tmp);
        f->acc = malloc(2 * pmax * sizeof *f->acc);
    }
    if (!f || !f->w || !f->buf || !f->tmp || !f->acc) {
        tm__fft_free(f);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory for an FFT of %zu points", n);
    }
    for (size_t k = 0; k < n; k++) {
        double a = -2 * M_PI * (double)k / (double)n;
        f->w[2 * k] = cos(a);
        f->w[2 * k + 1] = sin(a);
    }
    *out = f;
    return TM_OK;
}

void tm__fft_free(tm__fft *f) {
    if (!f) return;
    free(f->w);
    free(f->buf);
    free(f->tmp);
    free(f->acc);
    free(f);
}

/* out (m, 2) = DFT of the m values in[0], in[stride], ... (complex); step = N / m indexes
 * the length-N twiddle table. */
static void dft(const tm__fft *f, const double *in, size_t stride, double *out, size_t m, size_t step) {
    if (m == 1) {
        out[0] = in[0], out[1] = in[1];
        return;
    }
    size_t p = smallest_factor(m), q_len = m / p, N = f->n;
    for (size_t q = 0; q < p; q++) dft(f, in + 2 * q * stride, stride * p, out + 2 * q * q_len, q_len, step * p);
    double *acc = f->acc;
    for (size_t k = 0; k < q_len; k++) {
        /* X[k + r q_len] = sum_q W_m^(q (k + r q_len)) Y_q[k] */
        for (size_t r = 0; r < p; r++) {
            double re = 0, im = 0;
            for (size_t q = 0; q < p; q++) {
                size_t e = (size_t)(((uint64_t)q * (k + r * q_len) % m) * step % N);
                const double *y = out + 2 * (q * q_len + k), *w = f->w + 2 * e;
                re += y[0] * w[0] - y[1] * w[1];
                im += y[0] * w[1] + y[1] * w[0];
            }
            acc[2 * r] = re, acc[2 * r + 1] = im;
        }
        for (size_t r = 0; r < p; r++) {
            out[2 * (k + r * q_len)] = acc[2 * r];
            out[2 * (k + r * q_len) + 1] = acc[2 * r + 1];
        }
    }
}

void tm__fft_real(tm__fft *f, const double *x, double *out) {
    for (size_t j = 0; j < f->n; j++) f->buf[2 * j] = x[j], f->buf[2 * j + 1] = 0;
    dft(f, f->buf, 1, f->tmp, f->n, 1);
    memcpy(out, f->tmp, 2 * (f->n / 2 + 1) * sizeof *out);
}
