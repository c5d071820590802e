/* gen_sched: a gen_batch on its own thread (gen.h).
 *
 * Shape: callers submit requests and read their events; the scheduler
 * thread owns the gen_batch and is the only one touching slots.  Every
 * field below is guarded by gen_sched.mu; a step runs without it, and the
 * event callback takes it to queue what the step produced.  Lock order:
 * gen_sched.mu before the gate's (the gate hooks run under mu). */
#include "gen/gen.h"

#include "base/base.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { Q_PENDING = 0, Q_RUNNING, Q_YIELDED, Q_DONE };

/* A slot pauses once GEN_QUEUE events wait; one step adds at most a
 * verified run of proposals more. */
#define RING (GEN_QUEUE + GEN_DRAFT_MAX + 1)

struct gen_req {
    gen_sched *s;
    gen_params p; /* prompt, embd and mpos point to the copies below */
    int32_t *prompt;
    float *embd;   /* [p.n_embd_rows][n_embd], or NULL */
    int32_t *mpos; /* [p.n_prompt][4], or NULL */
    int urgent;
    void *ticket;
    int state;      /* Q_* */
    uint64_t order; /* admission order: the last admitted yields first */
    gen_slot *slot; /* Q_RUNNING and Q_YIELDED */
    gen_event ring[RING];
    int head, count;
    gen_event done_ev;
    char err[256];
    gen_reason end_req;   /* cancel or stop asked by the caller */
    pthread_cond_t cv;    /* an event or DONE arrived */
    gen_req *prev, *next; /* every request not freed */
};

struct gen_sched {
    kiln_model *m;
    kiln_context *c;
    gen_batch *b;
    gen_gate gate;
    int has_gate;
    pthread_mutex_t mu;
    pthread_cond_t cv; /* wakes the scheduler */
    pthread_t thread;
    int quit;
    gen_req *head, *tail;
    uint64_t next_order;
    kiln_kv_stats kv;
    gen_spec_stats spec;
    int32_t n_embd; /* the model's (image rows) */
};

static void wake(gen_sched *s) { pthread_cond_signal(&s->cv); }

#ifdef KILN_CHECKS
/* Under mu, on the scheduler thread, in a checked build (KILN_CHECKS,
 * base.h): a request holds a slot exactly while it runs or has yielded,
 * a yielded one's slot has given up its sequence and a running one's has
 * it, the batch's live slots are those requests', and no ring overflows. */
static void sched_check(const gen_sched *s) {
    int32_t n_held = 0;
    for (const gen_req *q = s->head; q; q = q->next) {
        KILN_ASSERT(q->state >= Q_PENDING && q->state <= Q_DONE && q->count >= 0 && q->count <= RING);
        KILN_ASSERT((q->next == NULL) == (q == s->tail) && (q->prev == NULL) == (q == s->head));
        if (q->state != Q_RUNNING && q->state != Q_YIELDED) continue;
        KILN_ASSERT(q->slot && gen_slot_suspended(q->slot) == (q->state == Q_YIELDED));
        n_held++;
    }
    KILN_ASSERT(n_held == gen_batch_n_active(s->b));
}
#define SCHED_CHECK(s) sched_check(s)
#else
#define SCHED_CHECK(s) ((void)0)
#endif

/* ---------------------------------------------------------------- events */

/* Runs on the scheduler thread during a step. */
static int on_event(void *user, const gen_event *ev, const float *logits) {
    gen_req *q = user;
    gen_sched *s = q->s;
    pthread_mutex_lock(&s->mu);
    /* only a request holding a slot hears from it, and its ring has room */
    KILN_DASSERT((q->state == Q_RUNNING || q->state == Q_YIELDED) && q->slot);
    KILN_DASSERT(ev->kind == GEN_EV_DONE || q->count < RING);
    if (ev->kind == GEN_EV_DONE) {
        q->done_ev = *ev;
        snprintf(q->err, sizeof q->err, "%s", ev->error ? ev->error : "");
        q->done_ev.error = q->err;
        q->state = Q_DONE;
        q->slot = NULL;
    } else {
        q->ring[(q->head + q->count) % RING] = *ev;
        q->count++;
        if (q->count >= GEN_QUEUE) gen_slot_pause(q->slot, 1); /* the reader lags: hold the slot */
    }
    pthread_cond_broadcast(&q->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* Under mu: ends a request that never reached the batch. */
static void done_unstarted(gen_req *q, gen_reason why) {
    memset(&q->done_ev, 0, sizeof q->done_ev);
    q->done_ev.kind = GEN_EV_DONE;
    q->done_ev.reason = why;
    q->done_ev.n_prompt = q->p.n_prompt;
    q->done_ev.error = q->err;
    q->state = Q_DONE;
    pthread_cond_broadcast(&q->cv);
}

/* ------------------------------------------------------------- the loop */

/* Under mu: starts pending requests while sequences are free, urgent ones
 * first, then in the order they came. */
static void admit(gen_sched *s) {
    for (int pass = 0; pass < 2; pass++) {
        for (gen_req *q = s->head; q; q = q->next) {
            if (q->state != Q_PENDING || (pass == 0 && !q->urgent)) continue;
            if (q->end_req != GEN_RUNNING) {
                done_unstarted(q, q->end_req);
                continue;
            }
            gen_params p = q->p;
            p.on_event = on_event;
            p.user = q;
            kiln_status st = gen_batch_add(s->b, &p, -1, &q->slot);
            if (st == KILN_ERR_STATE) return; /* no free sequence */
            if (st != KILN_OK) {
                snprintf(q->err, sizeof q->err, "%s",
                         st == KILN_ERR_CONTEXT_FULL ? "the prompt does not fit the context"
                         : st == KILN_ERR_NOMEM      ? "out of memory"
                                                     : kiln_last_error());
                done_unstarted(q, GEN_FAILED);
                continue;
            }
            q->state = Q_RUNNING;
            q->order = s->next_order++;
        }
    }
}

/* Under mu: the caller's ends, the gate's cancellations and yields, and
 * reader back-pressure, passed on to the slots. */
static void tend(gen_sched *s) {
    gen_req *victim = NULL;
    int urgent_waits = s->has_gate && s->gate.urgent_waiting(s->gate.user);
    for (gen_req *q = s->head; q; q = q->next) {
        if (q->state != Q_RUNNING && q->state != Q_YIELDED) continue;
        if (s->has_gate && q->ticket && q->end_req == GEN_RUNNING && s->gate.cancelled(s->gate.user, q->ticket))
            q->end_req = GEN_CANCELLED;
        if (q->end_req == GEN_CANCELLED)
            gen_slot_cancel(q->slot);
        else if (q->end_req == GEN_STOP)
            gen_slot_stop(q->slot);
        if (q->end_req != GEN_RUNNING) continue;
        if (q->state == Q_RUNNING) {
            gen_slot_pause(q->slot, q->count >= GEN_QUEUE);
            if (urgent_waits && !q->urgent && q->ticket && (!victim || q->order > victim->order)) victim = q;
        } else if (s->gate.regained(s->gate.user, q->ticket) && gen_slot_resume(s->b, q->slot) == KILN_OK) {
            q->state = Q_RUNNING;
            q->order = s->next_order++;
        }
    }
    if (victim) { /* its sequence first, then its place: the urgent request finds both free */
        gen_slot_suspend(s->b, victim->slot);
        victim->state = Q_YIELDED;
        s->gate.yield(s->gate.user, victim->ticket);
    }
}

/* Under mu: requests that hold or wait for a sequence. */
static int n_live(const gen_sched *s, int *yielded) {
    int n = 0;
    *yielded = 0;
    for (const gen_req *q = s->head; q; q = q->next) {
        n += q->state != Q_DONE;
        *yielded |= q->state == Q_YIELDED;
    }
    return n;
}

static void *sched_main(void *arg) {
    gen_sched *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->quit) {
        admit(s);
        tend(s);
        SCHED_CHECK(s);
        if (gen_batch_n_ready(s->b) == 0) {
            int yielded;
            if (n_live(s, &yielded) == 0) {
                pthread_cond_wait(&s->cv, &s->mu);
            } else { /* readers, the gate and yielded requests are polled */
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += (yielded ? 2 : 10) * 1000000L;
                if (ts.tv_nsec >= 1000000000L) {
                    ts.tv_sec++;
                    ts.tv_nsec -= 1000000000L;
                }
                pthread_cond_timedwait(&s->cv, &s->mu, &ts);
            }
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        gen_batch_step(s->b); /* a failure ends its slots; their events say why */
        kiln_kv_stats kv;
        kiln_kv_get_stats(s->c, &kv);
        gen_spec_stats sp;
        gen_batch_spec_stats(s->b, &sp);
        pthread_mutex_lock(&s->mu);
        s->kv = kv;
        s->spec = sp;
    }
    for (gen_req *q = s->head; q; q = q->next)
        if (q->state == Q_PENDING) done_unstarted(q, GEN_CANCELLED);
    pthread_mutex_unlock(&s->mu);
    gen_batch_free(s->b); /* running slots end cancelled, through on_event */
    return NULL;
}

/* ------------------------------------------------------------------ API */

kiln_status gen_sched_new(kiln_model *m, kiln_context *c, int32_t prefill_chunk, const gen_gate *gate,
                          gen_sched **out) {
    *out = NULL;
    gen_sched *s = calloc(1, sizeof *s);
    if (!s) return KILN_ERR_NOMEM;
    s->m = m;
    s->c = c;
    kiln_model_info info;
    kiln_model_get_info(m, &info);
    s->n_embd = info.n_embd_inp;
    if (gate) {
        s->gate = *gate;
        s->has_gate = 1;
    }
    kiln_status st = gen_batch_new(m, c, prefill_chunk, &s->b);
    if (st != KILN_OK) {
        free(s);
        return st;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->thread, NULL, sched_main, s)) {
        gen_batch_free(s->b);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->cv);
        free(s);
        return KILN_ERR_NOMEM;
    }
    *out = s;
    return KILN_OK;
}

void gen_sched_set_proposer(gen_sched *s, const gen_proposer *p) {
    pthread_mutex_lock(&s->mu);
    gen_batch_set_proposer(s->b, p);
    pthread_mutex_unlock(&s->mu);
}

void gen_sched_free(gen_sched *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->quit = 1;
    wake(s);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

kiln_status gen_sched_submit(gen_sched *s, const gen_params *p, int urgent, void *ticket, gen_req **out) {
    *out = NULL;
    if (!p || !p->prompt || p->n_prompt < 1) return KILN_ERR_INVALID_ARG;
    gen_req *q = calloc(1, sizeof *q);
    if (!q) return KILN_ERR_NOMEM;
    q->prompt = malloc((size_t)p->n_prompt * sizeof *q->prompt);
    if (!q->prompt) {
        free(q);
        return KILN_ERR_NOMEM;
    }
    memcpy(q->prompt, p->prompt, (size_t)p->n_prompt * sizeof *q->prompt);
    q->s = s;
    q->p = *p;
    q->p.prompt = q->prompt;
    if (p->embd && p->n_embd_rows > 0) {
        const size_t bytes = (size_t)p->n_embd_rows * (size_t)s->n_embd * sizeof(float);
        if ((q->embd = base_malloc(bytes))) memcpy(q->embd, p->embd, bytes);
    }
    if (p->mpos && (q->mpos = base_malloc((size_t)p->n_prompt * 4 * sizeof *q->mpos)))
        memcpy(q->mpos, p->mpos, (size_t)p->n_prompt * 4 * sizeof *q->mpos);
    q->p.embd = q->embd;
    q->p.mpos = q->mpos;
    if ((p->embd && p->n_embd_rows > 0 && !q->embd) || (p->mpos && !q->mpos)) {
        free(q->embd);
        free(q->mpos);
        free(q->prompt);
        free(q);
        return KILN_ERR_NOMEM;
    }
    q->urgent = urgent;
    q->ticket = ticket;
    pthread_cond_init(&q->cv, NULL);
    pthread_mutex_lock(&s->mu);
    int quit = s->quit;
    if (!quit) {
        q->prev = s->tail;
        if (s->tail)
            s->tail->next = q;
        else
            s->head = q;
        s->tail = q;
        wake(s);
    }
    pthread_mutex_unlock(&s->mu);
    if (quit) {
        pthread_cond_destroy(&q->cv);
        free(q->prompt);
        free(q->embd);
        free(q->mpos);
        free(q);
        return KILN_ERR_STATE;
    }
    *out = q;
    return KILN_OK;
}

int gen_req_next(gen_req *q, gen_event *ev, int timeout_ms) {
    gen_sched *s = q->s;
    struct timespec until;
    if (timeout_ms > 0) {
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += timeout_ms / 1000;
        until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&s->mu);
    for (;;) {
        if (q->count > 0) {
            *ev = q->ring[q->head];
            q->head = (q->head + 1) % RING;
            if (q->count-- == GEN_QUEUE) wake(s); /* its slot may go on */
            break;
        }
        if (q->state == Q_DONE) {
            *ev = q->done_ev;
            break;
        }
        if (timeout_ms == 0) {
            pthread_mutex_unlock(&s->mu);
            return 0;
        }
        if (timeout_ms < 0)
            pthread_cond_wait(&q->cv, &s->mu);
        else if (pthread_cond_timedwait(&q->cv, &s->mu, &until) != 0 && q->count == 0 && q->state != Q_DONE) {
            pthread_mutex_unlock(&s->mu);
            return 0;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return 1;
}

static void ask_end(gen_req *q, gen_reason why) {
    gen_sched *s = q->s;
    pthread_mutex_lock(&s->mu);
    if (q->end_req == GEN_RUNNING && q->state != Q_DONE) {
        q->end_req = why;
        wake(s);
    }
    pthread_mutex_unlock(&s->mu);
}

void gen_req_cancel(gen_req *q) { ask_end(q, GEN_CANCELLED); }

void gen_sched_cancel_all(gen_sched *s) {
    pthread_mutex_lock(&s->mu);
    for (gen_req *q = s->head; q; q = q->next)
        if (q->end_req == GEN_RUNNING && q->state != Q_DONE) q->end_req = GEN_CANCELLED;
    wake(s);
    pthread_mutex_unlock(&s->mu);
}
void gen_req_stop(gen_req *q) { ask_end(q, GEN_STOP); }

void gen_req_free(gen_req *q) {
    if (!q) return;
    gen_sched *s = q->s;
    pthread_mutex_lock(&s->mu);
    if (q->state != Q_DONE && q->end_req == GEN_RUNNING) q->end_req = GEN_CANCELLED;
    wake(s);
    while (q->state != Q_DONE) pthread_cond_wait(&q->cv, &s->mu);
    if (q->prev)
        q->prev->next = q->next;
    else
        s->head = q->next;
    if (q->next)
        q->next->prev = q->prev;
    else
        s->tail = q->prev;
    pthread_mutex_unlock(&s->mu);
    pthread_cond_destroy(&q->cv);
    free(q->prompt);
    free(q->embd);
    free(q->mpos);
    free(q);
}

void gen_sched_get_stats(gen_sched *s, gen_sched_stats *out) {
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&s->mu);
    for (const gen_req *q = s->head; q; q = q->next) {
        out->n_running += q->state == Q_RUNNING;
        out->n_waiting += q->state == Q_PENDING || q->state == Q_YIELDED;
    }
    out->kv = s->kv;
    out->spec = s->spec;
    pthread_mutex_unlock(&s->mu);
}
