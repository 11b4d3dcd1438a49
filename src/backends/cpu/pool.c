/* The intra-op thread pool (see pool.h): workers wait for a job number to change, first
 * with a short spin (back-to-back kernels hand work over without a sleep), then on a
 * condition variable, so an idle model costs no CPU. Not a scheduler: no queue, no stealing. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>
#include "pool.h"

/* About 10-50 microseconds of polling: long enough to bridge the gap between two kernels
 * of a plan, short enough not to matter when the pool goes idle. */
#define SPIN_ITERATIONS 2000

struct tm_pool {
    int n_threads;                /* caller included */
    pthread_t *workers;           /* n_threads - 1 */
    int n_started;
    pthread_mutex_t run_lock;     /* held by the thread whose job is running */
    pthread_mutex_t lock;         /* guards the sleeps below */
    pthread_cond_t wake, done;
    atomic_uint job;              /* incremented for each job (and to stop) */
    atomic_int pending;           /* workers that have not finished the current job */
    atomic_int stop;
    tm_pool_fn fn;                /* the current job: written before `job` is released */
    void *arg;
    int nth;
};

typedef struct worker_start {
    tm_pool *pool;
    int ith;
} worker_start;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

int tm_pool_online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

/* Waits until the job number differs from seen; returns the new one. */
static unsigned wait_for_job(tm_pool *p, unsigned seen) {
    for (int i = 0; i < SPIN_ITERATIONS; i++) {
        unsigned j = atomic_load_explicit(&p->job, memory_order_acquire);
        if (j != seen) return j;
        cpu_relax();
    }
    pthread_mutex_lock(&p->lock);
    unsigned j;
    while ((j = atomic_load_explicit(&p->job, memory_order_acquire)) == seen)
        pthread_cond_wait(&p->wake, &p->lock);
    pthread_mutex_unlock(&p->lock);
    return j;
}

static void *worker_main(void *start_arg) {
    worker_start *start = start_arg;
    tm_pool *p = start->pool;
    int ith = start->ith;
    free(start);
    unsigned seen = 0;
    for (;;) {
        seen = wait_for_job(p, seen);
        if (atomic_load(&p->stop)) return NULL;
        if (ith < p->nth) p->fn(p->arg, ith, p->nth);
        if (atomic_fetch_sub_explicit(&p->pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&p->lock);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->lock);
        }
    }
}

tm_pool *tm_pool_create(int threads) {
    if (threads <= 0) threads = tm_pool_online_cpus();
    if (threads <= 1) return NULL;
    tm_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->workers = calloc((size_t)threads - 1, sizeof *p->workers);
    if (!p->workers) {
        free(p);
        return NULL;
    }
    pthread_mutex_init(&p->run_lock, NULL);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    atomic_init(&p->job, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->stop, 0);
    for (int i = 0; i < threads - 1; i++) {
        worker_start *s = malloc(sizeof *s);
        if (!s) break;
        s->pool = p;
        s->ith = i + 1;
        if (pthread_create(&p->workers[i], NULL, worker_main, s) != 0) {
            free(s);
            break;
        }
        p->n_started++;
    }
    /* With fewer workers than asked the pool is smaller, not broken. */
    p->n_threads = p->n_started + 1;
    if (p->n_started == 0) {
        tm_pool_free(p);
        return NULL;
    }
    return p;
}

void tm_pool_free(tm_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->stop, 1);
    atomic_fetch_add_explicit(&p->job, 1, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->n_started; i++) pthread_join(p->workers[i], NULL);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->run_lock);
    free(p->workers);
    free(p);
}

int tm_pool_threads(const tm_pool *p) { return p ? p->n_threads : 1; }

static void run_inline(int nth, tm_pool_fn fn, void *arg) {
    for (int i = 0; i < nth; i++) fn(arg, i, nth);
}

void tm_pool_run(tm_pool *p, int max_threads, tm_pool_fn fn, void *arg) {
    int nth = tm_pool_threads(p);
    if (max_threads > 0 && max_threads < nth) nth = max_threads;
    if (!p || nth <= 1) {
        fn(arg, 0, 1);
        return;
    }
    if (pthread_mutex_trylock(&p->run_lock) != 0) {
        run_inline(nth, fn, arg);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    p->nth = nth;
    atomic_store_explicit(&p->pending, p->n_started, memory_order_relaxed);
    pthread_mutex_lock(&p->lock);
    atomic_fetch_add_explicit(&p->job, 1, memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    fn(arg, 0, nth);
    for (int i = 0; i < SPIN_ITERATIONS; i++) {
        if (atomic_load_explicit(&p->pending, memory_order_acquire) == 0) break;
        cpu_relax();
    }
    if (atomic_load_explicit(&p->pending, memory_order_acquire) != 0) {
        pthread_mutex_lock(&p->lock);
        while (atomic_load_explicit(&p->pending, memory_order_acquire) != 0)
            pthread_cond_wait(&p->done, &p->lock);
        pthread_mutex_unlock(&p->lock);
    }
    pthread_mutex_unlock(&p->run_lock);
}
