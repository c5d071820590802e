/* The thread pool (src/thread).  thread_pool_run makes every call once, the
 * caller making those of workers that are not up in time (after the
 * workers fell asleep).  thread_pool_run_shared, whose threads draw items from a
 * shared counter, does every item once however late a worker starts or
 * draws, including workers left out because the caller took everything
 * before they woke, and the job after a shared one still makes every call.
 * Runs under ThreadSanitizer in the test script's TSan tier. */
#include "testutil.h"

#include "thread/pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ITEMS 257

typedef struct job {
    atomic_long next;
    atomic_int done[ITEMS];
    atomic_int calls[8]; /* calls of fn per thread index */
    int slow_worker;     /* workers that join sleep before drawing: the caller waits for them */
} job;

static void pause_us(long us) {
    struct timespec t = {0, us * 1000};
    nanosleep(&t, NULL);
}

static void draw_task(void *ud, int ith, int nth) {
    (void)nth;
    job *j = ud;
    atomic_fetch_add(&j->calls[ith], 1);
    if (ith > 0 && j->slow_worker) pause_us(200);
    for (long it; (it = atomic_fetch_add(&j->next, 1)) < ITEMS;) atomic_fetch_add(&j->done[it], 1);
}

static pthread_t g_by[8]; /* the thread that made call ith of the last range job */

/* A static split: call ith does its thread_pool_range part of the items. */
static void each_task(void *ud, int ith, int nth) {
    job *j = ud;
    atomic_fetch_add(&j->calls[ith], 1);
    g_by[ith] = pthread_self();
    long lo, hi;
    thread_pool_range(ITEMS, ith, nth, &lo, &hi);
    for (long i = lo; i < hi; i++) atomic_fetch_add(&j->done[i], 1);
}

static void reset(job *j, int slow) {
    atomic_store(&j->next, 0);
    for (int i = 0; i < ITEMS; i++) atomic_store(&j->done[i], 0);
    for (int i = 0; i < 8; i++) atomic_store(&j->calls[i], 0);
    j->slow_worker = slow;
}

static int all_once(job *j) {
    for (int i = 0; i < ITEMS; i++)
        if (atomic_load(&j->done[i]) != 1) return 0;
    return 1;
}

int main(void) {
    for (int n = 1; n <= 3; n++) {
        thread_pool *p = thread_pool_new(n);
        CHECK(p != NULL && thread_pool_size(p) == n);
        if (!p) continue;
        job *j = calloc(1, sizeof *j);
        int bad = 0, left_out = 0, each_bad = 0, taken = 0;
        for (int rep = 0; rep < 300; rep++) {
            reset(j, rep % 3 == 0);
            if (rep % 3 == 0) pause_us(5000); /* idle workers go from spinning to yielding and sleeping */
            thread_pool_run_shared(p, draw_task, j);
            bad += !all_once(j);
            bad += atomic_load(&j->calls[0]) != 1;
            for (int i = 1; i < n; i++) {
                const int c = atomic_load(&j->calls[i]);
                bad += c > 1;
                left_out += c == 0;
            }
            /* the next job, of either kind, makes every call once */
            reset(j, 0);
            if (rep % 2) {
                thread_pool_run(p, each_task, j);
                for (int i = 0; i < n; i++) each_bad += atomic_load(&j->calls[i]) != 1;
                each_bad += !all_once(j);
            } else {
                thread_pool_run_shared(p, draw_task, j);
                bad += !all_once(j);
            }
            if (rep % 50 == 0) sched_yield();
        }
        CHECKF(bad == 0, "pool of %d: %d shared jobs did an item other than once or called a thread twice", n, bad);
        CHECKF(each_bad == 0, "pool of %d: %d thread_pool_run calls missed or repeated a thread after a shared job", n,
               each_bad);
        /* a range job after the workers fell asleep: the caller makes the
         * calls of those that are not up in time, each part still done once */
        for (int rep = 0; rep < 40 && n > 1; rep++) {
            pause_us(5000);
            reset(j, 0);
            thread_pool_run(p, each_task, j);
            for (int i = 0; i < n; i++) each_bad += atomic_load(&j->calls[i]) != 1;
            each_bad += !all_once(j);
            for (int i = 1; i < n; i++) taken += pthread_equal(g_by[i], pthread_self()) != 0;
        }
        if (n > 1) CHECKF(taken > 0, "pool of %d: the caller never made a sleeping worker's call", n);
        if (n > 1) /* after 5 ms idle the workers sleep, and the caller takes everything first */
            CHECKF(left_out > 0, "pool of %d: no worker was ever left out of a shared job", n);
        free(j);
        thread_pool_free(p);
    }
    return t_done();
}
