/* Image processors: preprocessor_config.json's image_processor_type turned into the steps
 * transformers.js 4.3's ImageProcessor.preprocess takes (RGB, resize, centre crop, rescale,
 * normalize, pad) for ViT, ConvNeXT, CLIP, DPT and DETR. Not the decoding
 * (src/media/image.c) nor the models. */
#ifndef TM_PIPELINES_IMAGE_PROCESSOR_H
#define TM_PIPELINES_IMAGE_PROCESSOR_H

#include <stdint.h>
#include "../../include/transmuter.h"
#include "../hub/json.h"
#include "../media/image.h"

typedef struct tm__image_proc tm__image_proc;

/* Reads a preprocessor_config.json object; `source` names it in errors. An unknown
 * image_processor_type or a setting we do not implement is TM_ERR_UNSUPPORTED naming it. */
tm_status tm__image_proc_open(const tm_json *config, const char *source, tm__image_proc **out,
                              tm_error *err);
void tm__image_proc_free(tm__image_proc *p);
const char *tm__image_proc_type(const tm__image_proc *p);
/* 1 when the processor also gives DETR's pixel_mask (int64 ones, (1, 64, 64)). */
int tm__image_proc_has_pixel_mask(const tm__image_proc *p);

/* One image (not modified) to pixel_values (1, C, H, W) float32; reshaped gets
 * (height, width) after resizing and cropping, before padding (reshaped_input_sizes). */
tm_status tm__image_proc_run(const tm__image_proc *p, const tm__image *image, tm_tensor **pixel_values,
                             int64_t reshaped[2], tm_error *err);

#endif
