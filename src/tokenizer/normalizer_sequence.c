/* The Sequence normalizer: runs its normalizers one after the other. Not the pre-tokenizer
 * or decoder Sequence. */
#include "components.h"

typedef struct seq {
    tm_normalizer base;
    tm_normalizer **v;
    size_t n;
} seq;

static tm_status normalize(const tm_normalizer *self, tm_nstr *ns, tm_error *err) {
    const seq *q = (const seq *)self;
    for (size_t i = 0; i < q->n; i++) {
        tm_status s = q->v[i]->normalize(q->v[i], ns, err);
        if (s) return s;
    }
    return TM_OK;
}

static void seq_free(tm_normalizer *self) {
    seq *q = (seq *)self;
    for (size_t i = 0; i < q->n; i++) tm__normalizer_free(q->v[i]);
    free(q->v);
    free(q);
}

static tm_status load_norm_seq(const tm_json *cfg, const char *path, tm_normalizer **out,
                          tm_error *err) {
    const tm_json *arr;
    tm_status s = tm__tj_array(cfg, "normalizers", &arr, path, err);
    if (s) return s;
    seq *q = tm__comp_alloc(sizeof *q, err);
    if (!q) return TM_ERR_NO_MEMORY;
    q->base.normalize = normalize;
    q->base.free = seq_free;
    if (arr->n && !(q->v = tm__comp_alloc((size_t)arr->n * sizeof *q->v, err))) {
        free(q);
        return TM_ERR_NO_MEMORY;
    }
    char sub[256], key[256];
    tm__tok_path(key, sizeof key, path, "normalizers", -1);
    for (int i = 0; i < arr->n; i++) {
        tm__tok_path(sub, sizeof sub, key, NULL, i);
        s = tm__normalizer_load(&arr->items[i], sub, &q->v[q->n], err);
        if (s) {
            seq_free(&q->base);
            return s;
        }
        q->n++;
    }
    *out = &q->base;
    return TM_OK;
}

TM_TOK_NORMALIZER("Sequence", load_norm_seq);
