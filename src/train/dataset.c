/* Fine-tuning datasets: the JSONL and NPY-folder readers and the padding batcher declared
 * in dataset.h. Everything is checked when read (and against the batch options when the
 * batcher is made), so training never stops half-way on a bad example. Not tokenisation. */
#define _XOPEN_SOURCE 700

#include "dataset.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../core/dtype.h"
#include "../core/status.h"
#include "../hub/json.h"
#include "../io/npy.h"

/* JSON numbers are doubles: integers beyond 2^53 would not be what the file says. */
#define MAX_EXACT_INT 9007199254740992.0

void tm__dataset_free(tm__dataset *d) {
    if (!d) return;
    for (int64_t i = 0; i < d->n; i++) {
        free(d->examples[i].input_ids);
        free(d->examples[i].attention_mask);
        free(d->examples[i].token_type_ids);
    }
    free(d->examples);
    free(d->source);
    free(d);
}

static tm__dataset *new_dataset(const char *path, int is_jsonl) {
    tm__dataset *d = calloc(1, sizeof *d);
    if (d && !(d->source = strdup(path))) {
        free(d);
        return NULL;
    }
    if (d) d->is_jsonl = is_jsonl;
    return d;
}

static tm__example *push_example(tm__dataset *d, int64_t *cap) {
    if (d->n == *cap) {
        int64_t c = *cap ? *cap * 2 : 64;
        tm__example *grown = realloc(d->examples, (size_t)c * sizeof *grown);
        if (!grown) return NULL;
        d->examples = grown;
        *cap = c;
    }
    tm__example *e = &d->examples[d->n++];
    memset(e, 0, sizeof *e);
    return e;
}

/* ---- JSONL --------------------------------------------------------------------------- */

static tm_status line_fail(tm_error *err, tm_status code, const char *path, int64_t line,
                           const char *field, const char *fmt, ...) TM_PRINTF(6, 7);

static tm_status line_fail(tm_error *err, tm_status code, const char *path, int64_t line,
                           const char *field, const char *fmt, ...) {
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (field)
        return tm__fail_at(err, code, NULL, NULL, field, "%s:%lld: field '%s' %s", path,
                           (long long)line, field, msg);
    return tm__fail(err, code, "%s:%lld: %s", path, (long long)line, msg);
}

/* An integer-valued JSON number, exactly. */
static int json_int(const tm_json *v, int64_t *out) {
    if (!v || v->type != TM_JSON_NUMBER) return 0;
    double x = v->number;
    if (!(fabs(x) <= MAX_EXACT_INT) || x != floor(x)) return 0;
    *out = (int64_t)x;
    return 1;
}

static void describe_json(const tm_json *v, char *buf, size_t cap) {
    switch (v->type) {
    case TM_JSON_NUMBER: snprintf(buf, cap, "%.17g", v->number); break;
    case TM_JSON_STRING: snprintf(buf, cap, "the string \"%.40s\"", v->string); break;
    case TM_JSON_ARRAY: snprintf(buf, cap, "an array"); break;
    case TM_JSON_OBJECT: snprintf(buf, cap, "an object"); break;
    case TM_JSON_BOOL: snprintf(buf, cap, "%s", v->number ? "true" : "false"); break;
    default: snprintf(buf, cap, "null"); break;
    }
}

/* An array of integers (all >= 0) of `want` elements (any count when want < 0). */
static tm_status int_array(const tm_json *v, const char *path, int64_t line, const char *field,
                           int64_t want, int binary, int64_t **out, int64_t *n, tm_error *err) {
    if (v->type != TM_JSON_ARRAY)
        return line_fail(err, TM_ERR_PARSE, path, line, field, "is not an array of integers");
    if (want >= 0 && v->n != want)
        return line_fail(err, TM_ERR_SHAPE, path, line, field, "has %d elements; input_ids has "
                         "%lld", v->n, (long long)want);
    if (v->n == 0)
        return line_fail(err, TM_ERR_PARSE, path, line, field, "is empty");
    int64_t *a = malloc((size_t)v->n * sizeof *a);
    if (!a) return tm__fail(err, TM_ERR_NO_MEMORY, "%s: out of memory", path);
    for (int i = 0; i < v->n; i++) {
        int64_t x;
        char what[80];
        if (!json_int(&v->items[i], &x)) {
            describe_json(&v->items[i], what, sizeof what);
            free(a);
            return line_fail(err, TM_ERR_PARSE, path, line, field, "element %d is %s, not an "
                             "integer", i, what);
        }
        if (x < 0 || (binary && x > 1)) {
            free(a);
            return line_fail(err, TM_ERR_PARSE, path, line, field, "element %d is %lld; %s", i,
                             (long long)x, binary ? "a mask holds 0 and 1" : "ids are >= 0");
        }
        a[i] = x;
    }
    *out = a;
    *n = v->n;
    return TM_OK;
}

static tm_status parse_line(const char *path, int64_t line, const char *text, size_t len,
                            tm__example *e, tm_error *err) {
    tm_json *v = tm_json_parse(text, len);
    if (!v) return line_fail(err, TM_ERR_PARSE, path, line, NULL, "not valid JSON");
    tm_status st = TM_OK;
    if (v->type != TM_JSON_OBJECT) {
        st = line_fail(err, TM_ERR_PARSE, path, line, NULL, "not a JSON object");
        goto done;
    }
    const tm_json *ids = tm_json_get(v, "input_ids");
    if (!ids) {
        st = line_fail(err, TM_ERR_PARSE, path, line, NULL, "no field 'input_ids'");
        goto done;
    }
    if ((st = int_array(ids, path, line, "input_ids", -1, 0, &e->input_ids, &e->len, err))) goto done;
    int64_t n;
    const tm_json *mask = tm_json_get(v, "attention_mask"), *types = tm_json_get(v, "token_type_ids");
    if (mask && mask->type != TM_JSON_NULL &&
        (st = int_array(mask, path, line, "attention_mask", e->len, 1, &e->attention_mask, &n, err)))
        goto done;
    if (types && types->type != TM_JSON_NULL &&
        (st = int_array(types, path, line, "token_type_ids", e->len, 0, &e->token_type_ids, &n, err)))
        goto done;
    const char *key = "label";
    const tm_json *label = tm_json_get(v, key);
    if (!label) label = tm_json_get(v, key = "labels");
    if (!label) {
        st = line_fail(err, TM_ERR_PARSE, path, line, NULL, "no field 'label'");
        goto done;
    }
    if (!json_int(label, &e->label) || e->label < 0) {
        char what[80];
        describe_json(label, what, sizeof what);
        st = line_fail(err, TM_ERR_PARSE, path, line, key, "is %s, not a class index (an "
                       "integer >= 0)", what);
        goto done;
    }
    e->where = line;
done:
    tm_json_free(v);
    return st;
}

static tm_status read_whole(const char *path, char **text, size_t *size, tm_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f)
        return tm__fail(err, errno == ENOENT ? TM_ERR_NOT_FOUND : TM_ERR_IO,
                        "cannot open dataset '%s': %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *grown = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
        if (!grown) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = grown;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!buf) return tm__fail(err, TM_ERR_NO_MEMORY, "dataset '%s': out of memory", path);
    if (bad) {
        free(buf);
        return tm__fail(err, TM_ERR_IO, "cannot read dataset '%s'", path);
    }
    *text = buf;
    *size = n;
    return TM_OK;
}

static int blank(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != ' ' && p[i] != '\t' && p[i] != '\r') return 0;
    return 1;
}

static void finish(tm__dataset *d) {
    for (int64_t i = 0; i < d->n; i++)
        if (d->examples[i].len > d->max_len) d->max_len = d->examples[i].len;
}

tm_status tm__dataset_load_jsonl(const char *path, tm__dataset **out, tm_error *err) {
    if (!path || !out) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "dataset: path and out must be given");
    char *text = NULL;
    size_t size = 0;
    tm_status st = read_whole(path, &text, &size, err);
    if (st) return st;
    tm__dataset *d = new_dataset(path, 1);
    int64_t cap = 0, line = 0;
    if (!d) st = tm__fail(err, TM_ERR_NO_MEMORY, "dataset '%s': out of memory", path);
    for (size_t at = 0; !st && at < size;) {
        char *nl = memchr(text + at, '\n', size - at);
        size_t len = nl ? (size_t)(nl - (text + at)) : size - at;
        line++;
        if (!blank(text + at, len)) {
            tm__example *e = push_example(d, &cap);
            st = e ? parse_line(path, line, text + at, len, e, err)
                   : tm__fail(err, TM_ERR_NO_MEMORY, "dataset '%s': out of memory", path);
        }
        at += len + 1;
    }
    free(text);
    if (!st && d->n == 0) st = tm__fail(err, TM_ERR_PARSE, "dataset '%s' has no examples", path);
    if (st) {
        tm__dataset_free(d);
        return st;
    }
    finish(d);
    *out = d;
    return TM_OK;
}

/* ---- NPY folder ---------------------------------------------------------------------- */

/* dir/name.npy, or NULL (with *st TM_OK) when it does not exist and is optional. */
static tm_tensor *read_npy(const char *dir, const char *name, int required, tm_status *st,
                           tm_error *err) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s.npy", dir, name);
    *st = TM_OK;
    struct stat sb;
    if (stat(path, &sb) != 0 && !required) return NULL;
    tm_tensor *t = NULL;
    *st = tm_npy_read(path, &t, err);
    if (*st) return NULL;
    if (!tm_dtype_is_signed_int(t->dtype) && !(tm_dtype_is_unsigned_int(t->dtype) && t->dtype != TM_BOOL)) {
        *st = tm__fail_at(err, TM_ERR_DTYPE, NULL, NULL, name, "dataset '%s': %s.npy is %s; "
                          "token ids and labels must be integers", dir, name, tm_dtype_name(t->dtype));
        tm_tensor_free(t);
        return NULL;
    }
    return t;
}

static int64_t at_i64(const tm_tensor *t, int64_t i) { return tm_load_i64(t->data, t->dtype, (size_t)i); }

static tm_status npy_fail(tm_error *err, const char *dir, const char *file, int64_t row,
                          const char *fmt, ...) TM_PRINTF(5, 6);

static tm_status npy_fail(tm_error *err, const char *dir, const char *file, int64_t row,
                          const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return tm__fail_at(err, TM_ERR_PARSE, NULL, NULL, file, "dataset '%s': row %lld of %s.npy %s",
                       dir, (long long)row, file, msg);
}

static tm_status npy_examples(const char *dir, const tm_tensor *ids, const tm_tensor *mask,
                              const tm_tensor *types, const tm_tensor *labels,
                              const char *label_name, tm__dataset *d, tm_error *err) {
    int64_t n = ids->dims[0], t = ids->dims[1], cap = 0;
    for (int64_t r = 0; r < n; r++) {
        int64_t len = t;
        if (mask) {
            len = 0;
            for (int64_t k = 0; k < t; k++) {
                int64_t m = at_i64(mask, r * t + k);
                if (m != 0 && m != 1)
                    return npy_fail(err, dir, "attention_mask", r, "holds %lld at position %lld; a "
                                    "mask holds 0 and 1", (long long)m, (long long)k);
                if (m) len = k + 1;
            }
            if (len == 0) return npy_fail(err, dir, "attention_mask", r, "is all zeros");
        }
        tm__example *e = push_example(d, &cap);
        if (!e) return tm__fail(err, TM_ERR_NO_MEMORY, "dataset '%s': out of memory", dir);
        e->len = len;
        e->where = r;
        e->input_ids = malloc((size_t)len * sizeof(int64_t));
        if (mask) e->attention_mask = malloc((size_t)len * sizeof(int64_t));
        if (types) e->token_type_ids = malloc((size_t)len * sizeof(int64_t));
        if (!e->input_ids || (mask && !e->attention_mask) || (types && !e->token_type_ids))
            return tm__fail(err, TM_ERR_NO_MEMORY, "dataset '%s': out of memory", dir);
        for (int64_t k = 0; k < len; k++) {
            e->input_ids[k] = at_i64(ids, r * t + k);
            if (e->input_ids[k] < 0)
                return npy_fail(err, dir, "input_ids", r, "holds %lld at position %lld; ids "
                                "are >= 0", (long long)e->input_ids[k], (long long)k);
            if (mask) e->attention_mask[k] = at_i64(mask, r * t + k);
            if (types) {
                e->token_type_ids[k] = at_i64(types, r * t + k);
                if (e->token_type_ids[k] < 0)
                    return npy_fail(err, dir, "token_type_ids", r, "holds %lld at position "
                                    "%lld; ids are >= 0", (long long)e->token_type_ids[k], (long long)k);
            }
        }
        e->label = at_i64(labels, r);
        if (e->label < 0 || (labels->dtype == TM_UINT64 && tm_load_u64(labels->data, TM_UINT64, (size_t)r) > INT64_MAX))
            return npy_fail(err, dir, label_name, r, "is %lld, not a class index (>= 0)",
                            (long long)e->label);
    }
    return TM_OK;
}

tm_status tm__dataset_load_npy(const char *dir, tm__dataset **out, tm_error *err) {
    if (!dir || !out) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "dataset: path and out must be given");
    tm_status st;
    tm_tensor *ids = read_npy(dir, "input_ids", 1, &st, err), *mask = NULL, *types = NULL,
              *labels = NULL;
    const char *label_name = "labels";
    if (!st) mask = read_npy(dir, "attention_mask", 0, &st, err);
    if (!st) types = read_npy(dir, "token_type_ids", 0, &st, err);
    if (!st) {
        labels = read_npy(dir, "labels", 0, &st, err);
        if (!st && !labels) labels = read_npy(dir, label_name = "label", 0, &st, err);
        if (!st && !labels)
            st = tm__fail(err, TM_ERR_NOT_FOUND, "dataset '%s' has no labels.npy (or label.npy)", dir);
    }
    tm__dataset *d = NULL;
    if (!st && (ids->rank != 2 || ids->dims[0] == 0 || ids->dims[1] == 0))
        st = tm__fail_at(err, TM_ERR_SHAPE, NULL, NULL, "input_ids", "dataset '%s': input_ids.npy "
                         "must be (examples, length) with both > 0; it has rank %d", dir, ids->rank);
    const tm_tensor *side[2] = {mask, types};
    const char *side_name[2] = {"attention_mask", "token_type_ids"};
    for (int i = 0; i < 2 && !st; i++)
        if (side[i] && !tm_same_shape(side[i], ids))
            st = tm__fail_at(err, TM_ERR_SHAPE, NULL, NULL, side_name[i], "dataset '%s': %s.npy's "
                             "shape differs from input_ids.npy's (%lld, %lld)", dir, side_name[i],
                             (long long)ids->dims[0], (long long)ids->dims[1]);
    if (!st && (labels->rank != 1 || labels->dims[0] != ids->dims[0]))
        st = tm__fail_at(err, TM_ERR_SHAPE, NULL, NULL, label_name, "dataset '%s': %s.npy must "
                         "hold one label per example (%lld), as a vector", dir, label_name,
                         (long long)ids->dims[0]);
    if (!st && !(d = new_dataset(dir, 0)))
        st = tm__fail(err, TM_ERR_NO_MEMORY, "dataset '%s': out of memory", dir);
    if (!st) st = npy_examples(dir, ids, mask, types, labels, label_name, d, err);
    tm_tensor_free(ids);
    tm_tensor_free(mask);
    tm_tensor_free(types);
    tm_tensor_free(labels);
    if (st) {
        tm__dataset_free(d);
        return st;
    }
    finish(d);
    *out = d;
    return TM_OK;
}

tm_status tm__dataset_load(const char *path, tm__dataset **out, tm_error *err) {
    struct stat sb;
    if (!path || stat(path, &sb) != 0)
        return tm__fail(err, TM_ERR_NOT_FOUND, "no dataset at '%s'", path ? path : "(null)");
    return S_ISDIR(sb.st_mode) ? tm__dataset_load_npy(path, out, err)
                               : tm__dataset_load_jsonl(path, out, err);
}

/* ---- Shuffling ----------------------------------------------------------------------- */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void tm__rng_seed(tm__rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t tm__rng_next(tm__rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

/* ---- Batching ------------------------------------------------------------------------ */

struct tm__batcher {
    const tm__dataset *d;
    tm__batch_options o;
    tm__rng rng;
    int64_t *order;              /* this epoch's permutation */
    int64_t pos;                 /* next index into order */
    int64_t epoch, step;
    int64_t last_first, last_n;  /* the batch last returned, as a span of order */
};

void tm__batch_options_default(tm__batch_options *o) {
    memset(o, 0, sizeof *o);
    o->batch_size = 8;
    o->id_dtype = TM_INT64;
}

void tm__batch_clear(tm__batch *b) {
    if (!b) return;
    tm_tensor_free(b->input_ids);
    tm_tensor_free(b->attention_mask);
    tm_tensor_free(b->token_type_ids);
    tm_tensor_free(b->labels);
    memset(b, 0, sizeof *b);
}

void tm__batcher_free(tm__batcher *b) {
    if (!b) return;
    free(b->order);
    free(b);
}

static tm_status example_fail(const tm__dataset *d, const tm__example *e, const char *field,
                              tm_error *err, const char *fmt, ...) TM_PRINTF(5, 6);

static tm_status example_fail(const tm__dataset *d, const tm__example *e, const char *field,
                              tm_error *err, const char *fmt, ...) {
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (d->is_jsonl)
        return tm__fail_at(err, TM_ERR_INVALID_ARGUMENT, NULL, NULL, field, "%s:%lld: field '%s' %s",
                           d->source, (long long)e->where, field, msg);
    return tm__fail_at(err, TM_ERR_INVALID_ARGUMENT, NULL, NULL, field, "dataset '%s': row %lld "
                       "of %s %s", d->source, (long long)e->where, field, msg);
}

static tm_status check_example(const tm__dataset *d, const tm__example *e,
                               const tm__batch_options *o, tm_error *err) {
    if (o->max_length > 0 && e->len > o->max_length)
        return example_fail(d, e, "input_ids", err, "has %lld tokens, more than max_length %lld",
                            (long long)e->len, (long long)o->max_length);
    for (int64_t k = 0; k < e->len; k++) {
        if (o->vocab_size > 0 && e->input_ids[k] >= o->vocab_size)
            return example_fail(d, e, "input_ids", err, "holds %lld at position %lld; the "
                                "vocabulary has %lld ids", (long long)e->input_ids[k],
                                (long long)k, (long long)o->vocab_size);
        if (o->type_vocab_size > 0 && e->token_type_ids && e->token_type_ids[k] >= o->type_vocab_size)
            return example_fail(d, e, "token_type_ids", err, "holds %lld at position %lld; "
                                "there are %lld token types", (long long)e->token_type_ids[k],
                                (long long)k, (long long)o->type_vocab_size);
        if (o->id_dtype == TM_INT32 && e->input_ids[k] > INT32_MAX)
            return example_fail(d, e, "input_ids", err, "holds %lld, beyond int32",
                                (long long)e->input_ids[k]);
    }
    if (o->num_labels > 0 && e->label >= o->num_labels)
        return example_fail(d, e, "label", err, "is %lld; the model has %lld labels",
                            (long long)e->label, (long long)o->num_labels);
    return TM_OK;
}

static void new_epoch(tm__batcher *b) {
    int64_t n = b->d->n;
    for (int64_t i = 0; i < n; i++) b->order[i] = i;
    if (b->o.shuffle)
        for (int64_t i = n - 1; i > 0; i--) {
            int64_t j = (int64_t)(tm__rng_next(&b->rng) % (uint64_t)(i + 1));
            int64_t t = b->order[i];
            b->order[i] = b->order[j];
            b->order[j] = t;
        }
    b->pos = 0;
}

tm_status tm__batcher_create(const tm__dataset *d, const tm__batch_options *opts,
                             tm__batcher **out, tm_error *err) {
    if (!d || !opts || !out || d->n <= 0)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "batcher: a non-empty dataset, options "
                        "and out must be given");
    if (opts->batch_size <= 0)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "batcher: batch_size must be > 0, not %lld",
                        (long long)opts->batch_size);
    if (opts->pad_multiple < 0 || (opts->pad_multiple > 0 && opts->max_length > 0))
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "batcher: pad_multiple %lld must be > 0 "
                        "and without a fixed max_length", (long long)opts->pad_multiple);
    if (opts->id_dtype != TM_INT64 && opts->id_dtype != TM_INT32)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "batcher: ids are int64 or int32, not %s",
                        tm_dtype_name(opts->id_dtype));
    if (opts->drop_last && d->n < opts->batch_size)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "batcher: dataset '%s' has %lld examples, "
                        "fewer than one batch of %lld (drop_last)", d->source, (long long)d->n,
                        (long long)opts->batch_size);
    if (opts->pad_id < 0 || (opts->vocab_size > 0 && opts->pad_id >= opts->vocab_size))
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "batcher: pad_id %lld is not a token id",
                        (long long)opts->pad_id);
    for (int64_t i = 0; i < d->n; i++) {
        tm_status st = check_example(d, &d->examples[i], opts, err);
        if (st) return st;
    }
    tm__batcher *b = calloc(1, sizeof *b);
    if (b) b->order = malloc((size_t)d->n * sizeof *b->order);
    if (!b || !b->order) {
        tm__batcher_free(b);
        return tm__fail(err, TM_ERR_NO_MEMORY, "batcher: out of memory");
    }
    b->d = d;
    b->o = *opts;
    tm__rng_seed(&b->rng, opts->seed);
    new_epoch(b);
    *out = b;
    return TM_OK;
}

static void put_id(tm_tensor *t, int64_t i, int64_t v) {
    if (t->dtype == TM_INT32) ((int32_t *)t->data)[i] = (int32_t)v;
    else ((int64_t *)t->data)[i] = v;
}

tm_status tm__batcher_next(tm__batcher *b, tm__batch *out, tm_error *err) {
    if (!b || !out) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "batcher: NULL argument");
    tm__batch_clear(out);
    int64_t n = b->d->n, bs = b->o.batch_size;
    if (b->pos >= n || (b->o.drop_last && n - b->pos < bs)) {
        new_epoch(b);
        b->epoch++;
    }
    int64_t count = n - b->pos < bs ? n - b->pos : bs, len = b->o.max_length;
    if (len <= 0)
        for (int64_t i = 0; i < count; i++) {
            const tm__example *e = &b->d->examples[b->order[b->pos + i]];
            if (e->len > len) len = e->len;
        }
    if (b->o.max_length <= 0 && b->o.pad_multiple > 1)
        len = (len + b->o.pad_multiple - 1) / b->o.pad_multiple * b->o.pad_multiple;
    int64_t dims[2] = {count, len};
    out->input_ids = tm_tensor_alloc(b->o.id_dtype, 2, dims, NULL);
    out->attention_mask = tm_tensor_alloc(b->o.id_dtype, 2, dims, NULL);
    out->token_type_ids = tm_tensor_alloc(b->o.id_dtype, 2, dims, NULL);
    out->labels = tm_tensor_alloc(TM_INT64, 1, dims, NULL);
    if (!out->input_ids || !out->attention_mask || !out->token_type_ids || !out->labels) {
        tm__batch_clear(out);
        return tm__fail(err, TM_ERR_NO_MEMORY, "batcher: out of memory");
    }
    for (int64_t i = 0; i < count; i++) {
        const tm__example *e = &b->d->examples[b->order[b->pos + i]];
        for (int64_t k = 0; k < len; k++) {
            int real = k < e->len;
            put_id(out->input_ids, i * len + k, real ? e->input_ids[k] : b->o.pad_id);
            put_id(out->attention_mask, i * len + k,
                   real ? (e->attention_mask ? e->attention_mask[k] : 1) : 0);
            put_id(out->token_type_ids, i * len + k,
                   real && e->token_type_ids ? e->token_type_ids[k] : 0);
        }
        ((int64_t *)out->labels->data)[i] = e->label;
    }
    out->epoch = b->epoch;
    out->step = b->step++;
    b->last_first = b->pos;
    b->last_n = count;
    b->pos += count;
    return TM_OK;
}

const int64_t *tm__batcher_indices(const tm__batcher *b, int64_t *n) {
    if (n) *n = b ? b->last_n : 0;
    return b ? b->order + b->last_first : NULL;
}
