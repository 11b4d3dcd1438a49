/* The optimizer's state file (format in transmuter.h at tm_optimizer_save_state): writing
 * through a temporary file, and reading with every length bounded, every parameter
 * checked against the optimizer and a CRC-32C over the whole file before anything is
 * copied. Not the update rules (optim.c). */
#define _XOPEN_SOURCE 700 /* O_CLOEXEC */

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../core/dtype.h"
#include "../core/status.h"
#include "optim.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the state file is little-endian and written from memory as it is"
#endif

static const char MAGIC[8] = {'T', 'M', 'O', 'P', 'T', 'I', 'M', '\0'};
#define STATE_VERSION 1u
#define FLAG_AMSGRAD 1u
#define FLAG_NESTEROV 2u
#define MAX_NAME 4096u

/* ---- CRC-32C (Castagnoli) ------------------------------------------------------------ */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_table_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

static uint32_t crc_bytes(uint32_t crc, const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__) && defined(__GNUC__)
/* SSE4.2 has CRC-32C as an instruction: state files are as large as the model, twice. */
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const uint8_t *p,
                                                          size_t n) {
    uint64_t c = crc;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
    }
    return crc_bytes((uint32_t)c, p, n);
}
#endif

/* Running CRC without the pre/post inversion; crc_final applies it. */
static uint32_t crc_update(uint32_t crc, const void *data, size_t n) {
    pthread_once(&crc_once, crc_table_init);
#if defined(__x86_64__) && defined(__GNUC__)
    if (__builtin_cpu_supports("sse4.2")) return crc_hw(crc, data, n);
#endif
    return crc_bytes(crc, data, n);
}

#define CRC_INIT 0xFFFFFFFFu
static uint32_t crc_final(uint32_t crc) { return crc ^ 0xFFFFFFFFu; }

/* ---- Writing ------------------------------------------------------------------------- */

typedef struct writer {
    FILE *f;
    uint32_t crc;
    int failed;
} writer;

static void put(writer *w, const void *p, size_t n) {
    if (w->failed || n == 0) return;
    w->crc = crc_update(w->crc, p, n);
    if (fwrite(p, 1, n, w->f) != n) w->failed = 1;
}

static void put_u32(writer *w, uint32_t v) { put(w, &v, sizeof v); }
static void put_u64(writer *w, uint64_t v) { put(w, &v, sizeof v); }
static void put_i64(writer *w, int64_t v) { put(w, &v, sizeof v); }
static void put_f64(writer *w, double v) { put(w, &v, sizeof v); }

static size_t buffer_bytes(const tm__opt_param *p, int role) {
    return p->numel * (role == TM__BUF_MASTER ? sizeof(float) : tm_dtype_elem_size(p->state_dtype));
}

static void write_state(writer *w, const tm_optimizer *o) {
    const tm_optimizer_params *hp = &o->params;
    put(w, MAGIC, sizeof MAGIC);
    put_u32(w, STATE_VERSION);
    put_u32(w, (uint32_t)hp->kind);
    put_u32(w, (hp->amsgrad ? FLAG_AMSGRAD : 0) | (hp->nesterov ? FLAG_NESTEROV : 0));
    put_u32(w, (uint32_t)o->n);
    put_i64(w, o->steps);
    double hyper[7] = {hp->lr, hp->weight_decay, hp->momentum, hp->dampening,
                       hp->beta1, hp->beta2, hp->eps};
    for (int i = 0; i < 7; i++) put_f64(w, hyper[i]);
    for (int i = 0; i < o->n; i++) {
        const tm__opt_param *p = &o->p[i];
        const tm_tensor *t = p->tensor;
        size_t len = strlen(p->name);
        put_u32(w, (uint32_t)len);
        put(w, p->name, len);
        put_u32(w, (uint32_t)t->dtype);
        put_u32(w, (uint32_t)t->rank);
        for (int d = 0; d < t->rank; d++) put_i64(w, t->dims[d]);
        put_i64(w, p->step);
        int roles[4];
        int nr = tm__opt_roles(o, p, roles);
        put_u32(w, (uint32_t)nr);
        for (int r = 0; r < nr; r++) {
            put_u32(w, (uint32_t)roles[r]);
            put_u32(w, (uint32_t)(roles[r] == TM__BUF_MASTER ? TM_FLOAT : p->state_dtype));
            size_t bytes = buffer_bytes(p, roles[r]);
            put_u64(w, bytes);
            put(w, tm__opt_buffer(o, p, roles[r]), bytes);
        }
    }
}

tm_status tm_optimizer_save_state(const tm_optimizer *o, const char *path, tm_error *err) {
    if (!o || !path)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT,
                        "tm_optimizer_save_state: optimizer and path must be given");
    for (int i = 0; i < o->n; i++)
        if (strlen(o->p[i].name) > MAX_NAME)
            return tm__fail(err, TM_ERR_INVALID_ARGUMENT,
                            "optimizer state: parameter name '%.64s...' is longer than %u bytes",
                            o->p[i].name, MAX_NAME);
    static _Atomic unsigned long counter; /* unique per process and call */
    size_t plen = strlen(path);
    char *tmp = malloc(plen + 64);
    if (!tmp) return tm__fail(err, TM_ERR_NO_MEMORY, "optimizer state: out of memory");
    snprintf(tmp, plen + 64, "%s.tmp.%ld.%lu", path, (long)getpid(), counter++);
    writer w = {.f = fopen(tmp, "wb"), .crc = CRC_INIT};
    if (!w.f) {
        tm_status st = tm__fail(err, TM_ERR_IO, "optimizer state: cannot create '%s': %s", tmp,
                                strerror(errno));
        free(tmp);
        return st;
    }
    setvbuf(w.f, NULL, _IOFBF, 1 << 20);
    write_state(&w, o);
    uint32_t crc = crc_final(w.crc);
    put(&w, &crc, sizeof crc);
    int e = w.failed ? errno : 0;
    if (fflush(w.f) != 0 || fsync(fileno(w.f)) != 0) {
        if (!e) e = errno;
        w.failed = 1;
    }
    if (fclose(w.f) != 0 && !w.failed) {
        e = errno;
        w.failed = 1;
    }
    if (!w.failed && rename(tmp, path) != 0) {
        e = errno;
        w.failed = 1;
    }
    tm_status st = TM_OK;
    if (w.failed) {
        unlink(tmp);
        st = tm__fail(err, TM_ERR_IO, "optimizer state: cannot write '%s': %s", path,
                      strerror(e ? e : EIO));
    }
    free(tmp);
    return st;
}

/* ---- Reading ------------------------------------------------------------------------- */

typedef struct reader {
    const uint8_t *base;
    size_t size, at;
    const char *path;
    tm_error *err;
} reader;

static tm_status truncated(reader *r, const char *what) {
    return tm__fail(r->err, TM_ERR_PARSE, "optimizer state '%s' is truncated: %s at byte %zu "
                    "lies past its end (%zu bytes)", r->path, what, r->at, r->size);
}

/* Reserves the last 4 bytes for the checksum: nothing else may read them. */
static tm_status take(reader *r, size_t n, const char *what, const uint8_t **p) {
    if (r->size < 4 || r->at > r->size - 4 || n > r->size - 4 - r->at) return truncated(r, what);
    *p = r->base + r->at;
    r->at += n;
    return TM_OK;
}

static tm_status get_u32(reader *r, const char *what, uint32_t *v) {
    const uint8_t *p = NULL;
    tm_status st = take(r, sizeof *v, what, &p);
    if (!st) memcpy(v, p, sizeof *v);
    return st;
}

static tm_status get_u64(reader *r, const char *what, uint64_t *v) {
    const uint8_t *p = NULL;
    tm_status st = take(r, sizeof *v, what, &p);
    if (!st) memcpy(v, p, sizeof *v);
    return st;
}

static tm_status mismatch(reader *r, const char *param, const char *fmt_what, ...)
    TM_PRINTF(3, 4);

static tm_status mismatch(reader *r, const char *param, const char *fmt, ...) {
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return tm__fail_at(r->err, TM_ERR_INVALID_ARGUMENT, NULL, NULL, param,
                       "optimizer state '%s' does not fit this optimizer: %s", r->path, what);
}

static const char *kind_name(uint32_t k) {
    return k == TM_OPTIMIZER_SGD ? "SGD" : k == TM_OPTIMIZER_ADAMW ? "AdamW" : "an unknown optimizer";
}

static const char *role_name(int role) {
    switch (role) {
    case TM__BUF_MASTER: return "master copy";
    case TM__BUF_MOMENTUM: return "momentum buffer";
    case TM__BUF_EXP_AVG: return "exp_avg";
    case TM__BUF_EXP_AVG_SQ: return "exp_avg_sq";
    case TM__BUF_MAX_EXP_AVG_SQ: return "max_exp_avg_sq";
    default: return "unknown buffer";
    }
}

/* Whether parameter p of this optimizer may carry a buffer of this role, and whether it
 * must. The SGD momentum buffer is optional: PyTorch creates it at the first step. */
static void role_rule(const tm_optimizer *o, const tm__opt_param *p, int role, int *allowed,
                      int *required) {
    int half = p->master != NULL, sgd = o->params.kind == TM_OPTIMIZER_SGD;
    switch (role) {
    case TM__BUF_MASTER: *allowed = *required = half; break;
    case TM__BUF_MOMENTUM: *allowed = sgd && o->params.momentum != 0.0; *required = 0; break;
    case TM__BUF_EXP_AVG: case TM__BUF_EXP_AVG_SQ: *allowed = *required = !sgd; break;
    case TM__BUF_MAX_EXP_AVG_SQ: *allowed = *required = !sgd && o->params.amsgrad; break;
    default: *allowed = *required = 0; break;
    }
}

typedef struct loaded_param {
    int64_t step;
    const uint8_t *buf[TM__BUF_MAX_EXP_AVG_SQ + 1];   /* by role, NULL when absent */
} loaded_param;

static tm_status read_param(reader *r, const tm_optimizer *o, int i, loaded_param *lp) {
    const tm__opt_param *p = &o->p[i];
    const tm_tensor *t = p->tensor;
    uint32_t len, dtype, rank, nbuf;
    const uint8_t *name;
    tm_status st;
    if ((st = get_u32(r, "a parameter name length", &len))) return st;
    if (len > MAX_NAME)
        return tm__fail(r->err, TM_ERR_PARSE, "optimizer state '%s' is corrupted: a parameter "
                        "name of %u bytes at byte %zu", r->path, len, r->at - 4);
    if ((st = take(r, len, "a parameter name", &name))) return st;
    if (len != strlen(p->name) || memcmp(name, p->name, len) != 0)
        return mismatch(r, p->name, "parameter #%d is '%.*s' in the file, '%s' here", i,
                        (int)(len > 200 ? 200 : len), (const char *)name, p->name);
    if ((st = get_u32(r, "a dtype", &dtype)) || (st = get_u32(r, "a rank", &rank))) return st;
    if (dtype != (uint32_t)t->dtype)
        return mismatch(r, p->name, "'%s' is %s in the file, %s here", p->name,
                        tm_dtype_name((tm_dtype)dtype), tm_dtype_name(t->dtype));
    if (rank != (uint32_t)t->rank)
        return mismatch(r, p->name, "'%s' has rank %u in the file, %d here", p->name, rank,
                        t->rank);
    for (int d = 0; d < t->rank; d++) {
        uint64_t dim;
        if ((st = get_u64(r, "a dimension", &dim))) return st;
        if ((int64_t)dim != t->dims[d])
            return mismatch(r, p->name, "dimension %d of '%s' is %lld in the file, %lld here", d,
                            p->name, (long long)(int64_t)dim, (long long)t->dims[d]);
    }
    uint64_t step;
    if ((st = get_u64(r, "a step count", &step))) return st;
    if ((int64_t)step < 0)
        return tm__fail(r->err, TM_ERR_PARSE, "optimizer state '%s' is corrupted: parameter "
                        "'%s' has step count %lld", r->path, p->name, (long long)(int64_t)step);
    lp->step = (int64_t)step;
    if ((st = get_u32(r, "a buffer count", &nbuf))) return st;
    if (nbuf > 4)
        return tm__fail(r->err, TM_ERR_PARSE, "optimizer state '%s' is corrupted: parameter "
                        "'%s' has %u buffers", r->path, p->name, nbuf);
    for (uint32_t b = 0; b < nbuf; b++) {
        uint32_t role, bdt;
        uint64_t bytes;
        if ((st = get_u32(r, "a buffer role", &role)) || (st = get_u32(r, "a buffer dtype", &bdt)) ||
            (st = get_u64(r, "a buffer size", &bytes)))
            return st;
        int allowed = 0, required = 0;
        if (role >= TM__BUF_MASTER && role <= TM__BUF_MAX_EXP_AVG_SQ)
            role_rule(o, p, (int)role, &allowed, &required);
        else
            return tm__fail(r->err, TM_ERR_PARSE, "optimizer state '%s' is corrupted: buffer "
                            "role %u of '%s'", r->path, role, p->name);
        if (lp->buf[role])
            return tm__fail(r->err, TM_ERR_PARSE, "optimizer state '%s' is corrupted: '%s' "
                            "has two %ss", r->path, p->name, role_name((int)role));
        if (!allowed)
            return mismatch(r, p->name, "'%s' has a %s in the file, which this optimizer does "
                            "not keep", p->name, role_name((int)role));
        tm_dtype want = role == TM__BUF_MASTER ? TM_FLOAT : p->state_dtype;
        if (bdt != (uint32_t)want || bytes != buffer_bytes(p, (int)role))
            return tm__fail(r->err, TM_ERR_PARSE, "optimizer state '%s' is corrupted: the %s "
                            "of '%s' is %llu bytes of %s, expected %zu of %s", r->path,
                            role_name((int)role), p->name, (unsigned long long)bytes,
                            tm_dtype_name((tm_dtype)bdt), buffer_bytes(p, (int)role),
                            tm_dtype_name(want));
        if ((st = take(r, (size_t)bytes, "buffer data", &lp->buf[role]))) return st;
        if (!bytes) lp->buf[role] = r->base; /* present, empty */
    }
    for (int role = TM__BUF_MASTER; role <= TM__BUF_MAX_EXP_AVG_SQ; role++) {
        int allowed, required;
        role_rule(o, p, role, &allowed, &required);
        if (required && !lp->buf[role])
            return mismatch(r, p->name, "'%s' has no %s in the file%s", p->name, role_name(role),
                            role == TM__BUF_MAX_EXP_AVG_SQ ? " (it was saved without amsgrad)" : "");
    }
    return TM_OK;
}

static tm_status read_header(reader *r, const tm_optimizer *o, int64_t *steps) {
    const uint8_t *magic;
    uint32_t version, kind, flags, n;
    uint64_t st64;
    tm_status st;
    if (r->size < sizeof MAGIC || memcmp(r->base, MAGIC, sizeof MAGIC) != 0)
        return tm__fail(r->err, TM_ERR_PARSE, "'%s' is not an optimizer state file (no "
                        "TMOPTIM header)", r->path);
    if ((st = take(r, sizeof MAGIC, "the header", &magic)) ||
        (st = get_u32(r, "the version", &version)))
        return st;
    if (version != STATE_VERSION)
        return tm__fail(r->err, TM_ERR_UNSUPPORTED, "optimizer state '%s' has format version "
                        "%u; this build reads version %u", r->path, version, STATE_VERSION);
    if ((st = get_u32(r, "the optimizer kind", &kind)) || (st = get_u32(r, "the flags", &flags)) ||
        (st = get_u32(r, "the parameter count", &n)) || (st = get_u64(r, "the step count", &st64)))
        return st;
    if (kind != (uint32_t)o->params.kind)
        return mismatch(r, NULL, "it was saved by %s, this optimizer is %s", kind_name(kind),
                        kind_name((uint32_t)o->params.kind));
    if (kind == TM_OPTIMIZER_ADAMW && !!(flags & FLAG_AMSGRAD) != !!o->params.amsgrad)
        return mismatch(r, NULL, "it was saved %s amsgrad, this optimizer runs %s it",
                        flags & FLAG_AMSGRAD ? "with" : "without",
                        o->params.amsgrad ? "with" : "without");
    if (n != (uint32_t)o->n)
        return mismatch(r, NULL, "it holds %u parameters, this optimizer %d", n, o->n);
    if ((int64_t)st64 < 0)
        return tm__fail(r->err, TM_ERR_PARSE, "optimizer state '%s' is corrupted: step count "
                        "%lld", r->path, (long long)(int64_t)st64);
    *steps = (int64_t)st64;
    const uint8_t *hyper;
    return take(r, 7 * sizeof(double), "the hyperparameters", &hyper);
}

tm_status tm_optimizer_load_state(tm_optimizer *o, const char *path, tm_error *err) {
    if (!o || !path)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT,
                        "tm_optimizer_load_state: optimizer and path must be given");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return tm__fail(err, errno == ENOENT ? TM_ERR_NOT_FOUND : TM_ERR_IO,
                        "cannot open optimizer state '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return tm__fail(err, TM_ERR_IO, "optimizer state '%s' is not a regular file", path);
    }
    size_t size = (size_t)sb.st_size;
    void *base = NULL;
    if (size > 0) {
        base = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (base == MAP_FAILED) {
            int e = errno;
            close(fd);
            return tm__fail(err, TM_ERR_IO, "cannot map optimizer state '%s': %s", path,
                            strerror(e));
        }
    }
    close(fd);
    static const uint8_t empty[1];
    reader r = {.base = base ? base : empty, .size = size, .path = path, .err = err};
    loaded_param *lp = calloc((size_t)o->n + 1, sizeof *lp);
    int64_t steps = 0;
    tm_status st = lp ? read_header(&r, o, &steps)
                      : tm__fail(err, TM_ERR_NO_MEMORY, "optimizer state: out of memory");
    for (int i = 0; i < o->n && !st; i++) st = read_param(&r, o, i, &lp[i]);
    if (!st && r.at != size - 4)
        st = tm__fail(err, TM_ERR_PARSE, "optimizer state '%s' is corrupted: %zu unexpected "
                      "bytes after the last parameter", path, size - 4 - r.at);
    if (!st) {
        uint32_t stored;
        memcpy(&stored, r.base + size - 4, sizeof stored);
        uint32_t crc = crc_final(crc_update(CRC_INIT, r.base, size - 4));
        if (crc != stored)
            st = tm__fail(err, TM_ERR_PARSE, "optimizer state '%s' is corrupted: its checksum "
                          "is %08x, its contents give %08x", path, stored, crc);
    }
    if (!st) {
        /* Everything is checked: only now does the optimizer change. */
        for (int i = 0; i < o->n; i++) {
            tm__opt_param *p = &o->p[i];
            p->step = lp[i].step;
            if (p->momentum) p->has_momentum = lp[i].buf[TM__BUF_MOMENTUM] != NULL;
            for (int role = TM__BUF_MASTER; role <= TM__BUF_MAX_EXP_AVG_SQ; role++) {
                void *dst = role == TM__BUF_MASTER ? p->master
                          : role == TM__BUF_MOMENTUM ? p->momentum
                          : role == TM__BUF_EXP_AVG ? p->exp_avg
                          : role == TM__BUF_EXP_AVG_SQ ? p->exp_avg_sq : p->max_exp_avg_sq;
                if (dst && lp[i].buf[role]) memcpy(dst, lp[i].buf[role], buffer_bytes(p, role));
            }
        }
        o->steps = steps;
    }
    free(lp);
    if (base) munmap(base, size);
    return st;
}
