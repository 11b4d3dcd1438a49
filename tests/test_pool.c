/* Stress test of the intra-op thread pool (src/backends/cpu/pool.c): many short jobs of
 * changing slice counts back to back, each job's state on the stack of a function that
 * returns right after, so a worker that claimed a slice of a finished job, or ran a
 * slice twice, or let a job end early, shows as a wrong count (or a crash). Then two
 * threads running jobs on one pool at once. Run under TSan by `make check-tsan`. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include "../src/backends/cpu/pool.h"

#include "check.h"

#define MAX_N 64

typedef struct job {
    atomic_int ran[MAX_N];
    atomic_int outside;        /* slices called with a wrong nth or ith */
    int nth;
    unsigned spin;
} job;

static void slice(void *arg, int ith, int nth) {
    job *j = arg;
    if (nth != j->nth || ith < 0 || ith >= nth) {
        atomic_fetch_add(&j->outside, 1);
        return;
    }
    /* A little work of varying length, so that threads interleave differently. */
    volatile unsigned x = 0;
    for (unsigned i = 0; i < (j->spin + (unsigned)ith * 7) % 97; i++) x += i;
    atomic_fetch_add(&j->ran[ith], 1);
}

/* One job of n slices; returns 1 when every slice ran exactly once. */
static int one_job(tm_pool *p, int n, unsigned spin) {
    job j;
    memset(&j, 0, sizeof j);
    j.nth = n;
    j.spin = spin;
    tm_pool_run_n(p, n, slice, &j);
    int ok = atomic_load(&j.outside) == 0;
    for (int i = 0; i < MAX_N; i++) ok &= atomic_load(&j.ran[i]) == (i < n);
    return ok;
}

static const int counts[] = {1, 4, 16, 2, 3, 64, 5, 1, 8, 13, 2, 40, 7};

typedef struct runner {
    tm_pool *pool;
    int jobs, bad;
    unsigned seed;
} runner;

static void *run_jobs(void *arg) {
    runner *r = arg;
    for (int t = 0; t < r->jobs; t++) {
        int n = counts[(unsigned)t * 7 % (sizeof counts / sizeof counts[0])];
        r->bad += !one_job(r->pool, n, r->seed + (unsigned)t);
    }
    return NULL;
}

int main(void) {
    tm_pool *p = tm_pool_create(3);
    CHECK(p && tm_pool_threads(p) == 3, "a pool of 3 threads");
    runner solo = {p, 200000, 0, 1};
    run_jobs(&solo);
    CHECK(solo.bad == 0, "%d of %d jobs of changing slice counts ran a slice twice, missed "
          "one or ran one of another job", solo.bad, solo.jobs);
    /* Two callers at once: the second runs its slices itself while the first's job runs. */
    runner a = {p, 20000, 0, 3}, b = {p, 20000, 0, 5};
    pthread_t t;
    pthread_create(&t, NULL, run_jobs, &b);
    run_jobs(&a);
    pthread_join(t, NULL);
    CHECK(a.bad == 0 && b.bad == 0, "two callers on one pool: %d and %d bad jobs", a.bad, b.bad);
    /* No pool: slices on the calling thread, in order. */
    CHECK(one_job(NULL, 9, 0), "slices without a pool");
    tm_pool_free(p);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
