/* `transmuter ls hf://OWNER/REPO[@REV]`: the repo's .onnx files with sizes, the variant
 * their names announce, and the external-data files beside them; from the Hub's tree
 * API, or from the cached snapshot when offline. Not downloads (hub.c). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "internal.h"

enum { MAX_WALK_DEPTH = 16 };

/* transformers.js' export names: model.onnx, model_fp16.onnx, model_q4f16.onnx, ... */
const char *tm_hub_variant(const char *file_name) {
    static const struct { const char *suffix, *variant; } known[] = {
        {"fp16", "fp16"},   {"q4f16", "q4f16"}, {"q4", "q4"},         {"bnb4", "bnb4"},
        {"int8", "int8"},   {"uint8", "uint8"}, {"quantized", "int8"}, {"q8", "int8"},
        {"bf16", "bf16"},   {"fp32", "fp32"},   {"int4", "int4"},     {"uint4", "uint4"},
    };
    const char *base = strrchr(file_name, '/');
    base = base ? base + 1 : file_name;
    const char *dot = strrchr(base, '.');
    size_t stem = dot ? (size_t)(dot - base) : strlen(base);
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        size_t n = strlen(known[i].suffix);
        if (stem > n && base[stem - n - 1] == '_' && !strncmp(base + stem - n, known[i].suffix, n))
            return known[i].variant;
    }
    return "fp32";
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

static int under(const char *path, const char *folder) {
    size_t n = strlen(folder);
    return !n || (!strncmp(path, folder, n) && (path[n] == '/' || path[n] == '\0'));
}

/* External data written beside model X.onnx is named X.onnx_data, X.onnx.data,
 * X.onnx_data_1, ... */
static int is_data_of(const char *data, const char *model) {
    size_t n = strlen(model);
    return strncmp(data, model, n) == 0 && (data[n] == '_' || data[n] == '.') &&
           !ends_with(data, ".onnx");
}

static void print_size(FILE *out, int64_t size) {
    char buf[16];
    if (size < 0) fprintf(out, "%9s", "?");
    else {
        tm_hub_human_bytes(buf, sizeof buf, (double)size);
        fprintf(out, "%9s", buf);
    }
}

static int by_path(const void *a, const void *b) {
    return strcmp(((const tm_hub_file *)a)->path, ((const tm_hub_file *)b)->path);
}

static void print_listing(tm_hub_ctx *h, tm_hub_file *files, int n, const char *from, FILE *out) {
    qsort(files, (size_t)n, sizeof *files, by_path);
    size_t width = 10;
    for (int i = 0; i < n; i++)
        if (under(files[i].path, h->src.path) && strlen(files[i].path) + 2 > width)
            width = strlen(files[i].path) + 2;
    if (width > 72) width = 72;
    fprintf(out, "%s/%s@%s%s\n", h->src.owner, h->src.repo, h->src.revision, from);
    int shown = 0;
    for (int i = 0; i < n; i++) {
        if (!under(files[i].path, h->src.path) || !ends_with(files[i].path, ".onnx")) continue;
        fprintf(out, "  %-*s", (int)width, files[i].path);
        print_size(out, files[i].size);
        fprintf(out, "  %s\n", tm_hub_variant(files[i].path));
        for (int k = 0; k < n; k++) {
            if (!is_data_of(files[k].path, files[i].path)) continue;
            fprintf(out, "    + %-*s", (int)(width - 4), files[k].path);
            print_size(out, files[k].size);
            fprintf(out, "  external data\n");
        }
        shown++;
    }
    if (!shown) fprintf(out, "  (no .onnx files%s%s)\n", h->src.path[0] ? " under " : "", h->src.path);
}

/* ---- The cached snapshot, when the Hub cannot answer --------------------------------- */

static int add_file(tm_hub_file **files, int *n, const char *path, int64_t size) {
    tm_hub_file *grown = realloc(*files, (size_t)(*n + 1) * sizeof *grown);
    if (!grown) return 0;
    *files = grown;
    grown[*n].path = tm_hub_strf("%s", path);
    grown[*n].size = size;
    return grown[(*n)++].path != NULL;
}

static int walk(const char *root, const char *rel, tm_hub_file **files, int *n, int depth) {
    char *dir = rel[0] ? tm_hub_strf("%s/%s", root, rel) : tm_hub_strf("%s", root);
    DIR *d = dir ? opendir(dir) : NULL;
    int ok = d != NULL;
    struct dirent *e;
    while (ok && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char *child_rel = rel[0] ? tm_hub_strf("%s/%s", rel, e->d_name) : tm_hub_strf("%s", e->d_name);
        char *child = child_rel ? tm_hub_strf("%s/%s", root, child_rel) : NULL;
        struct stat st;
        if (!child) ok = 0;
        else if (stat(child, &st) != 0) {
        } else if (S_ISDIR(st.st_mode) && depth < MAX_WALK_DEPTH) {
            ok = walk(root, child_rel, files, n, depth + 1);
        } else if (S_ISREG(st.st_mode)) {
            ok = add_file(files, n, child_rel, (int64_t)st.st_size);
        }
        free(child_rel);
        free(child);
    }
    if (d) closedir(d);
    free(dir);
    return ok;
}

static int cached_listing(tm_hub_ctx *h, tm_hub_file **files, int *n) {
    char commit[129];
    if (!tm_hub_cached_commit(h, h->src.revision, commit, NULL)) return 0;
    char *root = tm_hub_strf("%s/snapshots/%s", h->repo_dir, commit);
    int ok = root && walk(root, "", files, n, 0);
    free(root);
    return ok;
}

tm_status tm_hub_list(const char *source, FILE *out, tm_error *err) {
    if (!source || !out) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm_hub_list: NULL argument");
    tm_hub_ctx h;
    tm_status st = tm_hub_ctx_init(&h, source, 0, err);
    if (st != TM_OK) return st;
    tm_hub_file *files = NULL;
    int n = 0, offline_ok = 1;
    const char *from = "";
    if (!h.cfg.offline) st = tm_hub_tree(&h, h.src.revision, &files, &n, &offline_ok, err);
    if (h.cfg.offline || (st != TM_OK && offline_ok)) {
        tm_error online_err = {0};
        if (err) online_err = *err;
        if (cached_listing(&h, &files, &n)) {
            st = TM_OK;
            from = h.cfg.offline ? " (from the cache: offline)" : " (from the cache: the Hub "
                                                                  "cannot be reached)";
        } else if (h.cfg.offline) {
            st = tm__fail(err, TM_ERR_NETWORK, "%s: offline (HF_HUB_OFFLINE is set) and the "
                          "revision '%s' is not in the cache (%s)", source, h.src.revision,
                          h.repo_dir);
        } else if (err) {
            *err = online_err;
        }
    }
    if (st == TM_OK) print_listing(&h, files, n, from, out);
    tm_hub_files_free(files, n);
    tm_hub_ctx_free(&h);
    return st;
}
