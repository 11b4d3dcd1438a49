/* Plain files of a Hub repo (tokenizer.json and its companions): hf://OWNER/REPO[@REV]
 * plus a file name, resolved in the cache and downloaded when missing. Not models: those
 * go through tm_hub_resolve, which also fetches their external data. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hub.h"
#include "internal.h"

tm_status tm_hub_resolve_file(const char *source, const char *file, char **local_path,
                              tm_error *err) {
    if (!source || !file || !local_path)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_hub_resolve_file: NULL argument");
    tm_hub_ctx h;
    tm_status st = tm_hub_ctx_init(&h, source, 0, err);
    if (st != TM_OK) return st;
    char *path = h.src.path && *h.src.path ? tm_hub_strf("%s/%s", h.src.path, file)
                                           : tm_hub_strf("%s", file);
    char *local = NULL, commit[129];
    if (!path) st = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    else st = tm_hub_ctx_resolve_file(&h, h.src.revision, path, &local, commit, err);
    free(path);
    if (st == TM_OK) *local_path = local;
    else free(local);
    tm_hub_ctx_free(&h);
    return st;
}
