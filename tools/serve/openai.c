/* OpenAI-compatible routes of transmuter serve: POST /v1/embeddings, /v1/chat/completions,
 * /v1/completions (streamed as server-sent events ending in "data: [DONE]") and GET
 * /v1/models; errors in OpenAI's {"error": {...}} shape. Not implemented yet (refused with
 * 400, never ignored): logprobs, tools, penalties, echo, suffix, best_of, dimensions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "serve.h"

#define ERR(status, ...) tm__serve_error(rs, SURFACE_OPENAI, status, __VA_ARGS__)

/* ---- GET /v1/models --------------------------------------------------------------------- */

static void list_models(serve_server *s, const serve_request *rq, serve_response *rs) {
    if (strcmp(rq->method, "GET")) {
        ERR(405, "/v1/models takes GET");
        return;
    }
    tm__buf *b = &rs->body;
    tm__put(b, "{\"object\":\"list\",\"data\":[");
    for (int i = 0; i < s->n_models; i++) {
        char line[96];
        if (i) tm__put(b, ",");
        tm__put(b, "{\"id\":");
        tm__put_string(b, s->models[i].name);
        snprintf(line, sizeof line, ",\"object\":\"model\",\"created\":%ld,\"owned_by\":\"transmuter\"}", s->started);
        tm__put(b, line);
    }
    tm__put(b, "]}");
    rs->status = 200;
    rs->content_type = "application/json";
}

/* ---- POST /v1/embeddings ------------------------------------------------------------------- */

static void put_base64(tm__buf *b, const unsigned char *p, size_t n) {
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char four[4];
    tm__put(b, "\"");
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        four[0] = abc[v >> 18 & 63];
        four[1] = abc[v >> 12 & 63];
        four[2] = i + 1 < n ? abc[v >> 6 & 63] : '=';
        four[3] = i + 2 < n ? abc[v & 63] : '=';
        tm__put_len(b, four, 4);
    }
    tm__put(b, "\"");
}

/* Tokens of each text as the model sees them (special tokens in, cut at its maximum). */
static size_t count_tokens(const serve_model *m, const char *const *texts, size_t n) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        tm_encoding *e = NULL;
        if (tm_tokenizer_encode(m->tok, texts[i], strlen(texts[i]), NULL, 0, NULL, &e, NULL) != TM_OK) continue;
        size_t k = tm_encoding_n(e);
        if (m->max_context > 0 && (int64_t)k > m->max_context) k = (size_t)m->max_context;
        total += k;
        tm_encoding_free(e);
    }
    return total;
}

static serve_model *model_for(serve_server *s, const tm_json *body, int caps, const char *what,
                              serve_response *rs) {
    const tm_json *name = tm_json_get(body, "model");
    if (!name || name->type != TM_JSON_STRING) {
        ERR(400, "'model' must be given as a string");
        return NULL;
    }
    serve_model *m = tm__serve_find_model(s, name->string, caps);
    if (!m) {
        if (tm__serve_find_model(s, name->string, ~0)) ERR(400, "the model '%s' cannot serve %s", name->string, what);
        else ERR(404, "the model '%s' does not exist", name->string);
    }
    return m;
}

static void embeddings(serve_server *s, const serve_request *rq, serve_response *rs) {
    tm_json *body = tm__serve_parse_body(rq, rs, SURFACE_OPENAI);
    if (!body) return;
    serve_batch_job job;
    memset(&job, 0, sizeof job);
    const char **texts = NULL;
    size_t n = 0;
    int base64 = 0;
    const tm_json *fmt = tm_json_get(body, "encoding_format"), *dims = tm_json_get(body, "dimensions");
    serve_model *m = model_for(s, body, SERVE_EMBED, "embeddings", rs);
    if (!m) goto done;
    if (fmt && !(fmt->type == TM_JSON_STRING && (!strcmp(fmt->string, "float") || !strcmp(fmt->string, "base64")))) {
        ERR(400, "'encoding_format' must be \"float\" or \"base64\"");
        goto done;
    }
    base64 = fmt && !strcmp(fmt->string, "base64");
    if (dims && dims->type != TM_JSON_NULL) {
        ERR(400, "'dimensions' is not supported");
        goto done;
    }
    if (tm__serve_texts(tm_json_get(body, "input"), "input", s, rs, SURFACE_OPENAI, &texts, &n)) goto done;
    job.m = m;
    job.options = "{\"pooling\":\"auto\"}";
    job.texts = texts;
    job.n = n;
    int rc = tm__serve_batch_run(s, &job, rq);
    if (tm__serve_batch_status(rc, &job, rs, SURFACE_OPENAI)) goto done;
    size_t tokens = count_tokens(m, texts, n);
    tm__buf *b = &rs->body;
    tm__put(b, "{\"object\":\"list\",\"data\":[");
    for (size_t i = 0; i < n; i++) {
        const float *row = job.vectors + i * (size_t)job.dim;
        if (i) tm__put(b, ",");
        tm__put(b, "{\"object\":\"embedding\",\"index\":");
        tm__put_int(b, (int64_t)i);
        tm__put(b, ",\"embedding\":");
        if (base64) {
            put_base64(b, (const unsigned char *)row, (size_t)job.dim * sizeof(float));   /* little-endian f32 */
        } else {
            tm__put(b, "[");
            for (int k = 0; k < job.dim; k++) {
                if (k) tm__put(b, ",");
                tm__put_number(b, row[k]);
            }
            tm__put(b, "]");
        }
        tm__put(b, "}");
    }
    tm__put(b, "],\"model\":");
    tm__put_string(b, m->name);
    tm__put(b, ",\"usage\":{\"prompt_tokens\":");
    tm__put_int(b, (int64_t)tokens);
    tm__put(b, ",\"total_tokens\":");
    tm__put_int(b, (int64_t)tokens);
    tm__put(b, "}}");
    rs->status = 200;
    rs->content_type = "application/json";
done:
    free(job.vectors);
    free(job.json);
    free(texts);
    tm_json_free(body);
}

/* ---- POST /v1/chat/completions and /v1/completions ---------------------------------------------- */

typedef struct oa_job {
    serve_gen_job job;          /* first: the scheduler's view */
    int chat, stream, include_usage;
    char id[48];
    char model[128];
    long created;
    tm__buf *texts;             /* per choice, when not streaming */
    const char **finish;
} oa_job;

static void free_oa_job(serve_gen_job *j) {
    oa_job *o = (oa_job *)j;
    for (int i = 0; i < j->n; i++) {
        if (j->gens) tm_generator_free(j->gens[i]);
        if (o->texts) free(o->texts[i].s);
    }
    for (int i = 0; i < j->n_stops; i++) free(j->stops[i]);
    free(j->stops);
    free(j->gens);
    free(j->seq_done);
    free(j->seq_sent);
    free(j->seq_started);
    free(j->seq_row);
    free(j->out.s);
    free(o->texts);
    free(o->finish);
    free(o);
}

static void chunk_head(oa_job *o, tm__buf *b) {
    char line[96];
    tm__put(b, "data: {\"id\":");
    tm__put_string(b, o->id);
    tm__put(b, o->chat ? ",\"object\":\"chat.completion.chunk\"" : ",\"object\":\"text_completion\"");
    snprintf(line, sizeof line, ",\"created\":%ld,\"model\":", o->created);
    tm__put(b, line);
    tm__put_string(b, o->model);
}

static void put_usage(tm__buf *b, const serve_gen_job *j) {
    tm__put(b, "\"usage\":{\"prompt_tokens\":");
    tm__put_int(b, (int64_t)j->prompt_tokens);
    tm__put(b, ",\"completion_tokens\":");
    tm__put_int(b, (int64_t)j->completion_tokens);
    tm__put(b, ",\"total_tokens\":");
    tm__put_int(b, (int64_t)(j->prompt_tokens + j->completion_tokens));
    tm__put(b, "}");
}

/* The finish reasons OpenAI's clients know: an interrupted sequence ran out of its time. */
static const char *finish_reason(const char *f) { return !strcmp(f, "stop") ? "stop" : "length"; }

static void emit(serve_gen_job *j, int index, const char *text, size_t len, const char *finish) {
    oa_job *o = (oa_job *)j;
    if (!o->stream) {
        if (index < 0) return;
        if (text) tm__put_len(&o->texts[index], text, len);
        if (finish) o->finish[index] = finish_reason(finish);
        return;
    }
    tm__buf *b = &j->out;
    if (index < 0) {
        if (j->timed_out || j->failed) {
            tm__put(b, "data: {\"error\":{\"message\":");
            tm__put_string(b, j->failed ? j->message : "the request timed out");
            tm__put(b, j->failed ? ",\"type\":\"server_error\",\"param\":null,\"code\":null}}\n\n" :
                                   ",\"type\":\"timeout\",\"param\":null,\"code\":null}}\n\n");
        }
        if (o->include_usage) {
            chunk_head(o, b);
            tm__put(b, ",\"choices\":[],");
            put_usage(b, j);
            tm__put(b, "}\n\n");
        }
        tm__put(b, "data: [DONE]\n\n");
        return;
    }
    chunk_head(o, b);
    tm__put(b, ",\"choices\":[{\"index\":");
    tm__put_int(b, index);
    if (o->chat) {
        tm__put(b, ",\"delta\":{");
        if (text) {
            tm__put(b, "\"content\":");
            tm__serve_put_text(b, text, len);
        }
        tm__put(b, "}");
    } else {
        tm__put(b, ",\"text\":");
        tm__serve_put_text(b, text ? text : "", text ? len : 0);
    }
    tm__put(b, ",\"logprobs\":null,\"finish_reason\":");
    if (finish) tm__put_string(b, finish_reason(finish));
    else tm__put(b, "null");
    tm__put(b, "}]");
    if (o->include_usage) tm__put(b, ",\"usage\":null");
    tm__put(b, "}\n\n");
}

typedef struct gen_params {
    int64_t max_tokens;         /* -1: the model's default */
    double temperature, top_p;  /* -1: not given */
    int64_t seed;
    int has_seed;
    int n, stream, include_usage;
    const tm_json *stop;
} gen_params;

static int get_number(const tm_json *body, const char *key, double lo, double hi, double *out, serve_response *rs) {
    const tm_json *v = tm_json_get(body, key);
    if (!v || v->type == TM_JSON_NULL) return 0;
    if (v->type != TM_JSON_NUMBER || !(v->number >= lo && v->number <= hi)) {
        ERR(400, "'%s' must be a number from %g to %g", key, lo, hi);
        return -1;
    }
    *out = v->number;
    return 0;
}

static int get_int(const tm_json *body, const char *key, double lo, double hi, int64_t *out, serve_response *rs) {
    const tm_json *v = tm_json_get(body, key);
    if (!v || v->type == TM_JSON_NULL) return 0;
    if (v->type != TM_JSON_NUMBER || !(v->number >= lo && v->number <= hi) || v->number != floor(v->number)) {
        ERR(400, "'%s' must be an integer from %.0f to %.0f", key, lo, hi);
        return -1;
    }
    *out = (int64_t)v->number;
    return 0;
}

static int get_bool(const tm_json *body, const char *key, int *out, serve_response *rs) {
    const tm_json *v = tm_json_get(body, key);
    if (!v || v->type == TM_JSON_NULL) return 0;
    if (v->type != TM_JSON_BOOL) {
        ERR(400, "'%s' must be true or false", key);
        return -1;
    }
    *out = v->number != 0;
    return 0;
}

/* Parameters given that we do not do yet are refused rather than ignored. */
static int refuse_unsupported(const tm_json *body, serve_response *rs) {
    static const char *keys[] = {"logprobs", "top_logprobs", "tools", "functions", "tool_choice",
                                 "function_call", "response_format", "echo", "suffix", "logit_bias"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        const tm_json *v = tm_json_get(body, keys[k]);
        if (v && v->type != TM_JSON_NULL && !(v->type == TM_JSON_BOOL && !v->number) &&
            !(v->type == TM_JSON_ARRAY && v->n == 0) && !(v->type == TM_JSON_OBJECT && v->n == 0)) {
            ERR(400, "'%s' is not supported yet", keys[k]);
            return -1;
        }
    }
    static const char *zeros[] = {"presence_penalty", "frequency_penalty"};
    for (size_t k = 0; k < 2; k++) {
        const tm_json *v = tm_json_get(body, zeros[k]);
        if (v && v->type != TM_JSON_NULL && !(v->type == TM_JSON_NUMBER && v->number == 0)) {
            ERR(400, "'%s' is not supported yet (only 0)", zeros[k]);
            return -1;
        }
    }
    int64_t best_of = 1;
    if (get_int(body, "best_of", 1, 1, &best_of, rs)) return -1;
    return 0;
}

static int read_params(serve_server *s, const tm_json *body, gen_params *p, serve_response *rs) {
    memset(p, 0, sizeof *p);
    p->max_tokens = -1;
    p->temperature = p->top_p = -1;
    int64_t n = 1;
    if (refuse_unsupported(body, rs)) return -1;
    if (get_int(body, "max_tokens", 1, s->opt.max_tokens, &p->max_tokens, rs) ||
        get_int(body, "max_completion_tokens", 1, s->opt.max_tokens, &p->max_tokens, rs) ||
        get_number(body, "temperature", 0, 2, &p->temperature, rs) ||
        get_number(body, "top_p", 0, 1, &p->top_p, rs) ||
        get_int(body, "n", 1, s->opt.max_n, &n, rs) ||
        get_bool(body, "stream", &p->stream, rs))
        return -1;
    if (p->top_p == 0) {
        ERR(400, "'top_p' must be above 0");
        return -1;
    }
    const tm_json *seed = tm_json_get(body, "seed");
    if (seed && seed->type != TM_JSON_NULL) {
        if (seed->type != TM_JSON_NUMBER || !(seed->number >= -9007199254740992.0 && seed->number <= 9007199254740992.0) ||
            seed->number != floor(seed->number)) {
            ERR(400, "'seed' must be an integer");
            return -1;
        }
        p->seed = (int64_t)seed->number;
        p->has_seed = 1;
    }
    p->n = (int)n;
    const tm_json *so = tm_json_get(body, "stream_options");
    if (so && so->type != TM_JSON_NULL) {
        if (so->type != TM_JSON_OBJECT || get_bool(so, "include_usage", &p->include_usage, rs)) {
            if (so->type != TM_JSON_OBJECT) ERR(400, "'stream_options' must be an object");
            return -1;
        }
    }
    const tm_json *stop = tm_json_get(body, "stop");
    if (stop && stop->type != TM_JSON_NULL) {
        int ok = stop->type == TM_JSON_STRING ? stop->len > 0 : stop->type == TM_JSON_ARRAY && stop->n <= 4;
        for (int i = 0; ok && stop->type == TM_JSON_ARRAY && i < stop->n; i++)
            ok = stop->items[i].type == TM_JSON_STRING && stop->items[i].len > 0;
        if (!ok) {
            ERR(400, "'stop' must be a non-empty string or an array of at most 4 of them");
            return -1;
        }
        p->stop = stop;
    }
    return 0;
}

/* The prompt's text: a chat rendered with the model's template, or the completion's prompt
 * (malloc'ed), and whether special tokens are added when it is encoded. */
static char *prompt_text(serve_model *m, const tm_json *body, int chat, int *add_special, serve_response *rs) {
    if (chat) {
        const tm_json *msgs = tm_json_get(body, "messages");
        if (!msgs || msgs->type != TM_JSON_ARRAY || msgs->n == 0) {
            ERR(400, "'messages' must be a non-empty array");
            return NULL;
        }
        for (int i = 0; i < msgs->n; i++) {
            const tm_json *role = tm_json_get(&msgs->items[i], "role");
            const tm_json *content = tm_json_get(&msgs->items[i], "content");
            if (msgs->items[i].type != TM_JSON_OBJECT || !role || role->type != TM_JSON_STRING ||
                (content && content->type != TM_JSON_STRING && content->type != TM_JSON_ARRAY &&
                 content->type != TM_JSON_NULL)) {
                ERR(400, "'messages'[%d] must be an object with a string 'role' and a string or array 'content'", i);
                return NULL;
            }
        }
        tm__buf js = {0};
        tm__put_json(&js, msgs);
        char *out = NULL;
        tm_error err;
        memset(&err, 0, sizeof err);
        tm_status st = js.oom ? TM_ERR_NO_MEMORY : tm_chat_template_render(m->tpl, js.s, m->chat_vars, 1, &out, NULL, &err);
        free(js.s);
        if (st != TM_OK) {
            ERR(400, "the chat template: %s", err.message[0] ? err.message : tm_status_name(st));
            return NULL;
        }
        *add_special = 0;
        return out;
    }
    const tm_json *prompt = tm_json_get(body, "prompt");
    if (prompt && prompt->type == TM_JSON_ARRAY && prompt->n == 1 && prompt->items[0].type == TM_JSON_STRING)
        prompt = &prompt->items[0];
    if (!prompt || prompt->type != TM_JSON_STRING) {
        ERR(400, "'prompt' must be a string (or an array of one string)");
        return NULL;
    }
    *add_special = m->add_special;
    char *out = strdup(prompt->string);
    if (!out) ERR(500, "out of memory");
    return out;
}

static uint64_t fresh_seed(serve_server *s) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ (uint64_t)ts.tv_sec << 30 ^ (uint64_t)atomic_fetch_add(&s->next_id, 1) << 17;
    x ^= x >> 31;
    x *= 0x9E3779B97F4A7C15ull;
    return x ^ (x >> 29);
}

static oa_job *make_job(serve_server *s, serve_model *m, const gen_params *p, const int32_t *ids, size_t n_ids,
                        int64_t max_new, int chat, serve_response *rs) {
    oa_job *o = calloc(1, sizeof *o);
    serve_gen_job *j = &o->job;
    if (!o) goto oom;
    j->m = m;
    j->n = p->n;
    j->emit = emit;
    j->prompt_tokens = n_ids;
    j->max_new = max_new;
    o->chat = chat;
    o->stream = p->stream;
    o->include_usage = p->include_usage;
    o->created = (long)time(NULL);
    snprintf(o->id, sizeof o->id, "%s-%ld", chat ? "chatcmpl" : "cmpl", atomic_fetch_add(&s->next_id, 1));
    snprintf(o->model, sizeof o->model, "%s", m->name);
    j->gens = calloc((size_t)p->n, sizeof *j->gens);
    o->texts = calloc((size_t)p->n, sizeof *o->texts);
    o->finish = calloc((size_t)p->n, sizeof *o->finish);
    if (!j->gens || !o->texts || !o->finish) goto oom;
    if (p->stop) {
        int k = p->stop->type == TM_JSON_STRING ? 1 : p->stop->n;
        j->stops = calloc((size_t)k, sizeof *j->stops);
        if (!j->stops) goto oom;
        for (int i = 0; i < k; i++) {
            j->stops[i] = strdup(p->stop->type == TM_JSON_STRING ? p->stop->string : p->stop->items[i].string);
            if (!j->stops[i]) goto oom;
            j->n_stops++;
        }
    }
    tm_generation_config cfg = m->gen;   /* lists shared: the generator copies them */
    cfg.max_new_tokens = max_new;
    cfg.num_beams = 1;
    cfg.num_return_sequences = 1;
    if (p->temperature == 0) {
        cfg.do_sample = 0;
    } else if (p->temperature > 0 || (p->top_p > 0 && p->top_p < 1)) {
        /* OpenAI's sampling: temperature and nucleus, no top-k. */
        cfg.do_sample = 1;
        cfg.top_k = 0;
        if (p->temperature > 0) cfg.temperature = p->temperature;
    }
    if (p->top_p > 0) cfg.top_p = p->top_p;
    uint64_t seed = p->has_seed ? (uint64_t)p->seed : fresh_seed(s);
    for (int i = 0; i < p->n; i++) {
        tm_error err;
        memset(&err, 0, sizeof err);
        cfg.seed = seed + (uint64_t)i;
        tm_status st = tm_generator_create(m->model, &cfg, m->tok, &j->gens[i], &err);
        if (st == TM_OK) st = tm_generator_append(j->gens[i], ids, n_ids, &err);
        if (st != TM_OK) {
            ERR(st == TM_ERR_INVALID_ARGUMENT ? 400 : 500, "%s", err.message[0] ? err.message : tm_status_name(st));
            free_oa_job(j);
            return NULL;
        }
    }
    if (o->stream && chat) {
        /* each choice's first chunk says who speaks */
        for (int i = 0; i < p->n; i++) {
            chunk_head(o, &j->out);
            tm__put(&j->out, ",\"choices\":[{\"index\":");
            tm__put_int(&j->out, i);
            tm__put(&j->out, ",\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]");
            if (o->include_usage) tm__put(&j->out, ",\"usage\":null");
            tm__put(&j->out, "}\n\n");
        }
    }
    return o;
oom:
    if (o) free_oa_job(j);
    ERR(500, "out of memory");
    return NULL;
}

static void put_completion(oa_job *o, tm__buf *b) {
    serve_gen_job *j = &o->job;
    char line[96];
    tm__put(b, "{\"id\":");
    tm__put_string(b, o->id);
    tm__put(b, o->chat ? ",\"object\":\"chat.completion\"" : ",\"object\":\"text_completion\"");
    snprintf(line, sizeof line, ",\"created\":%ld,\"model\":", o->created);
    tm__put(b, line);
    tm__put_string(b, o->model);
    tm__put(b, ",\"choices\":[");
    for (int i = 0; i < j->n; i++) {
        const tm__buf *t = &o->texts[i];
        if (i) tm__put(b, ",");
        tm__put(b, "{\"index\":");
        tm__put_int(b, i);
        if (o->chat) {
            tm__put(b, ",\"message\":{\"role\":\"assistant\",\"content\":");
            tm__serve_put_text(b, t->s ? t->s : "", t->n);
            tm__put(b, "}");
        } else {
            tm__put(b, ",\"text\":");
            tm__serve_put_text(b, t->s ? t->s : "", t->n);
        }
        tm__put(b, ",\"logprobs\":null,\"finish_reason\":");
        tm__put_string(b, o->finish[i] ? o->finish[i] : "stop");
        tm__put(b, "}");
    }
    tm__put(b, "],");
    put_usage(b, j);
    tm__put(b, "}");
}

static void generate(serve_server *s, const serve_request *rq, serve_response *rs, int chat) {
    tm_json *body = tm__serve_parse_body(rq, rs, SURFACE_OPENAI);
    if (!body) return;
    char *text = NULL;
    tm_encoding *enc = NULL;
    gen_params p;
    serve_model *m = model_for(s, body, chat ? SERVE_CHAT : SERVE_COMPLETE,
                               chat ? "chat completions (a decoder with a chat template)" : "completions", rs);
    if (!m || read_params(s, body, &p, rs)) goto done;
    int add_special = 0;
    if (!(text = prompt_text(m, body, chat, &add_special, rs))) goto done;
    tm_encode_options eo = tm_encode_options_default();
    eo.add_special_tokens = add_special;
    tm_error err;
    memset(&err, 0, sizeof err);
    if (tm_tokenizer_encode(m->tok, text, strlen(text), NULL, 0, &eo, &enc, &err) != TM_OK) {
        ERR(400, "the prompt: %s", err.message);
        goto done;
    }
    size_t n_ids = tm_encoding_n(enc);
    if (n_ids == 0) {
        ERR(400, "the prompt is empty");
        goto done;
    }
    int64_t room = m->max_context > 0 ? m->max_context - (int64_t)n_ids : s->opt.max_tokens;
    int64_t max_new = p.max_tokens > 0 ? p.max_tokens : m->gen.max_new_tokens;
    if (p.max_tokens < 0 && max_new > room) max_new = room;
    if (max_new > s->opt.max_tokens) max_new = s->opt.max_tokens;
    if (max_new < 1 || max_new > room) {
        ERR(400, "this model's maximum context length is %lld tokens; the prompt has %zu and %lld more were asked",
            (long long)m->max_context, n_ids, (long long)max_new);
        goto done;
    }
    oa_job *o = make_job(s, m, &p, tm_encoding_ids(enc), n_ids, max_new, chat, rs);
    if (!o) goto done;
    tm__serve_metrics_tokens(s->metrics, n_ids, 0);
    int rc = tm__serve_gen_submit(s, &o->job);
    if (rc) {
        free_oa_job(&o->job);
        if (rc == 429) ERR(429, "the queue is full: retry later");
        else ERR(503, "the server is shutting down");
        goto done;
    }
    if (p.stream) {
        rs->stream = tm__serve_gen_stream(s, &o->job, rq, free_oa_job);
        if (!rs->stream) {
            tm__serve_gen_cancel(s, &o->job);
            free_oa_job(&o->job);
            ERR(500, "out of memory");
            goto done;
        }
        rs->status = 200;
        rs->content_type = "text/event-stream";
        goto done;
    }
    rc = tm__serve_gen_wait(s, &o->job, rq);
    if (rc == 499) ERR(499, "the client closed the request");
    else if (rc == 504) ERR(504, "the request timed out");
    else if (o->job.failed) ERR(500, "%s", o->job.message);
    else {
        put_completion(o, &rs->body);
        rs->status = 200;
        rs->content_type = "application/json";
    }
    free_oa_job(&o->job);
done:
    tm_encoding_free(enc);
    free(text);
    tm_json_free(body);
}

void tm__serve_openai(serve_server *s, const serve_request *rq, serve_response *rs, const char *path) {
    if (!strcmp(path, "/v1/models")) {
        rs->route = "/v1/models";
        list_models(s, rq, rs);
    } else if (!strncmp(path, "/v1/models/", 11)) {
        rs->route = "/v1/models";
        serve_model *m = tm__serve_find_model(s, path + 11, ~0);
        if (!m) {
            ERR(404, "the model '%s' does not exist", path + 11);
            return;
        }
        char line[96];
        tm__put(&rs->body, "{\"id\":");
        tm__put_string(&rs->body, m->name);
        snprintf(line, sizeof line, ",\"object\":\"model\",\"created\":%ld,\"owned_by\":\"transmuter\"}", s->started);
        tm__put(&rs->body, line);
        rs->status = 200;
        rs->content_type = "application/json";
    } else if (!strcmp(path, "/v1/embeddings")) {
        rs->route = "/v1/embeddings";
        embeddings(s, rq, rs);
    } else if (!strcmp(path, "/v1/chat/completions")) {
        rs->route = "/v1/chat/completions";
        generate(s, rq, rs, 1);
    } else if (!strcmp(path, "/v1/completions")) {
        rs->route = "/v1/completions";
        generate(s, rq, rs, 0);
    } else {
        ERR(404, "no route %s %s", rq->method, path);
    }
}

#undef ERR
