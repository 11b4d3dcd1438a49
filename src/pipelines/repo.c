/* The repository a pipeline runs: a folder or hf://OWNER/REPO[@REVISION] holding
 * config.json, the tokenizer files, ONNX exports under onnx/ and, for sentence-transformers
 * models, modules.json with its pooling config. Reads what tasks need; fetches from the Hub
 * only the files asked for. Not the tokenizer or model loader: those take its paths. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "pipelines.h"
#include "../core/status.h"
#include "../hub/hub.h"

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Reads and parses a JSON file; TM_ERR_PARSE names the file. */
static tm_status read_json(const char *path, const char *name, tm_json **out, tm_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return tm__fail(err, TM_ERR_IO, "cannot open %s ('%s')", name, path);
    char *text = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 65536 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *t = realloc(text, cap);
            if (!t) {
                free(text);
                fclose(f);
                return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory reading %s", name);
            }
            text = t;
        }
        size_t got = fread(text + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(text);
        return tm__fail(err, TM_ERR_IO, "cannot read %s ('%s')", name, path);
    }
    tm_json *doc = tm_json_parse(text, n);
    free(text);
    if (!doc) return tm__fail(err, TM_ERR_PARSE, "%s: not valid JSON", name);
    *out = doc;
    return TM_OK;
}

/* dir/rel when it is a file, else NULL. */
static char *local_file(const char *dir, const char *rel) {
    size_t n = strlen(dir) + strlen(rel) + 2;
    char *p = malloc(n);
    if (!p) return NULL;
    snprintf(p, n, "%s/%s", dir, rel);
    if (is_file(p)) return p;
    free(p);
    return NULL;
}

tm_status tm__repo_file(const tm__repo *r, const char *rel, char **path, tm_error *err) {
    if (r->hub_repo) {
        /* The snapshot of the commit config.json was resolved at holds its files. */
        if (r->dir && (*path = local_file(r->dir, rel))) return TM_OK;
        tm_error e;
        tm__error_clear(&e);
        tm_status s = tm_hub_resolve_file(r->source, rel, path, &e);
        if (s == TM_ERR_NOT_FOUND)
            return tm__fail(err, s, "%s has no file %s", r->source, rel);
        if (s) tm__error_copy(err, &e);
        return s;
    }
    if (!(*path = local_file(r->dir, rel)))
        return tm__fail(err, TM_ERR_NOT_FOUND, "%s has no file %s", r->source, rel);
    return TM_OK;
}

/* An optional JSON file of the repo: *out NULL when the repo has none. */
static tm_status optional_json(const tm__repo *r, const char *rel, tm_json **out, tm_error *err) {
    char *path = NULL;
    tm_error e;
    tm__error_clear(&e);
    *out = NULL;
    tm_status s = tm__repo_file(r, rel, &path, &e);
    /* Offline or without the Hub, a file the snapshot lacks counts as absent, as
     * transformers treats optional files. */
    if (s == TM_ERR_NOT_FOUND || s == TM_ERR_NETWORK) return TM_OK;
    if (s) {
        tm__error_copy(err, &e);
        return s;
    }
    s = read_json(path, rel, out, err);
    free(path);
    return s;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

static int json_true(const tm_json *v, const char *key) {
    const tm_json *x = tm_json_get(v, key);
    return x && x->type == TM_JSON_BOOL && x->number != 0;
}

/* sentence-transformers: modules.json names a Pooling module (its folder holds
 * config.json with one pooling_mode_* true) and perhaps a Normalize one. */
static tm_status read_sentence_transformers(tm__repo *r, tm_error *err) {
    tm_json *modules = NULL;
    tm_status s = optional_json(r, "modules.json", &modules, err);
    if (s || !modules) return s;
    if (modules->type != TM_JSON_ARRAY) {
        tm_json_free(modules);
        return tm__fail(err, TM_ERR_PARSE, "%s: modules.json is not an array", r->source);
    }
    const char *pool_dir = NULL;
    for (int i = 0; i < modules->n; i++) {
        const char *type = tm_json_get_string(&modules->items[i], "type");
        if (!type) continue;
        if (ends_with(type, ".Pooling")) pool_dir = tm_json_get_string(&modules->items[i], "path");
        if (ends_with(type, ".Normalize")) r->st_normalize = 1;
    }
    if (pool_dir) {
        char rel[512];
        snprintf(rel, sizeof rel, "%s%sconfig.json", pool_dir, *pool_dir ? "/" : "");
        tm_json *pool = NULL;
        s = optional_json(r, rel, &pool, err);
        if (!s && !pool)
            s = tm__fail(err, TM_ERR_NOT_FOUND, "%s: modules.json names a Pooling module but %s is missing",
                         r->source, rel);
        if (!s) {
            static const char *const modes[][2] = {
                {"pooling_mode_cls_token", "cls"}, {"pooling_mode_mean_tokens", "mean"},
                {"pooling_mode_max_tokens", "max"}, {"pooling_mode_lasttoken", "last_token"},
                {"pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len"},
                {"pooling_mode_weightedmean_tokens", "weightedmean"}};
            for (size_t m = 0; m < sizeof modes / sizeof modes[0] && !r->st_pooling[0]; m++)
                if (json_true(pool, modes[m][0])) snprintf(r->st_pooling, sizeof r->st_pooling, "%s", modes[m][1]);
            if (!r->st_pooling[0])
                s = tm__fail(err, TM_ERR_PARSE, "%s: %s sets no pooling_mode_* to true", r->source, rel);
        }
        tm_json_free(pool);
    }
    tm_json_free(modules);
    return s;
}

static tm_status open_hub(tm__repo *r, const char *source, tm_error *err) {
    tm_hub_source src;
    tm_status s = tm_hub_parse(source, 0, &src, err);
    if (s) return s;
    size_t n = strlen(src.owner) + strlen(src.repo) + strlen(src.path) + 3;
    r->hub_repo = malloc(n);
    r->revision = dup_str(src.revision);
    if (r->hub_repo)
        snprintf(r->hub_repo, n, "%s/%s%s%s", src.owner, src.repo, *src.path ? "/" : "", src.path);
    tm_hub_source_free(&src);
    if (!r->hub_repo || !r->revision) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    char *config = NULL;
    s = tm__repo_file(r, "config.json", &config, err);
    if (s) return s;
    char *slash = strrchr(config, '/');
    if (slash) *slash = '\0';
    r->dir = config;
    return TM_OK;
}

tm_status tm__repo_open(const char *source, tm__repo **out, tm_error *err) {
    if (!source || !out) return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "tm__repo_open: NULL argument");
    tm__repo *r = calloc(1, sizeof *r);
    if (!r || !(r->source = dup_str(source))) {
        free(r);
        return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    }
    tm_status s = TM_OK;
    if (tm_hub_is_source(source)) {
        s = open_hub(r, source, err);
    } else if (!is_dir(source)) {
        s = tm__fail(err, TM_ERR_NOT_FOUND, "no such repository folder: '%s'", source);
    } else {
        r->dir = dup_str(source);
        if (!r->dir) s = tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    }
    if (!s) {
        char *path = NULL;
        s = tm__repo_file(r, "config.json", &path, err);
        if (!s) s = read_json(path, "config.json", &r->config, err);
        free(path);
    }
    if (!s && r->config->type != TM_JSON_OBJECT)
        s = tm__fail(err, TM_ERR_PARSE, "%s: config.json is not an object", source);
    if (!s) {
        r->model_type = tm_json_get_string(r->config, "model_type");
        r->problem_type = tm_json_get_string(r->config, "problem_type");
        if (!r->model_type) r->model_type = "";
        if (!r->problem_type) r->problem_type = "";
        s = read_sentence_transformers(r, err);
    }
    if (s) {
        tm__repo_free(r);
        return s;
    }
    *out = r;
    return TM_OK;
}

void tm__repo_free(tm__repo *r) {
    if (!r) return;
    tm_json_free(r->config);
    free(r->source);
    free(r->hub_repo);
    free(r->revision);
    free(r->dir);
    free(r);
}

tm_status tm__repo_onnx_name(const char *dtype, const char *name, const char *subfolder,
                             char **rel, tm_error *err) {
    static const char *const suffixes[][2] = {
        {"fp32", ""}, {"fp16", "_fp16"}, {"int8", "_int8"}, {"uint8", "_uint8"},
        {"q8", "_quantized"}, {"q4", "_q4"}, {"q4f16", "_q4f16"}, {"bnb4", "_bnb4"},
        {"q2", "_q2"}, {"q2f16", "_q2f16"}, {"q1", "_q1"}, {"q1f16", "_q1f16"}};
    const char *suffix = NULL;
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++)
        if (!strcmp(dtype, suffixes[i][0])) suffix = suffixes[i][1];
    if (!suffix)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT,
                        "unknown dtype '%s' (fp32, fp16, int8, uint8, q8, q4, q4f16, bnb4, q2, q2f16, q1, q1f16)",
                        dtype);
    if (!*name || strstr(name, "..") || strchr(name, '/') || (subfolder && strstr(subfolder, "..")))
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "bad model_file_name '%s' or subfolder", name);
    size_t n = strlen(name) + strlen(suffix) + (subfolder ? strlen(subfolder) : 0) + 8;
    char *p = malloc(n);
    if (!p) return tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    snprintf(p, n, "%s%s%s%s.onnx", subfolder && *subfolder ? subfolder : "",
             subfolder && *subfolder ? "/" : "", name, suffix);
    *rel = p;
    return TM_OK;
}

const char *tm__repo_label(const tm__repo *r, int64_t id) {
    char key[32];
    snprintf(key, sizeof key, "%lld", (long long)id);
    return tm_json_get_string(tm_json_get(r->config, "id2label"), key);
}

int tm__repo_n_labels(const tm__repo *r) {
    const tm_json *m = tm_json_get(r->config, "id2label");
    return m && m->type == TM_JSON_OBJECT ? m->n : 0;
}

static int same_nocase(const char *a, const char *b) {
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
    return *a == *b;
}

int64_t tm__repo_label_id(const tm__repo *r, const char *label) {
    const tm_json *m = tm_json_get(r->config, "label2id");
    if (!m || m->type != TM_JSON_OBJECT) return -1;
    /* Object.fromEntries keeps the last of keys equal once lowercased. */
    int64_t id = -1;
    for (int i = 0; i < m->n; i++)
        if (same_nocase(m->keys[i], label) && m->items[i].type == TM_JSON_NUMBER)
            id = (int64_t)m->items[i].number;
    return id;
}
