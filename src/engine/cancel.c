/* Cancel tokens: a fired flag read without locking by polling work, and a
 * list of watchers run once at firing so that blocked waiters wake up. */
#include "engine/engine.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

struct kiln_engine_cancel {
    atomic_int fired;
    atomic_int refs;
    pthread_mutex_t mu; /* guards watchers; held while they run */
    engine_watch *watchers;
};

kiln_engine_cancel *kiln_engine_cancel_new(void) {
    kiln_engine_cancel *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    atomic_init(&c->fired, 0);
    atomic_init(&c->refs, 1);
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

kiln_engine_cancel *engine_cancel_ref(kiln_engine_cancel *c) {
    if (c) atomic_fetch_add(&c->refs, 1);
    return c;
}

void kiln_engine_cancel_free(kiln_engine_cancel *c) {
    if (!c || atomic_fetch_sub(&c->refs, 1) != 1) return;
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void kiln_engine_cancel_fire(kiln_engine_cancel *c) {
    if (!c) return;
    pthread_mutex_lock(&c->mu);
    if (!atomic_exchange(&c->fired, 1))
        for (engine_watch *w = c->watchers; w; w = w->next) w->fn(w->arg);
    pthread_mutex_unlock(&c->mu);
}

int kiln_engine_cancel_fired(const kiln_engine_cancel *c) { return c && atomic_load(&c->fired); }

void engine_cancel_watch(kiln_engine_cancel *c, engine_watch *w) {
    pthread_mutex_lock(&c->mu);
    if (atomic_load(&c->fired)) {
        w->fn(w->arg);
    } else {
        w->next = c->watchers;
        c->watchers = w;
    }
    pthread_mutex_unlock(&c->mu);
}

void engine_cancel_unwatch(kiln_engine_cancel *c, engine_watch *w) {
    pthread_mutex_lock(&c->mu);
    for (engine_watch **p = &c->watchers; *p; p = &(*p)->next) {
        if (*p == w) {
            *p = w->next;
            break;
        }
    }
    pthread_mutex_unlock(&c->mu);
}
