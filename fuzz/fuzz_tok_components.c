/* libFuzzer target: one tokenizer component (normalizer, pre-tokenizer or decoder) loaded
 * from arbitrary JSON and run on arbitrary text. Input: a selector byte (0 normalizer, 1
 * pre-tokenizer, 2 decoder; modulo 3), the component's JSON, a NUL, then the text (for a
 * decoder, tokens separated by spaces, any bytes). Seeds: fuzz/make_tok_component_seeds.py
 * (the configs and inputs of tests/data/tokenizers/components). Asserts: a refused config is an error with a
 * message; normalized text and pieces stay valid UTF-8. Not whole tokenizers
 * (fuzz_tokenizer_load.c). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "tokenizer/components.h"

static void normalizer(const tm_json *cfg, const char *text, size_t len) {
    tm_normalizer *n = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    if (tm__normalizer_load(cfg, "normalizer", &n, &err)) {
        if (!err.message[0]) abort();
        return;
    }
    tm_nstr ns;
    if (tm__utf8_valid(text, len, NULL) && !tm__nstr_init(&ns, text, len, 0)) {
        if (!n->normalize(n, &ns, &err) && !tm__utf8_valid(ns.s, ns.len, NULL)) abort();
        tm__nstr_free(&ns);
    }
    tm__normalizer_free(n);
}

static void pretokenizer(const tm_json *cfg, const char *text, size_t len) {
    tm_pretokenizer *p = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    if (tm__pretokenizer_load(cfg, "pre_tokenizer", &p, &err)) {
        if (!err.message[0]) abort();
        return;
    }
    if (tm__utf8_valid(text, len, NULL)) {
        tm_pstr ps;
        memset(&ps, 0, sizeof ps);
        ps.v = calloc(1, sizeof *ps.v);
        if (ps.v) {
            ps.n = ps.cap = 1;
            ps.v[0].n_tokens = -1;
            if (!tm__nstr_init(&ps.v[0].ns, text, len, 0) && !p->pre_tokenize(p, &ps, &err))
                for (size_t k = 0; k < ps.n; k++)
                    if (!tm__utf8_valid(ps.v[k].ns.s, ps.v[k].ns.len, NULL)) abort();
            tm__pstr_free(&ps);
        }
    }
    tm__pretokenizer_free(p);
}

static void decoder(const tm_json *cfg, const char *text, size_t len) {
    tm_decoder *d = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    if (tm__decoder_load(cfg, "decoder", &d, &err)) {
        if (!err.message[0]) abort();
        return;
    }
    tm_strs l;
    memset(&l, 0, sizeof l);
    for (size_t i = 0; i <= len;) {
        const char *sp = memchr(text + i, ' ', len - i);
        size_t e = sp ? (size_t)(sp - text) : len;
        if (tm__strs_push(&l, text + i, e - i, &err)) break;
        i = e + 1;
    }
    d->decode_chain(d, &l, &err);
    tm__strs_free(&l);
    tm__decoder_free(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    const uint8_t *nul = memchr(data + 1, 0, size - 1);
    if (!nul) return 0;
    tm_json *cfg = tm_json_parse_ex((const char *)data + 1, (size_t)(nul - (data + 1)),
                                    TM_JSON_ALLOW_NUL);
    if (!cfg) return 0;
    const char *text = (const char *)nul + 1;
    size_t len = size - (size_t)(nul + 1 - data);
    switch (data[0] % 3) {
    case 0: normalizer(cfg, text, len); break;
    case 1: pretokenizer(cfg, text, len); break;
    default: decoder(cfg, text, len);
    }
    tm_json_free(cfg);
    return 0;
}
