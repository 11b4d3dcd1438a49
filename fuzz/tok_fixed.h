/* Shared by the tokenizer fuzz targets (fuzz_tokenizer_encode.c, _decode.c): a few real
 * tokenizers of tests/data/tokenizers, one per model type, unpacked once (xz) into a
 * per-user cache folder and loaded once per process. Not a harness by itself. */
#ifndef TM_FUZZ_TOK_FIXED_H
#define TM_FUZZ_TOK_FIXED_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "transmuter.h"

/* WordPiece (BERT normalizer), byte-level BPE (NFC + Split regex), SentencePiece BPE
 * (byte fallback, lstrip/rstrip added tokens), Unigram (Precompiled charsmap), and
 * byte-level BPE with 1,608 added tokens. */
static const char *const TOK_FIXED_NAMES[] = {"all-minilm-l6-v2", "qwen3", "phi-3-vision",
                                              "marian-nmt", "whisper-tiny"};
#define TOK_FIXED_N 5
static tm_tokenizer *tok_fixed[TOK_FIXED_N];

/* Unpacks tests/data/tokenizers/NAME/FILE[.xz] into dir/FILE (atomically: parallel
 * fuzzing jobs share the folder). */
static int tok_fixed_unpack(const char *name, const char *file, const char *dir) {
    char dst[512], src[512], cmd[4096];
    struct stat st;
    snprintf(dst, sizeof dst, "%s/%s", dir, file);
    if (!stat(dst, &st)) return 0;
    snprintf(src, sizeof src, "tests/data/tokenizers/%s/%s.xz", name, file);
    if (!stat(src, &st)) {
        snprintf(cmd, sizeof cmd, "xz -dc '%s' > '%s.%d' && mv '%s.%d' '%s'", src, dst,
                 (int)getpid(), dst, (int)getpid(), dst);
    } else {
        snprintf(src, sizeof src, "tests/data/tokenizers/%s/%s", name, file);
        if (stat(src, &st)) return 0;   /* optional file absent */
        snprintf(cmd, sizeof cmd, "cp '%s' '%s.%d' && mv '%s.%d' '%s'", src, dst,
                 (int)getpid(), dst, (int)getpid(), dst);
    }
    return system(cmd) == 0 ? 0 : -1;
}

/* Loads the fixed tokenizers (once); 0 or -1 with a message on stderr. Run from the
 * repository root. */
static int tok_fixed_init(void) {
    static int done;
    if (done) return 0;
    const char *tmp = getenv("TMPDIR");
    char root[256];
    snprintf(root, sizeof root, "%s/tm-fuzz-tokenizers-%d", tmp && *tmp ? tmp : "/tmp",
             (int)getuid());
    mkdir(root, 0700);
    for (int i = 0; i < TOK_FIXED_N; i++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/%s", root, TOK_FIXED_NAMES[i]);
        mkdir(dir, 0700);
        if (tok_fixed_unpack(TOK_FIXED_NAMES[i], "tokenizer.json", dir) ||
            tok_fixed_unpack(TOK_FIXED_NAMES[i], "tokenizer_config.json", dir) ||
            tok_fixed_unpack(TOK_FIXED_NAMES[i], "special_tokens_map.json", dir)) {
            fprintf(stderr, "tok_fixed: cannot unpack %s (run from the repository root)\n",
                    TOK_FIXED_NAMES[i]);
            return -1;
        }
        tm_error err;
        if (tm_tokenizer_load(dir, NULL, &tok_fixed[i], &err) != TM_OK) {
            fprintf(stderr, "tok_fixed: %s: %s\n", TOK_FIXED_NAMES[i], err.message);
            return -1;
        }
    }
    done = 1;
    return 0;
}

/* Decodes ids with every combination of skip_special and cleanup; aborts on an error
 * without a message or an output that is not NUL-terminated at its length. */
static void tok_fixed_decode_all(const tm_tokenizer *t, const int32_t *ids, size_t n) {
    for (int skip = 0; skip < 2; skip++)
        for (int clean = 0; clean < 2; clean++) {
            char *out = NULL;
            size_t len = 0;
            tm_error err;
            memset(&err, 0, sizeof err);
            if (tm_tokenizer_decode(t, ids, n, skip, clean, &out, &len, &err) != TM_OK) {
                if (out || !err.message[0]) abort();
                continue;
            }
            if (!out || out[len] != 0) abort();
            free(out);
        }
}
#endif
