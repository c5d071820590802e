/* The llm family: a resident kiln_model; each generate request gets its own
 * context sized to prompt + n_predict, so requests that interleave at yield
 * points never share KV state.  Native runs are the prompt chunks and the
 * single-token decode steps; the request yields before each. */
#include "engine/engine.h"

#include "gguf/gguf.h"
#include "model/model.h"

#include <stdlib.h>
#include <string.h>

kiln_status engine_gguf_check(const char *path, int generate) {
    char err[512];
    gguf_file *f = gguf_open(path, err, sizeof err);
    if (!f) return kl_fail(NULL, KILN_ERR_FORMAT, "%s", err);
    char name[64];
    const char *a = gguf_get_cstr(f, "general.architecture", name, sizeof name, NULL);
    const kl_arch *arch = a ? kl_arch_find(a) : NULL;
    kiln_status st = KILN_OK;
    if (!a) st = kl_fail(NULL, KILN_ERR_FORMAT, "%s: no general.architecture in the metadata", path);
    else if (!arch)
        st = kl_fail(NULL, KILN_ERR_UNSUPPORTED, "%s: unsupported architecture '%s' (kiln runs: %s)", path, a,
                     kl_arch_list());
    else if (generate && arch->encoder)
        st = kl_fail(NULL, KILN_ERR_UNSUPPORTED, "%s: '%s' is an encoder; it embeds but cannot generate", path, a);
    gguf_close(f);
    return st;
}

static kiln_status llm_check(void *user, const char *path) { return engine_gguf_check(path, 1); }

static kiln_status llm_load(void *user, const char *path, kiln_engine_backend backend, engine_run *r,
                            void **model) {
    kiln_model *m = NULL;
    kiln_status st = kiln_model_load(path, NULL, &m);
    *model = m;
    return st;
}

static kiln_status llm_unload(void *user, void *model) {
    kiln_model_free(model);
    return KILN_OK;
}

typedef struct gen_state {
    kiln_model *m;
    const kiln_engine_generate_request *req;
    kiln_context *ctx;
    kiln_sampler *smp;
    kiln_detok *dt;
    int32_t *toks;
    int32_t n_generated;
} gen_state;

/* Decodes n tokens in chunks of at most n_batch, yielding before each. */
static kiln_status decode_chunks(gen_state *g, engine_run *r, const int32_t *toks, int32_t n, int32_t n_batch) {
    for (int32_t i = 0; i < n; i += n_batch) {
        kiln_status st = engine_yield(r);
        if (st != KILN_OK) return st;
        int32_t k = n - i < n_batch ? n - i : n_batch;
        kiln_batch b = {k, toks + i, NULL, NULL, NULL};
        st = kiln_decode(g->ctx, &b);
        if (st != KILN_OK) return st;
    }
    return KILN_OK;
}

static kiln_status generate(gen_state *g, engine_run *r) {
    const kiln_engine_generate_request *req = g->req;
    size_t len = strlen(req->prompt);
    int n = kiln_tokenize(g->m, req->prompt, len, 1, 0, NULL, 0);
    if (n < 0) return (kiln_status)n;
    if (n == 0) return kl_fail(NULL, KILN_ERR_INVALID_ARG, "the prompt has no tokens");
    g->toks = malloc((size_t)n * sizeof *g->toks);
    if (!g->toks) return kl_fail(NULL, KILN_ERR_NOMEM, "out of memory");
    kiln_tokenize(g->m, req->prompt, len, 1, 0, g->toks, n);

    kiln_model_info info;
    kiln_model_get_info(g->m, &info);
    kiln_context_params cp = kiln_context_default_params();
    cp.n_ctx = n + req->n_predict;
    if (info.n_ctx_train > 0 && cp.n_ctx > info.n_ctx_train)
        return kl_fail(NULL, KILN_ERR_CONTEXT_FULL, "%d prompt + %d predicted tokens exceed the model's %d", n,
                       req->n_predict, info.n_ctx_train);
    cp.n_threads = req->n_threads;
    kiln_status st = kiln_context_new(g->m, &cp, &g->ctx);
    if (st == KILN_OK) st = kiln_sampler_new(&req->sampler, info.n_vocab, &g->smp);
    if (st != KILN_OK) return st;
    if (!(g->dt = kiln_detok_new(g->m))) return kl_fail(NULL, KILN_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) kiln_sampler_accept(g->smp, g->toks[i]);

    st = decode_chunks(g, r, g->toks, n, cp.n_batch);
    int32_t last = n - 1; /* batch index whose logits the next sample reads */
    while (st == KILN_OK) {
        int32_t id = kiln_sampler_sample(g->smp, kiln_get_logits(g->ctx, last));
        if (kiln_token_is_eog(g->m, id)) break;
        kiln_sampler_accept(g->smp, id);
        g->n_generated++;
        size_t plen = 0;
        const char *piece = kiln_detok_push(g->dt, id, &plen);
        if (req->on_token && plen > 0 && req->on_token(piece, plen, id, req->user)) break;
        if (g->n_generated >= req->n_predict) break;
        st = decode_chunks(g, r, &id, 1, 1);
        last = 0;
    }
    size_t rest = 0;
    const char *tail = kiln_detok_flush(g->dt, &rest);
    if (st == KILN_OK && req->on_token && rest > 0) req->on_token(tail, rest, -1, req->user);
    return st;
}

/* A generate call as the engine carries it: the caller's request and the
 * count that travels back. */
typedef struct gen_call {
    const kiln_engine_generate_request *req;
    int32_t n_generated;
} gen_call;

static kiln_status llm_run(void *user, void *model, int task, void *req, engine_run *r) {
    if (task != ENGINE_TASK_GENERATE) return kl_fail(NULL, KILN_ERR_UNSUPPORTED, "the llm family only generates");
    gen_call *call = req;
    gen_state g = {.m = model, .req = call->req};
    kiln_status st = generate(&g, r);
    call->n_generated = g.n_generated;
    kiln_detok_free(g.dt);
    kiln_sampler_free(g.smp);
    kiln_context_free(g.ctx);
    free(g.toks);
    return st;
}

const engine_ops engine_llm_ops = {llm_check, llm_load, llm_unload, llm_run, NULL};

kiln_engine_generate_request kiln_engine_generate_default(void) {
    kiln_engine_generate_request q;
    memset(&q, 0, sizeof q);
    q.n_predict = 128;
    q.sampler = kiln_sampler_default_params();
    return q;
}

kiln_status kiln_engine_generate(kiln_engine *e, const kiln_engine_generate_request *req, int32_t *n_generated) {
    if (n_generated) *n_generated = 0;
    if (!e || !req || !req->prompt) return kl_fail(NULL, KILN_ERR_INVALID_ARG, "no engine, request or prompt");
    if (req->n_predict <= 0) return kl_fail(NULL, KILN_ERR_INVALID_ARG, "n_predict must be positive");
    gen_call call = {req, 0};
    kiln_status st = engine_request(e, ENGINE_TASK_GENERATE, &call, req->urgent, req->cancel);
    if (n_generated) *n_generated = call.n_generated;
    return st;
}
