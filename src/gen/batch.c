/* gen_batch: slots over one context, one forward per step (gen.h). */
#include "gen/gen.h"

#include "base/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Acceptance rates are running means with this weight per step on the
 * past, so a slot that leaves a quoted passage stops speculating within a
 * few steps. */
#define SPEC_DECAY 0.85
/* The prior of a new slot: SPEC_PRIOR_N proposals, SPEC_PRIOR_A of them
 * accepted (hopeful, so the first steps try).  It decays with the steps
 * like what is observed, so proposals that are always right take the rate
 * to 1 (and the length to its most). */
#define SPEC_PRIOR_A 1.2
#define SPEC_PRIOR_N 2.0
/* An expensive proposer whose length came out 0 is tried with one
 * proposal once in this many steps. */
#define SPEC_PROBE_EVERY 8

struct gen_slot {
    gen_batch *b;
    gen_params p; /* prompt points into tok */
    int32_t seq;  /* -1 while suspended */
    int32_t *tok; /* [cap_tok]: prompt, then sampled tokens */
    int32_t n_tok, cap_tok;
    int32_t n_fed; /* of tok, held by the sequence */
    int32_t n_gen;
    int32_t n_cached;
    int prefilled; /* the prompt was fed whole once */
    int paused;
    gen_reason end_req; /* an end asked for (cancel, stop), done at the next step */
    kiln_sampler *smp;
    int32_t draft[GEN_DRAFT_MAX];
    int32_t n_drafts;              /* proposals fed this step */
    const gen_dist *dist;          /* what they were drawn from, or NULL (gen_ask) */
    int32_t n_shadow;              /* proposals asked for but not fed (adaptive length 0) */
    int32_t ask;                   /* proposals asked for this step */
    int shadow;                    /* they are only compared with the sampled token, not fed */
    double acc_a, acc_n;           /* accepted and verified proposals (the prior included), decayed by SPEC_DECAY */
    int32_t since_probe;           /* steps since an expensive proposer was last tried */
    int32_t n_drafted, n_accepted; /* proposals fed and accepted, in total */
    int32_t b_first, b_count;      /* this step's rows in the batch */
    int decoding;                  /* this step feeds the last token (and drafts) */
    double t_start;                /* when it first took a sequence */
    /* reasoning (p.think) */
    sample_think th;                      /* where the generated text is: before, in or after the block */
    int32_t n_think;                      /* tokens generated inside the block */
    int32_t think_end[GEN_THINK_END_MAX]; /* the block's forced end (p.think_budget) */
    int32_t n_think_end;                  /* its tokens; 0: it has none */
    int32_t n_force, i_force;             /* think_end[i_force..n_force) are still to be fed */
    int32_t rep[GEN_REPEAT_PERIOD + 1];   /* [p]: tokens equal to the one p before, in a row (the guard) */
    gen_slot *prev, *next;                /* every slot not ended */
    /* images (p.embd): the rows, and each prompt token's row (-1: text) */
    float *embd;   /* [n_embd_rows][n_embd] */
    int32_t *row;  /* [n_prompt] */
    int32_t *mpos; /* [n_prompt][4], or NULL */
};

struct gen_batch {
    kiln_model *m;
    kiln_context *c;
    int32_t n_seq, n_batch, n_ctx, n_vocab, n_embd, prefill_chunk;
    gen_slot **by_seq;     /* [n_seq] the slot on each sequence */
    gen_slot *head, *tail; /* in the order they were added */
    int32_t n_active;
    int32_t *b_tok, *b_seq; /* [n_batch] the step being built */
    int8_t *b_want;
    float *b_embd;              /* [n_batch][n_embd] the step's image rows, made with the first slot that has images */
    int32_t *b_mpos;            /* [n_batch][4] the step's multimodal positions, likewise */
    int b_has_embd, b_has_mpos; /* this step carries some */
    float *scratch;             /* [n_vocab] masked logits */
    float *scratch2;            /* [n_vocab] residual weights (verify_drawn) */
    float *qd;                  /* [n_vocab] a draft distribution scattered, zero between uses */
    int32_t *eog;               /* end-of-generation ids, for ignore_eos */
    int32_t n_eog;
    /* speculative decoding */
    const gen_proposer *prop;
    gen_ask *asks;       /* [n_seq] this step's asks of prop */
    gen_slot **ask_slot; /* [n_seq] whose they are */
    /* the cost model of adaptive length: decayed sums over steps that fed
     * only decode rows, of 1, rows, rows^2, seconds and rows * seconds */
    double cw, cn, cnn, ct, cnt;
    double t_prop; /* seconds per proposal asked of prop (decayed mean); -1: none yet */
    gen_spec_stats st;
};

const char *gen_reason_str(gen_reason r) {
    static const char *const names[] = {"running",         "stop",      "length", "cancelled", "failed",
                                        "thinking_budget", "repetition"};
    return (unsigned)r < sizeof names / sizeof names[0] ? names[r] : "unknown";
}

gen_params gen_params_default(void) {
    gen_params p;
    memset(&p, 0, sizeof p);
    p.n_predict = -1;
    p.sampler = kiln_sampler_default_params();
    p.n_top = -1;
    p.think_budget = -1;
    return p;
}

kiln_status gen_batch_new(kiln_model *m, kiln_context *c, int32_t prefill_chunk, gen_batch **out) {
    *out = NULL;
    gen_batch *b = calloc(1, sizeof *b);
    if (!b) return KILN_ERR_NOMEM;
    kiln_model_info info;
    kiln_model_get_info(m, &info);
    b->m = m;
    b->c = c;
    b->n_seq = kiln_context_n_seq_max(c);
    b->n_batch = kiln_context_n_batch(c);
    b->n_ctx = kiln_context_n_ctx(c);
    b->n_vocab = info.n_vocab;
    b->n_embd = info.n_embd_inp;
    b->prefill_chunk = prefill_chunk > 0 && prefill_chunk < b->n_batch ? prefill_chunk : b->n_batch;
    b->by_seq = calloc((size_t)b->n_seq, sizeof *b->by_seq);
    b->b_tok = malloc((size_t)b->n_batch * sizeof *b->b_tok);
    b->b_seq = malloc((size_t)b->n_batch * sizeof *b->b_seq);
    b->b_want = malloc((size_t)b->n_batch);
    b->scratch = malloc((size_t)b->n_vocab * sizeof *b->scratch);
    b->scratch2 = malloc((size_t)b->n_vocab * sizeof *b->scratch2);
    b->qd = calloc((size_t)b->n_vocab, sizeof *b->qd);
    b->asks = calloc((size_t)b->n_seq, sizeof *b->asks);
    b->ask_slot = calloc((size_t)b->n_seq, sizeof *b->ask_slot);
    b->t_prop = -1;
    for (int32_t id = 0; id < b->n_vocab; id++) b->n_eog += kiln_token_is_eog(m, id) != 0;
    b->eog = malloc((size_t)(b->n_eog ? b->n_eog : 1) * sizeof *b->eog);
    if (!b->by_seq || !b->b_tok || !b->b_seq || !b->b_want || !b->scratch || !b->scratch2 || !b->qd || !b->asks ||
        !b->ask_slot || !b->eog) {
        gen_batch_free(b);
        return KILN_ERR_NOMEM;
    }
    b->n_eog = 0;
    for (int32_t id = 0; id < b->n_vocab; id++)
        if (kiln_token_is_eog(m, id)) b->eog[b->n_eog++] = id;
    *out = b;
    return KILN_OK;
}

/* ---------------------------------------------------------------- slots */

#ifdef KILN_CHECKS
/* The slots, walked between steps in a checked build (KILN_CHECKS, base.h):
 * n_active counts the list; a slot is suspended (seq -1) or the one on its
 * sequence, and each taken sequence's slot names it; the sequence holds
 * exactly the n_fed tokens fed of the slot's n_tok (within cap_tok); no
 * slot keeps rows of a finished step. */
static void batch_check(const gen_batch *b) {
    int32_t n = 0, n_placed = 0;
    for (const gen_slot *s = b->head; s; s = s->next) {
        KILN_ASSERT(++n <= b->n_active && s->next != s && (s->next == NULL) == (s == b->tail));
        KILN_ASSERT(s->n_fed >= 0 && s->n_fed <= s->n_tok && s->n_tok <= s->cap_tok && s->b_count == 0);
        if (s->seq < 0) continue;
        KILN_ASSERT(s->seq < b->n_seq && b->by_seq[s->seq] == s && kiln_seq_len(b->c, s->seq) == s->n_fed);
        n_placed++;
    }
    KILN_ASSERT(n == b->n_active);
    for (int32_t q = 0; q < b->n_seq; q++) {
        KILN_ASSERT(!b->by_seq[q] || b->by_seq[q]->seq == q);
        n_placed -= b->by_seq[q] != NULL;
    }
    KILN_ASSERT(n_placed == 0);
}
#define BATCH_CHECK(b) batch_check(b)
#else
#define BATCH_CHECK(b) ((void)0)
#endif

static void emit_done(gen_slot *s, gen_reason reason, const char *err) {
    if (!s->p.on_event) return;
    gen_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = GEN_EV_DONE;
    ev.reason = reason;
    ev.error = err ? err : "";
    ev.n_prompt = s->p.n_prompt;
    ev.n_cached = s->n_cached;
    ev.n_gen = s->n_gen;
    ev.t = base_now();
    ev.t_start = s->t_start;
    ev.n_drafted = s->n_drafted;
    ev.n_accepted = s->n_accepted;
    s->p.on_event(s->p.user, &ev, NULL);
}

/* Ends s: its blocks go to the prefix cache (unless the forward failed),
 * its sequence is emptied unless kept, and its DONE event goes out. */
static void finish(gen_batch *b, gen_slot *s, gen_reason reason, const char *err) {
    if (s->seq >= 0) {
        if (reason != GEN_FAILED && s->p.reuse) kiln_seq_cache(b->c, s->seq, s->tok, s->n_fed);
        if (!s->p.keep || reason == GEN_FAILED) kiln_seq_truncate(b->c, s->seq, 0);
        b->by_seq[s->seq] = NULL;
    }
    if (s->prev)
        s->prev->next = s->next;
    else
        b->head = s->next;
    if (s->next)
        s->next->prev = s->prev;
    else
        b->tail = s->prev;
    b->n_active--;
    emit_done(s, reason, err);
    kiln_sampler_free(s->smp);
    free(s->tok);
    free(s->embd);
    free(s->row);
    free(s->mpos);
    free(s);
}

void gen_batch_free(gen_batch *b) {
    if (!b) return;
    while (b->head) finish(b, b->head, GEN_CANCELLED, NULL);
    free(b->by_seq);
    free(b->b_tok);
    free(b->b_seq);
    free(b->b_want);
    free(b->b_embd);
    free(b->b_mpos);
    free(b->scratch);
    free(b->scratch2);
    free(b->qd);
    free(b->asks);
    free(b->ask_slot);
    free(b->eog);
    free(b);
}

void gen_batch_set_proposer(gen_batch *b, const gen_proposer *p) { b->prop = p; }

void gen_batch_spec_stats(const gen_batch *b, gen_spec_stats *out) { *out = b->st; }

static int32_t free_seq(const gen_batch *b) {
    for (int32_t i = 0; i < b->n_seq; i++)
        if (!b->by_seq[i]) return i;
    return -1;
}

/* The slot's copy of its prompt's images (p->embd, p->mpos) and each
 * prompt token's row; checks every image fits a batch and that the rows
 * are there.  Images turn speculation off. */
static kiln_status slot_images(gen_batch *b, gen_slot *s, const gen_params *p) {
    int32_t n_neg = 0, run = 0;
    for (int32_t i = 0; i < p->n_prompt; i++) {
        run = p->prompt[i] < 0 ? run + 1 : 0;
        n_neg += p->prompt[i] < 0;
        if (run > b->n_batch)
            return base_fail(KILN_ERR_INVALID_ARG, "an image of more than %d tokens does not fit a batch of %d",
                             run - 1, b->n_batch);
    }
    if (!n_neg && !p->mpos) return KILN_OK;
    if (n_neg && (!p->embd || p->n_embd_rows != n_neg))
        return base_fail(KILN_ERR_INVALID_ARG, "the prompt has %d image tokens and %d embedding rows", n_neg,
                         p->embd ? p->n_embd_rows : 0);
    const size_t E = (size_t)b->n_embd;
    if ((n_neg && !b->b_embd && !(b->b_embd = base_malloc((size_t)b->n_batch * E * sizeof(float)))) ||
        (p->mpos && !b->b_mpos && !(b->b_mpos = base_malloc((size_t)b->n_batch * 4 * sizeof(int32_t)))))
        return base_fail(KILN_ERR_NOMEM, "out of memory");
    if (n_neg) {
        s->embd = base_malloc((size_t)n_neg * E * sizeof(float));
        s->row = base_malloc((size_t)p->n_prompt * sizeof *s->row);
        if (!s->embd || !s->row) return base_fail(KILN_ERR_NOMEM, "out of memory");
        memcpy(s->embd, p->embd, (size_t)n_neg * E * sizeof(float));
        for (int32_t i = 0, k = 0; i < p->n_prompt; i++) s->row[i] = p->prompt[i] < 0 ? k++ : -1;
    }
    if (p->mpos) {
        s->mpos = base_malloc((size_t)p->n_prompt * 4 * sizeof *s->mpos);
        if (!s->mpos) return base_fail(KILN_ERR_NOMEM, "out of memory");
        memcpy(s->mpos, p->mpos, (size_t)p->n_prompt * 4 * sizeof *s->mpos);
    }
    s->p.n_draft = 0;
    s->p.embd = NULL;
    s->p.mpos = NULL;
    return KILN_OK;
}

kiln_status gen_batch_add(gen_batch *b, const gen_params *p, int32_t seq, gen_slot **out) {
    if (out) *out = NULL;
    if (!p || !p->prompt || p->n_prompt < 1) return KILN_ERR_INVALID_ARG;
    if (p->n_prompt > b->n_ctx) return KILN_ERR_CONTEXT_FULL;
    if (p->n_top > SAMPLE_TOP_MAX) return KILN_ERR_INVALID_ARG;
    if (seq < 0) seq = free_seq(b);
    if (seq < 0 || seq >= b->n_seq || b->by_seq[seq]) return KILN_ERR_STATE;
    if (p->n_past > 0 && kiln_seq_len(b->c, seq) < p->n_past) return KILN_ERR_INVALID_ARG;
    gen_slot *s = calloc(1, sizeof *s);
    if (!s) return KILN_ERR_NOMEM;
    s->b = b;
    s->acc_a = SPEC_PRIOR_A;
    s->acc_n = SPEC_PRIOR_N;
    s->p = *p;
    if (s->p.n_draft > GEN_DRAFT_MAX) s->p.n_draft = GEN_DRAFT_MAX;
    if (s->p.n_draft < 0 || (!s->p.draft && !b->prop)) s->p.n_draft = 0;
    /* room for every token the slot can hold: the prompt, what it may
     * generate, and the one sampled when the context is full */
    int64_t cap = p->n_predict >= 0 ? (int64_t)p->n_prompt + p->n_predict : (int64_t)b->n_ctx + 1;
    if (cap > (int64_t)b->n_ctx + 1) cap = (int64_t)b->n_ctx + 1;
    if (cap < p->n_prompt) cap = p->n_prompt;
    s->cap_tok = (int32_t)cap;
    s->tok = malloc((size_t)s->cap_tok * sizeof *s->tok);
    if (!s->tok || kiln_sampler_new(&p->sampler, b->n_vocab, &s->smp) != KILN_OK) {
        free(s->tok);
        free(s);
        return KILN_ERR_NOMEM;
    }
    memcpy(s->tok, p->prompt, (size_t)p->n_prompt * sizeof *s->tok);
    s->n_tok = p->n_prompt;
    kiln_status ist = slot_images(b, s, p);
    if (ist != KILN_OK) {
        kiln_sampler_free(s->smp);
        free(s->tok);
        free(s->embd);
        free(s->row);
        free(s->mpos);
        free(s);
        return ist;
    }
    if (p->think) {
        sample_think_init(&s->th, NULL, p->think);
        if (p->think_budget >= 0) {
            static const char end[] = "\n</think>\n\n";
            const int n = kiln_tokenize(b->m, end, sizeof end - 1, 0, 1, s->think_end, GEN_THINK_END_MAX);
            s->n_think_end = n > 0 && n <= GEN_THINK_END_MAX ? n : 0;
        }
    }
    s->p.prompt = s->tok;
    for (int32_t i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] >= 0) kiln_sampler_accept(s->smp, p->prompt[i]); /* images are not in the history */
    /* what the sequence already holds: the caller's prefix, or cached
     * blocks; at least the last prompt token is fed */
    if (p->n_past > 0) {
        s->n_fed = p->n_past < p->n_prompt ? p->n_past : p->n_prompt - 1;
        s->n_fed = kiln_seq_truncate_point(b->c, seq, s->n_fed); /* a recurrent state resumes at a snapshot */
        kiln_seq_truncate(b->c, seq, s->n_fed);
    } else {
        kiln_seq_truncate(b->c, seq, 0);
        if (p->reuse) {
            int32_t got = kiln_seq_reuse(b->c, seq, s->tok, s->n_tok);
            s->n_fed = got > 0 ? got : 0;
            s->n_cached = s->n_fed;
        }
    }
    s->seq = seq;
    s->t_start = base_now();
    b->by_seq[seq] = s;
    s->prev = b->tail;
    if (b->tail)
        b->tail->next = s;
    else
        b->head = s;
    b->tail = s;
    b->n_active++;
    BATCH_CHECK(b);
    if (out) *out = s;
    return KILN_OK;
}

void gen_slot_cancel(gen_slot *s) {
    if (s->end_req == GEN_RUNNING) s->end_req = GEN_CANCELLED;
}

void gen_slot_stop(gen_slot *s) {
    if (s->end_req == GEN_RUNNING) s->end_req = GEN_STOP;
}

void gen_slot_pause(gen_slot *s, int paused) { s->paused = paused; }

int gen_slot_suspended(const gen_slot *s) { return s->seq < 0; }

void gen_slot_suspend(gen_batch *b, gen_slot *s) {
    if (s->seq < 0) return;
    kiln_seq_cache(b->c, s->seq, s->tok, s->n_fed);
    kiln_seq_truncate(b->c, s->seq, 0);
    b->by_seq[s->seq] = NULL;
    s->seq = -1;
    s->n_fed = 0;
    BATCH_CHECK(b);
}

kiln_status gen_slot_resume(gen_batch *b, gen_slot *s) {
    if (s->seq >= 0) return KILN_OK;
    int32_t seq = free_seq(b);
    if (seq < 0) return KILN_ERR_STATE;
    kiln_seq_truncate(b->c, seq, 0);
    int32_t got = kiln_seq_reuse(b->c, seq, s->tok, s->n_tok);
    s->n_fed = got > 0 ? got : 0;
    s->seq = seq;
    b->by_seq[seq] = s;
    BATCH_CHECK(b);
    return KILN_OK;
}

int32_t gen_batch_n_active(const gen_batch *b) { return b->n_active; }

int32_t gen_batch_n_ready(const gen_batch *b) {
    int32_t n = 0;
    for (const gen_slot *s = b->head; s; s = s->next)
        n += s->end_req != GEN_RUNNING || (s->seq >= 0 && !s->paused && s->n_fed < s->n_tok);
    return n;
}

/* ----------------------------------------------------------------- step */

/* The end of a slot whose constraint allows no token: the text so far is
 * no whole value of it, so it is a failure, never a finished reply. */
static const char k_dead_end[] =
    "constrained generation failed: no token of the vocabulary continues the text the constraint allows";

/* The next token of s from logits: the constraint's choice, else the
 * sampler's, with end-of-generation tokens masked for ignore_eos (drawn
 * again from the rest only when one came out: the same distribution as
 * masking first, without a copy per token).  The sampler and the
 * constraint then take it.  -1 when the constraint allows none. */
static int32_t choose(gen_batch *b, gen_slot *s, const float *logits) {
    int32_t id;
    if (s->i_force < s->n_force) {
        id = s->think_end[s->i_force++]; /* the end of a reasoning block over its budget */
    } else if (s->p.constraint) {
        id = sample_constrained(s->smp, b->m, b->n_vocab, logits, b->scratch, s->p.constraint);
        if (id < 0) return -1;
    } else {
        id = kiln_sampler_sample(s->smp, logits);
        if (s->p.ignore_eos && b->n_eog && kiln_token_is_eog(b->m, id)) {
            memcpy(b->scratch, logits, (size_t)b->n_vocab * sizeof(float));
            for (int32_t i = 0; i < b->n_eog; i++) b->scratch[b->eog[i]] = -1e30f;
            id = kiln_sampler_sample(s->smp, b->scratch);
        }
    }
    kiln_sampler_accept(s->smp, id);
    if (s->p.constraint) sample_constraint_accept(s->p.constraint, b->m, id);
    return id;
}

/* Follows the reasoning block past token id; a token that began inside
 * the block counts against the budget. */
static void think_track(gen_batch *b, gen_slot *s, int32_t id) {
    if (sample_think_in_block(&s->th)) s->n_think++;
    char piece[SAMPLE_PIECE_MAX];
    const int n = kiln_token_to_piece(b->m, id, piece, sizeof piece, 0); /* as constraints read tokens */
    if (n > 0 && n <= (int)sizeof piece) sample_think_accept(&s->th, piece, n);
}

/* Before the next token: when the block has used its budget, starts
 * feeding its end.  1 when that cannot be done: no tokens for it, or no
 * room for them and one token of the answer within n_predict and the
 * context. */
static int think_over_budget(const gen_batch *b, gen_slot *s) {
    if (!s->p.think || s->p.think_budget < 0 || s->n_force > 0 || !sample_think_in_block(&s->th) ||
        s->n_think < s->p.think_budget)
        return 0;
    int64_t room = (int64_t)b->n_ctx - s->n_tok;
    if (s->p.n_predict >= 0 && room > (int64_t)s->p.n_predict - s->n_gen) room = (int64_t)s->p.n_predict - s->n_gen;
    if (s->n_think_end == 0 || room < s->n_think_end + 1) return 1;
    s->n_force = s->n_think_end;
    s->i_force = 0;
    return 0;
}

/* The repetition guard after a token is appended: 1 when the generated
 * tokens end in a stretch of p.repeat_guard or more that repeats a period
 * of 1..GEN_REPEAT_PERIOD tokens. */
static int repeating(gen_slot *s) {
    const int32_t *g = s->tok + s->p.n_prompt, k = s->n_gen - 1;
    int hit = 0;
    for (int32_t p = 1; p <= GEN_REPEAT_PERIOD; p++) {
        if (p > k) {
            s->rep[p] = 0;
            continue;
        }
        s->rep[p] = g[k] == g[k - p] ? s->rep[p] + 1 : 0;
        hit |= s->rep[p] >= p && s->rep[p] + p >= s->p.repeat_guard; /* two periods at least */
    }
    return hit;
}

/* Sends a TOKEN event; returns the callback's answer. */
static int emit_token(gen_batch *b, gen_slot *s, int32_t id, const float *logits) {
    if (!s->p.on_event) return 0;
    gen_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = GEN_EV_TOKEN;
    ev.tok.id = id;
    if (s->p.n_top >= 0)
        ev.tok.n_top =
            sample_logprobs(logits, b->n_vocab, id, s->p.n_top, &ev.tok.logprob, ev.tok.top_id, ev.tok.top_lp);
    ev.n_prompt = s->p.n_prompt;
    ev.n_cached = s->n_cached;
    ev.n_gen = s->n_gen;
    ev.t = base_now();
    ev.t_start = s->t_start;
    ev.n_drafted = s->n_drafted;
    ev.n_accepted = s->n_accepted;
    return s->p.on_event(s->p.user, &ev, logits);
}

/* The rejection rule of speculative sampling (Leviathan, Kalman and
 * Matias 2023; Chen et al. 2023), for a proposal x drawn from a draft
 * distribution q, with p the distribution the slot's sampler draws from at
 * this position (sample_dist: penalties, top-k, top-p, min-p, temperature):
 *
 *   accept x with probability min(1, p(x) / q(x)); otherwise emit a token
 *   drawn from the residual r(y) = max(0, p(y) - q(y)) / sum_z max(0, p(z) - q(z)).
 *
 * Then P(emit y) = q(y) min(1, p(y)/q(y)) + (1 - sum_z min(p(z), q(z))) r(y)
 *               = min(p(y), q(y)) + max(0, p(y) - q(y)) = p(y),
 * because sum_z max(0, p(z) - q(z)) = 1 - sum_z min(p(z), q(z)): every
 * emitted token follows the target's distribution exactly, whatever q is,
 * and the run stops at the first rejection (later proposals were drawn
 * after a token that is no longer there).  A deterministic proposal is
 * the case q = one-hot(x): accept with probability p(x), else draw from p
 * without x, which is exactly what drawing y from p and comparing it with
 * x does, so those go through choose() with plain decoding's draws.  The
 * draws here come from the slot's own generator; tests/test_spec.c checks
 * the rule statistically.  Returns the emitted token (the sampler has
 * taken it). */
static int32_t verify_drawn(gen_batch *b, gen_slot *s, const float *logits, int32_t x, const gen_dist *q) {
    const float *lg = logits;
    if (s->p.ignore_eos && b->n_eog) { /* p as plain decoding masks it */
        memcpy(b->scratch, logits, (size_t)b->n_vocab * sizeof(float));
        for (int32_t i = 0; i < b->n_eog; i++) b->scratch[b->eog[i]] = -1e30f;
        lg = b->scratch;
    }
    const int32_t *pid;
    const float *pp;
    const int32_t n = sample_dist(s->smp, lg, &pid, &pp);
    float px = 0, qx = 0;
    for (int32_t i = 0; i < n; i++)
        if (pid[i] == x) {
            px = pp[i];
            break;
        }
    for (int32_t i = 0; i < q->n; i++)
        if (q->id[i] == x) {
            qx = q->p[i];
            break;
        }
    int32_t id;
    if (qx > 0 && sample_uniform(s->smp) * qx < px) {
        id = x;
    } else {
        for (int32_t i = 0; i < q->n; i++)
            if (q->id[i] >= 0 && q->id[i] < b->n_vocab) b->qd[q->id[i]] += q->p[i];
        for (int32_t i = 0; i < n; i++) {
            const float r = pp[i] - b->qd[pid[i]];
            b->scratch2[i] = r > 0 ? r : 0;
        }
        for (int32_t i = 0; i < q->n; i++)
            if (q->id[i] >= 0 && q->id[i] < b->n_vocab) b->qd[q->id[i]] = 0;
        const int32_t k = sample_pick(s->smp, b->scratch2, n);
        id = pid[k >= 0 ? k : 0]; /* no residual mass: only when p <= q, where x was certain */
    }
    kiln_sampler_accept(s->smp, id);
    return id;
}

static void note_acceptance(gen_slot *s, int32_t verified, int32_t accepted) {
    if (verified <= 0) return;
    s->acc_a = s->acc_a * SPEC_DECAY + accepted;
    s->acc_n = s->acc_n * SPEC_DECAY + verified;
}

/* After the forward: samples s from the logits of batch row `row` onward,
 * accepting proposals while the target agrees.  Returns the reason s ends,
 * or GEN_RUNNING. */
static gen_reason sample_run(gen_batch *b, gen_slot *s, int32_t row) {
    if (!s->prefilled) {
        s->prefilled = 1;
        if (s->p.reuse) kiln_seq_cache(b->c, s->seq, s->tok, s->n_fed); /* the prompt, for later requests */
    }
    if (s->p.n_predict == 0) return GEN_LENGTH; /* the prompt only */
    gen_reason why = GEN_RUNNING;
    int32_t j = 0, verified = 0; /* proposals accepted, and compared */
    const int drawn = s->dist && !s->p.constraint;
    for (;;) {
        if (think_over_budget(b, s)) {
            why = GEN_BUDGET;
            break;
        }
        const float *lg = kiln_get_logits(b->c, row);
        const int32_t id = drawn && j < s->n_drafts && s->i_force >= s->n_force
                               ? verify_drawn(b, s, lg, s->draft[j], &s->dist[j])
                               : choose(b, s, lg);
        if (id < 0) {
            why = GEN_FAILED; /* k_dead_end */
            break;
        }
        if (j == 0 && s->n_shadow > 0) note_acceptance(s, 1, id == s->draft[0]);
        if (kiln_token_is_eog(b->m, id)) {
            why = GEN_STOP;
            break;
        }
        s->n_gen++;
        s->tok[s->n_tok++] = id;
        if (s->p.think) think_track(b, s, id);
        const int asked = emit_token(b, s, id, lg);
        if (asked || s->end_req == GEN_STOP || (s->p.constraint && s->p.constraint->done(s->p.constraint->state)))
            why = GEN_STOP;
        else if (s->p.repeat_guard > 0 && repeating(s))
            why = GEN_REPEAT;
        else if (s->p.n_predict >= 0 && s->n_gen >= s->p.n_predict)
            why = GEN_LENGTH;
        else if (s->n_fed >= b->n_ctx)
            why = GEN_LENGTH; /* no room to feed it */
        if (why != GEN_RUNNING || j >= s->n_drafts) break;
        verified++;
        if (id != s->draft[j]) break;
        /* the proposal is this very token and already in the cache: the
         * next row's logits follow it */
        s->n_fed++;
        row++;
        j++;
    }
    /* proposals after the accepted ones leave the sequence (and, for a
     * recurrent model, the state goes back to where they began) */
    if (s->n_drafts > j) kiln_seq_truncate(b->c, s->seq, s->n_fed);
    if (s->n_drafts > 0) {
        note_acceptance(s, verified, j);
        s->n_drafted += s->n_drafts;
        s->n_accepted += j;
        b->st.n_steps++;
        b->st.n_drafted += (uint64_t)s->n_drafts;
        b->st.n_accepted += (uint64_t)j;
        for (int32_t i = 0; i < j; i++) b->st.n_accepted_at[i]++;
    }
    s->n_drafts = 0;
    s->n_shadow = 0;
    s->dist = NULL;
    return why;
}

/* Adds tok[from..from+k) of s to the batch at n, logits for rows whose
 * flag is set by want_all or for the last one when it ends the tokens. */
static int32_t put(gen_batch *b, int32_t n, const gen_slot *s, const int32_t *t, int32_t k, int want_all,
                   int want_last) {
    for (int32_t i = 0; i < k; i++) {
        b->b_tok[n + i] = t[i];
        b->b_seq[n + i] = s->seq;
        b->b_want[n + i] = (int8_t)(want_all || (want_last && i == k - 1));
    }
    /* a prompt's image rows and multimodal positions (t points into s->tok) */
    const int32_t at = t >= s->tok && t < s->tok + s->n_tok ? (int32_t)(t - s->tok) : -1;
    if (b->b_mpos)
        for (int32_t i = 0; i < k; i++) {
            int32_t *mp = b->b_mpos + (size_t)(n + i) * 4;
            if (s->mpos && at >= 0 && at + i < s->p.n_prompt) {
                memcpy(mp, s->mpos + (size_t)(at + i) * 4, 4 * sizeof *mp);
                b->b_has_mpos = 1;
            } else {
                mp[0] = mp[1] = mp[2] = mp[3] = -1; /* a text token */
            }
        }
    if (s->row && at >= 0) {
        const size_t E = (size_t)b->n_embd;
        for (int32_t i = 0; i < k && at + i < s->p.n_prompt; i++)
            if (s->row[at + i] >= 0) {
                memcpy(b->b_embd + (size_t)(n + i) * E, s->embd + (size_t)s->row[at + i] * E, E * sizeof(float));
                b->b_has_embd = 1;
            }
    }
    return n + k;
}

/* Tokens of s's prompt a step feeds from n_fed, at most k: never the first
 * part of an image without the rest (its tokens attend to each other), so
 * a chunk ends before an image that does not fit, or takes a whole image
 * that starts it (0 when that does not fit the room left). */
static int32_t chunk_len(const gen_slot *s, int32_t k, int32_t room) {
    const int32_t *t = s->tok;
    const int32_t e = s->n_fed + k;
    if (!s->row || e >= s->n_tok || t[e - 1] >= 0 || t[e] >= 0) return k;
    int32_t start = e - 1, end = e;
    while (start > s->n_fed && t[start - 1] < 0) start--;
    if (start > s->n_fed && t[start - 1] >= 0) return start - s->n_fed; /* up to the image */
    while (end < s->n_tok && t[end] < 0) end++;
    return end - s->n_fed <= room ? end - s->n_fed : 0;
}

/* The cost of a step as a + b * rows, fitted by least squares over the
 * decay-weighted steps so far (b->cw ... b->cnt); a and b into *pa, *pb.
 * With too little spread in the rows to tell b from a, b is a tenth of a
 * (a memory-bound step: reading the weights is most of it). */
static void step_fit(const gen_batch *b, double *pa, double *pb) {
    const double k0 = 0.1;
    *pa = *pb = 0;
    if (b->cw < 0.5) return;
    const double mn = b->cn / b->cw, mt = b->ct / b->cw, var = b->cnn / b->cw - mn * mn;
    double a, bb;
    if (var > 0.05) { /* noise may push the fit out of bounds: clamp it */
        bb = (b->cnt / b->cw - mn * mt) / var;
        a = mt - bb * mn;
        if (a < 0.05 * mt) {
            a = 0.05 * mt;
            bb = (mt - a) / mn;
        }
        if (bb < 0.01 * a) {
            bb = 0.01 * a;
            a = mt / (1 + 0.01 * mn);
        }
    } else {
        a = mt / (1 + k0 * mn);
        bb = k0 * a;
    }
    *pa = a;
    *pb = bb;
}

/* The costs of a row and of a proposal relative to a step's fixed part
 * (into *r and *rc); before any step is seen a row costs a tenth and a
 * proposal nothing. */
static void step_costs(const gen_batch *b, double *r, double *rc) {
    double a, bb;
    step_fit(b, &a, &bb);
    *r = a > 0 ? bb / a : 0.1;
    *rc = a > 0 && b->t_prop > 0 ? b->t_prop / a : 0;
}

/* Adds a step of rows decode rows that took dt seconds to the fit; a step
 * three times slower than the fit predicts (the machine was busy) counts
 * as three times. */
static void step_observe(gen_batch *b, int32_t rows, double dt) {
    double a, bb;
    step_fit(b, &a, &bb);
    const double pred = a + bb * rows;
    if (pred > 0 && dt > 3 * pred) dt = 3 * pred;
    const double g = 0.97;
    b->cw = b->cw * g + 1;
    b->cn = b->cn * g + rows;
    b->cnn = b->cnn * g + (double)rows * rows;
    b->ct = b->ct * g + dt;
    b->cnt = b->cnt * g + rows * dt;
}

/* The adaptive length: the number of proposals k <= room that maximizes
 * the expected tokens per unit of time of the step,
 *     (n_dec - 1 + sum_{i=0..k} alpha^i) / (1 + r (rows + k) + rc k),
 * with alpha the slot's acceptance rate, n_dec the decoding slots, rows
 * the rows the step already holds, r and rc the costs of a row and of a
 * proposal relative to a step's fixed part (step_costs). */
static int32_t adaptive_len(const gen_slot *s, int32_t room, int32_t n_dec, int32_t rows, double r, double rc) {
    const double alpha = s->acc_a / s->acc_n;
    double e = n_dec, ai = 1, best = e / (1 + r * rows);
    int32_t best_k = 0;
    for (int32_t k = 1; k <= room; k++) {
        ai *= alpha;
        e += ai;
        const double v = e / (1 + r * (rows + k) + rc * k);
        if (v > best * 1.0001) {
            best = v;
            best_k = k;
        }
    }
    return best_k;
}

kiln_status gen_batch_step(gen_batch *b) {
    /* ends asked for since the last step (suspended slots included) */
    for (gen_slot *s = b->head, *nx; s; s = nx) {
        nx = s->next;
        if (s->end_req != GEN_RUNNING) finish(b, s, s->end_req, NULL);
    }
    /* the slots that decode this step (their last token, with proposals) */
    int32_t n_dec = 0;
    for (int32_t q = 0; q < b->n_seq; q++) {
        gen_slot *s = b->by_seq[q];
        if (s) s->decoding = !s->paused && s->n_tok - s->n_fed == 1 && s->prefilled;
        n_dec += s && s->decoding;
    }
    if (n_dec > b->n_batch) n_dec = b->n_batch;
    /* how many proposals each asks for: within the batch, the budget, the
     * context and the adaptive length */
    double r = 0, rc = 0;
    step_costs(b, &r, &rc);
    int32_t rows = n_dec, n_ask = 0, asked_total = 0;
    for (int32_t q = 0; q < b->n_seq; q++) {
        gen_slot *s = b->by_seq[q];
        if (!s || !s->decoding) continue;
        s->n_drafts = s->n_shadow = s->ask = s->shadow = 0;
        s->dist = NULL;
        if (s->p.n_draft <= 0) continue;
        /* each accepted proposal is one more token of budget and one more
         * cell of the context */
        int64_t room = (int64_t)b->n_batch - rows;
        if (room > s->p.n_draft) room = s->p.n_draft;
        if (s->p.n_predict >= 0 && room > (int64_t)s->p.n_predict - s->n_gen - 1)
            room = (int64_t)s->p.n_predict - s->n_gen - 1;
        if (room > (int64_t)b->n_ctx - s->n_fed - 1) room = (int64_t)b->n_ctx - s->n_fed - 1;
        if (room <= 0) continue;
        const int cheap = s->p.draft || (b->prop && b->prop->cheap);
        int32_t k = s->p.spec_fixed ? (int32_t)room : adaptive_len(s, (int32_t)room, n_dec, rows, r, rc);
        int shadow = 0;
        if (k == 0) {
            if (cheap)
                shadow = 1;
            else if (++s->since_probe < SPEC_PROBE_EVERY)
                continue;
            k = 1;
        }
        s->since_probe = 0;
        s->ask = k;
        s->shadow = shadow;
        if (s->p.draft) {
            const int32_t got = s->p.draft(s->p.draft_user, s->tok, s->n_tok, s->draft, k);
            s->n_drafts = got > 0 ? (got < k ? got : k) : 0;
        } else {
            gen_ask *a = &b->asks[n_ask];
            a->seq = s->seq;
            a->tok = s->tok;
            a->n_tok = s->n_tok;
            a->max = k;
            a->sampler = &s->p.sampler;
            a->n = 0;
            a->draft = s->draft;
            a->dist = NULL;
            b->ask_slot[n_ask++] = s;
            asked_total += k;
        }
        if (!shadow) rows += k;
    }
    if (n_ask) {
        const double t0 = base_now();
        b->prop->propose(b->prop->self, b->asks, n_ask);
        const double per = (base_now() - t0) / asked_total;
        b->t_prop = b->t_prop < 0 ? per : 0.8 * b->t_prop + 0.2 * per;
        for (int32_t i = 0; i < n_ask; i++) {
            gen_slot *s = b->ask_slot[i];
            const gen_ask *a = &b->asks[i];
            s->n_drafts = a->n > 0 ? (a->n < a->max ? a->n : a->max) : 0;
            s->dist = s->n_drafts ? a->dist : NULL;
        }
    }
    for (int32_t q = 0; q < b->n_seq; q++) {
        gen_slot *s = b->by_seq[q];
        if (s && s->decoding && s->shadow) { /* seen, not fed */
            s->n_shadow = s->n_drafts;
            s->n_drafts = 0;
            s->dist = NULL;
        }
    }
    /* decode rows first (each generating slot's last token, with its
     * proposals), then prompt chunks, in sequence order */
    int32_t n = 0;
    for (int32_t q = 0; q < b->n_seq && n < b->n_batch; q++) {
        gen_slot *s = b->by_seq[q];
        if (!s || !s->decoding) continue;
        s->b_first = n;
        if (s->n_drafts > b->n_batch - n - 1) s->n_drafts = b->n_batch - n - 1;
        n = put(b, n, s, &s->tok[s->n_tok - 1], 1, 1, 1);
        n = put(b, n, s, s->draft, s->n_drafts, 1, 1);
        s->b_count = n - s->b_first;
    }
    const int32_t n_decode_rows = n;
    for (int32_t q = 0; q < b->n_seq && n < b->n_batch; q++) {
        gen_slot *s = b->by_seq[q];
        if (!s || s->paused || s->decoding || s->n_fed >= s->n_tok) continue;
        int32_t k = s->n_tok - s->n_fed;
        if (k > b->prefill_chunk) k = b->prefill_chunk;
        if (k > b->n_batch - n) k = b->n_batch - n;
        k = chunk_len(s, k, b->n_batch - n);
        if (k <= 0) continue; /* an image waits for a step with room for it */
        s->b_first = n;
        n = put(b, n, s, &s->tok[s->n_fed], k, 0, s->n_fed + k == s->n_tok);
        s->b_count = k;
    }
    if (n == 0) return KILN_OK;
    kiln_batch kb = {n, b->b_tok, NULL, b->b_seq, b->b_want};
    const kiln_batch_inputs in = {b->b_has_embd ? b->b_embd : NULL, b->b_has_mpos ? b->b_mpos : NULL};
    b->b_has_embd = b->b_has_mpos = 0;
    const double t0 = base_now();
    kiln_status st = kiln_decode_inputs(b->c, &kb, in.embd || in.mpos ? &in : NULL);
    if (st != KILN_OK) {
        char msg[300];
        snprintf(msg, sizeof msg, "decode failed: %s", kiln_context_error(b->c));
        for (gen_slot *s = b->head, *nx; s; s = nx) {
            nx = s->next;
            if (s->b_count > 0) finish(b, s, GEN_FAILED, msg);
        }
        BATCH_CHECK(b);
        return st;
    }
    if (n == n_decode_rows) step_observe(b, n, base_now() - t0); /* the cost model: decode rows only */
    for (gen_slot *s = b->head, *nx; s; s = nx) {
        nx = s->next;
        if (s->b_count <= 0) continue;
        const int32_t last = s->b_first + s->b_count - 1;
        gen_reason why = GEN_RUNNING;
        if (s->decoding) {
            s->n_fed++; /* the last token; proposals count as they are accepted */
            why = sample_run(b, s, s->b_first);
        } else {
            s->n_fed += s->b_count;
            if (s->n_fed == s->n_tok) why = sample_run(b, s, last);
        }
        s->b_count = 0;
        s->decoding = 0;
        if (why != GEN_RUNNING) finish(b, s, why, why == GEN_FAILED ? k_dead_end : NULL);
    }
    BATCH_CHECK(b);
    return KILN_OK;
}
