/* The intra-op thread pool (see pool.h): workers wait for a job number to change, first
 * with a short spin (back-to-back kernels hand work over without a sleep), then on a
 * condition variable, so an idle model costs no CPU. Slices of a job are claimed, not assigned,
 * so a descheduled worker delays nobody. Not a scheduler: one job at a time, no queue. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "pool.h"

/* How long a thread polls before it sleeps: long enough to bridge the gap between two
 * parallel kernels of a plan with small serial ones between them (a decoder layer's
 * rotary embedding and attention, ~50 us: a worker asleep by then wakes late, and the
 * caller did most of the next GEMV alone), short enough not to matter once the pool is
 * idle. By the clock, not a count of pause instructions, whose length differs tenfold
 * between CPUs. */
#define SPIN_NS 200000
/* ... and with more threads than CPUs, where a polling thread takes the CPU of the one
 * it waits for: about the old 2000 pauses. */
#define SPIN_NS_OVERSUBSCRIBED 20000

struct tm_pool {
    int n_threads;                /* caller included */
    long spin_ns;                 /* how long a thread polls before it sleeps */
    pthread_t *workers;           /* n_threads - 1 */
    int n_started;
    pthread_mutex_t run_lock;     /* held by the thread whose job is running */
    pthread_mutex_t lock;         /* guards the sleeps below */
    pthread_cond_t wake, done;
    /* The job number (high 32 bits), its slice count (the next 16) and its next unclaimed
     * slice (low 16): one word, so a worker that wakes late can only claim a slice of the
     * job it saw, judged by that job's own count, never one of the next job. */
    _Atomic uint64_t claim;
    atomic_int finished;          /* slices of the current job done */
    atomic_int caller_sleeping;
    atomic_int stop;
    tm_pool_fn fn;                /* the current job: written before `claim` is released, */
    void *arg;                    /* read only after a slice of it was claimed */
};

typedef struct worker_start {
    tm_pool *pool;
} worker_start;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* A poll loop's budget: spin_more pauses once and says whether to go on polling (it
 * reads the clock every 64 calls). */
typedef struct spin {
    long budget_ns;
    int polls;
    struct timespec until;
} spin;

static int spin_more(spin *s) {
    cpu_relax();
    if (++s->polls % 64) return 1;
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (s->polls == 64) {
        long ns = t.tv_nsec + s->budget_ns;
        s->until.tv_sec = t.tv_sec + ns / 1000000000L;
        s->until.tv_nsec = ns % 1000000000L;
        return 1;
    }
    return t.tv_sec < s->until.tv_sec || (t.tv_sec == s->until.tv_sec && t.tv_nsec < s->until.tv_nsec);
}

int tm_pool_online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : (int)n;
}

/* Slices of one job at most: the claim word's field. */
#define MAX_SLICES 0xffff

static unsigned job_of(uint64_t claim) { return (unsigned)(claim >> 32); }
static int slices_of(uint64_t claim) { return (int)((claim >> 16) & MAX_SLICES); }
static int slice_of(uint64_t claim) { return (int)(claim & MAX_SLICES); }

/* Waits until the job number differs from seen; returns the new one. */
static unsigned wait_for_job(tm_pool *p, unsigned seen) {
    spin sp = {p->spin_ns, 0, {0, 0}};
    do {
        unsigned j = job_of(atomic_load_explicit(&p->claim, memory_order_acquire));
        if (j != seen || atomic_load(&p->stop)) return j;
    } while (spin_more(&sp));
    pthread_mutex_lock(&p->lock);
    unsigned j;
    while ((j = job_of(atomic_load_explicit(&p->claim, memory_order_acquire))) == seen &&
           !atomic_load(&p->stop))
        pthread_cond_wait(&p->wake, &p->lock);
    pthread_mutex_unlock(&p->lock);
    return j;
}

/* Claims and runs slices of job `job` until none is left. Slices go to whoever asks
 * first, so a worker the OS has not scheduled yet delays nobody: the caller takes its
 * share. */
static void run_slices(tm_pool *p, unsigned job) {
    for (;;) {
        uint64_t v = atomic_load_explicit(&p->claim, memory_order_acquire);
        int nth = slices_of(v);
        if (job_of(v) != job || slice_of(v) >= nth) return;
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &v, v + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        /* The job cannot end before this slice is counted: fn and arg stay valid. */
        p->fn(p->arg, slice_of(v), nth);
        /* Sequentially consistent with the caller's store to caller_sleeping and its
         * load of finished: one of the two sides sees the other. */
        if (atomic_fetch_add(&p->finished, 1) + 1 == nth && atomic_load(&p->caller_sleeping)) {
            pthread_mutex_lock(&p->lock);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->lock);
        }
    }
}

static void *worker_main(void *start_arg) {
    worker_start *start = start_arg;
    tm_pool *p = start->pool;
    free(start);
    unsigned seen = 0;
    for (;;) {
        seen = wait_for_job(p, seen);
        if (atomic_load(&p->stop)) return NULL;
        run_slices(p, seen);
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
    atomic_init(&p->claim, 0);
    atomic_init(&p->finished, 0);
    atomic_init(&p->caller_sleeping, 0);
    atomic_init(&p->stop, 0);
    p->spin_ns = threads > tm_pool_online_cpus() ? SPIN_NS_OVERSUBSCRIBED : SPIN_NS;   /* before any worker reads it */
    for (int i = 0; i < threads - 1; i++) {
        worker_start *s = malloc(sizeof *s);
        if (!s) break;
        s->pool = p;
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
    tm_pool_run_n(p, nth, fn, arg);
}

void tm_pool_run_n(tm_pool *p, int n_slices, tm_pool_fn fn, void *arg) {
    int nth = n_slices < 1 ? 1 : n_slices > MAX_SLICES ? MAX_SLICES : n_slices;
    if (!p || nth == 1) {
        run_inline(nth, fn, arg);
        return;
    }
    if (pthread_mutex_trylock(&p->run_lock) != 0) {
        run_inline(nth, fn, arg);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store_explicit(&p->finished, 0, memory_order_relaxed);
    unsigned job = job_of(atomic_load(&p->claim)) + 1;
    pthread_mutex_lock(&p->lock);
    atomic_store_explicit(&p->claim, (uint64_t)job << 32 | (uint64_t)nth << 16,
                          memory_order_release);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    run_slices(p, job);
    spin sp = {p->spin_ns, 0, {0, 0}};
    while (atomic_load_explicit(&p->finished, memory_order_acquire) != nth && spin_more(&sp)) {
    }
    if (atomic_load_explicit(&p->finished, memory_order_acquire) != nth) {
        pthread_mutex_lock(&p->lock);
        atomic_store(&p->caller_sleeping, 1);
        while (atomic_load(&p->finished) != nth)
            pthread_cond_wait(&p->done, &p->lock);
        atomic_store(&p->caller_sleeping, 0);
        pthread_mutex_unlock(&p->lock);
    }
    pthread_mutex_unlock(&p->run_lock);
}
