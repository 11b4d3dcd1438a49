/* Conformance: every case of tests/data/tokenizers/<name>/cases.jsonl.xz (copied from the
 * shared corpus; references from Hugging Face's Rust tokenizers 0.23.2 and transformers.js)
 * must match exactly: ids, tokens, attention_mask, token_type_ids (when given), decoded,
 * decoded_skip_special. The xz files are unpacked into $BUILD/tokenizers (BUILD: argv[1],
 * else "build"). Prints per-tokenizer counts, then "N passed, N failed". */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "../include/transmuter.h"
#include "../src/hub/json.h"

static const char *DATA = "tests/data/tokenizers";
static int verbose;

/* Unpacks name[.xz] from src into dst when it is there. */
static int unpack(const char *src, const char *dst, const char *name) {
    char in[1024], out[1024], cmd[4200];
    struct stat st;
    snprintf(out, sizeof out, "%s/%s", dst, name);
    snprintf(in, sizeof in, "%s/%s.xz", src, name);
    if (!stat(in, &st)) {
        struct stat o;
        if (!stat(out, &o) && o.st_mtime >= st.st_mtime) return 1;
        snprintf(cmd, sizeof cmd, "xz -dc '%s' > '%s.tmp' && mv '%s.tmp' '%s'", in, out, out, out);
        return system(cmd) == 0;
    }
    snprintf(in, sizeof in, "%s/%s", src, name);
    if (stat(in, &st)) return 0;
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", in, out);
    return system(cmd) == 0;
}

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) b[n] = '\0', *len = (size_t)n;
    return b;
}

static int same_ints(const tm_json *arr, const int32_t *v, size_t n) {
    if (!arr || arr->type != TM_JSON_ARRAY || (size_t)arr->n != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (arr->items[i].number != v[i]) return 0;
    return 1;
}

static int same_strings(const tm_json *arr, const char *const *v, size_t n) {
    if (!arr || arr->type != TM_JSON_ARRAY || (size_t)arr->n != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (arr->items[i].type != TM_JSON_STRING || strcmp(arr->items[i].string, v[i])) return 0;
    return 1;
}

/* One case; returns NULL when it matches, else what differs. */
static const char *check_case(const tm_tokenizer *tok, const tm_json *c, int type_ids_given) {
    static char why[1100];
    const tm_json *text = tm_json_get(c, "text"), *pair = tm_json_get(c, "pair");
    const tm_json *add = tm_json_get(c, "add_special_tokens");
    tm_encode_options o = tm_encode_options_default();
    o.add_special_tokens = !add || add->number != 0;
    tm_encoding *e = NULL;
    tm_error err;
    int has_pair = pair && pair->type == TM_JSON_STRING && pair->len > 0;
    if (tm_tokenizer_encode(tok, text->string, text->len, has_pair ? pair->string : NULL,
                            has_pair ? pair->len : 0, &o, &e, &err)) {
        snprintf(why, sizeof why, "encode failed: %s", err.message);
        return why;
    }
    const char *bad = NULL;
    size_t n = tm_encoding_n(e);
    if (!same_ints(tm_json_get(c, "ids"), tm_encoding_ids(e), n)) bad = "ids";
    else if (!same_strings(tm_json_get(c, "tokens"), tm_encoding_tokens(e), n) &&
             !same_strings(tm_json_get(tm_json_get(c, "rust_tokenizers"), "tokens"),
                           tm_encoding_tokens(e), n))
        bad = "tokens";   /* the cases' tokens, or the Rust library's own where they differ */
    else if (!same_ints(tm_json_get(c, "attention_mask"), tm_encoding_attention_mask(e), n)) bad = "attention_mask";
    else if (type_ids_given && !same_ints(tm_json_get(c, "token_type_ids"), tm_encoding_type_ids(e), n))
        bad = "token_type_ids";
    for (int skip = 0; skip < 2 && !bad; skip++) {
        const tm_json *ids = tm_json_get(c, "ids");
        int32_t *v = malloc(((size_t)ids->n + 1) * sizeof *v);
        for (int i = 0; i < ids->n; i++) v[i] = (int32_t)ids->items[i].number;
        char *out = NULL;
        size_t out_len = 0;
        const tm_json *wantj = tm_json_get(c, skip ? "decoded_skip_special" : "decoded");
        const char *want = wantj && wantj->type == TM_JSON_STRING ? wantj->string : NULL;
        if (tm_tokenizer_decode(tok, v, (size_t)ids->n, skip, -1, &out, &out_len, &err)) {
            snprintf(why, sizeof why, "decode failed: %s", err.message);
            bad = why;
        } else if (!want || wantj->len != out_len || memcmp(want, out, out_len)) {
            bad = skip ? "decoded_skip_special" : "decoded";
            if (verbose) fprintf(stderr, "  got %s\n  want %s\n", out, want ? want : "(none)");
        }
        free(out);
        free(v);
    }
    if (bad && verbose && strcmp(bad, "decoded") && strcmp(bad, "decoded_skip_special")) {
        fprintf(stderr, "  got:");
        for (size_t i = 0; i < n; i++) fprintf(stderr, " %d:%s", tm_encoding_ids(e)[i], tm_encoding_tokens(e)[i]);
        fprintf(stderr, "\n");
    }
    tm_encoding_free(e);
    return bad;
}

static void run_tokenizer(const char *build, const char *name, int *pass, int *fail) {
    char src[512], dst[512];
    snprintf(src, sizeof src, "%s/%s", DATA, name);
    snprintf(dst, sizeof dst, "%s/tokenizers/%s", build, name);
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dst);
    if (system(cmd)) return;
    if (!unpack(src, dst, "tokenizer.json")) return;   /* not a tokenizer folder */
    unpack(src, dst, "tokenizer_config.json");
    unpack(src, dst, "special_tokens_map.json");
    unpack(src, dst, "cases.jsonl");
    tm_tokenizer *tok = NULL;
    tm_error err;
    int p = 0, f = 0;
    char path[600];
    snprintf(path, sizeof path, "%s/cases.jsonl", dst);
    size_t len;
    char *cases = read_all(path, &len);
    if (tm_tokenizer_load(dst, NULL, &tok, &err)) {
        int n = 0;
        for (size_t i = 0; cases && i < len; i++) n += cases[i] == '\n';
        printf("FAIL %s: load: %s\n", name, err.message);
        *fail += n ? n : 1;
        printf("%-18s 0 passed, %d failed\n", name, n);
        free(cases);
        return;
    }
    /* type ids are compared when the cases carry them */
    for (char *line = cases; line && *line;) {
        char *nl = strchr(line, '\n');
        size_t ll = nl ? (size_t)(nl - line) : strlen(line);
        tm_json *c = ll ? tm_json_parse_ex(line, ll, TM_JSON_ALLOW_NUL) : NULL;
        if (ll && !c) {
            printf("FAIL %s: a case line is not JSON\n", name);
            f++;
        }
        if (c) {
            const char *why = check_case(tok, c, tm_json_get(c, "token_type_ids") != NULL);
            if (why) {
                f++;
                if (f <= 5) printf("FAIL %s %s add_special=%d: %s\n", name, tm_json_get_string(c, "id"),
                                   tm_json_get(c, "add_special_tokens")->number != 0, why);
            } else {
                p++;
            }
            tm_json_free(c);
        }
        line = nl ? nl + 1 : NULL;
    }
    free(cases);
    tm_tokenizer_free(tok);
    printf("%-18s %d passed, %d failed\n", name, p, f);
    *pass += p;
    *fail += f;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
    const char *build = argc > 1 ? argv[1] : "build";
    const char *only = argc > 2 ? argv[2] : NULL;
    verbose = getenv("TM_TOK_VERBOSE") != NULL;
    DIR *d = opendir(DATA);
    if (!d) {
        printf("no %s\n0 passed, 1 failed\n", DATA);
        return 1;
    }
    char *names[64];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < 64)
        if (de->d_name[0] != '.') names[n++] = strdup(de->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_names);
    int pass = 0, fail = 0;
    for (int i = 0; i < n; i++) {
        if (!only || !strcmp(only, names[i])) run_tokenizer(build, names[i], &pass, &fail);
        free(names[i]);
    }
    printf("%d passed, %d failed\n", pass, fail);
    return fail != 0;
}
