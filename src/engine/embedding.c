/* The embedding family: a resident kiln_embedder.  A request counts every
 * input first (kiln_embed_begin runs no model), then embeds one forward
 * run at a time, shortest inputs first (kiln_embed_next), yielding before
 * each, so a query waits for at most the run in progress.  A job owns its tokens and vectors, so
 * requests that interleave at yield points do not disturb each other. */
#include "engine/engine.h"

#include "model/model.h"

static kiln_status emb_check(void *user, const char *path) { return engine_gguf_check(path, 0); }

static kiln_status emb_load(void *user, const char *path, kiln_engine_backend backend, engine_run *r,
                            void **model) {
    kiln_embedder *m = NULL;
    /* runs of at most 512 tokens: a query waits for one run, so a smaller
     * run bounds its latency; 512 still fills the matrix kernels */
    kiln_embedder_params p = kiln_embedder_default_params();
    p.n_batch = 512;
    kiln_status st = kiln_embedder_new(path, &p, &m);
    *model = m;
    return st;
}

static kiln_status emb_unload(void *user, void *model) {
    kiln_embedder_free(model);
    return KILN_OK;
}

/* An embed call as the engine carries it. */
typedef struct emb_call {
    const kiln_embed_request *req;
    kiln_embed_job *job;
} emb_call;

static kiln_status emb_run(void *user, void *model, int task, void *req, engine_run *r) {
    if (task != ENGINE_TASK_EMBED) return kl_fail(NULL, KILN_ERR_UNSUPPORTED, "the embedding family only embeds");
    emb_call *call = req;
    kiln_embed_job *j = NULL;
    kiln_status st = kiln_embed_begin(model, call->req, &j);
    for (int32_t left = call->req->n; st == KILN_OK && left > 0;) {
        st = engine_yield(r);
        if (st == KILN_OK) st = kiln_embed_next(j, &left);
    }
    if (st != KILN_OK) {
        kiln_embed_job_free(j);
        return st;
    }
    call->job = j;
    return KILN_OK;
}

const engine_ops engine_embedding_ops = {emb_check, emb_load, emb_unload, emb_run, NULL, NULL};

kiln_status kiln_engine_embed(kiln_engine *e, const kiln_embed_request *r, kiln_engine_cancel *cancel,
                              kiln_embed_job **out) {
    if (!out) return kl_fail(NULL, KILN_ERR_INVALID_ARG, "no output job");
    *out = NULL;
    if (!e || !r) return kl_fail(NULL, KILN_ERR_INVALID_ARG, "no engine or request");
    emb_call call = {r, NULL};
    kiln_status st = engine_request(e, ENGINE_TASK_EMBED, &call, r->kind == KILN_EMBED_QUERY, cancel);
    *out = call.job;
    return st;
}
