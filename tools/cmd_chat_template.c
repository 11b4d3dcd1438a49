/* `transmuter chat-template TOKENIZER MESSAGES.json`: renders the chat template of a
 * tokenizer's tokenizer_config.json (or chat_template.jinja) with messages and variables,
 * as transformers' apply_chat_template(tokenize=False) does. Not the template engine
 * (src/template) nor the tokenizer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "transmuter.h"
#include "hub/json.h"

int tm__cmd_chat_template(int argc, char **argv);

static void usage(FILE *f) {
    fprintf(f,
            "usage: transmuter chat-template TOKENIZER MESSAGES.json [--add-generation-prompt]\n"
            "                 [--vars JSON] [--template NAME] [--ids]\n"
            "  TOKENIZER: a folder (tokenizer.json and tokenizer_config.json, or only the\n"
            "  latter or a chat_template.jinja), a tokenizer.json path, or hf://owner/repo.\n"
            "  MESSAGES.json: a JSON array of messages ('-' reads stdin). --vars: a JSON\n"
            "  object of extra variables (tools, documents, enable_thinking, ...) or @FILE.\n"
            "  --template: a named template of a list. --ids: the rendered text's token ids\n"
            "  (encoded without special tokens, as apply_chat_template(tokenize=True)).\n");
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf)
            break;
        if (n + 1 >= cap) {
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
        size_t k = fread(buf + n, 1, cap - n - 1, f);
        if (k == 0)
            break;
        n += k;
    }
    if (f != stdin)
        fclose(f);
    if (buf) {
        buf[n] = 0;
        if (len)
            *len = n;
    }
    return buf;
}

static void put_json_string(FILE *out, const char *s) {
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(out, "\\u%04x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

/* The folder of TOKENIZER: itself when it is a folder, else the folder of the file. */
static char *folder_of(const char *source) {
    struct stat st;
    if (stat(source, &st) == 0 && S_ISDIR(st.st_mode))
        return strdup(source);
    const char *slash = strrchr(source, '/');
    if (!slash)
        return strdup(".");
    return strndup(source, (size_t)(slash - source));
}

/* chat_template as a string, or from a list of {name, template}: `name`, else "tool_use"
 * when tools are given and there is one, else "default" (transformers' choice). */
static const char *pick_template(const tm_json *ct, const char *name, int has_tools,
                                 char *err, size_t cap) {
    if (ct->type == TM_JSON_STRING)
        return ct->string;
    if (ct->type != TM_JSON_ARRAY) {
        snprintf(err, cap, "chat_template is neither a string nor a list");
        return NULL;
    }
    const char *want[3] = {name, has_tools ? "tool_use" : NULL, "default"};
    for (int w = 0; w < 3; w++) {
        if (!want[w])
            continue;
        for (int i = 0; i < ct->n; i++) {
            const char *n = tm_json_get_string(&ct->items[i], "name");
            const char *t = tm_json_get_string(&ct->items[i], "template");
            if (n && t && strcmp(n, want[w]) == 0)
                return t;
        }
        if (name && w == 0) {
            snprintf(err, cap, "no chat template named '%s'", name);
            return NULL;
        }
    }
    snprintf(err, cap, "no default chat template in the list");
    return NULL;
}

static const char *ROLES[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                              "pad_token", "cls_token", "mask_token"};

/* Writes the variables object: tools and documents null, the special tokens of the
 * config (strings or AddedToken objects), then the user's --vars members (which win). */
static char *build_vars(const tm_json *config, const tm_json *user, const char *user_text) {
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    if (!out)
        return NULL;
    fputs("{\"tools\": null, \"documents\": null", out);
    for (size_t r = 0; config && r < sizeof ROLES / sizeof *ROLES; r++) {
        const tm_json *v = tm_json_get(config, ROLES[r]);
        const char *s = NULL;
        if (v && v->type == TM_JSON_STRING)
            s = v->string;
        else if (v && v->type == TM_JSON_OBJECT)
            s = tm_json_get_string(v, "content");
        if (!s)
            continue;
        fprintf(out, ", \"%s\": ", ROLES[r]);
        put_json_string(out, s);
    }
    if (user && user->n > 0) {
        /* splice the user's object members in after ours: later keys win */
        const char *open = strchr(user_text, '{');
        const char *close = strrchr(user_text, '}');
        fputs(", ", out);
        fwrite(open + 1, 1, (size_t)(close - open - 1), out);
    }
    fputc('}', out);
    fclose(out);
    return buf;
}

int tm__cmd_chat_template(int argc, char **argv) {
    const char *source = NULL, *messages_path = NULL, *vars_arg = NULL, *name = NULL;
    int add_generation_prompt = 0, ids = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--add-generation-prompt")) add_generation_prompt = 1;
        else if (!strcmp(argv[i], "--ids")) ids = 1;
        else if (!strcmp(argv[i], "--vars") && i + 1 < argc) vars_arg = argv[++i];
        else if (!strcmp(argv[i], "--template") && i + 1 < argc) name = argv[++i];
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { usage(stdout); return 0; }
        else if (argv[i][0] == '-' && argv[i][1]) { usage(stderr); return 2; }
        else if (!source) source = argv[i];
        else if (!messages_path) messages_path = argv[i];
        else { usage(stderr); return 2; }
    }
    if (!source || !messages_path) {
        usage(stderr);
        return 2;
    }
    int rc = 1;
    int remote = strncmp(source, "hf://", 5) == 0;
    char *folder = remote ? NULL : folder_of(source), *path = NULL, *config_text = NULL;
    char *template_text = NULL, *messages = NULL, *user_text = NULL, *vars = NULL;
    char *rendered = NULL;
    tm_json *config = NULL, *user = NULL;
    tm_chat_template *t = NULL;
    tm_tokenizer *tok = NULL;
    tm_encoding *enc = NULL;
    tm_error err = {0};
    char msg[256] = "";
    size_t len = 0;
    /* Through the tokenizer (hf:// fetches its files; --ids encodes with it); a folder
     * holding only tokenizer_config.json or chat_template.jinja is read directly. */
    if (tm_tokenizer_load(source, NULL, &tok, &err) == TM_OK) {
        const char *text = tm_tokenizer_config_json(tok);
        config_text = text ? strdup(text) : NULL;
        len = text ? strlen(text) : 0;
        if (asprintf(&path, "%s: tokenizer_config.json", source) < 0)
            goto done;
    } else if (remote || ids) {
        fprintf(stderr, "chat-template: %s\n", err.message);
        goto done;
    } else {
        if (asprintf(&path, "%s/tokenizer_config.json", folder) < 0)
            goto done;
        config_text = read_file(path, &len);
    }
    if (config_text) {
        config = tm_json_parse(config_text, len);
        if (!config) {
            fprintf(stderr, "chat-template: %s is not valid JSON\n", path);
            goto done;
        }
    }
    const char *template_src = NULL;
    const tm_json *ct = config ? tm_json_get(config, "chat_template") : NULL;
    if (vars_arg) {
        user_text = vars_arg[0] == '@' ? read_file(vars_arg + 1, NULL) : strdup(vars_arg);
        if (!user_text) {
            fprintf(stderr, "chat-template: cannot read %s\n", vars_arg + 1);
            goto done;
        }
        user = tm_json_parse(user_text, strlen(user_text));
        if (!user || user->type != TM_JSON_OBJECT) {
            fprintf(stderr, "chat-template: --vars must be a JSON object\n");
            goto done;
        }
    }
    const tm_json *tools = user ? tm_json_get(user, "tools") : NULL;
    if (ct) {
        template_src = pick_template(ct, name, tools && tools->type != TM_JSON_NULL, msg, sizeof msg);
        if (!template_src) {
            fprintf(stderr, "chat-template: %s: %s\n", path, msg);
            goto done;
        }
    } else {
        free(path);
        path = NULL;
        if (!folder) {
            fprintf(stderr, "chat-template: %s has no chat template in tokenizer_config.json\n", source);
            goto done;
        }
        if (asprintf(&path, "%s/chat_template.jinja", folder) < 0)
            goto done;
        template_text = read_file(path, NULL);
        if (!template_text) {
            fprintf(stderr, "chat-template: %s has no chat template (no chat_template in "
                            "tokenizer_config.json, no chat_template.jinja)\n", folder);
            goto done;
        }
        template_src = template_text;
    }
    messages = read_file(messages_path, NULL);
    if (!messages) {
        fprintf(stderr, "chat-template: cannot read %s\n", messages_path);
        goto done;
    }
    vars = build_vars(config, user, user_text);
    if (!vars)
        goto done;
    if (tm_chat_template_create(template_src, strlen(template_src), &t, &err) != TM_OK ||
        tm_chat_template_render(t, messages, vars, add_generation_prompt, &rendered, &len,
                                &err) != TM_OK) {
        fprintf(stderr, "chat-template: %s\n", err.message);
        goto done;
    }
    if (ids) {
        /* apply_chat_template(tokenize=True): the text encoded without special tokens */
        tm_encode_options eo = tm_encode_options_default();
        eo.add_special_tokens = 0;
        if (tm_tokenizer_encode(tok, rendered, len, NULL, 0, &eo, &enc, &err) != TM_OK) {
            fprintf(stderr, "chat-template: %s\n", err.message);
            goto done;
        }
        for (size_t i = 0; i < tm_encoding_n(enc); i++)
            printf("%s%d", i ? " " : "", tm_encoding_ids(enc)[i]);
        printf("\n");
    } else {
        fwrite(rendered, 1, len, stdout);
    }
    rc = 0;
done:
    tm_encoding_free(enc);
    tm_tokenizer_free(tok);
    tm_chat_template_free(t);
    tm_json_free(config);
    tm_json_free(user);
    free(folder);
    free(path);
    free(config_text);
    free(template_text);
    free(messages);
    free(user_text);
    free(vars);
    free(rendered);
    return rc;
}
