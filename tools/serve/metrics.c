/* transmuter serve's metrics in Prometheus' text format: requests by route and status, a
 * latency histogram per route, the queue's depth, encoder batch sizes, prompt and
 * generated tokens. Counters only grow; one lock guards them (a few per request). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "serve.h"

static const double latency_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
enum { N_LATENCY = sizeof latency_bounds / sizeof *latency_bounds };
static const double batch_bounds[] = {1, 2, 4, 8, 16, 32, 64, 128};
enum { N_BATCH = sizeof batch_bounds / sizeof *batch_bounds };
enum { MAX_ROUTES = 32, MAX_COUNTS = 128 };

typedef struct route_stats {
    const char *route;
    unsigned long buckets[N_LATENCY];   /* cumulative when written out, not here */
    unsigned long count;
    double sum;
} route_stats;

struct serve_metrics {
    pthread_mutex_t lock;
    struct { const char *route; int status; unsigned long n; } counts[MAX_COUNTS];
    int n_counts;
    route_stats routes[MAX_ROUTES];
    int n_routes;
    unsigned long batch_buckets[N_BATCH], batch_count, batch_sum;
    unsigned long gen_buckets[N_BATCH], gen_count, gen_sum;   /* sequences per decode step */
    unsigned long prompt_tokens, generated_tokens;
};

serve_metrics *tm__serve_metrics_new(void) {
    serve_metrics *m = calloc(1, sizeof *m);
    if (m) pthread_mutex_init(&m->lock, NULL);
    return m;
}

void tm__serve_metrics_free(serve_metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->lock);
    free(m);
}

/* Routes are static strings of the router: compared by address. */
void tm__serve_metrics_request(serve_metrics *m, const char *route, int status, double seconds) {
    if (!m || !route) return;
    pthread_mutex_lock(&m->lock);
    int i = 0;
    while (i < m->n_counts && (m->counts[i].route != route || m->counts[i].status != status)) i++;
    if (i == m->n_counts && i < MAX_COUNTS) {
        m->counts[i].route = route;
        m->counts[i].status = status;
        m->n_counts++;
    }
    if (i < m->n_counts) m->counts[i].n++;
    int r = 0;
    while (r < m->n_routes && m->routes[r].route != route) r++;
    if (r == m->n_routes && r < MAX_ROUTES) m->routes[m->n_routes++].route = route;
    if (r < m->n_routes) {
        route_stats *rs = &m->routes[r];
        for (int b = 0; b < N_LATENCY; b++)
            if (seconds <= latency_bounds[b]) {
                rs->buckets[b]++;
                break;
            }
        rs->count++;
        rs->sum += seconds;
    }
    pthread_mutex_unlock(&m->lock);
}

/* One observation of a batch-size histogram (its buckets, count and sum), under the lock. */
static void observe_size(serve_metrics *m, unsigned long *buckets, unsigned long *count,
                         unsigned long *sum, size_t n) {
    if (!m) return;
    pthread_mutex_lock(&m->lock);
    for (int b = 0; b < N_BATCH; b++)
        if ((double)n <= batch_bounds[b]) {
            buckets[b]++;
            break;
        }
    (*count)++;
    *sum += n;
    pthread_mutex_unlock(&m->lock);
}

void tm__serve_metrics_batch(serve_metrics *m, size_t inputs) {
    if (m) observe_size(m, m->batch_buckets, &m->batch_count, &m->batch_sum, inputs);
}

void tm__serve_metrics_gen_step(serve_metrics *m, size_t rows) {
    if (m) observe_size(m, m->gen_buckets, &m->gen_count, &m->gen_sum, rows);
}

void tm__serve_metrics_tokens(serve_metrics *m, size_t prompt, size_t generated) {
    if (!m) return;
    pthread_mutex_lock(&m->lock);
    m->prompt_tokens += prompt;
    m->generated_tokens += generated;
    pthread_mutex_unlock(&m->lock);
}

static void put_fmt(tm__buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put_fmt(tm__buf *b, const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0) tm__put_len(b, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

/* A batch-size histogram in Prometheus text (cumulative buckets). */
static void put_sizes(tm__buf *out, const char *name, const char *help, const unsigned long *buckets,
                      unsigned long count, unsigned long sum) {
    put_fmt(out, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    unsigned long cum = 0;
    for (int b = 0; b < N_BATCH; b++) {
        cum += buckets[b];
        put_fmt(out, "%s_bucket{le=\"%g\"} %lu\n", name, batch_bounds[b], cum);
    }
    put_fmt(out, "%s_bucket{le=\"+Inf\"} %lu\n%s_sum %lu\n%s_count %lu\n", name, count, name, sum,
            name, count);
}

void tm__serve_metrics_render(serve_server *s, tm__buf *out) {
    serve_metrics *m = s->metrics;
    size_t depth = tm__serve_queue_depth(s);
    pthread_mutex_lock(&m->lock);
    tm__put(out, "# HELP transmuter_requests_total HTTP requests answered, by route and status.\n"
                 "# TYPE transmuter_requests_total counter\n");
    for (int i = 0; i < m->n_counts; i++)
        put_fmt(out, "transmuter_requests_total{route=\"%s\",status=\"%d\"} %lu\n", m->counts[i].route,
                m->counts[i].status, m->counts[i].n);
    tm__put(out, "# HELP transmuter_request_seconds Time from a request's arrival to the end of its answer.\n"
                 "# TYPE transmuter_request_seconds histogram\n");
    for (int r = 0; r < m->n_routes; r++) {
        const route_stats *rs = &m->routes[r];
        unsigned long cum = 0;
        for (int b = 0; b < N_LATENCY; b++) {
            cum += rs->buckets[b];
            put_fmt(out, "transmuter_request_seconds_bucket{route=\"%s\",le=\"%g\"} %lu\n", rs->route,
                    latency_bounds[b], cum);
        }
        put_fmt(out, "transmuter_request_seconds_bucket{route=\"%s\",le=\"+Inf\"} %lu\n", rs->route, rs->count);
        put_fmt(out, "transmuter_request_seconds_sum{route=\"%s\"} %.6f\n", rs->route, rs->sum);
        put_fmt(out, "transmuter_request_seconds_count{route=\"%s\"} %lu\n", rs->route, rs->count);
    }
    tm__put(out, "# HELP transmuter_queue_depth Inputs and sequences queued or running.\n"
                 "# TYPE transmuter_queue_depth gauge\n");
    put_fmt(out, "transmuter_queue_depth %zu\n", depth);
    put_sizes(out, "transmuter_batch_size", "Inputs per encoder batch.", m->batch_buckets,
              m->batch_count, m->batch_sum);
    put_sizes(out, "transmuter_generation_batch_size",
              "Sequences per decode step of a model (continuous batching).", m->gen_buckets,
              m->gen_count, m->gen_sum);
    tm__put(out, "# HELP transmuter_prompt_tokens_total Prompt tokens of generation requests.\n"
                 "# TYPE transmuter_prompt_tokens_total counter\n");
    put_fmt(out, "transmuter_prompt_tokens_total %lu\n", m->prompt_tokens);
    tm__put(out, "# HELP transmuter_generated_tokens_total Tokens generated (rate() of it: tokens/s).\n"
                 "# TYPE transmuter_generated_tokens_total counter\n");
    put_fmt(out, "transmuter_generated_tokens_total %lu\n", m->generated_tokens);
    pthread_mutex_unlock(&m->lock);
}
