/* A thread pool for intra-op parallelism: one per model (tm_load_options.threads), shared
 * by its sessions and handed to kernels through tm_kcall. Idle workers sleep on a
 * condition variable after a short bounded spin. Not a task queue: one job at a time. */
#ifndef TM_BACKENDS_CPU_POOL_H
#define TM_BACKENDS_CPU_POOL_H

typedef struct tm_pool tm_pool;

/* One slice of a job: fn(arg, ith, nth) must do the ith of nth independent parts. */
typedef void (*tm_pool_fn)(void *arg, int ith, int nth);

/* A pool of `threads` threads in all, the caller of tm_pool_run included (so threads - 1
 * workers are started); threads <= 0 means the number of online CPUs. Returns NULL when
 * threads resolve to 1 or on failure: every function here accepts a NULL pool and then
 * runs the job on the calling thread. */
tm_pool *tm_pool_create(int threads);
void tm_pool_free(tm_pool *p);              /* joins the workers; NULL is a no-op */

/* Threads in the pool (1 for NULL). */
int tm_pool_threads(const tm_pool *p);

/* Runs fn(arg, ith, nth) for ith in [0, nth) and returns when all are done; nth is
 * min(max_threads, tm_pool_threads(p)) (max_threads <= 0: all). Each slice runs once, on
 * whichever thread claims it first, the caller included (so a worker the OS keeps waiting
 * delays nothing). If another thread is running a job on this pool (two sessions of one model at
 * once), the slices run one after another on the calling thread instead: the caller never
 * waits for someone else's job, and the result is the same since slices are independent.
 * Allocates nothing. */
void tm_pool_run(tm_pool *p, int max_threads, tm_pool_fn fn, void *arg);

/* As tm_pool_run with n_slices slices whatever the thread count: fn(arg, ith, n_slices)
 * for ith in [0, n_slices), each claimed by whichever thread is free. More slices than
 * threads balance the load when a thread is descheduled (a shared machine) or slices
 * differ in cost; n_slices < 1 counts as 1, and at most 65535 are made. Allocates
 * nothing. */
void tm_pool_run_n(tm_pool *p, int n_slices, tm_pool_fn fn, void *arg);

/* The number of online CPUs (at least 1). */
int tm_pool_online_cpus(void);

#endif
