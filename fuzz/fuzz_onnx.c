/* libFuzzer target: the ModelProto reader (tm_onnx_load_buffer) on arbitrary bytes, with
 * no model folder, so external data must be refused. Not lowering or graph checks: see
 * fuzz_model.c. Any input may only give TM_OK or an error with a message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "onnx/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tm_onnx_model *m = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    int st = tm_onnx_load_buffer(data, size, NULL, &m, &err);
    if (st == TM_OK) {
        if (!m || !m->graph) abort();       /* success must give a model with a graph */
        tm_onnx_model_free(m);
    } else if (m || !err.message[0]) {
        abort();                            /* errors leave *out alone and say why */
    }
    return 0;
}
