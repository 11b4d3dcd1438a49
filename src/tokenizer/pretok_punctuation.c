/* The Punctuation pre-tokenizer: splits on every punctuation character (ASCII punctuation
 * or Unicode P*) with a configurable behavior (default Isolated). Not BertPreTokenizer. */
#include "components.h"

typedef struct punctuation {
    tm_pretokenizer base;
    tm_split_behavior behavior;
} punctuation;

static int is_punc(uint32_t c, void *ctx) {
    return tm__rust_is_punctuation(c);
}

static tm_status pre_tokenize(const tm_pretokenizer *self, tm_pstr *ps, tm_error *err) {
    const punctuation *p = (const punctuation *)self;
    return tm__pstr_split_chars(ps, is_punc, NULL, p->behavior, err);
}

static void punctuation_free(tm_pretokenizer *self) {
    free(self);
}

static tm_status load_pre_punctuation(const tm_json *cfg, const char *path, tm_pretokenizer **out,
                                  tm_error *err) {
    tm_split_behavior b = TM_SPLIT_ISOLATED;
    const tm_json *v = tm_json_get(cfg, "behavior");
    if (v && v->type != TM_JSON_NULL) {
        char sub[256];
        tm__tok_path(sub, sizeof sub, path, "behavior", -1);
        tm_status s = tm__split_behavior_parse(v, sub, &b, err);
        if (s) return s;
    }
    punctuation *p = tm__comp_alloc(sizeof *p, err);
    if (!p) return TM_ERR_NO_MEMORY;
    p->base.pre_tokenize = pre_tokenize;
    p->base.free = punctuation_free;
    p->behavior = b;
    *out = &p->base;
    return TM_OK;
}

TM_TOK_PRETOKENIZER("Punctuation", load_pre_punctuation);
