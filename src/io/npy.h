/* NumPy .npy files, format versions 1.0, 2.0 and 3.0: read into a tm_tensor, write one out.
 * Not .npz archives, pickled object arrays or structured dtypes: those are rejected.
 *
 * Reading maps numpy dtypes to ours ('<f4' float32, '|b1' bool, '<U..' and '|S..' string,
 * '<c8'/'<c16' complex, ...); big-endian data is swapped and Fortran-ordered data is
 * transposed to C order. A malformed file is a TM_ERR_PARSE that names the file and the
 * fault; nothing is read past the end of the data and nothing leaks.
 *
 * Writing uses version 1.0, C order, little-endian. Types numpy lacks are written as their
 * storage: bfloat16 as '<u2' bits, the float8s and float4e2m1 as '|u1' bits, int4/int2 as
 * '|i1' and uint4/uint2 as '|u1', one element per byte. So they read back as those types. */
#ifndef TM_IO_NPY_H
#define TM_IO_NPY_H

#include <stddef.h>
#include "../../include/transmuter.h"

tm_status tm_npy_read(const char *path, tm_tensor **out, tm_error *err);
/* As tm_npy_read, from a whole .npy file held in memory (copied; data need not outlive). */
tm_status tm_npy_read_buffer(const void *data, size_t size, tm_tensor **out, tm_error *err);
/* Writes t to path (replaced). On failure no partial file is left behind. */
tm_status tm_npy_write(const char *path, const tm_tensor *t, tm_error *err);

#endif
