/* libFuzzer target: the .npy reader (tm_npy_read_buffer) on arbitrary bytes.
 * Not the writer. A result must hold exactly the bytes its dtype and dims need. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "core/tensor.h"
#include "io/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tm_tensor *t = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status st = tm_npy_read_buffer(data, size, &t, &err);
    if (st != TM_OK) {
        if (t || !err.message[0]) abort();
        return 0;
    }
    if (!t) abort();
    int64_t n = tm_tensor_numel(t);
    if (n < 0 || tm_tensor_nbytes(t) != (size_t)n * tm_dtype_elem_size(tm_tensor_dtype(t)))
        abort();
    /* Touch every byte (strings: every element), so ASan sees a short buffer. */
    volatile uint8_t sink = 0;
    if (tm_tensor_dtype(t) == TM_STRING) {
        char **s = tm_tensor_data(t);
        for (int64_t i = 0; i < n; i++)
            if (s[i]) sink ^= (uint8_t)strlen(s[i]);
    } else {
        const uint8_t *p = tm_tensor_data_const(t);
        for (size_t i = 0; i < tm_tensor_nbytes(t); i++) sink ^= p[i];
    }
    (void)sink;
    tm_tensor_free(t);
    return 0;
}
