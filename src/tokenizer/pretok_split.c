/* The Split pre-tokenizer: splits on the matches of a String or Regex pattern with one of
 * the five behaviors, optionally inverted (the matches are the kept pieces). Not
 * CharDelimiterSplit. */
#include "components.h"

typedef struct split {
    tm_pretokenizer base;
    tm_pattern pattern;
    tm_split_behavior behavior;
    int invert;
} split;

static tm_status pre_tokenize(const tm_pretokenizer *self, tm_pstr *ps, tm_error *err) {
    const split *p = (const split *)self;
    return tm__pstr_split_pattern_inv(ps, &p->pattern, p->behavior, p->invert, err);
}

static void split_free(tm_pretokenizer *self) {
    split *p = (split *)self;
    tm__pattern_free(&p->pattern);
    free(p);
}

static tm_status load_pre_split(const tm_json *cfg, const char *path, tm_pretokenizer **out,
                            tm_error *err) {
    char sub[256];
    tm_split_behavior b;
    int invert;
    const tm_json *v = tm_json_get(cfg, "behavior");
    tm__tok_path(sub, sizeof sub, path, "behavior", -1);
    if (!v) return tm__tok_fail(err, path, "behavior", "missing field");
    tm_status s = tm__split_behavior_parse(v, sub, &b, err);
    if (!s) s = tm__tj_req_bool(cfg, "invert", &invert, path, err);
    if (s) return s;
    split *p = tm__comp_alloc(sizeof *p, err);
    if (!p) return TM_ERR_NO_MEMORY;
    p->base.pre_tokenize = pre_tokenize;
    p->base.free = split_free;
    p->behavior = b;
    p->invert = invert;
    tm__tok_path(sub, sizeof sub, path, "pattern", -1);
    s = tm__pattern_load(tm_json_get(cfg, "pattern"), sub, &p->pattern, err);
    if (s) {
        split_free(&p->base);
        return s;
    }
    *out = &p->base;
    return TM_OK;
}

TM_TOK_PRETOKENIZER("Split", load_pre_split);
