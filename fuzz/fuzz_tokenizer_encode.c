/* libFuzzer target: tm_tokenizer_encode / _encode_batch and decode on arbitrary bytes with
 * fixed real tokenizers (fuzz/tok_fixed.h, one per model type). The first byte picks the
 * tokenizer and the options (special tokens, a pair cut at the first 0xFF byte, truncation,
 * padding); the rest is the text. Asserts: invalid UTF-8 and impossible options are errors
 * with a message; an encoding's arrays are consistent (ids in the vocabulary, offsets
 * inside the text, masks 0/1); its ids decode. Not the loader (fuzz_tokenizer_load.c). */
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

static void check(const tm_tokenizer *t, const tm_encoding *e, size_t len, size_t pair_len) {
    size_t n = tm_encoding_n(e), vocab = tm_tokenizer_vocab_size(t);
    const int32_t *ids = tm_encoding_ids(e), *off = tm_encoding_offsets(e);
    const int32_t *att = tm_encoding_attention_mask(e), *seq = tm_encoding_sequence_ids(e);
    const int32_t *lens = tm_encoding_token_lengths(e);
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (size_t)ids[i] >= vocab + 2000 || (att[i] != 0 && att[i] != 1)) abort();
        size_t limit = seq[i] == 1 ? pair_len : len;
        if (off[2 * i] < 0 || off[2 * i] > off[2 * i + 1] || (size_t)off[2 * i + 1] > limit) abort();
        if (lens[i] < 0 || tm_encoding_tokens(e)[i][lens[i]] != 0) abort();
    }
    for (size_t k = 0; k < tm_encoding_n_overflowing(e); k++)
        check(t, tm_encoding_overflowing(e, k), len, pair_len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || tok_fixed_init()) return 0;
    unsigned sel = data[0];
    const tm_tokenizer *t = tok_fixed[sel % TOK_FIXED_N];
    const char *text = (const char *)data + 1, *pair = NULL;
    size_t len = size - 1, pair_len = 0;
    if (sel & 0x08) {
        const char *cut = memchr(text, 0xFF, len);
        if (cut) {
            pair = cut + 1;
            pair_len = len - (size_t)(cut - text) - 1;
            len = (size_t)(cut - text);
        }
    }
    tm_encode_options o = tm_encode_options_default();
    o.add_special_tokens = (sel & 0x10) == 0;
    if (sel & 0x20) {
        o.truncation = (tm_truncation)(1 + (sel >> 6) % 3);
        o.max_length = 1 + (int)(size % 13);
        o.stride = (int)(size % 3);
    }
    if (sel & 0x40) {
        o.padding = TM_PAD_MAX_LENGTH;
        o.max_length = 1 + (int)(size % 17);
        o.padding_side = (sel & 0x80) ? TM_SIDE_LEFT : TM_SIDE_RIGHT;
    }
    tm_encoding *e = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    if (tm_tokenizer_encode(t, text, len, pair, pair_len, &o, &e, &err) != TM_OK) {
        if (e || !err.message[0]) abort();
        return 0;
    }
    check(t, e, len, pair_len);
    tok_fixed_decode_all(t, tm_encoding_ids(e), tm_encoding_n(e));
    tm_encoding_free(e);
    /* the same text as a batch of two on two threads gives the same ids */
    if ((sel & 0x60) == 0 && size % 4 == 0) {
        const char *texts[2] = {text, text};
        size_t lens[2] = {len, len};
        tm_encoding *b[2] = {NULL, NULL};
        o.threads = 2;
        if (tm_tokenizer_encode_batch(t, 2, texts, lens, NULL, NULL, &o, b, &err) != TM_OK) abort();
        if (tm_encoding_n(b[0]) != tm_encoding_n(b[1]) ||
            memcmp(tm_encoding_ids(b[0]), tm_encoding_ids(b[1]), tm_encoding_n(b[0]) * 4))
            abort();
        tm_encoding_free(b[0]);
        tm_encoding_free(b[1]);
    }
    return 0;
}
