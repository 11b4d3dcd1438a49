/* The Replace normalizer, and the aligned replace Metaspace also uses: every match of a
 * pattern becomes `content`, whose characters all align to the match's last byte (Rust's
 * NormalizedString::replace). Not the Replace decoder. */
#include <string.h>
#include "components.h"

tm_status tm__nstr_replace(tm_nstr *ns, const tm_matches *m, const char *content,
                           size_t content_len, tm_error *err) {
    size_t k = 0;
    while (k < m->n && !m->v[k].is_match) k++;
    if (k == m->n) return TM_OK;
    tm_nbuild b;
    tm__nbuild_begin(&b, ns);
    for (; k < m->n; k++) {
        if (!m->v[k].is_match) continue;
        tm__nbuild_copy_to(&b, m->v[k].start);
        tm__nbuild_skip(&b, tm__utf8_count(ns->s + m->v[k].start, m->v[k].end - m->v[k].start));
        for (size_t i = 0; i < content_len;) {
            uint32_t c;
            i += tm__utf8_decode(content, i, &c);
            tm__nbuild_push(&b, c, 1);
        }
    }
    tm__nbuild_copy_to(&b, ns->len);
    return tm__nbuild_end(&b, err);
}

typedef struct replace {
    tm_normalizer base;
    tm_pattern pattern;
    char *content;
    size_t content_len;
} replace;

static tm_status normalize(const tm_normalizer *self, tm_nstr *ns, tm_error *err) {
    const replace *r = (const replace *)self;
    tm_matches m = {0};
    tm_status s = tm__pattern_find(&r->pattern, ns->s, ns->len, &m, err);
    if (!s) s = tm__nstr_replace(ns, &m, r->content, r->content_len, err);
    tm__matches_free(&m);
    return s;
}

static void replace_free(tm_normalizer *self) {
    replace *r = (replace *)self;
    tm__pattern_free(&r->pattern);
    free(r->content);
    free(r);
}

static tm_status load_norm_replace(const tm_json *cfg, const char *path, tm_normalizer **out,
                              tm_error *err) {
    const char *content;
    size_t len;
    char sub[256];
    tm_status s = tm__tj_req_string(cfg, "content", &content, &len, path, err);
    if (s) return s;
    replace *r = tm__comp_alloc(sizeof *r, err);
    if (!r) return TM_ERR_NO_MEMORY;
    r->base.normalize = normalize;
    r->base.free = replace_free;
    tm__tok_path(sub, sizeof sub, path, "pattern", -1);
    s = tm__pattern_load(tm_json_get(cfg, "pattern"), sub, &r->pattern, err);
    if (!s && !(r->content = malloc(len + 1)))
        s = tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
    if (s) {
        replace_free(&r->base);
        return s;
    }
    memcpy(r->content, content, len + 1);
    r->content_len = len;
    *out = &r->base;
    return TM_OK;
}

TM_TOK_NORMALIZER("Replace", load_norm_replace);
