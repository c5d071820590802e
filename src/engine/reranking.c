/* The rerank family: a resident kiln_model and its kiln_reranker.  A request frames and
 * counts every pair first (kiln_rerank_begin runs no model), then scores
 * one forward run at a time, yielding before each, so an urgent request
 * waits for at most the run in progress. */
#include "engine/engine.h"

#include "base/base.h"
#include "model/model.h"

#include <stdlib.h>

/* The header must describe a reranker (model_gguf_is_reranker). */
static kiln_status rr_check(void *user, const char *path) {
    kiln_status st = engine_gguf_check(path, 0);
    if (st != KILN_OK) return st;
    gguf_file *f;
    if ((st = gguf_open(path, &f))) return st;
    st = model_gguf_is_reranker(f) ? KILN_OK
                                   : base_fail(KILN_ERR_UNSUPPORTED,
                                               "%s: not a reranker (no classification head cls.output.weight, or a "
                                               "decoder without rank pooling)",
                                               path);
    gguf_close(f);
    return st;
}

typedef struct rr_model {
    kiln_model *m;
    kiln_reranker *rr;
} rr_model;

static kiln_status rr_unload(void *user, void *model) {
    rr_model *x = model;
    if (!x) return KILN_OK;
    kiln_reranker_free(x->rr);
    kiln_model_free(x->m);
    free(x);
    return KILN_OK;
}

static kiln_status rr_load(void *user, const char *path, kiln_engine_backend backend, engine_run *r, void **model) {
    *model = NULL;
    rr_model *x = calloc(1, sizeof *x);
    if (!x) return base_fail(KILN_ERR_NOMEM, "out of memory");
    /* runs of at most 512 tokens bound an urgent request's wait, as for
     * embeddings */
    kiln_reranker_params p = kiln_reranker_default_params();
    p.n_batch = 512;
    const kiln_context_params *cp = engine_context_params(r);
    if (cp) p.n_threads = cp->n_threads;
    kiln_model_params mp = kiln_model_default_params();
    mp.backend = KILN_ENGINE_BACKEND_CPU; /* the family runs on the CPU */
    kiln_status st = kiln_model_load(path, &mp, &x->m);
    if (st == KILN_OK) st = kiln_reranker_new_from_model(x->m, &p, &x->rr);
    if (st != KILN_OK) {
        rr_unload(user, x);
        return st;
    }
    *model = x;
    return KILN_OK;
}

typedef struct rr_call {
    const kiln_rerank_request *req;
    kiln_rerank_job *job;
} rr_call;

static kiln_status rr_run(void *user, void *model, int task, void *req, engine_run *r) {
    if (task != ENGINE_TASK_RERANK) return base_fail(KILN_ERR_UNSUPPORTED, "the rerank family only reranks");
    rr_call *call = req;
    kiln_rerank_job *j = NULL;
    kiln_status st = kiln_rerank_begin(((rr_model *)model)->rr, call->req, &j);
    for (int32_t left = call->req->n; st == KILN_OK && left > 0;) {
        st = engine_yield(r);
        if (st == KILN_OK) st = kiln_rerank_next(j, &left);
    }
    if (st != KILN_OK) {
        kiln_rerank_job_free(j);
        return st;
    }
    call->job = j;
    return KILN_OK;
}

static kiln_model *rr_model_of(void *user, void *model) { return ((rr_model *)model)->m; }

const engine_ops engine_rerank_ops = {
    .check = rr_check, .load = rr_load, .unload = rr_unload, .run = rr_run, .model_of = rr_model_of};

kiln_status kiln_engine_rerank(kiln_engine *e, const kiln_rerank_request *q, int urgent, kiln_engine_cancel *cancel,
                               kiln_rerank_job **out) {
    if (!out) return base_fail(KILN_ERR_INVALID_ARG, "no output job");
    *out = NULL;
    if (!e || !q) return base_fail(KILN_ERR_INVALID_ARG, "no engine or request");
    rr_call call = {q, NULL};
    kiln_status st = engine_request(e, ENGINE_TASK_RERANK, &call, urgent, cancel);
    *out = call.job;
    return st;
}
