/* Tensors: creation (owned, zero-filled, or borrowed), cloning, freeing, and the tensor
 * accessors of the public API. Owned data goes through the injectable allocator.
 * Not shape arithmetic or element conversion (see dtype.c), nor graph values (ctx.c). */
#include <stdlib.h>
#include <string.h>
#include "status.h"
#include "tensor.h"

#define TM_ALIGN 64

void *tm__alloc(const tm_allocator *a, size_t size) {
    if (a && a->alloc)
        return a->alloc(a->user, size ? size : 1);
    /* C11 aligned_alloc wants a size that is a multiple of the alignment. */
    size_t rounded = size ? size : 1;
    if (rounded > SIZE_MAX - (TM_ALIGN - 1))
        return NULL;
    rounded = (rounded + TM_ALIGN - 1) / TM_ALIGN * TM_ALIGN;
    return aligned_alloc(TM_ALIGN, rounded);
}

void tm__free(const tm_allocator *a, void *p) {
    if (!p)
        return;
    if (a && a->alloc) {
        if (a->free)
            a->free(a->user, p);
        return;
    }
    free(p);
}

int64_t tm_numel(int rank, const int64_t *dims) {
    if (rank < 0 || rank > TM_MAX_RANK || (rank > 0 && !dims))
        return -1;
    int64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0 || __builtin_mul_overflow(n, dims[i], &n))
            return -1;
    }
    return n;
}

int64_t tm_tensor_numel_(const tm_tensor *t) {
    return t ? tm_numel(t->rank, t->dims) : 0;
}

/* Checks dtype and shape and computes the byte size; 0 when they are not acceptable. */
static int tensor_layout(tm_dtype dt, int rank, const int64_t *dims, size_t *nbytes) {
    if (!tm_dtype_is_valid((int)dt))
        return 0;
    int64_t n = tm_numel(rank, dims);
    if (n < 0 || (uint64_t)n > SIZE_MAX)
        return 0;
    return tm__mul_ok((size_t)n, tm_dtype_elem_size(dt), nbytes);
}

static tm_tensor *tensor_shell(tm_dtype dt, int rank, const int64_t *dims, size_t nbytes) {
    tm_tensor *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->dtype = dt;
    t->rank = rank;
    for (int i = 0; i < rank; i++)
        t->dims[i] = dims[i];
    t->nbytes = nbytes;
    return t;
}

/* Owned, uninitialised data (zero_fill: zeroed). */
static tm_tensor *tensor_alloc(tm_dtype dt, int rank, const int64_t *dims, const tm_allocator *a,
                               int zero_fill) {
    size_t nbytes;
    if (!tensor_layout(dt, rank, dims, &nbytes))
        return NULL;
    tm_tensor *t = tensor_shell(dt, rank, dims, nbytes);
    if (!t)
        return NULL;
    t->data = tm__alloc(a, nbytes);
    if (!t->data) {
        free(t);
        return NULL;
    }
    /* Zero bytes are also an array of NULL strings, which read as "". */
    if (zero_fill)
        memset(t->data, 0, nbytes);
    t->owns_data = 1;
    t->allocator = a;
    return t;
}

tm_tensor *tm_tensor_alloc(tm_dtype dt, int rank, const int64_t *dims, const tm_allocator *a) {
    return tensor_alloc(dt, rank, dims, a, 1);
}

tm_tensor *tm_tensor_borrow(tm_dtype dt, int rank, const int64_t *dims, void *data) {
    size_t nbytes;
    if (!tensor_layout(dt, rank, dims, &nbytes) || (!data && nbytes > 0))
        return NULL;
    tm_tensor *t = tensor_shell(dt, rank, dims, nbytes);
    if (!t)
        return NULL;
    t->data = data;
    return t;
}

static char *copy_string(const char *s) {
    size_t n = strlen(s) + 1;
    char *c = malloc(n);
    if (c)
        memcpy(c, s, n);
    return c;
}

tm_tensor *tm_tensor_clone(const tm_tensor *t, const tm_allocator *a) {
    if (!t)
        return NULL;
    /* Every byte is copied over below, so only strings need the zero fill (NULLs). */
    tm_tensor *c = tensor_alloc(t->dtype, t->rank, t->dims, a, t->dtype == TM_STRING);
    if (!c)
        return NULL;
    if (t->dtype != TM_STRING) {
        if (t->nbytes)
            memcpy(c->data, t->data, t->nbytes);
        return c;
    }
    char *const *src = t->data;
    char **dst = c->data;
    int64_t n = tm_tensor_numel_(t);
    for (int64_t i = 0; i < n; i++) {
        if (!src[i])
            continue;
        dst[i] = copy_string(src[i]);
        if (!dst[i]) {
            tm_tensor_free(c);
            return NULL;
        }
    }
    return c;
}

int tm_same_shape(const tm_tensor *a, const tm_tensor *b) {
    if (!a || !b || a->rank != b->rank)
        return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i])
            return 0;
    return 1;
}

/* ---- Public API --------------------------------------------------------------------- */

tm_tensor *tm_tensor_new(tm_dtype dtype, int rank, const int64_t *dims) {
    return tm_tensor_alloc(dtype, rank, dims, NULL);
}

tm_tensor *tm_tensor_wrap(tm_dtype dtype, int rank, const int64_t *dims, void *data) {
    /* A string tensor owns its strings; one over caller memory could not free them. */
    if (dtype == TM_STRING)
        return NULL;
    return tm_tensor_borrow(dtype, rank, dims, data);
}

void tm_tensor_free(tm_tensor *t) {
    if (!t)
        return;
    if (t->owns_data) {
        if (t->dtype == TM_STRING && t->data) {
            char **s = t->data;
            int64_t n = tm_tensor_numel_(t);
            for (int64_t i = 0; i < n; i++)
                free(s[i]);
        }
        tm__free(t->allocator, t->data);
    }
    free(t);
}

tm_dtype tm_tensor_dtype(const tm_tensor *t) {
    return t ? t->dtype : TM_UNDEFINED;
}

int tm_tensor_rank(const tm_tensor *t) {
    return t ? t->rank : -1;
}

const int64_t *tm_tensor_dims(const tm_tensor *t) {
    return t ? t->dims : NULL;
}

int64_t tm_tensor_numel(const tm_tensor *t) {
    return tm_tensor_numel_(t);
}

void *tm_tensor_data(tm_tensor *t) {
    return t ? t->data : NULL;
}

const void *tm_tensor_data_const(const tm_tensor *t) {
    return t ? t->data : NULL;
}

size_t tm_tensor_nbytes(const tm_tensor *t) {
    return t ? t->nbytes : 0;
}

tm_status tm_tensor_set_string(tm_tensor *t, int64_t i, const char *s) {
    if (!t || t->dtype != TM_STRING || !s)
        return TM_ERR_INVALID_ARGUMENT;
    /* Replacing a string of a borrowed array would leak the copy or free foreign memory. */
    if (!t->owns_data)
        return TM_ERR_INVALID_ARGUMENT;
    if (i < 0 || i >= tm_tensor_numel_(t))
        return TM_ERR_INVALID_ARGUMENT;
    char *copy = copy_string(s);
    if (!copy)
        return TM_ERR_NO_MEMORY;
    char **strings = t->data;
    free(strings[i]);
    strings[i] = copy;
    return TM_OK;
}
