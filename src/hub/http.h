/* One HTTP request through libcurl, with the reply headers the Hub protocol needs parsed
 * (status, Location, ETag, X-Linked-Etag/-Size, X-Repo-Commit, X-Error-Code, Link) and the
 * body either kept in memory (API answers) or streamed to a sink (file downloads).
 * Not retries, caching or the Hub's rules: hub.c and download.c decide those. */
#ifndef TM_HUB_HTTP_H
#define TM_HUB_HTTP_H

#include <stddef.h>
#include <stdint.h>

/* What went wrong below HTTP: the request got no complete reply. */
typedef enum {
    TM_HTTP_NO_FAILURE = 0,
    TM_HTTP_CONNECT,              /* name not resolved, connection refused or unreachable */
    TM_HTTP_TIMEOUT,              /* no connection, or no data, within the timeout */
    TM_HTTP_CUT,                  /* the connection broke mid-reply */
    TM_HTTP_SINK,                 /* our sink refused the data (a write failed) */
    TM_HTTP_TOO_LARGE,            /* an in-memory body over its limit */
    TM_HTTP_OTHER                 /* TLS, protocol, out of memory: failure_text says */
} tm_http_failure;

typedef struct tm_http_reply {
    long status;                  /* of the last response; 0 when there was none */
    tm_http_failure failure;
    char failure_text[256];
    char *location;               /* headers of the last response, NULL when absent */
    char *etag;
    char *linked_etag;
    char *repo_commit;
    char *error_code;             /* X-Error-Code: RepoNotFound, GatedRepo, ... */
    char *error_message;
    char *content_range;
    char *link_next;              /* URL of the Link header's rel="next" */
    int64_t content_length;       /* -1 when absent */
    int64_t linked_size;          /* -1 when absent */
    char *body;                   /* in-memory body, NUL-terminated (no sink given) */
    size_t body_len;
} tm_http_reply;

/* Receives body bytes of the final response (never those of a redirect); reply holds its
 * status and headers. Returns 0 to abort the transfer (TM_HTTP_SINK). */
typedef int (*tm_http_sink)(void *user, const tm_http_reply *reply, const void *data, size_t n);

typedef struct tm_http_request {
    const char *url;
    const char *token;            /* sent as "Authorization: Bearer ..."; NULL for none */
    int head;                     /* HEAD instead of GET */
    int follow;                   /* follow redirects (downloads from a CDN) */
    int64_t range_from;           /* > 0: ask for the bytes from there on */
    long timeout;                 /* seconds to connect, and without data before giving up */
    long total_timeout;           /* seconds for the whole request; 0: none */
    size_t body_limit;            /* in-memory body cap when sink is NULL */
    tm_http_sink sink;
    void *sink_user;
} tm_http_request;

void tm_http_perform(const tm_http_request *rq, tm_http_reply *reply);
/* Frees the reply's strings and body and zeroes it. */
void tm_http_reply_clear(tm_http_reply *reply);
/* Percent-encodes s as Python's urllib.parse.quote does: unreserved bytes and, when
 * keep_slash, '/' stay as they are. NULL when out of memory. */
char *tm_http_quote(const char *s, int keep_slash);
/* Whether two absolute URLs name the same scheme, host and port. */
int tm_http_same_origin(const char *a, const char *b);
/* Whether a failure or a status is worth another try (a network hiccup, 429, 5xx). */
int tm_http_transient(const tm_http_reply *reply);

#endif
