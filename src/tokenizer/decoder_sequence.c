/* The Sequence decoder: runs its decoders one after the other over the token list. Not
 * the normalizer or pre-tokenizer Sequence. */
#include "components.h"

typedef struct seq_dec {
    tm_decoder base;
    tm_decoder **v;
    size_t n;
} seq_dec;

static tm_status seq(const tm_decoder *self, tm_strs *tokens, tm_error *err) {
    const seq_dec *d = (const seq_dec *)self;
    for (size_t i = 0; i < d->n; i++) {
        tm_status s = d->v[i]->decode_chain(d->v[i], tokens, err);
        if (s) return s;
    }
    return TM_OK;
}

static void seq_free(tm_decoder *self) {
    seq_dec *d = (seq_dec *)self;
    for (size_t i = 0; i < d->n; i++) tm__decoder_free(d->v[i]);
    free(d->v);
    free(d);
}

static tm_status load_dec_seq(const tm_json *cfg, const char *path, tm_decoder **out, tm_error *err) {
    const tm_json *arr;
    tm_status s = tm__tj_array(cfg, "decoders", &arr, path, err);
    if (s) return s;
    seq_dec *d = tm__comp_alloc(sizeof *d, err);
    if (!d) return TM_ERR_NO_MEMORY;
    d->base.decode_chain = seq;
    d->base.free = seq_free;
    if (arr->n && !(d->v = tm__comp_alloc((size_t)arr->n * sizeof *d->v, err))) {
        free(d);
        return TM_ERR_NO_MEMORY;
    }
    char sub[256], key[256];
    tm__tok_path(key, sizeof key, path, "decoders", -1);
    for (int i = 0; i < arr->n; i++) {
        tm__tok_path(sub, sizeof sub, key, NULL, i);
        s = tm__decoder_load(&arr->items[i], sub, &d->v[d->n], err);
        if (s) {
            seq_free(&d->base);
            return s;
        }
        d->n++;
    }
    *out = &d->base;
    return TM_OK;
}

TM_TOK_DECODER("Sequence", load_dec_seq);
