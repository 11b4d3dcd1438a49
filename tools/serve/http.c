/* transmuter serve's HTTP layer on libmicrohttpd (Debian's libmicrohttpd-dev): a thread per
 * connection (a handler may wait for its batch or generation), HTTP/1.1 keep-alive,
 * chunked bodies for server-sent events, the body limit, metrics per answered request. The
 * only file that knows the library: requests and responses are tools/serve/serve.h's. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>
#include <microhttpd.h>
#include "serve.h"

struct serve_http {
    serve_server *s;
    struct MHD_Daemon *daemon;
    atomic_long in_flight;
    int port;
};

typedef struct conn_state {
    tm__buf body;
    int too_large;
    double start;
    const char *route;
    int status;
} conn_state;

static int client_gone(void *ctx) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(ctx, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 0;
    struct pollfd p = {.fd = ci->connect_fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

static ssize_t read_stream(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    ssize_t n = tm__serve_stream_read(cls, buf, max);
    return n < 0 ? MHD_CONTENT_READER_END_OF_STREAM : n;
}

static void free_stream(void *cls) { tm__serve_stream_free(cls); }

static enum MHD_Result answer(serve_http *h, struct MHD_Connection *c, conn_state *cs, const char *url,
                              const char *method) {
    serve_request rq = {0};
    char path[2048];
    size_t n = strcspn(url, "?");
    if (n >= sizeof path) n = sizeof path - 1;
    memcpy(path, url, n);
    path[n] = 0;
    rq.method = method;
    rq.path = path;
    rq.body = cs->body.s ? cs->body.s : "";
    rq.body_len = cs->body.n;
    rq.body_too_large = cs->too_large;
    rq.authorization = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    rq.inference_header_length = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Inference-Header-Content-Length");
    rq.gone = client_gone;
    rq.gone_ctx = c;
    serve_response rs;
    tm__serve_handle(h->s, &rq, &rs);
    cs->route = rs.route;
    cs->status = rs.status;
    struct MHD_Response *r = NULL;
    if (rs.stream) {
        r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, read_stream, rs.stream, free_stream);
        if (r) {
            rs.stream = NULL;   /* the response owns it now */
        } else {
            tm__serve_stream_free(rs.stream);
            rs.stream = NULL;
            tm__serve_error(&rs, SURFACE_OPENAI, 500, "out of memory");
            cs->status = 500;
        }
    }
    if (!r) {
        size_t len = rs.body.n;
        char *body = rs.body.s;
        rs.body.s = NULL;
        r = MHD_create_response_from_buffer(len, body ? body : (char *)"", body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
        if (!r) free(body);
    }
    if (!r) {
        tm__serve_response_clear(&rs);
        return MHD_NO;
    }
    if (rs.content_type) MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, rs.content_type);
    if (rs.content_type && !strcmp(rs.content_type, "text/event-stream")) {
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        MHD_add_response_header(r, "X-Accel-Buffering", "no");
    }
    if (rs.retry_after > 0) {
        char v[16];
        snprintf(v, sizeof v, "%d", rs.retry_after);
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    if (rs.status == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (rs.json_length) {
        char v[24];
        snprintf(v, sizeof v, "%zu", rs.json_length);
        MHD_add_response_header(r, "Inference-Header-Content-Length", v);
    }
    if (atomic_load(&h->s->draining) || cs->too_large) MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)rs.status, r);
    MHD_destroy_response(r);
    tm__serve_response_clear(&rs);
    return ok;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload_data, size_t *upload_size,
                                  void **state) {
    serve_http *h = cls;
    (void)version;
    conn_state *cs = *state;
    if (!cs) {
        cs = calloc(1, sizeof *cs);
        if (!cs) return MHD_NO;
        cs->start = tm__serve_now();
        *state = cs;
        atomic_fetch_add(&h->in_flight, 1);
        const char *len = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (len && strtoull(len, NULL, 10) > h->s->opt.max_body) {
            /* A client waiting for "100 Continue" is answered at once and sends no body;
             * others are read to the end (and not kept) so that they get the answer: one
             * closed under a client still sending can end in a reset that loses it. */
            cs->too_large = 1;
            const char *expect = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);
            if (expect && !strcasecmp(expect, "100-continue")) return answer(h, c, cs, url, method);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cs->too_large && cs->body.n + *upload_size > h->s->opt.max_body) {
            cs->too_large = 1;
            free(cs->body.s);
            memset(&cs->body, 0, sizeof cs->body);
        }
        if (!cs->too_large) tm__put_len(&cs->body, upload_data, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (cs->status) return MHD_YES;   /* answered already (413 at the first call) */
    if (cs->body.oom) {
        cs->too_large = 1;
        free(cs->body.s);
        memset(&cs->body, 0, sizeof cs->body);
    }
    return answer(h, c, cs, url, method);
}

static void on_done(void *cls, struct MHD_Connection *c, void **state, enum MHD_RequestTerminationCode why) {
    serve_http *h = cls;
    conn_state *cs = *state;
    (void)c;
    (void)why;
    if (!cs) return;
    if (cs->route) tm__serve_metrics_request(h->s->metrics, cs->route, cs->status, tm__serve_now() - cs->start);
    free(cs->body.s);
    free(cs);
    *state = NULL;
    atomic_fetch_sub(&h->in_flight, 1);
}

serve_http *tm__serve_http_start(serve_server *s, tm_error *err) {
    serve_http *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err->message, sizeof err->message, "out of memory");
        return NULL;
    }
    h->s = s;
    struct sockaddr_in v4 = {0};
    struct sockaddr_in6 v6 = {0};
    const struct sockaddr *addr;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG;
    if (inet_pton(AF_INET, s->opt.host, &v4.sin_addr) == 1) {
        v4.sin_family = AF_INET;
        v4.sin_port = htons((uint16_t)s->opt.port);
        addr = (const struct sockaddr *)&v4;
    } else if (inet_pton(AF_INET6, s->opt.host, &v6.sin6_addr) == 1) {
        v6.sin6_family = AF_INET6;
        v6.sin6_port = htons((uint16_t)s->opt.port);
        addr = (const struct sockaddr *)&v6;
        flags |= MHD_USE_IPv6;
    } else {
        snprintf(err->message, sizeof err->message, "--host %s: not an IPv4 or IPv6 address", s->opt.host);
        free(h);
        return NULL;
    }
    h->daemon = MHD_start_daemon(flags, (uint16_t)s->opt.port, NULL, NULL, on_request, h,
                                 MHD_OPTION_SOCK_ADDR, addr,
                                 MHD_OPTION_NOTIFY_COMPLETED, on_done, h,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)1024,
                                 MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)300,
                                 MHD_OPTION_END);
    if (!h->daemon) {
        snprintf(err->message, sizeof err->message, "cannot listen on %s port %d", s->opt.host, s->opt.port);
        free(h);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
    h->port = di ? di->port : s->opt.port;
    return h;
}

int tm__serve_http_port(const serve_http *h) { return h->port; }

void tm__serve_http_quiesce(serve_http *h) {
    MHD_socket fd = MHD_quiesce_daemon(h->daemon);
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

long tm__serve_http_in_flight(const serve_http *h) { return atomic_load(&h->in_flight); }

void tm__serve_http_stop(serve_http *h) {
    if (!h) return;
    MHD_stop_daemon(h->daemon);
    free(h);
}
