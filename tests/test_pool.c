/* Stress test of the intra-op thread pool (src/backends/cpu/pool.c): many short jobs of
 * changing slice counts back to back, each job's state on the stack of a function that
 * returns right after, so a worker that claimed a slice of a finished job, or ran a
 * slice twice, or let a job end early, shows as a wrong count (or a crash). Then two
 * threads running jobs on one pool at once. Then the shares with stealing of claim.h,
 * on one thread and on the pool. Run under TSan by `make check-tsan`. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include "../src/backends/cpu/claim.h"
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


/* ---- claim.h's shares ----------------------------------------------------------------- */

#define MAX_UNITS 4096

/* On one thread: share `own` of n is handed out from its front in order, its pieces
 * contiguous, then the others' from their backs; every unit once; pieces start on align
 * (or where a share's front or start leaves them). */
static int shares_serial(int n, int64_t total, int64_t align, int own) {
    tm__share s[TM__SHARES_MAX];
    static unsigned char seen[MAX_UNITS];
    memset(seen, 0, sizeof seen);
    tm__shares_init(s, n, total, align);
    int64_t own_a = total * own / n / align * align;
    int64_t own_b = own + 1 == n ? total : total * (own + 1) / n / align * align;
    int64_t next_own = own_a, begin, end = 0;
    int ok = 1, pieces = 0;
    while ((begin = tm__claim_share(s, n, own, 2, align, &end)) >= 0) {
        if (begin >= end || end > total || ++pieces > 4 * MAX_UNITS) return 0;
        if (next_own < own_b) {   /* still in its own share */
            ok &= begin == next_own && (end % align == 0 || end == own_b);
            next_own = end;
        } else {
            ok &= begin % align == 0 || begin < own_a || begin >= own_b;
        }
        for (int64_t u = begin; u < end; u++) ok &= seen[u]++ == 0;
    }
    for (int64_t u = 0; u < total; u++) ok &= seen[u] == 1;
    return ok && next_own == own_b;
}

typedef struct share_job {
    tm__share s[TM__SHARES_MAX];
    int n;
    int64_t total;
    atomic_int seen[MAX_UNITS];
    atomic_int bad;
} share_job;

static void share_slice(void *arg, int ith, int nth) {
    share_job *j = arg;
    int64_t begin, end = 0;
    while ((begin = tm__claim_share(j->s, j->n, ith, 2, 2, &end)) >= 0) {
        if (begin >= end || end > j->total) {
            atomic_fetch_add(&j->bad, 1);
            return;
        }
        for (int64_t u = begin; u < end; u++) {
            volatile unsigned x = 0;
            for (unsigned i = 0; i < (unsigned)(u * 13 + ith * 31) % 61; i++) x += i;
            atomic_fetch_add(&j->seen[u], 1);
        }
    }
    (void)nth;
}

/* On the pool: every unit of every job claimed exactly once, whichever thread ran
 * which slice and stole what. */
static int shares_pool(tm_pool *p, int jobs) {
    static share_job j;
    int bad = 0;
    for (int t = 0; t < jobs; t++) {
        memset(&j, 0, sizeof j);
        j.n = 1 + t % 4;
        j.total = 1 + (t * 37) % 700;
        tm__shares_init(j.s, j.n, j.total, 2);
        tm_pool_run(p, j.n, share_slice, &j);
        int ok = atomic_load(&j.bad) == 0;
        for (int64_t u = 0; u < MAX_UNITS; u++) ok &= atomic_load(&j.seen[u]) == (u < j.total);
        bad += !ok;
    }
    return bad;
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
    int serial_bad = 0, cases = 0;
    for (int n = 1; n <= TM__SHARES_MAX; n++)
        for (int64_t total = 1; total <= 300; total += 7)
            for (int64_t align = 1; align <= 4; align *= 2)
                for (int own = 0; own < n; own++, cases++)
                    serial_bad += !shares_serial(n, total, align, own);
    CHECK(serial_bad == 0, "shares on one thread: %d of %d cases handed a unit twice, missed "
          "one, or broke a share's order or alignment", serial_bad, cases);
    CHECK(shares_serial(2, MAX_UNITS, 2, 1), "shares of %d units", MAX_UNITS);
    int pool_bad = shares_pool(p, 3000);
    CHECK(pool_bad == 0, "shares on a pool of 3: %d of 3000 jobs handed a unit twice or missed one",
          pool_bad);
    tm_pool_free(p);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
