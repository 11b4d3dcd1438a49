/* Depthwise 2-D convolution of one channel plane (CONV_PACKED's depthwise kind): the input
 * rows a block of output rows needs are copied once into a zero-padded buffer, each row
 * split into its column-stride phases, so that every kernel tap is one run along memory;
 * a row kernel (AVX-512, AVX2 or portable C, picked at run time) then sums the taps. Not
 * the epilogue (bias, chain, residual: the caller's, per block of rows). */
#ifndef TM_BACKENDS_CPU_DWCONV_H
#define TM_BACKENDS_CPU_DWCONV_H

#include <stddef.h>
#include <stdint.h>

/* Output (oy, ox) sums w[ky, kx] * x[oy sy + ky dy - py, ox sx + kx dx - px] over the taps,
 * x zero outside its ih x iw plane (so pads of any sign: a negative one crops). */
typedef struct tm_dwconv_geom {
    int64_t ih, iw, oh, ow;
    int64_t kh, kw, sy, sx, dy, dx, py, px;
} tm_dwconv_geom;

/* The row kernel, over `rows` output rows of n values (row r at out + r n, reading from
 * base + r rstride): out[ox] = the sum over taps t (in order) of w[t] * base[off[t] + ox],
 * each step one fused multiply-add from 0 (so every kernel gives the same bits). */
typedef void (*tm_dwconv_rows_fn)(const float *base, int64_t rstride, int64_t rows,
                                  const int64_t *off, const float *w, int64_t taps, float *out,
                                  int64_t n);

typedef struct tm_dwconv_kernel {
    const char *name;   /* "avx512", "avx2" or "c" */
    tm_dwconv_rows_fn rows;
} tm_dwconv_kernel;

/* The best kernel this CPU runs now; TM_KERNEL_ISA=avx2 or =scalar forces a lesser one
 * (read at each call: tests switch it). */
tm_dwconv_kernel tm_dwconv_pick(void);

/* 1 when the geometry is one tm_dwconv_plane takes: positive sizes, strides and dilations. */
int tm_dwconv_ok(const tm_dwconv_geom *g);

/* Floats of work space tm_dwconv_plane needs (one caller's: threads need one each). */
size_t tm_dwconv_work_floats(const tm_dwconv_geom *g);

/* Called after each block of output rows [row0, row0 + rows) is written. */
typedef void (*tm_dwconv_done_fn)(void *arg, int64_t row0, int64_t rows);

/* y (oh x ow) = the sums of x (ih x iw) with the taps w (kh x kw), no bias; done (may be
 * NULL) after each block of rows. work: tm_dwconv_work_floats floats, any alignment. */
void tm_dwconv_plane(tm_dwconv_kernel k, const tm_dwconv_geom *g, const float *x,
                     const float *w, float *y, float *work, tm_dwconv_done_fn done, void *arg);

/* The ISA row kernels (NULL when not compiled in or the CPU lacks them). */
tm_dwconv_rows_fn tm__dwconv_rows_avx512(void);
tm_dwconv_rows_fn tm__dwconv_rows_avx2(void);

#endif
