/* hf:// sources: parsing, and resolving a model file (with the external data it names) to
 * the Hugging Face cache by huggingface_hub's rules (file_download.py): HEAD the resolve
 * URL, read X-Repo-Commit / X-Linked-Etag / X-Linked-Size / Location, fetch the blob, link
 * the snapshot, fall back to the cache when offline. Not listing (list.c) or transfers
 * (download.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "http.h"
#include "internal.h"

enum { HEAD_ATTEMPTS = 4, MAX_RELATIVE_REDIRECTS = 5, TREE_BODY_LIMIT = 64 << 20,
       MAX_TREE_PAGES = 1000 };

int tm_hub_is_source(const char *s) { return s && !strncmp(s, "hf://", 5); }

/* ---- Parsing ---------------------------------------------------------------------------- */

void tm_hub_source_free(tm_hub_source *s) {
    if (!s) return;
    free(s->owner);
    free(s->repo);
    free(s->path);
    free(s->revision);
    memset(s, 0, sizeof *s);
}

/* Hub names: letters, digits, '-', '_', '.'; not starting with '.' or '-', no "--" or
 * ".." (the cache folder joins owner and repo with "--"). */
static int valid_repo_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 96 || s[0] == '.' || s[0] == '-' || strstr(s, "--") || strstr(s, ".."))
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_' || c == '.'))
            return 0;
    }
    return 1;
}

/* Relative, no empty, "." or ".." segment, no control bytes: it becomes a cache path. */
static int valid_rel_path(const char *s, int allow_empty) {
    if (!s[0]) return allow_empty;
    if (s[0] == '/' || s[strlen(s) - 1] == '/') return 0;
    for (const char *seg = s; seg;) {
        const char *slash = strchr(seg, '/');
        size_t n = slash ? (size_t)(slash - seg) : strlen(seg);
        if (n == 0 || (n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
            return 0;
        seg = slash ? slash + 1 : NULL;
    }
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p < 0x20 || *p == 0x7f || *p == '\\') return 0;
    return 1;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* %XX decoding, in place (HfFileSystem writes "refs/pr/1" as "refs%2Fpr%2F1"). */
static void percent_decode(char *s) {
    char *o = s;
    for (char *p = s; *p; p++) {
        if (p[0] == '%' && hex_digit(p[1]) >= 0 && hex_digit(p[2]) >= 0) {
            *o++ = (char)(hex_digit(p[1]) * 16 + hex_digit(p[2]));
            p += 2;
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
}

static char *dup_span(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

/* Splits "OWNER/REPO[@REV][/PATH]" or "OWNER/REPO/PATH[@REV]" into s's fields. */
static int split_source(const char *rest, tm_hub_source *s) {
    const char *slash = strchr(rest, '/');
    if (!slash) return 0;
    s->owner = dup_span(rest, (size_t)(slash - rest));
    const char *repo = slash + 1, *end = strchr(repo, '/');
    size_t repo_len = end ? (size_t)(end - repo) : strlen(repo);
    const char *at = memchr(repo, '@', repo_len);
    s->repo = dup_span(repo, at ? (size_t)(at - repo) : repo_len);
    if (at) s->revision = dup_span(at + 1, repo_len - (size_t)(at - repo) - 1);
    if (s->revision) percent_decode(s->revision);
    s->path = dup_span(end ? end + 1 : "", end ? strlen(end + 1) : 0);
    if (!s->owner || !s->repo || !s->path || (at && !s->revision)) return 0;
    char *path_at = at ? NULL : strrchr(s->path, '@');
    if (path_at) {
        s->revision = dup_span(path_at + 1, strlen(path_at + 1));
        *path_at = '\0';
    }
    if (!s->revision) s->revision = dup_span("main", 4);
    return s->revision != NULL;
}

tm_status tm_hub_parse(const char *source, int need_path, tm_hub_source *out, tm_error *err) {
    static const char *form = "expected hf://OWNER/REPO/PATH[@REVISION]";
    if (!tm_hub_is_source(source))
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s: not an hf:// source", source ? source : "(null)");
    tm_hub_source s = {0};
    if (!split_source(source + 5, &s)) {
        int oom = s.owner && s.repo && s.path;
        tm_hub_source_free(&s);
        return oom ? tm__fail(err, TM_ERR_NO_MEMORY, "out of memory")
                   : tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s: %s", source, form);
    }
    const char *why = NULL;
    if (!valid_repo_name(s.owner) || !valid_repo_name(s.repo))
        why = "the owner and repository names allow letters, digits, '-', '_' and '.'";
    else if (!valid_rel_path(s.path, !need_path))
        why = need_path && !s.path[0] ? "no file path after the repository"
                                      : "the path must be relative, without '.' or '..' parts";
    else if (!valid_rel_path(s.revision, 0) || strchr(s.revision, '@'))
        why = "the revision must be a branch, tag or commit name";
    if (why) {
        tm_hub_source_free(&s);
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "%s: %s (%s)", source, why, form);
    }
    *out = s;
    return TM_OK;
}

/* ---- Context ---------------------------------------------------------------------------- */

tm_status tm_hub_ctx_init(tm_hub_ctx *h, const char *source, int need_path, tm_error *err) {
    memset(h, 0, sizeof *h);
    h->source = source;
    tm_status st = tm_hub_parse(source, need_path, &h->src, err);
    if (st != TM_OK) return st;
    st = tm_hub_config_load(&h->cfg, err);
    if (st != TM_OK) {
        tm_hub_source_free(&h->src);
        return st;
    }
    h->repo_dir = tm_hub_strf("%s/models--%s--%s", h->cfg.cache_dir, h->src.owner, h->src.repo);
    h->locks_dir = tm_hub_strf("%s/.locks/models--%s--%s", h->cfg.cache_dir, h->src.owner,
                               h->src.repo);
    if (!h->repo_dir || !h->locks_dir) {
        tm_hub_ctx_free(h);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    }
    return TM_OK;
}

void tm_hub_ctx_free(tm_hub_ctx *h) {
    tm_hub_source_free(&h->src);
    tm_hub_config_free(&h->cfg);
    free(h->repo_dir);
    free(h->locks_dir);
    memset(h, 0, sizeof *h);
}

int tm_hub_cached_commit(const tm_hub_ctx *h, const char *revision, char commit[129],
                         double *age_seconds) {
    if (tm_hub_is_commit(revision)) {
        snprintf(commit, 129, "%s", revision);
        if (age_seconds) *age_seconds = 0;
        return 1;
    }
    return tm_hub_read_ref(h->repo_dir, revision, commit, age_seconds);
}

/* ---- Errors ------------------------------------------------------------------------------ */

static const char *login_hint =
    "give a token with access: set HF_TOKEN=hf_... or run `huggingface-cli login`";

/* Network failures and answers the cache may stand in for, as huggingface_hub decides:
 * no connection, timeouts, 5xx and 429, and 401/403 (a token that expired). */
static int cache_may_answer(const tm_http_reply *r) {
    return tm_http_transient(r) || r->failure == TM_HTTP_OTHER || r->status == 401 ||
           r->status == 403;
}

static tm_status denied(tm_hub_ctx *h, const tm_http_reply *r, tm_error *err) {
    const char *id_owner = h->src.owner, *id_repo = h->src.repo;
    if (r->error_code && !strcmp(r->error_code, "GatedRepo"))
        return tm__fail(err, TM_ERR_NETWORK, "%s: %s/%s is gated (HTTP %ld): accept its "
                        "conditions at %s/%s/%s, then %s", h->source, id_owner, id_repo,
                        r->status, h->cfg.endpoint, id_owner, id_repo, login_hint);
    if (h->cfg.token)
        return tm__fail(err, TM_ERR_NETWORK, "%s: access to %s/%s denied (HTTP %ld): the token "
                        "sent (HF_TOKEN or the token file) is invalid or has no access to it, "
                        "or the repository does not exist", h->source, id_owner, id_repo,
                        r->status);
    return tm__fail(err, TM_ERR_NETWORK, "%s: access to %s/%s denied (HTTP %ld): it is private "
                    "or gated, or does not exist; if you have access, %s", h->source, id_owner,
                    id_repo, r->status, login_hint);
}

static tm_status unreachable(tm_hub_ctx *h, const char *revision, const char *path,
                             const tm_http_reply *r, tm_error *err) {
    char what[512];
    if (r->failure == TM_HTTP_TIMEOUT)
        snprintf(what, sizeof what, "the Hub at %s did not answer in time", h->cfg.endpoint);
    else if (r->failure != TM_HTTP_NO_FAILURE)
        snprintf(what, sizeof what, "cannot reach the Hub at %s (%s)", h->cfg.endpoint,
                 r->failure_text);
    else
        snprintf(what, sizeof what, "the Hub at %s answered HTTP %ld", h->cfg.endpoint, r->status);
    return tm__fail(err, TM_ERR_NETWORK, "%s: %s, and %s%s%s at revision '%s' is not in the "
                    "cache (%s)", h->source, what, path[0] ? "'" : "",
                    path[0] ? path : "the repository", path[0] ? "'" : "", revision, h->repo_dir);
}

/* ", onnx/a.onnx, onnx/b.onnx" into buf, as many as fit. */
static void onnx_names(tm_hub_file *files, int n, char *buf, size_t cap, int *count) {
    size_t len = 0;
    int shown = 0;
    *count = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        size_t l = strlen(files[i].path);
        if (l < 5 || strcmp(files[i].path + l - 5, ".onnx")) continue;
        (*count)++;
        if (len + l + 3 >= cap) continue;
        len += (size_t)snprintf(buf + len, cap - len, "%s%s", shown ? ", " : "", files[i].path);
        shown++;
    }
    if (shown < *count) snprintf(buf + len, cap - len, ", ... (%d more)", *count - shown);
}

/* A missing file: name what the repo does have, so the next try can succeed. */
static tm_status no_such_file(tm_hub_ctx *h, const char *revision, const char *path,
                              tm_error *err) {
    tm_hub_file *files = NULL;
    int n = 0, fallback, count = 0;
    char names[600] = "";
    tm_error ignored;
    if (tm_hub_tree(h, revision, &files, &n, &fallback, &ignored) == TM_OK)
        onnx_names(files, n, names, sizeof names, &count);
    tm_hub_files_free(files, n);
    if (count)
        return tm__fail(err, TM_ERR_NOT_FOUND, "%s: no file '%s' in %s/%s at revision '%s'; its "
                        ".onnx files are: %s", h->source, path, h->src.owner, h->src.repo,
                        revision, names);
    return tm__fail(err, TM_ERR_NOT_FOUND, "%s: no file '%s' in %s/%s at revision '%s'%s",
                    h->source, path, h->src.owner, h->src.repo, revision,
                    n ? " (and it has no .onnx files)" : "");
}

/* The error for a failed request about path ("" for the repository) at revision. */
static tm_status request_error(tm_hub_ctx *h, const char *revision, const char *path,
                               const tm_http_reply *r, tm_error *err) {
    if (r->failure != TM_HTTP_NO_FAILURE || r->status >= 500 || r->status == 429)
        return unreachable(h, revision, path, r, err);
    if (r->status == 401 || r->status == 403) return denied(h, r, err);
    const char *code = r->error_code ? r->error_code : "";
    if (r->status == 404 && !strcmp(code, "RevisionNotFound"))
        return tm__fail(err, TM_ERR_NOT_FOUND, "%s: revision '%s' not found in %s/%s (a branch, "
                        "tag or commit)", h->source, revision, h->src.owner, h->src.repo);
    if (r->status == 404 && path[0] && (!strcmp(code, "EntryNotFound") || r->repo_commit))
        return no_such_file(h, revision, path, err);
    if (r->status == 404)
        return tm__fail(err, TM_ERR_NOT_FOUND, "%s: repository %s/%s not found on %s",
                        h->source, h->src.owner, h->src.repo, h->cfg.endpoint);
    return tm__fail(err, TM_ERR_NETWORK, "%s: the Hub answered HTTP %ld%s%s", h->source,
                    r->status, r->error_message ? ": " : "",
                    r->error_message ? r->error_message : "");
}

/* ---- The tree API --------------------------------------------------------------------- */

#include "json.h"

void tm_hub_files_free(tm_hub_file *files, int n) {
    for (int i = 0; files && i < n; i++) free(files[i].path);
    free(files);
}

static int add_tree_entries(const tm_json *page, tm_hub_file **files, int *n) {
    if (!page || page->type != TM_JSON_ARRAY) return 0;
    for (int i = 0; i < page->n; i++) {
        const tm_json *e = &page->items[i];
        const char *type = tm_json_get_string(e, "type"), *path = tm_json_get_string(e, "path");
        if (!type || strcmp(type, "file") || !path) continue;
        const tm_json *size = tm_json_get(tm_json_get(e, "lfs"), "size");
        if (!size) size = tm_json_get(e, "size");
        tm_hub_file *grown = realloc(*files, (size_t)(*n + 1) * sizeof *grown);
        if (!grown) return 0;
        *files = grown;
        grown[*n].path = tm_hub_strf("%s", path);
        grown[*n].size = size && size->type == TM_JSON_NUMBER ? (int64_t)size->number : -1;
        if (!grown[*n].path) return 0;
        (*n)++;
    }
    return 1;
}

/* GET with the retries a flaky network deserves. */
static void get_with_retries(tm_hub_ctx *h, const char *url, tm_http_reply *r) {
    const char *token = tm_http_same_origin(url, h->cfg.endpoint) ? h->cfg.token : NULL;
    for (int attempt = 1;; attempt++) {
        tm_http_request rq = {.url = url, .token = token, .timeout = h->cfg.etag_timeout,
                              .body_limit = TREE_BODY_LIMIT};
        tm_http_perform(&rq, r);
        if (!tm_http_transient(r) || attempt == HEAD_ATTEMPTS) return;
        tm_hub_backoff(attempt);
    }
}

tm_status tm_hub_tree(tm_hub_ctx *h, const char *revision, tm_hub_file **files, int *n,
                      int *offline_ok, tm_error *err) {
    *files = NULL;
    *n = 0;
    *offline_ok = 0;
    char *rev = tm_http_quote(revision, 0);
    char *url = rev ? tm_hub_strf("%s/api/models/%s/%s/tree/%s?recursive=true", h->cfg.endpoint,
                                  h->src.owner, h->src.repo, rev) : NULL;
    free(rev);
    tm_http_reply r = {0};
    tm_status st = url ? TM_OK : tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (int page = 0; st == TM_OK && url && page < MAX_TREE_PAGES; page++) {
        get_with_retries(h, url, &r);
        if (r.failure != TM_HTTP_NO_FAILURE || r.status != 200) {
            *offline_ok = cache_may_answer(&r);
            st = request_error(h, revision, "", &r, err);
            break;
        }
        tm_json *doc = tm_json_parse(r.body, r.body_len);
        int ok = add_tree_entries(doc, files, n);
        tm_json_free(doc);
        if (!ok) st = tm__fail(err, TM_ERR_NETWORK, "%s: the Hub's file list (%s) is not what "
                               "was expected", h->source, url);
        free(url);
        url = r.link_next ? tm_hub_strf("%s", r.link_next) : NULL;
    }
    free(url);
    tm_http_reply_clear(&r);
    if (st != TM_OK) {
        tm_hub_files_free(*files, *n);
        *files = NULL;
        *n = 0;
    }
    return st;
}

/* ---- File metadata (HEAD) ----------------------------------------------------------- */

typedef struct file_meta {
    char commit[129];
    char etag[129];
    char *location;               /* where the bytes are: the CDN for LFS files */
    char *url;                    /* the resolve URL answered (after relative redirects) */
    int64_t size;
} file_meta;

static char *resolve_url(const tm_hub_ctx *h, const char *revision, const char *path) {
    char *rev = tm_http_quote(revision, 0), *p = tm_http_quote(path, 1);
    char *url = rev && p ? tm_hub_strf("%s/%s/%s/resolve/%s/%s", h->cfg.endpoint, h->src.owner,
                                       h->src.repo, rev, p) : NULL;
    free(rev);
    free(p);
    return url;
}

/* scheme://host[:port] of url, followed by an absolute path. */
static char *same_site(const char *url, const char *abs_path) {
    const char *host = strstr(url, "://");
    const char *slash = host ? strchr(host + 3, '/') : NULL;
    size_t n = slash ? (size_t)(slash - url) : strlen(url);
    return tm_hub_strf("%.*s%s", (int)n, url, abs_path);
}

/* One HEAD, following only relative redirects (a renamed repo), never one to a CDN. */
static void head_once(tm_hub_ctx *h, file_meta *m, tm_http_reply *r) {
    for (int hop = 0; hop <= MAX_RELATIVE_REDIRECTS; hop++) {
        tm_http_request rq = {.url = m->url, .token = h->cfg.token, .head = 1,
                              .timeout = h->cfg.etag_timeout, .total_timeout = h->cfg.etag_timeout};
        tm_http_perform(&rq, r);
        int relative = r->status >= 300 && r->status < 400 && r->location && r->location[0] == '/';
        if (!relative) return;
        char *next = same_site(m->url, r->location);
        if (!next) return;
        free(m->url);
        m->url = next;
    }
}

/* Python's _normalize_etag: etag.lstrip("W/").strip('"'). */
static void normalize_etag(const char *in, char out[129]) {
    while (*in == 'W' || *in == '/') in++;
    while (*in == '"') in++;
    size_t n = strlen(in);
    while (n && in[n - 1] == '"') n--;
    snprintf(out, 129, "%.*s", (int)(n < 128 ? n : 128), in);
}

static tm_status read_meta(tm_hub_ctx *h, const tm_http_reply *r, file_meta *m, tm_error *err) {
    const char *etag = r->linked_etag ? r->linked_etag : r->etag;
    if (etag) normalize_etag(etag, m->etag);
    snprintf(m->commit, sizeof m->commit, "%s", r->repo_commit ? r->repo_commit : "");
    m->size = r->linked_size >= 0 ? r->linked_size : r->content_length;
    m->location = tm_hub_strf("%s", r->location ? r->location : m->url);
    if (!m->location) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    /* Both become file names in the cache: nothing else than a plain name is accepted. */
    if (!tm_hub_safe_name(m->commit))
        return tm__fail(err, TM_ERR_NETWORK, "%s: %s did not answer like the Hugging Face Hub "
                        "(no usable X-Repo-Commit header); check HF_ENDPOINT and any proxy",
                        h->source, h->cfg.endpoint);
    if (!tm_hub_safe_name(m->etag))
        return tm__fail(err, TM_ERR_NETWORK, "%s: the Hub sent no usable ETag for the file, so "
                        "it cannot be cached reliably", h->source);
    if (m->size < 0)
        return tm__fail(err, TM_ERR_NETWORK, "%s: the Hub did not say the size of the file",
                        h->source);
    return TM_OK;
}

/* ---- Resolving one file ------------------------------------------------------------- */

static char *snapshot_path(const tm_hub_ctx *h, const char *commit, const char *path) {
    return tm_hub_strf("%s/snapshots/%s/%s", h->repo_dir, commit, path);
}

/* The cached file for revision, or NULL; commit and age are set when the revision is
 * known to the cache even if the file is not. */
static char *cached_file(const tm_hub_ctx *h, const char *revision, const char *path,
                         char commit[129], double *age) {
    *age = 1e300;
    if (!tm_hub_cached_commit(h, revision, commit, age)) return NULL;
    char *p = snapshot_path(h, commit, path);
    if (p && tm_hub_is_file(p)) return p;
    free(p);
    return NULL;
}

static void note_cache_use(const tm_hub_ctx *h, const char *path, const char *commit,
                           const tm_http_reply *r) {
    if (!h->cfg.progress) return;
    fprintf(stderr, "transmuter: the Hub cannot be used (%s); using the cached %s (commit %.12s)\n",
            r->failure != TM_HTTP_NO_FAILURE ? r->failure_text : "an HTTP error", path, commit);
}

static void meta_free(file_meta *m) {
    free(m->location);
    free(m->url);
}

/* Lock, download if the blob is still missing (another process may have just fetched
 * it), link the snapshot entry. */
static tm_status fetch_blob(tm_hub_ctx *h, const file_meta *m, const char *path,
                            tm_error *err) {
    char *blob = tm_hub_strf("%s/blobs/%s", h->repo_dir, m->etag);
    char *lock = tm_hub_strf("%s/%s.lock", h->locks_dir, m->etag);
    if (!blob || !lock) {
        free(blob);
        free(lock);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    }
    tm_status st = TM_OK;
    int fd = tm_hub_lock(lock, path, h->cfg.progress);
    if (fd < 0) st = tm__fail(err, TM_ERR_IO, "%s: cannot lock '%s': %s", h->source, lock,
                              strerror(errno));
    if (st == TM_OK && !tm_hub_is_file(blob)) {
        /* An LFS file's ETag is its SHA-256; a git file's is a git blob SHA-1. */
        int lfs = strlen(m->etag) == 64 && strspn(m->etag, "0123456789abcdef") == 64;
        tm_hub_fetch f = {.source = h->source, .url = m->location, .blob_path = blob,
                          .display = path, .size = m->size,
                          .token = tm_http_same_origin(m->url, m->location) ? h->cfg.token : NULL,
                          .sha256 = lfs ? m->etag : NULL};
        st = tm_hub_download(&h->cfg, &f, err);
    }
    if (st == TM_OK && tm_hub_link(h->repo_dir, m->commit, path, m->etag) != 0)
        st = tm__fail(err, TM_ERR_IO, "%s: cannot link '%s' in the cache snapshot %s: %s",
                      h->source, path, m->commit, strerror(errno));
    tm_hub_unlock(fd);
    free(blob);
    free(lock);
    return st;
}

static int request_failed(const tm_http_reply *r) {
    return r->failure != TM_HTTP_NO_FAILURE || r->status >= 400;
}

/* Metadata in hand: record the ref, then the snapshot entry (fetching its blob). */
static tm_status materialize(tm_hub_ctx *h, const char *revision, const file_meta *m,
                             const char *path, char **out, char commit[129], tm_error *err) {
    if (strcmp(revision, m->commit)) tm_hub_write_ref(h->repo_dir, revision, m->commit);
    char *local = snapshot_path(h, m->commit, path);
    if (!local) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    tm_status st = tm_hub_is_file(local) ? TM_OK : fetch_blob(h, m, path, err);
    if (st != TM_OK) {
        free(local);
        return st;
    }
    snprintf(commit, 129, "%s", m->commit);
    *out = local;
    return TM_OK;
}

/* Asks the Hub; when it cannot answer and the cache can (huggingface_hub's fallback),
 * the cached file is used. Takes ownership of cached. */
static tm_status resolve_online(tm_hub_ctx *h, const char *revision, const char *path,
                                char *cached, const char *cached_commit, char **out,
                                char commit[129], tm_error *err) {
    file_meta m = {.url = resolve_url(h, revision, path)};
    if (!m.url) {
        free(cached);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    }
    tm_http_reply r = {0};
    head_once(h, &m, &r);
    tm_status st;
    if (request_failed(&r) && cached && cache_may_answer(&r)) {
        note_cache_use(h, path, cached_commit, &r);
        snprintf(commit, 129, "%s", cached_commit);
        *out = cached;
        cached = NULL;
        st = TM_OK;
    } else {
        /* Nothing cached to fall back on: worth a few more tries. */
        for (int attempt = 1; request_failed(&r) && tm_http_transient(&r) &&
                              attempt < HEAD_ATTEMPTS; attempt++) {
            tm_hub_backoff(attempt);
            head_once(h, &m, &r);
        }
        st = request_failed(&r) ? request_error(h, revision, path, &r, err)
                                : read_meta(h, &r, &m, err);
        if (st == TM_OK) st = materialize(h, revision, &m, path, out, commit, err);
    }
    free(cached);
    meta_free(&m);
    tm_http_reply_clear(&r);
    return st;
}

/* The snapshot path of `path` at `revision`, downloading it when it is not cached (or when
 * a cached branch is older than TM_HUB_REF_TTL and the Hub has moved it). */
static tm_status resolve_file(tm_hub_ctx *h, const char *revision, const char *path,
                              char **out, char commit[129], tm_error *err) {
    char cached_commit[129] = "";
    double age;
    char *cached = cached_file(h, revision, path, cached_commit, &age);
    if (cached && (h->cfg.offline || age < (double)h->cfg.ref_ttl)) {
        snprintf(commit, 129, "%s", cached_commit);
        *out = cached;
        return TM_OK;
    }
    if (h->cfg.offline) {
        free(cached);
        return tm__fail(err, TM_ERR_NETWORK, "%s: offline (HF_HUB_OFFLINE is set) and '%s' at "
                        "revision '%s' is not in the cache (%s)", h->source, path, revision,
                        h->repo_dir);
    }
    return resolve_online(h, revision, path, cached, cached_commit, out, commit, err);
}

/* ---- A model and its external data ---------------------------------------------------- */

/* folder(model_path) + "/" + location with "." parts dropped; NULL when it would leave the
 * repository or is not a plain relative path (the loader then reports the location). */
static char *join_location(const char *model_path, const char *location) {
    const char *slash = strrchr(model_path, '/');
    char *joined = slash ? tm_hub_strf("%.*s/%s", (int)(slash - model_path), model_path, location)
                         : tm_hub_strf("%s", location);
    if (!joined) return NULL;
    char *o = joined;
    for (char *seg = joined; *seg;) {
        char *end = strchr(seg, '/');
        size_t n = end ? (size_t)(end - seg) : strlen(seg);
        if (!(n == 0 || (n == 1 && seg[0] == '.'))) {
            if (o != joined) *o++ = '/';
            memmove(o, seg, n);
            o += n;
        }
        seg += n + (end != NULL);
    }
    *o = '\0';
    if (!valid_rel_path(joined, 0)) {
        free(joined);
        return NULL;
    }
    return joined;
}

static tm_status fetch_external_data(tm_hub_ctx *h, const char *model_local,
                                     const char *commit, tm_error *err) {
    char **locations = NULL;
    tm_status st = tm_hub_external_locations(model_local, &locations, err);
    for (int i = 0; st == TM_OK && locations[i]; i++) {
        char *path = join_location(h->src.path, locations[i]);
        if (!path) continue;
        char *local = NULL, ignored[129];
        /* At the model's commit, so that weights and graph always match. */
        st = resolve_file(h, commit, path, &local, ignored, err);
        free(local);
        free(path);
    }
    tm_hub_strings_free(locations);
    return st;
}

tm_status tm_hub_resolve(const char *source, char **local_path, tm_error *err) {
    if (!source || !local_path)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_hub_resolve: NULL argument");
    tm_hub_ctx h;
    tm_status st = tm_hub_ctx_init(&h, source, 1, err);
    if (st != TM_OK) return st;
    char *local = NULL, commit[129];
    st = resolve_file(&h, h.src.revision, h.src.path, &local, commit, err);
    if (st == TM_OK) st = fetch_external_data(&h, local, commit, err);
    if (st == TM_OK) *local_path = local;
    else free(local);
    tm_hub_ctx_free(&h);
    return st;
}

/* resolve_file for src/hub/files.c (plain files of a repo, no external data). */
tm_status tm_hub_ctx_resolve_file(tm_hub_ctx *h, const char *revision, const char *path,
                                  char **out, char commit[129], tm_error *err) {
    return resolve_file(h, revision, path, out, commit, err);
}
