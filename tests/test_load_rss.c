/* Loading maps weights, it does not copy them: the process's anonymous memory (RssAnon:
 * what a copy would take) grows by far less than the file size when the MiniLM-sized
 * export is loaded (before any run). File pages the parser touches are not copies, and
 * the kernel maps cached ones in by whole fault-around blocks, so plain VmRSS would
 * count them. The model is not in the repository: bench/materialize.sh makes it
 * (bench/models/minilm-l6/model.onnx), or TM_MINILM_MODEL points to it; without it this
 * test says so and skips. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "transmuter.h"

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "RssAnon:", 8)) kib = atol(line + 8);
    if (f) fclose(f);
    return kib;
}

int main(void) {
    const char *path = getenv("TM_MINILM_MODEL");
    if (!path) path = "bench/models/minilm-l6/model.onnx";
    struct stat st;
    if (stat(path, &st) != 0) {
        printf("skipped: %s is absent (make it with bench/materialize.sh, or set TM_MINILM_MODEL)\n", path);
        printf("0 passed, 0 failed, 1 skipped\n");
        return 0;
    }
    long before = rss_kib();
    tm_model *m = NULL;
    tm_error err;
    if (tm_model_load(path, NULL, &m, &err) != TM_OK) {
        printf("FAIL load: %s\n0 passed, 1 failed\n", err.message);
        return 1;
    }
    long after = rss_kib();
    long file_kib = (long)(st.st_size / 1024);
    long grew = after - before;
    printf("file %ld KiB; anonymous RSS before load %ld KiB, after %ld KiB: grew %ld KiB (%.2f%% of the file)\n",
           file_kib, before, after, grew, 100.0 * grew / file_kib);
    int ok = grew < file_kib / 10;
    if (!ok) printf("FAIL the load copied weights: RSS grew by %ld KiB\n", grew);
    tm_model_free(m);
    printf("%d passed, %d failed\n", ok, !ok);
    return !ok;
}
