/* hf:// sources: `hf://OWNER/REPO/PATH[@REVISION]` resolved to a file in the Hugging Face
 * cache (the layout huggingface_hub uses, shared with it both ways), downloading the model
 * and the external-data files it names when they are missing; and listing a repo's .onnx
 * files. Not the model loader: tm_model_load maps the returned path as any other file. */
#ifndef TM_HUB_HUB_H
#define TM_HUB_HUB_H

#include <stdio.h>
#include "../../include/transmuter.h"

typedef struct tm_hub_source {
    char *owner;
    char *repo;                   /* the repo id is owner/repo */
    char *path;                   /* file or folder in the repo; "" when none was given */
    char *revision;               /* branch, tag or commit; "main" by default */
} tm_hub_source;

/* Whether s starts with "hf://". */
int tm_hub_is_source(const char *s);

/* Parses `hf://OWNER/REPO[/PATH][@REVISION]`; the revision may also follow the repo
 * (`hf://OWNER/REPO@REVISION/PATH`, as huggingface_hub's HfFileSystem writes it, with '/'
 * in it written %2F). need_path: a file path is required. */
tm_status tm_hub_parse(const char *source, int need_path, tm_hub_source *out, tm_error *err);
void tm_hub_source_free(tm_hub_source *s);

/* Resolves a hf:// source to the path of the model in the cache's snapshot folder
 * (snapshots/<commit>/<path>), downloading it and its external data when needed, or
 * using the cache alone when offline or when the Hub cannot be reached. *local_path is
 * malloc'ed. Errors: TM_ERR_NETWORK, TM_ERR_NOT_FOUND, TM_ERR_IO, TM_ERR_INVALID_ARGUMENT. */
tm_status tm_hub_resolve(const char *source, char **local_path, tm_error *err);

/* Resolves the plain file `file` of hf://OWNER/REPO[/FOLDER][@REVISION] (source) to its
 * path in the cache, downloading it when needed (files.c); as tm_hub_resolve otherwise,
 * TM_ERR_NOT_FOUND when the repo has no such file. */
tm_status tm_hub_resolve_file(const char *source, const char *file, char **local_path,
                              tm_error *err);

/* Prints the .onnx files of a repo (under PATH when given) with their sizes, variants and
 * external-data files, from the Hub's file tree, or from the cache when offline. */
tm_status tm_hub_list(const char *source, FILE *out, tm_error *err);

/* The variant a file name announces, as transformers.js names its exports:
 * model.onnx "fp32", model_fp16.onnx "fp16", model_q4f16.onnx "q4f16",
 * model_quantized.onnx "int8", ... */
const char *tm_hub_variant(const char *file_name);

/* For the loader's confinement of external data: whether real_path (a realpath) is a blob
 * of the same cache repo as real_dir, a folder inside one of its snapshots. Snapshot files
 * are links to ../../blobs/<etag>, outside the snapshot folder by design. */
int tm_hub_is_cache_blob_of(const char *real_dir, const char *real_path);

#endif
