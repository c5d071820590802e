/* Engine lifecycle with a stand-in family whose loads, releases and runs
 * block on latches the test opens, so every ordering is deterministic.
 * Every wait is bounded (latches time out, polls give up, alarm() ends a
 * hung run). */
#include "engine/engine.h"
#include "model/model.h" /* model_fail: how a family reports an error */
#include "testutil.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MODEL_FILE "test_engine.c" /* any regular file ending in .c is a "model" */
#define LIMIT_MS 5000

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Polls cond every millisecond for up to LIMIT_MS, then checks it. */
#define WAIT_FOR(cond)                                                \
    do {                                                              \
        for (int w_ = 0; !(cond) && w_ < LIMIT_MS; w_++) sleep_ms(1); \
        CHECK(cond);                                                  \
    } while (0)

/* ---------------------------------------------------------------- latch */

typedef struct latch {
    atomic_int open;
} latch;

/* Waits until l opens: 0.  With r, gives up when the work is cancelled: 1.
 * After LIMIT_MS: -1. */
static int latch_wait(latch *l, const engine_run *r) {
    for (int i = 0; i < LIMIT_MS; i++) {
        if (atomic_load(&l->open)) return 0;
        if (r && engine_cancelled(r)) return 1;
        sleep_ms(1);
    }
    return -1;
}

/* ------------------------------------------------------- the stand-in */

typedef struct fake {
    pthread_mutex_t mu;
    char log[256];          /* runs ("A0") and releases ("U") in order */
    int runs_active;        /* native runs in progress */
    int release_during_run; /* releases that happened while a run was active */
    int loads, unloads;     /* successful ones */
    int leases;             /* store leases held */
    latch *load_hold;       /* load blocks here when set */
    int load_obeys_cancel;
    atomic_int load_entered;
    kiln_status load_result;
    int unload_fails; /* how many next releases fail */
} fake;

static fake F = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void fake_reset(void) {
    pthread_mutex_lock(&F.mu);
    F.log[0] = 0;
    F.runs_active = F.release_during_run = F.loads = F.unloads = F.leases = 0;
    F.load_hold = NULL;
    F.load_obeys_cancel = 0;
    atomic_store(&F.load_entered, 0);
    F.load_result = KILN_OK;
    F.unload_fails = 0;
    pthread_mutex_unlock(&F.mu);
}

static void fake_log(const char *s) {
    pthread_mutex_lock(&F.mu);
    if (F.log[0]) strncat(F.log, " ", sizeof F.log - strlen(F.log) - 1);
    strncat(F.log, s, sizeof F.log - strlen(F.log) - 1);
    pthread_mutex_unlock(&F.mu);
}

static int fake_count(const int *field) {
    pthread_mutex_lock(&F.mu);
    int v = *field;
    pthread_mutex_unlock(&F.mu);
    return v;
}

static kiln_status fake_check(void *user, const char *path) {
    size_t n = strlen(path);
    if (n < 2 || strcmp(path + n - 2, ".c") != 0) return model_fail(NULL, KILN_ERR_UNSUPPORTED, "not a stand-in model");
    return KILN_OK;
}

static kiln_status fake_load(void *user, const char *path, kiln_engine_backend b, engine_run *r, void **model) {
    atomic_fetch_add(&F.load_entered, 1);
    if (F.load_hold) {
        int w = latch_wait(F.load_hold, F.load_obeys_cancel ? r : NULL);
        if (w == 1) return model_fail(NULL, KILN_ERR_CANCELLED, "stand-in load saw the cancel");
        if (w < 0) return model_fail(NULL, KILN_ERR_INTERNAL, "stand-in load latch timed out");
    }
    if (F.load_result != KILN_OK) return model_fail(NULL, F.load_result, "stand-in metadata is broken");
    *model = strdup(path);
    pthread_mutex_lock(&F.mu);
    F.loads++;
    pthread_mutex_unlock(&F.mu);
    return KILN_OK;
}

static kiln_status fake_unload(void *user, void *model) {
    pthread_mutex_lock(&F.mu);
    F.release_during_run += F.runs_active > 0;
    int fail = F.unload_fails > 0;
    if (fail)
        F.unload_fails--;
    else
        F.unloads++;
    pthread_mutex_unlock(&F.mu);
    if (fail) return model_fail(NULL, KILN_ERR_IO, "stand-in release failed");
    fake_log("U");
    free(model);
    return KILN_OK;
}

/* A stand-in request: `runs` native runs; run i blocks on hold[i] if set. */
typedef struct freq {
    const char *name;
    int runs;
    latch *hold[4];
    int obey_cancel; /* a blocked run notices cancellation */
    int urgent;
    kiln_engine_cancel *cancel;
    kiln_engine *e;
    atomic_int entered; /* runs started */
    kiln_status st;
    pthread_t th;
} freq;

static kiln_status fake_run(void *user, void *model, int task, void *req, engine_run *r) {
    freq *q = req;
    for (int i = 0; i < q->runs; i++) {
        kiln_status st = engine_yield(r);
        if (st != KILN_OK) return st;
        char tag[32];
        snprintf(tag, sizeof tag, "%s%d", q->name, i);
        fake_log(tag);
        pthread_mutex_lock(&F.mu);
        F.runs_active++;
        pthread_mutex_unlock(&F.mu);
        atomic_fetch_add(&q->entered, 1);
        int w = q->hold[i] ? latch_wait(q->hold[i], q->obey_cancel ? r : NULL) : 0;
        pthread_mutex_lock(&F.mu);
        F.runs_active--;
        pthread_mutex_unlock(&F.mu);
        if (w == 1) return model_fail(NULL, KILN_ERR_CANCELLED, "stand-in run saw the cancel");
        if (w < 0) return model_fail(NULL, KILN_ERR_INTERNAL, "stand-in run latch timed out");
    }
    return KILN_OK;
}

static const engine_ops fake_ops = {.check = fake_check, .load = fake_load, .unload = fake_unload, .run = fake_run};
static const char *const fake_tasks[] = {"generate", NULL};
static const kiln_engine_family fake_family = {KILN_ENGINE_LLM, "standin", "Stand-in", fake_tasks, 3u, 1};

static void *request_thread(void *arg) {
    freq *q = arg;
    q->st = engine_request(q->e, ENGINE_TASK_GENERATE, q, q->urgent, q->cancel);
    return NULL;
}

static void spawn(freq *q, kiln_engine *e) {
    q->e = e;
    q->st = KILN_ERR_INTERNAL;
    pthread_create(&q->th, NULL, request_thread, q);
}

static kiln_status run_now(kiln_engine *e, freq *q) {
    q->e = e;
    return engine_request(e, ENGINE_TASK_GENERATE, q, q->urgent, q->cancel);
}

/* ----------------------------------------------------- fake store hooks */

static kiln_status store_acquire(void *user, const char *family, const char *name, char *path, size_t cap,
                                 void **lease) {
    if (strcmp(name, "store:tiny") != 0) return model_fail(NULL, KILN_ERR_NOT_FOUND, "%s: not in the store", name);
    snprintf(path, cap, "%s", MODEL_FILE);
    pthread_mutex_lock(&F.mu);
    F.leases++;
    pthread_mutex_unlock(&F.mu);
    *lease = &F;
    return KILN_OK;
}

static void store_release(void *user, void *lease) {
    pthread_mutex_lock(&F.mu);
    F.leases--;
    pthread_mutex_unlock(&F.mu);
}

static const kiln_engine_store fake_store = {store_acquire, store_release, NULL};

/* ------------------------------------------------------- event recorder */

typedef struct events {
    pthread_mutex_t mu;
    int n;
    kiln_engine_state st[64];
    kiln_status err[64];
    char msg[64][160];
} events;

static void on_status(kiln_engine *e, const kiln_engine_event *ev, void *user) {
    events *x = user;
    pthread_mutex_lock(&x->mu);
    if (x->n < 64) {
        x->st[x->n] = ev->state;
        x->err[x->n] = ev->error;
        snprintf(x->msg[x->n], sizeof x->msg[0], "%s", ev->message);
        x->n++;
    }
    pthread_mutex_unlock(&x->mu);
}

static int ev_count(events *x) {
    pthread_mutex_lock(&x->mu);
    int n = x->n;
    pthread_mutex_unlock(&x->mu);
    return n;
}

/* The recorded states as "loading loaded ..." from index from on. */
static const char *ev_states(events *x, int from, char *buf, size_t cap) {
    buf[0] = 0;
    pthread_mutex_lock(&x->mu);
    for (int i = from; i < x->n; i++) {
        if (buf[0]) strncat(buf, " ", cap - strlen(buf) - 1);
        strncat(buf, kiln_engine_state_str(x->st[i]), cap - strlen(buf) - 1);
    }
    pthread_mutex_unlock(&x->mu);
    return buf;
}

static kiln_engine *make_engine(events *x) {
    kiln_engine *e = NULL;
    CHECK(engine_create_with(&fake_family, &fake_ops, KILN_ENGINE_BACKEND_AUTO, &e) == KILN_OK);
    if (x) {
        memset(x, 0, sizeof *x);
        pthread_mutex_init(&x->mu, NULL);
        CHECK(kiln_engine_set_status_fn(e, on_status, x) == KILN_OK);
    }
    CHECK(kiln_engine_set_store(e, &fake_store) == KILN_OK);
    return e;
}

static kiln_engine *loaded_engine(events *x, const char *model) {
    kiln_engine *e = make_engine(x);
    CHECK(kiln_engine_start(e) == KILN_OK);
    CHECK(kiln_engine_load(e, model, NULL) == KILN_OK);
    CHECK(kiln_engine_wait_idle(e, LIMIT_MS) == KILN_OK);
    return e;
}

static int n_waiting(kiln_engine *e) {
    kiln_engine_observation o;
    kiln_engine_observe(e, &o);
    return o.n_waiting;
}

static int has_model(kiln_engine *e) {
    kiln_engine_observation o;
    kiln_engine_observe(e, &o);
    return o.model[0] != 0;
}

static void log_is(const char *want) {
    pthread_mutex_lock(&F.mu);
    CHECKF(strcmp(F.log, want) == 0, "log '%s', want '%s'", F.log, want);
    pthread_mutex_unlock(&F.mu);
}

/* ---------------------------------------------------------------- tests */

static void test_registry(void) {
    CHECK(kiln_engine_family_count() >= 2);
    const kiln_engine_family *llm = kiln_engine_family_find("llm");
    CHECK(llm && llm->id == KILN_ENGINE_LLM && llm->available);
    CHECK(llm && strcmp(llm->tasks[0], "generate") == 0 && strcmp(llm->tasks[1], "embed") == 0 && !llm->tasks[2]);
    CHECK(llm && (llm->backends & (1u << KILN_ENGINE_BACKEND_CPU)));
    const kiln_engine_family *emb = kiln_engine_family_find("embedding");
    CHECK(emb && emb->id == KILN_ENGINE_EMBEDDING && emb->available && strcmp(emb->tasks[0], "embed") == 0);
    CHECK(kiln_engine_family_find("no-such-family") == NULL);
    CHECK(kiln_engine_family_at(kiln_engine_family_count()) == NULL);
    for (int i = 0; i < kiln_engine_family_count(); i++) CHECK(kiln_engine_family_at(i)->display_name[0]);
    kiln_engine *e = NULL;
    CHECK(kiln_engine_create(KILN_ENGINE_LLM, (kiln_engine_backend)7, &e) == KILN_ERR_INVALID_ARG && !e);
}

/* Callbacks in order, validation on the call, observation, stop rules. */
static void test_lifecycle(void) {
    fake_reset();
    events x;
    kiln_engine *e = make_engine(&x);
    kiln_engine_observation o;
    kiln_engine_observe(e, &o);
    CHECK(o.state == KILN_ENGINE_CREATED && o.backend == KILN_ENGINE_BACKEND_CPU && !o.model[0]);
    CHECK(kiln_engine_load(e, MODEL_FILE, NULL) == KILN_ERR_STATE); /* not started */
    CHECK(kiln_engine_start(e) == KILN_OK);
    CHECK(kiln_engine_start(e) == KILN_OK); /* again: no-op */
    CHECK(kiln_engine_set_status_fn(e, on_status, &x) == KILN_ERR_STATE);
    CHECK(kiln_engine_load(e, "missing.gguf", NULL) == KILN_ERR_NOT_FOUND);
    CHECK(strstr(kiln_last_error(), "missing.gguf") != NULL);
    CHECK(kiln_engine_load(e, "testutil.h", NULL) == KILN_ERR_UNSUPPORTED);
    CHECK(kiln_engine_load(e, "store:absent", NULL) == KILN_ERR_NOT_FOUND);
    CHECK(fake_count(&F.leases) == 0);
    freq q = {.name = "R", .runs = 1};
    CHECK(run_now(e, &q) == KILN_ERR_STATE); /* never loads implicitly */
    CHECK(fake_count(&F.loads) == 0);

    CHECK(kiln_engine_load(e, "store:tiny", NULL) == KILN_OK);
    CHECK(kiln_engine_load(e, MODEL_FILE, NULL) == KILN_ERR_STATE); /* one model at a time */
    CHECK(kiln_engine_wait_idle(e, LIMIT_MS) == KILN_OK);
    kiln_engine_observe(e, &o);
    CHECK(o.state == KILN_ENGINE_LOADED && strcmp(o.model, "store:tiny") == 0);
    CHECK(fake_count(&F.leases) == 1);
    CHECK(run_now(e, &q) == KILN_OK);
    CHECK(kiln_engine_unload(e, NULL) == KILN_OK);
    CHECK(kiln_engine_load(e, MODEL_FILE, NULL) == KILN_OK); /* queued behind the unload */
    CHECK(kiln_engine_wait_idle(e, LIMIT_MS) == KILN_OK);
    CHECK(fake_count(&F.leases) == 0);
    kiln_engine_observe(e, &o);
    CHECK(strcmp(o.model, MODEL_FILE) == 0);
    CHECK(kiln_engine_stop(e, NULL) == KILN_OK);
    CHECK(kiln_engine_stop(e, NULL) == KILN_OK); /* second stop: no-op */
    CHECK(kiln_engine_start(e) == KILN_OK);      /* start after stop: no-op */
    CHECK(kiln_engine_load(e, MODEL_FILE, NULL) == KILN_ERR_STATE);
    CHECK(kiln_engine_unload(e, NULL) == KILN_ERR_STATE);
    CHECK(kiln_engine_wait_idle(e, LIMIT_MS) == KILN_OK);
    CHECK(run_now(e, &q) == KILN_ERR_STATE);
    kiln_engine_observe(e, &o);
    CHECK(o.state == KILN_ENGINE_STOPPED && !o.model[0]);
    char buf[512];
    CHECKF(strcmp(ev_states(&x, 0, buf, sizeof buf),
                  "starting started loading loaded unloading unloaded loading loaded stopping stopped") == 0,
           "events: %s", buf);
    CHECK(fake_count(&F.loads) == 2 && fake_count(&F.unloads) == 2);
    CHECK(kiln_engine_destroy(e, NULL) == KILN_OK);
    kiln_engine_free(e);

    /* Never started: stop and destroy have nothing to wait for. */
    e = make_engine(NULL);
    CHECK(kiln_engine_destroy(e, NULL) == KILN_OK);
    kiln_engine_observe(e, &o);
    CHECK(o.state == KILN_ENGINE_STOPPED);
    kiln_engine_free(e);
}

/* An urgent request goes ahead of a queued one. */
static void test_urgent_first(void) {
    fake_reset();
    kiln_engine *e = loaded_engine(NULL, MODEL_FILE);
    latch hold = {0};
    freq a = {.name = "A", .runs = 1, .hold = {&hold}};
    freq b = {.name = "B", .runs = 1};
    freq c = {.name = "C", .runs = 1, .urgent = 1};
    spawn(&a, e);
    WAIT_FOR(atomic_load(&a.entered) == 1);
    spawn(&b, e);
    WAIT_FOR(n_waiting(e) == 1);
    spawn(&c, e);
    WAIT_FOR(n_waiting(e) == 2);
    atomic_store(&hold.open, 1);
    pthread_join(a.th, NULL);
    pthread_join(b.th, NULL);
    pthread_join(c.th, NULL);
    CHECK(a.st == KILN_OK && b.st == KILN_OK && c.st == KILN_OK);
    log_is("A0 C0 B0");
    kiln_engine_free(e);
}

/* A request of several runs yields to the urgent waiter, takes the gate
 * back before the older normal waiter, and an unload accepted meanwhile
 * runs only after all admitted requests; new requests are refused. */
static void test_yield_and_drain(void) {
    fake_reset();
    events x;
    kiln_engine *e = loaded_engine(&x, MODEL_FILE);
    int base = ev_count(&x);
    latch hold = {0};
    freq a = {.name = "A", .runs = 2, .hold = {&hold}};
    freq b = {.name = "B", .runs = 1};
    freq c = {.name = "C", .runs = 1, .urgent = 1};
    spawn(&a, e);
    WAIT_FOR(atomic_load(&a.entered) == 1);
    spawn(&b, e);
    WAIT_FOR(n_waiting(e) == 1);
    spawn(&c, e);
    WAIT_FOR(n_waiting(e) == 2);
    CHECK(kiln_engine_unload(e, NULL) == KILN_OK);
    freq d = {.name = "D", .runs = 1, .urgent = 1};
    CHECK(run_now(e, &d) == KILN_ERR_STATE); /* refused once teardown is accepted */
    WAIT_FOR(ev_count(&x) == base + 1);      /* unloading published ... */
    sleep_ms(20);
    CHECK(fake_count(&F.unloads) == 0); /* ... but nothing released yet */
    atomic_store(&hold.open, 1);
    pthread_join(a.th, NULL);
    pthread_join(b.th, NULL);
    pthread_join(c.th, NULL);
    CHECK(a.st == KILN_OK && b.st == KILN_OK && c.st == KILN_OK);
    CHECK(kiln_engine_wait_idle(e, LIMIT_MS) == KILN_OK);
    log_is("A0 C0 A1 B0 U");
    CHECK(fake_count(&F.release_during_run) == 0);
    char buf[256];
    CHECKF(strcmp(ev_states(&x, base, buf, sizeof buf), "unloading unloaded") == 0, "events: %s", buf);
    kiln_engine_free(e);
}

/* Teardown with a token fired later cancels the admitted requests (the
 * running one and a waiting one); without it, they would run on. */
static void test_teardown_cancel(void) {
    fake_reset();
    kiln_engine *e = loaded_engine(NULL, MODEL_FILE);
    latch hold = {0};
    freq a = {.name = "A", .runs = 1, .hold = {&hold}, .obey_cancel = 1};
    freq b = {.name = "B", .runs = 1};
    spawn(&a, e);
    WAIT_FOR(atomic_load(&a.entered) == 1);
    spawn(&b, e);
    WAIT_FOR(n_waiting(e) == 1);
    kiln_engine_cancel *tok = kiln_engine_cancel_new();
    CHECK(kiln_engine_unload(e, tok) == KILN_OK);
    kiln_engine_cancel_free(tok); /* the engine keeps its own reference */
    sleep_ms(20);
    kiln_engine_observation o;
    kiln_engine_observe(e, &o);
    CHECK(o.n_active == 2 && fake_count(&F.unloads) == 0); /* not cancelled yet */
    kiln_engine_cancel_fire(tok);
    pthread_join(a.th, NULL);
    pthread_join(b.th, NULL);
    CHECK(a.st == KILN_ERR_CANCELLED && b.st == KILN_ERR_CANCELLED);
    CHECK(kiln_engine_wait_idle(e, LIMIT_MS) == KILN_OK);
    CHECK(fake_count(&F.unloads) == 1 && !has_model(e));
    log_is("A0 U");

    /* Cancelled stop while native work ignores the cancel: memory is
     * released, and STOPPED reported, only after the run returns. */
    fake_reset();
    events x;
    kiln_engine *e2 = loaded_engine(&x, MODEL_FILE);
    latch hold2 = {0};
    freq n = {.name = "N", .runs = 1, .hold = {&hold2}};
    spawn(&n, e2);
    WAIT_FOR(atomic_load(&n.entered) == 1);
    tok = kiln_engine_cancel_new();
    kiln_engine_cancel_fire(tok); /* cancelled at the call */
    CHECK(kiln_engine_stop(e2, tok) == KILN_OK);
    kiln_engine_cancel_free(tok);
    sleep_ms(30);
    kiln_engine_observe(e2, &o);
    CHECK(o.state == KILN_ENGINE_STOPPING && o.model[0] && fake_count(&F.unloads) == 0);
    atomic_store(&hold2.open, 1);
    pthread_join(n.th, NULL);
    CHECK(kiln_engine_destroy(e2, NULL) == KILN_OK);
    CHECK(fake_count(&F.release_during_run) == 0);
    log_is("N0 U");
    kiln_engine_observe(e2, &o);
    CHECK(o.state == KILN_ENGINE_STOPPED);
    kiln_engine_free(e2);
    kiln_engine_free(e);
}

/* A request's own token cancels it while it waits for the gate. */
static void test_request_cancel(void) {
    fake_reset();
    kiln_engine *e = loaded_engine(NULL, MODEL_FILE);
    latch hold = {0};
    freq a = {.name = "A", .runs = 1, .hold = {&hold}};
    kiln_engine_cancel *tok = kiln_engine_cancel_new();
    freq b = {.name = "B", .runs = 1, .cancel = tok};
    spawn(&a, e);
    WAIT_FOR(atomic_load(&a.entered) == 1);
    spawn(&b, e);
    WAIT_FOR(n_waiting(e) == 1);
    kiln_engine_cancel_fire(tok);
    pthread_join(b.th, NULL);
    CHECK(b.st == KILN_ERR_CANCELLED && atomic_load(&b.entered) == 0);
    CHECK(n_waiting(e) == 0);
    atomic_store(&hold.open, 1);
    pthread_join(a.th, NULL);
    CHECK(a.st == KILN_OK);
    kiln_engine_cancel_free(tok);
    kiln_engine_free(e);
}

/* Load cancellation: seen by the loader; missed by the loader (the engine
 * releases the returned model); fired before the load runs. */
static void test_load_cancel(void) {
    fake_reset();
    events x;
    kiln_engine *e = make_engine(&x);
    CHECK(kiln_engine_start(e) == KILN_OK);
    latch hold = {0};
    F.load_hold = &hold;
    F.load_obeys_cancel = 1;
    kiln_engine_cancel *tok = kiln_engine_cancel_new();
    CHECK(kiln_engine_load(e, "store:tiny", tok) == KILN_OK);
    WAIT_FOR(atomic_load(&F.load_entered) == 1);
    kiln_engine_cancel_fire(tok);
    CHECK(kiln_engine_wait_idle(e, LIMIT_MS) == KILN_ERR_CANCELLED);
    CHECK(!has_model(e) && fake_count(&F.leases) == 0 && fake_count(&F.loads) == 0);
    kiln_engine_cancel_free(tok);

    F.load_obeys_cancel = 0;
    tok = kiln_engine_cancel_new();
    CHECK(kiln_engine_load(e, "store:tiny", tok) == KILN_OK);
    WAIT_FOR(atomic_load(&F.load_entered) == 2);
    kiln_engine_cancel_fire(tok);
    atomic_store(&hold.open, 1);
    CHECK(kiln_engine_wait_idle(e, LIMIT_MS) == KILN_ERR_CANCELLED);
    CHECK(!has_model(e) && fake_count(&F.leases) == 0);
    CHECK(fake_count(&F.loads) == 1 && fake_count(&F.unloads) == 1);
    kiln_engine_cancel_free(tok);

    tok = kiln_engine_cancel_new();
    kiln_engine_cancel_fire(tok);
    CHECK(kiln_engine_load(e, MODEL_FILE, tok) == KILN_OK); /* accepted, then abandoned */
    kiln_engine_cancel_free(tok);
    CHECK(kiln_engine_wait_idle(e, LIMIT_MS) == KILN_ERR_CANCELLED);
    CHECK(atomic_load(&F.load_entered) == 2);
    char buf[512];
    CHECKF(strcmp(ev_states(&x, 0, buf, sizeof buf), "starting started loading failed loading failed loading failed") ==
               0,
           "events: %s", buf);
    CHECK(x.err[3] == KILN_ERR_CANCELLED && x.err[5] == KILN_ERR_CANCELLED && x.err[7] == KILN_ERR_CANCELLED);
    /* Still usable. */
    CHECK(kiln_engine_load(e, MODEL_FILE, NULL) == KILN_OK);
    CHECK(kiln_engine_wait_idle(e, LIMIT_MS) == KILN_OK && has_model(e));
    kiln_engine_free(e);
}

/* A failing load reports FAILED with the loader's error; the engine stays
 * usable. */
static void test_load_failure(void) {
    fake_reset();
    events x;
    kiln_engine *e = make_engine(&x);
    CHECK(kiln_engine_start(e) == KILN_OK);
    F.load_result = KILN_ERR_FORMAT;
    CHECK(kiln_engine_load(e, "store:tiny", NULL) == KILN_OK);
    CHECK(kiln_engine_wait_idle(e, LIMIT_MS) == KILN_ERR_FORMAT);
    CHECK(strstr(kiln_last_error(), "stand-in metadata is broken") != NULL);
    CHECK(ev_count(&x) == 4 && x.st[3] == KILN_ENGINE_FAILED && x.err[3] == KILN_ERR_FORMAT);
    CHECK(strstr(x.msg[3], "store:tiny") && strstr(x.msg[3], "metadata is broken"));
    kiln_engine_observation o;
    kiln_engine_observe(e, &o);
    CHECK(o.state == KILN_ENGINE_FAILED && o.error == KILN_ERR_FORMAT && !o.model[0]);
    CHECK(fake_count(&F.leases) == 0);
    F.load_result = KILN_OK;
    CHECK(kiln_engine_load(e, MODEL_FILE, NULL) == KILN_OK);
    CHECK(kiln_engine_wait_idle(e, LIMIT_MS) == KILN_OK && has_model(e));
    kiln_engine_free(e);
}

/* A failed release keeps the model and lease and fences loads and
 * requests until an explicit unload retries it. */
static void test_failed_release(void) {
    fake_reset();
    events x;
    kiln_engine *e = loaded_engine(&x, "store:tiny");
    F.unload_fails = 1;
    CHECK(kiln_engine_unload(e, NULL) == KILN_OK);
    CHECK(kiln_engine_wait_idle(e, LIMIT_MS) == KILN_ERR_IO);
    kiln_engine_observation o;
    kiln_engine_observe(e, &o);
    CHECK(o.state == KILN_ENGINE_FAILED && o.error == KILN_ERR_IO && strcmp(o.model, "store:tiny") == 0);
    CHECK(fake_count(&F.leases) == 1);
    CHECK(kiln_engine_load(e, MODEL_FILE, NULL) == KILN_ERR_STATE);
    freq q = {.name = "Q", .runs = 1};
    CHECK(run_now(e, &q) == KILN_ERR_STATE);
    CHECK(kiln_engine_unload(e, NULL) == KILN_OK); /* retry */
    CHECK(kiln_engine_wait_idle(e, LIMIT_MS) == KILN_OK);
    CHECK(!has_model(e) && fake_count(&F.leases) == 0);
    CHECK(kiln_engine_load(e, MODEL_FILE, NULL) == KILN_OK);
    CHECK(kiln_engine_wait_idle(e, LIMIT_MS) == KILN_OK && has_model(e));
    char buf[512];
    CHECKF(strcmp(ev_states(&x, 0, buf, sizeof buf),
                  "starting started loading loaded unloading failed unloading unloaded loading loaded") == 0,
           "events: %s", buf);
    kiln_engine_free(e);
}

typedef struct destroyer {
    kiln_engine *e;
    kiln_status st;
    atomic_int done;
    pthread_t th;
} destroyer;

static void *destroy_thread(void *arg) {
    destroyer *d = arg;
    d->st = kiln_engine_destroy(d->e, NULL);
    atomic_store(&d->done, 1);
    return NULL;
}

/* destroy = stop + wait for release; repeated and concurrent calls share
 * the first cleanup's outcome. */
static void test_destroy(void) {
    fake_reset();
    kiln_engine *e = loaded_engine(NULL, "store:tiny");
    F.unload_fails = 100;
    CHECK(kiln_engine_destroy(e, NULL) == KILN_ERR_IO);
    CHECK(kiln_engine_destroy(e, NULL) == KILN_ERR_IO);
    CHECK(has_model(e) && fake_count(&F.leases) == 1);
    pthread_mutex_lock(&F.mu);
    F.unload_fails = 0;
    pthread_mutex_unlock(&F.mu);
    CHECK(kiln_engine_stop(e, NULL) == KILN_OK); /* explicit retry of the release */
    CHECK(kiln_engine_wait_idle(e, LIMIT_MS) == KILN_OK);
    CHECK(!has_model(e) && fake_count(&F.leases) == 0);
    CHECK(kiln_engine_destroy(e, NULL) == KILN_ERR_IO); /* still the original outcome */
    kiln_engine_free(e);

    /* Two concurrent destroys wait for the running request to finish. */
    fake_reset();
    e = loaded_engine(NULL, MODEL_FILE);
    latch hold = {0};
    freq a = {.name = "A", .runs = 1, .hold = {&hold}};
    spawn(&a, e);
    WAIT_FOR(atomic_load(&a.entered) == 1);
    destroyer d1 = {.e = e}, d2 = {.e = e};
    pthread_create(&d1.th, NULL, destroy_thread, &d1);
    pthread_create(&d2.th, NULL, destroy_thread, &d2);
    sleep_ms(30);
    CHECK(!atomic_load(&d1.done) && !atomic_load(&d2.done) && fake_count(&F.unloads) == 0);
    atomic_store(&hold.open, 1);
    pthread_join(a.th, NULL);
    pthread_join(d1.th, NULL);
    pthread_join(d2.th, NULL);
    CHECK(a.st == KILN_OK && d1.st == KILN_OK && d2.st == KILN_OK);
    CHECK(fake_count(&F.unloads) == 1 && fake_count(&F.release_during_run) == 0);
    kiln_engine_free(e);
}

/* Separate instances hold models at the same time. */
static void test_two_instances(void) {
    fake_reset();
    kiln_engine *e1 = loaded_engine(NULL, MODEL_FILE);
    kiln_engine *e2 = loaded_engine(NULL, "store:tiny");
    CHECK(has_model(e1) && has_model(e2) && fake_count(&F.loads) == 2);
    freq q = {.name = "Q", .runs = 2};
    CHECK(run_now(e1, &q) == KILN_OK && run_now(e2, &q) == KILN_OK);
    kiln_engine_free(e1);
    CHECK(has_model(e2));
    kiln_engine_free(e2);
    CHECK(fake_count(&F.unloads) == 2 && fake_count(&F.leases) == 0);
}

int main(void) {
    alarm(120); /* a hang fails the test instead of stalling the suite */
    test_registry();
    test_lifecycle();
    test_urgent_first();
    test_yield_and_drain();
    test_teardown_cancel();
    test_request_cancel();
    test_load_cancel();
    test_load_failure();
    test_failed_release();
    test_destroy();
    test_two_instances();
    return t_done();
}
