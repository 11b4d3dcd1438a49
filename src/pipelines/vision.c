/* What the vision tasks share: reading preprocessor_config.json into an image processor,
 * the call's image arguments (paths), and one image from file to model outputs. Not the
 * decoding (src/media/image.c) nor the preprocessing (image_processor.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pipelines.h"
#include "image_processor.h"
#include "../core/status.h"
#include "../media/image.h"

tm_status tm__vision_prepare(tm_pipeline *p, tm_error *err) {
    tm_json *config = NULL;
    char why[160];
    snprintf(why, sizeof why, "%s needs an image processor", p->task->name);
    tm_status s = tm__repo_json(p, "preprocessor_config.json", why, &config, err);
    if (s) return s;
    char source[1024];
    snprintf(source, sizeof source, "%s/preprocessor_config.json", p->repo->source);
    s = tm__image_proc_open(config, source, &p->image_proc, err);
    tm_json_free(config);
    return s;
}

tm_status tm__vision_inputs(const tm_json *inputs, const char ***paths, size_t *n, int *batched,
                            tm_error *err) {
    const tm_json *v = inputs->n > 0 ? &inputs->items[0] : NULL;
    if (v && v->type != TM_JSON_STRING && v->type != TM_JSON_ARRAY)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "images: a path to a PNG, JPEG or WebP file (or an array of them)");
    return tm__strings(v, "images", paths, n, batched, err);
}

void tm__softmax_f32(const float *x, size_t n, double *out) {
    if (n == 0) return;
    float max = x[0];
    for (size_t i = 1; i < n; i++)
        if (x[i] > max) max = x[i];
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += out[i] = (float)exp((double)x[i] - (double)max);
    for (size_t i = 0; i < n; i++) out[i] = (float)(out[i] / sum);
}

tm_status tm__vision_run(tm_pipeline *p, const char *path, int n_extra, const char *const *extra_names,
                         const tm_tensor *const *extra, int n_out, const char *const *names,
                         tm_tensor **out, int64_t size[2], tm_error *err) {
    int idx[8];
    if (n_out > 8 || n_extra > 6) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "too many inputs or outputs");
    for (int i = 0; i < n_out; i++) {
        idx[i] = tm_model_output_index(p->model, names[i]);
        if (idx[i] < 0)
            return tm__fail(err, TM_ERR_NOT_FOUND, "%s: the model has no output '%s'", p->onnx_file, names[i]);
    }
    tm__image im = {0};
    tm_status s = tm__image_load(path, &im, err);
    if (s) return s;
    tm_tensor *pixel_values = NULL, *pixel_mask = NULL;
    int64_t reshaped[2];
    s = tm__image_proc_run(p->image_proc, &im, &pixel_values, reshaped, err);
    const char *use_names[8];
    const tm_tensor *use[8];
    int n_in = 0;
    if (!s) {
        use_names[n_in] = "pixel_values";
        use[n_in++] = pixel_values;
    }
    /* DetrImageProcessor's mask: ones of (1, 64, 64) whatever the image's size, as
     * transformers.js feeds it (the export resizes it to each feature map) */
    if (!s && tm__image_proc_has_pixel_mask(p->image_proc) && tm_model_input_index(p->model, "pixel_mask") >= 0) {
        int64_t dims[3] = {1, 64, 64};
        pixel_mask = tm_tensor_new(TM_INT64, 3, dims);
        if (!pixel_mask) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
        for (int i = 0; !s && i < 64 * 64; i++) ((int64_t *)tm_tensor_data(pixel_mask))[i] = 1;
        use_names[n_in] = "pixel_mask";
        use[n_in++] = pixel_mask;
    }
    for (int i = 0; !s && i < n_extra; i++) {
        use_names[n_in] = extra_names[i];
        use[n_in++] = extra[i];
    }
    int n_all = tm_model_n_outputs(p->model);
    tm_tensor **all = s ? NULL : calloc((size_t)(n_all > 0 ? n_all : 1), sizeof *all);
    if (!s && !all) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    if (!s) s = tm_model_run(p->model, n_in, use_names, use, all, NULL, err);
    tm_tensor *got[8] = {0};
    for (int i = 0; !s && i < n_out; i++) {
        if (!all[idx[i]]) s = tm__fail(err, TM_ERR_NOT_FOUND, "model output '%s' is not a tensor", names[i]);
        else s = tm__to_f32(all[idx[i]], names[i], &got[i], err);
    }
    for (int i = 0; all && i < n_all; i++) tm_tensor_free(all[i]);
    free(all);
    tm_tensor_free(pixel_values);
    tm_tensor_free(pixel_mask);
    int64_t h = im.h, w = im.w;
    tm__image_clear(&im);
    if (s) {
        for (int i = 0; i < n_out; i++) tm_tensor_free(got[i]);
        return s;
    }
    for (int i = 0; i < n_out; i++) out[i] = got[i];
    size[0] = h;
    size[1] = w;
    return TM_OK;
}
