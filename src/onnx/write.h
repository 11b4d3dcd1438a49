/* Saving a loaded model with some main-graph initializers replaced (write.c); the public
 * tm_model_save (../runtime/save.c) calls it. Not loading (model.h). */
#ifndef TM_ONNX_WRITE_H
#define TM_ONNX_WRITE_H

#include "model.h"

tm_status tm__onnx_save(const tm_onnx_model *m, const char *path, int n,
                        const char *const *names, const tm_tensor *const *tensors,
                        const tm_save_options *opts, tm_error *err);

#endif
