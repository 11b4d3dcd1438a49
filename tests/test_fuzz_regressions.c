/* Replays every input the fuzzers ever crashed or hung on (tests/data/fuzz-regressions/<target>/)
 * through the very harness of that target (fuzz/fuzz_<target>.c, included here with its
 * entry point renamed), each in a child process, so that one crash fails one case and the
 * rest still run. Built with the ordinary compiler, so `make test` and `make check-asan`
 * replay them without clang or libFuzzer. Not a fuzzer. Prints "N passed, N failed". */
#include <dirent.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define LLVMFuzzerTestOneInput fuzz_onnx_one
#include "../fuzz/fuzz_onnx.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_model_one
#include "../fuzz/fuzz_model.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_npy_one
#include "../fuzz/fuzz_npy.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_tensor_pb_one
#include "../fuzz/fuzz_tensor_pb.c"
#undef LLVMFuzzerTestOneInput
/* Its open() interposer only checks while a load runs; otherwise it passes through. */
#define LLVMFuzzerTestOneInput fuzz_external_one
#define LLVMFuzzerInitialize fuzz_external_init
#include "../fuzz/fuzz_external.c"
#undef LLVMFuzzerTestOneInput
#undef LLVMFuzzerInitialize
#define LLVMFuzzerTestOneInput fuzz_optim_state_one
#include "../fuzz/fuzz_optim_state.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_jsonl_one
#include "../fuzz/fuzz_jsonl.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_tokenizer_load_one
#include "../fuzz/fuzz_tokenizer_load.c"
#undef LLVMFuzzerTestOneInput
/* The two share fuzz/tok_fixed.h's tokenizers (unpacked into $TMPDIR, loaded once). */
#define LLVMFuzzerTestOneInput fuzz_tokenizer_encode_one
#define LLVMFuzzerInitialize fuzz_tokenizer_encode_init
#include "../fuzz/fuzz_tokenizer_encode.c"
#undef LLVMFuzzerTestOneInput
#undef LLVMFuzzerInitialize
#define LLVMFuzzerTestOneInput fuzz_tokenizer_decode_one
#define LLVMFuzzerInitialize fuzz_tokenizer_decode_init
#include "../fuzz/fuzz_tokenizer_decode.c"
#undef LLVMFuzzerTestOneInput
#undef LLVMFuzzerInitialize
#define LLVMFuzzerTestOneInput fuzz_chat_template_one
#include "../fuzz/fuzz_chat_template.c"
#undef LLVMFuzzerTestOneInput

#define ROOT "tests/data/fuzz-regressions"

/* Under `make check-asan` UBSan only reports and goes on; a regression that was undefined
 * behaviour (an integer overflow) must fail the case as it failed the fuzzer. Read by the
 * sanitizer runtime when present, unused otherwise. */
const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void) { return "halt_on_error=1:print_stacktrace=1"; }

typedef struct target {
    const char *name;
    int (*one)(const uint8_t *, size_t);
    int (*init)(int *, char ***);
} target;

static const target TARGETS[] = {
    {"onnx", fuzz_onnx_one, NULL},
    {"model", fuzz_model_one, NULL},
    {"npy", fuzz_npy_one, NULL},
    {"tensor_pb", fuzz_tensor_pb_one, NULL},
    {"external", fuzz_external_one, fuzz_external_init},
    {"optim_state", fuzz_optim_state_one, NULL},
    {"jsonl", fuzz_jsonl_one, NULL},
    {"tokenizer_load", fuzz_tokenizer_load_one, NULL},
    {"tokenizer_encode", fuzz_tokenizer_encode_one, fuzz_tokenizer_encode_init},
    {"tokenizer_decode", fuzz_tokenizer_decode_one, fuzz_tokenizer_decode_init},
    {"chat_template", fuzz_chat_template_one, NULL},
};

static uint8_t *read_all(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            uint8_t *grown = realloc(buf, cap *= 2);
            if (!grown) {
                free(buf);
                buf = NULL;
            }
            buf = grown;
        }
    }
    fclose(f);
    *size = n;
    return buf;
}

static int initialised[sizeof TARGETS / sizeof TARGETS[0]];

/* 0 when the harness returned normally in a child; else prints why and returns 1. */
static int replay(const target *t, const char *path) {
    /* Set up once, in this process, so that every child shares it (fuzz_external's
     * folder). */
    int k = (int)(t - TARGETS);
    if (t->init && !initialised[k]) {
        if (t->init(NULL, NULL) != 0) {
            printf("FAIL %s: the harness's set-up failed\n", t->name);
            return 1;
        }
        initialised[k] = 1;
    }
    size_t size = 0;
    uint8_t *data = read_all(path, &size);
    if (!data) {
        printf("FAIL %s: cannot read it\n", path);
        return 1;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        alarm(120);   /* a hang the fuzzer reported (its limit was 10 s) fails, not blocks */
        t->one(data, size);
        _exit(0);
    }
    free(data);
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) {
        printf("FAIL %s: cannot run a child\n", path);
        return 1;
    }
    if (WIFSIGNALED(status)) {
        printf("FAIL %s: killed by signal %d\n", path, WTERMSIG(status));
        return 1;
    }
    if (WEXITSTATUS(status) != 0) {
        printf("FAIL %s: exit status %d\n", path, WEXITSTATUS(status));
        return 1;
    }
    return 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int by_name(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int main(void) {
    int passed = 0, failed = 0;
    for (size_t k = 0; k < sizeof TARGETS / sizeof TARGETS[0]; k++) {
        char dir[512];
        snprintf(dir, sizeof dir, ROOT "/%s", TARGETS[k].name);
        DIR *d = opendir(dir);
        if (!d) continue;
        char *names[4096];
        int n = 0;
        struct dirent *e;
        while ((e = readdir(d)) && n < 4096)
            if (e->d_name[0] != '.' && strcmp(e->d_name, "README.md")) names[n++] = strdup(e->d_name);
        closedir(d);
        qsort(names, (size_t)n, sizeof names[0], by_name);
        for (int i = 0; i < n; i++) {
            char path[1024];
            snprintf(path, sizeof path, "%s/%s", dir, names[i]);
            if (replay(&TARGETS[k], path)) failed++;
            else passed++;
            free(names[i]);
        }
    }
    /* fuzz_external.c's temporary folder: the fuzzer leaves it, a test should not. */
    if (root[0]) nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
