/* Encodings while they are built (Rust's Encoding): merging with the cross product of
 * overflowing parts, truncation into overflowing windows with a stride, padding. Not the
 * public tm_encoding (tokenizer.c flattens one of these into it). */
#include <stdlib.h>
#include <string.h>
#include "tok.h"

static tm_status no_memory(tm_error *err) {
    return tm__fail(err, TM_ERR_NO_MEMORY, "tokenizer: out of memory");
}

void tm__ienc_free(tm_ienc *e) {
    if (!e) return;
    for (size_t i = 0; i < e->n_over; i++) tm__ienc_free(&e->over[i]);
    free(e->over);
    free(e->t);
    memset(e, 0, sizeof *e);
}

static int reserve(tm_ienc *e, size_t n) {
    if (n <= e->cap) return 1;
    size_t cap = e->cap ? e->cap * 2 : 16;
    while (cap < n) cap *= 2;
    tm_etok *t = realloc(e->t, cap * sizeof *t);
    if (!t) return 0;
    e->t = t;
    e->cap = cap;
    return 1;
}

tm_status tm__ienc_push(tm_ienc *e, const tm_etok *t, tm_error *err) {
    if (!reserve(e, e->n + 1)) return no_memory(err);
    e->t[e->n++] = *t;
    return TM_OK;
}

tm_status tm__ienc_clone(const tm_ienc *src, tm_ienc *dst, tm_error *err) {
    memset(dst, 0, sizeof *dst);
    if (!reserve(dst, src->n ? src->n : 1)) return no_memory(err);
    if (src->n) memcpy(dst->t, src->t, src->n * sizeof *src->t);
    dst->n = src->n;
    if (src->n_over) {
        dst->over = calloc(src->n_over, sizeof *dst->over);
        if (!dst->over) {
            tm__ienc_free(dst);
            return no_memory(err);
        }
        for (size_t i = 0; i < src->n_over; i++, dst->n_over++) {
            tm_status s = tm__ienc_clone(&src->over[i], &dst->over[i], err);
            if (s) {
                tm__ienc_free(dst);
                return s;
            }
        }
    }
    return TM_OK;
}

static tm_status append_over(tm_ienc *list_owner, size_t *cap, tm_ienc *e, tm_error *err) {
    if (list_owner->n_over == *cap) {
        size_t c = *cap ? *cap * 2 : 4;
        tm_ienc *v = realloc(list_owner->over, c * sizeof *v);
        if (!v) {
            tm__ienc_free(e);
            return no_memory(err);
        }
        list_owner->over = v;
        *cap = c;
    }
    list_owner->over[list_owner->n_over++] = *e;
    memset(e, 0, sizeof *e);
    return TM_OK;
}

/* self's tokens (not its overflowing parts) merged with a copy of other. */
static tm_status merged_copy(const tm_ienc *self, const tm_ienc *other, tm_ienc *out, tm_error *err) {
    tm_ienc a, b;
    tm_status s = tm__ienc_clone(self, &a, err);
    if (s) return s;
    s = tm__ienc_clone(other, &b, err);
    if (s) {
        tm__ienc_free(&a);
        return s;
    }
    s = tm__ienc_merge_with(&a, &b, err);
    if (s) {
        tm__ienc_free(&a);
        return s;
    }
    *out = a;
    return TM_OK;
}

tm_status tm__ienc_merge_with(tm_ienc *e, tm_ienc *pair, tm_error *err) {
    tm_ienc list = {0};
    size_t cap = 0;
    tm_status s = TM_OK;
    for (size_t i = 0; i < e->n_over && !s; i++) {
        tm_ienc m;
        s = merged_copy(&e->over[i], pair, &m, err);
        if (!s) s = append_over(&list, &cap, &m, err);
        for (size_t j = 0; j < pair->n_over && !s; j++) {
            s = merged_copy(&e->over[i], &pair->over[j], &m, err);
            if (!s) s = append_over(&list, &cap, &m, err);
        }
    }
    for (size_t j = 0; j < pair->n_over && !s; j++) {
        tm_ienc self_only = {e->t, e->n, e->cap, NULL, 0};   /* without its overflowing */
        tm_ienc m;
        s = merged_copy(&self_only, &pair->over[j], &m, err);
        if (!s) s = append_over(&list, &cap, &m, err);
    }
    if (!s && !reserve(e, e->n + pair->n)) s = no_memory(err);
    if (s) {
        tm__ienc_free(&list);
        tm__ienc_free(pair);
        return s;
    }
    if (pair->n) memcpy(e->t + e->n, pair->t, pair->n * sizeof *pair->t);
    e->n += pair->n;
    for (size_t i = 0; i < e->n_over; i++) tm__ienc_free(&e->over[i]);
    free(e->over);
    e->over = list.over;
    e->n_over = list.n_over;
    tm__ienc_free(pair);
    return TM_OK;
}

tm_status tm__ienc_merge(tm_ienc *list, size_t n, tm_ienc *out, tm_error *err) {
    tm_ienc acc = {0};
    tm_status s = TM_OK;
    for (size_t i = 0; i < n; i++) {
        if (!s) s = tm__ienc_merge_with(&acc, &list[i], err);
        else tm__ienc_free(&list[i]);
    }
    if (s) {
        tm__ienc_free(&acc);
        return s;
    }
    *out = acc;
    return TM_OK;
}

void tm__ienc_set_type_ids(tm_ienc *e, int32_t type_id) {
    for (size_t i = 0; i < e->n; i++) e->t[i].type_id = type_id;
}

void tm__ienc_set_seq(tm_ienc *e, int32_t seq) {
    for (size_t i = 0; i < e->n; i++) e->t[i].seq = seq;
}

static tm_status window(const tm_ienc *e, size_t start, size_t stop, tm_ienc *out, tm_error *err) {
    memset(out, 0, sizeof *out);
    if (!reserve(out, stop - start ? stop - start : 1)) return no_memory(err);
    memcpy(out->t, e->t + start, (stop - start) * sizeof *e->t);
    out->n = stop - start;
    return TM_OK;
}

tm_status tm__ienc_truncate(tm_ienc *e, size_t max_len, size_t stride, int left, tm_error *err) {
    size_t len = e->n;
    if (max_len >= len) return TM_OK;
    if (max_len == 0) {
        /* everything moves into one overflowing part */
        tm_ienc whole = *e, fresh = {0};
        size_t cap = 0;
        tm_status s = append_over(&fresh, &cap, &whole, err);
        if (s) return s;
        *e = fresh;
        return TM_OK;
    }
    if (stride >= max_len)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tokenizer: the stride (%zu) must be less "
                        "than the length left after special tokens (%zu)", stride, max_len);
    size_t step = max_len - stride;
    size_t n_parts = 0, cap_parts = len / step + 2;
    size_t *parts = malloc(cap_parts * 2 * sizeof *parts);
    if (!parts) return no_memory(err);
    if (!left) {
        for (size_t start = 0; start < len; start += step) {
            size_t stop = start + max_len < len ? start + max_len : len;
            parts[2 * n_parts] = start, parts[2 * n_parts + 1] = stop, n_parts++;
            if (stop == len) break;
        }
    } else {
        /* stops walk down from the end by step; the window ends there */
        for (size_t k = 0; k < len; k += step) {
            size_t stop = len - k;
            size_t start = stop > max_len ? stop - max_len : 0;
            parts[2 * n_parts] = start, parts[2 * n_parts + 1] = stop, n_parts++;
            if (start == 0) break;
        }
    }
    tm_ienc first, rest = {0};
    size_t cap = 0;
    tm_status s = window(e, parts[0], parts[1], &first, err);
    for (size_t i = 1; i < n_parts && !s; i++) {
        tm_ienc w;
        s = window(e, parts[2 * i], parts[2 * i + 1], &w, err);
        if (!s) s = append_over(&rest, &cap, &w, err);
    }
    free(parts);
    if (s) {
        tm__ienc_free(&rest);
        if (first.t) tm__ienc_free(&first);
        return s;
    }
    first.over = rest.over;
    first.n_over = rest.n_over;
    tm__ienc_free(e);
    *e = first;
    return TM_OK;
}

tm_status tm__ienc_pad(tm_ienc *e, size_t target, int32_t pad_id, const char *pad_tok,
                       uint32_t pad_len, int left, tm_error *err) {
    for (size_t i = 0; i < e->n_over; i++) {
        tm_status s = tm__ienc_pad(&e->over[i], target, pad_id, pad_tok, pad_len, left, err);
        if (s) return s;
    }
    if (e->n >= target) return TM_OK;
    size_t add = target - e->n;
    if (!reserve(e, target)) return no_memory(err);
    tm_etok pad = {.id = pad_id, .type_id = 0, .word = -1, .seq = -1, .start = 0, .end = 0,
                   .str = pad_tok, .len = pad_len, .special = 1, .attention = 0};
    if (left) memmove(e->t + add, e->t, e->n * sizeof *e->t);
    tm_etok *at = left ? e->t : e->t + e->n;
    for (size_t i = 0; i < add; i++) at[i] = pad;
    e->n = target;
    return TM_OK;
}
