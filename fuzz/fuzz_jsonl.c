/* libFuzzer target: the fine-tuning dataset reader for JSONL (tm__dataset_load_jsonl) on
 * arbitrary bytes, through a memfd (the reader takes a path), then the batcher over what
 * it read: every batch of one epoch, fixed order and shuffled. Asserts: an error carries a
 * message and returns no dataset; a dataset's examples hold what they claim (every id is
 * read, so ASan sees a short array); batches have the shapes their options promise. Not the
 * NPY folder reader (its .npy files go through fuzz_npy's reader). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "core/tensor.h"
#include "train/dataset.h"

static void batches(const tm__dataset *d, int shuffle) {
    tm__batch_options o;
    tm__batch_options_default(&o);
    o.batch_size = 3;
    o.shuffle = shuffle;
    o.seed = 5;
    o.vocab_size = 1000;
    o.num_labels = 4;
    tm__batcher *b = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    if (tm__batcher_create(d, &o, &b, &err) != TM_OK) {
        if (b || !err.message[0]) abort();
        return;
    }
    int64_t n = (d->n + 2) / 3;
    for (int64_t i = 0; i < n; i++) {
        tm__batch batch;
        memset(&batch, 0, sizeof batch);
        if (tm__batcher_next(b, &batch, &err) != TM_OK) abort();   /* checked up front */
        const tm_tensor *ids = batch.input_ids;
        if (!ids || ids->rank != 2 || ids->dims[0] > 3 || ids->dims[1] > d->max_len ||
            !batch.labels || batch.labels->dims[0] != ids->dims[0])
            abort();
        tm__batch_clear(&batch);
    }
    tm__batcher_free(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fd = memfd_create("dataset", 0);
    if (fd < 0) abort();
    if (size && write(fd, data, size) != (ssize_t)size) abort();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    tm__dataset *d = NULL;
    tm_error err;
    memset(&err, 0, sizeof err);
    tm_status st = tm__dataset_load_jsonl(path, &d, &err);
    close(fd);
    if (st != TM_OK) {
        if (d || !err.message[0]) abort();
        return 0;
    }
    if (!d) abort();
    volatile int64_t sink = 0;
    for (int64_t i = 0; i < d->n; i++) {
        const tm__example *e = &d->examples[i];
        if (e->len < 0 || e->len > d->max_len) abort();
        for (int64_t j = 0; j < e->len; j++) {
            sink ^= e->input_ids[j];
            if (e->attention_mask) sink ^= e->attention_mask[j];
            if (e->token_type_ids) sink ^= e->token_type_ids[j];
        }
    }
    (void)sink;
    batches(d, 0);
    batches(d, 1);
    tm__dataset_free(d);
    return 0;
}
