/* The llm family: a resident kiln_model with one context whose sequences
 * serve the admitted requests together, by continuous batching (gen.h):
 * the scheduler thread steps them, a request reads its tokens on its own
 * thread.  The gate has a place per sequence; the scheduler yields a
 * running request's place to a waiting urgent one (its sequence goes to
 * the prefix cache and comes back when it regains a place). */
#include "engine/engine.h"

#include "base/base.h"
#include "gen/gen.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "spec/spec.h"
#include "store/store.h"
#include "vision/vision.h"

#include <stdlib.h>
#include <string.h>

static kiln_status llm_check(void *user, const char *path) { return engine_gguf_check(path, 1); }

/* A resident model: its weights, one context whose sequences are the
 * places of the gate, and the scheduler that batches the requests. */
typedef struct llm_model {
    kiln_model *m;
    kiln_context *c;
    gen_sched *sched;
    spec *spec; /* speculative decoding, or NULL */
    int32_t n_seq;
    pthread_mutex_t emb_mu; /* guards emb and its native runs */
    kiln_embedder *emb;     /* made at the first embed request */
} llm_model;

/* Prompt tokens one sequence adds per step while others generate. */
#define LLM_PREFILL_CHUNK 256
/* Tokens per sequence when the caller leaves n_ctx at 0 (at most the
 * model's own): Ollama's default context. */
#define LLM_DEFAULT_CTX 4096

/* The gate hooks of the scheduler: the engine's own gate. */
static int gate_urgent(void *user) { return engine_urgent_waiting(user); }
static void gate_yield(void *user, void *ticket) { engine_yield_async(ticket); }
static int gate_regained(void *user, void *ticket) { return engine_regained(ticket); }
static int gate_cancelled(void *user, void *ticket) { return engine_cancelled(ticket); }

static kiln_status llm_unload(void *user, void *model) {
    llm_model *lm = model;
    if (!lm) return KILN_OK;
    gen_sched_free(lm->sched);
    kiln_embedder_free(lm->emb);
    pthread_mutex_destroy(&lm->emb_mu);
    spec_free(lm->spec);
    kiln_context_free(lm->c);
    kiln_model_free(lm->m);
    free(lm);
    return KILN_OK;
}

static kiln_status llm_load(void *user, const char *path, kiln_engine_backend backend, engine_run *r, void **model) {
    *model = NULL;
    llm_model *lm = calloc(1, sizeof *lm);
    if (!lm) return base_fail(KILN_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&lm->emb_mu, NULL);
    const kiln_context_params *cp = engine_context_params(r);
    kiln_context_params p = cp ? *cp : kiln_context_default_params();
    kiln_model_params mp = kiln_model_default_params();
    mp.backend = backend; /* AUTO: the model load chooses (CUDA when it takes the model and this context) */
    mp.gpu_layers = engine_gpu_layers(r);
    mp.ctx = &p;
    char mmproj[4096];
    mp.mmproj = engine_mmproj(r, mmproj, sizeof mmproj); /* the one set, else a store pack's own */
    int found = !mp.mmproj && store_pack_companion(path, "mmproj", mmproj, sizeof mmproj);
    if (found) mp.mmproj = mmproj;
    kiln_status st = kiln_model_load(path, &mp, &lm->m);
    if (st != KILN_OK && found) { /* a pack's projector kiln cannot read: the model still serves text */
        base_log(BASE_LOG_WARN, "not loading the projector %s (%s): images are refused", mmproj, kiln_last_error());
        mp.mmproj = NULL;
        st = kiln_model_load(path, &mp, &lm->m);
    }
    if (st == KILN_OK && p.n_ctx == 0) {
        /* a model declaring 131072 tokens would reserve them for every
         * sequence: Ollama's 4096 per sequence instead (n_ctx asks for more) */
        kiln_model_info info;
        kiln_model_get_info(lm->m, &info);
        p.n_ctx = info.n_ctx_train < LLM_DEFAULT_CTX ? info.n_ctx_train : LLM_DEFAULT_CTX;
    }
    char draft[4096];
    const kiln_spec_params sp = engine_spec_params(r, draft, sizeof draft);
    p.mtp = sp.type == KILN_SPEC_MTP; /* the MTP block's cache */
    if (st == KILN_OK) st = kiln_context_new(lm->m, &p, &lm->c);
    if (st == KILN_ERR_NOMEM && p.n_ctx > 0 && lm->m) {
        /* more tokens than the KV memory budget holds for every sequence:
         * as many as it holds (kiln_context_new's 0: the model's, capped) */
        const int32_t asked = p.n_ctx;
        p.n_ctx = 0;
        st = kiln_context_new(lm->m, &p, &lm->c);
        if (st == KILN_OK)
            base_log(BASE_LOG_WARN, "a context of %d tokens per sequence does not fit the KV memory budget: %d", asked,
                     kiln_context_n_ctx(lm->c));
    }
    if (st == KILN_OK && sp.type != KILN_SPEC_NONE) st = spec_new(&sp, lm->m, lm->c, &lm->spec);
    if (st == KILN_OK) {
        lm->n_seq = kiln_context_n_seq_max(lm->c);
        gen_gate gate = {gate_urgent, gate_yield, gate_regained, gate_cancelled, engine_of(r)};
        st = gen_sched_new(lm->m, lm->c, LLM_PREFILL_CHUNK, &gate, &lm->sched);
        if (st != KILN_OK)
            base_fail(st, "cannot start the scheduler");
        else if (lm->spec)
            gen_sched_set_proposer(lm->sched, spec_proposer(lm->spec));
    }
    if (st != KILN_OK) {
        llm_unload(user, lm);
        return st;
    }
    *model = lm;
    return KILN_OK;
}

static int32_t llm_capacity(void *user, void *model) { return ((llm_model *)model)->n_seq; }

/* A generate call as the engine carries it: the caller's request and the
 * count that travels back. */
typedef struct gen_call {
    const kiln_engine_generate_request *req;
    int32_t n_generated;
} gen_call;

/* Runs one request through the scheduler; pieces reach the callback on
 * this (the caller's) thread. */
static kiln_status generate(llm_model *lm, gen_call *call, engine_run *r) {
    const kiln_engine_generate_request *req = call->req;
    size_t len = strlen(req->prompt);
    /* images: the prompt's markers parsed, special tokens with them (as
     * llama-mtmd-cli); the projector encodes on this thread */
    vision_prompt vp;
    kiln_status st = model_image_prompt(lm->m, req->prompt, len, 1, req->n_images > 0, req->images,
                                        req->n_images > 0 ? req->n_images : 0, &vp);
    if (st != KILN_OK) return st;
    const int n = vp.n_tok;
    if (n == 0) {
        vision_prompt_free(&vp);
        return base_fail(KILN_ERR_INVALID_ARG, "the prompt has no tokens");
    }
    const int32_t n_ctx = kiln_context_n_ctx(lm->c);
    if ((int64_t)n + req->n_predict > n_ctx) {
        vision_prompt_free(&vp);
        return base_fail(KILN_ERR_CONTEXT_FULL, "%d prompt + %d predicted tokens exceed the context of %d", n,
                         req->n_predict, n_ctx);
    }
    kiln_detok *dt = kiln_detok_new(lm->m);
    if (!dt) {
        vision_prompt_free(&vp);
        return base_fail(KILN_ERR_NOMEM, "out of memory");
    }
    gen_params p = gen_params_default();
    p.prompt = vp.tok;
    p.n_prompt = n;
    p.embd = vp.embd;
    p.n_embd_rows = vp.n_rows;
    p.mpos = vp.mpos;
    p.n_predict = req->n_predict;
    p.sampler = req->sampler;
    p.reuse = 1;
    if (lm->spec) {
        p.n_draft = spec_params(lm->spec)->n_max;
        p.spec_fixed = spec_params(lm->spec)->fixed;
    }
    gen_req *q = NULL;
    st = gen_sched_submit(lm->sched, &p, req->urgent, r, &q);
    vision_prompt_free(&vp);
    if (st != KILN_OK) {
        kiln_detok_free(dt);
        return base_fail(st, "cannot queue the request");
    }
    int stopped = 0;
    gen_event ev;
    for (;;) {
        gen_req_next(q, &ev, -1);
        if (ev.kind == GEN_EV_DONE) break;
        if (stopped) continue; /* already on its way to the end */
        call->n_generated++;
        size_t plen = 0;
        const char *piece = kiln_detok_push(dt, ev.tok.id, &plen);
        if (req->on_token && plen > 0 && req->on_token(piece, plen, ev.tok.id, req->user)) {
            stopped = 1;
            gen_req_stop(q);
        }
    }
    if (ev.reason == GEN_CANCELLED)
        st = base_fail(KILN_ERR_CANCELLED, "request cancelled");
    else if (ev.reason == GEN_FAILED)
        st = base_fail(KILN_ERR_INTERNAL, "%s", ev.error);
    size_t rest = 0;
    const char *tail = kiln_detok_flush(dt, &rest);
    if (st == KILN_OK && !stopped && req->on_token && rest > 0) req->on_token(tail, rest, -1, req->user);
    gen_req_free(q);
    kiln_detok_free(dt);
    return st;
}

/* Embeddings from the decoder's final hidden states (kiln_embedder over
 * the resident model, made at the first request). */
static kiln_status embed(llm_model *lm, engine_embed_call *call, engine_run *r) {
    pthread_mutex_lock(&lm->emb_mu);
    kiln_status st = KILN_OK;
    if (!lm->emb) {
        kiln_embedder_params p = kiln_embedder_default_params();
        p.n_threads = kiln_context_n_threads(lm->c);
        st = kiln_embedder_new_from_model(lm->m, &p, &lm->emb);
        if (st != KILN_OK) lm->emb = NULL;
    }
    pthread_mutex_unlock(&lm->emb_mu);
    if (st != KILN_OK) return st;
    return engine_embed_run(lm->emb, &lm->emb_mu, call, r);
}

static kiln_status llm_run(void *user, void *model, int task, void *req, engine_run *r) {
    if (task == ENGINE_TASK_EMBED) return embed(model, req, r);
    if (task != ENGINE_TASK_GENERATE) return base_fail(KILN_ERR_UNSUPPORTED, "the llm family does not run this task");
    return generate(model, req, r);
}

static kiln_model *llm_model_of(void *user, void *model) { return ((llm_model *)model)->m; }

const engine_ops engine_llm_ops = {.check = llm_check,
                                   .load = llm_load,
                                   .unload = llm_unload,
                                   .run = llm_run,
                                   .capacity = llm_capacity,
                                   .model_of = llm_model_of};

/* ---- generations read by their caller (engine.h) ---- */

struct engine_llm_req {
    engine_run *r;
    gen_req *q;
};

kiln_status engine_llm_begin(kiln_engine *e, const gen_params *p, int urgent, kiln_engine_cancel *cancel,
                             int (*abandon)(void *user), void *user, engine_llm_req **out) {
    *out = NULL;
    engine_llm_req *q = calloc(1, sizeof *q);
    if (!q) return base_fail(KILN_ERR_NOMEM, "out of memory");
    void *model = NULL;
    kiln_status st = engine_admit(e, ENGINE_TASK_GENERATE, urgent, cancel, abandon, user, &q->r, &model);
    if (st == KILN_OK && engine_resident(e, &engine_llm_ops) != model)
        st = base_fail(KILN_ERR_UNSUPPORTED, "the engine does not run the llm family");
    if (st == KILN_OK) {
        llm_model *lm = model;
        gen_params pp = *p;
        if (lm->spec && pp.n_draft == 0) { /* the model's speculative decoding */
            pp.n_draft = spec_params(lm->spec)->n_max;
            pp.spec_fixed = spec_params(lm->spec)->fixed;
        }
        st = gen_sched_submit(lm->sched, &pp, urgent, q->r, &q->q);
        if (st != KILN_OK) base_fail(st, "cannot queue the request");
    }
    if (st != KILN_OK) {
        engine_dismiss(q->r);
        free(q);
        return st;
    }
    *out = q;
    return KILN_OK;
}

gen_req *engine_llm_events(engine_llm_req *q) { return q->q; }

void engine_llm_end(engine_llm_req *q) {
    if (!q) return;
    gen_req_free(q->q);
    engine_dismiss(q->r);
    free(q);
}

kiln_status engine_llm_stats(kiln_engine *e, int32_t *n_ctx, gen_sched_stats *st) {
    llm_model *lm = engine_resident(e, &engine_llm_ops);
    if (!lm) return base_fail(KILN_ERR_STATE, "no llm model is resident");
    if (n_ctx) *n_ctx = kiln_context_n_ctx(lm->c);
    if (st) gen_sched_get_stats(lm->sched, st);
    return KILN_OK;
}

kiln_engine_generate_request kiln_engine_generate_default(void) {
    kiln_engine_generate_request q;
    memset(&q, 0, sizeof q);
    q.n_predict = 128;
    q.sampler = kiln_sampler_default_params();
    return q;
}

kiln_status kiln_engine_generate(kiln_engine *e, const kiln_engine_generate_request *req, int32_t *n_generated) {
    if (n_generated) *n_generated = 0;
    if (!e || !req || !req->prompt) return base_fail(KILN_ERR_INVALID_ARG, "no engine, request or prompt");
    if (req->n_predict <= 0) return base_fail(KILN_ERR_INVALID_ARG, "n_predict must be positive");
    gen_call call = {req, 0};
    kiln_status st = engine_request(e, ENGINE_TASK_GENERATE, &call, req->urgent, req->cancel);
    if (n_generated) *n_generated = call.n_generated;
    return st;
}
