/* `transmuter tokenize` and `transmuter detokenize`: text to ids and back with a Hugging
 * Face tokenizer (folder, tokenizer.json or hf://), one text or JSON lines. JSON output
 * escapes strings as JavaScript's JSON.stringify, for byte-exact comparisons. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../include/transmuter.h"
#include "../src/hub/json.h"

int tm__cmd_tokenize(int argc, char **argv);
int tm__cmd_detokenize(int argc, char **argv);

/* A growable output line. */
typedef struct out_buf {
    char *s;
    size_t n, cap;
} out_buf;

static void put(out_buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap < b->n + n + 1) cap *= 2;
        char *x = realloc(b->s, cap);
        if (!x) {
            fprintf(stderr, "out of memory\n");
            exit(1);
        }
        b->s = x;
        b->cap = cap;
    }
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = '\0';
}

static void puts_(out_buf *b, const char *s) { put(b, s, strlen(s)); }

static void put_int(out_buf *b, long long v) {
    char t[32];
    put(b, t, (size_t)snprintf(t, sizeof t, "%lld", v));
}

/* As JSON.stringify: \" \\ \b \f \n \r \t, other controls \u00xx, everything else as is. */
static void put_json_string(out_buf *b, const char *s, size_t n) {
    put(b, "\"", 1);
    size_t from = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        default:
            if (c < 0x20) {
                snprintf(u, sizeof u, "\\u%04x", c);
                esc = u;
            }
        }
        if (!esc) continue;
        put(b, s + from, i - from);
        puts_(b, esc);
        from = i + 1;
    }
    put(b, s + from, n - from);
    put(b, "\"", 1);
}

static void put_ints(out_buf *b, const int32_t *v, size_t n) {
    put(b, "[", 1);
    for (size_t i = 0; i < n; i++) {
        if (i) put(b, ",", 1);
        put_int(b, v[i]);
    }
    put(b, "]", 1);
}

/* Whether the tokenizer class returns token_type_ids (transformers' model_input_names). */
static int class_has_type_ids(const tm_tokenizer *tok) {
    const char *cfg = tm_tokenizer_config_json(tok);
    if (!cfg) return 0;
    tm_json *j = tm_json_parse(cfg, strlen(cfg));
    const char *cls = j ? tm_json_get_string(j, "tokenizer_class") : NULL;
    static const char *const with[] = {"Bert", "Albert", "Electra", "ConvBert", "MobileBert",
                                       "SqueezeBert", "RoFormer", "Funnel", "LayoutLM", "Deberta",
                                       "XLNet", "Splinter", "Tapas", "Nezha", "Lxmert", "RemBert",
                                       "MegatronBert", "Canine", "Realm", NULL};
    int yes = 0;
    for (int i = 0; cls && with[i]; i++)
        if (!strncmp(cls, with[i], strlen(with[i]))) yes = 1;
    tm_json_free(j);
    return yes;
}

static int fail(const tm_error *e) {
    fprintf(stderr, "transmuter: %s\n", e->message);
    return 1;
}

/* The JSON object of one encoding (cases.jsonl's field names plus offsets). */
static int encoding_json(const tm_tokenizer *tok, const tm_encoding *e, int type_ids, out_buf *b,
                         tm_error *err) {
    size_t n = tm_encoding_n(e);
    puts_(b, "{\"ids\":");
    put_ints(b, tm_encoding_ids(e), n);
    puts_(b, ",\"tokens\":[");
    for (size_t i = 0; i < n; i++) {
        if (i) put(b, ",", 1);
        put_json_string(b, tm_encoding_tokens(e)[i], (size_t)tm_encoding_token_lengths(e)[i]);
    }
    puts_(b, "],\"attention_mask\":");
    put_ints(b, tm_encoding_attention_mask(e), n);
    if (type_ids) {
        puts_(b, ",\"token_type_ids\":");
        put_ints(b, tm_encoding_type_ids(e), n);
    }
    for (int skip = 0; skip < 2; skip++) {
        char *text = NULL;
        size_t len = 0;
        if (tm_tokenizer_decode(tok, tm_encoding_ids(e), n, skip, -1, &text, &len, err)) return 1;
        puts_(b, skip ? ",\"decoded_skip_special\":" : ",\"decoded\":");
        put_json_string(b, text, len);
        free(text);
    }
    puts_(b, ",\"offsets\":[");
    const int32_t *o = tm_encoding_char_offsets(e);
    for (size_t i = 0; i < n; i++) {
        if (i) put(b, ",", 1);
        put(b, "[", 1);
        put_int(b, o[2 * i]);
        put(b, ",", 1);
        put_int(b, o[2 * i + 1]);
        put(b, "]", 1);
    }
    puts_(b, "]}");
    return 0;
}

static void error_line(const char *msg) {
    out_buf b = {0};
    puts_(&b, "{\"error\":");
    put_json_string(&b, msg, strlen(msg));
    puts_(&b, "}\n");
    fwrite(b.s, 1, b.n, stdout);
    free(b.s);
}

static int run_jsonl(const tm_tokenizer *tok, const char *path) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "transmuter: cannot open '%s'\n", path);
        return 1;
    }
    int type_ids = class_has_type_ids(tok);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int errors = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
        if (!len) continue;
        tm_json *j = tm_json_parse_ex(line, (size_t)len, TM_JSON_ALLOW_NUL);
        const tm_json *text = j ? tm_json_get(j, "text") : NULL;
        if (!text || text->type != TM_JSON_STRING) {
            error_line("each line must be a JSON object with a \"text\" string");
            errors++;
            tm_json_free(j);
            continue;
        }
        const tm_json *pair = tm_json_get(j, "pair"), *add = tm_json_get(j, "add_special_tokens");
        /* an empty pair is no pair, as transformers does (`if text_pair:`) */
        int has_pair = pair && pair->type == TM_JSON_STRING && pair->len;
        tm_encode_options o = tm_encode_options_default();
        o.add_special_tokens = !add || add->type != TM_JSON_BOOL || add->number != 0;
        tm_encoding *e = NULL;
        tm_error err;
        out_buf b = {0};
        if (tm_tokenizer_encode(tok, text->string, text->len, has_pair ? pair->string : NULL,
                                has_pair ? pair->len : 0, &o, &e, &err) ||
            encoding_json(tok, e, type_ids, &b, &err)) {
            error_line(err.message);
            errors++;
        } else {
            put(&b, "\n", 1);
            fwrite(b.s, 1, b.n, stdout);
        }
        free(b.s);
        tm_encoding_free(e);
        tm_json_free(j);
    }
    free(line);
    if (f != stdin) fclose(f);
    return errors ? 1 : 0;
}

static void tokenize_usage(FILE *f) {
    fprintf(f, "usage: transmuter tokenize TOKENIZER TEXT [--pair TEXT] [--no-special] [--json]\n"
               "       transmuter tokenize TOKENIZER --jsonl FILE|-\n"
               "TOKENIZER is a folder with tokenizer.json, a tokenizer.json path or\n"
               "hf://OWNER/REPO[@REVISION]. Plain output: the ids on one line, the tokens on the\n"
               "next. --json: one object (ids, tokens, attention_mask, token_type_ids for\n"
               "BERT-like classes, decoded, decoded_skip_special, offsets in characters).\n"
               "--jsonl: one object per input line ({\"text\", \"pair\"?, \"add_special_tokens\"?}),\n"
               "errors as {\"error\": ...} lines.\n");
}

int tm__cmd_tokenize(int argc, char **argv) {
    const char *source = NULL, *text = NULL, *pair = NULL, *jsonl = NULL;
    int no_special = 0, json = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            tokenize_usage(stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--pair") && i + 1 < argc) pair = argv[++i];
        else if (!strcmp(argv[i], "--jsonl") && i + 1 < argc) jsonl = argv[++i];
        else if (!strcmp(argv[i], "--no-special")) no_special = 1;
        else if (!strcmp(argv[i], "--json")) json = 1;
        else if (!source) source = argv[i];
        else if (!text) text = argv[i];
        else {
            tokenize_usage(stderr);
            return 2;
        }
    }
    if (!source || (!text && !jsonl) || (text && jsonl)) {
        tokenize_usage(stderr);
        return 2;
    }
    tm_tokenizer *tok;
    tm_error err;
    if (tm_tokenizer_load(source, NULL, &tok, &err)) return fail(&err);
    int rc;
    if (jsonl) {
        rc = run_jsonl(tok, jsonl);
    } else {
        tm_encode_options o = tm_encode_options_default();
        o.add_special_tokens = !no_special;
        tm_encoding *e = NULL;
        rc = 0;
        if (tm_tokenizer_encode(tok, text, strlen(text), pair, pair ? strlen(pair) : 0, &o, &e, &err)) {
            rc = fail(&err);
        } else if (json) {
            out_buf b = {0};
            if (encoding_json(tok, e, class_has_type_ids(tok), &b, &err)) rc = fail(&err);
            else printf("%s\n", b.s);
            free(b.s);
        } else {
            size_t n = tm_encoding_n(e);
            for (size_t i = 0; i < n; i++) printf("%s%d", i ? " " : "", tm_encoding_ids(e)[i]);
            printf("\n");
            out_buf b = {0};
            for (size_t i = 0; i < n; i++) {
                if (i) put(&b, " ", 1);
                put_json_string(&b, tm_encoding_tokens(e)[i], (size_t)tm_encoding_token_lengths(e)[i]);
            }
            printf("%s\n", b.s ? b.s : "");
            free(b.s);
        }
        tm_encoding_free(e);
    }
    tm_tokenizer_free(tok);
    return rc;
}

int tm__cmd_detokenize(int argc, char **argv) {
    const char *source = NULL, *ids_arg = NULL;
    int skip = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: transmuter detokenize TOKENIZER IDS [--skip-special]\n"
                   "IDS: comma- or space-separated token ids; prints the decoded text.\n");
            return 0;
        }
        if (!strcmp(argv[i], "--skip-special")) skip = 1;
        else if (!source) source = argv[i];
        else if (!ids_arg) ids_arg = argv[i];
        else {
            fprintf(stderr, "usage: transmuter detokenize TOKENIZER IDS [--skip-special]\n");
            return 2;
        }
    }
    if (!source || !ids_arg) {
        fprintf(stderr, "usage: transmuter detokenize TOKENIZER IDS [--skip-special]\n");
        return 2;
    }
    size_t cap = strlen(ids_arg) / 2 + 2, n = 0;
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return 1;
    for (const char *p = ids_arg; *p;) {
        if (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n') {
            p++;
            continue;
        }
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 2147483647L) {
            fprintf(stderr, "transmuter: bad id at '%.20s'\n", p);
            free(ids);
            return 2;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    tm_tokenizer *tok;
    tm_error err;
    if (tm_tokenizer_load(source, NULL, &tok, &err)) {
        free(ids);
        return fail(&err);
    }
    char *text = NULL;
    size_t len = 0;
    int rc = 0;
    if (tm_tokenizer_decode(tok, ids, n, skip, -1, &text, &len, &err)) rc = fail(&err);
    else fwrite(text, 1, len, stdout), putchar('\n');
    free(text);
    free(ids);
    tm_tokenizer_free(tok);
    return rc;
}
