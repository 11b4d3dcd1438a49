/* Datasets for sequence-classification fine-tuning (`transmuter finetune`, tools/finetune.c):
 * token ids with labels read from a JSONL file or a folder of .npy files, and a batcher
 * that pads them into (batch, length) tensors in a fixed or seeded-shuffled order.
 * Internal API (tm__): not tokenisation, not the training loop.
 *
 * JSONL: one JSON object per line (blank lines are skipped), e.g.
 *   {"input_ids": [101, 7592, 102], "attention_mask": [1, 1, 1], "token_type_ids": [0, 0, 0], "label": 1}
 * "input_ids" (non-empty) and "label" (or "labels") are required; "attention_mask" (0/1)
 * and "token_type_ids" are optional, of input_ids' length. Other keys are ignored.
 * NPY folder: input_ids.npy (N, T), optional attention_mask.npy and token_type_ids.npy
 * (N, T), labels.npy or label.npy (N,), all of integer dtypes. An example's length is
 * one past its last non-zero mask entry (T without a mask): the padding is dropped and
 * made again per batch. Every error names the file and the line (or row) and field. */
#ifndef TM_TRAIN_DATASET_H
#define TM_TRAIN_DATASET_H

#include "../core/tensor.h"

typedef struct tm__example {
    int64_t *input_ids;          /* (len) */
    int64_t *attention_mask;     /* (len), or NULL: all ones */
    int64_t *token_type_ids;     /* (len), or NULL: all zeros */
    int64_t len;
    int64_t label;
    int64_t where;               /* the line (JSONL, from 1) or row (NPY, from 0) it came from */
} tm__example;

typedef struct tm__dataset {
    char *source;                /* the path it was read from */
    int is_jsonl;
    tm__example *examples;
    int64_t n;
    int64_t max_len;             /* the longest example */
} tm__dataset;

/* A JSONL file, or a folder of .npy files (told apart by what path is). */
tm_status tm__dataset_load(const char *path, tm__dataset **out, tm_error *err);
tm_status tm__dataset_load_jsonl(const char *path, tm__dataset **out, tm_error *err);
tm_status tm__dataset_load_npy(const char *dir, tm__dataset **out, tm_error *err);
void tm__dataset_free(tm__dataset *d);

typedef struct tm__batch_options {
    int64_t batch_size;          /* > 0 */
    /* 0: each batch is as long as its longest example; > 0: every batch has this length,
     * and a longer example is an error (truncating would drop the [SEP] token). */
    int64_t max_length;
    int64_t pad_id;              /* input_ids of padding positions (default 0) */
    int shuffle;                 /* a new permutation each epoch, from `seed` */
    uint64_t seed;
    int drop_last;               /* skip an epoch's last partial batch */
    int64_t vocab_size;          /* > 0: input_ids must be below it */
    int64_t type_vocab_size;     /* > 0: token_type_ids must be below it */
    int64_t num_labels;          /* > 0: labels must be in [0, num_labels) */
    tm_dtype id_dtype;           /* TM_INT64 (default) or TM_INT32: the dtype of the id tensors */
    /* > 0 (with max_length 0): a batch's length is its longest example rounded up to a
     * multiple of this, so that fewer distinct shapes (compiled plans) occur. */
    int64_t pad_multiple;
} tm__batch_options;

void tm__batch_options_default(tm__batch_options *o);

/* One batch; the tensors belong to the batch (tm__batch_clear frees them). */
typedef struct tm__batch {
    tm_tensor *input_ids;        /* (B, T) id_dtype */
    tm_tensor *attention_mask;   /* (B, T) id_dtype: 1 for tokens, 0 for padding */
    tm_tensor *token_type_ids;   /* (B, T) id_dtype */
    tm_tensor *labels;           /* (B,) int64 */
    int64_t epoch;               /* from 0 */
    int64_t step;                /* batches returned before this one */
} tm__batch;

void tm__batch_clear(tm__batch *b);

typedef struct tm__batcher tm__batcher;

/* Checks every example against the options (lengths, id ranges, labels) first, so that
 * a bad example is reported before training starts. The dataset must outlive it. */
tm_status tm__batcher_create(const tm__dataset *d, const tm__batch_options *o,
                             tm__batcher **out, tm_error *err);
void tm__batcher_free(tm__batcher *b);
/* The next batch, in order (or the epoch's permutation); after the last batch of an epoch
 * the next epoch starts. *out is cleared first. */
tm_status tm__batcher_next(tm__batcher *b, tm__batch *out, tm_error *err);
/* The dataset indices of the batch last returned, and how many. */
const int64_t *tm__batcher_indices(const tm__batcher *b, int64_t *n);

/* The shuffle's generator, exposed so that other implementations (bench/finetune) can
 * reproduce the order: xoshiro256** seeded through splitmix64; an epoch's permutation is
 * Fisher-Yates from the last index down, j = next() % (i + 1). */
typedef struct tm__rng {
    uint64_t s[4];
} tm__rng;
void tm__rng_seed(tm__rng *r, uint64_t seed);
uint64_t tm__rng_next(tm__rng *r);

#endif
