/* OpenAI-compatible routes of transmuter serve: POST /v1/embeddings, /v1/chat/completions,
 * /v1/completions (streamed as server-sent events ending in "data: [DONE]") and GET
 * /v1/models; errors in OpenAI's {"error": {...}} shape. logprobs: the log-softmax of the
 * processed logits (the generation config's processors; before temperature and top_p) of
 * each chosen token and the most likely ones, read through tm_generator_set_logits_fn, in
 * each endpoint's format. Not implemented yet (refused with 400, never ignored): tools,
 * penalties, echo, suffix, best_of, dimensions. */
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

/* One choice's log-probabilities: the last step's row, and the items not yet sent (all of
 * them when not streaming), as JSON list items in the endpoint's format. */
typedef struct oa_lp {
    float *row;                 /* log-softmax of the processed scores, vocab floats */
    int64_t vocab;
    tm__buf content;            /* chat: {"token", "logprob", "bytes", "top_logprobs"} items */
    tm__buf tokens, lps, tops, offsets;   /* completions: the four parallel lists' items */
    size_t items;               /* items in the buffers */
    size_t offset;              /* completions: characters before the next token */
} oa_lp;

typedef struct oa_job {
    serve_gen_job job;          /* first: the scheduler's view */
    int chat, stream, include_usage;
    int logprobs, top_n;        /* logprobs asked; alternatives per token (0 to 20) */
    char id[48];
    char model[128];
    long created;
    tm__buf *texts;             /* per choice, when not streaming */
    const char **finish;
    oa_lp *lp;                  /* per choice when logprobs */
    size_t prompt_chars;        /* completions' text_offset starts after the prompt */
} oa_job;

static void free_oa_job(serve_gen_job *j) {
    oa_job *o = (oa_job *)j;
    for (int i = 0; i < j->n; i++) {
        if (j->gens) tm_generator_free(j->gens[i]);
        if (o->texts) free(o->texts[i].s);
        if (o->lp) {
            oa_lp *l = &o->lp[i];
            free(l->row);
            free(l->content.s);
            free(l->tokens.s);
            free(l->lps.s);
            free(l->tops.s);
            free(l->offsets.s);
        }
    }
    free(o->lp);
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

/* ---- logprobs ---- */

/* The generator's processed row at each step, kept as its log-softmax (computed in
 * doubles). A row with nothing finite is kept as it is. */
static void lp_hook(void *user, float *s, int64_t vocab, const int32_t *ids, size_t n) {
    (void)ids, (void)n;
    oa_lp *l = user;
    if (l->vocab != vocab) {
        float *r = realloc(l->row, (size_t)vocab * sizeof *r);
        if (!r) return;   /* the step then records nothing */
        l->row = r;
        l->vocab = vocab;
    }
    float mx = -INFINITY;
    for (int64_t v = 0; v < vocab; v++)
        if (s[v] > mx) mx = s[v];
    double sum = 0;
    if (isfinite(mx))
        for (int64_t v = 0; v < vocab; v++) sum += exp((double)s[v] - mx);
    double lse = isfinite(mx) ? mx + log(sum) : 0;
    for (int64_t v = 0; v < vocab; v++) l->row[v] = (float)(s[v] - lse);
}

/* The text a token adds after prev (both decoded, special tokens kept, no cleanup: the
 * difference), else the token decoded alone. *out malloc'ed. */
static int token_piece(const serve_model *m, int32_t prev, int32_t tok, char **out, size_t *len) {
    int32_t two[2] = {prev, tok};
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    if (prev >= 0 && tm_tokenizer_decode(m->tok, two, 1, 0, 0, &a, &na, NULL) == TM_OK &&
        tm_tokenizer_decode(m->tok, two, 2, 0, 0, &b, &nb, NULL) == TM_OK && nb >= na && !memcmp(a, b, na)) {
        memmove(b, b + na, nb - na + 1);
        free(a);
        *out = b, *len = nb - na;
        return 0;
    }
    free(a);
    free(b);
    if (tm_tokenizer_decode(m->tok, &tok, 1, 0, 0, out, len, NULL) != TM_OK) return -1;
    return 0;
}

static size_t utf8_chars(const char *s, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

/* A log-probability as JSON: -inf (a banned token) as OpenAI's floor, -9999. */
static void put_lp(tm__buf *b, float v) { tm__put_number(b, isfinite(v) ? v : -9999.0); }

/* {"token", "logprob", "bytes"} of a chat entry (without its closing brace). */
static void put_chat_token(tm__buf *b, const char *t, size_t n, float lp) {
    tm__put(b, "{\"token\":");
    tm__serve_put_text(b, t, n);
    tm__put(b, ",\"logprob\":");
    put_lp(b, lp);
    tm__put(b, ",\"bytes\":[");
    for (size_t k = 0; k < n; k++) {
        if (k) tm__put(b, ",");
        tm__put_int(b, (unsigned char)t[k]);
    }
    tm__put(b, "]");
}

static int is_eos_token(const serve_model *m, int32_t t) {
    for (int i = 0; i < m->gen.n_eos_token_ids; i++)
        if (m->gen.eos_token_ids[i] == t) return 1;
    return 0;
}

/* After each step (the worker, outside the lock): the chosen token's log-probability and
 * the top_n best as the endpoint's list items. The end token that ends a sequence is not a
 * token of the text: OpenAI lists none for it. */
static void after_step(serve_gen_job *j, int i, int32_t token, int done) {
    oa_job *o = (oa_job *)j;
    oa_lp *l = &o->lp[i];
    if (!l->row || token < 0 || token >= l->vocab || (done && is_eos_token(j->m, token))) return;
    const int32_t *ids = NULL;
    size_t n = 0;
    if (tm_generator_sequence(j->gens[i], 0, &ids, &n, NULL) != TM_OK || n == 0) return;
    int32_t prev = n >= 2 ? ids[n - 2] : -1;
    /* the top_n best, best first (ties: the lower id) */
    int32_t top[20];
    int k = 0;
    for (int64_t v = 0; v < l->vocab && o->top_n > 0; v++) {
        float x = l->row[v];
        if (!isfinite(x) || (k == o->top_n && x <= l->row[top[k - 1]])) continue;
        int at = k < o->top_n ? k++ : k - 1;
        while (at > 0 && l->row[top[at - 1]] < x) {
            top[at] = top[at - 1];
            at--;
        }
        top[at] = (int32_t)v;
    }
    char *t = NULL;
    size_t tn = 0;
    if (token_piece(j->m, prev, token, &t, &tn)) return;
    float lp = l->row[token];
    if (o->chat) {
        tm__buf *b = &l->content;
        if (l->items) tm__put(b, ",");
        put_chat_token(b, t, tn, lp);
        tm__put(b, ",\"top_logprobs\":[");
        for (int a = 0; a < k; a++) {
            char *u = NULL;
            size_t un = 0;
            if (token_piece(j->m, prev, top[a], &u, &un)) continue;
            if (a) tm__put(b, ",");
            put_chat_token(b, u, un, l->row[top[a]]);
            tm__put(b, "}");
            free(u);
        }
        tm__put(b, "]}");
    } else {
        const char *sep = l->items ? "," : "";
        tm__put(&l->tokens, sep);
        tm__serve_put_text(&l->tokens, t, tn);
        tm__put(&l->lps, sep);
        put_lp(&l->lps, lp);
        tm__put(&l->offsets, sep);
        tm__put_int(&l->offsets, (int64_t)(o->prompt_chars + l->offset));
        l->offset += utf8_chars(t, tn);
        tm__put(&l->tops, sep);
        tm__put(&l->tops, "{");
        for (int a = 0; a < k; a++) {
            char *u = NULL;
            size_t un = 0;
            if (token_piece(j->m, prev, top[a], &u, &un)) continue;
            if (a) tm__put(&l->tops, ",");
            tm__serve_put_text(&l->tops, u, un);
            tm__put(&l->tops, ":");
            put_lp(&l->tops, l->row[top[a]]);
            free(u);
        }
        tm__put(&l->tops, "}");
    }
    l->items++;
    free(t);
}

static void put_list(tm__buf *b, const char *key, tm__buf *items, int clear) {
    tm__put(b, key);
    tm__put(b, "[");
    if (items->s) tm__put_len(b, items->s, items->n);
    tm__put(b, "]");
    if (clear) items->n = 0;
}

/* "logprobs": the choice's items (and, streaming, forgets them: each chunk has its own). */
static void put_logprobs(oa_job *o, int i, tm__buf *b, int clear) {
    tm__put(b, ",\"logprobs\":");
    if (!o->logprobs || !o->lp) {
        tm__put(b, "null");
        return;
    }
    oa_lp *l = &o->lp[i];
    if (o->chat) {
        put_list(b, "{\"content\":", &l->content, clear);
        tm__put(b, ",\"refusal\":null}");
    } else {
        put_list(b, "{\"tokens\":", &l->tokens, clear);
        put_list(b, ",\"token_logprobs\":", &l->lps, clear);
        put_list(b, ",\"top_logprobs\":", &l->tops, clear);
        put_list(b, ",\"text_offset\":", &l->offsets, clear);
        tm__put(b, "}");
    }
    if (clear) l->items = 0;
}

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
    put_logprobs(o, index, b, 1);
    tm__put(b, ",\"finish_reason\":");
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
    int logprobs, top_n;
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
    static const char *keys[] = {"tools", "functions", "tool_choice",
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

/* Chat: logprobs true or false, top_logprobs 0 to 20 with it. Completions: logprobs 0 to 5,
 * the alternatives per token (OpenAI's legacy form). */
static int read_logprobs(const tm_json *body, int chat, gen_params *p, serve_response *rs) {
    int64_t top = 0;
    if (chat) {
        const tm_json *t = tm_json_get(body, "top_logprobs");
        if (get_bool(body, "logprobs", &p->logprobs, rs) || get_int(body, "top_logprobs", 0, 20, &top, rs)) return -1;
        if (t && t->type != TM_JSON_NULL && !p->logprobs) {
            ERR(400, "'top_logprobs' needs 'logprobs': true");
            return -1;
        }
    } else {
        const tm_json *v = tm_json_get(body, "logprobs");
        if (v && v->type != TM_JSON_NULL) {
            if (get_int(body, "logprobs", 0, 5, &top, rs)) return -1;
            p->logprobs = 1;
        }
    }
    p->top_n = (int)top;
    return 0;
}

static int read_params(serve_server *s, const tm_json *body, int chat, gen_params *p, serve_response *rs) {
    memset(p, 0, sizeof *p);
    p->max_tokens = -1;
    p->temperature = p->top_p = -1;
    int64_t n = 1;
    if (refuse_unsupported(body, rs) || read_logprobs(body, chat, p, rs)) return -1;
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
    o->logprobs = p->logprobs;
    o->top_n = p->top_n;
    o->created = (long)time(NULL);
    snprintf(o->id, sizeof o->id, "%s-%ld", chat ? "chatcmpl" : "cmpl", atomic_fetch_add(&s->next_id, 1));
    snprintf(o->model, sizeof o->model, "%s", m->name);
    j->gens = calloc((size_t)p->n, sizeof *j->gens);
    o->texts = calloc((size_t)p->n, sizeof *o->texts);
    o->finish = calloc((size_t)p->n, sizeof *o->finish);
    if (!j->gens || !o->texts || !o->finish) goto oom;
    if (p->logprobs) {
        o->lp = calloc((size_t)p->n, sizeof *o->lp);
        if (!o->lp) goto oom;
        j->after_step = after_step;
    }
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
        if (st == TM_OK && o->lp) st = tm_generator_set_logits_fn(j->gens[i], lp_hook, &o->lp[i], &err);
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
        put_logprobs(o, i, b, 0);
        tm__put(b, ",\"finish_reason\":");
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
    if (!m || read_params(s, body, chat, &p, rs)) goto done;
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
    if (!chat) o->prompt_chars = utf8_chars(text, strlen(text));
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
