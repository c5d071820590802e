/*
 * gen — the one generation loop: every command and service that turns a
 * prompt into tokens drives it (kiln run, kiln chat, kiln bench's batched
 * rows, the engine's llm family and through it kiln serve).
 *
 *   gen_batch  slots over one kiln_context.  A slot is a sequence being
 *              generated: its tokens (prompt, then what was sampled), its
 *              sampler, stop rules, optional constraint, budget and events.
 *              Each step packs what every slot has to feed into ONE
 *              kiln_batch (a decode token, with any draft tokens to verify,
 *              or a chunk of prompt), decodes, samples each slot whose
 *              logits came out and reports events.  One thread steps it.
 *   gen_sched  a gen_batch on a thread of its own, for callers on other
 *              threads: requests in, a bounded queue of events out per
 *              request, and yields to a request gate (gen_gate).
 *
 * A slot's state is its token list tok[0..n_tok) and how many of them the
 * sequence holds (n_fed).  A step feeds tok[n_fed..] and, once the last
 * one is in, samples the next token from its logits and appends it.  A
 * prompt is fed in chunks; a generating slot feeds one token per step.
 *
 * Verification (speculative decoding): a slot that speculates feeds its
 * last token together with up to n_draft proposed ones, with logits for
 * each, in the same forward as every other slot.  Proposals come from the
 * slot's own hook (gen_params.draft) or from the batch's proposer
 * (gen_batch_set_proposer: n-gram lookup, a draft model, MTP heads; see
 * src/spec).  Position by position the target decides, and the first
 * disagreement ends the run: the target's own token stands there, and the
 * rejected proposals are cut from the sequence (kiln_seq_truncate, which
 * for a recurrent model also restores its state), so they leave no trace.
 *   - A proposal chosen deterministically (n-gram lookup, greedy drafts,
 *     any proposal of a slot under a constraint) is accepted when the
 *     token sampled at its position, with the sampler's usual draws, is
 *     that very proposal.  Every emitted token is then the one plain
 *     decoding would have chosen, with the same draws: greedy output is
 *     byte-identical, and a seeded one too.
 *   - A proposal drawn from a distribution q (a draft model or MTP head
 *     sampling at temperature > 0, gen_dist) goes through the rejection
 *     rule of speculative sampling, which keeps the target's distribution
 *     p exactly (see verify_drawn in batch.c).
 * Adaptive length: unless gen_params.spec_fixed, each step asks for the
 * number of proposals that maximizes the expected tokens per second, from
 * the slot's running acceptance rate and the measured cost of a step per
 * token it carries and of a proposal; when that number is 0, cheap
 * proposers are still asked and their first proposal is checked against
 * the sampled token without feeding it, and the others are tried with one
 * proposal every few steps, so a slot whose proposals stop being accepted
 * costs within a few percent of plain decoding and one whose proposals
 * become good again is noticed.
 *
 * Reasoning (gen_params.think): the slot follows a "<think>...</think>"
 * block in the text it generates (sample_think as a tracker).  With a
 * think_budget, once the block holds that many tokens the slot stops
 * sampling and feeds the end of the block ("\n</think>\n\n", tokenized
 * once when the slot is added), then samples the answer as usual, as
 * llama.cpp's reasoning budget does.  A constraint meant for the answer
 * only is wrapped by its caller (sample_think_constraint); the forced
 * closing text is what such a wrapper accepts inside the block.
 *
 * Repetition guard (gen_params.repeat_guard): when the generated tokens end
 * in a stretch of at least repeat_guard tokens that repeats one period of
 * 1..GEN_REPEAT_PERIOD tokens (tok[i] == tok[i - period] throughout), the
 * slot ends with GEN_REPEAT: a model caught in a loop would otherwise fill
 * the context with it.
 *
 * Terminal reasons: GEN_STOP (an end-of-generation token, the constraint is
 * complete, or the consumer asked: an event callback's nonzero return or
 * gen_slot_stop, e.g. at a stop string), GEN_LENGTH (n_predict tokens, or
 * the context is full), GEN_CANCELLED, GEN_FAILED (the forward pass or
 * memory failed, or the constraint allows no token; the event carries the
 * message), GEN_BUDGET (the thinking budget ran out and the end of the
 * block cannot be fed: the output limit or the context has no room left for
 * it and an answer, or the model has no tokens for it), GEN_REPEAT (the
 * repetition guard).  Under a constraint, an end-of-generation token comes
 * only where the constraint is complete, so GEN_STOP from the model or the
 * constraint means a whole value; n_predict or a full context before that
 * is GEN_LENGTH.
 */
#ifndef KILN_GEN_H
#define KILN_GEN_H

#include "kiln.h"

#include "sample/sample.h"

#include <stdint.h>

typedef enum gen_reason {
    GEN_RUNNING = 0,
    GEN_STOP,
    GEN_LENGTH,
    GEN_CANCELLED,
    GEN_FAILED,
    GEN_BUDGET,
    GEN_REPEAT
} gen_reason;

/* "stop", "length", "cancelled", "failed", "thinking_budget", "repetition"
 * ("running" for GEN_RUNNING). */
const char *gen_reason_str(gen_reason r);

/* A sampled token, with its logprob and alternatives when asked. */
typedef struct gen_token {
    int32_t id;
    float logprob; /* log-softmax of the raw logits */
    int32_t n_top;
    int32_t top_id[SAMPLE_TOP_MAX];
    float top_lp[SAMPLE_TOP_MAX];
} gen_token;

enum { GEN_EV_TOKEN = 0, GEN_EV_DONE = 1 };

typedef struct gen_event {
    int kind;           /* GEN_EV_TOKEN or GEN_EV_DONE */
    gen_token tok;      /* TOKEN: never an end-of-generation token */
    gen_reason reason;  /* DONE */
    const char *error;  /* DONE with GEN_FAILED: one line */
    int32_t n_prompt;   /* prompt tokens */
    int32_t n_cached;   /* of those, taken from the prefix cache */
    int32_t n_gen;      /* tokens generated so far */
    double t;           /* when it happened (base_now, seconds) */
    double t_start;     /* when the slot first took a sequence */
    int32_t n_drafted;  /* proposals verified so far (speculative decoding) */
    int32_t n_accepted; /* of those, accepted */
} gen_event;

/* Called on the stepping thread.  For a TOKEN, logits (n_vocab floats) is
 * the distribution it came from, valid during the call.  A nonzero return
 * ends the slot after this token with GEN_STOP.  The slot is freed after
 * its DONE event returns. */
typedef int (*gen_event_fn)(void *user, const gen_event *ev, const float *logits);

/* Proposes up to max tokens that may follow tok[0..n) (speculative
 * decoding), chosen deterministically; returns how many it wrote. */
typedef int32_t (*gen_draft_fn)(void *user, const int32_t *tok, int32_t n, int32_t *out, int32_t max);

/* Most proposals one slot verifies in a step. */
#define GEN_DRAFT_MAX 16

/* A distribution a proposal was drawn from: n tokens with probabilities
 * summing to 1 (a proposer may truncate its model's distribution and
 * renormalize; the rule is exact for whatever it drew from). */
typedef struct gen_dist {
    int32_t n;
    const int32_t *id;
    const float *p;
} gen_dist;

/* One slot's request to a proposer in a step. */
typedef struct gen_ask {
    int32_t seq;        /* the slot's sequence */
    const int32_t *tok; /* its tokens: the sequence holds tok[0..n_tok - 1), and
                                 tok[n_tok - 1] goes in with the proposals */
    int32_t n_tok;
    int32_t max;                        /* most proposals wanted, 1..GEN_DRAFT_MAX */
    const kiln_sampler_params *sampler; /* the slot's (temperature <= 0: greedy) */
    /* the answer */
    int32_t n;            /* proposals written to draft[0..n), n <= max */
    int32_t *draft;       /* [max], the slot's */
    const gen_dist *dist; /* NULL (chosen deterministically), or [n]: what draft[i]
                                 was drawn from; valid until the step ends */
} gen_ask;

/* A proposer shared by the slots of a batch.  propose answers every slot
 * that speculates this step in one call (a draft model then runs one
 * batch for all of them).  It runs on the stepping thread, before the
 * step's forward.  cheap: proposals cost next to nothing (n-gram lookup),
 * so they are also asked for when the adaptive length is 0 and checked
 * without being fed. */
typedef struct gen_proposer {
    void (*propose)(void *self, gen_ask *asks, int32_t n);
    void *self;
    int cheap;
} gen_proposer;

typedef struct gen_params {
    const int32_t *prompt; /* copied by gen_batch_add */
    int32_t n_prompt;      /* >= 1 */
    int32_t n_predict;     /* most tokens to generate; < 0: until the context is full */
    kiln_sampler_params sampler;
    int ignore_eos;                      /* end-of-generation tokens are never sampled */
    const sample_constraint *constraint; /* optional; its state must outlive the slot */
    int32_t n_top;                       /* < 0: no logprobs; 0..SAMPLE_TOP_MAX: logprob and that many alternatives */
    int reuse;                           /* take cached prefix blocks and publish this slot's (kiln_seq_reuse/_cache) */
    int32_t n_past;                      /* prompt tokens the sequence already holds (needs an explicit seq) */
    int keep;                            /* leave the tokens in the sequence when done (else it is emptied) */
    gen_draft_fn draft;                  /* optional: the slot's own proposer (else the batch's, if any) */
    void *draft_user;
    int32_t n_draft;       /* most proposals verified per step (0: no speculation) */
    int spec_fixed;        /* 1: always ask for n_draft proposals (no adaptive length) */
    int think;             /* 0: no reasoning block; 1: the model may open "<think>" first; 2: the prompt opened it */
    int32_t think_budget;  /* with think: most tokens inside the block, then its end is fed (< 0: no limit) */
    int32_t repeat_guard;  /* tokens a repeated stretch must cover to end the slot (GEN_REPEAT); 0: off */
    gen_event_fn on_event; /* optional for gen_batch; set by gen_sched */
    void *user;
    /* images in the prompt (vision_prompt_build): the k-th negative id of
     * prompt takes row k of embd ([n_embd_rows][n_embd]); mpos, NULL or
     * [n_prompt][4] multimodal RoPE positions (kiln_batch_inputs).  Copied
     * by gen_batch_add.  An image's tokens go into one step's batch whole
     * (beside what a prefix-cache hit already holds), so an image longer
     * than the batch is KILN_ERR_INVALID_ARG; no speculation with images. */
    const float *embd;
    int32_t n_embd_rows;
    const int32_t *mpos;
} gen_params;

/* Longest period, in tokens, the repetition guard looks for. */
#define GEN_REPEAT_PERIOD 64
/* Most tokens of the forced end of a reasoning block. */
#define GEN_THINK_END_MAX 16

/* Defaults: n_predict -1, the sampler's defaults, n_top -1, no reuse, no
 * reasoning block (think_budget -1), no repetition guard. */
gen_params gen_params_default(void);

/* ------------------------------------------------------------ gen_batch */

typedef struct gen_batch gen_batch;
typedef struct gen_slot gen_slot;

/* Slots over c (borrowed, as is m; the context's sequences are the slots'
 * places).  prefill_chunk: most prompt tokens one slot feeds per step (0:
 * the batch size), so slots that are generating keep moving while a long
 * prompt goes in. */
kiln_status gen_batch_new(kiln_model *m, kiln_context *c, int32_t prefill_chunk, gen_batch **out);
/* Ends every remaining slot (GEN_CANCELLED, events delivered). */
void gen_batch_free(gen_batch *b);

/* Starts a slot on sequence seq (-1: the lowest free one).  Fails with
 * KILN_ERR_STATE when no sequence is free, KILN_ERR_CONTEXT_FULL when the
 * prompt does not fit.  *out (optional) stays valid until its DONE event. */
kiln_status gen_batch_add(gen_batch *b, const gen_params *p, int32_t seq, gen_slot **out);
/* One forward over every slot that has something to feed; KILN_OK (and no
 * forward) when none has.  A failed forward ends the slots in it with
 * GEN_FAILED and returns the status. */
kiln_status gen_batch_step(gen_batch *b);
/* Proposals for slots with n_draft > 0 and no hook of their own (p
 * borrowed, NULL: none).  Set it before adding such slots. */
void gen_batch_set_proposer(gen_batch *b, const gen_proposer *p);

/* Speculative decoding counters of a batch since it was made. */
typedef struct gen_spec_stats {
    uint64_t n_steps;                      /* slot-steps that fed proposals */
    uint64_t n_drafted;                    /* proposals fed and verified */
    uint64_t n_accepted;                   /* of those, accepted */
    uint64_t n_accepted_at[GEN_DRAFT_MAX]; /* [i]: slot-steps whose proposal i was accepted */
} gen_spec_stats;
void gen_batch_spec_stats(const gen_batch *b, gen_spec_stats *out);

/* Slots not ended yet (suspended ones included). */
int32_t gen_batch_n_active(const gen_batch *b);
/* Slots a step would feed now. */
int32_t gen_batch_n_ready(const gen_batch *b);

/* End s at the next step (or now, when it is suspended) with GEN_CANCELLED
 * or GEN_STOP.  Call them from the stepping thread (a callback included). */
void gen_slot_cancel(gen_slot *s);
void gen_slot_stop(gen_slot *s);
/* A paused slot keeps its place but is not fed (a full event queue). */
void gen_slot_pause(gen_slot *s, int paused);
/* Gives up s's sequence: what it computed is published to the prefix
 * cache and the sequence is emptied for another slot.  A suspended slot
 * keeps its tokens, sampler and constraint state. */
void gen_slot_suspend(gen_batch *b, gen_slot *s);
/* Takes a free sequence again and picks up where s left off (cached blocks
 * spare recomputing most of it).  KILN_ERR_STATE when none is free. */
kiln_status gen_slot_resume(gen_batch *b, gen_slot *s);
int gen_slot_suspended(const gen_slot *s);

/* ------------------------------------------------------------ gen_sched */

/* The request gate a scheduler yields to (the engine's, engine.h).  A
 * ticket is the caller's handle of one admitted request. */
typedef struct gen_gate {
    /* 1 when an urgent request waits for a place and none is free. */
    int (*urgent_waiting)(void *user);
    /* Gives the ticket's place to the waiting urgent request and queues the
     * ticket to take one back ahead of every other waiter; returns at once. */
    void (*yield)(void *user, void *ticket);
    /* 1 once a yielded ticket holds a place again. */
    int (*regained)(void *user, void *ticket);
    /* 1 when the ticket's request must stop (its token, a teardown). */
    int (*cancelled)(void *user, void *ticket);
    void *user;
} gen_gate;

typedef struct gen_sched gen_sched;
typedef struct gen_req gen_req;

/* Events a request's queue holds before its slot pauses. */
#define GEN_QUEUE 32

/* Starts the scheduler thread over a new gen_batch on m and c (borrowed
 * until gen_sched_free).  gate may be NULL (no yields). */
kiln_status gen_sched_new(kiln_model *m, kiln_context *c, int32_t prefill_chunk, const gen_gate *gate, gen_sched **out);
/* The batch's proposer (gen_batch_set_proposer); call before the first
 * submit.  p is borrowed until gen_sched_free. */
void gen_sched_set_proposer(gen_sched *s, const gen_proposer *p);
/* Cancels every request, waits for the thread and frees.  Requests must
 * have been freed (gen_req_free) before. */
void gen_sched_free(gen_sched *s);

/* Asks every request to end (GEN_CANCELLED); any thread. */
void gen_sched_cancel_all(gen_sched *s);
/* Queues p (its on_event is not used: events go to the request's queue);
 * it starts when a sequence is free, oldest first.  urgent requests are
 * never the ones yielded to the gate; ticket goes to the gate's hooks. */
kiln_status gen_sched_submit(gen_sched *s, const gen_params *p, int urgent, void *ticket, gen_req **out);
/* The next event, waiting up to timeout_ms (< 0: no limit): 1 with *ev set,
 * 0 on timeout.  After the DONE event it returns that event again. */
int gen_req_next(gen_req *q, gen_event *ev, int timeout_ms);
/* End the request (GEN_CANCELLED / GEN_STOP); any thread. */
void gen_req_cancel(gen_req *q);
void gen_req_stop(gen_req *q);
/* Cancels q unless it is done, waits until its slot is gone and frees q. */
void gen_req_free(gen_req *q);

typedef struct gen_sched_stats {
    int32_t n_running;   /* requests holding a sequence */
    int32_t n_waiting;   /* queued or yielded */
    kiln_kv_stats kv;    /* as of the latest step */
    gen_spec_stats spec; /* as of the latest step */
} gen_sched_stats;
void gen_sched_get_stats(gen_sched *s, gen_sched_stats *out);

#endif
