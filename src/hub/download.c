/* Downloads one blob of the cache: into blobs/<etag>.incomplete, resuming with an HTTP
 * Range what an earlier try left, retrying cut connections and server errors with backoff,
 * checking size and SHA-256, and only then renaming it into place. Not the locking or the
 * snapshot links (hub.c holds the lock and links the blob). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>
#include "http.h"
#include "internal.h"
#include "progress.h"
#include "sha256.h"

enum { MAX_ATTEMPTS = 5 };

typedef struct sink_state {
    int fd;
    int64_t have;                 /* bytes in the .incomplete file */
    int started;                  /* this response's first body bytes were seen */
    int bad_range;                /* a 206 that does not start where we asked */
    int write_errno;
    int hashing;
    tm_sha256 hash;               /* of the file's bytes 0..have */
    tm_progress bar;
} sink_state;

void tm_hub_backoff(int attempt) {
    double s = 0.5;
    for (int i = 1; i < attempt && s < 8; i++) s *= 2;
    if (s > 8) s = 8;
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int restart(sink_state *s) {
    s->have = 0;
    if (s->hashing) tm_sha256_init(&s->hash);
    return ftruncate(s->fd, 0);
}

/* "bytes START-END/TOTAL" must start at what we have. */
static int range_starts_at(const char *content_range, int64_t at) {
    long long start;
    return content_range && sscanf(content_range, "bytes %lld-", &start) == 1 && start == at;
}

static int pwrite_all(int fd, const char *p, size_t n, int64_t at) {
    while (n) {
        ssize_t w = pwrite(fd, p, n, (off_t)at);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w;
        n -= (size_t)w;
        at += w;
    }
    return 0;
}

static int on_data(void *user, const tm_http_reply *r, const void *data, size_t n) {
    sink_state *s = user;
    /* An error page is not the file: drop it, the status tells what happened. */
    if (r->status != 200 && r->status != 206) return 1;
    if (!s->started) {
        s->started = 1;
        /* A server that ignores Range sends the whole file again. */
        if (r->status == 200 && s->have > 0 && restart(s) != 0) {
            s->write_errno = errno;
            return 0;
        }
        if (r->status == 206 && !range_starts_at(r->content_range, s->have)) {
            s->bad_range = 1;
            return 0;
        }
    }
    if (pwrite_all(s->fd, data, n, s->have) != 0) {
        s->write_errno = errno;
        return 0;
    }
    if (s->hashing) tm_sha256_update(&s->hash, data, n);
    s->have += (int64_t)n;
    tm_progress_update(&s->bar, s->have);
    return 1;
}

/* Bytes a previous try left are part of the digest too. */
static int hash_existing(sink_state *s) {
    static char buf[1 << 16];
    for (int64_t at = 0; at < s->have;) {
        size_t want = s->have - at < (int64_t)sizeof buf ? (size_t)(s->have - at) : sizeof buf;
        ssize_t n = pread(s->fd, buf, want, (off_t)at);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        tm_sha256_update(&s->hash, buf, (size_t)n);
        at += n;
    }
    return 0;
}

static tm_status io_error(const tm_hub_fetch *f, tm_error *err, int e, const char *what,
                          const char *path) {
    if (e == ENOSPC || e == EDQUOT)
        return tm__fail(err, TM_ERR_IO, "%s: no space left on the device %s '%s'; free some "
                        "space and run again (the download resumes where it stopped)",
                        f->source, what, path);
    return tm__fail(err, TM_ERR_IO, "%s: cannot %s '%s': %s", f->source, what, path,
                    strerror(e));
}

static tm_status open_incomplete(const tm_hub_fetch *f, const char *path, sink_state *s,
                                 tm_error *err) {
    s->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (s->fd < 0) return io_error(f, err, errno, "create", path);
    struct stat st;
    if (fstat(s->fd, &st) != 0) return io_error(f, err, errno, "read", path);
    s->have = st.st_size;
    s->hashing = f->sha256 != NULL;
    if (s->hashing) tm_sha256_init(&s->hash);
    if ((f->size >= 0 && s->have > f->size) || (s->hashing && hash_existing(s) != 0))
        if (restart(s) != 0) return io_error(f, err, errno, "truncate", path);
    struct statvfs vfs;
    if (f->size >= 0 && fstatvfs(s->fd, &vfs) == 0 &&
        (uint64_t)vfs.f_bavail * vfs.f_frsize < (uint64_t)(f->size - s->have))
        return tm__fail(err, TM_ERR_IO, "%s: not enough space on the device for '%s': %lld "
                        "bytes needed, %llu free", f->source, path,
                        (long long)(f->size - s->have),
                        (unsigned long long)vfs.f_bavail * vfs.f_frsize);
    return TM_OK;
}

static tm_status http_error(const tm_hub_fetch *f, const tm_http_reply *r, tm_error *err) {
    if (r->failure == TM_HTTP_TIMEOUT)
        return tm__fail(err, TM_ERR_NETWORK, "%s: the download of '%s' timed out (no data "
                        "for a while): %s", f->source, f->display, r->failure_text);
    if (r->failure != TM_HTTP_NO_FAILURE)
        return tm__fail(err, TM_ERR_NETWORK, "%s: the download of '%s' failed: %s", f->source,
                        f->display, r->failure_text);
    return tm__fail(err, TM_ERR_NETWORK, "%s: the download of '%s' failed: HTTP %ld from %s",
                    f->source, f->display, r->status, f->url);
}

/* Requests until the whole body is there: resumes after cuts, backs off on 5xx. */
static tm_status transfer(const tm_hub_config *c, const tm_hub_fetch *f, const char *path,
                          sink_state *s, tm_error *err) {
    tm_http_reply r = {0};
    tm_status st = TM_OK;
    for (int attempt = 1;; attempt++) {
        if (f->size >= 0 && s->have == f->size) break;
        int64_t before = s->have;
        tm_http_request rq = {.url = f->url, .token = f->token, .follow = 1,
                              .range_from = s->have, .timeout = c->download_timeout,
                              .sink = on_data, .sink_user = s};
        s->started = 0;
        s->bad_range = 0;
        tm_http_perform(&rq, &r);
        if (s->write_errno) {
            st = io_error(f, err, s->write_errno, "write", path);
            break;
        }
        int complete = r.failure == TM_HTTP_NO_FAILURE && (r.status == 200 || r.status == 206);
        if (complete) break;
        /* Our partial file is not what the server has: start again from byte 0. */
        if (s->bad_range || r.status == 416) {
            if (restart(s) != 0) {
                st = io_error(f, err, errno, "truncate", path);
                break;
            }
        } else if (!tm_http_transient(&r)) {
            st = http_error(f, &r, err);
            break;
        }
        if (s->have > before) attempt = 1;   /* progress: the connection is worth keeping */
        if (attempt >= MAX_ATTEMPTS) {
            st = http_error(f, &r, err);
            break;
        }
        tm_hub_backoff(attempt);
    }
    tm_http_reply_clear(&r);
    return st;
}

/* 1 when the bytes are the file the Hub described; else what is wrong, in why. */
static int verify(const tm_hub_fetch *f, sink_state *s, char *why, size_t cap) {
    if (f->size >= 0 && s->have != f->size) {
        snprintf(why, cap, "%lld bytes arrived, the Hub announced %lld", (long long)s->have,
                 (long long)f->size);
        return 0;
    }
    if (!s->hashing) return 1;
    uint8_t digest[32];
    char hex[65];
    tm_sha256_final(&s->hash, digest);
    tm_sha256_hex(digest, hex);
    if (!strcmp(hex, f->sha256)) return 1;
    snprintf(why, cap, "its SHA-256 is %s, the Hub announced %s", hex, f->sha256);
    return 0;
}

static tm_status fetch_verified(const tm_hub_config *c, const tm_hub_fetch *f,
                                const char *path, sink_state *s, tm_error *err) {
    char why[256];
    for (int round = 0;; round++) {
        tm_status st = transfer(c, f, path, s, err);
        if (st != TM_OK) return st;
        if (verify(f, s, why, sizeof why)) return TM_OK;
        /* A bad transfer is not kept, and is tried once more from the start. */
        if (restart(s) != 0) return io_error(f, err, errno, "truncate", path);
        if (round == 1) {
            unlink(path);
            return tm__fail(err, TM_ERR_NETWORK, "%s: the download of '%s' is corrupted "
                            "(%s); nothing was kept", f->source, f->display, why);
        }
    }
}

tm_status tm_hub_download(const tm_hub_config *c, const tm_hub_fetch *f, tm_error *err) {
    char *path = tm_hub_strf("%s.incomplete", f->blob_path);
    if (!path) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    sink_state s = {.fd = -1};
    tm_status st = tm_hub_mkdirs_for(path) == 0 ? TM_OK
                                                : io_error(f, err, errno, "create the folder of", path);
    if (st == TM_OK) st = open_incomplete(f, path, &s, err);
    if (st == TM_OK) {
        tm_progress_start(&s.bar, c->progress, f->display, f->size, s.have);
        st = fetch_verified(c, f, path, &s, err);
        tm_progress_finish(&s.bar);
    }
    /* Durable before it becomes visible under its final name. */
    if (st == TM_OK && fsync(s.fd) != 0) st = io_error(f, err, errno, "write", path);
    if (s.fd >= 0 && close(s.fd) != 0 && st == TM_OK) st = io_error(f, err, errno, "write", path);
    if (st == TM_OK && rename(path, f->blob_path) != 0)
        st = io_error(f, err, errno, "rename", path);
    free(path);
    return st;
}
