/* The Hugging Face cache layout, as huggingface_hub's file_download.py writes it:
 * models--OWNER--REPO/{blobs/<etag>, refs/<revision>, snapshots/<commit>/<path>} with
 * snapshot files as relative links to blobs, and .locks/ for concurrent downloads.
 * Not the network side (download.c, hub.c). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "internal.h"

char *tm_hub_strf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s) return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

/* Temporary names unique per process and call: threads may link at the same time. */
static unsigned long tmp_id(void) {
    static atomic_ulong counter;
    return (unsigned long)getpid() * 100000UL + atomic_fetch_add(&counter, 1);
}

int tm_hub_mkdirs(const char *dir) {
    char *p = tm_hub_strf("%s", dir);
    if (!p) {
        errno = ENOMEM;
        return -1;
    }
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0') continue;
        char saved = *s;
        *s = '\0';
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            free(p);
            return -1;
        }
        if (!(*s = saved)) break;
    }
    struct stat st;
    int ok = stat(p, &st) == 0 && S_ISDIR(st.st_mode);
    free(p);
    if (!ok) errno = ENOTDIR;
    return ok ? 0 : -1;
}

int tm_hub_mkdirs_for(const char *path) {
    char *dir = tm_hub_strf("%s", path);
    if (!dir) {
        errno = ENOMEM;
        return -1;
    }
    char *slash = strrchr(dir, '/');
    int r = 0;
    if (slash && slash != dir) {
        *slash = '\0';
        r = tm_hub_mkdirs(dir);
    }
    free(dir);
    return r;
}

int tm_hub_is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int tm_hub_is_commit(const char *s) {
    size_t n = 0;
    for (; s[n]; n++)
        if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f'))) return 0;
    return n == 40;
}

int tm_hub_safe_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 128 || !strcmp(s, ".") || !strcmp(s, "..")) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-' || c == '+' || c == '=';
        if (!ok) return 0;
    }
    return 1;
}

int tm_hub_read_ref(const char *repo_dir, const char *revision, char commit[129],
                    double *age_seconds) {
    char *path = tm_hub_strf("%s/refs/%s", repo_dir, revision);
    FILE *f = path ? fopen(path, "r") : NULL;
    struct stat st;
    int found = 0;
    if (f && fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode)) {
        size_t n = fread(commit, 1, 128, f);
        commit[n] = '\0';
        /* huggingface_hub writes no newline; a hand-made ref may have one. */
        while (n && (commit[n - 1] == '\n' || commit[n - 1] == '\r' || commit[n - 1] == ' '))
            commit[--n] = '\0';
        found = tm_hub_safe_name(commit);
        if (age_seconds) *age_seconds = difftime(time(NULL), st.st_mtime);
    }
    if (f) fclose(f);
    free(path);
    return found;
}

static int write_all(int fd, const char *s, size_t n) {
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

int tm_hub_write_ref(const char *repo_dir, const char *revision, const char *commit) {
    char old[129];
    char *path = tm_hub_strf("%s/refs/%s", repo_dir, revision);
    char *tmp = tm_hub_strf("%s/refs/%s.tmp.%lu", repo_dir, revision, tmp_id());
    int r = -1;
    if (!path || !tmp) errno = ENOMEM;
    else if (tm_hub_read_ref(repo_dir, revision, old, NULL) && !strcmp(old, commit))
        r = utimensat(AT_FDCWD, path, NULL, 0);
    else if (tm_hub_mkdirs_for(path) == 0) {
        int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
        if (fd >= 0) {
            r = write_all(fd, commit, strlen(commit));
            if (close(fd) != 0) r = -1;
            if (r == 0) r = rename(tmp, path);
            if (r != 0) unlink(tmp);
        }
    }
    free(path);
    free(tmp);
    return r;
}

int tm_hub_link(const char *repo_dir, const char *commit, const char *path, const char *etag) {
    /* From snapshots/<commit>/<path>'s folder back to the repo folder: two levels, plus
     * one per folder inside path. */
    size_t depth = 2;
    for (const char *p = path; *p; p++) depth += *p == '/';
    char *target = malloc(3 * depth + strlen(etag) + 8);
    char *link = tm_hub_strf("%s/snapshots/%s/%s", repo_dir, commit, path);
    char *tmp = tm_hub_strf("%s/snapshots/%s/%s.tmp.%lu", repo_dir, commit, path, tmp_id());
    int r = -1;
    if (!target || !link || !tmp) {
        errno = ENOMEM;
    } else {
        target[0] = '\0';
        for (size_t i = 0; i < depth; i++) strcat(target, "../");
        strcat(target, "blobs/");
        strcat(target, etag);
        unlink(tmp);
        if (tm_hub_mkdirs_for(link) == 0 && symlink(target, tmp) == 0) {
            r = rename(tmp, link);
            if (r != 0) unlink(tmp);
        }
    }
    free(target);
    free(link);
    free(tmp);
    return r;
}

int tm_hub_lock(const char *lock_path, const char *what, int verbose) {
    if (tm_hub_mkdirs_for(lock_path) != 0) return -1;
    int fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    if (fd < 0) return -1;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) return fd;
    if (errno != EWOULDBLOCK) {
        close(fd);
        return -1;
    }
    if (verbose) fprintf(stderr, "transmuter: waiting for another process downloading %s\n", what);
    while (flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            close(fd);
            return -1;
        }
    }
    return fd;
}

void tm_hub_unlock(int fd) {
    if (fd < 0) return;
    flock(fd, LOCK_UN);
    close(fd);
}

/* real_dir = R/snapshots/<commit>[/...] and real_path = R/blobs/<name>, same R, where R is
 * a repo folder of the cache (its name has "--" in it, models--OWNER--REPO). */
int tm_hub_is_cache_blob_of(const char *real_dir, const char *real_path) {
    if (!real_dir || !real_path) return 0;
    for (const char *s = strstr(real_dir, "/snapshots/"); s; s = strstr(s + 1, "/snapshots/")) {
        size_t root_len = (size_t)(s - real_dir);
        const char *commit = s + strlen("/snapshots/");
        if (!*commit || *commit == '/') continue;
        if (strncmp(real_path, real_dir, root_len) || strncmp(real_path + root_len, "/blobs/", 7))
            continue;
        const char *blob = real_path + root_len + 7;
        const char *base = real_dir;
        for (const char *p = real_dir; p < s; p++)
            if (*p == '/') base = p + 1;
        if (*blob && !strchr(blob, '/') && strcmp(blob, "..") && strcmp(blob, ".") &&
            memmem(base, (size_t)(s - base), "--", 2))
            return 1;
    }
    return 0;
}
