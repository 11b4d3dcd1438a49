/* What the hub's files share: the settings read from the environment, the cache layout
 * helpers (cache.c), the verified download of one blob (download.c) and the external-data
 * scan (extdata.c). Not for use outside src/hub: hub.h is the interface. */
#ifndef TM_HUB_INTERNAL_H
#define TM_HUB_INTERNAL_H

#include <stdint.h>
#include "../core/status.h"
#include "hub.h"

/* Settings, as huggingface_hub reads them (constants.py), plus our own TM_HUB_REF_TTL. */
typedef struct tm_hub_config {
    char *endpoint;               /* HF_ENDPOINT without a trailing '/' */
    char *cache_dir;              /* HF_HUB_CACHE */
    char *token;                  /* HF_TOKEN or the token file; NULL for none */
    int offline;                  /* HF_HUB_OFFLINE */
    int progress;                 /* draw progress bars */
    long etag_timeout;            /* HF_HUB_ETAG_TIMEOUT: seconds for metadata requests */
    long download_timeout;        /* HF_HUB_DOWNLOAD_TIMEOUT: seconds without data */
    long ref_ttl;                 /* seconds a cached branch/tag is trusted without asking */
} tm_hub_config;

tm_status tm_hub_config_load(tm_hub_config *c, tm_error *err);
void tm_hub_config_free(tm_hub_config *c);

/* ---- cache.c: the huggingface_hub cache layout -------------------------------------- */

/* A malloc'ed printf; NULL when out of memory. */
char *tm_hub_strf(const char *fmt, ...) TM_PRINTF(1, 2);
/* mkdir -p; 0, or -1 with errno. */
int tm_hub_mkdirs(const char *dir);
/* mkdir -p of the folder that will hold path. */
int tm_hub_mkdirs_for(const char *path);
int tm_hub_is_file(const char *path);
/* 40 lowercase hex digits: a full commit hash, which never moves. */
int tm_hub_is_commit(const char *s);
/* A name safe as one path component: [A-Za-z0-9._+=-], not "." or "..", 1..128 bytes. */
int tm_hub_safe_name(const char *s);
/* The commit that refs/<revision> holds, and how many seconds ago it was last confirmed
 * (its mtime). 1 when found, 0 when not. */
int tm_hub_read_ref(const char *repo_dir, const char *revision, char commit[129],
                    double *age_seconds);
/* Records revision -> commit (atomically); when it already says so, marks it confirmed
 * now. 0, or -1 with errno. */
int tm_hub_write_ref(const char *repo_dir, const char *revision, const char *commit);
/* snapshots/<commit>/<path> -> ../../blobs/<etag> (one more ../ per folder of path),
 * replacing any link there atomically. 0, or -1 with errno. */
int tm_hub_link(const char *repo_dir, const char *commit, const char *path, const char *etag);
/* An exclusive flock on lock_path (created as needed), waiting for other processes; the
 * descriptor to pass to tm_hub_unlock, or -1 with errno. */
int tm_hub_lock(const char *lock_path, const char *what, int verbose);
void tm_hub_unlock(int fd);

/* ---- download.c: one blob ----------------------------------------------------------- */

typedef struct tm_hub_fetch {
    const char *source;           /* for messages: the hf:// string */
    const char *url;              /* where the bytes are (the CDN for LFS files) */
    const char *token;            /* NULL when url is on another host than the Hub */
    const char *blob_path;        /* blobs/<etag>; written as <blob_path>.incomplete first */
    const char *display;          /* file name for the progress bar */
    const char *sha256;           /* expected digest (lowercase hex), or NULL */
    int64_t size;                 /* expected size, -1 when unknown */
} tm_hub_fetch;

/* Downloads (resuming a previous .incomplete), verifies size and sha256, then renames into
 * blob_path. The caller holds the blob's lock. */
tm_status tm_hub_download(const tm_hub_config *c, const tm_hub_fetch *f, tm_error *err);

/* Sleeps before try number `attempt` (1-based): 0.5 s, 1 s, 2 s, ... up to 8 s. */
void tm_hub_backoff(int attempt);

/* ---- hub.c: a request's context, shared with list.c ---------------------------------- */

typedef struct tm_hub_ctx {
    tm_hub_config cfg;
    tm_hub_source src;
    const char *source;           /* the hf:// string as given, for messages */
    char *repo_dir;               /* <cache>/models--OWNER--REPO */
    char *locks_dir;              /* <cache>/.locks/models--OWNER--REPO */
} tm_hub_ctx;

tm_status tm_hub_ctx_init(tm_hub_ctx *h, const char *source, int need_path, tm_error *err);
void tm_hub_ctx_free(tm_hub_ctx *h);
/* The snapshot path of a plain file of the repo at revision, downloaded when missing
 * (hub.c's resolve_file; files.c uses it). */
tm_status tm_hub_ctx_resolve_file(tm_hub_ctx *h, const char *revision, const char *path,
                                  char **out, char commit[129], tm_error *err);

typedef struct tm_hub_file {
    char *path;
    int64_t size;                 /* the file's own size (an LFS file's, not its pointer's) */
} tm_hub_file;

/* Every file of the repo at a revision, from the Hub's tree API (all pages). On failure,
 * *offline_ok says whether the cache may stand in (network down, 5xx, 401/403). */
tm_status tm_hub_tree(tm_hub_ctx *h, const char *revision, tm_hub_file **files, int *n,
                      int *offline_ok, tm_error *err);
void tm_hub_files_free(tm_hub_file *files, int n);
/* The commit a revision stands for in the cache (itself for a full hash), or 0. */
int tm_hub_cached_commit(const tm_hub_ctx *h, const char *revision, char commit[129],
                         double *age_seconds);
/* "1.5K", "86.2M": sizes as du -h writes them. */
void tm_hub_human_bytes(char *buf, size_t cap, double bytes);

/* ---- extdata.c ---------------------------------------------------------------------- */

/* The distinct external-data locations of every tensor of an ONNX model (initializers,
 * sparse initializers, Constant/attribute tensors, subgraphs, functions), as written.
 * Returns TM_OK with *out (a NULL-terminated array, free with tm_hub_strings_free). */
tm_status tm_hub_external_locations(const char *model_path, char ***out, tm_error *err);
void tm_hub_strings_free(char **list);

#endif
