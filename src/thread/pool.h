/*
 * pool — a fixed set of worker threads that run one parallel job at a time.
 *
 * thread_pool_run(fn) calls fn(ud, ith, nth) once for every ith < nth, the caller
 * doing ith 0, and returns when all are done.  A worker that has not begun
 * its call shortly after the caller finished its own (descheduled by
 * another process, or still waking) is left out and the caller makes that
 * call itself, so fn must not assume that calls with different ith run on
 * different threads or at the same time.  Between jobs the workers spin
 * briefly, then yield, before sleeping, so back-to-back jobs in the token
 * loop don't pay a wake-up each; the caller waiting for a job's end also
 * spins and then yields.  A pool is driven by one caller thread at a time.
 */
#ifndef KILN_POOL_H
#define KILN_POOL_H

typedef struct thread_pool thread_pool;
typedef void (*thread_pool_fn)(void *ud, int ith, int nth);

/* n_threads <= 0 picks the number of online CPUs. */
thread_pool *thread_pool_new(int n_threads);
void thread_pool_free(thread_pool *p);
int thread_pool_size(const thread_pool *p);
void thread_pool_run(thread_pool *p, thread_pool_fn fn, void *ud);
/* The same for a job whose threads draw its work from a shared counter, so
 * that any one call of fn may take all of it: when the caller's call
 * returns, workers that have not begun yet are left out at once and their
 * calls are not made at all. */
void thread_pool_run_shared(thread_pool *p, thread_pool_fn fn, void *ud);

/* Splits [0, n) evenly into nth parts; part ith is [*lo, *hi). */
static inline void thread_pool_range(long n, int ith, int nth, long *lo, long *hi) {
    long q = n / nth, r = n % nth;
    *lo = ith * q + (ith < r ? ith : r);
    *hi = *lo + q + (ith < r ? 1 : 0);
}

#endif
