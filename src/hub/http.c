/* HTTP over libcurl for the hub: one easy handle per request, reply headers parsed as they
 * arrive (reset at each status line, so only the last response of a redirect chain
 * counts), bodies to memory or to a sink. Not retries or Hub rules (hub.c, download.c). */
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <curl/curl.h>
#include "http.h"
#include "../../include/transmuter.h"

typedef struct transfer {
    const tm_http_request *rq;
    tm_http_reply *reply;
    size_t body_cap;
    int too_large;
} transfer;

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static int curl_ready;

/* curl_global_init is not thread-safe before libcurl 7.84: run it once, first. */
static void init_curl(void) { curl_ready = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK; }

static void clear_headers(tm_http_reply *r) {
    char **fields[] = {&r->location, &r->etag, &r->linked_etag, &r->repo_commit,
                       &r->error_code, &r->error_message, &r->content_range, &r->link_next};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        free(*fields[i]);
        *fields[i] = NULL;
    }
    r->content_length = -1;
    r->linked_size = -1;
}

void tm_http_reply_clear(tm_http_reply *r) {
    clear_headers(r);
    free(r->body);
    memset(r, 0, sizeof *r);
    r->content_length = -1;
    r->linked_size = -1;
}

static char *dup_span(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static int64_t parse_size(const char *s) {
    char *end;
    long long v = strtoll(s, &end, 10);
    return end != s && *end == '\0' && v >= 0 ? (int64_t)v : -1;
}

/* The URL of the rel="next" entry of a Link header (the Hub's pagination). */
static char *link_next(const char *v) {
    for (const char *p = v; (p = strchr(p, '<'));) {
        const char *close = strchr(p, '>');
        if (!close) return NULL;
        const char *next_entry = strchr(close, ',');
        const char *rel = strstr(close, "rel=\"next\"");
        if (rel && (!next_entry || rel < next_entry)) return dup_span(p + 1, (size_t)(close - p - 1));
        p = close;
    }
    return NULL;
}

static void set_header(tm_http_reply *r, const char *name, size_t name_len, const char *value) {
    static const struct { const char *name; size_t field; } strings[] = {
        {"location", offsetof(tm_http_reply, location)},
        {"etag", offsetof(tm_http_reply, etag)},
        {"x-linked-etag", offsetof(tm_http_reply, linked_etag)},
        {"x-repo-commit", offsetof(tm_http_reply, repo_commit)},
        {"x-error-code", offsetof(tm_http_reply, error_code)},
        {"x-error-message", offsetof(tm_http_reply, error_message)},
        {"content-range", offsetof(tm_http_reply, content_range)},
    };
    for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
        if (strlen(strings[i].name) != name_len || strncasecmp(name, strings[i].name, name_len))
            continue;
        char **slot = (char **)((char *)r + strings[i].field);
        free(*slot);
        *slot = dup_span(value, strlen(value));
        return;
    }
    if (name_len == 14 && !strncasecmp(name, "content-length", 14))
        r->content_length = parse_size(value);
    else if (name_len == 13 && !strncasecmp(name, "x-linked-size", 13))
        r->linked_size = parse_size(value);
    else if (name_len == 4 && !strncasecmp(name, "link", 4)) {
        free(r->link_next);
        r->link_next = link_next(value);
    }
}

static size_t on_header(char *line, size_t size, size_t count, void *user) {
    transfer *t = user;
    size_t n = size * count;
    if (n >= 5 && !strncmp(line, "HTTP/", 5)) {
        clear_headers(t->reply);
        const char *sp = memchr(line, ' ', n);
        t->reply->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        return n;
    }
    const char *colon = memchr(line, ':', n);
    if (!colon) return n;
    char value[4096];
    const char *v = colon + 1, *end = line + n;
    while (v < end && (*v == ' ' || *v == '\t')) v++;
    while (end > v && isspace((unsigned char)end[-1])) end--;
    size_t len = (size_t)(end - v) < sizeof value - 1 ? (size_t)(end - v) : sizeof value - 1;
    memcpy(value, v, len);
    value[len] = '\0';
    set_header(t->reply, line, (size_t)(colon - line), value);
    return n;
}

static int is_redirect(long status) { return status >= 300 && status < 400; }

static int keep_in_memory(transfer *t, const char *data, size_t n) {
    tm_http_reply *r = t->reply;
    if (r->body_len + n > t->rq->body_limit) {
        t->too_large = 1;
        return 0;
    }
    if (r->body_len + n + 1 > t->body_cap) {
        size_t cap = t->body_cap ? t->body_cap : 4096;
        while (cap < r->body_len + n + 1) cap *= 2;
        char *b = realloc(r->body, cap);
        if (!b) return 0;
        r->body = b;
        t->body_cap = cap;
    }
    memcpy(r->body + r->body_len, data, n);
    r->body_len += n;
    r->body[r->body_len] = '\0';
    return 1;
}

static size_t on_body(char *data, size_t size, size_t count, void *user) {
    transfer *t = user;
    size_t n = size * count;
    /* A redirect's own body is not the file. */
    if (is_redirect(t->reply->status)) return n;
    int ok = t->rq->sink ? t->rq->sink(t->rq->sink_user, t->reply, data, n)
                         : keep_in_memory(t, data, n);
    return ok ? n : 0;
}

static tm_http_failure classify(CURLcode code) {
    switch (code) {
    case CURLE_OK: return TM_HTTP_NO_FAILURE;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT: return TM_HTTP_CONNECT;
    case CURLE_OPERATION_TIMEDOUT: return TM_HTTP_TIMEOUT;
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM: return TM_HTTP_CUT;
    case CURLE_WRITE_ERROR: return TM_HTTP_SINK;
    default: return TM_HTTP_OTHER;
    }
}

static struct curl_slist *request_headers(const tm_http_request *rq) {
    char line[4200];
    struct curl_slist *h = NULL, *t;
    if (rq->token) {
        snprintf(line, sizeof line, "Authorization: Bearer %s", rq->token);
        if (!(t = curl_slist_append(h, line))) goto fail;
        h = t;
    }
    /* The Hub reports the size of the file itself only for an uncompressed reply. */
    if (!(t = curl_slist_append(h, "Accept-Encoding: identity"))) goto fail;
    h = t;
    if (rq->range_from > 0) {
        snprintf(line, sizeof line, "Range: bytes=%lld-", (long long)rq->range_from);
        if (!(t = curl_slist_append(h, line))) goto fail;
        h = t;
    }
    return h;
fail:
    curl_slist_free_all(h);
    return NULL;
}

static void configure(CURL *c, const tm_http_request *rq, transfer *t, struct curl_slist *h,
                      char *errbuf) {
    curl_easy_setopt(c, CURLOPT_URL, rq->url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "transmuter/" TM_VERSION_STRING);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    /* Only the web: a redirect must not reach file:// or other schemes. */
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(c, CURLOPT_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS, (long)(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(c, CURLOPT_NOBODY, rq->head ? 1L : 0L);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, rq->follow ? 1L : 0L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    /* Credentials stay with the host they were given for, whatever libcurl's version. */
    curl_easy_setopt(c, CURLOPT_UNRESTRICTED_AUTH, 0L);
    long timeout = rq->timeout > 0 ? rq->timeout : 10;
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, timeout);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, timeout);
    if (rq->total_timeout > 0) curl_easy_setopt(c, CURLOPT_TIMEOUT, rq->total_timeout);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, t);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, t);
}

static void fail(tm_http_reply *r, tm_http_failure f, const char *text) {
    r->failure = f;
    snprintf(r->failure_text, sizeof r->failure_text, "%s", text);
}

void tm_http_perform(const tm_http_request *rq, tm_http_reply *reply) {
    tm_http_reply_clear(reply);
    pthread_once(&curl_once, init_curl);
    CURL *c = curl_ready ? curl_easy_init() : NULL;
    struct curl_slist *h = c ? request_headers(rq) : NULL;
    if (!c || !h) {
        curl_easy_cleanup(c);
        fail(reply, TM_HTTP_OTHER, "cannot set up an HTTP request (out of memory?)");
        return;
    }
    char errbuf[CURL_ERROR_SIZE] = "";
    transfer t = {.rq = rq, .reply = reply};
    configure(c, rq, &t, h, errbuf);
    CURLcode code = curl_easy_perform(c);
    if (code != CURLE_OK) {
        reply->failure = t.too_large ? TM_HTTP_TOO_LARGE : classify(code);
        snprintf(reply->failure_text, sizeof reply->failure_text, "%s",
                 errbuf[0] ? errbuf : curl_easy_strerror(code));
    }
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
}

char *tm_http_quote(const char *s, int keep_slash) {
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(s);
    char *out = malloc(3 * n + 1), *o = out;
    if (!out) return NULL;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (isalnum(*p) || strchr("_.-~", *p) || (keep_slash && *p == '/')) {
            *o++ = (char)*p;
            continue;
        }
        *o++ = '%';
        *o++ = hex[*p >> 4];
        *o++ = hex[*p & 15];
    }
    *o = '\0';
    return out;
}

static int origin_of(const char *url, char **scheme, char **host, char **port) {
    CURLU *u = curl_url();
    int ok = u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
             curl_url_get(u, CURLUPART_SCHEME, scheme, 0) == CURLUE_OK &&
             curl_url_get(u, CURLUPART_HOST, host, 0) == CURLUE_OK &&
             curl_url_get(u, CURLUPART_PORT, port, CURLU_DEFAULT_PORT) == CURLUE_OK;
    curl_url_cleanup(u);
    return ok;
}

int tm_http_same_origin(const char *a, const char *b) {
    char *sa = NULL, *ha = NULL, *pa = NULL, *sb = NULL, *hb = NULL, *pb = NULL;
    int same = origin_of(a, &sa, &ha, &pa) && origin_of(b, &sb, &hb, &pb) &&
               !strcasecmp(sa, sb) && !strcasecmp(ha, hb) && !strcmp(pa, pb);
    curl_free(sa);
    curl_free(ha);
    curl_free(pa);
    curl_free(sb);
    curl_free(hb);
    curl_free(pb);
    return same;
}

int tm_http_transient(const tm_http_reply *r) {
    if (r->failure == TM_HTTP_CONNECT || r->failure == TM_HTTP_TIMEOUT || r->failure == TM_HTTP_CUT)
        return 1;
    if (r->failure != TM_HTTP_NO_FAILURE) return 0;
    return r->status == 429 || r->status == 500 || r->status == 502 || r->status == 503 ||
           r->status == 504;
}
