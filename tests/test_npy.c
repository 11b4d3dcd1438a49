/* Tests of the .npy reader/writer (src/io/npy.c), the tensor object (src/core/tensor.c) and
 * value-name file encoding (src/io/names.c): round trips of every dtype, hand-made files in
 * every byte order and layout, every malformed header we reject, truncation and byte-flip
 * sweeps, and the real .npy files of the tiny models (tests/data or shared/models).
 * Not element conversions (test_dtype.c). */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../src/core/tensor.h"
#include "../src/io/names.h"
#include "../src/io/npy.h"

#include "check.h"

static char temp_dir[256];
static int temp_counter;

static void temp_path(char *buf, size_t cap, const char *stem) {
    snprintf(buf, cap, "%s/%s_%d.npy", temp_dir, stem, temp_counter++);
}

static int read_file(const char *path, uint8_t **data, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    for (;;) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        cap *= 2;
        buf = realloc(buf, cap);
    }
    fclose(f);
    buf[n] = 0; /* n < cap here: lets tests strstr() the header */
    *data = buf;
    *size = n;
    return 1;
}

/* magic, version, header length, header text and data, with no padding of our own */
static uint8_t *make_npy(int major, int minor, const char *header, const void *data,
                         size_t data_len, size_t *size) {
    size_t hlen = strlen(header);
    size_t pre = major == 1 ? 10 : 12;
    uint8_t *b = malloc(pre + hlen + data_len + 1);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (uint8_t)major;
    b[7] = (uint8_t)minor;
    if (major == 1) {
        b[8] = (uint8_t)hlen;
        b[9] = (uint8_t)(hlen >> 8);
    } else {
        b[8] = (uint8_t)hlen;
        b[9] = (uint8_t)(hlen >> 8);
        b[10] = (uint8_t)(hlen >> 16);
        b[11] = (uint8_t)(hlen >> 24);
    }
    memcpy(b + pre, header, hlen);
    if (data_len)
        memcpy(b + pre + hlen, data, data_len);
    *size = pre + hlen + data_len;
    return b;
}

static tm_tensor *read_ok(const uint8_t *buf, size_t size, const char *label) {
    tm_tensor *t = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status s = tm_npy_read_buffer(buf, size, &t, &err);
    CHECK(s == TM_OK && t, "%s: read failed: %s", label, err.message);
    return s == TM_OK ? t : NULL;
}

/* A header that must be refused: TM_ERR_PARSE, a message naming the source and `needle`,
 * and the out-parameter untouched. */
static void expect_parse_error(const uint8_t *buf, size_t size, const char *needle,
                               const char *label) {
    tm_tensor *sentinel = (tm_tensor *)&temp_counter;
    tm_tensor *t = sentinel;
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status s = tm_npy_read_buffer(buf, size, &t, &err);
    CHECK(s == TM_ERR_PARSE && err.code == TM_ERR_PARSE, "%s: status %d, want parse error",
          label, (int)s);
    CHECK(t == sentinel, "%s: out-parameter was written", label);
    CHECK(strstr(err.message, "npy buffer") && strstr(err.message, needle),
          "%s: message '%s' should name the buffer and say '%s'", label, err.message, needle);
    if (s == TM_OK && t != sentinel)
        tm_tensor_free(t);
}

static void bad_header(const char *header, const char *needle, const char *label) {
    size_t size;
    uint8_t data[64] = { 0 };
    uint8_t *b = make_npy(1, 0, header, data, 24, &size);
    expect_parse_error(b, size, needle, label);
    free(b);
}

/* ---- Tensors ------------------------------------------------------------------------------ */

static int n_alloc, n_free;
static void *count_alloc(void *user, size_t size) {
    (void)user;
    n_alloc++;
    return aligned_alloc(64, (size + 63) / 64 * 64);
}
static void count_free(void *user, void *p) {
    (void)user;
    n_free++;
    free(p);
}

static void test_tensors(void) {
    int64_t dims[3] = { 2, 3, 4 };
    tm_tensor *t = tm_tensor_new(TM_FLOAT, 3, dims);
    CHECK(t && tm_tensor_numel(t) == 24 && tm_tensor_nbytes(t) == 96, "new float (2,3,4)");
    CHECK(t && ((uintptr_t)tm_tensor_data(t) % 64) == 0, "owned data is 64-byte aligned");
    int zero = 1;
    for (int i = 0; t && i < 96; i++)
        zero &= ((uint8_t *)tm_tensor_data(t))[i] == 0;
    CHECK(zero, "new tensors are zero-filled");
    CHECK(t && tm_tensor_rank(t) == 3 && tm_tensor_dims(t)[2] == 4 &&
          tm_tensor_dtype(t) == TM_FLOAT && tm_tensor_data_const(t) == tm_tensor_data(t),
          "accessors");
    tm_tensor *c = tm_tensor_clone(t, NULL);
    CHECK(c && c->data != t->data && tm_same_shape(c, t) && c->nbytes == t->nbytes, "clone");
    tm_tensor_free(c);
    tm_tensor_free(t);

    tm_tensor *s = tm_tensor_new(TM_INT64, 0, NULL);
    CHECK(s && tm_tensor_numel(s) == 1 && tm_tensor_nbytes(s) == 8 && tm_tensor_rank(s) == 0,
          "rank 0 has one element");
    tm_tensor_free(s);

    int64_t empty_dims[2] = { 0, 5 };
    tm_tensor *e = tm_tensor_new(TM_FLOAT, 2, empty_dims);
    CHECK(e && tm_tensor_numel(e) == 0 && tm_tensor_nbytes(e) == 0 && tm_tensor_data(e),
          "empty tensor has a data pointer and 0 bytes");
    tm_tensor_free(e);

    int64_t nine[9] = { 1, 1, 1, 1, 1, 1, 1, 1, 1 };
    CHECK(!tm_tensor_new(TM_FLOAT, 9, nine), "rank 9 rejected");
    tm_tensor *r8 = tm_tensor_new(TM_FLOAT, 8, nine);
    CHECK(r8 && tm_tensor_numel(r8) == 1, "rank 8 numel");
    tm_tensor_free(r8);
    int64_t neg[2] = { 2, -1 };
    CHECK(!tm_tensor_new(TM_FLOAT, 2, neg), "negative dim rejected");
    CHECK(!tm_tensor_new(TM_FLOAT, -1, NULL), "negative rank rejected");
    int64_t huge[3] = { INT64_C(1) << 40, INT64_C(1) << 40, 2 };
    CHECK(!tm_tensor_new(TM_FLOAT, 3, huge), "numel overflow rejected");
    int64_t big[1] = { INT64_MAX / 2 };
    CHECK(!tm_tensor_new(TM_DOUBLE, 1, big), "byte size overflow rejected");
    CHECK(!tm_tensor_new(TM_UNDEFINED, 1, dims) && !tm_tensor_new((tm_dtype)40, 1, dims),
          "invalid dtypes rejected");
    CHECK(tm_numel(2, huge) == -1 && tm_numel(0, NULL) == 1 && tm_numel(1, neg + 1) == -1,
          "tm_numel");

    float buf[6] = { 1, 2, 3, 4, 5, 6 };
    int64_t d23[2] = { 2, 3 };
    tm_tensor *w = tm_tensor_wrap(TM_FLOAT, 2, d23, buf);
    CHECK(w && tm_tensor_data(w) == buf && !w->owns_data && w->nbytes == 24, "wrap");
    tm_tensor *wc = tm_tensor_clone(w, NULL);
    CHECK(wc && wc->owns_data && !memcmp(wc->data, buf, 24), "clone of a wrapped tensor");
    tm_tensor_free(wc);
    tm_tensor_free(w);
    CHECK(buf[5] == 6, "freeing a wrapped tensor leaves caller memory alone");
    CHECK(!tm_tensor_wrap(TM_STRING, 2, d23, buf), "wrap refuses strings");
    CHECK(!tm_tensor_wrap(TM_FLOAT, 2, d23, NULL), "wrap refuses NULL data");
    int64_t d0[1] = { 0 };
    tm_tensor *w0 = tm_tensor_wrap(TM_FLOAT, 1, d0, NULL);
    CHECK(w0 != NULL, "wrap of an empty tensor may have NULL data");
    tm_tensor_free(w0);

    tm_tensor_free(NULL);
    CHECK(tm_tensor_dtype(NULL) == TM_UNDEFINED && tm_tensor_rank(NULL) == -1 &&
          !tm_tensor_dims(NULL) && tm_tensor_numel(NULL) == 0 && !tm_tensor_data(NULL) &&
          !tm_tensor_data_const(NULL) && tm_tensor_nbytes(NULL) == 0, "NULL accessors");

    tm_tensor *str = tm_tensor_new(TM_STRING, 1, d23 + 1);
    CHECK(str && tm_tensor_nbytes(str) == 3 * sizeof(char *), "string tensor");
    CHECK(tm_tensor_set_string(str, 0, "hello") == TM_OK, "set string");
    CHECK(tm_tensor_set_string(str, 0, "again") == TM_OK, "replace string (old one freed)");
    CHECK(tm_tensor_set_string(str, 2, "") == TM_OK, "set empty string");
    CHECK(tm_tensor_set_string(str, 3, "x") == TM_ERR_INVALID_ARGUMENT, "index past end");
    CHECK(tm_tensor_set_string(str, -1, "x") == TM_ERR_INVALID_ARGUMENT, "negative index");
    CHECK(tm_tensor_set_string(str, 0, NULL) == TM_ERR_INVALID_ARGUMENT, "NULL string");
    CHECK(tm_tensor_set_string(NULL, 0, "x") == TM_ERR_INVALID_ARGUMENT, "NULL tensor");
    tm_tensor *f = tm_tensor_new(TM_FLOAT, 1, d23);
    CHECK(tm_tensor_set_string(f, 0, "x") == TM_ERR_INVALID_ARGUMENT, "not a string tensor");
    tm_tensor_free(f);
    tm_tensor *sc = tm_tensor_clone(str, NULL);
    char **ss = sc ? sc->data : NULL;
    CHECK(ss && !strcmp(ss[0], "again") && ss[1] == NULL && !strcmp(ss[2], "") &&
          ss[0] != ((char **)str->data)[0], "string clone is deep, NULL stays NULL");
    tm_tensor_free(sc);
    tm_tensor_free(str);

    char *borrowed[2] = { "a", "b" };
    tm_tensor *bs = tm_tensor_borrow(TM_STRING, 1, d23, borrowed);
    CHECK(bs && tm_tensor_set_string(bs, 0, "z") == TM_ERR_INVALID_ARGUMENT,
          "a borrowed string array is read-only");
    tm_tensor_free(bs);

    tm_allocator a = { count_alloc, count_free, NULL };
    tm_tensor *ta = tm_tensor_alloc(TM_INT32, 2, d23, &a);
    CHECK(ta && n_alloc == 1 && ta->allocator == &a, "injected allocator is used");
    tm_tensor *tc = tm_tensor_clone(ta, &a);
    tm_tensor_free(ta);
    tm_tensor_free(tc);
    CHECK(n_alloc == 2 && n_free == 2, "injected allocator frees (%d allocs, %d frees)",
          n_alloc, n_free);
    void *p = tm__alloc(NULL, 0);
    CHECK(p != NULL && ((uintptr_t)p % 64) == 0, "tm__alloc(0) gives an aligned pointer");
    tm__free(NULL, p);
    tm__free(NULL, NULL);

    int64_t other[2] = { 3, 2 };
    tm_tensor *x = tm_tensor_new(TM_FLOAT, 2, d23), *y = tm_tensor_new(TM_INT8, 2, d23);
    tm_tensor *z = tm_tensor_new(TM_FLOAT, 2, other);
    CHECK(tm_same_shape(x, y) && !tm_same_shape(x, z) && !tm_same_shape(x, NULL),
          "tm_same_shape compares dims only");
    tm_tensor_free(x);
    tm_tensor_free(y);
    tm_tensor_free(z);
}

/* ---- Round trips -------------------------------------------------------------------------- */

static tm_dtype read_back_dtype(tm_dtype dt) {
    switch (dt) {
    case TM_BFLOAT16: return TM_UINT16;
    case TM_FLOAT8E4M3FN: case TM_FLOAT8E4M3FNUZ: case TM_FLOAT8E5M2: case TM_FLOAT8E5M2FNUZ:
    case TM_FLOAT8E8M0: case TM_UINT4: case TM_UINT2: case TM_FLOAT4E2M1:
        return TM_UINT8;
    case TM_INT4: case TM_INT2: return TM_INT8;
    default: return dt;
    }
}

static const char *const sample_strings[] = {
    "", "a", "hello world", "caf\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac", "\xf0\x9f\x98\x80!",
    "tab\tnew\nline", "'quote\"",
};

static void fill(tm_tensor *t) {
    int64_t n = tm_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        size_t k = (size_t)i;
        if (t->dtype == TM_STRING) {
            if (i % 5 != 4) /* leave some NULL: they read back as "" */
                tm_tensor_set_string(t, i, sample_strings[k % 8]);
        } else if (t->dtype == TM_COMPLEX64) {
            ((float *)t->data)[2 * k] = (float)i * 0.25f;
            ((float *)t->data)[2 * k + 1] = -(float)i;
        } else if (t->dtype == TM_COMPLEX128) {
            ((double *)t->data)[2 * k] = (double)i * 0.125;
            ((double *)t->data)[2 * k + 1] = 1e300 / (double)(i + 1);
        } else if (t->dtype == TM_BOOL) {
            tm_store_i64(t->data, t->dtype, k, i % 3 == 0);
        } else if (tm_dtype_is_float(t->dtype)) {
            tm_store_f64(t->data, t->dtype, k, (double)i * 0.75 - 4.0);
        } else {
            tm_store_i64(t->data, t->dtype, k, i * 7919 - 40000);
        }
    }
}

static int same_content(const tm_tensor *a, const tm_tensor *b) {
    if (a->rank != b->rank || a->nbytes != b->nbytes)
        return 0;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i])
            return 0;
    if (a->dtype != TM_STRING)
        return a->nbytes == 0 || !memcmp(a->data, b->data, a->nbytes);
    char *const *x = a->data, *const *y = b->data;
    for (int64_t i = 0; i < tm_tensor_numel(a); i++)
        if (strcmp(x[i] ? x[i] : "", y[i] ? y[i] : ""))
            return 0;
    return 1;
}

static void test_round_trips(void) {
    static const struct { int rank; int64_t dims[8]; } shapes[] = {
        { 0, { 0 } }, { 1, { 5 } }, { 3, { 2, 3, 4 } }, { 2, { 0, 3 } },
        { 8, { 1, 2, 1, 1, 3, 1, 1, 2 } },
    };
    for (int dt = 1; dt <= 26; dt++) {
        int bad = 0;
        for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
            tm_tensor *t = tm_tensor_new((tm_dtype)dt, shapes[k].rank, shapes[k].dims);
            if (!t) {
                bad++;
                continue;
            }
            fill(t);
            char path[512];
            temp_path(path, sizeof path, "round");
            tm_error err;
            tm_tensor *back = NULL;
            tm_status s = tm_npy_write(path, t, &err);
            if (s != TM_OK) {
                printf("  write %s: %s\n", tm_dtype_name((tm_dtype)dt), err.message);
                bad++;
            } else if (tm_npy_read(path, &back, &err) != TM_OK) {
                printf("  read %s: %s\n", tm_dtype_name((tm_dtype)dt), err.message);
                bad++;
            } else {
                if (back->dtype != read_back_dtype((tm_dtype)dt) || !same_content(t, back)) {
                    printf("  %s rank %d: read back as %s, content %s\n",
                           tm_dtype_name((tm_dtype)dt), shapes[k].rank,
                           tm_dtype_name(back->dtype), same_content(t, back) ? "same" : "differs");
                    bad++;
                }
                uint8_t *file;
                size_t size;
                if (read_file(path, &file, &size)) {
                    /* numpy's layout: data 64-byte aligned, header ends in '\n' */
                    size_t hl = (size_t)file[8] | (size_t)file[9] << 8;
                    bad += (10 + hl) % 64 != 0 || file[9 + hl] != '\n' || file[6] != 1;
                    free(file);
                }
                tm_tensor_free(back);
            }
            remove(path);
            tm_tensor_free(t);
        }
        CHECK(bad == 0, "npy round trip of %s in 5 shapes (%d bad)", tm_dtype_name((tm_dtype)dt),
              bad);
    }
}

/* The exact header numpy writes, and the string width it chooses. */
static void test_writer_format(void) {
    int64_t dims[2] = { 2, 3 };
    tm_tensor *t = tm_tensor_new(TM_FLOAT, 2, dims);
    char path[512];
    temp_path(path, sizeof path, "format");
    tm_npy_write(path, t, NULL);
    uint8_t *file;
    size_t size;
    const char *want = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    CHECK(read_file(path, &file, &size) && size == 128 + 24 && file[8] == 118 &&
          !memcmp(file + 10, want, strlen(want)) && file[127] == '\n' && file[126] == ' ',
          "float32 (2,3) header matches numpy's byte for byte");
    free(file);
    tm_tensor_free(t);

    int64_t one = 4;
    t = tm_tensor_new(TM_BOOL, 1, &one);
    tm_store_i64(t->data, TM_BOOL, 1, 1);
    ((uint8_t *)t->data)[2] = 7; /* any nonzero byte is true; the file holds 1 */
    tm_npy_write(path, t, NULL);
    CHECK(read_file(path, &file, &size) && strstr((char *)file + 10, "'|b1'") &&
          strstr((char *)file + 10, "(4,)") && file[size - 4] == 0 && file[size - 3] == 1 &&
          file[size - 2] == 1 && file[size - 1] == 0, "bool written as |b1 0/1, shape (4,)");
    free(file);
    tm_tensor_free(t);

    t = tm_tensor_new(TM_FLOAT16, 0, NULL);
    tm_npy_write(path, t, NULL);
    CHECK(read_file(path, &file, &size) && strstr((char *)file + 10, "'<f2'") &&
          strstr((char *)file + 10, "'shape': ()") && size == 128 + 2, "rank 0 float16");
    free(file);
    tm_tensor_free(t);

    int64_t two = 2;
    t = tm_tensor_new(TM_STRING, 1, &two);
    tm_tensor_set_string(t, 0, "\xe6\x97\xa5\xe6\x9c\xac"); /* 2 code points, 6 bytes */
    tm_tensor_set_string(t, 1, "abc");
    tm_npy_write(path, t, NULL);
    int ok = read_file(path, &file, &size) && strstr((char *)file + 10, "'<U3'") &&
             size == 128 + 2 * 3 * 4;
    const uint8_t *d = ok ? file + 128 : NULL; /* U+65E5 U+672C, padding, then "abc" */
    CHECK(ok && d[0] == 0xE5 && d[1] == 0x65 && d[4] == 0x2C && d[5] == 0x67 && d[8] == 0 &&
          d[12] == 'a' && d[20] == 'c', "strings as <U{max code points}, UTF-32LE");
    free(file);
    tm_tensor_set_string(t, 1, "bad \xff utf8");
    tm_error err;
    remove(path);
    CHECK(tm_npy_write(path, t, &err) == TM_ERR_INVALID_ARGUMENT &&
          strstr(err.message, "UTF-8") && access(path, F_OK) != 0,
          "invalid UTF-8 refused before any file is made");
    tm_tensor_set_string(t, 1, "\xed\xa0\x80"); /* an encoded surrogate */
    CHECK(tm_npy_write(path, t, NULL) == TM_ERR_INVALID_ARGUMENT, "surrogates refused");
    tm_tensor_set_string(t, 1, "\xc0\x80"); /* overlong NUL */
    CHECK(tm_npy_write(path, t, NULL) == TM_ERR_INVALID_ARGUMENT, "overlong UTF-8 refused");
    tm_tensor_free(t);

    t = tm_tensor_new(TM_STRING, 1, &two);
    tm_npy_write(path, t, NULL);
    CHECK(read_file(path, &file, &size) && strstr((char *)file + 10, "'<U1'") &&
          size == 128 + 8, "all-empty strings are <U1, as numpy writes them");
    free(file);
    tm_tensor_free(t);
    remove(path);

    CHECK(tm_npy_write(path, NULL, NULL) == TM_ERR_INVALID_ARGUMENT, "write NULL tensor");
    tm_tensor fake;
    memset(&fake, 0, sizeof fake);
    fake.dtype = TM_UNDEFINED;
    CHECK(tm_npy_write(path, &fake, &err) == TM_ERR_UNSUPPORTED && access(path, F_OK) != 0,
          "undefined dtype not written");
    t = tm_tensor_new(TM_FLOAT, 0, NULL);
    CHECK(tm_npy_write("/nonexistent-dir/x/y.npy", t, &err) == TM_ERR_IO &&
          strstr(err.message, "/nonexistent-dir/x/y.npy"), "unwritable path: %s", err.message);
    tm_tensor_free(t);
}

/* ---- Reading what numpy (and others) write ----------------------------------------------- */

static void test_read_variants(void) {
    size_t size;
    uint8_t *b;
    tm_tensor *t;

    uint8_t be_f4[8] = { 0x3F, 0xC0, 0, 0, 0xC0, 0x20, 0, 0 };
    b = make_npy(1, 0, "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }\n", be_f4, 8,
                 &size);
    t = read_ok(b, size, ">f4");
    CHECK(t && t->dtype == TM_FLOAT && ((float *)t->data)[0] == 1.5f &&
          ((float *)t->data)[1] == -2.5f, "big-endian float32 swapped");
    tm_tensor_free(t);
    free(b);

    uint8_t be_i8[8] = { 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFE };
    b = make_npy(1, 0, "{'descr': '>i8', 'fortran_order': False, 'shape': (), }", be_i8, 8,
                 &size);
    t = read_ok(b, size, ">i8");
    CHECK(t && t->dtype == TM_INT64 && t->rank == 0 && ((int64_t *)t->data)[0] == -2,
          "big-endian int64 scalar");
    tm_tensor_free(t);
    free(b);

    uint8_t be_c8[8] = { 0x3F, 0x80, 0, 0, 0xC0, 0, 0, 0 };
    b = make_npy(1, 0, "{'descr': '>c8', 'fortran_order': False, 'shape': (1,), }", be_c8, 8,
                 &size);
    t = read_ok(b, size, ">c8");
    CHECK(t && t->dtype == TM_COMPLEX64 && ((float *)t->data)[0] == 1.0f &&
          ((float *)t->data)[1] == -2.0f, "big-endian complex64: each half swapped");
    tm_tensor_free(t);
    free(b);

    float native[2] = { 0.5f, 8.0f };
    b = make_npy(1, 0, "{'descr': '=f4', 'fortran_order': False, 'shape': (2,), }", native, 8,
                 &size);
    t = read_ok(b, size, "=f4");
    CHECK(t && ((float *)t->data)[1] == 8.0f, "native byte order '='");
    tm_tensor_free(t);
    free(b);

    uint8_t u2[4] = { 0x34, 0x12, 0xFF, 0xFF };
    b = make_npy(1, 0, "{'descr': '<u2', 'fortran_order': False, 'shape': (2,), }", u2, 4, &size);
    t = read_ok(b, size, "<u2");
    CHECK(t && t->dtype == TM_UINT16 && ((uint16_t *)t->data)[0] == 0x1234 &&
          ((uint16_t *)t->data)[1] == 0xFFFF, "uint16");
    tm_tensor_free(t);
    free(b);

    uint8_t bools[3] = { 0, 2, 1 };
    b = make_npy(1, 0, "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", bools, 3,
                 &size);
    t = read_ok(b, size, "|b1");
    CHECK(t && t->dtype == TM_BOOL && ((uint8_t *)t->data)[1] == 1, "bool bytes read as 0/1");
    tm_tensor_free(t);
    free(b);

    uint8_t i1[2] = { 0x80, 0x7F };
    b = make_npy(1, 0, "{'descr': '<i1', 'fortran_order': False, 'shape': (2,), }", i1, 2, &size);
    t = read_ok(b, size, "<i1");
    CHECK(t && t->dtype == TM_INT8 && ((int8_t *)t->data)[0] == -128, "'<i1' accepted too");
    tm_tensor_free(t);
    free(b);

    /* strings: UTF-32 both ways round, and bytes */
    uint8_t be_u[24] = { 0, 0, 0, 'a', 0, 0, 0, 0xE9, 0, 0, 0, 0,
                         0, 0x01, 0xF6, 0x00, 0, 0, 0, 0, 0, 0, 0, 0 };
    b = make_npy(1, 0, "{'descr': '>U3', 'fortran_order': False, 'shape': (2,), }", be_u, 24,
                 &size);
    t = read_ok(b, size, ">U3");
    char **s = t ? t->data : NULL;
    CHECK(s && t->dtype == TM_STRING && !strcmp(s[0], "a\xc3\xa9") &&
          !strcmp(s[1], "\xf0\x9f\x98\x80"), "big-endian UTF-32 to UTF-8");
    tm_tensor_free(t);
    free(b);
    uint8_t le_u[8] = { 'h', 0, 0, 0, 'i', 0, 0, 0 };
    b = make_npy(1, 0, "{'descr': '<U2', 'fortran_order': False, 'shape': (1,), }", le_u, 8,
                 &size);
    t = read_ok(b, size, "<U2");
    CHECK(t && !strcmp(((char **)t->data)[0], "hi"), "little-endian UTF-32, full width");
    tm_tensor_free(t);
    free(b);
    const char bytes_s[10] = { 'a', 'b', 'c', 0, 0, 'h', 'e', 'l', 'l', 'o' };
    b = make_npy(1, 0, "{'descr': '|S5', 'fortran_order': False, 'shape': (2,), }", bytes_s, 10,
                 &size);
    t = read_ok(b, size, "|S5");
    s = t ? t->data : NULL;
    CHECK(s && !strcmp(s[0], "abc") && !strcmp(s[1], "hello"), "|S5 bytes strings");
    tm_tensor_free(t);
    free(b);

    /* Fortran order is transposed to C order, for numbers and strings */
    int32_t fdata[24];
    for (int i = 0; i < 24; i++)
        fdata[i] = i; /* file position = i + 2*j + 6*k for index (i, j, k) */
    b = make_npy(1, 0, "{'descr': '<i4', 'fortran_order': True, 'shape': (2, 3, 4), }", fdata,
                 96, &size);
    t = read_ok(b, size, "fortran (2,3,4)");
    int bad = !t;
    for (int i = 0; t && i < 2; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 4; k++)
                bad += ((int32_t *)t->data)[(i * 3 + j) * 4 + k] != i + 2 * j + 6 * k;
    CHECK(bad == 0, "Fortran-ordered (2,3,4) transposed to C order (%d bad)", bad);
    tm_tensor_free(t);
    free(b);
    uint8_t fstr[16] = { 'a', 0, 0, 0, 'b', 0, 0, 0, 'c', 0, 0, 0, 'd', 0, 0, 0 };
    b = make_npy(1, 0, "{'descr': '<U1', 'fortran_order': True, 'shape': (2, 2), }", fstr, 16,
                 &size);
    t = read_ok(b, size, "fortran strings");
    s = t ? t->data : NULL;
    CHECK(s && !strcmp(s[0], "a") && !strcmp(s[1], "c") && !strcmp(s[2], "b") &&
          !strcmp(s[3], "d"), "Fortran-ordered strings transposed");
    tm_tensor_free(t);
    free(b);
    b = make_npy(1, 0, "{'descr': '<i4', 'fortran_order': True, 'shape': (4,), }", fdata, 16,
                 &size);
    t = read_ok(b, size, "fortran 1-d");
    CHECK(t && ((int32_t *)t->data)[3] == 3, "Fortran order of rank 1 is C order");
    tm_tensor_free(t);
    free(b);

    /* header spellings numpy accepts */
    b = make_npy(1, 0, "{\"shape\": (2L, 1L), \"descr\": \"<i4\", \"fortran_order\": False}",
                 fdata, 8, &size);
    t = read_ok(b, size, "double quotes, other key order, Python 2 longs, no trailing comma");
    CHECK(t && t->rank == 2 && t->dims[0] == 2 && t->dims[1] == 1, "shape (2L, 1L)");
    tm_tensor_free(t);
    free(b);
    b = make_npy(2, 0, "{ 'descr' : '<i4' ,\n 'fortran_order' : False , 'shape' : ( 3 , ) , }"
                 "   \n", fdata, 12, &size);
    t = read_ok(b, size, "version 2.0 with spaces");
    CHECK(t && t->dims[0] == 3, "version 2.0");
    tm_tensor_free(t);
    free(b);
    b = make_npy(3, 0, "{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }\n", fdata, 4,
                 &size);
    t = read_ok(b, size, "version 3.0");
    tm_tensor_free(t);
    free(b);
    b = make_npy(1, 0, "{'descr': '<f8', 'fortran_order': False, 'shape': (0, 7), }\n", NULL, 0,
                 &size);
    t = read_ok(b, size, "empty array");
    CHECK(t && t->dtype == TM_DOUBLE && tm_tensor_numel(t) == 0 && t->dims[1] == 7,
          "empty (0, 7) array");
    tm_tensor_free(t);
    free(b);
    b = make_npy(1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, "
                 "1), }", native, 4, &size);
    t = read_ok(b, size, "rank 8");
    tm_tensor_free(t);
    free(b);
}

/* ---- Everything malformed ------------------------------------------------------------------ */

static void test_malformed(void) {
    size_t size;
    uint8_t *b;
    uint8_t data[64] = { 0 };

    expect_parse_error(NULL, 0, "bad magic", "empty buffer");
    expect_parse_error((const uint8_t *)"\x93NUM", 4, "bad magic", "5 bytes");
    b = make_npy(1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", data, 8,
                 &size);
    b[5] = 'Z';
    expect_parse_error(b, size, "bad magic", "magic NUMPZ");
    b[5] = 'Y';
    b[0] = 0x92;
    expect_parse_error(b, size, "bad magic", "magic first byte");
    b[0] = 0x93;
    b[6] = 0;
    expect_parse_error(b, size, "bad version 0.0", "version 0.0");
    b[6] = 4;
    expect_parse_error(b, size, "bad version 4.0", "version 4.0");
    b[6] = 1;
    b[7] = 1;
    expect_parse_error(b, size, "bad version 1.1", "version 1.1");
    b[7] = 0;
    b[8] = 0xFF;
    expect_parse_error(b, size, "goes beyond the end of the file", "header length past end");
    expect_parse_error(b, 9, "truncated", "cut inside the length");
    free(b);
    b = make_npy(2, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", data, 8,
                 &size);
    b[11] = 0x80;
    expect_parse_error(b, size, "goes beyond the end of the file", "v2 header length 2^31");
    expect_parse_error(b, 11, "truncated", "v2 cut inside the length");
    free(b);

    bad_header("", "does not start with '{'", "empty header");
    bad_header("[('a', '<f4')]", "does not start with '{'", "list header");
    bad_header("{'descr': '<f4', 'fortran_order': False}", "missing key 'shape'", "no shape");
    bad_header("{'shape': (6,), 'fortran_order': False}", "missing key 'descr'", "no descr");
    bad_header("{'descr': '<f4', 'shape': (6,)}", "missing key 'fortran_order'", "no order");
    bad_header("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (6,)}",
               "appears twice", "duplicate key");
    bad_header("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'x': 1}",
               "unexpected key 'x'", "extra key");
    bad_header("{descr: '<f4', 'fortran_order': False, 'shape': (6,)}", "quoted key",
               "unquoted key");
    bad_header("{'descr' '<f4', 'fortran_order': False, 'shape': (6,)}", "expected ':'",
               "missing colon");
    bad_header("{'descr': '<f4' 'fortran_order': False, 'shape': (6,)}", "expected ',' or '}'",
               "missing comma");
    bad_header("{'descr': '<f4', 'fortran_order': False, 'shape': (6,)", "expected ',' or '}'",
               "unclosed dict");
    bad_header("{'descr': '<f4', 'fortran_order': False, 'shape': (6,)} x",
               "unexpected text after", "text after dict");
    bad_header("{'descr': '<f4, 'fortran_order': False, 'shape': (6,)}", "expected ','",
               "quote missing");
    bad_header("{'descr': '<f4", "unterminated 'descr'", "unterminated string");
    bad_header("{'descr': '<f\\x34', 'fortran_order': False, 'shape': (6,)}",
               "unexpected character", "escape in string");
    bad_header("{'descr': '<f4', 'fortran_order': 0, 'shape': (6,)}", "True or False",
               "fortran_order 0");
    bad_header("{'descr': '<f4', 'fortran_order': Falsey, 'shape': (6,)}", "True or False",
               "fortran_order Falsey");
    bad_header("{'descr': '<f4', 'fortran_order': False, 'shape': [6]}", "must be a tuple",
               "shape list");
    bad_header("{'descr': '<f4', 'fortran_order': False, 'shape': 6}", "must be a tuple",
               "shape int");
    bad_header("{'descr': '<f4', 'fortran_order': False, 'shape': (6)}", "needs a comma",
               "shape (6)");
    bad_header("{'descr': '<f4', 'fortran_order': False, 'shape': (-6,)}", "non-negative",
               "negative dim");
    bad_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2.5,)}", "expected ','",
               "float dim");
    bad_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2 3,)}", "expected ','",
               "dims without comma");
    bad_header("{'descr': '<f4', 'fortran_order': False, 'shape': (,)}", "non-negative",
               "shape (,)");
    bad_header("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}",
               "shape overflow", "dim over 64 bits");
    bad_header("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, "
               "16)}", "shape overflow", "element count overflow");
    bad_header("{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904,)}",
               "shape overflow", "byte count overflow");
    bad_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1, 1, 1, 1, 1, 1, 6)}",
               "more than 8 dimensions", "rank 9");
    static const char *const descrs[] = {
        "<f3", "<x4", "|O", "|O8", "<V8", "<U0", "|S0", "<f4x", "f4", "<f", "<f04", "<i16",
        "|b2", "<c4", "<M8[ns]", "", "<u3",
    };
    for (size_t k = 0; k < sizeof descrs / sizeof descrs[0]; k++) {
        char header[160], label[64];
        snprintf(header, sizeof header,
                 "{'descr': '%s', 'fortran_order': False, 'shape': (6,)}", descrs[k]);
        snprintf(label, sizeof label, "descr '%s'", descrs[k]);
        bad_header(header, "unknown or unsupported descr", label);
    }
    bad_header("{'descr': '|f4', 'fortran_order': False, 'shape': (6,)}", "no byte order",
               "descr |f4");
    bad_header("{'descr': '|U2', 'fortran_order': False, 'shape': (3,)}", "no byte order",
               "descr |U2");
    bad_header("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (6,)}",
               "quoted 'descr'", "structured descr");

    /* data size must match the shape exactly */
    b = make_npy(1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", data, 20,
                 &size);
    expect_parse_error(b, size, "shape/data size mismatch", "data too short");
    free(b);
    b = make_npy(1, 0, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", data, 28,
                 &size);
    expect_parse_error(b, size, "shape/data size mismatch", "data too long");
    free(b);
    b = make_npy(1, 0, "{'descr': '<U2', 'fortran_order': False, 'shape': (2,), }", data, 12,
                 &size);
    expect_parse_error(b, size, "shape/data size mismatch", "string data short");
    free(b);

    /* string content that has no UTF-8 form */
    uint8_t bad_cp[8] = { 'a', 0, 0, 0, 0x00, 0x00, 0x11, 0x00 };
    b = make_npy(1, 0, "{'descr': '<U2', 'fortran_order': False, 'shape': (1,), }", bad_cp, 8,
                 &size);
    expect_parse_error(b, size, "invalid code point U+110000", "code point past U+10FFFF");
    free(b);
    uint8_t surrogate[12] = { 'a', 0, 0, 0, 'b', 0, 0, 0, 0x00, 0xD8, 0, 0 };
    b = make_npy(1, 0, "{'descr': '<U1', 'fortran_order': False, 'shape': (3,), }", surrogate,
                 12, &size);
    expect_parse_error(b, size, "element 2 holds an invalid code point U+D800", "surrogate");
    free(b);
    uint8_t inner_nul[12] = { 'a', 0, 0, 0, 0, 0, 0, 0, 'b', 0, 0, 0 };
    b = make_npy(1, 0, "{'descr': '<U3', 'fortran_order': False, 'shape': (1,), }", inner_nul,
                 12, &size);
    expect_parse_error(b, size, "NUL", "NUL inside a string");
    free(b);

    tm_tensor *t = NULL;
    CHECK(tm_npy_read_buffer(data, 8, NULL, NULL) == TM_ERR_INVALID_ARGUMENT, "NULL out");
    CHECK(tm_npy_read_buffer(NULL, 8, &t, NULL) == TM_ERR_INVALID_ARGUMENT && !t, "NULL data");
    CHECK(tm_npy_read_buffer(data, 8, &t, NULL) == TM_ERR_PARSE && !t, "NULL err is fine");
}

/* Every truncation of a valid file fails cleanly; every single-byte change in its header
 * either reads or fails cleanly (the sanitizers watch for the rest). */
static void test_sweeps(void) {
    int64_t dims[2] = { 2, 3 };
    tm_tensor *t = tm_tensor_new(TM_STRING, 2, dims);
    fill(t);
    char path[512];
    temp_path(path, sizeof path, "sweep");
    tm_npy_write(path, t, NULL);
    tm_tensor_free(t);
    uint8_t *file;
    size_t size;
    if (!read_file(path, &file, &size)) {
        CHECK(0, "sweep file could not be read back");
        return;
    }
    remove(path);
    int bad = 0;
    for (size_t n = 0; n < size; n++) {
        uint8_t *copy = malloc(n ? n : 1); /* an exact-size copy lets ASan see overreads */
        memcpy(copy, file, n);
        tm_tensor *sentinel = (tm_tensor *)&temp_counter, *out = sentinel;
        tm_error err;
        tm_status s = tm_npy_read_buffer(copy, n, &out, &err);
        bad += s != TM_ERR_PARSE || out != sentinel;
        free(copy);
    }
    CHECK(bad == 0, "all %zu truncations are parse errors (%d bad)", size, bad);

    static const uint8_t subs[] = { 0, ' ', '\'', '"', '(', ')', ',', ':', '{', '}', '9', '0',
                                    'L', 'U', 'S', '>', '|', 0x80, 0xFF, '\n', 'T' };
    size_t header_end = 10 + ((size_t)file[8] | (size_t)file[9] << 8);
    int n_ok = 0, n_err = 0;
    bad = 0;
    for (size_t pos = 0; pos < header_end; pos++)
        for (size_t k = 0; k < sizeof subs; k++) {
            uint8_t *copy = malloc(size);
            memcpy(copy, file, size);
            copy[pos] = subs[k];
            tm_tensor *sentinel = (tm_tensor *)&temp_counter, *out = sentinel;
            tm_error err;
            tm_status s = tm_npy_read_buffer(copy, size, &out, &err);
            if (s == TM_OK) {
                n_ok++;
                bad += out == sentinel;
                tm_tensor_free(out);
            } else {
                n_err++;
                bad += out != sentinel || !err.message[0];
            }
            free(copy);
        }
    printf("header byte sweep: %d read, %d refused\n", n_ok, n_err);
    CHECK(bad == 0, "header byte sweep: %d read, %d refused, %d inconsistent", n_ok, n_err,
          bad);
    free(file);
}

static void test_files(void) {
    tm_tensor *t = NULL;
    tm_error err;
    CHECK(tm_npy_read("/nonexistent-dir/none.npy", &t, &err) == TM_ERR_NOT_FOUND && !t &&
          strstr(err.message, "/nonexistent-dir/none.npy"), "missing file: %s", err.message);
    CHECK(tm_npy_read(temp_dir, &t, &err) != TM_OK && !t, "a directory is not a file");
    CHECK(tm_npy_read(NULL, &t, &err) == TM_ERR_INVALID_ARGUMENT, "NULL path");
    char path[512];
    temp_path(path, sizeof path, "garbage");
    FILE *f = fopen(path, "wb");
    fputs("this is not numpy", f);
    fclose(f);
    CHECK(tm_npy_read(path, &t, &err) == TM_ERR_PARSE && strstr(err.message, path) &&
          strstr(err.message, "bad magic"), "message names the file: %s", err.message);
    remove(path);

    /* a file larger than the reader's first buffer */
    int64_t n = 100000;
    tm_tensor *big = tm_tensor_new(TM_INT32, 1, &n);
    for (int64_t i = 0; i < n; i++)
        ((int32_t *)big->data)[i] = (int32_t)(i * 31);
    temp_path(path, sizeof path, "big");
    tm_npy_write(path, big, NULL);
    CHECK(tm_npy_read(path, &t, &err) == TM_OK && same_content(big, t), "400 kB file");
    tm_tensor_free(t);
    tm_tensor_free(big);
    remove(path);
}

/* ---- Real files from shared/models --------------------------------------------------------- */

static int n_real, n_real_bad, n_rewrite_same, n_fortran;

static void check_real_file(const char *path) {
    tm_tensor *t = NULL;
    tm_error err;
    n_real++;
    if (tm_npy_read(path, &t, &err) != TM_OK) {
        if (n_real_bad++ < 5)
            printf("  %s\n", err.message);
        return;
    }
    /* Our writer should give back numpy's bytes exactly; a Fortran-ordered original comes
     * back in C order, so that one must only hold the same values. */
    char out[512];
    temp_path(out, sizeof out, "real");
    uint8_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    int same = 0;
    if (tm_npy_write(out, t, &err) == TM_OK && read_file(path, &a, &na) &&
        read_file(out, &b, &nb)) {
        if (strstr((const char *)a + 10, "'fortran_order': True")) {
            tm_tensor *again = NULL;
            n_fortran++;
            same = tm_npy_read(out, &again, &err) == TM_OK && same_content(t, again);
            tm_tensor_free(again);
        } else {
            same = na == nb && !memcmp(a, b, na);
        }
    }
    n_rewrite_same += same;
    if (!same && n_real - n_rewrite_same <= 3)
        printf("  rewrite of %s differs\n", path);
    free(a);
    free(b);
    remove(out);
    tm_tensor_free(t);
}

/* CLIP's logits_per_image is saved Fortran-ordered (it is logits_per_text transposed):
 * read back in C order it must be exactly the transpose of logits_per_text. */
static void check_fortran_pair(const char *models) {
    char a[1024], b[1024];
    snprintf(a, sizeof a, "%s/tiny/clip/model.cases/default/torch/logits_per_image.npy", models);
    snprintf(b, sizeof b, "%s/tiny/clip/model.cases/default/torch/logits_per_text.npy", models);
    tm_tensor *img = NULL, *txt = NULL;
    if (tm_npy_read(a, &img, NULL) != TM_OK || tm_npy_read(b, &txt, NULL) != TM_OK) {
        tm_tensor_free(img);
        printf("skipping the CLIP Fortran-order check: files not found\n");
        return;
    }
    int ok = img->rank == 2 && txt->rank == 2 && img->dims[0] == txt->dims[1] &&
             img->dims[1] == txt->dims[0] && img->dtype == TM_FLOAT;
    for (int64_t i = 0; ok && i < img->dims[0]; i++)
        for (int64_t j = 0; j < img->dims[1]; j++)
            ok &= ((float *)img->data)[i * img->dims[1] + j] ==
                  ((float *)txt->data)[j * txt->dims[1] + i];
    CHECK(ok, "CLIP logits_per_image (Fortran order) is the transpose of logits_per_text");
    tm_tensor_free(img);
    tm_tensor_free(txt);
}

static void walk(const char *dir, int depth) {
    DIR *d = opendir(dir);
    if (!d || depth > 8) {
        if (d)
            closedir(d);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.')
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0)
            continue;
        size_t len = strlen(e->d_name);
        if (S_ISDIR(st.st_mode))
            walk(path, depth + 1);
        else if (len > 4 && !strcmp(e->d_name + len - 4, ".npy"))
            check_real_file(path);
    }
    closedir(d);
}

/* A folder laid out like shared/models (tiny/<model>/<variant>.cases/...): shared/ beside
 * the checkout, else the repository's smaller tests/data copy. TM_MODELS_DIR overrides. */
static const char *find_models(void) {
    static const char *const candidates[] = { "../shared/models", "shared/models",
                                              "/work/shared/models", "tests/data" };
    static char probe[1024];
    const char *env = getenv("TM_MODELS_DIR");
    struct stat st;
    for (size_t k = 0; k <= sizeof candidates / sizeof candidates[0]; k++) {
        const char *root = k == 0 ? env : candidates[k - 1];
        if (!root)
            continue;
        snprintf(probe, sizeof probe, "%s/tiny/bert/model.cases/default/inputs", root);
        if (stat(probe, &st) == 0 && S_ISDIR(st.st_mode))
            return root;
    }
    return NULL;
}

static void test_real_files(void) {
    const char *models = find_models();
    if (!models) {
        printf("skipping real .npy files: no tiny/bert/model.cases found "
               "(set TM_MODELS_DIR to shared/models)\n");
        return;
    }
    static const char *const inputs[] = { "input_ids", "attention_mask", "token_type_ids" };
    for (size_t k = 0; k < 3; k++) {
        char file[1200];
        snprintf(file, sizeof file, "%s/tiny/bert/model.cases/default/inputs/%s.npy", models,
                 inputs[k]);
        tm_tensor *t = NULL;
        tm_error err;
        tm_status s = tm_npy_read(file, &t, &err);
        CHECK(s == TM_OK && t->dtype == TM_INT64 && t->rank == 2 &&
              t->nbytes == (size_t)tm_tensor_numel(t) * 8, "bert %s: %s", inputs[k],
              s == TM_OK ? "read" : err.message);
        if (s == TM_OK && !strcmp(inputs[k], "attention_mask")) {
            int ok = 1;
            for (int64_t i = 0; i < tm_tensor_numel(t); i++)
                ok &= ((int64_t *)t->data)[i] == 0 || ((int64_t *)t->data)[i] == 1;
            CHECK(ok, "bert attention_mask holds 0/1");
        }
        tm_tensor_free(t);
    }
    char path[1024];
    snprintf(path, sizeof path, "%s/tiny", models);
    walk(path, 0);
    CHECK(n_real > 0 && n_real_bad == 0, "%d of %d .npy files under %s read", n_real - n_real_bad,
          n_real, path);
    CHECK(n_rewrite_same == n_real, "%d of %d rewritten as numpy wrote them (%d of them "
          "Fortran-ordered, compared by value)", n_rewrite_same, n_real, n_fortran);
    check_fortran_pair(models);
}

/* ---- Names --------------------------------------------------------------------------------- */

static void check_encode(const char *name, const char *want) {
    char *enc = tm_name_encode(name);
    char *dec = enc ? tm_name_decode(enc) : NULL;
    CHECK(enc && !strcmp(enc, want), "encode '%s' = '%s', want '%s'", name, enc ? enc : "NULL",
          want);
    CHECK(dec && !strcmp(dec, name), "decode(encode('%s')) = '%s'", name, dec ? dec : "NULL");
    free(enc);
    free(dec);
}

static void check_decode(const char *s, const char *want) {
    char *dec = tm_name_decode(s);
    CHECK(dec && !strcmp(dec, want), "decode '%s' = '%s', want '%s'", s, dec ? dec : "NULL",
          want);
    free(dec);
}

static void test_names(void) {
    check_encode("input_ids", "input_ids");
    check_encode("past_key_values.0.key", "past_key_values.0.key");
    check_encode("A-Z_a-z.0-9", "A-Z_a-z.0-9");
    check_encode("/model/layer.0/Add:0", "%2Fmodel%2Flayer.0%2FAdd%3A0");
    check_encode("a b+c%d", "a%20b%2Bc%25d");
    check_encode("caf\xc3\xa9", "caf%C3%A9");
    check_encode("", "");
    check_encode("..", "..");
    check_encode("\x01\x7f\xff", "%01%7F%FF");
    check_decode("%2f%2F", "//");
    check_decode("%zz%4%", "%zz%4%");
    check_decode("%00x", "%00x");
    check_decode("100%", "100%");
    check_decode("%41%4a%4A", "AJJ");
    char all[256];
    for (int i = 1; i < 256; i++)
        all[i - 1] = (char)i;
    all[255] = 0;
    char *enc = tm_name_encode(all);
    char *dec = tm_name_decode(enc);
    int only_safe = 1;
    for (const char *p = enc; *p; p++)
        only_safe &= strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-%",
                            *p) != NULL;
    CHECK(only_safe && !strcmp(dec, all), "every byte 1..255 survives and encodes safely");
    free(enc);
    free(dec);
    CHECK(!tm_name_encode(NULL) && !tm_name_decode(NULL), "NULL in, NULL out");
}

int main(void) {
    const char *tmp = getenv("TMPDIR");
    snprintf(temp_dir, sizeof temp_dir, "%s/tm_test_npy_XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(temp_dir)) {
        printf("cannot make a temporary folder\n0 passed, 1 failed\n");
        return 1;
    }
    test_tensors();
    test_round_trips();
    test_writer_format();
    test_read_variants();
    test_malformed();
    test_sweeps();
    test_files();
    test_names();
    test_real_files();
    rmdir(temp_dir);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
