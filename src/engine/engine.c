/* Engine instances.
 *
 * Shape: lifecycle calls (start, load, unload, stop) validate on the
 * caller's thread and append an op to a FIFO; one worker thread per
 * instance runs the ops in order and publishes transitions.  Requests run
 * on their callers' threads.  Both meet at the gate, which admits one
 * holder at a time and picks the next holder by class, then ticket:
 *
 *   GATE_URGENT  urgent requests
 *   GATE_RESUME  requests that yielded to an urgent one and come back
 *   GATE_NORMAL  other requests, loads and unloads
 *
 * The gate has as many places as the resident model runs requests at once
 * (the family's capacity: 1, or the llm family's sequences); a request
 * takes one, a load or unload all of them.
 *
 * Teardown (unload, stop) first sets `closing` so no request is admitted,
 * then the worker waits until every admitted request has left (n_active
 * reaches 0; a fired teardown token sets `escalated`, which cancels them)
 * and only then releases the model.  Everything below is guarded by
 * kiln_engine.mu unless marked otherwise. */
#include "engine/engine.h"

#include "backend/cuda.h"
#include "base/base.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

enum { GATE_URGENT = 0, GATE_RESUME = 1, GATE_NORMAL = 2 };

typedef struct gate_waiter {
    int cls;
    uint64_t ticket;
    int weight; /* places it takes: 1 for a request, all for load/unload */
    int granted;
    int async; /* queued by engine_yield_async: nobody blocks on it */
    struct gate_waiter *next;
} gate_waiter;

struct engine_run {
    kiln_engine *e;
    kiln_engine_cancel *cancel; /* the work's own token (our reference), or NULL */
    engine_watch watch;         /* a fired token wakes the gate */
    int (*abandon)(void *user); /* polled while waiting for the gate: 1 gives up */
    void *abandon_user;
    int is_request;
    int holds;  /* holds places of the gate */
    int weight; /* how many */
    gate_waiter w;
};

typedef enum { OP_START, OP_LOAD, OP_UNLOAD, OP_STOP } op_kind;

typedef struct op {
    op_kind kind;
    uint64_t seq;
    char name[512];             /* load: the model as the caller named it */
    char path[4096];            /* load: the resolved file */
    void *lease;                /* load: the store's lease, or NULL */
    kiln_engine_cancel *cancel; /* our reference, or NULL */
    engine_watch watch;         /* teardown: escalates when cancel fires */
    kiln_engine *e;
    int accepted;    /* teardown: queued (before: only noted) */
    int fired_early; /* teardown: token fired before acceptance */
    int is_destroy;  /* stop: its outcome is the destroy outcome */
    struct op *next;
} op;

typedef char msgbuf[512];

struct kiln_engine {
    const kiln_engine_family *fam;
    const engine_ops *ops;
    kiln_engine_backend backend;      /* as asked: AUTO, CPU or CUDA */
    kiln_engine_backend backend_used; /* the resident model's (CPU before a load, unless CUDA was asked) */
    kiln_engine_status_fn status_fn;
    void *status_user;
    kiln_engine_store store; /* acquire == NULL: no store */

    pthread_mutex_t mu;
    pthread_cond_t cv; /* broadcast on every change below */
    pthread_t thread;
    int thread_started, quit;

    op *head, *tail, *cur;       /* queued ops and the one running */
    uint64_t next_seq, done_seq; /* ops accepted / completed (by seq) */
    kiln_status idle_st;         /* outcome of the latest completed op */
    msgbuf idle_msg;

    int start_accepted, stop_accepted, stopped;
    int closing;          /* a teardown was accepted and has not run */
    atomic_int escalated; /* cancel admitted requests and loads */

    void *model; /* resident model (worker writes) */
    void *lease;
    char model_name[512];
    int release_failed; /* model kept after a failed release */

    int gate_cap, gate_used; /* places, and places held */
    gate_waiter *waiters;
    kiln_context_params ctx_params; /* for the families that make contexts */
    int has_ctx_params;
    kiln_spec_params spec_params; /* the llm family's speculative decoding */
    char spec_draft[4096];        /* its draft_model, copied */
    char mmproj[4096];            /* the llm family's projector file, "" none */
    int32_t gpu_layers;           /* the llm family's kiln_model_params.gpu_layers */
    uint64_t next_ticket;
    int n_active, n_waiting;

    kiln_engine_state state; /* latest transition */
    kiln_status err;
    msgbuf msg;

    int destroy_phase; /* 0 none, 1 running, 2 done */
    kiln_status destroy_st;
    msgbuf destroy_msg;
};

/* ------------------------------------------------------------- helpers */

const char *kiln_engine_state_str(kiln_engine_state s) {
    static const char *names[] = {"created",   "starting", "started",  "loading", "loaded",
                                  "unloading", "unloaded", "stopping", "stopped", "failed"};
    return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "unknown";
}

static void wake(kiln_engine *e) {
    pthread_mutex_lock(&e->mu);
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static void wake_fn(void *arg) { wake(arg); }

/* Watcher of a teardown op's token: an accepted teardown cancels the
 * admitted requests; before acceptance the firing is only noted. */
static void escalate(void *arg) {
    op *o = arg;
    kiln_engine *e = o->e;
    pthread_mutex_lock(&e->mu);
    if (o->accepted)
        atomic_store(&e->escalated, 1);
    else
        o->fired_early = 1;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

/* Whether the engine may go from state a to state b: start runs once
 * (created, starting, started); a load (loading, then loaded or failed) and
 * a teardown (unloading or stopping, then unloaded, stopped or failed) each
 * begin where the last op ended; stopped ends it all, and an engine never
 * started stops at once (stop_locked). */
static int legal_transition(kiln_engine_state a, kiln_engine_state b) {
    const int rested = a == KILN_ENGINE_STARTED || a == KILN_ENGINE_LOADED || a == KILN_ENGINE_UNLOADED ||
                       a == KILN_ENGINE_FAILED; /* no op running */
    switch (b) {
    case KILN_ENGINE_STARTING: return a == KILN_ENGINE_CREATED;
    case KILN_ENGINE_STARTED: return a == KILN_ENGINE_STARTING;
    case KILN_ENGINE_LOADING:
    case KILN_ENGINE_UNLOADING:
    case KILN_ENGINE_STOPPING: return rested;
    case KILN_ENGINE_LOADED: return a == KILN_ENGINE_LOADING;
    case KILN_ENGINE_UNLOADED: return a == KILN_ENGINE_UNLOADING;
    case KILN_ENGINE_STOPPED: return a == KILN_ENGINE_STOPPING || a == KILN_ENGINE_CREATED || a == KILN_ENGINE_STOPPED;
    case KILN_ENGINE_FAILED: return a == KILN_ENGINE_LOADING || a == KILN_ENGINE_UNLOADING || a == KILN_ENGINE_STOPPING;
    default: return 0;
    }
}

/* Publishes a transition: records it, then calls the listener unlocked (only
 * the worker publishes, so listeners see transitions in order). */
static void publish(kiln_engine *e, kiln_engine_state state, kiln_status st, const char *msg, const char *model) {
    pthread_mutex_lock(&e->mu);
    KILN_ASSERT(legal_transition(e->state, state));
    e->state = state;
    if (state == KILN_ENGINE_FAILED) {
        e->err = st;
        snprintf(e->msg, sizeof e->msg, "%s", msg ? msg : "");
    }
    pthread_mutex_unlock(&e->mu);
    if (e->status_fn) {
        kiln_engine_event ev = {state, state == KILN_ENGINE_FAILED ? st : KILN_OK,
                                state == KILN_ENGINE_FAILED && msg ? msg : "", model ? model : ""};
        e->status_fn(e, &ev, e->status_user);
    }
}

/* ---------------------------------------------------------------- gate */

static int run_cancelled(const engine_run *r) {
    return kiln_engine_cancel_fired(r->cancel) || atomic_load(&r->e->escalated);
}

int engine_cancelled(const engine_run *r) { return run_cancelled(r); }

/* Grants waiters in order (class, then ticket) while their places are
 * free; the best waiter that does not fit stops the others, so a load
 * waiting for every place is not overtaken for ever. */
static void gate_grant_next(kiln_engine *e) {
    for (;;) {
        gate_waiter **best = NULL;
        for (gate_waiter **p = &e->waiters; *p; p = &(*p)->next)
            if (!best || (*p)->cls < (*best)->cls || ((*p)->cls == (*best)->cls && (*p)->ticket < (*best)->ticket))
                best = p;
        if (!best || e->gate_used + (*best)->weight > e->gate_cap) break;
        gate_waiter *w = *best;
        *best = w->next;
        w->granted = 1;
        e->gate_used += w->weight;
        if (w->async) e->n_waiting--;
    }
    KILN_DASSERT(e->gate_used >= 0 && e->n_waiting >= 0); /* places held and waiters counted */
    pthread_cond_broadcast(&e->cv);
}

static void gate_leave(kiln_engine *e, engine_run *r) {
    KILN_DASSERT(r->holds && e->gate_used >= r->weight); /* only a holder leaves, with the places it took */
    e->gate_used -= r->weight;
    r->holds = 0;
    gate_grant_next(e);
}

static void gate_unqueue(kiln_engine *e, gate_waiter *w) {
    for (gate_waiter **p = &e->waiters; *p; p = &(*p)->next) {
        if (*p == w) {
            *p = w->next;
            break;
        }
    }
}

/* Queues r for the gate in class cls (mu held). */
static void gate_queue(kiln_engine *e, engine_run *r, int cls) {
    gate_waiter *w = &r->w;
    r->weight = r->is_request ? 1 : e->gate_cap;
    w->cls = cls;
    w->ticket = e->next_ticket++;
    w->weight = r->weight;
    w->granted = 0;
    w->next = e->waiters;
    e->waiters = w;
}

/* Waits (mu held) for the gate in class cls.  A request gives up when it is
 * cancelled before being granted. */
static kiln_status gate_enter(kiln_engine *e, engine_run *r, int cls) {
    gate_waiter *w = &r->w;
    w->async = 0;
    gate_queue(e, r, cls);
    gate_grant_next(e);
    const int waited = r->is_request && !w->granted;
    if (waited) e->n_waiting++;
    while (!w->granted && !(r->is_request && run_cancelled(r))) {
        if (!r->abandon) {
            pthread_cond_wait(&e->cv, &e->mu);
            continue;
        }
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&e->cv, &e->mu, &ts);
        if (!w->granted && r->abandon(r->abandon_user)) break;
    }
    if (waited) e->n_waiting--;
    if (!w->granted) {
        gate_unqueue(e, w);
        gate_grant_next(e);
        return base_fail(KILN_ERR_CANCELLED, "request cancelled while waiting");
    }
    r->holds = 1;
    return KILN_OK;
}

/* Leaves the gate, or the queue of a yielded request (mu held). */
static void gate_drop(kiln_engine *e, engine_run *r) {
    if (r->w.async && !r->holds) {
        r->w.async = 0;
        if (r->w.granted) {
            r->holds = 1;
        } else {
            gate_unqueue(e, &r->w);
            e->n_waiting--;
            gate_grant_next(e);
            return;
        }
    }
    if (r->holds) gate_leave(e, r);
}

static int urgent_waits(const kiln_engine *e) {
    for (const gate_waiter *w = e->waiters; w; w = w->next)
        if (w->cls == GATE_URGENT) return 1;
    return 0;
}

kiln_status engine_yield(engine_run *r) {
    if (run_cancelled(r)) return base_fail(KILN_ERR_CANCELLED, r->is_request ? "request cancelled" : "load cancelled");
    if (!r->is_request) return KILN_OK;
    kiln_engine *e = r->e;
    pthread_mutex_lock(&e->mu);
    kiln_status st = KILN_OK;
    if (urgent_waits(e)) {
        gate_leave(e, r);
        st = gate_enter(e, r, GATE_RESUME);
    }
    pthread_mutex_unlock(&e->mu);
    return st;
}

int engine_urgent_waiting(kiln_engine *e) {
    pthread_mutex_lock(&e->mu);
    int u = urgent_waits(e);
    pthread_mutex_unlock(&e->mu);
    return u;
}

void engine_yield_async(engine_run *r) {
    kiln_engine *e = r->e;
    pthread_mutex_lock(&e->mu);
    if (r->holds) {
        r->w.async = 1;
        gate_queue(e, r, GATE_RESUME);
        e->n_waiting++;
        gate_leave(e, r); /* grants the urgent waiter; r comes after it */
    }
    pthread_mutex_unlock(&e->mu);
}

int engine_regained(engine_run *r) {
    kiln_engine *e = r->e;
    pthread_mutex_lock(&e->mu);
    if (!r->holds && r->w.async && r->w.granted) {
        r->holds = 1;
        r->w.async = 0;
    }
    int h = r->holds;
    pthread_mutex_unlock(&e->mu);
    return h;
}

kiln_engine *engine_of(const engine_run *r) { return r->e; }

const kiln_context_params *engine_context_params(const engine_run *r) {
    return r->e->has_ctx_params ? &r->e->ctx_params : NULL;
}

kiln_spec_params engine_spec_params(const engine_run *r, char *draft, size_t cap) {
    kiln_engine *e = r->e;
    pthread_mutex_lock(&e->mu);
    kiln_spec_params p = e->spec_params;
    snprintf(draft, cap, "%s", e->spec_draft);
    pthread_mutex_unlock(&e->mu);
    p.draft_model = draft;
    return p;
}

const char *engine_mmproj(const engine_run *r, char *buf, size_t cap) {
    kiln_engine *e = r->e;
    pthread_mutex_lock(&e->mu);
    snprintf(buf, cap, "%s", e->mmproj);
    pthread_mutex_unlock(&e->mu);
    return buf[0] ? buf : NULL;
}

/* -------------------------------------------------------------- create */

kiln_status engine_create_with(const kiln_engine_family *fam, const engine_ops *ops, kiln_engine_backend backend,
                               kiln_engine **out) {
    if (!out) return base_fail(KILN_ERR_INVALID_ARG, "no output handle");
    *out = NULL;
    if (!fam || !ops || !ops->load || !ops->unload || !ops->run)
        return base_fail(KILN_ERR_INVALID_ARG, "engine family without load/unload/run");
    if (backend != KILN_ENGINE_BACKEND_AUTO && backend != KILN_ENGINE_BACKEND_CPU &&
        backend != KILN_ENGINE_BACKEND_CUDA)
        return base_fail(KILN_ERR_INVALID_ARG, "unknown backend %d", (int)backend);
    if (!(fam->backends & (1u << backend)))
        return base_fail(KILN_ERR_UNSUPPORTED, "family '%s' does not run on this backend", fam->key);
    char why[256];
    if (backend == KILN_ENGINE_BACKEND_CUDA && !backend_cuda_get(why, sizeof why))
        return base_fail(KILN_ERR_UNSUPPORTED, "no CUDA backend: %s", why);
    kiln_engine *e = calloc(1, sizeof *e);
    if (!e) return base_fail(KILN_ERR_NOMEM, "out of memory");
    e->fam = fam;
    e->ops = ops;
    e->backend = backend;
    e->backend_used = backend == KILN_ENGINE_BACKEND_CUDA ? backend : KILN_ENGINE_BACKEND_CPU;
    e->next_seq = 1;
    e->gate_cap = 1;
    e->spec_params = kiln_spec_default_params();
    atomic_init(&e->escalated, 0);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    *out = e;
    return KILN_OK;
}

kiln_status kiln_engine_create(kiln_engine_family_id family, kiln_engine_backend backend, kiln_engine **out) {
    const kiln_engine_family *fam = NULL;
    for (int i = 0; i < kiln_engine_family_count(); i++)
        if (kiln_engine_family_at(i)->id == family) fam = kiln_engine_family_at(i);
    if (!fam) return base_fail(KILN_ERR_INVALID_ARG, "unknown engine family %d", (int)family);
    const engine_ops *ops = engine_family_ops(family);
    if (!ops) return base_fail(KILN_ERR_UNSUPPORTED, "engine family '%s' is not built in", fam->key);
    return engine_create_with(fam, ops, backend, out);
}

kiln_status kiln_engine_set_status_fn(kiln_engine *e, kiln_engine_status_fn fn, void *user) {
    if (!e) return base_fail(KILN_ERR_INVALID_ARG, "no engine");
    pthread_mutex_lock(&e->mu);
    int started = e->start_accepted;
    if (!started) {
        e->status_fn = fn;
        e->status_user = user;
    }
    pthread_mutex_unlock(&e->mu);
    return started ? base_fail(KILN_ERR_STATE, "the status callback is set before start") : KILN_OK;
}

kiln_status kiln_engine_set_store(kiln_engine *e, const kiln_engine_store *store) {
    if (!e || !store || !store->acquire) return base_fail(KILN_ERR_INVALID_ARG, "no engine or store hooks");
    pthread_mutex_lock(&e->mu);
    int started = e->start_accepted;
    if (!started) e->store = *store;
    pthread_mutex_unlock(&e->mu);
    return started ? base_fail(KILN_ERR_STATE, "the store is set before start") : KILN_OK;
}

kiln_status kiln_engine_set_context_params(kiln_engine *e, const kiln_context_params *p) {
    if (!e || !p) return base_fail(KILN_ERR_INVALID_ARG, "no engine or parameters");
    pthread_mutex_lock(&e->mu);
    e->ctx_params = *p;
    e->has_ctx_params = 1;
    pthread_mutex_unlock(&e->mu);
    return KILN_OK;
}

int32_t engine_gpu_layers(const engine_run *r) {
    kiln_engine *e = r->e;
    pthread_mutex_lock(&e->mu);
    const int32_t n = e->gpu_layers;
    pthread_mutex_unlock(&e->mu);
    return n;
}

kiln_status kiln_engine_set_gpu_layers(kiln_engine *e, int32_t n) {
    if (!e) return base_fail(KILN_ERR_INVALID_ARG, "no engine");
    if (n < KILN_GPU_LAYERS_AUTO) return base_fail(KILN_ERR_INVALID_ARG, "bad GPU layer count %d", n);
    pthread_mutex_lock(&e->mu);
    e->gpu_layers = n;
    pthread_mutex_unlock(&e->mu);
    return KILN_OK;
}

kiln_status kiln_engine_set_mmproj(kiln_engine *e, const char *path) {
    if (!e) return base_fail(KILN_ERR_INVALID_ARG, "no engine");
    if (path && strlen(path) >= sizeof e->mmproj)
        return base_fail(KILN_ERR_INVALID_ARG, "the projector's path is too long");
    pthread_mutex_lock(&e->mu);
    snprintf(e->mmproj, sizeof e->mmproj, "%s", path ? path : "");
    pthread_mutex_unlock(&e->mu);
    return KILN_OK;
}

kiln_status kiln_engine_set_spec_params(kiln_engine *e, const kiln_spec_params *p) {
    if (!e) return base_fail(KILN_ERR_INVALID_ARG, "no engine");
    kiln_spec_params q = p ? *p : kiln_spec_default_params();
    if ((unsigned)q.type > KILN_SPEC_MTP) return base_fail(KILN_ERR_INVALID_ARG, "unknown speculative decoding type");
    if (q.draft_model && strlen(q.draft_model) >= sizeof e->spec_draft)
        return base_fail(KILN_ERR_INVALID_ARG, "the draft model's path is too long");
    pthread_mutex_lock(&e->mu);
    snprintf(e->spec_draft, sizeof e->spec_draft, "%s", q.draft_model ? q.draft_model : "");
    q.draft_model = NULL; /* engine_spec_params hands out a copy of spec_draft */
    e->spec_params = q;
    pthread_mutex_unlock(&e->mu);
    return KILN_OK;
}

/* -------------------------------------------------------------- worker */

static void release_lease(kiln_engine *e, void *lease) {
    if (lease && e->store.release) e->store.release(e->store.user, lease);
}

/* Waits until no admitted request remains, then holds the gate (mu held
 * on entry and exit). */
static void drain_and_enter(kiln_engine *e, engine_run *r) {
    while (e->n_active > 0) pthread_cond_wait(&e->cv, &e->mu);
    gate_enter(e, r, GATE_NORMAL);
}

/* The backend a load asks the family for: AUTO only where the family
 * runs on CUDA too (the model load then chooses), else the CPU. */
static kiln_engine_backend load_backend(const kiln_engine *e) {
    if (e->backend == KILN_ENGINE_BACKEND_AUTO && !(e->fam->backends & (1u << KILN_ENGINE_BACKEND_CUDA)))
        return KILN_ENGINE_BACKEND_CPU;
    return e->backend;
}

static kiln_status run_load(kiln_engine *e, op *o, msgbuf msg) {
    publish(e, KILN_ENGINE_LOADING, KILN_OK, NULL, o->name);
    engine_run r = {.e = e, .cancel = o->cancel};
    pthread_mutex_lock(&e->mu);
    int held = e->model != NULL;
    if (!held) drain_and_enter(e, &r);
    pthread_mutex_unlock(&e->mu);
    if (held) {
        release_lease(e, o->lease);
        base_errf(msg, sizeof(msgbuf), "%s: the engine still holds %s; unload it first", o->name, e->model_name);
        return KILN_ERR_STATE;
    }
    void *model = NULL;
    kiln_status st = run_cancelled(&r) ? base_fail(KILN_ERR_CANCELLED, "load cancelled")
                                       : e->ops->load(e->ops->user, o->path, load_backend(e), &r, &model);
    if (st != KILN_OK) {
        base_errf(msg, sizeof(msgbuf), "%s: %s", o->name, kiln_last_error());
    } else if (run_cancelled(&r)) {
        /* The family handed back a model after cancellation: it is ours to
         * release, and a failed release keeps it like any other. */
        st = KILN_ERR_CANCELLED;
        kiln_status rst = e->ops->unload(e->ops->user, model);
        if (rst == KILN_OK) {
            model = NULL;
            base_errf(msg, sizeof(msgbuf), "%s: load cancelled", o->name);
        } else {
            base_errf(msg, sizeof(msgbuf), "%s: load cancelled; releasing it failed: %s", o->name, kiln_last_error());
        }
    }
    pthread_mutex_lock(&e->mu);
    if (model) {
        e->model = model;
        e->lease = o->lease;
        snprintf(e->model_name, sizeof e->model_name, "%s", o->name);
        e->release_failed = st != KILN_OK;
        if (st == KILN_OK && e->ops->capacity) e->gate_cap = e->ops->capacity(e->ops->user, model);
        kiln_model *km = st == KILN_OK && e->ops->model_of ? e->ops->model_of(e->ops->user, model) : NULL;
        if (km) {
            kiln_model_info info;
            kiln_model_get_info(km, &info);
            e->backend_used = !strcmp(info.backend, "cuda") ? KILN_ENGINE_BACKEND_CUDA : KILN_ENGINE_BACKEND_CPU;
        }
        if (e->gate_cap < 1) e->gate_cap = 1;
    }
    gate_leave(e, &r);
    pthread_mutex_unlock(&e->mu);
    if (!model) release_lease(e, o->lease);
    if (st == KILN_OK) publish(e, KILN_ENGINE_LOADED, KILN_OK, NULL, o->name);
    return st;
}

/* Unload and stop: drain admitted requests, then release the model. */
static kiln_status run_teardown(kiln_engine *e, op *o, msgbuf msg) {
    int stop = o->kind == OP_STOP;
    pthread_mutex_lock(&e->mu);
    char name[512];
    snprintf(name, sizeof name, "%s", e->model_name);
    pthread_mutex_unlock(&e->mu);
    publish(e, stop ? KILN_ENGINE_STOPPING : KILN_ENGINE_UNLOADING, KILN_OK, NULL, name);

    engine_run r = {.e = e};
    pthread_mutex_lock(&e->mu);
    drain_and_enter(e, &r);
    void *model = e->model, *lease = e->lease;
    pthread_mutex_unlock(&e->mu);

    kiln_status st = model ? e->ops->unload(e->ops->user, model) : KILN_OK;
    if (st != KILN_OK) base_errf(msg, sizeof(msgbuf), "releasing %s failed: %s", name, kiln_last_error());
    if (o->cancel) engine_cancel_unwatch(o->cancel, &o->watch);

    pthread_mutex_lock(&e->mu);
    if (st == KILN_OK) {
        e->model = NULL;
        e->lease = NULL;
        e->model_name[0] = 0;
        e->release_failed = 0;
        if (stop) e->stopped = 1;
    } else {
        e->release_failed = 1;
    }
    /* Escalation ends with this teardown unless a later one already fired. */
    int still = 0;
    for (op *q = e->head; q; q = q->next)
        still |= (q->kind == OP_UNLOAD || q->kind == OP_STOP) && kiln_engine_cancel_fired(q->cancel);
    atomic_store(&e->escalated, still);
    int more_teardown = 0;
    for (op *q = e->head; q; q = q->next) more_teardown |= q->kind == OP_UNLOAD || q->kind == OP_STOP;
    e->closing = more_teardown;
    if (st == KILN_OK) e->gate_cap = 1;
    gate_leave(e, &r);
    pthread_mutex_unlock(&e->mu);

    if (st == KILN_OK) {
        release_lease(e, lease);
        publish(e, stop ? KILN_ENGINE_STOPPED : KILN_ENGINE_UNLOADED, KILN_OK, NULL, name);
    }
    return st;
}

static void *worker(void *arg) {
    kiln_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->head && !e->quit) pthread_cond_wait(&e->cv, &e->mu);
        if (!e->head) break;
        op *o = e->head;
        e->head = o->next;
        if (!e->head) e->tail = NULL;
        e->cur = o;
        pthread_mutex_unlock(&e->mu);

        msgbuf msg = "";
        kiln_status st = KILN_OK;
        switch (o->kind) {
        case OP_START:
            publish(e, KILN_ENGINE_STARTING, KILN_OK, NULL, NULL);
            publish(e, KILN_ENGINE_STARTED, KILN_OK, NULL, NULL);
            break;
        case OP_LOAD: st = run_load(e, o, msg); break;
        case OP_UNLOAD:
        case OP_STOP: st = run_teardown(e, o, msg); break;
        }
        if (st != KILN_OK) publish(e, KILN_ENGINE_FAILED, st, msg, o->name[0] ? o->name : NULL);

        pthread_mutex_lock(&e->mu);
        e->cur = NULL;
        e->done_seq = o->seq;
        e->idle_st = st;
        snprintf(e->idle_msg, sizeof e->idle_msg, "%s", msg);
        if (o->is_destroy) {
            e->destroy_st = st;
            snprintf(e->destroy_msg, sizeof e->destroy_msg, "%s", msg);
            e->destroy_phase = 2;
        }
        pthread_cond_broadcast(&e->cv);
        pthread_mutex_unlock(&e->mu);
        kiln_engine_cancel_free(o->cancel);
        free(o);
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* Appends o (mu held). */
static void enqueue(kiln_engine *e, op *o) {
    o->seq = e->next_seq++;
    if (e->tail)
        e->tail->next = o;
    else
        e->head = o;
    e->tail = o;
    pthread_cond_broadcast(&e->cv);
}

/* ----------------------------------------------------------- lifecycle */

kiln_status kiln_engine_start(kiln_engine *e) {
    if (!e) return base_fail(KILN_ERR_INVALID_ARG, "no engine");
    pthread_mutex_lock(&e->mu);
    if (e->start_accepted || e->stop_accepted) { /* again, or after stop: no-op */
        pthread_mutex_unlock(&e->mu);
        return KILN_OK;
    }
    op *o = calloc(1, sizeof *o);
    if (!o) {
        pthread_mutex_unlock(&e->mu);
        return base_fail(KILN_ERR_NOMEM, "out of memory");
    }
    int rc = pthread_create(&e->thread, NULL, worker, e);
    if (rc != 0) {
        pthread_mutex_unlock(&e->mu);
        free(o);
        return base_fail(KILN_ERR_NOMEM, "cannot start the engine thread: %s", strerror(rc));
    }
    e->thread_started = 1;
    e->start_accepted = 1;
    o->kind = OP_START;
    enqueue(e, o);
    pthread_mutex_unlock(&e->mu);
    return KILN_OK;
}

/* The latest planned model state (mu held): 1 when the last queued or
 * running load/unload is a load, or, with none, a model is resident. */
static int load_planned(const kiln_engine *e) {
    int planned = e->model != NULL;
    if (e->cur && (e->cur->kind == OP_LOAD || e->cur->kind == OP_UNLOAD)) planned = e->cur->kind == OP_LOAD;
    for (const op *q = e->head; q; q = q->next)
        if (q->kind == OP_LOAD || q->kind == OP_UNLOAD) planned = q->kind == OP_LOAD;
    return planned;
}

/* Why a load cannot be accepted now (mu held), or NULL. */
static const char *load_refusal(const kiln_engine *e) {
    if (!e->start_accepted) return "the engine is not started";
    if (e->stop_accepted) return "the engine is stopped";
    if (e->release_failed && !e->closing) return "a failed release holds the previous model; unload to retry";
    if (load_planned(e)) return "the engine holds a model; unload it first";
    return NULL;
}

kiln_status kiln_engine_load(kiln_engine *e, const char *model, kiln_engine_cancel *cancel) {
    if (!e || !model || !*model) return base_fail(KILN_ERR_INVALID_ARG, "no engine or model name");
    if (strlen(model) >= sizeof(((op *)0)->name)) return base_fail(KILN_ERR_INVALID_ARG, "model name too long");
    pthread_mutex_lock(&e->mu);
    const char *why = load_refusal(e);
    pthread_mutex_unlock(&e->mu);
    if (why) return base_fail(KILN_ERR_STATE, "load %s: %s", model, why);

    op *o = calloc(1, sizeof *o);
    if (!o) return base_fail(KILN_ERR_NOMEM, "out of memory");
    o->kind = OP_LOAD;
    snprintf(o->name, sizeof o->name, "%s", model);
    struct stat sb;
    kiln_status st = KILN_OK;
    if (stat(model, &sb) == 0) {
        if (!S_ISREG(sb.st_mode))
            st = base_fail(KILN_ERR_IO, "%s: not a regular file", model);
        else
            snprintf(o->path, sizeof o->path, "%s", model);
    } else if (e->store.acquire) {
        st = e->store.acquire(e->store.user, e->fam->key, model, o->path, sizeof o->path, &o->lease);
    } else {
        st = base_fail(KILN_ERR_NOT_FOUND, "%s: %s (and no model store is set)", model, strerror(errno));
    }
    if (st == KILN_OK && e->ops->check) st = e->ops->check(e->ops->user, o->path);
    if (st == KILN_OK) {
        pthread_mutex_lock(&e->mu);
        why = load_refusal(e); /* again: another thread may have raced us */
        if (!why) {
            o->cancel = engine_cancel_ref(cancel);
            enqueue(e, o);
        }
        pthread_mutex_unlock(&e->mu);
        if (!why) return KILN_OK;
        st = base_fail(KILN_ERR_STATE, "load %s: %s", model, why);
    }
    release_lease(e, o->lease);
    free(o);
    return st;
}

/* A teardown op whose token is watched from before it can be queued, so a
 * firing at any time after the call is seen.  Made outside mu (lock
 * order); NULL when out of memory. */
static op *new_teardown(kiln_engine *e, op_kind kind, kiln_engine_cancel *cancel) {
    op *o = calloc(1, sizeof *o);
    if (!o) return NULL;
    o->kind = kind;
    o->e = e;
    o->cancel = engine_cancel_ref(cancel);
    o->watch.fn = escalate;
    o->watch.arg = o;
    if (cancel) engine_cancel_watch(cancel, &o->watch);
    return o;
}

/* Drops a teardown op that was not queued (outside mu). */
static void drop_teardown(op *o) {
    if (!o) return;
    if (o->cancel) {
        engine_cancel_unwatch(o->cancel, &o->watch);
        kiln_engine_cancel_free(o->cancel);
    }
    free(o);
}

/* Queues a teardown (mu held): from now on requests are refused. */
static void accept_teardown(kiln_engine *e, op *o) {
    o->accepted = 1;
    if (o->fired_early) atomic_store(&e->escalated, 1);
    e->closing = 1;
    if (o->kind == OP_STOP) e->stop_accepted = 1;
    enqueue(e, o);
}

kiln_status kiln_engine_unload(kiln_engine *e, kiln_engine_cancel *cancel) {
    if (!e) return base_fail(KILN_ERR_INVALID_ARG, "no engine");
    op *o = new_teardown(e, OP_UNLOAD, cancel);
    if (!o) return base_fail(KILN_ERR_NOMEM, "out of memory");
    pthread_mutex_lock(&e->mu);
    const char *why = !e->start_accepted ? "the engine is not started"
                      : e->stop_accepted ? "the engine is stopped"
                                         : NULL;
    if (!why) accept_teardown(e, o);
    pthread_mutex_unlock(&e->mu);
    if (!why) return KILN_OK;
    drop_teardown(o);
    return base_fail(KILN_ERR_STATE, "unload: %s", why);
}

/* The queued or running stop (mu held), or NULL. */
static op *pending_stop(kiln_engine *e) {
    if (e->cur && e->cur->kind == OP_STOP) return e->cur;
    for (op *q = e->head; q; q = q->next)
        if (q->kind == OP_STOP) return q;
    return NULL;
}

/* Stop's decision (mu held).  Queues o when a stop has work to do and
 * returns the op whose completion ends the stop (o or one already
 * pending), or NULL when there is nothing to wait for. */
static op *stop_locked(kiln_engine *e, op *o, kiln_engine_cancel *cancel) {
    if (!e->start_accepted) { /* nothing ever ran: stopped at once */
        e->stop_accepted = 1;
        e->stopped = 1;
        KILN_ASSERT(legal_transition(e->state, KILN_ENGINE_STOPPED));
        e->state = KILN_ENGINE_STOPPED;
        return NULL;
    }
    op *p = e->stop_accepted ? pending_stop(e) : NULL;
    if (p) { /* a second stop while one runs: it may only escalate */
        if (kiln_engine_cancel_fired(cancel)) atomic_store(&e->escalated, 1);
        return p;
    }
    if (e->stop_accepted && !e->release_failed) return NULL; /* stopped */
    accept_teardown(e, o);                                   /* first stop, or a retry of a failed release */
    return o;
}

kiln_status kiln_engine_stop(kiln_engine *e, kiln_engine_cancel *cancel) {
    if (!e) return base_fail(KILN_ERR_INVALID_ARG, "no engine");
    op *o = new_teardown(e, OP_STOP, cancel);
    if (!o) return base_fail(KILN_ERR_NOMEM, "out of memory");
    pthread_mutex_lock(&e->mu);
    int queued = stop_locked(e, o, cancel) == o;
    pthread_mutex_unlock(&e->mu);
    if (!queued) drop_teardown(o);
    return KILN_OK;
}

kiln_status kiln_engine_destroy(kiln_engine *e, kiln_engine_cancel *cancel) {
    if (!e) return base_fail(KILN_ERR_INVALID_ARG, "no engine");
    op *o = new_teardown(e, OP_STOP, cancel);
    if (!o) return base_fail(KILN_ERR_NOMEM, "out of memory");
    pthread_mutex_lock(&e->mu);
    int queued = 0;
    if (e->destroy_phase == 0) {
        e->destroy_phase = 1;
        op *p = stop_locked(e, o, cancel);
        queued = p == o;
        if (p) {
            p->is_destroy = 1;
        } else {
            e->destroy_phase = 2;
            e->destroy_st = KILN_OK;
        }
    }
    while (e->destroy_phase != 2) pthread_cond_wait(&e->cv, &e->mu);
    kiln_status st = e->destroy_st;
    msgbuf msg;
    snprintf(msg, sizeof msg, "%s", e->destroy_msg);
    pthread_mutex_unlock(&e->mu);
    if (!queued) drop_teardown(o);
    return st == KILN_OK ? KILN_OK : base_fail(st, "%s", msg);
}

void kiln_engine_free(kiln_engine *e) {
    if (!e) return;
    kiln_engine_destroy(e, NULL);
    pthread_mutex_lock(&e->mu);
    e->quit = 1;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (e->thread_started) pthread_join(e->thread, NULL);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

kiln_status kiln_engine_wait_idle(kiln_engine *e, int timeout_ms) {
    if (!e) return base_fail(KILN_ERR_INVALID_ARG, "no engine");
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    if (timeout_ms >= 0) {
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&e->mu);
    uint64_t target = e->next_seq - 1;
    int timed_out = 0;
    while (e->done_seq < target && !timed_out) {
        if (timeout_ms < 0)
            pthread_cond_wait(&e->cv, &e->mu);
        else
            timed_out = pthread_cond_timedwait(&e->cv, &e->mu, &until) == ETIMEDOUT;
    }
    timed_out &= e->done_seq < target;
    kiln_status st = e->idle_st;
    msgbuf msg;
    snprintf(msg, sizeof msg, "%s", e->idle_msg);
    pthread_mutex_unlock(&e->mu);
    if (timed_out) return base_fail(KILN_ERR_STATE, "the engine did not become idle within %d ms", timeout_ms);
    return st == KILN_OK ? KILN_OK : base_fail(st, "%s", msg);
}

kiln_status kiln_engine_observe(kiln_engine *e, kiln_engine_observation *out) {
    if (!e || !out) return base_fail(KILN_ERR_INVALID_ARG, "no engine or output");
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&e->mu);
    out->state = e->state;
    out->backend = e->backend_used;
    snprintf(out->model, sizeof out->model, "%s", e->model ? e->model_name : "");
    out->error = e->err;
    snprintf(out->message, sizeof out->message, "%s", e->msg);
    out->n_active = e->n_active;
    out->n_waiting = e->n_waiting;
    pthread_mutex_unlock(&e->mu);
    return KILN_OK;
}

/* ------------------------------------------------------------ requests */

static int family_has_task(const kiln_engine_family *fam, int task) {
    const char *name = task == ENGINE_TASK_GENERATE     ? "generate"
                       : task == ENGINE_TASK_EMBED      ? "embed"
                       : task == ENGINE_TASK_IMAGE      ? "image"
                       : task == ENGINE_TASK_TRANSCRIBE ? "transcribe"
                       : task == ENGINE_TASK_DECIDE     ? "decide"
                       : task == ENGINE_TASK_MEASURE    ? "measure"
                       : task == ENGINE_TASK_RERANK     ? "rerank"
                                                        : "";
    for (const char *const *t = fam->tasks; t && *t; t++)
        if (strcmp(*t, name) == 0) return 1;
    return 0;
}

kiln_status engine_admit(kiln_engine *e, int task, int urgent, kiln_engine_cancel *cancel, int (*abandon)(void *user),
                         void *user, engine_run **out, void **model) {
    *out = NULL;
    if (model) *model = NULL;
    if (!e) return base_fail(KILN_ERR_INVALID_ARG, "no engine");
    if (!family_has_task(e->fam, task))
        return base_fail(KILN_ERR_UNSUPPORTED, "the %s family does not run this task", e->fam->key);
    engine_run *r = calloc(1, sizeof *r);
    if (!r) return base_fail(KILN_ERR_NOMEM, "out of memory");
    r->e = e;
    r->cancel = engine_cancel_ref(cancel);
    r->is_request = 1;
    r->abandon = abandon;
    r->abandon_user = user;
    r->watch = (engine_watch){wake_fn, e, NULL}; /* a fired token wakes the gate */
    if (cancel) engine_cancel_watch(cancel, &r->watch);
    pthread_mutex_lock(&e->mu);
    const char *why = e->closing || e->stop_accepted ? "an unload or stop was accepted"
                      : e->release_failed            ? "a failed release holds the model; unload to retry"
                      : !e->model                    ? "no model is loaded"
                                                     : NULL;
    kiln_status st;
    if (why) {
        st = base_fail(KILN_ERR_STATE, "request refused: %s", why);
    } else {
        e->n_active++;
        st = gate_enter(e, r, urgent ? GATE_URGENT : GATE_NORMAL);
        if (st != KILN_OK) {
            e->n_active--;
            pthread_cond_broadcast(&e->cv);
        }
    }
    void *m = e->model;
    pthread_mutex_unlock(&e->mu);
    if (st != KILN_OK) {
        if (cancel) engine_cancel_unwatch(cancel, &r->watch);
        kiln_engine_cancel_free(r->cancel);
        free(r);
        return st;
    }
    if (model) *model = m;
    *out = r;
    return KILN_OK;
}

void engine_dismiss(engine_run *r) {
    if (!r) return;
    kiln_engine *e = r->e;
    pthread_mutex_lock(&e->mu);
    gate_drop(e, r);
    e->n_active--;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (r->cancel) {
        engine_cancel_unwatch(r->cancel, &r->watch);
        kiln_engine_cancel_free(r->cancel);
    }
    free(r);
}

kiln_status engine_request(kiln_engine *e, int task, void *req, int urgent, kiln_engine_cancel *cancel) {
    if (!e || !req) return base_fail(KILN_ERR_INVALID_ARG, "no engine or request");
    engine_run *r;
    void *model;
    kiln_status st = engine_admit(e, task, urgent, cancel, NULL, NULL, &r, &model);
    if (st != KILN_OK) return st;
    st = e->ops->run(e->ops->user, model, task, req, r);
    engine_dismiss(r);
    return st;
}

kiln_model *engine_model(kiln_engine *e) {
    pthread_mutex_lock(&e->mu);
    kiln_model *m = e->model && e->ops->model_of ? e->ops->model_of(e->ops->user, e->model) : NULL;
    pthread_mutex_unlock(&e->mu);
    return m;
}

void *engine_resident(kiln_engine *e, const engine_ops *ops) {
    pthread_mutex_lock(&e->mu);
    void *m = e->ops == ops ? e->model : NULL;
    pthread_mutex_unlock(&e->mu);
    return m;
}
