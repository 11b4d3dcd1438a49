/* Unit tests of the hub's pure parts (src/hub): hf:// parsing and its refusals, the
 * variant names of `ls`, the loader's rule for cache blobs, URL quoting and origins, and
 * the JSON reader on good, bad and hostile text. Not the network or the cache on disk:
 * tests/hub.sh runs those against a fake Hub. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../src/hub/http.h"
#include "../src/hub/hub.h"
#include "../src/hub/json.h"

#include "check.h"

static void parses(const char *src, const char *owner, const char *repo, const char *path,
                   const char *rev) {
    tm_hub_source s;
    tm_error err = {0};
    tm_status st = tm_hub_parse(src, 0, &s, &err);
    CHECK(st == TM_OK, "%s: %s", src, err.message);
    if (st != TM_OK) return;
    CHECK(!strcmp(s.owner, owner) && !strcmp(s.repo, repo) && !strcmp(s.path, path) &&
              !strcmp(s.revision, rev),
          "%s: got %s / %s / '%s' @ %s", src, s.owner, s.repo, s.path, s.revision);
    tm_hub_source_free(&s);
}

static void refused(const char *src, int need_path) {
    tm_hub_source s;
    tm_error err = {0};
    tm_status st = tm_hub_parse(src, need_path, &s, &err);
    CHECK(st == TM_ERR_INVALID_ARGUMENT && strstr(err.message, src),
          "%s: expected a refusal naming it, got %d '%s'", src, st, err.message);
    if (st == TM_OK) tm_hub_source_free(&s);
}

static void test_parse(void) {
    parses("hf://Xenova/all-MiniLM-L6-v2/onnx/model.onnx", "Xenova", "all-MiniLM-L6-v2",
           "onnx/model.onnx", "main");
    parses("hf://o/r/onnx/model.onnx@v1.0", "o", "r", "onnx/model.onnx", "v1.0");
    parses("hf://o/r/model.onnx@refs/pr/1", "o", "r", "model.onnx", "refs/pr/1");
    parses("hf://o/r@refs%2Fpr%2F1/model.onnx", "o", "r", "model.onnx", "refs/pr/1");
    parses("hf://o/r@dev", "o", "r", "", "dev");
    parses("hf://o/r", "o", "r", "", "main");
    parses("hf://o/Qwen2.5-0.5B/a/b/c.onnx", "o", "Qwen2.5-0.5B", "a/b/c.onnx", "main");
    refused("hf://o", 0);
    refused("hf://o/r", 1);
    refused("hf://o/r/", 1);
    refused("hf://o/r/../x.onnx", 1);
    refused("hf://o/r/a/./x.onnx", 1);
    refused("hf://o/r//x.onnx", 1);
    refused("hf://o/r/x.onnx@", 1);
    refused("hf://o/r/x.onnx@../../etc", 1);
    refused("hf://o/r@a@b/x.onnx", 1);
    refused("hf://o--x/r/x.onnx", 1);
    refused("hf://o/.hidden/x.onnx", 1);
    refused("hf://o/r w/x.onnx", 1);
    refused("hf:///r/x.onnx", 1);
    CHECK(tm_hub_is_source("hf://a/b") && !tm_hub_is_source("model.onnx") &&
              !tm_hub_is_source(NULL), "tm_hub_is_source");
}

static void test_variants(void) {
    static const char *cases[][2] = {
        {"onnx/model.onnx", "fp32"},           {"onnx/model_fp16.onnx", "fp16"},
        {"onnx/model_q4.onnx", "q4"},          {"onnx/model_q4f16.onnx", "q4f16"},
        {"onnx/model_quantized.onnx", "int8"}, {"onnx/model_int8.onnx", "int8"},
        {"onnx/model_uint8.onnx", "uint8"},    {"onnx/model_bnb4.onnx", "bnb4"},
        {"decoder_model_merged_q4.onnx", "q4"}, {"decoder_model_merged.onnx", "fp32"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        CHECK(!strcmp(tm_hub_variant(cases[i][0]), cases[i][1]), "%s: %s, want %s",
              cases[i][0], tm_hub_variant(cases[i][0]), cases[i][1]);
}

static void test_cache_blob_rule(void) {
    const char *snap = "/c/hub/models--o--r/snapshots/abc/onnx";
    CHECK(tm_hub_is_cache_blob_of(snap, "/c/hub/models--o--r/blobs/f00"), "own blob");
    CHECK(tm_hub_is_cache_blob_of("/c/hub/models--o--r/snapshots/abc",
                                  "/c/hub/models--o--r/blobs/f00"), "top-level snapshot");
    CHECK(!tm_hub_is_cache_blob_of(snap, "/c/hub/models--o--other/blobs/f00"), "other repo");
    CHECK(!tm_hub_is_cache_blob_of(snap, "/c/hub/models--o--r/blobs/x/y"), "nested in blobs");
    CHECK(!tm_hub_is_cache_blob_of(snap, "/c/hub/models--o--r/refs/main"), "not a blob");
    CHECK(!tm_hub_is_cache_blob_of(snap, "/etc/passwd"), "outside");
    CHECK(!tm_hub_is_cache_blob_of("/home/u/models/snapshots/abc", "/home/u/models/blobs/f"),
          "a folder that is not a cache repo");
    CHECK(!tm_hub_is_cache_blob_of("/c/hub/models--o--r/snapshots/", "/c/hub/models--o--r/blobs/f"),
          "no commit folder");
}

static void test_urls(void) {
    char *q = tm_http_quote("refs/pr/1", 0);
    CHECK(q && !strcmp(q, "refs%2Fpr%2F1"), "quote revision: %s", q);
    free(q);
    q = tm_http_quote("onnx/model v2+.onnx", 1);
    CHECK(q && !strcmp(q, "onnx/model%20v2%2B.onnx"), "quote path: %s", q);
    free(q);
    CHECK(tm_http_same_origin("https://huggingface.co/a", "https://huggingface.co:443/b"),
          "default port");
    CHECK(!tm_http_same_origin("http://127.0.0.1:80/a", "http://127.0.0.1:81/a"), "port");
    CHECK(!tm_http_same_origin("https://huggingface.co/a", "https://cdn-lfs.hf.co/a"), "host");
    CHECK(!tm_http_same_origin("http://h/a", "https://h/a"), "scheme");
}

static void test_json(void) {
    const char *text = "[{\"type\": \"file\", \"path\": \"onnx/m.onnx\", \"size\": 12,"
                       " \"lfs\": {\"size\": 123456789012, \"oid\": \"ab\"}},"
                       " {\"type\": \"directory\", \"path\": \"x\\u00e9\\ud83d\\ude00\\n\"},"
                       " true, false, null, -1.5e3]";
    tm_json *j = tm_json_parse(text, strlen(text));
    CHECK(j && j->type == TM_JSON_ARRAY && j->n == 6, "array of 6");
    if (j && j->n == 6) {
        const tm_json *size = tm_json_get(tm_json_get(&j->items[0], "lfs"), "size");
        CHECK(size && size->number == 123456789012.0, "a large size is exact");
        const char *p = tm_json_get_string(&j->items[1], "path");
        CHECK(p && !strcmp(p, "x\xc3\xa9\xf0\x9f\x98\x80\n"), "escapes and surrogate pairs");
        CHECK(j->items[2].type == TM_JSON_BOOL && j->items[2].number == 1 &&
                  j->items[3].number == 0 && j->items[4].type == TM_JSON_NULL &&
                  j->items[5].number == -1500, "literals and numbers");
        CHECK(!tm_json_get(&j->items[0], "missing") && !tm_json_get(j, "type"), "lookups");
    }
    tm_json_free(j);
    static const char *bad[] = {"", "[", "[1,]", "{\"a\" 1}", "{\"a\":1,}", "[1] x",
                                "\"\\u0000\"", "\"\\ud800\"", "\"a\x01\"", "[tru]", "\"abc",
                                "\"\\"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tm_json *b = tm_json_parse(bad[i], strlen(bad[i]));
        CHECK(!b, "accepted bad JSON '%s'", bad[i]);
        tm_json_free(b);
    }
    /* Nesting far deeper than the limit must be refused, not overflow the stack. */
    size_t depth = 100000;
    char *deep = malloc(2 * depth + 1);
    memset(deep, '[', depth);
    memset(deep + depth, ']', depth);
    deep[2 * depth] = '\0';
    tm_json *d = tm_json_parse(deep, 2 * depth);
    CHECK(!d, "a 100000-deep document is refused");
    tm_json_free(d);
    free(deep);
}

int main(void) {
    test_parse();
    test_variants();
    test_cache_blob_rule();
    test_urls();
    test_json();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
