/* libFuzzer target: tm_tokenizer_load on arbitrary tokenizer.json bytes (through a memfd,
 * since the loader takes a path; tokenizer_config.json is not read), then, when it loads,
 * one encode and decode of a fixed text with a few added tokens' shapes in it, and every
 * id below 300 decoded. Seeds: fuzz/seeds/tokenizer_load (small tokenizers of every model
 * and component type). Asserts: a refused file is an error with a message and no handle.
 * Not the fixed real tokenizers (fuzz_tokenizer_encode.c, _decode.c). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "transmuter.h"

static const char TEXT[] = "Hello, World! 12345 caf\xc3\xa9  \t\r\n <s> [CLS] \xe4\xbd\xa0\xe5\xa5\xbd "
                           "\xf0\x9f\x98\x80 it's x\xcc\x81 <|endoftext|>";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fd = memfd_create("tokenizer.json", 0);
    if (fd < 0) abort();
    if (size && write(fd, data, size) != (ssize_t)size) abort();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    tm_tokenizer_options o = tm_tokenizer_options_default();
    o.ignore_config = 1;
    tm_tokenizer *t = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status st = tm_tokenizer_load(path, &o, &t, &err);
    close(fd);
    if (st != TM_OK) {
        if (t || !err.message[0]) abort();
        return 0;
    }
    tm_encoding *e = NULL;
    memset(&err, 0, sizeof err);
    if (tm_tokenizer_encode(t, TEXT, sizeof TEXT - 1, "pair", 4, NULL, &e, &err) != TM_OK) {
        if (e || !err.message[0]) abort();
    } else {
        char *out = NULL;
        if (tm_tokenizer_decode(t, tm_encoding_ids(e), tm_encoding_n(e), 0, 1, &out, NULL, &err) ==
            TM_OK)
            free(out);
        else if (!err.message[0])
            abort();
        tm_encoding_free(e);
    }
    int32_t ids[300];
    for (int i = 0; i < 300; i++) ids[i] = i;
    char *out = NULL;
    if (tm_tokenizer_decode(t, ids, 300, 1, 0, &out, NULL, &err) == TM_OK) free(out);
    tm_tokenizer_free(t);
    return 0;
}
