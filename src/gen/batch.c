/* gen_batch: slots over one context, one forward per step (gen.h). */
#include "gen/gen.h"

#include "base/base.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct gen_slot {
    gen_batch *b;
    gen_params p;             /* prompt points into tok */
    int32_t seq;              /* -1 while suspended */
    int32_t *tok;             /* [cap_tok]: prompt, then sampled tokens */
    int32_t n_tok, cap_tok;
    int32_t n_fed;            /* of tok, held by the sequence */
    int32_t n_gen;
    int32_t n_cached;
    int prefilled;            /* the prompt was fed whole once */
    int paused;
    gen_reason end_req;       /* an end asked for (cancel, stop), done at the next step */
    kiln_sampler *smp;
    int32_t draft[GEN_DRAFT_MAX];
    int32_t n_drafts;         /* proposals fed this step */
    int32_t b_first, b_count; /* this step's rows in the batch */
    int decoding;             /* this step feeds the last token (and drafts) */
    double t_start;           /* when it first took a sequence */
    gen_slot *prev, *next;    /* every slot not ended */
};

struct gen_batch {
    kiln_model *m;
    kiln_context *c;
    int32_t n_seq, n_batch, n_ctx, n_vocab, prefill_chunk;
    gen_slot **by_seq;        /* [n_seq] the slot on each sequence */
    gen_slot *head, *tail;    /* in the order they were added */
    int32_t n_active;
    int32_t *b_tok, *b_seq;   /* [n_batch] the step being built */
    int8_t *b_want;
    float *scratch;           /* [n_vocab] masked logits */
    int32_t *eog;             /* end-of-generation ids, for ignore_eos */
    int32_t n_eog;
};

const char *gen_reason_str(gen_reason r) {
    static const char *const names[] = {"running", "stop", "length", "cancelled", "failed"};
    return (unsigned)r < sizeof names / sizeof names[0] ? names[r] : "unknown";
}

gen_params gen_params_default(void) {
    gen_params p;
    memset(&p, 0, sizeof p);
    p.n_predict = -1;
    p.sampler = kiln_sampler_default_params();
    p.n_top = -1;
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
    b->prefill_chunk = prefill_chunk > 0 && prefill_chunk < b->n_batch ? prefill_chunk : b->n_batch;
    b->by_seq = calloc((size_t)b->n_seq, sizeof *b->by_seq);
    b->b_tok = malloc((size_t)b->n_batch * sizeof *b->b_tok);
    b->b_seq = malloc((size_t)b->n_batch * sizeof *b->b_seq);
    b->b_want = malloc((size_t)b->n_batch);
    b->scratch = malloc((size_t)b->n_vocab * sizeof *b->scratch);
    for (int32_t id = 0; id < b->n_vocab; id++) b->n_eog += kiln_token_is_eog(m, id) != 0;
    b->eog = malloc((size_t)(b->n_eog ? b->n_eog : 1) * sizeof *b->eog);
    if (!b->by_seq || !b->b_tok || !b->b_seq || !b->b_want || !b->scratch || !b->eog) {
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
    ev.t = kb_now();
    ev.t_start = s->t_start;
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
    if (s->prev) s->prev->next = s->next;
    else b->head = s->next;
    if (s->next) s->next->prev = s->prev;
    else b->tail = s->prev;
    b->n_active--;
    emit_done(s, reason, err);
    kiln_sampler_free(s->smp);
    free(s->tok);
    free(s);
}

void gen_batch_free(gen_batch *b) {
    if (!b) return;
    while (b->head) finish(b, b->head, GEN_CANCELLED, NULL);
    free(b->by_seq);
    free(b->b_tok);
    free(b->b_seq);
    free(b->b_want);
    free(b->scratch);
    free(b->eog);
    free(b);
}

static int32_t free_seq(const gen_batch *b) {
    for (int32_t i = 0; i < b->n_seq; i++)
        if (!b->by_seq[i]) return i;
    return -1;
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
    s->p = *p;
    if (s->p.n_draft > GEN_DRAFT_MAX) s->p.n_draft = GEN_DRAFT_MAX;
    if (!s->p.draft) s->p.n_draft = 0;
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
    s->p.prompt = s->tok;
    for (int32_t i = 0; i < p->n_prompt; i++) kiln_sampler_accept(s->smp, p->prompt[i]);
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
    s->t_start = kb_now();
    b->by_seq[seq] = s;
    s->prev = b->tail;
    if (b->tail) b->tail->next = s;
    else b->head = s;
    b->tail = s;
    b->n_active++;
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

/* The next token of s from logits: the constraint's choice, else the
 * sampler's, with end-of-generation tokens masked for ignore_eos (drawn
 * again from the rest only when one came out: the same distribution as
 * masking first, without a copy per token).  The sampler and the
 * constraint then take it. */
static int32_t choose(gen_batch *b, gen_slot *s, const float *logits) {
    int32_t id;
    if (s->p.constraint) {
        id = sample_constrained(s->smp, b->m, b->n_vocab, logits, b->scratch, s->p.constraint);
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

/* Sends a TOKEN event; returns the callback's answer. */
static int emit_token(gen_batch *b, gen_slot *s, int32_t id, const float *logits) {
    if (!s->p.on_event) return 0;
    gen_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = GEN_EV_TOKEN;
    ev.tok.id = id;
    if (s->p.n_top >= 0)
        ev.tok.n_top = sample_logprobs(logits, b->n_vocab, id, s->p.n_top, &ev.tok.logprob, ev.tok.top_id,
                                       ev.tok.top_lp);
    ev.n_prompt = s->p.n_prompt;
    ev.n_cached = s->n_cached;
    ev.n_gen = s->n_gen;
    ev.t = kb_now();
    ev.t_start = s->t_start;
    return s->p.on_event(s->p.user, &ev, logits);
}

/* After the forward: samples s from the logits of batch row `row` onward,
 * accepting proposals while they match.  Returns the reason s ends, or
 * GEN_RUNNING. */
static gen_reason sample_run(gen_batch *b, gen_slot *s, int32_t row) {
    if (!s->prefilled) {
        s->prefilled = 1;
        if (s->p.reuse) kiln_seq_cache(b->c, s->seq, s->tok, s->n_fed); /* the prompt, for later requests */
    }
    if (s->p.n_predict == 0) return GEN_LENGTH; /* the prompt only */
    gen_reason why = GEN_RUNNING;
    int32_t j = 0; /* proposals accepted */
    for (;;) {
        const float *lg = kiln_get_logits(b->c, row);
        const int32_t id = choose(b, s, lg);
        if (kiln_token_is_eog(b->m, id)) {
            why = GEN_STOP;
            break;
        }
        s->n_gen++;
        s->tok[s->n_tok++] = id;
        const int asked = emit_token(b, s, id, lg);
        if (asked || s->end_req == GEN_STOP || (s->p.constraint && s->p.constraint->done(s->p.constraint->state)))
            why = GEN_STOP;
        else if (s->p.n_predict >= 0 && s->n_gen >= s->p.n_predict)
            why = GEN_LENGTH;
        else if (s->n_fed >= b->n_ctx)
            why = GEN_LENGTH; /* no room to feed it */
        if (why != GEN_RUNNING || j >= s->n_drafts || id != s->draft[j]) break;
        /* the proposal is this very token and already in the cache: the
         * next row's logits follow it */
        s->n_fed++;
        row++;
        j++;
    }
    /* proposals after the accepted ones leave the sequence */
    if (s->n_drafts > j) kiln_seq_truncate(b->c, s->seq, s->n_fed);
    s->n_drafts = 0;
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
    return n + k;
}

kiln_status gen_batch_step(gen_batch *b) {
    /* ends asked for since the last step (suspended slots included) */
    for (gen_slot *s = b->head, *nx; s; s = nx) {
        nx = s->next;
        if (s->end_req != GEN_RUNNING) finish(b, s, s->end_req, NULL);
    }
    /* decode rows first (each generating slot's last token, with its
     * proposals), then prompt chunks, in sequence order */
    int32_t n = 0;
    for (int32_t q = 0; q < b->n_seq && n < b->n_batch; q++) {
        gen_slot *s = b->by_seq[q];
        if (!s || s->paused || s->n_tok - s->n_fed != 1 || !s->prefilled) continue;
        s->b_first = n;
        s->decoding = 1;
        s->n_drafts = 0;
        if (s->p.n_draft > 0) {
            /* each accepted proposal is one more token of budget and one
             * more cell of the context */
            int64_t room = (int64_t)b->n_batch - n - 1;
            if (room > s->p.n_draft) room = s->p.n_draft;
            if (s->p.n_predict >= 0 && room > (int64_t)s->p.n_predict - s->n_gen - 1)
                room = (int64_t)s->p.n_predict - s->n_gen - 1;
            if (room > (int64_t)b->n_ctx - s->n_fed - 1) room = (int64_t)b->n_ctx - s->n_fed - 1;
            if (room > 0) {
                int32_t k = s->p.draft(s->p.draft_user, s->tok, s->n_tok, s->draft, (int32_t)room);
                s->n_drafts = k > 0 ? (k < room ? k : (int32_t)room) : 0;
            }
        }
        n = put(b, n, s, &s->tok[s->n_tok - 1], 1, 1, 1);
        n = put(b, n, s, s->draft, s->n_drafts, 1, 1);
        s->b_count = n - s->b_first;
    }
    for (int32_t q = 0; q < b->n_seq && n < b->n_batch; q++) {
        gen_slot *s = b->by_seq[q];
        if (!s || s->paused || s->n_fed >= s->n_tok || (s->n_tok - s->n_fed == 1 && s->prefilled)) continue;
        int32_t k = s->n_tok - s->n_fed;
        if (k > b->prefill_chunk) k = b->prefill_chunk;
        if (k > b->n_batch - n) k = b->n_batch - n;
        s->b_first = n;
        s->decoding = 0;
        n = put(b, n, s, &s->tok[s->n_fed], k, 0, s->n_fed + k == s->n_tok);
        s->b_count = k;
    }
    if (n == 0) return KILN_OK;
    kiln_batch kb = {n, b->b_tok, NULL, b->b_seq, b->b_want};
    kiln_status st = kiln_decode(b->c, &kb);
    if (st != KILN_OK) {
        char msg[300];
        snprintf(msg, sizeof msg, "decode failed: %s", kiln_context_error(b->c));
        for (gen_slot *s = b->head, *nx; s; s = nx) {
            nx = s->next;
            if (s->b_count > 0) finish(b, s, GEN_FAILED, msg);
        }
        return st;
    }
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
        if (why != GEN_RUNNING) finish(b, s, why, NULL);
    }
    return KILN_OK;
}
