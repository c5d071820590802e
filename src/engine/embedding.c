/* The embedding family: a resident kiln_model and its kiln_embedder.  A
 * request counts every input first (kiln_embed_begin runs no model), then
 * embeds one forward run at a time, shortest inputs first (kiln_embed_next),
 * yielding before each, so a query waits for at most the run in progress.
 * A job owns its tokens and vectors, so requests that interleave at yield
 * points do not disturb each other. */
#include "engine/engine.h"

#include "base/base.h"
#include "model/model.h"

#include <stdlib.h>

static kiln_status emb_check(void *user, const char *path) { return engine_gguf_check(path, 0); }

typedef struct emb_model {
    kiln_model *m;
    kiln_embedder *em;
} emb_model;

static kiln_status emb_unload(void *user, void *model) {
    emb_model *e = model;
    if (!e) return KILN_OK;
    kiln_embedder_free(e->em);
    kiln_model_free(e->m);
    free(e);
    return KILN_OK;
}

static kiln_status emb_load(void *user, const char *path, kiln_engine_backend backend, engine_run *r, void **model) {
    *model = NULL;
    emb_model *e = calloc(1, sizeof *e);
    if (!e) return base_fail(KILN_ERR_NOMEM, "out of memory");
    /* runs of at most 512 tokens: a query waits for one run, so a smaller
     * run bounds its latency; 512 still fills the matrix kernels */
    kiln_embedder_params p = kiln_embedder_default_params();
    p.n_batch = 512;
    const kiln_context_params *cp = engine_context_params(r);
    if (cp) p.n_threads = cp->n_threads;
    kiln_model_params mp = kiln_model_default_params();
    mp.backend = KILN_ENGINE_BACKEND_CPU; /* the family runs on the CPU */
    kiln_status st = kiln_model_load(path, &mp, &e->m);
    if (st == KILN_OK) st = kiln_embedder_new_from_model(e->m, &p, &e->em);
    if (st != KILN_OK) {
        emb_unload(user, e);
        return st;
    }
    *model = e;
    return KILN_OK;
}

kiln_status engine_embed_run(kiln_embedder *em, pthread_mutex_t *mu, engine_embed_call *call, engine_run *r) {
    kiln_embed_job *j = NULL;
    if (mu) pthread_mutex_lock(mu);
    kiln_status st = kiln_embed_begin(em, call->req, &j);
    if (mu) pthread_mutex_unlock(mu);
    for (int32_t left = call->req->n; st == KILN_OK && left > 0;) {
        st = engine_yield(r);
        if (st != KILN_OK) break;
        if (mu) pthread_mutex_lock(mu);
        st = kiln_embed_next(j, &left);
        if (mu) pthread_mutex_unlock(mu);
    }
    if (st != KILN_OK) {
        kiln_embed_job_free(j);
        return st;
    }
    call->job = j;
    return KILN_OK;
}

static kiln_status emb_run(void *user, void *model, int task, void *req, engine_run *r) {
    if (task != ENGINE_TASK_EMBED) return base_fail(KILN_ERR_UNSUPPORTED, "the embedding family only embeds");
    return engine_embed_run(((emb_model *)model)->em, NULL, req, r);
}

static kiln_model *emb_model_of(void *user, void *model) { return ((emb_model *)model)->m; }

const engine_ops engine_embedding_ops = {
    .check = emb_check, .load = emb_load, .unload = emb_unload, .run = emb_run, .model_of = emb_model_of};

kiln_status kiln_engine_embed(kiln_engine *e, const kiln_embed_request *r, kiln_engine_cancel *cancel,
                              kiln_embed_job **out) {
    if (!out) return base_fail(KILN_ERR_INVALID_ARG, "no output job");
    *out = NULL;
    if (!e || !r) return base_fail(KILN_ERR_INVALID_ARG, "no engine or request");
    engine_embed_call call = {r, NULL};
    kiln_status st = engine_request(e, ENGINE_TASK_EMBED, &call, r->kind == KILN_EMBED_QUERY, cancel);
    *out = call.job;
    return st;
}
