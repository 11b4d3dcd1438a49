/* The tensor: dtype, dims and a contiguous row-major buffer, owned or borrowed.
 * The public handle `tm_tensor` of transmuter.h is this struct. Not a value of a
 * graph under trace: see ctx.h for those. */
#ifndef TM_CORE_TENSOR_H
#define TM_CORE_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include "dtype.h"

#define TM_MAX_RANK 8

struct tm_tensor {
    tm_dtype dtype;
    int rank;
    int64_t dims[TM_MAX_RANK];
    void *data;        /* numel * elem_size bytes; for strings an array of char * */
    size_t nbytes;
    int owns_data;     /* free data (and each string) with the tensor */
    const tm_allocator *allocator; /* used for owned data; NULL means malloc */
};

int64_t tm_numel(int rank, const int64_t *dims);  /* 1 for rank 0; -1 on overflow */
int64_t tm_tensor_numel_(const tm_tensor *t);

/* New owned tensor, data zero-filled. NULL on overflow or out of memory. */
tm_tensor *tm_tensor_alloc(tm_dtype dt, int rank, const int64_t *dims, const tm_allocator *a);
/* Borrowed view of someone else's buffer. */
tm_tensor *tm_tensor_borrow(tm_dtype dt, int rank, const int64_t *dims, void *data);
/* Deep copy (strings duplicated). */
tm_tensor *tm_tensor_clone(const tm_tensor *t, const tm_allocator *a);
int tm_same_shape(const tm_tensor *a, const tm_tensor *b);

/* Allocation through an optional injected allocator. */
void *tm__alloc(const tm_allocator *a, size_t size);
void tm__free(const tm_allocator *a, void *p);

#endif
