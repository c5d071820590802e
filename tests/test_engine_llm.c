/* The llm family through the engine on a real model (stories260K): load
 * validation on the call, greedy generation, an urgent request ahead of a
 * queued one at the decode-step yield points, cancellation by teardown;
 * a context larger than the KV memory budget holds gets what it holds. */
#include "kiln.h"
#include "testutil.h"

#include "engine/engine.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MODEL "../models/stories260K.gguf"
#define LIMIT_MS 20000

static void sleep_1ms(void) {
    struct timespec ts = {0, 1000000L};
    nanosleep(&ts, NULL);
}

typedef struct text {
    char buf[1024];
    size_t len;
} text;

typedef struct job {
    kiln_engine *e;
    kiln_engine_generate_request req;
    text out;
    atomic_int n_calls;
    int hold_for_waiter; /* first token: wait until another request waits */
    kiln_status st;
    int32_t n;
    atomic_int finished; /* completion order, from 1 */
    pthread_t th;
} job;

static atomic_int finish_order;

static int collect(const char *piece, size_t len, int32_t token, void *user) {
    job *j = user;
    text *t = &j->out;
    if (t->len + len < sizeof t->buf) {
        memcpy(t->buf + t->len, piece, len);
        t->len += len;
        t->buf[t->len] = 0;
    }
    if (atomic_fetch_add(&j->n_calls, 1) == 0 && j->hold_for_waiter) {
        kiln_engine_observation o;
        for (int i = 0; i < LIMIT_MS && kiln_engine_observe(j->e, &o) == KILN_OK && o.n_waiting == 0; i++) sleep_1ms();
    }
    return 0;
}

static void *job_thread(void *arg) {
    job *j = arg;
    j->req.on_token = collect;
    j->req.user = j;
    j->st = kiln_engine_generate(j->e, &j->req, &j->n);
    atomic_store(&j->finished, atomic_fetch_add(&finish_order, 1) + 1);
    return NULL;
}

static kiln_engine_generate_request greedy(const char *prompt, int n) {
    kiln_engine_generate_request r = kiln_engine_generate_default();
    r.prompt = prompt;
    r.n_predict = n;
    r.sampler.temperature = 0;
    r.n_threads = 1;
    return r;
}

int main(void) {
    alarm(120);
    kiln_engine *e = NULL;
    CHECK(kiln_engine_create(KILN_ENGINE_LLM, KILN_ENGINE_BACKEND_AUTO, &e) == KILN_OK);
    CHECK(kiln_engine_start(e) == KILN_OK);
    CHECK(kiln_engine_load(e, "data/no-such-model.gguf", NULL) == KILN_ERR_NOT_FOUND);
    CHECK(kiln_engine_load(e, "testutil.h", NULL) == KILN_ERR_FORMAT); /* not GGUF: fails on the call */
    CHECK(kiln_engine_load(e, MODEL, NULL) == KILN_OK);
    CHECK(kiln_engine_wait_idle(e, LIMIT_MS) == KILN_OK);
    kiln_engine_observation o;
    kiln_engine_observe(e, &o);
    CHECK(o.state == KILN_ENGINE_LOADED && strcmp(o.model, MODEL) == 0 && o.backend == KILN_ENGINE_BACKEND_CPU);

    /* Greedy reference continuation. */
    job g = {.e = e, .req = greedy("Tom had a red", 8)};
    job_thread(&g);
    CHECK(g.st == KILN_OK && g.n == 8);
    const char *want = " ball. He liked to play with his toys";
    CHECKF(g.out.len > 0 && strncmp(g.out.buf, want, g.out.len) == 0, "got '%s'", g.out.buf);
    CHECKF(strncmp(g.out.buf, " ball.", 6) == 0, "got '%s'", g.out.buf);

    /* A long generation yields before each decode step, so an urgent
     * request that arrives while it runs (its first token callback waits
     * for that) finishes first, with the same text as alone: each request
     * has its own KV state. */
    job longj = {.e = e, .req = greedy("Once upon a time", 100), .hold_for_waiter = 1};
    job urg = {.e = e, .req = greedy("Tom had a red", 8)};
    urg.req.urgent = 1;
    pthread_create(&longj.th, NULL, job_thread, &longj);
    for (int i = 0; i < LIMIT_MS && atomic_load(&longj.n_calls) == 0; i++) sleep_1ms();
    job_thread(&urg);
    pthread_join(longj.th, NULL);
    CHECK(urg.st == KILN_OK && strcmp(urg.out.buf, g.out.buf) == 0);
    CHECK(longj.st == KILN_OK && longj.n > 8);
    CHECKF(atomic_load(&urg.finished) < atomic_load(&longj.finished), "the urgent request waited for the long one");

    /* The llm family embeds too (a decoder's pooled hidden states), as the
     * embedder over the same model does. */
    {
        const char *texts[] = {"Tom had a red ball"};
        kiln_embed_request er = {1, texts, NULL, KILN_EMBED_DOCUMENT, 0, 0, NULL};
        kiln_embed_job *ej = NULL, *dj = NULL;
        CHECK(kiln_engine_embed(e, &er, NULL, &ej) == KILN_OK && ej);
        kiln_embedder *direct = NULL;
        CHECK(kiln_embedder_new(MODEL, NULL, &direct) == KILN_OK);
        CHECK(direct && kiln_embed(direct, &er, &dj) == KILN_OK);
        if (ej && dj) {
            const kiln_embeddings *a = kiln_embed_result(ej), *b = kiln_embed_result(dj);
            float diff = 0;
            for (int i = 0; i < a->dim && a->dim == b->dim; i++) {
                float d = a->vectors[i] - b->vectors[i];
                diff = d > diff ? d : -d > diff ? -d : diff;
            }
            CHECKF(a->dim == b->dim && diff < 1e-5f, "engine vs embedder: %g", diff);
        }
        kiln_embed_job_free(ej);
        kiln_embed_job_free(dj);
        kiln_embedder_free(direct);
    }

    /* Unload with a fired token cancels a running generation; the model is
     * released after it stops. */
    job c = {.e = e, .req = greedy("Once upon a time", 200)};
    pthread_create(&c.th, NULL, job_thread, &c);
    for (int i = 0; i < LIMIT_MS && atomic_load(&c.n_calls) == 0; i++) sleep_1ms();
    kiln_engine_cancel *tok = kiln_engine_cancel_new();
    kiln_engine_cancel_fire(tok);
    CHECK(kiln_engine_unload(e, tok) == KILN_OK);
    kiln_engine_cancel_free(tok);
    job refused = {.e = e, .req = greedy("Tom", 2)};
    job_thread(&refused);
    CHECK(refused.st == KILN_ERR_STATE);
    pthread_join(c.th, NULL);
    CHECK(c.st == KILN_ERR_CANCELLED || (c.st == KILN_OK && c.n > 0));
    CHECK(kiln_engine_wait_idle(e, LIMIT_MS) == KILN_OK);
    kiln_engine_observe(e, &o);
    CHECK(o.state == KILN_ENGINE_UNLOADED && !o.model[0]);

    CHECK(kiln_engine_destroy(e, NULL) == KILN_OK);
    kiln_engine_free(e);

    /* A context the KV memory budget cannot hold for every sequence loads
     * with as many tokens as it holds (what kiln_context_new gives for
     * n_ctx 0 under that budget), not a failed load. */
    {
        kiln_model *m = NULL;
        CHECK(kiln_model_load(MODEL, NULL, &m) == KILN_OK);
        kiln_context_params cp = kiln_context_default_params();
        cp.n_seq_max = 2;
        cp.n_threads = 1;
        cp.mem_limit = 64 << 10;
        kiln_context *ctx = NULL;
        CHECK(kiln_context_new(m, &cp, &ctx) == KILN_OK);
        const int32_t fit = ctx ? kiln_context_n_ctx(ctx) : 0;
        kiln_context_free(ctx);
        CHECK(fit > 0);
        cp.n_ctx = fit + 1000;
        ctx = NULL;
        CHECK(kiln_context_new(m, &cp, &ctx) == KILN_ERR_NOMEM); /* the direct call still refuses it */
        kiln_context_free(ctx);
        kiln_model_free(m);
        CHECK(kiln_engine_create(KILN_ENGINE_LLM, KILN_ENGINE_BACKEND_AUTO, &e) == KILN_OK);
        CHECK(kiln_engine_set_context_params(e, &cp) == KILN_OK);
        CHECK(kiln_engine_start(e) == KILN_OK);
        CHECK(kiln_engine_load(e, MODEL, NULL) == KILN_OK);
        CHECK(kiln_engine_wait_idle(e, LIMIT_MS) == KILN_OK);
        kiln_engine_observe(e, &o);
        int32_t got = 0;
        CHECKF(o.state == KILN_ENGINE_LOADED && engine_llm_stats(e, &got, NULL) == KILN_OK && got == fit,
               "state %d, context %d, want %d: '%s'", (int)o.state, got, fit, o.message);
        CHECK(kiln_engine_destroy(e, NULL) == KILN_OK);
        kiln_engine_free(e);
    }

    /* Speculative decoding is a load option: n-gram lookup and a draft
     * model give the plain greedy text; a draft of another vocabulary
     * fails the load with the reason. */
    job plain = {.e = NULL, .req = greedy("Once upon a time, there was a girl. Once upon a time", 60)};
    const char *drafts[] = {NULL, "data/spec/spec-llama.gguf", "data/fixtures/llama.gguf"};
    for (int k = 0; k < 4; k++) {
        CHECK(kiln_engine_create(KILN_ENGINE_LLM, KILN_ENGINE_BACKEND_AUTO, &e) == KILN_OK);
        kiln_spec_params sp = kiln_spec_default_params();
        sp.type = k == 0 ? KILN_SPEC_NONE : k == 1 ? KILN_SPEC_NGRAM : KILN_SPEC_DRAFT;
        sp.draft_model = k >= 2 ? drafts[k - 1] : NULL;
        CHECK(kiln_engine_set_spec_params(e, &sp) == KILN_OK);
        CHECK(kiln_engine_start(e) == KILN_OK);
        kiln_status ls = kiln_engine_load(e, MODEL, NULL);
        if (ls == KILN_OK) ls = kiln_engine_wait_idle(e, LIMIT_MS);
        kiln_engine_observe(e, &o);
        if (k == 3) {
            CHECKF(o.state != KILN_ENGINE_LOADED && strstr(o.message, "another vocabulary"),
                   "a draft of another vocabulary: state %d, error '%s'", (int)o.state, o.message);
        } else {
            CHECKF(ls == KILN_OK && o.state == KILN_ENGINE_LOADED, "spec %d: load %d, '%s'", k, (int)ls, o.message);
            job j = {.e = e, .req = plain.req};
            job_thread(&j);
            CHECK(j.st == KILN_OK && j.n == 60);
            if (k == 0)
                plain = j;
            else
                CHECKF(!strcmp(j.out.buf, plain.out.buf), "spec %d: '%s' (plain '%s')", k, j.out.buf, plain.out.buf);
        }
        CHECK(kiln_engine_destroy(e, NULL) == KILN_OK);
        kiln_engine_free(e);
    }
    /* MTP: the model's own NextN block gives the plain greedy text; a model
     * without one fails the load with the reason. */
    const char *mtp_models[] = {"data/spec/mtp-agree.gguf", "data/spec/mtp-agree.gguf", MODEL};
    job mplain = {.e = NULL, .req = greedy("Once upon a time", 40)};
    for (int k = 0; k < 3; k++) {
        CHECK(kiln_engine_create(KILN_ENGINE_LLM, KILN_ENGINE_BACKEND_AUTO, &e) == KILN_OK);
        kiln_spec_params sp = kiln_spec_default_params();
        sp.type = k == 0 ? KILN_SPEC_NONE : KILN_SPEC_MTP;
        CHECK(kiln_engine_set_spec_params(e, &sp) == KILN_OK);
        CHECK(kiln_engine_start(e) == KILN_OK);
        kiln_status ls = kiln_engine_load(e, mtp_models[k], NULL);
        if (ls == KILN_OK) ls = kiln_engine_wait_idle(e, LIMIT_MS);
        kiln_engine_observe(e, &o);
        if (k == 2) {
            CHECKF(o.state != KILN_ENGINE_LOADED && strstr(o.message, "no MTP (nextn) blocks"),
                   "MTP on a model without the block: state %d, error '%s'", (int)o.state, o.message);
        } else {
            CHECKF(ls == KILN_OK && o.state == KILN_ENGINE_LOADED, "mtp %d: load %d, '%s'", k, (int)ls, o.message);
            job j = {.e = e, .req = mplain.req};
            job_thread(&j);
            CHECK(j.st == KILN_OK && j.n == 40);
            if (k == 0)
                mplain = j;
            else
                CHECKF(!strcmp(j.out.buf, mplain.out.buf), "mtp: '%s' (plain '%s')", j.out.buf, mplain.out.buf);
        }
        CHECK(kiln_engine_destroy(e, NULL) == KILN_OK);
        kiln_engine_free(e);
    }
    return t_done();
}
