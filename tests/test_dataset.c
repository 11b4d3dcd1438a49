/* Tests of the fine-tuning datasets (src/train/dataset.c): the synthetic batch of
 * bench/finetune/data read as JSONL and as an NPY folder gives the same examples and
 * batches; padding, batch order, epochs, drop_last, max_length and int32 ids; the seeded
 * shuffle against the order bench/finetune/torch_ref.py computes; every malformed line,
 * field and file is an error that names it. Not the training loop. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../src/core/tensor.h"
#include "../src/io/npy.h"
#include "../src/train/dataset.h"
#include "check.h"

#define FT "bench/finetune/data"

static char temp_dir[256];
static int temp_n;

static const char *write_text(const char *text) {
    static char path[512];
    snprintf(path, sizeof path, "%s/d%d.jsonl", temp_dir, temp_n++);
    FILE *f = fopen(path, "wb");
    fputs(text, f);
    fclose(f);
    return path;
}

static tm__dataset *load_ok(const char *path) {
    tm__dataset *d = NULL;
    tm_error err;
    if (tm__dataset_load(path, &d, &err) != TM_OK) {
        check(0, "loading %s: %s", path, err.message);
        return NULL;
    }
    return d;
}

static int64_t id_at(const tm_tensor *t, int64_t i) {
    return t->dtype == TM_INT32 ? ((const int32_t *)t->data)[i] : ((const int64_t *)t->data)[i];
}

static int same_examples(const tm__dataset *a, const tm__dataset *b) {
    if (a->n != b->n || a->max_len != b->max_len) return 0;
    for (int64_t i = 0; i < a->n; i++) {
        const tm__example *x = &a->examples[i], *y = &b->examples[i];
        if (x->len != y->len || x->label != y->label) return 0;
        for (int64_t k = 0; k < x->len; k++) {
            int64_t mx = x->attention_mask ? x->attention_mask[k] : 1;
            int64_t my = y->attention_mask ? y->attention_mask[k] : 1;
            int64_t tx = x->token_type_ids ? x->token_type_ids[k] : 0;
            int64_t ty = y->token_type_ids ? y->token_type_ids[k] : 0;
            if (x->input_ids[k] != y->input_ids[k] || mx != my || tx != ty) return 0;
        }
    }
    return 1;
}

static int same_batch(const tm__batch *a, const tm__batch *b) {
    const tm_tensor *x[4] = {a->input_ids, a->attention_mask, a->token_type_ids, a->labels};
    const tm_tensor *y[4] = {b->input_ids, b->attention_mask, b->token_type_ids, b->labels};
    for (int i = 0; i < 4; i++)
        if (!tm_same_shape(x[i], y[i]) || x[i]->dtype != y[i]->dtype ||
            memcmp(x[i]->data, y[i]->data, x[i]->nbytes))
            return 0;
    return 1;
}

/* The batch against the dataset's examples, padded as documented. */
static int batch_matches(const tm__dataset *d, const tm__batch *b, const int64_t *idx,
                         int64_t n, int64_t len, int64_t pad) {
    if (b->input_ids->dims[0] != n || b->input_ids->dims[1] != len || b->labels->dims[0] != n)
        return 0;
    for (int64_t i = 0; i < n; i++) {
        const tm__example *e = &d->examples[idx[i]];
        if (((const int64_t *)b->labels->data)[i] != e->label) return 0;
        for (int64_t k = 0; k < len; k++) {
            int real = k < e->len;
            if (id_at(b->input_ids, i * len + k) != (real ? e->input_ids[k] : pad)) return 0;
            if (id_at(b->attention_mask, i * len + k) != (real ? 1 : 0)) return 0;
            if (id_at(b->token_type_ids, i * len + k) != (real ? e->token_type_ids[k] : 0)) return 0;
        }
    }
    return 1;
}

static tm__batcher *batcher(const tm__dataset *d, const tm__batch_options *o) {
    tm__batcher *b = NULL;
    tm_error err;
    if (tm__batcher_create(d, o, &b, &err) != TM_OK) check(0, "batcher: %s", err.message);
    return b;
}

static void test_synthetic_batch(void) {
    tm__dataset *j = load_ok(FT "/batch.jsonl"), *n = load_ok(FT "/batch_npy");
    if (!j || !n) {
        tm__dataset_free(j);
        tm__dataset_free(n);
        return;
    }
    CHECK(j->n == 4 && j->max_len == 7 && j->is_jsonl && !n->is_jsonl, "synthetic batch: %lld "
          "examples, longest %lld", (long long)j->n, (long long)j->max_len);
    const int64_t lens[4] = {7, 5, 6, 4}, labels[4] = {2, 0, 1, 2};
    for (int i = 0; i < 4; i++)
        CHECK(j->examples[i].len == lens[i] && j->examples[i].label == labels[i] &&
              j->examples[i].where == i + 1 && n->examples[i].where == i,
              "example %d: len %lld label %lld", i, (long long)j->examples[i].len,
              (long long)j->examples[i].label);
    CHECK(j->examples[0].input_ids[0] == 162 && j->examples[3].input_ids[3] == 340 &&
          j->examples[1].token_type_ids[3] == 1, "token values of the synthetic batch");
    CHECK(same_examples(j, n), "the JSONL and NPY forms of the synthetic batch differ");

    /* batch 4: the whole batch each step, identical from both files */
    tm__batch_options o;
    tm__batch_options_default(&o);
    o.batch_size = 4;
    tm__batcher *bj = batcher(j, &o), *bn = batcher(n, &o);
    tm__batch x = {0}, y = {0};
    const int64_t all[4] = {0, 1, 2, 3};
    for (int step = 0; bj && bn && step < 3; step++) {
        tm_error err;
        CHECK(tm__batcher_next(bj, &x, &err) == TM_OK && tm__batcher_next(bn, &y, &err) == TM_OK,
              "next: %s", err.message);
        CHECK(same_batch(&x, &y), "step %d: JSONL and NPY batches differ", step);
        CHECK(batch_matches(j, &x, all, 4, 7, 0) && x.epoch == step && x.step == step,
              "step %d: batch contents, epoch %lld", step, (long long)x.epoch);
    }
    tm__batch_clear(&x);
    tm__batch_clear(&y);
    tm__batcher_free(bj);
    tm__batcher_free(bn);

    /* batch 3: [0,1,2] then the partial [3] (4 long), then a new epoch */
    o.batch_size = 3;
    o.pad_id = 7;
    tm__batcher *b = batcher(j, &o);
    const int64_t first[3] = {0, 1, 2}, last[1] = {3};
    tm_error err;
    int64_t count = 0;
    CHECK(b && tm__batcher_next(b, &x, &err) == TM_OK && batch_matches(j, &x, first, 3, 7, 7),
          "batch of 3, padded with 7");
    CHECK(b && tm__batcher_next(b, &x, &err) == TM_OK && batch_matches(j, &x, last, 1, 4, 7) &&
          x.epoch == 0, "the partial last batch");
    const int64_t *idx = tm__batcher_indices(b, &count);
    CHECK(count == 1 && idx[0] == 3, "indices of the last batch");
    CHECK(b && tm__batcher_next(b, &x, &err) == TM_OK && batch_matches(j, &x, first, 3, 7, 7) &&
          x.epoch == 1, "the next epoch");
    tm__batcher_free(b);
    o.drop_last = 1;
    o.max_length = 9;
    o.id_dtype = TM_INT32;
    o.pad_id = 0;
    b = batcher(j, &o);
    for (int step = 0; b && step < 3; step++)
        CHECK(tm__batcher_next(b, &x, &err) == TM_OK && batch_matches(j, &x, first, 3, 9, 0) &&
              x.epoch == step && x.input_ids->dtype == TM_INT32, "drop_last, max_length 9, "
              "int32: step %d", step);
    tm__batch_clear(&x);
    tm__batcher_free(b);
    tm__dataset_free(j);
    tm__dataset_free(n);
}

/* A dataset of n one-token examples (id = index + 1, label = index % 3). */
static tm__dataset *counting_dataset(int n) {
    char *text = malloc((size_t)n * 64 + 1), *p = text;
    for (int i = 0; i < n; i++)
        p += sprintf(p, "{\"input_ids\": [%d], \"label\": %d}\n", i + 1, i % 3);
    tm__dataset *d = load_ok(write_text(text));
    free(text);
    return d;
}

static void test_shuffle(void) {
    /* splitmix64's published first output for seed 0 */
    tm__rng r;
    tm__rng_seed(&r, 0);
    CHECK(r.s[0] == 0xe220a8397b1dcdafull, "splitmix64(0) = %016llx", (unsigned long long)r.s[0]);
    tm__dataset *d = counting_dataset(10);
    if (!d) return;
    tm__batch_options o;
    tm__batch_options_default(&o);
    o.batch_size = 5;
    o.shuffle = 1;
    o.seed = 42;
    /* the two epochs bench/finetune/torch_ref.py's Rng(42) gives */
    const int64_t want[20] = {7, 3, 8, 9, 5, 6, 4, 1, 0, 2, 8, 7, 0, 6, 3, 4, 2, 9, 1, 5};
    tm__batcher *b = batcher(d, &o);
    tm__batch x = {0};
    tm_error err;
    int same = 1;
    for (int step = 0; b && step < 4; step++) {
        CHECK(tm__batcher_next(b, &x, &err) == TM_OK, "%s", err.message);
        int64_t n = 0;
        const int64_t *idx = tm__batcher_indices(b, &n);
        for (int i = 0; i < 5; i++) {
            same &= n == 5 && idx[i] == want[step * 5 + i];
            same &= id_at(x.input_ids, i) == want[step * 5 + i] + 1;
        }
    }
    CHECK(same, "the shuffled order differs from torch_ref.py's");
    tm__batcher_free(b);
    o.seed = 43;
    b = batcher(d, &o);
    CHECK(b && tm__batcher_next(b, &x, &err) == TM_OK, "seed 43");
    int64_t n = 0;
    const int64_t *idx = tm__batcher_indices(b, &n);
    int differs = 0;
    for (int i = 0; i < 5; i++) differs |= idx[i] != want[i];
    CHECK(differs, "another seed gives the same order");
    tm__batch_clear(&x);
    tm__batcher_free(b);
    tm__dataset_free(d);
}

static void expect_jsonl_fails(const char *text, tm_status want, const char *needle,
                               const char *what) {
    const char *path = write_text(text);
    tm__dataset *d = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status st = tm__dataset_load_jsonl(path, &d, &err);
    CHECK(st == want && d == NULL && strstr(err.message, needle) && strstr(err.message, path),
          "%s: status %d '%s' (expected %d with '%s')", what, st, err.message, want, needle);
    tm__dataset_free(d);
}

static void test_jsonl(void) {
    const char *ok = "\n{\"input_ids\": [5, 6], \"labels\": 1, \"text\": \"ignored\"}\r\n"
                     "   \n{\"input_ids\": [7], \"attention_mask\": null, \"label\": 0.0}";
    tm__dataset *d = load_ok(write_text(ok));
    CHECK(d && d->n == 2 && d->examples[0].where == 2 && d->examples[1].where == 4 &&
          d->examples[0].label == 1 && d->examples[1].len == 1 && !d->examples[1].attention_mask,
          "blank lines, CRLF, 'labels', null mask and no final newline");
    tm__dataset_free(d);
    const char *l1 = "{\"input_ids\": [1, 2], \"label\": 0}\n";
    char buf[512];
#define BAD(line, st, needle, what)                                             \
    do {                                                                        \
        snprintf(buf, sizeof buf, "%s%s\n", l1, line);                          \
        expect_jsonl_fails(buf, st, needle, what);                             \
    } while (0)
    BAD("{\"input_ids\": [1, 2], \"label\": 0", TM_ERR_PARSE, ":2: not valid JSON", "broken JSON");
    BAD("[1, 2]", TM_ERR_PARSE, ":2: not a JSON object", "array line");
    BAD("{\"label\": 0}", TM_ERR_PARSE, ":2: no field 'input_ids'", "no ids");
    BAD("{\"input_ids\": [], \"label\": 0}", TM_ERR_PARSE, "'input_ids' is empty", "empty ids");
    BAD("{\"input_ids\": 5, \"label\": 0}", TM_ERR_PARSE, "'input_ids' is not an array", "scalar ids");
    BAD("{\"input_ids\": [1, 2.5], \"label\": 0}", TM_ERR_PARSE,
        ":2: field 'input_ids' element 1 is 2.5, not an integer", "fractional id");
    BAD("{\"input_ids\": [1, \"a\"], \"label\": 0}", TM_ERR_PARSE, "element 1 is the string", "string id");
    BAD("{\"input_ids\": [1, -4], \"label\": 0}", TM_ERR_PARSE, "element 1 is -4", "negative id");
    BAD("{\"input_ids\": [1e300], \"label\": 0}", TM_ERR_PARSE, "not an integer", "huge id");
    BAD("{\"input_ids\": [1, 2], \"attention_mask\": [1], \"label\": 0}", TM_ERR_SHAPE,
        "'attention_mask' has 1 elements; input_ids has 2", "mask length");
    BAD("{\"input_ids\": [1, 2], \"attention_mask\": [1, 2], \"label\": 0}", TM_ERR_PARSE,
        "a mask holds 0 and 1", "mask value");
    BAD("{\"input_ids\": [1, 2], \"token_type_ids\": [0, 1, 1], \"label\": 0}", TM_ERR_SHAPE,
        "'token_type_ids' has 3 elements", "types length");
    BAD("{\"input_ids\": [1, 2]}", TM_ERR_PARSE, ":2: no field 'label'", "no label");
    BAD("{\"input_ids\": [1, 2], \"label\": -1}", TM_ERR_PARSE, "'label' is -1, not a class index", "negative label");
    BAD("{\"input_ids\": [1, 2], \"label\": 1.5}", TM_ERR_PARSE, "'label' is 1.5", "fractional label");
    BAD("{\"input_ids\": [1, 2], \"labels\": \"pos\"}", TM_ERR_PARSE, "'labels' is the string", "string label");
#undef BAD
    expect_jsonl_fails("\n  \n", TM_ERR_PARSE, "has no examples", "empty file");
    tm__dataset *none = NULL;
    tm_error err;
    CHECK(tm__dataset_load(FT "/no-such-file.jsonl", &none, &err) == TM_ERR_NOT_FOUND && !none,
          "missing dataset: %s", err.message);
}

static void test_batch_checks(void) {
    tm__dataset *d = load_ok(FT "/batch.jsonl");
    if (!d) return;
    struct {
        const char *what, *needle;
    } cases[] = {
        {"vocab", ":1: field 'input_ids' holds 792 at position 1; the vocabulary has 500"},
        {"labels", ":1: field 'label' is 2; the model has 2 labels"},
        {"types", ":1: field 'token_type_ids' holds 1 at position 6; there are 1"},
        {"max_length", ":1: field 'input_ids' has 7 tokens, more than max_length 6"},
    };
    for (int i = 0; i < 4; i++) {
        tm__batch_options o;
        tm__batch_options_default(&o);
        if (i == 0) o.vocab_size = 500;
        if (i == 1) o.num_labels = 2;
        if (i == 2) o.type_vocab_size = 1;
        if (i == 3) o.max_length = 6;
        tm__batcher *b = NULL;
        tm_error err;
        tm_status st = tm__batcher_create(d, &o, &b, &err);
        CHECK(st == TM_ERR_INVALID_ARGUMENT && !b && strstr(err.message, cases[i].needle),
              "%s: '%s'", cases[i].what, err.message);
    }
    tm__batch_options o;
    tm__batch_options_default(&o);
    o.batch_size = 0;
    tm__batcher *b = NULL;
    tm_error err;
    CHECK(tm__batcher_create(d, &o, &b, &err) == TM_ERR_INVALID_ARGUMENT, "batch_size 0");
    o.batch_size = 5;
    o.drop_last = 1;
    CHECK(tm__batcher_create(d, &o, &b, &err) == TM_ERR_INVALID_ARGUMENT &&
          strstr(err.message, "fewer than one batch"), "drop_last with too few: %s", err.message);
    tm__dataset_free(d);
}

static void save_npy(const char *dir, const char *name, tm_dtype dt, int rank,
                     const int64_t *dims, const double *v) {
    char path[600];
    snprintf(path, sizeof path, "%s/%s.npy", dir, name);
    tm_tensor *t = tensor_of(dt, rank, dims, v);
    tm_error err;
    if (tm_npy_write(path, t, &err)) check(0, "writing %s: %s", path, err.message);
    tm_tensor_free(t);
}

static void test_npy(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/npy", temp_dir);
    mkdir(dir, 0700);
    const int64_t d23[] = {2, 3}, d2[] = {2}, d3[] = {3}, d32[] = {3, 2};
    const double ids[] = {5, 6, 7, 8, 9, 0}, mask[] = {1, 1, 1, 1, 1, 0}, labels[] = {1, 0};
    save_npy(dir, "input_ids", TM_INT32, 2, d23, ids);
    save_npy(dir, "attention_mask", TM_INT8, 2, d23, mask);
    save_npy(dir, "label", TM_UINT8, 1, d2, labels);
    tm__dataset *d = load_ok(dir);
    CHECK(d && d->n == 2 && d->examples[0].len == 3 && d->examples[1].len == 2 &&
          !d->examples[0].token_type_ids && d->examples[1].label == 0 && d->examples[1].input_ids[1] == 9,
          "NPY folder with int32 ids, int8 mask, label.npy, lengths from the mask");
    tm__dataset_free(d);

    tm_error err;
    struct {
        const char *file;
        tm_dtype dt;
        int rank;
        const int64_t *dims;
        const double *v;
        tm_status want;
        const char *needle;
    } bad[] = {
        {"attention_mask", TM_INT64, 2, d23, (const double[]){1, 2, 1, 1, 0, 0}, TM_ERR_PARSE,
         "row 0 of attention_mask.npy holds 2 at position 1"},
        {"attention_mask", TM_INT64, 2, d23, (const double[]){1, 1, 1, 0, 0, 0}, TM_ERR_PARSE,
         "row 1 of attention_mask.npy is all zeros"},
        {"attention_mask", TM_INT64, 2, d32, mask, TM_ERR_SHAPE, "attention_mask.npy's shape differs"},
        {"input_ids", TM_FLOAT, 2, d23, ids, TM_ERR_DTYPE, "input_ids.npy is float32"},
        {"input_ids", TM_INT64, 2, d23, (const double[]){5, -6, 7, 8, 9, 0}, TM_ERR_PARSE,
         "row 0 of input_ids.npy holds -6 at position 1"},
        {"token_type_ids", TM_INT64, 2, d32, ids, TM_ERR_SHAPE, "token_type_ids.npy's shape"},
        {"label", TM_INT64, 1, d3, (const double[]){1, 0, 1}, TM_ERR_SHAPE, "one label per example"},
        {"label", TM_INT64, 1, d2, (const double[]){1, -2}, TM_ERR_PARSE, "row 1 of label.npy is -2"},
        {"input_ids", TM_INT64, 1, d3, ids, TM_ERR_SHAPE, "(examples, length)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        /* start from the good folder each time */
        save_npy(dir, "input_ids", TM_INT32, 2, d23, ids);
        save_npy(dir, "attention_mask", TM_INT8, 2, d23, mask);
        save_npy(dir, "label", TM_UINT8, 1, d2, labels);
        char p[600];
        snprintf(p, sizeof p, "%s/token_type_ids.npy", dir);
        unlink(p);
        save_npy(dir, bad[i].file, bad[i].dt, bad[i].rank, bad[i].dims, bad[i].v);
        d = NULL;
        tm_status st = tm__dataset_load(dir, &d, &err);
        CHECK(st == bad[i].want && !d && strstr(err.message, bad[i].needle),
              "NPY case %zu: status %d '%s' (expected %d with '%s')", i, st, err.message,
              bad[i].want, bad[i].needle);
        tm__dataset_free(d);
    }
    char p[600];
    snprintf(p, sizeof p, "%s/label.npy", dir);
    unlink(p);
    save_npy(dir, "input_ids", TM_INT32, 2, d23, ids);
    CHECK(tm__dataset_load(dir, &d, &err) == TM_ERR_NOT_FOUND && strstr(err.message, "labels.npy"),
          "no labels: %s", err.message);
    snprintf(p, sizeof p, "%s/input_ids.npy", dir);
    unlink(p);
    CHECK(tm__dataset_load(dir, &d, &err) == TM_ERR_NOT_FOUND && strstr(err.message, "input_ids.npy"),
          "no input_ids: %s", err.message);
}

static void remove_tree(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) printf("could not remove %s\n", dir);
}

int main(void) {
    snprintf(temp_dir, sizeof temp_dir, "%s/tm_dataset_%d", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             (int)getpid());
    if (mkdir(temp_dir, 0700) != 0) {
        printf("cannot create %s\n", temp_dir);
        return 1;
    }
    test_synthetic_batch();
    test_shuffle();
    test_jsonl();
    test_batch_checks();
    test_npy();
    remove_tree(temp_dir);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
