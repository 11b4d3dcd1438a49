/* The BertPreTokenizer: splits on whitespace (removed), then isolates every punctuation
 * character (ASCII punctuation or Unicode P*). Not the BertNormalizer. */
#include "components.h"

static int is_ws(uint32_t c, void *ctx) {
    return tm__is_whitespace(c);
}

static int is_punc(uint32_t c, void *ctx) {
    return tm__rust_is_punctuation(c);
}

static tm_status pre_tokenize(const tm_pretokenizer *self, tm_pstr *ps, tm_error *err) {
    tm_status s = tm__pstr_split_chars(ps, is_ws, NULL, TM_SPLIT_REMOVED, err);
    return s ? s : tm__pstr_split_chars(ps, is_punc, NULL, TM_SPLIT_ISOLATED, err);
}

static void bert_free(tm_pretokenizer *self) {
    free(self);
}

static tm_status load_pre_bert(const tm_json *cfg, const char *path, tm_pretokenizer **out,
                           tm_error *err) {
    tm_pretokenizer *p = tm__comp_alloc(sizeof *p, err);
    if (!p) return TM_ERR_NO_MEMORY;
    p->pre_tokenize = pre_tokenize;
    p->free = bert_free;
    *out = p;
    return TM_OK;
}

TM_TOK_PRETOKENIZER("BertPreTokenizer", load_pre_bert);
