/* libFuzzer target: the standalone TensorProto, SequenceProto and OptionalProto readers of
 * the backend tests' .pb files. The first byte picks the reader, the rest is the message.
 * Not ModelProto (fuzz_onnx.c). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "core/tensor.h"
#include "onnx/model.h"

/* Reads every byte of t, so ASan sees a buffer shorter than its dims say. */
static void touch(const tm_tensor *t) {
    if (!t) abort();
    volatile uint8_t sink = 0;
    int64_t n = tm_tensor_numel(t);
    if (n < 0) abort();
    if (t->dtype == TM_STRING) {
        char *const *s = t->data;
        for (int64_t i = 0; i < n; i++)
            if (s[i]) sink ^= (uint8_t)strlen(s[i]);
    } else {
        if (t->nbytes != (size_t)n * tm_dtype_elem_size(t->dtype)) abort();
        const uint8_t *p = t->data;
        for (size_t i = 0; i < t->nbytes; i++) sink ^= p[i];
    }
    (void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    int which = data[0] % 3;
    data++;
    size--;
    tm_error err;
    memset(&err, 0, sizeof err);
    if (which == 0) {
        tm_tensor *t = NULL;
        if (tm_onnx_parse_tensor(data, size, &t, &err) == TM_OK) {
            touch(t);
            tm_tensor_free(t);
        } else if (t || !err.message[0]) {
            abort();
        }
        return 0;
    }
    tm_tensor **v = NULL;
    int n = -1, is_seq = 0;
    int st = which == 1 ? tm_onnx_parse_sequence(data, size, &v, &n, &err)
                        : tm_onnx_parse_optional(data, size, &v, &n, &is_seq, &err);
    if (st != TM_OK) {
        if (v || n != -1 || !err.message[0]) abort();
        return 0;
    }
    if (n < 0 || (n > 0 && !v)) abort();
    for (int i = 0; i < n; i++) {
        touch(v[i]);
        tm_tensor_free(v[i]);
    }
    free(v);
    return 0;
}
