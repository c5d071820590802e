/*
 * engine — the lifecycle of kiln_engine instances (kiln.h, "engine").
 *
 * engine.c    instances: accepted lifecycle work on the engine's thread,
 *             the request gate, teardown and release bookkeeping
 * cancel.c    cancel tokens with watchers (a fired token wakes waiters)
 * registry.c  the table of families and the ops each one plugs in
 * llm.c       the llm family over kiln_model / kiln_context
 * embedding.c the embedding family over kiln_embedder
 * image.c     the image family over an image pack (src/image)
 * stt.c       the speech-to-text family over kiln_stt (Whisper)
 * decision.c  the decision family over kiln_decider (decision packs)
 * rerank.c    the rerank family over kiln_reranker
 *
 * A family plugs in through engine_ops: load a model file, release it, and
 * run one request on it.  The engine owns ordering, admission and
 * cancellation; a family only calls engine_yield before each native run
 * and may poll engine_cancelled inside long native work.
 *
 * Lock order: a token's lock may be held while an engine's lock is taken
 * (watchers run under the token lock), never the reverse.
 */
#ifndef KILN_ENGINE_H
#define KILN_ENGINE_H

#include "kiln.h"

#include <pthread.h>

/* Per-request (or per-load) context handed to a family. */
typedef struct engine_run engine_run;

/* 1 when the work should stop: its own token fired, or a teardown that
 * cancels active work was requested.  Cheap; safe to poll often. */
int engine_cancelled(const engine_run *r);
/* Called by a request before each native run: lets waiting urgent requests
 * go first, then takes the gate back ahead of every other waiter.  Returns
 * KILN_ERR_CANCELLED (with the error message set) when the request was
 * cancelled; the family then returns that status.  For a load it only
 * reports cancellation. */
kiln_status engine_yield(engine_run *r);

/* For a family that runs admitted requests on a thread of its own (the
 * llm family's continuous batching): the gate's yield, one step at a time.
 * engine_urgent_waiting: an urgent request waits for a place.
 * engine_yield_async: r gives its place to it and queues to take one back
 * ahead of every non-urgent waiter; returns at once.  engine_regained: 1
 * once r holds a place again.  The request that owns r leaves the gate (or
 * its queue) as usual when it ends. */
int engine_urgent_waiting(kiln_engine *e);
void engine_yield_async(engine_run *r);
int engine_regained(engine_run *r);
kiln_engine *engine_of(const engine_run *r);
/* The context parameters the host set (kiln_engine_set_context_params), or
 * NULL for the family's defaults. */
const kiln_context_params *engine_context_params(const engine_run *r);
/* The speculative decoding the host set (kiln_engine_set_spec_params);
 * type KILN_SPEC_NONE without.  Its draft_model is copied into draft (cap
 * bytes), which it then points to. */
kiln_spec_params engine_spec_params(const engine_run *r, char *draft, size_t cap);
/* The projector kiln_engine_set_mmproj named, copied into buf; NULL: none. */
const char *engine_mmproj(const engine_run *r, char *buf, size_t cap);
/* The layer count kiln_engine_set_gpu_layers set (0: the default). */
int32_t engine_gpu_layers(const engine_run *r);

/* Tasks a family's run() receives. */
enum {
    ENGINE_TASK_GENERATE = 0,
    ENGINE_TASK_EMBED = 1,
    ENGINE_TASK_IMAGE = 2,
    ENGINE_TASK_TRANSCRIBE = 3,
    ENGINE_TASK_DECIDE = 4,
    ENGINE_TASK_MEASURE = 5,
    ENGINE_TASK_RERANK = 6
};

/* Every op reports failure as a kiln_status with kiln_last_error() set on
 * the calling thread.  user is engine_ops.user.  Define a table with
 * designated initializers: optional ops come and go at the end. */
typedef struct engine_ops {
    /* Optional: can the family run this file?  Runs on the caller's thread
     * inside kiln_engine_load, so it must be cheap (headers only). */
    kiln_status (*check)(void *user, const char *path);
    /* Loads path; may poll engine_cancelled(r). */
    kiln_status (*load)(void *user, const char *path, kiln_engine_backend backend, engine_run *r, void **model);
    /* Releases a model no native work uses any more.  On failure the
     * engine keeps the model and may call unload again later. */
    kiln_status (*unload)(void *user, void *model);
    /* Runs one request of kind task on the calling thread. */
    kiln_status (*run)(void *user, void *model, int task, void *req, engine_run *r);
    void *user;
    /* Optional: how many requests the model runs at once (the gate's
     * places while it is resident); 1 without it. */
    int32_t (*capacity)(void *user, void *model);
    /* Optional: the kiln_model inside a resident model (engine_model). */
    kiln_model *(*model_of)(void *user, void *model);
} engine_ops;

/* The ops behind a registry family, or NULL when this build lacks it. */
const engine_ops *engine_family_ops(kiln_engine_family_id id);
extern const engine_ops engine_llm_ops;
extern const engine_ops engine_embedding_ops;
extern const engine_ops engine_image_ops;
extern const engine_ops engine_stt_ops;
extern const engine_ops engine_decision_ops;
extern const engine_ops engine_rerank_ops;

/* Reads only the GGUF header of path: it must parse and name an
 * architecture kiln runs; generate also refuses encoders. */
kiln_status engine_gguf_check(const char *path, int generate);
/* The family that serves path: rerank for a reranker (model_gguf_is_reranker:
 * a cross-encoder, or a decoder with rank pooling), else embedding for an
 * encoder and llm for a decoder (after engine_gguf_check's checks). */
kiln_status engine_gguf_family(const char *path, kiln_engine_family_id *out);
/* The family serving a store entry (kiln_store_list's arch, and the family
 * its manifest records when the arch does not tell: rerank, decision), or
 * -1 with the reason (why, cap bytes) it is not supported.  Reads no file. */
int engine_store_family(const char *arch, const char *family, char *why, size_t cap);

/* Creates an instance of fam driven by ops (kiln_engine_create uses the
 * registry's ops; tests plug in stand-in loaders). */
kiln_status engine_create_with(const kiln_engine_family *fam, const engine_ops *ops, kiln_engine_backend backend,
                               kiln_engine **out);
/* Admits one request of kind task, waits for the gate (urgent: ahead of all
 * non-urgent waiters), runs it through ops->run on this thread and leaves
 * the gate.  Refused with KILN_ERR_STATE when no model is resident, a
 * teardown was accepted or a release failed. */
kiln_status engine_request(kiln_engine *e, int task, void *req, int urgent, kiln_engine_cancel *cancel);
/* engine_request in two halves, for callers that run the request
 * themselves (the server reads a generation as its HTTP client does):
 * engine_admit waits for the gate as engine_request does (abandon, when
 * set, is polled while it waits: 1 gives up, as a fired token does) and
 * hands back the admission and the resident model; engine_dismiss leaves
 * the gate.  Every admission must be dismissed. */
kiln_status engine_admit(kiln_engine *e, int task, int urgent, kiln_engine_cancel *cancel, int (*abandon)(void *user),
                         void *user, engine_run **out, void **model);
void engine_dismiss(engine_run *r);
/* The resident model when e runs the family of ops, else NULL.  Valid
 * while the host keeps e from unloading (it asks for every unload). */
void *engine_resident(kiln_engine *e, const engine_ops *ops);
/* The kiln_model of e's resident model, or NULL (same validity). */
kiln_model *engine_model(kiln_engine *e);

/* ---- the llm family (llm.c) ---- */

typedef struct gen_params gen_params;
typedef struct gen_req gen_req;
typedef struct gen_sched_stats gen_sched_stats;
typedef struct engine_llm_req engine_llm_req;

/* Admits a generation (as engine_admit) and starts it in the resident
 * model's scheduler: p as gen_sched_submit takes it. */
kiln_status engine_llm_begin(kiln_engine *e, const gen_params *p, int urgent, kiln_engine_cancel *cancel,
                             int (*abandon)(void *user), void *user, engine_llm_req **out);
/* Its events (gen_req_next, gen_req_stop, gen_req_cancel). */
gen_req *engine_llm_events(engine_llm_req *q);
/* Cancels it unless it ended, waits for that and leaves the gate. */
void engine_llm_end(engine_llm_req *q);
/* The resident model's context length and scheduler counts; KILN_ERR_STATE
 * when e holds no llm model. */
kiln_status engine_llm_stats(kiln_engine *e, int32_t *n_ctx, gen_sched_stats *st);

/* ---- embedding, in either family (embedding.c) ---- */

/* An embed call as the engine carries it. */
typedef struct engine_embed_call {
    const kiln_embed_request *req;
    kiln_embed_job *job;
} engine_embed_call;
/* Runs call on em: counts every input, then one forward run at a time,
 * yielding before each; mu (optional) is held around em's native work
 * only, so requests sharing em interleave at the yields. */
kiln_status engine_embed_run(kiln_embedder *em, pthread_mutex_t *mu, engine_embed_call *call, engine_run *r);

/* Token watchers: fn(arg) runs once when the token fires (at once, during
 * engine_cancel_watch, if it already has).  The watch node belongs to the
 * caller and must stay valid until engine_cancel_unwatch returns; after it
 * returns fn is not running and will not run. */
typedef struct engine_watch {
    void (*fn)(void *arg);
    void *arg;
    struct engine_watch *next;
} engine_watch;
void engine_cancel_watch(kiln_engine_cancel *c, engine_watch *w);
void engine_cancel_unwatch(kiln_engine_cancel *c, engine_watch *w);
/* Takes another reference (dropped with kiln_engine_cancel_free). */
kiln_engine_cancel *engine_cancel_ref(kiln_engine_cancel *c);

#endif
