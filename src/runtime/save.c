/* tm_model_save: the public entry of the ONNX writer (../onnx/write.c) for a loaded model.
 * Not the writer itself. */
#include "runtime.h"
#include "../onnx/write.h"

tm_status tm_model_save(const tm_model *model, const char *path, int n,
                        const char *const *names, const tm_tensor *const *tensors,
                        const tm_save_options *opts, tm_error *err) {
    if (!model)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_model_save: model must not be NULL");
    return tm__onnx_save(model->onnx, path, n, names, tensors, opts, err);
}
