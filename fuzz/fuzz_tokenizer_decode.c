/* libFuzzer target: tm_tokenizer_decode of arbitrary id sequences with fixed real
 * tokenizers (fuzz/tok_fixed.h). The first byte picks the tokenizer; then each 2 bytes are
 * an id in or near the vocabulary (added tokens included), every 7th is raw 4 bytes (any
 * int32, negative too). Decodes with and without skip_special and cleanup, and checks
 * tm_tokenizer_id_to_token / token_to_id round trips. Not encode (fuzz_tokenizer_encode.c). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "tok_fixed.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    return tok_fixed_init() ? 1 : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || tok_fixed_init()) return 0;
    const tm_tokenizer *t = tok_fixed[data[0] % TOK_FIXED_N];
    size_t vocab = tm_tokenizer_vocab_size(t) + 64;
    int32_t *ids = malloc((size / 2 + 1) * sizeof *ids);
    if (!ids) abort();
    size_t n = 0;
    for (size_t i = 1; i + 1 < size;) {
        if (n % 7 == 6 && i + 3 < size) {
            uint32_t v;
            memcpy(&v, data + i, 4);
            ids[n++] = (int32_t)v;
            i += 4;
        } else {
            /* spread 16 bits over the vocabulary and the added tokens above it */
            uint32_t v = (uint32_t)data[i] | (uint32_t)data[i + 1] << 8;
            ids[n++] = (int32_t)((v * (uint64_t)vocab) >> 16);
            i += 2;
        }
    }
    tok_fixed_decode_all(t, ids, n);
    for (size_t i = 0; i < n; i++) {
        const char *s = tm_tokenizer_id_to_token(t, ids[i]);
        if (!s) continue;
        int32_t back = tm_tokenizer_token_to_id(t, s, strlen(s));
        /* a token string maps back to some id whose string is the same */
        const char *s2 = back >= 0 ? tm_tokenizer_id_to_token(t, back) : NULL;
        if (!s2 || strcmp(s, s2)) abort();
    }
    free(ids);
    return 0;
}
