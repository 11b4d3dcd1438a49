/* libFuzzer target: the external-data resolver. Each input is a model buffer loaded with
 * base_dir set to a temporary model folder holding data files, an empty file, a folder, a
 * FIFO and symlinks that stay inside or lead out of it (a secret file sits beside the
 * folder). The loader may fail, but must never open, map or hang on anything outside the
 * folder: open() is interposed here to check every path it is given. Not the rest of the
 * ModelProto reader (fuzz_onnx.c). */
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "onnx/model.h"

static char root[PATH_MAX];       /* temporary: secret.bin and model/ */
static char model_dir[PATH_MAX];  /* root/model, a real path */
static int watching;              /* inside a load: check every open() */

static int inside_model_dir(const char *path) {
    size_t n = strlen(model_dir);
    return strncmp(path, model_dir, n) == 0 && path[n] == '/';
}

/* Interposes libc's open() for the loader (model.c calls open, libFuzzer's own file
 * reads go through libc internals and never come here). */
int open(const char *path, int flags, ...) {
    mode_t mode = 0;
    if (flags & (O_CREAT | O_TMPFILE)) {
        va_list ap;
        va_start(ap, flags);
        mode = (mode_t)va_arg(ap, int);
        va_end(ap);
    }
    if (watching && !inside_model_dir(path)) {
        fprintf(stderr, "fuzz_external: the loader opened '%s', outside '%s'\n", path, model_dir);
        abort();
    }
    return (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
}

/* dir/name into out (PATH_MAX bytes); the folder is short, so too long is a bug here. */
static void join(char *out, const char *dir, const char *name) {
    if (snprintf(out, PATH_MAX, "%s/%s", dir, name) >= PATH_MAX) abort();
}

static void write_file(const char *dir, const char *name, size_t size, uint8_t fill) {
    char path[PATH_MAX];
    join(path, dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    for (size_t i = 0; i < size; i++) fputc((int)(uint8_t)(fill + i), f);
    fclose(f);
}

static void make_link(const char *target, const char *name) {
    char path[PATH_MAX];
    join(path, model_dir, name);
    if (symlink(target, path) != 0) abort();
}

/* The folder layout the seeds (fuzz/seeds/external, made by make_seeds.py) refer to. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *tmp = getenv("TMPDIR");
    if (snprintf(root, sizeof root, "%s/tm-fuzz-external.XXXXXX", tmp && tmp[0] ? tmp : "/tmp") >=
        (int)sizeof root)
        abort();
    if (!mkdtemp(root)) abort();
    char *real = realpath(root, NULL);
    if (!real) abort();
    if (snprintf(root, sizeof root, "%s", real) >= (int)sizeof root) abort();
    free(real);
    join(model_dir, root, "model");
    char sub[PATH_MAX];
    join(sub, model_dir, "sub");
    if (mkdir(model_dir, 0700) || mkdir(sub, 0700)) abort();
    write_file(root, "secret.bin", 4096, 0xe0);
    write_file(model_dir, "weights.bin", 4096, 0);
    write_file(model_dir, "empty.bin", 0, 0);
    write_file(sub, "w.bin", 256, 7);
    join(sub, model_dir, "fifo");
    if (mkfifo(sub, 0600)) abort();
    make_link("../secret.bin", "link_out");
    make_link("weights.bin", "link_in");
    make_link("..", "dir_out");
    make_link("/etc/passwd", "link_abs");
    make_link("loop_b", "loop_a");
    make_link("loop_a", "loop_b");
    /* Left behind on exit: it is small, and a crash would leave it anyway. */
    fprintf(stderr, "fuzz_external: model folder %s\n", model_dir);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tm_onnx_model *m = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    watching = 1;
    int st = tm_onnx_load_buffer(data, size, model_dir, &m, &err);
    watching = 0;
    if (st != TM_OK) {
        if (m || !err.message[0]) abort();
        return 0;
    }
    for (int i = 0; i < m->n_maps; i++) {
        if (!inside_model_dir(m->maps[i].path)) {
            fprintf(stderr, "fuzz_external: mapped '%s', outside '%s'\n", m->maps[i].path,
                    model_dir);
            abort();
        }
    }
    tm_onnx_model_free(m);
    return 0;
}
