/* The component registry (generated from the TM_TOK_* lines of the component files) and the
 * generic loaders that dispatch on a JSON object's "type"; also the JSON field helpers
 * components share. Not the components themselves (one file each). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

#include "tok_registry.inc"

const struct tm_tok_reg *tm__tok_lookup(tm_tok_kind kind, const char *type) {
    for (const struct tm_tok_reg *const *r = tm__tok_registry; *r; r++)
        if ((*r)->kind == kind && !strcmp((*r)->type, type)) return *r;
    return NULL;
}

tm_status tm__tok_fail(tm_error *err, const char *path, const char *key, const char *fmt, ...) {
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tm__fail_at(err, TM_ERR_PARSE, path, NULL, key, "tokenizer.json: %s%s%s: %s",
                       path ? path : "", key ? "." : "", key ? key : "", msg);
}

void tm__tok_path(char *buf, size_t cap, const char *path, const char *key, int index) {
    if (key) snprintf(buf, cap, "%s%s%s", path && *path ? path : "", path && *path ? "." : "", key);
    else snprintf(buf, cap, "%s[%d]", path ? path : "", index);
}

/* The registration for cfg's "type", or an error naming it and the path. */
static tm_status find_reg(const tm_json *cfg, const char *path, tm_tok_kind kind,
                          const char *what, const struct tm_tok_reg **out, tm_error *err) {
    if (!cfg || cfg->type != TM_JSON_OBJECT)
        return tm__tok_fail(err, path, NULL, "expected a %s object", what);
    const tm_json *t = tm_json_get(cfg, "type");
    if (!t || t->type != TM_JSON_STRING)
        return tm__tok_fail(err, path, "type", "missing %s type", what);
    const struct tm_tok_reg *r = tm__tok_lookup(kind, t->string);
    if (!r)
        return tm__fail_at(err, TM_ERR_UNSUPPORTED, path, t->string, NULL,
                           "tokenizer.json: %s: unknown %s type \"%s\"", path, what, t->string);
    *out = r;
    return TM_OK;
}

tm_status tm__normalizer_load(const tm_json *cfg, const char *path, tm_normalizer **out,
                              tm_error *err) {
    const struct tm_tok_reg *r;
    tm_status s = find_reg(cfg, path, TM_TOK_KIND_NORMALIZER, "normalizer", &r, err);
    return s ? s : r->normalizer(cfg, path, out, err);
}

tm_status tm__pretokenizer_load(const tm_json *cfg, const char *path, tm_pretokenizer **out,
                                tm_error *err) {
    const struct tm_tok_reg *r;
    tm_status s = find_reg(cfg, path, TM_TOK_KIND_PRETOKENIZER, "pre-tokenizer", &r, err);
    return s ? s : r->pretokenizer(cfg, path, out, err);
}

tm_status tm__decoder_load(const tm_json *cfg, const char *path, tm_decoder **out,
                           tm_error *err) {
    const struct tm_tok_reg *r;
    tm_status s = find_reg(cfg, path, TM_TOK_KIND_DECODER, "decoder", &r, err);
    return s ? s : r->decoder(cfg, path, out, err);
}

void tm__normalizer_free(tm_normalizer *n) {
    if (n) n->free(n);
}

void tm__pretokenizer_free(tm_pretokenizer *p) {
    if (p) p->free(p);
}

void tm__decoder_free(tm_decoder *d) {
    if (d) d->free(d);
}

/* ---- JSON fields ------------------------------------------------------------------- */

/* The field, or NULL when absent or null. */
static const tm_json *field(const tm_json *o, const char *key) {
    const tm_json *v = tm_json_get(o, key);
    return v && v->type != TM_JSON_NULL ? v : NULL;
}

tm_status tm__tj_bool(const tm_json *o, const char *key, int def, int *out, const char *path,
                      tm_error *err) {
    const tm_json *v = field(o, key);
    if (!v) {
        *out = def;
        return TM_OK;
    }
    if (v->type != TM_JSON_BOOL) return tm__tok_fail(err, path, key, "expected true or false");
    *out = v->number != 0;
    return TM_OK;
}

tm_status tm__tj_int(const tm_json *o, const char *key, int64_t def, int64_t *out,
                     const char *path, tm_error *err) {
    const tm_json *v = field(o, key);
    if (!v) {
        *out = def;
        return TM_OK;
    }
    /* range first: converting a double outside int64_t is undefined behaviour */
    if (v->type != TM_JSON_NUMBER || !(v->number > -9.2e18 && v->number < 9.2e18) ||
        v->number != (double)(int64_t)v->number)
        return tm__tok_fail(err, path, key, "expected an integer");
    *out = (int64_t)v->number;
    return TM_OK;
}

tm_status tm__tj_number(const tm_json *o, const char *key, double def, double *out,
                        const char *path, tm_error *err) {
    const tm_json *v = field(o, key);
    if (!v) {
        *out = def;
        return TM_OK;
    }
    if (v->type != TM_JSON_NUMBER) return tm__tok_fail(err, path, key, "expected a number");
    *out = v->number;
    return TM_OK;
}

tm_status tm__tj_string(const tm_json *o, const char *key, const char *def, const char **out,
                        size_t *len, const char *path, tm_error *err) {
    const tm_json *v = field(o, key);
    if (!v) {
        *out = def;
        if (len) *len = def ? strlen(def) : 0;
        return TM_OK;
    }
    if (v->type != TM_JSON_STRING) return tm__tok_fail(err, path, key, "expected a string");
    *out = v->string;
    if (len) *len = v->len;
    return TM_OK;
}

tm_status tm__tj_array(const tm_json *o, const char *key, const tm_json **out, const char *path,
                       tm_error *err) {
    const tm_json *v = tm_json_get(o, key);
    if (!v || v->type != TM_JSON_ARRAY) return tm__tok_fail(err, path, key, "expected an array");
    *out = v;
    return TM_OK;
}
