#include "thread/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

/* How an idle worker waits for the next job: SPIN_ITERS rounds of a pause
 * loop (a few microseconds: the gap between ops of one decode step), then
 * YIELD_ITERS rounds of sched_yield (cheap when the CPU is free, and lets a
 * thread that was preempted on a busy machine run sooner), then it sleeps
 * on the condition variable. */
#define SPIN_ITERS 4096
#define YIELD_ITERS 2000
/* The caller waiting for the workers to finish a job spins this long, then
 * yields between checks: on an oversubscribed machine a pure spin would
 * burn the time slice a descheduled worker needs. */
#define WAIT_SPIN_ITERS 2048
/* How long the caller, done with its own share of a job, lets a worker
 * that has not begun its share yet join before running that share itself:
 * a spinning worker joins within a microsecond of the job's start, and this
 * is several (about 7 us at 28 ns a pause). */
#define JOIN_GRACE_ITERS 256

struct thread_pool {
    int n;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_uint gen;     /* bumped once per job; workers wait for a change */
    atomic_int pending;  /* workers still running the current job */
    atomic_int sleepers; /* workers blocked on cv */
    /* per worker (index ith): the job it may join, SLOT(gen, state) with
     * state JOB_OPEN, JOB_JOINED or JOB_CLOSED (the caller finished its own
     * share before this worker began, and left it out: see run) */
    atomic_uint *slot;
    thread_pool_fn fn;
    void *ud;
    atomic_int quit;
};

enum { JOB_OPEN, JOB_JOINED, JOB_CLOSED };
#define SLOT(gen, state) ((((gen)&0x3FFFFFFFu) << 2) | (unsigned)(state))

typedef struct worker_arg {
    thread_pool *p;
    int ith;
} worker_arg;

/* One round of a spin-wait.  On aarch64 `isb` (a pipeline flush, tens of
 * cycles), not `yield`, which most Arm cores run as a no-op: without a
 * delay the grace and spin counts above would pass in a few hundred
 * nanoseconds there. */
static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("isb" ::: "memory");
#endif
}

static void *worker(void *arg) {
    worker_arg *wa = arg;
    thread_pool *p = wa->p;
    int ith = wa->ith;
    free(wa);
    unsigned seen = 0; /* gen starts at 0: a job posted before this thread ran is still seen */
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen) {
            if (++spins < SPIN_ITERS) {
                cpu_relax();
                continue;
            }
            if (spins < SPIN_ITERS + YIELD_ITERS) {
                sched_yield();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->quit)) pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
            spins = 0;
        }
        seen = g;
        if (atomic_load(&p->quit)) return NULL;
        /* join job g unless its caller closed it first; a newer job shows
         * as a changed gen on the next pass */
        unsigned open = SLOT(g, JOB_OPEN);
        if (!atomic_compare_exchange_strong_explicit(&p->slot[ith], &open, SLOT(g, JOB_JOINED), memory_order_acq_rel,
                                                     memory_order_relaxed))
            continue;
        p->fn(p->ud, ith, p->n);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    }
}

thread_pool *thread_pool_new(int n_threads) {
    if (n_threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = c > 0 ? (int)c : 1;
    }
    thread_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->threads = calloc((size_t)n_threads, sizeof(pthread_t));
    p->slot = calloc((size_t)n_threads, sizeof *p->slot);
    if (!p->threads || !p->slot) {
        free(p->threads);
        free(p->slot);
        free(p);
        return NULL;
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (!wa) {
            p->n = i;
            thread_pool_free(p);
            return NULL;
        }
        wa->p = p;
        wa->ith = i;
        if (pthread_create(&p->threads[i], NULL, worker, wa) != 0) {
            free(wa);
            p->n = i;
            thread_pool_free(p);
            return NULL;
        }
    }
    return p;
}

void thread_pool_free(thread_pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->quit, 1);
    atomic_fetch_add(&p->gen, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n; i++) pthread_join(p->threads[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->threads);
    free(p->slot);
    free(p);
}

int thread_pool_size(const thread_pool *p) { return p->n; }

static void run(thread_pool *p, thread_pool_fn fn, void *ud, int shared) {
    if (p->n == 1) {
        fn(ud, 0, 1);
        return;
    }
    p->fn = fn;
    p->ud = ud;
    atomic_store(&p->pending, p->n - 1);
    const unsigned g = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
    for (int i = 1; i < p->n; i++) atomic_store_explicit(&p->slot[i], SLOT(g, JOB_OPEN), memory_order_relaxed);
    atomic_fetch_add(&p->gen, 1); /* seq_cst: publishes the above; pairs with the sleepers check below */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    fn(ud, 0, p->n);
    /* Workers that have not begun: in a shared job the work is all taken,
     * so they are left out, not waited for.  Otherwise each gets a short
     * grace to join, then the caller takes its share (its ith) and runs it
     * itself: a worker descheduled by another process, or still waking,
     * would otherwise hold the caller for as long as it is away. */
    for (int i = 1; i < p->n; i++) {
        unsigned open = SLOT(g, JOB_OPEN);
        for (int spins = 0; !shared && spins < JOIN_GRACE_ITERS; spins++) {
            if (atomic_load_explicit(&p->slot[i], memory_order_relaxed) != open) break;
            cpu_relax();
        }
        if (!atomic_compare_exchange_strong_explicit(&p->slot[i], &open, SLOT(g, JOB_CLOSED), memory_order_acq_rel,
                                                     memory_order_relaxed))
            continue; /* it joined: waited for below */
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_relaxed);
        if (!shared) fn(ud, i, p->n);
    }
    for (int spins = 0; atomic_load_explicit(&p->pending, memory_order_acquire) > 0; spins++) {
        if (spins < WAIT_SPIN_ITERS)
            cpu_relax();
        else
            sched_yield();
    }
}

void thread_pool_run(thread_pool *p, thread_pool_fn fn, void *ud) { run(p, fn, ud, 0); }

void thread_pool_run_shared(thread_pool *p, thread_pool_fn fn, void *ud) { run(p, fn, ud, 1); }
