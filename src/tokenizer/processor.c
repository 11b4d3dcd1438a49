/* Post-processors: TemplateProcessing, BertProcessing, RobertaProcessing (trim_offsets,
 * add_prefix_space), ByteLevel (trim_offsets) and Sequence, with Rust's process_encodings
 * semantics (special tokens get offsets (0, 0), no word, special mask 1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tok.h"

static tm_status no_memory(tm_error *err) {
    return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
}

/* A special token of a processor: one or more ids with their strings. */
typedef struct special {
    char *name;
    int n;
    int32_t *ids;
    char **toks;
    uint32_t *lens;
} special;

static void special_free(special *s) {
    for (int i = 0; i < s->n; i++) free(s->toks[i]);
    free(s->toks);
    free(s->lens);
    free(s->ids);
    free(s->name);
}

static char *dup_len(const char *s, size_t len) {
    char *d = malloc(len + 1);
    if (d) memcpy(d, s, len), d[len] = '\0';
    return d;
}

/* Appends the special token's pieces to e. */
static tm_status push_special(tm_ienc *e, const special *sp, int32_t type_id, tm_error *err) {
    for (int i = 0; i < sp->n; i++) {
        tm_etok t = {.id = sp->ids[i], .type_id = type_id, .word = -1, .seq = -1,
                     .str = sp->toks[i], .len = sp->lens[i], .special = 1, .attention = 1};
        tm_status s = tm__ienc_push(e, &t, err);
        if (s) return s;
    }
    return TM_OK;
}

/* ---- ByteLevel offsets trimming (shared by ByteLevel and RobertaProcessing) --------- */

static int is_space_char(uint32_t c) {
    return c == 0x120 /* GPT-2's character for ' ' */ || tm__is_whitespace(c);
}

/* Rust trims a count of characters off offsets that are in characters at that point (the
 * bindings encode with char offsets); ours are in bytes, so each trimmed character counts
 * the bytes it stands for in the text: 1 for GPT-2's space, its UTF-8 length for real
 * whitespace (from an added token's lstrip/rstrip). Both give the same char offsets. */
static size_t space_bytes(uint32_t c, size_t n) { return c == 0x120 ? 1 : n; }

static void trim_one(tm_ienc *e, int add_prefix_space) {
    for (size_t i = 0; i < e->n; i++) {
        tm_etok *t = &e->t[i];
        size_t lead = 0, lead_b = 0, trail_b = 0, k = 0;
        while (k < t->len) {
            uint32_t c;
            size_t n = tm__utf8_decode(t->str, k, &c);
            if (!is_space_char(c)) break;
            lead++;
            lead_b += space_bytes(c, n);
            k += n;
        }
        size_t end = t->len;
        while (end > 0) {
            size_t b = end - 1;
            while (b > 0 && ((unsigned char)t->str[b] & 0xc0) == 0x80) b--;
            uint32_t c;
            size_t n = tm__utf8_decode(t->str, b, &c);
            if (!is_space_char(c)) break;
            trail_b += space_bytes(c, n);
            end = b;
        }
        if (!lead_b && !trail_b) continue;
        if (lead_b) {
            int is_first = i == 0 || t->start == 0;
            if (is_first && add_prefix_space && lead == 1) lead_b = 0;
            uint32_t ns = t->start + (uint32_t)lead_b;
            t->start = ns < t->end ? ns : t->end;
        }
        if (trail_b && t->end >= trail_b) {
            uint32_t ne = t->end - (uint32_t)trail_b;
            t->end = ne > t->start ? ne : t->start;
        }
    }
}

static void trim_offsets(tm_ienc *e, int add_prefix_space) {
    trim_one(e, add_prefix_space);
    for (size_t i = 0; i < e->n_over; i++) trim_one(&e->over[i], add_prefix_space);
}

/* ---- ByteLevel ------------------------------------------------------------------------ */

typedef struct bytelevel {
    tm_processor base;
    int trim, add_prefix_space;
} bytelevel;

static tm_status bl_process(const tm_processor *p, tm_ienc **list, size_t *n, int add_special,
                            tm_error *err) {
    const bytelevel *b = (const bytelevel *)p;
    for (size_t i = 0; i < *n; i++) {
        if (b->trim) trim_offsets(&(*list)[i], b->add_prefix_space);
        tm__ienc_set_seq(&(*list)[i], (int32_t)i);
    }
    return TM_OK;
}

static size_t zero_added(const tm_processor *p, int is_pair) {
    return 0;
}

static void plain_free(tm_processor *p) {
    free(p);
}

static tm_status load_bytelevel(const tm_json *cfg, const char *path, tm_processor **out,
                                tm_error *err) {
    bytelevel *b = calloc(1, sizeof *b);
    if (!b) return no_memory(err);
    b->base = (tm_processor){bl_process, zero_added, plain_free};
    tm_status s = tm__tj_bool(cfg, "trim_offsets", 1, &b->trim, path, err);
    if (!s) s = tm__tj_bool(cfg, "add_prefix_space", 1, &b->add_prefix_space, path, err);
    if (s) {
        free(b);
        return s;
    }
    *out = &b->base;
    return TM_OK;
}

/* ---- BertProcessing / RobertaProcessing ------------------------------------------------- */

typedef struct bert {
    tm_processor base;
    special cls, sep;
    int roberta, trim, add_prefix_space;
} bert;

/* Wraps one encoding (and its overflowing parts) with specials; first: cls A sep, else
 * Bert: B sep, Roberta: sep B sep. */
static tm_status wrap(const bert *b, tm_ienc *e, int first, tm_error *err) {
    tm_ienc out = {0};
    tm_status s = TM_OK;
    const special *head = first ? &b->cls : b->roberta ? &b->sep : NULL;
    int32_t type_head = 0, type_tail = first || b->roberta ? 0 : 1;
    if (head) s = push_special(&out, head, type_head, err);
    for (size_t i = 0; i < e->n && !s; i++) {
        tm_etok t = e->t[i];
        t.special = 0;
        if (b->roberta) t.type_id = 0;
        s = tm__ienc_push(&out, &t, err);
    }
    if (!s) s = push_special(&out, &b->sep, type_tail, err);
    if (s) {
        tm__ienc_free(&out);
        return s;
    }
    free(e->t);
    e->t = out.t;
    e->n = out.n;
    e->cap = out.cap;
    return TM_OK;
}

static tm_status bert_process(const tm_processor *p, tm_ienc **list, size_t *n, int add_special,
                              tm_error *err) {
    const bert *b = (const bert *)p;
    for (size_t i = 0; i < *n; i++) {
        tm_ienc *e = &(*list)[i];
        if (b->roberta) {
            if (b->trim) trim_offsets(e, b->add_prefix_space);
            tm__ienc_set_type_ids(e, 0);
        }
        if (!add_special) continue;
        tm_status s = wrap(b, e, i == 0, err);
        for (size_t k = 0; k < e->n_over && !s; k++) {
            s = wrap(b, &e->over[k], i == 0, err);
            if (!s && b->roberta) tm__ienc_set_type_ids(&e->over[k], 0);
        }
        if (s) return s;
    }
    return TM_OK;
}

static size_t bert_added(const tm_processor *p, int is_pair) {
    const bert *b = (const bert *)p;
    return b->roberta ? (is_pair ? 4 : 2) : (is_pair ? 3 : 2);
}

static void bert_free(tm_processor *p) {
    bert *b = (bert *)p;
    special_free(&b->cls);
    special_free(&b->sep);
    free(b);
}

/* ["[SEP]", 102] */
static tm_status load_pair(const tm_json *cfg, const char *key, const char *path, special *out,
                           tm_error *err) {
    const tm_json *v = tm_json_get(cfg, key);
    if (!v || v->type != TM_JSON_ARRAY || v->n != 2 || v->items[0].type != TM_JSON_STRING ||
        v->items[1].type != TM_JSON_NUMBER || v->items[1].number < 0)
        return tm__tok_fail(err, path, key, "expected [\"token\", id]");
    out->n = 1;
    out->ids = malloc(sizeof *out->ids);
    out->toks = malloc(sizeof *out->toks);
    out->lens = malloc(sizeof *out->lens);
    if (!out->ids || !out->toks || !out->lens) return no_memory(err);
    out->toks[0] = NULL;
    out->ids[0] = (int32_t)v->items[1].number;
    out->lens[0] = (uint32_t)v->items[0].len;
    if (!(out->toks[0] = dup_len(v->items[0].string, v->items[0].len))) return no_memory(err);
    return TM_OK;
}

static tm_status load_bert_like(const tm_json *cfg, const char *path, int roberta,
                                tm_processor **out, tm_error *err) {
    bert *b = calloc(1, sizeof *b);
    if (!b) return no_memory(err);
    b->base = (tm_processor){bert_process, bert_added, bert_free};
    b->roberta = roberta;
    tm_status s = load_pair(cfg, "cls", path, &b->cls, err);
    if (!s) s = load_pair(cfg, "sep", path, &b->sep, err);
    if (!s && roberta) s = tm__tj_bool(cfg, "trim_offsets", 1, &b->trim, path, err);
    if (!s && roberta) s = tm__tj_bool(cfg, "add_prefix_space", 1, &b->add_prefix_space, path, err);
    if (s) {
        bert_free(&b->base);
        return s;
    }
    *out = &b->base;
    return TM_OK;
}

/* ---- TemplateProcessing ------------------------------------------------------------------ */

typedef struct piece {
    int is_special;
    int seq;                    /* Sequence: 0 (A) or 1 (B) */
    const special *sp;          /* SpecialToken */
    int32_t type_id;
} piece;

typedef struct template_proc {
    tm_processor base;
    piece *single, *pair;
    int n_single, n_pair;
    special *specials;
    int n_specials;
} template_proc;

static tm_status tp_apply(const template_proc *t, const piece *tpl, int n_tpl, tm_ienc *encs,
                          size_t n_encs, int add_special, tm_ienc **out, size_t *n_out,
                          tm_error *err) {
    tm_ienc *res = calloc((size_t)n_tpl + 1, sizeof *res);
    if (!res) return no_memory(err);
    size_t n = 0;
    tm_status s = TM_OK;
    for (int i = 0; i < n_tpl && !s; i++) {
        const piece *p = &tpl[i];
        if (!p->is_special) {
            size_t k = (size_t)p->seq;
            if (k >= n_encs) continue;
            tm__ienc_set_type_ids(&encs[k], p->type_id);
            tm__ienc_set_seq(&encs[k], (int32_t)k);
            s = tm__ienc_clone(&encs[k], &res[n], err);
            if (!s) n++;
        } else if (add_special) {
            s = push_special(&res[n], p->sp, p->type_id, err);
            n++;
        }
    }
    if (s) {
        for (size_t i = 0; i <= n && i < (size_t)n_tpl + 1; i++) tm__ienc_free(&res[i]);
        free(res);
        return s;
    }
    *out = res;
    *n_out = n;
    return TM_OK;
}

static tm_status tp_process(const tm_processor *p, tm_ienc **list, size_t *n, int add_special,
                            tm_error *err) {
    const template_proc *t = (const template_proc *)p;
    int pair = *n == 2;
    tm_ienc *res = NULL;
    size_t n_res = 0;
    tm_status s = tp_apply(t, pair ? t->pair : t->single, pair ? t->n_pair : t->n_single, *list, *n,
                           add_special, &res, &n_res, err);
    if (s) return s;
    for (size_t i = 0; i < *n; i++) tm__ienc_free(&(*list)[i]);
    free(*list);
    *list = res;
    *n = n_res;
    return TM_OK;
}

static size_t tp_added(const tm_processor *p, int is_pair) {
    const template_proc *t = (const template_proc *)p;
    const piece *tpl = is_pair ? t->pair : t->single;
    int n = is_pair ? t->n_pair : t->n_single;
    size_t count = 0;
    for (int i = 0; i < n; i++)
        if (tpl[i].is_special) count += (size_t)tpl[i].sp->n;
    return count;
}

static void tp_free(tm_processor *p) {
    template_proc *t = (template_proc *)p;
    for (int i = 0; i < t->n_specials; i++) special_free(&t->specials[i]);
    free(t->specials);
    free(t->single);
    free(t->pair);
    free(t);
}

static tm_status load_specials(template_proc *t, const tm_json *obj, const char *path,
                               tm_error *err) {
    if (!obj || obj->type != TM_JSON_OBJECT)
        return tm__tok_fail(err, path, "special_tokens", "expected an object");
    t->specials = calloc((size_t)obj->n + 1, sizeof *t->specials);
    if (!t->specials) return no_memory(err);
    for (int i = 0; i < obj->n; i++) {
        special *sp = &t->specials[i];
        t->n_specials++;
        const tm_json *v = &obj->items[i];
        const tm_json *ids = tm_json_get(v, "ids"), *toks = tm_json_get(v, "tokens");
        char where[300];
        snprintf(where, sizeof where, "special_tokens.%s", obj->keys[i]);
        if (!ids || ids->type != TM_JSON_ARRAY || !toks || toks->type != TM_JSON_ARRAY ||
            ids->n != toks->n)
            return tm__tok_fail(err, path, where, "expected {\"ids\": [...], \"tokens\": [...]} "
                                "of the same length");
        if (!(sp->name = dup_len(obj->keys[i], strlen(obj->keys[i])))) return no_memory(err);
        sp->ids = calloc((size_t)ids->n + 1, sizeof *sp->ids);
        sp->toks = calloc((size_t)ids->n + 1, sizeof *sp->toks);
        sp->lens = calloc((size_t)ids->n + 1, sizeof *sp->lens);
        if (!sp->ids || !sp->toks || !sp->lens) return no_memory(err);
        for (int k = 0; k < ids->n; k++) {
            if (ids->items[k].type != TM_JSON_NUMBER || toks->items[k].type != TM_JSON_STRING)
                return tm__tok_fail(err, path, where, "ids must be numbers and tokens strings");
            sp->ids[k] = (int32_t)ids->items[k].number;
            sp->lens[k] = (uint32_t)toks->items[k].len;
            if (!(sp->toks[k] = dup_len(toks->items[k].string, toks->items[k].len)))
                return no_memory(err);
            sp->n = k + 1;
        }
    }
    return TM_OK;
}

static tm_status load_template(template_proc *t, const tm_json *arr, const char *path,
                               const char *key, piece **out, int *n_out, tm_error *err) {
    if (!arr || arr->type != TM_JSON_ARRAY)
        return tm__tok_fail(err, path, key, "expected an array of pieces");
    piece *p = calloc((size_t)arr->n + 1, sizeof *p);
    if (!p) return no_memory(err);
    *out = p;
    for (int i = 0; i < arr->n; i++) {
        const tm_json *x = &arr->items[i];
        char where[64];
        snprintf(where, sizeof where, "%s[%d]", key, i);
        const tm_json *seq = tm_json_get(x, "Sequence"), *sp = tm_json_get(x, "SpecialToken");
        const tm_json *body = seq ? seq : sp;
        const char *id = body ? tm_json_get_string(body, "id") : NULL;
        const tm_json *type_id = body ? tm_json_get(body, "type_id") : NULL;
        if (!id || !type_id || type_id->type != TM_JSON_NUMBER)
            return tm__tok_fail(err, path, where, "expected {\"Sequence\": {\"id\": \"A\", "
                                "\"type_id\": 0}} or {\"SpecialToken\": {\"id\": ..., \"type_id\": ...}}");
        double tv = type_id->number;   /* a u32 in the Rust library: a whole number here */
        if (!(tv >= 0 && tv <= 2147483647.0) || tv != (double)(int32_t)tv)
            return tm__tok_fail(err, path, where, "type_id %g is not a whole number from 0 to "
                                "2147483647", tv);
        p[i].type_id = (int32_t)tv;
        if (seq) {
            if (strcmp(id, "A") && strcmp(id, "B"))
                return tm__tok_fail(err, path, where, "a sequence id must be \"A\" or \"B\"");
            p[i].seq = id[0] == 'B';
        } else {
            p[i].is_special = 1;
            for (int k = 0; k < t->n_specials; k++)
                if (!strcmp(t->specials[k].name, id)) p[i].sp = &t->specials[k];
            if (!p[i].sp)
                return tm__tok_fail(err, path, where, "special token \"%s\" is missing from "
                                    "special_tokens", id);
        }
        *n_out = i + 1;
    }
    return TM_OK;
}

static tm_status load_template_proc(const tm_json *cfg, const char *path, tm_processor **out,
                                    tm_error *err) {
    template_proc *t = calloc(1, sizeof *t);
    if (!t) return no_memory(err);
    t->base = (tm_processor){tp_process, tp_added, tp_free};
    tm_status s = load_specials(t, tm_json_get(cfg, "special_tokens"), path, err);
    if (!s) s = load_template(t, tm_json_get(cfg, "single"), path, "single", &t->single, &t->n_single, err);
    if (!s) s = load_template(t, tm_json_get(cfg, "pair"), path, "pair", &t->pair, &t->n_pair, err);
    if (s) {
        tp_free(&t->base);
        return s;
    }
    *out = &t->base;
    return TM_OK;
}

/* ---- Sequence --------------------------------------------------------------------------- */

typedef struct seq_proc {
    tm_processor base;
    tm_processor **procs;
    int n;
} seq_proc;

static tm_status seq_process(const tm_processor *p, tm_ienc **list, size_t *n, int add_special,
                             tm_error *err) {
    const seq_proc *q = (const seq_proc *)p;
    for (int i = 0; i < q->n; i++) {
        tm_status s = q->procs[i]->process(q->procs[i], list, n, add_special, err);
        if (s) return s;
    }
    return TM_OK;
}

static size_t seq_added(const tm_processor *p, int is_pair) {
    const seq_proc *q = (const seq_proc *)p;
    size_t c = 0;
    for (int i = 0; i < q->n; i++) c += q->procs[i]->added_tokens(q->procs[i], is_pair);
    return c;
}

static void seq_free(tm_processor *p) {
    seq_proc *q = (seq_proc *)p;
    for (int i = 0; i < q->n; i++) q->procs[i]->free(q->procs[i]);
    free(q->procs);
    free(q);
}

static tm_status load_seq(const tm_json *cfg, const char *path, tm_processor **out, tm_error *err) {
    const tm_json *arr;
    tm_status s = tm__tj_array(cfg, "processors", &arr, path, err);
    if (s) return s;
    seq_proc *q = calloc(1, sizeof *q);
    if (!q || !(q->procs = calloc((size_t)arr->n + 1, sizeof *q->procs))) {
        free(q);
        return no_memory(err);
    }
    q->base = (tm_processor){seq_process, seq_added, seq_free};
    for (int i = 0; i < arr->n && !s; i++) {
        char sub[256];
        snprintf(sub, sizeof sub, "%s.processors[%d]", path, i);
        s = tm__processor_load(&arr->items[i], sub, &q->procs[i], err);
        if (!s) q->n++;
    }
    if (s) {
        seq_free(&q->base);
        return s;
    }
    *out = &q->base;
    return TM_OK;
}

tm_status tm__processor_load(const tm_json *cfg, const char *path, tm_processor **out,
                             tm_error *err) {
    const char *type = tm_json_get_string(cfg, "type");
    if (!type) return tm__tok_fail(err, path, "type", "missing post-processor type");
    if (!strcmp(type, "TemplateProcessing")) return load_template_proc(cfg, path, out, err);
    if (!strcmp(type, "BertProcessing")) return load_bert_like(cfg, path, 0, out, err);
    if (!strcmp(type, "RobertaProcessing")) return load_bert_like(cfg, path, 1, out, err);
    if (!strcmp(type, "ByteLevel")) return load_bytelevel(cfg, path, out, err);
    if (!strcmp(type, "Sequence")) return load_seq(cfg, path, out, err);
    return tm__fail_at(err, TM_ERR_UNSUPPORTED, path, type, NULL,
                       "tokenizer.json: %s: unknown post-processor type \"%s\"", path, type);
}
