/* text-generation: a decoder-only model continues a text, a list of texts, a chat (a list
 * of {role, content}, rendered by the tokenizer's chat template with the generation
 * prompt; add_generation_prompt, tools, documents, chat_template and
 * tokenizer_encode_kwargs as options) or a list of chats, as transformers.js's
 * TextGenerationPipeline: special tokens added only when tokenizer_config.json asks for
 * them, the prompt's decoded text cut from the result unless return_full_text, a chat
 * answered by an appended assistant message.
 * A list of inputs is generated together: their decode steps run as one batch
 * (tm__gen_run_many, tm_batch). Generation is generation_task.c's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pipelines.h"
#include "../core/status.h"

/* transformers.js's isChat: an array whose items are all objects with role and content. */
static int is_chat(const tm_json *v) {
    if (v->type != TM_JSON_ARRAY) return 0;
    for (int i = 0; i < v->n; i++)
        if (v->items[i].type != TM_JSON_OBJECT || !tm_json_get(&v->items[i], "role") ||
            !tm_json_get(&v->items[i], "content"))
            return 0;
    return 1;
}

/* tokenizer_encode_kwargs.add_special_tokens ?? add_special_tokens ?? (tokenizer
 * add_bos_token || add_eos_token) ?? false */
static tm_status add_special_default(const tm_pipeline *p, const tm_json *options, int *out, tm_error *err) {
    const char *cfg = tm_tokenizer_config_json(p->tok);
    tm_json *j = cfg ? tm_json_parse(cfg, strlen(cfg)) : NULL;
    const tm_json *b = tm_json_get(j, "add_bos_token"), *e = tm_json_get(j, "add_eos_token");
    int dflt = (b && b->type == TM_JSON_BOOL && b->number) || (e && e->type == TM_JSON_BOOL && e->number);
    tm_json_free(j);
    tm_status s = tm__opt_bool(options, "add_special_tokens", dflt, out, err);
    /* a text's tokenizer call takes tokenizer_encode_kwargs over it */
    const tm_json *kwargs = tm_json_get(options, "tokenizer_encode_kwargs");
    if (!s && kwargs && kwargs->type == TM_JSON_OBJECT) s = tm__opt_bool(kwargs, "add_special_tokens", *out, out, err);
    return s;
}

/* An option of the chat template: tokenizer_encode_kwargs' key first, then the call's. */
static const tm_json *chat_option(const tm_json *options, const char *key) {
    const tm_json *v = tm_json_get(tm_json_get(options, "tokenizer_encode_kwargs"), key);
    return v ? v : tm_json_get(options, key);
}

/* The template source: the option chat_template names one of the tokenizer's templates
 * (a list of them) or is the template itself; without it, the tokenizer's own. */
static tm_status template_source(const tm_pipeline *p, const tm_json *options, const char **src,
                                 tm_error *err) {
    const tm_json *name = chat_option(options, "chat_template");
    if (name && name->type != TM_JSON_NULL) {
        if (name->type != TM_JSON_STRING)
            return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "option chat_template must be a string");
        const char *config = tm_tokenizer_config_json(p->tok);
        tm_json *c = config ? tm_json_parse(config, strlen(config)) : NULL;
        const tm_json *t = tm_json_get(c, "chat_template");
        int is_list = t && t->type == TM_JSON_ARRAY;
        tm_json_free(c);
        const char *named = is_list ? tm_tokenizer_chat_template(p->tok, name->string) : NULL;
        *src = named ? named : name->string;
        return TM_OK;
    }
    *src = tm_tokenizer_chat_template(p->tok, NULL);
    if (!*src)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT,
                        "Cannot use apply_chat_template() because tokenizer.chat_template is not set and no "
                        "template argument was passed! (%s)", p->repo->source);
    return TM_OK;
}

/* The chat rendered as transformers.js's apply_chat_template: add_generation_prompt (true
 * here), the special tokens, tools and documents (null when not given) and the other keys
 * of tokenizer_encode_kwargs as variables. */
static tm_status render_chat(const tm_pipeline *p, const tm_json *chat, const tm_json *options, char **text,
                             tm_error *err) {
    static const char *const names[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                        "pad_token", "cls_token", "mask_token"};
    static const tm_special_role roles[] = {TM_SPECIAL_BOS, TM_SPECIAL_EOS, TM_SPECIAL_UNK, TM_SPECIAL_SEP,
                                            TM_SPECIAL_PAD, TM_SPECIAL_CLS, TM_SPECIAL_MASK};
    static const char *const taken[] = {"add_generation_prompt", "tools", "documents", "chat_template", "tokenize"};
    const char *src = NULL;
    int generation_prompt = 1;
    const tm_json *gp = chat_option(options, "add_generation_prompt");
    const tm_json *kwargs = tm_json_get(options, "tokenizer_encode_kwargs");
    if (kwargs && kwargs->type != TM_JSON_OBJECT && kwargs->type != TM_JSON_NULL)
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "option tokenizer_encode_kwargs must be an object");
    if (gp && gp->type != TM_JSON_NULL) {
        if (gp->type != TM_JSON_BOOL)
            return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "option add_generation_prompt must be true or false");
        generation_prompt = gp->number != 0;
    }
    tm_status s = template_source(p, options, &src, err);
    if (s) return s;
    tm__buf messages = {0}, vars = {0};
    tm__put_json(&messages, chat);
    tm__put(&vars, "{");
    for (size_t k = 0; k < sizeof roles / sizeof roles[0]; k++) {
        const char *t = tm_tokenizer_special_token(p->tok, roles[k], NULL);
        if (!t || tm_json_get(kwargs, names[k])) continue;
        tm__put_string(&vars, names[k]);
        tm__put(&vars, ":");
        tm__put_string(&vars, t);
        tm__put(&vars, ",");
    }
    for (int k = 1; k <= 2; k++) {
        const tm_json *v = chat_option(options, taken[k]);
        tm__put_string(&vars, taken[k]);
        tm__put(&vars, ":");
        if (v) tm__put_json(&vars, v);
        else tm__put(&vars, "null");
        tm__put(&vars, ",");
    }
    for (int i = 0; kwargs && kwargs->type == TM_JSON_OBJECT && i < kwargs->n; i++) {
        int skip = 0;
        for (size_t k = 0; k < sizeof taken / sizeof taken[0]; k++) skip |= !strcmp(kwargs->keys[i], taken[k]);
        if (skip) continue;
        tm__put_string(&vars, kwargs->keys[i]);
        tm__put(&vars, ":");
        tm__put_json(&vars, &kwargs->items[i]);
        tm__put(&vars, ",");
    }
    if (!vars.oom) vars.n--; /* the last comma (there is always "documents") */
    tm__put(&vars, "}");
    s = messages.oom || vars.oom ? tm__fail(err, TM_ERR_NO_MEMORY, "out of memory") : TM_OK;
    tm_chat_template *t = NULL;
    if (!s) s = tm_chat_template_create(src, strlen(src), &t, err);
    if (!s) s = tm_chat_template_render(t, messages.s, vars.s, generation_prompt, text, NULL, err);
    tm_chat_template_free(t);
    free(messages.s);
    free(vars.s);
    return s;
}

/* Bytes of s that make its first `units` UTF-16 code units (JavaScript's slice). */
static size_t utf16_prefix_bytes(const char *s, size_t units) {
    size_t at = 0;
    while (units && s[at]) {
        unsigned char c = (unsigned char)s[at];
        size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        size_t u = len == 4 ? 2 : 1;
        if (u > units) break;
        units -= u;
        for (size_t i = 0; i < len && s[at]; i++) at++;
    }
    return at;
}

static size_t utf16_length(const char *s) {
    size_t units = 0;
    for (const unsigned char *c = (const unsigned char *)s; *c; c++)
        if ((*c & 0xC0) != 0x80) units += *c >= 0xF0 ? 2 : 1;
    return units;
}

/* One input's prompt ids (a chat rendered by the template first). */
static tm_status prompt_ids(tm_pipeline *p, const tm_json *input, const tm_json *options,
                            int add_special, int32_t **ids, size_t *n, tm_error *err) {
    int chat = input->type != TM_JSON_STRING;
    char *rendered = NULL;
    tm_status s = chat ? render_chat(p, input, options, &rendered, err) : TM_OK;
    if (!s) s = tm__gen_encode(p, chat ? rendered : input->string, chat ? 0 : add_special, ids, n, err);
    free(rendered);
    return s;
}

/* One input's [{generated_text}, ...] (one per returned sequence) from its texts. */
static tm_status put_result(tm_pipeline *p, const tm_json *input, const int32_t *ids, size_t n,
                            char **texts, int k, int full_text, tm__buf *out, tm_error *err) {
    int chat = input->type != TM_JSON_STRING;
    char *prompt = NULL;
    tm_status s = TM_OK;
    /* the prompt's decoded text is cut by its length in UTF-16 units, as String.slice */
    if (!full_text && n) s = tm_tokenizer_decode(p->tok, ids, n, 1, -1, &prompt, NULL, err);
    size_t prompt_units = prompt ? utf16_length(prompt) : 0;
    if (!s) tm__put(out, "[");
    for (int i = 0; !s && i < k; i++) {
        const char *text = texts[i] + utf16_prefix_bytes(texts[i], prompt_units);
        tm__put(out, i ? ",{\"generated_text\":" : "{\"generated_text\":");
        if (chat) {
            tm__put(out, "[");
            for (int m = 0; m < input->n; m++) {
                tm__put_json(out, &input->items[m]);
                tm__put(out, ",");
            }
            tm__put(out, "{\"role\":\"assistant\",\"content\":");
            tm__put_string(out, text);
            tm__put(out, "}]");
        } else {
            tm__put_string(out, text);
        }
        tm__put(out, "}");
    }
    if (!s) tm__put(out, "]");
    free(prompt);
    return s;
}

/* The inputs (count of them, one unless batched) generated together (tm__gen_run_many:
 * a batch of sequences stepped as one) and their results, a list of them when batched. */
static tm_status generate(tm_pipeline *p, const tm_json *inputs, int count, int batched,
                          const tm_json *options, int add_special, int full_text, tm__buf *out,
                          tm_error *err) {
    int32_t **ids = calloc((size_t)count, sizeof *ids);
    size_t *n = calloc((size_t)count, sizeof *n);
    char ***texts = calloc((size_t)count, sizeof *texts);
    int *k = calloc((size_t)count, sizeof *k);
    tm_status s = ids && n && texts && k ? TM_OK : tm__fail(err, TM_ERR_NO_MEMORY, "out of memory");
    for (int i = 0; !s && i < count; i++) s = prompt_ids(p, &inputs[i], options, add_special, &ids[i], &n[i], err);
    tm_generation_config cfg;
    int cfg_made = 0;
    if (!s) s = tm__gen_config(p, options, 256, &cfg, err);
    cfg_made = !s;
    int ran = 0;
    if (!s) s = tm__gen_run_many(p, &cfg, ids, n, count, texts, k, err);
    ran = !s;
    if (!s && batched) tm__put(out, "[");
    for (int i = 0; !s && i < count; i++) {
        if (i) tm__put(out, ",");
        s = put_result(p, &inputs[i], ids[i], n[i], texts[i], k[i], full_text, out, err);
    }
    if (!s && batched) tm__put(out, "]");
    for (int i = 0; i < count; i++) {
        if (ran) tm__gen_texts_free(texts[i], k[i]);
        if (ids) free(ids[i]);
    }
    if (cfg_made) tm_generation_config_clear(&cfg);
    free(ids);
    free(n);
    free(texts);
    free(k);
    return s;
}

static tm_status call(tm_pipeline *p, const tm_json *inputs, const tm_json *options, tm__buf *out,
                      tm_error *err) {
    const tm_json *in = &inputs->items[0];
    int batched = 0, chat = 0;
    if (in->type == TM_JSON_STRING) {
        batched = 0;
    } else if (in->type == TM_JSON_ARRAY && in->n > 0 && in->items[0].type == TM_JSON_STRING) {
        for (int i = 0; i < in->n; i++)
            if (in->items[i].type != TM_JSON_STRING)
                return tm__fail(err, TM_ERR_INVALID_ARGUMENT, "text-generation: inputs[%d] is not a string", i);
        batched = 1;
    } else if (in->type == TM_JSON_ARRAY && in->n > 0 && is_chat(in)) {
        chat = 1;
    } else if (in->type == TM_JSON_ARRAY && in->n > 0) {
        for (int i = 0; i < in->n; i++)
            if (!is_chat(&in->items[i]))
                return tm__fail(err, TM_ERR_INVALID_ARGUMENT,
                                "Input must be a string, an array of strings, a Chat, or an array of Chats");
        batched = chat = 1;
    } else {
        return tm__fail(err, TM_ERR_INVALID_ARGUMENT,
                        "Input must be a string, an array of strings, a Chat, or an array of Chats");
    }
    int add_special, full_text;
    tm_status s = add_special_default(p, options, &add_special, err);
    if (!s) s = tm__opt_bool(options, "return_full_text", 1, &full_text, err);
    if (s) return s;
    if (chat) full_text = 0; /* the prompt is the messages: the reply is appended to them */
    /* validate the options before the first input runs */
    tm_generation_config cfg;
    if ((s = tm__gen_config(p, options, 256, &cfg, err))) return s;
    tm_generation_config_clear(&cfg);
    if (!batched) return generate(p, in, 1, 0, options, add_special, full_text, out, err);
    return generate(p, in->items, in->n, 1, options, add_special, full_text, out, err);
}

const tm__task tm__task_text_generation = {"text-generation", NULL, tm__gen_check, call, 0, 0, NULL};
